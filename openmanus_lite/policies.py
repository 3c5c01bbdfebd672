"""Policies: what chooses the next assistant turn in an episode.

A policy maps a batch of conversations (and their live environments) to one assistant
turn each. Batching is part of the interface because a model policy is only fast when
it generates for many episodes in one forward pass; the expert and random policies read
the environment state instead of the text.
"""

from __future__ import annotations

import random
from typing import Callable, Protocol

from .envs.base import Env

Messages = list[dict[str, str]]


class Policy(Protocol):
    name: str

    def act_batch(self, histories: list[Messages], envs: list[Env]) -> list[str]:
        """One assistant turn for each (history, env) pair."""
        ...


class ExpertPolicy:
    """The environment's own expert solver (reads the state, not the text)."""

    name = "expert"

    def act_batch(self, histories: list[Messages], envs: list[Env]) -> list[str]:
        return [env.expert_action() for env in envs]


class RandomPolicy:
    """Random but well-formed actions: the baseline every trained policy must beat."""

    name = "random"

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)

    def act_batch(self, histories: list[Messages], envs: list[Env]) -> list[str]:
        return [env.random_action(self.rng) for env in envs]


class CallablePolicy:
    """Wraps any Python function `(messages) -> str` as a policy."""

    def __init__(self, fn: Callable[[Messages], str], name: str | None = None):
        self.fn = fn
        self.name = name or getattr(fn, "__name__", "callable")

    def act_batch(self, histories: list[Messages], envs: list[Env]) -> list[str]:
        return [self.fn(h) for h in histories]


def as_policy(obj) -> Policy:
    """Accept a policy, the strings 'expert' / 'random', or a plain callable."""
    if obj == "expert":
        return ExpertPolicy()
    if obj == "random":
        return RandomPolicy()
    if hasattr(obj, "act_batch"):
        return obj
    if callable(obj):
        return CallablePolicy(obj)
    raise TypeError(f"cannot use {obj!r} as a policy: pass a Policy, 'expert', 'random' or a callable")

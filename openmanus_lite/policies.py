"""Policies choose the next assistant turn for a batch of conversations at once (a model is only fast generating
many episodes in one forward pass); the expert and random policies read the environment state instead of the text."""

from __future__ import annotations

import collections
import hashlib
import json
import random
import sys
from typing import Callable, Protocol

from openmanus_lite.envs.base import Env

Messages = list[dict[str, str]]


class Policy(Protocol):
    name: str

    def act_batch(self, histories: list[Messages], envs: list[Env]) -> list[str]:
        """One assistant turn for each (history, env) pair; `None` ends that episode without a step."""
        ...


class ExpertPolicy:
    """The environment's own expert solver (reads the state, not the text)."""

    name = "expert"

    def act_batch(self, histories: list[Messages], envs: list[Env]) -> list[str]:
        return [env.expert_action() for env in envs]


class RandomPolicy:
    """Random but well-formed actions: the baseline every trained policy must beat. Each action's randomness comes
    from (seed, the conversation so far, how often asked in that state), not one shared stream: an episode plays the
    same whatever the batch size or the order episodes are scheduled in."""

    name = "random"

    def __init__(self, seed: int = 0):
        self.seed = seed
        self._asked: collections.Counter[str] = collections.Counter()

    def act_batch(self, histories: list[Messages], envs: list[Env]) -> list[str]:
        actions = []
        for history, env in zip(histories, envs):
            state = hashlib.sha256(json.dumps([self.seed, history], sort_keys=True).encode()).hexdigest()
            actions.append(env.random_action(random.Random(f"{state}:{self._asked[state]}")))
            self._asked[state] += 1
        return actions


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


class ModelPolicy:
    """A language model as a policy: `(model, tokenizer)` or a checkpoint path / hub name (`models.load_model`),
    generating through `generation.generate_turns` (greedy when `temperature` is 0). Counters for compute
    budgets: `generated_tokens` (eos included), `model_calls` and `turns_generated`. `kv_cache=True` keeps earlier
    turns' keys/values (`generation.PrefixCache`, emptied when the weights change), so each round encodes only the
    new observation; False encodes every prompt in full; a `PrefixCache(max_bytes=...)` sets another memory cap."""

    def __init__(self, model, tokenizer=None, *, name: str | None = None, max_new_tokens: int = 96,
                 temperature: float = 0.0, top_p: float = 1.0, seed: int = 0, batch_size: int = 16,
                 max_prompt_tokens: int | None = None, load_kwargs: dict | None = None, kv_cache=True):
        if isinstance(model, (str, bytes)) or hasattr(model, "__fspath__"):
            from openmanus_lite.models import load_model

            path = str(model)
            model, loaded_tok = load_model(path, **(load_kwargs or {}))
            tokenizer = tokenizer or loaded_tok
            name = name or path.rstrip("/").split("/")[-1]
        if tokenizer is None:
            raise TypeError("ModelPolicy(model, tokenizer): pass the tokenizer with a model object, or a path")
        self.model, self.tokenizer, self.name = model, tokenizer, name or "model"
        context = getattr(getattr(model, "config", None), "max_position_embeddings", None)
        if isinstance(context, int) and max_new_tokens > context:
            print(f"note: max_new_tokens {max_new_tokens} is more than the context of {self.name} ({context} tokens); "
                  f"using {context}", file=sys.stderr)
            max_new_tokens = context
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.seed = seed
        self.batch_size = batch_size
        self.max_prompt_tokens = max_prompt_tokens
        self.generated_tokens = self.model_calls = self.turns_generated = 0
        if kv_cache is True:
            from openmanus_lite.engine.generation import PrefixCache

            kv_cache = PrefixCache()
        # False or None: no cache; an empty PrefixCache is falsy (len 0), so test identity, not truth
        self.kv_cache = None if kv_cache is False else kv_cache
        self._weights_fingerprint = None

    def _generate(self, conversations: list[Messages], temperature: float):
        from openmanus_lite.engine.generation import generate_turns, weights_fingerprint

        if self.kv_cache is not None:  # emptied when training changed the weights since the last call
            now = weights_fingerprint(self.model)
            if now != self._weights_fingerprint:
                self.kv_cache.clear()
            self._weights_fingerprint = now
        result = generate_turns(
            self.model, self.tokenizer, conversations, max_new_tokens=self.max_new_tokens, temperature=temperature,
            top_p=self.top_p, batch_size=self.batch_size, max_prompt_tokens=self.max_prompt_tokens,
            # a fresh seed per call: repeated sampling of one history gives new candidates
            seed=self.seed + self.model_calls if temperature > 0 else None,
            # a truncated prompt is no longer an extension of the previous one
            kv_cache=self.kv_cache if not self.max_prompt_tokens else None)
        self.model_calls += 1
        self.turns_generated += len(conversations)
        self.generated_tokens += result.num_generated_tokens
        return result

    def act_batch(self, histories: list[Messages], envs: list[Env] | None = None) -> list[str]:
        """The next assistant turn for each history (envs are not read: the model sees only text)."""
        return self._generate(histories, self.temperature).texts

    def sample_batch(self, histories: list[Messages], n: int, temperature: float = 0.8) -> list[list[str]]:
        """`n` sampled candidate turns per history (for best-of-N and tree search), in one batched call."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if temperature <= 0:
            raise ValueError("sample_batch needs temperature > 0 (temperature 0 would give n identical turns)")
        flat = [h for h in histories for _ in range(n)]
        texts = self._generate(flat, temperature).texts
        return [texts[i * n:(i + 1) * n] for i in range(len(histories))]


def reply_tokens(policy: object, replies: list[str], before: int) -> list[int]:
    """Generated tokens of each reply of `policy`'s latest call (its `generated_tokens` was `before`): its
    `last_generated_tokens` when they add up to the growth, else the growth shared by reply length. Evaluation
    (`eval.TokenMeter`) and search (`search.PolicyProposer`) both charge replies this way."""
    delta = int(getattr(policy, "generated_tokens", 0) or 0) - before
    last = getattr(policy, "last_generated_tokens", None)
    if isinstance(last, (list, tuple)) and len(last) == len(replies) and sum(last) == delta:
        return [int(n) for n in last]
    return share(delta, [len(r or "") for r in replies])


def share(total: int, weights: list[int]) -> list[int]:
    """Split an integer total in proportion to weights (largest remainder; sums exactly to total)."""
    wsum = sum(weights)
    if wsum <= 0:  # equal shares (with no weights, every list below stays empty)
        weights, wsum = [1] * len(weights), len(weights)
    raw = [total * w / wsum for w in weights]
    out = [int(x) for x in raw]
    for i in sorted(range(len(raw)), key=lambda i: raw[i] - out[i], reverse=True)[: total - sum(out)]:
        out[i] += 1
    return out

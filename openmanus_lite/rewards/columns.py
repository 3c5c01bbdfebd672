"""What a reward reads: the column names, the text of a completion, and a column's values.

Completions are strings or message lists (a message without `role` counts as the assistant's; `content` may be a
string, None or text parts). A missing column is a ValueError that names it, never a silent zero."""

from __future__ import annotations

import math
from typing import Any, Mapping

SOLUTION = "solution"
ANSWER_TYPE = "answer_type"
ANSWER_ORDERED = "answer_ordered"
ENV_OUTCOME = "env_outcome"
ENV_SUCCESS = "env_success"
INVALID_ACTIONS = "invalid_actions"
NUM_TURNS = "num_turns"
DOMAIN = "domain"
# extra columns the multi-turn GRPO rollout passes to the rewards
ROLLOUT_COLUMNS: tuple[str, ...] = (ENV_OUTCOME, ENV_SUCCESS, INVALID_ACTIONS, NUM_TURNS, DOMAIN)
# what GRPOTrainer always passes besides the dataset columns (`environments` only in that mode)
TRAINER_KWARGS = frozenset({"prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric"})

COLUMN_HINTS = {
    SOLUTION: " (the gold answer of each prompt)",
    ENV_OUTCOME: " (the multi-turn rollout passes it; single-turn prompts have no environment)",
    ENV_SUCCESS: " (the multi-turn rollout passes it)",
    INVALID_ACTIONS: " (the multi-turn rollout passes it)",
    "completion_ids": " (GRPOTrainer passes it)",
}

# The hot paths below test `type(x) is dict/str` first: isinstance against the Mapping ABC costs
# more than the rest of a format check.


def _content(msg: Mapping) -> str:
    c = msg.get("content")
    if isinstance(c, list):  # multimodal parts: [{"type": "text", "text": ...}, ...]
        texts = (p.get("text") if isinstance(p, Mapping) else p for p in c)
        return "".join(t for t in texts if isinstance(t, str))
    return str(c) if isinstance(c, str) else ""


def _assistant_text(m: Any) -> str | None:
    """The text of one message of a list when it is the assistant's (a plain string is), else None."""
    if type(m) is dict or isinstance(m, Mapping):
        if m.get("role") not in (None, "assistant"):
            return None
        c = m.get("content")
        return c if type(c) is str else _content(m)
    return str(m) if isinstance(m, str) else None


def last_assistant_text(completion: Any) -> str:
    """The text of the completion's last assistant message ("" when it has none)."""
    if type(completion) is str:
        return completion
    if type(completion) is list or isinstance(completion, (list, tuple)):
        return next((t for t in map(_assistant_text, reversed(completion)) if t is not None), "")
    texts = assistant_texts(completion)
    return texts[-1] if texts else ""


def assistant_texts(completion: Any) -> list[str]:
    """The text of every assistant message, in order (a plain string is one message)."""
    if isinstance(completion, str):
        return [str(completion)]
    if type(completion) is list or isinstance(completion, (list, tuple)):
        return [t for t in map(_assistant_text, completion) if t is not None]
    if isinstance(completion, Mapping):
        return [_content(completion)] if completion.get("role") in (None, "assistant") else []
    if isinstance(completion, (bytes, bytearray)):
        return [bytes(completion).decode("utf-8", "replace")]
    return []


def completions_list(completions: Any, reward: str) -> list:
    """The `completions` argument as a list (TypeError when a caller forgot it)."""
    if completions is None:
        raise TypeError(f"reward {reward!r} needs completions=[...] (TRL passes it by keyword)")
    return completions if isinstance(completions, list) else list(completions)


def need(kwargs: Mapping[str, Any], name: str, n: int, reward: str) -> list:
    """Column `name` as a list of length n, or the configuration error."""
    if name not in kwargs or kwargs[name] is None:
        raise ValueError(
            f"reward {reward!r} needs the column {name!r}{COLUMN_HINTS.get(name, '')}, but it was not passed "
            f"(got: {', '.join(sorted(k for k in kwargs if k not in TRAINER_KWARGS)) or 'no columns'}). "
            "Run check_reward_columns(...) before training to catch this early."
        )
    return as_list(kwargs[name], n, name, reward)


def optional(kwargs: Mapping[str, Any], name: str, n: int, reward: str) -> list:
    """Column `name` as a list of length n; n Nones when it was not passed."""
    v = kwargs.get(name)
    return [None] * n if v is None else as_list(v, n, name, reward)


def as_list(v: Any, n: int, name: str, reward: str) -> list:
    if isinstance(v, (str, bytes, Mapping)) or not hasattr(v, "__len__"):
        return [v] * n  # one value for the whole batch
    v = list(v)
    if len(v) != n:
        raise ValueError(f"reward {reward!r}: column {name!r} has {len(v)} values for {n} completions")
    return v


def env_column(kwargs: Mapping[str, Any], name: str, n: int, reward: str) -> list:
    """A rollout column, or the same name read from TRL's `environments=` objects (an attribute or a
    zero-argument method; `env_outcome` falls back to the environment's `get_reward()`)."""
    if kwargs.get(name) is not None or kwargs.get("environments") is None:
        return need(kwargs, name, n, reward)
    return [_env_value(env, name) for env in as_list(kwargs["environments"], n, "environments", reward)]


def _env_value(env: Any, name: str) -> Any:
    v = getattr(env, name, None)
    if v is None and name == ENV_OUTCOME:
        v = getattr(env, "get_reward", None)
    try:
        return v() if callable(v) else v
    except Exception:
        return None


def number(v: Any) -> float | None:
    """A finite float from a column value, or None (missing, NaN, not a number)."""
    try:
        x = float(v)
    except (TypeError, ValueError, OverflowError):
        return None
    return x if math.isfinite(x) else None

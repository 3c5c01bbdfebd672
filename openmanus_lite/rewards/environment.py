"""Environment rewards: what the multi-turn rollout (`ROLLOUT_COLUMNS`) or TRL's `environments=` recorded."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from openmanus_lite.rewards.columns import (
    DOMAIN,
    ENV_OUTCOME,
    ENV_SUCCESS,
    INVALID_ACTIONS,
    NUM_TURNS,
    ROLLOUT_COLUMNS,
    assistant_texts,
    completions_list,
    env_column,
    number,
)
from openmanus_lite.rewards.registry import register_reward


def _env_numbers(completions: Any, kwargs: Mapping[str, Any], name: str, reward: str) -> list[float | None]:
    n = len(completions_list(completions, reward))
    return [number(v) for v in env_column(kwargs, name, n, reward)]


@register_reward("env_outcome", columns=[(ENV_OUTCOME, "environments")])
def env_outcome_reward(prompts=None, completions=None, **kwargs) -> list[float | None]:
    """The environment checker's final score, clipped to [0, 1]; None when the rollout recorded none."""
    values = _env_numbers(completions, kwargs, ENV_OUTCOME, "env_outcome")
    return [None if x is None else min(1.0, max(0.0, x)) for x in values]


@register_reward("env_success", columns=[(ENV_SUCCESS, "environments")])
def env_success_reward(prompts=None, completions=None, **kwargs) -> list[float | None]:
    """1.0 when the episode solved the task (`env_success` column), else 0.0; None if unknown."""
    values = _env_numbers(completions, kwargs, ENV_SUCCESS, "env_success")
    return [None if x is None else (1.0 if x else 0.0) for x in values]


@register_reward("invalid_action", columns=[(INVALID_ACTIONS, "environments")], bounds=(-1.0, 0.0))
def invalid_action_reward(prompts=None, completions=None, **kwargs) -> list[float | None]:
    """-invalid_actions / turns (`num_turns`, else the assistant turns), in [-1, 0]. With `react_format` next to
    `env_outcome` it was reward-hacked (held-out db 10/50 -> 0/50): the multi-turn default is `env_outcome` alone."""
    comps = completions_list(completions, "invalid_action")
    bad = _env_numbers(comps, kwargs, INVALID_ACTIONS, "invalid_action")
    given = kwargs.get(NUM_TURNS) is not None or kwargs.get("environments") is not None
    turns = _env_numbers(comps, kwargs, NUM_TURNS, "invalid_action") if given else [None] * len(comps)
    turns = [t if t is not None and t > 0 else float(len(assistant_texts(c))) for c, t in zip(comps, turns)]
    return [None if x is None else -min(1.0, max(0.0, x) / max(t, 1.0)) for x, t in zip(bad, turns)]


def trajectory_reward_inputs(trajectories: Sequence[Any]) -> dict[str, list]:
    """Reward keyword arguments for finished episodes, as the multi-turn rollout hands them over: `prompts` (up to
    the first user message), `completions` (the rest) and ROLLOUT_COLUMNS, for `reward_table(spec, **inputs)`."""
    out: dict[str, list] = {k: [] for k in ("prompts", "completions", *ROLLOUT_COLUMNS)}
    from_meta = {ENV_OUTCOME: "score", ENV_SUCCESS: "success", INVALID_ACTIONS: "invalid_actions", NUM_TURNS: "turns"}
    for t in trajectories:
        msgs = t.to_messages() if hasattr(t, "to_messages") else list(t["messages"])
        meta = getattr(t, "meta", None) or (t.get("meta", {}) if isinstance(t, Mapping) else {})
        first = next((i for i, m in enumerate(msgs) if m["role"] == "user"), 0)
        out["prompts"].append(msgs[: first + 1])
        out["completions"].append(msgs[first + 1:])
        for column, key in from_meta.items():
            out[column].append(meta.get(key))
        out[DOMAIN].append(getattr(t, "domain", None) or (t.get("domain") if isinstance(t, Mapping) else None))
    return out

"""Reward functions for GRPO, registered by name, with TRL's signature.

Every reward is `reward(prompts, completions, **columns) -> list[float | None]` (one value per
completion; `None` tells TRL to skip that sample for that reward), so TRL's `GRPOTrainer` takes
them unchanged. `accuracy`, `format` and `tag_count` give the values open-r1's functions give, so
`--reward_funcs accuracy format tag_count` from the OpenManus-RL README means what it meant.
`accuracy` is math only (math_verify, LaTeX answers); agent answers (words, lists, `answer(...)`)
are scored by `answer_match`, which the kit's own GRPO data and presets use;
`accuracy_skips(solutions)` counts the golds `accuracy` would skip (the grpo CLI prints it).

    funcs, weights = build_rewards("accuracy:2 format tag_count")
    check_reward_columns("accuracy:2 format tag_count", dataset.column_names)   # before training
    GRPOTrainer(..., reward_funcs=funcs, args=GRPOConfig(reward_weights=weights, ...))

Columns (keyword arguments a reward reads; TRL passes every dataset column, and the multi-turn
rollout's extra keys, by name):

    solution         gold answer: accuracy (str or number), answer_match, length, cosine (also lists)
    answer_type      optional per-row "math" | "agent": force answer_match's path (answer_match_path)
    answer_ordered   optional per-row bool: answer_match's lists must match in order (else multisets)
    env_outcome      float in [0, 1]: the environment checker's final score  (multi-turn rollout)
    env_success      bool: the episode solved the task                       (multi-turn rollout)
    invalid_actions  int: turns whose action did not parse or was invalid    (multi-turn rollout)
    num_turns        int: assistant turns the episode took                   (multi-turn rollout)
    domain           str: os, db, web, kg, household, ecommerce              (multi-turn rollout)

`ROLLOUT_COLUMNS` lists the last five: the multi-turn GRPO rollout returns them as extra keys.
TRL's `environment_factory` path passes `environments=` instead; there the env rewards read the
same names as attributes (or zero-argument methods) of each environment object, and `env_outcome`
also falls back to its `get_reward()`.

Completions may be plain strings or conversational: a list of message dicts (several assistant
turns, with user/tool turns between). Which text a reward reads:

    format, tag_count, accuracy, answer_match, reasoning_steps, length, cosine
        the LAST assistant message (a one-message completion: that message, as in open-r1)
    react_format, react_tag_count
        every assistant message, one ReAct turn each
    repetition_penalty
        all assistant messages joined by newlines

A message without a `role` counts as an assistant message; `content` may be a string, None or a
list of `{"type": "text", "text": ...}` parts. No completion makes any reward raise; each returns
values inside its documented `reward_range` (or None). A missing column is a configuration
error: `check_reward_columns` reports it before training, and the reward raises the same
ValueError if it is called anyway.

Prototyping: `register_reward(name)` adds your own; `reward_table(spec, completions, **columns)`
scores a batch with several rewards; `trajectory_reward_inputs(episodes)` turns recorded
episodes into the rollout's reward arguments; `plot_reward_distributions(table)` plots them
(notebook 05). `benchmarks/reward_throughput.py` measures their speed.
"""

from __future__ import annotations

import difflib
import importlib
import json
import logging
import math
import re
import threading
import warnings
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Iterable, Mapping, Sequence

from openmanus_lite.react import (  # the private patterns keep the fast ReAct path on the grammar's own definitions
    _ANSWER,
    _CALL,
    _FINAL_ANSWER,
    _TOOLCALL,
    DOMAIN_ACTION_KINDS,
    ParsedTurn,
    ParseError,
    extract_answer,
    parse_action,
    parse_step,
)

RewardFunc = Callable[..., list]

# --------------------------------------------------------------------------- column names

SOLUTION = "solution"
ANSWER_TYPE = "answer_type"
ANSWER_ORDERED = "answer_ordered"
ENV_OUTCOME = "env_outcome"
ENV_SUCCESS = "env_success"
INVALID_ACTIONS = "invalid_actions"
NUM_TURNS = "num_turns"
DOMAIN = "domain"
ROLLOUT_COLUMNS: tuple[str, ...] = (ENV_OUTCOME, ENV_SUCCESS, INVALID_ACTIONS, NUM_TURNS, DOMAIN)
"""Extra columns the multi-turn GRPO rollout passes to the rewards."""

TRAINER_KWARGS: frozenset[str] = frozenset(
    {"prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric"}
)
"""What GRPOTrainer always passes besides the dataset columns (`environments` only in that mode)."""

# --------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class RewardInfo:
    """A registered reward. `columns`: groups of column names, each group needs one of its names
    present. `factory`: `func` builds the reward from keyword parameters."""

    name: str
    func: Callable
    columns: tuple[tuple[str, ...], ...]
    bounds: tuple[float, float]
    factory: bool
    doc: str


_REGISTRY: dict[str, RewardInfo] = {}


def register_reward(
    name: str,
    *,
    columns: Iterable[str | Sequence[str]] = (),
    bounds: tuple[float, float] = (0.0, 1.0),
    factory: bool = False,
    overwrite: bool = False,
) -> Callable[[Callable], Callable]:
    """Decorator: register a reward under `name` (TRL logs it as `rewards/<name>`).

    `columns`: the columns it needs (a tuple inside means "one of these"); `bounds`: its
    documented output range; `factory=True` registers a function that takes keyword
    parameters and returns the reward. Registering the same function again (a re-run
    notebook cell) replaces it; another function under a taken name needs `overwrite=True`.
    """
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][\w\-.]*", name):
        raise ValueError(f"reward name {name!r} must be an identifier-like string (letters, digits, _ - .)")
    groups = tuple((c,) if isinstance(c, str) else tuple(c) for c in columns)
    lo, hi = float(bounds[0]), float(bounds[1])
    if not lo <= hi:
        raise ValueError(f"reward {name!r}: bounds {bounds} must be (low, high) with low <= high")

    def decorate(func: Callable) -> Callable:
        old = _REGISTRY.get(name)
        if old is not None and not overwrite and not _same_definition(old.func, func):
            raise ValueError(
                f"a reward named {name!r} is already registered ({_qualname(old.func)}); "
                f"pick another name or pass overwrite=True"
            )
        doc = (func.__doc__ or "").strip().split("\n\n")[0]
        _REGISTRY[name] = RewardInfo(name, func, groups, (lo, hi), factory, doc)
        if not factory:
            _label(func, name, groups, (lo, hi))
        return func

    return decorate


def _same_definition(a: Callable, b: Callable) -> bool:
    return getattr(a, "__module__", None) == getattr(b, "__module__", None) and _qualname(a) == _qualname(b)


def _qualname(f: Callable) -> str:
    return getattr(f, "__qualname__", type(f).__name__)


def _label(func: Any, name: str, groups: tuple, bounds: tuple[float, float]) -> None:
    func.__name__ = name  # TRL logs rewards/<__name__>
    func.reward_name = name
    func.required_columns = groups
    func.reward_range = bounds


def list_rewards() -> list[str]:
    """Names of every registered reward."""
    return sorted(_REGISTRY)


def reward_info(name: str) -> RewardInfo:
    """The registry entry for `name`, a reward given by import path `package.module:function`,
    or a KeyError that suggests close names."""
    info = _REGISTRY.get(name)
    if info is None and ":" in str(name):
        return _import_reward(str(name))
    if info is None:
        close = difflib.get_close_matches(str(name), list(_REGISTRY), n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise KeyError(f"unknown reward {name!r}.{hint} Registered rewards: {', '.join(sorted(_REGISTRY))}; "
                       f"or give your own as package.module:function")
    return info


_IMPORTED: dict[str, RewardInfo] = {}


def _import_reward(path: str) -> RewardInfo:
    """A reward function named by import path, as TRL's and open-r1's scripts take them. Its
    `required_columns` / `reward_range` attributes are used when it has them."""
    if path in _IMPORTED:
        return _IMPORTED[path]
    module_name, _, attr = path.partition(":")
    if not module_name or not attr or ":" in attr:
        raise ValueError(f"reward {path!r}: write an import path as package.module:function")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as e:  # the module's own code may raise anything while importing
        raise ValueError(f"cannot import reward {path!r}: importing module {module_name!r} failed with "
                         f"{type(e).__name__}: {e}") from e
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"cannot import reward {path!r}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"reward {path!r} is a {type(obj).__name__}, not a function "
                         f"f(prompts, completions, **columns) -> list[float]")
    groups = tuple((c,) if isinstance(c, str) else tuple(c) for c in getattr(obj, "required_columns", ()))
    lo, hi = getattr(obj, "reward_range", (-math.inf, math.inf))
    doc = (getattr(obj, "__doc__", None) or "").strip().split("\n\n")[0]
    _IMPORTED[path] = RewardInfo(path, obj, groups, (float(lo), float(hi)), False, doc)
    return _IMPORTED[path]


def describe_rewards() -> list[dict[str, Any]]:
    """One row per reward: name, columns it needs, output range, first docstring paragraph."""
    return [
        {
            "name": i.name,
            "columns": " ".join("|".join(g) for g in i.columns),
            "range": i.bounds,
            "factory": i.factory,
            "doc": " ".join(i.doc.split()),
        }
        for i in (_REGISTRY[n] for n in sorted(_REGISTRY))
    ]


def _spec_item(tok: str) -> tuple[str, str | float]:
    """(name, weight) of one spec item: name, name:weight, name=weight, where the name may be an
    import path with its own colon (pkg.mod:func, pkg.mod:func:0.5)."""
    if "=" in tok:
        name, _, weight = tok.rpartition("=")
    else:
        head, sep, tail = tok.rpartition(":")
        try:
            float(tail)
            is_weight = bool(sep)
        except ValueError:
            is_weight = False
        if is_weight:
            name, weight = head, tail
        elif sep and head in _REGISTRY:
            raise ValueError(f"weight of reward {head!r} must be a number, got {tail!r}")
        else:
            name, weight = tok, 1.0
    if not name or name.startswith(":") or name.endswith(":"):
        raise ValueError(f"cannot read reward spec item {tok!r}; write name, name:weight or package.module:function")
    return name, weight


def parse_reward_spec(spec: str | Sequence[str] | Mapping[str, float]) -> dict[str, float]:
    """Names and weights, in order: "accuracy:2 format tag_count" (commas also work, `=` too),
    a list of such items (the CLI's `--reward_funcs a b:0.5`), or a {name: weight} dict. A name is
    a registered reward or an import path `package.module:function` (weighted: `pkg.mod:func:0.5`)."""
    if isinstance(spec, Mapping):
        items = [(str(k), v) for k, v in spec.items()]
    else:
        parts = [spec] if isinstance(spec, str) else list(spec)
        items = []
        for part in parts:
            if not isinstance(part, str):
                raise ValueError(f"reward spec items must be strings like 'accuracy:2', got {part!r}")
            for tok in re.split(r"[\s,]+", part.strip()):
                if not tok:
                    continue
                items.append(_spec_item(tok))
    out: dict[str, float] = {}
    for name, w in items:
        reward_info(name)  # unknown names fail here, with suggestions
        if name in out:
            raise ValueError(f"reward {name!r} is listed twice in {spec!r}; give it once with its weight")
        try:
            weight = float(w)
        except (TypeError, ValueError):
            raise ValueError(f"weight of reward {name!r} must be a number, got {w!r}") from None
        if not math.isfinite(weight):
            raise ValueError(f"weight of reward {name!r} must be finite, got {w!r}")
        out[name] = weight
    if not out:
        raise ValueError(f"no reward named in {spec!r}; registered rewards: {', '.join(sorted(_REGISTRY))}")
    return out


def get_reward_func(name: str, **params: Any) -> RewardFunc:
    """The reward registered as `name`; factories are built with `params` (others take none)."""
    info = reward_info(name)
    if not info.factory:
        if params:
            raise ValueError(f"reward {name!r} takes no parameters, got {sorted(params)}")
        return info.func
    try:
        func = info.func(**params)
    except TypeError as e:
        raise ValueError(f"bad parameters for reward {name!r}: {e}") from None
    _label(func, name, info.columns, getattr(func, "reward_range", info.bounds))
    return func


def get_reward_funcs(
    spec: str | Sequence[str] | Mapping[str, float], params: Mapping[str, Mapping[str, Any]] | None = None
) -> list[RewardFunc]:
    """The callables for a spec (see parse_reward_spec); `params` maps factory names to kwargs,
    e.g. {"cosine": {"max_len": 500}, "soft_overlong_punishment": {"max_completion_len": 256}}."""
    names = list(parse_reward_spec(spec))
    params = dict(params or {})
    stray = sorted(set(params) - set(names))
    if stray:
        raise ValueError(f"params given for rewards not in the spec: {stray}; the spec names {names}")
    return [get_reward_func(n, **dict(params.get(n) or {})) for n in names]


def reward_weights(spec: str | Sequence[str] | Mapping[str, float]) -> list[float]:
    """The weights for GRPOConfig(reward_weights=...), in the order of get_reward_funcs(spec)."""
    return list(parse_reward_spec(spec).values())


def build_rewards(
    spec: str | Sequence[str] | Mapping[str, float], params: Mapping[str, Mapping[str, Any]] | None = None
) -> tuple[list[RewardFunc], list[float]]:
    """(reward_funcs, reward_weights) for GRPOTrainer / GRPOConfig."""
    return get_reward_funcs(spec, params), reward_weights(spec)


def check_reward_columns(
    spec: str | Sequence[Any] | Mapping[str, float],
    dataset_columns: Iterable[str],
    extra_columns: Iterable[str] = (),
) -> None:
    """Raise one ValueError listing every reward whose columns the data lacks.

    Call before training. `dataset_columns`: the train dataset's columns; `extra_columns`: what
    the rollout adds (the multi-turn rollout: `ROLLOUT_COLUMNS`; environment_factory mode:
    "environments"). `spec` may also be a list of reward callables (their `required_columns`).
    """
    have = set(dataset_columns) | set(extra_columns) | TRAINER_KWARGS
    if isinstance(spec, (str, Mapping)) or all(isinstance(s, str) for s in spec):
        needs = [(n, reward_info(n).columns) for n in parse_reward_spec(spec)]
    else:
        needs = []
        for f in spec:
            if isinstance(f, str):
                needs.append((f, reward_info(f).columns))
            else:
                needs.append((getattr(f, "__name__", repr(f)), tuple(getattr(f, "required_columns", ()))))
    problems = []
    for name, groups in needs:
        for group in groups:
            if not have.intersection(group):
                want = " or ".join(repr(c) for c in group)
                problems.append(f"reward {name!r} needs column {want}{_COLUMN_HINTS.get(group[0], '')}")
    if problems:
        cols = ", ".join(sorted(set(dataset_columns) | set(extra_columns))) or "none"
        raise ValueError(
            "the training data lacks columns that rewards read:\n  "
            + "\n  ".join(problems)
            + f"\n(available columns: {cols}). Add the column, or drop the reward from --reward_funcs."
        )


_COLUMN_HINTS = {
    SOLUTION: " (the gold answer of each prompt)",
    ENV_OUTCOME: " (the multi-turn rollout passes it; single-turn prompts have no environment)",
    ENV_SUCCESS: " (the multi-turn rollout passes it)",
    INVALID_ACTIONS: " (the multi-turn rollout passes it)",
    "completion_ids": " (GRPOTrainer passes it)",
}


def reward_table(spec_or_funcs: Any, completions: Sequence[Any], prompts: Sequence[Any] | None = None, **columns):
    """Score `completions` with several rewards: a pandas DataFrame, one column per reward
    (handy for prototyping; `spec_or_funcs` is a spec or a list of callables)."""
    import pandas as pd

    if isinstance(spec_or_funcs, (str, Mapping)) or (
        isinstance(spec_or_funcs, Sequence) and all(isinstance(s, str) for s in spec_or_funcs)
    ):
        funcs = get_reward_funcs(spec_or_funcs)
    else:
        funcs = list(spec_or_funcs) if isinstance(spec_or_funcs, Sequence) else [spec_or_funcs]
    prompts = list(prompts) if prompts is not None else [None] * len(completions)
    data = {}
    for f in funcs:
        values = f(prompts=prompts, completions=list(completions), **columns)
        data[getattr(f, "__name__", repr(f))] = [float("nan") if v is None else float(v) for v in values]
    return pd.DataFrame(data)


def trajectory_reward_inputs(trajectories: Sequence[Any]) -> dict[str, list]:
    """Reward keyword arguments for finished episodes (rollout.run_episodes trajectories):
    `prompts` (the first user message), `completions` (every later message, as the multi-turn
    GRPO rollout hands them over) and the ROLLOUT_COLUMNS from each trajectory's meta. Lets you
    score recorded episodes with any reward: `reward_table(spec, **trajectory_reward_inputs(t))`."""
    out: dict[str, list] = {k: [] for k in ("prompts", "completions", *ROLLOUT_COLUMNS)}
    for t in trajectories:
        msgs = t.to_messages() if hasattr(t, "to_messages") else list(t["messages"])
        meta = getattr(t, "meta", None) or (t.get("meta", {}) if isinstance(t, Mapping) else {})
        first = next((i for i, m in enumerate(msgs) if m["role"] == "user"), 0)
        out["prompts"].append(msgs[: first + 1])
        out["completions"].append(msgs[first + 1:])
        out[ENV_OUTCOME].append(meta.get("score"))
        out[ENV_SUCCESS].append(meta.get("success"))
        out[INVALID_ACTIONS].append(meta.get("invalid_actions"))
        out[NUM_TURNS].append(meta.get("turns"))
        out[DOMAIN].append(getattr(t, "domain", None) or (t.get("domain") if isinstance(t, Mapping) else None))
    return out


def plot_reward_distributions(data: Any, by: str = "source", bins: int = 10, cols: int = 3):
    """One histogram panel per reward column of `data` (a DataFrame from reward_table, with a
    `by` column naming where each row came from), bins spanning each reward's registered
    range, one colour per source. Returns the matplotlib figure."""
    import matplotlib.pyplot as plt
    import numpy as np

    names = [c for c in data.columns if c != by]
    sources = list(dict.fromkeys(data[by])) if by in data.columns else [None]
    colours = {s: f"C{i}" for i, s in enumerate(sources)}
    rows = max(1, -(-len(names) // cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 2.8 * rows), squeeze=False)
    for ax, name in zip(axes.flat, names):
        lo, hi = _REGISTRY[name].bounds if name in _REGISTRY else (data[name].min(), data[name].max())
        edges = np.linspace(lo, hi if hi > lo else lo + 1.0, bins + 1)
        for source in sources:
            values = (data[name] if source is None else data.loc[data[by] == source, name]).dropna()
            if len(values):
                ax.hist(values.clip(edges[0], edges[-1]), bins=edges, alpha=0.55, color=colours[source],
                        label=f"{source} (n={len(values)})")
        ax.set_title(name)
        ax.set_xlabel("reward")
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[s], alpha=0.55) for s in sources]
    if by in data.columns:
        fig.legend(handles, [str(s) for s in sources], loc="upper center", ncol=len(sources), frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    return fig


# --------------------------------------------------------------------------- reading completions


def _content(msg: Mapping) -> str:
    c = msg.get("content")
    if type(c) is str:
        return c
    if isinstance(c, str):
        return str(c)
    if isinstance(c, list):  # multimodal parts: [{"type": "text", "text": ...}, ...]
        return "".join(
            p if isinstance(p, str) else p.get("text") if isinstance(p, Mapping) and isinstance(p.get("text"), str) else ""
            for p in c
        )
    return ""


def _is_assistant(msg: Any) -> bool:
    role = msg.get("role")
    return role is None or role == "assistant"


# The hot paths below test `type(x) is dict/str` first: isinstance against the Mapping ABC costs
# more than the rest of a format check.


def last_assistant_text(completion: Any) -> str:
    """The text of the completion's last assistant message ("" when it has none)."""
    if type(completion) is str:
        return completion
    if type(completion) is list or isinstance(completion, (list, tuple)):
        for m in reversed(completion):
            if type(m) is dict or isinstance(m, Mapping):
                role = m.get("role")
                if role is None or role == "assistant":
                    c = m.get("content")
                    return c if type(c) is str else _content(m)
            elif isinstance(m, str):
                return str(m)
        return ""
    return _other_text(completion)


def assistant_texts(completion: Any) -> list[str]:
    """The text of every assistant message, in order (a plain string is one message)."""
    if type(completion) is str:
        return [completion]
    if type(completion) is list or isinstance(completion, (list, tuple)):
        out = []
        for m in completion:
            if type(m) is dict or isinstance(m, Mapping):
                role = m.get("role")
                if role is None or role == "assistant":
                    c = m.get("content")
                    out.append(c if type(c) is str else _content(m))
            elif isinstance(m, str):
                out.append(str(m))
        return out
    if isinstance(completion, Mapping):
        return [_content(completion)] if _is_assistant(completion) else []
    if isinstance(completion, (str, bytes, bytearray)):
        return [_other_text(completion)]
    return []


def _other_text(c: Any) -> str:
    if isinstance(c, str):
        return str(c)
    if isinstance(c, Mapping):
        return _content(c) if _is_assistant(c) else ""
    if isinstance(c, (bytes, bytearray)):
        return bytes(c).decode("utf-8", "replace")
    return ""


def _need(kwargs: Mapping[str, Any], name: str, n: int, reward: str) -> list:
    """Column `name` as a list of length n, or the configuration error."""
    if name not in kwargs or kwargs[name] is None:
        raise ValueError(
            f"reward {reward!r} needs the column {name!r}{_COLUMN_HINTS.get(name, '')}, but it was not passed "
            f"(got: {', '.join(sorted(k for k in kwargs if k not in TRAINER_KWARGS)) or 'no columns'}). "
            "Run check_reward_columns(...) before training to catch this early."
        )
    return _as_list(kwargs[name], n, name, reward)


def _optional(kwargs: Mapping[str, Any], name: str, n: int, reward: str) -> list | None:
    v = kwargs.get(name)
    return None if v is None else _as_list(v, n, name, reward)


def _as_list(v: Any, n: int, name: str, reward: str) -> list:
    if isinstance(v, (str, bytes, Mapping)) or not hasattr(v, "__len__"):
        return [v] * n  # one value for the whole batch
    v = list(v)
    if len(v) != n:
        raise ValueError(f"reward {reward!r}: column {name!r} has {len(v)} values for {n} completions")
    return v


def _completions(completions: Any, reward: str) -> list:
    if completions is None:
        raise TypeError(f"reward {reward!r} needs completions=[...] (TRL passes it by keyword)")
    return completions if isinstance(completions, list) else list(completions)


# --------------------------------------------------------------------------- format and tag_count

_OPEN = "<think>\n"
_MID = "\n</think>\n<answer>\n"
_END = "\n</answer>"


def _format_ok(t: str) -> bool:
    """Same verdict as re.match(r"^<think>\\n.*?\\n</think>\\n<answer>\\n.*?\\n</answer>$", t,
    re.DOTALL | re.MULTILINE), in linear time with str.find (the regex backtracks char by char)."""
    if not t.startswith(_OPEN):
        return False
    p = t.find(_MID, 8)  # the earliest split leaves the answer part the most room
    if p < 0:
        return False
    n = len(t)
    q = t.find(_END, p + 19)
    while q >= 0:
        e = q + 10
        if e == n or t[e] == "\n":  # MULTILINE `$`: end of text or before a newline
            return True
        q = t.find(_END, q + 1)
    return False


@register_reward("format")
def format_reward(prompts=None, completions=None, **kwargs) -> list[float]:
    """1.0 when the completion matches `^<think>\\n.*?\\n</think>\\n<answer>\\n.*?\\n</answer>$`
    (re.DOTALL | re.MULTILINE, re.match), else 0.0 — open-r1's format reward.

    Because of MULTILINE, text after the closing tag is allowed when it starts on a new line."""
    return [1.0 if _format_ok(last_assistant_text(c)) else 0.0 for c in _completions(completions, "format")]


def _tag_count(t: str) -> float:
    return (
        (0.25 if t.count("<think>\n") == 1 else 0.0)
        + (0.25 if t.count("\n</think>\n") == 1 else 0.0)
        + (0.25 if t.count("\n<answer>\n") == 1 else 0.0)
        + (0.25 if t.count("\n</answer>") == 1 else 0.0)
    )


@register_reward("tag_count")
def tag_count_reward(prompts=None, completions=None, **kwargs) -> list[float]:
    """0.25 for each of "<think>\\n", "\\n</think>\\n", "\\n<answer>\\n", "\\n</answer>" that occurs
    exactly once (open-r1's tag_count): a second think block loses the think points."""
    return [_tag_count(last_assistant_text(c)) for c in _completions(completions, "tag_count")]


# --------------------------------------------------------------------------- accuracy (open-r1) and answer_match


@register_reward("accuracy", columns=[SOLUTION])
def accuracy_reward(prompts=None, completions=None, **kwargs) -> list[float | None]:
    """open-r1's accuracy, value for value: 1.0 when math_verify finds the completion's LaTeX
    answer equal to the `solution`, 0.0 when not, None (TRL skips the sample) when the gold does
    not parse or verify fails.

    gold = math_verify.parse(solution, extraction_mode="first_match") (LaTeX and plain numbers:
    "0.5", "3/4", "$\\frac{1}{2}$"; not plain words); answer = parse(completion,
    LatexExtractionConfig(normalization nits=False, malformed_operators=False, basic_latex=True,
    equations=True, boxed="all", units=True; boxed_match_priority=0,
    try_extract_without_anchor=False), extraction_mode="first_match"); reward
    float(verify(gold, answer)). The answer needs a LaTeX anchor (\\boxed{...}, $...$): a bare
    `<answer>6</answer>` scores 0.0 against "6". Only `solution` is read (numbers as their text);
    agent answers (words, lists, `answer(...)` actions) belong to `answer_match`."""
    comps = _completions(completions, "accuracy")
    sols = _need(kwargs, SOLUTION, len(comps), "accuracy")
    return [_math_score(_gold_text(s), last_assistant_text(c)) for c, s in zip(comps, sols)]


def _gold_text(solution: Any) -> str | None:
    """The gold as the text math_verify parses: strings as they are, numbers as str(); None for
    a missing gold (None, NaN) and, with a warning, for anything math_verify cannot read."""
    if isinstance(solution, str):
        return solution
    if isinstance(solution, (int, float)) and not isinstance(solution, bool):
        return None if solution != solution else str(solution)
    if solution is not None:
        _warn_gold_type(type(solution).__name__)
    return None


def accuracy_skips(solutions: Iterable[Any]) -> int:
    """How many golds `accuracy` skips (None for every completion) because math_verify cannot
    parse them (words, lists, blanks): check before training open-r1's accuracy on data that may
    hold agent answers, which `answer_match` scores."""
    timeout = _timeout()
    return sum(1 for s in solutions if (text := _gold_text(s)) is None or not _parse_gold(text, timeout))


@lru_cache(maxsize=None)
def _warn_gold_type(kind: str) -> None:
    warnings.warn(
        f"reward 'accuracy' got a {kind} in column {SOLUTION!r}: open-r1's accuracy parses text only, so "
        "the sample is skipped (None); use the 'answer_match' reward for list and other agent answers",
        stacklevel=2,
    )


ANSWER_TYPES = ("math", "agent")
_MATH_HINT = re.compile(r"\\[A-Za-z]+|\\[(\[]|\$[^$]+\$|\^|_\{")


@register_reward("answer_match", columns=[SOLUTION])
def answer_match_reward(prompts=None, completions=None, **kwargs) -> list[float | None]:
    """The kit's answer check for agent tasks: 1.0 when the completion's final answer equals the
    `solution` column, else 0.0; None when the gold is missing or (math path) does not parse.

    The path per row is `answer_match_path(solution, answer_type)`: LaTeX golds go to open-r1's
    `accuracy` check; everything else (words, numbers, lists) compares `agent_answer(completion)`
    (an <answer> block, answer(...), Final Answer: [...], \\boxed{}, or a one-line reply) with
    the gold by `answers_match` (case, wrappers, number formats and list order forgiven; the
    optional `answer_ordered` column makes list order count). The kit's own GRPO data uses it."""
    comps = _completions(completions, "answer_match")
    n = len(comps)
    sols = _need(kwargs, SOLUTION, n, "answer_match")
    types = _optional(kwargs, ANSWER_TYPE, n, "answer_match") or [None] * n
    orders = _optional(kwargs, ANSWER_ORDERED, n, "answer_match") or [None] * n
    return [
        _answer_score(last_assistant_text(c), s, t, o) for c, s, t, o in zip(comps, sols, types, orders)
    ]


def answer_match_path(solution: Any, answer_type: str | None = None) -> str | None:
    """Which comparison `answer_match` uses for a gold answer: "math", "agent" or None (no gold).

    1. None, a blank string or an empty list: None (the reward is None; TRL skips it).
    2. `answer_type` "math" or "agent" (the optional column): that path.
    3. A string that is not a bracketed list and holds LaTeX — a backslash command (\\frac,
       \\boxed, ...), \\( or \\[, a $...$ pair, ^ or _{ — takes the math path: open-r1's
       `accuracy` (math_verify).
    4. Everything else (plain text, numbers, lists, "[...]" strings, a lone "$12") takes the
       agent path: normalised comparison of the completion's final answer.
    """
    if solution is None:
        return None
    if answer_type is not None and answer_type == answer_type:  # NaN from pandas counts as unset
        if answer_type not in ANSWER_TYPES:
            raise ValueError(f"column {ANSWER_TYPE!r} must be one of {ANSWER_TYPES}, got {answer_type!r}")
        return answer_type if not _blank(solution) else None
    if _blank(solution):
        return None
    if isinstance(solution, str):
        s = solution.lstrip()
        if not s.startswith("[") and _MATH_HINT.search(solution):
            return "math"
    return "agent"


def _blank(solution: Any) -> bool:
    if isinstance(solution, str):
        return not solution.strip()
    if isinstance(solution, (list, tuple)):
        return len(solution) == 0
    if isinstance(solution, float):
        return math.isnan(solution)
    return False


def _answer_score(text: str, solution: Any, answer_type: Any = None, ordered: Any = None) -> float | None:
    """answer_match's value for one completion."""
    path = answer_match_path(solution, answer_type)
    if path is None:
        return None
    if path == "math":
        return _math_score(str(solution), text)
    pred = agent_answer(text)
    if pred is None:
        return 0.0
    return 1.0 if answers_match(pred, solution, ordered=bool(ordered) if ordered == ordered else False) else 0.0


# ---- agent path

_BOXED = "\\boxed{"
_MAX_PLAIN_ANSWER = 200


def agent_answer(text: str) -> str | None:
    """The final answer of a completion for the agent path: react.extract_answer (the last
    <answer> block, else an answer(...) / Final Answer: action), else the last \\boxed{...},
    else the whole text when it is one line of at most 200 characters; None otherwise."""
    try:
        a = _extract_answer(text)
    except Exception:  # the grammar never raises by contract; a reward must not even if it did
        a = None
    if a is not None:
        return a
    b = _last_boxed(text)
    if b is not None:
        return b
    s = text.strip()
    if s and len(s) <= _MAX_PLAIN_ANSWER and "\n" not in s:
        return s
    return None


def _extract_answer(text: str) -> str | None:
    """react.extract_answer(text), faster (a property test holds them equal): without an
    <answer> tag the answer is the turn's action, which the thought cannot change, so only the
    label onwards is parsed, and the two common answer turns are read with the grammar's own
    patterns without building parse objects."""
    if "<answer>" in text:
        return extract_answer(text)
    label = _first_label(text)
    if label is None:
        return extract_answer(text)  # a bare "Final Answer: ..." or no answer
    ls, end, _ = label
    body = text[end:].strip()
    if body[:1] == "a":  # Act: answer(...)
        am = _ANSWER.match(body)
        if am is not None:
            return am.group(1).strip()
    elif body[:6] == "Answer":  # AgentBench DB: Action: Answer / Final Answer: [...]
        head, _, rest = body.partition("\n")
        if head.strip() == "Answer":
            fa = _FINAL_ANSWER.search(rest)
            return fa.group(1).strip() if fa is not None else None
    return extract_answer(text[ls:])


def _last_boxed(text: str) -> str | None:
    i = text.rfind(_BOXED)
    if i < 0:
        return None
    depth, start = 1, i + len(_BOXED)
    for j in range(start, min(len(text), start + 10_000)):
        ch = text[j]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[start:j]
    return None


_ITEM = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^,\[\]()]+")
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_THOUSANDS = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_FRACTION = re.compile(r"([-+]?\d+)\s*/\s*(\d+)")
_QUOTES = "'\"`"
_WRAPPERS = frozenset(".'\"`$\\}")  # a first or last character that may need unwrapping
_NUMBER_START = frozenset("0123456789+-.$")


class _Num:
    """A number in an answer; `decimals` as written (for the rounding rule)."""

    __slots__ = ("value", "decimals")

    def __init__(self, value: float, decimals: int):
        self.value, self.decimals = value, decimals

    def __repr__(self) -> str:
        return f"_Num({self.value!r}, {self.decimals})"


def _norm_item(s: str) -> _Num | str:
    s = s.strip()
    if s and (s[0] in _WRAPPERS or s[-1] in _WRAPPERS):
        s = _unwrap(s)
    if s and s[0] in _NUMBER_START:
        num = _parse_number(s)
        if num is not None:
            return num
    return " ".join(s.casefold().split())


def _unwrap(s: str) -> str:
    for _ in range(2):  # '"Blue".' and "'Blue.'" both end as blue
        if len(s) > 1 and s[-1] == ".":
            s = s[:-1].rstrip()
        while len(s) >= 2 and s[0] == s[-1] and s[0] in _QUOTES:
            s = s[1:-1].strip()
    if s.startswith(_BOXED) and s.endswith("}"):
        s = s[len(_BOXED): -1].strip()
    if len(s) >= 2 and s[0] == "$" and s[-1] == "$":
        s = s[1:-1].strip()
    return s


def _json_number(num: str) -> _Num:
    """A number literal (also json's parse_float/parse_int hook) with its written decimals."""
    dot = num.find(".")
    if dot < 0:
        decimals = 0
    elif "e" in num or "E" in num:
        decimals = len(num[dot + 1:].replace("E", "e").partition("e")[0])
    else:
        decimals = len(num) - dot - 1
    return _Num(float(num), decimals)


def _parse_number(s: str) -> _Num | None:
    """12, -3.5, 1e3, 1,234.5, 3/4, $12, 50% as a number; None for anything else."""
    num = s[1:] if s.startswith("$") else s  # currency
    num = num[:-1] if num.endswith("%") else num
    if num and (num[0].isdigit() or num[0] in "+-."):
        if _NUMBER.fullmatch(num):
            return _json_number(num)
        elif _THOUSANDS.fullmatch(num):
            return _Num(float(num.replace(",", "")), len(num.partition(".")[2]))
        else:
            m = _FRACTION.fullmatch(num)
            if m and int(m.group(2)) != 0:
                return _Num(int(m.group(1)) / int(m.group(2)), 6)
    return None


def _flatten(x: Any, out: list) -> None:
    t = type(x)
    if t is str:
        out.extend(_items(x, split=False))
    elif t is float or t is int:
        try:
            out.append(_Num(float(x), 0) if math.isfinite(x) else str(x).casefold())
        except OverflowError:  # an int beyond float range
            out.append(str(x))
    elif isinstance(x, (list, tuple)):
        for y in x:
            _flatten(y, out)
    elif isinstance(x, bool):
        out.append(str(x).casefold())
    elif isinstance(x, (int, float)):
        _flatten(float(x) if abs(x) < 1e300 else str(x), out)
    elif x is None:
        out.append("none")
    else:
        out.extend(_items(str(x), split=False))


def _flatten_json(x: Any, out: list) -> None:
    for y in x:
        t = type(y)
        if t is _Num:
            out.append(y)
        elif t is str:
            out.append(_norm_item(y))
        elif t is list:
            _flatten_json(y, out)
        elif y is None:
            out.append("none")
        elif t is bool:
            out.append("true" if y else "false")
        else:  # a JSON object: compare its text
            out.append(_norm_item(json.dumps(y, sort_keys=True)))


def _items(s: str, split: bool) -> tuple:
    """A string answer as items: a bracketed list ([...] or (...)) is split at top-level commas
    (nested brackets flattened, quoted strings kept whole); `split` also splits a bare a, b, c."""
    t = s.strip()
    if len(t) >= 2 and t[0] in "[(" and t[-1] in "])":
        if t[0] == "[":  # most list answers are JSON: the C parser is the fast path
            try:
                parsed = json.loads(t, parse_float=_json_number, parse_int=_json_number)
            except (ValueError, RecursionError):
                parsed = None
            if type(parsed) is list:
                out: list = []
                _flatten_json(parsed, out)
                return tuple(out)
        return tuple(_norm_item(m) for m in _ITEM.findall(t) if m.strip())
    if split and "," in t and not _THOUSANDS.fullmatch(t):
        return tuple(_norm_item(m) for m in _ITEM.findall(t) if m.strip())
    return (_norm_item(t),)


@lru_cache(maxsize=4096)
def _gold_items_str(s: str) -> tuple:
    return _items(s, split=False)


_GOLD_CACHE: dict[tuple, tuple] = {}


def _gold_items(solution: Any) -> tuple:
    """The gold as items; cached, since GRPO scores each gold once per generation."""
    if type(solution) is str:
        return _gold_items_str(solution)
    key = None
    if type(solution) is list or type(solution) is tuple:
        try:
            key = (type(solution), *map(type, solution), *solution)  # typed: True == 1 must not collide
            hit = _GOLD_CACHE.get(key)
        except TypeError:  # unhashable items (nested lists): no caching
            key = hit = None
        if hit is not None:
            return hit
    out: list = []
    _flatten(solution, out)
    items = tuple(out)
    if key is not None:
        if len(_GOLD_CACHE) >= 4096:
            _GOLD_CACHE.clear()
        _GOLD_CACHE[key] = items
    return items


def clear_caches() -> None:
    """Forget cached gold answers (benchmarks call it between runs)."""
    _GOLD_CACHE.clear()
    _gold_items_str.cache_clear()
    _parse_gold.cache_clear()


def _item_eq(p: Any, g: Any) -> bool:
    if type(p) is _Num and type(g) is _Num:
        if math.isclose(p.value, g.value, rel_tol=1e-4, abs_tol=1e-9):
            return True
        d = p.decimals
        if not (2 <= d <= 12 and math.isfinite(g.value)):
            return False
        return math.isclose(round(g.value, d), p.value, rel_tol=1e-12, abs_tol=1e-12)
    return p == g


def answers_match(pred: Any, solution: Any, ordered: bool = False) -> bool:
    """Normalised comparison of an answer with the gold (the agent path of `answer_match`).

    Case, surrounding quotes, $/%/\\boxed wrappers, a trailing period and runs of whitespace do
    not matter. Numbers are equal within a relative 1e-4, or when the answer, written with 2+
    decimals, equals the gold rounded to as many (3.33 for 3.3333). Lists (Python lists/tuples,
    "[...]" strings, nested rows flattened; a bare "a, b" answer when the gold has several
    items) match as multisets unless `ordered`. A one-item list equals its item."""
    gold = _gold_items(solution)
    if isinstance(pred, str):
        items = _items(pred, split=len(gold) > 1)
    else:
        out: list = []
        _flatten(pred, out)
        items = tuple(out)
    if len(items) != len(gold):
        return False
    if ordered or len(gold) == 1:
        return all(_item_eq(p, g) for p, g in zip(items, gold))
    if not any(type(x) is _Num for x in gold) and not any(type(x) is _Num for x in items):
        return sorted(items) == sorted(gold)
    left = list(gold)
    for p in items:  # greedy matching: fine for the answer sizes agents give
        for k, g in enumerate(left):
            if _item_eq(p, g):
                del left[k]
                break
        else:
            return False
    return True


# ---- open-r1's check (math_verify, lazily imported): `accuracy`, and answer_match's math path

_MAX_MATH_CHARS = 100_000
"""Longer completions are cut to their last 100k characters before math_verify parses them
(math_verify on megabytes of text takes seconds; no real answer is that long)."""


class _DropDeprecation(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "equations=True in NormalizationConfig is deprecated" not in record.getMessage()


@lru_cache(maxsize=1)
def _math_verify():
    try:
        import math_verify
        from latex2sympy2_extended import NormalizationConfig
    except ImportError as e:
        raise ImportError(
            "the accuracy reward (and answer_match on LaTeX golds) needs math-verify: "
            "pip install 'openmanus_lite[train]' "
            f"(or pip install math-verify) ({e})"
        ) from None
    # open-r1 sets equations=True, which this latex2sympy2 version still honours but warns about
    # on every call; keep the behaviour, drop the warning.
    logging.getLogger("latex2sympy2_extended.math_normalization").addFilter(_DropDeprecation())
    answer_cfg = [
        math_verify.LatexExtractionConfig(
            normalization_config=NormalizationConfig(
                nits=False, malformed_operators=False, basic_latex=True, equations=True, boxed="all", units=True
            ),
            boxed_match_priority=0,  # \boxed{} first
            try_extract_without_anchor=False,
        )
    ]
    return math_verify, answer_cfg


def _timeout() -> int | None:
    # math_verify times out with signal.alarm, which only works in the main thread
    return 5 if threading.current_thread() is threading.main_thread() else None


@lru_cache(maxsize=4096)
def _parse_gold(solution: str, timeout: int | None) -> tuple:
    mv, _ = _math_verify()
    try:
        return tuple(mv.parse(solution, extraction_mode="first_match", parsing_timeout=timeout))
    except Exception:
        return ()


def _math_score(solution: str | None, text: str) -> float | None:
    """open-r1's accuracy for one completion, with the kit's safety: parsed golds are cached,
    parsing and verify time out after 5 s as math_verify's defaults (main thread only: the alarm
    signal needs it), and a completion over 100k characters is cut to its last 100k."""
    if solution is None:
        return None
    timeout = _timeout()
    gold = _parse_gold(solution, timeout)
    if not gold:
        return None  # open-r1: an unparseable gold skips the sample
    mv, cfg = _math_verify()
    if len(text) > _MAX_MATH_CHARS:
        text = text[-_MAX_MATH_CHARS:]
    try:
        answer = mv.parse(text, extraction_config=cfg, extraction_mode="first_match", parsing_timeout=timeout)
        return float(mv.verify(list(gold), answer, timeout_seconds=timeout))
    except Exception:
        return None


# --------------------------------------------------------------------------- ReAct rewards

_ACT = "Act"
_ACTION_UPPER = "ACTION"
_LABEL_AT = re.compile(r"[ \t]*(Act|Action|ACTION)[ \t]*:")
_NONSPACE = re.compile(r"\S")
_STYLE_UNIFIED = "Act"


def _first_label(t: str) -> tuple[int, int, str] | None:
    """The label react.parse_turn takes — the first line that is `Act:`, `Action:` or `ACTION:`
    after spaces — as (start of its line, end of the colon, label word); None when there is
    none. Every label contains "Act" or "ACTION", so str.find jumps between candidate lines."""
    pos, n = 0, len(t)
    while True:
        i = t.find(_ACT, pos)
        j = t.find(_ACTION_UPPER, pos, i + 5 if i >= 0 else n)  # only an ACTION that starts first
        k = j if j >= 0 else i
        if k < 0:
            return None
        if k == i and t.startswith("Act:", k) and (k == 0 or t[k - 1] == "\n"):
            return k, k + 4, _STYLE_UNIFIED  # the usual "\nAct:" line
        ls = t.rfind("\n", 0, k) + 1
        m = _LABEL_AT.match(t, ls)
        if m is not None:
            return ls, m.end(), m.group(1)
        pos = t.find("\n", k)
        if pos < 0:
            return None


_FENCED = re.compile(r"(bash|sql)[ \t]*\n```[ \t]*\w*[ \t]*\n?([^`]*)```")
"""The common `bash|sql` + fenced block without backticks inside: when it matches with
non-blank code, react.parse_action returns that kind (the first line decides the kind, and
the block's body is the same up to whitespace)."""


def _fast_kind(body: str) -> str | None:
    """The kind react.parse_action gives a stripped action, for the forms it accepts that are
    cheap to recognise with its own patterns, in its own order; None: let parse_action decide."""
    c = body[0]  # the body is stripped and not empty; the first character rules out most forms
    if (c == "a" or c == "A") and _ANSWER.match(body):
        return "answer"
    if c in "bsBS`":
        first = body.partition("\n")[0]
        if first.strip().lower() in ("bash", "sql") or first.lstrip().startswith("```"):
            m = _FENCED.match(body)
            return m.group(1) if m is not None and m.group(2).strip() else None
    if _CALL.match(body):
        return "call"
    if _TOOLCALL.match(body):
        return "tool"
    return None


def react_turn_score(text: str, domain: str | None = None) -> float:
    """One assistant turn: 1.0 for a well-formed unified turn (`Think: <non-empty reasoning>`
    first, then `Act: <action>` that react.parse_step accepts for `domain`), 0.5 when
    parse_step accepts it in another style (Thought:/Action:, Final Answer:, no Think:), 0.0
    when it does not parse. `domain` None or unknown accepts any domain's actions.

    Same verdicts as parse_step on the whole turn (a property test holds them equal), faster:
    the thought never changes whether the action parses, so only the action after the label
    is parsed, and the common action forms are recognised without building parse objects."""
    if type(text) is not str:
        return 0.0
    try:
        label = _first_label(text)
        if label is None:  # no Act/Action label: only the Final Answer form can parse; never strict
            return 0.0 if isinstance(parse_step(text, domain), ParseError) else 0.5
        ls, end, word = label
        body = text[end:].strip()
        # parse_turn hands the body unchanged to parse_action unless it is empty or one of the
        # source styles it rewrites (Operation, Answer, Final Answer, Mind2Web's CAPS, ToolBench's
        # "with Action Input:"): those take the full path below.
        if body and not body[0].isupper() and "Action Input:" not in body:
            kind = _fast_kind(body)
            if kind is None:
                if isinstance(parse_action(body, domain), ParseError):
                    return 0.0
            else:
                allowed = DOMAIN_ACTION_KINDS.get(domain) if type(domain) is str else None
                if allowed is not None and kind not in allowed:
                    return 0.0
            if word != _STYLE_UNIFIED:
                return 0.5
            return 1.0 if _thought_first(text, ls) else 0.5
        r = parse_step(text[ls:], domain)
    except Exception:
        return 0.0
    if isinstance(r, ParseError):
        return 0.0
    turn = r[0]
    if not isinstance(turn, ParsedTurn) or turn.style != "unified":
        return 0.5
    return 1.0 if _thought_first(text, ls) else 0.5


def _thought_first(text: str, ls: int) -> bool:
    """The turn starts with `Think:` and non-blank reasoning before the label line at `ls`."""
    if text.startswith("Think:"):
        h = 0
    else:
        first = _NONSPACE.search(text, 0, ls)
        if first is None or not text.startswith("Think:", first.start()):
            return False
        h = first.start()
    return _NONSPACE.search(text, h + 6, ls) is not None


@register_reward("react_format")
def react_format_reward(prompts=None, completions=None, **kwargs) -> list[float]:
    """Mean `react_turn_score` over the completion's assistant turns (partial credit per turn),
    for the row's `domain` (optional column); 0.0 with no assistant turn. Warning: as a GRPO
    term next to `env_outcome` it was reward-hacked (a tidy one-turn answer out-earned failed
    attempts; held-out db 10/50 -> 0/50, docs/RESULTS.md), so the multi-turn default leaves it out.

    Use it for format warm-ups and measurement, or at a weight far below the outcome's."""
    comps = _completions(completions, "react_format")
    domains = _optional(kwargs, DOMAIN, len(comps), "react_format") or [None] * len(comps)
    out = []
    for c, d in zip(comps, domains):
        turns = assistant_texts(c)
        if not turns:
            out.append(0.0)
            continue
        d = d if type(d) is str else None
        total = 0.0
        for t in turns:
            total += react_turn_score(t, d)
        out.append(total / len(turns))
    return out


def _react_tags(t: str) -> float:
    if type(t) is not str:
        return 0.0
    think = t.count("\nThink:") + t.startswith("Think:")
    act = t.count("\nAct:") + t.startswith("Act:")
    return (0.5 if think == 1 else 0.0) + (0.5 if act == 1 else 0.0)


@register_reward("react_tag_count")
def react_tag_count_reward(prompts=None, completions=None, **kwargs) -> list[float]:
    """The ReAct tag_count: per assistant turn 0.5 when exactly one line starts with "Think:"
    and 0.5 when exactly one starts with "Act:"; the mean over turns (0.0 with none)."""
    out = []
    for c in _completions(completions, "react_tag_count"):
        turns = assistant_texts(c)
        out.append(sum(_react_tags(t) for t in turns) / len(turns) if turns else 0.0)
    return out


# --------------------------------------------------------------------------- environment rewards


def _env_column(kwargs: Mapping[str, Any], name: str, n: int, reward: str) -> list:
    """A rollout column, or the same name read from TRL's `environments=` objects."""
    if kwargs.get(name) is not None or kwargs.get("environments") is None:
        return _need(kwargs, name, n, reward)
    envs = _as_list(kwargs["environments"], n, "environments", reward)
    out = []
    for env in envs:
        v = getattr(env, name, None)
        if v is None and name == ENV_OUTCOME:
            v = getattr(env, "get_reward", None)
        if callable(v):
            try:
                v = v()
            except Exception:
                v = None
        out.append(v)
    return out


def _number(v: Any) -> float | None:
    """A finite float from a column value, or None (missing, NaN, not a number)."""
    if v is None:
        return None
    try:
        x = float(v)
    except (TypeError, ValueError, OverflowError):
        return None
    return x if math.isfinite(x) else None


@register_reward("env_outcome", columns=[(ENV_OUTCOME, "environments")])
def env_outcome_reward(prompts=None, completions=None, **kwargs) -> list[float | None]:
    """The environment checker's final score (`env_outcome` column), clipped to [0, 1]; None
    when the rollout recorded none."""
    n = len(_completions(completions, "env_outcome"))
    out = []
    for v in _env_column(kwargs, ENV_OUTCOME, n, "env_outcome"):
        x = _number(v)
        out.append(None if x is None else min(1.0, max(0.0, x)))
    return out


@register_reward("env_success", columns=[(ENV_SUCCESS, "environments")])
def env_success_reward(prompts=None, completions=None, **kwargs) -> list[float | None]:
    """1.0 when the episode solved the task (`env_success` column), else 0.0; None if unknown."""
    n = len(_completions(completions, "env_success"))
    out = []
    for v in _env_column(kwargs, ENV_SUCCESS, n, "env_success"):
        x = _number(v)
        out.append(None if x is None else (1.0 if x else 0.0))
    return out


@register_reward("invalid_action", columns=[(INVALID_ACTIONS, "environments")], bounds=(-1.0, 0.0))
def invalid_action_reward(prompts=None, completions=None, **kwargs) -> list[float | None]:
    """Minus the fraction of turns whose action was invalid: -invalid_actions / turns, in
    [-1, 0]. Warning: with `react_format` next to `env_outcome` it paid a one-turn answer
    without querying more than failed attempts earned (held-out db 10/50 -> 0/50, docs/RESULTS.md);
    the multi-turn default is `env_outcome` alone.

    turns = the `num_turns` column when given, else the completion's assistant turns."""
    comps = _completions(completions, "invalid_action")
    n = len(comps)
    bad = _env_column(kwargs, INVALID_ACTIONS, n, "invalid_action")
    turns = (
        _env_column(kwargs, NUM_TURNS, n, "invalid_action")
        if kwargs.get(NUM_TURNS) is not None or kwargs.get("environments") is not None
        else [None] * n
    )
    out = []
    for c, b, t in zip(comps, bad, turns):
        x = _number(b)
        if x is None:
            out.append(None)
            continue
        nt = _number(t)
        if nt is None or nt <= 0:
            nt = float(len(assistant_texts(c)))
        out.append(-min(1.0, max(0.0, x) / max(nt, 1.0)))
    return out


# --------------------------------------------------------------------------- other open-r1 names


def _correct(texts: list[str], kwargs: Mapping[str, Any], reward: str) -> list[bool | None]:
    """Correctness per completion: answer_match on `solution` when given, else env_outcome >= 1."""
    n = len(texts)
    if kwargs.get(SOLUTION) is not None:
        sols = _need(kwargs, SOLUTION, n, reward)
        types = _optional(kwargs, ANSWER_TYPE, n, reward) or [None] * n
        orders = _optional(kwargs, ANSWER_ORDERED, n, reward) or [None] * n
        scores = [_answer_score(t, s, a, o) for t, s, a, o in zip(texts, sols, types, orders)]
    elif kwargs.get(ENV_OUTCOME) is not None or kwargs.get("environments") is not None:
        scores = [_number(v) for v in _env_column(kwargs, ENV_OUTCOME, n, reward)]
    else:
        raise ValueError(
            f"reward {reward!r} needs the column {SOLUTION!r} (or {ENV_OUTCOME!r} from the multi-turn rollout) "
            "to tell correct completions from wrong ones"
        )
    return [None if s is None else s >= 1.0 for s in scores]


@register_reward("length", columns=[(SOLUTION, ENV_OUTCOME, "environments")], bounds=(-0.5, 0.5))
def length_reward(prompts=None, completions=None, **kwargs) -> list[float]:
    """open-r1's len_reward (Kimi 1.5): over the batch, lam = 0.5 - (len - min) / (max - min);
    correct completions get lam, wrong ones min(0, lam); all 0.0 when every length is equal.
    Lengths in characters; an unscoreable gold counts as correct (as in open-r1)."""
    comps = _completions(completions, "length")
    texts = [last_assistant_text(c) for c in comps]
    correct = _correct(texts, kwargs, "length")
    lengths = [len(t) for t in texts]
    if not lengths or max(lengths) == min(lengths):
        return [0.0] * len(lengths)
    lo, hi = min(lengths), max(lengths)
    out = []
    for n, ok in zip(lengths, correct):
        lam = 0.5 - (n - lo) / (hi - lo)
        out.append(lam if ok is None or ok else min(0.0, lam))
    return out


class _Cosine:
    """A picklable cosine-scaled reward (see get_cosine_scaled_reward)."""

    def __init__(self, min_value_wrong, max_value_wrong, min_value_correct, max_value_correct, max_len):
        self.params = (min_value_wrong, max_value_wrong, min_value_correct, max_value_correct, max_len)
        self.reward_range = (min(min_value_wrong, max_value_wrong), max(min_value_correct, max_value_correct))
        self.__name__ = "cosine"

    def __call__(self, prompts=None, completions=None, **kwargs) -> list[float | None]:
        min_w, max_w, min_c, max_c, max_len = self.params
        texts = [last_assistant_text(c) for c in _completions(completions, self.__name__)]
        out = []
        for t, ok in zip(texts, _correct(texts, kwargs, self.__name__)):
            if ok is None:
                out.append(None)
                continue
            cosine = math.cos(min(1.0, len(t) / max_len) * math.pi)
            lo, hi = (min_c, max_c) if ok else (max_w, min_w)
            out.append(lo + 0.5 * (hi - lo) * (1.0 + cosine))
        return out


@register_reward(
    "cosine", columns=[(SOLUTION, ENV_OUTCOME, "environments")], bounds=(-1.0, 1.0), factory=True
)
def get_cosine_scaled_reward(
    min_value_wrong: float = -1.0,
    max_value_wrong: float = -0.5,
    min_value_correct: float = 0.5,
    max_value_correct: float = 1.0,
    max_len: int = 1000,
) -> RewardFunc:
    """open-r1's cosine-scaled reward: shorter correct completions earn more, longer wrong
    ones lose less: value = lo + (hi - lo) * (1 + cos(pi * len / max_len)) / 2 with (lo, hi) =
    (min_value_correct, max_value_correct) or (max_value_wrong, min_value_wrong). Lengths in
    characters, capped at max_len; None when the gold cannot be scored."""
    if not max_len or max_len <= 0:
        raise ValueError(f"max_len must be a positive number of characters, got {max_len!r}")
    return _Cosine(min_value_wrong, max_value_wrong, min_value_correct, max_value_correct, max_len)


class _Repetition:
    """A picklable n-gram repetition penalty (see get_repetition_penalty_reward)."""

    def __init__(self, ngram_size: int, max_penalty: float):
        self.ngram_size, self.max_penalty = ngram_size, max_penalty
        self.reward_range = (max_penalty, 0.0)
        self.__name__ = "repetition_penalty"

    def __call__(self, prompts=None, completions=None, **kwargs) -> list[float]:
        n = self.ngram_size
        out = []
        for c in _completions(completions, self.__name__):
            words = "\n".join(assistant_texts(c)).lower().split()
            if len(words) < n:
                out.append(0.0)
                continue
            total = len(words) - n + 1
            distinct = len(set(zip(*[words[i:] for i in range(n)])))
            out.append((1.0 - distinct / total) * self.max_penalty)
        return out


@register_reward("repetition_penalty", bounds=(-1.0, 0.0), factory=True)
def get_repetition_penalty_reward(ngram_size: int = 3, max_penalty: float = -1.0) -> RewardFunc:
    """open-r1's n-gram repetition penalty: (1 - distinct n-grams / n-grams) * max_penalty over
    lower-cased whitespace words; 0.0 below ngram_size words."""
    if max_penalty > 0:
        raise ValueError(f"max_penalty {max_penalty} should not be positive")
    if int(ngram_size) != ngram_size or ngram_size < 1:
        raise ValueError(f"ngram_size must be a positive integer, got {ngram_size!r}")
    return _Repetition(int(ngram_size), float(max_penalty))


class _SoftOverlong:
    """A picklable DAPO soft overlong punishment (see get_soft_overlong_punishment)."""

    def __init__(self, max_completion_len: int, soft_punish_cache: int):
        self.max_len, self.cache = max_completion_len, soft_punish_cache
        self.reward_range = (-1.0, 0.0)
        self.__name__ = "soft_overlong_punishment"

    def __call__(self, prompts=None, completions=None, completion_ids=None, **kwargs) -> list[float]:
        if completion_ids is None:
            raise ValueError(
                "reward 'soft_overlong_punishment' needs completion_ids (token ids; GRPOTrainer passes them)"
            )
        out = []
        for ids in completion_ids:
            try:
                n = len(ids)
            except TypeError:
                n = 0
            if n <= self.max_len - self.cache:
                out.append(0.0)
            elif n <= self.max_len:
                out.append((self.max_len - self.cache - n) / self.cache)
            else:
                out.append(-1.0)
        return out


@register_reward("soft_overlong_punishment", columns=["completion_ids"], bounds=(-1.0, 0.0), factory=True)
def get_soft_overlong_punishment(max_completion_len: int | None = None, soft_punish_cache: int = 0) -> RewardFunc:
    """DAPO's soft overlong punishment (as open-r1 and TRL): 0 up to max_completion_len -
    soft_punish_cache tokens, then falling linearly to -1 at max_completion_len, -1 beyond.
    Pass max_completion_len = GRPOConfig.max_completion_length."""
    if max_completion_len is None:
        raise ValueError(
            "soft_overlong_punishment needs max_completion_len: pass params={'soft_overlong_punishment': "
            "{'max_completion_len': <GRPOConfig.max_completion_length>, 'soft_punish_cache': <tokens>}}"
        )
    if max_completion_len <= 0 or not 0 <= soft_punish_cache <= max_completion_len:
        raise ValueError(
            f"need max_completion_len > 0 and 0 <= soft_punish_cache <= max_completion_len, got "
            f"{max_completion_len} and {soft_punish_cache}"
        )
    return _SoftOverlong(int(max_completion_len), int(soft_punish_cache))


_STEPS = re.compile(r"(Step \d+:|^\d+\.|\n-|\n\*|First,|Second,|Next,|Finally,)")


@register_reward("reasoning_steps")
def reasoning_steps_reward(prompts=None, completions=None, **kwargs) -> list[float]:
    """open-r1's reasoning_steps: min(1, markers / 3), counting "Step N:", a leading "N.",
    bullets and First/Second/Next/Finally."""
    comps = _completions(completions, "reasoning_steps")
    return [min(1.0, len(_STEPS.findall(last_assistant_text(c))) / 3) for c in comps]


@register_reward("orm", bounds=(0.0, 1.0), factory=True)
def get_orm_reward(model_path: str | None = None, batch_size: int = 8) -> RewardFunc:
    """A learned outcome reward model (train/reward_model.py, `python -m openmanus_lite dpo train-rm`)
    scoring prompt + completion: the sigmoid of its Bradley-Terry logit, in (0, 1). Needs
    params={'orm': {'model_path': <saved reward model folder>}}."""
    if not model_path:
        raise ValueError("the orm reward needs params={'orm': {'model_path': <folder saved by train-rm>}}")
    from openmanus_lite.train.reward_model import load_reward_model

    rm = load_reward_model(model_path)
    rm.batch_size = int(batch_size)
    return rm.as_reward_func()

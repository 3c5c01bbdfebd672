"""The reward registry: rewards by name or import path (`package.module:function`), specs with weights, and the
column check before training. Every reward handed out is a `CheckedReward`, so a broken value stops the run with the
reward's name instead of becoming a number TRL trains on.

    funcs, weights = build_rewards("accuracy:2 format tag_count")
    check_reward_columns("accuracy:2 format tag_count", dataset.column_names)   # before training
"""

from __future__ import annotations

import difflib
import functools
import importlib
import inspect
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from openmanus_lite.errors import UserError
from openmanus_lite.rewards.columns import COLUMN_HINTS, TRAINER_KWARGS

RewardFunc = Callable[..., list]
Spec = str | Sequence[str] | Mapping[str, float]


@dataclass(frozen=True)
class RewardInfo:
    """A registered reward. `columns`: groups of names, one of each group needed; `factory`: `func` builds it."""

    name: str
    func: Callable
    columns: tuple[tuple[str, ...], ...]
    bounds: tuple[float, float]
    factory: bool
    doc: str


_REGISTRY: dict[str, RewardInfo] = {}
_IMPORTED: dict[str, RewardInfo] = {}
# Rewards registered by modules outside this package, looked up by name: the module registers its reward on import,
# and naming it here keeps rewards free of a module-level import of preference (which imports rewards).
_ELSEWHERE = {"orm": "openmanus_lite.preference.orm_reward"}


def _groups(columns: Iterable[str | Sequence[str]]) -> tuple[tuple[str, ...], ...]:
    return tuple((c,) if isinstance(c, str) else tuple(c) for c in columns)


def _first_paragraph(func: Any) -> str:
    return (getattr(func, "__doc__", None) or "").strip().split("\n\n")[0]


def _origin(f: Callable) -> tuple[str | None, str]:
    """(module, qualname): a function defined again (a re-run notebook cell) keeps its origin."""
    return getattr(f, "__module__", None), getattr(f, "__qualname__", type(f).__name__)


def _label(func: Any, name: str, groups: tuple, bounds: tuple[float, float]) -> None:
    func.__name__ = name  # TRL logs rewards/<__name__>
    func.reward_name = name
    func.required_columns = groups
    func.reward_range = bounds


def register_reward(name: str, *, columns: Iterable[str | Sequence[str]] = (), bounds: tuple[float, float] = (0.0, 1.0),
                    factory: bool = False, overwrite: bool = False) -> Callable[[Callable], Callable]:
    """Decorator: register a reward under `name`. `columns`: what it reads (a tuple inside: one of these);
    `bounds`: its output range; `factory`: a callable that takes keyword parameters and returns the reward. The same
    function again (a re-run notebook cell) replaces it; another one under a taken name needs `overwrite=True`."""
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][\w\-.]*", name):
        raise ValueError(f"reward name {name!r} must be an identifier-like string (letters, digits, _ - .)")
    groups = _groups(columns)
    lo, hi = float(bounds[0]), float(bounds[1])
    if not lo <= hi:
        raise ValueError(f"reward {name!r}: bounds {bounds} must be (low, high) with low <= high")

    def decorate(func: Callable) -> Callable:
        old = _REGISTRY.get(name)
        if old is not None and not overwrite and _origin(old.func) != _origin(func):
            raise ValueError(f"a reward named {name!r} is already registered ({_origin(old.func)[1]}); "
                             f"pick another name or pass overwrite=True")
        _REGISTRY[name] = RewardInfo(name, func, groups, (lo, hi), factory, _first_paragraph(func))
        if not factory:
            _label(func, name, groups, (lo, hi))
        return func

    return decorate


class RewardError(UserError):
    """A reward function raised or returned something that is not one finite number (or None) per completion."""


def check_reward_values(name: str, values: Any, n: int | None) -> None:
    """Raise a RewardError naming the reward unless `values` holds `n` finite numbers or None (skip)."""
    if isinstance(values, (str, bytes, Mapping)) or not hasattr(values, "__len__"):
        raise RewardError(f"reward {name!r} returned {type(values).__name__} {values!r:.80}: a reward returns a "
                          f"list of numbers, one per completion (None skips a sample)")
    if n is not None and len(values) != n:
        raise RewardError(f"reward {name!r} returned {len(values)} values for {n} completions: give one per completion")
    for i, v in enumerate(values):
        if v is None:
            continue
        if isinstance(v, (str, bytes)) or not hasattr(v, "__float__"):
            raise RewardError(f"reward {name!r} returned {v!r:.80} for completion {i}: a reward is a number "
                              f"(None skips a sample)")
        if not math.isfinite(float(v)):
            raise RewardError(f"reward {name!r} returned {float(v)} for completion {i}: rewards must be finite "
                              f"(return None to skip a sample)")


class CheckedReward:
    """A reward whose every output goes through `check_reward_values`; an exception from a reward outside the kit
    becomes a RewardError naming it (the kit's own rewards raise as they are)."""

    def __init__(self, func: Callable, name: str):
        functools.update_wrapper(self, func)  # __name__, columns, range and a factory's own attributes
        self.reward_name = name

    def __call__(self, *args: Any, **kwargs: Any) -> list:
        completions = kwargs.get("completions", args[1] if len(args) > 1 else None)
        try:
            values = self.__wrapped__(*args, **kwargs)
        except Exception as e:
            if str(getattr(self.__wrapped__, "__module__", "")).startswith("openmanus_lite."):
                raise
            raise RewardError(f"reward {self.reward_name!r} raised {type(e).__name__}: {e}") from e
        check_reward_values(self.reward_name, values, len(completions) if hasattr(completions, "__len__") else None)
        return values


def checked_reward(func: Any, name: str | None = None) -> Any:
    """`func` as a CheckedReward; reward models (TRL scores them), async rewards (a wrapper would hide that TRL must
    await them) and checked rewards stay as they are."""
    if isinstance(func, (str, CheckedReward)) or hasattr(func, "parameters"):
        return func
    if inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(type(func).__call__):
        return func
    return CheckedReward(func, name or getattr(func, "reward_name", getattr(func, "__name__", type(func).__name__)))


def _known() -> list[str]:
    return sorted(set(_REGISTRY) | set(_ELSEWHERE))


def _lookup(name: str) -> RewardInfo:
    if name not in _REGISTRY and name in _ELSEWHERE:
        importlib.import_module(_ELSEWHERE[name])
    info = _REGISTRY.get(name)
    if info is not None:
        return info
    if ":" in str(name):
        return _import_reward(str(name))
    close = difflib.get_close_matches(str(name), _known(), n=3)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise KeyError(f"unknown reward {name!r}.{hint} Registered rewards: {', '.join(_known())}; "
                   f"or give your own as package.module:function")


def _import_reward(path: str) -> RewardInfo:
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
    try:
        obj = functools.reduce(getattr, attr.split("."), obj)
    except AttributeError:
        raise ValueError(f"cannot import reward {path!r}: module {module_name!r} has no attribute {attr!r}") from None
    if not callable(obj):
        raise ValueError(f"reward {path!r} is a {type(obj).__name__}, not a function "
                         f"f(prompts, completions, **columns) -> list[float]")
    lo, hi = getattr(obj, "reward_range", (-math.inf, math.inf))
    groups = _groups(getattr(obj, "required_columns", ()))
    _IMPORTED[path] = RewardInfo(path, obj, groups, (float(lo), float(hi)), False, _first_paragraph(obj))
    return _IMPORTED[path]


def describe_rewards(spec: Spec | None = None) -> list[dict[str, Any]]:
    """One row per reward (every registered one, or those a spec names): name, columns, range, factory, doc."""
    names = _known() if spec is None else parse_reward_spec(spec)
    infos = [_lookup(n) for n in names]
    return [{"name": i.name, "columns": " ".join("|".join(g) for g in i.columns), "range": i.bounds,
             "factory": i.factory, "doc": " ".join(i.doc.split())} for i in infos]


def _spec_item(tok: str) -> tuple[str, str | float]:
    """(name, weight) of one spec item: name, name:weight or name=weight; an import path has its own colon."""
    sep = "=" if "=" in tok else ":"
    name, found, weight = tok.rpartition(sep)
    if sep == ":":
        try:
            float(weight)
        except ValueError:
            if found and name in _known():
                raise ValueError(f"weight of reward {name!r} must be a number, got {weight!r}") from None
            found = ""  # no weight: the colon is an import path's
        if not found:
            name, weight = tok, 1.0
    if not name or name.startswith(":") or name.endswith(":"):
        raise ValueError(f"cannot read reward spec item {tok!r}; write name, name:weight or package.module:function")
    return name, weight


def parse_reward_spec(spec: Spec) -> dict[str, float]:
    """Names and weights (GRPOConfig's `reward_weights`), in order, from "accuracy:2 format tag_count" (commas and `=`
    work too), a list of such items (the CLI's) or a {name: weight} dict."""
    if isinstance(spec, Mapping):
        items = [(str(k), v) for k, v in spec.items()]
    else:
        items = []
        for part in [spec] if isinstance(spec, str) else list(spec):
            if not isinstance(part, str):
                raise ValueError(f"reward spec items must be strings like 'accuracy:2', got {part!r}")
            items += [_spec_item(tok) for tok in re.split(r"[\s,]+", part.strip()) if tok]
    out: dict[str, float] = {}
    for name, w in items:
        _lookup(name)  # unknown names fail here, with suggestions
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
        raise ValueError(f"no reward named in {spec!r}; registered rewards: {', '.join(_known())}")
    return out


def get_reward_func(name: str, **params: Any) -> RewardFunc:
    """The reward registered as `name`; factories are built with `params` (others take none)."""
    info = _lookup(name)
    if not info.factory:
        if params:
            raise ValueError(f"reward {name!r} takes no parameters, got {sorted(params)}")
        return checked_reward(info.func, name)
    try:
        func = info.func(**params)
    except TypeError as e:
        raise ValueError(f"bad parameters for reward {name!r}: {e}") from None
    _label(func, name, info.columns, getattr(func, "reward_range", info.bounds))
    return checked_reward(func, name)


def get_reward_funcs(spec: Spec, params: Mapping[str, Mapping[str, Any]] | None = None) -> list[RewardFunc]:
    """The callables for a spec; `params` maps factory names to kwargs, e.g. {"cosine": {"max_len": 500}}."""
    names = list(parse_reward_spec(spec))
    params = params or {}
    if stray := sorted(set(params) - set(names)):
        raise ValueError(f"params given for rewards not in the spec: {stray}; the spec names {names}")
    return [get_reward_func(n, **dict(params.get(n) or {})) for n in names]


def build_rewards(spec: Spec,
                  params: Mapping[str, Mapping[str, Any]] | None = None) -> tuple[list[RewardFunc], list[float]]:
    """(reward_funcs, reward_weights) for GRPOTrainer / GRPOConfig."""
    return get_reward_funcs(spec, params), list(parse_reward_spec(spec).values())


def _is_spec(spec: Any) -> bool:
    return isinstance(spec, (str, Mapping)) or (isinstance(spec, Sequence) and all(isinstance(s, str) for s in spec))


def check_reward_columns(spec: Spec | Sequence[Any], dataset_columns: Iterable[str],
                         extra_columns: Iterable[str] = ()) -> None:
    """Before training, one ValueError listing every reward whose columns the data lacks. `extra_columns`: what the
    rollout adds (`ROLLOUT_COLUMNS`, or "environments"); `spec` may be a list of callables (`required_columns`)."""
    given = set(dataset_columns) | set(extra_columns)
    have = given | TRAINER_KWARGS
    if _is_spec(spec):
        needs = [(n, _lookup(n).columns) for n in parse_reward_spec(spec)]
    else:
        needs = [(f, _lookup(f).columns) if isinstance(f, str)
                 else (getattr(f, "__name__", repr(f)), tuple(getattr(f, "required_columns", ()))) for f in spec]
    problems = [
        f"reward {name!r} needs column {' or '.join(repr(c) for c in group)}{COLUMN_HINTS.get(group[0], '')}"
        for name, groups in needs for group in groups if not have.intersection(group)
    ]
    if problems:
        raise ValueError("the training data lacks columns that rewards read:\n  " + "\n  ".join(problems)
                         + f"\n(available columns: {', '.join(sorted(given)) or 'none'}). Add the column, or drop "
                         "the reward from --reward_funcs.")


def reward_table(spec_or_funcs: Any, completions: Sequence[Any], prompts: Sequence[Any] | None = None, **columns):
    """Score `completions` with several rewards (a spec or callables): a DataFrame, one column per reward."""
    import pandas as pd

    if _is_spec(spec_or_funcs):
        funcs = get_reward_funcs(spec_or_funcs)
    else:
        funcs = list(spec_or_funcs) if isinstance(spec_or_funcs, Sequence) else [spec_or_funcs]
    prompts = list(prompts) if prompts is not None else [None] * len(completions)
    data = {}
    for f in funcs:
        values = f(prompts=prompts, completions=list(completions), **columns)
        data[getattr(f, "__name__", repr(f))] = [float("nan") if v is None else float(v) for v in values]
    return pd.DataFrame(data)

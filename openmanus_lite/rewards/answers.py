"""Answer matching (the `answer_match` reward): LaTeX golds go to open-r1's math check (math_verify, as `accuracy`);
everything else compares `agent_answer(completion)` with the gold by `answers_match` (`answer_match_path`)."""

from __future__ import annotations

import json
import logging
import math
import re
import threading
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping

from openmanus_lite.react import _ANSWER, _FINAL_ANSWER, extract_answer
from openmanus_lite.rewards.columns import (
    ANSWER_ORDERED,
    ANSWER_TYPE,
    SOLUTION,
    completions_list,
    last_assistant_text,
    need,
    optional,
)
from openmanus_lite.rewards.react_format import first_label
from openmanus_lite.rewards.registry import register_reward

ANSWER_TYPES = ("math", "agent")
_MATH_HINT = re.compile(r"\\[A-Za-z]+|\\[(\[]|\$[^$]+\$|\^|_\{")


@register_reward("answer_match", columns=[SOLUTION])
def answer_match_reward(prompts=None, completions=None, **kwargs) -> list[float | None]:
    """The kit's answer check for agent tasks: 1.0 when the completion's final answer equals the `solution` column
    (by `answer_match_path`; the optional `answer_ordered` column makes list order count), else 0.0; None when the
    gold is missing or (math path) does not parse."""
    comps = completions_list(completions, "answer_match")
    return answer_scores([last_assistant_text(c) for c in comps], kwargs, "answer_match")


def answer_scores(texts: list[str], columns: Mapping[str, Any], reward: str) -> list[float | None]:
    """answer_match's value for each text against the `solution` (`answer_type`, `answer_ordered`) columns."""
    n = len(texts)
    sols = need(columns, SOLUTION, n, reward)
    types, orders = optional(columns, ANSWER_TYPE, n, reward), optional(columns, ANSWER_ORDERED, n, reward)
    return [_answer_score(t, s, a, o) for t, s, a, o in zip(texts, sols, types, orders)]


def answer_match_path(solution: Any, answer_type: str | None = None) -> str | None:
    """Which comparison `answer_match` uses for a gold: None for no gold (None, blank, empty list), else the
    `answer_type` column's path when given, "math" for a string that is not a bracketed list and holds LaTeX (a
    backslash command, \\( or \\[, a $...$ pair, ^ or _{), else "agent" (text, numbers, lists, a lone "$12")."""
    if solution is None:
        return None
    typed = answer_type is not None and answer_type == answer_type  # NaN from pandas counts as unset
    if typed and answer_type not in ANSWER_TYPES:
        raise ValueError(f"column {ANSWER_TYPE!r} must be one of {ANSWER_TYPES}, got {answer_type!r}")
    if _blank(solution):
        return None
    if typed:
        return answer_type
    if isinstance(solution, str) and not solution.lstrip().startswith("[") and _MATH_HINT.search(solution):
        return "math"
    return "agent"


def _blank(solution: Any) -> bool:
    if isinstance(solution, str):
        return not solution.strip()
    if isinstance(solution, float):
        return math.isnan(solution)
    return isinstance(solution, (list, tuple)) and not solution


def _answer_score(text: str, solution: Any, answer_type: Any = None, ordered: Any = None) -> float | None:
    path = answer_match_path(solution, answer_type)
    if path is None:
        return None
    if path == "math":
        return math_score(str(solution), text)
    pred = agent_answer(text)
    ordered = bool(ordered) if ordered == ordered else False  # NaN from pandas counts as unset
    return 1.0 if pred is not None and answers_match(pred, solution, ordered=ordered) else 0.0


# ---- agent path

_BOXED = "\\boxed{"
_MAX_PLAIN_ANSWER = 200


def agent_answer(text: str) -> str | None:
    """The final answer for the agent path: react.extract_answer, else the last \\boxed{...}, else the whole text when
    it is one line of at most 200 characters; None otherwise."""
    try:
        a = _extract_answer(text)
    except Exception:  # the grammar never raises by contract; a reward must not even if it did
        a = None
    if a is None:
        a = _last_boxed(text)
    s = text.strip()
    if a is None and s and len(s) <= _MAX_PLAIN_ANSWER and "\n" not in s:
        return s
    return a


def _extract_answer(text: str) -> str | None:
    """react.extract_answer(text), faster (a property test holds them equal): without <answer> only the action
    can hold the answer, so only the label onwards is parsed, the common forms with the grammar's own patterns."""
    if "<answer>" in text:
        return extract_answer(text)
    label = first_label(text)
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


@dataclass(slots=True, eq=False)
class _Num:
    """A number in an answer; `decimals` as written, for the rounding rule."""

    value: float
    decimals: int


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
    num = s.removeprefix("$").removesuffix("%")
    if not num or not (num[0].isdigit() or num[0] in "+-."):  # most items are words: no regex for them
        return None
    if _NUMBER.fullmatch(num):
        return _json_number(num)
    if _THOUSANDS.fullmatch(num):
        return _Num(float(num.replace(",", "")), len(num.partition(".")[2]))
    m = _FRACTION.fullmatch(num)
    return _Num(int(m.group(1)) / int(m.group(2)), 6) if m and int(m.group(2)) != 0 else None


def _flatten(x: Any, out: list | None = None) -> list:
    """A gold or non-string answer as items (nested lists flattened), appended to `out`."""
    out = [] if out is None else out
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
    return out


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
    """A string answer as items: a bracketed list split at top-level commas (nested ones flattened, quotes kept
    whole); `split` also splits a bare a, b, c."""
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


_GOLD_CACHE: dict[Any, tuple] = {}


def _gold_items(solution: Any) -> tuple:
    """The gold as items; cached, since GRPO scores each gold once per generation."""
    key = solution if type(solution) is str else None
    if type(solution) is list or type(solution) is tuple:
        key = (type(solution), *map(type, solution), *solution)  # typed: True == 1 must not collide
    try:
        items = _GOLD_CACHE.get(key)
    except TypeError:  # unhashable items (nested lists): no caching
        key = items = None
    if items is None:
        items = tuple(_flatten(solution))
        if key is not None:
            if len(_GOLD_CACHE) >= 4096:
                _GOLD_CACHE.clear()
            _GOLD_CACHE[key] = items
    return items


def clear_caches() -> None:
    """Forget cached gold answers (benchmarks call it between runs)."""
    _GOLD_CACHE.clear()
    parse_gold.cache_clear()


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
    """Normalised comparison of an answer with the gold (the agent path of `answer_match`): case, quotes, $/%/\\boxed
    wrappers, a trailing period and whitespace do not matter; numbers match within a relative 1e-4 or as the gold
    rounded to the answer's 2+ decimals; lists (nested rows flattened) match as multisets unless `ordered`."""
    gold = _gold_items(solution)
    items = _items(pred, split=len(gold) > 1) if isinstance(pred, str) else tuple(_flatten(pred))
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


# ---- the math path: open-r1's check (math_verify, lazily imported), also `accuracy`'s

_MAX_MATH_CHARS = 100_000  # math_verify on megabytes takes seconds; no real answer is that long


@lru_cache(maxsize=1)
def _math_verify():
    try:
        import math_verify
        from latex2sympy2_extended import NormalizationConfig
    except ImportError as e:
        raise ImportError("the accuracy reward (and answer_match on LaTeX golds) needs math-verify: pip install "
                          f"'openmanus_lite[train]' (or pip install math-verify) ({e})") from None
    # open-r1's equations=True still works in this latex2sympy2 but warns on every call
    logging.getLogger("latex2sympy2_extended.math_normalization").addFilter(
        lambda record: "equations=True in NormalizationConfig is deprecated" not in record.getMessage())
    normalization = NormalizationConfig(nits=False, malformed_operators=False, basic_latex=True, equations=True,
                                        boxed="all", units=True)
    # boxed_match_priority=0: \boxed{} first
    answer_cfg = [math_verify.LatexExtractionConfig(normalization_config=normalization, boxed_match_priority=0,
                                                    try_extract_without_anchor=False)]
    return math_verify, answer_cfg


def math_timeout() -> int | None:
    # math_verify times out with signal.alarm, which only works in the main thread
    return 5 if threading.current_thread() is threading.main_thread() else None


@lru_cache(maxsize=4096)
def parse_gold(solution: str, timeout: int | None) -> tuple:
    mv, _ = _math_verify()
    try:
        return tuple(mv.parse(solution, extraction_mode="first_match", parsing_timeout=timeout))
    except Exception:
        return ()


def math_score(solution: str | None, text: str) -> float | None:
    """open-r1's accuracy for one completion, with cached golds, 5 s timeouts (main thread only: signal.alarm) and
    completions cut to their last 100k characters."""
    timeout = math_timeout()
    gold = () if solution is None else parse_gold(solution, timeout)
    if not gold:
        return None  # open-r1: an unparseable gold skips the sample
    mv, cfg = _math_verify()
    try:
        answer = mv.parse(text[-_MAX_MATH_CHARS:], extraction_config=cfg, extraction_mode="first_match",
                          parsing_timeout=timeout)
        return float(mv.verify(list(gold), answer, timeout_seconds=timeout))
    except Exception:
        return None


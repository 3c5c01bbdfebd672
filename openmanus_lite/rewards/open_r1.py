"""open-r1's rewards under open-r1's names, value for value (`accuracy` is math only: agent answers are
`answer_match`'s). The factories are classes, so the built rewards pickle."""

from __future__ import annotations

import math
import re
import warnings
from functools import lru_cache
from typing import Any, Iterable, Mapping

from openmanus_lite.rewards.answers import answer_scores, math_score, math_timeout, parse_gold
from openmanus_lite.rewards.columns import (
    ENV_OUTCOME,
    SOLUTION,
    assistant_texts,
    completions_list,
    env_column,
    last_assistant_text,
    need,
    number,
)
from openmanus_lite.rewards.registry import register_reward

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
    q = t.find(_END, p + 19)
    while q >= 0:
        e = q + 10
        if e == len(t) or t[e] == "\n":  # MULTILINE `$`: end of text or before a newline
            return True
        q = t.find(_END, q + 1)
    return False


@register_reward("format")
def format_reward(prompts=None, completions=None, **kwargs) -> list[float]:
    """1.0 when the completion matches `^<think>\\n.*?\\n</think>\\n<answer>\\n.*?\\n</answer>$`
    (re.DOTALL | re.MULTILINE, re.match), else 0.0 — open-r1's format reward."""
    return [1.0 if _format_ok(last_assistant_text(c)) else 0.0 for c in completions_list(completions, "format")]


_TAGS = ("<think>\n", "\n</think>\n", "\n<answer>\n", "\n</answer>")


@register_reward("tag_count")
def tag_count_reward(prompts=None, completions=None, **kwargs) -> list[float]:
    """0.25 for each of "<think>\\n", "\\n</think>\\n", "\\n<answer>\\n", "\\n</answer>" that occurs
    exactly once (open-r1's tag_count): a second think block loses the think points."""
    texts = map(last_assistant_text, completions_list(completions, "tag_count"))
    return [0.25 * sum(t.count(tag) == 1 for tag in _TAGS) for t in texts]


@register_reward("accuracy", columns=[SOLUTION])
def accuracy_reward(prompts=None, completions=None, **kwargs) -> list[float | None]:
    """open-r1's accuracy, value for value: 1.0 when math_verify finds the completion's LaTeX answer equal to the
    `solution`, 0.0 when not, None (TRL skips the sample) when the gold does not parse or verify fails. The answer
    needs a LaTeX anchor (\\boxed{...}, $...$): a bare `<answer>6</answer>` scores 0.0 against "6"."""
    comps = completions_list(completions, "accuracy")
    sols = need(kwargs, SOLUTION, len(comps), "accuracy")
    return [math_score(_gold_text(s), last_assistant_text(c)) for c, s in zip(comps, sols)]


def _gold_text(solution: Any) -> str | None:
    """The gold as text for math_verify; None for a missing gold and, with a warning, anything it cannot read."""
    if isinstance(solution, str):
        return solution
    if isinstance(solution, (int, float)) and not isinstance(solution, bool):
        return None if solution != solution else str(solution)
    if solution is not None:
        _warn_gold_type(type(solution).__name__)
    return None


def accuracy_skips(solutions: Iterable[Any]) -> int:
    """How many golds `accuracy` skips because math_verify cannot parse them (words, lists, blanks)."""
    timeout = math_timeout()
    return sum(1 for s in solutions if (text := _gold_text(s)) is None or not parse_gold(text, timeout))


@lru_cache(maxsize=None)
def _warn_gold_type(kind: str) -> None:
    warnings.warn(f"reward 'accuracy' got a {kind} in column {SOLUTION!r}: open-r1's accuracy parses text only, so "
                  "the sample is skipped (None); use the 'answer_match' reward for list and other agent answers",
                  stacklevel=2)


def _correct(texts: list[str], kwargs: Mapping[str, Any], reward: str) -> list[bool | None]:
    """Correctness per completion: answer_match on `solution` when given, else env_outcome >= 1."""
    if kwargs.get(SOLUTION) is not None:
        scores = answer_scores(texts, kwargs, reward)
    elif kwargs.get(ENV_OUTCOME) is not None or kwargs.get("environments") is not None:
        scores = [number(v) for v in env_column(kwargs, ENV_OUTCOME, len(texts), reward)]
    else:
        raise ValueError(f"reward {reward!r} needs the column {SOLUTION!r} (or {ENV_OUTCOME!r} from the multi-turn "
                         "rollout) to tell correct completions from wrong ones")
    return [None if s is None else s >= 1.0 for s in scores]


@register_reward("length", columns=[(SOLUTION, ENV_OUTCOME, "environments")], bounds=(-0.5, 0.5))
def length_reward(prompts=None, completions=None, **kwargs) -> list[float]:
    """open-r1's len_reward (Kimi 1.5): over the batch, lam = 0.5 - (len - min) / (max - min);
    correct completions get lam, wrong ones min(0, lam); all 0.0 when every length is equal.
    Lengths in characters; an unscoreable gold counts as correct (as in open-r1)."""
    texts = [last_assistant_text(c) for c in completions_list(completions, "length")]
    correct = _correct(texts, kwargs, "length")
    lengths = [len(t) for t in texts]
    lo, hi = min(lengths, default=0), max(lengths, default=0)
    if lo == hi:
        return [0.0] * len(lengths)
    lams = [0.5 - (n - lo) / (hi - lo) for n in lengths]
    return [lam if ok is None or ok else min(0.0, lam) for lam, ok in zip(lams, correct)]


@register_reward("cosine", columns=[(SOLUTION, ENV_OUTCOME, "environments")], bounds=(-1.0, 1.0), factory=True)
class CosineScaledReward:
    """open-r1's cosine-scaled reward: shorter correct completions earn more, longer wrong ones lose less (lengths
    in characters, capped at max_len); None when the gold cannot be scored."""

    def __init__(self, min_value_wrong: float = -1.0, max_value_wrong: float = -0.5,
                 min_value_correct: float = 0.5, max_value_correct: float = 1.0, max_len: int = 1000):
        if not max_len or max_len <= 0:
            raise ValueError(f"max_len must be a positive number of characters, got {max_len!r}")
        self.params = (min_value_wrong, max_value_wrong, min_value_correct, max_value_correct, max_len)
        self.reward_range = (min(min_value_wrong, max_value_wrong), max(min_value_correct, max_value_correct))
        self.__name__ = "cosine"

    def __call__(self, prompts=None, completions=None, **kwargs) -> list[float | None]:
        texts = [last_assistant_text(c) for c in completions_list(completions, self.__name__)]
        correct = _correct(texts, kwargs, self.__name__)
        return [None if ok is None else self._value(len(t), ok) for t, ok in zip(texts, correct)]

    def _value(self, length: int, correct: bool) -> float:
        min_w, max_w, min_c, max_c, max_len = self.params
        cosine = math.cos(min(1.0, length / max_len) * math.pi)
        lo, hi = (min_c, max_c) if correct else (max_w, min_w)
        return lo + 0.5 * (hi - lo) * (1.0 + cosine)


@register_reward("repetition_penalty", bounds=(-1.0, 0.0), factory=True)
class RepetitionPenalty:
    """open-r1's n-gram repetition penalty: (1 - distinct n-grams / n-grams) * max_penalty over
    lower-cased whitespace words of all assistant messages; 0.0 below ngram_size words."""

    def __init__(self, ngram_size: int = 3, max_penalty: float = -1.0):
        if max_penalty > 0:
            raise ValueError(f"max_penalty {max_penalty} should not be positive")
        if int(ngram_size) != ngram_size or ngram_size < 1:
            raise ValueError(f"ngram_size must be a positive integer, got {ngram_size!r}")
        self.ngram_size, self.max_penalty = int(ngram_size), float(max_penalty)
        self.reward_range = (self.max_penalty, 0.0)
        self.__name__ = "repetition_penalty"

    def __call__(self, prompts=None, completions=None, **kwargs) -> list[float]:
        return [self._penalty("\n".join(assistant_texts(c))) for c in completions_list(completions, self.__name__)]

    def _penalty(self, text: str) -> float:
        n, words = self.ngram_size, text.lower().split()
        if len(words) < n:
            return 0.0
        distinct = len(set(zip(*[words[i:] for i in range(n)])))
        return (1.0 - distinct / (len(words) - n + 1)) * self.max_penalty


@register_reward("soft_overlong_punishment", columns=["completion_ids"], bounds=(-1.0, 0.0), factory=True)
class SoftOverlongPunishment:
    """DAPO's soft overlong punishment (as open-r1 and TRL): 0 up to max_completion_len - soft_punish_cache tokens,
    then linearly to -1 at max_completion_len (GRPOConfig.max_completion_length), -1 beyond."""

    def __init__(self, max_completion_len: int | None = None, soft_punish_cache: int = 0):
        if max_completion_len is None:
            raise ValueError("soft_overlong_punishment needs max_completion_len: pass params="
                             "{'soft_overlong_punishment': {'max_completion_len': <GRPOConfig.max_completion_length>, "
                             "'soft_punish_cache': <tokens>}}")
        if max_completion_len <= 0 or not 0 <= soft_punish_cache <= max_completion_len:
            raise ValueError(f"need max_completion_len > 0 and 0 <= soft_punish_cache <= max_completion_len, got "
                             f"{max_completion_len} and {soft_punish_cache}")
        self.max_len, self.cache = int(max_completion_len), int(soft_punish_cache)
        self.reward_range = (-1.0, 0.0)
        self.__name__ = "soft_overlong_punishment"

    def __call__(self, prompts=None, completions=None, completion_ids=None, **kwargs) -> list[float]:
        if completion_ids is None:
            raise ValueError("reward 'soft_overlong_punishment' needs completion_ids (token ids; GRPOTrainer "
                             "passes them)")
        return [self._penalty(len(ids) if hasattr(ids, "__len__") else 0) for ids in completion_ids]

    def _penalty(self, n: int) -> float:
        if n <= self.max_len - self.cache:
            return 0.0
        return (self.max_len - self.cache - n) / self.cache if n <= self.max_len else -1.0


_STEPS = re.compile(r"(Step \d+:|^\d+\.|\n-|\n\*|First,|Second,|Next,|Finally,)")


@register_reward("reasoning_steps")
def reasoning_steps_reward(prompts=None, completions=None, **kwargs) -> list[float]:
    """open-r1's reasoning_steps: min(1, markers / 3), counting "Step N:", a leading "N.",
    bullets and First/Second/Next/Finally."""
    comps = completions_list(completions, "reasoning_steps")
    return [min(1.0, len(_STEPS.findall(last_assistant_text(c))) / 3) for c in comps]


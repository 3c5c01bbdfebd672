"""Per-task records and the summary statistics of a benchmark run. A success rate from 50 episodes is noisy, so every
rate comes with a 95% Wilson score interval (inside [0, 1] even at 0% and 100%). Summaries are computed from the
records, so a result loaded from JSON or CSV summarises alike."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Iterable

ALL = "all"  # the label of a pooled row (all domains, or all difficulties of a domain)


def wilson_interval(successes: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """95% Wilson score interval for a binomial proportion (z=1.96); (0, 1) when n is 0."""
    if n < 0 or successes < 0 or successes > n:
        raise ValueError(f"need 0 <= successes <= n, got successes={successes}, n={n}")
    if n == 0:
        return 0.0, 1.0
    p, z2 = successes / n, z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    # clamp: rounding can put a bound a hair past the estimate at 0% and 100%
    return max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half))


@dataclass
class TaskRecord:
    """The outcome of one episode (or search) on one task. `generated_tokens` is None when the policy does not count
    tokens; `trajectory` (a `Trajectory.to_dict()`) is None when loaded from CSV."""

    task_id: str
    domain: str
    difficulty: str
    success: bool
    score: float
    turns: int
    invalid_actions: int
    wall_s: float = 0.0
    generated_tokens: int | None = None
    model_calls: int | None = None
    trajectory: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TaskRecord":
        if missing := [k for k in ("task_id", "domain", "difficulty", "success", "score", "turns", "invalid_actions")
                       if k not in d]:
            raise ValueError(f"task record {d.get('task_id', '<no id>')!r} lacks field(s) {missing}")
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        kw.update(success=_as_bool(kw["success"]), score=float(kw["score"]), turns=int(kw["turns"]),
                  invalid_actions=int(kw["invalid_actions"]), wall_s=float(kw.get("wall_s") or 0.0))
        for opt in ("generated_tokens", "model_calls"):
            v = kw.get(opt)
            kw[opt] = None if v is None or (isinstance(v, float) and math.isnan(v)) or v == "" else int(v)
        kw["extra"] = dict(kw.get("extra") or {})
        return cls(**kw)


def _as_bool(v: Any) -> bool:
    if not isinstance(v, str):
        return bool(v)
    if (text := v.strip().lower()) not in ("true", "1", "yes", "false", "0", "no", ""):
        raise ValueError(f"cannot read {v!r} as a success flag (expected true/false)")
    return text in ("true", "1", "yes")


@dataclass
class GroupSummary:
    """One row of the results table: a domain x difficulty cell, or a pooled row (`all`)."""

    domain: str
    difficulty: str
    n: int
    successes: int
    success_rate: float
    ci_low: float
    ci_high: float
    mean_score: float
    mean_turns: float
    invalid_action_rate: float  # per action taken
    generated_tokens: int | None  # None when the policy does not count them
    tokens_per_episode: float | None
    wall_s: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize_group(records: list[TaskRecord], domain: str, difficulty: str) -> GroupSummary:
    """Statistics of one non-empty group of records."""
    if not records:
        raise ValueError(f"no records for domain={domain!r}, difficulty={difficulty!r}")
    n, k = len(records), sum(1 for r in records if r.success)
    lo, hi = wilson_interval(k, n)
    turns = sum(r.turns for r in records)
    counted = [r.generated_tokens for r in records if r.generated_tokens is not None]
    tokens = sum(counted) if len(counted) == n else None
    return GroupSummary(
        domain=domain, difficulty=difficulty, n=n, successes=k, success_rate=k / n, ci_low=lo, ci_high=hi,
        mean_score=sum(r.score for r in records) / n, mean_turns=turns / n,
        invalid_action_rate=(sum(r.invalid_actions for r in records) / turns) if turns else 0.0,
        generated_tokens=tokens, tokens_per_episode=(tokens / n) if tokens is not None else None,
        wall_s=sum(r.wall_s for r in records))


def summarize(records: Iterable[TaskRecord]) -> list[GroupSummary]:
    """Rows per domain x difficulty, then per domain (`all` difficulties), then overall, in suite order."""
    records = list(records)
    by_cell: dict[tuple[str, str], list[TaskRecord]] = {}
    for r in records:
        by_cell.setdefault((r.domain, r.difficulty), []).append(r)
    rows = []
    for d in dict.fromkeys(r.domain for r in records):
        cells = [(diff, recs) for (dom, diff), recs in by_cell.items() if dom == d]
        rows += [summarize_group(recs, d, diff) for diff, recs in cells]
        if len(cells) > 1:
            rows.append(summarize_group([r for _, recs in cells for r in recs], d, ALL))
    if len(by_cell) > 1:
        rows.append(summarize_group(records, ALL, ALL))
    return rows


def find_row(rows: list[GroupSummary], domain: str = ALL, difficulty: str = ALL) -> GroupSummary:
    """The row for (domain, difficulty); a single-cell result answers for `all` too (a result with one domain has no
    pooled overall row; one difficulty has no per-domain row)."""
    if exact := [r for r in rows if r.domain == domain and r.difficulty == difficulty]:
        return exact[0]
    candidates = [r for r in rows
                  if (domain == ALL or r.domain == domain) and (difficulty == ALL or r.difficulty == difficulty)]
    if len(candidates) == 1:
        return candidates[0]
    raise KeyError(f"no summary row for domain={domain!r}, difficulty={difficulty!r}; "
                   f"have {[(r.domain, r.difficulty) for r in rows]}")


LEVELS = ("domain", "cell", "overall", "all")  # pooled per domain, domain x difficulty cells, pooled overall, every row


def select_rows(rows: list[GroupSummary], level: str) -> list[GroupSummary]:
    """The rows of `summarize`'s output a table at `level` (LEVELS) shows."""
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    if level == "all":
        return rows
    if level == "overall":
        return [r for r in rows if r.domain == ALL] or rows[-1:]
    if level == "domain":
        out = []
        for d in dict.fromkeys(r.domain for r in rows if r.domain != ALL):
            mine = [r for r in rows if r.domain == d]
            pooled = [r for r in mine if r.difficulty == ALL]
            out += pooled or mine[:1]
        return out
    return [r for r in rows if r.domain != ALL and r.difficulty != ALL]

"""Run a policy on a benchmark suite (`run_benchmark`: one episode per task through `rollout.run_episodes`, or a
search per task) and keep everything: per-task records with trajectories and a summary per domain x difficulty.
Results round-trip through JSON (everything) and CSV (the per-task numbers). Tokens are counted when a policy exposes
`generated_tokens` (`policies.reply_tokens`)."""

from __future__ import annotations

import csv
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from openmanus_lite.eval.metrics import ALL, GroupSummary, TaskRecord, find_row, select_rows, summarize
from openmanus_lite.eval.suites import Suite, load_suite
from openmanus_lite.models import resolve_model_name
from openmanus_lite.peak_memory import PeakMemory
from openmanus_lite.policies import ModelPolicy, RandomPolicy, as_policy, reply_tokens
from openmanus_lite.rollout import run_episodes
from openmanus_lite.schema import Task, Trajectory, Turn
from openmanus_lite.search import STRATEGIES, as_proposer, run_search

CSV_FIELDS = ["policy", "suite", "task_id", "domain", "difficulty", "success", "score", "turns", "invalid_actions",
              "wall_s", "generated_tokens", "model_calls", "extra"]


@dataclass
class BenchmarkResult:
    """One policy on one suite; `label` names it in comparisons (default: the policy name)."""

    policy: str
    suite: str
    records: list[TaskRecord]
    wall_s: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)
    label: str | None = None

    def __post_init__(self):
        self.label = self.label or self.policy

    @property
    def summary(self) -> list[GroupSummary]:
        return summarize(self.records)

    def row(self, domain: str = ALL, difficulty: str = ALL) -> GroupSummary:
        return find_row(self.summary, domain, difficulty)

    def success_rate(self, domain: str = ALL, difficulty: str = ALL) -> float:
        return self.row(domain, difficulty).success_rate

    @property
    def generated_tokens(self) -> int | None:
        counts = [r.generated_tokens for r in self.records]
        return None if not counts or any(c is None for c in counts) else sum(counts)

    def table(self, level: str = "all"):
        """The summary rows at `level` (`metrics.LEVELS`) as a pandas DataFrame."""
        import pandas as pd

        df = pd.DataFrame([s.to_dict() for s in select_rows(self.summary, level)])
        df.insert(0, "policy", self.label)
        return df

    def by_domain(self) -> dict[str, dict[str, float]]:
        """The pooled row of each domain (and 'all') as plain numbers, the form benchmarks keep in JSON."""
        rows = {domain: self.row(domain) for domain in [*dict.fromkeys(r.domain for r in self.records), ALL]}
        return {domain: {"n": row.n, "success": row.success_rate, "success_lo": row.ci_low, "success_hi": row.ci_high,
                         "valid_rate": 1.0 - row.invalid_action_rate, "mean_turns": row.mean_turns}
                for domain, row in rows.items()}

    def by_task(self) -> dict[str, TaskRecord]:
        return {r.task_id: r for r in self.records}

    def to_dict(self) -> dict[str, Any]:
        return {"policy": self.policy, "label": self.label, "suite": self.suite, "wall_s": self.wall_s,
                "meta": self.meta, "summary": [s.to_dict() for s in self.summary],
                "records": [r.to_dict() for r in self.records]}

    def save(self, path: str | Path) -> Path:
        """`.json`: everything, trajectories included; `.csv`: the per-task numbers."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix == ".json":
            path.write_text(json.dumps(self.to_dict(), ensure_ascii=False, indent=1), encoding="utf-8")
        elif path.suffix == ".csv":
            with path.open("w", newline="", encoding="utf-8") as f:
                w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
                w.writeheader()
                for r in self.records:  # csv writes None (tokens or calls not counted) as ""
                    d = {k: v for k, v in r.to_dict().items() if k != "trajectory"}
                    w.writerow({"policy": self.label, "suite": self.suite, **d,
                                "extra": json.dumps(d["extra"], ensure_ascii=False)})
        else:
            raise ValueError(f"cannot save a benchmark result as {path.suffix!r}: use a .json or .csv path")
        return path

    @classmethod
    def load(cls, path: str | Path) -> "BenchmarkResult":
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no benchmark result at {path}")
        if path.suffix == ".json":
            d = json.loads(path.read_text(encoding="utf-8"))
            if missing := [key for key in ("policy", "suite", "records") if key not in d]:
                raise ValueError(f"{path} is not a benchmark result: missing {missing[0]!r}")
            return cls(policy=d["policy"], suite=d["suite"], records=[TaskRecord.from_dict(r) for r in d["records"]],
                       wall_s=float(d.get("wall_s", 0.0)), meta=dict(d.get("meta") or {}), label=d.get("label"))
        if path.suffix == ".csv":
            with path.open(newline="", encoding="utf-8") as f:
                rows = list(csv.DictReader(f))
            if not rows:
                raise ValueError(f"{path} holds no task records")
            if missing := [c for c in ("policy", "suite", "task_id", "success") if c not in rows[0]]:
                raise ValueError(f"{path} is not a benchmark CSV: missing columns {missing}")
            records = []
            for i, row in enumerate(rows, 2):
                try:
                    records.append(TaskRecord.from_dict(dict(row, extra=json.loads(row.get("extra") or "{}"))))
                except ValueError as e:
                    raise ValueError(f"{path}:{i}: {e}") from e
            return cls(policy=rows[0]["policy"], suite=rows[0]["suite"], records=records,
                       wall_s=sum(r.wall_s for r in records))
        raise ValueError(f"cannot load a benchmark result from {path.suffix!r}: use a .json or .csv path")


load_result = BenchmarkResult.load


class TokenMeter:
    """Wraps a policy and attributes its generated tokens and calls to the task of each reply."""

    def __init__(self, policy: Any):
        self.policy = policy
        self.name = getattr(policy, "name", "policy")
        self.counts_tokens = hasattr(policy, "generated_tokens")
        self.tokens: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()

    def act_batch(self, histories, envs):
        before = int(getattr(self.policy, "generated_tokens", 0) or 0)
        replies = self.policy.act_batch(histories, envs)
        if not isinstance(replies, list) or len(replies) != len(histories):
            got = len(replies) if isinstance(replies, list) else type(replies).__name__
            raise ValueError(f"policy {self.name!r} returned {got} replies for {len(histories)} conversations; "
                             f"act_batch must return one string per conversation")
        per = reply_tokens(self.policy, replies, before) if self.counts_tokens else [None] * len(replies)
        for env, n in zip(envs, per):
            self.calls[env.task.id] += 1
            if n is not None:
                self.tokens[env.task.id] += n
        return replies


def make_policy(spec: Any, *, max_new_tokens: int = 96, temperature: float = 0.0, batch_size: int = 32,
                seed: int = 0) -> Any:
    """A policy from what a user names: 'expert', 'random' (seeded), a model (`models.resolve_model_name`: loaded
    here), or a policy object / `(messages) -> str` callable, used as it is."""
    if not isinstance(spec, str) or spec == "expert":
        return as_policy(spec)
    if spec == "random":
        return RandomPolicy(seed=seed)
    return ModelPolicy(resolve_model_name(spec), max_new_tokens=max_new_tokens, temperature=temperature,
                       batch_size=batch_size, seed=seed)


def run_benchmark(policy: Any, suite: Suite | str | list[Task] = "dev", *, domains=None, difficulties=None,
                  limit: int | None = None, max_turns: int | dict[str, int] | None = None, batch_size: int = 32,
                  progress: bool = True, seed: int = 0, label: str | None = None,
                  meta: dict[str, Any] | None = None, search: str | None = None,
                  budget: Any = None, search_options: dict[str, Any] | None = None,
                  max_invalid_streak: int | None = None) -> BenchmarkResult:
    """Play one episode per task of `suite` (a `Suite`, a frozen suite name or a task list; `domains` /
    `difficulties` / `limit` take a subset) and summarise: the kit's one evaluation. `policy`: anything
    `make_policy` takes, given up to `batch_size` conversations per call. `max_invalid_streak` ends an episode after
    that many invalid actions in a row (AgentBench ends one at the first; None: the turn limit alone, as the kit's
    records were measured). With `search` (one of `search.STRATEGIES`) each task is searched within `budget` (a
    `search.Budget`, or task -> Budget) by `search.as_proposer(policy)`, `search_options` going to the strategy.
    `meta["peak_memory"]` is the evaluation's peak memory."""
    with PeakMemory() as peak:
        if not isinstance(suite, (str, Suite)):
            suite = Suite("tasks", list(suite))
        suite = (load_suite(suite, domains=domains, difficulties=difficulties, limit=limit) if isinstance(suite, str)
                 else suite.subset(domains, difficulties, limit))
        if not suite.tasks:
            raise ValueError(f"suite {suite.name!r} has no tasks for domains={domains}, difficulties={difficulties}")
        ids = [t.id for t in suite.tasks]
        if len(set(ids)) != len(ids):
            raise ValueError(f"suite {suite.name!r} has duplicate task ids; per-task records need unique ids")
        if search is not None and max_invalid_streak is not None:
            raise ValueError("max_invalid_streak applies to plain episodes, not to a search")
        if search is not None:
            result = _search_suite(search, suite, policy, budget, max_turns=max_turns, progress=progress, seed=seed,
                                   label=label, meta=meta, options=dict(search_options or {}))
        elif budget is not None or search_options:
            raise ValueError("budget and search_options apply to a search: pass search='best_of_n' (or beam, mcts, "
                             "dfsdt) too, or leave them out for greedy episodes")
        else:
            meter = TokenMeter(make_policy(policy, batch_size=batch_size, seed=seed))
            t0 = time.perf_counter()
            trajs = run_episodes(meter, suite.tasks, max_turns=max_turns, batch_size=batch_size, progress=progress,
                                 source=f"benchmark:{suite.name}", max_invalid_streak=max_invalid_streak)
            wall = time.perf_counter() - t0
            records = [TaskRecord(
                task_id=task.id, domain=task.domain, difficulty=task.difficulty, success=bool(traj.meta["success"]),
                score=float(traj.meta["score"]), turns=int(traj.meta["turns"]),
                invalid_actions=int(traj.meta["invalid_actions"]), wall_s=float(traj.meta.get("wall_s", 0.0)),
                generated_tokens=meter.tokens[task.id] if meter.counts_tokens else None,
                model_calls=meter.calls[task.id], trajectory=traj.to_dict()) for task, traj in zip(suite.tasks, trajs)]
            result = BenchmarkResult(policy=meter.name, suite=suite.name, records=records, wall_s=wall, label=label,
                                     meta={"max_turns": max_turns, "max_invalid_streak": max_invalid_streak,
                                           "batch_size": batch_size, "n_tasks": len(records), **(meta or {})})
    result.meta["peak_memory"] = peak.as_dict()
    if progress:
        print(f"evaluation {peak.summary()}", flush=True)
    return result


def _search_suite(strategy: str, suite: Suite, proposer: Any, budget: Any, *, max_turns, progress: bool, seed: int,
                  label: str | None, meta: dict[str, Any] | None, options: dict[str, Any]) -> BenchmarkResult:
    """`run_benchmark` with a search strategy: one search per task, scored by replaying its choice."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown search strategy {strategy!r}; available: {sorted(STRATEGIES)}")
    if budget is None:
        raise ValueError(f"search={strategy!r} needs a budget: a search.Budget(tokens=..., calls=...) or a "
                         f"function task -> Budget")
    proposer = as_proposer(proposer)
    options.setdefault("seed", seed)
    records = []
    t0 = time.perf_counter()
    for task in tqdm(suite.tasks, desc=f"{strategy} ({proposer.name})", disable=not progress):
        b = budget(task) if callable(budget) else budget
        r = run_search(strategy, task, proposer, b, max_turns=max_turns, **options)
        traj = Trajectory(id=f"{strategy}/{task.id}", source=f"search:{strategy}", domain=task.domain,
                          messages=[Turn(m["role"], m["content"], m["role"] == "assistant") for m in r.messages],
                          meta={"task_id": task.id, "success": r.success, "score": r.score})
        records.append(TaskRecord(
            task_id=task.id, domain=task.domain, difficulty=task.difficulty, success=bool(r.success),
            score=float(r.score or 0.0), turns=r.turns, invalid_actions=r.invalid_actions, wall_s=r.wall_s,
            generated_tokens=r.tokens, model_calls=r.calls, trajectory=traj.to_dict(),
            extra={"strategy": strategy, "value": r.value, "episodes": r.episodes, "nodes": r.nodes,
                   "finished": r.finished, "oracle": r.oracle, "budget": r.budget, "replay_matches": r.replay_matches}))
    name = f"{strategy}{'-oracle' if options.get('oracle') else ''}"
    info = {"strategy": strategy, "max_turns": max_turns, "n_tasks": len(records),
            **{k: v for k, v in options.items() if isinstance(v, (int, float, str, bool))}, **(meta or {})}
    return BenchmarkResult(policy=f"{name}:{proposer.name}", suite=suite.name, records=records,
                           wall_s=time.perf_counter() - t0, label=label, meta=info)

"""Test-time scaling: success rate vs compute budget for each search strategy. The unit of compute is one greedy
episode's generated tokens on the same task; every strategy gets 1x, 2x, 4x ... of it, so "search beats greedy" is
judged at equal and larger cost. Oracle best-of-N (pass@k) is an upper bound, kept apart from the real curves."""

from __future__ import annotations

import itertools
import statistics
import time
from dataclasses import dataclass, field, replace
from typing import Any

from openmanus_lite.eval.benchmark import BenchmarkResult, run_benchmark
from openmanus_lite.eval.metrics import ALL, TaskRecord
from openmanus_lite.eval.suites import Suite
from openmanus_lite.schema import Task
from openmanus_lite.search import Budget, as_proposer

UNLIMITED = 10**12


@dataclass
class ScalingResult:
    greedy: BenchmarkResult
    runs: dict[tuple[str, float], BenchmarkResult] = field(default_factory=dict)  # (strategy, multiplier) -> result
    unit_tokens: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0

    def frame(self, domain: str = ALL):
        """One row per (strategy, budget): success rate with CI, and the median cost spent (x the greedy episode)."""
        import pandas as pd

        rows = []
        for (strategy, mult), res in [(("greedy", 1.0), self.greedy), *self.runs.items()]:
            r = res.row(domain)
            recs = [x for x in res.records if domain == ALL or x.domain == domain]
            cost = 1.0 if strategy == "greedy" else statistics.median(
                x.generated_tokens / max(1, self.unit_tokens[x.task_id]) for x in recs)
            rows.append({"strategy": strategy, "budget": mult, "success_rate": r.success_rate, "ci_low": r.ci_low,
                         "ci_high": r.ci_high, "n": r.n, "median_cost_x": cost})
        return pd.DataFrame(rows)

    def summary(self) -> dict[str, Any]:
        """Curves, and search minus greedy at equal (1x) and at the best larger budget, per strategy."""
        greedy = self.greedy.success_rate()
        curves: dict[str, dict[str, float]] = {}
        for (strategy, mult), res in self.runs.items():
            curves.setdefault(strategy, {})[f"{mult:g}x"] = round(res.success_rate(), 4)
        out: dict[str, Any] = {"greedy_success": round(greedy, 4), "curves": curves, "delta_vs_greedy": {}}
        for strategy, curve in curves.items():
            if strategy.endswith("-oracle"):
                continue
            at1 = curve.get("1x")
            larger = {k: v for k, v in curve.items() if k != "1x"}
            best_k = max(larger, key=larger.get) if larger else None
            out["delta_vs_greedy"][strategy] = {  # + 0.0: no "-0.0"
                "equal_budget": None if at1 is None else round(at1 - greedy, 4) + 0.0,
                "best_larger_budget": None if best_k is None else round(larger[best_k] - greedy, 4) + 0.0, "at": best_k}
        return out


def unit_tokens(greedy: BenchmarkResult) -> dict[str, int]:
    """Each task's unit of compute: the tokens its greedy episode generated (at least 1)."""
    return {r.task_id: max(1, int(r.generated_tokens or 0)) for r in greedy.records}


def episode_pools(greedy: BenchmarkResult, samples: list[BenchmarkResult]) -> dict[str, list[TaskRecord]]:
    """Task id -> its episodes: the greedy one first, then one per sampled pass over the same tasks."""
    pools = {r.task_id: [r] for r in greedy.records}
    for res in samples:
        for r in res.records:
            if r.task_id not in pools:
                raise ValueError(f"sampled pass {res.label!r} played task {r.task_id!r}, which the greedy pass did not")
            pools[r.task_id].append(r)
    return pools


def best_of_n_from_pools(pools: dict[str, list[TaskRecord]], sizes, scores: dict[str, dict[str, list[float]]], *,
                         suite_name: str = "tasks", oracle: bool = True) -> dict[tuple[str, float], BenchmarkResult]:
    """Best-of-N for every N of `sizes` and every picker, from one pool of episodes per task (`episode_pools`), so
    differences are the pickers', not sampling noise. `scores[picker][task_id]` holds one score per pooled episode;
    of the first N the highest wins, ties to the earlier. Returns {("best_of_n[picker]", N): result}, plus
    ("best_of_n-oracle", N) (pass@N) with `oracle`; each record is the chosen episode's, with all N's tokens."""
    out: dict[tuple[str, float], BenchmarkResult] = {}
    for (name, per_task), (tid, pool) in itertools.product(scores.items(), pools.items()):
        if len(per_task.get(tid, ())) != len(pool):
            raise ValueError(f"picker {name!r} has {len(per_task.get(tid, ()))} scores for task {tid!r}, "
                             f"which pools {len(pool)} episodes")
    for n in sorted(int(x) for x in sizes):
        if n < 1 or any(len(pool) < n for pool in pools.values()):
            raise ValueError(f"best-of-{n} needs at least {n} pooled episodes per task")
        picks = {(f"best_of_n[{name}]", name): [max(range(n), key=lambda j, s=per_task[tid]: (s[j], -j))
                                                for tid in pools] for name, per_task in scores.items()}
        if oracle:
            picks[("best_of_n-oracle", "oracle")] = [next((j for j in range(n) if pool[j].success), 0)
                                                     for pool in pools.values()]
        for (key, policy), chosen in picks.items():
            records = [_chosen(pool, j, n) for pool, j in zip(pools.values(), chosen)]
            out[(key, float(n))] = BenchmarkResult(policy=policy, suite=suite_name, records=records, label=f"{key}@{n}")
    return out


def random_pick_rates(pools, sizes) -> dict[str, float] | None:
    """The expected success of a uniform pick among each pool's first N episodes."""
    pools = list(pools)
    if not pools:
        return None
    return {f"{n}x": sum(sum(r.success for r in pool[:n]) / n for pool in pools) / len(pools) for n in sizes}


def _chosen(pool: list[TaskRecord], best: int, n: int) -> TaskRecord:
    spent = [r.generated_tokens for r in pool[:n]]
    return replace(pool[best], generated_tokens=None if None in spent else sum(spent),
                   extra={**pool[best].extra, "pool_index": best, "pool_size": n})


def run_scaling(tasks: list[Task], proposer: Any, *, strategies=("best_of_n", "beam", "mcts", "dfsdt"),
                multipliers=(1, 2, 4, 8), oracle: bool = True, max_turns: int | None = None, seed: int = 0,
                progress: bool = True, strategy_kwargs: dict[str, dict] | None = None,
                suite_name: str = "tasks", greedy: BenchmarkResult | None = None) -> ScalingResult:
    """Greedy episodes first (each task's unit of tokens), then every strategy at every multiple of the unit, and
    with `oracle` oracle best-of-N. `greedy`: the greedy episodes when already played, with token counts."""
    proposer = as_proposer(proposer)
    suite = Suite(suite_name, list(tasks))
    t0 = time.perf_counter()
    if greedy is None:
        greedy = run_benchmark(proposer, suite, search="best_of_n", budget=Budget(tokens=UNLIMITED),
                               search_options={"n": 1}, max_turns=max_turns, seed=seed, progress=progress,
                               label="greedy")
    elif {r.task_id for r in greedy.records} != {t.id for t in suite.tasks} or greedy.generated_tokens is None:
        raise ValueError("the greedy result given must cover exactly these tasks and count generated tokens")
    unit = unit_tokens(greedy)
    out = ScalingResult(greedy=greedy, unit_tokens=unit)
    kwargs = strategy_kwargs or {}
    plan = [(s, m, False) for s in strategies for m in multipliers]
    plan += [("best_of_n", m, True) for m in multipliers if oracle]
    for strategy, mult, orc in plan:
        def budget(task: Task, _m=mult) -> Budget:
            return Budget(tokens=max(1, int(round(_m * unit[task.id]))), unit=unit[task.id])

        key = f"{strategy}-oracle" if orc else strategy
        out.runs[(key, float(mult))] = run_benchmark(
            proposer, suite, search=strategy, budget=budget, search_options={"oracle": orc, **kwargs.get(strategy, {})},
            max_turns=max_turns, seed=seed, progress=progress, label=f"{key}@{mult:g}x")
    out.wall_s = time.perf_counter() - t0
    return out

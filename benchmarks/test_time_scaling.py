"""Test-time scaling: does search beat greedy decoding, at equal and at larger compute?

For each task (the first --tasks per domain of a frozen suite, medium tasks of four domains by default,
where a strong SFT checkpoint leaves room), one greedy episode sets the unit of compute (its generated
tokens). Then, using only what an agent can see (no success checker):
  - best-of-N from one pool per task (the greedy episode plus N-1 sampled ones, sampled in batched passes),
    picked by the ORM and the PRM (--orm / --prm: reward models saved by benchmarks/preference_learning.py)
    and by the policy's own mean log-probability per reply token (`generation.reply_logprobs`), beside the
    expected success of a uniform random pick: N = 1, 2, 4, 8 costs about N units;
  - beam (Tree-of-Thoughts), MCTS and DFSDT, searched per task within 1x, 2x, 4x the unit (one task at a
    time: --tree-tasks runs them on the first few tasks per domain only).
Oracle best-of-N (pass@N: any of the N succeeded) is the upper bound, drawn dotted. Writes scaling.csv (a
row per domain, strategy and budget), a plot and the per-run results under --out; ends with one
`RESULT {json}` line.

    python benchmarks/test_time_scaling.py --policy random --difficulty easy --domains os,db,kg  # quick, ~1 min
    python benchmarks/test_time_scaling.py --model runs/sft_60min/merged --orm runs/pref_strong/orm \
        --prm runs/pref_strong/prm --max-turns os=5,db=5,kg=9,ecommerce=8,web=12,household=16 \
        --tasks 8 --tree-tasks 2 --multipliers 1,2                          # docs/RESULTS.md

Default model: $OPENMANUS_SFT_CHECKPOINT, else the newest SFT checkpoint under runs/ (a folder
whose path mentions 'sft' and holds a config.json or adapter_config.json), else the embedded
default model.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def find_sft_checkpoint() -> Path | None:
    env = os.environ.get("OPENMANUS_SFT_CHECKPOINT")
    if env and Path(env).is_dir():
        return Path(env)
    from openmanus_lite.models import find_checkpoint

    return find_checkpoint("sft")


def make_proposer(args):
    """(proposer, name, model policy or None)."""
    from openmanus_lite.search import ExpertProposer, PolicyProposer, RandomProposer

    if args.policy == "random":
        return RandomProposer(), "random", None
    if args.policy == "expert":
        return ExpertProposer(), "expert", None
    path = args.model or find_sft_checkpoint()
    if path is None:
        from openmanus_lite.models import prepare_default_model

        path = prepare_default_model()
        print(f"no SFT checkpoint found under runs/: using the embedded default model at {path}", file=sys.stderr)
    from openmanus_lite.models import load_model
    from openmanus_lite.policies import ModelPolicy

    model, tok = load_model(str(path))
    policy = ModelPolicy(model, tok, name=Path(path).name, max_new_tokens=args.max_new_tokens, temperature=0.0,
                         batch_size=args.batch_size, seed=args.seed)
    return PolicyProposer(policy), str(path), policy


def main(argv=None) -> int:
    from openmanus_lite.envs import parse_turn_limits
    from openmanus_lite.splits import SEARCH_SUITE

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--policy", choices=["model", "random", "expert"], default="model")
    p.add_argument("--model", help="checkpoint path or hub name (default: see above)")
    p.add_argument("--suite", default=SEARCH_SUITE, help=f"frozen suite (default: splits.SEARCH_SUITE, {SEARCH_SUITE})")
    p.add_argument("--domains", default="db,web,household,ecommerce",
                   help="comma-separated; at least three for the headline (default: the four where the 60-minute "
                        "checkpoint has mixed outcomes on medium tasks)")
    p.add_argument("--difficulty", default="medium")
    p.add_argument("--tasks", type=int, default=6, help="tasks per domain (the first ones of the suite)")
    p.add_argument("--multipliers", default="1,2,4", help="budgets of the tree searches, in greedy episodes")
    p.add_argument("--tree-tasks", type=int, default=None,
                   help="tree searches on only the first this many tasks per domain (they search one task at a "
                        "time, far slower than the batched pool)")
    p.add_argument("--strategies", default="beam,mcts,dfsdt",
                   help="searched per task within each budget (best_of_n here: search.py's heuristic picker)")
    p.add_argument("--best-of", default="1,2,4,8",
                   help="pool sizes of pooled best-of-N (a model policy only; '' skips the pool)")
    p.add_argument("--orm", help="a saved outcome reward model (benchmarks/preference_learning.py writes <out>/orm)")
    p.add_argument("--prm", help="a saved process reward model (<out>/prm of the same script)")
    p.add_argument("--temperature", type=float, default=0.8, help="sampling temperature of the pooled episodes")
    p.add_argument("--no-oracle", action="store_true", help="skip oracle best-of-N (pass@N)")
    p.add_argument("--max-turns", type=parse_turn_limits, default=None,
                   help="turn limits: N, 'easy', 'medium' or domain=N,... (default: each environment's own)")
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--suite-root", help="folder of frozen suites (default: the suites shipped in the package)")
    p.add_argument("--out", default=str(ROOT / "runs" / "test_time_scaling"))
    args = p.parse_args(argv)

    from openmanus_lite.eval.plots import file_pyplot

    plt = file_pyplot()
    import pandas as pd

    from openmanus_lite.eval.benchmark import BenchmarkResult, run_benchmark
    from openmanus_lite.eval.metrics import ALL
    from openmanus_lite.eval.plots import plot_scaling
    from openmanus_lite.eval.scaling import (
        ScalingResult,
        best_of_n_from_pools,
        episode_pools,
        random_pick_rates,
        run_scaling,
        unit_tokens,
    )
    from openmanus_lite.eval.suites import load_suite
    from openmanus_lite.schema import Trajectory

    domains = [d for d in args.domains.split(",") if d]
    suite = load_suite(args.suite, domains=domains, difficulties=[args.difficulty], limit=args.tasks,
                       root=args.suite_root)
    proposer, source, policy = make_proposer(args)
    mults = [float(m) for m in args.multipliers.split(",") if m]
    sizes = [int(n) for n in args.best_of.split(",") if n] if policy is not None else []
    strategies = [s for s in args.strategies.split(",") if s]
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    greedy = None
    pooled = None
    random_pick = None
    if sizes:
        from openmanus_lite.engine.generation import reply_logprobs
        from openmanus_lite.policies import ModelPolicy

        t = time.perf_counter()
        greedy = run_benchmark(policy, suite, max_turns=args.max_turns, batch_size=32, label="greedy")
        sampler = ModelPolicy(policy.model, policy.tokenizer, name="sampled", max_new_tokens=args.max_new_tokens,
                              temperature=args.temperature, seed=args.seed + 1, batch_size=32)
        samples = [run_benchmark(sampler, suite, max_turns=args.max_turns, batch_size=32, label=f"sample{k}")
                   for k in range(max(sizes) - 1)]
        pools = episode_pools(greedy, samples)
        timings["pool_episodes"] = time.perf_counter() - t
        convs = {tid: [Trajectory.from_dict(r.trajectory).to_messages() for r in pool] for tid, pool in pools.items()}
        t = time.perf_counter()
        scores = {"logprob": {tid: reply_logprobs(policy.model, policy.tokenizer, c) for tid, c in convs.items()}}
        timings["logprob_scores"] = time.perf_counter() - t
        for name, path in (("orm", args.orm), ("prm", args.prm)):
            if path:
                from openmanus_lite.preference.reward_model import load_reward_model

                t = time.perf_counter()
                rm = load_reward_model(path)
                scores[name] = {tid: rm.score_conversations(c) for tid, c in convs.items()}
                timings[f"{name}_scores"] = time.perf_counter() - t
                del rm
        random_pick = {}
        for d in [ALL, *domains]:
            rates = random_pick_rates([pool for pool in pools.values() if d in (ALL, pool[0].domain)], sizes)
            random_pick[d] = rates and {k: round(v, 4) for k, v in rates.items()}
        pooled = ScalingResult(greedy, best_of_n_from_pools(pools, sizes, scores, suite_name=suite.name,
                                                            oracle=not args.no_oracle), unit_tokens(greedy))
    tree = None
    tree_suite = suite.subset(limit=args.tree_tasks) if args.tree_tasks else suite
    if strategies:
        t = time.perf_counter()
        ids = {task.id for task in tree_suite.tasks}
        tree_greedy = None if greedy is None else BenchmarkResult(
            greedy.policy, greedy.suite, [r for r in greedy.records if r.task_id in ids], label="greedy")
        tree = run_scaling(tree_suite.tasks, proposer, strategies=strategies, multipliers=mults,
                           oracle=not args.no_oracle and pooled is None, max_turns=args.max_turns, seed=args.seed,
                           suite_name=suite.name, greedy=tree_greedy)
        timings["tree_searches"] = time.perf_counter() - t
    if pooled is None and tree is None:
        p.error("nothing to measure: give --strategies, or --best-of with a model policy")
    wall = time.perf_counter() - t0
    subset = tree is not None and pooled is not None and len(tree_suite) < len(suite)

    def frame(domain=ALL):
        """Pooled best-of-N and tree searches in one table; the trees' own greedy row when they ran on fewer tasks."""
        parts = [pooled.frame(domain)] if pooled is not None else []
        if tree is not None:
            ft = tree.frame(domain)
            if subset:
                ft.loc[ft.strategy == "greedy", "strategy"] = f"greedy (first {args.tree_tasks} per domain)"
            elif pooled is not None:
                ft = ft[ft.strategy != "greedy"]
            parts.append(ft)
        return pd.concat(parts, ignore_index=True)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    table = frame()
    base = pooled or tree
    base.greedy.save(out / "greedy.json")
    for (strategy, mult), r in [*(pooled.runs.items() if pooled else ()), *(tree.runs.items() if tree else ())]:
        r.save(out / f"{strategy}_{mult:g}x.csv")
    fig, axes = plt.subplots(1, len(domains) + 1, figsize=(4.2 * (len(domains) + 1), 3.6), squeeze=False)
    curves = ~table.strategy.str.startswith("greedy")
    plot_scaling(table[curves], ax=axes[0][0], baseline=base.greedy.success_rate(), title=f"all ({len(suite)} tasks)")
    per_domain = {}
    by_domain = [table.assign(domain="all")]
    for ax, d in zip(axes[0][1:], domains):
        fd = frame(d)
        by_domain.append(fd.assign(domain=d))
        plot_scaling(fd[~fd.strategy.str.startswith("greedy")], ax=ax, baseline=base.greedy.success_rate(d), title=d)
        per_domain[d] = {f"{row.strategy}@{row.budget:g}x": round(row.success_rate, 4) for row in fd.itertuples()}
    # one file, a row per (domain or 'all', strategy, budget): notebook 08 plots the measured curves from it
    pd.concat(by_domain, ignore_index=True).to_csv(out / "scaling.csv", index=False)
    fig.suptitle(f"test-time scaling: {Path(source).name} on {args.suite}/{args.difficulty}"
                 + (f" (tree searches: the first {args.tree_tasks} tasks per domain)" if subset else ""))
    fig.tight_layout()
    fig.savefig(out / "scaling.png", dpi=120)

    print(table.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    result = {
        "policy": source, "suite": args.suite, "difficulty": args.difficulty, "domains": domains,
        "tasks": len(suite), "tree_tasks": len(tree_suite) if tree else 0, "multipliers": mults, "best_of": sizes,
        "orm": args.orm, "median_greedy_tokens": sorted(base.unit_tokens.values())[len(base.unit_tokens) // 2],
        "greedy_success": round(base.greedy.success_rate(), 4),
        "pooled": pooled.summary() if pooled else None, "random_pick": random_pick,
        "tree": tree.summary() if tree else None,
        "per_domain": per_domain, "timings_s": {k: round(v, 1) for k, v in timings.items()},
        "wall_s": round(wall, 1), "plot": str(out / "scaling.png"),
    }
    print("RESULT " + json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Test-time scaling: does search beat greedy decoding, at equal and at larger compute?

For each task of the dev suite of >= 3 domains, one greedy episode sets the unit of compute
(its generated tokens); best-of-N, beam (Tree-of-Thoughts), MCTS and DFSDT then get 1x, 2x,
4x, 8x that budget, using only what an agent can see (no success checker). Oracle-selected
best-of-N (pass@k) is reported separately as an upper bound. Writes a CSV, a plot and the
per-run results; ends with one `RESULT {json}` line.

    python benchmarks/test_time_scaling.py --policy random                 # quick, CPU, ~1 min
    python benchmarks/test_time_scaling.py                                  # the SFT checkpoint
    python benchmarks/test_time_scaling.py --model PATH --tasks 20          # any checkpoint

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
    from openmanus_lite.eval.cli import find_checkpoint

    return find_checkpoint("sft")


def make_proposer(args):
    from openmanus_lite.search import ExpertProposer, PolicyProposer, RandomProposer

    if args.policy == "random":
        return RandomProposer(), "random"
    if args.policy == "expert":
        return ExpertProposer(), "expert"
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
    return PolicyProposer(policy), str(path)


def main(argv=None) -> int:
    from openmanus_lite.splits import SEARCH_SUITE

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--policy", choices=["model", "random", "expert"], default="model")
    p.add_argument("--model", help="checkpoint path or hub name (default: see above)")
    p.add_argument("--suite", default=SEARCH_SUITE, help=f"frozen suite (default: splits.SEARCH_SUITE, {SEARCH_SUITE})")
    p.add_argument("--domains", default="os,db,kg", help="comma-separated; at least three for the headline")
    p.add_argument("--difficulty", default="easy")
    p.add_argument("--tasks", type=int, default=10, help="tasks per domain (the first ones of the suite)")
    p.add_argument("--multipliers", default="1,2,4,8")
    p.add_argument("--strategies", default="best_of_n,beam,mcts,dfsdt")
    p.add_argument("--no-oracle", action="store_true", help="skip oracle best-of-N (pass@k)")
    p.add_argument("--max-turns", type=int, help="override the environments' turn limits")
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--suite-root", help="folder of frozen suites (default: the suites shipped in the package)")
    p.add_argument("--out", default=str(ROOT / "runs" / "test_time_scaling"))
    args = p.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from openmanus_lite.eval.plots import plot_scaling
    from openmanus_lite.eval.scaling import run_scaling
    from openmanus_lite.eval.suites import load_suite

    domains = [d for d in args.domains.split(",") if d]
    suite = load_suite(args.suite, domains=domains, difficulties=[args.difficulty], limit=args.tasks,
                       root=args.suite_root)
    proposer, source = make_proposer(args)
    mults = [float(m) for m in args.multipliers.split(",")]
    t0 = time.perf_counter()
    res = run_scaling(suite.tasks, proposer, strategies=args.strategies.split(","), multipliers=mults,
                      oracle=not args.no_oracle, max_turns=args.max_turns, seed=args.seed,
                      suite_name=suite.name)
    wall = time.perf_counter() - t0

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    frame = res.frame()
    frame.to_csv(out / "scaling.csv", index=False)
    res.greedy.save(out / "greedy.json")
    for (strategy, mult), r in res.runs.items():
        r.save(out / f"{strategy}_{mult:g}x.csv")
    fig, axes = plt.subplots(1, len(domains) + 1, figsize=(4.2 * (len(domains) + 1), 3.6), squeeze=False)
    real = frame[frame["strategy"] != "greedy"]
    plot_scaling(real, ax=axes[0][0], baseline=res.greedy.success_rate(), title=f"all ({len(suite)} tasks)")
    for ax, d in zip(axes[0][1:], domains):
        fd = res.frame(d)
        plot_scaling(fd[fd["strategy"] != "greedy"], ax=ax, baseline=fd.iloc[0]["success_rate"], title=d)
    fig.suptitle(f"test-time scaling: {Path(source).name} on {args.suite}/{args.difficulty}")
    fig.tight_layout()
    fig.savefig(out / "scaling.png", dpi=120)

    print(frame.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    per_domain = {d: {"greedy": round(res.frame(d).iloc[0]["success_rate"], 4)} for d in domains}
    summary = res.summary()
    result = {
        "policy": source, "suite": args.suite, "difficulty": args.difficulty, "domains": domains,
        "tasks": len(suite), "multipliers": mults, "median_greedy_tokens": sorted(res.unit_tokens.values())[
            len(res.unit_tokens) // 2],
        **summary, "per_domain_greedy": per_domain, "wall_s": round(wall, 1), "plot": str(out / "scaling.png"),
    }
    print("RESULT " + json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""AgentBench OS dev in the virtual shell: which tasks are hosted, and a policy's score on them.

Imports AgentBench's 26 os_interaction dev tasks (envs/agentbench_os.py), reports the hosted and rejected counts
with every rejection's reason, checks that the frozen suite (`load_suite("agentbench_os")`) matches the import,
and scores policies through the kit's one evaluation (`eval.run_benchmark`, AgentBench's 8-turn limit): the
expert (the tasks' example solutions), a seeded random policy, and `--model` when given (a checkpoint, a hub
name, 'default' for the embedded model). `score_all` counts rejected tasks as failures (AgentBench's accuracy
over all 26); `score_hosted` is over the hosted ones.

    python benchmarks/agentbench_os.py [--model runs/sft_60min/checkpoint-final]

Ends with one line `RESULT {json}`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=None, help="a model policy to score too (default: none)")
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--seed", type=int, default=0, help="the random policy's seed")
    args = p.parse_args(argv)

    from openmanus_lite.envs.agentbench_os import import_tasks
    from openmanus_lite.eval import load_suite, make_policy, run_benchmark

    hosted, rejected = import_tasks()
    suite = load_suite("agentbench_os")
    total = len(hosted) + len(rejected)
    for r in rejected:
        print(f"rejected #{r['index']:>2} {r['labels']}: {r['reason']}")
    policies = {"expert": "expert", "random": "random"}
    if args.model:
        policies["model"] = make_policy(args.model, max_new_tokens=args.max_new_tokens)
    scores = {}
    for name, policy in policies.items():
        res = run_benchmark(policy, suite, max_turns=8, progress=False, seed=args.seed, label=name)
        wins = sum(r.success for r in res.records)
        scores[name] = {"solved": wins, "score_hosted": round(wins / len(suite), 4),
                        "score_all": round(wins / total, 4), "wall_s": round(res.wall_s, 2)}
        print(f"{name}: {wins}/{len(suite)} hosted, {wins}/{total} of dev")
    print("RESULT " + json.dumps({
        "tasks": total, "hosted": len(hosted), "rejected": len(rejected), "hosted_share": round(len(hosted) / total, 4),
        "suite_matches_import": [t.to_dict() for t in suite.tasks] == [t.to_dict() for t in hosted],
        "rejection_reasons": dict(Counter(r["reason"].split(":")[0] for r in rejected)),
        "policies": scores, "model": args.model,
    }))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

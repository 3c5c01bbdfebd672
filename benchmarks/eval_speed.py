"""Minutes of the kit's one evaluation (`eval.run_benchmark`) on a trained checkpoint: issue #29's target.

The evaluation every learning benchmark runs: the held-out split `eval` (splits.EVAL_SEED), `--per-domain`
easy tasks of each of the six domains (30: 180 episodes), the recipes' turn limits (envs.EASY_TURN_LIMITS),
greedy, 96 new tokens per turn, 32 episodes per batched call (the eval CLI's defaults). A trained
checkpoint matters: an untrained model plays every episode to its turn limit, a trained one stops early.

    python benchmarks/eval_speed.py --model runs/sft_60min/checkpoint-final

Ends with one line `RESULT {json}`: wall seconds, episodes, success with its 95% interval, tokens/s.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, help="checkpoint folder (merged model or LoRA adapter)")
    p.add_argument("--per-domain", type=int, default=30, help="held-out easy tasks per domain")
    p.add_argument("--batch", type=int, default=32, help="episodes per batched policy call")
    p.add_argument("--max-new-tokens", type=int, default=96)
    args = p.parse_args(argv)

    from openmanus_lite.envs import EASY_TURN_LIMITS, list_domains
    from openmanus_lite.eval import make_policy, run_benchmark
    from openmanus_lite.splits import heldout_tasks

    tasks = heldout_tasks("eval", list_domains(), args.per_domain)
    policy = make_policy(args.model, max_new_tokens=args.max_new_tokens, batch_size=args.batch)
    res = run_benchmark(policy, tasks, max_turns=EASY_TURN_LIMITS, batch_size=args.batch, progress=False,
                        label="eval_speed")
    wall, tokens, overall = res.wall_s, res.generated_tokens, res.row()  # run_benchmark times the whole run
    print(res.table().to_string(index=False))
    print("RESULT " + json.dumps({
        "episodes": len(res.records), "wall_s": round(wall, 1), "minutes": round(wall / 60, 2),
        "success": round(overall.success_rate, 4), "ci95": [round(overall.ci_low, 4), round(overall.ci_high, 4)],
        "per_domain": {d: res.row(d).successes for d in list_domains()},
        "generated_tokens": tokens, "tokens_per_s": round(tokens / wall, 1) if tokens else None,
    }))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

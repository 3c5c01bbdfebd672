"""Where can GRPO learn? k sampled episodes per training task at several temperatures (issue #40).

GRPO learns only from groups whose rewards differ, and reaches past greedy decoding only where sampling finds a
success the greedy episode misses. From an SFT checkpoint this plays the first --tasks GRPO training tasks per
domain greedily once, then k sampled episodes of each at every --temperatures, as training rolls them out
(`grpo_signal.prescreen_tasks`), and reports per temperature and domain: the share of tasks with mixed outcomes
(where a group of k carries signal), pass@k, the mean success of a sample, and the tasks greedy fails that a
sample solves. Minutes, not the hour of a GRPO run, to choose a rollout temperature; GRPO's loss reads the
log-probabilities at the same temperature (TRL's `temperature`, `--grpo_set temperature=T` in grpo_learning.py).

    python benchmarks/grpo_exploration.py --sft runs/sft_60min_ab/merged --tasks 4 --k 8 --temperatures 1.0,1.5

Ends with one line `RESULT {json}`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

GRPO_TURNS = "medium"
"""The turn limits of the GRPO runs in docs/RESULTS.md (envs.MEDIUM_TURN_LIMITS)."""


def screen_figures(successes: dict[str, int], k: int, greedy: dict[str, int], domain_of: dict[str, str]) -> dict:
    """Per domain and over all: mixed-outcome share, pass@k, mean sample success, greedy failures a sample solved."""
    out = {}
    for domain in [*dict.fromkeys(domain_of.values()), "all"]:
        ids = [t for t in successes if domain in ("all", domain_of[t])]
        n = len(ids)
        out[domain] = {"tasks": n,
                       "mixed_share": round(sum(0 < successes[t] < k for t in ids) / n, 3),
                       "pass_at_k": round(sum(successes[t] > 0 for t in ids) / n, 3),
                       "sample_success": round(sum(successes[t] for t in ids) / (n * k), 3),
                       "greedy_success": round(sum(greedy[t] for t in ids) / n, 3),
                       "rescued": sum(successes[t] > 0 and not greedy[t] for t in ids)}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sft", required=True, help="the SFT checkpoint (merged model or LoRA adapter folder)")
    p.add_argument("--preset", default="cpu")
    p.add_argument("--domains", default="os,db,web,kg,household,ecommerce")
    p.add_argument("--difficulty", default="medium")
    p.add_argument("--tasks", type=int, default=4, help="GRPO training tasks per domain")
    p.add_argument("--k", type=int, default=8, help="sampled episodes per task and temperature")
    p.add_argument("--temperatures", default="1.0,1.5")
    p.add_argument("--max_turns", default=GRPO_TURNS)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)

    import torch

    from openmanus_lite import splits
    from openmanus_lite.envs import parse_turn_limits
    from openmanus_lite.peak_memory import PeakMemory
    from openmanus_lite.train import grpo
    from openmanus_lite.train.grpo_signal import prescreen_tasks
    from openmanus_lite.train.presets import get_preset

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    preset = get_preset(args.preset).with_dtype("auto")  # as grpo_learning.py --dtype auto: bf16 only where native
    cfg = preset.grpo_config(mode="multi", output_dir="runs/grpo_exploration",
                             max_turns=parse_turn_limits(args.max_turns))
    domains = [d for d in args.domains.split(",") if d]
    tasks, _ = splits.training_tasks("grpo_train", domains, args.tasks, seed=splits.GRPO_TRAIN_SEED + args.seed,
                                     difficulty=args.difficulty)
    domain_of = {t.id: t.domain for t in tasks}
    with PeakMemory() as peak:
        model, tok = grpo.load_for_grpo(args.sft, preset)
        _, rollout = grpo.build_env_dataset(tasks, max_turns=cfg.max_turns, max_new_tokens=cfg.max_new_tokens)
        screen = dict(model=model, tokenizer=tok, tasks=tasks, rollout=rollout,
                      max_completion_tokens=cfg.max_completion_length)
        t0 = time.perf_counter()
        greedy = prescreen_tasks(**screen, k=1, temperature=0.0).successes
        result = {"greedy_seconds": round(time.perf_counter() - t0, 1), "temperatures": {}}
        for temperature in [float(x) for x in args.temperatures.split(",") if x]:
            t0 = time.perf_counter()
            screened = prescreen_tasks(**screen, k=args.k, temperature=temperature)
            figures = screen_figures(screened.successes, args.k, greedy, domain_of)
            result["temperatures"][str(temperature)] = {"seconds": round(time.perf_counter() - t0, 1), "by_domain": figures}
            row = figures["all"]
            print(f"T={temperature:g}: {row['mixed_share']:.0%} of {row['tasks']} tasks mixed, pass@{args.k} "
                  f"{row['pass_at_k']:.0%}, a sample succeeds {row['sample_success']:.0%} (greedy "
                  f"{row['greedy_success']:.0%}), {row['rescued']} greedy failures solved by a sample", flush=True)
    print("RESULT " + json.dumps({"sft": args.sft, "difficulty": args.difficulty, "k": args.k, **result,
                                  "peak_memory": peak.as_dict()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

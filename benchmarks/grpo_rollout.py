"""Seconds of rollout per multi-turn GRPO step: the kit's engine against the model's own `generate`, side by side.

A step here is what `train.env_rollout.EnvRolloutFunc` plays for GRPOTrainer: one group of `--group`
episodes of one task (sampled at temperature 1, as GRPO samples), up to `--max-turns` turns of
`--new-tokens` tokens, token ids continued exactly (`run_episode_tokens`), on the `cpu` preset's model
with its LoRA adapter attached. Between steps the LoRA weights change (as an optimizer step changes
them), so the kit's inference copy is rebuilt every step and that cost is counted. Engines alternate
step by step on the same tasks and seeds, so the ratio holds on a noisy machine.

    python benchmarks/grpo_rollout.py                  # 6 steps (one task per domain) per engine
    python benchmarks/grpo_rollout.py --steps 12 --group 8

Ends with one line `RESULT {json}`: median seconds per step for each engine and their ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=None, help="checkpoint folder (default: the cpu preset's model)")
    p.add_argument("--steps", type=int, default=6, help="GRPO steps per engine (tasks cycle through the domains)")
    p.add_argument("--group", type=int, default=8, help="episodes per step (num_generations of one prompt)")
    p.add_argument("--max-turns", type=int, default=5)
    p.add_argument("--new-tokens", type=int, default=48)
    p.add_argument("--completion-tokens", type=int, default=384, help="max_completion_length of a whole episode")
    p.add_argument("--engines", nargs="+", default=["loop", "generate"])
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    try:
        import unsloth  # noqa: F401  (the kit's import order)
    except Exception:
        pass
    import logging
    import os

    import torch

    from openmanus_lite.engine.generation import render_prompts
    from openmanus_lite.engine.precision import cpu_has_native_bf16
    from openmanus_lite.envs import generate_tasks, list_domains
    from openmanus_lite.train.env_rollout import RolloutStats, run_episode_tokens, task_prompt
    from openmanus_lite.train.presets import get_preset

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    model, tok = get_preset("cpu").load(args.model, for_training=True)
    lora = [q for n, q in model.named_parameters() if q.requires_grad]
    domains = list_domains()
    per_domain = {d: generate_tasks(d, -(-args.steps // len(domains)), seed=args.seed + 500) for d in domains}
    tasks = [per_domain[domains[k % len(domains)]][k // len(domains)] for k in range(args.steps)]

    seconds: dict[str, list[float]] = {e: [] for e in args.engines}
    tokens: dict[str, list[int]] = {e: [] for e in args.engines}
    turns: dict[str, list[float]] = {e: [] for e in args.engines}
    for step, task in enumerate(tasks):
        with torch.no_grad():  # an optimizer step's worth of change: every engine sees new weights
            for q in lora:
                q.add_(torch.randn_like(q) * 1e-4)
        prompt = render_prompts(tok, [task_prompt(task, args.max_turns)])[0]
        for engine in (args.engines if step % 2 == 0 else args.engines[::-1]):
            os.environ["OPENMANUS_ENGINE"] = engine
            torch.manual_seed(args.seed + step)
            stats = RolloutStats()
            t0 = time.perf_counter()
            eps = run_episode_tokens(model, tok, [task] * args.group, [prompt] * args.group, max_turns=args.max_turns,
                                     max_new_tokens=args.new_tokens, max_completion_tokens=args.completion_tokens,
                                     temperature=1.0, stats=stats, return_logprobs=False)
            seconds[engine].append(time.perf_counter() - t0)
            tokens[engine].append(stats.generated_tokens)
            turns[engine].append(sum(e.num_turns for e in eps) / len(eps))
            print(json.dumps({"step": step, "domain": task.domain, "engine": engine,
                              "seconds": round(seconds[engine][-1], 2), "generated_tokens": tokens[engine][-1],
                              "turns_mean": turns[engine][-1]}), flush=True)
    os.environ.pop("OPENMANUS_ENGINE", None)
    result = {"group": args.group, "max_turns": args.max_turns, "new_tokens": args.new_tokens, "steps": args.steps,
              "native_bf16": cpu_has_native_bf16(), "threads": torch.get_num_threads()}
    for engine in args.engines:
        result[f"{engine}_median_s_per_step"] = round(statistics.median(seconds[engine]), 2)
        result[f"{engine}_max_s_per_step"] = round(max(seconds[engine]), 2)
        result[f"{engine}_tokens_per_s"] = round(sum(tokens[engine]) / sum(seconds[engine]), 1)
        result[f"{engine}_turns_mean"] = round(statistics.mean(turns[engine]), 2)
    if len(args.engines) == 2:
        a, b = args.engines
        result[f"speedup_{a}_vs_{b}"] = round(result[f"{b}_median_s_per_step"] / result[f"{a}_median_s_per_step"], 2)
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

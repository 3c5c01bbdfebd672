"""Decoding at long contexts: the decoding buffer read whole by one-query attention against a copy of its view.

An untrained model's evaluation decodes 32 rows at 1,000-2,000 positions (its turns run to the token limit), where
each step's attention reads every key and value of every layer. The kit's buffer (`engine.decoding.BufferLayer`)
hands attention a view of its first positions; `engine.attention` reads the contiguous buffer whole and masks the
unwritten tail ("whole"), where it used to copy the view first ("copied": a read and a write more per key). Both
decode the same prompts (the six easy suites' first prompts, each followed by filler turns to the context length)
in one process, rounds interleaved; greedy, so both produce the same tokens (`same_tokens`).

    python benchmarks/decode_long_context.py                         # contexts 500, 1000, 2000; batch 32
    python benchmarks/decode_long_context.py --contexts 2000 --rounds 3

Ends with one line `RESULT {json}`: per context, generated tokens/s of each, the ratio, the share of the machine's
matmul rate (timed in the same run) and the peak resident growth of each.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from openmanus_lite.peak_memory import PeakMemory, peak_rss_gb  # noqa: E402

FILLER_ACTION = "Thought: I should look at the task again.\nAction: look()"


def long_prompts(tokenizer, n: int, context: int, seed: int) -> list[list[int]]:
    """`n` first prompts of the six easy suites, each followed by filler turns (an action and the environment's
    real answer to it) until it is `context` tokens long."""
    from openmanus_lite.engine.generation import render_prompts
    from openmanus_lite.envs import generate_tasks, list_domains, make_env

    domains = list_domains()
    tasks = {d: generate_tasks(d, -(-n // len(domains)), seed=seed) for d in domains}
    prompts = []
    for k in range(n):
        d = domains[k % len(domains)]
        env = make_env(d)
        conv = [{"role": "user", "content": env.reset(tasks[d][k // len(domains)])}]
        ids = render_prompts(tokenizer, [conv])[0]
        while len(ids) < context:
            reply = env.step(FILLER_ACTION).observation if not env.done else "The episode is over."
            conv += [{"role": "assistant", "content": FILLER_ACTION}, {"role": "user", "content": reply}]
            ids = render_prompts(tokenizer, [conv])[0]
        prompts.append(ids)
    return prompts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=None, help="checkpoint folder (default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--contexts", type=int, nargs="+", default=[500, 1000, 2000])
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--new-tokens", type=int, default=96, help="each row's token limit")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args(argv)
    try:
        import unsloth  # noqa: F401  (the kit's import order)
    except Exception:
        pass
    import torch

    from openmanus_lite.engine import attention
    from openmanus_lite.engine.generation import generate_from_ids
    from openmanus_lite.engine.speed import decode_flops_per_token, matmul_gflops, matmul_params, share_of_matmul
    from openmanus_lite.models import load_model, prepare_default_model

    model, tok = load_model(args.model or str(prepare_default_model()))
    model.eval()
    gflops, flops = matmul_gflops(), decode_flops_per_token(matmul_params(model))
    print(f"matmul rate: {gflops} GFLOP/s; torch threads {torch.get_num_threads()}", flush=True)
    whole_buffer = attention._whole_buffer
    ways = {"whole": whole_buffer, "copied": lambda view: None}
    cases = []
    try:
        for context in args.contexts:
            prompts = long_prompts(tok, args.batch, context, args.seed)
            rates, growth, outputs = {w: [] for w in ways}, {w: [] for w in ways}, {}
            for r in range(args.rounds):
                for way in (list(ways) if r % 2 == 0 else list(ways)[::-1]):
                    attention._whole_buffer = ways[way]
                    with PeakMemory() as mem:
                        base = peak_rss_gb()
                        t0 = time.perf_counter()
                        res = generate_from_ids(model, tok, prompts, max_new_tokens=args.new_tokens,
                                                batch_size=args.batch)
                        wall = time.perf_counter() - t0
                    rates[way].append(res.num_generated_tokens / wall)
                    growth[way].append((mem.rss_gb - base) * 1e3)
                    outputs[way] = res.completion_ids
            case = {"context": context, "batch": args.batch, "new_tokens": args.new_tokens,
                    "same_tokens": outputs["whole"] == outputs["copied"]}
            for way in ways:
                case[f"{way}_tokens_per_s"] = round(statistics.median(rates[way]), 1)
                case[f"{way}_share_of_matmul"] = share_of_matmul(case[f"{way}_tokens_per_s"], flops, gflops)
                case[f"{way}_peak_growth_mb"] = round(max(growth[way]), 1)
            case["speedup"] = round(case["whole_tokens_per_s"] / case["copied_tokens_per_s"], 2)
            cases.append(case)
            print(json.dumps(case), flush=True)
    finally:
        attention._whole_buffer = whole_buffer
    print("RESULT " + json.dumps({"matmul_gflops": gflops, "cases": cases}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

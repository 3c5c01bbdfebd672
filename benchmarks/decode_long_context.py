"""Decoding steps at long contexts: the decoding buffer read whole by one-query attention against a copy of its view.

An untrained model's evaluation decodes rows at 1,000-2,000 positions (its turns run to the token limit), where each
step's attention reads every key and value of every layer. The kit's buffer (`engine.decoding.BufferLayer`) hands
attention a view of its first positions; `engine.attention` reads the contiguous buffer whole and masks the unwritten
tail ("whole"), where it used to copy the view first ("copied": a read and a write more per key). Both decode the
same left-padded batch (the six easy suites' first prompts, each followed by filler turns to the context length) on
the kit's inference copy (bf16 where the CPU has it natively), with no stop token, rounds interleaved, from a prefix
cache holding every prompt (as an episode's next turn reuses its last). Only the steps are timed: a call of one token
(the cached keys/values copied in, one step) is subtracted from a call of `--new-tokens` + 1.

    python benchmarks/decode_long_context.py                         # contexts 1000 and 2000, 16 rows
    python benchmarks/decode_long_context.py --contexts 2000 --batch 11 --rounds 3

Ends with one line `RESULT {json}`: per context, decoded tokens/s of each way (steps only), the ratio, the share
of the machine's matmul rate (timed in the same run) and the peak resident growth of each call.
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


def warm_cache(runner, prompts: list[list[int]], pad_id: int):
    """A `PrefixCache` holding every prompt's keys/values (one prefill), so that each timed call encodes one token."""
    import torch

    from openmanus_lite.engine.decoding import Row, decode
    from openmanus_lite.engine.generation import PrefixCache

    cache = PrefixCache(max_bytes=2**34)
    width = max(len(q) for q in prompts)
    input_ids = torch.tensor([[pad_id] * (width - len(q)) + q for q in prompts])
    mask = torch.tensor([[0] * (width - len(q)) + [1] * len(q) for q in prompts])
    decode(runner, input_ids, mask, None, [Row(i, 1) for i in range(len(prompts))], stop_ids=set(), temperature=0.0,
           top_p=1.0, return_logprobs=False, on_finish=lambda row, kv: cache.add(prompts[row.index], kv))
    return cache


def decode_seconds(runner, prompts: list[list[int]], cache, pad_id: int, limit: int) -> float:
    """Seconds of one `decode` call of `limit` tokens per row from the cached prompts, greedy, no stop token."""
    from openmanus_lite.engine.decoding import Row, decode
    from openmanus_lite.engine.generation import _batch_inputs

    rows = [Row(i, limit) for i in range(len(prompts))]
    t0 = time.perf_counter()
    input_ids, mask, past, _ = _batch_inputs(prompts, list(range(len(prompts))), pad_id, cache,
                                             next(runner.parameters()))
    decode(runner, input_ids, mask, past, rows, stop_ids=set(), temperature=0.0, top_p=1.0, return_logprobs=False)
    assert all(len(r.ids) == limit for r in rows)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=None, help="checkpoint folder (default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--contexts", type=int, nargs="+", default=[1000, 2000])
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--new-tokens", type=int, default=64, help="decoding steps timed per call")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args(argv)
    try:
        import unsloth  # noqa: F401  (the kit's import order)
    except Exception:
        pass
    import torch

    from openmanus_lite.engine import attention
    from openmanus_lite.engine.generation import inference_copy, select_engine
    from openmanus_lite.engine.speed import decode_flops_per_token, matmul_gflops, matmul_params, share_of_matmul
    from openmanus_lite.models import load_model, prepare_default_model

    model, tok = load_model(args.model or str(prepare_default_model()))
    model.eval()
    dtype = select_engine(model).dtype
    runner = inference_copy(model, dtype) if dtype is not None else model
    gflops, flops = matmul_gflops(), decode_flops_per_token(matmul_params(model))
    print(f"matmul rate: {gflops} GFLOP/s; decoding in {next(runner.parameters()).dtype}; "
          f"torch threads {torch.get_num_threads()}", flush=True)
    whole_buffer = attention._whole_buffer
    ways = {"whole": whole_buffer, "copied": lambda view: None}
    cases = []
    try:
        for context in args.contexts:
            prompts = long_prompts(tok, args.batch, context, args.seed)
            width = max(len(q) for q in prompts)
            rates, growth = {w: [] for w in ways}, {w: [] for w in ways}
            with torch.inference_mode():
                cache = warm_cache(runner, prompts, tok.pad_token_id)
                for r in range(args.rounds):
                    for way in (list(ways) if r % 2 == 0 else list(ways)[::-1]):
                        attention._whole_buffer = ways[way]
                        with PeakMemory() as mem:
                            base = peak_rss_gb()
                            steps = decode_seconds(runner, prompts, cache, tok.pad_token_id, args.new_tokens + 1)
                        prefill = decode_seconds(runner, prompts, cache, tok.pad_token_id, 1)
                        rates[way].append(args.batch * args.new_tokens / max(steps - prefill, 1e-9))
                        growth[way].append((mem.rss_gb - base) * 1e3)
            case = {"context": context, "width": width, "batch": args.batch, "new_tokens": args.new_tokens}
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

"""Turn generation speed: the kit's `generate_from_ids` against plain transformers `generate`, side by side.

Both generate the same turns of the six easy suites' episodes in one process, rounds interleaved, so the
ratio holds on a noisy machine:

- first turns: each episode's first prompt (the domain's instructions + the task);
- later turns: the second turn, after the kit's own first turn and the environment's answer; the kit
  reuses the first turn's keys/values (a `PrefixCache`, as ModelPolicy keeps one), plain `generate`
  re-encodes the whole conversation;
- at batch 1, 8 and 32, greedy and sampled (temperature 0.7, top-p 1).

"plain" is `model.generate` on left-padded batches of the same prompts with transformers' default `sdpa`
attention (what a user writes without the kit); "plain_kit_attention" is the same with the attention the
kit's `load_model` installs on CPU (`openmanus_lite/engine/attention.py`), a stricter baseline; "kit" is the kit's choice of engine on this machine (`generation.select_engine`, logged). Reported
per case: generated tokens/s of each, the ratio, seconds per episode-turn and peak RSS growth.

    python benchmarks/generation_throughput.py                 # the default model, all cases
    python benchmarks/generation_throughput.py --batches 32 --turns first --modes greedy --rounds 3

Ends with one line `RESULT {json}`; `speedup_vs_plain` is the batch-32 greedy first-turn ratio (and
`speedup_vs_plain_kit_attention` the same against the stricter baseline); `share_of_matmul` is that case's kit
decoding FLOP rate (2 x params per generated token) as a share of the machine's matmul rate, timed in the same run
(`engine.speed`, bf16 where the CPU has it natively, else float32, as the kit decodes). A call's time holds the
prompts' prefill too (about a third of it for first turns at batch 32), so `decode_share_of_matmul` is the same
tokens over the call's time less its prefill (`decoding._prefill`, timed): the decoding steps alone.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from openmanus_lite.peak_memory import PeakMemory, peak_rss_gb  # noqa: E402


def episode_prompts(tokenizer, n: int, seed: int) -> tuple[list, list]:
    """First conversations of `n` easy tasks, the six domains in turn, with their environments."""
    from openmanus_lite.envs import generate_tasks, list_domains, make_env

    domains = list_domains()
    per = -(-n // len(domains))
    tasks = {d: generate_tasks(d, per, seed=seed) for d in domains}
    convs, envs = [], []
    for k in range(n):
        d = domains[k % len(domains)]
        env = make_env(d)
        convs.append([{"role": "user", "content": env.reset(tasks[d][k // len(domains)])}])
        envs.append(env)
    return convs, envs


def plain_generate(model, tokenizer, prompts, batch, new_tokens, temperature, stop, attention="sdpa"):
    """`model.generate` on left-padded batches of `batch` prompts, with `attention` as the model's attention
    implementation ("sdpa": transformers' default); tokens counted up to the first stop."""
    pad = tokenizer.pad_token_id
    before = model.config._attn_implementation
    model.config._attn_implementation = attention
    try:
        generated = _plain_batches(model, pad, prompts, batch, new_tokens, temperature, stop)
    finally:
        model.config._attn_implementation = before
    return generated


def _plain_batches(model, pad, prompts, batch, new_tokens, temperature, stop):
    import torch

    generated = 0
    for start in range(0, len(prompts), batch):
        chunk = prompts[start:start + batch]
        width = max(len(p) for p in chunk)
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in chunk])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chunk])
        kwargs = dict(do_sample=True, temperature=temperature, top_p=1.0, top_k=0) if temperature else dict(
            do_sample=False, temperature=None, top_p=None, top_k=None)
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens, eos_token_id=stop,
                                 pad_token_id=pad, **kwargs)
        for row in out[:, width:].tolist():
            cut = next((k for k, t in enumerate(row) if t in stop), None)
            generated += len(row) if cut is None else cut + 1
    return generated


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=None, help="checkpoint folder (default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--turns", nargs="+", choices=["first", "later"], default=["first", "later"])
    p.add_argument("--modes", nargs="+", choices=["greedy", "sampled"], default=["greedy", "sampled"])
    p.add_argument("--new-tokens", type=int, default=48, help="tokens per turn (an episode turn's budget)")
    p.add_argument("--episodes-at-batch-1", type=int, default=4, help="prompts timed at batch 1")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args(argv)
    try:
        import unsloth  # noqa: F401  (the kit's import order)
    except Exception:
        pass
    import logging

    import torch

    from openmanus_lite.engine import decoding
    from openmanus_lite.engine.generation import (
        PrefixCache,
        generate_from_ids,
        render_prompts,
        select_engine,
        stop_ids,
    )
    from openmanus_lite.engine.precision import cpu_has_native_bf16
    from openmanus_lite.engine.speed import (
        decode_flops_per_token,
        matmul_dtype,
        matmul_gflops,
        matmul_params,
        share_of_matmul,
    )
    from openmanus_lite.models import load_model, prepare_default_model

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tok = load_model(args.model or str(prepare_default_model()))
    model.eval()
    stop = stop_ids(tok)
    engine = select_engine(model)
    kit_attention = model.config._attn_implementation
    print(f"kit engine: {engine.name} ({engine.reason}); torch threads {torch.get_num_threads()}; "
          f"native bf16: {cpu_has_native_bf16()}", flush=True)
    mm_dtype = str(matmul_dtype()).removeprefix("torch.")
    gflops, flops = matmul_gflops(), decode_flops_per_token(matmul_params(model))
    print(f"matmul rate: {gflops} GFLOP/s in {mm_dtype} on the default model's shapes", flush=True)

    from benchmarks.eval_profile import time_calls

    prefill_s, prefill_calls = collections.Counter(), collections.Counter()  # the kit's decoding steps timed alone
    time_calls(decoding, "_prefill", prefill_s, prefill_calls)

    n_max = max(max(args.batches), args.episodes_at_batch_1)
    convs, envs = episode_prompts(tok, n_max, args.seed)
    first = render_prompts(tok, convs)
    warm = PrefixCache()  # the kit's cache after its own first turn: what ModelPolicy holds at turn 2
    turn1 = generate_from_ids(model, tok, first, max_new_tokens=args.new_tokens, batch_size=32, kv_cache=warm)
    later_convs = []
    for conv, env, text in zip(convs, envs, turn1.texts):
        step = env.step(text)
        later_convs.append(conv + [{"role": "assistant", "content": text},
                                   {"role": "user", "content": step.observation}])
    later = render_prompts(tok, later_convs)

    cases = []
    for turn in args.turns:
        for batch in args.batches:
            for mode in args.modes:
                n = args.episodes_at_batch_1 if batch == 1 else batch
                prompts = (first if turn == "first" else later)[:n]
                temperature = 0.7 if mode == "sampled" else 0.0
                runners = ("plain", "plain_kit_attention", "kit")
                times = {who: [] for who in runners}
                decode_times = []
                tokens = {who: [] for who in runners}
                rss = {who: [] for who in runners}
                for r in range(args.rounds):
                    for who in (runners if r % 2 == 0 else runners[::-1]):
                        cache = None
                        if who == "kit" and turn == "later":
                            cache = warm.copy()  # each round starts equal
                        torch.manual_seed(args.seed + r)
                        with PeakMemory() as mem:  # growth above the resident memory at its start
                            base = peak_rss_gb()
                            t0 = time.perf_counter()
                            if who.startswith("plain"):
                                attention = kit_attention if who == "plain_kit_attention" else "sdpa"
                                got = plain_generate(model, tok, prompts, batch, args.new_tokens, temperature, stop,
                                                     attention)
                            else:
                                prefill_s.clear()
                                res = generate_from_ids(model, tok, prompts, max_new_tokens=args.new_tokens,
                                                        temperature=temperature, seed=args.seed + r,
                                                        batch_size=batch, kv_cache=cache)
                                got = res.num_generated_tokens
                            wall = time.perf_counter() - t0
                            if who == "kit":
                                decode_times.append(wall - prefill_s["_prefill"])
                        times[who].append(wall)
                        tokens[who].append(got)
                        rss[who].append((mem.rss_gb - base) * 1e9 / 2**20)
                case = {"turn": turn, "batch": batch, "mode": mode, "episodes": n}
                for who in runners:
                    rates = [t / s for t, s in zip(tokens[who], times[who])]
                    case[f"{who}_tokens_per_s"] = round(statistics.median(rates), 1)
                    case[f"{who}_s_per_turn"] = round(statistics.median(times[who]) / n, 3)
                    case[f"{who}_peak_rss_mb"] = round(max(rss[who]), 1)
                case["kit_share_of_matmul"] = share_of_matmul(case["kit_tokens_per_s"], flops, gflops)
                case["kit_decode_tokens_per_s"] = round(
                    statistics.median(t / s for t, s in zip(tokens["kit"], decode_times)), 1)
                case["kit_decode_share_of_matmul"] = share_of_matmul(case["kit_decode_tokens_per_s"], flops, gflops)
                case["speedup"] = round(case["kit_tokens_per_s"] / case["plain_tokens_per_s"], 2)
                case["speedup_vs_kit_attention"] = round(
                    case["kit_tokens_per_s"] / case["plain_kit_attention_tokens_per_s"], 2)
                cases.append(case)
                print(json.dumps(case), flush=True)

    def pick(turn, batch, mode):
        return next((c for c in cases if (c["turn"], c["batch"], c["mode"]) == (turn, batch, mode)), None)

    head = pick("first", 32, "greedy") or cases[0]
    result = {
        "engine": engine.name,
        "engine_reason": engine.reason,
        "native_bf16": cpu_has_native_bf16(),
        "threads": torch.get_num_threads(),
        "new_tokens": args.new_tokens,
        "rounds": args.rounds,
        "matmul_gflops": gflops,
        "matmul_dtype": mm_dtype,
        "flops_per_token": flops,
        "share_of_matmul": head["kit_share_of_matmul"],
        "decode_share_of_matmul": head["kit_decode_share_of_matmul"],
        "kit_decode_tokens_per_s": head["kit_decode_tokens_per_s"],
        "speedup_vs_plain": head["speedup"],
        "headline_case": {k: head[k] for k in ("turn", "batch", "mode")},
        "kit_tokens_per_s": head["kit_tokens_per_s"],
        "plain_tokens_per_s": head["plain_tokens_per_s"],
        "speedup_vs_plain_kit_attention": head["speedup_vs_kit_attention"],
        "plain_kit_attention_tokens_per_s": head["plain_kit_attention_tokens_per_s"],
        "cases": cases,
    }
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Training throughput (tokens/s) and peak memory: tiny and default models on CPU, a 1.5B config on GPU.

Each measurement runs in its own process (clean peak memory): load the model through
`load_model` (Unsloth or plain HF + PEFT), then time forward + backward + AdamW steps on
batches of real expert trajectories (padding excluded from the token count) and report the
median step time. LoRA variants show what makes CPU training faster:

    all        adapters on all seven projections of every layer (the usual QLoRA setup)
    attn       q/k/v/o projections only
    top<N>     all seven projections of the top N layers only (backward stops below them)
    full       full fine-tuning (no adapters)

    python benchmarks/train_throughput.py                       # tiny + default on CPU, both backends
    python benchmarks/train_throughput.py --models default --variants all,attn,top8,full
    python benchmarks/train_throughput.py --gpu                 # 1.5B (random weights), 4-bit, GPU
    python benchmarks/train_throughput.py --models default --backends unsloth --dtype float32,bfloat16 \
        --batch-size 4 --rounds 3                                # fp32 against bf16, interleaved
    python benchmarks/train_throughput.py --models default --backends unsloth --dtype bfloat16 --batch-size 1 \
        --compile-layers off,on --rounds 3 --steps 16 --warmup 4   # decoder layers eager against compiled
    python benchmarks/train_throughput.py --models default --backends unsloth --dtype bfloat16 --batch-size 1,2 \
        --padding-free off,on --compile-layers on --rounds 3 --steps 16 --warmup 4
        # one conversation a pass against each batch's conversations in one row (TRL's padding_free)
    python benchmarks/train_throughput.py --models default --backends unsloth --dtype bfloat16 --batch-size 2 \
        --padding-free on --compile-layers on --block-attention off,on --rounds 3 --steps 16 --warmup 4
        # torch's CPU flash attention against the kit's block attention (engine/attention.py)

The loss runs as the kit's SFT runs it (`--lm-head labelled`): only the positions with a label pass through the LM
head (on CPU Unsloth's chunked cross-entropy inside SFTTrainer; here TRL's `add_fused_lm_head`, the same work), so a conversation's prompt and observations cost
the body's matmuls alone; `--lm-head all` takes the model's own loss over every position's logits (the figures
before 2026-12-06), and `--lm-head labelled,all` measures both side by side.

Each measurement also times the machine's matmul rate in the dtype it trains in (`engine.speed`), in its own process
just before its steps, and reports training as a share of it (`share_of_matmul`). Ends with `RESULT {json}`.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from openmanus_lite.train.memory import QWEN25_1_5B  # noqa: E402

_S = QWEN25_1_5B
QWEN25_1P5B = dict(hidden_size=_S.hidden, intermediate_size=_S.intermediate, num_hidden_layers=_S.layers,
                   num_attention_heads=_S.heads, num_key_value_heads=_S.kv_heads, vocab_size=_S.vocab,
                   max_position_embeddings=32768, rope_theta=1e6, tie_word_embeddings=_S.tied_embeddings)
"""Qwen2.5-1.5B's architecture (weights are random: throughput and memory do not depend on them); its peak
memory is what `python -m openmanus_lite presets --memory` estimates (train/memory.py) for such a step."""


def pick_threads(arg: str) -> int:
    """'auto': all cores, or 1 when other jobs already keep the machine well over busy (threads would then
    lose to spinning). The 1-minute load average lags: right after other jobs end it still looks busy,
    so the threshold is 1.5 x cores and the choice is printed; pass a number to be sure."""
    cores = os.cpu_count() or 1
    if arg != "auto":
        return int(arg)
    load = os.getloadavg()[0]
    threads = 1 if load > 1.5 * cores else cores
    print(f"threads: {threads} (auto: load average {load:.1f} on {cores} cores)", flush=True)
    return threads


def random_1p5b(out: Path) -> Path:
    """A Qwen2.5-1.5B-shaped checkpoint with random weights and the kit's tiny tokenizer padded to its vocab."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from openmanus_lite.models import build_tiny_model, load_tokenizer

    if (out / "config.json").is_file():
        return out
    tiny = build_tiny_model(out)
    tok = load_tokenizer(tiny)
    cfg = Qwen2Config(**QWEN25_1P5B, eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
                      pad_token_id=tok.pad_token_id, bos_token_id=None)
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = Qwen2ForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(out)
    return out


def batches(tok, batch_size: int, seq_len: int, n: int, seed: int = 0, padding_free: bool = False):
    """`n` batches (input ids, attention mask, labels, position ids) of real expert trajectories (all six domains),
    cut at seq_len: padded to the longest, or with `padding_free` in one row with position ids restarting at each
    conversation and no mask, as TRL's padding-free collator makes them (no label across a conversation's start)."""
    import torch

    from openmanus_lite.envs import expert_trajectories, list_domains
    from openmanus_lite.splits import training_tasks
    from openmanus_lite.train.data import build_sft_dataset

    # half again as many tasks as batches need: conversations longer than seq_len are dropped (26 of 28 were left)
    tasks, _ = training_tasks("sft_train", list_domains(), max(2, batch_size * n // 4 + 1), seed=seed)
    ds, _ = build_sft_dataset(expert_trajectories(tasks), tok, max_length=seq_len)
    rows = ds.shuffle(seed=seed).select(range(min(len(ds), batch_size * n)))
    out = []
    for i in range(0, len(rows) - batch_size + 1, batch_size):
        chunk = rows[i:i + batch_size]
        if padding_free:
            ids = torch.tensor([t for x in chunk["input_ids"] for t in x])[None]
            positions = torch.cat([torch.arange(len(x)) for x in chunk["input_ids"]])[None]
            labels = torch.tensor([t if k else -100 for x, m in zip(chunk["input_ids"], chunk["assistant_masks"])
                                   for t, k in zip(x, m)])[None]
            labels[positions == 0] = -100
            out.append((ids, None, labels, positions))
            continue
        width = max(len(x) for x in chunk["input_ids"])
        ids = torch.full((batch_size, width), tok.pad_token_id)
        att = torch.zeros((batch_size, width), dtype=torch.long)
        labels = torch.full((batch_size, width), -100)
        for j, (x, m) in enumerate(zip(chunk["input_ids"], chunk["assistant_masks"])):
            ids[j, :len(x)] = torch.tensor(x)
            att[j, :len(x)] = 1
            labels[j, :len(x)] = torch.tensor([t if k else -100 for t, k in zip(x, m)])
        out.append((ids, att, labels, None))
    return out


def measure_one(spec: dict) -> dict:
    """One (model, backend, variant) measurement, in this process."""
    import resource

    import torch

    torch.set_num_threads(spec["threads"])
    from openmanus_lite.train.sft import import_trl

    import_trl()
    from openmanus_lite.engine.precision import resolve_precision
    from openmanus_lite.engine.speed import matmul_gflops, matmul_params, share_of_matmul, training_flops_per_token
    from openmanus_lite.models import LORA_TARGETS, LoraSpec, count_parameters, load_model, resolve_model_name
    from openmanus_lite.train.presets import tiny_model_path

    on_gpu = torch.cuda.is_available()
    name = {"tiny": str(tiny_model_path()), "default": "default"}.get(spec["model"], spec["model"])
    variant = spec["variant"]
    lora = None
    if variant != "full":
        targets = ["q_proj", "k_proj", "v_proj", "o_proj"] if variant == "attn" else list(LORA_TARGETS)
        layers = None
        if variant.startswith("top"):
            from transformers import AutoConfig

            n_layers = AutoConfig.from_pretrained(resolve_model_name(name)).num_hidden_layers
            k = int(variant[3:])
            layers = list(range(n_layers - k, n_layers))
        lora = LoraSpec(r=spec["rank"], alpha=2 * spec["rank"], target_modules=targets, layers=layers,
                        gradient_checkpointing=("unsloth" if spec["backend"] == "unsloth" else True)
                        if spec["grad_ckpt"] else False)
    dtype = getattr(torch, spec["dtype"]) if spec["dtype"] else None
    t0 = time.perf_counter()
    model, tok = load_model(name, backend=spec["backend"], load_in_4bit=spec["load_in_4bit"], lora=lora,
                            dtype=dtype, max_seq_length=spec["seq_len"], full_finetuning=lora is None)
    load_s = time.perf_counter() - t0
    device = next(model.parameters()).device
    trainable, total = count_parameters(model)
    data = batches(tok, spec["batch_size"], spec["seq_len"], spec["steps"] + spec["warmup"],
                   padding_free=spec["padding_free"])
    if len(data) < spec["steps"] + spec["warmup"]:
        raise RuntimeError(f"only {len(data)} batches of data; lower --batch-size or --steps")
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    # bf16 only where the GPU has it natively; fp16 on a T4 (precision.py)
    autocast = (torch.autocast("cuda", dtype=resolve_precision().dtype)
                if on_gpu and spec["dtype"] != "float32" else None)
    matmul_dtype = autocast.fast_dtype if autocast is not None else model.get_input_embeddings().weight.dtype
    gflops = matmul_gflops(matmul_dtype, device=device.type)
    labelled_only = spec["lm_head"] == "labelled"
    if labelled_only:  # as TRL's SFTTrainer does before training
        from trl.trainer.utils import add_fused_lm_head

        add_fused_lm_head(model.get_base_model() if hasattr(model, "get_base_model") else model)
    if not spec.get("block_attention", True):  # torch's CPU flash kernel instead of the kit's block attention
        from openmanus_lite.engine import attention

        attention.BLOCK_ROWS = 0
    if spec["compile_layers"]:  # the cpu preset's SFT and GRPO compile the decoder layers in place
        from openmanus_lite.train.compiled_layers import compile_layers

        compile_layers(model)
    head = model.get_output_embeddings()
    head_params = head.in_features * head.out_features
    if on_gpu:
        torch.cuda.reset_peak_memory_stats()
    times, tokens, labelled = [], [], []
    for i, (ids, att, labels, positions) in enumerate(data):
        rows = {"input_ids": ids, "labels": labels, "use_cache": False,  # as TRL's SFTTrainer calls the model
                **({"attention_mask": att} if positions is None else {"position_ids": positions})}
        rows = {k: v.to(device) if hasattr(v, "to") else v for k, v in rows.items()}
        if on_gpu:
            torch.cuda.synchronize()
        t = time.perf_counter()
        with autocast or contextlib.nullcontext():
            loss = model(**rows, **({"fused_lm_head": True} if labelled_only else {})).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if on_gpu:
            torch.cuda.synchronize()
        if i >= spec["warmup"]:
            times.append(time.perf_counter() - t)
            tokens.append(int(att.sum()) if positions is None else ids.numel())
            labelled.append(int((labels[:, 1:] != -100).sum()))
    step = statistics.median(times)
    tokens_per_s = round(statistics.median(tokens) / step, 1)
    # LoRA: 4 x params per token (forward + the inputs' gradients; frozen weights take no weight gradient), full
    # fine-tuning 6 x, +2 x with gradient checkpointing (engine.speed); the LM head's share only on the labelled
    # positions when only those pass through it. top<N> stops the backward below its layers, so its share is
    # overstated.
    labelled_share = sum(labelled) / sum(tokens)
    head_share = labelled_share if labelled_only else 1.0
    flops = training_flops_per_token(round(matmul_params(model) - head_params * (1 - head_share)),
                                     full=variant == "full", recompute=spec["grad_ckpt"])
    peak = (torch.cuda.max_memory_allocated() / 2**30 if on_gpu
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)
    return {**{k: spec[k] for k in ("model", "backend", "variant", "dtype", "lm_head", "batch_size", "seq_len",
                                    "threads", "load_in_4bit", "compile_layers", "padding_free", "block_attention")},
            "labelled_share": round(labelled_share, 3),
            "device": "cuda" if on_gpu else "cpu", "trainable": trainable, "total": total,
            "load_s": round(load_s, 1), "s_per_step": round(step, 3), "tokens_per_s": tokens_per_s,
            "matmul_dtype": str(matmul_dtype).removeprefix("torch."), "matmul_gflops": gflops,
            "flops_per_token": flops, "share_of_matmul": share_of_matmul(tokens_per_s, flops, gflops),
            "peak_gib": round(peak, 2), "peak_kind": "cuda_allocated" if on_gpu else "process_maxrss",
            "loss": round(float(loss), 3)}


def run_one(spec: dict, timeout: int, failures: list) -> dict | None:
    """One measurement in a fresh process (clean peak memory); a failure is recorded, not raised."""
    name = f"{spec['model']} {spec['backend']} {spec['variant']} {spec['dtype']}"
    cmd = [sys.executable, __file__, "--_one", json.dumps(spec)]
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    except subprocess.TimeoutExpired:
        failures.append({**spec, "error": f"timed out after {timeout}s"})
        print(f"{name}: timed out", flush=True)
        return None
    line = next((x for x in run.stdout.splitlines() if x.startswith("ONE ")), None)
    if line is None:
        err = (run.stderr.strip().splitlines() or ["no output"])[-1]
        failures.append({**spec, "error": err})
        print(f"{name}: FAILED {err}", flush=True)
        return None
    r = json.loads(line[4:])
    print(f"{Path(r['model']).name:>12} {r['backend']:>8} {r['variant']:>6} {r['dtype'] or 'default':>8} "
          f"head:{r['lm_head']}{' padding-free' if r['padding_free'] else ''}"
          f"{'' if r['block_attention'] else ' flash attention'}: "
          f"{r['tokens_per_s']:>8.1f} tokens/s ({r['s_per_step']:.2f} s/step, batch {r['batch_size']}), "
          f"{r['share_of_matmul']:.0%} of {r['matmul_gflops']:.0f} GFLOP/s ({r['matmul_dtype']} matmul), "
          f"peak {r['peak_gib']:.2f} GiB, {r['trainable']:,} trainable", flush=True)
    return r


def summarize(results: list[dict]) -> list[dict]:
    """Median tokens/s, matmul rate and share of it per configuration over the rounds, and the tokens/s ratio to
    the first configuration measured."""
    groups: dict[tuple, list[dict]] = {}
    for r in results:
        groups.setdefault((Path(r["model"]).name, r["backend"], r["variant"], r["dtype"], r["lm_head"],
                           r["compile_layers"], r["batch_size"], r["padding_free"], r["block_attention"]),
                          []).append(r)
    rows = [{"model": k[0], "backend": k[1], "variant": k[2], "dtype": k[3], "lm_head": k[4], "compile_layers": k[5],
             "batch_size": k[6], "padding_free": k[7], "block_attention": k[8], "rounds": len(v),
             **{f"median_{key}": round(statistics.median(r[key] for r in v), 3)
                for key in ("tokens_per_s", "matmul_gflops", "share_of_matmul")}} for k, v in groups.items()]
    for row in rows:
        row["ratio_to_first"] = round(row["median_tokens_per_s"] / rows[0]["median_tokens_per_s"], 2)
        print(f"median over {row['rounds']}: {row['model']} {row['backend']} {row['variant']} {row['dtype']} "
              f"head:{row['lm_head']}{' compiled layers' if row['compile_layers'] else ''} batch {row['batch_size']}"
              f"{' padding-free' if row['padding_free'] else ''}"
              f"{'' if row['block_attention'] else ' flash attention'}: "
              f"{row['median_tokens_per_s']} tokens/s ({row['ratio_to_first']}x the first), "
              f"{row['median_share_of_matmul']:.0%} of {row['median_matmul_gflops']:.0f} GFLOP/s", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="tiny,default", help="tiny, default, a path, or 1p5b (with --gpu)")
    p.add_argument("--backends", default="unsloth,hf")
    p.add_argument("--variants", default="all", help="comma list of all, attn, top<N>, full")
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--batch-size", default="8", help="conversations per step, or a comma list to compare")
    p.add_argument("--seq-len", type=int, default=768)
    p.add_argument("--steps", type=int, default=4, help="timed steps (median reported)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--dtype", default="float32",
                   help="float32 / bfloat16 / none (backend default), or a comma list to compare them")
    p.add_argument("--lm-head", default="labelled",
                   help="labelled (the kit's SFT: TRL's fused head on the labelled positions only), all (the model's "
                        "own loss over every position), or labelled,all to compare them")
    p.add_argument("--compile-layers", default="off",
                   help="off, on (decoder layers compiled in place: train/compiled_layers.py), or off,on to compare")
    p.add_argument("--padding-free", default="off",
                   help="off (each batch padded to its longest), on (its conversations in one row, each attended "
                        "alone: TRL's padding_free, engine/attention.py), or off,on to compare (on skips batches of 1)")
    p.add_argument("--block-attention", default="on",
                   help="on (the kit's block attention where gradients flow on the CPU: engine/attention.py), off "
                        "(torch's CPU flash kernel), or off,on to compare")
    p.add_argument("--rounds", type=int, default=1,
                   help="repeat every measurement this many times, interleaved (the machine's speed drifts); "
                        "medians over rounds are reported")
    p.add_argument("--grad-ckpt", action="store_true", help="gradient checkpointing on")
    p.add_argument("--load-in-4bit", action="store_true")
    p.add_argument("--threads", default="auto", help="torch threads on CPU ('auto': 1 on a busy machine)")
    p.add_argument("--gpu", action="store_true",
                   help="GPU run: the 1.5B config (random weights) in 4-bit, bf16, gradient checkpointing, both backends")
    p.add_argument("--timeout", type=int, default=1200, help="seconds per measurement")
    p.add_argument("--_one", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args._one:
        print("ONE " + json.dumps(measure_one(json.loads(args._one))), flush=True)
        return 0
    if args.gpu:
        args.models, args.load_in_4bit, args.dtype, args.grad_ckpt = "1p5b", True, "none", True
        if args.batch_size == "8" and args.seq_len == 768:
            args.batch_size, args.seq_len = "4", 2048
    heads = _comma_choices(p, "--lm-head", args.lm_head, ("labelled", "all"))
    compiled_layers = _comma_choices(p, "--compile-layers", args.compile_layers, ("off", "on"))
    padding_free = _comma_choices(p, "--padding-free", args.padding_free, ("off", "on"))
    block_attention = _comma_choices(p, "--block-attention", args.block_attention, ("off", "on"))
    try:
        batch_sizes = [int(b) for b in args.batch_size.split(",")]
    except ValueError:
        p.error(f"--batch-size: {args.batch_size} is not a comma list of whole numbers")
    if min(batch_sizes) < 1:
        p.error("--batch-size: at least 1")
    # one conversation in one row is the same pass either way
    shapes = [(b, f == "on") for b, f in itertools.product(batch_sizes, padding_free) if b > 1 or f == "off"]
    if not shapes:
        p.error("--padding-free on packs a batch of 2 or more conversations: give --batch-size 2 or more")
    threads = pick_threads(args.threads)
    load = os.getloadavg()
    models = args.models.split(",")
    results, failures = [], []
    tmp = Path(tempfile.gettempdir()) / "openmanus_lite_1p5b_random"
    specs = []
    for model in models:
        if model == "1p5b":
            model = str(random_1p5b(tmp))
        for backend in args.backends.split(","):
            for variant in args.variants.split(","):
                for dtype in args.dtype.split(","):
                    for head, compiled, blocks, (batch, packed) in itertools.product(heads, compiled_layers,
                                                                                      block_attention, shapes):
                        specs.append({"model": model, "backend": backend, "variant": variant, "rank": args.rank,
                                      "batch_size": batch, "padding_free": packed, "seq_len": args.seq_len,
                                      "steps": args.steps,
                                      "warmup": args.warmup, "dtype": None if dtype == "none" else dtype,
                                      "lm_head": head, "compile_layers": compiled == "on", "grad_ckpt": args.grad_ckpt,
                                      "block_attention": blocks == "on",
                                      "load_in_4bit": args.load_in_4bit, "threads": threads})
    for _ in range(args.rounds):
        for spec in specs:
            r = run_one(spec, args.timeout, failures)
            if r is not None:
                results.append(r)
    medians = summarize(results)
    print("RESULT " + json.dumps({"medians": medians, "results": results, "failures": failures, "threads": threads,
                                  "loadavg_at_start": [round(x, 2) for x in load], "cpus": os.cpu_count()}))
    return 0 if results else 1


def _comma_choices(p: argparse.ArgumentParser, flag: str, text: str, allowed: tuple[str, ...]) -> list[str]:
    """The comma list `text`, each value one of `allowed` (else the parser's error names the flag)."""
    values = text.split(",")
    unknown = [v for v in values if v not in allowed]
    if unknown:
        p.error(f"{flag}: {', '.join(unknown)} is not one of {', '.join(allowed)}")
    return values


if __name__ == "__main__":
    raise SystemExit(main())

"""Is bfloat16 faster than float32 on this CPU? The default model's matmul rate in both dtypes.

bf16 pays only where the CPU multiplies bfloat16 natively (AVX512-BF16 or AMX; on such a CPU a
training step of the default model was 1.75x faster, docs/RESULTS.md). Elsewhere (AVX2-only CPUs, e.g. many
AMD EPYC and desktop machines) torch emulates it. This times one SmolLM2-135M layer's seven projections on
2,048 tokens in both dtypes (`engine.speed.matmul_gflops`, the rate the throughput benchmarks and the demo
measure against). Seconds, not minutes.

It also times SFT's products as SFT runs them, one pass per conversation: forward and input gradient through the
same projections at a row count repeated, new at every pass (300-1,000 rows, as conversations come) and new but
padded to a multiple of 64 (`train.sft.CPU_BF16_PAD`). oneDNN builds a kernel per shape, which bf16 pays for.

    python benchmarks/cpu_bf16.py
    python benchmarks/cpu_bf16.py --tokens 4096 --seconds 5 --threads 2

Ends with `RESULT {json}`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def pass_gflops(dtype, rows: list[int]) -> float:
    """GFLOP/s of forward and input-gradient products through one default-model layer's projections (frozen
    weights, as under LoRA), one pass per entry of `rows`."""
    import random
    import time

    import torch

    from openmanus_lite.engine.speed import LAYER_SHAPES

    g = torch.Generator().manual_seed(0)
    weights = [torch.randn(o, i, generator=g).to(dtype) for i, o in LAYER_SHAPES]
    inputs = {m: {i: torch.randn(m, i, generator=g).to(dtype) for i, _ in LAYER_SHAPES} for m in set(rows)}
    grads = {m: {o: torch.randn(m, o, generator=g).to(dtype) for _, o in LAYER_SHAPES} for m in set(rows)}
    random.Random(0).shuffle(rows := list(rows))
    start = time.perf_counter()
    for m in rows:
        for (i, o), w in zip(LAYER_SHAPES, weights):
            inputs[m][i] @ w.t()  # forward
            grads[m][o] @ w  # the input's gradient
    return round(4 * sum(rows) * sum(i * o for i, o in LAYER_SHAPES) / (time.perf_counter() - start) / 1e9, 1)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, default=2048)
    p.add_argument("--seconds", type=float, default=2.0, help="timed seconds per dtype (median pass reported)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--passes", type=int, default=60, help="SFT-shaped passes per case (0: skip them)")
    args = p.parse_args(argv)
    import torch

    from openmanus_lite.engine.precision import cpu_has_native_bf16
    from openmanus_lite.engine.speed import matmul_gflops

    if args.threads:
        torch.set_num_threads(args.threads)
    fp32, bf16 = (matmul_gflops(dtype, args.tokens, args.seconds) for dtype in (torch.float32, torch.bfloat16))
    result = {"cpu_capability": torch.backends.cpu.get_cpu_capability(), "native_bf16": cpu_has_native_bf16(),
              "threads": torch.get_num_threads(), "tokens": args.tokens,
              "float32_gflops": fp32, "bfloat16_gflops": bf16, "bf16_speedup": round(bf16 / fp32, 3)}
    print(f"{result['cpu_capability']}, native bf16: {result['native_bf16']}; the default model's products on "
          f"{args.tokens} tokens: float32 {fp32} GFLOP/s, bfloat16 {bf16} GFLOP/s "
          f"(bf16 {result['bf16_speedup']}x the speed of float32)")
    if args.passes:
        import random

        from openmanus_lite.train.sft import CPU_BF16_PAD

        rng = random.Random(1)
        new = [rng.randrange(300, 1000) for _ in range(args.passes)]
        cases = {"repeated": [700] * args.passes, "new": new,
                 "padded": [-(-m // CPU_BF16_PAD) * CPU_BF16_PAD for m in new]}
        for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
            result[f"{name}_pass_gflops"] = {case: pass_gflops(dtype, rows) for case, rows in cases.items()}
            print(f"{name}, SFT-shaped passes (forward and input gradient), GFLOP/s: {result[f'{name}_pass_gflops']}")
    print("RESULT " + json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

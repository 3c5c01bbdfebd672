"""Is bfloat16 training faster than float32 on this CPU? One LoRA-sized step of the default model's MLP.

bf16 pays only where the CPU multiplies bfloat16 natively (AVX512-BF16 or AMX; on such a CPU a
training step of the default model was 1.75x faster, docs/RESULTS.md). Elsewhere (AVX2-only CPUs, e.g. many
AMD EPYC and desktop machines) torch emulates it. This times forward + backward of one
SmolLM2-135M MLP block (576 -> 1536 -> 576, SiLU gate) on a batch of 2,048 tokens in both dtypes,
the weights frozen and only the input taking gradients, as with LoRA. Seconds, not minutes.

    python benchmarks/cpu_bf16.py
    python benchmarks/cpu_bf16.py --tokens 4096 --repeats 7 --threads 2

Ends with `RESULT {json}`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def mlp_step_seconds(dtype, tokens: int, repeats: int, hidden: int = 576, inner: int = 1536) -> float:
    """Median seconds of one forward + backward through a gated MLP in `dtype` (frozen weights)."""
    import torch

    g = torch.Generator().manual_seed(0)
    gate, up = (torch.randn(inner, hidden, generator=g).to(dtype) for _ in range(2))
    down = torch.randn(hidden, inner, generator=g).to(dtype)
    x = torch.randn(tokens, hidden, generator=g).to(dtype).requires_grad_(True)
    times = []
    for _ in range(repeats + 1):  # the first one warms up
        t = time.perf_counter()
        h = torch.nn.functional.silu(x @ gate.T) * (x @ up.T)
        (h @ down.T).float().square().mean().backward()
        times.append(time.perf_counter() - t)
        x.grad = None
    return statistics.median(times[1:])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, default=2048)
    p.add_argument("--repeats", type=int, default=5, help="timed steps per dtype (median reported)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = p.parse_args(argv)
    import torch

    from openmanus_lite.engine.precision import cpu_has_native_bf16

    if args.threads:
        torch.set_num_threads(args.threads)
    fp32 = mlp_step_seconds(torch.float32, args.tokens, args.repeats)
    bf16 = mlp_step_seconds(torch.bfloat16, args.tokens, args.repeats)
    result = {"cpu_capability": torch.backends.cpu.get_cpu_capability(), "native_bf16": cpu_has_native_bf16(),
              "threads": torch.get_num_threads(), "tokens": args.tokens,
              "float32_ms": round(1000 * fp32, 3), "bfloat16_ms": round(1000 * bf16, 3),
              "bf16_speedup": round(fp32 / bf16, 3)}
    print(f"{result['cpu_capability']}, native bf16: {result['native_bf16']}; one MLP step on {args.tokens} tokens: "
          f"float32 {result['float32_ms']} ms, bfloat16 {result['bfloat16_ms']} ms "
          f"(bf16 {result['bf16_speedup']}x the speed of float32)")
    print("RESULT " + json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

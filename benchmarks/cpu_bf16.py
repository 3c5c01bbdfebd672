"""Is bfloat16 faster than float32 on this CPU? The default model's matmul rate in both dtypes.

bf16 pays only where the CPU multiplies bfloat16 natively (AVX512-BF16 or AMX; on such a CPU a
training step of the default model was 1.75x faster, docs/RESULTS.md). Elsewhere (AVX2-only CPUs, e.g. many
AMD EPYC and desktop machines) torch emulates it. This times one SmolLM2-135M layer's seven projections on
2,048 tokens in both dtypes (`engine.speed.matmul_gflops`, the rate the throughput benchmarks and the demo
measure against). Seconds, not minutes.

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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, default=2048)
    p.add_argument("--seconds", type=float, default=2.0, help="timed seconds per dtype (median pass reported)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
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
    print("RESULT " + json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

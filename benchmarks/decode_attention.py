"""One decoding step's attention over a key/value buffer: the cache view read where it lies against a contiguous copy.

The kit's decoding loop keeps keys/values in a preallocated [rows, kv heads, capacity, dim] buffer
(`engine.decoding.BufferLayer`) and hands attention a view of its filled positions. `engine.attention` copies that
view to contiguous memory in bf16 / fp16 and reads it in place in float32; this times its `grouped_attention` both
ways in both dtypes, for the default model's shapes (30 layers, 9 query heads over 3 key/value heads of 64), side by side in one process.

    python benchmarks/decode_attention.py                        # 16 rows at 1,000 and 2,000 positions
    python benchmarks/decode_attention.py --rows 32 --positions 500,1000

Ends with one line `RESULT {json}` (median ms per step, all 30 layers).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

LAYERS, HEADS, KV_HEADS, DIM = 30, 9, 3, 64  # SmolLM2-135M


def step_ms(query, buffers, positions: int, copy: bool, repeats: int) -> float:
    """Median ms of one step's attention over every layer's buffer: the kit's `grouped_attention` on the filled
    positions' view, or on a contiguous copy of it made first."""
    from openmanus_lite.engine.attention import grouped_attention

    def step():
        for k, v in buffers:
            key, value = k[:, :, :positions], v[:, :, :positions]
            if copy:
                key, value = key.contiguous(), value.contiguous()
            grouped_attention(query, key, value, None, None)

    step()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    return round(1000 * statistics.median(times), 1)


def main(argv: list[str] | None = None) -> int:
    import torch

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=16)
    p.add_argument("--positions", default="1000,2000")
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    from openmanus_lite.engine.precision import cpu_has_native_bf16

    g = torch.Generator().manual_seed(0)
    cases = []
    for dtype in args.dtypes.split(","):
        for positions in map(int, args.positions.split(",")):
            shape = (args.rows, KV_HEADS, positions + 128, DIM)  # the buffer has room for the turn's new tokens
            buffers = [tuple(torch.randn(shape, generator=g).to(getattr(torch, dtype)) for _ in "kv")
                       for _ in range(LAYERS)]
            query = torch.randn(args.rows, HEADS, 1, DIM, generator=g).to(getattr(torch, dtype))
            copy, view = (step_ms(query, buffers, positions, c, args.repeats) for c in (True, False))
            cases.append({"dtype": dtype, "positions": positions, "copy_ms": copy, "view_ms": view,
                          "view_speedup": round(copy / view, 2)})
            print(f"{dtype:9} {positions:5} positions x {args.rows} rows: copy {copy:7.1f} ms, view {view:7.1f} ms "
                  f"({copy / view:.2f}x)", flush=True)
    print("RESULT " + json.dumps({"rows": args.rows, "threads": args.threads, "native_bf16": cpu_has_native_bf16(),
                                  "cases": cases}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Causal attention's forward and backward pass for training on the CPU: torch's flash kernel against the kit's block
attention (`engine.attention._BlockCausalAttention`), one conversation of the default model's shapes (9 query heads over
3 key/value heads of 64), side by side in one process, the settings interleaved at each length and dtype.

    python benchmarks/train_attention.py                                   # 200-2,000 positions, bf16 and float32
    python benchmarks/train_attention.py --positions 300,600 --dtypes bfloat16 --rows 64,128,256

Reports the median ms of one layer's forward + backward and the bytes each keeps for its backward pass (torch's keeps
its output and log-sum-exp; the block attention its probabilities in the input dtype). Ends with `RESULT {json}`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

HEADS, KV_HEADS, DIM = 9, 3, 64  # SmolLM2-135M


def one_pass(attention, rows: int, length: int, dtype, seed: int = 0) -> tuple[float, float, int]:
    """(forward ms, backward ms, bytes saved for backward) of one pass; `rows` 0 is torch's flash kernel."""
    import torch

    attention.BLOCK_ROWS = rows
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, heads, length, DIM, generator=g, dtype=dtype).requires_grad_()
               for heads in (HEADS, KV_HEADS, KV_HEADS))
    grad = torch.randn(1, HEADS, length, DIM, generator=g, dtype=dtype)
    saved: list[int] = []

    def keep(t):
        saved.append(t.numel() * t.element_size() if t.data_ptr() not in {x.data_ptr() for x in (q, k, v)} else 0)
        return t

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        start = time.perf_counter()
        if rows:  # the block attention itself: the kit routes float32 to torch's kernel, measured here all the same
            out = attention._BlockCausalAttention.apply(q, k, v, DIM ** -0.5)
        else:
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        middle = time.perf_counter()
    out.backward(grad)
    end = time.perf_counter()
    return 1000 * (middle - start), 1000 * (end - middle), sum(saved)


def main(argv: list[str] | None = None) -> int:
    import torch

    from openmanus_lite.engine import attention

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--positions", default="200,300,450,600,1000,2000")
    p.add_argument("--dtypes", default="bfloat16,float32")
    p.add_argument("--rows", default="128", help="block rows to compare with torch's kernel (comma list)")
    p.add_argument("--repeats", type=int, default=9, help="timed passes per setting (after 2 warm-up passes)")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    default_rows = attention.BLOCK_ROWS
    settings = [0] + [int(r) for r in args.rows.split(",")]
    results = []
    for dtype_name in args.dtypes.split(","):
        dtype = getattr(torch, dtype_name)
        for length in (int(x) for x in args.positions.split(",")):
            for rows in settings:
                for _ in range(2):
                    one_pass(attention, rows, length, dtype)
            times: dict[int, list[tuple[float, float, int]]] = {rows: [] for rows in settings}
            for _ in range(args.repeats):  # interleaved: the machine's speed drifts
                for rows in settings:
                    times[rows].append(one_pass(attention, rows, length, dtype))
            flash = statistics.median(f + b for f, b, _ in times[0])
            for rows in settings:
                total = statistics.median(f + b for f, b, _ in times[rows])
                row = {"dtype": dtype_name, "positions": length, "attention": "flash" if rows == 0 else f"block{rows}",
                       "forward_ms": round(statistics.median(f for f, _, _ in times[rows]), 2),
                       "backward_ms": round(statistics.median(b for _, b, _ in times[rows]), 2),
                       "total_ms": round(total, 2), "speedup_vs_flash": round(flash / total, 2),
                       "saved_mb": round(times[rows][0][2] / 2**20, 2)}
                results.append(row)
                print(f"{dtype_name:>8} {length:>5} positions {row['attention']:>8}: forward {row['forward_ms']:7.2f} "
                      f"+ backward {row['backward_ms']:7.2f} = {row['total_ms']:7.2f} ms "
                      f"({row['speedup_vs_flash']}x flash), {row['saved_mb']} MB kept for backward", flush=True)
    attention.BLOCK_ROWS = default_rows
    print("RESULT " + json.dumps({"results": results, "threads": args.threads}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""`python -m openmanus_lite presets [--memory] [--published] [NAME ...]`: the hardware presets and what fits (the
estimates: train/memory.py). Nothing here imports torch or TRL."""

from __future__ import annotations

from typing import Any

from openmanus_lite.cli import command
from openmanus_lite.cli.args import make_parser, parse
from openmanus_lite.train.memory import GB, StageMemory, estimate_preset, published_check
from openmanus_lite.train.presets import PRESETS, get_preset


def format_table(preset: Any, stages: list[StageMemory]) -> str:
    cols = ["weights", "adapter", "train+grad", "optimizer", "train+optim", "activations", "logits", "kv_cache",
            "prefill", "prefix_cache", "cuda_ctx", "runtime"]
    cols = [c for c in cols if any(c in st.parts for st in stages)]
    card = preset.memory_gb
    lines = [f"{'stage':<14}" + "".join(f"{c:>13}" for c in cols) + f"{'total':>9}" + ("  of card" if card else "")]
    for st in stages:
        row = f"{st.stage:<14}" + "".join(f"{st.parts.get(c, 0.0) / GB:>13.2f}" for c in cols)
        row += f"{st.total / GB:>9.2f}" + (f"  {100 * st.total / (card * GB):>6.0f}%" if card else "")
        lines.append(row + (f"   {st.note}" if st.note else ""))
    return "\n".join(lines)


@command
def main(argv: list[str]) -> int:
    p = make_parser("openmanus_lite presets", "List the hardware presets; --memory adds a per-stage memory estimate "
                    "(GPU memory, or resident memory on a CPU).", ("python -m openmanus_lite presets t4 --memory",))
    p.add_argument("names", nargs="*", help=f"presets to show (default: all of {sorted(PRESETS)})")
    p.add_argument("--memory", action="store_true", help="per-stage memory estimate in GB against the preset's card")
    p.add_argument("--published", action="store_true", help="the estimator against Unsloth's published minimum VRAM")
    args, _ = parse(p, argv)
    unknown = [n for n in args.names if n not in PRESETS]
    if unknown:
        p.error(f"unknown presets {unknown}; choose from {sorted(PRESETS)}")
    for name in args.names or list(PRESETS):
        preset = get_preset(name)
        card = f"{preset.memory_gb:.1f} GB card" if preset.memory_gb else "CPU (RAM)"
        print(f"{name}: {preset.model}, {'4-bit' if preset.load_in_4bit else preset.dtype or '16-bit'}, "
              f"max_seq_length {preset.max_seq_length}, {card}")
        if args.memory:
            print(format_table(preset, estimate_preset(preset)))
            print()
    if args.published:
        print(f"{'case':<36}{'published GB':>14}{'estimate GB':>13}")
        for case, published, estimate in published_check():
            print(f"{case:<36}{published:>14.1f}{estimate:>13.1f}")
    return 0


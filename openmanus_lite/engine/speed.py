"""The machine's own dense matmul rate, the yardstick for training and decoding speed (issue #41).

Why: 2-core machines of the same name differ up to 2x, so tokens/s alone says little about the code; a share of
the machine's own rate does, and the demo predicts its SFT pace from it.
"""

from __future__ import annotations

import statistics
import time

import torch

from openmanus_lite.engine import precision

# (in, out) of one SmolLM2-135M decoder layer's projections (q, k, v, o, gate, up, down): most of its compute
LAYER_SHAPES = ((576, 576), (576, 192), (576, 192), (576, 576), (576, 1536), (576, 1536), (1536, 576))


def matmul_dtype(device: str = "cpu"):
    """What the kit multiplies in on `device`, as `engine.precision` decides."""
    if device != "cpu":
        return precision.resolve_precision().dtype
    return torch.bfloat16 if precision.cpu_has_native_bf16() else torch.float32


def matmul_kind(device: str = "cpu") -> str:
    """`matmul_dtype`'s name, "bfloat16 on AMX" where AMX tiles multiply it: the probe speeds up there far more than
    SFT does (`precision.cpu_has_amx`), so a forecast from the probe needs a pace recorded on the same kind of CPU."""
    name = str(matmul_dtype(device)).removeprefix("torch.")
    return f"{name} on AMX" if device == "cpu" and name == "bfloat16" and precision.cpu_has_amx() else name


def matmul_gflops(dtype=None, tokens: int = 2048, seconds: float = 2.0, device: str = "cpu") -> float:
    """Median GFLOP/s of passes through one default-model layer's products in `dtype` (None: `matmul_dtype`), over
    about `seconds` after a warm-up. The median: a share of it should see the workload's noise."""
    dtype = dtype or matmul_dtype(device)
    g = torch.Generator().manual_seed(0)
    inputs = {n: torch.randn(tokens, n, generator=g).to(device, dtype) for n in {i for i, _ in LAYER_SHAPES}}
    pairs = [(inputs[i], torch.randn(i, o, generator=g).to(device, dtype)) for i, o in LAYER_SHAPES]
    flops = 2 * tokens * sum(i * o for i, o in LAYER_SHAPES)
    rates, end = [], None
    with torch.inference_mode():
        while not rates or time.perf_counter() < end:
            t = time.perf_counter()
            for x, w in pairs:
                x @ w
            if device != "cpu":
                torch.cuda.synchronize()
            if end is None:  # the first pass builds oneDNN's primitives: not timed
                end = time.perf_counter() + seconds
            else:
                rates.append(flops / (time.perf_counter() - t) / 1e9)
    return round(statistics.median(rates), 1)


def matmul_params(model) -> int:
    """Parameters in a matrix product per token: every linear layer's in x out (embedding lookups excluded)."""
    return sum(m.in_features * m.out_features for m in model.modules() if isinstance(m, torch.nn.Linear))


def training_flops_per_token(params: int, full: bool = False, recompute: bool = False) -> int:
    """FLOPs of one training token: 2 x params forward, 2 for the inputs' gradients, 2 for the weights' gradients in
    full fine-tuning only (LoRA's frozen weights take none), 2 more when checkpointing recomputes the forward.
    Attention scores are left out (about a tenth more at ~700-token rows)."""
    return 2 * params * (2 + full + recompute)


def decode_flops_per_token(params: int) -> int:
    """FLOPs of one generated token: 2 x params (the prompt's prefill is not counted, so a share is a floor)."""
    return 2 * params


def share_of_matmul(tokens_per_s: float, flops_per_token: float, gflops: float) -> float:
    """The workload's FLOP rate as a share of the machine's matmul rate."""
    return round(tokens_per_s * flops_per_token / (gflops * 1e9), 3)

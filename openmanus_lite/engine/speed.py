"""The machine's own dense matmul rate, the yardstick for training and decoding speed (issue #41).

Why: 2-core machines of the same name differ up to 2x (the same SFT recipe trained 217.6 tokens/s on one AMD EPYC
and 431 on another), so tokens/s alone says little about the code. As a share of what this machine multiplies in
the same run it does, and the demo predicts its SFT pace from the rate before it trains.
"""

from __future__ import annotations

import statistics
import time

LAYER_SHAPES = ((576, 576), (576, 192), (576, 192), (576, 576), (576, 1536), (576, 1536), (1536, 576))
"""(in, out) of one SmolLM2-135M decoder layer's seven projections (q, k, v, o, gate, up, down): the products that
take most of the default model's training and decoding time."""


def matmul_dtype(device: str = "cpu"):
    """What the kit multiplies in on `device`: bfloat16 where it is native, else float32 on a CPU (float16 on a GPU
    without native bf16), as `engine.precision` decides for training and inference."""
    import torch

    from openmanus_lite.engine.precision import cpu_has_native_bf16, resolve_precision

    if device != "cpu":
        return resolve_precision().dtype
    return torch.bfloat16 if cpu_has_native_bf16() else torch.float32


def matmul_gflops(dtype=None, tokens: int = 2048, seconds: float = 2.0, device: str = "cpu") -> float:
    """Median GFLOP/s of passes through one default-model layer's products (`tokens` x in @ in x out) in `dtype`
    (None: `matmul_dtype`), timed for about `seconds` after a warm-up pass, with torch's current threads.
    The median, not the best pass: a share of it should see the same noise as the workload measured beside it."""
    import torch

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
    """Parameters that take part in a matrix product per token: every linear layer's in x out (the tied output
    head counted once, the embedding lookup not at all; LoRA adapters included; 4-bit layers at full size)."""
    import torch

    return sum(m.in_features * m.out_features for m in model.modules() if isinstance(m, torch.nn.Linear))


def training_flops_per_token(params: int, full: bool = False, recompute: bool = False) -> int:
    """FLOPs of one training token: 2 x params forward, 2 x params for the inputs' gradients (backward runs through
    every layer), 2 x params more for the weights' gradients in full fine-tuning only (LoRA's frozen weights take
    none: 4 x params, the count used for the kit's LoRA SFT), and 2 x params more where gradient checkpointing
    recomputes the forward. Attention scores are left out (about a tenth more at the recipes' ~700-token rows)."""
    return 2 * params * (2 + full + recompute)


def decode_flops_per_token(params: int) -> int:
    """FLOPs of one generated token: 2 x params (the prompt's prefill is not counted, so a share is a floor)."""
    return 2 * params


def share_of_matmul(tokens_per_s: float, flops_per_token: float, gflops: float) -> float:
    """The workload's FLOP rate as a share of the machine's matmul rate."""
    return round(tokens_per_s * flops_per_token / (gflops * 1e9), 3)

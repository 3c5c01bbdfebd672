"""LoRA adapters that keep their 16-bit input for the backward pass instead of a float32 copy (issue #41).

Over 16-bit base weights PEFT casts each float32 adapter's input to float32 before `lora_A`, which saves that copy
for its weight gradient: on a CPU (bf16 without autocast) ~1.9 of the ~5.3 GB an SFT step of SmolLM2-135M keeps at
batch 4 x 1,024. Here `lora_A` saves the 16-bit input, which the frozen base projection saves anyway, and upcasts
inside its own matmul: the same float32 arithmetic without the copy.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F


class _UpcastLinear(torch.autograd.Function):
    """x @ weight.T in the weight's dtype, saving x as it came (16-bit) rather than its upcast copy."""

    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, weight)
        return F.linear(x.to(weight.dtype), weight)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        grad_x = (grad @ weight).to(x.dtype) if ctx.needs_input_grad[0] else None
        if not ctx.needs_input_grad[1]:
            return grad_x, None
        return grad_x, grad.reshape(-1, grad.shape[-1]).t() @ x.reshape(-1, x.shape[-1]).to(weight.dtype)


class UpcastInputLinear(torch.nn.Linear):
    """A bias-free `lora_A` that takes its input in any dtype and computes in its weight's (module doc)."""

    def forward(self, x):
        return _UpcastLinear.apply(x, self.weight)


def keep_lora_inputs_16bit(model: Any, *, autocast: bool) -> int:
    """Switch every float32 `lora_A` over a 16-bit base weight on the CPU to UpcastInputLinear; how many were switched.

    Nothing changes under autocast (the trainer's bf16 / fp16: there the adapters already compute in 16 bits), on an
    accelerator (Unsloth's LoRA kernels), over a float32 base (the input is float32 already, nothing is copied), or
    for a layer with a LoRA variant (DoRA...) or an adapter bias, which keep PEFT's own path."""
    if autocast:
        return 0
    from peft.tuners.lora import Linear as LoraLinear

    switched = 0
    for layer in model.modules():
        if not isinstance(layer, LoraLinear) or layer.lora_variant:
            continue
        base = layer.get_base_layer().weight
        adapters = list(layer.lora_A.values())
        if base.device.type != "cpu" or base.dtype not in (torch.bfloat16, torch.float16) or not all(
                type(a) in (torch.nn.Linear, UpcastInputLinear) and a.bias is None and a.weight.dtype == torch.float32
                for a in adapters):
            continue
        for adapter in adapters:
            switched += type(adapter) is torch.nn.Linear
            adapter.__class__ = UpcastInputLinear
        layer.cast_input_dtype_enabled = False  # lora_A upcasts inside its matmul instead
    return switched


def lean_lora_inputs_for(model: Any, config: Any) -> int:
    """`keep_lora_inputs_16bit` when `config.lean_lora_inputs` (default on), as every kit trainer does first."""
    if not getattr(config, "lean_lora_inputs", False):
        return 0
    switched = keep_lora_inputs_16bit(model, autocast=bool(config.bf16 or config.fp16))
    if switched:
        print(f"LoRA: {switched} adapters save their 16-bit inputs for the backward pass (train/lean_lora.py)")
    return switched

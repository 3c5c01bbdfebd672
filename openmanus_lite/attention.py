"""Grouped-query attention without copying keys and values (the CPU decoding bottleneck).

transformers' `sdpa` attention expands the keys/values of a grouped-query model to the number
of query heads (`repeat_kv`) whenever an attention mask is passed, and batched generation
always passes one (left padding). On CPU that copy dominated evaluation: SmolLM2-135M
(9 query heads, 3 key/value heads) spent about half of its decoding time in it, 133 ms
against 9 ms per layer call at 60 rows x 600 positions. `scaled_dot_product_attention(...,
enable_gqa=True)` computes the same attention without the copy.

`use_grouped_attention(model)` switches a CPU model to it; `load_model` calls it.
"""

from __future__ import annotations

from typing import Any

NAME = "sdpa_gqa"


def sdpa_gqa_attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, dropout: float = 0.0,
                       scaling: float | None = None, is_causal: bool | None = None, **kwargs: Any):
    """Same contract as transformers' sdpa attention: (batch, heads, q, dim) in, (batch, q, heads, dim) out."""
    import torch
    import torch.nn.functional as F

    q_len, kv_len = query.shape[2], key.shape[2]
    causal = False
    if attention_mask is None and q_len > 1 and (is_causal if is_causal is not None else getattr(module, "is_causal", True)):
        if q_len == kv_len:
            causal = True
        else:  # new tokens after cached ones: each query sees the whole past and its own prefix
            attention_mask = torch.ones(q_len, kv_len, dtype=torch.bool, device=query.device).tril(kv_len - q_len)
    out = F.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, is_causal=causal,
        enable_gqa=key.shape[1] != query.shape[1],
    )
    return out.transpose(1, 2).contiguous(), None


def register() -> str:
    """Make NAME known to transformers (attention and its mask, which is sdpa's); returns NAME."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, sdpa_gqa_attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    return NAME


def use_grouped_attention(model: Any) -> bool:
    """Switch a CPU model with grouped-query sdpa attention to NAME; True when switched.

    Only on CPU: on a GPU, transformers' own choice (flash / memory-efficient kernels) stays.
    """
    config = getattr(model, "config", None)
    if config is None or getattr(config, "_attn_implementation", None) != "sdpa":
        return False
    heads = getattr(config, "num_attention_heads", None)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    params = next(iter(model.parameters()), None)
    if not heads or kv_heads == heads or params is None or params.device.type != "cpu":
        return False
    config._attn_implementation = register()
    return True

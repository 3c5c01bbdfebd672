"""Grouped-query attention without copying keys and values (the CPU decoding bottleneck).

transformers' `sdpa` copies a grouped-query model's keys/values to every query head whenever a mask is passed
(always, with left padding): about half of SmolLM2-135M's CPU decoding time. `enable_gqa=True` avoids the copy, and
one-token steps run as two grouped matmuls (0.3-0.6 ms against 4.7 ms per layer in torch's CPU flash kernel).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

NAME = "sdpa_gqa"


def sdpa_gqa_attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, dropout: float = 0.0,
                       scaling: float | None = None, is_causal: bool | None = None, **kwargs: Any):
    """Same contract as transformers' sdpa attention: (batch, heads, q, dim) in, (batch, q, heads, dim) out."""
    q_len, kv_len = query.shape[2], key.shape[2]
    if q_len == 1 and not dropout:
        return _one_query_attention(query, key, value, attention_mask, scaling), None
    causal = False
    if attention_mask is None and q_len > 1 and (is_causal if is_causal is not None else getattr(module, "is_causal", True)):
        if q_len == kv_len:
            causal = True
        else:  # new tokens after cached ones: each query sees the whole past and its own prefix
            attention_mask = torch.ones(q_len, kv_len, dtype=torch.bool, device=query.device).tril(kv_len - q_len)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling,
                                         is_causal=causal, enable_gqa=key.shape[1] != query.shape[1])
    return out.transpose(1, 2).contiguous(), None


def _one_query_attention(query: Any, key: Any, value: Any, attention_mask: Any, scaling: float | None):
    """Attention of one new token per row as grouped matmuls: [batch, heads, 1, dim] -> [batch, 1, heads, dim]."""
    if key.dtype != torch.float32:
        # bf16 / fp16: the batched matmuls ran slower on the strided cache view than on a contiguous copy (1.4-1.6x
        # with emulated bf16, several times with native); float32 the other way round: the view is read where it
        # lies, 1.6-5.7x faster than copying it (16 rows at 1,000 and 2,000 positions, four runs of
        # benchmarks/decode_attention.py: the copy's time varies most)
        key, value = key.contiguous(), value.contiguous()
    return grouped_attention(query, key, value, attention_mask, scaling)


def grouped_attention(query: Any, key: Any, value: Any, attention_mask: Any, scaling: float | None):
    """One-query attention over keys/values as given (a view or a copy): each key/value head serves its group of
    query heads in one matmul, without repeating the keys/values per query head."""
    batch, heads, _, dim = query.shape
    kv_heads, kv_len = key.shape[1], key.shape[2]
    scale = dim ** -0.5 if scaling is None else scaling
    grouped = query.reshape(batch, kv_heads, heads // kv_heads, dim)  # the query heads each key/value head serves
    scores = torch.matmul(grouped, key.transpose(-1, -2)).float() * scale
    if attention_mask is not None:
        mask = attention_mask[:, :, -1:, -kv_len:]  # [batch or 1, 1, 1, kv_len]
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    probs = torch.softmax(scores, dim=-1).to(value.dtype)
    return torch.matmul(probs, value).reshape(batch, 1, heads, dim)


def use_grouped_attention(model: Any) -> bool:
    """Switch a CPU model with grouped-query sdpa attention to NAME; True when switched (a GPU keeps its kernels)."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "_attn_implementation", None) != "sdpa":
        return False
    heads = getattr(config, "num_attention_heads", None)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    params = next(iter(model.parameters()), None)
    if not heads or kv_heads == heads or params is None or params.device.type != "cpu":
        return False
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, sdpa_gqa_attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    config._attn_implementation = NAME
    return True

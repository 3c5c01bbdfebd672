"""Grouped-query attention without copying keys and values (the CPU decoding bottleneck), and per conversation in
packed training rows.

transformers' `sdpa` copies a grouped-query model's keys/values to every query head whenever a mask is passed
(always, with left padding): about half of SmolLM2-135M's CPU decoding time. `enable_gqa=True` avoids the copy, and
one-token steps run as two grouped matmuls (0.3-0.6 ms against 4.7 ms per layer in torch's CPU flash kernel).

Packed rows (TRL's `padding_free`: several conversations in one row, `position_ids` restarting at 0 for each) are
attended one conversation at a time (`cu_seq_lens_q`, set by `packed_bounds` from the position ids), not through
transformers' block-diagonal mask over the whole row, whose masked products cost SFT more than packing saved.
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
        if key.dtype != torch.float32:
            # bf16 / fp16 multiply faster from a contiguous copy of the cache, float32 from the strided view where it
            # lies (benchmarks/decode_attention.py, docs/RESULTS.md)
            key, value = key.contiguous(), value.contiguous()
        return grouped_attention(query, key, value, attention_mask, scaling), None
    bounds = kwargs.get("cu_seq_lens_q")
    if bounds is not None and q_len == kv_len:
        return _per_sequence_attention(query, key, value, bounds, dropout, scaling), None
    causal = attention_mask is None and q_len > 1 and bool(
        getattr(module, "is_causal", True) if is_causal is None else is_causal)
    if causal and q_len != kv_len:  # new tokens after cached ones: each query sees the whole past and its own prefix
        attention_mask = torch.ones(q_len, kv_len, dtype=torch.bool, device=query.device).tril(kv_len - q_len)
        causal = False
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling,
                                         is_causal=causal, enable_gqa=key.shape[1] != query.shape[1])
    return out.transpose(1, 2).contiguous(), None


@torch.compiler.disable  # its loop depends on the bounds' values: compiled layers run it eagerly (one graph break)
def _per_sequence_attention(query: Any, key: Any, value: Any, bounds: Any, dropout: float, scaling: float | None):
    """Causal attention within each packed sequence of a one-row batch, `bounds` its cumulative lengths [0, ..., T]
    (flash attention's `cu_seq_lens_q`): [1, heads, T, dim] -> [1, T, heads, dim]."""
    edges = bounds.tolist()
    gqa = key.shape[1] != query.shape[1]
    parts = [F.scaled_dot_product_attention(query[:, :, a:b], key[:, :, a:b], value[:, :, a:b], dropout_p=dropout,
                                            scale=scaling, is_causal=True, enable_gqa=gqa)
             for a, b in zip(edges[:-1], edges[1:])]
    return torch.cat(parts, dim=2).transpose(1, 2).contiguous()


def packed_bounds(position_ids: Any) -> Any:
    """The cumulative lengths of the sequences packed in a one-row batch, from position ids restarting at 0 for each
    ([0, ..., T] as int32), or None when the row holds one sequence. A trailing run of zeros is padding (TRL's
    padding-free collator pads position ids with 0), one sequence rather than one per pad: nothing attends to it, and
    its labels are ignored."""
    if position_ids is None or position_ids.dim() != 2 or position_ids.shape[0] != 1:
        return None
    positions = position_ids[0].tolist()
    end = len(positions)
    while end > 1 and positions[end - 1] == 0 and positions[end - 2] == 0:
        end -= 1
    starts = [i for i in range(end) if positions[i] == 0]
    if len(starts) < 2 or starts[0] != 0:
        return None
    return torch.tensor(starts + [len(positions)], dtype=torch.int32, device=position_ids.device)


def _mark_packed_rows(module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
    """Forward pre-hook: a packed one-row batch (position ids, no attention mask, no cache) gets `cu_seq_lens_q`,
    which the attention reads to attend per sequence (`_per_sequence_attention`)."""
    if any(kwargs.get(k) is not None for k in ("attention_mask", "past_key_values")) or "cu_seq_lens_q" in kwargs:
        return None
    bounds = packed_bounds(kwargs.get("position_ids"))
    return None if bounds is None else (args, {**kwargs, "cu_seq_lens_q": bounds})


def grouped_attention(query: Any, key: Any, value: Any, attention_mask: Any, scaling: float | None):
    """One-query attention over keys/values as given (a view or a copy), [batch, heads, 1, dim] -> [batch, 1, heads,
    dim]: each key/value head serves its group of query heads in one matmul, without repeating the keys/values."""
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
    """Switch a CPU model with grouped-query sdpa attention to NAME, and mark its packed rows (`_mark_packed_rows`);
    True when switched (a GPU keeps its kernels)."""
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
    model.register_forward_pre_hook(_mark_packed_rows, with_kwargs=True)
    return True

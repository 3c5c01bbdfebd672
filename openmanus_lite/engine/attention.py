"""Grouped-query attention without copying keys and values (the CPU decoding bottleneck), and per conversation in
packed training rows.

transformers' `sdpa` copies a grouped-query model's keys/values to every query head whenever a mask is passed
(always, with left padding): about half of SmolLM2-135M's CPU decoding time. `enable_gqa=True` avoids the copy, and
one-token steps run as two grouped matmuls (0.3-0.6 ms against 4.7 ms per layer in torch's CPU flash kernel).

Packed rows (TRL's `padding_free`: several conversations in one row, `position_ids` restarting at 0 for each) are
attended one conversation at a time (`cu_seq_lens_q`, set by `packed_bounds` from the position ids), not through
transformers' block-diagonal mask over the whole row, whose masked products cost SFT more than packing saved. When
gradients flow, each conversation runs `_BlockCausalAttention` instead of torch's CPU flash kernel, whose backward
pass took a quarter of an SFT step.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.nn.functional as F

from openmanus_lite.engine.decoding import windowed_layers

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
    keys = kwargs.get(KEY_MASK)  # a padded batch's [batch, T] mask (`_mark_rows`), read instead of the 4-D one
    causal = attention_mask is None and q_len > 1 and bool(
        getattr(module, "is_causal", True) if is_causal is None else is_causal)
    if q_len == kv_len and (causal or (keys is not None and keys.shape[-1] == kv_len)) and \
            _block_attention_applies(query, key, value, dropout):
        return _per_sequence_attention(query, key, value, None, dropout, scaling, keys), None
    if causal and q_len != kv_len:  # new tokens after cached ones: each query sees the whole past and its own prefix
        attention_mask = torch.ones(q_len, kv_len, dtype=torch.bool, device=query.device).tril(kv_len - q_len)
        causal = False
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling,
                                         is_causal=causal, enable_gqa=key.shape[1] != query.shape[1])
    return out.transpose(1, 2).contiguous(), None


@torch.compiler.disable  # its loop depends on the bounds' values: compiled layers run it eagerly (one graph break)
def _per_sequence_attention(query: Any, key: Any, value: Any, bounds: Any, dropout: float, scaling: float | None,
                            keys: Any = None):
    """Causal attention within each packed sequence of a one-row batch, `bounds` its cumulative lengths [0, ..., T]
    (flash attention's `cu_seq_lens_q`; None: one sequence per row, `keys` its [batch, T] padding mask if any):
    [batch, heads, T, dim] -> [batch, T, heads, dim]. `_BlockCausalAttention` where gradients flow on the CPU,
    torch's kernel elsewhere."""
    edges = [0, query.shape[2]] if bounds is None else bounds.tolist()
    scale = query.shape[-1] ** -0.5 if scaling is None else scaling
    blocks = _block_attention_applies(query, key, value, dropout)
    gqa = key.shape[1] != query.shape[1]
    parts = [_BlockCausalAttention.apply(query[:, :, a:b], key[:, :, a:b], value[:, :, a:b], scale, keys) if blocks else
             F.scaled_dot_product_attention(query[:, :, a:b], key[:, :, a:b], value[:, :, a:b], dropout_p=dropout,
                                            scale=scaling, is_causal=True, enable_gqa=gqa)
             for a, b in zip(edges[:-1], edges[1:])]
    return torch.cat(parts, dim=2).transpose(1, 2).contiguous()


def _block_attention_applies(query: Any, key: Any, value: Any, dropout: float) -> bool:
    """Training in bf16 / fp16 on the CPU (gradients flow, no dropout): where `_BlockCausalAttention` replaces torch's
    kernel. In float32 torch's kernel stays: the block attention trained at the same pace there (1.03x, within noise)
    and kept 0.2 GB more (docs/RESULTS.md, "Block attention")."""
    return (BLOCK_ROWS > 0 and not dropout and query.device.type == "cpu" and query.dtype != torch.float32
            and torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value)))


BLOCK_ROWS = int(os.environ.get("OPENMANUS_BLOCK_ROWS", "128"))
"""Query positions per block of `_BlockCausalAttention` (128 ran 1.5-2x torch's kernel at 200-2,000 positions, 64 and
256 slower; benchmarks/train_attention.py); 0 keeps torch's kernel."""


class _BlockCausalAttention(torch.autograd.Function):
    """Causal (grouped-query) attention for training on a CPU: [batch, heads, T, dim] -> the same shape.

    Torch's CPU flash kernel took a third of an SFT step at 300-1,000 positions, its backward pass two thirds of that
    (docs/RESULTS.md, "Where the compiled bf16 step's time goes"). Here the query positions go in blocks of
    BLOCK_ROWS; each key/value head serves its query heads in one matmul, over the keys up to the block's end only;
    each block's probabilities are kept in the input dtype for the backward pass, which then needs no recomputation
    (benchmarks/train_attention.py: ~2x torch's forward and backward; docs/RESULTS.md, "Block attention").
    `keys`, a [batch, T] padding mask (True: a token), hides padded keys; a padded query's output is finite and
    unused."""

    @staticmethod
    def forward(ctx: Any, query: Any, key: Any, value: Any, scale: float, keys: Any = None) -> Any:
        out, probs = torch.empty_like(query), []
        for start, end, q in _blocks(query, key.shape[1]):
            scores = torch.matmul(q, key[:, :, :end].transpose(-1, -2)).float().mul_(scale)
            if keys is not None:  # the lowest finite score: a query with no key left (left padding) stays finite
                scores.masked_fill_(~keys[:, None, None, :end], torch.finfo(scores.dtype).min)
            scores[..., start:].masked_fill_(_future(end - start, query.shape[1] // key.shape[1]), float("-inf"))
            probs.append(torch.softmax(scores, dim=-1).to(value.dtype))
            out[:, :, start:end] = torch.matmul(probs[-1], value[:, :, :end]).reshape(out[:, :, start:end].shape)
        ctx.save_for_backward(query, key, value, *probs)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: Any) -> tuple:
        query, key, value, *probs = ctx.saved_tensors
        grad_q = torch.empty_like(query)
        grad_k = torch.zeros(key.shape, dtype=torch.float32, device=key.device)  # summed over blocks: kept in float32
        grad_v = torch.zeros(value.shape, dtype=torch.float32, device=value.device)
        for (start, end, q), p in zip(_blocks(query, key.shape[1]), probs):
            g = grad_out[:, :, start:end].reshape(q.shape)
            grad_v[:, :, :end] += torch.matmul(p.transpose(-1, -2), g)
            grad_p = torch.matmul(g, value[:, :, :end].transpose(-1, -2))
            grad_s = torch.ops.aten._softmax_backward_data(grad_p, p, -1, p.dtype).mul_(ctx.scale)
            grad_q[:, :, start:end] = torch.matmul(grad_s, key[:, :, :end]).reshape(grad_q[:, :, start:end].shape)
            grad_k[:, :, :end] += torch.matmul(grad_s.transpose(-1, -2), q)
        return grad_q, grad_k.to(key.dtype), grad_v.to(value.dtype), None, None


def _blocks(query: Any, kv_heads: int):
    """(start, end, the block's queries as [batch, kv_heads, group * rows, dim]) per block of BLOCK_ROWS positions:
    the query heads a key/value head serves stacked as rows of one matmul, without repeating the keys/values."""
    batch, heads, length, dim = query.shape
    for start in range(0, length, BLOCK_ROWS):
        end = min(length, start + BLOCK_ROWS)
        yield start, end, query[:, :, start:end].reshape(batch, kv_heads, heads // kv_heads * (end - start), dim)


def _future(rows: int, group: int) -> Any:
    """The causal mask of a block's last `rows` keys for its `group` stacked heads: True where a key is later."""
    return torch.ones(rows, rows, dtype=torch.bool).triu_(1).repeat(group, 1)


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


KEY_MASK = "openmanus_key_mask"  # the keyword a padded batch's [batch, T] mask reaches the attention under


def _mark_rows(module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
    """Forward pre-hook without a cache: a packed one-row batch (position ids, no attention mask) gets
    `cu_seq_lens_q`, which the attention reads to attend per sequence (`_per_sequence_attention`); a padded batch's
    2-D attention mask also travels as KEY_MASK, which training's block attention reads instead of the 4-D mask
    transformers builds from it (causal and padding only: not for a model with a sliding window)."""
    mask = kwargs.get("attention_mask")
    if kwargs.get("past_key_values") is not None or "cu_seq_lens_q" in kwargs or KEY_MASK in kwargs:
        return None
    if mask is not None:
        plain = mask.dim() == 2 and not windowed_layers(getattr(module, "config", None))
        return (args, {**kwargs, KEY_MASK: mask.bool()}) if plain else None
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
    """Switch a CPU model with grouped-query sdpa attention to NAME, and mark its packed rows and padded batches
    (`_mark_rows`); True when switched (a GPU keeps its kernels)."""
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
    model.register_forward_pre_hook(_mark_rows, with_kwargs=True)
    return True

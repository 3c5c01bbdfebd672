"""The kit's decoding loop: one forward pass per step over a Hugging Face causal LM, many turns at once.

Why not `model.generate` (profiled on a 2-core CPU, docs/RESULTS.md): its turns paid for one-query attention steps
(attention.py), re-encoded shared instructions and padding, and stopped rows computing on. This loop takes cached
prefixes (`generation.PrefixCache`), prefills in groups of similar length, writes keys/values into a preallocated
buffer and drops stopped rows. Sampling is temperature + top-p over the raw logits, as TRL's GRPO generation does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn.functional as F
from transformers.cache_utils import Cache, DynamicLayer

KV = list[tuple[torch.Tensor, torch.Tensor]]  # keys and values per layer


class BufferLayer(DynamicLayer):
    """One layer's keys/values in a preallocated [batch, heads, capacity, dim] buffer: a step writes one column in
    place instead of DynamicLayer's copy of the whole cache. The buffer doubles if a call outgrows it."""

    def __init__(self, capacity: int):
        super().__init__()
        self.capacity, self.length = max(1, int(capacity)), 0

    def _allocate(self, k: torch.Tensor, v: torch.Tensor, rows: int) -> None:
        # zeros, not empty: a masked NaN would still poison the sum
        self._k, self._v = (t.new_zeros((rows, t.shape[1], self.capacity, t.shape[-1])) for t in (k, v))
        self.dtype, self.device, self.is_initialized = k.dtype, k.device, True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self._allocate(key_states, value_states, key_states.shape[0])
        elif key_states.dtype != self._k.dtype:
            # reused keys/values seeded in another dtype (mixed parameter dtypes): the model's own dtype wins
            self._k, self._v = self._k.to(key_states.dtype), self._v.to(value_states.dtype)
            self.dtype = key_states.dtype
        end = self.length + key_states.shape[-2]
        if end > self.capacity:
            extra = max(end, 2 * self.capacity) - self.capacity
            self._k, self._v = (F.pad(t, (0, 0, 0, extra)) for t in (self._k, self._v))
            self.capacity += extra
        self._k[:, :, self.length:end] = key_states
        self._v[:, :, self.length:end] = value_states
        self.length = end
        self.keys, self.values = self._k[:, :, :end], self._v[:, :, :end]
        return self.keys, self.values

    def place_rows(self, index: torch.Tensor, part: BufferLayer, head: int, width: int, batch: int) -> None:
        """Write `part` (rows `index`' prefill: `head` reused positions, then new ones) into this layer of `batch`
        rows and `width` positions: reused first, new last, zeros between."""
        k, v = part._k[:, :, :part.length], part._v[:, :, :part.length]
        if not self.is_initialized:
            self.capacity, self.length = max(self.capacity, width), width
            self._allocate(k, v, batch)
        new = part.length - head
        self._k[index, :, :head], self._v[index, :, :head] = k[:, :, :head], v[:, :, :head]
        self._k[index, :, width - new:width], self._v[index, :, width - new:width] = k[:, :, head:], v[:, :, head:]
        self.keys, self.values = self._k[:, :, :width], self._v[:, :, :width]

    def get_seq_length(self) -> int:
        return self.length

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.is_initialized:
            self._k, self._v = self._k[indices], self._v[indices]
            self.keys, self.values = self._k[:, :, :self.length], self._v[:, :, :self.length]


def text_config(model: Any) -> Any:
    cfg = model.config
    return cfg.get_text_config(decoder=True) if hasattr(cfg, "get_text_config") else cfg


def windowed_layers(config: Any) -> bool:
    """Whether some decoder layer is not plain full attention: a layer type other than it (sliding windows, linear
    attention), or a `sliding_window` the model applies (Mistral applies it whenever set; Qwen2 only with
    `use_sliding_window`)."""
    if any(t != "full_attention" for t in getattr(config, "layer_types", None) or []):
        return True
    return getattr(config, "sliding_window", None) is not None and getattr(config, "use_sliding_window", True)


def supports_buffer_cache(model: Any) -> bool:
    """True when every decoder layer is full attention (sliding windows and linear attention keep other state)."""
    return getattr(model, "config", None) is not None and not windowed_layers(text_config(model))


@dataclass
class Row:
    """One prompt being decoded: its index in the caller's list, its token limit, and what it produced."""

    index: int
    limit: int
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    stopped: bool = False


PREFILL_GROUPS = 4  # a batch prefills in at least this many groups: one group's keys/values beside the buffer


class ReusedPrefix:
    """The keys/values each row of a batch reuses (a prefix cache entry, how many of its first positions),
    right-aligned into `head` positions one prefill group at a time (`rows`): the whole batch's at once held a second
    copy of every prompt beside the decoding buffer."""

    def __init__(self, sources: list[tuple[KV | None, int]], head: int, dtype: torch.dtype, device: Any):
        self.sources, self.head, self.dtype, self.device = sources, head, dtype, device

    def rows(self, layer: int, index: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of `layer` for rows `index`: [rows, kv heads, head, dim], zeros before a row's prefix."""
        k0, v0 = next(kv[layer] for kv, c in self.sources if c > 0)
        k, v = (torch.zeros((len(index), t.shape[0], self.head, t.shape[2]), dtype=self.dtype, device=self.device)
                for t in (k0, v0))
        for row, i in enumerate(index):
            kv, c = self.sources[i]
            if c > 0:
                k[row, :, self.head - c:], v[row, :, self.head - c:] = kv[layer][0][:, :c], kv[layer][1][:, :c]
        return k, v

    def layers(self) -> KV:
        """Every layer's keys/values of every row (for `generate`, which takes the whole past at once)."""
        everyone = list(range(len(self.sources)))
        count = len(next(kv for kv, c in self.sources if c > 0))
        return [self.rows(layer, everyone) for layer in range(count)]

    def clear(self) -> None:
        self.sources = []


def choose_tokens(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """Greedy (temperature 0) or temperature + nucleus sampling of one token per row of [rows, vocab] logits."""
    if not temperature or temperature <= 0:
        # max's indices, the same first maximum as argmax: a bf16 argmax over 32 x 49,152 logits took 2.5 ms on a
        # 2-core CPU, max 0.43 (docs/RESULTS.md, "Full fine-tuning, and a bf16 decoding step")
        return logits.max(-1).indices
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p is None or top_p >= 1.0:
        return torch.multinomial(probs, 1).squeeze(-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    drop = sorted_probs.cumsum(-1) - sorted_probs > top_p  # keep the smallest set reaching top_p (>= 1 token)
    picked = torch.multinomial(sorted_probs.masked_fill(drop, 0.0), 1)
    return order.gather(-1, picked).squeeze(-1)


def decode(model: Any, input_ids: torch.Tensor, attention: torch.Tensor, past: ReusedPrefix | None, rows: list[Row],
           *, stop_ids: set[int], temperature: float, top_p: float, return_logprobs: bool,
           on_finish: Callable[[Row, KV], None] | None = None) -> None:
    """Decode `rows` (filled in place) from one batch laid out [pad | reused prefix | pad | new tokens]; `past` (the
    rows' reused keys/values, or None) is emptied once copied in. `on_finish(row, kv)` gets a stopped row's
    keys/values (CPU) of prompt + reply but the last token, for the next turn's prefix reuse."""
    steps = max(r.limit for r in rows)
    layers = [BufferLayer(attention.shape[1] + steps) for _ in range(int(text_config(model).num_hidden_layers))]
    cache = Cache(layers=layers)
    live = list(range(len(rows)))  # batch row -> index into rows
    mask, last_pos = attention, (attention.cumsum(-1) - 1).clamp(min=0)[:, -1]
    logits = _prefill(model, input_ids, attention, past, layers)
    if past is not None:
        past.clear()  # the reused keys/values now sit in the buffer: let go of the cache's while decoding
    scale = temperature if temperature and temperature > 0 else 1.0
    for _ in range(steps):
        chosen = choose_tokens(logits, temperature, top_p)
        tokens = chosen.tolist()
        if return_logprobs:
            logps = torch.log_softmax(logits.float() / scale, dim=-1).gather(-1, chosen[:, None]).squeeze(-1).tolist()
        keep = []
        for b, r in enumerate(live):
            row = rows[r]
            row.ids.append(tokens[b])
            if return_logprobs:
                row.logprobs.append(logps[b])
            row.stopped = tokens[b] in stop_ids
            if not row.stopped and len(row.ids) < row.limit:
                keep.append(b)
            elif on_finish is not None:
                pos = mask[b].nonzero().squeeze(-1)
                on_finish(row, [(layer._k[b].index_select(-2, pos).cpu(), layer._v[b].index_select(-2, pos).cpu())
                                for layer in layers])
        if not keep:
            break
        if len(keep) < len(live):
            index = torch.tensor(keep, device=input_ids.device)
            for layer in layers:
                layer.batch_select_indices(index)
            live = [live[b] for b in keep]
            mask, last_pos, chosen = mask[index], last_pos[index], chosen[index]
        mask = torch.cat([mask, mask.new_ones((len(live), 1))], dim=1)
        last_pos = last_pos + 1
        logits = model(input_ids=chosen[:, None], attention_mask=mask, position_ids=last_pos[:, None],
                       past_key_values=cache, use_cache=True, logits_to_keep=1).logits[:, -1]


def greedy_groups(order: list[int], fits: Callable[[list[int], int], bool]) -> list[list[int]]:
    """`order` cut into runs: each item joins the last group when `fits(group, item)`, else starts the next."""
    groups: list[list[int]] = []
    for i in order:
        if groups and fits(groups[-1], i):
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def prefill_groups(new_counts: list[int], waste: float = 0.25, max_rows: int | None = None) -> list[list[int]]:
    """Rows grouped so that padding each group to its longest row adds at most `waste` of its real tokens, at most
    `max_rows` a group (one padded prefill of 32 first turns of 19 to 112 new tokens computed 2.3x the tokens)."""
    tokens = [max(1, n) for n in new_counts]

    def fits(group: list[int], i: int) -> bool:  # rows come shortest first: row i is the group's longest
        room = max_rows is None or len(group) < max_rows
        return room and (len(group) + 1) * tokens[i] <= (1 + waste) * (sum(tokens[j] for j in group) + tokens[i])

    return greedy_groups(sorted(range(len(new_counts)), key=lambda i: new_counts[i]), fits)


def _prefill(model, input_ids, attention, past, layers) -> torch.Tensor:
    """Encode each row's new tokens into `layers` in groups of similar length (`prefill_groups`), a group's reused
    keys/values copied in only for its own forward pass; the last position's logits per row."""
    head = past.head if past is not None else 0
    batch, width = attention.shape
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    logits = None
    for group in prefill_groups(attention[:, head:].sum(1).tolist(), max_rows=-(-batch // PREFILL_GROUPS)):
        index = torch.tensor(group, device=attention.device)
        span = max(1, int(attention[index, head:].sum(1).max()))
        sub = [BufferLayer(head + span) for _ in layers]
        for number, layer in enumerate(sub if past is not None else []):
            layer.update(*past.rows(number, group))
        last = model(input_ids=input_ids[index, width - span:],
                     attention_mask=torch.cat([attention[index, :head], attention[index, width - span:]], dim=1),
                     position_ids=positions[index, width - span:], past_key_values=Cache(layers=sub), use_cache=True,
                     logits_to_keep=1).logits[:, -1]
        if logits is None:
            logits = last.new_empty((batch, last.shape[-1]))
        logits[index] = last
        for layer, part in zip(layers, sub):
            layer.place_rows(index, part, head, width, batch)
    return logits

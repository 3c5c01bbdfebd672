"""Packed training rows (TRL's padding_free): each conversation attended alone, the same outputs and gradients as one
pass per conversation (engine/attention.py)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from openmanus_lite.engine.attention import NAME, packed_bounds  # noqa: E402
from openmanus_lite.models import load_model  # noqa: E402
from openmanus_lite.train.presets import tiny_model_path  # noqa: E402

LENGTHS = (17, 40, 9)


def _bounds(positions):
    out = packed_bounds(torch.tensor([positions]))
    return None if out is None else out.tolist()


def test_bounds_from_position_ids_with_trailing_padding_as_one_sequence():
    assert _bounds([0, 1, 2, 0, 1, 0, 0, 0]) == [0, 3, 5, 8]  # two conversations, then three pads as one
    assert _bounds([0, 1, 2, 0, 1]) == [0, 3, 5]
    assert _bounds([0, 1, 2, 3]) is None  # one sequence: the ordinary causal path
    assert _bounds([0, 1, 2, 0, 0]) == [0, 3, 5]  # one sequence and its padding
    assert _bounds([3, 4, 0, 1]) is None  # not starting at 0: a continuation, left to the mask
    assert packed_bounds(torch.tensor([[0, 1, 0, 1], [0, 1, 0, 1]])) is None  # two rows are not a packed row
    assert packed_bounds(None) is None


def _conversations():
    g = torch.Generator().manual_seed(0)
    return [torch.randint(10, 200, (1, n), generator=g) for n in LENGTHS]


def _packed_pass(convs, pad: int = 0):
    ids = torch.cat(convs + [torch.zeros(1, pad, dtype=torch.long)], dim=1)
    positions = torch.cat([torch.arange(c.shape[1]) for c in convs] + [torch.zeros(pad, dtype=torch.long)])
    # no cache, as TRL's SFTTrainer passes: transformers reads packed rows from the position ids only without one
    return {"input_ids": ids, "position_ids": positions[None], "use_cache": False}


def _grads(model, passes):
    """Gradients of the summed losses of `passes` ((inputs, labels) pairs), each loss a sum over its labels."""
    model.zero_grad(set_to_none=True)
    for kwargs, labels in passes:
        (model(**kwargs, labels=labels).loss * int((labels[:, 1:] != -100).sum())).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.slow
@pytest.mark.parametrize("implementation", [NAME, "sdpa", "eager"])
def test_a_packed_row_trains_as_one_pass_per_conversation(monkeypatch, implementation):
    """The kit's attention per conversation; transformers' own through a block-diagonal mask from the position ids
    (what a model without grouped-query heads, or on a GPU, runs)."""
    from openmanus_lite.engine import attention

    calls = []
    per_sequence = attention._per_sequence_attention
    monkeypatch.setattr(attention, "_per_sequence_attention",
                        lambda *a: calls.append(a[3] if a[3] is None else a[3].tolist()) or per_sequence(*a))
    torch.manual_seed(0)
    model = load_model(tiny_model_path(), backend="hf", lora={"r": 4, "alpha": 8, "seed": 0})[0]
    assert model.config._attn_implementation == NAME
    model.config._attn_implementation = implementation
    convs = _conversations()
    packed = _packed_pass(convs, pad=5)
    with torch.no_grad():
        apart_logits = torch.cat([model(input_ids=c).logits for c in convs], dim=1)
        packed_logits = model(**packed).logits
    assert torch.allclose(packed_logits[:, :sum(LENGTHS)], apart_logits, atol=1e-5)
    # the kit's: each layer attends per conversation, the 5 pads as one more
    assert calls == ([[0, 17, 57, 66, 71]] * 2 if implementation == NAME else [])

    labels = packed["input_ids"].clone()
    labels[packed["position_ids"] == 0] = -100  # as TRL's collator: no label across a conversation's start or on pads
    apart = _grads(model, [({"input_ids": c}, c) for c in convs])
    together = _grads(model, [(packed, labels)])
    assert apart.keys() == together.keys() and any(g.abs().sum() > 0 for g in apart.values())
    assert all(torch.allclose(together[k], apart[k], atol=1e-5) for k in apart)


def test_a_padded_batch_keeps_its_mask_and_is_not_a_packed_row():
    """A padded batch (attention mask given) is not a packed row: its 2-D mask travels to the attention as KEY_MASK
    (training's block attention reads it), and no bounds are added; a cached call gets nothing."""
    from openmanus_lite.engine.attention import KEY_MASK, _mark_rows

    ids = torch.ones(1, 6, dtype=torch.long)
    positions = torch.tensor([[0, 1, 2, 0, 1, 2]])
    mask = torch.tensor([[0, 1, 1, 1, 1, 1]])
    args, kwargs = _mark_rows(None, (), {"input_ids": ids, "position_ids": positions, "attention_mask": mask})
    assert "cu_seq_lens_q" not in kwargs and kwargs[KEY_MASK].tolist() == [[False] + [True] * 5]
    assert _mark_rows(None, (), {"input_ids": ids, "attention_mask": mask, "past_key_values": object()}) is None
    args, kwargs = _mark_rows(None, (), {"input_ids": ids, "position_ids": positions})
    assert kwargs["cu_seq_lens_q"].tolist() == [0, 3, 6] and KEY_MASK not in kwargs


def test_a_sliding_window_model_gets_no_key_mask():
    """A window makes a padded batch's mask more than causal and padding: such models keep transformers' mask."""
    from types import SimpleNamespace

    from openmanus_lite.engine.attention import _mark_rows
    from openmanus_lite.engine.decoding import windowed_layers

    assert not windowed_layers(SimpleNamespace())  # llama: no window
    assert not windowed_layers(SimpleNamespace(sliding_window=4096, use_sliding_window=False))  # qwen2's default
    assert windowed_layers(SimpleNamespace(sliding_window=4096))  # mistral
    assert windowed_layers(SimpleNamespace(layer_types=["full_attention", "sliding_attention"]))
    mistral = SimpleNamespace(config=SimpleNamespace(sliding_window=4096))
    kwargs = {"input_ids": torch.ones(1, 3, dtype=torch.long), "attention_mask": torch.ones(1, 3)}
    assert _mark_rows(mistral, (), kwargs) is None


def _block_attention(q, k, v, keys=None):
    """The block attention itself (the kit routes only bf16 / fp16 to it; float32 here checks its arithmetic)."""
    from openmanus_lite.engine.attention import _BlockCausalAttention

    return _BlockCausalAttention.apply(q, k, v, q.shape[-1] ** -0.5, keys).transpose(1, 2)


@pytest.mark.parametrize("heads,kv_heads,length", [(9, 3, 300), (4, 4, 129), (6, 2, 5)])
def test_block_attention_matches_torch_kernel_forward_and_backward(monkeypatch, heads, kv_heads, length):
    """Training's block attention (causal, grouped heads served without copies, blocks over the query positions, one
    shorter than a block) gives torch's outputs and gradients, within float32 rounding."""
    import torch.nn.functional as F

    from openmanus_lite.engine import attention

    monkeypatch.setattr(attention, "BLOCK_ROWS", 64)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, n, length, 16, generator=g, requires_grad=True) for n in (heads, kv_heads, kv_heads))
    grad = torch.randn(2, length, heads, 16, generator=g)
    ours = _block_attention(q, k, v)
    ours_grads = torch.autograd.grad(ours, (q, k, v), grad)
    torch_out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=heads != kv_heads).transpose(1, 2)
    torch_grads = torch.autograd.grad(torch_out, (q, k, v), grad)
    assert torch.allclose(ours, torch_out, atol=1e-5)
    for mine, theirs in zip(ours_grads, torch_grads):
        assert torch.allclose(mine, theirs, atol=1e-4)


def test_block_attention_with_padding_matches_torch_on_the_tokens(monkeypatch):
    """A padded batch (left padding in one row, right in the other, as GRPO's prompt + completion rows): the tokens'
    outputs and every gradient equal torch's kernel with the causal-and-padding mask; padded queries stay finite."""
    import torch.nn.functional as F

    from openmanus_lite.engine import attention

    monkeypatch.setattr(attention, "BLOCK_ROWS", 8)
    length = 21
    keys = torch.ones(2, length, dtype=torch.bool)
    keys[0, :5] = False  # left padding
    keys[1, -7:] = False  # right padding
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, n, length, 16, generator=g, requires_grad=True) for n in (6, 2, 2))
    grad = torch.randn(2, length, 6, 16, generator=g) * keys[:, :, None, None]  # no loss on padded positions
    ours = _block_attention(q, k, v, keys)
    ours_grads = torch.autograd.grad(ours, (q, k, v), grad)
    mask = torch.ones(length, length, dtype=torch.bool).tril() & keys[:, None, None, :]
    mask = mask | ~keys[:, None, :, None]  # torch's kernel needs a key for every query: padded queries see all
    torch_out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True).transpose(1, 2)
    torch_grads = torch.autograd.grad(torch_out, (q, k, v), grad)
    assert torch.isfinite(ours).all()
    tokens = keys[:, :, None, None].expand_as(ours)
    assert torch.allclose(ours[tokens], torch_out[tokens], atol=1e-5)
    for mine, theirs in zip(ours_grads, torch_grads):
        assert torch.allclose(mine, theirs, atol=1e-4)


def test_block_attention_only_where_bf16_gradients_flow_on_the_cpu():
    from openmanus_lite.engine.attention import _block_attention_applies

    q = torch.zeros(1, 2, 3, 4, dtype=torch.bfloat16)
    assert not _block_attention_applies(q, q, q, 0.0)  # inference: torch's kernel
    w = q.clone().requires_grad_()
    assert _block_attention_applies(w, q, q, 0.0)
    assert not _block_attention_applies(w, q, q, 0.1)  # dropout: torch's kernel
    assert not _block_attention_applies(w.float(), q, q, 0.0)  # float32: torch's kernel (as fast, less memory)
    with torch.no_grad():
        assert not _block_attention_applies(w, q, q, 0.0)


@pytest.mark.slow
def test_bf16_training_passes_run_the_block_attention(monkeypatch):
    """The tiny model in bf16: a padded batch's training pass (left padding, as GRPO's rows) runs every layer's
    attention as `_BlockCausalAttention` and gives transformers' own sdpa loss and gradients within bf16 rounding."""
    from openmanus_lite.engine import attention

    calls = []
    block = attention._BlockCausalAttention.apply
    monkeypatch.setattr(attention._BlockCausalAttention, "apply",
                        lambda *a: calls.append(a[4] is not None) or block(*a))
    torch.manual_seed(0)
    model = load_model(tiny_model_path(), backend="hf", dtype=torch.bfloat16, lora={"r": 4, "alpha": 8, "seed": 0})[0]
    ids = torch.randint(10, 200, (2, 40), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, 40, dtype=torch.long)
    mask[0, :9] = 0  # left padding
    labels = ids.masked_fill(mask == 0, -100)
    labels[0, 9] = -100  # predicted from a padded position, whose output no attention defines (GRPO scores none such)

    def loss_and_grads(implementation):
        model.config._attn_implementation = implementation
        model.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        return float(loss), {n: p.grad.float() for n, p in model.named_parameters() if p.grad is not None}

    ours, ours_grads = loss_and_grads(NAME)
    assert calls == [True] * model.config.num_hidden_layers
    theirs, their_grads = loss_and_grads("sdpa")
    assert abs(ours - theirs) < 1e-2
    for name, grad in their_grads.items():
        assert (ours_grads[name] - grad).norm() <= 0.05 * grad.norm() + 1e-6, name

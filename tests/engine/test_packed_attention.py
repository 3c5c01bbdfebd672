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
    monkeypatch.setattr(attention, "_per_sequence_attention", lambda *a: calls.append(a[3].tolist()) or per_sequence(*a))
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


def test_a_mask_keeps_the_ordinary_path():
    """A padded batch (attention mask given) is not a packed row: the hook adds nothing."""
    from openmanus_lite.engine.attention import _mark_packed_rows

    ids = torch.ones(1, 6, dtype=torch.long)
    positions = torch.tensor([[0, 1, 2, 0, 1, 2]])
    assert _mark_packed_rows(None, (), {"input_ids": ids, "position_ids": positions,
                                        "attention_mask": torch.ones(1, 6)}) is None
    args, kwargs = _mark_packed_rows(None, (), {"input_ids": ids, "position_ids": positions})
    assert kwargs["cu_seq_lens_q"].tolist() == [0, 3, 6]

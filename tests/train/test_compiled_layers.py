"""Decoder layers compiled in place for CPU training: the same loss and gradients as eager, one graph for every layer
and length, and eager layers with a reason where there is no C++ compiler or no CPU (train/compiled_layers.py)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from openmanus_lite.models import load_model  # noqa: E402
from openmanus_lite.train import compiled_layers  # noqa: E402
from openmanus_lite.train.compiled_layers import compile_layers, compile_layers_for, repeated_layers  # noqa: E402
from openmanus_lite.train.presets import tiny_model_path  # noqa: E402
from openmanus_lite.train.sft import SFTRunConfig  # noqa: E402

pytestmark = pytest.mark.slow


needs_compiler = pytest.mark.skipif(compiled_layers.missing_cpp_compiler() is not None,
                                    reason="no C++ compiler for torch.compile's CPU code")


def _model():
    torch.manual_seed(0)
    return load_model(tiny_model_path(), backend="auto", lora={"r": 4, "alpha": 8, "seed": 0})[0]


def _losses_and_grads(model, lengths=(17, 40)):
    """Loss of one forward/backward pass per length (gradients summed over them) on fixed random tokens."""
    g = torch.Generator().manual_seed(0)
    model.zero_grad(set_to_none=True)
    losses = []
    for n in lengths:
        ids = torch.randint(10, 200, (1, n), generator=g)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        losses.append(float(loss.detach()))
    return losses, {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def _compiled(model) -> list[bool]:
    return [getattr(layer, "_compiled_call_impl", None) is not None for layer in repeated_layers(model)]


@needs_compiler
def test_compiled_layers_train_as_eager_ones_with_one_graph(capsys):
    from torch._dynamo.utils import counters

    model = _model()
    eager_losses, eager_grads = _losses_and_grads(model)
    torch._dynamo.reset()
    counters.clear()
    assert compile_layers(model) == len(repeated_layers(model)) == 2
    assert "2 decoder layers compiled" in capsys.readouterr().out
    losses, grads = _losses_and_grads(model)
    assert losses == pytest.approx(eager_losses, abs=1e-5)
    assert grads.keys() == eager_grads.keys() and any(g.abs().sum() > 0 for g in grads.values())
    assert all(torch.allclose(grads[k], eager_grads[k], atol=1e-5) for k in grads)
    # one graph for the first layer (its input, the frozen embedding's output, needs no gradient), one for the others
    graphs = counters["stats"]["unique_graphs"]
    assert graphs == 2 and not counters["graph_break"]
    _losses_and_grads(model, (23, 64, 101))
    assert counters["stats"]["unique_graphs"] == graphs  # new lengths: the same dynamic-shape graphs
    assert compile_layers(model) == 2 and all(_compiled(model))  # idempotent


def test_layers_stay_eager_with_a_reason_without_a_compiler(monkeypatch, capsys):
    from torch._inductor import cpp_builder

    def missing():
        raise RuntimeError("no working C++ compiler found")

    monkeypatch.setattr(cpp_builder, "get_cpp_compiler", missing)
    model = _model()
    assert compile_layers(model) == 0
    assert "no C++ compiler" in capsys.readouterr().out
    assert not any(_compiled(model))


@needs_compiler
def test_layers_stay_eager_off_the_cpu(capsys):
    with torch.device("meta"):
        model = torch.nn.Sequential(torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(3)]))
    assert len(repeated_layers(model)) == 3
    assert compile_layers(model) == 0
    assert "not on the CPU" in capsys.readouterr().out
    assert compiled_layers.cannot_compile(torch.nn.Linear(2, 2)) == "the model has no repeated layers to compile"


@needs_compiler
def test_the_config_switches_it(tmp_path):
    model = _model()
    assert compile_layers_for(model, SFTRunConfig(output_dir=str(tmp_path), report_to=[])) == 0
    assert not any(_compiled(model))
    assert compile_layers_for(model, SFTRunConfig(output_dir=str(tmp_path), report_to=[], compile_layers=True)) == 2
    assert all(_compiled(model))


@needs_compiler
def test_compiled_layers_train_packed_rows_as_one_pass_per_conversation():
    """A packed row (padding_free) in compiled layers: the per-conversation attention runs eagerly between two
    compiled graphs, with the gradients of one pass per conversation."""
    g = torch.Generator().manual_seed(0)
    convs = [torch.randint(10, 200, (1, n), generator=g) for n in (17, 40)]
    ids = torch.cat(convs, dim=1)
    positions = torch.cat([torch.arange(c.shape[1]) for c in convs])[None]
    labels = ids.clone()
    labels[positions == 0] = -100

    def grads(model, passes):
        model.zero_grad(set_to_none=True)
        for kwargs, lab in passes:
            (model(**kwargs, labels=lab, use_cache=False).loss * int((lab[:, 1:] != -100).sum())).backward()
        return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}

    model = _model()
    apart = grads(model, [({"input_ids": c}, c) for c in convs])
    torch._dynamo.reset()
    compile_layers(model)
    packed = grads(model, [({"input_ids": ids, "position_ids": positions}, labels)])
    assert packed.keys() == apart.keys()
    assert all(torch.allclose(packed[k], apart[k], atol=1e-5) for k in apart)

"""LoRA adapters over 16-bit weights save their 16-bit input, not a float32 copy: same loss and gradients, less kept
for the backward pass (train/lean_lora.py, issue #41)."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from datasets import Dataset  # noqa: E402
from transformers import HfArgumentParser  # noqa: E402

from openmanus_lite.models import load_model  # noqa: E402
from openmanus_lite.train.lean_lora import UpcastInputLinear, keep_lora_inputs_16bit  # noqa: E402
from openmanus_lite.train.presets import tiny_model_path  # noqa: E402
from openmanus_lite.train.sft import SFTRunConfig, build_trainer  # noqa: E402

pytestmark = pytest.mark.slow


def _model(dtype):
    torch.manual_seed(0)
    return load_model(tiny_model_path(), backend="auto", dtype=dtype, lora={"r": 4, "alpha": 8, "seed": 0})


def _step(lean: bool, tmp_path) -> tuple[float, dict[str, torch.Tensor], int, Any]:
    """(loss, LoRA gradients, bytes saved for backward, model) of one SFT step on a padded, partly masked batch."""
    model, tok = _model(torch.bfloat16)
    g = torch.Generator().manual_seed(0)
    rows = [{"input_ids": torch.randint(10, len(tok) - 10, (n,), generator=g).tolist(),
             "assistant_masks": [0] * (n // 3) + [1] * (n - n // 3)} for n in (96, 61, 80)]
    cfg = SFTRunConfig(output_dir=str(tmp_path / f"out{lean}"), max_steps=1, per_device_train_batch_size=3,
                       report_to=[], save_strategy="no", disable_tqdm=True, resume="no", bf16=False,
                       lean_lora_inputs=lean)
    trainer = build_trainer(model, tok, Dataset.from_list(rows), cfg)
    batch = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
    trainer.model.train()
    saved: dict[int, int] = {}

    def pack(t):
        saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = trainer.compute_loss(trainer.model, dict(batch))
    loss.backward()
    grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    return float(loss.detach()), grads, sum(saved.values()), trainer.model


def test_same_loss_and_gradients_with_less_saved(tmp_path):
    loss, grads, saved, peft_model = _step(False, tmp_path)
    lean_loss, lean_grads, lean_saved, lean_model = _step(True, tmp_path)
    assert not any(isinstance(m, UpcastInputLinear) for m in peft_model.modules())
    assert any(isinstance(m, UpcastInputLinear) for m in lean_model.modules())
    assert lean_loss == loss
    assert grads.keys() == lean_grads.keys() and any(g.abs().sum() > 0 for g in grads.values())
    for name, grad in grads.items():
        torch.testing.assert_close(lean_grads[name], grad, rtol=1e-6, atol=0, msg=name)
    assert lean_saved < 0.8 * saved, (lean_saved, saved)


def test_applies_only_to_float32_adapters_over_16bit_weights_without_autocast():
    model, _ = _model(torch.bfloat16)
    adapters = sum(1 for n, _ in model.named_modules() if n.endswith("lora_A.default"))
    assert adapters > 0
    assert keep_lora_inputs_16bit(model, autocast=True) == 0  # the trainer's bf16 / fp16 autocast
    assert keep_lora_inputs_16bit(model, autocast=False) == adapters
    assert keep_lora_inputs_16bit(model, autocast=False) == 0  # already switched
    full, _ = _model(torch.float32)  # a float32 base: the input is float32 already
    assert keep_lora_inputs_16bit(full, autocast=False) == 0


def test_config_field_round_trips(tmp_path):
    assert SFTRunConfig(output_dir=str(tmp_path)).lean_lora_inputs is True
    (cfg,) = HfArgumentParser(SFTRunConfig).parse_args_into_dataclasses(
        ["--output_dir", str(tmp_path), "--lean_lora_inputs", "false"])
    assert cfg.lean_lora_inputs is False


def test_grpo_switches_the_adapters_too(tmp_path):
    """GRPO applies the config's lean_lora_inputs as SFT does (one single-turn step here; DPO and the reward models
    call the same helper in dpo.train_and_release): default on, and off gives PEFT's own path."""
    from openmanus_lite.train.grpo import GRPORunConfig, build_single_turn_dataset, run_grpo, value_task_rows

    def trained(lean: bool):
        model, tok = _model(torch.bfloat16)
        cfg = GRPORunConfig(output_dir=str(tmp_path / f"grpo{lean}"), max_steps=1, num_generations=2,
                            per_device_train_batch_size=2, max_completion_length=8, save_strategy="no",
                            disable_tqdm=True, report_to=[], bf16=False, lean_lora_inputs=lean)
        run_grpo(model, tok, build_single_turn_dataset(value_task_rows(("db",), n=2, seed=0)), cfg)
        return model

    assert any(isinstance(m, UpcastInputLinear) for m in trained(True).modules())
    assert not any(isinstance(m, UpcastInputLinear) for m in trained(False).modules())


def test_bf16_passes_on_a_cpu_are_padded_to_few_shapes(tmp_path):
    """oneDNN builds a kernel per matrix shape: SFT in bf16 on a CPU pads each pass to a multiple of CPU_BF16_PAD
    tokens (masked: the same loss); float32, or a multiple the user set, stays as it is."""
    from openmanus_lite.train.sft import CPU_BF16_PAD

    def first_batch(dtype, **settings):
        model, tok = _model(dtype)
        rows = [{"input_ids": list(range(10, 10 + n)), "assistant_masks": [0] * 20 + [1] * (n - 20)} for n in (61, 80)]
        cfg = SFTRunConfig(output_dir=str(tmp_path / "out"), max_steps=1, per_device_train_batch_size=2, report_to=[],
                           save_strategy="no", disable_tqdm=True, resume="no", bf16=False, **settings)
        trainer = build_trainer(model, tok, Dataset.from_list(rows), cfg)
        batch = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
        with torch.no_grad():
            return cfg.pad_to_multiple_of, batch["input_ids"].shape[1], float(trainer.compute_loss(trainer.model, batch))

    multiple, width, loss = first_batch(torch.bfloat16)
    assert (multiple, width) == (CPU_BF16_PAD, 128)
    assert first_batch(torch.bfloat16, pad_to_multiple_of=1)[:2] == (1, 80)
    assert loss == pytest.approx(first_batch(torch.bfloat16, pad_to_multiple_of=1)[2], rel=1e-3)
    assert first_batch(torch.float32)[:2] == (None, 80)


def test_the_loss_pads_its_rows_on_a_cpu_in_bf16(tmp_path, monkeypatch):
    """A pass's trained tokens are the LM head's rows: on a CPU in bf16 they reach the chunked cross-entropy padded to
    a multiple of CPU_BF16_PAD (one oneDNN kernel per count otherwise), with the same loss and gradients."""
    from unsloth_zoo.cpu import ops

    from openmanus_lite.train.sft import CPU_BF16_PAD, _PaddedLossRows

    model, tok = _model(torch.bfloat16)
    rows = [{"input_ids": list(range(10, 90)), "assistant_masks": [0] * 20 + [1] * 60}]
    cfg = SFTRunConfig(output_dir=str(tmp_path / "out"), max_steps=1, per_device_train_batch_size=1, report_to=[],
                       save_strategy="no", disable_tqdm=True, resume="no", bf16=False)
    trainer = build_trainer(model, tok, Dataset.from_list(rows), cfg)
    assert ops._ChunkedLinearCrossEntropy is _PaddedLossRows
    cross_entropy, rows_seen = _PaddedLossRows.inner, []

    class Spy:
        @staticmethod
        def apply(hidden, *args):
            rows_seen.append(hidden.shape[0])
            return cross_entropy.apply(hidden, *args)

    monkeypatch.setattr(_PaddedLossRows, "inner", Spy)
    batch = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
    trainer.compute_loss(trainer.model, batch)
    assert rows_seen == [CPU_BF16_PAD]  # the 59 trained tokens, padded

    g = torch.Generator().manual_seed(0)
    weight, labels = torch.randn(50, 16, generator=g).bfloat16(), torch.randint(0, 50, (70,), generator=g)

    def loss_and_gradient(loss, dtype=torch.bfloat16):
        hidden = torch.randn(70, 16, generator=torch.Generator().manual_seed(1)).to(dtype).requires_grad_()
        value = loss.apply(hidden, weight.to(dtype), labels, 70.0, 32, -100)
        value.backward()
        return value.detach(), hidden.grad

    padded, plain = loss_and_gradient(_PaddedLossRows), loss_and_gradient(Spy)
    assert rows_seen[1:] == [2 * CPU_BF16_PAD, 70]
    assert torch.equal(padded[0], plain[0]) and torch.equal(padded[1], plain[1])
    loss_and_gradient(_PaddedLossRows, torch.float32)
    assert rows_seen[-1] == 70  # float32: as it came

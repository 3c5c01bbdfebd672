"""Loading, merging and memory on a GPU machine, simulated on the CPU: which loader runs, where the
weights go, merging onto a pre-quantized 4-bit base, reward-model precision, and freeing a stage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from openmanus_lite.models import LoraSpec, build_tiny_model, load_model  # noqa: E402
from openmanus_lite.train.grpo import import_trl, load_for_grpo  # noqa: E402
from openmanus_lite.train.presets import get_preset  # noqa: E402
from openmanus_lite.train.sft import _finish_tokenizer, load_trained, save_adapter, save_merged  # noqa: E402

import_trl()


@pytest.fixture(scope="module")
def adapter(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu_loading")
    base = build_tiny_model(root / "base", seed=0)
    model, tok = load_model(base, backend="hf", lora=LoraSpec(r=4, alpha=8))
    return save_adapter(model, tok, root / "adapter")


def _simulate_gpu(monkeypatch, fake_gpu, card="t4"):
    fake_gpu(card)  # tests/conftest.py: torch.cuda reports that card
    import peft.peft_model
    import peft.utils.save_and_load

    for module in (peft.peft_model, peft.utils.save_and_load):  # PEFT would load adapter weights onto "cuda"
        monkeypatch.setattr(module, "infer_device", lambda: "cpu")


class FakeFastLanguageModel:
    """Records from_pretrained calls; loads the adapter folder's base + adapter on the CPU instead."""

    calls: list[dict] = []

    @classmethod
    def from_pretrained(cls, model_name, **kwargs):
        from peft import PeftModel
        from transformers import AutoModelForCausalLM

        cls.calls.append({"model_name": model_name, **kwargs})
        config = Path(model_name) / "adapter_config.json"
        if not config.is_file():
            return AutoModelForCausalLM.from_pretrained(model_name, dtype=torch.float32), None
        base = json.loads(config.read_text())["base_model_name_or_path"]
        model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
        return PeftModel.from_pretrained(model, model_name, is_trainable=True), None


def test_grpo_loads_an_adapter_the_unsloth_way_on_a_gpu_and_with_peft_on_cpu(adapter, monkeypatch, fake_gpu):
    import unsloth

    preset = get_preset("t4").replace(load_in_4bit=False, backend="unsloth")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    model, _ = load_for_grpo(str(adapter), preset.replace(dtype="float32"))
    assert type(model).__name__ == "PeftModelForCausalLM"  # CPU: base through load_model, adapter through PEFT
    assert any(p.requires_grad for n, p in model.named_parameters() if "lora_" in n)

    FakeFastLanguageModel.calls = []
    monkeypatch.setattr(unsloth, "FastLanguageModel", FakeFastLanguageModel)
    _simulate_gpu(monkeypatch, fake_gpu)
    model, tok = load_for_grpo(str(adapter), preset)
    (call,) = FakeFastLanguageModel.calls
    assert call["model_name"] == str(adapter)  # Unsloth recognises the adapter folder and loads its base
    assert call["use_gradient_checkpointing"] == preset.lora.gradient_checkpointing == "unsloth"
    assert call["max_seq_length"] == preset.max_seq_length and call["load_in_4bit"] is False
    assert model.openmanus_backend == "unsloth" and tok.chat_template


def test_hf_loads_go_to_the_gpu(adapter, monkeypatch, fake_gpu, tmp_path):
    from transformers import AutoModelForCausalLM

    original = AutoModelForCausalLM.from_pretrained
    seen = []

    def fake(name, **kwargs):
        seen.append(kwargs.get("device_map"))
        kwargs.pop("device_map", None)
        return original(name, **kwargs)

    merged = save_merged(load_trained(adapter)[0], load_trained(adapter)[1], tmp_path / "merged")
    _simulate_gpu(monkeypatch, fake_gpu)
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", fake)
    for path in (adapter, merged):
        model, _ = load_trained(path)
        assert model.openmanus_backend == "hf"
    assert seen == [{"": 0}, {"": 0}]


def test_peft_merge_dequantizes_a_prequantized_4bit_base(tmp_path):
    base = build_tiny_model(tmp_path / "base", seed=0)
    quantized, tok = load_model(base, backend="hf", load_in_4bit=True)
    prequant = tmp_path / "base-bnb-4bit"
    quantized.save_pretrained(prequant)
    _finish_tokenizer(tok, prequant)
    assert json.loads((prequant / "config.json").read_text())["quantization_config"]["load_in_4bit"]

    model, tok = load_model(prequant, backend="hf", lora=LoraSpec(r=4, alpha=8))
    torch.manual_seed(0)
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.05)  # a trained adapter: the merge must change the weights
    probe = torch.tensor([tok("Think: count the rows.", add_special_tokens=False)["input_ids"]])
    model.eval()
    with torch.no_grad():
        ref = model(input_ids=probe).logits

    out = save_merged(model, tok, tmp_path / "merged", prefer_unsloth=False)
    assert "quantization_config" not in json.loads((out / "config.json").read_text())
    reloaded, _ = load_trained(out)
    assert not any("4bit" in type(m).__name__ for m in reloaded.modules())
    with torch.no_grad():
        got = reloaded(input_ids=probe).logits
    assert torch.allclose(got, ref, atol=2e-2), (got - ref).abs().max()


def test_free_memory_collects_what_a_deleted_stage_left_in_cycles():
    import weakref

    from openmanus_lite.models import free_memory

    class Stage:
        pass

    stage = Stage()
    stage.self_ref = stage  # trainers hold cycles like this (callbacks, accelerator)
    stage.weights = torch.zeros(1024)
    alive = weakref.ref(stage)
    del stage
    assert alive() is not None  # reference counting alone does not free a cycle
    assert free_memory() == 0  # no GPU here: nothing allocated on one
    assert alive() is None


def test_reward_heads_load_frozen_weights_in_training_precision(monkeypatch, fake_gpu, tmp_path):
    from types import SimpleNamespace as NS

    from transformers import AutoModelForSequenceClassification

    from openmanus_lite.preference.dpo import config_dtype
    from openmanus_lite.preference.reward_model import OutcomeRewardModel, _load_head, load_reward_model

    assert config_dtype(NS(bf16=True, fp16=False)) == torch.bfloat16
    assert config_dtype(NS(bf16=None, fp16=True)) == torch.float16
    assert config_dtype(NS(bf16=False, fp16=False)) == torch.float32
    base = str(build_tiny_model(tmp_path / "base", seed=0))
    model, tok, path = _load_head(base, "orm", LoraSpec(r=4, alpha=8), dtype=torch.bfloat16)
    trained = {n: p.dtype for n, p in model.named_parameters() if p.requires_grad}
    frozen = {p.dtype for p in model.parameters() if not p.requires_grad}
    assert frozen == {torch.bfloat16}  # half the memory of float32
    assert any("score" in n for n in trained) and set(trained.values()) == {torch.float32}  # fp16 scaler needs it
    full, _, _ = _load_head(base, "orm", None, dtype=torch.bfloat16)
    assert {p.dtype for p in full.parameters()} == {torch.float32}  # every weight trains: float32 masters
    folder = OutcomeRewardModel(model, tok, base=path).save(tmp_path / "orm")
    assert json.loads((folder / "openmanus_rm.json").read_text())["dtype"] == "bfloat16"

    original = AutoModelForSequenceClassification.from_pretrained
    seen = []

    def fake(name, **kwargs):
        seen.append((kwargs.get("dtype"), kwargs.pop("device_map", None)))
        return original(name, **kwargs)

    monkeypatch.setattr(AutoModelForSequenceClassification, "from_pretrained", fake)
    load_reward_model(folder)  # CPU: float32
    _simulate_gpu(monkeypatch, fake_gpu, "a100")
    load_reward_model(folder)  # GPU: the training precision, on the GPU
    assert seen == [(torch.float32, None), (torch.bfloat16, {"": 0})]

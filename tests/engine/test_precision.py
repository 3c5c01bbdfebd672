"""Precision on simulated GPUs (the `fake_gpu` fixture in conftest.py): a T4 (7.5, bf16 only emulated),
an 8 GB Ampere card (8.6) and an A100 (8.0), and a CPU.

Trainer configs are checked on the settings the kit's configs hand to TRL's own config checks (recorded by
replacing TRL's `__post_init__`): in this CPU process Unsloth has patched those classes to force CPU settings, and
stock TRL accepts bf16 on a T4 (transformers asks `is_bf16_supported()`, which counts emulation). What
refuses it is Unsloth's GPU trainer (unsloth/models/rl.py: "Model is in float16 precision but you want
to use bfloat16"), so the kit's own choice is what has to be right.
"""

from __future__ import annotations

import pytest
import torch

from openmanus_lite import models
from openmanus_lite.engine import precision
from openmanus_lite.engine.precision import resolve_precision, trainer_precision
from openmanus_lite.train import presets
from openmanus_lite.train.configs import DPORunConfig, GRPORunConfig, RewardRunConfig, SFTRunConfig
from openmanus_lite.train.presets import PRESETS, get_preset

EXPECTED = {"t4": torch.float16, "rtx3070": torch.bfloat16, "a100": torch.bfloat16}


class Recorded(Exception):
    """Raised by a recorder to stop a run right after the call under test."""


def recorder(calls: list, stop: bool = False):
    """A stand-in for a config class or loader: records its keyword arguments (and stops the run if `stop`)."""

    def record(*args, **kwargs):
        calls.append(kwargs)
        if stop:
            raise Recorded
        return kwargs

    return record


def record_trl(monkeypatch, name: str, stop: bool = False) -> list:
    """The settings each kit config of TRL's class `name` reaches TRL's own `__post_init__` with."""
    import trl

    calls: list = []
    record = recorder(calls, stop)
    monkeypatch.setattr(getattr(trl, name), "__post_init__", lambda self: record(**vars(self)))
    return calls


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    return models.build_tiny_model(tmp_path_factory.mktemp("tiny_precision"), seed=0)


PAIR = {"prompt": [{"role": "user", "content": "Count the rows."}],
        "chosen": [{"role": "assistant", "content": "Act: answer(3)"}],
        "rejected": [{"role": "assistant", "content": "Act: answer(4)"}]}


def amp_dtype(kwargs) -> torch.dtype:
    assert not (kwargs["bf16"] and kwargs["fp16"])
    return torch.bfloat16 if kwargs["bf16"] else torch.float16 if kwargs["fp16"] else torch.float32


# --------------------------------------------------------------------------- the decision


@pytest.mark.parametrize("card", sorted(EXPECTED))
def test_auto_takes_bf16_only_where_the_gpu_has_it_natively(fake_gpu, card):
    fake_gpu(card)
    p = resolve_precision()
    assert (p.dtype, p.device) == (EXPECTED[card], "cuda")
    assert (p.bf16, p.fp16) == (EXPECTED[card] == torch.bfloat16, EXPECTED[card] == torch.float16)
    assert p.trainer_kwargs()["use_cpu"] is False
    assert torch.cuda.is_bf16_supported()  # what the old check asked: True on every card, the T4 included


def test_bf16_asked_for_on_a_t4_is_refused_by_name(fake_gpu):
    fake_gpu("t4")
    for ask in (lambda: resolve_precision("bfloat16"), lambda: resolve_precision(torch.bfloat16),
                lambda: trainer_precision(bf16=True)):
        with pytest.raises(ValueError, match=r"Tesla T4, compute capability 7\.5\) only emulates it"):
            ask()
    assert resolve_precision("float32").dtype == torch.float32  # float32 on a GPU stays allowed


def test_trainer_flags_rule_out_what_is_set_false(fake_gpu):
    fake_gpu("a100")
    assert trainer_precision(bf16=False).dtype == torch.float16
    assert trainer_precision(bf16=False, fp16=False).dtype == torch.float32
    fake_gpu("t4")
    assert trainer_precision(fp16=False).dtype == torch.float32
    assert trainer_precision(fp16=True).dtype == torch.float16
    with pytest.raises(ValueError, match="both True"):
        trainer_precision(bf16=True, fp16=True)


@pytest.mark.parametrize("native", [True, False])
def test_cpu_keeps_float32_unless_asked(monkeypatch, native):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: native)
    auto = resolve_precision()
    assert (auto.dtype, auto.bf16, auto.fp16, auto.device) == (torch.float32, False, False, "cpu")
    assert resolve_precision(cpu_bf16=True).dtype == (torch.bfloat16 if native else torch.float32)
    assert resolve_precision("auto", cpu_bf16=True).bf16 is False  # auto: the CPU trains in the weights' dtype
    with pytest.raises(ValueError, match="float16 was asked for on a CPU"):
        resolve_precision("fp16")
    with pytest.raises(ValueError, match="unknown dtype 'int8'"):
        resolve_precision("int8")
    if not native:
        with pytest.raises(ValueError, match="no native bfloat16"):
            resolve_precision("bfloat16", strict=True)


@pytest.mark.parametrize("machine, avx512_bf16, amx, onednn, native", [
    ("x86_64", True, False, True, True),    # AMD EPYC (Zen 4), Intel Cooper Lake
    ("x86_64", False, True, True, True),    # Intel Sapphire Rapids (AMX)
    ("x86_64", False, False, True, False),  # Intel Ice Lake / Tiger Lake: AVX512, oneDNN emulates bf16 (4.8x slower)
    ("x86_64", False, False, False, False),  # AVX2 only
    ("aarch64", False, False, True, True),  # elsewhere oneDNN's answer
    ("aarch64", False, False, False, False),
])
def test_native_cpu_bf16_is_the_cpu_s_own_instructions(monkeypatch, machine, avx512_bf16, amx, onednn, native):
    import platform

    monkeypatch.setattr(platform, "machine", lambda: machine)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: onednn, raising=False)
    assert precision.cpu_has_native_bf16() is native


@pytest.mark.parametrize("native", [True, False])
def test_preset_with_dtype_on_a_cpu(monkeypatch, native):
    from openmanus_lite.train.presets import get_preset

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: native)
    cpu = get_preset("cpu")
    assert cpu.with_dtype(None) is cpu
    assert cpu.with_dtype("auto").dtype == ("bfloat16" if native else "float32")
    assert cpu.with_dtype("fp32").dtype == "float32" and cpu.dtype == "float32"  # a copy; the preset unchanged
    if native:
        assert cpu.with_dtype("bf16").dtype == "bfloat16"
    else:  # emulated bf16 would train ~28x slower: refused, not warned
        with pytest.raises(ValueError, match="no native bfloat16"):
            cpu.with_dtype("bfloat16")


# --------------------------------------------------------------------------- each user of it, on a T4


def test_sft_config_on_a_t4_is_fp16(fake_gpu, monkeypatch):
    fake_gpu("t4")
    calls = record_trl(monkeypatch, "SFTConfig")
    SFTRunConfig()
    assert (calls[0]["bf16"], calls[0]["fp16"], calls[0]["use_cpu"]) == (False, True, False)
    with pytest.raises(ValueError, match="only emulates"):
        SFTRunConfig(bf16=True)


def test_grpo_config_on_a_t4_is_fp16(fake_gpu, monkeypatch):
    fake_gpu("t4")
    calls = record_trl(monkeypatch, "GRPOConfig")
    GRPORunConfig(use_vllm=False)
    assert (calls[0]["bf16"], calls[0]["fp16"], calls[0]["use_cpu"]) == (False, True, False)
    GRPORunConfig(use_vllm=False, bf16=False)  # False: no mixed precision, as before
    assert (calls[1]["bf16"], calls[1]["fp16"]) == (False, False)


def test_dpo_config_on_a_t4_is_fp16(fake_gpu, monkeypatch):
    fake_gpu("t4")
    calls = record_trl(monkeypatch, "DPOConfig")
    DPORunConfig(max_length=128)
    assert (calls[0]["bf16"], calls[0]["fp16"], calls[0]["use_cpu"]) == (False, True, False)


def test_reward_model_configs_on_a_t4_are_fp16(fake_gpu, monkeypatch):
    fake_gpu("t4")
    calls = record_trl(monkeypatch, "RewardConfig")
    RewardRunConfig()  # the ORM's RewardConfig, and the PRM's TrainingArguments
    assert (calls[0]["bf16"], calls[0]["fp16"], calls[0]["use_cpu"]) == (False, True, False)


def test_hf_backend_4bit_computes_in_fp16_on_a_t4(fake_gpu, monkeypatch, tiny_path):
    import transformers

    fake_gpu("t4")
    calls: list = []
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", recorder(calls, stop=True))
    with pytest.raises(Recorded):
        models.load_model(tiny_path, backend="hf", load_in_4bit=True)
    assert calls[0]["dtype"] == torch.float16
    assert calls[0]["quantization_config"].bnb_4bit_compute_dtype == torch.float16


@pytest.mark.parametrize("card", sorted(EXPECTED))
def test_unsloth_backend_gets_the_device_dtype(fake_gpu, monkeypatch, tiny_path, card):
    import unsloth

    fake_gpu(card)
    calls: list = []
    monkeypatch.setattr(unsloth.FastLanguageModel, "from_pretrained", recorder(calls, stop=True))
    with pytest.raises(Recorded):
        models.load_model(tiny_path, backend="unsloth", load_in_4bit=True)
    assert calls[0]["dtype"] == EXPECTED[card]


def test_peft_merge_on_a_t4_saves_float16(fake_gpu, monkeypatch, tmp_path, tiny_path):
    import peft.peft_model
    from safetensors import safe_open

    from openmanus_lite.train.sft import save_merged

    model, tok = models.load_model(tiny_path, backend="hf", lora=models.LoraSpec(r=4, alpha=8))
    fake_gpu("t4")
    monkeypatch.setattr(peft.peft_model, "infer_device", lambda: "cpu")  # no real GPU to put the adapter on
    out = save_merged(model, tok, tmp_path / "merged", prefer_unsloth=False)
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        dtypes = {f.get_slice(k).get_dtype() for k in f.keys()}
    assert dtypes == {"F16"}


# --------------------------------------------------------------------------- every preset on every card

PRESET_NUMBERS = {
    # name: (load_in_4bit, max_seq_length, sft batch x accumulation, grpo per-device batch, generations,
    #        single-turn completion tokens, multi-turn episode tokens, eval batch, new tokens per turn)
    "t4": (True, 2048, (4, 4), 8, 8, 512, 1536, 64, 128),
    "gpu8": (True, 1536, (2, 8), 4, 4, 384, 1024, 32, 128),
    "cpu": (False, 1024, (2, 2), 1, 4, 48, 640, 32, 96),
    "cpu_debug": (False, 512, (4, 1), 4, 2, 16, 96, 16, 32),
}


def test_the_numbers_table_covers_every_preset():
    assert set(PRESET_NUMBERS) == set(PRESETS)


@pytest.mark.parametrize("card", sorted(EXPECTED))
@pytest.mark.parametrize("name", sorted(PRESET_NUMBERS))
def test_what_each_preset_builds_on_each_card(fake_gpu, monkeypatch, card, name):
    """Load arguments, trainer precision and sizes; the loaded dtype and the trainers' mixed precision agree
    (the condition Unsloth's GPU trainers check), and every budget fits the sequence length."""
    fake_gpu(card)
    preset = get_preset(name)
    loads: list = []

    def load_unsloth(*args):
        loads.append(args)
        raise Recorded

    # names are passed through: which checkpoint loads is not what this test is about
    monkeypatch.setattr(presets, "tiny_model_path", lambda: "tiny")
    monkeypatch.setattr(models, "resolve_model_name", str)
    monkeypatch.setattr(models, "_check_reachable", lambda name: None)
    monkeypatch.setattr(models, "unsloth_available", lambda: True)
    monkeypatch.setattr(models, "_load_unsloth", load_unsloth)
    with pytest.raises(Recorded):
        preset.load()
    _, load_in_4bit, max_seq_length, lora, dtype, full = loads[0]
    four_bit, seq = PRESET_NUMBERS[name][:2]
    assert (load_in_4bit, max_seq_length, lora, full) == (four_bit, seq, preset.lora, preset.lora is None)
    assert dtype == (torch.float32 if preset.dtype == "float32" else EXPECTED[card])
    sft_calls = record_trl(monkeypatch, "SFTConfig")
    grpo_calls = record_trl(monkeypatch, "GRPOConfig")
    rm_calls = record_trl(monkeypatch, "RewardConfig")
    preset.sft_config()
    preset.grpo_config(use_vllm=False)
    preset.grpo_config(use_vllm=False, mode="multi")
    preset.reward_config()
    sft, single, multi, rm = sft_calls[0], grpo_calls[0], grpo_calls[1], rm_calls[0]
    for kwargs in (sft, single, rm):
        assert amp_dtype(kwargs) == EXPECTED[card] and kwargs["use_cpu"] is False
    if preset.dtype is None:  # the model is loaded in the dtype the trainers autocast to
        assert dtype == amp_dtype(sft)
    _, seq, (batch, accum), g_batch, gens, completion, episode, eval_batch, new_tokens = PRESET_NUMBERS[name]
    assert (sft["per_device_train_batch_size"], sft["gradient_accumulation_steps"]) == (batch, accum)
    assert sft["max_length"] <= seq
    assert (single["per_device_train_batch_size"], single["num_generations"]) == (g_batch, gens)
    assert (single["max_completion_length"], multi["max_completion_length"]) == (completion, episode)
    assert episode <= seq and (g_batch * single["gradient_accumulation_steps"]) % gens == 0
    assert (preset.eval_batch_size, preset.max_new_tokens) == (eval_batch, new_tokens)


def test_a_bf16_preset_on_a_t4_is_refused_before_loading(fake_gpu, monkeypatch):
    fake_gpu("t4")
    monkeypatch.setattr(models, "resolve_model_name", str)
    monkeypatch.setattr(models, "_check_reachable", lambda name: None)
    with pytest.raises(ValueError, match="only emulates"):
        get_preset("gpu8").replace(dtype="bfloat16").load()


@pytest.mark.parametrize("card", sorted(EXPECTED))
@pytest.mark.parametrize("name", ["t4", "gpu8"])
def test_dpo_and_reward_model_settings_of_each_gpu_preset(fake_gpu, monkeypatch, tmp_path, tiny_path, card, name):
    """What the DPO and reward-model configs hand to TRL, and run_dpo to the loader, under a GPU preset's `dpo` / `reward_model`."""
    from openmanus_lite.preference.dpo import run_dpo

    preset = get_preset(name)
    fake_gpu(card)
    loads: list = []

    def load_unsloth(*args):
        loads.append(args)
        raise Recorded

    monkeypatch.setattr(models, "unsloth_available", lambda: True)
    monkeypatch.setattr(models, "_load_unsloth", load_unsloth)
    dpo_calls = record_trl(monkeypatch, "DPOConfig")
    rm_calls = record_trl(monkeypatch, "RewardConfig")
    dpo_cfg = preset.dpo_config()
    preset.reward_config()
    with pytest.raises(Recorded):
        run_dpo(str(tiny_path), [PAIR], dpo_cfg, output_dir=tmp_path / "dpo")
    _, load_in_4bit, max_seq_length, lora, dtype, _ = loads[0]
    assert (load_in_4bit, max_seq_length, dtype) == (True, preset.dpo["max_length"], EXPECTED[card])
    assert lora.gradient_checkpointing is True
    for kwargs, settings in ((dpo_calls[0], preset.dpo), (rm_calls[0], preset.reward_model)):
        assert amp_dtype(kwargs) == EXPECTED[card] and kwargs["use_cpu"] is False
        assert (kwargs["per_device_train_batch_size"], kwargs["gradient_accumulation_steps"]) == (
            settings["per_device_train_batch_size"], settings["gradient_accumulation_steps"])
        assert kwargs["gradient_checkpointing"] is True

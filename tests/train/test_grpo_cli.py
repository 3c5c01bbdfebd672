"""`python -m openmanus_lite grpo`: the seed's command line, multi-turn mode, and starting from a LoRA adapter."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from openmanus_lite.cli.grpo import main  # noqa: E402
from openmanus_lite.models import LoraSpec, build_tiny_model, load_model  # noqa: E402
from openmanus_lite.train.grpo import import_trl, load_for_grpo  # noqa: E402
from openmanus_lite.train.presets import get_preset  # noqa: E402

import_trl()


def test_cli_single_turn_from_a_lora_adapter(tmp_path, capsys):
    from openmanus_lite.train.sft import save_adapter

    base = build_tiny_model(tmp_path / "base")
    model, tok = load_model(base, lora=LoraSpec(r=4, alpha=8))
    adapter = save_adapter(model, tok, tmp_path / "adapter")
    loaded, _ = load_for_grpo(str(adapter), get_preset("cpu_debug"))
    assert sum(p.numel() for p in loaded.parameters() if p.requires_grad) > 0  # the adapter trains on

    out = tmp_path / "run"
    rc = main(["--model_name_or_path", str(adapter), "--preset", "cpu_debug", "--envs", "kg,db", "--n_tasks", "3",
               "--reward_funcs", "accuracy:2", "format", "tag_count", "--max_steps", "1", "--packing",
               "--output_dir", str(out)])
    assert rc == 0
    printed = capsys.readouterr()
    assert "--packing has no effect" in printed.err
    assert "note: accuracy (open-r1's, math_verify) cannot parse" in printed.err  # kg answers are names
    summary = json.loads(printed.out.strip().splitlines()[-1].removeprefix("done: "))
    assert summary["steps"] == 1
    log = json.loads((out / "log_history.json").read_text())
    assert "rewards/accuracy/mean" in log[0] and (out / "reward_curves.png").is_file()
    assert (out / "final" / "adapter_config.json").is_file()


def test_cli_multi_turn_and_bad_input(tmp_path, capsys):
    out = tmp_path / "multi"
    rc = main(["--mode", "multi", "--preset", "cpu_debug", "--envs", "db", "--n_tasks", "2", "--max_steps", "1",
               "--max_turns", "2", "--output_dir", str(out), "--no_save"])
    assert rc == 0
    log = json.loads((out / "log_history.json").read_text())
    assert "rewards/env_outcome/mean" in log[0] and "rollout/tokens_per_s" in log[0]
    assert main(["--mode", "multi", "--envs", "mars"]) == 2
    assert "unknown domains ['mars']" in capsys.readouterr().err


def test_every_preset_has_its_own_grpo_settings():
    from openmanus_lite.train.grpo import GRPORunConfig
    from openmanus_lite.train.presets import PRESETS

    for name in PRESETS:
        cfg = get_preset(name).grpo_config()
        assert isinstance(cfg, GRPORunConfig) and cfg.output_dir != GRPORunConfig().output_dir, f"preset {name!r} lost its grpo"
        # whole groups per generation batch (TRL's rule; a group may span the micro-batches of one generation)
        assert cfg.num_generations >= 2 and cfg.generation_batch_size % cfg.num_generations == 0

"""benchmarks/grpo_learning.py --control sft: SFT on the expert's episodes of GRPO's training tasks, at GRPO's
rate and group size, for GRPO's minutes (the control for expert samples)."""

from __future__ import annotations

import argparse

import torch

from benchmarks.grpo_learning import _sft_control
from openmanus_lite.envs import generate_tasks
from openmanus_lite.train.grpo import load_for_grpo
from openmanus_lite.train.presets import get_preset
from openmanus_lite.train.sft import save_merged


def test_the_sft_control_trains_the_experts_episodes_at_grpos_rate_and_group_size(tmp_path):
    preset = get_preset("cpu_debug")
    model, tok = load_for_grpo(None, preset)
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    cfg = preset.grpo_config(mode="multi", num_generations=2, learning_rate=1e-3, max_turns=3)
    args = argparse.Namespace(out=str(tmp_path), multi_minutes=0.03, seed=0)
    res, figures = _sft_control(args, preset, model, tok, generate_tasks("db", 3, seed=5), cfg)
    assert figures["expert_episodes"] == figures["records"] == 3 and figures["tokens"] > 0
    assert res.global_step >= 1 and res.stopped_by_time
    changed = [n for n, p in model.named_parameters() if n in before and not torch.equal(p, before[n])]
    assert changed, "the control trained nothing"
    # --save_model: the control's model, merged, is a checkpoint a GRPO run starts from (--sft)
    saved = save_merged(model, tok, tmp_path / "model")
    again, _ = load_for_grpo(str(saved), preset)
    ids = tok("SELECT name FROM t", return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.allclose(again(ids).logits, model(ids).logits, atol=2e-2)

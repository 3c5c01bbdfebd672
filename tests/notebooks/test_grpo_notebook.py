"""Notebook 06 runs headless with small settings (the tiny model: all three GRPO paths)."""

from __future__ import annotations

import pytest

pytest.importorskip("nbclient")
pytest.importorskip("torch")

from nbrun import run_notebook  # noqa: E402


@pytest.mark.slow
def test_grpo_notebook_runs(tmp_path):
    nb = run_notebook(
        "06_grpo.ipynb",
        {"PRESET": "cpu_debug", "SINGLE_DOMAINS": ["db"], "MULTI_DOMAINS": ["db"], "TRAIN_TASKS": 4,
         "EVAL_TASKS": 2, "WARMUP_STEPS": 2, "SINGLE_STEPS": 2, "MULTI_STEPS": 2, "TOOL_STEPS": 1,
         "OUTPUT_DIR": str(tmp_path)},
        timeout=600,
    )
    outs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    text = "".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", "")) for o in outs)
    assert "after GRPO" in text and "success after" in text
    assert "GRPORunConfig(" in text and "mode=single," in text and "num_generations=2," in text  # the TRL config shown
    assert "tool calls per rollout" in text
    assert sum("image/png" in o.get("data", {}) for o in outs) >= 2  # the two reward-curve figures
    assert "signal/group_share" in text and "success/db" in text  # the signal per step, from log_history
    html = "".join(str(o.get("data", {}).get("text/html", "")) for o in outs)
    assert "model tokens," in text and "#c8f7c5" in html and "#e0e0e0" in html  # one rollout coloured by env_mask

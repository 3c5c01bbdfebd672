"""Notebook 09 (preferences, DPO, reward models) executes headless on the tiny model."""

from __future__ import annotations

import pytest
from nbrun import run_notebook

pytestmark = pytest.mark.slow


def test_notebook_09_runs_headless(tmp_path):
    nb = run_notebook("09_preferences_dpo.ipynb", {
        "MODEL": "tiny", "DOMAINS": ["os"], "TRAIN_TASKS": 2, "SAMPLES": 1, "MISTAKES": 2, "EVAL_TASKS": 2,
        "DPO_STEPS": 2, "RM_STEPS": 2, "MAX_SECONDS": 120, "MAX_LENGTH": 1024, "MAX_NEW_TOKENS": 12,
        "MAX_TURNS": 2, "BEST_OF": 2, "OUT": str(tmp_path),
    }, timeout=900)
    outputs = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "ORM held-out pair accuracy" in outputs and "PRM held-out step accuracy" in outputs
    assert (tmp_path / "orm" / "openmanus_rm.json").is_file() and (tmp_path / "data" / "step_pairs.jsonl").is_file()

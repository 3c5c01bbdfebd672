"""Notebook 04 (SFT) runs headless with the tiny model and small settings."""

from __future__ import annotations

import pytest

pytest.importorskip("nbclient")
pytest.importorskip("trl")

from nbrun import run_notebook  # noqa: E402

pytestmark = pytest.mark.slow


def test_sft_notebook_runs(tmp_path):
    nb = run_notebook("04_sft_qlora.ipynb", {
        "PRESET": "cpu_debug", "DOMAINS": ["os", "db"], "SYNTH_PER_DOMAIN": 4, "EVAL_TASKS": 2,
        "EVAL_MAX_TURNS": 2, "MAX_NEW_TOKENS": 12, "MAX_STEPS": 3, "OUTPUT_DIR": str(tmp_path / "nb04"),
    }, timeout=600)
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "before" in text and "after" in text
    assert "3 steps" in text
    assert (tmp_path / "nb04" / "merged" / "config.json").is_file()

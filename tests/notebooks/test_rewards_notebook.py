"""Notebook 05 runs headless with small settings (policy samples and the tiny model)."""

from __future__ import annotations

import pytest

pytest.importorskip("nbclient")
pytest.importorskip("torch")

from nbrun import run_notebook  # noqa: E402


@pytest.mark.slow
def test_reward_notebook_runs():
    nb = run_notebook(
        "05_reward_functions.ipynb",
        {"DOMAINS": ["os", "db", "household"], "EPISODES_PER_DOMAIN": 2, "MODEL_SAMPLES": 4, "MAX_NEW_TOKENS": 16},
        timeout=600,
    )
    outputs = "".join(
        o.get("text", "") + str(o.get("data", {}).get("text/plain", ""))
        for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
    )
    assert "concise_turns" in outputs
    assert "needs column 'solution'" in outputs
    assert "6 vs plain <answer>" in outputs and "answer_match" in outputs  # accuracy vs answer_match table
    assert any("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))

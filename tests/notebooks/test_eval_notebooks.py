"""Notebooks 07 (benchmark evaluation) and 08 (test-time scaling) execute headless, small."""

from __future__ import annotations

from nbrun import run_notebook


def _outputs(nb) -> str:
    return "\n".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", ""))
                     for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))


def test_notebook_07_benchmark_eval(tmp_path):
    nb = run_notebook("07_benchmark_eval.ipynb", {"POLICIES": {"random": "random", "expert": "expert",
                                                               "sft": "latest:no-such-run"},
                                                  "LIMIT": 1, "OUT": str(tmp_path)}, timeout=300)
    text = _outputs(nb)
    assert "expert: success 100.0%" in text and "skip sft" in text
    assert (tmp_path / "expert_dev.json").exists()


def test_notebook_08_test_time_scaling():
    nb = run_notebook("08_test_time_scaling.ipynb", {"POLICY": "random", "DOMAINS": ["os", "db", "kg"], "TASKS": 2,
                                                     "MULTIPLIERS": [1, 2]}, timeout=300)
    text = _outputs(nb)
    assert "delta_vs_greedy" in text and "best_of_n-oracle" in text

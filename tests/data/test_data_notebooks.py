"""Notebooks 01 (merge) and 02 (explore) execute headless on the shipped samples."""

from __future__ import annotations

from nbrun import run_notebook

from openmanus_lite.data import load_report, load_splits


def _outputs(nb) -> str:
    return "\n".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", ""))
                     for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))


def test_notebooks_01_merge_then_02_explore(tmp_path):
    out = tmp_path / "merged"
    nb = run_notebook("01_merge_datasets.ipynb", {"OUT_DIR": str(out), "FORMATS": ["jsonl", "hf"],
                                                  "NEGATIVES": 0.2}, timeout=300)
    text = _outputs(nb)
    assert _has_image(nb)
    assert "jsonl: loads back identical: True" in text and "hf: loads back identical: True" in text
    assert "broken: Issue(reason='grammar.wrong_action_kind'" in text
    report = load_report(out)
    report.verify()
    assert report.kept > 0 and sum(len(v) for v in load_splits(out).values()) == report.kept + sum(report.added.values())

    nb = run_notebook("02_explore_data.ipynb", {"MERGED_DIR": str(out), "EXAMPLES": 1}, timeout=300)
    text = _outputs(nb)
    assert "negative samples" in text and "TRAIN" in text
    assert _has_image(nb)


def _has_image(nb) -> bool:
    return any(o.get("data", {}).get("image/png") for c in nb.cells if c.cell_type == "code"
               for o in c.get("outputs", []))

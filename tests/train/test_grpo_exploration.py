"""benchmarks/grpo_exploration.py: the figures from hand-made screens, and one run on the tiny model."""

from __future__ import annotations

import json

import pytest

from benchmarks.grpo_exploration import main, screen_figures


def test_figures_count_mixed_groups_pass_at_k_and_rescued_greedy_failures():
    successes = {"a": 0, "b": 2, "c": 4, "d": 1}  # of k = 4
    greedy = {"a": 0, "b": 0, "c": 1, "d": 1}
    domain_of = {"a": "os", "b": "os", "c": "db", "d": "db"}
    figures = screen_figures(successes, 4, greedy, domain_of)
    assert figures["os"] == {"tasks": 2, "mixed_share": 0.5, "pass_at_k": 0.5, "sample_success": 0.25,
                             "greedy_success": 0.0, "rescued": 1}
    assert figures["all"]["mixed_share"] == 0.5 and figures["all"]["sample_success"] == round(7 / 16, 3)
    assert figures["db"]["rescued"] == 0  # both were solved greedily already


def test_a_run_on_the_tiny_model_reports_every_temperature(capsys):
    pytest.importorskip("torch")
    from openmanus_lite.train.presets import tiny_model_path

    assert main(["--sft", str(tiny_model_path()), "--preset", "cpu_debug", "--domains", "os,db", "--tasks", "1",
                 "--k", "2", "--temperatures", "1.0,1.5", "--max_turns", "2"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1].removeprefix("RESULT "))
    assert set(result["temperatures"]) == {"1.0", "1.5"}
    by_domain = result["temperatures"]["1.5"]["by_domain"]
    assert {d: row["tasks"] for d, row in by_domain.items()} == {"os": 1, "db": 1, "all": 2}
    assert result["peak_memory"]["rss_gb"] > 0

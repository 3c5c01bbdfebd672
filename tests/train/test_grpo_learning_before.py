"""benchmarks/grpo_learning.py: with --before an earlier run's evaluation of the same tasks is reused, any other
refused; --train_domains picks the domains from the probe; the step figures count expert samples."""

from __future__ import annotations

import pytest

from benchmarks.grpo_learning import _heldout_before, step_figures, trained_domains
from openmanus_lite.envs import generate_tasks
from openmanus_lite.eval.benchmark import BenchmarkResult
from openmanus_lite.eval.metrics import TaskRecord


def _saved(tmp_path, tasks):
    records = [TaskRecord(task_id=t.id, domain=t.domain, difficulty=t.difficulty, success=i % 2 == 0,
                          score=float(i % 2 == 0), turns=2, invalid_actions=0) for i, t in enumerate(tasks)]
    return BenchmarkResult("before", "heldout", records).save(tmp_path / "heldout_before.csv")


def test_the_same_tasks_in_another_order_are_reused(tmp_path):
    tasks = generate_tasks("db", 4, seed=1)
    before = _heldout_before(_saved(tmp_path, tasks), list(reversed(tasks)))
    assert before.row().successes == 2 and {r.task_id for r in before.records} == {t.id for t in tasks}


def test_other_tasks_are_refused_with_the_count(tmp_path):
    tasks = generate_tasks("db", 4, seed=1)
    with pytest.raises(SystemExit, match="holds 3 tasks, this run evaluates 4; 1 of them"):
        _heldout_before(_saved(tmp_path, tasks[:3]), tasks)


def test_train_domains_follow_the_probe():
    probe = {"os": (1, 5), "db": (0, 5), "web": (3, 5), "kg": (0, 5), "household": (5, 5)}
    assert trained_domains("mixed", probe) == ["os", "web"]
    assert trained_domains("unsolved", probe) == ["os", "db", "web", "kg"]
    assert trained_domains("all", probe) == list(probe)
    assert trained_domains("mixed", {"os": (0, 5), "household": (5, 5)}) == ["household"]  # no mixed: any solved


def test_step_figures_count_signal_and_expert_samples():
    logs = [{"step_time": 10.0, "signal/group_share": 0.5, "signal/samples_kept": 8, "signal/samples_dropped": 8,
             "signal/groups_kept": 1, "signal/groups_dropped": 1, "signal/backward_skipped": 2,
             "guide/expert_samples": 1.0},
            {"step_time": 30.0, "signal/group_share": 1.0, "signal/samples_kept": 8, "signal/samples_dropped": 0,
             "signal/groups_kept": 1, "signal/groups_dropped": 0, "signal/backward_skipped": 0,
             "guide/expert_samples": 2.0}]
    figures = step_figures(logs)
    assert figures["seconds_per_useful_sample"] == round(40 / (8 + 8), 2) and figures["backward_skipped"] == 2
    assert figures["group_share_with_signal"] == round(2 / 3, 3)  # of all 3 groups, not the mean of steps' 0.75
    assert figures["expert_samples_per_step"] == 1.5 and step_figures(logs[:0])["expert_samples_per_step"] is None

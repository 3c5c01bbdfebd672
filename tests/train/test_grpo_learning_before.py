"""benchmarks/grpo_learning.py --before: an earlier run's evaluation of the same tasks is reused, any other refused."""

from __future__ import annotations

import pytest

from benchmarks.grpo_learning import _heldout_before
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

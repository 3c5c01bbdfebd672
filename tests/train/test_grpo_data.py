"""Single-turn GRPO data: value questions from the environments, trajectories ending in an answer."""

from __future__ import annotations

import json

import pytest

from openmanus_lite.envs import generate_tasks, synthesize_trajectories
from openmanus_lite.react import extract_answer, format_tagged
from openmanus_lite.rewards import get_reward_funcs
from openmanus_lite.train.grpo import (
    SYSTEM_PROMPT,
    build_single_turn_dataset,
    trajectory_rows,
    value_solution,
    value_task_rows,
)


@pytest.fixture(scope="module")
def rows():
    report: dict = {}
    return value_task_rows(("kg", "db", "os"), n=12, seed=3, report=report), report


def test_value_rows_keep_value_tasks_and_count_the_rest(rows):
    data, report = rows
    for domain in ("kg", "db", "os"):
        tasks = generate_tasks(domain, 12, seed=3)
        with_value = [t for t in tasks if value_solution(t) is not None]
        assert report[domain] == {"tasks": 12, "kept": len(with_value), "no_value_answer": 12 - len(with_value),
                                  "held_out": 0}
        assert [r["task_id"] for r in data if r["domain"] == domain] == [t.id for t in with_value]
    assert report["os"]["no_value_answer"] > 0  # OS has file-changing tasks: no value answer
    for r in data:
        assert r["prompt"][0] == {"role": "system", "content": SYSTEM_PROMPT}
        assert r["prompt"][1]["role"] == "user" and "Question:" in r["prompt"][1]["content"]
        assert "Question: Question:" not in r["prompt"][1]["content"]


def test_gold_answer_in_tag_format_scores_full_answer_match(rows):
    data, _ = rows
    acc, fmt, tags = get_reward_funcs("answer_match format tag_count")
    good = [format_tagged("reasoning", _plain(r["solution"])) for r in data]
    sols = [r["solution"] for r in data]
    assert acc(completions=good, solution=sols) == [1.0] * len(data)
    assert fmt(completions=good) == [1.0] * len(data)
    assert tags(completions=good) == [1.0] * len(data)
    wrong = [format_tagged("reasoning", "no idea") for _ in data]
    assert acc(completions=wrong, solution=sols) == [0.0] * len(data)


def _plain(solution: str) -> str:
    """A list solution written the way a model might: 'a, b'."""
    try:
        value = json.loads(solution)
    except json.JSONDecodeError:
        return solution
    return ", ".join(str(v) for v in value) if isinstance(value, list) else str(value)


def test_contexts_hold_what_the_answer_needs(rows):
    data, _ = rows
    by_id = {t.id: t for d in ("kg", "db", "os") for t in generate_tasks(d, 12, seed=3)}
    for r in data:
        task, text = by_id[r["task_id"]], r["prompt"][1]["content"]
        if r["domain"] == "kg" and isinstance(task.answer, list):
            assert all(name in text for name in task.answer), r["task_id"]  # answer entities are in the facts
        if r["domain"] == "db":
            for table in task.spec["tables"]:
                assert f"Table {table['name']}" in text
                assert text.count("\n") >= len(table["rows"])
        if r["domain"] == "os":
            for path, content in task.spec["files"].items():
                assert f"== {path} ==" in text and content.strip() in text


def test_unknown_domain_is_a_clear_error():
    with pytest.raises(ValueError, match="context renderer"):
        value_task_rows(("household",), n=2)


def test_trajectory_rows_cut_before_the_final_answer():
    trajs = synthesize_trajectories("db", 6, seed=1) + synthesize_trajectories("household", 2, seed=1)
    report: dict = {}
    data = trajectory_rows([t.to_dict() for t in trajs], report=report)
    assert report["records"] == 8 and report["kept"] + report["no_final_answer"] == 8
    assert report["kept"] >= 1
    for r in data:
        traj = next(t for t in trajs if t.id == r["task_id"])
        msgs = traj.to_messages()
        last = max(i for i, m in enumerate(msgs) if m["role"] == "assistant")
        assert r["prompt"][1:] == [m for m in msgs[:last] if m["role"] != "system"]
        assert r["prompt"][0]["content"].startswith(SYSTEM_PROMPT)
        assert extract_answer(msgs[last]["content"]).strip() == r["solution"]
    ds = build_single_turn_dataset(data)
    assert set(ds.column_names) >= {"prompt", "solution", "domain", "source", "task_id"}

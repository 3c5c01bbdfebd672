"""AgentBench-style db tasks (envs/sql_tables.py): the expert solves them, recovery from unquoted names, no copies
of AgentBench's dev tasks, and the recipe that mixes them in."""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from pathlib import Path

import pytest

from openmanus_lite.envs import generate_tasks, make_env, run_expert
from openmanus_lite.envs.sql_tables import CATEGORY_CYCLE, agentbench_style_tasks
from openmanus_lite.train.recovery import recovery_trajectories

DEV = Path(__file__).resolve().parents[2] / "data" / "benchmark" / "agentbench_db" / "dev.jsonl"


@pytest.fixture(scope="module")
def tasks():
    return agentbench_style_tasks(320, seed=0)


def test_expert_solves_every_task_and_quotes_every_name(tasks):
    assert Counter(t.spec["type"] for t in tasks) == Counter(CATEGORY_CYCLE * 20)
    for task in tasks:
        _, last = run_expert(make_env("db"), task)
        assert last.info["success"], (task.instruction, task.spec["reference_sql"])
        table = task.spec["tables"][0]
        assert f"`{table['name']}`" in task.spec["reference_sql"]
        assert all(isinstance(v, str) for row in table["rows"] for v in row)  # cells stored as text
    assert [t.id for t in agentbench_style_tasks(20, seed=0)] == [t.id for t in tasks[:20]]  # deterministic


def test_tables_and_questions_have_agentbench_s_surface(tasks):
    names = {t.spec["tables"][0]["name"] for t in tasks}
    headers = {c["name"] for t in tasks for c in t.spec["tables"][0]["columns"]}
    assert any(" " in n for n in names) and any("-" in n for n in names) and any("_" in n for n in names)
    assert any(re.search(r"\d", n) for n in names) and any("'" in n for n in names)
    assert {"2007", "Win %", "Pos.", "Goals.1", "Height ( m )"} <= headers
    questions = [t.instruction.split("\n")[0] for t in tasks]
    assert any(re.match(r"What is the .+ when .+ is .+\?", q) for q in questions)
    assert any(q.startswith("How many") for q in questions) and any(" or " in q for q in questions)


def _sql_of(turn: str) -> str:
    return turn.split("```sql\n")[1].split("\n```")[0]


def test_recovery_reads_the_syntax_error_and_quotes_the_names(tasks):
    episodes, counts = recovery_trajectories(tasks[:48], 1, kinds=("typical",))
    typical = [e for e in episodes if e.meta["mistake"]["kind"] == "typical"]
    by_id = {t.id: t for t in tasks}
    assert len(typical) >= 40 and counts["kept"] == len(episodes)
    for ep in typical:
        assert ep.meta["success"]
        turns = ep.messages[1:]
        at = 2 * ep.meta["mistake"]["turn"]
        mistake, error, fix = turns[at], turns[at + 1], turns[at + 2]
        assert not mistake.train and "`" not in _sql_of(mistake.content)
        assert error.content.startswith("Error: ") and re.search(r"syntax error|unrecognized token|no such", error.content)
        assert fix.train and "The query failed with" in fix.content and "backticks" in fix.content
        assert _sql_of(fix.content) == by_id[ep.meta["task_id"]].spec["reference_sql"]
        assert turns[-1].content.split("Act: ")[1].startswith("answer(")


def test_no_typical_mistake_where_names_need_no_quotes():
    env = make_env("db")
    for task in generate_tasks("db", 30, seed=0, difficulty="easy"):  # plain snake_case names
        env.reset(task)
        assert env.typical_mistake(env.expert_action(), random.Random(0)) is None
    task = agentbench_style_tasks(1, seed=3)[0]
    env.reset(task)
    due = env.expert_action()
    assert env.typical_mistake(due, random.Random(0)) is not None
    env.step(due)
    assert env.typical_mistake(env.expert_action(), random.Random(0)) is None  # an answer turn has none


def _question(instruction: str) -> str:
    return instruction.split("\n")[0].strip().lower()


def test_no_generated_task_copies_a_dev_task_s_table_or_question():
    dev = [json.loads(line) for line in DEV.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(dev) == 60
    dev_names = {t["name"].lower() for r in dev for t in r["spec"]["tables"]}
    dev_tables = {(t["name"].lower(), tuple(c["name"].lower() for c in t["columns"])) for r in dev
                  for t in r["spec"]["tables"]}
    dev_headers = {tuple(c["name"].lower() for c in t["columns"]) for r in dev for t in r["spec"]["tables"]}
    dev_questions = {_question(r["instruction"]) for r in dev}
    generated = agentbench_style_tasks(2000, seed=11) + agentbench_style_tasks(1000, seed=12)
    for task in generated:
        for t in task.spec["tables"]:
            headers = tuple(c["name"].lower() for c in t["columns"])
            assert t["name"].lower() not in dev_names and (t["name"].lower(), headers) not in dev_tables
            assert headers not in dev_headers
        assert _question(task.instruction) not in dev_questions


def test_recipe_adds_agentbench_style_db_tasks_and_keeps_cpu_60min_s_other_data():
    from openmanus_lite.recipes import get_recipe, recipe_tasks, recipe_trajectories

    base = get_recipe("cpu_60min").replace(tasks_per_domain=3, domains=("os", "db"), difficulty_weights=())
    mixed = get_recipe("cpu_60min_agentbench").replace(tasks_per_domain=3, domains=("os", "db"))
    assert mixed.task_counts() == {"os": 3, "db": 6} and mixed.db_agentbench_share == 0.5
    tasks, _ = recipe_tasks(mixed)
    assert Counter(t.difficulty for t in tasks if t.domain == "db") == {"easy": 3, "agentbench": 3}
    base_trajs, _ = recipe_trajectories(base)
    mixed_trajs, info = recipe_trajectories(mixed, tasks)
    same = [t for t in mixed_trajs if "agentbench" not in t.id]  # ids name the task: db-agentbench-...
    assert [(t.id, [m.content for m in t.messages]) for t in same] == \
        [(t.id, [m.content for m in t.messages]) for t in base_trajs]
    assert any(t.meta["mistake"]["kind"] == "typical" for t in mixed_trajs if t.id.startswith("recovery/db-agentbench"))

"""DB environment: generated tasks, AgentBench import and grading fidelity, SQLite safety, clone."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from openmanus_lite.envs import generate_tasks, make_env, run_expert
from openmanus_lite.envs.sql_db import (
    MAX_ROWS,
    MUTATION_TYPES,
    answers_match,
    format_answer,
    load_agentbench_db,
    parse_answer_list,
)
from openmanus_lite.react import answer, format_turn, sql
from openmanus_lite.schema import Task


def act_sql(statement: str) -> str:
    return format_turn("run it", sql(statement))


def act_answer(text: str) -> str:
    return format_turn("done", answer(text))


@pytest.fixture(scope="module")
def db_tasks() -> dict[str, list[Task]]:
    return {d: generate_tasks("db", 300, seed=0, difficulty=d) for d in ("easy", "medium", "hard")}


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_expert_solves_every_task(db_tasks, difficulty: str) -> None:
    for task in db_tasks[difficulty]:
        _, last = run_expert(make_env("db"), task)
        assert last.info["success"], (task.id, task.instruction)


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_random_policy_rarely_succeeds(db_tasks, difficulty: str) -> None:
    rng = random.Random(0)
    wins = 0
    for task in db_tasks[difficulty]:
        env = make_env("db")
        env.reset(task)
        while not env.done:
            last = env.step(env.random_action(rng))
        wins += last.info["success"]
    assert wins / len(db_tasks[difficulty]) <= 0.05


def test_every_agentbench_category_is_generated(db_tasks) -> None:
    kinds = {t.meta["type"] for t in db_tasks["medium"]}
    assert kinds == {"counting", "comparison", "ranking", "aggregation-SUM", "aggregation-MAX", "aggregation-MIN",
                     "aggregation-AVG", "other", "INSERT", "UPDATE", "DELETE"}
    assert any(len(t.spec["tables"]) == 2 for t in db_tasks["hard"])  # joins and subqueries when hard


def test_expert_recovers_when_the_table_was_changed(db_tasks) -> None:
    for task in [t for t in db_tasks["medium"] if t.spec["type"] in MUTATION_TYPES][:30]:
        env = make_env("db")
        env.reset(task)
        name = task.spec["tables"][0]["name"]
        env.step(act_sql(f'DELETE FROM "{name}" WHERE rowid % 2 = 0'))
        while not env.done:
            last = env.step(env.expert_action())
        assert last.info["success"], task.id


def test_observation_is_the_row_repr_or_the_error(db_tasks) -> None:
    task = db_tasks["easy"][0]
    env = make_env("db")
    env.reset(task)
    name = task.spec["tables"][0]["name"]
    assert env.step(act_sql(f'SELECT COUNT(*) FROM "{name}"')).observation == f"[({len(task.spec['tables'][0]['rows'])},)]"
    assert env.step(act_sql("SELECT nope FROM nowhere")).observation == "Error: no such table: nowhere"
    assert env.step(act_sql("SELECT 1; SELECT 2")).observation.startswith("Error: You can only execute one statement")


def test_grading_follows_agentbench() -> None:
    assert answers_match(parse_answer_list("[60900]"), parse_answer_list(["60900.0"]))
    assert answers_match(parse_answer_list("[1.004]"), parse_answer_list(["1.0"]))
    assert not answers_match(parse_answer_list("[1.2]"), parse_answer_list(["1.0"]))
    assert answers_match(parse_answer_list('["b", "a"]'), parse_answer_list(["a", "b"]))
    assert not answers_match(parse_answer_list('["a"]'), parse_answer_list(["a", "b"]))
    assert answers_match(parse_answer_list("[(7,)]"), parse_answer_list(["7"]))
    assert answers_match(parse_answer_list("[0]"), parse_answer_list(["none"]))
    assert answers_match(parse_answer_list('["1,429"]'), parse_answer_list(["1429"]))
    assert parse_answer_list("[" * 3000 + "]" * 3000)  # malformed input never raises


# ---------------------------------------------------------------- AgentBench import and fidelity


def _wrong(label: list) -> list:
    if [str(v).lower() for v in label] in (["none"], ["0"], ["null"]):
        return ["definitely not this"]
    out = []
    for v in label:
        try:
            out.append(float(str(v).replace(",", "")) + 1000)
        except ValueError:
            out.append(f"{v} (wrong)")
    return out


def test_agentbench_import_and_grading_fidelity(real_samples: Path) -> None:
    tasks = load_agentbench_db(real_samples / "agentbench_db" / "dev.jsonl")
    assert len(tasks) == 60
    for task in tasks:
        t = task.spec["tables"][0]
        assert t["name"] and t["columns"] and t["rows"], task.id
        assert "The name of this table is" in task.instruction
        env = make_env("db")
        if task.spec["type"] in MUTATION_TYPES:
            env.reset(task)
            assert "Error" not in env.step(act_sql(task.spec["reference_sql"])).observation, task.id
            assert env.step(act_answer('["none"]')).info["success"], task.id
            env.reset(task)  # leaving the table unchanged must not pass
            assert not env.step(act_answer('["none"]')).info["success"], task.id
        else:
            assert "reference_sql" not in task.spec  # the unreliable sql.query field is never used
            env.reset(task)
            assert env.step(act_answer(format_answer(task.spec["label"]))).info["success"], task.id
            env.reset(task)
            assert not env.step(act_answer(format_answer(_wrong(task.spec["label"])))).info["success"], task.id
        _, last = run_expert(make_env("db"), task)
        assert last.info["success"], task.id


def test_importer_reports_the_bad_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"description": "q", "label": ["1"], "type": ["counting"]}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        load_agentbench_db(bad)


# ---------------------------------------------------------------- safety


@pytest.fixture
def env(db_tasks):
    e = make_env("db", max_turns=50)
    e.reset(db_tasks["easy"][0])
    return e


def test_attach_vacuum_into_and_extensions_are_refused(env, tmp_path: Path) -> None:
    target = tmp_path / "evil.db"
    for stmt in (f"ATTACH DATABASE '{target}' AS evil", f"VACUUM INTO '{target}'", "DETACH DATABASE main",
                 "SELECT load_extension('/tmp/libevil')"):
        obs = env.step(act_sql(stmt)).observation
        assert obs.startswith("Error:") and "not authorized" in obs, (stmt, obs)
    assert not target.exists()


def test_pragmas_that_write_are_refused_reads_allowed(env) -> None:
    name = env.task.spec["tables"][0]["name"]
    assert "Error" not in env.step(act_sql(f"PRAGMA table_info(\"{name}\")")).observation
    assert "Error" not in env.step(act_sql("PRAGMA max_page_count")).observation
    for stmt in ("PRAGMA max_page_count = 1000000000", "PRAGMA writable_schema = 1", "PRAGMA journal_mode = WAL",
                 "PRAGMA optimize"):
        assert "not authorized" in env.step(act_sql(stmt)).observation, stmt


def test_runaway_queries_are_stopped_quickly(env) -> None:
    t0 = time.perf_counter()
    obs = env.step(act_sql("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
                           "SELECT COUNT(*) FROM c")).observation
    assert time.perf_counter() - t0 < 1.0
    assert "stopped" in obs and "longer than this environment allows" in obs
    assert "too big" in env.step(act_sql("SELECT zeroblob(1000000000)")).observation
    rows = env.step(act_sql("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 5000) "
                            "SELECT x FROM c")).observation
    assert f"more than {MAX_ROWS} rows in all" in rows and len(rows) <= 800


def test_clone_copies_the_database(db_tasks) -> None:
    task = db_tasks["easy"][0]
    env = make_env("db")
    env.reset(task)
    twin = env.clone()
    name = task.spec["tables"][0]["name"]
    twin.step(act_sql(f'DELETE FROM "{name}"'))
    n = len(task.spec["tables"][0]["rows"])
    assert env.step(act_sql(f'SELECT COUNT(*) FROM "{name}"')).observation == f"[({n},)]"
    assert twin.step(act_sql(f'SELECT COUNT(*) FROM "{name}"')).observation == "[(0,)]"
    assert "not authorized" in twin.step(act_sql("ATTACH DATABASE 'x.db' AS x")).observation  # guards copied too


def test_clone_inside_an_open_transaction(db_tasks) -> None:
    task = db_tasks["easy"][0]
    name = task.spec["tables"][0]["name"]
    env = make_env("db")
    env.reset(task)
    env.step(act_sql("BEGIN"))
    env.step(act_sql(f'DELETE FROM "{name}"'))
    t0 = time.perf_counter()
    twin = env.clone()
    assert time.perf_counter() - t0 < 1.0
    assert twin.step(act_sql(f'SELECT COUNT(*) FROM "{name}"')).observation == "[(0,)]"
    env.step(act_sql("ROLLBACK"))
    n = len(task.spec["tables"][0]["rows"])
    assert env.step(act_sql(f'SELECT COUNT(*) FROM "{name}"')).observation == f"[({n},)]"


def test_expert_reads_an_unquoted_name_error_and_quotes_the_names(db_tasks) -> None:
    """A medium task on a spaced table name (`Employee Records`): the typical slip fails, the expert's next
    thought quotes the error and its statement is the reference; an unrelated failed statement keeps the plan."""
    task = next(t for t in db_tasks["medium"] if " " in t.spec["tables"][0]["name"])
    env = make_env("db")
    env.reset(task)
    slip = env.typical_mistake(env.expert_action(), random.Random(0))
    assert slip is not None and f"FROM {task.spec['tables'][0]['name']}" in slip
    assert "`" not in slip.split("```sql\n")[1].split("\n```")[0]
    assert env.step(slip).observation.startswith("Error: ")
    fix = env.expert_action()
    assert "The query failed with" in fix and task.spec["reference_sql"] in fix
    env.reset(task)
    env.step(act_sql("SELECT nonsense FROM nowhere"))
    assert "The query failed with" not in env.expert_action()

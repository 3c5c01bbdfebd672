"""The environment core, checked on every registered domain: registry, determinism, plain-data tasks,
bad actions, turn limit, clone, synthesis, the synth CLI, the throughput benchmark, and a fuzz of
`step` with adversarial input (no exception escapes, the host filesystem is untouched, steps are fast)."""

from __future__ import annotations

import io
import json
import random
import re
import sys
import time
from contextlib import redirect_stdout
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openmanus_lite.envs import (
    DIFFICULTIES,
    generate_tasks,
    list_domains,
    make_env,
    run_expert,
    synthesize_trajectories,
)
from openmanus_lite.react import ACTION_FORMS
from openmanus_lite.schema import Task, Trajectory

DOMAINS = list_domains()
MINE = ("os", "db", "kg")
ROOT = Path(__file__).resolve().parents[2]


def test_registry() -> None:
    assert set(MINE) <= set(DOMAINS)
    with pytest.raises(KeyError, match="available"):
        make_env("nope")
    with pytest.raises(ValueError, match="difficulty"):
        generate_tasks("os", 1, difficulty="impossible")


@pytest.mark.parametrize("domain", DOMAINS)
def test_generation_is_deterministic_per_seed(domain: str) -> None:
    a = [t.to_json() for t in generate_tasks(domain, 8, seed=11, difficulty="medium")]
    b = [t.to_json() for t in generate_tasks(domain, 8, seed=11, difficulty="medium")]
    c = [t.to_json() for t in generate_tasks(domain, 8, seed=12, difficulty="medium")]
    assert a == b and a != c
    assert len({json.loads(x)["id"] for x in a}) == 8
    if domain in MINE:  # ours also stay unique across seeds, so suites from several seeds can be merged
        assert len({json.loads(x)["id"] for x in a + c}) == 16


@pytest.mark.parametrize("domain", DOMAINS)
def test_tasks_are_plain_data(domain: str) -> None:
    for difficulty in DIFFICULTIES:
        task = generate_tasks(domain, 3, seed=0, difficulty=difficulty)[2]
        again = Task.from_json(task.to_json())
        assert again.to_json() == task.to_json()
        first = make_env(domain).reset(again)
        assert first == make_env(domain).reset(task)
        assert ACTION_FORMS[domain] in first and task.instruction in first
        _, last = run_expert(make_env(domain), again)  # a frozen task replays exactly
        assert last.info["success"], task.id


@pytest.mark.parametrize("domain", DOMAINS)
def test_expert_solves_a_sample_of_every_difficulty(domain: str) -> None:
    for difficulty in DIFFICULTIES:
        for task in generate_tasks(domain, 20, seed=7, difficulty=difficulty):
            _, last = run_expert(make_env(domain), task)
            assert last.info["success"] and last.reward == 1.0, task.id


WORLDS = ("household", "ecommerce", "web")  # os, db and kg check the same on their own task sets


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
@pytest.mark.parametrize("domain", WORLDS)
def test_random_policy_rarely_succeeds(domain: str, difficulty: str) -> None:
    rng = random.Random(0)
    tasks = generate_tasks(domain, 200, seed=2, difficulty=difficulty)
    wins = 0
    for task in tasks:
        env = make_env(domain)
        env.reset(task)
        while not env.done:
            step = env.step(env.random_action(rng))
        wins += bool(step.info.get("success"))
    assert wins <= 0.05 * len(tasks)


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
@pytest.mark.parametrize("domain", WORLDS)
def test_expert_finishes_from_states_reached_by_random_moves(domain: str, difficulty: str) -> None:
    """Tree search clones states the expert never made; the expert must still finish from them."""
    rng = random.Random(1)
    for task in generate_tasks(domain, 60, seed=7, difficulty=difficulty):
        env = make_env(domain, max_turns=200)
        env.reset(task)
        for _ in range(rng.randint(1, 8)):
            if env.step(env.random_action(rng)).done:
                break
        if env.done:
            continue
        while not env.done:
            step = env.step(env.expert_action())
        assert step.info["success"], task.id


@pytest.mark.parametrize("domain", MINE)
def test_first_message_is_compact(domain: str) -> None:
    env = make_env(domain)
    task = generate_tasks(domain, 1, seed=0, difficulty="easy")[0]
    first = env.reset(task)
    assert len(env.intro) <= 320
    assert len(first) - len(task.instruction) <= 900


@pytest.mark.parametrize("domain", DOMAINS)
def test_bad_actions_explain_and_cost_a_turn(domain: str) -> None:
    task = generate_tasks(domain, 1, seed=0, difficulty="easy")[0]
    env = make_env(domain, max_turns=4)
    env.reset(task)
    for text in ("", "I think I will do something", "Act: ", "Think: hmm\nAct: ```python\nprint(1)\n```"):
        step = env.step(text)
        assert not step.info["valid"] and step.observation.strip(), (domain, text)
        assert step.reward == 0.0
    assert step.done and env.turn == 4 and step.info["success"] is False and "score" in step.info
    assert "Turn limit reached" in step.observation
    after = env.step("Think: x\nAct: answer(1)")
    assert after.done and after.observation == "The episode is over."


@pytest.mark.parametrize("domain", DOMAINS)
def test_an_invalid_streak_ends_the_episode_a_valid_action_resets_it(domain: str) -> None:
    task = generate_tasks(domain, 1, seed=0, difficulty="easy")[0]
    env = make_env(domain, max_turns=8, max_invalid_streak=3)
    env.reset(task)
    assert not env.step("no action").done and not env.step("Act: ").done
    valid = env.step(env.expert_action())
    assert valid.info["valid"] and env.invalid_streak == 0
    if valid.done:  # the expert's first action finished the task
        return
    steps = [env.step("no action") for _ in range(3)]
    assert [s.done for s in steps] == [False, False, True] and env.turn == 6 and env.invalid_actions == 5
    assert steps[-1].info["success"] is False and "score" in steps[-1].info  # scored as at the turn limit
    assert steps[-1].observation.endswith("3 invalid actions in a row: the episode ends.")
    for wrong in (0, True, "3"):
        with pytest.raises(ValueError, match="max_invalid_streak"):
            make_env(domain, max_invalid_streak=wrong)


@pytest.mark.parametrize("domain", DOMAINS)
def test_clone_is_independent(domain: str) -> None:
    task = generate_tasks(domain, 3, seed=0, difficulty="medium")[1]
    env = make_env(domain)
    env.reset(task)
    env.step(env.expert_action())
    twin = env.clone()
    assert twin is not env
    while not twin.done:
        last_twin = twin.step(twin.expert_action())
    assert not env.done and env.turn == 1
    while not env.done:
        last = env.step(env.expert_action())
    assert last.info["success"] and last_twin.info["success"]
    assert last.observation == last_twin.observation and env.turn == twin.turn


@pytest.mark.parametrize("domain", DOMAINS)
def test_synthesized_trajectories_are_sft_ready(domain: str) -> None:
    trajs = synthesize_trajectories(domain, 3, seed=0, difficulty="easy")
    assert len(trajs) == 3 and len({t.id for t in trajs}) == 3
    for t in trajs:
        again = Trajectory.from_json(t.to_json())
        assert again.meta["success"] is True and again.meta["score"] == 1.0
        assert again.messages[0].role == "user" and not again.messages[0].train
        assert all(m.train == (m.role == "assistant") for m in again.messages)
        assert all(m.content.startswith("Think: ") for m in again.messages if m.role == "assistant")


def test_synth_cli_writes_trajectory_jsonl(tmp_path: Path) -> None:
    from openmanus_lite.cli import main

    out = tmp_path / "synth.jsonl"
    with redirect_stdout(io.StringIO()) as printed:
        assert main(["synth", "--domain", "kg", "--n", "4", "--seed", "1", "--difficulty", "hard",
                     "--out", str(out)]) == 0
    lines = out.read_text().splitlines()
    assert len(lines) == 4
    assert all(Trajectory.from_json(x).meta["difficulty"] == "hard" for x in lines)
    assert "wrote 4 trajectories" in printed.getvalue()
    with redirect_stdout(io.StringIO()):
        assert main(["synth", "--domain", "nope", "--out", str(out)]) == 2


def test_throughput_benchmark_prints_a_result_line() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import env_throughput

    with redirect_stdout(io.StringIO()) as printed:
        assert env_throughput.main(["--domains", "os", "kg", "--n", "4", "--rounds", "1", "--no-pin"]) == 0
    result = [x for x in printed.getvalue().splitlines() if x.startswith("RESULT ")]
    assert len(result) == 1
    figures = json.loads(result[0][len("RESULT "):])
    assert figures["domains"]["os"]["expert_success"] == 1.0
    assert figures["domains"]["kg"]["expert_steps_per_s"] > 0


# ---------------------------------------------------------------- real agent actions


_ACTION_MARK = re.compile(r"^[ \t]*(act|action)[ \t]*:|final answer", re.IGNORECASE | re.MULTILINE)


def _real_turns(root: Path, names: tuple[str, ...]) -> list[str]:
    texts = []
    for name in names:
        path = root / name
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            for turn in json.loads(line)["conversations"]:
                role = turn.get("from") or turn.get("role")
                text = turn.get("value") if "value" in turn else turn.get("content")
                if role in ("gpt", "assistant") and _ACTION_MARK.search(text):  # boilerplate turns have none
                    texts.append(text)
    return texts


@pytest.mark.parametrize("domain, files", [
    ("os", ("agentinstruct_rekeyed/os.jsonl",)),
    ("db", ("agentinstruct/db.jsonl", "agentinstruct_rekeyed/db.jsonl")),
    ("kg", ("agentinstruct/kg.jsonl", "agentinstruct_rekeyed/kg.jsonl")),
])
def test_real_agentinstruct_actions_parse(real_samples: Path, domain: str, files: tuple[str, ...]) -> None:
    """Every real AgentInstruct assistant turn of the domain is understood by the environment
    (its action runs or is answered; none is a format error)."""
    turns = _real_turns(real_samples, files)
    assert turns
    task = generate_tasks(domain, 1, seed=0, difficulty="easy")[0]
    for text in turns:
        env = make_env(domain)
        env.reset(task)
        step = env.step(text)
        assert step.info["parsed"], (text[-200:], step.observation)


# ---------------------------------------------------------------- fuzz


class _HostWatch:
    """Records host-filesystem writes, process and network use while `on` (a Python audit hook)."""

    def __init__(self) -> None:
        self.on = False
        self.events: list[tuple] = []
        sys.addaudithook(self.hook)

    def hook(self, event: str, args: tuple) -> None:
        if not self.on:
            return
        if event == "open":
            path, mode = args[0], args[1]
            writes = isinstance(mode, str) and any(c in mode for c in "wax+")
            if writes or not str(path).endswith(".py"):  # .py reads: tracebacks via linecache
                self.events.append((event, args))
        elif event == "sqlite3.connect":
            if args and args[0] not in (":memory:", b":memory:"):
                self.events.append((event, args))
        elif event.startswith(("os.", "shutil.", "subprocess.", "socket.", "ctypes.", "pty.")) and event not in (
                "os.listdir", "os.scandir"):
            self.events.append((event, args))


WATCH = _HostWatch()

ADVERSARIAL = [
    "rm -rf /", "rm -rf / --no-preserve-root", "rm -rf ~ /* .*", "cat ../../etc/passwd", "cat /etc/shadow",
    "cd ../../../../ && ls -R", ":(){ :|:& };:", "yes | head", "cat /dev/urandom", "$(reboot)", "`id`",
    "echo $((2**64))", "find / -name '*' | xargs rm", "printf '%0999999999d' 1", "A" * 20_000,
    "grep -E '(a+)+$' /var/log/*", "grep -r '.*.*.*.*.*x' /", "cp -r / /copy", "mkdir -p " + "/a" * 600,
    "echo aaaaaaaaaaaaaaaa > /tmp/f; cat /tmp/f /tmp/f /tmp/f /tmp/f /tmp/f /tmp/f >> /tmp/f",
    "ls -R / ; find / ; grep -r a / ; cat /*/*/*", "sudo rm -rf /", "ln -s /etc/passwd x", "python -c 'import os'",
    "ATTACH DATABASE '/tmp/evil_fuzz.db' AS evil", "VACUUM INTO '/tmp/evil_fuzz2.db'", "PRAGMA writable_schema = 1",
    "PRAGMA max_page_count = 2000000000", "SELECT load_extension('/tmp/x')", "DROP TABLE sqlite_master",
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT COUNT(*) FROM c",
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT group_concat(x) FROM c",
    "SELECT zeroblob(2000000000)", "SELECT randomblob(1000000000)", "SELECT printf('%.*c', 2000000000, 'x')",
    "CREATE TABLE t AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT x FROM c",
    "SELECT 1; DROP TABLE x", "'; DROP TABLE users; --", "get_neighbors(#99, born_in)", "answer(#-1)",
    "intersection(#0)", "count(", "argmax(#0, )", "get_relations()", "get_neighbors(,)", "answer(" * 50,
    "click[" + "x" * 5000 + "]", "search[]", "go to \x00\x01\x02", "\u202e\ufeff\U0001f600", "Act: " * 200,
]
WRAPPERS = [
    lambda s: s,
    lambda s: f"Think: x\nAct: bash\n```bash\n{s}\n```",
    lambda s: f"Think: x\nAct: sql\n```sql\n{s}\n```",
    lambda s: f"Action: Operation\n```sql\n{s}\n```",
    lambda s: f"Think: x\nAct: {s}",
    lambda s: f"Think: x\nAct: answer({s})",
    lambda s: f"Thought: x\nFinal Answer: {s}",
    lambda s: f"Think: x\nAct: get_neighbors({s}, born_in)",
    lambda s: f"Think: x\nAct: click[{s}]",
    lambda s: f"THOUGHT: x\nACTION: {s}",
]
payloads = st.one_of(
    st.sampled_from(ADVERSARIAL),
    st.text(max_size=200),
    st.text(alphabet=";|&$`'\"\\<>(){}[]*?!#~\n\t -/.=%#@^,0123456789abcdefxyz", max_size=160),
)
actions = st.lists(st.tuples(st.sampled_from(range(len(WRAPPERS))), payloads), min_size=1, max_size=3)


@pytest.mark.parametrize("domain", DOMAINS)
def test_fuzz_step_never_raises_never_touches_the_host(domain: str, tmp_path: Path) -> None:
    tasks = [t for d in DIFFICULTIES for t in generate_tasks(domain, 2, seed=0, difficulty=d)]
    env = make_env(domain, max_turns=6)
    for task in tasks:  # warm up lazily imported code before watching
        env.reset(task)
        env.step(env.expert_action())

    @settings(max_examples=40, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(task_index=st.integers(0, len(tasks) - 1), acts=actions)
    def fuzz(task_index: int, acts: list) -> None:
        env.reset(tasks[task_index])
        for wrap, payload in acts:
            text = WRAPPERS[wrap](payload)
            c0, w0 = time.process_time(), time.perf_counter()
            WATCH.on = True
            try:
                step = env.step(text)
            finally:
                WATCH.on = False
            cpu, wall = time.process_time() - c0, time.perf_counter() - w0
            assert cpu < 1.0 and wall < 3.0, (domain, text[:200], cpu, wall)
            assert isinstance(step.observation, str) and {"parsed", "valid"} <= set(step.info)
            if domain in MINE:
                assert "internal_error" not in step.info, (text[:200], step.info.get("internal_error"))
            if step.done:
                break
        t0 = time.perf_counter()
        twin = env.clone()  # whatever state the input left behind can be cloned, quickly
        assert time.perf_counter() - t0 < 1.0 and twin.turn == env.turn
        assert not WATCH.events, WATCH.events[:3]

    fuzz()
    assert not Path("/tmp/evil_fuzz.db").exists() and not Path("/tmp/evil_fuzz2.db").exists()


# ---------------------------------------------------------------- notebook


def test_environments_notebook_runs() -> None:
    from nbrun import run_notebook

    nb = run_notebook("03_environments.ipynb", {"N_TASKS": 4, "N_SYNTH": 2, "DIFFICULTY": "easy",
                                                   "DIFFICULTIES": ("easy",)}, timeout=300)
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    for domain in MINE:
        assert domain in text

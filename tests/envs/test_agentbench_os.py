"""AgentBench OS dev tasks in the virtual shell: import, sandbox, AgentBench's grading, the frozen suite."""

from __future__ import annotations

import json

import pytest

from openmanus_lite.envs import make_env, run_expert
from openmanus_lite.envs.agentbench_os import (
    BASE_DIRS,
    BASE_FILES,
    CHECKERS,
    SOURCE_DIR,
    SandboxShell,
    expert_answer,
    grade,
    import_tasks,
    parse_task,
    sandbox,
    wrong_answer,
)
from openmanus_lite.envs.shell.interpreter import VFS
from openmanus_lite.eval import load_suite, run_benchmark
from openmanus_lite.eval.suites import read_manifest
from openmanus_lite.react import answer, bash, format_turn

HOSTED, REJECTED = import_tasks()
DEV = json.loads((SOURCE_DIR / "dev.json").read_text())


def _shell() -> SandboxShell:
    return SandboxShell(VFS.from_spec(BASE_FILES, BASE_DIRS))


def _play(task, *turns: str):
    env = make_env("os")
    env.reset(task)
    step = None
    for t in turns:
        step = env.step(t)
    return step


def test_every_dev_task_is_hosted_or_rejected_with_a_reason():
    assert len(DEV) == 26 and len(HOSTED) + len(REJECTED) == 26
    assert len(HOSTED) >= 0.6 * 26
    assert all(r["reason"] for r in REJECTED)
    reasons = {r["index"]: r["reason"].split(":")[0] for r in REJECTED}
    assert reasons == {0: "processes", 1: "processes", 2: "processes", 4: "processes", 8: "unsolvable as shipped",
                       24: "users", 25: "init"}
    assert [t.id for t in HOSTED] == [f"agentbench_os/dev/{i}" for i in range(26) if i not in reasons]


def test_the_frozen_suite_is_the_import_and_lists_the_rejections():
    suite = load_suite("agentbench_os")
    assert [t.to_dict() for t in suite.tasks] == [t.to_dict() for t in HOSTED]
    entry = read_manifest()["files"]["agentbench_os/dev.jsonl"]
    assert entry["expert_solved"] == len(HOSTED)
    assert entry["rejected"] == [{"index": r["index"], "reason": r["reason"]} for r in REJECTED]


@pytest.mark.parametrize("task", HOSTED, ids=lambda t: t.id)
def test_example_solution_passes_and_a_wrong_answer_fails(task):
    _, last = run_expert(make_env("os"), task)
    assert last.info["success"]
    spec = task.spec["agentbench"]
    right = expert_answer(spec, sandbox(spec))
    if right == "done":  # a check script inspects the final state: doing nothing, or doing it wrong, fails
        assert not _play(task, format_turn("Nothing to do.", answer("done"))).info["success"]
        wrong_calc = "printf '#!/bin/bash\\necho 0\\n' > /usr/local/bin/calc && chmod +x /usr/local/bin/calc"
        assert not _play(task, format_turn("A calc.", bash(wrong_calc)),
                         format_turn("Done.", answer("done"))).info["success"]
    else:
        assert not _play(task, format_turn("A guess.", answer(wrong_answer(right)))).info["success"]


def test_expert_and_random_through_the_kits_evaluation():
    res = run_benchmark("expert", "agentbench_os", max_turns=8, progress=False)
    assert res.success_rate() == 1.0 and len(res.records) == len(HOSTED)
    assert run_benchmark("random", "agentbench_os", max_turns=8, progress=False).success_rate() < 0.5


def test_checkers_keep_agentbench_semantics():
    assert CHECKERS["integer-match"](" 08\n", "8") and not CHECKERS["integer-match"]("8.0", "8")
    assert not CHECKERS["integer-match"]("eight", "8")
    assert CHECKERS["size-match"]("16K", "16384") and CHECKERS["size-match"]("2M", "2048K")
    assert not CHECKERS["size-match"]("8.0K", "8.0K")  # int('8.0') raises in AgentBench's parser too
    assert not CHECKERS["size-match"]("16KB", "16KB")  # 'B' is tried first, then int('16K') raises
    assert CHECKERS["string-match"]("not-yet\r\n", "not-yet\n") and not CHECKERS["string-match"]("no", "not-yet")
    assert CHECKERS["containing"]("the answer is 42", "42") and not CHECKERS["containing"]("4", "42")
    assert CHECKERS["in"]("42", "the answer is 42") and not CHECKERS["in"]("43", "the answer is 42")


def test_match_grading_strips_and_compares_exactly():
    spec = parse_task({"description": "d", "evaluation": {"match": "log"}}, SOURCE_DIR)
    shell = _shell()
    assert grade(spec, " log\n", shell) and not grade(spec, "log.jsonl", shell) and not grade(spec, None, shell)
    spec = parse_task({"description": "d", "evaluation": {"match": {"regex": r"^\d+$", "strip": False}}}, SOURCE_DIR)
    assert grade(spec, "12", shell) and not grade(spec, " 12", shell)


def test_format_variants_parse_as_agentbench_reads_them():
    spec = parse_task(DEV[10], SOURCE_DIR / "scripts" / "dev")  # `create` is a list: no init script
    assert spec["init"] == [] and spec["check"] == [None, {"checker": "integer-match"}]
    spec = parse_task(DEV[21], SOURCE_DIR / "scripts" / "dev")  # `init` is a bare string of bash
    assert spec["init"][0][0] == "bash" and "1.helloworld" in spec["init"][0][1]
    spec = parse_task(DEV[3], SOURCE_DIR / "scripts" / "dev")  # a bash check script and an example file
    assert spec["check"][0][0] == "bash" and "calc" in spec["example"][1]


def test_users_and_groups_live_in_etc_files():
    sh = _shell()
    assert sh.run("useradd -m -s /bin/bash -G root,sudo user1 && groups user1")[0] == "user1 : user1 root sudo\n"
    assert sh.run("getent passwd user1")[0] == "user1:x:1000:1000::/home/user1:/bin/bash\n"
    assert sh.run("ls -a /home/user1 | grep -c bashrc; getent group sudo")[0] == "1\nsudo:x:27:user1\n"
    assert sh.run("useradd user1")[1] == 9 and sh.run("useradd -G nosuch u2")[1] == 6
    assert sh.run("getent group nosuch")[1] == 2 and sh.run("groups")[0] == "root\n"


def test_python3_runs_printed_arithmetic_only():
    sh = _shell()
    assert sh.run("python3 -c 'print(\"%.6f\"%(20 / (5 + 2) - 1))'")[0] == "1.857143\n"
    assert sh.run("python3 -c 'print(abs( - 3.0)<1e-5)'")[0] == "False\n"
    assert sh.run("python3 -c 'import os'")[1] == 1
    assert sh.run("python3 -c 'print(\"a\" * 10**9)'")[1] == 1
    assert sh.run("python3 -c 'print(1/0)'")[1] == 1
    assert sh.run("python3 -c 'print(\"%999999999d\" % 1)'")[1] == 1


def test_commands_on_path_and_empty_file_tests():
    sh = _shell()
    sh.run("printf 'echo hi $1\\n' > t && chmod +x t && mv t /usr/local/bin/")
    assert sh.run("t you")[0] == "hi you\n"
    assert sh.run('[ -x "$(command -v npm)" ] && echo installed || echo not-yet')[0] == "not-yet\n"
    assert isinstance(sh.copy(), SandboxShell) and sh.copy().run("t me")[0] == "hi me\n"


def test_only_a_real_background_job_counts_as_a_process():
    from openmanus_lite.envs.agentbench_os import rejection

    def spec(code):
        return parse_task({"description": "d", "create": {"init": code},
                           "evaluation": {"check": [None, {"language": "python", "file": "check/integer-match.py"}],
                                          "example": "ls /root | wc -l"}}, SOURCE_DIR / "scripts" / "dev")
    assert rejection(spec("sleep 100 &")).startswith("processes")
    assert rejection(spec("mkdir /root/a &&\ntouch /root/b 2>&1 >&2")) is None


def test_benchmark_script_reports_counts_reasons_and_scores(capsys):
    import importlib.util

    from openmanus_lite.paths import REPO_ROOT

    spec = importlib.util.spec_from_file_location("agentbench_os_bench", REPO_ROOT / "benchmarks" / "agentbench_os.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main([]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert sum(line.startswith("rejected #") for line in lines) == len(REJECTED)
    result = json.loads(lines[-1].removeprefix("RESULT "))
    assert (result["hosted"], result["rejected"], result["suite_matches_import"]) == (len(HOSTED), len(REJECTED), True)
    solved = {name: p["solved"] for name, p in result["policies"].items()}
    assert solved["expert"] == len(HOSTED) and solved["random"] < len(HOSTED)


def test_a_model_policy_plays_the_suite(tmp_path):
    pytest.importorskip("torch")
    from openmanus_lite.models import build_tiny_model, load_model
    from openmanus_lite.policies import ModelPolicy

    model, tok = load_model(str(build_tiny_model(tmp_path / "tiny", seed=0)), backend="hf")
    policy = ModelPolicy(model, tok, name="tiny", max_new_tokens=8, batch_size=4)
    res = run_benchmark(policy, load_suite("agentbench_os", limit=3), max_turns=2, progress=False)
    assert len(res.records) == 3 and res.generated_tokens > 0
    assert all(1 <= r.turns <= 2 and r.score in (0.0, 1.0) for r in res.records)


def test_freezing_writes_the_suite_as_shipped(tmp_path, real_samples):
    from openmanus_lite.eval import freeze_suites

    m = freeze_suites(tmp_path, domains=["os"], per_cell=1, seeds={"dev": 1},
                      agentbench_path=real_samples / "agentbench_db" / "dev.jsonl")
    frozen, shipped = m["files"]["agentbench_os/dev.jsonl"], read_manifest()["files"]["agentbench_os/dev.jsonl"]
    assert [r["index"] for r in frozen["rejected"]] == [r["index"] for r in shipped["rejected"]]
    assert frozen == shipped
    assert load_suite("agentbench_os", root=tmp_path).tasks == load_suite("agentbench_os").tasks

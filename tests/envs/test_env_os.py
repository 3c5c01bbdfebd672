"""OS environment: the virtual shell's commands, the task generator, expert, random baseline, checker."""

from __future__ import annotations

import random

import pytest

from openmanus_lite.envs import generate_tasks, make_env, run_expert
from openmanus_lite.envs.os_shell import OUTPUT_LIMIT, check, format_output, random_command
from openmanus_lite.envs.shell.interpreter import VFS, Shell
from openmanus_lite.react import answer, bash, format_turn

FILES = {
    "/var/log/app.log": "2024 ERROR db: x\n2024 INFO api: y\n2024 ERROR api: z\n",
    "/root/.bashrc": "alias ll='ls -l'\n",
    "/root/notes.txt": "hello world\nfoo bar baz\n",
    "/data/a.csv": "name,dept,salary\nann,eng,10\nbob,ops,20\n",
    "/data/b.txt": "x" * 49 + "\n",
    "/data/sub/c.txt": "deep\n",
}


@pytest.fixture
def sh() -> Shell:
    return Shell(VFS.from_spec(FILES, dirs=["/tmp"]))


def run(sh: Shell, cmd: str) -> str:
    return sh.run(cmd)[0]


@pytest.mark.parametrize("cmd, expected", [
    ("pwd", "/root\n"),
    ("ls", "notes.txt\n"),
    ("ls -a", ".\n..\n.bashrc\nnotes.txt\n"),
    ("ls -1 /data", "a.csv\nb.txt\nsub\n"),
    ("ls -S /data/*.*", "/data/b.txt\n/data/a.csv\n"),
    ("ls -R /data", "/data:\na.csv\nb.txt\nsub\n\n/data/sub:\nc.txt\n"),
    ("cat notes.txt", "hello world\nfoo bar baz\n"),
    ("head -n 1 /var/log/app.log", "2024 ERROR db: x\n"),
    ("tail -1 /var/log/app.log", "2024 ERROR api: z\n"),
    ("tail -n +2 /root/notes.txt", "foo bar baz\n"),
    ("wc -l /var/log/app.log", "3 /var/log/app.log\n"),
    ("wc -w < /root/notes.txt", "5\n"),
    ("wc -c /root/notes.txt", "24 /root/notes.txt\n"),
    ("grep -c ERROR /var/log/app.log", "2\n"),
    ("grep -v ERROR /var/log/app.log", "2024 INFO api: y\n"),
    ("grep -in error /var/log/app.log", "1:2024 ERROR db: x\n3:2024 ERROR api: z\n"),
    ("grep -r deep /data", "/data/sub/c.txt:deep\n"),
    ("grep 'ERROR \\(db\\|api\\):' /var/log/app.log", "2024 ERROR db: x\n2024 ERROR api: z\n"),
    ("grep -E '^2024 (INFO|WARN)' /var/log/app.log", "2024 INFO api: y\n"),
    ("find /data -name '*.txt'", "/data/b.txt\n/data/sub/c.txt\n"),
    ("find /data -type d", "/data\n/data/sub\n"),
    ("find /data -maxdepth 1 -type f | wc -l", "2\n"),
    ("cut -d, -f3 /data/a.csv | sort -n -r | head -n 1", "20\n"),
    ("cut -d, -f1,3 /data/a.csv", "name,salary\nann,10\nbob,20\n"),
    ("sort -t, -k3 -n /data/a.csv", "name,dept,salary\nann,eng,10\nbob,ops,20\n"),
    ("cut -d' ' -f2 /var/log/app.log | sort | uniq -c", "      2 ERROR\n      1 INFO\n"),
    ("printf '%s\\n' b a b | sort -u", "a\nb\n"),
    ("echo hi > /tmp/x && echo there >> /tmp/x; cat /tmp/x", "hi\nthere\n"),
    ("mkdir -p /a/b/c && ls /a/b", "c\n"),
    ("touch /tmp/new && ls /tmp", "new\n"),
    ("cp /data/a.csv /tmp/ && mv /tmp/a.csv /tmp/z.csv && ls /tmp", "z.csv\n"),
    ("rm -r /data/sub && ls /data", "a.csv\nb.txt\n"),
    ("cd /data && pwd", "/data\n"),
    ("echo $HOME ~ \"$USER\"", "/root /root root\n"),
    ("false || echo fallback", "fallback\n"),
    ("false && echo never", ""),
    ("cat /missing 2>/dev/null; echo after", "after\n"),
    ("foo", "bash: foo: command not found\n"),
    ("cat ../../etc/passwd", "cat: ../../etc/passwd: No such file or directory\n"),
])
def test_shell_commands(sh: Shell, cmd: str, expected: str) -> None:
    assert run(sh, cmd) == expected


def test_shell_refuses_dangerous_or_unsupported_things(sh: Shell) -> None:
    assert "dangerous to operate recursively on '/'" in run(sh, "rm -rf /")
    assert sh.fs.is_file(["data", "a.csv"])
    assert run(sh, "echo $(ls) `ls`") == "notes.txt notes.txt\n"
    assert "syntax error" in run(sh, "ls |")
    assert "invalid option" in run(sh, "ls -z")
    assert run(sh, "ps aux") == "bash: ps: not available in this sandbox (no processes)\n"
    sh.run("echo " + "a" * 3000 + "b > /tmp/slow")
    out, status = sh.run("grep -E '(a|aa)+$' /tmp/slow; echo done")  # exponential backtracking: cut off, not hung
    assert "took too long" in out and out.endswith("done\n")
    assert "into itself" in run(sh, "cp -r /data /data/sub")
    assert "field width too large" in run(sh, "printf '%0999999999d' 1")


def test_filesystem_limits_bound_every_command(sh: Shell) -> None:
    sh.run("echo aaaaaaaaaa > /tmp/f")
    for _ in range(30):  # doubling the file: it must stop at the size cap, not run away
        sh.run("cat /tmp/f /tmp/f > /tmp/g; cat /tmp/g > /tmp/f")
    assert len(sh.fs.read(["tmp", "f"])) <= 200_000
    out, status = sh.run("cat " + " ".join(["/tmp/f"] * 100))
    assert len(out) <= 400_000


def test_observation_truncated_like_agentbench() -> None:
    obs = format_output("x" * 5000)
    assert obs.startswith("The output of the OS:\n\n")
    body = obs.split("\n\n", 1)[1]
    assert body.endswith("[truncated because the output is too long]")
    assert len(body) == OUTPUT_LIMIT - 20 + len("\n[truncated because the output is too long]")
    assert format_output("") == "The output of the OS is empty."


@pytest.fixture(scope="module")
def os_tasks() -> dict[str, list]:
    return {d: generate_tasks("os", 300, seed=0, difficulty=d) for d in ("easy", "medium", "hard")}


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_expert_solves_every_task(os_tasks, difficulty: str) -> None:
    for task in os_tasks[difficulty]:
        _, last = run_expert(make_env("os"), task)
        assert last.info["success"], (task.id, task.instruction)


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_random_policy_rarely_succeeds(os_tasks, difficulty: str) -> None:
    rng = random.Random(0)
    wins = 0
    for task in os_tasks[difficulty]:
        env = make_env("os")
        env.reset(task)
        while not env.done:
            last = env.step(env.random_action(rng))
        wins += last.info["success"]
    assert wins / len(os_tasks[difficulty]) <= 0.05


def test_reference_commands_show_the_answer(os_tasks) -> None:
    """The expert's commands print what it then answers (the shell agrees with the generator)."""
    for task in os_tasks["medium"][:60] + os_tasks["hard"][:60]:
        chk = task.spec["check"]
        if chk["kind"] == "state":
            continue
        sh = Shell(VFS.from_spec(task.spec["files"], task.spec["dirs"]))
        out = [sh.run(cmd)[0] for _, cmd in task.spec["solution"]][-1]
        value = str(chk["value"]) if chk["kind"] == "int" else chk["accept"][0]
        assert value in out, (task.id, out)


def test_expert_recovers_from_a_perturbed_state(os_tasks) -> None:
    rng = random.Random(1)
    solved = total = 0
    for task in os_tasks["easy"][:50] + os_tasks["medium"][:50]:
        env = make_env("os")
        env.reset(task)
        for _ in range(2):
            env.step(format_turn("poke", bash(random_command(rng, env.shell.fs))))
        while not env.done:
            last = env.step(env.expert_action())
        solved += last.info["success"]
        total += 1
    assert solved / total >= 0.9


def test_checker_int_string_and_state() -> None:
    fs = VFS.from_spec({"/root/out.txt": "12\n"})
    assert check({"kind": "int", "value": 12}, " '12'. ", fs)
    assert check({"kind": "int", "value": 12}, "12.0", fs)
    assert not check({"kind": "int", "value": 12}, "12 lines", fs)
    assert check({"kind": "str", "accept": ["a.bin", "/d/a.bin"]}, "/d/a.bin", fs)
    assert not check({"kind": "str", "accept": ["a.bin"]}, None, fs)
    assert check({"kind": "state", "strip": {"/root/out.txt": "12"}}, None, fs)
    assert not check({"kind": "state", "absent": ["/root/out.txt"]}, "done", fs)


def test_finish_is_accepted_and_change_tasks_are_checked_on_state() -> None:
    task = next(t for t in generate_tasks("os", 20, seed=3, difficulty="easy") if t.meta["family"] == "make_dir")
    env = make_env("os")
    env.reset(task)
    step = env.step("Think: done already\nAct: finish")
    assert step.done and not step.info["success"]
    env.reset(task)
    env.step(format_turn("make it", bash(task.spec["solution"][0][1])))
    step = env.step(format_turn("done", answer("done")))
    assert step.info["success"] and step.reward == 1.0


def test_clone_copies_the_filesystem() -> None:
    task = generate_tasks("os", 1, seed=0, difficulty="easy")[0]
    env = make_env("os")
    env.reset(task)
    twin = env.clone()
    twin.step(format_turn("wipe", bash("rm -r /var /etc /root")))
    assert env.shell.fs.get(["etc", "passwd"]) is not None
    assert twin.shell.fs.get(["etc", "passwd"]) is None
    assert env.turn == 0 and twin.turn == 1

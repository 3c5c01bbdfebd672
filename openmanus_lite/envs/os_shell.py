"""OS domain: AgentBench-OS style tasks in a virtual bash shell (see `vshell.py`).

A task's `spec` holds the whole starting filesystem (`files`: path -> text, `dirs`: empty
directories), the check and the reference solution, so a frozen task rebuilds exactly.
Two kinds of task, as in AgentBench OS:

- questions answered with `answer(<value>)`: counting files or lines, the largest file,
  filtering logs, the most frequent value...; checked by integer or string match;
- changes to the filesystem (create, copy, move, delete, write a result to a file),
  checked on the final state; the agent ends them with `answer(done)` (AgentBench's
  `Act: finish` is accepted too).

The expert runs the reference commands (skipping ones already run), answers once it has
seen the result, and for change tasks repairs whatever the final-state check still finds
wrong, so it also finishes from a perturbed state.
"""

from __future__ import annotations

import copy
import random
import re
from typing import Any

from openmanus_lite.envs.agentbench_os import expert_action as agentbench_expert_action
from openmanus_lite.envs.agentbench_os import grade as agentbench_grade
from openmanus_lite.envs.agentbench_os import sandbox as agentbench_sandbox
from openmanus_lite.envs.base import Env, expert_turn, register_domain
from openmanus_lite.envs.shell.interpreter import HOME, VFS, Shell, split_path
from openmanus_lite.react import answer, bash
from openmanus_lite.schema import StepResult, Task

OUTPUT_LIMIT = 800
"""AgentBench truncates shell output longer than this (keeping the first 780 characters)."""

INTRO = (
    "You are root in a sandboxed bash shell over virtual files: coreutils, grep, sed, awk, find, xargs, loops; no "
    "processes, users, packages or network. The current directory is /root. Run one command line or a short "
    "script per turn. Long outputs are truncated. Answer with answer(<value>); after changing files: answer(done)"
)
"""The task introduction says what the sandbox supports rather than promising a full Linux machine."""

_FINISH = re.compile(r"^([ \t]*Act[ \t]*:[ \t]*)finish[ \t]*$", re.MULTILINE | re.IGNORECASE)


def format_output(text: str) -> str:
    """The observation for a command's output, truncated the way AgentBench does it."""
    text = text.rstrip("\n")
    if len(text) > OUTPUT_LIMIT:
        text = text[: OUTPUT_LIMIT - 20] + "\n[truncated because the output is too long]"
    return "The output of the OS:\n\n" + text if text else "The output of the OS is empty."


def shell_quote(s: str) -> str:
    """Quote a word for the shell (single quotes unless it is plainly safe)."""
    if s and re.fullmatch(r"[\w@%+=:,./-]+", s):
        return s
    return "'" + s.replace("'", "'\\''") + "'"


# =========================================================================== environment


class OSEnv(Env):
    domain = "os"
    max_turns = 8
    intro = INTRO

    def _setup(self, task: Task) -> None:
        spec = task.spec
        self.executed: list[str] = []
        if "agentbench" in spec:  # an imported AgentBench OS task (envs/agentbench_os.py)
            self.shell = agentbench_sandbox(spec["agentbench"])
            return
        self.shell = Shell(VFS.from_spec(spec["files"], spec.get("dirs", [])), cwd=spec.get("cwd", HOME))

    def step(self, assistant_text: str) -> StepResult:
        # AgentBench OS ends change tasks with `Act: finish`; treat it as answer(done).
        if isinstance(assistant_text, str) and "finish" in assistant_text.lower():
            assistant_text = _FINISH.sub(r"\1answer(done)", assistant_text)
        return super().step(assistant_text)

    def _execute(self, action) -> str:
        self.executed.append(action.arg)
        output, _ = self.shell.run(action.arg)
        return format_output(output)

    def clone(self) -> "OSEnv":
        new = copy.copy(self)
        new.shell = self.shell.copy()
        new.executed = list(self.executed)
        new.last_info = dict(self.last_info)
        return new

    # ------------------------------------------------------------------ checker
    def _score(self, answer_text: str | None) -> float:
        if "agentbench" in self.task.spec:
            return float(agentbench_grade(self.task.spec["agentbench"], answer_text, self.shell))
        return float(check(self.task.spec["check"], answer_text, self.shell.fs))

    # ------------------------------------------------------------------ expert
    def expert_action(self) -> str:
        spec = self.task.spec
        if "agentbench" in spec:
            return agentbench_expert_action(spec["agentbench"], self.shell, self.executed)
        chk = spec["check"]
        state_task = chk["kind"] == "state"
        if state_task and not unmet(chk, self.shell.fs):
            return expert_turn(spec["final_think"], answer("done"))
        for think, cmd in spec["solution"]:
            if cmd not in self.executed:
                return expert_turn(think, bash(cmd))
        if not state_task:
            return expert_turn(spec["final_think"], answer(str(chk["value"] if chk["kind"] == "int"
                                                                 else chk["accept"][0])))
        think, cmd = repair(chk, self.shell.fs)
        return expert_turn(think, bash(cmd))

    def random_action(self, rng: random.Random) -> str:
        if rng.random() < 0.15:
            return expert_turn("I will guess.", answer(_random_answer(rng, self.shell.fs)))
        return expert_turn("I will try a command.", bash(random_command(rng, self.shell.fs)))


# =========================================================================== checking


def _normalise_answer(text: str) -> str:
    s = text.strip().rstrip(".").strip()
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"`":
        s = s[1:-1].strip()
    return s.rstrip(".").strip()


def check(chk: dict[str, Any], answer_text: str | None, fs: VFS) -> bool:
    kind = chk["kind"]
    if kind == "state":
        return not unmet(chk, fs)
    if answer_text is None:
        return False
    got = _normalise_answer(answer_text)
    if kind == "int":
        try:
            return int(got) == int(chk["value"])
        except ValueError:
            try:
                f = float(got)
            except ValueError:
                return False
            return f.is_integer() and int(f) == int(chk["value"])
    return got in chk["accept"]


def unmet(chk: dict[str, Any], fs: VFS) -> list[tuple[str, str]]:
    """What the final-state check still finds wrong, as (kind, path) pairs."""
    problems = []
    for d in chk.get("dirs", []):
        if not fs.is_dir(split_path(d, "/")):
            problems.append(("dir", d))
    for p in chk.get("absent", []):
        if fs.get(split_path(p, "/")) is not None:
            problems.append(("absent", p))
    for p, content in chk.get("files", {}).items():
        if fs.get(split_path(p, "/")) != content:
            problems.append(("file", p))
    for p, text in chk.get("strip", {}).items():
        node = fs.get(split_path(p, "/"))
        if not isinstance(node, str) or node.strip() != text:
            problems.append(("strip", p))
    return problems


def repair(chk: dict[str, Any], fs: VFS) -> tuple[str, str]:
    """One command that fixes the first problem `unmet` reports (the expert's fallback)."""
    kind, path = unmet(chk, fs)[0]
    parent = path.rsplit("/", 1)[0] or "/"
    mk = "" if fs.is_dir(split_path(parent, "/")) else f"mkdir -p {shell_quote(parent)} && "
    if kind == "dir":
        return f"The directory {path} is still missing, so I create it.", f"mkdir -p {shell_quote(path)}"
    if kind == "absent":
        return f"{path} must not exist any more, so I remove it.", f"rm -r {shell_quote(path)}"
    if kind == "strip":
        text = chk["strip"][path]
        return (f"{path} must contain {text}, so I write it.",
                f"{mk}echo {shell_quote(text)} > {shell_quote(path)}")
    content = chk["files"][path]
    node = fs.get(split_path(path, "/"))
    if isinstance(node, dict):
        return f"{path} is a directory but must be a file, so I remove it first.", f"rm -r {shell_quote(path)}"
    same = next((p for p, c in fs.files().items() if c == content and p != path), None)
    if same is not None:
        return f"{same} has the content {path} needs, so I copy it there.", \
            f"{mk}cp {shell_quote(same)} {shell_quote(path)}"
    if content == "":
        return f"{path} must be an empty file.", f"{mk}rm -rf {shell_quote(path)} && touch {shell_quote(path)}"
    lines = content[:-1].split("\n") if content.endswith("\n") else None
    if lines is None:
        return f"{path} must hold its exact text.", f"{mk}printf '%s' {shell_quote(content)} > {shell_quote(path)}"
    return (f"{path} does not have the required content yet, so I write it.",
            f"{mk}printf '%s\\n' {' '.join(shell_quote(x) for x in lines)} > {shell_quote(path)}")


# =========================================================================== random baseline

_RANDOM_WORDS = ("done", "yes", "no", "root", "error", "none", "log", "ok", "file", "data", "42")


def _all_paths(fs: VFS) -> list[str]:
    return [("/" + "/".join(p)) for p, _ in fs.walk([]) if p]


def _random_answer(rng: random.Random, fs: VFS) -> str:
    r = rng.random()
    if r < 0.5:
        return str(rng.randint(0, 300))
    if r < 0.75:
        paths = _all_paths(fs)
        return rng.choice(paths).rsplit("/", 1)[-1] if paths else "none"
    return rng.choice(_RANDOM_WORDS)


def random_command(rng: random.Random, fs: VFS) -> str:
    """A random but well-formed command line over paths that exist (the random baseline)."""
    paths = _all_paths(fs) or ["/"]
    p = rng.choice(paths)
    q = rng.choice(paths)
    word = rng.choice(_RANDOM_WORDS + ("ERROR", "INFO", "WARN", "GET", "a", "e"))
    n = rng.randint(1, 10)
    choices = [
        f"ls {p}", f"ls -la {p}", f"cat {p}", f"head -n {n} {p}", f"tail -n {n} {p}", f"wc -l {p}",
        f"wc -w {p}", f"grep {word} {p}", f"grep -c {word} {p}", f"grep -rn {word} {p}", f"find {p} -type f",
        f"find {p} -name '*.log'", f"sort {p} | uniq -c", f"cut -d' ' -f{n % 4 + 1} {p} | sort -u",
        f"echo {word}", "pwd", f"cd {p}", f"mkdir -p {p}/{word}", f"touch {p}/{word}.txt", f"rm -r {p}",
        f"cp {p} {q}", f"mv {p} {q}", f"echo {word} > {p}", f"ls {p} | wc -l",
    ]
    return rng.choice(choices)


# =========================================================================== task generation

USERS = ("alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy", "mallory", "oscar",
         "peggy", "trent", "victor", "walter")
SERVICES = ("api", "db", "auth", "cache", "mail", "queue", "billing", "search")
PROJECTS = ("atlas", "borealis", "cobalt", "delta", "ember", "falcon", "granite", "harbor", "iris", "juniper")
WORDS = ("alpha", "river", "stone", "cloud", "amber", "lemon", "tiger", "piano", "orbit", "maple", "copper",
         "violet", "harbor", "meadow", "falcon", "silver", "canyon", "breeze", "cedar", "quartz", "sunset", "willow",
         "ember", "glacier", "lantern", "mosaic", "nectar", "onyx", "prism", "saffron", "thistle", "velvet")
MESSAGES = {
    "INFO": ("request served", "user logged in", "job finished", "cache warmed", "config reloaded"),
    "WARN": ("slow response", "retrying connection", "disk usage high", "deprecated call"),
    "ERROR": ("connection refused", "timeout while reading", "permission denied", "out of memory",
              "invalid token"),
    "DEBUG": ("entering handler", "payload parsed", "query planned"),
}
SHELLS = ("/bin/bash", "/bin/sh", "/usr/sbin/nologin", "/bin/zsh")
URL_PATHS = ("/", "/login", "/api/items", "/api/users", "/static/app.js", "/health", "/search", "/cart")
CONF_KEYS = ("port", "workers", "timeout", "max_clients", "retries", "cache_size")


def _ip(rng: random.Random) -> str:
    return f"10.0.{rng.randint(0, 9)}.{rng.randint(1, 254)}"


def app_log(rng: random.Random, n: int, weights=(5, 2, 2, 1), services=SERVICES) -> str:
    lines = []
    t = rng.randint(0, 3600)
    day = rng.randint(1, 28)
    for _ in range(n):
        t += rng.randint(1, 120)
        level = rng.choices(("INFO", "WARN", "ERROR", "DEBUG"), weights=weights)[0]
        svc = rng.choice(services)
        lines.append(f"2024-03-{day:02d} {t // 3600 % 24:02d}:{t // 60 % 60:02d}:{t % 60:02d} {level} {svc}: "
                      f"{rng.choice(MESSAGES[level])}")
    return "\n".join(lines) + "\n"


def access_log(rng: random.Random, ips: list[str], n: int, weights=None) -> str:
    lines = []
    for _ in range(n):
        ip = rng.choices(ips, weights=weights)[0] if weights else rng.choice(ips)
        status = rng.choices((200, 404, 500, 301), weights=(6, 2, 1, 1))[0]
        lines.append(f'{ip} - - [12/Mar/2024:{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00 +0000] '
                     f'"GET {rng.choice(URL_PATHS)} HTTP/1.1" {status} {rng.randint(100, 9000)}')
    return "\n".join(lines) + "\n"


def text_lines(rng: random.Random, n: int, lo: int = 2, hi: int = 7, words=WORDS) -> str:
    return "".join(" ".join(rng.choice(words) for _ in range(rng.randint(lo, hi))) + "\n" for _ in range(n))


def base_fs(rng: random.Random, difficulty: str) -> tuple[dict[str, str], list[str]]:
    """The common skeleton every task adds its own files to (more clutter when harder)."""
    users = rng.sample(USERS, {"easy": 2, "medium": 3, "hard": 4}[difficulty])
    files = {
        "/etc/hostname": f"{rng.choice(PROJECTS)}-{rng.randint(1, 99)}\n",
        "/etc/passwd": "root:x:0:0:root:/root:/bin/bash\n" + "".join(
            f"{u}:x:{1000 + i}:{1000 + i}::/home/{u}:{rng.choice(SHELLS)}\n" for i, u in enumerate(users)),
        "/root/.bashrc": "export PATH=$PATH:/usr/local/bin\nalias ll='ls -l'\n",
    }
    for u in users:
        files[f"/home/{u}/.profile"] = "umask 022\n"
        files[f"/home/{u}/todo.txt"] = text_lines(rng, rng.randint(1, 4))
    if difficulty != "easy":
        proj = rng.choice(PROJECTS)
        for name in rng.sample(("main.py", "util.py", "README.md", "setup.cfg", "Makefile"), 3):
            files[f"/opt/{proj}/{name}"] = text_lines(rng, rng.randint(2, 6))
        files["/var/log/syslog"] = app_log(rng, rng.randint(4, 12))
    if difficulty == "hard":
        files[f"/srv/cache/{rng.choice(WORDS)}.dat"] = text_lines(rng, 3)
    return files, ["/tmp", "/var/log", "/root"]


class _TaskBuilder:
    """Collects one task's filesystem, instruction, check and reference solution."""

    def __init__(self, rng: random.Random, difficulty: str):
        self.rng = rng
        self.difficulty = difficulty
        self.files, self.dirs = base_fs(rng, difficulty)
        self.instruction = ""
        self.check: dict[str, Any] = {}
        self.solution: list[tuple[str, str]] = []
        self.final_think = ""
        self.family = ""

    def fresh_dir(self, parent: str) -> str:
        while True:
            d = f"{parent}/{self.rng.choice(PROJECTS)}{self.rng.randint(1, 9)}"
            if not any(p == d or p.startswith(d + "/") for p in list(self.files) + self.dirs):
                return d

    def answer_int(self, value: int, what: str) -> None:
        self.check = {"kind": "int", "value": int(value)}
        self.final_think = f"The output shows {what} is {value}, so the answer is {value}."

    def answer_str(self, value: str, what: str, also: tuple[str, ...] = ()) -> None:
        self.check = {"kind": "str", "accept": [value, *also]}
        self.final_think = f"The output shows {what} is {value}, so the answer is {value}."

    def state(self, final_think: str, **check) -> None:
        self.check = {"kind": "state", **check}
        self.final_think = final_think


def _log_lines(b: _TaskBuilder) -> int:
    return {"easy": b.rng.randint(6, 14), "medium": b.rng.randint(12, 25), "hard": b.rng.randint(30, 60)}[b.difficulty]


# ---------------------------------------------------------------- question tasks


def t_count_lines(b: _TaskBuilder) -> None:
    path = f"/var/log/{b.rng.choice(SERVICES)}.log"
    b.files[path] = app_log(b.rng, _log_lines(b))
    n = b.files[path].count("\n")
    b.instruction = f"How many lines does the file {path} have?"
    b.solution = [(f"I need the number of lines in {path}; wc -l counts them.", f"wc -l {path}")]
    b.answer_int(n, "the line count")


def t_count_matching(b: _TaskBuilder) -> None:
    path = f"/var/log/{b.rng.choice(SERVICES)}.log"
    level = b.rng.choice(("ERROR", "WARN"))
    text = app_log(b.rng, _log_lines(b))
    n = sum(level in line for line in text.splitlines())
    b.files[path] = text
    b.instruction = f"How many lines of {path} contain {level}?"
    b.solution = [(f"grep -c counts the lines of {path} that contain {level}.", f"grep -c {level} {path}")]
    b.answer_int(n, f"the number of {level} lines")


def t_count_files_flat(b: _TaskBuilder) -> None:
    d = b.fresh_dir("/data")
    k = b.rng.randint(2, 9)
    for name in b.rng.sample(WORDS, k):
        b.files[f"{d}/{name}.txt"] = text_lines(b.rng, b.rng.randint(1, 3))
    b.instruction = f"How many files are in the directory {d}?"
    b.solution = [(f"I can list {d} one name per line and count the lines.", f"ls -1 {d} | wc -l")]
    b.answer_int(k, "the number of files")


def t_word_count(b: _TaskBuilder) -> None:
    path = f"/root/{b.rng.choice(WORDS)}.txt"
    b.files[path] = text_lines(b.rng, b.rng.randint(2, 6))
    n = len(b.files[path].split())
    b.instruction = f"How many words are in {path}?"
    b.solution = [(f"wc -w counts the words in {path}.", f"wc -w {path}")]
    b.answer_int(n, "the word count")


def t_config_value(b: _TaskBuilder) -> None:
    proj = b.rng.choice(PROJECTS)
    path = f"/etc/{proj}.conf"
    keys = b.rng.sample(CONF_KEYS, 4)
    values = {k: b.rng.randint(2, 9000) for k in keys}
    b.files[path] = "# settings\n" + "".join(f"{k}={v}\n" for k, v in values.items())
    key = b.rng.choice(keys)
    b.instruction = f"What is the value of {key} in {path}?"
    b.solution = [(f"I will look for the line that sets {key} in {path}.", f"grep '^{key}=' {path}")]
    b.answer_int(values[key], f"{key}")


def t_count_files_recursive(b: _TaskBuilder) -> None:
    d = b.fresh_dir("/srv")
    n = 0
    for sub in ["", *b.rng.sample(("src", "docs", "tests", "assets"), b.rng.randint(1, 3))]:
        base = f"{d}/{sub}" if sub else d
        b.dirs.append(base)
        for name in b.rng.sample(WORDS, b.rng.randint(0, 4)):
            b.files[f"{base}/{name}.{b.rng.choice(('txt', 'py', 'md'))}"] = "x\n"
            n += 1
        if b.rng.random() < 0.5:
            b.files[f"{base}/.{b.rng.choice(WORDS)}"] = "hidden\n"
            n += 1
    b.instruction = (f"How many regular files are there in {d} and all its subdirectories, hidden files "
                     f"included? Do not count directories.")
    b.solution = [(f"find -type f lists every regular file under {d}, hidden ones too; wc -l counts them.",
                   f"find {d} -type f | wc -l")]
    b.answer_int(n, "the number of files")


def t_count_ext_recursive(b: _TaskBuilder) -> None:
    d = b.fresh_dir("/var/app")
    n = 0
    for sub in ["", "old", "jobs"]:
        base = f"{d}/{sub}" if sub else d
        for name in b.rng.sample(WORDS, b.rng.randint(1, 4)):
            ext = b.rng.choice(("log", "log", "txt", "gz"))
            b.files[f"{base}/{name}.{ext}"] = "line\n"
            n += ext == "log"
    if n == 0:
        b.files[f"{d}/main.log"] = "line\n"
        n = 1
    b.instruction = f"How many files ending in .log are there under {d}, at any depth?"
    b.solution = [(f"find with -name '*.log' lists the .log files under {d}; wc -l counts them.",
                   f"find {d} -type f -name '*.log' | wc -l")]
    b.answer_int(n, "the number of .log files")


def t_largest_file(b: _TaskBuilder) -> None:
    d = b.fresh_dir("/data")
    names = b.rng.sample(WORDS, b.rng.randint(3, 6))
    sizes = b.rng.sample(range(5, 400), len(names))
    for name, size in zip(names, sizes):
        b.files[f"{d}/{name}.bin"] = ("z" * (size - 1)) + "\n"
    big = names[sizes.index(max(sizes))] + ".bin"
    b.instruction = f"Which file in {d} is the largest? Answer with its file name only."
    b.solution = [(f"ls -S sorts the files in {d} by size, largest first; the first line is the answer.",
                   f"ls -S {d} | head -n 1")]
    b.answer_str(big, "the largest file", also=(f"{d}/{big}",))


def _ips(b: _TaskBuilder, k: int) -> list[str]:
    ips: list[str] = []
    while len(ips) < k:
        ip = _ip(b.rng)
        if ip not in ips:
            ips.append(ip)
    return ips


def t_count_distinct_ips(b: _TaskBuilder) -> None:
    path = "/var/log/nginx/access.log"
    ips = _ips(b, b.rng.randint(3, 9))
    text = access_log(b.rng, ips, _log_lines(b))
    n = len({line.split()[0] for line in text.splitlines()})
    b.files[path] = text
    b.instruction = f"How many distinct IP addresses appear in {path}? The IP is the first field of each line."
    b.solution = [("I will cut the first field, keep unique values and count them.",
                   f"cut -d' ' -f1 {path} | sort -u | wc -l")]
    b.answer_int(n, "the number of distinct IPs")


def t_find_and_read(b: _TaskBuilder) -> None:
    d = b.fresh_dir("/home")
    name = f"{b.rng.choice(('key', 'token', 'secret', 'code'))}.txt"
    depth = [b.rng.choice(("a", "b", "c", "docs", "misc")) for _ in range(b.rng.randint(1, 3))]
    path = f"{d}/{'/'.join(depth)}/{name}"
    value = f"{b.rng.choice(WORDS)}{b.rng.randint(100, 999)}"
    b.files[path] = value + "\n"
    b.files[f"{d}/readme.txt"] = "nothing here\n"
    b.instruction = f"A file named {name} is somewhere under {d}. What does it contain?"
    b.solution = [(f"First I locate {name} under {d} with find.", f"find {d} -name {name}"),
                  (f"find shows it is at {path}; now I read it.", f"cat {path}")]
    b.answer_str(value, "its content")


def t_csv_lookup(b: _TaskBuilder) -> None:
    path = f"/data/{b.rng.choice(('staff', 'team', 'people'))}.csv"
    people = b.rng.sample(USERS, b.rng.randint(4, 8))
    rows = {p: (b.rng.choice(("eng", "ops", "sales")), b.rng.randint(30, 150) * 1000) for p in people}
    b.files[path] = "name,dept,salary\n" + "".join(f"{p},{d},{s}\n" for p, (d, s) in rows.items())
    who = b.rng.choice(people)
    b.instruction = f"In {path}, what is the salary of {who}?"
    b.solution = [(f"I take {who}'s row and cut the third comma-separated field.",
                   f"grep '^{who},' {path} | cut -d, -f3")]
    b.answer_int(rows[who][1], f"{who}'s salary")


def t_passwd_shell(b: _TaskBuilder) -> None:
    shell = b.rng.choice(("/bin/bash", "/usr/sbin/nologin"))
    n = sum(line.endswith(":" + shell) for line in b.files["/etc/passwd"].splitlines())
    b.instruction = f"How many accounts in /etc/passwd have {shell} as their login shell?"
    b.solution = [(f"The shell is the last field of /etc/passwd; I count lines ending in :{shell}.",
                   f"grep -c ':{shell}$' /etc/passwd")]
    b.answer_int(n, "the number of accounts")


def t_most_frequent_ip(b: _TaskBuilder) -> None:
    path = "/var/log/nginx/access.log"
    ips = _ips(b, b.rng.randint(4, 8))
    while True:
        text = access_log(b.rng, ips, _log_lines(b), weights=[b.rng.randint(1, 6) for _ in ips])
        counts: dict[str, int] = {}
        for line in text.splitlines():
            counts[line.split()[0]] = counts.get(line.split()[0], 0) + 1
        top = sorted(counts.values(), reverse=True)
        if len(top) == 1 or top[0] > top[1]:
            break
    best = max(counts, key=counts.get)
    b.files[path] = text
    b.instruction = f"Which IP address made the most requests in {path}? The IP is the first field."
    b.solution = [("I count requests per IP with sort | uniq -c and sort the counts, largest first.",
                   f"cut -d' ' -f1 {path} | sort | uniq -c | sort -n -r | head -n 1")]
    b.answer_str(best, "the most frequent IP")


def t_distinct_ips_status(b: _TaskBuilder) -> None:
    path = "/var/log/nginx/access.log"
    ips = _ips(b, b.rng.randint(4, 9))
    while True:
        text = access_log(b.rng, ips, _log_lines(b))
        hit = {line.split()[0] for line in text.splitlines() if '" 404 ' in line}
        if hit:
            break
    b.files[path] = text
    b.instruction = f"How many distinct IP addresses received a 404 response in {path}?"
    b.solution = [("I keep the 404 lines, cut the IP field, and count the unique values.",
                   f"grep '\" 404 ' {path} | cut -d' ' -f1 | sort -u | wc -l")]
    b.answer_int(len(hit), "the number of distinct IPs")


def t_recursive_error_count(b: _TaskBuilder) -> None:
    d = b.fresh_dir("/var/log")
    n = 0
    for sub in ("", "old", "archive"):
        for svc in b.rng.sample(SERVICES, 2):
            text = app_log(b.rng, b.rng.randint(5, 20))
            b.files[f"{d}/{sub}/{svc}.log" if sub else f"{d}/{svc}.log"] = text
            n += sum("ERROR" in line for line in text.splitlines())
    b.instruction = f"How many lines containing ERROR are there in all files under {d}, subdirectories included?"
    b.solution = [(f"grep -r searches every file under {d}; wc -l counts the matching lines.",
                   f"grep -r ERROR {d} | wc -l")]
    b.answer_int(n, "the number of ERROR lines")


def t_files_containing(b: _TaskBuilder) -> None:
    d = b.fresh_dir("/home/shared")
    word = b.rng.choice(("URGENT", "TODO", "FIXME"))
    n = 0
    for sub in ("", "notes", "mail"):
        for name in b.rng.sample(WORDS, b.rng.randint(2, 4)):
            text = text_lines(b.rng, b.rng.randint(1, 4))
            if b.rng.random() < 0.4:
                text += f"{word}: {b.rng.choice(WORDS)}\n"
                n += 1
            b.files[f"{d}/{sub}/{name}.txt" if sub else f"{d}/{name}.txt"] = text
    b.instruction = f"How many files under {d} (at any depth) contain the word {word}?"
    b.solution = [(f"grep -rl lists each file under {d} that contains {word} once; wc -l counts them.",
                   f"grep -rl {word} {d} | wc -l")]
    b.answer_int(n, "the number of files")


def t_top_error_service(b: _TaskBuilder) -> None:
    path = f"/var/log/{b.rng.choice(PROJECTS)}.log"
    services = b.rng.sample(SERVICES, 4)
    while True:
        text = app_log(b.rng, _log_lines(b), weights=(3, 2, 4, 1), services=services)
        counts: dict[str, int] = {}
        for line in text.splitlines():
            if " ERROR " in line:
                svc = line.split()[3].rstrip(":")
                counts[svc] = counts.get(svc, 0) + 1
        top = sorted(counts.values(), reverse=True)
        if top and (len(top) == 1 or top[0] > top[1]):
            break
    best = max(counts, key=counts.get)
    b.files[path] = text
    b.instruction = (f"Which service logged the most ERROR lines in {path}? The service is the word before "
                     f"the colon; answer with the service name.")
    b.solution = [("I keep the ERROR lines, cut the service field, and count each service.",
                   f"grep ERROR {path} | cut -d' ' -f4 | sort | uniq -c | sort -n -r | head -n 1")]
    b.answer_str(best, "the service with the most errors", also=(best + ":",))


# ---------------------------------------------------------------- change tasks


def t_create_file(b: _TaskBuilder) -> None:
    path = f"/root/{b.rng.choice(WORDS)}.txt"
    while path in b.files:
        path = f"/root/{b.rng.choice(WORDS)}{b.rng.randint(1, 9)}.txt"
    text = f"{b.rng.choice(WORDS)} {b.rng.choice(WORDS)} {b.rng.randint(1, 99)}"
    b.instruction = f"Create the file {path} containing exactly one line: {text}"
    b.solution = [(f"echo writes the line and > creates {path}.", f"echo '{text}' > {path}")]
    b.state(f"{path} now holds the line, so I am done.", files={path: text + "\n"})


def t_make_dir(b: _TaskBuilder) -> None:
    d = b.fresh_dir("/srv") + f"/{b.rng.choice(('logs', 'cache', 'build'))}/{b.rng.choice(WORDS)}"
    b.instruction = f"Create the directory {d}, including any missing parent directories."
    b.solution = [("mkdir -p creates the directory and its missing parents.", f"mkdir -p {d}")]
    b.state(f"{d} exists now, so I am done.", dirs=[d])


def t_copy_file(b: _TaskBuilder) -> None:
    src = f"/etc/{b.rng.choice(PROJECTS)}.conf"
    b.files[src] = "".join(f"{k}={b.rng.randint(1, 999)}\n" for k in b.rng.sample(CONF_KEYS, 3))
    dst = f"/root/{src.rsplit('/', 1)[1]}.bak"
    b.instruction = f"Copy {src} to {dst}."
    b.solution = [(f"cp copies {src} to {dst}.", f"cp {src} {dst}")]
    b.state(f"{dst} is a copy of {src} now.", files={dst: b.files[src], src: b.files[src]})


def t_remove_file(b: _TaskBuilder) -> None:
    d = b.fresh_dir("/tmp")
    names = b.rng.sample(WORDS, 3)
    for name in names:
        b.files[f"{d}/{name}.tmp"] = "scratch\n"
    target = f"{d}/{names[0]}.tmp"
    keep = {f"{d}/{n}.tmp": "scratch\n" for n in names[1:]}
    b.instruction = f"Delete the file {target} and nothing else."
    b.solution = [(f"rm removes {target}.", f"rm {target}")]
    b.state(f"{target} is gone and the other files are untouched.", absent=[target], files=keep)


def t_rename_file(b: _TaskBuilder) -> None:
    d = b.fresh_dir("/data")
    old, new = b.rng.sample(WORDS, 2)
    content = text_lines(b.rng, 2)
    b.files[f"{d}/{old}.txt"] = content
    b.instruction = f"Rename {d}/{old}.txt to {d}/{new}.txt."
    b.solution = [("mv renames the file.", f"mv {d}/{old}.txt {d}/{new}.txt")]
    b.state("The file has its new name now.", files={f"{d}/{new}.txt": content}, absent=[f"{d}/{old}.txt"])


def t_move_by_ext(b: _TaskBuilder) -> None:
    d = b.fresh_dir("/var/app")
    moved, kept = {}, {}
    for name in b.rng.sample(WORDS, b.rng.randint(3, 6)):
        ext = b.rng.choice(("log", "txt", "log", "conf"))
        content = f"{name} {b.rng.randint(1, 999)}\n"
        b.files[f"{d}/{name}.{ext}"] = content
        (moved if ext == "log" else kept)[f"{d}/{name}.{ext}"] = content
    if not moved:
        b.files[f"{d}/main.log"] = moved[f"{d}/main.log"] = "main 1\n"
    arch = f"{d}/archive"
    b.instruction = f"Move every .log file directly inside {d} into a new directory {arch}."
    b.solution = [(f"I create {arch} and move the .log files into it with a glob.",
                   f"mkdir -p {arch} && mv {d}/*.log {arch}/")]
    files = dict(kept)
    files.update({f"{arch}/{p.rsplit('/', 1)[1]}": c for p, c in moved.items()})
    b.state("All .log files are in the archive now and the others stayed.", files=files, absent=list(moved),
            dirs=[arch])


def t_write_count(b: _TaskBuilder) -> None:
    path = f"/var/log/{b.rng.choice(SERVICES)}.log"
    text = app_log(b.rng, _log_lines(b))
    n = sum("ERROR" in line for line in text.splitlines())
    b.files[path] = text
    out = f"/root/{b.rng.choice(('errors', 'count', 'result'))}.txt"
    b.instruction = f"Count the lines containing ERROR in {path} and write just that number to {out}."
    b.solution = [(f"grep -c counts the ERROR lines; > writes the number to {out}.", f"grep -c ERROR {path} > {out}")]
    b.state(f"{out} holds the count now.", strip={out: str(n)})


def t_filter_to_file(b: _TaskBuilder) -> None:
    path = f"/var/log/{b.rng.choice(SERVICES)}.log"
    text = app_log(b.rng, _log_lines(b), weights=(4, 3, 2, 1))
    level = "WARN" if "WARN" in text else "INFO"
    b.files[path] = text
    out = f"/root/{level.lower()}.log"
    keep = "".join(line + "\n" for line in text.splitlines() if level in line)
    b.instruction = f"Save every line of {path} that contains {level} into {out}, keeping their order."
    b.solution = [(f"grep selects the {level} lines in order and > saves them to {out}.",
                   f"grep {level} {path} > {out}")]
    b.state(f"{out} has the {level} lines now.", files={out: keep, path: text})


def t_backup_conf(b: _TaskBuilder) -> None:
    proj = b.rng.choice(PROJECTS)
    src = f"/etc/{proj}.conf"
    b.files[src] = "".join(f"{k}={b.rng.randint(1, 999)}\n" for k in b.rng.sample(CONF_KEYS, 3))
    d = f"/root/backup/{b.rng.choice(('daily', 'conf', 'old'))}"
    dst = f"{d}/{proj}.conf.bak"
    b.instruction = f"Make a backup copy of {src} at {dst}; create the directory if it does not exist."
    b.solution = [(f"I create {d} with its parents, then copy the file.", f"mkdir -p {d} && cp {src} {dst}")]
    b.state("The backup is in place.", files={dst: b.files[src], src: b.files[src]})


def t_delete_tmp(b: _TaskBuilder) -> None:
    d = b.fresh_dir("/srv/build")
    removed, kept = [], {}
    for sub in ("", "obj", "obj/deep", "dist"):
        for name in b.rng.sample(WORDS, b.rng.randint(1, 3)):
            ext = b.rng.choice(("tmp", "o", "tmp", "txt"))
            path = f"{d}/{sub}/{name}.{ext}" if sub else f"{d}/{name}.{ext}"
            b.files[path] = f"{name}\n"
            if ext == "tmp":
                removed.append(path)
            else:
                kept[path] = f"{name}\n"
    if not removed:
        b.files[f"{d}/cache.tmp"] = "cache\n"
        removed.append(f"{d}/cache.tmp")
    b.instruction = f"Delete every file ending in .tmp anywhere under {d}; keep all other files."
    b.solution = [(f"find can select the .tmp files under {d} at any depth and delete them.",
                   f"find {d} -type f -name '*.tmp' -delete")]
    b.state("Only the .tmp files were deleted.", absent=removed, files=kept)


def t_sorted_unique(b: _TaskBuilder) -> None:
    path = "/var/log/nginx/access.log"
    ips = _ips(b, b.rng.randint(3, 8))
    text = access_log(b.rng, ips, _log_lines(b))
    b.files[path] = text
    out = "/root/ips.txt"
    uniq = sorted({line.split()[0] for line in text.splitlines()})
    b.instruction = f"Write the distinct IP addresses of {path} (first field), sorted, one per line, to {out}."
    b.solution = [("I cut the IP field, sort -u keeps each once in order, and > writes the file.",
                   f"cut -d' ' -f1 {path} | sort -u > {out}")]
    b.state(f"{out} holds the sorted distinct IPs.", files={out: "".join(ip + "\n" for ip in uniq)})


def t_move_by_content(b: _TaskBuilder) -> None:
    d = b.fresh_dir("/home/inbox")
    word = "URGENT"
    hits, others = {}, {}
    for name in b.rng.sample(WORDS, b.rng.randint(4, 7)):
        text = text_lines(b.rng, b.rng.randint(1, 3))
        if b.rng.random() < 0.45:
            text += f"{word}: reply today\n"
            hits[f"{d}/{name}.txt"] = text
        else:
            others[f"{d}/{name}.txt"] = text
        b.files[f"{d}/{name}.txt"] = text
    if not hits:
        b.files[f"{d}/boss.txt"] = hits[f"{d}/boss.txt"] = f"{word}: call back\n"
    dest = f"{d}/urgent"
    names = " ".join(sorted(hits))
    b.instruction = f"Move every file in {d} that contains the word {word} into a new directory {dest}."
    b.solution = [(f"First I list the files in {d} that contain {word}.", f"grep -l {word} {d}/*"),
                  (f"grep listed {len(hits)} file(s); I create {dest} and move them there.",
                   f"mkdir -p {dest} && mv {names} {dest}/")]
    files = dict(others)
    files.update({f"{dest}/{p.rsplit('/', 1)[1]}": c for p, c in hits.items()})
    b.state(f"The {word} files are in {dest} now.", files=files, absent=list(hits), dirs=[dest])


FAMILIES: dict[str, tuple] = {
    "easy": (t_count_lines, t_count_matching, t_count_files_flat, t_word_count, t_config_value,
             t_create_file, t_make_dir, t_copy_file, t_remove_file, t_rename_file),
    "medium": (t_count_files_recursive, t_count_ext_recursive, t_largest_file, t_count_distinct_ips,
               t_find_and_read, t_csv_lookup, t_passwd_shell, t_move_by_ext, t_write_count, t_filter_to_file,
               t_backup_conf),
    "hard": (t_most_frequent_ip, t_distinct_ips_status, t_recursive_error_count, t_files_containing,
             t_top_error_service, t_delete_tmp, t_sorted_unique, t_move_by_content),
}


def generate(rng: random.Random, difficulty: str, index: int) -> Task:
    family = FAMILIES[difficulty][index % len(FAMILIES[difficulty])]  # cycle: every family equally often
    b = _TaskBuilder(rng, difficulty)
    family(b)
    tag = f"{rng.getrandbits(32):08x}"
    return Task(
        id=f"os-{difficulty}-{index:05d}-{tag}",
        domain="os",
        instruction=b.instruction,
        spec={"files": b.files, "dirs": sorted(set(b.dirs)), "cwd": HOME, "check": b.check,
              "solution": [list(s) for s in b.solution], "final_think": b.final_think},
        answer=b.check.get("value", (b.check.get("accept") or [None])[0]),
        difficulty=difficulty,
        meta={"family": family.__name__[2:], "kind": "answer" if b.check["kind"] != "state" else "change"},
    )


register_domain("os", OSEnv, generate)

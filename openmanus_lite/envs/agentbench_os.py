"""AgentBench OS (`os_interaction`) tasks in the virtual shell: importer, sandbox image and grader.

An AgentBench OS task (THUDM/AgentBench, data/os_interaction) is a description, a `create.init`
script (code or a file), an optional `start` command, and an evaluation: `match` (the answer
string, stripped, equals the label, or a regex finds it) or `check` (a list of scripts run one
after another with the answer and every previous script's output as arguments; `null` stands
for the task's `example` script; any non-zero exit fails the task). We replay that here:

- the sandbox is the kit's virtual shell over a small Ubuntu-like image (`BASE_FILES`): users and
  groups are the /etc/passwd and /etc/group files with `getent`, `useradd`, `groups` over them,
  `nproc` answers NPROC, commands are found on $PATH, and `python3 -c` evaluates `print(...)` of
  arithmetic (what AgentBench's calc tasks run); init scripts run as separate processes would, in a
  child shell at / over the same files;
- the checkers AgentBench ships as Python (integer-match, string-match, size-match, containing,
  in) are reimplemented in `CHECKERS` with their exact semantics (Python's `int()`, a parse error
  fails the check); bash check scripts run in the sandbox;
- a task the sandbox cannot host (a background process, switching user, an init script the shell
  cannot run, an example solution that does not pass) is rejected with its reason, never dropped.

The OS environment (`os_shell.OSEnv`) plays these tasks when `spec["agentbench"]` is present.
"""

from __future__ import annotations

import ast
import json
import operator
import re
from pathlib import Path
from typing import Any, Callable

from openmanus_lite.envs.base import expert_turn
from openmanus_lite.envs.shell.interpreter import VFS, FSError, Input, Shell, Sink, getopts, split_path
from openmanus_lite.paths import DATA_DIR
from openmanus_lite.react import answer, bash
from openmanus_lite.schema import Task

SUITE_NAME = "agentbench_os"
SOURCE_DIR = DATA_DIR / "benchmark" / SUITE_NAME / "source"
"""AgentBench's dev.json and the scripts it references, as shipped upstream (Apache-2.0, see NOTICE.md)."""
NPROC = 4
ACTION_DEADLINE_S = 2.0
"""Wall-clock budget of one agent action here (the kit's shell allows 0.5 s; AgentBench's loops over users need
more on a loaded CPU, and a suite of 19 tasks can afford it)."""
PROCESS_DEADLINE_S = 10.0
"""Budget of an init, example or check script: a timeout there would misgrade the task, not stop a runaway agent."""

_PASSWD = """root:x:0:0:root:/root:/bin/bash
daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin
bin:x:2:2:bin:/bin:/usr/sbin/nologin
sys:x:3:3:sys:/dev:/usr/sbin/nologin
sync:x:4:65534:sync:/bin:/bin/sync
games:x:5:60:games:/usr/games:/usr/sbin/nologin
man:x:6:12:man:/var/cache/man:/usr/sbin/nologin
lp:x:7:7:lp:/var/spool/lpd:/usr/sbin/nologin
mail:x:8:8:mail:/var/mail:/usr/sbin/nologin
news:x:9:9:news:/var/spool/news:/usr/sbin/nologin
uucp:x:10:10:uucp:/var/spool/uucp:/usr/sbin/nologin
proxy:x:13:13:proxy:/bin:/usr/sbin/nologin
www-data:x:33:33:www-data:/var/www:/usr/sbin/nologin
backup:x:34:34:backup:/var/backups:/usr/sbin/nologin
list:x:38:38:Mailing List Manager:/var/list:/usr/sbin/nologin
irc:x:39:39:ircd:/run/ircd:/usr/sbin/nologin
gnats:x:41:41:Gnats Bug-Reporting System (admin):/var/lib/gnats:/usr/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
_apt:x:100:65534::/nonexistent:/usr/sbin/nologin
"""
_GROUPS = ("root:0 daemon:1 bin:2 sys:3 adm:4 tty:5 disk:6 lp:7 mail:8 news:9 uucp:10 man:12 proxy:13 kmem:15 "
           "dialout:20 fax:21 voice:22 cdrom:24 floppy:25 tape:26 sudo:27 audio:29 dip:30 www-data:33 backup:34 "
           "operator:37 list:38 irc:39 src:40 gnats:41 shadow:42 utmp:43 video:44 sasl:45 plugdev:46 staff:50 "
           "games:60 users:100 nogroup:65534")
BASE_FILES = {
    "/etc/passwd": _PASSWD,
    "/etc/group": "".join(f"{g.replace(':', ':x:')}:\n" for g in _GROUPS.split()),
    "/etc/hostname": "agentbench\n",
    "/etc/os-release": 'NAME="Ubuntu"\nVERSION_ID="22.04"\nID=ubuntu\n',
    "/etc/skel/.bashrc": "# ~/.bashrc\n", "/etc/skel/.profile": "# ~/.profile\n",
    "/root/.bashrc": "# ~/.bashrc\n", "/root/.profile": "# ~/.profile\n",
    "/proc/sys/kernel/threads-max": "254591\n",
}
"""The sandbox image, modelled on the ubuntu Docker image AgentBench's default container starts from."""
BASE_DIRS = ["/bin", "/boot", "/dev", "/home", "/lib", "/media", "/mnt", "/opt", "/run", "/sbin", "/srv", "/sys",
             "/tmp", "/usr/bin", "/usr/lib", "/usr/local/bin", "/usr/sbin", "/usr/share", "/var/log", "/var/tmp"]

_BACKGROUND = re.compile(r"(?<![&>|])&(?![&>\d])")
"""A `&` that sends a command to the background (not `&&`, `2>&1`, `&>`, `>&2`)."""
_SWITCH_USER = re.compile(r"(^|[;&|]\s*)su(\s|$)", re.MULTILINE)


class SandboxError(Exception):
    """The sandbox cannot host a task; the message is the reason the importer reports."""


# =========================================================================== the sandbox


class SandboxShell(Shell):
    """The virtual shell plus what AgentBench's container has and the plain shell leaves out."""

    run_deadline_s = ACTION_DEADLINE_S

    def __init__(self, fs: VFS, cwd: str = "/root"):
        super().__init__(fs, cwd)
        self.commands.update({"getent": self.getent, "useradd": self.useradd, "groups": self.groups,
                              "nproc": self.nproc, "python3": self.python, "python": self.python})

    def process(self, cwd: str = "/") -> "SandboxShell":
        """A new process in the same container: the same files, fresh variables (docker exec's view)."""
        proc = SandboxShell(self.fs, cwd)
        proc.run_deadline_s = PROCESS_DEADLINE_S
        return proc

    def run_argv(self, argv: list[str], inp: Input, sink: Sink) -> int:
        name = argv[0]
        if "/" not in name and not any(name in d for d in (self.functions, self.specials, self.commands)):
            for d in self.vars.get("PATH", "").split(":"):
                if d and self.fs.is_file(split_path(f"{d}/{name}", "/")):
                    argv = [f"{d}/{name}", *argv[1:]]
                    break
        return super().run_argv(argv, inp, sink)

    # ------------------------------------------------------------------ users and groups
    def _table(self, path: str) -> list[list[str]]:
        try:
            return [line.split(":") for line in self.fs.read(split_path(path, "/")).splitlines() if line]
        except FSError:
            return []

    def getent(self, args: list[str], stdin: str):
        if not args or args[0] not in ("passwd", "group"):
            return "", f"Unknown database: {args[0] if args else ''}\n", 1
        rows = self._table(f"/etc/{args[0]}")
        if len(args) == 1:
            return "".join(":".join(r) + "\n" for r in rows), "", 0
        found = [next((r for r in rows if key in (r[0], r[2])), None) for key in args[1:]]
        return "".join(":".join(r) + "\n" for r in found if r), "", 0 if all(found) else 2

    def groups(self, args: list[str], stdin: str):
        users = {r[0]: r for r in self._table("/etc/passwd")}
        out, err = [], []
        for user in args or ["root"]:
            if user not in users:
                err.append(f"groups: '{user}': no such user\n")
                continue
            gid = users[user][3]
            names = [g[0] for g in self._table("/etc/group") if g[2] == gid]
            names += [g[0] for g in self._table("/etc/group")
                      if len(g) > 3 and g[2] != gid and user in g[3].split(",")]
            out.append(f"{user} : {' '.join(names)}\n" if args else " ".join(names) + "\n")
        return "".join(out), "".join(err), 1 if err else 0

    def useradd(self, args: list[str], stdin: str):
        opts, operands = getopts("useradd", args, "mMNrU", "sGdgucek")
        if len(operands) != 1:
            return "", "Usage: useradd [options] LOGIN\n", 2
        name = operands[0]
        passwd, groups = self._table("/etc/passwd"), self._table("/etc/group")
        if not re.fullmatch(r"[a-z_][a-z0-9_-]*\$?", name):
            return "", f"useradd: invalid user name '{name}'\n", 3
        if any(r[0] == name for r in passwd):
            return "", f"useradd: user '{name}' already exists\n", 9
        extra = [g for v in opts.get("G", []) for g in v.split(",") if g]
        missing = [g for g in extra if not any(r[0] == g or r[2] == g for r in groups)]
        if missing:
            return "", f"useradd: group '{missing[0]}' does not exist\n", 6
        used = {int(r[2]) for r in passwd + groups if r[2].isdigit()}
        uid = next(i for i in range(1000, 60000) if i not in used)
        home = (opts.get("d") or [f"/home/{name}"])[-1]
        shell = (opts.get("s") or ["/bin/sh"])[-1]
        passwd.append([name, "x", str(uid), str(uid), "", home, shell])
        for r in groups:
            if r[0] in extra or r[2] in extra:
                r[3] = ",".join([m for m in r[3].split(",") if m] + [name])
        groups.append([name, "x", str(uid), ""])
        try:
            self.fs.write(split_path("/etc/passwd", "/"), "".join(":".join(r) + "\n" for r in passwd))
            self.fs.write(split_path("/etc/group", "/"), "".join(":".join(r) + "\n" for r in groups))
            if opts.get("m") and self.fs.get(split_path(home, "/")) is None:
                self.fs.mkdir(split_path(home, "/"), parents=True)
                for dot, text in (self.fs.get(split_path("/etc/skel", "/")) or {}).items():
                    self.fs.write(split_path(f"{home}/{dot}", "/"), text)
        except FSError as e:
            return "", f"useradd: {e.reason}\n", 1
        return "", "", 0

    def nproc(self, args: list[str], stdin: str):
        return f"{NPROC}\n", "", 0

    # ------------------------------------------------------------------ python3 -c 'print(<arithmetic>)'
    def python(self, args: list[str], stdin: str):
        if len(args) < 2 or args[0] != "-c":
            return "", "python3: only `python3 -c 'print(<arithmetic>)'` runs in this sandbox\n", 1
        try:
            tree = ast.parse(args[1])
        except SyntaxError as e:
            return "", f"  File \"<string>\", line {e.lineno}\nSyntaxError: {e.msg}\n", 1
        out = []
        try:
            for stmt in tree.body:
                call = stmt.value if isinstance(stmt, ast.Expr) else None
                if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "print"
                        and not call.keywords):
                    raise _Unsupported
                out.append(" ".join(str(_py_eval(a)) for a in call.args) + "\n")
        except _Unsupported:
            return "".join(out), "python3: only print(<arithmetic>) runs in this sandbox\n", 1
        except (ArithmeticError, ValueError, TypeError) as e:
            return "".join(out), f"Traceback (most recent call last):\n{type(e).__name__}: {e}\n", 1
        return "".join(out), "", 0


class _Unsupported(Exception):
    pass


_PY_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
              ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
_PY_CMP = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
           ast.Eq: operator.eq, ast.NotEq: operator.ne}
_PY_FUNCS = {"abs": abs, "round": round, "int": int, "float": float, "str": str, "min": min, "max": max}


def _py_eval(node):
    """Python's own semantics for numbers, comparisons and '%' formatting; nothing else (no names, no
    attributes, no string repetition), so nothing can grow without bound or reach the host."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str)):
        return node.value
    if isinstance(node, ast.Tuple):
        return tuple(_py_eval(e) for e in node.elts)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd, ast.Not)):
        v = _py_eval(node.operand)
        return -v if isinstance(node.op, ast.USub) else (+v if isinstance(node.op, ast.UAdd) else not v)
    if isinstance(node, ast.BinOp) and type(node.op) in _PY_BINOPS:
        a, b = _py_eval(node.left), _py_eval(node.right)
        if isinstance(node.op, ast.Mult) and (isinstance(a, str) or isinstance(b, str)):
            raise _Unsupported
        if isinstance(a, str) and re.search(r"%[-+ #0]*(\*|\d{4}|\d*\.(\*|\d{4}))", a):
            raise _Unsupported  # a width or precision that could fill memory
        return _PY_BINOPS[type(node.op)](a, b)
    if isinstance(node, ast.Compare) and all(type(op) in _PY_CMP for op in node.ops):
        left = _py_eval(node.left)
        for op, right_node in zip(node.ops, node.comparators):
            right = _py_eval(right_node)
            if not _PY_CMP[type(op)](left, right):
                return False
            left = right
        return True
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _PY_FUNCS
            and not node.keywords):
        return _PY_FUNCS[node.func.id](*[_py_eval(a) for a in node.args])
    raise _Unsupported


def run_script(shell: SandboxShell, script: list[str] | dict, params: list[str],
               cwd: str = "/") -> tuple[int, str, str]:
    """Run one AgentBench script as its own process (AgentBench's `execute_independent`): (status, stdout, stderr).

    Bash scripts run at `cwd` over the task's files, `params` as $1..; a checker is one of `CHECKERS`."""
    if isinstance(script, dict):
        return (0 if CHECKERS[script["checker"]](*params[:2]) else 1), "", ""
    lang, code = script
    if lang != "bash":
        raise SandboxError(f"language: it needs a {lang} script, and the sandbox runs bash and AgentBench's "
                           f"checkers only")
    proc = shell.process(cwd)
    proc.params = list(params)
    out, err, status = proc.run_streams(code)
    return status, out, err


def sandbox(spec: dict) -> SandboxShell:
    """A fresh sandbox for the task: the image, then its init scripts and start command, which must succeed."""
    shell = SandboxShell(VFS.from_spec(BASE_FILES, BASE_DIRS))
    for script in spec["init"]:
        status, _, err = run_script(shell, script, [])
        if status != 0:
            first = err.strip().splitlines()[0] if err.strip() else f"exit status {status}"
            raise SandboxError(f"init: its init script fails in the sandbox ({first})")
    if spec["start"]:
        out, status = shell.run(spec["start"][1])
        if status != 0:
            raise SandboxError(f"start: its start command fails in the sandbox ({out.strip()[:120]})")
    return shell


# =========================================================================== grading


def _lines_normal(s: str) -> str:
    return s.replace("\r\n", "\n").replace("\r", "\n").strip()


def _size(text: str) -> int:
    """AgentBench's size parser: the first unit (in its table's order) the text ends with, times int()."""
    text = text.strip()
    for unit, factor in _SIZE_UNITS:
        if text.endswith(unit):
            return int(text[: -len(unit)]) * factor
    return int(text)


_SIZE_UNITS = [(u, 1024 ** p) for p, units in enumerate(
    (("B", "Byte"), ("K", "KB"), ("M", "MB"), ("G", "GB"), ("T", "TB"), ("P", "PB"))) for u in units]


def _safe(check: Callable[[str, str], bool]) -> Callable[[str, str], bool]:
    """A checker script that raises exits non-zero: the check fails."""
    def run(answer_text: str, expected: str) -> bool:
        try:
            return bool(check(answer_text, expected))
        except (ValueError, TypeError):
            return False
    return run


CHECKERS: dict[str, Callable[[str, str], bool]] = {
    "integer-match": _safe(lambda a, b: int(a) == int(b)),
    "string-match": _safe(lambda a, b: _lines_normal(a) == _lines_normal(b)),
    "size-match": _safe(lambda a, b: _size(a) == _size(b)),
    "containing": _safe(lambda a, b: _lines_normal(b) in _lines_normal(a)),
    "in": _safe(lambda a, b: _lines_normal(a) in _lines_normal(b)),
}
"""AgentBench's check/*.py, called with (answer, example output)."""


def grade(spec: dict, answer_text: str | None, shell: SandboxShell) -> bool:
    """AgentBench's verdict on the episode's answer in the episode's final sandbox."""
    if spec["match"] is not None:
        match = spec["match"]
        if answer_text is None:
            return False
        got = answer_text.strip() if match.get("strip", True) else answer_text
        return got == match["answer"] if "answer" in match else bool(re.search(match.get("regex", "(?!)"), got))
    params = [str(answer_text)]
    for script in spec["check"]:
        status, out, _ = run_script(shell, script if script is not None else spec["example"], params)
        if status != 0:
            return False
        params.append(out)
    return True


# =========================================================================== the expert


def expert_answer(spec: dict, shell: SandboxShell) -> str:
    """What the example solution answers: the example's output when the check compares with it, 'done' when
    a check script inspects the final state, the label of a match task."""
    if spec["match"] is not None:
        return spec["match"].get("answer", "")
    if None in spec["check"]:
        return run_script(shell, spec["example"], [], cwd=shell.cwd)[1].strip()
    return "done"


def expert_action(spec: dict, shell: SandboxShell, executed: list[str]) -> str:
    example = spec["example"]
    if example is not None and example[1] not in executed:
        return expert_turn("I will run the commands that solve this.", bash(example[1]))
    value = expert_answer(spec, shell)
    return expert_turn(f"The output gives me the answer: {value}." if value != "done" else "The task is done.",
                       answer(value))


def wrong_answer(right: str) -> str:
    """An answer AgentBench's checkers reject when `right` is the expected one (for faithfulness tests)."""
    m = re.fullmatch(r"(-?\d+)(\D*)", right.strip())
    return f"{int(m.group(1)) + 1}{m.group(2)}" if m else "wrong"


# =========================================================================== importing


def _script(obj, script_dir: Path):
    """An AgentBench script object -> [language, code], or {'checker': name} for its Python checkers."""
    if obj is None:
        return None
    if isinstance(obj, str):
        return ["bash", obj]
    lang = obj.get("language", "bash")
    if "file" in obj:
        if lang == "python" and Path(obj["file"]).stem in CHECKERS:
            return {"checker": Path(obj["file"]).stem}
        return [lang, (script_dir / obj["file"]).read_text(encoding="utf-8")]
    if "code" in obj:
        return [lang, obj["code"]]
    raise ValueError(f"invalid script object {obj!r}")


def parse_task(item: dict, script_dir: Path) -> dict:
    """One dev.json entry -> the spec this module runs (AgentBench's own reading of the format: `create` without
    'init' has no init script; `example` counts only beside `check`)."""
    create = item.get("create")
    init = create.get("init") if isinstance(create, dict) else None
    evaluation = item["evaluation"]
    match = evaluation.get("match")
    if isinstance(match, str):
        match = {"answer": match, "strip": True}
    check = None
    if match is None:
        if "check" not in evaluation:
            raise ValueError("an evaluation needs 'match' or 'check'")
        raw = evaluation["check"]
        check = [_script(s, script_dir) for s in (raw if isinstance(raw, list) else [raw])]
    example = _script(evaluation.get("example"), script_dir) if check is not None else None
    return {"description": item["description"], "labels": item.get("labels", []),
            "init": [_script(s, script_dir) for s in (init if isinstance(init, list) else [init] if init else [])],
            "start": _script(item.get("start"), script_dir), "match": match, "check": check, "example": example}


def rejection(spec: dict) -> str | None:
    """Why the sandbox cannot host the task, or None when it can (its example passes, a wrong answer fails)."""
    scripts = [s[1] for s in spec["init"] + [spec["start"], spec["example"]] if isinstance(s, list)]
    if any(_BACKGROUND.search(s) for s in scripts):
        return "processes: it runs a background process, and the sandbox runs no processes"
    if any(_SWITCH_USER.search(s) for s in scripts):
        return "users: it switches user with su, and the sandbox's shell is always root"
    if spec["match"] is not None and spec["example"] is None:
        return "example: no example solution to verify the sandbox against"
    try:
        shell = sandbox(spec)
        right = expert_answer(spec, shell)
        if spec["example"] is not None:
            shell.run(spec["example"][1])
        if not grade(spec, right, shell):
            broken = [s["checker"] for s in spec["check"] or [] if isinstance(s, dict)
                      and not CHECKERS[s["checker"]](right, right)]
            if broken:
                return (f"unsolvable as shipped: AgentBench's {broken[0]} checker rejects the example's own output "
                        f"{right!r}")
            return "example: its example solution does not pass in the sandbox"
        if grade(spec, wrong_answer(right), sandbox(spec)):
            return "grading: a wrong answer passes in the sandbox"
    except SandboxError as e:
        return str(e)
    return None


def import_tasks(path: str | Path | None = None, script_dir: str | Path | None = None,
                 split: str = "dev") -> tuple[list[Task], list[dict[str, Any]]]:
    """Import AgentBench os_interaction tasks: (hosted OS tasks, rejected ones as {index, description, reason})."""
    path = Path(path or SOURCE_DIR / "dev.json")
    script_dir = Path(script_dir or SOURCE_DIR / "scripts" / "dev")
    hosted, rejected = [], []
    for i, item in enumerate(json.loads(path.read_text(encoding="utf-8"))):
        spec = parse_task(item, script_dir)
        reason = rejection(spec)
        if reason:
            rejected.append({"index": i, "description": spec["description"], "labels": spec["labels"],
                             "reason": reason})
            continue
        hosted.append(Task(id=f"{SUITE_NAME}/{split}/{i}", domain="os", instruction=spec["description"],
                           spec={"agentbench": spec}, answer=spec["match"]["answer"] if spec["match"] else None,
                           difficulty="real", meta={"source": "agentbench", "labels": spec["labels"], "index": i}))
    return hosted, rejected

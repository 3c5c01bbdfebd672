"""A virtual filesystem and a bash interpreter over it, for the OS environment.

Why our own: the OS environment must run inside a notebook with no Docker, be
deterministic, be fast (thousands of steps per second) and be safe against anything a
model types. So nothing here touches the host: no `os`, no `subprocess`, no file I/O.
The filesystem is nested dicts (a directory is a dict, a file is its text). A whole
multi-line script runs as one action, with the bash that agents trained on real data write:

    ls cat head tail wc grep egrep find sort uniq cut tr sed awk xargs echo printf read
    test [ [[ seq tee paste nl rev expr pwd cd mkdir touch rm rmdir cp mv chmod du
    basename dirname whoami true false : sudo bash -c eval source export unset set let
    | > >> < 2> 2>&1 &> <<< <<EOF && || ; ! 'quotes' "quotes" $'..' \\escapes $VAR ${VAR%...}
    $(...) `...` $(( )) (( )) {a,b} {1..9} ~ globs  if/elif/else  for/while/until  case
    break/continue  name() { ...; }  ( subshell )  { group }  $? $# $1

The language lives in `vshell_syntax.py` (lexer, parser, arithmetic), awk in `vshell_awk.py`,
sed, tr and the regex helpers in `vshell_text.py`. Differences from bash worth knowing: only
`read` consumes a loop's standard input (other commands see all of what is left without
eating it); there are no arrays, background jobs or process substitution; `set -e` is accepted
and not enforced. Process, user, package and network commands answer "not available in this
sandbox"; anything else unknown answers `bash: foo: command not found`.

Every action is bounded: sizes are capped (file, whole filesystem, variables, pipe buffers,
script length), and an action stops after MAX_STEPS commands or loop iterations or
RUN_DEADLINE_S seconds; every regular expression runs with a timeout (the `regex` package).
"""

from __future__ import annotations

import fnmatch
import re
import time
from typing import Callable

import regex

from openmanus_lite.envs.shell.awk import awk as run_awk
from openmanus_lite.envs.shell.syntax import (
    AndOr,
    Arith,
    ArithError,
    Case,
    Cond,
    For,
    ForArith,
    FuncDef,
    Group,
    If,
    Pipeline,
    Redirected,
    Seq,
    ShellSyntaxError,
    Simple,
    UsageError,
    While,
    Word,
    arith,
    ifs_split,
    parse_script,
    skip_quoted,
)
from openmanus_lite.envs.shell.text import POSIX_CLASSES as _POSIX_CLASSES
from openmanus_lite.envs.shell.text import RegexTimeout, posix_regex, regex_timeout
from openmanus_lite.envs.shell.text import sed as run_sed
from openmanus_lite.envs.shell.text import tr as run_tr

MAX_FILE_CHARS = 200_000
MAX_TOTAL_CHARS = 2_000_000
MAX_NODES = 5_000
MAX_STREAM = 400_000
"""Cap on any pipe buffer or command output (characters)."""
MAX_LINE = 10_000
"""Longest command line the shell accepts."""
MAX_COMMANDS = 64
HOME = "/root"
_VARNAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_GLOB_CHARS = "*?["


class FSError(Exception):
    """A filesystem operation failed; `reason` is the strerror text (e.g. 'No such file or directory')."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


# =========================================================================== filesystem


def split_path(path: str, cwd: str) -> list[str]:
    """Normalise `path` (relative to `cwd`) into its components; `..` never escapes '/'."""
    full = path if path.startswith("/") else cwd + "/" + path
    parts: list[str] = []
    for p in full.split("/"):
        if p == "" or p == ".":
            continue
        if p == "..":
            if parts:
                parts.pop()
            continue
        parts.append(p)
    return parts


def join_parts(parts: list[str]) -> str:
    return "/" + "/".join(parts)


def _copy_tree(d: dict) -> dict:
    return {k: (_copy_tree(v) if isinstance(v, dict) else v) for k, v in d.items()}


def _tree_stats(node) -> tuple[int, int]:
    """(characters, nodes) in a subtree."""
    if not isinstance(node, dict):
        return len(node), 1
    chars, nodes = 0, 1
    for v in node.values():
        c, n = _tree_stats(v)
        chars += c
        nodes += n
    return chars, nodes


class VFS:
    """In-memory filesystem: a directory is a dict name -> node, a file is a str."""

    def __init__(self) -> None:
        self.root: dict = {}
        self.chars = 0
        self.nodes = 1
        self.modes: dict[tuple[str, ...], int] = {}
        """Permissions set by chmod, by path; others are 0o644 (files) and 0o755 (directories)."""

    @classmethod
    def from_spec(cls, files: dict[str, str], dirs: list[str] | tuple = ()) -> "VFS":
        fs = cls()
        root = fs.root
        nodes = 1
        for path in list(dirs) + list(files):
            parts = split_path(path, "/")
            is_file = path in files
            node = root
            for i, p in enumerate(parts):
                nxt = node.get(p)
                if nxt is None:
                    if is_file and i == len(parts) - 1:
                        break
                    nxt = node[p] = {}
                    nodes += 1
                if not isinstance(nxt, dict):
                    raise ValueError(f"filesystem spec: {path!r} needs {join_parts(parts[:i + 1])!r} to be a directory")
                node = nxt
            if is_file:
                if not parts or isinstance(node.get(parts[-1]), dict):
                    raise ValueError(f"filesystem spec: {path!r} is both a file and a directory")
                node[parts[-1]] = files[path]
                nodes += 1
        fs.nodes = nodes
        fs.chars = sum(len(c) for c in files.values())
        return fs

    def copy(self) -> "VFS":
        new = VFS()
        new.root = _copy_tree(self.root)
        new.chars, new.nodes = self.chars, self.nodes
        new.modes = dict(self.modes)
        return new

    # ------------------------------------------------------------------ lookups
    def get(self, parts: list[str]):
        """The node at `parts`, or None when missing (or when a file is used as a directory)."""
        node = self.root
        for p in parts:
            if not isinstance(node, dict):
                return None
            node = node.get(p)
            if node is None:
                return None
        return node

    def mode(self, parts: list[str]) -> int:
        return self.modes.get(tuple(parts), 0o755 if self.is_dir(parts) else 0o644)

    def set_mode(self, parts: list[str], mode: int) -> None:
        self.modes[tuple(parts)] = mode

    def is_dir(self, parts: list[str]) -> bool:
        return isinstance(self.get(parts), dict)

    def is_file(self, parts: list[str]) -> bool:
        return isinstance(self.get(parts), str)

    def parent_dir(self, parts: list[str]) -> dict:
        if not parts:
            raise FSError("Is a directory")
        node = self.root
        for p in parts[:-1]:
            nxt = node.get(p)
            if nxt is None:
                raise FSError("No such file or directory")
            if not isinstance(nxt, dict):
                raise FSError("Not a directory")
            node = nxt
        return node

    def read(self, parts: list[str]) -> str:
        node = self.get(parts)
        if node is None:
            raise FSError("No such file or directory")
        if isinstance(node, dict):
            raise FSError("Is a directory")
        return node

    # ------------------------------------------------------------------ changes
    def write(self, parts: list[str], content: str, append: bool = False) -> None:
        parent = self.parent_dir(parts)
        old = parent.get(parts[-1])
        if isinstance(old, dict):
            raise FSError("Is a directory")
        new = (old + content) if (append and old is not None) else content
        if len(new) > MAX_FILE_CHARS:
            raise FSError("File too large")
        delta = len(new) - (len(old) if old is not None else 0)
        if self.chars + delta > MAX_TOTAL_CHARS or (old is None and self.nodes >= MAX_NODES):
            raise FSError("No space left on device")
        parent[parts[-1]] = new
        self.chars += delta
        self.nodes += old is None

    def mkdir(self, parts: list[str], parents: bool = False) -> None:
        node = self.root
        for i, p in enumerate(parts):
            nxt = node.get(p)
            last = i == len(parts) - 1
            if nxt is None:
                if not last and not parents:
                    raise FSError("No such file or directory")
                if self.nodes >= MAX_NODES:
                    raise FSError("No space left on device")
                nxt = node[p] = {}
                self.nodes += 1
            elif not isinstance(nxt, dict):
                raise FSError("File exists" if last else "Not a directory")
            elif last and not parents:
                raise FSError("File exists")
            node = nxt

    def remove(self, parts: list[str]) -> None:
        parent = self.parent_dir(parts)
        node = parent.get(parts[-1])
        if node is None:
            raise FSError("No such file or directory")
        chars, nodes = _tree_stats(node)
        del parent[parts[-1]]
        if self.modes:
            key = tuple(parts)
            self.modes = {k: v for k, v in self.modes.items() if k[:len(key)] != key}
        self.chars -= chars
        self.nodes -= nodes

    def insert(self, parts: list[str], node) -> None:
        """Place a (copied) subtree at `parts`, replacing a file there."""
        parent = self.parent_dir(parts)
        chars, nodes = _tree_stats(node)
        old = parent.get(parts[-1])
        ochars, onodes = _tree_stats(old) if old is not None else (0, 0)
        if self.chars + chars - ochars > MAX_TOTAL_CHARS or self.nodes + nodes - onodes > MAX_NODES:
            raise FSError("No space left on device")
        parent[parts[-1]] = node
        self.chars += chars - ochars
        self.nodes += nodes - onodes

    # ------------------------------------------------------------------ traversal
    def walk(self, parts: list[str]):
        """Yield (parts, node) for the subtree at `parts`, parents first, names sorted."""
        node = self.get(parts)
        if node is None:
            return
        stack = [(parts, node)]
        while stack:
            p, n = stack.pop()
            yield p, n
            if isinstance(n, dict):
                for name in sorted(n, reverse=True):
                    stack.append((p + [name], n[name]))

    def files(self) -> dict[str, str]:
        """Every file as path -> content (for checkers)."""
        return {join_parts(p): n for p, n in self.walk([]) if isinstance(n, str)}

    def dirs(self) -> list[str]:
        return [join_parts(p) for p, n in self.walk([]) if isinstance(n, dict)]


# =========================================================================== option parsing


def getopts(cmd: str, args: list[str], flags: str, valued: str = "", long: dict[str, str] | None = None):
    """GNU-style short options: clusters (-la), values (-n 5, -n5), `--` ends options.

    Returns (opts: dict letter -> True | value | [values...] for repeatable), operands.
    Options may follow operands (GNU permutation)."""
    opts: dict[str, object] = {}
    operands: list[str] = []
    i = 0
    only_operands = False
    while i < len(args):
        a = args[i]
        if only_operands or a == "-" or not a.startswith("-"):
            operands.append(a)
        elif a == "--":
            only_operands = True
        elif a.startswith("--"):
            name, _, val = a[2:].partition("=")
            if long and name in long:
                key = long[name]
                if key in valued:
                    if not val:
                        i += 1
                        if i >= len(args):
                            raise UsageError(f"{cmd}: option '--{name}' requires an argument")
                        val = args[i]
                    opts.setdefault(key, []).append(val)
                else:
                    opts[key] = True
            else:
                raise UsageError(f"{cmd}: unrecognized option '{a}'\nTry '{cmd} --help' for more information.")
        else:
            j = 1
            while j < len(a):
                ch = a[j]
                if ch in valued:
                    val = a[j + 1:]
                    if not val:
                        i += 1
                        if i >= len(args):
                            raise UsageError(f"{cmd}: option requires an argument -- '{ch}'\n"
                                             f"Try '{cmd} --help' for more information.")
                        val = args[i]
                    opts.setdefault(ch, []).append(val)
                    break
                if ch not in flags:
                    raise UsageError(f"{cmd}: invalid option -- '{ch}'\nTry '{cmd} --help' for more information.")
                opts[ch] = True
                j += 1
        i += 1
    return opts, operands


def _last(opts: dict, key: str):
    v = opts.get(key)
    return v[-1] if isinstance(v, list) else v


def _int_arg(cmd: str, what: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise UsageError(f"{cmd}: invalid {what}: '{value}'") from None


# =========================================================================== shell

Result = tuple[str, str, int]  # stdout, stderr, exit status


def _lines(text: str) -> list[str]:
    """Lines of a text, without their newline (a final unterminated line counts)."""
    if not text:
        return []
    out = text.split("\n")
    if out[-1] == "":
        out.pop()
    return out


def _join(lines) -> str:
    return "".join(line + "\n" for line in lines)


# =========================================================================== execution state

MAX_STEPS = 20_000
"""Simple commands plus loop iterations one action may run (so `while true` ends)."""
RUN_DEADLINE_S = 0.5
"""Wall-clock budget of one action; regex matching and awk check it too."""
MAX_DEPTH = 40
"""Nesting of functions, `$(...)`, `eval`, `bash -c` and sourced scripts."""
UNAVAILABLE = {
    **dict.fromkeys(("ps", "kill", "killall", "pkill", "top", "htop", "nohup", "jobs", "bg", "fg", "wait",
                     "systemctl", "service", "crontab", "pgrep", "lsof", "free", "uptime"), "no processes"),
    **dict.fromkeys(("useradd", "usermod", "userdel", "groupadd", "groupdel", "passwd", "su", "chown", "chgrp",
                     "id", "groups", "adduser", "deluser"), "no other users or groups"),
    **dict.fromkeys(("apt", "apt-get", "yum", "dnf", "pip", "pip3", "snap", "dpkg", "npm"), "no package manager"),
    **dict.fromkeys(("curl", "wget", "ssh", "scp", "ping", "nc", "git"), "no network"),
    **dict.fromkeys(("python", "python3", "perl", "ruby", "node", "vim", "vi", "nano", "less", "more", "man"),
                    "no interpreters or editors; use the shell tools"),
    **dict.fromkeys(("ln", "mount", "umount", "reboot", "shutdown", "mkfifo", "dd", "tar", "gzip", "zip", "unzip",
                     "date", "file", "diff", "md5sum", "sha256sum"), "not implemented here"),
}
"""Commands a real machine has and this sandbox deliberately lacks, with the reason shown to the agent."""


_READS_STDIN = frozenset(("cat", "head", "tail", "wc", "grep", "egrep", "sort", "uniq", "cut", "tr", "sed", "awk", "tee",
                          "rev", "nl", "paste"))
"""Commands that may read standard input; the others get none (copying what a loop has left to read
for every `echo` in its body made `while read` loops quadratic)."""


class ScriptLimit(Exception):
    """The action used up its step or time budget."""


class ExpansionError(Exception):
    """A bad ${...} or an unset parameter with ${x?}: the command fails, the script goes on."""


class _Exit(Exception):
    def __init__(self, status: int):
        self.status = status


class _Return(_Exit):
    pass


class _LoopControl(Exception):
    def __init__(self, kind: str, levels: int):
        self.kind = kind
        self.levels = levels


class Sink:
    """Collects output chunks tagged with their file descriptor (1 or 2), in order, up to MAX_STREAM."""

    __slots__ = ("chunks", "size")

    def __init__(self) -> None:
        self.chunks: list[tuple[int, str]] = []
        self.size = 0

    def write(self, fd: int, text: str) -> None:
        if text and self.size <= MAX_STREAM:
            self.chunks.append((fd, text))
            self.size += len(text)

    def text(self, fd: int) -> str:
        return "".join(t for f, t in self.chunks if f == fd)


class Input:
    """A command's standard input. Commands see all of what is left; only `read` consumes it, line by line."""

    __slots__ = ("data", "pos")

    def __init__(self, data: str) -> None:
        self.data = data
        self.pos = 0

    def rest(self) -> str:
        return self.data[self.pos:]

    def read_until(self, delim: str) -> tuple[str | None, bool]:
        """(text up to delim or None at end of input, whether the delimiter was found)."""
        if self.pos >= len(self.data):
            return None, False
        end = self.data.find(delim, self.pos)
        if end < 0:
            text, self.pos = self.data[self.pos:], len(self.data)
            return text, False
        text, self.pos = self.data[self.pos:end], end + 1
        return text, True


def _status_arg(args: list[str], default: str) -> int:
    raw = args[0] if args else default
    try:
        return int(raw) & 0xFF
    except ValueError:
        return 2


def _glob_escape(text: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)


def _glob_atoms(pattern: str) -> list[str]:
    """A shell glob -> its atoms as regex text: "*" for a star, else one piece that matches one character
    (a literal, `?` or a bracket expression), so the list can be reversed to match a suffix."""
    out = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "*":
            out.append("*")
        elif c == "?":
            out.append(".")
        elif c == "[":
            end = _bracket_end(pattern, i)
            if end < 0:
                out.append(r"\[")
            else:
                body = pattern[i + 1:end]
                if body[:1] in ("!", "^"):
                    body = "^" + body[1:]
                for k, v in _POSIX_CLASSES.items():
                    body = body.replace(k, v)
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = end
        else:
            out.append(regex.escape(c))
        i += 1
    return out


def _bracket_end(pattern: str, start: int) -> int:
    """Index of the `]` that closes the bracket expression opening at `start` (a `]` first in the set and
    the ones of `[:class:]` do not close it), or -1."""
    j = start + 1
    if pattern[j:j + 1] in ("!", "^"):
        j += 1
    if pattern[j:j + 1] == "]":
        j += 1
    while j < len(pattern) and pattern[j] != "]":
        close = pattern.find(":]", j + 2) if pattern.startswith("[:", j) else -1
        j = close + 2 if close > 0 else j + 1
    return j if j < len(pattern) else -1


def _glob_regex(atoms: list[str], lazy: bool = False, prefix: str = "", suffix: str = "") -> regex.Pattern:
    """Glob atoms -> a compiled `regex` pattern (so that matching takes a timeout). Stars are greedy, so a
    match at a given start is the longest there, or lazy, so an anchored match is the shortest."""
    star = ".*?" if lazy else ".*"
    try:
        return regex.compile(prefix + "".join(star if a == "*" else a for a in atoms) + suffix, regex.S)
    except regex.error as e:
        raise ExpansionError(f"bad pattern: {e}") from None


def _split_xargs_opts(args: list[str]) -> list[str]:
    """xargs options end at the command: stop option parsing at the first operand."""
    out, i = [], 0
    while i < len(args):
        a = args[i]
        if not a.startswith("-") or a == "-":
            return out + ["--"] + args[i:]
        out.append(a)
        if a in ("-I", "-n", "-L", "-d", "-P", "-s"):
            if i + 1 < len(args):
                out.append(args[i + 1])
            i += 1
        i += 1
    return out


def _xargs_split(text: str) -> list[str]:
    """Items of xargs input: blank-separated, with '...' "..." and backslash quoting."""
    items, cur, have = [], [], False
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in " \t\n":
            if have:
                items.append("".join(cur))
                cur, have = [], False
        elif c in "'\"":
            end = text.find(c, i + 1)
            if end < 0 or "\n" in text[i:end]:
                raise UsageError(f"unmatched {'single' if c == chr(39) else 'double'} quote; by default quotes are "
                                 "special to xargs unless you use the -0 option")
            cur.append(text[i + 1:end])
            have = True
            i = end
        elif c == "\\" and i + 1 < n:
            cur.append(text[i + 1])
            have = True
            i += 1
        else:
            cur.append(c)
            have = True
        i += 1
    if have:
        items.append("".join(cur))
    return items


class _CondWord:
    """An operand of [[ ]], expanded when the test reads it (no splitting, no globbing)."""

    __slots__ = ("raw",)

    def __init__(self, raw: str):
        self.raw = raw


_UNARY_TESTS = {"-e", "-f", "-d", "-s", "-r", "-w", "-x", "-a", "-L", "-h", "-p", "-S", "-b", "-c", "-z", "-n"}
_BINARY_TESTS = {"=", "==", "!=", "<", ">", "-eq", "-ne", "-lt", "-le", "-gt", "-ge", "-nt", "-ot", "-ef", "=~"}


class _TestParser:
    """`test`, `[ ]` and `[[ ]]` expressions: ! ( ) -a -o (or && || in [[ ]]), unary file and string tests,
    string, integer and (in [[ ]]) pattern and regex comparisons."""

    def __init__(self, toks: list, shell: "Shell", name: str, cond: bool = False):
        self.toks = toks
        self.shell = shell
        self.name = name
        self.cond = cond
        self.i = 0

    def op(self, k: int) -> str | None:
        if k >= len(self.toks):
            return None
        t = self.toks[k]
        return t if isinstance(t, str) else (t.raw if re.fullmatch(r"[-=!<>~a-zA-Z]+", t.raw) else None)

    def value(self, k: int, mode: str = "one") -> str:
        t = self.toks[k]
        return t if isinstance(t, str) else self.shell.expand_word(t.raw, mode)

    def error(self, msg: str) -> UsageError:
        return UsageError(f"{self.name}: {msg}")

    def parse(self) -> bool:
        if not self.toks:
            return False
        v = self.or_()
        if self.i < len(self.toks):
            raise self.error(f"syntax error near `{self.op(self.i) or self.value(self.i)}'" if self.cond
                             else "too many arguments")
        return v

    def or_(self) -> bool:
        v = self.and_()
        while self.op(self.i) == ("||" if self.cond else "-o"):
            self.i += 1
            w = self.and_()
            v = v or w
        return v

    def and_(self) -> bool:
        v = self.not_()
        while self.op(self.i) == ("&&" if self.cond else "-a"):
            self.i += 1
            w = self.not_()
            v = v and w
        return v

    def not_(self) -> bool:
        if self.op(self.i) == "!" and self.i + 1 < len(self.toks):
            self.i += 1
            return not self.not_()
        return self.primary()

    def primary(self) -> bool:
        i, left = self.i, len(self.toks) - self.i
        if left <= 0:
            raise self.error("argument expected")
        if self.op(i) == "(" and left >= 2:
            self.i += 1
            v = self.or_()
            if self.op(self.i) != ")":
                raise self.error("`)' expected")
            self.i += 1
            return v
        if left >= 3 and self.op(i + 1) in _BINARY_TESTS and not (self.op(i + 1) == "=~" and not self.cond):
            self.i += 3
            return self.binary(self.op(i + 1), i, i + 2)
        if self.op(i) in _UNARY_TESTS and left >= 2:
            self.i += 2
            op, arg = self.op(i), self.value(i + 1)
            if op == "-z":
                return arg == ""
            if op == "-n":
                return arg != ""
            return self.shell.file_test(op, arg)
        self.i += 1
        return self.value(i) != ""

    def integer(self, k: int) -> int:
        text = self.value(k)
        if self.cond:
            return self.shell.arith(text) if text.strip() else 0
        try:
            return int(text.strip())
        except ValueError:
            raise self.error(f"{text}: integer expression expected") from None

    def binary(self, op: str, a: int, b: int) -> bool:
        if op in ("-eq", "-ne", "-lt", "-le", "-gt", "-ge"):
            x, y = self.integer(a), self.integer(b)
            return {"-eq": x == y, "-ne": x != y, "-lt": x < y, "-le": x <= y, "-gt": x > y, "-ge": x >= y}[op]
        left = self.value(a)
        if op in ("=", "==", "!="):
            if self.cond:
                same = fnmatch.fnmatchcase(left, self.value(b, "pattern"))
            else:
                same = left == self.value(b)
            return same if op != "!=" else not same
        if op == "=~":
            rx = posix_regex(self.value(b), extended=True)
            return rx.search(left, timeout=regex_timeout(self.shell.deadline)) is not None
        right = self.value(b)
        if op == "<":
            return left < right
        if op == ">":
            return left > right
        if op == "-ef":
            return self.shell.parts(left) == self.shell.parts(right) and self.shell.fs.get(self.shell.parts(left)) \
                is not None
        return False  # -nt / -ot: every file here has the same time


class Shell:
    """Runs scripts against a VFS. `run(script) -> (output, exit_status)`; never raises."""

    run_deadline_s = RUN_DEADLINE_S
    """Wall-clock budget of one `run` (a subclass or instance may allow more)."""

    def __init__(self, fs: VFS, cwd: str = HOME):
        self.fs = fs
        self.cwd = cwd
        self.vars: dict[str, str] = {"HOME": HOME, "USER": "root", "PWD": cwd, "SHELL": "/bin/bash", "?": "0",
                                     "IFS": " \t\n", "PATH": "/usr/local/bin:/usr/bin:/bin"}
        self.functions: dict[str, object] = {}
        self.params: list[str] = []
        self.commands: dict[str, Callable[[list[str], str], Result]] = {
            "ls": self.ls, "cat": self.cat, "head": self.head, "tail": self.tail, "wc": self.wc,
            "grep": self.grep, "egrep": self.egrep, "find": self.find, "sort": self.sort, "uniq": self.uniq,
            "cut": self.cut, "echo": self.echo, "printf": self.printf, "pwd": self.pwd, "cd": self.cd,
            "mkdir": self.mkdir, "touch": self.touch, "rm": self.rm, "rmdir": self.rmdir, "cp": self.cp,
            "mv": self.mv, "basename": self.basename, "dirname": self.dirname, "whoami": self.whoami,
            "true": self.true, "false": self.false, ":": self.true, "test": self.test, "[": self.bracket,
            "seq": self.seq, "tee": self.tee, "sleep": self.true, "chmod": self.chmod, "du": self.du,
            "tr": self.tr, "sed": self.sed, "awk": self.awk, "rev": self.rev, "nl": self.nl,
            "paste": self.paste, "expr": self.expr, "stat": self.stat, "which": self.which, "env": self.env,
            "printenv": self.env,
        }
        self.specials: dict[str, Callable[[list[str], Input, Sink], int]] = {
            "read": self._read, "exit": self._exit, "break": self._break, "continue": self._continue,
            "return": self._return, "export": self._export, "local": self._export, "declare": self._export,
            "typeset": self._export, "readonly": self._export, "unset": self._unset, "eval": self._eval,
            "set": self._set, "shift": self._shift, "let": self._let, "sudo": self._sudo, "xargs": self._xargs,
            "bash": self._bash, "sh": self._bash, "source": self._source, ".": self._source,
            "command": self._command, "exec": self._command,
        }
        self._deadline = float("inf")
        self._steps = 0
        self._depth = 0
        self._loops = 0
        self._sink: Sink = Sink()
        self._subst_status = 0

    def copy(self) -> "Shell":
        new = type(self)(self.fs.copy(), self.cwd)  # a subclass (the AgentBench sandbox) stays itself
        new.vars = dict(self.vars)
        new.functions = dict(self.functions)
        return new

    # ------------------------------------------------------------------ running
    def run(self, script: str) -> tuple[str, int]:
        """Run a command line or a multi-line script; returns (stdout and stderr interleaved, exit status)."""
        sink, status = self._run_sink(script)
        return "".join(text for _, text in sink.chunks)[:MAX_STREAM], status

    def run_streams(self, script: str) -> tuple[str, str, int]:
        """Like `run`, with stdout and stderr apart: (stdout, stderr, exit status)."""
        sink, status = self._run_sink(script)
        return sink.text(1)[:MAX_STREAM], sink.text(2)[:MAX_STREAM], status

    def _run_sink(self, script: str) -> tuple["Sink", int]:
        sink = Sink()
        if len(script) > MAX_LINE:
            sink.write(2, f"bash: command line too long ({len(script)} characters; the limit is {MAX_LINE})\n")
            return sink, 2
        try:
            tree = parse_script(script)
        except ShellSyntaxError as e:
            self.vars["?"] = "2"
            sink.write(2, f"bash: {e}\n")
            return sink, 2
        except RecursionError:
            self.vars["?"] = "2"
            sink.write(2, "bash: syntax error: nested too deeply\n")
            return sink, 2
        self._deadline = time.perf_counter() + self.run_deadline_s
        self._steps = self._depth = self._loops = 0
        try:
            status = self.exec(tree, Input(""), sink)
        except _Exit as e:
            status = e.status
        except _LoopControl:
            status = 0
        except ScriptLimit as e:
            sink.write(2, f"bash: script stopped: {e}\n")
            status = 124
        except RecursionError:
            sink.write(2, "bash: script stopped: nested too deeply\n")
            status = 124
        self.vars["?"] = str(status)
        return sink, status

    def tick(self) -> None:
        """Count one step of work; stop the script past the step cap or the time budget."""
        self._steps += 1
        if self._steps > MAX_STEPS:
            raise ScriptLimit(f"more than {MAX_STEPS} commands or loop iterations in one action")
        if time.perf_counter() > self._deadline:
            raise ScriptLimit(f"the action ran longer than {self.run_deadline_s} s")

    @property
    def deadline(self) -> float:
        return self._deadline

    def exec(self, node, inp: "Input", sink: "Sink") -> int:
        prev, self._sink = self._sink, sink
        try:
            return self._exec(node, inp, sink)
        except (ArithError, ExpansionError) as e:  # the command fails with bash's message; the script goes on
            sink.write(2, f"bash: {e}\n")
            return 1
        except UsageError as e:
            sink.write(2, f"{e}\n")
            return 2
        except ShellSyntaxError as e:  # found while expanding, e.g. an unterminated $( in a here-document
            sink.write(2, f"bash: {e}\n")
            return 2
        finally:
            self._sink = prev

    def _exec(self, node, inp: "Input", sink: "Sink") -> int:
        if isinstance(node, Simple):
            return self._simple(node, inp, sink)
        if isinstance(node, Seq):
            status = 0
            for item in node.items:
                status = self.exec(item, inp, sink)
            return status
        if isinstance(node, AndOr):
            status = 0
            for conn, pipeline in node.items:
                if (conn == "&&" and status != 0) or (conn == "||" and status == 0):
                    continue
                status = self.exec(pipeline, inp, sink)
                self.vars["?"] = str(status)
            return status
        if isinstance(node, Pipeline):
            status = self._pipeline(node, inp, sink)
            return int(status == 0) if node.negate else status
        if isinstance(node, Redirected):
            return self._redirected(node.redirs, inp, sink, lambda i, s: self.exec(node.node, i, s))
        if isinstance(node, If):
            for cond, body in node.branches:
                if self.exec(cond, inp, sink) == 0:
                    return self.exec(body, inp, sink)
            return self.exec(node.orelse, inp, sink) if node.orelse is not None else 0
        if isinstance(node, (For, ForArith, While)):
            return self._loop(node, inp, sink)
        if isinstance(node, Case):
            word = self.expand_word(node.word.raw, "one")
            for pats, body in node.items:
                if any(fnmatch.fnmatchcase(word, self.expand_word(p.raw, "pattern")) for p in pats):
                    return self.exec(body, inp, sink)
            return 0
        if isinstance(node, Group):
            if not node.subshell:
                return self.exec(node.body, inp, sink)
            return self._subshell(lambda: self.exec(node.body, inp, sink))
        if isinstance(node, Arith):
            self.tick()
            try:
                return int(self.arith(node.expr) == 0)
            except ArithError as e:
                sink.write(2, f"bash: {e}\n")
                return 1
        if isinstance(node, Cond):
            self.tick()
            try:
                return 0 if self._cond(node.items) else 1
            except UsageError as e:
                sink.write(2, f"bash: {e}\n")
                return 2
        if isinstance(node, FuncDef):
            self.functions[node.name] = node.body
            return 0
        raise AssertionError(type(node))

    def _subshell(self, body: Callable[[], int]) -> int:
        saved = (dict(self.vars), self.cwd, dict(self.functions), list(self.params))
        try:
            return body()
        except _Exit as e:
            return e.status
        except (_LoopControl, _Return) as e:
            return getattr(e, "status", 0)
        finally:
            self.vars, self.cwd, self.functions, self.params = saved

    def _pipeline(self, node: Pipeline, inp: "Input", sink: "Sink") -> int:
        if len(node.cmds) == 1:
            return self.exec(node.cmds[0], inp, sink)
        data = inp
        status = 0
        for k, cmd in enumerate(node.cmds):
            last = k == len(node.cmds) - 1
            out = sink if last else Sink()
            status = self._subshell(lambda: self.exec(cmd, data, out))  # noqa: B023 (called at once)
            if not last:
                for fd, text in out.chunks:
                    if fd == 2:
                        sink.write(2, text)
                data = Input(out.text(1)[:MAX_STREAM])
        return status

    def _loop(self, node, inp: "Input", sink: "Sink") -> int:
        status = 0
        self._loops += 1
        try:
            if isinstance(node, For):
                items = (self.expand_words(node.words) if node.words is not None else list(self.params))
                iterator = iter(items)
            elif isinstance(node, ForArith):
                self.arith(node.init)
            while True:
                self.tick()
                if isinstance(node, For):
                    item = next(iterator, None)
                    if item is None:
                        break
                    self.vars[node.var] = item
                elif isinstance(node, ForArith):
                    if node.cond.strip() and self.arith(node.cond) == 0:
                        break
                else:
                    ok = self.exec(node.cond, inp, sink) == 0
                    if ok == node.until:
                        break
                try:
                    status = self.exec(node.body, inp, sink)
                except _LoopControl as e:
                    if e.levels > 1:
                        e.levels -= 1
                        raise
                    if e.kind == "break":
                        break
                if isinstance(node, ForArith) and node.step.strip():
                    self.arith(node.step)
        except ArithError as e:
            sink.write(2, f"bash: {e}\n")
            return 1
        finally:
            self._loops -= 1
        return status

    # ------------------------------------------------------------------ simple commands
    def _simple(self, cmd: Simple, inp: "Input", sink: "Sink") -> int:
        self.tick()
        self._subst_status = 0
        try:
            argv = self.expand_words(cmd.words)
            assigns = [self._assignment(w.raw) for w in cmd.assigns]
        except ExpansionError as e:
            sink.write(2, f"bash: {e}\n")
            return 1
        except ArithError as e:
            sink.write(2, f"bash: {e}\n")
            return 1
        if not argv:
            for name, value, append in assigns:
                self.vars[name] = (self.vars.get(name, "") + value) if append else value
            status = self._subst_status
            if cmd.redirs:  # `> file` alone creates or empties the file
                return self._redirected(cmd.redirs, inp, sink, lambda i, s: status)
            return status
        saved = {name: self.vars.get(name) for name, _, _ in assigns}
        for name, value, append in assigns:
            self.vars[name] = (self.vars.get(name, "") + value) if append else value
        try:
            if cmd.redirs:
                return self._redirected(cmd.redirs, inp, sink, lambda i, s: self.run_argv(argv, i, s))
            return self.run_argv(argv, inp, sink)
        finally:
            for name, old in saved.items():
                if old is None:
                    self.vars.pop(name, None)
                else:
                    self.vars[name] = old

    def run_argv(self, argv: list[str], inp: "Input", sink: "Sink") -> int:
        """Run one expanded command (function, shell builtin or command) and return its status."""
        name, args = argv[0], argv[1:]
        if name in self.functions:
            return self._call_function(name, args, inp, sink)
        special = self.specials.get(name)
        if special is not None:
            return special(args, inp, sink)
        fn = self.commands.get(name)
        if fn is None:
            if name.split("/")[-1] in self.commands and "/" in name:
                fn = self.commands[name.split("/")[-1]]  # /bin/ls, /usr/bin/awk
            elif "/" in name and self.fs.is_file(self.parts(name)):
                return self._run_file(name, args, inp, sink)
            elif re.match(r"[A-Za-z_][A-Za-z0-9_]*\[.*\]\+?=", name) or name in ("mapfile", "readarray"):
                sink.write(2, f"bash: {name.split('=')[0]}: arrays are not supported in this shell\n")
                return 1
            elif name in UNAVAILABLE:
                sink.write(2, f"bash: {name}: not available in this sandbox ({UNAVAILABLE[name]})\n")
                return 127
            else:
                sink.write(2, f"bash: {name}: command not found\n")
                return 127
        try:
            stdout, stderr, status = fn(args, inp.rest() if name in _READS_STDIN else "")
        except UsageError as e:
            stdout, stderr, status = "", f"{e}\n", 2 if name in ("ls", "grep") else 1
        sink.write(2, stderr)
        sink.write(1, stdout)
        return status

    def _call_function(self, name: str, args: list[str], inp: "Input", sink: "Sink") -> int:
        self._depth += 1
        if self._depth > MAX_DEPTH:
            self._depth -= 1
            raise ScriptLimit(f"{name}: maximum function nesting level exceeded ({MAX_DEPTH})")
        saved = self.params
        self.params = list(args)
        try:
            return self.exec(self.functions[name], inp, sink)
        except _Return as e:
            return e.status
        finally:
            self.params = saved
            self._depth -= 1

    def _run_file(self, path: str, args: list[str], inp: "Input", sink: "Sink") -> int:
        mode = self.fs.mode(self.parts(path))
        if not mode & 0o111:
            sink.write(2, f"bash: {path}: Permission denied\n")
            return 126
        return self._script(self.fs.read(self.parts(path)), [path] + args, inp, sink)

    def _script(self, src: str, argv0: list[str], inp: "Input", sink: "Sink", subshell: bool = True) -> int:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise ScriptLimit(f"scripts nested deeper than {MAX_DEPTH}")
            try:
                tree = parse_script(src)
            except ShellSyntaxError as e:
                sink.write(2, f"bash: {argv0[0] if argv0 else '-c'}: {e}\n")
                return 2

            def body() -> int:
                if argv0:
                    self.params = argv0[1:]
                return self.exec(tree, inp, sink)
            return self._subshell(body) if subshell else body()
        finally:
            self._depth -= 1

    def _assignment(self, raw: str) -> tuple[str, str, bool]:
        name, _, value = raw.partition("=")
        append = name.endswith("+")
        text = self.expand_word(value, "assign")
        if len(text) + (len(self.vars.get(name.rstrip("+"), "")) if append else 0) > MAX_FILE_CHARS:
            raise ScriptLimit(f"{name.rstrip('+')}: a variable may hold at most {MAX_FILE_CHARS} characters")
        return name.rstrip("+"), text, append

    # ------------------------------------------------------------------ redirections
    def _redirected(self, redirs, inp: "Input", sink: "Sink", body: Callable[["Input", "Sink"], int]) -> int:
        fds: dict[int, tuple] = {1: ("sink", 1), 2: ("sink", 2)}
        files: dict[str, list[str]] = {}
        stdin = inp
        for op, w in redirs:
            try:
                if op == "<":
                    path = self.expand_word(w.raw, "one")
                    try:
                        stdin = Input(self.fs.read(self.parts(path)) if path != "/dev/null" else "")
                    except FSError as e:
                        sink.write(2, f"bash: {path}: {e.reason}\n")
                        return 1
                elif op == "<<<":
                    stdin = Input(self.expand_word(w.raw, "one") + "\n")
                elif op in ("<<", "<<-"):
                    text = w.heredoc or ""
                    stdin = Input(text if w.heredoc_quoted else self.expand_word(text, "heredoc"))
                elif op == "2>&1":
                    fds[2] = fds[1]
                elif op in (">&2", "1>&2"):
                    fds[1] = fds[2]
                else:
                    path = self.expand_word(w.raw, "one")
                    if path in ("/dev/null",):
                        dest: tuple = ("null",)
                    elif path in ("/dev/stdout", "/dev/stderr"):
                        dest = ("sink", 1 if path.endswith("out") else 2)
                    else:
                        parts = self.parts(path)
                        if self.fs.is_dir(parts) or not parts:
                            sink.write(2, f"bash: {path}: Is a directory\n")
                            return 1
                        try:
                            if ">>" not in op:
                                self.fs.write(parts, "")
                            elif self.fs.get(parts) is None:
                                self.fs.write(parts, "")
                        except FSError as e:
                            sink.write(2, f"bash: {path}: {e.reason}\n")
                            return 1
                        dest = ("file", path)
                        files.setdefault(path, [])
                    if op.startswith("&"):
                        fds[1] = fds[2] = dest
                    elif op.startswith("2"):
                        fds[2] = dest
                    else:
                        fds[1] = dest
            except (ExpansionError, ArithError) as e:
                sink.write(2, f"bash: {e}\n")
                return 1
        inner = Sink()
        try:
            status = body(stdin, inner)
        finally:
            for fd, text in inner.chunks:
                dest = fds[fd]
                if dest[0] == "sink":
                    sink.write(dest[1], text)
                elif dest[0] == "file":
                    files[dest[1]].append(text)
            for path, texts in files.items():
                if texts:
                    try:
                        self.fs.write(self.parts(path), "".join(texts), append=True)
                    except FSError as e:
                        sink.write(2, f"bash: {path}: {e.reason}\n")
                        status = 1
        return status

    # ------------------------------------------------------------------ expansion
    def expand_words(self, words: list[Word]) -> list[str]:
        out: list[str] = []
        for w in words:
            for raw in brace_expand(w.raw) if "{" in w.raw else (w.raw,):
                out.extend(self.expand_word(raw, "fields"))
            if len(out) > MAX_NODES * 4:
                raise ScriptLimit("too many words after expansion")
        return out

    def expand_word(self, raw: str, mode: str):
        """Expand one word. mode: 'fields' (split + glob -> list), 'one' (-> str), 'assign' (-> str,
        tilde after = and :), 'pattern' (-> str with quoted glob characters escaped), 'heredoc'."""
        pieces = self._pieces(raw, mode)
        if mode in ("one", "assign", "heredoc"):
            return "".join(p[0] for p in pieces)
        if mode == "pattern":
            return "".join(_glob_escape(t) if q else t for t, q, _ in pieces)
        fields: list[list[tuple[str, bool]]] = []
        cur: list[tuple[str, bool]] = []
        have = False
        ifs = self.vars.get("IFS", " \t\n")
        for text, quoted, split in pieces:
            if split and ifs:
                if not text:
                    continue
                parts = ifs_split(text, ifs)
                if text[0] in ifs and have:
                    fields.append(cur)
                    cur, have = [], False
                for j, p in enumerate(parts):
                    if j:
                        fields.append(cur)
                        cur = []
                    cur.append((p, False))
                    have = True
                if text[-1] in ifs and have:
                    fields.append(cur)
                    cur, have = [], False
            else:
                cur.append((text, quoted))
                have = have or bool(text) or quoted
        if have:
            fields.append(cur)
        out: list[str] = []
        for f in fields:
            text = "".join(t for t, _ in f)
            if any(not q and any(c in t for c in _GLOB_CHARS) for t, q in f):
                matches = self.glob("".join(_glob_escape(t) if q else t for t, q in f))
                out.extend(matches if matches else [text])
            else:
                out.append(text)
        return out

    def _pieces(self, raw: str, mode: str) -> list[tuple[str, bool, bool]]:
        """(text, quoted, splittable) pieces of a word after quote removal and $-expansion."""
        pieces: list[tuple[str, bool, bool]] = []
        i, n = 0, len(raw)
        heredoc = mode == "heredoc"
        if not heredoc and (raw == "~" or raw.startswith("~/")):
            pieces.append((self.vars.get("HOME", HOME), True, False))
            i = 1
        while i < n:
            c = raw[i]
            if c == "'" and not heredoc:
                end = raw.find("'", i + 1)
                end = n if end < 0 else end
                pieces.append((raw[i + 1:end], True, False))
                i = end + 1
            elif c == '"' and not heredoc:
                j = skip_quoted(raw, i)
                pieces.append(("", True, False))
                pieces.extend(self._dq_pieces(raw[i + 1:j - 1]))
                i = j
            elif c == "\\":
                if heredoc:
                    nxt = raw[i + 1:i + 2]
                    pieces.append((nxt if nxt in "$`\\\n" else "\\" + nxt, True, False))
                else:
                    pieces.append((raw[i + 1:i + 2], True, False))
                i += 2
            elif c == "$" and raw[i + 1:i + 2] == "'" and not heredoc:
                j = i + 2
                while j < n and raw[j] != "'":
                    j += 2 if raw[j] == "\\" else 1
                pieces.append((_ansi_c(raw[i + 2:j]), True, False))
                i = j + 1
            elif c == "$" or c == "`":
                val, i = self._dollar(raw, i)
                pieces.append((val, heredoc, not heredoc))
            else:
                j = i + 1
                stop = "\\$`" if heredoc else "'\"\\$`"
                while j < n and raw[j] not in stop:
                    if mode == "assign" and raw[j] == "~" and raw[j - 1] == ":" and raw[j + 1:j + 2] in ("", "/"):
                        break
                    j += 1
                pieces.append((raw[i:j], heredoc, False))
                i = j
                if mode == "assign" and i < n and raw[i] == "~":
                    pieces.append((self.vars.get("HOME", HOME), True, False))
                    i += 1
        if mode == "assign" and raw.startswith("~") and pieces and pieces[0][0] == "~":
            pieces[0] = (self.vars.get("HOME", HOME), True, False)
        return pieces

    def _dq_pieces(self, inner: str) -> list[tuple[str, bool, bool]]:
        out: list[tuple[str, bool, bool]] = []
        i, n = 0, len(inner)
        while i < n:
            c = inner[i]
            if c == "\\" and i + 1 < n and inner[i + 1] in '"\\$`\n':
                out.append((inner[i + 1] if inner[i + 1] != "\n" else "", True, False))
                i += 2
            elif c == "$" or c == "`":
                val, i = self._dollar(inner, i)
                out.append((val, True, False))
            else:
                j = i + 1
                while j < n and inner[j] not in "\\$`":
                    j += 1
                out.append((inner[i:j], True, False))
                i = j
        return out

    def _dollar(self, s: str, i: int) -> tuple[str, int]:
        """Expand the $-construct or backquote at s[i]; returns (value, index after it)."""
        if s[i] == "`":
            j = skip_quoted(s, i)
            body = re.sub(r"\\([$`\\])", r"\1", s[i + 1:j - 1])
            return self.command_substitution(body), j
        nxt = s[i + 1:i + 2]
        if s.startswith("$((", i):
            j = skip_quoted(s, i)
            if s[j - 2:j] == "))":
                return str(self.arith(s[i + 3:j - 2])), j
            return self.command_substitution(s[i + 2:j - 1]), j
        if nxt == "(":
            j = skip_quoted(s, i)
            return self.command_substitution(s[i + 2:j - 1]), j
        if nxt == "{":
            j = skip_quoted(s, i)
            return self._parameter(s[i + 2:j - 1]), j
        if nxt and nxt in "?$#@*!-0123456789":
            return self._special_param(nxt), i + 2
        m = _VARNAME.match(s, i + 1)
        if not m:
            return "$", i + 1
        return self.vars.get(m.group(0), ""), m.end()

    def _special_param(self, name: str) -> str:
        if name == "?":
            return self.vars.get("?", "0")
        if name == "$":
            return "4242"
        if name == "#":
            return str(len(self.params))
        if name in "@*":
            return " ".join(self.params)
        if name == "0":
            return "bash"
        if name.isdigit():
            k = int(name)
            return self.params[k - 1] if k <= len(self.params) else ""
        return ""

    def _lookup(self, name: str) -> str | None:
        if _VARNAME.fullmatch(name):
            return self.vars.get(name)
        if name.isdigit() or name in "?$#@*":
            val = self._special_param(name) if len(name) == 1 else (
                self.params[int(name) - 1] if int(name) <= len(self.params) else None)
            return val
        raise ExpansionError(f"${{{name}}}: bad substitution")

    def _parameter(self, body: str) -> str:
        """${...}: default values, length, prefix/suffix removal, substitution, substrings, case."""
        if body.startswith("#") and len(body) > 1:
            return str(len(self._lookup(body[1:]) or ""))
        m = re.match(r"([A-Za-z_][A-Za-z0-9_]*|\d+|[?$#@*])", body)
        if not m:
            raise ExpansionError(f"${{{body}}}: bad substitution")
        name, rest = m.group(1), body[m.end():]
        if rest.startswith("["):
            raise ExpansionError(f"${{{body}}}: arrays are not supported in this shell")
        val = self._lookup(name)
        if not rest:
            return val or ""
        for op in (":-", ":=", ":+", ":?", "-", "=", "+", "?"):
            if rest.startswith(op):
                word = rest[len(op):]
                unset = val is None or (op.startswith(":") and val == "")
                if op.endswith("-"):
                    return self.expand_word(word, "one") if unset else val
                if op.endswith("="):
                    if unset:
                        val = self.vars[name] = self.expand_word(word, "one")
                    return val
                if op.endswith("+"):
                    return "" if unset else self.expand_word(word, "one")
                if unset:
                    raise ExpansionError(f"{name}: {self.expand_word(word, 'one') or 'parameter null or not set'}")
                return val
        val = val or ""
        for op in ("##", "#", "%%", "%"):
            if rest.startswith(op):
                return self._remove_affix(body, val, _glob_atoms(self.expand_word(rest[len(op):], "pattern")),
                                          longest=len(op) == 2, suffix=op[0] == "%")
        if rest.startswith("/"):
            pat, _, rep = rest[1:].partition("/") if not rest.startswith("//") else rest[2:].partition("/")
            if not pat:
                return val
            count = 0 if rest.startswith("//") else 1
            anchor = ""
            if pat.startswith("#") or pat.startswith("%"):
                anchor, pat = pat[0], pat[1:]
            rx = _glob_regex(_glob_atoms(self.expand_word(pat, "pattern")), prefix="^" if anchor == "#" else "",
                             suffix=r"\Z" if anchor == "%" else "")
            rep_text = self.expand_word(rep, "one")
            return self._glob_call(body, lambda timeout: rx.sub(lambda _m: rep_text, val, count=count,
                                                                timeout=timeout))
        if rest in ("^^", ",,", "^", ","):
            if rest == "^^":
                return val.upper()
            if rest == ",,":
                return val.lower()
            return (val[:1].upper() if rest == "^" else val[:1].lower()) + val[1:]
        if rest.startswith(":"):
            off, _, length = rest[1:].partition(":")
            start = self.arith(off) if off.strip() else 0
            if start < 0:
                start = max(len(val) + start, 0)
            if not length.strip():
                return val[start:]
            ln = self.arith(length)
            return val[start:start + ln] if ln >= 0 else val[start:len(val) + ln]
        raise ExpansionError(f"${{{body}}}: bad substitution")

    def _remove_affix(self, body: str, val: str, atoms: list[str], longest: bool, suffix: bool) -> str:
        """${v#p} ${v##p} ${v%p} ${v%%p} with one anchored match: lazy stars find the shortest prefix,
        greedy ones the longest; a suffix is a prefix of the reversed text, matched by the reversed glob."""
        text = val[::-1] if suffix else val
        rx = _glob_regex(atoms[::-1] if suffix else atoms, lazy=not longest)
        m = self._glob_call(body, lambda timeout: rx.match(text, timeout=timeout))
        if m is None:
            return val
        return val[:len(val) - m.end()] if suffix else val[m.end():]

    def _glob_call(self, body: str, call):
        """Run one pattern match of ${...} under the action's deadline, like grep, sed and awk."""
        try:
            return call(regex_timeout(self._deadline))
        except (TimeoutError, RegexTimeout):
            raise ExpansionError(f"${{{body[:40]}}}: the pattern took too long to match") from None

    def command_substitution(self, src: str) -> str:
        """$(...) / `...`: run in a subshell, capture stdout (trailing newlines removed)."""
        inner = Sink()
        status = self._script(src, [], Input(""), inner)
        self._subst_status = status
        for fd, text in inner.chunks:
            if fd == 2:
                self._sink.write(2, text)
        return inner.text(1).rstrip("\n")

    def arith(self, expr: str) -> int:
        self.tick()
        return arith(self.expand_word(expr, "heredoc"), self.vars)

    # ------------------------------------------------------------------ helpers
    def parts(self, path: str) -> list[str]:
        return split_path(path, self.cwd)

    def glob(self, pattern: str) -> list[str]:
        absolute = pattern.startswith("/")
        comps = [c for c in pattern.split("/") if c]
        base = [] if absolute else split_path(".", self.cwd)
        results: list[tuple[list[str], str]] = [(base, "/" if absolute else "")]
        for k, comp in enumerate(comps):
            last = k == len(comps) - 1
            nxt: list[tuple[list[str], str]] = []
            has_magic = any(ch in comp for ch in _GLOB_CHARS)
            for parts, shown in results:
                node = self.fs.get(parts)
                if not isinstance(node, dict):
                    continue
                prefix = shown if (shown == "" or shown.endswith("/")) else shown + "/"
                if not has_magic:
                    name = re.sub(r"\[(.)\]", r"\1", comp)
                    if name in node or name in (".", ".."):
                        if last or isinstance(node.get(name), dict) or name in (".", ".."):
                            nxt.append((split_path(name, join_parts(parts)), prefix + name))
                    continue
                for name in sorted(node):
                    if name.startswith(".") and not comp.startswith("."):
                        continue
                    if fnmatch.fnmatchcase(name, comp) and (last or isinstance(node[name], dict)):
                        nxt.append((parts + [name], prefix + name))
            results = nxt
            if len(results) > MAX_NODES:
                break
        if pattern.endswith("/") and comps:  # dir/*/ matches directories only, shown with their slash
            return [shown + "/" for parts, shown in results if self.fs.is_dir(parts)]
        return [shown for _, shown in results]

    # ------------------------------------------------------------------ shell builtins
    def _read(self, args: list[str], inp: "Input", sink: "Sink") -> int:
        try:
            opts, names = getopts("read", args, "rs", "ptnda")
        except UsageError as e:
            sink.write(2, f"bash: {e}\n")
            return 2
        if opts.get("a"):
            sink.write(2, "bash: read: -a: arrays are not supported in this shell\n")
            return 2
        delim = (_last(opts, "d") or "\n")[:1] or "\0"
        line, complete = inp.read_until(delim)
        if line is None:
            for name in names or ["REPLY"]:
                self.vars[name] = ""
            return 1
        if not opts.get("r"):
            line = re.sub(r"\\(.)", r"\1", line.replace("\\\n", ""))
        if not names:
            self.vars["REPLY"] = line
            return 0 if complete else 1
        ifs = self.vars.get("IFS", " \t\n")
        fields = ifs_split(line, ifs, maxsplit=len(names) - 1)
        if len(fields) == len(names) and ifs:
            ws = "".join(c for c in ifs if c in " \t\n")
            fields[-1] = fields[-1].rstrip(ws) if ws else fields[-1]
        for k, name in enumerate(names):
            if not _VARNAME.fullmatch(name):
                sink.write(2, f"bash: read: `{name}': not a valid identifier\n")
                return 1
            self.vars[name] = fields[k] if k < len(fields) else ""
        return 0 if complete else 1

    def _exit(self, args: list[str], inp: "Input", sink: "Sink") -> int:
        raise _Exit(_status_arg(args, self.vars.get("?", "0")))

    def _return(self, args: list[str], inp: "Input", sink: "Sink") -> int:
        raise _Return(_status_arg(args, self.vars.get("?", "0")))

    def _loop_control(self, kind: str, args: list[str], sink: "Sink") -> int:
        if not self._loops:
            sink.write(2, f"bash: {kind}: only meaningful in a `for', `while', or `until' loop\n")
            return 0
        levels = int(args[0]) if args and args[0].isdigit() and int(args[0]) > 0 else 1
        raise _LoopControl(kind, min(levels, self._loops))

    def _break(self, args: list[str], inp: "Input", sink: "Sink") -> int:
        return self._loop_control("break", args, sink)

    def _continue(self, args: list[str], inp: "Input", sink: "Sink") -> int:
        return self._loop_control("continue", args, sink)

    def _export(self, args: list[str], inp: "Input", sink: "Sink") -> int:
        if any(a.startswith("-") and ("a" in a or "A" in a) for a in args):
            sink.write(2, "bash: declare: arrays are not supported in this shell\n")
            return 2
        status = 0
        for a in args:
            if a.startswith("-"):
                continue
            name, eq, value = a.partition("=")
            if not _VARNAME.fullmatch(name):
                sink.write(2, f"bash: export: `{a}': not a valid identifier\n")
                status = 1
            elif eq:
                self.vars[name] = value
            else:
                self.vars.setdefault(name, "")
        return status

    def _unset(self, args: list[str], inp: "Input", sink: "Sink") -> int:
        for a in args:
            if not a.startswith("-"):
                self.vars.pop(a, None)
                self.functions.pop(a, None)
        return 0

    def _eval(self, args: list[str], inp: "Input", sink: "Sink") -> int:
        return self._script(" ".join(args), [], inp, sink, subshell=False)

    def _source(self, args: list[str], inp: "Input", sink: "Sink") -> int:
        if not args:
            sink.write(2, "bash: source: filename argument required\n")
            return 2
        try:
            text = self.fs.read(self.parts(args[0]))
        except FSError as e:
            sink.write(2, f"bash: {args[0]}: {e.reason}\n")
            return 1
        return self._script(text, [], inp, sink, subshell=False)

    def _bash(self, args: list[str], inp: "Input", sink: "Sink") -> int:
        while args and args[0] in ("-e", "-x", "-u", "-eu", "-ex", "-l", "--login"):
            args = args[1:]
        if args and args[0] == "-c":
            if len(args) < 2:
                sink.write(2, "bash: -c: option requires an argument\n")
                return 2
            return self._script(args[1], args[2:], inp, sink)
        if not args:
            return self._script(inp.rest(), [], Input(""), sink)
        try:
            text = self.fs.read(self.parts(args[0]))
        except FSError as e:
            sink.write(2, f"bash: {args[0]}: {e.reason}\n")
            return 127
        return self._script(text, args, inp, sink)

    def _set(self, args: list[str], inp: "Input", sink: "Sink") -> int:
        if args and args[0] == "--":
            self.params = args[1:]
        elif not args:
            sink.write(1, "".join(f"{k}={v}\n" for k, v in sorted(self.vars.items()) if _VARNAME.fullmatch(k)))
        return 0  # -e / -u / -o pipefail are accepted and not enforced

    def _shift(self, args: list[str], inp: "Input", sink: "Sink") -> int:
        k = int(args[0]) if args and args[0].isdigit() else 1
        if k > len(self.params):
            return 1
        self.params = self.params[k:]
        return 0

    def _let(self, args: list[str], inp: "Input", sink: "Sink") -> int:
        val = 0
        for a in args:
            val = self.arith(a)
        return int(val == 0)

    def _sudo(self, args: list[str], inp: "Input", sink: "Sink") -> int:
        while args and args[0].startswith("-"):
            args = args[1:]
        if not args:
            sink.write(2, "usage: sudo command\n")
            return 1
        return self.run_argv(args, inp, sink)

    def _command(self, args: list[str], inp: "Input", sink: "Sink") -> int:
        if args and args[0] in ("-v", "-V"):
            found = [a for a in args[1:] if a in self.commands or a in self.specials or a in self.functions]
            sink.write(1, "".join(f"{a}\n" for a in found))
            return 0 if len(found) == len(args) - 1 else 1
        return self.run_argv(args, inp, sink) if args else 0

    def _xargs(self, args: list[str], inp: "Input", sink: "Sink") -> int:
        try:
            opts, rest = getopts("xargs", _split_xargs_opts(args), "0rtx", "InLdPs")
        except UsageError as e:
            sink.write(2, f"{e}\n")
            return 1
        cmd = rest or ["echo"]
        text = inp.rest()
        repl = _last(opts, "I")
        delim = _last(opts, "d")
        if opts.get("0"):
            items = [x for x in text.split("\0")]
            if items and items[-1] in ("", "\n"):
                items.pop()
        elif delim is not None:
            d = _unescape(delim)[:1] or "\n"
            items = text.split(d)
            if items and items[-1] == "":
                items.pop()
        elif repl is not None or opts.get("L"):
            items = [line.lstrip(" \t") for line in _lines(text) if line.strip()]
        else:
            try:
                items = _xargs_split(text)
            except UsageError as e:
                sink.write(2, f"xargs: {e}\n")
                return 1
        per = None
        if _last(opts, "n"):
            per = _int_arg("xargs", "number of arguments", _last(opts, "n"))
            if per < 1:
                sink.write(2, f"xargs: value {per} for -n option should be >= 1\n")
                return 1
        if _last(opts, "L"):
            per = _int_arg("xargs", "number of lines", _last(opts, "L"))
        if repl is not None:
            batches = [[a.replace(repl, item) for a in cmd] for item in items]
        elif not items:
            batches = [] if opts.get("r") else [list(cmd)]
        else:
            step = per or len(items)
            batches = [list(cmd) + items[k:k + step] for k in range(0, len(items), step)]
        status = 0
        for argv in batches:
            self.tick()
            if opts.get("t"):
                sink.write(2, " ".join(argv) + "\n")
            st = self.run_argv(argv, Input(""), sink)
            if st == 127:
                return 127
            if st:
                status = 123
        return status

    # ------------------------------------------------------------------ test / [ / [[
    def test(self, args: list[str], stdin: str, name: str = "test") -> Result:
        try:
            return "", "", 0 if _TestParser(args, self, name).parse() else 1
        except UsageError as e:
            return "", f"bash: {e}\n", 2

    def bracket(self, args: list[str], stdin: str) -> Result:
        if not args or args[-1] != "]":
            return "", "bash: [: missing `]'\n", 2
        return self.test(args[:-1], stdin, "[")

    def _cond(self, items: list) -> bool:
        words: list = []
        for it in items:
            if isinstance(it, Word):
                words.append(_CondWord(it.raw))
            else:
                words.append(it)
        return _TestParser(words, self, "[[", cond=True).parse()

    def file_test(self, op: str, path: str) -> bool:
        if not path:  # `[ -x "" ]` is false (an empty name is not the current directory)
            return False
        parts = self.parts(path)
        node = self.fs.get(parts)
        if op == "-e" or op == "-a":
            return node is not None
        if op == "-f":
            return isinstance(node, str)
        if op == "-d":
            return isinstance(node, dict)
        if op == "-s":
            return node is not None and (isinstance(node, dict) or len(node) > 0)
        if op in ("-r", "-w"):
            return node is not None
        if op == "-x":
            return node is not None and bool(self.fs.mode(parts) & 0o111)
        return False  # -L -h -p -S -b -c: no links, pipes, sockets or devices here

    def _read_inputs(self, cmd: str, operands: list[str], stdin: str):
        """Yield (name, text) per operand ('-' or none = stdin), and collect errors."""
        errors: list[str] = []
        items: list[tuple[str, str]] = []
        total = 0
        for op in operands or ["-"]:
            if op == "-":
                items.append(("-", stdin))
                continue
            try:
                text = self.fs.read(self.parts(op))
            except FSError as e:
                errors.append(f"{cmd}: {op}: {e.reason}\n")
                continue
            items.append((op, text))
            total += len(text)
            if total > MAX_STREAM:
                break
        return items, "".join(errors)

    # ------------------------------------------------------------------ commands
    def ls(self, args: list[str], stdin: str) -> Result:
        opts, operands = getopts("ls", args, "alR1SrhdAtF", long={"all": "a", "recursive": "R"})
        show_all, almost = bool(opts.get("a")), bool(opts.get("A"))
        long_fmt = bool(opts.get("l"))
        out: list[str] = []
        err: list[str] = []
        status = 0
        files, dirs = [], []
        for op in operands or ["."]:
            parts = self.parts(op)
            node = self.fs.get(parts)
            if node is None:
                err.append(f"ls: cannot access '{op}': No such file or directory\n")
                status = 2
            elif isinstance(node, dict) and not opts.get("d"):
                dirs.append((op, parts, node))
            else:
                files.append((op, node))

        def order(entries: list[tuple[str, object]]) -> list[tuple[str, object]]:
            entries = sorted(entries, key=lambda e: e[0])
            if opts.get("S"):
                entries.sort(key=lambda e: -_size(e[1]))
            if opts.get("r"):
                entries.reverse()
            return entries

        def perms(name: str, node, base: list[str] | None) -> str:
            if base is None:
                p = self.parts(name)
            else:
                p = base if name == "." else base[:-1] if name == ".." else base + [name]
            return _mode_string(self.fs.mode(p), isinstance(node, dict))

        def fmt(entries: list[tuple[str, object]], with_total: bool, base: list[str] | None = None) -> list[str]:
            if not long_fmt:
                return [name + ("/" if opts.get("F") and isinstance(node, dict) else "") for name, node in entries]
            human = bool(opts.get("h"))

            def size(node) -> str:
                return _human_kb(_size(node) / 1024, bytes_below_1k=True) if human else str(_size(node))

            width = max((len(size(node)) for _, node in entries), default=1)
            total = sum(_blocks(node) for _, node in entries)
            lines = [f"total {_human_kb(total) if human else total}"] if with_total else []
            for name, node in entries:
                mode, links = perms(name, node, base), (2 if isinstance(node, dict) else 1)
                lines.append(f"{mode} {links} root root {size(node):>{width}} Jan  1 00:00 {name}")
            return lines

        out.extend(fmt(order(files), False))
        headers = len(operands) > 1 or bool(opts.get("R"))
        queue = [(op, parts, node) for op, parts, node in sorted(dirs, key=lambda d: d[0])]
        first = not files
        while queue:
            shown, parts, node = queue.pop(0)
            entries = [(k, v) for k, v in node.items() if show_all or almost or not k.startswith(".")]
            if show_all:
                entries += [(".", node), ("..", self.fs.get(parts[:-1]) if parts else node)]
            entries = order(entries)
            if not first:
                out.append("")
            first = False
            if headers:
                out.append(f"{shown}:")
            out.extend(fmt(entries, True, parts))
            if opts.get("R"):
                prefix = shown.rstrip("/") if shown != "/" else ""
                subs = [(f"{prefix}/{k}", parts + [k], v) for k, v in entries
                        if isinstance(v, dict) and k not in (".", "..")]
                queue[0:0] = subs
            if sum(len(x) for x in out) > MAX_STREAM:
                break
        return _join(out), "".join(err), status

    def cat(self, args: list[str], stdin: str) -> Result:
        opts, operands = getopts("cat", args, "nAEsuv")
        items, err = self._read_inputs("cat", operands, stdin)
        text = "".join(t for _, t in items)[:MAX_STREAM]
        if opts.get("n"):
            text = _join(f"{i:6d}\t{line}" for i, line in enumerate(_lines(text), 1))
        return text, err, 1 if err else 0

    def _head_tail(self, cmd: str, args: list[str], stdin: str) -> Result:
        args = [("-n" + a[1:]) if re.fullmatch(r"-\d+", a) and (k == 0 or args[k - 1] not in ("-n", "-c"))
                else a for k, a in enumerate(args)]  # head -5 = head -n 5
        opts, operands = getopts(cmd, args, "qv", "nc", long={"lines": "n", "bytes": "c"})
        count_s = _last(opts, "n") or "10"
        from_start = cmd == "tail" and count_s.startswith("+")
        all_but = cmd == "head" and count_s.startswith("-")  # head -n -N: all but the last N lines
        count = abs(_int_arg(cmd, "number of lines", count_s.lstrip("+")))
        items, err = self._read_inputs(cmd, operands, stdin)
        out = []
        for k, (name, text) in enumerate(items):
            if len(items) > 1:
                out.append(("\n" if k else "") + f"==> {'standard input' if name == '-' else name} <==\n")
            if opts.get("c"):
                spec = _last(opts, "c")
                nbytes = abs(_int_arg(cmd, "number of bytes", spec.lstrip("+")))
                if cmd == "head":
                    out.append(text[:max(len(text) - nbytes, 0)] if spec.startswith("-") else text[:nbytes])
                else:
                    out.append(text[nbytes - 1:] if spec.startswith("+") else (text[-nbytes:] if nbytes else ""))
                continue
            lines = _lines(text)
            if cmd == "head":
                sel = lines[:max(len(lines) - count, 0)] if all_but else lines[:count]
                has_last = not all_but and count >= len(lines)
            else:
                sel = lines[max(count - 1, 0):] if from_start else (lines[-count:] if count else [])
                has_last = bool(sel)
            chunk = _join(sel)
            if sel and has_last and not text.endswith("\n"):
                chunk = chunk[:-1]  # the input's last line had no newline; neither does ours
            out.append(chunk)
        return "".join(out), err, 1 if err else 0

    def head(self, args: list[str], stdin: str) -> Result:
        return self._head_tail("head", args, stdin)

    def tail(self, args: list[str], stdin: str) -> Result:
        return self._head_tail("tail", args, stdin)

    def wc(self, args: list[str], stdin: str) -> Result:
        opts, operands = getopts("wc", args, "lwcm", long={"lines": "l", "words": "w", "bytes": "c", "chars": "m"})
        which = [k for k in "lwcm" if opts.get(k)] or ["l", "w", "c"]
        items, err = self._read_inputs("wc", operands, stdin)
        rows = []
        for name, text in items:
            counts = {"l": text.count("\n"), "w": len(text.split()), "c": len(text.encode("utf-8", "replace")),
                      "m": len(text)}
            rows.append(([counts[k] for k in which], "" if name == "-" else name))
        if len(rows) > 1:
            rows.append(([sum(r[0][i] for r in rows) for i in range(len(which))], "total"))
        if len(rows) == 1 and len(which) == 1:
            width = 1
        elif not operands or "-" in operands:
            width = 7
        else:  # GNU wc sizes the columns for the total number of bytes of its files
            width = len(str(sum(len(t.encode("utf-8", "replace")) for _, t in items)))
        out = [" ".join(f"{v:>{width}}" for v in vals) + (f" {name}" if name else "") for vals, name in rows]
        return _join(out), err, 1 if err else 0

    def egrep(self, args: list[str], stdin: str) -> Result:
        return self.grep(["-E"] + args, stdin)

    def grep(self, args: list[str], stdin: str) -> Result:
        args2 = []
        include: list[str] = []
        for a in args:
            if a.startswith("--include="):
                include.append(a.split("=", 1)[1])
            elif a.startswith("--color") or a.startswith("--colour"):
                continue
            else:
                args2.append(a)
        args2 = [("-C" + a[1:]) if re.fullmatch(r"-\d+", a) else a for a in args2]  # grep -2 = -C 2
        opts, operands = getopts("grep", args2, "ivcnrRlLwxEFohHqsI", "emABC",
                                 long={"ignore-case": "i", "invert-match": "v", "count": "c", "line-number": "n",
                                       "max-count": "m", "after-context": "A", "before-context": "B",
                                       "context": "C",
                                       "recursive": "r", "files-with-matches": "l", "extended-regexp": "E",
                                       "fixed-strings": "F", "only-matching": "o", "quiet": "q", "word-regexp": "w"})
        patterns = opts.get("e") or []
        if not patterns:
            if not operands:
                raise UsageError("Usage: grep [OPTION]... PATTERNS [FILE]...\nTry 'grep --help' for more information.")
            patterns = [operands.pop(0)]
        try:
            rx = compile_grep(patterns, extended=bool(opts.get("E")), fixed=bool(opts.get("F")),
                              icase=bool(opts.get("i")), word=bool(opts.get("w")), line=bool(opts.get("x")))
        except UsageError as e:
            return "", f"grep: {e}\n", 2
        recursive = bool(opts.get("r") or opts.get("R"))
        targets: list[tuple[str, str | None]] = []  # (shown name, text or None for stdin)
        err: list[str] = []
        if not operands:
            operands = ["."] if recursive else ["-"]
        total = 0
        for op in operands:
            if op == "-":
                targets.append(("(standard input)", stdin))
                continue
            parts = self.parts(op)
            node = self.fs.get(parts)
            if node is None:
                if not opts.get("s"):
                    err.append(f"grep: {op}: No such file or directory\n")
                continue
            if isinstance(node, dict):
                if not recursive:
                    err.append(f"grep: {op}: Is a directory\n")
                    continue
                base = op.rstrip("/") if op != "/" else ""
                for p, n in self.fs.walk(parts):
                    if isinstance(n, str):
                        if include and not any(fnmatch.fnmatchcase(p[-1], g) for g in include):
                            continue
                        targets.append((base + "/" + "/".join(p[len(parts):]), n))
                        total += len(n)
                        if total > MAX_STREAM:
                            break
            else:
                targets.append((op, node))
                total += len(node)
            if total > MAX_STREAM:
                break
        prefix_names = (len(targets) > 1 or recursive) and not opts.get("h") or bool(opts.get("H"))
        invert = bool(opts.get("v"))
        out: list[str] = []
        size = 0
        any_match = False
        stopped = False
        max_count = _int_arg("grep", "max count", _last(opts, "m")) if _last(opts, "m") else -1
        around = _int_arg("grep", "context length argument", _last(opts, "C")) if _last(opts, "C") else 0
        after = _int_arg("grep", "context length argument", _last(opts, "A")) if _last(opts, "A") else around
        before = _int_arg("grep", "context length argument", _last(opts, "B")) if _last(opts, "B") else around
        last_shown = None
        for name, text in targets:
            lines = _lines(text)
            selected: list[int] = []
            try:
                for k, line in enumerate(lines):
                    if (rx.search(line, timeout=regex_timeout(self._deadline)) is not None) != invert:
                        selected.append(k)
                        if opts.get("q") or opts.get("l") or len(selected) == max_count:
                            break
            except (TimeoutError, RegexTimeout):
                err.append("grep: stopped: the pattern took too long; the output is incomplete\n")
                stopped = True
            if selected:
                any_match = True
            if opts.get("q"):
                if selected:
                    return "", "", 0
            elif opts.get("c"):
                out.append((f"{name}:" if prefix_names else "") + f"{len(selected)}\n")
            elif opts.get("l"):
                if selected:
                    out.append(name + "\n")
            elif opts.get("L"):
                if not selected:
                    out.append(name + "\n")
            else:
                pre = f"{name}:" if prefix_names else ""
                numbered = bool(opts.get("n"))
                if (after or before) and selected and not opts.get("o"):
                    chosen = set(selected)
                    shown = sorted({j for k in selected for j in range(max(k - before, 0),
                                                                           min(k + after + 1, len(lines)))})
                    for j in shown:
                        if last_shown is not None and j != last_shown[1] + 1 or (last_shown and last_shown[0] != name):
                            out.append("--\n")
                        sep = ":" if j in chosen else "-"
                        out.append((f"{name}{sep}" if prefix_names else "") + (f"{j + 1}{sep}" if numbered else "")
                                   + lines[j] + "\n")
                        last_shown = (name, j)
                    selected = []
                for k in selected:
                    head = pre + (f"{k + 1}:" if numbered else "")
                    if opts.get("o") and not invert:
                        found = rx.finditer(lines[k], timeout=regex_timeout(self._deadline))
                        chunk = "".join(head + m.group(0) + "\n" for m in found if m.group(0))
                    else:
                        chunk = head + lines[k] + "\n"
                    out.append(chunk)
                    size += len(chunk)
                    if size > MAX_STREAM:
                        break
            if size > MAX_STREAM or stopped:
                break
        status = 0 if any_match else 1
        if err and not (opts.get("q") and any_match):
            status = 2
        return "".join(out), "".join(err), status

    def find(self, args: list[str], stdin: str) -> Result:
        """find PATH... EXPR: tests -name -iname -path -type -empty -size -perm, operators ! -a -o ( ),
        actions -print -print0 -delete -exec CMD {} ; / + (-prune is accepted and ignored); -maxdepth/-mindepth."""
        starts: list[str] = []
        i = 0
        while i < len(args) and not (args[i].startswith("-") or args[i] in ("!", "(")):
            starts.append(args[i])
            i += 1
        parser = _FindParser(args[i:])
        try:
            expr = parser.parse()
        except UsageError as e:
            return "", f"find: {e}\n", 1
        maxdepth, mindepth = parser.maxdepth, parser.mindepth
        out: list[str] = []
        err: list[str] = []
        execs: dict[int, list[str]] = {}
        to_delete: list[tuple[list[str], str]] = []
        state = {"size": 0, "failed": False}
        pruned: list[list[str]] = []

        def act(action: tuple, p: list[str], shown: str) -> bool:
            kind = action[0]
            if kind in ("print", "print0"):
                out.append(shown + ("\0" if kind == "print0" else "\n"))
                state["size"] += len(shown) + 1
            elif kind == "delete":
                to_delete.append((p, shown))
            elif kind == "prune":
                pruned.append(p)
            elif kind == "printf":
                text = _find_printf(action[1], self.fs, p, shown, len(p) - len(start_parts))
                out.append(text)
                state["size"] += len(text)
            elif kind == "exec":
                cmd, batch = action[1], action[2]
                if batch:
                    execs.setdefault(id(action), [action]).append(shown)
                    return True
                self.tick()
                inner = Sink()
                status = self.run_argv([a.replace("{}", shown) for a in cmd], Input(""), inner)
                out.append(inner.text(1))
                err.append(inner.text(2))
                return status == 0
            return True

        def evaluate(e, node, p: list[str], shown: str) -> bool:
            op = e[0]
            if op == "and":
                return evaluate(e[1], node, p, shown) and evaluate(e[2], node, p, shown)
            if op == "or":
                return evaluate(e[1], node, p, shown) or evaluate(e[2], node, p, shown)
            if op == "not":
                return not evaluate(e[1], node, p, shown)
            if op == "test":
                return _find_test(e[1], e[2], node, p, shown, self.fs)
            return act(e[1], p, shown)

        start_parts: list[str] = []
        for start in starts or ["."]:
            parts = start_parts = self.parts(start)
            if self.fs.get(parts) is None:
                err.append(f"find: '{start}': No such file or directory\n")
                continue
            for p, node in self.fs.walk(parts):
                depth = len(p) - len(parts)
                if maxdepth is not None and depth > maxdepth:
                    continue
                if depth < mindepth or any(p[:len(q)] == q and len(p) > len(q) for q in pruned):
                    continue
                rel = "/".join(p[len(parts):])
                shown = start if not rel else (start.rstrip("/") + "/" + rel if start != "/" else "/" + rel)
                matched = evaluate(expr, node, p, shown) if expr is not None else True
                if matched and not parser.has_action:
                    act(("print",), p, shown)
                if state["size"] > MAX_STREAM:
                    break
        for group in execs.values():  # -exec CMD {} + runs once with every file
            action, files = group[0], group[1:]
            cmd = action[1]
            k = cmd.index("{}") if "{}" in cmd else len(cmd)
            self.tick()
            inner = Sink()
            if self.run_argv(cmd[:k] + files + cmd[k + 1:], Input(""), inner) != 0:
                state["failed"] = True
            out.append(inner.text(1))
            err.append(inner.text(2))
        for p, shown in reversed(to_delete):
            node = self.fs.get(p)
            if isinstance(node, dict) and node:
                err.append(f"find: cannot delete '{shown}': Directory not empty\n")
                continue
            if not p:
                err.append("find: cannot delete '/': Device or resource busy\n")
                continue
            try:
                self.fs.remove(p)
            except FSError as e:
                err.append(f"find: cannot delete '{shown}': {e.reason}\n")
        return "".join(out), "".join(err), 1 if state["failed"] or any(err) else 0

    def sort(self, args: list[str], stdin: str) -> Result:
        """sort, with -o FILE written after all input is read (so `sort f -o f` is safe, as in GNU sort)."""
        rest, output, i = [], None, 0
        while i < len(args):
            a = args[i]
            if a == "-o" and i + 1 < len(args):
                output = args[i + 1]
                i += 2
                continue
            if a.startswith("--output="):
                output = a.split("=", 1)[1]
            elif a.startswith("-o") and len(a) > 2:
                output = a[2:]
            else:
                rest.append(a)
            i += 1
        out, err, status = self._sort(rest, stdin)
        if output is None or status:
            return out, err, status
        try:
            self.fs.write(self.parts(output), out)
        except FSError as e:
            return "", f"sort: open failed: {output}: {e.reason}\n", 2
        return "", err, status

    def _sort(self, args: list[str], stdin: str) -> Result:
        opts, operands = getopts("sort", args, "nrufbsVhg", "kt", long={"numeric-sort": "n", "reverse": "r",
                                                                       "unique": "u", "ignore-case": "f",
                                                                       "human-numeric-sort": "h"})
        num_of = _human_num if opts.get("h") else _num
        if opts.get("h") or opts.get("g"):
            opts["n"] = True
        sep = _last(opts, "t")
        if sep is not None and len(sep) != 1:
            return "", "sort: multi-character tab '" + sep + "'\n", 2
        keys = []
        for spec in opts.get("k") or []:
            m = re.fullmatch(r"(\d+)(?:\.\d+)?([bnrf]*)(?:,(\d+)(?:\.\d+)?([bnrf]*))?", spec)
            if not m or int(m.group(1)) == 0:
                return "", f"sort: invalid number at field start: invalid count at start of '{spec}'\n", 2
            start = int(m.group(1))
            end = int(m.group(3)) if m.group(3) else None
            mods = (m.group(2) or "") + (m.group(4) or "")
            keys.append((start, end, "n" in mods or bool(opts.get("n")), "r" in mods, "f" in mods))
        items, err = self._read_inputs("sort", operands, stdin)
        if err:
            return "", err, 2
        lines = _lines("".join(t if t.endswith("\n") or not t else t + "\n" for _, t in items))
        numeric, fold, reverse = bool(opts.get("n")), bool(opts.get("f")), bool(opts.get("r"))

        def fields(line: str) -> list[str]:
            return line.split(sep) if sep is not None else line.split()

        def keyval(line: str):
            if not keys:
                return (num_of(line) if numeric else (line.lower() if fold else line),)
            vals = []
            for start, end, num, rev, kfold in keys:
                f = fields(line)
                chunk = f[start - 1:end if end else None]
                text = (sep if sep is not None else " ").join(chunk)
                v = num_of(text) if num else (text.lower() if (kfold or fold) else text)
                vals.append(_Rev(v) if rev else v)
            return tuple(vals)

        if not keys and not opts.get("u") and not opts.get("s"):
            if numeric:
                lines.sort(key=lambda line: (num_of(line), line), reverse=reverse)
            else:
                lines.sort(key=(lambda line: (line.lower(), line)) if fold else None, reverse=reverse)
            return _join(lines), "", 0
        decorated = [(keyval(line), line) for line in lines]
        if opts.get("u") or opts.get("s"):
            decorated.sort(key=lambda d: d[0], reverse=reverse)
        else:
            decorated.sort(key=lambda d: (d[0], d[1]), reverse=reverse)
        if opts.get("u"):
            uniq, prev = [], object()
            for k, line in decorated:
                if k != prev:
                    uniq.append((k, line))
                prev = k
            decorated = uniq
        return _join(line for _, line in decorated), "", 0

    def uniq(self, args: list[str], stdin: str) -> Result:
        opts, operands = getopts("uniq", args, "cdui", long={"count": "c"})
        items, err = self._read_inputs("uniq", operands[:1], stdin)
        if err:
            return "", err, 1
        lines = _lines(items[0][1] if items else "")
        groups: list[list] = []
        for line in lines:
            key = line.lower() if opts.get("i") else line
            if groups and groups[-1][0] == key:
                groups[-1][2] += 1
            else:
                groups.append([key, line, 1])
        out = []
        for _, line, c in groups:
            if opts.get("d") and c < 2 or opts.get("u") and c > 1:
                continue
            out.append(f"{c:7d} {line}" if opts.get("c") else line)
        return _join(out), "", 0

    def cut(self, args: list[str], stdin: str) -> Result:
        opts, operands = getopts("cut", args, "s", "dfcb", long={"delimiter": "d", "fields": "f"})
        delim = _last(opts, "d")
        if delim is not None and len(delim) != 1:
            return "", "cut: the delimiter must be a single character\nTry 'cut --help' for more information.\n", 1
        spec = _last(opts, "f")
        chars = _last(opts, "c") or _last(opts, "b")
        if spec is None and chars is None:
            return "", ("cut: you must specify a list of bytes, characters, or fields\n"
                        "Try 'cut --help' for more information.\n"), 1
        try:
            sel = _parse_list(spec if spec is not None else chars)
        except ValueError as e:
            return "", f"cut: {e}\nTry 'cut --help' for more information.\n", 1
        items, err = self._read_inputs("cut", operands, stdin)
        out = []
        d = delim if delim is not None else "\t"
        picks: dict[int, list[int]] = {}
        for _, text in items:
            for line in _lines(text):
                if spec is None:
                    out.append("".join(ch for i, ch in enumerate(line, 1) if sel(i)))
                elif d not in line:
                    if not opts.get("s"):
                        out.append(line)
                else:
                    fields = line.split(d)
                    idx = picks.get(len(fields))
                    if idx is None:
                        idx = picks[len(fields)] = [i - 1 for i in range(1, len(fields) + 1) if sel(i)]
                    out.append(fields[idx[0]] if len(idx) == 1 else d.join(fields[i] for i in idx))
        return _join(out), err, 1 if err else 0

    def echo(self, args: list[str], stdin: str) -> Result:
        newline, escapes = True, False
        while args and re.fullmatch(r"-[neE]+", args[0]):
            newline = newline and "n" not in args[0]
            escapes = ("e" in args[0]) or (escapes and "E" not in args[0])
            args = args[1:]
        text = " ".join(args)
        if escapes:
            text = _unescape(text)
        return text + ("\n" if newline else ""), "", 0

    def printf(self, args: list[str], stdin: str) -> Result:
        if not args:
            return "", "printf: usage: printf [-v var] format [arguments]\n", 2
        fmt, rest = _unescape(args[0]), args[1:]
        out: list[str] = []
        errors: list[str] = []
        pos = size = 0
        while True:  # the format is reused until the arguments run out
            text, consumed = _printf_once(fmt, rest[pos:pos + 64], errors)
            out.append(text)
            pos += consumed
            size += len(text)
            if pos >= len(rest) or consumed == 0 or size > MAX_STREAM:
                break
        return "".join(out), "".join(errors), 1 if errors else 0

    def pwd(self, args: list[str], stdin: str) -> Result:
        return self.cwd + "\n", "", 0

    def cd(self, args: list[str], stdin: str) -> Result:
        if len(args) > 1:
            return "", "bash: cd: too many arguments\n", 1
        target = args[0] if args else HOME
        if target == "-":
            target = self.vars.get("OLDPWD", self.cwd)
        parts = self.parts(target)
        node = self.fs.get(parts)
        if node is None:
            return "", f"bash: cd: {target}: No such file or directory\n", 1
        if not isinstance(node, dict):
            return "", f"bash: cd: {target}: Not a directory\n", 1
        self.vars["OLDPWD"] = self.cwd
        self.cwd = join_parts(parts)
        self.vars["PWD"] = self.cwd
        return "", "", 0

    def mkdir(self, args: list[str], stdin: str) -> Result:
        opts, operands = getopts("mkdir", args, "pv", "m", long={"parents": "p"})
        if not operands:
            return "", "mkdir: missing operand\nTry 'mkdir --help' for more information.\n", 1
        err = []
        for op in operands:
            try:
                self.fs.mkdir(self.parts(op), parents=bool(opts.get("p")))
            except FSError as e:
                err.append(f"mkdir: cannot create directory '{op}': {e.reason}\n")
        return "", "".join(err), 1 if err else 0

    def touch(self, args: list[str], stdin: str) -> Result:
        _, operands = getopts("touch", args, "acm")
        if not operands:
            return "", "touch: missing file operand\nTry 'touch --help' for more information.\n", 1
        err = []
        for op in operands:
            parts = self.parts(op)
            if self.fs.get(parts) is not None:
                continue
            try:
                self.fs.write(parts, "")
            except FSError as e:
                err.append(f"touch: cannot touch '{op}': {e.reason}\n")
        return "", "".join(err), 1 if err else 0

    def rm(self, args: list[str], stdin: str) -> Result:
        opts, operands = getopts("rm", args, "rRfvid", long={"recursive": "r", "force": "f"})
        recursive, force = bool(opts.get("r") or opts.get("R")), bool(opts.get("f"))
        if not operands and not force:
            return "", "rm: missing operand\nTry 'rm --help' for more information.\n", 1
        err = []
        for op in operands:
            parts = self.parts(op)
            if op.rstrip("/").split("/")[-1] in (".", ".."):
                err.append(f"rm: refusing to remove '.' or '..' directory: skipping '{op}'\n")
                continue
            if not parts and recursive:
                err.append("rm: it is dangerous to operate recursively on '/'\n"
                           "rm: use --no-preserve-root to override this failsafe\n")
                continue
            node = self.fs.get(parts)
            if node is None:
                if not force:
                    err.append(f"rm: cannot remove '{op}': No such file or directory\n")
                continue
            if isinstance(node, dict) and not recursive:
                if opts.get("d") and not node:
                    self.fs.remove(parts)
                    continue
                err.append(f"rm: cannot remove '{op}': Is a directory\n")
                continue
            if not parts:
                err.append(f"rm: cannot remove '{op}': Is a directory\n")
                continue
            cwd_parts = split_path(".", self.cwd)
            self.fs.remove(parts)
            if cwd_parts[: len(parts)] == parts:
                self.cwd = join_parts(parts[:-1])  # our cwd vanished; a real shell would be left dangling
        return "", "".join(err), 1 if err else 0

    def rmdir(self, args: list[str], stdin: str) -> Result:
        opts, operands = getopts("rmdir", args, "pv")
        if not operands:
            return "", "rmdir: missing operand\nTry 'rmdir --help' for more information.\n", 1
        err = []
        for op in operands:
            parts = self.parts(op)
            node = self.fs.get(parts)
            if node is None:
                err.append(f"rmdir: failed to remove '{op}': No such file or directory\n")
            elif not isinstance(node, dict):
                err.append(f"rmdir: failed to remove '{op}': Not a directory\n")
            elif node or not parts:
                err.append(f"rmdir: failed to remove '{op}': Directory not empty\n")
            else:
                self.fs.remove(parts)
        return "", "".join(err), 1 if err else 0

    def _copy_or_move(self, cmd: str, args: list[str]) -> Result:
        opts, operands = getopts(cmd, args, "rRafvpnTiu", "t", long={"recursive": "r", "force": "f"})
        if _last(opts, "t"):
            operands = operands + [_last(opts, "t")]
        if len(operands) < 2:
            msg = "missing file operand" if not operands else f"missing destination file operand after '{operands[0]}'"
            return "", f"{cmd}: {msg}\nTry '{cmd} --help' for more information.\n", 1
        *sources, dest = operands
        dparts = self.parts(dest)
        dnode = self.fs.get(dparts)
        into_dir = isinstance(dnode, dict)
        if len(sources) > 1 and not into_dir:
            return "", f"{cmd}: target '{dest}' is not a directory\n", 1
        recursive = cmd == "mv" or bool(opts.get("r") or opts.get("R") or opts.get("a"))
        err = []
        for src in sources:
            sparts = self.parts(src)
            snode = self.fs.get(sparts)
            if snode is None:
                err.append(f"{cmd}: cannot stat '{src}': No such file or directory\n")
                continue
            if isinstance(snode, dict) and not recursive:
                err.append(f"cp: -r not specified; omitting directory '{src}'\n")
                continue
            target = dparts + [sparts[-1]] if into_dir and sparts else dparts
            if not sparts:
                err.append(f"{cmd}: cannot {'move' if cmd == 'mv' else 'copy'} '/'\n")
                continue
            if target == sparts:
                if cmd == "cp":
                    err.append(f"cp: '{src}' and '{join_parts(target)}' are the same file\n")
                continue
            if isinstance(snode, dict) and target[: len(sparts)] == sparts:
                verb = "move" if cmd == "mv" else "copy a directory,"
                err.append(f"{cmd}: cannot {verb} '{src}', into itself, '{join_parts(target)}'\n"
                           if cmd == "cp" else
                           f"mv: cannot move '{src}' to a subdirectory of itself, '{join_parts(target)}'\n")
                continue
            tnode = self.fs.get(target)
            if isinstance(tnode, dict) and not isinstance(snode, dict):
                err.append(f"{cmd}: cannot overwrite directory '{join_parts(target)}' with non-directory\n")
                continue
            if isinstance(snode, dict) and tnode is not None and not isinstance(tnode, dict):
                err.append(f"{cmd}: cannot overwrite non-directory '{join_parts(target)}' with directory '{src}'\n")
                continue
            if isinstance(snode, dict) and isinstance(tnode, dict):
                if cmd == "mv" and tnode:
                    err.append(f"mv: cannot move '{src}' to '{join_parts(target)}': Directory not empty\n")
                    continue
            try:
                if cmd == "mv":
                    modes = {k[len(sparts):]: m for k, m in self.fs.modes.items() if k[:len(sparts)] == tuple(sparts)}
                    self.fs.remove(sparts)
                    try:
                        self.fs.insert(target, snode)
                    except FSError:
                        self.fs.insert(sparts, snode)  # put it back
                        target = sparts
                        raise
                    finally:  # a moved file keeps its permissions (chmod +x, then mv onto $PATH)
                        self.fs.modes.update({tuple(target) + rel: m for rel, m in modes.items()})
                else:
                    self.fs.insert(target, _copy_tree(snode) if isinstance(snode, dict) else snode)
            except FSError as e:
                err.append(f"{cmd}: cannot create '{join_parts(target)}': {e.reason}\n")
        return "", "".join(err), 1 if err else 0

    def cp(self, args: list[str], stdin: str) -> Result:
        return self._copy_or_move("cp", args)

    def mv(self, args: list[str], stdin: str) -> Result:
        return self._copy_or_move("mv", args)

    def basename(self, args: list[str], stdin: str) -> Result:
        if not args:
            return "", "basename: missing operand\n", 1
        name = args[0].rstrip("/").split("/")[-1] or "/"
        if len(args) > 1 and name.endswith(args[1]) and name != args[1]:
            name = name[: -len(args[1])]
        return name + "\n", "", 0

    def dirname(self, args: list[str], stdin: str) -> Result:
        if not args:
            return "", "dirname: missing operand\n", 1
        path = args[0].rstrip("/")
        head = path.rsplit("/", 1)[0] if "/" in path else "."
        return (head or "/") + "\n", "", 0

    def whoami(self, args: list[str], stdin: str) -> Result:
        return "root\n", "", 0

    def true(self, args: list[str], stdin: str) -> Result:
        return "", "", 0

    def false(self, args: list[str], stdin: str) -> Result:
        return "", "", 1

    def seq(self, args: list[str], stdin: str) -> Result:
        sep, fmt_w = "\n", False
        nums: list[str] = []
        i = 0
        while i < len(args):
            a = args[i]
            if a == "-s" and i + 1 < len(args):
                sep = _unescape(args[i + 1])
                i += 2
                continue
            if a.startswith("-s") and len(a) > 2:
                sep = _unescape(a[2:])
            elif a == "-w":
                fmt_w = True
            else:
                nums.append(a)
            i += 1
        if not 1 <= len(nums) <= 3:
            return "", "seq: missing operand\nTry 'seq --help' for more information.\n", 1
        try:
            vals = [float(x) for x in nums]
        except ValueError:
            bad = next(x for x in nums if not re.fullmatch(r"-?\d+(\.\d+)?", x))
            return "", f"seq: invalid floating point argument: '{bad}'\nTry 'seq --help' for more information.\n", 1
        first, step, last = (1.0, 1.0, vals[0]) if len(vals) == 1 else (
            (vals[0], 1.0, vals[1]) if len(vals) == 2 else (vals[0], vals[1], vals[2]))
        if step == 0:
            return "", "seq: invalid Zero increment value: '0'\nTry 'seq --help' for more information.\n", 1
        decimals = max((len(x.split(".")[1]) if "." in x else 0) for x in nums)
        out: list[str] = []
        size = 0
        k = 0
        while True:
            v = first + k * step
            if (step > 0 and v > last + 1e-9) or (step < 0 and v < last - 1e-9):
                break
            text = f"{v:.{decimals}f}"
            out.append(text)
            size += len(text) + len(sep)
            if size > MAX_STREAM:
                break
            k += 1
        if fmt_w and out:
            width = max(len(x) for x in out)
            out = [x.zfill(width) for x in out]
        return (sep.join(out) + "\n") if out else "", "", 0

    def tee(self, args: list[str], stdin: str) -> Result:
        opts, operands = getopts("tee", args, "ai", long={"append": "a"})
        err = []
        for op in operands:
            if op == "/dev/null":
                continue
            try:
                self.fs.write(self.parts(op), stdin, append=bool(opts.get("a")))
            except FSError as e:
                err.append(f"tee: {op}: {e.reason}\n")
        return stdin, "".join(err), 1 if err else 0

    def chmod(self, args: list[str], stdin: str) -> Result:
        recursive = False
        rest = []
        for a in args:
            if a in ("-R", "--recursive"):
                recursive = True
            elif a in ("-v", "-f", "-c"):
                continue
            else:
                rest.append(a)
        if len(rest) < 2:
            msg = "missing operand" if not rest else f"missing operand after '{rest[0]}'"
            return "", f"chmod: {msg}\nTry 'chmod --help' for more information.\n", 1
        spec, operands = rest[0], rest[1:]
        if not re.fullmatch(r"[0-7]{1,4}|([ugoa]*[-+=][rwxXst]*)(,[ugoa]*[-+=][rwxXst]*)*", spec):
            return "", f"chmod: invalid mode: '{spec}'\nTry 'chmod --help' for more information.\n", 1
        err = []
        for op in operands:
            parts = self.parts(op)
            if self.fs.get(parts) is None:
                err.append(f"chmod: cannot access '{op}': No such file or directory\n")
                continue
            targets = [p for p, _ in self.fs.walk(parts)] if recursive else [parts]
            for p in targets:
                self.fs.set_mode(p, _apply_mode(spec, self.fs.mode(p), self.fs.is_dir(p)))
        return "", "".join(err), 1 if err else 0

    def du(self, args: list[str], stdin: str) -> Result:
        opts, operands = getopts("du", args, "shacSkbx", "d", long={"summarize": "s", "human-readable": "h",
                                                                   "all": "a", "total": "c", "max-depth": "d"})
        depth_s = _last(opts, "d")
        max_depth = 0 if opts.get("s") else (_int_arg("du", "maximum depth", depth_s) if depth_s else None)
        human = bool(opts.get("h"))
        out: list[str] = []
        err: list[str] = []
        grand = 0

        def show(kb: int, name: str) -> None:
            out.append(f"{_human_kb(kb) if human else kb}\t{name}")

        for op in operands or ["."]:
            parts = self.parts(op)
            node = self.fs.get(parts)
            if node is None:
                err.append(f"du: cannot access '{op}': No such file or directory\n")
                continue

            def visit(p: list[str], n, shown: str, depth: int) -> int:
                if not isinstance(n, dict):
                    kb = _blocks(n) if n else 0
                    if depth == 0 or (opts.get("a") and (max_depth is None or depth <= max_depth)):
                        show(kb, shown)
                    return kb
                total = 4
                for name in sorted(n):
                    total += visit(p + [name], n[name], shown.rstrip("/") + "/" + name if shown != "/" else
                                   "/" + name, depth + 1)
                if max_depth is None or depth <= max_depth:
                    show(total, shown)
                return total

            grand += visit(parts, node, op, 0)
            if len(out) > MAX_NODES:
                break
        if opts.get("c"):
            show(grand, "total")
        return _join(out), "".join(err), 1 if err else 0

    def tr(self, args: list[str], stdin: str) -> Result:
        return run_tr(args, stdin)

    def sed(self, args: list[str], stdin: str) -> Result:
        return run_sed(args, self._read_for_tool, self._write_for_tool, stdin, self._deadline)

    def awk(self, args: list[str], stdin: str) -> Result:
        environ = {k: v for k, v in self.vars.items() if _VARNAME.fullmatch(k)}
        return run_awk(args, self._read_for_tool, self._append_for_awk, self._command_for_awk, environ, stdin,
                       self._deadline)

    def _read_for_tool(self, path: str) -> str:
        if path == "/dev/stdin":
            return ""
        try:
            return self.fs.read(self.parts(path))
        except FSError as e:
            raise OSError(e.reason) from None

    def _write_for_tool(self, path: str, text: str) -> None:
        try:
            self.fs.write(self.parts(path), text)
        except FSError as e:
            raise OSError(e.reason) from None

    def _append_for_awk(self, path: str, text: str, append: bool) -> None:
        if path == "/dev/null":
            return
        if path == "/dev/stderr":
            self._sink.write(2, text)
            return
        try:
            self.fs.write(self.parts(path), text, append=append)
        except FSError as e:
            self._sink.write(2, f"awk: cannot write to {path}: {e.reason}\n")

    def _command_for_awk(self, cmdline: str, stdin: str) -> str:
        """`print | "sort"` and system(): run the command line in a subshell; its output joins awk's."""
        inner = Sink()
        self._script(cmdline, [], Input(stdin), inner)
        for fd, text in inner.chunks:
            if fd == 2:
                self._sink.write(2, text)
        return inner.text(1)

    def stat(self, args: list[str], stdin: str) -> Result:
        """stat -c/--format/--printf FORMAT: %s %n %a %A %F %U %G %h (times do not exist here)."""
        fmt, files, i = None, [], 0
        while i < len(args):
            a = args[i]
            if a in ("-c", "--format", "--printf") and i + 1 < len(args):
                fmt = args[i + 1] + ("\n" if a != "--printf" else "")
                i += 2
                continue
            if a.startswith("--format=") or a.startswith("--printf="):
                fmt = a.split("=", 1)[1] + ("\n" if a.startswith("--format") else "")
            elif a.startswith("-") and a != "-":
                if a not in ("-L",):
                    return "", f"stat: invalid option -- '{a.lstrip('-')[:1]}'\n", 1
            else:
                files.append(a)
            i += 1
        if not files:
            return "", "stat: missing operand\nTry 'stat --help' for more information.\n", 1
        if fmt is None:
            fmt = "  File: %n\n  Size: %s\tType: %F\nAccess: (0%a/%A)  Uid: (    0/    %U)   Gid: (    0/    %G)\n"
        out, err = [], []
        for f in files:
            parts = self.parts(f)
            node = self.fs.get(parts)
            if node is None:
                err.append(f"stat: cannot statx '{f}': No such file or directory\n")
                continue
            is_dir = isinstance(node, dict)
            mode = self.fs.mode(parts)
            kind = "directory" if is_dir else ("regular file" if node else "regular empty file")
            values = {"s": str(_size(node)), "n": f, "a": f"{mode:o}", "A": _mode_string(mode, is_dir), "F": kind,
                      "U": "root", "G": "root", "u": "0", "g": "0", "h": "2" if is_dir else "1", "%": "%"}
            out.append(re.sub(r"%(.)", lambda m, v=values: v.get(m.group(1), "?"), _unescape(fmt)))
        return "".join(out), "".join(err), 1 if err else 0

    def which(self, args: list[str], stdin: str) -> Result:
        found = [a for a in args if a in self.commands or a in self.specials]
        return "".join(f"/usr/bin/{a}\n" for a in found), "", 0 if args and len(found) == len(args) else 1

    def env(self, args: list[str], stdin: str) -> Result:
        if args and not all("=" in a for a in args):
            names = [a for a in args if "=" not in a]
            vals = [self.vars[n] for n in names if n in self.vars]
            return _join(vals), "", 0 if len(vals) == len(names) else 1
        shown = {k: v for k, v in self.vars.items() if _VARNAME.fullmatch(k) and k != "IFS"}
        shown.update(a.split("=", 1) for a in args)
        return _join(f"{k}={v}" for k, v in sorted(shown.items())), "", 0

    def rev(self, args: list[str], stdin: str) -> Result:
        items, err = self._read_inputs("rev", args, stdin)
        return _join(line[::-1] for _, t in items for line in _lines(t)), err, 1 if err else 0

    def nl(self, args: list[str], stdin: str) -> Result:
        opts, operands = getopts("nl", args, "", "bws")
        items, err = self._read_inputs("nl", operands, stdin)
        all_lines = _last(opts, "b") == "a"
        out, k = [], 0
        for _, t in items:
            for line in _lines(t):
                if line or all_lines:
                    k += 1
                    out.append(f"{k:6d}\t{line}")
                else:
                    out.append("")
        return _join(out), err, 1 if err else 0

    def paste(self, args: list[str], stdin: str) -> Result:
        opts, operands = getopts("paste", args, "s", "d")
        delims = _unescape(_last(opts, "d") or "\t") or "\t"
        items, err = self._read_inputs("paste", operands, stdin)
        columns = [_lines(t) for _, t in items]
        if opts.get("s"):
            out = []
            for col in columns:
                out.append("".join(v + (delims[k % len(delims)] if k < len(col) - 1 else "")
                                   for k, v in enumerate(col)))
            return _join(out), err, 1 if err else 0
        rows = max((len(c) for c in columns), default=0)
        out = []
        for r in range(rows):
            cells = [c[r] if r < len(c) else "" for c in columns]
            out.append("".join(v + (delims[k % len(delims)] if k < len(cells) - 1 else "")
                               for k, v in enumerate(cells)))
        return _join(out), err, 1 if err else 0

    def expr(self, args: list[str], stdin: str) -> Result:
        """expr with + - * / % and comparisons between two operands, plus `length STRING`."""
        if len(args) == 2 and args[0] == "length":
            return f"{len(args[1])}\n", "", 0
        if len(args) == 1:
            return args[0] + "\n", "", int(args[0] in ("", "0"))
        if len(args) != 3:
            return "", "expr: syntax error: this shell's expr takes one operator between two operands\n", 2
        a, op, b = args
        ints = re.fullmatch(r"-?\d{1,64}", a) and re.fullmatch(r"-?\d{1,64}", b)
        if op in ("+", "-", "*", "/", "%"):
            if not ints:
                return "", "expr: non-integer argument\n", 2
            x, y = int(a), int(b)
            if op in "/%" and y == 0:
                return "", "expr: division by zero\n", 2
            q = abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1) if op in "/%" else 0
            val = {"+": x + y, "-": x - y, "*": x * y, "/": q, "%": x - q * y if op == "%" else 0}[op]
            return f"{val}\n", "", int(val == 0)
        if op in ("=", "!=", "<", ">", "<=", ">="):
            x, y = (int(a), int(b)) if ints else (a, b)
            val = int({"=": x == y, "!=": x != y, "<": x < y, ">": x > y, "<=": x <= y, ">=": x >= y}[op])
            return f"{val}\n", "", int(val == 0)
        return "", f"expr: syntax error: unexpected argument '{op}'\n", 2


# =========================================================================== small helpers


class _Rev:
    """Reverses the ordering of a sort key (for per-key `r`)."""

    __slots__ = ("v",)

    def __init__(self, v):
        self.v = v

    def __lt__(self, other):
        return other.v < self.v

    def __eq__(self, other):
        return isinstance(other, _Rev) and self.v == other.v


_NUM = re.compile(r"\s*(-?(?:\d+\.?\d*|\.\d+))")


_HUMAN = {"K": 1024.0, "M": 1024.0 ** 2, "G": 1024.0 ** 3, "T": 1024.0 ** 4}


def _num(text: str) -> float:
    m = _NUM.match(text)
    return float(m.group(1)) if m else 0.0


def _human_num(text: str) -> float:
    """sort -h: the leading number scaled by a K/M/G/T suffix (du -h output)."""
    m = _NUM.match(text)
    if not m:
        return 0.0
    return float(m.group(1)) * _HUMAN.get(text[m.end():m.end() + 1].upper(), 1.0)


def _size(node) -> int:
    return 4096 if isinstance(node, dict) else len(node.encode("utf-8", "replace"))


def _blocks(node) -> int:
    return 4 if isinstance(node, dict) else (-(-_size(node) // 4096)) * 4


def _unescape(text: str) -> str:
    return re.sub(r"\\([ntr\\0])", lambda m: {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "0": "\0"}[m.group(1)], text)


def _ansi_c(body: str) -> str:
    """The text of a $'...' word: backslash escapes as in C."""
    def one(m: re.Match) -> str:
        g = m.group(1)
        if g in _C_ESCAPES:
            return _C_ESCAPES[g]
        if g[0] == "x" and len(g) > 1:
            return chr(int(g[1:], 16))
        if g[0] in "01234567":
            return chr(int(g, 8))
        return "\\" + g

    return re.sub(r"\\(x[0-9a-fA-F]{1,2}|[0-7]{1,3}|.)", one, body, flags=re.S)


_C_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "a": "\a", "b": "\b", "e": "\x1b",
              "f": "\f", "v": "\v"}


_PRINTF_SPEC = re.compile(r"%([-+ #0-9.]*)([sdifxXoeEgGcbu%])")


def _printf_once(fmt: str, args: list[str], errors: list[str]) -> tuple[str, int]:
    """One pass of printf's format over `args`; returns (text, number of args used)."""
    used = 0

    def sub(m: re.Match) -> str:
        nonlocal used
        flags, conv = m.group(1), m.group(2)
        if conv == "%":
            return "%"
        if any(int(x) > 1000 for x in re.findall(r"\d+", flags)):
            errors.append("printf: field width too large (the limit is 1000)\n")
            return ""
        val = args[used] if used < len(args) else ""
        used += 1
        if conv in "difxXoeEgGu":
            floating = conv in "feEgG"
            try:
                num = float(val or "0") if floating else int(val.strip() or "0", 0 if val.strip()[:2] in (
                    "0x", "0X") else 10)
            except ValueError:
                errors.append(f"printf: {val}: invalid number\n")
                num = 0
            return ("%" + flags + ("d" if conv in "iu" else conv)) % num
        if conv == "c":
            return ("%" + flags + "s") % val[:1]
        return ("%" + flags + "s") % (_unescape(val) if conv == "b" else val)

    try:
        return _PRINTF_SPEC.sub(sub, fmt), used
    except (ValueError, OverflowError) as e:
        errors.append(f"printf: {e}\n")
        return "", used


def _parse_list(spec: str) -> Callable[[int], bool]:
    """cut's LIST (1,3-5,7-) -> predicate over 1-based positions."""
    ranges = []
    for piece in spec.split(","):
        m = re.fullmatch(r"(\d*)-(\d*)|(\d+)", piece)
        if not m or piece == "-":
            raise ValueError(f"invalid field value '{piece}'" if piece else "invalid field range")
        if m.group(3):
            a = b = int(m.group(3))
        else:
            a = int(m.group(1)) if m.group(1) else 1
            b = int(m.group(2)) if m.group(2) else 10 ** 9
        if a == 0:
            raise ValueError("fields are numbered from 1")
        ranges.append((a, b))
    return lambda i: any(a <= i <= b for a, b in ranges)


def _find_printf(fmt: str, fs: "VFS", parts: list[str], shown: str, depth: int) -> str:
    """find -printf: %p path, %f name, %h directory, %s size, %d depth, %m / %M mode, %y type, %u %g owner."""
    node = fs.get(parts)
    is_dir = isinstance(node, dict)
    head, _, tail = shown.rpartition("/")
    values = {"p": shown, "f": tail or shown, "h": head if "/" in shown else ".", "s": str(_size(node)),
              "d": str(depth), "m": f"{fs.mode(parts):o}", "M": _mode_string(fs.mode(parts), is_dir),
              "y": "d" if is_dir else "f", "u": "root", "g": "root", "k": str(_blocks(node)), "%": "%"}
    text = re.sub(r"%-?\d*([a-zA-Z%])", lambda m: values.get(m.group(1), ""), fmt)
    return text.replace("\\n", "\n").replace("\\t", "\t").replace("\\0", "\0")


def _find_test(kind: str, val, node, parts: list[str], shown: str, fs: "VFS") -> bool:
    name = parts[-1] if parts else "/"
    if kind == "true":
        return True
    if kind == "name":
        return fnmatch.fnmatchcase(name, val)
    if kind == "iname":
        return fnmatch.fnmatchcase(name.lower(), val.lower())
    if kind == "path":
        return fnmatch.fnmatchcase(shown, val)
    if kind == "ipath":
        return fnmatch.fnmatchcase(shown.lower(), val.lower())
    if kind == "type":
        return val in ("f", "d") and isinstance(node, dict) == (val == "d")
    if kind == "empty":
        return not node
    if kind == "size":
        sign, n, unit = val
        blocks = -(-_size(node) // unit)
        return blocks > n if sign == "+" else blocks < n if sign == "-" else blocks == n
    if kind == "perm":
        how, bits = val
        mode = fs.mode(parts)
        return (mode & bits) == bits if how == "-" else bool(mode & bits) if how == "/" else mode == bits
    if kind == "owner":
        return val in ("root", "0")
    if kind == "regex":
        return posix_regex(val, extended=False).fullmatch(shown, timeout=0.1) is not None
    if kind == "time":
        return not val.startswith("+")
    return False


class _FindParser:
    """find's expression: primaries joined by -a (or juxtaposition), -o, ! / -not, and ( )."""

    VALUED = ("-name", "-iname", "-type", "-path", "-wholename", "-ipath", "-size", "-perm", "-maxdepth", "-mindepth",
              "-newer", "-mtime", "-mmin", "-atime", "-ctime", "-user", "-group", "-regex")

    def __init__(self, args: list[str]):
        self.args = args
        self.i = 0
        self.maxdepth: int | None = None
        self.mindepth = 0
        self.has_action = False

    def parse(self):
        if not self.args:
            return None
        e = self.or_()
        if self.i < len(self.args):
            raise UsageError(f"paths must precede expression: `{self.args[self.i]}'" if self.args[self.i] != ")"
                             else "invalid expression; you have too many ')'")
        return e

    def peek(self) -> str | None:
        return self.args[self.i] if self.i < len(self.args) else None

    def or_(self):
        e = self.and_()
        while self.peek() in ("-o", "-or"):
            self.i += 1
            e = ("or", e, self.and_())
        return e

    def and_(self):
        e = self.not_()
        while self.peek() is not None and self.peek() not in ("-o", "-or", ")"):
            if self.peek() in ("-a", "-and"):
                self.i += 1
            e = ("and", e, self.not_())
        return e

    def not_(self):
        if self.peek() in ("!", "-not"):
            self.i += 1
            return ("not", self.not_())
        return self.primary()

    def primary(self):
        a = self.peek()
        if a is None:
            raise UsageError("expected an expression")
        self.i += 1
        if a == "(":
            e = self.or_()
            if self.peek() != ")":
                raise UsageError("invalid expression; I was expecting to find a ')' somewhere but did not see one.")
            self.i += 1
            return e
        if a in ("-print", "-print0", "-delete"):
            self.has_action = True
            return ("action", (a[1:],))
        if a == "-printf":
            if self.i >= len(self.args):
                raise UsageError("missing argument to `-printf'")
            self.i += 1
            self.has_action = True
            return ("action", ("printf", self.args[self.i - 1]))
        if a == "-prune":
            return ("action", ("prune",))
        if a in ("-true", "-depth", "-xdev", "-follow", "-noleaf"):
            return ("test", "true", None)
        if a == "-false":
            return ("not", ("test", "true", None))
        if a == "-empty":
            return ("test", "empty", None)
        if a in ("-exec", "-execdir", "-ok"):
            j = self.i
            while j < len(self.args) and self.args[j] not in (";", "+"):
                j += 1
            if j >= len(self.args) or j == self.i:
                raise UsageError(f"missing argument to `{a}'")
            cmd, batch = self.args[self.i:j], self.args[j] == "+"
            self.i = j + 1
            self.has_action = True
            return ("action", ("exec", cmd, batch))
        if a in self.VALUED:
            if self.i >= len(self.args):
                raise UsageError(f"missing argument to `{a}'")
            val = self.args[self.i]
            self.i += 1
            if a == "-type":
                if val not in ("f", "d", "l", "p", "s", "b", "c"):
                    raise UsageError(f"Unknown argument to -type: {val}")
                return ("test", "type", val)
            if a in ("-maxdepth", "-mindepth"):
                if not val.isdigit():
                    raise UsageError(f"Expected a positive decimal integer argument to {a}, but got `{val}'")
                if a == "-maxdepth":
                    self.maxdepth = int(val)
                else:
                    self.mindepth = int(val)
                return ("test", "true", None)
            if a == "-size":
                m = re.fullmatch(r"([+-]?)(\d+)([ckMG]?)", val)
                if not m:
                    raise UsageError(f"invalid argument `{val}' to `-size'")
                unit = {"c": 1, "k": 1024, "M": 1024 ** 2, "G": 1024 ** 3, "": 512}[m.group(3)]
                return ("test", "size", (m.group(1), int(m.group(2)), unit))
            if a == "-perm":
                m = re.fullmatch(r"([-/]?)([0-7]{1,4})", val)
                if not m:
                    raise UsageError(f"invalid mode `{val}'")
                return ("test", "perm", (m.group(1), int(m.group(2), 8)))
            if a in ("-user", "-group"):
                return ("test", "owner", val)
            if a == "-regex":
                return ("test", "regex", val)
            if a in ("-newer", "-mtime", "-mmin", "-atime", "-ctime"):
                return ("test", "time", val)  # every file here has the same time
            return ("test", {"-wholename": "path", "-ipath": "ipath"}.get(a, a[1:]), val)
        raise UsageError(f"unknown predicate `{a}'")


def compile_grep(patterns: list[str], extended: bool, fixed: bool, icase: bool, word: bool, line: bool):
    """grep patterns (BRE, ERE with -E, fixed strings with -F) -> one `regex` pattern; callers pass a
    timeout to every search, so no pattern needs refusing for being slow."""
    parts = []
    for p in patterns:
        for piece in p.split("\n") or [""]:
            parts.append(re.escape(piece) if fixed else posix_regex(piece, extended).pattern)
    rx = "|".join(f"(?:{p})" for p in parts) if len(parts) > 1 else parts[0]
    if word:
        rx = rf"(?<!\w)(?:{rx})(?!\w)"
    if line:
        rx = rf"^(?:{rx})$"
    try:
        return regex.compile(rx, regex.IGNORECASE if icase else 0)
    except regex.error as e:
        raise UsageError(f"invalid regular expression: {e}") from None


def _apply_mode(spec: str, mode: int, is_dir: bool) -> int:
    """chmod MODE (octal, or symbolic like u+x,go-w,a=r) applied to a permission value."""
    if re.fullmatch(r"[0-7]{1,4}", spec):
        return int(spec, 8) & 0o7777
    for clause in spec.split(","):
        m = re.fullmatch(r"([ugoa]*)([-+=])([rwxXst]*)", clause)
        who, op, perms = m.group(1) or "a", m.group(2), m.group(3)
        bits = 0
        for p in perms:
            if p == "X" and not (is_dir or mode & 0o111):
                continue
            base = {"r": 4, "w": 2, "x": 1, "X": 1}.get(p, 0)
            for w in who.replace("a", "ugo"):
                bits |= base << {"u": 6, "g": 3, "o": 0}[w]
        mask = 0
        for w in who.replace("a", "ugo"):
            mask |= 7 << {"u": 6, "g": 3, "o": 0}[w]
        if op == "+":
            mode |= bits
        elif op == "-":
            mode &= ~bits
        else:
            mode = (mode & ~mask) | bits
    return mode


def _mode_string(mode: int, is_dir: bool) -> str:
    chars = "d" if is_dir else "-"
    for shift in (6, 3, 0):
        v = mode >> shift
        chars += ("r" if v & 4 else "-") + ("w" if v & 2 else "-") + ("x" if v & 1 else "-")
    return chars


def _human_kb(kb: float, bytes_below_1k: bool = False) -> str:
    """du -h / ls -lh: sizes in K, M, G with one decimal below 10, rounded up like GNU coreutils."""
    if kb == 0:
        return "0"
    if bytes_below_1k and kb < 1:
        return str(round(kb * 1024))
    value, units = float(kb), "KMGT"
    k = 0
    while value >= 1024 and k < 3:
        value /= 1024
        k += 1
    if value < 10:
        value = -(-value * 10 // 1) / 10
        return f"{value:.1f}{units[k]}"
    return f"{-(-value // 1):.0f}{units[k]}"


MAX_BRACE_WORDS = 10_000


def brace_expand(raw: str) -> list[str]:
    """Bash brace expansion of a word's source text: a{b,c}d and {1..5} / {a..e} / {1..10..2}, outside quotes
    and ${...}; at most MAX_BRACE_WORDS words."""
    i, n = 0, len(raw)
    while i < n:
        c = raw[i]
        if c in "'\"`":
            i = skip_quoted(raw, i) if c != "'" or raw.find("'", i + 1) >= 0 else n
            continue
        if c == "\\":
            i += 2
            continue
        if c == "$" and raw[i + 1:i + 2] in ("{", "("):
            i = skip_quoted(raw, i)
            continue
        if c == "{":
            depth, j, commas = 0, i, []
            while j < n:
                d = raw[j]
                if d in "'\"`" or (d == "$" and raw[j + 1:j + 2] in ("{", "(")):
                    j = skip_quoted(raw, j) if d != "'" or raw.find("'", j + 1) >= 0 else n
                    continue
                if d == "\\":
                    j += 2
                    continue
                if d == "{":
                    depth += 1
                elif d == "}":
                    depth -= 1
                    if depth == 0:
                        break
                elif d == "," and depth == 1:
                    commas.append(j)
                j += 1
            if j >= n:
                return [raw]
            body, pre, post = raw[i + 1:j], raw[:i], raw[j + 1:]
            if commas:
                bounds = [i] + commas + [j]
                alts = [raw[bounds[k] + 1:bounds[k + 1]] for k in range(len(bounds) - 1)]
            else:
                m = re.fullmatch(r"(-?\d{1,18}|[A-Za-z])\.\.(-?\d{1,18}|[A-Za-z])(?:\.\.(-?\d{1,18}))?", body)
                if not m:
                    rest = brace_expand(raw[j + 1:])
                    return [raw[:j + 1] + r for r in rest]
                alts = _brace_range(m.group(1), m.group(2), m.group(3))
            out: list[str] = []
            for alt in alts:
                for word in brace_expand(pre + alt + post):
                    out.append(word)
                    if len(out) > MAX_BRACE_WORDS:
                        raise ScriptLimit(f"brace expansion makes more than {MAX_BRACE_WORDS} words")
            return out
        i += 1
    return [raw]


def _brace_range(a: str, b: str, step_s: str | None) -> list[str]:
    step = abs(int(step_s)) if step_s and int(step_s) else 1
    if a.lstrip("-").isdigit() and b.lstrip("-").isdigit():
        x, y = int(a), int(b)
        if abs(y - x) // step > MAX_BRACE_WORDS:
            raise ScriptLimit(f"brace expansion makes more than {MAX_BRACE_WORDS} words")
        width = max(len(a), len(b)) if (a.lstrip("-").startswith("0") and len(a.lstrip("-")) > 1) or (
            b.lstrip("-").startswith("0") and len(b.lstrip("-")) > 1) else 0
        vals = range(x, y + 1, step) if x <= y else range(x, y - 1, -step)
        return [str(v).zfill(width) if width else str(v) for v in vals]
    if len(a) == 1 and len(b) == 1 and not a.isdigit() and not b.isdigit():
        x, y = ord(a), ord(b)
        vals = range(x, y + 1, step) if x <= y else range(x, y - 1, -step)
        return [chr(v) for v in vals]
    return ["{" + a + ".." + b + (".." + step_s if step_s else "") + "}"]

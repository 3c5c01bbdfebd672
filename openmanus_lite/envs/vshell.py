"""A virtual filesystem and a small bash-like interpreter over it, for the OS environment.

Why our own: the OS environment must run inside a notebook with no Docker, be
deterministic, be fast (thousands of steps per second) and be safe against anything a
model types. So nothing here touches the host: no `os`, no `subprocess`, no file I/O.
The filesystem is nested dicts (a directory is a dict, a file is its text), and the
interpreter understands the commands and shell syntax AgentBench-OS tasks need:

    ls cat head tail wc grep find sort uniq cut echo printf pwd cd mkdir touch rm rmdir
    cp mv basename dirname whoami true false sudo
    |  >  >>  <  2>  2>&1  &&  ||  ;  'quotes' "quotes" \\escapes  $VAR  ~  globs (* ? [..])

Anything else answers the way bash does (`bash: foo: command not found`). Sizes are
capped (file, whole filesystem, pipe buffers, command length) so no command can use
unbounded time or memory.
"""

from __future__ import annotations

import fnmatch
import re
import time
from dataclasses import dataclass, field
from typing import Callable

MAX_FILE_CHARS = 200_000
MAX_TOTAL_CHARS = 2_000_000
MAX_NODES = 5_000
MAX_STREAM = 400_000
"""Cap on any pipe buffer or command output (characters)."""
MAX_LINE = 10_000
"""Longest command line the shell accepts."""
MAX_COMMANDS = 64
HOME = "/root"


class FSError(Exception):
    """A filesystem operation failed; `reason` is the strerror text (e.g. 'No such file or directory')."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class ShellSyntaxError(Exception):
    pass


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


# =========================================================================== tokenizer

_OPS = ("&&", "||", ";", "|", ">>", ">", "<", "2>>", "2>", "2>&1", "&>", "&")
_VARNAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_GLOB_CHARS = "*?["
_PLAIN_RUN = re.compile(r"[^\s'\"\\$`|&;<>(){}]+")
"""Characters that need no special handling inside a word."""


@dataclass
class Word:
    text: str
    pattern: str = ""
    glob: bool = False
    quoted: bool = False


@dataclass
class Op:
    op: str


def tokenize(line: str, env: dict[str, str]) -> list:
    """Split a command line into Words and Ops, expanding quotes, escapes, $VAR and ~."""
    toks: list = []
    i, n = 0, len(line)
    text: list[str] = []
    pat: list[str] = []
    active = glob = quoted = False

    def lit(s: str, is_quoted: bool) -> None:
        nonlocal active, glob, quoted
        active = True
        text.append(s)
        magic = "*" in s or "?" in s or "[" in s
        if is_quoted:
            quoted = True
            pat.append("".join(f"[{c}]" if c in _GLOB_CHARS else c for c in s) if magic else s)
        else:
            pat.append(s)
            glob = glob or magic

    def flush() -> None:
        nonlocal active, glob, quoted
        if active:
            toks.append(Word("".join(text), "".join(pat), glob, quoted))
            text.clear()
            pat.clear()
            active = glob = quoted = False

    def var(j: int) -> tuple[str, int]:
        """Expand the $-expression starting at line[j] == '$'; returns (value, next index)."""
        nxt = line[j + 1:j + 2]
        if nxt == "(":
            raise ShellSyntaxError("command substitution $(...) is not supported in this shell")
        if nxt == "{":
            end = line.find("}", j + 2)
            if end < 0:
                raise ShellSyntaxError("bad substitution")
            name = line[j + 2:end]
            if not _VARNAME.fullmatch(name):
                raise ShellSyntaxError(f"${{{name}}}: bad substitution")
            return env.get(name, ""), end + 1
        if nxt and nxt in "?$#":
            return env.get(nxt, "0"), j + 2
        m = _VARNAME.match(line, j + 1)
        if not m:
            return "$", j + 1
        return env.get(m.group(0), ""), m.end()

    while i < n:
        m = _PLAIN_RUN.match(line, i)
        if m:
            s = m.group(0)
            if (s[0] == "#" or s[0] == "~") and not active:
                if s[0] == "#":  # a comment runs to the end of the line
                    end = line.find("\n", i)
                    i = n if end < 0 else end
                    continue
                if s == "~" or s.startswith("~/"):
                    lit(env.get("HOME", HOME), True)
                    i += 1
                    continue
            if s == "2" and not active and line.startswith(">", m.end()):
                j = m.end()
                if line.startswith(">&1", j):
                    toks.append(Op("2>&1"))
                    i = j + 3
                elif line.startswith(">>", j):
                    toks.append(Op("2>>"))
                    i = j + 2
                else:
                    toks.append(Op("2>"))
                    i = j + 1
                continue
            lit(s, False)
            i = m.end()
            continue
        c = line[i]
        if c == " " or c == "\t":
            flush()
            i += 1
        elif c == "\n":
            flush()
            toks.append(Op(";"))
            i += 1
        elif c == "'":
            end = line.find("'", i + 1)
            if end < 0:
                raise ShellSyntaxError("unexpected EOF while looking for matching `''")
            lit(line[i + 1:end], True)
            i = end + 1
        elif c == '"':
            j = i + 1
            buf: list[str] = []
            while True:
                if j >= n:
                    raise ShellSyntaxError("unexpected EOF while looking for matching `\"'")
                d = line[j]
                if d == '"':
                    break
                if d == "\\" and j + 1 < n and line[j + 1] in '"\\$`\n':
                    buf.append(line[j + 1])
                    j += 2
                elif d == "$":
                    val, j = var(j)
                    buf.append(val)
                elif d == "`":
                    raise ShellSyntaxError("command substitution `...` is not supported in this shell")
                else:
                    buf.append(d)
                    j += 1
            lit("".join(buf), True)
            i = j + 1
        elif c == "\\":
            if i + 1 < n and line[i + 1] != "\n":
                lit(line[i + 1], True)
            i += 2
        elif c == "$":
            val, i = var(i)
            for k, piece in enumerate(val.split()):  # unquoted expansion undergoes word splitting
                if k:
                    flush()
                lit(piece, False)
        elif c == "`":
            raise ShellSyntaxError("command substitution `...` is not supported in this shell")
        elif c in "|&;<>":
            flush()
            two = line[i:i + 2]
            if two in ("&&", "||", ">>", "&>"):
                toks.append(Op(two))
                i += 2
            elif two == ">&" and line.startswith(">&2", i):
                toks.append(Op(">&2"))
                i += 3
            else:
                toks.append(Op(c))
                i += 1
        elif c in "()" and not active:
            raise ShellSyntaxError(f"syntax error near unexpected token `{c}'")
        elif c in "{}" and not active:
            raise ShellSyntaxError("command grouping { ... } is not supported in this shell")
        elif c in "\r\f\v":
            flush()
            i += 1
        else:  # ( ) { } inside a word are literal here
            lit(c, False)
            i += 1
    flush()
    return toks


# =========================================================================== parser


@dataclass
class SimpleCommand:
    words: list[Word] = field(default_factory=list)
    redirs: list[tuple[str, Word | None]] = field(default_factory=list)


def parse(tokens: list) -> list[tuple[str, list[SimpleCommand]]]:
    """Tokens -> [(connector, pipeline)], connector in {';', '&&', '||'} (';' for the first)."""
    seq: list[tuple[str, list[SimpleCommand]]] = []
    conn = ";"
    pipeline: list[SimpleCommand] = []
    cmd = SimpleCommand()
    i = 0

    def unexpected(tok) -> ShellSyntaxError:
        name = tok.op if isinstance(tok, Op) else "newline"
        return ShellSyntaxError(f"syntax error near unexpected token `{name}'")

    while i < len(tokens):
        t = tokens[i]
        if isinstance(t, Word):
            cmd.words.append(t)
        elif t.op in (">", ">>", "<", "2>", "2>>", "&>"):
            nxt = tokens[i + 1] if i + 1 < len(tokens) else None
            if not isinstance(nxt, Word):
                raise unexpected(nxt) if nxt is not None else ShellSyntaxError(
                    "syntax error near unexpected token `newline'")
            cmd.redirs.append((t.op, nxt))
            i += 1
        elif t.op in ("2>&1", ">&2"):
            cmd.redirs.append((t.op, None))
        elif t.op == "&":
            raise ShellSyntaxError("background jobs (&) are not supported in this shell")
        elif t.op == "|":
            if not cmd.words and not cmd.redirs:
                raise unexpected(t)
            pipeline.append(cmd)
            cmd = SimpleCommand()
        else:  # ; && ||
            if not cmd.words and not cmd.redirs:
                if t.op == ";" and not pipeline:
                    i += 1
                    continue  # empty statement (e.g. trailing newline)
                raise unexpected(t)
            pipeline.append(cmd)
            seq.append((conn, pipeline))
            conn, pipeline, cmd = t.op, [], SimpleCommand()
        i += 1
    if cmd.words or cmd.redirs:
        pipeline.append(cmd)
    elif pipeline or conn in ("&&", "||"):
        raise ShellSyntaxError("syntax error: unexpected end of file")
    if pipeline:
        seq.append((conn, pipeline))
    return seq


# =========================================================================== option parsing


class UsageError(Exception):
    pass


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


class Shell:
    """Runs command lines against a VFS. `run(line) -> (output, exit_status)`."""

    def __init__(self, fs: VFS, cwd: str = HOME):
        self.fs = fs
        self.cwd = cwd
        self.vars: dict[str, str] = {"HOME": HOME, "USER": "root", "PWD": cwd, "SHELL": "/bin/bash", "?": "0"}
        self.commands: dict[str, Callable[[list[str], str], Result]] = {
            "ls": self.ls, "cat": self.cat, "head": self.head, "tail": self.tail, "wc": self.wc,
            "grep": self.grep, "egrep": self.egrep, "find": self.find, "sort": self.sort, "uniq": self.uniq,
            "cut": self.cut, "echo": self.echo, "printf": self.printf, "pwd": self.pwd, "cd": self.cd,
            "mkdir": self.mkdir, "touch": self.touch, "rm": self.rm, "rmdir": self.rmdir, "cp": self.cp,
            "mv": self.mv, "basename": self.basename, "dirname": self.dirname, "whoami": self.whoami,
            "true": self.true, "false": self.false, "sudo": self.sudo,
        }

    def copy(self) -> "Shell":
        new = Shell(self.fs.copy(), self.cwd)
        new.vars = dict(self.vars)
        return new

    # ------------------------------------------------------------------ helpers
    def parts(self, path: str) -> list[str]:
        return split_path(path, self.cwd)

    def expand(self, words: list[Word]) -> list[str]:
        out: list[str] = []
        for w in words:
            if w.glob:
                matches = self.glob(w.pattern)
                out.extend(matches if matches else [w.text])
            else:
                out.append(w.text)
        return out

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
        return [shown for _, shown in results]

    # ------------------------------------------------------------------ running
    def run(self, line: str) -> tuple[str, int]:
        """Run one command line; returns (combined stdout+stderr, exit status). Never raises."""
        if len(line) > MAX_LINE:
            return f"bash: command line too long ({len(line)} characters; the limit is {MAX_LINE})\n", 2
        try:
            seq = parse(tokenize(line, self.vars))
        except ShellSyntaxError as e:
            self.vars["?"] = "2"
            return f"bash: {e}\n", 2
        if sum(len(p) for _, p in seq) > MAX_COMMANDS:
            return f"bash: too many commands in one line (the limit is {MAX_COMMANDS})\n", 2
        out: list[str] = []
        size = 0
        status = 0
        for conn, pipeline in seq:
            if (conn == "&&" and status != 0) or (conn == "||" and status == 0):
                continue
            status = self._pipeline(pipeline, out)
            self.vars["?"] = str(status)
            size = sum(len(o) for o in out)
            if size > MAX_STREAM:
                break
        text = "".join(out)
        return text[:MAX_STREAM], status

    def _pipeline(self, pipeline: list[SimpleCommand], out: list[str]) -> int:
        stdin = ""
        status = 0
        for k, cmd in enumerate(pipeline):
            last = k == len(pipeline) - 1
            stdout, stderr, status = self._simple(cmd, stdin)
            if stderr:
                out.append(stderr)
            if last:
                out.append(stdout)
            else:
                stdin = stdout[:MAX_STREAM]
        return status

    def _simple(self, cmd: SimpleCommand, stdin: str) -> Result:
        words = list(cmd.words)
        # leading NAME=value assignments
        assigns = []
        while words and not words[0].quoted and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0].text):
            assigns.append(words.pop(0).text)
        if not words:
            for a in assigns:
                name, _, val = a.partition("=")
                self.vars[name] = val
        argv = self.expand(words)
        out_target = None
        err_mode = None  # None | "null" | "merge" | ("file", parts, append)
        for op, w in cmd.redirs:
            if op == "<":
                try:
                    stdin = self.fs.read(self.parts(w.text))
                except FSError as e:
                    return "", f"bash: {w.text}: {e.reason}\n", 1
            elif op in (">", ">>", "&>"):
                out_target = (w.text, op == ">>")
                if op == "&>":
                    err_mode = "merge"
            elif op in ("2>", "2>>"):
                err_mode = "null" if w.text == "/dev/null" else ("file", w.text, op == "2>>")
            elif op == "2>&1":
                err_mode = "merge"
        if not argv:
            stdout, stderr, status = "", "", 0
        else:
            name, args = argv[0], argv[1:]
            fn = self.commands.get(name)
            if fn is None:
                stdout, stderr, status = "", f"bash: {name}: command not found\n", 127
            else:
                try:
                    stdout, stderr, status = fn(args, stdin)
                except UsageError as e:
                    stdout, stderr, status = "", f"{e}\n", 2 if name in ("ls", "grep") else 1
        if err_mode == "merge":
            stdout, stderr = stdout + stderr, ""
        elif err_mode == "null":
            stderr = ""
        elif isinstance(err_mode, tuple):
            err = self._write_target(err_mode[1], stderr, err_mode[2])
            stderr = err
        if out_target is not None:
            err = self._write_target(out_target[0], stdout, out_target[1])
            stdout = ""
            if err:
                return "", stderr + err, 1
        return stdout, stderr, status

    def _write_target(self, path: str, text: str, append: bool) -> str:
        if path == "/dev/null":
            return ""
        try:
            self.fs.write(self.parts(path), text, append)
        except FSError as e:
            return f"bash: {path}: {e.reason}\n"
        return ""

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

        def fmt(entries: list[tuple[str, object]], with_total: bool) -> list[str]:
            if not long_fmt:
                return [name + ("/" if opts.get("F") and isinstance(node, dict) else "") for name, node in entries]
            width = max((len(str(_size(node))) for _, node in entries), default=1)
            lines = [f"total {sum(_blocks(node) for _, node in entries)}"] if with_total else []
            for name, node in entries:
                mode, links = ("drwxr-xr-x", 2) if isinstance(node, dict) else ("-rw-r--r--", 1)
                lines.append(f"{mode} {links} root root {_size(node):>{width}} Jan  1 00:00 {name}")
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
            out.extend(fmt(entries, True))
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
        args = [("-n" + a[1:]) if re.fullmatch(r"-\d+", a) else a for a in args]
        opts, operands = getopts(cmd, args, "qv", "nc", long={"lines": "n", "bytes": "c"})
        count_s = _last(opts, "n") or "10"
        from_start = cmd == "tail" and count_s.startswith("+")
        count = abs(_int_arg(cmd, "number of lines", count_s.lstrip("+")))
        items, err = self._read_inputs(cmd, operands, stdin)
        out = []
        for k, (name, text) in enumerate(items):
            if len(items) > 1:
                out.append(("\n" if k else "") + f"==> {'standard input' if name == '-' else name} <==\n")
            if opts.get("c"):
                nbytes = abs(_int_arg(cmd, "number of bytes", _last(opts, "c")))
                out.append(text[:nbytes] if cmd == "head" else (text[-nbytes:] if nbytes else ""))
                continue
            lines = _lines(text)
            if cmd == "head":
                sel = lines[:count]
                has_last = count >= len(lines)
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
        elif not operands:
            width = 7
        else:
            width = max(len(str(v)) for r in rows for v in r[0])
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
        opts, operands = getopts("grep", args2, "ivcnrRlLwxEFohHqsI", "e",
                                 long={"ignore-case": "i", "invert-match": "v", "count": "c", "line-number": "n",
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
        rx.deadline = time.perf_counter() + GREP_DEADLINE_S
        search = rx.search
        for name, text in targets:
            lines = _lines(text)
            selected: list[int] = []
            try:
                for start in range(0, len(lines), 256):
                    if time.perf_counter() > rx.deadline:
                        raise GrepTimeout
                    selected += [k for k in range(start, min(start + 256, len(lines))) if search(lines[k]) != invert]
                    if opts.get("q") and selected or opts.get("l") and selected:
                        break
            except GrepTimeout:
                err.append(f"grep: stopped after {GREP_DEADLINE_S} s; the output is incomplete\n")
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
                for k in selected:
                    head = pre + (f"{k + 1}:" if numbered else "")
                    if opts.get("o") and not invert:
                        chunk = "".join(head + m + "\n" for m in rx.findall(lines[k]))
                    else:
                        chunk = head + lines[k] + "\n"
                    out.append(chunk)
                    size += len(chunk)
                    if size > MAX_STREAM:
                        break
            if size > MAX_STREAM or err and err[-1].startswith("grep: stopped"):
                break
        status = 0 if any_match else 1
        if err and not (opts.get("q") and any_match):
            status = 2
        return "".join(out), "".join(err), status

    def find(self, args: list[str], stdin: str) -> Result:
        starts: list[str] = []
        i = 0
        while i < len(args) and not (args[i].startswith("-") or args[i] in ("!", "(")):
            starts.append(args[i])
            i += 1
        tests: list[tuple[str, object, bool]] = []
        maxdepth, mindepth, delete = None, 0, False
        negate = False
        while i < len(args):
            a = args[i]
            if a in ("!", "-not"):
                negate = True
                i += 1
                continue
            if a in ("-print", "-a", "-and"):
                i += 1
                continue
            if a == "-delete":
                delete = True
                i += 1
                continue
            if a == "-empty":
                tests.append(("empty", None, negate))
                negate = False
                i += 1
                continue
            if a in ("-name", "-iname", "-type", "-maxdepth", "-mindepth", "-path", "-size"):
                if i + 1 >= len(args):
                    return "", f"find: missing argument to `{a}'\n", 1
                val = args[i + 1]
                if a == "-type":
                    if val not in ("f", "d"):
                        return "", f"find: Unknown argument to -type: {val}\n", 1
                    tests.append(("type", val, negate))
                elif a in ("-maxdepth", "-mindepth"):
                    if not val.isdigit():
                        return "", f"find: Expected a positive decimal integer argument to {a}, but got `{val}'\n", 1
                    if a == "-maxdepth":
                        maxdepth = int(val)
                    else:
                        mindepth = int(val)
                elif a == "-size":
                    m = re.fullmatch(r"([+-]?)(\d+)([ckMG]?)", val)
                    if not m:
                        return "", f"find: invalid argument `{val}' to `-size'\n", 1
                    unit = {"c": 1, "k": 1024, "M": 1024 ** 2, "G": 1024 ** 3, "": 512}[m.group(3)]
                    tests.append(("size", (m.group(1), int(m.group(2)), unit), negate))
                else:
                    tests.append((a[1:], val, negate))
                negate = False
                i += 2
                continue
            if a in ("-o", "-or", "(", ")", "-exec", "-printf"):
                return "", f"find: `{a}' is not supported in this shell\n", 1
            return "", f"find: unknown predicate `{a}'\n", 1
        out: list[str] = []
        err: list[str] = []
        to_delete: list[tuple[list[str], str]] = []
        size = 0
        for start in starts or ["."]:
            parts = self.parts(start)
            if self.fs.get(parts) is None:
                err.append(f"find: '{start}': No such file or directory\n")
                continue
            for p, node in self.fs.walk(parts):
                depth = len(p) - len(parts)
                if maxdepth is not None and depth > maxdepth:
                    continue
                if depth < mindepth:
                    continue
                rel = "/".join(p[len(parts):])
                shown = start if not rel else (start.rstrip("/") + "/" + rel if start != "/" else "/" + rel)
                if all(_find_test(kind, val, node, p, shown) != neg for kind, val, neg in tests):
                    if delete:
                        to_delete.append((p, shown))
                    else:
                        out.append(shown + "\n")
                        size += len(shown) + 1
                        if size > MAX_STREAM:
                            break
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
        return "".join(out), "".join(err), 1 if err else 0

    def sort(self, args: list[str], stdin: str) -> Result:
        opts, operands = getopts("sort", args, "nrufbsV", "kt", long={"numeric-sort": "n", "reverse": "r",
                                                                     "unique": "u", "ignore-case": "f"})
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
                return (_num(line) if numeric else (line.lower() if fold else line),)
            vals = []
            for start, end, num, rev, kfold in keys:
                f = fields(line)
                chunk = f[start - 1:end if end else None]
                text = (sep if sep is not None else " ").join(chunk)
                v = _num(text) if num else (text.lower() if (kfold or fold) else text)
                vals.append(_Rev(v) if rev else v)
            return tuple(vals)

        if not keys and not opts.get("u") and not opts.get("s"):
            if numeric:
                lines.sort(key=lambda line: (_num(line), line), reverse=reverse)
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
        while True:
            text, consumed = _printf_once(fmt, rest, errors)
            out.append(text)
            rest = rest[consumed:]
            if not rest or consumed == 0 or sum(len(o) for o in out) > MAX_STREAM:
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
                    self.fs.remove(sparts)
                    try:
                        self.fs.insert(target, snode)
                    except FSError:
                        self.fs.insert(sparts, snode)  # put it back
                        raise
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

    def sudo(self, args: list[str], stdin: str) -> Result:
        while args and args[0].startswith("-"):
            args = args[1:]
        if not args:
            return "", "usage: sudo command\n", 1
        fn = self.commands.get(args[0])
        if fn is None:
            return "", f"sudo: {args[0]}: command not found\n", 1
        return fn(args[1:], stdin)


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


def _num(text: str) -> float:
    m = _NUM.match(text)
    return float(m.group(1)) if m else 0.0


def _size(node) -> int:
    return 4096 if isinstance(node, dict) else len(node.encode("utf-8", "replace"))


def _blocks(node) -> int:
    return 4 if isinstance(node, dict) else (-(-_size(node) // 4096)) * 4


def _unescape(text: str) -> str:
    return re.sub(r"\\([ntr\\0])", lambda m: {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "0": ""}[m.group(1)], text)


_PRINTF_SPEC = re.compile(r"%([-0-9.]*)([sdif%])")


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
        if conv in "dif":
            try:
                num = float(val or "0") if conv == "f" else int(val or "0")
            except ValueError:
                errors.append(f"printf: {val}: invalid number\n")
                num = 0
            return ("%" + flags + ("f" if conv == "f" else "d")) % num
        return ("%" + flags + "s") % val

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


def _find_test(kind: str, val, node, parts: list[str], shown: str) -> bool:
    name = parts[-1] if parts else "/"
    if kind == "name":
        return fnmatch.fnmatchcase(name, val)
    if kind == "iname":
        return fnmatch.fnmatchcase(name.lower(), val.lower())
    if kind == "path":
        return fnmatch.fnmatchcase(shown, val)
    if kind == "type":
        return isinstance(node, dict) == (val == "d")
    if kind == "empty":
        return not node
    if kind == "size":
        sign, n, unit = val
        blocks = -(-_size(node) // unit)
        return blocks > n if sign == "+" else blocks < n if sign == "-" else blocks == n
    return False


_POSIX_CLASSES = {
    "[:digit:]": "0-9", "[:alpha:]": "a-zA-Z", "[:alnum:]": "a-zA-Z0-9", "[:upper:]": "A-Z",
    "[:lower:]": "a-z", "[:space:]": r" \t\n\r\f\v", "[:blank:]": r" \t", "[:punct:]": r"!-/:-@\[-`{-~",
    "[:xdigit:]": "0-9A-Fa-f",
}
_QUANTIFIER_AFTER = re.compile(r"[*+?]|\{\d*,?\d*\}")


def _groups_safe(rx: str) -> bool:
    """False when a repeated group contains `|` or a repetition, e.g. (a|aa)+ or (a+)* —
    the shapes that make a backtracking matcher take exponential time."""
    stack: list[int] = []
    i = 0
    in_class = False
    while i < len(rx):
        c = rx[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            if rx[i + 1:i + 2] == "]":
                i += 1
        elif c == "(":
            stack.append(i)
        elif c == ")" and stack:
            start = stack.pop()
            if _QUANTIFIER_AFTER.match(rx, i + 1):
                inner = rx[start + 1:i]
                if "|" in inner.replace("\\|", "") or _count_quantifiers(inner):
                    return False
        i += 1
    return True
_CHUNK_BY_QUANTIFIERS = {0: 10 ** 9, 1: 1000, 2: 150, 3: 40, 4: 16, 5: 12, 6: 10}
"""Python's `re` backtracks: a line is matched in pieces of this length, by number of quantifiers,
so one search costs at most a few milliseconds (only very long lines are ever split)."""
GREP_DEADLINE_S = 0.25


class GrepTimeout(Exception):
    pass


@dataclass
class GrepPattern:
    regex: re.Pattern
    chunk: int
    deadline: float = float("inf")

    def search(self, line: str) -> bool:
        if len(line) <= self.chunk:
            return self.regex.search(line) is not None
        for k, i in enumerate(range(0, len(line), self.chunk)):
            if self.regex.search(line, i, i + self.chunk):
                return True
            if k % 16 == 15 and time.perf_counter() > self.deadline:
                raise GrepTimeout
        return False

    def findall(self, line: str) -> list[str]:
        out = []
        for i in range(0, max(len(line), 1), self.chunk):
            out.extend(m.group(0) for m in self.regex.finditer(line, i, i + self.chunk) if m.group(0))
        return out


def _count_quantifiers(rx: str) -> int:
    count, i, in_class = 0, 0, False
    while i < len(rx):
        c = rx[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            if rx[i + 1:i + 2] == "]":
                i += 1
        elif c in "*+?" and not (c == "?" and rx[i - 1:i] in "*+?}" and i > 0):
            count += 1
        elif c == "{" and re.match(r"\{\d*,?\d*\}", rx[i:]):
            count += 1
        i += 1
    return count


def compile_grep(patterns: list[str], extended: bool, fixed: bool, icase: bool, word: bool, line: bool) -> GrepPattern:
    """grep patterns (BRE, ERE with -E, fixed with -F) -> one regex that is safe to run.

    Python's `re` backtracks, so patterns that could take exponential time (a quantified
    group, a backreference, more than six quantifiers) are refused, and long lines are
    matched in pieces (see `_CHUNK_BY_QUANTIFIERS`)."""
    parts = []
    for p in patterns:
        if len(p) > 500:
            raise UsageError("pattern too long (the limit is 500 characters)")
        if fixed:
            parts.append(re.escape(p))
            continue
        for k, v in _POSIX_CLASSES.items():
            p = p.replace(k, v)
        rx = p if extended else _bre_to_ere(p)
        rx = rx.replace(r"\<", r"\b").replace(r"\>", r"\b")
        if not _groups_safe(rx) or re.search(r"\\[1-9]", rx):
            raise UsageError("pattern too complex for this shell (a repeated group may not contain | or "
                             "another repetition, and backreferences are not supported)")
        parts.append(rx)
    rx = "|".join(f"(?:{p})" for p in parts) if len(parts) > 1 else parts[0]
    quantifiers = _count_quantifiers(rx)
    if quantifiers > max(_CHUNK_BY_QUANTIFIERS):
        raise UsageError(f"pattern too complex for this shell ({quantifiers} quantifiers; the limit is "
                         f"{max(_CHUNK_BY_QUANTIFIERS)})")
    if word:
        rx = rf"(?<!\w)(?:{rx})(?!\w)"
    if line:
        rx = rf"^(?:{rx})$"
    try:
        compiled = re.compile(rx, re.IGNORECASE if icase else 0)
    except re.error as e:
        raise UsageError(f"invalid regular expression: {e}") from None
    return GrepPattern(compiled, _CHUNK_BY_QUANTIFIERS[quantifiers])


def _bre_to_ere(p: str) -> str:
    """Basic regular expression -> Python syntax: \\( \\) \\{ \\} \\| \\+ \\? are operators,
    the bare characters are literals."""
    out = []
    i = 0
    while i < len(p):
        c = p[i]
        if c == "\\" and i + 1 < len(p):
            nxt = p[i + 1]
            out.append(nxt if nxt in "(){}|+?" else c + nxt)
            i += 2
            continue
        if c in "(){}|+?":
            out.append("\\" + c)
        elif c == "*" and (not out or out[-1] in ("(", "|", "^")):
            out.append(r"\*")  # a leading * is literal in BRE
        else:
            out.append(c)
        i += 1
    return "".join(out)

"""Text tools of the virtual shell: POSIX regular expressions with a time limit, `tr` and `sed`.

Why the `regex` package: Python's `re` backtracks with no way to stop it, so the old shell refused
ordinary grep patterns such as `([0-9]+\\.){3}` that could be slow. `regex` takes a per-call
timeout, so any pattern can run and a pathological one is cut off instead of refused.
"""

from __future__ import annotations

import functools
import time

import regex

from openmanus_lite.envs.shell.syntax import UsageError

REGEX_TIMEOUT_S = 0.1
"""Longest one regex call may run (the whole action also has its own budget)."""

POSIX_CLASSES = {
    "[:digit:]": "0-9", "[:alpha:]": "a-zA-Z", "[:alnum:]": "a-zA-Z0-9", "[:upper:]": "A-Z",
    "[:lower:]": "a-z", "[:space:]": " \\t\\n\\r\\f\\v", "[:blank:]": " \\t", "[:punct:]": "!-/:-@\\[-`{-~",
    "[:xdigit:]": "0-9A-Fa-f", "[:cntrl:]": "\\x00-\\x1f\\x7f", "[:print:]": " -~", "[:graph:]": "!-~",
}


class RegexTimeout(Exception):
    pass


def regex_timeout(deadline: float) -> float:
    """Timeout for one regex call: REGEX_TIMEOUT_S, or less when the action's deadline is nearer."""
    left = deadline - time.perf_counter()
    if left <= 0:
        raise RegexTimeout
    return min(REGEX_TIMEOUT_S, left)


def bre_to_ere(p: str) -> str:
    """Basic regular expression -> ERE syntax: \\( \\) \\{ \\} \\| \\+ \\? are operators, the bare
    characters are literals, and a leading * is literal."""
    out = []
    i = 0
    in_class = False
    while i < len(p):
        c = p[i]
        if in_class:
            out.append("\\\\" if c == "\\" else c)
            if c == "]" and not (out[-2:-1] == ["["] or out[-2:] == ["[", "^"]):
                in_class = False
            if c == "[" and p[i + 1:i + 2] == ":":
                end = p.find(":]", i + 2)
                if end > 0:
                    out.append(p[i + 1:end + 2])
                    i = end + 2
                    continue
            i += 1
            continue
        if c == "\\" and i + 1 < len(p):
            nxt = p[i + 1]
            out.append(nxt if nxt in "(){}|+?" else c + nxt)
            i += 2
            continue
        if c == "[":
            in_class = True
            out.append(c)
            if p[i + 1:i + 2] == "^":
                out.append("^")
                i += 1
            if p[i + 1:i + 2] == "]":
                out.append("\\]")
                i += 1
            i += 1
            continue
        if c in "(){}|+?":
            out.append("\\" + c)
        elif c == "*" and (not out or out[-1] in ("(", "|", "^")):
            out.append(r"\*")
        else:
            out.append(c)
        i += 1
    return "".join(out)


@functools.lru_cache(maxsize=256)
def posix_regex(pattern: str, extended: bool, icase: bool = False) -> regex.Pattern:
    """A grep/sed/awk regular expression (BRE, or ERE when extended) compiled with the `regex` package.

    Raises UsageError naming what is wrong for an invalid pattern."""
    if len(pattern) > 2000:
        raise UsageError("pattern too long (the limit is 2000 characters)")
    rx = pattern if extended else bre_to_ere(pattern)
    rx = rx.replace(r"\<", r"\b").replace(r"\>", r"\b")
    if extended:  # in an ERE a { that does not start a valid interval is a literal
        rx = regex.sub(r"\{(?!\d*,?\d*\})", r"\\{", rx)
    try:
        return regex.compile(rx, regex.IGNORECASE if icase else 0)
    except regex.error as e:
        raise UsageError(f"invalid regular expression '{pattern}': {e}") from None


# =========================================================================== tr


def _tr_set(spec: str) -> list[str]:
    """Expand a tr SET: escapes, ranges a-z, classes [:upper:], repeats [c*n]."""
    out: list[str] = []
    i, n = 0, len(spec)

    def char(j: int) -> tuple[str, int]:
        c = spec[j]
        if c == "\\" and j + 1 < n:
            nxt = spec[j + 1]
            if nxt in "01234567":
                k = j + 1
                while k < n and k < j + 4 and spec[k] in "01234567":
                    k += 1
                return chr(int(spec[j + 1:k], 8)), k
            return {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "a": "\a", "b": "\b", "f": "\f",
                    "v": "\v"}.get(nxt, nxt), j + 2
        return c, j + 1

    while i < n:
        if spec.startswith("[:", i):
            end = spec.find(":]", i + 2)
            name = spec[i:end + 2] if end > 0 else ""
            if name in POSIX_CLASSES:
                body = POSIX_CLASSES[name].encode().decode("unicode_escape")
                out.extend(_tr_set(body.replace("\\", "\\\\") if name != "[:punct:]" else body))
                i = end + 2
                continue
            if end > 0:
                raise UsageError(f"tr: invalid character class '{spec[i + 2:end]}'")
        m = regex.match(r"\[(.)\*(\d*)\]", spec[i:])
        if m:
            count = m.group(2)
            if count:
                out.extend([m.group(1)] * min(int(count, 8 if count.startswith("0") else 10), 10_000))
            else:
                out.extend([m.group(1), "\0REPEAT"])
            i += m.end()
            continue
        c, j = char(i)
        if j < n and spec[j] == "-" and j + 1 < n:
            d, k = char(j + 1)
            if ord(d) < ord(c):
                raise UsageError(f"tr: range-endpoints of '{c}-{d}' are in reverse collating sequence order")
            out.extend(chr(x) for x in range(ord(c), ord(d) + 1))
            i = k
            continue
        out.append(c)
        i = j
    return out


def tr(args: list[str], text: str) -> tuple[str, str, int]:
    """GNU tr: translate, -d delete, -s squeeze, -c complement (with -C)."""
    flags = ""
    while args and args[0].startswith("-") and len(args[0]) > 1 and args[0] != "--":
        bad = set(args[0][1:]) - set("cdsCt")
        if bad:
            return "", f"tr: invalid option -- '{sorted(bad)[0]}'\nTry 'tr --help' for more information.\n", 1
        flags += args[0][1:]
        args = args[1:]
    if args and args[0] == "--":
        args = args[1:]
    comp, delete, squeeze = "c" in flags or "C" in flags, "d" in flags, "s" in flags
    need = 2 if (not delete and not squeeze) or (delete and squeeze) else 1
    if len(args) < need:
        msg = "missing operand" if not args else f"missing operand after '{args[0]}'"
        return "", f"tr: {msg}\nTry 'tr --help' for more information.\n", 1
    if len(args) > need + (1 if squeeze and not delete else 0):
        return "", f"tr: extra operand '{args[need]}'\nTry 'tr --help' for more information.\n", 1
    try:
        set1 = _tr_set(args[0])
        set2 = _tr_set(args[1]) if len(args) > 1 else []
    except UsageError as e:
        return "", f"{e}\n", 1
    s1 = set(c for c in set1 if c != "\0REPEAT")

    def in1(c: str) -> bool:
        return (c in s1) != comp

    if "\0REPEAT" in set2:
        k = set2.index("\0REPEAT")
        fill = max(len(set1) - (len(set2) - 2), 0)
        set2 = set2[:k - 1] + [set2[k - 1]] * fill + set2[k + 1:]
    if delete:
        text = "".join(c for c in text if not in1(c))
        squeeze_set = set(set2)
    elif set2:
        if comp:
            last = set2[-1]
            text = "".join(last if in1(c) else c for c in text)
        else:
            table: dict[str, str] = {}
            for k, c in enumerate(set1):
                table[c] = set2[k] if k < len(set2) else set2[-1]
            text = "".join(table.get(c, c) for c in text)
        squeeze_set = set(set2)
    else:
        squeeze_set = None
    if squeeze:
        out: list[str] = []
        for c in text:
            if out and out[-1] == c and (c in squeeze_set if squeeze_set is not None else in1(c)):
                continue
            out.append(c)
        text = "".join(out)
    return text, "", 0


# =========================================================================== sed


class _SedCmd:
    __slots__ = ("a1", "a2", "neg", "cmd", "arg", "active", "done_range")

    def __init__(self, a1, a2, neg: bool, cmd: str, arg):
        self.a1, self.a2, self.neg, self.cmd, self.arg = a1, a2, neg, cmd, arg
        self.active = False
        self.done_range = 0


def _sed_error(pos: int, msg: str) -> UsageError:
    return UsageError(f"sed: -e expression #1, char {pos}: {msg}")


class SedProgram:
    """A compiled sed script: s///[gpIN], y///, d D p P n N q Q = a i c h H g G x, { } groups, :label b t T,
    line / $ / /re/ / +N addresses, ranges, !."""

    def __init__(self, script: str, extended: bool):
        self.extended = extended
        self.cmds: list[_SedCmd] = []
        self.src = script
        self.i = 0
        self._parse()

    def _regex(self, delim: str) -> str:
        """Read up to the unescaped delimiter; \\delim becomes the delimiter itself."""
        s, out = self.src, []
        while self.i < len(s):
            c = s[self.i]
            if c == "\\" and self.i + 1 < len(s):
                nxt = s[self.i + 1]
                out.append(nxt if nxt == delim and delim not in ".*[]^$" else ("\n" if nxt == "n" else c + nxt))
                self.i += 2
                continue
            if c == delim:
                self.i += 1
                return "".join(out)
            if c == "\n" and delim != "\n":
                break
            out.append(c)
            self.i += 1
        raise _sed_error(self.i, "unterminated address regex" if delim == "/" else "unterminated `s' command")

    def _address(self):
        s = self.src
        if self.i < len(s) and s[self.i].isdigit():
            j = self.i
            while j < len(s) and s[j].isdigit():
                j += 1
            if j - self.i > 18:
                raise _sed_error(j, "line number too large")
            n = int(s[self.i:j])
            self.i = j
            return ("line", n)
        if self.i < len(s) and s[self.i] == "$":
            self.i += 1
            return ("last", None)
        if self.i < len(s) and s[self.i] == "+" and self.i + 1 < len(s) and s[self.i + 1].isdigit():
            j = self.i + 1
            while j < len(s) and s[j].isdigit():
                j += 1
            if j - self.i > 18:
                raise _sed_error(j, "line number too large")
            n = int(s[self.i + 1:j])
            self.i = j
            return ("plus", n)
        if self.i < len(s) and s[self.i] in "/\\":
            delim = "/"
            if s[self.i] == "\\":
                delim = s[self.i + 1]
                self.i += 1
            self.i += 1
            pat = self._regex(delim)
            icase = self.i < len(s) and s[self.i] == "I"
            if icase:
                self.i += 1
            return ("re", posix_regex(pat, self.extended, icase))
        return None

    def _skip(self, chars: str = " \t") -> None:
        while self.i < len(self.src) and self.src[self.i] in chars:
            self.i += 1

    def _parse(self) -> None:
        s = self.src
        opened: list[int] = []
        while True:
            self._skip(" \t\n;")
            if self.i >= len(s):
                if opened:
                    raise _sed_error(self.i, "unmatched `{'")
                labels = {c.arg: k for k, c in enumerate(self.cmds) if c.cmd == ":"}
                for c in self.cmds:
                    if c.cmd in "btT":
                        if c.arg and c.arg not in labels:
                            raise _sed_error(self.i, f"can't find label for jump to `{c.arg}'")
                        c.arg = labels[c.arg] if c.arg else len(self.cmds)
                return
            a1 = self._address()
            if a1 is not None and a1[0] == "plus":
                raise _sed_error(self.i, "invalid usage of +N or ~N as first address")
            a2 = None
            if a1 is not None and self.i < len(s) and s[self.i] == ",":
                self.i += 1
                a2 = self._address()
                if a2 is None:
                    raise _sed_error(self.i, "unexpected `,'")
            self._skip()
            neg = False
            if self.i < len(s) and s[self.i] == "!":
                neg = True
                self.i += 1
                self._skip()
            if self.i >= len(s):
                raise _sed_error(self.i, "missing command")
            cmd = s[self.i]
            self.i += 1
            if cmd == "s":
                arg = self._parse_s()
            elif cmd == "y":
                delim = s[self.i] if self.i < len(s) else ""
                self.i += 1
                src, dst = self._regex(delim), self._regex(delim)
                if len(src) != len(dst):
                    raise _sed_error(self.i, "strings for `y' command are different lengths")
                arg = str.maketrans(src, dst)
            elif cmd in "aic":
                self._skip()
                if s.startswith("\\\n", self.i):
                    self.i += 2
                elif s.startswith("\\", self.i):
                    self.i += 1
                end = s.find("\n", self.i)
                end = len(s) if end < 0 else end
                arg = s[self.i:end].replace("\\n", "\n").replace("\\t", "\t")
                self.i = end
            elif cmd in "qQ":
                self._skip()
                j = self.i
                while self.i < len(s) and s[self.i].isdigit():
                    self.i += 1
                arg = int(s[j:self.i][:9]) if self.i > j else 0
            elif cmd in "dpn=DPNhHgGx":
                arg = None
            elif cmd == "{":
                opened.append(len(self.cmds))
                self.cmds.append(_SedCmd(a1, a2, neg, cmd, None))
                continue
            elif cmd == "}":
                if not opened or a1 is not None:
                    raise _sed_error(self.i, "unexpected `}'")
                self.cmds[opened.pop()].arg = len(self.cmds)
                arg = None
            elif cmd in ":btT":
                self._skip()
                j = self.i
                while self.i < len(s) and s[self.i] not in ";\n" and not (cmd != ":" and s[self.i] == "}"):
                    self.i += 1
                arg = s[j:self.i].strip()
                if cmd == ":" and not arg:
                    raise _sed_error(self.i, "\":\" lacks a label")
            else:
                raise _sed_error(self.i, f"unknown command: `{cmd}'")
            self.cmds.append(_SedCmd(a1, a2, neg, cmd, arg))
            self._skip()
            if self.i < len(s) and s[self.i] not in ";\n}":
                raise _sed_error(self.i + 1, "extra characters after command")

    def _parse_s(self):
        s = self.src
        if self.i >= len(s):
            raise _sed_error(self.i, "unterminated `s' command")
        delim = s[self.i]
        self.i += 1
        pat = self._regex(delim)
        rep_start = self.i
        while self.i < len(s) and s[self.i] != delim:
            self.i += 2 if s[self.i] == "\\" else 1
        if self.i >= len(s):
            raise _sed_error(self.i, "unterminated `s' command")
        rep = s[rep_start:self.i]
        self.i += 1
        glob, pr, icase, nth = False, False, False, 1
        while self.i < len(s) and s[self.i] not in ";\n} \t":
            f = s[self.i]
            if f == "g":
                glob = True
            elif f == "p":
                pr = True
            elif f in "Ii":
                icase = True
            elif f.isdigit():
                j = self.i
                while self.i + 1 < len(s) and s[self.i + 1].isdigit():
                    self.i += 1
                nth = int(s[j:self.i + 1][:18])
            else:
                raise _sed_error(self.i + 1, "unknown option to `s'")
            self.i += 1
        if not pat:
            raise _sed_error(self.i, "no previous regular expression")
        return posix_regex(pat, self.extended, icase), _sed_replacement(rep), glob, pr, nth

    # ------------------------------------------------------------------ running
    def _matches(self, addr, line: str, num: int, last: bool, deadline: float) -> bool:
        kind, val = addr
        if kind == "line":
            return num == val
        if kind == "last":
            return last
        return val.search(line, timeout=regex_timeout(deadline)) is not None

    def _selected(self, c: _SedCmd, line: str, num: int, last: bool, deadline: float) -> bool:
        if c.a1 is None:
            return True
        if c.a2 is None:
            return self._matches(c.a1, line, num, last, deadline)
        if c.active:
            kind, val = c.a2
            if kind == "plus":
                end = num >= c.done_range
            elif kind == "line":
                end = num >= val
            else:
                end = self._matches(c.a2, line, num, last, deadline)
            if end:
                c.active = False
            return True
        if self._matches(c.a1, line, num, last, deadline):
            kind, val = c.a2
            if kind == "plus":
                c.done_range = num + val  # the range ends N lines after its start
                c.active = val > 0
                return True
            c.active = not (kind == "line" and val <= num) and not (kind == "last" and last)
            return True
        return False

    def run(self, text: str, quiet: bool, deadline: float) -> tuple[str, bool]:
        """Run over one stream; returns (output, whether q/Q stopped it). Commands form a flat list;
        `{` jumps past its `}` when its address does not match, and b/t/T jump to labels."""
        lines = text.split("\n")
        trailing_newline = text.endswith("\n")
        if trailing_newline:
            lines.pop()
        if not text:
            lines = []
        out: list[str] = []
        size = steps = 0
        hold = ""
        for c in self.cmds:
            c.active = False
        idx = 0
        carried: str | None = None  # what D leaves to restart the cycle with
        while carried is not None or idx < len(lines):
            if carried is None:
                line = lines[idx]
                idx += 1
            else:
                line, carried = carried, None
            num = idx
            last = num == len(lines)
            nl = "\n" if (not last or trailing_newline) else ""
            after: list[str] = []
            deleted = quit_after = quit_now = substituted = False
            pc = 0
            while pc < len(self.cmds):
                steps += 1
                if steps & 1023 == 0 and time.perf_counter() > deadline:
                    raise RegexTimeout
                c = self.cmds[pc]
                pc += 1
                cmd = c.cmd
                if cmd in ":}":
                    continue
                if self._selected(c, line, num, last, deadline) == c.neg:
                    if cmd == "{":
                        pc = c.arg + 1
                    continue
                if cmd == "{":
                    continue
                if cmd == "s":
                    rx, rep, glob, pr, nth = c.arg
                    new, count = _sed_sub(rx, rep, line, glob, nth, deadline)
                    if count:
                        line = new
                        substituted = True
                        if pr:
                            out.append(line + nl)
                elif cmd == "y":
                    line = line.translate(c.arg)
                elif cmd == "d":
                    deleted = True
                    break
                elif cmd == "D":
                    if "\n" in line:
                        carried = line.split("\n", 1)[1]
                    deleted = True
                    break
                elif cmd == "p":
                    out.append(line + "\n")
                elif cmd == "P":
                    out.append(line.split("\n", 1)[0] + "\n")
                elif cmd == "=":
                    out.append(f"{num}\n")
                elif cmd == "a":
                    after.append(c.arg + "\n")
                elif cmd == "i":
                    out.append(c.arg + "\n")
                elif cmd == "c":
                    if c.a2 is None or not c.active:
                        out.append(c.arg + "\n")
                    deleted = True
                    break
                elif cmd in "nN":  # n: print, then replace with the next line; N: append the next line
                    if last:
                        if cmd == "n" and not quiet:
                            out.append(line + nl)
                        deleted = cmd == "n"
                        quit_after = True
                        break
                    if cmd == "n" and not quiet:
                        out.append(line + nl)
                    line = lines[idx] if cmd == "n" else line + "\n" + lines[idx]
                    idx += 1
                    num = idx
                    last = num == len(lines)
                    nl = "\n" if (not last or trailing_newline) else ""
                elif cmd == "h":
                    hold = line
                elif cmd == "H":
                    hold += "\n" + line
                elif cmd == "g":
                    line = hold
                elif cmd == "G":
                    line += "\n" + hold
                elif cmd == "x":
                    line, hold = hold, line
                elif cmd == "b":
                    pc = c.arg
                elif cmd in "tT":
                    if substituted == (cmd == "t"):
                        pc = c.arg
                    substituted = False
                elif cmd == "q":
                    quit_after = True
                    break
                elif cmd == "Q":
                    quit_now = True
                    break
                if len(line) + len(hold) > 400_000:
                    raise UsageError("sed: the pattern space grew past 400000 characters")
            if quit_now:
                return "".join(out), True
            if not deleted and not quiet:
                out.append(line + nl)
            out.extend(after)
            size += len(line)
            if quit_after:
                return "".join(out), True
            if size > 400_000:
                break
        return "".join(out), False


def _sed_replacement(rep: str) -> list:
    """sed replacement text -> pieces: str literals and int group references (0 for &)."""
    pieces: list = []
    buf: list[str] = []
    i = 0
    while i < len(rep):
        c = rep[i]
        if c == "\\" and i + 1 < len(rep):
            nxt = rep[i + 1]
            if nxt.isdigit():
                pieces.append("".join(buf))
                buf = []
                pieces.append(int(nxt))
            else:
                buf.append({"n": "\n", "t": "\t"}.get(nxt, nxt))
            i += 2
            continue
        if c == "&":
            pieces.append("".join(buf))
            buf = []
            pieces.append(0)
        else:
            buf.append(c)
        i += 1
    pieces.append("".join(buf))
    return [p for p in pieces if p != ""]


def _sed_sub(rx, rep: list, line: str, glob: bool, nth: int, deadline: float) -> tuple[str, int]:
    count = 0
    done = 0

    def expand(m) -> str:
        nonlocal count, done
        count += 1
        if count < nth or (done and not glob):
            return m.group(0)
        done += 1
        return "".join(p if isinstance(p, str) else (m.group(p) or "") for p in rep)

    try:
        new = rx.sub(expand, line, timeout=regex_timeout(deadline))
    except IndexError:
        raise UsageError("sed: -e expression #1: invalid reference on `s' command's RHS") from None
    return new, done


def sed(args: list[str], read_file, write_file, stdin: str, deadline: float) -> tuple[str, str, int]:
    """GNU sed over the virtual filesystem: -n -e -E/-r -i -s; read_file/write_file raise on errors."""
    scripts: list[str] = []
    files: list[str] = []
    quiet = extended = in_place = False
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-e", "--expression") and i + 1 < len(args):
            scripts.append(args[i + 1])
            i += 2
            continue
        if a.startswith("--expression="):
            scripts.append(a.split("=", 1)[1])
        elif a in ("-n", "--quiet", "--silent"):
            quiet = True
        elif a in ("-E", "-r", "--regexp-extended"):
            extended = True
        elif a.startswith("-i") or a.startswith("--in-place"):
            in_place = True
        elif a == "-s":
            pass
        elif a.startswith("-") and len(a) > 1 and not a.startswith("-e"):
            flags = a[1:]
            if set(flags) <= set("nErs"):
                quiet = quiet or "n" in flags
                extended = extended or "E" in flags or "r" in flags
            elif set(flags[:-1]) <= set("nErs") and flags[-1] == "i":
                in_place = True
                quiet = quiet or "n" in flags
                extended = extended or "E" in flags or "r" in flags
            elif flags.endswith("e") and set(flags[:-1]) <= set("nErs") and i + 1 < len(args):
                quiet = quiet or "n" in flags
                extended = extended or "E" in flags or "r" in flags
                scripts.append(args[i + 1])
                i += 2
                continue
            else:
                return "", f"sed: invalid option -- '{flags[0]}'\nUsage: sed [OPTION]... {{script}} [input-file]...\n", 1
        elif a.startswith("-e"):
            scripts.append(a[2:])
        elif not scripts and not files:
            scripts.append(a)
        else:
            files.append(a)
        i += 1
    if not scripts:
        return "", "Usage: sed [OPTION]... {script-only-if-no-other-script} [input-file]...\n", 1
    try:
        prog = SedProgram("\n".join(scripts), extended)
    except UsageError as e:
        return "", f"{e}\n", 1
    err: list[str] = []
    try:
        if in_place:
            if not files:
                return "", "sed: no input files\n", 1
            for f in files:
                try:
                    text = read_file(f)
                except OSError as e:
                    err.append(f"sed: can't read {f}: {e}\n")
                    continue
                out, _ = prog.run(text, quiet, deadline)
                write_file(f, out)
            return "", "".join(err), 1 if err else 0
        chunks = []
        for f in files or ["-"]:
            if f == "-":
                chunks.append(stdin)
                continue
            try:
                chunks.append(read_file(f))
            except OSError as e:
                err.append(f"sed: can't read {f}: {e}\n")
        text = "".join(c if c.endswith("\n") or not c or k == len(chunks) - 1 else c + "\n"
                       for k, c in enumerate(chunks))
        out, _ = prog.run(text, quiet, deadline)
        return out, "".join(err), 2 if err else 0
    except (TimeoutError, RegexTimeout):
        return "", "sed: stopped: the script ran past the action's time limit\n", 4
    except UsageError as e:
        return "", f"{e}\n", 4

"""awk for the virtual shell: a lexer, a recursive-descent parser and a tree-walking interpreter.

Covers the POSIX awk that agents write: -F, -v, BEGIN/END, patterns (regex, comparisons, ranges),
$N/$0/NF/NR/FNR, print/printf (also `> file`, `>> file` and `| "command"`), variables, associative
arrays (incl. `in`, `delete`, multi-subscripts), user functions, if/else, while, do, for, for-in,
break/continue/next/exit, string/number semantics (strnum fields), and the string and math
builtins. Every loop iteration and function call counts against the action's time budget.
"""

from __future__ import annotations

import math
import random
import re
import time
from typing import Callable

from openmanus_lite.envs.shell.syntax import UsageError
from openmanus_lite.envs.shell.text import RegexTimeout, posix_regex, regex_timeout

MAX_AWK_DEPTH = 150
"""Nesting of parentheses / statements in a program and of user-function calls at run time."""


MAX_AWK_STRING = 1_000_000


class AwkError(Exception):
    pass


class StrNum(str):
    """A string from input (field, split() element, -v value): compares as a number when it looks like one."""


_NUMERIC = re.compile(r"\s*[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)\s*\Z")
_NUM_PREFIX = re.compile(r"\s*([-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?))")


def to_num(v) -> float:
    if v is None:
        return 0.0
    if isinstance(v, float):
        return v
    m = _NUM_PREFIX.match(v)
    return float(m.group(1)) if m else 0.0


def to_int(x: float) -> int:
    """Truncate toward zero; nan is 0 and infinities clamp, so field indexes and widths never raise."""
    if math.isnan(x):
        return 0
    if math.isinf(x):
        return 10 ** 18 if x > 0 else -10 ** 18
    return int(x)


def num_str(x: float, fmt: str = "%.6g") -> str:
    if math.isnan(x):
        return "nan" if math.copysign(1, x) > 0 else "-nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x == int(x) and abs(x) < 1e16:
        return str(int(x))
    try:
        return fmt % x
    except (TypeError, ValueError):  # a CONVFMT/OFMT the program set that is not one number format
        return "%.6g" % x


def to_str(v, fmt: str = "%.6g") -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return num_str(v, fmt)
    return v


def _is_numeric(v) -> bool:
    return v is None or isinstance(v, float) or (isinstance(v, StrNum) and _NUMERIC.match(v) is not None)


def _bool(v) -> bool:
    if v is None:
        return False
    if isinstance(v, float):
        return v != 0
    if isinstance(v, StrNum) and _NUMERIC.match(v):
        return float(v) != 0
    return v != ""


# =========================================================================== lexer

_KEYWORDS = {"BEGIN", "END", "function", "func", "if", "else", "while", "for", "do", "break", "continue", "next",
             "nextfile", "exit", "return", "delete", "in", "getline", "print", "printf"}
_BUILTINS = {"length", "substr", "index", "split", "sub", "gsub", "match", "sprintf", "tolower", "toupper", "int",
             "sqrt", "exp", "log", "sin", "cos", "atan2", "rand", "srand", "system", "close", "fflush"}
_PUNCT = ("+=", "-=", "*=", "/=", "%=", "^=", "**=", "**", "==", "<=", ">=", "!=", "!~", "&&", "||", "++", "--",
          ">>", "{", "}", "(", ")", "[", "]", ";", ",", "+", "-", "*", "/", "%", "^", "!", ">", "<", "|", "?", ":",
          "~", "$", "=")


def _lex(src: str) -> list[tuple[str, object]]:
    toks: list[tuple[str, object]] = []
    i, n = 0, len(src)

    def regex_allowed() -> bool:
        if not toks:
            return True
        kind, val = toks[-1]
        if kind in ("num", "str", "name", "funcname", "builtin", "ere"):
            return False
        return not (kind == "p" and val in (")", "]", "$", "++", "--"))

    while i < n:
        c = src[i]
        if c in " \t\r":
            i += 1
        elif c == "\\" and src[i + 1:i + 2] == "\n":
            i += 2
        elif c == "\\" and src[i + 1:i + 3] == "\r\n":
            i += 3
        elif c == "#":
            while i < n and src[i] != "\n":
                i += 1
        elif c == "\n":
            toks.append(("nl", None))
            i += 1
        elif c == '"':
            j = i + 1
            buf = []
            while j < n and src[j] != '"':
                if src[j] == "\\" and j + 1 < n:
                    e = src[j + 1]
                    if e in "01234567":
                        k = j + 1
                        while k < n and k < j + 4 and src[k] in "01234567":
                            k += 1
                        buf.append(chr(int(src[j + 1:k], 8)))
                        j = k
                        continue
                    buf.append({"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "/": "/", "a": "\a",
                                "b": "\b", "f": "\f", "v": "\v"}.get(e, "\\" + e))
                    j += 2
                    continue
                if src[j] == "\n":
                    raise AwkError("runaway string constant \"" + "".join(buf)[:10] + " ...")
                buf.append(src[j])
                j += 1
            if j >= n:
                raise AwkError("runaway string constant \"" + "".join(buf)[:10] + " ...")
            toks.append(("str", "".join(buf)))
            i = j + 1
        elif c == "/" and regex_allowed():
            j = i + 1
            buf = []
            in_class = False
            while j < n and (src[j] != "/" or in_class):
                if src[j] == "\n":
                    raise AwkError("runaway regular expression /" + "".join(buf)[:10] + " ...")
                if src[j] == "\\" and j + 1 < n:
                    buf.append("/" if src[j + 1] == "/" else src[j:j + 2])
                    j += 2
                    continue
                if src[j] == "[" and not in_class:
                    in_class = True
                    buf.append("[")
                    j += 1
                    if src[j:j + 1] == "^":
                        buf.append("^")
                        j += 1
                    if src[j:j + 1] == "]":
                        buf.append("\\]")
                        j += 1
                    continue
                if src[j] == "]" and in_class:
                    in_class = False
                buf.append(src[j])
                j += 1
            if j >= n:
                raise AwkError("runaway regular expression /" + "".join(buf)[:10] + " ...")
            toks.append(("ere", "".join(buf)))
            i = j + 1
        elif c.isdigit() or (c == "." and src[i + 1:i + 2].isdigit()):
            m = re.match(r"0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?", src[i:])
            text = m.group(0)
            toks.append(("num", float(int(text, 16)) if text[:2].lower() == "0x" else float(text)))
            i += len(text)
        elif c.isalpha() or c == "_":
            m = re.match(r"[A-Za-z_][A-Za-z0-9_]*", src[i:])
            word = m.group(0)
            i += len(word)
            if word in _KEYWORDS:
                toks.append(("kw", "function" if word == "func" else word))
            elif word in _BUILTINS:
                toks.append(("builtin", word))
            elif src[i:i + 1] == "(":
                toks.append(("funcname", word))
            else:
                toks.append(("name", word))
        else:
            p = next((p for p in _PUNCT if src.startswith(p, i)), None)
            if p is None:
                raise AwkError(f"syntax error at source line {src.count(chr(10), 0, i) + 1}: invalid char '{c}'")
            toks.append(("p", p))
            i += len(p)
    toks.append(("eof", None))
    return toks


# =========================================================================== parser


class _Parser:
    def __init__(self, src: str):
        self.toks = _lex(src)
        self.i = 0
        self.depth = 0
        self.funcs: dict[str, tuple[list[str], list]] = {}

    def peek(self, k: int = 0) -> tuple[str, object]:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def is_p(self, *vals: str) -> bool:
        kind, val = self.peek()
        return kind == "p" and val in vals

    def is_kw(self, *vals: str) -> bool:
        kind, val = self.peek()
        return kind == "kw" and val in vals

    def take(self) -> tuple[str, object]:
        t = self.peek()
        self.i += 1
        return t

    def error(self) -> AwkError:
        kind, val = self.peek()
        shown = {"nl": "newline", "eof": "end of file"}.get(kind, val if kind != "num" else num_str(val))
        return AwkError(f"syntax error at or near {shown}")

    def expect(self, val: str) -> None:
        if not self.is_p(val):
            raise self.error()
        self.i += 1

    def nls(self) -> None:
        while self.peek()[0] == "nl":
            self.i += 1

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_AWK_DEPTH:
            raise AwkError("program nested too deeply")

    # ------------------------------------------------------------------ program
    def program(self):
        begin, end, rules = [], [], []
        while True:
            while self.peek()[0] == "nl" or self.is_p(";"):
                self.i += 1
            kind, val = self.peek()
            if kind == "eof":
                break
            if kind == "kw" and val == "BEGIN":
                self.i += 1
                self.nls()
                begin.extend(self.block())
            elif kind == "kw" and val == "END":
                self.i += 1
                self.nls()
                end.extend(self.block())
            elif kind == "kw" and val == "function":
                self.i += 1
                kind, name = self.take()
                if kind not in ("name", "funcname"):
                    raise self.error()
                self.expect("(")
                params = []
                while not self.is_p(")"):
                    k, v = self.take()
                    if k != "name":
                        raise self.error()
                    params.append(v)
                    if self.is_p(","):
                        self.i += 1
                        self.nls()
                self.expect(")")
                self.nls()
                self.funcs[name] = (params, self.block())
            else:
                pat = self.expr() if not self.is_p("{") else None
                pat2 = None
                if self.is_p(","):
                    self.i += 1
                    self.nls()
                    pat2 = self.expr()
                action = self.block() if self.is_p("{") else None
                rules.append([pat, pat2, action, False])
        return begin, rules, end

    def block(self) -> list:
        self.expect("{")
        self.enter()
        stmts = []
        while True:
            while self.peek()[0] == "nl" or self.is_p(";"):
                self.i += 1
            if self.is_p("}"):
                self.i += 1
                break
            if self.peek()[0] == "eof":
                raise self.error()
            stmts.append(self.statement())
        self.depth -= 1
        return stmts

    def end_simple(self) -> None:
        if self.is_p(";") or self.peek()[0] == "nl":
            self.i += 1
        elif not self.is_p("}") and self.peek()[0] != "eof":
            raise self.error()

    def simple_or_block(self):
        self.nls()
        if self.is_p(";"):
            self.i += 1
            return ("block", [])
        return self.statement()

    def statement(self):
        self.enter()
        try:
            return self._statement()
        finally:
            self.depth -= 1

    def _statement(self):
        kind, val = self.peek()
        if kind == "p" and val == "{":
            return ("block", self.block())
        if kind == "kw":
            if val == "if":
                self.i += 1
                self.expect("(")
                cond = self.expr()
                self.expect(")")
                then = self.simple_or_block()
                save = self.i
                while self.peek()[0] == "nl" or self.is_p(";"):
                    self.i += 1
                if self.is_kw("else"):
                    self.i += 1
                    return ("if", cond, then, self.simple_or_block())
                self.i = save
                return ("if", cond, then, None)
            if val == "while":
                self.i += 1
                self.expect("(")
                cond = self.expr()
                self.expect(")")
                if self.is_p(";"):
                    self.i += 1
                    return ("while", cond, ("block", []))
                return ("while", cond, self.simple_or_block())
            if val == "do":
                self.i += 1
                body = self.simple_or_block()
                while self.peek()[0] == "nl" or self.is_p(";"):
                    self.i += 1
                if not self.is_kw("while"):
                    raise self.error()
                self.i += 1
                self.expect("(")
                cond = self.expr()
                self.expect(")")
                self.end_simple()
                return ("do", body, cond)
            if val == "for":
                self.i += 1
                self.expect("(")
                if (self.peek()[0] == "name" and self.peek(1) == ("kw", "in") and self.peek(2)[0] == "name"
                        and self.peek(3) == ("p", ")")):
                    var = self.take()[1]
                    self.i += 1
                    arr = self.take()[1]
                    self.expect(")")
                    return ("forin", var, arr, self.simple_or_block())
                init = None if self.is_p(";") else self.simple_expr_stmt()
                self.expect(";")
                self.nls()
                cond = None if self.is_p(";") else self.expr()
                self.expect(";")
                self.nls()
                step = None if self.is_p(")") else self.simple_expr_stmt()
                self.expect(")")
                if self.is_p(";"):
                    self.i += 1
                    return ("for", init, cond, step, ("block", []))
                return ("for", init, cond, step, self.simple_or_block())
            if val in ("break", "continue", "next", "nextfile"):
                self.i += 1
                self.end_simple()
                return (val,)
            if val in ("exit", "return"):
                self.i += 1
                arg = None
                if not (self.is_p(";", "}") or self.peek()[0] in ("nl", "eof")):
                    arg = self.expr()
                self.end_simple()
                return (val, arg)
            if val == "delete":
                self.i += 1
                k, name = self.take()
                if k != "name":
                    raise self.error()
                idx = None
                if self.is_p("["):
                    self.i += 1
                    idx = self.expr_list("]")
                self.end_simple()
                return ("delete", name, idx)
            if val in ("print", "printf"):
                return self.print_stmt()
            if val == "getline":
                raise AwkError("getline is not supported in this shell")
        e = self.simple_expr_stmt()
        self.end_simple()
        return e

    def simple_expr_stmt(self):
        return ("expr", self.expr())

    def print_stmt(self):
        kind = self.take()[1]
        args: list = []
        if self.is_p("("):
            # print (a, b) > "f"  vs  print (a)(b): try the parenthesised list first
            save = self.i
            self.i += 1
            try:
                inner = self.expr_list(")", no_gt=False)
                if self.is_p(";", "}", ">", ">>", "|") or self.peek()[0] in ("nl", "eof"):
                    args = inner
                else:
                    raise AwkError("not a list")
            except AwkError:
                self.i = save
                args = self.print_args()
        elif not (self.is_p(";", "}", ">", ">>", "|") or self.peek()[0] in ("nl", "eof")):
            args = self.print_args()
        dest = None
        if self.is_p(">", ">>", "|"):
            mode = self.take()[1]
            dest = (mode, self.concat(no_gt=True))
        self.end_simple()
        if kind == "printf" and not args:
            raise AwkError("printf: no format")
        return (kind, args, dest)

    def print_args(self) -> list:
        args = [self.expr(no_gt=True)]
        while self.is_p(","):
            self.i += 1
            self.nls()
            args.append(self.expr(no_gt=True))
        return args

    def expr_list(self, close: str, no_gt: bool = False) -> list:
        items = []
        self.nls()
        if self.is_p(close):
            self.i += 1
            return items
        while True:
            items.append(self.expr(no_gt))
            self.nls()
            if self.is_p(","):
                self.i += 1
                self.nls()
                continue
            self.expect(close)
            return items

    # ------------------------------------------------------------------ expressions
    def expr(self, no_gt: bool = False):
        self.enter()
        try:
            return self.ternary(no_gt)
        finally:
            self.depth -= 1

    def ternary(self, no_gt: bool):
        cond = self.or_(no_gt)
        if self.is_p("?"):
            self.i += 1
            self.nls()
            a = self.ternary(no_gt)
            self.nls()
            self.expect(":")
            self.nls()
            b = self.ternary(no_gt)
            return ("?", cond, a, b)
        if self.is_p("=", "+=", "-=", "*=", "/=", "%=", "^=", "**="):
            if cond[0] not in ("var", "index", "field"):
                raise self.error()
            op = self.take()[1]
            self.nls()
            return ("assign", op if op != "**=" else "^=", cond, self.ternary(no_gt))
        return cond

    def or_(self, no_gt: bool):
        left = self.and_(no_gt)
        while self.is_p("||"):
            self.i += 1
            self.nls()
            left = ("||", left, self.and_(no_gt))
        return left

    def and_(self, no_gt: bool):
        left = self.in_(no_gt)
        while self.is_p("&&"):
            self.i += 1
            self.nls()
            left = ("&&", left, self.in_(no_gt))
        return left

    def in_(self, no_gt: bool):
        left = self.match(no_gt)
        while self.is_kw("in"):
            self.i += 1
            k, name = self.take()
            if k != "name":
                raise self.error()
            left = ("in", [left], name)
        return left

    def match(self, no_gt: bool):
        left = self.compare(no_gt)
        while self.is_p("~", "!~"):
            op = self.take()[1]
            left = (op, left, self.compare(no_gt))
        return left

    def compare(self, no_gt: bool):
        left = self.concat(no_gt)
        ops = ("<", "<=", "!=", "==", ">=") if no_gt else ("<", "<=", "!=", "==", ">", ">=")
        if self.is_p(*ops):
            op = self.take()[1]
            return ("cmp", op, left, self.concat(no_gt))
        return left

    def _starts_operand(self) -> bool:
        kind, val = self.peek()
        if kind in ("num", "str", "ere", "name", "funcname", "builtin"):
            return True
        return kind == "p" and val in ("$", "!", "(", "-", "+", "++", "--")

    def concat(self, no_gt: bool = False):
        left = self.additive()
        while self._starts_operand() and not self.is_p("-", "+") and not self.is_kw("in"):
            if self.is_p("!") and self.peek(1) in (("p", "="), ("p", "~")):
                break
            left = ("concat", left, self.additive())
        return left

    def additive(self):
        left = self.mult()
        while self.is_p("+", "-"):
            op = self.take()[1]
            left = ("arith", op, left, self.mult())
        return left

    def mult(self):
        left = self.unary()
        while self.is_p("*", "/", "%"):
            op = self.take()[1]
            left = ("arith", op, left, self.unary())
        return left

    def unary(self):
        if self.is_p("!"):
            self.i += 1
            return ("not", self.unary())
        if self.is_p("-", "+"):
            op = self.take()[1]
            return ("neg" if op == "-" else "pos", self.unary())
        return self.power()

    def power(self):
        base = self.postfix()
        if self.is_p("^", "**"):
            self.i += 1
            return ("arith", "^", base, self.unary_power())
        return base

    def unary_power(self):
        if self.is_p("-", "+", "!"):
            op = self.take()[1]
            inner = self.unary_power()
            return ("neg", inner) if op == "-" else ("not", inner) if op == "!" else ("pos", inner)
        return self.power()

    def postfix(self):
        if self.is_p("++", "--"):
            op = self.take()[1]
            target = self.postfix()
            if target[0] not in ("var", "index", "field"):
                raise self.error()
            return ("preinc", 1.0 if op == "++" else -1.0, target)
        e = self.primary()
        if self.is_p("++", "--") and e[0] in ("var", "index", "field"):
            op = self.take()[1]
            return ("postinc", 1.0 if op == "++" else -1.0, e)
        return e

    def primary(self):
        kind, val = self.take()
        if kind == "num":
            return ("num", val)
        if kind == "str":
            return ("str", val)
        if kind == "ere":
            return ("ere", val)
        if kind == "p" and val == "$":
            self.enter()
            try:
                return ("field", self.postfix_noinc())
            finally:
                self.depth -= 1
        if kind == "p" and val == "(":
            self.nls()
            first = self.expr()
            self.nls()
            if self.is_p(","):
                self.i += 1
                rest = self.expr_list(")")
                if not self.is_kw("in"):
                    raise self.error()
                self.i += 1
                k, name = self.take()
                return ("in", [first] + rest, name)
            self.expect(")")
            return ("group", first)
        if kind == "name":
            if self.is_p("["):
                self.i += 1
                return ("index", val, self.expr_list("]"))
            return ("var", val)
        if kind == "funcname":
            self.expect("(")
            return ("call", val, self.expr_list(")"))
        if kind == "builtin":
            if self.is_p("("):
                self.i += 1
                return ("builtin", val, self.expr_list(")"))
            if val == "length":
                return ("builtin", "length", [])
            raise self.error()
        if kind == "kw" and val == "getline":
            raise AwkError("getline is not supported in this shell")
        self.i -= 1
        raise self.error()

    def postfix_noinc(self):
        if self.is_p("-", "+", "!"):
            op = self.take()[1]
            inner = self.postfix_noinc()
            return ("neg", inner) if op == "-" else ("not", inner) if op == "!" else ("pos", inner)
        if self.is_p("++", "--"):
            return self.postfix()
        return self.primary()


# =========================================================================== interpreter


class _Next(Exception):
    pass


class _Exit(Exception):
    def __init__(self, code: int):
        self.code = code


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


class _Return(Exception):
    def __init__(self, value):
        self.value = value


_ARITY = {"length": (0, 1), "substr": (2, 3), "index": (2, 2), "split": (2, 3), "sub": (2, 3), "gsub": (2, 3),
          "match": (2, 2), "sprintf": (1, 10 ** 6), "tolower": (1, 1), "toupper": (1, 1), "int": (1, 1),
          "sqrt": (1, 1), "exp": (1, 1), "log": (1, 1), "sin": (1, 1), "cos": (1, 1), "atan2": (2, 2),
          "rand": (0, 0), "srand": (0, 1), "system": (1, 1), "close": (1, 1), "fflush": (0, 1)}
_PRINTF = re.compile(r"%([-+ #0]*)(\*|\d+)?(?:\.(\*|\d+))?([a-zA-Z%])")


class Awk:
    """One awk run. `output(text)` receives what print writes to stdout; files and pipes go through
    the callbacks `write_file(path, text, append)` and `run_command(cmdline, stdin) -> stdout`."""

    def __init__(self, program: str, assigns: list[tuple[str, str]], fs: str | None, deadline: float,
                 write_file: Callable[[str, str, bool], None], run_command: Callable[[str, str], str],
                 environ: dict[str, str]):
        p = _Parser(program)
        self.begin, self.rules, self.end = p.program()
        self.funcs = p.funcs
        self.deadline = deadline
        self.steps = 0
        self.vars: dict[str, object] = {"FS": " ", "OFS": " ", "ORS": "\n", "RS": "\n", "NR": 0.0, "NF": 0.0,
                                         "FNR": 0.0, "SUBSEP": "\034", "CONVFMT": "%.6g", "OFMT": "%.6g",
                                         "RSTART": 0.0, "RLENGTH": -1.0, "FILENAME": ""}
        self.arrays: dict[str, dict[str, object]] = {"ENVIRON": {k: StrNum(v) for k, v in environ.items()}}
        if fs is not None:
            self.vars["FS"] = fs
        for name, value in assigns:
            self.vars[name] = StrNum(_escapes(value))
        self.out: list[str] = []
        self.size = 0
        self.files: dict[str, list[str]] = {}
        self.file_append: dict[str, bool] = {}
        self.pipes: dict[str, list[str]] = {}
        self.write_file = write_file
        self.run_command = run_command
        self.fields: list[str] = [""]
        self.record = StrNum("")
        self.locals: list[dict[str, object]] = []
        self.depth = 0
        self.rng = random.Random(0)

    # ------------------------------------------------------------------ driver
    def run(self, inputs: list[tuple[str, str]]) -> int:
        """inputs: (FILENAME, text) in order, or var=value assignments as (None, 'var=value')."""
        code = 0
        try:
            try:
                self.exec_block(self.begin)
                if self.rules or self.end:
                    for name, text in inputs:
                        if name is None:
                            k, _, v = text.partition("=")
                            self.vars[k] = StrNum(_escapes(v))
                            continue
                        self.vars["FILENAME"] = name
                        self.vars["FNR"] = 0.0
                        for rec in self.records(text):
                            self.tick()
                            self.vars["NR"] = to_num(self.vars["NR"]) + 1
                            self.vars["FNR"] = to_num(self.vars["FNR"]) + 1
                            self.set_record(rec)
                            try:
                                self.run_rules()
                            except _Next:
                                pass
            except _Exit as e:
                code = e.code
            try:
                self.exec_block(self.end)
            except _Exit as e:
                code = e.code
        finally:
            self.flush()
        return code

    def flush(self) -> None:
        for path, chunks in self.files.items():
            self.write_file(path, "".join(chunks), self.file_append[path])
        self.files.clear()
        for cmd, chunks in self.pipes.items():
            self.emit(self.run_command(cmd, "".join(chunks)))
        self.pipes.clear()

    def records(self, text: str):
        rs = to_str(self.vars.get("RS"))
        if rs == "\n" or len(rs) > 1:
            lines = text.split("\n")
            if lines and lines[-1] == "":
                lines.pop()
            return lines
        if rs == "":
            return [p.strip("\n") for p in re.split(r"\n\n+", text.strip("\n")) if p.strip("\n")]
        recs = text.split(rs)
        if recs and recs[-1] in ("", "\n"):
            recs.pop()
        return recs

    def run_rules(self) -> None:
        for rule in self.rules:
            pat, pat2, action, _ = rule
            if pat2 is not None:
                if rule[3]:
                    if _bool(self.eval_pattern(pat2)):
                        rule[3] = False
                    matched = True
                elif _bool(self.eval_pattern(pat)):
                    rule[3] = not _bool(self.eval_pattern(pat2))
                    matched = True
                else:
                    matched = False
            else:
                matched = pat is None or _bool(self.eval_pattern(pat))
            if matched:
                if action is None:
                    self.emit(to_str(self.record) + to_str(self.vars["ORS"]))
                else:
                    self.exec_block(action)

    def eval_pattern(self, node):
        if node[0] == "ere":
            return float(self.regex(node[1]).search(self.record, timeout=self.timeout()) is not None)
        return self.eval(node)

    def tick(self) -> None:
        self.steps += 1
        if self.steps & 255 == 0 and time.perf_counter() > self.deadline:
            raise RegexTimeout

    def timeout(self) -> float:
        return regex_timeout(self.deadline)

    def emit(self, text: str) -> None:
        if self.size <= 400_000:
            self.out.append(text)
            self.size += len(text)

    # ------------------------------------------------------------------ records and fields
    def set_record(self, text: str) -> None:
        self.record = StrNum(text)
        self.fields = [self.record] + [StrNum(f) for f in self.split_fields(text, self.vars["FS"])]
        self.vars["NF"] = float(len(self.fields) - 1)

    def split_fields(self, text: str, fs) -> list[str]:
        fs = to_str(fs)
        if fs == " ":
            return text.split()
        if text == "":
            return []
        if len(fs) == 1 and fs != "\\":
            return text.split(fs)
        if fs == "\t":
            return text.split("\t")
        return self.regex(fs).split(text, timeout=self.timeout())

    def get_field(self, k: int):
        if k < 0:
            raise AwkError(f"trying to access out of range field {k}")
        if k == 0:
            return self.record
        return self.fields[k] if k < len(self.fields) else StrNum("")

    def set_field(self, k: int, value) -> None:
        if k < 0:
            raise AwkError(f"trying to access out of range field {k}")
        if k > 10_000:
            raise AwkError(f"field index {k} too large")
        if k == 0:
            self.set_record(to_str(value, self.convfmt()))
            return
        while len(self.fields) <= k:
            self.fields.append(StrNum(""))
        self.fields[k] = value if isinstance(value, str) else to_str(value, self.convfmt())
        self.vars["NF"] = float(len(self.fields) - 1)
        self.rebuild()

    def rebuild(self) -> None:
        ofs = to_str(self.vars["OFS"])
        self.record = StrNum(ofs.join(to_str(f) for f in self.fields[1:]))
        self.fields[0] = self.record

    def set_nf(self, n: int) -> None:
        n = max(n, 0)
        self.fields = self.fields[:n + 1] + [StrNum("")] * max(0, n + 1 - len(self.fields))
        self.vars["NF"] = float(n)
        self.rebuild()

    def convfmt(self) -> str:
        return to_str(self.vars.get("CONVFMT")) or "%.6g"

    # ------------------------------------------------------------------ statements
    def exec_block(self, stmts: list) -> None:
        for s in stmts:
            self.exec(s)

    def exec(self, s) -> None:
        kind = s[0]
        if kind == "expr":
            self.eval(s[1])
        elif kind in ("print", "printf"):
            self.print_stmt(s)
        elif kind == "block":
            self.exec_block(s[1])
        elif kind == "if":
            if _bool(self.eval(s[1])):
                self.exec(s[2])
            elif s[3] is not None:
                self.exec(s[3])
        elif kind == "while":
            while _bool(self.eval(s[1])):
                self.tick()
                try:
                    self.exec(s[2])
                except _Break:
                    break
                except _Continue:
                    continue
        elif kind == "do":
            while True:
                self.tick()
                try:
                    self.exec(s[1])
                except _Break:
                    break
                except _Continue:
                    pass
                if not _bool(self.eval(s[2])):
                    break
        elif kind == "for":
            if s[1] is not None:
                self.exec(s[1])
            while s[2] is None or _bool(self.eval(s[2])):
                self.tick()
                try:
                    self.exec(s[4])
                except _Break:
                    break
                except _Continue:
                    pass
                if s[3] is not None:
                    self.exec(s[3])
        elif kind == "forin":
            arr = self.array(s[2])
            for key in list(arr):
                self.tick()
                if key not in arr:
                    continue
                self.assign(("var", s[1]), StrNum(key))
                try:
                    self.exec(s[3])
                except _Break:
                    break
                except _Continue:
                    pass
        elif kind == "break":
            raise _Break
        elif kind == "continue":
            raise _Continue
        elif kind in ("next", "nextfile"):
            raise _Next
        elif kind == "exit":
            raise _Exit(to_int(to_num(self.eval(s[1]))) & 0xFF if s[1] is not None else 0)
        elif kind == "return":
            raise _Return(self.eval(s[1]) if s[1] is not None else None)
        elif kind == "delete":
            arr = self.array(s[1])
            if s[2] is None:
                arr.clear()
            else:
                arr.pop(self.subscript(s[2]), None)
        else:
            raise AwkError(f"unknown statement {kind}")

    def print_stmt(self, s) -> None:
        kind, args, dest = s
        if kind == "print":
            ofmt = to_str(self.vars["OFMT"]) or "%.6g"
            vals = [self.eval(a) for a in args] if args else [self.record]
            text = to_str(self.vars["OFS"]).join(to_str(v, ofmt) for v in vals) + to_str(self.vars["ORS"])
        else:
            vals = [self.eval(a) for a in args]
            text = self.sprintf(to_str(vals[0], self.convfmt()), vals[1:])
        if dest is None:
            self.emit(text)
            return
        mode, target = dest
        name = to_str(self.eval(target), self.convfmt())
        if mode == "|":
            self.pipes.setdefault(name, []).append(text)
        else:
            if name in ("/dev/stdout", "-"):
                self.emit(text)
                return
            if name not in self.files:
                self.files[name] = []
                self.file_append[name] = mode == ">>"
            self.files[name].append(text)

    # ------------------------------------------------------------------ expressions
    def array(self, name: str) -> dict:
        for frame in reversed(self.locals[-1:]):
            if name in frame:
                v = frame[name]
                if v is None:
                    v = frame[name] = {}
                if not isinstance(v, dict):
                    raise AwkError(f"can't use scalar {name} as array")
                return v
        if name in self.vars:
            if self.vars[name] is None:
                del self.vars[name]
            else:
                raise AwkError(f"can't use scalar {name} as array")
        return self.arrays.setdefault(name, {})

    def subscript(self, exprs: list) -> str:
        fmt = self.convfmt()
        if len(exprs) == 1:
            return to_str(self.eval(exprs[0]), fmt)
        return to_str(self.vars["SUBSEP"]).join(to_str(self.eval(e), fmt) for e in exprs)

    def lookup(self, name: str):
        if self.locals and name in self.locals[-1]:
            v = self.locals[-1][name]
            if isinstance(v, dict):
                raise AwkError(f"can't use array {name} in scalar context")
            return v
        if name in self.arrays:
            raise AwkError(f"can't use array {name} in scalar context")
        return self.vars.get(name)

    def assign(self, target, value) -> None:
        kind = target[0]
        if kind == "var":
            name = target[1]
            if self.locals and name in self.locals[-1]:
                self.locals[-1][name] = value
                return
            if name in self.arrays:
                raise AwkError(f"can't assign to {name}; it's an array name.")
            self.vars[name] = value
            if name == "NF":
                self.set_nf(to_int(to_num(value)))
        elif kind == "index":
            self.array(target[1])[self.subscript(target[2])] = value
        elif kind == "field":
            self.set_field(to_int(to_num(self.eval(target[1]))), value)
        elif kind == "group":
            self.assign(target[1], value)
        else:
            raise AwkError("assignment to non-lvalue")

    def regex(self, pattern: str):
        try:
            return posix_regex(pattern, extended=True)
        except UsageError as e:
            raise AwkError(str(e)) from None

    def dyn_regex(self, node):
        if node[0] == "ere":
            return self.regex(node[1])
        return self.regex(to_str(self.eval(node), self.convfmt()))

    def eval(self, e):
        kind = e[0]
        if kind == "num":
            return e[1]
        if kind == "str":
            return e[1]
        if kind == "var":
            return self.lookup(e[1])
        if kind == "field":
            return self.get_field(to_int(to_num(self.eval(e[1]))))
        if kind == "index":
            arr = self.array(e[1])
            key = self.subscript(e[2])
            if key not in arr:
                arr[key] = None
            return arr[key]
        if kind == "group":
            return self.eval(e[1])
        if kind == "ere":
            return float(self.regex(e[1]).search(self.record, timeout=self.timeout()) is not None)
        if kind == "concat":
            fmt = self.convfmt()
            text = to_str(self.eval(e[1]), fmt) + to_str(self.eval(e[2]), fmt)
            if len(text) > MAX_AWK_STRING:
                raise AwkError(f"string longer than {MAX_AWK_STRING} characters")
            return text
        if kind == "arith":
            a, b = to_num(self.eval(e[2])), to_num(self.eval(e[3]))
            return self.arith(e[1], a, b)
        if kind == "cmp":
            return float(self.compare(e[1], self.eval(e[2]), self.eval(e[3])))
        if kind in ("~", "!~"):
            s = to_str(self.eval(e[1]), self.convfmt())
            found = self.dyn_regex(e[2]).search(s, timeout=self.timeout()) is not None
            return float(found == (kind == "~"))
        if kind == "&&":
            return float(_bool(self.eval(e[1])) and _bool(self.eval(e[2])))
        if kind == "||":
            return float(_bool(self.eval(e[1])) or _bool(self.eval(e[2])))
        if kind == "not":
            return float(not _bool(self.eval(e[1])))
        if kind == "neg":
            return -to_num(self.eval(e[1]))
        if kind == "pos":
            return to_num(self.eval(e[1]))
        if kind == "?":
            return self.eval(e[2]) if _bool(self.eval(e[1])) else self.eval(e[3])
        if kind == "in":
            return float(self.subscript(e[1]) in self.array(e[2]))
        if kind == "assign":
            op, target, rhs = e[1], e[2], e[3]
            val = self.eval(rhs)
            if op != "=":
                val = self.arith(op[0], to_num(self.eval(target)), to_num(val))
            elif isinstance(val, dict):
                raise AwkError("attempt to use array in a scalar context")
            self.assign(target, val)
            return val
        if kind in ("preinc", "postinc"):
            old = to_num(self.eval(e[2]))
            new = old + e[1]
            self.assign(e[2], new)
            return new if kind == "preinc" else old
        if kind == "builtin":
            return self.builtin(e[1], e[2])
        if kind == "call":
            return self.call(e[1], e[2])
        raise AwkError(f"unknown expression {kind}")

    def arith(self, op: str, a: float, b: float) -> float:
        try:
            if op == "+":
                return a + b
            if op == "-":
                return a - b
            if op == "*":
                return a * b
            if op == "/":
                if b == 0:
                    raise AwkError("division by zero")
                return a / b
            if op == "%":
                if b == 0:
                    raise AwkError("division by zero in %")
                return math.fmod(a, b)
            if op == "^":
                if abs(b) > 4096 and abs(a) > 1:
                    return math.inf if b > 0 else 0.0
                return float(a ** b) if not (a < 0 and b != int(b)) else math.nan
        except OverflowError:
            return math.inf
        except ZeroDivisionError:  # 0 ^ -1
            return math.inf
        raise AwkError(f"unknown operator {op}")

    def compare(self, op: str, a, b) -> bool:
        if _is_numeric(a) and _is_numeric(b):
            x, y = to_num(a), to_num(b)
        else:
            fmt = self.convfmt()
            x, y = to_str(a, fmt), to_str(b, fmt)
        return {"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y, "==": x == y, "!=": x != y}[op]

    def call(self, name: str, args: list):
        if name not in self.funcs:
            raise AwkError(f"function {name} never defined")
        params, body = self.funcs[name]
        if len(args) > len(params):
            raise AwkError(f"function {name} called with {len(args)} args, accepts only {len(params)}")
        self.depth += 1
        if self.depth > MAX_AWK_DEPTH:
            raise AwkError(f"function {name}: call nesting too deep")
        self.tick()
        frame: dict[str, object] = {}
        for k, p in enumerate(params):
            if k < len(args):
                a = args[k]
                if a[0] == "var" and (a[1] in self.arrays or (self.locals and isinstance(
                        self.locals[-1].get(a[1]), dict))):
                    frame[p] = self.array(a[1])  # arrays are passed by reference
                elif a[0] == "var" and self.lookup(a[1]) is None and a[1] not in self.vars:
                    frame[p] = None
                else:
                    frame[p] = self.eval(a)
            else:
                frame[p] = None
        self.locals.append(frame)
        try:
            self.exec_block(body)
            return None
        except _Return as r:
            return r.value
        finally:
            self.locals.pop()
            self.depth -= 1

    def builtin(self, name: str, args: list):
        fmt = self.convfmt()
        n = len(args)
        low, high = _ARITY[name]
        if not low <= n <= high:
            raise AwkError(f"function {name} called with {n} arguments")
        if name == "length":
            if n == 0:
                return float(len(self.record))
            a = args[0]
            if a[0] == "var" and (a[1] in self.arrays or (self.locals and isinstance(self.locals[-1].get(a[1]),
                                                                                      dict))):
                return float(len(self.array(a[1])))
            return float(len(to_str(self.eval(a), fmt)))
        if name == "substr":
            if n not in (2, 3):
                raise AwkError("substr: wrong number of arguments")
            s = to_str(self.eval(args[0]), fmt)
            start = _round(to_num(self.eval(args[1])))
            if n == 3:
                length = to_num(self.eval(args[2]))
                if math.isnan(length):
                    return ""
                end = start + _round(length) if not math.isinf(length) else len(s) + 1
            else:
                end = len(s) + 1
            start = max(start, 1)
            end = min(end, len(s) + 1)
            return s[start - 1:end - 1] if end > start else ""
        if name == "index":
            s, t = (to_str(self.eval(a), fmt) for a in args[:2])
            return float(s.find(t) + 1)
        if name == "split":
            if n not in (2, 3) or args[1][0] != "var":
                raise AwkError("split: second argument must be an array name")
            s = to_str(self.eval(args[0]), fmt)
            if n == 3:
                sep = args[2][1] if args[2][0] == "ere" else to_str(self.eval(args[2]), fmt)
                parts = (self.regex(sep).split(s, timeout=self.timeout()) if args[2][0] == "ere" and s
                         else self.split_fields(s, sep))
            else:
                parts = self.split_fields(s, self.vars["FS"])
            arr = self.array(args[1][1])
            arr.clear()
            for k, p in enumerate(parts, 1):
                arr[str(k)] = StrNum(p)
            return float(len(parts))
        if name in ("sub", "gsub"):
            if n not in (2, 3):
                raise AwkError(f"{name}: wrong number of arguments")
            rx = self.dyn_regex(args[0])
            repl = to_str(self.eval(args[1]), fmt)
            target = args[2] if n == 3 else ("field", ("num", 0.0))
            s = to_str(self.eval(target), fmt)
            count = 0

            def rep(m) -> str:
                nonlocal count
                count += 1
                out = []
                i = 0
                while i < len(repl):
                    c = repl[i]
                    if c == "\\" and repl[i + 1:i + 2] in ("&", "\\"):
                        out.append(repl[i + 1])
                        i += 2
                        continue
                    out.append(m.group(0) if c == "&" else c)
                    i += 1
                return "".join(out)

            new = rx.sub(rep, s, count=0 if name == "gsub" else 1, timeout=self.timeout())
            if len(new) > MAX_AWK_STRING:
                raise AwkError(f"string longer than {MAX_AWK_STRING} characters")
            if count:
                self.assign(target, new)
            return float(count)
        if name == "match":
            s = to_str(self.eval(args[0]), fmt)
            m = self.dyn_regex(args[1]).search(s, timeout=self.timeout())
            self.vars["RSTART"] = float(m.start() + 1) if m else 0.0
            self.vars["RLENGTH"] = float(m.end() - m.start()) if m else -1.0
            return self.vars["RSTART"]
        if name == "sprintf":
            if not args:
                raise AwkError("sprintf: no format")
            vals = [self.eval(a) for a in args]
            return self.sprintf(to_str(vals[0], fmt), vals[1:])
        if name in ("tolower", "toupper"):
            s = to_str(self.eval(args[0]), fmt) if args else ""
            return s.lower() if name == "tolower" else s.upper()
        if name == "int":
            v = to_num(self.eval(args[0])) if args else 0.0
            return float(math.trunc(v)) if math.isfinite(v) else v
        if name in ("sqrt", "exp", "log", "sin", "cos"):
            v = to_num(self.eval(args[0])) if args else 0.0
            try:
                return getattr(math, name)(v)
            except (ValueError, OverflowError):  # glibc answers -nan for log(-1) and sqrt(-1)
                return math.copysign(math.nan, -1) if name != "exp" else math.inf
        if name == "atan2":
            return math.atan2(to_num(self.eval(args[0])), to_num(self.eval(args[1])))
        if name == "rand":
            return self.rng.random()
        if name == "srand":
            seed = to_num(self.eval(args[0])) if args else 0.0
            self.rng.seed(seed)
            return 0.0
        if name == "system":
            cmd = to_str(self.eval(args[0]), fmt) if args else ""
            self.flush()
            self.emit(self.run_command(cmd, ""))
            return 0.0
        if name in ("close", "fflush"):
            if args:
                self.eval(args[0])
            self.flush()
            return 0.0
        raise AwkError(f"function {name} never defined")

    def sprintf(self, fmt: str, vals: list) -> str:
        k = 0

        def nxt():
            nonlocal k
            v = vals[k] if k < len(vals) else None
            k += 1
            return v

        def sub(m) -> str:
            flags, width, prec, conv = m.groups()
            if conv == "%":
                return "%"
            if width == "*":
                width = str(to_int(to_num(nxt())))
            if prec == "*":
                prec = str(to_int(to_num(nxt())))
            if width and abs(int(width)) > 1000 or prec and abs(int(prec)) > 1000:
                raise AwkError("printf: field width or precision too large (the limit is 1000)")
            spec = "%" + flags + (width or "") + (("." + prec) if prec is not None else "")
            v = nxt()
            if conv in "di":
                x = to_num(v)
                return (spec + "d") % (int(x) if math.isfinite(x) else 0)
            if conv in "oxXu":
                x = int(to_num(v)) if math.isfinite(to_num(v)) else 0
                return (spec + ("d" if conv == "u" else conv)) % x
            if conv in "eEfFgG":
                return (spec + conv) % to_num(v)
            if conv == "c":
                if isinstance(v, float):
                    return (spec + "s") % chr(to_int(v) % 0x110000)
                return (spec + "s") % to_str(v)[:1]
            if conv == "s":
                return (spec + "s") % to_str(v, self.convfmt())
            raise AwkError(f"printf: bad conversion %{conv}")

        try:
            return _PRINTF.sub(sub, fmt)
        except (ValueError, OverflowError) as e:
            raise AwkError(f"printf: {e}") from None


def _round(x: float) -> int:
    if math.isnan(x):
        return 0
    if math.isinf(x):
        return 10 ** 9 if x > 0 else -10 ** 9
    return int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5))


def _escapes(text: str) -> str:
    return re.sub(r"\\([nt\\/\"])", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), text)


def awk(args: list[str], read_file: Callable[[str], str], write_file: Callable[[str, str, bool], None],
        run_command: Callable[[str, str], str], environ: dict[str, str], stdin: str,
        deadline: float) -> tuple[str, str, int]:
    """`awk [-F fs] [-v var=value]... 'program' | -f progfile [file | var=value]...`"""
    fs = None
    assigns: list[tuple[str, str]] = []
    program = None
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            i += 1
            break
        if a.startswith("-F"):
            val = a[2:] if len(a) > 2 else (args[i + 1] if i + 1 < len(args) else None)
            if val is None:
                return "", "awk: option requires an argument -- F\n", 2
            fs = "\t" if val == "t" else _escapes(val)
            i += 1 if len(a) > 2 else 2
            continue
        if a.startswith("-v"):
            val = a[2:] if len(a) > 2 else (args[i + 1] if i + 1 < len(args) else None)
            if val is None or "=" not in val or not re.match(r"[A-Za-z_][A-Za-z0-9_]*=", val):
                return "", f"awk: improper assignment: -v {val or ''}\n", 2
            name, _, value = val.partition("=")
            assigns.append((name, value))
            i += 1 if len(a) > 2 else 2
            continue
        if a.startswith("-f"):
            path = a[2:] if len(a) > 2 else (args[i + 1] if i + 1 < len(args) else "")
            try:
                program = read_file(path)
            except OSError as e:
                return "", f"awk: can't open file {path}: {e}\n", 2
            i += 1 if len(a) > 2 else 2
            continue
        if a.startswith("-") and len(a) > 1 and a not in ("-",):
            return "", f"awk: not an option: {a}\n", 2
        break
    rest = args[i:]
    if program is None:
        if not rest:
            return "", "usage: awk [-F value] [-v var=value] [--] 'program text' [file ...]\n", 2
        program, rest = rest[0], rest[1:]
    try:
        machine = Awk(program, assigns, fs, deadline, write_file, run_command, environ)
    except AwkError as e:
        return "", f"awk: line 1: {e}\n", 2
    except RecursionError:
        return "", "awk: line 1: program nested too deeply\n", 2
    inputs: list[tuple[str | None, str]] = []
    err: list[str] = []
    for op in rest:
        if re.match(r"[A-Za-z_][A-Za-z0-9_]*=", op):
            inputs.append((None, op))
        elif op == "-":
            inputs.append(("", stdin))
        else:
            try:
                inputs.append((op, read_file(op)))
            except OSError as e:
                err.append(f"awk: cannot open \"{op}\" ({e})\n")
    if not any(name is not None for name, _ in inputs) and not err:
        inputs.append(("", stdin))
    status = 2 if err else 0
    try:
        code = machine.run(inputs)
        status = code or status
    except AwkError as e:
        err.append(f"awk: run time error: {e}\n\tFILENAME=\"{to_str(machine.vars['FILENAME'])}\" "
                   f"FNR={num_str(to_num(machine.vars['FNR']))} NR={num_str(to_num(machine.vars['NR']))}\n")
        status = 2
    except (RegexTimeout, TimeoutError):
        err.append("awk: stopped: the program ran past the time limit\n")
        status = 2
    except RecursionError:
        err.append("awk: run time error: nesting too deep\n")
        status = 2
    except (_Next, _Break, _Continue, _Return) as e:
        word = {_Next: "next", _Break: "break", _Continue: "continue", _Return: "return"}[type(e)]
        err.append(f"awk: line 1: `{word}' used outside {'a function' if word == 'return' else 'a loop or rule'}\n")
        status = 2
    return "".join(machine.out), "".join(err), status

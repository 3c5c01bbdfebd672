"""The virtual shell's language: lexer, parser (to a small AST) and arithmetic, with no execution.

Why a real grammar: agents write multi-line scripts (loops, `if`, `case`, `$(...)`, `$(( ))`,
here-strings) and a line-based tokenizer that expands variables while splitting cannot run a
loop body twice. Here words keep their source text and are expanded by the shell each time they
run (see `Shell.expand_word`); the parser only decides structure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


class ShellSyntaxError(Exception):
    pass


class UsageError(Exception):
    pass


# =========================================================================== tokens


@dataclass
class Word:
    raw: str
    """Source text, quotes included; expanded when the command runs."""
    heredoc: str | None = None
    heredoc_quoted: bool = False


@dataclass
class Op:
    op: str


@dataclass
class ArithTok:
    expr: str
    """The text between `((` and `))`."""


RESERVED = {"if", "then", "elif", "else", "fi", "for", "in", "do", "done", "while", "until", "case", "esac",
            "{", "}", "!", "[[", "]]", "function"}
_OPS = ("2>&1", "&>>", "<<<", "<<-", "&&", "||", ";;", "<<", ">>", "&>", ">&2", "1>&2", "2>>", "2>", "1>>", "1>",
        ">|", ">", "<", "|", ";", "&", "(", ")")
_OP_START = frozenset(o[0] for o in _OPS)
_WORD_END = set(" \t\r\n;&|<>()")
_ARITH_START_AFTER = {None, ";", "\n", "&&", "||", "|", "(", "do", "then", "else", "{", "!", "for", "elif"}
_VARNAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def skip_quoted(src: str, i: int) -> int:
    """Index just past the quoted run, `$(`, `${`, `$((` or backtick construct starting at src[i]."""
    n = len(src)
    c = src[i]
    if c == "'":
        end = src.find("'", i + 1)
        if end < 0:
            raise ShellSyntaxError("unexpected EOF while looking for matching `''")
        return end + 1
    if c == '"':
        j = i + 1
        while j < n:
            d = src[j]
            if d == "\\":
                j += 2
            elif d == '"':
                return j + 1
            elif d == "$" and src[j + 1:j + 2] in ("(", "{") or d == "`":
                j = skip_quoted(src, j)
            else:
                j += 1
        raise ShellSyntaxError("unexpected EOF while looking for matching `\"'")
    if c == "`":
        j = i + 1
        while j < n:
            if src[j] == "\\":
                j += 2
            elif src[j] == "`":
                return j + 1
            else:
                j += 1
        raise ShellSyntaxError("unexpected EOF while looking for matching ``'")
    if c == "$":
        opener = src[i + 1]
        close = ")" if opener == "(" else "}"
        depth = 0
        j = i + 1
        while j < n:
            d = src[j]
            if d in "'\"`":
                j = skip_quoted(src, j)
                continue
            if d == "\\":
                j += 2
                continue
            if d == "$" and src[j + 1:j + 2] in ("(", "{") and j != i:
                j = skip_quoted(src, j)
                continue
            if d == opener:
                depth += 1
            elif d == close:
                depth -= 1
                if depth == 0:
                    return j + 1
            j += 1
        raise ShellSyntaxError(f"unexpected EOF while looking for matching `{close}'")
    raise AssertionError(c)


def lex(src: str) -> list:
    """Split a script into Words, Ops and ArithToks; here-document bodies attach to their word."""
    toks: list = []
    pending: list[tuple[Word, bool]] = []
    i, n = 0, len(src)

    def last_key():
        if not toks:
            return None
        t = toks[-1]
        return t.op if isinstance(t, Op) else (t.raw if isinstance(t, Word) else "arith")

    while i < n:
        c = src[i]
        if c in " \t\r\f\v":
            i += 1
            continue
        if c == "\\" and src[i + 1:i + 2] == "\n":
            i += 2
            continue
        if c == "#":
            end = src.find("\n", i)
            i = n if end < 0 else end
            continue
        if c == "\n":
            toks.append(Op("\n"))
            i += 1
            for word, strip_tabs in pending:
                i = _read_heredoc(src, i, word, strip_tabs)
            pending.clear()
            continue
        if src.startswith("((", i) and last_key() in _ARITH_START_AFTER:
            j, depth = i + 2, 0
            while j < n:
                if src[j] == "(":
                    depth += 1
                elif src[j] == ")":
                    if depth == 0 and src.startswith("))", j):
                        break
                    depth -= 1
                j += 1
            if j >= n:
                raise ShellSyntaxError("unexpected EOF while looking for matching `))'")
            toks.append(ArithTok(src[i + 2:j]))
            i = j + 2
            continue
        op = next((o for o in _OPS if src.startswith(o, i)), None) if c in _OP_START else None
        if op is not None and op[0] in "12" and i > 0 and src[i - 1] not in " \t\n;&|(":
            op = None  # `a2>x` is the word a2 then a redirection
        if op is not None:
            toks.append(Op(op))
            i += len(op)
            if op in ("<<", "<<-"):
                while i < n and src[i] in " \t":
                    i += 1
                j = _word_end(src, i)
                if j == i:
                    raise ShellSyntaxError("syntax error near unexpected token `newline'")
                w = Word(src[i:j])
                toks.append(w)
                pending.append((w, op == "<<-"))
                i = j
            continue
        j = _word_end(src, i)
        toks.append(Word(src[i:j]))
        i = j
    if pending:
        for word, _ in pending:
            word.heredoc = ""
    return toks


def _word_end(src: str, i: int) -> int:
    n = len(src)
    while i < n:
        c = src[i]
        if c in _WORD_END:
            break
        if c == "\\":
            i += 2
        elif c in "'\"`" or (c == "$" and src[i + 1:i + 2] in ("(", "{")):
            i = skip_quoted(src, i)
        else:
            i += 1
    return min(i, n)


def _read_heredoc(src: str, i: int, word: Word, strip_tabs: bool) -> int:
    delim = word.raw
    quoted = any(q in delim for q in "'\"\\")
    delim = delim.replace("'", "").replace('"', "").replace("\\", "")
    lines = []
    n = len(src)
    while i < n:
        end = src.find("\n", i)
        line = src[i:] if end < 0 else src[i:end]
        i = n if end < 0 else end + 1
        check = line.lstrip("\t") if strip_tabs else line
        if check == delim:
            break
        lines.append(check)
    word.heredoc = "".join(line + "\n" for line in lines)
    word.heredoc_quoted = quoted
    return i


# =========================================================================== AST


@dataclass
class Simple:
    assigns: list[Word] = field(default_factory=list)
    words: list[Word] = field(default_factory=list)
    redirs: list[tuple[str, Word | None]] = field(default_factory=list)


@dataclass
class Pipeline:
    cmds: list
    negate: bool = False


@dataclass
class AndOr:
    items: list[tuple[str, Pipeline]]


@dataclass
class Seq:
    items: list


@dataclass
class If:
    branches: list[tuple[Seq, Seq]]
    orelse: Seq | None


@dataclass
class For:
    var: str
    words: list[Word] | None
    body: Seq


@dataclass
class ForArith:
    init: str
    cond: str
    step: str
    body: Seq


@dataclass
class While:
    cond: Seq
    body: Seq
    until: bool = False


@dataclass
class Case:
    word: Word
    items: list[tuple[list[Word], Seq]]


@dataclass
class Group:
    body: Seq
    subshell: bool = False


@dataclass
class Arith:
    expr: str


@dataclass
class Cond:
    """`[[ ... ]]`: operators kept as str, operands as Word."""
    items: list


@dataclass
class FuncDef:
    name: str
    body: object


@dataclass
class Redirected:
    node: object
    redirs: list[tuple[str, Word | None]]


_REDIR_OPS = {">", ">>", "<", "2>", "2>>", "&>", "&>>", ">|", "<<<", "<<", "<<-", "1>", "1>>"}
_REDIR_NOARG = {"2>&1", ">&2", "1>&2"}
_LIST_END = {"then", "elif", "else", "fi", "do", "done", "esac", "}"}


class Parser:
    """Recursive descent over the lexer's tokens (the POSIX shell grammar, the parts agents use)."""

    def __init__(self, toks: list):
        self.toks = toks
        self.i = 0

    def peek(self):
        return self.toks[self.i] if self.i < len(self.toks) else None

    def word_is(self, tok, *names: str) -> bool:
        return isinstance(tok, Word) and tok.raw in names

    def op_is(self, tok, *ops: str) -> bool:
        return isinstance(tok, Op) and tok.op in ops

    def error(self, tok=None) -> ShellSyntaxError:
        tok = self.peek() if tok is None else tok
        if tok is None:
            return ShellSyntaxError("syntax error: unexpected end of file")
        name = tok.op if isinstance(tok, Op) else tok.raw if isinstance(tok, Word) else "(("
        return ShellSyntaxError(f"syntax error near unexpected token `{'newline' if name == chr(10) else name}'")

    def skip_newlines(self) -> None:
        while self.op_is(self.peek(), "\n"):
            self.i += 1

    def expect_word(self, name: str) -> None:
        self.skip_newlines()
        if not self.word_is(self.peek(), name):
            raise self.error()
        self.i += 1

    # ------------------------------------------------------------------ lists
    def parse_script(self) -> Seq:
        seq = self.parse_list()
        if self.peek() is not None:
            raise self.error()
        return seq

    def parse_list(self, stop: tuple = ()) -> Seq:
        items = []
        while True:
            while self.op_is(self.peek(), "\n", ";"):
                if self.op_is(self.peek(), ";") and not items:
                    raise self.error()
                self.i += 1
            tok = self.peek()
            if tok is None or self.op_is(tok, ")", ";;") or self.word_is(tok, *_LIST_END):
                break
            items.append(self.parse_and_or())
            tok = self.peek()
            if self.op_is(tok, "&"):
                raise ShellSyntaxError("background jobs (&) are not supported in this shell")
            if not self.op_is(tok, ";", "\n"):
                break
            self.i += 1
        return Seq(items)

    def parse_and_or(self) -> AndOr:
        items = [(";", self.parse_pipeline())]
        while self.op_is(self.peek(), "&&", "||"):
            conn = self.peek().op
            self.i += 1
            self.skip_newlines()
            items.append((conn, self.parse_pipeline()))
        return AndOr(items)

    def parse_pipeline(self) -> Pipeline:
        negate = False
        if self.word_is(self.peek(), "!"):
            negate = True
            self.i += 1
        cmds = [self.parse_command()]
        while self.op_is(self.peek(), "|"):
            self.i += 1
            self.skip_newlines()
            cmds.append(self.parse_command())
        return Pipeline(cmds, negate)

    # ------------------------------------------------------------------ commands
    def parse_command(self):
        tok = self.peek()
        if tok is None:
            raise self.error()
        node = None
        if isinstance(tok, ArithTok):
            self.i += 1
            node = Arith(tok.expr)
        elif self.op_is(tok, "("):
            self.i += 1
            body = self.parse_list()
            if not self.op_is(self.peek(), ")"):
                raise self.error()
            self.i += 1
            node = Group(body, subshell=True)
        elif isinstance(tok, Word):
            kw = tok.raw
            if kw == "if":
                node = self.parse_if()
            elif kw in ("while", "until"):
                self.i += 1
                cond = self.parse_list()
                self.expect_word("do")
                body = self.parse_list()
                self.expect_word("done")
                node = While(cond, body, until=kw == "until")
            elif kw == "for":
                node = self.parse_for()
            elif kw == "case":
                node = self.parse_case()
            elif kw == "{":
                self.i += 1
                body = self.parse_list()
                self.expect_word("}")
                node = Group(body)
            elif kw == "[[":
                node = self.parse_cond()
            elif kw == "function":
                self.i += 1
                name = self.peek()
                if not isinstance(name, Word):
                    raise self.error()
                self.i += 1
                if self.op_is(self.peek(), "("):
                    self.i += 1
                    if not self.op_is(self.peek(), ")"):
                        raise self.error()
                    self.i += 1
                return self.parse_funcbody(name.raw)
            elif kw in RESERVED and kw not in ("!",):
                raise self.error()
            elif (self.op_is(self.toks[self.i + 1] if self.i + 1 < len(self.toks) else None, "(")
                  and self.op_is(self.toks[self.i + 2] if self.i + 2 < len(self.toks) else None, ")")):
                self.i += 3
                return self.parse_funcbody(kw)
        if node is None:
            return self.parse_simple()
        redirs = self.parse_redirs()
        return Redirected(node, redirs) if redirs else node

    def parse_funcbody(self, name: str) -> FuncDef:
        if not _VARNAME.fullmatch(name.replace("-", "_").replace(".", "_")) and name != ":":
            raise ShellSyntaxError(f"`{name}': not a valid identifier")
        self.skip_newlines()
        return FuncDef(name, self.parse_command())

    def parse_redirs(self) -> list:
        redirs = []
        while True:
            tok = self.peek()
            if self.op_is(tok, *_REDIR_OPS):
                nxt = self.toks[self.i + 1] if self.i + 1 < len(self.toks) else None
                if not isinstance(nxt, Word):
                    raise self.error(nxt)
                redirs.append((tok.op, nxt))
                self.i += 2
            elif self.op_is(tok, *_REDIR_NOARG):
                redirs.append((tok.op, None))
                self.i += 1
            else:
                return redirs

    def parse_simple(self) -> Simple:
        cmd = Simple()
        while True:
            tok = self.peek()
            if isinstance(tok, Word):
                if not cmd.words and _is_assignment(tok.raw):
                    cmd.assigns.append(tok)
                else:
                    cmd.words.append(tok)
                self.i += 1
            elif self.op_is(tok, *_REDIR_OPS, *_REDIR_NOARG):
                cmd.redirs.extend(self.parse_redirs())
            else:
                break
        if not cmd.words and not cmd.assigns and not cmd.redirs:
            raise self.error()
        if self.op_is(self.peek(), "(") and cmd.assigns and not cmd.words:
            raise ShellSyntaxError("arrays are not supported in this shell")
        return cmd

    def parse_if(self) -> If:
        self.i += 1
        branches = []
        cond = self.parse_list()
        self.expect_word("then")
        body = self.parse_list()
        branches.append((cond, body))
        orelse = None
        while True:
            self.skip_newlines()
            tok = self.peek()
            if self.word_is(tok, "elif"):
                self.i += 1
                cond = self.parse_list()
                self.expect_word("then")
                branches.append((cond, self.parse_list()))
            elif self.word_is(tok, "else"):
                self.i += 1
                orelse = self.parse_list()
                self.expect_word("fi")
                break
            elif self.word_is(tok, "fi"):
                self.i += 1
                break
            else:
                raise self.error()
        return If(branches, orelse)

    def parse_for(self):
        self.i += 1
        tok = self.peek()
        if isinstance(tok, ArithTok):
            self.i += 1
            parts = tok.expr.split(";")
            if len(parts) != 3:
                raise ShellSyntaxError("syntax error: arithmetic expression required in for ((...))")
            while self.op_is(self.peek(), ";", "\n"):
                self.i += 1
            body = self.parse_do()
            return ForArith(parts[0], parts[1], parts[2], body)
        if not isinstance(tok, Word) or not _VARNAME.fullmatch(tok.raw):
            raise ShellSyntaxError(f"`{tok.raw if isinstance(tok, Word) else ''}': not a valid identifier")
        var = tok.raw
        self.i += 1
        self.skip_newlines()
        words = None
        if self.word_is(self.peek(), "in"):
            self.i += 1
            words = []
            while isinstance(self.peek(), Word):
                words.append(self.peek())
                self.i += 1
            if not self.op_is(self.peek(), ";", "\n"):
                raise self.error()
        while self.op_is(self.peek(), ";", "\n"):
            self.i += 1
        return For(var, words, self.parse_do())

    def parse_do(self) -> Seq:
        if self.word_is(self.peek(), "{"):
            self.i += 1
            body = self.parse_list()
            self.expect_word("}")
            return body
        self.expect_word("do")
        body = self.parse_list()
        self.expect_word("done")
        return body

    def parse_case(self) -> Case:
        self.i += 1
        word = self.peek()
        if not isinstance(word, Word):
            raise self.error()
        self.i += 1
        self.expect_word("in")
        items = []
        while True:
            self.skip_newlines()
            tok = self.peek()
            if self.word_is(tok, "esac"):
                self.i += 1
                break
            if self.op_is(tok, "("):
                self.i += 1
            pats = []
            while True:
                tok = self.peek()
                if not isinstance(tok, Word):
                    raise self.error()
                pats.append(tok)
                self.i += 1
                if self.op_is(self.peek(), "|"):
                    self.i += 1
                    continue
                if self.op_is(self.peek(), ")"):
                    self.i += 1
                    break
                raise self.error()
            body = self.parse_list()
            items.append((pats, body))
            if self.op_is(self.peek(), ";;"):
                self.i += 1
                continue
            self.skip_newlines()
            if self.word_is(self.peek(), "esac"):
                self.i += 1
                break
            raise self.error()
        return Case(word, items)

    def parse_cond(self) -> Cond:
        self.i += 1
        items: list = []
        while True:
            tok = self.peek()
            if tok is None:
                raise ShellSyntaxError("unexpected EOF while looking for `]]'")
            self.i += 1
            if self.word_is(tok, "]]"):
                break
            if isinstance(tok, Op):
                if tok.op in ("&&", "||", "(", ")", "<", ">"):
                    items.append(tok.op)
                    continue
                raise self.error(tok)
            if isinstance(tok, ArithTok):
                raise self.error(tok)
            items.append(tok.raw if tok.raw in ("!",) else tok)
        if not items:
            raise ShellSyntaxError("syntax error near `]]'")
        return Cond(items)


def _is_assignment(raw: str) -> bool:
    m = re.match(r"[A-Za-z_][A-Za-z0-9_]*\+?=", raw)
    return m is not None


def parse_script(src: str) -> Seq:
    return Parser(lex(src)).parse_script()


# =========================================================================== IFS splitting


def ifs_split(text: str, ifs: str, maxsplit: int = -1) -> list[str]:
    """Split `text` into fields the way the shell does for IFS (whitespace runs collapse, other
    IFS characters each end one field). With maxsplit, the last field keeps the rest of the text."""
    if ifs == "":
        return [text] if text else []
    ws = "".join(c for c in ifs if c in " \t\n")
    other = "".join(c for c in ifs if c not in " \t\n")
    wsr = f"[{re.escape(ws)}]" if ws else None
    text = text.strip(ws) if ws else text
    if not text:
        return []
    if other:
        delim = (f"{wsr}*[{re.escape(other)}]{wsr}*" + (f"|{wsr}+" if ws else "")) if ws else f"[{re.escape(other)}]"
    else:
        delim = f"{wsr}+"
    out: list[str] = []
    pos = 0
    for m in re.finditer(delim, text):
        if maxsplit >= 0 and len(out) == maxsplit:
            break
        out.append(text[pos:m.start()])
        pos = m.end()
    out.append(text[pos:])
    return out


# =========================================================================== arithmetic

_MASK = (1 << 64) - 1


def _wrap(v: int) -> int:
    v &= _MASK
    return v - (1 << 64) if v >> 63 else v


_ARITH_TOKEN = re.compile(r"\s*(?:(0[xX][0-9a-fA-F]+|\d+#[0-9a-zA-Z@_]+|\d+)|([A-Za-z_][A-Za-z0-9_]*)|"
                          r"(\*\*=|<<=|>>=|\+\+|--|\*\*|<<|>>|<=|>=|==|!=|&&|\|\||[-+*/%&^|]=|[-+*/%<>=!~&^|?:(),]))")
_BINARY = [("||",), ("&&",), ("|",), ("^",), ("&",), ("==", "!="), ("<", ">", "<=", ">="), ("<<", ">>"),
           ("+", "-"), ("*", "/", "%")]
_ASSIGN = {"=", "+=", "-=", "*=", "/=", "%=", "<<=", ">>=", "&=", "^=", "|=", "**="}


class ArithError(Exception):
    pass


class Arithmetic:
    """Evaluates bash `$(( ))` / `(( ))` expressions on 64-bit integers over a variable dict."""

    def __init__(self, expr: str, vars: dict[str, str], depth: int = 0):
        self.expr = expr
        self.vars = vars
        self.depth = depth
        self.toks: list[tuple[str, str]] = []
        pos = 0
        expr = expr.rstrip()
        while pos < len(expr):
            m = _ARITH_TOKEN.match(expr, pos)
            if not m or m.end() == pos:
                raise ArithError(f"{expr.strip()}: syntax error: invalid arithmetic operator (error token is "
                                 f"\"{expr[pos:].strip()}\")")
            num, name, op = m.groups()
            self.toks.append(("n", num) if num else ("v", name) if name else ("o", op))
            pos = m.end()
        self.i = 0

    def evaluate(self) -> int:
        if not self.toks:
            return 0
        val = self.comma(True)
        if self.i < len(self.toks):
            raise ArithError(f"{self.expr.strip()}: syntax error in expression (error token is "
                             f"\"{self.toks[self.i][1]}\")")
        return val

    def peek(self) -> str | None:
        return self.toks[self.i][1] if self.i < len(self.toks) and self.toks[self.i][0] == "o" else None

    def comma(self, live: bool) -> int:
        v = self.assign(live)
        while self.peek() == ",":
            self.i += 1
            v = self.assign(live)
        return v

    def assign(self, live: bool) -> int:
        if (self.i + 1 < len(self.toks) and self.toks[self.i][0] == "v" and self.toks[self.i + 1][0] == "o"
                and self.toks[self.i + 1][1] in _ASSIGN):
            name, op = self.toks[self.i][1], self.toks[self.i + 1][1]
            self.i += 2
            rhs = self.assign(live)
            if not live:
                return 0
            val = rhs if op == "=" else self.binop(op[:-1], self.var(name), rhs)
            self.vars[name] = str(_wrap(val))
            return _wrap(val)
        return self.ternary(live)

    def ternary(self, live: bool) -> int:
        cond = self.binary(0, live)
        if self.peek() != "?":
            return cond
        self.i += 1
        a = self.assign(live and cond != 0)
        if self.peek() != ":":
            raise ArithError(f"{self.expr.strip()}: expected `:' for conditional expression")
        self.i += 1
        b = self.assign(live and cond == 0)
        return a if cond else b

    def binary(self, level: int, live: bool) -> int:
        if level == len(_BINARY):
            return self.power(live)
        left = self.binary(level + 1, live)
        while self.peek() in _BINARY[level]:
            op = self.peek()
            self.i += 1
            if op == "&&":
                right = self.binary(level + 1, live and left != 0)
                left = int(left != 0 and right != 0)
            elif op == "||":
                right = self.binary(level + 1, live and left == 0)
                left = int(left != 0 or right != 0)
            else:
                right = self.binary(level + 1, live)
                left = self.binop(op, left, right) if live else 0
        return left

    def power(self, live: bool) -> int:
        base = self.unary(live)
        if self.peek() == "**":
            self.i += 1
            exp = self.power(live)
            return self.binop("**", base, exp) if live else 0
        return base

    def unary(self, live: bool) -> int:
        op = self.peek()
        if op in ("-", "+", "!", "~"):
            self.i += 1
            v = self.unary(live)
            return {"-": -v, "+": v, "!": int(v == 0), "~": ~v}[op]
        if op in ("++", "--"):
            self.i += 1
            if self.i >= len(self.toks) or self.toks[self.i][0] != "v":
                raise ArithError(f"{self.expr.strip()}: syntax error: operand expected")
            name = self.toks[self.i][1]
            self.i += 1
            v = _wrap(self.var(name) + (1 if op == "++" else -1))
            if live:
                self.vars[name] = str(v)
            return v
        return self.postfix(live)

    def postfix(self, live: bool) -> int:
        if self.i >= len(self.toks):
            raise ArithError(f"{self.expr.strip()}: syntax error: operand expected (error token is \"\")")
        kind, text = self.toks[self.i]
        self.i += 1
        if kind == "n":
            return _parse_int(text)
        if kind == "v":
            v = self.var(text)
            if self.peek() in ("++", "--"):
                op = self.peek()
                self.i += 1
                if live:
                    self.vars[text] = str(_wrap(v + (1 if op == "++" else -1)))
            return v
        if text == "(":
            v = self.comma(live)
            if self.peek() != ")":
                raise ArithError(f"{self.expr.strip()}: missing `)'")
            self.i += 1
            return v
        raise ArithError(f"{self.expr.strip()}: syntax error: operand expected (error token is \"{text}\")")

    def var(self, name: str) -> int:
        raw = self.vars.get(name, "").strip()
        if not raw:
            return 0
        if re.fullmatch(r"-?\d{1,64}", raw):
            return _wrap(int(raw))
        if self.depth > 8:
            raise ArithError(f"{name}: expression recursion level exceeded")
        return Arithmetic(raw, self.vars, self.depth + 1).evaluate()

    def binop(self, op: str, a: int, b: int) -> int:
        if op in ("/", "%"):
            if b == 0:
                raise ArithError(f"{self.expr.strip()}: division by 0 (error token is \"{b}\")")
            q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
            return _wrap(q if op == "/" else a - q * b)
        if op == "**":
            if b < 0:
                raise ArithError(f"{self.expr.strip()}: exponent less than 0")
            return _wrap(pow(a, b, 1 << 64))
        if op in ("<<", ">>"):
            b &= 63
            return _wrap(a << b) if op == "<<" else a >> b
        fn = {"+": a + b, "-": a - b, "*": a * b, "&": a & b, "|": a | b, "^": a ^ b, "==": int(a == b),
              "!=": int(a != b), "<": int(a < b), ">": int(a > b), "<=": int(a <= b), ">=": int(a >= b)}
        return _wrap(fn[op])


def _parse_int(text: str) -> int:
    if len(text) > 64:
        raise ArithError(f"{text[:20]}...: value too great for base")
    if text.lower().startswith("0x"):
        return _wrap(int(text, 16))
    if "#" in text:
        base, digits = text.split("#", 1)
        try:
            return _wrap(int(digits, int(base)))
        except ValueError:
            raise ArithError(f"{text}: invalid number") from None
    if len(text) > 1 and text.startswith("0"):
        try:
            return int(text, 8)
        except ValueError:
            raise ArithError(f"{text}: value too great for base (error token is \"{text}\")") from None
    return _wrap(int(text))


def arith(expr: str, vars: dict[str, str]) -> int:
    return Arithmetic(expr, vars).evaluate()

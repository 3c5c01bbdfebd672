"""DB domain: AgentBench dbbench-style tasks on a fresh in-memory SQLite database per episode.

The agent runs one SQL statement per turn (`Act: sql` + a ```sql block, or AgentBench's
`Action: Operation`) and sees the Python repr of the fetched rows (`[(60900,)]`) or the
error text. It finishes with `answer([...])` (or `Final Answer: [...]`).

Grading follows AgentBench: a SELECT-type task compares the answer list with the label
(single values as numbers where both parse, otherwise as sets); an INSERT / UPDATE /
DELETE task compares the tables after the episode with the tables after running the
reference SQL on a fresh copy of the start database.

Generated tasks cover AgentBench's categories (counting, comparison, ranking,
aggregation-SUM/MAX/MIN/AVG, other, INSERT, UPDATE, DELETE) over generated tables;
envs/sql_tables.py makes AgentBench-style ones (web-table names and headers, text cells, WikiSQL phrasing);
`load_agentbench_db(path)` imports real AgentBench dbbench rows. `DBEnv.typical_mistake` is the slip models
make on such tables (names left unquoted), for recovery data in which the expert reads the error and quotes.

Safety: an authorizer refuses ATTACH/DETACH (which also blocks VACUUM INTO), every PRAGMA that could
change settings, virtual tables, and the built-ins that reach past SQL values (DENIED_FUNCTIONS: extension
loading, fts3_tokenizer's raw pointers); the built-ins whose single call can run for seconds (printf widths,
quadratic instr/replace/trim) check their arguments' sizes first; a progress handler stops a statement
after a fixed number of VM instructions or STATEMENT_CPU_S of CPU time; string/blob size, page count and
fetched rows are capped.
"""

from __future__ import annotations

import ast
import copy
import json
import random
import re
import sqlite3
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openmanus_lite.envs.base import Env, InvalidAction, echoed, expert_turn, register_domain
from openmanus_lite.react import ParseError, answer, parse_step, sql
from openmanus_lite.schema import Task

INTRO = (
    "You work with an SQLite database through SQL to answer a question or make a change. Run one SQL "
    "statement per turn; you see the result rows. Finish with answer([<values>]) holding the answer values; "
    'after a change, finish with answer(["none"]).'
)
OBSERVATION_LIMIT = 800
MAX_ROWS = 200
VM_STEPS_PER_CHECK = 100
MAX_CHECKS = 30_000
"""A statement may run at most MAX_CHECKS * VM_STEPS_PER_CHECK SQLite VM instructions (~0.1 s)."""
STATEMENT_CPU_S = 0.5
"""...and at most this much CPU time of its thread: the instruction count alone misses slow function
calls (one `printf('%.*c', 2000000000, 'x')` is a single instruction), and thread time, unlike wall
time, is not stretched by other work in the process."""
MAX_LENGTH = 100_000
"""Longest string or blob a value may hold (the tasks' cells are short)."""
MAX_PAIR_WORK = 5_000_000
"""Most characters x characters one call of a quadratic built-in (instr, replace, trim) may compare:
~10 ms. SQLite scans the text once per position of the pattern (or per character of trim's set)."""

MUTATION_TYPES = ("INSERT", "UPDATE", "DELETE")

# =========================================================================== safe database


_TABLE_PRAGMAS = {"table_info", "table_xinfo", "index_list", "index_info", "index_xinfo", "foreign_key_list"}
_READ_PRAGMAS = {"table_list", "database_list", "collation_list", "page_size", "page_count", "encoding",
                 "user_version", "schema_version", "foreign_keys", "journal_mode", "max_page_count",
                 "compile_options", "function_list", "pragma_list", "freelist_count", "application_id"}
DENIED_FUNCTIONS = frozenset({"load_extension", "fts3_tokenizer", "fts5", "sqlite_log", "rtreenode", "rtreedepth",
                              "rtreecheck"})
"""Built-ins no task needs that reach past SQL values: load_extension loads native code; fts3_tokenizer
returns and installs raw C pointers (a forged one crashes the process at the next full-text table);
fts5() hands out an API pointer; sqlite_log writes to the host's log; the rtree* functions parse raw
r-tree node blobs. The authorizer refuses them when a statement is prepared, and each is also replaced
by a function that refuses, should a path around the authorizer exist."""
_LEADING_NUMBER = re.compile(r"\s*[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_PRINTF_SPEC = re.compile(r"%[-+ #!0,]*(\*|\d+)?(?:\.(\*|\d*))?(?:ll|l)?(.?)", re.S)


def quote_ident(name: str) -> str:
    """An identifier quoted for SQLite (works for names with spaces, quotes, or none at all)."""
    return '"' + name.replace('"', '""') + '"'


def _size_of(value) -> float:
    """What SQLite reads as an integer from `value` (a printf `*` width), as a magnitude, over-estimated
    rather than under: text counts by its leading number, as SQLite converts it."""
    if isinstance(value, (bytes, str)):
        text = value.decode("latin-1") if isinstance(value, bytes) else value
        m = _LEADING_NUMBER.match(text)
        return abs(float(m.group())) if m else 0.0
    if isinstance(value, (int, float)):
        return abs(float(value)) if value == value else 0.0
    return 0.0


def printf_sizes(fmt, args: tuple) -> list[float]:
    """Every width and precision a printf/format call asks for (SQLite loops over a `%c` precision
    even when the result will be refused as too long, so a huge one takes seconds)."""
    if not isinstance(fmt, str):
        return []
    sizes, i = [], 0
    for m in _PRINTF_SPEC.finditer(fmt):
        for part in m.group(1), m.group(2):
            if part == "*":
                sizes.append(_size_of(args[i]) if i < len(args) else 0.0)
                i += 1
            elif part:
                sizes.append(float("inf") if len(part) > 9 else float(part))
        if m.group(3) not in ("%", "n"):
            i += 1
    return sizes


def _text_length(value) -> int:
    return len(value) if isinstance(value, (str, bytes)) else 24


def _check_call(name: str, args: tuple) -> str | None:
    """Why a call of a guarded built-in would run too long, or None when it is cheap."""
    if name in ("printf", "format"):
        big = max(printf_sizes(args[0] if args else None, args[1:]), default=0.0)
        if big > MAX_LENGTH:
            return f"{name}: a width or precision of {big:.0f} is over this database's limit of {MAX_LENGTH}"
        return None
    if len(args) >= 2:
        work = _text_length(args[0]) * _text_length(args[1])
        if work > MAX_PAIR_WORK:
            return (f"{name}: a {_text_length(args[0])}-character text with a {_text_length(args[1])}-character "
                    f"{'set' if name.endswith('trim') else 'pattern'} is more work than this database allows; "
                    "use shorter text")
    return None


_GUARDED_FUNCTIONS = {"printf": -1, "format": -1, "instr": 2, "replace": 3, "trim": 2, "ltrim": 2, "rtrim": 2}
"""Built-ins whose one call can run for seconds, with the argument count guarded (SQLite's progress
handler runs between VM instructions, so it cannot stop one slow call). Each is replaced by a function
that checks the arguments' sizes and then runs the built-in on a side connection with no tables."""


class SafeDB:
    """One in-memory SQLite database with the guards installed. Deep-copying it (and so
    `Env.clone()`) copies the database itself, which `copy.deepcopy` cannot do for a
    sqlite3 connection."""

    def __init__(self, tables: list[dict[str, Any]] | None = None, _conn: sqlite3.Connection | None = None,
                 cache: bool = True):
        if _conn is None:
            if cache:
                _conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
                _template(tables or []).backup(_conn)
            else:
                _conn = _build(tables or [])
        self.conn = _conn
        self._checks = 0
        self._cpu_deadline = float("inf")
        self._refusal: str | None = None
        self._builtins = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        self._builtins.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_LENGTH)
        self._guard()

    def _guard(self) -> None:
        c = self.conn
        c.execute("PRAGMA max_page_count = 4096")  # 16 MiB at the default 4 KiB pages
        c.execute("PRAGMA temp.max_page_count = 4096")  # CREATE TEMP TABLE too
        c.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_LENGTH)
        c.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, 100_000)
        c.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        c.setlimit(sqlite3.SQLITE_LIMIT_COLUMN, 500)
        c.setlimit(sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, 1_000)
        for name in DENIED_FUNCTIONS:
            c.create_function(name, -1, self._refuse_function(name))
        for name, n_args in _GUARDED_FUNCTIONS.items():
            c.create_function(name, n_args, self._guarded_function(name), deterministic=True)
        c.set_authorizer(self._authorize)
        c.set_progress_handler(self._progress, VM_STEPS_PER_CHECK)

    def _refuse_function(self, name: str):
        def refuse(*_args):
            self._refusal = f"not authorized: the function {name}() is not available in this database"
            raise ValueError(self._refusal)
        return refuse

    def _guarded_function(self, name: str):
        def call(*args):
            self._refusal = _check_call(name, args)
            if self._refusal is not None:
                raise ValueError(self._refusal)
            try:
                return self._builtins.execute(f"SELECT {name}({', '.join('?' * len(args))})", args).fetchone()[0]
            except sqlite3.Error as e:  # e.g. "string or blob too big": the statement's error, not a bare
                self._refusal = str(e)  # "user-defined function raised exception"
                raise
        return call

    def _authorize(self, action: int, arg1, arg2, dbname, source) -> int:
        if action in (sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH):
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_PRAGMA:
            name = (arg1 or "").lower()
            if name in _TABLE_PRAGMAS or (name in _READ_PRAGMAS and arg2 is None):
                return sqlite3.SQLITE_OK
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in DENIED_FUNCTIONS:
            self._refusal = f"not authorized: the function {arg2.lower()}() is not available in this database"
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_CREATE_VTABLE:
            self._refusal = f"not authorized: virtual tables ({arg2}) are not available in this database"
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    def _progress(self) -> int:
        self._checks += 1
        return 1 if self._checks > MAX_CHECKS or time.thread_time() > self._cpu_deadline else 0

    def run(self, statement: str) -> tuple[list[tuple] | None, str | None, bool]:
        """Execute one statement: (rows, error message, truncated). Never raises."""
        self._checks = 0
        self._refusal = None
        self._cpu_deadline = time.thread_time() + STATEMENT_CPU_S
        try:
            cur = self.conn.execute(statement)
            rows = cur.fetchmany(MAX_ROWS + 1)
        except sqlite3.OperationalError as e:
            if str(e) == "interrupted":
                return None, ("the statement was stopped: it ran longer than this environment allows "
                              "(e.g. a recursive query without an end)"), False
            return None, self._explain(str(e)), False
        except (sqlite3.Error, sqlite3.Warning, ValueError, OverflowError, MemoryError) as e:
            return None, self._explain(str(e) or type(e).__name__), False
        finally:
            self._cpu_deadline = float("inf")
        return rows[:MAX_ROWS], None, len(rows) > MAX_ROWS

    def _explain(self, msg: str) -> str:
        if self._refusal is not None and (msg.startswith("not authorized") or msg == "authorization denied"
                                          or "user-defined function raised exception" in msg):
            return self._refusal
        if msg in ("not authorized", "authorization denied"):
            return ("not authorized: this database refuses ATTACH/DETACH, VACUUM INTO, extension loading and "
                    "PRAGMAs that change settings")
        return echoed(msg, OBSERVATION_LIMIT)

    def table_state(self, names: list[str]) -> dict[str, Any]:
        """Each table's columns and rows as a multiset (normalised), for grading."""
        out: dict[str, Any] = {}
        self.conn.set_progress_handler(None, 0)
        try:
            for name in names:
                try:
                    cur = self.conn.execute(f"SELECT * FROM {quote_ident(name)}")
                    rows = cur.fetchall()
                    cols = tuple(d[0] for d in cur.description)
                    out[name] = (cols, Counter(tuple(round(v, 6) if type(v) is float else v for v in r)
                                               for r in rows))
                except sqlite3.Error:
                    out[name] = None
        finally:
            self.conn.set_progress_handler(self._progress, VM_STEPS_PER_CHECK)
        return out

    def __deepcopy__(self, memo) -> "SafeDB":
        """A copy of what this connection sees. Inside an open transaction (the agent ran BEGIN)
        an sqlite backup would wait forever, so the copy is made by serializing; the copy then
        holds the uncommitted changes as committed ones."""
        dst = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        self.conn.set_progress_handler(None, 0)
        try:
            if self.conn.in_transaction:
                dst.deserialize(self.conn.serialize())
            else:
                self.conn.backup(dst)
        finally:
            self.conn.set_progress_handler(self._progress, VM_STEPS_PER_CHECK)
        return SafeDB(_conn=dst)

    def close(self) -> None:
        self.conn.close()
        self._builtins.close()


_TEMPLATES: dict[int, tuple[list, sqlite3.Connection]] = {}
_TEMPLATE_CACHE_SIZE = 2048


def _build(tables: list[dict[str, Any]]) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    for t in tables:
        cols = ", ".join(f"{quote_ident(c['name'])} {c.get('type', '')}".rstrip() for c in t["columns"])
        conn.execute(f"CREATE TABLE {quote_ident(t['name'])} ({cols})")
        if t["rows"]:
            marks = ", ".join("?" * len(t["columns"]))
            conn.executemany(f"INSERT INTO {quote_ident(t['name'])} VALUES ({marks})", [tuple(r) for r in t["rows"]])
    return conn


def _template(tables: list[dict[str, Any]]) -> sqlite3.Connection:
    """A pristine database for `tables`, built once per tables object and copied per episode
    (an sqlite backup is several times faster than CREATE + INSERT)."""
    hit = _TEMPLATES.get(id(tables))
    if hit is not None and hit[0] is tables:
        return hit[1]
    conn = _build(tables)
    if len(_TEMPLATES) >= _TEMPLATE_CACHE_SIZE:
        _, old = _TEMPLATES.pop(next(iter(_TEMPLATES)))
        old.close()
    _TEMPLATES[id(tables)] = (tables, conn)
    return conn


def format_rows(rows: list[tuple] | None, error: str | None, truncated: bool) -> str:
    if error is not None:
        return f"Error: {error}"
    text = repr(rows)
    if len(text) > OBSERVATION_LIMIT or truncated:
        total = f"more than {MAX_ROWS}" if truncated else str(len(rows))
        note = f" ... [truncated because the output is too long; {total} rows in all]"
        text = text[: min(len(text) - 1, OBSERVATION_LIMIT - len(note))] + note
    return text


# =========================================================================== grading (AgentBench rules)

_SPECIAL = {"none": "0", "null": "0", "undefined": "0", "nan": "0", "inf": "0", "infinity": "0",
            "-inf": "0", "-infinity": "0", "": "0"}


def _normalise_value(value) -> str:
    if value is None:
        return "0"
    s = str(value).strip()
    if s.endswith("%"):
        s = s[:-1].strip()
    if "," in s and not (s.startswith("[") and s.endswith("]")):
        s = s.replace(",", "")
    return _SPECIAL.get(s.lower(), s)


def parse_answer_list(text) -> list[str]:
    """An agent's answer (`["a", 2]`, `[(2,)]`, `a, b` or `42`) -> normalised value strings."""
    if isinstance(text, (list, tuple)):
        items = list(text)
    else:
        s = str(text).strip()
        if s.startswith("[") and s.endswith("]"):
            try:
                parsed = json.loads(s)  # the common case, and much faster than literal_eval
            except (ValueError, RecursionError):
                try:
                    parsed = ast.literal_eval(s)
                except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                    parsed = _split_outside_quotes(s[1:-1])
            items = list(parsed) if isinstance(parsed, (list, tuple)) else [parsed]
        else:
            items = [s]
    out = []
    for item in items:
        if isinstance(item, tuple) and len(item) == 1:
            item = item[0]
        out.append(_normalise_value(str(item).strip().strip("'\"")))
    return out


def _split_outside_quotes(s: str) -> list[str]:
    items, cur, quote = [], [], None
    for ch in s:
        if ch in "\"'" and (quote is None or quote == ch):
            quote = None if quote == ch else ch
        elif ch == "," and quote is None:
            items.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if cur or items:
        items.append("".join(cur).strip())
    return items


def _is_float(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False


def answers_match(answer_values: list[str], label_values: list[str]) -> bool:
    """AgentBench's SELECT comparison on normalised values."""
    if len(answer_values) == 1 and len(label_values) == 1:
        a, g = answer_values[0], label_values[0]
        if _is_float(a) and _is_float(g):
            return abs(float(a) - float(g)) <= 1e-2
        return a == g
    if all(_is_float(x) for x in answer_values) and all(_is_float(x) for x in label_values):
        if len(answer_values) != len(label_values):
            return False
        remaining = [float(g) for g in label_values]
        for a in answer_values:
            hit = next((i for i, g in enumerate(remaining) if abs(float(a) - g) <= 1e-2), None)
            if hit is None:
                return False
            remaining.pop(hit)
        return True
    return set(answer_values) == set(label_values)


def format_answer(values: list) -> str:
    """The answer list the way AgentBench agents write it: ["a", 2]."""
    return "[" + ", ".join(json.dumps(v, ensure_ascii=False) if not isinstance(v, float) else repr(v)
                           for v in values) + "]"


# =========================================================================== environment


class DBEnv(Env):
    domain = "db"
    max_turns = 8
    intro = INTRO

    def _setup(self, task: Task) -> None:
        self.db = SafeDB(task.spec["tables"])
        self.executed: list[str] = []
        self.last_error: str | None = None
        self._expected: dict[str, Any] | None = None
        self._current: tuple[int, dict[str, Any]] | None = None

    def _execute(self, action) -> str:
        statement = action.arg.strip()
        if not statement:
            raise InvalidAction("The SQL block is empty. Write one SQL statement in the ```sql block.")
        self.executed.append(statement)
        rows, error, truncated = self.db.run(statement)
        self.last_error = error
        return format_rows(rows, error, truncated)

    # ------------------------------------------------------------------ checker
    def expected_state(self) -> dict[str, Any]:
        """The tables after the reference SQL ran on a fresh copy of the start database."""
        if self._expected is None:
            self._expected = expected_state(self.task.spec)
        return self._expected

    def current_state(self) -> dict[str, Any]:
        """The tables now (cached until the agent runs another statement)."""
        if self._current is None or self._current[0] != len(self.executed):
            names = [t["name"] for t in self.task.spec["tables"]]
            self._current = (len(self.executed), self.db.table_state(names))
        return self._current[1]

    def table_matches(self) -> bool:
        return self.current_state() == self.expected_state()

    def _score(self, answer_text: str | None) -> float:
        spec = self.task.spec
        if spec["type"] in MUTATION_TYPES:
            return float(self.table_matches())
        if answer_text is None:
            return 0.0
        return float(answers_match(parse_answer_list(answer_text), parse_answer_list(spec["label"])))

    # ------------------------------------------------------------------ expert
    def expert_action(self) -> str:
        spec = self.task.spec
        ref = spec.get("reference_sql")
        if spec["type"] in MUTATION_TYPES:
            plan = self._plan_thought(f"I will run the {spec['type']} statement the task asks for.")
            if not self.executed:  # from the start state the reference statement is the plan
                return expert_turn(plan, sql(ref))
            if self.table_matches():
                return expert_turn(spec.get("final_think") or "The change is done, so I commit my answer.",
                                   answer('["none"]'))
            if ref not in self.executed:
                return expert_turn(plan, sql(ref))
            think, statement = self._repair()
            return expert_turn(think, sql(statement))
        if ref and ref not in self.executed:
            return expert_turn(self._plan_thought("I will query the table for the answer."), sql(ref))
        if not ref:
            look = f"SELECT * FROM {quote_ident(spec['tables'][0]['name'])} LIMIT 3"
            if look not in self.executed:
                return expert_turn("I first look at a few rows to see the table's values.", sql(look))
        return expert_turn(spec.get("final_think") or "I have the answer.", answer(format_answer(spec["label"])))

    def _plan_thought(self, default: str) -> str:
        """The thought before the reference statement; after the reference failed for want of quotes
        (`typical_mistake`), one that reads the error and says why the names are now quoted."""
        ref = self.task.spec.get("reference_sql")
        if self.executed and self.last_error and ref and self.executed[-1] == unquoted(ref) != ref.strip():
            return (f"The query failed with \"{echoed(self.last_error)}\": the table and column names have spaces, "
                    "punctuation or digits, so I quote every name with backticks and run it again.")
        return self.task.spec.get("think") or default

    def typical_mistake(self, due: str, rng: random.Random) -> str | None:
        """The expert's `due` statement with its names' backtick quotes left out, when SQLite then refuses it
        (`near "-": syntax error`): the slip models make on AgentBench's tables. None otherwise."""
        parsed = parse_step(due, self.domain)
        if isinstance(parsed, ParseError) or parsed[1].kind != "sql":
            return None
        bare = unquoted(parsed[1].arg)
        if bare == parsed[1].arg.strip():
            return None
        trial = copy.deepcopy(self.db)
        try:
            _, error, _ = trial.run(bare)
        finally:
            trial.close()
        return expert_turn("I will query the table for the answer.", sql(bare)) if error else None

    def _repair(self) -> tuple[str, str]:
        """From a perturbed state: rewrite the first table that differs (delete, then insert)."""
        spec = self.task.spec
        expected = self.expected_state()
        current = self.current_state()
        for t in spec["tables"]:
            name = t["name"]
            if current[name] == expected[name]:
                continue
            if current[name] is None or current[name][0] != expected[name][0]:
                cols = ", ".join(quote_ident(c) for c in expected[name][0])
                if current[name] is not None:
                    return "The table's columns changed, so I drop it to rebuild it.", f"DROP TABLE {quote_ident(name)}"
                return "The table is missing, so I create it again.", f"CREATE TABLE {quote_ident(name)} ({cols})"
            if sum(current[name][1].values()):
                return f"{name} does not match the required result, so I clear it and refill it.", \
                    f"DELETE FROM {quote_ident(name)}"
            rows = list(expected[name][1].elements())
            values = ", ".join("(" + ", ".join(sql_literal(v) for v in r) + ")" for r in rows)
            return f"I refill {name} with the rows it must contain.", f"INSERT INTO {quote_ident(name)} VALUES {values}"
        return "The tables already match.", "SELECT 1"

    def random_action(self, rng: random.Random) -> str:
        spec = self.task.spec
        t = rng.choice(spec["tables"])
        name = quote_ident(t["name"])
        cols = [c["name"] for c in t["columns"]]
        col = quote_ident(rng.choice(cols))
        cell = sql_literal(rng.choice(rng.choice(t["rows"]))) if t["rows"] else "1"
        if rng.random() < 0.2:
            r = rng.random()
            value = (rng.choice(rng.choice(t["rows"])) if t["rows"] and r < 0.4 else
                     rng.randint(0, 300) if r < 0.8 else "none")
            return expert_turn("I will guess.", answer(format_answer([value])))
        statements = [
            f"SELECT * FROM {name}", f"SELECT COUNT(*) FROM {name}", f"SELECT {col} FROM {name} WHERE {col} = {cell}",
            f"SELECT MAX({col}) FROM {name}", f"SELECT {col}, COUNT(*) FROM {name} GROUP BY {col}",
            f"UPDATE {name} SET {col} = {cell} WHERE {quote_ident(rng.choice(cols))} = {cell}",
            f"DELETE FROM {name} WHERE {col} = {cell}",
            f"INSERT INTO {name} ({col}) VALUES ({cell})", f"SELECT * FROM {name} ORDER BY {col} DESC LIMIT 1",
        ]
        return expert_turn("I will try a query.", sql(rng.choice(statements)))


_EXPECTED: dict[int, tuple[dict, dict]] = {}


def expected_state(spec: dict[str, Any]) -> dict[str, Any]:
    """Run a task's reference SQL on a fresh database; the resulting tables (cached per spec)."""
    hit = _EXPECTED.get(id(spec))
    if hit is not None and hit[0] is spec:
        return hit[1]
    ref = SafeDB(spec["tables"])
    try:
        _, error, _ = ref.run(spec["reference_sql"])
        if error:
            raise ValueError(f"the task's reference SQL fails: {error}: {spec['reference_sql']}")
        state = ref.table_state([t["name"] for t in spec["tables"]])
    finally:
        ref.close()
    if len(_EXPECTED) >= _TEMPLATE_CACHE_SIZE:
        _EXPECTED.pop(next(iter(_EXPECTED)))
    _EXPECTED[id(spec)] = (spec, state)
    return state


def unquoted(statement: str) -> str:
    """`statement` with its backtick quotes left out (what a model that does not quote names writes)."""
    return statement.strip().replace("`", "")


def sql_literal(v) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, (int, float)):
        return repr(v)
    return "'" + str(v).replace("'", "''") + "'"


# =========================================================================== AgentBench importer


def table_description(tables: list[dict[str, Any]]) -> str:
    """AgentBench's wording for the tables of a task (names and headers)."""
    if len(tables) == 1:
        t = tables[0]
        return (f"The name of this table is {t['name']}, and the headers of this table are "
                f"{','.join(c['name'] for c in t['columns'])}.")
    ordinals = ("1st", "2nd", "3rd") + tuple(f"{i}th" for i in range(4, 20))
    parts = [f"There are {len(tables)} tables involved with this task."]
    for i, t in enumerate(tables):
        parts.append(f"The name of the {ordinals[i]} table is {t['name']}, and the headers of this table are "
                     f"{','.join(c['name'] for c in t['columns'])}.")
    return " ".join(parts)


def load_agentbench_db(path: str | Path) -> list[Task]:
    """Import AgentBench dbbench JSONL tasks (e.g. data/dbbench/dev.jsonl) as DB tasks.

    SELECT-type tasks are graded against their `label` (the answer from the source QA
    dataset); their `sql.query` field is often malformed and is deliberately not used.
    INSERT / UPDATE / DELETE tasks are graded by running their `label` SQL on a fresh copy.
    Raises ValueError naming the line for a row that cannot be imported."""
    tasks = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                tasks.append(_import_row(row, f"agentbench_db/{Path(path).stem}/{lineno - 1}"))
            except (KeyError, TypeError, ValueError, json.JSONDecodeError) as e:
                raise ValueError(f"{path}:{lineno}: cannot import this dbbench row: {e}") from e
    return tasks


def _import_row(row: dict[str, Any], task_id: str) -> Task:
    raw_tables = row["table"] if isinstance(row["table"], list) else [row["table"]]
    tables = []
    for t in raw_tables:
        cols = [{"name": c["name"], "type": c.get("type", "TEXT")} for c in t["table_info"]["columns"]]
        rows = [list(r) for r in t["table_info"]["rows"]]
        for r in rows:
            if len(r) != len(cols):
                raise ValueError(f"table {t['table_name']!r} has a row with {len(r)} values for {len(cols)} columns")
        tables.append({"name": t["table_name"], "columns": cols, "rows": rows})
    qtype = row["type"][0] if isinstance(row["type"], list) else row["type"]
    kind = qtype.upper() if qtype.upper() in MUTATION_TYPES else qtype
    label = row["label"]
    if not isinstance(label, list):
        label = [label]
    spec: dict[str, Any] = {"tables": tables, "type": kind, "label": label, "source": "agentbench"}
    if kind in MUTATION_TYPES:
        if len(label) != 1 or not isinstance(label[0], str):
            raise ValueError(f"a {kind} task needs exactly one reference SQL statement in 'label'")
        spec["reference_sql"] = label[0]
        spec["think"] = f"The task asks for a change to the table, so I write the {kind} statement."
    description = row.get("add_description") or table_description(tables)
    return Task(
        id=task_id,
        domain="db",
        instruction=f"{row['description']}\n{description}",
        spec=spec,
        answer=label if kind not in MUTATION_TYPES else None,
        difficulty="real",
        meta={"source": "agentbench", "type": kind, "origin": row.get("source", "")},
    )


# =========================================================================== task generation


@dataclass(frozen=True)
class Schema:
    """A table family: names, categorical columns (with how a question says them) and numbers."""

    table: str
    spaced: str
    plural: str
    key: str
    cats: dict[str, tuple[tuple[str, ...], str]]
    """column -> (values, phrase with {v}: 'work in the {v} department')."""
    nums: dict[str, tuple[int, int, str, str]]
    """column -> (low, high, 'int' | 'real', noun phrase)."""
    extra: tuple[str, str, str, tuple[str, ...], str]
    """(categorical column it describes, table, attribute column, attribute values, phrase with {v})."""


PEOPLE = ("Alice", "Bruno", "Chen", "Dana", "Emeka", "Farah", "Goran", "Hana", "Ivo", "Jana", "Kofi", "Lena",
          "Mateo", "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tariq", "Uma", "Viktor", "Wen", "Yara",
          "Zane", "Aiko", "Bela", "Cyrus", "Dara", "Elif", "Femi", "Gita")
PRODUCTS = ("Lamp", "Kettle", "Stool", "Mirror", "Blender", "Heater", "Router", "Speaker", "Backpack", "Tent",
            "Helmet", "Camera", "Monitor", "Printer", "Scanner", "Drill", "Toaster", "Fan", "Clock", "Jacket",
            "Boots", "Scarf", "Mug", "Pillow", "Blanket", "Rug", "Shelf", "Desk", "Chair", "Sofa")
TITLES = ("Silent River", "Glass Garden", "Iron Coast", "Paper Moon", "Salt Road", "Cold Harbor", "Red Orchard",
          "Blue Desert", "Lost Signal", "Night Train", "Open Field", "Last Winter", "Quiet Storm", "Far Lights",
          "Stone Bridge", "Green Hour", "Dark Water", "White Valley", "Old Tower", "New Dawn", "Wild Shore",
          "Deep Forest", "High Tide", "Long Shadow", "Bright Path", "Hidden Lake", "Broken Clock", "Golden Gate")
CITIES = ("Arden", "Belmont", "Corvo", "Dunmore", "Elvira", "Fenwick", "Galway", "Hollis", "Ilford", "Jarrow",
          "Kelso", "Lorne", "Marlow", "Norwood", "Oakley", "Pembury", "Quarry", "Rydal", "Selby", "Torbay",
          "Ulverston", "Vance", "Wexley", "Yarrow", "Zennor", "Ashby", "Brora", "Calder")

SCHEMAS = (
    Schema("employees", "Employee Records", "employees", "name",
           {"department": (("Sales", "Engineering", "Support", "Finance", "Legal"), "work in the {v} department"),
            "city": (("Arden", "Belmont", "Corvo", "Dunmore"), "live in {v}")},
           {"salary": (30_000, 150_000, "int", "salary"), "age": (21, 64, "int", "age")},
           ("department", "departments", "manager", PEOPLE[:8], "is managed by {v}")),
    Schema("products", "Product Catalog", "products", "name",
           {"category": (("Home", "Garden", "Outdoor", "Office", "Kitchen"), "are in the {v} category"),
            "supplier": (("Acme", "Globex", "Initech", "Umbrella"), "are supplied by {v}")},
           {"price": (5, 500, "real", "price"), "stock": (0, 250, "int", "stock")},
           ("supplier", "suppliers", "country", ("Norway", "Chile", "Kenya", "Japan"), "is based in {v}")),
    Schema("students", "Student Roster", "students", "name",
           {"major": (("Biology", "History", "Physics", "Economics", "Music"), "major in {v}"),
            "campus": (("North", "South", "East"), "study on the {v} campus")},
           {"gpa": (20, 40, "real10", "GPA"), "credits": (10, 160, "int", "credits")},
           ("major", "majors", "faculty", ("Science", "Arts", "Social Sciences"), "belongs to the {v} faculty")),
    Schema("books", "Library Books", "books", "title",
           {"genre": (("Mystery", "Fantasy", "Biography", "Poetry", "Science"), "are in the {v} genre"),
            "publisher": (("Penfold", "Northstar", "Quill", "Harbor"), "are published by {v}")},
           {"pages": (80, 900, "int", "page count"), "year": (1950, 2023, "int", "publication year")},
           ("publisher", "publishers", "city", CITIES[:5], "is located in {v}")),
    Schema("cities", "City Statistics", "cities", "name",
           {"country": (("Avalon", "Borduria", "Carpania", "Dorne"), "are in {v}"),
            "climate": (("dry", "humid", "cold", "mild"), "have a {v} climate")},
           {"population": (5_000, 900_000, "int", "population"), "area": (20, 900, "real", "area")},
           ("country", "countries", "continent", ("Europa", "Austral", "Borealis"), "is on the continent {v}")),
)


class _Reject(Exception):
    """A candidate task failed verification (empty or tied answer...); generate another."""


def _make_table(rng: random.Random, schema: Schema, n: int, spaced: bool) -> dict[str, Any]:
    keys = {"name": PEOPLE if schema.table in ("employees", "students") else
            PRODUCTS if schema.table == "products" else CITIES, "title": TITLES}[schema.key]
    names = rng.sample(keys, min(n, len(keys)))
    cols = [{"name": "id", "type": "INTEGER"}, {"name": schema.key, "type": "TEXT"}]
    cols += [{"name": c, "type": "TEXT"} for c in schema.cats]
    cols += [{"name": c, "type": "REAL" if kind.startswith("real") else "INTEGER"}
             for c, (_, _, kind, _) in schema.nums.items()]
    rows = []
    for i, key in enumerate(names, 1):
        row = [i, key] + [rng.choice(vals) for vals, _ in schema.cats.values()]
        row += [_num_value(rng, spec) for spec in schema.nums.values()]
        rows.append(row)
    return {"name": schema.spaced if spaced else schema.table, "columns": cols, "rows": rows}


def _num_value(rng: random.Random, spec: tuple[int, int, str, str]) -> int | float:
    lo, hi, kind, _ = spec
    if kind == "int":
        return rng.randint(lo, hi)
    if kind == "real10":
        return rng.randint(lo, hi) / 10
    return round(rng.uniform(lo, hi), 2)


def _extra_table(rng: random.Random, schema: Schema, main: dict[str, Any]) -> dict[str, Any]:
    cat, tname, attr, values, _ = schema.extra
    idx = [c["name"] for c in main["columns"]].index(cat)
    names = sorted({r[idx] for r in main["rows"]} | set(schema.cats[cat][0][:2]))
    return {"name": tname, "columns": [{"name": "name", "type": "TEXT"}, {"name": attr, "type": "TEXT"}],
            "rows": [[n, rng.choice(values)] for n in names]}


class _Ctx:
    """What a question template needs: the table, its quoted name and value pickers."""

    def __init__(self, rng: random.Random, schema: Schema, table: dict[str, Any]):
        self.rng, self.s, self.t = rng, schema, table
        self.q = f"`{table['name']}`" if " " in table["name"] else table["name"]
        self.cols = [c["name"] for c in table["columns"]]

    def col(self, name: str) -> list:
        i = self.cols.index(name)
        return [r[i] for r in self.t["rows"]]

    def cat(self) -> tuple[str, str, str]:
        """(column, present value, phrase)."""
        c = self.rng.choice(list(self.s.cats))
        v = self.rng.choice(self.col(c))
        return c, v, self.s.cats[c][1].format(v=v)

    def num(self) -> tuple[str, str, str]:
        c = self.rng.choice(list(self.s.nums))
        return c, self.s.nums[c][3], self.s.nums[c][2]

    def threshold(self, c: str) -> float | int:
        vals = sorted(self.col(c))
        return vals[self.rng.randint(len(vals) // 4, max(len(vals) // 4, 3 * len(vals) // 4 - 1))]


def _g_counting(x: _Ctx, difficulty: str):
    c, v, phrase = x.cat()
    if difficulty == "easy":
        return f"How many {x.s.plural} {phrase}?", f"SELECT COUNT(*) FROM {x.q} WHERE {c} = '{v}'"
    n, noun, _ = x.num()
    t = x.threshold(n)
    if difficulty == "medium":
        return (f"How many {x.s.plural} {phrase} and have a {noun} above {t}?",
                f"SELECT COUNT(*) FROM {x.q} WHERE {c} = '{v}' AND {n} > {t}")
    other = next(k for k in x.s.cats if k != c)
    return (f"How many different {other} values do the {x.s.plural} that {phrase} have?",
            f"SELECT COUNT(DISTINCT {other}) FROM {x.q} WHERE {c} = '{v}'")


def _g_comparison(x: _Ctx, difficulty: str):
    n, noun, _ = x.num()
    t = x.threshold(n)
    key = x.s.key
    if difficulty == "easy":
        return (f"Which {x.s.plural} have a {noun} greater than {t}? Give their {key}s.",
                f"SELECT {key} FROM {x.q} WHERE {n} > {t}")
    c, v, phrase = x.cat()
    if difficulty == "medium":
        return (f"Which {x.s.plural} {phrase} and have a {noun} below {t}? Give their {key}s.",
                f"SELECT {key} FROM {x.q} WHERE {c} = '{v}' AND {n} < {t}")
    return (f"Which {x.s.plural} that {phrase} have a {noun} above the average {noun} of all {x.s.plural}? "
            f"Give their {key}s.",
            f"SELECT {key} FROM {x.q} WHERE {c} = '{v}' AND {n} > (SELECT AVG({n}) FROM {x.q})")


def _g_ranking(x: _Ctx, difficulty: str):
    n, noun, _ = x.num()
    key = x.s.key
    high = x.rng.random() < 0.5
    word, order = ("highest", "DESC") if high else ("lowest", "ASC")
    if difficulty == "easy":
        return (f"Which {x.s.plural[:-1]} has the {word} {noun}? Give its {key}.",
                f"SELECT {key} FROM {x.q} ORDER BY {n} {order} LIMIT 1", ("unique", x.q, n, "", order))
    c, v, phrase = x.cat()
    if difficulty == "medium":
        return (f"Among the {x.s.plural} that {phrase}, which one has the {word} {noun}? Give its {key}.",
                f"SELECT {key} FROM {x.q} WHERE {c} = '{v}' ORDER BY {n} {order} LIMIT 1",
                ("unique", x.q, n, f" WHERE {c} = '{v}'", order))
    c = x.rng.choice(list(x.s.cats))
    most = "most" if high else "fewest"
    return (f"Which {c} value has the {most} {x.s.plural}?",
            f"SELECT {c} FROM {x.q} GROUP BY {c} ORDER BY COUNT(*) {order} LIMIT 1",
            ("unique", x.q, "COUNT(*)", f" GROUP BY {c}", order))


def _g_aggregation(x: _Ctx, difficulty: str, fn: str):
    n, noun, _ = x.num()
    word = {"SUM": "total", "MAX": "highest", "MIN": "lowest", "AVG": "average"}[fn]
    if difficulty == "easy":
        return f"What is the {word} {noun} of all {x.s.plural}?", f"SELECT {fn}({n}) FROM {x.q}"
    c, v, phrase = x.cat()
    if difficulty == "medium":
        return (f"What is the {word} {noun} of the {x.s.plural} that {phrase}?",
                f"SELECT {fn}({n}) FROM {x.q} WHERE {c} = '{v}'")
    cat, tname, attr, values, ephrase = x.s.extra
    av = x.rng.choice(values)
    return (f"What is the {word} {noun} of the {x.s.plural} whose {cat} {ephrase.format(v=av)}?",
            f"SELECT {fn}(T1.{n}) FROM {x.q} AS T1 JOIN {tname} AS T2 ON T1.{cat} = T2.name "
            f"WHERE T2.{attr} = '{av}'")


def _g_other(x: _Ctx, difficulty: str):
    key = x.s.key
    who = x.rng.choice(x.col(key))
    if difficulty == "easy":
        n, noun, _ = x.num()
        return f"What is the {noun} of the {x.s.plural[:-1]} with {key} {who}?", \
            f"SELECT {n} FROM {x.q} WHERE {key} = '{who}'"
    if difficulty == "medium":
        c = x.rng.choice(list(x.s.cats))
        n, noun, _ = x.num()
        return (f"What are the {c} and the {noun} of the {x.s.plural[:-1]} with {key} {who}?",
                f"SELECT {c}, {n} FROM {x.q} WHERE {key} = '{who}'")
    cat, tname, attr, _, _ = x.s.extra
    return (f"What is the {attr} of the {cat} of the {x.s.plural[:-1]} with {key} {who}?",
            f"SELECT T2.{attr} FROM {x.q} AS T1 JOIN {tname} AS T2 ON T1.{cat} = T2.name WHERE T1.{key} = '{who}'")


def _g_insert(x: _Ctx, difficulty: str):
    pool = {"name": PEOPLE if x.s.table in ("employees", "students") else
            PRODUCTS if x.s.table == "products" else CITIES, "title": TITLES}[x.s.key]
    fresh = [k for k in pool if k not in x.col(x.s.key)]
    key = x.rng.choice(fresh) if fresh else f"{pool[0]} II"
    new_id = max(x.col("id")) + 1
    values: dict[str, Any] = {"id": new_id, x.s.key: key}
    for c, (vals, _) in x.s.cats.items():
        values[c] = x.rng.choice(vals)
    for c, spec in x.s.nums.items():
        values[c] = _num_value(x.rng, spec)
    cols = list(values) if difficulty != "easy" else x.cols
    desc = ", ".join(f"{c} {values[c]}" for c in cols)
    lits = ", ".join(sql_literal(values[c]) for c in cols)
    return (f"Insert a new record into the {x.t['name']} table with {desc}.",
            f"INSERT INTO {x.q} ({', '.join(cols)}) VALUES ({lits})")


def _g_update(x: _Ctx, difficulty: str):
    key = x.s.key
    n, noun, kind = x.num()
    if difficulty == "easy":
        who = x.rng.choice(x.col(key))
        new = _num_value(x.rng, x.s.nums[n])
        return (f"Set the {noun} of the {x.s.plural[:-1]} with {key} {who} to {new}.",
                f"UPDATE {x.q} SET {n} = {new} WHERE {key} = '{who}'")
    c, v, phrase = x.cat()
    if difficulty == "medium":
        delta = x.rng.choice((1, 2, 5, 10, 100)) if kind == "int" else 1
        return (f"Increase the {noun} of every one of the {x.s.plural} that {phrase} by {delta}.",
                f"UPDATE {x.q} SET {n} = {n} + {delta} WHERE {c} = '{v}'")
    other = next(k for k in x.s.cats if k != c)
    newv = x.rng.choice([val for val in x.s.cats[other][0]])
    return (f"For the {x.s.plural} that {phrase} and whose {noun} is below the average {noun} of all "
            f"{x.s.plural}, set {other} to {newv}.",
            f"UPDATE {x.q} SET {other} = '{newv}' WHERE {c} = '{v}' AND {n} < (SELECT AVG({n}) FROM {x.q})")


def _g_delete(x: _Ctx, difficulty: str):
    n, noun, _ = x.num()
    t = x.threshold(n)
    if difficulty == "easy":
        return f"Delete the {x.s.plural} whose {noun} is below {t}.", f"DELETE FROM {x.q} WHERE {n} < {t}"
    c, v, phrase = x.cat()
    if difficulty == "medium":
        return (f"Delete the {x.s.plural} that {phrase} and have a {noun} above {t}.",
                f"DELETE FROM {x.q} WHERE {c} = '{v}' AND {n} > {t}")
    cat, tname, attr, values, ephrase = x.s.extra
    av = x.rng.choice(values)
    return (f"Delete the {x.s.plural} whose {cat} {ephrase.format(v=av)}.",
            f"DELETE FROM {x.q} WHERE {cat} IN (SELECT name FROM {tname} WHERE {attr} = '{av}')")


CATEGORIES = ("counting", "comparison", "ranking", "aggregation-SUM", "aggregation-MAX", "aggregation-MIN",
              "aggregation-AVG", "other", "INSERT", "UPDATE", "DELETE")
_THINK = {
    "counting": "I need to count matching rows, so I use COUNT(*) with the right condition.",
    "comparison": "I need the rows that pass the comparison, so I filter with WHERE and select the names.",
    "ranking": "I need the top row by the measure, so I order by it and take the first row.",
    "aggregation": "I need an aggregate value, so I apply {fn} to the column over the matching rows.",
    "other": "I need the value stored for this row, so I select it by its key.",
    "INSERT": "The task asks me to add a row, so I write an INSERT with every given value.",
    "UPDATE": "The task asks me to change values, so I write an UPDATE with the right condition.",
    "DELETE": "The task asks me to remove rows, so I write a DELETE with the right condition.",
}


def _verify(db: SafeDB, statement: str, check) -> list:
    rows, error, _ = db.run(statement)
    if error:
        raise ValueError(f"generated SQL fails: {error}: {statement}")
    values = [v for r in rows for v in r]
    if not values or any(v is None for v in values) or len(values) > 12:
        raise _Reject
    if check is not None:  # ("unique", table, measure, condition, order): the top value must not be tied
        _, table, measure, cond, order = check
        ranked, _, _ = db.run(f"SELECT {measure} FROM {table}{cond} ORDER BY 1 {order} LIMIT 2")
        if len(ranked) > 1 and ranked[0][0] == ranked[1][0]:
            raise _Reject
    return values


def generate(rng: random.Random, difficulty: str, index: int) -> Task:
    category = CATEGORIES[index % len(CATEGORIES)]  # cycle: every AgentBench category equally often
    for _ in range(200):
        schema = rng.choice(SCHEMAS)
        n_rows = {"easy": rng.randint(6, 10), "medium": rng.randint(10, 16), "hard": rng.randint(14, 22)}[difficulty]
        table = _make_table(rng, schema, n_rows, spaced=difficulty != "easy" and rng.random() < 0.3)
        tables = [table]
        needs_extra = difficulty == "hard" and category in ("aggregation-SUM", "aggregation-MAX", "aggregation-MIN",
                                                            "aggregation-AVG", "other", "DELETE")
        if needs_extra:
            tables.append(_extra_table(rng, schema, table))
        x = _Ctx(rng, schema, table)
        check = None
        if category.startswith("aggregation"):
            fn = category.split("-")[1]
            question, ref = _g_aggregation(x, difficulty, fn)
        else:
            made = {"counting": _g_counting, "comparison": _g_comparison, "ranking": _g_ranking,
                    "other": _g_other, "INSERT": _g_insert, "UPDATE": _g_update, "DELETE": _g_delete}[category](
                x, difficulty)
            question, ref = made[0], made[1]
            check = made[2] if len(made) > 2 else None
        db = SafeDB(tables, cache=False)
        try:
            if category in MUTATION_TYPES:
                before = db.table_state([t["name"] for t in tables])
                _, error, _ = db.run(ref)
                if error:
                    raise ValueError(f"generated SQL fails: {error}: {ref}")
                after = db.table_state([t["name"] for t in tables])
                if before == after or sum(after[table["name"]][1].values()) == 0:
                    continue  # a change task must change something and leave rows behind
                label = None
            else:
                try:
                    label = _verify(db, ref, check)
                except _Reject:
                    continue
        finally:
            db.close()
        think = _THINK["aggregation"].format(fn=category.split("-")[1]) if category.startswith("aggregation") \
            else _THINK[category]
        if label is not None:
            shown = ", ".join(str(v) for v in label)
            final = f"The query returned {shown}, so that is the answer."
        else:
            final = "The statement ran without error, so the change is done and I commit my answer."
        spec = {"tables": tables, "type": category, "label": label if label is not None else [],
                "reference_sql": ref, "source": "generated", "think": think, "final_think": final}
        return Task(
            id=f"db-{difficulty}-{index:05d}-{rng.getrandbits(32):08x}",
            domain="db",
            instruction=f"{question}\n{table_description(tables)}",
            spec=spec,
            answer=label,
            difficulty=difficulty,
            meta={"type": category, "schema": schema.table},
        )
    raise RuntimeError(f"could not generate a verified {category} task at difficulty {difficulty!r}")


register_domain("db", DBEnv, generate)

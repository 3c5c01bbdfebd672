"""Hostile actions (issue #44): each domain's worst cases and a fuzz test. Every step must return within
STEP_CPU_S of CPU, never raise, keep its observation short, and leave the process alive."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from functools import lru_cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openmanus_lite.envs import generate_tasks, make_env
from openmanus_lite.envs.base import echoed
from openmanus_lite.envs.shell.interpreter import VFS, Shell
from openmanus_lite.envs.sql_db import DENIED_FUNCTIONS, SafeDB, printf_sizes
from openmanus_lite.react import answer, bash, call, format_turn, sql, tool

STEP_CPU_S = 2.0
OBSERVATION_MAX = 5_000
"""No observation here comes near this; an action echoed whole (1 MB) would."""
DOMAINS = ("os", "db", "web", "ecommerce", "kg", "household")


@lru_cache(maxsize=None)
def _task(domain: str):
    return generate_tasks(domain, 1, seed=3)[0]


def _env(domain: str):
    env = make_env(domain, max_turns=1_000)
    env.reset(_task(domain))
    return env


def _step(env, text: str):
    """One step, checked: bounded CPU, no exception, a short observation, no domain bug hit."""
    start = time.thread_time()
    result = env.step(text)
    spent = time.thread_time() - start
    assert spent < STEP_CPU_S, (spent, text[:200])
    assert isinstance(result.observation, str) and len(result.observation) <= OBSERVATION_MAX, text[:200]
    assert "internal_error" not in result.info, result.info["internal_error"]
    return result


def _act(domain: str, body: str) -> str:
    """`body` as the domain's action (the raw text for household, the call's name[arg] for web/ecommerce)."""
    if domain == "os":
        return format_turn("try", bash(body))
    if domain == "db":
        return format_turn("try", sql(body))
    if domain in ("web", "ecommerce"):
        return format_turn("try", call("click", body))
    if domain == "kg":
        return format_turn("try", tool("get_relations", body))
    return format_turn("try", f"Act: {body}")


# ---------------------------------------------------------------- the probes of issue #44


def test_fts3_tokenizer_cannot_crash_the_process() -> None:
    """BAD 1: fts3_tokenizer with a forged pointer, then a full-text table, ended the process (exit 139)."""
    probe = textwrap.dedent("""
        from openmanus_lite.envs import generate_tasks, make_env
        from openmanus_lite.react import format_turn, sql
        env = make_env("db", max_turns=10)
        env.reset(generate_tasks("db", 1)[0])
        for stmt in ("SELECT fts3_tokenizer('simple', x'4141414141414141')", "SELECT fts3_tokenizer('simple')",
                     "CREATE VIRTUAL TABLE t USING fts3(tokenize=simple)", "INSERT INTO t VALUES ('hello world')",
                     "SELECT * FROM t WHERE t MATCH 'hello'"):
            print(repr(env.step(format_turn("try", sql(stmt))).observation), flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr[-2000:])
    lines = done.stdout.splitlines()
    assert len(lines) == 5
    assert all("not authorized" in line for line in lines[:3]), lines
    assert "fts3_tokenizer" in lines[0] and "virtual tables" in lines[2]


@pytest.mark.parametrize("name", sorted(DENIED_FUNCTIONS))
def test_dangerous_functions_are_refused_by_name(name: str) -> None:
    db = SafeDB([])
    rows, error, _ = db.run(f"SELECT {name}('x', 'y')")
    assert rows is None and error.startswith("not authorized") and name in error
    # a view or trigger does not get around the refusal
    assert db.run(f"CREATE VIEW v AS SELECT {name}('x') AS p")[1] is None
    assert db.run("SELECT * FROM v")[1] is not None


def test_printf_width_cannot_stall_a_statement() -> None:
    """BAD 3: printf('%.*c', 2000000000, 'x') took 7.9 s inside one VM instruction (three: 26.7 s)."""
    db = SafeDB([])
    for stmt in ("SELECT printf('%.*c', 2000000000, 'x')",
                 "SELECT printf('%.*c', 2000000000, 'x'), printf('%.*c', 2000000000, 'y'), "
                 "format('%.*c', 2000000000, 'z')",
                 "SELECT printf('%.2000000000c', 'x')", "SELECT printf('%.*c', '2e9', 'x')",
                 "SELECT printf('%*.*c', 1, -2000000000, 'x')"):
        start = time.thread_time()
        rows, error, _ = db.run(stmt)
        assert time.thread_time() - start < 0.5, stmt
        assert rows is None and "width or precision" in error, (stmt, error)
    # ordinary formatting is the built-in's
    assert db.run("SELECT printf('%5.2f|%d|%s|%%|%-4s|%05d|%.*c|%*d', 3.14159, 42, 'hi', 'ab', 7, 3, 'x', 4, 9)")[0] \
        == [(" 3.14|42|hi|%|ab  |00007|xxx|   9",)]
    assert db.run("SELECT format('%.1f', 2.25), printf('%s', NULL), printf(NULL)")[0] == [("2.3", "", None)]


def test_printf_sizes_reads_widths_like_sqlite() -> None:
    assert printf_sizes("%d %*d %.*f %5.3s %%", (1, 7, 2, 3, 1.5, "x")) == [7.0, 3.0, 5.0, 3.0]
    assert printf_sizes("%.*c", ("  2e9abc", "x")) == [2e9]
    assert printf_sizes("%1234567890123c", ()) == [float("inf")]
    assert printf_sizes(None, ()) == []


@pytest.mark.parametrize("stmt", [
    "SELECT length(ltrim(printf('%.*c', 60000, 'a'), printf('%.*c', 60000, 'b') || 'a'))",
    "SELECT instr(printf('%.*c', 99999, 'a'), printf('%.*c', 50000, 'a') || 'b')",
    "SELECT replace(printf('%.*c', 99999, 'a'), printf('%.*c', 50000, 'a') || 'b', 'c') IS NULL",
    "SELECT trim(printf('%.*c', 99999, 'a'), printf('%.*c', 99999, 'b'))",
])
def test_quadratic_builtins_refuse_huge_arguments(stmt: str) -> None:
    db = SafeDB([])
    start = time.thread_time()
    rows, error, _ = db.run(stmt)
    assert time.thread_time() - start < 0.5
    assert rows is None and "more work than this database allows" in error


def test_guarded_builtins_keep_their_results() -> None:
    db = SafeDB([])
    rows, error, _ = db.run("SELECT replace('hello', 'l', 'L'), instr('hello', 'lo'), trim('  x  '), ltrim('xxy', 'x'), "
                            "rtrim('yxx', 'x'), trim('--a--', '-'), replace(NULL, 'a', 'b'), instr(x'0102', x'02'), "
                            "replace(12.5, '.', ','), trim(7)")
    assert error is None and rows == [("heLLo", 4, "x", "y", "y", "a", None, 2, "12,5", "7")]


@pytest.mark.parametrize("stmt", [
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(randomblob(99999)) FROM r",
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(printf('%.*c', 99999, 'x')) FROM r",
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) "
    "SELECT count(ltrim(printf('%.*c', 2000, 'a'), printf('%.*c', 2000, 'b'))) FROM r",
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r LIMIT 3000) SELECT count(*) FROM r a, r b, r c",
    "WITH RECURSIVE r(n, s) AS (SELECT 1, 'x' UNION ALL SELECT n + 1, s || s FROM r) SELECT max(length(s)) FROM r",
])
def test_slow_statements_stop_within_the_cpu_budget(stmt: str) -> None:
    db = SafeDB([])
    start = time.thread_time()
    rows, error, _ = db.run(stmt)
    assert time.thread_time() - start < 1.0
    assert rows is None and error is not None


def test_tables_are_capped_in_temp_too() -> None:
    db = SafeDB([])
    for kind in ("TABLE", "TEMP TABLE"):
        rows, error, _ = db.run(f"CREATE {kind} big AS WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r "
                                "LIMIT 20000) SELECT n, randomblob(9999) AS b FROM r")
        assert error == "database or disk is full", (kind, error)


@pytest.mark.parametrize("n", [400, 800])
def test_parameter_expansion_patterns_run_under_the_deadline(n: int) -> None:
    """BAD 2: ${x##*a*a*a*b} over 400 a's took 59 s (800: > 250 s), ${x/*a*a*a*a*b/} over 300 a's > 60 s."""
    for expansion in ("${x##*a*a*a*b}", "${x#*a*a*a*b}", "${x%%*a*a*a*b}", "${x%*a*a*a*b}", "${x/*a*a*a*a*b/}",
                      "${x//*a*a*a*a*b/y}", "${x/#*a*a*a*a*a*[!a]/}", "${x/%*a*a*a*[!a]/}"):
        shell = Shell(VFS.from_spec({}, []))
        start = time.thread_time()
        out, _ = shell.run(f'x=$(printf "a%.0s" {{1..{n}}}); y={expansion}; echo "${{#y}}"; echo next')
        assert time.thread_time() - start < 1.0, expansion
        assert out.endswith("next\n"), (expansion, out)
        assert out.startswith(f"{n}\n") or "took too long" in out, (expansion, out)


@pytest.mark.parametrize("script,expected", [
    ("f=/a/b/c.tar.gz; echo ${f#*.} ${f##*.} ${f%.*} ${f%%.*} ${f#/*/} ${f##*/} ${f%/*}",
     "tar.gz gz /a/b/c.tar /a/b/c b/c.tar.gz c.tar.gz /a/b"),
    ("f=banana; echo ${f/an/AN} ${f//an/AN} ${f/#b/B} ${f/%na/NA} ${f/#a/X} ${f/%n/X} ${f//[ab]/_} ${f/*n/} ${f/n*/}",
     "bANana bANANa Banana banaNA banana banana __n_n_ a ba"),
    ("f=aXbXc; echo ${f#*X} ${f##*X} ${f%X*} ${f%%X*} ${f#?} ${f%?} ${f#[!a]} ${f#[[:lower:]]}",
     "bXc c aXb a XbXc aXbX aXbXc XbXc"),
    ("f='a*b'; echo \"${f#a\\*}\" \"${f#'a*'}\" \"${f%\"*b\"}\"", "b b a"),
])
def test_parameter_expansion_patterns_keep_bash_results(script: str, expected: str) -> None:
    assert Shell(VFS.from_spec({}, [])).run(script) == (expected + "\n", 0)


def test_echoed_text_is_capped() -> None:
    assert echoed("short") == "short"
    assert echoed("x" * 1_000_000) == "x" * 80 + "... (1000000 characters)"


@pytest.mark.parametrize("domain", DOMAINS)
def test_a_megabyte_action_is_not_echoed_back(domain: str) -> None:
    """WEAK: the kg env echoed a 1 MB action back whole."""
    big = "x" * 1_000_000
    env = _env(domain)
    for text in (_act(domain, big), format_turn("try", f"Act: {big}"), big, f"Act: {big}({big})"):
        _step(env, text)


# ---------------------------------------------------------------- each domain's worst cases

NESTED = "(" * 5_000 + "1" + ")" * 5_000
HOSTILE: dict[str, list[str]] = {
    "os": [
        "", " ", "\x00", "echo \x00\x01\x7f\ufeff\u202e", "é" * 3_000, NESTED, "$(" * 300 + "echo" + ")" * 300,
        "echo " + "{a,b}" * 30, "echo {1..99999999}", "x=a; for i in $(seq 40); do x=$x$x; done; echo ${#x}",
        "yes", "while :; do :; done", "f() { f; }; f", ":(){ :|:& };:", "cat /dev/zero", "cat /dev/urandom | head",
        "seq 1 100000000 | sort | uniq -c | tail -1", "printf '%.0s' {1..2000000}",
        "x=$(printf 'a%.0s' {1..5000}); echo $x | grep -E '(a*)*b'",
        "x=$(printf 'a%.0s' {1..5000}); echo $x | grep -E '^(a|aa)+$'",
        "x=$(printf 'a%.0s' {1..5000}); echo $x | sed -E 's/(a*)*b/x/'",
        "x=$(printf 'a%.0s' {1..5000}); echo $x | awk '/(a*)*b/'",
        "x=$(printf 'a%.0s' {1..3000}); [[ $x =~ (a*)*b ]]; echo $?",
        "x=$(printf 'a%.0s' {1..3000}); case $x in *a*a*a*a*a*b) echo y;; esac",
        "x=$(printf 'a%.0s' {1..3000}); [[ $x == *a*a*a*a*a*b ]]; echo $?",
        "mkdir -p $(printf 'd/%.0s' {1..200}) && find / -regex '\\(.*/\\)*x'",
        "find / -name '*a*a*a*a*a*a*b'", "grep -r " + "'" + "(" * 400 + "'" + " /",
        "awk 'BEGIN { while (1) x = x \"aaaaaaaaaaaaaaaa\" }'", "awk 'BEGIN { printf \"%*d\", 2000000000, 1 }'",
        "printf '%*d' 2000000000 1", "echo $((2**63)) $((1/0)) $((-(2**63)/-1))", "echo " + "$((" * 500 + "1" + "))" * 500,
        "x=$(printf 'a%.0s' {1..400}); echo ${x##*a*a*a*b}", "sed -n '1~0p;$!N;P;D' /etc/passwd",
        "cat <<EOF\n" + "$(echo x)" * 2_000 + "\nEOF",
    ],
    "db": [
        "", ";", ";;;;", "\x00", "SELECT '\x00\ufeff\u202e'", "SELECT " + NESTED, "SELECT 1" + " UNION SELECT 1" * 600,
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT max(x) FROM c",
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 1000) "
        "SELECT count(*) FROM c a, c b, c d, c e",
        "SELECT count(*) FROM sqlite_master a, sqlite_master b, sqlite_master c, sqlite_master d",
        "SELECT printf('%.*c', 99999, 'a') LIKE replace(printf('%.*c', 900, 'x'), 'x', '%a') || 'b'",
        "SELECT printf('%.*c', 99999, 'a') GLOB replace(printf('%.*c', 2000, 'x'), 'x', '*a') || 'b'",
        "SELECT printf('%.*c', 99999, 'a') LIKE printf('%.*c', 40000, '%')",
        "SELECT json(printf('%.*c', 99999, '['))", "SELECT json_extract(printf('%.*c', 50000, '['), '$')",
        "SELECT zeroblob(2000000000)", "SELECT randomblob(-1), randomblob(2000000000)", "SELECT char(" + "1," * 200 + "1)",
        "SELECT hex(randomblob(99999)) IS NULL", "SELECT upper(printf('%.*c', 99999, 'a')) = lower('A')",
        "SELECT substr('abc', -9223372036854775808, 9223372036854775807)", "SELECT 9223372036854775807 + 1",
        "SELECT round(1.5, 2000000000), abs(-9223372036854775808)", "SELECT strftime(printf('%.*c', 99999, 'Y'))",
        "PRAGMA writable_schema = 1", "PRAGMA hard_heap_limit = 1", "ATTACH ':memory:' AS x", "VACUUM INTO '/tmp/x.db'",
        "SELECT load_extension('libc.so.6')", "SELECT fts3_tokenizer('simple')",
        "SELECT fts3_tokenizer('simple', x'4141414141414141')", "SELECT printf('%.*c', 2000000000, 'x')",
        "SELECT ltrim(printf('%.*c', 99999, 'a'), printf('%.*c', 99999, 'b') || 'a')",
        "CREATE VIRTUAL TABLE r USING rtree(id, a, b)", "SELECT * FROM dbstat", "SELECT * FROM sqlite_dbpage",
        "SELECT * FROM pragma_function_list", "BEGIN; DELETE FROM sqlite_master; COMMIT",
        "CREATE TRIGGER t AFTER INSERT ON sqlite_master BEGIN SELECT 1; END",
        "CREATE TABLE t(a CHECK (printf('%.*c', 2000000000, 'x') IS NULL)); INSERT INTO t VALUES (1)",
        "SELECT " + "1+" * 3_000 + "1", "SELECT " + ", ".join(["1"] * 3_000),
        "SELECT group_concat(printf('%.*c', 9999, 'x')) FROM (WITH RECURSIVE c(x) AS "
        "(SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 500) SELECT x FROM c)",
    ],
    "web": ["", "\x00", "click[" + "[" * 5_000 + "]", "search[" + "a" * 200_000 + "]", "type[" * 3_000,
            "back[]" * 5_000, "click[\ufeff\u202e]", "search[(a|a)*b]", "click[" + NESTED + "]"],
    "ecommerce": ["", "\x00", "click[" + "[" * 5_000 + "]", "search[" + "shampoo " * 20_000 + "]",
                  "click[\ufeff\u202e]", "search[.*.*.*.*.*.*b]", "click[" + NESTED + "]", "search[]"],
    "kg": ["", "\x00", "get_relations(" * 3_000, "get_neighbors(#99999999999999999999, r)", "count(#" + "9" * 5_000 + ")",
           "get_relations(" + NESTED + ")", "intersection(" + ", ".join(["#0"] * 5_000) + ")",
           "argmax(#0, " + "a" * 100_000 + ")", "get_neighbors(\ufeff\u202e, \x00)"],
    "household": ["", "\x00", "go to " + "fridge 1 " * 30, "take " * 60, "put a in b in c in d", "look" * 100,
                  "examine \ufeff\u202e", "open " + NESTED[:200], "use " + "é" * 250],
}


@pytest.mark.parametrize("domain,body", [(d, b) for d, bodies in HOSTILE.items() for b in bodies],
                         ids=[f"{d}-{i}" for d, bodies in HOSTILE.items() for i in range(len(bodies))])
def test_worst_case_actions_stay_bounded(domain: str, body: str) -> None:
    env = _env(domain)
    _step(env, _act(domain, body))
    if domain in ("web", "ecommerce", "kg"):  # the body as the whole action, too
        _step(env, format_turn("try", f"Act: {body}"))
    _step(env, format_turn("done", answer("x")))  # the episode still ends normally


# ---------------------------------------------------------------- fuzz

_FRAGMENTS = {
    "os": ["echo", "grep -E", "sed -E", "awk", "find / -regex", "printf", "x=", "$x", "${x##", "${x/", "}", "*a", "(a*)*",
           "[[", "]]", "|", ";", "&&", "$(", ")", "{1..3000}", "'", '"', "\\", "\n", "\x00", "for i in 1 2; do", "done",
           "while :; do", "$((", "**", "))", "<<EOF", "EOF", "a" * 500],
    "db": ["SELECT", "printf('%.*c',", "2000000000", "'x')", "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c)",
           "FROM", "c", "a,", "sqlite_master", "WHERE", "LIKE", "GLOB", "'%a%a%a%b'", "replace(", "instr(", "trim(",
           "randomblob(99999)", "zeroblob(", "(", ")", ",", ";", "'", "\x00", "ORDER BY", "x", "fts3_tokenizer(", "PRAGMA",
           "json(", "char(", "1" * 30],
    "web": ["click[", "search[", "type[", "back[", "]", "[", "(", ")", "Home", "Forum", "\x00", "é", "a" * 300],
    "ecommerce": ["click[", "search[", "]", "[", "Buy Now", "Next >", "< Prev", "Back to Search", "\x00", "a" * 300],
    "kg": ["get_relations(", "get_neighbors(", "intersection(", "argmax(", "count(", "#0", "#1", "#99999999999", ",",
           "(", ")", "'", "\x00", "a" * 300],
    "household": ["go to", "take", "put", "open", "from", "in", "with", "fridge 1", "apple 1", "\x00", "é", "a" * 300],
}
_SQL_NUMBERS = ["2000000000", "-2147483648", "9223372036854775807", "1e308", "NULL", "'2e9'", "3", "0", "-1"]
_SQL_TEXTS = ["'x'", "''", "x'00'", "NULL", "'%a%a%a%a%b'", "'*a*a*a*b'", "printf('%.*c', 99999, 'a')",
              "printf('%.*c', 50000, 'a') || 'b'", "zeroblob(99999)", "char(0, 1114111)", "'\u202e\ufeff'"]
_SQL_FORMATS = ["'%.*c'", "'%*.*c'", "'%.2000000000c'", "'%*d'", "'%.*f'", "'%5.2f %s'", "'%'", "'%*.*s'"]
_QUADRATIC = ["instr", "replace", "trim", "ltrim", "rtrim", "like", "glob", "substr", "group_concat"]
_UNARY = ["zeroblob", "randomblob", "char", "json", "hex", "upper", "length", "quote", "fts3_tokenizer", "abs", "round"]


def _fuzz_os():
    """Parameter-expansion globs and grep/sed/awk regexes over long runs of one letter (backtracking's worst)."""
    glob = st.lists(st.sampled_from(["*a*a*a*", "*a", "*", "a", "b", "?", "[!a]", "*b", "[[:alpha:]]"]), max_size=6).map("".join)
    expansion = st.builds(lambda n, op, pat: f'x=$(printf "a%.0s" {{1..{n}}}); echo "${{x{op}{pat}}}" | wc -c',
                          st.sampled_from([0, 3, 300, 1_500]),
                          st.sampled_from(["#", "##", "%", "%%", "/", "//", "/#", "/%"]), glob)
    rx = st.lists(st.sampled_from(["a*", "(a*)*", "(a|aa)+", "a", "b", "$", "^", ".*", "(a+)+", "a{1,30}"]),
                  max_size=6).map("".join)
    regex_tool = st.builds(lambda n, tool, pattern: f"printf 'a%.0s' {{1..{n}}} > f; {tool.format(pattern)} f | wc -c",
                           st.sampled_from([0, 40, 3_000]),
                           st.sampled_from(["grep -E '{}'", "sed -E 's/{}/x/g'", "awk '/{}/'", "grep -c '{}'"]), rx)
    return st.one_of(expansion, regex_tool).map(lambda body: format_turn("try", bash(body)))


def _fuzz_db():
    """Calls of the built-ins with the sizes that make them slow, alone or once per row of an endless CTE."""
    call_ = st.one_of(
        st.builds(lambda fn, f, a: f"{fn}({', '.join([f, *a])})", st.sampled_from(["printf", "format"]),
                  st.sampled_from(_SQL_FORMATS), st.lists(st.sampled_from(_SQL_NUMBERS + _SQL_TEXTS), max_size=3)),
        st.builds(lambda fn, a, b: f"{fn}({a}, {b})", st.sampled_from(_QUADRATIC), st.sampled_from(_SQL_TEXTS),
                  st.sampled_from(_SQL_TEXTS)),
        st.builds(lambda fn, a: f"{fn}({a})", st.sampled_from(_UNARY), st.sampled_from(_SQL_NUMBERS + _SQL_TEXTS)))
    stmt = st.builds(lambda calls, rows: f"SELECT {', '.join(calls)}" + (
        "" if not rows else " FROM (WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) SELECT n FROM c)"),
        st.lists(call_, min_size=1, max_size=3), st.booleans())
    return stmt.map(lambda body: format_turn("try", sql(body)))


def _fuzz_any(domain: str):
    body = st.lists(st.sampled_from(_FRAGMENTS[domain]) | st.text(max_size=20), max_size=12).map(" ".join)
    return st.one_of(body.map(lambda b: _act(domain, b)), body.map(lambda b: format_turn("try", f"Act: {b}")), body)


def _fuzz(domain: str, actions, examples: int) -> None:
    """Episodes of up to three fuzzed actions from one start state, each step checked by `_step`."""
    env = _env(domain)

    @settings(max_examples=examples, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(texts=st.lists(actions, min_size=1, max_size=3))
    def run(texts: list[str]) -> None:
        episode = env.clone()
        for text in texts:
            _step(episode, text)

    run()


@pytest.mark.parametrize("domain", DOMAINS)
def test_fuzzed_actions_never_raise_and_stay_bounded(domain: str) -> None:
    _fuzz(domain, _fuzz_any(domain), 60)


@pytest.mark.parametrize("domain,actions", [("os", _fuzz_os), ("db", _fuzz_db)])
def test_fuzzed_worst_cases_stay_bounded(domain: str, actions) -> None:
    _fuzz(domain, actions(), 40)

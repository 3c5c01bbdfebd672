"""AgentBench-style DB tasks: tables and questions that look like AgentBench DB's (WikiSQL / WikiTableQuestions).

The kit's own db tasks (sql_db.generate) have tidy snake_case tables with typed columns. AgentBench DB's come
from web tables: names like `Mid-Season Relay Results (2004)`, headers like `2007`, `Win %`, `Pos.` or a
second `Goals.1`, every cell stored as text, and questions phrased "What is X when Y is Z?". A model trained
only on the tidy kind writes `SELECT Name FROM Jiu-Jitsu Results`, reads `near "-": syntax error`, and guesses.

`agentbench_style_tasks(n, seed)` makes such tasks for the db domain (domain "db", difficulty "agentbench");
recipes mix them in with `Recipe.db_agentbench_share`. Every reference statement quotes each name with
backticks (SQLite and MySQL both read them) and compares numbers stored as text through CAST, so the expert
solves every task; a task whose answer is empty, tied or too long is drawn again. The word lists are this
module's own: no table or question of AgentBench's dev set is copied (tests/envs/test_db_agentbench_style.py).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from openmanus_lite.envs.sql_db import MUTATION_TYPES, SafeDB, _Reject, _verify, sql_literal, table_description
from openmanus_lite.schema import Task

DIFFICULTY = "agentbench"
"""The `Task.difficulty` of these tasks (not one of envs.DIFFICULTIES: generate_tasks does not make them)."""

CATEGORY_CYCLE = ("INSERT", "other", "UPDATE", "counting", "INSERT", "comparison", "UPDATE", "ranking", "DELETE",
                  "aggregation-SUM", "INSERT", "aggregation-MAX", "UPDATE", "aggregation-MIN", "other",
                  "aggregation-AVG")
"""Task categories in turn: INSERT and UPDATE 3/16 each, as AgentBench DB's dev set has them often (20 + 20 of
60); every SELECT category of AgentBench at least once."""

# --------------------------------------------------------------------------- vocabulary (this module's own)

GIVEN = ("Aldo", "Beatriz", "Caspar", "Delphine", "Eamon", "Fenna", "Gustavo", "Hilde", "Ignacio", "Jorunn",
         "Kasimir", "Leontine", "Matthias", "Noor", "Osvaldo", "Petra", "Radomir", "Saskia", "Teodor", "Ulla",
         "Valentin", "Wilma", "Xaver", "Yolanda", "Zbigniew", "Anouk", "Bertil", "Cosima", "Dragan", "Elske")
FAMILY = ("Achterberg", "Brannigan", "Castellano", "Dvorak", "Eriksen", "Fairweather", "Gallardo", "Holmqvist",
          "Iwasaki", "Jankowski", "Kowalczyk", "Lindqvist", "Montague", "Nakashima", "Oyelaran", "Pellegrini",
          "Quaresma", "Rautio", "Sokolov", "Thorvaldsen", "Uchida", "Vasquez", "Whitcombe", "Yilmaz", "Zelenko")
PLACES = ("Ashcombe", "Brightwater", "Carrow Vale", "Dunhollow", "Eastmarch", "Fairhaven", "Glenrowan", "Harrowgate",
          "Ironbridge", "Kestrel Bay", "Lowmoor", "Millbrook", "Northfold", "Oakhurst", "Pinecrest", "Redcliff",
          "Saltmarsh", "Thornbury", "Upper Wick", "Westerly", "Yewdale", "Amberley Cross", "Stonegate")
CLUBS = ("Athletic", "Rovers", "United", "Wanderers", "Harriers", "Rangers", "Albion", "Town", "Olympic", "Dynamo")
NATIONS = ("Norland", "Valdoria", "Estmark", "Quellia", "Sarovia", "Tamberg", "Ondria", "Lusmar", "Kareth", "Brevia")
WORDS = ("Silver", "Harbour", "Ember", "Lantern", "Meadow", "Falcon", "Velvet", "Granite", "Willow", "Comet",
         "Orchard", "Tidal", "Crimson", "Hollow", "Paper", "Northern", "Echo", "Copper", "Midnight", "Marble")
NOUNS = ("Lights", "Road", "Garden", "Signal", "Heart", "River", "Season", "Window", "Engine", "Shadows", "Tide",
         "Letters", "Crown", "Harvest", "Circle", "Voices")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")


def _person(rng: random.Random) -> str:
    return f"{rng.choice(GIVEN)} {rng.choice(FAMILY)}"


def _title(rng: random.Random) -> str:
    return f"{rng.choice(WORDS)} {rng.choice(NOUNS)}"


def _date(rng: random.Random, year: int) -> str:
    return f"{rng.choice(MONTHS)} {rng.randint(1, 28)}, {year}"


# --------------------------------------------------------------------------- table themes


@dataclass(frozen=True)
class Column:
    """A header and how its cells are made: 'key' (unique per row), 'cat' (a few repeated values),
    'num' (a number written as text), 'text' (free text, never asked about)."""

    name: str
    kind: str
    make: Any
    """rng -> cell text (for 'cat': a tuple of the values)."""


@dataclass(frozen=True)
class Theme:
    """A kind of web table: how its name is made, its headers, and the noun a question calls a row by."""

    names: tuple[str, ...]
    """Name patterns; {place}, {year}, {word}, {nation}, {n} are filled in."""
    columns: tuple[Column, ...]
    row_noun: str


def _num(lo: int, hi: int, decimals: int = 0):
    def make(rng: random.Random) -> str:
        if decimals:
            return f"{rng.randint(lo * 10 ** decimals, hi * 10 ** decimals) / 10 ** decimals:.{decimals}f}"
        return str(rng.randint(lo, hi))
    return make


THEMES = (
    Theme(("{place} {year} Council Election", "Ward Results – {place} By-Election {year}", "{place}_ward_votes_{n}"),
          (Column("Ward", "cat", tuple(f"{w} Ward" for w in ("North", "South", "Castle", "Market", "Riverside"))),
           Column("Candidate", "key", _person),
           Column("Party", "cat", ("Green Alliance", "Civic Union", "Labour Forum", "Independent", "Rural League")),
           Column("Votes", "num", _num(150, 4800)), Column("Vote %", "num", _num(2, 60, 1))), "candidate"),
    Theme(("{place} {word} League {year}–{yy} Standings", "{year} Mid-Season Table of the {place} Cup",
           "league_table_{year}"),
          (Column("Pos.", "num", _num(1, 20)), Column("Club", "key", lambda r: f"{r.choice(PLACES)} {r.choice(CLUBS)}"),
           Column("Group", "cat", ("A", "B", "C")),
           Column("Played", "num", _num(20, 38)), Column("Won", "num", _num(2, 28)), Column("Lost", "num", _num(1, 25)),
           Column("Points", "num", _num(10, 90)), Column("Win %", "num", _num(5, 95, 1))), "club"),
    Theme(("{word} Cross-Country Championships {year}", "Men's 5000 m at the {year} {nation} Games",
           "Women's Half-Marathon – {place} {year}"),
          (Column("Rank", "num", _num(1, 40)), Column("Athlete", "key", _person),
           Column("Nation", "cat", NATIONS[:6]), Column("Heat", "cat", ("1", "2", "3")),
           Column("Time (min)", "num", _num(13, 70, 2)), Column("Notes", "cat", ("Q", "q", "PB", "SB", "–"))),
          "athlete"),
    Theme(("{nation} Exports by Year", "{nation} Crop Production ( thousand tonnes )", "trade_{nation}_{n}"),
          (Column("Product", "key", lambda r: f"{r.choice(WORDS)} {r.choice(('ore', 'grain', 'fibre', 'oil', 'timber', 'salt', 'wool', 'glass'))}"),
           Column("Sector", "cat", ("Mining", "Farming", "Forestry", "Industry")),
           Column("2007", "num", _num(10, 900)), Column("2008", "num", _num(10, 900)),
           Column("2009", "num", _num(10, 900)), Column("Change %", "num", _num(-40, 60, 1))), "product"),
    Theme(("List of {word} {noun} Episodes (Season {k})", "{word} {noun} (TV series) season {k}"),
          (Column("No. in series", "num", _num(1, 120)), Column("No. in season", "num", _num(1, 24)),
           Column("Title", "key", _title),
           Column("Directed by", "cat", tuple(f"{g} {f}" for g, f in zip(GIVEN[:5], FAMILY[5:10]))),
           Column("Original air date", "text", lambda r: _date(r, r.randint(1995, 2019))),
           Column("U.S. viewers (millions)", "num", _num(1, 25, 2))), "episode"),
    Theme(("{person} Singles Discography", "Chart history of {person}", "{place}_Music_Awards_{n}"),
          (Column("Year", "cat", tuple(str(y) for y in range(1998, 2004))), Column("Single", "key", _title),
           Column("Peak chart position", "num", _num(1, 100)), Column("Weeks on chart", "num", _num(1, 40)),
           Column("Album", "cat", ("Night Atlas", "Low Ceiling", "Brass & Salt", "Open Rooms")),
           Column("Certification", "cat", ("Gold", "Silver", "Platinum", "none"))), "single"),
    Theme(("Squad statistics of {place} {club} {year}", "{place} {club} player appearances {year}–{yy}"),
          (Column("No.", "num", _num(1, 40)), Column("Player", "key", _person),
           Column("Pos", "cat", ("GK", "DF", "MF", "FW")), Column("Apps", "num", _num(0, 40)),
           Column("Goals", "num", _num(0, 25)), Column("Apps.1", "num", _num(0, 8)), Column("Goals.1", "num", _num(0, 6))),
          "player"),
    Theme(("Tallest Buildings in {place}", "{place} skyline: completed towers", "skyscrapers_{place}_{n}"),
          (Column("Rank", "num", _num(1, 30)), Column("Name", "key", lambda r: f"{r.choice(WORDS)} {r.choice(('Tower', 'Plaza', 'Centre', 'House', 'Point', 'Court'))}"),
           Column("Height ( m )", "num", _num(60, 420)), Column("Floors", "num", _num(15, 95)),
           Column("Year", "cat", tuple(str(y) for y in range(1985, 1992))),
           Column("Use", "cat", ("Office", "Residential", "Hotel", "Mixed-use"))), "building"),
    Theme(("{place} International Film Festival Winners", "{word} Film Awards ({year})", "film_awards_{n}"),
          (Column("Year", "cat", tuple(str(y) for y in range(2010, 2015))), Column("Film", "key", _title),
           Column("Director(s)", "text", _person), Column("Country", "cat", NATIONS[4:]),
           Column("Runtime (min.)", "num", _num(75, 190)), Column("Budget ($M)", "num", _num(1, 90, 1))), "film"),
    Theme(("{word}-{noun} Grand Prix Results", "{year} {nation} Rally – Stage Winners", "Motor_Racing_{n}"),
          (Column("Round", "num", _num(1, 18)), Column("Driver", "key", _person),
           Column("Constructor", "cat", ("Vesta", "Orrin", "Kestrel", "Halvard", "Marlin")),
           Column("Laps", "num", _num(40, 78)), Column("Grid", "num", _num(1, 24)),
           Column("Points", "num", _num(0, 25))), "driver"),
)


@dataclass
class _Table:
    theme: Theme
    name: str
    headers: list[str]
    rows: list[list[str]]

    def values(self, header: str) -> list[str]:
        i = self.headers.index(header)
        return [r[i] for r in self.rows]

    def of(self, kind: str) -> list[str]:
        return [c.name for c in self.theme.columns if c.kind == kind]

    def as_spec(self) -> dict[str, Any]:
        return {"name": self.name, "columns": [{"name": h, "type": "TEXT"} for h in self.headers], "rows": self.rows}


def _table_name(rng: random.Random, theme: Theme) -> str:
    year = rng.randint(1988, 2019)
    fills = {"place": rng.choice(PLACES), "year": year, "yy": f"{(year + 1) % 100:02d}", "word": rng.choice(WORDS),
             "noun": rng.choice(NOUNS), "nation": rng.choice(NATIONS), "n": rng.randint(1, 9), "k": rng.randint(1, 8),
             "person": _person(rng), "club": rng.choice(CLUBS)}
    name = rng.choice(theme.names).format(**fills)
    return name.replace(" ", "_") if "_" in name else name


def _cell(rng: random.Random, col: Column) -> str:
    return rng.choice(col.make) if col.kind == "cat" else col.make(rng)


def _make_table(rng: random.Random, theme: Theme) -> _Table:
    n = rng.randint(5, 14)
    key = next(c for c in theme.columns if c.kind == "key")
    keys: list[str] = []
    while len(keys) < n:
        k = key.make(rng)
        if k not in keys:
            keys.append(k)
    rows = [[k if c is key else _cell(rng, c) for c in theme.columns] for k in keys]
    return _Table(theme, _table_name(rng, theme), [c.name for c in theme.columns], rows)


# --------------------------------------------------------------------------- questions


def q(name: str) -> str:
    """A name quoted with backticks, as AgentBench's reference SQL writes every table and column."""
    return "`" + name.replace("`", "``") + "`"


def _real(header: str) -> str:
    """A number stored as text, compared as a number ('9' < '10')."""
    return f"CAST({q(header)} AS REAL)"


PEOPLE_NOUNS = ("candidate", "athlete", "player", "driver")
"""Row nouns a question asks about with "who"."""


class _Ask:
    """Value pickers over one table for the question templates."""

    def __init__(self, rng: random.Random, t: _Table):
        self.rng, self.t, self.tq = rng, t, q(t.name)
        self.key = t.of("key")[0]

    def pick(self, kind: str) -> str:
        return self.rng.choice(self.t.of(kind))

    def present(self, header: str) -> str:
        return self.rng.choice(self.t.values(header))

    def threshold(self, header: str) -> str:
        vals = sorted(self.t.values(header), key=float)
        return vals[self.rng.randint(1, len(vals) - 2)]


def _other(a: _Ask):
    col = a.rng.choice([h for h in a.t.headers if h != a.key])
    who = a.present(a.key)
    phrasing = a.rng.choice(("What is the {c} when {k} is {v}?", "What {c} has a {k} of {v}?",
                             "Name the {c} for {v}", "what was the {c} of {v}?", "Tell me the {c} for {k} {v}"))
    return (phrasing.format(c=col, k=a.key, v=who),
            f"SELECT {q(col)} FROM {a.tq} WHERE {q(a.key)} = {sql_literal(who)}", None)


def _counting(a: _Ask):
    cat = a.pick("cat")
    v = a.present(cat)
    if a.rng.random() < 0.5:
        phrasing = a.rng.choice(("How many {k} have a {c} of {v}?", "What is the total number of {k} when {c} is {v}?",
                                 "how many {noun}s had {v} as their {c}?"))
        return (phrasing.format(k=a.key, c=cat, v=v, noun=a.t.theme.row_noun),
                f"SELECT COUNT({q(a.key)}) FROM {a.tq} WHERE {q(cat)} = {sql_literal(v)}", None)
    num = a.pick("num")
    t = a.threshold(num)
    return (f"How many {a.t.theme.row_noun}s have a {num} larger than {t}?",
            f"SELECT COUNT(*) FROM {a.tq} WHERE {_real(num)} > {t}", None)


def _comparison(a: _Ask):
    num = a.pick("num")
    if a.rng.random() < 0.5:  # WikiTableQuestions: "who had more ..., A or B?"
        x, y = a.rng.sample(a.t.values(a.key), 2)
        more = a.rng.random() < 0.5
        order = "DESC" if more else "ASC"
        pair = f" WHERE {q(a.key)} IN ({sql_literal(x)}, {sql_literal(y)})"
        question = (f"Who had {'more' if more else 'fewer'} {num}, {x} or {y}?" if a.t.theme.row_noun in PEOPLE_NOUNS
                    else f"which {a.t.theme.row_noun} has a {'higher' if more else 'lower'} {num}: {x} or {y}?")
        return question, f"SELECT {q(a.key)} FROM {a.tq}{pair} ORDER BY {_real(num)} {order} LIMIT 1", (order, num, pair)
    t = a.threshold(num)
    word = a.rng.choice(("greater than", "more than", "over"))
    return (f"Which {a.key} has a {num} {word} {t}?",
            f"SELECT {q(a.key)} FROM {a.tq} WHERE {_real(num)} > {t}", None)


def _ranking(a: _Ask):
    num = a.pick("num")
    high = a.rng.random() < 0.5
    order = "DESC" if high else "ASC"
    if a.rng.random() < 0.5:
        word = a.rng.choice(("the highest", "the most", "the top")) if high else a.rng.choice(("the lowest", "the least"))
        return (f"Which {a.key} had {word} {num}?",
                f"SELECT {q(a.key)} FROM {a.tq} ORDER BY {_real(num)} {order} LIMIT 1", (order, num, ""))
    cat = a.pick("cat")
    v = a.present(cat)
    cond = f" WHERE {q(cat)} = {sql_literal(v)}"
    word = "largest" if high else "smallest"
    return (f"Name the {a.key} with the {word} {num} when the {cat} is {v}",
            f"SELECT {q(a.key)} FROM {a.tq}{cond} ORDER BY {_real(num)} {order} LIMIT 1", (order, num, cond))


def _aggregation(a: _Ask, fn: str):
    num = a.pick("num")
    cat = a.pick("cat")
    v = a.present(cat)
    cond = f" WHERE {q(cat)} = {sql_literal(v)}"
    phrasing = {
        "SUM": ("What is the sum of {n} when {c} is {v}?", "What is the total {n} for the {c} {v}?"),
        "MAX": ("What is the highest {n} when the {c} is {v}?", "Which {n} is the biggest one with a {c} of {v}?"),
        "MIN": ("What is the lowest {n} when the {c} is {v}?", "Name the least {n} for {c} {v}"),
        "AVG": ("What is the average {n} when {c} is {v}?", "what is the mean {n} of the rows with {c} {v}?"),
    }[fn]
    return (a.rng.choice(phrasing).format(n=num, c=cat, v=v), f"SELECT {fn}({_real(num)}) FROM {a.tq}{cond}", None)


def _insert(a: _Ask):
    t = a.t
    fresh = next(c for c in t.theme.columns if c.kind == "key")
    key = fresh.make(a.rng)
    while key in t.values(a.key):
        key = fresh.make(a.rng)
    row = [key if c.kind == "key" else _cell(a.rng, c) for c in t.theme.columns]
    said = ", ".join(f"{h} {v}" for h, v in zip(t.headers, row))
    phrasing = a.rng.choice(("Insert a new row into the {t} table with {s}.", "Add a record to {t}: {s}.",
                             "A new entry has to go into {t}, with {s}. Insert it."))
    return (phrasing.format(t=t.name, s=said),
            f"INSERT INTO {a.tq} ({', '.join(q(h) for h in t.headers)}) VALUES ({', '.join(sql_literal(v) for v in row)})",
            None)


def _update(a: _Ask):
    col = a.rng.choice([c for c in a.t.theme.columns if c.kind != "key"])
    new = _cell(a.rng, col)
    if a.rng.random() < 0.6:
        who = a.present(a.key)
        return (a.rng.choice(("Update the {c} of {v} to '{n}' in the {t} table.",
                              "In {t}, change the {c} to {n} where the {k} is {v}.")).format(
                    c=col.name, v=who, n=new, t=a.t.name, k=a.key),
                f"UPDATE {a.tq} SET {q(col.name)} = {sql_literal(new)} WHERE {q(a.key)} = {sql_literal(who)}", None)
    cat = a.rng.choice([h for h in a.t.of("cat") if h != col.name] or [a.key])
    v = a.present(cat)
    return (f"Set {col.name} to '{new}' for every row of {a.t.name} whose {cat} is '{v}'.",
            f"UPDATE {a.tq} SET {q(col.name)} = {sql_literal(new)} WHERE {q(cat)} = {sql_literal(v)}", None)


def _delete(a: _Ask):
    if a.rng.random() < 0.5:
        cat = a.pick("cat")
        v = a.present(cat)
        return (f"Delete the rows of {a.t.name} where the {cat} is '{v}'.",
                f"DELETE FROM {a.tq} WHERE {q(cat)} = {sql_literal(v)}", None)
    num = a.pick("num")
    t = a.threshold(num)
    return (f"Remove every {a.t.theme.row_noun} from {a.t.name} with a {num} below {t}.",
            f"DELETE FROM {a.tq} WHERE {_real(num)} < {t}", None)


_MAKERS = {"other": _other, "counting": _counting, "comparison": _comparison, "ranking": _ranking,
           "INSERT": _insert, "UPDATE": _update, "DELETE": _delete}
THINK = ("Names with spaces, punctuation or digits must be quoted, so I put backticks around the table and "
         "every column, and compare numbers stored as text with CAST.")
"""The expert's thought before its statement: the habit these tables need."""


def _label(db: SafeDB, ref: str, table: str, tie) -> list | None:
    """The answer values of a SELECT task, or None when the task is not a fair question (sql_db's check: empty,
    NULL, too many values, or a top value tied with the next: `tie` = (order, number column, condition))."""
    check = None
    if tie is not None:
        order, num, cond = tie
        check = ("unique", q(table), _real(num), cond, order)
    try:
        return _verify(db, ref, check)
    except _Reject:
        return None


def generate_agentbench(rng: random.Random, index: int) -> Task:
    """One AgentBench-style db task; `index` picks the category (CATEGORY_CYCLE)."""
    category = CATEGORY_CYCLE[index % len(CATEGORY_CYCLE)]
    for _ in range(200):
        table = _make_table(rng, rng.choice(THEMES))
        ask = _Ask(rng, table)
        if category.startswith("aggregation"):
            question, ref, tie = _aggregation(ask, category.split("-")[1])
        else:
            question, ref, tie = _MAKERS[category](ask)
        tables = [table.as_spec()]
        db = SafeDB(tables, cache=False)
        try:
            if category in MUTATION_TYPES:
                before = db.table_state([table.name])
                _, error, _ = db.run(ref)
                if error:
                    raise ValueError(f"generated SQL fails: {error}: {ref}")
                after = db.table_state([table.name])
                if before == after or not sum(after[table.name][1].values()):
                    continue  # a change must change something and leave rows behind
                label = None
            else:
                label = _label(db, ref, table.name, tie)
                if label is None:
                    continue
        finally:
            db.close()
        if label is None:
            final = "The statement ran without error, so the change is done and I commit my answer."
        else:
            final = f"The query returned {', '.join(str(v) for v in label)}, so that is the answer."
        spec = {"tables": tables, "type": category, "label": label or [], "reference_sql": ref,
                "source": "generated-agentbench", "think": THINK, "final_think": final}
        return Task(id=f"db-{DIFFICULTY}-{index:05d}-{rng.getrandbits(32):08x}", domain="db",
                    instruction=f"{question}\n{table_description(tables)}", spec=spec, answer=label,
                    difficulty=DIFFICULTY, meta={"type": category, "style": DIFFICULTY})
    raise RuntimeError(f"could not generate a verified AgentBench-style {category} task")


def agentbench_style_tasks(n: int, seed: int = 0) -> list[Task]:
    """`n` AgentBench-style db tasks, deterministic per seed (the categories in turn, CATEGORY_CYCLE)."""
    rng = random.Random(f"db:{DIFFICULTY}:{seed}")
    return [generate_agentbench(rng, i) for i in range(n)]

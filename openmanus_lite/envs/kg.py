"""KG domain: AgentBench-KG style tool use over a generated knowledge graph, with TaskCraft-style tasks.

The world: entities with types (person, city, country, company, university, film, book,
genre, industry), relations between them (each with a named inverse, as Freebase has) and
numeric attributes. A world is a pure function of (seed, size) and is cached, so a task's
`spec` stays small: the world's seed and size plus the question's program.

The tools are AgentBench's: get_relations(x), get_neighbors(x, relation), intersection(#a, #b),
get_attributes(#x), argmax(#x, attr), argmin(#x, attr), count(#x), with variables #0, #1, ...
and answer(#n) (`Final Answer: #n` is accepted too). The score is the F1 of the answered
entity set against the gold set (exact match = success); a count is matched exactly.

Task generation follows TaskCraft:
- atomic: a one-hop question from a fact (subject, relation, object);
- depth extension: the subject is replaced by a description that needs one more hop
  ("the director of <film>"), valid_hop growing with difficulty;
- width extension: two questions about entities of the same type are merged (intersection);
plus the AgentBench aggregations count and argmax/argmin. Every candidate is verified —
each description identifies exactly one entity, the answer set is small and non-empty, no
answer entity is named in the question, the expert solves it within the turn limit — and
rejected otherwise; `generation_stats()` reports the rejection counts by reason.
"""

from __future__ import annotations

import copy
import functools
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from openmanus_lite.envs.base import (
    DIFFICULTIES,
    Env,
    InvalidAction,
    echoed,
    expert_turn,
    register_domain,
    run_expert,
)
from openmanus_lite.react import answer, tool
from openmanus_lite.schema import Task

INTRO = (
    "You answer a question with a knowledge base of entities, relations and numeric attributes. Call one tool per "
    "turn. get_neighbors, intersection, argmax, argmin and count create a variable #0, #1, ... holding the "
    "entities found. Finish with answer(#n) on the variable that answers the question."
)
TOOLS = ("get_relations", "get_neighbors", "intersection", "get_attributes", "argmax", "argmin", "count")

# =========================================================================== the world

# relation: (inverse, subject type, object type)
RELATIONS: dict[str, tuple[str, str, str]] = {
    "born_in": ("birthplace_of", "person", "city"),
    "citizen_of": ("citizens", "person", "country"),
    "works_for": ("employees", "person", "company"),
    "studied_at": ("alumni", "person", "university"),
    "located_in": ("contains", "city", "country"),
    "campus_in": ("campuses", "university", "city"),
    "headquartered_in": ("headquarters_of", "company", "city"),
    "founded_by": ("founded", "company", "person"),
    "industry": ("companies_in", "company", "industry"),
    "directed_by": ("directed", "film", "person"),
    "starring": ("acted_in", "film", "person"),
    "produced_by": ("produced", "film", "company"),
    "genre": ("films_of_genre", "film", "genre"),
    "written_by": ("wrote", "book", "person"),
    "published_by": ("published", "book", "company"),
}
INVERSE = {inv: fwd for fwd, (inv, _, _) in RELATIONS.items()}
ALL_RELATIONS = tuple(sorted(list(RELATIONS) + list(INVERSE)))
ATTRIBUTES: dict[str, tuple[tuple[str, int, int], ...]] = {
    "person": (("birth_year", 1920, 2000),),
    "city": (("population", 10_000, 3_000_000), ("area", 20, 1500)),
    "country": (("population", 1_000_000, 90_000_000),),
    "company": (("founded_year", 1850, 2020), ("employee_count", 10, 90_000)),
    "university": (("founded_year", 1200, 1990), ("student_count", 800, 60_000)),
    "film": (("release_year", 1950, 2024), ("runtime", 70, 200)),
    "book": (("publication_year", 1900, 2024), ("pages", 90, 1200)),
    "genre": (),
    "industry": (),
}
ALL_ATTRIBUTES = tuple(sorted({a for attrs in ATTRIBUTES.values() for a, _, _ in attrs}))

# relation -> (noun phrase for "the r of x", question "…x…?")
PHRASES: dict[str, tuple[str, str]] = {
    "born_in": ("the birthplace of {x}", "Where was {x} born?"),
    "birthplace_of": ("the people born in {x}", "Who was born in {x}?"),
    "citizen_of": ("the country of citizenship of {x}", "Which country is {x} a citizen of?"),
    "citizens": ("the citizens of {x}", "Who are the citizens of {x}?"),
    "works_for": ("the employer of {x}", "Which company does {x} work for?"),
    "employees": ("the employees of {x}", "Who works for {x}?"),
    "studied_at": ("the university attended by {x}", "Where did {x} study?"),
    "alumni": ("the alumni of {x}", "Who studied at {x}?"),
    "located_in": ("the country of {x}", "In which country is {x}?"),
    "contains": ("the cities in {x}", "Which cities are in {x}?"),
    "campus_in": ("the campus city of {x}", "In which city is the campus of {x}?"),
    "campuses": ("the universities with a campus in {x}", "Which universities have a campus in {x}?"),
    "headquartered_in": ("the headquarters city of {x}", "In which city is {x} headquartered?"),
    "headquarters_of": ("the companies headquartered in {x}", "Which companies are headquartered in {x}?"),
    "founded_by": ("the founder of {x}", "Who founded {x}?"),
    "founded": ("the companies founded by {x}", "Which companies did {x} found?"),
    "industry": ("the industry of {x}", "In which industry is {x}?"),
    "companies_in": ("the companies in the {x} industry", "Which companies are in the {x} industry?"),
    "directed_by": ("the director of {x}", "Who directed {x}?"),
    "directed": ("the films directed by {x}", "Which films did {x} direct?"),
    "starring": ("the actors of {x}", "Who acted in {x}?"),
    "acted_in": ("the films starring {x}", "Which films did {x} act in?"),
    "produced_by": ("the producer of {x}", "Which company produced {x}?"),
    "produced": ("the films produced by {x}", "Which films did {x} produce?"),
    "genre": ("the genre of {x}", "What is the genre of {x}?"),
    "films_of_genre": ("the {x} films", "Which films are {x} films?"),
    "written_by": ("the author of {x}", "Who wrote {x}?"),
    "wrote": ("the books written by {x}", "Which books did {x} write?"),
    "published_by": ("the publisher of {x}", "Which company published {x}?"),
    "published": ("the books published by {x}", "Which books did {x} publish?"),
}
PLURAL = {"person": "people", "city": "cities", "country": "countries", "company": "companies",
          "university": "universities", "film": "films", "book": "books", "genre": "genres",
          "industry": "industries"}

_FIRST = ("Ada", "Boris", "Celia", "Dmitri", "Elena", "Felix", "Greta", "Hugo", "Ines", "Jonas", "Kira", "Luca",
          "Mira", "Nils", "Olga", "Pavel", "Rhea", "Stefan", "Tara", "Ugo", "Vera", "Walt", "Xenia", "Yusuf",
          "Zora", "Amir", "Bea", "Cato", "Dina", "Emil")
_LAST = ("Abara", "Brandt", "Castell", "Dorsey", "Eklund", "Farrow", "Galvan", "Holm", "Ilic", "Jansen", "Kovac",
         "Lindqvist", "Moreau", "Novak", "Okafor", "Petrov", "Quist", "Rahman", "Sato", "Tamm", "Ueda", "Varga",
         "Weller", "Yilmaz", "Zeller", "Arden", "Bauer", "Costa", "Delacroix", "Engel")
_SYL = ("al", "bor", "cen", "dar", "el", "fen", "gal", "hal", "ir", "jor", "kel", "lun", "mar", "nor", "os", "pel",
        "quen", "ros", "sil", "tor", "ul", "val", "wen", "yar", "zan")
_WORDS = ("Amber", "Basalt", "Cinder", "Drift", "Echo", "Fable", "Granite", "Harbor", "Ivory", "Juniper", "Kestrel",
          "Lumen", "Mosaic", "Nimbus", "Onyx", "Pioneer", "Quartz", "Raven", "Summit", "Tundra", "Vertex", "Willow")
_NOUNS = ("River", "Garden", "Coast", "Moon", "Road", "Harbor", "Orchard", "Desert", "Signal", "Train", "Field",
          "Winter", "Storm", "Lights", "Bridge", "Hour", "Water", "Valley", "Tower", "Dawn", "Shore", "Forest")
GENRES = ("drama", "comedy", "thriller", "documentary", "fantasy", "western")
INDUSTRIES = ("software", "energy", "retail", "media", "finance", "shipping")


@dataclass
class World:
    """Entities by name with their type, edges by relation (both directions) and attributes."""

    types: dict[str, str] = field(default_factory=dict)
    edges: dict[str, dict[str, set[str]]] = field(default_factory=dict)  # entity -> relation -> objects
    attrs: dict[str, dict[str, int]] = field(default_factory=dict)

    def add(self, name: str, etype: str, rng: random.Random) -> str:
        self.types[name] = etype
        self.edges[name] = {}
        self.attrs[name] = {a: rng.randint(lo, hi) for a, lo, hi in ATTRIBUTES[etype]}
        return name

    def link(self, s: str, rel: str, o: str) -> None:
        self.edges[s].setdefault(rel, set()).add(o)
        self.edges[o].setdefault(RELATIONS[rel][0], set()).add(s)

    def of_type(self, etype: str) -> list[str]:
        return [n for n, t in self.types.items() if t == etype]

    def neighbors(self, entities, rel: str) -> frozenset[str]:
        out: set[str] = set()
        for e in entities:
            out |= self.edges.get(e, {}).get(rel, set())
        return frozenset(out)

    def relations(self, entities) -> list[str]:
        return sorted({r for e in entities for r in self.edges.get(e, {})})

    def attributes(self, entities) -> list[str]:
        return sorted({a for e in entities for a in self.attrs.get(e, {})})


def _unique_names(rng: random.Random, n: int, make, taken: set[str]) -> list[str]:
    out: list[str] = []
    for _ in range(n * 50):
        if len(out) == n:
            break
        name = make()
        if name not in taken:
            taken.add(name)
            out.append(name)
    return out


@functools.lru_cache(maxsize=64)
def build_world(seed: int, size: int) -> World:
    """A deterministic world for (seed, size); size scales the number of entities."""
    rng = random.Random(f"kg-world:{seed}:{size}")
    w = World()
    taken: set[str] = set()

    def place() -> str:
        return "".join(rng.choice(_SYL) for _ in range(rng.randint(2, 3))).capitalize()

    countries = [w.add(n + rng.choice(("ia", "land", "mark")), "country", rng)
                 for n in _unique_names(rng, 3 + size, place, taken)]
    cities = [w.add(n, "city", rng) for n in _unique_names(rng, 6 + 4 * size, place, taken)]
    for c in cities:
        w.link(c, "located_in", rng.choice(countries))
    universities = [w.add(n, "university", rng) for n in _unique_names(
        rng, 2 + 2 * size, lambda: f"{rng.choice(_WORDS)} {rng.choice(('Institute', 'College', 'Academy'))}", taken)]
    for u in universities:
        w.link(u, "campus_in", rng.choice(cities))
    genres = [w.add(g, "genre", rng) for g in GENRES]
    industries = [w.add(i, "industry", rng) for i in INDUSTRIES]
    companies = [w.add(n, "company", rng) for n in _unique_names(
        rng, 4 + 3 * size, lambda: f"{rng.choice(_WORDS)} {rng.choice(('Labs', 'Works', 'Group', 'Systems'))}", taken)]
    people = [w.add(n, "person", rng) for n in _unique_names(
        rng, 12 + 9 * size, lambda: f"{rng.choice(_FIRST)} {rng.choice(_LAST)}", taken)]
    for p in people:
        w.link(p, "born_in", rng.choice(cities))
        w.link(p, "citizen_of", rng.choice(countries))
        if rng.random() < 0.7:
            w.link(p, "works_for", rng.choice(companies))
        if rng.random() < 0.6:
            w.link(p, "studied_at", rng.choice(universities))
    for c in companies:
        w.link(c, "headquartered_in", rng.choice(cities))
        w.link(c, "founded_by", rng.choice(people))
        w.link(c, "industry", rng.choice(industries))
    films = [w.add(n, "film", rng) for n in _unique_names(
        rng, 5 + 4 * size, lambda: f"The {rng.choice(_WORDS)} {rng.choice(_NOUNS)}", taken)]
    for f in films:
        w.link(f, "directed_by", rng.choice(people))
        for actor in rng.sample(people, rng.randint(1, 3)):
            w.link(f, "starring", actor)
        w.link(f, "produced_by", rng.choice(companies))
        w.link(f, "genre", rng.choice(genres))
    books = [w.add(n, "book", rng) for n in _unique_names(
        rng, 4 + 3 * size, lambda: f"{rng.choice(_NOUNS)} of {rng.choice(_WORDS)}", taken)]
    for b in books:
        w.link(b, "written_by", rng.choice(people))
        w.link(b, "published_by", rng.choice(companies))
    return w


# =========================================================================== programs
# A program is nested lists (JSON-friendly):
#   ["ent", name] | ["hop", P, relation] | ["and", P, P] | ["count", P] | ["argmax"|"argmin", P, attribute]


def evaluate(world: World, prog: list) -> frozenset[str] | int:
    op = prog[0]
    if op == "ent":
        return frozenset([prog[1]])
    if op == "hop":
        return world.neighbors(evaluate(world, prog[1]), prog[2])
    if op == "and":
        return evaluate(world, prog[1]) & evaluate(world, prog[2])
    if op == "count":
        return len(evaluate(world, prog[1]))
    if op in ("argmax", "argmin"):
        return _arg_extreme(world, evaluate(world, prog[1]), prog[2], op == "argmax")
    raise ValueError(f"unknown program operator {op!r}")


def _arg_extreme(world: World, ents, attr: str, highest: bool) -> frozenset[str]:
    scored = [(world.attrs[e][attr], e) for e in ents if attr in world.attrs.get(e, {})]
    if not scored:
        return frozenset()
    best = max(v for v, _ in scored) if highest else min(v for v, _ in scored)
    return frozenset(e for v, e in scored if v == best)


def program_key(prog: list) -> str:
    """Canonical text of a program (intersection operands sorted), to match variables to steps."""
    op = prog[0]
    if op == "ent":
        return prog[1]
    if op == "hop":
        return f"(JOIN {prog[2]} {program_key(prog[1])})"
    if op == "and":
        a, b = sorted((program_key(prog[1]), program_key(prog[2])))
        return f"(AND {a} {b})"
    if op == "count":
        return f"(COUNT {program_key(prog[1])})"
    return f"({op.upper()} {program_key(prog[1])} {prog[2]})"


def noun_phrase(prog: list) -> str:
    op = prog[0]
    if op == "ent":
        return prog[1]
    if op == "hop":
        return PHRASES[prog[2]][0].format(x=noun_phrase(prog[1]))
    if op == "and":
        return f"{noun_phrase(prog[1])} who are also {noun_phrase(prog[2])}"
    if op in ("argmax", "argmin"):
        return f"the one of {noun_phrase(prog[1])} with the {'largest' if op == 'argmax' else 'smallest'} " \
               f"{prog[2].replace('_', ' ')}"
    return f"the number of {noun_phrase(prog[1])}"


def question_text(prog: list) -> str:
    op = prog[0]
    if op == "hop":
        return PHRASES[prog[2]][1].format(x=noun_phrase(prog[1]))
    if op == "and":
        return f"Which entities are both {noun_phrase(prog[1])} and {noun_phrase(prog[2])}?"
    if op == "count":
        inner = noun_phrase(prog[1])
        return f"How many are there of {inner}?" if not inner.startswith("the ") else \
            f"What is the number of {inner[4:]}?"
    if op in ("argmax", "argmin"):
        word = "largest" if op == "argmax" else "smallest"
        return f"Which of {noun_phrase(prog[1])} has the {word} {prog[2].replace('_', ' ')}?"
    return f"What is {prog[1]}?"


def topic_entities(prog: list) -> list[str]:
    if prog[0] == "ent":
        return [prog[1]]
    out: list[str] = []
    for p in prog[1:]:
        if isinstance(p, list):
            out += [e for e in topic_entities(p) if e not in out]
    return out


# =========================================================================== environment


@dataclass
class Variable:
    key: str  # program_key of how it was made
    value: frozenset[str] | int
    label: str  # what the observation says it holds


class KGEnv(Env):
    domain = "kg"
    max_turns = 12
    intro = INTRO

    def _setup(self, task: Task) -> None:
        spec = task.spec
        self.world = build_world(spec["world"]["seed"], spec["world"]["size"])
        self.vars: list[Variable] = []
        self.seen_relations: set[str] = set()
        self.seen_attributes: set[int] = set()

    def _initial_observation(self) -> str:
        return "\nEntities: [" + ", ".join(self.task.spec["entities"]) + "]"

    def clone(self) -> "KGEnv":
        """Copies the episode state; the world is read-only and shared."""
        new = copy.copy(self)
        new.vars = list(self.vars)  # Variables are never mutated, only appended
        new.seen_relations = set(self.seen_relations)
        new.seen_attributes = set(self.seen_attributes)
        new.last_info = dict(self.last_info)
        return new

    # ------------------------------------------------------------------ tools
    def _resolve(self, arg: str) -> tuple[str, frozenset[str] | int]:
        """An argument -> (key, value): '#n' is a variable, anything else an entity name."""
        a = arg.strip().strip("'\"")
        m = re.fullmatch(r"#(\d{1,9})", a)
        if m:
            i = int(m.group(1))
            if i >= len(self.vars):
                raise InvalidAction(f"Error: variable #{i} does not exist yet" +
                                    (f"; the variables so far are #0 to #{len(self.vars) - 1}." if self.vars else
                                     "; tools like get_neighbors create variables."))
            return f"#{i}", self.vars[i].value
        if a in self.world.types:
            return a, frozenset([a])
        folded = {n.lower(): n for n in self.task.spec["entities"]}
        if a.lower() in folded:
            return folded[a.lower()], frozenset([folded[a.lower()]])
        raise InvalidAction(f"Error: unknown entity {echoed(a)!r}. Use an entity listed in the question or a variable "
                            f"such as #0.")

    def _entities(self, arg: str, tool_name: str) -> tuple[str, frozenset[str]]:
        key, value = self._resolve(arg)
        if isinstance(value, int):
            raise InvalidAction(f"Error: {tool_name} needs entities, but {echoed(arg.strip())} is a number.")
        return key, value

    def _var_key(self, ref: str) -> str:
        return self.vars[int(ref[1:])].key if ref.startswith("#") else ref

    def _new_var(self, key: str, value, label: str) -> str:
        self.vars.append(Variable(key, value, label))
        return f"Observation: variable #{len(self.vars) - 1}, which {label}"

    def _type_label(self, ents: frozenset[str]) -> str:
        types = sorted({self.world.types[e] for e in ents})
        return "are instances of " + (" / ".join(types) if types else "nothing (it is empty)")

    def _execute(self, action) -> str:
        if action.kind != "tool":
            raise InvalidAction(f"Error: unknown action. Valid tools: {', '.join(TOOLS)}; finish with answer(#n).")
        name = action.name
        args = [a.strip() for a in action.arg.split(",")] if action.arg.strip() else []
        arity = {"get_relations": 1, "get_neighbors": 2, "intersection": 2, "get_attributes": 1, "argmax": 2,
                 "argmin": 2, "count": 1}
        if name not in arity:
            raise InvalidAction(f"Error: unknown tool {echoed(name)!r}. Valid tools: {', '.join(TOOLS)}; "
                                f"finish with answer(#n).")
        if len(args) != arity[name]:
            raise InvalidAction(f"Error: {name} takes {arity[name]} argument(s), got {len(args)}: {name}("
                                + ", ".join(["x", "relation"][:arity[name]] if name == "get_neighbors" else
                                            ["#a", "#b"] if name == "intersection" else
                                            ["#x", "attribute"] if name in ("argmax", "argmin") else ["x"]) + ")")
        if name == "get_relations":
            key, ents = self._entities(args[0], name)
            self.seen_relations.add(key)
            return "Observation: [" + ", ".join(self.world.relations(ents)) + "]"
        if name == "get_neighbors":
            key, ents = self._entities(args[0], name)
            rel = args[1].strip().strip("'\"")
            if rel not in self.world.relations(ents):
                raise InvalidAction(f"Error: {echoed(rel)!r} is not a relation of {key}. Call get_relations({key}) "
                                    f"to see its relations.")
            found = self.world.neighbors(ents, rel)
            return self._new_var(f"(JOIN {rel} {self._var_key(key)})", found, self._type_label(found))
        if name == "intersection":
            if not all(a.startswith("#") for a in args):
                raise InvalidAction("Error: intersection takes two variables, e.g. intersection(#0, #1).")
            (ka, a), (kb, b) = self._entities(args[0], name), self._entities(args[1], name)
            ta = {self.world.types[e] for e in a}
            tb = {self.world.types[e] for e in b}
            if ta and tb and not ta & tb:
                raise InvalidAction("Error: intersection needs two variables of the same type.")
            x, y = sorted((self._var_key(ka), self._var_key(kb)))
            found = a & b
            return self._new_var(f"(AND {x} {y})", found, self._type_label(found))
        if name == "get_attributes":
            key, ents = self._entities(args[0], name)
            if key.startswith("#"):
                self.seen_attributes.add(int(key[1:]))
            return "Observation: [" + ", ".join(self.world.attributes(ents)) + "]"
        if name in ("argmax", "argmin"):
            if not args[0].startswith("#"):
                raise InvalidAction(f"Error: {name} takes a variable and an attribute, e.g. {name}(#0, population).")
            key, ents = self._entities(args[0], name)
            attr = args[1].strip().strip("'\"")
            if attr not in self.world.attributes(ents):
                raise InvalidAction(f"Error: {echoed(attr)!r} is not an attribute of {key}. Call get_attributes("
                                    f"{key}) to see them.")
            found = _arg_extreme(self.world, ents, attr, name == "argmax")
            return self._new_var(f"({name.upper()} {self._var_key(key)} {attr})", found, self._type_label(found))
        # count
        if not args[0].startswith("#"):
            raise InvalidAction("Error: count takes a variable, e.g. count(#0).")
        key, ents = self._entities(args[0], name)
        return self._new_var(f"(COUNT {self._var_key(key)})", len(ents), "is a number")

    # ------------------------------------------------------------------ checker
    def _answer_value(self, answer_text: str) -> frozenset[str] | int | None:
        a = answer_text.strip().strip("'\"")
        m = re.fullmatch(r"#(\d{1,9})", a)
        if m:
            i = int(m.group(1))
            return self.vars[i].value if i < len(self.vars) else None
        if re.fullmatch(r"-?\d+", a):
            return int(a)
        names = [n.strip().strip("'\"") for n in re.split(r"[,;|]", a.strip("[]")) if n.strip()]
        return frozenset(names)

    def _score(self, answer_text: str | None) -> float:
        if answer_text is None:
            return 0.0
        got = self._answer_value(answer_text)
        gold = self.task.answer
        if isinstance(gold, int):
            return float(isinstance(got, int) and got == gold)
        if not isinstance(got, frozenset) or not got:
            return 0.0
        gold_set = set(gold)
        hits = len(got & gold_set)
        if not hits:
            return 0.0
        precision, recall = hits / len(got), hits / len(gold_set)
        return 2 * precision * recall / (precision + recall)

    # ------------------------------------------------------------------ expert
    def _find_var(self, key: str) -> int | None:
        for i, v in enumerate(self.vars):
            if v.key == key:
                return i
        return None

    def _ref(self, prog: list) -> str:
        """How the expert names a sub-program's result now: the entity, or its variable."""
        if prog[0] == "ent":
            return prog[1]
        i = self._find_var(program_key(prog))
        assert i is not None
        return f"#{i}"

    def expert_action(self) -> str:
        prog = self.task.spec["program"]
        done = self._find_var(program_key(prog))
        if done is not None:
            return expert_turn(f"#{done} is {noun_phrase(prog)}, which answers the question.", answer(f"#{done}"))
        return self._next_step(prog)

    def _next_step(self, prog: list) -> str:
        """The next tool call for the first sub-program (post-order) without a variable yet."""
        for sub in prog[1:]:
            if isinstance(sub, list) and sub[0] != "ent" and self._find_var(program_key(sub)) is None:
                return self._next_step(sub)
        op = prog[0]
        if op == "hop":
            src = self._ref(prog[1])
            if src not in self.seen_relations:
                return expert_turn(f"I need {noun_phrase(prog)}. First I look at the relations of {src}.",
                                   tool("get_relations", src))
            return expert_turn(f"The relation {prog[2]} of {src} leads to {noun_phrase(prog)}.",
                               tool("get_neighbors", f"{src}, {prog[2]}"))
        if op == "and":
            a, b = self._ref(prog[1]), self._ref(prog[2])
            return expert_turn(f"The answer must be in both {a} and {b}, so I intersect them.",
                               tool("intersection", f"{a}, {b}"))
        if op == "count":
            a = self._ref(prog[1])
            return expert_turn(f"{a} holds {noun_phrase(prog[1])}; I count them.", tool("count", a))
        a = self._ref(prog[1])
        if int(a[1:]) not in self.seen_attributes:
            return expert_turn(f"To compare {noun_phrase(prog[1])} I look at the attributes of {a}.",
                               tool("get_attributes", a))
        return expert_turn(f"{prog[2]} is the attribute to {'maximise' if op == 'argmax' else 'minimise'}.",
                           tool(op, f"{a}, {prog[2]}"))

    def world_names(self) -> list[str]:
        return sorted(self.world.types)

    def random_action(self, rng: random.Random) -> str:
        ents = self.task.spec["entities"]
        n = len(self.vars)

        def var() -> str:
            return f"#{rng.randrange(n)}" if n else rng.choice(ents)

        def source() -> str:
            r = rng.random()
            if r < 0.3:
                return rng.choice(ents)
            if r < 0.6 and n:
                return var()
            return rng.choice(self.world_names())

        if n and rng.random() < 0.15:
            return expert_turn("I will guess.", answer(var()))
        choice = rng.randrange(7)
        if choice == 0:
            call = tool("get_relations", source())
        elif choice in (1, 2):
            call = tool("get_neighbors", f"{source()}, {rng.choice(ALL_RELATIONS)}")
        elif choice == 3:
            call = tool("intersection", f"{var()}, {var()}")
        elif choice == 4:
            call = tool("get_attributes", var())
        elif choice == 5:
            call = tool(rng.choice(("argmax", "argmin")), f"{var()}, {rng.choice(ALL_ATTRIBUTES)}")
        else:
            call = tool("count", var())
        return expert_turn("I will try a tool.", call)


# =========================================================================== task generation (TaskCraft)

WORLDS_PER_DIFFICULTY = 16
WORLD_SIZE = {"easy": 1, "medium": 2, "hard": 3}
MAX_ANSWERS = 4


class _Reject(Exception):
    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def _facts(world: World, etype: str | None = None) -> list[tuple[str, str]]:
    """(entity, relation) pairs that exist, optionally for one subject type."""
    return [(e, r) for e, rels in world.edges.items() if etype is None or world.types[e] == etype
            for r in sorted(rels)]


def _atomic(rng: random.Random, world: World, lo: int = 1, hi: int = MAX_ANSWERS) -> list:
    """A one-hop question: a fact (subject, relation, objects) with lo..hi objects."""
    names = list(world.types)
    for _ in range(50):
        e = rng.choice(names)
        rels = sorted(world.edges[e])
        if not rels:
            continue
        r = rng.choice(rels)
        if lo <= len(world.edges[e][r]) <= hi:
            return ["hop", ["ent", e], r]
    raise _Reject("no_fact")


def _depth_extend(rng: random.Random, world: World, prog: list) -> list:
    """TaskCraft depth extension: replace the topic entity X by 'the r of Y' where Y --r--> {X} only."""
    if prog[0] == "ent":
        x = prog[1]
        options = []
        for r_in, ys in sorted(world.edges[x].items()):
            fwd = INVERSE.get(r_in) or RELATIONS[r_in][0]  # the relation that leads from Y to X
            for y in sorted(ys):
                if world.edges[y].get(fwd) == {x}:
                    options.append(["hop", ["ent", y], fwd])
        if not options:
            raise _Reject("no_unique_description")
        return rng.choice(options)
    return [prog[0], _depth_extend(rng, world, prog[1]), *prog[2:]]


def _width_extend(rng: random.Random, world: World, prog: list) -> list:
    """TaskCraft width extension: intersect with another question about entities of the same type."""
    target = evaluate(world, prog)
    types = {world.types[e] for e in target}
    for _ in range(30):
        e = rng.choice(sorted(target))
        rel = rng.choice(sorted(world.edges[e]))
        for y in sorted(world.edges[e][rel]):
            back = INVERSE.get(rel) or RELATIONS[rel][0]
            other = ["hop", ["ent", y], back]
            o_val = evaluate(world, other)
            if {world.types[z] for z in o_val} != types:
                continue
            both = target & o_val
            if both and both != target and both != o_val:
                return ["and", prog, other]
    raise _Reject("no_width_partner")


def _candidate(rng: random.Random, world: World, difficulty: str) -> tuple[list, str]:
    kind = rng.choice({"easy": ("atomic", "atomic", "count"),
                       "medium": ("depth", "depth", "width", "argmax"),
                       "hard": ("depth", "width", "width_depth", "argmax_depth", "count_depth")}[difficulty])
    hops = {"easy": 1, "medium": 2, "hard": 3}[difficulty]
    if kind == "atomic":
        return _atomic(rng, world), kind
    if kind == "count":  # counts of 3+ so that counting a random set rarely hits the answer
        return ["count", _atomic(rng, world, lo=3, hi=40)], kind
    if kind == "depth":
        prog = _atomic(rng, world)
        for _ in range(hops - 1):
            prog = _depth_extend(rng, world, prog)
        return prog, kind
    if kind == "width":
        return _width_extend(rng, world, _atomic(rng, world)), kind
    if kind == "width_depth":
        prog = _width_extend(rng, world, _atomic(rng, world))
        return ["and", _depth_extend(rng, world, prog[1]), prog[2]], kind
    if kind in ("argmax", "argmax_depth"):
        base = _atomic(rng, world)
        if kind == "argmax_depth":
            base = _depth_extend(rng, world, base)
        ents = evaluate(world, base)
        attrs = world.attributes(ents)
        if len(ents) < 2 or not attrs:
            raise _Reject("nothing_to_compare")
        return [rng.choice(("argmax", "argmin")), base, rng.choice(attrs)], kind
    # count_depth
    return ["count", _depth_extend(rng, world, _atomic(rng, world))], kind


def _verify(world: World, prog: list, question: str, difficulty: str) -> None:
    value = evaluate(world, prog)
    if isinstance(value, int):
        if value < 1:
            raise _Reject("empty_answer")
    else:
        if not value:
            raise _Reject("empty_answer")
        if len(value) > MAX_ANSWERS:
            raise _Reject("too_many_answers")
        if prog[0] in ("argmax", "argmin") and len(value) > 1:
            raise _Reject("tie")
        low = question.lower()
        if any(e.lower() in low for e in value):
            raise _Reject("answer_in_question")
    if prog[0] in ("argmax", "argmin", "count") and len(evaluate(world, prog[1])) < 2:
        raise _Reject("trivial_aggregate")


def _generate(rng: random.Random, difficulty: str, index: int, stats: Counter) -> Task:
    for _ in range(500):
        stats["attempts"] += 1
        world_seed = rng.randrange(WORLDS_PER_DIFFICULTY)
        world = build_world(world_seed, WORLD_SIZE[difficulty])
        try:
            prog, kind = _candidate(rng, world, difficulty)
            question = question_text(prog)
            _verify(world, prog, question, difficulty)
        except _Reject as r:
            stats[f"rejected:{r.reason}"] += 1
            continue
        value = evaluate(world, prog)
        gold: Any = value if isinstance(value, int) else sorted(value)
        task = Task(
            id=f"kg-{difficulty}-{index:05d}-{rng.getrandbits(32):08x}",
            domain="kg",
            instruction=f"Question: {question}",
            spec={"world": {"seed": world_seed, "size": WORLD_SIZE[difficulty]}, "program": prog,
                  "entities": topic_entities(prog)},
            answer=gold,
            difficulty=difficulty,
            meta={"kind": kind, "program": program_key(prog)},
        )
        env = KGEnv()
        _, last = run_expert(env, task)
        if not last.info.get("success"):
            stats["rejected:expert_failed"] += 1
            continue
        stats["accepted"] += 1
        stats[f"kind:{kind}"] += 1
        task.meta["expert_turns"] = env.turn
        return task
    raise RuntimeError(f"could not generate a verified KG task at difficulty {difficulty!r} after 500 attempts")


def generate(rng: random.Random, difficulty: str, index: int) -> Task:
    return _generate(rng, difficulty, index, Counter())


def generation_stats(n: int = 100, seed: int = 0, difficulty: str = "easy") -> dict[str, Any]:
    """Generate `n` tasks exactly as `generate_tasks("kg", n, seed, difficulty)` does and report
    how many candidates were tried, accepted and rejected (by reason), and the task kinds."""
    if difficulty not in DIFFICULTIES:
        raise ValueError(f"difficulty must be one of {DIFFICULTIES}, got {difficulty!r}")
    rng = random.Random(f"kg:{difficulty}:{seed}")
    stats: Counter = Counter()
    for i in range(n):
        _generate(rng, difficulty, i, stats)
    return {
        "difficulty": difficulty,
        "accepted": stats["accepted"],
        "attempts": stats["attempts"],
        "rejected": {k.split(":", 1)[1]: v for k, v in sorted(stats.items()) if k.startswith("rejected:")},
        "kinds": {k.split(":", 1)[1]: v for k, v in sorted(stats.items()) if k.startswith("kind:")},
    }


register_domain("kg", KGEnv, generate)

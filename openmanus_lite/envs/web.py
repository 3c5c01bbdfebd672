"""Web: a small generated website (wiki, forum, staff directory, contact form) as text pages.

Each page is rendered with a title, its text and a line of named links. The agent acts with
`click[link]`, `search[query]` (the search box finds forum threads), `type[field][text]` on
the contact form, `back[]` (plain `back` works too) and `answer(...)`. Tasks: find a fact a few
clicks deep, follow a link from one page to another, compare facts across two pages, look up
a forum thread, and fill in and submit the contact form (checked on the submitted values).
Difficulty deepens the wiki (categories, then regions) and adds distractor pages and links.

A site is generated from a small seed in the task spec and cached per process; pages are
rendered once, so a step is a dictionary lookup.
"""

from __future__ import annotations

import copy
import functools
import random
import re
from collections import deque
from dataclasses import dataclass

from openmanus_lite.envs.base import Env, InvalidAction, echoed, expert_turn, register_domain
from openmanus_lite.react import Action, ParsedTurn, format_turn, parse_turn
from openmanus_lite.schema import Task

# --------------------------------------------------------------------------- name pools

_TOWN_A = ("Grey", "Oak", "River", "Stone", "Ash", "Mill", "Wolf", "Bright", "Elm", "Frost", "Hazel", "Iron", "Maple",
           "Pine", "Raven", "Silver", "Thorn", "Willow", "Amber", "Cedar", "Clear", "Fair", "Glen", "Red")
_TOWN_B = ("haven", "vale", "ford", "wick", "field", "moor", "bury", "stead", "ton", "gate", "mouth", "holm", "dale")
_RIVERS = ("Alder", "Brenn", "Calder", "Dovey", "Esk", "Fenn", "Garra", "Hollin", "Isen", "Jura", "Kell", "Lune",
           "Marrow", "Nidd", "Orran", "Pell", "Quill", "Rother", "Sware", "Tamsin", "Usk", "Wend")
_CO_A = ("Apex", "Beacon", "Cobalt", "Delta", "Ember", "Falcon", "Granite", "Harbor", "Indigo", "Juniper", "Keystone",
         "Lumen", "Meridian", "Nimbus", "Orbit", "Pioneer", "Quartz", "Summit", "Tundra", "Vertex")
_CO_B = ("Labs", "Works", "Foods", "Systems", "Motors", "Textiles", "Energy")
_FIRST = ("Ada", "Ben", "Cleo", "Dev", "Elena", "Finn", "Grace", "Hugo", "Iris", "Jonas", "Kira", "Leo", "Maya", "Nico",
          "Olga", "Pavel", "Quinn", "Rosa", "Sami", "Tara", "Umar", "Vera", "Wes", "Yara", "Zoe")
_LAST = ("Brook", "Carter", "Dunn", "Ellis", "Flores", "Gray", "Hale", "Ibarra", "Jensen", "Kaur", "Lund", "Moreau",
         "Nakamura", "Okafor", "Price", "Quist", "Reyes", "Sato", "Tran", "Ueda", "Varga", "Walsh", "Young", "Zell")
_DEPTS = ("Sales", "Support", "Engineering", "Finance", "Marketing", "Legal", "Research", "Logistics")
_ROLES = ("Manager", "Analyst", "Coordinator", "Engineer", "Specialist", "Assistant")
_TOPICS = ("Chess club", "Book club", "Running group", "Photo walk", "Board game night", "Choir", "Hiking group",
           "Film club", "Cooking class", "Garden club", "Yoga session", "Coding dojo", "Quiz night", "Pottery class")
_BOARDS = ("General", "Events", "Help", "Marketplace")
_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_PLACES = ("the library", "room 204", "the town hall", "the park gate", "the old mill", "the community centre")
_REGIONS = ("North", "South", "East", "West")
_SUBJECTS = ("Order question", "Meeting request", "Feedback", "Invoice copy", "Job application", "Press inquiry")
FORM_FIELDS = ("name", "email", "department", "subject")

_LEVELS = {
    # wiki depth (1: articles on the wiki page, 2: categories, 3: categories and regions), articles per
    # kind, see-also links, departments x people, boards x threads, turn budget
    "easy": {"depth": 1, "towns": 3, "rivers": 2, "companies": 2, "see_also": 1, "depts": 3, "people": 2,
             "boards": 2, "threads": 2, "max_turns": 10},
    "medium": {"depth": 2, "towns": 5, "rivers": 3, "companies": 4, "see_also": 2, "depts": 4, "people": 3,
               "boards": 3, "threads": 3, "max_turns": 12},
    "hard": {"depth": 3, "towns": 9, "rivers": 5, "companies": 6, "see_also": 3, "depts": 6, "people": 4,
             "boards": 4, "threads": 3, "max_turns": 15},
}
KINDS = {"town": "Towns", "river": "Rivers", "company": "Companies"}


# --------------------------------------------------------------------------- the site


@dataclass(frozen=True)
class Page:
    pid: str
    title: str
    body: tuple[str, ...]
    links: tuple[tuple[str, str], ...]  # (label, target page id): the site's navigation structure
    search: bool = False
    form: bool = False
    related: tuple[tuple[str, str], ...] = ()  # links inside an article's text (facts, see also)

    def all_links(self) -> tuple[tuple[str, str], ...]:
        return self.links + self.related

    def link_map(self) -> dict[str, str]:
        return {label.lower(): target for label, target in self.all_links()}


class Site:
    """The pages, the entities behind them, and a route planner; immutable once built."""

    def __init__(self, seed: int, difficulty: str):
        self.seed, self.difficulty = seed, difficulty
        self.level = _LEVELS[difficulty]
        rng = random.Random(f"site:{seed}:{difficulty}")
        self.pages: dict[str, Page] = {}
        self.entities: dict[str, dict] = {}  # page id -> facts (articles, people, threads)
        self._build(rng)
        self.rendered = {pid: render_page(p) for pid, p in self.pages.items()}
        self.thread_words = {t: frozenset(re.findall(r"[a-z0-9]+", self.rendered["t:" + t].lower()))
                             for t in self.threads}
        self.links = {pid: p.link_map() for pid, p in self.pages.items()}
        self._routes: dict[str, dict[str, tuple[str, int]]] = {}

    def __deepcopy__(self, memo):
        return self

    # ---------------------------------------------------------------- building
    def _add(self, page: Page, facts: dict | None = None) -> None:
        self.pages[page.pid] = page
        if facts is not None:
            self.entities[page.pid] = facts

    def _build(self, rng: random.Random) -> None:
        lv = self.level
        regions = list(_REGIONS[:3]) if lv["depth"] == 3 else [None]
        towns = rng.sample([a + b for a in _TOWN_A for b in _TOWN_B], lv["towns"])
        rivers = [f"{r} River" for r in rng.sample(_RIVERS, lv["rivers"])]
        companies = rng.sample([f"{a} {b}" for a in _CO_A for b in _CO_B], lv["companies"])
        people = [f"{f} {la}" for f in _FIRST for la in _LAST]
        rng.shuffle(people)
        years = rng.sample(range(1650, 1990), len(towns) + len(companies))
        facts: dict[str, dict] = {}
        for i, t in enumerate(towns):
            facts[t] = {"kind": "town", "Region": regions[i % len(regions)], "Founded": str(years[i]),
                        "Population": str(rng.randrange(800, 250000)), "Mayor": people.pop()}
        for r in rivers:
            facts[r] = {"kind": "river", "Region": rng.choice(regions), "Length": f"{rng.randrange(20, 900)} km",
                        "Flows through": rng.choice(towns)}
        for i, c in enumerate(companies):
            hq = rng.choice(towns)
            facts[c] = {"kind": "company", "Region": facts[hq]["Region"], "Founded": str(years[len(towns) + i]),
                        "Headquarters": hq, "CEO": people.pop(), "Employees": str(rng.randrange(12, 9000))}
        self.articles = facts
        self._build_wiki(rng, facts, regions)
        self._build_directory(rng, people)
        self._build_forum(rng)
        contact = Page("contact", "Contact", ("Send a message to one of our departments. Fill in every field, "
                                              "then click Submit.",), (("Home", "home"), ("Submit", "submit")),
                       form=True)
        self._add(contact)
        self._add(Page("home", "Home", ("Welcome to the Harbour Community Portal.",),
                       (("Wiki", "wiki"), ("Forum", "forum"), ("Directory", "directory"), ("Contact", "contact")),
                       search=True))

    def _build_wiki(self, rng: random.Random, facts: dict[str, dict], regions: list) -> None:
        depth = self.level["depth"]
        names = list(facts)
        top: list[tuple[str, str]] = []
        for name, f in facts.items():
            pid = "a:" + name
            parent: list[tuple[str, str]] = []
            if depth >= 2:
                cat = KINDS[f["kind"]]
                parent = [(cat, "cat:" + cat)]
                if depth == 3:
                    parent.append((f"{f['Region']} {cat}", f"reg:{cat}:{f['Region']}"))
            others = [n for n in names if n != name]
            see_also = rng.sample(others, min(len(others), self.level["see_also"]))
            linked = [f[k] for k in ("Flows through", "Headquarters") if k in f]
            link_names = list(dict.fromkeys(linked + see_also))
            body = [f"{name} is a {f['kind']}" + (f" in the {f['Region']} region." if f["Region"] else ".")]
            body += [f"{k}: {v}" for k, v in f.items() if k not in ("kind", "Region")]
            links = [("Home", "home"), ("Wiki", "wiki")] + parent[-1:]
            related = tuple((n, "a:" + n) for n in link_names)
            self._add(Page(pid, name, tuple(body), tuple(links), related=related), dict(f, name=name))
        if depth == 1:
            top = [(n, "a:" + n) for n in sorted(names)]
        else:
            for kind, cat in KINDS.items():
                members = sorted(n for n, f in facts.items() if f["kind"] == kind)
                if depth == 2:
                    sub = [(n, "a:" + n) for n in members]
                else:
                    sub = [(f"{r} {cat}", f"reg:{cat}:{r}") for r in regions]
                    for r in regions:
                        in_r = [(n, "a:" + n) for n in members if facts[n]["Region"] == r]
                        self._add(Page(f"reg:{cat}:{r}", f"{r} {cat}", (f"{cat} in the {r} region.",),
                                       tuple([("Home", "home"), (cat, "cat:" + cat)] + in_r)))
                self._add(Page("cat:" + cat, cat, (f"Wiki category: {cat.lower()}.",),
                               tuple([("Home", "home"), ("Wiki", "wiki")] + sub)))
                top.append((cat, "cat:" + cat))
        self._add(Page("wiki", "Wiki", ("The community encyclopedia.",), tuple([("Home", "home")] + top)))

    def _build_directory(self, rng: random.Random, people: list[str]) -> None:
        depts = sorted(rng.sample(_DEPTS, self.level["depts"]))
        self.departments = depts
        for d in depts:
            staff = sorted(people.pop() for _ in range(self.level["people"]))
            for p in staff:
                first, last = p.split()
                f = {"kind": "person", "name": p, "Department": d, "Role": rng.choice(_ROLES),
                     "Email": f"{first.lower()}.{last.lower()}@harbour.org",
                     "Phone": f"555-{rng.randrange(100, 10000):04d}", "Office": f"{rng.choice('ABCD')}-{rng.randrange(100, 400)}"}
                body = tuple(f"{k}: {v}" for k, v in f.items() if k not in ("kind", "name"))
                self._add(Page("p:" + p, p, body, (("Home", "home"), ("Directory", "directory"), (d, "dept:" + d))), f)
            self._add(Page("dept:" + d, d, (f"Staff of the {d} department.",),
                           tuple([("Home", "home"), ("Directory", "directory")] + [(p, "p:" + p) for p in staff])))
        self._add(Page("directory", "Directory", ("Staff directory by department.",),
                       tuple([("Home", "home")] + [(d, "dept:" + d) for d in depts])))

    def _build_forum(self, rng: random.Random) -> None:
        boards = _BOARDS[:self.level["boards"]]
        topics = rng.sample(_TOPICS, len(boards) * self.level["threads"])
        self.threads: list[str] = []
        for b_i, b in enumerate(boards):
            mine = topics[b_i * self.level["threads"]:(b_i + 1) * self.level["threads"]]
            for topic in mine:
                title = f"{topic} meetup"
                day, place = rng.choice(_DAYS), rng.choice(_PLACES)
                hour = rng.randrange(9, 21)
                author, reply = rng.sample(("maple", "orca", "sparrow", "juno", "kite", "basil", "pixel"), 2)
                f = {"kind": "thread", "name": title, "topic": topic, "Day": day, "Time": f"{hour}:00",
                     "Place": place}
                body = (f"{author}: The {topic.lower()} meets every {day} at {hour}:00 in {place}.",
                        f"{reply}: Thanks, see you there!")
                self._add(Page("t:" + title, title, body, (("Home", "home"), ("Forum", "forum"), (b, "board:" + b)),
                               search=True), f)
                self.threads.append(title)
            self._add(Page("board:" + b, f"{b} board", (f"Threads on the {b} board.",),
                           tuple([("Home", "home"), ("Forum", "forum")] + [(f"{t} meetup", f"t:{t} meetup")
                                                                           for t in mine]), search=True))
        self._add(Page("forum", "Forum", ("Community discussions.",),
                       tuple([("Home", "home")] + [(b, "board:" + b) for b in boards]), search=True))

    # ---------------------------------------------------------------- search and routes
    def search(self, query: str, limit: int = 5) -> list[str]:
        """Forum threads ranked by how many query words they contain (rarer words count more)."""
        words = set(re.findall(r"[a-z0-9]+", query.lower()[:500]))
        scored = []
        for title in self.threads:
            tokens = self.thread_words[title]
            score = sum(1.0 + (w in title.lower()) for w in words if w in tokens)
            if score:
                scored.append((-score, title))
        return [t for _, t in sorted(scored)[:limit]]

    def route(self, src: str, dst: str) -> tuple[str, int] | None:
        """(first link label, clicks) on a shortest path from src to dst that a visitor can plan without
        having seen the pages: a link to dst on src itself, else the navigation structure (home, wiki
        categories and regions, directory departments, forum boards). None if unreachable."""
        page = self.pages.get(src)
        if page is not None:
            for label, target in page.all_links():
                if target == dst:
                    return label, 1
        table = self._routes.get(dst)
        if table is None:
            table = self._routes[dst] = self._bfs_to(dst)
        return table.get(src)

    def _bfs_to(self, dst: str) -> dict[str, tuple[str, int]]:
        incoming: dict[str, list[tuple[str, str]]] = {}
        for pid, page in self.pages.items():
            for label, target in page.links:
                incoming.setdefault(target, []).append((pid, label))
        table: dict[str, tuple[str, int]] = {dst: ("", 0)}
        queue = deque([dst])
        while queue:
            node = queue.popleft()
            dist = table[node][1]
            for pid, label in sorted(incoming.get(node, ())):
                if pid not in table:
                    table[pid] = (label, dist + 1)
                    queue.append(pid)
        return table


def render_page(page: Page) -> str:
    lines = [f"== {page.title} =="] + list(page.body)
    lines.append("Links: " + " ".join(f"[{label}]" for label, _ in page.all_links()))
    if page.search:
        lines.append("Search box: search[<words>] finds forum threads.")
    return "\n".join(lines)


@functools.lru_cache(maxsize=32)
def site(seed: int, difficulty: str) -> Site:
    return Site(seed, difficulty)


# --------------------------------------------------------------------------- answers


def normalize(text: str) -> str:
    """Case, spacing, quotes, thousands separators, a leading 'the', a 'km' unit and a final full stop
    do not matter."""
    text = re.sub(r"(?<=\d),(?=\d)", "", str(text)[:1000].lower())
    text = " ".join(re.findall(r"[a-z0-9@.:\-]+", text)).strip(".")
    text = re.sub(r"^the ", "", text)
    return re.sub(r"(?<=\d) ?km$", "", text)


# --------------------------------------------------------------------------- generator

_FACT_Q = {
    "town": [("Population", "What is the population of {name}?"), ("Founded", "In which year was {name} founded?"),
             ("Mayor", "Who is the mayor of {name}?")],
    "river": [("Length", "How long is {name}?"), ("Flows through", "Which town does {name} flow through?")],
    "company": [("Founded", "In which year was {name} founded?"), ("CEO", "Who is the CEO of {name}?"),
                ("Employees", "How many employees does {name} have?")],
}
_PERSON_Q = [("Phone", "What is the phone number of {name} from the {dept} department?"),
             ("Email", "What is the email address of {name} from the {dept} department?"),
             ("Office", "In which office does {name} from the {dept} department work?"),
             ("Role", "What is the role of {name} from the {dept} department?")]
TASK_KINDS = ("fact", "hop", "compare", "person", "forum", "form")


def _where(f: dict) -> str:
    """How a question names an article: its kind, and its region where the wiki is split by region."""
    named = f"the {f['name']}" if f["kind"] == "river" else f"the {f['kind']} {f['name']}"
    return named + (f" (in the {f['Region']} region)" if f.get("Region") else "")


def _make(rng: random.Random, s: Site, kind: str) -> dict:
    arts = s.articles
    names = sorted(arts)
    if kind == "fact":
        name = rng.choice(names)
        f = s.entities["a:" + name]
        key, q = rng.choice(_FACT_Q[f["kind"]])
        question = q.format(name=_where(f))
        return {"kind": kind, "question": question, "waypoints": ["a:" + name], "answer": f[key], "key": key}
    if kind == "hop":
        co = [n for n in names if arts[n]["kind"] in ("company", "river")]
        name = rng.choice(co)
        f = s.entities["a:" + name]
        town = f.get("Headquarters") or f.get("Flows through")
        key = rng.choice(("Mayor", "Population", "Founded"))
        where = (f"the town where {_where(f)} has its headquarters" if f["kind"] == "company"
                 else f"the town that {_where(f)} flows through")
        question = {"Mayor": f"Who is the mayor of {where}?", "Population": f"What is the population of {where}?",
                    "Founded": f"In which year was {where} founded?"}[key]
        return {"kind": kind, "question": question, "waypoints": ["a:" + name, "a:" + town],
                "answer": arts[town][key], "key": key}
    if kind == "compare":
        ekind = rng.choice(("town", "company"))
        pool = [n for n in names if arts[n]["kind"] == ekind]
        a, b = rng.sample(pool, 2)
        if ekind == "town" and rng.random() < 0.5:
            key = "Population"
            question = f"Which town has more people: {_where(s.entities['a:' + a])} or {_where(s.entities['a:' + b])}?"
            winner = a if int(arts[a][key]) > int(arts[b][key]) else b
        else:
            key = "Founded"
            question = (f"Which {ekind} was founded earlier: {_where(s.entities['a:' + a])} or "
                        f"{_where(s.entities['a:' + b])}? Answer with its name.")
            winner = a if int(arts[a][key]) < int(arts[b][key]) else b
        return {"kind": kind, "question": question, "waypoints": ["a:" + a, "a:" + b], "answer": winner, "key": key}
    if kind == "person":
        pid = rng.choice(sorted(p for p in s.entities if p.startswith("p:")))
        f = s.entities[pid]
        key, q = rng.choice(_PERSON_Q)
        return {"kind": kind, "question": q.format(name=f["name"], dept=f["Department"]), "waypoints": [pid],
                "answer": f[key], "key": key}
    if kind == "forum":
        title = rng.choice(s.threads)
        f = s.entities["t:" + title]
        key = rng.choice(("Day", "Time", "Place"))
        q = {"Day": "On which day does the {t} meet?", "Time": "At what time does the {t} meet?",
             "Place": "Where does the {t} meet?"}[key].format(t=f["topic"].lower())
        return {"kind": kind, "question": f"According to the forum, {q[0].lower()}{q[1:]}", "waypoints": ["t:" + title],
                "answer": f[key], "key": key}
    # form: send a message; on medium/hard the email to use is looked up in the directory
    name = f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"
    dept = rng.choice(s.departments)
    subject = rng.choice(_SUBJECTS)
    waypoints = []
    if s.level["depth"] >= 2 and rng.random() < 0.5:
        pid = rng.choice(sorted(p for p in s.entities if p.startswith("p:")))
        f = s.entities[pid]
        name, email = f["name"], f["Email"]
        who = f"as {name} from the {f['Department']} department (use the email address listed in the directory)"
        waypoints.append(pid)
    else:
        email = f"{name.split()[0].lower()}{rng.randrange(10, 99)}@mail.com"
        who = f"with name {name} and email {email}"
    question = f"Use the Contact page to send a message to the {dept} department {who}, with subject '{subject}'."
    values = {"name": name, "email": email, "department": dept, "subject": subject}
    return {"kind": "form", "question": question, "waypoints": waypoints + ["contact"], "answer": None, "form": values}


def expert_cost(s: Site, spec: dict) -> int:
    """Turns the expert needs: shortest click paths between the waypoints, then answer or fill and submit."""
    here, cost = "home", 0
    for w in spec["waypoints"]:
        if spec["kind"] == "forum":
            cost += 2  # search for the thread, open it
        else:
            cost += s.route(here, w)[1]
        here = w
    if spec["kind"] == "form":
        return cost + len(FORM_FIELDS) + 1
    return cost + 1


def generate(rng: random.Random, difficulty: str, index: int) -> Task:
    level = _LEVELS[difficulty]
    seed = rng.randrange(6)
    s = site(seed, difficulty)
    for _ in range(1000):
        spec = _make(rng, s, rng.choice(TASK_KINDS))
        if spec["kind"] == "forum" and spec["waypoints"][0][2:] not in s.search(spec["waypoints"][0][2:]):
            continue
        if expert_cost(s, spec) <= level["max_turns"]:
            break
    else:  # pragma: no cover
        raise RuntimeError(f"could not generate a {difficulty} web task")
    spec = dict(spec, site={"seed": seed, "difficulty": difficulty}, max_turns=level["max_turns"])
    return Task(
        id=f"web/{difficulty}/{index}",
        domain="web",
        instruction=spec["question"],
        spec=spec,
        answer=spec["answer"],
        difficulty=difficulty,
        meta={"task_kind": spec["kind"]},
    )


# --------------------------------------------------------------------------- environment

_PLAIN_BACK = {"back", "go back", "back()", "back[ ]"}


class WebEnv(Env):
    domain = "web"
    max_turns = 12
    intro = (
        "You browse a small website. Follow links with click[<link>], go back with back[], search the forum "
        "with search[<words>], fill a form with type[<field>][<text>], and finish with answer(<answer>)."
    )

    def __deepcopy__(self, memo):
        new = copy.copy(self)  # the site and task are immutable and shared
        new.history = list(self.history)
        new.visited = set(self.visited)
        new.fields = dict(self.fields)
        new.last_info = dict(self.last_info)
        return new

    def step(self, assistant_text: str):
        """Accept a plain `back` (the grammar's form is back[])."""
        if isinstance(assistant_text, str) and len(assistant_text) < 10000 and "back" in assistant_text.lower():
            turn = parse_turn(assistant_text)
            if isinstance(turn, ParsedTurn) and turn.action.strip().lower() in _PLAIN_BACK:
                assistant_text = format_turn(turn.thought or "Go back.", "back[]")
        return super().step(assistant_text)

    def _setup(self, task: Task) -> None:
        spec = task.spec
        self._turns_from(spec)
        self.site = site(int(spec["site"]["seed"]), spec["site"]["difficulty"])
        self.spec = spec
        self.page = "home"
        self.results: tuple[str, ...] = ()  # thread titles on the current search-results page
        self.history: list[tuple[str, tuple[str, ...]]] = []
        self.visited: set[str] = {"home"}
        self.fields = {f: "" for f in FORM_FIELDS}
        self.submitted: dict[str, str] | None = None

    def _initial_observation(self) -> str:
        return "\n\n" + self._render()

    # ---------------------------------------------------------------- pages
    def _links(self) -> dict[str, str]:
        if self.page == "results":
            out = {"home": "home", "forum": "forum"}
            out.update({t.lower(): "t:" + t for t in self.results})
            return out
        if self.page == "submitted":
            return {"home": "home"}
        return self.site.links[self.page]

    def _render(self) -> str:
        if self.page == "results":
            found = " ".join(f"[{t}]" for t in self.results) if self.results else "(no threads found)"
            return ("== Search results ==\nForum threads: " + found + "\nLinks: [Home] [Forum]\n"
                    "Search box: search[<words>] finds forum threads.")
        if self.page == "submitted":
            return "== Message sent ==\nThank you, your message was sent.\nLinks: [Home]"
        text = self.site.rendered[self.page]
        if self.page == "contact":
            values = "; ".join(f"{k} = '{v}'" for k, v in self.fields.items())
            text += f"\nForm fields: {values}\nFill a field with type[<field>][<text>]."
        return text

    def _go(self, page: str, results: tuple[str, ...] = ()) -> str:
        self.history.append((self.page, self.results))
        if len(self.history) > 100:
            del self.history[0]
        self.page, self.results = page, results
        self.visited.add(page)
        return self._render()

    # ---------------------------------------------------------------- actions
    def _execute(self, action: Action) -> str:
        name = action.name.lower()
        arg = action.arg
        if name == "click":
            label = arg.strip().strip("[]").strip()
            target = self._links().get(label.lower())
            if target is None:
                raise InvalidAction(f"There is no link named {echoed(label)!r} on this page. Click one of the links "
                                    "listed after 'Links:' (or a search result), exactly as written.")
            if target == "submit":
                return self._submit()
            return self._go(target)
        if name == "back":
            if not self.history:
                raise InvalidAction("There is no previous page to go back to.")
            self.page, self.results = self.history.pop()
            return self._render()
        if name == "search":
            query = " ".join(arg.split())
            if not query:
                raise InvalidAction("The search is empty. Use search[<words>].")
            has_box = self.page == "results" or self.site.pages.get(self.page, Page("", "", (), ())).search
            if not has_box:
                raise InvalidAction("There is no search box on this page. Go to Home or the Forum to search.")
            return self._go("results", tuple(self.site.search(query)))
        if name == "type":
            if self.page != "contact":
                raise InvalidAction("There is no form on this page. The form is on the Contact page.")
            parts = re.split(r"\]\s*\[", arg, maxsplit=1)
            if len(parts) != 2:
                raise InvalidAction("Use type[<field>][<text>], e.g. type[name][Ada Brook].")
            field, text = parts[0].strip().lower(), " ".join(parts[1].split())
            if field not in self.fields:
                raise InvalidAction(f"There is no field {echoed(field, 40)!r}. Fields: {', '.join(FORM_FIELDS)}.")
            if len(text) > 200:
                raise InvalidAction("That text is too long for the field (200 characters at most).")
            self.fields[field] = text
            return self._render()
        raise InvalidAction(f"Unknown action {echoed(action.name, 30)!r}. Use click[<link>], search[<words>], "
                            "type[<field>][<text>], back[] or answer(<answer>).")

    def _submit(self) -> str:
        empty = [k for k, v in self.fields.items() if not v]
        if empty:
            raise InvalidAction(f"The form is incomplete; fill in: {', '.join(empty)}.")
        self.submitted = dict(self.fields)
        self.history.append((self.page, self.results))
        self.page, self.results = "submitted", ()
        return self._render()

    def _goal_reached(self) -> bool:
        return self.submitted is not None and self.spec["kind"] == "form"

    def _score(self, answer_text: str | None) -> float:
        if self.spec["kind"] == "form":
            if self.submitted is None:
                return 0.0
            want = self.spec["form"]
            return 1.0 if all(normalize(self.submitted[k]) == normalize(v) for k, v in want.items()) else 0.0
        if answer_text is None:
            return 0.0
        return 1.0 if normalize(answer_text) == normalize(self.spec["answer"]) else 0.0

    # ---------------------------------------------------------------- expert
    def expert_action(self) -> str:
        spec = self.spec
        for w in spec["waypoints"]:
            if w in self.visited and not (w == "contact" and self.page != "contact"):
                continue
            title = self.site.pages[w].title
            if spec["kind"] == "forum":
                if self.page == "results" and w[2:] in self.results:
                    return expert_turn(f"The thread '{title}' is in the results. I will open it.", f"click[{title}]")
                if self.page == "results" or self.site.pages[self.page].search:
                    return expert_turn(f"I will search the forum for the {title} thread.", f"search[{title}]")
                return expert_turn("I need a page with the search box. I will go Home.", "click[Home]")
            if self.page == "results" or self.page == "submitted":
                return expert_turn(f"I need the page {title}. I will go Home first.", "click[Home]")
            label, _ = self.site.route(self.page, w)
            return expert_turn(f"{self._plan(w)} The next link on the way is {label}.", f"click[{label}]")
        if spec["kind"] == "form":
            for k, v in spec["form"].items():
                if normalize(self.fields[k]) != normalize(v):
                    return expert_turn(f"I fill in the {k} field.", f"type[{k}][{v}]")
            return expert_turn("All fields are filled in. I will submit the form.", "click[Submit]")
        key = spec["key"]
        if spec["kind"] == "compare":
            a, b = (self.site.entities[w] for w in spec["waypoints"])
            return expert_turn(f"{a['name']}: {key} {a[key]}; {b['name']}: {key} {b[key]}. So the answer is "
                               f"{spec['answer']}.", f"answer({spec['answer']})")
        return expert_turn(f"The page says {key}: {spec['answer']}.", f"answer({spec['answer']})")

    def _plan(self, waypoint: str) -> str:
        """The expert's thought on the way to `waypoint`. For tasks that need two pages it restates what the
        first page said (or, before it, that both are needed), so the model copies it from the last turn
        instead of from a page several turns back."""
        spec = self.spec
        title = self.site.pages[waypoint].title
        waypoints = spec["waypoints"]
        if spec["kind"] == "compare":
            first = self.site.entities[waypoints[0]]
            if waypoint == waypoints[0]:
                return f"I need the pages {first['name']} and {self.site.pages[waypoints[1]].title}; first {title}."
            return f"{first['name']}: {spec['key']} {first[spec['key']]}. Now I need the page {title}."
        if spec["kind"] == "hop" and waypoint == waypoints[1]:
            first = self.site.entities[waypoints[0]]
            link = "Headquarters" if "Headquarters" in first else "Flows through"
            return f"{first['name']}: {link} {first[link]}. Now I need the page {title}."
        return f"I need the page {title}."

    # ---------------------------------------------------------------- random baseline
    def random_action(self, rng: random.Random) -> str:
        roll = rng.random()
        if roll < 0.65:
            labels = [label for label, _ in self.site.pages[self.page].all_links()] if self.page in self.site.pages \
                else list(self.results) + ["Home"]
            return expert_turn("I will follow a link.", f"click[{rng.choice(labels)}]")
        if roll < 0.75:
            return expert_turn("I will go back.", "back[]")
        words = re.findall(r"[A-Za-z0-9]+", self._render())
        if roll < 0.85:
            return expert_turn("I will search.", f"search[{' '.join(rng.sample(words, min(2, len(words))))}]")
        if roll < 0.93:
            return expert_turn("I will fill a field.", f"type[{rng.choice(FORM_FIELDS)}][{rng.choice(words)}]")
        return expert_turn("I will answer.", f"answer({rng.choice(words)})")


register_domain("web", WebEnv, generate)

"""Household: an ALFWorld-style text household, generated from a seed.

A room holds numbered receptacles (`countertop 1`, `cabinet 3`, `fridge 1`, ...), some of
which open and close, and numbered objects placed in them. The agent walks between
receptacles and moves objects with ALFWorld's commands (`go to X`, `open X`, `take O from R`,
`put O in/on R`, `clean/heat/cool O with R`, `use X`, ...). The six ALFWorld task types are
generated: pick-and-place, clean/heat/cool-then-place, look-at-object-in-light and pick-two.

The expert searches like a person would: it visits the receptacles where such an object is
usually kept, remembering what it has seen, so its trajectories never use hidden knowledge.
"""

from __future__ import annotations

import copy
import random
import re
from dataclasses import dataclass

from openmanus_lite.envs.base import Env, InvalidAction, echoed, expert_turn, register_domain
from openmanus_lite.react import Action
from openmanus_lite.schema import Task

# --------------------------------------------------------------------------- world data

ROOMS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # room: (receptacle types always present, optional receptacle types)
    "kitchen": (
        ("cabinet", "countertop", "fridge", "microwave", "sinkbasin", "garbagecan", "diningtable"),
        ("drawer", "shelf", "stoveburner", "coffeemachine", "toaster"),
    ),
    "livingroom": (
        ("sofa", "coffeetable", "sidetable", "garbagecan"),
        ("armchair", "tvstand", "drawer", "cabinet", "shelf", "dresser", "diningtable"),
    ),
    "bedroom": (
        ("bed", "desk", "drawer", "dresser", "garbagecan"),
        ("shelf", "sidetable", "laundryhamper", "armchair", "safe"),
    ),
    "bathroom": (
        ("toilet", "sinkbasin", "countertop", "cabinet", "garbagecan"),
        ("bathtubbasin", "drawer", "towelholder", "handtowelholder", "toiletpaperhanger", "shelf"),
    ),
}
SINGLE = {
    "fridge", "microwave", "sinkbasin", "garbagecan", "coffeemachine", "toaster", "bed", "toilet",
    "bathtubbasin", "sofa", "tvstand", "laundryhamper", "towelholder", "handtowelholder",
    "toiletpaperhanger", "safe", "coffeetable",
}
OPENABLE = {"cabinet", "drawer", "fridge", "microwave", "safe"}
ALWAYS_CLOSED = {"fridge", "microwave"}
LAMP_HOSTS = ("desk", "sidetable", "dresser")
APPLIANCE = {"clean": "sinkbasin", "heat": "microwave", "cool": "fridge"}
STATE_WORD = {"clean": "clean", "heat": "hot", "cool": "cool"}

# object: rooms (k kitchen, l livingroom, b bedroom, t bathroom), usual places, treatments
# (c clean, h heat, k cool). The expert searches the usual places in the order listed.
_OBJECT_TABLE = """
apple k countertop,diningtable,fridge,garbagecan chk
potato k countertop,diningtable,fridge,garbagecan chk
tomato k countertop,diningtable,fridge chk
egg k countertop,diningtable,fridge hk
lettuce k countertop,diningtable,fridge ck
bread k countertop,diningtable,toaster hk
mug kb countertop,cabinet,coffeemachine,shelf,desk chk
cup k countertop,cabinet,diningtable,shelf chk
plate k countertop,cabinet,diningtable chk
bowl kl countertop,cabinet,diningtable,coffeetable,shelf chk
pan k stoveburner,countertop,cabinet ck
pot k stoveburner,countertop,cabinet ck
knife k countertop,diningtable,drawer c
butterknife k countertop,diningtable,drawer c
fork k countertop,diningtable,drawer c
spoon k countertop,diningtable,drawer c
spatula k countertop,diningtable,drawer c
ladle k countertop,diningtable,drawer c
kettle k stoveburner,countertop,cabinet c
winebottle k countertop,diningtable,cabinet,shelf k
saltshaker k countertop,diningtable,shelf -
peppershaker k countertop,diningtable,shelf -
dishsponge kt countertop,sinkbasin,drawer,cabinet c
soapbottle kt countertop,toilet,sinkbasin,cabinet,shelf -
remotecontrol l sofa,coffeetable,armchair,sidetable,tvstand -
keychain lb sidetable,coffeetable,dresser,desk,drawer,shelf -
creditcard lb coffeetable,sidetable,desk,dresser,sofa,drawer -
newspaper l sofa,coffeetable,armchair,sidetable -
statue l coffeetable,sidetable,tvstand,shelf,dresser -
vase lb sidetable,coffeetable,shelf,dresser,tvstand -
box l coffeetable,sofa,sidetable,tvstand,dresser -
laptop lb bed,sofa,desk,coffeetable,diningtable,armchair -
pillow lb bed,sofa,armchair -
watch lb sidetable,coffeetable,dresser,desk,drawer -
tissuebox lt coffeetable,sidetable,countertop,toilet,shelf -
alarmclock b desk,dresser,sidetable,shelf -
book bl bed,desk,sidetable,coffeetable,shelf,dresser -
cd b desk,shelf,sidetable,drawer,safe -
cellphone bl bed,desk,sidetable,dresser,sofa,drawer -
pen b desk,sidetable,shelf,drawer -
pencil b desk,sidetable,shelf,drawer -
teddybear b bed,armchair,dresser,shelf -
soapbar t countertop,sinkbasin,toilet,bathtubbasin,cabinet c
spraybottle t countertop,toilet,cabinet,shelf,garbagecan -
toiletpaper t toiletpaperhanger,countertop,toilet,cabinet,shelf -
towel t towelholder,countertop,bathtubbasin -
handtowel t handtowelholder,countertop,cabinet -
candle t countertop,toilet,cabinet,shelf -
cloth t countertop,bathtubbasin,sinkbasin,cabinet,drawer c
scrubbrush t toilet,countertop,cabinet -
"""
_ROOM_CODE = {"k": "kitchen", "l": "livingroom", "b": "bedroom", "t": "bathroom"}
_TREAT_CODE = {"c": "clean", "h": "heat", "k": "cool"}


@dataclass(frozen=True)
class ObjectKind:
    name: str
    rooms: frozenset[str]
    places: tuple[str, ...]
    treatments: frozenset[str]


def _load_objects() -> dict[str, ObjectKind]:
    kinds = {}
    for line in _OBJECT_TABLE.strip().splitlines():
        name, rooms, places, treat = line.split()
        kinds[name] = ObjectKind(
            name,
            frozenset(_ROOM_CODE[c] for c in rooms),
            tuple(places.split(",")),
            frozenset(_TREAT_CODE[c] for c in treat if c in _TREAT_CODE),
        )
    return kinds


OBJECTS = _load_objects()
LAMP = "desklamp"

TASK_TYPES = ("pick_and_place", "pick_clean_then_place", "pick_heat_then_place", "pick_cool_then_place",
              "look_at_obj_in_light", "pick_two_obj_and_place")
_TREATMENT_OF = {"pick_clean_then_place": "clean", "pick_heat_then_place": "heat", "pick_cool_then_place": "cool"}
_ROOMS_FOR = {
    "pick_clean_then_place": ("kitchen", "bathroom"),
    "pick_heat_then_place": ("kitchen",),
    "pick_cool_then_place": ("kitchen",),
    "look_at_obj_in_light": ("bedroom", "livingroom"),
}

_LEVELS = {
    # max instances per receptacle type, chance of each optional type, distractor objects,
    # chance that a cabinet/drawer/safe starts closed, turn budget
    "easy": {"max_count": 2, "p_optional": 0.3, "distractors": (3, 6), "p_closed": 0.0, "max_turns": 30},
    "medium": {"max_count": 3, "p_optional": 0.5, "distractors": (6, 10), "p_closed": 0.6, "max_turns": 40},
    "hard": {"max_count": 5, "p_optional": 0.8, "distractors": (10, 16), "p_closed": 1.0, "max_turns": 50},
}


def kind_of(name: str) -> str:
    """'alarmclock 2' -> 'alarmclock'."""
    return name.rsplit(" ", 1)[0]


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def _listing(names: list[str]) -> str:
    """ALFWorld's list style: 'a mug 2, a cup 1, and a plate 3' (it writes 'a' before every name)."""
    items = [f"a {n}" for n in names]
    if len(items) <= 1:
        return "".join(items)
    if len(items) == 2:
        return f"{items[0]}, and {items[1]}"
    return ", ".join(items[:-1]) + f", and {items[-1]}"


_INSIDE = OPENABLE | {"sinkbasin", "bathtubbasin", "garbagecan", "laundryhamper", "coffeemachine", "toaster"}


def instruction_for(goal: dict) -> str:
    """ALFWorld's task sentences, e.g. 'heat some egg and put it in garbagecan.'"""
    kind, target, ttype = goal["object"], goal["target"], goal["type"]
    prep = "in" if target in _INSIDE else "on"
    if ttype == "pick_and_place":
        return f"put {_article(kind)} {kind} {prep} {target}."
    if ttype in _TREATMENT_OF:
        verb = _TREATMENT_OF[ttype]
        return f"{verb} some {kind} and put it {prep} {target}."
    if ttype == "look_at_obj_in_light":
        return f"look at {kind} under the {LAMP}."
    return f"find two {kind} and put them {prep} {target}."


# --------------------------------------------------------------------------- command parser


@dataclass(frozen=True)
class Command:
    verb: str
    obj: str = ""
    target: str = ""


_NAME = r"([a-z][a-z\-]*(?: \d+)?)"
_COMMAND_PATTERNS = [
    ("go", re.compile(rf"^go to (?:the )?{_NAME}$")),
    ("open", re.compile(rf"^open (?:the )?{_NAME}$")),
    ("close", re.compile(rf"^close (?:the )?{_NAME}$")),
    ("take", re.compile(rf"^(?:take|pick up|get) (?:the )?{_NAME}(?: (?:from|in|on|off) (?:the )?{_NAME})?$")),
    ("put", re.compile(rf"^(?:put|place|move) (?:the )?{_NAME} (?:in/on|in|on|into|onto|to) (?:the )?{_NAME}$")),
    ("clean", re.compile(rf"^clean (?:the )?{_NAME} (?:with|in|using) (?:the )?{_NAME}$")),
    ("heat", re.compile(rf"^heat (?:the )?{_NAME} (?:with|in|using) (?:the )?{_NAME}$")),
    ("cool", re.compile(rf"^cool (?:the )?{_NAME} (?:with|in|using) (?:the )?{_NAME}$")),
    ("use", re.compile(rf"^(?:use|toggle|turn on|switch on) (?:the )?{_NAME}$")),
    ("examine", re.compile(rf"^(?:examine|look at|inspect) (?:the )?{_NAME}$")),
    ("inventory", re.compile(r"^(?:inventory|inv|i)$")),
    ("look", re.compile(r"^(?:look|look around)$")),
]
COMMAND_HELP = (
    "Valid commands: go to <receptacle>, open <receptacle>, close <receptacle>, take <object> from "
    "<receptacle>, put <object> in/on <receptacle>, clean/heat/cool <object> with <receptacle>, "
    "use <object>, examine <thing>, inventory, look."
)


def parse_command(text: str) -> Command | str:
    """Parse one household command; returns a Command, or an error message for the agent."""
    if not isinstance(text, str):
        return "Nothing happens. A command is a line of text. " + COMMAND_HELP
    if len(text) > 300:
        return "Nothing happens. That command is far too long. " + COMMAND_HELP
    s = " ".join(text.strip().lower().split()).rstrip(".!")
    for verb, pattern in _COMMAND_PATTERNS:
        m = pattern.match(s)
        if m:
            groups = [g or "" for g in m.groups()] + ["", ""]
            return Command(verb, groups[0], groups[1])
    return f"Nothing happens. I do not understand {echoed(s, 60)!r}. " + COMMAND_HELP


# --------------------------------------------------------------------------- generator


def _build_room(rng: random.Random, room: str, level: dict, need: set[str]) -> list[str]:
    required, optional = ROOMS[room]
    types = list(required) + [t for t in optional if t in need or rng.random() < level["p_optional"]]
    receptacles = []
    for rtype in types:
        count = 1 if rtype in SINGLE else rng.randint(1, level["max_count"])
        receptacles += [f"{rtype} {i}" for i in range(1, count + 1)]
    return receptacles


def _candidates(places: tuple[str, ...], receptacles: list[str]) -> list[str]:
    """Where the expert looks for an object, in order: its usual places, by type order then number."""
    by_type: dict[str, list[str]] = {}
    for r in receptacles:
        by_type.setdefault(kind_of(r), []).append(r)
    return [r for t in places for r in by_type.get(t, [])]


def generate(rng: random.Random, difficulty: str, index: int) -> Task:
    level = _LEVELS[difficulty]
    for _ in range(1000):
        spec = _try_generate(rng, difficulty, level)
        if spec is not None and expert_cost(spec) <= spec["max_turns"]:
            break
    else:  # pragma: no cover - the tables above always allow a task
        raise RuntimeError(f"could not generate a {difficulty} household task; check the tables in household.py")
    goal = spec["goal"]
    return Task(
        id=f"household/{difficulty}/{index}",
        domain="household",
        instruction=instruction_for(goal),
        spec=spec,
        answer=None,
        difficulty=difficulty,
        meta={"task_type": goal["type"], "room": spec["room"]},
    )


def _try_generate(rng: random.Random, difficulty: str, level: dict) -> dict | None:
    ttype = rng.choice(TASK_TYPES)
    room = rng.choice(_ROOMS_FOR.get(ttype, tuple(ROOMS)))
    treatment = _TREATMENT_OF.get(ttype)
    room_types = set(ROOMS[room][0]) | set(ROOMS[room][1])
    kinds = [
        k for k in OBJECTS.values()
        if room in k.rooms and (treatment is None or treatment in k.treatments)
        and any(p in room_types for p in k.places)
    ]
    kind = rng.choice(kinds)
    need = {p for p in kind.places if p in room_types}
    if ttype == "look_at_obj_in_light":
        need.add(rng.choice([h for h in LAMP_HOSTS if h in room_types]))
    receptacles = _build_room(rng, room, level, need)
    present = {kind_of(r) for r in receptacles}
    # the goal receptacle type: any present type the object does not start in
    if ttype == "look_at_obj_in_light":
        target = LAMP
    else:
        choices = sorted(present - ({APPLIANCE[treatment]} if treatment else set()))
        target = rng.choice(choices)
    start_types = [p for p in kind.places if p in present and p != target]
    closed = {r for r in receptacles if kind_of(r) in ALWAYS_CLOSED or
              (kind_of(r) in OPENABLE and rng.random() < level["p_closed"])}
    starts = [r for r in _candidates(tuple(start_types), receptacles)
              if not (difficulty == "easy" and r in closed)
              and not (treatment == "cool" and kind_of(r) == "fridge")]
    if not starts:
        return None
    n_targets = 2 if ttype == "pick_two_obj_and_place" else 1
    n_targets += rng.randint(0, 1)
    placements: dict[str, str] = {}
    numbers = rng.sample(range(1, n_targets + 4), n_targets)
    for n in numbers:
        placements[f"{kind.name} {n}"] = rng.choice(starts)
    if ttype == "look_at_obj_in_light":
        hosts = [r for r in receptacles if kind_of(r) in LAMP_HOSTS]
        placements[f"{LAMP} 1"] = rng.choice(hosts)
    # distractors: other objects of this room at their usual places
    others = [k for k in OBJECTS.values() if room in k.rooms and k.name != kind.name]
    for _ in range(rng.randint(*level["distractors"])):
        other = rng.choice(others)
        spots = _candidates(other.places, receptacles)
        if not spots:
            continue
        n = 1 + sum(1 for o in placements if kind_of(o) == other.name)
        placements[f"{other.name} {n}"] = rng.choice(spots)
    goal = {"type": ttype, "object": kind.name, "target": target}
    objects = list(placements.items())
    rng.shuffle(objects)
    return {
        "room": room,
        "receptacles": receptacles,
        "closed": sorted(closed),
        "objects": dict(objects),
        "goal": goal,
        "max_turns": level["max_turns"],
    }


def expert_cost(spec: dict) -> int:
    """The exact number of turns the expert takes on `spec` (the generator keeps it within budget).

    Mirrors HouseholdEnv.expert_action: search the usual places in order (go, and open when
    closed), take the object, treat it, find and use the lamp or go to the goal receptacle
    (open it when closed) and put the object there; twice for pick-two.
    """
    goal = spec["goal"]
    kind = OBJECTS[goal["object"]]
    receptacles = spec["receptacles"]
    objects = spec["objects"]
    closed = set(spec["closed"])
    order = _candidates(kind.places, receptacles)
    searched: list[str] = []
    cost = 0
    here = None

    def visit(r: str) -> None:
        nonlocal cost, here
        if here != r:
            cost += 1
            here = r
        if r in closed:
            cost += 1
            closed.discard(r)
        searched.append(r)

    def wanted_seen(exclude: set[str]) -> str | None:
        for r in searched:
            for o, loc in objects.items():
                if loc == r and kind_of(o) == kind.name and o not in exclude:
                    return o
        return None

    rounds = 2 if goal["type"] == "pick_two_obj_and_place" else 1
    placed: set[str] = set()
    goal_recep = None
    if goal["type"] != "look_at_obj_in_light":
        goal_recep = _candidates((goal["target"],), receptacles)[0]
    for _ in range(rounds):
        obj = wanted_seen(placed)
        queue = [r for r in order if r not in searched]
        while obj is None:
            visit(queue.pop(0))
            obj = wanted_seen(placed)
        if here != objects[obj]:
            cost += 1
            here = objects[obj]
        cost += 1  # take
        ttype = goal["type"]
        if ttype in _TREATMENT_OF:
            appliance = _candidates((APPLIANCE[_TREATMENT_OF[ttype]],), receptacles)[0]
            cost += (here != appliance) + 1  # go to the appliance, treat
            here = appliance
        if ttype == "look_at_obj_in_light":
            lamp_at = objects[f"{LAMP} 1"]
            hosts = [r for r in receptacles if kind_of(r) in LAMP_HOSTS]
            if lamp_at not in searched:
                for r in hosts:
                    if r in searched:
                        continue
                    visit(r)
                    if r == lamp_at:
                        break
            if here != lamp_at:
                cost += 1
            return cost + 1  # use the lamp
        if here != goal_recep:
            cost += 1
            here = goal_recep
        if goal_recep in closed:
            cost += 1
            closed.discard(goal_recep)
        cost += 1  # put
        objects = dict(objects, **{obj: goal_recep})
        placed.add(obj)
        if goal_recep not in searched:
            searched.append(goal_recep)
    return cost


# --------------------------------------------------------------------------- environment


class HouseholdEnv(Env):
    domain = "household"
    max_turns = 40
    intro = (
        "You are in a household. Walk to receptacles, open them, and take, put, clean, heat or cool "
        "objects to complete the task. 'Nothing happens.' means the command did not work."
    )

    # the mutable state is a few small dicts and sets; the task and room layout are shared
    def __deepcopy__(self, memo):
        new = copy.copy(self)
        new.where = dict(self.where)
        new.closed = set(self.closed)
        new.treated = {k: set(v) for k, v in self.treated.items()}
        new.lamps_on = set(self.lamps_on)
        new.seen = list(self.seen)
        new.last_info = dict(self.last_info)
        return new

    def _setup(self, task: Task) -> None:
        spec = task.spec
        self._turns_from(spec)
        self.receptacles: tuple[str, ...] = tuple(spec["receptacles"])
        self.recep_set = frozenset(self.receptacles)
        self.goal = spec["goal"]
        self.where: dict[str, str] = dict(spec["objects"])  # object -> receptacle, or "hand"
        self.closed: set[str] = set(spec["closed"])
        self.treated: dict[str, set[str]] = {"clean": set(), "heat": set(), "cool": set()}
        self.lamps_on: set[str] = set()
        self.loc: str | None = None
        self.holding: str | None = None
        self.seen: list[str] = []  # receptacles whose contents the agent has seen, in order
        kind = OBJECTS[self.goal["object"]]
        self.goal_objects = tuple(o for o in self.where if kind_of(o) == kind.name)  # in spec order
        self.search_order = tuple(_candidates(kind.places, self.receptacles))
        self.goal_recep = None
        if self.goal["type"] != "look_at_obj_in_light":
            self.goal_recep = _candidates((self.goal["target"],), self.receptacles)[0]

    def _initial_observation(self) -> str:
        return f"\n\nYou are in the middle of a room. Looking quickly around you, you see {_listing(list(self.receptacles))}."

    # ---------------------------------------------------------------- helpers
    def _contents(self, recep: str) -> list[str]:
        return [o for o, loc in self.where.items() if loc == recep]

    def _view(self, recep: str) -> str:
        """What the agent sees at a receptacle (and it remembers having seen it)."""
        if recep in self.closed:
            return f"The {recep} is closed."
        if recep not in self.seen:
            self.seen.append(recep)
        items = self._contents(recep)
        seen = _listing(items) if items else "nothing"
        if kind_of(recep) in OPENABLE:
            return f"The {recep} is open. In it, you see {seen}."
        return f"On the {recep}, you see {seen}."

    def _resolve(self, name: str, what: str) -> str:
        """Map a typed name to a receptacle or object in the room; 'fridge' alone works when unique."""
        if not name:
            raise InvalidAction(f"Nothing happens. Say which {what}.")
        if name in self.recep_set or name in self.where:
            return name
        if " " not in name:
            matches = [r for r in self.receptacles if kind_of(r) == name] + [o for o in self.where if kind_of(o) == name]
            if len(matches) == 1:
                return matches[0]
            if matches:
                raise InvalidAction(f"Nothing happens. Which {name}? Add its number, e.g. {matches[0]}.")
        raise InvalidAction(f"Nothing happens. There is no {echoed(name, 60)} here.")

    def _need_here(self, recep: str) -> None:
        if recep not in self.recep_set:
            raise InvalidAction(f"Nothing happens. The {recep} is not a receptacle.")
        if self.loc != recep:
            raise InvalidAction(f"Nothing happens. You are not at the {recep}; go to {recep} first.")

    def _need_holding(self, obj: str) -> None:
        if self.holding != obj:
            have = f"You are carrying {self.holding}." if self.holding else "You are not carrying anything."
            raise InvalidAction(f"Nothing happens. You need to hold the {obj} first. {have}")

    # ---------------------------------------------------------------- actions
    def _execute(self, action: Action) -> str:
        cmd = parse_command(action.arg)
        if isinstance(cmd, str):
            raise InvalidAction(cmd)
        return getattr(self, f"_do_{cmd.verb}")(cmd)

    def _do_go(self, cmd: Command) -> str:
        recep = self._resolve(cmd.obj, "receptacle")
        if recep not in self.recep_set:
            raise InvalidAction(f"Nothing happens. You can only go to a receptacle, e.g. go to {self.receptacles[0]}.")
        self.loc = recep
        return self._view(recep)

    def _do_open(self, cmd: Command) -> str:
        recep = self._resolve(cmd.obj, "receptacle")
        self._need_here(recep)
        if kind_of(recep) not in OPENABLE:
            raise InvalidAction(f"Nothing happens. The {recep} cannot be opened.")
        if recep not in self.closed:
            raise InvalidAction(f"Nothing happens. The {recep} is already open.")
        self.closed.discard(recep)
        return f"You open the {recep}. " + self._view(recep)

    def _do_close(self, cmd: Command) -> str:
        recep = self._resolve(cmd.obj, "receptacle")
        self._need_here(recep)
        if kind_of(recep) not in OPENABLE or recep in self.closed:
            raise InvalidAction(f"Nothing happens. The {recep} is not open.")
        self.closed.add(recep)
        return f"You close the {recep}."

    def _do_take(self, cmd: Command) -> str:
        obj = self._resolve(cmd.obj, "object")
        recep = self._resolve(cmd.target, "receptacle") if cmd.target else self.loc
        if obj not in self.where:
            raise InvalidAction(f"Nothing happens. The {obj} cannot be picked up.")
        if recep is None:
            raise InvalidAction(f"Nothing happens. Go to the receptacle first, then take {obj} from it.")
        self._need_here(recep)
        if recep in self.closed:
            raise InvalidAction(f"Nothing happens. The {recep} is closed; open it first.")
        if self.where[obj] != recep:
            raise InvalidAction(f"Nothing happens. There is no {obj} in/on the {recep}.")
        if kind_of(obj) == LAMP:
            raise InvalidAction(f"Nothing happens. The {obj} cannot be picked up; use it where it is.")
        if self.holding is not None:
            raise InvalidAction(f"Nothing happens. You are already carrying {self.holding}; put it down first.")
        self.where[obj] = "hand"
        self.holding = obj
        return f"You pick up the {obj} from the {recep}."

    def _do_put(self, cmd: Command) -> str:
        obj = self._resolve(cmd.obj, "object")
        recep = self._resolve(cmd.target, "receptacle")
        self._need_holding(obj)
        self._need_here(recep)
        if recep in self.closed:
            raise InvalidAction(f"Nothing happens. The {recep} is closed; open it first.")
        self.where[obj] = recep
        self.holding = None
        return f"You put the {obj} in/on the {recep}."

    def _treat(self, cmd: Command, treatment: str) -> str:
        obj = self._resolve(cmd.obj, "object")
        recep = self._resolve(cmd.target, "receptacle")
        self._need_holding(obj)
        self._need_here(recep)
        if kind_of(recep) != APPLIANCE[treatment]:
            raise InvalidAction(f"Nothing happens. You cannot {treatment} with the {recep}; use a {APPLIANCE[treatment]}.")
        self.treated[treatment].add(obj)
        if treatment == "heat":
            self.treated["cool"].discard(obj)
        elif treatment == "cool":
            self.treated["heat"].discard(obj)
        return f"You {treatment} the {obj} using the {recep}."

    def _do_clean(self, cmd: Command) -> str:
        return self._treat(cmd, "clean")

    def _do_heat(self, cmd: Command) -> str:
        return self._treat(cmd, "heat")

    def _do_cool(self, cmd: Command) -> str:
        return self._treat(cmd, "cool")

    def _do_use(self, cmd: Command) -> str:
        thing = self._resolve(cmd.obj, "object")
        if kind_of(thing) != LAMP:
            raise InvalidAction(f"Nothing happens. The {thing} cannot be used.")
        if self.where.get(thing) != self.loc:
            raise InvalidAction(f"Nothing happens. The {thing} is not here.")
        self.lamps_on.add(thing)
        return f"You turn on the {thing}."

    def _do_examine(self, cmd: Command) -> str:
        thing = self._resolve(cmd.obj, "thing")
        if thing in self.recep_set:
            self._need_here(thing)
            return self._view(thing)
        if self.where[thing] not in ("hand", self.loc):
            raise InvalidAction(f"Nothing happens. The {thing} is not here.")
        if kind_of(thing) == LAMP:
            return f"The {thing} is {'on' if thing in self.lamps_on else 'off'}."
        states = [STATE_WORD[t] for t in ("clean", "heat", "cool") if thing in self.treated[t]]
        return f"This is a {' and '.join(states) + ' ' if states else ''}{thing}."

    def _do_inventory(self, cmd: Command) -> str:
        return f"You are carrying: a {self.holding}." if self.holding else "You are not carrying anything."

    def _do_look(self, cmd: Command) -> str:
        where = f"You are at the {self.loc}." if self.loc else "You are in the middle of a room."
        return f"{where} Looking around, you see {_listing(list(self.receptacles))}."

    # ---------------------------------------------------------------- goal and score
    def _satisfies(self, obj: str) -> bool:
        treatment = _TREATMENT_OF.get(self.goal["type"])
        return treatment is None or obj in self.treated[treatment]

    def _goal_reached(self) -> bool:
        ttype, target = self.goal["type"], self.goal["target"]
        if ttype == "look_at_obj_in_light":
            return (self.holding is not None and kind_of(self.holding) == self.goal["object"]
                    and any(self.where[lamp] == self.loc for lamp in self.lamps_on))
        counts: dict[str, int] = {}
        for obj in self.goal_objects:
            loc = self.where[obj]
            if loc != "hand" and kind_of(loc) == target and self._satisfies(obj):
                counts[loc] = counts.get(loc, 0) + 1
        need = 2 if ttype == "pick_two_obj_and_place" else 1
        return any(c >= need for c in counts.values())

    def _score(self, answer_text: str | None) -> float:
        return 1.0 if self._goal_reached() else 0.0

    # ---------------------------------------------------------------- expert
    def _known(self, exclude_at: str | None) -> str | None:
        """A wanted object the agent has already seen (not yet in the goal receptacle): the one at the
        receptacle seen first, as expert_cost assumes."""
        best, best_rank = None, len(self.seen)
        for o in self.goal_objects:
            loc = self.where[o]
            if loc == exclude_at or loc == "hand" or loc not in self.seen:
                continue
            rank = self.seen.index(loc)
            if rank < best_rank:
                best, best_rank = o, rank
        return best

    def expert_action(self) -> str:
        goal = self.goal
        kind = goal["object"]
        ttype = goal["type"]
        held = self.holding
        if held is not None and kind_of(held) == kind:
            treatment = _TREATMENT_OF.get(ttype)
            if treatment and held not in self.treated[treatment]:
                appliance = _candidates((APPLIANCE[treatment],), self.receptacles)[0]
                if self.loc != appliance:
                    return expert_turn(f"I need to {treatment} the {held}. I will go to the {appliance}.", f"go to {appliance}")
                return expert_turn(f"I am at the {appliance}. I will {treatment} the {held}.",
                                   f"{treatment} {held} with {appliance}")
            if ttype == "look_at_obj_in_light":
                return self._expert_lamp(held)
            dest = self.goal_recep
            if self.loc != dest:
                return expert_turn(f"I have the {held}. Now I go to the {dest}.", f"go to {dest}")
            if dest in self.closed:
                return expert_turn(f"The {dest} is closed. I will open it.", f"open {dest}")
            return expert_turn(f"I put the {held} in/on the {dest}.", f"put {held} in/on {dest}")
        if held is not None:  # something else in hand (after other moves): put it down here
            if self.loc is None:
                return expert_turn(f"I must put down the {held} first. I will go to the {self.receptacles[0]}.",
                                   f"go to {self.receptacles[0]}")
            if self.loc in self.closed:
                return expert_turn(f"I must put down the {held} first. I will open the {self.loc}.", f"open {self.loc}")
            return expert_turn(f"I do not need the {held}. I will put it down.", f"put {held} in/on {self.loc}")
        obj = self._known(exclude_at=self.goal_recep)
        if obj is not None:
            at = self.where[obj]
            if self.loc != at:
                return expert_turn(f"I saw a {kind} at the {at}. I will go there.", f"go to {at}")
            if at in self.closed:
                return expert_turn(f"The {at} is closed. I will open it.", f"open {at}")
            return expert_turn(f"There is the {obj}. I will take it.", f"take {obj} from {at}")
        if self.loc is not None and self.loc in self.closed and self.loc in self.search_order:
            return expert_turn(f"The {self.loc} is closed. I will open it and look inside.", f"open {self.loc}")
        left = [r for r in self.search_order if r not in self.seen]
        if left:
            # The thought carries the search state (what was just ruled out, which places are left), so each
            # turn copies it from the turn before instead of recomputing it from the room listing.
            missed = self.loc in self.search_order and self.loc != self.goal_recep
            state = f"No {kind} at the {self.loc}." if missed else f"I need a {kind}."
            return expert_turn(f"{state} Still to check: {', '.join(left)}.", f"go to {left[0]}")
        return expert_turn(f"I have looked everywhere a {kind} is usually kept. I will look around.", "look")

    def _expert_lamp(self, held: str) -> str:
        lamp = f"{LAMP} 1"
        lamp_at = self.where[lamp]
        if lamp_at in self.seen:
            if self.loc != lamp_at:
                return expert_turn(f"I have the {held}. The {lamp} is at the {lamp_at}; I will go there.",
                                   f"go to {lamp_at}")
            return expert_turn(f"I will turn on the {lamp} to look at the {held}.", f"use {lamp}")
        left = [r for r in self.receptacles if kind_of(r) in LAMP_HOSTS and r not in self.seen]
        if left:
            # Like the object search, the thought carries the lamp places left; it names the lamp, so that
            # this second list is not mistaken for the object search's list.
            missed = self.loc is not None and kind_of(self.loc) in LAMP_HOSTS
            state = f"No {LAMP} at the {self.loc}." if missed else f"Now I need the {LAMP}."
            return expert_turn(f"I have the {held}. {state} The {LAMP} may be on: {', '.join(left)}.",
                               f"go to {left[0]}")
        return expert_turn("I cannot find the lamp. I will look around.", "look")

    # ---------------------------------------------------------------- random baseline
    def random_action(self, rng: random.Random) -> str:
        objs = list(self.where)
        recs = self.receptacles
        verb = rng.choice(("go", "go", "go", "open", "close", "take", "put", "treat", "use", "examine", "inventory",
                           "look"))
        if verb == "go":
            act = f"go to {rng.choice(recs)}"
        elif verb in ("open", "close"):
            act = f"{verb} {rng.choice(recs)}"
        elif verb == "take":
            act = f"take {rng.choice(objs)} from {rng.choice(recs)}"
        elif verb == "put":
            act = f"put {rng.choice(objs)} in/on {rng.choice(recs)}"
        elif verb == "treat":
            act = f"{rng.choice(('clean', 'heat', 'cool'))} {rng.choice(objs)} with {rng.choice(recs)}"
        elif verb in ("use", "examine"):
            act = f"{verb} {rng.choice(objs + list(recs))}"
        else:
            act = verb
        return expert_turn("I will try this.", act)


register_domain("household", HouseholdEnv, generate)

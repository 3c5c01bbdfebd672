"""The environment core: a gym-like, text-in/text-out `Env`, and the domain registry.

A domain module subclasses `Env` and implements four hooks:

    _setup(task)            build the world for the task (deterministic from task.spec)
    _execute(action)        run one parsed non-answer action -> observation text;
                            raise InvalidAction(msg) for an action that is well-formed
                            but not valid here (the message is shown to the agent)
    _score(answer_text)     the checker: outcome score in [0, 1] once the episode ends
                            (answer_text is None when the episode ended without answer(...))
    expert_action()         the expert's next assistant turn (Think/Act text) from the
                            current state; the expert solves every generated task
    random_action(rng)      a random but plausible assistant turn (the random baseline)

and registers itself with `register_domain(domain, env_cls, generate)`, where
`generate(rng, difficulty, index) -> Task`. Everything else (parsing, turn limit, an
optional limit on invalid actions in a row, info, reward, never raising on bad input) lives here once.
"""

from __future__ import annotations

import copy
import importlib
import numbers
import random
import traceback
from dataclasses import dataclass
from typing import Any, Callable

from openmanus_lite.react import ACTION_FORMS, Action, ParseError, format_turn, parse_step
from openmanus_lite.schema import StepResult, Task, Trajectory, Turn

DIFFICULTIES = ("easy", "medium", "hard")


ECHO_LIMIT = 80
"""Most characters of the agent's own text an observation quotes back (an unknown name, a bad argument)."""


def echoed(text: str, limit: int = ECHO_LIMIT) -> str:
    """`text` as an observation may quote it: cut to `limit` characters, saying how long it was, so that
    an observation does not grow with the action (a 1 MB action echoed whole fills the context)."""
    text = str(text)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


class InvalidAction(Exception):
    """A well-formed action that is not valid in the current state (shown to the agent)."""


class Env:
    """Base class; see the module docstring for the hooks a domain implements."""

    domain: str = ""
    max_turns: int = 10
    intro: str = ""
    """The domain's instructions, shown at the top of the first user message."""

    def __init__(self, max_turns: int | None = None, shaping: bool = False, max_invalid_streak: int | None = None):
        if max_turns is not None:
            self.max_turns = max_turns
        self._fixed_max_turns = max_turns
        if max_invalid_streak is not None and not _is_positive_whole(max_invalid_streak):
            raise ValueError(f"max_invalid_streak must be a whole number >= 1 or None, got {max_invalid_streak!r}")
        self.shaping = shaping
        self.max_invalid_streak = max_invalid_streak
        self.task: Task | None = None
        self.turn = 0
        self.done = False
        self.invalid_actions = 0
        self.invalid_streak = 0
        self.last_info: dict[str, Any] = {}

    # ---------------------------------------------------------------- public API
    def reset(self, task: Task) -> str:
        """Start an episode; returns the first user message (instructions + task)."""
        if task.domain != self.domain:
            raise ValueError(f"task {task.id!r} is for domain {task.domain!r}, not {self.domain!r}")
        self.task = task
        self.turn = 0
        self.done = False
        self.invalid_actions = 0
        self.invalid_streak = 0
        self.last_info = {}
        self._setup(task)
        return self.first_message()

    def first_message(self) -> str:
        return (
            f"{self.intro.strip()}\n\nReply in this format:\nThink: <your reasoning>\n"
            f"{ACTION_FORMS[self.domain]}\n\nYou have {self.max_turns} turns.\n\n"
            f"Task: {self.task.instruction}{self._initial_observation()}"
        )

    def step(self, assistant_text: str) -> StepResult:
        """One assistant turn -> observation. Never raises on anything the agent writes."""
        if self.task is None:
            raise RuntimeError("call reset(task) before step()")
        if self.done:
            return StepResult("The episode is over.", 0.0, True, dict(self.last_info, parsed=False, valid=False))
        self.turn += 1
        info: dict[str, Any] = {"turn": self.turn, "parsed": False, "valid": False}
        answer_text = None
        try:
            parsed = parse_step(assistant_text, self.domain)
            if isinstance(parsed, ParseError):
                observation = f"Invalid format. {parsed.message}"
            else:
                info["parsed"] = True
                _, action = parsed
                info["action"] = action.text
                if action.kind == "answer":
                    info["valid"] = True
                    answer_text = action.arg
                    self.done = True
                    observation = "Answer submitted."
                else:
                    observation = self._execute(action)
                    info["valid"] = True
        except InvalidAction as e:
            observation = str(e)
        except Exception as e:  # a bug in a domain must not crash the agent's episode
            observation = f"Error: {type(e).__name__}: {echoed(e, 4 * ECHO_LIMIT)}"
            info["internal_error"] = traceback.format_exc(limit=3)
        if not info["valid"]:
            self.invalid_actions += 1
        self.invalid_streak = 0 if info["valid"] else self.invalid_streak + 1
        info["invalid_actions"] = self.invalid_actions
        if self._goal_reached():
            self.done = True
        if self.max_invalid_streak and self.invalid_streak >= self.max_invalid_streak and not self.done:
            self.done = True  # scored as at the turn limit
            observation += f"\n{self.invalid_streak} invalid actions in a row: the episode ends."
        if self.turn >= self.max_turns and not self.done:
            self.done = True
            observation += "\nTurn limit reached."
        reward = 0.0
        if self.done:
            score = float(self._safe_score(answer_text))
            info["score"] = score
            info["success"] = score >= 1.0
            reward = score
        elif self.shaping:
            reward = self._shaping_reward(info)
        self.last_info = info
        return StepResult(observation, reward, self.done, info)

    def clone(self) -> "Env":
        """An independent copy (for tree search). The task is shared: it is read-only plain data.

        Domains whose state cannot be deep-copied (an sqlite connection) or is costly to
        deep-copy override this (or `__deepcopy__`)."""
        return copy.deepcopy(self, {id(self.task): self.task})

    # ---------------------------------------------------------------- hooks
    def _setup(self, task: Task) -> None:
        raise NotImplementedError

    def _initial_observation(self) -> str:
        """Text appended after the task (e.g. the first page or room description)."""
        return ""

    def _execute(self, action: Action) -> str:
        raise NotImplementedError

    def _goal_reached(self) -> bool:
        """True when the episode should end without an explicit answer (e.g. Buy Now)."""
        return False

    def _score(self, answer_text: str | None) -> float:
        raise NotImplementedError

    def _shaping_reward(self, info: dict[str, Any]) -> float:
        return -0.01 if not info["valid"] else 0.0

    def expert_action(self) -> str:
        raise NotImplementedError

    def random_action(self, rng: random.Random) -> str:
        raise NotImplementedError

    def typical_mistake(self, due: str, rng: random.Random) -> str | None:
        """A slip agents are known to make in this domain instead of the expert's `due` turn (the "typical"
        mistakes of recovery data, e.g. db's unquoted names), or None when there is none here."""
        return None

    def _turns_from(self, spec: dict[str, Any]) -> None:
        """For domains whose tasks carry their own turn limit (a level's): take it, unless the constructor fixed one."""
        if self._fixed_max_turns is None:
            self.max_turns = int(spec.get("max_turns", type(self).max_turns))

    def _safe_score(self, answer_text: str | None) -> float:
        try:
            return min(1.0, max(0.0, float(self._score(answer_text))))
        except Exception:
            return 0.0


def expert_turn(thought: str, action: str) -> str:
    """Helper for experts: a unified Think/Act turn."""
    return format_turn(thought, action)


# ---------------------------------------------------------------- registry


@dataclass
class DomainSpec:
    env_cls: type[Env]
    generate: Callable[[random.Random, str, int], Task]


_REGISTRY: dict[str, DomainSpec] = {}


def register_domain(domain: str, env_cls: type[Env], generate: Callable[[random.Random, str, int], Task]) -> None:
    _REGISTRY[domain] = DomainSpec(env_cls, generate)


DOMAIN_MODULES = ("os_shell", "sql_db", "web", "kg", "household", "shop")
"""The kit's domain modules under openmanus_lite.envs; each registers its domain when imported."""


_loaded = False


def _load_all() -> None:
    """Import every domain module once (a registry of plug-ins: the modules import this one, not the reverse);
    make_env calls this for every episode, so later calls return at once."""
    global _loaded
    if _loaded:
        return
    for name in DOMAIN_MODULES:
        importlib.import_module(f"openmanus_lite.envs.{name}")
    _loaded = True


def _spec(domain: str) -> DomainSpec:
    _load_all()
    if domain not in _REGISTRY:
        raise KeyError(f"unknown environment domain {domain!r}; available: {sorted(_REGISTRY)}")
    return _REGISTRY[domain]


def list_domains() -> list[str]:
    _load_all()
    return [d for d in ("os", "db", "web", "kg", "household", "ecommerce") if d in _REGISTRY]


EASY_TURN_LIMITS = {"os": 5, "db": 5, "kg": 7, "ecommerce": 7, "web": 9, "household": 16}
"""Turn limits for easy tasks, in training prompts (the first message states the limit) and in
evaluation alike. The expert needs at most 2 (os, db), 4 (kg, ecommerce), 6 (web) and 12
(household) turns; these leave room for a mistake or two without paying for 40 turns of a
lost episode."""

MEDIUM_TURN_LIMITS = {"os": 5, "db": 5, "kg": 9, "ecommerce": 8, "web": 12, "household": 16}
"""Turn limits for medium tasks, the ones every medium-task figure in docs/RESULTS.md was measured with: the
expert's longer kg, web and e-commerce episodes plus the same room for a slip."""

LEVEL_TURN_LIMITS = {"easy": EASY_TURN_LIMITS, "medium": MEDIUM_TURN_LIMITS}
"""The stated turn limits of each difficulty that has them (hard: the environments' defaults)."""


def _is_positive_whole(value: Any) -> bool:
    """Whether `value` is a whole number >= 1 (a turn limit, a streak of invalid actions): True and 2.0 are not."""
    return not isinstance(value, bool) and isinstance(value, numbers.Integral) and value >= 1


TurnLimits = int | dict[str, int] | None
"""A turn limit as callers give it: one number for every domain, {domain: turns} (domains not named
keep their environment's default), or None (every environment's own default)."""


def turn_limit(max_turns: TurnLimits, domain: str) -> int | None:
    """The turn limit `max_turns` sets for `domain`; None keeps the environment's default.

    The one place a per-domain limit is resolved, so that training prompts (the first message
    states the limit), rollouts, search and evaluation agree on it."""
    if max_turns is None:
        return None
    if isinstance(max_turns, dict):
        limit = max_turns.get(domain)
        where = f"max_turns[{domain!r}]"
    else:
        limit, where = max_turns, "max_turns"
    if limit is None:
        return None
    if not _is_positive_whole(limit):
        raise ValueError(f"{where} must be a whole number of turns >= 1 (or None for the environment's "
                         f"default), got {limit!r}")
    return int(limit)


def parse_turn_limits(text: str) -> TurnLimits:
    """A command line's turn limits: "8" (every domain), "os=5,household=16" (those domains), or a difficulty,
    "easy" or "medium" (LEVEL_TURN_LIMITS, the limits the recipes train and evaluate that level with)."""
    text = text.strip()
    if text in LEVEL_TURN_LIMITS:
        return dict(LEVEL_TURN_LIMITS[text])
    try:
        limits: TurnLimits = int(text) if "=" not in text else {
            k.strip(): int(v) for k, v in (item.split("=", 1) for item in text.split(",") if item.strip())}
        for domain in limits if isinstance(limits, dict) else ["any"]:
            turn_limit(limits, domain)  # each a whole number >= 1
    except ValueError as e:
        raise ValueError(f"turn limits: expected N, 'easy', 'medium' or domain=N,... with N >= 1, got {text!r} "
                         f"({e})") from None
    return limits


def make_env(domain: str, *, max_turns: TurnLimits = None, shaping: bool = False,
             max_invalid_streak: int | None = None) -> Env:
    """A fresh environment for `domain`; `max_turns` is one limit, {domain: limit} or None (see `turn_limit`);
    `max_invalid_streak` ends an episode after that many invalid actions in a row (None: only the turn limit does)."""
    return _spec(domain).env_cls(max_turns=turn_limit(max_turns, domain), shaping=shaping,
                                 max_invalid_streak=max_invalid_streak)


def generate_tasks(domain: str, n: int, seed: int = 0, difficulty: str = "easy") -> list[Task]:
    """`n` tasks, deterministic per (domain, seed, difficulty)."""
    if difficulty not in DIFFICULTIES:
        raise ValueError(f"difficulty must be one of {DIFFICULTIES}, got {difficulty!r}")
    spec = _spec(domain)
    rng = random.Random(f"{domain}:{difficulty}:{seed}")
    return [spec.generate(rng, difficulty, i) for i in range(n)]


def run_expert(env: Env, task: Task) -> tuple[list[dict[str, str]], StepResult]:
    """Play the expert on `task` in `env`; returns (messages, last step).

    The data-synthesis loop: one environment, no policy object and no batching, so that envs/
    needs nothing above it (`rollout.run_episodes` with the "expert" policy plays the same
    episodes in batches, for evaluation)."""
    messages = [{"role": "user", "content": env.reset(task)}]
    step = None
    while not env.done:
        text = env.expert_action()
        messages.append({"role": "assistant", "content": text})
        step = env.step(text)
        if not step.done:
            messages.append({"role": "user", "content": step.observation})
    return messages, step


def expert_trajectories(tasks: list[Task], max_turns: TurnLimits = None, *, successful_only: bool = True,
                        id_prefix: str = "expert") -> list[Trajectory]:
    """The expert's episodes on `tasks` as SFT-ready trajectories, the outcome in meta.

    `max_turns` (one limit, or one per domain) sets the environment's turn limit, which the first message
    states: use the value evaluation uses, so that prompts agree. `successful_only` drops the episodes the
    expert did not solve (a generator's rare unsolvable task)."""
    out = []
    for task in tasks:
        messages, last = run_expert(make_env(task.domain, max_turns=max_turns), task)
        success = bool(last.info.get("success"))
        if successful_only and not success:
            continue
        turns = [Turn(m["role"], m["content"], train=m["role"] == "assistant") for m in messages]
        meta = {"task_id": task.id, "difficulty": task.difficulty, "success": success,
                "score": float(last.info.get("score", 0.0))}
        out.append(Trajectory(id=f"{id_prefix}/{task.id}", source="synth", domain=task.domain, messages=turns,
                              meta=meta))
    return out


def synthesize_trajectories(domain: str, n: int, seed: int = 0, difficulty: str = "easy") -> list[Trajectory]:
    """Run the expert on `n` generated tasks of `domain`: SFT-ready trajectories, failures included."""
    tasks = generate_tasks(domain, n, seed=seed, difficulty=difficulty)
    return expert_trajectories(tasks, successful_only=False, id_prefix=f"synth/{domain}")

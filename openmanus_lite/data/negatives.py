"""Negative samples in the spirit of Agent-FLAN: teach the agent what not to hallucinate.

Agent-FLAN found that agent-tuned models call tools that do not exist and call tools when
none is needed, and added negative examples against both. Two kinds are derived here
from kept trajectories of the six domains (each marked in `meta["negative"]`):

* `invalid_action` — before one training turn, the agent tries an action that does not
  exist in the domain (an unknown shell command, a missing table, a KG function that is
  not in the tool set, a button that is not on the page, a household verb the world
  does not have); the environment answers with its error, and the agent recovers with
  the original correct action. The invalid turn has `train=false` (never learn to make
  the mistake); the recovery turn trains, its thought prefixed with a short correction.
* `no_tool_needed` — the trajectory's instructions (the turns before the task), then a
  general question that needs no environment, answered directly with `answer(...)`.

Derived trajectories get ids `<origin id>#neg-<kind>` and never leave the split of their
origin (the merge derives them from the training split only).
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from openmanus_lite.react import answer, bash, call, format_turn, parse_turn, sql, tool
from openmanus_lite.schema import DOMAINS, Trajectory, Turn

KINDS = ("invalid_action", "no_tool_needed")

# domain -> (invalid action, the environment's reply)
INVALID_ACTIONS: dict[str, list[tuple[str, str]]] = {
    "os": [
        (bash("filecount /etc"), "bash: filecount: command not found"),
        (bash("listdir -R ~"), "bash: listdir: command not found"),
        (bash("cnt -l /var/log/syslog"), "bash: cnt: command not found"),
    ],
    "db": [
        (sql("SELECT * FROM all_tables"), "Error: no such table: all_tables"),
        (sql("SELECT COUNT(*) FROM information"), "Error: no such table: information"),
    ],
    "kg": [
        (tool("get_entity_info", "#0"),
         "Error: get_entity_info is not a valid function. Valid functions: get_relations, get_neighbors, "
         "intersection, get_attributes, argmax, argmin, count."),
        (tool("search_kb", "answer"),
         "Error: search_kb is not a valid function. Valid functions: get_relations, get_neighbors, "
         "intersection, get_attributes, argmax, argmin, count."),
    ],
    "household": [
        ("teleport to kitchen", "Nothing happens."),
        ("search everywhere for the target", "Nothing happens."),
    ],
    "ecommerce": [
        (call("click", "Add to Wishlist"), "Invalid action: 'Add to Wishlist' is not a button on this page."),
        (call("checkout", "now"), "Invalid action: 'checkout' is not an available action; use search[...] or click[...]."),
    ],
    "web": [
        (call("click", "Z"), "Invalid action: there is no element 'Z' on this page."),
        (call("scroll", "down"), "Invalid action: 'scroll' is not an available action."),
    ],
}

CORRECTION = "That action is not available here, so I use a valid one instead."

# Questions that need no environment, with their answers.
GENERAL_QUESTIONS: list[tuple[str, str]] = [
    ("Before we start: what is 12 times 12?", "144"),
    ("Quick question first: which planet is known as the Red Planet?", "Mars"),
    ("How many days does a leap year have?", "366"),
    ("What is the capital of France?", "Paris"),
    ("Spell the word 'agent' backwards.", "tnega"),
    ("How many minutes are there in two hours?", "120"),
]
NO_TOOL_THOUGHT = "This question does not need the environment; I can answer it directly."


def _train_turns(traj: Trajectory) -> list[int]:
    return [i for i, m in enumerate(traj.messages) if m.role == "assistant" and m.train]


def invalid_action_sample(traj: Trajectory, rng: random.Random) -> Trajectory | None:
    """The trajectory with one invalid action + error inserted before a training turn."""
    options = INVALID_ACTIONS.get(traj.domain)
    turns = _train_turns(traj)
    if not options or not turns:
        return None
    at = rng.choice(turns)
    original = traj.messages[at]
    parsed = parse_turn(original.content)
    if not parsed:
        return None
    wrong_action, error = rng.choice(options)
    wrong = Turn("assistant", format_turn(parsed.thought or "I will act now.", wrong_action), False)
    fixed = Turn("assistant", format_turn(f"{CORRECTION} {parsed.thought}".strip(), parsed.action), True)
    messages = [Turn(m.role, m.content, m.train) for m in traj.messages]
    messages[at:at + 1] = [wrong, Turn("user", error, False), fixed]
    meta = {k: v for k, v in traj.meta.items() if k not in ("free_text_turns",)}
    meta["negative"] = {"kind": "invalid_action", "from": traj.id, "inserted_at": at}
    return Trajectory(f"{traj.id}#neg-invalid_action", traj.source, traj.domain, messages, meta)


def no_tool_needed_sample(traj: Trajectory, rng: random.Random) -> Trajectory | None:
    """The trajectory's instructions, then a general question answered without any action."""
    turns = _train_turns(traj)
    if not turns:
        return None
    task_user = turns[0] - 1  # the user turn that states the task
    if task_user < 0:
        return None
    prefix = [Turn(m.role, m.content, False) for m in traj.messages[:task_user]]
    question, reply = rng.choice(GENERAL_QUESTIONS)
    messages = prefix + [
        # phrased as a new task, so that a few-shot demo in the prefix reads as finished
        Turn("user", f"Here is a new task: {question}", False),
        Turn("assistant", format_turn(NO_TOOL_THOUGHT, answer(reply)), True),
    ]
    # The reply is a plain fact, not the domain's answer form (a KG variable, a DB list).
    meta = {"negative": {"kind": "no_tool_needed", "from": traj.id}, "train_flags": "inferred",
            "answer_optional": True}
    return Trajectory(f"{traj.id}#neg-no_tool_needed", traj.source, traj.domain, messages, meta)


def make_negatives(
    trajectories: Iterable[Trajectory], fraction: float, seed: int = 0, kinds: tuple[str, ...] = KINDS
) -> list[Trajectory]:
    """Negatives derived from about `fraction` of the six-domain trajectories, kinds alternating.

    Deterministic for a given input order and seed.
    """
    if not 0 <= fraction <= 1:
        raise ValueError(f"fraction must be in [0, 1], got {fraction}")
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise ValueError(f"unknown negative kinds {sorted(unknown)}; expected {KINDS}")
    rng = random.Random(seed)
    pool = [t for t in trajectories if t.domain in DOMAINS and "negative" not in t.meta]
    n = round(len(pool) * fraction)
    out: list[Trajectory] = []
    for j, traj in enumerate(rng.sample(pool, n) if n else []):
        kind = kinds[j % len(kinds)]
        make = invalid_action_sample if kind == "invalid_action" else no_tool_needed_sample
        neg = make(traj, rng)
        if neg is not None:
            out.append(neg)
    return out

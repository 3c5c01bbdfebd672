"""Negative samples as in Agent-FLAN, which found agent-tuned models call tools that do not exist and call
tools when none is needed. Both kinds (`meta["negative"]`, id `<origin id>#neg-<kind>`) come from six-domain
trajectories: `invalid_action` (an action the domain lacks, its error, then the recovery) and `no_tool_needed`.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from openmanus_lite.react import answer, bash, call, format_turn, parse_turn, sql, tool
from openmanus_lite.schema import DOMAINS, Trajectory, Turn

_KG_FUNCTIONS = "Valid functions: get_relations, get_neighbors, intersection, get_attributes, argmax, argmin, count."

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
        (tool("get_entity_info", "#0"), f"Error: get_entity_info is not a valid function. {_KG_FUNCTIONS}"),
        (tool("search_kb", "answer"), f"Error: search_kb is not a valid function. {_KG_FUNCTIONS}"),
    ],
    "household": [
        ("teleport to kitchen", "Nothing happens."),
        ("search everywhere for the target", "Nothing happens."),
    ],
    "ecommerce": [
        (call("click", "Add to Wishlist"), "Invalid action: 'Add to Wishlist' is not a button on this page."),
        (call("checkout", "now"),
         "Invalid action: 'checkout' is not an available action; use search[...] or click[...]."),
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
    """One invalid action and its error before a training turn; only the recovery trains (never the mistake)."""
    options, turns = INVALID_ACTIONS.get(traj.domain), _train_turns(traj)
    if not options or not turns:
        return None
    at = rng.choice(turns)
    parsed = parse_turn(traj.messages[at].content)
    if not parsed:
        return None
    wrong_action, error = rng.choice(options)
    messages = [Turn(m.role, m.content, m.train) for m in traj.messages]
    messages[at:at + 1] = [
        Turn("assistant", format_turn(parsed.thought or "I will act now.", wrong_action), False),
        Turn("user", error, False),
        Turn("assistant", format_turn(f"{CORRECTION} {parsed.thought}".strip(), parsed.action), True),
    ]
    meta = {k: v for k, v in traj.meta.items() if k != "free_text_turns"}
    meta["negative"] = {"kind": "invalid_action", "from": traj.id, "inserted_at": at}
    return Trajectory(f"{traj.id}#neg-invalid_action", traj.source, traj.domain, messages, meta)


def no_tool_needed_sample(traj: Trajectory, rng: random.Random) -> Trajectory | None:
    """The trajectory's instructions, then a general question answered without any action."""
    turns = _train_turns(traj)
    task_user = turns[0] - 1 if turns else -1  # the user turn that states the task
    if task_user < 0:
        return None
    question, reply = rng.choice(GENERAL_QUESTIONS)
    messages = [Turn(m.role, m.content, False) for m in traj.messages[:task_user]] + [
        # phrased as a new task, so that a few-shot demo in the prefix reads as finished
        Turn("user", f"Here is a new task: {question}", False),
        Turn("assistant", format_turn(NO_TOOL_THOUGHT, answer(reply)), True),
    ]
    # The reply is a plain fact, not the domain's answer form (a KG variable, a DB list).
    meta = {"negative": {"kind": "no_tool_needed", "from": traj.id}, "train_flags": "inferred", "answer_optional": True}
    return Trajectory(f"{traj.id}#neg-no_tool_needed", traj.source, traj.domain, messages, meta)


def make_negatives(trajectories: Iterable[Trajectory], fraction: float, seed: int = 0) -> list[Trajectory]:
    """Negatives from about `fraction` of the six-domain trajectories, the two kinds alternating (deterministic
    for a given input order and seed)."""
    if not 0 <= fraction <= 1:
        raise ValueError(f"fraction must be in [0, 1], got {fraction}")
    rng = random.Random(seed)
    pool = [t for t in trajectories if t.domain in DOMAINS and "negative" not in t.meta]
    n = round(len(pool) * fraction)
    made = ((no_tool_needed_sample if j % 2 else invalid_action_sample)(t, rng)
            for j, t in enumerate(rng.sample(pool, n) if n else []))
    return [neg for neg in made if neg is not None]

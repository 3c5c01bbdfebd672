"""Expert episodes with one injected mistake, and the expert's value of each step, by replay.

The expert carries on after the mistake, so an episode shows a slip and what follows it: SFT's recovery rows
(train/recovery.py) and preference pairs (preference/pairs.py) are built from these, and the process reward model's
labels come from `label_step_values`. Episodes are recorded like rollouts (`rollout.episode_trajectory`).
"""

from __future__ import annotations

import random
import re
from typing import Any, Callable

from openmanus_lite.envs.base import Env
from openmanus_lite.policies import Messages
from openmanus_lite.react import Action, ParseError, format_action, format_turn, parse_step
from openmanus_lite.rollout import episode_trajectory, play_turn, start_episode
from openmanus_lite.schema import Task, Trajectory

MISTAKE_KINDS = ("random", "corrupt", "skip")
"""Injected mistakes: the environment's random action, a corrupted expert action (`corrupt_turn`) or a skipped
step (`skipped_step`: the expert's turn after next, played one turn early)."""
ALL_MISTAKE_KINDS = MISTAKE_KINDS + ("typical",)
"""...and, by name, the domain's typical slip (`Env.typical_mistake`) at its first turn; else a random action."""


def action_key(text: str, domain: str) -> str:
    """The action a turn takes, normalised (thought wording ignored); unparseable turns keep their text."""
    parsed = parse_step(text, domain)
    return "invalid:" + " ".join(str(text).split()) if isinstance(parsed, ParseError) else parsed[1].text


# These step environments themselves, not through `rollout.run_episodes`: they intervene inside an episode
# (inject a mistake, let the expert take over, replay to label each step), which a policy loop does not allow.
def _safe_expert(env: Env) -> str | None:
    """The expert's next turn, or None when the expert itself fails in this state (counted by callers)."""
    try:
        return env.expert_action()
    except Exception:
        return None


def _finish_with_expert(env: Env, messages: Messages) -> bool:
    """The expert plays until the episode ends. False if the expert broke down in this state: the
    episode is then ended with an empty answer (and callers flag it in meta['expert_broke'])."""
    while not env.done:
        text = _safe_expert(env)
        play_turn(env, messages, format_turn("I am stuck.", "answer()") if text is None else text)
        if text is None:
            return False
    return True


def expert_episode(task: Task, max_turns: int | None = None) -> Trajectory:
    """The expert's episode on `task`, recorded like a rollout."""
    env, messages = start_episode(task, max_turns)
    ok = _finish_with_expert(env, messages)
    return episode_trajectory(task, env, messages, id=f"expert/{task.id}/0", source="expert",
                              extra=None if ok else {"expert_broke": True})


_NUMBER = re.compile(r"\d+")
_WORD = re.compile(r"[A-Za-z_]{3,}")
_TOKEN = re.compile(r"\w+")


def corrupt_turn(text: str, domain: str, rng: random.Random) -> str:
    """A plausible but different version of an assistant turn, the kind of slip a model makes: in random order,
    a changed number, a dropped letter, a cut-short action, a premature answer or a missing `Act:` label; the
    first whose action differs. Changed numbers and names change in the thought too (`_retell`), as a model's
    slip is in its reasoning as well, so a recovery must correct the thought."""
    parsed = parse_step(text, domain)
    if isinstance(parsed, ParseError):
        return format_turn("I will answer now.", "answer(unknown)")
    turn, action = parsed
    thought = turn.thought or "Next step."
    variants: list[Callable[[], str]] = [
        lambda: _with_arg(thought, action, _bump_number(action.arg, rng), retell=True),
        lambda: _with_arg(thought, action, _drop_letter(action.arg, rng), retell=True),
        lambda: _with_arg(thought, action, action.arg[: max(1, len(action.arg) // 2)]),
        lambda: format_turn(thought, format_action(Action("answer", _bump_number(action.arg, rng) or "unknown"))),
        lambda: f"{thought}\n{format_action(action)}",
    ]
    rng.shuffle(variants)
    for make in variants:
        candidate = make()
        if candidate and action_key(candidate, domain) != action.text:  # the original's `action_key`
            return candidate
    return format_turn(thought, "answer(unknown)")


def _with_arg(thought: str, action: Action, arg: str | None, retell: bool = False) -> str:
    if not arg:
        return ""
    return format_turn(_retell(thought, action.arg, arg) if retell else thought,
                       format_action(Action(action.kind, arg, action.name)))


def _retell(thought: str, old: str, new: str) -> str:
    """`thought` with each word or number changed from `old` to `new` changed the same way; a number only after
    the word before it ("pot 1" -> "pot 2" leaves "countertop 1" alone); unaligned arguments change nothing."""
    a, b = _TOKEN.findall(old), _TOKEN.findall(new)
    if len(a) != len(b):
        return thought
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            before = f"{a[i - 1]} " if i and x.isdigit() else ""
            thought = re.sub(rf"(?<!\w){re.escape(before + x)}(?!\w)", lambda _, new=before + y: new, thought)
    return thought


def _bump_number(s: str, rng: random.Random) -> str | None:
    if not (nums := list(_NUMBER.finditer(s))):
        return None
    m = rng.choice(nums)
    value = int(m.group())
    new = value + rng.choice((1, 2)) if value < 2 or rng.random() < 0.5 else value - 1
    return s[: m.start()] + str(new) + s[m.end():]


def _drop_letter(s: str, rng: random.Random) -> str | None:
    if not (words := list(_WORD.finditer(s))):
        return None
    m = rng.choice(words)
    k = rng.randrange(m.start(), m.end())
    return s[:k] + s[k + 1:]


def skipped_step(env: Env) -> str | None:
    """The expert's turn after next, to play now: a step skipped, thought and all (putting into a fridge not yet
    opened). None when the expert has no turn after next; `env` itself is untouched (the look-ahead is on a clone)."""
    sim = env.clone()
    if (text := _safe_expert(sim)) is None:
        return None
    sim.step(text)
    return None if sim.done else _safe_expert(sim)


def _typical_turn(task: Task, max_turns: int | None, rng: random.Random) -> int | None:
    """The first turn of the expert's episode at which the environment has its typical slip, or None."""
    env, _ = start_episode(task, max_turns)
    while not env.done and (due := _safe_expert(env)) is not None:
        if env.typical_mistake(due, rng) is not None:
            return env.turn
        env.step(due)
    return None


def mistake_episodes(task: Task, n: int, rng: random.Random, kinds: tuple[str, ...] = MISTAKE_KINDS,
                     max_turns: int | None = None, expert_turns: int | None = None, repeats: int = 1
                     ) -> list[Trajectory]:
    """`n` expert episodes with one injected mistake each (kinds in turn), at a random turn; the expert carries on. A
    skip with nothing to skip becomes a corrupted turn; a rejected mistake is played again up to `repeats` times in a
    row, as a model stuck in a loop does. meta['mistake'] = {'turn', 'kind' played, 'valid', 'played'} (the last two
    absent when the episode ended before the turn). Whether a mistake was recoverable is the env's call."""
    if unknown := [k for k in kinds if k not in ALL_MISTAKE_KINDS]:
        raise ValueError(f"unknown mistake kind {unknown[0]!r}; expected some of {ALL_MISTAKE_KINDS}")
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    if expert_turns is None:
        expert_turns = int(expert_episode(task, max_turns).meta["turns"])
    out = []
    for i in range(n):
        kind = kinds[i % len(kinds)]
        at = rng.randrange(max(1, expert_turns))
        if kind == "typical":
            typical_at = _typical_turn(task, max_turns, rng)
            kind, at = ("random", at) if typical_at is None else (kind, typical_at)
        env, messages = start_episode(task, max_turns)
        broke = False
        for _ in range(at):
            text = _safe_expert(env)
            if text is None or env.done:
                broke = text is None
                break
            play_turn(env, messages, text)
        mistake: dict[str, Any] = {"turn": at, "kind": kind}
        if not env.done and not broke:
            if kind == "random":
                text = env.random_action(rng)
            elif kind == "typical":
                text = env.typical_mistake(_safe_expert(env) or "", rng)
            else:
                due = _safe_expert(env) or ""
                text = skipped_step(env) if kind == "skip" else None
                if text is None or action_key(text, task.domain) == action_key(due, task.domain):
                    text, mistake["kind"] = corrupt_turn(due, task.domain, rng), "corrupt"  # nothing to skip here
            play_turn(env, messages, text)
            mistake["valid"], mistake["played"] = bool(env.last_info.get("valid")), 1  # a detour, or a failed action
            while mistake["played"] < repeats and not mistake["valid"] and not env.done:
                play_turn(env, messages, text)
                mistake["played"] += 1
        extra: dict[str, Any] = {"mistake": mistake}
        if not _finish_with_expert(env, messages) or broke:
            extra["expert_broke"] = True  # the episode ended with a give-up answer, not the expert's own
        source = f"mistake:{mistake['kind']}"
        out.append(episode_trajectory(task, env, messages, id=f"{source}/{task.id}/{i}", source=source, extra=extra))
    return out


class ReplayMismatch(RuntimeError):
    """Replaying an episode's actions did not reproduce its recorded observations."""


def expert_value(env: Env) -> tuple[float, int]:
    """(score the expert reaches continuing from this state, turns it needs), on a clone; a breakdown scores 0."""
    if env.done:
        return float(env.last_info.get("score", 0.0)), 0
    sim = env.clone()
    start = sim.turn
    while not sim.done:
        if (text := _safe_expert(sim)) is None:
            return 0.0, sim.turn - start
        sim.step(text)
    return float(sim.last_info.get("score", 0.0)), sim.turn - start


def label_step_values(task: Task, traj: Trajectory, max_turns: int | None = None) -> list[float]:
    """Replay `traj` in a fresh environment and return the expert-continuation value after each assistant turn. Stores
    in meta 'step_values' and 'step_remaining' (the expert's turns still needed) per assistant turn, and
    'start_remaining'; raises ReplayMismatch when the recorded observations are not reproduced."""
    if task.id != traj.meta.get("task_id", task.id):
        raise ValueError(f"trajectory {traj.id!r} is for task {traj.meta.get('task_id')!r}, not {task.id!r}")
    env, opening = start_episode(task, max_turns or traj.meta.get("max_turns"))
    msgs = traj.messages
    if not msgs or msgs[0].role != "user" or msgs[0].content != opening[0]["content"]:
        raise ReplayMismatch(f"trajectory {traj.id!r}: its first message is not what the environment shows for task "
                             f"{task.id!r} (different task, max_turns or environment version?)")
    start_remaining = expert_value(env)[1]
    steps: list[tuple[float, int]] = []  # (value, expert turns remaining) after each assistant turn
    for i, turn in enumerate(msgs):
        if turn.role != "assistant":
            continue
        if env.done:
            raise ReplayMismatch(f"trajectory {traj.id!r}: the episode ended before message {i}")
        step = env.step(turn.content)
        if not step.done and (i + 1 >= len(msgs) or msgs[i + 1].content != step.observation):
            raise ReplayMismatch(f"trajectory {traj.id!r}: replaying message {i} gave a different observation")
        steps.append(expert_value(env))
    traj.meta.update(step_values=[v for v, _ in steps], step_remaining=[n for _, n in steps],
                     start_remaining=start_remaining)
    return traj.meta["step_values"]

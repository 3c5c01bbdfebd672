"""The expert's corrections at the states a model reaches itself (DAgger-style SFT data).

Why: expert and recovery data only show states the expert reaches, or one scripted slip away, while a model loses
episodes to its own loops in states no script produces. So each of the model's first few wasted turns becomes a
cut point: its own turns up to there (context, no loss), then the expert finishing the task from that state (loss).
Measured no gain (docs/RESULTS.md, "Corrections at the model's own mistakes"); kept for
`benchmarks/sft_learning.py --corrections-at`.
"""

from __future__ import annotations

from openmanus_lite.envs import turn_limit
from openmanus_lite.mistakes import ReplayMismatch, _finish_with_expert, label_step_values
from openmanus_lite.preference.pairs import step_labels
from openmanus_lite.rollout import play_turn, start_episode
from openmanus_lite.schema import Task, Trajectory, Turn
from openmanus_lite.train.recovery import with_recovery_note


def cut_points(episode: Trajectory, per_episode: int) -> list[int]:
    """Assistant-turn ordinals of the model's first `per_episode` turns that made no progress while the
    task was still solvable by the expert (the labels `label_step_values` stored)."""
    progress = step_labels(episode, "progress")
    solvable = step_labels(episode, "solvable")
    before = [True] + [bool(s) for s in solvable[:-1]]  # the state the turn started from was solvable
    return [i for i, (p, ok) in enumerate(zip(progress, before)) if ok and not p][:per_episode]


def corrected_episode(task: Task, episode: Trajectory, turn: int, max_turns: int | None) -> Trajectory | None:
    """The model's turns of `episode` up to assistant turn `turn` (train=False), then the expert to the end. The
    expert's first turn opens its thought with `recovery.RECOVERY_NOTE` when the environment rejected the model's turn.
    None when the episode ends at that turn (nothing left to correct)."""
    env, messages = start_episode(task, max_turns)
    assistant = [m for m in episode.messages if m.role == "assistant"]
    for text in assistant[: turn + 1]:
        play_turn(env, messages, text.content)
        if env.done:
            return None
    rejected = not env.last_info.get("valid", True)
    prefix = len(messages)
    if not _finish_with_expert(env, messages) or not env.last_info.get("success"):
        return None
    if rejected:
        messages[prefix]["content"] = with_recovery_note(messages[prefix]["content"])
    turns = [Turn(m["role"], m["content"], m["role"] == "assistant" and i >= prefix) for i, m in enumerate(messages)]
    return Trajectory(f"correction/{task.id}/{turn}", "synth", task.domain, turns,
                      {"task_id": task.id, "difficulty": task.difficulty, "success": True,
                       "corrected_turn": turn, "rejected": rejected, "model": episode.source})


def correction_trajectories(episodes: list[Trajectory], tasks: list[Task], max_turns: int | dict[str, int] | None,
                            per_episode: int = 2) -> tuple[list[Trajectory], dict[str, int]]:
    """Corrections (`corrected_episode`) at the first `per_episode` cut points of each of the model's episodes. `tasks`
    are the episodes' tasks (matched by id); `max_turns` the limits they were played with. Returns (trajectories,
    counts): 'clean' episodes had no cut point, 'replay_mismatch' ones did not replay, 'unfinished' cut points the
    expert cannot finish from, and 'kept' counts the trajectories."""
    by_id = {t.id: t for t in tasks}
    out: list[Trajectory] = []
    counts = {"episodes": len(episodes), "clean": 0, "replay_mismatch": 0, "unfinished": 0, "kept": 0}
    for ep in episodes:
        task = by_id[ep.meta["task_id"]]
        limit = turn_limit(max_turns, task.domain)
        try:
            label_step_values(task, ep, limit)
        except ReplayMismatch:
            counts["replay_mismatch"] += 1
            continue
        cuts = cut_points(ep, per_episode)
        counts["clean"] += not cuts
        for turn in cuts:
            fixed = corrected_episode(task, ep, turn, limit)
            if fixed is None:
                counts["unfinished"] += 1
            else:
                out.append(fixed)
                counts["kept"] += 1
    return out, counts

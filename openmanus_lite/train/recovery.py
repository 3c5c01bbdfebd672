"""SFT data of expert episodes that recover from one injected mistake (the recipes' `recovery` episodes).

It builds on `mistakes.mistake_episodes` (expert episodes with a mistake). Which tasks train and which are held
out is `openmanus_lite.splits`' job.
"""

from __future__ import annotations

import random

from openmanus_lite.envs import turn_limit
from openmanus_lite.mistakes import mistake_episodes
from openmanus_lite.schema import Task, Trajectory

RECOVERY_KINDS = ("random",)
"""The default mistakes of recovery data: the recipe measured most (docs/RESULTS.md, 60 minutes of SFT). All
three kinds of `mistakes.MISTAKE_KINDS` gave 78.9% success (household 74% valid, kg 94%), within
the noise between two runs of this default (81.7% and 80.0%; household 85% and 73%)."""

RECOVERY_NOTE = "The last action did not work."
"""Opens the thought of the turn after a failed action in recovery trajectories, so the model
learns to read an error observation instead of repeating what caused it."""


def with_recovery_note(turn: str) -> str:
    """`turn` (the expert's `format_turn` text) with its thought opened by RECOVERY_NOTE; other text as it is."""
    return turn.replace("Think: ", f"Think: {RECOVERY_NOTE} ", 1) if turn.startswith("Think: ") else turn


def recovery_trajectories(tasks: list[Task], per_task: int = 1, max_turns: int | dict[str, int] | None = None,
                          seed: int = 0, kinds: tuple[str, ...] | None = None, repeats: tuple[int, ...] = (1,)
                          ) -> tuple[list[Trajectory], dict[str, int]]:
    """Expert episodes with one injected mistake that the expert recovers from, as SFT data.

    Why: expert-only data never shows an error observation, so a model that slips once in a long episode meets
    text it was never trained on and tends to repeat the slip until the turn limit. Each episode has one mistake
    at a random turn (`mistakes.mistake_episodes`; `kinds`, default RECOVERY_KINDS, take turns across tasks).
    `repeats` take turns the same way: with 2, a rejected mistake is played twice, the second time after
    RECOVERY_NOTE, as a model stuck in a loop does. Mistaken turns have `train=False`; the expert's recovery
    trains, its thought opened with RECOVERY_NOTE when the environment rejected the action. Episodes that end
    unsolved or whose mistake finished the task are not kept; returns (trajectories, counts by reason).
    """
    kinds = tuple(kinds or RECOVERY_KINDS)
    rng = random.Random(seed)
    out: list[Trajectory] = []
    counts = {"kept": 0, "unsolved": 0, "nothing_to_recover": 0, "expert_broke": 0, "no_mistake": 0}
    for k, task in enumerate(tasks):
        limit = turn_limit(max_turns, task.domain)
        turn = k % len(kinds)
        for ep in mistake_episodes(task, per_task, rng, kinds[turn:] + kinds[:turn], max_turns=limit,
                                   repeats=repeats[k % len(repeats)]):
            mistake = ep.meta["mistake"]
            assistant = [i for i, m in enumerate(ep.messages) if m.role == "assistant"]
            first, played = mistake["turn"], mistake.get("played", 1)
            reason = ("expert_broke" if ep.meta.get("expert_broke") else "no_mistake" if "valid" not in mistake
                      else "unsolved" if not ep.meta.get("success")
                      else "nothing_to_recover" if first + played >= len(assistant) else "kept")
            counts[reason] += 1
            if reason != "kept":
                continue
            for n, at in enumerate(assistant[first:first + played]):
                ep.messages[at].train = False
                if n:  # a repeat comes after the rejection, as the model's own loop does
                    ep.messages[at].content = with_recovery_note(ep.messages[at].content)
            after = ep.messages[assistant[first + played]]
            if not mistake["valid"]:
                after.content = with_recovery_note(after.content)
            ep.id = f"recovery/{task.id}/{len(out)}"
            ep.source = "synth"
            out.append(ep)
    return out, counts

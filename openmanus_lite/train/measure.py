"""SFT data from the expert (plain and recovering from a mistake), and the per-domain view of results.

Used by notebook 04 and benchmarks/sft_learning.py. Which tasks train and which are held out
is `openmanus_lite.splits`' job; playing and scoring held-out tasks is `eval.run_benchmark`'s.
"""

from __future__ import annotations

from typing import Any

from openmanus_lite.schema import Task, Trajectory

RECOVERY_KINDS = ("random",)
"""The default mistakes of recovery data: the recipe measured most (docs/RESULTS.md, 60 minutes of SFT). All
three kinds of `preferences.MISTAKE_KINDS` gave 78.9% success (household 74% valid, kg 94%), within
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

    Why: expert-only data never shows an error observation, so a model that slips once in a long
    episode (household, web) meets text it was never trained on and tends to repeat the slip
    until the turn limit. Each episode here has one mistake at a random turn (a random action, a
    corrupted expert action or a skipped step, `preferences.mistake_episodes`; `kinds` picks some,
    default RECOVERY_KINDS, and they take turns across tasks, so that one episode per task still has each).
    `repeats` take turns across tasks the same way: with 2, a rejected mistake is played twice in a row, the
    second time after RECOVERY_NOTE, which is what a model stuck in a loop writes, so that the recovery is
    also learnt after a repeated failure. The mistaken turns have `train=False` (never learn the mistake);
    the expert's recovery trains, its thought opened with RECOVERY_NOTE when the environment rejected
    the action. Episodes that end unsolved (a
    premature answer) or whose mistake happened to finish the task are not kept; returns
    (trajectories, counts of kept / dropped by reason).
    """
    import random

    from openmanus_lite.train.preferences import mistake_episodes

    kinds = tuple(kinds or RECOVERY_KINDS)
    rng = random.Random(seed)
    out: list[Trajectory] = []
    counts = {"kept": 0, "unsolved": 0, "nothing_to_recover": 0, "expert_broke": 0, "no_mistake": 0}
    from openmanus_lite.envs import turn_limit

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


def domain_summary(result: Any) -> dict[str, dict[str, float]]:
    """A `BenchmarkResult`'s pooled rows per domain (and 'all') as plain numbers, the form
    `summary_table` prints and benchmarks/sft_learning.py keeps in its curve.json: n, success rate
    with its 95% Wilson interval, valid-action rate, mean turns."""
    from openmanus_lite.eval.metrics import ALL, summarize_group

    records = result.records
    groups = {d: [r for r in records if r.domain == d] for d in dict.fromkeys(r.domain for r in records)}
    groups[ALL] = list(records)
    out = {}
    for domain, recs in groups.items():
        row = summarize_group(recs, domain, ALL)
        out[domain] = {"n": row.n, "success": row.success_rate, "success_lo": row.ci_low, "success_hi": row.ci_high,
                       "valid_rate": 1.0 - row.invalid_action_rate, "mean_turns": row.mean_turns}
    return out


def summary_table(results: dict[str, dict[str, dict[str, float]]]) -> str:
    """A text table: one row per run label, success% (valid-action%) per domain; `results` maps
    labels to `domain_summary` dicts."""
    labels = list(results)
    domains = sorted({d for r in results.values() for d in r if d != "all"}) + ["all"]
    head = f"{'':<14}" + "".join(f"{d:>18}" for d in domains)
    lines = [head]
    for label in labels:
        row = results[label]
        cells = "".join(
            f"{100 * row[d]['success']:>8.0f}% ({100 * row[d]['valid_rate']:>3.0f}% ok)" if d in row else f"{'-':>18}"
            for d in domains)
        lines.append(f"{label:<14}{cells}")
    return "\n".join(lines)

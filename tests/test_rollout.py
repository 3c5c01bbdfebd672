"""rollout.run_episodes: continuous batching, longest episodes first, keeps policy calls full."""

from __future__ import annotations

from openmanus_lite.envs import generate_tasks
from openmanus_lite.rollout import run_episodes


class CountingPolicy:
    """Replies with an invalid action (episodes last their turn limit) and records each call's width."""

    name = "counting"

    def __init__(self):
        self.widths = []

    def act_batch(self, histories, envs=None):
        self.widths.append(len(histories))
        return ["Think: no idea.\nAct: nothing"] * len(histories)


def test_finished_episodes_free_their_slot_at_once():
    tasks = generate_tasks("os", 5, seed=1) + generate_tasks("db", 5, seed=1)
    policy = CountingPolicy()
    trajs = run_episodes(policy, tasks, max_turns={"os": 2, "db": 5}, batch_size=4, progress=False)
    assert [t.meta["task_id"] for t in trajs] == [t.id for t in tasks]  # input order kept
    assert [t.meta["turns"] for t in trajs] == [2] * 5 + [5] * 5
    assert sum(policy.widths) == 2 * 5 + 5 * 5  # one row per turn played, nothing replayed
    # db tasks (5 turns) start first, os tasks (2) fill the slots around them, and every freed slot is refilled
    # at once: 10 calls. Fixed chunks in input order gave 12: [4, 4, 4, 4, 3, 3, 3, 2, 2, 2, 2, 2].
    assert policy.widths == [4] * 7 + [3, 3, 1]
    assert all(t.meta["wall_s"] >= 0 for t in trajs)

"""rollout.run_episodes: continuous batching keeps every policy call full until the tasks run out."""

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
    # os tasks (2 turns) first, then db (5): a freed slot is refilled at once, so calls stay 4 wide until the
    # last task is admitted. Fixed chunks of 4 gave [4, 4, 4, 4, 3, 3, 3, 2, 2, 2, 2, 2]: 7 calls under width.
    assert policy.widths == [4] * 7 + [2, 2, 1, 1, 1]
    assert all(t.meta["wall_s"] >= 0 for t in trajs)

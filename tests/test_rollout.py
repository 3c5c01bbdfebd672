"""rollout.run_episodes (continuous batching, longest episodes first) and turn limits from a command line."""

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


def test_turn_limits_from_the_command_line():
    import pytest

    from openmanus_lite.cli.eval import build_parser
    from openmanus_lite.envs import EASY_TURN_LIMITS, MEDIUM_TURN_LIMITS, parse_turn_limits

    assert parse_turn_limits("8") == 8 and parse_turn_limits("easy") == EASY_TURN_LIMITS
    assert parse_turn_limits("medium") == MEDIUM_TURN_LIMITS and MEDIUM_TURN_LIMITS["web"] == 12
    assert parse_turn_limits(" os=5, household=16 ") == {"os": 5, "household": 16}
    for bad in ("os=five", "0", "os=0", "many"):
        with pytest.raises(ValueError, match="turn limit"):
            parse_turn_limits(bad)
    assert build_parser().parse_args(["--model", "m", "--max_turns", "easy"]).max_turns == EASY_TURN_LIMITS


def test_random_play_does_not_depend_on_the_batch_size():
    # the random baseline draws from (seed, state), not one shared stream: continuous batching reorders turns
    from openmanus_lite.policies import RandomPolicy

    tasks = generate_tasks("ecommerce", 6, seed=5) + generate_tasks("db", 6, seed=5)
    plays = [[t.messages for t in run_episodes(RandomPolicy(3), tasks, batch_size=b, progress=False)] for b in (1, 4, 12)]
    assert plays[0] == plays[1] == plays[2]
    assert plays[0] != [t.messages for t in run_episodes(RandomPolicy(4), tasks, batch_size=4, progress=False)]


def test_a_none_reply_ends_the_episode_without_a_step():
    # GRPO's token rollout ends an episode this way when its token budget runs out
    class StopsAfterTwo(CountingPolicy):
        def act_batch(self, histories, envs=None):
            replies = super().act_batch(histories, envs)
            return [None if len(h) >= 4 else r for h, r in zip(histories, replies)]  # after two turns

    tasks = generate_tasks("db", 3, seed=2)
    trajs = run_episodes(StopsAfterTwo(), tasks, max_turns=5, batch_size=2, progress=False)
    assert [t.meta["turns"] for t in trajs] == [2, 2, 2]
    assert all(not t.meta["success"] and t.meta["score"] == 0.0 and t.meta["max_turns"] == 5 for t in trajs)
    assert all([m.role for m in t.messages] == ["user", "assistant", "user", "assistant", "user"] for t in trajs)

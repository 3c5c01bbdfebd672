"""Expert-guided rollouts: a reverse curriculum for the tasks the policy never solves (issue #40, item 2).

A group whose episodes all fail carries no GRPO signal. So an episode starts after the expert's first k turns
(played in the environment, context with env_mask 0: never trained on), near enough the goal that the policy
succeeds sometimes; each time a task's group succeeds often enough its k shrinks by one turn, down to 0.
`env_rollout.EnvRolloutFunc` asks `ExpertGuide` for the prefixes and replays them (`replay_expert`).
Turned on by `GRPORunConfig.expert_prefix_share`.
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence

from openmanus_lite.envs import TurnLimits, make_env, run_expert
from openmanus_lite.schema import Task


class ExpertGuide:
    """Per task, how many of the expert's turns its training episodes start after."""

    def __init__(self, share: float, shrink_at: float, max_turns: TurnLimits = None):
        """`share`, `shrink_at`: GRPORunConfig's expert_prefix_share and expert_prefix_shrink_at (it checks them)."""
        self.share, self.shrink_at, self.max_turns = share, shrink_at, max_turns
        self.turns: dict[str, int] = {}
        """Task id -> the expert turns its episodes start after; 0 once the policy plays the whole task."""

    def prefix_turns(self, tasks: Sequence[Task]) -> list[int]:
        """k for each task; a task met for the first time starts at `share` of the expert's path, less its last
        turn (the policy always acts), or at 0 when the expert fails it under the turn limit."""
        for task in tasks:
            if task.id not in self.turns:
                messages, last = run_expert(make_env(task.domain, max_turns=self.max_turns), task)
                path = sum(m["role"] == "assistant" for m in messages)
                self.turns[task.id] = min(int(self.share * path), path - 1) if last.info.get("success") else 0
        return [self.turns[t.id] for t in tasks]

    def update(self, episodes: Sequence[Any]) -> dict[str, float]:
        """Shrink by one turn the prefix of each task whose episodes succeeded at a rate of at least `shrink_at`;
        returns this call's `guide/*` metrics. Episodes are `env_rollout.EpisodeTokens` (`prefix_turns` is what was
        replayed: the token budget may have cut it short, and k never stays above what was replayed)."""
        by_task: dict[str, list[Any]] = {}
        for ep in episodes:
            by_task.setdefault(ep.task.id, []).append(ep)
        for task_id, eps in by_task.items():
            k = min(self.turns.get(task_id, 0), max(ep.prefix_turns for ep in eps))
            self.turns[task_id] = k - 1 if k and sum(ep.success for ep in eps) >= self.shrink_at * len(eps) else k
        return {"guide/mean_prefix_turns": sum(ep.prefix_turns for ep in episodes) / len(episodes),
                "guide/guided_share": sum(ep.prefix_turns > 0 for ep in episodes) / len(episodes)}


def replay_expert(env: Any, turns: int) -> Iterator[tuple[str, str]]:
    """Play the expert's next `turns` turns in `env`, yielding (action text, observation) after each step; the caller
    may stop early (the generator then plays no further turn)."""
    for _ in range(turns):
        action = env.expert_action()
        yield action, env.step(action).observation

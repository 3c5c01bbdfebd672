"""Expert-guided rollouts: a reverse curriculum for the tasks the policy never solves (issue #40, item 2).

A group whose episodes all fail carries no GRPO signal. So an episode starts after the expert's first k turns
(played in the environment, context with env_mask 0: never trained on), near enough the goal that the policy
succeeds sometimes. The curriculum is kept per domain, not per task: a training run meets most tasks once, so a
task's own k never got the chance to shrink (docs/RESULTS.md, "Expert prefixes alone"). Each domain starts at
`share` of the expert's path and `ExpertGuide.update` moves it with what the domain's policy can do.
`env_rollout.EnvRolloutFunc` asks `ExpertGuide` for the prefixes and replays them (`replay_expert`). Turned on by
`GRPORunConfig.expert_prefix_share`.
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence

from openmanus_lite.envs import TurnLimits, make_env, run_expert
from openmanus_lite.schema import Task


class ExpertGuide:
    """Per domain, the share of the expert's path training episodes start after."""

    def __init__(self, share: float, shrink_at: float, max_turns: TurnLimits = None):
        """`share`, `shrink_at`: GRPORunConfig's expert_prefix_share and expert_prefix_shrink_at (it checks them)."""
        self.share, self.shrink_at, self.max_turns = share, shrink_at, max_turns
        self.domain_share: dict[str, float] = {}
        """Domain -> the share of a task's expert path its episodes start after; 0 once the policy plays whole tasks."""
        self._paths: dict[str, int] = {}  # task id -> the expert's turns to success (0: it fails under the limit)

    def _path(self, task: Task) -> int:
        if task.id not in self._paths:
            messages, last = run_expert(make_env(task.domain, max_turns=self.max_turns), task)
            turns = sum(m["role"] == "assistant" for m in messages)
            self._paths[task.id] = turns if last.info.get("success") else 0
        return self._paths[task.id]

    def prefix_turns(self, tasks: Sequence[Task]) -> list[int]:
        """k for each task: its domain's share of the expert's path, less its last turn (the policy always acts), or
        0 when the expert fails it under the turn limit."""
        out = []
        for task in tasks:
            path, share = self._path(task), self.domain_share.setdefault(task.domain, self.share)
            out.append(min(int(share * path), path - 1) if path else 0)
        return out

    def update(self, episodes: Sequence[Any]) -> dict[str, float]:
        """Move each group's domain one of its task's turns closer to unguided play when the group succeeded at a
        rate of at least `shrink_at`, one turn back (up to `share`) when it never succeeded; returns this call's
        `guide/*` metrics. Episodes are `env_rollout.EpisodeTokens`."""
        by_task: dict[str, list[Any]] = {}
        for ep in episodes:
            by_task.setdefault(ep.task.id, []).append(ep)
        for eps in by_task.values():
            task, wins = eps[0].task, sum(ep.success for ep in eps)
            path, share = self._path(task), self.domain_share.setdefault(task.domain, self.share)
            if not path:  # the expert fails it: nothing to say about the domain's prefix
                continue
            if wins >= self.shrink_at * len(eps):
                self.domain_share[task.domain] = max(0.0, share - 1 / path)
            elif not wins:
                self.domain_share[task.domain] = min(self.share, share + 1 / path)
        return {"guide/mean_prefix_turns": sum(ep.prefix_turns for ep in episodes) / len(episodes),
                "guide/guided_share": sum(ep.prefix_turns > 0 for ep in episodes) / len(episodes),
                **{f"guide/{d}_prefix_share": v for d, v in sorted(self.domain_share.items())}}


def replay_expert(env: Any, turns: int) -> Iterator[tuple[str, str]]:
    """Play the expert's next `turns` turns in `env`, yielding (action text, observation) after each step; the caller
    may stop early (the generator then plays no further turn)."""
    for _ in range(turns):
        action = env.expert_action()
        yield action, env.step(action).observation

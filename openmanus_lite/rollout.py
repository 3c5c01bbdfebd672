"""Run a policy in environments, many episodes at once, and record the episodes.

Episodes advance in lock step: each round the policy gets every unfinished conversation
in one `act_batch` call (one batched forward pass for a model), then each environment
steps. Finished episodes drop out of the batch.

`run_episodes` is THE episode loop of the kit: evaluation (`eval.run_benchmark`), preference
data and corrections all play through it. Only two loops stay apart, each for a reason its
docstring gives: GRPO's token-level rollout (`train.env_rollout`, which continues exact sampled
token ids and records log-probabilities) and test-time search (`search`, which clones
environments); both build their environments with `envs.make_env` and its turn limits.
"""

from __future__ import annotations

import time
from typing import Any

from tqdm.auto import tqdm

from .envs import TurnLimits, make_env, turn_limit
from .policies import as_policy
from .schema import Task, Trajectory, Turn


def run_episodes(
    policy: Any,
    tasks: list[Task],
    *,
    max_turns: TurnLimits = None,
    batch_size: int = 32,
    progress: bool = True,
    source: str | None = None,
) -> list[Trajectory]:
    """Play one episode per task; returns trajectories with the outcome in `meta`.

    meta: task_id, difficulty, success, score, turns, invalid_actions, wall_s.
    `max_turns` may be one limit or a limit per domain ({"household": 16, ...}; domains not
    named keep their environment's default), so episodes of all domains can share batches.
    """
    policy = as_policy(policy)
    results: list[Trajectory | None] = [None] * len(tasks)
    bar = tqdm(total=len(tasks), desc=f"episodes ({policy.name})", disable=not progress)
    # with per-domain limits, episodes of equal limit share batches (a batch lasts as long as its
    # longest episode); results stay in input order
    order = list(range(len(tasks)))
    if isinstance(max_turns, dict):
        order.sort(key=lambda i: (turn_limit(max_turns, tasks[i].domain) or 0, tasks[i].domain))
    for start in range(0, len(tasks), batch_size):
        chunk = order[start:start + batch_size]
        t0 = time.perf_counter()
        envs = {i: make_env(tasks[i].domain, max_turns=max_turns) for i in chunk}
        histories = {i: [{"role": "user", "content": envs[i].reset(tasks[i])}] for i in chunk}
        last_info: dict[int, dict] = {i: {} for i in chunk}
        active = list(chunk)
        while active:
            replies = policy.act_batch([histories[i] for i in active], [envs[i] for i in active])
            still = []
            for i, reply in zip(active, replies):
                histories[i].append({"role": "assistant", "content": reply})
                step = envs[i].step(reply)
                last_info[i] = step.info
                if step.done:
                    bar.update(1)
                else:
                    histories[i].append({"role": "user", "content": step.observation})
                    still.append(i)
            active = still
        wall = time.perf_counter() - t0
        for i in chunk:
            info = last_info[i]
            results[i] = Trajectory(
                id=f"{policy.name}/{tasks[i].id}",
                source=source or f"rollout:{policy.name}",
                domain=tasks[i].domain,
                messages=[Turn(m["role"], m["content"], m["role"] == "assistant") for m in histories[i]],
                meta={
                    "task_id": tasks[i].id,
                    "difficulty": tasks[i].difficulty,
                    "success": bool(info.get("success", False)),
                    "score": float(info.get("score", 0.0)),
                    "turns": envs[i].turn,
                    "invalid_actions": envs[i].invalid_actions,
                    "wall_s": wall / len(chunk),
                },
            )
    bar.close()
    return results  # type: ignore[return-value]


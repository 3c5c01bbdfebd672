"""The kit's one episode loop (`run_episodes`): evaluation, preference data, corrections and GRPO's rollouts play
through it; environments are stepped elsewhere only where no policy picks the turns (scripted expert episodes, TRL's
tool calls, search). Each round the policy gets every unfinished conversation in one `act_batch` call, and a finished
episode's slot goes to the next task at once, so calls stay `batch_size` wide until the tasks run out (with fixed
chunks, a chunk ran as long as its longest episode, most calls a few rows wide).
"""

from __future__ import annotations

import time
from typing import Any

from tqdm.auto import tqdm

from openmanus_lite.envs import TurnLimits, make_env, turn_limit
from openmanus_lite.peak_memory import HeapTrim
from openmanus_lite.policies import as_policy
from openmanus_lite.schema import Task, Trajectory, Turn


def run_episodes(policy: Any, tasks: list[Task], *, max_turns: TurnLimits = None, batch_size: int = 32,
                 progress: bool = True, source: str | None = None,
                 max_invalid_streak: int | None = None) -> list[Trajectory]:
    """Play one episode per task; returns trajectories with the outcome in `meta` (`episode_trajectory`'s, plus
    wall_s). `max_turns` may be one limit or one per domain ({"household": 16, ...}; domains not named keep their
    environment's default), so episodes of all domains can share batches; `max_invalid_streak` (`make_env`)."""
    policy = as_policy(policy)
    results: list[Trajectory | None] = [None] * len(tasks)
    bar = tqdm(total=len(tasks), desc=f"episodes ({policy.name})", disable=not progress)
    # the longest-allowed episodes start first and the short ones fill the slots around them: started last,
    # a domain of 16-turn episodes ran its last turns a few rows wide. Popped from the end; results in input order.
    pending = list(range(len(tasks)))
    if isinstance(max_turns, dict):
        pending.sort(key=lambda i: (turn_limit(max_turns, tasks[i].domain) or 0, tasks[i].domain))
    envs: dict[int, Any] = {}
    histories: dict[int, list[dict]] = {}
    wall: dict[int, float] = {}
    active: list[int] = []
    trim = HeapTrim()
    while active or pending:
        while pending and len(active) < batch_size:
            i = pending.pop()
            envs[i], histories[i] = start_episode(tasks[i], max_turns, max_invalid_streak)
            wall[i] = 0.0
            active.append(i)
        t0 = time.perf_counter()
        replies = policy.act_batch([histories[i] for i in active], [envs[i] for i in active])
        share = (time.perf_counter() - t0) / len(active)  # each episode's share of the batched call
        trim()
        still = []
        for i, reply in zip(active, replies):
            wall[i] += share
            if reply is not None:  # None: the policy ended the episode (a GRPO rollout's token budget ran out)
                step = play_turn(envs[i], histories[i], reply)
            if reply is None or step.done:
                results[i] = episode_trajectory(tasks[i], envs[i], histories.pop(i), id=f"{policy.name}/{tasks[i].id}",
                                                source=source or f"rollout:{policy.name}", extra={"wall_s": wall.pop(i)})
                del envs[i]
                bar.update(1)
            else:
                still.append(i)
        active = still
    bar.close()
    return results  # type: ignore[return-value]


def start_episode(task: Task, max_turns: TurnLimits = None,
                  max_invalid_streak: int | None = None) -> tuple[Any, list[dict]]:
    """(a fresh environment for `task`, the conversation so far: its first observation)."""
    env = make_env(task.domain, max_turns=max_turns, max_invalid_streak=max_invalid_streak)
    return env, [{"role": "user", "content": env.reset(task)}]


def play_turn(env: Any, messages: list[dict], text: str) -> Any:
    """Step `env` with an assistant turn, appending it and (unless the episode ended) the observation."""
    messages.append({"role": "assistant", "content": text})
    step = env.step(text)
    if not step.done:
        messages.append({"role": "user", "content": step.observation})
    return step


def episode_trajectory(task: Task, env: Any, messages: list[dict], *, id: str, source: str,
                       extra: dict | None = None) -> Trajectory:
    """A finished episode as a Trajectory; `meta` holds the environment's verdict and the turn limit it ran under
    (task_id, difficulty, success, score, turns, invalid_actions, max_turns, max_invalid_streak where set, then
    `extra`), so it can be replayed."""
    info = env.last_info
    meta = {"task_id": task.id, "difficulty": task.difficulty, "success": bool(info.get("success", False)),
            "score": float(info.get("score", 0.0)), "turns": env.turn, "invalid_actions": env.invalid_actions,
            "max_turns": env.max_turns}
    if env.max_invalid_streak:
        meta["max_invalid_streak"] = env.max_invalid_streak
    meta.update(extra or {})
    turns = [Turn(m["role"], m["content"], m["role"] == "assistant") for m in messages]
    return Trajectory(id=id, source=source, domain=task.domain, messages=turns, meta=meta)

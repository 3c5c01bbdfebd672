"""What every environment test asks of a reply, however malformed: answered within a second, no exception, no
domain bug hit (`internal_error`)."""

from __future__ import annotations

import time


def assert_safe_step(env, reply: str, seconds: float = 1.0):
    """One step, checked; returns it."""
    start = time.perf_counter()
    step = env.step(reply)
    assert time.perf_counter() - start < seconds, reply[:200]
    assert isinstance(step.observation, str) and "internal_error" not in step.info, step.info.get("internal_error")
    return step


def assert_safe_steps(env, replies: list[str]) -> None:
    """Each reply in turn, checked, until the episode ends."""
    for reply in replies:
        if assert_safe_step(env, reply).done:
            break

"""In-process environments for the six domains (see base.py for the contract)."""

from __future__ import annotations

from openmanus_lite.envs.base import (
    DIFFICULTIES,
    EASY_TURN_LIMITS,
    LEVEL_TURN_LIMITS,
    MEDIUM_TURN_LIMITS,
    Env,
    InvalidAction,
    TurnLimits,
    expert_trajectories,
    generate_tasks,
    list_domains,
    make_env,
    parse_turn_limits,
    register_domain,
    run_expert,
    synthesize_trajectories,
    turn_limit,
)

__all__ = [
    "DIFFICULTIES",
    "EASY_TURN_LIMITS",
    "Env",
    "InvalidAction",
    "LEVEL_TURN_LIMITS",
    "MEDIUM_TURN_LIMITS",
    "TurnLimits",
    "expert_trajectories",
    "generate_tasks",
    "list_domains",
    "make_env",
    "parse_turn_limits",
    "register_domain",
    "run_expert",
    "synthesize_trajectories",
    "turn_limit",
]

"""In-process environments for the six domains (see base.py for the contract)."""

from __future__ import annotations

import importlib
import importlib.util

from openmanus_lite.envs.base import (
    DIFFICULTIES,
    EASY_TURN_LIMITS,
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

_DOMAIN_MODULES = ("os_shell", "sql_db", "web", "kg", "household", "shop")
_loaded = False


def _load_all() -> None:
    """Import every domain module once, so each registers itself."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for name in _DOMAIN_MODULES:
        if importlib.util.find_spec(f"{__name__}.{name}") is not None:
            importlib.import_module(f"{__name__}.{name}")


__all__ = [
    "DIFFICULTIES",
    "EASY_TURN_LIMITS",
    "Env",
    "InvalidAction",
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

"""openmanus_lite: the OpenManus-RL agent-training recipe, lightweight and notebook-first.

The public API is flat (`from openmanus_lite import make_env, load_model, run_sft`), but
every name is imported lazily, so `import openmanus_lite` stays fast and the data,
environment and reward parts work without torch or unsloth installed.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    # schema
    "DOMAINS": "schema", "EXTRA_LABELS": "schema", "SchemaError": "schema",
    "Turn": "schema", "Trajectory": "schema", "Task": "schema", "StepResult": "schema",
    # grammar
    "parse_turn": "react", "parse_action": "react", "parse_step": "react", "format_turn": "react",
    "format_tagged": "react", "parse_tagged": "react", "extract_answer": "react",
    # environments
    "Env": "envs", "make_env": "envs", "list_domains": "envs", "generate_tasks": "envs",
    "synthesize_trajectories": "envs", "run_expert": "envs",
    # rollouts and policies
    "run_episodes": "rollout", "ExpertPolicy": "policies", "RandomPolicy": "policies",
    "CallablePolicy": "policies", "as_policy": "policies",
    # rewards
    "get_reward_funcs": "rewards", "register_reward": "rewards", "build_rewards": "rewards",
    "check_reward_columns": "rewards", "parse_reward_spec": "rewards",
    # evaluation and search
    "run_benchmark": "eval", "load_suite": "eval", "comparison_table": "eval",
    # training recipes (data + SFT settings of measured runs)
    "get_recipe": "recipes", "list_recipes": "recipes",
    # models
    "load_model": "models", "prepare_default_model": "models", "build_tiny_model": "models",
    "load_tokenizer": "models", "ModelPolicy": "policies",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'openmanus_lite' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_EXPORTS))


__all__ = sorted(_EXPORTS)

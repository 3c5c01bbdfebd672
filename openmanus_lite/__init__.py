"""openmanus_lite: the OpenManus-RL agent-training recipe, lightweight and notebook-first.

The public API is flat (`from openmanus_lite import make_env, load_model, run_sft`), but
every name is imported lazily, so `import openmanus_lite` stays fast and the data,
environment and reward parts work without torch or unsloth installed.
"""

from __future__ import annotations

from openmanus_lite._lazy import lazy_exports

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
    "check_reward_columns": "rewards", "parse_reward_spec": "rewards", "reward_table": "rewards",
    # evaluation and search
    "run_benchmark": "eval", "load_suite": "eval", "comparison_table": "eval", "sign_tests": "eval",
    "make_policy": "eval", "find_checkpoint": "models",
    # training recipes (data + SFT settings of measured runs) and the tasks training may use
    "get_recipe": "recipes", "list_recipes": "recipes", "recipe_dataset": "recipes", "recipe_preset": "recipes",
    "default_recipe_name": "recipes", "recipe_tasks": "recipes", "recipe_trajectories": "recipes",
    "training_tasks": "splits", "heldout_tasks": "splits", "check_disjoint": "splits",
    # training: the trainers, their configs (TRL's, with the kit's few fields) and the presets that fill them
    "run_sft": "train.sft", "run_grpo": "train.grpo", "run_dpo": "train.dpo",
    "SFTRunConfig": "train.configs", "GRPORunConfig": "train.configs", "DPORunConfig": "train.configs",
    "RewardRunConfig": "train.configs", "get_preset": "train.presets", "default_preset_name": "train.presets",
    "load_trajectories": "train.data", "loss_token_texts": "train.data", "save_adapter": "train.sft",
    "save_merged": "train.sft", "load_trained": "train.sft", "export_gguf": "train.sft",
    "GGUFExportUnavailable": "train.sft", "load_for_grpo": "train.grpo", "build_env_dataset": "train.grpo_data",
    "build_single_turn_dataset": "train.grpo_data", "value_task_rows": "train.grpo_data",
    "unseen_rows": "train.grpo_data", "format_warmup_trajectories": "train.grpo_data",
    "single_turn_accuracy": "train.grpo", "plot_reward_curves": "train.grpo", "format_samples": "train.grpo",
    "tool_dataset": "train.tool_env", "tool_env_factory": "train.tool_env",
    # models
    "load_model": "models", "prepare_default_model": "models", "build_tiny_model": "models",
    "load_tokenizer": "models", "ModelPolicy": "policies", "count_parameters": "models",
    "generate_turns": "engine.generation",
}

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)

__all__ = sorted(_EXPORTS)

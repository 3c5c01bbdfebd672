"""openmanus_lite: the OpenManus-RL agent-training recipe, lightweight and notebook-first.

The public API is flat (`from openmanus_lite import make_env, load_model, run_sft`), but
every name is imported lazily, so `import openmanus_lite` stays fast and the data,
environment and reward parts work without torch or unsloth installed.
"""

from __future__ import annotations

import os

from openmanus_lite._lazy import lazy_exports

# oneDNN keeps every CPU kernel it builds, one per matrix shape, up to 1,024; at 32 SFT, evaluation and GRPO peaked
# 0.5-1.1 GB lower at the same speed (docs/RESULTS.md, "oneDNN's kernel cache at 32", issue #41). oneDNN reads the
# variable when torch builds its first CPU kernel: set here, unless the user sized it (a process that multiplied
# before importing the kit keeps 1,024).
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "32")

__version__ = "0.1.0"

# public name -> module that defines it
# module -> the public names it defines
_MODULES: dict[str, str] = {
    "schema": "DOMAINS EXTRA_LABELS SchemaError Turn Trajectory Task StepResult",
    "react": "parse_turn parse_action parse_step format_turn format_tagged parse_tagged extract_answer",
    "envs": "Env make_env list_domains generate_tasks synthesize_trajectories run_expert",
    "rollout": "run_episodes",
    "policies": "ExpertPolicy RandomPolicy CallablePolicy as_policy ModelPolicy",
    "rewards": "get_reward_funcs register_reward build_rewards check_reward_columns parse_reward_spec reward_table",
    "eval": "run_benchmark load_suite comparison_table sign_tests make_policy",
    # training recipes (data + SFT settings of measured runs) and the tasks training may use
    "recipes": "get_recipe list_recipes recipe_dataset recipe_preset default_recipe_name recipe_tasks "
               "recipe_trajectories",
    "splits": "training_tasks heldout_tasks check_disjoint",
    # training: the trainers, their configs (TRL's, with the kit's few fields) and the presets that fill them
    "train.sft": "run_sft save_adapter save_merged load_trained export_gguf GGUFExportUnavailable",
    "train.grpo": "run_grpo load_for_grpo single_turn_accuracy plot_reward_curves format_samples",
    "preference.dpo": "run_dpo",
    "train.configs": "SFTRunConfig GRPORunConfig DPORunConfig RewardRunConfig",
    "train.presets": "get_preset default_preset_name",
    "train.data": "load_trajectories loss_token_texts",
    "train.grpo_data": "build_env_dataset build_single_turn_dataset value_task_rows unseen_rows "
                       "format_warmup_trajectories",
    "train.tool_env": "tool_dataset tool_env_factory",
    "models": "load_model prepare_default_model build_tiny_model load_tokenizer count_parameters find_checkpoint",
    "engine.generation": "generate_turns",
}
_EXPORTS: dict[str, str] = {name: module for module, names in _MODULES.items() for name in names.split()}

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)

__all__ = sorted(_EXPORTS)

"""Reward functions for GRPO, registered by name, with TRL's signature.

Every reward is `reward(prompts, completions, **columns) -> list[float | None]` (None: TRL skips that sample), so
`GRPOTrainer` takes them unchanged; `accuracy`, `format` and `tag_count` give open-r1's values. The API is
`registry`'s (`build_rewards`, `check_reward_columns` before training); the `orm` reward is registered in
`preference.orm_reward`, which the registry imports when `orm` is looked up by name.

Columns (keyword arguments a reward reads; TRL passes every dataset column and the rollout's extra keys by name):

    solution         gold answer: accuracy (str or number), answer_match, length, cosine (also lists)
    answer_type      optional per-row "math" | "agent": force answer_match's path (answer_match_path)
    answer_ordered   optional per-row bool: answer_match's lists must match in order (else multisets)
    env_outcome      float in [0, 1]: the environment checker's final score  (multi-turn rollout)
    env_success      bool: the episode solved the task                       (multi-turn rollout)
    invalid_actions  int: turns whose action did not parse or was invalid    (multi-turn rollout)
    num_turns        int: assistant turns the episode took                   (multi-turn rollout)
    domain           str: os, db, web, kg, household, ecommerce              (multi-turn rollout)

Rewards read the last assistant message, except react_format / react_tag_count (every assistant turn) and
repetition_penalty (all of them joined). No completion makes a reward raise; values stay in its `reward_range`."""

from openmanus_lite.rewards import answers, environment, open_r1, react_format  # noqa: F401  (register the rewards)
from openmanus_lite.rewards.columns import ROLLOUT_COLUMNS, assistant_texts, last_assistant_text
from openmanus_lite.rewards.environment import trajectory_reward_inputs
from openmanus_lite.rewards.open_r1 import accuracy_skips
from openmanus_lite.rewards.registry import (
    CheckedReward,
    RewardError,
    RewardFunc,
    build_rewards,
    check_reward_columns,
    checked_reward,
    describe_rewards,
    get_reward_func,
    get_reward_funcs,
    parse_reward_spec,
    register_reward,
    reward_table,
)

__all__ = [
    "CheckedReward", "ROLLOUT_COLUMNS", "RewardError", "RewardFunc", "accuracy_skips", "assistant_texts",
    "build_rewards", "check_reward_columns", "checked_reward", "describe_rewards", "get_reward_func",
    "get_reward_funcs", "last_assistant_text", "parse_reward_spec", "register_reward", "reward_table",
    "trajectory_reward_inputs",
]

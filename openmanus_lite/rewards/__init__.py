"""Reward functions for GRPO, registered by name, with TRL's signature.

Every reward is `reward(prompts, completions, **columns) -> list[float | None]` (one value per
completion; `None` tells TRL to skip that sample for that reward), so TRL's `GRPOTrainer` takes
them unchanged. `accuracy`, `format` and `tag_count` give the values open-r1's functions give, so
`--reward_funcs accuracy format tag_count` from the OpenManus-RL README means what it meant.

    funcs, weights = build_rewards("accuracy:2 format tag_count")
    check_reward_columns("accuracy:2 format tag_count", dataset.column_names)   # before training
    GRPOTrainer(..., reward_funcs=funcs, args=GRPOConfig(reward_weights=weights, ...))

The modules, one job each: `registry` (names, specs, the column check; its API is re-exported
here), `columns` (the columns a reward reads and the text of a completion), `open_r1` (open-r1's
rewards), `answers` (answer matching: `answer_match`), `react_format` (ReAct turns) and
`environment` (what the multi-turn rollout recorded). Each reward function lives in its module
(`rewards.open_r1.accuracy_reward`); by name, `get_reward_func("accuracy")`. The `orm` reward
(a learned reward model) is registered by `openmanus_lite.train.reward_model`, which GRPO imports.

Columns (keyword arguments a reward reads; TRL passes every dataset column, and the multi-turn
rollout's extra keys, by name):

    solution         gold answer: accuracy (str or number), answer_match, length, cosine (also lists)
    answer_type      optional per-row "math" | "agent": force answer_match's path (answer_match_path)
    answer_ordered   optional per-row bool: answer_match's lists must match in order (else multisets)
    env_outcome      float in [0, 1]: the environment checker's final score  (multi-turn rollout)
    env_success      bool: the episode solved the task                       (multi-turn rollout)
    invalid_actions  int: turns whose action did not parse or was invalid    (multi-turn rollout)
    num_turns        int: assistant turns the episode took                   (multi-turn rollout)
    domain           str: os, db, web, kg, household, ecommerce              (multi-turn rollout)

Which text a reward reads: the LAST assistant message (format, tag_count, accuracy, answer_match,
reasoning_steps, length, cosine); every assistant message, one ReAct turn each (react_format,
react_tag_count); all assistant messages joined by newlines (repetition_penalty). No completion
makes any reward raise; each returns values inside its documented `reward_range` (or None).

Prototyping: `register_reward(name)` adds your own; `describe_rewards()` lists them;
`reward_table(spec, completions, **columns)` scores a batch with several rewards;
`trajectory_reward_inputs(episodes)` turns recorded episodes into the rollout's reward arguments;
`eval.plots.plot_reward_distributions(table)` plots them (notebook 05).
`benchmarks/reward_throughput.py` measures their speed.
"""

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
    "CheckedReward", "ROLLOUT_COLUMNS", "RewardError", "RewardFunc", "accuracy_skips", "assistant_texts", "build_rewards", "check_reward_columns", "checked_reward",
    "describe_rewards", "get_reward_func", "get_reward_funcs", "last_assistant_text", "parse_reward_spec",
    "register_reward", "reward_table", "trajectory_reward_inputs",
]

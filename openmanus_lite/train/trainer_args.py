"""Extra TRL settings on top of the ones the kit builds (`trainer_args` of each run config).

A run config's `trainer_args` holds any field of the trainer's config that the kit does not
wrap (`adam_beta2`, `num_iterations`, `log_completions`, ...). It overrides the kit's value,
except for the few settings the kit sets on purpose, listed here with the reason.
"""

from __future__ import annotations

from typing import Any, Mapping

KIT_OWNED: dict[str, str] = {
    "push_to_hub": "the kit uploads its final adapter / merged model itself (--push_to_hub --hub_model_id)",
    "hub_model_id": "give it as --hub_model_id; the kit pushes the final model, not checkpoints",
    "use_cpu": "set from the hardware found",
}
SFT_OWNED = {
    **KIT_OWNED,
    "packing": "the data is pre-tokenized with per-turn loss masks, which packing would mix",
    "padding_free": "the data is pre-tokenized with per-turn loss masks, which padding-free batching would mix",
    "assistant_only_loss": "the loss mask comes from the data's per-turn train flags",
    "include_num_input_tokens_seen": "the kit reports tokens per second from it",
}
GRPO_OWNED = {**KIT_OWNED, "reward_weights": "give weights in --reward_funcs, e.g. accuracy:2 format"}
DPO_OWNED = {**KIT_OWNED, "save_strategy": "the kit saves the policy at the end (save_policy)"}
RM_OWNED = {**KIT_OWNED, "save_strategy": "the kit saves the reward model at the end (rm.save)",
            "max_length": "the kit truncates the data itself (max_length of the settings)",
            "remove_unused_columns": "the process reward model's collator needs its label columns"}


def trainer_kwargs(extra: Mapping[str, Any] | None, owned: Mapping[str, str], **kwargs: Any) -> dict[str, Any]:
    """The kit's keyword arguments for a trainer config with `extra` laid over them; a ValueError
    names any extra setting the kit owns, and why."""
    extra = dict(extra or {})
    clash = {k: owned[k] for k in extra if k in owned}
    if clash:
        raise ValueError("the kit sets these trainer settings itself: "
                         + "; ".join(f"{k}: {why}" for k, why in clash.items()))
    return {**kwargs, **extra}

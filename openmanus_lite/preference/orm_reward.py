"""The `orm` GRPO reward, registered here by name: a module without torch, so listing the rewards stays light and works
without the training stack; the reward model itself (`reward_model`) loads when the reward is built."""

from __future__ import annotations

from typing import Any

from openmanus_lite.rewards import register_reward


@register_reward("orm", bounds=(0.0, 1.0), factory=True)
def orm_reward(model_path: str | None = None, batch_size: int = 8) -> Any:
    """A learned outcome reward model (`python -m openmanus_lite dpo train-rm`) scoring prompt + completion: the sigmoid
    of its Bradley-Terry logit, in (0, 1). Needs params={'orm': {'model_path': <saved reward model folder>}}."""
    if not model_path:
        raise ValueError("the orm reward needs params={'orm': {'model_path': <folder saved by train-rm>}}")
    from openmanus_lite.preference.reward_model import load_reward_model  # the training stack, only when built

    rm = load_reward_model(model_path)
    rm.batch_size = int(batch_size)
    return rm.as_reward_func()

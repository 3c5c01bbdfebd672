"""Preference learning from the environments: the route beside SFT -> GRPO, not on it.

    pairs          preference pairs and process-reward labels from episodes the environment judges
    dpo            DPO on those pairs (TRL's DPOTrainer), from an SFT checkpoint
    reward_model   outcome and process reward models (a GRPO reward, `search.py`'s scorers)
    orm_reward     the `orm` GRPO reward by name (light: the reward model loads when it is built)

None of them has yet beaten the recipe's SFT + GRPO on record (docs/RESULTS.md, "Preferences, DPO and reward
models"); `python -m openmanus_lite dpo` runs them, notebook 09 walks through them.
"""

"""The demo's SFT recipe (`python -m openmanus_lite demo`): its current settings, kept as they are.

The demo's time budget is measured (54 minutes on 2 cores: SFT 20, GRPO 6, evaluations 6-13 each; README).
The 30-minute recipe becomes the demo's once faster rollouts make the whole demo fit in 45 minutes.
"""

from ..train.measure import EASY_TURN_LIMITS
from . import Recipe

RECIPE = Recipe(
    name="demo",
    preset="cpu",  # the embedded SmolLM2-135M-Instruct with the cpu preset's LoRA
    about="the demo's SFT stage: 20 minutes on 120 expert trajectories per domain (fits the 54-minute demo)",
    split="demo_sft_train",  # splits.DEMO_SFT_SEED: tasks apart from the demo's dev-suite evaluation
    tasks_per_domain=120,  # as measured: 102 steps at 162 tokens/s in the 20 minutes (README, multi-turn GRPO)
    turn_limits=tuple(sorted(EASY_TURN_LIMITS.items())),  # the limits the demo's evaluation states
    recovery=0,  # expert episodes only, as measured; cpu_30min adds recovery episodes
    max_minutes=20.0,  # SFT's share of the measured 54-minute demo
    num_train_epochs=50,  # never the limit: the minutes are
    scheduler="linear",  # the cpu preset's default over 50 epochs: nearly constant within 20 minutes
    warmup_steps=5,
    dtype=None,  # the cpu preset's float32 (the demo's time was measured so)
    batch_size=4,
    max_length=768,  # shorter than the recipes' 1024: more steps in 20 minutes
    learning_rate=1e-3,  # the cpu preset's
)

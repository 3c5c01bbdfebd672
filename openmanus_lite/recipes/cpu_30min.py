"""The 30-minute CPU recipe: the 60-minute recipe's data, the cosine schedule sized to 30 minutes, updates of 2.

Not measured as such: a run whose schedule ended near 30 minutes (300 steps) had 68% at 30 minutes, against
33.3% at the 30-minute mark of a schedule sized to 60 (docs/RESULTS.md, "The early marks are low").
"""

from openmanus_lite.recipes.cpu_60min import RECIPE as CPU_60MIN

RECIPE = CPU_60MIN.replace(
    name="cpu_30min",
    about="30 minutes of SFT on a 2-core CPU: the 60-minute data, the cosine decaying to zero at 30 minutes",
    max_minutes=30.0,  # a decayed schedule at 30 minutes: 68% there against 33.3% with one sized to 60 (RESULTS.md)
    mark_minutes=(15.0, 30.0),
    # updates of 2 conversations, not 4: twice the updates per training token. The demo's 60 tasks: 29/60 after
    # 0.30M tokens (252 steps) against 23/60 after 0.38M with updates of 4 (157 steps); 9 gained, 3 lost
    # (docs/RESULTS.md, "Learning per token", issue #41); `make demo` with it: 33/60 after 0.355M tokens (301 steps)
    gradient_accumulation_steps=2,
)

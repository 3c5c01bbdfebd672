"""The 30-minute CPU recipe: the 60-minute recipe's data and updates, the cosine schedule sized to 30 minutes.

`make demo` trains it: 57/60 = 95.0% on the demo's held-out tasks after 1.07M tokens (594 tokens/s, bf16; every run,
float32 too, in docs/RESULTS.md, "The demo").
"""

from openmanus_lite.recipes.cpu_60min import RECIPE as CPU_60MIN

RECIPE = CPU_60MIN.replace(
    name="cpu_30min",
    about="30 minutes of SFT on a 2-core CPU: the 60-minute data, the cosine decaying to zero at 30 minutes",
    # a schedule decayed at 30 minutes: 68% there against 33.3% at the 30-minute mark of one sized to 60
    # (docs/RESULTS.md, "The early marks are low")
    max_minutes=30.0,
    mark_minutes=(15.0, 30.0),
)

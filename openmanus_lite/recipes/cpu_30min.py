"""The 30-minute CPU recipe: the 60-minute recipe's data and updates, the cosine schedule sized to 30 minutes.

`make demo` trains it: 33/60 = 55.0% on the demo's held-out tasks after 0.355M tokens (301 steps at ~200 tokens/s,
bf16), 43/60 and 44/60 after 0.54M (454-455 steps at ~298 tokens/s, float32 on a CPU without native bf16), easy
tasks only; with the medium tasks now in the mix 42/60 after 0.59M (494 steps at 327 tokens/s, bf16 on AMX;
docs/RESULTS.md, "The demo"). The schedule sized to 30 minutes: 68% there against 33.3% at the 30-minute mark of a
schedule sized to 60 (docs/RESULTS.md, "The early marks are low").
"""

from openmanus_lite.recipes.cpu_60min import RECIPE as CPU_60MIN

RECIPE = CPU_60MIN.replace(
    name="cpu_30min",
    about="30 minutes of SFT on a 2-core CPU: the 60-minute data, the cosine decaying to zero at 30 minutes",
    max_minutes=30.0,  # a decayed schedule at 30 minutes: 68% there against 33.3% with one sized to 60 (RESULTS.md)
    mark_minutes=(15.0, 30.0),
)

"""The 8 GB GPU recipe: the CPU recipes' data on the gpu8 preset (the t4 model, smaller batches).

No GPU has measured it: data from cpu_60min, SFT settings from the gpu8 preset (train/presets.py).
"""

from openmanus_lite.recipes.t4 import RECIPE as T4

RECIPE = T4.replace(
    name="gpu8",
    preset="gpu8",  # QLoRA of the same 1.5B model under ~6 GB (the preset's assumptions)
    about="8 GB GPU: the cpu_60min data, the gpu8 preset's QLoRA settings, 2 epochs (not measured on a GPU)",
    per_device_train_batch_size=2,  # the preset's: 2 x 1536 with checkpointing stays under ~6 GB
    gradient_accumulation_steps=8,  # still 16 conversations per optimizer step
    max_length=1536,  # the preset's; longer household episodes are cut at a turn boundary
)

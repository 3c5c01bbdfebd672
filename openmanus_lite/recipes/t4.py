"""The Colab T4 recipe: the CPU recipes' data on the t4 preset (Qwen2.5-1.5B-Instruct in 4-bit, QLoRA).

No GPU has measured it: the data recipe is the one that met every CPU target (cpu_60min), the SFT settings
are the t4 preset's (train/presets.py), with a budget of epochs instead of minutes.
"""

from openmanus_lite.recipes.cpu_60min import RECIPE as CPU_60MIN

RECIPE = CPU_60MIN.replace(
    name="t4",
    preset="t4",  # QLoRA of a 1.5B model: 16 GB, fp16 only (the preset's assumptions)
    about="Colab T4: the cpu_60min data, the t4 preset's QLoRA settings, 2 epochs (not measured on a GPU)",
    max_minutes=None,  # not measured: an epoch budget, as the preset has
    mark_minutes=(),
    num_train_epochs=2,  # the t4 preset's: each task's episodes seen twice
    lr_scheduler_type="cosine",  # a step-based cosine: the steps of 2 epochs are known beforehand
    warmup_steps=10,  # the preset's
    dtype=None,  # the device's choice (fp16 on a T4, precision.py)
    per_device_train_batch_size=4,  # the preset's: 4 x 2048 with Unsloth's checkpointing fits in a few GB
    gradient_accumulation_steps=4,  # 16 conversations per optimizer step (the preset's)
    max_length=2048,  # the preset's: no episode needs cutting
    learning_rate=2e-4,  # the preset's QLoRA rate; the CPU recipe's 1e-3 was tuned for 135M on 2 cores
    lora_r=None,  # the preset's LoRA (r=16, alpha=32, all projections)
    lora_alpha=None,
)

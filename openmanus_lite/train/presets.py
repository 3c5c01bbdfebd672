"""Hardware presets: which model, how it is loaded, and each training stage's settings that fit the machine.

A stage's settings are plain mappings with the TRL config's field names, built into a config only when asked
(`preset.sft_config(learning_rate=5e-4)`), so listing presets never imports TRL. GPU presets name the card memory
they are sized for (`memory_gb`, checked by `presets --memory`); precision follows the device, not the preset.

    t4         Colab T4 (16 GB, fp16 only): Qwen2.5-1.5B-Instruct in 4-bit (QLoRA)
    gpu8       an 8 GB consumer GPU: the same model, smaller batches
    cpu        this kind of machine (2 cores, no GPU): the embedded SmolLM2-135M-Instruct + LoRA
    cpu_debug  the tiny from-scratch model, full fine-tuning: seconds per run, for tests

A preset says what fits the machine; a recipe (openmanus_lite/recipes) says what to train on it.
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from openmanus_lite.models import LoraSpec, gpu_unusable_reason, require_gpu

TINY_MODEL = "tiny"
"""Preset model name for the tiny from-scratch model (built once under the cache folder)."""


@dataclass
class Preset:
    name: str
    model: str
    """A hub name, a local checkpoint, 'default' (SmolLM2-135M-Instruct) or 'tiny'."""
    assumptions: str
    load_in_4bit: bool = False
    dtype: str | None = None
    """None: the device's choice (precision.py). 'bfloat16' on a GPU that only emulates it is refused at load."""
    max_seq_length: int = 2048
    lora: LoraSpec | None = None
    """None: full fine-tuning (only sensible for the tiny model)."""
    backend: str = "auto"
    max_new_tokens: int = 96
    """Tokens per generated assistant turn in evaluation and rollouts."""
    eval_batch_size: int = 32
    sft: dict[str, Any] = field(default_factory=dict)
    grpo: dict[str, Any] = field(default_factory=dict)
    """For all three modes (`grpo_config(mode="multi")` picks the mode)."""
    dpo: dict[str, Any] = field(default_factory=lambda: dict(DPO))
    reward_model: dict[str, Any] = field(default_factory=lambda: dict(REWARD_MODEL))
    """Outcome / process reward model training (the base loads in float32; mixed precision on a GPU)."""
    memory_gb: float | None = None
    """The GPU memory the preset is sized for (GB, as torch reports the card); None: a CPU."""

    def replace(self, **changes) -> "Preset":
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise ValueError(f"unknown preset fields {sorted(unknown)}")
        return replace(copy.deepcopy(self), **changes)

    def _config(self, class_name: str, settings: dict[str, Any], overrides: dict[str, Any]):
        """A train/configs.py class built only when asked, so that listing presets never imports TRL."""
        from openmanus_lite.train import configs

        return getattr(configs, class_name)(**{**settings, **overrides})

    def sft_config(self, **overrides: Any):
        """The SFT stage's SFTRunConfig: the preset's settings, then `overrides`."""
        return self._config("SFTRunConfig", self.sft, overrides)

    def grpo_config(self, **overrides: Any):
        return self._config("GRPORunConfig", self.grpo, overrides)

    def dpo_config(self, **overrides: Any):
        return self._config("DPORunConfig", self.dpo, overrides)

    def reward_config(self, **overrides: Any):
        return self._config("RewardRunConfig", self.reward_model, overrides)

    def with_dtype(self, dtype: str | None) -> "Preset":
        """This preset loading its weights in `dtype` ('auto': bfloat16 where native; None: unchanged). Emulated
        bfloat16 on a CPU is an error: ~28x slower (benchmarks/cpu_bf16.py), where native bf16 is 1.75x faster."""
        if dtype is None:
            return self
        from openmanus_lite.engine.precision import resolve_precision

        return self.replace(dtype=resolve_precision(dtype, cpu_bf16=True, strict=True).name)

    def resolve_model(self, model: str | None = None) -> str:
        """The model to load: `model` if given, else the preset's; 'tiny' is built once and cached."""
        name = model or self.model
        return str(tiny_model_path()) if name == TINY_MODEL else name

    def load(self, model: str | None = None, *, for_training: bool = True) -> tuple[Any, Any]:
        """(model, tokenizer) with this preset's settings (LoRA attached when training); a GPU preset needs a GPU."""
        import torch

        from openmanus_lite.models import load_model

        if self.memory_gb is not None:
            require_gpu(f"preset {self.name!r} (sized for a {self.memory_gb:.0f} GB GPU)")
        return load_model(self.resolve_model(model), backend=self.backend, load_in_4bit=self.load_in_4bit,
                          max_seq_length=self.max_seq_length, lora=self.lora if for_training else None,
                          dtype=getattr(torch, self.dtype) if self.dtype else None,
                          full_finetuning=for_training and self.lora is None)


def tiny_model_path() -> Path:
    from openmanus_lite.models import build_tiny_model
    from openmanus_lite.paths import CACHE_DIR

    out = CACHE_DIR / "tiny-model"
    if not (out / "config.json").is_file():
        build_tiny_model(out, seed=0)
    return out


SFT = dict(max_steps=-1, num_train_epochs=1.0, per_device_train_batch_size=4, gradient_accumulation_steps=1,
           learning_rate=2e-4, lr_scheduler_type="linear", warmup_steps=2, max_length=1024, optim="adamw_torch",
           logging_steps=1, save_steps=50, save_total_limit=2, seed=0)
"""SFT settings every preset starts from (the kit's, where they differ from TRL's defaults)."""
GRPO = dict(max_steps=20, learning_rate=5e-6, num_generations=4, per_device_train_batch_size=4,
            gradient_accumulation_steps=1, max_completion_length=128, max_episode_tokens=512, max_new_tokens=96,
            logging_steps=1, save_steps=10, save_total_limit=2, seed=0)
"""GRPO settings every preset starts from (max_completion_length: single-turn answers; max_episode_tokens:
a whole multi-turn episode)."""
DPO = dict(learning_rate=2e-5, num_train_epochs=1.0, per_device_train_batch_size=4, per_device_eval_batch_size=4,
           gradient_accumulation_steps=1, max_length=1024, logging_steps=5, seed=0, lora_r=16, lora_alpha=32)
REWARD_MODEL = {**DPO, "learning_rate": 1e-4}
"""DPO and reward-model settings every preset starts from: LoRA r=16 on a small model, the kit's time budget unset."""

GPU_GRPO_MINUTES = 30
"""The GPU presets' GRPO time budget, unmeasured: multi-turn rollouts through `generate` at perhaps ~20 tokens/s
per episode on a T4 make a 16-episode step 1-2 minutes, so 500 steps would outlast a Colab session many times."""
_GPU_SFT = {**SFT, "num_train_epochs": 2, "warmup_steps": 10, "optim": "adamw_8bit", "save_steps": 100,
            "logging_steps": 5}  # gradient_checkpointing stays off: Unsloth's own is set on the LoRA model
_GPU_GRPO = {**GRPO, "max_steps": 500, "save_steps": 50, "sample_every": 25, "max_minutes": GPU_GRPO_MINUTES}


def _pairs(settings: dict[str, Any], batch: int, accumulate: int, **more: Any) -> dict[str, Any]:
    """DPO / reward-model `settings` at `batch` pairs per pass (train and eval), `accumulate` passes per update."""
    return {**settings, "per_device_train_batch_size": batch, "per_device_eval_batch_size": batch,
            "gradient_accumulation_steps": accumulate, **more}


def _qlora_preset(name: str, pairs: tuple[int, int], **settings: Any) -> Preset:
    """A GPU preset of Qwen2.5-1.5B-Instruct in 4-bit with Unsloth's gradient checkpointing. DPO and reward models
    train `pairs` = (pairs per pass, passes per update) on 4-bit / 16-bit bases with checkpointing: the DPO logits
    of a pair (151,936 vocabulary x 2 sequences, float32 copies for the loss and the reference pass) dominate
    (train/memory.py)."""
    batch, accumulate = pairs
    return Preset(name=name, model="unsloth/Qwen2.5-1.5B-Instruct-bnb-4bit", load_in_4bit=True,
                  lora=LoraSpec(gradient_checkpointing="unsloth"), max_new_tokens=128,
                  dpo=_pairs(DPO, batch, accumulate, load_in_4bit=True, gradient_checkpointing=True),
                  reward_model=_pairs(REWARD_MODEL, batch, accumulate, gradient_checkpointing=True), **settings)


PRESETS: dict[str, Preset] = {
    "t4": _qlora_preset(
        "t4",
        pairs=(2, 4),
        assumptions=(
            "Colab T4: 16 GB (about 15 usable), fp16 only, ~65 TFLOPS fp16. A 1.5B model in nf4 is ~1.2 GB of "
            "weights; LoRA r=16 on all projections adds ~18M trainable parameters. With Unsloth's gradient "
            "checkpointing, batch 4 x 2048 tokens of activations fits in a few GB; gradient accumulation 4 gives "
            "16 conversations per optimizer step. 8-bit AdamW keeps optimizer state small."
        ),
        max_seq_length=2048,
        eval_batch_size=64,
        sft={**_GPU_SFT, "output_dir": "runs/sft_t4", "gradient_accumulation_steps": 4, "max_length": 2048},
        # GRPO: 8 samples per prompt x 2 prompts per step; 512-token answers, 8-turn episodes of up to
        # 1536 tokens; vLLM generation (single-turn) when installed; beta 0 + DAPO loss as TRL defaults.
        grpo={**_GPU_GRPO, "output_dir": "runs/grpo_t4", "num_generations": 8, "per_device_train_batch_size": 8,
              "gradient_accumulation_steps": 2, "max_completion_length": 512, "max_episode_tokens": 1536,
              "max_new_tokens": 256, "max_turns": 8},
        memory_gb=15.8,
    ),
    "gpu8": _qlora_preset(
        "gpu8",
        pairs=(1, 8),
        assumptions=(
            "An 8 GB consumer GPU (e.g. RTX 3060 Ti / 4060): the same QLoRA model as t4 (~1.2 GB weights); "
            "batch 2 x 1536 tokens with Unsloth's gradient checkpointing stays under ~6 GB; accumulation 8 keeps "
            "16 conversations per optimizer step. bf16 where the GPU has it (Ampere and newer)."
        ),
        max_seq_length=1536,
        sft={**_GPU_SFT, "output_dir": "runs/sft_gpu8", "per_device_train_batch_size": 2,
             "gradient_accumulation_steps": 8, "max_length": 1536},
        # GRPO: 4 samples per prompt, 4 prompts per optimizer step through accumulation; shorter budgets.
        grpo={**_GPU_GRPO, "output_dir": "runs/grpo_gpu8", "gradient_accumulation_steps": 4,
              "max_completion_length": 384, "max_episode_tokens": 1024, "max_new_tokens": 192, "max_turns": 6},
        memory_gb=8.6,
    ),
    "cpu": Preset(
        name="cpu",
        model="default",
        assumptions=(
            "2 CPU cores, no GPU: the embedded SmolLM2-135M-Instruct, loaded in float32 (any CPU; 4-bit would add "
            "dequantization work); recipes' dtype 'auto' trains in bf16 where the CPU has it natively (1.75x faster; "
            "emulated on AVX2-only CPUs, ~28x slower: benchmarks/cpu_bf16.py). Throughput is the constraint (SFT ~590 "
            "tokens/s in bf16 on an idle 2-core machine: docs/RESULTS.md, \"The demo\"), so: no gradient "
            "checkpointing (it made a step 1.4x slower), updates of 4 conversations, two a forward/backward pass in "
            "one unpadded row in bf16 (one a pass in float32), length-grouped batches, a high LoRA learning rate "
            "(1e-3) for many updates per token, and trajectories cut to max_length tokens. "
            "Figures: benchmarks/sft_learning.py and benchmarks/train_throughput.py."
        ),
        dtype="float32",
        max_seq_length=1024,
        lora=LoraSpec(),
        # SFT: updates of 4, two conversations a pass in one row without padding (TRL's padding_free, each attended
        # alone: engine/attention.py): 1.13x the tokens/s of one a pass in bf16, peak 2.7 -> 4.8 GB (docs/RESULTS.md,
        # "Two conversations a pass"); float32 passes one at a time (train.sft.CPU_PACKED_DTYPES). Decoder layers
        # compiled in place for SFT and GRPO (train/compiled_layers.py; GRPO 3.49 -> 3.15 GB at the same pace).
        sft={**SFT, "output_dir": "runs/sft_cpu", "learning_rate": 1e-3, "warmup_steps": 5, "save_steps": 25,
             "per_device_train_batch_size": 2, "gradient_accumulation_steps": 2, "padding_free": True,
             "compile_layers": True},
        # DPO and reward models: one pair per pass, 4 accumulated (issue #41: a padded SFT batch of 4 had cost 7.52 GB
        # against 3.56 one conversation at a time)
        dpo=_pairs(DPO, 1, 4),
        reward_model=_pairs(REWARD_MODEL, 1, 4),
        # GRPO on 2 cores: one group of 4 samples per step, one episode per forward/backward pass (the group's 4
        # accumulated; benchmarks/memory.py --stages grpo, issue #41); 48-token single-turn answers; episodes of at
        # most 5 turns of up to 96 tokens, as evaluation allows (with 48, a quarter of the 60-minute checkpoint's
        # ecommerce replies were cut and its GRPO probe solved 0 of 10: docs/RESULTS.md, issue #31), 640 tokens with
        # observations. Learning rate 1e-4: 2e-5 moved nothing in 24 steps (benchmarks/grpo_learning.py). Variance
        # filtering and GiGPO stay off until measured against this plain setting (issue #40, docs/RESULTS.md).
        # Gradient checkpointing: the demo's GRPO stage peaked at 5.7 GB without, 4.4 with, its steps no slower
        # within noise (rollouts take most of a step; issue #41). SFT keeps it off: it costs SFT time.
        grpo={**GRPO, "output_dir": "runs/grpo_cpu", "max_steps": 40, "learning_rate": 1e-4,
              "per_device_train_batch_size": 1, "gradient_accumulation_steps": 4, "gradient_checkpointing": True,
              "max_completion_length": 48, "max_episode_tokens": 640, "max_new_tokens": 96, "max_turns": 5,
              "sample_every": 10, "compile_layers": True},
    ),
    "cpu_debug": Preset(
        name="cpu_debug",
        model=TINY_MODEL,
        assumptions=(
            "Tests and smoke runs: the tiny from-scratch Qwen2 model (<1M parameters, its own BPE tokenizer), "
            "full fine-tuning in float32, short sequences; a step takes well under a second on 2 cores. It "
            "learns formats, not to copy names, so success rates stay near zero."
        ),
        dtype="float32",
        max_seq_length=512,
        max_new_tokens=32,
        eval_batch_size=16,
        sft={**SFT, "output_dir": "runs/sft_cpu_debug", "max_steps": 20, "learning_rate": 1e-3, "max_length": 512,
             "save_steps": 10},
        grpo={**GRPO, "output_dir": "runs/grpo_cpu_debug", "max_steps": 3, "learning_rate": 1e-4, "num_generations": 2,
              "max_completion_length": 16, "max_episode_tokens": 96, "max_new_tokens": 12, "max_turns": 3,
              "save_strategy": "no"},
    ),
}


def default_preset_name() -> str:
    """`t4` (the smallest GPU preset, the safe guess) when torch can use a GPU, else `cpu`, warning why."""
    import torch

    if torch.cuda.is_available():
        return "t4"
    reason = gpu_unusable_reason()
    if reason:
        warnings.warn(f"{reason} Until then the `cpu` preset is chosen.", RuntimeWarning, stacklevel=2)
    return "cpu"


def get_preset(name: str) -> Preset:
    """A copy of a preset (changing it does not change the table)."""
    if name not in PRESETS:
        raise KeyError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    return copy.deepcopy(PRESETS[name])

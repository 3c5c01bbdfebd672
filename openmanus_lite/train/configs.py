"""The trainers' configs: TRL's own config classes, each with the few fields the kit adds (help text in the field
metadata, so `HfArgumentParser` reads them like TRL's own):

    SFTRunConfig     time budget (max_minutes, mark_minutes, clock), lr_scheduler_type="cosine_by_time", resume
    GRPORunConfig    mode (single / multi / tool), rewards by name, episode budgets, turn limits, sample printing
    DPORunConfig     time budget, the fresh LoRA adapter, how the start checkpoint loads
    RewardRunConfig  time budget, LoRA (the ORM's RewardConfig; the PRM trains with the same TrainingArguments)

Defaults that differ from TRL's: bf16 / fp16 unset mean the device's choice, gradient checkpointing is off (Unsloth's
LoRA models bring their own), and SFT data is pre-tokenized with per-turn loss masks (no packing, no re-masking;
`padding_free` batches keep them).
Importing this module imports TRL (after unsloth).
"""

from __future__ import annotations

import contextlib
import json
import math
import warnings
from dataclasses import dataclass, field
from typing import Any

from openmanus_lite.engine.precision import trainer_precision
from openmanus_lite.errors import UserError
from openmanus_lite.train.compiled_layers import compile_layers_for
from openmanus_lite.train.lean_lora import lean_lora_inputs_for


def import_trl():
    """`trl`, imported after unsloth when unsloth is installed (TRL's CPU kernels need its patch)."""
    with contextlib.suppress(Exception):
        import unsloth  # noqa: F401
    import trl

    return trl


trl = import_trl()

TIME_COSINE = "cosine_by_time"
MODES = ("single", "multi", "tool")
DEFAULT_REWARDS = {"single": "answer_match format tag_count", "multi": "env_outcome",
                   "tool": "env_outcome invalid_action:0.25"}
"""Multi-turn rewards the outcome alone (issue #28): with `react_format:0.25 invalid_action:0.25` added, a tidy
one-turn answer out-earned failed multi-turn attempts and held-out db success fell 10/50 -> 0/50; `env_outcome`
alone took it to 24/50 (benchmarks/grpo_learning.py --part multi)."""


def _option(default: Any, help_text: str) -> Any:
    """A field the kit adds, its help text in the metadata (see the module doc)."""
    return field(default=default, metadata={"help": help_text})


def _default(base: type, name: str, value: Any) -> Any:
    """A field of `base` with the kit's default and TRL's help text."""
    return field(default=value, metadata=base.__dataclass_fields__[name].metadata)


@dataclass
class _KitConfig:
    """What every kit config adds: a time budget, lean LoRA inputs and the defaults of the module doc."""

    max_minutes: float | None = _option(None, "Stop (with a final save, where the config saves) after this many "
        "minutes of training time; SFT does not count the evaluation at its marks.")
    lean_lora_inputs: bool = _option(True, "On a CPU, LoRA adapters over 16-bit weights save their 16-bit input for "
        "the backward pass instead of PEFT's float32 copy (same arithmetic; ~1.9 GB less at batch 4 x 1024 on "
        "SmolLM2-135M: train/lean_lora.py). False: PEFT's own path.")
    compile_layers: bool = _option(False, "On a CPU, compile the decoder layers in place with torch.compile before "
        "training (train/compiled_layers.py; needs a C++ compiler, else the layers stay eager with a message). Not "
        "TRL's torch_compile, which compiles through accelerate: measured slower here.")
    bf16: bool | None = _default(trl.SFTConfig, "bf16", None)  # TRL's help is the same in all four configs
    fp16: bool | None = _default(trl.SFTConfig, "fp16", None)
    gradient_checkpointing: bool = _default(trl.SFTConfig, "gradient_checkpointing", False)

    def _kit_post_init(self, **required: tuple[Any, str]) -> None:
        """Precision from the device and the kit's checks, then TRL's `__post_init__`. `required`: settings the
        kit sets itself, {name: (value, why)}, refused at any other value."""
        fp16 = False if self.bf16 is False and self.fp16 is None else self.fp16  # bf16=False: no mixed precision
        for key, value in trainer_precision(self.bf16, fp16).trainer_kwargs().items():
            setattr(self, key, value)
        rules = (  # checked here, before any data or model loads (torch would refuse some only at the first step)
            ("learning_rate", math.isfinite(self.learning_rate) and self.learning_rate >= 0, "a finite number >= 0"),
            ("per_device_train_batch_size", self.per_device_train_batch_size >= 1, "at least 1"),
            ("gradient_accumulation_steps", self.gradient_accumulation_steps >= 1, "at least 1"),
            ("max_steps", self.max_steps >= 1 or self.max_steps == -1,
             "at least 1, or -1 to train num_train_epochs (0 would train a whole epoch)"),
            ("num_train_epochs", math.isfinite(self.num_train_epochs) and self.num_train_epochs > 0, "positive"),
            ("max_minutes", self.max_minutes is None or self.max_minutes > 0, "positive"),
        )
        wrong = [f"{name} must be {rule}, got {getattr(self, name)}" for name, ok, rule in rules if not ok]
        if wrong:
            raise UserError("; ".join(wrong))
        required = {"push_to_hub": (False, "the kit uploads its final adapter / merged model itself (--push_to_hub "
                                           "--hub_model_id)"), **required}
        refused = {k: why for k, (value, why) in required.items() if getattr(self, k) != value}
        if refused:
            raise ValueError("the kit sets these trainer settings itself: "
                             + "; ".join(f"{k}: {w}" for k, w in refused.items()))
        super().__post_init__()


@dataclass
class SFTRunConfig(_KitConfig, trl.SFTConfig):
    """TRL's SFTConfig for the kit's pre-tokenized agent data, with a time budget (see the module doc)."""

    mark_minutes: list[float] = field(default_factory=list, metadata={
        "help": "Training-time marks (minutes) at which a checkpoint is saved and run_sft's on_mark is called."})
    clock: str = _option("wall", "How training time is counted: 'wall' seconds, or 'cpu' (this process's CPU seconds / "
        "torch threads, an estimate of wall time on an idle machine when other processes share the CPU).")
    cosine_by_time: bool = _option(False, "A cosine decay over max_minutes of training time after warmup_steps (set by "
        "lr_scheduler_type='cosine_by_time'): for time budgets, where the steps that fit are not known beforehand and "
        "a step-based cosine ends either early or undecayed.")
    resume: str = _option("auto", "'auto': continue from the newest complete checkpoint in output_dir if there is one; "
        "a path: from that one; False (or 'no'): start fresh.")
    output_dir: str | None = _default(trl.SFTConfig, "output_dir", "runs/sft")
    train_sampling_strategy: str = _default(trl.SFTConfig, "train_sampling_strategy", "group_by_length")

    def __post_init__(self):
        if self.lr_scheduler_type == TIME_COSINE:
            self.cosine_by_time, self.lr_scheduler_type = True, "constant_with_warmup"  # the callback reshapes it
        if self.cosine_by_time and not self.max_minutes:
            raise ValueError(f"lr_scheduler_type {TIME_COSINE!r} decays over max_minutes of training time: "
                             "set max_minutes")
        if self.clock not in ("wall", "cpu"):
            raise ValueError(f"clock must be 'wall' or 'cpu', got {self.clock!r}")
        self.mark_minutes = sorted(float(m) for m in self.mark_minutes)
        self.data_seed = self.seed if self.data_seed is None else self.data_seed
        if self.include_num_input_tokens_seen in ("no", False):
            self.include_num_input_tokens_seen = "non_padding"
        # padding_free (a batch's conversations in one row) keeps each row's loss mask, where packing would cut and
        # join rows across conversations. Unsloth's CPU backend turns it off, saying SDPA would attend across the
        # row's conversations: transformers' masks from the position ids keep them apart, and the kit's attention
        # attends each alone (engine/attention.py; tests/engine/test_packed_attention.py), so it is put back.
        padding_free = self.padding_free
        self._kit_post_init(packing=(False, "the data is pre-tokenized with per-turn loss masks, which it would mix"),
                            assistant_only_loss=(False, "the loss mask comes from the data's per-turn train flags"),
                            include_num_input_tokens_seen=("non_padding", "the kit reports tokens per second from it"))
        self.padding_free = padding_free


@dataclass
class GRPORunConfig(_KitConfig, trl.GRPOConfig):
    """TRL's GRPOConfig with the kit's modes, rewards by name and episode budgets (see the module doc)."""

    mode: str = _option("single", "single: one answer per prompt; multi: whole episodes in the environments "
        "(rollout_func); tool: the environments' actions as tools (environment_factory).")
    rewards: str | None = _option(None, "Reward spec, registered names or package.module:function, each with an "
        "optional :weight, e.g. 'accuracy:2 format tag_count'; None: the mode's default (DEFAULT_REWARDS).")
    max_episode_tokens: int | None = _option(None, "multi / tool: tokens of the whole episode after the prompt (turns "
        "and observations); it becomes max_completion_length in those modes.")
    max_new_tokens: int = _option(96, "multi: tokens per assistant turn.")
    max_turns: int | str | None = _option(None, "multi / tool: turn limit per episode, one number or {domain: turns} "
        "(JSON on the command line); None: the environment's own.")
    sample_every: int = _option(0, "Print sample episodes every N steps (0: never).")
    drop_uniform_groups: bool = _option(False, "Drop the groups whose rewards are all equal (zero advantage) before "
        "any forward or backward pass, and normalise the loss over the kept groups' tokens (DAPO's dynamic sampling; "
        "train/grpo_signal.py).")
    refill_rounds: int = _option(0, "With drop_uniform_groups: up to this many extra rollout rounds per step, on "
        "prompts drawn at random from the training set, to replace dropped groups (bounded, so a step never stalls; 0: "
        "train on what is kept).")
    signal_warning_share: float = _option(0.5, "Warn, naming the cause, when fewer than this share of a step's groups "
        "have rewards that differ.")
    step_advantage_weight: float = _option(0.0, "multi: step-level credit (GiGPO), 0 = off: each turn's advantage "
        "among the group's turns that start from the same state (discounted returns), times this weight, is added to "
        "the episode advantage on that turn's tokens.")
    step_discount: float = _option(0.95, "The discount of the turn returns step_advantage_weight compares (shorter "
        "paths to success win).")
    expert_prefix_share: float = _option(0.0, "multi: expert-guided rollouts, 0 = off. A group that always fails has "
        "no signal, and sampling more does not reach past what the policy can solve: a task's training episodes start "
        "after this share of the expert's turns (replayed as context the loss skips); a reverse curriculum per domain "
        "takes one turn off each time a group succeeds often enough and puts one back when a group never succeeds "
        "(train/expert_guidance.py).")
    expert_prefix_shrink_at: float = _option(0.5, "With expert_prefix_share: the success rate of a group at which its "
        "domain's expert prefix shrinks by a turn.")
    expert_in_failed_groups: bool = _option(False, "multi: off-policy expert samples (LUFFY), off by default. In a "
        "group whose episodes all failed, the last episode is swapped for the expert's whole episode, its actions "
        "trained on as the model's own tokens, so the group carries a success the policy did not reach by sampling "
        "(env_rollout.expert_episode_tokens).")
    check_template: bool = _option(True, "multi: before training, check that the chat template renders a whole "
        "conversation as the exact tokens the rollout trains on (grpo_signal.check_chat_template).")
    output_dir: str | None = _default(trl.GRPOConfig, "output_dir", "runs/grpo")
    use_vllm: bool | None = _option(None, "Single-turn generation with vLLM (colocate mode): None = when a GPU and "
        "vLLM are there. The multi-turn rollout always generates with transformers' generate.")
    max_tool_calling_iterations: int | None = _default(trl.GRPOConfig, "max_tool_calling_iterations", 6)

    def __post_init__(self):
        import torch

        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if isinstance(self.max_turns, str):
            self.max_turns = json.loads(self.max_turns)
        if not (0 <= self.expert_prefix_share <= 1 and 0 < self.expert_prefix_shrink_at <= 1):
            raise ValueError("expert_prefix_share must be in [0, 1] and expert_prefix_shrink_at in (0, 1], got "
                             f"{self.expert_prefix_share} and {self.expert_prefix_shrink_at}")
        if self.mode != "single" and self.max_episode_tokens is not None:
            self.max_completion_length = self.max_episode_tokens
        on_gpu = torch.cuda.is_available()
        if self.use_vllm is None:
            self.use_vllm = on_gpu and vllm_available() and self.mode == "single"
        elif self.use_vllm and not on_gpu:
            raise ValueError("use_vllm needs a GPU; on CPU generation goes through transformers' generate")
        elif self.use_vllm and not vllm_available():
            raise ValueError("use_vllm is set but vLLM is not installed (pip install vllm), or leave use_vllm unset")
        if self.use_vllm:
            self.vllm_mode = "colocate"
        self._kit_post_init(reward_weights=(None, "give weights in rewards (--reward_funcs), e.g. accuracy:2 format; "
                                                  "run_grpo sets them"))
        if self.epsilon_high not in (None, self.epsilon) and self.loss_type != "cispo" and self.trains_on_policy:
            warnings.warn(f"epsilon_high={self.epsilon_high} changes nothing here: each generation batch takes one "
                          "optimizer step, so the importance ratio is exactly 1 and PPO's clip never acts; clip-higher "
                          "needs a batch to serve several steps (num_iterations > 1, or steps_per_generation larger "
                          "than gradient_accumulation_steps)", stacklevel=3)

    @property
    def trains_on_policy(self) -> bool:
        """Whether every sample trains the weights that generated it (TRL then skips the old log-probabilities and its
        importance ratio is exactly 1), as when one generation batch is one optimizer step, TRL's default."""
        every = self.steps_per_generation * self.num_iterations
        return not self.use_vllm and self.gradient_accumulation_steps % every == 0

    @property
    def reward_spec(self) -> str:
        return self.rewards or DEFAULT_REWARDS[self.mode]


@dataclass
class DPORunConfig(_KitConfig, trl.DPOConfig):
    """TRL's DPOConfig with a time budget and the fresh LoRA adapter DPO trains on the SFT checkpoint."""

    lora_r: int = _option(16, "Rank of the LoRA adapter DPO trains (its reference is the adapter-free SFT model, so it "
        "must be > 0).")
    lora_alpha: int = _option(32, "LoRA alpha.")
    backend: str = _option("auto", "How the start checkpoint loads: auto, unsloth or hf.")
    load_in_4bit: bool = _option(False, "Load the start checkpoint in 4-bit (QLoRA).")
    output_dir: str | None = _default(trl.DPOConfig, "output_dir", None)
    save_strategy: str = _default(trl.DPOConfig, "save_strategy", "no")

    def __post_init__(self):
        if self.lora_r <= 0:
            raise ValueError("DPO here trains a LoRA adapter (its reference is the adapter-free SFT model): lora_r > 0")
        self._kit_post_init(save_strategy=("no", "the kit saves the policy at the end (save_merged / save_adapter)"))


@dataclass
class RewardRunConfig(_KitConfig, trl.RewardConfig):
    """TRL's RewardConfig with a time budget and LoRA, for the outcome and the process reward model."""

    lora_r: int = _option(16, "LoRA rank; 0 trains every weight (tiny models).")
    lora_alpha: int = _option(32, "LoRA alpha.")
    output_dir: str | None = _default(trl.RewardConfig, "output_dir", None)
    center_rewards_coefficient: float | None = _default(trl.RewardConfig, "center_rewards_coefficient", 0.01)
    save_strategy: str = _default(trl.RewardConfig, "save_strategy", "no")

    def __post_init__(self):
        self._kit_post_init(save_strategy=("no", "the kit saves the reward model (rm.save)"))


def vllm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


RENAMED_SETTINGS = {"epochs": "num_train_epochs", "batch_size": "per_device_train_batch_size",
                    "grad_accum": "gradient_accumulation_steps"}


def apply_model_settings(model: Any, config: Any) -> None:
    """What a kit config's fields (`lean_lora_inputs`, `compile_layers`; read with defaults, so any trainer's arguments
    do) change on the model itself, before its first forward pass: every kit trainer calls this one place."""
    lean_lora_inputs_for(model, config)
    compile_layers_for(model, config)


def renamed_settings(old: dict[str, Any], old_name: str, new_name: str) -> dict[str, Any]:
    """The keywords of the old DPOSettings / RMSettings as fields of the TRL config that replaced them."""
    warnings.warn(f"{old_name} is deprecated: use {new_name} (TRL's config with the kit's fields)",
                  DeprecationWarning, stacklevel=3)
    new = {RENAMED_SETTINGS.get(k, k): v for k, v in old.items() if k not in ("lora", "max_seconds", "trainer_args")}
    if "per_device_train_batch_size" in new:
        new.setdefault("per_device_eval_batch_size", new["per_device_train_batch_size"])
    if old.get("max_seconds"):
        new["max_minutes"] = old["max_seconds"] / 60
    if "lora" in old:
        lora = old["lora"]
        new.update(lora_r=lora.r if lora else 0, lora_alpha=lora.alpha if lora else 32)
    return {**new, **old.get("trainer_args", {})}

"""GRPO with TRL's `GRPOTrainer`: single-turn (open-r1 style) and multi-turn in the environments.

Three modes share one entry point, `run_grpo`:

    single   prompts with a `solution` column; the model answers once in
             <think>…</think><answer>…</answer>; rewards `answer_match format tag_count`
             (`answer_match`: the kit's answer check for agent answers; open-r1's math-only
             `accuracy` fits data whose answers are LaTeX).
    multi    prompts are environment tasks; `env_rollout.EnvRolloutFunc` plays whole episodes
             (assistant turn, environment observation, …) and returns an env_mask so only the
             model's tokens get loss; rewards read the environment's verdict
             (`env_outcome` alone by default: the shaped `react_format` / `invalid_action` terms
             made the policy stop querying, see DEFAULT_REWARDS).
    tool     the same tasks through TRL's `environment_factory`: the environment's actions are
             tool methods (`tool_env.py`), for models with a tool-calling chat template.

The prompt data (single-turn rows with a `solution`, environment task datasets) is built in
`grpo_data.py` and re-exported here.

Observability: TRL's progress bar and log history; `with_domain_metrics` adds per-domain means
of every reward to the logs; `make_sample_printer` prints sample episodes every N steps;
`reward_curves` / `plot_reward_curves` draw them; checkpoints every `save_steps` and
`resume=True` continue from the last one.

Import order matters on this stack: unsloth before trl (`import_trl` does it).
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Sequence

from openmanus_lite.train.grpo_data import (  # noqa: F401  (re-exported: the kit's GRPO API in one place)
    SYSTEM_PROMPT,
    build_env_dataset,
    build_single_turn_dataset,
    format_warmup_trajectories,
    load_trajectories,
    register_context_renderer,
    trajectory_rows,
    unseen_rows,
    value_solution,
    value_task_rows,
)
from openmanus_lite.train.sft import import_trl  # noqa: F401  (unsloth before trl; re-exported for notebooks)
from openmanus_lite.train.trainer_args import GRPO_OWNED, trainer_kwargs

MODES = ("single", "multi", "tool")
DEFAULT_REWARDS = {
    "single": "answer_match format tag_count",
    "multi": "env_outcome",
    "tool": "env_outcome invalid_action:0.25",
}
"""Reward spec per mode when none is given. Multi-turn rewards the outcome alone (issue #28, docs/RESULTS.md "Multi-turn
GRPO in the environments"): with `env_outcome react_format:0.25 invalid_action:0.25` a tidy one-turn answer out-earned
failed multi-turn attempts and held-out db success fell 10/50 -> 0/50 (the policy stopped querying), while
`env_outcome` alone took it 10/50 -> 24/50 (benchmarks/grpo_learning.py --part multi)."""




# --------------------------------------------------------------------------- configuration


@dataclass
class GRPORunConfig:
    """The knobs of a GRPO run (presets in train/presets.py fill these)."""

    mode: str = "single"
    rewards: str | None = None
    """Reward spec, e.g. "accuracy:2 format tag_count"; None = DEFAULT_REWARDS[mode]."""
    output_dir: str = "runs/grpo"
    max_steps: int = 20
    learning_rate: float = 5e-6
    num_generations: int = 4
    per_device_train_batch_size: int = 4
    gradient_accumulation_steps: int = 1
    max_completion_length: int = 128
    """Single-turn: tokens of the answer."""
    max_episode_tokens: int = 512
    """Multi-turn / tool: tokens of the whole episode after the prompt (turns + observations)."""
    max_new_tokens: int = 96
    """Multi-turn: tokens per assistant turn."""
    max_turns: int | dict[str, int] | None = None
    """Multi-turn / tool: turn limit, one number or {domain: turns} (None = the environment's own)."""
    max_tool_calling_iterations: int | None = 6
    temperature: float = 1.0
    top_p: float = 1.0
    beta: float = 0.0
    loss_type: str = "dapo"
    scale_rewards: str = "group"
    mask_truncated_completions: bool = False
    logging_steps: int = 1
    save_steps: int = 10
    save_total_limit: int | None = 2
    seed: int = 0
    sample_every: int = 0
    """Print sample episodes every N steps (0 = never)."""
    use_vllm: bool | None = None
    """Single-turn generation with vLLM (TRL colocate mode): None = when a GPU and vLLM are there.
    The multi-turn rollout always generates with transformers' generate."""
    gradient_checkpointing: bool = False
    bf16: bool | None = None
    """None: bf16 on a GPU with native bf16 (compute capability >= 8.0), else fp16 on a GPU, fp32 on CPU.
    True where the device only emulates bf16 (T4) is refused; False: no mixed precision (precision.py)."""
    report_to: str | list[str] = "none"
    """Experiment tracker(s): "none", "tensorboard", "trackio", "wandb" (TrainingArguments.report_to)."""
    disable_tqdm: bool = False
    trainer_args: dict[str, Any] = field(default_factory=dict)
    """Any other GRPOConfig field (e.g. {"num_iterations": 2}); see train/trainer_args.py."""

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.num_generations < 2:
            raise ValueError("num_generations must be >= 2: GRPO compares samples within a group")
        if (self.per_device_train_batch_size * self.gradient_accumulation_steps) % self.num_generations:
            raise ValueError(
                f"per_device_train_batch_size x gradient_accumulation_steps "
                f"({self.per_device_train_batch_size} x {self.gradient_accumulation_steps}) must be a multiple of "
                f"num_generations ({self.num_generations}): each group of samples must fit one generation batch"
            )

    @property
    def reward_spec(self) -> str:
        return self.rewards or DEFAULT_REWARDS[self.mode]

    def replace(self, **changes) -> "GRPORunConfig":
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise ValueError(f"unknown GRPO settings {sorted(unknown)}")
        return GRPORunConfig(**{**asdict(self), **changes})


def make_grpo_config(cfg: GRPORunConfig, reward_weights: list[float]):
    """TRL's GRPOConfig from the kit's settings (precision from the device: precision.py)."""
    import_trl()
    import torch
    from trl import GRPOConfig

    from openmanus_lite.engine.precision import trainer_precision

    on_gpu = torch.cuda.is_available()
    use_vllm = cfg.use_vllm if cfg.use_vllm is not None else (on_gpu and vllm_available() and cfg.mode == "single")
    if use_vllm and not on_gpu:
        raise ValueError("use_vllm needs a GPU; on CPU generation goes through transformers' generate")
    if use_vllm and not vllm_available():
        raise ValueError("use_vllm is set but vLLM is not installed (pip install vllm), or leave use_vllm unset")
    completion = cfg.max_completion_length if cfg.mode == "single" else cfg.max_episode_tokens
    kwargs: dict[str, Any] = dict(
        output_dir=cfg.output_dir,
        max_steps=cfg.max_steps,
        learning_rate=cfg.learning_rate,
        num_generations=cfg.num_generations,
        per_device_train_batch_size=cfg.per_device_train_batch_size,
        gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        max_completion_length=completion,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        beta=cfg.beta,
        loss_type=cfg.loss_type,
        scale_rewards=cfg.scale_rewards,
        mask_truncated_completions=cfg.mask_truncated_completions,
        reward_weights=reward_weights,
        logging_steps=cfg.logging_steps,
        save_strategy="steps" if cfg.save_steps else "no",
        save_steps=cfg.save_steps or 500,
        save_total_limit=cfg.save_total_limit,
        seed=cfg.seed,
        report_to=cfg.report_to,
        disable_tqdm=cfg.disable_tqdm,
        **trainer_precision(cfg.bf16, fp16=False if cfg.bf16 is False else None).trainer_kwargs(),
        use_vllm=use_vllm,
        gradient_checkpointing=cfg.gradient_checkpointing,
        max_tool_calling_iterations=cfg.max_tool_calling_iterations,
        shuffle_dataset=True,
    )
    if use_vllm:
        kwargs["vllm_mode"] = "colocate"
    return GRPOConfig(**trainer_kwargs(cfg.trainer_args, GRPO_OWNED, **kwargs))


def vllm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def load_for_grpo(model: str | None, preset: Any) -> tuple[Any, Any]:
    """(model, tokenizer) to train with GRPO under a preset (train/presets.py).

    `model` may be a hub name, a checkpoint (a merged SFT model: a fresh LoRA adapter is
    attached as the preset says), or a saved LoRA adapter folder (the SFT adapter is loaded
    onto its base model and trained further, the Unsloth way on a GPU: `models.load_adapter`).
    None = the preset's model.
    """
    folder = Path(model) if model else None
    if folder is not None and (folder / "adapter_config.json").is_file():
        import torch

        from openmanus_lite.models import load_adapter

        lora = preset.lora
        return load_adapter(folder, backend=preset.backend, trainable=True,
                            gradient_checkpointing=lora.gradient_checkpointing if lora else False,
                            load_in_4bit=preset.load_in_4bit, max_seq_length=preset.max_seq_length,
                            dtype=getattr(torch, preset.dtype) if preset.dtype else None)
    return preset.load(model)


# --------------------------------------------------------------------------- rewards with per-domain logs


def with_domain_metrics(funcs: Sequence[Callable]) -> list[Callable]:
    """Wrap reward functions so each also logs its mean per domain (`domain/<d>/<name>`).

    Uses the `log_metric` callback TRL passes to rewards and the row's `domain` column; the
    wrapped functions keep name, columns and range, and return the same values.
    """
    return [_DomainLogged(f) for f in funcs]


class _DomainLogged:
    def __init__(self, func: Callable):
        self.func = func
        self.__name__ = getattr(func, "__name__", "reward")
        for attr in ("reward_name", "required_columns", "reward_range"):
            if hasattr(func, attr):
                setattr(self, attr, getattr(func, attr))

    def __call__(self, prompts=None, completions=None, **kwargs):
        values = self.func(prompts=prompts, completions=completions, **kwargs)
        log_metric, domains = kwargs.get("log_metric"), kwargs.get("domain")
        if callable(log_metric) and isinstance(domains, (list, tuple)) and len(domains) == len(values):
            groups: dict[str, list[float]] = {}
            for d, v in zip(domains, values):
                if v is not None and not (isinstance(v, float) and math.isnan(v)):
                    groups.setdefault(str(d), []).append(float(v))
            for d, vs in groups.items():
                log_metric(f"domain/{d}/{self.__name__}", sum(vs) / len(vs))
        return values


# --------------------------------------------------------------------------- trainer and callbacks


_KIT_TRAINER = None


def kit_trainer_class():
    """TRL's GRPOTrainer with two additions, both around its `_generate`:

    - Multi-turn: with a `rollout_func`, TRL decodes the whole completion (turns and
      observations) into ONE assistant message. The episode's messages (assistant and
      observation turns), which `EnvRolloutFunc` returns under `completion_messages`, replace
      it, so rewards such as `react_format` score each assistant turn and the logged
      completions read like conversations.
    - Timing: the generation phase's seconds and model tokens per second are logged as
      `rollout/seconds` and `rollout/tokens_per_s` (the multi-turn rollout logs its own).

    Everything else is the stock trainer.
    """
    global _KIT_TRAINER
    if _KIT_TRAINER is None:
        import_trl()
        from trl import GRPOTrainer

        from openmanus_lite.train.env_rollout import COMPLETION_MESSAGES

        class KitGRPOTrainer(GRPOTrainer):
            def _generate(self, prompts):
                t0 = time.perf_counter()
                out = list(super()._generate(prompts))
                seconds = time.perf_counter() - t0
                extra = out[5]
                messages = extra.pop(COMPLETION_MESSAGES, None) if isinstance(extra, dict) else None
                if messages is not None:
                    out[3] = messages
                if self.rollout_func is None:
                    mask, ids = out[2], out[1]
                    tokens = sum(sum(m) for m in mask) if mask is not None else sum(len(c) for c in ids)
                    self._log_metric("rollout/seconds", seconds)
                    self._log_metric("rollout/tokens_per_s", tokens / seconds if seconds > 0 else 0.0)
                return tuple(out)

        _KIT_TRAINER = KitGRPOTrainer
    return _KIT_TRAINER


def make_time_limit(minutes: float):
    """A TrainerCallback that ends training (cleanly, with a final save) after `minutes` of wall time."""
    from transformers import TrainerCallback

    class _TimeLimit(TrainerCallback):
        def __init__(self):
            self.start = None
            self.stopped = False

        def on_train_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            if self.start is not None and time.perf_counter() - self.start > minutes * 60:
                self.stopped = True
                control.should_training_stop = True
                control.should_save = bool(args.save_strategy != "no")

    return _TimeLimit()


def make_sample_printer(every: int, k: int = 2, width: int = 600):
    """A TrainerCallback that prints `k` sample completions with their rewards every `every` steps.

    It reads the trainer's own completion log, so it works in all three modes; attach the
    trainer with `callback.trainer = trainer` (run_grpo does).
    """
    from transformers import TrainerCallback

    class _SamplePrinter(TrainerCallback):
        def __init__(self):
            self.trainer = None
            self.printed_steps: list[int] = []

        def on_log(self, args, state, control, **kwargs):
            if not every or self.trainer is None or state.global_step == 0 or state.global_step % every:
                return
            if state.global_step in self.printed_steps:
                return
            self.printed_steps.append(state.global_step)
            print(format_samples(self.trainer, k=k, width=width, step=state.global_step), flush=True)

    return _SamplePrinter()


def format_samples(trainer, k: int = 2, width: int = 600, step: int | None = None) -> str:
    """The last `k` completions the trainer logged, with each reward, as text."""
    logs = getattr(trainer, "_logs", None) or {}
    prompts, comps = list(logs.get("prompt", [])), list(logs.get("completion", []))
    rewards = {name: list(v) for name, v in (logs.get("rewards") or {}).items()}
    lines = [f"----- sample episodes at step {step} -----"]
    for j in range(max(0, len(comps) - k), len(comps)):
        prompt = prompts[j] if j < len(prompts) else ""
        last_user = prompt[-1]["content"] if isinstance(prompt, list) and prompt else str(prompt)
        lines.append(f"[prompt] ...{_clip(last_user, width // 3, tail=True)}")
        comp = comps[j]
        if isinstance(comp, list):
            for m in comp:
                text = str(m.get("content") or "")
                for call in m.get("tool_calls") or []:
                    fn = call.get("function", call) if isinstance(call, dict) else {}
                    text += f" <tool call {fn.get('name')}({json.dumps(fn.get('arguments'), ensure_ascii=False)})>"
                lines.append(f"[{m.get('role', '?')}] {_clip(text, width)}")
        else:
            lines.append(f"[completion] {_clip(str(comp), width)}")
        scores = ", ".join(f"{n}={v[j]:.2f}" for n, v in rewards.items() if j < len(v))
        lines.append(f"[rewards] {scores}")
    return "\n".join(lines)


def _clip(text: str, n: int, tail: bool = False) -> str:
    text = text.replace("\n", "\\n")
    if len(text) <= n:
        return text
    return text[-n:] if tail else text[:n] + "…"


# --------------------------------------------------------------------------- running


@dataclass
class GRPOResult:
    trainer: Any
    log_history: list[dict]
    wall_s: float
    global_step: int
    rollout_stats: Any = None
    resumed_from: str | None = None
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def step_time_s(self) -> list[float]:
        return [r["step_time"] for r in self.log_history if "step_time" in r]


def last_checkpoint(output_dir: str | os.PathLike) -> str | None:
    """The newest `checkpoint-N` folder under output_dir, or None."""
    from transformers.trainer_utils import get_last_checkpoint

    return get_last_checkpoint(str(output_dir)) if Path(output_dir).is_dir() else None


def run_grpo(
    model: Any,
    tokenizer: Any,
    train_dataset: Any,
    config: GRPORunConfig,
    *,
    rollout_func: Any = None,
    environment_factory: Any = None,
    reward_funcs: Sequence[Callable] | None = None,
    reward_weights: Sequence[float] | None = None,
    callbacks: Sequence[Any] = (),
    resume: bool | str = False,
    domain_metrics: bool = True,
) -> GRPOResult:
    """Train with GRPO; returns the trainer, its log history and timings.

    `config.mode` picks how completions are produced: single (plain generate), multi (pass
    `rollout_func`, from build_env_dataset), tool (pass `environment_factory`, from
    tool_env.tool_env_factory). Rewards come from the registry (`config.reward_spec`) unless
    `reward_funcs` / `reward_weights` are given. `resume=True` continues from the newest
    checkpoint in `config.output_dir` when there is one; a path resumes from that checkpoint.
    """
    from openmanus_lite.rewards import ROLLOUT_COLUMNS, build_rewards, check_reward_columns

    if config.mode == "multi" and rollout_func is None:
        raise ValueError("mode 'multi' needs rollout_func (see build_env_dataset)")
    if config.mode == "tool" and environment_factory is None:
        raise ValueError("mode 'tool' needs environment_factory (see tool_env.tool_env_factory)")
    if config.mode == "single" and (rollout_func is not None or environment_factory is not None):
        raise ValueError("mode 'single' takes neither rollout_func nor environment_factory")
    if reward_funcs is None:
        reward_funcs, weights = build_rewards(config.reward_spec)
    else:
        weights = list(reward_weights) if reward_weights is not None else [1.0] * len(reward_funcs)
    extra = {"multi": ROLLOUT_COLUMNS, "tool": ("environments",), "single": ()}[config.mode]
    check_reward_columns(list(reward_funcs), train_dataset.column_names, extra_columns=extra)
    if domain_metrics:
        reward_funcs = with_domain_metrics(reward_funcs)

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    args = make_grpo_config(config, list(weights))
    tokenizer.padding_side = "left"
    trainer_cls = kit_trainer_class()
    printer = make_sample_printer(config.sample_every) if config.sample_every else None
    trainer = trainer_cls(
        model=model,
        processing_class=tokenizer,
        reward_funcs=list(reward_funcs),
        args=args,
        train_dataset=train_dataset,
        rollout_func=rollout_func,
        environment_factory=environment_factory,
        callbacks=list(callbacks) + ([printer] if printer else []),
    )
    for cb in list(callbacks) + ([printer] if printer else []):
        if hasattr(cb, "trainer"):
            cb.trainer = trainer
    checkpoint = None
    if isinstance(resume, (str, os.PathLike)) and resume:
        checkpoint = str(resume)
    elif resume:
        checkpoint = last_checkpoint(config.output_dir)
    t0 = time.perf_counter()
    trainer.train(resume_from_checkpoint=checkpoint)
    wall = time.perf_counter() - t0
    return GRPOResult(
        trainer=trainer,
        log_history=list(trainer.state.log_history),
        wall_s=wall,
        global_step=trainer.state.global_step,
        rollout_stats=getattr(rollout_func, "total_stats", None),
        resumed_from=checkpoint,
    )


# --------------------------------------------------------------------------- curves


def reward_curves(log_history: Sequence[dict]):
    """A DataFrame indexed by step: one column per reward (`rewards/<name>/mean` → `<name>`),
    `reward` (the weighted sum), and `<domain>/<name>` for the per-domain means."""
    import pandas as pd

    rows = []
    for rec in log_history:
        if "step" not in rec or "reward" not in rec:
            continue
        row = {"step": rec["step"], "reward": rec["reward"]}
        for key, val in rec.items():
            if key.startswith("rewards/") and key.endswith("/mean"):
                row[key[len("rewards/"):-len("/mean")]] = val
            elif key.startswith("domain/"):
                row[key[len("domain/"):]] = val
        rows.append(row)
    if not rows:
        return pd.DataFrame(columns=["reward"]).rename_axis("step")
    return pd.DataFrame(rows).set_index("step").sort_index()


def plot_reward_curves(log_history: Sequence[dict], title: str = "GRPO rewards", smooth: int = 1):
    """Reward curves per reward function (left) and per domain (right); returns the figure."""
    import matplotlib.pyplot as plt

    df = reward_curves(log_history)
    if smooth > 1 and len(df):
        df = df.rolling(smooth, min_periods=1).mean()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    per_func = [c for c in df.columns if "/" not in c]
    per_domain = [c for c in df.columns if "/" in c]
    for c in per_func:
        axes[0].plot(df.index, df[c], label=c, linewidth=2.5 if c == "reward" else 1.2)
    for c in per_domain:
        axes[1].plot(df.index, df[c], label=c)
    axes[0].set_title(f"{title}: per reward function")
    axes[1].set_title(f"{title}: per domain")
    for ax in axes:
        ax.set_xlabel("step")
        ax.set_ylabel("mean reward")
        if ax.lines:
            ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def first_last(log_history: Sequence[dict], keys: Sequence[str], n: int = 10) -> dict[str, Any]:
    """The summed log keys averaged over the first and the last n logged steps (n shrinks to
    half the steps for short runs): {"n", "steps", "first", "last"}."""
    rows = [r for r in log_history if "reward" in r and all(r.get(k) is not None for k in keys)]
    if not rows:
        return {"n": 0, "steps": 0, "first": None, "last": None}
    n = min(n, max(1, len(rows) // 2))
    vals = [sum(r[k] for k in keys) for r in rows]
    return {"n": n, "steps": len(rows), "first": round(sum(vals[:n]) / n, 4), "last": round(sum(vals[-n:]) / n, 4)}


# --------------------------------------------------------------------------- before / after measurements


def single_turn_accuracy(
    model: Any, tokenizer: Any, rows: Sequence[dict], *, max_new_tokens: int = 128, batch_size: int = 16
) -> dict[str, Any]:
    """Greedy answers to single-turn rows, scored with the registry's answer_match / format / tag_count.

    Returns {"n", "accuracy", "format", "tag_count", "per_domain": {domain: accuracy}}; "accuracy" is
    the share of rows `answer_match` scores 1.0 (the kit's rows hold agent answers, not LaTeX).
    """
    from openmanus_lite.engine.generation import generate_turns
    from openmanus_lite.rewards import get_reward_funcs

    if not rows:
        raise ValueError("no rows to evaluate")
    gen = generate_turns(model, tokenizer, [r["prompt"] for r in rows], max_new_tokens=max_new_tokens,
                         temperature=0.0, batch_size=batch_size)
    acc, fmt, tags = get_reward_funcs("answer_match format tag_count")
    sols = [r["solution"] for r in rows]
    scores = {
        "accuracy": [v or 0.0 for v in acc(completions=gen.texts, solution=sols)],
        "format": fmt(completions=gen.texts),
        "tag_count": tags(completions=gen.texts),
    }
    out: dict[str, Any] = {"n": len(rows)}
    out.update({k: sum(v) / len(v) for k, v in scores.items()})
    per: dict[str, list[float]] = {}
    for r, a in zip(rows, scores["accuracy"]):
        per.setdefault(r.get("domain", "?"), []).append(a)
    out["per_domain"] = {d: sum(v) / len(v) for d, v in per.items()}
    out["samples"] = gen.texts[:3]
    return out

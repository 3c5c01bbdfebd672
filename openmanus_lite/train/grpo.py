"""GRPO with TRL's `GRPOTrainer` in three modes behind `run_grpo`: single (one tagged answer per prompt, scored
against its `solution`), multi (whole environment episodes played by `env_rollout.EnvRolloutFunc`, the env_mask
keeping loss on the model's tokens) and tool (the environment's actions as tool methods, `tool_env.py`).

`env_outcome` alone is the multi-mode default: the shaped `react_format` / `invalid_action` terms made the policy
stop querying (see DEFAULT_REWARDS). Import order matters on this stack: unsloth before trl (`import_trl` does it).
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import math
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from openmanus_lite.rewards import (
    ROLLOUT_COLUMNS,
    build_rewards,
    check_reward_columns,
    checked_reward,
    get_reward_funcs,
)
from openmanus_lite.train import grpo_signal
from openmanus_lite.train.configs import (  # noqa: F401  (the config and its defaults are part of this API)
    DEFAULT_REWARDS,
    MODES,
    GRPORunConfig,
    apply_model_settings,
    import_trl,
    vllm_available,
)
from openmanus_lite.train.env_rollout import COMPLETION_MESSAGES, STEP_STATES
from openmanus_lite.train.grpo_data import (  # noqa: F401  (re-exported: the kit's GRPO API in one place)
    SYSTEM_PROMPT,
    build_env_dataset,
    build_single_turn_dataset,
    format_warmup_trajectories,
    register_context_renderer,
    trajectory_rows,
    unseen_rows,
    value_solution,
    value_task_rows,
)
from openmanus_lite.train.run_control import TimeLimit
from openmanus_lite.train.run_folder import resume_checkpoint

logger = logging.getLogger(__name__)


def load_for_grpo(model: str | None, preset: Any) -> tuple[Any, Any]:
    """(model, tokenizer) under a preset: a hub name, a merged checkpoint (a fresh LoRA attached), or a saved LoRA
    adapter folder, trained further on its base model (`models.load_adapter`); None = the preset's model."""
    if model and (Path(model) / "adapter_config.json").is_file():
        import torch

        from openmanus_lite.models import load_adapter

        return load_adapter(Path(model), backend=preset.backend, trainable=True,
                            gradient_checkpointing=preset.lora.gradient_checkpointing if preset.lora else False,
                            load_in_4bit=preset.load_in_4bit, max_seq_length=preset.max_seq_length,
                            dtype=getattr(torch, preset.dtype) if preset.dtype else None)
    return preset.load(model)


def with_domain_metrics(funcs: Sequence[Callable]) -> list[Callable]:
    """The reward functions, each also logging its mean per domain (`domain/<d>/<name>`) through TRL's `log_metric`;
    values, name, columns and range unchanged."""
    return [_DomainLogged(f) for f in funcs]


class _DomainLogged:
    def __init__(self, func: Callable):
        self.func = func
        self.__name__ = getattr(func, "__name__", "reward")
        self.__dict__.update({a: getattr(func, a) for a in ("reward_name", "required_columns", "reward_range")
                              if hasattr(func, a)})

    def __call__(self, prompts=None, completions=None, **kwargs):
        values = self.func(prompts=prompts, completions=completions, **kwargs)
        log_metric, domains = kwargs.get("log_metric"), kwargs.get("domain")
        if callable(log_metric) and isinstance(domains, (list, tuple)) and len(domains) == len(values):
            scored = ((str(d), float(v)) for d, v in zip(domains, values)
                      if v is not None and not (isinstance(v, float) and math.isnan(v)))
            for d, mean in grpo_signal.key_means(scored).items():
                log_metric(f"domain/{d}/{self.__name__}", mean)
        return values


GENERATE_FIELDS = ("prompt_ids", "completion_ids", "tool_mask", "completions", "logprobs", "extra_fields", "images",
                   "tool_images")
"""TRL 1.15's `GRPOTrainer._generate` tuple, by name; tests/train/test_grpo.py checks it against TRL's source."""


@functools.cache
def kit_trainer_class():
    """TRL's GRPOTrainer plus: the episode's messages as `completions` (TRL decodes a multi-turn completion into ONE
    assistant message, so per-turn rewards could not see the turns); `rollout/seconds` and `rollout/tokens_per_s`
    (wrapping `_generate`, which no public hook reaches); the signal of grpo_signal.py (`signal/*`, and with
    `drop_uniform_groups` uniform groups dropped before any forward or backward pass and refilled); GiGPO step
    credit (`step_advantage_weight`); and `success/<domain>` per scored batch."""
    import torch

    import_trl()
    from trl import GRPOTrainer
    from trl.trainer.utils import shuffle_sequence_dict

    class KitGRPOTrainer(GRPOTrainer):
        def _generate(self, prompts):
            t0 = time.perf_counter()
            out = dict(zip(GENERATE_FIELDS, super()._generate(prompts), strict=True))
            seconds = time.perf_counter() - t0
            if (messages := out["extra_fields"].pop(COMPLETION_MESSAGES, None)) is not None:
                out["completions"] = messages
            self._kit_steps = (out["extra_fields"].pop(STEP_STATES, None), out["tool_mask"])
            mask = out["tool_mask"]
            tokens = sum(map(sum, mask)) if mask is not None else sum(map(len, out["completion_ids"]))
            self._log_metric("rollout/seconds", seconds)
            self._log_metric("rollout/tokens_per_s", tokens / seconds if seconds > 0 else 0.0)
            return tuple(out.values())

        def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
            per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            weighted = (per_func * self.reward_weights.to(per_func.device)).nansum(dim=1)
            weighted[per_func.isnan().all(dim=1)] = float("nan")  # unscorable, as TRL marks them
            self._kit_rewards = weighted.tolist()  # TRL's advantages come from these sums
            for name, value in grpo_signal.domain_success(inputs, self.environments).items():
                self._log_metric(name, value)
            return per_func

        def _generate_and_score_completions(self, inputs):
            batch = super()._generate_and_score_completions(inputs)
            if self.model.training:
                step_signal = self._add_step_advantages(batch) if self.args.step_advantage_weight else None
                self._kit_signal = grpo_signal.group_signal(self._kit_rewards, self.num_generations, step_signal)
                dropping = self.args.drop_uniform_groups
                if not dropping:  # with dropping, _kept_rows logs the step's rollout rounds together
                    self._log_signal(self._kit_signal, dropping)
                self._kit_generations = getattr(self, "_kit_generations", 0) + 1
                warning = self._kit_signal.warning(self.args.signal_warning_share)
                if warning and self._kit_generations % 10 == 1:  # the first time, then every 10th generation
                    logger.warning(warning + ("" if dropping else " (drop_uniform_groups is off)"))
            return batch

        def _log_signal(self, signal, dropping: bool) -> None:
            for name, value in signal.metrics(dropping).items():
                self._metrics["train"][name].append(value)

        def _add_step_advantages(self, batch):
            """GiGPO: per-token advantages (episode + weight x turn); returns which groups carry step signal."""
            states, turn_masks = self._kit_steps
            if states is None or turn_masks is None or self.accelerator.num_processes > 1:
                raise ValueError("step_advantage_weight needs multi-turn rollouts that record step_states "
                                 "(env_rollout.EnvRolloutFunc) in one process")
            n, args = self.num_generations, self.args
            steps = grpo_signal.step_advantages(states, self._kit_rewards, n, args.step_discount)
            width = batch["completion_ids"].shape[1]
            batch["advantages"] = grpo_signal.token_advantages(batch["advantages"], steps, turn_masks, width,
                                                               args.step_advantage_weight)
            return [any(a for ep in steps[g:g + n] for a in ep) for g in range(0, len(steps), n)]

        def _prepare_inputs(self, generation_batch):
            if isinstance(generation_batch, dict):  # a micro-batch training_step prepared already
                return generation_batch
            if not (self.args.drop_uniform_groups and self.model.training):
                return super()._prepare_inputs(generation_batch)
            # TRL's buffering (generate every steps_per_generation x num_iterations micro-steps) with the
            # uniform groups dropped and the kept rows split unevenly where they must be
            per_generation = self.args.steps_per_generation
            if self._step % (per_generation * self.num_iterations) == 0 or self._buffered_inputs is None:
                if self.accelerator.num_processes > 1:
                    raise ValueError("drop_uniform_groups runs in one process (groups would span processes)")
                batch = self._kept_rows(generation_batch)
                if grpo_signal.batch_rows(batch):
                    batch = shuffle_sequence_dict(batch)
                self._buffered_inputs = grpo_signal.split_rows(batch, per_generation)
                empty = sum(not grpo_signal.batch_rows(b) for b in self._buffered_inputs)
                self._metrics["train"]["signal/backward_skipped"].append(float(empty * self.num_iterations))
            return self._buffered_inputs[self._step % per_generation]

        def _kept_rows(self, generation_batch):
            """The generation batch's groups with signal, refilled by up to `refill_rounds` rollouts of random
            training prompts (as many groups as were dropped), cut to the generation batch's size."""
            target = len(generation_batch)
            batch = self._generate_and_score_completions(generation_batch)
            parts, signals = [grpo_signal.select_rows(batch, self._kit_signal.kept_rows)], [self._kit_signal]
            rng = getattr(self, "_kit_refill_rng", None) or random.Random(self.args.seed + 1)
            self._kit_refill_rng = rng
            rounds, limit = 0, self.args.refill_rounds
            while (missing := target - sum(map(grpo_signal.batch_rows, parts))) > 0 and rounds < limit:
                rounds += 1
                picks = [rng.randrange(len(self.train_dataset)) for _ in range(missing // self.num_generations)]
                rows = [self.train_dataset[i] for i in picks for _ in range(self.num_generations)]
                more = self._generate_and_score_completions(rows)
                parts.append(grpo_signal.select_rows(more, self._kit_signal.kept_rows))
                signals.append(self._kit_signal)
            # one entry per step, over all its rounds: TRL averages a step's entries, and averaged rounds misstate it
            # (49.3% of a 60-minute run's groups had signal where the mean of rounds said 66.7%; docs/RESULTS.md)
            self._log_signal(sum(signals[1:], start=signals[0]), dropping=True)
            self._metrics["train"]["signal/refill_rounds"].append(float(rounds))
            batch = grpo_signal.concat_rows(parts, self._tokenizer.pad_token_id)
            return grpo_signal.select_rows(batch, range(min(target, grpo_signal.batch_rows(batch))))

        def training_step(self, model, inputs, num_items_in_batch=None):
            if not self.args.drop_uniform_groups:
                return super().training_step(model, inputs, num_items_in_batch)
            t0 = time.perf_counter()
            model.train()
            batch = self._prepare_inputs(inputs)  # generates when due, as TRL does inside its training_step
            self._current_train_step_time += time.perf_counter() - t0
            if grpo_signal.batch_rows(batch):
                return super().training_step(model, batch, num_items_in_batch)
            # nothing kept in this micro-batch: TRL's bookkeeping of a micro-step without a forward or backward
            self._step += 1
            if self._step % self.current_gradient_accumulation_steps == 0:
                self._metrics["train"]["step_time"].append(self._current_train_step_time)
                self._current_train_step_time = 0.0
            return torch.zeros((), device=self.accelerator.device)

    return KitGRPOTrainer


def make_sample_printer(every: int, k: int = 2, width: int = 600):
    """A TrainerCallback printing `k` sample completions with rewards every `every` steps, from the trainer's own
    completion log (so in all three modes); set `callback.trainer` (run_grpo does)."""
    from transformers import TrainerCallback

    class _SamplePrinter(TrainerCallback):
        def __init__(self):
            self.trainer = None
            self.printed_steps: list[int] = []

        def on_log(self, args, state, control, **kwargs):
            step = state.global_step
            if not every or self.trainer is None or step == 0 or step % every or step in self.printed_steps:
                return
            self.printed_steps.append(step)
            print(format_samples(self.trainer, k=k, width=width, step=step), flush=True)

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


@dataclass
class GRPOResult:
    trainer: Any
    log_history: list[dict]
    wall_s: float
    global_step: int
    rollout_stats: Any = None
    resumed_from: str | None = None
    info: dict[str, Any] = field(default_factory=dict)
    peak_memory: dict[str, Any] = field(default_factory=dict)  # the training's (peak_memory.PeakMemory)


def run_grpo(
    model: Any, tokenizer: Any, train_dataset: Any, config: GRPORunConfig, *, rollout_func: Any = None,
    environment_factory: Any = None, reward_funcs: Sequence[Callable] | None = None,
    reward_weights: Sequence[float] | None = None, callbacks: Sequence[Any] = (), resume: bool | str = False,
    domain_metrics: bool = True,
) -> GRPOResult:
    """Train with GRPO in `config.mode`: multi needs `rollout_func` (build_env_dataset), tool `environment_factory`
    (tool_env.tool_env_factory). Rewards come from `config.reward_spec` unless given; `resume=True` continues from
    the newest checkpoint in `config.output_dir`, a path from that checkpoint."""
    if config.mode == "multi" and rollout_func is None:
        raise ValueError("mode 'multi' needs rollout_func (see build_env_dataset)")
    if config.mode == "tool" and environment_factory is None:
        raise ValueError("mode 'tool' needs environment_factory (see tool_env.tool_env_factory)")
    if config.mode == "single" and (rollout_func is not None or environment_factory is not None):
        raise ValueError("mode 'single' takes neither rollout_func nor environment_factory")
    if config.step_advantage_weight and config.mode != "multi":
        raise ValueError("step_advantage_weight (GiGPO) needs mode 'multi': its turns are the environment's steps")
    if (config.expert_prefix_share or config.expert_in_failed_groups) and config.mode != "multi":
        raise ValueError("expert_prefix_share and expert_in_failed_groups need mode 'multi': the multi-turn rollout "
                         "plays the expert's turns")
    if config.mode == "multi" and config.check_template:
        grpo_signal.check_chat_template(tokenizer, system_prompt=getattr(rollout_func, "system_prompt", None))
    if reward_funcs is None:
        reward_funcs, weights = build_rewards(config.reward_spec)
    else:
        weights = list(reward_weights) if reward_weights is not None else [1.0] * len(reward_funcs)
        reward_funcs = [checked_reward(f) for f in reward_funcs]  # a broken reward is named, never trained on
    args = copy.copy(config)  # the caller's config stays as it was given
    args.reward_weights = list(weights)
    extra = {"multi": ROLLOUT_COLUMNS, "tool": ("environments",), "single": ()}[config.mode]
    check_reward_columns(list(reward_funcs), train_dataset.column_names, extra_columns=extra)
    if domain_metrics:
        reward_funcs = with_domain_metrics(reward_funcs)

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    clock = TimeLimit.from_config(config)  # the time budget (if any) and the peak memory
    callbacks = [*callbacks, clock] + ([make_sample_printer(config.sample_every)] if config.sample_every else [])
    tokenizer.padding_side = "left"
    apply_model_settings(model, config)
    trainer = kit_trainer_class()(model=model, processing_class=tokenizer, reward_funcs=list(reward_funcs), args=args,
                                  train_dataset=train_dataset, rollout_func=rollout_func,
                                  environment_factory=environment_factory, callbacks=callbacks)
    for cb in callbacks:
        if hasattr(cb, "trainer"):
            cb.trainer = trainer
    checkpoint = resume_checkpoint(resume, config.output_dir)
    t0 = time.perf_counter()
    trainer.train(resume_from_checkpoint=checkpoint)
    return GRPOResult(trainer=trainer, log_history=list(trainer.state.log_history), wall_s=time.perf_counter() - t0,
                      global_step=trainer.state.global_step, rollout_stats=getattr(rollout_func, "total_stats", None),
                      resumed_from=checkpoint, peak_memory=clock.peak_memory)


CURVE_PREFIXES = ("signal/", "success/", "guide/")
"""Log keys `reward_curves` keeps as they are: the signal, per-domain success and expert guidance of each step."""


def reward_curves(log_history: Sequence[dict]):
    """A DataFrame indexed by step: `reward`, `<name>` per reward, `<domain>/<name>` per-domain means, and the
    CURVE_PREFIXES metrics under their own names."""
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
            elif key.startswith(CURVE_PREFIXES):
                row[key] = val
        rows.append(row)
    if not rows:
        return pd.DataFrame(columns=["reward"]).rename_axis("step")
    return pd.DataFrame(rows).set_index("step").sort_index()


def reward_at_ends(log_history: Sequence[dict], steps: int = 10) -> tuple[float, float, int] | None:
    """(mean reward of the first `steps` steps, of the last `steps`, that count: at most half the run each), None
    without rewards. Each step draws other tasks, so one step's reward says more about its tasks than the policy."""
    rewards = [rec["reward"] for rec in log_history if rec.get("reward") is not None]
    if not rewards:
        return None
    n = min(steps, max(1, len(rewards) // 2))
    return sum(rewards[:n]) / n, sum(rewards[-n:]) / n, n


def plot_reward_curves(log_history: Sequence[dict], title: str = "GRPO rewards", smooth: int = 1):
    """Three panels; returns the figure. Rewards per reward function; success per domain (`success/<domain>`,
    with each domain's reward means dashed); the signal: the share of groups whose rewards differ and of
    expert-guided episodes (left axis), samples kept and dropped and the mean expert prefix (right axis, dotted)."""
    import matplotlib.pyplot as plt

    df = reward_curves(log_history)
    if smooth > 1 and len(df):
        df = df.rolling(smooth, min_periods=1).mean()
    fig, axes = plt.subplots(1, 3, figsize=(16, 4))
    counts = axes[2].twinx()
    for c in df.columns:
        if c.startswith("signal/groups_"):  # the samples_* curves say the same, times the group size
            continue
        if not c.startswith(CURVE_PREFIXES):
            ax, style = (axes[0], "-") if "/" not in c else (axes[1], "--")
        elif c.startswith("success/"):
            ax, style = axes[1], "-"
        else:
            ax, style = (axes[2], "-") if c.endswith("share") else (counts, ":")
        ax.plot(df.index, df[c], style, label=c, linewidth=2.5 if c in ("reward", "signal/group_share") else 1.2)
    panels = (("per reward function", "mean reward"), ("per domain", "mean"), ("signal", "share"))
    for ax, (name, ylabel) in zip(axes, panels):
        ax.set_title(f"{title}: {name}")
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
    axes[2].set_ylim(-0.05, 1.05)
    counts.set_ylabel("samples / turns")
    for ax, loc in zip((*axes, counts), ("best", "best", "upper left", "upper right")):
        if ax.lines:
            ax.legend(fontsize=7, loc=loc)
    fig.tight_layout()
    return fig


def first_last(log_history: Sequence[dict], keys: Sequence[str], n: int = 10) -> dict[str, Any]:
    """The summed log keys averaged over the first and last n logged steps (at most half the steps)."""
    rows = [r for r in log_history if "reward" in r and all(r.get(k) is not None for k in keys)]
    if not rows:
        return {"n": 0, "steps": 0, "first": None, "last": None}
    n = min(n, max(1, len(rows) // 2))
    vals = [sum(r[k] for k in keys) for r in rows]
    return {"n": n, "steps": len(rows), "first": round(sum(vals[:n]) / n, 4), "last": round(sum(vals[-n:]) / n, 4)}


def single_turn_accuracy(
    model: Any, tokenizer: Any, rows: Sequence[dict], *, max_new_tokens: int = 128, batch_size: int = 16
) -> dict[str, Any]:
    """Greedy answers to single-turn rows scored with answer_match (agent answers, not LaTeX) / format / tag_count:
    {"n", "accuracy", "format", "tag_count", "per_domain", "samples"}."""
    from openmanus_lite.engine.generation import generate_turns

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
    per_domain = grpo_signal.key_means((r.get("domain", "?"), a) for r, a in zip(rows, scores["accuracy"]))
    return {"n": len(rows), **{k: sum(v) / len(v) for k, v in scores.items()}, "per_domain": per_domain,
            "samples": gen.texts[:3]}

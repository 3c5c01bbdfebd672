"""`python -m openmanus_lite demo`: untrained -> LoRA SFT (`cpu_30min`) -> multi-turn GRPO, each evaluated on the
same held-out dev tasks, on the embedded default model; a run folder with report.md at the end.

Each stage runs in a fresh Python process (its peak memory its own) and records itself in `state.json`, so a re-run
with the same `--output_dir` (or `--resume`) continues where it stopped. `--quick`: the tiny test model.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import shlex
import time
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from openmanus_lite.errors import UserError
from openmanus_lite.paths import REAL_SAMPLES_DIR, RUNS_DIR, SAMPLES_DIR
from openmanus_lite.peak_memory import PeakMemory, release_memory, run_in_fresh_process
from openmanus_lite.splits import DEMO_EVAL_SUITE, DEMO_GRPO_SEED

STAGE_TITLES = {"prepare": "prepare: model and data", "eval_untrained": "evaluate the untrained model",
                "sft": "SFT", "eval_sft": "evaluate SFT", "grpo": "GRPO", "eval_grpo": "evaluate GRPO"}
STAGES = tuple(STAGE_TITLES)

CHECKPOINTS = {"untrained": "untrained", "sft": "SFT", "grpo": "GRPO"}
"""Evaluated checkpoints (eval_<key> stages) and their column names in the report."""

GRPO_DOMAIN_RULES = {
    "mixed": "domains where the SFT evaluation had at least one success and at least one failure",
    "success": "domains where the SFT evaluation had at least one success",
    "all": "every domain of the demo",
}
"""Which domains GRPO trains on: under the outcome reward a group whose samples all fail (or all succeed) has no
advantage, and the SFT evaluation best guesses where groups will mix. `all`: --quick's tiny model never succeeds."""

REPORT = "report.md"


@dataclass
class DemoConfig:
    """What the demo does, in 45 minutes on a 2-core CPU (`total_minutes`). The untrained model's evaluation is
    planned at 2.5 minutes, a trained one's at 2, then at the untrained one's pace (`training_budget`; the measured
    times: docs/RESULTS.md). The fields left at None are the recipe's (`model`: the preset's)."""

    preset: str = "cpu"
    model: str | None = None
    domains: tuple[str, ...] = ("os", "db", "web", "kg", "household", "ecommerce")
    recipe: str = "cpu_30min"  # SFT data and settings; its sft_train split leaves out every held-out task
    train_per_domain: int | None = None
    eval_per_domain: int = 10  # easy tasks per domain of the frozen dev suite, the same for every checkpoint
    eval_max_turns: int | None = None  # turn limit of training prompts and evaluation
    # an evaluation episode ends after this many invalid actions in a row (AgentBench ends one at the first; None: at
    # the turn limit alone): the untrained model played every turn, and no trained success had 3 (docs/RESULTS.md)
    eval_invalid_streak: int | None = 3
    sft_minutes: float | None = None  # SFT's limit; None: its share of what the untrained evaluation left
    total_minutes: float | None = 45.0  # the budget; None: SFT and GRPO train their limits whatever evaluations took
    sft_max_length: int | None = None
    # planned minutes for the report, not limits: an evaluation plays every task, so checkpoints compare on the same
    prepare_minutes: float = 1.0
    eval_minutes: float = 2.0
    untrained_eval_minutes: float = 2.5
    overhead_minutes: float = 0.75  # loading, data and saving around a training stage's limit (0.3-0.8; 0.9 slowed)
    grpo_minutes: float = 6.0  # GRPO's limit (training time); grpo_steps caps it only when steps are very fast
    grpo_steps: int = 60
    grpo_domains: str = "mixed"  # a key of GRPO_DOMAIN_RULES; GRPO is skipped when no domain qualifies
    grpo_rewards: str = "env_outcome"  # the outcome alone: shaped terms were reward-hacked (train/configs.py)
    grpo_tasks_per_domain: int = 24
    grpo_num_generations: int = 4
    # caps each domain's evaluation limit (web's 9 and household's 16 become 7) so one step's 8 episodes stay short
    # on a CPU; None: no cap
    grpo_max_turns: int | None = 7
    seed: int = 0

    def sft_recipe(self):
        from openmanus_lite.recipes import get_recipe

        changes = {k: v for k, v in (("tasks_per_domain", self.train_per_domain), ("max_minutes", self.sft_minutes),
                                     ("max_length", self.sft_max_length), ("turn_limits", self.eval_max_turns))
                   if v is not None}
        return get_recipe(self.recipe).on_preset(self.preset).replace(domains=tuple(self.domains), seed=self.seed,
                                                                      **changes)

    def budgeted(self) -> bool:
        """Whether `training_budget` sets SFT's and GRPO's limits from `total_minutes`."""
        return self.sft_minutes is None and bool(self.total_minutes)

    def planned_minutes(self) -> dict[str, float]:
        """Minutes per stage: the limits of SFT and GRPO, the plans of the others (before `training_budget`)."""
        return {"prepare": self.prepare_minutes, "eval_untrained": self.untrained_eval_minutes,
                "sft": float(self.sft_recipe().max_minutes or 0.0), "eval_sft": self.eval_minutes,
                "grpo": self.grpo_minutes, "eval_grpo": self.eval_minutes}

    def to_json(self) -> dict[str, Any]:
        return json.loads(json.dumps(asdict(self)))

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "DemoConfig":
        unknown = sorted(set(d) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"config.json has settings this version does not know: {unknown}")
        d = {"eval_invalid_streak": None, **d}  # runs before 2026-12-06 played every evaluation to its turn limit
        return cls(**{**d, **({"domains": tuple(d["domains"])} if "domains" in d else {})})

    @classmethod
    def quick(cls) -> "DemoConfig":
        """The same pipeline on the tiny test model with small settings (seconds per stage)."""
        return cls(preset="cpu_debug", train_per_domain=12, eval_per_domain=3, eval_max_turns=3, sft_minutes=0.6,
                   sft_max_length=512, prepare_minutes=0.2, eval_minutes=0.2, untrained_eval_minutes=0.2,
                   grpo_minutes=0.5, total_minutes=None, grpo_steps=2, grpo_domains="all", grpo_tasks_per_domain=2,
                   grpo_num_generations=2, grpo_max_turns=2)


class ConfigMismatch(UserError):
    """A run folder holds finished stages made with other settings than the ones asked for."""


@dataclass
class RunState:
    """Finished stages (`done`: result, seconds, and `interrupted_s`, the time of failed attempts before), the time of
    unfinished ones (`interrupted`) and every invocation (`runs`), so that a resumed demo's total counts them all."""

    path: Path
    done: dict[str, Any] = field(default_factory=dict)
    interrupted: dict[str, float] = field(default_factory=dict)
    runs: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def load(cls, run_dir: Path) -> "RunState":
        path = run_dir / "state.json"
        d = json.loads(path.read_text()) if path.is_file() else {}
        return cls(path, d.get("done", {}), d.get("interrupted", {}), d.get("runs", []))

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"done": self.done, "interrupted": self.interrupted, "runs": self.runs},
                                  indent=1, default=str))
        tmp.replace(self.path)

    def stage_seconds(self, name: str) -> float:
        d = self.done.get(name) or {"seconds": 0.0}
        return float(d["seconds"]) + float(d.get("interrupted_s", 0.0)) + self.interrupted.get(name, 0.0)

    def total_seconds(self) -> float:
        """The stages' recorded times, not this process's clock, which misses the runs before a resume."""
        return sum(self.stage_seconds(s) for s in set(self.done) | set(self.interrupted))


def _stage(state: RunState, name: str, fresh_process: bool, fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` unless an earlier run finished stage `name`; records its result, time and peak memory."""
    if name in state.done:
        print(f"[demo] {name}: done in an earlier run, skipped")
        return state.done[name]
    print(f"\n[demo] ===== {name} =====", flush=True)
    t0 = time.perf_counter()
    try:
        if fresh_process:
            result, peak = run_in_fresh_process(fn, *args)
        else:
            with PeakMemory() as measured:
                result = fn(*args)
            peak = measured.as_dict()
    except BaseException:  # Ctrl-C or an error: its time still counts in the total of a resumed run
        state.interrupted[name] = round(state.interrupted.get(name, 0.0) + time.perf_counter() - t0, 1)
        state.save()
        raise
    seconds = round(time.perf_counter() - t0, 1)
    if not fresh_process:
        # the stage's model sits in reference cycles and glibc keeps freed pages: without this a one-process demo
        # was OOM-killed at 24 GB
        release_memory()
    state.done[name] = {"result": result, "seconds": seconds, "interrupted_s": state.interrupted.pop(name, 0.0),
                        "peak_memory": peak}
    state.save()
    return state.done[name]


# --------------------------------------------------------------------------- the machine


def machine_info() -> dict[str, Any]:
    """CPU model, cores this process may use, torch threads, native bf16 (CPU, and GPU when there is one)."""
    import platform

    import torch

    from openmanus_lite.engine.precision import cpu_has_native_bf16, gpu_has_native_bf16

    try:
        lines = Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines()
    except OSError:
        lines = []
    cpu = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), None)
    info: dict[str, Any] = {
        "cpu": cpu or platform.processor() or platform.machine() or "unknown CPU",
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1),
        "logical_cpus": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(), "native_bf16": cpu_has_native_bf16()}
    if torch.cuda.is_available():
        info.update(gpu=torch.cuda.get_device_name(0), gpu_native_bf16=gpu_has_native_bf16())
    return info


def machine_line(info: Mapping[str, Any]) -> str:
    """One line for the report: 'CPU model, N cores (T torch threads), native bf16: yes/no[; GPU ...]'."""
    line = f"{info['cpu']}, {info['cores']} cores"  # an older run's record may lack the torch fields
    line += f" ({info['torch_threads']} torch threads)" if info.get("torch_threads") else ""
    line += f", native bf16 on the CPU: {'yes' if info['native_bf16'] else 'no'}" if "native_bf16" in info else ""
    if info.get("gpu"):
        line += f"; GPU {info['gpu']} (native bf16: {'yes' if info.get('gpu_native_bf16') else 'no'})"
    return line


SFT_PACE = {
    # an idle 2-core AMD EPYC (Zen 4) with AVX512-BF16, 2026-12-08: `make demo`'s SFT with compiled decoder layers
    # (train/compiled_layers.py), two conversations a pass (padding_free) and block attention (engine/attention.py)
    # on a clean clone of 3ef1f15 trained 1,069,251 tokens in 30.0 minutes; its probe read 907 GFLOP/s (the pace
    # before block attention, 464.0 tokens/s at 952, said 442). The two paces below were recorded before the layers
    # were compiled, the passes packed and attention run in blocks: on those CPUs SFT may run faster.
    "bfloat16": {"matmul_gflops": 907.0, "tokens_per_s": 594.0},
    # an idle 2-core Intel Xeon with AMX, 2026-12-06: `make demo`'s SFT (passes and loss rows padded to 64 tokens) on
    # a clean clone of c960eba trained 513,262 tokens in 30.0 minutes; its probe read 2,235 GFLOP/s (the AVX512-BF16
    # pace above would say ~1,310 tokens/s)
    "bfloat16 on AMX": {"matmul_gflops": 2235.0, "tokens_per_s": 284.8},
    # an idle 2-core Intel Xeon with AVX512 but no AVX512-BF16, 2026-12-05: `make demo`'s SFT trained 535,623 tokens
    # in 30.1 minutes; its probe read 339 GFLOP/s
    "float32": {"matmul_gflops": 339.0, "tokens_per_s": 296.9},
}
"""Per kind of matmul (`engine.speed.matmul_kind`: float32 training kept more of its matmul rate than bf16, and bf16
on AMX tiles far less), one machine's matmul rate next to the SFT tokens/s it trained; the demo expects as many
tokens/s per GFLOP/s."""

SFT_RECORDS = {"cpu_30min": (
    # (training tokens, steps, success on the demo's 60 held-out dev tasks), 2-core machines, the recipe's cosine over
    # the training minutes; since issue #41 the recipe updates every 2 conversations (was 4, whose records were 0.39M
    # tokens: 35.0%, 0.56M: 50.0%, 0.78M: 70.0%; docs/RESULTS.md)
    (299_252, 252, "48.3% [36.2, 60.7]"),  # AMD EPYC, bf16: `sft --recipe cpu_30min --max_minutes 22.6`, then evaluated
    (336_105, 278, "58.3% [45.7, 69.9]"),  # Intel Xeon, float32, slowed to 73%: 207.4 tokens/s for 27 minutes
    (355_162, 301, "55.0% [42.5, 66.9]"),  # AMD EPYC, bf16: `make demo` on a clean clone of 1d72366, 196.5 tokens/s
    (359_033, 303, "58.3% [45.7, 69.9]"),  # Intel Xeon, float32: `make demo` on a clone of bec1cfc, 20.7 minutes
    (388_290, 322, "60.0% [47.4, 71.4]"),  # Intel Xeon, float32, slowed to 73% (benchmarks/slowed.py): 215.1 tokens/s
    (421_515, 356, "50.0% [37.7, 62.3]"),  # Intel Xeon with AMX, bf16: `make demo` on a clean clone of af6d5ce
    (428_101, 360, "61.7% [49.0, 72.9]"),  # Intel Xeon, float32: `make demo` on a clone of 5d82efa, 23.2 minutes
    (465_410, 398, "55.0% [42.5, 66.9]"),  # Intel Xeon with AMX, bf16, passes padded to 64: `make demo`, cc7617f
    (513_262, 431, "61.7% [49.0, 72.9]"),  # the same, the loss's rows padded too: `make demo`, c960eba, 284.8 tokens/s
    (535_623, 454, "71.7% [59.2, 81.5]"),  # Intel Xeon, float32: `make demo` on a clone of a5cf495, 296.9 tokens/s
    # since 2026-12-07 a quarter as many medium tasks are in the mix (the records above: easy tasks only)
    (589_167, 494, "70.0% [57.5, 80.1]"),  # Intel Xeon with AMX, bf16: `make demo`, 86075d6's recipe (its draft 999f69b)
    (764_843, 634, "75.0% [62.8, 84.2]"),  # AMD EPYC, bf16, compiled decoder layers: `make demo`, 7781a58, 424.7 tokens/s
    (835_277, 699, "81.7% [70.1, 89.4]"),  # the same, two conversations a pass: `make demo`, 0c405df, 464.0 tokens/s
    (861_236, 715, "83.3% [72.0, 90.7]"),  # the same: `make demo`, 35828fd (issue #39's third pass), 478.4 tokens/s
    (1_069_251, 889, "95.0% [86.3, 98.3]"),  # the same, block attention: `make demo`, 3ef1f15, 594.0 tokens/s
)}
"""The demo's SFT results on record by training tokens: a slower machine's 30 minutes hold fewer tokens, and the
result follows the tokens, not the minutes."""


MIN_TRAINING_SHARE = 0.5
"""`training_budget` never cuts a training stage below this share of its limit: on a very slow machine the demo runs
over its budget rather than train too little to show anything."""

TRAINED_EVAL_TOKENS = 15_000
"""A trained checkpoint's evaluation of the demo's 60 tasks takes as long as the untrained evaluation takes to
generate this many tokens (`training_budget` plans it at that pace). It generates fewer (8.5-10.2k in ten
evaluations), but reads long observations where the untrained model's episodes, ended after 3 invalid actions, read
short ones: 14.8k and 15.6k on a CPU slowed to 73% (2026-12-06; 2.8 and 2.9 minutes at 89 tokens/s)."""


def training_budget(cfg: DemoConfig, spent_s: float, eval_tokens_per_s: float | None) -> dict[str, Any]:
    """{"sft", "grpo", "eval": minutes, "why": the sum} once the untrained evaluation has run: `total_minutes` less
    the `spent_s` seconds so far, two trained evaluations (`TRAINED_EVAL_TOKENS` each at `eval_tokens_per_s`, the
    untrained evaluation's pace with its loading) and two overheads, shared by SFT and GRPO in proportion to their
    limits, between `MIN_TRAINING_SHARE` of those and all; with `sft_minutes` given, the limits as set."""
    sft, grpo = float(cfg.sft_recipe().max_minutes or 0.0), cfg.grpo_minutes
    if not cfg.budgeted() or not sft:
        return {"sft": sft, "grpo": grpo, "eval": cfg.eval_minutes,
                "why": "as set, without the budget (it applies when SFT's minutes are not given)"
                if cfg.sft_minutes is not None else "the recipe's, without a budget"}
    if eval_tokens_per_s:
        evaluation = round(TRAINED_EVAL_TOKENS / eval_tokens_per_s / 60, 1)
        pace = f"{TRAINED_EVAL_TOKENS:,} tokens each at the untrained evaluation's {eval_tokens_per_s:.0f} tokens/s"
    else:
        evaluation, pace = cfg.eval_minutes, "as planned"
    left = cfg.total_minutes - spent_s / 60 - 2 * evaluation - 2 * cfg.overhead_minutes
    share = min(1.0, max(MIN_TRAINING_SHARE, left / (sft + grpo)))
    why = (f"{cfg.total_minutes:g} minutes less {spent_s / 60:.1f} spent, two evaluations of {evaluation:g} ({pace}) "
           f"and {2 * cfg.overhead_minutes:g} of loading and saving leave {left:.1f} for SFT and GRPO")
    if share == 1.0:
        why += f": their whole {sft:g} and {grpo:g}"
    elif share == MIN_TRAINING_SHARE:
        why += f"; held at {MIN_TRAINING_SHARE:.0%} of their {sft:g} and {grpo:g}, so the demo runs over its budget"
    else:
        why += f", {share:.0%} of their {sft:g} and {grpo:g} each"
    return {"sft": round(share * sft, 1), "grpo": round(share * grpo, 1), "eval": evaluation, "why": why}


def measure_speed(cfg: DemoConfig) -> dict[str, Any] | None:
    """The matmul rate in SFT's dtype (a few seconds) and the tokens/s it predicts, for a recipe with records run on
    its own preset's CPU model; else None."""
    import torch

    from openmanus_lite.engine.speed import matmul_dtype, matmul_gflops, matmul_kind
    from openmanus_lite.recipes import get_recipe

    if (cfg.recipe not in SFT_RECORDS or cfg.model or cfg.preset != get_recipe(cfg.recipe).preset
            or torch.cuda.is_available()):
        return None
    gflops, dtype, kind = matmul_gflops(), str(matmul_dtype()).removeprefix("torch."), matmul_kind()
    pace = SFT_PACE.get(kind) or SFT_PACE.get(dtype, SFT_PACE["float32"])
    return {"matmul_gflops": gflops, "matmul_kind": kind,
            "expected_tokens_per_s": round(gflops * pace["tokens_per_s"] / pace["matmul_gflops"], 1)}


def expectation_lines(cfg: DemoConfig, speed: Mapping[str, Any], minutes: float | None = None,
                      at_most: bool = False) -> list[str]:
    """What SFT should train here in `minutes` (default: the planned limit; `at_most` before `training_budget`),
    what as much gave on record, and on a slower machine how long the best takes."""
    rate, minutes = speed["expected_tokens_per_s"], cfg.planned_minutes()["sft"] if minutes is None else minutes
    kind = speed.get("matmul_kind") or speed["matmul_dtype"]  # the key of a run saved before AMX had a pace
    tokens, records = rate * 60 * minutes, SFT_RECORDS[cfg.recipe]
    best_tokens, best_steps, best = records[-1]
    lines = [f"This machine multiplies {speed['matmul_gflops']:.0f} GFLOP/s in {kind} (the default "
             f"model's shapes): SFT should train about {rate:.0f} tokens/s, {tokens / 1e6:.2f}M tokens "
             f"(~{tokens * best_steps / best_tokens:.0f} steps) in {'at most' if at_most else 'its'} {minutes:g} "
             "minutes."]
    if not kind.startswith("bfloat16"):
        lines.append("This CPU has no native bf16 (AVX512-BF16 or AMX): SFT trains in float32 here, and the rate above "
                     "comes from a float32 run on record.")
    lines.append(f"On record for `{cfg.recipe}` (the demo's 60 held-out tasks): "
                 + "; ".join(f"{n / 1e6:.2f}M tokens ({steps} steps): {result}" for n, steps, result in records)
                 + ".")
    if tokens < best_tokens:
        lines.append(f"The record's {best} took {best_tokens / 1e6:.2f}M tokens: about {best_tokens / rate / 60:.0f} "
                     f"minutes of SFT here (`--sft_minutes {best_tokens / rate / 60:.0f}`).")
    return lines


def command_line(argv: list[str]) -> str:
    return shlex.join(["python", "-m", "openmanus_lite", "demo", *argv])


# --------------------------------------------------------------------------- stages


def stage_prepare(cfg: DemoConfig, preset, run_dir: Path) -> dict[str, Any]:
    """The model checkpoint and the SFT data: the merged samples plus the recipe's expert and recovery episodes,
    checked disjoint from the evaluation's tasks."""
    from openmanus_lite.data import MergeConfig, SourceSpec, merge, write_jsonl
    from openmanus_lite.models import resolve_model_name
    from openmanus_lite.recipes import recipe_tasks, recipe_trajectories
    from openmanus_lite.splits import check_disjoint

    model = resolve_model_name(preset.resolve_model(cfg.model))
    print(f"[demo] model: {model}")
    specs = [SourceSpec(p.name, str(p)) for p in sorted(SAMPLES_DIR.iterdir()) if p.is_dir()]
    specs += [SourceSpec(src, str(REAL_SAMPLES_DIR / src), label=f"real_{src}")
              for src in ("agentinstruct", "agenttraj_l", "openmanus_rl") if (REAL_SAMPLES_DIR / src).is_dir()]
    merged = merge(specs, MergeConfig(seed=cfg.seed, strict=False, rejected_path=run_dir / "rejected.jsonl"))
    (run_dir / "merge_report.txt").write_text(merged.report.summary())
    six = [t for t in merged.splits.get("train", []) if t.domain in cfg.domains]
    recipe = cfg.sft_recipe()
    tasks, removed = recipe_tasks(recipe)
    check_disjoint({recipe.split: tasks}, {DEMO_EVAL_SUITE: _eval_suite(cfg).tasks})
    synth, info = recipe_trajectories(recipe, tasks)
    write_jsonl(six + synth, run_dir / "train.jsonl")
    print(merged.report.summary())
    return {"model": model, "merged_rows": sum(merged.report.input_rows.values()),
            "merged_train_six_domains": len(six), "training_tasks": len(tasks), "synthesized": len(synth),
            "expert": info["expert"], "recovery": info["recovery"], "removed_held_out": removed,
            "tasks_per_level": info.get("tasks_per_level"), "train_file": str(run_dir / "train.jsonl")}


def _eval_suite(cfg: DemoConfig):
    from openmanus_lite.eval import load_suite

    return load_suite(DEMO_EVAL_SUITE, domains=cfg.domains, difficulties=["easy"], limit=cfg.eval_per_domain)


def stage_eval(cfg: DemoConfig, preset, run_dir: Path, label: str, model_path: str | None = None) -> dict[str, Any]:
    """Greedy episodes on the frozen dev suite; the result is saved as JSON for the comparison."""
    from openmanus_lite.eval import run_benchmark
    from openmanus_lite.policies import ModelPolicy

    model, tokenizer = preset.load(model_path, for_training=False)
    policy = ModelPolicy(model, tokenizer, name=label, max_new_tokens=preset.max_new_tokens,
                         batch_size=preset.eval_batch_size)
    # the turn limits the training prompts state
    result = run_benchmark(policy, _eval_suite(cfg), max_turns=cfg.sft_recipe().max_turns(),
                           batch_size=preset.eval_batch_size, label=label, max_invalid_streak=cfg.eval_invalid_streak)
    path = run_dir / f"eval_{label}.json"
    result.save(path)
    row = result.row()
    print(f"[demo] {label}: success {row.success_rate:.1%} (95% CI {row.ci_low:.1%}-{row.ci_high:.1%}) "
          f"over {row.n} episodes, invalid actions {row.invalid_action_rate:.1%}")
    return {"path": str(path), "success": row.success_rate, "ci": [row.ci_low, row.ci_high], "n": row.n,
            "per_domain": {d: [result.row(d).successes, result.row(d).n] for d in cfg.domains},
            "generated_tokens": result.generated_tokens}


def stage_sft(cfg: DemoConfig, preset, run_dir: Path, train_file: str) -> dict[str, Any]:
    """LoRA SFT with the recipe's settings; another preset than the recipe's (--quick) keeps its step budget."""
    from openmanus_lite.recipes import get_recipe, recipe_dataset, recipe_preset
    from openmanus_lite.train.data import load_trajectories
    from openmanus_lite.train.sft import run_sft, save_merged

    recipe = cfg.sft_recipe()
    train_preset = recipe_preset(recipe)
    model, tok = train_preset.load(cfg.model, for_training=True)
    dataset, report = recipe_dataset(recipe, tok, load_trajectories(train_file))
    print(report.summary())
    own = {k: preset.sft[k] for k in ("max_steps", "warmup_steps") if preset.name != get_recipe(cfg.recipe).preset}
    sft_cfg = recipe.sft_config(output_dir=str(run_dir / "sft"), save_steps=20, **own)
    result = run_sft(model, tok, dataset, sft_cfg)
    merged_dir = save_merged(result.model, tok, run_dir / "sft_model")
    _plot_losses(result.loss_history, run_dir / "sft_loss.png")
    return {"model": str(merged_dir), "recipe": recipe.name, "dtype": train_preset.dtype or "the device's",
            "steps": result.global_step, "train_s": round(result.train_seconds, 1),
            "tokens_per_s": round(result.tokens_per_second, 1), "final_loss": (result.losses() or [None])[-1],
            "data": report.summary()}


def select_grpo_domains(result, domains, rule: str = "mixed") -> tuple[list[str], dict[str, str]]:
    """(domains GRPO trains on, why each other one is left out) from the SFT evaluation under `rule`."""
    if rule not in GRPO_DOMAIN_RULES:
        raise ValueError(f"grpo_domains must be one of {sorted(GRPO_DOMAIN_RULES)}, got {rule!r}")
    chosen, reasons = [], {}
    for d in domains:
        try:
            row = result.row(d)
        except KeyError:
            reasons[d] = "not in the SFT evaluation"
            continue
        k, n = row.successes, row.n
        if rule == "all" or (k > 0 and (rule == "success" or k < n)):
            chosen.append(d)
        else:
            alike = "fail" if k == 0 else "succeed"
            reasons[d] = f"SFT solved {k}/{n}: every group would likely {alike} alike, no advantage to learn from"
    return chosen, reasons


def grpo_turn_limits(cfg: DemoConfig, domains) -> int | dict[str, int] | None:
    """GRPO's turn limit per domain: the evaluation's (what the SFT prompts stated), capped at grpo_max_turns."""
    limits, cap = cfg.sft_recipe().max_turns(), cfg.grpo_max_turns
    if isinstance(limits, dict):
        return {d: min(limits[d], cap) if cap else limits[d] for d in domains if d in limits} or cap
    if limits is None:
        return cap
    return min(limits, cap) if cap else limits


GRPO_GROUPS_PER_STEP = 2
"""Groups of `grpo_num_generations` episodes in each GRPO optimizer step of the demo."""


def stage_grpo(cfg: DemoConfig, preset, run_dir: Path, sft_model: str, sft_eval: dict) -> dict[str, Any]:
    """Multi-turn GRPO with the outcome reward on the domains `select_grpo_domains` picks; skipped when none."""
    from openmanus_lite.eval import BenchmarkResult
    from openmanus_lite.splits import check_disjoint, training_tasks

    domains, reasons = select_grpo_domains(BenchmarkResult.load(sft_eval["path"]), cfg.domains, cfg.grpo_domains)
    for d, why in reasons.items():
        print(f"[demo] GRPO leaves out {d}: {why}")
    if not domains:
        why = f"no domain qualifies ({GRPO_DOMAIN_RULES[cfg.grpo_domains]})"
        print(f"[demo] GRPO skipped: {why}; the SFT model is the final one")
        return {"skipped": why, "domains": [], "left_out": reasons}
    print(f"[demo] GRPO on {domains} ({GRPO_DOMAIN_RULES[cfg.grpo_domains]}), rewards {cfg.grpo_rewards!r}, "
          f"{cfg.grpo_minutes} min")
    from openmanus_lite.train.grpo import build_env_dataset, plot_reward_curves, reward_at_ends, run_grpo
    from openmanus_lite.train.sft import save_merged

    model, tok = preset.load(sft_model, for_training=True)
    tasks, _ = training_tasks("demo_grpo_train", domains, cfg.grpo_tasks_per_domain, seed=DEMO_GRPO_SEED + cfg.seed)
    check_disjoint({"demo_grpo_train": tasks}, {DEMO_EVAL_SUITE: _eval_suite(cfg).tasks})
    limits = grpo_turn_limits(cfg, domains)
    longest = max(limits.values()) if isinstance(limits, dict) else (limits or 5)
    micro = math.gcd(preset.grpo["per_device_train_batch_size"], GRPO_GROUPS_PER_STEP * cfg.grpo_num_generations)
    dataset, rollout = build_env_dataset(tasks, max_turns=limits, max_new_tokens=preset.max_new_tokens)
    gcfg = preset.grpo_config(
        mode="multi", rewards=cfg.grpo_rewards, output_dir=str(run_dir / "grpo"), max_steps=cfg.grpo_steps,
        # GRPO_GROUPS_PER_STEP groups per optimizer step, the preset's episodes per backward pass (cpu: one): 8 episodes
        # a pass got a demo OOM-killed, one peaks lowest (benchmarks/memory.py --stages grpo; docs/RESULTS.md)
        num_generations=cfg.grpo_num_generations, per_device_train_batch_size=micro,
        gradient_accumulation_steps=GRPO_GROUPS_PER_STEP * cfg.grpo_num_generations // micro, max_turns=limits,
        max_new_tokens=preset.max_new_tokens, max_episode_tokens=longest * (preset.max_new_tokens + 160),
        save_strategy="steps", save_steps=4, seed=cfg.seed, sample_every=0, max_minutes=cfg.grpo_minutes)
    result = run_grpo(model, tok, dataset, gcfg, rollout_func=rollout, resume=True)
    fig = plot_reward_curves(result.log_history, title="GRPO rewards (multi-turn)")
    _save_figure(fig, run_dir / "grpo_rewards.png")
    merged_dir = save_merged(result.trainer.model, tok, run_dir / "grpo_model")
    shares = [h["signal/group_share"] for h in result.log_history if "signal/group_share" in h]
    first, last, ends = reward_at_ends(result.log_history) or (None, None, 0)
    return {"model": str(merged_dir), "domains": domains, "left_out": reasons, "rewards": cfg.grpo_rewards,
            "steps": sum("reward" in h for h in result.log_history), "reward_first": first, "reward_last": last,
            "reward_end_steps": ends,
            "groups": GRPO_GROUPS_PER_STEP * len(shares),  # shares: each step's share of groups with signal
            "groups_with_signal": round(GRPO_GROUPS_PER_STEP * sum(shares))}


def _plot_losses(history: list[dict], path: Path) -> None:
    from openmanus_lite.eval.plots import file_pyplot

    logged = [h for h in history if "loss" in h]
    fig, ax = file_pyplot().subplots(figsize=(6, 3.5))
    ax.plot([h["step"] for h in logged], [h["loss"] for h in logged])
    ax.set(xlabel="step", ylabel="training loss", title="SFT loss")
    _save_figure(fig, path)


def _save_figure(fig, path: Path) -> None:
    from openmanus_lite.eval.plots import file_pyplot

    fig.savefig(path, dpi=120, bbox_inches="tight")
    file_pyplot().close(fig)


# --------------------------------------------------------------------------- report


def load_results(state: RunState) -> dict[str, Any]:
    """{column name: BenchmarkResult} of every evaluated checkpoint, in pipeline order."""
    from openmanus_lite.eval import BenchmarkResult

    return {title: replace(BenchmarkResult.load(state.done[f"eval_{key}"]["result"]["path"]), label=title)
            for key, title in CHECKPOINTS.items() if f"eval_{key}" in state.done}


def success_table(cfg: DemoConfig, results: Mapping[str, Any]) -> str:
    """Markdown: success per domain and over all domains with 95% Wilson intervals, one column per checkpoint."""
    from openmanus_lite.eval import comparison_markdown

    return comparison_markdown(dict(results), cfg.domains, pooled_label="all domains (mean)")


def _latest(state: RunState, key: str) -> Any:
    """What the latest run that recorded `key` recorded: "budget" (`training_budget`'s decision) or "speed"."""
    return next((r[key] for r in reversed(state.runs) if r.get(key)), None)


def _planned(cfg: DemoConfig, state: RunState) -> dict[str, float]:
    """`cfg.planned_minutes()` with the limits and evaluation plans `training_budget` set."""
    b = _latest(state, "budget")
    return {**cfg.planned_minutes(),
            **({"sft": b["sft"], "grpo": b["grpo"], "eval_sft": b["eval"], "eval_grpo": b["eval"]} if b else {})}


def time_table(cfg: DemoConfig, state: RunState) -> str:
    """Markdown: each stage's limit or plan, its recorded minutes (interrupted attempts included) and peak."""
    from openmanus_lite.eval import markdown_table

    plan = _planned(cfg, state)
    grpo_skipped = state.done.get("grpo", {}).get("result", {}).get("skipped")
    rows = []
    for s in STAGES:
        budget = f"{plan[s]:g} ({'limit' if s in ('sft', 'grpo') else 'plan'})"
        d = state.done.get(s)
        if (d and d["result"].get("skipped")) or (s == "eval_grpo" and grpo_skipped):
            took = "skipped"
        elif d or s in state.interrupted:
            took = f"{state.stage_seconds(s) / 60:.1f}"
            lost = state.stage_seconds(s) - (float(d["seconds"]) if d else 0.0)
            if lost > 0:
                took += f" (of which {lost / 60:.1f} interrupted)"
            if not d:
                took += ", unfinished"
        else:
            took = "not run"
        rows.append([STAGE_TITLES[s], budget, took, _peak_cell((d or {}).get("peak_memory") or {})])
    total = f"{cfg.total_minutes:g} (budget)" if cfg.budgeted() else f"{sum(plan.values()):g}"
    rows.append(["**total**", f"**{total}**", f"**{state.total_seconds() / 60:.1f}**", ""])
    return markdown_table(["stage", "minutes: limit or plan", "minutes taken", "peak memory of the stage (GB)"], rows)


def _peak_cell(peak: Mapping[str, Any]) -> str:
    """A stage's `PeakMemory.as_dict()` in GB, saying so where the OS gave only the process's lifetime peak."""
    if peak.get("rss_gb") is None:
        return ""
    cell = f"{peak['rss_gb']:.1f}"
    if peak.get("cuda_allocated_gb") is not None:
        cell += f" (GPU {peak['cuda_allocated_gb']:.1f})"
    return cell + (" (process lifetime)" if peak.get("rss_kind") != "stage" else "")


def verdict_lines(results: Mapping[str, Any]) -> list[str]:
    """Each checkpoint against the one before: the change, the paired sign test and the intervals' overlap."""
    from openmanus_lite.eval import sign_tests

    lines = []
    for (la, a), (lb, b) in itertools.pairwise(results.items()):
        ra, rb = a.row(), b.row()
        test = sign_tests(a, b).iloc[-1]
        diff = 100 * (rb.success_rate - ra.success_rate)
        if rb.ci_low > ra.ci_high or rb.ci_high < ra.ci_low:
            intervals = f"{lb}'s interval is clear of {la}'s ({'above' if rb.ci_low > ra.ci_high else 'below'})"
        else:
            intervals = "the intervals overlap"
        noise = "beyond noise" if test["p_value"] < 0.05 else "within noise"
        lines.append(f"- {lb} vs {la}: {diff:+.1f} points ({rb.success_rate:.1%} vs {ra.success_rate:.1%}); "
                     f"{int(test['gained'])} tasks gained, {int(test['lost'])} lost of {int(test['common'])} "
                     f"(paired sign test p = {test['p_value']:.3g}, {noise}); {intervals}.")
    return lines


def _image(run_dir: Path, name: str, alt: str) -> list[str]:
    return [f"![{alt}]({name})", ""] if (run_dir / name).is_file() else []


def write_report(cfg: DemoConfig, run_dir: Path, state: RunState) -> tuple[str, str]:
    """Write report.md (and comparison.png); returns (the time table, the success table) for the terminal."""
    from openmanus_lite.eval.plots import file_pyplot, plot_comparison

    results = load_results(state)
    if results:
        plt = file_pyplot()
        plot_comparison(list(results.values()), level="domain", path=run_dir / "comparison.png",
                        title="success on held-out dev tasks (95% Wilson intervals)")
        plt.close("all")
    success = success_table(cfg, results) if results else "(no checkpoint evaluated yet)"
    times = time_table(cfg, state)
    d = {k: v["result"] for k, v in state.done.items()}
    machines = list(dict.fromkeys(machine_line(r["machine"]) for r in state.runs if r.get("machine")))
    commands = [command_line(r["argv"]) for r in state.runs] or [command_line([])]
    speed = _latest(state, "speed")
    lines = [
        "# openmanus_lite demo: untrained -> SFT -> GRPO", "",
        f"- **Machine**: {'; '.join(machines) or 'not recorded'}",
        f"- **Model**: preset `{cfg.preset}` ({d.get('prepare', {}).get('model', cfg.model or 'the preset model')})",
        f"- **Evaluation**: {cfg.eval_per_domain} held-out easy tasks per domain from the frozen `{DEMO_EVAL_SUITE}` "
        f"suite ({len(_eval_suite(cfg).tasks)} episodes per checkpoint, the same tasks for each), greedy"
        + (f"; an episode ends after {cfg.eval_invalid_streak} invalid actions in a row" if cfg.eval_invalid_streak
           else ""),
        f"- **Total time**: {state.total_seconds() / 60:.1f} minutes (the sum of the stages' recorded times"
        + (f", across {len(state.runs)} runs of the command" if len(state.runs) > 1 else "") + ")",
        f"- **Command**: `{commands[0]}`", "",
        "## Success on held-out tasks (95% Wilson intervals)", "", success, "", *verdict_lines(results), "",
        *_image(run_dir, "comparison.png", "success per domain and checkpoint"),
        "## Time per stage", "", times, "",
        "SFT and GRPO stop at their limits (training time; loading, data preparation and saving come on top); "
        "the other stages' minutes are plans.", "",
    ]
    if budget := _latest(state, "budget"):
        lines += [f"Limits: SFT {budget['sft']:g} minutes, GRPO {budget['grpo']:g}: {budget['why']}.", ""]
    if speed:
        expect = [f"- {x}" for x in expectation_lines(cfg, speed, _planned(cfg, state)["sft"])]
        lines += ["## What to expect (measured before training)", "", *expect, ""]
    if "prepare" in d:
        p = d["prepare"]
        levels = p.get("tasks_per_level") or {}
        levels = f" ({', '.join(f'{n} {level}' for level, n in levels.items())})" if len(levels) > 1 else ""
        lines += ["## Data", "",
                  f"Merged sample rows: {p['merged_rows']} (report: [merge_report.txt](merge_report.txt)); "
                  f"six-domain rows used: {p['merged_train_six_domains']}. Recipe `{cfg.recipe}`: "
                  f"{p['training_tasks']} training tasks{levels} ({p['removed_held_out']} generated tasks equal to "
                  f"held-out ones left out), {p.get('expert', p['synthesized'])} expert and {p.get('recovery', 0)} "
                  "recovery episodes.", ""]
    if "sft" in d:
        s = d["sft"]
        expected = f"; about {speed['expected_tokens_per_s']:.0f} expected from the matmul rate" if speed else ""
        lines += ["## SFT", "",
                  f"Recipe `{s.get('recipe', cfg.recipe)}` ({s.get('dtype', '')}): {s['steps']} steps in "
                  f"{s['train_s'] / 60:.1f} min of training ({s['tokens_per_s']} tokens/s{expected}), final loss "
                  f"{_fmt(s['final_loss'])}.", "", *_image(run_dir, "sft_loss.png", "SFT training loss")]
    if "grpo" in d:
        g = d["grpo"]
        left = "; ".join(f"{dom}: {why}" for dom, why in g.get("left_out", {}).items())
        lines += ["## GRPO", ""]
        # a group whose episodes all earn the same reward has no advantage and teaches nothing (issue #40)
        signal = (f" {g['groups_with_signal']} of {g['groups']} groups carried a signal (rewards that differ within "
                  "the group); the others, all solved or all failed, added no gradient.") if g.get("groups") else ""
        if g.get("skipped"):
            lines += [f"Skipped: {g['skipped']}." + (f" {left}." if left else ""), ""]
        else:
            lines += [f"Multi-turn, reward `{g.get('rewards', cfg.grpo_rewards)}`, on {', '.join(g['domains'])} "
                      f"({GRPO_DOMAIN_RULES[cfg.grpo_domains]}): {g['steps']} steps, {_reward_ends(g)}."
                      + signal + (f" Left out: {left}." if left else ""), "",
                      *_image(run_dir, "grpo_rewards.png", "GRPO rewards per step")]
    lines += ["## Reproduce", "", "```bash", commands[0], "```", ""]
    if len(commands) > 1:
        lines += ["This run was resumed with:", "", "```bash", *commands[1:], "```", ""]
    lines += ["In another `--output_dir` (or none): the same folder resumes this run. Settings: "
              "[config.json](config.json); per-task results with every episode: "
              + ", ".join(f"[eval_{k}.json](eval_{k}.json)" for k in CHECKPOINTS if f"eval_{k}" in state.done) + ".",
              ""]
    (run_dir / REPORT).write_text("\n".join(lines))
    return times, success


def _reward_ends(g: dict[str, Any]) -> str:
    """The training reward at both ends of GRPO, and why the held-out table, not this, says whether it helped."""
    n = g.get("reward_end_steps", 1)  # runs recorded before it: the first and the last step
    span = "step" if n == 1 else f"{n} steps"
    return (f"mean reward {_fmt(g['reward_first'])} over the first {span}, {_fmt(g['reward_last'])} over the last "
            "(each step draws other training tasks, so this follows the tasks drawn as much as the policy: the "
            "held-out evaluation above is the measure)")


def _fmt(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)


# --------------------------------------------------------------------------- driver


def _check_config(cfg: DemoConfig, run_dir: Path, state: RunState) -> None:
    old = sorted(set(state.done) - set(STAGES))
    if old:
        raise ConfigMismatch(f"{run_dir} was made by an older version of the demo (stages {old}); start a new run "
                             "in another --output_dir.")
    path = run_dir / "config.json"
    if state.done and path.is_file():
        before = json.loads(path.read_text())
        now = cfg.to_json()
        diff = {k: (before.get(k), now.get(k)) for k in sorted(set(before) | set(now)) if before.get(k) != now.get(k)}
        if diff:
            shown = ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in diff.items())
            raise ConfigMismatch(f"{run_dir} holds stages made with other settings ({shown}). Re-run with the "
                                 "options that started it (or only --resume / --output_dir), or use another "
                                 "--output_dir.")


def run_demo(cfg: DemoConfig, run_dir: Path, argv: list[str] | None = None, fresh_processes: bool = True) -> Path:
    """Run (or continue) the demo in `run_dir`; `argv` is recorded for the report. `fresh_processes`: in one process
    the later stages peaked 1-2 GB higher on what the earlier ones left (issue #41)."""
    from openmanus_lite.train.presets import get_preset

    run_dir.mkdir(parents=True, exist_ok=True)
    state = RunState.load(run_dir)
    _check_config(cfg, run_dir, state)
    (run_dir / "config.json").write_text(json.dumps(cfg.to_json(), indent=1))
    state.runs.append({"argv": list(argv or []), "machine": machine_info(),
                       "started": time.strftime("%Y-%m-%d %H:%M:%S %Z")})
    state.save()
    preset = get_preset(cfg.preset)
    plan = cfg.planned_minutes()
    total = cfg.total_minutes if cfg.budgeted() else sum(plan.values())
    print(f"[demo] {run_dir}: planned {total:g} min ("
          + ", ".join(f"{s} {'at most ' if s in ('sft', 'grpo') and cfg.budgeted() else ''}{m:g}"
                      for s, m in plan.items())
          + f"); {machine_line(state.runs[-1]['machine'])}")
    speed = measure_speed(cfg) if "sft" not in state.done else None
    if speed:  # said before anything trains: what this machine will buy in the budget
        state.runs[-1]["speed"] = speed
        state.save()
        print("\n".join(f"[demo] {line}" for line in expectation_lines(cfg, speed, at_most=cfg.budgeted())),
              flush=True)
        if cfg.budgeted():
            print(f"[demo] SFT's and GRPO's limits are set after the untrained evaluation, from what it leaves of the "
                  f"{cfg.total_minutes:g}-minute budget.", flush=True)
    data = _stage(state, "prepare", fresh_processes, stage_prepare, cfg, preset, run_dir)["result"]
    _stage(state, "eval_untrained", fresh_processes, stage_eval, cfg, preset, run_dir, "untrained", data["model"])
    if "sft" not in state.done:
        tokens = state.done["eval_untrained"]["result"].get("generated_tokens")  # absent in runs before 2026-12-06
        budget = training_budget(cfg, state.total_seconds(),
                                 tokens / state.stage_seconds("eval_untrained") if tokens else None)
        state.runs[-1]["budget"] = budget
        state.save()
        rate = f" (about {speed['expected_tokens_per_s'] * 60 * budget['sft'] / 1e6:.2f}M tokens)" if speed else ""
        print(f"[demo] SFT trains {budget['sft']:g} minutes{rate}, GRPO {budget['grpo']:g}: {budget['why']}.",
              flush=True)
    plan = _planned(cfg, state)
    limited = replace(cfg, sft_minutes=plan["sft"], grpo_minutes=plan["grpo"])  # the training stages' limits
    sft = _stage(state, "sft", fresh_processes, stage_sft, limited, preset, run_dir, data["train_file"])["result"]
    sft_eval = _stage(state, "eval_sft", fresh_processes, stage_eval, cfg, preset, run_dir, "sft", sft["model"])
    grpo = _stage(state, "grpo", fresh_processes, stage_grpo, limited, preset, run_dir, sft["model"],
                  sft_eval["result"])["result"]
    if not grpo.get("skipped"):
        _stage(state, "eval_grpo", fresh_processes, stage_eval, cfg, preset, run_dir, "grpo", grpo["model"])
    for s in STAGES:
        if s in state.done and 60 * plan[s] > 0 and state.stage_seconds(s) > 1.5 * 60 * plan[s]:
            print(f"[demo] note: {s} took {state.stage_seconds(s) / 60:.1f} min against {plan[s]:g} planned")
    times, success = write_report(cfg, run_dir, state)
    print(f"\n[demo] report: {run_dir / REPORT}\n\n{times}\n\n{success}")
    return run_dir


def latest_run() -> Path | None:
    """The newest run folder in runs/ without a report (unfinished), else None."""
    return max((p for p in RUNS_DIR.glob("demo-*") if (p / "state.json").is_file() and not (p / REPORT).is_file()),
               default=None)

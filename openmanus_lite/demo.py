"""`python -m openmanus_lite demo`: the whole recipe, start to finish, on the embedded default.

    merge sample data + synthesize expert trajectories in the six environments
      -> evaluate the untrained model -> LoRA SFT -> evaluate -> multi-turn GRPO -> evaluate
      -> run folder with the data report, loss and reward curves, comparison table and chart,
         and a Markdown report

Each stage writes its result into the run folder and records itself in `state.json`, so an
interrupted demo re-run with the same `--out` (or `--resume`) continues where it stopped.
`--quick` runs the same pipeline on the tiny test model in a few minutes.
"""

from __future__ import annotations

import argparse
import errno
import json
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from .paths import REAL_SAMPLES_DIR, RUNS_DIR, SAMPLES_DIR
from .splits import DEMO_EVAL_SUITE, DEMO_GRPO_SEED


@dataclass
class DemoConfig:
    """What the demo does; the defaults fit about an hour on a 2-core CPU (measured 54 minutes: an evaluation
    of 30 episodes takes 6-13 minutes there, SFT 20, GRPO 6; see the README's results)."""

    preset: str = "cpu"
    model: str | None = None
    """None: the preset's model (the embedded SmolLM2-135M-Instruct for `cpu`)."""
    domains: tuple[str, ...] = ("os", "db", "web", "kg", "household", "ecommerce")
    recipe: str = "demo"
    """The SFT data and settings (openmanus_lite/recipes/demo.py); the fields below left at None are its."""
    train_per_domain: int | None = None
    """Expert trajectories synthesized per domain for SFT (the recipe's 120, splits.DEMO_SFT_SEED; no held-out
    task of the kit)."""
    eval_per_domain: int = 5
    """Tasks per domain from the frozen dev suite (easy, splits.DEMO_EVAL_SUITE) for each evaluated checkpoint."""
    eval_max_turns: int | None = None
    """Turn limit of training prompts and evaluation; None: per domain (train.measure.EASY_TURN_LIMITS)."""
    sft_minutes: float | None = None
    """None: the recipe's (20)."""
    sft_max_length: int | None = None
    """None: the recipe's (768)."""
    grpo_minutes: float = 6.0
    grpo_steps: int = 12
    grpo_tasks_per_domain: int = 24
    grpo_num_generations: int = 4
    grpo_max_turns: int = 4
    seed: int = 0

    def sft_recipe(self):
        """The recipe with this config's preset, domains, seed, turn limit and the SFT fields given."""
        from .recipes import get_recipe

        changes = {k: v for k, v in (("tasks_per_domain", self.train_per_domain), ("max_minutes", self.sft_minutes),
                                     ("max_length", self.sft_max_length), ("turn_limits", self.eval_max_turns))
                   if v is not None}
        return get_recipe(self.recipe).on_preset(self.preset).replace(domains=tuple(self.domains), seed=self.seed,
                                                                      **changes)

    @classmethod
    def quick(cls) -> "DemoConfig":
        return cls(
            preset="cpu_debug", train_per_domain=12, eval_per_domain=3, eval_max_turns=3, sft_minutes=0.6,
            sft_max_length=512, grpo_minutes=0.5, grpo_steps=2, grpo_tasks_per_domain=2, grpo_num_generations=2,
            grpo_max_turns=2,
        )


@dataclass
class RunState:
    """Which stages are done, and their results (persisted after every stage)."""

    path: Path
    done: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, run_dir: Path) -> "RunState":
        path = run_dir / "state.json"
        done = json.loads(path.read_text())["done"] if path.is_file() else {}
        return cls(path, done)

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"done": self.done}, indent=1, default=str))
        tmp.replace(self.path)


def _stage(state: RunState, name: str, fn: Callable[[], Any]) -> Any:
    if name in state.done:
        print(f"[demo] {name}: done in an earlier run, skipped")
        return state.done[name]
    print(f"\n[demo] ===== {name} =====", flush=True)
    t0 = time.perf_counter()
    result = fn()
    state.done[name] = {"result": result, "seconds": round(time.perf_counter() - t0, 1)}
    state.save()
    return state.done[name]


# --------------------------------------------------------------------------- stages


def stage_data(cfg: DemoConfig, run_dir: Path) -> dict[str, Any]:
    """Merge the shipped samples (and the real samples when present) and synthesize expert data."""
    from .data import MergeConfig, SourceSpec, merge, write_jsonl
    from .recipes import recipe_tasks, recipe_trajectories
    from .splits import check_disjoint

    specs = [SourceSpec(p.name, str(p)) for p in sorted(SAMPLES_DIR.iterdir()) if p.is_dir()]
    if REAL_SAMPLES_DIR.is_dir():
        real = {"agentinstruct": "agentinstruct", "agenttraj_l": "agenttraj_l", "openmanus_rl": "openmanus_rl"}
        specs += [SourceSpec(src, str(REAL_SAMPLES_DIR / folder), label=f"real_{src}") for folder, src in real.items()
                  if (REAL_SAMPLES_DIR / folder).is_dir()]
    merged = merge(specs, MergeConfig(seed=cfg.seed, strict=False, rejected_path=run_dir / "rejected.jsonl"))
    (run_dir / "merge_report.txt").write_text(merged.report.summary())
    six = [t for t in merged.splits.get("train", []) if t.domain in cfg.domains]
    # expert episodes on generated easy tasks, minus any equal to a held-out task of the kit
    recipe = cfg.sft_recipe()
    tasks, removed = recipe_tasks(recipe)
    check_disjoint({recipe.split: tasks}, {DEMO_EVAL_SUITE: _eval_suite(cfg).tasks})
    synth, _ = recipe_trajectories(recipe, tasks)
    write_jsonl(six + synth, run_dir / "train.jsonl")
    print(merged.report.summary())
    return {"merged_rows": sum(merged.report.input_rows.values()), "merged_train_six_domains": len(six),
            "synthesized": len(synth), "removed_held_out": removed, "train_file": str(run_dir / "train.jsonl")}


def _eval_suite(cfg: DemoConfig):
    from .eval import load_suite

    return load_suite(DEMO_EVAL_SUITE, domains=cfg.domains, difficulties=["easy"], limit=cfg.eval_per_domain)


def _turn_limits(cfg: DemoConfig) -> int | dict[str, int]:
    """The limits the training prompts state, so that evaluation states the same."""
    return cfg.sft_recipe().max_turns()


def _load(preset, model_path: str | None, for_training: bool):
    return preset.load(model_path, for_training=for_training)


def stage_eval(cfg: DemoConfig, preset, run_dir: Path, label: str, model=None, tokenizer=None,
               model_path: str | None = None) -> dict[str, Any]:
    """Greedy episodes on the frozen dev suite; the result is saved as JSON for the comparison."""
    from .eval import run_benchmark
    from .policies import ModelPolicy

    if model is None:
        model, tokenizer = _load(preset, model_path, for_training=False)
    suite = _eval_suite(cfg)
    policy = ModelPolicy(model, tokenizer, name=label, max_new_tokens=preset.max_new_tokens,
                         batch_size=preset.eval_batch_size)
    result = run_benchmark(policy, suite, max_turns=_turn_limits(cfg), batch_size=preset.eval_batch_size,
                           label=label)
    path = run_dir / f"eval_{label}.json"
    result.save(path)
    row = result.row()
    print(f"[demo] {label}: success {row.success_rate:.1%} (95% CI {row.ci_low:.1%}-{row.ci_high:.1%}) "
          f"over {row.n} episodes, invalid actions {row.invalid_action_rate:.1%}")
    return {"path": str(path), "success": row.success_rate, "n": row.n,
            "per_domain": {d: result.success_rate(d) for d in cfg.domains}}


def stage_sft(cfg: DemoConfig, preset, run_dir: Path, train_file: str) -> dict[str, Any]:
    from .recipes import recipe_dataset, sft_config
    from .train.data import load_trajectories
    from .train.sft import run_sft, save_merged

    model, tok = _load(preset, cfg.model, for_training=True)
    trajs = load_trajectories(train_file)
    recipe = cfg.sft_recipe()
    dataset, report = recipe_dataset(recipe, tok, trajs)
    print(report.summary())
    # on another preset than the recipe's (--quick: cpu_debug) that preset's step budget and warmup stay
    from .recipes import get_recipe

    own = {} if preset.name == get_recipe(cfg.recipe).preset else {"max_steps": preset.sft.max_steps,
                                                   "warmup_steps": preset.sft.warmup_steps}
    sft_cfg = sft_config(recipe, output_dir=str(run_dir / "sft"), save_steps=20, **own)
    result = run_sft(model, tok, dataset, sft_cfg)
    merged_dir = save_merged(result.model, tok, run_dir / "sft_model")
    _plot_losses(result.loss_history, run_dir / "sft_loss.png")
    return {"model": str(merged_dir), "steps": result.global_step, "train_s": round(result.train_seconds, 1),
            "tokens_per_s": round(result.tokens_per_second, 1), "final_loss": (result.losses() or [None])[-1],
            "data": report.summary()}


def stage_grpo(cfg: DemoConfig, preset, run_dir: Path, sft_model: str, sft_eval: dict) -> dict[str, Any]:
    """Multi-turn GRPO where the SFT model sometimes succeeds (GRPO learns only from mixed groups)."""
    from .splits import check_disjoint, training_tasks
    from .train.grpo import GRPORunConfig, build_env_dataset, make_time_limit, plot_reward_curves, run_grpo
    from .train.sft import save_merged

    domains = [d for d in cfg.domains if sft_eval["per_domain"].get(d, 0) > 0] or list(cfg.domains)
    print(f"[demo] GRPO on {domains} (SFT success above zero there)")
    model, tok = _load(preset, sft_model, for_training=True)
    tasks, _ = training_tasks("demo_grpo_train", domains, cfg.grpo_tasks_per_domain, seed=DEMO_GRPO_SEED + cfg.seed)
    check_disjoint({"demo_grpo_train": tasks}, {DEMO_EVAL_SUITE: _eval_suite(cfg).tasks})
    dataset, rollout = build_env_dataset(tasks, max_turns=cfg.grpo_max_turns, max_new_tokens=preset.max_new_tokens)
    gcfg = GRPORunConfig(
        mode="multi", output_dir=str(run_dir / "grpo"), max_steps=cfg.grpo_steps,
        num_generations=cfg.grpo_num_generations, per_device_train_batch_size=cfg.grpo_num_generations * 2,
        max_turns=cfg.grpo_max_turns, max_new_tokens=preset.max_new_tokens, learning_rate=preset.grpo.learning_rate,
        max_episode_tokens=cfg.grpo_max_turns * (preset.max_new_tokens + 160), save_steps=4,
    )
    result = run_grpo(model, tok, dataset, gcfg, rollout_func=rollout, resume=True,
                      callbacks=[make_time_limit(cfg.grpo_minutes)])
    fig = plot_reward_curves(result.log_history, title="GRPO rewards (multi-turn)")
    fig.savefig(run_dir / "grpo_rewards.png", dpi=120, bbox_inches="tight")
    merged_dir = save_merged(result.trainer.model, tok, run_dir / "grpo_model")
    rewards = [h.get("reward") for h in result.log_history if "reward" in h]
    return {"model": str(merged_dir), "domains": domains, "steps": len(rewards),
            "reward_first": rewards[0] if rewards else None, "reward_last": rewards[-1] if rewards else None}


def _plot_losses(history: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [h["step"] for h in history if "loss" in h]
    losses = [h["loss"] for h in history if "loss" in h]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(steps, losses)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.set_title("SFT loss")
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def stage_report(cfg: DemoConfig, run_dir: Path, state: RunState, total_s: float) -> str:
    from .eval import BenchmarkResult, comparison_table, plot_comparison

    labels = [lab for lab in ("untrained", "sft", "grpo") if f"eval_{lab}" in state.done]
    results = [BenchmarkResult.load(state.done[f"eval_{lab}"]["result"]["path"]) for lab in labels]
    table = comparison_table(results, level="domain")
    plot_comparison(results, level="domain", path=run_dir / "comparison.png", title="success on the dev suite")
    d = {k: v["result"] for k, v in state.done.items()}
    lines = [
        "# openmanus_lite demo",
        "",
        f"Model preset `{cfg.preset}`, {len(cfg.domains)} domains, {cfg.eval_per_domain} dev tasks per domain "
        f"per checkpoint, total {total_s / 60:.1f} min.",
        "",
        "## Data",
        f"Merged sample rows: {d['data']['merged_rows']} (report: `merge_report.txt`); six-domain rows used: "
        f"{d['data']['merged_train_six_domains']}; expert trajectories synthesized: {d['data']['synthesized']}.",
        "",
        "## Training",
        f"SFT: {d['sft']['steps']} steps in {d['sft']['train_s'] / 60:.1f} min ({d['sft']['tokens_per_s']} tokens/s), "
        f"final loss {_fmt(d['sft']['final_loss'])}. Curve: `sft_loss.png`.",
    ]
    if "grpo" in d:
        lines.append(f"GRPO (multi-turn, domains {', '.join(d['grpo']['domains'])}): {d['grpo']['steps']} steps, "
                     f"mean reward first {_fmt(d['grpo']['reward_first'])} -> last {_fmt(d['grpo']['reward_last'])}. "
                     "Curves: `grpo_rewards.png`.")
    lines += ["", "## Success on the dev suite (95% Wilson intervals)", "",
              "| checkpoint | success, all domains | invalid actions | evaluation time |", "|---|---|---|---|"]
    for lab, res in zip(labels, results):
        row = res.row()
        lines.append(f"| {lab} | {row.success_rate:.1%} [{row.ci_low:.1%}, {row.ci_high:.1%}] n={row.n} | "
                     f"{row.invalid_action_rate:.1%} | {state.done[f'eval_{lab}']['seconds'] / 60:.1f} min |")
    lines += ["", "```", str(table), "```", "", "Chart: `comparison.png`."]
    text = "\n".join(lines) + "\n"
    (run_dir / "report.md").write_text(text)
    return str(table)


def _fmt(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)


# --------------------------------------------------------------------------- driver


def run_demo(cfg: DemoConfig, run_dir: Path) -> Path:
    from .train.presets import get_preset

    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps(asdict(cfg), indent=1))
    state = RunState.load(run_dir)
    preset = get_preset(cfg.preset)
    t0 = time.perf_counter()
    data = _stage(state, "data", lambda: stage_data(cfg, run_dir))["result"]
    _stage(state, "eval_untrained", lambda: stage_eval(cfg, preset, run_dir, "untrained", model_path=cfg.model))
    sft = _stage(state, "sft", lambda: stage_sft(cfg, preset, run_dir, data["train_file"]))["result"]
    sft_eval = _stage(state, "eval_sft", lambda: stage_eval(cfg, preset, run_dir, "sft", model_path=sft["model"]))
    grpo = _stage(state, "grpo", lambda: stage_grpo(cfg, preset, run_dir, sft["model"], sft_eval["result"]))["result"]
    _stage(state, "eval_grpo", lambda: stage_eval(cfg, preset, run_dir, "grpo", model_path=grpo["model"]))
    table = stage_report(cfg, run_dir, state, time.perf_counter() - t0)
    print("\n" + table)
    print(f"\n[demo] report: {run_dir / 'report.md'}")
    return run_dir


def _latest_run() -> Path | None:
    runs = sorted(p for p in RUNS_DIR.glob("demo-*") if (p / "state.json").is_file()) if RUNS_DIR.is_dir() else []
    return runs[-1] if runs else None


def build_parser() -> argparse.ArgumentParser:
    from .cliargs import make_parser

    p = make_parser("openmanus_lite demo", __doc__.split("\n\n")[0] + " Options take --x_y or --x-y.", (
        "python -m openmanus_lite demo --quick --domains os,db --output_dir runs/demo-quick",
        "python -m openmanus_lite demo --resume",
    ))
    p.add_argument("--quick", action="store_true", help="the tiny test model and small settings (a few minutes)")
    p.add_argument("--model", default=None, help="a hub name or local checkpoint instead of the preset's model")
    p.add_argument("--preset", default=None, help="t4, gpu8, cpu or cpu_debug (default: cpu; cpu_debug with --quick)")
    p.add_argument("--output_dir", default=None, help="run folder (default: runs/demo-<timestamp>)")
    p.add_argument("--resume", action="store_true", help="continue the latest unfinished run in runs/")
    p.add_argument("--sft_minutes", type=float, default=None)
    p.add_argument("--grpo_minutes", type=float, default=None)
    p.add_argument("--eval_per_domain", type=int, default=None)
    p.add_argument("--domains", default=None, help="comma-separated subset of the six domains")
    return p


def main(argv: list[str] | None = None) -> int:
    from .cliargs import parse

    p = build_parser()
    args, _ = parse(p, argv)

    cfg = DemoConfig.quick() if args.quick else DemoConfig()
    for name, value in (("model", args.model), ("preset", args.preset), ("sft_minutes", args.sft_minutes),
                        ("grpo_minutes", args.grpo_minutes), ("eval_per_domain", args.eval_per_domain)):
        if value is not None:
            setattr(cfg, name, value)
    if args.domains:
        from .schema import DOMAINS

        wanted = tuple(d.strip() for d in args.domains.split(",") if d.strip())
        unknown = [d for d in wanted if d not in DOMAINS]
        if unknown:
            p.error(f"--domains: unknown {unknown}; choose from {list(DOMAINS)}")
        cfg.domains = wanted
    from .train.presets import PRESETS

    if cfg.preset not in PRESETS:
        p.error(f"--preset {cfg.preset!r}: choose one of {sorted(PRESETS)}")
    run_dir = Path(args.output_dir) if args.output_dir else (_latest_run() if args.resume else None)
    run_dir = run_dir or RUNS_DIR / time.strftime("demo-%Y%m%d-%H%M%S")
    free_gb = shutil.disk_usage(run_dir.parent if run_dir.parent.exists() else Path.cwd()).free / 1e9
    if free_gb < 2:
        print(f"error: only {free_gb:.1f} GB free on the disk of {run_dir}; the demo needs about 2 GB.",
              file=sys.stderr)
        return 1
    try:
        run_demo(cfg, run_dir)
    except ModuleNotFoundError as e:
        print(f"error: missing dependency {e.name!r}. Run `make demo` (it installs requirements.txt into .venv).",
              file=sys.stderr)
        return 1
    except OSError as e:
        if e.errno == errno.ENOSPC:
            print(f"error: the disk is full while writing {run_dir}. Free space and re-run the same command: "
                  "finished stages are kept.", file=sys.stderr)
            return 1
        raise
    return 0

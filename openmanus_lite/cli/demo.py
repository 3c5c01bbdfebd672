"""`python -m openmanus_lite demo`: the demo's options, and a run folder to start or continue (`openmanus_lite.demo`
runs the stages)."""

from __future__ import annotations

import argparse
import errno
import json
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

from openmanus_lite import demo
from openmanus_lite.cli import command
from openmanus_lite.cli.args import comma_list, make_parser, parse
from openmanus_lite.demo import GRPO_DOMAIN_RULES, DemoConfig, command_line, latest_run, run_demo
from openmanus_lite.errors import UserError
from openmanus_lite.paths import RUNS_DIR
from openmanus_lite.recipes import list_recipes
from openmanus_lite.schema import DOMAINS
from openmanus_lite.train.presets import PRESETS

SETTINGS = ("model", "preset", "recipe", "sft_minutes", "total_minutes", "grpo_minutes", "eval_minutes",
            "eval_per_domain", "eval_invalid_streak", "grpo_domains")
"""Options that change DemoConfig (with --quick and --domains)."""


def build_parser() -> argparse.ArgumentParser:
    d = DemoConfig()
    p = make_parser("openmanus_lite demo", demo.__doc__.split("\n\n")[0] + " Options take --x_y or --x-y.", (
        "python -m openmanus_lite demo                  # 45 minutes on the embedded default (make demo)",
        "python -m openmanus_lite demo --quick --domains os,db --output_dir runs/demo-quick",
        "python -m openmanus_lite demo --resume          # continue the latest unfinished run in runs/",
    ))
    p.add_argument("--quick", action="store_true", help="the tiny test model and small settings (a minute or so)")
    p.add_argument("--model", help="a hub name or local checkpoint instead of the preset's model")
    p.add_argument("--preset", help=f"t4, gpu8, cpu or cpu_debug (default: {d.preset}; cpu_debug with --quick)")
    p.add_argument("--recipe", help=f"the SFT recipe (openmanus_lite/recipes; default: {d.recipe})")
    p.add_argument("--output_dir", help="run folder (default: runs/demo-<timestamp>)")
    p.add_argument("--resume", action="store_true",
                   help="continue the latest unfinished run in runs/, with its settings")
    p.add_argument("--sft_minutes", type=float,
                   help="SFT time limit; given, it turns the budget off (default: its share of what the untrained "
                        "evaluation leaves of --total_minutes, at most the recipe's 30)")
    p.add_argument("--total_minutes", type=float, help="the demo's time budget, from which SFT's and GRPO's limits "
                   f"follow (default: {d.total_minutes:g})")
    p.add_argument("--grpo_minutes", type=float,
                   help=f"GRPO time limit (default: {d.grpo_minutes:g}, or its share of the budget)")
    p.add_argument("--eval_minutes", type=float, help="planned minutes of a trained checkpoint's evaluation, for the "
                   f"report (default: {d.eval_minutes:g}; not a limit)")
    p.add_argument("--eval_per_domain", type=int,
                   help=f"held-out dev tasks per domain per checkpoint (default: {d.eval_per_domain})")
    p.add_argument("--eval_invalid_streak", type=int, help="end an evaluation episode after this many invalid actions "
                   f"in a row (default: {d.eval_invalid_streak}; 0: only at the turn limit)")
    p.add_argument("--grpo_domains", choices=sorted(GRPO_DOMAIN_RULES),
                   help=f"where GRPO trains (default: {d.grpo_domains}: {GRPO_DOMAIN_RULES[d.grpo_domains]})")
    p.add_argument("--domains", help="comma-separated subset of the six domains")
    p.add_argument("--one_process", action="store_true",
                   help="run every stage in this process instead of a fresh process each: saves the seconds each "
                        "takes to import the training stack, and the later stages then peak 1-2 GB higher on what "
                        "the earlier ones left")
    p.add_argument("--overwrite_output_dir", action="store_true",
                   help="start over in --output_dir (its finished stages are removed). Without it, the same folder "
                        "resumes its run with the settings that started it, and other settings are refused")
    return p


@command
def main(argv: list[str]) -> int:
    p = build_parser()
    args, _ = parse(p, argv)
    given = {name: getattr(args, name) for name in SETTINGS if getattr(args, name) is not None}
    if given.get("eval_invalid_streak", 0) < 0:
        p.error(f"--eval_invalid_streak must be 0 (off) or more, got {given['eval_invalid_streak']}")
    if given.get("eval_invalid_streak") == 0:
        given["eval_invalid_streak"] = None
    if args.domains:
        given["domains"] = comma_list(args.domains)
        unknown = [d for d in given["domains"] if d not in DOMAINS]
        if unknown:
            p.error(f"--domains: unknown {unknown}; choose from {list(DOMAINS)}")
    cfg = replace(DemoConfig.quick() if args.quick else DemoConfig(), **given)
    run_dir = Path(args.output_dir) if args.output_dir else (latest_run() if args.resume else None)
    if args.resume and run_dir is None:
        print(f"[demo] --resume: no unfinished run in {RUNS_DIR}; starting a new one")
    run_dir = run_dir or RUNS_DIR / time.strftime("demo-%Y%m%d-%H%M%S")
    fresh = args.quick or given or args.overwrite_output_dir
    where = ""
    if not fresh and (run_dir / "config.json").is_file():
        where = f" (the settings of {run_dir})"
        if (run_dir / "state.json").is_file():  # a resume: the run's own settings
            try:
                cfg = DemoConfig.from_json(json.loads((run_dir / "config.json").read_text()))
            except (ValueError, TypeError) as e:
                raise UserError(f"{run_dir}/config.json: {e}; start a new run in another --output_dir.") from e
            print(f"[demo] continuing {run_dir} with its own settings (config.json)")
    if cfg.preset not in PRESETS:
        p.error(f"--preset {cfg.preset!r}{where}: choose one of {sorted(PRESETS)}")
    if cfg.recipe not in list_recipes():
        p.error(f"--recipe {cfg.recipe!r}{where}: choose one of {list_recipes()}")
    free_gb = shutil.disk_usage(run_dir.parent if run_dir.parent.exists() else Path.cwd()).free / 1e9
    if free_gb < 2:
        print(f"error: only {free_gb:.1f} GB free on the disk of {run_dir}; the demo needs about 2 GB.",
              file=sys.stderr)
        return 1
    from openmanus_lite.train.run_folder import LOCK_FILE, hold_output_dir

    hold_output_dir(run_dir, "demo")  # a second demo into the same folder is refused, naming this one
    if args.overwrite_output_dir and (run_dir / "state.json").is_file():  # only a demo's own folder is emptied
        for old in run_dir.iterdir():
            if old.name != LOCK_FILE:
                shutil.rmtree(old) if old.is_dir() else old.unlink()
    resume = command_line(["--output_dir", str(run_dir)])  # config.json holds the rest
    try:
        run_demo(cfg, run_dir, argv, fresh_processes=not args.one_process)
    except KeyboardInterrupt:
        print(f"\n[demo] interrupted; finished stages are kept. Resume with:\n  {resume}", file=sys.stderr)
        return 130
    except ModuleNotFoundError as e:
        print(f"error: missing dependency {e.name!r}. Run `make demo` (it installs requirements.txt into .venv).",
              file=sys.stderr)
        return 1
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
        print(f"error: the disk is full while writing {run_dir}. Free space and resume with `{resume}`: "
              "finished stages are kept.", file=sys.stderr)
        return 1
    return 0

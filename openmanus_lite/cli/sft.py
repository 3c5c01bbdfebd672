"""`python -m openmanus_lite sft --data ... --model ... --preset ...`: build the data, train, save.

Data comes from a merged dataset (`--data`, a JSONL/parquet file or a merge output folder) and/or expert
trajectories synthesized in the environments (`--synth N` per domain), with `--recovery K` episodes per
synthesized task in which the expert recovers from an injected mistake (train/recovery.py). `--recipe NAME`
(openmanus_lite/recipes) takes the data and settings of a measured run; any flag given overrides it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from openmanus_lite.cli import args as cli_args
from openmanus_lite.cli import command
from openmanus_lite.errors import UserError

RENAMED = {**cli_args.DEPRECATED, "no_resume": "overwrite_output_dir"}
SAVES = ("adapter", "merged", "gguf")

EXAMPLES = (
    "python -m openmanus_lite sft --recipe cpu_60min --output_dir runs/sft_60min",
    "python -m openmanus_lite sft --preset cpu_debug --synth 4 --domains os,db --max_steps 2 --output_dir runs/sft_try",
    "python -m openmanus_lite sft --config configs/examples/sft_quick.yaml --learning_rate 1e-4 --adam_beta2 0.9",
    "python -m openmanus_lite sft --data data/merged --preset t4 --push_to_hub --hub_model_id me/agent-sft",
)


def build_parser() -> argparse.ArgumentParser:
    from openmanus_lite.recipes import list_recipes
    from openmanus_lite.train.presets import PRESETS

    p = cli_args.make_parser("openmanus_lite sft", __doc__, EXAMPLES)
    p.add_argument("--recipe", choices=list_recipes(),
                   help="a measured recipe's data and settings (openmanus_lite/recipes); flags override it")
    p.add_argument("--preset", choices=sorted(PRESETS), help="hardware preset (default: the recipe's, else cpu)")
    p.add_argument("--model", "--model_name_or_path", dest="model",
                   help="hub name, local checkpoint, 'default' or 'tiny' (default: preset's)")
    p.add_argument("--data", help="merged dataset: .jsonl / .parquet file or merge output folder")
    p.add_argument("--split", default="train", help="split to read from a merge output folder (default: train)")
    p.add_argument("--synth", type=int,
                   help="expert trajectories to synthesize per domain (default: the recipe's tasks, else 0)")
    p.add_argument("--recovery", type=int, help="with --synth: episodes per task that recover from an "
                   "injected mistake (default: recipe's, else 0)")
    p.add_argument("--domains", help="comma-separated domains for --synth (default: all registered)")
    p.add_argument("--difficulty", choices=["easy", "medium", "hard"],
                   help="of every synthesized task (default: the recipe's levels, else easy)")
    p.add_argument("--synth_seed", type=int,
                   help="task seed for --synth (default: the split's, splits.SFT_TRAIN_SEED, plus the recipe's seed; "
                        "held-out tasks are left out)")
    p.add_argument("--mix", help="domain mix weights, e.g. os=1,db=1,household=2")
    p.add_argument("--total", type=int, help="records after mixing (default: all)")
    p.add_argument("--overflow", default="truncate", choices=["truncate", "drop"],
                   help="over-long conversations: cut at a turn boundary or drop (default: truncate)")
    p.add_argument("--save", default="adapter,merged",
                   help=f"what to save at the end: any of {', '.join(SAVES)} (default: adapter,merged)")
    p.add_argument("--no_progress", action="store_true", help="no progress bar (log lines instead)")
    cli_args.add_training_options(p, "SFTRunConfig", "the recipe's, else the preset's")
    return p


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    """(the kit's options, the rest for SFTConfig): see openmanus_lite/cli/args.py."""
    return cli_args.parse(build_parser(), argv, passthrough=True, config=True, deprecated=RENAMED)


def _parse_mix(text: str | None) -> dict[str, float] | None:
    from openmanus_lite.train.data import parse_domain_weights

    try:
        return parse_domain_weights(text) or None
    except ValueError as e:
        raise UserError(f"--mix: {e} (e.g. --mix os=1,db=2)") from None


def synth_recipe(args: argparse.Namespace):
    """The Recipe whose tasks this run synthesizes (--recipe's, or a plain one) with the --synth... flags on top;
    None when nothing is synthesized."""
    from openmanus_lite.recipes import Recipe, get_recipe
    from openmanus_lite.splits import get_split

    recipe = (get_recipe(args.recipe) if args.recipe else
              Recipe(name="cli", preset=args.preset or "cpu", about="sft command flags", tasks_per_domain=0))
    changes = {k: v for k, v in (("tasks_per_domain", args.synth), ("recovery", args.recovery),
                                 ("difficulty", args.difficulty)) if v is not None}
    if args.difficulty:
        changes["difficulty_weights"] = ()  # one level: the flag's
    if args.domains:
        changes["domains"] = cli_args.comma_list(args.domains)
    if args.synth_seed is not None:
        changes["seed"] = args.synth_seed - get_split(recipe.split).seed
    recipe = recipe.replace(**changes)
    return recipe if recipe.tasks_per_domain else None


def config_changes(args: argparse.Namespace, extras: list[str]) -> dict:
    """The SFTRunConfig settings the options change (an unknown field is a UserError naming close matches)."""
    from openmanus_lite.train.configs import SFTRunConfig

    changes = {**cli_args.run_settings(args, extras, SFTRunConfig, "sft"), "report_to": args.report_to}
    return {**changes, "disable_tqdm": True} if args.no_progress else changes


def settings(args: argparse.Namespace, extras: list[str]):
    """(preset, SFTRunConfig) for parsed options: the recipe's settings (or the preset's), then
    `config_changes`. A bad setting fails here, before data and model."""
    from openmanus_lite.recipes import get_recipe, recipe_preset
    from openmanus_lite.train.presets import get_preset

    changes = config_changes(args, extras)
    if args.recipe:
        recipe = get_recipe(args.recipe).on_preset(args.preset)  # other hardware: its model, LoRA and dtype
        return recipe_preset(recipe), recipe.sft_config(**changes)
    preset = get_preset(args.preset or "cpu")
    return preset, preset.sft_config(**changes)


@command
def main(argv: list[str]) -> int:
    args, extras = parse(argv)
    if args.recovery and not (args.synth or args.recipe):
        raise UserError("--recovery builds on the synthesized tasks: give --synth N (or --recipe NAME) too")
    if not (args.data or args.synth or args.recipe):
        raise UserError("give training data with --data PATH and/or --synth N (expert trajectories per domain) "
                        "or --recipe NAME")
    saves = set(cli_args.comma_list(args.save))
    if saves - set(SAVES):
        raise UserError(f"--save: unknown {sorted(saves - set(SAVES))}; choose from {', '.join(SAVES)}")
    with cli_args.user_input():  # settings, domains and the mix fail here, before data and model
        recipe = synth_recipe(args)
        if recipe is not None:
            recipe.task_counts()
        mix = _parse_mix(args.mix)
        preset, cfg = settings(args, extras)

    from openmanus_lite.recipes import recipe_trajectories
    from openmanus_lite.train.data import build_sft_dataset, load_trajectories, save_report
    from openmanus_lite.train.run_folder import claim_output_dir
    from openmanus_lite.train.sft import GGUFExportUnavailable, export_gguf, run_sft, save_adapter, save_merged

    cfg.resume = claim_output_dir(cfg.output_dir, "sft", resume=cfg.resume,
                                  overwrite=args.overwrite_output_dir) or False
    trajs = []
    if args.data:
        trajs += load_trajectories(args.data, split=args.split)
        if not trajs:
            raise UserError(f"--data {args.data}: no trajectories in it (an empty file?)")
        print(f"loaded {len(trajs)} trajectories from {args.data}")
    if recipe is not None:
        synth, info = recipe_trajectories(recipe)
        print(f"synthesized {info['expert']} expert trajectories ({info['removed_held_out']} tasks equal to held-out "
              f"ones left out)" + (f" and {info['recovery']} recovery trajectories ({info['recovery_counts']})"
                                    if recipe.recovery else ""))
        trajs += synth
    model, tok = preset.load(args.model)
    ds, report = build_sft_dataset(trajs, tok, max_length=cfg.max_length, overflow=args.overflow, domain_mix=mix,
                                   total=args.total, seed=cfg.seed, progress=True)
    print(f"data: {report.summary()}")
    out = Path(cfg.output_dir)
    save_report(report, out / "data_report.json")
    result = run_sft(model, tok, ds, cfg)
    losses = result.losses()
    print(f"trained {result.global_step} steps in {result.train_seconds / 60:.1f} min "
          f"({result.tokens_per_second:.0f} tokens/s); loss {losses[0]:.3f} -> {losses[-1]:.3f}" if losses else
          f"no new steps (already at step {result.global_step})")
    saved = {}
    if "adapter" in saves and preset.lora is not None:
        saved["adapter"] = str(save_adapter(result.model, tok, out / "adapter"))
    if "merged" in saves or ("adapter" in saves and preset.lora is None):
        saved["merged"] = str(save_merged(result.model, tok, out / "merged"))
    if "gguf" in saves:
        try:
            saved["gguf"] = str(export_gguf(result.model, tok, out / "gguf"))
        except GGUFExportUnavailable as e:
            print(f"GGUF export skipped: {e}", file=sys.stderr)
    cli_args.push_saved(args, saved)
    print(json.dumps({"saved": saved, "loss_history": str(out / "loss_history.json")}, indent=1))
    return 0

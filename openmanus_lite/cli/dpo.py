"""`python -m openmanus_lite dpo <pairs|train-dpo|train-rm|train-prm|eval-rm> ...`

    pairs      roll out, inject mistakes, label steps; write DPO / ORM / PRM data to a folder
    train-dpo  DPO from an SFT checkpoint on the step pairs of such a folder (alias: dpo)
    train-rm   an outcome reward model (RewardTrainer) on its trajectory pairs
    train-prm  a process reward model (token-classification head, Trainer) on its PRM rows
    eval-rm    a saved reward model's accuracy on a folder's pairs (and step labels for a PRM)

Each trainer subcommand also accepts `--tasks N --domains ...` instead of `--data DIR` to
build the data on the fly (expert and mistake episodes only, unless `--policy` is given).
Options follow TRL's spelling (`--x_y` or `--x-y`); the trainer subcommands read `--config run.yaml`,
and their training settings are the fields of their config, e.g. `--learning_rate 1e-5 --adam_beta2 0.95`:
TRL's DPOConfig (train-dpo) or RewardConfig (train-rm, train-prm) with the kit's few fields (train/configs.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from openmanus_lite.cli import args as cli_args
from openmanus_lite.cli import command
from openmanus_lite.errors import UserError

EXAMPLES = (
    "python -m openmanus_lite dpo pairs --domains household --tasks 4 --output_dir runs/pairs",
    "python -m openmanus_lite dpo train-dpo --data runs/pairs --model runs/sft_try/merged --max_steps 2 "
    "--output_dir runs/dpo --adam_beta2 0.95 --report_to tensorboard",
    "python -m openmanus_lite dpo train-rm --data runs/pairs --model runs/sft_try/merged --max_steps 2 --output_dir runs/orm",
)
TRAINERS = {"train-dpo": "DPORunConfig", "dpo": "DPORunConfig", "train-rm": "RewardRunConfig",
            "train-prm": "RewardRunConfig"}


def _data_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("data (a folder from `dpo pairs`, or built here)")
    g.add_argument("--data", help="folder written by `dpo pairs`")
    g.add_argument("--domains", nargs="+", default=["household", "ecommerce"], help="environment domains")
    g.add_argument("--tasks", type=int, default=20, help="tasks per domain when building data here")
    g.add_argument("--difficulty", default="easy")
    g.add_argument("--seed", type=int, default=0, help="of the tasks, the rollouts and training")
    g.add_argument("--policy",
                   help="model checkpoint to roll out (sampling), or 'random'; default: expert + mistakes only")
    g.add_argument("--samples", type=int, default=2, help="policy rollouts per task")
    g.add_argument("--mistakes", type=int, default=2, help="expert episodes with an injected mistake, per task")
    g.add_argument("--max_turns", type=int)
    g.add_argument("--temperature", type=float, default=0.8, help="sampling temperature of --policy")
    g.add_argument("--judge", choices=["step_value", "outcome"], default="step_value")
    g.add_argument("--prm_label", choices=["progress", "solvable"], default="progress")


def _parser() -> argparse.ArgumentParser:
    p = cli_args.make_parser("openmanus_lite dpo", __doc__, EXAMPLES)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name, examples, about in (
        ("pairs", EXAMPLES[:1], "build preference data from environment rollouts"),
        ("train-dpo", EXAMPLES[:2], "DPO from an SFT checkpoint"),
        ("train-rm", (EXAMPLES[0], EXAMPLES[2]), "outcome reward model"),
        ("train-prm", (EXAMPLES[0], EXAMPLES[2].replace("train-rm", "train-prm")), "process reward model"),
    ):
        t = sub.add_parser(name, help=about, aliases=["dpo"] * (name == "train-dpo"), **cli_args.style(examples))
        _data_args(t)
        t.add_argument("--output_dir", required=True, help="output folder (a trainer's own: <it>/trainer)")
        if name == "pairs":
            continue
        t.add_argument("--model", "--model_name_or_path", dest="model", default="default",
                       help="SFT checkpoint (full or LoRA adapter), or 'default'")
        t.add_argument("--max_seconds", type=float, help=argparse.SUPPRESS)  # deprecated: --max_minutes
        if name == "train-dpo":
            t.add_argument("--adapter_only", action="store_true", help="save the LoRA adapter, not a merged model")
        if name == "train-prm":
            t.add_argument("--aggregate", choices=["min", "mean", "prod", "last"], default="min")
        cli_args.add_training_options(t, TRAINERS[name], "train/presets.py's DPO or REWARD_MODEL; --lora_r R sets "
                                      "lora_alpha to 2R, --per_device_train_batch_size the eval batch too")
    e = sub.add_parser("eval-rm", help="accuracy of a saved reward model on a data folder",
                       **cli_args.style(("python -m openmanus_lite dpo eval-rm --rm runs/orm --data runs/pairs",)))
    e.add_argument("--rm", required=True, help="folder saved by train-rm / train-prm")
    e.add_argument("--data", required=True, help="folder written by `dpo pairs`")
    return p


def _data(args):
    from openmanus_lite.preference.pairs import PreferenceData, build_preference_data
    from openmanus_lite.splits import PREFERENCE_TRAIN_SEED, training_tasks

    if args.data:
        return PreferenceData.load(args.data)
    with cli_args.user_input():
        tasks, dropped = training_tasks("preference_train", args.domains, args.tasks,
                                        seed=PREFERENCE_TRAIN_SEED + args.seed, difficulty=args.difficulty)
    if not tasks:
        raise UserError(f"no training tasks left: all {dropped} generated tasks of {args.domains} equal held-out "
                        "tasks of the kit (splits.heldout_keys); use more --tasks or other --domains")
    policy = args.policy
    if policy and policy != "random":
        from openmanus_lite.policies import ModelPolicy

        policy = ModelPolicy(args.policy, temperature=args.temperature, seed=args.seed)
    return build_preference_data(tasks, policy=policy, samples_per_task=args.samples if policy else 0,
                                 mistakes_per_task=args.mistakes, judge=args.judge, prm_label=args.prm_label,
                                 max_turns=args.max_turns, seed=args.seed, progress=True)


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    """(the kit's options, the rest for the trainer's TRL config): see openmanus_lite/cli/args.py."""
    return cli_args.parse(_parser(), argv, passthrough=True, config=True)


def settings(args: argparse.Namespace, extras: list[str] = ()):
    """DPORunConfig (train-dpo) or RewardRunConfig (train-rm, train-prm) for parsed options: the presets'
    settings, then the fields of the config given on the command line, then the kit's flags."""
    from openmanus_lite.train import configs
    from openmanus_lite.train.presets import DPO, REWARD_MODEL

    cls = getattr(configs, TRAINERS[args.cmd])
    given = cli_args.run_settings(args, extras, cls, f"dpo {args.cmd}")
    if "per_device_train_batch_size" in given:
        given.setdefault("per_device_eval_batch_size", given["per_device_train_batch_size"])
    if "lora_r" in given:
        given.setdefault("lora_alpha", 2 * given["lora_r"])
    if args.max_seconds is not None:
        print("note: --max_seconds is deprecated and goes in the next release; use --max_minutes", file=sys.stderr)
        given.setdefault("max_minutes", args.max_seconds / 60)
    return cls(**{**(DPO if cls is configs.DPORunConfig else REWARD_MODEL), **given, "seed": args.seed,
                  "report_to": args.report_to, "output_dir": str(Path(args.output_dir) / "trainer")})


@command
def main(argv: list[str]) -> int:
    args, extras = parse(argv)
    if args.cmd not in TRAINERS and extras:
        raise UserError(f"unknown options for `dpo {args.cmd}`: {' '.join(extras)}")
    if args.cmd == "eval-rm":
        from openmanus_lite.preference import reward_model
        from openmanus_lite.preference.pairs import PreferenceData

        rm = reward_model.load_reward_model(args.rm)
        data = PreferenceData.load(args.data)
        report = {"trajectory_pairs": reward_model.pair_accuracy(rm, data.trajectory_pairs)}
        if isinstance(rm, reward_model.ProcessRewardModel) and data.prm:
            report["steps"] = reward_model.step_accuracy(rm, data.prm)
        print(json.dumps(report, indent=2))
        return 0
    dpo = TRAINERS.get(args.cmd) == "DPORunConfig"
    if args.cmd != "pairs":
        from openmanus_lite.train.run_folder import claim_output_dir

        with cli_args.user_input():
            s = settings(args, extras)
        # only DPO resumes; a reward model's rerun needs --overwrite_output_dir
        resume = claim_output_dir(args.output_dir, "dpo" if dpo else args.cmd, checkpoints=s.output_dir,
                                  resume="auto" if dpo else False, overwrite=args.overwrite_output_dir)
    data = _data(args)
    print(json.dumps(data.counts, indent=2), file=sys.stderr)
    if args.cmd == "pairs":
        print(data.save(args.output_dir))
        return 0
    out = Path(args.output_dir)
    rows, what = {"train-rm": (data.trajectory_pairs, "trajectory pairs"), "train-prm": (data.prm, "PRM rows")}.get(
        args.cmd, (data.step_pairs, "step pairs"))
    if not rows:
        print(f"error: no {what} to train on (see the counts above); add tasks, mistakes or rollouts", file=sys.stderr)
        return 1
    if dpo:
        from openmanus_lite.preference.dpo import run_dpo
        from openmanus_lite.train.sft import save_adapter, save_merged

        res = run_dpo(args.model, rows, s, output_dir=out / "trainer", resume=resume)
        # merged: a standalone checkpoint; adapter only: its base is the merged SFT checkpoint
        (save_adapter if args.adapter_only else save_merged)(res.model, res.tokenizer, out)
        summary = {**res.summary(), "settings": s.to_dict()}
        saved = {"adapter" if args.adapter_only else "merged": out}
    else:
        from openmanus_lite.preference.reward_model import train_orm, train_prm

        if args.cmd == "train-rm":
            rm, rep = train_orm(args.model, rows, s, output_dir=out / "trainer")
        else:
            rm, rep = train_prm(args.model, rows, s, aggregate=args.aggregate, output_dir=out / "trainer")
        rm.save(out)
        summary = rep.summary()
        saved = {"reward_model": out}
    (out / "train_summary.json").write_text(json.dumps(summary, indent=2, default=str))
    print(json.dumps(summary, indent=2, default=str))
    cli_args.push_saved(args, saved)
    print(out)
    return 0

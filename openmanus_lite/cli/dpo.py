"""`python -m openmanus_lite dpo <pairs|train-dpo|train-rm|train-prm|eval-rm> ...`

    pairs      roll out, inject mistakes, label steps; write DPO / ORM / PRM data to a folder
    train-dpo  DPO from an SFT checkpoint on the step pairs of such a folder (alias: dpo)
    train-rm   an outcome reward model (RewardTrainer) on its trajectory pairs
    train-prm  a process reward model (token-classification head, Trainer) on its PRM rows
    eval-rm    a saved reward model's accuracy on a folder's pairs (and step labels for a PRM)

Each trainer subcommand also accepts `--tasks N --domains ...` instead of `--data DIR` to
build the data on the fly (expert and mistake episodes only, unless `--policy` is given).
Options follow TRL's spelling (`--x_y` or `--x-y`); the trainer subcommands read `--config run.yaml`
and pass any other field of their config through, e.g. `--adam_beta2 0.95`: TRL's DPOConfig
(train-dpo) or RewardConfig (train-rm, train-prm) with the kit's few fields (train/configs.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from openmanus_lite.cli.args import (
    add_rerun_args,
    add_tracking_args,
    check_tracking_args,
    make_parser,
    push_saved,
    trainer_overrides,
)
from openmanus_lite.cli.args import parse as parse_args
from openmanus_lite.hub import HubPushError

EXAMPLES = (
    "python -m openmanus_lite dpo pairs --domains household --tasks 4 --output_dir runs/pairs",
    "python -m openmanus_lite dpo train-dpo --data runs/pairs --model runs/sft_try/merged --max_steps 2 "
    "--output_dir runs/dpo --adam_beta2 0.95 --report_to tensorboard",
    "python -m openmanus_lite dpo train-rm --data runs/pairs --model runs/sft_try/merged --max_steps 2 --output_dir runs/orm",
)


def _data_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("data (a folder from `dpo pairs`, or built here)")
    g.add_argument("--data", default=None, help="folder written by `dpo pairs`")
    g.add_argument("--domains", nargs="+", default=["household", "ecommerce"], help="environment domains")
    g.add_argument("--tasks", type=int, default=20, help="tasks per domain when building data here")
    g.add_argument("--difficulty", default="easy")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--policy", default=None,
                   help="model checkpoint to roll out (sampling), or 'random'; default: expert + mistakes only")
    g.add_argument("--samples", type=int, default=2, help="policy rollouts per task")
    g.add_argument("--mistakes", type=int, default=2, help="expert episodes with an injected mistake, per task")
    g.add_argument("--max_turns", type=int, default=None)
    g.add_argument("--temperature", type=float, default=0.8, help="sampling temperature of --policy")
    g.add_argument("--judge", choices=["step_value", "outcome"], default="step_value")
    g.add_argument("--prm_label", choices=["progress", "solvable"], default="progress")


def _train_args(p: argparse.ArgumentParser, lr: float) -> None:
    g = p.add_argument_group("training")
    g.add_argument("--config", default=None, help="YAML file of option: value (the command line wins)")
    g.add_argument("--model", "--model_name_or_path", dest="model", default="default",
                   help="SFT checkpoint (full or LoRA adapter), or 'default'")
    g.add_argument("--output_dir", required=True, help="output folder")
    g.add_argument("--max_steps", type=int, default=-1, help="max optimizer steps (-1: one epoch)")
    g.add_argument("--num_train_epochs", type=float, default=1.0)
    g.add_argument("--max_minutes", type=float, default=None, help="stop training after this many minutes")
    g.add_argument("--max_seconds", type=float, default=None, help=argparse.SUPPRESS)  # deprecated: --max_minutes
    g.add_argument("--per_device_train_batch_size", type=int, default=4)
    g.add_argument("--gradient_accumulation_steps", type=int, default=1)
    g.add_argument("--learning_rate", type=float, default=lr)
    g.add_argument("--max_length", type=int, default=1024)
    g.add_argument("--lora_r", type=int, default=16, help="LoRA rank (0: train every weight)")
    add_rerun_args(g)
    add_tracking_args(p)


def _parser() -> argparse.ArgumentParser:
    p = make_parser("openmanus_lite dpo", __doc__, EXAMPLES)
    sub = p.add_subparsers(dest="cmd", required=True)

    def add(name, examples, **kw):
        return sub.add_parser(name, allow_abbrev=False, formatter_class=argparse.RawDescriptionHelpFormatter,
                              epilog="examples:\n" + "\n".join(f"  {e}" for e in examples), **kw)

    pairs = add("pairs", EXAMPLES[:1], help="build preference data from environment rollouts")
    _data_args(pairs)
    pairs.add_argument("--output_dir", required=True, help="output folder")
    d = add("train-dpo", EXAMPLES[:2], aliases=["dpo"], help="DPO from an SFT checkpoint")
    _data_args(d)
    _train_args(d, 2e-5)
    d.add_argument("--beta", type=float, default=0.1)
    d.add_argument("--loss_type", default="sigmoid")
    d.add_argument("--adapter_only", action="store_true", help="save the LoRA adapter instead of a merged model")
    for name, helptext in (("train-rm", "outcome reward model"), ("train-prm", "process reward model")):
        r = add(name, (EXAMPLES[0], EXAMPLES[2].replace("train-rm", name)), help=helptext)
        _data_args(r)
        _train_args(r, 1e-4)
        if name == "train-prm":
            r.add_argument("--aggregate", choices=["min", "mean", "prod", "last"], default="min")
    e = add("eval-rm", ("python -m openmanus_lite dpo eval-rm --rm runs/orm --data runs/pairs",),
            help="accuracy of a saved reward model on a data folder")
    e.add_argument("--rm", required=True, help="folder saved by train-rm / train-prm")
    e.add_argument("--data", required=True, help="folder written by `dpo pairs`")
    return p


def _data(args):
    from openmanus_lite.splits import PREFERENCE_TRAIN_SEED, training_tasks
    from openmanus_lite.train.preferences import PreferenceData, build_preference_data

    if args.data:
        return PreferenceData.load(args.data)
    tasks, dropped = training_tasks("preference_train", args.domains, args.tasks,
                                    seed=PREFERENCE_TRAIN_SEED + args.seed, difficulty=args.difficulty)
    if not tasks:
        raise ValueError(f"no training tasks left: all {dropped} generated tasks of {args.domains} equal held-out "
                         "tasks of the kit (splits.heldout_keys); use more --tasks or other --domains")
    policy = None
    if args.policy == "random":
        policy = "random"
    elif args.policy:
        from openmanus_lite.policies import ModelPolicy

        policy = ModelPolicy(args.policy, temperature=args.temperature, seed=args.seed)
    return build_preference_data(tasks, policy=policy, samples_per_task=args.samples if policy else 0,
                                 mistakes_per_task=args.mistakes, judge=args.judge, prm_label=args.prm_label,
                                 max_turns=args.max_turns, seed=args.seed, progress=True)


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    """(the kit's options, the rest for the trainer's TRL config): see openmanus_lite/cli/args.py."""
    return parse_args(_parser(), argv, passthrough=True, config=True)


def settings(args: argparse.Namespace, extras: list[str] = ()):
    """DPORunConfig (train-dpo) or RewardRunConfig (train-rm, train-prm) for parsed options: the presets'
    defaults, then any other field of the TRL config given on the command line, then the flags."""
    from openmanus_lite.train.configs import DPORunConfig, RewardRunConfig
    from openmanus_lite.train.presets import DPO, REWARD_MODEL

    dpo = args.cmd in ("train-dpo", "dpo")
    cls, base = (DPORunConfig, DPO) if dpo else (RewardRunConfig, REWARD_MODEL)
    minutes = args.max_minutes
    if args.max_seconds is not None:
        print("note: --max_seconds is deprecated and goes in the next release; use --max_minutes", file=sys.stderr)
        minutes = args.max_seconds / 60
    flags = dict(learning_rate=args.learning_rate, max_steps=args.max_steps, num_train_epochs=args.num_train_epochs,
                 per_device_train_batch_size=args.per_device_train_batch_size,
                 per_device_eval_batch_size=args.per_device_train_batch_size,
                 gradient_accumulation_steps=args.gradient_accumulation_steps, max_length=args.max_length,
                 lora_r=args.lora_r, lora_alpha=2 * args.lora_r, seed=args.seed, max_minutes=minutes,
                 report_to=args.report_to, output_dir=str(Path(args.output_dir) / "trainer"))
    if dpo:
        flags.update(beta=args.beta, loss_type=[args.loss_type])
    return cls(**{**base, **trainer_overrides(extras, cls, command=f"dpo {args.cmd}"), **flags})


def main(argv: list[str] | None = None) -> int:
    args, extras = parse(argv)
    if args.cmd in ("pairs", "eval-rm") and extras:
        print(f"error: unknown options for `dpo {args.cmd}`: {' '.join(extras)}", file=sys.stderr)
        return 2
    if args.cmd == "eval-rm":
        from openmanus_lite.train.preferences import PreferenceData
        from openmanus_lite.train.reward_model import (
            ProcessRewardModel,
            load_reward_model,
            pair_accuracy,
            step_accuracy,
        )

        rm = load_reward_model(args.rm)
        data = PreferenceData.load(args.data)
        report = {"trajectory_pairs": pair_accuracy(rm, data.trajectory_pairs)}
        if isinstance(rm, ProcessRewardModel) and data.prm:
            report["steps"] = step_accuracy(rm, data.prm)
        print(json.dumps(report, indent=2))
        return 0
    s = None
    if args.cmd != "pairs":
        try:
            check_tracking_args(args)
            s = settings(args, extras)
            from openmanus_lite.train.run_folder import claim_output_dir

            dpo = args.cmd in ("train-dpo", "dpo")  # only DPO resumes; a reward model's rerun needs the overwrite
            resume = claim_output_dir(args.output_dir, "dpo" if dpo else args.cmd, checkpoints=s.output_dir,
                                      resume="auto" if dpo else False, overwrite=args.overwrite_output_dir)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    try:
        data = _data(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(data.counts, indent=2), file=sys.stderr)
    if args.cmd == "pairs":
        print(data.save(args.output_dir))
        return 0
    out = Path(args.output_dir)
    if args.cmd in ("train-dpo", "dpo"):
        from openmanus_lite.train.dpo import run_dpo
        from openmanus_lite.train.sft import save_adapter, save_merged

        if not data.step_pairs:
            print("error: no step pairs to train on (see the counts above); add tasks, mistakes or rollouts",
                  file=sys.stderr)
            return 1
        res = run_dpo(args.model, data.step_pairs, s, output_dir=out / "trainer", resume=resume)
        # merged: a standalone checkpoint; adapter only: its base is the merged SFT checkpoint
        (save_adapter if args.adapter_only else save_merged)(res.model, res.tokenizer, out)
        summary = {**res.summary(), "settings": s.to_dict()}
        saved = {"adapter" if args.adapter_only else "merged": out}
    else:
        from openmanus_lite.train.reward_model import train_orm, train_prm

        if args.cmd == "train-rm":
            if not data.trajectory_pairs:
                print("error: no trajectory pairs to train on (see the counts above)", file=sys.stderr)
                return 1
            rm, rep = train_orm(args.model, data.trajectory_pairs, s, output_dir=out / "trainer")
        else:
            rm, rep = train_prm(args.model, data.prm, s, aggregate=args.aggregate, output_dir=out / "trainer")
        rm.save(out)
        summary = rep.summary()
        saved = {"reward_model": out}
    (out / "train_summary.json").write_text(json.dumps(summary, indent=2, default=str))
    print(json.dumps(summary, indent=2, default=str))
    try:
        pushed = push_saved(args, saved)
    except HubPushError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if pushed:
        print(f"pushed: {json.dumps(pushed)}")
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

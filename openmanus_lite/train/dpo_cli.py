"""`python -m openmanus_lite dpo <pairs|train-dpo|train-rm|train-prm|eval-rm> ...`

    pairs      roll out, inject mistakes, label steps; write DPO / ORM / PRM data to a folder
    train-dpo  DPO from an SFT checkpoint on the step pairs of such a folder (alias: dpo)
    train-rm   an outcome reward model (RewardTrainer) on its trajectory pairs
    train-prm  a process reward model (token-classification head, Trainer) on its PRM rows
    eval-rm    a saved reward model's accuracy on a folder's pairs (and step labels for a PRM)

Each trainer subcommand also accepts `--tasks N --domains ...` instead of `--data DIR` to
build the data on the fly (expert and mistake episodes only, unless `--policy` is given).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from ..models import LoraSpec


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
    g.add_argument("--max-turns", type=int, default=None)
    g.add_argument("--temperature", type=float, default=0.8, help="sampling temperature of --policy")
    g.add_argument("--judge", choices=["step_value", "outcome"], default="step_value")
    g.add_argument("--prm-label", choices=["progress", "solvable"], default="progress")


def _train_args(p: argparse.ArgumentParser, lr: float) -> None:
    g = p.add_argument_group("training")
    g.add_argument("--model", default="default", help="SFT checkpoint (full or LoRA adapter), or 'default'")
    g.add_argument("--out", required=True, help="output folder")
    g.add_argument("--steps", type=int, default=-1, help="max optimizer steps (-1: one epoch)")
    g.add_argument("--epochs", type=float, default=1.0)
    g.add_argument("--max-seconds", type=float, default=None, help="stop training after this many seconds")
    g.add_argument("--batch-size", type=int, default=4)
    g.add_argument("--grad-accum", type=int, default=1)
    g.add_argument("--lr", type=float, default=lr)
    g.add_argument("--max-length", type=int, default=1024)
    g.add_argument("--lora-r", type=int, default=16, help="LoRA rank (0: train every weight)")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="openmanus_lite dpo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    pairs = sub.add_parser("pairs", help="build preference data from environment rollouts")
    _data_args(pairs)
    pairs.add_argument("--out", required=True, help="output folder")
    d = sub.add_parser("train-dpo", aliases=["dpo"], help="DPO from an SFT checkpoint")
    _data_args(d)
    _train_args(d, 2e-5)
    d.add_argument("--beta", type=float, default=0.1)
    d.add_argument("--loss-type", default="sigmoid")
    d.add_argument("--adapter-only", action="store_true", help="save the LoRA adapter instead of a merged model")
    for name, helptext in (("train-rm", "outcome reward model"), ("train-prm", "process reward model")):
        r = sub.add_parser(name, help=helptext)
        _data_args(r)
        _train_args(r, 1e-4)
        if name == "train-prm":
            r.add_argument("--aggregate", choices=["min", "mean", "prod", "last"], default="min")
    e = sub.add_parser("eval-rm", help="accuracy of a saved reward model on a data folder")
    e.add_argument("--rm", required=True, help="folder saved by train-rm / train-prm")
    e.add_argument("--data", required=True, help="folder written by `dpo pairs`")
    return p


def _data(args):
    from ..splits import PREFERENCE_TRAIN_SEED, training_tasks
    from .preferences import PreferenceData, build_preference_data

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
        from ..policies import ModelPolicy

        policy = ModelPolicy(args.policy, temperature=args.temperature, seed=args.seed)
    return build_preference_data(tasks, policy=policy, samples_per_task=args.samples if policy else 0,
                                 mistakes_per_task=args.mistakes, judge=args.judge, prm_label=args.prm_label,
                                 max_turns=args.max_turns, seed=args.seed, progress=True)


def _lora(args) -> LoraSpec | None:
    return LoraSpec(r=args.lora_r, alpha=2 * args.lora_r) if args.lora_r > 0 else None


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.cmd == "eval-rm":
        from .preferences import PreferenceData
        from .reward_model import ProcessRewardModel, load_reward_model, pair_accuracy, step_accuracy

        rm = load_reward_model(args.rm)
        data = PreferenceData.load(args.data)
        report = {"trajectory_pairs": pair_accuracy(rm, data.trajectory_pairs)}
        if isinstance(rm, ProcessRewardModel) and data.prm:
            report["steps"] = step_accuracy(rm, data.prm)
        print(json.dumps(report, indent=2))
        return 0
    try:
        data = _data(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(data.counts, indent=2), file=sys.stderr)
    if args.cmd == "pairs":
        print(data.save(args.out))
        return 0
    out = Path(args.out)
    if args.cmd in ("train-dpo", "dpo"):
        from .dpo import DPOSettings, run_dpo, save_policy

        if not data.step_pairs:
            print("error: no step pairs to train on (see the counts above); add tasks, mistakes or rollouts",
                  file=sys.stderr)
            return 1
        lora = _lora(args)
        if lora is None:
            print("error: DPO here trains a LoRA adapter (its reference is the adapter-free SFT model); "
                  "use --lora-r > 0", file=sys.stderr)
            return 2
        s = DPOSettings(beta=args.beta, loss_type=args.loss_type, learning_rate=args.lr, max_steps=args.steps,
                        epochs=args.epochs, batch_size=args.batch_size, grad_accum=args.grad_accum,
                        max_length=args.max_length, lora=lora, seed=args.seed, max_seconds=args.max_seconds)
        res = run_dpo(args.model, data.step_pairs, s, output_dir=out / "trainer")
        save_policy(res.model, res.tokenizer, out, merged=not args.adapter_only)
        summary = {**res.summary(), "settings": {k: v for k, v in asdict(s).items() if k != "lora"}}
    else:
        from .reward_model import RMSettings, train_orm, train_prm

        s = RMSettings(learning_rate=args.lr, max_steps=args.steps, epochs=args.epochs, batch_size=args.batch_size,
                       grad_accum=args.grad_accum, max_length=args.max_length, lora=_lora(args), seed=args.seed,
                       max_seconds=args.max_seconds)
        if args.cmd == "train-rm":
            if not data.trajectory_pairs:
                print("error: no trajectory pairs to train on (see the counts above)", file=sys.stderr)
                return 1
            rm, rep = train_orm(args.model, data.trajectory_pairs, s, output_dir=out / "trainer")
        else:
            rm, rep = train_prm(args.model, data.prm, s, aggregate=args.aggregate, output_dir=out / "trainer")
        rm.save(out)
        summary = rep.summary()
    (out / "train_summary.json").write_text(json.dumps(summary, indent=2, default=str))
    print(json.dumps(summary, indent=2, default=str))
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""`python -m openmanus_lite export`: environment tasks and trajectories as verl parquet files (`verl_export`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from openmanus_lite.cli import command
from openmanus_lite.cli.args import comma_list, make_parser, parse
from openmanus_lite.data.merge import read_jsonl
from openmanus_lite.envs import generate_tasks
from openmanus_lite.splits import GRPO_TRAIN_SEED, VERL_TEST_SEED, check_disjoint, training_tasks
from openmanus_lite.verl_export import export_tasks, export_trajectories

MAX_N = 100_000
"""The most tasks per domain and split one export makes."""


def build_parser() -> argparse.ArgumentParser:
    p = make_parser("openmanus_lite export", "Export data and tasks for verl (options take --x_y or --x-y).", (
        "python -m openmanus_lite export --tasks db,kg --n 100 --output_dir runs/verl",
        "python -m openmanus_lite export --trajectories synth_os.jsonl --layout rl --output_dir runs/verl",
    ))
    p.add_argument("--output_dir", required=True, help="output folder")
    p.add_argument("--tasks", default="", help="comma-separated domains to generate tasks for")
    p.add_argument("--n", type=int, default=100, help=f"tasks per domain and split, 1 to {MAX_N:,} (default: 100)")
    p.add_argument("--difficulty", default="easy")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--trajectories", help="a Trajectory JSONL file (e.g. from merge or synth)")
    p.add_argument("--layout", choices=("sft", "rl"), default="sft", help="layout for --trajectories")
    return p


@command
def main(argv: list[str]) -> int:
    p = build_parser()
    args, _ = parse(p, argv)
    out = Path(args.output_dir)
    if not args.tasks and not args.trajectories:
        p.error("give --tasks and/or --trajectories")
    if not 1 <= args.n <= MAX_N:
        p.error(f"--n must be 1 to {MAX_N:,}")
    if args.tasks:
        domains = comma_list(args.tasks)
        test = [t for d in domains for t in generate_tasks(d, args.n, VERL_TEST_SEED + args.seed, args.difficulty)]
        train, _ = training_tasks("grpo_train", domains, args.n, seed=GRPO_TRAIN_SEED + args.seed,
                                  difficulty=args.difficulty, exclude=test)
        check_disjoint({"train": train}, {"test": test})
        for split, tasks in (("train", train), ("test", test)):
            print(export_tasks(tasks, out / f"{split}.parquet", split), f"({len(tasks)} tasks)")
    if args.trajectories:
        trajs = read_jsonl(args.trajectories)  # a bad line is an error naming file and line
        path, skipped = export_trajectories(trajs, out / f"{args.layout}.parquet", layout=args.layout)
        print(path, f"({len(trajs) - skipped} rows, {skipped} skipped: no final answer)")
    return 0

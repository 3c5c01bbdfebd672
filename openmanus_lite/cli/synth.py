"""`python -m openmanus_lite synth`: expert trajectories from the in-process environments, as JSONL.

    python -m openmanus_lite synth --domain os --n 100 --seed 0 --difficulty easy --output_file synth_os.jsonl
    python -m openmanus_lite synth --domain all --difficulty all --n 20 --output_file synth_all.jsonl

Each line is a unified `Trajectory` (source "synth") with the episode outcome in `meta`
(`success`, `score`, `task_id`, `difficulty`), ready for SFT.
"""

from __future__ import annotations

import argparse
import itertools
import os
from pathlib import Path

from openmanus_lite.cli import command
from openmanus_lite.cli.args import make_parser, parse
from openmanus_lite.envs.base import DIFFICULTIES, list_domains, synthesize_trajectories
from openmanus_lite.errors import UserError

MAX_N = 100_000  # trajectories per domain and difficulty in one run (more: several runs with other --seed)


def build_parser() -> argparse.ArgumentParser:
    p = make_parser("python -m openmanus_lite synth", __doc__.split("\n\n")[0] + " Options take --x_y or --x-y.",
                    [line.strip() for line in __doc__.split("\n\n")[1].splitlines()])
    p.add_argument("--domain", default="all", help="an environment domain, or 'all' (default: all)")
    p.add_argument("--n", type=int, default=100,
                   help=f"trajectories per domain and difficulty, 1 to {MAX_N:,} (default: 100)")
    p.add_argument("--seed", type=int, default=0, help="task-generation seed (default: 0)")
    p.add_argument("--difficulty", default="easy", help=f"one of {', '.join(DIFFICULTIES)}, or 'all' (default: easy)")
    p.add_argument("--output_file", required=True, help="output JSONL file (replaced when the run completes)")
    p.add_argument("--only_success", action="store_true", help="drop episodes the expert did not solve")
    return p


@command
def main(argv: list[str]) -> int:
    args, _ = parse(build_parser(), argv, deprecated={"out": "output_file"})
    available = list_domains()
    domains = available if args.domain == "all" else [args.domain]
    difficulties = list(DIFFICULTIES) if args.difficulty == "all" else [args.difficulty]
    if args.domain not in available + ["all"]:
        raise UserError(f"unknown domain {args.domain!r}; available: {', '.join(available)} (or 'all')")
    if args.difficulty not in (*DIFFICULTIES, "all"):
        raise UserError(f"unknown difficulty {args.difficulty!r}; use one of {', '.join(DIFFICULTIES)} or 'all'")
    if not 1 <= args.n <= MAX_N:
        raise UserError(f"--n must be 1 to {MAX_N:,} (more: several runs with another --seed)")
    out = Path(args.output_file)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.name}.partial")  # the old file stays whole until this one is
    written = dropped = 0
    try:
        with partial.open("w", encoding="utf-8") as f:
            for domain, difficulty in itertools.product(domains, difficulties):
                trajs = synthesize_trajectories(domain, args.n, seed=args.seed, difficulty=difficulty)
                solved = [bool(t.meta.get("success")) for t in trajs]
                kept = [t for t, ok in zip(trajs, solved) if ok or not args.only_success]
                f.writelines(t.validate().to_json() + "\n" for t in kept)
                written, dropped = written + len(kept), dropped + len(trajs) - len(kept)
                print(f"{domain:<10} {difficulty:<7} {len(kept):>6} trajectories, expert solved {sum(solved)}/{args.n}")
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    os.replace(partial, out)
    print(f"wrote {written} trajectories to {out}" + (f" ({dropped} unsolved dropped)" if dropped else ""))
    return 0

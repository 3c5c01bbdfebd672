"""`python -m openmanus_lite eval ...`: evaluate policies on frozen suites, compare runs, freeze suites.

    eval --model expert --model random --model PATH --suite dev --domains db,kg --limit 10
    eval --model random --suite dev --strategy mcts --budget_calls 40   (test-time search)
    eval compare runs/eval/a.json runs/eval/b.json --plot cmp.png   (with the paired sign test)
    eval verify                              (check the frozen suites' checksums)
    eval freeze --output_dir DIR [--force]   (write new frozen suites; never needed for evaluation)

Options take `--x_y` or `--x-y`; `--out` and `--batch-size` are the old names of `--output_dir`
and `--per_device_eval_batch_size`.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from openmanus_lite import eval as ev
from openmanus_lite.cli import command
from openmanus_lite.cli.args import DEPRECATED, comma_list, make_parser, user_input
from openmanus_lite.cli.args import parse as parse_args
from openmanus_lite.envs.base import parse_turn_limits
from openmanus_lite.errors import UserError
from openmanus_lite.eval import make_policy
from openmanus_lite.eval.plots import file_pyplot
from openmanus_lite.eval.suites import TASKS_PER_CELL, TURN_TOKENS
from openmanus_lite.search import Budget

RENAMED = {**DEPRECATED, "batch_size": "per_device_eval_batch_size"}
"""Old spellings: here the batch is of episodes evaluated together, TrainingArguments' eval batch."""

COMPARE_EXAMPLE = "python -m openmanus_lite eval compare runs/eval/expert_dev.json runs/eval/random_dev.json"

COUNTS = ("limit", "per_device_eval_batch_size", "max_new_tokens", "budget_calls", "budget_tokens")
"""Options that count something and must be at least 1 when given."""


def _turn_limits(text: str):
    try:
        return parse_turn_limits(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    return parse_args(parser, argv, deprecated=RENAMED)[0]


def build_parser() -> argparse.ArgumentParser:
    """The parser of `eval` itself (the subcommands build their own)."""
    p = make_parser("python -m openmanus_lite eval", __doc__, (
        "python -m openmanus_lite eval --model expert --model random --suite dev --limit 1 --output_dir runs/eval",
        COMPARE_EXAMPLE,
        "python -m openmanus_lite eval verify",
    ))
    p.add_argument("--model", action="append", required=True,
                   help="expert | random | default | latest:sft | checkpoint path or hub name; repeat to compare")
    p.add_argument("--suite", default="dev",
                   help="frozen suite: dev, test, agentbench_db or agentbench_os (default dev)")
    p.add_argument("--domains", help="comma-separated subset, e.g. db,kg")
    p.add_argument("--difficulties", help="comma-separated subset of easy,medium,hard")
    p.add_argument("--limit", type=int, help="at most this many tasks per domain x difficulty")
    p.add_argument("--max_turns", type=_turn_limits, help="turn limits: N, domain=N,..., 'easy' or 'medium' (the "
                   "recipes' limits, which their training prompts state); default: each environment's own")
    p.add_argument("--per_device_eval_batch_size", type=int, default=32, help="episodes per batched policy call")
    p.add_argument("--max_new_tokens", type=int, help="tokens per turn (at most the model's context; default 96, "
                   "or what the suite needs: 256 for agentbench_db)")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--strategy", choices=["best_of_n", "beam", "mcts", "dfsdt"], help="run test-time search")
    p.add_argument("--budget_calls", type=int, help="search budget in generated turns per task")
    p.add_argument("--budget_tokens", type=int, help="search budget in generated tokens per task")
    p.add_argument("--oracle", action="store_true", help="select by the true score: oracle pass@k, an upper bound")
    p.add_argument("--output_dir", default="runs/eval", help="folder for JSON/CSV results and the plot")
    p.add_argument("--no_progress", action="store_true")
    return p


def _run(argv: list[str]) -> int:
    a = parse(build_parser(), argv)
    for name in COUNTS:
        if getattr(a, name) is not None and getattr(a, name) < 1:
            raise UserError(f"--{name} must be at least 1, got {getattr(a, name)}")
    if a.strategy and not (a.budget_calls or a.budget_tokens):
        raise UserError("--strategy needs --budget_calls or --budget_tokens")
    suite = ev.load_suite(a.suite, domains=comma_list(a.domains) or None,
                          difficulties=comma_list(a.difficulties) or None, limit=a.limit)
    search = {"search": a.strategy, "budget": Budget(tokens=a.budget_tokens, calls=a.budget_calls),
              "search_options": {"oracle": a.oracle}} if a.strategy else {}
    out = Path(a.output_dir)
    results = []
    for spec in a.model:
        policy = make_policy(spec, max_new_tokens=a.max_new_tokens or TURN_TOKENS.get(suite.name, 96),
                             temperature=a.temperature, batch_size=a.per_device_eval_batch_size, seed=a.seed)
        res = ev.run_benchmark(policy, suite, max_turns=a.max_turns, batch_size=a.per_device_eval_batch_size,
                               progress=not a.no_progress, seed=a.seed, meta={"model": spec},
                               label=f"{a.strategy}:{spec}" if a.strategy else spec, **search)
        stem = out / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', res.label).strip('_') or 'policy'}_{suite.name}"
        res.save(stem.with_suffix(".json"))
        res.save(stem.with_suffix(".csv"))
        results.append(res)
        print(f"\n== {res.label} on {suite.name} ({len(res.records)} tasks, {res.wall_s:.1f}s) -> {stem}.json")
        cols = ["domain", "difficulty", "n", "success_rate", "ci_low", "ci_high", "mean_score", "mean_turns",
                "invalid_action_rate", "tokens_per_episode"]
        print(res.table()[cols].to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    if len(results) > 1:
        print("\n== comparison (success rate, 95% Wilson CI)")
        print_comparison(results, "domain", out / f"comparison_{suite.name}.png")
    return 0


def print_comparison(results, level: str, plot: str | Path | None) -> None:
    """Rates side by side; against the first result the tasks that flipped and the paired exact sign test on
    them (per domain and overall, eval.compare.sign_tests); a grouped bar chart at `plot`."""
    print(ev.comparison_table(results, level=level).to_string())
    first = results[0]
    for other in results[1:]:
        flips = ev.flipped_tasks(first, other)
        print(f"\n{len(flips)} tasks changed between {first.label} and {other.label}")
        if len(flips):
            print(flips.to_string(index=False))
        print(f"\n== paired sign test, {other.label} vs {first.label} (tasks that changed outcome; two-sided exact p)")
        print(ev.sign_tests(first, other).to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    if plot:
        file_pyplot()
        ev.plot_comparison(results, level=level, path=plot)
        print(f"plot: {plot}")


def _compare(argv: list[str]) -> int:
    p = make_parser("python -m openmanus_lite eval compare", "Rates side by side, the tasks that flipped, and the "
                    "paired exact sign test on them (per domain and overall).",
                    (COMPARE_EXAMPLE, f"{COMPARE_EXAMPLE} --level overall --plot runs/eval/cmp.png"))
    p.add_argument("results", nargs="+", help="result files (.json or .csv) written by `eval`")
    p.add_argument("--level", default="domain", choices=["domain", "cell", "overall"])
    p.add_argument("--plot", help="write a grouped bar chart here (.png)")
    a = parse(p, argv)
    with user_input():
        results = [ev.load_result(path) for path in a.results]
    seen: dict[str, int] = {}
    for r in results:  # same labels from different files: make them distinct
        seen[r.label] = seen.get(r.label, 0) + 1
        if seen[r.label] > 1:
            r.label = f"{r.label} ({seen[r.label]})"
    print_comparison(results, a.level, a.plot)
    return 0


def _verify(argv: list[str]) -> int:
    p = make_parser("python -m openmanus_lite eval verify", "Check the frozen suites' checksums.",
                    ("python -m openmanus_lite eval verify",
                     "python -m openmanus_lite eval verify --root data/benchmark"))
    p.add_argument("--root", help="suite folder (default: the shipped suites, data/benchmark)")
    a = parse(p, argv)
    problems = ev.verify_suites(a.root)
    for line in problems:
        print(f"error: {line}", file=sys.stderr)
    for name in [] if problems else ev.list_suites(a.root):
        s = ev.load_suite(name, root=a.root)
        print(f"{name}: {len(s)} tasks, domains {s.domains}, difficulties {s.difficulties}: checksums ok")
    return 1 if problems else 0


def freeze_parser() -> argparse.ArgumentParser:
    p = make_parser("python -m openmanus_lite eval freeze", "Write new frozen suites (never needed for evaluation).",
                    ("python -m openmanus_lite eval freeze --output_dir /tmp/suites --per_cell 2 --domains db",
                     "python -m openmanus_lite eval freeze --output_dir /tmp/suites --no_agentbench --force"))
    p.add_argument("--output_dir", help="folder (default: the package's suite folder, from a clone only)")
    p.add_argument("--per_cell", type=int, default=TASKS_PER_CELL, help="tasks per split x domain x difficulty")
    p.add_argument("--domains", help="comma-separated subset (default: every registered domain)")
    p.add_argument("--agentbench", help="AgentBench dbbench JSONL to import (default: the shared real samples)")
    p.add_argument("--no_agentbench", action="store_true",
                   help="freeze without the agentbench_db and agentbench_os suites")
    p.add_argument("--force", action="store_true", help="replace existing frozen suites")
    return p


def _freeze(argv: list[str]) -> int:
    a = parse(freeze_parser(), argv)
    m = ev.freeze_suites(a.output_dir, domains=comma_list(a.domains) or None, per_cell=a.per_cell,
                         agentbench_path=False if a.no_agentbench else a.agentbench, force=a.force)
    for name, files in m["suites"].items():
        print(f"{name}: {sum(m['files'][f]['tasks'] for f in files)} tasks in {len(files)} files")
    if m["skipped"]:
        print(f"skipped while freezing: {m['skipped']}")
    return 0


@command
def main(argv: list[str]) -> int:
    sub = {"compare": _compare, "verify": _verify, "freeze": _freeze}
    return sub[argv[0]](argv[1:]) if argv and argv[0] in sub else _run(argv)

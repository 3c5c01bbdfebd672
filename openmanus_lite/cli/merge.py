"""`python -m openmanus_lite merge --source NAME=PATH_OR_HUB_ID ... --output_dir DIR`: the merge from a shell.

Writes the splits, `report.json`, `rejected.jsonl` and (with --plots) PNG figures to DIR, and prints the
accounting. An alias such as agentinstruct_rekeyed reads with the matching converter and keeps its own label.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from openmanus_lite.cli import command
from openmanus_lite.cli.args import comma_list, make_parser, parse, user_input
from openmanus_lite.data.merge import MergeConfig, SourceSpec, check_formats, merge
from openmanus_lite.data.sources import SOURCES, get_source
from openmanus_lite.errors import UserError
from openmanus_lite.schema import EXTRA_LABELS

EXAMPLES = (
    "python -m openmanus_lite merge --source agenttraj_l=data/samples/agenttraj_l --output_dir data/merged --six_only",
    "python -m openmanus_lite merge --source taskcraft=data/samples/taskcraft --output_dir data/merged --formats jsonl",
)


def _pairs(values: list[str] | None, flag: str, cast=str) -> dict:
    out = {}
    for v in values or []:
        key, sep, val = v.partition("=")
        if not sep or not key or not val:
            raise UserError(f"{flag} {v!r}: expected KEY=VALUE")
        try:
            out[key] = cast(val)
        except ValueError:
            raise UserError(f"{flag} {v!r}: {val!r} is not a valid {cast.__name__}") from None
    return out


def build_parser() -> argparse.ArgumentParser:
    ap = make_parser("python -m openmanus_lite merge", "Merge agent datasets into the unified ReAct format "
                     "(options take --x_y or --x-y).", EXAMPLES)
    ap.add_argument("--source", action="append", required=True, metavar="NAME=PATH_OR_HUB_ID",
                    help=f"an input (repeatable); NAME is one of {sorted(SOURCES)} or an alias")
    ap.add_argument("--splits", action="append", metavar="NAME=a,b", help="read only these files/splits of NAME")
    ap.add_argument("--config", action="append", metavar="NAME=CONFIG", help="hub config of NAME (AgentBank task)")
    ap.add_argument("--output_dir", required=True, help="output folder")
    ap.add_argument("--formats", default="jsonl,parquet", help="jsonl, parquet, hf (comma-separated)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--split_ratios", default="0.9,0.05,0.05", help="train,validation,test")
    ap.add_argument("--include", help="keep only these labels (comma-separated)")
    ap.add_argument("--exclude", help="drop these labels (comma-separated)")
    ap.add_argument("--six_only", action="store_true", help=f"drop the extra labels {', '.join(EXTRA_LABELS)}")
    ap.add_argument("--source_weight", action="append", metavar="NAME=W",
                    help="sample a source by W (<1 drops, >1 repeats in train)")
    ap.add_argument("--domain_weight", action="append", metavar="DOMAIN=W", help="sample a domain by W")
    ap.add_argument("--source_cap", action="append", metavar="NAME=N", help="at most N rows of a source")
    ap.add_argument("--domain_cap", action="append", metavar="DOMAIN=N", help="at most N rows of a domain")
    ap.add_argument("--lenient", action="store_true", help="count unreadable rows as rejected instead of stopping")
    ap.add_argument("--allow_free_text", action="store_true", help="keep training turns without an action (chat)")
    ap.add_argument("--dedup", choices=("none", "exact", "normalized"), default="normalized")
    ap.add_argument("--max_turns", type=int)
    ap.add_argument("--max_chars", type=int)
    ap.add_argument("--max_tokens", type=int, help="with --tokenizer, in its tokens; else ≈4 characters a token")
    ap.add_argument("--tokenizer", help="a tokenizer folder or hub name (transformers.AutoTokenizer)")
    ap.add_argument("--negatives", type=float, default=0.0,
                    help="fraction of train rows to derive negative samples from")
    ap.add_argument("--rejected", help="file for rejected rows (default: OUT/rejected.jsonl)")
    ap.add_argument("--workers", type=int, help="worker processes that convert and write (default: auto, 2 from 64 "
                    "MB of input on 2+ CPUs; 0 = one process; the output is the same either way)")
    ap.add_argument("--plots", action="store_true", help="write PNG figures to OUT/plots")
    ap.add_argument("--progress", action="store_true", help="show progress bars")
    return ap


def _specs(args, out: Path) -> list[SourceSpec]:
    """The sources (an alias keeps its own label), refused when the output folder would overwrite them."""
    splits, configs = _pairs(args.splits, "--splits"), _pairs(args.config, "--config")
    specs = []
    for text in args.source:
        spec = SourceSpec.parse(text)
        try:
            module = get_source(spec.name)
        except KeyError as e:
            raise UserError(f"--source {text!r}: {e.args[0]}") from None
        spec.label = spec.name if spec.name != module.NAME else spec.label
        spec.name = module.NAME
        key = spec.label or spec.name
        spec.splits = comma_list(splits[key]) if key in splits else spec.splits
        spec.config = configs.get(key)
        src = Path(spec.path).resolve()
        if src.exists() and (src == out.resolve() or out.resolve() in src.parents):
            raise UserError(f"--output_dir {out} holds the input {spec.path}, which the merge would overwrite: "
                            "write to another folder")
        specs.append(spec)
    return specs


@command
def main(argv: list[str]) -> int:
    args, _ = parse(build_parser(), argv)
    out = Path(args.output_dir)
    try:
        ratios = tuple(float(x) for x in args.split_ratios.split(","))
    except ValueError:
        raise UserError(f"--split_ratios {args.split_ratios!r}: expected three numbers") from None
    tokenizer = None
    if args.tokenizer:
        from transformers import AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
        except (OSError, ValueError) as e:  # a missing folder, or a hub name offline
            raise UserError(f"--tokenizer {args.tokenizer!r}: no tokenizer there ({str(e).splitlines()[0]})") from None
    with user_input():
        formats = check_formats(comma_list(args.formats))
        cfg = MergeConfig(
            include=comma_list(args.include) or None,
            exclude=comma_list(args.exclude) + (EXTRA_LABELS if args.six_only else ()),
            strict=not args.lenient, allow_free_text=args.allow_free_text, dedup=args.dedup,
            max_turns=args.max_turns, max_chars=args.max_chars, max_tokens=args.max_tokens, tokenizer=tokenizer,
            source_weights=_pairs(args.source_weight, "--source_weight", float),
            domain_weights=_pairs(args.domain_weight, "--domain_weight", float),
            source_caps=_pairs(args.source_cap, "--source_cap", int),
            domain_caps=_pairs(args.domain_cap, "--domain_cap", int),
            seed=args.seed, split_ratios=ratios, negatives=args.negatives,
            rejected_path=args.rejected or out / "rejected.jsonl", progress=args.progress, workers=args.workers,
        )
    result = merge(_specs(args, out), cfg)
    written = result.save(out, formats=formats)
    print(result.report.summary())
    for kind, paths in written.items():
        print(f"{kind}: " + ", ".join(str(p) for p in paths))
    print(f"rejected rows: {cfg.rejected_path}")
    if args.plots:
        from openmanus_lite.data.stats import save_plots, trajectory_stats

        paths = save_plots(trajectory_stats(result.trajectories, tokenizer), out / "plots", result.report)
        print("plots: " + ", ".join(str(p) for p in paths))
    return 0

"""`python -m openmanus_lite prepare-model [--output_dir DIR] [--force]`: convert the embedded default model."""

from __future__ import annotations

import argparse

from openmanus_lite.cli import command
from openmanus_lite.cli.args import make_parser, parse
from openmanus_lite.models import prepare_default_model


def build_parser() -> argparse.ArgumentParser:
    p = make_parser("openmanus_lite prepare-model", prepare_default_model.__doc__, (
        "python -m openmanus_lite prepare-model",
        "python -m openmanus_lite prepare-model --output_dir models/smollm2 --force",
    ))
    p.add_argument("--output_dir", help="output folder (default: the cache folder)")
    p.add_argument("--force", action="store_true", help="convert again even if a checkpoint exists")
    return p


@command
def main(argv: list[str]) -> int:
    args, _ = parse(build_parser(), argv)
    print(prepare_default_model(args.output_dir, force=args.force))
    return 0

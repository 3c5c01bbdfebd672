"""`python -m openmanus_lite <command> ...`: one entry point for every stage.

Each command lives next to the code it drives, as `main(argv) -> int` in the module named
below; this file only dispatches, so importing it stays cheap.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS: dict[str, tuple[str, str]] = {
    "merge": ("openmanus_lite.cli.merge", "merge source datasets into the unified format"),
    "synth": ("openmanus_lite.cli.synth", "synthesize expert trajectories in the environments"),
    "sft": ("openmanus_lite.cli.sft", "QLoRA / LoRA SFT with Unsloth and TRL"),
    "grpo": ("openmanus_lite.cli.grpo", "GRPO: single-turn or multi-turn in the environments"),
    "dpo": ("openmanus_lite.cli.dpo", "DPO and reward models from environment rollouts"),
    "eval": ("openmanus_lite.cli.eval", "evaluate policies on the frozen benchmark suites"),
    "export": ("openmanus_lite.cli.export", "export data and tasks for verl"),
    "presets": ("openmanus_lite.cli.presets", "list the hardware presets; --memory: GPU memory per stage"),
    "prepare-model": ("openmanus_lite.cli.prepare_model", "convert the embedded default model to a local checkpoint"),
    "demo": ("openmanus_lite.cli.demo", "the whole pipeline on the embedded default"),
}


def _usage() -> str:
    lines = ["usage: python -m openmanus_lite <command> [options]", "", "commands:"]
    lines += [f"  {name:<14}{help_}" for name, (_, help_) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    try:
        module = importlib.import_module(COMMANDS[name][0])
    except ModuleNotFoundError as e:
        print(f"error: command {name!r} needs the module {e.name!r}, which is not installed.\n"
              f"Install the kit's requirements: make venv (or pip install -r requirements.txt).", file=sys.stderr)
        return 1
    try:
        return int(module.main(rest) or 0)
    except KeyboardInterrupt:
        print("\ninterrupted; re-run the same command to resume.", file=sys.stderr)
        return 130

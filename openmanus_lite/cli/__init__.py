"""`python -m openmanus_lite <command> ...`: dispatch to each command's `main(argv) -> int` (imported only when run),
inside one boundary for user errors (`command`): a `UserError`, missing file or non-UTF-8 file becomes one line on
stderr and exit code 2 (`--debug`: the traceback); any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys

from openmanus_lite.errors import UserError

USER_ERRORS = (UserError, FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError,
               UnicodeDecodeError)
"""What the boundary reports as one line: the user's mistakes, never the kit's bugs."""

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
    lines = ["usage: python -m openmanus_lite [--debug] <command> [options]", "", "commands:"]
    lines += [f"  {name:<14}{help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "--debug: show the traceback of a user error (bad path, file, setting or reward) instead of one line"]
    return "\n".join(lines)


def _one_line(e: BaseException) -> str:
    if isinstance(e, UnicodeDecodeError):
        return f"a file is not UTF-8 text ({e}); save it as UTF-8"
    if isinstance(e, OSError) and e.filename is not None:
        return f"{e.strerror or type(e).__name__}: {e.filename}"
    return " ".join(str(e).split()) or type(e).__name__


def command(main):
    """The user-error boundary around a command's `main(argv)`, so that calling it directly (as the tests and
    notebooks do) behaves as `python -m openmanus_lite <command>` does."""

    @functools.wraps(main)
    def run(argv: list[str] | None = None) -> int:
        argv = list(sys.argv[1:] if argv is None else argv)
        try:
            return int(main([a for a in argv if a != "--debug"]) or 0)
        except USER_ERRORS as e:
            if "--debug" in argv:
                raise
            print(f"error: {_one_line(e)}  (--debug shows the traceback)", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("\ninterrupted; re-run the same command to resume.", file=sys.stderr)
            return 130

    return run


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    words = [a for a in argv if a != "--debug"]
    if not words or words[0] in ("-h", "--help"):
        print(_usage())
        return 0
    name = words[0]
    if name not in COMMANDS:
        print(f"unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    try:
        module = importlib.import_module(COMMANDS[name][0])
    except ModuleNotFoundError as e:
        print(f"error: command {name!r} needs the module {e.name!r}, which is not installed.\n"
              f"Install the kit's requirements: make venv (or pip install -r requirements.txt).", file=sys.stderr)
        return 1
    argv.remove(name)  # --debug stays, wherever it was
    code = command(inspect.unwrap(module.main))(argv)
    if "torch" in sys.modules:  # a command launched by torchrun / accelerate closes its process group
        from openmanus_lite.models import end_distributed

        end_distributed()
    return code

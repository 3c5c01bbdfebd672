"""Command-line conventions shared by every command, the ones TRL and transformers users know: `--x_y` or `--x-y`,
TRL's setting names (the kit's older spellings still work for one release, with a notice), any field of a training
command's config as `--key value` (`run_settings`), and `--config run.yaml` under the command line. Nothing heavy is
imported here, so `--help` stays fast.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import sys
import textwrap
from pathlib import Path
from typing import Any, Mapping, Sequence

from openmanus_lite.errors import UserError

DEPRECATED: dict[str, str] = {"out": "output_dir", "lr": "learning_rate", "steps": "max_steps",
                              "epochs": "num_train_epochs", "batch_size": "per_device_train_batch_size",
                              "grad_accum": "gradient_accumulation_steps"}
"""Old kit spellings (after the dash-to-underscore step) -> the TRL / transformers name."""

REPORT_TO = ("none", "tensorboard", "trackio", "wandb")


def style(examples: Sequence[str]) -> dict[str, Any]:
    """No prefix matching (`--out` must not silently mean `--output_dir`), and a `--help` ending with examples."""
    return dict(allow_abbrev=False, formatter_class=argparse.RawDescriptionHelpFormatter,
                epilog="examples:\n" + "\n".join(f"  {e}" for e in examples))


def make_parser(prog: str, description: str | None, examples: Sequence[str]) -> argparse.ArgumentParser:
    return argparse.ArgumentParser(prog=prog, description=description, **style(examples))


def comma_list(text: str | None) -> tuple[str, ...]:
    """`--domains "os, db,"` as ("os", "db")."""
    return tuple(x.strip() for x in (text or "").split(",") if x.strip())


def normalize_argv(argv: Sequence[str], prog: str, deprecated: Mapping[str, str] = DEPRECATED) -> list[str]:
    """Spell every `--x-y` as `--x_y` and rename deprecated options, with a notice on stderr."""
    out = list(argv)
    for i, tok in enumerate(out):
        if tok == "--":
            break
        if tok.startswith("--"):
            name, eq, value = tok[2:].partition("=")
            key = name.replace("-", "_")
            if key in deprecated:
                print(f"{prog}: --{name} is deprecated and goes in the next release; use --{deprecated[key]}",
                      file=sys.stderr)
                key = deprecated[key]
            out[i] = f"--{key}{eq}{value}"
    return out


def expand_config(argv: Sequence[str], parser: argparse.ArgumentParser, *, insert_at: int = 0) -> list[str]:
    """Replace `--config FILE` (a YAML mapping of options) by its options, before the command line's so those win."""
    pre = argparse.ArgumentParser(prog=parser.prog, add_help=False, allow_abbrev=False)
    pre.add_argument("--config")
    found, argv = pre.parse_known_args(argv)
    if found.config is None:
        return argv
    import yaml

    def fail(why: str) -> SystemExit:
        return SystemExit(f"{parser.prog}: error: --config {found.config}{why}")

    try:
        config = yaml.safe_load(Path(found.config).read_text())
    except yaml.YAMLError as e:
        raise fail(f" is not valid YAML: {e}") from None
    if not isinstance(config, dict):
        raise fail(f" must hold a mapping of option: value, got {type(config).__name__}")
    actions = {s: a for a in parser._actions for s in a.option_strings}
    tokens: list[str] = []
    for key, value in config.items():
        if value is None:
            continue
        flag = f"--{str(key).replace('-', '_')}"
        action = actions.get(flag)
        if isinstance(action, argparse._StoreTrueAction):
            if not isinstance(value, bool):
                raise fail(f": {key!r} is a switch: give true or false, not {value!r}")
            tokens += [flag] * value
        elif isinstance(value, (list, tuple)) and action is not None and action.nargs in (None, "?"):
            tokens += [flag, ",".join(map(str, value))]  # a comma list, e.g. report_to: [tensorboard, wandb]
        elif isinstance(value, (list, tuple)):
            tokens += [flag, *(json.dumps(v) if isinstance(v, (dict, list)) else str(v) for v in value)]
        else:
            tokens += [flag, json.dumps(value) if isinstance(value, (bool, dict)) else str(value)]
    return argv[:insert_at] + tokens + argv[insert_at:]


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None, *, passthrough: bool = False,
          config: bool = False, deprecated: Mapping[str, str] = DEPRECATED) -> tuple[argparse.Namespace, list[str]]:
    """(args, the options left for the trainer's config); without `passthrough` leftovers are an error."""
    argv = normalize_argv(sys.argv[1:] if argv is None else argv, parser.prog, deprecated)
    if config:
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        on_sub = bool(sub and argv and argv[0] in sub.choices)  # `dpo train-dpo --config x.yaml`
        argv = expand_config(argv, sub.choices[argv[0]] if on_sub else parser, insert_at=int(on_sub))
    if not passthrough:
        return parser.parse_args(argv), []
    args, extras = parser.parse_known_args(argv)
    if extras and not extras[0].startswith("--"):
        parser.error(f"unexpected argument {extras[0]!r}")
    return args, extras


@contextlib.contextmanager
def user_input():
    """A ValueError or KeyError raised inside is the user's mistake, reported as a one-line UserError."""
    try:
        yield
    except (ValueError, KeyError) as e:
        raise UserError(e.args[0] if e.args else str(e)) from e


def add_training_options(p: argparse.ArgumentParser | Any, config_name: str, defaults: str) -> None:
    """The options every training command shares: --config, the rerun rule, tracking and the Hub."""
    g = p.add_argument_group("training settings", textwrap.fill(
        f"Any field of {config_name} (train/configs.py: TRL's config with the kit's few fields) as --name value, "
        f"e.g. --learning_rate 1e-4 --max_steps 50 --adam_beta2 0.95; defaults: {defaults}.", 100))
    g.add_argument("--config", help="YAML file of option: value (the command line wins)")
    g.add_argument("--overwrite_output_dir", action="store_true",
                   help="start fresh in an output folder that holds a run (its checkpoints are removed). Without it, "
                        "a folder with a complete checkpoint of the same command is resumed and any other non-empty "
                        "folder is refused; a folder in use by another run is always refused")
    g = p.add_argument_group("tracking and the Hub")
    g.add_argument("--report_to", type=_report_to, default="none",
                   help="experiment tracker: none, tensorboard, trackio or wandb (comma-separated; default none)")
    g.add_argument("--push_to_hub", action="store_true",
                   help="upload the final adapter / merged model to --hub_model_id on the Hugging Face Hub")
    g.add_argument("--hub_model_id", help="user/name of the Hub repository to push to")
    g.add_argument("--hub_private_repo", action="store_true", default=None, help="create the Hub repository private")
    g.add_argument("--hub_token", help="Hub token (default: HF_TOKEN or the saved `hf auth login`)")


def _report_to(text: str) -> str | list[str]:
    names = comma_list(text)
    if not names or set(names) - set(REPORT_TO):
        raise argparse.ArgumentTypeError(f"{text!r}: choose from {', '.join(REPORT_TO)} (comma-separated)")
    return names[0] if len(names) == 1 else list(names)


def run_settings(args: argparse.Namespace, extras: Sequence[str], config_cls: type, command: str) -> dict[str, Any]:
    """The fields of `config_cls` given as `--key value`, typed by `HfArgumentParser`. Fails before any work when a
    key is unknown (naming close matches), the tracker is not installed or a push could not happen."""
    import dataclasses
    import importlib.util

    trackers = [args.report_to] if isinstance(args.report_to, str) else list(args.report_to)
    missing = [t for t in trackers if t != "none" and importlib.util.find_spec(t) is None]
    if missing:
        raise UserError(f"--report_to {','.join(missing)}: not installed here; pip install {' '.join(missing)} "
                        f"(or --report_to none)")
    if args.push_to_hub and not args.hub_model_id:
        raise UserError("--push_to_hub needs --hub_model_id user/name: the repository to upload the model to")
    if args.hub_model_id and not args.push_to_hub:
        print("note: --hub_model_id without --push_to_hub: nothing is uploaded", file=sys.stderr)
    names = {f.name for f in dataclasses.fields(config_cls) if f.init}
    given = []
    for key in (tok[2:].partition("=")[0] for tok in extras if tok.startswith("--")):
        key = key[3:] if key not in names and key.startswith("no_") and key[3:] in names else key
        if key not in names:
            close = difflib.get_close_matches(key, sorted(names), n=3)
            hint = f" (did you mean {', '.join('--' + c for c in close)}?)" if close else ""
            raise UserError(f"unknown setting --{key}{hint}: `{command}` takes its own options (see --help) "
                            f"and any field of TRL's {config_cls.__name__}")
        given.append(key)
    if not given:
        return {}
    from transformers import HfArgumentParser

    ns, rest = HfArgumentParser(config_cls).parse_known_args(list(extras))
    if rest:
        raise UserError(f"cannot read {' '.join(rest)} as settings of {config_cls.__name__}")
    return {k: getattr(ns, k) for k in dict.fromkeys(given)}


def push_saved(args: argparse.Namespace, saved: Mapping[str, str | Path]) -> None:
    """Push what a command saved ({"merged": dir, ...}) with --push_to_hub; a failed upload exits with code 1."""
    if not args.push_to_hub:
        return
    from openmanus_lite.hub import HubPushError, push_outputs

    try:
        pushed = push_outputs(saved, args.hub_model_id, private=args.hub_private_repo, token=args.hub_token)
    except HubPushError as e:
        raise SystemExit(f"error: {e}") from None
    print(f"pushed: {json.dumps(pushed)}")

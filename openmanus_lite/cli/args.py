"""Command-line conventions shared by every command, the ones TRL and transformers users know.

- Every `--x_y` option also answers to `--x-y` (transformers' `HfArgumentParser` accepts both).
- The same setting has the same name everywhere: `--output_dir`, `--learning_rate`, `--max_steps`,
  `--num_train_epochs`, `--per_device_train_batch_size`, `--gradient_accumulation_steps`. The kit's
  older spellings (`--out`, `--lr`, `--steps`, ...) still work for one release and print a notice.
- The training commands read `--config run.yaml` (keys are option names; the command line wins over
  the file, as with TRL's `TrlParser`) and pass any other `--key value` through to the run's config
  (TRL's `SFTConfig`, `GRPOConfig`, `DPOConfig`, `RewardConfig` with the kit's few fields,
  train/configs.py), checked against its fields.

Nothing heavy is imported here, so `--help` stays fast; `trainer_overrides` imports transformers
when a command has pass-through settings to check.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from openmanus_lite.errors import UserError

DEPRECATED: dict[str, str] = {
    "out": "output_dir",
    "lr": "learning_rate",
    "steps": "max_steps",
    "epochs": "num_train_epochs",
    "batch_size": "per_device_train_batch_size",
    "grad_accum": "gradient_accumulation_steps",
}
"""Old kit spellings (after the dash-to-underscore step) -> the TRL / transformers name."""

REPORT_TO = ("none", "tensorboard", "trackio", "wandb")


def make_parser(prog: str, description: str | None, examples: Sequence[str] = (), **kw) -> argparse.ArgumentParser:
    """An argparse parser without prefix matching (`--out` must not silently mean `--output_dir`)
    whose `--help` ends with example lines."""
    epilog = "examples:\n" + "\n".join(f"  {e}" for e in examples) if examples else None
    return argparse.ArgumentParser(prog=prog, description=description, epilog=epilog, allow_abbrev=False,
                                   formatter_class=argparse.RawDescriptionHelpFormatter, **kw)


def normalize_argv(argv: Sequence[str], prog: str, deprecated: Mapping[str, str] = DEPRECATED) -> list[str]:
    """Spell every `--x-y` as `--x_y` and rename deprecated options, with a notice on stderr."""
    out: list[str] = []
    rest = list(argv)
    while rest:
        tok = rest.pop(0)
        if tok == "--":
            out += [tok, *rest]
            break
        if not tok.startswith("--") or len(tok) == 2:
            out.append(tok)
            continue
        name, eq, value = tok[2:].partition("=")
        name = name.replace("-", "_")
        if name in deprecated:
            new = deprecated[name]
            print(f"{prog}: --{tok[2:].partition('=')[0]} is deprecated and goes in the next release; "
                  f"use --{new}", file=sys.stderr)
            name = new
        out.append(f"--{name}{eq}{value}")
    return out


def _config_tokens(config: Mapping[str, Any], parser: argparse.ArgumentParser) -> list[str]:
    actions = {s: a for a in parser._actions for s in a.option_strings}
    tokens: list[str] = []
    for key, value in config.items():
        flag = f"--{str(key).replace('-', '_')}"
        action = actions.get(flag)
        if value is None:
            continue
        if isinstance(action, argparse._StoreTrueAction):
            if not isinstance(value, bool):
                raise ValueError(f"config key {key!r} is a switch: give true or false, not {value!r}")
            tokens += [flag] if value else []
        elif isinstance(value, bool):
            tokens += [flag, str(value).lower()]
        elif isinstance(value, (list, tuple)) and action is not None and action.nargs in (None, "?"):
            tokens += [flag, ",".join(map(str, value))]  # a comma list, e.g. report_to: [tensorboard, wandb]
        elif isinstance(value, (list, tuple)):
            tokens += [flag, *(json.dumps(v) if isinstance(v, (dict, list)) else str(v) for v in value)]
        elif isinstance(value, dict):
            tokens += [flag, json.dumps(value)]
        else:
            tokens += [flag, str(value)]
    return tokens


def expand_config(argv: Sequence[str], parser: argparse.ArgumentParser, *, insert_at: int = 0) -> list[str]:
    """Replace `--config FILE` (YAML or JSON, a mapping of option names to values) by the options it
    holds, placed before the command line's own options so that those win."""
    argv = list(argv)
    path = None
    for i, tok in enumerate(argv):
        if tok == "--config":
            if i + 1 >= len(argv):
                raise SystemExit(f"{parser.prog}: error: --config needs a file")
            path = argv[i + 1]
            del argv[i:i + 2]
            break
        if tok.startswith("--config="):
            path = tok.partition("=")[2]
            del argv[i]
            break
    if path is None:
        return argv
    p = Path(path)
    if not p.is_file():
        raise SystemExit(f"{parser.prog}: error: --config {path}: no such file")
    import yaml

    try:
        config = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise SystemExit(f"{parser.prog}: error: --config {path} is not valid YAML: {e}") from None
    if not isinstance(config, dict):
        raise SystemExit(f"{parser.prog}: error: --config {path} must hold a mapping of option: value, "
                         f"got {type(config).__name__}")
    try:
        tokens = _config_tokens(config, parser)
    except ValueError as e:
        raise SystemExit(f"{parser.prog}: error: --config {path}: {e}") from None
    return argv[:insert_at] + tokens + argv[insert_at:]


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None, *, passthrough: bool = False,
          config: bool = False, deprecated: Mapping[str, str] = DEPRECATED) -> tuple[argparse.Namespace, list[str]]:
    """Parse with the kit's conventions; returns (args, the options left for the trainer's config).
    Without `passthrough`, leftover options are an error, as in plain argparse."""
    argv = normalize_argv(list(sys.argv[1:] if argv is None else argv), parser.prog, deprecated)
    if config:
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        if sub is not None and argv and argv[0] in sub.choices:  # `dpo train-dpo --config x.yaml`
            argv = expand_config(argv, sub.choices[argv[0]], insert_at=1)
        else:
            argv = expand_config(argv, parser)
    if not passthrough:
        return parser.parse_args(argv), []
    args, extras = parser.parse_known_args(argv)
    stray = [t for t in extras if not t.startswith("--")]
    if extras and stray == extras[:1]:
        parser.error(f"unexpected argument {stray[0]!r}")
    return args, extras


def trainer_overrides(extras: Sequence[str], config_cls: type, *, command: str) -> dict[str, Any]:
    """Read `--key value` options as settings of `config_cls` (a TRL / transformers config dataclass),
    typed as `HfArgumentParser` types them. Only the keys given come back; an unknown key is a
    UserError that names the close matches."""
    import dataclasses

    from transformers import HfArgumentParser

    names = {f.name for f in dataclasses.fields(config_cls) if f.init}
    given: list[str] = []
    for tok in extras:
        if not tok.startswith("--"):
            continue
        key = tok[2:].partition("=")[0].replace("-", "_")
        if key not in names and key.startswith("no_") and key[3:] in names:
            key = key[3:]
        if key not in names:
            close = difflib.get_close_matches(key, sorted(names), n=3)
            hint = f" (did you mean {', '.join('--' + c for c in close)}?)" if close else ""
            raise UserError(f"unknown setting --{key}{hint}: `{command}` takes its own options (see --help) "
                             f"and any field of TRL's {config_cls.__name__}")
        given.append(key)
    if not given:
        return {}
    ns, rest = HfArgumentParser(config_cls).parse_known_args(list(extras))
    if rest:
        raise UserError(f"cannot read {' '.join(rest)} as settings of {config_cls.__name__}")
    return {k: getattr(ns, k) for k in dict.fromkeys(given)}


def add_rerun_args(p: argparse.ArgumentParser | Any) -> None:
    """--overwrite_output_dir and the one rerun rule of the training commands (train/run_folder.py), in --help."""
    p.add_argument("--overwrite_output_dir", action="store_true",
                   help="start fresh in an output folder that holds a run (its checkpoints are removed). Without it, "
                        "a folder with a complete checkpoint of the same command is resumed and any other non-empty "
                        "folder is refused; a folder in use by another run is always refused")


# --------------------------------------------------------------------------- tracking and the Hub


def _report_to(text: str) -> str | list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    bad = [n for n in names if n not in REPORT_TO]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"{text!r}: choose from {', '.join(REPORT_TO)} (comma-separated)")
    return names[0] if len(names) == 1 else names


def add_tracking_args(p: argparse.ArgumentParser | Any) -> None:
    """--report_to and the Hub options, spelled as in transformers' TrainingArguments."""
    g = p.add_argument_group("tracking and the Hub")
    g.add_argument("--report_to", type=_report_to, default="none",
                   help="experiment tracker: none, tensorboard, trackio or wandb (comma-separated; default none)")
    g.add_argument("--push_to_hub", action="store_true",
                   help="upload the final adapter / merged model to --hub_model_id on the Hugging Face Hub")
    g.add_argument("--hub_model_id", default=None, help="user/name of the Hub repository to push to")
    g.add_argument("--hub_private_repo", action="store_true", default=None, help="create the Hub repository private")
    g.add_argument("--hub_token", default=None, help="Hub token (default: HF_TOKEN or the saved `hf auth login`)")


TRACKER_PACKAGES = {"tensorboard": "tensorboard", "trackio": "trackio", "wandb": "wandb"}


def check_tracking_args(args: argparse.Namespace) -> None:
    """Fail before training when the tracker is not installed or a push could not happen."""
    import importlib.util

    trackers = [args.report_to] if isinstance(args.report_to, str) else list(args.report_to)
    missing = [t for t in trackers if t in TRACKER_PACKAGES and importlib.util.find_spec(TRACKER_PACKAGES[t]) is None]
    if missing:
        raise UserError(f"--report_to {','.join(missing)}: not installed here; pip install "
                         f"{' '.join(TRACKER_PACKAGES[t] for t in missing)} (or --report_to none)")
    if args.push_to_hub and not args.hub_model_id:
        raise UserError("--push_to_hub needs --hub_model_id user/name: the repository to upload the model to")
    if args.hub_model_id and not args.push_to_hub:
        print("note: --hub_model_id without --push_to_hub: nothing is uploaded", file=sys.stderr)


def push_saved(args: argparse.Namespace, saved: Mapping[str, str | Path]) -> dict[str, str]:
    """Push what a command saved ({"merged": dir, "adapter": dir, ...}) when --push_to_hub is set."""
    if not args.push_to_hub:
        return {}
    from openmanus_lite.hub import push_outputs

    return push_outputs(saved, args.hub_model_id, private=args.hub_private_repo, token=args.hub_token)

"""A training command's output folder: one run at a time, and one rerun rule for sft, grpo and dpo.

`claim_output_dir` locks the folder (flock on `.run.lock`, released with the process, naming the holder) and
resumes a complete checkpoint of the same command; any other non-empty folder is refused unless
`--overwrite_output_dir`. Nothing here imports torch or transformers: the demo's own process claims its folder
without them (issue #41: they held 0.8 GB there).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

from openmanus_lite.errors import UserError

CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def last_checkpoint(output_dir: str | os.PathLike) -> str | None:
    """The newest complete `checkpoint-N` folder under output_dir (its trainer_state.json written), or None."""
    folder = Path(output_dir)
    if not folder.is_dir():
        return None
    done = [(int(m.group(1)), p) for p in folder.iterdir()
            if (m := CHECKPOINT.match(p.name)) and (p / "trainer_state.json").is_file()]
    return str(max(done)[1]) if done else None


RESUME_ON = ("auto", "true", "yes")
RESUME_OFF = ("false", "no", "none", "")
"""How `resume` is spelled (lower-cased, True/False/None as str gives them); anything else is a checkpoint path."""


def resume_checkpoint(resume: bool | str | os.PathLike | None, output_dir: str | os.PathLike) -> str | None:
    """The checkpoint to resume from: "auto" / True: the newest in output_dir; False / None / "no": none; a path:
    that checkpoint, which must exist."""
    word = str(resume).lower()
    if word in RESUME_ON:
        return last_checkpoint(output_dir)
    if word in RESUME_OFF:
        return None
    if not Path(resume).is_dir():
        raise FileNotFoundError(f"resume checkpoint {resume} does not exist")
    return str(resume)

LOCK_FILE = ".run.lock"
_HELD: dict[Path, int] = {}
"""Folders this process holds, with the open lock file (closing it would release the lock)."""


def _holder(fd: int) -> dict:
    try:
        return json.loads(os.pread(fd, 4096, 0) or b"{}")
    except ValueError:
        return {}


def hold_output_dir(folder: str | os.PathLike, kind: str) -> dict:
    """Hold `folder` until this process ends, or raise a UserError naming the process that holds it.
    Returns what the previous holder recorded ({} for a new folder): its `kind` is the command that wrote it."""
    folder = Path(folder).resolve()
    if folder in _HELD:
        return {}
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        other = _holder(fd)
        os.close(fd)
        raise UserError(f"{folder} is in use by another run (pid {other.get('pid', '?')}, started "
                        f"{other.get('started', '?')}: {other.get('command', '?')}); wait for it to end or choose "
                        f"another --output_dir") from None
    before = _holder(fd)
    mine = {"pid": os.getpid(), "kind": kind, "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(mine).encode(), 0)
    _HELD[folder] = fd
    return before


def claim_output_dir(folder: str | os.PathLike, kind: str, *, resume: bool | str = "auto", overwrite: bool = False,
                     checkpoints: str | os.PathLike | None = None) -> str | None:
    """Hold `folder` for this run (`hold_output_dir`) and apply the rerun rule (module doc). Returns the checkpoint
    to resume from, or None for a fresh start. `resume`: "auto"/True, False, or a checkpoint path (always used);
    `checkpoints`: where the trainer writes its checkpoint-N folders (default: `folder`)."""
    before = hold_output_dir(folder, kind)
    ckpt_dir = Path(checkpoints or folder)
    word = str(resume).lower()
    if word not in RESUME_ON + RESUME_OFF:
        return resume_checkpoint(resume, ckpt_dir)  # a path: that checkpoint, which must exist
    if overwrite:
        for old in ckpt_dir.glob("checkpoint-*"):
            if CHECKPOINT.match(old.name) and old.is_dir():
                shutil.rmtree(old)
        return None
    held = sorted(p.name for p in Path(folder).iterdir() if p.name != LOCK_FILE)
    if not held:
        return None
    found = last_checkpoint(ckpt_dir)
    if before.get("kind", kind) != kind:
        why = f"holds a {before['kind']} run"
    elif found and word in RESUME_ON:
        print(f"{folder}: resuming its run from {found} (--overwrite_output_dir starts fresh)", file=sys.stderr)
        return found
    else:
        why = "holds a run and resuming is off" if found else "holds files but no complete checkpoint to resume from"
    raise UserError(f"{folder} {why} ({', '.join(held[:4])}{', ...' if len(held) > 4 else ''}); pass "
                    f"--overwrite_output_dir to replace it, or choose another --output_dir")

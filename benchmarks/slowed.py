"""Run a command as if on a slower machine: it may run only `--share` of each `--period` (issue #41).

A student's CPU can be half as fast as ours, and the demo's result follows the tokens SFT trains in its
minutes. To see what such a machine gets, this runs the command in its own process group and stops the whole
group (SIGSTOP) for the rest of every period, then lets it go on (SIGCONT), as `cpulimit` does: every stage,
child processes included, gets `share` of the wall time, so compute-bound work runs at `share` of its speed while
the command's clocks (time budgets, the demo's speed probe) see a slower machine. Example, this machine's SFT
(~300 tokens/s in float32) slowed to the ~220 tokens/s of issue #41's reference machine:

    python benchmarks/slowed.py --share 0.73 -- python -m openmanus_lite demo

Ends with one line `RESULT {json}`: the share, the wall seconds, the command's exit status.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time


def run_slowed(command: list[str], share: float, period: float = 0.1) -> tuple[int, float]:
    """Run `command` at `share` of the wall time; its exit status and wall seconds. The group always ends running."""
    if not 0 < share <= 1:
        raise ValueError(f"share must be in (0, 1], got {share}")
    start = time.monotonic()
    child = subprocess.Popen(command, start_new_session=True)
    try:
        while child.poll() is None:
            time.sleep(share * period)
            if share < 1 and child.poll() is None:
                _signal_group(child.pid, signal.SIGSTOP)
                time.sleep((1 - share) * period)
                _signal_group(child.pid, signal.SIGCONT)
    except BaseException:
        _signal_group(child.pid, signal.SIGCONT)
        _signal_group(child.pid, signal.SIGTERM)
        raise
    return child.wait(), time.monotonic() - start


def _signal_group(pgid: int, sig: int) -> None:
    """Signal the command's process group; a group that has already ended is not an error."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--share", type=float, required=True, help="share of each period the command may run, (0, 1]")
    p.add_argument("--period", type=float, default=0.1, help="seconds per run-and-stop cycle")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("give the command after --")
    code, wall = run_slowed(command, args.share, args.period)
    print("RESULT " + json.dumps({"share": args.share, "period_s": args.period, "wall_s": round(wall, 1),
                                  "returncode": code, "command": command}))
    return code


if __name__ == "__main__":
    sys.exit(main())

"""How much real agent bash the OS environment's virtual shell runs: the recorded scripts of
tests/envs/test_vshell_scripts.py (agent-style solutions and per-feature scripts, each with the stdout
and status real bash printed) run on the shell of whichever tree is first on PYTHONPATH.

    python benchmarks/vshell_coverage.py                          # this tree
    PYTHONPATH=/path/to/other/checkout python benchmarks/vshell_coverage.py

A script is "clean" when its output has no sign of a refusal (command not found, not supported,
syntax error, not available, invalid option, too complex); "equal" when stdout and stderr together,
and the status, are what bash printed (a few feature scripts also write to stderr, so they count as
clean but not equal). Seconds. Ends with one line `RESULT {json}`.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # after PYTHONPATH, so another checkout's shell can be measured

REFUSALS = ("command not found", "not supported", "syntax error", "not available", "invalid option", "too complex")


def recorded_scripts() -> dict:
    """FILES, FEATURES and REALISTIC as literals from the test module (read, not imported, so an
    older shell without the test's imports can be measured)."""
    tree = ast.parse((ROOT / "tests" / "envs" / "test_vshell_scripts.py").read_text())
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in ("FILES", "FEATURES", "REALISTIC"):
                found[name] = ast.literal_eval(node.value)
    return found


def main() -> int:
    from openmanus_lite.envs.shell.interpreter import VFS, Shell

    data = recorded_scripts()
    groups = {"realistic": [(script, out, status) for script, out, status in data["REALISTIC"]],
              "features": [(script, out, status) for _, script, out, status in data["FEATURES"]]}
    result = {"benchmark": "vshell_coverage", "shell": str(Path(sys.modules["openmanus_lite"].__file__).parent.parent)}
    for name, rows in groups.items():
        clean = equal = 0
        for script, stdout, status in rows:
            shell = Shell(VFS.from_spec({"/work/" + k: v for k, v in data["FILES"].items()}, dirs=["/tmp"]),
                          cwd="/work")
            out, code = shell.run(script)
            ok = not any(r in out for r in REFUSALS)
            clean += ok
            equal += ok and (out, code) == (stdout, status)
        result[name] = {"scripts": len(rows), "clean": clean, "equal_to_bash": equal}
        print(f"{name:10} {clean:4d}/{len(rows)} clean, {equal:4d}/{len(rows)} equal to bash")
    print("RESULT " + json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())

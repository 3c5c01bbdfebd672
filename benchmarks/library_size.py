"""The library's size at a git revision, by kind of line (issue #39: "light to read").

Counts the Python files of `openmanus_lite/` outside the environments (`envs/`), or the paths given, as they are at
a revision (`git show REV:FILE`, so no checkout is needed), and splits each file's lines into docstrings (string
statements, by `ast`), comments, blank lines and code:

    python benchmarks/library_size.py                                   # HEAD
    python benchmarks/library_size.py --rev 3a3a638 --rev HEAD          # side by side
    python benchmarks/library_size.py --student                         # recipes, train, rewards, eval, rollout, policies

Ends with one line `RESULT {json}`: per revision, the counts.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STUDENT_PATH = ("openmanus_lite/recipes", "openmanus_lite/train", "openmanus_lite/rewards", "openmanus_lite/eval",
                "openmanus_lite/rollout.py", "openmanus_lite/policies.py")
"""What a student reads for SFT + GRPO + evaluation (the issue's definition)."""


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True, cwd=REPO).stdout


def line_kinds(source: str) -> dict[str, int]:
    """{code, docstrings, comments, blank, all} of one file's text."""
    docs: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        for stmt in body if isinstance(body, list) else ():  # docstrings and attribute docs: string statements
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
                docs.update(range(stmt.lineno, stmt.end_lineno + 1))
    counts = dict.fromkeys(("code", "docstrings", "comments", "blank"), 0)
    lines = source.splitlines()
    for number, line in enumerate(lines, 1):
        text = line.strip()
        kind = "blank" if not text else "docstrings" if number in docs else "comments" if text.startswith("#") else "code"
        counts[kind] += 1
    return {**counts, "all": len(lines)}


def library_size(rev: str, paths: tuple[str, ...] = ("openmanus_lite",)) -> dict[str, int]:
    """The summed `line_kinds` of the Python files under `paths` at `rev`, the environments left out."""
    total = dict.fromkeys(("code", "docstrings", "comments", "blank", "all", "files"), 0)
    for name in _git("ls-tree", "-r", "--name-only", rev, "--", *paths).split():
        if name.endswith(".py") and "/envs/" not in name:
            for kind, n in line_kinds(_git("show", f"{rev}:{name}")).items():
                total[kind] += n
            total["files"] += 1
    return total


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rev", action="append", help="a git revision (repeatable; default HEAD)")
    p.add_argument("--student", action="store_true", help="only the student's path: " + ", ".join(STUDENT_PATH))
    args = p.parse_args()
    paths = STUDENT_PATH if args.student else ("openmanus_lite",)
    result = {rev: library_size(rev, paths) for rev in args.rev or ["HEAD"]}
    for rev, counts in result.items():
        print(f"{rev}: " + ", ".join(f"{k} {v:,}" for k, v in counts.items()))
    print("RESULT " + json.dumps({"paths": list(paths), "revisions": result}))


if __name__ == "__main__":
    main()

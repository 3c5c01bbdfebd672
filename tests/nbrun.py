"""Execute a notebook headless with small settings, as the test suite does.

A notebook has one code cell tagged `parameters`; `run_notebook` inserts a cell right
after it that overrides those values (the papermill convention), then runs every cell
with nbclient in the notebook's folder. Any cell error fails the test.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def run_notebook(name: str, params: dict | None = None, timeout: int = 600) -> nbformat.NotebookNode:
    path = NOTEBOOKS / name
    nb = nbformat.read(path, as_version=4)
    if params:
        idx = next(
            (i for i, c in enumerate(nb.cells) if "parameters" in c.get("metadata", {}).get("tags", [])), None
        )
        if idx is None:
            raise AssertionError(f"{name} has no cell tagged 'parameters'")
        src = "\n".join(f"{k} = {v!r}" for k, v in params.items())
        nb.cells.insert(idx + 1, nbformat.v4.new_code_cell(src))
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute()
    return nb

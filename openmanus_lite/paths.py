"""Where the kit's files live: shipped data, the real-sample folder, run outputs.

The sample files and the frozen benchmark suites are package data (`openmanus_lite/resources/`),
so they are found the same way from a clone, an editable install and an installed wheel.
"""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent
IN_CHECKOUT = (REPO_ROOT / "pyproject.toml").is_file()
"""True when the package is imported from a clone (editable install or PYTHONPATH), False from a wheel."""


def _resource_dir(name: str) -> Path:
    """A folder of package data as a real path (the kit reads it with pathlib)."""
    found = files("openmanus_lite") / name
    if not isinstance(found, Path):
        raise RuntimeError(f"openmanus_lite is imported from {type(found).__name__} ({found}), not from a folder; "
                           f"install it as a regular (unzipped) package to read its shipped data")
    return found


DATA_DIR = _resource_dir("resources")
"""Shipped sample files (`samples/`) and frozen benchmark suites (`benchmark/`), inside the package."""

SAMPLES_DIR = DATA_DIR / "samples"
"""Small sample files in each source dataset's exact schema, one folder per source."""

RUNS_DIR = REPO_ROOT / "runs" if IN_CHECKOUT else Path("runs")
"""Default home of run outputs: the clone's `runs/`, or `runs/` under the working directory when installed."""

REAL_SAMPLES_DIR = Path(os.environ.get("OPENMANUS_REAL_SAMPLES", REPO_ROOT.parent / "shared" / "real_samples"))
"""Real public rows of the source datasets, when this checkout has them beside it."""

CACHE_DIR = Path(os.environ.get("OPENMANUS_CACHE", Path.home() / ".cache" / "openmanus_lite"))
"""Converted models and other one-time artefacts."""

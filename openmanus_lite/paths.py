"""Where the kit's files live: shipped data, merged datasets, the real-sample folder, run outputs.

The sample files and the frozen benchmark suites sit in the top-level `data/` folder of a clone; the
wheel carries the same folder as the package `openmanus_lite.resources` (pyproject.toml maps it). The
package's own location tells which one is in use, so a clone, an editable install and an installed
wheel all find the data through `DATA_DIR`.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent
IN_CHECKOUT = (REPO_ROOT / "pyproject.toml").is_file() and (REPO_ROOT / "data").is_dir()
"""True when the package is imported from a clone (editable install or PYTHONPATH), False from a wheel."""

DATA_DIR = REPO_ROOT / "data" if IN_CHECKOUT else PACKAGE_DIR / "resources"
"""Shipped sample files (`samples/`), frozen benchmark suites (`benchmark/`) and measured curves (`results/`)."""

SAMPLES_DIR = DATA_DIR / "samples"
"""Small sample files in each source dataset's exact schema, one folder per source."""

MERGED_DIR = DATA_DIR / "merged" if IN_CHECKOUT else Path("data") / "merged"
"""Default home of merged datasets (git-ignored, never in the wheel): the clone's `data/merged/`, or
`data/merged/` under the working directory when installed."""

RUNS_DIR = REPO_ROOT / "runs" if IN_CHECKOUT else Path("runs")
"""Default home of run outputs: the clone's `runs/`, or `runs/` under the working directory when installed."""

REAL_SAMPLES_DIR = Path(os.environ.get("OPENMANUS_REAL_SAMPLES", REPO_ROOT.parent / "shared" / "real_samples"))
"""Real public rows of the source datasets, when this checkout has them beside it."""

CACHE_DIR = Path(os.environ.get("OPENMANUS_CACHE", Path.home() / ".cache" / "openmanus_lite"))
"""Converted models and other one-time artefacts."""

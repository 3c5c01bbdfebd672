"""Where the kit's files live: shipped data, merged datasets, the real-sample folder, run outputs.

The sample files and the frozen benchmark suites sit in the top-level `data/` folder of a clone; the wheel carries
the same folder as the package `openmanus_lite.resources` (pyproject.toml maps it). The package's own location tells
which one is in use, so a clone, an editable install and an installed wheel all find the data through `DATA_DIR`.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent
# True when the package is imported from a clone (editable install or PYTHONPATH), False from a wheel
IN_CHECKOUT = (REPO_ROOT / "pyproject.toml").is_file() and (REPO_ROOT / "data").is_dir()
# shipped sample files (`samples/`, one folder per source), frozen suites (`benchmark/`), measured curves (`results/`)
DATA_DIR = REPO_ROOT / "data" if IN_CHECKOUT else PACKAGE_DIR / "resources"
SAMPLES_DIR = DATA_DIR / "samples"
# merged datasets (git-ignored, never in the wheel) and run outputs: in the clone, else under the working directory
MERGED_DIR = DATA_DIR / "merged" if IN_CHECKOUT else Path("data") / "merged"
RUNS_DIR = REPO_ROOT / "runs" if IN_CHECKOUT else Path("runs")
# real public rows of the source datasets, when this checkout has them beside it
REAL_SAMPLES_DIR = Path(os.environ.get("OPENMANUS_REAL_SAMPLES", REPO_ROOT.parent / "shared" / "real_samples"))
CACHE_DIR = Path(os.environ.get("OPENMANUS_CACHE", Path.home() / ".cache" / "openmanus_lite"))  # converted models etc.

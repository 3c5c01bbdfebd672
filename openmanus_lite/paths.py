"""Where the kit's files live: shipped data, the real-sample folder, run outputs."""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent
DATA_DIR = REPO_ROOT / "data"
"""Shipped sample files and frozen benchmark suites (present in a clone / editable install)."""

REAL_SAMPLES_DIR = Path(os.environ.get("OPENMANUS_REAL_SAMPLES", REPO_ROOT.parent / "shared" / "real_samples"))
"""Real public rows of the source datasets, when this checkout has them beside it."""

CACHE_DIR = Path(os.environ.get("OPENMANUS_CACHE", Path.home() / ".cache" / "openmanus_lite"))
"""Converted models and other one-time artefacts."""

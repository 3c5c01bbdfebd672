import os
import random
import sys
from pathlib import Path

import pytest

try:  # unsloth must be imported before trl/transformers to patch them (and TRL's CPU kernels)
    import unsloth  # noqa: F401
except ImportError:
    pass

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from openmanus_lite.paths import REAL_SAMPLES_DIR  # noqa: E402


@pytest.fixture(autouse=True)
def _seed():
    random.seed(0)


@pytest.fixture
def real_samples() -> Path:
    """The shared real-sample folder; tests that need it skip cleanly where it is absent."""
    if not REAL_SAMPLES_DIR.is_dir():
        pytest.skip(f"real samples not found at {REAL_SAMPLES_DIR}")
    return REAL_SAMPLES_DIR

"""benchmarks/train_attention.py: torch's kernel and the block attention timed side by side, with what each keeps."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[1]


def test_a_small_measurement(capsys):
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import train_attention
    finally:
        sys.path.pop(0)
    from openmanus_lite.engine import attention

    before = attention.BLOCK_ROWS
    assert train_attention.main(["--positions", "300", "--dtypes", "bfloat16", "--rows", "64", "--repeats", "1",
                                 "--threads", "1"]) == 0
    out = capsys.readouterr().out
    rows = json.loads(next(x for x in out.splitlines() if x.startswith("RESULT "))[len("RESULT "):])["results"]
    assert [r["attention"] for r in rows] == ["flash", "block64"]
    flash, block = rows
    assert flash["speedup_vs_flash"] == 1.0 and block["total_ms"] > 0
    assert block["saved_mb"] > flash["saved_mb"] > 0  # at 300 positions the blocks keep more (their probabilities)
    assert attention.BLOCK_ROWS == before

"""benchmarks/generation_throughput.py on the tiny model: first and later turns (the later ones reuse a copy of the
kit's warm prefix cache), each share against the machine's matmul rate."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_first_and_later_turns(capsys):
    sys.path.insert(0, str(REPO))
    try:
        from benchmarks import generation_throughput as bench
    finally:
        sys.path.pop(0)
    from openmanus_lite.train.presets import tiny_model_path

    code = bench.main(["--model", str(tiny_model_path()), "--batches", "2", "--turns", "first", "later",
                       "--modes", "greedy", "--rounds", "1", "--new-tokens", "4", "--episodes-at-batch-1", "1",
                       "--threads", "1"])
    out = capsys.readouterr().out
    result = json.loads(next(x for x in out.splitlines() if x.startswith("RESULT "))[len("RESULT "):])
    assert code == 0 and [c["turn"] for c in result["cases"]] == ["first", "later"]
    for case in result["cases"]:
        assert case["kit_tokens_per_s"] > 0 and case["plain_tokens_per_s"] > 0
        assert case["kit_share_of_matmul"] == pytest.approx(
            case["kit_tokens_per_s"] * result["flops_per_token"] / (result["matmul_gflops"] * 1e9), abs=1e-3)

"""benchmarks/generation_throughput.py on the tiny model: first and later turns (the later ones reuse a copied warm
prefix cache), and two dtypes side by side with every share against the machine's matmul rate."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_two_dtypes_first_and_later_turns(capsys):
    sys.path.insert(0, str(REPO))
    try:
        from benchmarks import generation_throughput as bench
    finally:
        sys.path.pop(0)
    from openmanus_lite.train.presets import tiny_model_path

    code = bench.main(["--model", str(tiny_model_path()), "--batches", "2", "--turns", "first", "later",
                       "--modes", "greedy", "--rounds", "1", "--new-tokens", "4", "--episodes-at-batch-1", "1",
                       "--dtypes", "float32,bfloat16", "--threads", "1"])
    out = capsys.readouterr().out
    result = json.loads(next(x for x in out.splitlines() if x.startswith("RESULT "))[len("RESULT "):])
    assert code == 0 and [c["turn"] for c in result["cases"]] == ["first", "later"]
    assert set(result["decode_share_of_matmul_by_runner"]) == {"kit", "kit_bfloat16"}
    assert {"float32", "bfloat16"} <= set(result["matmul_gflops_by_dtype"])
    gflops = result["matmul_gflops"]
    assert gflops == result["matmul_gflops_by_dtype"][result["matmul_dtype"]]
    for case in result["cases"]:
        for who in ("kit", "kit_bfloat16"):
            assert case[f"{who}_tokens_per_s"] > 0
            assert case[f"{who}_share_of_matmul"] == pytest.approx(
                case[f"{who}_tokens_per_s"] * result["flops_per_token"] / (gflops * 1e9), abs=1e-3)

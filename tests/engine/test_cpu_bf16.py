"""benchmarks/cpu_bf16.py: both dtypes timed on one small MLP step, one RESULT line."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")


def test_cpu_bf16_benchmark_times_both_dtypes(capsys):
    from benchmarks.cpu_bf16 import main

    assert main(["--tokens", "256", "--repeats", "1", "--threads", "1"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("RESULT "))
    result = json.loads(line[len("RESULT "):])
    assert result["float32_ms"] > 0 and result["bfloat16_ms"] > 0 and result["tokens"] == 256
    assert result["bf16_speedup"] == pytest.approx(result["float32_ms"] / result["bfloat16_ms"], rel=0.05)
    assert isinstance(result["native_bf16"], bool)

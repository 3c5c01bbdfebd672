"""benchmarks/cpu_bf16.py: the matmul rate in both dtypes, one RESULT line; the FLOP counts behind every share."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from openmanus_lite.engine import speed  # noqa: E402


def test_cpu_bf16_benchmark_times_both_dtypes(capsys):
    from benchmarks.cpu_bf16 import main

    assert main(["--tokens", "64", "--seconds", "0.05", "--threads", "1"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("RESULT "))
    result = json.loads(line[len("RESULT "):])
    assert result["float32_gflops"] > 0 and result["bfloat16_gflops"] > 0 and result["tokens"] == 64
    assert result["bf16_speedup"] == pytest.approx(result["bfloat16_gflops"] / result["float32_gflops"], rel=0.05)
    assert isinstance(result["native_bf16"], bool)


def test_the_probe_times_at_least_one_pass_after_the_warm_up():
    assert speed.matmul_gflops(torch.float32, tokens=16, seconds=0.0) > 0
    from openmanus_lite.engine.precision import cpu_has_native_bf16

    assert speed.matmul_dtype() == (torch.bfloat16 if cpu_has_native_bf16() else torch.float32)


def test_flop_counts_of_training_and_decoding():
    # SmolLM2-135M's linear layers: 30 x (2 x 576^2 + 2 x 576 x 192 + 3 x 576 x 1536) + the tied head 576 x 49152
    layer = 2 * 576 * 576 + 2 * 576 * 192 + 3 * 576 * 1536
    assert sum(i * o for i, o in speed.LAYER_SHAPES) == layer
    n = 30 * layer + 576 * 49152
    assert n == 134_479_872
    assert speed.training_flops_per_token(n) == 4 * n  # LoRA: forward + the inputs' gradients
    assert speed.training_flops_per_token(n, full=True) == 6 * n
    assert speed.training_flops_per_token(n, full=True, recompute=True) == 8 * n
    assert speed.decode_flops_per_token(n) == 2 * n
    # 217.6 tokens/s of LoRA SFT against 378 GFLOP/s: 31% of the machine
    assert speed.share_of_matmul(217.6, 4 * n, 378.0) == 0.31


def test_matmul_params_counts_linear_layers_not_embeddings():
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 3), torch.nn.ReLU(),
                                torch.nn.Linear(3, 10, bias=False))
    assert speed.matmul_params(model) == 4 * 3 + 3 * 10

"""benchmarks/train_throughput.py: a real bf16 measurement at a small size with its share of the matmul rate, the
kit's labelled-only LM head against the full one, and interleaved rounds with medians."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("trl")

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import train_throughput
    finally:
        sys.path.pop(0)
    return train_throughput


def _result(capsys) -> dict:
    out = capsys.readouterr().out
    return json.loads(next(x for x in out.splitlines() if x.startswith("RESULT "))[len("RESULT "):])


def test_a_bf16_measurement_of_the_tiny_model(bench, capsys):
    code = bench.main(["--models", "tiny", "--backends", "unsloth", "--dtype", "bfloat16", "--steps", "1",
                       "--warmup", "0", "--batch-size", "2", "--seq-len", "512", "--threads", "1"])
    result = _result(capsys)
    assert code == 0 and result["failures"] == []
    (row,) = result["results"]
    assert row["dtype"] == "bfloat16" and row["tokens_per_s"] > 0 and row["trainable"] > 0
    assert row["matmul_dtype"] == "bfloat16" and row["matmul_gflops"] > 0
    assert row["share_of_matmul"] == pytest.approx(
        row["tokens_per_s"] * row["flops_per_token"] / (row["matmul_gflops"] * 1e9), abs=1e-3)
    assert result["medians"] == [{"model": Path(row["model"]).name, "backend": "unsloth", "variant": "all",
                                  "dtype": "bfloat16", "lm_head": "labelled", "compile_layers": False,
                                  "batch_size": 2, "padding_free": False, "block_attention": True, "rounds": 1,
                                  "median_tokens_per_s": row["tokens_per_s"],
                                  "median_matmul_gflops": row["matmul_gflops"],
                                  "median_share_of_matmul": row["share_of_matmul"], "ratio_to_first": 1.0}]


def test_the_labelled_head_is_the_same_loss_at_fewer_flops(bench, capsys):
    """TRL's fused head (what the kit's SFTTrainer runs) scores the same loss as the model's own over every position,
    and counts the LM head's FLOPs on the labelled positions only."""
    code = bench.main(["--models", "tiny", "--backends", "unsloth", "--lm-head", "labelled,all", "--steps", "1",
                       "--warmup", "0", "--batch-size", "2", "--seq-len", "512", "--threads", "1"])
    result = _result(capsys)
    assert code == 0 and result["failures"] == []
    fused, full = result["results"]
    assert (fused["lm_head"], full["lm_head"]) == ("labelled", "all")
    assert fused["loss"] == pytest.approx(full["loss"], abs=2e-3)  # the adapters start as the identity
    assert 0 < fused["labelled_share"] == full["labelled_share"] < 1
    assert fused["flops_per_token"] < full["flops_per_token"]


def test_rounds_interleave_the_dtypes_and_report_medians(bench, capsys, monkeypatch):
    speeds = iter([100.0, 150.0, 120.0, 170.0, 90.0, 160.0])  # fp32, bf16, fp32, bf16, ...

    def fake_run_one(spec, timeout, failures):
        tokens_per_s = next(speeds)
        return {"model": spec["model"], "backend": spec["backend"], "variant": spec["variant"],
                "dtype": spec["dtype"], "lm_head": spec["lm_head"], "compile_layers": spec["compile_layers"],
                "batch_size": spec["batch_size"], "padding_free": spec["padding_free"],
                "block_attention": spec["block_attention"], "tokens_per_s": tokens_per_s, "matmul_gflops": 200.0,
                "share_of_matmul": tokens_per_s / 1000}

    monkeypatch.setattr(bench, "run_one", fake_run_one)
    assert bench.main(["--models", "tiny", "--backends", "unsloth", "--dtype", "float32,bfloat16",
                       "--rounds", "3", "--threads", "1"]) == 0
    result = _result(capsys)
    assert [r["dtype"] for r in result["results"]] == ["float32", "bfloat16"] * 3
    medians = {m["dtype"]: m for m in result["medians"]}
    assert medians["float32"]["median_tokens_per_s"] == 100.0 and medians["float32"]["ratio_to_first"] == 1.0
    assert medians["bfloat16"]["median_tokens_per_s"] == 160.0 and medians["bfloat16"]["ratio_to_first"] == 1.6
    assert medians["bfloat16"]["median_share_of_matmul"] == 0.16 and medians["bfloat16"]["median_matmul_gflops"] == 200
    assert all(m["rounds"] == 3 for m in medians.values())
    # a value neither choice names is refused before any measurement, not measured as "off"
    for flag, bad in (("--compile-layers", "off,yes"), ("--lm-head", "last"), ("--padding-free", "no"),
                      ("--block-attention", "flash")):
        with pytest.raises(SystemExit):
            bench.main(["--models", "tiny", flag, bad])
        assert f"{flag}: {bad.split(',')[-1]} is not one of" in capsys.readouterr().err


def test_padding_free_batches_train_alike_and_count_no_padding(bench, capsys):
    """Each batch's conversations in one row (TRL's padding_free): the same conversations, losses and updates as the
    padded batch, and only real tokens counted; one conversation a pass is measured once, not packed."""
    code = bench.main(["--models", "tiny", "--backends", "unsloth", "--padding-free", "off,on", "--steps", "2",
                       "--warmup", "0", "--batch-size", "1,2", "--seq-len", "512", "--threads", "1"])
    result = _result(capsys)
    assert code == 0 and result["failures"] == []
    single, padded, packed = result["results"]
    assert [(r["batch_size"], r["padding_free"]) for r in (single, padded, packed)] == [(1, False), (2, False),
                                                                                        (2, True)]
    assert packed["loss"] == pytest.approx(padded["loss"], abs=1e-4)
    assert packed["labelled_share"] == pytest.approx(padded["labelled_share"], abs=0.02)
    with pytest.raises(SystemExit):
        bench.main(["--padding-free", "on", "--batch-size", "1"])


def test_block_attention_against_torchs_kernel_trains_alike(bench, capsys):
    """`--block-attention off,on`: torch's CPU flash kernel against the kit's block attention, packed bf16 rows of the
    tiny model (grouped-query heads): the same loss within bf16 rounding."""
    code = bench.main(["--models", "tiny", "--backends", "unsloth", "--dtype", "bfloat16", "--block-attention", "off,on",
                       "--padding-free", "on", "--steps", "2", "--warmup", "0", "--batch-size", "2", "--seq-len", "512",
                       "--threads", "1"])
    result = _result(capsys)
    assert code == 0 and result["failures"] == []
    flash, block = result["results"]
    assert (flash["block_attention"], block["block_attention"]) == (False, True)
    assert block["loss"] == pytest.approx(flash["loss"], abs=2e-2)

"""benchmarks/gpu_smoke.py runs on the CPU with the tiny model, so the GPU smoke script cannot rot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_smoke.py"
EXPECTED = {"device", "precision", "load_4bit", "on_device/tiny", "batch8_equals_batch1/tiny",
            "prefix_cache_equal/tiny", "sft", "grpo_multi_turn", "evaluation", "save_merge_reload", "dpo",
            "unsloth_vs_hf"}


def test_gpu_smoke_passes_on_cpu(tmp_path):
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--new-tokens", "8", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=420, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and len(lines) == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(lines[0].removeprefix("RESULT "))
    assert result["ok"] and result["failed"] == [] and result["device"] == "cpu"
    assert set(result["checks"]) == EXPECTED
    assert result["checks"]["load_4bit"]["ok"] is None and "no CUDA" in result["checks"]["load_4bit"]["detail"]
    assert all(v["ok"] for k, v in result["checks"].items() if k != "load_4bit")
    for stage in ("generate/tiny", "sft", "grpo_multi_turn", "evaluation"):
        assert result["stages"][stage]["tokens_per_s"] > 0 and result["stages"][stage]["rss_mb"] > 0


def test_a_broken_or_late_stage_is_a_failed_check():
    """A stage that raises, or starts after the time limit, fails its check instead of ending the run."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_smoke", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    smoke = module.Smoke(cuda=False, time_limit=600)
    with smoke.stage("fine"):
        smoke.check("fine", True, "ok")
    with smoke.stage("broken"):
        raise ValueError("a broken stage")
    smoke.skip("absent", "not here")
    assert smoke.failed == ["broken"] and "a broken stage" in smoke.checks["broken"]["detail"]
    late = module.Smoke(cuda=False, time_limit=0)
    with late.stage("late") as info:
        assert info["skipped"]
    assert late.failed == ["late"]


@pytest.mark.parametrize("capability, expected", [("7.5", "float16 True False True False"),
                                                  ("9.0", "bfloat16 False True True True")])
def test_a_reported_capability_drives_the_precision_decisions(capability, expected):
    """--capability 7.5 makes a newer GPU take a T4's decisions (float16, grad scaler; bf16 only emulated). Run in a
    child process: the patch is process-wide, as it must be before unsloth is imported."""
    code = (f"import gpu_smoke, torch; gpu_smoke.report_capability({capability!r}); torch.cuda.is_available = lambda: True\n"
            "from openmanus_lite.engine.precision import resolve_precision\n"
            "p = resolve_precision(); print(p.name, p.fp16, p.bf16, torch.cuda.is_bf16_supported(), "
            "torch.cuda.is_bf16_supported(including_emulation=False))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=SCRIPT.parent)
    assert proc.stdout.strip().splitlines()[-1] == expected, proc.stderr[-2000:]


def test_grad_scaler_skips_are_counted_from_the_halved_scale():
    import importlib.util
    from types import SimpleNamespace

    spec = importlib.util.spec_from_file_location("gpu_smoke", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def trainer(scale):
        scaler = None if scale is None else SimpleNamespace(get_scale=lambda: scale)
        return SimpleNamespace(accelerator=SimpleNamespace(scaler=scaler))

    assert module.scaler_skips(2.0**16, trainer(2.0**14)) == 2 and module.grad_scale(trainer(8.0)) == 8.0
    assert module.scaler_skips(2.0**16, trainer(2.0**16)) == 0 and module.scaler_skips(None, trainer(None)) == 0

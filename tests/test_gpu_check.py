"""The GPU path's plumbing on a CPU (issue #42): benchmarks/gpu_check.sh (install from a wheelhouse, each part's
time limit and failure report), benchmarks/gpu_probe.py end to end on a tiny random Qwen2, and the Colab defects:
a torch that cannot use the GPU is said loudly and a GPU preset refused, a replaced torch asks for a restart."""

from __future__ import annotations

import builtins
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"


def _check(tmp_path: Path, parts: str, **env: str) -> subprocess.CompletedProcess:
    """gpu_check.sh on the CPU with these parts, figures in tmp_path/out."""
    full = {**os.environ, "GPU_CHECK_DEVICE": "cpu", "GPU_CHECK_PARTS": parts, "OUT": str(tmp_path / "out"),
            "WORK": str(tmp_path / "work"), "PYTHON": sys.executable, **env}
    return subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=full, timeout=600)


def _wheel(folder: Path) -> Path:
    """A minimal pure-Python wheel (one module), as pip builds them."""
    folder.mkdir(parents=True)
    path = folder / "gpu_check_probe_pkg-0.1-py3-none-any.whl"
    files = {"gpu_check_probe_pkg.py": "ANSWER = 42\n",
             "gpu_check_probe_pkg-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: gpu-check-probe-pkg\nVersion: 0.1\n",
             "gpu_check_probe_pkg-0.1.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                                       "Tag: py3-none-any\n"}
    record = "".join(f"{name},,\n" for name in files) + "gpu_check_probe_pkg-0.1.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for name, text in {**files, "gpu_check_probe_pkg-0.1.dist-info/RECORD": record}.items():
            z.writestr(name, text)
    return path


def test_install_part_puts_the_wheelhouse_into_the_target_folder(tmp_path):
    _wheel(tmp_path / "whl")
    site = tmp_path / "site"
    proc = _check(tmp_path, "install", WHEELHOUSE=str(tmp_path / "whl"), SITE=str(site))
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert proc.returncode == 0, summary + proc.stdout + proc.stderr
    assert (site / "gpu_check_probe_pkg.py").is_file() and "install      ok" in summary
    assert "gpu-check-probe-pkg==0.1" in (tmp_path / "out" / "install.log").read_text()  # pip list of the target
    ran = subprocess.run([sys.executable, "-c", "import gpu_check_probe_pkg as m; print(m.ANSWER)"],
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(site)})
    assert ran.stdout.strip() == "42"


def test_a_failed_and_a_timed_out_part_are_reported_and_the_next_part_runs(tmp_path):
    out = tmp_path / "out"
    body = ('source "$SCRIPT"; : >"$SUMMARY"; : >"$OUT/tails.txt"\n'
            'run_part broken 20 bash -c "echo the reason it broke; exit 3"\n'
            'run_part slow 1 sleep 30\n'
            "run_part fine 20 printf 'RESULT {\"ok\": true}\\n'\n"
            'echo "FAILED=$FAILED"')
    proc = subprocess.run(["bash", "-c", body], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "SCRIPT": str(SCRIPT), "GPU_CHECK_LIB": "1", "OUT": str(out)})
    lines = (out / "summary.txt").read_text().splitlines()
    assert [ln.split()[:3] for ln in lines] == [["broken", "FAILED", "rc=3"], ["slow", "TIMED_OUT(1s)", "rc=124"],
                                                ["fine", "ok", "rc=0"]]
    assert "FAILED=2" in proc.stdout
    tails = (out / "tails.txt").read_text()
    assert "--- broken" in tails and "the reason it broke" in tails and "--- slow" in tails and "--- fine" not in tails
    assert json.loads((out / "fine.json").read_text()) == {"ok": True} and not (out / "broken.json").exists()


@pytest.mark.slow
def test_probe_runs_end_to_end_on_a_tiny_random_qwen2(tmp_path):
    proc = _check(tmp_path, "probe")
    out = tmp_path / "out"
    summary = (out / "summary.txt").read_text()
    assert proc.returncode == 0, summary
    result = json.loads((out / "probe.json").read_text())
    assert result["ok"] and result["device"] == "cpu" and result["shape"] == "tiny" and result["preset"] == "t4"
    assert set(result["checks"]) == {"load_4bit", "sft", "grpo", "evaluation", "save_merge_reload"}
    stages = result["stages"]
    assert stages["load"]["linear_4bit"] == 14  # 2 layers x 7 projections, through the t4 preset's loader
    assert stages["sft"]["batch_accum_length"] == [4, 4, 128] and stages["sft"]["tokens_per_s"] > 0
    grpo = stages["grpo"]
    assert grpo["episodes"] == 32 and grpo["generations_batch_accum"] == [8, 8, 2] and grpo["env_mask_zeros"] > 0
    assert grpo["grad_scaler_skips"] == 0 and grpo["rollout_tokens_per_s"] > 0
    assert stages["evaluation"]["tokens_per_s"] > 0 and set(result["estimate_gb"]) == {"load", "sft", "grpo", "evaluation"}
    assert all(stage["rss_mb"] > 0 for stage in stages.values())


# --------------------------------------------------------------------------- Colab defects


def test_a_gpu_that_torch_cannot_use_is_named_with_its_reason(monkeypatch, tmp_path):
    torch = pytest.importorskip("torch")
    from openmanus_lite import models

    driver = tmp_path / "version"
    driver.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  470.82.01\nGCC version: 9\n")
    monkeypatch.setattr(models, "NVIDIA_DRIVER", driver)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)

    def init():
        raise RuntimeError("The NVIDIA driver on your system is too old (found version 11040).")

    monkeypatch.setattr(torch.cuda, "init", init)
    reason = models.gpu_unusable_reason()
    assert "470.82.01" in reason and "too old (found version 11040)" in reason and "Restart session" in reason
    with pytest.raises(RuntimeError, match="preset 't4' needs a CUDA GPU.*too old"):
        models.require_gpu("preset 't4'")
    monkeypatch.setattr(models, "NVIDIA_DRIVER", tmp_path / "absent")  # no NVIDIA driver: a plain CPU machine
    assert models.gpu_unusable_reason() is None
    with pytest.raises(RuntimeError, match="no NVIDIA GPU: use the `cpu` preset"):
        models.require_gpu("preset 't4'")


def test_require_gpu_passes_on_a_gpu(fake_gpu):
    from openmanus_lite import models

    fake_gpu("t4")
    models.require_gpu("preset 't4'")


def test_an_unsloth_that_fails_to_import_is_said_loudly(monkeypatch):
    from openmanus_lite import models

    real_import = builtins.__import__
    error: list[Exception] = []

    def fake_import(name, *args, **kwargs):
        if name == "unsloth":
            raise error[0]
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    error[:] = [NotImplementedError("Unsloth cannot find any torch accelerator? You need a GPU.")]
    with pytest.warns(RuntimeWarning, match="unsloth is installed but does not import.*cannot find any torch"):
        assert models.unsloth_available() is False
    error[:] = [ModuleNotFoundError("No module named 'unsloth'", name="unsloth")]  # not installed: a quiet choice
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert models.unsloth_available() is False


def test_a_torch_replaced_under_a_running_notebook_asks_for_a_restart(monkeypatch):
    torch = pytest.importorskip("torch")
    import importlib.metadata

    from openmanus_lite.models import torch_replaced_message

    assert torch_replaced_message() is None  # the torch imported here is the installed one: the cell stays silent
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "9.9.9+cu999")
    message = torch_replaced_message()
    assert f"torch {torch.__version__}" in message and "9.9.9+cu999" in message and "restart the runtime" in message
    monkeypatch.delitem(sys.modules, "torch")  # torch never imported before the install: nothing to restart
    assert torch_replaced_message() is None


def test_probe_model_has_qwen_shapes_and_a_tokenizer_that_fits(monkeypatch, tmp_path):
    """The qwen2.5-1.5b path of the probe with the shape shrunk (its vocabulary kept): config from memory.py's numbers,
    eos / pad ids from the tokenizer the folder ships."""
    import dataclasses
    import importlib.util

    from openmanus_lite.models import load_tokenizer
    from openmanus_lite.train import memory

    spec = importlib.util.spec_from_file_location("gpu_probe", ROOT / "benchmarks" / "gpu_probe.py")
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    monkeypatch.setattr(memory, "QWEN25_1_5B", dataclasses.replace(memory.QWEN25_1_5B, hidden=64, layers=2, heads=4,
                                                                    intermediate=128))
    folder, what = probe.build_model("qwen2.5-1.5b", None, tmp_path, cuda=False)
    cfg = json.loads((folder / "config.json").read_text())
    tok = load_tokenizer(folder)
    assert "kit's tiny tokenizer" in what and cfg["vocab_size"] == 151936 and cfg["num_key_value_heads"] == 2
    assert cfg["eos_token_id"] == tok.eos_token_id and cfg["pad_token_id"] == tok.pad_token_id and tok.chat_template


def test_a_4bit_model_decodes_without_a_plain_bf16_copy(monkeypatch):
    """The CPU decoding loop's bf16 copy merges LoRA into plain weights; bitsandbytes' packed 4-bit weights have no
    plain form (the probe's QLoRA rollout failed on it), so a quantized model decodes as it is."""
    torch = pytest.importorskip("torch")
    from openmanus_lite.engine import generation, precision

    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: True)
    model = torch.nn.Linear(4, 4)
    assert generation._loop_dtype(model, "cpu", return_logprobs=False) == torch.bfloat16
    model.register_parameter("packed", torch.nn.Parameter(torch.zeros(4, dtype=torch.uint8), requires_grad=False))
    assert generation._loop_dtype(model, "cpu", return_logprobs=False) is None


def test_a_gpu_preset_is_refused_on_a_cpu_before_anything_loads(monkeypatch, tmp_path):
    torch = pytest.importorskip("torch")
    from openmanus_lite import models
    from openmanus_lite.train.presets import get_preset

    def load_model(*args, **kwargs):
        raise AssertionError("a GPU preset on a CPU must be refused before loading")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(models, "NVIDIA_DRIVER", tmp_path / "absent")
    monkeypatch.setattr(models, "load_model", load_model)
    for name in ("t4", "gpu8"):
        with pytest.raises(RuntimeError, match=rf"preset '{name}' \(sized for a \d+ GB GPU\) needs a CUDA GPU"):
            get_preset(name).load()


def test_the_default_preset_says_why_a_gpu_machine_falls_back_to_the_cpu(monkeypatch, tmp_path):
    torch = pytest.importorskip("torch")
    import warnings

    from openmanus_lite import models
    from openmanus_lite.train.presets import default_preset_name

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(models, "NVIDIA_DRIVER", tmp_path / "absent")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a machine without an NVIDIA driver: the cpu preset, silently
        assert default_preset_name() == "cpu"
    (tmp_path / "version").write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  470.82.01\n")
    monkeypatch.setattr(models, "NVIDIA_DRIVER", tmp_path / "version")
    monkeypatch.setattr(torch.cuda, "init", lambda: (_ for _ in ()).throw(RuntimeError("driver too old")))
    with pytest.warns(RuntimeWarning, match="470.82.01.*driver too old.*the `cpu` preset is chosen"):
        assert default_preset_name() == "cpu"


@pytest.mark.parametrize("name", ["t4", "gpu8"])
def test_gpu_presets_give_grpo_a_half_hour_budget(name):
    from openmanus_lite.train.presets import GPU_GRPO_MINUTES, get_preset

    assert GPU_GRPO_MINUTES == 30 and get_preset(name).grpo["max_minutes"] == 30
    assert get_preset(name).grpo_config(use_vllm=False).max_minutes == 30

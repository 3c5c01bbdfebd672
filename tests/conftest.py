import os
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

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


# --------------------------------------------------------------------------- simulated GPUs


@dataclass(frozen=True)
class FakeGPU:
    """A CUDA device as `torch.cuda` reports it; `total_memory` in bytes as get_device_properties gives it."""

    name: str
    capability: tuple[int, int]
    total_memory: int

    @property
    def total_gb(self) -> float:
        return self.total_memory / 1e9


FAKE_GPUS = {
    "t4": FakeGPU("Tesla T4", (7, 5), 15_828_320_256),  # Colab's "15 GB"; bf16 only emulated
    "rtx3070": FakeGPU("NVIDIA GeForce RTX 3070", (8, 6), 8_589_934_592),  # an 8 GB consumer card (Ampere)
    "a100": FakeGPU("NVIDIA A100-SXM4-40GB", (8, 0), 42_505_273_344),
}


@pytest.fixture
def fake_gpu(monkeypatch):
    """`fake_gpu("t4")` (or a FakeGPU) makes `torch.cuda` report that card for the rest of the test.

    It patches what the kit and transformers ask (is_available, device_count, current_device,
    get_device_capability / name / properties, mem_get_info, is_bf16_supported, which like the real
    one counts emulation unless `including_emulation=False`) and clears transformers' cached answers.
    Nothing runs on it: Unsloth chose its CPU path at import, and tensors still live on the CPU.
    """
    import torch
    from transformers.utils import import_utils

    cached = [import_utils.is_torch_cuda_available, import_utils.is_torch_bf16_gpu_available]

    def install(card: FakeGPU | str) -> FakeGPU:
        gpu = FAKE_GPUS[card] if isinstance(card, str) else card
        major, minor = gpu.capability
        props = SimpleNamespace(name=gpu.name, major=major, minor=minor, total_memory=gpu.total_memory,
                                multi_processor_count=40)
        for attr, fn in {
            "is_available": lambda: True,
            "device_count": lambda: 1,
            "current_device": lambda: 0,
            "get_device_capability": lambda device=None: (major, minor),
            "get_device_name": lambda device=None: gpu.name,
            "get_device_properties": lambda device=None: props,
            "mem_get_info": lambda device=None: (gpu.total_memory, gpu.total_memory),
            "is_bf16_supported": lambda including_emulation=True: major >= 8 or including_emulation,
        }.items():
            monkeypatch.setattr(torch.cuda, attr, fn)
        for fn in cached:
            fn.cache_clear()
        return gpu

    yield install
    for fn in cached:
        fn.cache_clear()

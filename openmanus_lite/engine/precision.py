"""One decision of the training and compute dtype from the device, used by every loader and trainer.

Why: `torch.cuda.is_bf16_supported()` says True on a T4, where bf16 is only emulated, and Unsloth's trainers then
refuse the run. So bf16 only where the device multiplies it natively (GPUs from Ampere; a CPU when asked, emulated
bf16 measured ~28x slower); older GPUs get float16, a CPU float32. A request the device cannot do natively is a
ValueError, except emulated bf16 on a CPU: a warning (a ValueError with `strict=True`).
"""

from __future__ import annotations

import platform
import warnings
from dataclasses import dataclass
from typing import Any

NATIVE_BF16_CAPABILITY = (8, 0)  # CUDA compute capability with native bf16 matmuls (Ampere)

_NAMES = {"float32": "float32", "fp32": "float32", "float": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
          "float16": "float16", "fp16": "float16", "half": "float16"}


@dataclass(frozen=True)
class Precision:
    """What to load and train in: `dtype` for the loaders, `bf16` / `fp16` for trainer configs (False on a CPU unless
    asked for: the CPU trains in the weights' dtype)."""

    dtype: Any
    bf16: bool
    fp16: bool
    device: str  # 'cuda' or 'cpu'

    @property
    def name(self) -> str:
        return str(self.dtype).removeprefix("torch.")

    def trainer_kwargs(self) -> dict[str, bool]:
        """bf16 / fp16 / use_cpu for a TRL config; both flags explicit, so TRL never turns None into bf16."""
        return {"bf16": self.bf16, "fp16": self.fp16, "use_cpu": self.device == "cpu"}


_X86 = ("x86_64", "amd64", "i386", "i686", "x86")  # platform.machine() of an x86 CPU, lower case


def _x86_cpu_has(probe: str) -> bool:
    """torch.cpu's private feature probe `probe` on an x86 CPU (False elsewhere, or where this torch lacks it)."""
    import torch

    return platform.machine().lower() in _X86 and bool(getattr(torch.cpu, probe, lambda: False)())


def cpu_has_amx() -> bool:
    """Whether this x86 CPU has AMX tiles: native bf16 whose large products run ~7x float32's, which SFT barely
    sees (engine.speed.matmul_kind keeps its pace apart)."""
    return _x86_cpu_has("_is_amx_tile_supported")


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively: AVX512-BF16 or AMX on x86, oneDNN's answer elsewhere (on x86
    oneDNN says yes on any AVX512 CPU, where it emulates bf16: 4.8x slower than float32 on an Intel Xeon)."""
    import torch

    if platform.machine().lower() in _X86:
        return _x86_cpu_has("_is_avx512_bf16_supported") or cpu_has_amx()
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch without oneDNN: no native path either
        return False


def gpu_has_native_bf16() -> bool:
    """Whether the current CUDA device multiplies bfloat16 natively (compute capability >= 8.0)."""
    import torch

    return torch.cuda.is_available() and tuple(torch.cuda.get_device_capability()) >= NATIVE_BF16_CAPABILITY


def resolve_precision(requested: Any = None, *, cpu_bf16: bool = False, strict: bool = False) -> Precision:
    """The `Precision` for this device. `requested`: None / 'auto', a dtype name or a torch.dtype. `cpu_bf16`: auto
    takes native CPU bf16 (default float32, the cpu preset's measured choice). `strict`: emulated CPU bf16 raises."""
    import torch

    name = None
    if requested is not None and requested != "auto":
        name = _NAMES.get(str(requested).removeprefix("torch.").lower())
        if name is None:
            raise ValueError(f"unknown dtype {requested!r}: use 'auto', 'float32', 'bfloat16' or 'float16'")
    if torch.cuda.is_available():
        native = gpu_has_native_bf16()
        if name == "bfloat16" and not native:
            major, minor = torch.cuda.get_device_capability()
            raise ValueError(
                f"bfloat16 was asked for, but this GPU ({torch.cuda.get_device_name()}, compute capability "
                f"{major}.{minor}) only emulates it (native from {NATIVE_BF16_CAPABILITY[0]}.0, Ampere). Unsloth "
                "loads float16 here and its trainers refuse bf16: use float16 or leave the dtype unset (auto).")
        name = name or ("bfloat16" if native else "float16")
        return Precision(getattr(torch, name), bf16=name == "bfloat16", fp16=name == "float16", device="cuda")
    if name == "float16":
        raise ValueError("float16 was asked for on a CPU, which has no float16 training: use float32 (or "
                         "bfloat16 on a CPU with AVX512-BF16/AMX), or run on a GPU")
    if name == "bfloat16" and not cpu_has_native_bf16():
        message = (f"bfloat16 was asked for, but this CPU has no native bfloat16 (torch reports "
                   f"{torch.backends.cpu.get_cpu_capability()}, no AVX512-BF16/AMX): matrix products are emulated "
                   "and training is many times slower than in float32 (measure: python benchmarks/cpu_bf16.py). "
                   "Use float32 on this machine.")
        if strict:
            raise ValueError(message)
        warnings.warn(message, stacklevel=2)
    explicit = name is not None
    name = name or ("bfloat16" if cpu_bf16 and cpu_has_native_bf16() else "float32")
    return Precision(getattr(torch, name), bf16=explicit and name == "bfloat16", fp16=False, device="cpu")


def trainer_precision(bf16: bool | None = None, fp16: bool | None = None) -> Precision:
    """The precision for a trainer's `bf16` / `fp16` settings (None = auto): True asks for it, False rules it out
    (`bf16=False` on an Ampere GPU trains in fp16, both False in float32)."""
    if bf16 and fp16:
        raise ValueError("bf16 and fp16 are both True: choose one (or leave both unset for the device's choice)")
    if bf16 or fp16:
        return resolve_precision("bfloat16" if bf16 else "float16")
    auto = resolve_precision()
    if auto.bf16 and bf16 is False:
        return resolve_precision("float16" if fp16 is None else "float32")
    return resolve_precision("float32") if auto.fp16 and fp16 is False else auto

"""Supervised fine-tuning on agent trajectories with TRL's SFTTrainer (Unsloth models or plain HF + PEFT).

`run_sft` trains a LoRA / QLoRA or full model on data pre-tokenized by `train.data` (so the loss follows the
per-turn train flags), resumes from `output_dir`, keeps a time budget with marks (train/run_control.py) and writes
`loss_history.json`; the rest saves a LoRA adapter, a merged 16-bit model or GGUF files.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from openmanus_lite.engine import attention
from openmanus_lite.errors import UserError
from openmanus_lite.train.configs import SFTRunConfig, apply_model_settings, import_trl
from openmanus_lite.train.presets import SFT
from openmanus_lite.train.run_control import TimeLimit
from openmanus_lite.train.run_folder import resume_checkpoint

LOSS_HISTORY_FILE = "loss_history.json"


@dataclass
class SFTResult:
    """What a run produced. `loss_history`: one dict per logged step (step, loss, learning_rate, train_s)."""

    model: Any
    tokenizer: Any
    output_dir: str
    global_step: int
    loss_history: list[dict[str, float]]
    train_seconds: float
    tokens_seen: int
    stopped_by_time: bool
    resumed_from: str | None
    marks: list[dict[str, Any]] = field(default_factory=list)
    peak_memory: dict[str, Any] = field(default_factory=dict)
    """The training's peak memory (`peak_memory.PeakMemory.as_dict()`), also in loss_history.json."""

    @property
    def tokens_per_second(self) -> float:
        return self.tokens_seen / self.train_seconds if self.train_seconds > 0 else 0.0

    def losses(self) -> list[float]:
        return [h["loss"] for h in self.loss_history if "loss" in h]


CPU_BF16_PAD = 64
"""SFT in bf16 on a CPU pads each pass (unless `pad_to_multiple_of` is set) and its loss's rows (_PaddedLossRows) to
a multiple of this many tokens: oneDNN builds a kernel per matrix shape, nearly every pass is a new shape, and bf16
kernels are dear to build (benchmarks/cpu_bf16.py). 6 minutes of `cpu_30min` on AMX: 316 -> 334 tokens/s, peak
6.06 -> 5.31 GB with the passes padded (docs/RESULTS.md, "bf16 on AMX")."""

CPU_PACKED_DTYPES = {"torch.bfloat16"}
"""Weights' dtypes in which SFT on a CPU keeps `padding_free`: in float32 two conversations a pass trained 0.96x the
tokens/s of one a pass, at 1.5 GB more (docs/RESULTS.md, "Two conversations a pass"), so float32 passes one
conversation at a time, with the same updates."""


class _PaddedLossRows:
    """Unsloth's CPU cross-entropy over the LM head (`unsloth_zoo.cpu.ops._ChunkedLinearCrossEntropy`, the SFT loss
    of its CPU backend) with its rows padded to a multiple of CPU_BF16_PAD in bf16. Its rows are a pass's trained
    tokens, a new count nearly every pass (unpadded, 164 of a run's 297 oneDNN kernels were the head's), and oneDNN's
    cache keeps every kernel it builds. The padded rows are zeros with ignored labels: the loss and its gradients are
    unchanged."""

    inner: Any = None

    @classmethod
    def apply(cls, hidden, weight, labels, divisor, chunk_rows, ignore_index):
        import torch

        pad = -hidden.shape[0] % CPU_BF16_PAD
        if pad and hidden.device.type == "cpu" and hidden.dtype == torch.bfloat16:
            hidden = torch.cat([hidden, hidden.new_zeros(pad, *hidden.shape[1:])])
            labels = torch.cat([labels, labels.new_full((pad,), ignore_index)])
        return cls.inner.apply(hidden, weight, labels, divisor, chunk_rows, ignore_index)


def pad_loss_rows() -> bool:
    """Route Unsloth's CPU cross-entropy through _PaddedLossRows (idempotent); False where this Unsloth has none."""
    try:
        from unsloth_zoo.cpu import ops
    except ImportError:
        return False
    current = getattr(ops, "_ChunkedLinearCrossEntropy", None)
    if current is None or current is _PaddedLossRows:
        return current is _PaddedLossRows
    _PaddedLossRows.inner, ops._ChunkedLinearCrossEntropy = current, _PaddedLossRows
    return True


def build_trainer(model: Any, tokenizer: Any, dataset: Any, cfg: SFTRunConfig, callbacks: list | None = None):
    """TRL's SFTTrainer on pre-tokenized rows (or a list of Trajectory, tokenized here)."""
    trl = import_trl()
    from openmanus_lite.train.data import build_sft_dataset

    if isinstance(dataset, list):
        dataset, report = build_sft_dataset(dataset, tokenizer, max_length=cfg.max_length)
        print(f"SFT data: {report.summary()}")
    if "input_ids" not in dataset.column_names or "assistant_masks" not in dataset.column_names:
        raise ValueError("run_sft needs pre-tokenized rows with 'input_ids' and 'assistant_masks' "
                         f"(train.data.build_sft_dataset), got columns {dataset.column_names}")
    if tokenizer.pad_token_id is None:
        raise ValueError("the tokenizer has no pad token; load it with models.load_tokenizer / load_model")
    trl_warnings = contextlib.nullcontext()
    if cfg.padding_free and model.device.type == "cpu" and str(model.dtype) not in CPU_PACKED_DTYPES:
        cfg = _one_conversation_a_pass(cfg, str(model.dtype).removeprefix("torch."))
    if cfg.padding_free:
        cfg = _rows_already_cut(dataset, cfg)
        if getattr(model.config, "_attn_implementation", None) == attention.NAME:
            print(f"SFT puts each pass's {cfg.per_device_train_batch_size} conversations in one row (padding_free), "
                  "each attended alone (engine/attention.py)")
            trl_warnings = _without(logging.getLogger("trl.trainer.sft_trainer"), _FLASH_ONLY_WARNING)
    apply_model_settings(model, cfg)
    if model.device.type == "cpu" and str(model.dtype) == "torch.bfloat16":
        pad_loss_rows()
        if cfg.pad_to_multiple_of is None:
            cfg.pad_to_multiple_of = CPU_BF16_PAD
            print(f"SFT pads each pass to a multiple of {CPU_BF16_PAD} tokens (bf16 on a CPU: fewer kernel shapes)")
    with trl_warnings:
        return trl.SFTTrainer(model=model, args=cfg, train_dataset=dataset, processing_class=tokenizer,
                              callbacks=list(callbacks or []))


_FLASH_ONLY_WARNING = "Padding-free training is enabled, but the attention implementation is not set to a supported"
"""TRL's warning that only flash attention keeps a padding-free row's conversations apart: the kit's attention does."""


@contextlib.contextmanager
def _without(logger: logging.Logger, message: str):
    """`logger` drops the records whose message holds `message` while inside."""
    def keep(record: logging.LogRecord) -> bool:
        return message not in record.getMessage()

    logger.addFilter(keep)
    try:
        yield
    finally:
        logger.removeFilter(keep)


def _one_conversation_a_pass(cfg: SFTRunConfig, dtype: str) -> SFTRunConfig:
    """`cfg` with padding_free's batch as one conversation a pass, accumulated: the same updates (CPU_PACKED_DTYPES)."""
    print(f"SFT passes one conversation at a time, {cfg.per_device_train_batch_size} accumulated, instead of "
          f"padding_free's one row: packing measured no faster outside bf16 on a CPU (weights here: {dtype})")
    cfg = copy.copy(cfg)
    cfg.gradient_accumulation_steps *= cfg.per_device_train_batch_size
    cfg.per_device_train_batch_size, cfg.padding_free = 1, False
    return cfg


def _rows_already_cut(dataset: Any, cfg: SFTRunConfig) -> SFTRunConfig:
    """`cfg` for TRL without max_length: TRL refuses max_length with padding_free (it would not cut a flattened
    batch's rows), and the kit's rows are cut at a turn boundary before (train.data.build_sft_dataset); a longer row
    is refused here rather than trained past the budget its memory was sized for."""
    longest = max(map(len, dataset["input_ids"]), default=0)
    if cfg.max_length is not None and longest > cfg.max_length:
        raise UserError(f"padding_free SFT needs rows of at most max_length={cfg.max_length} tokens, the longest has "
                        f"{longest}: build them with train.data.build_sft_dataset(..., max_length={cfg.max_length})")
    cfg = copy.copy(cfg)
    cfg.max_length = None
    return cfg


def run_sft(model: Any, tokenizer: Any, dataset: Any, config: SFTRunConfig | None = None, *,
            on_mark: Callable[[Any, dict], Any] | None = None, callbacks: list | None = None) -> SFTResult:
    """Train `model` on `dataset` (pre-tokenized by train.data, or a list of Trajectory) with TRL's SFTTrainer.

    `config`: an SFTRunConfig (`preset.sft_config(...)` builds one); by default presets.SFT. `on_mark(model, info)`
    runs at each of `config.mark_minutes` after the checkpoint is saved; its return value is stored in
    `SFTResult.marks`. Returns the trained model (in train mode)."""
    cfg = config or SFTRunConfig(**SFT)
    resume_from = resume_checkpoint(cfg.resume, cfg.output_dir)
    clock = TimeLimit.from_config(cfg, on_mark)
    trainer = build_trainer(model, tokenizer, dataset, cfg, callbacks=[clock] + list(callbacks or []))
    if resume_from:
        print(f"resuming from {resume_from}")
    trainer.train(resume_from_checkpoint=resume_from)
    state, history = trainer.state, clock.history
    # earlier runs' logs (restored from the checkpoint on resume) come first
    earlier = [{"step": h["step"], "loss": float(h["loss"]), "learning_rate": float(h.get("learning_rate", 0.0))}
               for h in state.log_history if "loss" in h and h["step"] < (history[0]["step"] if history else 10**12)]
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    result = SFTResult(model=trainer.model, tokenizer=tokenizer, output_dir=str(out), global_step=state.global_step,
                       loss_history=earlier + history, train_seconds=clock.train_s,
                       tokens_seen=int(state.num_input_tokens_seen or 0), stopped_by_time=clock.stopped_by_time,
                       resumed_from=resume_from, marks=clock.marks, peak_memory=clock.peak_memory)
    (out / LOSS_HISTORY_FILE).write_text(json.dumps(
        {"history": result.loss_history, "marks": [{k: v for k, v in m.items() if k != "result"} for m in clock.marks],
         "global_step": result.global_step, "train_seconds": result.train_seconds,
         "tokens_seen": result.tokens_seen, "peak_memory": result.peak_memory}, indent=1))
    return result


def is_peft_model(model: Any) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "merge_and_unload")


def _finish_tokenizer(tokenizer: Any, out: Path) -> None:
    from openmanus_lite.models import _name_tokenizer_class

    tokenizer.save_pretrained(out)
    if (out / "tokenizer.json").is_file():
        _name_tokenizer_class(out)


def save_adapter(model: Any, tokenizer: Any, out_dir: str | os.PathLike) -> Path:
    """The LoRA adapter (small) plus the tokenizer; adapter_config.json names the base model."""
    if not is_peft_model(model):
        raise ValueError("save_adapter needs a LoRA (PEFT) model; for a fully fine-tuned model use save_merged")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    _finish_tokenizer(tokenizer, out)
    return out


def merge_adapter(base_name: str, adapter_dir: str | os.PathLike) -> Any:
    """Base + LoRA adapter merged into one float32 model (exact), with PEFT, on the CPU. A pre-quantized base loads
    as Linear4bit, which neither merges exactly nor casts to 16-bit: it is dequantized to float32 weights first."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from openmanus_lite.models import standalone_copy

    base = AutoModelForCausalLM.from_pretrained(base_name, dtype=torch.float32)
    if getattr(base, "hf_quantizer", None) is not None:
        base = standalone_copy(base.dequantize(dtype=torch.float32), torch.float32)
    return PeftModel.from_pretrained(base, str(adapter_dir)).merge_and_unload()


def save_merged(model: Any, tokenizer: Any, out_dir: str | os.PathLike, *, prefer_unsloth: bool = True) -> Path:
    """A standalone 16-bit checkpoint (LoRA merged in) that loads like any model: Unsloth's
    `save_pretrained_merged(..., "merged_16bit")` when the model came through Unsloth, else the base reloaded and the
    adapter merged with PEFT, leaving the trained model untouched. Weights are stored in float16 (bfloat16 on GPUs
    that have it natively: precision.py); `load_model` on a CPU upcasts them to float32."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if not is_peft_model(model):  # full fine-tuning: the model is already standalone
        model.save_pretrained(out)
    elif not (prefer_unsloth and _save_merged_unsloth(model, tokenizer, out)):
        import torch

        from openmanus_lite.engine.precision import resolve_precision

        half = torch.bfloat16 if resolve_precision().bf16 else torch.float16
        tmp = out / "_adapter_tmp"
        model.save_pretrained(tmp)
        base = next(iter(model.peft_config.values())).base_model_name_or_path
        merged = merge_adapter(base, tmp).to(half)  # stored 16-bit like Unsloth's merged_16bit
        shutil.rmtree(tmp)
        merged.save_pretrained(out)
    _finish_tokenizer(tokenizer, out)
    return out


def _save_merged_unsloth(model: Any, tokenizer: Any, out: Path) -> bool:
    """Unsloth's own merge when the model came through Unsloth; False (saying why on failure) to merge with PEFT."""
    from openmanus_lite.engine.generation import is_unsloth_model

    if not (is_unsloth_model(model) and hasattr(model, "save_pretrained_merged")):
        return False
    try:
        model.save_pretrained_merged(str(out), tokenizer, save_method="merged_16bit")
        return True
    except Exception as e:
        print(f"Unsloth save_pretrained_merged failed ({type(e).__name__}: {e}); merging with PEFT instead")
        return False


def load_trained(path: str | os.PathLike, *, backend: str = "hf", **load_kwargs) -> tuple[Any, Any]:
    """(model, tokenizer) for inference from a saved adapter folder or a merged / full checkpoint,
    on the GPU when there is one (`models.load_adapter`, `models.load_model`)."""
    from openmanus_lite.models import load_adapter, load_model

    load = load_adapter if (Path(path) / "adapter_config.json").is_file() else load_model
    return load(Path(path), backend=backend, **load_kwargs)


class GGUFExportUnavailable(RuntimeError):
    """Unsloth's GGUF exporter needs llama.cpp (converter + quantizer), which is not installed here."""


def gguf_toolchain() -> tuple[str, str]:
    """(quantizer, converter) of the llama.cpp checkout Unsloth uses, or GGUFExportUnavailable saying what to do."""
    try:
        from unsloth_zoo.llama_cpp import LLAMA_CPP_DEFAULT_DIR, check_llama_cpp
    except Exception as e:
        raise GGUFExportUnavailable(f"GGUF export goes through Unsloth's exporter, which could not be imported ({e}). "
                                    "Install unsloth (pip install unsloth) on a machine where it runs.") from None
    try:
        return check_llama_cpp(LLAMA_CPP_DEFAULT_DIR)
    except Exception as e:
        raise GGUFExportUnavailable(
            f"GGUF export needs llama.cpp's converter and quantizer at {LLAMA_CPP_DEFAULT_DIR} (or where "
            f"UNSLOTH_LLAMA_CPP_PATH points), and they are not there ({e}). On a machine with network access (e.g. "
            "Colab) Unsloth installs them on first use: run export_gguf there. Offline, build llama.cpp yourself into "
            "that folder (it needs convert_hf_to_gguf.py and llama-quantize). The merged 16-bit checkpoint "
            "(save_merged) is saved either way.") from None


def export_gguf(model: Any, tokenizer: Any, out_dir: str | os.PathLike, quantization: str = "q8_0") -> Path:
    """GGUF file(s) through Unsloth's `save_pretrained_gguf`; GGUFExportUnavailable when llama.cpp is absent."""
    gguf_toolchain()
    if not hasattr(model, "save_pretrained_gguf"):
        raise GGUFExportUnavailable("this model did not come through Unsloth (load it with load_model(..., "
                                    "backend='unsloth')) so it has no save_pretrained_gguf")
    out = Path(out_dir)
    model.save_pretrained_gguf(str(out), tokenizer, quantization_method=quantization)
    return out


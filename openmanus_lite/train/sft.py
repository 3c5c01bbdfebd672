"""Supervised fine-tuning on agent trajectories with TRL's SFTTrainer (Unsloth models or plain HF + PEFT).

`run_sft(model, tokenizer, dataset, config)` trains the model it is given: a LoRA / QLoRA
model from `models.load_model(..., lora=...)` (Unsloth on a GPU, and on this CPU too) or a
full model (the tiny from-scratch one). The dataset is pre-tokenized by `train.data` so the
loss follows the per-turn train flags; a list of trajectories is tokenized on the way in.

Around the trainer: a progress bar (the trainer's), a loss history kept and written to
`loss_history.json`, resuming from the last checkpoint in `output_dir`, an optional time
budget (`max_minutes`) with time marks (`mark_minutes`) at which a checkpoint is saved and a
callback may evaluate (training time excludes that evaluation), and saving: LoRA adapter,
merged 16-bit model, GGUF export where the llama.cpp toolchain exists.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

from openmanus_lite.train.trainer_args import SFT_OWNED, trainer_kwargs

LOSS_HISTORY_FILE = "loss_history.json"


def import_trl():
    """`trl`, imported after unsloth when unsloth is installed (TRL's CPU kernels need its patch)."""
    try:
        import unsloth  # noqa: F401
    except Exception:
        pass
    import trl

    return trl


# --------------------------------------------------------------------------- configuration


@dataclass
class SFTRunConfig:
    """The knobs of an SFT run (presets in train/presets.py fill these)."""

    output_dir: str = "runs/sft"
    max_steps: int = -1
    """-1: train `num_train_epochs` epochs (or until `max_minutes`)."""
    num_train_epochs: float = 1.0
    max_minutes: float | None = None
    """Stop after this many minutes of training (evaluation at marks not counted)."""
    mark_minutes: tuple[float, ...] = ()
    """Training-time marks (minutes) at which a checkpoint is saved and `on_mark` is called."""
    clock: str = "wall"
    """How training time is counted: "wall" seconds, or "cpu" (this process's CPU seconds / torch threads,
    an estimate of wall time on an idle machine when other processes share the CPU)."""
    per_device_train_batch_size: int = 4
    gradient_accumulation_steps: int = 1
    learning_rate: float = 2e-4
    lr_scheduler_type: str = "linear"
    """Any of transformers' schedulers, or "cosine_by_time": a cosine decay over `max_minutes` of training
    time (after `warmup_steps` steps of warmup), for time-budgeted runs, where the steps that fit in the
    budget are not known beforehand and a step-based cosine ends either early or undecayed."""
    warmup_steps: int = 2
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    max_length: int = 1024
    """Tokens per conversation (the data builder truncates at a turn boundary or drops)."""
    group_by_length: bool = True
    """Batch conversations of similar length together: less padding, more useful tokens per second."""
    gradient_checkpointing: bool = False
    optim: str = "adamw_torch"
    bf16: bool | None = None
    """None: bf16 on GPUs with native bf16 (compute capability >= 8.0); never on CPU (see
    benchmarks/train_throughput.py). True where the device only emulates it (T4) is refused: precision.py."""
    fp16: bool | None = None
    """None: fp16 on GPUs without native bf16 (T4)."""
    logging_steps: int = 1
    save_steps: int = 50
    save_total_limit: int | None = 2
    resume: bool | str = "auto"
    """"auto": continue from the last checkpoint in output_dir if there is one; a path: from that one."""
    seed: int = 0
    report_to: str | list[str] = "none"
    """Experiment tracker(s): "none", "tensorboard", "trackio", "wandb" (TrainingArguments.report_to)."""
    disable_tqdm: bool = False
    dataloader_num_workers: int = 0
    trainer_args: dict[str, Any] = field(default_factory=dict)
    """Any other SFTConfig field (e.g. {"adam_beta2": 0.95}); see train/trainer_args.py."""

    def replace(self, **changes) -> "SFTRunConfig":
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise ValueError(f"unknown SFT settings {sorted(unknown)}; known: {sorted(f.name for f in fields(self))}")
        return SFTRunConfig(**{**asdict(self), **changes})


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

    @property
    def tokens_per_second(self) -> float:
        return self.tokens_seen / self.train_seconds if self.train_seconds > 0 else 0.0

    def losses(self) -> list[float]:
        return [h["loss"] for h in self.loss_history if "loss" in h]


TIME_COSINE = "cosine_by_time"


def time_cosine_factor(step: int, train_s: float, budget_s: float, warmup_steps: int) -> float:
    """The learning-rate factor of "cosine_by_time": linear warmup by steps, then a cosine over training time."""
    warm = step / warmup_steps if step < warmup_steps else 1.0
    return warm * 0.5 * (1.0 + math.cos(math.pi * min(1.0, train_s / budget_s)))


def make_sft_config(cfg: SFTRunConfig):
    """TRL's SFTConfig for pre-tokenized data (labels come from the `assistant_masks` column)."""
    import_trl()
    from trl import SFTConfig

    from openmanus_lite.engine.precision import trainer_precision

    return SFTConfig(**trainer_kwargs(
        cfg.trainer_args, SFT_OWNED,
        output_dir=cfg.output_dir,
        max_steps=cfg.max_steps,
        num_train_epochs=cfg.num_train_epochs,
        per_device_train_batch_size=cfg.per_device_train_batch_size,
        gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        learning_rate=cfg.learning_rate,
        lr_scheduler_type="constant_with_warmup" if cfg.lr_scheduler_type == TIME_COSINE else cfg.lr_scheduler_type,
        warmup_steps=cfg.warmup_steps,
        weight_decay=cfg.weight_decay,
        max_grad_norm=cfg.max_grad_norm,
        max_length=cfg.max_length,
        train_sampling_strategy="group_by_length" if cfg.group_by_length else "random",
        gradient_checkpointing=cfg.gradient_checkpointing,
        optim=cfg.optim,
        **trainer_precision(cfg.bf16, cfg.fp16).trainer_kwargs(),
        logging_steps=cfg.logging_steps,
        save_strategy="steps",
        save_steps=cfg.save_steps,
        save_total_limit=cfg.save_total_limit,
        seed=cfg.seed,
        data_seed=cfg.seed,
        report_to=cfg.report_to,
        disable_tqdm=cfg.disable_tqdm,
        dataloader_num_workers=cfg.dataloader_num_workers,
        include_num_input_tokens_seen="non_padding",
        packing=False,
        padding_free=False,
        assistant_only_loss=False,  # the mask is already in the data (per-turn flags)
        dataset_num_proc=None,
    ))


# --------------------------------------------------------------------------- callbacks


def training_clock(kind: str) -> Callable[[], float]:
    if kind == "wall":
        return time.perf_counter
    if kind == "cpu":
        import torch

        threads = max(1, torch.get_num_threads())
        return lambda: time.process_time() / threads
    raise ValueError(f"clock must be 'wall' or 'cpu', got {kind!r}")


def _callbacks(cfg: SFTRunConfig, on_mark: Callable | None, history: list, marks: list):
    from transformers import TrainerCallback

    now_fn = training_clock(cfg.clock)

    class Clock(TrainerCallback):
        """Training time (evaluation at marks excluded), loss history, time budget and marks."""

        def __init__(self):
            self.train_s = 0.0
            self.last = None
            self.pending = sorted(m for m in cfg.mark_minutes if m > 0)
            self.stopped_by_time = False

        def _tick(self):
            now = now_fn()
            if self.last is not None:
                self.train_s += now - self.last
            self.last = now

        def elapsed_s(self) -> float:
            return self.train_s + (now_fn() - self.last if self.last is not None else 0.0)

        def on_train_begin(self, args, state, control, lr_scheduler=None, **kw):
            self.last = now_fn()
            if cfg.lr_scheduler_type == TIME_COSINE:
                # transformers' scheduler steps after each optimizer step; its factor now reads the clock
                budget_s = cfg.max_minutes * 60
                lr_scheduler.lr_lambdas = [
                    lambda step: time_cosine_factor(step, self.elapsed_s(), budget_s, cfg.warmup_steps)
                ] * len(lr_scheduler.lr_lambdas)

        def on_step_end(self, args, state, control, **kw):
            self._tick()
            minutes = self.train_s / 60
            if self.pending and minutes >= self.pending[0]:
                while self.pending and minutes >= self.pending[0]:
                    self.pending.pop(0)
                control.should_save = True
                self._mark_due = True
            if cfg.max_minutes is not None and minutes >= cfg.max_minutes:
                control.should_training_stop = True
                control.should_save = True
                self.stopped_by_time = True
            return control

        def on_save(self, args, state, control, model=None, **kw):
            if getattr(self, "_mark_due", False):
                self._mark_due = False
                entry = {"step": state.global_step, "train_minutes": round(self.train_s / 60, 3),
                         "tokens_seen": int(state.num_input_tokens_seen or 0),
                         "checkpoint": os.path.join(args.output_dir, f"checkpoint-{state.global_step}")}
                if on_mark is not None:
                    entry["result"] = on_mark(model, entry)
                marks.append(entry)
                self.last = now_fn()  # the evaluation's time is not training time

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "loss" in logs:
                self._tick()
                history.append({"step": state.global_step, "loss": float(logs["loss"]),
                                "learning_rate": float(logs.get("learning_rate", 0.0)),
                                "train_s": round(self.train_s, 2),
                                "tokens_seen": int(state.num_input_tokens_seen or 0)})

    return Clock()


# --------------------------------------------------------------------------- training


def last_checkpoint(output_dir: str | os.PathLike) -> str | None:
    from transformers.trainer_utils import get_last_checkpoint

    return get_last_checkpoint(str(output_dir)) if Path(output_dir).is_dir() else None


def build_trainer(model: Any, tokenizer: Any, dataset: Any, cfg: SFTRunConfig, callbacks: list | None = None):
    """TRL's SFTTrainer on pre-tokenized rows (or a list of Trajectory, tokenized here)."""
    trl = import_trl()
    from openmanus_lite.train.data import build_sft_dataset

    if isinstance(dataset, list):
        dataset, report = build_sft_dataset(dataset, tokenizer, max_length=cfg.max_length)
        print(f"SFT data: {report.summary()}")
    if "input_ids" not in dataset.column_names or "assistant_masks" not in dataset.column_names:
        raise ValueError(
            "run_sft needs pre-tokenized rows with 'input_ids' and 'assistant_masks' (train.data.build_sft_dataset), "
            f"got columns {dataset.column_names}"
        )
    if tokenizer.pad_token_id is None:
        raise ValueError("the tokenizer has no pad token; load it with models.load_tokenizer / load_model")
    return trl.SFTTrainer(
        model=model,
        args=make_sft_config(cfg),
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=list(callbacks or []),
    )


def run_sft(
    model: Any,
    tokenizer: Any,
    dataset: Any,
    config: SFTRunConfig | None = None,
    *,
    on_mark: Callable[[Any, dict], Any] | None = None,
    callbacks: list | None = None,
) -> SFTResult:
    """Train `model` on `dataset` (pre-tokenized by train.data, or a list of Trajectory) with TRL's SFTTrainer.

    `on_mark(model, info)` runs at each of `config.mark_minutes` after the checkpoint is saved;
    its return value is stored in `SFTResult.marks`. Returns the trained model (in train mode).
    """
    cfg = config or SFTRunConfig()
    if cfg.lr_scheduler_type == TIME_COSINE and not cfg.max_minutes:
        raise ValueError(f"lr_scheduler_type {TIME_COSINE!r} decays over max_minutes of training time: set max_minutes")
    resume_from = None
    if cfg.resume == "auto":
        resume_from = last_checkpoint(cfg.output_dir)
    elif cfg.resume:
        resume_from = str(cfg.resume)
        if not Path(resume_from).is_dir():
            raise FileNotFoundError(f"resume checkpoint {resume_from} does not exist")
    history: list[dict] = []
    marks: list[dict] = []
    clock = _callbacks(cfg, on_mark, history, marks)
    trainer = build_trainer(model, tokenizer, dataset, cfg, callbacks=[clock] + list(callbacks or []))
    if resume_from:
        print(f"resuming from {resume_from}")
    trainer.train(resume_from_checkpoint=resume_from)
    state = trainer.state
    # earlier runs' logs (restored from the checkpoint on resume) come first
    earlier = [
        {"step": h["step"], "loss": float(h["loss"]), "learning_rate": float(h.get("learning_rate", 0.0))}
        for h in state.log_history
        if "loss" in h and h["step"] < (history[0]["step"] if history else 10**12)
    ]
    full_history = earlier + history
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / LOSS_HISTORY_FILE).write_text(json.dumps(
        {"history": full_history, "marks": [{k: v for k, v in m.items() if k != "result"} for m in marks],
         "global_step": state.global_step, "train_seconds": clock.train_s,
         "tokens_seen": int(state.num_input_tokens_seen or 0)}, indent=1))
    return SFTResult(
        model=trainer.model,
        tokenizer=tokenizer,
        output_dir=str(out),
        global_step=state.global_step,
        loss_history=full_history,
        train_seconds=clock.train_s,
        tokens_seen=int(state.num_input_tokens_seen or 0),
        stopped_by_time=clock.stopped_by_time,
        resumed_from=resume_from,
        marks=marks,
    )


# --------------------------------------------------------------------------- saving and reloading


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


def _base_path(model: Any) -> str:
    cfg = next(iter(model.peft_config.values()))
    return cfg.base_model_name_or_path


def merge_adapter(base_name: str, adapter_dir: str | os.PathLike) -> Any:
    """Base + LoRA adapter merged into one float32 model (exact), with PEFT, on the CPU.

    A pre-quantized base (e.g. a "-bnb-4bit" checkpoint) loads as Linear4bit, which neither merges
    exactly nor casts to 16-bit: it is dequantized to plain float32 weights first."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from openmanus_lite.models import standalone_copy

    base = AutoModelForCausalLM.from_pretrained(base_name, dtype=torch.float32)
    if getattr(base, "hf_quantizer", None) is not None:
        base = standalone_copy(base.dequantize(dtype=torch.float32), torch.float32)
    return PeftModel.from_pretrained(base, str(adapter_dir)).merge_and_unload()


def save_merged(model: Any, tokenizer: Any, out_dir: str | os.PathLike, *, prefer_unsloth: bool = True) -> Path:
    """A standalone 16-bit checkpoint (LoRA merged in) that loads like any model.

    Unsloth's `save_pretrained_merged(..., "merged_16bit")` when the model came through
    Unsloth; otherwise the base model is reloaded, the adapter applied and merged with PEFT
    (`merge_and_unload`), leaving the trained model untouched; a pre-quantized 4-bit base is
    dequantized for that merge. Weights are stored in float16 (bfloat16 on GPUs that have it natively: precision.py);
    `load_model` on a CPU upcasts them to float32.
    """
    import torch

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if not is_peft_model(model):  # full fine-tuning: the model is already standalone
        model.save_pretrained(out)
        _finish_tokenizer(tokenizer, out)
        return out
    from openmanus_lite.engine.generation import is_unsloth_model

    if prefer_unsloth and is_unsloth_model(model) and hasattr(model, "save_pretrained_merged"):
        try:
            model.save_pretrained_merged(str(out), tokenizer, save_method="merged_16bit")
            _finish_tokenizer(tokenizer, out)
            return out
        except Exception as e:  # fall back to a PEFT merge, and say why
            print(f"Unsloth save_pretrained_merged failed ({type(e).__name__}: {e}); merging with PEFT instead")
    from openmanus_lite.engine.precision import resolve_precision

    half = torch.bfloat16 if resolve_precision().bf16 else torch.float16
    tmp = out / "_adapter_tmp"
    model.save_pretrained(tmp)
    merged = merge_adapter(_base_path(model), tmp).to(half)  # stored 16-bit like Unsloth's merged_16bit
    shutil.rmtree(tmp)
    merged.save_pretrained(out)
    _finish_tokenizer(tokenizer, out)
    return out


def load_trained(path: str | os.PathLike, *, backend: str = "hf", **load_kwargs) -> tuple[Any, Any]:
    """(model, tokenizer) for inference from a saved adapter folder or a merged / full checkpoint,
    on the GPU when there is one (`models.load_adapter`, `models.load_model`)."""
    from openmanus_lite.models import load_adapter, load_model

    folder = Path(path)
    if (folder / "adapter_config.json").is_file():
        return load_adapter(folder, backend=backend, **load_kwargs)
    return load_model(folder, backend=backend, **load_kwargs)


class GGUFExportUnavailable(RuntimeError):
    """Unsloth's GGUF exporter needs llama.cpp (converter + quantizer), which is not installed here."""


def gguf_toolchain() -> tuple[str, str]:
    """(quantizer, converter) of the llama.cpp checkout Unsloth uses, or GGUFExportUnavailable saying what to do."""
    try:
        from unsloth_zoo.llama_cpp import LLAMA_CPP_DEFAULT_DIR, check_llama_cpp
    except Exception as e:
        raise GGUFExportUnavailable(
            f"GGUF export goes through Unsloth's exporter, which could not be imported ({e}). "
            "Install unsloth (pip install unsloth) on a machine where it runs."
        ) from None
    try:
        return check_llama_cpp(LLAMA_CPP_DEFAULT_DIR)
    except Exception as e:
        raise GGUFExportUnavailable(
            f"GGUF export needs llama.cpp's converter and quantizer at {LLAMA_CPP_DEFAULT_DIR} "
            f"(or where UNSLOTH_LLAMA_CPP_PATH points), and they are not there ({e}). On a machine with network "
            "access (e.g. Colab) Unsloth installs them on first use: run export_gguf there. Offline, build "
            "llama.cpp yourself into that folder (it needs convert_hf_to_gguf.py and llama-quantize). "
            "The merged 16-bit checkpoint (save_merged) is saved either way."
        ) from None


def export_gguf(model: Any, tokenizer: Any, out_dir: str | os.PathLike, quantization: str = "q8_0") -> Path:
    """GGUF file(s) through Unsloth's `save_pretrained_gguf`; GGUFExportUnavailable when llama.cpp is absent."""
    gguf_toolchain()
    if not hasattr(model, "save_pretrained_gguf"):
        raise GGUFExportUnavailable(
            "this model did not come through Unsloth (load it with load_model(..., backend='unsloth')) "
            "so it has no save_pretrained_gguf"
        )
    out = Path(out_dir)
    model.save_pretrained_gguf(str(out), tokenizer, quantization_method=quantization)
    return out


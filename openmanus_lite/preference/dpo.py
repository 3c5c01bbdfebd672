"""DPO from environment preferences, on TRL's DPOTrainer with the Unsloth / PEFT model.

DPO trains a fresh LoRA adapter on the SFT checkpoint, and its reference is the same network with the adapter
off. That is the SFT policy only when the SFT weights are in the base, so a bare SFT adapter is merged into its
base once (`resolve_checkpoint`); else DPO would pull the policy back towards the pre-SFT model. Long multi-turn
prompts are shortened at turn boundaries by `pairs.pair_dataset`, not cut by the trainer.
"""

from __future__ import annotations

import copy
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openmanus_lite.models import LoraSpec, free_memory, load_model, load_tokenizer, resolve_model_name
from openmanus_lite.paths import CACHE_DIR
from openmanus_lite.preference.pairs import pair_dataset
from openmanus_lite.train.configs import DPORunConfig, apply_model_settings, import_trl, renamed_settings
from openmanus_lite.train.presets import DPO
from openmanus_lite.train.run_control import TimeLimit

MERGED_MARKER = "openmanus_merged_from.json"


def run_config(settings: Any, cls: type, defaults: dict[str, Any], output_dir: str | os.PathLike | None,
               name: str) -> Any:
    """The trainer's own copy of `settings` (default: `cls` with the presets' `defaults`, under the cache's
    runs/`name`), writing to `output_dir` when given."""
    cfg = copy.copy(settings) if settings else cls(**defaults, output_dir=str(CACHE_DIR / "runs" / name))
    if output_dir:
        cfg.output_dir = str(output_dir)
    return cfg


@dataclass
class TrainReport:
    """What one DPO, outcome-RM or process-RM training did."""

    steps: int
    wall_s: float
    stopped_early: bool
    data_counts: dict[str, int]
    log: list[dict[str, Any]]
    peak_memory: dict[str, Any] = field(default_factory=dict)  # the training's (peak_memory.PeakMemory)

    def summary(self) -> dict[str, Any]:
        losses = [e["loss"] for e in self.log if "loss" in e]
        return {"steps": self.steps, "wall_s": round(self.wall_s, 1), "stopped_early": self.stopped_early,
                "data": self.data_counts, "first_loss": losses[0] if losses else None,
                "last_loss": losses[-1] if losses else None, "peak_memory": self.peak_memory}


def train_and_release(trainer: Any, stop: TimeLimit, data_counts: dict[str, int], t0: float,
                      resume: str | None = None) -> tuple[Any, TrainReport]:
    """(the trained model, its report); then frees what only training needed (the optimizer state, TRL's
    reference copy) before the next stage loads its model, so the caller must hold no other `trainer`."""
    apply_model_settings(trainer.model, trainer.args)
    trainer.train(resume_from_checkpoint=resume)
    model, state = trainer.model, trainer.state
    del trainer
    free_memory()
    model.eval()
    return model, TrainReport(int(state.global_step), time.perf_counter() - t0, stop.stopped_by_time,
                              dict(data_counts), list(state.log_history), stop.peak_memory)


def config_dtype(args: Any) -> Any:
    """The torch dtype a trainer config trains in (its bf16 / fp16 flags; float32 without either), so
    frozen weights are loaded in the precision the trainer computes in, not a second guess of it."""
    import torch

    flags = (("bf16", torch.bfloat16), ("fp16", torch.float16))
    return next((dtype for flag, dtype in flags if getattr(args, flag, False)), torch.float32)


def is_adapter_dir(path: str | os.PathLike) -> bool:
    p = Path(path)
    return (p / "adapter_config.json").is_file() and not (p / "config.json").is_file()


def resolve_checkpoint(path: str | os.PathLike, merged_dir: str | os.PathLike | None = None) -> str:
    """A full model folder for `path`: 'default' -> the embedded model; a LoRA adapter folder ->
    its base with the adapter merged in (saved once beside it, or in `merged_dir`); else as is."""
    name = resolve_model_name(path)
    if not is_adapter_dir(name):
        return name
    adapter = Path(name)
    out = Path(merged_dir) if merged_dir else adapter.parent / f"{adapter.name}-merged"
    marker = out / MERGED_MARKER
    stamp = str((adapter / "adapter_config.json").stat().st_mtime)
    if marker.is_file() and json.loads(marker.read_text()).get("stamp") == stamp:
        return str(out)
    from openmanus_lite.train.sft import merge_adapter

    cfg = json.loads((adapter / "adapter_config.json").read_text())
    base_name = resolve_model_name(cfg.get("base_model_name_or_path") or "")
    if not base_name or not Path(base_name).exists():
        raise FileNotFoundError(
            f"{adapter} is a LoRA adapter whose base model {cfg.get('base_model_name_or_path')!r} is not a local "
            "folder; save the SFT result merged (a full checkpoint), or fix base_model_name_or_path in "
            "adapter_config.json")
    merged = merge_adapter(base_name, adapter)
    tok_dir = adapter if (adapter / "tokenizer_config.json").is_file() else Path(base_name)
    tok = load_tokenizer(tok_dir)
    out.mkdir(parents=True, exist_ok=True)
    merged.save_pretrained(out)
    tok.save_pretrained(out)
    _copy_tokenizer_class(tok_dir, out)
    marker.write_text(json.dumps({"adapter": str(adapter), "base": base_name, "stamp": stamp}))
    return str(out)


def _copy_tokenizer_class(src: Path, dst: Path) -> None:
    """Keep `tokenizer_class` as the source wrote it (see models.load_tokenizer for why it matters)."""
    s, d = src / "tokenizer_config.json", dst / "tokenizer_config.json"
    if s.is_file() and d.is_file() and (cls := json.loads(s.read_text()).get("tokenizer_class")):
        cfg = json.loads(d.read_text())
        cfg["tokenizer_class"] = cls
        d.write_text(json.dumps(cfg, indent=2, ensure_ascii=False))


def DPOSettings(**old: Any) -> DPORunConfig:  # noqa: N802  (the old class name)
    """Deprecated: a DPORunConfig (TRL's DPOConfig) from the old setting names, on the presets' DPO defaults."""
    return DPORunConfig(**{**DPO, **renamed_settings(old, "DPOSettings", "DPORunConfig")})


@dataclass
class DPOResult(TrainReport):
    model: Any = None
    tokenizer: Any = None
    start_checkpoint: str = ""

    def summary(self) -> dict[str, Any]:
        last = self.log[-2] if len(self.log) > 1 else (self.log or [{}])[-1]  # the last step's (then the totals)
        return {**super().summary(), "last_log": {k: v for k, v in last.items() if isinstance(v, (int, float))},
                "start": self.start_checkpoint}


def run_dpo(start: str | os.PathLike | tuple[Any, Any], rows: list[dict[str, Any]],
            settings: DPORunConfig | None = None, *, output_dir: str | os.PathLike | None = None,
            eval_rows: list[dict[str, Any]] | None = None, resume: str | None = None) -> DPOResult:
    """DPO on preference rows, from an SFT checkpoint path (resolved, loaded with a fresh LoRA adapter) or a
    loaded (model, tokenizer) used as given (TRL then copies its adapter as the reference). `settings`: a
    DPORunConfig (`preset.dpo_config()`; default the presets' DPO); `resume`: a checkpoint of this run."""
    s = run_config(settings, DPORunConfig, DPO, output_dir, "dpo")
    trl = import_trl()
    t0 = time.perf_counter()
    if isinstance(start, tuple):
        model, tok = start
        start_name = getattr(getattr(model, "config", None), "_name_or_path", "model")
    else:
        start_name = resolve_checkpoint(start)
        lora = LoraSpec(r=s.lora_r, alpha=s.lora_alpha, gradient_checkpointing=s.gradient_checkpointing)
        model, tok = load_model(start_name, backend=s.backend, lora=lora, load_in_4bit=s.load_in_4bit,
                                max_seq_length=s.max_length)
    train_ds, counts = pair_dataset(rows, tok, s.max_length)
    eval_ds = pair_dataset(eval_rows, tok, s.max_length)[0] if eval_rows else None
    stop = TimeLimit.from_config(s)
    model, report = train_and_release(trl.DPOTrainer(model=model, args=s, train_dataset=train_ds, eval_dataset=eval_ds,
                                                     processing_class=tok, callbacks=[stop]), stop, counts, t0, resume)
    return DPOResult(**vars(report), model=model, tokenizer=tok, start_checkpoint=str(start_name))


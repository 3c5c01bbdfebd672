"""DPO from environment preferences, on TRL's DPOTrainer with the Unsloth / PEFT model.

The policy starts from an SFT checkpoint. A LoRA adapter is trained on top of it, and the
reference model of DPO is the same network with the adapter switched off, i.e. the SFT
policy itself. That only holds when the SFT weights are *in* the base model, so an SFT
checkpoint saved as a bare LoRA adapter is merged into its base once (`resolve_checkpoint`),
and DPO trains a fresh adapter on the merged model. Without that, TRL's reference would be
the pre-SFT base model and DPO would pull the policy back towards it.

Prompts are multi-turn (the shared history up to the diverging turn), so they can be long:
`build_dpo_dataset` shortens them at turn boundaries to fit `max_length` (keeping the task
message, dropping the oldest turns) and counts what it shortened or dropped, instead of
letting the trainer cut the completion or the task statement.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from openmanus_lite.engine.precision import trainer_precision
from openmanus_lite.models import LoraSpec, free_memory, load_model, load_tokenizer, resolve_model_name
from openmanus_lite.paths import CACHE_DIR
from openmanus_lite.train.preferences import Messages, fit_prompt
from openmanus_lite.train.sft import import_trl  # noqa: F401  (unsloth before trl; reward_model imports it from here)
from openmanus_lite.train.trainer_args import DPO_OWNED, trainer_kwargs

MERGED_MARKER = "openmanus_merged_from.json"


# --------------------------------------------------------------------------- shared training plumbing




def config_dtype(args: Any) -> Any:
    """The torch dtype a trainer config trains in (its bf16 / fp16 flags; float32 without either), so
    frozen weights are loaded in the precision the trainer computes in, not a second guess of it."""
    import torch

    if getattr(args, "bf16", False):
        return torch.bfloat16
    if getattr(args, "fp16", False):
        return torch.float16
    return torch.float32


def time_limit_callback(max_seconds: float | None):
    """A TrainerCallback that ends training after `max_seconds` of wall time (None: no limit)."""
    from transformers import TrainerCallback

    class StopAfter(TrainerCallback):
        def __init__(self):
            self.t0 = time.perf_counter()
            self.stopped_early = False

        def on_train_begin(self, args, state, control, **kwargs):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            if max_seconds is not None and time.perf_counter() - self.t0 > max_seconds:
                control.should_training_stop = True
                self.stopped_early = True
            return control

    return StopAfter()


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
    if s.is_file() and d.is_file():
        cls = json.loads(s.read_text()).get("tokenizer_class")
        cfg = json.loads(d.read_text())
        if cls:
            cfg["tokenizer_class"] = cls
            d.write_text(json.dumps(cfg, indent=2, ensure_ascii=False))


def count_chat_tokens(tokenizer) -> Any:
    """`messages -> token count` under the tokenizer's chat template."""

    def count(messages: Messages) -> int:
        return len(tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True)["input_ids"])

    return count


# --------------------------------------------------------------------------- data


def build_dpo_dataset(rows: list[dict[str, Any]], tokenizer, max_length: int) -> tuple[Any, Counter]:
    """A `datasets.Dataset` of {prompt, chosen, rejected} that fits `max_length` tokens.

    Returns (dataset, counts): rows kept, shortened (oldest turns dropped) and dropped
    (not even the task message plus the completion fits).
    """
    import datasets

    count = count_chat_tokens(tokenizer)
    counts: Counter = Counter()
    out = []
    for r in rows:
        for key in ("prompt", "chosen", "rejected"):
            if key not in r:
                raise ValueError(f"preference row lacks {key!r}: rows need prompt, chosen and rejected message lists "
                                 "(make them with preferences.make_pairs(...).rows())")
        prompt = fit_prompt(r["prompt"], [r["chosen"], r["rejected"]], count, max_length)
        if prompt is None:
            counts["dropped_too_long"] += 1
            continue
        if len(prompt) < len(r["prompt"]):
            counts["shortened"] += 1
        counts["kept"] += 1
        out.append({"prompt": prompt, "chosen": r["chosen"], "rejected": r["rejected"]})
    if not out:
        raise ValueError(f"no preference row fits max_length={max_length} tokens ({dict(counts)}); raise max_length")
    return datasets.Dataset.from_list(out), counts


# --------------------------------------------------------------------------- training


@dataclass
class DPOSettings:
    """What a DPO run does. The defaults suit LoRA on a small model; `max_seconds` caps wall time."""

    beta: float = 0.1
    loss_type: str = "sigmoid"
    learning_rate: float = 2e-5
    max_steps: int = -1
    epochs: float = 1.0
    batch_size: int = 4
    grad_accum: int = 1
    max_length: int = 1024
    lora: LoraSpec = field(default_factory=lambda: LoraSpec(r=16, alpha=32))
    seed: int = 0
    logging_steps: int = 5
    max_seconds: float | None = None
    backend: str = "auto"
    load_in_4bit: bool = False
    gradient_checkpointing: bool = False
    report_to: str | list[str] = "none"
    trainer_args: dict[str, Any] = field(default_factory=dict)
    """Any other DPOConfig field; see train/trainer_args.py."""


@dataclass
class DPOResult:
    model: Any
    tokenizer: Any
    log: list[dict[str, Any]]
    data_counts: dict[str, int]
    steps: int
    wall_s: float
    stopped_early: bool
    start_checkpoint: str

    def summary(self) -> dict[str, Any]:
        last = {k: v for k, v in (self.log[-2] if len(self.log) > 1 else (self.log or [{}])[-1]).items()
                if isinstance(v, (int, float))}
        return {"steps": self.steps, "wall_s": round(self.wall_s, 1), "stopped_early": self.stopped_early,
                "data": self.data_counts, "last_log": last, "start": self.start_checkpoint}


def run_dpo(
    start: str | os.PathLike | tuple[Any, Any],
    rows: list[dict[str, Any]],
    settings: DPOSettings | None = None,
    *,
    output_dir: str | os.PathLike | None = None,
    eval_rows: list[dict[str, Any]] | None = None,
) -> DPOResult:
    """DPO on preference rows, starting from an SFT checkpoint (path) or a loaded (model, tokenizer).

    A path is resolved with `resolve_checkpoint` and loaded with `load_model` plus a fresh
    LoRA adapter (the reference is the adapter-free model = the SFT policy). A loaded
    PEFT model is used as given (TRL then copies its adapter as the reference).
    """
    s = settings or DPOSettings()
    trl = import_trl()
    t0 = time.perf_counter()
    if isinstance(start, tuple):
        model, tok = start
        start_name = getattr(getattr(model, "config", None), "_name_or_path", "model")
    else:
        start_name = resolve_checkpoint(start)
        lora = LoraSpec(**{**asdict(s.lora), "gradient_checkpointing": s.gradient_checkpointing})
        model, tok = load_model(start_name, backend=s.backend, lora=lora, load_in_4bit=s.load_in_4bit,
                                max_seq_length=s.max_length)
    train_ds, counts = build_dpo_dataset(rows, tok, s.max_length)
    eval_ds = build_dpo_dataset(eval_rows, tok, s.max_length)[0] if eval_rows else None
    out_dir = str(output_dir or CACHE_DIR / "runs" / "dpo")
    cfg = trl.DPOConfig(**trainer_kwargs(
        s.trainer_args, DPO_OWNED,
        output_dir=out_dir,
        beta=s.beta,
        loss_type=[s.loss_type],
        learning_rate=s.learning_rate,
        max_steps=s.max_steps,
        num_train_epochs=s.epochs,
        per_device_train_batch_size=s.batch_size,
        per_device_eval_batch_size=s.batch_size,
        gradient_accumulation_steps=s.grad_accum,
        max_length=s.max_length,
        logging_steps=s.logging_steps,
        save_strategy="no",
        report_to=s.report_to,
        seed=s.seed,
        gradient_checkpointing=s.gradient_checkpointing,
        **trainer_precision().trainer_kwargs(),
        disable_tqdm=False,
    ))
    stop = time_limit_callback(s.max_seconds)
    trainer = trl.DPOTrainer(model=model, args=cfg, train_dataset=train_ds, eval_dataset=eval_ds,
                             processing_class=tok, callbacks=[stop])
    trainer.train()
    model = trainer.model
    model.eval()
    result = DPOResult(model=model, tokenizer=tok, log=list(trainer.state.log_history), data_counts=dict(counts),
                       steps=int(trainer.state.global_step), wall_s=time.perf_counter() - t0,
                       stopped_early=stop.stopped_early, start_checkpoint=str(start_name))
    del trainer
    free_memory()  # the optimizer state and TRL's reference copy, if it made one
    return result


def save_policy(model, tokenizer, out_dir: str | os.PathLike, merged: bool = True) -> Path:
    """Save a DPO-trained policy: merged into a standalone checkpoint (loads like any model), or its
    LoRA adapter (whose base is the merged SFT checkpoint). The SFT module's savers do the work."""
    from openmanus_lite.train.sft import save_adapter, save_merged

    return save_merged(model, tokenizer, out_dir) if merged else save_adapter(model, tokenizer, out_dir)

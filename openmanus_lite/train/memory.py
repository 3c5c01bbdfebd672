"""Memory estimate per preset and stage (GPU memory on a card, resident memory on a CPU): arithmetic on what each
stage keeps, from the model's shape and the preset's numbers, since no GPU has run the kit's GPU presets yet.

Counted: weights at their bit width (nf4 with double quantization for the projections, 16-bit beside them);
trainable parameters, gradients and AdamW moments in float32 (8-bit AdamW: 2 bytes); activations (with gradient
checkpointing the layer-boundary states plus one layer's working set, which Unsloth's offloading over-counts);
logits where a loss materialises them, capped as Unsloth's fused/chunked losses cap them on a GPU; a generation
batch's KV cache; a 0.5 GB CUDA context allowance; on a CPU the imported stack and the evaluation's prefix cache.

Against Unsloth's published minimum VRAM (`presets --published`; batch 1 x 512, r=16, 8-bit AdamW): 3B QLoRA 3.5 GB
published vs 4.2 estimated, 3B LoRA 8.0 vs 8.4, 8B QLoRA 6.0 vs 7.9, 8B LoRA 22.0 vs 18.3, so it errs high for
QLoRA, as a fit check should. On a CPU it reads low (6.6 GiB against a measured 10.5 GiB SFT peak): eager CPU
attention and the allocator keep more than fused attention, which this assumes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from openmanus_lite.models import DEFAULT_MODEL, LORA_TARGETS, LoraSpec, default_gguf_path
from openmanus_lite.train.presets import TINY_MODEL, tiny_model_path

GB = 1e9
CUDA_CONTEXT = 0.5 * GB
CPU_RUNTIME = 1.2 * GB
"""Resident memory of the imported training stack before any model loads (1.17 GB measured here)."""
KV_BUDGET = int(1.5 * 2**30)
"""generation.DEFAULT_KV_BUDGET_GB (this module does not import torch): prefix cache + decoding keys/values."""
FUSED_LOSS_CAP = 4 * 2**30
"""Unsloth's fused cross-entropy target: min(4 GiB, half of the free memory) (unsloth_zoo _CE_TARGET_GB_CAP)."""
NF4_BYTES = 0.5 + 1 / 64 + 4 / (64 * 256)
"""nf4 with double quantization, per quantized weight (blocksize 64; 256 absmax per second-level block)."""


@dataclass(frozen=True)
class ModelShape:
    """The numbers of a decoder-only transformer (Llama / Qwen2 layout) that memory depends on."""

    name: str
    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    tied_embeddings: bool = True
    qkv_bias: bool = False

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def kv_width(self) -> int:
        return self.kv_heads * self.head_dim

    def projection_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) of each of the seven projections of one layer."""
        h, kv, i = self.hidden, self.kv_width, self.intermediate
        return {"q_proj": (h, h), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (h, h),
                "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}

    def linear_params(self) -> int:
        """Weights of the projections (what bitsandbytes quantizes)."""
        return self.layers * sum(a * b for a, b in self.projection_shapes().values())

    def other_params(self) -> int:
        """Embeddings (and an untied head), norms and biases: kept 16-bit in a 4-bit model."""
        emb = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        bias = (self.hidden + 2 * self.kv_width) if self.qkv_bias else 0
        return emb + self.layers * (2 * self.hidden + bias) + self.hidden

    def params(self) -> int:
        return self.linear_params() + self.other_params()


# Published configs (config.json on the hub), as numbers since the kit runs offline.
QWEN25_0_5B = ModelShape("Qwen2.5-0.5B-Instruct", 151936, 896, 24, 14, 2, 4864, True, True)
QWEN25_1_5B = ModelShape("Qwen2.5-1.5B-Instruct", 151936, 1536, 28, 12, 2, 8960, True, True)
QWEN25_3B = ModelShape("Qwen2.5-3B-Instruct", 151936, 2048, 36, 16, 2, 11008, True, True)
QWEN25_7B = ModelShape("Qwen2.5-7B-Instruct", 152064, 3584, 28, 28, 4, 18944, False, True)
# The models behind Unsloth's published minimum-VRAM table (its 3B and 8B rows): Llama 3.2 3B, Llama 3.1 8B.
LLAMA32_3B = ModelShape("Llama-3.2-3B-Instruct", 128256, 3072, 28, 24, 8, 8192, True, False)
LLAMA31_8B = ModelShape("Llama-3.1-8B-Instruct", 128256, 4096, 32, 32, 8, 14336, False, False)
KNOWN_SHAPES = {s.name.lower().removesuffix("-instruct"): s for s in (QWEN25_0_5B, QWEN25_1_5B, QWEN25_3B, QWEN25_7B)}


def shape_from_config(name: str, cfg: dict[str, Any]) -> ModelShape:
    """A ModelShape from a transformers config.json dict."""
    return ModelShape(name, cfg["vocab_size"], cfg["hidden_size"], cfg["num_hidden_layers"],
                      cfg["num_attention_heads"], cfg.get("num_key_value_heads") or cfg["num_attention_heads"],
                      cfg["intermediate_size"], bool(cfg.get("tie_word_embeddings", True)),
                      cfg.get("model_type") == "qwen2" or bool(cfg.get("attention_bias")))


def default_model_shape() -> ModelShape:
    """SmolLM2-135M-Instruct's shape, read from the embedded GGUF file's header (no weights are loaded)."""
    from gguf import GGUFReader

    reader = GGUFReader(default_gguf_path())

    def value(key: str) -> int:
        f = reader.fields[key]
        return int(f.parts[f.data[0]][0])

    tied = not any(t.name == "output.weight" for t in reader.tensors)
    return ModelShape(DEFAULT_MODEL, value("llama.vocab_size"), value("llama.embedding_length"),
                      value("llama.block_count"), value("llama.attention.head_count"),
                      value("llama.attention.head_count_kv"), value("llama.feed_forward_length"), tied)


def model_shape(name: str) -> ModelShape:
    """The shape of a preset's model: 'default', 'tiny', a local checkpoint, or a known Qwen2.5 hub name."""
    if name.lower() in ("default", "smollm2", DEFAULT_MODEL.lower()):
        return default_model_shape()
    if name == TINY_MODEL:  # built once and cached, like every user of the preset
        name = str(tiny_model_path())
    if (Path(name) / "config.json").is_file():
        return shape_from_config(name, json.loads((Path(name) / "config.json").read_text()))
    key = name.rsplit("/", 1)[-1].lower().removesuffix("-bnb-4bit").removesuffix("-unsloth").removesuffix("-instruct")
    if key in KNOWN_SHAPES:
        return KNOWN_SHAPES[key]
    raise ValueError(f"no shape known for model {name!r}: pass a local checkpoint (its config.json is read) or "
                     f"one of {sorted(KNOWN_SHAPES)}")


@dataclass
class StageMemory:
    """Bytes by part for one stage; `total` is their sum."""

    stage: str
    parts: dict[str, float] = field(default_factory=dict)
    note: str = ""

    @property
    def total(self) -> float:
        return sum(self.parts.values())


@dataclass(frozen=True)
class TrainShape:
    """What one training step holds: sequences x length, loss tokens per sequence, and how it saves memory."""

    batch: int
    length: int
    loss_tokens: int
    checkpointing: bool
    optim: str
    fused_loss: bool = False


def weight_bytes(shape: ModelShape, load_in_4bit: bool, compute_bytes: int) -> float:
    if load_in_4bit:
        return shape.linear_params() * NF4_BYTES + shape.other_params() * compute_bytes
    return shape.params() * compute_bytes


def lora_params(shape: ModelShape, r: int, targets: list[str], layers: list[int] | None = None) -> int:
    n_layers = len(layers) if layers is not None else shape.layers
    proj = shape.projection_shapes()
    unknown = set(targets) - set(proj)
    if unknown:
        raise ValueError(f"LoRA targets {sorted(unknown)} are not projections of {shape.name}: {sorted(proj)}")
    return n_layers * sum(r * (proj[t][0] + proj[t][1]) for t in targets)


def optimizer_bytes_per_param(optim: str) -> float:
    """AdamW keeps two moments: float32 (8 bytes), or 8-bit (2 bytes) for bitsandbytes' 8-bit AdamW."""
    name = str(optim).lower()
    return 2.0 if "8bit" in name else 4.0 if name in ("sgd", "adafactor") else 8.0


def layer_working_values(shape: ModelShape) -> int:
    """Values per token one decoder layer keeps for its backward (norms, q/k/v/o, rope, MLP gate/up/act)."""
    return 10 * shape.hidden + 3 * shape.kv_width + 4 * shape.intermediate


def training_parts(shape: ModelShape, step: TrainShape, trainable: int, compute_bytes: int,
                   fixed: float, card: float | None) -> dict[str, float]:
    """Trainable state, activations and logits of one forward + backward (bytes)."""
    tokens = step.batch * step.length
    parts = {"train+grad": trainable * 8.0, "optimizer": trainable * optimizer_bytes_per_param(step.optim)}
    per_layer = tokens * layer_working_values(shape) * compute_bytes
    if step.checkpointing:
        parts["activations"] = (shape.layers + 1) * tokens * shape.hidden * compute_bytes + per_layer
    else:
        parts["activations"] = shape.layers * per_layer + tokens * shape.hidden * compute_bytes
    if step.fused_loss and card is not None:
        free = card - fixed - sum(parts.values())
        parts["logits"] = max(0.0, min(step.batch * step.loss_tokens * shape.vocab * 16.0, FUSED_LOSS_CAP, free / 2))
    else:
        parts["logits"] = step.batch * step.loss_tokens * shape.vocab * (compute_bytes + 8.0)
    return parts


def generation_parts(shape: ModelShape, batch: int, length: int, compute_bytes: int) -> dict[str, float]:
    """KV cache of `batch` sequences of `length` tokens, one prefill layer's working set, next-token logits."""
    tokens = batch * length
    return {"kv_cache": tokens * 2 * shape.layers * shape.kv_width * compute_bytes,
            "prefill": tokens * (3 * shape.hidden + 2 * shape.intermediate) * compute_bytes,
            "logits": batch * shape.vocab * 4.0}


def estimate_preset(preset: Any, shape: ModelShape | None = None) -> list[StageMemory]:
    """Per-stage memory of a preset (train/presets.py) on its card (`preset.memory_gb`; None: a CPU)."""
    shape = shape or model_shape(preset.model)
    on_gpu = preset.memory_gb is not None
    card = preset.memory_gb * GB if on_gpu else None
    compute = 4 if preset.dtype == "float32" else 2
    context = CUDA_CONTEXT if on_gpu else CPU_RUNTIME
    ctx_key = "cuda_ctx" if on_gpu else "runtime"
    unsloth = on_gpu and preset.backend in ("auto", "unsloth")
    lora, weights = preset.lora, weight_bytes(shape, preset.load_in_4bit, compute)

    def trainable(lora: LoraSpec | None) -> int:
        return shape.params() if lora is None else lora_params(shape, lora.r, list(lora.target_modules), lora.layers)

    def checkpointing(settings: dict) -> bool:
        """Unsloth's checkpointing set on the LoRA model, or the stage's own."""
        return (lora is not None and bool(lora.gradient_checkpointing)) or bool(settings.get("gradient_checkpointing"))

    def training(stage: str, step: TrainShape, n_train: int, note: str, stage_weights: float = weights,
                 stage_shape: ModelShape = shape) -> StageMemory:
        parts = training_parts(stage_shape, step, n_train, compute, stage_weights + context, card)
        return StageMemory(stage, {"weights": stage_weights, ctx_key: context, **parts}, note)  # LoRA: in train+grad

    def pairs(stage: str, settings: dict, stage_weights: float, stage_shape: ModelShape, loss_tokens: int | None):
        """DPO / reward model: both sequences of each pair in one pass, training the stage's own LoRA."""
        n, length = settings["per_device_train_batch_size"], settings["max_length"]
        step = TrainShape(2 * n, length, loss_tokens or length, settings.get("gradient_checkpointing", False),
                          "adamw_torch")
        stage_lora = LoraSpec(r=settings["lora_r"], alpha=settings["lora_alpha"]) if settings["lora_r"] else None
        return training(stage, step, trainable(stage_lora), f"{n} pairs x {length} tokens", stage_weights, stage_shape)

    n_train, s, g = trainable(lora), preset.sft, preset.grpo
    step = TrainShape(s["per_device_train_batch_size"], s["max_length"], s["max_length"], checkpointing(s), s["optim"],
                      fused_loss=unsloth)
    stages = [training("sft", step, n_train, "Unsloth fused loss" if unsloth else "")]
    gen_batch = g["per_device_train_batch_size"] * g["gradient_accumulation_steps"]
    optim_state = n_train * (4.0 + optimizer_bytes_per_param("adamw_torch"))  # weights + moments stay resident
    stages.append(StageMemory("grpo rollout", {"weights": weights, ctx_key: context, "train+optim": optim_state,
                                               **generation_parts(shape, gen_batch, preset.max_seq_length, compute)},
                              f"{gen_batch} sequences x {preset.max_seq_length} tokens"))
    for mode, completion in (("single", g["max_completion_length"]), ("multi", g["max_episode_tokens"])):
        step = TrainShape(g["per_device_train_batch_size"], preset.max_seq_length, completion, checkpointing(g),
                          "adamw_torch", fused_loss=unsloth)
        stages.append(training(f"grpo {mode}", step, n_train, f"update, loss on {completion} tokens"
                               + (" (Unsloth chunked logits)" if unsloth else "")))
    # the DPO reference pass (adapter disabled, no grad) keeps only log-probabilities: the policy's pass is the peak
    dpo_weights = weight_bytes(shape, preset.dpo.get("load_in_4bit", False), compute)
    stages.append(pairs("dpo", preset.dpo, dpo_weights, shape, None))
    rm_shape = replace(shape, vocab=2, tied_embeddings=False)  # a score head instead of the LM head
    # reward_model._load_head loads the base in float32 (mixed precision autocasts it), without the LM head
    rm_weights = weight_bytes(shape, False, 4) - shape.vocab * shape.hidden * 4 * (not shape.tied_embeddings)
    stages.append(pairs("reward model", preset.reward_model, rm_weights, rm_shape, 1))
    eval_parts = {"weights": weights, ctx_key: context, "adapter": n_train * 4.0 if lora is not None else 0.0,
                  **generation_parts(shape, preset.eval_batch_size, preset.max_seq_length, compute)}
    if not on_gpu:  # the keys/values of a CPU evaluation live in resident memory, within the key/value budget
        eval_parts["kv_cache"] = min(eval_parts["kv_cache"], KV_BUDGET / 2)
        eval_parts["prefix_cache"] = KV_BUDGET / 2
    stages.append(StageMemory("eval", eval_parts,
                              f"{preset.eval_batch_size} episodes x {preset.max_seq_length} tokens"))
    return stages


def published_check() -> list[tuple[str, float, float]]:
    """(case, published GB, estimated GB) against Unsloth's minimum-VRAM table (see the module doc)."""
    out = []
    for shape, published_q, published_l in ((LLAMA32_3B, 3.5, 8.0), (LLAMA31_8B, 6.0, 22.0)):
        for four_bit, published in ((True, published_q), (False, published_l)):
            weights = weight_bytes(shape, four_bit, 2)
            step = TrainShape(1, 512, 512, True, "adamw_8bit", fused_loss=True)
            parts = training_parts(shape, step, lora_params(shape, 16, LORA_TARGETS), 2,
                                   weights + CUDA_CONTEXT, 80 * GB)
            total = weights + CUDA_CONTEXT + sum(parts.values())
            out.append((f"{shape.name} {'QLoRA' if four_bit else 'LoRA 16-bit'}", published, total / GB))
    return out

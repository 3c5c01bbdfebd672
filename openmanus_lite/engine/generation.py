"""Batched generation of the next assistant turn (stopped at `<|im_end|>`) for many conversations at once, the model
in inference mode (train mode with gradient checkpointing generates garbage). A `PrefixCache` keeps earlier turns'
keys/values so an episode encodes only its new tokens; keys/values share one budget (`kv_budget`): half for the cache,
half for a CPU decoding batch, so a long episode shrinks the batch instead of growing the process.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import math
import os
import weakref
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch
from transformers import DynamicCache

from openmanus_lite.engine import decoding, precision
from openmanus_lite.engine.decoding import KV, ReusedPrefix, Row, decode

Messages = list[dict[str, str]]

KV_BUDGET_ENV = "OPENMANUS_KV_BUDGET_GB"
# 1.5, not 2, since a batch's reused keys/values are copied a prefill group at a time (docs/RESULTS.md, issue #41)
DEFAULT_KV_BUDGET_GB = 1.5
ENGINES = ("loop", "generate", "vllm")


def kv_budget() -> int | None:
    """Bytes of keys/values a generation may hold, from OPENMANUS_KV_BUDGET_GB (default 1.5); "none": no budget."""
    text = os.environ.get(KV_BUDGET_ENV, "").strip().lower()
    if text in ("none", "off"):
        return None
    return int(float(text or DEFAULT_KV_BUDGET_GB) * 2**30)


def kv_bytes_per_token(model: Any, dtype: Any) -> int:
    """Keys + values of one token over every layer, in `dtype`."""
    cfg = decoding.text_config(model)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    return 2 * cfg.num_hidden_layers * kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()


def budget_batches(order: list[int], lengths: list[int], limits: list[int], batch_size: int,
                   token_bytes: int, budget: int | None) -> list[list[int]]:
    """`order` cut into batches of at most `batch_size` rows within `budget` bytes (None: no bound): a batch's decoding
    buffer, rows x (longest prompt + longest limit) x `token_bytes`, plus one prefill group's prompts (a
    `PREFILL_GROUPS`th of the rows). A row alone always makes a batch."""
    need = {i: lengths[i] + lengths[i] // decoding.PREFILL_GROUPS + limits[i] for i in order}

    def fits(batch: list[int], i: int) -> bool:
        widest = max(need[j] for j in (*batch, i))
        return len(batch) < batch_size and (budget is None or (len(batch) + 1) * widest * token_bytes <= budget)

    return decoding.greedy_groups(order, fits)


@dataclass
class GenerationResult:
    """One entry per input conversation, in input order. `logprobs` are at the sampling temperature, before
    top-p: the quantity TRL's GRPO trainer computes for its own ratios."""

    texts: list[str]
    prompt_ids: list[list[int]] | None = None
    completion_ids: list[list[int]] | None = None
    logprobs: list[list[float]] | None = None
    stopped: list[bool] = field(default_factory=list)  # ended with eos, not at `max_new_tokens`

    @property
    def num_generated_tokens(self) -> int:
        return sum(len(c) for c in self.completion_ids or [])


def is_unsloth_model(model: Any) -> bool:
    """True for a model loaded through Unsloth (load_model marks it; Unsloth keeps its tokenizer on it)."""
    if getattr(model, "openmanus_backend", None) == "unsloth":
        return True
    for _ in range(4):  # the model, then what it wraps (None has neither attribute, so the walk just ends False)
        if getattr(model, "_saved_temp_tokenizer", None) is not None:
            return True
        model = getattr(model, "base_model", None) or getattr(model, "model", None)
    return False


@contextlib.contextmanager
def inference_mode(model: Any) -> Iterator[Any]:
    """Put the model in eval / inference mode for the block; restore train mode after if it was on."""
    was_training = bool(getattr(model, "training", False))
    fast = None
    if is_unsloth_model(model):
        from unsloth import FastLanguageModel as fast

        fast.for_inference(model)
    else:
        model.eval()
    try:
        yield model
    finally:
        if was_training:
            fast.for_training(model) if fast is not None else model.train()


def render_prompts(tokenizer: Any, conversations: list[Messages]) -> list[list[int]]:
    """Token ids of each conversation rendered with the chat template plus the assistant header."""
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError("the tokenizer has no chat_template; load it with openmanus_lite.models.load_tokenizer "
                         "from a kit checkpoint, or set tokenizer.chat_template (e.g. models.qwen25_chat_template())")
    texts = [tokenizer.apply_chat_template([{"role": m["role"], "content": m["content"]} for m in conv],
                                           tokenize=False, add_generation_prompt=True) for conv in conversations]
    return [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]


def stop_ids(tokenizer: Any) -> list[int]:
    """The ids that end a turn: `<|im_end|>` and the eos token."""
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    ids = {tokenizer.eos_token_id} - {None}
    if isinstance(im_end, int) and im_end != getattr(tokenizer, "unk_token_id", None):
        ids.add(im_end)
    if not ids:
        raise ValueError("the tokenizer has neither <|im_end|> nor an eos token: cannot tell where a turn ends")
    return sorted(ids)


class PrefixCache:
    """Keys/values of earlier turns, reused when a conversation comes back one turn longer (without it re-encoding
    is quadratic in turns). Reuse covers the longest common token prefix with any entry, at least `min_reuse`
    tokens; least recently used entries go beyond `max_bytes` (default: half of `kv_budget()`, else 2 GiB), except
    those a generation call has reserved for its batches still to run. Shared entries (`share_prefixes`) hold a
    prefix several prompts share."""

    def __init__(self, max_bytes: int | None = None, min_reuse: int = 16):
        budget = kv_budget()
        self.max_bytes = max_bytes if max_bytes is not None else 2 * 2**30 if budget is None else budget // 2
        self.min_reuse = min_reuse
        self._entries: dict[int, tuple[torch.Tensor, KV, int, bool]] = {}  # id -> (ids, kv, bytes, shared)
        self._reserved: Counter[int] = Counter()  # entry id -> prompts of the running call yet to reuse it
        self._next = self.nbytes = self.reused_tokens = self.encoded_tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def shared_entries(self) -> int:
        return sum(entry[3] for entry in self._entries.values())

    def match(self, ids: list[int]) -> tuple[int | None, int]:
        """(entry id, reusable prefix length) of the entry sharing the longest prefix with `ids`."""
        best, best_len = None, 0
        query = torch.tensor(ids, dtype=torch.long)
        for eid, (stored, *_) in self._entries.items():
            n = min(len(stored), len(query))
            differ = (stored[:n] != query[:n]).nonzero()
            common = int(differ[0]) if len(differ) else n
            if common > best_len:
                best, best_len = eid, common
        if best is None or best_len < self.min_reuse:
            return None, 0
        self._entries[best] = self._entries.pop(best)  # most recently used last
        return best, best_len

    def kv(self, eid: int) -> KV:
        return self._entries[eid][1]

    @contextlib.contextmanager
    def reserved(self, prompts: list[list[int]]) -> Iterator[None]:
        """Within a generation call: keep the entries `prompts` will reuse until their batches copied them (`release`);
        else the entries the first batches add evict exactly those the batches still to run need."""
        self._reserved = Counter(eid for eid, _ in map(self.match, prompts) if eid is not None)
        try:
            yield
        finally:
            self._reserved.clear()

    def release(self, matched: list[tuple[int | None, int]]) -> None:
        """A batch has copied the keys/values it reuses: its reservations end, and the entries its prompts fully
        contain (the same conversations a turn ago) go, unless a later batch still reuses them."""
        for eid, _ in matched:
            self._reserved[eid] -= 1
        self._reserved = +self._reserved  # counts at zero removed
        for eid, common in matched:
            entry = self._entries.get(eid)
            if entry is not None and not entry[3] and common >= len(entry[0]) and eid not in self._reserved:
                self.drop(eid)

    def add(self, ids: list[int], kv: KV, shared: bool = False) -> None:
        """Keep `ids`' keys/values; beyond the cap the least recently used unreserved entries go (the new one too,
        when every older entry is reserved)."""
        size = sum(k.nbytes + v.nbytes for k, v in kv)
        self._entries[self._next] = (torch.tensor(ids, dtype=torch.long), kv, size, shared)
        self._next += 1
        self.nbytes += size
        # dicts keep insertion order (match moves an entry last): the least recently used first
        for victim in [eid for eid in self._entries if eid not in self._reserved]:
            if self.nbytes <= self.max_bytes or len(self._entries) <= 1:
                break
            self.drop(victim)

    def drop(self, eid: int) -> None:
        self.nbytes -= self._entries.pop(eid)[2]

    def clear(self) -> None:
        self._entries.clear()
        self._reserved.clear()
        self.nbytes = 0

    def copy(self) -> "PrefixCache":
        """A cache of the same entries (their keys/values shared, not copied) and settings, its counters at zero: a
        cache as it stood, for runs that should each start from it."""
        twin = PrefixCache(self.max_bytes, self.min_reuse)
        for ids, kv, _, shared in self._entries.values():
            twin.add(ids.tolist(), kv, shared=shared)
        return twin


class ChosenLogprobs:
    """A logits processor keeping only each chosen token's log-probability (`output_logits=True` keeps a float32
    [batch, vocab] row per step: ~2.5 GB for Qwen2.5 at 16 rows x 256 steps). Step t's token is the last column of
    `input_ids` at step t + 1, so one step's log-softmax is kept; `finish` reads the last from the sequences."""

    def __init__(self, temperature: float = 1.0):
        if temperature <= 0:
            raise ValueError(f"ChosenLogprobs needs a positive temperature, got {temperature}")
        self.temperature = float(temperature)
        self._prev: Any = None  # log_softmax of the previous step, [batch, vocab]
        self._steps: list[Any] = []  # one [batch] tensor per finished step

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        if self._prev is not None:
            self._steps.append(self._prev.gather(-1, input_ids[:, -1:].to(self._prev.device)).squeeze(-1))
        self._prev = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores

    def finish(self, sequences: Any) -> Any:
        """[batch, steps] float32 log-probabilities of the generated tokens (on the CPU)."""
        if self._prev is None:
            raise RuntimeError("ChosenLogprobs.finish called before generate ran a step")
        self._steps.append(self._prev.gather(-1, sequences[:, -1:].to(self._prev.device)).squeeze(-1))
        self._prev = None
        return torch.stack(self._steps, dim=1).cpu()

    @property
    def retained_rows(self) -> int:
        """How many [batch, vocab] tensors this processor holds now (0 or 1)."""
        return int(self._prev is not None)


def generate_turns(model: Any, tokenizer: Any, conversations: list[Messages], *, max_new_tokens: int = 128,
                   temperature: float = 0.0, top_p: float = 1.0, seed: int | None = None, batch_size: int = 16,
                   max_prompt_tokens: int | None = None, return_ids: bool = False, return_logprobs: bool = False,
                   kv_cache: PrefixCache | None = None, engine: str | None = None) -> GenerationResult:
    """The next assistant turn of every conversation. temperature 0 is greedy; `seed` seeds torch once per call;
    `max_prompt_tokens` keeps an over-long prompt's last tokens (the most recent observation); `kv_cache` reuses
    earlier turns (PrefixCache); `engine` forces a generator (`select_engine`)."""
    prompts = render_prompts(tokenizer, conversations) if conversations else []
    if max_prompt_tokens:
        prompts = [p[-max_prompt_tokens:] for p in prompts]
    result = generate_from_ids(model, tokenizer, prompts, max_new_tokens=max_new_tokens, temperature=temperature,
                               top_p=top_p, seed=seed, batch_size=batch_size, return_logprobs=return_logprobs,
                               kv_cache=kv_cache, engine=engine)
    result.prompt_ids = result.prompt_ids if return_ids else None
    return result


def generate_from_ids(model: Any, tokenizer: Any, prompts: list[list[int]], *,
                      max_new_tokens: int | list[int] = 128, temperature: float = 0.0, top_p: float = 1.0,
                      seed: int | None = None, batch_size: int = 16, return_logprobs: bool = False,
                      kv_cache: PrefixCache | None = None, engine: str | None = None) -> GenerationResult:
    """`generate_turns` on token ids (RL rollouts continue the exact sampled ids); `max_new_tokens` may be one limit
    per prompt (a rollout's remaining budget)."""
    prompts = [list(p) for p in prompts]
    if not prompts:
        return GenerationResult([], [], [], [] if return_logprobs else None, [])
    limits = [max_new_tokens] * len(prompts) if isinstance(max_new_tokens, int) else list(max_new_tokens)
    if len(limits) != len(prompts):
        raise ValueError(f"max_new_tokens has {len(limits)} limits for {len(prompts)} prompts")
    if min(limits) < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {min(limits)}")
    stop = stop_ids(tokenizer)
    if seed is not None:
        torch.manual_seed(seed)
    choice = select_engine(model, engine, return_logprobs=return_logprobs)
    if choice.name == "vllm":
        rows = _generate_vllm(model, prompts, limits, stop, temperature, top_p, seed, return_logprobs)
    else:
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop[0]
        rows = _generate_hf(model, choice.dtype, choice.name == "loop", prompts, limits, stop, pad_id, temperature,
                            top_p, batch_size, return_logprobs, kv_cache)
    return GenerationResult(texts=[tokenizer.decode(r.ids, skip_special_tokens=True).strip() for r in rows],
                            prompt_ids=prompts, completion_ids=[r.ids for r in rows],
                            logprobs=[r.logprobs for r in rows] if return_logprobs else None,
                            stopped=[r.stopped for r in rows])


def reply_logprobs(model: Any, tokenizer: Any, conversations: list[Messages]) -> list[float]:
    """Mean teacher-forced log-probability (temperature 1, end-of-turn tokens included) of each conversation's
    assistant replies (-inf without one): best-of-N's picker without a reward model (`eval.scaling`). Logits only at
    reply positions (full logits of a 3,000-token episode: ~0.6 GB)."""
    dtype = _loop_dtype(model, _device_type(model), False)
    runner = inference_copy(model, dtype) if dtype is not None else model
    device = next(runner.parameters()).device
    end = stop_ids(tokenizer)[0]
    out = []
    with inference_mode(model), torch.inference_mode():
        for conv in conversations:
            turns = [i for i, m in enumerate(conv) if m["role"] == "assistant"]
            if not turns:
                out.append(-math.inf)
                continue
            # the chat template renders prefix-consistently (as the prefix cache relies on): replies follow prompts
            prompts = render_prompts(tokenizer, [conv[:i] for i in turns])
            replies = [tokenizer(conv[i]["content"], add_special_tokens=False)["input_ids"] + [end] for i in turns]
            ids = prompts[-1] + replies[-1]
            targets = [p for prompt, reply in zip(prompts, replies)
                       for p in range(len(prompt), len(prompt) + len(reply)) if p < len(ids)]
            seq = torch.tensor([ids], device=device)
            logits = runner(input_ids=seq, logits_to_keep=torch.tensor([p - 1 for p in targets], device=device)).logits
            logp = torch.log_softmax(logits[0].float(), dim=-1)
            out.append(float(logp.gather(-1, seq[0, targets].unsqueeze(-1)).mean()))
    return out


@dataclass(frozen=True)
class EngineChoice:
    """Which generator (ENGINES) runs a call, in which dtype (None: the model's own), and why (logged once)."""

    name: str
    dtype: Any = None
    reason: str = ""


def select_engine(model: Any, engine: str | None = None, *, return_logprobs: bool = False) -> EngineChoice:
    """"vllm" when Unsloth attached its vLLM engine, the model's own "generate" for an Unsloth model on a GPU or a
    model with sliding-window / linear-attention layers, else the kit's decoding "loop" (`_loop_dtype`). `engine` or
    OPENMANUS_ENGINE forces one."""
    forced = engine or os.environ.get("OPENMANUS_ENGINE") or None
    if forced not in (None, *ENGINES):
        raise ValueError(f"unknown generation engine {forced!r}; choose one of {ENGINES}")
    has_vllm = getattr(model, "vllm_engine", None) is not None and hasattr(model, "fast_generate")
    device = _device_type(model)
    if forced == "vllm" and not has_vllm:
        raise ValueError("engine 'vllm' needs a model loaded with Unsloth's fast_inference=True (model.vllm_engine)")
    if forced == "vllm" or (forced is None and has_vllm):
        choice = EngineChoice("vllm", reason="Unsloth's vLLM engine is attached (fast_inference=True)")
    elif forced == "generate":
        choice = EngineChoice("generate", reason="asked for")
    elif forced is None and is_unsloth_model(model) and device == "cuda":
        choice = EngineChoice("generate", reason="Unsloth model on a GPU without vLLM: its patched generate")
    elif not decoding.supports_buffer_cache(model):
        if forced == "loop":
            raise ValueError("engine 'loop' needs full-attention layers only (this model has sliding-window ones)")
        choice = EngineChoice("generate", reason="sliding-window or linear-attention layers")
    else:
        dtype = _loop_dtype(model, device, return_logprobs)
        copy = f" on a {str(dtype).removeprefix('torch.')} copy" if dtype else ""
        choice = EngineChoice("loop", dtype, "the kit's decoding loop" + copy)
    _log_choice(id(model), choice)
    return choice


@functools.cache
def _log_choice(model_id: int, choice: EngineChoice) -> None:
    logging.getLogger(__name__).info("generation engine: %s (%s)", choice.name, choice.reason)


def _device_type(model: Any) -> str:
    try:
        return next(model.parameters()).device.type
    except (StopIteration, AttributeError, TypeError):
        return "cpu"


def _loop_dtype(model: Any, device: str, return_logprobs: bool) -> Any:
    """bf16 for a float32 or LoRA-adapted model on a CPU with native bf16 (4x faster than float32), unless
    log-probabilities must match the trainer's dtype; OPENMANUS_INFERENCE_DTYPE=model keeps the model's dtype."""
    setting = os.environ.get("OPENMANUS_INFERENCE_DTYPE", "auto")
    if setting not in ("auto", "model"):
        raise ValueError(f"OPENMANUS_INFERENCE_DTYPE={setting!r}: choose 'auto' or 'model'")
    if device != "cpu" or return_logprobs or setting == "model":
        return None
    params = list(model.parameters())
    if not params or any(not p.is_floating_point() for p in params):
        return None  # 4-bit (bitsandbytes) weights: no plain copy to merge LoRA into
    if (params[0].dtype == torch.float32 or hasattr(model, "peft_config")) and precision.cpu_has_native_bf16():
        return torch.bfloat16
    return None


FINGERPRINT_ELEMENTS = 1 << 22  # trainable elements summed per fingerprint: a LoRA adapter's all, a full model's sample


def weights_fingerprint(model: Any) -> tuple:
    """Changes when the weights change: version counters, plus sums of the trainable parameters since fused AdamW
    updates in place without bumping `_version`. A full model is summed over an even stride (all 135M elements
    took ~0.25 s per call; weight decay moves every sampled element anyway)."""
    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    sums = ()
    if trainable:
        stride = max(1, -(-sum(p.numel() for p in trainable) // FINGERPRINT_ELEMENTS))
        with torch.no_grad():
            sums = tuple(torch.stack([p.detach().reshape(-1)[::stride].sum(dtype=torch.float64)
                                      for p in trainable]).cpu().tolist())
    return (id(model), sum(p._version for p in params), sums)


_INFERENCE_COPIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> ((fingerprint, dtype), copy)


def inference_copy(model: Any, dtype: Any) -> Any:
    """The model's weights (LoRA merged) as a plain model of `dtype`, built once (`models.empty_model`) and
    refreshed in place when the weights changed. Never `copy.deepcopy`: it reaches the trainer's state (gigabytes
    per GRPO step); never merge in place: unmerging leaves float rounding in the trained weights."""
    from openmanus_lite.models import empty_model

    key = (weights_fingerprint(model), dtype)
    cached = _INFERENCE_COPIES.get(model)
    if cached is not None and cached[0] == key:
        return cached[1]
    fits = cached is not None and cached[0][1] == dtype
    clone = cached[1] if fits else empty_model(model, dtype).eval().requires_grad_(False)
    missing, unexpected = clone.load_state_dict(merged_state_dict(model), strict=False)
    # tied parameters (one embedding matrix) appear once in a state dict and are filled by the tie
    tied = {n for n, _ in clone.named_parameters(remove_duplicate=False)} - {n for n, _ in clone.named_parameters()}
    if unexpected or [k for k in missing if k not in tied]:
        raise RuntimeError(f"inference copy: weights do not fit the model (missing {missing[:3]}, "
                           f"unexpected {unexpected[:3]})")
    _INFERENCE_COPIES[model] = (key, clone)
    return clone


def merged_state_dict(model: Any) -> dict[str, Any]:
    """The base model's state dict with the active LoRA adapters merged into new tensors (the model is untouched)."""
    if not hasattr(model, "peft_config") or not hasattr(model, "get_base_model"):
        return dict(model.state_dict())
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    active = getattr(model, "active_adapters", None) or getattr(model, "active_adapter", "default")
    active = [active] if isinstance(active, str) else list(active)
    out = {}
    for name, tensor in base.state_dict().items():
        if "lora_" in name or ".original_module." in name:
            continue
        if ".modules_to_save." in name:  # a fully trained module: the active adapter's copy is the weight
            head, _, rest = name.partition(".modules_to_save.")
            adapter, _, leaf = rest.partition(".")
            if adapter not in active:
                continue
            name = f"{head}.{leaf}"
        out[name.replace(".base_layer.", ".")] = tensor
    with torch.no_grad():
        for name, module in base.named_modules():
            adapters = [a for a in active if a in getattr(module, "lora_A", {})]
            if isinstance(module, LoraLayer) and adapters and not getattr(module, "merged", False):
                weight = module.get_base_layer().weight
                out[f"{name}.weight"] = weight + sum(module.get_delta_weight(a) for a in adapters).to(weight.dtype)
    return out


def _generate_hf(model, dtype, loop, prompts, limits, stop, pad_id, temperature, top_p, batch_size,
                 return_logprobs, kv_cache) -> list[Row]:
    """The loop or `generate` engine over length-sorted batches within the key/value budget; the loop always
    shares prefixes (in a call-local cache when the caller keeps none)."""
    runner = inference_copy(model, dtype) if dtype is not None else model
    param = next(runner.parameters())
    cache = kv_cache if kv_cache is not None else PrefixCache() if loop else None
    budget = kv_budget() if param.device.type == "cpu" else None  # a GPU preset sizes its batch to its card
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    batches = budget_batches(order, [len(p) for p in prompts], limits, batch_size,
                             kv_bytes_per_token(runner, param.dtype), None if budget is None else budget // 2)
    rows = [Row(i, limit) for i, limit in enumerate(limits)]
    reserved = cache.reserved(prompts) if cache is not None else contextlib.nullcontext()
    with inference_mode(model), torch.inference_mode(), reserved:
        if loop:
            share_prefixes(runner, prompts, cache, pad_id)
        for idx in batches:
            input_ids, attention, past, matched = _batch_inputs(prompts, idx, pad_id, cache, param)
            if cache is not None:
                cache.release(matched)  # `past` keeps what it reuses: the old turns' entries can leave the cache
            batch = [rows[i] for i in idx]
            if loop:  # each row's prompt + all but its last reply token is kept for the next turn
                keep = None if kv_cache is None else lambda row, kv: kv_cache.add(prompts[row.index] + row.ids[:-1], kv)
                decode(runner, input_ids, attention, past, batch, stop_ids=set(stop), temperature=temperature,
                       top_p=top_p, return_logprobs=return_logprobs, on_finish=keep)
            else:
                _generate_batch(runner, input_ids, attention, past, batch, stop, pad_id, temperature, top_p,
                                return_logprobs, kv_cache, prompts)
    return rows


def _generate_batch(model, input_ids, attention, past, rows, stop, pad_id, temperature, top_p, return_logprobs,
                    kv_cache, prompts) -> None:
    """One batch through the model's own `generate`; keeps each row's prompt + reply but its last token in
    `kv_cache`."""
    sample = bool(temperature) and temperature > 0
    recorder = ChosenLogprobs(temperature if sample else 1.0) if return_logprobs else None
    out = model.generate(
        input_ids=input_ids, attention_mask=attention, max_new_tokens=max(r.limit for r in rows), eos_token_id=stop,
        pad_token_id=pad_id, do_sample=sample, return_dict_in_generate=True, use_cache=True, top_k=0 if sample else None,
        temperature=float(temperature) if sample else None, top_p=float(top_p) if sample else None,
        logits_processor=[recorder] if recorder else None,
        past_key_values=DynamicCache(past.layers(), config=getattr(model, "config", None)) if past else None)
    width = input_ids.shape[1]
    chosen = recorder.finish(out.sequences).tolist() if recorder else None
    for b, (row, ids) in enumerate(zip(rows, out.sequences[:, width:].tolist())):
        ids = ids[: row.limit]
        cut = next((k for k, t in enumerate(ids) if t in stop), None)
        row.stopped, row.ids = cut is not None, ids if cut is None else ids[: cut + 1]
        row.logprobs = chosen[b][: len(row.ids)] if chosen else []
    layers = getattr(out.past_key_values, "layers", None)
    for b, row in enumerate(rows if kv_cache is not None and layers else []):
        fed = max(0, len(row.ids) - 1)
        pos = torch.cat([attention[b].nonzero().squeeze(-1), width + torch.arange(fed, device=attention.device)])
        if any(layer.keys is None or layer.keys.shape[-2] <= int(pos[-1]) for layer in layers):
            return  # a cache layout this code does not know (e.g. sliding windows): no reuse
        kv_cache.add(prompts[row.index] + row.ids[:fed],
                     [(layer.keys[b].index_select(-2, pos), layer.values[b].index_select(-2, pos)) for layer in layers])


def _generate_vllm(model, prompts, limits, stop, temperature, top_p, seed, return_logprobs) -> list[Row]:
    """Unsloth's vLLM engine, handed the in-memory LoRA adapter so each call sees the latest training step."""
    from vllm import SamplingParams

    sample = bool(temperature) and temperature > 0
    params = [SamplingParams(temperature=float(temperature) if sample else 0.0, top_p=float(top_p) if sample else 1.0,
                             max_tokens=int(limit), stop_token_ids=list(stop),
                             seed=None if seed is None else int(seed) + i, logprobs=0 if return_logprobs else None)
              for i, limit in enumerate(limits)]
    lora = (model.load_lora("openmanus_lite_rollout", load_tensors=True)
            if hasattr(model, "load_lora") and hasattr(model, "peft_config") else None)
    outputs = model.fast_generate([{"prompt_token_ids": p} for p in prompts], sampling_params=params,
                                  lora_request=lora, use_tqdm=False)
    rows = []
    for i, out in enumerate(outputs):
        seq = out.outputs[0]
        ids = list(seq.token_ids)
        logps = [float(step[t].logprob) for step, t in zip(seq.logprobs or [], ids)] if return_logprobs else []
        rows.append(Row(i, limits[i], ids, logps, bool(ids) and ids[-1] in stop))
    return rows


def share_prefixes(model: Any, prompts: list[list[int]], cache: PrefixCache, pad_id: int) -> int:
    """Encode once the uncached prefixes several prompts share (a domain's instructions, the history of n sampled
    continuations): runs of sorted neighbours sharing `cache.min_reuse` more tokens, then runs within them (a trie,
    level by level, each reusing its parent). Returns the total length of the prefixes cached."""
    levels: list[list[list[int]]] = []
    _plan_prefixes(sorted(list(p) for p in prompts), 0, cache, levels, 0)
    # a level is empty when all of its prefixes were cached before (their children are not)
    return sum(_encode_prefixes(model, level, cache, pad_id) for level in levels if level)


def _plan_prefixes(seqs: list[list[int]], base: int, cache: PrefixCache, levels: list, depth: int) -> None:
    if len(seqs) < 2 or depth > 8:
        return
    need = base + cache.min_reuse
    adjacent = [len(os.path.commonprefix([a, b])) for a, b in zip(seqs, seqs[1:])]
    for long, run in itertools.groupby(range(len(adjacent)), key=lambda k: adjacent[k] >= need):
        if not long:
            continue
        ks = list(run)
        members = seqs[ks[0]:ks[-1] + 2]
        shared = min(min(adjacent[k] for k in ks), min(len(s) for s in members) - 1)
        if shared >= need and cache.match(members[0][:shared])[1] < shared:
            levels.extend([] for _ in range(depth + 1 - len(levels)))
            levels[depth].append(members[0][:shared])
        _plan_prefixes(members, shared, cache, levels, depth + 1)


def _encode_prefixes(model: Any, prefixes: list[list[int]], cache: PrefixCache, pad_id: int) -> int:
    """One prefill of `prefixes` (reusing cached parents), each kept as a shared entry."""
    idx = list(range(len(prefixes)))
    input_ids, attention, past, _ = _batch_inputs(prefixes, idx, pad_id, cache, next(model.parameters()), full=True)
    decode(model, input_ids, attention, past, [Row(i, 1) for i in idx], stop_ids=set(), temperature=0.0, top_p=1.0,
           return_logprobs=False, on_finish=lambda row, kv: cache.add(prefixes[row.index], kv, shared=True))
    return sum(len(p) for p in prefixes)


def _batch_inputs(prompts: list[list[int]], idx: list[int], pad_id: int, cache: PrefixCache | None, param: Any,
                  full: bool = False):
    """(input ids, mask, the rows' reused keys/values or None, cache matches) for rows `idx` on `param`'s device.
    Each row is [pad | cached prefix | pad | new tokens], the mask marking the holes so positions stay those of the
    unpadded sequence; every row encodes at least one token. `full`: caching the prompts, so nothing is counted."""
    matched = [cache.match(prompts[i]) if cache is not None else (None, 0) for i in idx]
    reuse = [0 if eid is None else min(common, len(prompts[i]) - 1) for i, (eid, common) in zip(idx, matched)]
    head = max(reuse)
    width = head + max(len(prompts[i]) - c for i, c in zip(idx, reuse))
    input_ids = torch.full((len(idx), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(idx), width), dtype=torch.long)
    for row, (i, c) in enumerate(zip(idx, reuse)):
        rest = len(prompts[i]) - c
        input_ids[row, head - c:head] = torch.tensor(prompts[i][:c], dtype=torch.long)
        input_ids[row, width - rest:] = torch.tensor(prompts[i][c:], dtype=torch.long)
        attention[row, head - c:head] = attention[row, width - rest:] = 1
    if cache is not None and not full:
        cache.encoded_tokens += sum(len(prompts[i]) - c for i, c in zip(idx, reuse))
        cache.reused_tokens += sum(reuse)
    input_ids, attention = input_ids.to(param.device), attention.to(param.device)
    if head == 0:
        return input_ids, attention, None, matched
    sources = [(cache.kv(eid) if c else None, c) for (eid, _), c in zip(matched, reuse)]
    return input_ids, attention, ReusedPrefix(sources, head, param.dtype, param.device), matched

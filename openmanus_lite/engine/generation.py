"""Batched generation of ONE assistant turn for many conversations at once.

Evaluation, search and GRPO rollouts all need the same thing: for each conversation, the
next assistant turn, stopped at `<|im_end|>`, generated for many episodes per forward pass.
Prompts are rendered with the tokenizer's chat template (`add_generation_prompt=True`),
grouped by length to cut padding, left-padded, and generated greedily or by sampling.

The model is switched to inference mode for the call (Unsloth's `for_inference` on an
Unsloth model, `eval()` otherwise) and switched back to training afterwards if it was
training: on this stack, generating in train mode with gradient checkpointing on gives
garbage.

Multi-turn episodes re-send the whole conversation every turn. A `PrefixCache` keeps the
keys/values of earlier turns so only the new tokens are encoded (ModelPolicy uses one): on
CPU this is most of an evaluation's cost (a 16-turn household episode re-reads its first
turns 16 times without it).

Keys/values are bounded by one memory budget (`kv_budget`, 2 GiB unless OPENMANUS_KV_BUDGET_GB says otherwise):
the prefix cache (host memory) keeps at most half of it, and on a CPU a decoding batch takes as many conversations
(up to `batch_size`) as fit their keys/values in the other half, so a long episode shrinks the batch instead of
growing the process (a GPU preset's `eval_batch_size` is sized to its card instead: train/memory.py).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import os
import weakref
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch
from transformers import DynamicCache
from transformers.initialization import no_init_weights

from openmanus_lite.engine import precision
from openmanus_lite.engine.decoding import Row, decode, supports_buffer_cache

Messages = list[dict[str, str]]

KV_BUDGET_ENV = "OPENMANUS_KV_BUDGET_GB"
DEFAULT_KV_BUDGET_GB = 2.0


def kv_budget() -> int | None:
    """Bytes of keys/values a generation may hold (prefix cache + decoding buffer; module doc), from
    OPENMANUS_KV_BUDGET_GB (default 2); "none" restores the unbudgeted engine: fixed batches, a 2 GiB cache."""
    text = os.environ.get(KV_BUDGET_ENV, "").strip().lower()
    if text in ("none", "off"):
        return None
    return int(float(text or DEFAULT_KV_BUDGET_GB) * 2**30)


def kv_bytes_per_token(model: Any, dtype: Any) -> int:
    """Keys + values of one token over every layer, in `dtype`."""
    cfg = model.config.get_text_config(decoder=True) if hasattr(model.config, "get_text_config") else model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    return 2 * cfg.num_hidden_layers * kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()


def budget_batches(order: list[int], lengths: list[int], limits: list[int], batch_size: int,
                   token_bytes: int, budget: int | None) -> list[list[int]]:
    """`order` cut into batches of at most `batch_size` rows whose keys/values stay within `budget` (None: no
    bound): while a batch is prefilled it holds the reused prefixes it is seeded from and the decoding buffer, so
    rows x (2 x longest prompt + longest limit) x `token_bytes`. A row alone always makes a batch."""
    batches: list[list[int]] = []
    longest = 0
    for i in order:
        wider = max(longest, 2 * lengths[i] + limits[i])
        cur = batches[-1] if batches else None
        if cur and len(cur) < batch_size and (budget is None or (len(cur) + 1) * wider * token_bytes <= budget):
            cur.append(i)
            longest = wider
        else:
            batches.append([i])
            longest = 2 * lengths[i] + limits[i]
    return batches


@dataclass
class GenerationResult:
    """One entry per input conversation, in input order.

    `completion_ids` is always filled; `prompt_ids` and `logprobs` when requested. Completion ids
    end with the eos id (`<|im_end|>`) when generation stopped there, and are cut at the
    token limit otherwise. `logprobs[i][j]` is the log-probability of completion token j
    under the model's distribution at the sampling temperature (logits / temperature, before
    top-p truncation) — the quantity TRL's GRPO trainer computes for its own ratios.
    """

    texts: list[str]
    prompt_ids: list[list[int]] | None = None
    completion_ids: list[list[int]] | None = None
    logprobs: list[list[float]] | None = None
    stopped: list[bool] = field(default_factory=list)
    """True where the turn ended with eos, False where it hit `max_new_tokens`."""

    @property
    def num_generated_tokens(self) -> int:
        return sum(len(c) for c in self.completion_ids or [])


def is_unsloth_model(model: Any) -> bool:
    """True for a model loaded through Unsloth (load_model marks it; Unsloth keeps its tokenizer on it)."""
    if getattr(model, "openmanus_backend", None) == "unsloth":
        return True
    inner = model
    for _ in range(4):
        if inner is None:
            break
        if getattr(inner, "_saved_temp_tokenizer", None) is not None:
            return True
        inner = getattr(inner, "base_model", None) or getattr(inner, "model", None)
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
        raise ValueError(
            "the tokenizer has no chat_template; load it with openmanus_lite.models.load_tokenizer "
            "from a kit checkpoint, or set tokenizer.chat_template (e.g. models.qwen25_chat_template())"
        )
    out = []
    for conv in conversations:
        msgs = [{"role": m["role"], "content": m["content"]} for m in conv]
        text = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        out.append(tokenizer(text, add_special_tokens=False)["input_ids"])
    return out


def _stop_ids(tokenizer: Any, model: Any) -> list[int]:
    ids = set()
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if isinstance(im_end, int) and im_end != getattr(tokenizer, "unk_token_id", None):
        ids.add(im_end)
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    if not ids:
        raise ValueError("the tokenizer has neither <|im_end|> nor an eos token: cannot tell where a turn ends")
    return sorted(ids)


class PrefixCache:
    """Keys/values of earlier turns, reused when a conversation comes back one turn longer.

    In a multi-turn episode each prompt is the previous prompt + the model's reply + the new
    observation, so re-encoding it from scratch costs the sum of all prefix lengths (quadratic
    in turns). With a cache only the new tokens are encoded. Entries are found by their first
    `key_tokens` tokens, reuse extends over the longest common token prefix (keys/values of a
    prefix depend on that prefix only, so any entry sharing it is valid), and the least recently
    used entries are dropped beyond `max_bytes` (default: half of `kv_budget()`, or 2 GiB without a budget).
    """

    def __init__(self, max_bytes: int | None = None, key_tokens: int = 32, min_reuse: int = 16):
        budget = kv_budget()
        self.max_bytes = max_bytes if max_bytes is not None else 2 * 2**30 if budget is None else budget // 2
        self.key_tokens = key_tokens
        self.min_reuse = min_reuse
        self._entries: dict[int, tuple[Any, list, int]] = {}  # id -> (ids tensor, [(k, v) per layer], bytes)
        self._by_key: dict[tuple, list[int]] = {}
        self.nbytes = 0
        self._shared: set[int] = set()  # prefixes several prompts share: never superseded by one of them
        self._next = 0
        self.reused_tokens = 0
        self.encoded_tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def shared_entries(self) -> int:
        """Entries holding a prefix several prompts share (see `share_prefixes`), not one conversation's turns."""
        return len(self._shared)

    def _key(self, ids: list[int]) -> tuple:
        return tuple(ids[: self.key_tokens])

    def match(self, ids: list[int]) -> tuple[int | None, int]:
        """(entry id, reusable prefix length) of the entry sharing the longest prefix with `ids`."""
        best, best_len = None, 0
        cands = self._by_key.get(self._key(ids), [])
        if not cands:
            return None, 0
        query = torch.tensor(ids, dtype=torch.long)
        for eid in cands:
            stored = self._entries[eid][0]
            n = min(len(stored), len(query))
            eq = stored[:n] == query[:n]
            common = n if bool(eq.all()) else int((~eq).int().argmax())
            if common > best_len:
                best, best_len = eid, common
        if best is None or best_len < self.min_reuse:
            return None, 0
        self._touch(best)
        return best, best_len

    def layers(self, eid: int) -> list:
        return self._entries[eid][1]

    def length(self, eid: int) -> int:
        return len(self._entries[eid][0])

    def drop_superseded(self, eids: list[int | None], common: list[int]) -> None:
        """Drop entries that a new, longer entry fully contains (the same conversation a turn later)."""
        for eid, c in zip(eids, common):
            if eid is not None and eid in self._entries and eid not in self._shared and c >= self.length(eid):
                self.drop(eid)

    def add(self, ids: list[int], kv: list, shared: bool = False) -> None:
        eid = self._next
        self._next += 1
        size = sum(k.nbytes + v.nbytes for k, v in kv)
        self._entries[eid] = (torch.tensor(ids, dtype=torch.long), kv, size)
        self._by_key.setdefault(self._key(ids), []).append(eid)
        self.nbytes += size
        if shared:
            self._shared.add(eid)
        while self.nbytes > self.max_bytes and len(self._entries) > 1:
            self.drop(next(iter(self._entries)))  # dicts keep insertion order: the oldest first

    def drop(self, eid: int) -> None:
        ids, _, size = self._entries.pop(eid)
        self.nbytes -= size
        self._shared.discard(eid)
        key = self._key(ids.tolist())
        rest = [e for e in self._by_key.get(key, []) if e != eid]
        if rest:
            self._by_key[key] = rest
        else:
            self._by_key.pop(key, None)

    def _touch(self, eid: int) -> None:
        self._entries[eid] = self._entries.pop(eid)  # most recently used last

    def clear(self) -> None:
        self._entries.clear()
        self._by_key.clear()
        self.nbytes = 0
        self._shared.clear()


class ChosenLogprobs:
    """A logits processor that keeps only the log-probability of each chosen token.

    `output_logits=True` keeps one float32 [batch, vocab] row per generated step until
    `generate` returns: with Qwen2.5's 151,936-token vocabulary, 16 rows x 256 steps is about
    2.5 GB, and the old stack + log_softmax made two more copies. A processor is called
    once per step with that step's scores, before the token is chosen; the token chosen at
    step t is the last column of `input_ids` at step t + 1. So each call turns the previous
    step's log-softmax into one number per row and keeps only the current step's: memory
    is one [batch, vocab] row set whatever the length, it works for greedy and sampling
    alike, and no extra forward pass is needed (recomputing from a teacher-forced forward
    over prompt + completion would cost a prefill of every multi-turn context). `finish`
    reads the last step's token from the returned sequences.

    transformers runs custom processors after the logit processors of the model's generation
    config (e.g. a repetition penalty) and before temperature / top-p, so the values are
    log_softmax(scores / temperature) of those scores: of the raw logits, as TRL recomputes
    them, when the generation config sets no such processor (the tiny and default models; a
    hub Qwen2.5-Instruct config sets repetition_penalty 1.05, which then counts).
    """

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
        last = sequences[:, -1:].to(self._prev.device)
        self._steps.append(self._prev.gather(-1, last).squeeze(-1))
        self._prev = None
        return torch.stack(self._steps, dim=1).cpu()

    @property
    def retained_rows(self) -> int:
        """How many [batch, vocab] tensors this processor holds now (0 or 1)."""
        return int(self._prev is not None)


def generate_turns(
    model: Any,
    tokenizer: Any,
    conversations: list[Messages],
    *,
    max_new_tokens: int = 128,
    temperature: float = 0.0,
    top_p: float = 1.0,
    seed: int | None = None,
    batch_size: int = 16,
    max_prompt_tokens: int | None = None,
    return_ids: bool = False,
    return_logprobs: bool = False,
    kv_cache: PrefixCache | None = None,
    engine: str | None = None,
) -> GenerationResult:
    """Generate the next assistant turn for every conversation.

    temperature 0 means greedy. `seed` makes sampling reproducible (it seeds torch once per
    call). `batch_size` conversations share one `generate` call; conversations are grouped by
    prompt length so little padding is wasted. `max_prompt_tokens` keeps only the last tokens
    of an over-long prompt (left truncation keeps the most recent observation). `kv_cache`
    reuses the keys/values of earlier turns of the same conversations (see PrefixCache). `engine`
    forces a generator (see `select_engine`).
    """
    if not conversations:
        return GenerationResult([], [] if return_ids else None, [], [] if return_logprobs else None, [])
    prompts = render_prompts(tokenizer, conversations)
    if max_prompt_tokens:
        prompts = [p[-max_prompt_tokens:] for p in prompts]
    result = generate_from_ids(model, tokenizer, prompts, max_new_tokens=max_new_tokens, temperature=temperature,
                               top_p=top_p, seed=seed, batch_size=batch_size, return_logprobs=return_logprobs,
                               kv_cache=kv_cache, engine=engine)
    result.prompt_ids = prompts if return_ids else None
    return result


def generate_from_ids(
    model: Any,
    tokenizer: Any,
    prompts: list[list[int]],
    *,
    max_new_tokens: int | list[int] = 128,
    temperature: float = 0.0,
    top_p: float = 1.0,
    seed: int | None = None,
    batch_size: int = 16,
    return_logprobs: bool = False,
    kv_cache: PrefixCache | None = None,
    engine: str | None = None,
) -> GenerationResult:
    """`generate_turns` on prompts that are already token ids (multi-turn RL rollouts continue
    the exact sampled ids instead of re-rendering text). `max_new_tokens` may be one limit per
    prompt (a rollout's remaining token budget); each row is cut at its own. Returns prompt_ids
    as given and completion_ids always. `engine` overrides `select_engine`'s choice."""
    n = len(prompts)
    if not n:
        return GenerationResult([], [], [], [] if return_logprobs else None, [])
    limits = [max_new_tokens] * n if isinstance(max_new_tokens, int) else list(max_new_tokens)
    if len(limits) != n:
        raise ValueError(f"max_new_tokens has {len(limits)} limits for {n} prompts")
    if min(limits) < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {min(limits)}")
    stop = _stop_ids(tokenizer, model)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop[0]
    if seed is not None:
        torch.manual_seed(seed)
    choice = select_engine(model, engine, return_logprobs=return_logprobs)
    if choice.name == "vllm":
        completions, logps, stopped = _generate_vllm(model, prompts, limits, stop, temperature, top_p, seed,
                                                     return_logprobs)
    else:
        completions, logps, stopped = _generate_hf(model, choice, prompts, limits, stop, pad_id, temperature, top_p,
                                                   batch_size, return_logprobs, kv_cache)
    texts = [tokenizer.decode(c, skip_special_tokens=True).strip() for c in completions]
    return GenerationResult(
        texts=texts,
        prompt_ids=[list(p) for p in prompts],
        completion_ids=completions,
        logprobs=logps if return_logprobs else None,
        stopped=stopped,
    )


def reply_logprobs(model: Any, tokenizer: Any, conversations: list[Messages]) -> list[float]:
    """The model's mean log-probability per token of each conversation's assistant replies (teacher-forced, at
    temperature 1, each reply's end-of-turn token included): how sure the policy itself is of an episode, the
    picker best-of-N uses without a reward model (`eval.scaling`). Greedy and sampled episodes score on one scale,
    which log-probabilities recorded while sampling (at the sampling temperature) would not. Runs on the copy the
    decoding loop uses (bf16 on CPUs with native bf16), one conversation per forward pass with logits only at
    the reply positions (a 3,000-token episode's full logits would be ~0.6 GB). A conversation without an
    assistant reply scores -inf."""
    dtype = _loop_dtype(model, _device_type(model), False)
    runner = inference_copy(model, dtype) if dtype is not None else model
    device = next(runner.parameters()).device
    end = _stop_ids(tokenizer, model)[0]
    out = []
    with inference_mode(model), torch.inference_mode():
        for conv in conversations:
            turns = [i for i, m in enumerate(conv) if m["role"] == "assistant"]
            if not turns:
                out.append(-math.inf)
                continue
            # each reply sits right after its prompt (the chat template renders conversations prefix-consistently:
            # the prefix cache relies on the same); the reply tokens are those the decoding loop would produce
            prompts = render_prompts(tokenizer, [conv[:i] for i in turns])
            replies = [tokenizer(conv[i]["content"], add_special_tokens=False)["input_ids"] + [end] for i in turns]
            ids = prompts[-1] + replies[-1]
            targets = [p for prompt, reply in zip(prompts, replies) for p in range(len(prompt), len(prompt) + len(reply))
                       if p < len(ids)]
            seq = torch.tensor([ids], device=device)
            logits = runner(input_ids=seq, logits_to_keep=torch.tensor([p - 1 for p in targets], device=device)).logits
            logp = torch.log_softmax(logits[0].float(), dim=-1)
            chosen = logp.gather(-1, seq[0, targets].unsqueeze(-1))
            out.append(float(chosen.mean()))
    return out


# --------------------------------------------------------------------------- engines


@dataclass(frozen=True)
class EngineChoice:
    """Which generator runs a call, in which dtype, and why (logged once per model)."""

    name: str
    """"loop": the kit's decoding loop (decoding.py); "generate": the model's own `generate` (Unsloth's
    patched fast path on a GPU); "vllm": the vLLM engine Unsloth attaches with `fast_inference=True`."""
    dtype: Any = None
    """The inference weights' dtype when it differs from the model's (bf16 on CPUs that run it natively)."""
    reason: str = ""


ENGINES = ("loop", "generate", "vllm")


def select_engine(model: Any, engine: str | None = None, *, return_logprobs: bool = False) -> EngineChoice:
    """The generator for `model`: vLLM when Unsloth attached an engine (`fast_inference=True`), the model's
    own `generate` for an Unsloth model on a GPU (its patched inference path) or a model with sliding-window
    or linear-attention layers, the kit's decoding loop otherwise. On a CPU with native bf16 the loop runs a
    bf16 copy of float32 weights (about 4x the matmul rate, measured in benchmarks/generation_throughput.py),
    except when log-probabilities are requested: those must match what the trainer recomputes in its own dtype.
    `engine` (or the OPENMANUS_ENGINE environment variable) forces one of ENGINES."""
    forced = engine or os.environ.get("OPENMANUS_ENGINE") or None
    if forced is not None and forced not in ENGINES:
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
    elif not supports_buffer_cache(model):
        if forced == "loop":
            raise ValueError("engine 'loop' needs full-attention layers only (this model has sliding-window ones)")
        choice = EngineChoice("generate", reason="sliding-window or linear-attention layers")
    else:
        dtype = _loop_dtype(model, device, return_logprobs)
        reason = "the kit's decoding loop" + (f" on a {str(dtype).replace('torch.', '')} copy" if dtype else "")
        choice = EngineChoice("loop", dtype, reason)
    _log_choice(model, choice)
    return choice


def _device_type(model: Any) -> str:
    try:
        return next(model.parameters()).device.type
    except (StopIteration, AttributeError, TypeError):
        return "cpu"


def _loop_dtype(model: Any, device: str, return_logprobs: bool) -> Any:
    """bf16 for a float32 model, or a LoRA-adapted one (its merged copy decodes without the adapters' extra
    matmuls), on a CPU with native bf16, unless OPENMANUS_INFERENCE_DTYPE=model (the model's own dtype: for
    checking that bf16 inference does not change results, docs/RESULTS.md)."""
    choice = os.environ.get("OPENMANUS_INFERENCE_DTYPE", "auto")
    if choice not in ("auto", "model"):
        raise ValueError(f"OPENMANUS_INFERENCE_DTYPE={choice!r}: choose 'auto' or 'model'")
    if device != "cpu" or return_logprobs or choice == "model":
        return None
    if any(not p.is_floating_point() for p in model.parameters()):
        return None  # 4-bit (bitsandbytes) weights: no plain copy to merge LoRA into
    params = [p for p in model.parameters() if p.is_floating_point()]
    adapted = hasattr(model, "peft_config")
    if params and (params[0].dtype == torch.float32 or adapted) and precision.cpu_has_native_bf16():
        return torch.bfloat16
    return None


def _log_choice(model: Any, choice: EngineChoice) -> None:
    try:
        if _LOGGED_CHOICE.get(model) == choice:
            return
        _LOGGED_CHOICE[model] = choice
    except TypeError:  # not weak-referenceable: log every call
        pass
    logging.getLogger(__name__).info("generation engine: %s (%s)", choice.name, choice.reason)


FINGERPRINT_ELEMENTS = 1 << 22
"""Trainable elements summed per fingerprint at most: all of a LoRA adapter, an even sample of a full model."""


def weights_fingerprint(model: Any) -> tuple:
    """Changes when the weights change: parameter version counters plus sums of the trainable parameters.
    Version counters alone miss optimizer steps on this stack (fused AdamW updates in place without bumping
    `_version`), hence the sums. Beyond FINGERPRINT_ELEMENTS trainable elements (full fine-tuning) each
    parameter is summed over an even stride of its elements: summing all 135M of SmolLM2 in float64 took
    about 0.25 s, twice per generation call; an optimizer step moves every sampled element it touches, and
    weight decay touches them all."""
    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    sums = ()
    if trainable:
        stride = max(1, -(-sum(p.numel() for p in trainable) // FINGERPRINT_ELEMENTS))
        with torch.no_grad():
            sums = tuple(torch.stack([p.detach().reshape(-1)[::stride].sum(dtype=torch.float64)
                                      for p in trainable]).cpu().tolist())
    return (id(model), sum(p._version for p in params), sums)


_INFERENCE_COPIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> (fingerprint, copy)
_LOGGED_CHOICE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> last logged EngineChoice


def inference_copy(model: Any, dtype: Any) -> Any:
    """The model's weights (LoRA merged) as a plain model of `dtype`, refreshed only when the weights changed.

    The copy is built once per model from its config, and later refreshes copy the merged weights into it
    in place. Never `copy.deepcopy(model)`: inside a trainer the model's attributes reach the trainer's
    state, and a deep copy per GRPO step grew a demo run by gigabytes per step until it was killed. The
    training model is never touched: merging in place and unmerging after would leave float rounding in
    the trained weights."""
    key = (weights_fingerprint(model), dtype)
    cached = _INFERENCE_COPIES.get(model)
    if cached is not None and cached[0] == key:
        return cached[1]
    weights = merged_state_dict(model)
    clone = cached[1] if cached is not None and cached[0][1] == dtype else _empty_copy(model, dtype)
    missing, unexpected = clone.load_state_dict(weights, strict=False)
    if unexpected or [k for k in missing if k not in _tied_names(clone)]:
        raise RuntimeError(f"inference copy: weights do not fit the model (missing {missing[:3]}, "
                           f"unexpected {unexpected[:3]})")
    _INFERENCE_COPIES[model] = (key, clone)
    return clone


def merged_state_dict(model: Any) -> dict[str, Any]:
    """The base model's state dict with the active LoRA adapters merged in (new tensors for the merged
    weights; the model is not modified). A model without adapters: its own state dict."""
    if not hasattr(model, "peft_config") or not hasattr(model, "get_base_model"):
        return dict(model.state_dict())
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    out = {}
    for name, tensor in base.state_dict().items():
        if "lora_" in name or ".original_module." in name:
            continue
        if ".modules_to_save." in name:  # a fully trained module: the active adapter's copy is the weight
            head, _, rest = name.partition(".modules_to_save.")
            adapter, _, leaf = rest.partition(".")
            if adapter not in _active_adapters(model):
                continue
            name = f"{head}.{leaf}"
        out[name.replace(".base_layer.", ".")] = tensor
    with torch.no_grad():
        for name, module in base.named_modules():
            if isinstance(module, LoraLayer) and not getattr(module, "merged", False):
                weight = module.get_base_layer().weight
                delta = sum(module.get_delta_weight(a) for a in _active_adapters(model) if a in module.lora_A)
                if not isinstance(delta, int):  # some adapter applies here
                    out[f"{name}.weight"] = weight + delta.to(weight.dtype)
    return out


def _active_adapters(model: Any) -> list[str]:
    active = getattr(model, "active_adapters", None) or getattr(model, "active_adapter", "default")
    return [active] if isinstance(active, str) else list(active)


def _empty_copy(model: Any, dtype: Any) -> Any:
    """A model of the base model's class and config, parameters uninitialised (they are loaded next)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = copy.deepcopy(base.config)
    before = torch.get_default_dtype()
    try:
        torch.set_default_dtype(dtype)
        with no_init_weights():
            clone = type(base)(config)
    finally:
        torch.set_default_dtype(before)
    if getattr(config, "tie_word_embeddings", False) and hasattr(clone, "tie_weights"):
        clone.tie_weights()  # as from_pretrained does: one embedding matrix, not two
    return clone.to(dtype).eval().requires_grad_(False)


def _tied_names(model: Any) -> set[str]:
    """Names of parameters that share storage with an earlier one (tied embeddings): absent from a state dict
    that lists each tensor once, and filled by the tie."""
    seen, tied = set(), set()
    for name, param in model.named_parameters(remove_duplicate=False):
        if id(param) in seen:
            tied.add(name)
        seen.add(id(param))
    return tied


def _generate_hf(model, choice, prompts, limits, stop, pad_id, temperature, top_p, batch_size, return_logprobs,
                 kv_cache):
    """The loop or `generate` engine over length-sorted batches, reusing cached prefixes."""
    n = len(prompts)
    completions: list[list[int]] = [[] for _ in range(n)]
    logps: list[list[float]] = [[] for _ in range(n)]
    stopped = [False] * n
    sample = temperature is not None and temperature > 0
    runner = inference_copy(model, choice.dtype) if choice.dtype is not None else model
    param = next(runner.parameters())
    # the loop always shares prefixes; a call-local cache does it when the caller keeps none
    cache = kv_cache if kv_cache is not None else (PrefixCache() if choice.name == "loop" else None)
    order = sorted(range(n), key=lambda i: len(prompts[i]))
    budget = kv_budget() if param.device.type == "cpu" else None  # a GPU preset sizes its batch to its card
    batches = budget_batches(order, [len(p) for p in prompts], limits, batch_size,
                             kv_bytes_per_token(runner, param.dtype), None if budget is None else budget // 2)
    with inference_mode(model), torch.inference_mode():
        if choice.name == "loop":
            share_prefixes(runner, prompts, cache, pad_id)
        for idx in batches:
            input_ids, attention, past, width, matched = _batch_inputs(prompts, idx, pad_id, cache, param)
            if choice.name == "loop":
                rows = [Row(i, limits[i]) for i in idx]

                def keep(row, kv):  # the row's prompt + all but its last reply token, for the next turn
                    cache.add(list(prompts[row.index]) + row.ids[:-1], [(k.cpu(), v.cpu()) for k, v in kv()])

                decode(runner, input_ids, attention, past, rows, stop_ids=set(stop), temperature=temperature,
                       top_p=top_p, return_logprobs=return_logprobs, on_finish=keep if kv_cache is not None else None)
                for row in rows:
                    completions[row.index], stopped[row.index] = row.ids, row.stopped
                    logps[row.index] = row.logprobs
            else:
                out_past = _generate_batch(runner, input_ids, attention, past, width, idx, limits, stop, pad_id,
                                           sample, temperature, top_p, return_logprobs, completions, logps, stopped)
                if kv_cache is not None:
                    _store(kv_cache, out_past, attention, width, [prompts[i] for i in idx],
                           [completions[i] for i in idx])
            if cache is not None:
                cache.drop_superseded([e for e, _ in matched], [c for _, c in matched])
    return completions, logps, stopped


def _generate_batch(model, input_ids, attention, past, width, idx, limits, stop, pad_id, sample, temperature, top_p,
                    return_logprobs, completions, logps, stopped) -> Any:
    """One batch through the model's own `generate` (with a DynamicCache of the reused prefixes); fills the
    result lists for rows `idx` and returns the cache `generate` ended with."""
    gen_kwargs: dict[str, Any] = dict(
        input_ids=input_ids,
        attention_mask=attention,
        max_new_tokens=max(limits[i] for i in idx),
        eos_token_id=stop,
        pad_token_id=pad_id,
        do_sample=sample,
        return_dict_in_generate=True,
        use_cache=True,
    )
    recorder = ChosenLogprobs(temperature if sample else 1.0) if return_logprobs else None
    if recorder is not None:
        gen_kwargs["logits_processor"] = [recorder]
    if past is not None:
        gen_kwargs["past_key_values"] = DynamicCache(past, config=getattr(model, "config", None))
    if sample:
        gen_kwargs.update(temperature=float(temperature), top_p=float(top_p), top_k=0)
    else:
        gen_kwargs.update(temperature=None, top_p=None, top_k=None)
    out = model.generate(**gen_kwargs)
    new = out.sequences[:, width:].tolist()
    chosen = recorder.finish(out.sequences).tolist() if recorder is not None else None
    for row, i in enumerate(idx):
        ids = new[row][: limits[i]]
        cut = next((k for k, t in enumerate(ids) if t in stop), None)
        if cut is not None:
            ids = ids[: cut + 1]
            stopped[i] = True
        completions[i] = ids
        if chosen is not None:
            logps[i] = chosen[row][: len(ids)]
    return out.past_key_values


def _generate_vllm(model, prompts, limits, stop, temperature, top_p, seed, return_logprobs):
    """Unsloth's vLLM engine with the current LoRA weights (`load_lora(..., load_tensors=True)` hands vLLM the
    in-memory adapter, so each call sees the latest training step). Log-probabilities are vLLM's own (its
    `logprobs_mode`), the chosen token's only."""
    from vllm import SamplingParams

    sample = temperature is not None and temperature > 0
    params = [
        SamplingParams(
            temperature=float(temperature) if sample else 0.0,
            top_p=float(top_p) if sample else 1.0,
            max_tokens=int(limit),
            stop_token_ids=list(stop),
            seed=None if seed is None else int(seed) + i,
            logprobs=0 if return_logprobs else None,
        )
        for i, limit in enumerate(limits)
    ]
    lora = None
    if hasattr(model, "load_lora") and hasattr(model, "peft_config"):
        lora = model.load_lora("openmanus_lite_rollout", load_tensors=True)
    outputs = model.fast_generate([{"prompt_token_ids": list(p)} for p in prompts], sampling_params=params,
                                  lora_request=lora, use_tqdm=False)
    completions, logps, stopped = [], [], []
    for out in outputs:
        seq = out.outputs[0]
        ids = list(seq.token_ids)
        completions.append(ids)
        stopped.append(bool(ids) and ids[-1] in stop)
        logps.append([float(step[t].logprob) for step, t in zip(seq.logprobs or [], ids)] if return_logprobs else [])
    return completions, logps, stopped


def share_prefixes(model: Any, prompts: list[list[int]], cache: PrefixCache, pad_id: int) -> int:
    """Encode once the prefixes that several prompts share and the cache lacks (a domain's instructions,
    the history that n sampled continuations share), so each prompt then encodes only its own tokens.

    Prompts are sorted; a run of neighbours that share more than `cache.min_reuse` tokens beyond what
    is already cached gets its common prefix encoded, and runs within it that share still more get theirs
    (encoded after, reusing the parent): a trie built level by level. Returns the total length of the
    prefixes it cached (tokens a parent already held are counted again in each child)."""
    levels: list[list[list[int]]] = []
    _plan_prefixes(sorted(list(p) for p in prompts), 0, cache, levels, 0)
    encoded = 0
    for level in levels:
        if level:  # a level is empty when all of its prefixes were cached before (their children are not)
            encoded += _encode_prefixes(model, level, cache, pad_id)
    return encoded


def _common(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for k in range(n):
        if a[k] != b[k]:
            return k
    return n


def _plan_prefixes(seqs: list[list[int]], base: int, cache: PrefixCache, levels: list, depth: int) -> None:
    if len(seqs) < 2 or depth > 8:
        return
    adjacent = [_common(seqs[k], seqs[k + 1]) for k in range(len(seqs) - 1)]
    start = 0
    while start < len(seqs) - 1:
        if adjacent[start] < base + cache.min_reuse:
            start += 1
            continue
        end = start
        while end < len(adjacent) and adjacent[end] >= base + cache.min_reuse:
            end += 1
        run = seqs[start:end + 1]
        shared = min(min(adjacent[start:end]), min(len(s) for s in run) - 1)
        if shared >= base + cache.min_reuse and cache.match(run[0][:shared])[1] < shared:
            while len(levels) <= depth:
                levels.append([])
            levels[depth].append(run[0][:shared])
        _plan_prefixes(run, shared, cache, levels, depth + 1)
        start = end + 1


def _encode_prefixes(model: Any, prefixes: list[list[int]], cache: PrefixCache, pad_id: int) -> int:
    """One prefill of `prefixes` (reusing cached parents); each prefix's keys/values kept as a shared entry."""
    idx = list(range(len(prefixes)))
    input_ids, attention, past, _, _ = _batch_inputs(prefixes, idx, pad_id, cache, next(model.parameters()),
                                                     full=True)
    rows = [Row(i, 1) for i in idx]

    def keep(row, kv):
        # the prefill fed every prefix token; the one "generated" token is never fed
        cache.add(list(prefixes[row.index]), [(k.cpu(), v.cpu()) for k, v in kv()], shared=True)

    decode(model, input_ids, attention, past, rows, stop_ids=set(), temperature=0.0, top_p=1.0,
           return_logprobs=False, on_finish=keep)
    return sum(len(p) for p in prefixes)


def _batch_inputs(prompts: list[list[int]], idx: list[int], pad_id: int, kv_cache: PrefixCache | None, param: Any,
                  full: bool = False):
    """Left-padded input ids and mask for rows `idx`, plus the reused prefixes' keys/values per layer.

    With reuse the layout per row is [pad | cached prefix | pad | new tokens]: the cached block
    is as wide as the longest reused prefix, the new block as the longest remainder; the mask
    marks the holes, and position ids (from the mask) stay those of the unpadded sequence.
    `full`: the prompts themselves are being cached, so a prompt never reuses all of itself.
    Everything is returned on `param`'s device, the keys/values in its dtype.
    """
    hits, matched = [], []
    for i in idx:
        eid, common = kv_cache.match(prompts[i]) if kv_cache is not None else (None, 0)
        matched.append((eid, common))
        common = min(common, len(prompts[i]) - 1)  # at least one token to encode
        hits.append((eid, common if eid is not None else 0))
    width_past = max(c for _, c in hits)
    width_new = max(len(prompts[i]) - c for i, (_, c) in zip(idx, hits))
    width = width_past + width_new
    input_ids = torch.full((len(idx), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(idx), width), dtype=torch.long)
    for row, (i, (_, c)) in enumerate(zip(idx, hits)):
        p = prompts[i]
        input_ids[row, width_past - c:width_past] = torch.tensor(p[:c], dtype=torch.long)
        attention[row, width_past - c:width_past] = 1
        rest = p[c:]
        input_ids[row, width - len(rest):] = torch.tensor(rest, dtype=torch.long)
        attention[row, width - len(rest):] = 1
    if kv_cache is not None and not full:
        kv_cache.encoded_tokens += sum(len(prompts[i]) - c for i, (_, c) in zip(idx, hits))
        kv_cache.reused_tokens += sum(c for _, c in hits)
    input_ids, attention = input_ids.to(param.device), attention.to(param.device)
    if width_past == 0:
        return input_ids, attention, None, width, matched
    ref = next(kv_cache.layers(e) for e, c in hits if c > 0)
    layers = []
    for layer, (k0, v0) in enumerate(ref):
        k = k0.new_zeros((len(idx), k0.shape[0], width_past, k0.shape[2]), dtype=param.dtype, device=param.device)
        v = v0.new_zeros((len(idx), v0.shape[0], width_past, v0.shape[2]), dtype=param.dtype, device=param.device)
        for row, (eid, c) in enumerate(hits):
            if c > 0:
                ek, ev = kv_cache.layers(eid)[layer]
                k[row, :, width_past - c:] = ek[:, :c]
                v[row, :, width_past - c:] = ev[:, :c]
        layers.append((k, v))
    return input_ids, attention, layers, width, matched


def _store(kv_cache: PrefixCache, past: Any, attention: Any, width: int, prompts: list[list[int]],
           completions: list[list[int]]) -> None:
    """Keep each row's keys/values of prompt + reply (all but the last reply token, never fed back)."""
    if past is None or not hasattr(past, "layers"):
        return
    for row, (prompt, completion) in enumerate(zip(prompts, completions)):
        fed = max(0, len(completion) - 1)
        positions = torch.cat([attention[row].nonzero().squeeze(-1), width + torch.arange(fed)])
        ids = list(prompt) + list(completion[:fed])
        kv = []
        for layer in past.layers:
            if layer.keys is None or layer.keys.shape[-2] < int(positions[-1]) + 1:
                return  # a cache layout this code does not know (e.g. sliding windows): no reuse
            pos = positions.to(layer.keys.device)
            kv.append((layer.keys[row].index_select(-2, pos), layer.values[row].index_select(-2, pos)))
        kv_cache.add(ids, kv)

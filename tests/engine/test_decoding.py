"""The kit's decoding loop (decoding.py) and the engine choice (generation.select_engine), on tiny models."""

from __future__ import annotations

import os
import sys
from types import ModuleType, SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from openmanus_lite.engine import generation  # noqa: E402
from openmanus_lite.engine.decoding import choose_tokens  # noqa: E402
from openmanus_lite.engine.generation import (  # noqa: E402
    PrefixCache,
    generate_from_ids,
    generate_turns,
    inference_copy,
    render_prompts,
    select_engine,
    share_prefixes,
)
from openmanus_lite.models import build_tiny_model, load_tokenizer  # noqa: E402

INTRO = ("You are an agent in a small shell. Reply with Think: and Act: lines. Tools: ls, cat, grep, wc. "
         "You have 6 turns. ")
CONVS = [
    [{"role": "user", "content": INTRO + "Task: count the rows."}],
    [{"role": "user", "content": INTRO + "Task: go to the fridge and open it, then look inside for a mug 2."}],
    [{"role": "user", "content": INTRO + "Task: list files."},
     {"role": "assistant", "content": "Think: look.\nAct: bash\n```bash\nls\n```"},
     {"role": "user", "content": "a.txt b.txt"}],
    [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Say 4."}],
    [{"role": "user", "content": "Count"}],
]


@pytest.fixture(scope="module")
def untrained(tmp_path_factory):
    """A random tiny model: diverse, rarely-stopping outputs make token-for-token comparisons strict."""
    from transformers import AutoModelForCausalLM

    path = build_tiny_model(tmp_path_factory.mktemp("tiny_dec"), seed=3)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    return model, load_tokenizer(path)


def _plain_generate(model, tok, prompt, limit):
    """The reference: transformers' generate on one unpadded prompt, greedy, no kit code."""
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    with torch.inference_mode():
        out = model.generate(input_ids=torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                             max_new_tokens=limit, do_sample=False, eos_token_id=eos, pad_token_id=tok.pad_token_id,
                             temperature=None, top_p=None, top_k=None)
    ids = out[0, len(prompt):].tolist()
    return ids[: ids.index(eos) + 1] if eos in ids else ids


def test_loop_greedy_equals_plain_generate_token_for_token(untrained):
    """float32: the loop (batched, left-padded, shared prefixes, rows dropped as they stop, per-row limits)
    gives what plain `generate` gives each prompt alone."""
    model, tok = untrained
    prompts = render_prompts(tok, CONVS)
    limits = [24, 5, 17, 24, 1]
    res = generate_from_ids(model, tok, prompts, max_new_tokens=limits, batch_size=4, engine="loop")
    for prompt, limit, ids in zip(prompts, limits, res.completion_ids):
        assert ids == _plain_generate(model, tok, prompt, limit)
    assert [len(c) for c in res.completion_ids] == limits  # the random model never stops: each row hit its limit
    assert res.stopped == [False] * len(prompts)


def test_loop_with_prefix_cache_over_turns_equals_uncached_generate(untrained):
    model, tok = untrained
    cache = PrefixCache()
    hist = [list(c) for c in CONVS[:3]]
    for _ in range(3):
        cached = generate_turns(model, tok, hist, max_new_tokens=12, batch_size=2, return_ids=True, kv_cache=cache,
                                engine="loop")
        plain = generate_turns(model, tok, hist, max_new_tokens=12, batch_size=3, return_ids=True, engine="generate")
        assert cached.completion_ids == plain.completion_ids
        for h, text in zip(hist, cached.texts):
            h += [{"role": "assistant", "content": text}, {"role": "user", "content": "Nothing happens."}]
    assert cache.reused_tokens > 2 * cache.encoded_tokens


def test_shared_prefixes_are_encoded_once(untrained):
    """n prompts sharing a long opening: the opening is encoded once (a trie: the domain intro, then a
    history that sampled continuations share), and results do not change."""
    model, tok = untrained
    prompts = render_prompts(tok, CONVS[:3]) + render_prompts(tok, [CONVS[2]] * 3)
    cache = PrefixCache()
    encoded = share_prefixes(model, prompts, cache, tok.pad_token_id)
    intro = len(os.path.commonprefix(prompts[:2]))
    assert intro > 20 and cache.shared_entries == 2  # the intro, and the three copies of CONVS[2]
    assert encoded == intro + (len(prompts[2]) - 1)
    assert share_prefixes(model, prompts, cache, tok.pad_token_id) == 0  # nothing new to share
    res = generate_from_ids(model, tok, prompts, max_new_tokens=8, batch_size=6, kv_cache=cache, engine="loop")
    assert cache.encoded_tokens < sum(len(p) for p in prompts) - 3 * intro
    ref = generate_from_ids(model, tok, prompts, max_new_tokens=8, batch_size=6, engine="generate")
    assert res.completion_ids == ref.completion_ids


def test_choose_tokens_greedy_top_p_and_sampling():
    logits = torch.tensor([[0.0, 3.0, 1.0, -1.0]] * 4000)
    assert choose_tokens(logits[:2], 0.0, 1.0).tolist() == [1, 1]
    torch.manual_seed(0)
    assert set(choose_tokens(logits[:200], 1.0, 0.5).tolist()) == {1}  # the top token alone holds > 0.5
    torch.manual_seed(0)
    counts = torch.bincount(choose_tokens(logits, 1.0, 1.0), minlength=4).float() / len(logits)
    assert torch.allclose(counts, torch.softmax(logits[0], -1), atol=0.03)
    torch.manual_seed(0)
    nucleus = set(choose_tokens(logits, 1.0, 0.9).tolist())  # 0.84 + 0.11 reach 0.9: two tokens
    assert nucleus == {1, 2}



def test_greedy_picks_the_first_maximum_as_argmax_does_ties_included():
    ties = torch.randint(0, 4, (64, 5000), generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    assert torch.equal(choose_tokens(ties, 0.0, 1.0), ties.float().argmax(-1))

def test_select_engine_decisions(untrained, monkeypatch, fake_gpu):
    model, _ = untrained
    monkeypatch.setattr("openmanus_lite.engine.precision.cpu_has_native_bf16", lambda: True)
    choice = select_engine(model)
    assert (choice.name, choice.dtype) == ("loop", torch.bfloat16)
    assert select_engine(model, return_logprobs=True).dtype is None  # log-probs in the trainer's own dtype
    monkeypatch.setattr("openmanus_lite.engine.precision.cpu_has_native_bf16", lambda: False)
    assert select_engine(model).dtype is None
    assert select_engine(model, "generate").name == "generate"
    monkeypatch.setenv("OPENMANUS_ENGINE", "generate")
    assert select_engine(model).name == "generate"
    monkeypatch.delenv("OPENMANUS_ENGINE")
    with pytest.raises(ValueError, match="unknown generation engine"):
        select_engine(model, "llamacpp")
    with pytest.raises(ValueError, match="fast_inference"):
        select_engine(model, "vllm")
    # an Unsloth model on a GPU keeps Unsloth's patched generate; with a vLLM engine attached, vLLM
    fake_gpu("t4")
    monkeypatch.setattr(generation, "_device_type", lambda m: "cuda")
    monkeypatch.setattr(model, "openmanus_backend", "unsloth", raising=False)
    assert select_engine(model).name == "generate"
    monkeypatch.setattr(model, "vllm_engine", object(), raising=False)
    monkeypatch.setattr(model, "fast_generate", lambda *a, **k: [], raising=False)
    assert select_engine(model).name == "vllm"
    assert select_engine(model, "loop").name == "loop"
    assert select_engine(model, "loop").dtype is None  # never a bf16 copy on a GPU


def test_sliding_window_models_use_generate(untrained, monkeypatch):
    model, _ = untrained
    monkeypatch.setattr(model.config, "layer_types", ["sliding_attention", "full_attention"], raising=False)
    assert select_engine(model).name == "generate"
    with pytest.raises(ValueError, match="full-attention"):
        select_engine(model, "loop")


def test_windowed_layers_reads_each_family_as_its_model_applies_the_window():
    """Mistral applies `sliding_window` whenever it is set (no `use_sliding_window` field); Qwen2 only with
    `use_sliding_window`; Llama has none: only Mistral's default config keeps the buffer loop away."""
    from transformers import LlamaConfig, MistralConfig, Qwen2Config

    from openmanus_lite.engine.decoding import windowed_layers

    assert windowed_layers(MistralConfig()) and MistralConfig().sliding_window is not None
    assert not windowed_layers(MistralConfig(sliding_window=None))
    assert not windowed_layers(Qwen2Config()) and not windowed_layers(LlamaConfig())


def test_inference_copy_merges_lora_out_of_place_and_follows_training(untrained):
    import copy

    from peft import LoraConfig, get_peft_model

    base, tok = untrained
    model = get_peft_model(copy.deepcopy(base), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                           init_lora_weights=False))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ids = torch.tensor([render_prompts(tok, CONVS[:1])[0]])
    clone = inference_copy(model, torch.float32)
    with torch.no_grad():
        assert torch.allclose(clone(input_ids=ids).logits, model(input_ids=ids).logits, atol=1e-5)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())  # the trained weights untouched
    assert not hasattr(clone, "peft_config") and inference_copy(model, torch.float32) is clone
    lora = [p for n, p in model.named_parameters() if "lora_" in n]
    for p in lora:
        p.grad = torch.ones_like(p)
    torch.optim.AdamW(lora, lr=1e-2, fused=True).step()  # no version bump: the sums tell
    model.trainer_state = [torch.zeros(1000)]  # what a trainer hangs on its model is never copied
    fresh = inference_copy(model, torch.float32)
    assert fresh is clone and not hasattr(fresh, "trainer_state")  # refreshed in place: no new copy per step
    with torch.no_grad():
        assert torch.allclose(fresh(input_ids=ids).logits, model(input_ids=ids).logits, atol=1e-5)
    half = inference_copy(model, torch.bfloat16)
    assert half.dtype == torch.bfloat16 and half is not clone
    plain = copy.deepcopy(base)  # no adapter: its own weights, tied embeddings kept tied
    assert inference_copy(plain, torch.bfloat16).lm_head.weight.data_ptr() == \
        inference_copy(plain, torch.bfloat16).get_input_embeddings().weight.data_ptr() or \
        not plain.config.tie_word_embeddings


def test_bf16_loop_generates_on_a_copy(untrained, monkeypatch):
    model, tok = untrained
    monkeypatch.setattr("openmanus_lite.engine.precision.cpu_has_native_bf16", lambda: True)
    res = generate_turns(model, tok, CONVS[:2], max_new_tokens=6)
    assert len(res.completion_ids[0]) == 6
    assert next(model.parameters()).dtype == torch.float32
    assert generation._INFERENCE_COPIES[model][1].dtype == torch.bfloat16
    monkeypatch.setenv("OPENMANUS_INFERENCE_DTYPE", "model")  # the float32 check of bf16 results
    assert select_engine(model).dtype is None
    monkeypatch.setenv("OPENMANUS_INFERENCE_DTYPE", "fp8")
    with pytest.raises(ValueError, match="OPENMANUS_INFERENCE_DTYPE='fp8'"):
        select_engine(model)


def test_a_lora_model_in_bf16_decodes_on_its_merged_copy(untrained, monkeypatch):
    """GRPO with bf16 weights on a CPU: the policy is LoRA over a bf16 base; decoding runs on the merged copy."""
    import copy

    from peft import LoraConfig, get_peft_model

    base, tok = untrained
    model = get_peft_model(copy.deepcopy(base).to(torch.bfloat16),
                           LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    monkeypatch.setattr("openmanus_lite.engine.precision.cpu_has_native_bf16", lambda: True)
    assert select_engine(model).dtype == torch.bfloat16
    res = generate_turns(model, tok, CONVS[:2], max_new_tokens=4)
    assert [len(c) for c in res.completion_ids] == [4, 4]
    assert generation._INFERENCE_COPIES[model][1].dtype == torch.bfloat16
    assert select_engine(copy.deepcopy(base).to(torch.bfloat16)).dtype is None  # no adapter: decoded as it is
    monkeypatch.setattr("openmanus_lite.engine.precision.cpu_has_native_bf16", lambda: False)
    assert select_engine(model).dtype is None


class _FakeSamplingParams:
    def __init__(self, **kwargs):
        self.kwargs = kwargs


def test_vllm_engine_requests_and_outputs(untrained, monkeypatch):
    """The vLLM path as Unsloth exposes it: one SamplingParams per prompt, the in-memory LoRA synced each
    call (load_lora(..., load_tensors=True)), token ids, stop flags and chosen-token log-probs read back."""
    model, tok = untrained
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    fake = ModuleType("vllm")
    fake.SamplingParams = _FakeSamplingParams
    monkeypatch.setitem(sys.modules, "vllm", fake)
    calls = {}

    def fast_generate(prompts, sampling_params, lora_request, use_tqdm):
        calls.update(prompts=prompts, params=sampling_params, lora=lora_request)
        outs = []
        for k, _ in enumerate(prompts):
            ids = [5, 6, eos] if k == 0 else [7, 8]
            steps = [{t: SimpleNamespace(logprob=-0.5 * (j + 1))} for j, t in enumerate(ids)]
            outs.append(SimpleNamespace(outputs=[SimpleNamespace(token_ids=ids, logprobs=steps)]))
        return outs

    loads = []
    monkeypatch.setattr(model, "vllm_engine", object(), raising=False)
    monkeypatch.setattr(model, "fast_generate", fast_generate, raising=False)
    monkeypatch.setattr(model, "peft_config", {"default": None}, raising=False)
    monkeypatch.setattr(model, "load_lora", lambda name, load_tensors: loads.append(load_tensors) or "req",
                        raising=False)
    prompts = render_prompts(tok, CONVS[:2])
    res = generate_from_ids(model, tok, prompts, max_new_tokens=[3, 2], temperature=0.7, top_p=0.9, seed=4,
                            return_logprobs=True)
    assert res.completion_ids == [[5, 6, eos], [7, 8]] and res.stopped == [True, False]
    assert res.logprobs == [[-0.5, -1.0, -1.5], [-0.5, -1.0]]
    assert loads == [True] and calls["lora"] == "req"
    assert calls["prompts"] == [{"prompt_token_ids": p} for p in prompts]
    first = calls["params"][0].kwargs
    assert (first["temperature"], first["top_p"], first["max_tokens"], first["seed"], first["logprobs"]) == (
        0.7, 0.9, 3, 4, 0)
    assert eos in first["stop_token_ids"] and calls["params"][1].kwargs["max_tokens"] == 2


def test_buffer_layer_takes_the_models_dtype_when_reused_keys_came_in_another():
    """A model with mixed parameter dtypes: reused keys seeded in bf16, the model computes float32."""
    from openmanus_lite.engine.decoding import BufferLayer

    layer = BufferLayer(capacity=2)
    layer.update(torch.ones(1, 2, 3, 4, dtype=torch.bfloat16), torch.ones(1, 2, 3, 4, dtype=torch.bfloat16))
    keys, values = layer.update(torch.full((1, 2, 2, 4), 2.0), torch.full((1, 2, 2, 4), 3.0))
    assert keys.dtype == values.dtype == torch.float32 and keys.shape[-2] == 5 == layer.get_seq_length()
    assert keys[0, 0, :, 0].tolist() == [1, 1, 1, 2, 2] and values[0, 0, -1, 0].item() == 3.0


def test_prefill_groups_bound_padding_and_cover_every_row():
    from openmanus_lite.engine.decoding import prefill_groups

    counts = [19, 112, 23, 45, 46, 90, 26, 0, 64, 21]
    groups = prefill_groups(counts)
    assert sorted(i for g in groups for i in g) == list(range(len(counts)))
    for g in groups:
        real = [max(1, counts[i]) for i in g]
        assert len(g) * max(real) <= 1.25 * sum(real)
    assert len(groups) > 1 and prefill_groups([30] * 8) == [list(range(8))]


def test_grouped_prefill_equals_plain_generate(untrained, monkeypatch):
    """Rows of very different lengths are prefilled in several groups, then decoded as one batch; float32
    greedy output stays what plain `generate` gives each prompt alone."""
    from openmanus_lite.engine import decoding

    model, tok = untrained
    seen = []

    def spy(counts, waste=0.25, max_rows=None):
        groups = prefill_groups(counts, waste, max_rows)
        seen.append(len(groups))
        return groups

    prefill_groups = decoding.prefill_groups
    monkeypatch.setattr(decoding, "prefill_groups", spy)
    convs = [[{"role": "user", "content": "Count"}], CONVS[1], CONVS[2],
             [{"role": "user", "content": "List the files. " * 12}]]
    prompts = render_prompts(tok, convs)
    res = generate_from_ids(model, tok, prompts, max_new_tokens=10, batch_size=4, engine="loop")
    assert max(seen) > 1
    for prompt, ids in zip(prompts, res.completion_ids):
        assert ids == _plain_generate(model, tok, prompt, 10)


def test_shared_prefixes_below_a_cached_parent(untrained):
    """The domain intro is cached from an earlier call; the new prompts are two histories beneath it, each
    continued two ways: the histories are encoded (the planner's first level, the intro, is empty)."""
    model, tok = untrained
    cache = PrefixCache()
    share_prefixes(model, render_prompts(tok, CONVS[:2]), cache, tok.pad_token_id)
    assert cache.shared_entries == 1
    histories = [[{"role": "user", "content": INTRO + f"Task: {task}"},
                  {"role": "assistant", "content": "Think: look first.\nAct: bash\n```bash\nls -la /srv/data\n```"}]
                 for task in ("count the rows of every csv file here.", "find the largest log file and print it.")]
    later = render_prompts(tok, [h + [{"role": "user", "content": reply}] for h in histories
                                 for reply in ("a.csv b.csv", "nothing")])
    assert share_prefixes(model, later, cache, tok.pad_token_id) > 0 and cache.shared_entries == 3
    res = generate_from_ids(model, tok, later, max_new_tokens=6, batch_size=4, kv_cache=cache, engine="loop")
    ref = generate_from_ids(model, tok, later, max_new_tokens=6, batch_size=4, engine="generate")
    assert res.completion_ids == ref.completion_ids


def test_prefill_groups_keep_to_max_rows():
    from openmanus_lite.engine.decoding import prefill_groups

    groups = prefill_groups([30] * 9, max_rows=3)
    assert [len(g) for g in groups] == [3, 3, 3] and sorted(i for g in groups for i in g) == list(range(9))

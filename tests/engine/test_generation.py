"""Batched one-turn generation and ModelPolicy on the tiny from-scratch model."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from openmanus_lite.engine.generation import generate_turns, inference_mode, render_prompts  # noqa: E402
from openmanus_lite.models import build_tiny_model, load_model, load_tokenizer  # noqa: E402
from openmanus_lite.policies import ModelPolicy  # noqa: E402

CONVS = [
    [{"role": "user", "content": "Count the rows."}],
    [{"role": "user", "content": "Go to the fridge and open it, then look inside for a mug 2."}],
    [
        {"role": "user", "content": "List files."},
        {"role": "assistant", "content": "Think: look.\nAct: bash\n```bash\nls\n```"},
        {"role": "user", "content": "a.txt b.txt"},
    ],
    [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Say 4."}],
]
REPLY = "Think: I have the answer.\nAct: answer(42)"
STEPS = 60


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny model, overfitted for a few seconds so that it answers REPLY and stops at <|im_end|>."""
    path = build_tiny_model(tmp_path_factory.mktemp("tiny"), seed=0)
    tok = load_tokenizer(path)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    torch.manual_seed(0)
    rows = []
    for conv in CONVS:
        prompt = render_prompts(tok, [conv])[0]
        target = tok(REPLY + "<|im_end|>", add_special_tokens=False)["input_ids"]
        rows.append((prompt, target))
    width = max(len(p) + len(t) for p, t in rows)
    pad = tok.pad_token_id
    ids = torch.tensor([p + t + [pad] * (width - len(p) - len(t)) for p, t in rows])
    labels = torch.tensor([[-100] * len(p) + t + [-100] * (width - len(p) - len(t)) for p, t in rows])
    mask = (labels != -100) | (torch.arange(width) < torch.tensor([len(p) for p, _ in rows]).unsqueeze(1))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(STEPS):
        model(input_ids=ids, attention_mask=mask.long(), labels=labels).loss.backward()
        opt.step()
        opt.zero_grad()
    model.eval()
    return model, tok, path


def test_greedy_batched_left_padded_equals_unbatched(tiny):
    model, tok, _ = tiny
    batched = generate_turns(model, tok, CONVS, max_new_tokens=24, batch_size=4, return_ids=True)
    single = [generate_turns(model, tok, [c], max_new_tokens=24, return_ids=True) for c in CONVS]
    assert batched.texts == [s.texts[0] for s in single]
    assert batched.completion_ids == [s.completion_ids[0] for s in single]
    assert batched.prompt_ids == render_prompts(tok, CONVS)


def test_stops_at_im_end_and_ids_end_with_eos(tiny):
    model, tok, _ = tiny
    res = generate_turns(model, tok, CONVS, max_new_tokens=40, return_ids=True)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    assert res.texts == [REPLY] * len(CONVS)
    assert all(res.stopped)
    for ids in res.completion_ids:
        assert ids[-1] == eos and eos not in ids[:-1]
    short = generate_turns(model, tok, CONVS[:1], max_new_tokens=3, return_ids=True)
    assert short.stopped == [False] and len(short.completion_ids[0]) == 3
    # the prompt ends with the assistant header the chat template adds
    assert tok.decode(res.prompt_ids[0]).endswith("<|im_start|>assistant\n")


def test_logprobs_match_a_teacher_forced_forward_pass(tiny):
    model, tok, _ = tiny
    for temperature in (0.0, 0.7):
        res = generate_turns(model, tok, CONVS[:2], max_new_tokens=12, temperature=temperature, seed=1,
                             return_ids=True, return_logprobs=True)
        for p, c, lp in zip(res.prompt_ids, res.completion_ids, res.logprobs):
            assert len(lp) == len(c)
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([p + c])).logits[0, len(p) - 1:-1]
            logits = logits / (temperature if temperature > 0 else 1.0)
            ref = torch.log_softmax(logits, -1).gather(-1, torch.tensor(c).unsqueeze(-1)).squeeze(-1)
            assert torch.allclose(torch.tensor(lp), ref, atol=1e-4)
            assert max(lp) <= 0.0


def _spy_generate(model, monkeypatch):
    """Record the kwargs and outputs of every model.generate call."""
    calls = []
    original = model.generate

    def spy(**kwargs):
        out = original(**kwargs)
        calls.append((kwargs, out))
        return out

    monkeypatch.setattr(model, "generate", spy)
    return calls, original


def test_logprobs_equal_the_output_logits_path_without_keeping_logits(tiny, monkeypatch):
    """The `generate` engine's chosen-token log-probs equal those from generate(output_logits=True) +
    log_softmax (the old path, which kept a [batch, vocab] float32 row per step), and nothing per-step of vocab
    width comes back from generate."""
    model, tok, _ = tiny
    vocab = model.config.vocab_size
    for temperature in (0.0, 0.7):
        calls, original = _spy_generate(model, monkeypatch)
        res = generate_turns(model, tok, CONVS, max_new_tokens=16, temperature=temperature, seed=2,
                             batch_size=len(CONVS), return_ids=True, return_logprobs=True, engine="generate")
        monkeypatch.undo()
        assert len(calls) == 1
        kwargs, out = calls[0]
        assert not kwargs.get("output_logits") and not kwargs.get("output_scores")
        assert getattr(out, "logits", None) is None and getattr(out, "scores", None) is None
        recorder = kwargs["logits_processor"][0]
        assert recorder.retained_rows == 0  # the one [batch, vocab] row it held is released

        old_kwargs = {k: v for k, v in kwargs.items() if k != "logits_processor"}
        torch.manual_seed(2)  # generate_turns seeds once, before its only batch
        with torch.inference_mode():
            old = original(**old_kwargs, output_logits=True)
        assert torch.equal(old.sequences, out.sequences)
        logits = torch.stack(old.logits, dim=1).float()
        assert logits.shape[-1] == vocab  # what the old path kept: (batch, steps, vocab)
        if temperature > 0:
            logits = logits / temperature
        width = kwargs["input_ids"].shape[1]
        seq = old.sequences[:, width:]
        ref = torch.log_softmax(logits, -1).gather(-1, seq.unsqueeze(-1)).squeeze(-1)
        order = sorted(range(len(CONVS)), key=lambda i: len(res.prompt_ids[i]))
        for row, i in enumerate(order):
            n = len(res.logprobs[i])
            assert n == len(res.completion_ids[i])
            assert torch.allclose(torch.tensor(res.logprobs[i]), ref[row, :n], atol=1e-5, rtol=0)


def test_chosen_logprobs_hold_one_vocab_row_at_any_step():
    from openmanus_lite.engine.generation import ChosenLogprobs

    gen = torch.Generator().manual_seed(0)
    batch, vocab, steps = 3, 1000, 50
    rec = ChosenLogprobs(temperature=0.5)
    ids = torch.zeros((batch, 4), dtype=torch.long)
    expected = []
    for _ in range(steps):
        scores = torch.randn((batch, vocab), generator=gen)
        assert rec(ids, scores) is scores  # scores pass through unchanged
        assert rec.retained_rows == 1
        held = [t for t in vars(rec).values() if torch.is_tensor(t) and t.shape[-1] == vocab]
        assert len(held) == 1 and all(t.shape == (batch,) for t in rec._steps)
        token = torch.randint(vocab, (batch, 1), generator=gen)
        expected.append(torch.log_softmax(scores / 0.5, -1).gather(-1, token).squeeze(-1))
        ids = torch.cat([ids, token], dim=1)
    got = rec.finish(ids)
    assert got.shape == (batch, steps) and rec.retained_rows == 0
    assert torch.allclose(got, torch.stack(expected, dim=1), atol=1e-6)
    with pytest.raises(ValueError, match="positive temperature"):
        ChosenLogprobs(temperature=0.0)


def test_sampling_is_seeded(tiny):
    model, tok, _ = tiny
    a = generate_turns(model, tok, CONVS, max_new_tokens=10, temperature=5.0, seed=3)
    b = generate_turns(model, tok, CONVS, max_new_tokens=10, temperature=5.0, seed=3)
    c = generate_turns(model, tok, CONVS, max_new_tokens=10, temperature=5.0, seed=4)
    assert a.texts == b.texts
    assert a.texts != c.texts


def test_train_mode_is_restored(tiny):
    model, tok, _ = tiny
    model.train()
    try:
        with inference_mode(model):
            assert not model.training
        assert model.training
        generate_turns(model, tok, CONVS[:1], max_new_tokens=4)
        assert model.training
    finally:
        model.eval()


def test_model_policy_counts_and_samples(tiny):
    model, tok, _ = tiny
    policy = ModelPolicy(model, tok, name="tiny", max_new_tokens=40)
    replies = policy.act_batch(CONVS, [None] * len(CONVS))
    assert replies == [REPLY] * len(CONVS)
    assert policy.model_calls == 1 and policy.turns_generated == 4
    n_reply = len(tok(REPLY + "<|im_end|>", add_special_tokens=False)["input_ids"])
    assert policy.generated_tokens == 4 * n_reply
    cands = policy.sample_batch(CONVS[:2], n=3, temperature=5.0)
    assert [len(c) for c in cands] == [3, 3]
    assert len(set(cands[0])) > 1  # hot sampling gives different candidates
    assert policy.model_calls == 2 and policy.turns_generated == 10
    with pytest.raises(ValueError):
        policy.sample_batch(CONVS[:1], n=2, temperature=0.0)


def test_model_policy_from_path_through_unsloth_restores_training(tiny):
    _, _, path = tiny
    model, tok = load_model(path, backend="unsloth", lora={"r": 4, "alpha": 8})
    model.train()
    policy = ModelPolicy(model, tok, max_new_tokens=6)
    out = policy.act_batch(CONVS[:2], [None, None])
    assert len(out) == 2 and all(isinstance(t, str) for t in out)
    assert model.training
    by_path = ModelPolicy(str(path), max_new_tokens=6, load_kwargs={"backend": "hf"})
    assert by_path.name == path.name
    assert len(by_path.act_batch(CONVS[:1], [None])) == 1


def test_model_policy_runs_episodes(tiny):
    from openmanus_lite.envs import generate_tasks, list_domains
    from openmanus_lite.rollout import run_episodes

    domains = list_domains()
    if not domains:
        pytest.skip("no environment registered yet")
    model, tok, _ = tiny
    policy = ModelPolicy(model, tok, max_new_tokens=40)
    tasks = generate_tasks(domains[0], 3, seed=0)
    trajs = run_episodes(policy, tasks, max_turns=2, progress=False)
    assert len(trajs) == 3
    first = generate_turns(model, tok, [[{"role": "user", "content": t.messages[0].content}] for t in trajs], max_new_tokens=40)
    assert [t.messages[1].content for t in trajs] == first.texts
    assert all(t.messages[1].role == "assistant" and "success" in t.meta for t in trajs)
    assert policy.model_calls >= 1


def test_prefix_cache_gives_the_same_turns_and_encodes_less(tiny):
    from openmanus_lite.engine.generation import PrefixCache

    model, tok, _ = tiny
    cache = PrefixCache()
    hist = [list(c) for c in CONVS]
    for _ in range(3):
        plain = generate_turns(model, tok, hist, max_new_tokens=16, batch_size=3, return_ids=True)
        cached = generate_turns(model, tok, hist, max_new_tokens=16, batch_size=3, return_ids=True, kv_cache=cache)
        assert cached.completion_ids == plain.completion_ids
        for h, text in zip(hist, plain.texts):
            h += [{"role": "assistant", "content": text}, {"role": "user", "content": "Nothing happens."}]
    assert cache.reused_tokens > cache.encoded_tokens  # later turns encode only the new observation
    # each conversation's entry replaced the one it extends; the chat template's opening is shared once
    assert len(cache) - cache.shared_entries == len(CONVS) and cache.shared_entries >= 1


def test_prefix_cache_memory_cap_and_invalidation(tiny):
    from openmanus_lite.engine.generation import PrefixCache

    model, tok, _ = tiny
    small = PrefixCache(max_bytes=1)
    generate_turns(model, tok, CONVS, max_new_tokens=4, kv_cache=small)
    assert len(small) == 1  # never more than the cap allows (always keeps the newest)
    policy = ModelPolicy(model, tok, max_new_tokens=8)
    policy.act_batch(CONVS[:2], [None, None])
    assert len(policy.kv_cache) - policy.kv_cache.shared_entries == 2
    policy.act_batch(CONVS[:2], [None, None])
    assert policy.kv_cache.reused_tokens > 0  # the same prompts again: their keys/values come from the cache
    with torch.no_grad():
        next(model.parameters()).add_(0.0)  # an in-place update, as an optimizer step makes
    before = policy.kv_cache.reused_tokens
    policy.act_batch(CONVS[:1], [None])
    assert policy.kv_cache.reused_tokens == before  # stale keys/values were dropped, not reused
    # a fused optimizer step changes the weights without bumping version counters: still detected
    policy = ModelPolicy(copy.deepcopy(model), tok, max_new_tokens=8)  # the fixture's model stays untouched
    policy.act_batch(CONVS[:1], [None])
    before = policy.kv_cache.reused_tokens
    trainable = [p for p in policy.model.parameters() if p.requires_grad]
    versions = [p._version for p in trainable]
    for p in trainable:
        p.grad = torch.ones_like(p)
    torch.optim.AdamW(trainable, lr=1e-3, fused=True).step()
    assert [p._version for p in trainable] == versions  # the blind spot this guards against
    policy.act_batch(CONVS[:1], [None])
    assert policy.kv_cache.reused_tokens == before
    own = PrefixCache(max_bytes=2**20)
    assert ModelPolicy(model, tok, kv_cache=own).kv_cache is own  # a caller's empty cache is used, not dropped
    assert ModelPolicy(model, tok, kv_cache=False).kv_cache is None


def test_grouped_attention_gives_the_stock_results(tiny):
    """attention.NAME (no key/value copies) = transformers' sdpa: logits, cached multi-turn generation."""
    from openmanus_lite.engine.attention import NAME, sdpa_gqa_attention, use_grouped_attention

    model, tok, path = tiny
    batch = tok(["Count", "Go to the fridge and open it"], return_tensors="pt", padding=True, padding_side="left")
    prompts = CONVS + [CONVS[2] + [{"role": "assistant", "content": REPLY}, {"role": "user", "content": "ok"}]]
    with torch.no_grad():
        stock_logits = model(**batch).logits
    stock = generate_turns(model, tok, prompts, max_new_tokens=16, batch_size=5, return_ids=True)
    assert use_grouped_attention(model) and model.config._attn_implementation == NAME
    try:
        with torch.no_grad():
            assert torch.allclose(model(**batch).logits, stock_logits, atol=1e-5)
        grouped = generate_turns(model, tok, prompts, max_new_tokens=16, batch_size=5, return_ids=True)
        assert grouped.completion_ids == stock.completion_ids
    finally:
        model.config._attn_implementation = "sdpa"
    # no mask, new queries after cached keys: each query sees the past and its own prefix
    q, k, v = torch.randn(1, 4, 3, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
    out, _ = sdpa_gqa_attention(model.model.layers[0].self_attn, q, k, v, None)
    mask = torch.ones(3, 5, dtype=torch.bool).tril(2)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1),
                                                           attn_mask=mask)
    assert torch.allclose(out, ref.transpose(1, 2), atol=1e-6)
    # one new query per row (decoding): grouped matmuls over a strided cache view, boolean or additive mask
    q, buf = torch.randn(3, 4, 1, 8), torch.randn(2, 3, 2, 9, 8)
    k, v = buf[0, :, :, :6], buf[1, :, :, :6]
    keep = torch.ones(3, 1, 1, 6, dtype=torch.bool)
    keep[0, ..., :2] = False
    ref = torch.nn.functional.scaled_dot_product_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1),
                                                           attn_mask=keep).transpose(1, 2)
    for mask in (keep, torch.zeros(3, 1, 1, 6).masked_fill(~keep, float("-inf"))):
        out, _ = sdpa_gqa_attention(model.model.layers[0].self_attn, q, k, v, mask)
        assert torch.allclose(out, ref, atol=1e-6)
    assert load_model(path, backend="hf")[0].config._attn_implementation == NAME  # CPU loads switch to it


def test_prefix_cache_keeps_the_entries_a_call_still_needs():
    """Over the cap, a call's own new entries do not evict the entries its later batches reuse (least recently
    used, they would go first and those batches would encode their conversations in full)."""
    from openmanus_lite.engine.generation import PrefixCache

    def kv(tokens):
        return [(torch.zeros(1, tokens, 1), torch.zeros(1, tokens, 1))]  # 8 bytes a token

    cache = PrefixCache(max_bytes=8 * 60, min_reuse=4)  # 60 tokens
    old = [list(range(100 * k, 100 * k + 20)) for k in range(3)]
    for ids in old:
        cache.add(ids, kv(20))
    prompts = [ids + [7] * 5 for ids in old]  # each conversation a turn later
    with cache.reserved(prompts):
        first = [cache.match(prompts[0])]
        cache.release(first)  # the first batch copied its prefix: its old entry goes
        assert len(cache) == 2 and first[0][1] == 20
        cache.add(prompts[0] + [1] * 4, kv(30))  # over the cap, every older entry reserved: the new one goes
        assert len(cache) == 2 and cache.nbytes == 8 * 40
        assert [cache.match(p)[1] for p in prompts[1:]] == [20, 20]  # the later batches still reuse theirs
    cache.add(prompts[0] + [1] * 4, kv(30))  # the call over: least recently used first, as before
    assert len(cache) == 2 and cache.match(prompts[1])[1] == 0 and cache.match(prompts[2])[1] == 20


def test_a_prefix_cache_copy_starts_from_the_same_entries():
    """`copy`: the same entries and settings, shared keys/values, counters at zero; using it leaves the original."""
    from openmanus_lite.engine.generation import PrefixCache

    cache = PrefixCache(max_bytes=8 * 60, min_reuse=4)
    kv = [(torch.zeros(1, 20, 1), torch.zeros(1, 20, 1))]
    cache.add(list(range(20)), kv)
    cache.add(list(range(50, 70)), kv, shared=True)
    cache.reused_tokens = 5
    twin = cache.copy()
    assert (twin.max_bytes, twin.min_reuse, len(twin), twin.shared_entries, twin.nbytes, twin.reused_tokens) == (
        8 * 60, 4, 2, 1, cache.nbytes, 0)
    eid, common = twin.match(list(range(25)))
    assert common == 20 and twin.kv(eid)[0][0] is kv[0][0]
    twin.drop(eid)
    assert len(twin) == 1 and len(cache) == 2

"""Pooled best-of-N (eval.scaling) and the policy's own log-probability of a reply (generation.reply_logprobs)."""

from __future__ import annotations

import math

import pytest

from openmanus_lite.eval.benchmark import BenchmarkResult
from openmanus_lite.eval.metrics import TaskRecord
from openmanus_lite.eval.scaling import best_of_n_from_pools, episode_pools, random_pick_rates


def rec(task: str, success: bool, tokens: int, domain: str = "db") -> TaskRecord:
    return TaskRecord(task_id=task, domain=domain, difficulty="medium", success=success, score=float(success),
                      turns=2, invalid_actions=0, generated_tokens=tokens)


def result(label: str, records: list[TaskRecord]) -> BenchmarkResult:
    return BenchmarkResult(policy=label, suite="dev", records=records, label=label)


def test_pools_keep_the_greedy_episode_first_and_refuse_strangers():
    greedy = result("greedy", [rec("a", False, 10), rec("b", True, 20)])
    s1 = result("s1", [rec("a", True, 12), rec("b", False, 18)])
    pools = episode_pools(greedy, [s1])
    assert [r.success for r in pools["a"]] == [False, True] and pools["a"][0].generated_tokens == 10
    with pytest.raises(ValueError, match="task 'c'"):
        episode_pools(greedy, [result("s2", [rec("c", True, 1)])])


def test_best_of_n_picks_by_score_charges_all_n_and_bounds_by_the_oracle():
    greedy = result("greedy", [rec("a", False, 10), rec("b", True, 20), rec("c", False, 5)])
    samples = [result("s1", [rec("a", True, 12), rec("b", False, 18), rec("c", False, 5)]),
               result("s2", [rec("a", False, 8), rec("b", True, 22), rec("c", True, 7)]),
               result("s3", [rec("a", False, 9), rec("b", False, 20), rec("c", False, 6)])]
    pools = episode_pools(greedy, samples)
    scores = {"good": {"a": [0.1, 0.9, 0.2, 0.3], "b": [0.8, 0.1, 0.5, 0.2], "c": [0.0, 0.0, 0.9, 0.1]},
              "flat": {t: [0.5] * 4 for t in "abc"}}  # ties: the earlier episode, so the greedy one
    runs = best_of_n_from_pools(pools, [1, 2, 4], scores, suite_name="dev")
    assert set(runs) == {(f"best_of_n[{p}]", float(n)) for p in ("good", "flat") for n in (1, 2, 4)} | {
        ("best_of_n-oracle", float(n)) for n in (1, 2, 4)}
    greedy_rate = greedy.success_rate()
    for picker in ("good", "flat"):  # best-of-1 is the greedy episode, whatever the picker
        assert runs[(f"best_of_n[{picker}]", 1.0)].success_rate() == greedy_rate
    assert runs[("best_of_n[flat]", 4.0)].success_rate() == greedy_rate
    # N=2: a picks the sample (0.9), b keeps greedy, c's two episodes both fail
    two = runs[("best_of_n[good]", 2.0)].by_task()
    assert (two["a"].success, two["b"].success, two["c"].success) == (True, True, False)
    assert [two[t].generated_tokens for t in "abc"] == [22, 38, 10]  # both episodes were played
    assert two["a"].extra == {"pool_index": 1, "pool_size": 2}
    assert runs[("best_of_n[good]", 4.0)].success_rate() == 1.0
    for n in (1.0, 2.0, 4.0):
        assert runs[("best_of_n-oracle", n)].success_rate() >= runs[("best_of_n[good]", n)].success_rate()
    assert runs[("best_of_n-oracle", 1.0)].success_rate() == greedy_rate
    assert pools["a"][0].extra == {}  # the pooled records themselves are not changed
    # a uniform pick's expected success: N=1 1/3 (b); N=2 a 1/2, b 1/2, c 0; N=4 a 1/4, b 2/4, c 1/4
    assert random_pick_rates(pools.values(), [1, 2, 4]) == pytest.approx({"1x": 1 / 3, "2x": 1 / 3, "4x": 1 / 3})
    assert random_pick_rates([], [2]) is None


def test_best_of_n_says_what_is_missing():
    pools = episode_pools(result("g", [rec("a", True, 3)]), [result("s", [rec("a", False, 4)])])
    with pytest.raises(ValueError, match="1 scores for task 'a', which pools 2"):
        best_of_n_from_pools(pools, [2], {"orm": {"a": [0.3]}})
    with pytest.raises(ValueError, match="best-of-4 needs at least 4"):
        best_of_n_from_pools(pools, [4], {"orm": {"a": [0.3, 0.2]}})


torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import AutoModelForCausalLM

    from openmanus_lite.models import build_tiny_model, load_tokenizer

    path = build_tiny_model(tmp_path_factory.mktemp("tiny_lp"), seed=5)
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval(), load_tokenizer(path)


def _by_hand(model, tok, conv):
    """Mean log-probability of the assistant replies' tokens (and each reply's <|im_end|>) in one forward pass."""
    text = tok.apply_chat_template(conv, tokenize=False)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    header = tok("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    end = tok.convert_tokens_to_ids("<|im_end|>")
    targets, i = [], 0
    while i < len(ids):
        if ids[i:i + len(header)] == header:
            j = i + len(header)
            while ids[j] != end:
                targets.append(j)
                j += 1
            targets.append(j)
            i = j
        i += 1
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), -1)
    return sum(float(logp[p - 1, ids[p]]) for p in targets) / len(targets)


def test_reply_logprobs_is_the_mean_over_every_reply_token(tiny, monkeypatch):
    from openmanus_lite.engine.generation import reply_logprobs

    monkeypatch.setenv("OPENMANUS_INFERENCE_DTYPE", "model")  # float32, like the hand computation
    model, tok = tiny
    one = [{"role": "user", "content": "Task: count the rows."},
           {"role": "assistant", "content": "Think: count.\nAct: execute(SELECT COUNT(*) FROM t)"}]
    two = one + [{"role": "user", "content": "[(3,)]"}, {"role": "assistant", "content": "Act: answer(3)"}]
    got = reply_logprobs(model, tok, [one, two, one[:1]])
    assert got[0] == pytest.approx(_by_hand(model, tok, one), abs=1e-4)
    assert got[1] == pytest.approx(_by_hand(model, tok, two), abs=1e-4)
    assert got[2] == -math.inf  # nothing the policy said
    assert reply_logprobs(model, tok, [two])[0] == pytest.approx(got[1], abs=1e-6)  # independent of the batch

"""Evaluation and search with a real (tiny, untrained) language model as the policy: the
batched benchmark path, token accounting, and sampling-based proposals through ModelPolicy."""

from __future__ import annotations

import pytest

from openmanus_lite.envs import generate_tasks

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    from openmanus_lite.models import build_tiny_model, load_model
    from openmanus_lite.policies import ModelPolicy

    path = build_tiny_model(tmp_path_factory.mktemp("tiny_eval"), seed=0)
    model, tok = load_model(str(path), backend="hf")
    return ModelPolicy(model, tok, name="tiny", max_new_tokens=8, batch_size=8)


def test_benchmark_counts_a_model_policys_tokens(policy):
    from openmanus_lite.eval import run_benchmark

    tasks = generate_tasks("db", 2, seed=2) + generate_tasks("kg", 2, seed=2)
    before = policy.generated_tokens
    res = run_benchmark(policy, tasks, max_turns=2, batch_size=8, progress=False)
    assert res.generated_tokens == policy.generated_tokens - before > 0
    assert all(0 < r.generated_tokens <= 8 * r.turns for r in res.records)


def test_search_samples_from_the_model_within_budget(policy):
    from openmanus_lite.search import Budget, run_search

    task = generate_tasks("db", 1, seed=3)[0]
    before = policy.generated_tokens
    r = run_search("beam", task, policy, Budget(tokens=40), max_turns=2)  # greedy turn + sample_batch
    assert r.tokens == policy.generated_tokens - before
    # never more than one proposal round past the budget (plus a greedy completion)
    assert 0 < r.tokens <= 40 + 2 * 8 * 3 and r.calls >= 3
    assert r.replay_matches

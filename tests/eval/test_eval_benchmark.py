"""run_benchmark on real environments: records, token attribution, persistence, CLI."""

from __future__ import annotations

import json
import random

import pytest

from openmanus_lite.cli.eval import main as eval_main
from openmanus_lite.envs import generate_tasks, list_domains
from openmanus_lite.eval import BenchmarkResult, TokenMeter, load_result, run_benchmark


@pytest.fixture(scope="module")
def tasks():
    return [t for d in list_domains() for diff in ("easy", "hard") for t in generate_tasks(d, 2, seed=7, difficulty=diff)]


def test_expert_benchmark_records_everything(tasks):
    res = run_benchmark("expert", tasks, progress=False)
    assert len(res.records) == len(tasks) and res.success_rate() == 1.0
    assert {r.domain for r in res.records} == set(list_domains())
    rec = res.records[0]
    assert rec.trajectory["messages"][0]["role"] == "user" and rec.turns >= 1
    assert rec.generated_tokens is None and rec.model_calls == rec.turns  # the expert counts no tokens
    table = res.table()
    assert {"success_rate", "ci_low", "ci_high", "mean_score", "mean_turns", "invalid_action_rate",
            "tokens_per_episode", "wall_s"} <= set(table.columns)
    assert res.row("all", "all").n == len(tasks)


class CountingPolicy:
    """Random actions, with a model policy's token counter (one token per 4 characters)."""

    name = "counting"

    def __init__(self, per_reply: bool):
        self.generated_tokens = 0
        self.per_reply = per_reply
        self.batches = []

    def act_batch(self, histories, envs):
        replies = [e.random_action(random.Random(len(h))) for h, e in zip(histories, envs)]
        counts = [len(r) // 4 + 1 for r in replies]
        self.generated_tokens += sum(counts)
        if self.per_reply:
            self.last_generated_tokens = counts
        self.batches.append(len(histories))
        return replies


@pytest.mark.parametrize("per_reply", [True, False])
def test_tokens_are_attributed_to_tasks(tasks, per_reply):
    pol = CountingPolicy(per_reply)
    res = run_benchmark(pol, tasks, batch_size=8, progress=False)
    assert res.generated_tokens == pol.generated_tokens > 0
    assert all(r.generated_tokens > 0 for r in res.records)
    assert max(pol.batches) == 8  # a whole batch of episodes per call
    if per_reply:  # exact per task: the sum of its replies' counts
        for r in res.records:
            replies = [m["content"] for m in r.trajectory["messages"] if m["role"] == "assistant"]
            assert r.generated_tokens == sum(len(x) // 4 + 1 for x in replies)


def test_token_meter_rejects_wrong_reply_count(tasks):
    class Bad:
        name = "bad"

        def act_batch(self, histories, envs):
            return ["x"]

    with pytest.raises(ValueError, match="one string per conversation"):
        run_benchmark(Bad(), tasks[:3], progress=False)
    assert TokenMeter(Bad()).counts_tokens is False


def test_callable_policy_and_save_load(tasks, tmp_path):
    res = run_benchmark(lambda messages: "Think: hmm\nAct: answer(0)", tasks, progress=False, label="answer0")
    assert res.label == "answer0" and res.row().invalid_action_rate <= 1.0
    back = load_result(res.save(tmp_path / "r.json"))
    assert [r.to_dict() for r in back.records] == [r.to_dict() for r in res.records]
    csv_back = BenchmarkResult.load(res.save(tmp_path / "r.csv"))
    assert csv_back.success_rate() == res.success_rate()


def test_an_invalid_streak_ends_episodes_early_and_is_recorded(tasks):
    babble = lambda messages: "You have 5 turns."  # noqa: E731 - what the untrained default model writes
    res = run_benchmark(babble, tasks, max_turns=8, progress=False, max_invalid_streak=2)
    assert {r.turns for r in res.records} == {2} and res.meta["max_invalid_streak"] == 2
    assert all(r.trajectory["meta"]["max_invalid_streak"] == 2 for r in res.records)  # replayable
    assert {r.turns for r in run_benchmark(babble, tasks, max_turns=8, progress=False).records} == {8}
    with pytest.raises(ValueError, match="not to a search"):
        run_benchmark(babble, tasks, search="best_of_n", budget=object(), progress=False, max_invalid_streak=2)


def test_duplicate_task_ids_are_refused(tasks):
    with pytest.raises(ValueError, match="duplicate task ids"):
        run_benchmark("expert", [tasks[0], tasks[0]], progress=False)


def test_cli_runs_compares_and_verifies(tmp_path, capsys):
    out = tmp_path / "eval"
    rc = eval_main(["--model", "expert", "--model", "random", "--suite", "dev", "--limit", "1", "--output_dir",
                    str(out), "--no-progress"])
    assert rc == 0
    files = sorted(p.name for p in out.iterdir())
    assert "expert_dev.json" in files and "random_dev.csv" in files and "comparison_dev.png" in files
    printed = capsys.readouterr().out
    assert "comparison" in printed and "paired sign test, random vs expert" in printed
    assert json.loads((out / "expert_dev.json").read_text())["summary"][-1]["success_rate"] == 1.0
    assert eval_main(["compare", str(out / "expert_dev.json"), str(out / "random_dev.csv")]) == 0
    assert eval_main(["verify"]) == 0
    rc = eval_main(["--model", "random", "--suite", "dev", "--limit", "1", "--strategy", "dfsdt", "--budget-calls",
                    "12", "--out", str(out), "--no-progress"])  # the old --out still works, with a notice
    assert rc == 0 and (out / "dfsdt_random_dev.json").exists()
    assert "--out is deprecated" in capsys.readouterr().err
    assert eval_main(["--model", "expert", "--suite", "nope", "--out", str(out)]) == 2


def test_make_policy_names_baselines_models_and_the_newest_checkpoint(tmp_path, monkeypatch):
    """The helper notebooks 07-08 and the `eval` CLI share: a policy from what a user types."""
    import os

    from openmanus_lite import models
    from openmanus_lite.eval import make_policy
    from openmanus_lite.policies import CallablePolicy, ExpertPolicy, ModelPolicy, RandomPolicy

    assert isinstance(make_policy("expert"), ExpertPolicy)
    assert isinstance(make_policy("random", seed=3), RandomPolicy)
    assert isinstance(make_policy(lambda messages: "Act: answer(1)"), CallablePolicy)
    monkeypatch.setattr(models, "RUNS_DIR", tmp_path)
    with pytest.raises(FileNotFoundError, match="no checkpoint under runs/ mentions 'sft'"):
        make_policy("latest:sft")
    old = models.build_tiny_model(tmp_path / "sft_a" / "final")
    new = models.build_tiny_model(tmp_path / "sft_b" / "final")
    models.build_tiny_model(tmp_path / "grpo_c" / "final")
    os.utime(old / "config.json", (1, 1))
    assert models.find_checkpoint("sft") == new and models.find_checkpoint("SFT", root=tmp_path) == new
    policy = make_policy("latest:sft", max_new_tokens=4, batch_size=2)
    assert isinstance(policy, ModelPolicy) and policy.name == "final" and policy.batch_size == 2

"""Metrics, result persistence and comparisons, on hand-built results (no environment runs)."""

from __future__ import annotations

import matplotlib
import pytest

from openmanus_lite.eval import (
    BenchmarkResult,
    TaskRecord,
    comparison_frame,
    comparison_table,
    flip_counts,
    flipped_tasks,
    plot_comparison,
    rate_cell,
    summarize,
    wilson_interval,
)
from openmanus_lite.eval.metrics import find_row
from openmanus_lite.policies import share

matplotlib.use("Agg")


def rec(tid, domain="db", diff="easy", success=True, score=None, turns=2, invalid=0, tokens=None):
    return TaskRecord(task_id=tid, domain=domain, difficulty=diff, success=success,
                      score=float(success) if score is None else score, turns=turns, invalid_actions=invalid,
                      wall_s=0.5, generated_tokens=tokens)


def test_wilson_matches_reference_values():
    # reference values from the closed form (Wilson 1927), z = 1.96
    lo, hi = wilson_interval(5, 10)
    assert lo == pytest.approx(0.2366, abs=1e-4) and hi == pytest.approx(0.7634, abs=1e-4)
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.2775, abs=1e-4)
    lo, hi = wilson_interval(50, 50)
    assert hi == 1.0 and lo == pytest.approx(0.9287, abs=1e-4)
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


def test_summary_of_hand_built_records():
    records = [
        rec("a", success=True, turns=2, invalid=0, tokens=10),
        rec("b", success=False, score=0.5, turns=4, invalid=2, tokens=30),
        rec("c", diff="hard", success=True, turns=3, invalid=1, tokens=20),
        rec("d", domain="kg", success=False, turns=1, invalid=1, tokens=None),
    ]
    rows = summarize(records)
    assert [(r.domain, r.difficulty) for r in rows] == [("db", "easy"), ("db", "hard"), ("db", "all"),
                                                        ("kg", "easy"), ("all", "all")]
    easy = rows[0]
    assert (easy.n, easy.successes, easy.success_rate) == (2, 1, 0.5)
    assert easy.mean_score == pytest.approx(0.75) and easy.mean_turns == 3.0
    assert easy.invalid_action_rate == pytest.approx(2 / 6)
    assert easy.generated_tokens == 40 and easy.tokens_per_episode == 20.0
    assert (easy.ci_low, easy.ci_high) == wilson_interval(1, 2)
    db = find_row(rows, "db")
    assert db.n == 3 and db.success_rate == pytest.approx(2 / 3) and db.generated_tokens == 60
    overall = find_row(rows)
    assert overall.n == 4 and overall.successes == 2
    assert overall.generated_tokens is None  # one policy call was not counted: no made-up total
    assert overall.invalid_action_rate == pytest.approx(4 / 10)
    assert overall.wall_s == pytest.approx(2.0)


def test_single_cell_result_answers_for_all():
    res = BenchmarkResult("p", "s", [rec("a"), rec("b", success=False)])
    assert res.success_rate() == 0.5 and res.success_rate("db") == 0.5


def test_result_round_trips_json_and_csv(tmp_path):
    traj = {"id": "p/a", "source": "x", "domain": "db", "messages": [{"role": "user", "content": "q", "train": False}],
            "meta": {}}
    records = [rec("a", tokens=7), rec("b", domain="kg", diff="hard", success=False, score=0.25, tokens=9)]
    records[0].trajectory = traj
    records[1].extra = {"strategy": "mcts", "value": 0.7}
    res = BenchmarkResult("model", "dev", records, wall_s=3.0, meta={"model": "ckpt"}, label="sft")
    back = BenchmarkResult.load(res.save(tmp_path / "r.json"))
    assert back.to_dict() == res.to_dict()
    from_csv = BenchmarkResult.load(res.save(tmp_path / "r.csv"))
    assert from_csv.label == "sft" and from_csv.suite == "dev"
    assert [s.to_dict() for s in from_csv.summary] == [s.to_dict() for s in res.summary]
    assert from_csv.records[1].extra == {"strategy": "mcts", "value": 0.7}
    assert from_csv.records[0].trajectory is None
    no_tokens = BenchmarkResult("random", "dev", [rec("a")])
    assert BenchmarkResult.load(no_tokens.save(tmp_path / "n.csv")).records[0].generated_tokens is None
    with pytest.raises(ValueError, match="json or .csv"):
        res.save(tmp_path / "r.txt")
    (tmp_path / "bad.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="missing columns"):
        BenchmarkResult.load(tmp_path / "bad.csv")


def _pair():
    a = BenchmarkResult("base", "dev", [rec("t1", success=True), rec("t2", success=False), rec("t3", success=True),
                                        rec("t4", domain="kg", success=False)], label="base")
    b = BenchmarkResult("sft", "dev", [rec("t1", success=True), rec("t2", success=True), rec("t3", success=False),
                                       rec("t5", domain="kg", success=True)], label="sft")
    return a, b


def test_flipped_tasks_and_counts():
    a, b = _pair()
    flips = flipped_tasks(a, b)
    assert dict(zip(flips["task_id"], flips["change"])) == {"t2": "gained", "t3": "lost", "t4": "only_in_base",
                                                             "t5": "only_in_sft"}
    assert flip_counts(a, b) == {"common": 3, "gained": 1, "lost": 1, "both_solved": 1, "both_failed": 0}


def test_comparison_table_and_plot():
    a, b = _pair()
    frame = comparison_frame([a, b])
    assert set(frame["policy"]) == {"base", "sft"}
    db = frame[(frame["policy"] == "sft") & (frame["domain"] == "db")].iloc[0]
    assert db["success_rate"] == pytest.approx(2 / 3)
    table = comparison_table({"A": a, "B": b})
    assert a.label == "base"  # labelling by dict does not rename the caller's result
    assert list(table.columns) == ["A", "B"] and table.loc["db", "B"] == rate_cell(b.row("db"))
    assert table.loc["db", "B"].startswith("2/3: 66.7% [")
    fig = plot_comparison([a, b])
    assert len(fig.axes[0].patches) == 4  # 2 domains x 2 policies
    with pytest.raises(ValueError, match="share labels"):
        comparison_frame([a, BenchmarkResult("base", "dev", [rec("x")])])


def test_share_sums_exactly():
    assert share(10, [1, 1, 1]) == [4, 3, 3]
    assert share(7, [0, 0]) == [4, 3]
    parts = share(101, [5, 17, 3, 40])
    assert sum(parts) == 101 and all(p >= 0 for p in parts)
    assert parts == [8, 26, 5, 62]


def test_by_domain_is_the_per_domain_view_of_the_same_summary():
    records = [rec("a", turns=2, invalid=0), rec("b", success=False, turns=4, invalid=2),
               rec("c", diff="hard", turns=2, invalid=1), rec("d", domain="kg", success=False, turns=2, invalid=0)]
    res = BenchmarkResult(policy="p", suite="s", records=records)
    view = res.by_domain()
    assert list(view) == ["db", "kg", "all"]
    assert view["db"]["n"] == 3 and view["db"]["success"] == pytest.approx(2 / 3)
    assert (view["db"]["success_lo"], view["db"]["success_hi"]) == wilson_interval(2, 3)
    assert view["db"]["valid_rate"] == pytest.approx(1 - 3 / 8) and view["db"]["mean_turns"] == pytest.approx(8 / 3)
    assert view["all"]["n"] == 4 and view["all"]["success"] == 0.5 and view["kg"]["success"] == 0.0
    assert comparison_table([res]).loc["db", "p"] == rate_cell(res.row("db")) == "2/3: 66.7% [20.8, 93.9]"
    assert list(res.table("domain")["domain"]) == ["db", "kg"] and len(res.table()) == len(res.summary)

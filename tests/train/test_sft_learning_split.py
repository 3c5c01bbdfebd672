"""The SFT learning benchmark split over sittings: train now, evaluate the saved marks later."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from benchmarks.sft_learning import main  # noqa: E402
from openmanus_lite.data import read_jsonl  # noqa: E402


def test_defer_then_evaluate_saved_marks_one_label_at_a_time(tmp_path, capsys):
    out = str(tmp_path / "run")
    stale = tmp_path / "run" / "episodes" / "15min.jsonl"  # left by an earlier model in the same folder
    stale.parent.mkdir(parents=True)
    stale.write_text("{}\n")
    # the untrained model's row needs no training run: measured first, kept by the training run below
    assert main(["--quick", "--threads", "1", "--eval-saved", "--labels", "base", "--out", out]) == 0
    base_episodes = read_jsonl(tmp_path / "run" / "episodes" / "base.jsonl")
    assert len(base_episodes) == 6 and all("success" in e.meta for e in base_episodes)  # 3 tasks x 2 domains

    capsys.readouterr()
    assert main(["--quick", "--threads", "1", "--defer-eval", "--scheduler", "cosine", "--max-steps", "100000",
                 "--recovery", "1", "--recovery-kinds", "corrupt,skip", "--recovery-repeats", "1,2", "--domain-weights", "db=2",
                 "--out", out]) == 0
    assert "kept the reference rows ['base']" in capsys.readouterr().out
    train = json.loads((tmp_path / "run" / "train.json").read_text())
    assert (train["scheduler"], train["max_steps"]) == ("cosine", 100000)  # the schedule is on record
    assert train["train_tasks_per_domain"] == {"os": 6, "db": 12}  # --quick: 6 per domain, db weighted 2
    assert train["recovery_counts"]["kept"] == train["train_trajectories"] - train["expert_trajectories"] > 0
    assert train["recovery_kinds"] == ["corrupt", "skip"] and train["recovery_repeats"] == [1, 2]
    assert not stale.exists() and (tmp_path / "run" / "episodes" / "base.jsonl").exists()
    labels = [m["label"] for m in train["marks"]]
    assert len(labels) == 2 and all(Path(m["checkpoint"]).is_dir() for m in train["marks"])
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["evaluated"] == ["base"] and summary["not_evaluated"] == ["random", *labels]

    # one sitting: the first mark
    assert main(["--quick", "--threads", "1", "--eval-saved", "--labels", labels[0], "--out", out]) == 0
    curve = json.loads((tmp_path / "run" / "curve.json").read_text())["results"]
    assert set(curve) == {"base", labels[0]} and curve[labels[0]]["all"]["n"] == 6

    # the next sitting does only what is missing
    capsys.readouterr()
    assert main(["--quick", "--threads", "1", "--eval-saved", "--out", out]) == 0
    assert f"now: ['random', '{labels[1]}']" in capsys.readouterr().out
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["evaluated"] == ["random", "base", *labels] and summary["not_evaluated"] == []
    assert summary["beats_random"] is not None


def test_reference_rows_are_dropped_when_the_settings_change(tmp_path):
    from benchmarks.sft_learning import Curve, reference_settings

    settings = reference_settings("m", ["os"], 3, 16)
    curve = Curve(tmp_path, settings)
    curve.results.update({"base": {}, "random": {}, "15min": {}})
    curve.save()
    assert Curve(tmp_path, settings).reset() == ["random", "base"]  # the mark goes, the references stay
    assert Curve(tmp_path, reference_settings("m", ["os"], 3, 32)).reset() == []  # other generation length
    assert Curve(tmp_path, settings).results == {}
    curve = Curve(tmp_path, settings)
    curve.results["base"] = {}
    curve.save()
    with pytest.raises(SystemExit, match="other settings"):
        Curve(tmp_path, reference_settings("m", ["os", "db"], 3, 16)).check_settings()


def test_eval_saved_needs_a_training_record_and_known_labels(tmp_path):
    with pytest.raises(SystemExit, match="train first"):
        main(["--quick", "--eval-saved", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="train first"):
        main(["--quick", "--eval-saved", "--labels", "base,15min", "--out", str(tmp_path)])
    (tmp_path / "train.json").write_text(json.dumps({"model": "x", "domains": ["os"], "tasks_per_domain": 1,
                                                     "max_new_tokens": 4, "marks": []}))
    with pytest.raises(SystemExit, match="unknown labels"):
        main(["--quick", "--eval-saved", "--labels", "60min", "--out", str(tmp_path)])
    with pytest.raises(SystemExit):
        main(["--labels", "base"])  # --labels without --eval-saved is a usage error


def test_domain_weights_scale_the_training_tasks_and_reject_bad_items():
    from benchmarks.sft_learning import parse_args, recipe_from_args

    def counts(*argv):
        return recipe_from_args(parse_args(["--dtype", "float32", *argv])).task_counts()

    assert counts("--domains", "os,web,kg", "--domain-weights", "web=2, kg=0.5") == {"os": 250, "web": 500, "kg": 125}
    assert counts("--domains", "os", "--domain-weights", "") == {"os": 250}
    assert counts("--domains", "os,web") == {"os": 250, "web": 500}  # the recipe's weights, for the domains chosen
    for bad, why in [("shop=2", "expected domain=number"), ("web", "expected domain=number"),
                     ("web=two", "is not a number"), ("web=-1", "cannot be negative")]:
        with pytest.raises(SystemExit, match=why):
            counts("--domains", "os,web", "--domain-weights", bad)


def test_the_default_run_is_the_cpu_60min_recipe(tmp_path):
    """A plain `python benchmarks/sft_learning.py` trains the recipe: same settings, same SFTRunConfig, same data;
    its training options are the `sft` command's (the old spellings still work)."""
    from benchmarks.sft_learning import parse_args, recipe_from_args, run_config
    from openmanus_lite.recipes import get_recipe, recipe_trajectories

    recipe = get_recipe("cpu_60min")
    args = parse_args([])
    ours = recipe_from_args(args)
    assert ours == recipe.replace(domains=tuple(recipe.domain_list()))
    cfg = run_config(ours, tmp_path, args)
    assert cfg == recipe.sft_config(output_dir=str(tmp_path / "trainer"), save_steps=10**6, save_total_limit=None,
                                    resume=False, disable_tqdm=False, logging_steps=5, clock="wall")
    assert (cfg.cosine_by_time, cfg.max_minutes, cfg.mark_minutes, cfg.per_device_train_batch_size) == (
        True, 60.0, [15.0, 30.0, 60.0], 2)
    new = run_config(ours, tmp_path, parse_args(["--per_device_train_batch_size", "8", "--adam_beta2", "0.9"]))
    old = run_config(ours, tmp_path, parse_args(["--batch-size", "8", "--adam_beta2", "0.9"]))
    assert new == old and (new.per_device_train_batch_size, new.adam_beta2) == (8, 0.9)
    # the data: the same tasks and episodes, on small counts (weights, recovery kinds and repeats as the recipe's)
    small = recipe_from_args(parse_args(["--train-tasks", "2", "--domains", "os,web,household"]))
    trajs, info = recipe_trajectories(small)
    mine, mine_info = recipe_trajectories(recipe.replace(tasks_per_domain=2, domains=("os", "web", "household")))
    assert info == mine_info and [t.id for t in trajs] == [t.id for t in mine]
    assert small.task_counts() == {"os": 2, "web": 4, "household": 6} and info["recovery"] > 0


def test_recovery_kinds_name_known_mistakes():
    from benchmarks.sft_learning import recovery_kinds

    assert recovery_kinds("random") == ("random",) and recovery_kinds("skip, corrupt") == ("skip", "corrupt")
    for bad in ("", "typo", "random,typo"):
        with pytest.raises(SystemExit, match="--recovery-kinds: expected some of"):
            recovery_kinds(bad)


def test_recovery_repeats_are_counts_of_one_or_more():
    from benchmarks.sft_learning import recovery_repeats

    assert recovery_repeats("1") == (1,) and recovery_repeats("1, 2") == (1, 2)
    for bad in ("", "0", "1,x", "2,-1"):
        with pytest.raises(SystemExit, match="--recovery-repeats: expected"):
            recovery_repeats(bad)


def test_corrections_join_the_data_midway_and_their_rollouts_count_as_training_time(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["--quick", "--threads", "1", "--defer-eval", "--corrections-at", "0.1", "--correction-tasks",
                 "os=2,db=2", "--scheduler", "cosine", "--max-steps", "100000", "--out", str(out)]) == 0
    train = json.loads((out / "train.json").read_text())
    fixes = train["corrections"]
    assert fixes["tasks"] == {"os": 2, "db": 2} and fixes["played"]["all"]["n"] == 4 and fixes["horizon_steps"] >= 1
    assert fixes["counts"]["episodes"] == 4 and sum(fixes["per_domain"].values()) == fixes["counts"]["kept"]
    first, second = train["marks"]
    assert Path(first["checkpoint"]).parent.name == "trainer"  # before the corrections
    assert Path(second["checkpoint"]).parent.name == "trainer_corrected"  # after them, on the combined data
    # the rollouts are inside the budget: the second phase gets what they left of the last mark's 0.2 minutes,
    # and its marks count from after them
    assert fixes["at_minutes"] >= 0.1 and fixes["rollout_minutes"] > 0
    assert fixes["at_minutes"] + fixes["rollout_minutes"] + fixes["minutes_left"] == pytest.approx(0.2, abs=2e-3)
    assert second["train_minutes"] >= fixes["at_minutes"] + fixes["rollout_minutes"] - 1e-3
    assert second["step"] == train["steps"] > first["step"] and second["tokens_seen"] > first["tokens_seen"]
    assert main(["--quick", "--threads", "1", "--eval-saved", "--labels", second["label"], "--out", str(out)]) == 0
    with pytest.raises(SystemExit):
        main(["--quick", "--corrections-at", "0.2"])  # a usage error: no time left after the corrections
    assert "--corrections-at must come before the last" in capsys.readouterr().err
    for bad, why in [("shop=2", "expected domain=number"), ("os=0", "no tasks to play")]:
        with pytest.raises(SystemExit, match=f"--correction-tasks: {why}"):
            main(["--quick", "--threads", "1", "--corrections-at", "0.1", "--correction-tasks", bad,
                  "--scheduler", "cosine", "--out", str(tmp_path / "bad")])  # the default cosine_by_time is refused


@pytest.mark.parametrize("native", [True, False])
def test_dtype_auto_takes_bf16_only_where_the_cpu_has_it(monkeypatch, native):
    import torch

    from benchmarks.sft_learning import training_dtype
    from openmanus_lite.engine import precision

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: native)

    def error(message):
        raise SystemExit(message)

    assert training_dtype("auto", error) == ("bfloat16" if native else "float32")
    assert training_dtype("float32", error) == "float32"
    if native:
        assert training_dtype("bfloat16", error) == "bfloat16"
    else:
        with pytest.raises(SystemExit, match="no native bfloat16"):
            training_dtype("bfloat16", error)

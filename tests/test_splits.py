"""openmanus_lite.splits: every training split avoids every held-out task, and the check names overlaps.

Task generation only (no model), so these run in seconds."""

from __future__ import annotations

import itertools

import pytest

from openmanus_lite import splits
from openmanus_lite.envs import generate_tasks, list_domains
from openmanus_lite.eval.suites import SUITE_SEEDS
from openmanus_lite.schema import Task


def test_task_key_is_instruction_and_world_not_id_or_answer():
    task = generate_tasks("db", 1, seed=3)[0]
    same = Task("another-id", task.domain, task.instruction, dict(task.spec), answer="x", difficulty="hard")
    assert splits.task_key(same) == splits.task_key(task)
    other_world = Task(task.id, task.domain, task.instruction, {**task.spec, "extra": 1})
    assert splits.task_key(other_world) != splits.task_key(task)
    assert len(splits.task_key(task)) == 64  # a sha256 hex digest: stable across runs and processes


def test_old_grpo_learning_defaults_held_out_the_sft_checkpoints_training_tasks():
    # what the defaults built before issue #28: benchmarks/sft_learning.py trained on seed 1000 (+ --seed 0),
    # minus its 30 evaluation tasks of seed 7001; benchmarks/grpo_learning.py's multi-turn part held out
    # seed 1000 (+ --seed 0) tasks, checked only against its own training tasks (seed 0)
    domains = ["db", "kg", "os"]
    eval_keys = {splits.task_key(t) for d in domains for t in generate_tasks(d, 30, seed=7001)}
    sft_train = [t for d in domains for t in generate_tasks(d, 250, seed=1000) if splits.task_key(t) not in eval_keys]
    grpo_train_keys = {splits.task_key(t) for d in domains for t in generate_tasks(d, 64, seed=0)}
    grpo_heldout = [t for d in domains for t in generate_tasks(d, 50, seed=1000)
                    if splits.task_key(t) not in grpo_train_keys]
    with pytest.raises(splits.SplitOverlapError) as err:
        splits.check_disjoint({"sft_train": sft_train}, {"grpo heldout": grpo_heldout})
    message = str(err.value)
    sft_keys = {splits.task_key(t) for t in sft_train}
    seen = sum(splits.task_key(t) in sft_keys for t in grpo_heldout)
    assert seen > 0.9 * len(grpo_heldout)  # nearly every "held-out" task had been trained on by SFT
    assert f"{seen} held-out task(s) also in a training set" in message
    assert "sft_train / grpo heldout: db task" in message and grpo_heldout[0].id in message
    assert "... and" in message  # a long list is cut, with the count of the rest


@pytest.mark.parametrize("difficulty", ["easy", "medium"])
def test_new_grpo_learning_defaults_pass_the_check(difficulty):
    # the tasks benchmarks/grpo_learning.py --part multi now builds (default --seed 0, --eval_n 50, --probe_n 10;
    # --difficulties easy,medium adds the medium ones); the SFT checkpoint trained on easy tasks
    domains = ["db", "kg", "os"]
    probe = splits.heldout_tasks("grpo_probe", domains, 10, difficulty=difficulty)
    grpo_train, _ = splits.training_tasks("grpo_train", domains, 64, seed=splits.GRPO_TRAIN_SEED, difficulty=difficulty)
    held = splits.heldout_tasks("eval", domains, 50, difficulty=difficulty)
    sft_train, dropped = splits.training_tasks("sft_train", domains, splits.SFT_TRAIN_MAX_PER_DOMAIN)
    assert dropped > 0  # kg repeats tasks across seeds: some seed-1000 tasks equal held-out ones, and are left out
    splits.check_disjoint({"grpo_train": grpo_train, "sft_train": sft_train}, {"eval": held, "grpo_probe": probe})
    assert len(held) == 150 and len(probe) == 30


def test_every_training_split_is_disjoint_from_every_held_out_split_in_every_domain():
    train = {s.name: s for s in splits.SPLITS.values() if s.role == "train"}
    held = {s.name: s for s in splits.SPLITS.values() if s.role == "heldout"}
    assert {"sft_train", "sft_corrections", "grpo_train", "preference_train", "demo_grpo_train"} <= set(train)
    assert {"eval", "grpo_probe", "dev", "test"} <= set(held)
    domains = list_domains()
    for difficulty in ("easy", "hard"):
        train_sets = {name: splits.training_tasks(name, domains, 40, difficulty=difficulty)[0] for name in train}
        held_sets = {name: splits.heldout_tasks(name, domains, 20, difficulty=difficulty) for name in held}
        assert all(len(ts) > 0 for ts in held_sets.values())
        for (tn, ts), (hn, hs) in itertools.product(train_sets.items(), held_sets.items()):
            splits.check_disjoint({tn: ts}, {hn: hs})


def test_generator_seeds_of_different_splits_differ():
    seeds = [s.seed for s in splits.SPLITS.values() if s.seed is not None] + list(SUITE_SEEDS.values())
    assert len(seeds) == len(set(seeds))


def test_training_tasks_counts_per_domain_and_drops_exclude_and_held_out():
    tasks, removed = splits.training_tasks("sft_train", ["os", "db", "kg"], {"os": 2, "db": 5}, seed=3)
    assert [t.domain for t in tasks] == ["os"] * 2 + ["db"] * 5 and removed == 0  # kg not named: none
    first_two = generate_tasks("db", 2, seed=3)
    tasks, removed = splits.training_tasks("sft_train", ["db"], 5, seed=3, exclude=first_two)
    assert len(tasks) == 3 and removed == 2
    # a training split built from a held-out seed keeps none of its held-out tasks
    tasks, removed = splits.training_tasks("sft_train", ["os"], 10, seed=splits.EVAL_SEED)
    assert tasks == [] and removed == 10


def test_bad_split_requests_name_what_was_wrong():
    with pytest.raises(ValueError, match="unknown split 'nope'; splits: "):
        splits.training_tasks("nope", ["os"], 1)
    with pytest.raises(ValueError, match="split 'eval' is heldout, not a training split"):
        splits.training_tasks("eval", ["os"], 1)
    with pytest.raises(ValueError, match="split 'grpo_train' is a training split, not held-out"):
        splits.heldout_tasks("grpo_train", ["os"], 1)
    with pytest.raises(ValueError, match=f"ask for 1..{splits.HELDOUT_POOL} tasks per domain"):
        splits.heldout_tasks("eval", ["os"], splits.HELDOUT_POOL + 1)
    with pytest.raises(ValueError, match="task count for os must be >= 0, got -1"):
        splits.training_tasks("sft_train", ["os"], -1)


def test_value_rows_for_training_skip_held_out_tasks():
    from openmanus_lite.train.grpo_data import value_task_rows

    report: dict = {}
    rows = value_task_rows(["kg"], n=10, seed=splits.EVAL_SEED, report=report, for_training=True)
    assert rows == [] and report["kg"]["held_out"] == 10
    assert len(value_task_rows(["kg"], n=10, seed=splits.EVAL_SEED)) > 0  # held-out rows themselves are built


def test_verl_export_train_and_test_share_no_task(tmp_path):
    pytest.importorskip("pyarrow")
    from openmanus_lite.cli.export import main
    from openmanus_lite.verl_export import read_verl_parquet

    assert main(["--out", str(tmp_path), "--tasks", "web,kg", "--n", "40"]) == 0
    train, test = ([Task.from_json(r["reward_model"]["ground_truth"]) for r in read_verl_parquet(tmp_path / f"{s}.parquet")]
                   for s in ("train", "test"))
    assert len(test) == 80 and 0 < len(train) < 80  # web and kg repeat tasks: the shared ones leave train
    splits.check_disjoint({"train": train}, {"test": test})
    # before issue #28 the export kept them: seeds 0 and 10000 share web tasks
    old_train = [t for d in ("web", "kg") for t in generate_tasks(d, 40, seed=0)]
    with pytest.raises(splits.SplitOverlapError):
        splits.check_disjoint({"train": old_train}, {"test": test})

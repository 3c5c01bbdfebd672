"""Recipes as code (openmanus_lite/recipes): the registry, the data a recipe builds, its SFT settings, the CLI."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from openmanus_lite.recipes import Recipe, get_recipe, list_recipes, recipe_tasks, recipe_trajectories
from openmanus_lite.train.presets import get_preset


def test_registry_lists_the_recipes_and_names_an_unknown_one():
    assert {"cpu_60min", "cpu_30min", "t4", "gpu8"} <= set(list_recipes())
    assert all(isinstance(get_recipe(n), Recipe) and get_recipe(n).name == n for n in list_recipes())
    with pytest.raises(KeyError, match="unknown recipe 'cpu_5min'"):
        get_recipe("cpu_5min")
    with pytest.raises(ValueError, match=r"unknown recipe fields \['minutes'\]"):
        get_recipe("cpu_60min").replace(minutes=3)
    with pytest.raises(AttributeError):  # frozen: a recipe is changed by .replace, never in place
        get_recipe("cpu_60min").per_device_train_batch_size = 8
    with pytest.warns(DeprecationWarning, match="per_device_train_batch_size"):  # the old name still works
        assert get_recipe("cpu_60min").replace(batch_size=8).per_device_train_batch_size == 8


def test_recipes_share_the_measured_data_and_differ_in_budget_and_hardware():
    r60, r30, t4, gpu8 = (get_recipe(n) for n in ("cpu_60min", "cpu_30min", "t4", "gpu8"))
    data = ("split", "tasks_per_domain", "domain_weights", "recovery", "recovery_kinds", "recovery_repeats",
            "turn_limits", "difficulty", "difficulty_weights")
    assert all(getattr(r, f) == getattr(r60, f) for r in (r30, t4, gpu8) for f in data)
    assert dict(r60.domain_weights) == {"household": 3.0, "web": 2.0} and r60.recovery_repeats == (1, 2)
    c60, c30 = r60.sft_config(), r30.sft_config()
    assert (c60.cosine_by_time, c60.max_minutes, c30.max_minutes) == (True, 60.0, 30.0)
    assert c30.mark_minutes == [15.0, 30.0] and c60.learning_rate == c30.learning_rate == 1e-3
    ct4, c8 = t4.sft_config(), gpu8.sft_config()
    assert ct4.max_minutes is None and ct4.num_train_epochs == 2  # the preset's (its adamw_8bit needs a GPU)
    assert ct4.output_dir == "runs/sft_t4" and get_preset(t4.preset).sft["optim"] == "adamw_8bit"
    assert ct4.lr_scheduler_type == "cosine" and not ct4.cosine_by_time
    assert (c8.per_device_train_batch_size * c8.gradient_accumulation_steps, c8.max_length) == (16, 1536)
    assert r60.sft_config(output_dir="x", learning_rate=5e-4).learning_rate == 5e-4


def test_recipe_data_weights_domains_and_adds_recovery_episodes():
    r = get_recipe("cpu_60min").replace(tasks_per_domain=2, domains=("os", "household"), difficulty_weights=())
    assert r.task_counts() == {"os": 2, "household": 6}
    tasks, removed = recipe_tasks(r)
    assert len(tasks) + removed == 8 and {t.domain for t in tasks} == {"os", "household"}  # web's weight: no web
    trajs, info = recipe_trajectories(r, tasks)
    assert info["expert"] + info["recovery"] == len(trajs) and info["recovery"] > 0
    again, _ = recipe_trajectories(r)
    assert [t.id for t in again] == [t.id for t in trajs]  # deterministic
    with pytest.raises(ValueError, match=r"domain_weights name \['shop'\]"):
        get_recipe("cpu_60min").replace(domain_weights=(("shop", 2.0),)).task_counts()


def test_recipe_mixes_levels_each_stating_its_own_turn_limits():
    from openmanus_lite.envs import EASY_TURN_LIMITS, MEDIUM_TURN_LIMITS

    r = get_recipe("cpu_60min").replace(tasks_per_domain=4, domains=("kg", "web"), recovery=0,
                                        difficulty_weights=(("medium", 0.5),))
    assert r.levels() == {"easy": 1.0, "medium": 0.5}
    assert (r.max_turns(), r.max_turns("easy"), r.max_turns("medium")) == (EASY_TURN_LIMITS,) * 2 + (MEDIUM_TURN_LIMITS,)
    tasks, removed = recipe_tasks(r)
    assert len(tasks) + removed == (4 + 8) + (2 + 4)  # easy kg 4, web 4 x 2 (its weight); medium half as many
    trajs, info = recipe_trajectories(r, tasks)
    assert info["tasks_per_level"] == dict(Counter(t.difficulty for t in tasks)) and len(info["tasks_per_level"]) == 2
    for t in trajs:  # each level's prompt states its level's limit (web: 9 easy, 12 medium)
        limit = (MEDIUM_TURN_LIMITS if t.meta["difficulty"] == "medium" else EASY_TURN_LIMITS)[t.domain]
        assert f"You have {limit} turns." in t.messages[0].content
    assert get_recipe("cpu_60min").replace(difficulty_weights=()).levels() == {"easy": 1.0}
    for bad in ((("easy", 0.5),), (("expert", 1.0),)):  # the own level again; an unknown level
        with pytest.raises(ValueError, match="must be distinct levels"):
            recipe_tasks(get_recipe("cpu_60min").replace(difficulty_weights=bad))
    with pytest.raises(ValueError, match="must be positive"):
        get_recipe("cpu_60min").replace(difficulty_weights=(("medium", 0.0),)).levels()


def test_sft_command_takes_a_recipe_and_its_flags_override_it():
    from openmanus_lite.cli.sft import parse, settings, synth_recipe

    args, extras = parse(["--recipe", "cpu_30min", "--learning_rate", "5e-4"])
    preset, cfg = settings(args, extras)
    assert preset.name == "cpu" and preset.lora.r == 16
    assert cfg == get_recipe("cpu_30min").sft_config(learning_rate=5e-4)
    r = synth_recipe(args)
    assert r.tasks_per_domain == 250 and r.recovery == 1 and r.recovery_repeats == (1, 2)
    args, _ = parse(["--recipe", "cpu_60min", "--synth", "3", "--domains", "os,web", "--recovery", "0"])
    assert synth_recipe(args).task_counts() == {"os": 3, "web": 6} and synth_recipe(args).recovery == 0
    args, _ = parse(["--recipe", "cpu_60min", "--difficulty", "medium"])  # one level: the flag's
    assert synth_recipe(args).levels() == {"medium": 1.0}
    args, _ = parse(["--synth", "2"])  # no recipe: the plain sft_train split, no recovery
    assert synth_recipe(args).task_counts()["os"] == 2 and synth_recipe(parse(["--data", "x"])[0]) is None


def test_sft_command_trains_a_recipe_on_the_debug_preset(tmp_path, monkeypatch):
    import openmanus_lite.paths as paths
    from openmanus_lite.cli import main

    monkeypatch.setattr(paths, "CACHE_DIR", tmp_path / "cache")
    out = tmp_path / "run"
    code = main(["sft", "--recipe", "cpu_30min", "--preset", "cpu_debug", "--synth", "2", "--domains", "os,household",
                 "--max_minutes", "0.2", "--max_steps", "2", "--max_length", "512", "--output_dir", str(out),
                 "--no_progress", "--save", "merged"])
    assert code == 0
    report = json.loads((out / "data_report.json").read_text())
    assert report["records_in"] > 2 + 6  # 2 os + 6 household (tripled) expert episodes and recovery episodes
    with pytest.raises(SystemExit):
        main(["sft", "--recipe", "cpu_90min"])  # argparse names the choices


@pytest.mark.parametrize("cuda, name", [(True, "t4"), (False, "cpu_30min")])
def test_notebook_04_default_recipe_follows_cuda(monkeypatch, cuda, name):
    torch = pytest.importorskip("torch")
    from openmanus_lite.recipes import default_recipe_name

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    assert default_recipe_name() == name


def test_demo_trains_the_30_minute_recipe_on_tasks_apart_from_its_evaluation():
    from openmanus_lite.demo import DemoConfig, _eval_suite, training_budget
    from openmanus_lite.splits import check_disjoint

    cfg = DemoConfig()
    r = cfg.sft_recipe()
    assert r == get_recipe("cpu_30min").replace(domains=cfg.domains)  # the recipe as it is, all six domains
    assert (r.split, r.max_minutes, r.recovery) == ("sft_train", 30.0, 1)
    # its training tasks (a few per domain; the split drops every held-out task) miss the demo's dev tasks
    tasks, _ = recipe_tasks(r.replace(tasks_per_domain=40))
    check_disjoint({r.split: tasks}, {"dev": _eval_suite(cfg).tasks})
    assert len(_eval_suite(cfg).tasks) == 60  # 10 easy dev tasks per domain
    assert cfg.planned_minutes() == {"prepare": 1.0, "eval_untrained": 2.5, "sft": 30.0, "eval_sft": 2.0,
                                     "grpo": 6.0, "eval_grpo": 2.0}
    # 2 minutes spent on preparing and the untrained evaluation, decoding at 150 tokens/s: the 45 minutes hold the
    # whole recipe
    budget = training_budget(cfg, 2 * 60, 150.0)
    assert cfg.total_minutes == 45 and (budget["sft"], budget["grpo"]) == (30.0, 6.0)
    quick = DemoConfig.quick().sft_recipe()
    assert (quick.preset, quick.tasks_per_domain, quick.max_minutes, quick.max_turns()) == ("cpu_debug", 12, 0.6, 3)

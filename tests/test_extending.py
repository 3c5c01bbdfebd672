"""docs/EXTENDING.md's examples run as written: a new environment, a reward (registered and by import path)
and a recipe, each checked the way the kit's own are."""

import contextlib
import io
import re
import sys
import types
from pathlib import Path

import pytest

from openmanus_lite import react, rewards
from openmanus_lite.envs import base as envbase
from openmanus_lite.envs import generate_tasks, list_domains, make_env
from openmanus_lite.rewards import registry

DOC = Path(__file__).resolve().parents[1] / "docs" / "EXTENDING.md"


def blocks(section: str) -> list[str]:
    """The ```python blocks of the `## section` of EXTENDING.md, in order."""
    text = DOC.read_text().split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", text, re.DOTALL)


def run(code: str, scope: dict | None = None) -> tuple[dict, str]:
    scope = {"__name__": "extending_example"} if scope is None else scope
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(DOC), "exec"), scope)
    return scope, out.getvalue()


@pytest.fixture
def counter():
    """The page's counter domain, registered for one test and removed after it."""
    list_domains()  # the kit's own domains first
    define, _use = blocks("An environment")
    try:
        scope, _ = run(define)
        yield scope
    finally:
        for table in (react.ACTION_FORMS, react.DOMAIN_ACTION_KINDS, envbase._REGISTRY):
            table.pop("counter", None)


def test_the_page_has_its_examples():
    assert [len(blocks(s)) for s in ("An environment", "A reward", "A recipe")] == [2, 2, 1]


def test_environment_example_runs_and_behaves_like_a_kit_domain(counter):
    _, use = blocks("An environment")
    scope, printed = run(use, dict(counter))
    assert "Act: add <n>, Act: subtract <n> or Act: answer(<value>)" in printed
    assert "Unknown command. Use: add <n> or subtract <n>" in printed
    assert len(scope["train"]) + scope["dropped"] == 32 and all(t.meta["success"] for t in scope["episodes"])
    assert len(scope["sft_data"]) == 50 and all(t.meta["success"] for t in scope["sft_data"])
    # the checks tests/test_envs_core.py makes of every kit domain
    for difficulty in ("easy", "medium", "hard"):
        a = [t.to_json() for t in generate_tasks("counter", 8, seed=11, difficulty=difficulty)]
        assert a == [t.to_json() for t in generate_tasks("counter", 8, seed=11, difficulty=difficulty)]
        assert a != [t.to_json() for t in generate_tasks("counter", 8, seed=12, difficulty=difficulty)]
    env = make_env("counter", max_turns=4)
    env.reset(generate_tasks("counter", 1)[0])
    for text in ("", "I think I will do something", "Act: ", "Think: hmm\nAct: ```python\nprint(1)\n```"):
        step = env.step(text)
        assert not step.info["valid"] and step.observation.strip() and step.reward == 0.0
    assert step.done and "Turn limit reached" in step.observation
    env = make_env("counter")
    env.reset(generate_tasks("counter", 1)[0])
    twin = env.clone()
    env.step(env.expert_action())
    assert twin.value == 0 and twin.turn == 0
    from openmanus_lite import RandomPolicy, run_benchmark
    tasks = generate_tasks("counter", 30, seed=2)
    assert run_benchmark(RandomPolicy(1), tasks, progress=False).success_rate() < 0.1
    # a recipe narrowed to the new domain builds expert and recovery data for it
    from openmanus_lite.recipes import get_recipe, recipe_trajectories
    trajs, info = recipe_trajectories(get_recipe("cpu_30min").replace(domains=("counter",), tasks_per_domain=4))
    assert info["expert"] == 4 + 1 and info["recovery"] >= 2, info  # 4 easy tasks and a quarter as many medium
    assert {t.domain for t in trajs} == {"counter"}


def test_registered_reward_example():
    registered, _ = blocks("A reward")
    try:
        scope, printed = run(registered)
        assert scope["short_turns"](None, ["Think: ok.\nAct: answer(1)", "Think: " + "hm " * 200]) == [1.0, 0.0]
        assert scope["weights"] == [1.0, 0.25] and [f.__name__ for f in scope["funcs"]] == ["env_outcome", "short_turns"]
        assert "short_turns" in printed and "react_format" in printed
        with pytest.raises(ValueError, match="reward 'env_outcome' needs column 'env_outcome'"):
            rewards.check_reward_columns("env_outcome short_turns:0.25", ["prompt", "task"])
    finally:
        registry._REGISTRY.pop("short_turns", None)


def test_reward_by_import_path_example(tmp_path, monkeypatch):
    _, module = blocks("A reward")
    assert module.startswith("# my_rewards.py\n")
    (tmp_path / "my_rewards.py").write_text(module)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_rewards", raising=False)  # test_cli_conventions imports its own my_rewards
    try:
        funcs, weights = rewards.build_rewards("env_outcome my_rewards:no_repeats:0.25")
        assert weights == [1.0, 0.25]
        turn = {"role": "assistant", "content": "Think: x\nAct: look"}
        obs = {"role": "user", "content": "Nothing happens."}
        assert funcs[1](None, [[turn, obs, turn], [turn], "a plain string"]) == [0.0, 1.0, 1.0]
        assert rewards.describe_rewards("my_rewards:no_repeats")[0]["range"] == (0.0, 1.0)
        cmd = DOC.read_text().split("--reward_funcs env_outcome my_rewards:no_repeats:0.25")
        assert len(cmd) == 2 and "grpo --mode multi" in cmd[0].rsplit("python -m openmanus_lite", 1)[1]
    finally:
        registry._IMPORTED.pop("my_rewards:no_repeats", None)
        sys.modules.pop("my_rewards", None)


def test_recipe_example(monkeypatch):
    from openmanus_lite import recipes
    from openmanus_lite.cli.sft import parse, settings

    (code,) = blocks("A recipe")
    name = "openmanus_lite.recipes.cpu_15min_db"
    module = types.ModuleType(name)
    module.__package__ = "openmanus_lite.recipes"
    monkeypatch.setitem(sys.modules, name, module)
    run(code, module.__dict__)
    monkeypatch.setattr(recipes, "RECIPE_MODULES", recipes.RECIPE_MODULES + ("cpu_15min_db",))
    r = recipes.get_recipe("cpu_15min_db")
    assert r.name == "cpu_15min_db" and r.task_counts() == {"db": 250, "os": 250}
    cfg = r.sft_config()
    assert (cfg.cosine_by_time, cfg.max_minutes, cfg.mark_minutes) == (True, 15.0, [15.0])
    args, extras = parse(["--recipe", "cpu_15min_db", "--preset", "cpu_debug"])
    preset, cfg = settings(args, extras)
    assert preset.name == "cpu_debug" and cfg.max_minutes == 15.0


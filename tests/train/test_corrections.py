"""The expert's corrections at a model's own mistakes (experimental.corrections): what is trained and what is not."""

from __future__ import annotations

from openmanus_lite.envs import generate_tasks, make_env
from openmanus_lite.experimental.corrections import correction_trajectories, cut_points
from openmanus_lite.mistakes import label_step_values
from openmanus_lite.react import format_turn
from openmanus_lite.rollout import run_episodes
from openmanus_lite.schema import Turn
from openmanus_lite.train.recovery import RECOVERY_NOTE

LIMIT = 16


class SlipsOnce:
    """The expert, except that at its second turn it repeats a failing action twice (a model's loop)."""

    name = "slips"

    def act_batch(self, histories, envs):
        out = []
        for history, env in zip(histories, envs):
            turn = sum(m["role"] == "assistant" for m in history)
            out.append(format_turn("I take the thing.", "take nothing 9 from nowhere 9") if turn in (1, 2)
                       else env.expert_action())
        return out


def test_corrections_train_the_expert_after_the_models_own_turns():
    tasks = generate_tasks("household", 6, seed=3)
    episodes = run_episodes(SlipsOnce(), tasks, max_turns=LIMIT, progress=False)
    fixes, counts = correction_trajectories(episodes, tasks, LIMIT, per_episode=2)
    assert counts["episodes"] == 6 and counts["clean"] == 0 and counts["kept"] == len(fixes) == 12
    by_id = {t.id: t for t in tasks}
    for fix in fixes:
        model_turns = [m for m in episodes[tasks.index(by_id[fix.meta["task_id"]])].messages if m.role == "assistant"]
        assistant = [m for m in fix.messages if m.role == "assistant"]
        cut = fix.meta["corrected_turn"]
        assert cut in (1, 2) and fix.meta["rejected"]
        # the model's turns up to the cut are context, word for word; everything after is the expert's and trains
        assert [m.content for m in assistant[: cut + 1]] == [m.content for m in model_turns[: cut + 1]]
        assert [m.train for m in assistant] == [False] * (cut + 1) + [True] * (len(assistant) - cut - 1)
        assert assistant[cut + 1].content.startswith(f"Think: {RECOVERY_NOTE} ")
        # the data is what the environment said, and the expert finishes the task
        env = make_env("household", max_turns=LIMIT)
        assert env.reset(by_id[fix.meta["task_id"]]) == fix.messages[0].content
        for m, obs in zip(fix.messages[1::2], fix.messages[2::2]):
            assert env.step(m.content).observation == obs.content
        assert env.step(fix.messages[-1].content).info["success"]


def test_an_expert_episode_has_nothing_to_correct_and_a_wasted_turn_is_a_cut_point():
    tasks = generate_tasks("household", 3, seed=4)
    expert = run_episodes("expert", tasks, max_turns=LIMIT, progress=False)
    assert correction_trajectories(expert, tasks, LIMIT)[1] == {"episodes": 3, "clean": 3, "replay_mismatch": 0,
                                                               "unfinished": 0, "kept": 0}
    slipped = run_episodes(SlipsOnce(), tasks[:1], max_turns=LIMIT, progress=False)[0]
    label_step_values(tasks[0], slipped, LIMIT)
    assert cut_points(slipped, 1) == [1] and cut_points(slipped, 5) == [1, 2]


def test_an_episode_that_does_not_replay_is_counted_not_used():
    tasks = generate_tasks("household", 2, seed=4)
    episodes = run_episodes(SlipsOnce(), tasks, max_turns=LIMIT, progress=False)
    episodes[0].messages[2] = Turn("user", "an observation the environment never gave", False)
    fixes, counts = correction_trajectories(episodes, tasks, LIMIT, per_episode=1)
    assert counts["replay_mismatch"] == 1 and counts["kept"] == len(fixes) == 1
    assert fixes[0].meta["task_id"] == tasks[1].id


def _fresh_import(monkeypatch):
    """Import openmanus_lite.experimental as a first import would, twice; the warnings it gave."""
    import importlib
    import sys
    import warnings

    for name in ("openmanus_lite.experimental", "openmanus_lite.experimental.corrections"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module("openmanus_lite.experimental.corrections")
        importlib.import_module("openmanus_lite.experimental")  # already imported: no second warning
    return [w for w in caught if issubclass(w.category, sys.modules["openmanus_lite.experimental"].
                                            OpenManusExperimentalWarning)], module


def test_importing_experimental_warns_once_and_the_env_var_silences_it(monkeypatch):
    monkeypatch.delenv("OPENMANUS_LITE_EXPERIMENTAL_SILENCE", raising=False)
    warned, module = _fresh_import(monkeypatch)
    assert len(warned) == 1 and issubclass(warned[0].category, UserWarning)
    assert "measured no gain" in str(warned[0].message) and "OPENMANUS_LITE_EXPERIMENTAL_SILENCE=1" in str(
        warned[0].message)
    assert callable(module.correction_trajectories)
    monkeypatch.setenv("OPENMANUS_LITE_EXPERIMENTAL_SILENCE", "1")
    assert _fresh_import(monkeypatch)[0] == []


def test_the_library_itself_never_imports_experimental():
    import re
    from pathlib import Path

    import openmanus_lite

    root = Path(openmanus_lite.__file__).parent
    users = [str(p.relative_to(root)) for p in root.rglob("*.py") if "experimental" not in p.relative_to(root).parts
             and re.search(r"openmanus_lite\.experimental|from \.+experimental", p.read_text(encoding="utf-8"))]
    assert users == []

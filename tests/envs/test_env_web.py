"""The web environment: generated site, navigation, search, form, answers, expert and baselines."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safe_steps import assert_safe_step, assert_safe_steps

from openmanus_lite.envs import generate_tasks, make_env, run_expert
from openmanus_lite.envs.web import TASK_KINDS, expert_cost, normalize, site
from openmanus_lite.react import format_turn
from openmanus_lite.schema import Task

DIFFICULTIES = ("easy", "medium", "hard")


def act(env, action: str):
    return env.step(format_turn("test", action))


def find(tasks, kind):
    return next(t for t in tasks if t.meta["task_kind"] == kind)


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_expert_solves_every_task_in_the_predicted_number_of_turns(difficulty):
    for task in generate_tasks("web", 300, seed=0, difficulty=difficulty):
        env = make_env("web")
        _, last = run_expert(env, task)
        assert last.info["success"], task.to_dict()
        assert env.invalid_actions == 0
        s = site(task.spec["site"]["seed"], difficulty)
        assert env.turn == expert_cost(s, task.spec) <= env.max_turns


def test_task_kinds_and_depth_grow_with_difficulty():
    tasks = {d: generate_tasks("web", 300, seed=1, difficulty=d) for d in DIFFICULTIES}
    assert {t.meta["task_kind"] for t in tasks["hard"]} == set(TASK_KINDS)
    depth = {}
    for d, ts in tasks.items():
        facts = [t for t in ts if t.meta["task_kind"] == "fact"]
        s = site(facts[0].spec["site"]["seed"], d)
        depth[d] = s.route("home", facts[0].spec["waypoints"][0])[1]
    assert depth == {"easy": 2, "medium": 3, "hard": 4}
    pages = {d: len(site(0, d).pages) for d in DIFFICULTIES}
    assert pages["easy"] < pages["medium"] < pages["hard"]


def test_generation_is_deterministic_and_round_trips():
    a = generate_tasks("web", 30, seed=5, difficulty="medium")
    assert [t.to_dict() for t in a] == [t.to_dict() for t in generate_tasks("web", 30, seed=5, difficulty="medium")]
    assert [t.instruction for t in a] != [t.instruction for t in generate_tasks("web", 30, seed=6, difficulty="medium")]
    for t in a[:5]:
        assert make_env("web").reset(Task.from_dict(t.to_dict())) == make_env("web").reset(t)


def test_navigation_back_and_answer():
    task = find(generate_tasks("web", 50, seed=0, difficulty="medium"), "fact")
    env = make_env("web")
    first = env.reset(task)
    assert "== Home ==" in first and "Links: [Wiki] [Forum] [Directory] [Contact]" in first
    assert "== Wiki ==" in act(env, "click[Wiki]").observation
    assert "== Towns ==" in act(env, "click[towns]").observation  # link names are case-insensitive
    bad = act(env, "click[Nowhere]")
    assert not bad.info["valid"] and "no link named" in bad.observation
    assert "== Wiki ==" in env.step("Think: back up.\nAct: back").observation  # plain `back` works
    assert "== Home ==" in act(env, "back[]").observation
    assert not act(env, "back[]").info["valid"]  # nothing left to go back to
    wrong = act(env, "answer(definitely not it)")
    assert wrong.done and wrong.reward == 0.0 and not wrong.info["success"]


def test_answers_are_compared_leniently_but_exactly():
    assert normalize("12,400") == normalize("12400")
    assert normalize(" The Library. ") == normalize("the library")
    assert normalize("110 km") == normalize("110")
    assert normalize("Ada Brook") != normalize("Ada Brooks")
    task = find(generate_tasks("web", 50, seed=0, difficulty="easy"), "fact")
    env = make_env("web")
    env.reset(task)
    assert act(env, f"answer({task.answer.upper()})").info["success"]


def test_form_is_checked_on_the_submitted_values():
    task = find(generate_tasks("web", 80, seed=0, difficulty="easy"), "form")
    want = task.spec["form"]
    env = make_env("web")
    env.reset(task)
    assert not act(env, "type[name][Ada]").info["valid"]  # no form on the home page
    act(env, "click[Contact]")
    assert "Form fields: name = ''" in env._render()
    assert "fill in: name, email, department, subject" in act(env, "click[Submit]").observation
    assert not act(env, "type[age][30]").info["valid"]
    for field, value in want.items():
        step = act(env, f"type[{field}][{value if field != 'subject' else 'Wrong subject'}]")
        assert step.info["valid"] and f"{field} = '" in step.observation
    step = act(env, "click[Submit]")
    assert step.done and step.reward == 0.0 and "message was sent" in step.observation
    env.reset(task)
    act(env, "click[Contact]")
    for field, value in want.items():
        act(env, f"type[{field}] [{value.lower()}]")
    assert act(env, "click[Submit]").info["success"]


def test_search_box_finds_forum_threads():
    task = find(generate_tasks("web", 80, seed=0, difficulty="hard"), "forum")
    env = make_env("web")
    env.reset(task)
    title = task.spec["waypoints"][0][2:]
    results = act(env, f"search[{title}]").observation
    assert results.startswith("== Search results ==") and f"[{title}]" in results.split("\n")[1]
    assert f"== {title} ==" in act(env, f"click[{title}]").observation
    assert act(env, "click[Home]").info["valid"] and act(env, "click[Wiki]").info["valid"]
    assert "no search box" in act(env, "search[anything]").observation


def test_clone_is_independent():
    task = generate_tasks("web", 1, seed=0, difficulty="hard")[0]
    env = make_env("web")
    env.reset(task)
    act(env, "click[Wiki]")
    twin = env.clone()
    act(twin, "click[Home]")
    act(twin, "click[Contact]")
    act(twin, "type[name][Zed]")
    assert env.page == "wiki" and env.fields["name"] == "" and twin.fields["name"] == "Zed"
    assert twin.site is env.site
    start = time.perf_counter()
    for _ in range(1000):
        env.clone()
    assert time.perf_counter() - start < 1.0


FUZZ_TASK = generate_tasks("web", 1, seed=3, difficulty="hard")[0]
_replies = st.one_of(
    st.text(max_size=300),
    st.builds(lambda n, a: format_turn("fuzz", f"{n}[{a}]"),
              st.sampled_from(["click", "search", "type", "back", "answer", "Click"]),
              st.text(max_size=80) | st.sampled_from(["Home", "Wiki", "Contact", "Submit", "name][x", "]["])),
    st.sampled_from(["Act: back", "Act: back()", "Action: go back", "Act: answer()", "Act: type[][]", "Act:"]),
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(replies=st.lists(_replies, min_size=1, max_size=6))
def test_fuzzed_steps_never_raise_and_stay_fast(replies):
    env = make_env("web")
    env.reset(FUZZ_TASK)
    env.step(format_turn("go", "click[Contact]"))
    assert_safe_steps(env, replies)


@pytest.mark.parametrize("reply", ["Act: search[" + "meetup " * 200_000 + "]", "Act: type[name][" + "x" * 1_000_000 + "]",
                                   "Act: back" + " " * 1_000_000, "back " * 400_000])
def test_huge_inputs_are_answered_quickly(reply):
    env = make_env("web")
    env.reset(generate_tasks("web", 1, seed=0, difficulty="easy")[0])
    act(env, "click[Contact]")
    assert_safe_step(env, reply)

"""The household environment: ALFWorld-style commands and observations, generator, expert, baselines."""

from __future__ import annotations

import copy
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safe_steps import assert_safe_step, assert_safe_steps

from openmanus_lite.envs import generate_tasks, make_env, run_expert
from openmanus_lite.envs.household import TASK_TYPES, Command, expert_cost, parse_command
from openmanus_lite.react import format_turn
from openmanus_lite.schema import Task

DIFFICULTIES = ("easy", "medium", "hard")


def act(env, command: str):
    return env.step(format_turn("test", command))


def kitchen_task(goal_type: str = "pick_heat_then_place", target: str = "countertop") -> Task:
    spec = {
        "room": "kitchen",
        "receptacles": ["countertop 1", "cabinet 1", "cabinet 2", "fridge 1", "microwave 1", "sinkbasin 1",
                        "garbagecan 1", "diningtable 1", "desk 1"],
        "closed": ["cabinet 2", "fridge 1", "microwave 1"],
        "objects": {"mug 1": "cabinet 2", "apple 1": "diningtable 1", "mug 2": "diningtable 1",
                    "desklamp 1": "desk 1", "knife 1": "countertop 1"},
        "goal": {"type": goal_type, "object": "mug", "target": target},
        "max_turns": 30,
    }
    return Task(id="household/test/0", domain="household", instruction="heat some mug and put it on countertop.",
                spec=spec)


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_expert_solves_every_task_in_the_predicted_number_of_turns(difficulty):
    tasks = generate_tasks("household", 300, seed=0, difficulty=difficulty)
    for task in tasks:
        env = make_env("household")
        _, last = run_expert(env, task)
        assert last.info["success"], (task.id, task.spec)
        assert env.invalid_actions == 0
        assert env.turn == expert_cost(task.spec) <= env.max_turns


def test_all_task_types_and_rooms_are_generated():
    tasks = [t for d in DIFFICULTIES for t in generate_tasks("household", 300, seed=1, difficulty=d)]
    assert {t.meta["task_type"] for t in tasks} == set(TASK_TYPES)
    assert {t.meta["room"] for t in tasks} == {"kitchen", "livingroom", "bedroom", "bathroom"}
    sizes = {d: sum(len(t.spec["receptacles"]) for t in generate_tasks("household", 100, difficulty=d)) for d in
             DIFFICULTIES}
    assert sizes["easy"] < sizes["medium"] < sizes["hard"]


def test_generation_is_deterministic_and_round_trips():
    a = generate_tasks("household", 20, seed=5, difficulty="medium")
    b = generate_tasks("household", 20, seed=5, difficulty="medium")
    assert [t.to_dict() for t in a] == [t.to_dict() for t in b]
    assert [t.to_dict() for t in a] != [t.to_dict() for t in generate_tasks("household", 20, seed=6,
                                                                            difficulty="medium")]
    for t in a:
        again = Task.from_dict(t.to_dict())
        assert make_env("household").reset(again) == make_env("household").reset(t)


def test_alfworld_observations_and_commands():
    env = make_env("household")
    first = env.reset(kitchen_task())
    assert "You are in the middle of a room. Looking quickly around you, you see a countertop 1, a cabinet 1" in first
    assert "Task: heat some mug and put it on countertop." in first
    assert "You have 30 turns." in first
    assert act(env, "go to diningtable 1").observation == "On the diningtable 1, you see a apple 1, and a mug 2."
    assert act(env, "take mug 2 from diningtable 1").observation == "You pick up the mug 2 from the diningtable 1."
    assert act(env, "inventory").observation == "You are carrying: a mug 2."
    step = act(env, "take apple 1 from diningtable 1")
    assert step.observation.startswith("Nothing happens.") and not step.info["valid"]
    assert act(env, "go to microwave 1").observation == "The microwave 1 is closed."
    assert act(env, "open microwave 1").observation == "You open the microwave 1. The microwave 1 is open. In it, you see nothing."
    assert act(env, "heat mug 2 with microwave 1").observation == "You heat the mug 2 using the microwave 1."
    assert act(env, "examine mug 2").observation == "This is a hot mug 2."
    assert act(env, "go to countertop 1").observation == "On the countertop 1, you see a knife 1."
    step = act(env, "put mug 2 in/on countertop 1")
    assert step.observation == "You put the mug 2 in/on the countertop 1."
    assert step.done and step.reward == 1.0 and step.info["success"]


def test_invalid_commands_explain_what_went_wrong():
    env = make_env("household")
    env.reset(kitchen_task())
    cases = {
        "open cabinet 2": "go to cabinet 2 first",
        "go to mug 1": "only go to a receptacle",
        "dance wildly": "Valid commands",
        "take mug 7 from cabinet 1": "There is no mug 7",
        "put mug 1 in/on countertop 1": "hold the mug 1 first",
        "use knife 1": "cannot be used",
        "go to cabinet": "Which cabinet",
    }
    for command, hint in cases.items():
        step = act(env, command)
        assert step.observation.startswith("Nothing happens."), command
        assert hint in step.observation, (command, step.observation)
        assert not step.info["valid"] and not step.done
    act(env, "go to cabinet 2")
    assert "closed; open it first" in act(env, "take mug 1 from cabinet 2").observation
    assert act(env, "open cabinet 2").info["valid"] and act(env, "take mug 1 from cabinet 2").info["valid"]
    assert "use a sinkbasin" in act(env, "clean mug 1 with cabinet 2").observation


def test_cool_heat_clean_and_goal_needs_the_treatment():
    env = make_env("household")
    env.reset(kitchen_task("pick_cool_then_place", "countertop"))
    for c in ("go to diningtable 1", "take mug 2 from diningtable 1", "go to countertop 1"):
        act(env, c)
    step = act(env, "put mug 2 in/on countertop 1")
    assert not step.done  # an untreated mug does not count
    for c in ("take mug 2 from countertop 1", "go to fridge 1", "cool mug 2 with fridge 1", "go to countertop 1"):
        assert act(env, c).info["valid"], c
    assert act(env, "put mug 2 on countertop 1").info["success"]


def test_look_at_object_in_light():
    env = make_env("household")
    env.reset(kitchen_task("look_at_obj_in_light", "desklamp"))
    for c in ("go to diningtable 1", "take mug 2 from diningtable 1", "go to desk 1"):
        assert not act(env, c).done
    step = act(env, "use desklamp 1")
    assert step.observation == "You turn on the desklamp 1." and step.info["success"]


def test_expert_lamp_search_lists_the_lamp_places_left():
    """Like the object search, the lamp search restates what was ruled out and which places are left, in
    words that name the lamp, so that the model does not mix the two lists up."""
    spec = {
        "room": "bedroom",
        "receptacles": ["bed 1", "sidetable 1", "dresser 1", "drawer 1", "desk 1"],
        "closed": ["drawer 1"],
        "objects": {"cellphone 1": "bed 1", "desklamp 1": "desk 1", "pen 1": "dresser 1"},
        "goal": {"type": "look_at_obj_in_light", "object": "cellphone", "target": "desklamp"},
        "max_turns": 30,
    }
    task = Task(id="household/test/1", domain="household", instruction="look at cellphone under the desklamp.",
                spec=spec)
    messages, last = run_expert(make_env("household"), task)
    assert last.info["success"]
    assert [m["content"] for m in messages if m["role"] == "assistant"] == [
        "Think: I need a cellphone. Still to check: bed 1, desk 1, sidetable 1, dresser 1, drawer 1.\n"
        "Act: go to bed 1",
        "Think: There is the cellphone 1. I will take it.\nAct: take cellphone 1 from bed 1",
        "Think: I have the cellphone 1. Now I need the desklamp. The desklamp may be on: sidetable 1, dresser 1, "
        "desk 1.\nAct: go to sidetable 1",
        "Think: I have the cellphone 1. No desklamp at the sidetable 1. The desklamp may be on: dresser 1, desk 1.\n"
        "Act: go to dresser 1",
        "Think: I have the cellphone 1. No desklamp at the dresser 1. The desklamp may be on: desk 1.\n"
        "Act: go to desk 1",
        "Think: I will turn on the desklamp 1 to look at the cellphone 1.\nAct: use desklamp 1",
    ]


def test_pick_two_needs_both_in_one_receptacle():
    env = make_env("household")
    env.reset(kitchen_task("pick_two_obj_and_place", "countertop"))
    for c in ("go to diningtable 1", "take mug 2 from diningtable 1", "go to countertop 1", "put mug 2 in/on countertop 1",
              "go to cabinet 2", "open cabinet 2", "take mug 1 from cabinet 2", "go to countertop 1"):
        step = act(env, c)
        assert step.info["valid"] and not step.done, c
    assert act(env, "put mug 1 in/on countertop 1").info["success"]


def test_parser_accepts_alfworld_command_forms():
    assert parse_command("go to desk 1") == Command("go", "desk 1")
    assert parse_command("take alarmclock 1 from desk 1") == Command("take", "alarmclock 1", "desk 1")
    assert parse_command("put laptop 1 in/on bed 1") == Command("put", "laptop 1", "bed 1")
    assert parse_command("put laptop 1 in bed 1") == Command("put", "laptop 1", "bed 1")
    assert parse_command("heat plate 1 with microwave 1") == Command("heat", "plate 1", "microwave 1")
    assert parse_command("use desklamp 1") == Command("use", "desklamp 1")
    assert parse_command("Go to the Fridge 1.") == Command("go", "fridge 1")
    assert parse_command("inventory") == Command("inventory")
    assert isinstance(parse_command("fly to the moon"), str)


def test_clone_is_independent_and_cheap():
    env = make_env("household")
    env.reset(kitchen_task())
    act(env, "go to diningtable 1")
    twin = env.clone()
    act(twin, "take mug 2 from diningtable 1")
    assert act(env, "inventory").observation == "You are not carrying anything."
    assert act(twin, "inventory").observation == "You are carrying: a mug 2."
    assert env.turn == 2 and twin.turn == 3
    deep = copy.deepcopy(twin)
    act(deep, "go to microwave 1")
    assert twin.loc == "diningtable 1"
    start = time.perf_counter()
    for _ in range(1000):
        env.clone()
    assert time.perf_counter() - start < 1.0


_verbs = st.sampled_from(["go to", "open", "close", "take", "put", "use", "examine", "heat", "clean", "cool", ""])
_names = st.text(max_size=40) | st.sampled_from(["desk 1", "mug 2", "fridge", "cabinet 99", "in/on", "from"])
_commands = st.builds(lambda v, a, b, sep: f"{v} {a}{sep}{b}", _verbs, _names, _names,
                      st.sampled_from([" from ", " in/on ", " with ", " "]))
FUZZ_TASK = generate_tasks("household", 1, seed=3, difficulty="hard")[0]
_replies = st.one_of(
    st.text(max_size=300),
    _commands.map(lambda c: format_turn("fuzz", c)),
    st.builds(lambda t, c: f"{t}\nAct: {c}", st.text(max_size=50), st.text(max_size=200)),
    st.sampled_from(["Act:", "Act: answer()", "ACTION: go to desk 1", "Think:\nAct: ```bash\nls\n```", "\x00\n\t"]),
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(replies=st.lists(_replies, min_size=1, max_size=6))
def test_fuzzed_steps_never_raise_and_stay_fast(replies):
    env = make_env("household")
    env.reset(FUZZ_TASK)
    assert_safe_steps(env, replies)


@pytest.mark.parametrize("reply", ["Act: go to " + "x" * 1_000_000, "Act: " + "take a from b " * 50_000,
                                   "x" * 2_000_000, "Think: " + "\n" * 100_000 + "Act: look"])
def test_huge_inputs_are_answered_quickly(reply):
    env = make_env("household")
    env.reset(kitchen_task())
    assert_safe_step(env, reply)

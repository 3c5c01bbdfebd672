"""Preference data from rollouts: divergence, judging, pair formats, injected mistakes, step labels.

Most cases use a toy counting environment (registered under the extra label 'game') whose
episodes are short and fully predictable, so every expected pair and label is written out
by hand; a few run on the real household and e-commerce environments.
"""

from __future__ import annotations

import importlib
import random
import sys

import pytest

from openmanus_lite import mistakes as M
from openmanus_lite.envs import Env, InvalidAction, generate_tasks, list_domains, make_env, register_domain
from openmanus_lite.preference import pairs as P
from openmanus_lite.react import format_turn
from openmanus_lite.rollout import start_episode
from openmanus_lite.schema import Task, Trajectory, Turn

# --------------------------------------------------------------------------- a toy environment


class CounterEnv(Env):
    """Reach the target with `inc` / `dec`, then `answer(<target>)`. Wrong answers end the episode at 0."""

    domain = "game"
    max_turns = 6

    def first_message(self) -> str:
        return f"Count from 0. Act: inc, dec or answer(<n>). You have {self.max_turns} turns.\nTask: {self.task.instruction}"

    def _setup(self, task: Task) -> None:
        self.target = int(task.spec["target"])
        self.count = 0

    def _execute(self, action) -> str:
        if action.kind != "command" or action.arg not in ("inc", "dec"):
            raise InvalidAction("Use inc, dec or answer(<n>).")
        self.count += 1 if action.arg == "inc" else -1
        return f"count = {self.count}"

    def _score(self, answer_text):
        return 1.0 if (answer_text or "").strip() == str(self.target) else 0.0

    def expert_action(self) -> str:
        if self.count < self.target:
            return format_turn(f"{self.count} is below {self.target}.", "inc")
        if self.count > self.target:
            return format_turn(f"{self.count} is above {self.target}.", "dec")
        return format_turn("Reached it.", f"answer({self.count})")

    def random_action(self, rng: random.Random) -> str:
        return format_turn("I will try this.", rng.choice(["inc", "dec", "dec", "answer(7)"]))


def _generate(rng: random.Random, difficulty: str, index: int) -> Task:
    target = 2 if difficulty == "easy" else 3
    return Task(id=f"count-{index}" if difficulty == "easy" else f"count-{difficulty}-{index}", domain="game", instruction=f"reach {target}", spec={"target": target},
                answer=str(target), difficulty=difficulty)


register_domain("game", CounterEnv, _generate)


def play(task: Task, actions: list[str], source: str = "hand", thoughts: list[str] | None = None) -> Trajectory:
    """An episode with the given actions (then nothing: the caller makes sure it ends)."""
    env = make_env(task.domain)
    messages = [Turn("user", env.reset(task))]
    for i, act in enumerate(actions):
        text = format_turn(thoughts[i] if thoughts else "ok", act) if not act.startswith("RAW:") else act[4:]
        messages.append(Turn("assistant", text, True))
        step = env.step(text)
        if not step.done:
            messages.append(Turn("user", step.observation))
    info = env.last_info
    return Trajectory(id=f"{source}/{task.id}/{len(actions)}", source=source, domain=task.domain, messages=messages,
                      meta={"task_id": task.id, "success": bool(info.get("success")), "score": info.get("score", 0.0),
                            "turns": env.turn, "invalid_actions": env.invalid_actions, "max_turns": env.max_turns})


TASK = _generate(random.Random(0), "easy", 0)  # target 2, 6 turns


# --------------------------------------------------------------------------- divergence and judging


def test_first_divergence_ignores_thought_wording_and_finds_the_action():
    a = play(TASK, ["inc", "inc", "answer(2)"], thoughts=["go up", "again", "done"])
    b = play(TASK, ["inc", "dec", "inc", "inc", "answer(2)"], thoughts=["different words", "x", "y", "z", "w"])
    d, why = P.first_divergence(a, b)
    assert (d, why) == (3, "diverged")  # messages: user, assistant(inc), user(count=1), assistant <- here
    assert a.messages[d].role == "assistant" and "inc" in a.messages[d].content and "dec" in b.messages[d].content
    assert P.first_divergence(a, a) == (None, "same_actions")


def test_first_divergence_refuses_episodes_whose_observations_disagree():
    a = play(TASK, ["inc", "inc", "answer(2)"])
    other = play(Task("count-0", "game", "reach 3", {"target": 3}), ["inc", "inc", "answer(2)"])
    assert P.first_divergence(a, other) == (None, "observation_mismatch")


def test_compare_episodes_outcome_then_efficiency_and_never_between_failures():
    good = play(TASK, ["inc", "inc", "answer(2)"])
    slow = play(TASK, ["inc", "dec", "inc", "inc", "answer(2)"])
    wrong = play(TASK, ["inc", "answer(1)"])
    wrong2 = play(TASK, ["dec", "answer(5)"])
    assert good.meta["success"] and slow.meta["success"] and not wrong.meta["success"]
    assert P.compare_episodes(good, wrong) == (1, "outcome")
    assert P.compare_episodes(wrong, good) == (-1, "outcome")
    assert P.compare_episodes(slow, good) == (-1, "efficiency")
    assert P.compare_episodes(slow, good, tie_break="none") == (0, "tie")
    assert P.compare_episodes(wrong, wrong2) == (0, "tie")


# --------------------------------------------------------------------------- pairs


def test_step_and_trajectory_pairs_use_the_shared_prefix_as_prompt():
    good = play(TASK, ["inc", "inc", "answer(2)"], source="expert")
    bad = play(TASK, ["inc", "answer(1)"], source="rollout")
    steps = P.make_pairs([bad, good], level="step")
    assert len(steps) == 1 and not steps.skipped
    p = steps.pairs[0]
    assert p.prompt == good.to_messages()[:3] == bad.to_messages()[:3]
    assert p.prompt[-1] == {"role": "user", "content": "count = 1"}
    assert p.chosen == [good.to_messages()[3]] and p.rejected == [bad.to_messages()[3]]
    assert (p.reason, p.turn, p.chosen_value, p.rejected_value) == ("outcome", 1, 1.0, 0.0)
    row = p.to_row()
    assert set(row) >= {"prompt", "chosen", "rejected"}
    for key in ("prompt", "chosen", "rejected"):  # TRL's conversational format: lists of role/content dicts
        assert all(set(m) == {"role", "content"} for m in row[key])
    assert row["chosen"][0]["role"] == "assistant" and row["margin"] == 1.0
    assert (row["chosen_source"], row["rejected_source"]) == ("expert", "rollout")

    trajs = P.make_pairs([good, bad], level="trajectory")
    t = trajs.pairs[0]
    assert t.prompt == p.prompt
    assert t.chosen == good.to_messages()[3:] and t.rejected == bad.to_messages()[3:]


def test_pairs_skip_ties_and_duplicates_with_reasons_and_respect_the_task_cap():
    good = play(TASK, ["inc", "inc", "answer(2)"])
    bad1 = play(TASK, ["inc", "answer(1)"], thoughts=["ok", "a"])
    bad2 = play(TASK, ["inc", "answer(1)"], thoughts=["ok", "a"])  # same text: a duplicate pair with `good`
    bad3 = play(TASK, ["dec", "answer(9)"])
    ps = P.make_pairs([good, bad1, bad2, bad3], level="step")
    # good>bad1, good>bad3 kept; good>bad2 duplicate; bad1~bad2 same actions; bad1/bad3 and bad2/bad3 are ties
    assert len(ps) == 2
    assert ps.skipped == {"duplicate": 1, "same_actions": 1, "tie": 2}
    capped = P.make_pairs([good, bad1, bad3], level="step", max_pairs_per_task=1)
    assert len(capped) == 1 and capped.skipped["over_task_cap"] == 1
    with pytest.raises(ValueError, match="task_id"):
        P.make_pairs([Trajectory("x", "s", "game", [Turn("user", "hi")], {})])


def test_step_value_judge_credits_the_diverging_turn_not_a_later_mistake():
    # a: wastes turn 1 (dec) but recovers; b: good turn 1, then a wrong answer later
    a = play(TASK, ["inc", "dec", "inc", "inc", "answer(2)"])
    b = play(TASK, ["inc", "inc", "answer(3)"])
    for ep in (a, b):
        M.label_step_values(TASK, ep)
    by_outcome = P.make_pairs([a, b], level="step", judge="outcome").pairs[0]
    assert "dec" in by_outcome.chosen[0]["content"]  # the outcome credits the wasted turn...
    by_value = P.make_pairs([a, b], level="step", judge="step_value").pairs[0]
    assert "inc" in by_value.chosen[0]["content"] and "dec" in by_value.rejected[0]["content"]  # ...the env does not
    assert by_value.reason == "step_efficiency"


# --------------------------------------------------------------------------- step values and labels


def test_label_step_values_by_hand():
    expert = play(TASK, ["inc", "inc", "answer(2)"])
    assert M.label_step_values(TASK, expert) == [1.0, 1.0, 1.0]
    assert expert.meta["start_remaining"] == 3 and expert.meta["step_remaining"] == [2, 1, 0]
    assert P.step_labels(expert) == [1, 1, 1]

    detour = play(TASK, ["dec", "inc", "inc", "inc", "answer(2)"])
    M.label_step_values(TASK, detour)
    assert detour.meta["step_remaining"] == [4, 3, 2, 1, 0]
    assert P.step_labels(detour, "progress") == [0, 1, 1, 1, 1]
    assert P.step_labels(detour, "solvable") == [1, 1, 1, 1, 1]

    doomed = play(TASK, ["dec", "dec", "inc", "answer(5)"])  # after two decs the expert needs 5 of 4 turns left
    assert M.label_step_values(TASK, doomed) == [1.0, 0.0, 0.0, 0.0]
    assert P.step_labels(doomed, "solvable") == [1, 0, 0, 0]

    invalid = play(TASK, ["jump", "inc", "inc", "answer(2)"])
    M.label_step_values(TASK, invalid)
    assert P.step_labels(invalid) == [0, 1, 1, 1] and invalid.meta["success"]


def test_replay_detects_an_episode_from_another_task_or_a_tampered_observation():
    ep = play(TASK, ["inc", "inc", "answer(2)"])
    ep.messages[2] = Turn("user", "count = 5")
    with pytest.raises(M.ReplayMismatch):
        M.label_step_values(TASK, ep)
    other = Task("count-0", "game", "reach 3", {"target": 3})
    with pytest.raises(M.ReplayMismatch):
        M.label_step_values(other, play(TASK, ["inc"]))


def test_expert_value_leaves_the_state_alone():
    env = make_env("game")
    env.reset(TASK)
    env.step(format_turn("x", "inc"))
    assert M.expert_value(env) == (1.0, 2)
    assert env.count == 1 and env.turn == 1 and not env.done


# --------------------------------------------------------------------------- injected mistakes


def test_corrupt_turn_changes_the_action():
    rng = random.Random(0)
    for text, domain in [(format_turn("t", "go to fridge 1"), "household"),
                         (format_turn("t", "click[Buy Now]"), "ecommerce"),
                         (format_turn("t", "sql\n```sql\nSELECT a FROM t WHERE x > 30\n```"), "db"),
                         (format_turn("t", "answer(42)"), "os")]:
        for _ in range(5):
            bad = M.corrupt_turn(text, domain, rng)
            assert M.action_key(bad, domain) != M.action_key(text, domain)


def test_a_corrupted_name_or_number_is_corrupted_in_the_thought_too():
    # a model's own slip names the wrong thing in its reasoning as well: recovering means correcting the thought
    assert M._retell("There is the pot 1 on the countertop 1.", "pot 1 from countertop 1",
                     "pot 2 from countertop 1") == "There is the pot 2 on the countertop 1."
    assert M._retell("The relation headquarters_of of Marros.", "Marros, headquarters_of",
                     "Marros, headquartrs_of") == "The relation headquartrs_of of Marros."
    assert M._retell("I take the pot 1.", "pot 1 from countertop 1", "pot 1 f") == "I take the pot 1."  # cut short
    rng = random.Random(0)
    text = format_turn("The relation starring of Dune leads to its actors.", "get_neighbors(Dune, starring)")
    retold = 0
    for _ in range(20):
        bad = M.corrupt_turn(text, "kg", rng)
        relation = bad.split("Act: get_neighbors(Dune, ")[-1].rstrip(")")
        if len(relation) == len("starring") - 1:  # a letter dropped from the relation
            assert f"The relation {relation} of Dune" in bad
            retold += 1
    assert retold


def test_a_skipped_step_is_the_experts_turn_after_next_and_leaves_the_state_alone():
    task = generate_tasks("household", 1, seed=5)[0]
    expert = [m.content for m in M.expert_episode(task).messages if m.role == "assistant"]
    env, _ = start_episode(task, None)
    assert M.skipped_step(env) == expert[1]
    assert env.turn == 0 and env.expert_action() == expert[0]
    for text in expert[:-1]:
        env.step(text)
    assert M.skipped_step(env) is None  # the last turn has no turn after it


def test_mistake_episodes_differ_from_the_expert_at_the_mistake_turn():
    rng = random.Random(1)
    expert = M.expert_episode(TASK)
    assert expert.meta["success"] and expert.meta["turns"] == 3
    eps = M.mistake_episodes(TASK, 6, rng)
    played = [e.meta["mistake"]["kind"] for e in eps]
    asked = ["random", "corrupt", "skip"] * 2  # the kinds take turns; a skip with nothing to skip is a corruption
    assert all(p == a or (a, p) == ("skip", "corrupt") for p, a in zip(played, asked)), played
    for e in eps:
        at = e.meta["mistake"]["turn"]
        d, why = P.first_divergence(expert, e)
        if why == "diverged":
            assert P._assistant_turns(expert, d) == at
        else:  # the random action happened to be the expert's
            assert why == "same_actions"
        M.label_step_values(TASK, e)  # every recorded episode replays
    assert any(not e.meta["success"] for e in eps)


def test_build_preference_data_on_the_toy_env_accounts_for_everything(tmp_path):
    tasks = generate_tasks("game", 3, seed=0) + generate_tasks("game", 2, seed=0, difficulty="medium")
    data = P.build_preference_data(tasks, policy="random", samples_per_task=2, mistakes_per_task=3, seed=0)
    c = data.counts
    assert c["episodes"] == {"expert": 5, "mistake": 15, "rollout:random": 10}
    assert c["success_rate_by_source"]["expert"] == 1.0
    assert len(data.episodes) == 30 and len(data.prm) == 30
    assert len(data.step_pairs) == c["step_pairs"]["pairs"] > 0
    assert len(data.trajectory_pairs) == c["trajectory_pairs"]["pairs"] > 0
    for r in data.step_pairs:
        assert len(r["chosen"]) == 1 and len(r["rejected"]) == 1 and r["prompt"][-1]["role"] == "user"
        assert r["margin"] >= 0
    back = P.PreferenceData.load(data.save(str(tmp_path / "d")))
    with pytest.raises(ValueError, match="unique"):
        P.collect_episodes(tasks + tasks[:1])
    assert back.step_pairs == data.step_pairs and back.prm == data.prm and back.counts == data.counts
    assert [e.to_dict() for e in back.episodes] == [e.to_dict() for e in data.episodes]
    train, held = P.split_by_task(data.step_pairs, 0.4, seed=0)
    assert {r["task_id"] for r in train}.isdisjoint({r["task_id"] for r in held}) and held


@pytest.mark.parametrize("domain", ["household", "ecommerce"])
def test_real_environments_give_pairs_where_the_expert_turn_wins(domain):
    if domain not in list_domains():
        pytest.skip(f"the {domain} environment is not built")
    tasks = generate_tasks(domain, 3, seed=5)
    data = P.build_preference_data(tasks, mistakes_per_task=4, samples_per_task=0, seed=3)
    assert data.step_pairs, data.counts
    experts = {e.meta["task_id"]: e for e in data.episodes if e.source == "expert"}
    for r in data.step_pairs:
        if r["chosen_source"] == "expert":  # the expert's turn is never the rejected one
            exp = experts[r["task_id"]].to_messages()
            assert r["chosen"][0] == exp[len(r["prompt"])]
        assert r["rejected_source"] != "expert"
    assert 0 < data.counts["prm_positive_rate"] < 1


# --------------------------------------------------------------------------- fitting a length budget


def test_fit_prompt_drops_oldest_turns_and_keeps_the_task():
    prompt = [{"role": "user", "content": "task"}]
    for i in range(4):
        prompt += [{"role": "assistant", "content": f"a{i}"}, {"role": "user", "content": f"o{i}"}]
    completion = [{"role": "assistant", "content": "final"}]

    def count(msgs):
        return len(msgs)  # one "token" per message

    assert P.fit_prompt(prompt, [completion], count, 20) == prompt
    fitted = P.fit_prompt(prompt, [completion], count, 6)
    assert fitted == [prompt[0]] + prompt[5:]
    assert fitted[-1]["content"] == "o3"
    assert P.fit_prompt(prompt, [completion], count, 1) is None


@pytest.mark.parametrize("old, new", [("openmanus_lite.train.preferences", "openmanus_lite.preference.pairs"),
                                      ("openmanus_lite.train.dpo", "openmanus_lite.preference.dpo"),
                                      ("openmanus_lite.train.reward_model", "openmanus_lite.preference.reward_model")])
def test_a_moved_module_still_imports_from_its_old_path_with_a_warning(old, new):
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)

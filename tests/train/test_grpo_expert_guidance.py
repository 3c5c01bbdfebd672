"""Expert-guided rollouts (train/expert_guidance.py): the replayed prefix reaches the expert's state, its tokens get
no loss, the prefix shrinks as a task starts to succeed, and with the setting off nothing changes; the expert's whole
episode swapped into a group that never succeeded (`expert_in_failed_groups`) is trained on as the model's tokens."""

from __future__ import annotations

import math
from types import SimpleNamespace as NS

import pytest

torch = pytest.importorskip("torch")

from openmanus_lite.engine.generation import render_prompts  # noqa: E402
from openmanus_lite.envs import generate_tasks, make_env, run_expert  # noqa: E402
from openmanus_lite.models import build_tiny_model, load_model  # noqa: E402
from openmanus_lite.train.env_rollout import (  # noqa: E402
    ObservationRenderer,
    expert_episode_tokens,
    run_episode_tokens,
    state_key,
)  # noqa: E402
from openmanus_lite.train.expert_guidance import ExpertGuide, replay_expert  # noqa: E402
from openmanus_lite.train.grpo import GRPORunConfig, build_env_dataset, import_trl, run_grpo  # noqa: E402

import_trl()


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny_guide"), seed=0)


def _expert(task, max_turns=None):
    messages, last = run_expert(make_env(task.domain, max_turns=max_turns), task)
    return messages, [m["content"] for m in messages if m["role"] == "assistant"], last


def _cfg(tmp_path, **kw):
    base = dict(output_dir=str(tmp_path / "run"), mode="multi", max_episode_tokens=2000, max_steps=1, num_generations=2,
                per_device_train_batch_size=2, gradient_accumulation_steps=2, learning_rate=1e-4, save_strategy="no",
                disable_tqdm=True, logging_steps=1, report_to="none")
    return GRPORunConfig(**{**base, **kw})


@pytest.mark.parametrize("domain", ["db", "kg", "web", "household", "ecommerce"])
def test_a_replayed_prefix_reaches_the_experts_state(domain):
    task = generate_tasks(domain, 1, seed=3, difficulty="medium")[0]
    messages, actions, last = _expert(task)
    assert len(actions) >= 2 and last.info["success"]
    k = len(actions) - 1
    env = make_env(domain)
    env.reset(task)
    replayed = list(replay_expert(env, k))
    assert [a for a, _ in replayed] == actions[:k]
    assert [o for _, o in replayed] == [m["content"] for m in messages[2:2 * k + 1:2]]  # the same observations
    # and the same state: the expert's next turn there is its last one, and it succeeds
    assert env.turn == k and not env.done and env.expert_action() == actions[k]
    assert env.step(actions[k]).info["success"]


def test_a_guided_episode_starts_after_the_experts_turns_masked_out_of_the_loss(tiny_dir):
    model, tok = load_model(tiny_dir, backend="unsloth")
    task = generate_tasks("kg", 1, seed=3, difficulty="medium")[0]
    messages, actions, _ = _expert(task, max_turns=6)
    assert len(actions) >= 3
    _, rollout = build_env_dataset([task], max_turns=6, max_new_tokens=6)
    eps = run_episode_tokens(model, tok, [task, task], render_prompts(tok, [rollout.prompt_for(task)] * 2),
                             max_turns=6, max_new_tokens=6, max_completion_tokens=2000, expert_prefix=[2, 2])
    renderer = ObservationRenderer(tok)
    expected = "".join(m["content"] + tok.eos_token if m["role"] == "assistant" else renderer.head + m["content"]
                       + renderer.tail for m in messages[1:5])
    for ep in eps:
        assert ep.prefix_turns == 2 and ep.messages[:4] == messages[1:5] and ep.num_turns > 2
        prefix = ep.env_mask.index(1)  # the policy's first token
        assert tok.decode(ep.completion_ids[:prefix]) == expected  # the expert's turns and observations, as context
        assert ep.states[0] == state_key(task, [messages[2]["content"], messages[4]["content"]])
        # the policy played on from there: only its own turns are runs of model tokens
        runs = sum(m and not before for m, before in zip(ep.env_mask, [0] + ep.env_mask))
        assert runs == ep.num_turns - ep.prefix_turns == len(ep.states)


def test_the_prefix_starts_at_a_share_of_the_experts_path_and_follows_the_domains_success():
    task, other = generate_tasks("household", 2, seed=3, difficulty="medium")
    path, other_path = len(_expert(task)[1]), len(_expert(other)[1])
    assert path >= 3 and other_path >= 3
    assert ExpertGuide(0.5, 0.5).prefix_turns([task]) == [int(0.5 * path)]
    assert ExpertGuide(1.0, 0.5, max_turns=1).prefix_turns([task]) == [0]  # the expert fails in 1 turn: no guidance
    guide = ExpertGuide(1.0, 0.5)
    k = path - 1  # all but the expert's last turn: the policy always acts
    assert guide.prefix_turns([task, task]) == [k, k]

    def update(wins, replayed=k):
        return guide.update([NS(task=task, prefix_turns=replayed, success=w) for w in wins])

    assert update([False, False]) == {"guide/mean_prefix_turns": k, "guide/guided_share": 1.0,
                                      "guide/household_prefix_share": 1.0}  # never solved: no more than `share`
    update([True, False])  # solved at the threshold: the domain one of this task's turns closer to unguided play
    assert guide.domain_share["household"] == pytest.approx(1 - 1 / path)
    # a task met for the first time starts where its domain is now, not at `share`
    assert guide.prefix_turns([other]) == [min(int((1 - 1 / path) * other_path), other_path - 1)]
    update([True, False])
    update([False, False])  # a group that never succeeds puts a turn back
    assert guide.domain_share["household"] == pytest.approx(1 - 1 / path)
    for _ in range(path + 2):
        update([True, True])
    assert guide.domain_share["household"] == 0.0 and guide.prefix_turns([task, other]) == [0, 0]  # never below 0
    assert update([True, True], replayed=0)["guide/guided_share"] == 0.0


class FakeTrainer:
    """What EnvRolloutFunc reads of a GRPOTrainer, without building one."""

    def __init__(self, model, tok, tmp_path, **settings):
        self.model, self.processing_class = model, tok
        self.args = _cfg(tmp_path, temperature=1.0, **settings)
        self.accelerator = NS(unwrap_model=lambda m: m)
        self.num_generations = self.args.num_generations
        self.logged = {}

    def _log_metric(self, name, value):
        self.logged[name] = value


def test_off_or_in_evaluation_the_rollout_plays_the_whole_task(tiny_dir, tmp_path):
    model, tok = load_model(tiny_dir, backend="unsloth")
    tasks = generate_tasks("kg", 2, seed=3, difficulty="medium")
    _, rollout = build_env_dataset(tasks, max_turns=6, max_new_tokens=6)
    prompts = [rollout.prompt_for(t) for t in tasks for _ in range(2)]
    assert GRPORunConfig(output_dir=str(tmp_path)).expert_prefix_share == 0.0  # off unless asked for
    model.train()
    torch.manual_seed(0)
    off = rollout(prompts, FakeTrainer(model, tok, tmp_path))
    torch.manual_seed(0)
    plain = run_episode_tokens(model, tok, [t for t in tasks for _ in range(2)], render_prompts(tok, prompts),
                               max_turns=6, max_new_tokens=6, max_completion_tokens=2000, return_logprobs=False)
    assert off["completion_ids"] == [e.completion_ids for e in plain] and off["env_mask"] == [e.env_mask for e in plain]
    assert rollout.guide is None and all(e.prefix_turns == 0 for e in rollout.last_episodes)
    model.eval()  # evaluation measures the policy alone, guided or not
    trainer = FakeTrainer(model, tok, tmp_path, expert_prefix_share=1.0)
    rollout(prompts, trainer)
    assert rollout.guide is None and all(e.prefix_turns == 0 for e in rollout.last_episodes)
    assert not any(k.startswith("guide/") for k in trainer.logged)
    model.train()
    rollout(prompts, trainer)
    starts = [len(_expert(t, max_turns=6)[1]) - 1 for t in tasks]
    assert [e.prefix_turns for e in rollout.last_episodes] == [k for k in starts for _ in range(2)]
    assert trainer.logged["guide/mean_prefix_turns"] == sum(starts) / 2 and trainer.logged["guide/guided_share"] == 1.0
    with pytest.raises(ValueError, match="expert_prefix_share must be"):
        _cfg(tmp_path, expert_prefix_share=1.5)


def test_guided_grpo_logs_the_guide_and_the_success_per_domain(tiny_dir, tmp_path):
    from openmanus_lite.train.grpo import build_single_turn_dataset, value_task_rows

    model, tok = load_model(tiny_dir, backend="unsloth")
    tasks = generate_tasks("kg", 2, seed=3, difficulty="medium")
    ds, rollout = build_env_dataset(tasks, max_turns=6, max_new_tokens=6)
    res = run_grpo(model, tok, ds, _cfg(tmp_path, expert_prefix_share=0.5), rollout_func=rollout)
    log = [r for r in res.log_history if "reward" in r][0]
    starts = ExpertGuide(0.5, 0.5, max_turns=6).prefix_turns(tasks)
    assert min(starts) >= 1 and log["guide/mean_prefix_turns"] == sum(starts) / 2 and log["guide/guided_share"] == 1.0
    assert 0.0 <= log["success/kg"] <= 1.0
    with pytest.raises(ValueError, match="need mode 'multi'"):
        run_grpo(model, tok, build_single_turn_dataset(value_task_rows(("db",), n=2, seed=0)),
                 _cfg(tmp_path, mode="single", expert_prefix_share=0.5))


def test_the_experts_episode_in_token_form_trains_on_its_actions_only(tiny_dir):
    _, tok = load_model(tiny_dir, backend="unsloth")
    task = generate_tasks("kg", 1, seed=3, difficulty="medium")[0]
    messages, actions, last = _expert(task, max_turns=6)
    renderer, prompt = ObservationRenderer(tok), [7, 8, 9]
    ep = expert_episode_tokens(task, prompt, tok, renderer, max_turns=6, max_completion_tokens=2000)
    assert ep.expert and ep.success and ep.prompt_ids == prompt and ep.messages == messages[1:]
    assert ep.num_turns == len(actions) == len(ep.states) and ep.outcome == last.info["score"]
    model_text = tok.decode([i for i, m in zip(ep.completion_ids, ep.env_mask) if m])
    assert model_text == "".join(a + tok.eos_token for a in actions)  # every action and its end token, nothing else
    assert tok.decode(ep.completion_ids) == "".join(
        m["content"] + tok.eos_token if m["role"] == "assistant" else renderer.head + m["content"] + renderer.tail
        for m in messages[1:])
    observations = [m["content"] for m in messages[2::2]]
    assert ep.states == [state_key(task, observations[:t]) for t in range(len(actions))]
    assert expert_episode_tokens(task, prompt, tok, renderer, max_turns=6,
                                 max_completion_tokens=len(ep.completion_ids) - 1) is None  # does not fit
    assert expert_episode_tokens(task, prompt, tok, renderer, max_turns=1) is None  # the expert fails in 1 turn


def test_a_group_that_never_succeeds_gets_the_experts_episode_in_training_only(tiny_dir, tmp_path):
    model, tok = load_model(tiny_dir, backend="unsloth")
    tasks = generate_tasks("kg", 2, seed=3, difficulty="medium")
    _, rollout = build_env_dataset(tasks, max_turns=6, max_new_tokens=6)
    prompts = [rollout.prompt_for(t) for t in tasks for _ in range(2)]
    trainer = FakeTrainer(model, tok, tmp_path, expert_in_failed_groups=True)
    model.eval()
    out = rollout(prompts, trainer)
    assert not any(out["expert_sample"]) and "guide/expert_samples" not in trainer.logged
    model.train()
    torch.manual_seed(0)
    out = rollout(prompts, trainer)
    eps = rollout.last_episodes
    assert not any(e.success for e in eps if not e.expert)  # the untrained tiny model never solves kg
    assert out["expert_sample"] == [False, True, False, True] and trainer.logged["guide/expert_samples"] == 2.0
    assert trainer.logged["rollout/success_rate"] == 0.0  # the policy's own success, before the swap
    renderer = ObservationRenderer(tok)
    for k in (1, 3):
        expected = expert_episode_tokens(tasks[k // 2], eps[k - 1].prompt_ids, tok, renderer, max_turns=6,
                                         max_completion_tokens=2000)
        assert out["completion_ids"][k] == expected.completion_ids and out["env_mask"][k] == expected.env_mask
        assert out["env_success"][k] and out["prompt_ids"][k] == out["prompt_ids"][k - 1]
    with pytest.raises(ValueError, match="no sampling log-probabilities"):
        rollout(prompts, FakeTrainer(model, tok, tmp_path, expert_in_failed_groups=True,
                                     off_policy_mask_threshold=0.5))


def test_grpo_with_expert_samples_counts_them_and_keeps_the_policys_success(tiny_dir, tmp_path):
    model, tok = load_model(tiny_dir, backend="unsloth")
    tasks = generate_tasks("kg", 2, seed=3, difficulty="medium")
    ds, rollout = build_env_dataset(tasks, max_turns=6, max_new_tokens=6)
    res = run_grpo(model, tok, ds, _cfg(tmp_path, expert_in_failed_groups=True, drop_uniform_groups=True),
                   rollout_func=rollout)
    log = [r for r in res.log_history if "reward" in r][0]
    assert log["guide/expert_samples"] == 2.0 and log["success/kg"] == 0.0  # the expert's success is not the policy's
    assert log["signal/group_share"] == 1.0 and log["signal/groups_dropped"] == 0.0  # the failed group has signal now
    assert math.isfinite(log["loss"]) and log["loss"] != 0.0

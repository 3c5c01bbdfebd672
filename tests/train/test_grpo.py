"""GRPO through TRL on the tiny model (CPU): single-turn, multi-turn in the environments, tool calling,
the env_mask of multi-turn rollouts, the columns rewards receive, and resuming from a checkpoint."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from openmanus_lite.engine.generation import render_prompts  # noqa: E402
from openmanus_lite.envs import generate_tasks  # noqa: E402
from openmanus_lite.models import build_tiny_model, load_model, load_tokenizer  # noqa: E402
from openmanus_lite.rewards import ROLLOUT_COLUMNS, build_rewards  # noqa: E402
from openmanus_lite.train.env_rollout import (  # noqa: E402
    ObservationRenderer,
    episodes_to_rollout_output,
    run_episode_tokens,
    trainer_uses_logprobs,
)
from openmanus_lite.train.grpo import (  # noqa: E402
    DEFAULT_REWARDS,
    GRPORunConfig,
    build_env_dataset,
    build_single_turn_dataset,
    import_trl,
    reward_curves,
    run_grpo,
    value_task_rows,
)

import_trl()


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny_grpo"), seed=0)


def _model(path):
    return load_model(path, backend="unsloth")  # full fine-tuning of the tiny model


class Probe:
    """A zero-weight reward that records what TRL passes to rewards."""

    __name__ = "probe"

    def __init__(self):
        self.calls: list[dict] = []

    def __call__(self, prompts=None, completions=None, **kwargs):
        self.calls.append({"prompts": prompts, "completions": completions, **kwargs})
        return [0.0] * len(completions)


def _cfg(tmp_path, **kw):
    base = dict(output_dir=str(tmp_path / "run"), max_steps=2, num_generations=2, per_device_train_batch_size=4,
                learning_rate=1e-4, save_strategy="no", disable_tqdm=True, logging_steps=1)
    base.update(kw)
    return GRPORunConfig(**base)


def test_trl_grpo_trainer_has_the_shape_the_kit_relies_on():
    """KitGRPOTrainer reads `_generate`'s result by name and EnvRolloutFunc is TRL's `rollout_func`: this fails
    when a TRL release changes what either relies on (read from TRL's own source, no model needed)."""
    import ast
    import inspect
    import textwrap

    from trl import GRPOTrainer

    from openmanus_lite.train.grpo import GENERATE_FIELDS

    def parsed(fn):
        return ast.parse(textwrap.dedent(inspect.getsource(fn)))

    returns = [n.value for n in ast.walk(parsed(GRPOTrainer._generate)) if isinstance(n, ast.Return)]
    assert [[e.id for e in r.elts] for r in returns] == [list(GENERATE_FIELDS)]
    unpacks = [n.targets[0] for n in ast.walk(parsed(GRPOTrainer._generate_and_score_completions))
               if isinstance(n, ast.Assign) and getattr(getattr(n.value, "func", None), "attr", "") == "_generate"]
    assert len(unpacks) == 1 and len(unpacks[0].elts) == len(GENERATE_FIELDS)
    assert list(inspect.signature(GRPOTrainer._generate).parameters) == ["self", "prompts"]
    assert {"rollout_func", "environment_factory"} <= set(inspect.signature(GRPOTrainer.__init__).parameters)
    source = inspect.getsource(GRPOTrainer._generate)
    assert "self.rollout_func(prompts, self)" in source  # the rollout gets the prompts and the trainer
    assert '{"prompt_ids", "completion_ids", "logprobs"}' in source  # the keys it must return
    assert 'extra_fields.pop("env_mask", None)' in source  # env_mask becomes the tool mask
    assert callable(GRPOTrainer._log_metric)


def test_single_turn_steps_log_rewards_per_function_and_domain(tiny_dir, tmp_path):
    model, tok = _model(tiny_dir)
    ds = build_single_turn_dataset(value_task_rows(("db", "kg"), n=4, seed=0))
    probe = Probe()
    funcs, weights = build_rewards(DEFAULT_REWARDS["single"])
    res = run_grpo(model, tok, ds, _cfg(tmp_path, max_completion_length=16),
                   reward_funcs=funcs + [probe], reward_weights=weights + [0.0])
    assert res.global_step == 2
    steps = [r for r in res.log_history if "reward" in r]
    assert len(steps) == 2
    for key in ("rewards/answer_match/mean", "rewards/format/mean", "rewards/tag_count/mean"):
        assert key in steps[0]
    assert any(k.startswith("domain/") for k in steps[0])
    call = probe.calls[0]
    assert len(call["completions"]) == 4 and len(call["solution"]) == 4
    assert call["prompts"][0] == call["prompts"][1]  # a group: the same prompt num_generations times
    assert set(call["domain"]) <= {"db", "kg"}
    curves = reward_curves(res.log_history)
    assert {"reward", "answer_match", "format", "tag_count"} <= set(curves.columns)


def test_env_mask_covers_exactly_the_observation_tokens(tiny_dir):
    model, tok = _model(tiny_dir)
    tasks = generate_tasks("db", 2, seed=0) + generate_tasks("os", 1, seed=0)
    limits = {"db": 3, "os": 2}  # a turn limit per domain
    _, rollout = build_env_dataset(tasks, max_turns=limits)
    prompts = [rollout.prompt_for(t) for t in tasks]
    assert all(f"You have {limits[t.domain]} turns" in p[-1]["content"] for p, t in zip(prompts, tasks))
    torch.manual_seed(0)
    eps = run_episode_tokens(model, tok, tasks, render_prompts(tok, prompts), max_turns=limits, max_new_tokens=12,
                             max_completion_tokens=400)
    renderer = ObservationRenderer(tok)
    assert renderer.head == "\n<|im_start|>user\n" and renderer.tail == "<|im_end|>\n<|im_start|>assistant\n"
    for ep in eps:
        assert len(ep.completion_ids) == len(ep.env_mask) == len(ep.logprobs)
        assert ep.num_turns == limits[ep.task.domain]  # the random tiny model never answers: the turn limit ends it
        # split the completion into runs of model tokens (1) and environment tokens (0)
        runs, cur, cur_mask = [], [], None
        for t, m in zip(ep.completion_ids, ep.env_mask):
            if m != cur_mask and cur:
                runs.append((cur_mask, cur))
                cur = []
            cur_mask = m
            cur.append(t)
        runs.append((cur_mask, cur))
        model_runs = [ids for m, ids in runs if m == 1]
        env_runs = [ids for m, ids in runs if m == 0]
        observations = [m["content"] for m in ep.messages if m["role"] == "user"]
        assert len(model_runs) == ep.num_turns and len(env_runs) == len(observations)
        for ids, obs in zip(env_runs, observations):
            text = tok.decode(ids)
            if text.startswith("<|im_end|>"):  # the end token of a turn cut by its token limit
                text = text[len("<|im_end|>"):]
            assert text == renderer.head + obs + renderer.tail
        for ids, m in zip(model_runs, [m for m in ep.messages if m["role"] == "assistant"]):
            assert tok.decode(ids, skip_special_tokens=True).strip() == m["content"]
        assert all(lp == 0.0 for lp, m in zip(ep.logprobs, ep.env_mask) if m == 0)
        assert all(lp < 0.0 for lp, m in zip(ep.logprobs, ep.env_mask) if m == 1)


def test_rollout_records_logprobs_only_when_trl_reads_them(tiny_dir):
    from types import SimpleNamespace as NS

    plain = NS(use_vllm=False, vllm_importance_sampling_correction=True, args=NS(off_policy_mask_threshold=None))
    vllm = NS(use_vllm=True, vllm_importance_sampling_correction=True, args=NS(off_policy_mask_threshold=None))
    opsm = NS(use_vllm=False, vllm_importance_sampling_correction=False, args=NS(off_policy_mask_threshold=0.5))
    assert [trainer_uses_logprobs(t) for t in (plain, vllm, opsm)] == [False, True, True]
    model, tok = _model(tiny_dir)
    tasks = generate_tasks("db", 2, seed=0)
    _, rollout = build_env_dataset(tasks, max_turns=2)
    eps = run_episode_tokens(model, tok, tasks, render_prompts(tok, [rollout.prompt_for(t) for t in tasks]),
                             max_turns=2, max_new_tokens=8, max_completion_tokens=200, return_logprobs=False)
    assert all(ep.completion_ids and not ep.logprobs for ep in eps)
    out = episodes_to_rollout_output(eps, logprobs=False)
    assert out["logprobs"] is None and len(out["completion_ids"]) == 2


def test_cached_rollout_continues_the_same_token_ids_as_an_uncached_one(tiny_dir):
    """The rollout's PrefixCache only saves encoding: greedily, every turn gets the same ids."""
    from openmanus_lite.train.env_rollout import RolloutStats

    model, tok = _model(tiny_dir)
    tasks = generate_tasks("db", 2, seed=0) + generate_tasks("os", 1, seed=0)
    _, rollout = build_env_dataset(tasks, max_turns=3)
    prompts = render_prompts(tok, [rollout.prompt_for(t) for t in tasks])
    runs = {}
    for cached in (False, True):
        stats = RolloutStats()
        eps = run_episode_tokens(model, tok, tasks, prompts, max_turns=3, max_new_tokens=10, max_completion_tokens=300,
                                 temperature=0.0, kv_cache=cached, stats=stats)
        runs[cached] = ([e.completion_ids for e in eps], [e.env_mask for e in eps], stats)
    assert runs[True][0] == runs[False][0] and runs[True][1] == runs[False][1]
    assert all(e.num_turns == 3 for e in eps)  # several turns, so later turns could reuse earlier ones
    assert runs[False][2].reused_tokens == 0 and runs[True][2].reused_tokens > 0


def test_a_spent_token_budget_ends_the_episode_before_the_next_turn(tiny_dir):
    model, tok = _model(tiny_dir)
    tasks = generate_tasks("db", 2, seed=0)
    _, rollout = build_env_dataset(tasks, max_turns=5)
    prompts = render_prompts(tok, [rollout.prompt_for(t) for t in tasks])
    eps = run_episode_tokens(model, tok, tasks, prompts, max_turns=5, max_new_tokens=8, max_completion_tokens=60,
                             temperature=0.0)
    for ep in eps:  # five 8-token turns and four observations cannot fit 60 tokens
        assert ep.ended_by == "tokens" and ep.num_turns < 5 and not ep.success and ep.outcome == 0.0
        assert len(ep.completion_ids) == len(ep.env_mask) <= 60
        assert ep.messages[-1]["role"] == "assistant" and ep.env_mask[-1] == 1  # no observation without a turn after it


def test_multi_turn_steps_pass_env_columns_and_conversations_to_rewards(tiny_dir, tmp_path):
    model, tok = _model(tiny_dir)
    tasks = generate_tasks("db", 2, seed=1) + generate_tasks("kg", 2, seed=1)
    ds, rollout = build_env_dataset(tasks, max_turns=2, max_new_tokens=10)
    probe = Probe()
    funcs, weights = build_rewards("env_outcome react_format:0.25 invalid_action:0.25")
    res = run_grpo(model, tok, ds, _cfg(tmp_path, mode="multi", max_episode_tokens=160), rollout_func=rollout,
                   reward_funcs=funcs + [probe], reward_weights=weights + [0.0])
    assert res.global_step == 2
    call = probe.calls[-1]
    for col in ROLLOUT_COLUMNS:
        assert len(call[col]) == 4, col
    for comp, turns in zip(call["completions"], call["num_turns"]):
        assert isinstance(comp, list) and sum(m["role"] == "assistant" for m in comp) == turns
    log = [r for r in res.log_history if "reward" in r][0]
    assert "rewards/env_outcome/mean" in log and "rollout/tokens_per_s" in log
    steps = [r for r in res.log_history if "reward" in r]  # every step: the success of each domain it played
    assert all(any(k.startswith("success/") for k in r) for r in steps)
    assert {"success/db", "success/kg"} <= {k for r in steps for k in r}
    assert log["completions/mean_length"] <= 2 * 10  # counts model tokens only (env_mask 1)
    assert rollout.total_stats.episodes == 8


def test_tool_calling_mode_runs_the_environment_through_tools(tmp_path):
    from openmanus_lite.train.tool_env import HouseholdToolEnv, tool_dataset, tool_env_factory

    call = '<tool_call>\n{"name": "act", "arguments": {"command": "look"}}\n</tool_call>'
    tasks = generate_tasks("household", 1, seed=0)
    ds = tool_dataset(tasks, max_turns=3)
    env = HouseholdToolEnv()
    tok0 = load_tokenizer(build_tiny_model(tmp_path / "t0"))
    text = tok0.apply_chat_template(ds[0]["prompt"], tools=[env.act, env.answer], tokenize=False,
                                    add_generation_prompt=True)
    model, tok = _model(build_tiny_model(tmp_path / "t1", texts=[text] + [call] * 5, vocab_size=1024))
    # teach the tiny model to call the `act` tool (a few seconds of overfitting)
    n_prompt = len(tok(text, add_special_tokens=False)["input_ids"])
    ids = tok(text + call + "<|im_end|>", add_special_tokens=False)["input_ids"]
    torch.manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(60):
        loss = model(input_ids=torch.tensor([ids]), labels=torch.tensor([[-100] * n_prompt + ids[n_prompt:]])).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    probe = Probe()
    funcs, weights = build_rewards("env_outcome invalid_action:0.25")
    res = run_grpo(model, tok, ds, _cfg(tmp_path, mode="tool", per_device_train_batch_size=2, max_episode_tokens=64,
                                        learning_rate=1e-6, max_tool_calling_iterations=1, temperature=0.2),
                   environment_factory=tool_env_factory(["household"], max_turns=3),
                   reward_funcs=funcs + [probe], reward_weights=weights + [0.0])
    assert loss.item() < 0.1
    log = [r for r in res.log_history if "reward" in r]
    assert max(r["tools/call_frequency"] for r in log) > 0
    envs = [e for c in probe.calls for e in c["environments"]]
    assert any(e.num_turns >= 1 for e in envs)  # a tool call stepped the household environment
    assert all(e.domain == "household" for e in envs)
    assert "rewards/env_outcome/mean" in log[0] and "success/household" in log[0]  # read from the tool environments


def test_resume_continues_from_the_last_checkpoint(tiny_dir, tmp_path):
    ds = build_single_turn_dataset(value_task_rows(("db",), n=4, seed=0))
    model, tok = _model(tiny_dir)
    first = run_grpo(model, tok, ds, _cfg(tmp_path, max_completion_length=8, save_strategy="steps", save_steps=1))
    assert first.global_step == 2 and (tmp_path / "run" / "checkpoint-2").is_dir()
    model, tok = _model(tiny_dir)
    second = run_grpo(model, tok, ds, _cfg(tmp_path, max_completion_length=8, save_strategy="steps", save_steps=1, max_steps=3), resume=True)
    assert second.resumed_from.endswith("checkpoint-2")
    assert second.global_step == 3
    assert [r["step"] for r in second.log_history if "reward" in r] == [1, 2, 3]
    assert (tmp_path / "run" / "checkpoint-3").is_dir()


def test_one_episode_per_pass_trains_the_step_a_group_per_pass_trains(tiny_dir, tmp_path):
    """The cpu preset puts one episode through each forward/backward pass and accumulates the group (issue #41: the
    demo's GRPO peak): the same rollouts and the same optimizer step as the whole group in one pass."""
    tasks = generate_tasks("db", 2, seed=1)

    def weights_after(batch: int):
        model, tok = _model(tiny_dir)
        ds, rollout = build_env_dataset(tasks, max_turns=2, max_new_tokens=10)
        cfg = _cfg(tmp_path / str(batch), mode="multi", max_episode_tokens=80, max_steps=1, num_generations=4,
                   per_device_train_batch_size=batch, gradient_accumulation_steps=4 // batch, seed=3)
        res = run_grpo(model, tok, ds, cfg, rollout_func=rollout, reward_funcs=[completion_chars])
        return {n: p.detach().clone() for n, p in res.trainer.model.named_parameters()}

    def completion_chars(completions, **kw):  # differs within a group: every sample has an advantage
        return [float(len(str(c))) for c in completions]

    start = dict(_model(tiny_dir)[0].named_parameters())
    group, single = weights_after(4), weights_after(1)
    assert any(not torch.equal(group[n], start[n]) for n in group)
    for name in group:
        torch.testing.assert_close(single[name], group[name], rtol=1e-4, atol=1e-6, msg=name)

"""GRPO's signal (train/grpo_signal.py, KitGRPOTrainer): uniform groups dropped before any forward or backward
pass, the loss normalised over the kept tokens, the signal metrics and warning, the pre-screen, and the template
check. Scripted rollouts (fixed token ids and rewards) make the trainer tests exact and fast."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from openmanus_lite.envs import generate_tasks  # noqa: E402
from openmanus_lite.models import build_tiny_model, load_model, load_tokenizer, qwen25_chat_template  # noqa: E402
from openmanus_lite.train import grpo_signal  # noqa: E402
from openmanus_lite.train.grpo import GRPORunConfig, build_env_dataset, import_trl, kit_trainer_class, run_grpo  # noqa: E402

import_trl()


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny_signal"), seed=0)


# --------------------------------------------------------------------------- groups


def test_group_signal_keeps_the_groups_whose_rewards_differ():
    sig = grpo_signal.group_signal([1, 1, 0, 1, 0, 0, math.nan, math.nan, 0.5, 0.5 + 1e-9], group_size=2)
    assert sig.keep == [False, True, False, False, False] and sig.kept_rows == [2, 3]
    assert sig.uniform_rewards[:2] == [1.0, 0.0] and math.isnan(sig.uniform_rewards[2])
    m = sig.metrics(dropping=True)
    assert m["signal/group_share"] == 0.2 and m["signal/groups_dropped"] == 4 and m["signal/samples_kept"] == 2
    assert sig.metrics(dropping=False)["signal/groups_dropped"] == 0  # reported, not dropped
    text = sig.warning(below=0.5)
    assert "only 1 of 5 groups" in text and "1 with every sample at reward 0" in text and "num_generations" in text
    assert "prescreen_tasks" in text and sig.warning(below=0.2) is None
    with pytest.raises(ValueError):
        grpo_signal.group_signal([1, 0, 1], group_size=2)


def test_rounds_join_into_one_steps_signal():
    a, b = grpo_signal.group_signal([1, 1, 0, 1], 2), grpo_signal.group_signal([0, 0], 2)
    both = a + b
    assert (both.groups, both.kept_groups, both.uniform_rewards) == (3, 1, [1.0, 0.0])
    assert both.metrics(dropping=True)["signal/samples_dropped"] == 4.0
    with pytest.raises(ValueError, match="groups of 2 and 4 samples do not join"):
        a + grpo_signal.group_signal([0, 1, 0, 1], 4)


def test_split_rows_spreads_kept_rows_and_cuts_their_padding():
    batch = {"prompt_ids": torch.tensor([[0, 5], [0, 6], [7, 8]]), "prompt_mask": torch.tensor([[0, 1], [0, 1], [1, 1]]),
             "completion_ids": torch.tensor([[1, 2, 0], [3, 0, 0], [4, 5, 6]]),
             "completion_mask": torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1]]),
             "advantages": torch.tensor([0.5, -0.5, 1.0]), "num_items_in_batch": torch.tensor(6)}
    kept = grpo_signal.select_rows(batch, [0, 1])
    assert kept["num_items_in_batch"].item() == 3 and kept["advantages"].tolist() == [0.5, -0.5]
    parts = grpo_signal.split_rows(kept, 3)
    assert [grpo_signal.batch_rows(p) for p in parts] == [1, 0, 1]
    assert parts[0]["prompt_ids"].tolist() == [[5]] and parts[0]["completion_ids"].tolist() == [[1, 2]]
    assert parts[2]["completion_ids"].tolist() == [[3]] and parts[2]["num_items_in_batch"].item() == 3


# --------------------------------------------------------------------------- the trainer


class ScriptedRollout:
    """A rollout_func with fixed episodes: prompt "mixed ..." samples get lengths 3 and 6 (each with one environment
    token), the others lengths 4 and 5; rewards come from `reward` below."""

    def __init__(self, tokenizer):
        self.eos = tokenizer.eos_token_id

    def __call__(self, prompts, trainer):
        lengths = {True: [3, 6], False: [4, 5]}
        out = {"prompt_ids": [], "completion_ids": [], "logprobs": None, "env_mask": []}
        for i, p in enumerate(prompts):
            n = lengths[p.startswith("mixed")][i % 2]
            out["prompt_ids"].append([11, 12, 13])
            out["completion_ids"].append([20 + k for k in range(n - 1)] + [self.eos])
            out["env_mask"].append([1] * (n - 2) + [0, 1])  # one environment token before the end token
        return out


def reward(prompts, completions, **_):
    """1.0 for every sample of a uniform prompt; alternately 1.0 and 0.0 for a "mixed" one."""
    return [float(i % 2 == 0) if p.startswith("mixed") else 1.0 for i, p in enumerate(prompts)]


def _cfg(tmp_path, **kw):
    base = dict(output_dir=str(tmp_path / "run"), mode="multi", max_episode_tokens=16, max_steps=1, num_generations=2,
                per_device_train_batch_size=2, gradient_accumulation_steps=2, learning_rate=1e-2, save_strategy="no",
                disable_tqdm=True, logging_steps=1, report_to="none")
    return GRPORunConfig(**{**base, **kw})


def _dataset(prompts):
    from datasets import Dataset

    return Dataset.from_dict({"prompt": list(prompts)})


@pytest.mark.parametrize("drop", [True, False])
def test_a_uniform_group_triggers_no_backward_pass(tiny_dir, tmp_path, monkeypatch, drop):
    from accelerate import Accelerator

    backward = Accelerator.backward
    calls = []
    monkeypatch.setattr(Accelerator, "backward", lambda self, loss, **kw: (calls.append(1), backward(self, loss, **kw)))
    model, tok = load_model(tiny_dir, backend="unsloth")
    before = [p.detach().clone() for p in model.parameters()]
    res = run_grpo(model, tok, _dataset(["uniform task"] * 4), _cfg(tmp_path, drop_uniform_groups=drop),
                   rollout_func=ScriptedRollout(tok), reward_funcs=[reward])
    log = [r for r in res.log_history if "reward" in r][0]
    assert res.global_step == 1 and log["signal/group_share"] == 0.0
    if drop:  # both groups of the generation batch agree: no micro-step runs a forward or backward pass
        assert calls == [] and log["signal/groups_dropped"] == 2 and log["signal/backward_skipped"] == 2
        assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    else:  # the stock trainer pays a backward pass per micro-step for nothing
        assert len(calls) == 2 and log["signal/groups_dropped"] == 0


def test_the_loss_is_normalised_over_the_kept_groups_tokens(tiny_dir, tmp_path):
    model, tok = load_model(tiny_dir, backend="unsloth")
    cfg = _cfg(tmp_path, drop_uniform_groups=True, gradient_accumulation_steps=1, per_device_train_batch_size=4)
    trainer = kit_trainer_class()(model=model, processing_class=tok, reward_funcs=[reward], args=cfg,
                                  train_dataset=_dataset(["uniform task", "mixed task"]),
                                  rollout_func=ScriptedRollout(tok))
    scored = []
    score = trainer._generate_and_score_completions
    trainer._generate_and_score_completions = lambda inputs: scored.append(score(inputs)) or scored[-1]
    trainer.current_gradient_accumulation_steps = 1
    model.train()
    batch = trainer._prepare_inputs([{"prompt": "uniform task"}] * 2 + [{"prompt": "mixed task"}] * 2)
    full = scored[0]
    tokens = (full["completion_mask"] * full["tool_mask"]).sum(1).tolist()
    assert tokens == [3, 4, 2, 5] and full["num_items_in_batch"].item() == 14  # TRL's count: every group's tokens
    adv = full["advantages"].tolist()
    assert adv[:2] == [0.0, 0.0] and adv[2] > 0 > adv[3]
    # on-policy with beta=0 the per-token loss is -advantage: summed over the kept tokens, over their count
    hand = -(adv[2] * tokens[2] + adv[3] * tokens[3]) / (tokens[2] + tokens[3])
    assert grpo_signal.batch_rows(batch) == 2 and batch["num_items_in_batch"].item() == 7
    loss = trainer.compute_loss(model, batch)
    assert loss.item() == pytest.approx(hand, rel=1e-5)
    assert hand != pytest.approx(hand * 7 / 14)  # TRL's normaliser over all tokens would halve it


# --------------------------------------------------------------------------- pre-screen


def test_prescreen_plays_k_episodes_per_task_and_keeps_the_mixed_ones(tiny_dir):
    screen = grpo_signal.ScreenResult(k=4, successes={"a": 0, "b": 2, "c": 4, "d": 1})
    assert screen.kept == {"b": 2, "d": 1}
    assert screen.summary() == "pre-screen (4 samples per task): 2 of 4 tasks kept, 1 always solved, 1 never solved"
    model, tok = load_model(tiny_dir, backend="unsloth")
    tasks = generate_tasks("db", 2, seed=0)
    _, rollout = build_env_dataset(tasks, max_turns=2, max_new_tokens=6)
    result = grpo_signal.prescreen_tasks(model, tok, tasks, rollout, k=3, max_completion_tokens=120)
    assert result.k == 3 and set(result.successes) == {t.id for t in tasks}
    assert all(0 <= s <= 3 for s in result.successes.values())
    assert result.kept == {t: s for t, s in result.successes.items() if 0 < s < 3}


# --------------------------------------------------------------------------- template check


THOUGHT_DROPPING = (
    "{%- set last = namespace(user=0) -%}"
    "{%- for m in messages %}{% if m.role == 'user' %}{% set last.user = loop.index0 %}{% endif %}{% endfor -%}"
    "{%- for m in messages -%}<|im_start|>{{ m.role }}\n"
    "{% if m.role == 'assistant' and loop.index0 < last.user %}{{ m.content.split('Action:')[-1] | trim }}"
    "{% else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor -%}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif -%}"
)
"""ChatML that drops the thoughts of assistant turns before the last user message (as Qwen3's drops reasoning)."""


def test_template_check_passes_the_kits_template_and_names_where_a_dropping_one_differs(tiny_dir):
    tok = load_tokenizer(tiny_dir)
    assert tok.chat_template == qwen25_chat_template()  # the kit's template is TRL's Qwen2.5 one
    grpo_signal.check_chat_template(tok)
    grpo_signal.check_chat_template(tok, system_prompt="You are an agent.")
    tok.chat_template = THOUGHT_DROPPING
    with pytest.raises(grpo_signal.TemplateDriftError, match=r"drift at token \d+ of \d+ \(in assistant turn 1, token 0\)"):
        grpo_signal.check_chat_template(tok)
    # the same template without the dropping passes: the check is about earlier turns, not about ChatML details
    tok.chat_template = THOUGHT_DROPPING.replace("m.content.split('Action:')[-1] | trim", "m.content")
    grpo_signal.check_chat_template(tok)
    qwen3 = (Path(import_trl().__file__).parent / "chat_templates" / "qwen3.jinja").read_text()
    tok.chat_template = qwen3  # an empty <think> block on the last turn only, dropped once a user turn follows
    with pytest.raises(grpo_signal.TemplateDriftError, match="not prefix-preserving"):
        grpo_signal.check_chat_template(tok)


def test_multi_turn_training_refuses_a_drifting_template(tiny_dir, tmp_path):
    model, tok = load_model(tiny_dir, backend="unsloth")
    tok.chat_template = THOUGHT_DROPPING
    with pytest.raises(grpo_signal.TemplateDriftError):
        run_grpo(model, tok, _dataset(["uniform task"] * 2), _cfg(tmp_path), rollout_func=ScriptedRollout(tok),
                 reward_funcs=[reward])


# --------------------------------------------------------------------------- step-level credit (GiGPO)


def test_anchor_states_credit_the_shorter_path_inside_an_all_success_group():
    """Two successful episodes of one task: A wanders (s0 -> s1 -> s2 -> answer), B answers from s1. Episode rewards
    agree, so only the turns carry signal: from s0 and from s1, B's turn is nearer success; s2 only A reached."""
    from openmanus_lite.schema import Task
    from openmanus_lite.train.env_rollout import state_key

    task = Task(id="t", domain="db", instruction="x")
    s0, s1, s2 = state_key(task, []), state_key(task, ["rows: 3"]), state_key(task, ["rows: 3", "error"])
    assert s0 != s1 != s2 and state_key(task, ["rows: 3"]) == s1
    steps = grpo_signal.step_advantages([[s0, s1, s2], [s0, s1]], [1.0, 1.0], group_size=2, discount=0.5)
    # returns: A 0.25, 0.5, 1.0; B 0.5, 1.0 -> anchor s0 {0.25, 0.5}, s1 {0.5, 1.0}: each centred and scaled to -1/+1
    assert steps == [[-1.0, -1.0, 0.0], [1.0, 1.0]]
    assert grpo_signal.step_advantages([[s0], [s0]], [0.0, 0.0], group_size=2) == [[0.0], [0.0]]  # failures agree
    sig = grpo_signal.group_signal([1.0, 1.0], group_size=2, step_signal=[True])
    assert sig.keep == [True] and sig.uniform_rewards == []
    adv = grpo_signal.token_advantages(torch.tensor([0.5, -0.5]), steps, [[1, 1, 0, 1, 0, 1, 1], [1, 0, 0, 1]],
                                       width=7, weight=0.1)
    assert adv[0].tolist() == pytest.approx([0.4, 0.4, 0.5, 0.4, 0.5, 0.5, 0.5])
    assert adv[1].tolist() == pytest.approx([-0.4, -0.5, -0.5, -0.4, -0.5, -0.5, -0.5])


def test_rollout_episodes_record_the_state_each_turn_starts_from(tiny_dir):
    from openmanus_lite.engine.generation import render_prompts
    from openmanus_lite.train.env_rollout import run_episode_tokens, state_key

    model, tok = load_model(tiny_dir, backend="unsloth")
    task = generate_tasks("db", 1, seed=0)[0]
    _, rollout = build_env_dataset([task], max_turns=2)
    eps = run_episode_tokens(model, tok, [task, task], render_prompts(tok, [rollout.prompt_for(task)] * 2),
                             max_turns=2, max_new_tokens=6, max_completion_tokens=200)
    for ep in eps:
        observations = [m["content"] for m in ep.messages if m["role"] == "user"]
        assert len(ep.states) == ep.num_turns == 2
        assert ep.states == [state_key(task, []), state_key(task, observations[:1])]


def test_step_credit_keeps_an_all_success_group_and_trains_per_token(tiny_dir, tmp_path):
    class SteppedRollout(ScriptedRollout):
        """Both samples succeed; the first in two turns (s0, s1), the second in three (s0, s1, s2)."""

        def __call__(self, prompts, trainer):
            out = super().__call__(prompts, trainer)  # completion lengths 4 and 5
            out["step_states"] = [["s0", "s1"], ["s0", "s1", "s2"]] * (len(prompts) // 2)
            out["env_mask"] = [[1, 0, 1, 1], [1, 0, 1, 0, 1]] * (len(prompts) // 2)
            return out

    model, tok = load_model(tiny_dir, backend="unsloth")
    cfg = _cfg(tmp_path, drop_uniform_groups=True, gradient_accumulation_steps=1, step_advantage_weight=0.5,
               step_discount=0.5)
    trainer = kit_trainer_class()(model=model, processing_class=tok, reward_funcs=[reward], args=cfg,
                                  train_dataset=_dataset(["uniform task"]), rollout_func=SteppedRollout(tok))
    trainer.current_gradient_accumulation_steps = 1
    model.train()
    batch = trainer._prepare_inputs([{"prompt": "uniform task"}] * 2)
    assert grpo_signal.batch_rows(batch) == 2  # the rewards agree, the turns do not: the group is kept
    # returns (discount 0.5): short 0.5, 1; long 0.25, 0.5, 1 -> anchors s0 and s1 give the short path +1, the long -1;
    # 0.5 x that on each turn's tokens, environment tokens keep the (zero) episode advantage
    rows = {int(m.sum()): a.tolist() for m, a in zip(batch["completion_mask"], batch["advantages"])}
    assert rows[4] == pytest.approx([0.5, 0.0, 0.5, 0.5, 0.0])
    assert rows[5] == pytest.approx([-0.5, 0.0, -0.5, 0.0, 0.0])
    assert torch.isfinite(trainer.compute_loss(model, batch))
    with pytest.raises(ValueError, match="needs mode 'multi'"):
        run_grpo(model, tok, _dataset(["uniform task"]), _cfg(tmp_path, mode="single", step_advantage_weight=0.5),
                 reward_funcs=[reward])


def test_multi_turn_run_with_dropping_and_step_credit_logs_the_signal_and_warns(tiny_dir, tmp_path, caplog):
    """The real rollout end to end: the random tiny model solves nothing, so every group agrees, every micro-step
    skips its backward pass, and the warning says which reward the groups agreed on and what to change."""
    model, tok = load_model(tiny_dir, backend="unsloth")
    tasks = generate_tasks("db", 2, seed=1)
    ds, rollout = build_env_dataset(tasks, max_turns=2, max_new_tokens=6)
    cfg = _cfg(tmp_path, max_episode_tokens=120, drop_uniform_groups=True, step_advantage_weight=0.2)
    with caplog.at_level("WARNING", logger="openmanus_lite.train.grpo"):
        res = run_grpo(model, tok, ds, cfg, rollout_func=rollout, reward_funcs=None)
    log = [r for r in res.log_history if "reward" in r][0]
    assert log["reward"] == 0.0 and log["signal/group_share"] == 0.0 and log["signal/backward_skipped"] == 2
    assert log["signal/samples_dropped"] == 4 and "rollout/tokens_per_s" in log
    assert "only 0 of 2 groups" in caplog.text and "every sample at reward 0" in caplog.text


def test_dropped_groups_are_refilled_from_the_training_prompts_within_a_bound(tiny_dir, tmp_path):
    model, tok = load_model(tiny_dir, backend="unsloth")

    def prepared(prompts, rounds):
        cfg = _cfg(tmp_path, drop_uniform_groups=True, refill_rounds=rounds, gradient_accumulation_steps=1,
                   per_device_train_batch_size=4)
        trainer = kit_trainer_class()(model=model, processing_class=tok, reward_funcs=[reward], args=cfg,
                                      train_dataset=_dataset(prompts), rollout_func=ScriptedRollout(tok))
        calls = []
        score = trainer._generate_and_score_completions
        trainer._generate_and_score_completions = lambda rows: calls.append(len(rows)) or score(rows)
        model.train()
        first = [{"prompt": "uniform task"}] * 2 + [{"prompt": "mixed task"}] * 2  # one group agrees, one differs
        return trainer._prepare_inputs(first), calls, trainer

    batch, calls, trainer = prepared(["mixed task"], rounds=3)
    assert calls == [4, 2]  # one refill round, for the one dropped group
    assert grpo_signal.batch_rows(batch) == 4 and trainer._metrics["train"]["signal/refill_rounds"] == [1.0]
    metrics = trainer._metrics["train"]  # one entry for the step: both rounds, 3 groups of which 2 had signal
    assert (metrics["signal/groups_kept"], metrics["signal/groups_dropped"], metrics["signal/samples_dropped"]) == (
        [2.0], [1.0], [2.0]) and metrics["signal/group_share"] == [2 / 3]
    tokens = (batch["completion_mask"] * batch["tool_mask"]).sum(1).sort().values.tolist()
    assert tokens == [2, 2, 5, 5] and batch["num_items_in_batch"].item() == 14  # two mixed groups, all their tokens
    batch, calls, _ = prepared(["uniform task"], rounds=2)
    assert calls == [4, 2, 2] and grpo_signal.batch_rows(batch) == 2  # the bound: two rounds, then train on what is kept


# --------------------------------------------------------------------------- the signal, visible


def test_domain_success_reads_the_rollout_columns_or_the_tool_environments():
    from types import SimpleNamespace as NS

    rows = [{"domain": "db", "env_success": True}, {"domain": "db", "env_success": False},
            {"domain": "kg", "env_success": False}, {"domain": "kg"}]
    assert grpo_signal.domain_success(rows) == {"success/db": 0.5, "success/kg": 0.0}
    assert grpo_signal.domain_success(rows, [NS(domain="os", env_success=True)]) == {"success/os": 1.0}
    assert grpo_signal.domain_success([{"domain": "db", "solution": "3"}]) == {}  # single-turn rows: no verdict



def test_reward_at_ends_averages_up_to_half_the_run_at_each_end():
    from openmanus_lite.train.grpo import reward_at_ends

    log = [{"step": s, "reward": r} for s, r in enumerate([1.0, 0.5, 0.5, 1.0, 0.75, 0.25, 0.0], 1)]
    assert reward_at_ends(log + [{"step": 7, "train_loss": 0.1}], steps=10) == (2 / 3, 1 / 3, 3)
    assert reward_at_ends(log, steps=2) == (0.75, 0.125, 2)
    assert reward_at_ends(log[:1]) == (1.0, 1.0, 1) and reward_at_ends([{"step": 1, "loss": 0.0}]) is None

def test_reward_curves_plot_the_signal_and_the_success_per_domain():
    import matplotlib

    from openmanus_lite.train.grpo import plot_reward_curves, reward_curves

    matplotlib.use("Agg")
    log = [{"step": s, "reward": 0.5, "rewards/env_outcome/mean": 0.5, "domain/db/env_outcome": 0.4,
            "success/db": 0.25 * s, "success/kg": 0.5, "signal/group_share": 0.5, "signal/groups_kept": 1.0,
            "signal/samples_kept": 4.0, "signal/samples_dropped": 4.0, "guide/mean_prefix_turns": 2.0,
            "guide/guided_share": 1.0} for s in (1, 2)] + [{"step": 2, "train_loss": 0.1}]
    curves = reward_curves(log)
    assert curves["success/db"].tolist() == [0.25, 0.5] and {"signal/group_share", "db/env_outcome"} <= set(curves)
    fig = plot_reward_curves(log)
    labels = [[line.get_label() for line in ax.lines] for ax in fig.axes]
    assert labels[0] == ["reward", "env_outcome"]
    assert sorted(labels[1]) == ["db/env_outcome", "success/db", "success/kg"]
    assert sorted(labels[2]) == ["guide/guided_share", "signal/group_share"]  # shares
    assert sorted(labels[3]) == ["guide/mean_prefix_turns", "signal/samples_dropped", "signal/samples_kept"]  # counts


def test_clip_higher_warns_where_every_batch_trains_on_policy(tmp_path):
    # one generation batch per optimizer step (TRL's default): the importance ratio is exactly 1, nothing is clipped
    common = dict(output_dir=str(tmp_path), num_generations=4, per_device_train_batch_size=1,
                  gradient_accumulation_steps=8, use_vllm=False)
    with pytest.warns(UserWarning, match="epsilon_high=0.28 changes nothing here"):
        assert GRPORunConfig(epsilon_high=0.28, **common).trains_on_policy
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        reused = GRPORunConfig(epsilon_high=0.28, num_iterations=2, **common)  # the second pass is off-policy
        assert not reused.trains_on_policy
        GRPORunConfig(**common)  # epsilon_high unset: nothing to warn about

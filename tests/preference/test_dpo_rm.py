"""DPO, the outcome reward model and the process reward model on the tiny model (CPU).

A few optimizer steps each through the real trainers (TRL DPOTrainer on the Unsloth/PEFT
model, TRL RewardTrainer, transformers Trainer with a token-classification head), then the
scorers plugged into search.py and the reward registry. Data come from the toy counting
environment of test_pairs (short episodes keep every step fast).
"""

from __future__ import annotations

import json
import math

import pytest
from test_pairs import TASK, play  # also registers the toy 'game' environment

from openmanus_lite.envs import generate_tasks
from openmanus_lite.models import LoraSpec
from openmanus_lite.preference import pairs as P

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def toy_data():
    tasks = generate_tasks("game", 6, seed=0) + generate_tasks("game", 4, seed=0, difficulty="medium")
    return P.build_preference_data(tasks, policy="random", samples_per_task=2, mistakes_per_task=3, seed=0)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, toy_data):
    from openmanus_lite.models import build_tiny_model

    system = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."  # the template's default
    texts = [system] * 5 + [m.content for e in toy_data.episodes[:20] for m in e.messages]
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny"), texts=texts, vocab_size=600, seed=0, hidden_size=64))


# --------------------------------------------------------------------------- DPO


def test_dpo_trains_a_lora_adapter_from_a_checkpoint_and_saves_a_loadable_policy(tiny, toy_data, tmp_path):
    import torch

    from openmanus_lite.models import load_model
    from openmanus_lite.preference.dpo import run_dpo
    from openmanus_lite.train.presets import get_preset
    from openmanus_lite.train.sft import save_merged

    s = get_preset("cpu").dpo_config(max_steps=3, per_device_train_batch_size=4, gradient_accumulation_steps=1,
                                     learning_rate=5e-3, lora_r=4,
                                     lora_alpha=8, logging_steps=1, max_length=512)
    res = run_dpo(tiny, toy_data.step_pairs, s, output_dir=tmp_path / "trainer")
    assert res.steps == 3 and res.data_counts["kept"] == len(toy_data.step_pairs)
    logged = [e for e in res.log if "loss" in e]
    assert len(logged) == 3 and all("rewards/margins" in e for e in logged)
    assert abs(logged[0]["loss"] - 0.6931) < 1e-3  # policy == reference at step 0
    lora_b = [p for n, p in res.model.named_parameters() if "lora_B" in n]
    assert lora_b and any(p.abs().sum() > 0 for p in lora_b)  # the adapter moved

    out = save_merged(res.model, res.tokenizer, tmp_path / "policy")
    model, tok = load_model(out, backend="hf")
    start, _ = load_model(tiny, backend="hf")
    ids = tok.apply_chat_template(toy_data.step_pairs[0]["prompt"], add_generation_prompt=True, return_tensors="pt",
                                  return_dict=True)["input_ids"]
    with torch.no_grad():
        assert not torch.allclose(model(ids).logits, start(ids).logits)


def test_resolve_checkpoint_merges_an_sft_adapter_once(tiny, tmp_path):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from openmanus_lite.preference.dpo import resolve_checkpoint

    base = AutoModelForCausalLM.from_pretrained(tiny)
    peft = get_peft_model(base, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    adapter = tmp_path / "sft-adapter"
    peft.save_pretrained(adapter)
    merged = resolve_checkpoint(adapter)
    assert merged != str(adapter) and resolve_checkpoint(adapter) == merged
    m = AutoModelForCausalLM.from_pretrained(merged)
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        assert torch.allclose(m(ids).logits, peft(ids).logits, atol=1e-5)
    assert resolve_checkpoint(tiny) == tiny


# --------------------------------------------------------------------------- ORM


@pytest.fixture(scope="module")
def orm(tiny, toy_data, tmp_path_factory):
    from openmanus_lite.preference.reward_model import train_orm
    from openmanus_lite.train.presets import get_preset

    s = get_preset("cpu").reward_config(max_steps=16, per_device_train_batch_size=8, gradient_accumulation_steps=1,
                                        learning_rate=3e-3, lora_r=0,
                                        logging_steps=4, max_length=512)
    rm, report = train_orm(tiny, toy_data.trajectory_pairs, s, output_dir=tmp_path_factory.mktemp("orm"))
    return rm, report


def test_orm_learns_the_training_pairs(orm, toy_data):
    from openmanus_lite.preference.reward_model import pair_accuracy

    rm, report = orm
    assert report.steps == 16
    losses = [e["loss"] for e in report.log if "loss" in e]
    assert losses[-1] < losses[0]
    acc = pair_accuracy(rm, toy_data.trajectory_pairs)
    assert acc["n"] == len(toy_data.trajectory_pairs) and acc["accuracy"] > 0.6, acc


def test_orm_saves_loads_and_scores_identically(orm, toy_data, tmp_path):
    from openmanus_lite.preference.reward_model import OutcomeRewardModel, load_reward_model

    rm, _ = orm
    back = load_reward_model(rm.save(tmp_path / "orm"))
    assert isinstance(back, OutcomeRewardModel)
    convs = [r["prompt"] + r["chosen"] for r in toy_data.trajectory_pairs[:4]]
    assert back.raw_scores(convs) == pytest.approx(rm.raw_scores(convs), abs=1e-5)
    assert all(0 < v < 1 for v in back.score_conversations(convs))


def test_orm_selects_best_of_n_in_search(orm):
    from openmanus_lite import search

    rm, _ = orm
    res = search.run_search("best_of_n", TASK, "random", search.Budget(calls=24), n=6, scorer=rm, seed=0)
    assert res.episodes >= 2 and res.replay_matches
    # the chosen episode is the finished one the ORM values most
    assert res.value == pytest.approx(rm(res.search_history))
    view = search.View("count = 1", False, {})
    assert rm([{"role": "user", "content": "x"}], view) == 0.0  # unfinished states are not outcomes


def test_orm_is_a_grpo_reward_in_the_registry(orm, tmp_path):
    from openmanus_lite.rewards import get_reward_func

    rm, _ = orm
    folder = rm.save(tmp_path / "orm")
    reward = get_reward_func("orm", model_path=str(folder))
    good, bad = play(TASK, ["inc", "inc", "answer(2)"]).to_messages(), play(TASK, ["inc", "answer(9)"]).to_messages()
    prompts = [good[:3], bad[:3]]
    completions = [good[3:], bad[3:]]
    values = reward(prompts=prompts, completions=completions, trainer_state=None)
    assert values == pytest.approx(rm.score_conversations([good, bad]), abs=1e-5)
    with pytest.raises(ValueError, match="model_path"):
        get_reward_func("orm")


# --------------------------------------------------------------------------- PRM


def test_step_positions_sit_on_turn_ends(tiny):
    from openmanus_lite.models import load_tokenizer
    from openmanus_lite.preference.reward_model import step_positions

    tok = load_tokenizer(tiny)
    msgs = play(TASK, ["inc", "dec", "inc", "inc", "answer(2)"]).to_messages()
    ids, positions = step_positions(tok, msgs)
    assert len(positions) == 5
    for k, pos in enumerate(positions):
        assert all(tok.convert_ids_to_tokens(ids[p]) == "<|im_end|>" for p in pos)
        assert len(pos) == (2 if k < 4 else 1)  # the final turn has no observation after it
        assert tok.decode(ids[: pos[0] + 1]).endswith(msgs[2 * k + 1]["content"] + "<|im_end|>")
    _, cut = step_positions(tok, msgs, max_length=positions[2][0] + 1)
    assert len(cut) == 3 and cut[-1] == positions[2][:1]


@pytest.fixture(scope="module")
def prm(tiny, toy_data, tmp_path_factory):
    from openmanus_lite.preference.reward_model import train_prm
    from openmanus_lite.train.presets import get_preset

    s = get_preset("cpu").reward_config(max_steps=12, per_device_train_batch_size=8, gradient_accumulation_steps=1,
                                        learning_rate=3e-3, lora_r=0,
                                        logging_steps=1, max_length=512)
    return train_prm(tiny, toy_data.prm, s, output_dir=tmp_path_factory.mktemp("prm"))


def test_prm_trains_on_step_labels_and_round_trips(prm, toy_data, tmp_path):
    from openmanus_lite.preference.reward_model import ProcessRewardModel, load_reward_model, step_accuracy

    rm, report = prm
    assert report.steps == 12 and report.data_counts["rows"] == len(toy_data.prm)
    losses = [e["loss"] for e in report.log if "loss" in e]
    assert losses[-1] < min(losses[0], math.log(2))  # from chance (binary step labels) to below it
    acc = step_accuracy(rm, toy_data.prm)
    assert acc["n"] == sum(len(r["step_labels"]) for r in toy_data.prm)
    assert acc["auc"] is not None and acc["auc"] > 0.5, acc
    back = load_reward_model(rm.save(tmp_path / "prm"))
    assert isinstance(back, ProcessRewardModel) and back.aggregate == "min"
    convs = [r["messages"] for r in toy_data.prm[:3]]
    flat = [p for ps in back.step_probabilities(convs) for p in ps]
    assert flat == pytest.approx([p for ps in rm.step_probabilities(convs) for p in ps], abs=1e-5)


def test_prm_guides_beam_search(prm):
    from openmanus_lite import search

    rm, _ = prm
    res = search.run_search("beam", TASK, "random", search.Budget(calls=30), beam_width=2, k=3, scorer=rm, seed=1)
    assert res.replay_matches and res.nodes > 0
    probs = rm.step_probabilities([res.search_history])[0]
    assert len(probs) == len(res.actions)
    assert res.value == pytest.approx(min(probs))


@pytest.mark.parametrize("kind", ["orm", "prm"])
def test_lora_reward_heads_save_as_adapters_and_reload(kind, tiny, toy_data, tmp_path):
    from openmanus_lite.preference.reward_model import RMSettings, load_reward_model, train_orm, train_prm

    s = RMSettings(max_steps=1, batch_size=4, lora=LoraSpec(r=4, alpha=8), max_length=512)  # the old names still work
    assert (s.per_device_train_batch_size, s.lora_r, s.lora_alpha) == (4, 4, 8)
    if kind == "orm":
        rm, _ = train_orm(tiny, toy_data.trajectory_pairs[:8], s, output_dir=tmp_path / "t")
    else:
        rm, _ = train_prm(tiny, toy_data.prm[:8], s, output_dir=tmp_path / "t")
    folder = rm.save(tmp_path / kind)
    assert (folder / "adapter_config.json").is_file()  # the adapter and the head, not a copy of the base model
    back = load_reward_model(folder)
    convs = [r["messages"] for r in toy_data.prm[:3]]
    assert back.score_conversations(convs) == pytest.approx(rm.score_conversations(convs), abs=1e-5)


# --------------------------------------------------------------------------- CLI


def test_cli_builds_data_trains_a_prm_and_evaluates_it(tiny, tmp_path, capsys):
    from openmanus_lite.cli import main

    data = tmp_path / "data"
    # os, not the toy 'game': every toy task is the same task, so none is left after the held-out ones (splits.py)
    assert main(["dpo", "pairs", "--domains", "game", "--tasks", "4", "--out", str(data)]) == 2
    assert "no training tasks left: all 4 generated tasks of ['game'] equal held-out tasks" in capsys.readouterr().err
    assert main(["dpo", "pairs", "--domains", "os", "--tasks", "4", "--policy", "random", "--mistakes", "2",
                 "--out", str(data)]) == 0
    counts = json.loads((data / "counts.json").read_text())
    assert counts["episodes"]["expert"] == 4 and (data / "step_pairs.jsonl").is_file()
    out = tmp_path / "prm"
    assert main(["dpo", "train-prm", "--data", str(data), "--model", tiny, "--steps", "2", "--lora-r", "0",
                 "--batch-size", "4", "--out", str(out)]) == 0
    assert (out / "openmanus_rm.json").is_file() and (out / "train_summary.json").is_file()
    capsys.readouterr()
    assert main(["dpo", "eval-rm", "--rm", str(out), "--data", str(data)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["trajectory_pairs"]["n"] == counts["trajectory_pairs"]["pairs"] and "steps" in report

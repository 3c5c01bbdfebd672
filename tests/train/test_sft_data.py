"""The SFT data builder: loss exactly on trained assistant turns (checked on real rows), truncation, mix."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")

from openmanus_lite.engine.generation import render_prompts  # noqa: E402
from openmanus_lite.models import build_tiny_model, load_tokenizer  # noqa: E402
from openmanus_lite.schema import Trajectory, Turn  # noqa: E402
from openmanus_lite.train.data import (  # noqa: E402
    build_sft_dataset,
    encode_trajectory,
    load_trajectories,
    loss_token_texts,
    mix_domains,
)

RAW_WITH_FLAGS = ["agentinstruct/db.jsonl", "agentinstruct/kg.jsonl", "agentinstruct/alfworld.jsonl",
                  "agentinstruct/webshop.jsonl", "agenttraj_l/sample.jsonl"]
ROLE = {"human": "user", "gpt": "assistant", "system": "system"}


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return load_tokenizer(build_tiny_model(tmp_path_factory.mktemp("tiny_tok")))


def _raw_trajectories(real_samples) -> list[Trajectory]:
    """A small local reading of the raw rows: train = a gpt turn with loss true (the dataset's own flag)."""
    out = []
    for rel in RAW_WITH_FLAGS:
        for n, line in enumerate((real_samples / rel).read_text().splitlines()):
            row = json.loads(line)
            turns = [Turn(ROLE[c["from"]], c["value"], c["from"] == "gpt" and c.get("loss") is True)
                     for c in row["conversations"]]
            out.append(Trajectory(f"{rel}:{n}", "raw", "other", turns))
    return out


def _check_loss_tokens(tok, traj: Trajectory):
    row, status = encode_trajectory(tok, traj, max_length=10**6)
    assert status == "ok"
    expected = [t.content + "<|im_end|>" for t in traj.messages if t.role == "assistant" and t.train]
    assert loss_token_texts(tok, row) == expected
    # nothing lost or added: all tokens decode to the template's rendering of the conversation
    rendered = tok.apply_chat_template(traj.to_messages(), tokenize=False)
    assert tok.decode(row["input_ids"], skip_special_tokens=False) == rendered
    return row


def test_loss_tokens_follow_the_raw_flags_of_real_rows(real_samples, tok):
    trajs = _raw_trajectories(real_samples)
    assert len(trajs) >= 50
    untrained_gpt = 0
    for traj in trajs:
        row = _check_loss_tokens(tok, traj)
        untrained_gpt += sum(1 for t in traj.messages if t.role == "assistant" and not t.train)
        # every loss token lies inside a trained assistant turn: their count is the sum of those turns
        n_expected = sum(len(tok(t.content + "<|im_end|>", add_special_tokens=False)["input_ids"])
                         for t in traj.messages if t.role == "assistant" and t.train)
        assert sum(row["assistant_masks"]) == n_expected
    assert untrained_gpt >= 50  # the rows really exercise loss=false assistant turns ("Ok.", few-shot demos)


def test_loss_tokens_of_converted_real_rows(real_samples, tok):
    sources = pytest.importorskip("openmanus_lite.data.sources")
    ai = sources.get_source("agentinstruct")
    n = 0
    for raw in ai.load(str(real_samples / "agentinstruct")):
        traj = ai.convert(raw)
        flags = [c.get("loss") is True for c in raw.data["conversations"] if c["from"] == "gpt"]
        trained = [t.train for t in traj.messages if t.role == "assistant"]
        if len(flags) == len(trained):
            assert trained == flags  # the converter kept the dataset's flags turn by turn
        _check_loss_tokens(tok, traj)
        n += 1
    assert n >= 30


def test_trained_turn_tokens_match_what_generation_sees(tok):
    msgs = [
        {"role": "user", "content": "List files in /tmp, then count them."},
        {"role": "assistant", "content": "Think: look first.\nAct: bash\n```bash\nls /tmp\n```"},
        {"role": "user", "content": "a.txt\n  b 2.txt\n"},
        {"role": "assistant", "content": "Think: 2 files.\nAct: answer(2)"},
    ]
    traj = Trajectory("t", "synth", "os", [Turn(m["role"], m["content"], m["role"] == "assistant") for m in msgs])
    row, _ = encode_trajectory(tok, traj, 10**6)
    starts = [i for i, m in enumerate(row["assistant_masks"]) if m and (i == 0 or not row["assistant_masks"][i - 1])]
    for k, start in zip((1, 3), starts):
        assert render_prompts(tok, [msgs[:k]])[0] == row["input_ids"][:start]


def _long_traj(n_turns: int, train_first: bool = True) -> Trajectory:
    turns = [Turn("user", "Task: find the mug. " * 3)]
    for i in range(n_turns):
        turns.append(Turn("assistant", f"Think: step {i}.\nAct: go to shelf {i}", train=(i > 0 or train_first)))
        turns.append(Turn("user", f"On the shelf {i}, you see nothing."))
    return Trajectory(f"long{n_turns}", "synth", "household", turns)


def test_truncation_at_a_turn_boundary_and_drop(tok):
    traj = _long_traj(8)
    full, _ = encode_trajectory(tok, traj, 10**6)
    limit = len(full["input_ids"]) // 2
    row, status = encode_trajectory(tok, traj, limit)
    assert status == "truncated" and len(row["input_ids"]) <= limit
    texts = loss_token_texts(tok, row)
    assert 1 <= len(texts) < 8 and texts[-1].endswith("<|im_end|>")
    assert row["assistant_masks"][-1] == 1  # cut right after a trained turn's <|im_end|>
    assert encode_trajectory(tok, traj, limit, overflow="drop") == (None, "too_long")
    assert encode_trajectory(tok, traj, 5) == (None, "too_long")  # not even the first turn fits
    with pytest.raises(ValueError):
        encode_trajectory(tok, traj, limit, overflow="wrap")


def test_build_dataset_counts_everything(tok):
    no_train = Trajectory("nt", "synth", "db", [Turn("user", "hi"), Turn("assistant", "Ok.", False)])
    trajs = [_long_traj(2), _long_traj(3), _long_traj(30), no_train]
    limit = encode_trajectory(tok, _long_traj(3), 10**6)[0]["length"]
    ds, report = build_sft_dataset(trajs, tok, max_length=limit, overflow="truncate")
    assert report.records_in == 4 and report.records_out == 3 and len(ds) == 3
    assert report.truncated == 1 and report.dropped_no_trained_turn == 1 and report.turns_cut > 0
    assert report.loss_tokens == sum(sum(m) for m in ds["assistant_masks"])
    assert set(ds.column_names) >= {"input_ids", "assistant_masks", "length", "domain"}
    assert report.summary().startswith("3/4 conversations kept (1 truncated")
    _, dropped = build_sft_dataset(trajs, tok, max_length=limit, overflow="drop")
    assert dropped.dropped_too_long == 1 and dropped.records_out == 2
    with pytest.raises(ValueError, match="no training rows"):
        build_sft_dataset([no_train], tok)


def test_domain_mix_and_loading(tmp_path):
    trajs = [Trajectory(f"{d}{i}", "s", d, [Turn("user", "q"), Turn("assistant", "a", True)])
             for d, n in (("os", 10), ("db", 2), ("kg", 5)) for i in range(n)]
    mixed, counts = mix_domains(trajs, {"os": 1, "db": 1}, total=8, seed=0)
    assert len(mixed) == 8 and sum(t.domain == "db" for t in mixed) == 4
    assert counts["db"]["repeated"] == 2 and counts["kg"]["selected"] == 0 and counts["kg"]["left_out"] == 5
    with pytest.raises(KeyError):
        mix_domains(trajs, {"web": 1})
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(t.to_json() for t in trajs) + "\n")
    assert [t.id for t in load_trajectories(path)] == [t.id for t in trajs]
    assert [t.id for t in load_trajectories(tmp_path)] == [t.id for t in trajs]
    assert len(load_trajectories([t.to_dict() for t in trajs])) == len(trajs)
    with pytest.raises(FileNotFoundError):
        load_trajectories(tmp_path / "missing.jsonl")


def test_domain_weight_lists_parse_or_name_the_bad_item():
    from openmanus_lite.cli.sft import _parse_mix
    from openmanus_lite.train.data import parse_domain_weights

    assert parse_domain_weights("web=2, kg=0.5,") == {"web": 2.0, "kg": 0.5}
    assert parse_domain_weights(None) == {} and _parse_mix("") is None
    for bad, why in [("web", "expected domain=number"), ("=2", "expected domain=number"),
                     ("web=two", "'two' is not a number"), ("web=-1", "cannot be negative")]:
        with pytest.raises(ValueError, match=why):
            parse_domain_weights(bad)
    with pytest.raises(ValueError, match=r"with a domain of \['os'\], got 'shop=1'"):
        parse_domain_weights("shop=1", ["os"])
    with pytest.raises(ValueError, match="--mix: 'x' is not a number"):  # a UserError, before any model loads
        _parse_mix("os=x")


def test_recovery_trajectories_train_the_recovery_not_the_mistake(tok):
    from openmanus_lite.envs import generate_tasks, make_env
    from openmanus_lite.train.recovery import RECOVERY_NOTE, recovery_trajectories

    tasks = [t for d in ("household", "web", "db") for t in generate_tasks(d, 4, seed=5)]
    trajs, counts = recovery_trajectories(tasks, per_task=2, max_turns=12, seed=0)
    assert sum(counts.values()) == 2 * len(tasks) and counts["kept"] == len(trajs) > len(tasks)
    assert trajs == recovery_trajectories(tasks, per_task=2, max_turns=12, seed=0)[0]  # seeded
    # all three kinds: premature answers (a corruption) leave fewer episodes to keep
    kinds = ("random", "corrupt", "skip")
    every_kind, counts = recovery_trajectories(tasks, per_task=2, max_turns=12, seed=0, kinds=kinds)
    assert sum(counts.values()) == 2 * len(tasks) and counts["kept"] == len(every_kind) > len(tasks) // 2
    assert every_kind == recovery_trajectories(tasks, per_task=2, max_turns=12, seed=0, kinds=kinds)[0]
    trajs += every_kind
    by_id = {t.id: t for t in tasks}
    notes = 0
    for traj in trajs:
        assistant = [m for m in traj.messages if m.role == "assistant"]
        untrained = [i for i, m in enumerate(assistant) if not m.train]
        assert traj.meta["success"] and len(untrained) == 1 and untrained[0] == traj.meta["mistake"]["turn"]
        after = assistant[untrained[0] + 1].content
        assert after.startswith(f"Think: {RECOVERY_NOTE}") == (not traj.meta["mistake"]["valid"])
        notes += not traj.meta["mistake"]["valid"]
        # replaying the recorded turns reproduces the episode: the data is what the environment said
        env = make_env(traj.domain, max_turns=12)
        assert env.reset(by_id[traj.meta["task_id"]]) == traj.messages[0].content
        for m, obs in zip(traj.messages[1::2], traj.messages[2::2]):
            assert env.step(m.content).observation == obs.content
        # the loss falls on every assistant turn but the mistake
        row, _ = encode_trajectory(tok, traj, max_length=10**6)
        assert loss_token_texts(tok, row) == [m.content + "<|im_end|>" for i, m in enumerate(assistant)
                                              if i != untrained[0]]
    assert notes > 0  # some mistakes were rejected by the environment, and the recovery says so


def test_recovery_trajectories_rotate_the_mistake_kinds_across_tasks():
    """At one episode per task every kind still occurs (a skip with nothing to skip is a corruption)."""
    from openmanus_lite.envs import generate_tasks
    from openmanus_lite.train.recovery import recovery_trajectories

    tasks = generate_tasks("household", 12, seed=5)
    trajs, _ = recovery_trajectories(tasks, per_task=1, max_turns=16, seed=0, kinds=("random", "corrupt", "skip"))
    assert {t.meta["mistake"]["kind"] for t in trajs} == {"random", "corrupt", "skip"}
    assert {t.meta["mistake"]["kind"] for t in recovery_trajectories(tasks, 1, 16)[0]} == {"random"}  # the default


def test_recovery_trajectories_repeat_a_rejected_mistake_before_the_recovery():
    """With repeats (1, 2), every other task's rejected mistake is played twice, the second time after the
    recovery note (a model's loop); neither copy trains, the recovery after them does."""
    from openmanus_lite.envs import generate_tasks, make_env
    from openmanus_lite.train.recovery import RECOVERY_NOTE, recovery_trajectories

    tasks = generate_tasks("household", 12, seed=5)
    trajs, counts = recovery_trajectories(tasks, per_task=1, max_turns=16, seed=0, repeats=(1, 2))
    assert sum(counts.values()) == len(tasks) and counts["kept"] == len(trajs)
    by_id = {t.id: t for t in tasks}
    twice = 0
    for traj in trajs:
        mistake = traj.meta["mistake"]
        task_index = tasks.index(by_id[traj.meta["task_id"]])
        expected = 2 if task_index % 2 and not mistake["valid"] else 1
        assert mistake["played"] == expected
        assistant = [m for m in traj.messages if m.role == "assistant"]
        untrained = [i for i, m in enumerate(assistant) if not m.train]
        assert untrained == list(range(mistake["turn"], mistake["turn"] + expected))
        if expected == 2:
            twice += 1
            first, again = (assistant[i].content for i in untrained)
            assert again == first.replace("Think: ", f"Think: {RECOVERY_NOTE} ", 1) != first
        if not mistake["valid"]:
            assert assistant[untrained[-1] + 1].content.startswith(f"Think: {RECOVERY_NOTE}")
        env = make_env("household", max_turns=16)  # a rejected mistake was rejected both times, and counted
        env.reset(by_id[traj.meta["task_id"]])
        valid = []
        for m in assistant:
            env.step(m.content)
            valid.append(bool(env.last_info.get("valid")))
        assert [valid[i] for i in untrained] == [mistake["valid"]] * expected
        assert valid.count(False) == traj.meta["invalid_actions"]
    assert twice >= 3
    with pytest.raises(ValueError, match="repeats"):
        recovery_trajectories(tasks[:1], repeats=(0,))

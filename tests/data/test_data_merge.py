"""Merging: accounting, strict/lenient input errors, mixing, splits, export and load back."""

from __future__ import annotations

import json
import shutil
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openmanus_lite.data import (
    InputError,
    MergeConfig,
    SourceSpec,
    from_hf_dataset,
    load_report,
    load_splits,
    merge,
    read_jsonl,
    read_parquet,
    split_trajectories,
    to_hf_dataset,
    write_jsonl,
    write_parquet,
)
from openmanus_lite.paths import SAMPLES_DIR
from openmanus_lite.schema import DOMAINS, EXTRA_LABELS, SchemaError, Trajectory, Turn

SAMPLES = SAMPLES_DIR
ALL = [SourceSpec(n, str(SAMPLES / n)) for n in
       ("agentinstruct", "agent_flan", "agenttraj_l", "agentbank", "taskcraft", "openmanus_rl")]


@pytest.fixture(scope="module")
def merged():
    return merge(ALL, MergeConfig(seed=0))


def _dicts(trajs):
    return [t.to_dict() for t in trajs]


def test_merge_accounts_for_every_row(merged):
    rep = merged.report
    rep.verify()
    rows = sum(1 for s in ALL for p in (SAMPLES / s.name).glob("*.jsonl") for line in p.open() if line.strip())
    assert sum(rep.input_rows.values()) == rows == rep.kept + rep.rejected
    assert rep.by_reason() == Counter({"kept": rows - 2, "grammar.free_text": 1, "duplicate.exact": 1})
    assert len(merged.trajectories) == rep.kept
    assert sum(rep.splits.values()) == rep.kept
    frame = rep.to_frame()
    assert set(frame.columns) == {"source", "domain", "reason", "count"} and frame["count"].sum() == rows
    assert "rejections: duplicate.exact=1, grammar.free_text=1" in rep.summary()


def test_merge_is_deterministic_by_seed(merged):
    again = merge(ALL, MergeConfig(seed=0))
    assert {k: _dicts(v) for k, v in again.splits.items()} == {k: _dicts(v) for k, v in merged.splits.items()}
    other = merge(ALL, MergeConfig(seed=1))
    assert [t.id for t in other.splits["train"]] != [t.id for t in merged.splits["train"]]


def test_splits_are_stratified_and_keep_one_task_together():
    trajs = [Trajectory(f"s/{d}/{i}", "s", d, [Turn("user", "q"), Turn("assistant", "Think: \nAct: answer(1)", True)],
                        {"source_id": f"task{i // 2}"}) for d in ("os", "db") for i in range(40)]
    splits = split_trajectories(trajs, (0.8, 0.1, 0.1), seed=3)
    for name, n in (("train", 32), ("validation", 4), ("test", 4)):
        assert Counter(t.domain for t in splits[name]) == {"os": n, "db": n}
    where = {(t.domain, t.meta["source_id"]): name for name, ts in splits.items() for t in ts}
    assert len(where) == 40  # both attempts at a task sit in the same split
    assert split_trajectories(trajs, (0.8, 0.1, 0.1), seed=3) == splits


def test_labels_filter_weights_and_caps():
    six = merge(ALL, MergeConfig(exclude=EXTRA_LABELS))
    assert all(t.domain in DOMAINS for t in six.trajectories)
    excluded = six.report.by_reason()["filter.label_excluded"]
    assert excluded == sum(n for (s, d, r), n in six.report.outcomes.items() if d in EXTRA_LABELS)
    only_db = merge(ALL, MergeConfig(include=("db",)))
    assert {t.domain for t in only_db.trajectories} == {"db"}

    capped = merge(ALL, MergeConfig(source_caps={"agentinstruct": 4}, domain_caps={"tool": 2}))
    assert Counter(t.source for t in capped.trajectories)["agentinstruct"] == 4
    assert Counter(t.domain for t in capped.trajectories)["tool"] == 2
    reasons = capped.report.by_reason()
    assert reasons["mix.source_cap"] == 5 and reasons["mix.domain_cap"] > 0
    capped.report.verify()

    weighted = merge(ALL, MergeConfig(source_weights={"agenttraj_l": 0.5}, domain_weights={"os": 3.0},
                                      split_ratios=(1, 0, 0)))
    assert weighted.report.by_reason()["mix.source_weight"] == 4  # 9 AgentTraj-L rows, 4.5 rounds up to 5 kept
    os_train = [t for t in weighted.splits["train"] if t.domain == "os"]
    originals = [t for t in os_train if "upsampled_from" not in t.meta]
    assert len(os_train) == 3 * len(originals)
    assert sum(n for (_, _, k), n in weighted.report.added.items() if k == "upsampled") == 2 * len(originals)
    weighted.report.verify()
    with pytest.raises(ValueError, match="unknown labels"):
        MergeConfig(include=("shopping",))


def test_negatives_are_added_to_train_and_counted():
    res = merge(ALL, MergeConfig(negatives=0.5, seed=0))
    negs = [t for t in res.splits["train"] if "#neg-" in t.id]
    assert negs and all(t.meta["negative"]["kind"] in ("invalid_action", "no_tool_needed") for t in negs)
    assert sum(res.report.added.values()) == len(negs)
    assert not any("#neg-" in t.id for t in res.splits["test"] + res.splits["validation"])


def test_export_and_load_back_losslessly(merged, tmp_path):
    paths = merged.save(tmp_path, formats=("jsonl", "parquet", "hf"))
    assert {p.name for p in paths["jsonl"]} == {"train.jsonl", "validation.jsonl", "test.jsonl"}
    for fmt in ("jsonl", "parquet", "hf"):
        back = load_splits(tmp_path, fmt)
        assert {k: _dicts(v) for k, v in back.items()} == {k: _dicts(v) for k, v in merged.splits.items()}, fmt
    assert load_report(tmp_path).to_dict() == merged.report.to_dict()
    ds = to_hf_dataset(merged.splits["train"])
    assert ds.column_names == ["id", "source", "domain", "messages", "meta"]
    assert set(ds[0]["messages"][0]) == {"role", "content", "train"}
    assert _dicts(from_hf_dataset(ds)) == _dicts(merged.splits["train"])


def test_rejected_rows_are_written_with_reasons(tmp_path):
    path = tmp_path / "rejected.jsonl"
    merge(ALL, MergeConfig(rejected_path=path))
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted(r["reason"] for r in recs) == ["duplicate.exact", "grammar.free_text"]
    dup = next(r for r in recs if r["reason"] == "duplicate.exact")
    assert dup["source"] == "openmanus_rl" and dup["line"] == 4 and dup["row"]["id"] == "db_1"
    assert dup["file"].endswith("openmanus_rl/train.jsonl")


def _corrupt_copy(tmp_path):
    src = tmp_path / "agentinstruct"
    shutil.copytree(SAMPLES / "agentinstruct", src)
    lines = (src / "db.jsonl").read_text().splitlines()
    row = json.loads(lines[1])
    del row["conversations"][2]["value"]
    (src / "db.jsonl").write_text("\n".join([lines[0][:50], json.dumps(row), "[1, 2]", lines[0]]) + "\n")
    return src


def test_strict_mode_names_file_line_and_field(tmp_path):
    src = _corrupt_copy(tmp_path)
    with pytest.raises(InputError) as e:
        merge([SourceSpec("agentinstruct", str(src))])
    assert "db.jsonl, line 1" in str(e.value) and "invalid JSON" in str(e.value) and "--lenient" in str(e.value)
    (src / "db.jsonl").write_text("\n".join((src / "db.jsonl").read_text().splitlines()[1:]) + "\n")
    with pytest.raises(InputError, match=r"db.jsonl, line 1, field 'conversations\[2\].value': missing"):
        merge([SourceSpec("agentinstruct", str(src))])


def test_lenient_mode_counts_bad_rows(tmp_path):
    src = _corrupt_copy(tmp_path)
    res = merge([SourceSpec("agentinstruct", str(src))], MergeConfig(strict=False))
    reasons = res.report.by_reason()
    assert reasons["input.invalid_json"] == 1 and reasons["schema.missing_field"] == 1
    assert reasons["input.not_object"] == 1 and reasons["duplicate.exact"] == 0
    res.report.verify()


def test_worker_processes_give_the_same_result(tmp_path):
    serial = merge(ALL, MergeConfig(seed=2, negatives=0.3))
    parallel = merge(ALL, MergeConfig(seed=2, negatives=0.3, workers=2, rejected_path=tmp_path / "rej.jsonl"))
    assert serial.report.to_dict() == parallel.report.to_dict()
    assert {k: _dicts(v) for k, v in serial.splits.items()} == {k: _dicts(v) for k, v in parallel.splits.items()}
    assert len((tmp_path / "rej.jsonl").read_text().splitlines()) == serial.report.rejected
    # rows serialised by the workers are re-serialised when edited after the merge
    trajs = parallel.trajectories
    trajs[0].messages[0].content += " (edited)"
    trajs[1].messages[-1].train = not trajs[1].messages[-1].train
    trajs[2].id += "-renamed"
    trajs[3].meta["note"] = "added"
    trajs[4].messages.append(trajs[4].messages[-1])
    write_jsonl(trajs, tmp_path / "p.jsonl")
    lines = (tmp_path / "p.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == _dicts(trajs)


def test_jsonl_lines_are_the_records_as_json(merged, tmp_path):
    write_jsonl(merged.trajectories, tmp_path / "a.jsonl")
    lines = (tmp_path / "a.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == _dicts(merged.trajectories)


# --------------------------------------------------------------------------- properties

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
turns = st.lists(st.builds(Turn, role=st.sampled_from(["system", "user", "assistant"]), content=text,
                           train=st.booleans()), min_size=1, max_size=6)
metas = st.dictionaries(st.text(max_size=8), st.one_of(st.integers(), st.text(max_size=10), st.booleans(),
                                                       st.lists(st.integers(), max_size=3)), max_size=3)
trajectories = st.builds(Trajectory, id=st.text(min_size=1, max_size=12), source=st.sampled_from(["a", "b"]),
                         domain=st.sampled_from(DOMAINS + EXTRA_LABELS), messages=turns, meta=metas)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(trajectories, max_size=5))
def test_property_export_then_load_gives_the_same_trajectories(tmp_path, trajs):
    # `train` only on assistant turns is what the schema allows; export must not depend on it
    write_jsonl(trajs, tmp_path / "x.jsonl")
    write_parquet(trajs, tmp_path / "x.parquet")
    expected = [t.to_dict() for t in trajs]
    assert [t.to_dict() for t in _load_unvalidated(tmp_path / "x.jsonl")] == expected
    assert [t.to_dict() for t in _load_unvalidated_parquet(tmp_path / "x.parquet")] == expected


def _load_unvalidated(path):
    try:
        return read_jsonl(path)
    except SchemaError:  # records the schema refuses (train on a user turn) still round-trip as data
        return [Trajectory.from_dict(json.loads(line), validate=False) for line in path.read_text().splitlines()]


def _load_unvalidated_parquet(path):
    try:
        return read_parquet(path)
    except SchemaError:
        import pyarrow.parquet as pq

        return [Trajectory.from_dict({**r, "meta": json.loads(r["meta"])}, validate=False)
                for r in pq.read_table(path).to_pylist()]


def _as_row(line: str) -> dict:
    try:
        row = json.loads(line)
    except json.JSONDecodeError:
        return {}
    return row if isinstance(row, dict) else {}


corruptions = st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from(["truncate", "garbage", "drop_field",
                                                                          "wrong_type", "blank", "duplicate"])),
                       max_size=6)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(corruptions)
def test_property_accounting_sums_to_input_rows_on_corrupted_input(tmp_path_factory, edits):
    folder = tmp_path_factory.mktemp("corrupt")
    lines = []
    for name in ("agenttraj_l", "openmanus_rl"):
        lines += [(name, line) for p in sorted((SAMPLES / name).glob("*.jsonl")) for line in p.read_text().splitlines()]
    for pos, kind in edits:
        i = pos % len(lines)
        name, line = lines[i]
        if kind == "truncate":
            lines[i] = (name, line[: len(line) // 3])
        elif kind == "garbage":
            lines[i] = (name, "\x00not json{")
        elif kind == "drop_field":
            row = _as_row(line)
            row.pop("conversations", None)
            lines[i] = (name, json.dumps(row))
        elif kind == "wrong_type":
            row = _as_row(line)
            row["conversations"] = "not a list"
            lines[i] = (name, json.dumps(row))
        elif kind == "blank":
            lines[i] = (name, "   ")
        else:
            lines.insert(i, (name, line))
    for name in ("agenttraj_l", "openmanus_rl"):
        (folder / name).mkdir()
        (folder / name / "train.jsonl").write_text("\n".join(text for n, text in lines if n == name) + "\n")
    specs = [SourceSpec(n, str(folder / n)) for n in ("agenttraj_l", "openmanus_rl")]
    res = merge(specs, MergeConfig(strict=False))
    n_rows = sum(1 for _, line in lines if line.strip())
    assert sum(res.report.input_rows.values()) == n_rows
    assert res.report.kept + res.report.rejected == n_rows
    assert len(res.trajectories) == res.report.kept
    res.report.verify()

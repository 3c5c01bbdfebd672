"""Each source converter on the shipped samples (data/samples), and the raw-row loaders."""

from __future__ import annotations

import json

import pytest

from openmanus_lite.data import SOURCES, InputError, RowRejected, Validator, get_source, read_rows
from openmanus_lite.data.sources.base import RawRow, split_name
from openmanus_lite.data.sources.normalize import clean_observation
from openmanus_lite.paths import SAMPLES_DIR
from openmanus_lite.react import parse_step
from openmanus_lite.schema import DOMAINS, EXTRA_LABELS

SAMPLES = SAMPLES_DIR


def convert_all(name: str) -> dict:
    module = get_source(name)
    return {t.id: t for t in (module.convert(r) for r in module.load(str(SAMPLES / name)))}


def test_every_source_has_samples_and_a_converter():
    assert sorted(SOURCES) == ["agent_flan", "agentbank", "agentinstruct", "agenttraj_l", "openmanus_rl", "taskcraft"]
    for name, module in SOURCES.items():
        assert module.HUB_ID and callable(module.load) and callable(module.convert)
        trajs = convert_all(name)
        assert trajs, name
        for t in trajs.values():
            assert t.source == name and t.domain in DOMAINS + EXTRA_LABELS
            t.validate()


def test_agentinstruct_samples():
    t = convert_all("agentinstruct")
    assert {x.domain for x in t.values()} == set(DOMAINS)
    os1 = t["agentinstruct/os_1"]
    assert [m.train for m in os1.messages if m.role == "assistant"] == [False, False, True, True]
    assert os1.messages[6].content == "The output of the OS:\n\n12"  # ANSI escapes and the prompt are gone
    assert os1.messages[5].content.endswith("Act: bash\n```bash\nfind /var/log -maxdepth 1 -name '*.log' | wc -l\n```")
    os2 = t["agentinstruct/os_2"]
    assert os2.messages[-1].content.endswith("Act: answer(done)") and os2.meta["rewrites"] == {"finish_to_answer": 1}
    assert os2.messages[2].content == "The output of the OS:"
    assert t["agentinstruct/mind2web_2"].messages[1].content.endswith("Answer: A.\nAct: click[]")
    assert t["agentinstruct/mind2web_1"].messages[1].content.endswith("Act: type[hiking boots]")
    alf = t["agentinstruct/alfworld_1"]
    assert alf.messages[3].content == ("Think: I need an apple first; the countertop is a likely place.\n"
                                      "Act: go to countertop 1")
    assert alf.messages[5].content == "Think: \nAct: take apple 1 from countertop 1"
    kg = t["agentinstruct/kg_1"]
    assert sum(m.train for m in kg.messages) == 5 and kg.messages[-1].content.endswith("Act: answer(#2)")
    validator = Validator()
    assert all(validator.validate(x) is None for x in t.values())


def test_agent_flan_samples():
    t = convert_all("agent_flan")
    assert t["agent_flan/agent_instruct_react/os_11"].domain == "os"
    assert t["agent_flan/agent_instruct_react/db_12"].domain == "db"
    assert t["agent_flan/agent_instruct_tflan/webshop_13"].domain == "ecommerce"
    tool = t["agent_flan/toolbench_react_10p/tb_react_1"]
    assert tool.domain == "tool" and tool.messages[0].role == "system" and tool.meta["train_flags"] == "source"
    assert tool.messages[2].content.endswith('Act: get_forecast_for_weatherly({"city": "Lisbon", "days": 2})')
    neg = t["agent_flan/toolbench_negative/tb_neg_1"]
    assert neg.meta["negative"] == {"kind": "agent_flan_negative"}
    assert neg.messages[-1].content.startswith("Think: \nAct: answer(A forecast is a prediction")
    chat = t["agent_flan/agent_instruct_tflan/webshop_13"]
    assert chat.meta["free_text_turns"] == [2]
    assert Validator().validate(chat).reason == "grammar.free_text"


def test_agenttraj_l_samples_prefix_table():
    t = convert_all("agenttraj_l")
    domains = {x.meta["source_id"].rsplit("_", 1)[0]: x.domain for x in t.values()}
    assert domains == {"webshop": "ecommerce", "alfworld": "household", "sqlgym": "db", "sciworld": "science",
                       "babyai": "game", "lmrlgym_maze": "game", "lmrlgym_wordle": "game", "weather": "tool",
                       "textcraft": "game"}
    sql = t["agenttraj_l/sqlgym_55"]
    assert sql.meta["answer_optional"] and sql.messages[-1].content.endswith(
        "Act: sql\n```sql\nSELECT title FROM books WHERE year = 1999\n```")
    assert Validator().validate(sql) is None
    assert t["agenttraj_l/lmrlgym_wordle_9"].messages[3].content.endswith("Act: s t a r e")


def test_agentbank_samples_config_table():
    t = convert_all("agentbank")
    assert {x.meta["split"]: x.domain for x in t.values()} == {
        "alfworld": "household", "intercode_bash": "os", "intercode_sql": "db", "gsm8k": "math", "hotpotqa": "qa",
        "apps": "code"}
    bash = t["agentbank/intercode_bash/bash_3"]
    assert bash.messages[0].role == "system" and bash.meta["train_flags"] == "inferred"
    assert bash.messages[2].content.endswith("Act: bash\n```bash\nfind /code -name '*.py' | wc -l\n```")
    assert bash.messages[-1].content.endswith("Act: answer(done)")  # InterCode's submit
    assert t["agentbank/gsm8k/gsm8k_5"].messages[-1].content.endswith("Act: Finish[9]")
    assert all(Validator().validate(x) is None for x in t.values())


def test_taskcraft_rows_become_direct_answer_trajectories_and_tasks():
    module = get_source("taskcraft")
    rows = list(module.load(str(SAMPLES / "taskcraft")))
    traj = module.convert(rows[0])
    assert traj.domain == "qa" and len(traj.messages) == 2 and traj.messages[1].train
    assert traj.messages[1].content.endswith("Act: answer(1887)") and traj.meta["valid_hop"] == 2
    assert parse_step(traj.messages[1].content)[1].arg == "1887"
    task = module.to_task(rows[2])
    assert task.answer == "cello" and task.difficulty == "hard" and task.meta["tool"] == "image"
    with pytest.raises(RowRejected, match="valid_hop"):
        module.convert(RawRow("taskcraft", "f.jsonl", 4, None, {"query": "q", "golden_answer": "a", "valid_hop": "x"}))


def test_openmanus_rl_id_patterns():
    t = convert_all("openmanus_rl")
    assert {k: v.domain for k, v in t.items()} == {
        "openmanus_rl/pick_and_place_simple-Mug-None-Shelf-12_trial_T20190909_000001_000001": "household",
        "openmanus_rl/os_21": "os", "openmanus_rl/movie_40": "tool", "openmanus_rl/db_1": "db"}
    os21 = t["openmanus_rl/os_21"]
    assert os21.messages[0].role == "system" and os21.messages[3].content == "The output of the OS:\n/root\n"
    mod = get_source("openmanus_rl")
    assert mod.domain_for("unknown_thing_3") == "other" and mod.domain_for("x1", split="webshop") == "ecommerce"


def test_clean_observation_keeps_meaning():
    assert clean_observation("a\r\nb\rc", "db") == "a\nb\nc"
    assert clean_observation("\x1b[01;34mdir\x1b[0m  file", "os") == "dir  file"
    assert clean_observation("total 0\nuser@host:~/work$ ", "os") == "total 0"
    assert clean_observation("mail me at a@b.c: thanks#", "db") == "mail me at a@b.c: thanks#"


def test_conversion_errors_name_the_field():
    module = get_source("agentinstruct")
    bad = {"id": "os_9", "conversations": [{"from": "human", "value": "hi"}, {"from": "robot", "value": "x"}]}
    with pytest.raises(RowRejected) as e:
        module.convert(RawRow("agentinstruct", "os.jsonl", 7, "os", bad))
    assert e.value.reason == "schema.unknown_role" and "os.jsonl, line 7, field 'conversations[1].from'" in str(e.value)
    with pytest.raises(RowRejected, match="field 'conversations\\[0\\].value': expected a string"):
        module.convert(RawRow("agentinstruct", "os.jsonl", 8, "os", {"id": "a", "conversations": [{"from": "human", "value": 3}]}))
    with pytest.raises(RowRejected, match="field 'id': missing"):
        module.convert(RawRow("agentinstruct", "os.jsonl", 9, "os", {"conversations": []}))
    with pytest.raises(RowRejected, match="field 'conversations': missing"):
        module.convert(RawRow("agentinstruct", "os.jsonl", 9, "os", {"id": "x"}))


def test_loaders_jsonl_json_parquet_and_split_names(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [json.loads(line) for line in (SAMPLES / "agentinstruct" / "db.jsonl").read_text().splitlines()]
    (tmp_path / "array").mkdir()
    (tmp_path / "array" / "db.json").write_text(json.dumps(rows))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "db-00000-of-00001-abc.parquet")
    for spec in (tmp_path / "array" / "db.json", tmp_path / "db-00000-of-00001-abc.parquet"):
        got = list(read_rows(spec, "agentinstruct"))
        assert [r.data["id"] for r in got] == ["db_1", "db_2"] and {r.split for r in got} == {"db"}
        assert [r.line for r in got] == [1, 2]
    assert split_name(tmp_path / "toolbench_react_10p.jsonl") == "toolbench_react_10p"
    (tmp_path / "bad.jsonl").write_text('{"id": 1}\n\n{"id": 2, "conv\n[1, 2]\n')
    got = list(read_rows(tmp_path / "bad.jsonl", "x"))
    assert [(r.line, r.error is None) for r in got] == [(1, True), (3, False), (4, False)]
    assert "invalid JSON" in got[1].error and "expected a JSON object" in got[2].error
    (tmp_path / "bom.jsonl").write_bytes(b'\xef\xbb\xbf{"id": 1}\n\xff\xfe{}\n')  # a BOM; a UTF-16 line
    got = list(read_rows(tmp_path / "bom.jsonl", "x"))
    assert got[0].data == {"id": 1} and got[1].error.startswith("not UTF-8")
    (tmp_path / "rows.csv").write_text("id\n1\n")
    with pytest.raises(InputError, match="rows.csv: not a .jsonl, .json, .parquet file"):
        list(read_rows(tmp_path / "rows.csv", "x"))


def test_a_missing_path_that_is_no_hub_id_is_a_clear_error():
    with pytest.raises(InputError, match="no such file or folder"):
        list(read_rows("/no/such/dir/data.jsonl", "agentinstruct"))


def test_hub_ids_are_read_through_datasets_load_dataset(monkeypatch):
    import datasets

    calls = []
    rows = [json.loads(line) for line in (SAMPLES / "agentinstruct" / "db.jsonl").read_text().splitlines()]

    def fake_load_dataset(path, name=None, split=None, **kwargs):
        calls.append((path, name, split))
        if path == "owner/broken":
            raise ConnectionError("offline")
        return rows if split else {"db": rows}

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    got = list(get_source("agentinstruct").load("THUDM/AgentInstruct"))
    assert calls == [("THUDM/AgentInstruct", None, None)]
    assert [(r.file, r.line, r.split) for r in got] == [("THUDM/AgentInstruct:db", 1, "db"), ("THUDM/AgentInstruct:db", 2, "db")]
    assert get_source("agentinstruct").convert(got[0]).domain == "db"
    got = list(get_source("agentbank").load("Solaris99/AgentBank", splits=["intercode_sql"]))
    assert calls[-1] == ("Solaris99/AgentBank", "intercode_sql", "train") and got[0].split == "intercode_sql"
    with pytest.raises(InputError, match="could not load the hub dataset .*offline"):
        list(read_rows("owner/broken", "agentinstruct"))


def test_convert_source_yields_rows_and_issues(tmp_path):
    from openmanus_lite.data import SourceSpec, convert_source

    bad = tmp_path / "db.jsonl"
    bad.write_text('{"id": "db_1", "conversations": []}\n' + (SAMPLES / "agentinstruct" / "db.jsonl").read_text())
    out = list(convert_source(SourceSpec("agentinstruct", str(bad)), strict=False))
    assert out[0][1].reason == "schema.empty" and [o[1].id for o in out[1:]] == ["agentinstruct/db_1", "agentinstruct/db_2"]
    with pytest.raises(InputError, match="line 1, field 'conversations': is empty"):
        list(convert_source(SourceSpec("agentinstruct", str(bad))))

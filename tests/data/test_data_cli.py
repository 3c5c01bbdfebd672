"""`python -m openmanus_lite merge ...` and the throughput benchmark at a small size."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from openmanus_lite.cli.merge import main
from openmanus_lite.data import load_report, load_splits
from openmanus_lite.paths import REPO_ROOT, SAMPLES_DIR
from openmanus_lite.schema import SchemaError

SAMPLES = SAMPLES_DIR


def test_cli_merges_exports_and_reports(tmp_path, capsys):
    out = tmp_path / "merged"
    rc = main([
        "--source", f"agentinstruct={SAMPLES / 'agentinstruct'}", "--source", f"agent_flan={SAMPLES / 'agent_flan'}",
        "--source", f"agenttraj_l={SAMPLES / 'agenttraj_l'}", "--out", str(out), "--six-only", "--negatives", "0.2",
        "--domain-cap", "household=1", "--formats", "jsonl,parquet", "--plots", "--seed", "1",
    ])
    assert rc == 0
    text = capsys.readouterr().out
    assert "filter.label_excluded" in text and "mix.domain_cap" in text and "rejected rows:" in text
    splits = load_splits(out, "parquet")
    trajs = [t for ts in splits.values() for t in ts]
    assert {t.domain for t in trajs} <= {"os", "db", "web", "kg", "household", "ecommerce"}
    assert sum(t.domain == "household" and "#neg-" not in t.id for t in trajs) == 1
    report = load_report(out)
    report.verify()
    rejected = [json.loads(line) for line in (out / "rejected.jsonl").read_text().splitlines()]
    assert len(rejected) == report.rejected
    assert (out / "plots" / "overview.png").exists()


def test_cli_errors_are_clear(tmp_path, capsys):
    bad = tmp_path / "db.jsonl"
    bad.write_text('{"id": "db_1", "conversations": [{"from": "human"}]}\n')
    assert main(["--source", f"agentinstruct={bad}", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "db.jsonl, line 1, field 'conversations[0].value': missing" in err
    assert main(["--source", f"agentinstruct={bad}", "--out", str(tmp_path / "o"), "--lenient"]) == 0


def test_module_entry_point_runs_merge(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "openmanus_lite", "merge", "--source", f"taskcraft={SAMPLES / 'taskcraft'}",
         "--out", str(tmp_path), "--formats", "jsonl"],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "taskcraft" in proc.stdout and (tmp_path / "train.jsonl").exists()


def test_merge_throughput_benchmark_small(capsys):
    sys.path.insert(0, str(Path(REPO_ROOT) / "benchmarks"))
    try:
        import merge_throughput
    finally:
        sys.path.pop(0)
    assert merge_throughput.main(["--n", "300", "--workers", "2"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("RESULT "))
    result = json.loads(line[len("RESULT "):])
    assert result["rows"] >= 290 and result["kept"] + result["rejected"] == result["rows"]
    assert result["trajectories_per_s"] > 0 and result["peak_rss_mb"] > 0


def test_a_failed_strict_merge_leaves_the_previous_outputs_intact(tmp_path, capsys):
    """Issue #44 BAD 8: a strict merge that stops on a bad row used to empty the old rejected.jsonl while the old
    report.json still counted its rows; now nothing in the output folder changes."""
    out = tmp_path / "merged"
    assert main(["--source", f"agent_flan={SAMPLES / 'agent_flan'}", "--output_dir", str(out),
                 "--formats", "jsonl,hf"]) == 0
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert load_report(out).rejected > 0 and (out / "rejected.jsonl").read_text().count("\n") == load_report(out).rejected

    bad = tmp_path / "db.jsonl"
    bad.write_text('{"id": "db_1", "conversations": [{"from": "human", "value": "hi"}]}\nnot json\n')
    assert main(["--source", f"agentinstruct={bad}", "--output_dir", str(out), "--formats", "jsonl,hf"]) == 2
    assert "db.jsonl, line 2" in capsys.readouterr().err
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before  # no partial file, no staging folder, the same bytes


def test_a_failed_save_leaves_the_previous_outputs_intact(tmp_path, monkeypatch):
    merge_mod = importlib.import_module("openmanus_lite.data.merge")  # the package's `merge` is the function
    out = tmp_path / "merged"
    result = merge_mod.merge([f"taskcraft={SAMPLES / 'taskcraft'}"])
    result.save(out, formats=("jsonl",))
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def broken(*args, **kwargs):
        raise OSError("No space left on device")

    monkeypatch.setattr(merge_mod, "write_parquet", broken)
    other = merge_mod.merge([f"taskcraft={SAMPLES / 'taskcraft'}"], merge_mod.MergeConfig(seed=3))
    assert other.splits != result.splits  # so writing its train.jsonl over the old one would show
    with pytest.raises(OSError, match="No space"):
        other.save(out, formats=("jsonl", "parquet"))
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


HUGE_WEIGHT = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))  # a regression fails with MemoryError, not the machine
from openmanus_lite.cli.merge import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_huge_source_weight_is_refused_with_an_estimate(tmp_path):
    """Issue #44 BAD 6: `--source_weight agenttraj_l=1e9` on a 9-row file was OOM-killed at 22.7 GB after 95 s."""
    proc = subprocess.run(
        [sys.executable, "-c", HUGE_WEIGHT, "--source", f"agenttraj_l={SAMPLES / 'agenttraj_l'}",
         "--source_weight", "agenttraj_l=1e9", "--output_dir", str(tmp_path / "o")],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=120,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    error = proc.stderr.strip().splitlines()[-1]
    assert error.startswith("error: the weights above 1 (agenttraj_l=1e+09) would make the training split")
    assert "GB as JSONL" in error and "the limit is 20,000,000 rows" in error
    assert not (tmp_path / "o" / "train.jsonl").exists()


def test_weights_must_be_finite(tmp_path, capsys):
    for weight in ("nan", "inf", "-1"):
        assert main(["--source", f"taskcraft={SAMPLES / 'taskcraft'}", "--source_weight", f"taskcraft={weight}",
                     "--output_dir", str(tmp_path)]) == 2
        assert "source_weights must be finite numbers >= 0" in capsys.readouterr().err


def _parquet_source(folder: Path, n_rows: int = 5) -> Path:
    """A folder of AgentTraj-L rows as parquet (the hub's format), for corrupting."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir()
    lines = (SAMPLES / "agenttraj_l" / "train.jsonl").read_text().splitlines()
    pq.write_table(pa.Table.from_pylist([json.loads(line) for line in lines[:n_rows]]), folder / "good.parquet")
    return folder


@pytest.mark.parametrize("corrupt", [lambda b: b[: len(b) // 2], lambda b: b[:100] + b"\xab" * (len(b) - 200) + b[-100:]])
def test_a_corrupt_parquet_input_is_named_or_counted_under_lenient(tmp_path, capsys, corrupt):
    src = _parquet_source(tmp_path / "raw")
    good = (src / "good.parquet").read_bytes()
    (src / "bad.parquet").write_bytes(corrupt(good))
    out = tmp_path / "merged"
    assert main(["--source", f"agenttraj_l={src}", "--output_dir", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"{src / 'bad.parquet'}, line 1: not a readable parquet file" in err
    assert "--lenient" in err and not (out / "train.jsonl").exists()

    assert main(["--source", f"agenttraj_l={src}", "--output_dir", str(out), "--lenient"]) == 0
    report = load_report(out)
    assert report.by_reason()["input.unreadable_file"] == 1 and report.input_rows["agenttraj_l"] == 5 + 1
    report.verify()
    (rejected,) = [json.loads(line) for line in (out / "rejected.jsonl").read_text().splitlines()
                   if '"input.unreadable_file"' in line]
    assert rejected["file"] == str(src / "bad.parquet") and "not a readable parquet file" in rejected["detail"]


def test_a_corrupt_merged_parquet_is_named_when_read_back(tmp_path):
    main(["--source", f"taskcraft={SAMPLES / 'taskcraft'}", "--output_dir", str(tmp_path), "--formats", "parquet"])
    (tmp_path / "train.parquet").write_bytes(b"PAR1 and then nothing")
    with pytest.raises(SchemaError, match="train.parquet: not a readable parquet file"):
        load_splits(tmp_path, "parquet")


def test_a_re_merge_removes_the_outputs_of_the_previous_one_it_does_not_write(tmp_path, capsys):
    out = tmp_path / "merged"
    source = ["--source", f"taskcraft={SAMPLES / 'taskcraft'}", "--output_dir", str(out)]
    assert main([*source, "--formats", "parquet,hf"]) == 0
    assert {"train.parquet", "test.parquet", "hf"} <= {p.name for p in out.iterdir()}
    (out / "notes.txt").write_text("the user's own file")
    (out / "extra.parquet").write_text("not written by the kit")
    assert main([*source, "--formats", "jsonl"]) == 0
    names = {p.name for p in out.iterdir()}
    assert not any(n.endswith(".parquet") and n != "extra.parquet" for n in names) and "hf" not in names
    assert {"train.jsonl", "validation.jsonl", "test.jsonl", "splits.json", "report.json", "rejected.jsonl",
            "notes.txt", "extra.parquet"} == names
    assert load_splits(out, "jsonl")["train"]
    with pytest.raises(FileNotFoundError, match="no parquet files"):
        load_splits(out, "parquet")  # not the previous merge's rows

"""`python -m openmanus_lite merge ...` and the throughput benchmark at a small size."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from openmanus_lite.cli.merge import main
from openmanus_lite.data import load_report, load_splits
from openmanus_lite.paths import REPO_ROOT, SAMPLES_DIR

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

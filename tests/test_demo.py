"""The demo driver end to end on the tiny model: every stage, the report, resume, bad arguments."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from openmanus_lite.demo import main  # noqa: E402

STAGES = {"data", "eval_untrained", "sft", "eval_sft", "grpo", "eval_grpo"}


def test_quick_demo_runs_every_stage_and_resumes(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["--quick", "--domains", "os,db", "--out", str(out)]) == 0
    done = json.loads((out / "state.json").read_text())["done"]
    assert set(done) == STAGES
    assert done["data"]["result"]["synthesized"] > 0 and done["sft"]["result"]["steps"] > 0
    for name in ("merge_report.txt", "train.jsonl", "sft_loss.png", "grpo_rewards.png", "comparison.png",
                 "eval_untrained.json", "eval_sft.json", "eval_grpo.json", "report.md"):
        assert (out / name).is_file(), name
    report = (out / "report.md").read_text()
    assert "## Success on the dev suite" in report and "grpo" in report and "os" in report

    # an interrupted run: the last evaluation never finished; the same command redoes only that
    del done["eval_grpo"]
    (out / "state.json").write_text(json.dumps({"done": done}))
    capsys.readouterr()
    assert main(["--quick", "--domains", "os,db", "--out", str(out)]) == 0
    log = capsys.readouterr().out
    assert log.count("done in an earlier run, skipped") == len(STAGES) - 1
    assert "===== eval_grpo =====" in log
    assert set(json.loads((out / "state.json").read_text())["done"]) == STAGES


@pytest.mark.parametrize("argv, message", [
    (["--domains", "mars"], "unknown ['mars']"),
    (["--preset", "h100"], "choose one of"),
])
def test_bad_arguments_give_one_line_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err

"""The demo driver on the tiny model: every stage, the Markdown report, the time across a resume, the GRPO
domain choice, the intervals, bad arguments."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

pytest.importorskip("torch")

import openmanus_lite.demo as demo  # noqa: E402
from openmanus_lite.cli.demo import build_parser, main  # noqa: E402
from openmanus_lite.eval import BenchmarkResult, TaskRecord  # noqa: E402

STAGES = set(demo.STAGES)
ARGV = ["--quick", "--domains", "os,db"]


def _result(label: str, outcomes: dict[str, list[bool]]) -> BenchmarkResult:
    records = [TaskRecord(task_id=f"{d}_{i}", domain=d, difficulty="easy", success=ok, score=float(ok), turns=2,
                          invalid_actions=0) for d, oks in outcomes.items() for i, ok in enumerate(oks)]
    return BenchmarkResult(policy=label, suite="dev", records=records, label=label)


def _minutes(text: str, pattern: str) -> float:
    m = re.search(pattern, text)
    assert m, pattern
    return float(m.group(1))


def test_quick_demo_report_and_total_time_across_an_interrupted_run(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    argv = [*ARGV, "--output_dir", str(out)]
    real_sft = demo.stage_sft

    def interrupted_sft(*args, **kwargs):
        import time

        time.sleep(0.3)
        raise KeyboardInterrupt  # Ctrl-C during SFT

    monkeypatch.setattr(demo, "stage_sft", interrupted_sft)
    assert main([*argv, "--one_process"]) == 130  # the patched stage runs here, not in a fresh process
    assert f"demo --output_dir {out}" in capsys.readouterr().err  # the command that resumes
    state = json.loads((out / "state.json").read_text())
    assert set(state["done"]) == {"prepare", "eval_untrained"} and state["interrupted"]["sft"] >= 0.3

    monkeypatch.setattr(demo, "stage_sft", real_sft)
    fresh = []
    real_fresh = demo.run_in_fresh_process
    monkeypatch.setattr(demo, "run_in_fresh_process", lambda fn, *args: fresh.append(fn.__name__) or real_fresh(fn, *args))
    capsys.readouterr()
    assert main(argv) == 0  # the same command resumes, each stage in a fresh process
    assert fresh == ["stage_sft", "stage_eval", "stage_grpo", "stage_eval"]
    log = capsys.readouterr().out
    assert log.count("done in an earlier run, skipped") == 2 and "===== sft =====" in log
    state = json.loads((out / "state.json").read_text())
    assert set(state["done"]) == STAGES and state["interrupted"] == {}
    assert state["done"]["sft"]["interrupted_s"] >= 0.3 and len(state["runs"]) == 2
    assert state["done"]["prepare"]["result"]["recovery"] > 0  # the cpu_30min recipe's recovery episodes
    levels = state["done"]["prepare"]["result"]["tasks_per_level"]  # and its medium tasks, a quarter as many
    assert set(levels) == {"easy", "medium"} and 0 < levels["medium"] < levels["easy"]
    for name in ("merge_report.txt", "train.jsonl", "sft_loss.png", "grpo_rewards.png", "comparison.png",
                 "eval_untrained.json", "eval_sft.json", "eval_grpo.json", "report.md", "config.json"):
        assert (out / name).is_file(), name
    assert len(BenchmarkResult.load(out / "eval_grpo.json").records) == 6  # 3 dev tasks x 2 domains (--quick)

    report = (out / "report.md").read_text()
    assert f"training tasks ({levels['easy']} easy, {levels['medium']} medium)" in report
    # a real Markdown table: header, separator, a row per domain, the pooled row, invalid actions
    assert "| domain | untrained | SFT | GRPO |\n|---|---|---|---|\n| os | 0/3: 0.0% [0.0, 56.1] |" in report
    assert "| **all domains (mean)** | **0/6: 0.0% [0.0, 39.0]** |" in report and "| invalid actions |" in report
    assert "| stage | minutes: limit or plan | minutes taken | peak memory of the stage (GB) |" in report
    assert "greedy; an episode ends after 3 invalid actions in a row" in report
    assert BenchmarkResult.load(out / "eval_untrained.json").meta["max_invalid_streak"] == 3
    assert state["done"]["eval_untrained"]["result"]["generated_tokens"] > 0  # the trained evaluations' pace
    assert state["done"]["grpo"]["peak_memory"]["rss_gb"] > 0.1  # each stage's own peak (peak_memory.PeakMemory)
    assert state["done"]["grpo"]["peak_memory"]["rss_kind"] == "stage"
    grpo = state["done"]["grpo"]["result"]  # how many groups carried a signal (issue #40), two a step
    assert grpo["groups"] == 2 * grpo["steps"] and 0 <= grpo["groups_with_signal"] <= grpo["groups"]
    assert f"{grpo['groups_with_signal']} of {grpo['groups']} groups carried a signal" in report
    assert "```\n|" not in report and "\n```\n" not in report.split("## Reproduce")[0]  # no preformatted tables
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", report)
    assert {"sft_loss.png", "grpo_rewards.png", "comparison.png"} <= set(images)
    assert all((out / name).is_file() for name in images)
    command = f"python -m openmanus_lite demo --quick --domains os,db --output_dir {out} --one_process"
    assert f"```bash\n{command}\n```" in report and "This run was resumed with" in report
    assert "**Machine**:" in report and "cores" in report and "native bf16 on the CPU: " in report
    # the terminal ends with the success table of the report
    success = report.split("## Success on held-out tasks (95% Wilson intervals)\n\n")[1].split("\n\n")[0]
    assert log.rstrip().endswith(success) and success.startswith("| domain |")
    total = sum(d["seconds"] + d["interrupted_s"] for d in state["done"].values())
    assert _minutes(report, r"\*\*Total time\*\*: ([\d.]+) minutes") == round(total / 60, 1)

    # the total is the sum of the recorded stage times, whatever this process's clock says
    secs = {"prepare": 30, "eval_untrained": 90, "sft": 1800, "eval_sft": 60, "grpo": 420, "eval_grpo": 66}
    for name, s in secs.items():
        state["done"][name].update(seconds=s, interrupted_s=0.0)
    state["done"]["sft"]["interrupted_s"] = 120.0
    (out / "state.json").write_text(json.dumps(state))
    capsys.readouterr()
    assert main(argv) == 0  # every stage done: only the report again
    log = capsys.readouterr().out
    report = (out / "report.md").read_text()
    assert _minutes(report, r"\*\*Total time\*\*: ([\d.]+) minutes") == 43.1  # (2466 + 120) / 60
    assert "| **total** | **" in report and "| **43.1** |" in report
    assert "| SFT | 0.6 (limit) | 32.0 (of which 2.0 interrupted) |" in report
    assert "across 3 runs of the command" in report
    assert "| **total** |" in log and log.rstrip().endswith(success)


def test_grpo_trains_where_sft_has_mixed_outcomes_and_says_why_not_elsewhere(tmp_path, capsys):
    sft = _result("sft", {"os": [False] * 3, "db": [True, False, True], "kg": [True] * 3})
    chosen, reasons = demo.select_grpo_domains(sft, ["os", "db", "kg", "web"], "mixed")
    assert chosen == ["db"]
    assert reasons["os"].startswith("SFT solved 0/3") and reasons["kg"].startswith("SFT solved 3/3")
    assert reasons["web"] == "not in the SFT evaluation"
    assert demo.select_grpo_domains(sft, ["os", "db", "kg"], "success")[0] == ["db", "kg"]
    assert demo.select_grpo_domains(sft, ["os", "db", "kg"], "all") == (["os", "db", "kg"], {})
    with pytest.raises(ValueError, match="grpo_domains must be one of"):
        demo.select_grpo_domains(sft, ["os"], "some")

    # episodes as long as the evaluation's, capped at grpo_max_turns
    full = demo.DemoConfig()
    assert demo.grpo_turn_limits(full, ["db", "web", "household"]) == {"db": 5, "web": 7, "household": 7}
    assert demo.grpo_turn_limits(dataclasses.replace(full, grpo_max_turns=None), ["household"]) == {"household": 16}
    assert demo.grpo_turn_limits(demo.DemoConfig.quick(), ["os"]) == 2  # quick: eval limit 3, cap 2

    # no domain qualifies: GRPO is skipped (no model is loaded), with the reasons logged and recorded
    path = _result("sft", {"os": [False] * 3, "db": [False] * 3}).save(tmp_path / "eval_sft.json")
    cfg = demo.DemoConfig(domains=("os", "db"))
    out = demo.stage_grpo(cfg, None, tmp_path, "no-model-needed", {"path": str(path)})
    log = capsys.readouterr().out
    assert out["skipped"].startswith("no domain qualifies") and out["domains"] == []
    assert "GRPO leaves out os: SFT solved 0/3" in log and "GRPO skipped" in log
    state = demo.RunState(tmp_path / "state.json", done={"grpo": {"result": out, "seconds": 0.1}})
    table = demo.time_table(cfg, state)
    assert "| GRPO | 6 (limit) | skipped |  |" in table and "| evaluate GRPO | 2 (plan) | skipped |  |" in table
    state.done["sft"] = {"result": {}, "seconds": 60.0, "peak_memory": {"rss_gb": 3.14, "rss_kind": "stage"}}
    state.done["prepare"] = {"result": {}, "seconds": 6.0, "peak_memory": {
        "rss_gb": 1.0, "rss_kind": "process lifetime", "cuda_allocated_gb": 2.0, "cuda_reserved_gb": 2.5}}
    table = demo.time_table(cfg, state)
    assert "| SFT | 30 (limit) | 1.0 | 3.1 |" in table
    assert "| prepare: model and data | 1 (plan) | 0.1 | 1.0 (GPU 2.0) (process lifetime) |" in table


def test_success_table_intervals_are_wilson_intervals_computed_by_hand():
    # Wilson, z = 1.96: 4/10 -> centre (0.4 + z^2/20) / (1 + z^2/10) = 0.4278, half-width 0.2596 -> [16.8, 68.7];
    # 0/10 -> [0, 27.8]; pooled 4/20 -> [8.1, 41.6]
    a = _result("untrained", {"os": [False] * 10, "db": [False] * 10})
    b = _result("SFT", {"os": [True] * 4 + [False] * 6, "db": [False] * 10})
    table = demo.success_table(demo.DemoConfig(domains=("os", "db")), {"untrained": a, "SFT": b})
    lines = table.splitlines()
    assert lines[:2] == ["| domain | untrained | SFT |", "|---|---|---|"]
    assert lines[2] == "| os | 0/10: 0.0% [0.0, 27.8] | 4/10: 40.0% [16.8, 68.7] |"
    assert lines[4] == "| **all domains (mean)** | **0/20: 0.0% [0.0, 16.1]** | **4/20: 20.0% [8.1, 41.6]** |"
    from openmanus_lite.eval import markdown_table

    assert markdown_table(["a", "b"], [["x|y", 1]]) == "| a | b |\n|---|---|\n| x\\|y | 1 |"
    verdict = demo.verdict_lines({"untrained": a, "SFT": b})
    assert verdict == ["- SFT vs untrained: +20.0 points (20.0% vs 0.0%); 4 tasks gained, 0 lost of 20 (paired sign "
                       "test p = 0.125, within noise); the intervals overlap."]


def test_a_run_folder_refuses_other_settings(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.json").write_text(json.dumps(demo.DemoConfig.quick().to_json()))
    (out / "state.json").write_text(json.dumps({"done": {"prepare": {"result": {}, "seconds": 1.0}}}))
    assert main(["--quick", "--eval_per_domain", "4", "--output_dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert "eval_per_domain: 3 -> 4" in err and "another --output_dir" in err
    with pytest.raises(SystemExit):
        main(["--quick", "--eval_invalid_streak", "-1", "--output_dir", str(out)])
    assert "--eval_invalid_streak must be 0 (off) or more, got -1" in capsys.readouterr().err

    # the folder alone (or --resume) continues with the run's own settings: here an old run's recipe
    (out / "config.json").write_text(json.dumps({**demo.DemoConfig.quick().to_json(), "recipe": "demo"}))
    with pytest.raises(SystemExit):
        main(["--output_dir", str(out)])
    assert f"--recipe 'demo' (the settings of {out}): choose one of" in capsys.readouterr().err
    # a folder of the older demo (a `data` stage) is refused, not mixed with new stages
    (out / "config.json").write_text(json.dumps(demo.DemoConfig.quick().to_json()))
    (out / "state.json").write_text(json.dumps({"done": {"data": {"result": {}, "seconds": 1.0}}}))
    assert main(["--output_dir", str(out)]) == 2
    assert "older version of the demo (stages ['data'])" in capsys.readouterr().err
    # runs before the invalid-action streak played every evaluation episode to its turn limit, and resume so
    before = {k: v for k, v in demo.DemoConfig().to_json().items() if k != "eval_invalid_streak"}
    assert demo.DemoConfig.from_json(before).eval_invalid_streak is None


def test_the_demo_s_own_process_claims_its_folder_without_the_training_stack():
    """The demo's process (its stages run in processes of their own) imports the command and the folder lock, not
    transformers: importing it there held 0.8 GB beside every stage (issue #41)."""
    import subprocess
    import sys

    code = ("import sys, openmanus_lite.cli.demo, openmanus_lite.train.run_folder; "
            "print([m for m in ('transformers', 'trl', 'unsloth') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.strip() == "[]", out.stderr[-2000:]


def test_resume_picks_the_newest_unfinished_run(tmp_path, monkeypatch):
    monkeypatch.setattr(demo, "RUNS_DIR", tmp_path)
    assert demo.latest_run() is None
    for name, finished in (("demo-20260101-000000", True), ("demo-20260102-000000", False),
                           ("demo-20260103-000000", True)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "state.json").write_text("{}")
        if finished:
            (tmp_path / name / demo.REPORT).write_text("# done")
    assert demo.latest_run() == tmp_path / "demo-20260102-000000"


@pytest.mark.parametrize("argv, message", [
    (["--domains", "mars"], "unknown ['mars']"),
    (["--preset", "h100"], "choose one of"),
    (["--recipe", "demo"], "--recipe 'demo': choose one of"),
    (["--grpo_domains", "most"], "invalid choice: 'most'"),
])
def test_bad_arguments_give_one_line_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_help_states_the_defaults():
    text = " ".join(build_parser().format_help().split())
    assert "default: cpu_30min" in text and "default: 10)" in text and "default: 6" in text
    assert "default: mixed" in text


@pytest.fixture
def slow_machine(monkeypatch):
    """A recorded pace of 0.5 tokens/s per GFLOP/s and a machine that measures 300 GFLOP/s in `dtype`."""
    import torch

    from openmanus_lite.engine import speed

    pace = {"matmul_gflops": 400.0, "tokens_per_s": 200.0}
    monkeypatch.setattr(demo, "SFT_PACE", {"bfloat16": pace, "float32": pace})
    monkeypatch.setattr(speed, "matmul_gflops", lambda *a, **k: 300.0)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)

    def machine(dtype):
        monkeypatch.setattr(speed, "matmul_dtype", lambda *a, **k: getattr(torch, dtype))
        return demo.measure_speed(demo.DemoConfig())
    return machine


def test_what_to_expect_on_a_slow_machine_with_native_bf16(slow_machine):
    speed = slow_machine("bfloat16")
    assert speed == {"matmul_gflops": 300.0, "matmul_kind": "bfloat16", "expected_tokens_per_s": 150.0}
    lines = demo.expectation_lines(demo.DemoConfig(), speed)
    # 150 tokens/s x 30 min = 0.27M tokens; the last record's 1,069,251 tokens in 889 steps -> 224 steps, 119 minutes
    assert lines[0] == ("This machine multiplies 300 GFLOP/s in bfloat16 (the default model's shapes): SFT should "
                        "train about 150 tokens/s, 0.27M tokens (~224 steps) in its 30 minutes.")
    assert lines[1] == ("On record for `cpu_30min` (the demo's 60 held-out tasks): 0.30M tokens (252 steps): 48.3% "
                        "[36.2, 60.7]; 0.34M tokens (278 steps): 58.3% [45.7, 69.9]; 0.36M tokens (301 steps): "
                        "55.0% [42.5, 66.9]; 0.36M tokens (303 steps): 58.3% [45.7, 69.9]; 0.39M tokens (322 steps): "
                        "60.0% [47.4, 71.4]; 0.42M tokens (356 steps): 50.0% [37.7, 62.3]; 0.43M tokens (360 steps): "
                        "61.7% [49.0, 72.9]; 0.47M tokens (398 steps): 55.0% [42.5, 66.9]; 0.51M tokens (431 steps): "
                        "61.7% [49.0, 72.9]; 0.54M tokens (454 steps): 71.7% [59.2, 81.5]; 0.59M tokens (494 steps): "
                        "70.0% [57.5, 80.1]; 0.76M tokens (634 steps): 75.0% [62.8, 84.2]; 0.84M tokens (699 "
                        "steps): 81.7% [70.1, 89.4]; 0.86M tokens (715 steps): 83.3% [72.0, 90.7]; 1.07M tokens (889 "
                        "steps): 95.0% [86.3, 98.3].")
    assert lines[2] == ("The record's 95.0% [86.3, 98.3] took 1.07M tokens: about 119 minutes of SFT here "
                        "(`--sft_minutes 119`).")
    assert len(lines) == 3
    # before the untrained evaluation has left SFT its minutes: the recipe's are the most it can have
    assert demo.expectation_lines(demo.DemoConfig(), speed, at_most=True)[0].endswith("in at most 30 minutes.")
    # a machine as fast as the best record's: nothing to add; --quick (the tiny model) measures nothing
    assert len(demo.expectation_lines(demo.DemoConfig(), {**speed, "expected_tokens_per_s": 600.0})) == 2
    assert demo.measure_speed(demo.DemoConfig.quick()) is None


def test_each_dtype_expects_its_own_recorded_pace(slow_machine, monkeypatch):
    """float32 training kept more of its machine's matmul rate than bf16 did: one pace per dtype."""
    monkeypatch.setattr(demo, "SFT_PACE", {"bfloat16": {"matmul_gflops": 400.0, "tokens_per_s": 200.0},
                                           "float32": {"matmul_gflops": 300.0, "tokens_per_s": 250.0}})
    assert slow_machine("bfloat16")["expected_tokens_per_s"] == 150.0
    assert slow_machine("float32")["expected_tokens_per_s"] == 250.0


def test_amx_expects_the_pace_recorded_on_amx(slow_machine, monkeypatch):
    """AMX tiles multiply the probe's 2,048 rows of bf16 ~6x faster than AVX512-BF16, SFT barely faster: an AMX CPU
    reads its own record, and one without such a record the bf16 one."""
    import torch

    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
    bf16 = {"matmul_gflops": 400.0, "tokens_per_s": 200.0}
    monkeypatch.setattr(demo, "SFT_PACE", {"bfloat16": bf16, "float32": bf16})
    assert slow_machine("bfloat16") == {"matmul_gflops": 300.0, "matmul_kind": "bfloat16 on AMX",
                                        "expected_tokens_per_s": 150.0}
    monkeypatch.setattr(demo, "SFT_PACE", {"bfloat16": bf16, "float32": bf16,
                                           "bfloat16 on AMX": {"matmul_gflops": 2500.0, "tokens_per_s": 250.0}})
    speed = slow_machine("bfloat16")
    assert speed["expected_tokens_per_s"] == 30.0
    assert demo.expectation_lines(demo.DemoConfig(), speed)[0].startswith(
        "This machine multiplies 300 GFLOP/s in bfloat16 on AMX (the default model's shapes): SFT should train about "
        "30 tokens/s")
    assert slow_machine("float32")["matmul_kind"] == "float32"  # AMX multiplies no float32


def test_what_to_expect_without_native_bf16_and_in_the_report(slow_machine, tmp_path):
    speed = slow_machine("float32")
    lines = demo.expectation_lines(demo.DemoConfig(), speed)
    assert "in float32 (the default model's shapes)" in lines[0]
    assert lines[1].startswith("This CPU has no native bf16 (AVX512-BF16 or AMX): SFT trains in float32 here")
    assert lines[-1].endswith("about 119 minutes of SFT here (`--sft_minutes 119`).")
    state = demo.RunState(tmp_path / "state.json", runs=[{"argv": [], "speed": speed}])
    state.done["sft"] = {"result": {"steps": 110, "train_s": 1800.0, "tokens_per_s": 140.2, "final_loss": 0.5},
                         "seconds": 1800.0}
    demo.write_report(demo.DemoConfig(), tmp_path, state)
    report = (tmp_path / demo.REPORT).read_text()
    section = report.split("## What to expect (measured before training)\n\n")[1].split("\n\n")[0]
    assert section.splitlines() == [f"- {x}" for x in lines]
    assert "(140.2 tokens/s; about 150 expected from the matmul rate)" in report


def test_training_stages_share_what_the_evaluations_leave_of_the_budget(tmp_path):
    """45 minutes less what was spent, two trained evaluations (15,000 tokens each at the untrained evaluation's pace)
    and two overheads of 0.75, shared by SFT (30) and GRPO (6) in proportion, between half their limits and all."""
    cfg = demo.DemoConfig()
    assert cfg.budgeted() and not demo.DemoConfig.quick().budgeted()
    budget = demo.training_budget(cfg, 5.0 * 60, 50.0)  # a slow CPU: 5 minutes so far, decoding 50 tokens/s
    assert budget == {"sft": 23.8, "grpo": 4.8, "eval": 5.0,
                      "why": "45 minutes less 5.0 spent, two evaluations of 5 (15,000 tokens each at the untrained "
                             "evaluation's 50 tokens/s) and 1.5 of loading and saving leave 28.5 for SFT and GRPO, 79% "
                             "of their 30 and 6 each"}
    budget = demo.training_budget(cfg, 2.0 * 60, 150.0)  # three times the pace
    assert (budget["sft"], budget["grpo"], budget["eval"]) == (30.0, 6.0, 1.7)
    assert budget["why"].endswith("leave 38.1 for SFT and GRPO: their whole 30 and 6")
    budget = demo.training_budget(cfg, 30 * 60, 50.0)  # 3.5 minutes left: too little to show anything
    assert (budget["sft"], budget["grpo"]) == (15.0, 3.0)
    assert budget["why"].endswith("held at 50% of their 30 and 6, so the demo runs over its budget")
    assert "two evaluations of 2 (as planned)" in demo.training_budget(cfg, 5 * 60, None)["why"]  # tokens not counted
    assert demo.training_budget(demo.replace(cfg, sft_minutes=30.0), 25 * 60, 50.0) == {
        "sft": 30.0, "grpo": 6.0, "eval": 2.0,
        "why": "as set, without the budget (it applies when SFT's minutes are not given)"}
    assert demo.training_budget(demo.replace(cfg, total_minutes=None), 25 * 60, 50.0)["why"] == (
        "the recipe's, without a budget")

    # the report: the limits the stages had, why, the evaluations' plans, and the budget as the total's plan
    budget = demo.training_budget(cfg, 13.3 * 60, 60.0)
    state = demo.RunState(tmp_path / "state.json", runs=[{"argv": [], "budget": budget}])
    state.done["sft"] = {"result": {"steps": 110, "train_s": 1272.0, "tokens_per_s": 140.2, "final_loss": 0.5},
                         "seconds": 1290.0}
    demo.write_report(cfg, tmp_path, state)
    report = (tmp_path / demo.REPORT).read_text()
    assert "| SFT | 18.2 (limit) | 21.5 |" in report and "| GRPO | 3.6 (limit) | not run |" in report
    assert "| evaluate SFT | 4.2 (plan) |" in report and "| **total** | **45 (budget)** | **21.5** |" in report
    assert f"Limits: SFT 18.2 minutes, GRPO 3.6: {budget['why']}." in report


@pytest.mark.parametrize("grpo, said", [
    ({"reward_first": 0.8, "reward_last": 0.6, "reward_end_steps": 5},
     "mean reward 0.800 over the first 5 steps, 0.600 over the last"),
    ({"reward_first": 1.0, "reward_last": 0.0}, "mean reward 1.000 over the first step, 0.000 over the last"),  # older runs
])
def test_the_grpo_section_says_the_held_out_table_not_the_training_reward_is_the_measure(tmp_path, grpo, said):
    state = demo.RunState(tmp_path / "state.json", runs=[{"argv": []}])
    state.done["grpo"] = {"result": {"domains": ["os"], "steps": 10, "groups": 20, "groups_with_signal": 9, **grpo},
                          "seconds": 360.0}
    demo.write_report(demo.DemoConfig(), tmp_path, state)
    report = (tmp_path / demo.REPORT).read_text()
    assert f"10 steps, {said} (each step draws other training tasks" in report
    assert "the held-out evaluation above is the measure). 9 of 20 groups carried a signal" in report

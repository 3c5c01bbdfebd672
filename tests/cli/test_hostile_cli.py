"""Hostile but realistic command lines (issue 44): each user error is one line on stderr and exit code 2
(the traceback behind --debug), settings are checked before anything loads, a broken reward is named,
outputs are not emptied before the work, and an interrupted demo says the command that resumes it."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from openmanus_lite import cli
from openmanus_lite import rewards as R
from openmanus_lite.cli import demo as demo_cli
from openmanus_lite.cli import synth as synth_cli
from openmanus_lite.errors import UserError
from openmanus_lite.schema import SchemaError
from openmanus_lite.train.data import load_trajectories

ROOT = Path(__file__).resolve().parents[2]


def _one_error_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


@pytest.mark.parametrize("content, says", [
    (b'{"id": "a", "source": "s", "domain": "os", "messages": [\n', "line 1: invalid JSON"),
    (b"\n\xff\xfe not utf-8\n", "line 2: not UTF-8"),
])
def test_a_bad_data_file_is_named_with_its_line(tmp_path, capsys, content, says):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(content)
    with pytest.raises(SchemaError, match=says):
        load_trajectories(bad)  # what `sft --data` reads
    assert cli.main(["export", "--trajectories", str(bad), "--output_dir", str(tmp_path / "out")]) == 2
    line = _one_error_line(capsys)
    assert str(bad) in line and says in line


def test_user_errors_are_one_line_unless_debug_and_bugs_keep_their_traceback(monkeypatch, capsys):
    def user_error(argv):
        raise UserError("--n is wrong")

    monkeypatch.setattr(synth_cli, "main", user_error)
    assert cli.main(["synth"]) == 2
    assert "--n is wrong" in _one_error_line(capsys)
    with pytest.raises(UserError):
        cli.main(["--debug", "synth"])
    monkeypatch.setattr(synth_cli, "main", lambda argv: {}["a kit bug"])
    with pytest.raises(KeyError):
        cli.main(["synth"])


def test_missing_file_and_debug_through_the_real_entry_point(tmp_path):
    argv = [sys.executable, "-m", "openmanus_lite", "export", "--trajectories", str(tmp_path / "none.jsonl"),
            "--output_dir", str(tmp_path)]
    plain = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    assert plain.returncode == 2 and "Traceback" not in plain.stderr
    assert plain.stderr.strip().count("\n") == 0 and "none.jsonl" in plain.stderr
    debug = subprocess.run(argv[:3] + ["--debug"] + argv[3:], capture_output=True, text=True, cwd=ROOT)
    assert debug.returncode != 0 and "Traceback" in debug.stderr


def test_a_missing_model_folder_is_not_called_a_bad_repo_id(tmp_path, capsys):
    assert cli.main(["eval", "--model", str(tmp_path / "no_model"), "--limit", "1", "--domains", "db",
                     "--output_dir", str(tmp_path)]) == 2
    assert "does not exist" in _one_error_line(capsys)


def test_a_model_folder_with_a_cut_config_is_named(tmp_path, capsys):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "qw')
    assert cli.main(["eval", "--model", str(model), "--limit", "1", "--domains", "db",
                     "--output_dir", str(tmp_path / "out")]) == 2
    assert "config.json is not valid JSON" in _one_error_line(capsys)


def _corrupt_copy_of_the_tiny_model(tmp_path, file: str, corrupt) -> Path:
    from openmanus_lite.train.presets import tiny_model_path

    model = tmp_path / "model"
    shutil.copytree(tiny_model_path(), model)
    path = model / file
    path.write_bytes(corrupt(path.read_bytes()))
    return model


@pytest.mark.parametrize("file, corrupt, says", [
    ("model.safetensors", lambda b: b[: len(b) // 2], "model.safetensors is not a readable safetensors file: it holds"),
    ("model.safetensors", lambda b: os.urandom(4096), "model.safetensors is not a readable safetensors file: its header"),
    ("model.safetensors", lambda b: b"", "model.safetensors is not a readable safetensors file"),
    ("config.json", lambda b: b"", "config.json is not valid JSON"),
    ("config.json", lambda b: b"[1, 2]", "config.json holds a JSON list, not an object"),
    ("config.json", lambda b: b"{}", "config.json has no model_type"),
])
def test_a_corrupt_checkpoint_file_is_named_before_loading(tmp_path, capsys, file, corrupt, says):
    model = _corrupt_copy_of_the_tiny_model(tmp_path, file, corrupt)
    assert cli.main(["eval", "--model", str(model), "--suite", "dev", "--limit", "1",
                     "--output_dir", str(tmp_path / "out")]) == 2
    line = _one_error_line(capsys)
    assert str(model / file) in line and says in line


def test_a_cut_safetensors_file_through_the_real_entry_point(tmp_path):
    model = _corrupt_copy_of_the_tiny_model(tmp_path, "model.safetensors", lambda b: b[:-100])
    proc = subprocess.run([sys.executable, "-m", "openmanus_lite", "eval", "--model", str(model), "--suite", "dev",
                           "--limit", "1", "--output_dir", str(tmp_path / "out")],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "model.safetensors" in proc.stderr and "cut short" in proc.stderr


def test_merge_refuses_to_write_over_its_input_and_sft_an_empty_data_file(tmp_path, capsys):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "train.jsonl").write_text("{}\n")
    assert cli.main(["merge", "--source", f"taskcraft={raw / 'train.jsonl'}", "--output_dir", str(raw)]) == 2
    assert "which the merge would overwrite" in _one_error_line(capsys)
    assert (raw / "train.jsonl").read_text() == "{}\n"
    (tmp_path / "empty.jsonl").write_text("")
    assert cli.main(["sft", "--preset", "cpu_debug", "--data", str(tmp_path / "empty.jsonl"),
                     "--output_dir", str(tmp_path / "sft")]) == 2
    assert "no trajectories in it" in capsys.readouterr().err


@pytest.mark.parametrize("argv, says", [
    (["eval", "--model", "random", "--limit", "0"], "--limit must be at least 1"),
    (["eval", "--model", "random", "--max_new_tokens", "-1"], "--max_new_tokens must be at least 1"),
    (["merge", "--source", "agenttraj_l=data/samples/agenttraj_l", "--source_cap", "agenttraj_l=-5"], "source_caps"),
    (["merge", "--source", "agenttraj_l=data/samples/agenttraj_l", "--source_weight", "agenttraj_l=nan"],
     "source_weights"),
    (["merge", "--source", "agenttraj_l=data/samples/agenttraj_l", "--formats", "jsonl,xml"],
     "export formats must be some of jsonl, parquet, hf; got ['jsonl', 'xml']"),
    (["merge", "--source", "agenttraj_l=data/samples/agenttraj_l", "--max_turns", "-3"], "max_turns must be at least 1"),
    (["merge", "--source", "agenttraj_l=data/samples/agenttraj_l", "--negatives", "2"], "negatives is a share"),
    (["merge", "--source", "agenttraj_l"], "expected NAME=PATH_OR_HUB_ID"),
    (["merge", "--source", "nosuch=data/samples/agenttraj_l"], "unknown source 'nosuch'"),
    (["merge", "--source", "agenttraj_l=data/samples/agenttraj_l", "--tokenizer", "no/such/folder"],
     "--tokenizer 'no/such/folder': no tokenizer there"),
])
def test_bad_settings_fail_before_any_work(tmp_path, capsys, monkeypatch, argv, says):
    monkeypatch.chdir(ROOT)
    assert cli.main([*argv, "--output_dir", str(tmp_path / "out")]) == 2
    assert says in _one_error_line(capsys)
    assert not (tmp_path / "out").exists()


def test_max_new_tokens_is_capped_at_the_context(tmp_path, capsys):
    from openmanus_lite.models import build_tiny_model
    from openmanus_lite.policies import ModelPolicy

    policy = ModelPolicy(str(build_tiny_model(tmp_path / "tiny")), max_new_tokens=100_000)
    context = policy.model.config.max_position_embeddings
    assert policy.max_new_tokens == context < 100_000
    assert f"using {context}" in capsys.readouterr().err


def test_synth_and_export_bound_n_and_keep_the_old_output(tmp_path, capsys, monkeypatch):
    old = tmp_path / "synth.jsonl"
    old.write_text("the previous run\n")
    assert cli.main(["synth", "--n", "100000000", "--output_file", str(old)]) == 2
    assert synth_cli.main(["--n", "0", "--output_file", str(old)]) == 2  # a command's main has the same boundary
    with pytest.raises(UserError, match="--n must be 1 to"):
        synth_cli.main(["--n", "0", "--output_file", str(old), "--debug"])
    with pytest.raises(SystemExit) as exit_:
        cli.main(["export", "--tasks", "db", "--n", "100000000", "--output_dir", str(tmp_path / "verl")])
    assert exit_.value.code == 2 and not (tmp_path / "verl").exists()

    def killed(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(synth_cli, "synthesize_trajectories", killed)
    assert cli.main(["synth", "--domain", "db", "--n", "2", "--output_file", str(old)]) == 130
    assert old.read_text() == "the previous run\n" and sorted(p.name for p in tmp_path.iterdir()) == ["synth.jsonl"]


def _reward(values=None, error=None):
    def hostile(prompts=None, completions=None, **kwargs):
        if error:
            raise error
        return values

    return hostile


@pytest.mark.parametrize("func, says", [
    (_reward(error=ZeroDivisionError("oops")), "raised ZeroDivisionError: oops"),
    (_reward(["1.0", "0.0"]), "'1.0' for completion 0"),
    (_reward([0.5, math.nan]), "nan for completion 1"),
    (_reward([math.inf, 0.0]), "inf for completion 0"),
    (_reward(None), "returned NoneType"),
    (_reward([1.0]), "1 values for 2 completions"),
])
def test_a_broken_custom_reward_is_named(func, says):
    R.register_reward("hostile_reward", overwrite=True)(func)
    try:
        (checked,), _ = R.build_rewards("hostile_reward")  # what GRPO trains with
        with pytest.raises(R.RewardError, match=f"reward 'hostile_reward' .*{says}"):
            checked(prompts=["p", "q"], completions=["a", "b"])
    finally:
        R.registry._REGISTRY.pop("hostile_reward")


def test_rewards_given_as_functions_are_checked_too():
    class RewardModel:  # stands for a torch module, which TRL scores itself
        def parameters(self):
            return iter(())

    async def awaited(prompts=None, completions=None, **kwargs):  # TRL awaits these itself
        return [1.0]

    model = RewardModel()
    assert R.checked_reward("org/reward-model") == "org/reward-model" and R.checked_reward(model) is model
    assert R.checked_reward(awaited) is awaited
    checked = R.checked_reward(_reward([math.nan]))  # what train_grpo does with reward_funcs=[...]
    assert R.checked_reward(checked) is checked
    with pytest.raises(R.RewardError, match="reward 'hostile' returned nan"):
        checked(prompts=["p"], completions=["a"])


def test_a_good_reward_passes_through_with_skips():
    R.register_reward("skipping_reward", overwrite=True)(_reward([None, 1]))
    try:
        assert R.get_reward_func("skipping_reward")(prompts=["p", "q"], completions=["a", "b"]) == [None, 1]
    finally:
        R.registry._REGISTRY.pop("skipping_reward")


def test_an_interrupted_demo_prints_the_command_that_resumes_it(tmp_path, capsys, monkeypatch):
    seen = []

    def interrupted(cfg, run_dir, argv, fresh_processes=True):
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.json").write_text(json.dumps(cfg.to_json()))
        (run_dir / "state.json").write_text("{}")
        seen.append(cfg)
        raise KeyboardInterrupt

    monkeypatch.setattr(demo_cli, "run_demo", interrupted)
    monkeypatch.setattr(demo_cli, "RUNS_DIR", tmp_path)
    assert cli.main(["demo", "--quick", "--domains", "db", "--sft_minutes", "0.5"]) == 130
    command = capsys.readouterr().err.strip().splitlines()[-1].split()
    assert command[:4] == ["python", "-m", "openmanus_lite", "demo"]
    assert cli.main(command[3:]) == 130
    assert seen[1] == seen[0] and Path(command[-1]).parent == tmp_path


@pytest.mark.parametrize("setting, says", [
    (["--learning_rate", "nan"], "learning_rate must be a finite number >= 0, got nan"),
    (["--learning_rate", "-1"], "learning_rate must be a finite number >= 0"),
    (["--per_device_train_batch_size", "-2"], "per_device_train_batch_size must be at least 1"),
    (["--max_steps", "0"], "0 would train a whole epoch"),
])
def test_training_settings_are_checked_before_anything_loads(tmp_path, capsys, setting, says):
    out = tmp_path / "sft"
    assert cli.main(["sft", "--preset", "cpu_debug", "--synth", "1", "--output_dir", str(out), *setting]) == 2
    assert says in capsys.readouterr().err and not out.exists()


def _checkpoint(folder: Path, step: int, complete: bool = True) -> Path:
    ckpt = folder / f"checkpoint-{step}"
    ckpt.mkdir(parents=True)
    if complete:
        (ckpt / "trainer_state.json").write_text("{}")
    return ckpt


def test_the_rerun_rule(tmp_path):
    from openmanus_lite.train.run_folder import LOCK_FILE, claim_output_dir

    assert claim_output_dir(tmp_path / "new", "grpo") is None
    resumed = tmp_path / "resumed"
    _checkpoint(resumed, 2)
    _checkpoint(resumed, 4, complete=False)  # killed while saving
    assert claim_output_dir(resumed, "grpo") == str(resumed / "checkpoint-2")  # no --resume needed, nothing deleted
    with pytest.raises(UserError, match="resuming is off.*--overwrite_output_dir"):
        claim_output_dir(resumed, "grpo", resume=False)
    files_only = tmp_path / "files_only"
    files_only.mkdir()
    (files_only / "log_history.json").write_text("[]")
    with pytest.raises(UserError, match="no complete checkpoint.*log_history.json"):
        claim_output_dir(files_only, "sft")
    other = tmp_path / "other"
    _checkpoint(other, 1)
    (other / LOCK_FILE).write_text(json.dumps({"pid": 1, "kind": "sft"}))  # left by an sft run
    with pytest.raises(UserError, match="holds a sft run"):
        claim_output_dir(other, "grpo")
    assert claim_output_dir(other, "grpo", overwrite=True) is None and not (other / "checkpoint-1").exists()


def test_two_runs_in_one_folder_the_second_is_refused_naming_the_first(tmp_path):
    from openmanus_lite.train.run_folder import LOCK_FILE, hold_output_dir

    folder = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from openmanus_lite.train.run_folder import hold_output_dir; "
         f"hold_output_dir({str(folder)!r}, 'sft'); print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(UserError, match=f"in use by another run \\(pid {holder.pid}, started .*-c"):
            hold_output_dir(folder, "sft")
    finally:
        holder.kill()
        holder.wait()
    assert json.loads((folder / LOCK_FILE).read_text())["pid"] == holder.pid  # a stale lock file, taken over:
    assert hold_output_dir(folder, "sft")["pid"] == holder.pid
    assert json.loads((folder / LOCK_FILE).read_text())["pid"] == os.getpid()


@pytest.mark.parametrize("argv", [["sft"], ["grpo"], ["dpo", "train-dpo"], ["dpo", "train-rm"], ["demo"]])
def test_every_training_help_states_the_rerun_rule(argv, capsys):
    with pytest.raises(SystemExit):
        cli.main([*argv, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--overwrite_output_dir start" in text and "resume" in text.partition("--overwrite_output_dir start")[2]

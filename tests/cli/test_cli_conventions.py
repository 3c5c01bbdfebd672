"""The command lines' shared conventions (openmanus_lite/cli/args.py): TRL spellings, deprecated
aliases, YAML configs, TRL pass-through, experiment tracking, Hub push, rewards by import path,
and the paired sign test of `eval compare`."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest

pytest.importorskip("torch")

from openmanus_lite.cli import args as cliargs  # noqa: E402
from openmanus_lite.cli import dpo as dpo_cli  # noqa: E402
from openmanus_lite.cli import eval as eval_cli  # noqa: E402
from openmanus_lite.cli import grpo as grpo_cli  # noqa: E402
from openmanus_lite.cli import merge as merge_cli  # noqa: E402
from openmanus_lite.cli import sft as sft_cli  # noqa: E402
from openmanus_lite.cli import synth as synth_cli  # noqa: E402
from openmanus_lite.train.sft import import_trl  # noqa: E402

import_trl()

# (parser, argv with underscores, deprecated/env-specific renames, TRL settings left for the config) per command
SPELLINGS = [
    (sft_cli.build_parser, ["--synth", "2", "--output_dir", "o", "--max_steps", "3", "--learning_rate", "0.001",
                            "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "2",
                            "--num_train_epochs", "2", "--overwrite_output_dir"], sft_cli.RENAMED, True),
    (grpo_cli.build_parser, ["--output_dir", "o", "--max_steps", "3", "--learning_rate", "0.001",
                             "--per_device_train_batch_size", "4", "--num_train_epochs", "1", "--n_tasks", "2"],
     cliargs.DEPRECATED, True),
    (dpo_cli._parser, ["train-dpo", "--output_dir", "o", "--max_steps", "3", "--learning_rate", "0.001",
                       "--per_device_train_batch_size", "2", "--lora_r", "4", "--max_turns", "3"], cliargs.DEPRECATED,
     True),
    (eval_cli.build_parser, ["--model", "expert", "--output_dir", "o", "--per_device_eval_batch_size", "3",
                             "--max_new_tokens", "5", "--budget_calls", "4", "--no_progress"], eval_cli.RENAMED, False),
    (eval_cli.freeze_parser, ["--output_dir", "o", "--per_cell", "2", "--no_agentbench"], eval_cli.RENAMED, False),
    (merge_cli.build_parser, ["--source", "taskcraft=x", "--output_dir", "o", "--split_ratios", "0.8,0.1,0.1",
                              "--six_only", "--max_turns", "4"], cliargs.DEPRECATED, False),
    (synth_cli.build_parser, ["--output_file", "o.jsonl", "--only_success"], {"out": "output_file"}, False),
]


def _exports():
    from openmanus_lite.cli import demo, export, prepare_model

    return [(export.build_parser, ["--output_dir", "o", "--tasks", "db"], cliargs.DEPRECATED, False),
            (prepare_model.build_parser, ["--output_dir", "o", "--force"], cliargs.DEPRECATED, False),
            (demo.build_parser, ["--output_dir", "o", "--sft_minutes", "2", "--quick"], cliargs.DEPRECATED, False)]


def _dashed(argv):
    return [a.replace("_", "-") if a.startswith("--") else a for a in argv]


@pytest.mark.parametrize("index", range(len(SPELLINGS) + 3))
def test_every_command_takes_both_spellings_and_its_old_names(index, capsys):
    build, argv, renames, passthrough = (SPELLINGS + _exports())[index]
    parser = build()

    def parse(argv):
        args, extras = cliargs.parse(build(), argv, passthrough=passthrough, deprecated=renames)
        return vars(args), extras

    under = parse(argv)
    assert parse(_dashed(argv)) == under
    old_names = {new: old for old, new in renames.items()}
    old_argv = [f"--{old_names[a[2:]]}" if a.startswith("--") and a[2:] in old_names else a for a in argv]
    if old_argv != argv:
        capsys.readouterr()
        assert parse(old_argv) == under
        assert "is deprecated" in capsys.readouterr().err
    assert parser.epilog and parser.epilog.startswith("examples:")
    if passthrough:  # TRL's settings are left for the config, and --outp is not silently --output_dir
        assert "--max_steps" in under[1] and "--outp" in parse([*argv, "--outp", "x"])[1]
    else:  # no silent prefix matching: --outp is not --output_dir
        with pytest.raises(SystemExit):
            parse([*argv, "--outp", "x"])


def _sft_cfg(argv):
    return sft_cli.settings(*sft_cli.parse(argv))[1]


def _grpo_cfg(argv):
    return grpo_cli.settings(*grpo_cli.parse(argv))[2]


def test_yaml_config_gives_the_same_trainer_config_as_flags(tmp_path):
    sft_flags = ["--preset", "cpu_debug", "--synth", "2", "--learning-rate", "3e-4", "--max_steps", "7",
                 "--adam_beta2", "0.9", "--lr_scheduler_type", "cosine", "--report_to", "tensorboard",
                 "--output_dir", str(tmp_path / "sft")]
    (tmp_path / "sft.yaml").write_text(
        f"preset: cpu_debug\nsynth: 2\nlearning_rate: 3.0e-4\nmax-steps: 7\nadam_beta2: 0.9\n"
        f"lr_scheduler_type: cosine\nreport_to: tensorboard\noutput_dir: {tmp_path / 'sft'}\nmax_length: 64\n")
    from_flags = _sft_cfg(sft_flags).to_dict()
    from_yaml = _sft_cfg(["--config", str(tmp_path / "sft.yaml"), "--max_length", "1024"]).to_dict()
    assert from_yaml["max_length"] == 1024  # the command line wins over the file
    from_flags["max_length"] = 1024
    assert from_flags == from_yaml
    assert from_flags["adam_beta2"] == 0.9 and from_flags["report_to"] == ["tensorboard"]

    grpo_flags = ["--preset", "cpu_debug", "--reward_funcs", "accuracy:2", "format", "--num_iterations", "2",
                  "--log_completions", "--max_steps", "3", "--output_dir", str(tmp_path / "grpo")]
    (tmp_path / "grpo.yaml").write_text(
        f"preset: cpu_debug\nreward_funcs: ['accuracy:2', format]\nnum_iterations: 2\nlog_completions: true\n"
        f"max_steps: 3\noutput_dir: {tmp_path / 'grpo'}\n")
    a, b = _grpo_cfg(grpo_flags).to_dict(), _grpo_cfg(["--config", str(tmp_path / "grpo.yaml")]).to_dict()
    assert a == b and a["num_iterations"] == 2 and a["log_completions"] is True and a["rewards"] == "accuracy:2 format"

    dpo_flags = ["train-dpo", "--output_dir", "o", "--max_steps", "3", "--adam_beta2", "0.95", "--beta", "0.2"]
    (tmp_path / "dpo.yaml").write_text("output_dir: o\nmax_steps: 3\nadam_beta2: 0.95\nbeta: 0.2\n")
    s1 = dpo_cli.settings(*dpo_cli.parse(dpo_flags))
    s2 = dpo_cli.settings(*dpo_cli.parse(["train-dpo", "--config", str(tmp_path / "dpo.yaml")]))
    assert s1 == s2 and s1.adam_beta2 == 0.95 and s1.beta == 0.2 and s1.max_steps == 3


def test_trl_only_settings_pass_through_and_bad_ones_are_named(tmp_path, capsys):
    cfg = _grpo_cfg(["--preset", "cpu_debug", "--num-iterations", "3", "--adam_beta2", "0.95",
                     "--output_dir", str(tmp_path)])
    assert cfg.num_iterations == 3 and cfg.adam_beta2 == 0.95
    with pytest.raises(ValueError, match=r"unknown setting --num_iteration \(did you mean --num_iterations"):
        _grpo_cfg(["--preset", "cpu_debug", "--num_iteration", "2"])
    with pytest.raises(ValueError, match="packing: the data is pre-tokenized"):
        _sft_cfg(["--preset", "cpu_debug", "--synth", "1", "--packing", "true", "--output_dir", str(tmp_path)])
    with pytest.raises(ValueError, match=r"reward_weights: give weights in rewards \(--reward_funcs\)"):
        _grpo_cfg(["--preset", "cpu_debug", "--reward_weights", "1", "2", "1", "--output_dir", str(tmp_path)])
    # the CLIs turn those into exit code 2 with the message, before any data or model is built
    assert sft_cli.main(["--preset", "cpu_debug", "--synth", "1", "--no_such_setting", "1"]) == 2
    assert "unknown setting --no_such_setting" in capsys.readouterr().err
    assert dpo_cli.main(["pairs", "--output_dir", str(tmp_path), "--adam_beta2", "0.9"]) == 2
    assert "unknown options for `dpo pairs`" in capsys.readouterr().err
    if importlib.util.find_spec("trackio") is None:  # a tracker that is not installed fails before any work
        assert sft_cli.main(["--preset", "cpu_debug", "--synth", "1", "--report_to", "trackio"]) == 2
        assert "pip install trackio" in capsys.readouterr().err
    (tmp_path / "two.yaml").write_text("report_to: [tensorboard, wandb]\n")
    assert sft_cli.parse(["--config", str(tmp_path / "two.yaml")])[0].report_to == ["tensorboard", "wandb"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("- just\n- a list\n")
    with pytest.raises(SystemExit, match="must hold a mapping"):
        sft_cli.parse(["--config", str(bad)])


def test_the_commands_rules_on_top_of_the_configs_fields(tmp_path, capsys):
    """What the training commands add to their configs' own fields: epochs as steps, a multi-turn episode budget,
    no checkpoints, the output folder per mode; DPO / reward-model LoRA alpha, eval batch and the old --max_seconds."""
    base = ["--preset", "cpu_debug", "--output_dir", str(tmp_path)]
    assert _grpo_cfg([*base, "--num_train_epochs", "2"]).max_steps == -1  # main counts the steps from the prompts
    multi = _grpo_cfg([*base, "--mode", "multi", "--max_completion_length", "300", "--save_steps", "0"])
    assert (multi.max_episode_tokens, multi.max_completion_length, multi.save_strategy) == (300, 300, "no")
    assert _grpo_cfg(base[:2]).output_dir == "runs/grpo_single"
    s = dpo_cli.settings(*dpo_cli.parse(["train-rm", "--output_dir", "o", "--lora_r", "4",
                                         "--per_device_train_batch_size", "2", "--max_seconds", "90"]))
    assert (s.lora_r, s.lora_alpha, s.per_device_train_batch_size, s.per_device_eval_batch_size) == (4, 8, 2, 2)
    assert (s.max_minutes, s.learning_rate, s.output_dir) == (1.5, 1e-4, "o/trainer")
    assert "--max_seconds is deprecated" in capsys.readouterr().err
    d = dpo_cli.settings(*dpo_cli.parse(["dpo", "--output_dir", "o"]))  # the presets' DPO settings, TRL's loss
    assert (d.learning_rate, d.lora_alpha, d.beta, d.loss_type, d.max_steps) == (2e-5, 32, 0.1, ["sigmoid"], -1)


def test_custom_reward_by_import_path_trains_a_grpo_step_and_the_model_is_pushed(tmp_path, monkeypatch, capsys):
    from huggingface_hub import HfApi

    from openmanus_lite.rewards import parse_reward_spec

    (tmp_path / "my_rewards.py").write_text(
        "def short_answer(prompts=None, completions=None, **kw):\n"
        "    return [1.0 / (1 + len(c[-1]['content'] if isinstance(c, list) else c)) for c in completions]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert parse_reward_spec("my_rewards:short_answer:0.5 accuracy:2 format") == {
        "my_rewards:short_answer": 0.5, "accuracy": 2.0, "format": 1.0}
    assert parse_reward_spec(["my_rewards:short_answer"]) == {"my_rewards:short_answer": 1.0}
    with pytest.raises(ValueError, match="cannot import reward 'no_such_mod:f': importing module 'no_such_mod' "
                                         "failed with ModuleNotFoundError"):
        parse_reward_spec("no_such_mod:f")
    with pytest.raises(ValueError, match="has no attribute 'nope'"):
        parse_reward_spec("my_rewards:nope:0.5")
    with pytest.raises(ValueError, match="weight of reward 'accuracy' must be a number"):
        parse_reward_spec("accuracy:lots")

    uploads = []
    monkeypatch.setattr(HfApi, "create_repo", lambda self, repo_id, **kw: f"https://huggingface.co/{repo_id}")
    monkeypatch.setattr(HfApi, "upload_folder",
                        lambda self, **kw: uploads.append({**kw, "files": sorted(p.name for p in
                                                                                 __import__("pathlib").Path(
                                                                                     kw["folder_path"]).iterdir())}))
    out = tmp_path / "run"
    rc = grpo_cli.main(["--preset", "cpu_debug", "--envs", "db", "--n_tasks", "2", "--max_steps", "1",
                        "--reward_funcs", "my_rewards:short_answer:0.5", "format", "--no_plot",
                        "--output_dir", str(out), "--push_to_hub", "--hub_model_id", "me/tiny-grpo"])
    assert rc == 0, capsys.readouterr().err
    log = json.loads((out / "log_history.json").read_text())
    assert "rewards/short_answer/mean" in log[0] and "rewards/format/mean" in log[0]
    assert [u["repo_id"] for u in uploads] == ["me/tiny-grpo"] and uploads[0]["folder_path"] == str(out / "final")
    assert "config.json" in uploads[0]["files"] and uploads[0]["path_in_repo"] is None


def test_hub_push_plumbing_and_clear_errors(tmp_path, monkeypatch, capsys):
    from huggingface_hub import HfApi

    from openmanus_lite.hub import HubPushError, push_folder, push_outputs

    for kind in ("merged", "adapter"):
        (tmp_path / kind).mkdir()
        (tmp_path / kind / "model.safetensors").write_text("x")
    (tmp_path / "merged" / "runs").mkdir()
    calls = []
    monkeypatch.setattr(HfApi, "create_repo", lambda self, repo_id, **kw: calls.append(("create", repo_id, kw))
                        or f"https://huggingface.co/{repo_id}")
    monkeypatch.setattr(HfApi, "upload_folder", lambda self, **kw: calls.append(("upload", kw["repo_id"], kw)))
    urls = push_outputs({"adapter": tmp_path / "adapter", "merged": tmp_path / "merged"}, "me/m", private=True)
    assert urls == {"adapter": "https://huggingface.co/me/m/tree/main/adapter", "merged": "https://huggingface.co/me/m"}
    uploads = [c[2] for c in calls if c[0] == "upload"]
    assert [(u["folder_path"], u["path_in_repo"]) for u in uploads] == [
        (str(tmp_path / "adapter"), "adapter"), (str(tmp_path / "merged"), None)]
    assert all(c[2]["private"] is True for c in calls if c[0] == "create")
    assert "runs/**" in uploads[0]["ignore_patterns"]  # tracker logs and checkpoints stay local

    monkeypatch.undo()  # the real client, offline (HF_HUB_OFFLINE=1 in the tests)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as hc

    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
    with pytest.raises(HubPushError, match=r"could not push .* 'me/m': OfflineModeIsEnabled.*hf upload me/m"):
        push_folder(tmp_path / "merged", "me/m")
    with pytest.raises(FileNotFoundError, match="nothing to push"):
        push_folder(tmp_path / "missing", "me/m")
    assert grpo_cli.main(["--preset", "cpu_debug", "--push_to_hub"]) == 2
    assert "--push_to_hub needs --hub_model_id" in capsys.readouterr().err
    assert sft_cli.main(["--preset", "cpu_debug", "--synth", "1", "--push_to_hub"]) == 2


def test_sft_logs_to_tensorboard_and_the_loss_reads_back(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    import openmanus_lite.paths as paths

    monkeypatch.setattr(paths, "CACHE_DIR", tmp_path / "cache")
    out = tmp_path / "run"
    rc = sft_cli.main(["--preset", "cpu_debug", "--synth", "2", "--domains", "db", "--max_steps", "3",
                       "--logging_steps", "1", "--report_to", "tensorboard", "--output_dir", str(out),
                       "--no_progress", "--save", "adapter"])
    assert rc == 0
    history = [h["loss"] for h in json.loads((out / "loss_history.json").read_text())["history"] if "loss" in h]
    events = sorted(out.glob("runs/*/events.out.tfevents.*"))
    assert events, f"no tensorboard events under {out / 'runs'}"
    acc = EventAccumulator(str(events[0].parent))
    acc.Reload()
    logged = [e.value for e in acc.Scalars("train/loss")]
    assert len(logged) == len(history) == 3
    assert logged == pytest.approx(history, rel=1e-5)


def test_eval_compare_prints_the_paired_sign_test(tmp_path, capsys):
    from openmanus_lite.eval import BenchmarkResult, TaskRecord, sign_test, sign_tests

    def rec(tid, domain, ok):
        return TaskRecord(task_id=tid, domain=domain, difficulty="easy", success=ok, score=float(ok), turns=1,
                          invalid_actions=0, wall_s=0.1, generated_tokens=None)

    # db: 7 gained, 0 lost; kg: 1 gained, 2 lost; one task both solve
    a = [rec(f"db{i}", "db", False) for i in range(7)] + [rec("kg0", "kg", False), rec("kg1", "kg", True),
                                                          rec("kg2", "kg", True), rec("kg3", "kg", True)]
    b = [rec(f"db{i}", "db", True) for i in range(7)] + [rec("kg0", "kg", True), rec("kg1", "kg", False),
                                                         rec("kg2", "kg", False), rec("kg3", "kg", True)]
    ra, rb = BenchmarkResult("base", "dev", a, label="base"), BenchmarkResult("grpo", "dev", b, label="grpo")
    table = sign_tests(ra, rb).set_index("domain")
    assert table.loc["db", "p_value"] == pytest.approx(2 / 2 ** 7)  # 0.015625
    assert table.loc["kg", "p_value"] == pytest.approx(1.0)
    assert (table.loc["all", "gained"], table.loc["all", "lost"]) == (8, 2)
    assert table.loc["all", "p_value"] == pytest.approx(2 * (1 + 10 + 45) / 2 ** 10)  # 0.109375
    assert sign_test(0, 0) == 1.0 and sign_test(5, 5) == 1.0
    with pytest.raises(ValueError, match="counts >= 0"):
        sign_test(-1, 2)
    ra.save(tmp_path / "a.json")
    rb.save(tmp_path / "b.json")
    capsys.readouterr()
    assert eval_cli.main(["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    printed = capsys.readouterr().out
    assert "paired sign test, grpo vs base" in printed and "0.0156" in printed and "0.109" in printed


def test_help_is_fast_and_ends_with_examples():
    import subprocess
    import time

    t0 = time.perf_counter()
    for cmd in ("sft", "grpo", "dpo", "eval", "merge", "synth", "export", "demo", "prepare-model"):
        r = subprocess.run([sys.executable, "-m", "openmanus_lite", cmd, "--help"], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0 and "examples:" in r.stdout, (cmd, r.stderr[-500:])
    assert time.perf_counter() - t0 < 60  # no unsloth import (7-10 s each) behind --help


@pytest.mark.parametrize("name", ["sft_quick", "grpo_quick"])
def test_shipped_run_configs_build_their_trainer_configs(name):
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "configs" / "examples" / f"{name}.yaml"
    cfg = (_sft_cfg if name.startswith("sft") else _grpo_cfg)(["--config", str(path)])
    assert cfg.report_to == ["tensorboard"]
    assert cfg.adam_beta2 == 0.95 if name.startswith("sft") else (cfg.num_iterations, cfg.log_completions) == (2, True)


@pytest.mark.parametrize("argv,tokens", [(["--suite", "agentbench_db"], 256), (["--suite", "dev", "--domains", "db"], 96),
                                         (["--suite", "agentbench_db", "--max_new_tokens", "64"], 64)])
def test_eval_gives_each_suite_the_turn_length_its_statements_need(argv, tokens, monkeypatch):
    seen = {}

    def stop(spec, **kw):
        seen.update(kw)
        raise SystemExit(0)

    monkeypatch.setattr(eval_cli, "make_policy", stop)
    with pytest.raises(SystemExit):
        eval_cli.main(["--model", "random", *argv, "--no_progress"])
    assert seen["max_new_tokens"] == tokens

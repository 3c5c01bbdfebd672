"""Scaling out: accelerate launch configs parse, verl export round-trips and grades."""

from pathlib import Path

import pytest

from openmanus_lite import react
from openmanus_lite.envs import generate_tasks, list_domains, make_env, run_expert
from openmanus_lite.schema import Trajectory, Turn
from openmanus_lite.verl_export import (
    export_tasks,
    export_trajectories,
    read_verl_parquet,
    validate_rl_rows,
)
from openmanus_lite.verl_reward import compute_score, split_assistant_turns

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "accelerate"


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.glob("*.yaml")))
def test_accelerate_configs_parse(name):
    from accelerate.commands.config.config_args import load_config_from_file

    cfg = load_config_from_file(str(CONFIGS / name))
    assert cfg.num_processes >= 1
    assert str(cfg.distributed_type).split(".")[-1] in {"NO", "MULTI_GPU", "DEEPSPEED", "FSDP", "MULTI_CPU"}


def test_all_shipped_launch_modes_present():
    names = {p.stem for p in CONFIGS.glob("*.yaml")}
    assert {"single_gpu", "multi_gpu_ddp", "deepspeed_zero2", "deepspeed_zero3", "fsdp"} <= names


def test_env_tasks_round_trip_and_grade(tmp_path):
    domains = list_domains()
    assert domains, "no environment registered"
    tasks = [t for d in domains for t in generate_tasks(d, 3, seed=1)]
    path = export_tasks(tasks, tmp_path / "train.parquet", split="train")
    rows = read_verl_parquet(path)
    validate_rl_rows(rows)
    assert [r["extra_info"]["index"] for r in rows] == list(range(len(tasks)))
    assert {r["ability"] for r in rows} == set(domains)
    for task, row in zip(tasks, rows):
        assert row["prompt"][0]["content"] == make_env(task.domain).reset(task)
        # the expert's turns, as a multi-turn verl response, score 1; garbage scores 0
        messages, _ = run_expert(make_env(task.domain), task)
        response = "".join(
            f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages[1:]
        )
        assert compute_score(row["data_source"], response, row["reward_model"]["ground_truth"]) == 1.0
        assert compute_score(row["data_source"], "\x00 garbage", row["reward_model"]["ground_truth"]) == 0.0


def test_trajectories_round_trip_sft_and_rl(tmp_path):
    trajs = [
        Trajectory("s/1", "synth", "db", [Turn("user", "How many?"), Turn("assistant", react.format_turn("n", react.answer("3")), True)]),
        Trajectory("s/2", "synth", "os", [Turn("user", "List"), Turn("assistant", react.format_turn("l", react.bash("ls")), True)]),
    ]
    sft_path, skipped = export_trajectories(trajs, tmp_path / "sft.parquet", layout="sft")
    assert skipped == 0
    assert [r["messages"] for r in read_verl_parquet(sft_path)] == [t.to_messages() for t in trajs]
    rl_path, skipped = export_trajectories(trajs, tmp_path / "rl.parquet", layout="rl")
    rows = read_verl_parquet(rl_path)
    validate_rl_rows(rows)
    assert skipped == 1 and rows[0]["reward_model"]["ground_truth"] == "3"
    assert rows[0]["prompt"] == [{"role": "user", "content": "How many?"}]
    assert compute_score(rows[0]["data_source"], "<answer>\n3\n</answer>", "3") == 1.0
    assert compute_score(rows[0]["data_source"], "Think: x\nAct: answer(4)", "3") == 0.0


def test_schema_violations_are_named():
    with pytest.raises(ValueError, match="row 0: missing column 'ability'"):
        validate_rl_rows([{"data_source": "x", "prompt": [], "reward_model": {}, "extra_info": {}}])


def test_split_assistant_turns():
    assert split_assistant_turns("plain reply<|im_end|>junk") == ["plain reply"]
    text = "<|im_start|>assistant\nA<|im_end|>\n<|im_start|>user\nobs<|im_end|>\n<|im_start|>assistant\nB"
    assert split_assistant_turns(text) == ["A", "B"]

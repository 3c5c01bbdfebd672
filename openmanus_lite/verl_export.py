"""Export data and environment tasks in the parquet layouts verl's trainers read, for when one GPU is not enough.

RL rows (`verl.trainer.main_ppo`): `data_source`, `prompt`, `ability`, `reward_model` {`style`, `ground_truth`},
`extra_info`; environment tasks keep the whole `Task` as JSON in `ground_truth` for `verl_reward.compute_score`.
SFT rows (verl's multi-turn SFT dataset): `messages` plus the same `extra_info`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from openmanus_lite.react import extract_answer
from openmanus_lite.schema import Task, Trajectory

DATA_SOURCE_PREFIX = "openmanus_lite"
RL_COLUMNS = ("data_source", "prompt", "ability", "reward_model", "extra_info")


def task_to_verl_row(task: Task, split: str, index: int) -> dict[str, Any]:
    """One environment task as a verl RL row; the prompt is the environment's first message."""
    from openmanus_lite.envs import make_env

    first_message = make_env(task.domain).reset(task)
    return {
        "data_source": f"{DATA_SOURCE_PREFIX}/env/{task.domain}",
        "prompt": [{"role": "user", "content": first_message}],
        "ability": task.domain,
        "reward_model": {"style": "rule", "ground_truth": task.to_json()},
        "extra_info": {"split": split, "index": index, "task_id": task.id, "difficulty": task.difficulty},
    }


def trajectory_to_verl_rl_row(traj: Trajectory, split: str, index: int) -> dict[str, Any] | None:
    """An RL row of a trajectory ending in a final answer (the prompt: all before that turn), else None."""
    last = max((i for i, t in enumerate(traj.messages) if t.role == "assistant"), default=None)
    if last is None:
        return None
    gold = extract_answer(traj.messages[last].content)
    if gold is None:
        return None
    return {
        "data_source": f"{DATA_SOURCE_PREFIX}/{traj.source}",
        "prompt": traj.to_messages()[:last],
        "ability": traj.domain,
        "reward_model": {"style": "rule", "ground_truth": gold},
        "extra_info": {"split": split, "index": index, "task_id": traj.id, "difficulty": ""},
    }


def trajectory_to_verl_sft_row(traj: Trajectory, split: str, index: int) -> dict[str, Any]:
    return {
        "messages": traj.to_messages(),
        "data_source": f"{DATA_SOURCE_PREFIX}/{traj.source}",
        "ability": traj.domain,
        "extra_info": {"split": split, "index": index, "task_id": traj.id},
    }


def _write(rows: list[dict[str, Any]], path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not rows:
        raise ValueError(f"nothing to write to {path}: no rows")
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def export_tasks(tasks: Iterable[Task], path: str | Path, split: str = "train") -> Path:
    """Environment tasks -> a verl RL parquet file."""
    return _write([task_to_verl_row(t, split, i) for i, t in enumerate(tasks)], Path(path))


def export_trajectories(trajs: Iterable[Trajectory], path: str | Path, split: str = "train",
                        layout: str = "sft") -> tuple[Path, int]:
    """Trajectories -> verl SFT rows or RL rows (`layout="rl"`); (path, trajectories skipped without an answer)."""
    if layout not in ("sft", "rl"):
        raise ValueError(f"layout must be 'sft' or 'rl', got {layout!r}")
    to_row = trajectory_to_verl_sft_row if layout == "sft" else trajectory_to_verl_rl_row
    rows = [to_row(t, split, i) for i, t in enumerate(trajs)]
    kept = [row for row in rows if row is not None]
    return _write(kept, Path(path)), len(rows) - len(kept)


def read_verl_parquet(path: str | Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def validate_rl_rows(rows: list[dict[str, Any]]) -> None:
    """Raise ValueError naming the row and field when a row is not in verl's RL layout."""
    for i, row in enumerate(rows):
        for col in RL_COLUMNS:
            if col not in row:
                raise ValueError(f"row {i}: missing column {col!r}")
        if not isinstance(row["prompt"], list) or not all(
            isinstance(m, dict) and set(m) >= {"role", "content"} for m in row["prompt"]
        ):
            raise ValueError(f"row {i}: 'prompt' must be a list of {{role, content}} messages")
        if set(row["reward_model"]) < {"style", "ground_truth"}:
            raise ValueError(f"row {i}: 'reward_model' needs 'style' and 'ground_truth'")
        if set(row["extra_info"]) < {"split", "index"}:
            raise ValueError(f"row {i}: 'extra_info' needs 'split' and 'index'")

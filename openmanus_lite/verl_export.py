"""Export data and environment tasks in the parquet layout verl's trainers read.

When one GPU is not enough, verl (the engine OpenManus-RL trains on) takes over; the data,
rewards and environments stay this kit's. Two layouts:

- RL (`verl.trainer.main_ppo`, GRPO too): one row per prompt with
  `data_source`, `prompt` (a message list), `ability`, `reward_model` {`style`, `ground_truth`},
  `extra_info` {`split`, `index`, ...}. Environment tasks keep the whole `Task` as JSON in
  `ground_truth`, so `verl_reward.compute_score` can rebuild the environment and grade.
- SFT (verl's multi-turn SFT dataset): a `messages` column plus the same `extra_info`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Iterable

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
    """A trajectory that ends in a final answer becomes an RL prompt: the conversation up to the
    last assistant turn is the prompt, that turn's answer is the ground truth. Others: None."""
    from openmanus_lite.react import extract_answer

    last = max((i for i, t in enumerate(traj.messages) if t.role == "assistant"), default=None)
    if last is None:
        return None
    gold = extract_answer(traj.messages[last].content)
    if gold is None:
        return None
    return {
        "data_source": f"{DATA_SOURCE_PREFIX}/{traj.source}",
        "prompt": [{"role": t.role, "content": t.content} for t in traj.messages[:last]],
        "ability": traj.domain,
        "reward_model": {"style": "rule", "ground_truth": gold},
        "extra_info": {"split": split, "index": index, "task_id": traj.id, "difficulty": ""},
    }


def trajectory_to_verl_sft_row(traj: Trajectory, split: str, index: int) -> dict[str, Any]:
    return {
        "messages": [{"role": t.role, "content": t.content} for t in traj.messages],
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


def export_trajectories(
    trajs: Iterable[Trajectory], path: str | Path, split: str = "train", layout: str = "sft"
) -> tuple[Path, int]:
    """Trajectories -> verl SFT rows (`layout="sft"`) or RL rows (`"rl"`, answer-ending ones only).

    Returns (path, number of trajectories skipped because they end in no final answer)."""
    rows, skipped = [], 0
    for i, t in enumerate(trajs):
        if layout == "sft":
            rows.append(trajectory_to_verl_sft_row(t, split, i))
        elif layout == "rl":
            row = trajectory_to_verl_rl_row(t, split, i)
            if row is None:
                skipped += 1
            else:
                rows.append(row)
        else:
            raise ValueError(f"layout must be 'sft' or 'rl', got {layout!r}")
    return _write(rows, Path(path)), skipped


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


def build_parser() -> argparse.ArgumentParser:
    from openmanus_lite.cli.args import make_parser

    p = make_parser("openmanus_lite export", "Export data and tasks for verl (options take --x_y or --x-y).", (
        "python -m openmanus_lite export --tasks db,kg --n 100 --output_dir runs/verl",
        "python -m openmanus_lite export --trajectories synth_os.jsonl --layout rl --output_dir runs/verl",
    ))
    p.add_argument("--output_dir", required=True, help="output folder")
    p.add_argument("--tasks", default="", help="comma-separated domains to generate tasks for")
    p.add_argument("--n", type=int, default=100, help="tasks per domain and split")
    p.add_argument("--difficulty", default="easy")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--trajectories", default=None, help="a Trajectory JSONL file (e.g. from merge or synth)")
    p.add_argument("--layout", choices=("sft", "rl"), default="sft", help="layout for --trajectories")
    return p


def main(argv: list[str] | None = None) -> int:
    """`python -m openmanus_lite export --tasks db,kg --n 100 --output_dir DIR` / `--trajectories FILE`."""
    from openmanus_lite.cli.args import parse

    p = build_parser()
    args, _ = parse(p, argv)
    out = Path(args.output_dir)
    if args.tasks:
        from openmanus_lite.envs import generate_tasks
        from openmanus_lite.splits import GRPO_TRAIN_SEED, VERL_TEST_SEED, check_disjoint, training_tasks

        domains = [d.strip() for d in args.tasks.split(",") if d.strip()]
        test = [t for d in domains for t in generate_tasks(d, args.n, VERL_TEST_SEED + args.seed, args.difficulty)]
        train, _ = training_tasks("grpo_train", domains, args.n, seed=GRPO_TRAIN_SEED + args.seed,
                                  difficulty=args.difficulty, exclude=test)
        check_disjoint({"train": train}, {"test": test})
        for split, tasks in (("train", train), ("test", test)):
            print(export_tasks(tasks, out / f"{split}.parquet", split), f"({len(tasks)} tasks)")
    if args.trajectories:
        with open(args.trajectories, encoding="utf-8") as f:
            trajs = [Trajectory.from_json(line) for line in f if line.strip()]
        path, skipped = export_trajectories(trajs, out / f"{args.layout}.parquet", layout=args.layout)
        print(path, f"({len(trajs) - skipped} rows, {skipped} skipped: no final answer)")
    if not args.tasks and not args.trajectories:
        p.error("give --tasks and/or --trajectories")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Every seed and split the kit builds tasks from, and the check that held-out means unseen.

Each use of seeded generators (`envs.generate_tasks`) or frozen suites (`eval.suites`) has a named split with
its seed and role, `train` or `heldout`. No held-out task may be in a training set, and small task spaces (web,
kg) repeat tasks across seeds, so `training_tasks` drops every task equal (`task_key`: domain, instruction and
world) to one of the kit's held-out tasks, and `check_disjoint` names the overlap when two sets of a run meet.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable, Mapping, Sequence

from openmanus_lite.envs import generate_tasks
from openmanus_lite.eval.suites import list_suites, load_suite, read_manifest
from openmanus_lite.schema import Task

# ----------------------------------------- seeds (a run adds its own `--seed`; the scripts named are in benchmarks/)
SFT_TRAIN_SEED = 1000  # expert trajectories SFT trains on (`sft --synth-seed`, sft_learning.py, notebook 04)
SFT_TRAIN_MAX_PER_DOMAIN = 750  # most sft_train tasks per domain a measured run used (250 x household's weight 3)
SFT_CORRECTION_SEED = 2000  # tasks played mid-training for `--corrections-at` (their corrections are trained on)
DEMO_GRPO_SEED = 7000  # the demo's multi-turn GRPO tasks (plus `DemoConfig.seed`)
GRPO_TRAIN_SEED = 0  # GRPO prompts and environment tasks (`grpo` CLI, grpo_learning.py, notebook 06)
PREFERENCE_TRAIN_SEED = 1  # preference pairs and reward-model data (`dpo` CLI, preference_learning.py, notebook 09)
EVAL_SEED = 7001  # held-out tasks of the learning benchmarks and notebooks 04 and 06: SFT and GRPO figures compare
GRPO_PROBE_SEED = 3000  # where grpo_learning.py probes the SFT checkpoint (2000, SFT_CORRECTION_SEED's, until #28)
VERL_TEST_SEED = 10_000  # test split of `export --tasks` (its train split: grpo_train's seed minus held-out tasks)
HELDOUT_POOL = 60  # tasks per domain and difficulty of each held-out seed that training sets avoid (defaults ask <= 50)

SEARCH_SUITE = "dev"  # frozen suite test-time search is measured on (test_time_scaling.py, notebook 08)
PREFERENCE_EVAL_SUITE = "test"  # frozen suite preference training is measured on (preference_learning.py, nb 09)
DEMO_EVAL_SUITE = "dev"  # frozen suite the demo evaluates every checkpoint on


@dataclass(frozen=True)
class Split:
    """A named source of tasks: a generator seed or a frozen suite, and whether models train on it."""

    name: str
    role: str  # 'train' or 'heldout'
    seed: int | None = None
    suite: str | None = None


SPLITS: dict[str, Split] = {s.name: s for s in (  # each seed's comment above says who uses it
    Split("sft_train", "train", SFT_TRAIN_SEED),
    Split("sft_corrections", "train", SFT_CORRECTION_SEED),
    Split("demo_grpo_train", "train", DEMO_GRPO_SEED),
    Split("grpo_train", "train", GRPO_TRAIN_SEED),
    Split("preference_train", "train", PREFERENCE_TRAIN_SEED),
    Split("eval", "heldout", EVAL_SEED),
    Split("grpo_probe", "heldout", GRPO_PROBE_SEED),
    Split("verl_test", "heldout", VERL_TEST_SEED),
    Split("dev", "heldout", suite="dev"),
    Split("test", "heldout", suite="test"),
)}
"""Every split the kit builds, by name."""


class SplitOverlapError(ValueError):
    """A held-out task is also in a training set."""


def get_split(name: str) -> Split:
    """The split called `name`, or a ValueError listing the names."""
    if name not in SPLITS:
        raise ValueError(f"unknown split {name!r}; splits: {sorted(SPLITS)}")
    return SPLITS[name]


# --------------------------------------------------------------------------- identity and the check
def task_key(task: Task) -> str:
    """What makes two tasks the same task: a stable hash of domain, instruction and world (spec).
    Ids, answers and difficulty labels do not count (the world and question fix the answer)."""
    text = json.dumps([task.domain, task.instruction, task.spec], sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def overlaps(training: Mapping[str, Iterable[Task]], heldout: Mapping[str, Iterable[Task]]
             ) -> list[tuple[str, str, Task]]:
    """Every (training set name, held-out set name, held-out task) whose task is in that training set."""
    train_keys = {name: {task_key(t) for t in tasks} for name, tasks in training.items()}
    out = []
    for held_name, tasks in heldout.items():
        for task in tasks:
            key = task_key(task)
            out += [(train_name, held_name, task) for train_name, keys in train_keys.items() if key in keys]
    return out


def check_disjoint(training: Mapping[str, Iterable[Task]], heldout: Mapping[str, Iterable[Task]]) -> None:
    """Raise SplitOverlapError listing the held-out tasks that a training set also has (by `task_key`). Both
    arguments name their task sets ({"sft_train": [...], ...}), so the error says which pair met."""
    found = overlaps(training, heldout)
    if not found:
        return
    lines = [f"  {tr} / {he}: {t.domain} task {t.id}: {t.instruction[:80]!r}" for tr, he, t in found[:20]]
    more = f"\n  ... and {len(found) - 20} more" if len(found) > 20 else ""
    raise SplitOverlapError(
        f"{len(found)} held-out task(s) also in a training set (training / held-out: task):\n" + "\n".join(lines)
        + more + "\nBuild training tasks with splits.training_tasks (it drops the kit's held-out tasks) "
        "or take held-out tasks from another seed.")


# --------------------------------------------------------------------------- building splits
def _generate(domains: Iterable[str], n: int | Mapping[str, int], seed: int, difficulty: str) -> list[Task]:
    out: list[Task] = []
    for d in domains:
        count = n.get(d, 0) if isinstance(n, Mapping) else n
        if count < 0:
            raise ValueError(f"task count for {d} must be >= 0, got {count}")
        out += generate_tasks(d, count, seed=seed, difficulty=difficulty)
    return out


@lru_cache(maxsize=None)
def _suite_keys(domain: str) -> frozenset[str]:
    manifest = read_manifest()
    keys = set()
    for name in list_suites():
        if any(manifest["files"][f]["domain"] == domain for f in manifest["suites"][name]):
            keys |= {task_key(t) for t in load_suite(name, domains=[domain]).tasks}
    return frozenset(keys)


@lru_cache(maxsize=None)
def heldout_keys(domain: str, difficulty: str = "easy") -> frozenset[str]:
    """Keys of every held-out task of the kit in `domain`: the first HELDOUT_POOL tasks of each
    held-out seed at `difficulty`, and every frozen suite task (any difficulty)."""
    keys = set(_suite_keys(domain))
    for s in SPLITS.values():
        if s.role == "heldout" and s.seed is not None:
            keys |= {task_key(t) for t in _generate([domain], HELDOUT_POOL, s.seed, difficulty)}
    return frozenset(keys)


def training_tasks(split: str, domains: Iterable[str], n_per_domain: int | Mapping[str, int], *,
                   difficulty: str = "easy", seed: int | None = None, exclude: Iterable[Task] = ()
                   ) -> tuple[list[Task], int]:
    """Tasks of the training split `split`, minus every held-out task of the kit (`heldout_keys`)
    and any task in `exclude`; returns (tasks, how many were dropped).

    `n_per_domain`: one count for every domain, or a count per domain (a domain left out gets none).
    `seed`: the split's seed unless given (a run's own, e.g. `SFT_TRAIN_SEED + args.seed`)."""
    s = get_split(split)
    if s.role != "train":
        raise ValueError(f"split {split!r} is {s.role}, not a training split; use heldout_tasks")
    banned = {task_key(t) for t in exclude}
    out, removed = [], 0
    for task in _generate(domains, n_per_domain, s.seed if seed is None else seed, difficulty):
        key = task_key(task)
        if key in banned or key in heldout_keys(task.domain, difficulty):
            removed += 1
        else:
            out.append(task)
    return out, removed


def heldout_tasks(split: str, domains: Sequence[str], n_per_domain: int | None, *,
                  difficulty: str = "easy") -> list[Task]:
    """The first `n_per_domain` tasks per domain of the held-out split `split` (a seed's tasks, or
    a frozen suite's at `difficulty`; None: the whole suite cell)."""
    s = get_split(split)
    if s.role != "heldout":
        raise ValueError(f"split {split!r} is a training split, not held-out; use training_tasks")
    if s.suite is not None:
        return load_suite(s.suite, domains=domains, difficulties=[difficulty], limit=n_per_domain).tasks
    if n_per_domain is None or n_per_domain > HELDOUT_POOL:
        raise ValueError(f"held-out split {split!r}: ask for 1..{HELDOUT_POOL} tasks per domain (HELDOUT_POOL, "
                         f"the tasks training sets avoid), got {n_per_domain}")
    return _generate(domains, n_per_domain, s.seed, difficulty)

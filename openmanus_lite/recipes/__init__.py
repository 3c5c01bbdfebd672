"""Training recipes as code: the data and SFT settings that produced a figure, in one named, frozen object.

A recipe names its data (domains, tasks per domain and their weights, recovery episodes, turn limits, the
`splits.py` split), its SFT settings (TRL's SFTConfig names), the model's dtype and LoRA, and its hardware preset.
Each lives in its own short module of this package, every setting commented with its reason and figure.
Nothing here imports TRL until `recipe.sft_config()` builds the config.

    r = get_recipe("cpu_60min")
    trajs, info = recipe_trajectories(r)            # expert + recovery episodes on the recipe's tasks
    ds, report = recipe_dataset(r, tok, trajs)      # tokenized SFT data
    cfg = r.sft_config(output_dir="runs/mine")      # an SFTRunConfig
"""

from __future__ import annotations

import importlib
import warnings
from collections import Counter
from dataclasses import dataclass, fields, replace
from typing import Any

from openmanus_lite.train.presets import default_preset_name, get_preset

RECIPE_MODULES = ("cpu_60min", "cpu_30min", "t4", "gpu8", "cpu_60min_agentbench")  # each module defines RECIPE
# the recipe's fields that are SFTRunConfig settings (TRL's names); the preset's fill in the rest
SFT_FIELDS = ("max_minutes", "mark_minutes", "max_steps", "num_train_epochs", "lr_scheduler_type", "warmup_steps",
              "per_device_train_batch_size", "gradient_accumulation_steps", "max_length", "learning_rate", "seed")
# old recipe field names, still accepted by `replace` with a DeprecationWarning
RENAMED = {"batch_size": "per_device_train_batch_size", "grad_accum": "gradient_accumulation_steps",
           "scheduler": "lr_scheduler_type"}


@dataclass(frozen=True)
class Recipe:
    """Data + SFT settings + preset of one training run (see the package docstring)."""

    name: str
    preset: str  # hardware preset (train/presets.py): the model, how it loads, and any SFT setting not named here
    about: str  # one line: what the recipe is for and the figure it reproduces
    # ---- data
    domains: tuple[str, ...] | None = None  # None: every registered domain
    split: str = "sft_train"  # the splits.py training split the tasks come from (the kit's held-out tasks left out)
    seed: int = 0  # added to the split's seed (a run's own task seed) and the recovery and trainer seed
    tasks_per_domain: int = 250
    # a domain's training tasks = tasks_per_domain x its weight (not named: 1); weights of registered domains outside
    # `domains` do not apply, so a recipe narrowed to some domains keeps the others' weights
    domain_weights: tuple[tuple[str, float], ...] = ()
    difficulty: str = "easy"
    # tasks of other levels mixed in: (level, weight) pairs, tasks_per_domain x domain weight x this weight of each,
    # stating that level's turn limits (envs.LEVEL_TURN_LIMITS); `turn_limits` is `difficulty`'s
    difficulty_weights: tuple[tuple[str, float], ...] = ()
    db_agentbench_share: float = 0.0  # share of db tasks made AgentBench-style (envs/sql_tables.py), not at difficulty
    # environment turn limit stated in every training prompt (one, or per domain); None: the environments'
    turn_limits: int | tuple[tuple[str, int], ...] | None = None
    recovery: int = 0  # recovery episodes per training task (an injected mistake the expert recovers from)
    recovery_kinds: tuple[str, ...] = ("random",)
    recovery_repeats: tuple[int, ...] = (1,)
    # ---- SFT (SFTRunConfig fields, TRL's names)
    max_minutes: float | None = None  # training-time budget; None: the step/epoch budget alone
    mark_minutes: tuple[float, ...] = ()
    max_steps: int = -1
    num_train_epochs: float = 1.0
    lr_scheduler_type: str = "linear"  # any of transformers' schedulers, or "cosine_by_time" (over max_minutes)
    warmup_steps: int = 5
    per_device_train_batch_size: int = 4
    gradient_accumulation_steps: int = 1
    max_length: int = 1024
    learning_rate: float = 2e-4
    # ---- model
    dtype: str | None = None  # 'auto' (bfloat16 where native, else float32), a dtype name, or None: the preset's
    lora_r: int | None = None  # LoRA rank on the preset's target modules (alpha: lora_alpha); None: the preset's LoRA
    lora_alpha: int | None = None

    def replace(self, **changes: Any) -> "Recipe":
        for old in set(changes) & set(RENAMED):
            warnings.warn(f"recipe field {old!r} is now {RENAMED[old]!r} (TRL's name)", DeprecationWarning,
                          stacklevel=2)
            changes[RENAMED[old]] = changes.pop(old)
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise ValueError(f"unknown recipe fields {sorted(unknown)}; known: {sorted(f.name for f in fields(self))}")
        return replace(self, **changes)

    def on_preset(self, preset: str | None) -> "Recipe":
        """The recipe's data and budget on other hardware: `preset`'s model, LoRA and dtype (None or the
        recipe's own preset: unchanged). E.g. `cpu_debug` runs a recipe on the tiny test model."""
        if not preset or preset == self.preset:
            return self
        return self.replace(preset=preset, lora_r=None, lora_alpha=None, dtype=None)

    def sft_config(self, **overrides: Any):
        """The recipe's SFTRunConfig: its preset's SFT settings, the recipe's on top, then `overrides`."""
        settings = {"output_dir": f"runs/sft_{self.name}", **{k: getattr(self, k) for k in SFT_FIELDS}}
        return get_preset(self.preset).sft_config(**{**settings, **overrides})

    def domain_list(self) -> list[str]:
        from openmanus_lite.envs import list_domains

        return list(self.domains) if self.domains else list_domains()

    def task_counts(self) -> dict[str, int]:
        """Training tasks per domain: tasks_per_domain x the domain's weight."""
        from openmanus_lite.envs import list_domains

        weights = dict(self.domain_weights)
        unknown = sorted(set(weights) - set(list_domains()))
        if unknown:
            raise ValueError(f"recipe {self.name!r}: domain_weights name {unknown}, not among the domains "
                             f"{list_domains()}")
        return {d: round(self.tasks_per_domain * weights.get(d, 1.0)) for d in self.domain_list()}

    def levels(self) -> dict[str, float]:
        """{difficulty: weight} of the recipe's tasks: its own level at 1, then `difficulty_weights`."""
        from openmanus_lite.envs import DIFFICULTIES

        levels = {self.difficulty: 1.0, **dict(self.difficulty_weights)}
        unknown = sorted(set(levels) - set(DIFFICULTIES))
        if unknown or len(levels) != 1 + len(self.difficulty_weights):
            raise ValueError(f"recipe {self.name!r}: difficulties {unknown or sorted(levels)} must be distinct "
                             f"levels among {list(DIFFICULTIES)}")
        if any(not w > 0 for w in levels.values()):
            raise ValueError(f"recipe {self.name!r}: difficulty_weights must be positive, got {levels}")
        return levels

    def max_turns(self, level: str | None = None) -> int | dict[str, int] | None:
        """The turn limits the prompts of `level`'s tasks state (default: `difficulty`'s, the recipe's own)."""
        if level is not None and level != self.difficulty:
            from openmanus_lite.envs import LEVEL_TURN_LIMITS

            return dict(LEVEL_TURN_LIMITS[level]) if level in LEVEL_TURN_LIMITS else None
        return dict(self.turn_limits) if isinstance(self.turn_limits, tuple) else self.turn_limits


def list_recipes() -> list[str]:
    return sorted(RECIPE_MODULES)


def get_recipe(name: str) -> Recipe:
    """The recipe `name` (a frozen object: change it with `.replace(...)`)."""
    if name not in RECIPE_MODULES:
        raise KeyError(f"unknown recipe {name!r}; choose one of {list_recipes()}")
    return importlib.import_module(f"{__name__}.{name}").RECIPE


def default_recipe_name() -> str:
    """`t4` when a CUDA GPU is present, else `cpu_30min`: what notebook 04 trains unless told otherwise
    (half an hour on a CPU; `cpu_60min` is the measured hour)."""
    return "t4" if default_preset_name() == "t4" else "cpu_30min"


def weights_text(weights: tuple[tuple[str, float], ...]) -> str:
    """domain_weights as the command line writes them ("household=3,web=2")."""
    return ",".join(f"{d}={w:g}" for d, w in weights)


def recipe_tasks(recipe: Recipe):
    """(training tasks, how many generated tasks equal held-out ones were left out) of the recipe."""
    from openmanus_lite.envs.sql_tables import agentbench_style_tasks
    from openmanus_lite.splits import get_split, heldout_keys, task_key, training_tasks

    per_domain, seed = recipe.task_counts(), get_split(recipe.split).seed + recipe.seed
    styled = round(per_domain.get("db", 0) * recipe.db_agentbench_share)
    tasks, removed = [], 0
    for level, weight in recipe.levels().items():  # the recipe's own level, then the others' share of every domain's
        counts = {d: round(n * weight) for d, n in per_domain.items()}
        if level == recipe.difficulty and styled:
            counts["db"] -= styled
        level_tasks, level_removed = training_tasks(recipe.split, recipe.domain_list(), counts, seed=seed,
                                                    difficulty=level)
        tasks, removed = tasks + level_tasks, removed + level_removed
    for task in agentbench_style_tasks(styled, seed=seed):
        if task_key(task) in heldout_keys("db", recipe.difficulty):
            removed += 1
        else:
            tasks.append(task)
    return tasks, removed


def recipe_trajectories(recipe: Recipe, tasks=None) -> tuple[list, dict[str, Any]]:
    """(SFT trajectories, counts) of the recipe: the expert's episodes on its tasks, then its recovery
    episodes. `tasks`: the recipe's own (`recipe_tasks`) unless given."""
    from openmanus_lite.envs import expert_trajectories
    from openmanus_lite.train.recovery import recovery_trajectories

    removed = None
    if tasks is None:
        tasks, removed = recipe_tasks(recipe)
    by_level: dict[str, list] = {}
    for task in tasks:  # each level's prompts state its own turn limits
        by_level.setdefault(task.difficulty, []).append(task)
    trajs = [t for level, group in by_level.items()
             for t in expert_trajectories(group, max_turns=recipe.max_turns(level))]
    info: dict[str, Any] = {"tasks": len(tasks), "removed_held_out": removed, "expert": len(trajs),
                            "recovery": 0, "recovery_counts": None}
    if len(by_level) > 1:
        info["tasks_per_level"] = {level: len(group) for level, group in by_level.items()}
    if recipe.recovery:
        recovery, counts = [], Counter()
        for level, group in by_level.items():
            level_recovery, level_counts = recovery_trajectories(
                group, recipe.recovery, max_turns=recipe.max_turns(level), seed=recipe.seed,
                kinds=recipe.recovery_kinds, repeats=recipe.recovery_repeats)
            recovery += level_recovery
            counts.update(level_counts)
        trajs += recovery
        info.update(recovery=len(recovery), recovery_counts=dict(counts))
    return trajs, info


def recipe_dataset(recipe: Recipe, tokenizer, trajectories=None, **kwargs):
    """(dataset, report) of train.data.build_sft_dataset for the recipe's trajectories (built when not given),
    cut at the recipe's max_length; `kwargs` go to build_sft_dataset (overflow, domain_mix, total...)."""
    from openmanus_lite.train.data import build_sft_dataset

    if trajectories is None:
        trajectories, _ = recipe_trajectories(recipe)
    return build_sft_dataset(trajectories, tokenizer, max_length=recipe.max_length,
                             **{"seed": recipe.seed, **kwargs})


def sft_config(recipe: Recipe, **overrides: Any):
    """Deprecated: `recipe.sft_config(**overrides)`."""
    warnings.warn("recipes.sft_config(r) is now r.sft_config()", DeprecationWarning, stacklevel=2)
    return recipe.sft_config(**overrides)


def recipe_preset(recipe: Recipe):
    """The recipe's preset with the recipe's LoRA rank, sequence length and dtype ('auto' resolved for this
    device: bfloat16 where native, float32 elsewhere; bfloat16 on a CPU that emulates it is an error)."""
    preset = get_preset(recipe.preset).with_dtype(recipe.dtype)
    changes: dict[str, Any] = {"max_seq_length": max(preset.max_seq_length, recipe.max_length)}
    if recipe.lora_r is not None:
        if preset.lora is None:
            raise ValueError(f"recipe {recipe.name!r} sets lora_r but preset {preset.name!r} trains fully")
        changes["lora"] = replace(preset.lora, r=recipe.lora_r, alpha=recipe.lora_alpha or 2 * recipe.lora_r)
    return preset.replace(**changes)


__all__ = ["Recipe", "default_recipe_name", "get_recipe", "list_recipes", "recipe_dataset", "recipe_preset",
           "recipe_tasks", "recipe_trajectories", "sft_config", "weights_text"]

"""GRPO with TRL's `GRPOTrainer`: single-turn (open-r1 style) and multi-turn in the environments.

Three modes share one entry point, `run_grpo`:

    single   prompts with a `solution` column; the model answers once in
             <think>…</think><answer>…</answer>; rewards `accuracy format tag_count`.
    multi    prompts are environment tasks; `env_rollout.EnvRolloutFunc` plays whole episodes
             (assistant turn, environment observation, …) and returns an env_mask so only the
             model's tokens get loss; rewards read the environment's verdict
             (`env_outcome react_format invalid_action`).
    tool     the same tasks through TRL's `environment_factory`: the environment's actions are
             tool methods (`tool_env.py`), for models with a tool-calling chat template.

Single-turn data comes from (a) environment tasks whose answer is a value, with the world the
question is about written into the prompt (`value_task_rows`), and (b) trajectories of the
merged dataset that end in a final answer (`trajectory_rows`).

Observability: TRL's progress bar and log history; `with_domain_metrics` adds per-domain means
of every reward to the logs; `make_sample_printer` prints sample episodes every N steps;
`reward_curves` / `plot_reward_curves` draw them; checkpoints every `save_steps` and
`resume=True` continue from the last one.

Import order matters on this stack: unsloth before trl (`import_trl` does it).
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from ..react import extract_answer, parse_turn
from ..schema import Task, Trajectory

SYSTEM_PROMPT = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. "
    "The assistant first thinks about the reasoning process in the mind and then provides the user with the "
    "answer. The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> tags, "
    "respectively, i.e., <think>\nreasoning process here\n</think>\n<answer>\nanswer here\n</answer>"
)
"""open-r1's system prompt for the tag format (the `format` and `tag_count` rewards check it)."""

MODES = ("single", "multi", "tool")
DEFAULT_REWARDS = {
    "single": "accuracy format tag_count",
    "multi": "env_outcome react_format:0.25 invalid_action:0.25",
    "tool": "env_outcome invalid_action:0.25",
}


def import_trl():
    """`trl`, imported after unsloth when unsloth is installed (TRL's CPU kernels need its patch)."""
    try:
        import unsloth  # noqa: F401
    except Exception:
        pass
    import trl

    return trl


# --------------------------------------------------------------------------- single-turn data


_CONTEXT_RENDERERS: dict[str, Callable[[Any, Task], str]] = {}


def register_context_renderer(domain: str):
    """Decorator: `fn(env_after_reset, task) -> str` writes the world a value question is about."""

    def deco(fn):
        _CONTEXT_RENDERERS[domain] = fn
        return fn

    return deco


def value_task_rows(
    domains: Sequence[str] = ("kg", "db", "os"),
    n: int = 50,
    seed: int = 0,
    difficulty: str = "easy",
    system_prompt: str = SYSTEM_PROMPT,
    report: dict[str, dict[str, int]] | None = None,
) -> list[dict[str, Any]]:
    """Single-turn rows from environment tasks that have a value answer.

    The prompt holds the world the question is about (tables, files, facts: see the
    `register_context_renderer` functions below) and the question; `solution` is the task's
    gold answer. Tasks without a value answer (changing a file or a table, buying, moving
    objects) are skipped and counted in `report[domain]["no_value_answer"]`.
    """
    from ..envs import generate_tasks, make_env

    rows = []
    for domain in domains:
        if domain not in _CONTEXT_RENDERERS:
            raise ValueError(
                f"no single-turn context renderer for domain {domain!r}; value questions exist for "
                f"{sorted(_CONTEXT_RENDERERS)}. Use the multi-turn mode for the other domains."
            )
        counts = {"tasks": 0, "kept": 0, "no_value_answer": 0}
        for task in generate_tasks(domain, n, seed=seed, difficulty=difficulty):
            counts["tasks"] += 1
            solution = value_solution(task)
            if solution is None:
                counts["no_value_answer"] += 1
                continue
            env = make_env(domain)
            env.reset(task)
            context = _CONTEXT_RENDERERS[domain](env, task)
            instruction = task.instruction.strip()
            question = f"{context}\n\n{instruction if instruction.startswith('Question:') else 'Question: ' + instruction}"
            rows.append(
                {
                    "prompt": [{"role": "system", "content": system_prompt}, {"role": "user", "content": question}],
                    "solution": solution,
                    "domain": domain,
                    "source": f"env:{domain}",
                    "task_id": task.id,
                }
            )
            counts["kept"] += 1
        if report is not None:
            report[domain] = counts
    return rows


def value_solution(task: Task) -> str | None:
    """The gold answer as the text `accuracy` compares with (lists as JSON), or None for tasks
    without a value answer (the environments set `answer=None` for tasks that change state)."""
    ans = task.answer
    if ans is None:
        return None
    if isinstance(ans, (list, tuple)):
        return json.dumps(list(ans), ensure_ascii=False) if ans else None
    text = str(ans).strip()
    return text or None


MAX_CONTEXT_FACTS = 60


@register_context_renderer("os")
def _os_context(env, task: Task) -> str:
    """Every file of the virtual machine with its content, and the empty directories."""
    files = task.spec.get("files", {})
    lines = ["The files on the machine (each path, then its content):"]
    for path in sorted(files):
        body = files[path].rstrip("\n")
        lines.append(f"== {path} ==\n{body}" if body else f"== {path} == (empty file)")
    dirs = [d for d in task.spec.get("dirs", []) if not any(f.startswith(d.rstrip("/") + "/") for f in files)]
    if dirs:
        lines.append("Empty directories: " + ", ".join(sorted(dirs)))
    return "\n".join(lines)


@register_context_renderer("db")
def _db_context(env, task: Task) -> str:
    """Each table with its column types and all its rows."""
    out = []
    for table in task.spec.get("tables", []):
        cols = ", ".join(f"{c['name']} {c.get('type', '')}".strip() for c in table.get("columns", []))
        rows = "\n".join(" | ".join(str(v) for v in row) for row in table.get("rows", []))
        out.append(f"Table {table.get('name')} ({cols}):\n{rows}")
    return "\n\n".join(out)


@register_context_renderer("kg")
def _kg_context(env, task: Task) -> str:
    """The facts the question's program walks through (all relations of each entity it visits,
    so the needed ones sit among others), and the attributes argmax/argmin compare; capped at
    MAX_CONTEXT_FACTS lines, the needed facts first."""
    world = env.world
    needed: list[tuple[str, str, str]] = []
    around: list[tuple[str, str, str]] = []
    attrs: list[tuple[str, str, int]] = []

    def walk(prog):
        op = prog[0]
        if op == "ent":
            return frozenset([prog[1]])
        if op == "hop":
            src = walk(prog[1])
            for e in sorted(src):
                for rel, objs in sorted(world.edges.get(e, {}).items()):
                    for o in sorted(objs):
                        (needed if rel == prog[2] else around).append((e, rel, o))
            return world.neighbors(src, prog[2])
        if op == "and":
            return walk(prog[1]) & walk(prog[2])
        if op == "count":
            return walk(prog[1])
        if op in ("argmax", "argmin"):
            ents = walk(prog[1])
            attrs.extend((e, prog[2], world.attrs[e][prog[2]]) for e in sorted(ents) if prog[2] in world.attrs.get(e, {}))
            return ents
        raise ValueError(f"unknown KG program operator {op!r}")

    walk(task.spec["program"])
    facts = list(dict.fromkeys(needed))
    facts += [f for f in dict.fromkeys(around) if f not in facts][: max(0, MAX_CONTEXT_FACTS - len(facts))]
    lines = ["Facts (subject | relation | object):"] + [f"{s} | {r} | {o}" for s, r, o in facts]
    if attrs:
        lines += ["Attributes (entity | attribute | value):"] + [f"{e} | {a} | {v}" for e, a, v in attrs]
    return "\n".join(lines)


def trajectory_rows(
    trajectories: Iterable[Trajectory | dict],
    system_prompt: str = SYSTEM_PROMPT,
    report: dict[str, int] | None = None,
) -> list[dict[str, Any]]:
    """Single-turn rows from trajectories that end in a final answer.

    prompt = the conversation up to the last assistant turn (the tag-format system prompt is
    put first, before the record's own system text), solution = that turn's answer. Records
    whose last assistant turn is not an answer are counted in `report["no_final_answer"]`.
    """
    counts = {"records": 0, "kept": 0, "no_final_answer": 0}
    rows = []
    for rec in trajectories:
        traj = rec if isinstance(rec, Trajectory) else Trajectory.from_dict(rec)
        counts["records"] += 1
        msgs = traj.to_messages()
        last = max((i for i, m in enumerate(msgs) if m["role"] == "assistant"), default=None)
        answer = _final_answer(msgs[last]["content"]) if last is not None else None
        if answer is None:
            counts["no_final_answer"] += 1
            continue
        context = msgs[:last]
        own_system = "\n\n".join(m["content"] for m in context if m["role"] == "system")
        system = system_prompt + (f"\n\n{own_system}" if own_system else "")
        prompt = [{"role": "system", "content": system}] + [m for m in context if m["role"] != "system"]
        rows.append(
            {"prompt": prompt, "solution": answer, "domain": traj.domain, "source": traj.source, "task_id": traj.id}
        )
        counts["kept"] += 1
    if report is not None:
        report.update(counts)
    return rows


def _final_answer(text: str) -> str | None:
    turn = parse_turn(text)
    if not turn:
        return None
    answer = extract_answer(text)
    return answer.strip() if isinstance(answer, str) and answer.strip() else None


def load_trajectories(path: str | os.PathLike) -> list[dict]:
    """Trajectory records from a JSON-lines file (the merged dataset's export format)."""
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{n}: not a JSON line ({e})") from None
    return out


def build_single_turn_dataset(rows: list[dict[str, Any]], shuffle_seed: int | None = 0):
    """A `datasets.Dataset` of single-turn rows (prompt, solution, domain, source, task_id)."""
    from datasets import Dataset

    if not rows:
        raise ValueError("no single-turn rows: pick domains with value questions or trajectories with final answers")
    ds = Dataset.from_list(rows)
    return ds.shuffle(seed=shuffle_seed) if shuffle_seed is not None else ds


_WARMUP_THINK = {
    "kg": "I look up the facts about the entities in the question and follow the relations it asks about.",
    "db": "I read the table rows that match the question and work out the value it asks for.",
    "os": "I read the files the question is about and count or look up what it asks for.",
}


def format_warmup_trajectories(rows: Sequence[dict[str, Any]]) -> list[Trajectory]:
    """SFT examples that show the tag format on single-turn rows: the prompt, then
    `<think>` a short domain hint `</think>` `<answer>` the gold answer `</answer>`.

    A few steps of SFT on these ("a short SFT") give GRPO a policy that sometimes writes the
    format, so the format rewards vary within a group and GRPO has something to sharpen.
    """
    from ..react import format_tagged
    from ..schema import Turn

    out = []
    for r in rows:
        think = _WARMUP_THINK.get(r.get("domain", ""), "I read the context and work out the answer.")
        answer = r["solution"]
        try:
            value = json.loads(answer)
            if isinstance(value, list):
                answer = ", ".join(str(v) for v in value)
        except (json.JSONDecodeError, TypeError):
            pass
        turns = [Turn(m["role"], m["content"]) for m in r["prompt"]]
        turns.append(Turn("assistant", format_tagged(think, str(answer)), train=True))
        out.append(Trajectory(id=f"warmup/{r.get('task_id', len(out))}", source="grpo-warmup",
                              domain=r.get("domain", "other"), messages=turns))
    return out


def heldout_tasks(domains: Sequence[str], n: int, train: Sequence[Task], seed: int = 1000,
                  difficulty: str = "easy") -> list[Task]:
    """`n` tasks per domain from another seed, minus any that repeat a training task's question
    and world (small generated worlds can repeat a question), so held-out means unseen."""
    from ..envs import generate_tasks

    seen = {_task_key(t) for t in train}
    out = []
    for d in domains:
        out += [t for t in generate_tasks(d, n, seed=seed, difficulty=difficulty) if _task_key(t) not in seen]
    return out


def unseen_rows(rows: Sequence[dict], train_rows: Sequence[dict]) -> list[dict]:
    """The single-turn rows whose prompt no training row has (for held-out evaluation)."""
    seen = {json.dumps(r["prompt"], sort_keys=True) for r in train_rows}
    return [r for r in rows if json.dumps(r["prompt"], sort_keys=True) not in seen]


def _task_key(task: Task) -> str:
    return json.dumps([task.domain, task.instruction, task.spec], sort_keys=True, default=str)


# --------------------------------------------------------------------------- multi-turn / tool data


def build_env_dataset(
    tasks: Sequence[Task],
    *,
    max_turns: int | None = None,
    max_new_tokens: int = 96,
    system_prompt: str | None = None,
    batch_size: int = 64,
):
    """(dataset, rollout_func) for multi-turn GRPO from the same tasks.

    The dataset has `prompt` (the task's first user message), `task` (JSON), `domain`,
    `difficulty`, `task_id`; tasks whose visible prompt repeats an earlier one are dropped
    (counted in `rollout_func.duplicates`).
    """
    from datasets import Dataset

    from .env_rollout import EnvRolloutFunc, prompt_key

    rollout = EnvRolloutFunc(
        tasks, max_turns=max_turns, max_new_tokens=max_new_tokens, system_prompt=system_prompt, batch_size=batch_size
    )
    rows = []
    for key, task in rollout.tasks.items():
        prompt = rollout.prompt_for(task)
        assert prompt_key(prompt) == key
        rows.append(
            {
                "prompt": prompt,
                "task": task.to_json(),
                "domain": task.domain,
                "difficulty": task.difficulty,
                "task_id": task.id,
            }
        )
    if not rows:
        raise ValueError("no tasks given for multi-turn GRPO")
    return Dataset.from_list(rows), rollout


# --------------------------------------------------------------------------- configuration


@dataclass
class GRPORunConfig:
    """The knobs of a GRPO run (presets in train/presets.py fill these)."""

    mode: str = "single"
    rewards: str | None = None
    """Reward spec, e.g. "accuracy:2 format tag_count"; None = DEFAULT_REWARDS[mode]."""
    output_dir: str = "runs/grpo"
    max_steps: int = 20
    learning_rate: float = 5e-6
    num_generations: int = 4
    per_device_train_batch_size: int = 4
    gradient_accumulation_steps: int = 1
    max_completion_length: int = 128
    """Single-turn: tokens of the answer."""
    max_episode_tokens: int = 512
    """Multi-turn / tool: tokens of the whole episode after the prompt (turns + observations)."""
    max_new_tokens: int = 96
    """Multi-turn: tokens per assistant turn."""
    max_turns: int | None = None
    """Multi-turn / tool: turn limit (None = the environment's own)."""
    max_tool_calling_iterations: int | None = 6
    temperature: float = 1.0
    top_p: float = 1.0
    beta: float = 0.0
    loss_type: str = "dapo"
    scale_rewards: str = "group"
    mask_truncated_completions: bool = False
    logging_steps: int = 1
    save_steps: int = 10
    save_total_limit: int | None = 2
    seed: int = 0
    sample_every: int = 0
    """Print sample episodes every N steps (0 = never)."""
    use_vllm: bool | None = None
    """Single-turn generation with vLLM (TRL colocate mode): None = when a GPU and vLLM are there.
    The multi-turn rollout always generates with transformers' generate."""
    gradient_checkpointing: bool = False
    bf16: bool | None = None
    """None: bf16 on a GPU that has it, else fp16 on a GPU, fp32 on CPU."""
    report_to: str = "none"
    disable_tqdm: bool = False

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.num_generations < 2:
            raise ValueError("num_generations must be >= 2: GRPO compares samples within a group")
        if (self.per_device_train_batch_size * self.gradient_accumulation_steps) % self.num_generations:
            raise ValueError(
                f"per_device_train_batch_size x gradient_accumulation_steps "
                f"({self.per_device_train_batch_size} x {self.gradient_accumulation_steps}) must be a multiple of "
                f"num_generations ({self.num_generations}): each group of samples must fit one generation batch"
            )

    @property
    def reward_spec(self) -> str:
        return self.rewards or DEFAULT_REWARDS[self.mode]

    def replace(self, **changes) -> "GRPORunConfig":
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise ValueError(f"unknown GRPO settings {sorted(unknown)}")
        return GRPORunConfig(**{**asdict(self), **changes})


def make_grpo_config(cfg: GRPORunConfig, reward_weights: list[float]):
    """TRL's GRPOConfig from the kit's settings (CPU-safe: no bf16 where the CPU lacks it)."""
    import_trl()
    import torch
    from trl import GRPOConfig

    on_gpu = torch.cuda.is_available()
    bf16 = cfg.bf16 if cfg.bf16 is not None else (on_gpu and torch.cuda.is_bf16_supported())
    fp16 = on_gpu and not bf16 and cfg.bf16 is None
    use_vllm = cfg.use_vllm if cfg.use_vllm is not None else (on_gpu and vllm_available() and cfg.mode == "single")
    if use_vllm and not on_gpu:
        raise ValueError("use_vllm needs a GPU; on CPU generation goes through transformers' generate")
    if use_vllm and not vllm_available():
        raise ValueError("use_vllm is set but vLLM is not installed (pip install vllm), or leave use_vllm unset")
    completion = cfg.max_completion_length if cfg.mode == "single" else cfg.max_episode_tokens
    kwargs: dict[str, Any] = dict(
        output_dir=cfg.output_dir,
        max_steps=cfg.max_steps,
        learning_rate=cfg.learning_rate,
        num_generations=cfg.num_generations,
        per_device_train_batch_size=cfg.per_device_train_batch_size,
        gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        max_completion_length=completion,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        beta=cfg.beta,
        loss_type=cfg.loss_type,
        scale_rewards=cfg.scale_rewards,
        mask_truncated_completions=cfg.mask_truncated_completions,
        reward_weights=reward_weights,
        logging_steps=cfg.logging_steps,
        save_strategy="steps" if cfg.save_steps else "no",
        save_steps=cfg.save_steps or 500,
        save_total_limit=cfg.save_total_limit,
        seed=cfg.seed,
        report_to=cfg.report_to,
        disable_tqdm=cfg.disable_tqdm,
        bf16=bf16,
        fp16=fp16,
        use_cpu=not on_gpu,
        use_vllm=use_vllm,
        gradient_checkpointing=cfg.gradient_checkpointing,
        max_tool_calling_iterations=cfg.max_tool_calling_iterations,
        shuffle_dataset=True,
    )
    if use_vllm:
        kwargs["vllm_mode"] = "colocate"
    return GRPOConfig(**kwargs)


def vllm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def load_for_grpo(model: str | None, preset: Any) -> tuple[Any, Any]:
    """(model, tokenizer) to train with GRPO under a preset (train/presets.py).

    `model` may be a hub name, a checkpoint (a merged SFT model: a fresh LoRA adapter is
    attached as the preset says), or a saved LoRA adapter folder (the SFT adapter is loaded
    onto its base model and trained further). None = the preset's model.
    """
    folder = Path(model) if model else None
    if folder is not None and (folder / "adapter_config.json").is_file():
        import torch
        from peft import PeftModel

        from ..models import load_model, load_tokenizer

        base = json.loads((folder / "adapter_config.json").read_text())["base_model_name_or_path"]
        dtype = getattr(torch, preset.dtype) if preset.dtype else None
        base_model, _ = load_model(base, backend=preset.backend, load_in_4bit=preset.load_in_4bit,
                                   max_seq_length=preset.max_seq_length, dtype=dtype)
        peft_model = PeftModel.from_pretrained(base_model, str(folder), is_trainable=True)
        peft_model.openmanus_backend = getattr(base_model, "openmanus_backend", preset.backend)
        return peft_model, load_tokenizer(folder)
    return preset.load(model)


# --------------------------------------------------------------------------- rewards with per-domain logs


def with_domain_metrics(funcs: Sequence[Callable]) -> list[Callable]:
    """Wrap reward functions so each also logs its mean per domain (`domain/<d>/<name>`).

    Uses the `log_metric` callback TRL passes to rewards and the row's `domain` column; the
    wrapped functions keep name, columns and range, and return the same values.
    """
    return [_DomainLogged(f) for f in funcs]


class _DomainLogged:
    def __init__(self, func: Callable):
        self.func = func
        self.__name__ = getattr(func, "__name__", "reward")
        for attr in ("reward_name", "required_columns", "reward_range"):
            if hasattr(func, attr):
                setattr(self, attr, getattr(func, attr))

    def __call__(self, prompts=None, completions=None, **kwargs):
        values = self.func(prompts=prompts, completions=completions, **kwargs)
        log_metric, domains = kwargs.get("log_metric"), kwargs.get("domain")
        if callable(log_metric) and isinstance(domains, (list, tuple)) and len(domains) == len(values):
            groups: dict[str, list[float]] = {}
            for d, v in zip(domains, values):
                if v is not None and not (isinstance(v, float) and math.isnan(v)):
                    groups.setdefault(str(d), []).append(float(v))
            for d, vs in groups.items():
                log_metric(f"domain/{d}/{self.__name__}", sum(vs) / len(vs))
        return values


# --------------------------------------------------------------------------- trainer and callbacks


_KIT_TRAINER = None


def kit_trainer_class():
    """TRL's GRPOTrainer with two additions, both around its `_generate`:

    - Multi-turn: with a `rollout_func`, TRL decodes the whole completion (turns and
      observations) into ONE assistant message. The episode's messages (assistant and
      observation turns), which `EnvRolloutFunc` returns under `completion_messages`, replace
      it, so rewards such as `react_format` score each assistant turn and the logged
      completions read like conversations.
    - Timing: the generation phase's seconds and model tokens per second are logged as
      `rollout/seconds` and `rollout/tokens_per_s` (the multi-turn rollout logs its own).

    Everything else is the stock trainer.
    """
    global _KIT_TRAINER
    if _KIT_TRAINER is None:
        import_trl()
        from trl import GRPOTrainer

        from .env_rollout import COMPLETION_MESSAGES

        class KitGRPOTrainer(GRPOTrainer):
            def _generate(self, prompts):
                t0 = time.perf_counter()
                out = list(super()._generate(prompts))
                seconds = time.perf_counter() - t0
                extra = out[5]
                messages = extra.pop(COMPLETION_MESSAGES, None) if isinstance(extra, dict) else None
                if messages is not None:
                    out[3] = messages
                if self.rollout_func is None:
                    mask, ids = out[2], out[1]
                    tokens = sum(sum(m) for m in mask) if mask is not None else sum(len(c) for c in ids)
                    self._log_metric("rollout/seconds", seconds)
                    self._log_metric("rollout/tokens_per_s", tokens / seconds if seconds > 0 else 0.0)
                return tuple(out)

        _KIT_TRAINER = KitGRPOTrainer
    return _KIT_TRAINER


def make_time_limit(minutes: float):
    """A TrainerCallback that ends training (cleanly, with a final save) after `minutes` of wall time."""
    from transformers import TrainerCallback

    class _TimeLimit(TrainerCallback):
        def __init__(self):
            self.start = None
            self.stopped = False

        def on_train_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            if self.start is not None and time.perf_counter() - self.start > minutes * 60:
                self.stopped = True
                control.should_training_stop = True
                control.should_save = bool(args.save_strategy != "no")

    return _TimeLimit()


def make_sample_printer(every: int, k: int = 2, width: int = 600):
    """A TrainerCallback that prints `k` sample completions with their rewards every `every` steps.

    It reads the trainer's own completion log, so it works in all three modes; attach the
    trainer with `callback.trainer = trainer` (run_grpo does).
    """
    from transformers import TrainerCallback

    class _SamplePrinter(TrainerCallback):
        def __init__(self):
            self.trainer = None
            self.printed_steps: list[int] = []

        def on_log(self, args, state, control, **kwargs):
            if not every or self.trainer is None or state.global_step == 0 or state.global_step % every:
                return
            if state.global_step in self.printed_steps:
                return
            self.printed_steps.append(state.global_step)
            print(format_samples(self.trainer, k=k, width=width, step=state.global_step), flush=True)

    return _SamplePrinter()


def format_samples(trainer, k: int = 2, width: int = 600, step: int | None = None) -> str:
    """The last `k` completions the trainer logged, with each reward, as text."""
    logs = getattr(trainer, "_logs", None) or {}
    prompts, comps = list(logs.get("prompt", [])), list(logs.get("completion", []))
    rewards = {name: list(v) for name, v in (logs.get("rewards") or {}).items()}
    lines = [f"----- sample episodes at step {step} -----"]
    for j in range(max(0, len(comps) - k), len(comps)):
        prompt = prompts[j] if j < len(prompts) else ""
        last_user = prompt[-1]["content"] if isinstance(prompt, list) and prompt else str(prompt)
        lines.append(f"[prompt] ...{_clip(last_user, width // 3, tail=True)}")
        comp = comps[j]
        if isinstance(comp, list):
            for m in comp:
                text = str(m.get("content") or "")
                for call in m.get("tool_calls") or []:
                    fn = call.get("function", call) if isinstance(call, dict) else {}
                    text += f" <tool call {fn.get('name')}({json.dumps(fn.get('arguments'), ensure_ascii=False)})>"
                lines.append(f"[{m.get('role', '?')}] {_clip(text, width)}")
        else:
            lines.append(f"[completion] {_clip(str(comp), width)}")
        scores = ", ".join(f"{n}={v[j]:.2f}" for n, v in rewards.items() if j < len(v))
        lines.append(f"[rewards] {scores}")
    return "\n".join(lines)


def _clip(text: str, n: int, tail: bool = False) -> str:
    text = text.replace("\n", "\\n")
    if len(text) <= n:
        return text
    return text[-n:] if tail else text[:n] + "…"


# --------------------------------------------------------------------------- running


@dataclass
class GRPOResult:
    trainer: Any
    log_history: list[dict]
    wall_s: float
    global_step: int
    rollout_stats: Any = None
    resumed_from: str | None = None
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def step_time_s(self) -> list[float]:
        return [r["step_time"] for r in self.log_history if "step_time" in r]


def last_checkpoint(output_dir: str | os.PathLike) -> str | None:
    """The newest `checkpoint-N` folder under output_dir, or None."""
    from transformers.trainer_utils import get_last_checkpoint

    return get_last_checkpoint(str(output_dir)) if Path(output_dir).is_dir() else None


def run_grpo(
    model: Any,
    tokenizer: Any,
    train_dataset: Any,
    config: GRPORunConfig,
    *,
    rollout_func: Any = None,
    environment_factory: Any = None,
    reward_funcs: Sequence[Callable] | None = None,
    reward_weights: Sequence[float] | None = None,
    callbacks: Sequence[Any] = (),
    resume: bool | str = False,
    domain_metrics: bool = True,
) -> GRPOResult:
    """Train with GRPO; returns the trainer, its log history and timings.

    `config.mode` picks how completions are produced: single (plain generate), multi (pass
    `rollout_func`, from build_env_dataset), tool (pass `environment_factory`, from
    tool_env.tool_env_factory). Rewards come from the registry (`config.reward_spec`) unless
    `reward_funcs` / `reward_weights` are given. `resume=True` continues from the newest
    checkpoint in `config.output_dir` when there is one; a path resumes from that checkpoint.
    """
    from ..rewards import ROLLOUT_COLUMNS, build_rewards, check_reward_columns

    if config.mode == "multi" and rollout_func is None:
        raise ValueError("mode 'multi' needs rollout_func (see build_env_dataset)")
    if config.mode == "tool" and environment_factory is None:
        raise ValueError("mode 'tool' needs environment_factory (see tool_env.tool_env_factory)")
    if config.mode == "single" and (rollout_func is not None or environment_factory is not None):
        raise ValueError("mode 'single' takes neither rollout_func nor environment_factory")
    if reward_funcs is None:
        reward_funcs, weights = build_rewards(config.reward_spec)
    else:
        weights = list(reward_weights) if reward_weights is not None else [1.0] * len(reward_funcs)
    extra = {"multi": ROLLOUT_COLUMNS, "tool": ("environments",), "single": ()}[config.mode]
    check_reward_columns(list(reward_funcs), train_dataset.column_names, extra_columns=extra)
    if domain_metrics:
        reward_funcs = with_domain_metrics(reward_funcs)

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    args = make_grpo_config(config, list(weights))
    tokenizer.padding_side = "left"
    trainer_cls = kit_trainer_class()
    printer = make_sample_printer(config.sample_every) if config.sample_every else None
    trainer = trainer_cls(
        model=model,
        processing_class=tokenizer,
        reward_funcs=list(reward_funcs),
        args=args,
        train_dataset=train_dataset,
        rollout_func=rollout_func,
        environment_factory=environment_factory,
        callbacks=list(callbacks) + ([printer] if printer else []),
    )
    for cb in list(callbacks) + ([printer] if printer else []):
        if hasattr(cb, "trainer"):
            cb.trainer = trainer
    checkpoint = None
    if isinstance(resume, (str, os.PathLike)) and resume:
        checkpoint = str(resume)
    elif resume:
        checkpoint = last_checkpoint(config.output_dir)
    t0 = time.perf_counter()
    trainer.train(resume_from_checkpoint=checkpoint)
    wall = time.perf_counter() - t0
    return GRPOResult(
        trainer=trainer,
        log_history=list(trainer.state.log_history),
        wall_s=wall,
        global_step=trainer.state.global_step,
        rollout_stats=getattr(rollout_func, "total_stats", None),
        resumed_from=checkpoint,
    )


# --------------------------------------------------------------------------- curves


def reward_curves(log_history: Sequence[dict]):
    """A DataFrame indexed by step: one column per reward (`rewards/<name>/mean` → `<name>`),
    `reward` (the weighted sum), and `<domain>/<name>` for the per-domain means."""
    import pandas as pd

    rows = []
    for rec in log_history:
        if "step" not in rec or "reward" not in rec:
            continue
        row = {"step": rec["step"], "reward": rec["reward"]}
        for key, val in rec.items():
            if key.startswith("rewards/") and key.endswith("/mean"):
                row[key[len("rewards/"):-len("/mean")]] = val
            elif key.startswith("domain/"):
                row[key[len("domain/"):]] = val
        rows.append(row)
    if not rows:
        return pd.DataFrame(columns=["reward"]).rename_axis("step")
    return pd.DataFrame(rows).set_index("step").sort_index()


def plot_reward_curves(log_history: Sequence[dict], title: str = "GRPO rewards", smooth: int = 1):
    """Reward curves per reward function (left) and per domain (right); returns the figure."""
    import matplotlib.pyplot as plt

    df = reward_curves(log_history)
    if smooth > 1 and len(df):
        df = df.rolling(smooth, min_periods=1).mean()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    per_func = [c for c in df.columns if "/" not in c]
    per_domain = [c for c in df.columns if "/" in c]
    for c in per_func:
        axes[0].plot(df.index, df[c], label=c, linewidth=2.5 if c == "reward" else 1.2)
    for c in per_domain:
        axes[1].plot(df.index, df[c], label=c)
    axes[0].set_title(f"{title}: per reward function")
    axes[1].set_title(f"{title}: per domain")
    for ax in axes:
        ax.set_xlabel("step")
        ax.set_ylabel("mean reward")
        if ax.lines:
            ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def first_last_means(log_history: Sequence[dict], keys: Sequence[str], n: int = 10) -> dict[str, tuple[float, float]]:
    """Mean of each log key over the first n and the last n logged steps (NaN when absent)."""
    out = {}
    for key in keys:
        vals = [r[key] for r in log_history if key in r and r[key] is not None and "step" in r]
        if not vals:
            out[key] = (float("nan"), float("nan"))
            continue
        out[key] = (sum(vals[:n]) / len(vals[:n]), sum(vals[-n:]) / len(vals[-n:]))
    return out


# --------------------------------------------------------------------------- before / after measurements


def single_turn_accuracy(
    model: Any, tokenizer: Any, rows: Sequence[dict], *, max_new_tokens: int = 128, batch_size: int = 16
) -> dict[str, Any]:
    """Greedy answers to single-turn rows, scored with the registry's accuracy / format / tag_count.

    Returns {"n", "accuracy", "format", "tag_count", "per_domain": {domain: accuracy}}.
    """
    from ..generation import generate_turns
    from ..rewards import get_reward_funcs

    if not rows:
        raise ValueError("no rows to evaluate")
    gen = generate_turns(model, tokenizer, [r["prompt"] for r in rows], max_new_tokens=max_new_tokens,
                         temperature=0.0, batch_size=batch_size)
    acc, fmt, tags = get_reward_funcs("accuracy format tag_count")
    sols = [r["solution"] for r in rows]
    scores = {
        "accuracy": [v or 0.0 for v in acc(completions=gen.texts, solution=sols)],
        "format": fmt(completions=gen.texts),
        "tag_count": tags(completions=gen.texts),
    }
    out: dict[str, Any] = {"n": len(rows)}
    out.update({k: sum(v) / len(v) for k, v in scores.items()})
    per: dict[str, list[float]] = {}
    for r, a in zip(rows, scores["accuracy"]):
        per.setdefault(r.get("domain", "?"), []).append(a)
    out["per_domain"] = {d: sum(v) / len(v) for d, v in per.items()}
    out["samples"] = gen.texts[:3]
    return out


def env_success(
    model: Any,
    tokenizer: Any,
    tasks: Sequence[Task],
    *,
    max_turns: int | None = None,
    max_new_tokens: int = 96,
    batch_size: int = 32,
    progress: bool = False,
) -> dict[str, dict[str, float]]:
    """Greedy episodes on `tasks`: per domain {"n", "success", "score", "valid_rate"} (plus "all")."""
    from ..policies import ModelPolicy
    from ..rollout import run_episodes

    policy = ModelPolicy(model, tokenizer, name="grpo-eval", max_new_tokens=max_new_tokens, batch_size=batch_size)
    trajs = run_episodes(policy, list(tasks), max_turns=max_turns, batch_size=batch_size, progress=progress)
    groups: dict[str, list] = {}
    for t in trajs:
        groups.setdefault(t.domain, []).append(t)
        groups.setdefault("all", []).append(t)
    out = {}
    for d, ts in groups.items():
        turns = sum(t.meta["turns"] for t in ts)
        out[d] = {
            "n": len(ts),
            "success": sum(t.meta["success"] for t in ts) / len(ts),
            "successes": sum(t.meta["success"] for t in ts),
            "score": sum(t.meta["score"] for t in ts) / len(ts),
            "valid_rate": 1.0 - (sum(t.meta["invalid_actions"] for t in ts) / turns if turns else 0.0),
        }
    return out

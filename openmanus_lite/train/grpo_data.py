"""Prompt data for GRPO: single-turn rows with a `solution` (from value-answer environment tasks with their world
written into the prompt, or from trajectories ending in a final answer) and environment task datasets for multi-turn.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Iterable, Sequence

from openmanus_lite.envs import TurnLimits, generate_tasks, make_env
from openmanus_lite.react import extract_answer, format_tagged, parse_turn
from openmanus_lite.schema import Task, Trajectory, Turn
from openmanus_lite.splits import heldout_keys, task_key
from openmanus_lite.train.env_rollout import EnvRolloutFunc

SYSTEM_PROMPT = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. "
    "The assistant first thinks about the reasoning process in the mind and then provides the user with the "
    "answer. The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> tags, "
    "respectively, i.e., <think>\nreasoning process here\n</think>\n<answer>\nanswer here\n</answer>"
)
"""open-r1's system prompt for the tag format (the `format` and `tag_count` rewards check it)."""


_CONTEXT_RENDERERS: dict[str, Callable[[Any, Task], str]] = {}


def register_context_renderer(domain: str):
    """Decorator: `fn(env_after_reset, task) -> str` writes the world a value question is about."""

    def deco(fn):
        _CONTEXT_RENDERERS[domain] = fn
        return fn

    return deco


def value_task_rows(
    domains: Sequence[str] = ("kg", "db", "os"), n: int = 50, seed: int = 0, difficulty: str = "easy",
    system_prompt: str = SYSTEM_PROMPT, report: dict[str, dict[str, int]] | None = None, for_training: bool = False,
) -> list[dict[str, Any]]:
    """Single-turn rows (the world rendered by the domain's context renderer, then the question; `solution` the gold
    answer) from tasks with a value answer; the others, and with `for_training` the kit's held-out tasks, are
    skipped and counted in `report[domain]`."""
    rows = []
    for domain in domains:
        if domain not in _CONTEXT_RENDERERS:
            raise ValueError(f"no single-turn context renderer for domain {domain!r}; value questions exist for "
                             f"{sorted(_CONTEXT_RENDERERS)}. Use the multi-turn mode for the other domains.")
        counts = {"tasks": 0, "kept": 0, "no_value_answer": 0, "held_out": 0}
        banned = heldout_keys(domain, difficulty) if for_training else frozenset()
        for task in generate_tasks(domain, n, seed=seed, difficulty=difficulty):
            counts["tasks"] += 1
            if task_key(task) in banned:
                counts["held_out"] += 1
                continue
            solution = value_solution(task)
            if solution is None:
                counts["no_value_answer"] += 1
                continue
            env = make_env(domain)
            env.reset(task)
            context = _CONTEXT_RENDERERS[domain](env, task)
            instruction = task.instruction.strip()
            question = instruction if instruction.startswith("Question:") else f"Question: {instruction}"
            prompt = [{"role": "system", "content": system_prompt},
                      {"role": "user", "content": f"{context}\n\n{question}"}]
            rows.append({"prompt": prompt, "solution": solution, "domain": domain, "source": f"env:{domain}",
                         "task_id": task.id})
            counts["kept"] += 1
        if report is not None:
            report[domain] = counts
    return rows


def value_solution(task: Task) -> str | None:
    """The gold answer as the text `answer_match` compares with (lists as JSON); None for tasks that change state."""
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
    """The facts the question's program walks through (all relations of each entity it visits, so the needed ones
    sit among others, which come first under the MAX_CONTEXT_FACTS cap) and the attributes argmax/argmin compare."""
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
            ents, attr = walk(prog[1]), prog[2]
            attrs.extend((e, attr, world.attrs[e][attr]) for e in sorted(ents) if attr in world.attrs.get(e, {}))
            return ents
        raise ValueError(f"unknown KG program operator {op!r}")

    walk(task.spec["program"])
    facts = list(dict.fromkeys(needed))
    facts += [f for f in dict.fromkeys(around) if f not in facts][: max(0, MAX_CONTEXT_FACTS - len(facts))]
    lines = ["Facts (subject | relation | object):"] + [f"{s} | {r} | {o}" for s, r, o in facts]
    if attrs:
        lines += ["Attributes (entity | attribute | value):"] + [f"{e} | {a} | {v}" for e, a, v in attrs]
    return "\n".join(lines)


def trajectory_rows(trajectories: Iterable[Trajectory | dict], system_prompt: str = SYSTEM_PROMPT,
                    report: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """Single-turn rows from trajectories that end in a final answer: the conversation before it (the tag-format
    system prompt first) and that answer; the others are counted in `report["no_final_answer"]`."""
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
        rows.append({"prompt": prompt, "solution": answer, "domain": traj.domain, "source": traj.source,
                     "task_id": traj.id})
        counts["kept"] += 1
    if report is not None:
        report.update(counts)
    return rows


def _final_answer(text: str) -> str | None:
    answer = extract_answer(text) if parse_turn(text) else None
    return answer.strip() if isinstance(answer, str) and answer.strip() else None


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
    """SFT examples of the tag format on single-turn rows (a domain hint as the thought, the gold answer): a short
    SFT on them makes the format rewards vary within a group, so GRPO has something to sharpen."""
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


def unseen_rows(rows: Sequence[dict], train_rows: Sequence[dict]) -> list[dict]:
    """The single-turn rows whose prompt no training row has (for held-out evaluation)."""
    seen = {json.dumps(r["prompt"], sort_keys=True) for r in train_rows}
    return [r for r in rows if json.dumps(r["prompt"], sort_keys=True) not in seen]


def build_env_dataset(tasks: Sequence[Task], *, max_turns: TurnLimits = None, max_new_tokens: int = 96,
                      system_prompt: str | None = None, batch_size: int = 64):
    """(dataset of `task_row`s, rollout_func) for multi-turn GRPO from the same tasks; tasks whose prompt repeats an
    earlier one are dropped (counted in `rollout_func.duplicates`)."""
    from datasets import Dataset

    rollout = EnvRolloutFunc(tasks, max_turns=max_turns, max_new_tokens=max_new_tokens, system_prompt=system_prompt,
                             batch_size=batch_size)
    rows = [task_row(task, rollout.prompt_for(task)) for task in rollout.tasks.values()]
    if not rows:
        raise ValueError("no tasks given for multi-turn GRPO")
    return Dataset.from_list(rows), rollout


def task_row(task: Task, prompt: list[dict[str, str]]) -> dict[str, Any]:
    """A dataset row of an environment task (multi-turn and tool mode): the prompt, the task as JSON, and columns for
    the rewards and logs."""
    return {"prompt": prompt, "task": task.to_json(), "domain": task.domain, "difficulty": task.difficulty,
            "task_id": task.id}

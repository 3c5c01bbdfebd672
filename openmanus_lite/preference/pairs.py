"""Preference pairs from environment rollouts: the environment, not a human, is the judge.

Two episodes of one task that scored differently share a prompt up to their first differing action; a
**step pair** then holds the one diverging turn each (DPO), a **trajectory pair** the rest of each episode
(the outcome RM). Rows are TRL's conversational preference format. Episodes come from the expert, the expert
with one injected mistake, and policy rollouts; `label_step_values` gives the process RM its labels.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any, Callable, Iterable

from openmanus_lite.mistakes import ReplayMismatch, action_key, expert_episode, label_step_values, mistake_episodes
from openmanus_lite.policies import Messages
from openmanus_lite.rollout import run_episodes
from openmanus_lite.schema import Task, Trajectory

PAIR_MISTAKE_KINDS = ("random", "corrupt")
"""The default for preference data: a skip can beat the expert in hindsight (a search location that happened to be
empty), and a pair preferring it would teach a model not to look."""
JUDGES = ("outcome", "step_value")
TIE_BREAKS = ("none", "efficiency")
PRM_LABELS = ("progress", "solvable")
"""'solvable': the expert still solves the task after the turn; 'progress': solvable and the turn shrank the
expert's remaining turns."""


# --------------------------------------------------------------------------- comparing episodes
def first_divergence(a: Trajectory, b: Trajectory) -> tuple[int | None, str]:
    """(message index of the first assistant turn whose action differs, 'diverged'), or (None, why not):
    'same_actions' (one is a prefix of the other), 'observation_mismatch' (different tasks, turn limits or a
    non-deterministic environment) or 'role_mismatch' (malformed episodes)."""
    for i, (ta, tb) in enumerate(zip(a.messages, b.messages)):
        if ta.role != tb.role:
            return None, "role_mismatch"
        if ta.role == "assistant":
            if action_key(ta.content, a.domain) != action_key(tb.content, b.domain):
                return i, "diverged"
        elif ta.content != tb.content:
            return None, "observation_mismatch"
    return None, "same_actions"


def episode_score(traj: Trajectory) -> float:
    """The environment's final score of an episode (meta['score'], or 1/0 from meta['success'])."""
    if "score" in traj.meta:
        return float(traj.meta["score"])
    if "success" in traj.meta:
        return float(bool(traj.meta["success"]))
    raise ValueError(f"trajectory {traj.id!r} has no outcome: meta needs 'score' or 'success' "
                     "(episodes from run_episodes or collect_episodes have both)")


def compare_episodes(a: Trajectory, b: Trajectory, tie_break: str = "efficiency") -> tuple[int, str]:
    """(+1 if a is better, -1 if b is, 0 if neither; the reason that decided). The outcome decides first; with
    `tie_break="efficiency"` two equally *successful* episodes are ordered by fewer invalid actions, then fewer turns;
    two equal failures are never ordered."""
    if tie_break not in TIE_BREAKS:
        raise ValueError(f"tie_break must be one of {TIE_BREAKS}, got {tie_break!r}")
    sa, sb = episode_score(a), episode_score(b)
    if sa != sb:
        return (1 if sa > sb else -1), "outcome"
    if tie_break == "efficiency" and a.meta.get("success") and b.meta.get("success"):
        ka, kb = ((int(t.meta.get("invalid_actions", 0)), _assistant_turns(t)) for t in (a, b))
        if ka != kb:
            return (1 if ka < kb else -1), "efficiency"
    return 0, "tie"


def _assistant_turns(traj: Trajectory, end: int | None = None) -> int:
    """Assistant turns among the messages before index `end` (all of them by default)."""
    return sum(1 for t in traj.messages[:end] if t.role == "assistant")


# --------------------------------------------------------------------------- pairs
@dataclass
class PreferencePair:
    """One preference in TRL's conversational format, with where it came from."""

    prompt: Messages
    chosen: Messages
    rejected: Messages
    task_id: str
    domain: str
    level: str  # 'step' (one diverging turn each) or 'trajectory' (the rest of each episode)
    reason: str  # what decided it: 'outcome', 'efficiency', 'step_value' or 'step_efficiency'
    chosen_value: float
    rejected_value: float
    turn: int  # the assistant turn (0-based) at which the two episodes diverge
    chosen_source: str = ""
    rejected_source: str = ""

    def to_row(self) -> dict[str, Any]:
        """A dataset row: the three TRL columns plus provenance columns (trainers ignore them)."""
        row = asdict(self)
        row["margin"] = float(row.pop("chosen_value") - row.pop("rejected_value"))
        return row

    def key(self) -> str:
        """Content hash, for de-duplication (many rollouts share their first mistake)."""
        blob = json.dumps([self.prompt, self.chosen, self.rejected], sort_keys=True, ensure_ascii=False)
        return hashlib.sha1(blob.encode()).hexdigest()


@dataclass
class PairSet:
    """Pairs built from a pool of episodes, and a count of every episode pair that gave none, by reason."""

    pairs: list[PreferencePair] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)

    def rows(self) -> list[dict[str, Any]]:
        return [p.to_row() for p in self.pairs]

    def __len__(self) -> int:
        return len(self.pairs)

    def summary(self) -> dict[str, Any]:
        return {"pairs": len(self.pairs), "by_reason": dict(Counter(p.reason for p in self.pairs)),
                "by_domain": dict(Counter(p.domain for p in self.pairs)), "skipped": dict(self.skipped)}


def _task_id(traj: Trajectory) -> str:
    if not (tid := traj.meta.get("task_id")):
        raise ValueError(f"trajectory {traj.id!r} has no meta['task_id']: pairs are only made within one task "
                         "(episodes from run_episodes or collect_episodes carry it)")
    return str(tid)


def make_pairs(episodes: Iterable[Trajectory], *, level: str = "step", judge: str = "outcome",
               tie_break: str = "efficiency", max_pairs_per_task: int | None = None, seed: int = 0) -> PairSet:
    """Preference pairs from every two episodes of the same task (`level`: see the module doc). judge: 'outcome'
    compares final scores (`compare_episodes`); 'step_value' the expert-continuation values right after the diverging
    turn (`label_step_values`), so a pair credits that turn itself, not a later mistake; with tie_break='efficiency'
    equal values are ordered by the expert's remaining turns. Duplicates are dropped; at most `max_pairs_per_task` pairs
    per task (sampled with `seed`)."""
    if level not in ("step", "trajectory"):
        raise ValueError(f"level must be 'step' or 'trajectory', got {level!r}")
    if judge not in JUDGES:
        raise ValueError(f"judge must be one of {JUDGES}, got {judge!r}")
    groups: dict[str, list[Trajectory]] = defaultdict(list)
    for ep in episodes:
        groups[_task_id(ep)].append(ep)
    rng = random.Random(seed)
    out = PairSet()
    seen: set[str] = set()
    for task_id, group in groups.items():
        task_pairs = []
        for a, b in combinations(group, 2):
            d, why = first_divergence(a, b)
            if d is not None:
                turn = _assistant_turns(a, d)
                sign, why, va, vb = _judge(a, b, turn, judge, tie_break)
            if d is None or sign == 0:
                out.skipped[why] += 1
                continue
            if sign < 0:
                a, b, va, vb = b, a, vb, va
            win, lose = a.to_messages(), b.to_messages()
            end = d + 1 if level == "step" else None
            pair = PreferencePair(win[:d], win[d:end], lose[d:end], task_id, a.domain, level, why, va, vb, turn,
                                  a.source, b.source)
            if (k := pair.key()) in seen:
                out.skipped["duplicate"] += 1
                continue
            seen.add(k)
            task_pairs.append(pair)
        if max_pairs_per_task is not None and len(task_pairs) > max_pairs_per_task:
            out.skipped["over_task_cap"] += len(task_pairs) - max_pairs_per_task
            task_pairs = rng.sample(task_pairs, max_pairs_per_task)
        out.pairs += task_pairs
    return out


def _judge(a: Trajectory, b: Trajectory, turn: int, judge: str, tie_break: str) -> tuple[int, str, float, float]:
    """(sign as in `compare_episodes`, reason, value of a, value of b) of two episodes diverging at `turn`."""
    if judge == "outcome":
        return (*compare_episodes(a, b, tie_break), episode_score(a), episode_score(b))
    (va, ra), (vb, rb) = _step_value(a, turn), _step_value(b, turn)
    if va != vb:
        return (1 if va > vb else -1), "step_value", va, vb
    if tie_break == "efficiency" and va > 0 and ra != rb:
        return (1 if ra < rb else -1), "step_efficiency", va, vb
    return 0, "tie", va, vb


def _step_value(traj: Trajectory, turn: int) -> tuple[float, int]:
    """(expert-continuation score, expert turns remaining) after assistant turn `turn`."""
    if "step_values" not in traj.meta:
        raise ValueError(f"trajectory {traj.id!r} has no meta['step_values']: run label_step_values first, "
                         "or use judge='outcome'")
    return float(traj.meta["step_values"][turn]), int(traj.meta["step_remaining"][turn])



def step_labels(traj: Trajectory, label: str = "progress") -> list[int]:
    """0/1 per assistant turn (see PRM_LABELS) from the step values that `label_step_values` stored."""
    if label not in PRM_LABELS:
        raise ValueError(f"label must be one of {PRM_LABELS}, got {label!r}")
    meta = traj.meta
    if "step_values" not in meta:
        raise ValueError(f"trajectory {traj.id!r} has no meta['step_values']; run label_step_values first")
    solvable = [int(v >= 1.0) for v in meta["step_values"]]
    if label == "solvable":
        return solvable
    before = [meta["start_remaining"]] + list(meta["step_remaining"][:-1])
    return [int(s and after < prev) for s, prev, after in zip(solvable, before, meta["step_remaining"])]


def prm_rows(episodes: Iterable[Trajectory], label: str = "progress") -> list[dict[str, Any]]:
    """Rows for the process reward model: messages and one 0/1 label per assistant turn (see `step_labels`)."""
    return [{"messages": ep.to_messages(), "step_labels": step_labels(ep, label), "task_id": _task_id(ep),
             "domain": ep.domain} for ep in episodes]


# --------------------------------------------------------------------------- collecting a pool
def collect_episodes(tasks: list[Task], *, policy: Any = None, samples_per_task: int = 2, mistakes_per_task: int = 2,
                     mistake_kinds: tuple[str, ...] = PAIR_MISTAKE_KINDS, max_turns: int | None = None, seed: int = 0,
                     batch_size: int = 32, progress: bool = False) -> tuple[list[Trajectory], Counter]:
    """(episodes from the three sources labelled with step values, counts per source and of unreplayable ones).
    Rollouts need a sampling policy: a greedy one repeats itself, and identical episodes give no pairs."""
    if repeated := sorted(tid for tid, n in Counter(t.id for t in tasks).items() if n > 1):
        raise ValueError(f"task ids must be unique (pairs are made per task id); repeated: {repeated[:5]}")
    rng = random.Random(seed)
    episodes: list[Trajectory] = []
    for task in tasks:
        episodes.append(expert := expert_episode(task, max_turns))
        if mistakes_per_task:
            episodes += mistake_episodes(task, mistakes_per_task, rng, mistake_kinds, max_turns,
                                         expert_turns=int(expert.meta["turns"]))
    if policy is not None and samples_per_task:
        repeated_tasks = [t for t in tasks for _ in range(samples_per_task)]
        rollouts = run_episodes(policy, repeated_tasks, max_turns=max_turns, batch_size=batch_size, progress=progress)
        for k, ep in enumerate(rollouts):
            ep.id = f"{ep.id}/{k % samples_per_task}"
        episodes += rollouts
    by_id = {t.id: t for t in tasks}
    counts: Counter = Counter()
    kept = []
    for ep in episodes:
        counts[ep.source.split(":")[0] if ep.source.startswith("mistake") else ep.source] += 1
        try:
            label_step_values(by_id[ep.meta["task_id"]], ep)
            kept.append(ep)
        except ReplayMismatch:
            counts["replay_mismatch_dropped"] += 1
    return kept, counts


# --------------------------------------------------------------------------- fitting a length budget
def fit_prompt(prompt: Messages, completions: list[Messages], count_tokens: Callable[[Messages], int],
               max_tokens: int) -> Messages | None:
    """The prompt without its oldest turn pairs after the task message, so it + the longest completion fits
    `max_tokens`; None when even the task message does not fit. Not the trainer's truncation: TRL's
    `keep_start` cuts the completion, `keep_end` the task."""
    head = 2 if prompt and prompt[0]["role"] == "system" else 1  # the system and task messages stay
    current = list(prompt)
    while max(count_tokens(current + c) for c in completions) > max_tokens:
        if len(current) - head < 2:
            return None
        current = current[:head] + current[head + 2:]
    return current


def chat_token_counter(tokenizer: Any) -> Callable[[Messages], int]:
    """`messages -> token count` under the tokenizer's chat template."""
    return lambda messages: len(tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True)["input_ids"])


def pair_dataset(rows: list[dict[str, Any]], tokenizer: Any, max_length: int) -> tuple[Any, Counter]:
    """(a `datasets.Dataset` of {prompt, chosen, rejected} within `max_length` tokens for DPO and the ORM,
    counts of rows kept, shortened by `fit_prompt` and dropped_too_long)."""
    import datasets

    count = chat_token_counter(tokenizer)
    counts: Counter = Counter()
    out = []
    for r in rows:
        if missing := [key for key in ("prompt", "chosen", "rejected") if key not in r]:
            raise ValueError(f"preference row lacks {missing}: rows need prompt, chosen and rejected message lists "
                             "(make them with preference.pairs.make_pairs(...).rows())")
        prompt = fit_prompt(r["prompt"], [r["chosen"], r["rejected"]], count, max_length)
        if prompt is None:
            counts["dropped_too_long"] += 1
            continue
        if len(prompt) < len(r["prompt"]):
            counts["shortened"] += 1
        counts["kept"] += 1
        out.append({"prompt": prompt, "chosen": r["chosen"], "rejected": r["rejected"]})
    if not out:
        raise ValueError(f"no preference pair fits max_length={max_length} tokens ({dict(counts)}); raise max_length")
    return datasets.Dataset.from_list(out), counts


def split_by_task(rows: list[dict[str, Any]], eval_fraction: float, seed: int = 0
                  ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Train / held-out split by task id, so no task's pairs are on both sides."""
    ids = sorted({r["task_id"] for r in rows})
    random.Random(seed).shuffle(ids)
    held = set(ids[: int(round(len(ids) * eval_fraction))])
    return [r for r in rows if r["task_id"] not in held], [r for r in rows if r["task_id"] in held]


# --------------------------------------------------------------------------- one call for the whole data set
@dataclass
class PreferenceData:
    """Everything built from one pool of episodes: step pairs (DPO), trajectory pairs (ORM),
    step-labelled rows (PRM), and the accounting of what was made and what was skipped."""

    episodes: list[Trajectory]
    step_pairs: list[dict[str, Any]]
    trajectory_pairs: list[dict[str, Any]]
    prm: list[dict[str, Any]]
    counts: dict[str, Any]

    FILES = {"episodes": "episodes.jsonl", "step_pairs": "step_pairs.jsonl",
             "trajectory_pairs": "trajectory_pairs.jsonl", "prm": "prm_rows.jsonl"}

    def save(self, out_dir: str) -> str:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        for key, name in self.FILES.items():
            lines = ([e.to_json() for e in self.episodes] if key == "episodes"
                     else [json.dumps(r, ensure_ascii=False) for r in getattr(self, key)])
            (out / name).write_text("".join(line + "\n" for line in lines))
        (out / "counts.json").write_text(json.dumps(self.counts, indent=2))
        return str(out)

    @classmethod
    def load(cls, folder: str) -> "PreferenceData":
        d = Path(folder)
        if not (d / cls.FILES["step_pairs"]).is_file():
            raise FileNotFoundError(f"{d} holds no preference data ({cls.FILES['step_pairs']} missing); build it with "
                                    "`python -m openmanus_lite dpo pairs --out DIR`")

        def lines(name: str) -> list[str]:
            path = d / name
            return [line for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []

        rows = {key: [json.loads(line) for line in lines(name)] for key, name in cls.FILES.items() if key != "episodes"}
        counts = json.loads((d / "counts.json").read_text()) if (d / "counts.json").is_file() else {}
        return cls([Trajectory.from_json(line) for line in lines(cls.FILES["episodes"])], counts=counts, **rows)


def build_preference_data(tasks: list[Task], *, judge: str = "step_value", tie_break: str = "efficiency",
                          prm_label: str = "progress", max_pairs_per_task: int | None = None, seed: int = 0,
                          **collect: Any) -> PreferenceData:
    """Collect episodes (`collect_episodes` takes the other keywords) and turn them into DPO, ORM and PRM data.
    Step pairs are judged by `judge` (by default the expert judges the diverging turn itself), trajectory pairs
    by outcome."""
    episodes, ep_counts = collect_episodes(tasks, seed=seed, **collect)
    common = {"tie_break": tie_break, "max_pairs_per_task": max_pairs_per_task, "seed": seed}
    steps = make_pairs(episodes, level="step", judge=judge, **common)
    trajs = make_pairs(episodes, level="trajectory", judge="outcome", **common)
    prm = prm_rows(episodes, label=prm_label)
    labels = [y for r in prm for y in r["step_labels"]]
    by_source: dict[str, list[bool]] = defaultdict(list)
    for e in episodes:
        by_source[e.source].append(bool(e.meta.get("success")))
    counts = {"tasks": len(tasks), "episodes": dict(ep_counts),
              "success_rate_by_source": {k: round(sum(v) / len(v), 4) for k, v in sorted(by_source.items())},
              "step_pairs": steps.summary(), "trajectory_pairs": trajs.summary(),
              "prm_steps": len(labels), "prm_positive_rate": sum(labels) / len(labels) if labels else None}
    return PreferenceData(episodes, steps.rows(), trajs.rows(), prm, counts)

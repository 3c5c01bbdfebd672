"""Where GRPO's learning signal is, and keeping the steps on it (issue #40).

A group (the samples of one prompt) whose rewards all agree has zero advantage and moves nothing, yet TRL still runs
its forward and backward passes: with 4 samples per task most groups of the kit's multi-turn runs agreed. These are
the pieces `KitGRPOTrainer` (grpo.py) uses against that: finding and dropping such groups, refilling and re-splitting
the batch, pre-screening tasks (DAPO's dynamic sampling, once), GiGPO step credit, and a chat template check.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from openmanus_lite.errors import UserError
from openmanus_lite.schema import Task
from openmanus_lite.train.env_rollout import EXPERT_SAMPLE, EnvRolloutFunc, ObservationRenderer, run_episode_tokens


@dataclass
class GroupSignal:
    """The groups of one generation batch: which carry signal (rewards not all equal)."""

    group_size: int
    keep: list[bool]
    """Per group: True when its rewards differ (a non-zero advantage somewhere)."""
    uniform_rewards: list[float] = field(default_factory=list)
    """The common reward of each group without signal (NaN: no sample could be scored)."""

    @property
    def groups(self) -> int:
        return len(self.keep)

    @property
    def kept_groups(self) -> int:
        return sum(self.keep)

    @property
    def share(self) -> float:
        return self.kept_groups / self.groups if self.groups else 0.0

    @property
    def kept_rows(self) -> list[int]:
        """Row indices of the kept groups (rows are grouped consecutively, as TRL's sampler lays them out)."""
        return [g * self.group_size + i for g, k in enumerate(self.keep) if k for i in range(self.group_size)]

    def metrics(self, dropping: bool) -> dict[str, float]:
        """The `signal/*` figures of a step; without dropping, the share is still reported."""
        dropped = self.groups - self.kept_groups if dropping else 0
        kept = self.groups - dropped
        return {"signal/group_share": self.share, "signal/groups_kept": float(kept),
                "signal/groups_dropped": float(dropped), "signal/samples_kept": float(kept * self.group_size),
                "signal/samples_dropped": float(dropped * self.group_size)}

    def __add__(self, other: "GroupSignal") -> "GroupSignal":
        """Both batches' groups as one (a step's rollout rounds)."""
        if other.group_size != self.group_size:
            raise ValueError(f"groups of {self.group_size} and {other.group_size} samples do not join")
        return GroupSignal(self.group_size, self.keep + other.keep, self.uniform_rewards + other.uniform_rewards)

    def warning(self, below: float) -> str | None:
        """Why most groups carry no signal, and what to change; None when the share is at least `below`."""
        if not self.groups or self.share >= below:
            return None
        values = Counter("unscorable" if math.isnan(r) else f"{r:g}" for r in self.uniform_rewards)
        spread = ", ".join(f"{n} with every sample at reward {v}" for v, n in sorted(values.items()))
        return (f"GRPO signal: only {self.kept_groups} of {self.groups} groups have rewards that differ "
                f"({self.share:.0%}); {spread}. A group that agrees gives zero advantage: at the reward of success the "
                "task is too easy for the policy (use harder tasks), at the reward of failure too hard (use easier "
                f"ones, or more SFT first). Use larger groups (num_generations, now {self.group_size}), pre-screen the "
                "training tasks (grpo_signal.prescreen_tasks keeps those solved sometimes), and "
                "drop_uniform_groups=True so these groups cost no backward pass.")


def group_signal(rewards: Sequence[float], group_size: int, step_signal: Sequence[bool] | None = None) -> GroupSignal:
    """Mark the groups (consecutive rows) whose finite rewards differ, or whose turns carry step signal (`step_signal`,
    one flag per group). `math.isclose` mirrors TRL's zero-std test; NaN rewards are left out, as from TRL's mean."""
    if group_size < 1 or len(rewards) % group_size:
        raise ValueError(f"{len(rewards)} rewards do not split into groups of {group_size}")
    keep, uniform = [], []
    for start in range(0, len(rewards), group_size):
        finite = [float(r) for r in rewards[start:start + group_size] if not math.isnan(float(r))]
        differ = any(not math.isclose(r, finite[0], rel_tol=1e-5, abs_tol=1e-8) for r in finite)
        differ = differ or bool(step_signal and step_signal[start // group_size])
        keep.append(differ)
        if not differ:
            uniform.append(finite[0] if finite else math.nan)
    return GroupSignal(group_size=group_size, keep=keep, uniform_rewards=uniform)


def domain_success(rows: Sequence[dict], environments: Sequence[Any] | None = None) -> dict[str, float]:
    """`success/<domain>`: the share of successful episodes per domain, from the rows' `domain` / `env_success`
    columns (the policy's episodes: swapped-in expert samples left out) or the tool-mode environments' attributes;
    empty in single-turn mode."""
    pairs = ([(getattr(e, "domain", None), getattr(e, "env_success", None)) for e in environments] if environments
             else [(r.get("domain"), r.get("env_success")) for r in rows if not r.get(EXPERT_SAMPLE)])
    return key_means((f"success/{d}", bool(s)) for d, s in pairs if d is not None and s is not None)


def key_means(pairs: Iterable[tuple[str, float]]) -> dict[str, float]:
    """The mean value per key of (key, value) pairs, keys in first-seen order."""
    per: dict[str, list[float]] = {}
    for key, value in pairs:
        per.setdefault(key, []).append(value)
    return {key: sum(v) / len(v) for key, v in per.items()}


def step_advantages(states: Sequence[Sequence[str]], rewards: Sequence[float], group_size: int,
                    discount: float = 0.95) -> list[list[float]]:
    """Per episode and turn, GiGPO's standardised advantage among the group's turns that start from the same state,
    by discounted return discount**(T-1-t) * R: shorter paths get credit even where every episode succeeds."""
    if len(states) != len(rewards) or len(rewards) % group_size:
        raise ValueError(f"{len(states)} episodes and {len(rewards)} rewards do not form groups of {group_size}")
    out: list[list[float]] = [[0.0] * len(s) for s in states]
    for start in range(0, len(states), group_size):
        anchors: dict[str, list[tuple[int, int, float]]] = {}
        for ep in range(start, start + group_size):
            reward = 0.0 if math.isnan(float(rewards[ep])) else float(rewards[ep])
            turns = len(states[ep])
            for t, state in enumerate(states[ep]):
                anchors.setdefault(state, []).append((ep, t, discount ** (turns - 1 - t) * reward))
        for members in anchors.values():
            returns = [r for _, _, r in members]
            mean = sum(returns) / len(returns)
            std = math.sqrt(sum((r - mean) ** 2 for r in returns) / len(returns))
            if std > 1e-8:
                for ep, t, r in members:
                    out[ep][t] = (r - mean) / std
    return out


def token_advantages(episode: Any, steps: Sequence[Sequence[float]], turn_masks: Sequence[Sequence[int]],
                     width: int, weight: float) -> Any:
    """(B, width) advantages: the episode's plus `weight` x the step advantage on each turn's tokens (a run of 1s in
    the env mask); TRL's loss takes (B, T) advantages as they are."""
    out = episode.detach().float().unsqueeze(1).repeat(1, width)
    for row, (mask, adv) in enumerate(zip(turn_masks, steps)):
        turn, previous = -1, 0
        for pos, m in enumerate(mask[:width]):
            if m and not previous:
                turn += 1
            if m:
                if turn >= len(adv):
                    raise ValueError(f"episode {row} has more model-token runs than recorded turns ({len(adv)})")
                out[row, pos] += weight * adv[turn]
            previous = m
    return out.to(episode.dtype)


def batch_rows(batch: dict[str, Any]) -> int:
    return int(batch["completion_ids"].shape[0])


def select_rows(batch: dict[str, Any], rows: Sequence[int]) -> dict[str, Any]:
    """The rows `rows` of a scored generation batch, with `num_items_in_batch` (the `dapo` loss's normaliser)
    recounted over them so dropped groups do not dilute the loss of the kept ones."""
    import torch

    n = batch_rows(batch)
    index = torch.as_tensor(list(rows), dtype=torch.long, device=batch["completion_ids"].device)

    def pick(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.ndim >= 1 and value.shape[0] == n:
            return value.index_select(0, index)
        return [value[i] for i in rows] if isinstance(value, list) and len(value) == n else value

    out = {key: pick(value) for key, value in batch.items()}
    mask = out["completion_mask"] if out.get("tool_mask") is None else out["completion_mask"] * out["tool_mask"]
    out["num_items_in_batch"] = mask.sum().to(batch["num_items_in_batch"].dtype)
    return out


def concat_rows(batches: Sequence[dict[str, Any]], pad_token_id: int) -> dict[str, Any]:
    """Scored generation batches as one, padded as TRL pads them (prompts left, completions right)."""
    import torch

    if len(batches) == 1:
        return batches[0]
    out: dict[str, Any] = {}
    for key, first in batches[0].items():
        values = [b[key] for b in batches]
        if key == "num_items_in_batch":
            out[key] = sum(values[1:], values[0])
        elif isinstance(first, torch.Tensor) and first.ndim >= 2:
            width = max(v.shape[1] for v in values)
            pad = pad_token_id if key.endswith("_ids") else 0
            sides = [(width - v.shape[1], 0) if key.startswith("prompt_") else (0, width - v.shape[1]) for v in values]
            out[key] = torch.cat([torch.nn.functional.pad(v, side, value=pad) for v, side in zip(values, sides)])
        elif isinstance(first, torch.Tensor) and first.ndim == 1:
            out[key] = torch.cat(values)
        elif isinstance(first, list):
            out[key] = [x for v in values for x in v]
        else:
            out[key] = first
    return out


def split_rows(batch: dict[str, Any], chunks: int) -> list[dict[str, Any]]:
    """`batch` in `chunks` micro-batches as even as possible (TRL's split needs a multiple), each cut to its own
    padding; an empty one is skipped by `KitGRPOTrainer.training_step`."""
    n = batch_rows(batch)
    bounds = [round(i * n / chunks) for i in range(chunks + 1)]
    parts = [_trim_padding(select_rows(batch, range(a, b))) for a, b in zip(bounds, bounds[1:])]
    for part in parts:  # the normaliser stays the whole (kept) batch's token count, as TRL's split keeps it
        part["num_items_in_batch"] = batch["num_items_in_batch"]
    return parts


def _trim_padding(batch: dict[str, Any]) -> dict[str, Any]:
    """Drop the columns no row of `batch` uses: left padding of the prompts, right padding of the completions."""
    import torch

    if not batch_rows(batch):
        return batch
    prompt_len, comp_len = batch["prompt_ids"].shape[1], batch["completion_ids"].shape[1]
    used = batch["prompt_mask"].any(0).nonzero()
    start = int(used[0]) if len(used) else prompt_len - 1
    used = batch["completion_mask"].any(0).nonzero()
    stop = int(used[-1]) + 1 if len(used) else 1  # at least one column: TRL keeps logits for the completion length
    for key, value in batch.items():
        if not isinstance(value, torch.Tensor) or value.ndim < 2:
            continue
        if key.startswith("prompt_") and value.shape[1] == prompt_len:
            batch[key] = value[:, start:]
        elif not key.startswith("prompt_") and value.shape[1] == comp_len:
            batch[key] = value[:, :stop]
    return batch


@dataclass
class ScreenResult:
    """Successes of `k` sampled episodes per task id."""

    k: int
    successes: dict[str, int]

    @property
    def kept(self) -> dict[str, int]:
        """Task id -> successes for the tasks solved sometimes but not always: where a group has signal."""
        return {tid: s for tid, s in self.successes.items() if 0 < s < self.k}

    def summary(self) -> str:
        always = sum(s == self.k for s in self.successes.values())
        never = sum(s == 0 for s in self.successes.values())
        return (f"pre-screen ({self.k} samples per task): {len(self.kept)} of {len(self.successes)} tasks kept, "
                f"{always} always solved, {never} never solved")


def prescreen_tasks(model: Any, tokenizer: Any, tasks: Sequence[Task], rollout: EnvRolloutFunc, *, k: int = 8,
                    max_completion_tokens: int = 512, temperature: float = 1.0) -> ScreenResult:
    """Successes of `k` sampled episodes per task, played as training will; `result.kept` are the tasks worth a GRPO
    group. Rerun as the policy moves: a task it always solves stops carrying signal."""
    from openmanus_lite.engine.generation import render_prompts

    prompts = render_prompts(tokenizer, [rollout.prompt_for(t) for t in tasks])
    episodes = run_episode_tokens(
        model, tokenizer, [t for t in tasks for _ in range(k)], [p for p in prompts for _ in range(k)],
        max_turns=rollout.max_turns, max_new_tokens=rollout.max_new_tokens, max_completion_tokens=max_completion_tokens,
        temperature=temperature, batch_size=rollout.batch_size, return_logprobs=False)
    successes = {t.id: 0 for t in tasks}
    for ep in episodes:
        successes[ep.task.id] += int(ep.success)
    return ScreenResult(k=k, successes=successes)


class TemplateDriftError(UserError):
    """The chat template renders a conversation differently from the tokens a multi-turn rollout trains on."""


SAMPLE_CONVERSATION = [
    {"role": "user", "content": "Task: which table holds the orders? You have 3 turns."},
    {"role": "assistant", "content": "Thought: list the tables first.\nAction: execute[SHOW TABLES]"},
    {"role": "user", "content": "Observation: customers, orders, items"},
    {"role": "assistant", "content": "Thought: it is `orders` — check its columns.\nAction: execute[DESCRIBE orders]"},
    {"role": "user", "content": "Observation: id, customer_id, total"},
    {"role": "assistant", "content": "Thought: done.\nAction: answer[orders]"},
]
"""A short ReAct episode with thoughts, so a template that rewrites or drops earlier turns shows in the tokens."""


def rollout_token_segments(tokenizer: Any, conversation: Sequence[dict]) -> list[tuple[str, list[int]]]:
    """The conversation as (label, ids) segments, tokenised the way the multi-turn rollout feeds it."""
    from openmanus_lite.engine.generation import render_prompts

    first = next(i for i, m in enumerate(conversation) if m["role"] == "assistant")
    renderer = ObservationRenderer(tokenizer)
    segments = [("the prompt", render_prompts(tokenizer, [list(conversation[:first])])[0])]
    for turn, message in enumerate(conversation[first:]):
        if message["role"] == "assistant":
            segments.append((f"assistant turn {turn // 2 + 1}", renderer.action_ids(message["content"])))
        else:
            segments.append((f"observation {turn // 2 + 1}", renderer.ids(message["content"])))
    return segments


def check_chat_template(tokenizer: Any, conversation: Sequence[dict] | None = None,
                        system_prompt: str | None = None) -> None:
    """Raise TemplateDriftError unless the whole conversation rendered by the template starts with exactly the tokens
    the rollout feeds: a template that rewrites earlier turns would train on contexts inference never shows.
    Without a conversation, SAMPLE_CONVERSATION after `system_prompt` (if any) is checked."""
    system = [{"role": "system", "content": system_prompt}] if system_prompt else []
    conversation = system + list(conversation or SAMPLE_CONVERSATION)
    try:
        segments = rollout_token_segments(tokenizer, conversation)
    except ValueError as err:  # the renderer's own refusal: no eos at turn ends, or not prefix-preserving
        raise TemplateDriftError(f"chat template check: {err}") from err
    fed = [t for _, ids in segments for t in ids]
    text = tokenizer.apply_chat_template([{"role": m["role"], "content": m["content"]} for m in conversation],
                                         tokenize=False)
    whole = tokenizer(text, add_special_tokens=False)["input_ids"]
    position = next((i for i, (a, b) in enumerate(zip(fed, whole)) if a != b), min(len(fed), len(whole)))
    if position == len(fed):
        return
    starts = [sum(len(ids) for _, ids in segments[:j]) for j in range(len(segments))]
    j = max(j for j, start in enumerate(starts) if start <= position)
    label, start = segments[j][0], starts[j]
    window = slice(max(0, position - 8), position + 12)
    raise TemplateDriftError(
        f"chat template drift at token {position} of {len(fed)} (in {label}, token {position - start}): the rollout "
        f"feeds {tokenizer.decode(fed[window])!r} but the template renders the whole conversation as "
        f"{tokenizer.decode(whole[window])!r}. Multi-turn GRPO would train on contexts inference never shows; use a "
        "template that renders earlier turns unchanged (e.g. models.qwen25_chat_template()), or check_template=False "
        "at your own risk.")

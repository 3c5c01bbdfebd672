"""Multi-turn, environment-grounded rollouts for TRL's `GRPOTrainer(rollout_func=...)`.

Each prompt (one task, already repeated per generation by TRL 1.15) becomes a whole episode, all episodes of a call in
lock step through `rollout.run_episodes` with a `TokenPolicy`. The result holds `prompt_ids`, `completion_ids`,
`logprobs` (when TRL reads them) and `env_mask`, TRL's tool mask (1 = the model's token, 0 = an environment token);
any other key reaches the rewards as a column. For the ChatML template:

    prompt_ids      <|im_start|>system ... <|im_start|>user\\n{task}<|im_end|>\\n<|im_start|>assistant\\n
    completion_ids  {turn 1 tokens}<|im_end|>                                    env_mask 1
                    \\n<|im_start|>user\\n{observation 1}<|im_end|>\\n<|im_start|>assistant\\n  env_mask 0
                    {turn 2 tokens}<|im_end|> ...                                env_mask 1

Turns are generated from the exact ids so far, never re-tokenised text, so the context is a valid rendering of the
conversation (a turn cut by its token limit gets the end token as an environment token). Expert-guided episodes
(`expert_guidance.py`) start with the expert's first turns as environment tokens.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

from openmanus_lite.envs import TurnLimits, make_env, run_expert
from openmanus_lite.rollout import run_episodes
from openmanus_lite.schema import Task
from openmanus_lite.train.expert_guidance import ExpertGuide, replay_expert

COMPLETION_MESSAGES = "completion_messages"
"""Extra rollout key with each episode as messages; KitGRPOTrainer turns it into `completions`."""
STEP_STATES = "step_states"
"""Extra rollout key with each episode's `EpisodeTokens.states`; KitGRPOTrainer's step-level credit reads it."""
EXPERT_SAMPLE = "expert_sample"
"""Extra rollout column: True for the expert's episodes `expert_in_failed_groups` swapped in (not the policy's)."""


@dataclass
class EpisodeTokens:
    """One finished episode in token form plus the environment's verdict."""

    task: Task
    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    messages: list[dict[str, str]] = field(default_factory=list)
    """The completion as chat messages: assistant turns and observation (user) turns."""
    outcome: float = 0.0
    success: bool = False
    invalid_actions: int = 0
    num_turns: int = 0
    ended_by: str = ""
    """"done" (the environment ended it), "tokens" (the completion budget ran out)."""
    states: list[str] = field(default_factory=list)
    """Per assistant turn, a hash of the task and the observations so far: GiGPO's anchor state."""
    prefix_turns: int = 0
    """Expert turns replayed before the policy's first: 2 x prefix_turns messages, all env_mask 0."""
    expert: bool = False
    """The expert's whole episode, its actions as model tokens (`expert_episode_tokens`), not the policy's."""


@dataclass
class RolloutStats:
    """Figures of rollout calls, summed (for logs and the benchmark)."""

    episodes: int = 0
    seconds: float = 0.0
    generated_tokens: int = 0
    generate_calls: int = 0
    reused_tokens: int = 0
    """Context tokens the rollout's PrefixCache spared encoding again."""

    @property
    def tokens_per_s(self) -> float:
        return self.generated_tokens / self.seconds if self.seconds > 0 else 0.0


def trainer_uses_logprobs(trainer: Any) -> bool:
    """True when TRL 1.15 reads the rollout's `logprobs` (vLLM importance sampling, off-policy masking); skipping
    them otherwise saves a log-softmax over the vocabulary per generated token."""
    vllm_is = getattr(trainer, "use_vllm", False) and getattr(trainer, "vllm_importance_sampling_correction", False)
    return bool(vllm_is) or getattr(trainer.args, "off_policy_mask_threshold", None) is not None


def prompt_key(prompt: Any) -> str:
    """The key that maps a (repeated, deep-copied) prompt back to its task."""
    if isinstance(prompt, str):
        return prompt
    return json.dumps([{"role": m["role"], "content": m["content"]} for m in prompt], ensure_ascii=False)


def task_prompt(task: Task, max_turns: TurnLimits = None, system_prompt: str | None = None) -> list[dict[str, str]]:
    """The conversational prompt of a task: its first user message (after an optional system one)."""
    first = make_env(task.domain, max_turns=max_turns).reset(task)
    msgs = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return msgs + [{"role": "user", "content": first}]


class ObservationRenderer:
    """Token ids of the template text between two assistant turns, around an observation."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        eos = tokenizer.eos_token
        if not eos:
            raise ValueError("the tokenizer has no eos token; cannot tell where an assistant turn ends")
        base = [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]
        marker = "\x00OBSERVATION\x00"
        prefix = tokenizer.apply_chat_template(base, tokenize=False)
        full = tokenizer.apply_chat_template(base + [{"role": "user", "content": marker}], tokenize=False,
                                             add_generation_prompt=True)
        end = prefix.rfind(eos)
        if end < 0 or not full.startswith(prefix[: end + len(eos)]):
            raise ValueError("the chat template does not end an assistant turn with the eos token, or is not "
                             "prefix-preserving; multi-turn rollouts need a ChatML-style template such as "
                             "models.qwen25_chat_template()")
        suffix = full[end + len(eos):]
        if suffix.count(marker) != 1:
            raise ValueError("the chat template renders a user message in an unexpected way")
        self.head, self.tail = suffix.split(marker)
        self.eos_id = tokenizer.eos_token_id

    def ids(self, observation: str) -> list[int]:
        return self.tokenizer(self.head + observation + self.tail, add_special_tokens=False)["input_ids"]

    def action_ids(self, action: str) -> list[int]:
        """An assistant turn the model did not generate (the expert's) as the rollout feeds it: text, then end token."""
        return self.tokenizer(action, add_special_tokens=False)["input_ids"] + [self.eos_id]


class TokenPolicy:
    """A `rollout.run_episodes` policy playing each episode in token form: it appends each observation as
    environment tokens and ends the episode (`None` reply) once the completion budget has no room for it and one
    more token. `prefixes` (id of a task -> k) starts that task's episodes after the expert's first k turns."""

    name = "grpo-rollout"

    def __init__(self, model: Any, tokenizer: Any, prompts: dict[int, list[int]], *, renderer: ObservationRenderer,
                 stats: RolloutStats, max_new_tokens: int, max_completion_tokens: int, temperature: float,
                 top_p: float, batch_size: int, return_logprobs: bool, kv_cache: bool,
                 prefixes: dict[int, int] | None = None):
        from openmanus_lite.engine.generation import PrefixCache

        self.model, self.tokenizer, self.prompts, self.renderer, self.stats = model, tokenizer, prompts, renderer, stats
        self.max_new_tokens, self.max_completion_tokens = max_new_tokens, max_completion_tokens
        self.prefixes = prefixes or {}
        self.sampling = dict(temperature=temperature, top_p=top_p, batch_size=batch_size,
                             return_logprobs=return_logprobs)
        self.cache = PrefixCache() if kv_cache else None  # this call only: the weights change every optimizer step
        self.episodes: list[tuple[Any, EpisodeTokens]] = []
        """(environment, episode) in the order the episodes started; holding the environments keeps their ids unique."""
        self._by_env: dict[int, EpisodeTokens] = {}
        self._unclosed: set[int] = set()  # episodes whose last turn was cut by its token limit

    def _extend(self, ep: EpisodeTokens, ids: list[int], logprobs: list[float] | None, model_tokens: bool) -> None:
        ep.completion_ids += ids
        if self.sampling["return_logprobs"]:
            ep.logprobs += logprobs if logprobs is not None else [0.0] * len(ids)
        ep.env_mask += [int(model_tokens)] * len(ids)

    def _replay_expert(self, ep: EpisodeTokens, env: Any, turns: int) -> None:
        """The expert's first `turns` turns as environment tokens, stopping at half the completion budget so the
        policy keeps room to act."""
        for action, observation in replay_expert(env, turns):
            self._extend(ep, self.renderer.action_ids(action) + self.renderer.ids(observation), None,
                         model_tokens=False)
            ep.messages += [{"role": "assistant", "content": action}, {"role": "user", "content": observation}]
            ep.prefix_turns += 1
            if len(ep.completion_ids) >= self.max_completion_tokens // 2:
                break

    def act_batch(self, histories: list[list[dict]], envs: list[Any]) -> list[str | None]:
        from openmanus_lite.engine.generation import generate_from_ids

        replies: list[str | None] = [None] * len(envs)
        playing: list[tuple[int, EpisodeTokens]] = []
        for k, (history, env) in enumerate(zip(histories, envs)):
            ep = self._by_env.get(id(env))
            if ep is None:
                ep = self._by_env[id(env)] = EpisodeTokens(task=env.task, prompt_ids=list(self.prompts[id(env.task)]))
                self.episodes.append((env, ep))
                self._replay_expert(ep, env, self.prefixes.get(id(env.task), 0))
                if len(ep.completion_ids) >= self.max_completion_tokens:
                    ep.ended_by = "tokens"  # one expert turn filled the budget: nothing left for the policy
                    continue
            else:
                observation = history[-1]["content"]
                obs_ids = ([self.renderer.eos_id] if id(ep) in self._unclosed else []) + self.renderer.ids(observation)
                if len(obs_ids) + 1 > self.max_completion_tokens - len(ep.completion_ids):
                    ep.ended_by = "tokens"  # no room for the observation and at least one more token
                    continue
                self._extend(ep, obs_ids, None, model_tokens=False)
                ep.messages.append({"role": "user", "content": observation})
            ep.states.append(state_key(ep.task, [m["content"] for m in ep.messages if m["role"] == "user"]))
            playing.append((k, ep))
        if not playing:
            return replies
        room = [min(self.max_new_tokens, self.max_completion_tokens - len(ep.completion_ids)) for _, ep in playing]
        gen = generate_from_ids(self.model, self.tokenizer, [ep.prompt_ids + ep.completion_ids for _, ep in playing],
                                max_new_tokens=room, kv_cache=self.cache, **self.sampling)
        self.stats.generate_calls += 1
        for j, (k, ep) in enumerate(playing):
            ids = gen.completion_ids[j]
            self.stats.generated_tokens += len(ids)
            self._extend(ep, ids, gen.logprobs[j] if gen.logprobs is not None else None, model_tokens=True)
            if gen.stopped[j]:
                self._unclosed.discard(id(ep))
            else:
                self._unclosed.add(id(ep))
            ep.messages.append({"role": "assistant", "content": gen.texts[j]})
            replies[k] = gen.texts[j]
        return replies


def run_episode_tokens(model: Any, tokenizer: Any, tasks: list[Task], prompts: list[list[int]], *,
                       max_turns: TurnLimits = None, max_new_tokens: int = 96, max_completion_tokens: int = 512,
                       temperature: float = 1.0, top_p: float = 1.0, batch_size: int = 64,
                       renderer: ObservationRenderer | None = None, stats: RolloutStats | None = None,
                       return_logprobs: bool = True, kv_cache: bool = True,
                       expert_prefix: list[int] | None = None) -> list[EpisodeTokens]:
    """Play one episode per (task, prompt ids) in lock step. `max_new_tokens` caps a turn, `max_completion_tokens`
    the whole completion; `kv_cache=False` re-encodes every turn (for checking the cache); `expert_prefix` (per task)
    starts an episode after that many expert turns."""
    stats = stats if stats is not None else RolloutStats()
    t0 = time.perf_counter()
    policy = TokenPolicy(model, tokenizer, {id(t): p for t, p in zip(tasks, prompts)},
                         renderer=renderer or ObservationRenderer(tokenizer), stats=stats,
                         max_new_tokens=max_new_tokens, max_completion_tokens=max_completion_tokens,
                         temperature=temperature, top_p=top_p, batch_size=batch_size,
                         return_logprobs=return_logprobs, kv_cache=kv_cache,
                         prefixes={id(t): k for t, k in zip(tasks, expert_prefix or ())})
    run_episodes(policy, tasks, max_turns=max_turns, batch_size=max(1, len(tasks)), progress=False)
    if policy.cache is not None:
        stats.reused_tokens += policy.cache.reused_tokens
        policy.cache.clear()
    by_task: dict[int, list[EpisodeTokens]] = {}
    for env, ep in policy.episodes:
        ep.num_turns, ep.invalid_actions = env.turn, env.invalid_actions
        if env.done:
            ep.outcome, ep.success = float(env.last_info.get("score", 0.0)), bool(env.last_info.get("success", False))
            ep.ended_by = "done"
        by_task.setdefault(id(ep.task), []).append(ep)
    stats.episodes += len(tasks)
    stats.seconds += time.perf_counter() - t0
    # episodes of one task object share its prompt, so within a task any order pairs prompts and completions right
    return [by_task[id(t)].pop(0) for t in tasks]


class EnvRolloutFunc:
    """A `rollout_func` for GRPOTrainer playing the task behind each prompt, mapped back by its text (TRL passes
    only prompts: build the dataset and this from the same tasks, `build_env_dataset`). Sampling, the completion
    budget and `expert_prefix_share` (expert-guided episodes, state in `self.guide`) come from the GRPOConfig."""

    def __init__(self, tasks: Iterable[Task], *, max_turns: TurnLimits = None,
                 max_new_tokens: int = 96, system_prompt: str | None = None, batch_size: int = 64):
        self.max_turns, self.max_new_tokens, self.system_prompt = max_turns, max_new_tokens, system_prompt
        self.batch_size = batch_size
        self.tasks: dict[str, Task] = {}
        self.duplicates = 0
        for task in tasks:
            key = prompt_key(self.prompt_for(task))
            if key in self.tasks:
                self.duplicates += 1  # same visible prompt: the first task stands for both
                continue
            self.tasks[key] = task
        self.last_episodes: list[EpisodeTokens] = []
        self.total_stats = RolloutStats()
        """Figures summed over every call (`run_episode_tokens` adds each call's into it)."""
        self._renderer: ObservationRenderer | None = None
        self.guide: ExpertGuide | None = None

    def prompt_for(self, task: Task) -> list[dict[str, str]]:
        return task_prompt(task, self.max_turns, self.system_prompt)

    def _task(self, prompt: Any) -> Task:
        task = self.tasks.get(prompt_key(prompt))
        if task is None:
            raise KeyError("the rollout got a prompt that belongs to none of its tasks; build the dataset and the "
                           "rollout function from the same tasks (grpo.build_env_dataset) and the same system prompt")
        return task

    def __call__(self, prompts: list, trainer: Any) -> dict[str, list]:
        from openmanus_lite.engine.generation import render_prompts

        args, tokenizer = trainer.args, trainer.processing_class
        self._renderer = self._renderer or ObservationRenderer(tokenizer)
        model = trainer.accelerator.unwrap_model(trainer.model)
        tasks = [self._task(p) for p in prompts]
        prompt_ids = render_prompts(tokenizer, prompts)  # the same rendering evaluation uses
        mode_train = trainer.model.training
        logprobs = trainer_uses_logprobs(trainer)
        if mode_train and getattr(args, "expert_prefix_share", 0) and self.guide is None:
            self.guide = ExpertGuide(args.expert_prefix_share, args.expert_prefix_shrink_at, self.max_turns)
        guide = self.guide if mode_train else None  # evaluation plays the whole tasks
        eps = run_episode_tokens(
            model, tokenizer, tasks, prompt_ids, max_turns=self.max_turns, max_new_tokens=self.max_new_tokens,
            max_completion_tokens=int(args.max_completion_length), temperature=float(args.temperature or 1.0),
            top_p=float(args.top_p or 1.0), batch_size=self.batch_size, renderer=self._renderer, stats=self.total_stats,
            return_logprobs=logprobs, expert_prefix=guide.prefix_turns(tasks) if guide else None)
        if mode_train and not trainer.model.training:  # inference_mode restores it; make sure
            trainer.model.train()
        metrics = {"rollout/turns_mean": sum(e.num_turns for e in eps) / len(eps),
                   "rollout/success_rate": sum(e.success for e in eps) / len(eps),
                   **(guide.update(eps) if guide else {})}
        if mode_train and getattr(args, "expert_in_failed_groups", False):
            if logprobs:
                raise ValueError("expert_in_failed_groups trains on the expert's tokens, which have no sampling "
                                 "log-probabilities: turn off vLLM importance sampling and off_policy_mask_threshold")
            eps = self._expert_into_failed_groups(eps, tokenizer, trainer.num_generations,
                                                  int(args.max_completion_length))
            metrics["guide/expert_samples"] = float(sum(e.expert for e in eps))
        self.last_episodes = eps
        log_metric = getattr(trainer, "_log_metric", None)
        for name, value in metrics.items() if callable(log_metric) else ():
            log_metric(name, value)
        return episodes_to_rollout_output(eps, logprobs=logprobs)

    def _expert_into_failed_groups(self, eps: list[EpisodeTokens], tokenizer: Any, group_size: int,
                                   max_completion_tokens: int) -> list[EpisodeTokens]:
        """`eps` with the last episode of each all-failed group (consecutive rows of one task, as TRL lays them out)
        swapped for the expert's episode, where the expert solves the task within the completion budget."""
        out = list(eps)
        for start in range(0, len(eps) - group_size + 1, group_size):
            group = eps[start:start + group_size]
            if len({id(e.task) for e in group}) != 1 or any(e.success for e in group):
                continue
            expert = expert_episode_tokens(group[-1].task, group[-1].prompt_ids, tokenizer, self._renderer,
                                           max_turns=self.max_turns, max_completion_tokens=max_completion_tokens)
            if expert is not None:
                out[start + group_size - 1] = expert
        return out


def expert_episode_tokens(task: Task, prompt_ids: list[int], tokenizer: Any, renderer: ObservationRenderer, *,
                          max_turns: TurnLimits = None, max_completion_tokens: int = 512) -> EpisodeTokens | None:
    """The expert's whole episode in the rollout's token form, its actions as the model's tokens (env_mask 1): the
    off-policy sample GRPO's `expert_in_failed_groups` gives a group that never succeeded, so its advantage points at
    a success sampling did not reach (LUFFY's off-policy guidance). None when the expert fails the task within the
    turn limit or its episode does not fit `max_completion_tokens`."""
    env = make_env(task.domain, max_turns=max_turns)
    messages, last = run_expert(env, task)
    if not last.info.get("success"):
        return None
    ep = EpisodeTokens(task=task, prompt_ids=list(prompt_ids), messages=messages[1:],
                       outcome=float(last.info.get("score", 1.0)), success=True, invalid_actions=env.invalid_actions,
                       num_turns=env.turn, ended_by="done", expert=True)
    observations: list[str] = []
    for message in ep.messages:
        if message["role"] == "assistant":
            ep.states.append(state_key(task, observations))
            ids = renderer.action_ids(message["content"])
        else:
            observations.append(message["content"])
            ids = renderer.ids(message["content"])
        ep.completion_ids += ids
        ep.env_mask += [int(message["role"] == "assistant")] * len(ids)
    return ep if len(ep.completion_ids) <= max_completion_tokens else None


def episodes_to_rollout_output(eps: list[EpisodeTokens], logprobs: bool = True) -> dict[str, Any]:
    """The dict GRPOTrainer expects from a rollout_func, plus the reward columns; `logprobs` None when not recorded."""
    return {
        "prompt_ids": [e.prompt_ids for e in eps],
        "completion_ids": [e.completion_ids for e in eps],
        "logprobs": [e.logprobs for e in eps] if logprobs else None,
        "env_mask": [e.env_mask for e in eps],
        "env_outcome": [e.outcome for e in eps],
        "env_success": [e.success for e in eps],
        "invalid_actions": [e.invalid_actions for e in eps],
        "num_turns": [e.num_turns for e in eps],
        "domain": [e.task.domain for e in eps],
        COMPLETION_MESSAGES: [e.messages for e in eps],
        STEP_STATES: [e.states for e in eps],
        EXPERT_SAMPLE: [e.expert for e in eps],
    }


def state_key(task: Task, observations: list[str]) -> str:
    """The environment state an assistant turn starts from, as the observation history identifies it."""
    return hashlib.sha1(json.dumps([task.id, *observations], ensure_ascii=False).encode()).hexdigest()[:16]

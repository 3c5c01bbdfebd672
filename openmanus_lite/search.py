"""Test-time search for agents: best-of-N, beam / Tree-of-Thoughts, MCTS (UCT) and DFSDT.

Every strategy plans with the environment as a simulator (`env.clone()`), proposes
candidate turns with a *proposer* (expert, random, or a model policy sampling with
temperature), ranks states with a *scorer*, and stops at a compute budget counted in
generated tokens or model calls, so strategies can be compared at equal cost.

What the search may see, and what it may not
--------------------------------------------
A search may use what an agent sees: observations, whether the episode ended, whether
its action parsed and was valid, and its own log-probabilities or a learned value model.
It may never use the hidden success checker. That is enforced, not promised: the search
plays in a `Simulator`, which disables the environment's checker on its copies (`_score`
and `_safe_score` return 0 there, also where domain code shows a score in an observation)
and passes on only
`observation`, `done` and the info keys in `VISIBLE_INFO_KEYS`. The chosen action
sequence is scored afterwards by replaying it in a fresh, unmodified environment.

Why search plays its own steps instead of `rollout.run_episodes` (the kit's episode loop): a
search branches, cloning environments mid-episode and stepping copies, which a lock-step loop
over one environment per task cannot do. Environments and turn limits come from the same
`envs.make_env`, and `eval.run_benchmark(search=...)` scores searches like greedy episodes.

`oracle=True` lifts the blindfold: terminal states are valued by the true score. That
measures oracle-selected pass@k, an upper bound on what any selector could reach with
the same samples; it is reported separately and never mixed with real search results.
"""

from __future__ import annotations

import math
import random
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from openmanus_lite.envs import make_env
from openmanus_lite.envs.base import Env
from openmanus_lite.policies import CallablePolicy, reply_tokens
from openmanus_lite.react import ParseError, parse_action, parse_step
from openmanus_lite.schema import Task

Messages = list[dict[str, str]]

VISIBLE_INFO_KEYS = ("turn", "parsed", "valid", "action", "invalid_actions")
"""The parts of `StepResult.info` a search may read. Never `score`, `success` or `reward`."""
ORACLE_INFO_KEYS = ("score", "success")
TURN_LIMIT_TEXT = "Turn limit reached."
_ERROR_RE = re.compile(r"^\s*(error|invalid format)\b|command not found|no such (file|table|column)|syntax error|"
                       r"\btraceback\b", re.IGNORECASE)


# ---------------------------------------------------------------- the blindfolded simulator


def _blind_score(answer_text: str | None) -> float:
    """Stands in for `Env._safe_score` on a search copy: the checker is never run there."""
    return 0.0


@dataclass
class View:
    """One step as the search sees it. `logprob` is the path's summed log-probability, when known."""

    observation: str
    done: bool
    info: dict[str, Any]
    logprob: float | None = None


class Simulator:
    """An environment copy for planning. Unless `oracle`, its scoring is disabled and
    `step` returns only agent-visible information."""

    def __init__(self, env: Env, oracle: bool = False):
        self._env = env
        self.oracle = oracle
        if not oracle:
            # instance attributes shadow the methods: Env.step's end-of-episode scoring, and
            # any domain code that calls the checker itself (the shop prints "Your score"
            # on its confirmation page, as WebShop does), get 0 without running the checker
            env._safe_score = _blind_score
            env._score = _blind_score

    @classmethod
    def start(cls, task: Task, *, oracle: bool = False, max_turns: int | None = None) -> tuple["Simulator", str]:
        env = make_env(task.domain, max_turns=max_turns)
        sim = cls(env, oracle)
        return sim, env.reset(task)

    def step(self, text: str) -> View:
        r = self._env.step(text)
        info = {k: r.info[k] for k in VISIBLE_INFO_KEYS if k in r.info}
        if self.oracle and r.done:
            info.update({k: r.info[k] for k in ORACLE_INFO_KEYS if k in r.info})
        return View(r.observation, r.done, info)

    def clone(self) -> "Simulator":
        # re-blinds the copy too, in case a domain's clone() rebuilds the env from scratch
        return Simulator(self._env.clone(), self.oracle)

    @property
    def done(self) -> bool:
        return self._env.done

    @property
    def env(self) -> Env:
        """The live env, for proposers that read state (the expert and random baselines do,
        as their `act_batch` does); search strategies themselves only call `step`."""
        return self._env


# ---------------------------------------------------------------- proposals and cost


@dataclass
class Candidate:
    """A proposed assistant turn and what generating it cost."""

    text: str
    tokens: int
    logprob: float | None = None
    greedy: bool = False


_TOKEN_RE = re.compile(r"\w+|[^\w\s]")


def approx_tokens(text: str) -> int:
    """A tokenizer-free token count (words and punctuation) for proposers that generate no tokens."""
    return max(1, len(_TOKEN_RE.findall(text or "")))


class Proposer(Protocol):
    name: str

    def propose(self, histories: list[Messages], envs: list[Env], k: int, rng: random.Random,
                include_greedy: bool = True) -> list[list[Candidate]]:
        """k candidate turns per conversation (duplicates allowed: each one was paid for).
        With include_greedy the first candidate is the policy's own best guess."""
        ...


class ExpertProposer:
    """The expert's action first, then perturbations; sampled candidates are the expert's
    action with probability 1 - epsilon, else a perturbation. A perturbation is a random
    exploratory action (never a random `answer(...)`: the expert perturbed, not replaced by
    a guesser), after which the expert recovers from whatever state it leads to."""

    def __init__(self, epsilon: float = 0.3):
        self.name = "expert"
        self.epsilon = epsilon
        self.expert_failures = 0

    def _expert(self, env: Env, rng: random.Random) -> str:
        try:
            return env.expert_action()
        except Exception:  # a perturbed state the expert has no plan for: propose something else
            self.expert_failures += 1
            return env.random_action(rng)

    def _perturbation(self, env: Env, rng: random.Random) -> str:
        for _ in range(8):
            text = env.random_action(rng)
            parsed = parse_step(text, env.domain)
            if isinstance(parsed, ParseError) or parsed[1].kind != "answer":
                return text
        return self._expert(env, rng)

    def propose(self, histories, envs, k, rng, include_greedy=True):
        out = []
        for env in envs:
            cands = []
            for i in range(k):
                if (include_greedy and i == 0) or (not (include_greedy and i > 0) and rng.random() >= self.epsilon):
                    text = self._expert(env, rng)
                else:
                    text = self._perturbation(env, rng)
                cands.append(Candidate(text, approx_tokens(text)))
            out.append(cands)
        return out


class RandomProposer:
    """k random but well-formed actions (the environment's random baseline)."""

    name = "random"

    def propose(self, histories, envs, k, rng, include_greedy=True):
        return [[Candidate(t, approx_tokens(t)) for t in (env.random_action(rng) for _ in range(k))] for env in envs]


class PolicyProposer:
    """Adapts a policy: the greedy candidate comes from `act_batch`; further candidates from
    `policy.sample_batch(histories, n)` when the policy has it (a model sampling with
    temperature; items may be str, (text, logprob) or {'text', 'logprob', 'tokens'}),
    else from repeated `act_batch` calls (for stochastic callables).

    Costs come from the policy's `generated_tokens` counter (and `last_generated_tokens`
    per reply when present); a policy without a counter is charged `approx_tokens`.
    """

    def __init__(self, policy: Any):
        self.policy = policy
        self.name = getattr(policy, "name", "policy")

    def _counter(self) -> int | None:
        v = getattr(self.policy, "generated_tokens", None)
        return None if v is None else int(v)

    def _costs(self, texts: list[str], before: int | None) -> list[int]:
        if before is None:
            return [approx_tokens(t) for t in texts]
        return reply_tokens(self.policy, texts, before)

    def _act(self, histories, envs, out: list[list[Candidate]]) -> None:
        """One `act_batch` call: a candidate per conversation, with what it cost."""
        before = self._counter()
        texts = list(self.policy.act_batch(histories, envs))
        for i, (t, c) in enumerate(zip(texts, self._costs(texts, before))):
            out[i].append(Candidate(t, c))

    def propose(self, histories, envs, k, rng, include_greedy=True):
        out: list[list[Candidate]] = [[] for _ in histories]
        n_samples = k
        if include_greedy:
            self._act(histories, envs, out)
            n_samples -= 1
        if n_samples <= 0:
            return out
        if hasattr(self.policy, "sample_batch"):
            before = self._counter()
            samples = self.policy.sample_batch(histories, n_samples)
            if len(samples) != len(histories):
                raise ValueError(f"{self.name}.sample_batch returned {len(samples)} lists for {len(histories)} "
                                 f"conversations; it must return n samples per conversation")
            flat = [_as_candidate(s) for per in samples for s in per]
            costs = self._costs([c.text for c in flat], before)
            pos = 0
            for i, per in enumerate(samples):
                for _ in per:
                    c = flat[pos]
                    out[i].append(Candidate(c.text, c.tokens if c.tokens else costs[pos], c.logprob))
                    pos += 1
        else:
            for _ in range(n_samples):
                self._act(histories, envs, out)
        return out


def _as_candidate(item: Any) -> Candidate:
    if isinstance(item, str):
        return Candidate(item, 0)
    if isinstance(item, (tuple, list)) and item and isinstance(item[0], str):
        return Candidate(item[0], 0, float(item[1]) if len(item) > 1 and item[1] is not None else None)
    if isinstance(item, dict) and "text" in item:
        lp = item.get("logprob")
        return Candidate(item["text"], int(item.get("tokens") or 0), None if lp is None else float(lp))
    raise TypeError(f"cannot read a sample of type {type(item).__name__}: expected str, (text, logprob) or a dict "
                    f"with 'text'")


def as_proposer(obj: Any) -> Any:
    """'expert', 'random', a proposer (has `propose`), or a policy (has `act_batch`)."""
    if isinstance(obj, str):
        if obj == "expert":
            return ExpertProposer()
        if obj == "random":
            return RandomProposer()
        raise ValueError(f"unknown proposer {obj!r}: use 'expert', 'random', a policy or a proposer")
    if hasattr(obj, "propose"):
        return obj
    if hasattr(obj, "act_batch"):
        return PolicyProposer(obj)
    if callable(obj):
        return PolicyProposer(CallablePolicy(obj))
    raise TypeError(f"cannot use {obj!r} as a proposer: pass 'expert', 'random', a policy or a proposer")


@dataclass
class Budget:
    """A compute limit: generated tokens, model calls (candidate turns generated), or both."""

    tokens: int | None = None
    calls: int | None = None
    unit: float | None = None
    """What one greedy episode costs, in the budget's own measure (tokens if set, else calls).
    Optional; with it, beam and MCTS size their width to the budget (1 unit = greedy)."""

    def __post_init__(self):
        if self.tokens is None and self.calls is None:
            raise ValueError("a Budget needs tokens=... or calls=... (or both)")
        for name in ("tokens", "calls"):
            v = getattr(self, name)
            if v is not None and v <= 0:
                raise ValueError(f"Budget.{name} must be positive, got {v}")

    @property
    def multiple(self) -> float | None:
        """The budget in greedy episodes (None without a unit)."""
        if not self.unit:
            return None
        return (self.tokens if self.tokens is not None else self.calls) / self.unit

    def to_dict(self) -> dict[str, float | None]:
        return {"tokens": self.tokens, "calls": self.calls, "unit": self.unit}


class Meter:
    """What a search has spent against its budget."""

    def __init__(self, budget: Budget):
        self.budget = budget
        self.tokens = 0
        self.calls = 0

    def charge(self, cands: list[Candidate]) -> None:
        self.tokens += sum(c.tokens for c in cands)
        self.calls += len(cands)

    @property
    def exhausted(self) -> bool:
        b = self.budget
        return (b.tokens is not None and self.tokens >= b.tokens) or (b.calls is not None and self.calls >= b.calls)

    def cap(self, k: int, n_states: int = 1) -> int:
        """Candidates per state that fit the remaining budget (at least 1)."""
        b, caps = self.budget, [k]
        if b.calls is not None:
            caps.append((b.calls - self.calls) // max(1, n_states))
        if b.tokens is not None and self.calls:
            per = self.tokens / self.calls
            caps.append(int((b.tokens - self.tokens) / per / max(1, n_states) + 0.999))
        return max(1, min(caps))


# ---------------------------------------------------------------- values

Scorer = Callable[[Messages, View], float]


def _observations(history: Messages, view: View) -> list[str]:
    obs = [m["content"] for m in history[1:] if m["role"] == "user"]
    return obs + [view.observation]


def answer_grounding(answer: str, observations: list[str]) -> float:
    """Fraction of the answer's items (comma-separated values) that appear in what the agent
    observed: an answer read off the environment beats one made up."""
    items = [s.strip(" '\"`").lower() for s in re.split(r"[,\n]", answer.strip().strip("[](){}"))]
    items = [s for s in items if s]
    if not items:
        return 0.0
    seen = "\n".join(observations).lower()
    return sum(1 for s in items if re.search(r"(?<!\w)" + re.escape(s) + r"(?!\w)", seen)) / len(items)


_STOP = frozenset("the and for with that this from into than lower higher less more find need want please your "
                  "you are was were has have what which who whose how many much does did any all".split())
_WORD_RE = re.compile(r"[a-z0-9]+(?:\.[0-9]+)?")


def task_relevance(history: Messages) -> float:
    """Fraction of the task's content words that appear in the last observation before the
    episode ended (e.g. the product page where the agent clicked Buy Now)."""
    first = history[0]["content"] if history else ""
    m = re.search(r"^Task:\s*(.+)$", first, re.MULTILINE)
    words = {w for w in _WORD_RE.findall((m.group(1) if m else "").lower()) if len(w) >= 3 and w not in _STOP}
    last_obs = next((h["content"] for h in reversed(history[1:]) if h["role"] == "user"), "")
    if not words or not last_obs:
        return 0.0
    seen = set(_WORD_RE.findall(last_obs.lower()))
    return sum(1 for w in words if w in seen) / len(words)


def heuristic_value(history: Messages, view: View) -> float:
    """An agent-visible value in [0, 1] (no checker): invalid actions lower it; a turn-limit
    ending is a dead end; an answer scores by how much of it was observed; an episode the
    environment ended by itself (goal reached, purchase made) scores high, higher when the
    last page it saw matched the task's words."""
    n_actions = sum(1 for m in history if m["role"] == "assistant")
    validity = 1.0 - min(1.0, view.info.get("invalid_actions", 0) / max(1, n_actions))
    if not view.done:
        return 0.3 * validity
    action = view.info.get("action") or ""
    parsed = parse_action(action) if action else None
    if parsed is not None and getattr(parsed, "kind", None) == "answer":
        return 0.45 + 0.35 * answer_grounding(parsed.arg, _observations(history, view)) + 0.2 * validity
    if TURN_LIMIT_TEXT in view.observation:
        return 0.1 * validity
    return 0.6 + 0.2 * validity + 0.2 * task_relevance(history)


def logprob_value(history: Messages, view: View) -> float:
    """`heuristic_value`, with ties broken by the path's mean log-probability per turn."""
    base = heuristic_value(history, view)
    if view.logprob is None:
        return base
    n = max(1, sum(1 for m in history if m["role"] == "assistant"))
    return base + 0.01 * math.tanh(view.logprob / n)


SCORERS: dict[str, Scorer] = {"heuristic": heuristic_value, "logprob": logprob_value}


def as_scorer(obj: str | Scorer | None) -> Scorer:
    if obj is None:
        return heuristic_value
    if isinstance(obj, str):
        if obj not in SCORERS:
            raise ValueError(f"unknown scorer {obj!r}; available: {sorted(SCORERS)} or any callable "
                             f"(history, view) -> float")
        return SCORERS[obj]
    return obj


# ---------------------------------------------------------------- search tree


@dataclass(eq=False)
class Node:
    sim: Simulator
    history: Messages
    actions: list[str]
    view: View | None = None
    value: float = 0.0
    logprob: float | None = 0.0
    children: list["Node"] | None = None
    deviations: int = 0
    """Turns on this path where the search took something other than the policy's greedy turn:
    the tie-breaker between equally valued trajectories (prefer what the policy would do)."""
    visits: int = 0
    total: float = 0.0

    @property
    def done(self) -> bool:
        return self.view is not None and self.view.done

    @property
    def valid(self) -> bool:
        return self.view is None or bool(self.view.info.get("valid", False))


@dataclass
class SearchResult:
    """The chosen trajectory of one search and what it cost; `success`/`score` come from
    replaying its actions in a fresh, unmodified environment (`evaluate`)."""

    strategy: str
    task_id: str
    actions: list[str]
    finished: bool
    value: float
    tokens: int
    calls: int
    episodes: int
    nodes: int
    oracle: bool
    budget: dict[str, int | None]
    wall_s: float = 0.0
    success: bool | None = None
    score: float | None = None
    turns: int = 0
    invalid_actions: int = 0
    messages: Messages = field(default_factory=list)
    replay_matches: bool | None = None
    search_history: Messages = field(default_factory=list)


class _Search:
    """Shared bookkeeping of one search on one task."""

    def __init__(self, task: Task, proposer: Any, budget: Budget, scorer: Any, oracle: bool, seed: int,
                 max_turns: int | None, prior_weight: float = 0.05):
        self.task = task
        self.prior_weight = 0.0 if oracle else prior_weight
        self.proposer = as_proposer(proposer)
        self.meter = Meter(budget)
        self.scorer = as_scorer(scorer)
        self.oracle = oracle
        self.max_turns = max_turns
        self.rng = random.Random(f"search:{seed}:{task.id}")
        self.finished: list[Node] = []
        self.nodes = 0
        self.episodes = 0
        self.t0 = time.perf_counter()
        self.root = self.fresh()

    def fresh(self) -> Node:
        sim, first = Simulator.start(self.task, oracle=self.oracle, max_turns=self.max_turns)
        return Node(sim, [{"role": "user", "content": first}], [])

    def propose(self, nodes: list[Node], k: int, include_greedy: bool) -> list[list[Candidate]]:
        """Candidates per node, deduplicated; each is marked greedy (the policy's own turn) or not."""
        k = self.meter.cap(k, len(nodes))
        cands = self.proposer.propose([n.history for n in nodes], [n.sim.env for n in nodes], k, self.rng,
                                      include_greedy)
        out = []
        for per in cands:
            self.meter.charge(per)
            per = _dedupe(per)
            for i, c in enumerate(per):
                c.greedy = include_greedy and i == 0
            out.append(per)
        return out

    def child(self, node: Node, cand: Candidate, in_place: bool = False) -> Node:
        sim = node.sim if in_place else node.sim.clone()
        view = sim.step(cand.text)
        lp = None if node.logprob is None or cand.logprob is None else node.logprob + cand.logprob
        view.logprob = lp
        history = node.history + [{"role": "assistant", "content": cand.text}]
        if not view.done:
            history.append({"role": "user", "content": view.observation})
        new = Node(sim, history, node.actions + [cand.text], view, logprob=lp,
                   deviations=node.deviations + (0 if cand.greedy else 1))
        new.value = self.value(new)
        self.nodes += 1
        if new.done:
            self.finished.append(new)
            self.episodes += 1
        return new

    def value(self, node: Node) -> float:
        if self.oracle and node.done:
            return float(node.view.info.get("score", 0.0))
        return float(self.scorer(node.history, node.view))

    def rank(self, node: Node) -> float:
        """Value minus `prior_weight` per turn that left the policy's greedy choice: the policy's
        own preference as a prior, so a weak scorer does not trade a greedy trajectory for an
        equally scored lucky guess. (0 under oracle: then only the true score counts.)"""
        return node.value - self.prior_weight * node.deviations

    def best_finished(self) -> Node | None:
        best = None
        for n in self.finished:  # highest rank; ties go to the earliest found
            if best is None or self.rank(n) > self.rank(best):
                best = n
        return best

    def reached(self, stop_at: float | None) -> bool:
        best = self.best_finished()
        return stop_at is not None and best is not None and self.rank(best) >= stop_at

    def play_out(self, node: Node, greedy: bool = True, past_budget: bool = True) -> Node:
        """Play the proposer from `node` to the end of the episode on a copy, one turn at a time. `past_budget`:
        finish even when the budget is spent (every strategy returns a finished episode; the overspend is
        reported); otherwise stop there (an MCTS rollout)."""
        first = True
        while not node.done and (past_budget or not self.meter.exhausted):
            cands = self.propose([node], 1, include_greedy=greedy)[0]
            if not cands:
                break
            node = self.child(node, cands[0], in_place=not first)
            first = False
        return node

    def result(self, strategy: str, fallback: Node | None = None, chosen: Node | None = None) -> SearchResult:
        chosen = chosen or self.best_finished()
        if chosen is None:
            chosen = self.play_out(fallback or self.root)
        return SearchResult(
            strategy=strategy, task_id=self.task.id, actions=list(chosen.actions), finished=chosen.done,
            value=chosen.value, tokens=self.meter.tokens, calls=self.meter.calls, episodes=self.episodes,
            nodes=self.nodes, oracle=self.oracle, budget=self.meter.budget.to_dict(),
            wall_s=time.perf_counter() - self.t0, search_history=chosen.history,
        )


def _dedupe(cands: list[Candidate]) -> list[Candidate]:
    """The first candidate of each text, in order."""
    first: dict[str, Candidate] = {}
    for c in cands:
        first.setdefault(c.text, c)
    return list(first.values())


# ---------------------------------------------------------------- strategies


def best_of_n(task: Task, proposer: Any, budget: Budget, *, n: int | None = None, parallel: int = 8,
              scorer: Any = None, oracle: bool = False, seed: int = 0, max_turns: int | None = None,
              stop_at: float | None = 1.0, prior_weight: float = 0.05) -> SearchResult:
    """Sample whole episodes (the first greedy, the rest sampled, `parallel` at a time in
    lock step) until `n` or the budget; keep the one the scorer values most."""
    s = _Search(task, proposer, budget, scorer, oracle, seed, max_turns, prior_weight)
    first = s.play_out(s.root)
    first_cost = max(1, s.meter.tokens if budget.tokens is not None else s.meter.calls)
    while not s.meter.exhausted and not s.reached(stop_at) and (n is None or s.episodes < n):
        spent = s.meter.tokens if budget.tokens is not None else s.meter.calls
        limit = budget.tokens if budget.tokens is not None else budget.calls
        width = max(1, min(parallel, math.ceil((limit - spent) / first_cost), (n - s.episodes) if n else parallel))
        live = [s.fresh() for _ in range(width)]
        while live and not s.meter.exhausted:
            cands = s.propose(live, 1, include_greedy=False)
            nxt = []
            for node, per in zip(live, cands):
                if per:
                    child = s.child(node, per[0], in_place=True)
                    if not child.done:
                        nxt.append(child)
            live = nxt
        if live:  # the budget ran out mid-wave: those episodes are abandoned
            break
    return s.result("best_of_n", fallback=first)


def beam_search(task: Task, proposer: Any, budget: Budget, *, beam_width: int | None = None, k: int | None = None,
                scorer: Any = None, oracle: bool = False, seed: int = 0, max_turns: int | None = None,
                stop_at: float | None = 1.0, prior_weight: float = 0.05) -> SearchResult:
    """Tree-of-Thoughts beam search: at each turn propose k candidates per beam (the greedy
    one first), step each in a cloned env, keep the `beam_width` best unfinished states by
    value; finished trajectories are set aside. Stops when no beam is left, the budget is
    spent, or a finished trajectory reaches `stop_at`; returns the best finished one.

    Unset `beam_width`/`k` are sized to the budget when it has a unit (beam_width x k ~ the
    budget in greedy episodes, so 1x is greedy decoding), else 2 and 3."""
    m = budget.multiple
    if beam_width is None:
        beam_width = 2 if m is None else max(1, int(math.sqrt(m)))
    if k is None:
        k = 3 if m is None else max(1, int(m // beam_width))
    s = _Search(task, proposer, budget, scorer, oracle, seed, max_turns, prior_weight)
    beams = [s.root]
    while beams and not s.meter.exhausted:
        cands = s.propose(beams, k, include_greedy=True)
        children = [s.child(b, c) for b, per in zip(beams, cands) for c in per]
        live = sorted((c for c in children if not c.done), key=s.rank, reverse=True)
        beams = live[:beam_width]
        if s.reached(stop_at):
            break
    fallback = beams[0] if beams else s.root
    return s.result("beam", fallback=fallback)


def mcts(task: Task, proposer: Any, budget: Budget, *, k: int | None = None, c_uct: float = 1.0,
         rollout_greedy: bool = True,
         scorer: Any = None, oracle: bool = False, seed: int = 0, max_turns: int | None = None,
         stop_at: float | None = 1.0, prior_weight: float = 0.05) -> SearchResult:
    """UCT over candidate turns proposed by the policy: select by UCB1, expand k candidates
    (greedy first), value a new leaf by rolling the policy out to the end of the episode
    and scoring it, back the value up. Returns the best finished trajectory seen.

    An unset `k` is min(3, budget in greedy episodes) when the budget has a unit, else 3."""
    if k is None:
        k = 3 if budget.multiple is None else max(1, min(3, int(budget.multiple)))
    s = _Search(task, proposer, budget, scorer, oracle, seed, max_turns, prior_weight)
    idle = 0
    while not s.meter.exhausted and not s.reached(stop_at) and idle < 50:
        spent_before = s.meter.calls
        node, path = s.root, [s.root]
        while not node.done:
            if node.children is None:
                if node.visits == 0 and node is not s.root:
                    break  # a fresh leaf: evaluate it by a rollout
                node.children = [s.child(node, c) for c in s.propose([node], k, include_greedy=True)[0]]
            if not node.children:
                break
            unvisited = [c for c in node.children if c.visits == 0]
            if unvisited:
                node = unvisited[0]
            else:
                log_n = math.log(max(1, node.visits))
                node = max(node.children, key=lambda c: c.total / c.visits + c_uct * math.sqrt(log_n / c.visits))
            path.append(node)
            if node.visits == 0:
                break
        value = s.rank(node if node.done else s.play_out(node, rollout_greedy, past_budget=False))
        for n in path:
            n.visits += 1
            n.total += value
        idle = idle + 1 if s.meter.calls == spent_before else 0
    fallback = max(s.root.children or [s.root], key=lambda c: c.visits)
    return s.result("mcts", fallback=fallback)


def dfsdt(task: Task, proposer: Any, budget: Budget, *, max_children: int = 3, accept: float = 0.75,
          scorer: Any = None, oracle: bool = False, seed: int = 0, max_turns: int | None = None,
          prior_weight: float = 0.05) -> SearchResult:
    """Depth-first search with backtracking (ToolLLM's DFSDT): follow the greedy turn; on an
    invalid action, an error observation, or a dead end (turn limit, or a finished episode
    valued below `accept`) back up and try a freshly sampled sibling, up to `max_children`
    per state. Stops at the first acceptable finished trajectory (with the heuristic scorer,
    0.75 accepts an answer partly read off the observations, or an episode the environment
    ended itself); otherwise returns the best finished one when the budget is spent."""
    s = _Search(task, proposer, budget, scorer, oracle, seed, max_turns, prior_weight)
    deepest = [s.root]

    def visit(node: Node) -> Node | None:
        tried: set[str] = set()
        for i in range(max_children):
            if s.meter.exhausted:
                return None
            cands = [c for c in s.propose([node], 1, include_greedy=(i == 0))[0] if c.text not in tried]
            if not cands:
                continue
            tried.add(cands[0].text)
            child = s.child(node, cands[0])
            if not child.valid or _ERROR_RE.search(child.view.observation or ""):
                if child.done and s.rank(child) >= accept:
                    return child
                continue
            if child.done:
                if s.rank(child) >= accept:
                    return child
                continue
            if len(child.actions) > len(deepest[0].actions):
                deepest[0] = child
            found = visit(child)
            if found is not None:
                return found
        return None

    found = visit(s.root)
    if found is not None:
        return s.result("dfsdt", chosen=found)
    return s.result("dfsdt", fallback=deepest[0])


STRATEGIES: dict[str, Callable[..., SearchResult]] = {
    "best_of_n": best_of_n,
    "beam": beam_search,
    "mcts": mcts,
    "dfsdt": dfsdt,
}


# ---------------------------------------------------------------- evaluation (outside the search)


def replay(task: Task, actions: list[str], max_turns: int | None = None):
    """Play `actions` in a fresh, unmodified environment: (messages, last StepResult, env)."""
    env = make_env(task.domain, max_turns=max_turns)
    messages = [{"role": "user", "content": env.reset(task)}]
    last = None
    for a in actions:
        if env.done:
            break
        messages.append({"role": "assistant", "content": a})
        last = env.step(a)
        if not last.done:
            messages.append({"role": "user", "content": last.observation})
    return messages, last, env


def evaluate(result: SearchResult, task: Task, max_turns: int | None = None) -> SearchResult:
    """Fill success/score/turns by replaying the chosen actions (the only place the checker runs
    for a non-oracle search)."""
    messages, last, env = replay(task, result.actions, max_turns)
    result.messages = messages
    result.success = bool(last is not None and last.done and last.info.get("success"))
    result.score = float(last.info.get("score", 0.0)) if last is not None and last.done else 0.0
    result.turns = env.turn
    result.invalid_actions = env.invalid_actions
    result.replay_matches = messages == result.search_history
    return result


def run_search(strategy: str, task: Task, proposer: Any, budget: Budget, *, max_turns: int | None = None,
               **kwargs: Any) -> SearchResult:
    """Search one task with the named strategy and evaluate the chosen trajectory."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown search strategy {strategy!r}; available: {sorted(STRATEGIES)}")
    res = STRATEGIES[strategy](task, proposer, budget, max_turns=max_turns, **kwargs)
    return evaluate(res, task, max_turns)


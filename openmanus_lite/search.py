"""Test-time search for agents: best-of-N, beam / Tree-of-Thoughts, MCTS (UCT) and DFSDT.

Strategies plan on environment clones, take candidate turns from a *proposer* (expert, random or a sampling
policy), rank states with a *scorer*, and stop at a budget of tokens or model calls, so they compare at equal
cost. They never see the hidden checker: they play in a `Simulator` that switches it off and passes on only
agent-visible information, and the chosen actions are scored by replaying them in a fresh environment
(`evaluate`). `oracle=True` values terminal states by the true score: pass@k, reported apart.
"""

from __future__ import annotations

import math
import random
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from openmanus_lite.envs import make_env
from openmanus_lite.envs.base import Env
from openmanus_lite.policies import Messages, as_policy, reply_tokens
from openmanus_lite.react import ParseError, parse_action, parse_step
from openmanus_lite.rollout import play_turn, start_episode
from openmanus_lite.schema import Task

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
    """An environment copy for planning: unless `oracle`, scoring is off and `step` returns only what an agent
    sees. `env` is for proposers that read state (expert, random); strategies only call `step`."""

    def __init__(self, env: Env, oracle: bool = False):
        self.env = env
        self.oracle = oracle
        if not oracle:  # instance attributes shadow the methods: Env.step's scoring, and domain code that calls
            # the checker itself (the shop prints "Your score" on its confirmation page, as WebShop does), get 0
            env._safe_score = env._score = _blind_score

    @classmethod
    def start(cls, task: Task, *, oracle: bool = False, max_turns: int | None = None) -> tuple["Simulator", str]:
        env = make_env(task.domain, max_turns=max_turns)
        return cls(env, oracle), env.reset(task)

    def step(self, text: str) -> View:
        r = self.env.step(text)
        keys = VISIBLE_INFO_KEYS + (ORACLE_INFO_KEYS if self.oracle and r.done else ())
        return View(r.observation, r.done, {k: r.info[k] for k in keys if k in r.info})

    def clone(self) -> "Simulator":
        # re-blinds the copy too, in case a domain's clone() rebuilds the env from scratch
        return Simulator(self.env.clone(), self.oracle)


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


class ExpertProposer:
    """The expert's action first; sampled candidates are the expert's action with probability 1 - epsilon,
    else a perturbation: a random exploratory action (never a random `answer(...)`: the expert perturbed,
    not replaced by a guesser), from whose state the expert then recovers."""

    name = "expert"

    def __init__(self, epsilon: float = 0.3):
        self.epsilon = epsilon

    def _expert(self, env: Env, rng: random.Random) -> str:
        try:
            return env.expert_action()
        except Exception:  # a perturbed state the expert has no plan for: propose something else
            return env.random_action(rng)

    def _perturbation(self, env: Env, rng: random.Random) -> str:
        for _ in range(8):
            text = env.random_action(rng)
            parsed = parse_step(text, env.domain)
            if isinstance(parsed, ParseError) or parsed[1].kind != "answer":
                return text
        return self._expert(env, rng)

    def propose(self, histories, envs, k, rng, include_greedy=True):
        def one(env: Env, i: int) -> Candidate:
            expert = i == 0 if include_greedy else rng.random() >= self.epsilon
            text = self._expert(env, rng) if expert else self._perturbation(env, rng)
            return Candidate(text, approx_tokens(text))

        return [[one(env, i) for i in range(k)] for env in envs]


class RandomProposer:
    """k random but well-formed actions (the environment's random baseline)."""

    name = "random"

    def propose(self, histories, envs, k, rng, include_greedy=True):
        return [[Candidate(t, approx_tokens(t)) for t in (env.random_action(rng) for _ in range(k))] for env in envs]


class PolicyProposer:
    """A policy as a proposer: the greedy candidate from `act_batch`, the others from `sample_batch(histories, n)`
    (items str, (text, logprob) or {'text', 'logprob', 'tokens'}) or else repeated `act_batch` calls. Costs come
    from the policy's `generated_tokens` counter (`policies.reply_tokens`), else `approx_tokens`."""

    def __init__(self, policy: Any):
        self.policy = policy
        self.name = getattr(policy, "name", "policy")

    def _counter(self) -> int | None:
        return None if (v := getattr(self.policy, "generated_tokens", None)) is None else int(v)

    def _charge(self, cands: list[Candidate], before: int | None) -> list[Candidate]:
        """Sets what each candidate of one call cost, unless its sample said so itself."""
        texts = [c.text for c in cands]
        costs = [approx_tokens(t) for t in texts] if before is None else reply_tokens(self.policy, texts, before)
        for c, cost in zip(cands, costs):
            c.tokens = c.tokens or cost
        return cands

    def _act(self, histories, envs) -> list[Candidate]:
        before = self._counter()
        return self._charge([Candidate(t, 0) for t in self.policy.act_batch(histories, envs)], before)

    def propose(self, histories, envs, k, rng, include_greedy=True):
        out = [[c] for c in self._act(histories, envs)] if include_greedy else [[] for _ in histories]
        n = k - int(include_greedy)
        if n > 0 and hasattr(self.policy, "sample_batch"):
            before = self._counter()
            samples = self.policy.sample_batch(histories, n)
            if len(samples) != len(histories):
                raise ValueError(f"{self.name}.sample_batch returned {len(samples)} lists for {len(histories)} "
                                 f"conversations; it must return n samples per conversation")
            samples = [[_as_candidate(s) for s in per] for per in samples]
            self._charge([c for per in samples for c in per], before)
            return [got + per for got, per in zip(out, samples)]
        for _ in range(n):
            for got, c in zip(out, self._act(histories, envs)):
                got.append(c)
        return out


def _as_candidate(item: Any) -> Candidate:
    if isinstance(item, str):
        return Candidate(item, 0)
    if isinstance(item, (tuple, list)) and item and isinstance(item[0], str):
        item = {"text": item[0], "logprob": item[1] if len(item) > 1 else None}
    if isinstance(item, dict) and "text" in item:
        lp = item.get("logprob")
        return Candidate(item["text"], int(item.get("tokens") or 0), None if lp is None else float(lp))
    raise TypeError(f"cannot read a sample of type {type(item).__name__}: expected str, (text, logprob) or a dict "
                    f"with 'text'")


def as_proposer(obj: Any) -> Any:
    """'expert', 'random', a proposer, or a policy (what `policies.as_policy` takes). A proposer has a `name` and
    `propose(histories, envs, k, rng, include_greedy=True)`: k paid-for candidate turns per conversation
    (duplicates allowed), the first the policy's own best guess with include_greedy."""
    if isinstance(obj, str):
        named = {"expert": ExpertProposer, "random": RandomProposer}
        if obj not in named:
            raise ValueError(f"unknown proposer {obj!r}: use 'expert', 'random', a policy or a proposer")
        return named[obj]()
    return obj if hasattr(obj, "propose") else PolicyProposer(as_policy(obj))


@dataclass
class Budget:
    """A compute limit: generated tokens, model calls (candidate turns), or both. Optional `unit`: one greedy
    episode's cost in the budget's own measure, by which beam and MCTS size their width."""

    tokens: int | None = None
    calls: int | None = None
    unit: float | None = None

    def __post_init__(self):
        if self.tokens is None and self.calls is None:
            raise ValueError("a Budget needs tokens=... or calls=... (or both)")
        for name, v in (("tokens", self.tokens), ("calls", self.calls)):
            if v is not None and v <= 0:
                raise ValueError(f"Budget.{name} must be positive, got {v}")

    @property
    def limit(self) -> int:
        """The budget in its own measure: tokens if set, else calls."""
        return self.tokens if self.tokens is not None else self.calls

    @property
    def multiple(self) -> float | None:
        """The budget in greedy episodes (None without a unit)."""
        return self.limit / self.unit if self.unit else None


class Meter:
    """What a search has spent against its budget."""

    def __init__(self, budget: Budget):
        self.budget = budget
        self.tokens = self.calls = 0

    def charge(self, cands: list[Candidate]) -> None:
        self.tokens += sum(c.tokens for c in cands)
        self.calls += len(cands)

    @property
    def spent(self) -> int:
        """What was spent in the budget's own measure (see `Budget.limit`)."""
        return self.tokens if self.budget.tokens is not None else self.calls

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


def answer_grounding(answer: str, observations: list[str]) -> float:
    """Fraction of the answer's comma-separated items seen in the observations: read off beats made up."""
    items = [s.strip(" '\"`").lower() for s in re.split(r"[,\n]", answer.strip().strip("[](){}"))]
    if not (items := [s for s in items if s]):
        return 0.0
    seen = "\n".join(observations).lower()
    return sum(1 for s in items if re.search(r"(?<!\w)" + re.escape(s) + r"(?!\w)", seen)) / len(items)


_STOP = frozenset("the and for with that this from into than lower higher less more find need want please your "
                  "you are was were has have what which who whose how many much does did any all".split())
_WORD_RE = re.compile(r"[a-z0-9]+(?:\.[0-9]+)?")


def task_relevance(history: Messages) -> float:
    """Fraction of the task's content words in the last observation (e.g. the page where it clicked Buy Now)."""
    first = history[0]["content"] if history else ""
    m = re.search(r"^Task:\s*(.+)$", first, re.MULTILINE)
    words = {w for w in _WORD_RE.findall((m.group(1) if m else "").lower()) if len(w) >= 3 and w not in _STOP}
    last_obs = next((h["content"] for h in reversed(history[1:]) if h["role"] == "user"), "")
    if not words or not last_obs:
        return 0.0
    return len(words.intersection(_WORD_RE.findall(last_obs.lower()))) / len(words)


def heuristic_value(history: Messages, view: View) -> float:
    """An agent-visible value in [0, 1] (no checker): invalid actions lower it; a turn-limit ending is a dead
    end; an answer scores by how much of it was observed; an episode the environment ended by itself (goal
    reached, purchase made) scores high, higher when the last page it saw matched the task's words."""
    n_actions = sum(1 for m in history if m["role"] == "assistant")
    validity = 1.0 - min(1.0, view.info.get("invalid_actions", 0) / max(1, n_actions))
    if not view.done:
        return 0.3 * validity
    action = view.info.get("action") or ""
    parsed = parse_action(action) if action else None
    if parsed is not None and getattr(parsed, "kind", None) == "answer":
        observed = [m["content"] for m in history[1:] if m["role"] == "user"] + [view.observation]
        return 0.45 + 0.35 * answer_grounding(parsed.arg, observed) + 0.2 * validity
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
    """A name in SCORERS, any callable (history, view) -> float (a reward model), or None: heuristic_value."""
    if isinstance(obj, str) and obj not in SCORERS:
        raise ValueError(f"unknown scorer {obj!r}; available: {sorted(SCORERS)} or any callable "
                         f"(history, view) -> float")
    return heuristic_value if obj is None else SCORERS[obj] if isinstance(obj, str) else obj


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
    deviations: int = 0  # turns off the policy's greedy choice on this path (see `_Search.rank`)
    visits: int = 0
    total: float = 0.0

    @property
    def done(self) -> bool:
        return self.view is not None and self.view.done


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
    """One search on one task: the bookkeeping all strategies share, and the keywords all take (`scorer`,
    `oracle`, `seed`, `max_turns`, `prior_weight` (see `rank`), `stop_at`: stop once a finished trajectory ranks
    this high; None spends the budget)."""

    def __init__(self, task: Task, proposer: Any, budget: Budget, *, scorer: Any = None, oracle: bool = False,
                 seed: int = 0, max_turns: int | None = None, prior_weight: float = 0.05,
                 stop_at: float | None = 1.0):
        self.task = task
        self.prior_weight = 0.0 if oracle else prior_weight
        self.stop_at = stop_at
        self.proposer = as_proposer(proposer)
        self.meter = Meter(budget)
        self.scorer = as_scorer(scorer)
        self.oracle = oracle
        self.max_turns = max_turns
        self.rng = random.Random(f"search:{seed}:{task.id}")
        self.finished: list[Node] = []
        self.nodes = self.episodes = 0
        self.t0 = time.perf_counter()
        self.root = self.fresh()

    def fresh(self) -> Node:
        sim, first = Simulator.start(self.task, oracle=self.oracle, max_turns=self.max_turns)
        return Node(sim, [{"role": "user", "content": first}], [])

    def propose(self, nodes: list[Node], k: int, include_greedy: bool) -> list[list[Candidate]]:
        """Candidates per node, deduplicated; each is marked greedy (the policy's own turn) or not."""
        k = self.meter.cap(k, len(nodes))
        out = []
        for per in self.proposer.propose([n.history for n in nodes], [n.sim.env for n in nodes], k, self.rng,
                                         include_greedy):
            self.meter.charge(per)
            unique: dict[str, Candidate] = {}
            for c in per:  # the first candidate of each text, in order
                unique.setdefault(c.text, c)
            for i, c in enumerate(unique.values()):
                c.greedy = include_greedy and i == 0
            out.append(list(unique.values()))
        return out

    def child(self, node: Node, cand: Candidate, in_place: bool = False) -> Node:
        sim = node.sim if in_place else node.sim.clone()
        history = list(node.history)
        view = play_turn(sim, history, cand.text)
        view.logprob = None if node.logprob is None or cand.logprob is None else node.logprob + cand.logprob
        new = Node(sim, history, node.actions + [cand.text], view, logprob=view.logprob,
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
        """Value minus `prior_weight` per turn off the policy's greedy choice, so a weak scorer does not trade
        a greedy trajectory for an equally scored lucky guess (weight 0 under oracle)."""
        return node.value - self.prior_weight * node.deviations

    def best_finished(self) -> Node | None:
        return max(self.finished, key=self.rank, default=None)  # ties go to the earliest found

    def reached(self) -> bool:
        best = self.best_finished()
        return self.stop_at is not None and best is not None and self.rank(best) >= self.stop_at

    def play_out(self, node: Node, past_budget: bool = True) -> Node:
        """Play the proposer's greedy turns from `node` on a copy to the episode's end, even past the budget
        (every strategy returns a finished episode; the overspend is reported) unless not `past_budget` (MCTS)."""
        start = node
        while not node.done and (past_budget or not self.meter.exhausted):
            cands = self.propose([node], 1, include_greedy=True)[0]
            if not cands:
                break
            node = self.child(node, cands[0], in_place=node is not start)
        return node

    def result(self, strategy: str, fallback: Node | None = None, chosen: Node | None = None) -> SearchResult:
        chosen = chosen or self.best_finished() or self.play_out(fallback or self.root)
        return SearchResult(
            strategy=strategy, task_id=self.task.id, actions=list(chosen.actions), finished=chosen.done,
            value=chosen.value, tokens=self.meter.tokens, calls=self.meter.calls, episodes=self.episodes,
            nodes=self.nodes, oracle=self.oracle, budget=asdict(self.meter.budget),
            wall_s=time.perf_counter() - self.t0, search_history=chosen.history,
        )


# ---------------------------------------------------------------- strategies (`options`: see _Search)
def best_of_n(task: Task, proposer: Any, budget: Budget, *, n: int | None = None, parallel: int = 8,
              **options: Any) -> SearchResult:
    """Sample whole episodes (the first greedy, the rest sampled, `parallel` at a time in
    lock step) until `n` or the budget; keep the one the scorer values most."""
    s = _Search(task, proposer, budget, **options)
    first = s.play_out(s.root)
    first_cost = max(1, s.meter.spent)
    while not s.meter.exhausted and not s.reached() and (n is None or s.episodes < n):
        width = max(1, min(parallel, math.ceil((budget.limit - s.meter.spent) / first_cost),
                           (n - s.episodes) if n else parallel))
        live = [s.fresh() for _ in range(width)]
        while live and not s.meter.exhausted:
            cands = s.propose(live, 1, include_greedy=False)
            stepped = [s.child(node, per[0], in_place=True) for node, per in zip(live, cands) if per]
            live = [node for node in stepped if not node.done]
        if live:  # the budget ran out mid-wave: those episodes are abandoned
            break
    return s.result("best_of_n", fallback=first)


def beam_search(task: Task, proposer: Any, budget: Budget, *, beam_width: int | None = None, k: int | None = None,
                **options: Any) -> SearchResult:
    """Tree-of-Thoughts beam search: each turn, k candidates per beam (greedy first), each stepped in a clone;
    the `beam_width` best unfinished states go on, finished ones are set aside; returns the best finished.
    Unset `beam_width`/`k` are sized so beam_width x k ~ the budget in greedy episodes (1x is greedy decoding),
    else 2 and 3."""
    m = budget.multiple
    if beam_width is None:
        beam_width = 2 if m is None else max(1, int(math.sqrt(m)))
    if k is None:
        k = 3 if m is None else max(1, int(m // beam_width))
    s = _Search(task, proposer, budget, **options)
    beams = [s.root]
    while beams and not s.meter.exhausted:
        children = [s.child(b, c) for b, per in zip(beams, s.propose(beams, k, include_greedy=True)) for c in per]
        beams = sorted((c for c in children if not c.done), key=s.rank, reverse=True)[:beam_width]
        if s.reached():
            break
    return s.result("beam", fallback=beams[0] if beams else s.root)


def mcts(task: Task, proposer: Any, budget: Budget, *, k: int | None = None, c_uct: float = 1.0,
         **options: Any) -> SearchResult:
    """UCT over candidate turns proposed by the policy: select by UCB1, expand k candidates (greedy first),
    value a new leaf by rolling the policy out to the end and scoring it, back the value up. Returns the
    best finished trajectory seen. An unset `k` is min(3, the budget in greedy episodes), else 3."""
    if k is None:
        k = 3 if budget.multiple is None else max(1, min(3, int(budget.multiple)))
    s = _Search(task, proposer, budget, **options)
    idle = 0
    while not s.meter.exhausted and not s.reached() and idle < 50:
        spent_before = s.meter.calls
        node, path = s.root, [s.root]
        while not node.done:  # descend through visited nodes; stop at the first unvisited one
            if node.children is None:
                node.children = [s.child(node, c) for c in s.propose([node], k, include_greedy=True)[0]]
            if not node.children:
                break
            unvisited = [c for c in node.children if c.visits == 0]
            log_n = math.log(max(1, node.visits))
            node = unvisited[0] if unvisited else max(
                node.children, key=lambda c: c.total / c.visits + c_uct * math.sqrt(log_n / c.visits))
            path.append(node)
            if node.visits == 0:
                break
        value = s.rank(node if node.done else s.play_out(node, past_budget=False))
        for n in path:
            n.visits += 1
            n.total += value
        idle = idle + 1 if s.meter.calls == spent_before else 0
    return s.result("mcts", fallback=max(s.root.children or [s.root], key=lambda c: c.visits))


def dfsdt(task: Task, proposer: Any, budget: Budget, *, max_children: int = 3, accept: float = 0.75,
          **options: Any) -> SearchResult:
    """Depth-first search with backtracking (ToolLLM's DFSDT): follow the greedy turn; after an invalid action,
    an error observation or a dead end (a finished episode valued below `accept`) try a sampled sibling, up to
    `max_children` per state. Returns the first acceptable finished trajectory (the heuristic's 0.75 accepts an
    answer partly read off the observations, or an episode the environment ended), else the best finished."""
    s = _Search(task, proposer, budget, **options)
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
            failed = not child.view.info.get("valid", False) or _ERROR_RE.search(child.view.observation or "")
            if child.done or failed:
                if child.done and s.rank(child) >= accept:
                    return child
                continue
            if len(child.actions) > len(deepest[0].actions):
                deepest[0] = child
            if (found := visit(child)) is not None:
                return found
        return None

    found = visit(s.root)  # before reading deepest[0], which the visit updates
    return s.result("dfsdt", fallback=deepest[0], chosen=found)


STRATEGIES: dict[str, Callable[..., SearchResult]] = {
    "best_of_n": best_of_n, "beam": beam_search, "mcts": mcts, "dfsdt": dfsdt}


# ---------------------------------------------------------------- evaluation (outside the search)
def replay(task: Task, actions: list[str], max_turns: int | None = None):
    """Play `actions` in a fresh, unmodified environment: (messages, last StepResult, env)."""
    env, messages = start_episode(task, max_turns)
    last = None
    for a in actions:
        if env.done:
            break
        last = play_turn(env, messages, a)
    return messages, last, env


def evaluate(result: SearchResult, task: Task, max_turns: int | None = None) -> SearchResult:
    """Fill success/score/turns by replaying the chosen actions (the only place the checker runs
    for a non-oracle search)."""
    messages, last, env = replay(task, result.actions, max_turns)
    ended = last is not None and last.done
    result.messages = messages
    result.success = bool(ended and last.info.get("success"))
    result.score = float(last.info.get("score", 0.0)) if ended else 0.0
    result.turns = env.turn
    result.invalid_actions = env.invalid_actions
    result.replay_matches = messages == result.search_history
    return result


def run_search(strategy: str, task: Task, proposer: Any, budget: Budget, *, max_turns: int | None = None,
               **kwargs: Any) -> SearchResult:
    """Search one task with the named strategy and evaluate the chosen trajectory."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown search strategy {strategy!r}; available: {sorted(STRATEGIES)}")
    return evaluate(STRATEGIES[strategy](task, proposer, budget, max_turns=max_turns, **kwargs), task, max_turns)

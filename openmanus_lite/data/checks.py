"""Layered validation of unified trajectories; every failure is a reason code (`REASONS`).

The layers run in order (structure, grammar, consistency, length) and the first failure decides the reason.
`Deduper` compares the task part (from the user turn before the first training turn on, case and whitespace
aside) as well as the whole conversation, so the same episode under another system prompt is caught.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from hashlib import blake2b
from typing import Any

from openmanus_lite.data.sources.normalize import NEW_TASK
from openmanus_lite.react import DOMAIN_ACTION_KINDS, Action, ParsedTurn, parse_action, parse_turn
from openmanus_lite.schema import DOMAINS, EXTRA_LABELS, ROLES, Trajectory

REASONS: dict[str, str] = {
    "input.invalid_json": "the line is not valid JSON (truncated or corrupted)",
    "input.not_object": "the line is JSON but not an object",
    "input.unreadable_file": "a parquet file that cannot be read (corrupt or cut short); one row for the file",
    "schema.missing_field": "a field the source's schema requires is missing",
    "schema.bad_type": "a field has the wrong type",
    "schema.empty": "the conversation is empty",
    "schema.unknown_role": "a turn has a role the source's schema does not define",
    "schema.bad_field": "a field has an invalid value",
    "filter.label_excluded": "the domain label was excluded by the user",
    "structure.empty": "no messages",
    "structure.bad_role": "a role other than system/user/assistant",
    "structure.misplaced_system": "a system turn that is not the first turn",
    "structure.starts_with_assistant": "the conversation starts with an assistant turn",
    "structure.not_alternating": "two user or two assistant turns in a row",
    "structure.empty_turn": "an empty assistant turn or an empty first user turn",
    "structure.ends_with_user": "the last turn is not an assistant turn",
    "structure.train_on_non_assistant": "a system or user turn is marked to train",
    "structure.nothing_to_train": "no assistant turn is marked to train",
    "grammar.free_text": "a training assistant turn holds no action (plain chat)",
    "grammar.unparsed": "a training assistant turn has an action that does not parse",
    "grammar.not_unified": "a training assistant turn is not in the Think:/Act: form",
    "grammar.wrong_action_kind": "an action of a kind the domain does not allow",
    "consistency.missing_final_answer": "an os/db/kg episode that does not end with answer(...)",
    "consistency.action_after_answer": "a training turn after the task's answer",
    "consistency.kg_answer_not_variable": "a KG answer that is not a variable (#n)",
    "length.too_many_turns": "more turns than max_turns",
    "length.too_long": "more characters or tokens than the limit",
    "duplicate.exact": "the same conversation was already kept",
    "duplicate.normalized": "the same task part (case and whitespace aside) was already kept",
    "mix.source_weight": "left out by a source weight below 1",
    "mix.domain_weight": "left out by a domain weight below 1",
    "mix.source_cap": "left out by a per-source cap",
    "mix.domain_cap": "left out by a per-domain cap",
}

ANSWER_DOMAINS: tuple[str, ...] = ("os", "db", "kg")
_KG_VARIABLE = re.compile(r"^#\d+$")
_WS = b" \t\n\r\x0b\x0c"
# `bytes.lower` as a translate table, so lowercasing and dropping whitespace take one pass
_LOWER = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ", b"abcdefghijklmnopqrstuvwxyz")


@dataclass(frozen=True)
class Issue:
    """Why a trajectory was rejected: a `REASONS` code and a human detail."""

    reason: str
    detail: str


@dataclass
class CheckConfig:
    allow_free_text: bool = False
    max_turns: int | None = None
    max_chars: int | None = None
    max_tokens: int | None = None
    tokenizer: Any = None


def approx_tokens(text: str) -> int:
    """≈ tokens of English text for a BPE tokenizer (4 characters a token); no tokenizer needed."""
    return (len(text) + 3) // 4


def token_counter(tokenizer: Any = None) -> Callable[[str], int]:
    """A function text -> token count: the tokenizer's when given, else `approx_tokens`."""
    if tokenizer is None:
        return approx_tokens
    return lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])


# --------------------------------------------------------------------------- layers


def check_structure(traj: Trajectory) -> Issue | None:
    msgs = traj.messages
    if not msgs:
        return Issue("structure.empty", "no messages")
    expect, first_user_seen, any_train = "user", False, False
    for i, m in enumerate(msgs):
        role = m.role
        if role not in ROLES:
            return Issue("structure.bad_role", f"messages[{i}].role is {role!r}")
        if m.train and role != "assistant":
            return Issue("structure.train_on_non_assistant", f"messages[{i}] is a {role} turn marked train")
        any_train = any_train or m.train
        if role == "system":
            if i != 0:
                return Issue("structure.misplaced_system", f"messages[{i}] is a system turn")
            continue
        if role != expect:
            if i == 0 or (i == 1 and msgs[0].role == "system"):
                return Issue("structure.starts_with_assistant", f"messages[{i}] is an assistant turn")
            return Issue("structure.not_alternating", f"messages[{i}] is a second {role} turn in a row")
        if (role == "assistant" or not first_user_seen) and not m.content.strip():
            which = "assistant" if role == "assistant" else "first user"
            return Issue("structure.empty_turn", f"messages[{i}] is an empty {which} turn")
        first_user_seen = first_user_seen or role == "user"
        expect = "assistant" if role == "user" else "user"
    if msgs[-1].role != "assistant":
        return Issue("structure.ends_with_user", f"the last turn (messages[{len(msgs) - 1}]) is a {msgs[-1].role} turn")
    return None if any_train else Issue("structure.nothing_to_train", "no assistant turn has train=true")


def parsed_actions(traj: Trajectory) -> list[Action | str | None]:
    """Each turn's action (None: not an assistant turn or free text; str: does not parse), reusing what
    conversion parsed (`normalize.attach_actions`) while a turn's text is the very same string."""
    cache = traj.__dict__.get("_actions") or {}
    out: list[Action | str | None] = []
    for i, m in enumerate(traj.messages):
        hit = cache.get(i)
        if m.role != "assistant":
            out.append(None)
        elif hit is not None and hit[0] is m.content:
            out.append(hit[1])
        elif m.content.startswith("Think:") and isinstance(turn := parse_turn(m.content), ParsedTurn):
            act = parse_action(turn.action)
            out.append(act if isinstance(act, Action) else turn.action)
        else:
            out.append(None)
    return out


def check_grammar(traj: Trajectory, allow_free_text: bool = False,
                  actions: list[Action | str | None] | None = None) -> Issue | None:
    domain = traj.domain
    kinds = DOMAIN_ACTION_KINDS.get(domain)
    free = traj.meta.get("free_text_turns") or ()
    actions = parsed_actions(traj) if actions is None else actions
    for i, m in enumerate(traj.messages):
        if not m.train or m.role != "assistant":
            continue
        content = m.content
        if not (content.startswith("Think:") and "\nAct: " in content):
            if i not in free and isinstance(parse_turn(content), ParsedTurn):
                return Issue("grammar.not_unified", f"messages[{i}] is not in the Think:/Act: form: {content[:80]!r}")
            if allow_free_text:
                continue
            return Issue("grammar.free_text", f"messages[{i}] holds no action: {content[:80]!r}")
        act = actions[i]
        if act is None:
            return Issue("grammar.unparsed", f"messages[{i}]: no action after 'Act:'")
        if kinds is None:
            continue  # extra labels (tool, game, ...): any non-empty action of the source's own action space
        if act.__class__ is str:
            return Issue("grammar.unparsed", f"messages[{i}]: action {act[:80]!r} does not parse in domain {domain}")
        if act.kind not in kinds:
            return Issue("grammar.wrong_action_kind",
                         f"messages[{i}]: a {act.kind} action in domain {domain} (allowed: {', '.join(kinds)})")
    return None


def check_consistency(traj: Trajectory, actions: list[Action | str | None] | None = None) -> Issue | None:
    actions = parsed_actions(traj) if actions is None else actions
    answered, last = False, None
    for i, m in enumerate(traj.messages):
        if m.role == "user" and answered and NEW_TASK.match(m.content):
            answered = False
        if m.role != "assistant":
            continue
        if answered and m.train:
            return Issue("consistency.action_after_answer", f"messages[{i}] trains after the task was answered")
        last = actions[i]
        answered = answered or (last.__class__ is Action and last.kind == "answer")
    domain = traj.domain
    if domain in ANSWER_DOMAINS and not traj.meta.get("answer_optional"):
        if not (isinstance(last, Action) and last.kind == "answer"):
            return Issue("consistency.missing_final_answer", f"the last {domain} turn is not answer(...)")
        if domain == "kg" and not _KG_VARIABLE.match(last.arg.strip()):
            return Issue("consistency.kg_answer_not_variable", f"KG answer {last.arg[:40]!r} is not #n")
    return None


def check_length(traj: Trajectory, cfg: CheckConfig, count: Callable[[str], int] | None = None) -> Issue | None:
    msgs = traj.messages
    if cfg.max_turns is not None and len(msgs) > cfg.max_turns:
        return Issue("length.too_many_turns", f"{len(msgs)} turns > max_turns={cfg.max_turns}")
    count = count or token_counter(cfg.tokenizer)
    for name, unit, size in (("max_chars", "characters", len), ("max_tokens", "tokens", count)):
        limit = getattr(cfg, name)
        if limit is not None and (total := sum(map(size, [m.content for m in msgs]))) > limit:
            return Issue("length.too_long", f"{total} {unit} > {name}={limit}")
    return None


class Validator:
    """All layers with one config (the token counter built once)."""

    def __init__(self, cfg: CheckConfig | None = None):
        self.cfg = cfg or CheckConfig()
        self._count = token_counter(self.cfg.tokenizer)
        self._length = any(x is not None for x in (self.cfg.max_turns, self.cfg.max_chars, self.cfg.max_tokens))

    def validate(self, traj: Trajectory) -> Issue | None:
        if traj.domain not in DOMAINS + EXTRA_LABELS:
            return Issue("schema.bad_field", f"domain {traj.domain!r} is not a known label")
        if (issue := check_structure(traj)) is not None:
            return issue
        actions = parsed_actions(traj)
        return (
            check_grammar(traj, self.cfg.allow_free_text, actions)
            or check_consistency(traj, actions)
            or (check_length(traj, self.cfg, self._count) if self._length else None)
        )


def validate(traj: Trajectory, cfg: CheckConfig | None = None) -> Issue | None:
    return Validator(cfg).validate(traj)


# --------------------------------------------------------------------------- duplicates


def _task_start(traj: Trajectory) -> int:
    return next((max(i - 1, 0) for i, m in enumerate(traj.messages) if m.train), 0)


class Deduper:
    """Remembers what was kept; the first one in input order wins. Keys are BLAKE2b digests (C speed, the
    same in every process, so worker processes can compute them)."""

    def __init__(self, mode: str = "normalized"):
        if mode not in ("none", "exact", "normalized"):
            raise ValueError(f"dedup mode {mode!r}; expected 'none', 'exact' or 'normalized'")
        self.mode = mode
        self._exact: dict[bytes, str] = {}
        self._norm: dict[bytes, str] = {}

    def keys(self, traj: Trajectory) -> tuple[bytes | None, bytes | None]:
        """(exact key, normalised key) under this mode."""
        if self.mode == "none":
            return None, None
        # One hash over the joined texts (role NUL content SOH ...); the SOH separators are neither case nor
        # whitespace, so normalising the joined bytes at once normalises each turn as on its own.
        msgs = traj.messages
        exact = blake2b("".join([f"{m.role}\x00{m.content}\x01" for m in msgs]).encode("utf-8", "surrogatepass"),
                        digest_size=16).digest()
        if self.mode != "normalized":
            return exact, None
        tail = "".join([f"{m.content}\x01" for m in msgs[_task_start(traj):]])
        return exact, blake2b(tail.encode("utf-8", "surrogatepass").translate(_LOWER, _WS), digest_size=16).digest()

    def check_keys(self, keys: tuple[bytes | None, bytes | None], tid: str) -> Issue | None:
        """Decide on precomputed keys (see `keys`); remember them when not a duplicate."""
        exact, norm = keys
        if exact is None:
            return None
        if (first := self._exact.get(exact)) is not None:
            return Issue("duplicate.exact", f"same conversation as {first}")
        if norm is not None:
            if (first := self._norm.get(norm)) is not None:
                return Issue("duplicate.normalized", f"same task part as {first}")
            self._norm[norm] = tid
        self._exact[exact] = tid
        return None

    def check(self, traj: Trajectory) -> Issue | None:
        return self.check_keys(self.keys(traj), traj.id)

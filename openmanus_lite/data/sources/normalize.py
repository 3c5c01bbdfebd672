"""The conversion core every source shares: roles, train flags, observations, ReAct turns.

Where a source has no per-turn `loss` flags they are inferred the way the sources with flags set them (tests
check the rule reproduces the real flags): an acknowledgement holding no action does not train, nor does any
assistant turn before the last "new task" marker, a few-shot demonstration. Assistant turns become
`Think: ...\\nAct: ...` with only the action's framing changed; observations lose terminal noise only.
"""

from __future__ import annotations

import re
from typing import Any, NoReturn

from openmanus_lite.data.sources.base import RawRow, RowRejected
from openmanus_lite.react import (
    DOMAIN_ACTION_KINDS,
    Action,
    ParsedTurn,
    format_action,
    format_turn,
    parse_action,
    parse_turn,
)
from openmanus_lite.schema import Trajectory, Turn

# in the unified format the environment speaks as the user
ROLE_MAP: dict[str, str] = {
    **dict.fromkeys(("human", "user", "function", "tool", "environment", "observation"), "user"),
    **dict.fromkeys(("gpt", "assistant", "bot", "model"), "assistant"), "system": "system",
}

# A user turn that starts a new task: assistant turns before the last one are demonstrations.
NEW_TASK = re.compile(
    r"\s*(Now, I will start a new problem|A new question\s*:|Now new trial starts|Here is (?:a|the) new task)",
    re.IGNORECASE,
)
# An assistant turn that only acknowledges the instructions.
ACKNOWLEDGEMENT = re.compile(
    r"\s*(ok(ay)?\b|sure\b|understood\b|got it\b|i understand\b|i've understood\b|i have understood\b|"
    r"i('ll| will) follow\b|i am ready\b|i'm ready\b|ready\b)",
    re.IGNORECASE,
)
_MAX_ACK_CHARS = 200

# ANSI: CSI sequences (colours, erase line), OSC sequences (window title, ended by BEL or ST),
# and the remaining two-character escapes.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")
# A shell prompt echoed by the terminal: user@host:path# or $ at the start of a line.
_PROMPT = re.compile(r"^[\w.-]+@[\w.-]+:[^\n#$]*[#$][ \t]?", re.MULTILINE)


def clean_observation(text: str, domain: str) -> str:
    """Remove terminal noise from an observation without changing what it says."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    if domain == "os" and "@" in text:
        cleaned = _PROMPT.sub("", text)
        if cleaned != text:
            text = cleaned.rstrip()
    return text


_SQL_HEAD = "sql\n```sql\n"


def canonical_action(action: str, domain: str, style: str = "") -> tuple[str, Action | str, str | None]:
    """The action in canonical form, its parse, and the name of a rewrite if one was needed. Only the framing
    changes, never the command, query or arguments; the one rewrite is AgentBench OS's `finish` and InterCode's
    `submit`, which the unified grammar spells `answer(done)` in os and db. For styles `parse_turn` built with
    react's own helpers, `parse_action` is skipped (a third of the time on tool use)."""
    if style == "final_answer" and action.startswith("answer(") and action.endswith(")"):
        return action, Action("answer", action[7:-1]), None
    if style == "db_operation" and action.startswith(_SQL_HEAD) and action.endswith("\n```") \
            and len(action) > len(_SQL_HEAD) + 4:
        return action, Action("sql", action[len(_SQL_HEAD):-4]), None
    if style == "tool_input" and domain not in DOMAIN_ACTION_KINDS:
        return action, action, None  # outside the six domains only the text matters
    parsed = parse_action(action)
    if not isinstance(parsed, Action):
        return action.strip(), action.strip(), None
    if parsed.kind == "command" and domain in ("os", "db") and parsed.arg.strip().lower() in ("finish", "submit"):
        done = Action("answer", "done")
        return format_action(done), done, "finish_to_answer"
    return format_action(parsed), parsed, None


ParsedActions = dict[int, tuple[str, "Action | str | None"]]  # turn index -> (its text, its parsed action)


def attach_actions(traj: Trajectory, actions: ParsedActions) -> Trajectory:
    """Remember the parsed actions (not exported) so validation does not parse every turn again; the checks use
    an entry only while the turn's text is the very same string object."""
    traj.__dict__["_actions"] = actions
    return traj


def conversation_trajectory(row: RawRow, source: str, rid: str, domain: str, *, tid: str | None = None,
                            turns_fields: tuple[str, ...] = ("conversations", "messages"),
                            final_text_as_answer: bool = False, **extra_meta: Any) -> Trajectory:
    """The Trajectory of a row that holds a conversation; the id is `tid` or `<source>/<rid>`.
    `final_text_as_answer`: a final assistant turn with no action is the reply, written as `answer(<text>)`."""
    field, turns = pick_turns(row, *turns_fields)
    role_key, content_key, loss_key = turn_keys(turns)
    if turns is None:
        raise RowRejected(row, field, "missing; expected a list of turns", "schema.missing_field")
    if not isinstance(turns, list):
        raise RowRejected(row, field, f"expected a list of turns, got {type(turns).__name__}", "schema.bad_type")
    if not turns:
        raise RowRejected(row, field, "is empty", "schema.empty")
    # comprehensions for the common case (fewer bytecodes than a checking loop); `_reject_turns` names a bad turn
    try:
        roles: list[str] = [ROLE_MAP[t[role_key]] for t in turns]
        texts: list[str] = [t[content_key] for t in turns]
    except (KeyError, TypeError):  # a turn that is not an object, a missing key, an unknown or unhashable role
        _reject_turns(row, turns, field, role_key, content_key)
    if {x.__class__ for x in texts} != {str}:
        _reject_turns(row, turns, field, role_key, content_key)
    losses: list[Any] = [t.get(loss_key) for t in turns]
    has_flags = any(loss is not None and role == "assistant" for role, loss in zip(roles, losses))
    demo_end = -1 if has_flags else max(
        (i for i, role in enumerate(roles) if role == "user" and NEW_TASK.match(texts[i])), default=-1)

    out: list[Turn] = []
    actions: ParsedActions = {}
    free_text: list[int] = []
    rewrites: dict[str, int] = {}
    demos, last, is_os = 0, len(roles) - 1, domain == "os"
    _parse_turn, _canonical, _format_turn, _Turn = parse_turn, canonical_action, format_turn, Turn
    for i, role in enumerate(roles):
        text = texts[i]
        if role != "assistant":
            if role == "user" and ("\r" in text or "\x1b" in text or (is_os and "@" in text)):
                text = clean_observation(text, domain)
            out.append(_Turn(role, text, False))
            continue
        parsed = _parse_turn(text)
        action: Action | str | None = None
        rewrite: str | None = None
        if parsed.__class__ is ParsedTurn:
            act_text, action, rewrite = _canonical(parsed.action, domain, parsed.style)
            content = _format_turn(parsed.thought, act_text)
        elif final_text_as_answer and i == last and text.strip():
            action, rewrite = Action("answer", text.strip()), "final_text_as_answer"
            content = format_turn("", format_action(action))
        else:
            content = text
        if rewrite:
            rewrites[rewrite] = rewrites.get(rewrite, 0) + 1
        if has_flags and losses[i] is not None:
            train = bool(losses[i])
        elif i < demo_end:
            train = False
            demos += 1
        else:
            train = not (action is None and len(text) <= _MAX_ACK_CHARS and ACKNOWLEDGEMENT.match(text))
        if train and action is None:
            free_text.append(i)
        actions[i] = (content, action)
        out.append(_Turn("assistant", content, train))

    optional = {"demo_turns": demos, "free_text_turns": free_text, "rewrites": rewrites}
    meta = {"train_flags": "source" if has_flags else "inferred", **{k: v for k, v in optional.items() if v},
            "source_id": rid, "split": row.split, "file": row.file, "line": row.line, **extra_meta}
    return attach_actions(Trajectory(tid or f"{source}/{rid}", source, domain, out, meta), actions)


def _reject_turns(row: RawRow, turns: list, field: str, role_key: str, content_key: str) -> NoReturn:
    """Raise the RowRejected that names the first bad turn."""
    for i, t in enumerate(turns):
        where = f"{field}[{i}]"
        if not isinstance(t, dict):
            raise RowRejected(row, where, f"expected an object, got {type(t).__name__}", "schema.bad_type")
        role, text = t.get(role_key), t.get(content_key)
        if role is None:
            raise RowRejected(row, f"{where}.{role_key}", "missing", "schema.missing_field")
        if not isinstance(role, str) or role not in ROLE_MAP:
            raise RowRejected(row, f"{where}.{role_key}", f"unknown role {role!r}; expected one of {sorted(ROLE_MAP)}",
                              "schema.unknown_role")
        if text is None:
            raise RowRejected(row, f"{where}.{content_key}", "missing", "schema.missing_field")
        if text.__class__ is not str:
            raise RowRejected(row, f"{where}.{content_key}", f"expected a string, got {type(text).__name__}",
                              "schema.bad_type")
    raise AssertionError("_reject_turns called on valid turns")  # pragma: no cover - callers check first


def require_str(row: RawRow, *keys: str) -> str:
    """The first of `keys` the row has (one field's names in copies of the dataset) as a non-empty string; a number
    becomes its text."""
    key = next((k for k in keys if k in row.data), keys[0])
    value = row.data.get(key)
    if value is None:
        raise RowRejected(row, key, "missing", "schema.missing_field")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise RowRejected(row, key, f"expected a non-empty string, got {value!r:.60}", "schema.bad_type")
    return value


def pick_turns(row: RawRow, *candidates: str) -> tuple[str, Any]:
    """The first turns field present and its value."""
    for key in candidates:
        if key in row.data:
            return key, row.data[key]
    raise RowRejected(row, candidates[0], f"missing; expected one of {list(candidates)} "
                      f"(keys present: {sorted(row.data)[:8]})", "schema.missing_field")


def turn_keys(turns: Any) -> tuple[str, str, str]:
    """(role key, content key, loss key) of a turn list: ShareGPT `from`/`value` or chat `role`/`content`."""
    first = turns[0] if isinstance(turns, list) and turns else None
    if isinstance(first, dict) and ("from" in first or "value" in first):
        return "from", "value", "loss"
    return "role", "content", "loss"

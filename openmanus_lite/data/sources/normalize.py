"""The conversion core every source shares: roles, train flags, observations, ReAct turns.

* roles: `human`/`user` and the observation roles (`function`, `tool`, `environment`) become `user`,
  `gpt`/`assistant` become `assistant`, `system` stays `system`;
* train flags: where the source has per-turn `loss` flags, an assistant turn trains exactly when its
  flag is true. Where it has none (re-keyed copies, AgentBank, OpenManus-RL), they are inferred the
  way the sources with flags set them: an acknowledgement that holds no action ("Ok.", "OK. I'll
  follow your instructions ...") does not train, nor does any assistant turn before the last "new
  task" marker in a user turn ("Now, I will start a new problem", "A new question:"), which is a
  few-shot demonstration. Tests check that this rule reproduces the real `loss` flags;
* assistant turns are rewritten as `Think: ...\\nAct: ...` with the action in its canonical form, the
  action text itself (SQL, bash, click target, KG call, tool JSON) unchanged. A turn with no action
  keeps its text; where it trains, its index is listed in `meta["free_text_turns"]` for the checks;
* observations (user turns): `\\r\\n` and `\\r` become `\\n`, ANSI escape sequences go, and in the OS
  domain so do the shell prompts (`root@abc:/# `) the terminal echoed; nothing else changes.
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
    """The action in its canonical unified form, its parse, and the name of a rewrite if one was needed.

    Only the framing changes (`bash` + fenced block, `name[arg]`, `name(args)`), never the command,
    query or arguments. One documented rewrite: AgentBench OS ends operation tasks with `Act: finish`
    and InterCode (AgentBank's bash/SQL tasks) with `submit`; in the os and db domains the unified
    grammar spells that `answer(done)`. An action `parse_action` does not know (a source's own action
    space) is kept as it is. For the `ParsedTurn.style`s whose action `parse_turn` already built with
    react's own helpers, the parse is known and `parse_action` is skipped (a third of the conversion
    time on tool-use data).
    """
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


ParsedActions = dict[int, tuple[str, "Action | str | None"]]
"""Turn index -> (the turn's text, its parsed action): what conversion learnt, for the checks."""


def attach_actions(traj: Trajectory, actions: ParsedActions) -> Trajectory:
    """Remember the parsed actions so validation does not parse every turn again. The checks use an
    entry only while the turn's text is the very same string object, so an edited trajectory is parsed
    afresh. Not part of the record (not exported)."""
    traj.__dict__["_actions"] = actions
    return traj


def conversation_trajectory(row: RawRow, source: str, rid: str, domain: str, *, tid: str | None = None,
                            turns_fields: tuple[str, ...] = ("conversations", "messages"),
                            final_text_as_answer: bool = False, **extra_meta: Any) -> Trajectory:
    """The Trajectory of a row that holds a conversation, its turns converted (see the module docstring).

    Meta holds what conversion found (train flags' origin, demo turns, free-text turns, rewrites), the
    provenance (`source_id`, split, file, line) and `extra_meta`; the id is `tid` or `<source>/<rid>`.
    `final_text_as_answer`: a final assistant turn with no action is the reply to the user, written as
    `answer(<text>)` (tool-use sources whose last turn is plain text).
    """
    field, turns = pick_turns(row, *turns_fields)
    role_key, content_key, loss_key = turn_keys(turns)
    if turns is None:
        raise RowRejected(row, field, "missing; expected a list of turns", "schema.missing_field")
    if not isinstance(turns, list):
        raise RowRejected(row, field, f"expected a list of turns, got {type(turns).__name__}", "schema.bad_type")
    if not turns:
        raise RowRejected(row, field, "is empty", "schema.empty")
    # The common case in comprehensions (fewer bytecodes a turn than one checking loop);
    # anything unexpected goes to `_reject_turns`, which names the first bad turn.
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

    meta: dict[str, Any] = {"train_flags": "source" if has_flags else "inferred"}
    for key, value in (("demo_turns", demos), ("free_text_turns", free_text), ("rewrites", rewrites)):
        if value:
            meta[key] = value
    meta.update(source_id=rid, split=row.split, file=row.file, line=row.line, **extra_meta)
    return attach_actions(Trajectory(tid or f"{source}/{rid}", source, domain, out, meta), actions)


def _reject_turns(row: RawRow, turns: list, field: str, role_key: str, content_key: str) -> NoReturn:
    """Raise the RowRejected that names the first turn that is not an object with a known role and a text."""
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


def require_str(row: RawRow, key: str) -> str:
    """`row.data[key]` as a non-empty string (a number becomes its text), or a RowRejected naming the field."""
    value = row.data.get(key)
    if value is None:
        raise RowRejected(row, key, "missing", "schema.missing_field")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise RowRejected(row, key, f"expected a non-empty string, got {value!r:.60}", "schema.bad_type")
    return value


def pick_turns(row: RawRow, *candidates: str) -> tuple[str, Any]:
    """The first turns field present (`conversations`, `conversation`, `messages`) and its value."""
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

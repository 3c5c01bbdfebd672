"""The conversion core every source shares: roles, train flags, observations, ReAct turns.

`convert_turns` takes a source's list of turns (whatever its key names) and returns the
unified `Turn`s:

* roles: `human`/`user` (and observation roles such as `function`, `tool`, `environment`)
  become `user`, `gpt`/`assistant` become `assistant`, `system` stays `system`;
* train flags: where the source has per-turn `loss` flags, an assistant turn trains
  exactly when its flag is true. Where it has none (re-keyed copies, AgentBank,
  OpenManus-RL), the flags are inferred, the same way the sources with flags set them:
  an acknowledgement turn that holds no action ("Ok.", "OK. I'll follow your
  instructions ...") does not train, and every assistant turn before the last
  "new task" marker in a user turn ("Now, I will start a new problem", "A new question:",
  "Now new trial starts") is a few-shot demonstration and does not train; all other
  assistant turns train. Tests check that this rule reproduces the real `loss` flags;
* assistant turns: parsed with `react.parse_turn` and rewritten as `Think: ...\\nAct: ...`
  with the action in its canonical form (`react.parse_action` + `format_action`), so
  the action text itself (SQL, bash, click target, KG call, tool JSON) is unchanged.
  A turn with no action (acknowledgements, free chat) keeps its text; where it trains,
  its index is listed in `meta["free_text_turns"]` for the checks to judge;
* observations (user turns): `\\r\\n` and stray `\\r` become `\\n`, ANSI escape sequences
  are removed, and for the OS domain also the shell prompts (`root@abc:/# `) that the
  terminal echoed; nothing else changes.
"""

from __future__ import annotations

import re
from typing import Any, NoReturn

from openmanus_lite.data.sources.base import RawRow, RowRejected, field_error
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

ROLE_MAP: dict[str, str] = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "bot": "assistant",
    "model": "assistant",
    "system": "system",
    # observation roles some datasets use; in the unified format the environment speaks as the user
    "function": "user",
    "tool": "user",
    "environment": "user",
    "observation": "user",
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


def is_acknowledgement(text: str) -> bool:
    """A short turn that only acknowledges instructions ("Ok.", "OK. I'll follow ...")."""
    return len(text) <= _MAX_ACK_CHARS and ACKNOWLEDGEMENT.match(text) is not None


_SQL_HEAD = "sql\n```sql\n"
_DONE_WORDS = ("finish", "submit")


def canonical_action(action: str, domain: str, style: str = "") -> tuple[str, Action | str, str | None]:
    """The action in its canonical unified form, its parse, and the name of a rewrite if one was needed.

    Only the framing changes (`bash` + fenced block, `name[arg]`, `name(args)`), never the
    command, query or arguments. One documented rewrite: AgentBench OS ends operation
    tasks with `Act: finish` and InterCode (AgentBank's bash/SQL tasks) with `submit`; in
    the os and db domains the unified grammar spells that `answer(done)`. An action
    that `parse_action` does not know (a source's own action space) is kept as it is.

    `style` is `ParsedTurn.style`: for the styles where `parse_turn` already built the
    action with react's own helpers (`answer(...)`, `sql` + block, `name(args)`), the
    action is canonical and its parse is known, so `parse_action` is skipped (a third of
    the conversion time on tool-use data).
    """
    if style == "final_answer" and action.startswith("answer(") and action.endswith(")"):
        return action, Action("answer", action[7:-1]), None
    if style == "db_operation" and action.startswith(_SQL_HEAD) and action.endswith("\n```") \
            and len(action) > len(_SQL_HEAD) + 4:
        return action, Action("sql", action[len(_SQL_HEAD):-4]), None
    if style == "tool_input" and domain not in DOMAIN_ACTION_KINDS:
        return action, action, None  # outside the six domains only the text matters
    parsed = parse_action(action)
    if isinstance(parsed, Action):
        if parsed.kind == "command" and domain in ("os", "db") and parsed.arg.strip().lower() in _DONE_WORDS:
            done = Action("answer", "done")
            return format_action(done), done, "finish_to_answer"
        return format_action(parsed), parsed, None
    text = action.strip()
    return text, text, None


ParsedActions = dict[int, tuple[str, "Action | str | None"]]
"""Turn index -> (the turn's text, its parsed action): what conversion learnt, for the checks."""


def attach_actions(traj: Trajectory, actions: ParsedActions) -> Trajectory:
    """Remember the parsed actions on the trajectory so validation does not parse every turn again.

    The checks use an entry only while the turn's text is the very same string object,
    so a trajectory edited afterwards is parsed afresh. Not part of the record (not exported).
    """
    traj.__dict__["_actions"] = actions
    return traj


def convert_turns(
    row: RawRow,
    turns: Any,
    *,
    turns_field: str,
    role_key: str,
    content_key: str,
    loss_key: str | None,
    domain: str,
    final_text_as_answer: bool = False,
) -> tuple[list[Turn], dict[str, Any], ParsedActions]:
    """Unified turns, the meta facts about them, and the parsed actions (see the module docstring).

    `final_text_as_answer`: a final assistant turn with no action is the reply to the
    user, written as `answer(<text>)` (tool-use sources whose last turn is plain text).
    """
    if turns is None:
        raise field_error(row, turns_field, "missing; expected a list of turns", "schema.missing_field")
    if not isinstance(turns, list):
        raise field_error(row, turns_field, f"expected a list of turns, got {type(turns).__name__}", "schema.bad_type")
    if not turns:
        raise field_error(row, turns_field, "is empty", "schema.empty")

    # The common case in comprehensions (fewer bytecodes a turn than one checking loop);
    # anything unexpected goes to `_reject_turns`, which names the first bad turn.
    role_map = ROLE_MAP
    try:
        roles: list[str] = [role_map[t[role_key]] for t in turns]
        texts: list[str] = [t[content_key] for t in turns]
    except (KeyError, TypeError):  # a turn that is not an object, a missing key, an unknown or unhashable role
        _reject_turns(row, turns, turns_field, role_key, content_key)
    if {x.__class__ for x in texts} != {str}:
        _reject_turns(row, turns, turns_field, role_key, content_key)
    losses: list[Any] = [t.get(loss_key) for t in turns] if loss_key else [None] * len(turns)
    has_flags = any(loss is not None and role == "assistant" for role, loss in zip(roles, losses))

    demo_end = -1
    if not has_flags:
        for i, role in enumerate(roles):
            if role == "user" and NEW_TASK.match(texts[i]):
                demo_end = i

    out: list[Turn] = []
    actions: ParsedActions = {}
    free_text: list[int] = []
    rewrites: dict[str, int] = {}
    demos = 0
    last = len(roles) - 1
    is_os = domain == "os"
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
        if parsed.__class__ is ParsedTurn:
            act_text, action, rewrite = _canonical(parsed.action, domain, parsed.style)
            if rewrite:
                rewrites[rewrite] = rewrites.get(rewrite, 0) + 1
            content = _format_turn(parsed.thought, act_text)
        elif final_text_as_answer and i == last and text.strip():
            action = Action("answer", text.strip())
            content = format_turn("", format_action(action))
            rewrites["final_text_as_answer"] = rewrites.get("final_text_as_answer", 0) + 1
        else:
            content = text
        loss = losses[i]
        if has_flags and loss is not None:
            train = bool(loss)
        elif i < demo_end:
            train = False
            demos += 1
        else:
            train = not (action is None and is_acknowledgement(text))
        if train and action is None:
            free_text.append(i)
        actions[i] = (content, action)
        out.append(_Turn("assistant", content, train))

    meta: dict[str, Any] = {"train_flags": "source" if has_flags else "inferred"}
    if demos:
        meta["demo_turns"] = demos
    if free_text:
        meta["free_text_turns"] = free_text
    if rewrites:
        meta["rewrites"] = rewrites
    return out, meta, actions


def _reject_turns(row: RawRow, turns: list, turns_field: str, role_key: str, content_key: str) -> NoReturn:
    """Raise the RowRejected that names the first turn that is not an object with a known role and a text."""
    for i, t in enumerate(turns):
        where = f"{turns_field}[{i}]"
        if not isinstance(t, dict):
            raise field_error(row, where, f"expected an object, got {type(t).__name__}", "schema.bad_type")
        raw_role, text = t.get(role_key), t.get(content_key)
        if raw_role is None:
            raise field_error(row, f"{where}.{role_key}", "missing", "schema.missing_field")
        if not isinstance(raw_role, str) or raw_role not in ROLE_MAP:
            raise field_error(row, f"{where}.{role_key}",
                              f"unknown role {raw_role!r}; expected one of {sorted(ROLE_MAP)}", "schema.unknown_role")
        if text is None:
            raise field_error(row, f"{where}.{content_key}", "missing", "schema.missing_field")
        if text.__class__ is not str:
            raise field_error(row, f"{where}.{content_key}", f"expected a string, got {type(text).__name__}",
                              "schema.bad_type")
    raise AssertionError("_reject_turns called on valid turns")  # pragma: no cover - callers check first


def conversation_trajectory(row: RawRow, source: str, rid: str, domain: str, *, tid: str | None = None,
                            turns_fields: tuple[str, ...] = ("conversations", "messages"),
                            final_text_as_answer: bool = False, **extra_meta: Any) -> Trajectory:
    """The Trajectory of a row that holds a conversation: its turns converted (`convert_turns`), with
    provenance (`source_id`, split, file, line) and `extra_meta` in meta; id `tid` or `<source>/<rid>`."""
    field, turns = pick_turns(row, row.data, *turns_fields)
    role_key, content_key, loss_key = turn_keys(turns)
    messages, meta, actions = convert_turns(row, turns, turns_field=field, role_key=role_key, content_key=content_key,
                                            loss_key=loss_key, domain=domain,
                                            final_text_as_answer=final_text_as_answer)
    meta.update(source_id=rid, split=row.split, file=row.file, line=row.line, **extra_meta)
    return attach_actions(Trajectory(tid or f"{source}/{rid}", source, domain, messages, meta), actions)


def require_str(row: RawRow, data: dict, key: str) -> str:
    """`data[key]` as a non-empty string, or a RowRejected naming the field."""
    value = data.get(key)
    if value is None:
        raise field_error(row, key, "missing", "schema.missing_field")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise field_error(row, key, f"expected a non-empty string, got {value!r:.60}", "schema.bad_type")
    return value


def pick_turns(row: RawRow, data: dict, *candidates: str) -> tuple[str, Any]:
    """The first turns field present (`conversations`, `conversation`, `messages`)."""
    for key in candidates:
        if key in data:
            return key, data[key]
    message = f"missing; expected one of {list(candidates)} (keys present: {sorted(data)[:8]})"
    raise RowRejected("schema.missing_field", f"{row.where(candidates[0])}: {message}", candidates[0], message)


def turn_keys(turns: Any) -> tuple[str, str, str | None]:
    """(role key, content key, loss key) of a turn list: ShareGPT `from`/`value` or chat `role`/`content`."""
    if isinstance(turns, list) and turns and isinstance(turns[0], dict):
        first = turns[0]
        if "from" in first or "value" in first:
            return "from", "value", "loss"
    return "role", "content", "loss"

"""The unified ReAct grammar: one assistant turn is

    Think: <reasoning, any number of lines>
    Act: <action>

with a domain-specific action (see `ACTION_FORMS`) or `answer(<text>)` to finish. Parsers also accept the styles of
the source datasets (THOUGHT/ACTION, Thought:/Action:, `Action: Operation` + sql block, `Final Answer: ...`,
`Action: name with Action Input: {...}`) so converters and environments share one parser. Parsing never raises: a
failure is a `ParseError` that says what was expected, ready to be shown to the agent.

Also here: the `<think>...</think><answer>...</answer>` tag format of the single-turn recipe.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# --------------------------------------------------------------------------- actions
ACTION_KINDS = ("bash", "sql", "call", "tool", "command", "answer")
"""bash: ```bash block (os); sql: ```sql block (db); call: name[arg] (web, ecommerce);
tool: name(args) (kg); command: a plain text command (household); answer: answer(text)."""

DOMAIN_ACTION_KINDS: dict[str, tuple[str, ...]] = {
    "os": ("bash", "answer"),
    "db": ("sql", "answer"),
    "web": ("call", "answer"),
    "ecommerce": ("call", "answer"),
    "kg": ("tool", "answer"),
    "household": ("command", "answer"),
}

ACTION_FORMS: dict[str, str] = {
    "os": "Act: bash\n```bash\n<one shell command line>\n```\nor Act: answer(<your answer>)",
    "db": "Act: sql\n```sql\n<one SQL statement>\n```\nor Act: answer([<value>, ...])",
    "web": "Act: click[<link text>], Act: search[<query>], Act: type[<field>][<text>], Act: back[] "
    "or Act: answer(<your answer>)",
    "ecommerce": "Act: search[<query>] or Act: click[<a button or option shown on the page>]",
    "kg": "Act: get_relations(<entity or #n>), get_neighbors(<entity or #n>, <relation>), "
    "intersection(#a, #b), get_attributes(#n), argmax(#n, <attribute>), argmin(#n, <attribute>), "
    "count(#n), or Act: answer(#n)",
    "household": "Act: <one command>, e.g. go to <receptacle>, open <receptacle>, take <object> from "
    "<receptacle>, put <object> in/on <receptacle>, clean/heat/cool <object> with <receptacle>, "
    "use <object>, examine <thing>, inventory, look",
}


@dataclass(frozen=True)
class Action:
    """A parsed action. `name` is the call/tool name (empty for bash, sql, command, answer)."""

    kind: str
    arg: str
    name: str = ""

    @property
    def text(self) -> str:
        """The canonical action string (what follows `Act: `)."""
        return format_action(self)


@dataclass(frozen=True)
class ParsedTurn:
    """A parsed assistant turn. `style` names the source style that was recognised."""

    thought: str
    action: str
    style: str = "unified"


@dataclass(frozen=True)
class ParseError:
    """Why a turn or action did not parse, phrased for the agent to read."""

    message: str

    def __bool__(self) -> bool:  # lets callers write `if not parsed:`
        return False


def format_action(action: Action) -> str:
    return _format(action.kind, action.arg, action.name)


_FORMATS = {"bash": "bash\n```bash\n{arg}\n```", "sql": "sql\n```sql\n{arg}\n```", "call": "{name}[{arg}]",
            "tool": "{name}({arg})", "answer": "answer({arg})", "command": "{arg}"}


def _format(kind: str, arg: str, name: str = "") -> str:
    """The canonical text of an action given by its fields (the helpers below skip building an Action)."""
    if kind not in _FORMATS:
        raise ValueError(f"unknown action kind {kind!r}; expected one of {ACTION_KINDS}")
    return _FORMATS[kind].format(arg=arg, name=name)


def bash(cmd: str) -> str:
    return _format("bash", cmd)


def sql(query: str) -> str:
    return _format("sql", query)


def call(name: str, arg: str) -> str:
    return _format("call", arg, name)


def tool(name: str, args: str) -> str:
    return _format("tool", args, name)


def answer(text: str) -> str:
    return _format("answer", text)


def format_turn(thought: str, action: str) -> str:
    """The unified assistant turn. `action` is an action string (see `bash`, `sql`, ...)."""
    return f"Think: {thought.strip()}\nAct: {action}"


# --------------------------------------------------------------------------- parsing turns
_LABEL = re.compile(r"^[ \t]*(Act|Action|ACTION)[ \t]*:[ \t]*", re.MULTILINE)
_THOUGHT_PREFIX = re.compile(r"^\s*(Think|Thought|THOUGHT)\s*:\s*", re.IGNORECASE)
# the characters a stripped text must start with for `_THOUGHT_PREFIX` to match: those that match (?i)t, checked over
# all of Unicode by tests/test_react.py
_THOUGHT_FIRST = "Tt"
_FINAL_ANSWER = re.compile(r"^[ \t]*Final Answer[ \t]*:[ \t]*(.*)", re.MULTILINE | re.DOTALL)
_TOOL_INPUT = re.compile(r"^(?P<name>[\w.\-]+)\s+with\s+Action Input:\s*(?P<args>.*)$", re.DOTALL)
_MIND2WEB = re.compile(r"^([A-Z]+)\s*\nValue:\s*(.*)$", re.DOTALL)
# Mind2Web operations that carry no Value line ("Answer: B.\nAction: CLICK").
_MIND2WEB_BARE = re.compile(r"^(CLICK|HOVER|ENTER|PRESS|SELECT|SET|TYPE)\s*$")
# ToolBench ReAct as Agent-FLAN ships it: "Action: name\nAction Input: {json}".
_TOOL_INPUT_LINES = re.compile(r"^(?P<name>[\w.\-]+)[ \t]*\n[ \t]*Action Input:\s*(?P<args>.*)$", re.DOTALL)
_FENCE = re.compile(r"```[ \t]*(\w*)[ \t]*\n?(.*?)\n?[ \t]*```", re.DOTALL)
_FINAL_ANSWER_BODY = re.compile(r"Final Answer\s*:\s*(.*)", re.DOTALL)
_STYLES = {"Act": "unified", "Action": "thought_action", "ACTION": "THOUGHT_ACTION"}


def parse_turn(text: str) -> ParsedTurn | ParseError:
    """Split an assistant turn into thought and action (normalised to the unified form)."""
    if not isinstance(text, str) or not text.strip():
        return ParseError("Empty reply. Reply with 'Think: <reasoning>' then 'Act: <action>'.")
    m = _LABEL.search(text)
    if m is None:
        fa = _FINAL_ANSWER.search(text)
        if fa:  # KG / DB style without an Action label: "Final Answer: #3"
            return ParsedTurn(_strip_thought(text[: fa.start()]), answer(fa.group(1).strip()), "final_answer")
        return ParseError("No action found. End your reply with a line 'Act: <action>'.")
    thought = _strip_thought(text[: m.start()])
    body = text[m.end():].strip()
    # DB: "Action: Operation\n```sql ...```" and "Action: Answer\nFinal Answer: [...]"
    head, _, rest = body.partition("\n")
    if head.strip() == "Operation":
        fence = _FENCE.search(rest)
        if not fence:
            return ParseError("'Action: Operation' must be followed by a ```sql block.")
        return ParsedTurn(thought, sql(fence.group(2).strip()), "db_operation")
    if head.strip() == "Answer":
        fa = _FINAL_ANSWER.search(rest)
        if not fa:
            return ParseError("'Action: Answer' must be followed by 'Final Answer: [...]'.")
        return ParsedTurn(thought, answer(fa.group(1).strip()), "final_answer")
    # Each pattern below is tried only where the text can match it (its first letter, its literal):
    # the same results, without five failing regex calls on most turns.
    fa = _FINAL_ANSWER_BODY.match(body) if body.startswith("Final Answer") else None
    if fa:
        return ParsedTurn(thought, answer(fa.group(1).strip()), "final_answer")
    if "A" <= body[:1] <= "Z":
        m2w = _MIND2WEB.match(body)
        if m2w:  # Mind2Web: "Answer: B.\nAction: TYPE\nValue: Chicago Bears" (the choice letter precedes)
            return ParsedTurn(thought, call(m2w.group(1).lower(), m2w.group(2).strip()), "mind2web")
        m2w = _MIND2WEB_BARE.match(body)
        if m2w:  # Mind2Web without a value: the chosen element is the "Answer: X." kept in the thought
            return ParsedTurn(thought, call(m2w.group(1).lower(), ""), "mind2web")
    ti = (_TOOL_INPUT.match(body) or _TOOL_INPUT_LINES.match(body)) if "Action Input:" in body else None
    if ti:  # ToolBench / Agent-FLAN: "Action: name with Action Input: {json}"
        return ParsedTurn(thought, tool(ti.group("name"), ti.group("args").strip()), "tool_input")
    if not body:
        return ParseError("The 'Act:' line is empty. Write the action after 'Act: '.")
    return ParsedTurn(thought, body, _STYLES[m.group(1)])


def _strip_thought(text: str) -> str:
    text = text.strip()
    if text[:1] not in _THOUGHT_FIRST:  # cannot start with a Think/Thought label: skip the regex
        return text
    return _THOUGHT_PREFIX.sub("", text, count=1).strip()


# --------------------------------------------------------------------------- parsing actions
_ANSWER = re.compile(r"^answer\s*\((.*)\)\s*$", re.DOTALL | re.IGNORECASE)
_CALL = re.compile(r"^([A-Za-z_][\w\-]*)\s*\[(.*)\]\s*$", re.DOTALL)
_TOOLCALL = re.compile(r"^([A-Za-z_][\w.\-]*)\s*\((.*)\)\s*$", re.DOTALL)


def parse_action(action: str, domain: str | None = None) -> Action | ParseError:
    """Parse an action string; with `domain`, also check the kind is allowed there."""
    if not isinstance(action, str) or not action.strip():
        return ParseError("Empty action. " + _expected(domain))
    parsed = _parse_any(action.strip())
    if isinstance(parsed, ParseError):
        return ParseError(parsed.message + " " + _expected(domain))
    if domain is not None and domain in DOMAIN_ACTION_KINDS and parsed.kind not in DOMAIN_ACTION_KINDS[domain]:
        return ParseError(f"A {parsed.kind} action is not available in this environment. " + _expected(domain))
    return parsed


def _parse_any(s: str) -> Action | ParseError:
    m = _ANSWER.match(s)
    if m:
        return Action("answer", m.group(1).strip())
    first = s.partition("\n")[0]
    lang = first.strip().lower()
    if lang in ("bash", "sql") or first.lstrip().startswith("```"):
        fence = _FENCE.search(s)
        if not fence:
            return ParseError(f"'{lang}' must be followed by a ```{lang} code block.")
        kind = lang if lang in ("bash", "sql") else (fence.group(1).lower() or "bash")
        if kind not in ("bash", "sql"):
            return ParseError(f"Unknown code block language {kind!r}.")
        code = fence.group(2).strip()
        if not code:
            return ParseError("The code block is empty.")
        return Action(kind, code)
    m = _CALL.match(s)
    if m:
        return Action("call", m.group(2), m.group(1))
    m = _TOOLCALL.match(s)
    if m:
        return Action("tool", m.group(2).strip(), m.group(1))
    if "\n" in s:
        return ParseError("An action is a single command on one line.")
    return Action("command", s)


def _expected(domain: str | None) -> str:
    forms = ACTION_FORMS.get(domain) or "; ".join(f"{d}: {f}" for d, f in ACTION_FORMS.items())
    return "Valid forms: " + forms


def parse_step(text: str, domain: str | None = None) -> tuple[ParsedTurn, Action] | ParseError:
    """Parse a whole assistant turn into (turn, action), or a ParseError for the agent."""
    turn = parse_turn(text)
    if isinstance(turn, ParseError):
        return turn
    act = parse_action(turn.action, domain)
    return act if isinstance(act, ParseError) else (turn, act)


# --------------------------------------------------------------------------- <think>/<answer> tags
def format_tagged(think: str, answer_text: str) -> str:
    """The open-r1 completion format that the `format` reward accepts."""
    return f"<think>\n{think}\n</think>\n<answer>\n{answer_text}\n</answer>"


_TAGGED = re.compile(r"^<think>\n(.*?)\n</think>\n<answer>\n(.*?)\n</answer>$", re.DOTALL | re.MULTILINE)
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def parse_tagged(text: str) -> tuple[str, str] | ParseError:
    """(think, answer) when `text` is exactly in the tag format, else a ParseError."""
    m = _TAGGED.match(text or "")
    if not m:
        return ParseError("Expected '<think>\\n...\\n</think>\\n<answer>\\n...\\n</answer>'.")
    return m.group(1), m.group(2)


def extract_answer(text: str) -> str | None:
    """The final answer of a completion, whatever its style: the last <answer> block,
    else an `answer(...)` / `Final Answer:` action, else None."""
    if not isinstance(text, str):
        return None
    tags = _ANSWER_TAG.findall(text)
    if tags:
        return tags[-1].strip()
    turn = parse_turn(text)
    if isinstance(turn, ParsedTurn):
        act = _parse_any(turn.action)
        if isinstance(act, Action) and act.kind == "answer":
            return act.arg
    return None

"""ReAct-format rewards: is each assistant turn a well-formed `Think:` / `Act:` turn?"""

from __future__ import annotations

import re
from typing import Any, Callable

from openmanus_lite.react import (  # the private patterns keep the fast path on the grammar's own definitions
    _ANSWER,
    _CALL,
    _TOOLCALL,
    DOMAIN_ACTION_KINDS,
    ParsedTurn,
    ParseError,
    parse_action,
    parse_step,
)
from openmanus_lite.rewards.columns import DOMAIN, assistant_texts, completions_list, optional
from openmanus_lite.rewards.registry import register_reward

_LABEL_AT = re.compile(r"[ \t]*(Act|Action|ACTION)[ \t]*:")
_NONSPACE = re.compile(r"\S")


def first_label(t: str) -> tuple[int, int, str] | None:
    """The label react.parse_turn takes (the first `Act:`, `Action:` or `ACTION:` line) as (start of its line, end of
    the colon, label word), or None; answers.py finds answers with it too. Every label contains "Act" or "ACTION":
    str.find jumps between candidates."""
    pos, n = 0, len(t)
    while True:
        i = t.find("Act", pos)
        j = t.find("ACTION", pos, i + 5 if i >= 0 else n)  # only an ACTION that starts first
        k = j if j >= 0 else i
        if k < 0:
            return None
        if k == i and t.startswith("Act:", k) and (k == 0 or t[k - 1] == "\n"):
            return k, k + 4, "Act"  # the usual "\nAct:" line
        ls = t.rfind("\n", 0, k) + 1
        m = _LABEL_AT.match(t, ls)
        if m is not None:
            return ls, m.end(), m.group(1)
        pos = t.find("\n", k)
        if pos < 0:
            return None


# `bash|sql` + a fenced block without backticks inside: with non-blank code, react.parse_action gives that kind
_FENCED = re.compile(r"(bash|sql)[ \t]*\n```[ \t]*\w*[ \t]*\n?([^`]*)```")


def _fast_kind(body: str) -> str | None:
    """The kind react.parse_action gives a stripped action in its cheap forms (its own patterns and order), or None."""
    c = body[0]  # the body is stripped and not empty; the first character rules out most forms
    if (c == "a" or c == "A") and _ANSWER.match(body):
        return "answer"
    if c in "bsBS`":
        first = body.partition("\n")[0]
        if first.strip().lower() in ("bash", "sql") or first.lstrip().startswith("```"):
            m = _FENCED.match(body)
            return m.group(1) if m is not None and m.group(2).strip() else None
    if _CALL.match(body):
        return "call"
    if _TOOLCALL.match(body):
        return "tool"
    return None


def react_turn_score(text: str, domain: str | None = None) -> float:
    """One assistant turn: 1.0 for `Think: <reasoning>` then an `Act:` that react.parse_step accepts for `domain`
    (None or unknown: any), 0.5 when it parses in another style, 0.0 when it does not. Same verdicts as parse_step
    (a property test holds them equal), faster: the thought cannot change whether the action parses, so only the
    action is parsed, its common forms without building parse objects."""
    if type(text) is not str:
        return 0.0
    try:
        label = first_label(text)
        if label is None:  # no Act/Action label: only the Final Answer form can parse; never strict
            return 0.0 if isinstance(parse_step(text, domain), ParseError) else 0.5
        ls, end, word = label
        body = text[end:].strip()
        # parse_turn hands the body to parse_action unchanged except the styles it rewrites (full path below)
        if body and not body[0].isupper() and "Action Input:" not in body:
            kind = _fast_kind(body)
            if kind is None:
                if isinstance(parse_action(body, domain), ParseError):
                    return 0.0
            else:
                allowed = DOMAIN_ACTION_KINDS.get(domain) if type(domain) is str else None
                if allowed is not None and kind not in allowed:
                    return 0.0
            return 1.0 if word == "Act" and _thought_first(text, ls) else 0.5
        r = parse_step(text[ls:], domain)
    except Exception:
        return 0.0
    if isinstance(r, ParseError):
        return 0.0
    return 1.0 if isinstance(r[0], ParsedTurn) and r[0].style == "unified" and _thought_first(text, ls) else 0.5


def _thought_first(text: str, ls: int) -> bool:
    """The turn starts with `Think:` and non-blank reasoning before the label line at `ls`."""
    first = _NONSPACE.search(text, 0, ls)
    if first is None or not text.startswith("Think:", first.start()):
        return False
    return _NONSPACE.search(text, first.start() + 6, ls) is not None


def _turn_mean(completion: Any, score: Callable[..., float], *args: Any) -> float:
    """The mean of `score(turn, *args)` over the completion's assistant turns; 0.0 with none."""
    turns = assistant_texts(completion)
    return sum(score(t, *args) for t in turns) / len(turns) if turns else 0.0


@register_reward("react_format")
def react_format_reward(prompts=None, completions=None, **kwargs) -> list[float]:
    """Mean `react_turn_score` over the assistant turns for the row's optional `domain`; 0.0 with none. Next to
    `env_outcome` in GRPO it was reward-hacked (held-out db 10/50 -> 0/50): use it for format warm-ups."""
    comps = completions_list(completions, "react_format")
    domains = optional(kwargs, DOMAIN, len(comps), "react_format")
    return [_turn_mean(c, react_turn_score, d if type(d) is str else None) for c, d in zip(comps, domains)]


def _react_tags(t: str) -> float:
    think = t.count("\nThink:") + t.startswith("Think:")
    act = t.count("\nAct:") + t.startswith("Act:")
    return (0.5 if think == 1 else 0.0) + (0.5 if act == 1 else 0.0)


@register_reward("react_tag_count")
def react_tag_count_reward(prompts=None, completions=None, **kwargs) -> list[float]:
    """The ReAct tag_count: per turn 0.5 for exactly one "Think:" line and 0.5 for exactly one "Act:" line; the mean."""
    return [_turn_mean(c, _react_tags) for c in completions_list(completions, "react_tag_count")]


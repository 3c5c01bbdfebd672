"""Every real assistant action of the WebShop and ALFWorld rows in the shared real samples parses
with the parser the household and e-commerce environments use (react.parse_step, then the
household command parser / the shop's search[...] and click[...] forms) without a format error."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from openmanus_lite.envs.household import Command, parse_command
from openmanus_lite.react import ParseError, parse_step

ALFWORLD_TASK_PREFIXES = ("pick_and_place", "pick_clean_then_place", "pick_heat_then_place", "pick_cool_then_place",
                          "look_at_obj_in_light", "pick_two_obj_and_place", "alfworld")
_BOILERPLATE = re.compile(r"^\s*ok\b", re.IGNORECASE)
_HAS_ACTION = re.compile(r"^[ \t]*(act|action)[ \t]*:", re.IGNORECASE | re.MULTILINE)


def _domain_of(row_id: str, file: Path) -> str | None:
    name = file.name
    if name.startswith("alfworld") or row_id.startswith(ALFWORLD_TASK_PREFIXES):
        return "household"
    if name.startswith("webshop") or row_id.startswith("webshop"):
        return "ecommerce"
    return None


def _real_actions(root: Path) -> dict[str, list[tuple[str, str]]]:
    """domain -> [(row id, assistant text)] for the WebShop and ALFWorld rows, boilerplate turns left out."""
    files = [root / "agentinstruct" / "alfworld.jsonl", root / "agentinstruct" / "webshop.jsonl",
             root / "agentinstruct_rekeyed" / "alfworld.jsonl", root / "agentinstruct_rekeyed" / "webshop.jsonl",
             root / "openmanus_rl" / "sample.jsonl", root / "agenttraj_l" / "sample.jsonl"]
    out: dict[str, list[tuple[str, str]]] = {"household": [], "ecommerce": []}
    for file in files:
        if not file.exists():
            continue
        for line in file.read_text().splitlines():
            row = json.loads(line)
            row_id = str(row.get("id") or row.get("item_id") or "")
            domain = _domain_of(row_id, file)
            if domain is None:
                continue
            for turn in row["conversations"]:
                role = turn.get("from") or turn.get("role")
                text = turn.get("value") if "value" in turn else turn.get("content")
                if role not in ("gpt", "assistant"):
                    continue
                if _BOILERPLATE.match(text) and not _HAS_ACTION.search(text):
                    continue  # "Ok." / "OK. I'll follow your instructions ..."
                out[domain].append((row_id, text))
    return out


@pytest.fixture
def actions(real_samples) -> dict[str, list[tuple[str, str]]]:
    return _real_actions(real_samples)


def test_every_real_alfworld_action_parses(actions):
    rows = actions["household"]
    assert len(rows) >= 100, f"expected the ALFWorld rows' actions, found {len(rows)}"
    verbs = set()
    for row_id, text in rows:
        parsed = parse_step(text, "household")
        assert not isinstance(parsed, ParseError), f"{row_id}: {text!r}: {parsed}"
        _, action = parsed
        assert action.kind == "command", f"{row_id}: {text!r} parsed as {action}"
        cmd = parse_command(action.arg)
        assert isinstance(cmd, Command), f"{row_id}: {action.arg!r}: {cmd}"
        verbs.add(cmd.verb)
    assert {"go", "take", "put", "open", "heat", "use"} <= verbs


def test_every_real_webshop_action_parses(actions):
    rows = actions["ecommerce"]
    assert len(rows) >= 20, f"expected the WebShop rows' actions, found {len(rows)}"
    clicked = []
    for row_id, text in rows:
        parsed = parse_step(text, "ecommerce")
        assert not isinstance(parsed, ParseError), f"{row_id}: {text!r}: {parsed}"
        _, action = parsed
        assert action.kind == "call" and action.name in ("search", "click"), f"{row_id}: {text!r} -> {action}"
        assert action.arg.strip(), f"{row_id}: empty argument in {text!r}"
        if action.name == "click":
            clicked.append(action.arg.strip())
    assert "Buy Now" in clicked
    assert any(re.fullmatch(r"B0[0-9A-Z]{8}", c) for c in clicked), "product ids like B0977H69D1"
    assert "3.25 ounce (pack of 3)" in clicked

"""Agent-FLAN (internlm/Agent-FLAN): 34,442 rows of AgentInstruct and ToolBench, re-formatted.

Schema: `{"id": str, "conversation": [{"role": "system"|"user"|"assistant", "content": str, "loss": bool}]}`,
one JSONL file per part: `agent_instruct_react`, `agent_instruct_tflan`, `toolbench_instruct_j1s1_3k`,
`toolbench_react_10p`, `toolbench_tflan_60p_r10r5u7`, `toolbench_tflan_cot_30p`, `toolbench_negative`.
The `toolbench_*` parts are `tool`; otherwise the domain is the AgentInstruct task named by the id prefix
(`os_`, `db_`, ...), else the one whose task prompt `PROMPT_HINTS` recognises, else `other`.

The `*_tflan*` parts are a chat-style rewrite whose plain-text turns the checks reject unless free text is
allowed; a final plain-text reply in a tool conversation (`toolbench_negative`) becomes `answer(<text>)`.
"""

from __future__ import annotations

from openmanus_lite.data.sources import agentinstruct
from openmanus_lite.data.sources.base import RawRow, source_loader
from openmanus_lite.data.sources.normalize import conversation_trajectory, pick_turns, require_str, turn_keys
from openmanus_lite.schema import Trajectory

NAME = "agent_flan"
HUB_ID = "internlm/Agent-FLAN"
load = source_loader(NAME, HUB_ID)
TURNS_FIELDS = ("conversation", "conversations", "messages")

# Phrases of each AgentBench task prompt, for rows whose id does not name the task.
PROMPT_HINTS: tuple[tuple[str, str], ...] = (
    ("linux(ubuntu) operating system", "os"),
    ("operate a mysql database", "db"),
    ("knowledge base", "kg"),
    ("household", "household"),
    ("you are web shopping", "ecommerce"),
    ("based on the html webpage", "web"),
)


def domain_for(split: str | None, rid: str, prompt: str) -> str:
    if split and split.startswith("toolbench"):
        return "tool"
    label = agentinstruct.domain_for(None, rid)
    if label != "other":
        return label
    low = prompt[:4000].lower()
    return next((domain for phrase, domain in PROMPT_HINTS if phrase in low), "other")


def _prompt(turns: object) -> str:
    """The task prompt: the first text of the first two turns."""
    if not isinstance(turns, list):
        return ""
    key = turn_keys(turns)[1]
    return next((t[key] for t in turns[:2] if isinstance(t, dict) and isinstance(t.get(key), str)), "")


def convert(row: RawRow) -> Trajectory:
    rid = require_str(row, "id")
    domain = domain_for(row.split, rid, _prompt(pick_turns(row, *TURNS_FIELDS)[1]))
    extra = {"negative": {"kind": "agent_flan_negative"}} if row.split == "toolbench_negative" else {}
    return conversation_trajectory(row, NAME, rid, domain, tid=f"{NAME}/{row.split or 'data'}/{rid}",
                                   turns_fields=TURNS_FIELDS, final_text_as_answer=domain == "tool", **extra)

"""Agent-FLAN (internlm/Agent-FLAN): 34,442 rows of AgentInstruct and ToolBench, re-formatted.

Schema: `{"id": str, "conversation": [{"role": "system"|"user"|"assistant",
"content": str, "loss": bool}]}`, one JSONL file per part:
`agent_instruct_react`, `agent_instruct_tflan`, `toolbench_instruct_j1s1_3k`,
`toolbench_react_10p`, `toolbench_tflan_60p_r10r5u7`, `toolbench_tflan_cot_30p`,
`toolbench_negative`.

Domain mapping:

| file / split          | label                                                         |
|-----------------------|---------------------------------------------------------------|
| toolbench_*           | tool                                                          |
| agent_instruct_*      | the AgentInstruct task: from the id prefix (`os_`, `db_`, `kg_`, `alfworld_`, `webshop_`, `mind2web_`), else from the task prompt (table `PROMPT_HINTS`) |
| anything else         | from the prompt, else `other`                                 |

The `*_tflan*` parts are Agent-FLAN's chat-style rewrite: many assistant turns are plain
conversation with no action. Those turns keep their text and are listed in
`meta["free_text_turns"]`; the checks reject them unless the merge allows free text.
A final plain-text reply in a tool conversation (the `toolbench_negative` "no tool
needed" answers) becomes `answer(<text>)`.
"""

from __future__ import annotations

from collections.abc import Iterator

from openmanus_lite.data.sources import agentinstruct
from openmanus_lite.data.sources.base import RawRow, read_rows
from openmanus_lite.data.sources.normalize import conversation_trajectory, pick_turns, require_str, turn_keys
from openmanus_lite.schema import Trajectory

NAME = "agent_flan"
HUB_ID = "internlm/Agent-FLAN"

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
    for phrase, domain in PROMPT_HINTS:
        if phrase in low:
            return domain
    return "other"


def load(spec: str = HUB_ID, *, splits: list[str] | None = None, config: str | None = None) -> Iterator[RawRow]:
    return read_rows(spec, NAME, splits=splits or None, config=config)


def _prompt(turns: object, content_key: str) -> str:
    if isinstance(turns, list):
        for t in turns[:2]:
            if isinstance(t, dict) and isinstance(t.get(content_key), str):
                return t[content_key]
    return ""


def convert(row: RawRow) -> Trajectory:
    data = row.data
    rid = require_str(row, data, "id")
    turns_fields = ("conversation", "conversations", "messages")
    _, turns = pick_turns(row, data, *turns_fields)
    domain = domain_for(row.split, rid, _prompt(turns, turn_keys(turns)[1]))
    extra = {"negative": {"kind": "agent_flan_negative"}} if row.split == "toolbench_negative" else {}
    return conversation_trajectory(row, NAME, rid, domain, tid=f"{NAME}/{row.split or 'data'}/{rid}",
                                   turns_fields=turns_fields, final_text_as_answer=domain == "tool", **extra)

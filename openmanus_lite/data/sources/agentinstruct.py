"""AgentInstruct (THUDM/AgentInstruct): 1,866 GPT-4 trajectories of AgentBench tasks.

Schema: `{"id": "db_460", "conversations": [{"from": "human"|"gpt", "loss": bool|null,
"value": str}]}`, one hub split per task. Re-keyed copies found elsewhere
(`{"id", "conversations": [{"role", "content"}]}`, `loss` dropped) are read too; their
train flags are inferred (see `normalize`).

Domain mapping (hub split, else the id prefix before `_`):

| split / id prefix | domain    |
|-------------------|-----------|
| os                | os        |
| db                | db        |
| kg                | kg        |
| alfworld          | household |
| webshop           | ecommerce |
| mind2web          | web       |

Anything else is labelled `other` (an honest "unknown", never forced into a domain).
"""

from __future__ import annotations

from collections.abc import Iterator

from openmanus_lite.data.sources.base import RawRow, read_rows
from openmanus_lite.data.sources.normalize import conversation_trajectory, require_str
from openmanus_lite.schema import Trajectory

NAME = "agentinstruct"
HUB_ID = "THUDM/AgentInstruct"

SPLIT_DOMAINS: dict[str, str] = {
    "os": "os",
    "db": "db",
    "kg": "kg",
    "alfworld": "household",
    "webshop": "ecommerce",
    "mind2web": "web",
}


def domain_for(split: str | None, rid: str) -> str:
    """Domain from the split name, else from the id prefix (`db_460` -> db)."""
    if split in SPLIT_DOMAINS:
        return SPLIT_DOMAINS[split]
    prefix = rid.rsplit("_", 1)[0] if "_" in rid else rid
    return SPLIT_DOMAINS.get(prefix, "other")


def load(spec: str = HUB_ID, *, splits: list[str] | None = None, config: str | None = None) -> Iterator[RawRow]:
    """Raw rows from a local file/folder (file names are split names) or the hub."""
    return read_rows(spec, NAME, splits=splits, config=config)


def convert(row: RawRow) -> Trajectory:
    data = row.data
    rid = require_str(row, data, "id")
    return conversation_trajectory(row, NAME, rid, domain_for(row.split, rid))

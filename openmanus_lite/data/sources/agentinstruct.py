"""AgentInstruct (THUDM/AgentInstruct): 1,866 GPT-4 trajectories of AgentBench tasks.

Schema: `{"id": "db_460", "conversations": [{"from": "human"|"gpt", "loss": bool|null, "value": str}]}`,
one hub split per task. Re-keyed copies found elsewhere (`role`/`content` turns, `loss` dropped) are read
too; their train flags are inferred (see `normalize`).
"""

from __future__ import annotations

from openmanus_lite.data.sources.base import RawRow, source_loader
from openmanus_lite.data.sources.normalize import conversation_trajectory, require_str
from openmanus_lite.schema import Trajectory

NAME = "agentinstruct"
HUB_ID = "THUDM/AgentInstruct"
load = source_loader(NAME, HUB_ID)

SPLIT_DOMAINS: dict[str, str] = {
    "os": "os", "db": "db", "kg": "kg", "alfworld": "household", "webshop": "ecommerce", "mind2web": "web",
}


def domain_for(split: str | None, rid: str) -> str:
    """From the split name, else the id prefix (`db_460` -> db); else `other`, never forced into a domain."""
    return SPLIT_DOMAINS.get(split) or SPLIT_DOMAINS.get(rid.rsplit("_", 1)[0], "other")


def convert(row: RawRow) -> Trajectory:
    rid = require_str(row, "id")
    return conversation_trajectory(row, NAME, rid, domain_for(row.split, rid))

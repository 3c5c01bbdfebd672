"""OpenManus-RL (CharlieDreemur/OpenManus-RL): AgentInstruct + AgentTraj-L, already merged.

Schema: `{"id": str, "conversations": [{"role": "system"|"user"|"assistant", "content": str}]}` with no
loss flags (they are inferred, see `normalize`). The domain is only inferable from the id, first match
wins: ALFWorld task ids (`pick_and_place_simple-…`, `ALFWORLD_TASK`) are household, AgentInstruct ids
(`os_N`, `db_N`, ...) map as in `agentinstruct`, AgentTraj-L item_id prefixes (`sciworld_`, `movie_`,
...) as in `agenttraj_l`; the file name (e.g. `webshop.jsonl`) is the last hint, else `other`.
"""

from __future__ import annotations

import re

from openmanus_lite.data.sources import agentinstruct, agenttraj_l
from openmanus_lite.data.sources.base import RawRow, source_loader
from openmanus_lite.data.sources.normalize import require_str
from openmanus_lite.schema import Trajectory

NAME = "openmanus_rl"
HUB_ID = "CharlieDreemur/OpenManus-RL"
load = source_loader(NAME, HUB_ID)

ALFWORLD_TASK = re.compile(
    r"^(pick_and_place_simple|look_at_obj_in_light|pick_clean_then_place_in_recep|pick_heat_then_place_in_recep|"
    r"pick_cool_then_place_in_recep|pick_two_obj_and_place)-"
)
AGENTINSTRUCT_ID = re.compile(r"^(os|db|kg|mind2web|alfworld|webshop)_\d+$")


def domain_for(rid: str, split: str | None = None) -> str:
    if ALFWORLD_TASK.match(rid):
        return "household"
    if m := AGENTINSTRUCT_ID.match(rid):
        return agentinstruct.SPLIT_DOMAINS[m.group(1)]
    label = agenttraj_l.domain_for(rid)
    if label == "other" and split:
        label = agentinstruct.SPLIT_DOMAINS.get(split) or agenttraj_l.domain_for(split + "_")
    return label


def convert(row: RawRow) -> Trajectory:
    rid = require_str(row, "id", "item_id")
    return agenttraj_l.episode_trajectory(row, NAME, rid, domain_for(rid, row.split))

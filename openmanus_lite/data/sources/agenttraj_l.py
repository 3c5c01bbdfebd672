"""AgentTraj-L (AgentGym/AgentTraj-L): 14,485 trajectories over AgentGym's environments.

Schema: `{"item_id": "webshop_3499", "conversations": [{"from": "human"|"gpt", "loss": bool|null,
"value": str}]}` (also as shipped in the OpenManus-RL repository's `data/*/*.parquet`); only the `item_id`
prefix names the environment. SqlGym episodes are one SQL statement with no final answer (the statement is
what is graded), so they carry `meta["answer_optional"]`.
"""

from __future__ import annotations

from openmanus_lite.data.sources.base import RawRow, source_loader
from openmanus_lite.data.sources.normalize import conversation_trajectory, require_str
from openmanus_lite.schema import Trajectory

NAME = "agenttraj_l"
HUB_ID = "AgentGym/AgentTraj-L"
load = source_loader(NAME, HUB_ID)

PREFIX_DOMAINS: dict[str, str] = {prefix: label for label, prefixes in {
    "ecommerce": ("webshop_",),
    "household": ("alfworld_", "alfworld"),
    "db": ("sqlgym_",),
    "web": ("webarena_",),
    "science": ("sciworld_",),
    "game": ("babyai_", "textcraft_", "lmrlgym_maze_", "lmrlgym_wordle_", "maze_", "wordle_"),
    "tool": ("weather_", "movie_", "todo_", "academia_", "sheet_", "tool_"),
}.items() for prefix in prefixes}
_PREFIXES = sorted(PREFIX_DOMAINS, key=len, reverse=True)

ANSWER_OPTIONAL_PREFIXES = ("sqlgym_",)


def domain_for(item_id: str) -> str:
    """The domain of the longest matching prefix, else `other`."""
    return next((PREFIX_DOMAINS[p] for p in _PREFIXES if item_id.startswith(p)), "other")


def episode_trajectory(row: RawRow, source: str, rid: str, domain: str) -> Trajectory:
    """An AgentGym episode (also in OpenManus-RL): SqlGym's need no answer; a tool one's final plain reply answers."""
    extra = {"answer_optional": True} if rid.startswith(ANSWER_OPTIONAL_PREFIXES) else {}
    return conversation_trajectory(row, source, rid, domain, final_text_as_answer=domain == "tool", **extra)


def convert(row: RawRow) -> Trajectory:
    rid = require_str(row, "item_id", "id")
    return episode_trajectory(row, NAME, rid, domain_for(rid))

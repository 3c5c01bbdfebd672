"""AgentTraj-L (AgentGym/AgentTraj-L): 14,485 trajectories over AgentGym's environments.

Schema: `{"item_id": "webshop_3499", "conversations": [{"from": "human"|"gpt",
"loss": bool|null, "value": str}]}` (also as shipped in the OpenManus-RL repository's
`data/*/*.parquet`). The environment is only known from the `item_id` prefix.

Domain mapping (longest matching `item_id` prefix wins):

| item_id prefix                                      | label     |
|-----------------------------------------------------|-----------|
| webshop_                                            | ecommerce |
| alfworld_                                           | household |
| sqlgym_                                             | db        |
| webarena_                                           | web       |
| sciworld_                                           | science   |
| babyai_, textcraft_, lmrlgym_maze_, lmrlgym_wordle_, maze_, wordle_ | game |
| weather_, movie_, todo_, academia_, sheet_, tool_   | tool      |

Unknown prefixes are labelled `other`. SqlGym episodes are one SQL statement with no
final answer (the statement is what is graded), so they carry `meta["answer_optional"]`.
"""

from __future__ import annotations

from collections.abc import Iterator

from openmanus_lite.data.sources.base import RawRow, read_rows
from openmanus_lite.data.sources.normalize import conversation_trajectory, require_str
from openmanus_lite.schema import Trajectory

NAME = "agenttraj_l"
HUB_ID = "AgentGym/AgentTraj-L"

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
    for prefix in _PREFIXES:
        if item_id.startswith(prefix):
            return PREFIX_DOMAINS[prefix]
    return "other"


def load(spec: str = HUB_ID, *, splits: list[str] | None = None, config: str | None = None) -> Iterator[RawRow]:
    return read_rows(spec, NAME, splits=splits, config=config)


def convert(row: RawRow) -> Trajectory:
    data = row.data
    key = "item_id" if "item_id" in data or "id" not in data else "id"
    rid = require_str(row, data, key)
    domain = domain_for(rid)
    extra = {"answer_optional": True} if rid.startswith(ANSWER_OPTIONAL_PREFIXES) else {}
    return conversation_trajectory(row, NAME, rid, domain, final_text_as_answer=domain == "tool", **extra)

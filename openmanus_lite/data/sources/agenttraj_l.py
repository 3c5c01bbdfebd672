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
from openmanus_lite.data.sources.normalize import convert_turns, make_trajectory, pick_turns, require_str, turn_keys
from openmanus_lite.schema import Trajectory

NAME = "agenttraj_l"
HUB_ID = "AgentGym/AgentTraj-L"

PREFIX_DOMAINS: dict[str, str] = {
    "webshop_": "ecommerce",
    "alfworld_": "household",
    "alfworld": "household",
    "sqlgym_": "db",
    "webarena_": "web",
    "sciworld_": "science",
    "babyai_": "game",
    "textcraft_": "game",
    "lmrlgym_maze_": "game",
    "lmrlgym_wordle_": "game",
    "maze_": "game",
    "wordle_": "game",
    "weather_": "tool",
    "movie_": "tool",
    "todo_": "tool",
    "academia_": "tool",
    "sheet_": "tool",
    "tool_": "tool",
}
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
    field, turns = pick_turns(row, data, "conversations", "messages")
    role_key, content_key, loss_key = turn_keys(turns)
    domain = domain_for(rid)
    converted = convert_turns(
        row, turns, turns_field=field, role_key=role_key, content_key=content_key, loss_key=loss_key,
        domain=domain, final_text_as_answer=domain == "tool",
    )
    meta = {"source_id": rid, "split": row.split, "file": row.file, "line": row.line}
    if rid.startswith(ANSWER_OPTIONAL_PREFIXES):
        meta["answer_optional"] = True
    return make_trajectory(f"{NAME}/{rid}", NAME, domain, converted, meta)

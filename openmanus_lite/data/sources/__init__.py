"""One module per source dataset; each has NAME, HUB_ID, `load(spec, ...)` and `convert(row)`.

`load` yields `RawRow`s (with file and line) from a local file/folder or a hub id; `convert` turns one
row into a unified `Trajectory` or raises `RowRejected` with a reason code. Each module's docstring says
how its splits / ids map to domains.
"""

from __future__ import annotations

from types import ModuleType

from openmanus_lite.data.sources import agent_flan, agentbank, agentinstruct, agenttraj_l, openmanus_rl, taskcraft
from openmanus_lite.data.sources.base import InputError, RawRow, RowRejected, read_rows

SOURCES: dict[str, ModuleType] = {
    m.NAME: m for m in (agentinstruct, agent_flan, agenttraj_l, agentbank, taskcraft, openmanus_rl)
}
"""Source name -> converter module."""

ALIASES: dict[str, str] = {
    "agentflan": "agent_flan", "agent-flan": "agent_flan", "agenttraj": "agenttraj_l", "agenttraj-l": "agenttraj_l",
    "openmanus": "openmanus_rl", "openmanus-rl": "openmanus_rl", "agentinstruct_rekeyed": "agentinstruct",
}


def get_source(name: str) -> ModuleType:
    """The converter module for a source name (or a known alias)."""
    key = ALIASES.get(name.lower(), name.lower())
    if key not in SOURCES:
        raise KeyError(f"unknown source {name!r}; known sources: {sorted(SOURCES)}")
    return SOURCES[key]


__all__ = ["SOURCES", "ALIASES", "get_source", "InputError", "RawRow", "RowRejected", "read_rows"]

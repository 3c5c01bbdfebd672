"""AgentBank (Solaris99/AgentBank): trajectories over 16 tasks, one hub config per task.

Schema: `{"id": str, "conversations": [{"from": "human"|"gpt"|"system", "value": str}]}` (some configs
add fields such as `game_file` or `meta_information`, kept out of the trajectory). There are no loss
flags; they are inferred (see `normalize`). Locally, a folder with one file (or subfolder) per config is
read the same way. The domain is `CONFIG_DOMAINS` of the config; other configs (`rearrange`) are `other`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from openmanus_lite.data.sources.base import RawRow, read_rows
from openmanus_lite.data.sources.normalize import conversation_trajectory, require_str
from openmanus_lite.schema import Trajectory

NAME = "agentbank"
HUB_ID = "Solaris99/AgentBank"

CONFIG_DOMAINS: dict[str, str] = {config: label for label, configs in {
    "household": ("alfworld", "alfred"),
    "ecommerce": ("webshop",),
    "web": ("mind2web", "webarena"),
    "os": ("intercode_bash",),
    "db": ("intercode_sql", "spider", "bird"),
    "math": ("gsm8k", "math", "mathqa", "svamp", "theoremqa"),
    "qa": ("hotpotqa", "triviaqa", "strategyqa", "ecqa", "iqa", "openbookqa"),
    "code": ("apps", "humaneval", "mbpp", "mbpp_before"),
}.items() for config in configs}

QA_LABELS = ("qa", "math", "code")


def domain_for(config: str | None) -> str:
    return CONFIG_DOMAINS.get(config or "", "other")


def load(spec: str = HUB_ID, *, splits: list[str] | None = None, config: str | None = None) -> Iterator[RawRow]:
    """A local file/folder (file or subfolder names are configs), or hub configs: `config`, else each of
    `splits` (on the hub every task is a config with a single `train` split)."""
    if config is None and splits and not Path(spec).exists():
        return (row for cfg in splits for row in read_rows(spec, NAME, splits=["train"], config=cfg))
    return read_rows(spec, NAME, splits=splits, config=config)


def convert(row: RawRow) -> Trajectory:
    rid, domain = require_str(row, "id"), domain_for(row.split)
    return conversation_trajectory(row, NAME, rid, domain, tid=f"{NAME}/{row.split or 'data'}/{rid}",
                                   final_text_as_answer=domain in QA_LABELS)

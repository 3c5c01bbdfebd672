"""TaskCraft (`pure_qa.jsonl`): verified multi-hop questions with their answers, not trajectories.

Schema: `{"query": str, "golden_answer": str, "valid_hop": int, "tool": str, "domain": str}` (`answer` is
accepted for `golden_answer`, as in the dataset card's example; `domain` is a topic). Each row becomes a
two-turn `qa` trajectory whose thought is a template, as in the environments' expert trajectories; `to_task`
gives the row as a `Task` for the environments and evaluation.
"""

from __future__ import annotations

from collections.abc import Iterator

from openmanus_lite.data.sources.base import RawRow, RowRejected, read_rows
from openmanus_lite.data.sources.normalize import attach_actions, require_str
from openmanus_lite.react import Action, format_action, format_turn
from openmanus_lite.schema import Task, Trajectory, Turn

NAME = "taskcraft"
HUB_ID = "PersonalAILab/TaskCraft"
HUB_FILE = "pure_qa.jsonl"
DOMAIN = "qa"

INSTRUCTION = (
    "Answer the question. Reply in this format:\nThink: <your reasoning>\nAct: answer(<your answer>)\n\nQuestion: "
)


def load(spec: str = HUB_ID, *, splits: list[str] | None = None, config: str | None = None) -> Iterator[RawRow]:
    """A local `pure_qa.jsonl` (or folder), or the hub repository's `pure_qa.jsonl`."""
    return read_rows(spec, NAME, splits=splits, config=config, data_files=None if config else HUB_FILE)


def _fields(row: RawRow) -> tuple[str, str, int, dict[str, str]]:
    """(question, answer, hops, {"tool", "topic"})."""
    data = row.data
    query = require_str(row, "query").strip()
    gold = require_str(row, "golden_answer", "answer").strip()
    hop = data.get("valid_hop", 1)
    if isinstance(hop, str) and hop.strip().isdigit():
        hop = int(hop)
    if not isinstance(hop, int) or isinstance(hop, bool) or hop < 0:
        raise RowRejected(row, "valid_hop", f"expected a non-negative integer, got {hop!r}", "schema.bad_type")
    tool, topic = data.get("tool") or "", data.get("domain") or ""
    for field, value in (("tool", tool), ("domain", topic)):
        if not isinstance(value, str):
            raise RowRejected(row, field, "expected a string", "schema.bad_type")
    return query, gold, hop, {"tool": tool, "topic": topic}


def _rid(row: RawRow) -> str:
    data_id = row.data.get("id")
    return str(data_id) if data_id not in (None, "") else f"{row.split or 'pure_qa'}-{row.line}"


def convert(row: RawRow) -> Trajectory:
    query, gold, hop, extra = _fields(row)
    hops = f"{hop}-hop" if hop else "direct"
    thought = f"This is a {hops} question; I have verified the facts it needs and can answer."
    action = Action("answer", gold)
    reply = format_turn(thought, format_action(action))
    messages = [Turn("user", INSTRUCTION + query, False), Turn("assistant", reply, True)]
    rid = _rid(row)
    meta = {"train_flags": "inferred", "templated_thought": True, "valid_hop": hop, **extra,
            "source_id": rid, "split": row.split, "file": row.file, "line": row.line}
    return attach_actions(Trajectory(f"{NAME}/{rid}", NAME, DOMAIN, messages, meta), {1: (reply, action)})


def to_task(row: RawRow) -> Task:
    """The row as an environment/evaluation task, its difficulty by hops."""
    query, gold, hop, extra = _fields(row)
    difficulty = "easy" if hop <= 1 else "medium" if hop == 2 else "hard"
    return Task(id=f"{NAME}/{_rid(row)}", domain=DOMAIN, instruction=query, answer=gold, difficulty=difficulty,
                meta={"valid_hop": hop, **extra})

"""The records every part of the kit exchanges, as dataclasses with a lossless JSON round trip.

Validation errors name the record and the field, because a user with 50k rows needs to find the bad one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from openmanus_lite.errors import UserError

DOMAINS: tuple[str, ...] = ("os", "db", "web", "kg", "household", "ecommerce")
"""The six task domains of the OpenManus-RL recipe."""

EXTRA_LABELS: tuple[str, ...] = ("tool", "game", "science", "math", "qa", "code", "other")
"""Honest labels for records that fit none of the six domains (API tool use, games, ...)."""

ROLES: tuple[str, ...] = ("system", "user", "assistant")


class SchemaError(UserError):
    """A record does not follow the unified schema; the message names record and field."""


@dataclass
class Turn:
    """One message. `train` is the per-turn loss flag and may only be true on assistant turns."""

    role: str
    content: str
    train: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"role": self.role, "content": self.content, "train": self.train}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Turn":
        return cls(role=d.get("role"), content=d.get("content"), train=bool(d.get("train", False)))


@dataclass
class Trajectory:
    """A whole conversation in the unified ReAct format, labelled with source and domain."""

    id: str
    source: str
    domain: str
    messages: list[Turn]
    meta: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> "Trajectory":
        """Raise SchemaError naming the record and field on the first problem found."""
        where = f"trajectory {self.id!r}"
        for name in ("id", "source"):
            if not isinstance(value := getattr(self, name), str) or not value:
                raise SchemaError(f"{where}: field '{name}' must be a non-empty string")
        if self.domain not in DOMAINS + EXTRA_LABELS:
            raise SchemaError(f"{where}: field 'domain' is {self.domain!r}; expected one of {DOMAINS + EXTRA_LABELS}")
        if not self.messages:
            raise SchemaError(f"{where}: field 'messages' is empty")
        for i, t in enumerate(self.messages):
            if not isinstance(t, Turn):
                raise SchemaError(f"{where}: messages[{i}] is {type(t).__name__}, not a Turn")
            if t.role not in ROLES:
                raise SchemaError(f"{where}: messages[{i}].role is {t.role!r}; expected one of {ROLES}")
            if not isinstance(t.content, str):
                raise SchemaError(f"{where}: messages[{i}].content must be a string, got {type(t.content).__name__}")
            if t.train and t.role != "assistant":
                raise SchemaError(f"{where}: messages[{i}].train is true on a {t.role!r} turn; only assistant turns train")
        if not isinstance(self.meta, dict):
            raise SchemaError(f"{where}: field 'meta' must be a dict")
        return self

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "source": self.source, "domain": self.domain,
                "messages": [t.to_dict() for t in self.messages], "meta": self.meta}

    @classmethod
    def from_dict(cls, d: dict[str, Any], validate: bool = True) -> "Trajectory":
        if not isinstance(d, dict):
            raise SchemaError(f"trajectory record must be a JSON object, got {type(d).__name__}")
        rid = d.get("id", "<no id>")
        for key in ("id", "source", "domain", "messages"):
            if key not in d:
                raise SchemaError(f"trajectory {rid!r}: missing field {key!r}")
        if not isinstance(d["messages"], list):
            raise SchemaError(f"trajectory {rid!r}: field 'messages' must be a list")
        msgs = []
        for i, m in enumerate(d["messages"]):
            if not isinstance(m, dict):
                raise SchemaError(f"trajectory {rid!r}: messages[{i}] must be an object")
            msgs.append(Turn.from_dict(m))
        traj = cls(id=d["id"], source=d["source"], domain=d["domain"], messages=msgs, meta=dict(d.get("meta") or {}))
        return traj.validate() if validate else traj

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)

    @classmethod
    def from_json(cls, line: str) -> "Trajectory":
        return cls.from_dict(json.loads(line))

    def to_messages(self) -> list[dict[str, str]]:
        """The plain `messages` list TRL's chat templates consume (train flags dropped)."""
        return [{"role": t.role, "content": t.content} for t in self.messages]


@dataclass
class Task:
    """One environment task as plain data, so suites can be frozen to JSON files; `spec` is all the environment
    needs to rebuild the task's world deterministically."""

    id: str
    domain: str
    instruction: str
    spec: dict[str, Any] = field(default_factory=dict)
    answer: Any = None
    difficulty: str = "easy"
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "domain": self.domain, "instruction": self.instruction, "spec": self.spec,
                "answer": self.answer, "difficulty": self.difficulty, "meta": self.meta}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Task":
        for key in ("id", "domain", "instruction"):
            if key not in d:
                raise SchemaError(f"task {d.get('id', '<no id>')!r}: missing field {key!r}")
        return cls(id=d["id"], domain=d["domain"], instruction=d["instruction"], spec=dict(d.get("spec") or {}),
                   answer=d.get("answer"), difficulty=d.get("difficulty", "easy"), meta=dict(d.get("meta") or {}))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, sort_keys=True)

    @classmethod
    def from_json(cls, line: str) -> "Task":
        return cls.from_dict(json.loads(line))


@dataclass
class StepResult:
    """What `Env.step` returns; `info` always has `parsed` and `valid`, on the final step `success` and `score`."""

    observation: str
    reward: float
    done: bool
    info: dict[str, Any] = field(default_factory=dict)

"""An environment's actions as typed tool methods, for `GRPOTrainer(environment_factory=...)`.

TRL 1.15 makes one instance per rollout, calls `reset(**row)` and exposes every public method (type hints + the
Google-style docstring) as a tool. Each tool steps the same in-process environment as the multi-turn mode with the
unified ReAct action text, so task, checker and rewards are identical. The verdict is kept in attributes (which do
not become tools) named like the reward columns. Needs a tool-calling template (`models.qwen25_chat_template()`).
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from openmanus_lite.envs import TurnLimits, make_env, turn_limit
from openmanus_lite.react import format_turn
from openmanus_lite.schema import Task
from openmanus_lite.train.grpo_data import task_row

TOOL_INSTRUCTIONS = (
    "Act only by calling the tools you are given, one call at a time; each call returns what happened. "
    "When you know the answer (or the task is done), call the `answer` tool."
)
THOUGHT = "Calling a tool."


def _tool_doc(summary: str, args: dict[str, str], returns: str):
    """Give a tool method the Google-style docstring TRL builds the model's tool schema from: the summary, each
    argument's description, what it returns."""

    def describe(method):
        lines = [summary, ""]
        if args:
            lines += ["Args:", *(f"    {name}: {text}" for name, text in args.items()), ""]
        method.__doc__ = "\n".join([*lines, "Returns:", f"    {returns}"])
        return method

    return describe


_ENTITY = 'An entity name or a variable like "#0".'
_VARIABLE = 'A variable like "#0".'


class ToolEnv:
    """Base adapter: one episode of one domain behind tool methods (subclasses add the tools)."""

    domain_name: str = ""
    max_turns: int | None = None

    def __init__(self):
        self._env = None
        self.domain = self.domain_name
        self._record({})

    # TRL hooks (not tools)
    def reset(self, **row: Any) -> str | None:
        """Start the episode of the row's `task` (JSON); the prompt already holds the task text."""
        raw = row.get("task")
        if raw is None:
            raise ValueError("tool-mode rows need a 'task' column (JSON of a Task); build them with tool_dataset()")
        task = Task.from_dict(json.loads(raw) if isinstance(raw, str) else dict(raw))
        if self.domain_name and task.domain != self.domain_name:
            raise ValueError(f"{type(self).__name__} plays {self.domain_name!r} tasks, got a {task.domain!r} task")
        self._env = make_env(task.domain, max_turns=self.max_turns)
        self._env.reset(task)
        self.domain = task.domain
        self._record({})
        return None

    def _record(self, info: dict[str, Any]) -> None:
        """The reward columns: the last step's verdict and the episode's counts."""
        self.env_outcome, self.env_success = float(info.get("score", 0.0)), bool(info.get("success", False))
        self.invalid_actions = self._env.invalid_actions if self._env is not None else 0
        self.num_turns = self._env.turn if self._env is not None else 0

    def _act(self, action: str) -> str:
        if self._env is None:
            return "No episode is running."
        if self._env.done:
            return "The episode is over. Do not call more tools."
        step = self._env.step(format_turn(THOUGHT, action))
        self._record(step.info)
        return step.observation + (" The episode is over." if step.done else "")

    @_tool_doc("Submit the final answer and end the episode.",
               {"answer": "The answer to the task, e.g. a number, a name, or a list like [1, 2]."},
               "Whether the answer was submitted.")
    def answer(self, answer: str) -> str:
        return self._act(f"answer({answer})")


class OSToolEnv(ToolEnv):
    """Linux shell tasks in a virtual filesystem."""

    domain_name = "os"

    @_tool_doc("Run one shell command line in the task's virtual Linux machine.",
               {"command": 'The command line, e.g. "ls -l /home | wc -l".'}, "The command's output.")
    def bash(self, command: str) -> str:
        return self._act(f"bash\n```bash\n{command}\n```")


class DBToolEnv(ToolEnv):
    """SQL questions and edits on an in-memory SQLite database."""

    domain_name = "db"

    @_tool_doc("Run one SQL statement on the task's database.",
               {"query": 'The SQL statement, e.g. "SELECT COUNT(*) FROM employees".'},
               "The fetched rows or the error message.")
    def sql(self, query: str) -> str:
        return self._act(f"sql\n```sql\n{query}\n```")


class KGToolEnv(ToolEnv):
    """Questions over a knowledge graph, answered with the AgentBench KG tools."""

    domain_name = "kg"

    @_tool_doc("List the relations of an entity or a variable.", {"entity": _ENTITY}, "The relations.")
    def get_relations(self, entity: str) -> str:
        return self._act(f"get_relations({entity})")

    @_tool_doc("Follow a relation from an entity or variable; the result is stored as a new variable.",
               {"entity": _ENTITY, "relation": "One of the relations get_relations listed."},
               "The new variable and what it holds.")
    def get_neighbors(self, entity: str, relation: str) -> str:
        return self._act(f"get_neighbors({entity}, {relation})")

    @_tool_doc("Intersect two variables of the same type; the result is a new variable.",
               {"first": _VARIABLE, "second": 'A variable like "#1".'}, "The new variable.")
    def intersection(self, first: str, second: str) -> str:
        return self._act(f"intersection({first}, {second})")

    @_tool_doc("List the numeric attributes of the entities in a variable.", {"variable": _VARIABLE}, "The attributes.")
    def get_attributes(self, variable: str) -> str:
        return self._act(f"get_attributes({variable})")

    @_tool_doc("The entity of a variable with the largest value of an attribute.",
               {"variable": _VARIABLE, "attribute": "One of the attributes get_attributes listed."},
               "The new variable holding that entity.")
    def argmax(self, variable: str, attribute: str) -> str:
        return self._act(f"argmax({variable}, {attribute})")

    @_tool_doc("The entity of a variable with the smallest value of an attribute.",
               {"variable": _VARIABLE, "attribute": "One of the attributes get_attributes listed."},
               "The new variable holding that entity.")
    def argmin(self, variable: str, attribute: str) -> str:
        return self._act(f"argmin({variable}, {attribute})")

    @_tool_doc("Count the entities of a variable.", {"variable": _VARIABLE}, "The new variable holding the count.")
    def count(self, variable: str) -> str:
        return self._act(f"count({variable})")


class WebToolEnv(ToolEnv):
    """Browsing a small website to find an answer or fill a form."""

    domain_name = "web"

    @_tool_doc("Follow a link or press a button shown on the page.", {"link": "The link or button text."},
               "The new page.")
    def click(self, link: str) -> str:
        return self._act(f"click[{link}]")

    @_tool_doc("Search the site.", {"query": "The search words."}, "The results page.")
    def search(self, query: str) -> str:
        return self._act(f"search[{query}]")

    @_tool_doc("Type text into a form field of the page.", {"field": "The field name.", "text": "The text to type."},
               "The page after typing.")
    def type_text(self, field: str, text: str) -> str:
        return self._act(f"type[{field}][{text}]")

    @_tool_doc("Go back to the previous page.", {}, "The previous page.")
    def back(self) -> str:
        return self._act("back[]")


class ShopToolEnv(ToolEnv):
    """Online shopping: find the product that matches the instruction and buy it."""

    domain_name = "ecommerce"

    @_tool_doc("Search the store (works on the search page).", {"query": "The search words."}, "The results page.")
    def search(self, query: str) -> str:
        return self._act(f"search[{query}]")

    @_tool_doc('Click a button, product id or option shown on the page (e.g. "Buy Now").',
               {"target": "The button, product id or option text."}, "The new page.")
    def click(self, target: str) -> str:
        return self._act(f"click[{target}]")


class HouseholdToolEnv(ToolEnv):
    """An ALFWorld-style household: move objects between receptacles."""

    domain_name = "household"

    @_tool_doc("Do one household command.",
               {"command": 'e.g. "go to fridge 1", "open cabinet 2", "take mug 1 from countertop 1", '
                           '"put mug 1 in/on cabinet 2", "heat mug 1 with microwave 1", "look", "inventory".'},
               "What happened.")
    def act(self, command: str) -> str:
        return self._act(command)


TOOL_ENVS: dict[str, type[ToolEnv]] = {
    cls.domain_name: cls for cls in (OSToolEnv, DBToolEnv, KGToolEnv, WebToolEnv, ShopToolEnv, HouseholdToolEnv)
}


def tool_env_class(domain: str, max_turns: TurnLimits = None) -> type[ToolEnv]:
    """The adapter class for a domain; a subclass with `max_turns` set when given (a number or {domain: turns})."""
    if domain not in TOOL_ENVS:
        raise KeyError(f"no tool adapter for domain {domain!r}; available: {sorted(TOOL_ENVS)}")
    cls, limit = TOOL_ENVS[domain], turn_limit(max_turns, domain)
    return cls if limit is None else type(cls.__name__, (cls,), {"max_turns": limit, "__doc__": cls.__doc__})


def tool_env_factory(domains: Sequence[str], max_turns: TurnLimits = None):
    """What `GRPOTrainer(environment_factory=...)` takes: one class for one domain, else {domain: class} (rows then
    carry an `environment` column)."""
    classes = {d: tool_env_class(d, max_turns) for d in dict.fromkeys(domains)}
    return next(iter(classes.values())) if len(classes) == 1 else classes


def tool_prompt(task: Task, max_turns: TurnLimits = None) -> list[dict[str, str]]:
    """The user message of a task in tool mode: the domain's intro, how to act, the task."""
    env = make_env(task.domain, max_turns=max_turns)
    env.reset(task)
    text = f"{env.intro.strip()}\n\n{TOOL_INSTRUCTIONS}\n\nTask: {task.instruction}{env._initial_observation()}"
    return [{"role": "user", "content": text}]


def tool_dataset(tasks: Sequence[Task], max_turns: TurnLimits = None):
    """Rows for tool mode (`grpo_data.task_row`), with `environment` when the tasks span several domains (TRL routes
    each row to its domain's adapter by it)."""
    from datasets import Dataset

    if not tasks:
        raise ValueError("no tasks given for tool-mode GRPO")
    for t in tasks:
        tool_env_class(t.domain)  # a domain without a tool adapter fails here, before any training
    multi = len({t.domain for t in tasks}) > 1
    return Dataset.from_list([{**task_row(t, tool_prompt(t, max_turns)), **({"environment": t.domain} if multi else {})}
                              for t in tasks])

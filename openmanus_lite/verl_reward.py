"""A verl custom reward function that grades with this kit's environments and rewards.

Point verl at it with
    custom_reward_function.path=<site-packages>/openmanus_lite/verl_reward.py
    custom_reward_function.name=compute_score
Environment rows (`verl_export`) are replayed in their environment and scored by its checker; trajectory rows hold
a final answer, scored by the `answer_match` reward.
"""

from __future__ import annotations

import re
from typing import Any

from openmanus_lite.rewards.answers import answer_match_reward
from openmanus_lite.schema import Task
from openmanus_lite.search import replay
from openmanus_lite.verl_export import DATA_SOURCE_PREFIX

_ASSISTANT_TURN = re.compile(r"<\|im_start\|>assistant\n(.*?)(?:<\|im_end\|>|$)", re.DOTALL)


def split_assistant_turns(solution_str: str) -> list[str]:
    """The assistant turns of a decoded response: chat-marked segments, else the whole text."""
    return _ASSISTANT_TURN.findall(solution_str or "") or [(solution_str or "").split("<|im_end|>")[0]]


def score_env_response(task_json: str, solution_str: str) -> float:
    """The checker's final score of the response's turns replayed in a fresh environment (0.0 if it does not end)."""
    _, last, _ = replay(Task.from_json(task_json), split_assistant_turns(solution_str))
    return float(last.info.get("score", 0.0)) if last is not None and last.done else 0.0


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None) -> float:
    """verl's reward signature. Never raises on what a model wrote: malformed text scores 0."""
    if data_source.startswith(f"{DATA_SOURCE_PREFIX}/env/"):
        return score_env_response(ground_truth, solution_str)
    value = answer_match_reward([None], [solution_str or ""], solution=[ground_truth])[0]
    return float(value or 0.0)


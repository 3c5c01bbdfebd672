"""A verl custom reward function that grades with this kit's environments and rewards.

Point verl at it with
    custom_reward_function.path=<site-packages>/openmanus_lite/verl_reward.py
    custom_reward_function.name=compute_score
Rows written by `verl_export` carry their grader: environment rows hold the whole task as
JSON in `ground_truth` (the environment replays the response and its checker scores it);
trajectory rows hold a final answer, scored by the `answer_match` reward (agent answers:
answer(...), Final Answer: [...], <answer> text; LaTeX golds as open-r1's `accuracy`).
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
    turns = _ASSISTANT_TURN.findall(solution_str or "")
    if turns:
        return turns
    return [(solution_str or "").split("<|im_end|>")[0]]


def score_env_response(task_json: str, solution_str: str) -> float:
    """Replay the response's assistant turns in a fresh environment (`search.replay`, the kit's replay of
    fixed turns); the checker's final score, 0.0 when the turns end before the episode does."""
    _, last, _ = replay(Task.from_json(task_json), split_assistant_turns(solution_str))
    return float(last.info.get("score", 0.0)) if last is not None and last.done else 0.0


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None) -> float:
    """verl's reward signature. Never raises on what a model wrote: malformed text scores 0."""
    if data_source.startswith(f"{DATA_SOURCE_PREFIX}/env/"):
        return score_env_response(ground_truth, solution_str)
    value = answer_match_reward([None], [solution_str or ""], solution=[ground_truth])[0]
    return float(value or 0.0)


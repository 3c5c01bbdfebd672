"""The validation layers: each reason code, and duplicate detection."""

from __future__ import annotations

import pytest

from openmanus_lite.data.checks import (
    REASONS,
    CheckConfig,
    Deduper,
    Validator,
    check_consistency,
    check_grammar,
    check_structure,
    validate,
)
from openmanus_lite.schema import Trajectory, Turn

U, A = "user", "assistant"


def traj(*turns, domain="db", meta=None, tid="t"):
    msgs = [Turn(r, c, t) for r, c, t in turns]
    return Trajectory(tid, "test", domain, msgs, dict(meta or {}))


GOOD = traj((U, "question", False), (A, "Think: look\nAct: sql\n```sql\nSELECT 1\n```", True), (U, "[(1,)]", False),
            (A, "Think: done\nAct: answer([1])", True))


def test_a_good_trajectory_passes():
    assert validate(GOOD) is None


@pytest.mark.parametrize("turns,reason", [
    ((), "structure.empty"),
    (((U, "q", False), ("tool", "x", False), (A, "Think: a\nAct: answer(1)", True)), "structure.bad_role"),
    (((U, "q", False), ("system", "s", False), (A, "Think: a\nAct: answer(1)", True)), "structure.misplaced_system"),
    (((A, "Think: a\nAct: answer(1)", True),), "structure.starts_with_assistant"),
    (((U, "q", False), (U, "q2", False), (A, "Think: a\nAct: answer(1)", True)), "structure.not_alternating"),
    (((U, "q", False), (A, "  ", True)), "structure.empty_turn"),
    (((U, " ", False), (A, "Think: a\nAct: answer(1)", True)), "structure.empty_turn"),
    (((U, "q", False), (A, "Think: a\nAct: answer(1)", True), (U, "more", False)), "structure.ends_with_user"),
    (((U, "q", True), (A, "Think: a\nAct: answer(1)", True)), "structure.train_on_non_assistant"),
    (((U, "q", False), (A, "Think: a\nAct: answer(1)", False)), "structure.nothing_to_train"),
])
def test_structure_reasons(turns, reason):
    assert check_structure(traj(*turns)).reason == reason


def test_grammar_reasons():
    free = traj((U, "q", False), (A, "I would look at the table first.", True), meta={"free_text_turns": [1]})
    assert check_grammar(free).reason == "grammar.free_text"
    assert check_grammar(free, allow_free_text=True) is None
    source_style = traj((U, "q", False), (A, "Thought: x\nAction: Operation\n```sql\nSELECT 1\n```", True))
    assert check_grammar(source_style).reason == "grammar.not_unified"
    bad_sql = traj((U, "q", False), (A, "Think: x\nAct: sql\nSELECT 1", True))
    assert check_grammar(bad_sql).reason == "grammar.unparsed"
    wrong_kind = traj((U, "q", False), (A, "Think: x\nAct: bash\n```bash\nls\n```", True))
    assert check_grammar(wrong_kind).reason == "grammar.wrong_action_kind"
    # outside the six domains any action of the source's own action space is fine
    assert check_grammar(traj((U, "q", False), (A, "Think: x\nAct: c h o c k", True), domain="game")) is None
    # turns that do not train are not judged (acknowledgements, few-shot demos)
    assert check_grammar(traj((U, "q", False), (A, "Ok.", False), (U, "task", False),
                              (A, "Think: x\nAct: answer([1])", True))) is None


def test_consistency_reasons():
    no_answer = traj((U, "q", False), (A, "Think: x\nAct: sql\n```sql\nSELECT 1\n```", True))
    assert check_consistency(no_answer).reason == "consistency.missing_final_answer"
    assert check_consistency(traj((U, "q", False), (A, "Think: x\nAct: sql\n```sql\nSELECT 1\n```", True),
                                  meta={"answer_optional": True})) is None
    after = traj((U, "q", False), (A, "Think: x\nAct: answer([1])", True), (U, "ok?", False),
                 (A, "Think: y\nAct: answer([2])", True))
    assert check_consistency(after).reason == "consistency.action_after_answer"
    demo_then_task = traj((U, "q", False), (A, "Think: x\nAct: answer(#0)", False), (U, "A new question: q2", False),
                          (A, "Think: y\nAct: answer(#1)", True), domain="kg")
    assert check_consistency(demo_then_task) is None
    kg = traj((U, "q", False), (A, "Think: x\nAct: answer(Paris)", True), domain="kg")
    assert check_consistency(kg).reason == "consistency.kg_answer_not_variable"
    assert check_consistency(traj((U, "q", False), (A, "Think: x\nAct: go to desk 1", True), domain="household")) is None


def test_length_limits_in_characters_turns_and_tokens():
    assert Validator(CheckConfig(max_turns=3)).validate(GOOD).reason == "length.too_many_turns"
    assert Validator(CheckConfig(max_chars=20)).validate(GOOD).reason == "length.too_long"
    assert Validator(CheckConfig(max_tokens=5)).validate(GOOD).reason == "length.too_long"

    class CharTokenizer:  # one token per character
        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": list(text)}

    chars = sum(len(m.content) for m in GOOD.messages)
    assert Validator(CheckConfig(max_tokens=chars, tokenizer=CharTokenizer())).validate(GOOD) is None
    assert Validator(CheckConfig(max_tokens=chars - 1, tokenizer=CharTokenizer())).validate(GOOD).reason == "length.too_long"


def test_every_reason_is_documented():
    assert all(code.count(".") == 1 and text for code, text in REASONS.items())


def test_dedup_exact_and_normalized_across_sources():
    d = Deduper("normalized")
    a = traj((U, "Prompt A", False), (A, "Ok.", False), (U, "Task: count rows", False),
             (A, "Think: x\nAct: answer([3])", True), tid="a")
    same = traj((U, "Prompt A", False), (A, "Ok.", False), (U, "Task: count rows", False),
                (A, "Think: x\nAct: answer([3])", True), tid="b")
    other_prompt = traj((U, "Another system prompt", False), (A, "OK. I'll follow.", False),
                        (U, "task:  COUNT rows", False), (A, "Think: x\nAct: answer([3])", True), tid="c")
    different = traj((U, "Prompt A", False), (A, "Ok.", False), (U, "Task: count rows", False),
                     (A, "Think: x\nAct: answer([4])", True), tid="d")
    assert d.check(a) is None
    assert d.check(same).reason == "duplicate.exact" and "a" in d.check(same).detail
    assert d.check(other_prompt).reason == "duplicate.normalized"
    assert d.check(different) is None
    exact_only = Deduper("exact")
    assert exact_only.check(a) is None and exact_only.check(other_prompt) is None
    assert Deduper("none").check(a) is None and Deduper("none").check(a) is None
    with pytest.raises(ValueError):
        Deduper("fuzzy")


def test_cached_actions_are_used_only_while_the_text_is_unchanged():
    from openmanus_lite.data import get_source
    from openmanus_lite.data.sources.base import RawRow

    row = RawRow("agentinstruct", "f", 1, "db", {"id": "db_1", "conversations": [
        {"from": "human", "value": "q"},
        {"from": "gpt", "value": "x\nAction: Operation\n```sql\nSELECT 1\n```", "loss": True},
        {"from": "human", "value": "[(1,)]"},
        {"from": "gpt", "value": "y\nAction: Answer\nFinal Answer: [1]", "loss": True}]})
    t = get_source("agentinstruct").convert(row)
    assert validate(t) is None
    t.messages[3].content = "Think: y\nAct: bash\n```bash\nls\n```"  # edited after conversion
    assert validate(t).reason == "grammar.wrong_action_kind"

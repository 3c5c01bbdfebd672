import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from openmanus_lite.schema import DOMAINS, EXTRA_LABELS, SchemaError, StepResult, Task, Trajectory, Turn


def _traj(**kw):
    base = dict(
        id="agentinstruct/os_1",
        source="agentinstruct",
        domain="os",
        messages=[Turn("user", "count files"), Turn("assistant", "Think: x\nAct: answer(3)", True)],
        meta={"k": [1, 2]},
    )
    base.update(kw)
    return Trajectory(**base)


def test_domains_are_the_six():
    assert DOMAINS == ("os", "db", "web", "kg", "household", "ecommerce")
    assert "tool" in EXTRA_LABELS and "game" in EXTRA_LABELS


def test_json_round_trip_is_lossless():
    t = _traj()
    back = Trajectory.from_json(t.to_json())
    assert back == t
    assert json.loads(t.to_json())["messages"][1]["train"] is True


def test_to_messages_is_what_trl_consumes():
    assert _traj().to_messages() == [
        {"role": "user", "content": "count files"},
        {"role": "assistant", "content": "Think: x\nAct: answer(3)"},
    ]


@pytest.mark.parametrize(
    "kw, fragment",
    [
        (dict(messages=[]), "'messages' is empty"),
        (dict(domain="cooking"), "field 'domain'"),
        (dict(messages=[Turn("robot", "hi")]), "messages[0].role"),
        (dict(messages=[Turn("user", "hi", True)]), "messages[0].train"),
        (dict(messages=[Turn("user", None)]), "messages[0].content"),
        (dict(id=""), "field 'id'"),
    ],
)
def test_invalid_records_name_record_and_field(kw, fragment):
    with pytest.raises(SchemaError) as e:
        _traj(**kw).validate()
    assert fragment in str(e.value)


def test_from_dict_reports_missing_field():
    with pytest.raises(SchemaError, match="'x/1': missing field 'domain'"):
        Trajectory.from_dict({"id": "x/1", "source": "s", "messages": []})


turns = st.builds(
    lambda role, content, train: Turn(role, content, train and role == "assistant"),
    st.sampled_from(["system", "user", "assistant"]),
    st.text(),
    st.booleans(),
)


@given(
    st.lists(turns, min_size=1, max_size=6),
    st.sampled_from(DOMAINS + EXTRA_LABELS),
    st.dictionaries(st.text(max_size=5), st.integers()),
)
def test_round_trip_property(messages, domain, meta):
    t = Trajectory("id/1", "src", domain, messages, meta)
    assert Trajectory.from_json(t.to_json()) == t


def test_task_round_trip():
    task = Task("db/easy/3", "db", "How many?", spec={"rows": [[1, "a"]]}, answer=["3"], difficulty="easy")
    assert Task.from_json(task.to_json()) == task
    with pytest.raises(SchemaError, match="missing field 'instruction'"):
        Task.from_dict({"id": "t", "domain": "db"})


def test_step_result_defaults():
    assert StepResult("obs", 0.0, False).info == {}

"""Agent-FLAN-style negative samples: marked, valid, and teaching the right thing."""

from __future__ import annotations

import random

import pytest

from openmanus_lite.data import MergeConfig, SourceSpec, Validator, merge
from openmanus_lite.data.negatives import (
    CORRECTION,
    INVALID_ACTIONS,
    invalid_action_sample,
    make_negatives,
    no_tool_needed_sample,
)
from openmanus_lite.paths import SAMPLES_DIR
from openmanus_lite.react import parse_step
from openmanus_lite.schema import DOMAINS


@pytest.fixture(scope="module")
def six_domain_trajs():
    specs = [SourceSpec(n, str(SAMPLES_DIR / n)) for n in ("agentinstruct", "agenttraj_l", "agentbank")]
    return [t for t in merge(specs, MergeConfig(split_ratios=(1, 0, 0))).trajectories if t.domain in DOMAINS]


def test_every_domain_has_invalid_actions_that_parse_in_it():
    for domain in DOMAINS:
        for action, error in INVALID_ACTIONS[domain]:
            assert isinstance(parse_step(f"Think: x\nAct: {action}", domain), tuple), (domain, action)
            assert error


def test_invalid_action_sample_inserts_error_and_recovery(six_domain_trajs):
    rng = random.Random(0)
    validator = Validator()
    for traj in six_domain_trajs:
        neg = invalid_action_sample(traj, rng)
        assert neg is not None and validator.validate(neg) is None, (traj.id, validator.validate(neg))
        at = neg.meta["negative"]["inserted_at"]
        wrong, error, fixed = neg.messages[at:at + 3]
        assert wrong.role == "assistant" and not wrong.train  # the mistake is never learnt
        assert error.role == "user" and error.content in {e for _, e in INVALID_ACTIONS[traj.domain]}
        assert fixed.train and CORRECTION in fixed.content
        assert parse_step(fixed.content)[0].action == parse_step(traj.messages[at].content)[0].action
        assert len(neg.messages) == len(traj.messages) + 2 and neg.id == f"{traj.id}#neg-invalid_action"


def test_no_tool_needed_sample_answers_directly(six_domain_trajs):
    rng = random.Random(1)
    for traj in six_domain_trajs:
        neg = no_tool_needed_sample(traj, rng)
        assert Validator().validate(neg) is None, (traj.id, Validator().validate(neg))
        assert neg.messages[-1].train and neg.messages[-1].content.startswith("Think: This question does not need")
        assert sum(m.train for m in neg.messages) == 1
        assert neg.meta["negative"] == {"kind": "no_tool_needed", "from": traj.id}


def test_make_negatives_is_deterministic_and_alternates_kinds(six_domain_trajs):
    a = make_negatives(six_domain_trajs, 0.5, seed=3)
    b = make_negatives(six_domain_trajs, 0.5, seed=3)
    assert [t.to_dict() for t in a] == [t.to_dict() for t in b]
    assert len(a) == round(len(six_domain_trajs) * 0.5)
    assert {t.meta["negative"]["kind"] for t in a} == {"invalid_action", "no_tool_needed"}
    assert make_negatives(six_domain_trajs, 0.0) == []
    assert make_negatives(a, 1.0) == []  # never a negative of a negative
    with pytest.raises(ValueError):
        make_negatives(six_domain_trajs, 1.5)

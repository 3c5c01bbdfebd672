"""`accuracy` gives open-r1's value: a table of cases whose expected values were computed with
open-r1's accuracy_reward code path (math_verify.parse of the gold with first_match, the answer
parsed with open-r1's LatexExtractionConfig, float(verify(gold, answer)), None when the gold does
not parse), and properties on numbers; `answer_match` is where the lenient agent check lives."""

from __future__ import annotations

import warnings
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openmanus_lite import rewards as R
from openmanus_lite.rewards import answers, open_r1

pytest.importorskip("math_verify")

SETTINGS = settings(derandomize=True, deadline=None, max_examples=40, suppress_health_check=list(HealthCheck))

# (gold, completion, open-r1's value); values computed with math-verify as installed here
# (the pinned stack), running open-r1's accuracy_reward logic on each pair.
OPEN_R1_TABLE = [
    # the three cases of issue #32: numeric golds parse, so math_verify decides
    ("0.5", r"The answer is $\boxed{\frac{1}{2}}$", 1.0),
    ("10", r"$\boxed{10\%}$", 1.0),
    ("6", "<answer>\n6\n</answer>", 0.0),  # no LaTeX anchor in the completion: nothing extracted
    # plain numbers as gold
    ("6", r"$\boxed{6}$", 1.0),
    ("6", "<think>\nx\n</think>\n<answer>\n$6$\n</answer>", 1.0),
    ("6", r"\boxed{6}", 1.0),
    ("6", r"$\boxed{7}$", 0.0),
    ("-3", r"$\boxed{-3}$", 1.0),
    ("1,234", r"$\boxed{1234}$", 1.0),
    ("1e3", r"$\boxed{1000}$", 0.0),
    ("2", "The answer is $2$.", 1.0),
    ("42", "answer(42)", 0.0),
    ("$12", r"$\boxed{12}$", 1.0),
    # fractions and decimals
    (r"\frac{63}{400}", r"\boxed{\frac{63}{400}}", 1.0),
    (r"\frac{63}{400}", r"\boxed{0.1575}", 1.0),
    (r"$\frac{63}{400}$", r"$\boxed{\frac{64}{400}}$", 0.0),
    ("3/4", r"$\boxed{0.75}$", 1.0),
    ("0.75", r"$\boxed{\frac{3}{4}}$", 1.0),
    # percentages
    (r"50\%", r"$\boxed{0.5}$", 0.0),
    ("50%", r"$\boxed{50}$", 1.0),
    # intervals, sets, expressions, equations
    ("$[1, 3]$", r"$\boxed{[1,3]}$", 1.0),
    ("$(1, 3)$", r"$\boxed{[1,3]}$", 0.0),  # open vs closed interval
    (r"$\{1, 2\}$", r"$\boxed{\{2, 1\}}$", 1.0),
    ("$x^2$", r"$\boxed{x^{2}}$", 1.0),
    ("$x = 2$", r"$\boxed{2}$", 1.0),
    # golds math_verify does not parse: None, the sample is skipped
    ("Paris", r"$\boxed{Paris}$", None),
    ("Paris", "<answer>\nParis\n</answer>", None),
    ("", r"$\boxed{1}$", None),
    (r"\unparseable{", r"$\boxed{1}$", None),
    ('["a", "b"]', r"$\boxed{a}$", None),
    (r"\sqrt{2}", r"$\boxed{\sqrt{2}}$", None),  # LaTeX without $ or \boxed around it
    (r"\pi", r"$\boxed{3.14159}$", None),
]


@pytest.mark.parametrize("gold, completion, expected", OPEN_R1_TABLE)
def test_accuracy_equals_open_r1(gold, completion, expected):
    assert open_r1.accuracy_reward(completions=[[{"content": completion}]], solution=[gold]) == [expected]


def test_accuracy_one_batch_equals_the_table():
    comps = [[{"role": "assistant", "content": c}] for _, c, _ in OPEN_R1_TABLE]
    got = open_r1.accuracy_reward(prompts=None, completions=comps, solution=[g for g, _, _ in OPEN_R1_TABLE])
    assert got == [e for _, _, e in OPEN_R1_TABLE]


def test_issue_examples_differ_from_answer_match():
    golds = ["0.5", "10", "6"]
    comps = [r"The answer is $\boxed{\frac{1}{2}}$", r"$\boxed{10\%}$", "<answer>\n6\n</answer>"]
    assert open_r1.accuracy_reward(completions=comps, solution=golds) == [1.0, 1.0, 0.0]
    assert answers.answer_match_reward(completions=comps, solution=golds) == [0.0, 0.0, 1.0]


def test_number_golds_are_read_as_their_text_and_other_types_skip_with_a_warning():
    comps = [r"$\boxed{6}$", r"$\boxed{0.5}$", r"$\boxed{6}$"]
    assert open_r1.accuracy_reward(completions=comps, solution=[6, 0.5, float("nan")]) == [1.0, 1.0, None]
    open_r1._warn_gold_type.cache_clear()
    with pytest.warns(UserWarning, match="got a list in column 'solution'.*answer_match"):
        assert open_r1.accuracy_reward(completions=comps[:1], solution=[[6]]) == [None]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once per type
        assert open_r1.accuracy_reward(completions=comps[:1], solution=[[6]]) == [None]
    assert answers.answer_match_reward(completions=comps[:1], solution=[[6]]) == [1.0]


def test_accuracy_skips_counts_the_golds_math_verify_cannot_parse():
    assert R.accuracy_skips(["6", r"$\frac{1}{2}$", "Paris", "", None, 0.5, '["a", "b"]']) == 4
    assert R.accuracy_skips([]) == 0


def test_accuracy_ignores_the_answer_match_columns():
    comps = ["<answer>\n6\n</answer>", r"$\boxed{6}$"]
    plain = open_r1.accuracy_reward(completions=comps, solution=["6", "6"])
    with_cols = open_r1.accuracy_reward(
        completions=comps, solution=["6", "6"], answer_type=["agent", "agent"], answer_ordered=[True, True]
    )
    assert plain == with_cols == [0.0, 1.0]


# --------------------------------------------------------------------------- properties on numbers

integers = st.integers(-10**6, 10**6)
decimals = st.decimals(min_value=-1000, max_value=1000, places=3, allow_nan=False, allow_infinity=False)
fractions = st.tuples(st.integers(1, 999), st.integers(2, 999)).filter(lambda t: t[0] % t[1] != 0)


def boxed(x: str) -> str:
    return f"So the answer is $\\boxed{{{x}}}$."


def score(gold: str, completion: str):
    return open_r1.accuracy_reward(completions=[completion], solution=[gold])[0]


@SETTINGS
@given(integers)
def test_integer_gold(n):
    assert score(str(n), boxed(str(n))) == 1.0
    assert score(str(n), boxed(str(n + 1))) == 0.0
    assert score(str(n), f"<answer>\n{n}\n</answer>") == 0.0  # no LaTeX anchor


@SETTINGS
@given(decimals)
def test_decimal_gold(d):
    text = format(d.normalize(), "f")
    assert score(text, boxed(text)) == 1.0
    assert score(text, boxed(format(d + 1, "f"))) == 0.0


@SETTINGS
@given(fractions)
def test_fraction_gold_equals_its_reduced_form(t):
    p, q = t
    f = Fraction(p, q)
    gold = f"$\\frac{{{p}}}{{{q}}}$"
    assert score(gold, boxed(f"\\frac{{{f.numerator}}}{{{f.denominator}}}")) == 1.0
    assert score(gold, boxed(f"\\frac{{{f.numerator + 1}}}{{{f.denominator}}}")) == 0.0


@SETTINGS
@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=12))
def test_word_gold_is_skipped(word):
    assert score(word, boxed(word)) is None

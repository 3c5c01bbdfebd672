"""Rewards: open-r1's reference cases pinned one by one, the agent path, ReAct and environment
rewards, the registry and the column checks."""

from __future__ import annotations

import math
import pickle
import subprocess
import sys

import pytest

from openmanus_lite import react
from openmanus_lite import rewards as R
from openmanus_lite.eval.plots import plot_reward_distributions
from openmanus_lite.rewards import answers, environment, open_r1, react_format, registry


def conv(text):
    """open-r1's completion shape: one message without a role."""
    return [{"content": text}]


# --------------------------------------------------------------------------- open-r1: format

GOOD = "<think>\nSome reasoning\n</think>\n<answer>\nThe answer\n</answer>"


def test_format_correct():
    assert open_r1.format_reward(completions=[conv(GOOD)]) == [1.0]


@pytest.mark.parametrize(
    "text",
    [
        "<think>Only thinking</think>",
        "<answer>Only answer</answer>",
        "No tags at all",
        "<think>Missing closing</think><answer>Missing closing",
        "<think>Wrong order</answer><answer>Wrong order</think>",
        "<think>Some reasoning</think><answer>The answer</answer>",  # no newlines around the tags
        " <think>\na\n</think>\n<answer>\nb\n</answer>",  # re.match anchors at the first character
        "<think>\na\n</think>\n<answer>\nb\n</answer> trailing",
        "",
    ],
)
def test_format_incorrect(text):
    assert open_r1.format_reward(completions=[conv(text)]) == [0.0]


def test_format_specific_multiline():
    text = (
        "<think>\nI will count each distinct object in the image:\n1. Purple scooter\n2. Red bicycle\n"
        "\nThere are 9 distinct objects in total.\n</think>\n<answer>\n9\n</answer>"
    )
    assert open_r1.format_reward(completions=[conv(text)]) == [1.0]


def test_format_multiline_dollar_quirk_kept():
    # MULTILINE `$` also matches before a newline, so open-r1 accepts text after a line break
    assert open_r1.format_reward(completions=[GOOD + "\nmore text"]) == [1.0]
    assert open_r1.format_reward(completions=["<think>\n\n</think>\n<answer>\n\n</answer>"]) == [1.0]


def test_format_is_the_open_r1_regex():
    import re

    pattern = re.compile(r"^<think>\n.*?\n</think>\n<answer>\n.*?\n</answer>$", re.DOTALL | re.MULTILINE)
    cases = [GOOD, GOOD + "\n", GOOD + "x", "<think>\n\n</think>\n<answer>\n\n</answer>\n</answer>x\n</answer>"]
    for t in cases:
        assert open_r1._format_ok(t) == bool(pattern.match(t)), t


# --------------------------------------------------------------------------- open-r1: tag_count


@pytest.mark.parametrize(
    "text, expected",
    [
        ("<think>\nSome reasoning\n</think>\n<answer>\nThe answer\n</answer>", 1.0),
        ("Some reasoning\n</think>\n<answer>\nThe answer\n</answer>", 0.75),
        ("<think>\nSome reasoning\n<answer>\nThe answer\n</answer>", 0.75),
        ("<think>\nSome reasoning\n</think>\nThe answer\n</answer>", 0.75),
        ("<think>\nSome reasoning\n</think>\n<answer>\nThe answer", 0.75),
        ("Some reasoning\nThe answer", 0.0),
        # two think blocks: both think tags occur twice, so they score nothing
        ("<think>\na\n</think>\n<think>\nb\n</think>\n<answer>\nx\n</answer>", 0.5),
    ],
)
def test_tag_count(text, expected):
    assert open_r1.tag_count_reward(completions=[conv(text)]) == [expected]


def test_multiple_think_blocks_score_lower():
    one = "<think>\na\n</think>\n<answer>\nx\n</answer>"
    two = "<think>\na\n</think>\n<think>\nb\n</think>\n<answer>\nx\n</answer>"
    assert open_r1.tag_count_reward(completions=[one, two]) == [1.0, 0.5]
    assert open_r1.format_reward(completions=[two]) == [1.0]  # format alone does not see the second block


# --------------------------------------------------------------------------- open-r1: accuracy (math path)


def test_accuracy_boxed_fraction():
    assert open_r1.accuracy_reward(completions=[conv(r"\boxed{\frac{63}{400}}")], solution=[r"\frac{63}{400}"]) == [1.0]


def test_accuracy_wrong_answer():
    assert open_r1.accuracy_reward(completions=[conv(r"\boxed{\frac{64}{400}}")], solution=[r"\frac{63}{400}"]) == [0.0]


def test_accuracy_multiple_completions():
    comps = [conv(r"\boxed{\frac{63}{400}}"), conv(r"\boxed{\frac{64}{400}}")]
    assert open_r1.accuracy_reward(completions=comps, solution=[r"\frac{63}{400}"] * 2) == [1.0, 0.0]


def test_accuracy_math_in_answer_tags_and_equivalent_forms():
    sol = r"The result is $\frac{1}{2}$."
    comps = [
        react.format_tagged("half", r"$\frac{2}{4}$"),
        react.format_tagged("decimal", r"$0.5$"),
        "no latex anchor here: 1/2",  # try_extract_without_anchor=False: nothing extracted
    ]
    assert open_r1.accuracy_reward(completions=comps, solution=[sol] * 3) == [1.0, 1.0, 0.0]


def test_accuracy_unparseable_gold_is_skipped():
    assert open_r1.accuracy_reward(completions=[r"\boxed{1}"], solution=[r"\unparseable{"]) == [None]
    assert open_r1.accuracy_reward(completions=["x", "y"], solution=[None, "  "]) == [None, None]


def test_accuracy_positional_call_like_verl():
    assert open_r1.accuracy_reward([None], [r"\boxed{3}"], solution=[r"$3$"]) == [1.0]


# --------------------------------------------------------------------------- answer_match: which path


@pytest.mark.parametrize(
    "solution, path",
    [
        (r"\frac{63}{400}", "math"),
        (r"$x^2$", "math"),
        ("x^2 + 1", "math"),
        (r"The answer is \boxed{5}", "math"),
        ("42", "agent"),
        ("Paris", "agent"),
        ("$12", "agent"),
        ("['$12', '$13']", "agent"),
        ([1, 2], "agent"),
        (3.5, "agent"),
        (None, None),
        ("", None),
        ([], None),
        (float("nan"), None),
    ],
)
def test_answer_match_path(solution, path):
    assert answers.answer_match_path(solution) == path


def test_answer_match_path_override_column():
    assert answers.answer_match_path("42", "math") == "math"
    assert answers.answer_match_path(r"\frac{1}{2}", "agent") == "agent"
    with pytest.raises(ValueError, match="answer_type"):
        answers.answer_match_path("42", "maths")
    # the math path is open-r1's accuracy: a plain number needs a LaTeX anchor in the completion
    comps = ["answer: 42", r"\boxed{42}", "The answer is $42$."]
    got = answers.answer_match_reward(completions=comps, solution=["42"] * 3, answer_type="math")
    assert got == [0.0, 1.0, 1.0]
    assert got == open_r1.accuracy_reward(completions=comps, solution=["42"] * 3)
    # "agent" on a LaTeX gold: compared as text after unwrapping \boxed{}
    got = answers.answer_match_reward(completions=[r"\boxed{x^2}", r"\boxed{x^{2}}"], solution=["x^2"] * 2,
                                answer_type="agent")
    assert got == [1.0, 0.0]


# --------------------------------------------------------------------------- answer_match: agent path


@pytest.mark.parametrize(
    "completion, solution, expected",
    [
        ("Think: done.\nAct: answer(Paris)", "paris", 1.0),
        ("Think: done.\nAct: answer(  New   York )", "new york", 1.0),
        ("Think: done.\nAct: answer(London)", "Paris", 0.0),
        ("Action: Answer\nFinal Answer: [\"Jones\", 3]", [3, "jones"], 1.0),
        ("Action: Answer\nFinal Answer: [\"Jones\", 3]", ["Jones", "4"], 0.0),
        ("Final Answer: [('a', 1), ('b', 2)]", [["b", 2], ["a", 1]], 1.0),
        ("Final Answer: ['8']", "8", 1.0),
        ("Act: answer(3.33)", "3.333333", 1.0),  # rounded to the decimals written
        ("Act: answer(3)", "3.333333", 0.0),  # but not to an integer
        ("Act: answer(1,234.5)", 1234.5, 1.0),
        ("Act: answer(0.30000001)", "0.3", 1.0),
        ("Act: answer(50%)", "50", 1.0),
        ("Act: answer($12)", "12", 1.0),
        ("Act: answer(1/4)", "0.25", 1.0),
        ("<think>\nhm\n</think>\n<answer>\n  \"Blue\". \n</answer>", "blue", 1.0),
        ("so the total is \\boxed{72}", "72", 1.0),
        ("Paris", "Paris", 1.0),  # a one-line completion is its own answer
        ("I think it's Paris\nbut not sure", "Paris", 0.0),  # no answer given
        ("Act: answer(a, b)", ["b", "a"], 1.0),  # a bare list when the gold has several items
        ("Act: answer(Paris, France)", "Paris, France", 1.0),
        ("Act: answer(true)", True, 1.0),
        ("", "x", 0.0),
    ],
)
def test_answer_match_agent_answers(completion, solution, expected):
    assert answers.answer_match_reward(completions=[completion], solution=[solution]) == [expected]


def test_answer_match_order_column():
    comp = "Final Answer: [2, 1]"
    assert answers.answer_match_reward(completions=[comp], solution=[[1, 2]]) == [1.0]
    assert answers.answer_match_reward(completions=[comp], solution=[[1, 2]], answer_ordered=[True]) == [0.0]


def test_answer_match_reads_last_assistant_turn():
    completion = [
        {"role": "assistant", "content": "Think: look.\nAct: sql\n```sql\nSELECT 1\n```"},
        {"role": "user", "content": "[(7,)]"},
        {"role": "assistant", "content": "Think: got it.\nAct: answer([7])"},
    ]
    assert answers.answer_match_reward(completions=[completion], solution=[["7"]]) == [1.0]


def test_answers_match_edge_cases():
    assert answers.answers_match("[1, 2, 2]", [2, 1, 2])
    assert not answers.answers_match("[1, 2]", [1, 2, 2])
    assert answers.answers_match("[\"a, b\", 'c']", ["c", "A, B"])  # quoted items keep their commas
    assert not answers.answers_match("[]", ["x"])


# --------------------------------------------------------------------------- other open-r1 rewards


@pytest.mark.parametrize(
    "content, solution, length, expected",
    [
        (r"\boxed{\frac{63}{400}}", r"\frac{63}{400}", 20, 0.943),
        (r"\boxed{\frac{63}{400}}", r"\frac{63}{400}", 80, 0.547),
        (r"\boxed{\frac{64}{400}}", r"\frac{63}{400}", 20, -0.942),
        (r"\boxed{\frac{64}{400}}", r"\frac{63}{400}", 80, -0.547),
    ],
)
def test_cosine_scaled(content, solution, length, expected):
    f = R.get_reward_func("cosine", max_len=100)
    padded = content + " " * (length - len(content))
    assert f(completions=[conv(padded)], solution=[solution])[0] == pytest.approx(expected, abs=5e-3)


def test_length_reward_open_r1_cases():
    f = R.get_reward_func("length")
    sol = [r"\frac{63}{400}"] * 2
    assert f(completions=[conv(r"\boxed{\frac{63}{400}}"), conv(r"\boxed{\frac{64}{400}}")], solution=sol) == [0, 0]
    r = f(completions=[conv(r"\boxed{\frac{63}{400}}"), conv(r"\boxed{\frac{63}{400}}  " + "x" * 10)], solution=sol)
    assert r[0] == pytest.approx(0.5) and r[0] > r[1]
    mixed = [
        conv(r"\boxed{\frac{63}{400}}"),
        conv(r"\boxed{\frac{63}{400}}  " + "x" * 10),
        conv(r"\boxed{\frac{64}{400}}"),
        conv(r"\boxed{\frac{64}{400}}  " + "x" * 10),
    ]
    r = f(completions=mixed, solution=[r"\frac{63}{400}"] * 4)
    assert r[0] > 0 and r[2] > r[1] >= r[3] and r[2] <= 0 and r[3] <= 0 and r[0] > r[1] and r[2] > r[3]
    # an unparseable gold counts as correct
    r = f(completions=[conv(r"\boxed{answer}"), conv(r"\boxed{answer} " + "x" * 10)], solution=[r"\bad{"] * 2)
    assert r[0] == pytest.approx(0.5) and r[0] > r[1]


@pytest.mark.parametrize(
    "ngram, penalty, text, expected",
    [
        (2, -1.0, "this is a test sentence", 0.0),
        (2, -1.0, "this this this this this", -0.75),
        (2, -1.0, "this is a this is a test", -1 / 3),
        (3, -2.0, "this is a this is a test", -0.4),
        (3, -0.5, "test test test test", -0.25),
        (2, -1.0, "", 0.0),
        (3, -1.0, "two words", 0.0),
        (3, -1.0, "word word word word", -0.5),
        (3, -1.0, "one two one two", 0.0),
        (3, -1.0, "A B C A B C", -0.25),
        (3, -1.0, "A B C A B C E F G A B C A B C", -0.3846),
    ],
)
def test_repetition_penalty(ngram, penalty, text, expected):
    f = R.get_reward_func("repetition_penalty", ngram_size=ngram, max_penalty=penalty)
    assert f(completions=[conv(text)])[0] == pytest.approx(expected, abs=1e-4)


def test_repetition_penalty_rejects_positive_penalty():
    with pytest.raises(ValueError, match="max_penalty 1.5 should not be positive"):
        R.get_reward_func("repetition_penalty", max_penalty=1.5)


def test_soft_overlong_punishment():
    f = R.get_reward_func("soft_overlong_punishment", max_completion_len=100, soft_punish_cache=20)
    assert f(completions=["a"] * 5, completion_ids=[[1] * 50, [1] * 80, [1] * 90, [1] * 100, [1] * 110]) == [
        0.0,
        0.0,
        -0.5,
        -1.0,
        -1.0,
    ]
    with pytest.raises(ValueError, match="max_completion_len"):
        R.get_reward_funcs("soft_overlong_punishment")
    with pytest.raises(ValueError, match="completion_ids"):
        f(completions=["a"])


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Step 1: First step\nStep 2: Second step\nStep 3: Third step", 1.0),
        ("First, we do this.\nSecond, we do that.\nFinally, we conclude.", 1.0),
        ("Step 1: Only step", 1 / 3),
        ("First, we do this.\nFinally, we conclude.", 2 / 3),
        ("Just plain text without any clear steps", 0.0),
    ],
)
def test_reasoning_steps(text, expected):
    assert open_r1.reasoning_steps_reward(completions=[conv(text)]) == [pytest.approx(expected)]


# --------------------------------------------------------------------------- ReAct rewards

GOOD_OS = react.format_turn("List the files first.", react.bash("ls -la"))
GOOD_DB = react.format_turn("Count rows.", react.sql("SELECT COUNT(*) FROM t"))


def episode(*assistant_turns):
    msgs = []
    for i, t in enumerate(assistant_turns):
        msgs.append({"role": "assistant", "content": t})
        msgs.append({"role": "user", "content": f"observation {i}"})
    return msgs[:-1]


@pytest.mark.parametrize(
    "text, domain, expected",
    [
        (GOOD_OS, "os", 1.0),
        (GOOD_OS, None, 1.0),
        (GOOD_OS, "db", 0.0),  # a bash action is not available in the db environment
        (GOOD_DB, "db", 1.0),
        ("Think: done.\nAct: answer(42)", "kg", 1.0),
        ("Act: answer(42)", "kg", 0.5),  # no Think:
        ("Think:\nAct: answer(42)", "kg", 0.5),  # empty reasoning
        ("Thought: done.\nAction: answer(42)", "kg", 0.5),  # another source's style
        ("Final Answer: 42", "kg", 0.5),
        ("Think: hm.\nAct: bash\nls", "os", 0.0),  # no code block
        ("Think: hm.", "os", 0.0),
        ("", "os", 0.0),
        ("Think: the Action: word and ACTION in the thought\nAct: search[red shoes]", "ecommerce", 1.0),
        ("Think: a\n  Act: click[Buy Now]", "ecommerce", 1.0),
    ],
)
def test_react_turn_score(text, domain, expected):
    assert react_format.react_turn_score(text, domain) == expected


def test_react_format_partial_credit_per_turn():
    comp = episode(GOOD_OS, "Act: bash\n```bash\nls\n```", "garbage")
    assert react_format.react_format_reward(completions=[comp], domain=["os"]) == [pytest.approx((1.0 + 0.5 + 0.0) / 3)]
    assert react_format.react_format_reward(completions=[GOOD_OS, [], [{"role": "user", "content": "x"}]]) == [1.0, 0.0, 0.0]


def test_react_tag_count():
    assert react_format.react_tag_count_reward(completions=[GOOD_OS]) == [1.0]
    assert react_format.react_tag_count_reward(completions=["Think: a\nThink: b\nAct: answer(1)"]) == [0.5]
    assert react_format.react_tag_count_reward(completions=[episode(GOOD_OS, "nothing")]) == [0.5]


# --------------------------------------------------------------------------- environment rewards


def test_env_rewards_read_rollout_columns():
    comps = [episode(GOOD_OS, GOOD_OS), episode(GOOD_OS), "x"]
    assert environment.env_outcome_reward(completions=comps, env_outcome=[1.0, 0.25, float("nan")]) == [1.0, 0.25, None]
    assert environment.env_outcome_reward(completions=comps[:2], env_outcome=[7, -3]) == [1.0, 0.0]
    assert environment.env_success_reward(completions=comps, env_success=[True, False, None]) == [1.0, 0.0, None]
    got = environment.invalid_action_reward(completions=comps, invalid_actions=[1, 0, 3], num_turns=[4, 1, 0])
    assert got == [-0.25, 0.0, -1.0]
    # without num_turns, the completion's assistant turns count
    assert environment.invalid_action_reward(completions=comps[:1], invalid_actions=[1]) == [-0.5]


def test_env_rewards_read_trl_environments():
    class Episode:
        invalid_actions = 1
        num_turns = 2
        env_success = True

        def get_reward(self):
            return 0.5

    envs = [Episode()]
    assert environment.env_outcome_reward(completions=["x"], environments=envs) == [0.5]
    assert environment.env_success_reward(completions=["x"], environments=envs) == [1.0]
    assert environment.invalid_action_reward(completions=["x"], environments=envs) == [-0.5]


def test_missing_column_is_a_clear_error():
    with pytest.raises(ValueError, match="'accuracy' needs the column 'solution'"):
        open_r1.accuracy_reward(completions=["x"])
    with pytest.raises(ValueError, match="env_outcome"):
        environment.env_outcome_reward(completions=["x"], solution=["y"])
    with pytest.raises(ValueError, match="2 values for 1 completions"):
        open_r1.accuracy_reward(completions=["x"], solution=["a", "b"])


# --------------------------------------------------------------------------- registry


def test_spec_parsing_and_weights():
    assert R.parse_reward_spec("accuracy:2 format tag_count") == {"accuracy": 2.0, "format": 1.0, "tag_count": 1.0}
    assert R.parse_reward_spec(["accuracy=0.5,format", "tag_count"]) == {"accuracy": 0.5, "format": 1.0, "tag_count": 1.0}
    assert R.parse_reward_spec({"format": 3}) == {"format": 3.0}
    funcs, weights = R.build_rewards("accuracy:2 format tag_count")
    assert [f.__wrapped__ for f in funcs] == [open_r1.accuracy_reward, open_r1.format_reward, open_r1.tag_count_reward]
    assert [f.__name__ for f in funcs] == ["accuracy", "format", "tag_count"]
    assert weights == [2.0, 1.0, 1.0]


@pytest.mark.parametrize(
    "spec, message",
    [
        ("acuracy", "Did you mean accuracy"),
        ("format format", "listed twice"),
        ("format:heavy", "must be a number"),
        ("format:inf", "finite"),
        ("", "no reward named"),
    ],
)
def test_spec_errors(spec, message):
    with pytest.raises((ValueError, KeyError), match=message):
        R.parse_reward_spec(spec)


def test_factory_params():
    (cos,) = R.get_reward_funcs(["cosine"], params={"cosine": {"max_len": 50}})
    assert cos.__name__ == "cosine" and cos.reward_range == (-1.0, 1.0)
    assert pickle.loads(pickle.dumps(cos)).params == cos.params
    with pytest.raises(ValueError, match="not in the spec"):
        R.get_reward_funcs("format", params={"cosine": {}})
    with pytest.raises(ValueError, match="bad parameters"):
        R.get_reward_func("cosine", max_length=3)
    with pytest.raises(ValueError, match="takes no parameters"):
        R.get_reward_func("format", x=1)


def test_register_custom_reward():
    @R.register_reward("test_short_answers", columns=["solution"], bounds=(0.0, 1.0))
    def short(prompts=None, completions=None, **kwargs):
        return [1.0 if len(R.last_assistant_text(c)) < 10 else 0.0 for c in completions]

    try:
        (f,) = R.get_reward_funcs("test_short_answers")
        assert f.__wrapped__ is short and f.__name__ == "test_short_answers"
        assert f(completions=["hi", "x" * 20]) == [1.0, 0.0]
        # re-running the same definition (a notebook cell) replaces it; another function may not
        R.register_reward("test_short_answers", columns=["solution"])(short)
        with pytest.raises(ValueError, match="already registered"):
            R.register_reward("format")(short)
        with pytest.raises(ValueError, match="needs column 'solution'"):
            R.check_reward_columns("test_short_answers", ["prompt"])
        assert any(row["name"] == "test_short_answers" for row in R.describe_rewards())
    finally:
        registry._REGISTRY.pop("test_short_answers", None)


def _fresh_python(code):
    """Run `code` in a new interpreter (a clean sys.modules); the words of its last line (unsloth prints first)."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1].split()


def test_orm_is_found_by_name_with_only_rewards_imported():
    """`orm` lives in preference.orm_reward; the registry imports it when the name is asked for, not before, and
    naming or listing it loads neither the reward model's module nor torch."""
    out = _fresh_python(
        "import sys\n"
        "from openmanus_lite.rewards import describe_rewards, parse_reward_spec\n"
        "ORM = 'openmanus_lite.preference.orm_reward'\n"
        "before = ORM in sys.modules\n"
        "assert parse_reward_spec('orm env_outcome') == {'orm': 1.0, 'env_outcome': 1.0}\n"
        "names = [row['name'] for row in describe_rewards()]\n"
        "heavy = any(m in sys.modules for m in ('openmanus_lite.preference.reward_model', 'torch'))\n"
        "print(before, ORM in sys.modules, 'orm' in names, heavy)\n"
    )
    assert out == ["False", "True", "True", "False"]


def test_grpo_does_not_import_the_reward_models():
    out = _fresh_python("import sys, openmanus_lite.train.grpo\n"
                        "print('openmanus_lite.preference.reward_model' in sys.modules)\n")
    assert out == ["False"]


def test_check_reward_columns():
    R.check_reward_columns("accuracy format tag_count", ["prompt", "solution"])
    R.check_reward_columns("env_outcome invalid_action react_format", ["prompt"], extra_columns=R.ROLLOUT_COLUMNS)
    R.check_reward_columns(["env_outcome"], ["prompt"], extra_columns=["environments"])
    R.check_reward_columns(R.get_reward_funcs("format"), ["prompt"])
    with pytest.raises(ValueError) as e:
        R.check_reward_columns("accuracy env_outcome invalid_action format", ["prompt"])
    msg = str(e.value)
    assert "'accuracy' needs column 'solution'" in msg and "'env_outcome' needs column 'env_outcome'" in msg
    assert "'invalid_action'" in msg and "'format'" not in msg


def test_reward_table():
    table = R.reward_table("format tag_count", [GOOD, "nothing"])
    assert list(table.columns) == ["format", "tag_count"]
    assert table["format"].tolist() == [1.0, 0.0]
    table = R.reward_table(R.get_reward_funcs("accuracy"), ["x"], solution=[None])
    assert math.isnan(table["accuracy"][0])


# --------------------------------------------------------------------------- recorded episodes


def test_expert_episodes_score_full_marks_in_every_domain():
    from openmanus_lite import ExpertPolicy, RandomPolicy, generate_tasks, list_domains, run_episodes

    tasks = [t for d in list_domains() for t in generate_tasks(d, 2, seed=0)]
    expert = R.trajectory_reward_inputs(run_episodes(ExpertPolicy(), tasks, progress=False))
    assert expert["domain"] == [t.domain for t in tasks]
    assert all(expert["env_success"]) and expert["num_turns"][0] >= 1
    R.check_reward_columns("react_format react_tag_count env_outcome invalid_action", list(expert))
    assert react_format.react_format_reward(**expert) == [1.0] * len(tasks)
    assert react_format.react_tag_count_reward(**expert) == [1.0] * len(tasks)
    assert environment.env_outcome_reward(**expert) == [1.0] * len(tasks)
    assert environment.invalid_action_reward(**expert) == [0.0] * len(tasks)
    randoms = R.trajectory_reward_inputs(run_episodes(RandomPolicy(0), tasks, progress=False))
    assert sum(environment.env_outcome_reward(**randoms)) < len(tasks)


def test_plot_reward_distributions():
    import matplotlib

    matplotlib.use("Agg")
    table = R.reward_table("format tag_count react_format", [GOOD, "x", GOOD_OS])
    table["source"] = ["a", "b", "a"]
    fig = plot_reward_distributions(table)
    assert [ax.get_title() for ax in fig.axes[:3]] == ["format", "tag_count", "react_format"]


def test_math_path_works_off_the_main_thread():
    # math_verify's timeouts use signal.alarm, which only the main thread may set
    from concurrent.futures import ThreadPoolExecutor

    comps = [conv(r"\boxed{\frac{63}{400}}"), conv(r"\boxed{\frac{64}{400}}")]
    with ThreadPoolExecutor(1) as pool:
        got = pool.submit(open_r1.accuracy_reward, completions=comps, solution=[r"\frac{63}{400}"] * 2).result()
    assert got == [1.0, 0.0]

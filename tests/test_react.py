import json

from hypothesis import given
from hypothesis import strategies as st

from openmanus_lite import react
from openmanus_lite.react import Action, ParsedTurn, ParseError, parse_action, parse_step, parse_turn

SAMPLES = [
    ("os", react.bash("ls -l /etc | wc -l")),
    ("db", react.sql("SELECT name FROM t WHERE x > 3;")),
    ("ecommerce", react.call("click", "3.25 ounce (pack of 3)")),
    ("web", react.call("type", "email][me@x.org")),
    ("kg", react.tool("get_neighbors", "#0, people.person.nationality")),
    ("household", "take alarmclock 1 from desk 1"),
    ("db", react.answer('["60900"]')),
]


def test_round_trip_every_domain():
    for domain, action in SAMPLES:
        text = react.format_turn("first line\nsecond line", action)
        turn, act = parse_step(text, domain)
        assert turn.thought == "first line\nsecond line"
        assert turn.action == action
        assert act.text == action


thought_text = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1).filter(
    lambda s: s.strip() and "Act:" not in s and "Action:" not in s and "ACTION:" not in s and "Final Answer" not in s
)
arg_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r[]`"), min_size=1).filter(
    lambda s: s.strip() == s and s
)


@given(thought_text, arg_text, st.sampled_from(["search", "click"]))
def test_round_trip_property_call(thought, arg, name):
    text = react.format_turn(thought, react.call(name, arg))
    turn, act = parse_step(text, "ecommerce")
    assert (act.kind, act.name, act.arg) == ("call", name, arg)
    assert turn.thought == thought.strip()


@given(thought_text, arg_text)
def test_round_trip_property_bash(thought, cmd):
    turn, act = parse_step(react.format_turn(thought, react.bash(cmd)), "os")
    assert act == Action("bash", cmd)


def test_source_styles():
    cases = {
        "THOUGHT: find it.\n ACTION: go to desk 1": ("household", Action("command", "go to desk 1")),
        "Thought:\nsearch\n\nAction:\nsearch[red shoes]": ("ecommerce", Action("call", "red shoes", "search")),
        "Join tables.\nAction: Operation\n```sql\nSELECT 1;\n```": ("db", Action("sql", "SELECT 1;")),
        'It is 60900.\nAction: Answer\nFinal Answer: ["60900"]': ("db", Action("answer", '["60900"]')),
        "Thought: done\nFinal Answer: #3": ("kg", Action("answer", "#3")),
        "Thought: x\nAction: get_relations(Gas-generator cycle)": ("kg", Action("tool", "Gas-generator cycle", "get_relations")),
        'Think: a\n\nAct: bash\n\n```bash\nls /etc\n```': ("os", Action("bash", "ls /etc")),
        'Thought: call\nAction: weather_api with Action Input: {"city": "Paris"}': (
            None, Action("tool", '{"city": "Paris"}', "weather_api")),
    }
    for text, (domain, expected) in cases.items():
        parsed = parse_step(text, domain)
        assert not isinstance(parsed, ParseError), (text, parsed)
        assert parsed[1] == expected, text


def test_parse_failures_are_structured_not_raised():
    for bad in ["", "   ", None, 12, "just chatting", "Act: ", "Act: sql\nno block", "Action: Operation\nSELECT 1"]:
        out = parse_step(bad, "db")
        assert isinstance(out, ParseError)
        assert out.message
    wrong_domain = parse_step("Think: x\nAct: go to desk 1", "db")
    assert isinstance(wrong_domain, ParseError) and "Valid forms" in wrong_domain.message


def test_tag_format():
    text = react.format_tagged("2+2 is 4", "4")
    assert react.parse_tagged(text) == ("2+2 is 4", "4")
    assert isinstance(react.parse_tagged("<think>x</think><answer>4</answer>"), ParseError)
    assert react.extract_answer(text) == "4"
    assert react.extract_answer("Think: ok\nAct: answer(Paris)") == "Paris"
    assert react.extract_answer("nothing here") is None


BOILERPLATE = ("Ok.", "OK.", "I've understood your instruction")


def test_every_real_assistant_turn_parses_without_exception(real_samples):
    """Every assistant turn of the real rows parses; all but boilerplate turns parse to an action."""
    failures = []
    count = 0
    for path in sorted(real_samples.glob("*/*.jsonl")):
        if path.parent.name == "agentbench_db":
            continue
        for line in path.read_text().splitlines():
            row = json.loads(line)
            for turn in row["conversations"]:
                role = turn.get("from", turn.get("role"))
                text = turn.get("value", turn.get("content"))
                if role not in ("gpt", "assistant"):
                    continue
                count += 1
                out = parse_turn(text)
                assert isinstance(out, (ParsedTurn, ParseError))
                boilerplate = turn.get("loss") is False or text.startswith(BOILERPLATE)
                if isinstance(out, ParseError) and not boilerplate:
                    failures.append((path.name, text[:80]))
    assert count > 400
    assert failures == []


def test_domain_kinds_cover_all_domains():
    from openmanus_lite.schema import DOMAINS

    assert set(react.DOMAIN_ACTION_KINDS) == set(DOMAINS) == set(react.ACTION_FORMS)
    assert isinstance(parse_action("answer(1)", "household"), Action)


def test_thought_label_fast_path_knows_every_first_character():
    # _strip_thought skips its regex unless the text starts with one of these; the label regex is
    # case-insensitive, so any character that matches (?i)t anywhere in Unicode must be listed
    import re

    first = {c for c in map(chr, range(0x110000)) if re.match(r"(?i)t", c)}
    assert first == set(react._THOUGHT_FIRST)
    for text in ("Thought: a\nAct: b", "  tHiNk :  a\nAct: b", "THOUGHT: a\nACTION: b", "Thinking aloud\nAct: b",
                 "Reasoning\nAct: b", "\u0074hought:x\nAct: b"):
        assert parse_turn(text).thought == react._THOUGHT_PREFIX.sub("", text.split("\nA")[0].strip(), count=1).strip()

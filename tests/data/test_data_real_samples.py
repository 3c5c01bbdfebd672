"""Real public rows (../shared/real_samples) convert without rejection, faithfully."""

from __future__ import annotations

import copy

import pytest

from openmanus_lite.data import MergeConfig, SourceSpec, Validator, get_source, merge
from openmanus_lite.data.sources.base import RawRow
from openmanus_lite.react import Action, ParsedTurn, parse_action, parse_turn

FOLDERS = {  # folder -> converter
    "agentinstruct": "agentinstruct",
    "agentinstruct_rekeyed": "agentinstruct",
    "agenttraj_l": "agenttraj_l",
    "openmanus_rl": "openmanus_rl",
}
AGENTTRAJ_DOMAINS = {
    "babyai": "game", "lmrlgym_maze": "game", "lmrlgym_wordle": "game", "textcraft": "game", "movie": "tool",
    "todo": "tool", "weather": "tool", "sciworld": "science", "sqlgym": "db", "webshop": "ecommerce",
}
SPLIT_DOMAINS = {"os": "os", "db": "db", "kg": "kg", "alfworld": "household", "webshop": "ecommerce",
                 "mind2web": "web"}


def _rows(real_samples, folder):
    module = get_source(FOLDERS[folder])
    return [(module, row) for row in module.load(str(real_samples / folder))]


def _expected_domain(folder: str, row: RawRow) -> str:
    data = row.data
    if folder.startswith("agentinstruct"):
        return SPLIT_DOMAINS[row.split]
    rid = data.get("item_id") or data["id"]
    if folder == "openmanus_rl" and rid.startswith("look_at_obj_in_light"):
        return "household"
    return AGENTTRAJ_DOMAINS[rid.rsplit("_", 1)[0]]


def _turns(data):
    return data["conversations"]


def _text(turn):
    return turn.get("value", turn.get("content"))


def _is_assistant(turn):
    return turn.get("from", turn.get("role")) in ("gpt", "assistant")


def _payload_ok(action, original: str) -> bool:
    """The command / query / call / arguments of `action` appear verbatim in the source turn."""
    if isinstance(action, str):
        return action in original
    if action.kind in ("bash", "sql", "command", "answer"):
        return action.arg in original
    return action.arg in original and action.name.lower() in original.lower()


@pytest.mark.parametrize("folder", sorted(FOLDERS))
def test_every_real_row_converts_faithfully(real_samples, folder):
    validator = Validator()
    rows = _rows(real_samples, folder)
    assert rows
    for module, row in rows:
        assert row.error is None, row.error
        traj = module.convert(row)
        assert validator.validate(traj) is None, (traj.id, validator.validate(traj))
        src = _turns(row.data)
        assert len(traj.messages) == len(src), traj.id  # the original number of turns
        assert traj.domain == _expected_domain(folder, row), traj.id
        for turn, msg in zip(src, traj.messages):
            assert (msg.role == "assistant") == _is_assistant(turn)
            if "loss" in turn and _is_assistant(turn):
                assert msg.train == bool(turn["loss"]), (traj.id, _text(turn)[:60])  # flags as the source set them
            if msg.role == "user":
                assert "\x1b" not in msg.content and "\r" not in msg.content
                if traj.domain == "os":
                    assert "root@" not in msg.content
                continue
            original = _text(turn)
            parsed = parse_turn(original)
            if not isinstance(parsed, ParsedTurn):  # acknowledgements keep their text and do not train
                assert msg.content == original and not msg.train
                continue
            assert msg.content.startswith("Think: ") and "\nAct: " in msg.content
            converted = parse_turn(msg.content)
            action = parse_action(converted.action)
            assert _payload_ok(action if isinstance(action, Action) else converted.action, original), (
                traj.id, original[-200:], msg.content[-200:])


def test_inferred_flags_reproduce_the_source_loss_flags(real_samples):
    """Drop `loss` from the rows that have it: the inferred flags are the same."""
    for folder in ("agentinstruct", "agenttraj_l"):
        for module, row in _rows(real_samples, folder):
            with_flags = module.convert(row)
            data = copy.deepcopy(row.data)
            for turn in data["conversations"]:
                turn.pop("loss", None)
            inferred = module.convert(RawRow(row.source, row.file, row.line, row.split, data))
            assert inferred.meta["train_flags"] == "inferred" and with_flags.meta["train_flags"] == "source"
            assert [m.train for m in inferred.messages] == [m.train for m in with_flags.messages], with_flags.id


def test_rekeyed_few_shot_demos_and_acknowledgements_do_not_train(real_samples):
    by_id = {module.convert(row).id: module.convert(row) for module, row in _rows(real_samples, "agentinstruct_rekeyed")}
    os_traj = by_id["agentinstruct/os_42"]
    assert os_traj.meta["demo_turns"] == 3
    assert [m.train for m in os_traj.messages if m.role == "assistant"] == [False] * 3 + [True] * 4
    kg = by_id["agentinstruct/kg_132"]
    first_task = next(i for i, m in enumerate(kg.messages) if m.content.startswith("A new question"))
    assert not any(m.train for m in kg.messages[:first_task]) and kg.messages[first_task + 1].train
    for traj in by_id.values():
        if traj.domain in ("db", "household", "ecommerce"):
            assert not traj.messages[1].train  # "Ok." / "OK. I'll follow your instructions ..."


def test_terminal_noise_is_removed_but_the_output_kept(real_samples):
    module = get_source("agentinstruct")
    row = next(r for _, r in _rows(real_samples, "agentinstruct_rekeyed") if r.data["id"] == "os_42")
    traj = module.convert(row)
    raw = row.data["conversations"]
    assert "\r\n" in raw[8]["content"] and "\x1b]0;root@" in raw[10]["content"]
    assert traj.messages[8].content == "The output of the OS:\n\nSat Sep  9 09:41:55 UTC 2023"
    assert traj.messages[10].content == "The output of the OS:\n\n262"
    assert traj.messages[12].content == "The output of the OS:"  # empty output stays empty


def test_exact_action_texts_of_known_rows(real_samples):
    rows = {r.data["id"]: (m, r) for m, r in _rows(real_samples, "agentinstruct")}
    module, row = rows["db_460"]
    traj = module.convert(row)
    sql = ("SELECT MAX(`amount`) AS max_amount FROM `account` JOIN `trans` ON `account.account_id` = "
           "`trans.account_id` WHERE `account.date` = '1995-10-08'")
    assert traj.messages[3].content.endswith(f"Act: sql\n```sql\n{sql}\n```")
    assert traj.messages[5].content.endswith('Act: answer(["60900"])')
    module, row = rows["kg_0"]
    assert module.convert(row).messages[3].content.endswith("Act: get_relations(Gas-generator cycle)")
    mind2web = {t.id: t for t in (module.convert(r) for _, r in _rows(real_samples, "agentinstruct_rekeyed"))}
    assert mind2web["agentinstruct/mind2web_72"].messages[1].content.endswith("Answer: B.\nAct: type[Chicago Bears]")
    assert mind2web["agentinstruct/mind2web_96"].messages[1].content.endswith("Answer: B.\nAct: click[]")
    traj_rows = {r.data["item_id"] + str(r.line): (m, r) for m, r in _rows(real_samples, "agenttraj_l")}
    module, row = next(v for k, v in traj_rows.items() if k.startswith("movie_128"))
    assert module.convert(row).messages[3].content.endswith(
        'Act: get_search_movie({"movie_name": "The Polar Express"})')


def test_merging_all_real_samples_rejects_only_the_cross_copy_duplicate(real_samples):
    specs = [SourceSpec(FOLDERS[f], str(real_samples / f), label=f) for f in sorted(FOLDERS)]
    result = merge(specs, MergeConfig(seed=0))
    rejected = {k: n for k, n in result.report.outcomes.items() if k[2] != "kept"}
    assert rejected == {("agentinstruct_rekeyed", "db", "duplicate.exact"): 1}  # db_144 is in both copies
    total = sum(1 for f in FOLDERS for _ in _rows(real_samples, f))
    assert result.report.kept == total - 1
    ids = [t.id for t in result.trajectories]
    assert len(ids) == len(set(ids))  # AgentTraj-L ships lmrlgym_maze_25 twice: both kept, ids made unique

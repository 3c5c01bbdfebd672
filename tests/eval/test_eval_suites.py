"""The frozen benchmark suites: identical on every load, guarded by checksums, never
regenerated, and calibrated (the expert solves every task, random almost none)."""

from __future__ import annotations

import json
import shutil

import pytest

from openmanus_lite.envs import DIFFICULTIES
from openmanus_lite.envs import base as envbase
from openmanus_lite.eval import SuiteError, freeze_suites, list_suites, load_suite, run_benchmark, verify_suites
from openmanus_lite.eval.suites import MANIFEST_NAME, SUITE_DIR, read_manifest
from openmanus_lite.schema import DOMAINS

SUITES = ("dev", "test", "agentbench_db")


def test_every_suite_is_frozen_with_valid_checksums():
    assert set(SUITES) <= set(list_suites())
    assert verify_suites() == []


@pytest.mark.parametrize("name", ["dev", "test"])
def test_split_covers_every_domain_and_difficulty(name):
    suite = load_suite(name)
    cells = suite.groups()
    for domain in DOMAINS:
        assert sum(len(cells.get((domain, d), [])) for d in DIFFICULTIES) >= 50, domain
        assert all(cells.get((domain, d)) for d in DIFFICULTIES), domain
    assert len({t.id for t in suite}) == len(suite)


def test_agentbench_db_suite_holds_the_imported_dev_tasks():
    suite = load_suite("agentbench_db")
    assert suite.domains == ["db"] and len(suite) >= 50
    assert len({t.id for t in suite}) == len(suite)


def test_loads_are_identical_and_never_regenerate(monkeypatch):
    first = {n: [t.to_dict() for t in load_suite(n)] for n in SUITES}

    def no_generation(*a, **k):
        raise AssertionError("a frozen suite must not call a task generator")

    monkeypatch.setattr(envbase, "generate_tasks", no_generation)
    for spec in list(envbase._REGISTRY.values()):
        monkeypatch.setattr(spec, "generate", no_generation)
    again = {n: [t.to_dict() for t in load_suite(n)] for n in SUITES}
    assert again == first


def test_dev_and_test_do_not_overlap():
    key = lambda t: json.dumps([t.instruction, t.spec, t.answer], sort_keys=True)  # noqa: E731
    assert not {key(t) for t in load_suite("dev")} & {key(t) for t in load_suite("test")}


def test_subsets_and_errors():
    sub = load_suite("dev", domains=["db", "kg"], difficulties=["easy"], limit=3)
    assert len(sub) == 6 and set(sub.domains) == {"db", "kg"} and sub.difficulties == ["easy"]
    with pytest.raises(SuiteError, match="unknown suite 'nope'"):
        load_suite("nope")
    with pytest.raises(SuiteError, match="no domain"):
        load_suite("dev", domains=["chess"])
    with pytest.raises(SuiteError, match="no difficulty"):
        load_suite("dev", difficulties=["extreme"])


@pytest.fixture
def suite_copy(tmp_path):
    root = tmp_path / "benchmark"
    shutil.copytree(SUITE_DIR, root)
    return root


def test_an_edited_file_is_refused_by_name(suite_copy):
    rel = read_manifest(suite_copy)["suites"]["dev"][0]
    path = suite_copy / rel
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-1]))  # one task deleted
    with pytest.raises(SuiteError, match=rf"{rel}.*was modified") as e:
        load_suite("dev", root=suite_copy)
    assert "git checkout" in str(e.value)
    assert any(rel in p for p in verify_suites(suite_copy))
    path.unlink()
    with pytest.raises(SuiteError, match="missing"):
        load_suite("dev", root=suite_copy)
    (suite_copy / MANIFEST_NAME).unlink()
    with pytest.raises(SuiteError, match="MANIFEST.json is missing"):
        load_suite("dev", root=suite_copy)


def test_freeze_writes_loadable_suites_and_refuses_to_overwrite(tmp_path):
    m = freeze_suites(tmp_path, domains=["household"], per_cell=2, agentbench_path=False)
    assert set(m["suites"]) == {"dev", "test"}
    dev = load_suite("dev", root=tmp_path)
    assert len(dev) == 6 and dev.tasks[0].id == "dev/household/easy/000"
    assert dev.tasks[0].meta["generated_id"]
    with pytest.raises(SuiteError, match="not regenerated"):
        freeze_suites(tmp_path, domains=["household"], per_cell=2, agentbench_path=False)


@pytest.mark.parametrize("name", SUITES)
def test_expert_solves_every_task_and_random_almost_none(name):
    suite = load_suite(name)
    expert = run_benchmark("expert", suite, progress=False, batch_size=64)
    assert expert.success_rate() == 1.0, [r.task_id for r in expert.records if not r.success][:5]
    rand = run_benchmark("random", suite, progress=False, batch_size=64)
    for domain in suite.domains:
        assert rand.success_rate(domain) <= 0.05, (domain, rand.success_rate(domain))

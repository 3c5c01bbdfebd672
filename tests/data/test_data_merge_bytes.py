"""The merge's output bytes: pinned for the sample data, and the same with or without worker processes.

The digests were recorded with the code before the throughput work (commit 8f5861e); any
change to what a merge writes (conversion, checks, dedup, splits, order, JSON layout, the
report or the rejected rows) changes one of them. When a change is meant, re-record them
and say why in the commit.
"""

from __future__ import annotations

import hashlib
import importlib
from pathlib import Path

import pytest

from openmanus_lite.data import MergeConfig, SourceSpec, merge
from openmanus_lite.paths import DATA_DIR, REAL_SAMPLES_DIR

merge_mod = importlib.import_module("openmanus_lite.data.merge")  # the package's `merge` is the function
SAMPLES = DATA_DIR / "samples"
SAMPLE_SPECS = [SourceSpec(n, str(SAMPLES / n)) for n in
                ("agentinstruct", "agent_flan", "agenttraj_l", "agentbank", "taskcraft", "openmanus_rl")]
REAL_FOLDERS = {"agentinstruct": "agentinstruct", "agentinstruct_rekeyed": "agentinstruct",
                "agenttraj_l": "agenttraj_l", "openmanus_rl": "openmanus_rl"}

SAMPLE_DIGESTS = {
    "rejected.jsonl": "98e1ec7a30ba35074354d3e88cca3ef6961397438e96adf81661ea54a053c261",
    "report.json": "b061af3290415c414d9720a457bba116488d1daa71384ffe8df5c65b7480696c",
    "splits.json": "71de332c1983815c89480be5a1b9d785814af096d87a0917002e1636efd9d82b",
    "test.jsonl": "c1e56c803c32a755d8eccb3e5e7c183926d7d9d50d69950bb0b64a9bce8993be",
    "train.jsonl": "e7873f3e7c574cb9c767d33ffb6dd20987b66a5bf07009a517286f3a3e2dd992",
    "validation.jsonl": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
}
REAL_DIGESTS = {
    "rejected.jsonl": "ac3f357d0c0051b7f7c2c3326923f4c22c529b0b525bd21d7f96d341d7a78737",
    "report.json": "3c87fef56774ffa612d022c3a1c56440d20ab3ee84b88510f30cc4876d78a991",
    "splits.json": "fbc4d7fa329ba9819b450d5319e7eef4dcf342971548c03ed9da78f73a9e8f98",
    "test.jsonl": "d16166baeb210e8d692046925a4b3c9715794168d7a697399b0d743aaf8e929f",
    "train.jsonl": "0f12930cfd335ef297ca979eb251c988d6dfca525f5a6519571800a4db34224a",
    "validation.jsonl": "1ddf1c159931a9ac8ab44ee4cd36c46bfb5de71fce42cb047a693e0a3a7f5541",
}


def _digests(out: Path, root: Path, placeholder: bytes) -> dict[str, str]:
    """sha256 of each output file; rejected rows name their input file, so its folder is replaced."""
    return {p.name: hashlib.sha256(p.read_bytes().replace(str(root).encode(), placeholder)).hexdigest()
            for p in sorted(out.iterdir()) if p.is_file()}


def _merge_and_save(specs, out: Path, workers: int | None = None) -> None:
    result = merge(specs, MergeConfig(seed=0, rejected_path=out / "rejected.jsonl", workers=workers))
    result.save(out)


def test_sample_merge_output_bytes_are_pinned(tmp_path):
    _merge_and_save(SAMPLE_SPECS, tmp_path)
    assert _digests(tmp_path, SAMPLES, b"SAMPLES") == SAMPLE_DIGESTS


def test_real_sample_merge_output_bytes_are_pinned(real_samples, tmp_path):
    specs = [SourceSpec(REAL_FOLDERS[f], str(real_samples / f), label=f) for f in sorted(REAL_FOLDERS)]
    _merge_and_save(specs, tmp_path)
    assert _digests(tmp_path, REAL_SAMPLES_DIR, b"REAL") == REAL_DIGESTS


def test_worker_processes_write_the_same_bytes(tmp_path, monkeypatch):
    # small chunks and no row minimum, so several workers read parts of each file and write parts of a split
    monkeypatch.setattr(merge_mod, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(merge_mod, "PARALLEL_WRITE_ROWS", 1)
    _merge_and_save(SAMPLE_SPECS, tmp_path / "one", workers=0)
    for workers in (2, 3):
        out = tmp_path / f"w{workers}"
        _merge_and_save(SAMPLE_SPECS, out, workers=workers)
        assert _digests(out, SAMPLES, b"SAMPLES") == _digests(tmp_path / "one", SAMPLES, b"SAMPLES") == SAMPLE_DIGESTS
        assert not list(out.glob("*.part*"))  # part files are appended and removed


def test_parallel_write_cleans_up_when_a_part_fails(tmp_path, monkeypatch):
    monkeypatch.setattr(merge_mod, "PARALLEL_WRITE_ROWS", 1)
    result = merge(SAMPLE_SPECS, MergeConfig(seed=0))
    trajs = result.splits["train"]
    trajs[-1].meta["bad"] = object()  # not JSON: the forked writer of the last part fails
    with pytest.raises(TypeError, match="not JSON serializable"):
        merge_mod.write_jsonl(trajs, tmp_path / "t.jsonl", workers=2)
    assert not list(tmp_path.glob("*.part*"))


def _reference_keys(traj):
    """The dedup keys as first written: a BLAKE2b update per turn (role NUL content SOH; lower, no whitespace)."""
    from hashlib import blake2b

    from openmanus_lite.data.checks import _task_start

    h = blake2b(digest_size=16)
    for m in traj.messages:
        h.update(m.role.encode() + b"\x00" + m.content.encode("utf-8", "surrogatepass") + b"\x01")
    n = blake2b(digest_size=16)
    for m in traj.messages[_task_start(traj):]:
        n.update(m.content.encode("utf-8", "surrogatepass").lower().translate(None, b" \t\n\r\x0b\x0c") + b"\x01")
    return h.digest(), n.digest()


def test_dedup_keys_hash_the_same_bytes_as_turn_by_turn():
    from openmanus_lite.data.checks import Deduper
    from openmanus_lite.schema import Trajectory, Turn

    trajs = merge(SAMPLE_SPECS, MergeConfig(seed=0)).trajectories
    trajs.append(Trajectory("odd", "s", "os", [Turn("user", "Ä\tB \udc80 ÉCOLE\r\n"),
                                               Turn("assistant", "Think: X\x0bY\nAct: LS", True)]))
    trajs.append(Trajectory("empty", "s", "os", []))
    deduper = Deduper("normalized")
    assert [deduper.keys(t) for t in trajs] == [_reference_keys(t) for t in trajs]


def test_auto_worker_count_stays_in_one_process_for_small_inputs(monkeypatch):
    assert merge(SAMPLE_SPECS, MergeConfig(seed=0)).workers == 0  # kilobytes: a pool would cost more than it saves
    monkeypatch.setattr(merge_mod, "AUTO_PARALLEL_BYTES", 1)
    monkeypatch.setattr(merge_mod, "_usable_cpus", lambda: 1)
    assert merge(SAMPLE_SPECS, MergeConfig(seed=0)).workers == 0  # one usable CPU: no pool either
    monkeypatch.setattr(merge_mod, "_usable_cpus", lambda: 16)
    result = merge(SAMPLE_SPECS, MergeConfig(seed=0))
    assert result.workers == 2 and result.report.kept == merge(SAMPLE_SPECS, MergeConfig(seed=0, workers=0)).report.kept
    assert merge(SAMPLE_SPECS, MergeConfig(seed=0, workers=1)).workers == 0


def test_gc_paused_hands_its_objects_to_the_oldest_generation_unscanned():
    import gc

    class Node:
        pass

    assert gc.isenabled()
    with merge_mod.gc_paused():
        assert not gc.isenabled()
        made = [{"n": i} for i in range(50_000)]  # tracked objects, all in the youngest generation
        loop = Node()
        loop.self = loop  # a cycle: still garbage a later full collection must find
        assert gc.get_count()[0] >= 50_000
    assert gc.isenabled() and gc.get_freeze_count() == 0
    assert gc.get_count()[0] < 1000  # the next young collection will not walk the 50,000
    assert any(o is made for o in gc.get_objects(generation=2))
    del loop
    assert gc.collect() >= 1  # the cycle is found by the full collection
    gc.freeze()  # objects the program froze itself stay frozen
    try:
        frozen = gc.get_freeze_count()
        with merge_mod.gc_paused():
            pass
        # an unfreeze would empty the permanent generation; the count may still fall by a few objects that
        # other threads (the test run's own) free by reference counting meanwhile
        assert frozen - 1000 < gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()


def _fail_in_worker(error):
    """A `_process_row` that raises `error` on the first row a worker process (not this one) converts.

    The main process converts nothing until a worker has failed (an Event the forked workers inherit):
    otherwise, on a loaded machine, the main process could take every chunk before a worker starts and
    the merge would succeed."""
    import multiprocessing
    import os

    parent, real = os.getpid(), merge_mod._process_row
    failed = multiprocessing.get_context("fork").Event()

    def process(module, ctx, validator, deduper, row):
        if os.getpid() != parent:
            failed.set()
            raise error
        failed.wait(timeout=30)
        return real(module, ctx, validator, deduper, row)

    return process


@pytest.mark.timeout(60)
def test_a_failing_worker_fails_the_merge_instead_of_hanging(monkeypatch):
    import multiprocessing

    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("the patched converter reaches the workers only by fork")
    monkeypatch.setattr(merge_mod, "CHUNK_BYTES", 512)  # many chunks, so the worker gets some
    monkeypatch.setattr(merge_mod, "_process_row", _fail_in_worker(KeyError("boom in a worker")))
    with pytest.raises(KeyError, match="boom in a worker"):
        merge(SAMPLE_SPECS, MergeConfig(seed=0, workers=2))

    class Unpicklable(Exception):
        def __reduce__(self):
            raise TypeError("cannot pickle")

    monkeypatch.setattr(merge_mod, "_process_row", _fail_in_worker(Unpicklable("local")))
    with pytest.raises(RuntimeError, match=r"merge worker failed on .*bytes \d+-\d+"):
        merge(SAMPLE_SPECS, MergeConfig(seed=0, workers=2))


def test_chunks_go_to_whichever_process_is_free(tmp_path, monkeypatch):
    # the main process converts slowly, so the worker claims most chunks (a fixed share gave the main
    # process a third); the output bytes stay the same
    import os
    import time

    monkeypatch.setattr(merge_mod, "CHUNK_BYTES", 512)
    parent, real, mine = os.getpid(), merge_mod._chunk_outcomes, []

    def slow_in_main(task):
        if os.getpid() == parent:
            mine.append(task)
            time.sleep(0.05)
        yield from real(task)

    monkeypatch.setattr(merge_mod, "_chunk_outcomes", slow_in_main)
    _merge_and_save(SAMPLE_SPECS, tmp_path, workers=2)
    assert _digests(tmp_path, SAMPLES, b"SAMPLES") == SAMPLE_DIGESTS
    chunks = sum(len(merge_mod.jsonl_chunks(f, 512)) for spec in SAMPLE_SPECS
                 for f, _ in merge_mod._parallel_files(spec) or ())
    assert chunks >= 30 and len(mine) <= chunks / 4  # about one a source: the first, taken before the worker starts

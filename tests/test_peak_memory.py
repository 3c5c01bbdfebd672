"""The one peak-memory helper (peak_memory.PeakMemory) on known allocations, and a stage's peak on the tiny model."""

from __future__ import annotations

import json
import operator
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from openmanus_lite.peak_memory import PeakMemory, peak_rss_gb, release_memory, rss_gb, run_in_fresh_process

MB = 1e6


def _touch(n_bytes: int) -> np.ndarray:
    return np.ones(n_bytes // 8)  # ones, not empty: the pages must be written to be resident


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-stage peaks need /proc/self/clear_refs")
def test_a_known_allocation_raises_the_stage_peak_by_its_size():
    release_memory()
    with PeakMemory() as peak:
        start = peak_rss_gb()
        block = _touch(300 * 2**20)
        del block
    assert peak.per_stage and peak.as_dict()["rss_kind"] == "stage"
    grown = (peak.rss_gb - start) * 1e9
    assert 0.9 * 300 * 2**20 < grown < 1.15 * 300 * 2**20, grown / MB
    release_memory()
    with PeakMemory() as small:  # a new stage: the earlier block is not its peak
        _touch(10 * 2**20)
    assert small.rss_gb < peak.rss_gb - 0.2
    assert "GB resident" in small.summary()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-stage peaks need /proc/self/clear_refs")
def test_an_inner_measurement_does_not_erase_the_outer_peak():
    """The demo measures each stage around the trainer's own measurement (TimeLimit): the outer peak keeps what
    came before the inner one reset the high-water mark."""
    release_memory()
    with PeakMemory() as outer:
        base = peak_rss_gb()
        block = _touch(300 * 2**20)
        del block
        release_memory()
        with PeakMemory() as inner:
            _touch(10 * 2**20)
    assert inner.rss_gb < base + 0.2
    assert outer.rss_gb > base + 0.25


def test_a_training_stage_on_the_tiny_model_reports_its_peak_under_a_budget(tmp_path):
    """run_sft's result and loss_history.json carry the training's peak (TimeLimit measures it), and on the tiny
    model it stays far under the 6 GB every stage must fit (issue #41): the imported stack plus a few MB."""
    pytest.importorskip("trl")
    from openmanus_lite.envs import expert_trajectories, generate_tasks
    from openmanus_lite.train.data import build_sft_dataset
    from openmanus_lite.train.presets import get_preset
    from openmanus_lite.train.sft import LOSS_HISTORY_FILE, run_sft

    preset = get_preset("cpu_debug")
    model, tok = preset.load(None, for_training=True)
    dataset, _ = build_sft_dataset(expert_trajectories(generate_tasks("db", 4, seed=0)), tok, max_length=512)
    cfg = preset.sft_config(output_dir=str(tmp_path), max_steps=2, save_strategy="no", logging_steps=1,
                            report_to=[])
    result = run_sft(model, tok, dataset, cfg)
    peak = result.peak_memory
    assert peak["rss_kind"] == ("stage" if sys.platform.startswith("linux") else "process lifetime")
    assert 0.1 < peak["rss_gb"] < 4.0
    assert json.loads((tmp_path / LOSS_HISTORY_FILE).read_text())["peak_memory"] == peak


def test_decoding_batches_fit_the_key_value_budget():
    from openmanus_lite.engine.generation import budget_batches

    lengths, limits = [10, 20, 30, 40, 50], [10] * 5
    assert budget_batches([0, 1, 2, 3, 4], lengths, limits, 4, 1, None) == [[0, 1, 2, 3], [4]]
    # 120 bytes: rows x (longest prompt + a prefill group's quarter of it + limit) x 1 byte per token <= 120; a lone
    # row always goes
    assert budget_batches([0, 1, 2, 3, 4], lengths, limits, 4, 1, 120) == [[0, 1], [2, 3], [4]]
    assert budget_batches([4], lengths, limits, 4, 1, 1) == [[4]]


def test_a_tight_key_value_budget_cuts_batches_and_the_prefix_cache_but_not_the_tokens(tmp_path, monkeypatch):
    """The budget changes how many rows decode together and what the prefix cache keeps, never the tokens."""
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM

    from openmanus_lite.engine import generation
    from openmanus_lite.models import build_tiny_model, load_tokenizer

    path = build_tiny_model(tmp_path / "tiny", seed=3)
    model, tok = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval(), load_tokenizer(path)
    convs = [[{"role": "user", "content": f"Task {i}: " + "count the rows of the table " * i}] for i in range(1, 7)]
    prompts = generation.render_prompts(tok, convs)
    calls = []
    decode = generation.decode

    def counting(model, ids, attention, past, rows, **kw):  # the replies' batches, not the shared prefixes' prefill
        calls.extend([len(rows)] if rows[0].limit == 12 else [])
        return decode(model, ids, attention, past, rows, **kw)

    monkeypatch.setattr(generation, "decode", counting)

    def run(budget_gb: str):
        monkeypatch.setenv(generation.KV_BUDGET_ENV, budget_gb)
        calls.clear()
        cache = generation.PrefixCache()
        out = generation.generate_from_ids(model, tok, prompts, max_new_tokens=12, batch_size=6, engine="loop",
                                           kv_cache=cache)
        return out.completion_ids, list(calls), cache

    free, free_calls, free_cache = run("none")
    longest = max(map(len, prompts))
    per_row = generation.kv_bytes_per_token(model, torch.float32) * (longest + longest // 4 + 12)
    tight, tight_calls, tight_cache = run(str(2.5 * per_row / 2**30))  # half of it: one row's keys/values
    assert tight == free
    assert free_calls == [6] and len(tight_calls) >= 3 and tight_calls[-1] == 1 and sum(tight_calls) == 6
    assert free_cache.max_bytes == 2 * 2**30 and tight_cache.max_bytes == int(2.5 * per_row) // 2
    assert tight_cache.nbytes <= tight_cache.max_bytes or len(tight_cache) == 1



HEAP_PROBE = """
import numpy as np
from openmanus_lite.peak_memory import trim_heap, _status_kb
block = np.ones(2**20)          # 8 MB: mmapped, and its free raises glibc's dynamic mmap threshold above 8 MB
del block
before = _status_kb("VmRSS")
block = np.ones(2**20)          # the same size again: from the heap now, kept resident after free
del block
kept = _status_kb("VmRSS") - before
trim_heap()
print(kept, _status_kb("VmRSS") - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's heap")
def test_trim_heap_hands_freed_heap_pages_back(monkeypatch):
    import subprocess

    out = subprocess.run([sys.executable, "-c", HEAP_PROBE], capture_output=True, text=True, check=True)
    kept, after_trim = map(int, out.stdout.split())
    assert kept > 7000 and after_trim < 1000
    from openmanus_lite.peak_memory import trim_every_steps

    monkeypatch.setenv("OPENMANUS_TRIM_EVERY_STEPS", "5")
    assert trim_every_steps() == 5
    monkeypatch.setenv("OPENMANUS_TRIM_EVERY_STEPS", "often")
    with pytest.raises(ValueError, match="number of steps"):
        trim_every_steps()


def test_every_trainer_trims_the_heap_every_n_steps(monkeypatch):
    from types import SimpleNamespace

    from openmanus_lite.train import run_control

    trims = []
    monkeypatch.setattr(run_control, "trim_heap", lambda: trims.append(1))
    monkeypatch.setenv("OPENMANUS_TRIM_EVERY_STEPS", "3")
    clock = run_control.TimeLimit()
    control = SimpleNamespace(should_training_stop=False, should_save=False)
    for step in range(1, 10):
        clock.on_step_end(None, SimpleNamespace(global_step=step, max_steps=0), control)
    assert len(trims) == 3
    monkeypatch.setenv("OPENMANUS_TRIM_EVERY_STEPS", "0")
    run_control.TimeLimit().on_step_end(None, SimpleNamespace(global_step=3, max_steps=0), control)
    assert len(trims) == 3


def test_evaluation_trims_the_heap_every_n_seconds(monkeypatch):
    """rollout.run_episodes (every evaluation) trims at most every OPENMANUS_TRIM_EVERY_SECONDS (default 20, 0: never)."""
    from openmanus_lite import peak_memory, rollout
    from openmanus_lite.envs import generate_tasks

    now = [0.0]
    trims = []
    monkeypatch.setattr(peak_memory.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(peak_memory, "trim_heap", lambda: trims.append(now[0]))

    class SlowPolicy:  # 15 s of the clock per batched call, then a reply that ends nothing
        name = "slow"

        def act_batch(self, histories, envs):
            now[0] += 15.0
            return ["Think: waiting.\nAct: look"] * len(histories)

    assert peak_memory.HeapTrim().seconds == 20
    rollout.run_episodes(SlowPolicy(), generate_tasks("household", 2, seed=0), max_turns=4, progress=False)
    assert trims == [30.0, 60.0]  # calls end at 15, 30, 45, 60: due at 30 and 60
    monkeypatch.setenv("OPENMANUS_TRIM_EVERY_SECONDS", "0")
    trims.clear()
    rollout.run_episodes(SlowPolicy(), generate_tasks("household", 2, seed=0), max_turns=4, progress=False)
    assert trims == []
    monkeypatch.setenv("OPENMANUS_TRIM_EVERY_SECONDS", "soon")
    with pytest.raises(ValueError, match="give seconds"):
        peak_memory.HeapTrim()


def _allocate_in_child(n_bytes: int) -> int:
    block = _touch(n_bytes)
    del block
    return os.getpid()


def _killed_in_child() -> None:
    os.kill(os.getpid(), signal.SIGKILL)  # as the out-of-memory killer does


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-stage peaks need /proc/self/clear_refs")
def test_a_stage_in_a_fresh_process_returns_its_result_and_a_peak_of_its_own():
    held_here = _touch(400 * 2**20)  # the parent's memory is not the fresh process's
    pid, peak = run_in_fresh_process(_allocate_in_child, 200 * 2**20)
    assert pid != os.getpid() and peak["rss_kind"] == "stage"
    assert 200 * 2**20 / 1e9 < peak["rss_gb"] < rss_gb(), (peak, rss_gb())
    del held_here


def test_a_fresh_process_raises_its_error_here_with_its_traceback_and_names_a_kill():
    with pytest.raises(ZeroDivisionError) as caught:
        run_in_fresh_process(operator.truediv, 1, 0)
    assert "in the fresh process" in str(caught.value.__cause__) and "Traceback" in str(caught.value.__cause__)
    with pytest.raises(RuntimeError, match=r"_killed_in_child was killed by signal 9 \(SIGKILL: often the out-of-memory"):
        run_in_fresh_process(_killed_in_child)


@pytest.mark.parametrize("given, kept", [(None, "32"), ("1024", "1024")])
def test_importing_the_kit_caps_onednns_kernel_cache_unless_the_user_sized_it(given, kept):
    env = {k: v for k, v in os.environ.items() if k != "ONEDNN_PRIMITIVE_CACHE_CAPACITY"}
    if given is not None:
        env["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = given
    code = "import os, openmanus_lite; print(os.environ['ONEDNN_PRIMITIVE_CACHE_CAPACITY'])"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == kept, done.stderr[-2000:]

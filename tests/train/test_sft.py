"""SFT on the tiny model: Unsloth and HF + PEFT paths learn, 4-bit QLoRA steps, saving, reloading, resuming."""

from __future__ import annotations

import json
import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from openmanus_lite.engine.generation import generate_turns  # noqa: E402
from openmanus_lite.models import build_tiny_model, count_parameters, load_model  # noqa: E402
from openmanus_lite.schema import Trajectory, Turn  # noqa: E402
from openmanus_lite.train.data import build_sft_dataset  # noqa: E402
from openmanus_lite.train.run_control import time_cosine_factor  # noqa: E402
from openmanus_lite.train.sft import (  # noqa: E402
    GGUFExportUnavailable,
    SFTRunConfig,
    build_trainer,
    export_gguf,
    gguf_toolchain,
    load_trained,
    run_sft,
    save_adapter,
    save_merged,
)

pytestmark = pytest.mark.slow


def _trajs() -> list[Trajectory]:
    """Small, repetitive ReAct conversations with a boilerplate turn that must not train."""
    out = []
    for i in range(8):
        out.append(Trajectory(f"t{i}", "synth", "db", [
            Turn("user", f"Task: count the rows of table t{i}."),
            Turn("assistant", "Ok.", False),
            Turn("user", "Go on."),
            Turn("assistant", f"Think: count them.\nAct: sql\n```sql\nSELECT COUNT(*) FROM t{i}\n```", True),
            Turn("user", f"[({i + 3},)]"),
            Turn("assistant", f"Think: done.\nAct: answer([{i + 3}])", True),
        ]))
    return out


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny_sft"), texts=[t.messages[3].content for t in _trajs()])


@pytest.fixture(scope="module")
def data(tiny):
    from openmanus_lite.models import load_tokenizer

    ds, _ = build_sft_dataset(_trajs(), load_tokenizer(tiny), max_length=256)
    return ds


def _cfg(tmp_path, **kw) -> SFTRunConfig:
    base = dict(output_dir=str(tmp_path / "out"), max_steps=8, per_device_train_batch_size=4, learning_rate=5e-3,
                warmup_steps=0, save_steps=100, disable_tqdm=True, logging_steps=1)
    base.update(kw)
    return SFTRunConfig(**base)


def _learned(result) -> bool:
    losses = result.losses()
    return len(losses) >= 6 and sum(losses[-2:]) / 2 < losses[0] - 0.1


def test_trainer_labels_follow_the_mask(tiny, data, tmp_path):
    model, tok = load_model(tiny, backend="hf", lora={"r": 4, "alpha": 8})
    trainer = build_trainer(model, tok, data, _cfg(tmp_path))
    labels = trainer.train_dataset["labels"]
    for lab, ids, mask in zip(labels, data["input_ids"], data["assistant_masks"]):
        assert lab == [i if m else -100 for i, m in zip(ids, mask)]


@pytest.mark.parametrize("backend", ["unsloth", "hf"])
def test_lora_steps_reduce_the_loss(tiny, data, tmp_path, backend):
    model, tok = load_model(tiny, backend=backend, lora={"r": 8, "alpha": 16})
    result = run_sft(model, tok, data, _cfg(tmp_path))
    assert result.global_step == 8 and _learned(result), result.losses()
    assert (tmp_path / "out" / "loss_history.json").is_file()
    assert result.tokens_seen > 0 and result.train_seconds > 0


def test_padding_free_batches_learn_and_count_their_tokens(tiny, data, tmp_path, capsys, caplog, monkeypatch):
    """A batch's conversations in one row (TRL's padding_free), each attended alone (engine/attention.py)."""
    from openmanus_lite.errors import UserError
    from openmanus_lite.train import sft

    monkeypatch.setattr(sft, "CPU_PACKED_DTYPES", {"torch.bfloat16", "torch.float32"})  # the tiny model: float32
    model, tok = load_model(tiny, backend="unsloth", lora={"r": 4, "alpha": 8})
    cfg = _cfg(tmp_path, padding_free=True, max_length=256)
    assert cfg.padding_free  # kept, though Unsloth's CPU backend turns it off
    result = run_sft(model, tok, data, cfg)
    assert _learned(result) and cfg.max_length == 256  # the caller's config keeps its max_length
    assert "4 conversations in one row (padding_free)" in capsys.readouterr().out
    assert "Padding-free training is enabled" not in caplog.text  # TRL's flash-only warning: not this attention
    # 8 steps of 4 rows: every row 4 times, its own tokens only
    assert result.tokens_seen == 4 * sum(map(len, data["input_ids"]))
    with pytest.raises(UserError, match="at most max_length=20"):
        build_trainer(model, tok, data, _cfg(tmp_path, padding_free=True, max_length=20))


def test_float32_on_a_cpu_passes_one_conversation_at_a_time(tiny, data, tmp_path, capsys):
    """padding_free in float32 on a CPU: one conversation a pass, accumulated to the same updates (CPU_PACKED_DTYPES)."""
    model, tok = load_model(tiny, backend="hf", lora={"r": 4, "alpha": 8})
    cfg = _cfg(tmp_path, padding_free=True, gradient_accumulation_steps=2)
    trainer = build_trainer(model, tok, data, cfg)
    assert (trainer.args.per_device_train_batch_size, trainer.args.gradient_accumulation_steps) == (1, 8)
    assert not trainer.args.padding_free and trainer.args.max_length == cfg.max_length
    assert "one conversation at a time, 4 accumulated" in capsys.readouterr().out
    assert (cfg.per_device_train_batch_size, cfg.padding_free) == (4, True)  # the caller's config unchanged


@pytest.mark.parametrize("backend", ["unsloth", "hf"])
def test_4bit_load_and_lora_step(tiny, data, tmp_path, backend):
    model, tok = load_model(tiny, backend=backend, load_in_4bit=True, lora={"r": 4, "alpha": 8})
    assert any("4bit" in type(m).__name__ for m in model.modules())
    trainable_before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    assert 0 < count_parameters(model)[0] < count_parameters(model)[1]
    result = run_sft(model, tok, data, _cfg(tmp_path, max_steps=2))
    assert result.global_step == 2 and all(loss == loss for loss in result.losses())  # finite, not NaN
    changed = [n for n, p in model.named_parameters() if p.requires_grad and not torch.equal(p, trainable_before[n])]
    assert changed, "no LoRA weight moved"


def test_save_reload_generate_adapter_and_merged(tiny, data, tmp_path):
    model, tok = load_model(tiny, backend="unsloth", lora={"r": 8, "alpha": 16})
    result = run_sft(model, tok, data, _cfg(tmp_path, max_steps=6))
    conv = [[{"role": "user", "content": "Task: count the rows of table t2."}]]
    probe = torch.tensor([data["input_ids"][0][:40]])
    ref = generate_turns(result.model, tok, conv, max_new_tokens=12, return_ids=True).completion_ids
    result.model.eval()
    with torch.no_grad():
        ref_logits = result.model(input_ids=probe).logits
    adapter = save_adapter(result.model, tok, tmp_path / "adapter")
    merged = save_merged(result.model, tok, tmp_path / "merged")
    peft_merged = save_merged(result.model, tok, tmp_path / "peft_merged", prefer_unsloth=False)
    # the adapter reloads exactly; merged checkpoints are stored in 16-bit (rounding only)
    for path, atol in ((adapter, 1e-5), (merged, 1e-2), (peft_merged, 1e-2)):
        reloaded, rtok = load_trained(path)
        with torch.no_grad():
            assert torch.allclose(reloaded(input_ids=probe).logits, ref_logits, atol=atol), path
        assert generate_turns(reloaded, rtok, conv, max_new_tokens=12, return_ids=True).completion_ids == ref
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()
    assert not (merged / "adapter_config.json").exists() and not (peft_merged / "adapter_config.json").exists()


def test_resume_continues_the_step_count(tiny, data, tmp_path):
    model, tok = load_model(tiny, backend="unsloth", full_finetuning=True)
    first = run_sft(model, tok, data, _cfg(tmp_path, max_steps=4, save_steps=2))
    assert first.global_step == 4 and first.resumed_from is None
    # a save killed half-way (issue #44): the newer folder has weights but no trainer_state.json
    killed = tmp_path / "out" / "checkpoint-5"
    killed.mkdir()
    (killed / "model.safetensors").write_bytes(b"")
    model2, tok2 = load_model(tiny, backend="unsloth", full_finetuning=True)
    second = run_sft(model2, tok2, data, _cfg(tmp_path, max_steps=6, save_steps=2))
    assert second.resumed_from.endswith("checkpoint-4")  # the newest complete one
    assert second.global_step == 6
    assert [h["step"] for h in second.loss_history] == [1, 2, 3, 4, 5, 6]
    assert second.loss_history[:4] == [{k: h[k] for k in ("step", "loss", "learning_rate")} for h in first.loss_history]


def test_time_budget_and_marks(tiny, data, tmp_path):
    model, tok = load_model(tiny, backend="unsloth", lora={"r": 4, "alpha": 8})
    seen = []
    result = run_sft(model, tok, data, _cfg(tmp_path, max_steps=50, max_minutes=1e-4, mark_minutes=(1e-4,)),
                     on_mark=lambda m, info: seen.append(info["step"]) or "evaluated")
    assert result.stopped_by_time and result.global_step < 50
    assert seen == [result.marks[0]["step"]] and result.marks[0]["result"] == "evaluated"
    assert (tmp_path / "out" / f"checkpoint-{seen[0]}").is_dir()


def test_a_step_budget_ending_before_the_last_mark_takes_that_mark_at_its_end(tiny, data, tmp_path):
    model, tok = load_model(tiny, backend="unsloth", lora={"r": 4, "alpha": 8})
    result = run_sft(model, tok, data, _cfg(tmp_path, max_steps=3, max_minutes=60.0, mark_minutes=(30.0, 60.0)),
                     on_mark=lambda m, info: "evaluated")
    assert not result.stopped_by_time and result.global_step == 3
    assert [(m["step"], m["result"]) for m in result.marks] == [(3, "evaluated")]  # one mark: the end, as it was
    assert result.marks[0]["train_minutes"] < 30 and (tmp_path / "out" / "checkpoint-3").is_dir()


def test_cosine_by_time_decays_over_the_time_budget_not_the_steps(tiny, data, tmp_path, monkeypatch):
    """A fake clock where each step takes one second: the rate of step s + 1 is the cosine at s seconds."""
    from transformers import TrainerCallback

    import openmanus_lite.train.run_control as run_control

    now = [0.0]
    monkeypatch.setattr(run_control, "training_clock", lambda kind: lambda: now[0])

    class OneSecondSteps(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            now[0] = state.global_step + 1.0  # the time at the end of this step

    model, tok = load_model(tiny, backend="unsloth", lora={"r": 4, "alpha": 8})
    result = run_sft(model, tok, data, _cfg(tmp_path, max_steps=10**6, max_minutes=10 / 60, warmup_steps=2,
                                            lr_scheduler_type="cosine_by_time"), callbacks=[OneSecondSteps()])
    assert result.stopped_by_time and result.global_step == 10
    lrs = [h["learning_rate"] for h in result.loss_history]
    assert lrs[0] == 0.0  # transformers' warmup starts at zero
    expected = [5e-3 * time_cosine_factor(s, float(s), 10.0, 2) for s in range(1, 10)]
    assert lrs[1:] == pytest.approx(expected)
    assert expected[0] == pytest.approx(5e-3 * 0.5 * 0.5 * (1 + math.cos(math.pi / 10)))  # still warming up
    assert expected[-1] < 0.03 * 5e-3  # at 9 of 10 seconds the cosine is nearly at its end


def test_resume_skips_checkpoints_without_their_trainer_state(tmp_path):
    from openmanus_lite.train.run_folder import last_checkpoint, resume_checkpoint

    out = tmp_path / "out"
    assert last_checkpoint(out) is None and resume_checkpoint("auto", out) is None
    for step, complete in ((10, True), (20, False), (9, True)):
        (out / f"checkpoint-{step}").mkdir(parents=True)
        if complete:
            (out / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
    (out / "checkpoint-30.tmp").mkdir()
    assert last_checkpoint(out) == str(out / "checkpoint-10")  # by step, not by name; 20 was never finished
    assert resume_checkpoint(False, out) is None and resume_checkpoint("no", out) is None
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resume_checkpoint(str(out / "checkpoint-99"), out)


def test_the_config_is_trls_and_cosine_by_time_needs_a_time_budget(tmp_path):
    from trl import SFTConfig

    cfg = _cfg(tmp_path, max_minutes=1.0, lr_scheduler_type="cosine_by_time")
    assert isinstance(cfg, SFTConfig) and cfg.cosine_by_time and cfg.lr_scheduler_type == "constant_with_warmup"
    with pytest.raises(ValueError, match="max_minutes"):
        _cfg(tmp_path, lr_scheduler_type="cosine_by_time")
    with pytest.raises(ValueError, match="packing: the data is pre-tokenized"):
        _cfg(tmp_path, packing=True)


def test_time_cosine_factor():
    assert time_cosine_factor(0, 0.0, 60.0, 4) == 0.0
    assert time_cosine_factor(2, 0.0, 60.0, 4) == 0.5
    assert time_cosine_factor(10, 30.0, 60.0, 4) == pytest.approx(0.5)
    assert time_cosine_factor(10, 60.0, 60.0, 4) == pytest.approx(0.0)
    assert time_cosine_factor(10, 90.0, 60.0, 0) == pytest.approx(0.0)


def test_gguf_export_says_what_is_missing(tiny, tmp_path):
    try:
        gguf_toolchain()
    except GGUFExportUnavailable:
        pass
    else:
        pytest.skip("llama.cpp is installed here; the export itself is exercised where it is")
    model, tok = load_model(tiny, backend="unsloth")
    with pytest.raises(GGUFExportUnavailable, match="llama.cpp"):
        export_gguf(model, tok, tmp_path / "gguf")


def test_cli_trains_and_saves(tmp_path, monkeypatch):
    from openmanus_lite.cli import main

    monkeypatch.setenv("OPENMANUS_CACHE", str(tmp_path / "cache"))
    import openmanus_lite.paths as paths

    monkeypatch.setattr(paths, "CACHE_DIR", tmp_path / "cache")
    out = tmp_path / "run"
    code = main(["sft", "--preset", "cpu_debug", "--synth", "3", "--recovery", "1", "--domains", "os,db",
                 "--max-steps", "2", "--output-dir", str(out), "--no-progress", "--save", "adapter,merged,gguf"])
    assert code == 0
    assert (out / "merged" / "config.json").is_file() and (out / "data_report.json").is_file()
    report = json.loads((out / "data_report.json").read_text())
    assert report["records_in"] > 6  # 3 expert episodes per domain and the recovery episodes
    assert main(["sft", "--preset", "cpu_debug"]) == 2  # no data given: a clear error, not a crash
    assert main(["sft", "--preset", "cpu_debug", "--recovery", "1"]) == 2  # recovery needs --synth

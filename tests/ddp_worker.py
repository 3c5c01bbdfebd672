"""One process of the two-process CPU training test (launched by torchrun or `accelerate launch`).

Each rank trains the same tiny model for a few steps on its shard of the data under DDP
(gloo), then writes a fingerprint of its trainable parameters; the test checks that both
ranks hold identical parameters and that training changed them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from pathlib import Path

import torch
import unsloth  # noqa: F401  (before trl: it patches TRL's CPU kernels)


def fingerprint(model) -> str:
    h = hashlib.sha256()
    for name, p in sorted(model.named_parameters()):
        if p.requires_grad:
            h.update(name.encode())
            h.update(p.detach().float().cpu().numpy().tobytes())
    return h.hexdigest()


def completion_length(prompts, completions, **columns) -> list[float]:
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [len(t) / 50 for t in texts]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=("sft", "grpo"), required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.manual_seed(0)
    from openmanus_lite.models import LoraSpec, end_distributed, load_model

    model, tok = load_model(args.model, backend="auto", lora=LoraSpec(r=4, alpha=8))
    before = fingerprint(model)
    if args.mode == "sft":
        from openmanus_lite.envs import synthesize_trajectories
        from openmanus_lite.train.data import build_sft_dataset
        from openmanus_lite.train.sft import SFTRunConfig, run_sft

        trajs = synthesize_trajectories("kg", 8, seed=0)
        dataset, _ = build_sft_dataset(trajs, tok, max_length=1536)
        cfg = SFTRunConfig(output_dir=f"{args.out}/sft", max_steps=2, per_device_train_batch_size=2,
                           learning_rate=1e-2, save_steps=100, disable_tqdm=True, resume=False)
        trained = run_sft(model, tok, dataset, cfg).model
    else:
        from openmanus_lite.train.grpo import GRPORunConfig, build_single_turn_dataset, run_grpo, value_task_rows

        dataset = build_single_turn_dataset(value_task_rows(("kg",), n=8, seed=0))
        cfg = GRPORunConfig(mode="single", output_dir=f"{args.out}/grpo", max_steps=2, num_generations=2,
                            per_device_train_batch_size=2, max_completion_length=8, learning_rate=1e-2,
                            disable_tqdm=True, save_steps=100)
        # a reward that varies within every group, so the tiny model gets a non-zero advantage
        trained = run_grpo(model, tok, dataset, cfg, reward_funcs=[completion_length]).trainer.model
    rank = int(os.environ.get("RANK", "0"))
    Path(args.out, f"{args.mode}_rank{rank}.json").write_text(json.dumps({
        "before": before, "after": fingerprint(trained), "world_size": int(os.environ.get("WORLD_SIZE", "1")),
        "backend": getattr(trained, "openmanus_backend", None) or getattr(model, "openmanus_backend", None),
    }))
    end_distributed()


if __name__ == "__main__":
    main()

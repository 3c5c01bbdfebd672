"""Peak memory and time of each stage (evaluation, SFT, GRPO, DPO, reward model, data merge), a fresh process each.

Each stage runs short (a few steps, a few episodes) in a fresh process, so its peak is its own and includes loading
its model and the libraries, as in a real run; the peak comes from `peak_memory.PeakMemory` (resident memory on a
CPU, GPU memory allocated / reserved on a GPU). With `--compare` every stage runs twice, with the previous
engine settings (`OPENMANUS_KV_BUDGET_GB=none`: fixed decoding batches and a 2 GiB prefix cache; oneDNN's default
1024-primitive cache) and the current ones (a key/value budget, engine/generation.py; a 32-primitive cache,
engine/__init__.py), printed side by side.

    python benchmarks/memory.py --model tiny                       # quick: the tiny model, cpu_debug preset
    python benchmarks/memory.py --stages eval,sft --episodes 12 --steps 5 --compare   # the embedded default
    python benchmarks/memory.py --stages sft --steps 15 --settings untrimmed,trim_each_step,current,mmap_1mb
                                                   # glibc's heap between SFT steps (issue #41, docs/RESULTS.md)
    python benchmarks/memory.py --stages sft --steps 8 --longest --settings batch_4,micro_batch_2,current,checkpointing
                                                   # the largest SFT batches only (4 x ~1,000 tokens), the peak of a long run
    python benchmarks/memory.py --stages grpo --steps 4 --settings group_per_pass,grpo_peft_lora_inputs,current
    python benchmarks/memory.py --stages sft --steps 8 --longest --settings one_per_pass,padding_free_2,padding_free_4

Ends with one line `RESULT {json}`: per stage and setting, its peak, seconds and what it ran.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from openmanus_lite.peak_memory import run_in_fresh_process  # noqa: E402

STAGES = ("eval", "sft", "grpo", "dpo", "rm", "merge")
SETTINGS = {"previous": {"OPENMANUS_KV_BUDGET_GB": "none"},
            "current": {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "32"},
            "defaults": {},
            "batch_4_defaults": {},
            "pad_64": {},
            "trim_every_4": {"OPENMANUS_TRIM_EVERY_STEPS": "4"},
            "arena_2": {"MALLOC_ARENA_MAX": "2"},
            "trim_every_20s": {"OPENMANUS_TRIM_EVERY_SECONDS": "20"},
            "trim_every_5s": {"OPENMANUS_TRIM_EVERY_SECONDS": "5"},
            "kv_budget_1gb": {"OPENMANUS_KV_BUDGET_GB": "1"},
            "untrimmed_eval": {"OPENMANUS_TRIM_EVERY_SECONDS": "0"},
            "untrimmed": {"OPENMANUS_TRIM_EVERY_STEPS": "0"},
            "trim_each_step": {"OPENMANUS_TRIM_EVERY_STEPS": "1"},
            "mmap_1mb": {"OPENMANUS_TRIM_EVERY_STEPS": "0", "MALLOC_MMAP_THRESHOLD_": str(2**20)},
            "fused_head": {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "32", "UNSLOTH_CPU_CHUNKED_CE": "0"},
            "checkpointing": {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "32"},
            "peft_lora_inputs": {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "32"},
            "micro_batch_2": {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "32"},
            "batch_4": {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "32"},
            "one_per_pass": {},
            "padding_free_2": {},
            "padding_free_4": {},
            "float32_one_per_pass": {},
            "float32_padding_free_2": {},
            "group_per_pass": {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "32"},
            "grpo_peft_lora_inputs": {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "32"},
            "eager_layers": {},
            "compiled_layers": {},
            "onednn_1024": {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "1024"},
            "flash_attention": {"OPENMANUS_BLOCK_ROWS": "0"}}
"""`--compare` runs: before this issue's changes, and with them plus the smaller oneDNN cache (now the kit's own:
`onednn_1024` is oneDNN's default; openmanus_lite/__init__.py sets 32).
The others (`--settings`) try glibc's heap: no trim, a trim after every step, a fixed 1 MB mmap threshold; and the SFT
step's memory: `fused_head` computes the loss with TRL's fused LM head (Unsloth's torch twin of it, which also logs
token accuracy and entropy) instead of Unsloth's chunked cross-entropy (both project the trained positions a few
hundred rows at a time, never the whole batch's logits: tests/train/test_sft_loss_chunks.py); `checkpointing`
recomputes each layer's activations in the backward pass (the LoRA's gradient checkpointing); `peft_lora_inputs` lets
PEFT's adapters save float32 copies of their inputs again (`lean_lora_inputs=False`, train/lean_lora.py).
SFT's updates are 4 conversations: `batch_4` puts them through one forward/backward pass (`one_per_pass`: one a pass,
4 accumulated; `batch_4_defaults`: the same with oneDNN's own cache), `micro_batch_2` two a pass; `padding_free_2`
and `padding_free_4` two or four a pass in one row without padding (TRL's padding_free), `float32_...` the same in
float32 (what a CPU without native bf16 trains in); `group_per_pass`
puts GRPO's whole group of 4 episodes through one pass (now: one episode a pass), `grpo_peft_lora_inputs` is GRPO
without lean LoRA inputs; `eager_layers` and `compiled_layers` train with the decoder layers eager or compiled
(`compile_layers`, train/compiled_layers.py); `flash_attention` trains with torch's CPU flash attention instead of
the kit's block attention (`OPENMANUS_BLOCK_ROWS=0`, engine/attention.py). `defaults` is the kit as a user runs it (since the twenty-sixth session with oneDNN's cache at
32, as the settings above set it); `pad_64` pads SFT rows to a multiple of 64 tokens (16 shapes instead of one per
length; what SFT in bf16 on a CPU now does by itself, train.sft.CPU_BF16_PAD); `trim_every_4` hands the heap back
every 4 steps instead of 20, `arena_2` caps glibc at two heap arenas,
`trim_every_20s` trims during evaluation (peak_memory.HeapTrim, now the default), `untrimmed_eval` does not,
`trim_every_5s` trims four times as often, `kv_budget_1gb` caps the keys/values a generation may hold at 1 GB
(the default was 2 then, 1.5 now) (these seven with oneDNN's own cache)."""


def _with_checkpointing(preset):
    if preset.lora is None:
        raise SystemExit(f"the checkpointing setting is the LoRA's; preset {preset.name!r} trains every weight")
    return preset.replace(lora=replace(preset.lora, gradient_checkpointing=True))


def _sft_passes(preset, per_pass: int, padding_free: bool = False):
    """The preset's SFT updates of 4 conversations, `per_pass` of them in each forward/backward pass (in one row
    without padding with `padding_free`)."""
    return preset.replace(sft={**preset.sft, "per_device_train_batch_size": per_pass,
                               "gradient_accumulation_steps": 4 // per_pass, "padding_free": padding_free})


def _compiled(preset, on: bool):
    """The preset's SFT, GRPO and DPO with decoder layers compiled (`on`) or eager (train/compiled_layers.py)."""
    return preset.replace(**{stage: {**getattr(preset, stage), "compile_layers": on} for stage in ("sft", "grpo", "dpo")})


PRESET_CHANGES = {"checkpointing": _with_checkpointing,
                  "peft_lora_inputs": lambda preset: preset.replace(sft={**preset.sft, "lean_lora_inputs": False}),
                  "micro_batch_2": lambda preset: _sft_passes(preset, 2),
                  "batch_4": lambda preset: _sft_passes(preset, 4),
                  "one_per_pass": lambda preset: _sft_passes(preset, 1),
                  "padding_free_2": lambda preset: _sft_passes(preset, 2, padding_free=True),
                  "padding_free_4": lambda preset: _sft_passes(preset, 4, padding_free=True),
                  "float32_one_per_pass": lambda preset: _sft_passes(preset.with_dtype("float32"), 1),
                  "float32_padding_free_2": lambda preset: _sft_passes(preset.with_dtype("float32"), 2,
                                                                       padding_free=True),
                  "batch_4_defaults": lambda preset: _sft_passes(preset, 4),
                  "pad_64": lambda preset: preset.replace(sft={**preset.sft, "pad_to_multiple_of": 64}),
                  "group_per_pass": lambda preset: preset.replace(grpo={**preset.grpo, "per_device_train_batch_size": 4}),
                  "grpo_peft_lora_inputs": lambda preset: preset.replace(grpo={**preset.grpo, "lean_lora_inputs": False}),
                  "eager_layers": lambda preset: _compiled(preset, False),
                  "compiled_layers": lambda preset: _compiled(preset, True)}
"""Settings that change the stage's preset rather than the environment."""
DOMAINS = ("os", "db", "web", "kg", "household", "ecommerce")


def _preset(model: str, stage: str):
    """The tiny model's cpu_debug preset, or the preset the demo runs the stage with: `cpu` for an evaluation
    (float32 weights, a bf16 copy for decoding where native), else its SFT recipe's (cpu_30min: bf16 where native)."""
    from openmanus_lite.recipes import get_recipe, recipe_preset
    from openmanus_lite.train.presets import get_preset

    if model == "tiny":
        return get_preset("cpu_debug")
    return get_preset("cpu") if stage == "eval" else recipe_preset(get_recipe("cpu_30min"))


def _trajectories(per_domain: int):
    from openmanus_lite.envs import expert_trajectories, generate_tasks

    return [t for d in DOMAINS for t in expert_trajectories(generate_tasks(d, per_domain, seed=1))]


def stage_eval(args, preset, out: Path) -> dict:
    """Greedy episodes of the demo's evaluation suite (easy dev tasks), the demo's batch and turn limits."""
    from openmanus_lite.demo import DemoConfig, _eval_suite
    from openmanus_lite.eval import run_benchmark
    from openmanus_lite.policies import ModelPolicy

    cfg = DemoConfig(eval_per_domain=max(1, args.episodes // len(DOMAINS)))
    model, tok = preset.load(None, for_training=False)
    policy = ModelPolicy(model, tok, name="memory", max_new_tokens=preset.max_new_tokens,
                         batch_size=preset.eval_batch_size)
    result = run_benchmark(policy, _eval_suite(cfg), max_turns=cfg.sft_recipe().max_turns(),
                           batch_size=preset.eval_batch_size, progress=False)
    return {"episodes": len(result.records), "generated_tokens": result.generated_tokens,
            "inner_peak": result.meta["peak_memory"]}


def _sft_rows(args, tok, length: int, rows: int):
    """180 expert conversations; with --longest the `rows` longest of the cpu_30min recipe's data (its 60 longest
    are 987-1,023 tokens with the default model), so every step is one of the largest batches, which set the peak
    of a long run (docs/RESULTS.md, issue #41), and a few steps show it."""
    from openmanus_lite.train.data import build_sft_dataset

    if not args.longest:
        return build_sft_dataset(_trajectories(30), tok, max_length=length)[0]
    from openmanus_lite.recipes import get_recipe, recipe_trajectories

    dataset, _ = build_sft_dataset(recipe_trajectories(get_recipe("cpu_30min"))[0], tok, max_length=length)
    lengths = [len(ids) for ids in dataset["input_ids"]]
    longest = sorted(range(len(lengths)), key=lambda i: -lengths[i])[:rows]
    print(f"SFT rows: the {len(longest)} longest, {lengths[longest[-1]]}-{lengths[longest[0]]} tokens", flush=True)
    return dataset.select(longest)


def stage_sft(args, preset, out: Path) -> dict:
    from transformers import TrainerCallback

    from openmanus_lite.peak_memory import rss_gb
    from openmanus_lite.train.sft import run_sft

    class Resident(TrainerCallback):
        """Resident memory after each step (after the trainer's own heap trim): what a step leaves behind."""
        gb: list = []

        def on_step_end(self, *args, **kw):
            self.gb.append(rss_gb())

    model, tok = preset.load(None, for_training=True)
    length = preset.sft["max_length"]
    cfg = preset.sft_config(output_dir=str(out / "sft"), max_steps=args.steps, save_strategy="no",
                            logging_steps=1, report_to=[])
    rows = args.steps * cfg.per_device_train_batch_size * cfg.gradient_accumulation_steps
    dataset = _sft_rows(args, tok, length, rows)
    result = run_sft(model, tok, dataset, cfg, callbacks=[Resident()])
    return {"steps": result.global_step, "tokens_per_s": round(result.tokens_per_second, 1),
            "batch": cfg.per_device_train_batch_size,
            "accumulation": cfg.gradient_accumulation_steps, "max_length": length, "rows": len(dataset),
            "longest_row": max(len(ids) for ids in dataset["input_ids"]), "inner_peak": result.peak_memory,
            "resident_after_each_step_gb": [round(gb, 2) for gb in Resident.gb]}


def stage_grpo(args, preset, out: Path) -> dict:
    """Multi-turn GRPO as the demo runs it (two groups of 4 per step, the preset's episodes per backward pass)."""
    from openmanus_lite.envs import generate_tasks
    from openmanus_lite.train.grpo import build_env_dataset, run_grpo

    model, tok = preset.load(None, for_training=True)
    micro = preset.grpo["per_device_train_batch_size"]
    tasks = [t for d in ("os", "db") for t in generate_tasks(d, 4, seed=2)]
    dataset, rollout = build_env_dataset(tasks, max_turns=3, max_new_tokens=preset.max_new_tokens)
    gcfg = preset.grpo_config(mode="multi", rewards="env_outcome", output_dir=str(out / "grpo"),
                              max_steps=args.steps, num_generations=4, per_device_train_batch_size=micro,
                              gradient_accumulation_steps=8 // micro, max_turns=3, max_new_tokens=preset.max_new_tokens,
                              max_episode_tokens=3 * (preset.max_new_tokens + 160), save_strategy="no",
                              sample_every=0, report_to=[])
    result = run_grpo(model, tok, dataset, gcfg, rollout_func=rollout)
    return {"steps": result.global_step, "inner_peak": result.peak_memory}


def _preference_data():
    from openmanus_lite.envs import generate_tasks
    from openmanus_lite.preference.pairs import build_preference_data

    tasks = [t for d in ("os", "db") for t in generate_tasks(d, 4, seed=3)]
    return build_preference_data(tasks, policy="random", samples_per_task=2, mistakes_per_task=2, seed=0)


def stage_dpo(args, preset, out: Path) -> dict:
    from openmanus_lite.preference.dpo import run_dpo

    data = _preference_data()
    settings = preset.dpo_config(output_dir=str(out / "dpo"), max_steps=args.steps, save_strategy="no",
                                 report_to=[])
    result = run_dpo(preset.resolve_model(), data.step_pairs, settings)
    return {"steps": result.steps, "inner_peak": result.peak_memory}


def stage_rm(args, preset, out: Path) -> dict:
    from openmanus_lite.preference.reward_model import train_orm

    data = _preference_data()
    settings = preset.reward_config(output_dir=str(out / "orm"), max_steps=args.steps, save_strategy="no",
                                    report_to=[])
    _, report = train_orm(preset.resolve_model(), data.trajectory_pairs, settings)
    return {"steps": report.steps, "inner_peak": report.peak_memory}


def stage_merge(args, preset, out: Path) -> dict:
    from openmanus_lite.data.merge import merge

    samples = Path(__file__).resolve().parents[1] / "data" / "samples"
    result = merge({p.name: str(p) for p in sorted(samples.iterdir()) if p.is_dir()})
    return {"kept": result.report.kept}


def stage_in_this_process(stage: str, setting: str, args) -> dict:
    """One stage, run by `run_stage` in a fresh process: what it ran and its seconds (the peak comes with it)."""
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        preset = _preset(args.model, stage)
        if setting in PRESET_CHANGES:
            preset = PRESET_CHANGES[setting](preset)
        info = globals()[f"stage_{stage}"](args, preset, Path(tmp))
        return {"seconds": round(time.perf_counter() - t0, 1), **info}


def run_stage(stage: str, setting: str, args) -> dict:
    """The stage in a fresh process (`peak_memory.run_in_fresh_process`) under the setting's environment, which the
    spawned interpreter reads as it starts (glibc's MALLOC_* variables are read only then); an error is reported,
    not raised, so the other stages still run."""
    env = {"PYTHONHASHSEED": "0", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **SETTINGS[setting]}
    drop = list(SETTINGS["previous"]) if setting == "current" else []
    saved = {name: os.environ.get(name) for name in [*env, *drop]}
    os.environ.update(env)
    for name in drop:
        os.environ.pop(name, None)
    try:
        info, peak = run_in_fresh_process(stage_in_this_process, stage, setting, args)
        return {"peak_memory": peak, **info}
    except Exception as error:  # noqa: BLE001 - one stage's failure is a cell of the table
        return {"error": str(error).strip().splitlines()[-5:]}
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=("default", "tiny"), default="default")
    ap.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated, of {','.join(STAGES)}")
    ap.add_argument("--steps", type=int, default=3, help="training steps of each training stage")
    ap.add_argument("--episodes", type=int, default=12, help="evaluation episodes (spread over the six domains)")
    ap.add_argument("--compare", action="store_true", help="run each stage with the previous settings as well")
    ap.add_argument("--settings", help=f"comma-separated, of {','.join(SETTINGS)} (instead of --compare)")
    ap.add_argument("--longest", action="store_true",
                    help="SFT: train on the longest rows of the cpu_30min recipe's data (the batches that set the peak)")
    args = ap.parse_args()
    stages = [s for s in args.stages.split(",") if s]
    unknown = sorted(set(stages) - set(STAGES))
    if unknown:
        ap.error(f"unknown stages {unknown}; choose from {STAGES}")
    settings = args.settings.split(",") if args.settings else ("previous", "current") if args.compare else ("current",)
    if set(settings) - set(SETTINGS):
        ap.error(f"unknown settings {sorted(set(settings) - set(SETTINGS))}; choose from {list(SETTINGS)}")
    results: dict[str, dict] = {}
    width = {s: max(14, len(s) + 5) for s in settings}
    print(f"{'stage':<7}" + "".join(f"{s + ' GB':>{width[s]}}{'s':>8}" for s in settings))
    for stage in stages:
        results[stage] = {s: run_stage(stage, s, args) for s in settings}
        cells = []
        for s in settings:
            r = results[stage][s]
            gb = (r.get("peak_memory") or {}).get("rss_gb")
            cells.append(f"{'error' if gb is None else f'{gb:.2f}':>{width[s]}}{r.get('seconds', float('nan')):>8.1f}")
        print(f"{stage:<7}" + "".join(cells), flush=True)
    print("RESULT " + json.dumps({"model": args.model, "steps": args.steps, "episodes": args.episodes,
                                  "stages": results}))


if __name__ == "__main__":
    main()

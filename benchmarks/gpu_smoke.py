"""GPU smoke test: every GPU path of the kit once, in minutes, with no network.

The kit's figures come from CPUs, where Unsloth loads a separate backend (stock transformers +
PEFT + TRL); this script runs what only a GPU exercises: device and precision choice, 4-bit
loading, batched and prefix-cached generation, SFT under fp16/bf16, multi-turn GRPO with the
environment mask, evaluation, adapter -> merge -> reload, DPO, and Unsloth against HF + PEFT.
Each stage prints its time, tokens/s where it generates or trains, and peak GPU memory
(`peak_memory.PeakMemory`: GPU memory allocated, and resident memory, each stage's own). It ends with one line
`RESULT {json}` and exits 1 if a check failed (a check that cannot run here is skipped, with
its reason).

    python benchmarks/gpu_smoke.py                        # the tiny from-scratch model, on the GPU
    python benchmarks/gpu_smoke.py --model /models/Qwen2.5-1.5B-Instruct   # a local checkpoint too
    python benchmarks/gpu_smoke.py --device cpu           # the same checks on a CPU (tests run this)
    python benchmarks/gpu_smoke.py --capability 7.5       # a T4's precision decisions on a newer GPU

Greedy-equality checks (batch 8 == batch 1, prefix cache on == off) load the model in float32: half
precision flips near-tied logits of the untrained tiny model by batch and padding, which is no defect.
benchmarks/gpu_check.sh runs this script twice (native and --capability 7.5) beside benchmarks/gpu_probe.py.

On a GPU machine without network access:

1. On a machine with network access and the same Python version and platform, fetch the kit's
   dependencies as wheels: `pip download -d wheels -r requirements.txt` (plus the kit itself:
   `pip wheel --no-deps -w wheels .`), and copy a real model's checkpoint folder if you want one
   (e.g. `huggingface-cli download Qwen/Qwen2.5-1.5B-Instruct --local-dir Qwen2.5-1.5B-Instruct`).
2. Copy `wheels/` (and the model folder) to the GPU machine and install without an index:
   `pip install --no-index --find-links wheels -r requirements.txt`.
3. Run with `HF_HUB_OFFLINE=1`. The tiny model is built on the machine itself (its own BPE
   tokenizer and a 0.7M-parameter Qwen2 network: `models.build_tiny_model`), so nothing else is
   downloaded; `--model PATH` adds a real checkpoint to the load and generation checks.

The whole run is bounded by --time-limit (default 600 s): stages that would start after it are
skipped and counted as failures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from openmanus_lite.peak_memory import PeakMemory  # noqa: E402

CONVERSATIONS = [
    [{"role": "user", "content": "Count the rows of table employees."}],
    [{"role": "user", "content": "List the files in /home/user."}],
    [{"role": "user", "content": "Go to the fridge and open it."}],
    [{"role": "user", "content": "Find a red cotton t-shirt under 30 dollars."}],
    [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Say 4."}],
    [{"role": "user", "content": "Which relations does Barack Obama have?"}],
    [{"role": "user", "content": "How many employees are older than 30? Use the table employees."}],
    [{"role": "user", "content": "Put a clean mug in the coffee machine."}],
]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto",
                   help="cpu hides the GPU from torch (CUDA_VISIBLE_DEVICES=''); cuda fails if there is none")
    p.add_argument("--model", default=None, help="a local checkpoint of a real model (load + generation checks)")
    p.add_argument("--backend", choices=["auto", "unsloth", "hf"], default="auto", help="the kit's backend")
    p.add_argument("--new-tokens", type=int, default=24, help="tokens per generated turn")
    p.add_argument("--time-limit", type=float, default=600.0, help="seconds; later stages are skipped")
    p.add_argument("--out", default=None, help="work folder (default: a temporary one, removed)")
    p.add_argument("--capability", default=None, help="e.g. 7.5: the process reports that compute capability "
                   "(and bf16 only by emulation below 8.0) before unsloth is imported, so the kit and Unsloth "
                   "take that card's precision decisions (a T4's: float16, grad scaler); not its kernels or speed")
    return p.parse_args(argv)


def report_capability(capability: str) -> None:
    """Make torch.cuda report compute capability `capability` ("7.5") for this process, before unsloth is
    imported (it reads it once at import); below 8.0, bfloat16 counts as emulated, as on a T4."""
    import torch

    major, minor = (int(x) for x in capability.split("."))
    torch.cuda.get_device_capability = lambda device=None: (major, minor)
    torch.cuda.is_bf16_supported = lambda including_emulation=True: major >= 8 or including_emulation


def grad_scale(trainer: Any) -> float | None:
    """The fp16 grad scaler's scale (None without fp16); it halves at every step the scaler skips."""
    scaler = getattr(trainer.accelerator, "scaler", None)
    return scaler.get_scale() if scaler is not None else None


def scaler_skips(scale_before: float | None, trainer: Any) -> int:
    """Optimizer steps the fp16 grad scaler skipped since `grad_scale` gave `scale_before` (inf/NaN gradients)."""
    scale = grad_scale(trainer)
    if scale_before is None or scale is None or scale >= scale_before:
        return 0
    return round(math.log2(scale_before / scale))


def train_and_read(trainer: Any, info: dict) -> tuple[list[float], str, int]:
    """Train, putting seconds and tokens in `info`; returns the logged losses, the precision trained in and the
    steps the fp16 grad scaler skipped (both scripts' SFT stage read the same figures)."""
    scale0 = grad_scale(trainer)
    t = time.perf_counter()
    trainer.train()
    info["seconds"] = time.perf_counter() - t
    info["tokens"] = int(trainer.state.num_input_tokens_seen or 0)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    precision = "fp16" if trainer.args.fp16 else "bf16" if trainer.args.bf16 else "fp32"
    return losses, precision, scaler_skips(scale0, trainer)


class Smoke:
    """Stages with time / memory figures and named checks (passed, failed with a reason, skipped)."""

    def __init__(self, cuda: bool, time_limit: float):
        self.cuda = cuda
        self.t0 = time.perf_counter()
        self.time_limit = time_limit
        self.checks: dict[str, dict[str, Any]] = {}
        self.stages: dict[str, dict[str, Any]] = {}

    def check(self, name: str, ok: bool, detail: Any = "") -> bool:
        self.checks[name] = {"ok": bool(ok), "detail": detail}
        print(f"  [{'ok' if ok else 'FAIL'}] {name}: {detail}")
        return bool(ok)

    def skip(self, name: str, reason: str) -> None:
        self.checks[name] = {"ok": None, "detail": f"skipped: {reason}"}
        print(f"  [skip] {name}: {reason}")

    @contextmanager
    def stage(self, name: str) -> Iterator[dict[str, Any]]:
        """Times a stage and measures its peak memory; `info["tokens"]` set inside gives tokens/s.
        An exception fails the check named after the stage instead of ending the run."""
        import torch

        info: dict[str, Any] = {}
        print(f"== {name}")
        if time.perf_counter() - self.t0 > self.time_limit:
            self.check(name, False, f"not run: the {self.time_limit:.0f} s time limit was reached")
            info["skipped"] = True
            yield info
            return
        if self.cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        with PeakMemory() as peak:
            try:
                yield info
            except Exception as e:  # a broken stage is a failed check; the next stages still run
                traceback.print_exc()
                self.check(name, False, f"{type(e).__name__}: {e}")
            if self.cuda:
                torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        fig: dict[str, Any] = {"seconds": round(seconds, 2)}
        if info.get("tokens"):
            fig["tokens_per_s"] = round(info["tokens"] / max(info.get("seconds", seconds), 1e-9), 1)
        if self.cuda:
            fig["peak_gpu_mb"] = round(peak.cuda_allocated_gb * 1e9 / 2**20, 1)
            fig["reserved_gpu_mb"] = round(peak.cuda_reserved_gb * 1e9 / 2**20, 1)
        fig.update(info.get("figures", {}))
        fig["rss_mb"] = round(peak.rss_gb * 1e9 / 2**20, 1)  # the stage's peak resident memory
        self.stages[name] = fig
        print(f"   {fig}")

    @property
    def failed(self) -> list[str]:
        return [k for k, v in self.checks.items() if v["ok"] is False]


def device_of(model: Any) -> str:
    return next(model.parameters()).device.type


def lora() -> Any:
    from openmanus_lite.models import LoraSpec

    return LoraSpec(r=8, alpha=16)


def sft_rows(tok: Any) -> Any:
    """Expert trajectories of two domains, tokenized for SFT."""
    from openmanus_lite.envs.base import synthesize_trajectories
    from openmanus_lite.train.data import build_sft_dataset

    trajs = synthesize_trajectories("db", 6, seed=0) + synthesize_trajectories("kg", 6, seed=0)
    ds, _ = build_sft_dataset(trajs, tok, max_length=512)
    return ds, trajs


def dpo_rows(trajs: list) -> list[dict]:
    """Preference rows from expert trajectories: the expert's turn against an answer-at-once turn."""
    rows = []
    for t in trajs:
        msgs = [{"role": m.role, "content": m.content} for m in t.messages]
        first = next(i for i, m in enumerate(msgs) if m["role"] == "assistant")
        rows.append({"prompt": msgs[:first], "chosen": [msgs[first]],
                     "rejected": [{"role": "assistant", "content": "Think: guess.\nAct: answer(0)"}]})
    return rows


def check_precision(smoke: Smoke, work: Path) -> None:
    """The SFT trainer config the kit builds: bf16 only where the GPU has it natively, fp16 on other
    GPUs (a T4 emulates bf16; Unsloth loads fp16 there), neither on a CPU."""
    import torch

    from openmanus_lite.train.sft import SFTRunConfig

    cfg = SFTRunConfig(output_dir=str(work / "precision"))
    flags = {"bf16": bool(cfg.bf16), "fp16": bool(cfg.fp16)}
    if smoke.cuda:
        native = torch.cuda.is_bf16_supported(including_emulation=False)
        expected = {"bf16": native, "fp16": not native}
        detail = f"{flags} on {torch.cuda.get_device_name()} (native bf16: {native})"
    else:
        expected = {"bf16": False, "fp16": False}
        detail = f"{flags} on CPU"
    smoke.check("precision", flags == expected, detail)


def generation_checks(smoke: Smoke, name: str, model: Any, tok: Any, new_tokens: int) -> None:
    """Greedy batch 8 == batch 1, and a 2-turn conversation with the prefix cache == without."""
    from openmanus_lite.engine.generation import PrefixCache, generate_turns

    with smoke.stage(f"generate/{name}") as info:
        if info.get("skipped"):
            return
        t = time.perf_counter()
        batched = generate_turns(model, tok, CONVERSATIONS, max_new_tokens=new_tokens, batch_size=8)
        info["seconds"] = time.perf_counter() - t
        info["tokens"] = batched.num_generated_tokens
        single = [generate_turns(model, tok, [c], max_new_tokens=new_tokens).completion_ids[0] for c in CONVERSATIONS]
        same = sum(a == b for a, b in zip(batched.completion_ids, single))
        smoke.check(f"batch8_equals_batch1/{name}", same == len(CONVERSATIONS),
                    f"{same}/{len(CONVERSATIONS)} identical, {info['tokens']} tokens at batch 8")
    with smoke.stage(f"prefix_cache/{name}") as info:
        if info.get("skipped"):
            return
        outs = {}
        for label, cache in (("off", None), ("on", PrefixCache())):
            convs = [list(c) for c in CONVERSATIONS]
            first = generate_turns(model, tok, convs, max_new_tokens=new_tokens, batch_size=8, kv_cache=cache)
            convs = [c + [{"role": "assistant", "content": r}, {"role": "user", "content": "Nothing happens."}]
                     for c, r in zip(convs, first.texts)]
            second = generate_turns(model, tok, convs, max_new_tokens=new_tokens, batch_size=8, kv_cache=cache)
            outs[label] = (first.completion_ids, second.completion_ids, cache.reused_tokens if cache else 0)
        same = sum(a == b for a, b in zip(outs["off"][1], outs["on"][1]))
        smoke.check(f"prefix_cache_equal/{name}", outs["off"][:2] == outs["on"][:2] and outs["on"][2] > 0,
                    f"turn 2: {same}/{len(CONVERSATIONS)} identical, {outs['on'][2]} prompt tokens reused")


def prepare_process(args: argparse.Namespace) -> None:
    """The device, the reported capability and the offline settings, set before torch is imported; then unsloth
    (before trl / transformers, as the kit does). Shared by this smoke test and gpu_probe.py."""
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # before torch is imported: the whole kit sees no GPU
    if args.capability:
        report_capability(args.capability)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        import unsloth  # noqa: F401
    except Exception as e:
        print(f"unsloth does not import ({type(e).__name__}: {e}); the HF + PEFT backend only")


def run(args: argparse.Namespace) -> int:
    prepare_process(args)
    import torch

    from openmanus_lite.models import build_tiny_model, load_model, unsloth_available

    cuda = torch.cuda.is_available()
    smoke = Smoke(cuda, args.time_limit)
    torch.manual_seed(0)
    if args.device == "cuda" and not cuda:
        smoke.check("device", False, "--device cuda but torch sees no GPU (torch.cuda.is_available() is False)")
    else:
        smoke.check("device", True, torch.cuda.get_device_name() if cuda else "cpu")
    backend = args.backend if args.backend != "auto" else ("unsloth" if unsloth_available() else "hf")
    work = Path(args.out or tempfile.mkdtemp(prefix="gpu_smoke_"))
    work.mkdir(parents=True, exist_ok=True)
    device = "cuda" if cuda else "cpu"
    result: dict[str, Any] = {"device": device, "backend": backend, "torch": torch.__version__,
                              "gpu": torch.cuda.get_device_name() if cuda else None,
                              "capability": list(torch.cuda.get_device_capability()) if cuda else None}

    with smoke.stage("setup"):
        tiny = build_tiny_model(work / "tiny", seed=0)
        check_precision(smoke, work)

    with smoke.stage("load_4bit") as info:
        if not info.get("skipped"):
            try:
                import bitsandbytes  # noqa: F401
                has_bnb = True
            except Exception as e:
                has_bnb, why = False, f"bitsandbytes does not import ({type(e).__name__})"
            if not cuda:
                smoke.skip("load_4bit", "no CUDA device (4-bit QLoRA on a GPU is what this checks)")
            elif not has_bnb:
                smoke.skip("load_4bit", why)
            else:
                q, qtok = load_model(args.model or tiny, backend=backend, load_in_4bit=True, lora=lora())
                n4 = sum("4bit" in type(m).__name__ for m in q.modules())
                ids = torch.tensor([qtok("Count the rows.", add_special_tokens=False)["input_ids"]], device="cuda")
                with torch.no_grad():
                    finite = bool(torch.isfinite(q(input_ids=ids).logits).all())
                smoke.check("load_4bit", n4 > 0 and finite and device_of(q) == "cuda",
                            f"{n4} 4-bit layers, finite logits: {finite}, on {device_of(q)}")
                del q

    models = [("tiny", str(tiny))] + ([("model", args.model)] if args.model else [])
    for name, path in models:
        with smoke.stage(f"load/{name}") as info:
            if info.get("skipped"):
                continue
            m, t = load_model(path, backend=backend, dtype=torch.float32)  # greedy equality: see the module doc
            dtype = str(next(m.parameters()).dtype).removeprefix("torch.")
            smoke.check(f"on_device/{name}", device_of(m) == device, f"{device_of(m)}, {dtype}")
        generation_checks(smoke, name, m, t, args.new_tokens)
        del m

    from openmanus_lite.models import free_memory

    free_memory()
    model, tok = load_model(tiny, backend=backend, lora=lora())
    ds, trajs = sft_rows(tok)
    with smoke.stage("sft") as info:
        if not info.get("skipped"):
            from openmanus_lite.train.sft import SFTRunConfig, build_trainer

            cfg = SFTRunConfig(output_dir=str(work / "sft"), max_steps=5, save_steps=1000, logging_steps=1,
                               per_device_train_batch_size=4, max_length=512, warmup_steps=0, resume=False,
                               disable_tqdm=True)
            trainer = build_trainer(model, tok, ds, cfg)
            losses, precision, skipped = train_and_read(trainer, info)
            finite = bool(losses) and all(math.isfinite(x) for x in losses)
            smoke.check("sft", trainer.state.global_step == 5 and len(losses) == 5 and finite and skipped == 0,
                        f"{trainer.state.global_step} steps, {precision}, losses {[round(x, 3) for x in losses]}, "
                        f"{skipped} steps skipped by the fp16 grad scaler")
            model = trainer.model
            del trainer

    with smoke.stage("grpo_multi_turn") as info:
        if not info.get("skipped"):
            from openmanus_lite.envs import generate_tasks
            from openmanus_lite.train.grpo import GRPORunConfig, build_env_dataset, run_grpo

            tasks = generate_tasks("db", 2, seed=0) + generate_tasks("kg", 2, seed=0)
            gds, rollout = build_env_dataset(tasks, max_turns=2, max_new_tokens=args.new_tokens)
            cfg = GRPORunConfig(mode="multi", output_dir=str(work / "grpo"), max_steps=3, num_generations=2,
                                per_device_train_batch_size=4, max_episode_tokens=4 * args.new_tokens + 64,
                                max_new_tokens=args.new_tokens, save_strategy="no", disable_tqdm=True,
                                learning_rate=1e-5)
            res = run_grpo(model, tok, gds, cfg, rollout_func=rollout)
            stats = rollout.total_stats
            info["seconds"], info["tokens"] = stats.seconds, stats.generated_tokens
            eps = rollout.last_episodes
            masks_ok = bool(eps) and all(len(e.env_mask) == len(e.completion_ids) and 1 in e.env_mask for e in eps)
            observed = sum(0 in e.env_mask for e in eps)
            losses = [r["loss"] for r in res.log_history if "loss" in r]
            smoke.check("grpo_multi_turn", res.global_step == 3 and masks_ok and all(map(math.isfinite, losses)),
                        f"{res.global_step} steps, {len(eps)} episodes in the last rollout ({observed} with "
                        f"environment tokens masked), rollout {stats.tokens_per_s:.0f} tokens/s")
            model = res.trainer.model
            del res

    with smoke.stage("evaluation") as info:
        if not info.get("skipped"):
            from openmanus_lite.eval.benchmark import run_benchmark
            from openmanus_lite.eval.suites import load_suite
            from openmanus_lite.policies import ModelPolicy

            tasks = load_suite("dev", difficulties=["easy"]).tasks[:10]
            policy = ModelPolicy(model, tok, name="smoke", max_new_tokens=args.new_tokens)
            t = time.perf_counter()
            bench = run_benchmark(policy, tasks, max_turns=3, progress=False)
            info["seconds"] = time.perf_counter() - t
            info["tokens"] = bench.generated_tokens or 0
            smoke.check("evaluation", len(bench.records) == 10,
                        f"{len(bench.records)} episodes, success {bench.success_rate():.2f}")

    merged = None
    with smoke.stage("save_merge_reload") as info:
        if not info.get("skipped"):
            from openmanus_lite.train.sft import load_trained, save_adapter, save_merged

            probe = torch.tensor([tok("Think: count the rows.", add_special_tokens=False)["input_ids"]])
            model.eval()
            with torch.no_grad():
                ref = torch.log_softmax(model(input_ids=probe.to(device_of(model))).logits.float(), -1).cpu()
            adapter = save_adapter(model, tok, work / "adapter")
            merged = save_merged(model, tok, work / "merged")
            diffs, places = {}, {}
            for label, path in (("adapter", adapter), ("merged", merged)):
                back, _ = load_trained(path, backend=backend)
                places[label] = device_of(back)
                with torch.no_grad():
                    got = torch.log_softmax(back(input_ids=probe.to(device_of(back))).logits.float(), -1).cpu()
                diffs[label] = round(float((got - ref).abs().max()), 4)
                del back
            ok = all(p == device for p in places.values()) and max(diffs.values()) < 0.1
            smoke.check("save_merge_reload", ok, f"on {places}, max |log-prob difference| {diffs}")
    del model
    free_memory()

    with smoke.stage("dpo") as info:
        if not info.get("skipped"):
            from openmanus_lite.preference.dpo import DPORunConfig, run_dpo

            if merged is None:
                raise RuntimeError("no merged checkpoint (the save stage failed)")
            s = DPORunConfig(max_steps=2, per_device_train_batch_size=2, max_length=512, logging_steps=1,
                             backend=backend, lora_r=lora().r, lora_alpha=lora().alpha)
            dpo = run_dpo(str(merged), dpo_rows(trajs), s, output_dir=work / "dpo")
            losses = [e["loss"] for e in dpo.log if "loss" in e]
            smoke.check("dpo", dpo.steps == 2 and bool(losses) and all(map(math.isfinite, losses)),
                        f"{dpo.steps} steps, losses {[round(x, 4) for x in losses]}")
            del dpo
    free_memory()

    with smoke.stage("unsloth_vs_hf") as info:
        if not info.get("skipped"):
            if not unsloth_available():
                smoke.skip("unsloth_vs_hf", "unsloth does not import")
            else:
                path = args.model or str(tiny)
                probe_ids = None
                outs = {}
                for b in ("unsloth", "hf"):
                    m, t = load_model(path, backend=b)
                    if probe_ids is None:
                        probe_ids = torch.tensor([t("Count the rows of table t1.", add_special_tokens=False)
                                                  ["input_ids"]])
                    with torch.no_grad():
                        outs[b] = torch.log_softmax(m(input_ids=probe_ids.to(device_of(m))).logits.float(), -1).cpu()
                    from openmanus_lite.engine.generation import generate_turns

                    tg = time.perf_counter()
                    g = generate_turns(m, t, CONVERSATIONS, max_new_tokens=args.new_tokens, batch_size=8)
                    result[f"generate_tokens_per_s/{b}"] = round(g.num_generated_tokens / (time.perf_counter() - tg), 1)
                    outs[b + "_dtype"] = str(next(m.parameters()).dtype).removeprefix("torch.")
                    del m
                    free_memory()
                diff = float((outs["unsloth"] - outs["hf"]).abs().max())
                finite = bool(torch.isfinite(outs["unsloth"]).all() and torch.isfinite(outs["hf"]).all())
                tol = 1e-3 if outs["unsloth_dtype"] == outs["hf_dtype"] == "float32" else 0.5
                smoke.check("unsloth_vs_hf", finite and diff < tol,
                            f"max |log-prob difference| {diff:.2e} (tolerance {tol}; dtypes {outs['unsloth_dtype']} / "
                            f"{outs['hf_dtype']}); generation tokens/s {result['generate_tokens_per_s/unsloth']} / "
                            f"{result['generate_tokens_per_s/hf']}")

    result.update(ok=not smoke.failed, failed=smoke.failed, seconds=round(time.perf_counter() - smoke.t0, 1),
                  checks=smoke.checks, stages=smoke.stages)
    print("RESULT " + json.dumps(result, default=str))
    return 1 if smoke.failed else 0


def main(argv: list[str] | None = None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())

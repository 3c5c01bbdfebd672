"""Does GRPO learn on this machine? Single-turn and multi-turn runs, measured, not assumed.

single  From the preset's model (cpu: SmolLM2-135M-Instruct + LoRA) after a short SFT on the
        tag format, single-turn GRPO on environment value questions with `answer_match format
        tag_count` (before issue #32 the kit called that agent check `accuracy`). Reports mean
        format + tag_count over the first vs the last 10 steps, and held-out accuracy (greedy,
        scored by answer_match) before vs after GRPO.
multi   From the SFT checkpoint of the SFT benchmark (benchmarks/sft_learning.py saves
        runs/sft_learning/checkpoint; --sft PATH, --wait_sft to poll for it), multi-turn GRPO in
        the environments where that checkpoint solves some probe tasks but not all (GRPO learns
        only where a group's rollouts differ in outcome; if every domain is all or nothing, those
        with any), on --difficulties (easy, or easy and medium mixed). Reports the mean environment
        reward over the first vs the last 10 steps, and held-out success (--eval_n tasks per domain
        and difficulty, the same before and after) with 95% Wilson intervals and the paired flips.
        `--control sft` trains SFT on the expert's episodes of the same tasks in GRPO's place.
Both report the median step time, the rollout's generated tokens per second and the peak memory.
`--dtype auto` trains the policy in bf16 where the CPU has it natively: from the 60-minute checkpoint a
multi-turn step took 28.5 s against 37.4 in float32 and peaked 4 GB lower (side by side, docs/RESULTS.md).

Tasks come from `openmanus_lite.splits`: training prompts and tasks from GRPO_TRAIN_SEED (+ --seed),
held-out ones from EVAL_SEED, the probe from GRPO_PROBE_SEED, and the multi-turn run checks that no
held-out or probe task is among GRPO's or the SFT checkpoint's training tasks. Changed in issue #28:
held-out tasks used seed 1000 (+ --seed), the SFT benchmark's training seed, so the SFT checkpoint had
trained on the multi-turn "held-out" tasks; they are now the SFT benchmark's held-out seed (7001, not
offset by --seed), and the probe moved from 2000 (the SFT corrections' training seed) to 3000. Figures
measured before that change are not comparable with later ones.

Every run is bounded: --single_steps / --multi_steps and --single_minutes / --multi_minutes
(the trainer stops cleanly at the time limit). The defaults are short because the machine is
shared; raise them for the full measurement, e.g.

    python benchmarks/grpo_learning.py --part single --single_steps 60 --single_minutes 60
    python benchmarks/grpo_learning.py --part multi --sft runs/sft_learning/checkpoint --multi_steps 40

Ends with one line `RESULT {json}`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

SFT_CANDIDATES = ("runs/sft_learning/checkpoint",)  # where benchmarks/sft_learning.py saves its final model


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--part", choices=("single", "multi", "both"), default="both")
    p.add_argument("--preset", default="cpu")
    p.add_argument("--model", default=None, help="single-turn start (default: the preset's model)")
    p.add_argument("--dtype", default=None,
                   help="the policy's weights: auto (bfloat16 where the CPU/GPU has it natively), float32, bfloat16; "
                        "default: the preset's (float32 for cpu)")
    p.add_argument("--bf16", action="store_true",
                   help="bf16 mixed precision (autocast) over float32 weights instead (GRPORunConfig.bf16)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (1 is faster on a contended machine)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/grpo_learning")
    # single-turn
    p.add_argument("--single_domains", default="kg,db")
    p.add_argument("--train_n", type=int, default=32, help="training prompts per domain")
    p.add_argument("--heldout_n", type=int, default=20, help="held-out prompts per domain")
    p.add_argument("--warmup_steps", type=int, default=6, help="SFT steps on the tag format before GRPO")
    p.add_argument("--single_steps", type=int, default=20)
    p.add_argument("--single_minutes", type=float, default=30)
    p.add_argument("--single_completion", type=int, default=None, help="answer tokens (default: the preset's)")
    p.add_argument("--single_lr", type=float, default=None, help="GRPO learning rate (default: the preset's)")
    p.add_argument("--num_generations", type=int, default=None, help="samples per prompt (default: the preset's)")
    p.add_argument("--prompts_per_step", type=int, default=1, help="groups per optimizer step")
    p.add_argument("--micro_batch", type=int, default=None,
                   help="rows per forward/backward pass (default: the whole generation batch in one)")
    p.add_argument("--drop_uniform_groups", action=argparse.BooleanOptionalAction, default=None,
                   help="drop groups whose rewards all agree before any backward pass (default: the preset's)")
    p.add_argument("--step_advantage_weight", type=float, default=None, help="multi: GiGPO step credit (0: off)")
    p.add_argument("--grpo_set", action="append", default=[], metavar="FIELD=VALUE",
                   help="any GRPORunConfig field (value read as JSON, else as text), e.g. epsilon_high=null "
                        "refill_rounds=0; repeatable")
    p.add_argument("--prescreen", type=int, default=0,
                   help="multi: K sampled episodes per training task first, training only on those solved sometimes "
                        "(grpo_signal.prescreen_tasks; its minutes are reported, not counted in --multi_minutes)")
    p.add_argument("--prescreen_n", type=int, default=16,
                   help="training tasks screened per domain and difficulty (the kept ones are all GRPO trains on)")
    # multi-turn
    p.add_argument("--sft", default="auto", help="SFT checkpoint (merged model or LoRA adapter); auto: look in runs/")
    p.add_argument("--wait_sft", type=float, default=0, help="seconds to wait for the SFT checkpoint to appear")
    p.add_argument("--multi_domains", default="db,kg,os", help="candidates; trained on those where the SFT model's probe outcomes are mixed")
    p.add_argument("--probe_n", type=int, default=10, help="probe tasks per candidate domain")
    p.add_argument("--train_domains", choices=("mixed", "unsolved", "all"), default="mixed",
                   help="multi: train where the probe's outcomes are mixed (plain GRPO's only signal), where the "
                        "probe did not solve every task (expert samples give never-solved tasks signal), or on every "
                        "candidate (expert prefixes reach never-solved tasks, step credit always-solved ones)")
    p.add_argument("--eval_domains", choices=("trained", "all"), default="trained",
                   help="multi: held-out tasks of the trained domains, or of every candidate (a domain GRPO "
                        "did not train can still lose)")
    p.add_argument("--before", default=None,
                   help="multi: an earlier run's heldout_before.csv from the same SFT checkpoint and flags, reused "
                        "instead of evaluating again (greedy, so it is the same; 180 tasks take ~9 minutes); its "
                        "tasks must be this run's")
    p.add_argument("--save_model", default=None, metavar="DIR",
                   help="multi: the trained model, merged, saved to DIR before the final evaluation (a later run's "
                        "--sft: e.g. GRPO from the checkpoint the SFT control trained)")
    p.add_argument("--control", choices=("none", "sft"), default="none",
                   help="multi: 'sft' trains, in place of GRPO, SFT on the expert's episodes of the same training "
                        "tasks for the same --multi_minutes at the same --multi_lr and 8 episodes per update: is a "
                        "gain with expert samples RL, or imitation of the expert alone?")
    p.add_argument("--multi_steps", type=int, default=20)
    p.add_argument("--multi_minutes", type=float, default=30)
    p.add_argument("--multi_lr", type=float, default=None, help="GRPO learning rate (default: the preset's)")
    p.add_argument("--multi_rewards", default=None,
                   help="reward spec, e.g. 'env_outcome react_format:0.25 invalid_action:0.25' (docs/RESULTS.md's "
                        "first two rows; default: grpo.DEFAULT_REWARDS['multi'], env_outcome)")
    p.add_argument("--eval_n", type=int, default=50, help="held-out tasks per domain and difficulty (same before/after)")
    p.add_argument("--difficulties", default="easy",
                   help="task difficulties to train, probe and evaluate on, e.g. easy,medium (mixed in one run)")
    p.add_argument("--max_turns", default=None, help="N or domain=N,... (default: the per-domain limits the SFT benchmark trained with)")
    p.add_argument("--max_new_tokens", type=int, default=None)
    p.add_argument("--episode_tokens", type=int, default=None)
    return p.parse_args(argv)


def first_last(log_history, keys, n=10):
    from openmanus_lite.train.grpo import first_last as _first_last

    return _first_last(log_history, keys, n)


def trained_domains(choice: str, probe: dict[str, tuple[int, int]]) -> list[str]:
    """The domains GRPO trains on, from the probe's (successes, tasks) per candidate and --train_domains."""
    if choice == "all":
        return list(probe)
    if choice == "unsolved":  # expert samples give a never-solved domain signal; an always-solved one has none
        return [d for d, (won, n) in probe.items() if won < n]
    # plain GRPO learns where a group has mixed outcomes: skip domains the probe never or always solves
    return [d for d, (won, n) in probe.items() if 0 < won < n] or [d for d, (won, _) in probe.items() if won > 0]


def step_figures(log_history):
    steps = [r["step_time"] for r in log_history if "step_time" in r]
    tps = [r["rollout/tokens_per_s"] for r in log_history if r.get("rollout/tokens_per_s") is not None]
    signal = {k: [r[k] for r in log_history if k in r] for k in ("signal/samples_dropped", "signal/backward_skipped")}
    logged = [r for r in log_history if "signal/group_share" in r]  # each step's figures over all its rollout rounds
    groups = [(r["signal/group_share"], r["signal/groups_kept"] + r["signal/groups_dropped"]) for r in logged]
    rolled_out = sum(n for _, n in groups)
    useful = sum(r["signal/group_share"] * (r["signal/samples_kept"] + r["signal/samples_dropped"])
                 for r in logged)  # samples in groups whose rewards differ
    return {
        "step_time_median_s": round(statistics.median(steps), 2) if steps else None,
        "rollout_tokens_per_s_median": round(statistics.median(tps), 1) if tps else None,
        "group_share_with_signal": round(sum(s * n for s, n in groups) / rolled_out, 3) if rolled_out else None,
        "samples_dropped": sum(signal["signal/samples_dropped"]),
        "backward_skipped": sum(signal["signal/backward_skipped"]),
        "seconds_per_useful_sample": round(sum(steps) / useful, 2) if useful and steps else None,
        "expert_samples_per_step": round(statistics.mean(experts), 2) if (experts := [
            r["guide/expert_samples"] for r in log_history if "guide/expert_samples" in r]) else None,
    }


def run_single(args, preset):
    from openmanus_lite.splits import EVAL_SEED, GRPO_TRAIN_SEED
    from openmanus_lite.train import grpo
    from openmanus_lite.train.sft import run_sft

    t0 = time.perf_counter()
    domains = [d for d in args.single_domains.split(",") if d]
    model, tok = grpo.load_for_grpo(args.model, preset)
    train_rows = grpo.value_task_rows(domains, n=args.train_n, seed=GRPO_TRAIN_SEED + args.seed, for_training=True)
    heldout = grpo.unseen_rows(grpo.value_task_rows(domains, n=args.heldout_n, seed=EVAL_SEED), train_rows)
    settings = dict(mode="single", max_steps=args.single_steps, output_dir=f"{args.out}/single", save_strategy="no",
                    sample_every=0, seed=args.seed, max_minutes=args.single_minutes, **_common(preset, args, args.single_lr))
    if args.single_completion:
        settings["max_completion_length"] = args.single_completion
    cfg = preset.grpo_config(**settings)
    if args.warmup_steps:
        run_sft(model, tok, grpo.format_warmup_trajectories(train_rows),
                preset.sft_config(max_steps=args.warmup_steps, output_dir=f"{args.out}/warmup", resume=False,
                                  save_steps=10**6, max_length=2048, warmup_steps=1, disable_tqdm=True))
    t_eval = time.perf_counter()
    before = grpo.single_turn_accuracy(model, tok, heldout, max_new_tokens=cfg.max_completion_length)
    eval_s = time.perf_counter() - t_eval
    print(f"held-out before GRPO ({len(heldout)} prompts, {eval_s:.0f}s): "
          f"{ {k: round(before[k], 3) for k in ('accuracy', 'format', 'tag_count')} }", flush=True)
    res = grpo.run_grpo(model, tok, grpo.build_single_turn_dataset(train_rows, shuffle_seed=args.seed), cfg)
    _partial(args, "single", res.log_history, format_plus_tag_count=first_last(
        res.log_history, ["rewards/format/mean", "rewards/tag_count/mean"]), heldout_before=before)
    after = grpo.single_turn_accuracy(model, tok, heldout, max_new_tokens=cfg.max_completion_length)
    print(f"held-out after GRPO: { {k: round(after[k], 3) for k in ('accuracy', 'format', 'tag_count')} }", flush=True)
    _save_plot(res.log_history, f"{args.out}/single_rewards.png", "single-turn GRPO")
    n_right = (sum(1 for _ in heldout), round(before["accuracy"] * len(heldout)), round(after["accuracy"] * len(heldout)))
    return {
        "domains": domains,
        "train_prompts": len(train_rows),
        "heldout_prompts": len(heldout),
        "steps": res.global_step,
        "format_plus_tag_count": first_last(res.log_history, ["rewards/format/mean", "rewards/tag_count/mean"]),
        "reward": first_last(res.log_history, ["reward"]),
        "accuracy_during_training": first_last(res.log_history, ["rewards/answer_match/mean"]),
        "heldout_before": {k: round(before[k], 4) for k in ("accuracy", "format", "tag_count")},
        "heldout_after": {k: round(after[k], 4) for k in ("accuracy", "format", "tag_count")},
        "heldout_accuracy_ci_before": _ci(n_right[1], n_right[0]),
        "heldout_accuracy_ci_after": _ci(n_right[2], n_right[0]),
        **step_figures(res.log_history),
        "wall_min": round((time.perf_counter() - t0) / 60, 1),
    }


def find_sft(args) -> str | None:
    paths = [args.sft] if args.sft != "auto" else list(SFT_CANDIDATES)
    deadline = time.time() + args.wait_sft
    while True:
        for p in paths:
            if (Path(p) / "config.json").is_file() or (Path(p) / "adapter_config.json").is_file():
                return p
        if time.time() >= deadline:
            return None
        print(f"waiting for an SFT checkpoint at {paths} ...", flush=True)
        time.sleep(min(60, max(1, deadline - time.time())))


def run_multi(args, preset):
    from openmanus_lite import splits
    from openmanus_lite.eval.compare import sign_tests
    from openmanus_lite.train import grpo

    sft = find_sft(args)
    if sft is None:
        return {"skipped": f"no SFT checkpoint at {args.sft if args.sft != 'auto' else list(SFT_CANDIDATES)}; "
                           "run benchmarks/sft_learning.py first or pass --sft PATH"}
    t0 = time.perf_counter()
    model, tok = grpo.load_for_grpo(sft, preset)
    settings = dict(mode="multi", max_steps=args.multi_steps, output_dir=f"{args.out}/multi", save_strategy="no",
                    sample_every=0, seed=args.seed, max_minutes=args.multi_minutes, max_turns=_turns(args.max_turns),
                    **_common(preset, args, args.multi_lr))
    for flag, field_name in (("max_new_tokens", "max_new_tokens"), ("episode_tokens", "max_episode_tokens")):
        if getattr(args, flag) is not None:
            settings[field_name] = getattr(args, flag)
    if args.multi_rewards:
        settings["rewards"] = args.multi_rewards
    if args.step_advantage_weight is not None:
        settings["step_advantage_weight"] = args.step_advantage_weight
    cfg = preset.grpo_config(**settings)
    candidates = [d for d in args.multi_domains.split(",") if d]
    levels = [d for d in args.difficulties.split(",") if d]
    # 1. probe: where does the SFT checkpoint already succeed?
    probe_tasks = [t for lv in levels for t in splits.heldout_tasks("grpo_probe", candidates, args.probe_n, difficulty=lv)]
    probe = _env_eval(model, tok, probe_tasks, cfg, "probe")
    probe = {d: probe.row(d) for d in candidates}
    domains, note = trained_domains(args.train_domains, {d: (probe[d].successes, probe[d].n) for d in candidates}), None
    if not domains:
        best = max(candidates, key=lambda d: (probe[d].mean_score, -probe[d].invalid_action_rate))
        domains, note = [best], f"the SFT checkpoint solved no probe task; training on {best} (best score) anyway"
    print(f"probe ({args.probe_n}/domain): { {d: probe[d].successes for d in candidates} } -> train on {domains}",
          flush=True)
    # 2. held-out success before
    train_tasks = [t for lv in levels for t in splits.training_tasks(
        "grpo_train", domains, 64, seed=splits.GRPO_TRAIN_SEED + args.seed, difficulty=lv)[0]]
    eval_domains = candidates if args.eval_domains == "all" else domains
    eval_tasks = [t for lv in levels for t in splits.heldout_tasks("eval", eval_domains, args.eval_n, difficulty=lv)]
    # eval_domains holds the trained ones too: check the SFT checkpoint's tasks of every evaluated domain
    sft_tasks, _ = splits.training_tasks("sft_train", eval_domains, splits.SFT_TRAIN_MAX_PER_DOMAIN)
    splits.check_disjoint({"grpo_train": train_tasks, "sft_train (the SFT checkpoint's)": sft_tasks},
                          {"eval": eval_tasks, "grpo_probe": probe_tasks})
    t_eval = time.perf_counter()
    before = _heldout_before(args.before, eval_tasks) if args.before else _env_eval(model, tok, eval_tasks, cfg, "before")
    before.save(f"{args.out}/heldout_before.csv")  # per task: two runs from one checkpoint pair task by task
    print(f"held-out success before ({len(eval_tasks)} tasks, {time.perf_counter() - t_eval:.0f}s"
          f"{', from ' + args.before if args.before else ''}): "
          f"{ {d: before.row(d).successes for d in eval_domains} }", flush=True)
    screen = None
    if args.prescreen:
        from openmanus_lite.train.grpo_signal import prescreen_tasks

        t_screen = time.perf_counter()
        per_kind: dict = {}
        for t in train_tasks:
            per_kind.setdefault((t.domain, t.difficulty), []).append(t)
        train_tasks = [t for tasks in per_kind.values() for t in tasks[:args.prescreen_n]]
        _, rollout = grpo.build_env_dataset(train_tasks, max_turns=cfg.max_turns, max_new_tokens=cfg.max_new_tokens)
        result = prescreen_tasks(model, tok, train_tasks, rollout, k=args.prescreen,
                                 max_completion_tokens=cfg.max_completion_length)
        print(result.summary(), flush=True)
        screen = {"k": args.prescreen, "kept": len(result.kept), "of": len(train_tasks),
                  "minutes": round((time.perf_counter() - t_screen) / 60, 1)}
        train_tasks = [t for t in train_tasks if t.id in result.kept] or train_tasks
    # 3. GRPO, or the SFT control
    if args.control == "sft":
        res, trained = _sft_control(args, preset, model, tok, train_tasks, cfg)
        log_history = res.loss_history
    else:
        dataset, rollout = grpo.build_env_dataset(train_tasks, max_turns=cfg.max_turns,
                                                  max_new_tokens=cfg.max_new_tokens)
        res = grpo.run_grpo(model, tok, dataset, cfg, rollout_func=rollout)
        log_history = res.log_history
        trained = {"rewards": cfg.reward_spec, "env_reward": first_last(log_history, ["rewards/env_outcome/mean"]),
                   "reward": first_last(log_history, ["reward"]),
                   "rollout_tokens_per_s_total": round(rollout.total_stats.tokens_per_s, 1), **step_figures(log_history)}
    _partial(args, "multi", log_history, heldout_before={d: before.row(d).successes for d in eval_domains})
    if args.save_model:
        from openmanus_lite.train.sft import save_merged

        print(f"saved the trained model to {save_merged(model, tok, args.save_model)}", flush=True)
    after = _env_eval(model, tok, eval_tasks, cfg, "after")
    after.save(f"{args.out}/heldout_after.csv")
    if args.control == "none":
        _save_plot(log_history, f"{args.out}/multi_rewards.png", "multi-turn GRPO")
    per_domain = {}
    for flips in sign_tests(before, after).to_dict("records"):
        d = flips["domain"]
        b, a = before.row(d), after.row(d)
        per_domain[d] = {
            "n": b.n,
            "success_before": b.successes, "success_after": a.successes,
            "ci_before": [round(b.ci_low, 3), round(b.ci_high, 3)], "ci_after": [round(a.ci_low, 3), round(a.ci_high, 3)],
            "valid_rate_before": round(1 - b.invalid_action_rate, 3), "valid_rate_after": round(1 - a.invalid_action_rate, 3),
            "flips_gained": int(flips["gained"]), "flips_lost": int(flips["lost"]),
            "sign_test_p": round(float(flips["p_value"]), 4),
        }
    return {
        "sft": sft,
        "difficulties": levels,
        "probe": {d: probe[d].successes for d in candidates},
        "before_from": args.before,
        "prescreen": screen,
        "domains": domains,
        "note": note,
        "control": args.control, "lr": cfg.learning_rate,
        "steps": res.global_step,
        **trained,
        "heldout": per_domain,
        "wall_min": round((time.perf_counter() - t0) / 60, 1),
    }


def _sft_control(args, preset, model, tok, tasks, cfg):
    """SFT on the expert's episodes of GRPO's training tasks, as long and at the rate GRPO trains: the control that
    says whether expert samples in GRPO gain more than imitating the expert alone. (SFTResult, figures)."""
    from openmanus_lite.envs import expert_trajectories
    from openmanus_lite.train.data import build_sft_dataset
    from openmanus_lite.train.sft import run_sft

    trajectories = expert_trajectories(tasks, max_turns=cfg.max_turns)
    dataset, _ = build_sft_dataset(trajectories, tok, max_length=2048, seed=args.seed)
    sft_cfg = preset.sft_config(
        output_dir=f"{args.out}/control_sft", max_minutes=args.multi_minutes, max_steps=-1, num_train_epochs=1000,
        learning_rate=cfg.learning_rate, lr_scheduler_type="constant", warmup_steps=0, max_length=2048,
        per_device_train_batch_size=1, gradient_accumulation_steps=cfg.num_generations,  # a GRPO group per update
        save_strategy="no", seed=args.seed, resume=False)
    res = run_sft(model, tok, dataset, sft_cfg)
    losses = res.losses()
    return res, {"expert_episodes": len(trajectories), "records": len(dataset), "tokens": res.tokens_seen,
                 "tokens_per_s": round(res.tokens_per_second, 1),
                 "loss_first_last": [losses[0], losses[-1]] if losses else None}


def _partial(args, part, log_history, **figures):
    """Training is done: keep its log and first figures on disk before the (slow) final evaluation."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{part}_log_history.json").write_text(json.dumps(log_history, indent=1, default=float))
    figures = {k: ({kk: vv for kk, vv in v.items() if kk != "samples"} if isinstance(v, dict) else v)
               for k, v in figures.items()}
    print(f"PARTIAL {part} " + json.dumps({**figures, **step_figures(log_history)}, default=float), flush=True)


def _turns(spec):
    """None: the per-domain limits the SFT benchmark trained with (the first message states the limit)."""
    from openmanus_lite.envs import EASY_TURN_LIMITS, parse_turn_limits

    return dict(EASY_TURN_LIMITS) if spec is None else parse_turn_limits(spec)


def _common(preset, args, lr) -> dict:
    """Learning rate and group layout from the flags (one generation batch per optimizer step)."""
    g = args.num_generations or preset.grpo["num_generations"]
    rows = g * args.prompts_per_step
    micro = args.micro_batch or rows
    if rows % micro:
        raise SystemExit(f"--micro_batch {micro} must divide the generation batch ({rows} rows)")
    out = dict(num_generations=g, per_device_train_batch_size=micro, gradient_accumulation_steps=rows // micro)
    if args.drop_uniform_groups is not None:
        out["drop_uniform_groups"] = args.drop_uniform_groups
    for item in args.grpo_set:
        key, _, value = item.partition("=")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    if args.bf16:
        out["bf16"] = True
    return {**out, "learning_rate": lr} if lr else out


def _ci(k: int, n: int):
    from openmanus_lite.eval.metrics import wilson_interval

    lo, hi = wilson_interval(k, n)
    return [round(lo, 3), round(hi, 3)]


def _env_eval(model, tok, tasks, cfg, label: str):
    """Greedy episodes on held-out tasks through the kit's one evaluation (`eval.run_benchmark`)."""
    from openmanus_lite.eval import run_benchmark
    from openmanus_lite.policies import ModelPolicy

    policy = ModelPolicy(model, tok, name=label, max_new_tokens=cfg.max_new_tokens, batch_size=32)
    return run_benchmark(policy, tasks, max_turns=cfg.max_turns, batch_size=32, progress=False, label=label)


def _heldout_before(path, tasks):
    """An earlier run's greedy evaluation of these very tasks; anything else is refused, not compared."""
    from openmanus_lite.eval.benchmark import BenchmarkResult

    before = BenchmarkResult.load(path)
    have, want = sorted(r.task_id for r in before.records), sorted(t.id for t in tasks)
    if have != want:
        raise SystemExit(f"--before {path} holds {len(have)} tasks, this run evaluates {len(want)}; "
                         f"{len(set(want) - set(have))} of them are not in it: same --eval_n, domains and "
                         "--eval_domains needed")
    return before


def _save_plot(log_history, path, title):
    from openmanus_lite.eval.plots import file_pyplot
    from openmanus_lite.train.grpo import plot_reward_curves

    file_pyplot()

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    plot_reward_curves(log_history, title=title, smooth=3).savefig(path, dpi=90)


def main(argv=None) -> int:
    args = parse_args(argv)
    from openmanus_lite.train.grpo import import_trl

    import_trl()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from openmanus_lite.train.presets import get_preset

    preset = get_preset(args.preset).with_dtype(args.dtype)
    result = {"preset": args.preset, "dtype": preset.dtype or "the device's", "mixed_bf16": args.bf16,
              "threads": torch.get_num_threads(), "argv": sys.argv[1:]}
    if args.part in ("single", "both"):
        result["single"] = run_single(args, preset)
    if args.part in ("multi", "both"):
        result["multi"] = run_multi(args, preset)
    from openmanus_lite.peak_memory import peak_rss_gb

    result["peak_rss_gb"] = peak_rss_gb()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "result.json").write_text(json.dumps(result, indent=1))
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

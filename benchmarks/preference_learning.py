"""Preference learning from environment rollouts: does DPO help, do the reward models rank, does
selection by them beat random selection and greedy at equal budget?

Steps (every training phase capped in steps and seconds):
 1. data: on generated training tasks (openmanus_lite.splits: seed PREFERENCE_TRAIN_SEED + --seed,
    without any held-out task of the kit), the start policy's sampled rollouts plus expert episodes and expert episodes with injected mistakes, step-labelled by the
    environment -> step pairs (DPO), trajectory pairs (ORM), step-labelled rows (PRM);
 2. greedy success of the start (SFT) policy on held-out tasks of the frozen `test` suite
    (splits.PREFERENCE_EVAL_SUITE);
 3. DPO from the start checkpoint on the step pairs, then greedy success on the same tasks;
 4. ORM (TRL RewardTrainer) and PRM (token head, transformers Trainer) trained on 75% of the
    training tasks; accuracy on the pairs / step labels of the other 25%;
 5. best-of-N (N = 4, 8: the greedy episode plus N-1 samples, the same samples for every
    selector) selected by the ORM, by the PRM, at random (the expected success of a uniform
    pick) and by the hidden checker (oracle pass@N, an upper bound), against greedy;
 6. beam search (search.py) guided by the PRM vs by search.py's heuristic value, at the same
    budget of candidate turns (a multiple of the greedy episode's turns).
Writes results.json and a plot under --out, and ends with one `RESULT {json}` line.

    python benchmarks/preference_learning.py                       # SFT checkpoint, short default run
    python benchmarks/preference_learning.py --model PATH --train-tasks 30 --eval-tasks 20 \\
        --dpo-seconds 1800 --rm-seconds 900                        # a longer run
    python benchmarks/preference_learning.py --model tiny --quick  # plumbing check on the tiny model

Default model: $OPENMANUS_SFT_CHECKPOINT, else the newest SFT checkpoint under runs/
(benchmarks/sft_learning.py saves one), else the embedded default model (SmolLM2-135M).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def find_start_checkpoint(out: Path) -> str:
    env = os.environ.get("OPENMANUS_SFT_CHECKPOINT")
    if env and Path(env).is_dir():
        return env
    from openmanus_lite.models import find_checkpoint

    found = find_checkpoint("sft")
    if found is not None:
        return str(found)
    from openmanus_lite.models import prepare_default_model

    path = prepare_default_model()
    print(f"no SFT checkpoint under runs/: starting from the embedded default model at {path}", file=sys.stderr)
    return str(path)


def tiny_checkpoint(out: Path) -> str:
    from openmanus_lite.models import build_tiny_model

    return str(build_tiny_model(out / "tiny_model"))


def wilson(k: int, n: int) -> list[float]:
    from openmanus_lite.eval.metrics import wilson_interval

    return [round(x, 4) for x in wilson_interval(k, n)]


def rate(flags: list[bool]) -> dict:
    k, n = sum(map(bool, flags)), len(flags)
    return {"success": round(k / n, 4) if n else None, "k": k, "n": n, "ci95": wilson(k, n)}


def main(argv=None) -> int:
    from openmanus_lite.envs import parse_turn_limits

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="start checkpoint (SFT; full or LoRA adapter), 'default' or 'tiny'")
    p.add_argument("--domains", default="os,db,kg")
    p.add_argument("--difficulty", default="easy")
    p.add_argument("--train-tasks", type=int, default=12, help="generated training tasks per domain")
    p.add_argument("--eval-tasks", type=int, default=10, help="held-out tasks per domain (frozen test suite)")
    p.add_argument("--search-tasks", type=int, default=6, help="tasks per domain for best-of-N (from eval tasks)")
    p.add_argument("--beam-tasks", type=int, default=2, help="tasks per domain for beam search (0: skip)")
    p.add_argument("--beam-multiplier", type=float, default=4.0, help="beam budget in greedy-episode turns")
    p.add_argument("--samples", type=int, default=3, help="sampled rollouts per training task")
    p.add_argument("--mistakes", type=int, default=3, help="mistake-injected expert episodes per training task")
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--max-turns", type=parse_turn_limits, default=None,
                   help="turn limits: N, 'easy', 'medium' or domain=N,... (default: each environment's own)")
    p.add_argument("--max-length", type=int, default=768, help="token budget of training sequences")
    p.add_argument("--dpo-steps", type=int, default=30)
    p.add_argument("--dpo-seconds", type=float, default=600)
    p.add_argument("--dpo-lr", type=float, default=5e-5)
    p.add_argument("--beta", type=float, default=0.1)
    p.add_argument("--rm-steps", type=int, default=40)
    p.add_argument("--rm-seconds", type=float, default=300)
    p.add_argument("--rm-lr", type=float, default=1e-4)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--best-of", default="4,8")
    p.add_argument("--skip", default="",
                   help="comma-separated phases to skip: eval (no generation at all: also skips dpo, bestof, "
                        "beam), dpo, rm, bestof, beam. With --samples 0 and --skip eval the run needs no generation")
    p.add_argument("--quick", action="store_true", help="tiny settings for a plumbing check")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(ROOT / "runs" / "preference_learning"))
    args = p.parse_args(argv)
    if args.quick:
        args.train_tasks, args.eval_tasks, args.search_tasks, args.beam_tasks = 3, 3, 2, 1
        args.samples, args.mistakes, args.dpo_steps, args.rm_steps = 2, 2, 2, 2
        args.best_of, args.max_new_tokens, args.max_turns = "2,4", 24, args.max_turns or 3

    from openmanus_lite.eval.plots import file_pyplot

    plt = file_pyplot()

    from openmanus_lite import search
    from openmanus_lite.eval.benchmark import BenchmarkResult, run_benchmark
    from openmanus_lite.eval.scaling import best_of_n_from_pools, episode_pools, random_pick_rates
    from openmanus_lite.eval.suites import load_suite
    from openmanus_lite.models import load_model
    from openmanus_lite.policies import ModelPolicy
    from openmanus_lite.preference.dpo import resolve_checkpoint, run_dpo
    from openmanus_lite.preference.pairs import build_preference_data, split_by_task
    from openmanus_lite.preference.reward_model import pair_accuracy, step_accuracy, train_orm, train_prm
    from openmanus_lite.schema import Trajectory
    from openmanus_lite.splits import PREFERENCE_EVAL_SUITE, PREFERENCE_TRAIN_SEED, check_disjoint, training_tasks
    from openmanus_lite.train.presets import get_preset

    t_start = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    skip = {s for s in args.skip.split(",") if s}
    if "eval" in skip:
        skip |= {"dpo", "bestof", "beam"}
    domains = [d for d in args.domains.split(",") if d]
    if args.model == "tiny":
        start = tiny_checkpoint(out)
    else:
        start = resolve_checkpoint(args.model or find_start_checkpoint(out))
    print(f"start checkpoint: {start}", file=sys.stderr)
    timings: dict[str, float] = {}

    def policy(model, tok, name, temperature=0.0):
        return ModelPolicy(model, tok, name=name, max_new_tokens=args.max_new_tokens, temperature=temperature,
                           seed=args.seed, batch_size=16)

    # ---- tasks: held-out from the frozen test suite; training tasks generated without the kit's held-out ones
    eval_suite = load_suite(PREFERENCE_EVAL_SUITE, domains=domains, difficulties=[args.difficulty],
                            limit=args.eval_tasks)
    train_tasks, overlaps = training_tasks("preference_train", domains, args.train_tasks,
                                           seed=PREFERENCE_TRAIN_SEED + args.seed, difficulty=args.difficulty)
    check_disjoint({"preference_train": train_tasks}, {PREFERENCE_EVAL_SUITE: eval_suite.tasks})

    # ---- 1. data
    t0 = time.perf_counter()
    needs_model = args.samples > 0 or "eval" not in skip
    sft_model, sft_tok = load_model(start) if needs_model else (None, None)
    sampler = policy(sft_model, sft_tok, "sft-sample", args.temperature) if args.samples > 0 else None
    data = build_preference_data(train_tasks, policy=sampler, samples_per_task=args.samples,
                                 mistakes_per_task=args.mistakes, max_turns=args.max_turns, seed=args.seed,
                                 progress=True)
    data.save(str(out / "data"))
    timings["data"] = time.perf_counter() - t0
    print(json.dumps(data.counts, indent=1), file=sys.stderr)

    result: dict = {
        "start": start, "domains": domains, "difficulty": args.difficulty, "train_tasks": len(train_tasks),
        "train_eval_overlaps_removed": overlaps, "eval_tasks": len(eval_suite.tasks), "data": data.counts,
    }
    outcomes: dict[str, set] = {}
    for ep in data.episodes:
        if ep.source.startswith("rollout"):
            outcomes.setdefault(ep.meta["task_id"], set()).add(bool(ep.meta["success"]))
    # the reward models learn to rank most from tasks where the policy's own rollouts both won and lost
    result["rollout_outcomes_by_task"] = {"both": sum(len(v) == 2 for v in outcomes.values()),
                                          "all_success": sum(v == {True} for v in outcomes.values()),
                                          "all_failure": sum(v == {False} for v in outcomes.values())}

    # ---- 2. the start policy, greedy, held-out
    if "eval" not in skip:
        t0 = time.perf_counter()
        sft_eval = run_benchmark(policy(sft_model, sft_tok, "sft"), eval_suite, label="sft",
                                 max_turns=args.max_turns)
        sft_eval.save(out / "eval_sft.json")
        timings["eval_sft"] = time.perf_counter() - t0
        result["sft"] = rate([r.success for r in sft_eval.records])
        result["sft_by_domain"] = {d: rate([r.success for r in sft_eval.records if r.domain == d]) for d in domains}

    # ---- 3. DPO
    if "dpo" not in skip:
        t0 = time.perf_counter()
        s = get_preset("cpu").dpo_config(
            beta=args.beta, learning_rate=args.dpo_lr, max_steps=args.dpo_steps, per_device_train_batch_size=args.batch_size,
            per_device_eval_batch_size=args.batch_size, max_length=args.max_length, seed=args.seed, logging_steps=1,
            max_minutes=args.dpo_seconds / 60 if args.dpo_seconds else None)
        dpo = run_dpo(start, data.step_pairs, s, output_dir=out / "dpo_trainer")
        timings["dpo_train"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        dpo_eval = run_benchmark(policy(dpo.model, dpo.tokenizer, "dpo"), eval_suite, label="dpo",
                                 max_turns=args.max_turns)
        dpo_eval.save(out / "eval_dpo.json")
        timings["eval_dpo"] = time.perf_counter() - t0
        sft_by_task = {r.task_id: r.success for r in sft_eval.records}
        flips = {"gained": sum(1 for r in dpo_eval.records if r.success and not sft_by_task[r.task_id]),
                 "lost": sum(1 for r in dpo_eval.records if not r.success and sft_by_task[r.task_id])}
        logs = [e for e in dpo.log if "loss" in e]
        result["dpo"] = {
            **rate([r.success for r in dpo_eval.records]),
            "by_domain": {d: rate([r.success for r in dpo_eval.records if r.domain == d]) for d in domains},
            "flips_vs_sft": flips, "train": dpo.summary(),
            "reward_accuracy_first_last": [logs[0].get("rewards/accuracies"), logs[-1].get("rewards/accuracies")]
            if logs else None,
            "invalid_action_rate": {"sft": sft_eval.row().invalid_action_rate,
                                    "dpo": dpo_eval.row().invalid_action_rate},
        }
        del dpo

    # ---- 4. reward models
    orm = prm = None
    if "rm" not in skip:
        traj_train, traj_held = split_by_task(data.trajectory_pairs, 0.25, seed=args.seed)
        prm_train, prm_held = split_by_task(data.prm, 0.25, seed=args.seed)
        rs = get_preset("cpu").reward_config(
            learning_rate=args.rm_lr, max_steps=args.rm_steps, per_device_train_batch_size=args.batch_size,
            per_device_eval_batch_size=args.batch_size, max_length=args.max_length, seed=args.seed, logging_steps=5,
            max_minutes=args.rm_seconds / 60 if args.rm_seconds else None)
        t0 = time.perf_counter()
        orm, orm_rep = train_orm(start, traj_train, rs, output_dir=out / "orm_trainer")
        orm.save(out / "orm")
        timings["orm_train"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        prm, prm_rep = train_prm(start, prm_train, rs, output_dir=out / "prm_trainer")
        prm.save(out / "prm")
        timings["prm_train"] = time.perf_counter() - t0
        rollout_held = [r for r in traj_held if r["chosen_source"].startswith("rollout")
                        and r["rejected_source"].startswith("rollout")]
        result["orm"] = {"train": orm_rep.summary(), "heldout_pairs": pair_accuracy(orm, traj_held),
                         "heldout_rollout_vs_rollout": pair_accuracy(orm, rollout_held)}
        result["prm"] = {"train": prm_rep.summary(), "heldout_steps": step_accuracy(prm, prm_held),
                         "heldout_pairs": pair_accuracy(prm, traj_held)}

    # ---- 5. best-of-N from one pool of samples per task
    sizes = sorted(int(x) for x in args.best_of.split(",") if x)
    if "bestof" not in skip and sizes:
        t0 = time.perf_counter()
        pool_suite = eval_suite.subset(limit=args.search_tasks)
        pool_ids = {t.id for t in pool_suite.tasks}
        greedy = BenchmarkResult(sft_eval.policy, sft_eval.suite, [r for r in sft_eval.records if r.task_id in pool_ids])
        sampler = policy(sft_model, sft_tok, "sft-sample", args.temperature)
        samples = [run_benchmark(sampler, pool_suite, max_turns=args.max_turns, label=f"sample{k}")
                   for k in range(max(sizes) - 1)]
        pools = episode_pools(greedy, samples)
        convs = {tid: [Trajectory.from_dict(r.trajectory).to_messages() for r in pool] for tid, pool in pools.items()}
        scores = {name: {tid: rm.score_conversations(c) for tid, c in convs.items()}
                  for name, rm in (("orm", orm), ("prm", prm)) if rm is not None}
        picked = best_of_n_from_pools(pools, sizes, scores, suite_name=eval_suite.name)
        table = {}
        for n in sizes:
            row = {"greedy": greedy.success_rate(), "random": random_pick_rates(pools.values(), [n])[f"{n}x"],
                   "oracle": picked[("best_of_n-oracle", float(n))].success_rate()}
            row.update({name: picked[(f"best_of_n[{name}]", float(n))].success_rate() for name in scores})
            table[f"best_of_{n}"] = {k: round(v, 4) for k, v in row.items()}
            table[f"best_of_{n}"]["n_tasks"] = len(pools)
        result["best_of_n"] = table
        timings["best_of_n"] = time.perf_counter() - t0

    # ---- 6. beam search: PRM value vs heuristic value, same budget of candidate turns
    if "beam" not in skip and args.beam_tasks > 0 and prm is not None:
        t0 = time.perf_counter()
        beam_tasks = [t for d in domains for t in [u for u in eval_suite.tasks if u.domain == d][: args.beam_tasks]]
        proposer = search.PolicyProposer(policy(sft_model, sft_tok, "sft"))
        by_task = {r.task_id: r for r in sft_eval.records}
        beam = {"greedy": [], "beam_prm": [], "beam_heuristic": []}
        for t in beam_tasks:
            budget = search.Budget(calls=max(2, int(args.beam_multiplier * max(1, by_task[t.id].turns))))
            beam["greedy"].append(by_task[t.id].success)
            for name, scorer in (("beam_prm", prm), ("beam_heuristic", "heuristic")):
                r = search.run_search("beam", t, proposer, budget, beam_width=2, k=3, scorer=scorer, seed=args.seed,
                                      max_turns=args.max_turns)
                beam[name].append(bool(r.success))
        result["beam"] = {k: round(sum(v) / len(v), 4) for k, v in beam.items()}
        result["beam"].update(n_tasks=len(beam_tasks), budget_turns_multiplier=args.beam_multiplier)
        timings["beam"] = time.perf_counter() - t0

    result["timings_s"] = {k: round(v, 1) for k, v in timings.items()}
    result["wall_s"] = round(time.perf_counter() - t_start, 1)
    (out / "results.json").write_text(json.dumps(result, indent=2, default=str))

    # ---- plot
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    bars = {"SFT": result["sft"]["success"]} if "sft" in result else {}
    if "dpo" in result:
        bars["DPO"] = result["dpo"]["success"]
    axes[0].bar(list(bars), list(bars.values()), color=["#888", "#3a7"][: len(bars)])
    axes[0].set_ylim(0, 1)
    axes[0].set_title(f"held-out greedy success ({result['eval_tasks']} tasks)")
    if "best_of_n" in result:
        names = ["greedy", "random", "orm", "prm", "oracle"]
        width = 0.8 / len(result["best_of_n"])
        for i, (key, row) in enumerate(result["best_of_n"].items()):
            xs = [j + i * width for j, nm in enumerate(names) if nm in row]
            axes[1].bar(xs, [row[nm] for nm in names if nm in row], width, label=key)
        axes[1].set_xticks([j + 0.4 - width / 2 for j in range(len(names))], names)
        axes[1].set_ylim(0, 1)
        axes[1].legend()
        axes[1].set_title("best-of-N selection (same samples)")
    fig.tight_layout()
    fig.savefig(out / "preference_learning.png", dpi=120)
    result["plot"] = str(out / "preference_learning.png")
    print("RESULT " + json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

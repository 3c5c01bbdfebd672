"""Environment throughput: expert steps per second and task-generation rate, per registered domain.

    python benchmarks/env_throughput.py                      # every domain, 100 tasks per difficulty, 3 rounds
    python benchmarks/env_throughput.py --domains os db --n 300 --rounds 5

A "step" is one `expert_action()` plus one `env.step()` (parsing, executing, scoring on the
last step); `reset()` is timed separately. Rates use the process's CPU time on one pinned core,
so they do not depend on how busy the machine is; wall-clock rates are reported beside them.
Figures are medians over rounds. The target is 5,000 expert steps/s on one core per domain.
Ends with one line `RESULT {json}`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from openmanus_lite.envs import DIFFICULTIES, generate_tasks, list_domains, make_env  # noqa: E402

TARGET_STEPS_PER_S = 5_000


def pin_one_core() -> int | None:
    """Run on a single core (the one we are on), so the figure is a one-core figure."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cores[0]})
    return cores[0]


def time_generation(domain: str, n: int, difficulty: str, seed: int) -> tuple[list, float, float]:
    c0, w0 = time.process_time(), time.perf_counter()
    tasks = generate_tasks(domain, n, seed=seed, difficulty=difficulty)
    return tasks, n / max(time.process_time() - c0, 1e-9), n / max(time.perf_counter() - w0, 1e-9)


def expert_round(domain: str, tasks: list) -> dict[str, float]:
    steps = solved = 0
    step_cpu = reset_cpu = 0.0
    w0 = time.perf_counter()
    for task in tasks:
        env = make_env(domain)
        c = time.process_time()
        env.reset(task)
        reset_cpu += time.process_time() - c
        c = time.process_time()
        last = None
        while not env.done:
            last = env.step(env.expert_action())
            steps += 1
        step_cpu += time.process_time() - c
        solved += bool(last and last.info.get("success"))
    wall = time.perf_counter() - w0
    return {
        "steps_per_s": steps / max(step_cpu, 1e-9),
        "steps_per_s_wall": steps / max(wall, 1e-9),
        "episodes_per_s": len(tasks) / max(step_cpu + reset_cpu, 1e-9),
        "reset_us": reset_cpu / len(tasks) * 1e6,
        "steps_per_episode": steps / len(tasks),
        "success": solved / len(tasks),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--domains", nargs="*", default=None, help="domains to measure (default: all registered)")
    ap.add_argument("--difficulties", nargs="*", default=list(DIFFICULTIES))
    ap.add_argument("--n", type=int, default=100, help="tasks per difficulty (default 100)")
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds over the same tasks (default 3)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-pin", action="store_true", help="do not pin the process to one core")
    args = ap.parse_args(argv)

    core = None if args.no_pin else pin_one_core()
    domains = args.domains or list_domains()
    results: dict[str, dict] = {}
    for domain in domains:
        tasks, gen_cpu, gen_wall = [], [], []
        for difficulty in args.difficulties:
            t, rate_cpu, rate_wall = time_generation(domain, args.n, difficulty, args.seed)
            tasks += t
            gen_cpu.append(rate_cpu)
            gen_wall.append(rate_wall)
        rounds = [expert_round(domain, tasks) for _ in range(max(args.rounds, 1))]
        med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
        results[domain] = {
            "expert_steps_per_s": round(med["steps_per_s"]),
            "expert_steps_per_s_wall": round(med["steps_per_s_wall"]),
            "episodes_per_s": round(med["episodes_per_s"]),
            "reset_us": round(med["reset_us"], 1),
            "steps_per_episode": round(med["steps_per_episode"], 2),
            "expert_success": round(med["success"], 4),
            "gen_tasks_per_s": round(statistics.median(gen_cpu)),
            "gen_tasks_per_s_wall": round(statistics.median(gen_wall)),
            "meets_target": med["steps_per_s"] >= TARGET_STEPS_PER_S,
        }
        r = results[domain]
        print(f"{domain:<10} expert {r['expert_steps_per_s']:>7} steps/s (cpu, one core; wall "
              f"{r['expert_steps_per_s_wall']}), reset {r['reset_us']} us, {r['episodes_per_s']} episodes/s, "
              f"generation {r['gen_tasks_per_s']} tasks/s, expert success {r['expert_success']:.0%}", flush=True)
    summary = {
        "benchmark": "env_throughput",
        "n_per_difficulty": args.n,
        "difficulties": args.difficulties,
        "rounds": args.rounds,
        "pinned_core": core,
        "load_avg_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        "target_steps_per_s": TARGET_STEPS_PER_S,
        "domains": results,
    }
    print("RESULT " + json.dumps(summary, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

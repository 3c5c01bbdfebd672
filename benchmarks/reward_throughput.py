"""Completions per second for each registered reward, on one core.

The batch is realistic and deterministic (seeded): ≈1-2k-character completions in the shapes
GRPO produces — single-turn `<think>/<answer>` messages (a quarter malformed), multi-turn
ReAct episodes (assistant turns with bash/sql/search/answer actions and observations
between them), agent answers checked against lists, numbers and strings, and LaTeX answers
for the math path; golds are shared by `--group` completions as in a GRPO batch, and the gold
caches are cleared before every run. Each reward scores the whole batch `--repeats` times;
the median is reported, per CPU second of the (single) benchmark thread pinned to one core —
on a shared machine wall time mostly measures the neighbours — and per wall second. The
speed of the core itself is printed as ns per empty Python loop iteration.
Targets (one core): format and tag_count >= 200k/s, react_format >= 50k/s, answer_match on
agent answers >= 50k/s; accuracy (open-r1's, math_verify) is reported, not targeted.

    python benchmarks/reward_throughput.py                 # ≈20 s
    python benchmarks/reward_throughput.py --batch 20000 --repeats 15
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from openmanus_lite import react  # noqa: E402
from openmanus_lite import rewards as R  # noqa: E402
from openmanus_lite.rewards.answers import clear_caches  # noqa: E402

WORDS = (
    "the table column rows value check first then file directory count list answer query price "
    "option size color page result order customer total average name search click need should "
    "because looks like returned output error try again maybe correct so we have found this it"
).split()
TARGETS = {"format": 200_000, "tag_count": 200_000, "react_format": 50_000, "answer_match": 50_000}


def sentence(rng: random.Random, n_chars: int) -> str:
    out, size = [], 0
    while size < n_chars:
        w = rng.choice(WORDS)
        out.append(w)
        size += len(w) + 1
    return " ".join(out).capitalize() + "."


def tagged(rng: random.Random) -> list[dict]:
    """A single-turn completion in open-r1's format; one in four breaks it somewhere."""
    think = "\n".join(sentence(rng, rng.randint(100, 250)) for _ in range(rng.randint(5, 9)))
    text = react.format_tagged(think, str(rng.randint(1, 999)))
    kind = rng.randrange(8)
    if kind == 0:
        text = text.replace("</think>\n", "</think>", 1)
    elif kind == 1:
        text = text + "\n<think>\nmore\n</think>"
    return [{"role": "assistant", "content": text}]


def episode(rng: random.Random) -> tuple[list[dict], str]:
    """A multi-turn ReAct completion: 3-4 assistant turns with observations between them."""
    domain = rng.choice(["os", "db", "ecommerce", "kg"])
    acts = {
        "os": lambda: react.bash(f"grep -c {rng.choice(WORDS)} /var/log/app.log | sort -n"),
        "db": lambda: react.sql(f"SELECT {rng.choice(WORDS)}, COUNT(*) FROM orders GROUP BY 1 ORDER BY 2 DESC"),
        "ecommerce": lambda: react.call("search", " ".join(rng.sample(WORDS, 3))),
        "kg": lambda: react.tool("get_neighbors", f"#{rng.randint(0, 5)}, people.person.{rng.choice(WORDS)}"),
    }[domain]
    msgs = []
    n = rng.randint(3, 4)
    for i in range(n):
        action = react.answer(str(rng.randint(1, 99))) if i == n - 1 else acts()
        turn = react.format_turn(sentence(rng, rng.randint(150, 300)), action)
        if rng.random() < 0.1:
            turn = turn.replace("Act:", "Action:")
        msgs.append({"role": "assistant", "content": turn})
        if i < n - 1:
            msgs.append({"role": "user", "content": sentence(rng, rng.randint(80, 200))})
    return msgs, domain


def agent_answer(rng: random.Random) -> tuple[list[dict], object]:
    """A completion that ends in an agent answer, and its gold (list, number or string)."""
    think = "\n".join(sentence(rng, rng.randint(150, 300)) for _ in range(rng.randint(3, 6)))
    kind = rng.randrange(3)
    if kind == 0:
        gold = [rng.choice(WORDS).title() for _ in range(rng.randint(1, 4))]
        shown = list(reversed(gold)) if rng.random() < 0.5 else gold[:1]
        final = "Action: Answer\nFinal Answer: " + json.dumps(shown)
    elif kind == 1:
        gold = round(rng.uniform(0, 1000), 4)
        final = react.format_turn("Done.", react.answer(f"{gold if rng.random() < 0.6 else gold + 1:.2f}"))
    else:
        gold = rng.choice(WORDS)
        final = react.format_tagged("Done.", gold.upper() if rng.random() < 0.6 else "unknown")
    return [{"role": "assistant", "content": f"Think: {think}\n{final}"}], gold


def math_answer(rng: random.Random) -> tuple[list[dict], str]:
    a, b = rng.randint(1, 99), rng.randint(2, 400)
    c = a if rng.random() < 0.5 else a + 1
    think = "\n".join(sentence(rng, rng.randint(150, 300)) for _ in range(rng.randint(3, 6)))
    text = react.format_tagged(think, f"The answer is $\\boxed{{\\frac{{{c}}}{{{b}}}}}$")
    return [{"role": "assistant", "content": text}], f"\\frac{{{a}}}{{{b}}}"


def grouped(make, rng: random.Random, n: int, group: int) -> list:
    """`n` (completion, gold) pairs in which every gold is shared by `group` completions, as in a
    GRPO batch (num_generations completions per prompt)."""
    out = []
    while len(out) < n:
        first = make(rng)
        out.append(first)
        for _ in range(group - 1):
            state = random.Random(rng.random())
            other = make(state)
            out.append((other[0], first[1]))
    return out[:n]


def build(batch: int, math_batch: int, seed: int, group: int = 8) -> dict:
    rng = random.Random(seed)
    single = [tagged(rng) for _ in range(batch)]
    eps = [episode(rng) for _ in range(batch)]
    agent = grouped(agent_answer, rng, batch, group)
    maths = grouped(math_answer, rng, math_batch, group)
    n = len(eps)
    return {
        "single": {"completions": single},
        "react": {
            "completions": [e[0] for e in eps],
            "domain": [e[1] for e in eps],
            "env_outcome": [rng.random() for _ in range(n)],
            "env_success": [rng.random() < 0.3 for _ in range(n)],
            "invalid_actions": [rng.randint(0, 2) for _ in range(n)],
            "num_turns": [4] * n,
        },
        "agent": {"completions": [a[0] for a in agent], "solution": [a[1] for a in agent]},
        "math": {"completions": [m[0] for m in maths], "solution": [m[1] for m in maths]},
    }


def chars(completions) -> list[int]:
    return [sum(len(m["content"]) for m in c) for c in completions]


def rate(func, cols: dict, repeats: int) -> tuple[float, float]:
    """Median completions per second over `repeats` runs on the whole batch: (per CPU second of
    this thread, per wall second). Caches of gold answers are cleared before every run."""
    n = len(cols["completions"])
    func(prompts=None, **cols)  # warm up: lazy imports
    cpu, wall = [], []
    for _ in range(repeats):
        clear_caches()
        gc.collect()
        c0, w0 = time.thread_time(), time.perf_counter()
        func(prompts=None, **cols)
        cpu.append(time.thread_time() - c0)
        wall.append(time.perf_counter() - w0)
    return n / statistics.median(cpu), n / statistics.median(wall)


def python_loop_ns() -> float:
    """Nanoseconds per iteration of an empty Python loop (CPU time): how fast this core is.
    A recent desktop core runs CPython 3.11 at about 15 ns."""
    runs = []
    for _ in range(5):
        c0 = time.thread_time()
        for _ in range(1_000_000):
            pass
        runs.append(time.thread_time() - c0)
    return statistics.median(runs) * 1e3


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=4000, help="completions per batch (non-math)")
    ap.add_argument("--math-batch", type=int, default=100, help="completions for the math_verify path")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--group", type=int, default=8, help="completions sharing one gold (GRPO num_generations)")
    ap.add_argument("--cpu", type=int, default=None, help="pin to this core (default: the first allowed)")
    args = ap.parse_args(argv)

    if hasattr(os, "sched_setaffinity"):
        cpu = args.cpu if args.cpu is not None else min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
    data = build(args.batch, args.math_batch, args.seed, args.group)
    plan = [
        ("format", "single"), ("tag_count", "single"), ("reasoning_steps", "single"),
        ("react_format", "react"), ("react_tag_count", "react"), ("env_outcome", "react"),
        ("env_success", "react"), ("invalid_action", "react"), ("repetition_penalty", "react"),
        ("answer_match", "agent"), ("length", "agent"), ("accuracy", "math"),
    ]
    results: dict[str, float] = {}
    wall: dict[str, float] = {}
    for label, key in plan:
        repeats = 3 if key == "math" else args.repeats
        per_cpu, per_wall = rate(R.get_reward_func(label), data[key], repeats)
        results[label], wall[label] = round(per_cpu), round(per_wall)
        print(f"{label:>20}: {results[label]:>10,} /CPU-s {wall[label]:>10,} /wall-s  ({key} batch)", flush=True)
    loop_ns = python_loop_ns()
    sizes = {k: statistics.median(chars(v["completions"])) for k, v in data.items()}
    met = {k: results[k] >= t for k, t in TARGETS.items()}
    print("median characters per completion:", {k: int(v) for k, v in sizes.items()})
    print("targets met:", met)
    print(f"this core: {loop_ns:.1f} ns per empty Python loop iteration; load average {os.getloadavg()[0]:.1f}")
    out = {
        "completions_per_cpu_s": results,
        "completions_per_wall_s": wall,
        "python_loop_ns": round(loop_ns, 1),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "group": args.group,
        "targets": TARGETS,
        "targets_met": met,
        "median_chars": {k: int(v) for k, v in sizes.items()},
        "batch": args.batch,
        "math_batch": args.math_batch,
        "repeats": args.repeats,
        "cores": 1 if hasattr(os, "sched_setaffinity") else None,
    }
    print("RESULT " + json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Merge throughput at full scale: convert + validate + dedup + split + export, on a synthetic corpus.

The corpus is shaped like the real sources (≈50,800 trajectories, ≈250 MB of JSON):
AgentInstruct (1,866 rows over its six splits, `loss` flags, ANSI noise in OS
observations), Agent-FLAN (34,442 rows over its seven parts, `conversation` + `loss`) and
AgentTraj-L (14,485 rows, item_id prefixes), with a few exact duplicates and a few
truncated lines mixed in (the merge runs in lenient mode and counts them).

Prints each run's trajectories/s, the worker count and peak RSS, then one line
`RESULT {json}` with trajectories/s (end to end, wall clock, median of --repeats), the
worker processes used, the CPU seconds it took (this process and its workers; the figure
that depends least on how busy a shared machine is), the load average when it started,
and peak RSS (main process, and the largest worker). Targets on an idle 2-core machine:
>= 10,000 trajectories/s, <= 1 GB.

    python benchmarks/merge_throughput.py              # full scale, workers auto (2 here)
    python benchmarks/merge_throughput.py --workers 0  # one process
    python benchmarks/merge_throughput.py --n 2000     # quick
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from openmanus_lite.data.merge import MergeConfig, SourceSpec, merge  # noqa: E402

FULL = {
    "agentinstruct": {"os": 195, "db": 538, "alfworld": 336, "webshop": 351, "kg": 324, "mind2web": 122},
    "agent_flan": {
        "agent_instruct_react": 1800, "agent_instruct_tflan": 1800, "toolbench_react_10p": 10000,
        "toolbench_tflan_60p_r10r5u7": 15000, "toolbench_tflan_cot_30p": 4000,
        "toolbench_instruct_j1s1_3k": 1500, "toolbench_negative": 342,
    },
    "agenttraj_l": {
        "webshop_": 3930, "alfworld_": 2420, "sciworld_": 2120, "babyai_": 810, "textcraft_": 374,
        "lmrlgym_maze_": 215, "lmrlgym_wordle_": 955, "sqlgym_": 2000, "weather_": 311, "movie_": 215,
        "todo_": 135, "academia_": 800, "sheet_": 200,
    },
}
FULL_TOTAL = sum(sum(v.values()) for v in FULL.values())

WORDS = ("the of and to in is for on with that file table page item value result number list user data "
         "system query answer check first next find count select order search click open close take put go "
         "room drawer cabinet price size color option button relation entity variable output error line name "
         "directory process memory column row record report task goal step plan think action observation").split()


class Text:
    """Random but cheap text: sentences drawn from a fixed pool (generation must not dominate)."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.pool = [" ".join(rng.choices(WORDS, k=rng.randint(6, 18))).capitalize() + "." for _ in range(4000)]

    def para(self, n_sent: int) -> str:
        return " ".join(self.rng.choices(self.pool, k=n_sent))


def _agentinstruct_row(split: str, i: int, tx: Text, rng: random.Random) -> dict:
    turns = [{"from": "human", "loss": None, "value": f"Instructions for the {split} task. " + tx.para(30)},
             {"from": "gpt", "loss": False, "value": "Ok."},
             {"from": "human", "loss": None, "value": f"Task {i}: " + tx.para(4)}]
    n = rng.randint(2, 8) if split != "mind2web" else 1
    for k in range(n):
        last = k == n - 1
        if split == "os":
            act = "Act: answer(42)" if last else f"Act: bash\n\n```bash\nls -la /var/log/app{k} | wc -l\n```"
            turns.append({"from": "gpt", "loss": True, "value": "Think: " + tx.para(2) + "\n\n" + act})
            obs = f"The output of the OS:\n\n{rng.randint(1, 999)}\r\n\x1b]0;root@abc123: /\x07root@abc123:/# \x1b[K"
        elif split == "db":
            act = ('Action: Answer\nFinal Answer: ["7"]' if last else
                   f"Action: Operation\n```sql\nSELECT COUNT(*) FROM `t{k}` WHERE `c` = {k};\n```")
            turns.append({"from": "gpt", "loss": True, "value": tx.para(2) + "\n" + act})
            obs = f"[({rng.randint(1, 99)},)]"
        elif split == "kg":
            act = f"Final Answer: #{k}" if last else f"Action: get_relations(Entity {i} {k})"
            turns.append({"from": "gpt", "loss": True, "value": "Thought: " + tx.para(2) + "\n" + act})
            obs = "Observation: [" + ", ".join(rng.choices(WORDS, k=8)) + "]"
        elif split == "alfworld":
            turns.append({"from": "gpt", "loss": True, "value": f"THOUGHT: {tx.para(1)}\n ACTION: go to drawer {k + 1}"})
            obs = "On the drawer, you see " + tx.para(1)
        elif split == "webshop":
            act = "click[Buy Now]" if last else f"search[{' '.join(rng.choices(WORDS, k=5))}]"
            turns.append({"from": "gpt", "loss": True, "value": f"Thought:\n{tx.para(1)}\n\nAction:\n{act}"})
            obs = "Instruction: [SEP] " + " [SEP] ".join(tx.para(1) for _ in range(6))
        else:  # mind2web
            turns.append({"from": "gpt", "loss": True,
                          "value": f"Thought: {tx.para(1)}\nAnswer: B.\nAction: TYPE\nValue: {rng.choice(WORDS)}"})
            break
        if not last:
            turns.append({"from": "human", "loss": None, "value": obs})
    return {"id": f"{split}_{i}", "conversations": turns}


def _agent_flan_row(part: str, i: int, tx: Text, rng: random.Random) -> dict:
    conv = [{"role": "system", "content": "You can use these APIs. " + tx.para(32), "loss": False},
            {"role": "user", "content": f"Request {i}: " + tx.para(3), "loss": False}]
    n = rng.randint(1, 5)
    for k in range(n):
        last = k == n - 1
        if part == "agent_instruct_tflan" and k == 0 and not last and rng.random() < 0.3:
            conv.append({"role": "assistant", "content": tx.para(3), "loss": True})  # chat-style turn (rejected)
        elif last:
            args = json.dumps({"return_type": "give_answer", "final_answer": tx.para(1)})
            conv.append({"role": "assistant", "content": f"Thought: {tx.para(1)}\nAction: Finish\nAction Input: {args}",
                         "loss": True})
            break
        else:
            args = json.dumps({"query": " ".join(rng.choices(WORDS, k=3)), "page": k})
            conv.append({"role": "assistant", "content": f"Thought: {tx.para(2)}\nAction: api_{k}_for_tool\n"
                                                          f"Action Input: {args}", "loss": True})
        conv.append({"role": "user", "content": "Observation: " + tx.para(6), "loss": False})
    return {"id": f"{part}_{i}", "conversation": conv}


def _agenttraj_row(prefix: str, i: int, tx: Text, rng: random.Random) -> dict:
    turns = [{"from": "human", "loss": None, "value": "You are an agent. " + tx.para(28)},
             {"from": "gpt", "loss": False, "value": "OK. I'll follow your instructions and try my best to solve the task."},
             {"from": "human", "loss": None, "value": f"Goal {i}: " + tx.para(4)}]
    n = 1 if prefix == "sqlgym_" else rng.randint(2, 10)
    for k in range(n):
        if prefix == "sqlgym_":
            act = f"```sql\nSELECT name FROM people WHERE id = {i}\n```"
        elif prefix in ("weather_", "movie_", "todo_", "academia_", "sheet_"):
            act = (f'finish with Action Input: {{"answer": "{k}"}}' if k == n - 1 else
                   f'get_data with Action Input: {{"id": {k}}}')
        elif prefix == "webshop_":
            act = "click[Buy Now]" if k == n - 1 else f"search[{' '.join(rng.choices(WORDS, k=4))}]"
        else:
            act = f"go to {rng.choice(WORDS)} {k}"
        turns.append({"from": "gpt", "loss": True, "value": f"Thought:\n{tx.para(2)}\n\nAction:\n{act}"})
        if k < n - 1:
            turns.append({"from": "human", "loss": None, "value": tx.para(4)})
    return {"item_id": f"{prefix}{i}", "conversations": turns}


def generate(root: Path, n: int, seed: int = 0) -> tuple[list[SourceSpec], int, int]:
    """Write the corpus under `root`, scaled to about `n` rows; returns (specs, rows, bytes)."""
    rng = random.Random(seed)
    tx = Text(rng)
    scale = n / FULL_TOTAL
    rows = size = 0
    specs = []
    builders = {"agentinstruct": _agentinstruct_row, "agent_flan": _agent_flan_row, "agenttraj_l": _agenttraj_row}
    for source, parts in FULL.items():
        folder = root / source
        folder.mkdir(parents=True, exist_ok=True)
        out_files = {}
        for part, count in parts.items():
            fname = "train" if source == "agenttraj_l" else part
            f = out_files.get(fname) or open(folder / f"{fname}.jsonl", "w", encoding="utf-8")
            out_files[fname] = f
            k = max(1, round(count * scale))
            prev = None
            for i in range(k):
                line = json.dumps(builders[source](part, i, tx, rng), ensure_ascii=False)
                r = rng.random()
                if r < 0.002 and prev:
                    line = prev  # an exact duplicate
                elif r < 0.003:
                    line = line[: len(line) // 2]  # a truncated line
                f.write(line + "\n")
                prev = line
                rows += 1
                size += len(line) + 1
        for f in out_files.values():
            f.close()
        specs.append(SourceSpec(source, str(folder)))
    return specs, rows, size


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _rss_mb(who: int) -> float:
    """Peak resident memory in MB: of this process, or of the largest waited-for child (Linux: ru_maxrss in KB)."""
    return resource.getrusage(who).ru_maxrss / 1024


def run_once(specs: list[SourceSpec], out: Path, formats: tuple[str, ...],
             workers: int | None) -> tuple[float, float, object]:
    """(wall seconds, CPU seconds of this process and its workers, result) of one merge + export."""
    c0, t0 = _cpu_seconds(), time.perf_counter()
    result = merge(specs, MergeConfig(strict=False, seed=0, workers=workers))
    result.save(out, formats=formats)
    return time.perf_counter() - t0, _cpu_seconds() - c0, result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=FULL_TOTAL, help=f"trajectories to generate (default {FULL_TOTAL})")
    ap.add_argument("--repeats", type=int, default=1, help="timed merges; the median is reported")
    ap.add_argument("--formats", default="jsonl", help="export formats, comma-separated (jsonl,parquet,hf)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=None,
                    help="worker processes for converting and writing (default: auto, 2 at full scale on 2+ cores; "
                         "0 = one process)")
    ap.add_argument("--keep", help="keep the corpus and output in this folder")
    args = ap.parse_args(argv)

    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="merge_bench_"))
    try:
        t0 = time.perf_counter()
        specs, rows, size = generate(root / "corpus", args.n, args.seed)
        gen_s = time.perf_counter() - t0
        print(f"generated {rows} rows, {size / 1e6:.0f} MB in {gen_s:.1f} s", flush=True)
        times, cpus = [], []
        result = None
        load = os.getloadavg()[0]
        for r in range(args.repeats):
            out = root / f"out{r}"
            secs, cpu, result = run_once(specs, out, tuple(args.formats.split(",")), args.workers)
            times.append(secs)
            cpus.append(cpu)
            shutil.rmtree(out, ignore_errors=True)
            print(f"run {r + 1}: {secs:.2f} s wall, {cpu:.2f} CPU-s, {rows / secs:,.0f} trajectories/s, "
                  f"{result.workers} workers, peak RSS {_rss_mb(resource.RUSAGE_SELF):.0f} MB "
                  f"(workers {_rss_mb(resource.RUSAGE_CHILDREN):.0f} MB)", flush=True)
        rss_mb, child_rss_mb = _rss_mb(resource.RUSAGE_SELF), _rss_mb(resource.RUSAGE_CHILDREN)
        med, cpu_med = statistics.median(times), statistics.median(cpus)
        print(result.report.summary())
        print("RESULT " + json.dumps({
            "rows": rows, "mb": round(size / 1e6, 1), "seconds_median": round(med, 2),
            "trajectories_per_s": round(rows / med), "workers": result.workers, "peak_rss_mb": round(rss_mb),
            "peak_worker_rss_mb": round(child_rss_mb), "cpu_seconds_median": round(cpu_med, 2),
            "trajectories_per_cpu_s": round(rows / cpu_med), "load_avg_at_start": round(load, 2),
            "kept": result.report.kept, "rejected": result.report.rejected, "formats": args.formats,
            "target_traj_per_s": 10000, "target_rss_mb": 1024,
        }))
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

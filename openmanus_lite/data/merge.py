"""Merge source datasets into one unified training set, with full accounting, mixing and export.

    from openmanus_lite.data import merge, SourceSpec, MergeConfig
    result = merge([SourceSpec("agentinstruct", "THUDM/AgentInstruct"),
                    SourceSpec("agenttraj_l", "data/samples/agenttraj_l")], MergeConfig(seed=0))
    result.report.summary(); result.save("data/merged", formats=("jsonl", "parquet"))

Every input row ends up in exactly one place of `result.report.outcomes`, keyed by
(source, domain, reason), where reason is `kept` or a rejection code (`checks.REASONS`):
conversion and schema errors, excluded labels, failed checks, duplicates, and rows left
out by mixing. `report.verify()` checks that the counts add up to the rows read.
Rows added on top (up-sampled copies, negative samples) are counted in `report.added`.

Mixing happens in this order: labels filter -> weights below 1 (per source and domain)
-> per-source caps -> per-domain caps -> train/validation/test split (stratified by domain,
rows of the same source task kept together) -> weights above 1 up-sample the training
split only -> negative samples derived from the training split. All randomness comes
from `seed`.

Strict mode (the default) stops at the first unreadable row or schema error with an
`InputError` naming file, line and field; lenient mode counts those rows as rejected.
"""

from __future__ import annotations

import gc
import json
import math
import multiprocessing
import os
import pickle
import queue
import random
import shutil
import tempfile
import traceback
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from json.encoder import encode_basestring_ascii
from pathlib import Path
from typing import Any

from openmanus_lite.data.checks import CheckConfig, Deduper, Issue, Validator
from openmanus_lite.data.negatives import make_negatives
from openmanus_lite.data.sources import get_source
from openmanus_lite.data.sources.base import (
    UNREADABLE_PARQUET,
    InputError,
    RawRow,
    RowRejected,
    jsonl_chunks,
    local_files,
    read_jsonl_range,
)
from openmanus_lite.errors import UserError
from openmanus_lite.schema import DOMAINS, EXTRA_LABELS, SchemaError, Trajectory, Turn

SPLITS = ("train", "validation", "test")
MAX_UPSAMPLED_ROWS = 20_000_000
"""The most rows weights above 1 may make of the training split (the whole of AgentTraj-L is 14,485 rows)."""
LENIENT_HINT = " (run with lenient mode, --lenient, to count such rows as rejected and go on)"


class MergeTooLarge(UserError):
    """The merge as configured would make more rows than `MAX_UPSAMPLED_ROWS`; says how many."""


@dataclass
class SourceSpec:
    """One input: a converter name, where the data is, and optional splits/config/label.

    `label` names the input in reports, weights and `Trajectory.source` (default: the
    converter name), so the same converter can read two inputs that are kept apart.
    """

    name: str
    path: str
    splits: list[str] | None = None
    config: str | None = None
    label: str | None = None

    @classmethod
    def parse(cls, text: str) -> "SourceSpec":
        """`name=PATH_OR_HUB_ID` (the CLI form)."""
        name, sep, path = text.partition("=")
        if not sep or not name or not path:
            raise UserError(f"--source {text!r}: expected NAME=PATH_OR_HUB_ID, e.g. agentinstruct=THUDM/AgentInstruct")
        return cls(name=name.strip(), path=path.strip())


@dataclass
class MergeConfig(CheckConfig):
    """Everything a merge can be told. Defaults keep every label and drop nothing on purpose.

    The validation knobs are `CheckConfig`'s (a merge validates with its own config):
    allow_free_text      keep training turns that hold no action (Agent-FLAN's chat-style parts)
    max_turns / max_chars / max_tokens (+ tokenizer)    length limits (`length.*`)
    answer_domains       the domains whose episodes must end with answer(...)
    and the merge's own:
    include / exclude    domain labels to keep / drop (`filter.label_excluded`)
    strict               stop at the first unreadable row or schema error (InputError); False counts them
    dedup                "normalized" (default), "exact" or "none"
    source_weights / domain_weights   below 1: keep that share; above 1: repeat training rows
    source_caps / domain_caps         at most that many rows
    seed, split_ratios   deterministic shuffle and train/validation/test shares (stratified by domain)
    negatives            share of training rows to derive negative samples from (`negatives.py`)
    rejected_path        a JSONL file that receives every rejected row with its reason
    progress             progress bars (tqdm)
    workers              processes, the main one included, that read and convert local JSONL
                         inputs and write JSONL splits of 20,000+ rows (the output is the same
                         bytes); None = 2 from 64 MB of input where 2 CPUs are usable, else 0
    """

    include: tuple[str, ...] | None = None
    exclude: tuple[str, ...] = ()
    strict: bool = True
    dedup: str = "normalized"
    source_weights: dict[str, float] = field(default_factory=dict)
    domain_weights: dict[str, float] = field(default_factory=dict)
    source_caps: dict[str, int] = field(default_factory=dict)
    domain_caps: dict[str, int] = field(default_factory=dict)
    seed: int = 0
    split_ratios: tuple[float, float, float] = (0.9, 0.05, 0.05)
    negatives: float = 0.0
    rejected_path: str | Path | None = None
    progress: bool = False
    workers: int | None = None

    def __post_init__(self) -> None:
        labels = set(DOMAINS + EXTRA_LABELS)
        for name, value in (("include", self.include or ()), ("exclude", self.exclude)):
            bad = set(value) - labels
            if bad:
                raise ValueError(f"{name}: unknown labels {sorted(bad)}; known: {sorted(labels)}")
        if len(self.split_ratios) != 3 or any(r < 0 for r in self.split_ratios) or sum(self.split_ratios) <= 0:
            raise ValueError(f"split_ratios must be three non-negative numbers (train, validation, test), "
                             f"got {self.split_ratios}")
        for name, weights in (("source_weights", self.source_weights), ("domain_weights", self.domain_weights)):
            if any(not 0 <= w < math.inf for w in weights.values()):
                raise ValueError(f"{name} must be finite numbers >= 0, got {weights}")
        for name, caps in (("source_caps", self.source_caps), ("domain_caps", self.domain_caps)):
            if any(c < 0 for c in caps.values()):
                raise ValueError(f"{name} must be row counts >= 0, got {caps}")
        for name in ("max_turns", "max_chars", "max_tokens"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1 (or not given), got {getattr(self, name)}: "
                                 "every row would be rejected")
        if not 0 <= self.negatives <= 1:
            raise ValueError(f"negatives is a share of the training rows in [0, 1], got {self.negatives}")


# --------------------------------------------------------------------------- report


@dataclass
class MergeReport:
    """Where every input row went: (source, domain, reason) -> count, plus rows added on top."""

    input_rows: Counter = field(default_factory=Counter)
    outcomes: Counter = field(default_factory=Counter)
    added: Counter = field(default_factory=Counter)
    splits: dict[str, int] = field(default_factory=dict)

    def record(self, source: str, domain: str, reason: str, n: int = 1) -> None:
        self.outcomes[(source, domain, reason)] += n

    def move(self, source: str, domain: str, reason: str, n: int = 1) -> None:
        """Turn `n` kept rows into rejections (mixing decisions)."""
        self.outcomes[(source, domain, "kept")] -= n
        if self.outcomes[(source, domain, "kept")] == 0:
            del self.outcomes[(source, domain, "kept")]
        self.outcomes[(source, domain, reason)] += n

    @property
    def kept(self) -> int:
        return sum(n for (_, _, r), n in self.outcomes.items() if r == "kept")

    @property
    def rejected(self) -> int:
        return sum(n for (_, _, r), n in self.outcomes.items() if r != "kept")

    def by_reason(self) -> Counter:
        out: Counter = Counter()
        for (_, _, reason), n in self.outcomes.items():
            out[reason] += n
        return out

    def verify(self) -> None:
        """Raise AssertionError unless every source's outcomes add up to its input rows."""
        per_source: Counter = Counter()
        for (source, _, _), n in self.outcomes.items():
            per_source[source] += n
        if per_source != self.input_rows:
            raise AssertionError(f"accounting mismatch: outcomes {dict(per_source)} != input rows {dict(self.input_rows)}")

    def to_rows(self) -> list[dict[str, Any]]:
        rows = [{"source": s, "domain": d, "reason": r, "count": n} for (s, d, r), n in self.outcomes.items()]
        return sorted(rows, key=lambda x: (x["source"], x["domain"], x["reason"] != "kept", x["reason"]))

    def to_frame(self):
        """The outcomes as a pandas DataFrame (source, domain, reason, count)."""
        import pandas as pd

        return pd.DataFrame(self.to_rows(), columns=["source", "domain", "reason", "count"])

    def to_dict(self) -> dict[str, Any]:
        return {
            "input_rows": dict(self.input_rows),
            "kept": self.kept,
            "rejected": self.rejected,
            "outcomes": self.to_rows(),
            "added": [{"source": s, "domain": d, "kind": k, "count": n} for (s, d, k), n in sorted(self.added.items())],
            "splits": dict(self.splits),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "MergeReport":
        rep = cls(input_rows=Counter(d.get("input_rows", {})), splits=dict(d.get("splits", {})))
        for r in d.get("outcomes", []):
            rep.outcomes[(r["source"], r["domain"], r["reason"])] = r["count"]
        for r in d.get("added", []):
            rep.added[(r["source"], r["domain"], r["kind"])] = r["count"]
        return rep

    def summary(self) -> str:
        """A plain-text table: per source, rows read / kept / rejected, then the reasons."""
        width = max([len("source")] + [len(s) for s in self.input_rows]) + 2
        lines = [f"{'source':<{width}}{'read':>8}{'kept':>8}{'rejected':>10}"]
        for source in sorted(self.input_rows):
            kept = sum(n for (s, _, r), n in self.outcomes.items() if s == source and r == "kept")
            lines.append(f"{source:<{width}}{self.input_rows[source]:>8}{kept:>8}{self.input_rows[source] - kept:>10}")
        reasons = {r: n for r, n in self.by_reason().items() if r != "kept"}
        if reasons:
            lines.append("rejections: " + ", ".join(f"{r}={n}" for r, n in sorted(reasons.items())))
        if self.added:
            added: Counter = Counter()
            for (_, _, kind), n in self.added.items():
                added[kind] += n
            lines.append("added: " + ", ".join(f"{k}={n}" for k, n in sorted(added.items())))
        if self.splits:
            lines.append("splits: " + ", ".join(f"{k}={v}" for k, v in self.splits.items()))
        return "\n".join(lines)


@dataclass
class MergeResult:
    """The merged splits and the report of where every input row went."""

    splits: dict[str, list[Trajectory]]
    report: MergeReport
    workers: int = 0
    """The worker processes the merge used (0: none); `save` writes JSONL with as many."""

    @property
    def trajectories(self) -> list[Trajectory]:
        return [t for name in SPLITS for t in self.splits.get(name, [])]

    def save(self, out_dir: str | Path, formats: Iterable[str] = ("jsonl",),
             workers: int | None = None) -> dict[str, list[Path]]:
        """Write the splits (see `save_splits`) and `report.json`; `workers` defaults to the merge's."""
        return save_splits(self.splits, out_dir, formats=formats, report=self.report,
                           workers=self.workers if workers is None else workers)


# --------------------------------------------------------------------------- rejected rows


class _RejectSink:
    """Writes rejected rows (with reason, detail and where they came from) to a JSONL file.

    The rows go to `<path>.partial`, which replaces `path` only when the merge succeeds: a merge
    that fails leaves the rejected rows of the previous merge beside its report.
    """

    def __init__(self, path: str | Path | None):
        self.path = Path(path) if path else None
        self._f = None
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._partial = self.path.with_name(self.path.name + ".partial")
            self._f = open(self._partial, "w", encoding="utf-8")

    def write(self, source: str, domain: str, issue: Issue, *, row: RawRow | None = None,
              traj: Trajectory | None = None) -> None:
        if self._f is None:
            return
        rec: dict[str, Any] = {"source": source, "domain": domain, "reason": issue.reason, "detail": issue.detail}
        if row is not None:
            rec.update(file=row.file, line=row.line, split=row.split, row=row.data)
        if traj is not None:
            rec["id"] = traj.id
            if row is None:
                rec.update(file=traj.meta.get("file"), line=traj.meta.get("line"), trajectory=traj.to_dict())
        self._f.write(json.dumps(rec, ensure_ascii=False, default=str) + "\n")

    def close(self, succeeded: bool) -> None:
        if self._f is not None:
            self._f.close()
            if succeeded:
                os.replace(self._partial, self.path)
            else:
                self._partial.unlink(missing_ok=True)


# --------------------------------------------------------------------------- merge


def _progress(it: Iterator, on: bool, desc: str) -> Iterator:
    if not on:
        return it
    from tqdm.auto import tqdm

    return tqdm(it, desc=desc, unit="rows")


@dataclass(frozen=True)
class _Ctx:
    """What processing a row needs besides the row (picklable, for worker processes)."""

    name: str
    label: str
    check: CheckConfig
    include: frozenset | None
    exclude: frozenset
    dedup: str
    keep_raw: bool


# An outcome: (line, file, split, domain, reason, detail, raw, traj, dedup keys, fatal)
# reason "ok" means converted and valid (dedup still to decide); `fatal` is (where, message)
# for input and schema errors, which strict mode raises.
Outcome = tuple


def _convert_row(module, row: RawRow, label: str) -> tuple[Trajectory | Issue, tuple[str, str] | None]:
    """The row's trajectory (labelled), or the Issue why it has none with the (where, message) that
    strict mode raises as an `InputError`."""
    if row.error is not None:
        reason = ("input.not_object" if row.error.startswith(("expected a JSON", "item ")) else
                  "input.unreadable_file" if row.error.startswith(UNREADABLE_PARQUET) else "input.invalid_json")
        return Issue(reason, f"{row.where()}: {row.error}"), (row.where(), row.error)
    try:
        traj = module.convert(row)
    except RowRejected as e:
        return Issue(e.reason, e.detail), (row.where(e.field), e.message)
    if traj.source != label:
        traj.source = label
    return traj, None


def _process_row(module, ctx: _Ctx, validator: Validator, deduper: Deduper, row: RawRow) -> Outcome:
    raw = row.data if ctx.keep_raw else None
    traj, fatal = _convert_row(module, row, ctx.label)
    if fatal is not None:
        return (row.line, row.file, row.split, "unknown", traj.reason, traj.detail, raw, None, None, fatal)
    domain = traj.domain
    if (ctx.include is not None and domain not in ctx.include) or domain in ctx.exclude:
        return (row.line, row.file, row.split, domain, "filter.label_excluded", f"label {domain!r} excluded", raw,
                traj if ctx.keep_raw else None, None, None)
    issue = validator.validate(traj)
    if issue is not None:
        return (row.line, row.file, row.split, domain, issue.reason, issue.detail, raw,
                traj if ctx.keep_raw else None, None, None)
    return (row.line, row.file, row.split, domain, "ok", "", raw, traj, deduper.keys(traj), None)


def _outcomes(ctx: _Ctx, rows: Iterable[RawRow]) -> Iterator[Outcome]:
    module = get_source(ctx.name)
    validator, deduper = Validator(ctx.check), Deduper(ctx.dedup)
    for row in rows:
        yield _process_row(module, ctx, validator, deduper, row)


_ROLE_CODE = {"system": "s", "user": "u", "assistant": "a"}
_CODE_ROLE = {v: k for k, v in _ROLE_CODE.items()}


def _pack(traj: Trajectory | None) -> tuple | None:
    """A trajectory as few plain objects (role letters, texts, train bits): cheap to send between processes."""
    if traj is None:
        return None
    msgs = traj.messages
    try:
        codes = "".join([_ROLE_CODE[m.role] for m in msgs])
    except KeyError:  # a role the schema does not know (a rejected row): send it as it is
        return (traj.id, traj.source, traj.domain, None, [(m.role, m.content, m.train) for m in msgs], 0, traj.meta)
    bits = 0
    for i, m in enumerate(msgs):
        if m.train:
            bits |= 1 << i
    return (traj.id, traj.source, traj.domain, codes, [m.content for m in msgs], bits, traj.meta)


def _unpack(packed: tuple | Trajectory | None) -> Trajectory | None:
    if packed is None or isinstance(packed, Trajectory):
        return packed
    tid, source, domain, codes, contents, bits, meta = packed
    if codes is None:
        msgs = [Turn(r, c, t) for r, c, t in contents]
    else:
        msgs = [Turn(_CODE_ROLE[r], c, bool(bits >> i & 1)) for i, (r, c) in enumerate(zip(codes, contents))]
    return Trajectory(tid, source, domain, msgs, meta)


def _chunk_outcomes(task: tuple) -> Iterator[Outcome]:
    """Read one byte range of a JSONL file and process its rows."""
    ctx, file, start, end, first_line, split = task
    return _outcomes(ctx, read_jsonl_range(file, start, end, first_line, ctx.label, split))


_CLAIMS: tuple = ()  # in a worker: (the shared next-chunk counter, the results queue), given at its start


def _init_chunk_worker(counter, results) -> None:
    global _CLAIMS
    gc.disable()  # a forked worker inherits the paused collector; a spawned one pauses it here (see gc_paused)
    _CLAIMS = (counter, results)


def _claim(counter) -> int:
    """The index of the next chunk nobody has taken yet (shared by the main process and the workers)."""
    with counter.get_lock():
        i = counter.value
        counter.value = i + 1
    return i


def _chunk_worker(tasks: list[tuple]) -> None:
    """Worker process: claim chunks of `tasks` until none is left; each one's outcomes, with trajectories
    packed for the trip back, go on the results queue as (index, outcomes, None), a failure as
    (index, None, exception) so the main process raises it instead of waiting for the chunk."""
    counter, results = _CLAIMS
    while (i := _claim(counter)) < len(tasks):
        try:
            out = [o[:7] + (_pack(o[7]),) + o[8:] for o in _chunk_outcomes(tasks[i])]
        except Exception as e:
            try:
                pickle.dumps(e)
            except Exception:
                e = RuntimeError(f"merge worker failed on {tasks[i][1]} bytes {tasks[i][2]}-{tasks[i][3]}:\n"
                                 f"{traceback.format_exc()}")
            results.put((i, None, e))
            return
        results.put((i, out, None))


CHUNK_BYTES = 4 << 20
AUTO_PARALLEL_BYTES = 64 << 20


def _parallel_files(spec: SourceSpec) -> list[tuple[Path, str]] | None:
    """The local JSONL files of an input, or None when it is not (only) local JSONL."""
    if not Path(spec.path).exists():
        return None
    files = local_files(spec.path, spec.splits)
    return files if files and all(f.suffix == ".jsonl" for f, _ in files) else None


def _workers_for(specs: list[SourceSpec], cfg: MergeConfig) -> int:
    if cfg.tokenizer is not None:
        return 0  # a tokenizer is not worth shipping to other processes
    if cfg.workers is not None:
        return cfg.workers if cfg.workers >= 2 else 0
    total = 0
    for spec in specs:
        files = _parallel_files(spec)
        total += sum(f.stat().st_size for f, _ in files) if files else 0
    n = min(2, _usable_cpus())
    return n if n >= 2 and total >= AUTO_PARALLEL_BYTES else 0


def _usable_cpus() -> int:
    """CPUs this process may run on (a container's affinity mask, not the host's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _parallel_outcomes(spec: SourceSpec, ctx: _Ctx, pool: "_ChunkPool") -> Iterator[Outcome]:
    """Outcomes in input order, the chunks converted by the main process and the pool's workers alike.

    Every process claims the next chunk from a shared counter when it is free, so both cores stay
    busy however the machine's load shifts. The main process yields the chunks in order: a chunk a
    worker has sent comes out as it is; when the next one is still in a worker's hands, the main
    process converts the next unclaimed chunk itself (kept until its turn) instead of waiting, and
    only when every chunk is taken does it wait. A fixed share for the main process (a third of the
    chunks before) left one core idle whenever the other process was slowed, e.g. by other programs.
    """
    tasks = [(ctx, str(file), start, end, line, split)
             for file, split in _parallel_files(spec)
             for start, end, line in jsonl_chunks(file, CHUNK_BYTES)]
    counter, results = pool.counter, pool.results
    with counter.get_lock():
        counter.value = 0
    running = [pool.pool.apply_async(_chunk_worker, (tasks,)) for _ in range(pool.processes)]
    ready: dict[int, list[Outcome] | None] = {}  # chunk index -> its outcomes (None: mine, to convert now)
    n = len(tasks)
    for i in range(n):
        while i not in ready:
            try:
                got = results.get_nowait()
            except queue.Empty:
                got = None
                j = _claim(counter)
                if j == i:
                    ready[i] = None
                elif j < n:
                    ready[j] = list(_chunk_outcomes(tasks[j]))
                else:
                    got = results.get()  # every chunk is taken: wait for a worker's
            if got is not None:
                j, out, error = got
                if error is not None:
                    raise error
                ready[j] = out
        out = ready.pop(i)
        yield from _chunk_outcomes(tasks[i]) if out is None else out
    for r in running:
        r.get()  # the workers have left this input's loop, so the counter can start again for the next


@dataclass
class _ChunkPool:
    """The worker processes (the main process is one more), the counter they claim chunks from
    and the queue their outcomes come back on."""

    pool: Any
    processes: int
    counter: Any
    results: Any

    @classmethod
    def start(cls, processes: int) -> "_ChunkPool":
        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        mp = multiprocessing.get_context(method)
        counter, results = mp.Value("q", 0), mp.Queue()
        # the counter and queue reach the workers as they start (fork: inherited), as they must
        return cls(mp.Pool(processes, _init_chunk_worker, (counter, results)), processes, counter, results)

    def close(self) -> None:
        self.pool.terminate()
        self.results.close()


def convert_source(spec: SourceSpec, *, strict: bool = True) -> Iterator[tuple[RawRow, Trajectory | Issue]]:
    """(raw row, trajectory) for each row of one input, or (raw row, Issue) for a row that failed to convert.

    No checks run here (see `checks.Validator`). Strict mode raises `InputError` (file,
    line, field) instead of yielding an input or schema Issue.
    """
    module = get_source(spec.name)
    for row in module.load(spec.path, splits=spec.splits, config=spec.config):
        traj, fatal = _convert_row(module, row, spec.label or module.NAME)
        if fatal is not None and strict:
            raise InputError(fatal[0], fatal[1] + LENIENT_HINT, traj.reason)
        yield row, traj


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for a bulk phase that builds millions of acyclic objects.

    Every few hundred allocations the collector walks the young objects, and now and then the
    whole growing heap: in a merge that was a fifth of the CPU time (benchmarks/merge_throughput.py
    corpus, one process: 10.2 -> 7.9 CPU-s). Reference counting still frees everything a merge drops.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            _promote_survivors()
            gc.enable()


def _promote_survivors() -> None:
    """Move every tracked object into the oldest generation without scanning it.

    The objects a paused phase allocated all wait in the youngest generation, so the first
    collection after `gc.enable()` would walk all of them (0.3-0.6 s after a full-scale merge).
    freeze + unfreeze moves them to the oldest generation in O(1): they are scanned only by the
    next full collection, as survivors would be anyway, and cycles among them are still
    collected then. Skipped when the program froze objects itself (unfreeze would undo that).
    """
    if gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()


def merge(sources: Iterable[SourceSpec | str] | dict[str, str], config: MergeConfig | None = None) -> MergeResult:
    """Read, convert, validate, deduplicate, mix and split the sources (see the module docstring)."""
    with gc_paused():
        return _merge(sources, config or MergeConfig())


def _merge(sources: Iterable[SourceSpec | str] | dict[str, str], cfg: MergeConfig) -> MergeResult:
    if isinstance(sources, dict):  # {name: path}
        sources = [SourceSpec(name, str(path)) for name, path in sources.items()]
    specs = [SourceSpec.parse(s) if isinstance(s, str) else s for s in sources]
    report = MergeReport()
    sink = _RejectSink(cfg.rejected_path)
    deduper = Deduper(cfg.dedup)
    kept: list[Trajectory] = []
    used_ids: set[str] = set()
    workers = _workers_for(specs, cfg)
    pool = None
    succeeded = False
    try:
        if workers:
            pool = _ChunkPool.start(workers - 1)  # the main process is one of them
        for spec in specs:
            label = spec.label or get_source(spec.name).NAME
            ctx = _Ctx(spec.name, label, cfg, frozenset(cfg.include) if cfg.include else None,
                       frozenset(cfg.exclude), cfg.dedup, sink.path is not None)
            if pool is not None and _parallel_files(spec):
                outcomes = _parallel_outcomes(spec, ctx, pool)
            else:
                outcomes = _outcomes(ctx, get_source(spec.name).load(spec.path, splits=spec.splits,
                                                                     config=spec.config))
            for line, file, split, domain, reason, detail, raw, traj, keys, fatal in _progress(
                outcomes, cfg.progress, label
            ):
                report.input_rows[label] += 1
                if fatal is not None and cfg.strict:
                    raise InputError(fatal[0], fatal[1] + LENIENT_HINT, reason)
                traj = _unpack(traj)
                if reason == "ok":
                    issue = deduper.check_keys(keys, traj.id)
                    if issue is None:
                        if traj.id in used_ids:
                            traj.id = _unique(traj.id, line, used_ids)
                        used_ids.add(traj.id)
                        report.record(label, domain, "kept")
                        kept.append(traj)
                        continue
                    reason, detail = issue.reason, issue.detail
                report.record(label, domain, reason)
                if sink.path is not None:
                    sink.write(label, domain, Issue(reason, detail),
                               row=RawRow(label, file, line, split, raw), traj=traj)
        if pool is not None:
            pool.close()
            pool = None
        rng = random.Random(cfg.seed)
        kept = _downsample(kept, cfg, report, sink, rng)
        splits = split_trajectories(kept, cfg.split_ratios, cfg.seed)
        splits["train"] = _upsample(splits["train"], cfg, report, rng)
        if cfg.negatives:
            negs = make_negatives(splits["train"], cfg.negatives, cfg.seed)
            for t in negs:
                report.added[(t.source, t.domain, f"negative:{t.meta['negative']['kind']}")] += 1
            splits["train"] = splits["train"] + negs
        for name in SPLITS:
            random.Random(f"{cfg.seed}-{name}").shuffle(splits[name])
            report.splits[name] = len(splits[name])
        succeeded = True
    finally:
        sink.close(succeeded)
        if pool is not None:
            pool.close()
    report.verify()
    return MergeResult(splits, report, workers)


def _unique(tid: str, line: int, used: set[str]) -> str:
    candidate = f"{tid}~{line}"
    k = 2
    while candidate in used:
        candidate = f"{tid}~{line}.{k}"
        k += 1
    return candidate


# --------------------------------------------------------------------------- mixing


def _round(x: float) -> int:
    """Round half up (Python's round() rounds 4.5 to 4)."""
    return int(x + 0.5)


def _dropped(trajs: list[Trajectory], keep_n: int, rng: random.Random) -> list[Trajectory]:
    """The members of `trajs` left out when `rng` keeps `keep_n` of them (fewer than there are)."""
    keep_idx = set(rng.sample(range(len(trajs)), keep_n))
    return [t for i, t in enumerate(trajs) if i not in keep_idx]


def _downsample(kept: list[Trajectory], cfg: MergeConfig, report: MergeReport, sink: _RejectSink,
                rng: random.Random) -> list[Trajectory]:
    """Weights below 1, then caps: per source (over all its domains), then per domain (over all sources)."""
    if not (cfg.source_weights or cfg.domain_weights or cfg.source_caps or cfg.domain_caps):
        return kept

    def reject(dropped: list[Trajectory], reason: str, detail: str) -> None:
        for t in dropped:
            report.move(t.source, t.domain, reason)
            sink.write(t.source, t.domain, Issue(reason, detail), traj=t)

    steps = (
        ("source", {k: w for k, w in cfg.source_weights.items() if w < 1}, "mix.source_weight", True),
        ("domain", {k: w for k, w in cfg.domain_weights.items() if w < 1}, "mix.domain_weight", True),
        ("source", cfg.source_caps, "mix.source_cap", False),
        ("domain", cfg.domain_caps, "mix.domain_cap", False),
    )
    for key, limits, reason, is_weight in steps:
        for name, limit in sorted(limits.items()):
            members = [t for t in kept if getattr(t, key) == name]
            keep_n = _round(len(members) * limit) if is_weight else int(limit)
            if len(members) <= keep_n:
                continue
            dropped = _dropped(members, keep_n, rng)
            reject(dropped, reason, f"{key} {'weight' if is_weight else 'cap'} {limit:g} for {name}")
            gone = {id(t) for t in dropped}
            kept = [t for t in kept if id(t) not in gone]
    return kept


def _upsample(train: list[Trajectory], cfg: MergeConfig, report: MergeReport, rng: random.Random) -> list[Trajectory]:
    """Weights above 1 repeat training rows: factor source weight x domain weight (each counted only above 1).

    The copies are counted before any is made: past `MAX_UPSAMPLED_ROWS` the merge stops with
    `MergeTooLarge` and the estimate, instead of filling the memory.
    """
    if not any(w > 1 for w in list(cfg.source_weights.values()) + list(cfg.domain_weights.values())):
        return train
    groups: dict[tuple[str, str], list[Trajectory]] = defaultdict(list)
    for t in train:
        groups[(t.source, t.domain)].append(t)
    weights = {key: max(cfg.source_weights.get(key[0], 1.0), 1.0) * max(cfg.domain_weights.get(key[1], 1.0), 1.0)
               for key in groups}
    planned = sum(len(trajs) * weights[key] for key, trajs in groups.items())
    if planned > MAX_UPSAMPLED_ROWS:
        weights_above_1 = {k: w for k, w in {**cfg.source_weights, **cfg.domain_weights}.items() if w > 1}
        line_bytes = sum(len(dump_line(t)) for t in train) / len(train)
        raise MergeTooLarge(
            f"the weights above 1 ({', '.join(f'{k}={w:g}' for k, w in weights_above_1.items())}) would make the training "
            f"split {planned:,.0f} rows (about {planned * line_bytes / 1e9:,.1f} GB as JSONL) from {len(train):,}; "
            f"the limit is {MAX_UPSAMPLED_ROWS:,} rows: lower the weights")
    extra: list[Trajectory] = []
    for (source, domain), trajs in sorted(groups.items()):
        n_extra = _round(len(trajs) * weights[(source, domain)]) - len(trajs)
        order = list(trajs)
        rng.shuffle(order)
        for k in range(max(n_extra, 0)):
            orig = order[k % len(order)]
            copy = Trajectory(f"{orig.id}#up{k // len(trajs) + 1}", orig.source, orig.domain, orig.messages,
                              {**orig.meta, "upsampled_from": orig.id})
            extra.append(copy)
        if n_extra > 0:
            report.added[(source, domain, "upsampled")] += n_extra
    return train + extra


def split_trajectories(trajs: list[Trajectory], ratios: tuple[float, float, float] = (0.9, 0.05, 0.05),
                       seed: int = 0) -> dict[str, list[Trajectory]]:
    """Deterministic train/validation/test split, stratified by domain.

    Rows of the same source task (same source and `meta["source_id"]`) stay in one split,
    so two attempts at one task never straddle train and test.
    """
    total = float(sum(ratios))
    r_train, r_val, _ = (r / total for r in ratios)
    by_domain: dict[str, dict[tuple[str, str], list[Trajectory]]] = defaultdict(lambda: defaultdict(list))
    for t in trajs:
        by_domain[t.domain][(t.source, str(t.meta.get("source_id", t.id)))].append(t)
    out: dict[str, list[Trajectory]] = {name: [] for name in SPLITS}
    for domain in sorted(by_domain):
        groups = list(by_domain[domain].values())
        random.Random(f"{seed}-{domain}").shuffle(groups)
        n = len(groups)
        n_train = round(n * r_train)
        n_val = round(n * r_val)
        if n_train + n_val > n:
            n_val = n - n_train
        for i, g in enumerate(groups):
            name = "train" if i < n_train else "validation" if i < n_train + n_val else "test"
            out[name].extend(g)
    return out


# --------------------------------------------------------------------------- export / load


def _columns(trajs: list[Trajectory]) -> dict[str, list]:
    return {
        "id": [t.id for t in trajs],
        "source": [t.source for t in trajs],
        "domain": [t.domain for t in trajs],
        "messages": [[{"role": m.role, "content": m.content, "train": m.train} for m in t.messages] for t in trajs],
        "meta": [json.dumps(t.meta, ensure_ascii=False, sort_keys=True) for t in trajs],
    }


def _from_record(rec: dict[str, Any], where: str) -> Trajectory:
    meta = rec.get("meta")
    if isinstance(meta, str):
        try:
            rec = {**rec, "meta": json.loads(meta) if meta else {}}
        except json.JSONDecodeError as e:
            raise SchemaError(f"{where}: field 'meta' is not valid JSON ({e.msg})") from None
    try:
        return Trajectory.from_dict(rec)
    except SchemaError as e:
        raise SchemaError(f"{where}: {e}") from None


def to_arrow(trajs: list[Trajectory]):
    """The trajectories as an Arrow table (parquet and HF datasets); meta is a JSON string."""
    import pyarrow as pa

    turn = pa.struct([("role", pa.string()), ("content", pa.string()), ("train", pa.bool_())])
    schema = pa.schema([("id", pa.string()), ("source", pa.string()), ("domain", pa.string()),
                        ("messages", pa.list_(turn)), ("meta", pa.string())])
    return pa.Table.from_pydict(_columns(trajs), schema=schema)


PARALLEL_WRITE_ROWS = 20_000
"""Below this many rows `write_jsonl` stays in one process: forking costs more than it saves."""

_WRITE_ROWS: list[Trajectory] = []  # in a forked writer: the rows it serialises (inherited, never pickled)


def write_jsonl(trajs: Iterable[Trajectory], path: str | Path, workers: int = 0) -> Path:
    """One trajectory a line (`dump_line`: the `Trajectory.to_dict` record as JSON).

    With `workers` >= 2 and at least `PARALLEL_WRITE_ROWS` rows (where processes can fork),
    forked processes serialise all but the first share of the rows into part files that
    are then appended in order: the same bytes, the serialising spread over the processes.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    trajs = trajs if isinstance(trajs, list) else list(trajs)
    n = workers if workers >= 2 and len(trajs) >= PARALLEL_WRITE_ROWS else 1
    if n == 1 or "fork" not in multiprocessing.get_all_start_methods():
        _write_lines(path, trajs, 0, len(trajs))
        return path
    bounds = [len(trajs) * k // n for k in range(n + 1)]
    parts = [path.with_name(f"{path.name}.part{k}") for k in range(1, n)]
    try:
        # fork passes initargs by inheritance, so the rows are not pickled
        with gc_paused(), multiprocessing.get_context("fork").Pool(n - 1, _init_writer, (trajs,)) as pool:
            pending = pool.map_async(_write_part, [(str(p), bounds[k], bounds[k + 1]) for k, p in enumerate(parts, 1)])
            _write_lines(path, trajs, 0, bounds[1])
            pending.get()
        with open(path, "ab") as out:
            for p in parts:
                with open(p, "rb") as src:
                    shutil.copyfileobj(src, out, 1 << 24)
    finally:
        for p in parts:
            p.unlink(missing_ok=True)
    return path


def _write_lines(path: str | Path, trajs: list[Trajectory], lo: int, hi: int) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for i in range(lo, hi, 2048):
            f.write("".join([dump_line(t) for t in trajs[i:min(i + 2048, hi)]]))


def _init_writer(rows: list[Trajectory]) -> None:
    global _WRITE_ROWS
    gc.disable()  # a collection would touch (and so copy) every page of the inherited heap
    _WRITE_ROWS = rows


def _write_part(task: tuple[str, int, int]) -> None:
    """Forked writer: rows lo..hi of `_WRITE_ROWS` into one part file."""
    part, lo, hi = task
    _write_lines(part, _WRITE_ROWS, lo, hi)


_ROLE_HEAD = {r: f'{{"role": "{r}", "content": ' for r in ("system", "user", "assistant")}


def dump_line(t: Trajectory) -> str:
    """The JSONL line of a trajectory: `Trajectory.to_dict` as JSON (ASCII-escaped), newline-terminated.

    Built directly from the strings with the C escaper (3x faster than json.dumps of the
    dict); `read_jsonl` gives back an equal trajectory.
    """
    q = encode_basestring_ascii
    heads = _ROLE_HEAD
    turns = ", ".join([
        f'{heads.get(m.role) or _role_head(m.role)}{q(m.content)}, "train": {"true" if m.train else "false"}}}'
        for m in t.messages
    ])
    return (f'{{"id": {q(t.id)}, "source": {q(t.source)}, "domain": {q(t.domain)}, "messages": [{turns}], '
            f'"meta": {json.dumps(t.meta)}}}\n')


def _role_head(role: str) -> str:
    return f'{{"role": {encode_basestring_ascii(role)}, "content": '


def read_jsonl(path: str | Path) -> list[Trajectory]:
    """Trajectories from a JSONL file; a bad line raises SchemaError naming file and line."""
    out = []
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            where = f"{path}, line {lineno}"
            try:
                line = raw.decode("utf-8")
                if not line.strip():
                    continue
                rec = json.loads(line)
            except UnicodeDecodeError:
                raise SchemaError(f"{where}: not UTF-8 text; save the file as UTF-8") from None
            except json.JSONDecodeError as e:
                raise SchemaError(f"{where}: invalid JSON ({e.msg})") from None
            out.append(_from_record(rec, where))
    return out


def write_parquet(trajs: list[Trajectory], path: str | Path) -> Path:
    import pyarrow.parquet as pq

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(to_arrow(list(trajs)), path)
    return path


def read_parquet(path: str | Path) -> list[Trajectory]:
    import pyarrow
    import pyarrow.parquet as pq

    try:
        rows = pq.read_table(path).to_pylist()
    except pyarrow.ArrowException as e:  # a missing file stays a FileNotFoundError
        raise SchemaError(f"{path}: {UNREADABLE_PARQUET} ({' '.join(str(e).split())[:200]}); "
                          "write it again (merge --formats parquet)") from None
    return [_from_record(r, f"{path}, row {i}") for i, r in enumerate(rows, 1)]


def to_hf_dataset(trajs: list[Trajectory]):
    """A `datasets.Dataset` with columns id, source, domain, messages [{role, content, train}], meta (JSON).

    The `messages` column is what TRL's SFTTrainer reads; the extra `train` key carries
    the per-turn loss flag for a trainer that honours it.
    """
    import datasets

    return datasets.Dataset(to_arrow(list(trajs)))


def from_hf_dataset(ds) -> list[Trajectory]:
    """Trajectories back from a dataset made by `to_hf_dataset` (lossless)."""
    return [_from_record(r, f"dataset row {i}") for i, r in enumerate(ds.to_list(), 1)]


def check_formats(formats: Iterable[str]) -> tuple[str, ...]:
    """The export formats as a tuple, or a UserError naming the unknown ones (before a merge, not after it)."""
    formats = tuple(formats)
    unknown = set(formats) - {"jsonl", "parquet", "hf"}
    if unknown or not formats:
        raise UserError(f"export formats must be some of jsonl, parquet, hf; got {list(formats)}")
    return formats


def save_splits(splits: dict[str, list[Trajectory]], out_dir: str | Path, formats: Iterable[str] = ("jsonl",),
                report: MergeReport | None = None, workers: int = 0) -> dict[str, list[Path]]:
    """Write each split as `<split>.jsonl` / `<split>.parquet` / `hf/` (DatasetDict), and `report.json`.

    `workers` >= 2 writes large JSONL splits with that many processes (see `write_jsonl`). The files
    are written into a temporary folder inside `out_dir` and move into place only when all are
    written, so a failed save leaves the previous outputs as they were. Then the outputs of the
    previous save that this one did not write (another format or split; its `splits.json` lists
    them) are removed: a stale `train.parquet` beside a new `train.jsonl` would pass for this
    merge's. Files the kit did not write stay.
    """
    formats = check_formats(formats)
    final = Path(out_dir)
    final.mkdir(parents=True, exist_ok=True)
    previous = _previous_outputs(final)
    with _staged(final) as out:
        written = _write_splits(splits, out, formats, report, workers)
        now = {entry.name for entry in out.iterdir()}
    for name in sorted(previous - now):
        stale = final / name
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale)
        else:
            stale.unlink(missing_ok=True)
    return {kind: [final / p.relative_to(out) for p in paths] for kind, paths in written.items()}


def _previous_outputs(final: Path) -> set[str]:
    """The names of the split files the previous `save_splits` wrote into `final`: its `splits.json` lists its
    splits and formats (`<split>.jsonl`, `<split>.parquet`, `hf/`). Only plain names inside `final` count."""
    try:
        manifest = json.loads((final / "splits.json").read_text(encoding="utf-8"))
        names = {"hf" if fmt == "hf" else f"{split}.{fmt}" for split in manifest["splits"]
                 for fmt in manifest["formats"] if fmt in ("jsonl", "parquet", "hf")}
    except (OSError, ValueError, KeyError, TypeError):
        return set()  # no manifest, or not one the kit wrote: nothing is known to be the kit's
    return {n for n in names if n not in (".", "..") and Path(n).name == n}


@contextmanager
def _staged(final: Path) -> Iterator[Path]:
    """A temporary folder inside `final`; on success each entry replaces the one of the same name in
    `final`, on failure the folder is removed and `final` keeps what it held."""
    stage = Path(tempfile.mkdtemp(prefix=".staging-", dir=final))
    try:
        yield stage
        for entry in stage.iterdir():
            dest = final / entry.name
            if dest.is_dir() and not dest.is_symlink():
                shutil.rmtree(dest)  # hf/: a folder does not replace a folder by rename
            os.replace(entry, dest)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _write_splits(splits: dict[str, list[Trajectory]], out: Path, formats: tuple[str, ...],
                  report: MergeReport | None, workers: int) -> dict[str, list[Path]]:
    written: dict[str, list[Path]] = defaultdict(list)
    for name, trajs in splits.items():
        if "jsonl" in formats:
            written["jsonl"].append(write_jsonl(trajs, out / f"{name}.jsonl", workers=workers))
        if "parquet" in formats:
            written["parquet"].append(write_parquet(trajs, out / f"{name}.parquet"))
    if "hf" in formats:
        import datasets

        dd = datasets.DatasetDict({name: to_hf_dataset(trajs) for name, trajs in splits.items()})
        # an empty split needs one (empty) shard, or load_from_disk cannot read it back
        dd.save_to_disk(str(out / "hf"), num_shards={name: 1 for name, trajs in splits.items() if not trajs} or None)
        written["hf"].append(out / "hf")
    manifest = out / "splits.json"
    manifest.write_text(json.dumps({"splits": {name: len(trajs) for name, trajs in splits.items()},
                                    "formats": list(formats)}, indent=1), encoding="utf-8")
    written["manifest"].append(manifest)
    if report is not None:
        path = out / "report.json"
        path.write_text(json.dumps(report.to_dict(), indent=1, ensure_ascii=False), encoding="utf-8")
        written["report"].append(path)
    return dict(written)


def load_splits(out_dir: str | Path, fmt: str = "jsonl") -> dict[str, list[Trajectory]]:
    """The splits written by `save_splits` (listed in its `splits.json`), from one of its formats.

    Without a `splits.json` (files written another way), the train/validation/test files present are read.
    """
    out = Path(out_dir)
    manifest = out / "splits.json"
    names = list(json.loads(manifest.read_text(encoding="utf-8"))["splits"]) if manifest.exists() else None
    if fmt == "hf":
        import datasets

        dd = datasets.load_from_disk(str(out / "hf"))
        return {name: from_hf_dataset(dd[name]) for name in (list(dd) if names is None else names)}
    if names is None:
        names = [n for n in SPLITS if (out / f"{n}.{fmt}").exists()]
        if not names:
            raise FileNotFoundError(f"no splits.json and no train/validation/test .{fmt} files in {out}")
    reader = {"jsonl": read_jsonl, "parquet": read_parquet}.get(fmt)
    if reader is None:
        raise ValueError(f"unknown format {fmt!r}; expected jsonl, parquet or hf")
    missing = [n for n in names if not (out / f"{n}.{fmt}").exists()]
    if missing:
        raise FileNotFoundError(f"{out} has no {fmt} files for {missing}; save the merge with that format first")
    return {name: reader(out / f"{name}.{fmt}") for name in names}


def load_report(out_dir: str | Path) -> MergeReport:
    return MergeReport.from_dict(json.loads((Path(out_dir) / "report.json").read_text(encoding="utf-8")))


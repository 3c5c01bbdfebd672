"""Merge source datasets into one unified training set, with full accounting, mixing and export.

Every input row lands in exactly one (source, domain, reason) count of `report.outcomes` (`report.verify()`);
rows added on top (up-sampled copies, negatives) are in `report.added`. Mixing order: labels filter ->
weights below 1 -> caps per source, then per domain -> split (stratified by domain, one source task never
straddles splits) -> weights above 1 up-sample train -> negatives from train; all randomness comes from `seed`.
Strict mode (the default) stops at the first unreadable row with an `InputError`; lenient mode counts it.
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
    rows_from_lines,
)
from openmanus_lite.errors import UserError
from openmanus_lite.schema import DOMAINS, EXTRA_LABELS, SchemaError, Trajectory, Turn

SPLITS = ("train", "validation", "test")
FORMATS = ("jsonl", "parquet", "hf")
MAX_UPSAMPLED_ROWS = 20_000_000  # the most rows weights above 1 may make of train (AgentTraj-L is 14,485 rows)
LENIENT_HINT = " (run with lenient mode, --lenient, to count such rows as rejected and go on)"


class MergeTooLarge(UserError):
    """The weights above 1 would make more rows than `MAX_UPSAMPLED_ROWS`."""


@dataclass
class SourceSpec:
    """One input. `label` (default: the converter name) keeps two inputs of one converter apart in reports."""

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
    """Everything a merge can be told besides `CheckConfig`'s; the defaults drop nothing on purpose."""

    include: tuple[str, ...] | None = None  # domain labels to keep; the others are `filter.label_excluded`
    exclude: tuple[str, ...] = ()  # domain labels to drop
    strict: bool = True  # stop at the first unreadable row or schema error (InputError); False counts them
    dedup: str = "normalized"  # "normalized", "exact" or "none" (see checks.Deduper)
    # weights below 1 keep that share of a source's / domain's rows, above 1 repeat its training rows
    source_weights: dict[str, float] = field(default_factory=dict)
    domain_weights: dict[str, float] = field(default_factory=dict)
    source_caps: dict[str, int] = field(default_factory=dict)  # at most that many rows of a source / domain
    domain_caps: dict[str, int] = field(default_factory=dict)
    seed: int = 0
    split_ratios: tuple[float, float, float] = (0.9, 0.05, 0.05)  # train, validation, test; stratified by domain
    negatives: float = 0.0  # share of training rows to derive negative samples from (`negatives.py`)
    rejected_path: str | Path | None = None  # a JSONL file that receives every rejected row with its reason
    progress: bool = False  # progress bars (tqdm)
    # Processes, the main one included, that read and convert local JSONL inputs and write JSONL splits of
    # 20,000+ rows (the same bytes); None: 2 from 64 MB of input where 2 CPUs are usable, else 0.
    workers: int | None = None

    def __post_init__(self) -> None:
        labels = set(DOMAINS + EXTRA_LABELS)
        for name, value in (("include", self.include or ()), ("exclude", self.exclude)):
            if bad := set(value) - labels:
                raise ValueError(f"{name}: unknown labels {sorted(bad)}; known: {sorted(labels)}")
        if len(self.split_ratios) != 3 or any(r < 0 for r in self.split_ratios) or sum(self.split_ratios) <= 0:
            raise ValueError(f"split_ratios must be three non-negative numbers (train, validation, test), "
                             f"got {self.split_ratios}")
        for name in ("source_weights", "domain_weights", "source_caps", "domain_caps"):
            values = getattr(self, name)
            if any(not 0 <= v < math.inf for v in values.values()):
                kind = "finite numbers" if name.endswith("weights") else "row counts"
                raise ValueError(f"{name} must be {kind} >= 0, got {values}")
        for name in ("max_turns", "max_chars", "max_tokens"):
            if (value := getattr(self, name)) is not None and value < 1:
                raise ValueError(f"{name} must be at least 1 (or not given), got {value}: every row would be rejected")
        if not 0 <= self.negatives <= 1:
            raise ValueError(f"negatives is a share of the training rows in [0, 1], got {self.negatives}")


# --------------------------------------------------------------------------- report


def _totals(counts: Counter, position: int) -> Counter:
    """(source, domain, reason-or-kind) counts summed by one part of the key."""
    out: Counter = Counter()
    for key, n in counts.items():
        out[key[position]] += n
    return out


@dataclass
class MergeReport:
    """Where every input row went: (source, domain, reason) -> count, plus rows added on top."""

    input_rows: Counter = field(default_factory=Counter)
    outcomes: Counter = field(default_factory=Counter)
    added: Counter = field(default_factory=Counter)
    splits: dict[str, int] = field(default_factory=dict)

    def move(self, source: str, domain: str, reason: str) -> None:
        """Turn a kept row into a rejection (a mixing decision)."""
        kept = (source, domain, "kept")
        self.outcomes[kept] -= 1
        if not self.outcomes[kept]:
            del self.outcomes[kept]
        self.outcomes[(source, domain, reason)] += 1

    @property
    def kept(self) -> int:
        return self.by_reason()["kept"]

    @property
    def rejected(self) -> int:
        return sum(self.outcomes.values()) - self.kept

    def by_reason(self) -> Counter:
        return _totals(self.outcomes, 2)

    def verify(self) -> None:
        """Raise AssertionError unless every source's outcomes add up to its input rows."""
        if (totals := _totals(self.outcomes, 0)) != self.input_rows:
            raise AssertionError(f"accounting mismatch: outcomes {dict(totals)} != input rows {dict(self.input_rows)}")

    def to_rows(self) -> list[dict[str, Any]]:
        rows = [{"source": s, "domain": d, "reason": r, "count": n} for (s, d, r), n in self.outcomes.items()]
        return sorted(rows, key=lambda x: (x["source"], x["domain"], x["reason"] != "kept", x["reason"]))

    def to_frame(self):
        """The outcomes as a pandas DataFrame (source, domain, reason, count)."""
        import pandas as pd

        return pd.DataFrame(self.to_rows(), columns=["source", "domain", "reason", "count"])

    def to_dict(self) -> dict[str, Any]:
        return {
            "input_rows": dict(self.input_rows), "kept": self.kept, "rejected": self.rejected,
            "outcomes": self.to_rows(),
            "added": [{"source": s, "domain": d, "kind": k, "count": n} for (s, d, k), n in sorted(self.added.items())],
            "splits": dict(self.splits),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "MergeReport":
        rep = cls(input_rows=Counter(d.get("input_rows", {})), splits=dict(d.get("splits", {})))
        rep.outcomes.update({(r["source"], r["domain"], r["reason"]): r["count"] for r in d.get("outcomes", [])})
        rep.added.update({(r["source"], r["domain"], r["kind"]): r["count"] for r in d.get("added", [])})
        return rep

    def summary(self) -> str:
        """A plain-text table: per source, rows read / kept / rejected, then the reasons."""
        width = max([len("source")] + [len(s) for s in self.input_rows]) + 2
        kept = _totals(Counter({k: n for k, n in self.outcomes.items() if k[2] == "kept"}), 0)
        lines = [f"{'source':<{width}}{'read':>8}{'kept':>8}{'rejected':>10}"]
        lines += [f"{source:<{width}}{read:>8}{kept[source]:>8}{read - kept[source]:>10}"
                  for source, read in sorted(self.input_rows.items())]
        for title, counts in (("rejections", {r: n for r, n in self.by_reason().items() if r != "kept"}),
                              ("added", _totals(self.added, 2))):
            if counts:
                lines.append(f"{title}: " + ", ".join(f"{k}={n}" for k, n in sorted(counts.items())))
        if self.splits:
            lines.append("splits: " + ", ".join(f"{k}={v}" for k, v in self.splits.items()))
        return "\n".join(lines)


@dataclass
class MergeResult:
    splits: dict[str, list[Trajectory]]
    report: MergeReport
    workers: int = 0  # the worker processes the merge used (0: none); `save` writes JSONL with as many

    @property
    def trajectories(self) -> list[Trajectory]:
        return [t for name in SPLITS for t in self.splits.get(name, [])]

    def save(self, out_dir: str | Path, formats: Iterable[str] = ("jsonl",)) -> dict[str, list[Path]]:
        return save_splits(self.splits, out_dir, formats=formats, report=self.report, workers=self.workers)


class _RejectSink:
    """Rejected rows go to `<path>.partial`, which replaces `path` only when the merge succeeds, so a failed
    merge leaves the previous merge's rejected rows beside its report."""

    def __init__(self, path: str | Path | None):
        self.path = Path(path) if path else None
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._partial = self.path.with_name(self.path.name + ".partial")
            self._f = open(self._partial, "w", encoding="utf-8")

    def write(self, source: str, domain: str, reason: str, detail: str, traj: Trajectory | None = None,
              row: tuple | None = None) -> None:
        """`row`: (file, line, split, data) of the input row; without it the trajectory is written whole."""
        if self.path is None:
            return
        rec: dict[str, Any] = {"source": source, "domain": domain, "reason": reason, "detail": detail}
        if row is not None:
            rec.update(zip(("file", "line", "split", "row"), row))
        if traj is not None:
            rec["id"] = traj.id
            if row is None:
                rec.update(file=traj.meta.get("file"), line=traj.meta.get("line"), trajectory=traj.to_dict())
        self._f.write(json.dumps(rec, ensure_ascii=False, default=str) + "\n")

    def __enter__(self) -> "_RejectSink":
        return self

    def __exit__(self, error_type, *_) -> None:
        if self.path is not None:
            self._f.close()
            if error_type is None:
                os.replace(self._partial, self.path)
            else:
                self._partial.unlink(missing_ok=True)


# --------------------------------------------------------------------------- converting rows


@dataclass(frozen=True)
class _Ctx:
    """What processing a row needs besides the row; picklable, for worker processes."""

    name: str
    label: str
    cfg: MergeConfig
    keep_raw: bool


# (line, file, split, domain, reason, detail, raw, traj, dedup keys, fatal): a plain tuple, cheap to send between
# processes. Reason "ok": valid, dedup still to decide; `fatal`: an input or schema error, which strict mode raises.
Outcome = tuple


def _convert_row(module, row: RawRow, label: str) -> Trajectory | Issue:
    """The row's trajectory (labelled), or the input or schema Issue why it has none."""
    if row.error is not None:
        reason = ("input.not_object" if row.error.startswith(("expected a JSON", "item ")) else
                  "input.unreadable_file" if row.error.startswith(UNREADABLE_PARQUET) else "input.invalid_json")
        return Issue(reason, f"{row.where()}: {row.error}")
    try:
        traj = module.convert(row)
    except RowRejected as e:
        return Issue(e.reason, str(e))
    traj.source = label
    return traj


def _process_row(module, ctx: _Ctx, validator: Validator, deduper: Deduper, row: RawRow) -> Outcome:
    raw = row.data if ctx.keep_raw else None
    traj = _convert_row(module, row, ctx.label)
    if traj.__class__ is Issue:
        return (row.line, row.file, row.split, "unknown", traj.reason, traj.detail, raw, None, None, True)
    domain, cfg = traj.domain, ctx.cfg
    if (cfg.include and domain not in cfg.include) or domain in cfg.exclude:
        issue = Issue("filter.label_excluded", f"label {domain!r} excluded")
    else:
        issue = validator.validate(traj)
    if issue is not None:
        return (row.line, row.file, row.split, domain, issue.reason, issue.detail, raw,
                traj if ctx.keep_raw else None, None, False)
    return (row.line, row.file, row.split, domain, "ok", "", raw, traj, deduper.keys(traj), False)


def _outcomes(ctx: _Ctx, rows: Iterable[RawRow]) -> Iterator[Outcome]:
    module, validator, deduper = get_source(ctx.name), Validator(ctx.cfg), Deduper(ctx.cfg.dedup)
    return (_process_row(module, ctx, validator, deduper, row) for row in rows)


def convert_source(spec: SourceSpec, *, strict: bool = True) -> Iterator[tuple[RawRow, Trajectory | Issue]]:
    """(raw row, trajectory or the Issue why it failed to convert) for each row of one input, unchecked.
    Strict mode raises `InputError` instead of yielding an Issue."""
    module = get_source(spec.name)
    for row in module.load(spec.path, splits=spec.splits, config=spec.config):
        traj = _convert_row(module, row, spec.label or module.NAME)
        if strict and isinstance(traj, Issue):
            raise InputError(traj.detail + LENIENT_HINT, traj.reason)
        yield row, traj


# --------------------------------------------------------------------------- worker processes

CHUNK_BYTES = 4 << 20
AUTO_PARALLEL_BYTES = 64 << 20
_ROLE_CODE = {"system": "s", "user": "u", "assistant": "a"}
_CODE_ROLE = {v: k for k, v in _ROLE_CODE.items()}


def _pack(traj: Trajectory | None) -> tuple | Trajectory | None:
    """A trajectory as few plain objects (role letters, texts, train bits), cheap to pickle; one with a role
    the schema does not know (a rejected row) is sent as it is."""
    if traj is None:
        return None
    msgs = traj.messages
    try:
        codes = "".join([_ROLE_CODE[m.role] for m in msgs])
    except KeyError:
        return traj
    bits = sum(1 << i for i, m in enumerate(msgs) if m.train)
    return traj.id, traj.source, traj.domain, codes, [m.content for m in msgs], bits, traj.meta


def _unpack(packed: tuple | Trajectory | None) -> Trajectory | None:
    if packed is None or isinstance(packed, Trajectory):
        return packed
    tid, source, domain, codes, contents, bits, meta = packed
    turns = [Turn(_CODE_ROLE[r], c, bool(bits >> i & 1)) for i, (r, c) in enumerate(zip(codes, contents))]
    return Trajectory(tid, source, domain, turns, meta)


def _chunk_outcomes(task: tuple) -> Iterator[Outcome]:
    ctx, file, start, end, first_line, split = task
    return _outcomes(ctx, read_jsonl_range(file, start, end, first_line, ctx.label, split))


_CLAIMS: tuple = ()  # in a worker: (the shared next-chunk counter, the results queue), given at its start


def _init_chunk_worker(counter, results) -> None:
    global _CLAIMS
    gc.disable()  # a forked worker inherits the paused collector; a spawned one pauses it here (see gc_paused)
    _CLAIMS = (counter, results)


def _claim(counter) -> int:
    """The index of the next chunk nobody has taken yet."""
    with counter.get_lock():
        counter.value += 1
        return counter.value - 1


def _chunk_worker(tasks: list[tuple]) -> None:
    """Worker process: claim chunks until none is left, putting (index, outcomes, None) on the queue, or
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


class _ChunkPool:
    """The workers with the counter they claim chunks from and the queue their outcomes come back on."""

    def __init__(self, processes: int):
        mp = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
        self.processes, self.counter, self.results = processes, mp.Value("q", 0), mp.Queue()
        self.pool = mp.Pool(processes, _init_chunk_worker, (self.counter, self.results))

    def close(self) -> None:
        self.pool.terminate()
        self.results.close()


def _parallel_files(spec: SourceSpec) -> list[tuple[Path, str]] | None:
    """The local JSONL files of an input, or None when it is not only local JSONL."""
    files = local_files(spec.path, spec.splits) if Path(spec.path).exists() else None
    return files if files and all(f.suffix == ".jsonl" for f, _ in files) else None


def _usable_cpus() -> int:
    """CPUs this process may run on (a container's affinity mask, not the host's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _workers_for(specs: list[SourceSpec], cfg: MergeConfig) -> int:
    if cfg.tokenizer is not None:
        return 0  # a tokenizer is not worth shipping to other processes
    if cfg.workers is not None:
        return cfg.workers if cfg.workers >= 2 else 0
    total = sum(f.stat().st_size for spec in specs for f, _ in _parallel_files(spec) or ())
    return 2 if _usable_cpus() >= 2 and total >= AUTO_PARALLEL_BYTES else 0


def _parallel_outcomes(spec: SourceSpec, ctx: _Ctx, pool: _ChunkPool) -> Iterator[Outcome]:
    """Outcomes in input order. Every process, the main one included, claims the next chunk when free (a fixed
    share for the main process left a core idle); the main one waits only when every chunk is taken."""
    tasks = [(ctx, str(file), start, end, line, split) for file, split in _parallel_files(spec)
             for start, end, line in jsonl_chunks(file, CHUNK_BYTES)]
    counter, results, n = pool.counter, pool.results, len(tasks)
    with counter.get_lock():
        counter.value = 0
    running = [pool.pool.apply_async(_chunk_worker, (tasks,)) for _ in range(pool.processes)]
    ready: dict[int, list[Outcome] | None] = {}  # chunk index -> its outcomes (None: mine, to convert now)
    for i in range(n):
        while i not in ready:
            try:
                j, out, error = results.get_nowait()
            except queue.Empty:
                if (j := _claim(counter)) < n:
                    out, error = (None if j == i else list(_chunk_outcomes(tasks[j]))), None
                else:
                    j, out, error = results.get()  # every chunk is taken: wait for a worker's
            if error is not None:
                raise error
            ready[j] = out
        out = ready.pop(i)
        yield from _chunk_outcomes(tasks[i]) if out is None else out
    for r in running:
        r.get()  # the workers have left this input's loop, so the counter can start again for the next


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic collector while millions of acyclic objects are built (its passes were a fifth of a
    merge's CPU time); freeze + unfreeze on the way out moves them to the oldest generation in O(1), so the next
    collection does not walk them all (skipped when the program froze objects itself)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()


# --------------------------------------------------------------------------- merge


def merge(sources: Iterable[SourceSpec | str] | dict[str, str], config: MergeConfig | None = None) -> MergeResult:
    """Read, convert, validate, deduplicate, mix and split the sources (see the module docstring)."""
    cfg = config or MergeConfig()
    if isinstance(sources, dict):  # {name: path}
        sources = [SourceSpec(name, str(path)) for name, path in sources.items()]
    specs = [SourceSpec.parse(s) if isinstance(s, str) else s for s in sources]
    report, workers = MergeReport(), _workers_for(specs, cfg)
    with gc_paused(), _RejectSink(cfg.rejected_path) as sink:
        kept = _read(specs, cfg, report, sink, workers)
        rng = random.Random(cfg.seed)
        splits = split_trajectories(_downsample(kept, cfg, report, sink, rng), cfg.split_ratios, cfg.seed)
        splits["train"] = _upsample(splits["train"], cfg, report, rng)
        if cfg.negatives:
            negs = make_negatives(splits["train"], cfg.negatives, cfg.seed)
            report.added.update((t.source, t.domain, f"negative:{t.meta['negative']['kind']}") for t in negs)
            splits["train"] = splits["train"] + negs
        for name in SPLITS:
            random.Random(f"{cfg.seed}-{name}").shuffle(splits[name])
            report.splits[name] = len(splits[name])
    report.verify()
    return MergeResult(splits, report, workers)


def _read(specs: list[SourceSpec], cfg: MergeConfig, report: MergeReport, sink: _RejectSink,
          workers: int) -> list[Trajectory]:
    """The rows of every input that are kept before mixing, in input order; every row read is counted."""
    deduper, kept, used_ids = Deduper(cfg.dedup), [], set()
    pool = _ChunkPool(workers - 1) if workers else None  # the main process is one of them
    try:
        for spec in specs:
            module = get_source(spec.name)
            label = spec.label or module.NAME
            ctx = _Ctx(spec.name, label, cfg, sink.path is not None)
            if pool is not None and _parallel_files(spec):
                outcomes = _parallel_outcomes(spec, ctx, pool)
            else:
                outcomes = _outcomes(ctx, module.load(spec.path, splits=spec.splits, config=spec.config))
            if cfg.progress:
                from tqdm.auto import tqdm

                outcomes = tqdm(outcomes, desc=label, unit="rows")
            for line, file, split, domain, reason, detail, raw, traj, keys, fatal in outcomes:
                report.input_rows[label] += 1
                if fatal and cfg.strict:
                    raise InputError(detail + LENIENT_HINT, reason)
                traj = _unpack(traj)
                if reason == "ok":
                    if (issue := deduper.check_keys(keys, traj.id)) is None:
                        if traj.id in used_ids:
                            traj.id = _unique(traj.id, line, used_ids)
                        used_ids.add(traj.id)
                        report.outcomes[(label, domain, "kept")] += 1
                        kept.append(traj)
                        continue
                    reason, detail = issue.reason, issue.detail
                report.outcomes[(label, domain, reason)] += 1
                sink.write(label, domain, reason, detail, traj, (file, line, split, raw))
    finally:
        if pool is not None:
            pool.close()
    return kept


def _unique(tid: str, line: int, used: set[str]) -> str:
    candidate, k = f"{tid}~{line}", 2
    while candidate in used:
        candidate, k = f"{tid}~{line}.{k}", k + 1
    return candidate


# --------------------------------------------------------------------------- mixing


def _downsample(kept: list[Trajectory], cfg: MergeConfig, report: MergeReport, sink: _RejectSink,
                rng: random.Random) -> list[Trajectory]:
    """Weights below 1, then caps: per source (over all its domains), then per domain (over all sources)."""
    steps = (("source", "weight", cfg.source_weights), ("domain", "weight", cfg.domain_weights),
             ("source", "cap", cfg.source_caps), ("domain", "cap", cfg.domain_caps))
    for key, kind, limits in steps:
        for name, limit in sorted(limits.items()):
            if kind == "weight" and limit >= 1:
                continue  # weights above 1 up-sample the training split later
            members = [t for t in kept if getattr(t, key) == name]
            keep_n = int(len(members) * limit + 0.5) if kind == "weight" else int(limit)  # round half up
            if len(members) <= keep_n:
                continue
            keep_idx = set(rng.sample(range(len(members)), keep_n))
            gone = {id(t) for i, t in enumerate(members) if i not in keep_idx}
            for t in kept:
                if id(t) in gone:
                    report.move(t.source, t.domain, f"mix.{key}_{kind}")
                    sink.write(t.source, t.domain, f"mix.{key}_{kind}", f"{key} {kind} {limit:g} for {name}", t)
            kept = [t for t in kept if id(t) not in gone]
    return kept


def _upsample(train: list[Trajectory], cfg: MergeConfig, report: MergeReport, rng: random.Random) -> list[Trajectory]:
    """Weights above 1 repeat training rows by source weight x domain weight (each only above 1); the copies
    are counted first, so past `MAX_UPSAMPLED_ROWS` the merge stops instead of filling the memory."""
    if all(w <= 1 for w in [*cfg.source_weights.values(), *cfg.domain_weights.values()]):
        return train
    groups: dict[tuple[str, str], list[Trajectory]] = defaultdict(list)
    for t in train:
        groups[(t.source, t.domain)].append(t)
    weights = {key: max(cfg.source_weights.get(key[0], 1.0), 1.0) * max(cfg.domain_weights.get(key[1], 1.0), 1.0)
               for key in groups}
    planned = sum(len(trajs) * weights[key] for key, trajs in groups.items())
    if planned > MAX_UPSAMPLED_ROWS:
        above_1 = {k: w for k, w in {**cfg.source_weights, **cfg.domain_weights}.items() if w > 1}
        line_bytes = sum(len(dump_line(t)) for t in train) / len(train)
        raise MergeTooLarge(
            f"the weights above 1 ({', '.join(f'{k}={w:g}' for k, w in above_1.items())}) would make the training "
            f"split {planned:,.0f} rows (about {planned * line_bytes / 1e9:,.1f} GB as JSONL) from {len(train):,}; "
            f"the limit is {MAX_UPSAMPLED_ROWS:,} rows: lower the weights")
    extra: list[Trajectory] = []
    for (source, domain), trajs in sorted(groups.items()):
        n_extra = int(len(trajs) * weights[(source, domain)] + 0.5) - len(trajs)  # round half up
        rng.shuffle(trajs)  # the group's own list, made above
        for k in range(max(n_extra, 0)):
            orig = trajs[k % len(trajs)]
            extra.append(Trajectory(f"{orig.id}#up{k // len(trajs) + 1}", orig.source, orig.domain, orig.messages,
                                    {**orig.meta, "upsampled_from": orig.id}))
        if n_extra > 0:
            report.added[(source, domain, "upsampled")] += n_extra
    return train + extra


def split_trajectories(trajs: list[Trajectory], ratios: tuple[float, float, float] = (0.9, 0.05, 0.05),
                       seed: int = 0) -> dict[str, list[Trajectory]]:
    """Deterministic split, stratified by domain; the rows of one source task (source, `meta["source_id"]`) stay
    together, so two attempts at one task never straddle train and test."""
    r_train, r_val = ratios[0] / float(sum(ratios)), ratios[1] / float(sum(ratios))
    by_domain: dict[str, dict[tuple[str, str], list[Trajectory]]] = defaultdict(lambda: defaultdict(list))
    for t in trajs:
        by_domain[t.domain][(t.source, str(t.meta.get("source_id", t.id)))].append(t)
    out: dict[str, list[Trajectory]] = {name: [] for name in SPLITS}
    for domain in sorted(by_domain):
        groups = list(by_domain[domain].values())
        random.Random(f"{seed}-{domain}").shuffle(groups)
        n_train = round(len(groups) * r_train)
        n_val = min(round(len(groups) * r_val), len(groups) - n_train)
        for i, g in enumerate(groups):
            out["train" if i < n_train else "validation" if i < n_train + n_val else "test"].extend(g)
    return out


# --------------------------------------------------------------------------- export / load


def to_arrow(trajs: list[Trajectory]):
    """The trajectories as an Arrow table (parquet and HF datasets); meta is a JSON string."""
    import pyarrow as pa

    turn = pa.struct([("role", pa.string()), ("content", pa.string()), ("train", pa.bool_())])
    schema = pa.schema([("id", pa.string()), ("source", pa.string()), ("domain", pa.string()),
                        ("messages", pa.list_(turn)), ("meta", pa.string())])
    return pa.Table.from_pylist([{**t.to_dict(), "meta": json.dumps(t.meta, ensure_ascii=False, sort_keys=True)}
                                 for t in trajs], schema=schema)


def _from_record(rec: dict[str, Any], where: str, error: str | None = None) -> Trajectory:
    if error:
        raise SchemaError(f"{where}: {error}")
    try:
        if isinstance(meta := rec.get("meta"), str):
            rec = {**rec, "meta": json.loads(meta) if meta else {}}
        return Trajectory.from_dict(rec)
    except json.JSONDecodeError as e:
        raise SchemaError(f"{where}: field 'meta' is not valid JSON ({e.msg})") from None
    except SchemaError as e:
        raise SchemaError(f"{where}: {e}") from None


PARALLEL_WRITE_ROWS = 20_000  # below this many rows forking costs more than it saves

_WRITE_ROWS: list[Trajectory] = []  # in a forked writer: the rows it serialises (inherited, never pickled)


def write_jsonl(trajs: Iterable[Trajectory], path: str | Path, workers: int = 0) -> Path:
    """One `dump_line` a trajectory. With `workers` >= 2 and `PARALLEL_WRITE_ROWS` rows, forked processes
    serialise all but the first share into part files appended in order: the same bytes, the work spread."""
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
    _write_lines(task[0], _WRITE_ROWS, task[1], task[2])


_HEAD = '{"role": %s, "content": '
_ROLE_HEAD = {r: _HEAD % encode_basestring_ascii(r) for r in ("system", "user", "assistant")}


def dump_line(t: Trajectory) -> str:
    """`Trajectory.to_dict` as an ASCII JSON line, built from the strings with the C escaper (3x faster than
    json.dumps of the dict); `read_jsonl` gives back an equal trajectory."""
    q, heads = encode_basestring_ascii, _ROLE_HEAD
    turns = ", ".join([
        f'{heads.get(m.role) or _HEAD % q(m.role)}{q(m.content)}, "train": {"true" if m.train else "false"}}}'
        for m in t.messages
    ])
    return (f'{{"id": {q(t.id)}, "source": {q(t.source)}, "domain": {q(t.domain)}, "messages": [{turns}], '
            f'"meta": {json.dumps(t.meta)}}}\n')


def read_jsonl(path: str | Path) -> list[Trajectory]:
    """Trajectories from a JSONL file; a bad line raises SchemaError naming file and line."""
    with open(path, "rb") as f:
        return [_from_record(r.data, r.where(), r.error) for r in rows_from_lines(f, 1, str(path), "", None)]


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
    """A `datasets.Dataset` (id, source, domain, messages, meta as JSON): `messages` is what TRL's SFTTrainer
    reads, its extra `train` key the per-turn loss flag for a trainer that honours it."""
    import datasets

    return datasets.Dataset(to_arrow(list(trajs)))


def from_hf_dataset(ds) -> list[Trajectory]:
    """The inverse of `to_hf_dataset` (lossless)."""
    return [_from_record(r, f"dataset row {i}") for i, r in enumerate(ds.to_list(), 1)]


def check_formats(formats: Iterable[str]) -> tuple[str, ...]:
    """The export formats as a tuple, or a UserError naming the unknown ones (before a merge, not after it)."""
    formats = tuple(formats)
    if not formats or set(formats) - set(FORMATS):
        raise UserError(f"export formats must be some of {', '.join(FORMATS)}; got {list(formats)}")
    return formats


def save_splits(splits: dict[str, list[Trajectory]], out_dir: str | Path, formats: Iterable[str] = ("jsonl",),
                report: MergeReport | None = None, workers: int = 0) -> dict[str, list[Path]]:
    """Write `<split>.jsonl` / `.parquet` / `hf/`, `splits.json` and `report.json`, staged in a temporary folder
    and moved into place only when all are written, so a failed save leaves the previous outputs whole. Outputs of
    the previous save that this one did not write are removed (a stale `train.parquet` beside a new `train.jsonl`
    would pass for this merge's); files the kit did not write stay."""
    formats = check_formats(formats)
    final = Path(out_dir)
    final.mkdir(parents=True, exist_ok=True)
    previous = _previous_outputs(final)
    stage = Path(tempfile.mkdtemp(prefix=".staging-", dir=final))
    try:
        written = _write_splits(splits, stage, formats, report, workers)
        for entry in stage.iterdir():
            previous.discard(entry.name)
            dest = final / entry.name
            if dest.is_dir() and not dest.is_symlink():
                shutil.rmtree(dest)  # hf/: a folder does not replace a folder by rename
            os.replace(entry, dest)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    for name in sorted(previous):
        stale = final / name
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale)
        else:
            stale.unlink(missing_ok=True)
    return {kind: [final / p.relative_to(stage) for p in paths] for kind, paths in written.items()}


def _previous_outputs(final: Path) -> set[str]:
    """The split files the previous `save_splits` wrote, from its `splits.json`; only plain names count."""
    try:
        manifest = json.loads((final / "splits.json").read_text(encoding="utf-8"))
        names = {"hf" if fmt == "hf" else f"{split}.{fmt}" for split in manifest["splits"]
                 for fmt in manifest["formats"] if fmt in FORMATS}
    except (OSError, ValueError, KeyError, TypeError):
        return set()  # no manifest, or not one the kit wrote: nothing is known to be the kit's
    return {n for n in names if n not in (".", "..") and Path(n).name == n}


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
        (out / "report.json").write_text(json.dumps(report.to_dict(), indent=1, ensure_ascii=False), encoding="utf-8")
        written["report"].append(out / "report.json")
    return dict(written)


def load_splits(out_dir: str | Path, fmt: str = "jsonl") -> dict[str, list[Trajectory]]:
    """The splits `save_splits` wrote in one format; without a `splits.json`, the train/validation/test files."""
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
    if missing := [n for n in names if not (out / f"{n}.{fmt}").exists()]:
        raise FileNotFoundError(f"{out} has no {fmt} files for {missing}; save the merge with that format first")
    return {name: reader(out / f"{name}.{fmt}") for name in names}


def load_report(out_dir: str | Path) -> MergeReport:
    return MergeReport.from_dict(json.loads((Path(out_dir) / "report.json").read_text(encoding="utf-8")))

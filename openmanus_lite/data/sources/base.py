"""Reading raw rows of a source dataset, wherever they live, with their provenance.

A source is given as a local file (JSONL, JSON, parquet), a folder of such files (each
file's name is its split, as on the hub: `db.jsonl`, `os-00000-of-00001.parquet`), or a
hub id read through `datasets.load_dataset`. Every row comes out as a `RawRow` that
knows its file and line, so that an error, a rejection or a report can point at it.

A line that is not valid JSON (or a JSON or parquet file that cannot be read) does not
stop the reading: it comes out as a `RawRow` with `error` set, and the merge decides
(strict mode raises `InputError`, lenient mode counts it as rejected). Blank lines are
not rows and are skipped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openmanus_lite.errors import UserError

FILE_SUFFIXES = (".jsonl", ".json", ".parquet")


class InputError(UserError):
    """Input that cannot be read as the source's schema; names file, line and field."""

    def __init__(self, where: str, message: str, reason: str = "input.invalid"):
        super().__init__(f"{where}: {message}")
        self.where = where
        self.reason = reason


class RowRejected(Exception):
    """A converter's verdict on one row: it cannot become a trajectory, and why.

    `reason` is a short code (`schema.missing_field`, ...), `field` the path inside the
    row (`conversations[3].value`) when one is to blame.
    """

    def __init__(self, reason: str, detail: str, field: str | None = None, message: str | None = None):
        super().__init__(detail)
        self.reason = reason
        self.detail = detail
        self.field = field
        self.message = message or detail


@dataclass(slots=True)
class RawRow:
    """One input row with its provenance. `data` is None when `error` says why it could not be read."""

    source: str
    file: str
    line: int
    split: str | None
    data: Any
    error: str | None = None

    def where(self, field: str | None = None) -> str:
        """`file, line N, field 'x'`: the place a user opens to find the problem."""
        text = f"{self.file}, line {self.line}"
        return f"{text}, field '{field}'" if field else text


# --------------------------------------------------------------------------- local files

_SHARD = re.compile(r"-\d{5}-of-\d{5}.*$")


def split_name(path: Path) -> str:
    """The split a file holds, from its name: `db.jsonl` -> db, `os-00000-of-00001-ab.parquet` -> os."""
    name = path.name
    for suffix in FILE_SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return _SHARD.sub("", name)


def _iter_jsonl(path: Path, source: str, split: str | None) -> Iterator[RawRow]:
    with open(path, "rb") as f:
        yield from rows_from_lines(f, 1, str(path), source, split)


def rows_from_lines(lines: Iterable[bytes], first_line: int, file: str, source: str,
                    split: str | None) -> Iterator[RawRow]:
    """RawRows of JSONL lines (bytes), numbered from `first_line`; blank lines are skipped."""
    loads = json.loads
    for lineno, line in enumerate(lines, first_line):
        if line[:1] != b"{" and not line.strip():
            continue
        try:
            data = loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            msg = getattr(e, "msg", str(e))
            col = getattr(e, "colno", None)
            yield RawRow(source, file, lineno, split, None,
                         f"invalid JSON ({msg}{f' at column {col}' if col else ''}); "
                         "the line is truncated or not JSON")
            continue
        if data.__class__ is not dict:
            yield RawRow(source, file, lineno, split, None, f"expected a JSON object, got {type(data).__name__}")
            continue
        yield RawRow(source, file, lineno, split, data)


def jsonl_chunks(path: Path, chunk_bytes: int) -> list[tuple[int, int, int]]:
    """(start, end, first line number) of byte ranges of a JSONL file that end at line ends.

    Lets worker processes read one large file in parallel while every row keeps its
    true line number.
    """
    size = path.stat().st_size
    bounds = [0]
    with open(path, "rb") as f:
        pos = chunk_bytes
        while pos < size:
            f.seek(pos)
            f.readline()
            nxt = f.tell()
            if nxt >= size:
                break
            bounds.append(nxt)
            pos = nxt + chunk_bytes
        bounds.append(size)
        out = []
        line = 1
        for start, end in zip(bounds, bounds[1:]):
            out.append((start, end, line))
            f.seek(start)
            remaining = end - start
            while remaining > 0:
                block = f.read(min(remaining, 1 << 24))
                line += block.count(b"\n")
                remaining -= len(block)
    return out


def read_jsonl_range(path: str, start: int, end: int, first_line: int, source: str,
                     split: str | None) -> Iterator[RawRow]:
    """The rows of one byte range made by `jsonl_chunks`."""
    with open(path, "rb") as f:
        f.seek(start)
        data = f.read(end - start)
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    yield from rows_from_lines(lines, first_line, path, source, split)


def _iter_json(path: Path, source: str, split: str | None) -> Iterator[RawRow]:
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        if text.lstrip().startswith("{") and "\n" in text.strip():
            # A JSONL file with a .json name: read it line by line instead.
            yield from _iter_jsonl(path, source, split)
            return
        yield RawRow(source, str(path), e.lineno, split, None,
                     f"invalid JSON ({e.msg} at line {e.lineno} column {e.colno}); the file is truncated or not JSON")
        return
    if isinstance(data, dict):
        # {"data": [...]} / {"rows": [...]} wrappers, or a single record.
        for key in ("data", "rows", "train"):
            if isinstance(data.get(key), list):
                data = data[key]
                break
        else:
            data = [data]
    if not isinstance(data, list):
        yield RawRow(source, str(path), 1, split, None, f"expected a JSON array of objects, got {type(data).__name__}")
        return
    for i, item in enumerate(data, 1):
        if isinstance(item, dict):
            yield RawRow(source, str(path), i, split, item)
        else:
            yield RawRow(source, str(path), i, split, None, f"item {i} is a {type(item).__name__}, not a JSON object")


UNREADABLE_PARQUET = "not a readable parquet file"


def _iter_parquet(path: Path, source: str, split: str | None) -> Iterator[RawRow]:
    """The rows of a parquet file (`line` is the row number); a corrupt or cut file ends in one row with `error`
    set, at the first row that could not be read, like a JSON file that does not parse."""
    import pyarrow
    import pyarrow.parquet as pq

    line = 0
    try:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=2048):
            for item in batch.to_pylist():
                line += 1
                yield RawRow(source, str(path), line, split, item)
    except (pyarrow.ArrowException, OSError) as e:
        reason = " ".join(str(e).split())[:200]
        yield RawRow(source, str(path), line + 1, split, None,
                     f"{UNREADABLE_PARQUET} ({reason}); the file is truncated or not parquet")


_READERS = {".jsonl": _iter_jsonl, ".json": _iter_json, ".parquet": _iter_parquet}


def source_files(path: Path) -> list[Path]:
    """The data files of a local source: the file itself, or every supported file under a folder."""
    if path.is_file():
        return [path]
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in _READERS)
    if not files:
        raise InputError(str(path), f"no {', '.join(FILE_SUFFIXES)} files in this folder")
    return files


# --------------------------------------------------------------------------- public reader


def local_files(spec: str | Path, splits: list[str] | tuple[str, ...] | None = None) -> list[tuple[Path, str]]:
    """(file, split name) of a local source, in reading order, filtered by `splits`."""
    path = Path(spec)
    out = []
    for file in source_files(path):
        split = split_name(file)
        if file.parent != path and path.is_dir() and split in ("train", "test", "validation", "val", "data"):
            split = file.parent.name  # hub layout: <config>/train-0000.parquet
        if splits and split not in splits:
            continue
        out.append((file, split))
    return out


def read_rows(
    spec: str | Path,
    source: str,
    *,
    splits: list[str] | tuple[str, ...] | None = None,
    config: str | None = None,
    data_files: str | list[str] | None = None,
) -> Iterator[RawRow]:
    """Every row of a source: a local file or folder, else a hub id (`datasets.load_dataset`).

    `splits` keeps only files/splits with those names; `config` is the hub config
    (AgentBank has one per task); `data_files` picks files of a hub repository whose files
    have different schemas (TaskCraft's `pure_qa.jsonl`). For a local folder, a subfolder
    named like a config also counts as that config's split name.
    """
    if Path(spec).exists():
        for file, split in local_files(spec, splits):
            yield from _READERS[file.suffix](file, source, split)
        return
    yield from _read_hub(str(spec), source, splits=splits, config=config, data_files=data_files)


def _looks_like_hub_id(spec: str) -> bool:
    return bool(re.fullmatch(r"[\w.\-]+/[\w.\-]+", spec))


def _read_hub(spec: str, source: str, *, splits, config, data_files=None) -> Iterator[RawRow]:
    if not _looks_like_hub_id(spec):
        raise InputError(spec, "no such file or folder, and not a hub id of the form 'owner/name'")
    try:
        import datasets
    except ImportError as e:  # pragma: no cover - datasets is a dependency of the train extra
        raise InputError(spec, "reading a hub dataset needs the 'datasets' package (pip install datasets)") from e
    try:
        kwargs = {"name": config, "data_files": data_files} if data_files else {"name": config}
        loaded = datasets.load_dataset(spec, **kwargs) if not splits else {
            s: datasets.load_dataset(spec, split=s, **kwargs) for s in splits
        }
    except Exception as e:  # noqa: BLE001 - re-raised with the id and what to do
        raise InputError(
            spec,
            f"could not load the hub dataset ({type(e).__name__}: {e}). Check the id and config, "
            "the network (HF_HUB_OFFLINE), or pass a local file or folder instead.",
        ) from e
    where_cfg = f"[{config}]" if config else ""
    for split, ds in loaded.items():
        label = f"{spec}{where_cfg}:{split}"
        for i, item in enumerate(ds, 1):
            yield RawRow(source, label, i, config or split, item)


def field_error(row: RawRow, field: str, message: str, reason: str = "schema.bad_field") -> RowRejected:
    """A RowRejected whose detail names the row's place and the field."""
    return RowRejected(reason, f"{row.where(field)}: {message}", field, message)

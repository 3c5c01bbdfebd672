"""Raw rows of a source dataset (local JSONL/JSON/parquet files or folders, or a hub id) with their file and line.

A line or file that cannot be read does not stop the reading: it comes out as a `RawRow` with `error` set, and
the merge decides (strict mode raises, lenient mode counts it as rejected).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openmanus_lite.errors import UserError

FILE_SUFFIXES = (".jsonl", ".json", ".parquet")
UNREADABLE_PARQUET = "not a readable parquet file"


class InputError(UserError):
    """Input that cannot be read as the source's schema; the message names file, line and field."""

    def __init__(self, message: str, reason: str = "input.invalid"):
        super().__init__(message)
        self.reason = reason


@dataclass(slots=True)
class RawRow:
    """One input row with its provenance; `data` is None when `error` says why it could not be read."""

    source: str
    file: str
    line: int
    split: str | None
    data: Any
    error: str | None = None

    def where(self, field: str | None = None) -> str:
        text = f"{self.file}, line {self.line}"
        return f"{text}, field '{field}'" if field else text


class RowRejected(Exception):
    """A row that cannot become a trajectory; the message names the row and field to blame, `reason` the code."""

    def __init__(self, row: RawRow, field: str | None, message: str, reason: str = "schema.bad_field"):
        super().__init__(f"{row.where(field)}: {message}")
        self.reason = reason


# --------------------------------------------------------------------------- local files

_SHARD = re.compile(r"-\d{5}-of-\d{5}.*$")


def split_name(path: Path) -> str:
    """The split a file holds, from its name: `db.jsonl` -> db, `os-00000-of-00001-ab.parquet` -> os."""
    return _SHARD.sub("", path.stem)


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
            data = loads(line.decode("utf-8-sig", "surrogatepass"))
            error = None if data.__class__ is dict else f"expected a JSON object, got {type(data).__name__}"
        except UnicodeDecodeError:
            data, error = None, "not UTF-8 text; save the file as UTF-8"
        except json.JSONDecodeError as e:
            data, error = None, f"invalid JSON ({e.msg} at column {e.colno}); the line is truncated or not JSON"
        yield RawRow(source, file, lineno, split, None if error else data, error)


def jsonl_chunks(path: Path, chunk_bytes: int) -> list[tuple[int, int, int]]:
    """(start, end, first line number) of byte ranges that end at line ends, so worker processes can read one
    large file in parallel while every row keeps its true line number."""
    size, out, start, line = path.stat().st_size, [], 0, 1
    with open(path, "rb") as f:
        while start < size:
            f.seek(start)
            block = f.read(chunk_bytes) + f.readline()  # on to the end of the line the chunk cuts
            out.append((start, start + len(block), line))
            start += len(block)
            line += block.count(b"\n")
    return out


def read_jsonl_range(path: str, start: int, end: int, first_line: int, source: str,
                     split: str | None) -> Iterator[RawRow]:
    with open(path, "rb") as f:
        f.seek(start)
        lines = f.read(end - start).split(b"\n")
    return rows_from_lines(lines, first_line, path, source, split)


def _iter_json(path: Path, source: str, split: str | None) -> Iterator[RawRow]:
    text, file = path.read_text(encoding="utf-8"), str(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        if text.lstrip().startswith("{") and "\n" in text.strip():  # a JSONL file with a .json name
            yield from _iter_jsonl(path, source, split)
        else:
            yield RawRow(source, file, e.lineno, split, None, f"invalid JSON ({e.msg} at line {e.lineno} column "
                         f"{e.colno}); the file is truncated or not JSON")
        return
    if isinstance(data, dict):  # {"data": [...]} / {"rows": [...]} wrappers, or a single record
        data = next((data[k] for k in ("data", "rows", "train") if isinstance(data.get(k), list)), [data])
    if not isinstance(data, list):
        yield RawRow(source, file, 1, split, None, f"expected a JSON array of objects, got {type(data).__name__}")
        return
    for i, item in enumerate(data, 1):
        ok = isinstance(item, dict)
        yield RawRow(source, file, i, split, item if ok else None,
                     None if ok else f"item {i} is a {type(item).__name__}, not a JSON object")


def _iter_parquet(path: Path, source: str, split: str | None) -> Iterator[RawRow]:
    """`line` is the row number; a corrupt or cut file ends in one row with `error` set."""
    import pyarrow
    import pyarrow.parquet as pq

    line = 0
    try:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=2048):
            for item in batch.to_pylist():
                line += 1
                yield RawRow(source, str(path), line, split, item)
    except (pyarrow.ArrowException, OSError) as e:
        yield RawRow(source, str(path), line + 1, split, None,
                     f"{UNREADABLE_PARQUET} ({' '.join(str(e).split())[:200]}); the file is truncated or not parquet")


_READERS = {".jsonl": _iter_jsonl, ".json": _iter_json, ".parquet": _iter_parquet}


def local_files(spec: str | Path, splits: Iterable[str] | None = None) -> list[tuple[Path, str]]:
    """(file, split name) of a local file or folder in reading order; a file's name is its split, as on the hub,
    and in the layout `<config>/train-0000.parquet` the split is <config>."""
    path = Path(spec)
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in _READERS)
    if not files:
        raise InputError(f"{path}: no {', '.join(FILE_SUFFIXES)} files in this folder")
    if files[0].suffix not in _READERS:
        raise InputError(f"{path}: not a {', '.join(FILE_SUFFIXES)} file")
    out = []
    for file in files:
        split = split_name(file)
        if file.parent != path and path.is_dir() and split in ("train", "test", "validation", "val", "data"):
            split = file.parent.name
        if not splits or split in splits:
            out.append((file, split))
    return out


# --------------------------------------------------------------------------- public reader


def read_rows(spec: str | Path, source: str, *, splits: Iterable[str] | None = None, config: str | None = None,
              data_files: str | list[str] | None = None) -> Iterator[RawRow]:
    """Every row of a local file or folder, else of a hub id. `data_files` picks files of a hub repository whose
    files have different schemas (TaskCraft's `pure_qa.jsonl`)."""
    if Path(spec).exists():
        for file, split in local_files(spec, splits):
            yield from _READERS[file.suffix](file, source, split)
        return
    spec = str(spec)
    if not re.fullmatch(r"[\w.\-]+/[\w.\-]+", spec):
        raise InputError(f"{spec}: no such file or folder, and not a hub id of the form 'owner/name'")
    try:
        import datasets

        kwargs = {"name": config, "data_files": data_files} if data_files else {"name": config}
        loaded = ({s: datasets.load_dataset(spec, split=s, **kwargs) for s in splits} if splits
                  else datasets.load_dataset(spec, **kwargs))
    except Exception as e:  # noqa: BLE001 - re-raised with the id and what to do
        raise InputError(f"{spec}: could not load the hub dataset ({type(e).__name__}: {e}). Check the id and config, "
                         "the network (HF_HUB_OFFLINE), or pass a local file or folder instead.") from e
    for split, ds in loaded.items():
        label = f"{spec}[{config}]:{split}" if config else f"{spec}:{split}"
        for i, item in enumerate(ds, 1):
            yield RawRow(source, label, i, config or split, item)


def source_loader(source: str, hub_id: str) -> Callable[..., Iterator[RawRow]]:
    """The `load` of a source whose files or hub splits `read_rows` reads as they are."""

    def load(spec: str = hub_id, *, splits: list[str] | None = None, config: str | None = None) -> Iterator[RawRow]:
        return read_rows(spec, source, splits=splits, config=config)

    return load

"""Peak memory of a stage, one way for every stage: the process's resident memory on a CPU, torch's allocated
and reserved memory on a GPU (`PeakMemory`, or `run_in_fresh_process` for a stage in a new Python process).

Linux lets a process reset its resident high-water mark, so a stage's peak is its own; elsewhere the lifetime peak
is reported and said so. An inner measurement's reset hands the mark it erases to the ones around it.
"""

from __future__ import annotations

import ctypes
import gc
import multiprocessing
import os
import pickle
import resource
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")
TRIM_ENV = "OPENMANUS_TRIM_EVERY_STEPS"
TRIM_SECONDS_ENV = "OPENMANUS_TRIM_EVERY_SECONDS"


def _status_kb(field: str) -> int | None:
    try:
        return next((int(line.split()[1]) for line in _STATUS.read_text().splitlines()
                     if line.startswith(field + ":")), None)
    except (OSError, ValueError, IndexError):
        return None


def reset_peak_rss() -> bool:
    """Start a new resident-memory high-water mark (Linux); False where the OS cannot, and peaks are lifetime ones."""
    try:
        _CLEAR_REFS.write_text("5")
        return True
    except OSError:
        return False


def rss_gb() -> float | None:
    """Resident memory now, in GB (Linux; None elsewhere)."""
    kb = _status_kb("VmRSS")
    return None if kb is None else round(kb / 1e6, 3)


def peak_rss_gb() -> float | None:
    """The resident high-water mark in GB: since the last `reset_peak_rss` on Linux, the lifetime one elsewhere."""
    kb = _status_kb("VmHWM")
    if kb is not None:
        return round(kb / 1e6, 3)
    try:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kB on Linux, bytes on macOS
    except (OSError, ValueError):
        return None
    return round(peak / (1e9 if sys.platform == "darwin" else 1e6), 3)


def _cuda():
    torch = sys.modules.get("torch")  # never import torch just to measure
    return torch.cuda if torch is not None and torch.cuda.is_available() else None


def _cuda_peaks(cuda) -> tuple[float, float]:
    return round(cuda.max_memory_allocated() / 1e9, 3), round(cuda.max_memory_reserved() / 1e9, 3)


def release_memory() -> None:
    """Give freed memory back to the OS between stages (Python objects, glibc's heap, torch's CUDA cache)."""
    gc.collect()
    trim_heap()
    cuda = _cuda()
    if cuda is not None:
        cuda.empty_cache()


def trim_every_steps() -> int:
    """How often a trainer trims glibc's heap (OPENMANUS_TRIM_EVERY_STEPS, default 20; 0: never). glibc keeps the
    freed activations resident: the demo's SFT held 7.0-7.9 GB between steps, 1.4-1.6 GB trimmed each step. It frees
    memory for the machine, not the run's peak (issue #41); a trim costs about a second, hence every 20 steps."""
    return _trim_setting(TRIM_ENV, "20", int, "a number of steps")


def _trim_setting(env: str, default: str, kind: type, what: str):
    value = os.environ.get(env, default).strip()
    try:
        return max(kind(0), kind(value))
    except ValueError:
        raise ValueError(f"{env}={value!r}: give {what} (0: never)") from None


def trim_heap() -> None:
    """Give glibc's free heap pages back to the OS (a no-op off glibc)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


class HeapTrim:
    """Calls `trim_heap` at most every `seconds` (None: OPENMANUS_TRIM_EVERY_SECONDS, default 20; 0: never), for loops
    outside a trainer whose allocations change size every call: 60 untrained episodes of the demo peaked at 6.16 GB
    without, 4.91 GB with (benchmarks/memory.py --stages eval --episodes 60 --settings defaults,trim_every_20s)."""

    def __init__(self, seconds: float | None = None) -> None:
        self.seconds = _trim_setting(TRIM_SECONDS_ENV, "20", float, "seconds") if seconds is None else max(0.0, seconds)
        self.last = time.monotonic()

    def __call__(self) -> None:
        if self.seconds and time.monotonic() - self.last >= self.seconds:
            trim_heap()
            self.last = time.monotonic()


_OPEN: list["PeakMemory"] = []
"""The measurements under way, outermost first: a new one's reset would erase their high-water mark."""


class PeakMemory:
    """A context manager measuring one stage's peak memory; `as_dict()` is what logs and reports store."""

    def __init__(self) -> None:
        self._erased = (0.0, 0.0, 0.0)  # resident, GPU allocated, GPU reserved marks an inner measurement reset
        self.rss_gb: float | None = None
        self.per_stage = False
        self.cuda_allocated_gb: float | None = None
        self.cuda_reserved_gb: float | None = None

    def __enter__(self) -> "PeakMemory":
        cuda = _cuda()
        if _OPEN:
            mark = (peak_rss_gb() or 0.0, *(_cuda_peaks(cuda) if cuda is not None else (0.0, 0.0)))
            for outer in _OPEN:
                outer._erased = tuple(map(max, outer._erased, mark))
        _OPEN.append(self)
        self.per_stage = reset_peak_rss()
        if cuda is not None:
            cuda.reset_peak_memory_stats()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self in _OPEN:
            _OPEN.remove(self)
        now = peak_rss_gb()
        self.rss_gb = None if now is None else max(now, self._erased[0])
        cuda = _cuda()
        if cuda is not None:
            self.cuda_allocated_gb, self.cuda_reserved_gb = map(max, _cuda_peaks(cuda), self._erased[1:])

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rss_gb": self.rss_gb, "rss_kind": "stage" if self.per_stage else "process lifetime"}
        if self.cuda_allocated_gb is not None:
            out.update(cuda_allocated_gb=self.cuda_allocated_gb, cuda_reserved_gb=self.cuda_reserved_gb)
        return out

    def summary(self) -> str:
        text = "peak " + ("unknown" if self.rss_gb is None else f"{self.rss_gb:.1f} GB resident")
        if not self.per_stage:
            text += " (process lifetime)"
        if self.cuda_allocated_gb is not None:
            text += f", GPU {self.cuda_allocated_gb:.1f} GB allocated / {self.cuda_reserved_gb:.1f} GB reserved"
        return text


def run_in_fresh_process(fn: Any, *args: Any) -> tuple[Any, dict[str, Any]]:
    """(`fn(*args)`'s result, its `PeakMemory.as_dict()`) from a new spawned process: a model's stage leaves memory
    no collection or trim hands back, and the demo's later stages peaked 1-2 GB higher in one process (issue #41).
    `fn`, `args` and the result travel by pickle; the child's error is raised here with its traceback. A calling
    script must guard its top level with `if __name__ == "__main__":`."""
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else None
    with tempfile.TemporaryDirectory(prefix="openmanus_stage_") as tmp:
        path = Path(tmp) / "outcome.pkl"
        proc = multiprocessing.get_context("spawn").Process(target=_fresh_process_main,
                                                            args=(fn, args, str(path), threads))
        proc.start()
        try:
            proc.join()
        except BaseException:  # Ctrl-C: the child got it too; give it a moment to stop, then make sure it does
            proc.join(30)
            if proc.is_alive():
                proc.terminate()
                proc.join()
            raise
        if not path.is_file():
            code = proc.exitcode
            why = (f"was killed by signal {-code}" + (" (SIGKILL: often the out-of-memory killer)" if code == -9 else "")
                   if code is not None and code < 0 else f"exited with code {code} before reporting")
            raise RuntimeError(f"the fresh process running {getattr(fn, '__name__', fn)} {why}")
        outcome = pickle.loads(path.read_bytes())
    if outcome[0] == "ok":
        return outcome[1], outcome[2]
    _, error, child_traceback = outcome
    if error is None:  # not picklable: its text is all that came back
        raise RuntimeError(f"in the fresh process:\n{child_traceback}")
    raise error from RuntimeError(f"in the fresh process:\n{child_traceback}")


def _fresh_process_main(fn: Any, args: tuple, path: str, threads: int | None) -> None:
    for stream in (sys.stdout, sys.stderr):  # a log being followed sees the stage's lines as they come
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(line_buffering=True)
    if threads:
        import torch

        torch.set_num_threads(threads)
    try:
        with PeakMemory() as peak:
            result = fn(*args)
        outcome = ("ok", result, peak.as_dict())
    except BaseException as error:  # everything goes back to the parent, Ctrl-C included
        try:
            pickle.loads(pickle.dumps(error))
        except Exception:
            error = None
        outcome = ("error", error, traceback.format_exc())
    Path(path).write_bytes(pickle.dumps(outcome))
    if outcome[0] == "error":
        sys.exit(1)

"""When a training run stops: one callback for every trainer (SFT, GRPO, DPO, reward models).

`TimeLimit` counts training time (wall, or CPU seconds per torch thread when other processes share the CPU), stops
at `max_minutes` with a final save, saves a checkpoint at each time mark (its evaluation is not training time),
keeps a loss history, drives the "cosine_by_time" schedule and measures the training's peak memory.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any, Callable

from transformers import TrainerCallback

from openmanus_lite.peak_memory import PeakMemory, trim_every_steps, trim_heap


def training_clock(kind: str) -> Callable[[], float]:
    if kind == "wall":
        return time.perf_counter
    if kind == "cpu":
        import torch

        threads = max(1, torch.get_num_threads())
        return lambda: time.process_time() / threads
    raise ValueError(f"clock must be 'wall' or 'cpu', got {kind!r}")


def time_cosine_factor(step: int, train_s: float, budget_s: float, warmup_steps: int) -> float:
    """The learning-rate factor of "cosine_by_time": linear warmup by steps, then a cosine over training time."""
    warm = step / warmup_steps if step < warmup_steps else 1.0
    return warm * 0.5 * (1.0 + math.cos(math.pi * min(1.0, train_s / budget_s)))


class TimeLimit(TrainerCallback):
    """Training time, a time budget with marks, the loss history, and the time-based cosine (module doc)."""

    def __init__(self, max_minutes: float | None = None, *, mark_minutes=(), clock: str = "wall",
                 cosine_by_time: bool = False, on_mark: Callable[[Any, dict], Any] | None = None):
        self.max_minutes, self.cosine_by_time, self.on_mark = max_minutes, cosine_by_time, on_mark
        if cosine_by_time and not max_minutes:
            raise ValueError("cosine_by_time decays over max_minutes of training time: set max_minutes")
        self.now = training_clock(clock)
        self.pending = sorted(m for m in mark_minutes if m > 0)
        self.train_s, self.last = 0.0, None
        self.stopped_by_time = self._mark_due = False
        self.history: list[dict] = []
        self.marks: list[dict] = []
        self.peak = PeakMemory()
        self.trim_every = trim_every_steps()
        self.peak_memory: dict[str, Any] = {}

    @classmethod
    def from_config(cls, config: Any, on_mark: Callable | None = None) -> "TimeLimit":
        """The callback a kit config asks for (its max_minutes, and SFT's marks, clock and schedule)."""
        return cls(config.max_minutes, mark_minutes=getattr(config, "mark_minutes", ()),
                   clock=getattr(config, "clock", "wall"), cosine_by_time=getattr(config, "cosine_by_time", False),
                   on_mark=on_mark)

    def _tick(self) -> None:
        now = self.now()
        if self.last is not None:
            self.train_s += now - self.last
        self.last = now

    def elapsed_s(self) -> float:
        return self.train_s + (self.now() - self.last if self.last is not None else 0.0)

    def on_train_begin(self, args, state, control, lr_scheduler=None, **kw):
        self.peak.__enter__()
        self.last = self.now()
        if self.cosine_by_time:
            # transformers' scheduler steps after each optimizer step; its factor now reads the clock
            budget_s, warmup = self.max_minutes * 60, args.warmup_steps
            lr_scheduler.lr_lambdas = [
                lambda step: time_cosine_factor(step, self.elapsed_s(), budget_s, warmup)
            ] * len(lr_scheduler.lr_lambdas)

    def on_step_end(self, args, state, control, **kw):
        if self.trim_every and state.global_step % self.trim_every == 0:
            trim_heap()
        self._tick()
        minutes = self.train_s / 60
        out_of_steps = state.max_steps > 0 and state.global_step >= state.max_steps
        # a step budget sized to end at the last mark (a restarted schedule) may end a little before it on a faster
        # stretch: the end of training is then that mark, recorded with the minutes it really took
        passed = [m for m in self.pending if minutes >= m or out_of_steps]  # a prefix: pending is sorted
        if passed:
            del self.pending[:len(passed)]
            control.should_save = self._mark_due = True
        if self.max_minutes is not None and minutes >= self.max_minutes:
            control.should_training_stop = self.stopped_by_time = True
            control.should_save = args.save_strategy != "no"
        return control

    def on_save(self, args, state, control, model=None, **kw):
        if self._mark_due:
            self._mark_due = False
            entry = {"step": state.global_step, "train_minutes": round(self.train_s / 60, 3),
                     "tokens_seen": int(state.num_input_tokens_seen or 0),
                     "checkpoint": os.path.join(args.output_dir, f"checkpoint-{state.global_step}")}
            if self.on_mark is not None:
                entry["result"] = self.on_mark(model, entry)
            self.marks.append(entry)
            self.last = self.now()  # the evaluation's time is not training time

    def on_train_end(self, args, state, control, **kw):
        self.peak.__exit__(None, None, None)
        self.peak_memory = self.peak.as_dict()
        print(f"training {self.peak.summary()}", flush=True)

    def on_log(self, args, state, control, logs=None, **kw):
        if logs and "loss" in logs:
            self._tick()
            self.history.append({"step": state.global_step, "loss": float(logs["loss"]),
                                 "learning_rate": float(logs.get("learning_rate", 0.0)),
                                 "train_s": round(self.train_s, 2),
                                 "tokens_seen": int(state.num_input_tokens_seen or 0)})

"""SFT training data: trajectories -> token ids plus a loss mask that follows the per-turn flags.

TRL's `assistant_only_loss` trains every assistant turn, but the records say per turn whether it trains
(`Turn.train`: false for boilerplate and few-shot demos). So the rendered chat is tokenized piece by piece and
`assistant_masks` marks exactly each trained turn's content and `<|im_end|>`, tokenized from right after the
assistant header as the model generates it. Over-long conversations are cut after the last trained turn that
fits or dropped; every cut and drop is counted in the `DataReport`.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import asdict, dataclass, field
from itertools import groupby
from pathlib import Path
from typing import Any, Iterable

from openmanus_lite.schema import Trajectory

OVERFLOW_MODES = ("truncate", "drop")


def load_trajectories(spec: str | Path | Iterable[Any], split: str = "train") -> list[Trajectory]:
    """Trajectories from a merged-data JSONL/parquet file, a folder written by the merge
    (`<split>.jsonl`), or an iterable of `Trajectory` objects / their dicts."""
    if isinstance(spec, (str, Path)):
        path = Path(spec)
        if not path.exists():
            raise FileNotFoundError(f"training data {path} not found: pass a merged .jsonl/.parquet file or folder")
        import importlib

        merge = importlib.import_module("openmanus_lite.data.merge")  # the module, not data.merge the function
        if not path.is_dir():
            return (merge.read_parquet if path.suffix == ".parquet" else merge.read_jsonl)(path)
        splits = merge.load_splits(path, "parquet" if not list(path.glob("*.jsonl")) else "jsonl")
        if split not in splits:
            raise KeyError(f"{path} has splits {sorted(splits)}, not {split!r}; pick one with split=...")
        return splits[split]
    return [item if isinstance(item, Trajectory) else Trajectory.from_dict(item) for item in spec]


def parse_domain_weights(text: str | None, domains: Iterable[str] | None = None) -> dict[str, float]:
    """A command-line list such as "web=2,kg=0.5" as {domain: weight}; ValueError naming the bad item."""
    known = list(domains) if domains is not None else None
    out: dict[str, float] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name or (known is not None and name not in known):
            raise ValueError("expected domain=number" + (f" with a domain of {known}" if known else "")
                             + f", got {item!r}")
        try:
            out[name] = float(value)
        except ValueError:
            raise ValueError(f"{value.strip()!r} is not a number (in {item!r})") from None
        if out[name] < 0:
            raise ValueError(f"a weight cannot be negative (in {item!r})")
    return out


def mix_domains(trajectories: list[Trajectory], weights: dict[str, float], total: int | None = None,
                seed: int = 0) -> tuple[list[Trajectory], dict[str, dict[str, int]]]:
    """Resample to a domain mix: `weights` (relative) over domains, `total` records (default: as many as given).
    A domain asked for more records than it has is repeated; one with weight 0 or absent is left out."""
    rng = random.Random(seed)
    by_domain: dict[str, list[Trajectory]] = {}
    for t in trajectories:
        by_domain.setdefault(t.domain, []).append(t)
    unknown = [d for d in weights if d not in by_domain]
    if unknown:
        raise KeyError(f"domain mix names {unknown}, which the data does not contain (it has {sorted(by_domain)})")
    total = len(trajectories) if total is None else total
    wsum = sum(w for w in weights.values() if w > 0)
    if wsum <= 0:
        raise ValueError(f"domain mix weights must include a positive value, got {weights}")
    out: list[Trajectory] = []
    counts: dict[str, dict[str, int]] = {}
    for domain, pool in sorted(by_domain.items()):
        w = weights.get(domain, 0.0)
        want = round(total * w / wsum) if w > 0 else 0
        picked = rng.sample(pool, min(want, len(pool)))
        repeated = [pool[i % len(pool)] for i in range(want - len(picked))] if want > len(pool) else []
        out.extend(picked + repeated)
        counts[domain] = {"available": len(pool), "selected": want, "repeated": len(repeated),
                          "left_out": max(0, len(pool) - len(picked))}
    rng.shuffle(out)
    return out, counts


@dataclass
class DataReport:
    """What the builder did with every input record (nothing dropped silently)."""

    records_in: int = 0
    records_out: int = 0
    truncated: int = 0
    dropped_too_long: int = 0
    dropped_no_trained_turn: int = 0
    turns_cut: int = 0
    tokens: int = 0
    loss_tokens: int = 0
    max_length: int = 0
    by_domain: dict[str, int] = field(default_factory=dict)
    mix: dict[str, dict[str, int]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        return (f"{self.records_out}/{self.records_in} conversations kept ({self.truncated} truncated at a turn "
                f"boundary, {self.dropped_too_long} dropped as too long, {self.dropped_no_trained_turn} without a "
                f"trained turn); {self.tokens} tokens, {self.loss_tokens} with loss; max_length {self.max_length}; "
                f"by domain {self.by_domain}")


def _pieces(tokenizer: Any, messages: list[dict[str, Any]]) -> list[tuple[str, bool]]:
    """The rendered conversation cut into (text, trained) pieces: a trained piece is an assistant
    turn's content plus `<|im_end|>`. The rendering must contain each trained content verbatim to mask it honestly."""
    plain = [{"role": m["role"], "content": m["content"]} for m in messages]
    text = tokenizer.apply_chat_template(plain, tokenize=False)
    header = "<|im_start|>assistant\n"
    pieces: list[tuple[str, bool]] = []
    pos = 0
    for m in messages:
        if m["role"] != "assistant" or not m.get("train"):
            continue
        target = header + m["content"] + "<|im_end|>"
        at = text.find(target, pos)
        if at < 0:
            raise ValueError("the chat template does not render assistant turns as '<|im_start|>assistant\\n' + "
                             "content + '<|im_end|>'; per-turn loss masking needs such a template (e.g. "
                             "models.qwen25_chat_template())")
        start = at + len(header)
        pieces += [(text[pos:start], False), (text[start:at + len(target)], True)]
        pos = at + len(target)
    pieces.append((text[pos:], False))
    return [p for p in pieces if p[0]]


def tokenize_conversation(tokenizer: Any, messages: list[dict[str, Any]]) -> tuple[list[int], list[int], list[int]]:
    """(input_ids, assistant_masks, turn_end_positions): mask 1 exactly on trained assistant tokens; the token
    count at the end of each trained turn is where a conversation may be cut."""
    ids: list[int] = []
    mask: list[int] = []
    ends: list[int] = []
    for text, trained in _pieces(tokenizer, messages):
        toks = tokenizer(text, add_special_tokens=False)["input_ids"]
        ids.extend(toks)
        mask.extend([1 if trained else 0] * len(toks))
        if trained:
            ends.append(len(ids))
    return ids, mask, ends


def encode_trajectory(tokenizer: Any, traj: Trajectory, max_length: int,
                      overflow: str = "truncate") -> tuple[dict[str, Any] | None, str]:
    """One training row (or None) and what happened: 'ok', 'truncated', 'too_long', 'no_trained_turn'."""
    if overflow not in OVERFLOW_MODES:
        raise ValueError(f"overflow must be one of {OVERFLOW_MODES}, got {overflow!r}")
    messages = [{"role": t.role, "content": t.content, "train": bool(t.train and t.role == "assistant")}
                for t in traj.messages]
    if not any(m["train"] for m in messages):
        return None, "no_trained_turn"
    ids, mask, ends = tokenize_conversation(tokenizer, messages)
    status = "ok"
    if len(ids) > max_length:
        fitting = [e for e in ends if e <= max_length]
        if overflow == "drop" or not fitting:
            return None, "too_long"
        cut = fitting[-1]
        ids, mask = ids[:cut], mask[:cut]
        status = "truncated"
    return {"input_ids": ids, "assistant_masks": mask, "length": len(ids), "id": traj.id, "domain": traj.domain}, status


def build_sft_dataset(trajectories: list[Trajectory], tokenizer: Any, *, max_length: int = 1024,
                      overflow: str = "truncate", domain_mix: dict[str, float] | None = None, total: int | None = None,
                      seed: int = 0, progress: bool = False):
    """A pre-tokenized `datasets.Dataset` (input_ids, assistant_masks, length, id, domain) and a DataReport;
    `length` lets length-grouped batching find similar lengths without re-tokenizing."""
    import datasets
    from tqdm.auto import tqdm

    report = DataReport(records_in=len(trajectories), max_length=max_length)
    if domain_mix:
        trajectories, report.mix = mix_domains(trajectories, domain_mix, total, seed)
    elif total is not None:
        trajectories = random.Random(seed).sample(trajectories, min(total, len(trajectories)))
    rows = []
    by_domain: Counter = Counter()
    for traj in tqdm(trajectories, desc="tokenizing", disable=not progress):
        row, status = encode_trajectory(tokenizer, traj, max_length, overflow)
        report.dropped_too_long += status == "too_long"
        report.dropped_no_trained_turn += status == "no_trained_turn"
        if row is None:
            continue
        if status == "truncated":
            report.truncated += 1
            n_trained = sum(1 for t in traj.messages if t.train and t.role == "assistant")
            report.turns_cut += n_trained - len(_loss_runs(row))
        rows.append(row)
        by_domain[traj.domain] += 1
        report.tokens += row["length"]
        report.loss_tokens += sum(row["assistant_masks"])
    report.records_out = len(rows)
    report.by_domain = dict(sorted(by_domain.items()))
    if not rows:
        raise ValueError(f"no training rows left: {report.summary()}. Raise max_length or check the train flags.")
    return datasets.Dataset.from_list(rows), report


def _loss_runs(row: dict[str, Any]) -> list[list[int]]:
    """The token ids that get loss, one run per trained turn."""
    pairs = groupby(zip(row["input_ids"], row["assistant_masks"]), key=lambda pair: pair[1])
    return [[tok for tok, _ in run] for trained, run in pairs if trained]


def loss_token_texts(tokenizer: Any, row: dict[str, Any]) -> list[str]:
    """The decoded runs of tokens that get loss, one string per trained turn (for checks and notebooks)."""
    return [tokenizer.decode(run, skip_special_tokens=False) for run in _loss_runs(row)]


def save_report(report: DataReport, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report.to_dict(), indent=1))
    return path

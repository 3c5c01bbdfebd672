"""Reward models learned from the environment, both heads on the (SFT) language model.

The outcome RM (a 1-logit sequence head, TRL's `RewardTrainer` on trajectory pairs) ranks finished episodes
where the hidden checker is unavailable: best-of-N in `search.py` and the GRPO reward `orm`. The process RM (a
2-class token head, transformers' `Trainer`: TRL dropped its PRMTrainer) labels each assistant turn with
`pairs.step_labels` on the `<|im_end|>` tokens closing the turn and the observation after it, so one
causal forward pass scores every step. Both are `search.py` scorers `(history, view) -> float` in [0, 1].
"""

from __future__ import annotations

import bisect
import json
import math
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

from openmanus_lite.models import LoraSpec, _name_tokenizer_class, load_tokenizer
from openmanus_lite.preference.dpo import TrainReport, config_dtype, resolve_checkpoint, run_config, train_and_release
from openmanus_lite.preference.pairs import Messages, chat_token_counter, fit_prompt, pair_dataset
from openmanus_lite.train.configs import RewardRunConfig, import_trl, renamed_settings
from openmanus_lite.train.presets import REWARD_MODEL
from openmanus_lite.train.run_control import TimeLimit

RM_MARKER = "openmanus_rm.json"
AGGREGATES = {"min": min, "mean": lambda p: sum(p) / len(p), "prod": math.prod, "last": lambda p: p[-1]}


def RMSettings(**old: Any) -> RewardRunConfig:  # noqa: N802  (the old class name)
    """Deprecated: a RewardRunConfig (TRL's RewardConfig) from the old setting names, on the presets' defaults."""
    return RewardRunConfig(**{**REWARD_MODEL, **renamed_settings(old, "RMSettings", "RewardRunConfig")})


# --------------------------------------------------------------------------- loading heads
def _head(kind: str) -> tuple[Any, int]:
    """(model class, number of labels): a 1-logit sequence head for the ORM, a 2-class token head for the PRM."""
    from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification

    return (AutoModelForSequenceClassification, 1) if kind == "orm" else (AutoModelForTokenClassification, 2)


def _load_head(base: str, kind: str, lora: LoraSpec | None, dtype=None):
    """(model, tokenizer, path): the base LM with a fresh `_head(kind)`. With LoRA the frozen base is in `dtype`
    (the trainer's precision: the SFT policy and both heads fit 16 GB at 1.5B) and the trained weights in
    float32, which fp16's gradient scaler needs; without LoRA everything trains in float32."""
    import torch

    path = resolve_checkpoint(base)
    tok = load_tokenizer(path)
    cls, num_labels = _head(kind)
    model = cls.from_pretrained(path, num_labels=num_labels, dtype=(dtype or torch.float32) if lora else torch.float32)
    model.config.pad_token_id = tok.pad_token_id
    if lora is not None:
        from peft import LoraConfig, get_peft_model

        cfg = LoraConfig(**lora.peft_kwargs(), modules_to_save=["score"],
                         task_type="SEQ_CLS" if kind == "orm" else "TOKEN_CLS")
        model = get_peft_model(model, cfg)
        for p in model.parameters():
            if p.requires_grad:
                p.data = p.data.float()
    return model, tok, path


def load_reward_model(path: str | os.PathLike):
    """An `OutcomeRewardModel` or `ProcessRewardModel` saved by `save()`."""
    import torch

    folder = Path(path)
    marker = folder / RM_MARKER
    if not marker.is_file():
        raise FileNotFoundError(f"{folder} is not a saved reward model (no {RM_MARKER}); train one with "
                                "`python -m openmanus_lite dpo train-rm` / `train-prm`")
    meta = json.loads(marker.read_text())
    kind = meta["kind"]
    cls, num_labels = _head(kind)
    kwargs: dict[str, Any] = {"num_labels": num_labels, "dtype": torch.float32}  # on a CPU (16-bit is slow there)
    if torch.cuda.is_available():  # the precision it was trained in, on the GPU
        kwargs.update(dtype=getattr(torch, meta.get("dtype", "float32")), device_map={"": torch.cuda.current_device()})
    if (folder / "adapter_config.json").is_file():
        from peft import PeftModel

        model = PeftModel.from_pretrained(cls.from_pretrained(meta["base"], **kwargs), str(folder))
    else:
        model = cls.from_pretrained(str(folder), **kwargs)
    tok = load_tokenizer(folder if (folder / "tokenizer.json").is_file() else meta["base"])
    model.config.pad_token_id = tok.pad_token_id
    klass = OutcomeRewardModel if kind == "orm" else ProcessRewardModel
    return klass(model, tok, base=meta["base"], **meta.get("options", {}))


# --------------------------------------------------------------------------- scorers
class _RewardModel:
    """Shared scoring plumbing: chat-template rendering, length fitting, batching, caching."""

    kind = ""
    OPTIONS = ("max_length", "batch_size")  # the settings `save` records and `load_reward_model` passes back

    def __init__(self, model, tokenizer, *, base: str = "", max_length: int = 1024, batch_size: int = 8):
        self.model = model
        self.tokenizer = tokenizer
        self.base = base
        self.max_length = max_length
        self.batch_size = batch_size
        self.calls = 0
        self._count = chat_token_counter(tokenizer)
        self._cache: dict[str, Any] = {}
        model.eval()

    def options(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.OPTIONS}

    def fit(self, messages: Messages) -> Messages:
        """Keep the task message and the most recent turns within max_length."""
        messages = [{"role": m["role"], "content": m["content"]} for m in messages]
        if len(messages) < 2:
            return messages
        last = messages[-1:]
        fitted = fit_prompt(messages[:-1], [last], self._count, self.max_length)
        return (fitted if fitted is not None else messages[:1]) + last

    def _encode(self, messages: Messages) -> list[int]:
        ids = self.tokenizer.apply_chat_template(self.fit(messages), tokenize=True, return_dict=True)["input_ids"]
        return list(ids)[-self.max_length:]

    def _forward(self, batch_ids: list[list[int]]):
        """Logits for right-padded sequences (the classification heads read the last non-pad token)."""
        import torch
        from torch.nn.utils.rnn import pad_sequence

        rows = [torch.tensor(x, dtype=torch.long) for x in batch_ids]
        ids = pad_sequence(rows, batch_first=True, padding_value=self.tokenizer.pad_token_id)
        mask = pad_sequence([torch.ones_like(r) for r in rows], batch_first=True)
        device = next(self.model.parameters()).device
        with torch.no_grad():
            out = self.model(input_ids=ids.to(device), attention_mask=mask.to(device))
        self.calls += 1
        return out.logits.float().cpu()

    def _scored(self, conversations: list[Messages], encode, read) -> list[Any]:
        """`read(logits of one row, extra)` per conversation, with `encode(conv) -> (ids, extra)`: cached results
        first, the rest in batches of similar length (shortest first)."""
        out: list[Any] = [None] * len(conversations)
        todo = []
        for i, conv in enumerate(conversations):
            key = json.dumps(conv, ensure_ascii=False)
            if key in self._cache:
                out[i] = self._cache[key]
            else:
                todo.append((i, key, *encode(conv)))
        todo.sort(key=lambda t: len(t[2]))
        for b in range(0, len(todo), self.batch_size):
            chunk = todo[b: b + self.batch_size]
            logits = self._forward([t[2] for t in chunk])
            for row, (i, key, _, extra) in enumerate(chunk):
                out[i] = self._cache[key] = read(logits[row], extra)
        return out

    def save(self, out_dir: str | os.PathLike) -> Path:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(out)
        self.tokenizer.save_pretrained(out)
        _name_tokenizer_class(out)
        dtype = str(next(self.model.parameters()).dtype).removeprefix("torch.")  # the frozen base's precision
        (out / RM_MARKER).write_text(json.dumps({"kind": self.kind, "base": self.base, "dtype": dtype,
                                                 "options": self.options()}))
        return out

    def __call__(self, history: Messages, view: Any = None) -> float:
        return self.score_conversations([history])[0]

    def as_reward_func(self) -> "RewardModelReward":
        """A TRL reward function `(prompts, completions, **columns) -> list[float]` scoring prompt + completion."""
        return RewardModelReward(self)


class RewardModelReward:
    """A reward model as a TRL reward function. Conversational rows (message lists) are joined
    as they are; plain strings become a user prompt and an assistant completion."""

    def __init__(self, rm: "_RewardModel"):
        self.rm = rm
        self.__name__ = rm.kind
        self.reward_range = (0.0, 1.0)

    def __call__(self, prompts=None, completions=None, **columns) -> list[float]:
        if completions is None:
            raise ValueError("a reward-model reward needs `completions`")
        prompts = prompts if prompts is not None else [[] for _ in completions]
        convs = [_as_messages(p, "user") + _as_messages(c, "assistant") for p, c in zip(prompts, completions)]
        return self.rm.score_conversations(convs)


def _as_messages(x: Any, role: str) -> Messages:
    if x is None:
        return []
    if isinstance(x, str):
        return [{"role": role, "content": x}]
    if isinstance(x, dict):
        x = [x]
    return [{"role": m.get("role", role), "content": str(m.get("content") or "")} for m in x]


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


class OutcomeRewardModel(_RewardModel):
    """Scores a whole episode. As a search scorer it values finished episodes only (unfinished: 0),
    which is what best-of-N needs and saves a forward pass per intermediate step."""

    kind = "orm"
    OPTIONS = _RewardModel.OPTIONS + ("score_unfinished",)

    def __init__(self, model, tokenizer, *, score_unfinished: bool = False, **kw):
        super().__init__(model, tokenizer, **kw)
        self.score_unfinished = score_unfinished

    def raw_scores(self, conversations: list[Messages]) -> list[float]:
        """The head's logits (Bradley-Terry scale: differences are log-odds of preference)."""
        return self._scored(conversations, lambda conv: (self._encode(conv), None), lambda logits, _: float(logits[0]))

    def score_conversations(self, conversations: list[Messages]) -> list[float]:
        """Scores in (0, 1): the sigmoid of the logits."""
        return [_sigmoid(v) for v in self.raw_scores(conversations)]

    def __call__(self, history: Messages, view: Any = None) -> float:
        if view is not None and not getattr(view, "done", True) and not self.score_unfinished:
            return 0.0
        return super().__call__(history, view)


class ProcessRewardModel(_RewardModel):
    """Scores every step of a history; the search value aggregates them (`aggregate`)."""

    kind = "prm"
    OPTIONS = _RewardModel.OPTIONS + ("aggregate",)

    def __init__(self, model, tokenizer, *, aggregate: str = "min", **kw):
        if aggregate not in AGGREGATES:
            raise ValueError(f"aggregate must be one of {tuple(AGGREGATES)}, got {aggregate!r}")
        super().__init__(model, tokenizer, **kw)
        self.aggregate = aggregate

    def step_probabilities(self, conversations: list[Messages]) -> list[list[float]]:
        """P(label 1) after each assistant turn of each conversation (of the fitted history)."""
        import torch

        def encode(conv: Messages) -> tuple[list[int], list[list[int]]]:
            return step_positions(self.tokenizer, self.fit(conv), self.max_length)

        def read(logits, positions: list[list[int]]) -> list[float]:
            probs = torch.softmax(logits, dim=-1)[..., 1]
            # the value after a turn: read at the end of the observation after it when there is one
            return [float(probs[p[-1]]) for p in positions]

        return [list(v) for v in self._scored(conversations, encode, read)]

    def value(self, step_probs: list[float]) -> float:
        return AGGREGATES[self.aggregate](step_probs) if step_probs else 0.5

    def score_conversations(self, conversations: list[Messages]) -> list[float]:
        return [self.value(p) for p in self.step_probabilities(conversations)]


# --------------------------------------------------------------------------- PRM tokenization
def step_positions(tokenizer, messages: Messages, max_length: int | None = None
                   ) -> tuple[list[int], list[list[int]]]:
    """(input ids, per assistant turn the token positions that carry its label): the last token of the turn's
    `<|im_end|>` and, when an observation follows, of that observation's `<|im_end|>`. Found from character offsets
    of the chat-template rendering of each message prefix; turns cut off by `max_length` are absent."""
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = list(enc["input_ids"]), list(enc["offset_mapping"])
    ends = []  # char index of the last non-space character of each message's rendering
    for k in range(1, len(messages) + 1):
        prefix = tokenizer.apply_chat_template(messages[:k], tokenize=False)
        if not text.startswith(prefix.rstrip()):
            raise ValueError("the chat template does not render message prefixes as prefixes of the whole "
                             "conversation; the PRM needs a template that does (e.g. Qwen2.5's)")
        ends.append(len(prefix.rstrip()) - 1)
    starts = [s for s, _ in offsets]

    def token_at(ch: int) -> int | None:
        i = bisect.bisect_right(starts, ch) - 1
        return i if i >= 0 and offsets[i][0] <= ch < max(offsets[i][1], offsets[i][0] + 1) else None

    limit = len(ids) if max_length is None else min(len(ids), max_length)
    positions: list[list[int]] = []
    for k, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        pos = [token_at(ends[k])]
        if k + 1 < len(messages) and messages[k + 1]["role"] == "user":
            pos.append(token_at(ends[k + 1]))
        if not (pos := [p for p in pos if p is not None and p < limit]):
            break
        positions.append(pos)
    return ids[:limit], positions


def prm_features(rows: Iterable[dict[str, Any]], tokenizer, max_length: int) -> tuple[list[dict[str, Any]], Counter]:
    """Token-classification features: input_ids, attention_mask, labels (-100 except at step positions)."""
    feats, counts = [], Counter()
    for r in rows:
        messages = [{"role": m["role"], "content": m["content"]} for m in r["messages"]]
        ids, positions = step_positions(tokenizer, messages, max_length)
        step_labels = r["step_labels"]
        labels = [-100] * len(ids)
        for lab, pos in zip(step_labels, positions):
            for p in pos:
                labels[p] = int(lab)
        counts["steps_labelled"] += min(len(step_labels), len(positions))
        counts["steps_cut_by_max_length"] += max(0, len(step_labels) - len(positions))
        if not positions:
            counts["rows_dropped_too_long"] += 1
            continue
        counts["rows"] += 1
        counts["positive_steps"] += sum(step_labels[: len(positions)])
        feats.append({"input_ids": ids, "attention_mask": [1] * len(ids), "labels": labels})
    return feats, counts


# --------------------------------------------------------------------------- training
def trainer_setup(base: str | os.PathLike, settings: RewardRunConfig | None, output_dir: str | os.PathLike | None,
                  kind: str) -> tuple[RewardRunConfig, int, Any, Any, str]:
    """(the trainer's copy of `settings`, max_length, then `_load_head`'s model, tokenizer and path). Default
    settings: the presets' reward-model ones. The kit fits the data to `max_length` itself, so the trainer's
    own truncation is off; the PRM's collator needs its label columns, so unused columns stay."""
    cfg = run_config(settings, RewardRunConfig, REWARD_MODEL, output_dir, kind)
    max_length = cfg.max_length
    cfg.max_length, cfg.remove_unused_columns = None, kind == "orm"
    lora = LoraSpec(r=cfg.lora_r, alpha=cfg.lora_alpha) if cfg.lora_r else None
    return (cfg, max_length, *_load_head(str(base), kind, lora, dtype=config_dtype(cfg)))


def train_orm(base: str | os.PathLike, rows: list[dict[str, Any]], settings: RewardRunConfig | None = None, *,
              output_dir: str | os.PathLike | None = None) -> tuple[OutcomeRewardModel, TrainReport]:
    """Train an outcome reward model with TRL's RewardTrainer on trajectory-pair rows."""
    trl = import_trl()
    t0 = time.perf_counter()
    cfg, max_length, model, tok, path = trainer_setup(base, settings, output_dir, "orm")
    ds, counts = pair_dataset(rows, tok, max_length)
    stop = TimeLimit.from_config(cfg)
    model, report = train_and_release(trl.RewardTrainer(model=model, args=cfg, train_dataset=ds, processing_class=tok,
                                                        callbacks=[stop]), stop, counts, t0)
    return OutcomeRewardModel(model, tok, base=path, max_length=max_length), report


def train_prm(base: str | os.PathLike, rows: list[dict[str, Any]], settings: RewardRunConfig | None = None, *,
              aggregate: str = "min", output_dir: str | os.PathLike | None = None
              ) -> tuple[ProcessRewardModel, TrainReport]:
    """Train a process reward model (token-classification head) with transformers' Trainer on `prm_rows`."""
    import datasets
    from transformers import DataCollatorForTokenClassification, Trainer

    t0 = time.perf_counter()
    args, max_length, model, tok, path = trainer_setup(base, settings, output_dir, "prm")  # TrainingArguments too
    feats, counts = prm_features(rows, tok, max_length)
    if not feats:
        raise ValueError(f"no PRM row fits max_length={max_length} ({dict(counts)}); raise max_length")
    stop = TimeLimit.from_config(args)
    model, report = train_and_release(Trainer(model=model, args=args, train_dataset=datasets.Dataset.from_list(feats),
                                              data_collator=DataCollatorForTokenClassification(tok), callbacks=[stop]),
                                      stop, counts, t0)
    return ProcessRewardModel(model, tok, base=path, max_length=max_length, aggregate=aggregate), report


# --------------------------------------------------------------------------- evaluation
def pair_accuracy(rm: _RewardModel, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Held-out pairs: how often the RM scores prompt+chosen above prompt+rejected (ties count half)."""
    if not rows:
        return {"n": 0, "accuracy": None}
    convs = [r["prompt"] + r[side] for r in rows for side in ("chosen", "rejected")]
    scores = rm.raw_scores(convs) if isinstance(rm, OutcomeRewardModel) else rm.score_conversations(convs)
    wins = [_win(a, b) for a, b in zip(scores[0::2], scores[1::2])]
    by_reason: dict[str, list[float]] = {}
    for r, w in zip(rows, wins):
        by_reason.setdefault(str(r.get("reason", "all")), []).append(w)
    return {"n": len(rows), "accuracy": sum(wins) / len(wins),
            "by_reason": {k: round(sum(v) / len(v), 4) for k, v in by_reason.items()}}


def step_accuracy(prm: ProcessRewardModel, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Held-out step labels: accuracy, balanced accuracy and ROC AUC of P(label 1) at each step."""
    probs = prm.step_probabilities([r["messages"] for r in rows])
    steps = [(int(y), q) for r, p in zip(rows, probs) for y, q in zip(r["step_labels"], p)]
    if not steps:
        return {"n": 0}
    pos, neg = [q for y, q in steps if y == 1], [q for y, q in steps if y == 0]
    hit_pos, hit_neg = sum(q >= 0.5 for q in pos), sum(q < 0.5 for q in neg)
    both = bool(pos and neg)
    return {
        "n": len(steps), "positive_rate": len(pos) / len(steps), "accuracy": (hit_pos + hit_neg) / len(steps),
        "balanced_accuracy": (hit_pos / len(pos) + hit_neg / len(neg)) / 2 if both else None,
        "auc": sum(_win(a, b) for a in pos for b in neg) / (len(pos) * len(neg)) if both else None,
    }


def _win(a: float, b: float) -> float:
    """1 when a ranks above b, a half for a tie: the pairwise accuracy both evaluations report."""
    return 1.0 if a > b else 0.5 if a == b else 0.0

"""Frozen benchmark suites: task files generated once, guarded by checksums, never regenerated.

Layout under the top-level `data/benchmark/` (`paths.DATA_DIR`; the wheel carries it as package data):

    MANIFEST.json                 every file's sha256, task count, domain, difficulty, seed
    dev/<domain>_<difficulty>.jsonl
    test/<domain>_<difficulty>.jsonl
    agentbench_db/dev.jsonl       AgentBench dbbench dev tasks, imported by the DB environment
    agentbench_os/dev.jsonl       AgentBench OS dev tasks the virtual shell hosts (envs/agentbench_os.py)

Each line is a `Task.to_dict()`. Numbers compare across checkpoints only on the same tasks, so loading checks the
hashes and never calls a generator. `freeze_suites` writes them once, keeping tasks the expert solves; an installed
package needs an explicit output folder, which `load_suite(root=...)` then reads."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from openmanus_lite.envs import DIFFICULTIES, generate_tasks, list_domains, make_env, run_expert
from openmanus_lite.envs.agentbench_os import SUITE_NAME as AGENTBENCH_OS_SUITE
from openmanus_lite.envs.agentbench_os import import_tasks as import_agentbench_os
from openmanus_lite.envs.sql_db import load_agentbench_db
from openmanus_lite.errors import UserError
from openmanus_lite.paths import DATA_DIR, IN_CHECKOUT, REAL_SAMPLES_DIR
from openmanus_lite.schema import Task

SUITE_DIR = DATA_DIR / "benchmark"
MANIFEST_NAME = "MANIFEST.json"
TASKS_PER_CELL = 20  # per (split, domain, difficulty): 60 per domain and split
AGENTBENCH_DB_SUITE = "agentbench_db"
# tokens per turn beyond the evaluation default (96): AgentBench DB's INSERTs name up to nine columns and values, and
# a turn cut before its ```sql block closes is rejected (7 of 60 dev episodes of `cpu_60min_agentbench`)
TURN_TOKENS = {AGENTBENCH_DB_SUITE: 256}
# the seeds the frozen suites were made from, distinct from every seed of `splits.SPLITS`
SUITE_SEEDS = {"dev": 91001, "test": 92002}


class SuiteError(UserError):
    """A frozen suite is missing, unknown, or does not match its manifest."""


@dataclass
class Suite:
    """A named, ordered list of tasks (ordered by file, then line)."""

    name: str
    tasks: list[Task]
    files: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.tasks)

    def __iter__(self):
        return iter(self.tasks)

    @property
    def domains(self) -> list[str]:
        return list(dict.fromkeys(t.domain for t in self.tasks))

    @property
    def difficulties(self) -> list[str]:
        return list(dict.fromkeys(t.difficulty for t in self.tasks))

    def groups(self) -> dict[tuple[str, str], list[Task]]:
        """Tasks per (domain, difficulty), in suite order."""
        out: dict[tuple[str, str], list[Task]] = {}
        for t in self.tasks:
            out.setdefault((t.domain, t.difficulty), []).append(t)
        return out

    def subset(self, domains: Iterable[str] | None = None, difficulties: Iterable[str] | None = None,
               limit: int | None = None) -> "Suite":
        """The tasks of the given domains/difficulties, at most `limit` (the first ones) per cell."""
        domains = _check_subset("domain", domains, self.domains, self.name)
        difficulties = _check_subset("difficulty", difficulties, self.difficulties, self.name)
        kept, per_cell = [], Counter()
        for t in self.tasks:
            if (domains and t.domain not in domains) or (difficulties and t.difficulty not in difficulties):
                continue
            per_cell[t.domain, t.difficulty] += 1
            if limit is None or per_cell[t.domain, t.difficulty] <= limit:
                kept.append(t)
        return Suite(self.name, kept, list(self.files))


def _check_subset(what: str, wanted: Iterable[str] | None, have: list[str], suite: str) -> list[str] | None:
    if wanted is None:
        return None
    wanted = [w for w in wanted if w]
    if unknown := [w for w in wanted if w not in have]:
        raise SuiteError(f"suite {suite!r} has no {what} {unknown}; it has {have}")
    return wanted or None


def _restore(path: Path) -> str:
    """How to get a suite file back: the shipped ones of an installed package by reinstalling, else from git."""
    if not IN_CHECKOUT and Path(path).resolve().is_relative_to(SUITE_DIR):
        return "restore it by reinstalling openmanus_lite (pip install --force-reinstall, the way you installed it)"
    return f"restore it with `git checkout -- {path}`"


def read_manifest(root: Path | None = None) -> dict:
    root = Path(root or SUITE_DIR)
    path = root / MANIFEST_NAME
    if not path.is_file():
        raise SuiteError(f"no frozen benchmark suites at {root} ({MANIFEST_NAME} is missing). The kit's suites ship "
                         f"inside the package ({SUITE_DIR}): {_restore(SUITE_DIR)}; or freeze new ones with "
                         f"`python -m openmanus_lite eval freeze --output_dir {root}`.")
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise SuiteError(f"{path} is not valid JSON ({e}); {_restore(path)}") from e
    if not isinstance(manifest, dict) or "files" not in manifest or "suites" not in manifest:
        raise SuiteError(f"{path} lacks the 'files' and 'suites' keys; {_restore(path)}")
    return manifest


def list_suites(root: Path | None = None) -> list[str]:
    return list(read_manifest(root)["suites"])


def load_suite(name: str = "dev", *, domains: Iterable[str] | None = None, difficulties: Iterable[str] | None = None,
               limit: int | None = None, root: Path | None = None) -> Suite:
    """Load a frozen suite (checking every file's sha256), optionally a subset (`limit`: the first tasks per cell)."""
    root = Path(root or SUITE_DIR)
    manifest = read_manifest(root)
    if name not in manifest["suites"]:
        raise SuiteError(f"unknown suite {name!r}; frozen suites: {sorted(manifest['suites'])}")
    files = manifest["suites"][name]
    domains = _check_subset("domain", domains, sorted({manifest["files"][f]["domain"] for f in files}), name)
    if domains:
        files = [f for f in files if manifest["files"][f]["domain"] in domains]
    tasks = [t for rel in files for t in _read_checked(root, rel, manifest["files"][rel])]
    suite = Suite(name, tasks, list(files))
    return suite.subset(difficulties=difficulties, limit=limit) if (difficulties or limit is not None) else suite


def _read_checked(root: Path, rel: str, entry: dict) -> list[Task]:
    path = root / rel
    if not path.is_file():
        raise SuiteError(f"frozen suite file {path} is missing; {_restore(path)}")
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != entry["sha256"]:
        raise SuiteError(f"frozen suite file {path} was modified: sha256 {digest[:12]}... does not match the "
                         f"manifest ({entry['sha256'][:12]}...). Benchmark numbers are only comparable on "
                         f"unchanged tasks: {_restore(path)}; to make a new suite on "
                         f"purpose, freeze it under a new directory with `python -m openmanus_lite eval freeze`.")
    tasks = []
    for i, line in enumerate(data.decode("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            tasks.append(Task.from_dict(json.loads(line)))
        except (json.JSONDecodeError, ValueError) as e:
            raise SuiteError(f"{path}:{i}: not a task record ({e})") from e
    if len(tasks) != entry["tasks"]:
        raise SuiteError(f"{path} holds {len(tasks)} tasks, the manifest says {entry['tasks']}")
    return tasks


def verify_suites(root: Path | None = None) -> list[str]:
    """Every problem with the frozen files (empty list when all checksums and counts hold)."""
    root = Path(root or SUITE_DIR)
    manifest = read_manifest(root)
    problems = []
    for rel, entry in manifest["files"].items():
        try:
            _read_checked(root, rel, entry)
        except SuiteError as e:
            problems.append(str(e))
    return problems


def _content_key(task: Task) -> str:
    return json.dumps([task.instruction, task.spec, task.answer], sort_keys=True, ensure_ascii=False)


def _expert_solves(task: Task) -> bool:
    _, last = run_expert(make_env(task.domain), task)
    return bool(last is not None and last.info.get("success"))


def _write_jsonl(out: Path, rel: str, tasks: list[Task], **entry) -> dict:
    """Write `tasks` to out/rel; their manifest entry: sha256, task count, then `entry`."""
    (out / rel).parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(t.to_dict(), sort_keys=True, ensure_ascii=False, separators=(",", ":")) + "\n"
                   for t in tasks)
    (out / rel).write_text(text, encoding="utf-8")
    return {"sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(), "tasks": len(tasks), **entry}


def freeze_suites(out: Path | None = None, *, domains: Iterable[str] | None = None, per_cell: int = TASKS_PER_CELL,
                  seeds: dict[str, int] | None = None, agentbench_path: Path | bool | None = None,
                  force: bool = False) -> dict:
    """Generate and write the frozen suites once; returns the manifest. `agentbench_path`: the dbbench JSONL to
    import (False skips the AgentBench suites). Duplicates of earlier tasks and tasks the expert cannot solve (they
    measure the generator, not the agent) are replaced by further generated tasks."""
    if out is None and not IN_CHECKOUT:
        raise SuiteError(f"openmanus_lite is installed as a package ({SUITE_DIR}): freeze new suites into a folder "
                         f"of your own with out=DIR (`eval freeze --out DIR`) and load them with root=DIR")
    out = Path(out or SUITE_DIR)
    if (out / MANIFEST_NAME).exists() and not force:
        raise SuiteError(f"{out / MANIFEST_NAME} exists: frozen suites are not regenerated. Pass force=True "
                         f"(--force) only when you mean to replace them, and say so in the changelog.")
    seeds = dict(seeds or SUITE_SEEDS)
    domains = list(domains or list_domains())
    manifest: dict = {"version": 1, "per_cell": per_cell, "seeds": seeds, "files": {}, "suites": {}, "skipped": {}}
    seen: set[str] = set()
    for split, seed in seeds.items():
        manifest["suites"][split] = []
        for domain in domains:
            for difficulty in DIFFICULTIES:
                for pool_size in (per_cell * 2**k for k in range(4)):  # pools of 1, 2, 4 and 8 x per_cell
                    kept, skipped, keys = [], {"duplicate": 0, "expert_fails": 0}, set(seen)
                    for task in generate_tasks(domain, pool_size, seed=seed, difficulty=difficulty):
                        if (key := _content_key(task)) in keys:
                            skipped["duplicate"] += 1
                            continue
                        keys.add(key)
                        if not _expert_solves(task):
                            skipped["expert_fails"] += 1
                            continue
                        kept.append(task)
                        if len(kept) == per_cell:
                            break
                    if len(kept) == per_cell:
                        break
                else:
                    raise SuiteError(f"could not find {per_cell} distinct expert-solved {domain}/{difficulty} "
                                     f"tasks for {split} in {pool_size} generated (skipped: {skipped})")
                seen |= {_content_key(t) for t in kept}
                frozen = [Task.from_dict({**t.to_dict(), "id": f"{split}/{domain}/{difficulty}/{i:03d}",
                                          "meta": dict(t.meta, generated_id=t.id, split=split, seed=seed)})
                          for i, t in enumerate(kept)]
                rel = f"{split}/{domain}_{difficulty}.jsonl"
                manifest["files"][rel] = _write_jsonl(out, rel, frozen, domain=domain, difficulty=difficulty,
                                                      split=split, seed=seed, source="generate_tasks")
                manifest["suites"][split].append(rel)
                if any(skipped.values()):
                    manifest["skipped"][rel] = skipped
    if agentbench_path is not False:
        src = Path(agentbench_path) if agentbench_path else REAL_SAMPLES_DIR / "agentbench_db" / "dev.jsonl"
        if not src.is_file():
            raise SuiteError(f"AgentBench dbbench tasks not found at {src}: pass agentbench_path=PATH (--agentbench), "
                             f"or agentbench_path=False to freeze without the {AGENTBENCH_DB_SUITE!r} suite")
        imported = load_agentbench_db(src)
        ids = [t.id for t in imported]
        if len(set(ids)) != len(ids):
            raise SuiteError(f"{src}: the importer produced duplicate task ids; cannot freeze them as a suite")
        rel = f"{AGENTBENCH_DB_SUITE}/dev.jsonl"
        diffs = sorted({t.difficulty for t in imported})
        manifest["files"][rel] = _write_jsonl(out, rel, imported, domain="db", split="dev", seed=None,
                                              difficulty=diffs[0] if len(diffs) == 1 else "mixed",
                                              source=f"load_agentbench_db({src.name})",
                                              expert_solved=sum(_expert_solves(t) for t in imported))
        manifest["suites"][AGENTBENCH_DB_SUITE] = [rel]
        hosted, rejected = import_agentbench_os()  # shipped with the package: data/benchmark/agentbench_os/source
        rel = f"{AGENTBENCH_OS_SUITE}/dev.jsonl"
        manifest["files"][rel] = _write_jsonl(out, rel, hosted, domain="os", difficulty="real", split="dev", seed=None,
                                              source="agentbench_os.import_tasks(dev.json)",
                                              expert_solved=sum(_expert_solves(t) for t in hosted),
                                              rejected=[{"index": r["index"], "reason": r["reason"]} for r in rejected])
        manifest["suites"][AGENTBENCH_OS_SUITE] = [rel]
    (out / MANIFEST_NAME).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return manifest

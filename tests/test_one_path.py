"""One episode loop, one turn-limit resolver, one evaluation (issue #28, item 2), one of each helper and every
command's `main` in cli/ (issue #39).

The removed evaluators and moved helpers stay gone from their old homes, nothing that users run (notebooks, the
demo, the CLIs, the benchmarks) calls them, the modules that step environments are the known ones, and the
import graph keeps the direction that broke the old cycles.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "openmanus_lite"

REMOVED_MODULES = [
    "openmanus_lite.train.measure",  # recovery data: train.recovery; the per-domain view: BenchmarkResult.by_domain
    "openmanus_lite.eval.cli",  # cli.eval
]

REMOVED = [
    ("openmanus_lite.train.recovery", "evaluate"),  # measure's old evaluator did not come along
    ("openmanus_lite.train.recovery", "summary_table"),  # the one results table: eval.comparison_table
    ("openmanus_lite.eval.benchmark", "resolve_policy"),  # make_policy
    ("openmanus_lite.cli.eval", "make_policy"),  # eval.make_policy, for notebooks and benchmarks
    ("openmanus_lite.cli.eval", "find_checkpoint"),  # models.find_checkpoint
    ("openmanus_lite.cli.eval", "resolve_model_spec"),  # models.resolve_model_name takes 'latest:<tag>'
    ("openmanus_lite.models", "main"),  # cli.prepare_model
    ("openmanus_lite.verl_export", "main"),  # cli.export
    ("openmanus_lite.demo", "main"),  # cli.demo
    ("openmanus_lite.demo", "peak_rss_gb"),  # peak_memory
    ("openmanus_lite.demo", "release_memory"),  # peak_memory
    ("openmanus_lite.train.grpo", "env_success"),
    ("openmanus_lite.envs", "policy_success_rates"),
    ("openmanus_lite.envs.base", "policy_success_rates"),
    ("openmanus_lite.search", "search_suite"),
    ("openmanus_lite.rollout", "_make_env"),
    ("openmanus_lite.train.env_rollout", "turn_limit"),
    ("openmanus_lite.eval.benchmark", "share"),
]

CALLS = {  # what a user-facing file must not call any more
    "policy_success_rates": re.compile(r"\bpolicy_success_rates\b"),
    "grpo.env_success": re.compile(r"\benv_success\s*\(\s*model|grpo\.env_success\b"),
    "measure.evaluate": re.compile(r"measure import[^\n]*\bevaluate\b|measure\.evaluate\b"),
    "summarize_episodes": re.compile(r"\bsummarize_episodes\b"),
    "search_suite": re.compile(r"\bsearch_suite\b"),
    "train.measure": re.compile(r"train\.measure\b|train import measure\b"),
    "cli.eval helpers": re.compile(r"cli\.eval import[^\n]*\b(make_policy|find_checkpoint)\b"),
    "summary_table": re.compile(r"\bsummary_table\b"),
}


def _user_facing() -> dict[str, str]:
    """Source text of every notebook's code cells, the demo, the CLIs and the benchmarks."""
    out = {}
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
        out[nb.name] = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    files = [PKG / "demo.py", *(PKG / "cli").glob("*.py"), *(ROOT / "benchmarks").glob("*.py")]
    for f in files:
        out[str(f.relative_to(ROOT))] = f.read_text(encoding="utf-8")
    return out



def test_every_name_a_user_facing_file_imports_from_the_kit_exists():
    """A function-level import of a renamed helper fails only when its line runs (benchmarks/memory.py's eval stage
    imported demo._turn_limits for a month after it was inlined): check every such import statically."""
    missing = []
    for where, source in _user_facing().items():
        code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
        for node in ast.walk(ast.parse(code)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("openmanus_lite"):
                module = importlib.import_module(node.module)
                missing += [f"{where}: {node.module}.{a.name}" for a in node.names
                            if not hasattr(module, a.name) and importlib.util.find_spec(f"{node.module}.{a.name}") is None]
    assert not missing, missing

@pytest.mark.parametrize("module,name", REMOVED)
def test_removed_names_are_gone(module, name):
    """Gone, or only imported there from its one home (cli.eval uses eval.make_policy)."""
    found = getattr(importlib.import_module(module), name, None)
    assert found is None or getattr(found, "__module__", module) != module, f"{module}.{name} should be gone"


@pytest.mark.parametrize("module", REMOVED_MODULES)
def test_removed_modules_are_gone(module):
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(module)


def test_moved_names_live_in_their_new_homes():
    from openmanus_lite import eval as ev
    from openmanus_lite import models
    from openmanus_lite.cli import COMMANDS
    from openmanus_lite.train import recovery

    assert callable(ev.make_policy) and callable(models.find_checkpoint) and callable(ev.BenchmarkResult.by_domain)
    assert callable(recovery.recovery_trajectories) and recovery.RECOVERY_NOTE
    # every command's main is in cli/, and only there
    assert all(module.startswith("openmanus_lite.cli.") for module, _ in COMMANDS.values())
    mains = [str(f.relative_to(ROOT)) for f in PKG.rglob("*.py") if "cli" not in f.relative_to(PKG).parts
             and re.search(r"^def main\(", f.read_text(encoding="utf-8"), re.M)]
    assert not mains


def test_library_modules_do_not_import_the_cli():
    """The arrow points from cli/ to the library: a library module importing cli/ hides a command inside it."""
    bad = {str(f.relative_to(ROOT)): _imports_any(f, ("openmanus_lite.cli",)) for f in PKG.rglob("*.py")
           if "cli" not in f.relative_to(PKG).parts and f.name != "__main__.py"}
    assert not {k: v for k, v in bad.items() if v}


def test_one_peak_memory_helper():
    """Peak memory is measured by peak_memory alone: no other library module or benchmark of this area reads
    the high-water mark itself."""
    readers = re.compile(r"ru_maxrss|VmHWM|max_memory_allocated|malloc_trim")
    files = [*PKG.rglob("*.py"), *(ROOT / "benchmarks" / name for name in (
        "rollout_memory.py", "generation_throughput.py", "gpu_smoke.py", "grpo_learning.py"))]
    hits = [str(f.relative_to(ROOT)) for f in files if f.name != "peak_memory.py"
            and readers.search(f.read_text(encoding="utf-8"))]
    assert not hits


def test_no_user_facing_file_calls_a_removed_evaluator():
    sources = _user_facing()
    assert len(sources) > 20 and any(k.endswith(".ipynb") for k in sources)
    hits = [(path, what) for path, text in sources.items() for what, pat in CALLS.items() if pat.search(text)]
    assert not hits


@pytest.mark.parametrize("path", [
    "notebooks/03_environments.ipynb", "notebooks/04_sft_qlora.ipynb", "notebooks/06_grpo.ipynb",
    "notebooks/07_benchmark_eval.ipynb", "notebooks/09_preferences_dpo.ipynb", "openmanus_lite/demo.py",
    "openmanus_lite/cli/eval.py", "benchmarks/sft_learning.py", "benchmarks/grpo_learning.py",
])
def test_evaluating_files_go_through_run_benchmark(path):
    key = Path(path).name if path.endswith(".ipynb") else path
    assert "run_benchmark(" in _user_facing()[key]


def _imports(path: Path) -> set[str]:
    """Absolute names of the openmanus_lite modules a file imports (relative imports resolved)."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            out |= {mod} | {f"{mod}.{a.name}" for a in node.names}
    return {m for m in out if m.startswith("openmanus_lite")}


def _imports_any(path: Path, prefixes: tuple[str, ...]) -> list[str]:
    return sorted(m for m in _imports(path) if any(m == p or m.startswith(p + ".") for p in prefixes))


def test_envs_import_nothing_above_them():
    above = ("openmanus_lite.policies", "openmanus_lite.rollout", "openmanus_lite.eval", "openmanus_lite.search",
             "openmanus_lite.train")
    bad = {str(f.relative_to(ROOT)): _imports_any(f, above) for f in (PKG / "envs").rglob("*.py")}
    assert not {k: v for k, v in bad.items() if v}


def test_suites_do_not_import_splits():
    """splits knows every held-out task, the frozen suites' too; the suites know nothing of splits (the old cycle)."""
    assert not _imports_any(PKG / "eval" / "suites.py", ("openmanus_lite.splits",))
    assert "openmanus_lite.eval.suites" in _imports(PKG / "splits.py")


def test_search_does_not_import_eval():
    assert not _imports_any(PKG / "search.py", ("openmanus_lite.eval",))
    assert "openmanus_lite.search" in _imports(PKG / "eval" / "scaling.py")  # the one direction


@pytest.mark.parametrize("order", [
    ["openmanus_lite.envs.base", "openmanus_lite.policies", "openmanus_lite.rollout"],
    ["openmanus_lite.search", "openmanus_lite.eval.scaling"],
    ["openmanus_lite.eval.scaling", "openmanus_lite.search"],
    ["openmanus_lite.policies", "openmanus_lite.envs"],
    ["openmanus_lite.eval.suites", "openmanus_lite.splits"],
    ["openmanus_lite.splits", "openmanus_lite.eval"],
    ["openmanus_lite.train.recovery", "openmanus_lite.mistakes"],
])
def test_modules_import_in_a_fresh_interpreter_in_any_order(order):
    code = "import importlib\n" + "".join(f"importlib.import_module({m!r})\n" for m in order)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


EPISODE_LOOPS = {
    "openmanus_lite/rollout.py",            # THE loop: run_episodes
    "openmanus_lite/envs/base.py",          # run_expert: the data-synthesis loop, and Env itself
    "openmanus_lite/envs/os_shell.py",      # Env.step overrides
    "openmanus_lite/envs/web.py",
    "openmanus_lite/search.py",             # cloned simulators, and replay of a chosen action list
    "openmanus_lite/mistakes.py",           # expert episodes with injected mistakes
    "openmanus_lite/train/tool_env.py",     # TRL's environment_factory drives it
    "openmanus_lite/train/expert_guidance.py",  # replays the expert's first k turns inside a rollout's first turn
}


def test_environments_are_stepped_only_where_a_loop_is_meant_to_be():
    """A new module that calls env.step() is a second episode loop: route it through
    rollout.run_episodes (or add it here with the reason it cannot)."""
    stepping = set()
    for f in PKG.rglob("*.py"):
        if f.name.startswith("vshell"):  # the virtual shell's own interpreter steps, not environments
            continue
        text = f.read_text(encoding="utf-8")
        if re.search(r"\b(env|self\._env|sim|envs\[i\]|super\(\))\.step\(", text):
            stepping.add(str(f.relative_to(ROOT)))
    assert stepping == EPISODE_LOOPS


def test_one_turn_limit_resolver():
    from openmanus_lite.envs import make_env, turn_limit

    assert turn_limit(None, "os") is None and turn_limit(4, "os") == 4
    assert turn_limit({"os": 3}, "os") == 3 and turn_limit({"os": 3}, "db") is None
    assert make_env("os", max_turns={"os": 3}).max_turns == 3
    np = pytest.importorskip("numpy")
    assert turn_limit(np.int64(5), "os") == 5 and type(turn_limit(np.int64(5), "os")) is int
    assert make_env("db", max_turns={"os": 3}).max_turns == make_env("db").max_turns
    for bad in (0, -2, 2.5, "5", True):
        with pytest.raises(ValueError, match="max_turns"):
            turn_limit(bad, "os")
    with pytest.raises(ValueError, match=r"max_turns\['os'\]"):
        make_env("os", max_turns={"os": 0})
    # every module that builds environments resolves limits through it, never by hand
    by_hand = [str(f.relative_to(ROOT)) for f in PKG.rglob("*.py")
               if re.search(r"max_turns\.get\(|\*\*\(\{\"max_turns\"", f.read_text(encoding="utf-8"))
               and f.name != "base.py"]
    assert not by_hand

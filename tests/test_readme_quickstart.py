"""The README's Python quickstart runs as written, on the tiny test model with the smallest budgets.

The block is read from README.md; only the budget is changed (each substitution must match, so an edit of
the README that this test no longer follows fails here rather than going untested).
"""

import ast
import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"

# README text -> what the test runs instead: the tiny model (cpu_debug), a few tasks, one or two steps
TINY = {
    'get_recipe("cpu_30min")': 'get_recipe("cpu_30min").on_preset("cpu_debug").replace(tasks_per_domain=2, '
                               'recovery=0, max_minutes=0.2, max_steps=2)',
    'training_tasks("grpo_train", ["db"], 32)': 'training_tasks("grpo_train", ["db"], 4)',
    'rewards="env_outcome solved_fast:0.5")': 'rewards="env_outcome solved_fast:0.5", max_steps=1)',
    '"dev")': '"dev", domains=["db"], limit=1)',
}


def quickstart_block() -> str:
    text = README.read_text()
    section = text.split("## Quickstart in Python", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    assert len(blocks) == 1, "the quickstart section holds one python block"
    return blocks[0]


def test_quickstart_block_is_about_ten_lines_of_public_api():
    code = quickstart_block()
    imports = [node for node in ast.parse(code).body if isinstance(node, ast.Import | ast.ImportFrom)]
    assert [(node.module, node.level) for node in imports] == [("openmanus_lite", 0)]  # one namespace
    import_lines = set(range(imports[0].lineno, imports[0].end_lineno + 1))
    body = [line for n, line in enumerate(code.splitlines(), 1) if line.strip() and n not in import_lines]
    assert len(body) <= 18, len(body)  # short: a newcomer reads it at a glance
    for old in TINY:
        assert code.count(old) == 1, f"README quickstart no longer contains {old!r}; update TINY"


def test_quickstart_runs_on_the_tiny_model(tmp_path, monkeypatch):
    from openmanus_lite.rewards import registry

    code = quickstart_block()
    for old, new in TINY.items():
        code = code.replace(old, new)
    monkeypatch.chdir(tmp_path)  # sft_config / GRPO write under runs/
    out = io.StringIO()
    scope: dict = {"__name__": "readme_quickstart"}
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, str(README), "exec"), scope)
    finally:
        registry._REGISTRY.pop("solved_fast", None)
    printed = out.getvalue()
    assert "Task: " in printed and "StepResult(" in printed
    assert scope["solved_fast"](None, [[], []], env_success=[True, False], num_turns=[2, 1]) == [0.5, 0.0]
    assert scope["sft"].global_step == 2
    assert (tmp_path / "runs").is_dir()
    assert len(scope["result"].records) == 3  # db: one task per difficulty


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation other than - and _ dropped, spaces to -."""
    out = set()
    for title in re.findall(r"^#{1,6} (.+)$", markdown, re.MULTILINE):
        out.add(re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-"))
    return out


def test_links_between_the_readme_and_docs_resolve():
    root = README.parent
    pages = [README, *sorted((root / "docs").glob("*.md"))]
    assert {p.name for p in pages} >= {"README.md", "RESULTS.md", "EXTENDING.md"}
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if target.startswith(("http://", "https://")):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            assert dest.exists(), f"{page.name}: link to {target} has no file"
            assert dest.is_relative_to(root), f"{page.name}: {target} leaves the repository"
            if anchor:
                assert anchor in _anchors(dest.read_text()), f"{page.name}: no heading for #{anchor} in {dest.name}"

"""benchmarks/library_size.py: issue #39's line counts by kind, at a git revision."""

import shutil

import pytest

from benchmarks.library_size import STUDENT_PATH, library_size, line_kinds

SOURCE = '''"""Module doc,
on two lines."""

# a comment
X = 1
"""X's doc."""


def f():
    """f's doc."""
    return X  # not a comment line
'''


def test_line_kinds_by_hand():
    assert line_kinds(SOURCE) == {"code": 3, "docstrings": 4, "comments": 1, "blank": 3, "all": 11}


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_library_at_head_adds_up_and_the_students_path_is_part_of_it():
    try:
        whole, student = library_size("HEAD"), library_size("HEAD", STUDENT_PATH)
    except Exception as e:  # an exported tree without its .git
        pytest.skip(f"no git history here: {e}")
    for counts in (whole, student):
        assert counts["all"] == sum(counts[k] for k in ("code", "docstrings", "comments", "blank")) > 0
    assert 0 < student["files"] < whole["files"] and student["all"] < whole["all"]

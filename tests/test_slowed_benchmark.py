"""benchmarks/slowed.py: a command given half of the wall time takes about twice as long for the same CPU work."""

import sys

import pytest

from benchmarks.slowed import run_slowed

BURN = "import sys, time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass\nsys.exit({code})"


def test_half_share_doubles_the_wall_time_of_cpu_work():
    code, wall = run_slowed([sys.executable, "-c", BURN.format(s=0.4, code=0)], share=0.5, period=0.05)
    assert code == 0
    assert wall >= 0.4 / 0.5 * 0.85  # 0.8 s of wall time for 0.4 s of CPU, less scheduling slack


def test_exit_status_passes_through_and_share_is_checked():
    code, _ = run_slowed([sys.executable, "-c", BURN.format(s=0, code=3)], share=1.0)
    assert code == 3
    with pytest.raises(ValueError, match="share"):
        run_slowed([sys.executable, "-c", "pass"], share=0)

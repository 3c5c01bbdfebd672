"""Benchmark evaluation: frozen suites, per-domain metrics with confidence intervals, comparisons and plots.

`run_benchmark` is the kit's one evaluation: notebooks, the demo, the `eval` CLI and the benchmarks all score
policies with it, greedily or with a test-time search strategy (`search=`)."""

from openmanus_lite.eval.benchmark import BenchmarkResult, TokenMeter, load_result, make_policy, run_benchmark
from openmanus_lite.eval.compare import (
    comparison_frame,
    comparison_markdown,
    comparison_table,
    flip_counts,
    flipped_tasks,
    markdown_table,
    rate_cell,
    sign_test,
    sign_tests,
)
from openmanus_lite.eval.metrics import ALL, GroupSummary, TaskRecord, summarize, wilson_interval
from openmanus_lite.eval.plots import plot_comparison, plot_scaling
from openmanus_lite.eval.suites import Suite, SuiteError, freeze_suites, list_suites, load_suite, verify_suites

__all__ = [
    "ALL", "BenchmarkResult", "GroupSummary", "Suite", "SuiteError", "TaskRecord", "TokenMeter",
    "comparison_frame", "comparison_markdown", "comparison_table", "flip_counts", "flipped_tasks", "freeze_suites",
    "list_suites", "load_result", "load_suite", "make_policy", "markdown_table", "plot_comparison", "plot_scaling",
    "rate_cell", "run_benchmark", "sign_test", "sign_tests", "summarize", "verify_suites", "wilson_interval",
]

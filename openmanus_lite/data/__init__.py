"""Dataset merging: source converters, validation, accounting, mixing, export, stats.

    from openmanus_lite.data import merge, SourceSpec, MergeConfig
    result = merge([SourceSpec("agentinstruct", "THUDM/AgentInstruct")], MergeConfig(seed=0))

Needs neither torch nor `datasets` (only for hub ids and HF export); the stats and negative-sample names
are imported lazily (pandas, matplotlib). `merge` here is the function; the module is
`openmanus_lite.data.merge`.
"""

from __future__ import annotations

from openmanus_lite._lazy import lazy_exports
from openmanus_lite.data.checks import REASONS, CheckConfig, Deduper, Issue, Validator, approx_tokens, validate
from openmanus_lite.data.merge import (
    MergeConfig,
    MergeReport,
    MergeResult,
    SourceSpec,
    convert_source,
    dump_line,
    from_hf_dataset,
    load_report,
    load_splits,
    merge,  # the function: binding it after the submodule loaded replaces the package's `merge` attribute
    read_jsonl,
    read_parquet,
    save_splits,
    split_trajectories,
    to_hf_dataset,
    write_jsonl,
    write_parquet,
)
from openmanus_lite.data.sources import SOURCES, InputError, RawRow, RowRejected, get_source, read_rows

_LAZY = {"make_negatives": "negatives", **dict.fromkeys(
    ("trajectory_stats", "summary_tables", "rejection_table", "plot_overview", "save_plots"), "stats")}
__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY)

__all__ = [
    "REASONS", "CheckConfig", "Deduper", "Issue", "Validator", "approx_tokens", "validate",
    "MergeConfig", "MergeReport", "MergeResult", "SourceSpec", "convert_source", "dump_line", "from_hf_dataset",
    "load_report", "load_splits", "read_jsonl", "read_parquet", "save_splits", "split_trajectories",
    "to_hf_dataset", "write_jsonl", "write_parquet", "merge",
    "SOURCES", "InputError", "RawRow", "RowRejected", "get_source", "read_rows", *_LAZY,
]

"""Measured runs: reading (reference schema, LLMFineTuningBench, profiler output), checking, naming
onto the catalogs, per-source defaults, and an append-only writer. See docs/runs.md."""

from tuneplan.runs.defaults import Defaults, load_defaults
from tuneplan.runs.io import (
    REFERENCE_DIR_ENV,
    load_reference_runs,
    read_runs,
    reference_run_files,
    reference_runs_dir,
    write_runs,
)
from tuneplan.runs.schema import ADDED_COLUMNS, NUMERIC_COLUMNS, REFERENCE_COLUMNS
from tuneplan.runs.table import Problem, RunTable, format_summary, summarise

__all__ = [
    "ADDED_COLUMNS", "NUMERIC_COLUMNS", "REFERENCE_COLUMNS", "REFERENCE_DIR_ENV", "Defaults", "Problem",
    "RunTable", "format_summary", "load_defaults", "load_reference_runs", "read_runs", "reference_run_files",
    "reference_runs_dir", "summarise", "write_runs"
]

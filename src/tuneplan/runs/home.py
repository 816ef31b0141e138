"""Where the runs a user records live: `$TUNEPLAN_HOME/runs/runs.csv` (default `~/.tuneplan`)."""

from __future__ import annotations

import os
from pathlib import Path

RECORDED_RUNS_NAME = "runs.csv"
"""File name of the runs the training callback appends to (tuneplan.integrations.transformers)."""


def tuneplan_home() -> Path:
    return Path(os.environ.get("TUNEPLAN_HOME") or str(Path.home() / ".tuneplan"))


def recorded_runs_path() -> Path:
    """The user's recorded runs: `TuneplanCallback`'s default output and `calibrate`'s default input."""
    return tuneplan_home() / "runs" / RECORDED_RUNS_NAME

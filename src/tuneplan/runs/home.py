"""Where the runs a user records live: `$TUNEPLAN_HOME/runs/runs.csv` (default `~/.tuneplan`)."""

from __future__ import annotations

import os
from pathlib import Path


def recorded_runs_path() -> Path:
    """The user's recorded runs: `TuneplanCallback`'s default output and `calibrate`'s default input."""
    return Path(os.environ.get("TUNEPLAN_HOME") or str(Path.home() / ".tuneplan")) / "runs" / "runs.csv"

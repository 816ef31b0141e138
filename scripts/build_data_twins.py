"""Regenerate the twins of shipped data files: the JSON twins of the YAML files and of the GPU catalog's CSV
(tuneplan.specs.datafiles), byte for byte, the default calibration's (data/calibration/default.marshal, estimators.calibration) and its
forests' lookup tables (data/calibration/default.tables, plan.fastforest).

    python scripts/build_data_twins.py           # write src/tuneplan/data/<stem>.json for each twin
    python scripts/build_data_twins.py --check   # exit 1 when a twin is out of date

Run it after editing data/frameworks.yaml, data/gpus.csv or regenerating data/calibration/default.json (a stale twin
is ignored at run time: the source file is parsed, slower, with the same result).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "src" / "tuneplan" / "data"


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(ROOT / "src"))
    from tuneplan.specs.datafiles import CSV_TWINS, TWINS, render_csv_twin, render_twin, twin_name

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when a twin is out of date")
    args = ap.parse_args(argv)
    stale = []
    for name in TWINS + CSV_TWINS:
        render = render_csv_twin if name in CSV_TWINS else render_twin
        want = render(name, (DATA / name).read_text(encoding="utf-8"))
        out = DATA / twin_name(name)
        if out.exists() and out.read_text(encoding="utf-8") == want:
            continue
        stale.append(out.name)
        if not args.check:
            out.write_text(want, encoding="utf-8")
    if not _calibration_twin_current(DATA / "calibration"):
        stale.append("calibration/default.marshal")
        if not args.check:
            _write_calibration_twin(DATA / "calibration")
    if not _tables_current():
        stale.append("calibration/default.tables")
        if not args.check:
            _write_tables()
    if args.check and stale:
        print(f"out of date: {', '.join(stale)} (run python scripts/build_data_twins.py)", file=sys.stderr)
        return 1
    print(("stale: " if args.check else "written: ") + (", ".join(stale) or "none"))
    return 0


def _calibration_twin_current(folder: Path) -> bool:
    """Whether the default calibration's twin holds its JSON's document (a missing JSON needs none)."""
    import json

    from tuneplan.estimators.calibration import TWIN_NAME, read_twin

    src, twin = folder / "default.json", folder / TWIN_NAME
    if not src.exists():
        return not twin.exists()
    if not twin.exists():
        return False
    text = src.read_text(encoding="utf-8")
    return read_twin(twin.read_bytes(), text) == json.loads(text)


def _write_calibration_twin(folder: Path) -> None:
    from tuneplan.estimators.calibration import TWIN_NAME, render_twin

    src, twin = folder / "default.json", folder / TWIN_NAME
    if src.exists():
        twin.write_bytes(render_twin(src.read_text(encoding="utf-8")))
    else:
        twin.unlink(missing_ok=True)


def _default_estimator():
    from tuneplan.estimators.calibration import default_calibration

    cal = default_calibration()
    return cal.estimator() if cal is not None and cal.learner == "tuneplan" else None


def _tables_current() -> bool:
    """Whether data/calibration/default.tables holds the default calibration's forests' tables."""
    from tuneplan.plan.fastforest import read_tables, render_tables, shipped_tables_path

    est = _default_estimator()
    path = Path(shipped_tables_path())
    if est is None:
        return not path.exists()
    return path.exists() and read_tables(path.read_bytes()) == read_tables(render_tables(est))


def _write_tables() -> None:
    from tuneplan.plan.fastforest import render_tables, shipped_tables_path

    est = _default_estimator()
    path = Path(shipped_tables_path())
    if est is None:
        path.unlink(missing_ok=True)
    else:
        path.write_bytes(render_tables(est))


if __name__ == "__main__":
    sys.exit(main())

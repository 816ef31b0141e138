"""Regenerate the JSON twins of the shipped YAML data files (tuneplan.specs.datafiles), byte for byte.

    python scripts/build_data_twins.py           # write src/tuneplan/data/<stem>.json for each twin
    python scripts/build_data_twins.py --check   # exit 1 when a twin is out of date

Run it after editing data/frameworks.yaml (a stale twin is ignored at run time: the YAML is parsed,
slower, with the same result).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "src" / "tuneplan" / "data"


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(ROOT / "src"))
    from tuneplan.specs.datafiles import TWINS, render_twin, twin_name

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when a twin is out of date")
    args = ap.parse_args(argv)
    stale = []
    for name in TWINS:
        want = render_twin(name, (DATA / name).read_text(encoding="utf-8"))
        out = DATA / twin_name(name)
        if out.exists() and out.read_text(encoding="utf-8") == want:
            continue
        stale.append(out.name)
        if not args.check:
            out.write_text(want, encoding="utf-8")
    if args.check and stale:
        print(f"out of date: {', '.join(stale)} (run python scripts/build_data_twins.py)", file=sys.stderr)
        return 1
    print(("stale: " if args.check else "written: ") + (", ".join(stale) or "none"))
    return 0


if __name__ == "__main__":
    sys.exit(main())

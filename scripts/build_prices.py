"""Regenerate src/tuneplan/data/prices.yaml from the reference price CSV, byte for byte.

    python scripts/build_prices.py                 # from src/tuneplan/data/gpu_prices.csv
    python scripts/build_prices.py --csv ../shared/reference/gpu_prices.csv   # refresh the copy too
    python scripts/build_prices.py --check         # exit 1 when prices.yaml is out of date

Every record is validated (positive price, a date, a source, a GPU the catalog knows) before the
file is written.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "src" / "tuneplan" / "data"


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(ROOT / "src"))
    from tuneplan.specs.gpu import resolve_gpu
    from tuneplan.specs.prices import DATE_RE, parse_yaml_prices, render_prices_yaml

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=DATA / "gpu_prices.csv",
                    help="reference price CSV (default: the package's copy)")
    ap.add_argument("--out", type=Path, default=DATA / "prices.yaml")
    ap.add_argument("--check", action="store_true", help="only check that --out is up to date")
    args = ap.parse_args(argv)

    text = render_prices_yaml(args.csv.read_text(encoding="utf-8"))
    prices = parse_yaml_prices(text, str(args.out))
    bad = []
    for p in prices:
        if not DATE_RE.match(p.date_seen):
            bad.append(f"line {p.line}: date_seen '{p.date_seen}' is not YYYY-MM[-DD]")
        if not p.source:
            bad.append(f"line {p.line}: no source")
        if resolve_gpu(p.gpu).name != p.gpu:
            bad.append(f"line {p.line}: GPU '{p.gpu}' is not a catalog name")
    if bad:
        print("\n".join(bad), file=sys.stderr)
        return 1
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
        if current != text:
            print(f"{args.out} is out of date: run scripts/build_prices.py", file=sys.stderr)
            return 1
        print(f"{args.out}: up to date ({len(prices)} prices)")
        return 0
    if args.csv.resolve() != (DATA / "gpu_prices.csv").resolve() and args.out == DATA / "prices.yaml":
        shutil.copyfile(args.csv, DATA / "gpu_prices.csv")
    args.out.write_text(text, encoding="utf-8", newline="\n")
    print(f"wrote {args.out} ({len(prices)} prices)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

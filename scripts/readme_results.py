"""Copy the F1 table of the report stage's `results/report/report.md` into README.md's Results
section, so that the README shows the report as it is, never a typed copy.

    python scripts/readme_results.py            # rewrite README.md's table in place
    python scripts/readme_results.py --check    # exit 1 (saying so) when the README's table differs

The table is the first markdown table under the report's "## F1 per split" heading; in the README
it is the first table under "## Results". Nothing else in either file is touched; the README is
written atomically.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def first_table(lines: list[str], heading: str, where: Path) -> tuple[int, int]:
    """(start, end) line indices of the first markdown table after `heading` in `lines`."""
    try:
        start = lines.index(heading)
    except ValueError:
        raise SystemExit(f"{where}: no '{heading}' heading") from None
    while start < len(lines) and not lines[start].startswith("|"):
        start += 1
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    if end - start < 3:
        raise SystemExit(f"{where}: no table under '{heading}'")
    return start, end


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", type=Path, default=ROOT / "results/report/report.md")
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md")
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when they differ")
    args = parser.parse_args(argv)
    if not args.report.is_file():
        raise SystemExit(f"{args.report}: not found (run `dvc repro report` first)")
    report = args.report.read_text(encoding="utf-8").splitlines()
    a, b = first_table(report, "## F1 per split", args.report)
    readme = args.readme.read_text(encoding="utf-8").splitlines()
    c, d = first_table(readme, "## Results", args.readme)
    if readme[c:d] == report[a:b]:
        print(f"{args.readme}: the results table is the report's")
        return 0
    if args.check:
        print(f"{args.readme}: the results table differs from {args.report}", file=sys.stderr)
        return 1
    text = "\n".join(readme[:c] + report[a:b] + readme[d:]) + "\n"
    tmp = args.readme.with_suffix(".md.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(args.readme)
    print(f"{args.readme}: results table copied from {args.report} ({b - a - 2} rows)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Score one checkpoint on prepared splits at several `reading.columns` × `reading.views` settings.

    python scripts/read_columns_sweep.py --checkpoint models/phase1/primary --splits wide real test \
        --read-columns 0 9 5 3 --read-views 1 2 3 4

How `reading.columns` (9) and `reading.views` (3) were chosen (docs/experiments.md, "How the
trained primary reads a table" and "Row views on the fresh-table primary"): the same trained
model, each setting reading tables wider than read_columns in column groups (0: every table
whole) and every table in read_views row views (`aegir.eval.grouped`). Prints per split and
setting the number of streams read, CTA and CPA micro / macro F1, and the seconds it took.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

from aegir.data.dataset import load_examples
from aegir.errors import AegirError
from aegir.eval.grouped import split_reads
from aegir.eval.predict import score
from aegir.inference import load_for_inference


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path, default=Path("models/phase1/primary"))
    parser.add_argument("--data", type=Path, default=Path("data/prepared"))
    parser.add_argument("--splits", nargs="+", default=["wide", "real", "test", "corner_cases"])
    parser.add_argument("--read-columns", type=int, nargs="+", default=[0, 9])
    parser.add_argument("--read-views", type=int, nargs="+", default=[1, 3])
    args = parser.parse_args()
    try:
        annotator = load_for_inference(args.checkpoint)
        for split in args.splits:
            examples = load_examples(args.data, split)
            widths = [e.num_columns for e in examples]
            print(f"{split}: {len(examples)} tables, {min(widths)}–{max(widths)} columns")
            for read_columns, read_views in itertools.product(args.read_columns, args.read_views):
                if read_columns == 1 or read_columns < 0:
                    raise AegirError(f"--read-columns {read_columns}: must be 0 or ≥ 2")
                if read_views < 1:
                    raise AegirError(f"--read-views {read_views}: must be ≥ 1")
                started = time.perf_counter()
                plan = split_reads(args.data, split, examples, read_columns, read_views, annotator.prepare)
                result = score(examples, annotator.predict_plan(plan, [e.table_id for e in examples]))
                print(f"  read_columns {read_columns:3d} read_views {read_views:2d}: {len(plan.reads):5d} streams  "
                      f"CTA {result['cta']['micro_f1']:5.1f} / {result['cta']['macro_f1']:5.1f}  "
                      f"CPA {result['cpa']['micro_f1']:5.1f} / {result['cpa']['macro_f1']:5.1f}  "
                      f"{time.perf_counter() - started:5.1f} s", flush=True)
    except AegirError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Stage `calibrate`: how far each checkpoint's confidences can be trusted, and the map that
makes them trustworthy on real tables (`aegir.eval.calibration` says how each figure is computed).

    python -m aegir.stages.calibrate --data data/prepared --models models --out results/calibrate

For each checkpoint the report compares (`CHECKPOINTS`, under --models; or each --checkpoint) it
takes every evaluation split of the prepared data as the pipeline scores it (column groups, row
views, joint decoding: `aegir.inference.prepared_predictions`), fits per task a beta map of the
top-1 confidence, σ(a·ln c − d·ln(1 − c) + b), on the `real` split, and writes under --out (below). The map is
fitted on `real` because no synthetic split calibrates real tables (a temperature fitted on
`valid` made their confidences worse: docs/experiments.md); so `real`, otherwise only ever
scored, gives three numbers per task and checkpoint, and the figure that says what the map is
worth on tables it has not seen is **out of family**: each `real` family mapped by the map
fitted on the other families' tables (`aegir.data.real.family_of`).

The checkpoint's model is not run where its stage already did: phase1, phase3 and phase4 store
beside each checkpoint what it predicted on every read of every evaluation split
(`eval_reads.safetensors`, `aegir.eval.reads`), and where that store matches — the checkpoint's
fingerprint, the prepared data's, the `prepare` and `reading` settings its config.json records,
the very reads of the split — those distributions are merged and decoded per table exactly as
re-scoring would (`aegir.calibration.StoredTargets`); only the splits without one (a user's own
checkpoint, say) are read by the model again. The two give the same figures up to the float
rounding of the batches the forward ran in (the stages batch their reads their own way).
`aegir.calibration.calibrate_checkpoints` computes it all, `aegir.eval.calibration_plots` draws
the figures.

  calibration.json   per checkpoint (by its path): its fingerprint, where its distributions came
                     from (`distributions`: "stored", or "re-scored: " and why not, or the
                     splits re-scored), the map per task (`map`: a, b, d);
                     per split and task the accuracy, and the mean top-1 confidence and ECE
                     before and after the map (on `real`, the tables it was fitted on); on
                     `real` per task the coverage curve (kept share and accuracy for each
                     minimum confidence 0, 0.05, …, 0.95, 0.97, 0.99) of the model's own
                     confidences, the first minimum confidence that reaches 95 % accuracy with
                     its coverage (null when none does) and the most accurate one; under
                     `out_of_family` the ECE, mean confidence and the same curve of the mapped
                     confidences, each family by the map fitted on the others (what
                     `aegir annotate --min-confidence P` compares with P by default); and the
                     reliability bins of both
  figures/           PNG (DVC plots): reliability.png (accuracy against confidence on `real`,
                     own and calibrated out of family, per checkpoint and task) and coverage.png
                     (accuracy and coverage against the minimum calibrated confidence on `real`)

`aegir annotate` finds the map of the checkpoint it loads here, by its fingerprint, and applies it
to every confidence (labels unchanged). Everything is computed before anything is written;
outputs are atomic and byte-identical for the same inputs (PNG included).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from aegir import atomic
from aegir.calibration import calibrate_checkpoints
from aegir.errors import AegirError
from aegir.eval.calibration_plots import calibration_figures
from aegir.eval.calibration_report import summary_lines

# The checkpoints the report compares (aegir.eval.report.CHECKPOINTS), under --models: path → name.
CHECKPOINTS = {"phase1/primary": "Phase 1 primary", "phase3/control": "Phase 3 control",
               "phase3": "Phase 3 fused", "phase4": "Phase 4"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     epilog="`aegir annotate` reads the maps from --out/calibration.json.")
    parser.add_argument("--data", type=Path, default=Path("data/prepared"), help="prepared data (real, valid, …)")
    parser.add_argument("--models", type=Path, default=Path("models"),
                        help=f"the pipeline's checkpoints: {', '.join(CHECKPOINTS)} under it")
    parser.add_argument("--checkpoint", type=Path, action="append", default=None,
                        help="calibrate this checkpoint instead (repeatable)")
    parser.add_argument("--out", type=Path, default=Path("results/calibrate"),
                        help="output directory: calibration.json, figures/")
    args = parser.parse_args(argv)
    checkpoints = ({p.as_posix(): p.as_posix() for p in args.checkpoint} if args.checkpoint else
                   {(args.models / path).as_posix(): name for path, name in CHECKPOINTS.items()})
    try:
        content = calibrate_checkpoints(args.data, checkpoints)
        figures = calibration_figures(content["checkpoints"])
        with atomic.staged_dir(args.out / "figures") as staging:
            for name, png in figures.items():
                (staging / name).write_bytes(png)
        atomic.write_json(args.out / "calibration.json", content)
    except AegirError as exc:
        parser.exit(2, f"calibrate: error: {exc}\n")
    for line in summary_lines(content):
        print(line)
    print(f"calibrate: wrote {args.out / 'calibration.json'}, {args.out / 'figures'}/")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Stage `report`: the baseline and every phase in one markdown table, with figures.

    python -m aegir.stages.report --baselines results/baselines/scores.json \\
        --phase1 results/phase1 --phase3 results/phase3 [--phase4 results/phase4] \\
        [--calibration results/calibrate/calibration.json] --models models --out results/report

Reads the F1 per split (each stage's scores.json) and the DVCLive curves the earlier stages
wrote (`aegir.eval.report` lists them) and writes, under --out:

  report.md       the F1 table (baseline → Phase 1 → Phase 3 control → Phase 3 fused → Phase 4,
                  CTA and CPA micro / macro F1 on every split), Phase 3's routing (activation
                  rate per specialist, overall and per table domain), Phase 4's scaling rows,
                  with --calibration each model's calibration on `real` (its own ECE, its
                  calibrated ECE out of family, the map, the calibrated confidence that reaches
                  95 % accuracy), links to the figures
  gains.json      micro-F1 gains in points per task and split (fused over control, over Phase 1,
                  over the baseline; each Phase 4 policy over its `never` control)
  best.json       the checkpoint (a directory under --models) that scored best on `real`, its
                  score and every candidate's (`aegir.eval.report.best_checkpoint`): what
                  `aegir annotate` uses when no --checkpoint is named
  figures/        PNG (DVC plots): f1_by_split.png, routing_by_domain.png, training_curves.png,
                  and scaling.png when --phase4 holds a scaling.json

Everything is read before anything is written; a missing or malformed input stops the stage
with an error naming the file and the stage that writes it. Outputs are written atomically and
are byte-identical for the same inputs (PNG included).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from aegir import atomic
from aegir.errors import AegirError
from aegir.eval.report import (
    best_checkpoint,
    collect,
    report_figures,
    report_gains,
    report_markdown,
)


def write_report(baselines: Path, phase1: Path, phase3: Path, phase4: Path | None, out: Path,
                 models: Path = Path("models"), calibration: Path | None = None) -> tuple[dict, dict]:
    """Collect, render, then write `out/` (figures/, report.md, gains.json, best.json); the
    gains and the best checkpoint."""
    report = collect(baselines, phase1, phase3, phase4, calibration)
    figures = report_figures(report)
    markdown = report_markdown(report, list(figures))
    gains = report_gains(report)
    best = best_checkpoint(report, models)
    with atomic.staged_dir(out / "figures") as staging:
        for name, data in figures.items():
            (staging / name).write_bytes(data)
    atomic.write_text(out / "report.md", markdown)
    atomic.write_json(out / "gains.json", gains)
    atomic.write_json(out / "best.json", best)
    return gains, best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="Run it after the stages it reads: `dvc repro report` (or `snakemake --cores all report`) "
               "runs them first. View: results/report/report.md; `dvc plots show` renders the figures.")
    parser.add_argument("--baselines", type=Path, default=Path("results/baselines/scores.json"),
                        help="the baselines stage's scores.json")
    parser.add_argument("--phase1", type=Path, default=Path("results/phase1"),
                        help="phase1's results: one directory per agent (scores.json, live/); primary required")
    parser.add_argument("--phase3", type=Path, default=Path("results/phase3"),
                        help="phase3's results: scores.json, live/fused, live/control")
    parser.add_argument("--phase4", type=Path, default=None,
                        help="phase4's results (scores.json, optional scaling.json); left out: no Phase 4 rows")
    parser.add_argument("--calibration", type=Path, default=None,
                        help="the calibrate stage's calibration.json; left out: no calibration section")
    parser.add_argument("--models", type=Path, default=Path("models"),
                        help="the pipeline's checkpoints (phase1/primary, phase3, phase3/control, phase4): "
                             "best.json names the best of them by its path here")
    parser.add_argument("--out", type=Path, default=Path("results/report"),
                        help="output directory: report.md, gains.json, best.json, figures/")
    args = parser.parse_args(argv)
    try:
        gains, best = write_report(args.baselines, args.phase1, args.phase3, args.phase4, args.out, args.models,
                                   args.calibration)
    except AegirError as exc:
        parser.exit(2, f"report: error: {exc}\n")
    over_control = gains["fused_minus_control"]
    print("report: fused − control micro-F1 (points): " + "  ".join(
        f"{task.upper()} {split} {over_control[task][split]:+.1f}" for task in ("cta", "cpa")
        for split in ("test", "corner_cases", "real") if split in over_control[task]))
    print(f"report: best on {best['split']}: {best['checkpoint']} ({best['name']}, {best['metric']} {best['score']:.2f})")
    print(f"report: wrote {args.out / 'report.md'}, {args.out / 'gains.json'}, {args.out / 'best.json'}, "
          f"{args.out / 'figures'}/")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Stage `phase2`: prove, on the Phase 1 agents and real batches, that each reward measures what it claims.

    python -m aegir.stages.phase2 --params params.yaml --data data/prepared \\
        --models models/phase1 --out results/phase2

The rewards are pure functions (`aegir.rl.rewards`) and the checks are library functions
(`aegir.rl.checks`, run by `aegir.rl.reward_study`); this stage feeds them the Phase 1 primary,
its specialists (every agent of the `specialists` section, S ≥ 1 of them) and `phase2.batches`
seeded batches of `phase2.batch_size` tables from the `valid` split, and records what they
measure. `aegir.rl.reward_study` lists each check (a range, a direction, a gradient, an ascent
or the calibration of a reward component) and how it is measured; the routing-dependent r_perf
they score is the routed annotation of `aegir.rl.routed_rewards`.

Outputs (written atomically; the stage exits 1 after writing them when a check fails):
  <out>/metrics.json  DVC metrics: checks run, checks failed, the primary's mean r_perf
  <out>/report.json   every check with `ok` and its measured values, the λ tables (with the
                      mean combined reward at each schedule point)
  <out>/plots/        corruption.csv, routing.csv, ascent.csv and a PNG of each
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from aegir import atomic
from aegir.config import load_params
from aegir.data.dataset import load_examples
from aegir.data.prepared import split_path
from aegir.errors import AegirError, DataError
from aegir.rl.reward_plots import csv_text, draw_plots, plot_tables
from aegir.rl.reward_study import load_agents, run


def headline(report: dict) -> dict:
    """The DVC metrics of phase2: how many checks ran and failed, and the primary's mean r_perf.
    The mean combined reward at each point of the λ schedule, like everything else, stays in
    report.json (`lambda.schedule`)."""
    return {"checks": report["num_checks"], "failed": report["num_failed"],
            "primary_r_perf": report["setup"]["primary_r_perf_mean"]}


def write_outputs(report: dict, out_dir: Path) -> None:
    """metrics.json + report.json + plots/ (CSV and PNG), replacing `out_dir` atomically."""
    with atomic.staged_dir(out_dir) as staging:
        atomic.write_json(staging / "report.json", report)
        atomic.write_json(staging / "metrics.json", headline(report))
        plots_dir = staging / "plots"
        plots_dir.mkdir()
        tables = plot_tables(report)
        for name, rows in tables.items():
            atomic.write_text(plots_dir / f"{name}.csv", csv_text(rows))
        draw_plots(tables, report["setup"]["rewards"]["target_share"], plots_dir)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--data", default="data/prepared", help="prepared data directory (its valid split)")
    parser.add_argument("--models", default="models/phase1", help="Phase 1 checkpoints, one directory per agent")
    parser.add_argument("--out", default="results/phase2", help="metrics.json, report.json and plots/")
    args = parser.parse_args(argv)
    try:
        params = load_params(args.params)
        primary, specialists = load_agents(params, Path(args.models))
        examples = load_examples(args.data, "valid")
        if not examples:
            raise DataError(split_path(args.data, "valid"), "no tables")
        report = run(params, primary, specialists, examples)
    except AegirError as exc:
        parser.exit(2, f"phase2: error: {exc}\n")
    write_outputs(report, Path(args.out))
    setup = report["setup"]
    print(f"phase2: {report['num_checks'] - report['num_failed']}/{report['num_checks']} checks passed on "
          f"{setup['tables']} of {setup['valid_tables']} valid tables, {setup['num_specialists']} specialists; "
          f"report in {Path(args.out) / 'report.json'}")
    if not report["passed"]:
        print(f"phase2: FAILED checks: {', '.join(report['failed'])}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Calibrators fitted on `real` itself, measured out of family: could a post-hoc map fitted on
real tables make the confidences on real tables trustworthy (issue 39 item 3)?

    python scripts/calibration_lofo.py models/phase4 models/phase3 models/phase1/primary

The `calibrate` stage fits one temperature per task on the synthetic `valid` split, which makes
the confidences on `real` worse (docs/experiments.md, "A temperature from a synthetic split does
not calibrate real"). This script asks what a map fitted on real tables would do, without
scoring it on the tables it was fitted on: every `real` family's (`aegir.data.real.family_of`)
targets are mapped by a calibrator fitted on the *other* families' targets (leave-one-family-out),
and the expected calibration error (`aegir.eval.calibration`, 15 bins) and the coverage at 95 %
accuracy are computed on those out-of-family confidences. Per checkpoint and task it prints:

    own        the model's own top-1 confidences
    T valid    a temperature fitted on `valid` (what the calibrate stage fitted until it was shown
               to make `real` worse)
    T lofo     a temperature fitted (NLL) on the other families
    platt lofo a logistic map of the top-1 confidence's log-odds, a·logit(c) + b, fitted on them
               (the calibrate stage's map until the beta map replaced it)
    beta lofo  a beta map, σ(a·ln c − d·ln(1 − c) + b), fitted on them (the calibrate stage's
               map, `aegir.eval.calibration.out_of_family`)
    hist lofo  equal-mass histogram binning (10 bins) of the top-1 confidence, fitted on them

Each checkpoint's distributions come from what its stage stored (`aegir.calibration.StoredTargets`),
re-scored where no store matches. Not part of `dvc repro`; what it measured is in
docs/experiments.md ("Calibrators fitted on real tables, measured out of family").
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from aegir.eval.calibration import (
    TASKS,
    Scored,
    coverage_curve,
    expected_calibration_error,
    fit_logistic,
    fit_temperature,
    for_accuracy,
    out_of_family,
)
from aegir.eval.calibration_report import target_families


def fit_histogram(confidences: np.ndarray, correct: np.ndarray, bins: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """(edges, accuracy per bin) of equal-mass binning; an empty bin maps to its mid-point."""
    edges = np.quantile(confidences, np.linspace(0.0, 1.0, bins + 1))
    edges[0], edges[-1] = -np.inf, np.inf
    index = np.clip(np.searchsorted(edges, confidences, side="right") - 1, 0, bins - 1)
    correct = np.asarray(correct, dtype=np.float64)
    means = np.array([correct[index == i].mean() if (index == i).any() else (i + 0.5) / bins for i in range(bins)])
    return edges, means


def histogram(confidences: np.ndarray, edges: np.ndarray, means: np.ndarray) -> np.ndarray:
    return means[np.clip(np.searchsorted(edges, confidences, side="right") - 1, 0, len(means) - 1)]


def held_out(scored: Scored, groups: np.ndarray) -> dict[str, np.ndarray]:
    """{calibrator: each target's confidence from the map fitted on the other groups' targets}."""
    own, correct = scored.confidences(), scored.correct
    if len(np.unique(groups)) < 2:
        raise ValueError(f"only one group ({groups[0] if len(groups) else None}): nothing to fit on out of it")
    out = {name: np.zeros(len(own)) for name in ("T lofo", "hist lofo")}
    for group in np.unique(groups):
        held, fit = groups == group, groups != group
        t = fit_temperature(scored.probs[fit], scored.gold[fit])
        out["T lofo"][held] = Scored(scored.probs[held], scored.chosen[held], scored.gold[held]).confidences(t)
        out["hist lofo"][held] = histogram(own[held], *fit_histogram(own[fit], correct[fit]))
    out["platt lofo"] = out_of_family(own, correct, groups, fit=fit_logistic)
    out["beta lofo"] = out_of_family(own, correct, groups)  # the calibrate stage's map, as it measures it
    return out


def rows(scored: Scored, groups: np.ndarray, valid_temperature: float) -> dict[str, dict]:
    """{calibrator: {ece, mean_confidence, coverage_at_95}} of one task (fractions)."""
    confidences = {"own": scored.confidences(), "T valid": scored.confidences(valid_temperature),
                   **held_out(scored, groups)}
    out = {}
    for name, c in confidences.items():
        reach = for_accuracy(coverage_curve(c, scored.correct))
        out[name] = {"ece": expected_calibration_error(c, scored.correct), "mean_confidence": float(np.mean(c)),
                     "coverage_at_95": reach["coverage"] if reach else None}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoints", nargs="+", type=Path)
    parser.add_argument("--data", type=Path, default=Path("data/prepared"))
    args = parser.parse_args(argv)
    from aegir.calibration import StoredTargets, stored_or_scored

    stored = StoredTargets(args.data)
    families = target_families(stored.examples("real"))
    print("checkpoint | task | accuracy | calibrator | ECE % | mean confidence % | coverage at 95 % accuracy")
    for checkpoint in args.checkpoints:
        targets, _ = stored_or_scored(stored, checkpoint, ["real", "valid"])
        for task in TASKS:
            scored, valid = targets["real"][task], targets["valid"][task]
            t = fit_temperature(valid.probs, valid.gold)
            for name, row in rows(scored, families[task], t).items():
                reach = "none" if row["coverage_at_95"] is None else f"{100 * row['coverage_at_95']:.1f} %"
                print(f"{checkpoint} | {task.upper()} | {100 * scored.correct.mean():.1f} | {name} | "
                      f"{100 * row['ece']:.1f} | {100 * row['mean_confidence']:.1f} | {reach}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

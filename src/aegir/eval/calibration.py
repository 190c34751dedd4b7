"""Confidence a user can act on: how well a checkpoint's top-1 confidences are calibrated, a
post-hoc temperature per task that calibrates them, and the coverage / accuracy trade-off of a
minimum confidence.

A column's (CTA) or pair's (CPA) label distribution here is the one the pipeline scores it with:
its reads merged (column groups, row views: `aegir.eval.grouped`), and its label the one joint
decoding chose (`aegir.eval.joint`; the argmax where a checkpoint does not decode jointly). Its
**confidence** is that label's probability.

* **ECE** (`expected_calibration_error`): the top-1 confidences in `BINS` equal-width bins over
  [0, 1] (bin i holds i/B ≤ confidence < (i+1)/B, the last one 1.0 as well), and
  Σ_bins |accuracy − mean confidence| · n_bin / N. 0 is perfect.
* **Temperature** (`temper`, `fit_temperature`): a distribution p becomes p^(1/T) / Σ p^(1/T),
  the softmax of log p / T (T > 1 softens, T < 1 sharpens). It is monotone within a column, so
  every column keeps its order of labels and the label chosen for it: F1 does not move, only the
  confidences do. One T per task, fitted on the `valid` split only (never on `real` or a test
  split) as the minimiser of the mean negative log-likelihood of the gold labels: a golden-section
  search over log T in [`T_MIN`, `T_MAX`] (NLL is convex in 1/T, so unimodal there), rounded to
  4 decimals. Deterministic: the same distributions give the same T.
* **Coverage** (`coverage_curve`): for each minimum confidence P in `THRESHOLDS` (0, 0.05, …,
  0.95, 0.97, 0.99), the share of columns whose confidence is ≥ P (kept; the others `aegir annotate
  --min-confidence P` writes as `unknown`) and the accuracy on those; `for_accuracy` finds the
  first P that reaches a target accuracy (`TARGET_ACCURACY`) and the coverage it leaves, and
  `most_accurate` the P of the highest accuracy (for a target no P reaches).

Every figure is a fraction in [0, 1]. The `calibrate` stage (`aegir.stages.calibrate`) writes
them for each checkpoint the report compares; `aegir annotate` applies the fitted temperatures
(`temperatures_for`) to the checkpoint it loads, found by its fingerprint.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aegir.errors import DataError
from aegir.eval.predict import TablePrediction

TASKS = ("cta", "cpa")
BINS = 15
# 0, 0.05, …, 0.95, then 0.97 and 0.99: a model's own confidences on real tables reach 95 %
# accuracy only near the top (docs/annotate.md)
THRESHOLDS = tuple(round(0.05 * i, 2) for i in range(20)) + (0.97, 0.99)
TARGET_ACCURACY = 0.95
T_MIN, T_MAX = 0.05, 20.0
FLOOR = 1e-30  # a probability of 0 is taken as this before its log (as aegir.eval.joint does)
DIGITS = 6  # figures in the calibration file are rounded to this many decimals


@dataclass(frozen=True)
class Scored:
    """A task's scored targets on one split: `probs` (N, labels) each target's whole merged label
    distribution, `chosen` (N,) the label the checkpoint gives it, `gold` (N,) its gold label."""

    probs: np.ndarray
    chosen: np.ndarray
    gold: np.ndarray

    def __post_init__(self):
        n = len(self.gold)
        if self.probs.ndim != 2 or len(self.probs) != n or len(self.chosen) != n:
            raise ValueError(f"Scored: probs {self.probs.shape}, chosen {len(self.chosen)}, gold {n} do not align")

    @property
    def correct(self) -> np.ndarray:
        return self.chosen == self.gold

    def confidences(self, temperature: float = 1.0) -> np.ndarray:
        """(N,) the chosen label's probability after `temperature`."""
        if len(self.gold) == 0:
            return np.zeros(0)
        return temper(self.probs, temperature)[np.arange(len(self.chosen)), self.chosen]


def _log(probs: np.ndarray) -> np.ndarray:
    return np.log(np.clip(np.asarray(probs, dtype=np.float64), FLOOR, None))


def temper(probs: np.ndarray, temperature: float) -> np.ndarray:
    """`probs` (…, labels) with temperature T: softmax(log p / T) along the last axis, float64.
    T = 1 gives `probs` back (renormalised)."""
    if not temperature > 0 or not math.isfinite(temperature):
        raise ValueError(f"temperature must be a positive number, got {temperature!r}")
    z = _log(probs) / temperature
    z -= z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def nll(probs: np.ndarray, gold: np.ndarray, temperature: float) -> float:
    """Mean negative log-likelihood of `gold` (N,) under `probs` (N, labels) at `temperature`."""
    if len(gold) == 0:
        return 0.0
    z = _log(probs) / temperature
    top = z.max(axis=1, keepdims=True)
    log_norm = np.log(np.exp(z - top).sum(axis=1)) + top[:, 0]
    return float(np.mean(log_norm - z[np.arange(len(gold)), gold]))


def fit_temperature(probs: np.ndarray, gold: np.ndarray, low: float = T_MIN, high: float = T_MAX,
                    iterations: int = 100) -> float:
    """The T in [low, high] that minimises `nll`, by golden-section search on log T, rounded to 4
    decimals; 1.0 for no targets."""
    if len(gold) == 0:
        return 1.0
    ratio = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = math.log(low), math.log(high)
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = nll(probs, gold, math.exp(c)), nll(probs, gold, math.exp(d))
    for _ in range(iterations):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = nll(probs, gold, math.exp(c))
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = nll(probs, gold, math.exp(d))
    return round(math.exp((a + b) / 2.0), 4)


def _bin_index(confidences: np.ndarray, bins: int) -> np.ndarray:
    return np.minimum((np.asarray(confidences, dtype=np.float64) * bins).astype(np.int64), bins - 1)


def reliability(confidences: np.ndarray, correct: np.ndarray, bins: int = BINS) -> list[dict]:
    """Per equal-width bin (bin i: i/B ≤ confidence < (i+1)/B, the last bin with 1.0): its
    bounds, how many targets fall in it, their mean confidence and accuracy (None when empty)."""
    confidences = np.asarray(confidences, dtype=np.float64)
    index = _bin_index(confidences, bins)
    correct = np.asarray(correct, dtype=bool)
    out = []
    for i in range(bins):
        members = index == i
        n = int(members.sum())
        out.append({"lower": round(i / bins, DIGITS), "upper": round((i + 1) / bins, DIGITS), "count": n,
                    "confidence": round(float(np.mean(confidences[members])), DIGITS) if n else None,
                    "accuracy": round(float(np.mean(correct[members])), DIGITS) if n else None})
    return out


def expected_calibration_error(confidences: np.ndarray, correct: np.ndarray, bins: int = BINS) -> float:
    """Σ_bins |accuracy − mean confidence| · n_bin / N over `bins` equal-width bins; 0.0 for no targets."""
    confidences = np.asarray(confidences, dtype=np.float64)
    correct = np.asarray(correct, dtype=np.float64)
    if len(confidences) == 0:
        return 0.0
    index = _bin_index(confidences, bins)
    total = 0.0
    for i in range(bins):
        members = index == i
        if members.any():
            total += abs(correct[members].mean() - confidences[members].mean()) * members.sum()
    return total / len(confidences)


def summary(confidences: np.ndarray, correct: np.ndarray, bins: int = BINS) -> dict:
    """{n, accuracy, mean_confidence, ece} of one set of top-1 confidences."""
    n = len(confidences)
    return {"n": n,
            "accuracy": round(float(np.mean(correct)), DIGITS) if n else None,
            "mean_confidence": round(float(np.mean(confidences)), DIGITS) if n else None,
            "ece": round(expected_calibration_error(confidences, correct, bins), DIGITS)}


def coverage_curve(confidences: np.ndarray, correct: np.ndarray,
                   thresholds: Sequence[float] = THRESHOLDS) -> list[dict]:
    """Per minimum confidence P: the targets kept (confidence ≥ P), their share (`coverage`) and
    the accuracy on them (None when none is kept)."""
    confidences = np.asarray(confidences, dtype=np.float64)
    correct = np.asarray(correct, dtype=bool)
    n = len(confidences)
    out = []
    for p in thresholds:
        kept = confidences >= p
        count = int(kept.sum())
        out.append({"min_confidence": p, "kept": count, "coverage": round(count / n, DIGITS) if n else 0.0,
                    "accuracy": round(float(correct[kept].mean()), DIGITS) if count else None})
    return out


def for_accuracy(curve: Sequence[Mapping], target: float = TARGET_ACCURACY) -> dict | None:
    """The first row of `curve` (lowest P) whose accuracy reaches `target`: {min_confidence,
    coverage, accuracy}; None when no P does."""
    for row in curve:
        if row["accuracy"] is not None and row["accuracy"] >= target:
            return {"min_confidence": row["min_confidence"], "coverage": row["coverage"], "accuracy": row["accuracy"]}
    return None


def most_accurate(curve: Sequence[Mapping]) -> dict | None:
    """The row of `curve` with the highest accuracy (the lowest P of equals): {min_confidence,
    coverage, accuracy}, what a user gets nearest a target no P reaches; None when none keeps any."""
    rows = [row for row in curve if row["accuracy"] is not None]
    if not rows:
        return None
    row = max(rows, key=lambda r: r["accuracy"])  # the first of equal accuracies
    return {"min_confidence": row["min_confidence"], "coverage": row["coverage"], "accuracy": row["accuracy"]}


# ----------------------------------------------------------------------------- at inference


def temper_prediction(prediction: TablePrediction, temperatures: Mapping[str, float], top_k: int) -> TablePrediction:
    """`prediction`, whose rows hold every label (top_k = `aegir.eval.grouped.ALL_LABELS`), with
    each task's probabilities tempered (`temper`) and cut to the first `top_k`: the order of each
    row, its chosen label first, is kept."""
    out = {}
    for task in TASKS:
        ids, probs = getattr(prediction, f"{task}_ids"), getattr(prediction, f"{task}_probs")
        if probs.size:
            probs = temper(probs, float(temperatures.get(task, 1.0)))
        out[task] = (ids[:, :top_k], probs[:, :top_k])
    return TablePrediction(prediction.table_id, out["cta"][0], out["cta"][1], out["cpa"][0], out["cpa"][1],
                           prediction.activation)


def read_calibration(path: str | Path) -> dict:
    """The calibration file the `calibrate` stage writes; a `DataError` naming it when it is not one."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(path, "not found: the `calibrate` stage writes it (`dvc repro calibrate`)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(path, f"not a calibration file ({exc}); rerun `dvc repro calibrate`") from None
    if not isinstance(data, dict) or not isinstance(data.get("checkpoints"), dict):
        raise DataError(path, 'not a calibration file (no "checkpoints" object); rerun `dvc repro calibrate`')
    return data


def temperatures_for(calibration: Mapping, fingerprint: str, where: str | Path = "calibration") -> dict | None:
    """The temperatures {cta, cpa} the calibration file fitted for the checkpoint of this
    fingerprint (whatever its path), or None when it has none for it."""
    for entry in calibration["checkpoints"].values():
        if isinstance(entry, Mapping) and entry.get("fingerprint") == fingerprint:
            temperatures = entry.get("temperature")
            if not isinstance(temperatures, Mapping) or not all(
                    isinstance(temperatures.get(task), (int, float)) and not isinstance(temperatures.get(task), bool)
                    and 0 < temperatures[task] < math.inf for task in TASKS):
                raise DataError(Path(where), f"bad temperature {temperatures!r} for fingerprint {fingerprint[:16]}; "
                                             f"rerun `dvc repro calibrate`")
            return {task: float(temperatures[task]) for task in TASKS}
    return None


__all__ = ["BINS", "Scored", "TARGET_ACCURACY", "THRESHOLDS", "coverage_curve", "expected_calibration_error",
           "fit_temperature", "for_accuracy", "most_accurate", "nll", "read_calibration", "reliability", "summary", "temper",
           "temper_prediction", "temperatures_for"]

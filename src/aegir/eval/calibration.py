"""Confidence a user can act on: how well a checkpoint's top-1 confidences are calibrated, a
post-hoc map per task that calibrates them, and the coverage / accuracy trade-off of a minimum
confidence.

A column's (CTA) or pair's (CPA) label distribution here is the one the pipeline scores it with:
its reads merged (column groups, row views: `aegir.eval.grouped`), and its label the one joint
decoding chose (`aegir.eval.joint`; the argmax where a checkpoint does not decode jointly). Its
**confidence** is that label's probability.

* **ECE** (`expected_calibration_error`): the top-1 confidences in `BINS` equal-width bins over
  [0, 1] (bin i holds i/B ≤ confidence < (i+1)/B, the last one 1.0 as well), and
  Σ_bins |accuracy − mean confidence| · n_bin / N. 0 is perfect.
* **Temperature** (`temper`, `fit_temperature`): a distribution p becomes p^(1/T) / Σ p^(1/T),
  the softmax of log p / T (T > 1 softens, T < 1 sharpens), T minimising the mean negative
  log-likelihood of the gold labels (a golden-section search over log T in [`T_MIN`, `T_MAX`],
  rounded to 4 decimals). The `calibrate` stage fitted one on the synthetic `valid` split until
  it was shown to make the confidences on real tables worse (docs/experiments.md, "A temperature
  from a synthetic split does not calibrate real"); `scripts/calibration_lofo.py` still fits it
  beside the logistic map, for comparison.
* **Beta map** (`fit_map`, `apply_map`; beta calibration of the top-1 confidence, Kull, Silva
  Filho and Flach, 2017): a confidence c becomes σ(a · ln c − d · ln(1 − c) + b), the three
  numbers per task fitted by maximum likelihood on whether each target's chosen label is right
  (Newton's method with halved steps, a tiny ridge). With d = a it is the **logistic map** (Platt
  scaling, a · logit(c) + b; `fit_logistic`), which the `calibrate` stage fitted before: one
  slope for both ends moves low and high confidences apart or together and shifts them all, while
  the beta map bends the two ends apart, which the confidences of label-smoothed models need
  (their accuracy climbs steeply at low confidence and flattens near the top: docs/experiments.md,
  "A beta map instead of the logistic one"). It is monotone for a, d > 0 (both are kept ≥
  `A_MIN`), so a column's label and the order of the columns by confidence do not change. The
  `calibrate` stage fits it on the real split, the only real tables the pipeline has, and
  measures it **out of family** (`out_of_family`): each real family's targets get the map fitted
  on the other families', so the figure says what a table of a kind the map never saw can
  expect. `map_prediction` applies it to a prediction: the chosen label's probability is mapped,
  the other labels keep their ratios to each other.
* **Coverage** (`coverage_curve`): for each minimum confidence P in `THRESHOLDS` (0, 0.05, …,
  0.95, 0.97, 0.99), the share of columns whose confidence is ≥ P (kept; the others `aegir annotate
  --min-confidence P` writes as `unknown`) and the accuracy on those; `for_accuracy` finds the
  first P that reaches a target accuracy (`TARGET_ACCURACY`) and the coverage it leaves, and
  `most_accurate` the P of the highest accuracy (for a target no P reaches).

Every figure is a fraction in [0, 1]. The `calibrate` stage (`aegir.stages.calibrate`) writes
them for each checkpoint the report compares; `aegir annotate` applies the fitted map
(`maps_for`) to the checkpoint it loads, found by its fingerprint.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
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
CLIP = 1e-6  # confidences are kept inside [CLIP, 1 − CLIP] before their log-odds
A_MIN = 0.05  # the least slope of a map on either end (`fit_map`, `fit_logistic`): it keeps the order of confidences
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


def logit(confidences: np.ndarray) -> np.ndarray:
    """The log-odds of `confidences`, each clipped into [CLIP, 1 − CLIP] first, float64."""
    c = np.clip(np.asarray(confidences, dtype=np.float64), CLIP, 1.0 - CLIP)
    return np.log(c / (1.0 - c))


def fit_logistic(confidences: np.ndarray, correct: np.ndarray, iterations: int = 100) -> tuple[float, float]:
    """(a, b) of the logistic map P(right) = σ(a · logit(c) + b) (the beta map with d = a):
    maximum likelihood by Newton's method with a tiny ridge (so targets all right or all wrong
    still give finite numbers), rounded to `DIGITS`; (1, 0), the identity, for no targets. The
    slope is kept ≥ `A_MIN` (b then refitted alone): confidences that say nothing about being
    right (an untrained model's) would otherwise get a slope ≤ 0, a map that flattens or reverses
    their order, and `--min-confidence` would keep the least sure labels."""
    x, y = logit(confidences), np.asarray(correct, dtype=np.float64)
    if len(x) == 0:
        return 1.0, 0.0
    a, b = _fit_increasing(np.stack([x, np.ones_like(x)], axis=1), y, np.array([1.0, 0.0]), 1, iterations)
    return round(a, DIGITS), round(b, DIGITS)


def beta_features(confidences: np.ndarray) -> np.ndarray:
    """(N, 3) the beta map's features of `confidences` (clipped as `logit` clips them): ln c,
    −ln(1 − c), 1; a map (a, b, d) weighs them by (a, d, b)."""
    c = np.clip(np.asarray(confidences, dtype=np.float64), CLIP, 1.0 - CLIP)
    return np.stack([np.log(c), -np.log1p(-c), np.ones_like(c)], axis=1)


def fit_map(confidences: np.ndarray, correct: np.ndarray, iterations: int = 100) -> tuple[float, float, float]:
    """(a, b, d) of the beta map P(right) = σ(a · ln c − d · ln(1 − c) + b): maximum likelihood by
    Newton's method with a tiny ridge, rounded to `DIGITS`; (1, 0, 1), the identity, for no
    targets. a and d are each kept ≥ `A_MIN` (a coefficient below it is held there and the others
    refitted), so the map is increasing: it never reverses the order of confidences (see
    `fit_logistic`), and confidences that say nothing about being right get a nearly flat map
    at their accuracy."""
    y = np.asarray(correct, dtype=np.float64)
    if len(y) == 0:
        return 1.0, 0.0, 1.0
    # weights (a, d, b) of the features (ln c, −ln(1 − c), 1), from the identity
    a, d, b = _fit_increasing(beta_features(confidences), y, np.array([1.0, 1.0, 0.0]), 2, iterations)
    return round(a, DIGITS), round(b, DIGITS), round(d, DIGITS)


def _fit_increasing(x: np.ndarray, y: np.ndarray, w: np.ndarray, slopes: int, iterations: int) -> list[float]:
    """The weights of P(y) = σ(x · w) by `_newton` from `w`, its first `slopes` entries kept ≥
    `A_MIN`: a slope fitted below it is held there and the other weights refitted, until none is
    (what keeps a map increasing: `fit_logistic`, `fit_map`)."""
    free = np.ones(len(w), dtype=bool)
    for _ in range(slopes + 1):  # each pass may hold one more slope
        w = _newton(x, y, w, iterations, free)
        low = free[:slopes] & (w[:slopes] < A_MIN)
        if not low.any():
            break
        free[:slopes] &= ~low
        w[:slopes] = np.where(low, A_MIN, w[:slopes])
    return [float(v) for v in w]


def _logistic_nll(x: np.ndarray, y: np.ndarray, w: np.ndarray, ridge: float) -> float:
    z = x @ w
    return float(np.sum(np.logaddexp(0.0, z) - y * z)) + 0.5 * ridge * float(w @ w)


def _newton(x: np.ndarray, y: np.ndarray, w: np.ndarray, iterations: int, free: np.ndarray | None = None) -> np.ndarray:
    """Newton's method on the logistic likelihood of P(y) = σ(x · w) over the `free` entries of w
    (all by default; the others held), each step halved until the likelihood improves (a full
    Newton step can overshoot and diverge)."""
    ridge = 1e-6
    w = np.asarray(w, dtype=np.float64).copy()
    free = np.ones(len(w), dtype=bool) if free is None else np.asarray(free, dtype=bool)
    if not free.any():
        return w
    loss = _logistic_nll(x, y, w, ridge)
    xf = x[:, free]
    for _ in range(iterations):
        p = 0.5 * (1.0 + np.tanh(0.5 * (x @ w)))  # σ without overflow
        grad = xf.T @ (p - y) + ridge * w[free]
        hess = xf.T @ (xf * (p * (1.0 - p))[:, None]) + ridge * np.eye(int(free.sum()))
        step = np.zeros_like(w)
        step[free] = np.linalg.solve(hess, grad)
        scale = 1.0
        while scale > 1e-8:
            new = w - scale * step
            new_loss = _logistic_nll(x, y, new, ridge)
            if new_loss <= loss:
                break
            scale *= 0.5
        else:
            break  # no step improves: a minimum up to float precision
        w, loss = new, new_loss
        if not np.all(np.isfinite(w)):
            raise ValueError("the calibration map did not converge")
        if scale * np.abs(step).max() < 1e-10:
            break
    return w


def apply_map(confidences: np.ndarray, a: float, b: float, d: float | None = None) -> np.ndarray:
    """σ(a · ln c − d · ln(1 − c) + b) of each confidence, float64; d None: d = a, the logistic
    map σ(a · logit(c) + b)."""
    x = beta_features(confidences)
    z = a * x[:, 0] + (a if d is None else d) * x[:, 1] + b
    return 1.0 / (1.0 + np.exp(-z))


def out_of_family(confidences: np.ndarray, correct: np.ndarray, groups: np.ndarray,
                  fit: Callable[[np.ndarray, np.ndarray], tuple] = fit_map) -> np.ndarray | None:
    """Each target's confidence under the map `fit` gives on the targets of the *other* groups
    (leave-one-group-out), applied by `apply_map`; None with fewer than two groups (nothing to
    fit on outside one)."""
    groups = np.asarray(groups)
    names = np.unique(groups)
    if len(names) < 2:
        return None
    confidences, correct = np.asarray(confidences, dtype=np.float64), np.asarray(correct, dtype=bool)
    out = np.zeros(len(confidences))
    for name in names:
        held = groups == name
        out[held] = apply_map(confidences[held], *fit(confidences[~held], correct[~held]))
    return out


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


def map_prediction(prediction: TablePrediction, maps: Mapping[str, tuple[float, ...]]) -> TablePrediction:
    """`prediction` with each task's chosen label's probability (its rows' first) mapped by that
    task's map ((a, b, d), or (a, b) a logistic one: `apply_map`) and the others scaled to fill
    the rest, their ratios kept: the labels and their order do not change."""
    out = {}
    for task in TASKS:
        ids, probs = getattr(prediction, f"{task}_ids"), getattr(prediction, f"{task}_probs")
        if probs.size and task in maps:
            probs = np.asarray(probs, dtype=np.float64)
            first = probs[:, 0]
            mapped = apply_map(first, *maps[task])
            rest = np.where(first < 1.0, (1.0 - mapped) / np.maximum(1.0 - first, FLOOR), 0.0)
            probs = np.concatenate([mapped[:, None], probs[:, 1:] * rest[:, None]], axis=1)
        out[task] = (ids, probs)
    return TablePrediction(prediction.table_id, out["cta"][0], out["cta"][1], out["cpa"][0], out["cpa"][1],
                           prediction.activation, prediction.activation_any)


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


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def entry_for(calibration: Mapping, fingerprint: str) -> Mapping | None:
    """The calibration file's entry of the checkpoint of this fingerprint (whatever its path), or
    None when it has none."""
    for entry in calibration["checkpoints"].values():
        if isinstance(entry, Mapping) and entry.get("fingerprint") == fingerprint:
            return entry
    return None


def map_numbers(fitted: Mapping) -> tuple:
    """(a, b, d) of one task's map as calibration.json writes it; a map without `d` is a logistic
    one, d = a (the stage wrote those before the beta map)."""
    return fitted["a"], fitted["b"], fitted.get("d", fitted["a"])


def maps_for(calibration: Mapping, fingerprint: str, where: str | Path = "calibration") -> dict | None:
    """The maps {cta: (a, b, d), cpa: (a, b, d)} the calibration file fitted for the checkpoint of
    this fingerprint (`entry_for`), or None when it has none for it; a map without `d` is a
    logistic one (d = a). A `DataError` naming the file for a map that is not finite numbers
    with a > 0 and d > 0 (a map that would reverse the order of confidences)."""
    entry = entry_for(calibration, fingerprint)
    if entry is None:
        return None
    maps = entry.get("map")

    def valid(fitted) -> bool:
        if not isinstance(fitted, Mapping) or not all(_number(fitted.get(k)) for k in ("a", "b")):
            return False
        a, _, d = map_numbers(fitted)
        return _number(d) and a > 0 and d > 0

    if not isinstance(maps, Mapping) or not all(valid(maps.get(task)) for task in TASKS):
        raise DataError(Path(where), f"bad calibration map {maps!r} for fingerprint {fingerprint[:16]}; "
                                     f"rerun `dvc repro calibrate`")
    return {task: tuple(float(v) for v in map_numbers(maps[task])) for task in TASKS}


__all__ = ["BINS", "Scored", "TARGET_ACCURACY", "THRESHOLDS", "apply_map", "coverage_curve", "entry_for",
           "expected_calibration_error", "fit_logistic", "fit_map", "fit_temperature", "for_accuracy", "logit",
           "map_numbers", "map_prediction", "maps_for", "most_accurate", "nll", "out_of_family", "read_calibration",
           "reliability", "summary", "temper"]

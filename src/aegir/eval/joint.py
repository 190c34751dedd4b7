"""Joint decoding of a table's labels: each column's label chosen with the others in view.

The model gives every column a label distribution, and the usual reading takes each column's
most probable label on its own. Two columns of one table then often take the same label where
tables almost never repeat it: a fax column that reads like a telephone column beside the
telephone column itself (docs/experiments.md, "The fax columns"), or two columns claiming the same
CPA relation to the subject, which no table of any split does. Joint decoding picks one label per
column for the whole table at once, maximising

    Σ_c log p_c(l_c)  +  β · Σ_L (n_L − 1)⁺ · log ρ_L

where n_L is how many columns take label L and ρ_L the share of training tables holding L that
hold it on more than one column (`label_repeats`; smoothed, ρ_L = (repeats + ½) / (tables + 1)).
β = 0 is the columnwise argmax; a label that tables often repeat (`Number`, a pair of
coordinates) costs little to repeat, one they never repeat costs −β·log ρ_L per extra column.

The maximum is exact: a min-cost assignment of the columns to label "slots" (each label's first
slot free, every further slot costing −β·log ρ_L), solved by
`scipy.optimize.linear_sum_assignment`; `decode_labels_exhaustive` is the literal search over
every assignment that the tests hold it to. The CPA of column 0 (the subject) is never decoded.

Where it is used: `aegir.eval.grouped.predict_tables` decodes each table after its reads are
merged, with `reading.joint_cta` / `reading.joint_cpa` as β and the repeat counts of the model's
own training tables, recorded in its checkpoint's config.json (`label_repeats`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial

import numpy as np
from scipy.optimize import linear_sum_assignment

from aegir.data.batch import IGNORE_INDEX
from aegir.eval.predict import TablePrediction
from aegir.eval.reads import dense_distributions
from aegir.labels import label_counts

TASKS = ("cta", "cpa")
CONFIG_KEY = "label_repeats"  # where a checkpoint's config.json records the counts


@dataclass(frozen=True)
class LabelRepeats:
    """Per task and label: in how many training tables the label occurs (`tables`) and in how
    many of those on more than one column (`repeated`); (labels,) int64 each."""

    tables: Mapping[str, np.ndarray]
    repeated: Mapping[str, np.ndarray]

    def log_rate(self, task: str) -> np.ndarray:
        """log ρ_L, the smoothed log share of tables holding L that repeat it. (labels,) ≤ 0"""
        return np.log((self.repeated[task] + 0.5) / (self.tables[task] + 1.0))

    def to_json(self) -> dict:
        return {task: {"tables": self.tables[task].tolist(), "repeated": self.repeated[task].tolist()}
                for task in TASKS}

    @classmethod
    def from_json(cls, data: Mapping, sizes: Mapping[str, int], where: str) -> LabelRepeats:
        """The counts `to_json` wrote; `sizes` = label count per task. A malformed entry is a
        ValueError naming `where`."""
        tables, repeated = {}, {}
        for task in TASKS:
            try:
                entry = data[task]
                tables[task] = np.asarray(entry["tables"], dtype=np.int64)
                repeated[task] = np.asarray(entry["repeated"], dtype=np.int64)
            except (KeyError, TypeError, ValueError) as err:
                raise ValueError(f"{where}: {CONFIG_KEY}.{task} is malformed ({err!r})") from err
            for name, counts in (("tables", tables[task]), ("repeated", repeated[task])):
                if counts.shape != (sizes[task],) or (counts < 0).any():
                    raise ValueError(f"{where}: {CONFIG_KEY}.{task}.{name} must be {sizes[task]} counts ≥ 0")
            if (repeated[task] > tables[task]).any():
                raise ValueError(f"{where}: {CONFIG_KEY}.{task}: a label repeats in more tables than hold it")
        return cls(tables, repeated)


def label_repeats(labelled: Iterable[tuple[np.ndarray, np.ndarray]], sizes: Mapping[str, int]) -> LabelRepeats:
    """The counts of training tables given as (cta_labels, cpa_labels) pairs of (C,) class ids
    (IGNORE_INDEX where unlabelled; column 0's CPA is not a relation and is skipped)."""
    tables = {task: np.zeros(sizes[task], dtype=np.int64) for task in TASKS}
    repeated = {task: np.zeros(sizes[task], dtype=np.int64) for task in TASKS}
    for cta, cpa in labelled:
        for task, ids in (("cta", np.asarray(cta)), ("cpa", np.asarray(cpa)[1:])):
            labels, counts = np.unique(ids[ids != IGNORE_INDEX], return_counts=True)
            tables[task][labels] += 1
            repeated[task][labels[counts > 1]] += 1
    return LabelRepeats(tables, repeated)


def decode_labels(probs: np.ndarray, log_rate: np.ndarray, weight: float) -> np.ndarray:
    """The labels (C,) int64 that maximise the objective above for one table's distributions
    `probs` (C, labels), `log_rate` (labels,) its log ρ, `weight` β ≥ 0."""
    columns, labels = probs.shape
    if weight == 0 or columns < 2:
        return probs.argmax(axis=1)
    log_p = np.log(np.clip(probs.astype(np.float64), 1e-30, None))  # (C, labels)
    repeat_cost = -weight * log_rate  # (labels,) ≥ 0
    # slot s of label L is column s·labels + L: slot 0 costs nothing, every later slot the repeat cost
    cost = np.concatenate([-log_p] + [-log_p + repeat_cost[None, :]] * (columns - 1), axis=1)
    rows, slots = linear_sum_assignment(cost)
    out = np.empty(columns, dtype=np.int64)
    out[rows] = slots % labels
    return out


def objective(probs: np.ndarray, log_rate: np.ndarray, weight: float, chosen: Iterable[int]) -> float:
    """The objective of one assignment `chosen` (a label per column)."""
    chosen = list(chosen)
    log_p = np.log(np.clip(probs.astype(np.float64), 1e-30, None))
    total = sum(log_p[c, label] for c, label in enumerate(chosen))
    counts: dict[int, int] = {}
    for label in chosen:
        counts[label] = counts.get(label, 0) + 1
    return float(total + weight * sum((n - 1) * log_rate[label] for label, n in counts.items()))


def decode_labels_exhaustive(probs: np.ndarray, log_rate: np.ndarray, weight: float) -> np.ndarray:
    """The reference: every assignment of labels to columns tried, the best kept (labels^C of
    them: tiny inputs only)."""
    columns, labels = probs.shape
    best, best_value = None, -math.inf
    for chosen in itertools.product(range(labels), repeat=columns):
        value = objective(probs, log_rate, weight, chosen)
        if value > best_value + 1e-12:
            best, best_value = chosen, value
    return np.asarray(best, dtype=np.int64)


def _chosen_first(ids: np.ndarray, probs: np.ndarray, chosen: np.ndarray, rows: slice) -> tuple[np.ndarray, np.ndarray]:
    """ids, probs (C, k) reordered in `rows` so that each row's chosen label comes first, the
    others after it in their order."""
    ids, probs = ids.copy(), probs.copy()
    for row in range(*rows.indices(len(ids))):
        position = int(np.flatnonzero(ids[row] == chosen[row])[0])
        if position:
            order = [position, *range(position), *range(position + 1, ids.shape[1])]
            ids[row], probs[row] = ids[row, order], probs[row, order]
    return ids, probs


def decode_table(prediction: TablePrediction, repeats: LabelRepeats, weights: Mapping[str, float]) -> TablePrediction:
    """`prediction` (every label's probability, as `aegir.eval.grouped.ALL_LABELS` gives) with
    each column's jointly decoded label first; a task of weight 0 is left as it is."""
    out = {}
    dense = dense_distributions([prediction], {task: len(repeats.tables[task]) for task in TASKS})
    for task in TASKS:
        ids, probs = getattr(prediction, f"{task}_ids"), getattr(prediction, f"{task}_probs")
        weight = weights[task]
        first = 1 if task == "cpa" else 0  # the subject column has no relation to itself
        if weight == 0 or len(ids) - first < 2:
            out[task] = (ids, probs)
            continue
        chosen = np.zeros(len(ids), dtype=np.int64)
        chosen[first:] = decode_labels(dense[task][first:].numpy(), repeats.log_rate(task), weight)
        out[task] = _chosen_first(ids, probs, chosen, slice(first, None))
    return TablePrediction(prediction.table_id, out["cta"][0], out["cta"][1], out["cpa"][0], out["cpa"][1],
                           prediction.activation, prediction.activation_any)


def table_decoder(repeats: LabelRepeats | None, weights: Mapping[str, float],
                  where: str = "joint decoding") -> Callable[[TablePrediction], TablePrediction] | None:
    """`decode_table` with these settings, for `aegir.eval.grouped.predict_tables`; None when
    every weight is 0 (each column's argmax). Weights above 0 without counts are an error."""
    if not any(weights[task] for task in TASKS):
        return None
    if repeats is None:
        raise ValueError(f"{where}: joint decoding (weights {dict(weights)}) needs the label repeat counts "
                         f"of the model's training tables ({CONFIG_KEY} in its config.json)")
    return partial(decode_table, repeats=repeats, weights={task: float(weights[task]) for task in TASKS})


def repeats_of(config: Mapping, where: str) -> LabelRepeats | None:
    """The counts a checkpoint's config.json records (None when it predates them)."""
    if CONFIG_KEY not in config:
        return None
    return LabelRepeats.from_json(config[CONFIG_KEY], label_counts(), where)

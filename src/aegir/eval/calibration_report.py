"""What the `calibrate` stage computes and prints: a checkpoint's scored targets per split
(`scored_targets`), its entry of calibration.json (`calibrate_checkpoint`: the temperature fitted
on `FIT_SPLIT`, ECE before and after, the coverage curve on `real` of the model's own confidences and
of the tempered ones), the file's content
(`calibration_content`) and the summary lines (`summary_lines`). `aegir.eval.calibration` says
how each figure is computed.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from aegir.config import EVAL_SPLITS, REAL_SPLIT
from aegir.data.batch import IGNORE_INDEX
from aegir.data.prepared import split_path
from aegir.errors import DataError
from aegir.eval.calibration import (
    BINS,
    TARGET_ACCURACY,
    TASKS,
    THRESHOLDS,
    Scored,
    coverage_curve,
    fit_temperature,
    for_accuracy,
    most_accurate,
    reliability,
    summary,
)
from aegir.eval.report import reach_text

FIT_SPLIT = "valid"
STORED = "stored"  # calibration.json's `distributions` of a checkpoint read wholly from its stored reads


def labelled_columns(example, task: str) -> list[int]:
    """The columns of `example` that are `task`'s scored targets, in order: every labelled column
    (CTA), every labelled column c ≥ 1 of the pair (0, c) (CPA)."""
    gold = getattr(example, f"{task}_labels")
    return [c for c in range(1 if task == "cpa" else 0, example.num_columns) if gold[c] != IGNORE_INDEX]


def scored_targets(examples, predictions, sizes: Mapping[str, int]) -> dict[str, Scored]:
    """Per task the `Scored` targets of a split: every labelled column (CTA) and labelled pair
    (0, c ≥ 1) (CPA), from predictions that hold every label (`ALL_LABELS`), the chosen one first."""
    rows: dict[str, tuple[list, list, list]] = {task: ([], [], []) for task in TASKS}
    for example, prediction in zip(examples, predictions):
        for task in TASKS:
            ids, probs = getattr(prediction, f"{task}_ids"), getattr(prediction, f"{task}_probs")
            gold = getattr(example, f"{task}_labels")
            if ids.ndim != 2 or (len(ids) and ids.shape[1] != sizes[task]):
                raise ValueError(f"{example.table_id}: {task} predictions do not hold all {sizes[task]} labels")
            for c in labelled_columns(example, task):
                dense = np.zeros(sizes[task], dtype=np.float64)
                dense[ids[c]] = probs[c]
                rows[task][0].append(dense)
                rows[task][1].append(int(ids[c, 0]))
                rows[task][2].append(int(gold[c]))
    return {task: Scored(np.stack(p) if p else np.zeros((0, sizes[task])), np.asarray(c, dtype=np.int64),
                         np.asarray(g, dtype=np.int64))
            for task, (p, c, g) in rows.items()}


def calibrate_checkpoint(targets: Mapping[str, Mapping[str, Scored]], fit_split: str = FIT_SPLIT,
                         real_split: str = REAL_SPLIT) -> dict:
    """One checkpoint's entry of calibration.json (less its fingerprint) from its targets per split."""
    temperature = {task: fit_temperature(targets[fit_split][task].probs, targets[fit_split][task].gold)
                   for task in TASKS}
    splits = {}
    for split, by_task in targets.items():
        splits[split] = {}
        for task, scored in by_task.items():
            before = summary(scored.confidences(), scored.correct)
            after = summary(scored.confidences(temperature[task]), scored.correct)
            splits[split][task] = {"n": before["n"], "accuracy": before["accuracy"],
                                   "before": {k: before[k] for k in ("mean_confidence", "ece")},
                                   "after": {k: after[k] for k in ("mean_confidence", "ece")}}
    real = {}
    for task, scored in targets.get(real_split, {}).items():
        own, calibrated = scored.confidences(), scored.confidences(temperature[task])
        # the curve of the confidences `aegir annotate --min-confidence P` compares with P by
        # default (the model's own), and beside it the one of `--calibration` (the temperature's)
        curve, tempered = coverage_curve(own, scored.correct), coverage_curve(calibrated, scored.correct)
        real[task] = {"coverage": curve, "for_accuracy": for_accuracy(curve), "most_accurate": most_accurate(curve),
                      "tempered": {"coverage": tempered, "for_accuracy": for_accuracy(tempered),
                                   "most_accurate": most_accurate(tempered)},
                      "reliability": {"before": reliability(own, scored.correct),
                                      "after": reliability(calibrated, scored.correct)}}
    return {"temperature": temperature, "splits": splits, real_split: real}


def calibration_content(entries: Mapping[str, Mapping]) -> dict:
    """calibration.json: the settings every figure was computed with, and the checkpoints'
    `entries` (path → its name, fingerprint, where its distributions came from and
    `calibrate_checkpoint`'s entry)."""
    return {"fit_split": FIT_SPLIT, "real_split": REAL_SPLIT, "bins": BINS, "thresholds": list(THRESHOLDS),
            "target_accuracy": TARGET_ACCURACY,
            "method": "one temperature per task, p^(1/T) renormalised, T minimising the NLL of the gold labels "
                      f"on {FIT_SPLIT}; confidences and accuracies are fractions (aegir.eval.calibration)",
            "checkpoints": entries}


def evaluation_splits(data: Path) -> list[str]:
    """The evaluation splits prepared under `data` (`valid` and `real` required)."""
    if not data.is_dir():
        raise DataError(data, "prepared data not found; run `dvc repro prepare` first")
    splits = [s for s in EVAL_SPLITS if split_path(data, s).is_file()]
    for required in (FIT_SPLIT, REAL_SPLIT):
        if required not in splits:
            raise DataError(split_path(data, required), "missing: the calibrate stage needs it; run `dvc repro prepare`")
    return splits


def summary_lines(content: Mapping) -> list[str]:
    """What the stage prints of calibration.json's `content`: per checkpoint where its
    distributions came from, and per task its temperature, its ECE on `real` and `valid` before
    and after it, and the minimum confidence that reaches `TARGET_ACCURACY` on `real`."""
    lines = []
    for path, entry in content["checkpoints"].items():
        source = entry.get("distributions", "")
        lines.append(f"calibrate: {path}: " + ("the distributions its stage stored (eval_reads.safetensors), "
                                               "not re-scored" if source == STORED else source))
        for task in TASKS:
            real = entry["splits"][REAL_SPLIT][task]
            valid = entry["splits"][FIT_SPLIT][task]
            reach = reach_text(entry[REAL_SPLIT][task]["for_accuracy"], entry[REAL_SPLIT][task]["most_accurate"])
            lines.append(f"calibrate: {path} {task.upper()}: T={entry['temperature'][task]:g}; ECE real "
                         f"{100 * real['before']['ece']:.1f} → {100 * real['after']['ece']:.1f} %, valid "
                         f"{100 * valid['before']['ece']:.1f} → {100 * valid['after']['ece']:.1f} %; "
                         f"{100 * TARGET_ACCURACY:.0f} % accuracy on real: {reach}")
    return lines

"""What the `calibrate` stage computes and prints: a checkpoint's scored targets per split
(`scored_targets`) and the `real` family of each (`target_families`), its entry of
calibration.json (`calibrate_checkpoint`: the beta map fitted on `FIT_SPLIT`, ECE before and
after it, the map's out-of-family figures and the coverage curves on `real`), the file's content
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
    apply_map,
    coverage_curve,
    fit_map,
    for_accuracy,
    most_accurate,
    out_of_family,
    reliability,
    summary,
)
from aegir.eval.report import reach_text

FIT_SPLIT = REAL_SPLIT  # the map is fitted on the real tables: no synthetic split calibrates them
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


def target_families(examples) -> dict[str, np.ndarray]:
    """Per task the `real` family (`aegir.data.real.family_of`) of each target `scored_targets`
    gives for `examples`, in its order."""
    from aegir.data.real import family_of, layout_families

    layouts = layout_families()
    out: dict[str, list[str]] = {task: [] for task in TASKS}
    for example in examples:
        family = family_of(example.table_id, layouts)
        for task in TASKS:
            out[task] += [family] * len(labelled_columns(example, task))
    return {task: np.asarray(families, dtype=str) for task, families in out.items()}


def _curve(confidences: np.ndarray, correct: np.ndarray) -> dict:
    curve = coverage_curve(confidences, correct)
    return {"coverage": curve, "for_accuracy": for_accuracy(curve), "most_accurate": most_accurate(curve)}


def calibrate_checkpoint(targets: Mapping[str, Mapping[str, Scored]], families: Mapping[str, np.ndarray],
                         fit_split: str = FIT_SPLIT) -> dict:
    """One checkpoint's entry of calibration.json (less its fingerprint) from its targets per split
    and the family of each `fit_split` target (`target_families`): per task the beta map
    fitted on all of `fit_split`; per split ECE before and after it (on `fit_split` itself the
    fitted tables); on `fit_split` the coverage curve of the model's own confidences and, under
    `out_of_family`, the ECE, coverage curve and reliability of each target mapped by the map
    fitted on the other families (None with fewer than two families)."""
    maps = {task: fit_map(targets[fit_split][task].confidences(), targets[fit_split][task].correct)
            for task in TASKS}
    splits = {}
    for split, by_task in targets.items():
        splits[split] = {}
        for task, scored in by_task.items():
            own = scored.confidences()
            before = summary(own, scored.correct)
            after = summary(apply_map(own, *maps[task]), scored.correct)
            splits[split][task] = {"n": before["n"], "accuracy": before["accuracy"],
                                   "before": {k: before[k] for k in ("mean_confidence", "ece")},
                                   "after": {k: after[k] for k in ("mean_confidence", "ece")}}
    real = {}
    for task, scored in targets[fit_split].items():
        own = scored.confidences()
        held_out = out_of_family(own, scored.correct, families[task])
        entry = {**_curve(own, scored.correct), "out_of_family": None,
                 "reliability": {"before": reliability(own, scored.correct), "out_of_family": None}}
        if held_out is not None:
            entry["out_of_family"] = {"families": len(np.unique(families[task])),
                                      **{k: v for k, v in summary(held_out, scored.correct).items()
                                         if k in ("mean_confidence", "ece")},
                                      **_curve(held_out, scored.correct)}
            entry["reliability"]["out_of_family"] = reliability(held_out, scored.correct)
        real[task] = entry
    return {"map": {task: {"a": a, "b": b, "d": d} for task, (a, b, d) in maps.items()}, "splits": splits,
            fit_split: real}


def calibration_content(entries: Mapping[str, Mapping]) -> dict:
    """calibration.json: the settings every figure was computed with, and the checkpoints'
    `entries` (path → its name, fingerprint, where its distributions came from and
    `calibrate_checkpoint`'s entry)."""
    return {"fit_split": FIT_SPLIT, "real_split": REAL_SPLIT, "bins": BINS, "thresholds": list(THRESHOLDS),
            "target_accuracy": TARGET_ACCURACY,
            "method": f"per task a beta map of the top-1 confidence, sigma(a*ln(c) - d*ln(1-c) + b), fitted by "
                      f"maximum likelihood on {FIT_SPLIT}; out_of_family: each {REAL_SPLIT} family mapped by the map "
                      f"fitted on the other families; confidences and accuracies are fractions "
                      f"(aegir.eval.calibration)",
            "checkpoints": entries}


def evaluation_splits(data: Path) -> list[str]:
    """The evaluation splits prepared under `data` (`real` required)."""
    if not data.is_dir():
        raise DataError(data, "prepared data not found; run `dvc repro prepare` first")
    splits = [s for s in EVAL_SPLITS if split_path(data, s).is_file()]
    if FIT_SPLIT not in splits:
        raise DataError(split_path(data, FIT_SPLIT), "missing: the calibrate stage needs it; run `dvc repro prepare`")
    return splits


def summary_lines(content: Mapping) -> list[str]:
    """What the stage prints of calibration.json's `content`: per checkpoint where its
    distributions came from, and per task its map, its ECE on `real` with its own confidences and
    out of family, and the minimum (calibrated) confidence that reaches `TARGET_ACCURACY` there."""
    lines = []
    for path, entry in content["checkpoints"].items():
        source = entry.get("distributions", "")
        lines.append(f"calibrate: {path}: " + ("the distributions its stage stored (eval_reads.safetensors), "
                                               "not re-scored" if source == STORED else source))
        for task in TASKS:
            real = entry[REAL_SPLIT][task]
            own = entry["splits"][REAL_SPLIT][task]["before"]["ece"]
            held = real["out_of_family"]
            fitted = entry["map"][task]
            if held is None:
                tail = "out of family: fewer than two families"
            else:
                tail = (f"out of family {100 * held['ece']:.1f} %; {100 * TARGET_ACCURACY:.0f} % accuracy: "
                        f"{reach_text(held['for_accuracy'], held['most_accurate'])}")
            lines.append(f"calibrate: {path} {task.upper()}: map a={fitted['a']:.3g} b={fitted['b']:.3g} d={fitted['d']:.3g}; ECE real own "
                         f"{100 * own:.1f} %, {tail}")
    return lines

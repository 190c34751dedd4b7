"""Stage `calibrate`: how far each checkpoint's confidences can be trusted, and the temperature
that makes them trustworthy (`aegir.eval.calibration` says how each figure is computed).

    python -m aegir.stages.calibrate --data data/prepared --models models --out results/calibrate

For each checkpoint the report compares (`CHECKPOINTS`, under --models; or each --checkpoint) it
takes every evaluation split of the prepared data as the pipeline scores it (column groups, row
views, joint decoding: `aegir.inference.prepared_predictions`), fits one temperature per task on
`valid` alone, and writes under --out (below). The checkpoint's model is not run where its stage
already did: phase1, phase3 and phase4 store beside each checkpoint what it predicted on every read
of every evaluation split (`eval_reads.safetensors`, `aegir.eval.reads`), and where that store
matches — the checkpoint's fingerprint, the prepared data's, the `prepare` and `reading` settings
its config.json records, the very reads of the split — those distributions are merged and
decoded per table exactly as re-scoring would (`StoredTargets`); only the splits without one (a
user's own checkpoint, say) are read by the model again. The two give the same figures up to the
float rounding of the batches the forward ran in (the stages batch their reads their own way).

  calibration.json   per checkpoint (by its path): its fingerprint, where its distributions came
                     from (`distributions`: "stored", or "re-scored: " and why not, or the
                     splits re-scored), the temperature per task;
                     per split and task the accuracy, and the mean top-1 confidence and ECE
                     before and after the temperature; on `real` per task the coverage curve
                     (kept share and accuracy for each minimum confidence 0, 0.05, …, 0.95, with
                     the temperature), the first minimum confidence that reaches 95 % accuracy
                     with its coverage (null when none does) and the most accurate one, and the
                     reliability bins before and after
  figures/           PNG (DVC plots): reliability.png (accuracy against confidence on `real`,
                     before and after, per checkpoint and task) and coverage.png (accuracy and
                     coverage against the minimum confidence on `real`)

`aegir annotate` finds the temperatures of the checkpoint it loads here, by its fingerprint, and
applies them to every confidence it gives (labels unchanged). The temperature only ever sees
`valid`: `real` and the test splits are measured, never fitted on. Everything is computed before
anything is written; outputs are atomic and byte-identical for the same inputs (PNG included).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from aegir import atomic
from aegir.config import EVAL_SPLITS, REAL_SPLIT, SPLITS
from aegir.data.batch import IGNORE_INDEX
from aegir.data.prepared import split_path
from aegir.errors import AegirError, DataError
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
from aegir.labels import label_counts

FIT_SPLIT = "valid"
# The checkpoints the report compares (aegir.eval.report.CHECKPOINTS), under --models: path → name.
CHECKPOINTS = {"phase1/primary": "Phase 1 primary", "phase3/control": "Phase 3 control",
               "phase3": "Phase 3 fused", "phase4": "Phase 4"}


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
            for c in range(1 if task == "cpa" else 0, example.num_columns):
                if gold[c] == IGNORE_INDEX:
                    continue
                dense = np.zeros(sizes[task], dtype=np.float64)
                dense[ids[c]] = probs[c]
                rows[task][0].append(dense)
                rows[task][1].append(int(ids[c, 0]))
                rows[task][2].append(int(gold[c]))
    return {task: Scored(np.stack(p) if p else np.zeros((0, sizes[task])), np.asarray(c, dtype=np.int64),
                         np.asarray(g, dtype=np.int64))
            for task, (p, c, g) in rows.items()}


def checkpoint_targets(checkpoint: Path, data: Path, splits: Sequence[str]) -> dict[str, dict[str, Scored]]:
    """{split: {task: Scored}} of one checkpoint on prepared data, its model run on every read."""
    from aegir.eval.grouped import ALL_LABELS
    from aegir.inference import prepared_predictions

    sizes = label_counts()
    return {split: scored_targets(examples, predictions, sizes)
            for split, examples, predictions in prepared_predictions(checkpoint, data, splits, ALL_LABELS)}


STORED = "stored"  # calibration.json's `distributions` of a checkpoint read wholly from its stored reads


class StoredTargets:
    """The targets of checkpoints from the distributions their stages stored beside them
    (`aegir.eval.reads`), combined per table as `aegir.inference.prepared_predictions` combines
    its model's: the same reading plan (column groups, row views), the same merge, the recorded
    joint decoding. A checkpoint's store is taken only when its metadata match what re-scoring
    would read — the checkpoint's fingerprint, the prepared data's, and the `prepare` and
    `reading` settings its config.json records (as `phase3` and `phase4` check theirs) — and a
    split only when it holds that split's very reads. Examples and reading plans are loaded once
    per split and shared by the checkpoints that read alike."""

    def __init__(self, data: Path):
        from aegir.data.prepared import fingerprint

        self.data = data
        self.sizes = label_counts()
        self._examples: dict[str, list] = {}
        self._plans: dict[tuple, object] = {}
        try:
            self.data_print: dict[str, str] | None = fingerprint(data, SPLITS)
        except DataError:  # not every split prepared: no stage stored reads of this directory
            self.data_print = None

    def examples(self, split: str) -> list:
        from aegir.data.dataset import load_examples

        if split not in self._examples:
            self._examples[split] = load_examples(self.data, split)
        return self._examples[split]

    def plan(self, split: str, columns: int, views: int, prepare):
        from dataclasses import astuple

        from aegir.eval.grouped import split_reads

        key = (split, columns, views, astuple(prepare))
        if key not in self._plans:
            self._plans[key] = split_reads(self.data, split, self.examples(split), columns, views, prepare)
        return self._plans[key]

    def open(self, directory: Path, recorded: Mapping, **more):
        """`StoredReads.open` of `directory` against the settings re-scoring reads with."""
        from aegir.eval.reads import StoredReads
        from aegir.model.checkpoint import checkpoint_fingerprint

        return StoredReads.open(directory, {"checkpoint": checkpoint_fingerprint(directory), "data": self.data_print,
                                            "prepare": recorded.get("prepare"), "reading": recorded.get("reading"),
                                            **more})

    def targets(self, checkpoint: Path, splits: Sequence[str]) -> tuple[dict[str, dict[str, Scored]], str]:
        """({split: {task: Scored}} of the splits the checkpoint's stored reads cover, which of
        `splits` they are: `STORED` for all, else why not). The checkpoint is loaded (and so
        checked: a changed specialist or sub-agent is the error re-scoring gives), never run."""
        from aegir.swarm.model import is_swarm_checkpoint

        if self.data_print is None:
            return {}, f"re-scored: {self.data} does not hold every prepared split (no stage stored its reads)"
        if is_swarm_checkpoint(checkpoint):
            targets, why_not = self._swarm(checkpoint, splits)
        else:
            targets, why_not = self._model(checkpoint, splits)
        if not targets:
            return {}, f"re-scored: {why_not}"
        missing = [split for split in splits if split not in targets]
        return targets, STORED if not missing else f"{STORED}; re-scored on {', '.join(missing)}: {why_not}"

    def _model(self, checkpoint: Path, splits: Sequence[str]) -> tuple[dict, str]:
        """A plain model's or an orchestrator's: its reads, merged and decoded as it reads them."""
        from aegir.eval.grouped import ALL_LABELS, predict_tables
        from aegir.eval.reads import stored_predictions
        from aegir.inference import load_for_inference

        annotator = load_for_inference(checkpoint)  # the reading prepared_predictions would use
        config = json.loads((checkpoint / "config.json").read_text(encoding="utf-8"))
        store, why_not = self.open(checkpoint, config.get("params", {}))
        if store is None:
            return {}, why_not
        out = {}
        for split in splits:
            plan = self.plan(split, annotator.read_columns, annotator.read_views, annotator.prepare)
            stored = stored_predictions(store, split, plan.reads)
            if stored is None:
                continue
            examples = self.examples(split)
            # Annotator.predict_plan, its model's predictions of the reads taken from the store
            predictions = predict_tables(lambda _reads, _k, stored=stored: stored, plan,
                                         [e.table_id for e in examples], ALL_LABELS, annotator.decode)
            out[split] = scored_targets(examples, predictions, self.sizes)
        return out, "other reads"

    def _swarm(self, checkpoint: Path, splits: Sequence[str]) -> tuple[dict, str]:
        """A Phase 4 swarm's: its stored merged distributions (one read per table, before the
        joint decoding), decoded as the swarm decodes. A table the swarm spawned nothing on keeps
        the orchestrator's reading untouched, and its store holds that reading through a log and
        back (exp(log p), `aegir.swarm.model.dense_log`): such a table takes the orchestrator's
        reading itself, from Phase 3's stored reads, as `Swarm.annotate` does."""
        import torch

        from aegir.config import PrepareConfig, build
        from aegir.eval.grouped import ALL_LABELS, top
        from aegir.eval.reads import stored_predictions
        from aegir.swarm.model import (
            dense_log,
            load_swarm,
            phase3_readings,
            prediction_of_probs,
        )

        swarm, config = load_swarm(checkpoint)  # checks its Phase 3 orchestrator and sub-agents
        recorded = config.get("params", {})
        prepare = build(PrepareConfig, recorded.get("prepare", {}), f"{checkpoint}/config.json: prepare")
        phase3_dir = (checkpoint / config["swarm"]["phase3"]["checkpoint"]).resolve()
        phase3 = json.loads((phase3_dir / "config.json").read_text(encoding="utf-8")).get("params", {})
        # the reads Phase 4 stored were of its learned policy under its largest option: no cap,
        # as `Swarm.annotate` decides
        store, why_not = self.open(checkpoint, {"prepare": recorded.get("prepare"), "reading": phase3.get("reading")},
                                   policy="learned", max_subagents=max(swarm.policy.options))
        if store is None:
            return {}, why_not
        readings_store, why_not = self.open(phase3_dir, {"prepare": recorded.get("prepare"),
                                                         "reading": phase3.get("reading")})
        if readings_store is None:
            return {}, f"its Phase 3 orchestrator's reads: {why_not}"
        out = {}
        for split in splits:
            examples = self.examples(split)
            plan = self.plan(split, swarm.reading.columns, swarm.reading.views, prepare)
            reads = stored_predictions(readings_store, split, plan.reads)
            merged = store.split(split, examples)
            if reads is None or merged is None:
                continue
            readings = phase3_readings(swarm.orch, plan, [e.table_id for e in examples], 1, reads)
            predictions = []
            for reading, dist in zip(readings, merged):
                alone = {task: dense_log(getattr(reading, f"{task}_ids"), getattr(reading, f"{task}_probs"),
                                         dist[task].shape[-1]).exp() for task in TASKS}
                if all(torch.equal(alone[task], dist[task]) for task in TASKS):
                    prediction = reading  # nothing spawned: the orchestrator's reading (Swarm._decode)
                else:  # the merged distributions, every label best first
                    prediction = prediction_of_probs(dist["cta"], dist["cpa"], reading.table_id)
                predictions.append(top(swarm.decoded(prediction), ALL_LABELS))
            out[split] = scored_targets(examples, predictions, self.sizes)
        return out, "other reads"


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
        calibrated = scored.confidences(temperature[task])
        curve = coverage_curve(calibrated, scored.correct)
        real[task] = {"coverage": curve, "for_accuracy": for_accuracy(curve), "most_accurate": most_accurate(curve),
                      "reliability": {"before": reliability(scored.confidences(), scored.correct),
                                      "after": reliability(calibrated, scored.correct)}}
    return {"temperature": temperature, "splits": splits, real_split: real}


# ----------------------------------------------------------------------------- figures


def reliability_png(entries: Mapping[str, Mapping], real_split: str = REAL_SPLIT) -> bytes:
    """Rows: checkpoints; columns: CTA, CPA. Accuracy against mean confidence per bin on
    `real_split`, before and after the temperature, the diagonal for reference; the ECE of each
    in the legend."""
    from aegir.eval.report import _pyplot, png_bytes

    plt = _pyplot()
    fig, axes = plt.subplots(len(entries), len(TASKS), figsize=(4.2 * len(TASKS), 3.6 * len(entries)),
                             squeeze=False)
    for r, (path, entry) in enumerate(entries.items()):
        for c, task in enumerate(TASKS):
            ax = axes[r][c]
            ax.plot([0, 1], [0, 1], color="0.6", linestyle=":", linewidth=1)
            split = entry["splits"].get(real_split, {}).get(task)
            for kind, color, marker in (("before", "C3", "o"), ("after", "C0", "s")):
                bins = [b for b in entry.get(real_split, {}).get(task, {}).get("reliability", {}).get(kind, [])
                        if b["count"]]
                label = f"{kind} (T={entry['temperature'][task]:g})" if kind == "after" else kind
                if split:
                    label += f", ECE {100 * split[kind]['ece']:.1f} %"
                ax.plot([b["confidence"] for b in bins], [b["accuracy"] for b in bins], marker=marker,
                        markersize=4, color=color, label=label)
            ax.set(xlim=(0, 1), ylim=(0, 1.02), xlabel="top-1 confidence (bin mean)", ylabel="accuracy",
                   title=f"{entry.get('name', path)}: {task.upper()} on {real_split}")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return png_bytes(fig)


def coverage_png(entries: Mapping[str, Mapping], real_split: str = REAL_SPLIT) -> bytes:
    """Per task: accuracy (solid) and coverage (dashed) on `real_split` against the minimum
    confidence, one colour per checkpoint; the target accuracy as a line."""
    from aegir.eval.report import _pyplot, png_bytes

    plt = _pyplot()
    fig, axes = plt.subplots(1, len(TASKS), figsize=(5.5 * len(TASKS), 4.2), squeeze=False)
    for ax, task in zip(axes[0], TASKS):
        for i, (path, entry) in enumerate(entries.items()):
            curve = entry.get(real_split, {}).get(task, {}).get("coverage", [])
            name = entry.get("name", path)
            ax.plot([row["min_confidence"] for row in curve if row["accuracy"] is not None],
                    [row["accuracy"] for row in curve if row["accuracy"] is not None], color=f"C{i}", marker="o",
                    markersize=3, label=f"{name}: accuracy")
            ax.plot([row["min_confidence"] for row in curve], [row["coverage"] for row in curve], color=f"C{i}",
                    linestyle="--", label=f"{name}: coverage")
        ax.axhline(TARGET_ACCURACY, color="0.5", linestyle=":", linewidth=1)
        ax.set(xlim=(0, 1), ylim=(0, 1.02), xlabel="--min-confidence P (calibrated)", ylabel="share",
               title=f"{task.upper()} on {real_split}: accuracy of the kept, share kept")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    return png_bytes(fig)


# ----------------------------------------------------------------------------- the stage


def evaluation_splits(data: Path) -> list[str]:
    """The evaluation splits prepared under `data` (`valid` and `real` required)."""
    if not data.is_dir():
        raise DataError(data, "prepared data not found; run `dvc repro prepare` first")
    splits = [s for s in EVAL_SPLITS if split_path(data, s).is_file()]
    for required in (FIT_SPLIT, REAL_SPLIT):
        if required not in splits:
            raise DataError(split_path(data, required), "missing: the calibrate stage needs it; run `dvc repro prepare`")
    return splits


def calibrate(data: Path, checkpoints: Mapping[str, str], out: Path) -> dict:
    """Score, fit and write `out/` (calibration.json, figures/) for `checkpoints` (path → name);
    the calibration file's content."""
    from aegir.model.checkpoint import checkpoint_fingerprint

    splits = evaluation_splits(data)
    stored = StoredTargets(data)
    entries = {}
    for path, name in checkpoints.items():
        targets, source = stored.targets(Path(path), splits)
        missing = [split for split in splits if split not in targets]
        if missing:  # no stored reads that match: the checkpoint's model reads them again
            targets.update(checkpoint_targets(Path(path), data, missing))
        targets = {split: targets[split] for split in splits}
        entries[Path(path).as_posix()] = {"name": name, "fingerprint": checkpoint_fingerprint(path),
                                          "distributions": source, **calibrate_checkpoint(targets)}
    content = {"fit_split": FIT_SPLIT, "real_split": REAL_SPLIT, "bins": BINS, "thresholds": list(THRESHOLDS),
               "target_accuracy": TARGET_ACCURACY,
               "method": "one temperature per task, p^(1/T) renormalised, T minimising the NLL of the gold labels "
                         f"on {FIT_SPLIT}; confidences and accuracies are fractions (aegir.eval.calibration)",
               "checkpoints": entries}
    figures = {"reliability.png": reliability_png(entries), "coverage.png": coverage_png(entries)}
    with atomic.staged_dir(out / "figures") as staging:
        for name, png in figures.items():
            (staging / name).write_bytes(png)
    atomic.write_json(out / "calibration.json", content)
    return content


def summary_lines(content: Mapping) -> list[str]:
    lines = []
    for path, entry in content["checkpoints"].items():
        source = entry.get("distributions", "")
        lines.append(f"calibrate: {path}: " + ("the distributions its stage stored (eval_reads.safetensors), "
                                               "not re-scored" if source == STORED else source))
        for task in TASKS:
            real = entry["splits"][REAL_SPLIT][task]
            valid = entry["splits"][FIT_SPLIT][task]
            target = entry[REAL_SPLIT][task]["for_accuracy"]
            best = entry[REAL_SPLIT][task]["most_accurate"]
            reach = (f"P={target['min_confidence']:.2f} keeps {100 * target['coverage']:.1f} % at "
                     f"{100 * target['accuracy']:.1f} %" if target else
                     f"not reached (best: P={best['min_confidence']:.2f} keeps {100 * best['coverage']:.1f} % at "
                     f"{100 * best['accuracy']:.1f} %)" if best else "not reached")
            lines.append(f"calibrate: {path} {task.upper()}: T={entry['temperature'][task]:g}; ECE real "
                         f"{100 * real['before']['ece']:.1f} → {100 * real['after']['ece']:.1f} %, valid "
                         f"{100 * valid['before']['ece']:.1f} → {100 * valid['after']['ece']:.1f} %; "
                         f"{100 * TARGET_ACCURACY:.0f} % accuracy on real: {reach}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     epilog="`aegir annotate` reads the temperatures from --out/calibration.json.")
    parser.add_argument("--data", type=Path, default=Path("data/prepared"), help="prepared data (valid, real, …)")
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
        content = calibrate(args.data, checkpoints, args.out)
    except AegirError as exc:
        parser.exit(2, f"calibrate: error: {exc}\n")
    for line in summary_lines(content):
        print(line)
    print(f"calibrate: wrote {args.out / 'calibration.json'}, {args.out / 'figures'}/")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

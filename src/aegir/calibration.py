"""Calibrating checkpoints' confidences: the label distributions each checkpoint gives on every
split, and the calibration.json content fitted from them (the `calibrate` stage).

The distributions come from what each checkpoint's stage stored beside it where that store
matches the checkpoint and the data (`StoredTargets`, `aegir.eval.reads`), and otherwise from
running the checkpoint on every read (`checkpoint_targets`, `aegir.inference`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import astuple
from pathlib import Path

from aegir.config import REAL_SPLIT, SPLITS, PrepareConfig, build
from aegir.data.dataset import load_examples
from aegir.data.prepared import fingerprint
from aegir.errors import DataError
from aegir.eval.calibration import Scored
from aegir.eval.calibration_report import (
    STORED,
    calibrate_checkpoint,
    calibration_content,
    evaluation_splits,
    scored_targets,
    target_families,
)
from aegir.eval.grouped import ALL_LABELS, predict_tables, split_reads, top
from aegir.eval.reads import StoredReads, stored_predictions
from aegir.inference import load_for_inference, prepared_predictions
from aegir.labels import label_counts
from aegir.model.checkpoint import checkpoint_fingerprint


def checkpoint_targets(checkpoint: Path, data: Path, splits: Sequence[str]) -> dict[str, dict[str, Scored]]:
    """{split: {task: Scored}} of one checkpoint on prepared data, its model run on every read."""
    sizes = label_counts()
    return {split: scored_targets(examples, predictions, sizes)
            for split, examples, predictions in prepared_predictions(checkpoint, data, splits, ALL_LABELS)}


class StoredTargets:
    """The targets of checkpoints from the distributions their stages stored beside them
    (`aegir.eval.reads`), combined per table as `prepared_predictions` combines its model's: the
    same reading plan (column groups, row views), the same merge, the recorded joint decoding. A checkpoint's store is taken only when its metadata match what re-scoring
    would read — the checkpoint's fingerprint, the prepared data's, and the `prepare` and
    `reading` settings its config.json records (as `phase3` and `phase4` check theirs) — and a
    split only when it holds that split's very reads. Examples and reading plans are loaded once
    per split and shared by the checkpoints that read alike."""

    def __init__(self, data: Path):
        self.data = data
        self.sizes = label_counts()
        self._examples: dict[str, list] = {}
        self._plans: dict[tuple, object] = {}
        try:
            self.data_print: dict[str, str] | None = fingerprint(data, SPLITS)
        except DataError:  # not every split prepared: no stage stored reads of this directory
            self.data_print = None

    def examples(self, split: str) -> list:
        if split not in self._examples:
            self._examples[split] = load_examples(self.data, split)
        return self._examples[split]

    def plan(self, split: str, columns: int, views: int, prepare):
        key = (split, columns, views, astuple(prepare))
        if key not in self._plans:
            self._plans[key] = split_reads(self.data, split, self.examples(split), columns, views, prepare)
        return self._plans[key]

    def open(self, directory: Path, recorded: Mapping, **more):
        """`StoredReads.open` of `directory` against the settings re-scoring reads with."""
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
        annotator = load_for_inference(checkpoint)  # the reading prepared_predictions would use
        config = json.loads((checkpoint / "config.json").read_text(encoding="utf-8"))
        store, why_not = self.open(checkpoint, config.get("params", {}))
        if store is None:
            return {}, why_not
        out = {}
        for split in splits:
            predictions = self.predictions(annotator, store, split)
            if predictions is not None:
                out[split] = scored_targets(self.examples(split), predictions, self.sizes)
        return out, "other reads"

    def predictions(self, annotator, store, split: str) -> list | None:
        """Each table's prediction of `split` (every label) from `store`, merged over its reads and
        decoded as `annotator` reads it (Annotator.predict_plan with its model's predictions of
        the reads taken from the store); None where the store lacks that split's very reads."""
        plan = self.plan(split, annotator.read_columns, annotator.read_views, annotator.prepare)
        stored = stored_predictions(store, split, plan.reads)
        if stored is None:
            return None
        return predict_tables(lambda _reads, _k: stored, plan, [e.table_id for e in self.examples(split)],
                              ALL_LABELS, annotator.decode)

    def _swarm(self, checkpoint: Path, splits: Sequence[str]) -> tuple[dict, str]:
        """A Phase 4 swarm's: its stored merged distributions (one read per table, before the
        joint decoding), decoded as the swarm decodes. A table the swarm spawned nothing on (its
        stored `spawned` flag, `aegir.swarm.evaluate.merged_distributions`) keeps the
        orchestrator's reading untouched: it takes that reading itself, from Phase 3's stored
        reads, as `Swarm.annotate` does."""
        from aegir.swarm.model import load_swarm, phase3_readings, prediction_of_probs

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
            spawned = store.table_flags(split, examples, "spawned")
            if reads is None or merged is None or spawned is None:
                continue
            readings = phase3_readings(swarm.orch, plan, [e.table_id for e in examples], 1, reads)
            predictions = []
            for reading, dist, spawned_here in zip(readings, merged, spawned):
                if not spawned_here:
                    prediction = reading  # nothing spawned: the orchestrator's reading (Swarm._decode)
                else:  # the merged distributions, every label best first
                    prediction = prediction_of_probs(dist["cta"], dist["cpa"], reading.table_id)
                predictions.append(top(swarm.decoded(prediction), ALL_LABELS))
            out[split] = scored_targets(examples, predictions, self.sizes)
        return out, "other reads"


def stored_or_scored(stored: StoredTargets, checkpoint: Path, splits: Sequence[str]) -> tuple[dict, str]:
    """({split: {task: Scored}} of `checkpoint` on every split of `splits`, where its distributions
    came from): its stored reads where they match (`StoredTargets.targets`), its model run on
    the splits they do not cover."""
    targets, source = stored.targets(checkpoint, splits)
    missing = [split for split in splits if split not in targets]
    if missing:  # no stored reads that match: the checkpoint's model reads them again
        targets.update(checkpoint_targets(checkpoint, stored.data, missing))
    return {split: targets[split] for split in splits}, source


def calibrate_checkpoints(data: Path, checkpoints: Mapping[str, str]) -> dict:
    """Score and fit `checkpoints` (path → name) on the evaluation splits prepared under `data`,
    each from its stored reads where they match (`StoredTargets`), else re-scored: the content of
    the `calibrate` stage's calibration.json."""
    splits = evaluation_splits(data)
    stored = StoredTargets(data)
    families = target_families(stored.examples(REAL_SPLIT))
    entries = {}
    for path, name in checkpoints.items():
        targets, source = stored_or_scored(stored, Path(path), splits)
        entries[Path(path).as_posix()] = {"name": name, "fingerprint": checkpoint_fingerprint(path),
                                          "distributions": source, **calibrate_checkpoint(targets, families)}
    return calibration_content(entries)

"""Using a trained checkpoint: annotate users' tables, or score a checkpoint on a data directory.

A table is serialized exactly as the checkpoint's training data was (`prepare` params are
recorded in its config.json), so what the model reads at inference matches what it learned on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from aegir.config import SOURCE_SPLITS, SPLITS, PrepareConfig, build
from aegir.data.dataset import Example, examples_from_tables, load_examples
from aegir.data.prepared import split_path
from aegir.data.table import SampledColumn, Table
from aegir.errors import PIPELINE_HINT, DataError, is_pipeline_output
from aegir.eval.calibration import map_prediction
from aegir.eval.grouped import (
    TableReads,
    predict_tables,
    read_groups,
    rows_read,
    split_reads,
    table_reads,
    top,
)
from aegir.eval.predict import TablePrediction, predict, score, score_by_domain
from aegir.eval.recorded import recorded_reading
from aegir.labels import cpa_vocab, cta_vocab
from aegir.model.checkpoint import checkpoint_fingerprint, load_checkpoint

if TYPE_CHECKING:
    from aegir.train.step import OneThreadWorkers


@dataclass
class Annotator:
    """A checkpoint ready to predict: a plain Phase 1 model, or a Phase 3 orchestrator (its
    routed forward, with the specialists it may activate)."""

    model: torch.nn.Module
    prepare: PrepareConfig  # how the checkpoint's training data was serialized
    specialists: list[str] = field(default_factory=list)  # empty for a plain model
    forward: Callable | None = None  # what `predict` calls per batch (None: the model)
    read_columns: int = 0  # wider tables are read in column groups (aegir.eval.grouped); 0: whole
    read_views: int = 1  # row views read per table, their distributions averaged
    decode: Callable | None = None  # each table's joint decoding (aegir.eval.joint); None: columnwise argmax
    joint: dict[str, float] = field(default_factory=dict)  # its weights β per task, when it decodes
    workers: OneThreadWorkers | None = None  # predict in these threads, one intra-op thread each

    def predictions(self, tables, examples: Sequence[Example], where: Path, top_k: int = 1) -> list[TablePrediction]:
        """One prediction per table (`examples[i]` is `tables[i]` serialized), each read as the
        pipeline scores it (column groups, row views)."""
        return self.predict_plan(table_reads(tables, examples, self.read_columns, self.read_views, self.prepare, where),
                                 [e.table_id for e in examples], top_k)

    def predict_plan(self, plan: TableReads, table_ids: Sequence[str], top_k: int = 1) -> list[TablePrediction]:
        return predict_tables(lambda reads, k: predict(self.model, reads, top_k=k, forward=self.forward,
                                                       workers=self.workers),
                              plan, table_ids, top_k, self.decode)

    def steps(self, activation) -> dict[str, int]:
        """Critical and total layer-steps of one table's routed forward."""
        from aegir.orchestrator.critical import orchestrator_steps

        critical, total = orchestrator_steps(self.model.primary.config, [s.config for s in self.model.specialists],
                                             self.model.separate_reads(activation), self.model.stream_seam,
                                             self.model.column_seam, self.model.subject_steps)
        return {"critical_steps": critical, "total_steps": total}


def load_for_inference(checkpoint: Path) -> Annotator:
    """A plain model checkpoint (`models/phase1/<agent>`, `models/phase3/control`) or an
    orchestrator checkpoint (`models/phase3`, with its frozen specialists), in eval mode."""
    from aegir.orchestrator.checkpoint import (
        is_orchestrator_checkpoint,
        load_orchestrator,
    )

    if is_orchestrator_checkpoint(checkpoint):
        orch, config = load_orchestrator(checkpoint)
        annotator = Annotator(orch, _prepare_of(config, checkpoint), list(orch.specialist_names), orch.annotate,
                              *_reading_of(config, checkpoint))
    else:
        model, config = load_checkpoint(checkpoint)
        annotator = Annotator(model.eval(), _prepare_of(config, checkpoint), [], None, *_reading_of(config, checkpoint))
    return annotator


def _prepare_of(config: dict, checkpoint: Path) -> PrepareConfig:
    return build(PrepareConfig, config.get("params", {}).get("prepare", {}), f"{checkpoint}/config.json: prepare")


def _reading_of(config: dict, checkpoint: Path) -> tuple[int, int, Callable | None, dict[str, float]]:
    """(`reading.columns`, `reading.views`, the joint decoding and its weights) a checkpoint was
    scored with; one whole read per table (0, 1) and each column's argmax when it predates them."""
    reading, decode = recorded_reading(config, checkpoint)
    return reading.columns, reading.views, decode, reading.joint_weights if decode else {}


def _examples(tables, prepare: PrepareConfig, where: Path) -> list[Example]:
    return examples_from_tables(tables, prepare.byte_budget, prepare.max_rows, prepare.seed, where,
                                prepare.compact_columns, prepare.compact_cell_bytes)


def swarm_predictions(checkpoint: Path, tables, where: Path, top_k: int = 1, examples=None, swarm=None):
    """A Phase 4 swarm (`models/phase4`) on raw `tables`: (TablePrediction per table, the
    swarm's `TableResult` per table, the examples). The tables are serialized as its training
    data was, unless their `examples` are given (prepared data). `swarm`: (the swarm, its
    `prepare` settings) when already loaded from `checkpoint`."""
    from aegir.swarm.model import load_swarm

    if swarm is None:
        loaded, config = load_swarm(checkpoint)
        swarm = (loaded, _prepare_of(config, checkpoint))
    swarm, prepare = swarm
    examples = examples if examples is not None else _examples(tables, prepare, where)
    results = swarm.annotate(tables, examples, prepare, where)
    # each table's labels as the swarm decoded them (the orchestrator's joint decoding)
    predictions = [top(r.prediction, top_k) for r in results]
    return predictions, results, examples


SAMPLE_ROWS = 5  # the first rows of a file read besides the model's, for each column's sample cells


class CheckpointAnnotator:
    """A checkpoint loaded once to annotate users' tables, any number of them: a plain model
    or a Phase 3 orchestrator (an `Annotator`), or a Phase 4 swarm.

    `read(path)` reads a file lazily: only the rows the checkpoint reads (`rows_read`) and the
    first `SAMPLE_ROWS`, whatever the file's size. `annotate(tables, paths)` annotates a batch of
    tables in one pass of the model: the streams of all of them batched together (so a table's
    confidences may differ in their last digits with the tables beside it).
    """

    def __init__(self, checkpoint: Path, workers: OneThreadWorkers | None = None):
        from aegir.swarm.model import is_swarm_checkpoint, load_swarm

        self.checkpoint = checkpoint
        # {cta: (a, b, d), cpa: (a, b, d)}: the beta maps applied to every confidence (the `calibrate`
        # stage's, `aegir.eval.calibration.map_prediction`); None: the model's own
        self.calibration: dict[str, tuple[float, float, float]] | None = None
        self.swarm = None
        self.annotator: Annotator | None = None
        if is_swarm_checkpoint(checkpoint):
            self.swarm, config = load_swarm(checkpoint)
            self.prepare = _prepare_of(config, checkpoint)
        else:
            self.annotator = load_for_inference(checkpoint)
            self.annotator.workers = workers
            self.prepare = self.annotator.prepare
        self.fingerprint = checkpoint_fingerprint(checkpoint)

    def rows_read(self, num_rows: int, table_id: str, num_columns: int) -> set[int]:
        """The rows of a table this checkpoint's reads serialize (`aegir.eval.grouped.rows_read`,
        `aegir.swarm.model.Swarm.rows_read`)."""
        if self.swarm is not None:
            return self.swarm.rows_read(num_rows, table_id, num_columns, self.prepare)
        a = self.annotator
        return rows_read(num_rows, table_id, num_columns, a.read_columns, a.read_views, self.prepare)

    def read(self, path: Path) -> Table:
        """The table of `path` with the rows this checkpoint reads and the first `SAMPLE_ROWS`."""
        from aegir.data.user_tables import open_table

        opened = open_table(path)
        rows = self.rows_read(opened.num_rows, opened.table_id, opened.num_columns)
        return opened.read(rows | set(range(min(SAMPLE_ROWS, opened.num_rows))))

    def serialize(self, table: Table, path: Path) -> Example:
        """`table` as the checkpoint's training data was serialized (the check that it can be:
        a `ByteBudgetError` for a table wider than the byte budget)."""
        return _examples([table], self.prepare, path)[0]

    def annotate(self, tables: Sequence[Table], examples: Sequence[Example], paths: Sequence[Path],
                 top_k: int = 1) -> list[dict]:
        """One result per table (`examples[i]` is `serialize(tables[i], paths[i])`): every
        column's top-k CTA labels and (columns ≥ 1) CPA relations with confidences, how the
        checkpoint read the table, the checkpoint and its fingerprint."""
        where = paths[0] if paths else Path(".")
        if self.swarm is not None:
            predictions, swarm_results, _ = swarm_predictions(self.checkpoint, tables, where, top_k,
                                                              examples=list(examples), swarm=(self.swarm, self.prepare))
        else:
            predictions = self.annotator.predictions(tables, examples, where, top_k)
            swarm_results = [None] * len(tables)
        if self.calibration is not None:
            predictions = [map_prediction(p, self.calibration) for p in predictions]
        return [self._result(table, path, prediction, swarm_result)
                for table, path, prediction, swarm_result in zip(tables, paths, predictions, swarm_results)]

    def _result(self, table: Table, path: Path, prediction: TablePrediction, swarm_result) -> dict:
        cta, cpa = cta_vocab().labels, cpa_vocab().labels
        columns = []
        for c in range(table.num_columns):
            columns.append({
                "index": c,
                "name": table.column_names[c] if table.column_names else None,
                "sample": sample_cells(table.columns[c]),
                "cta": [{"label": cta[i], "confidence": round(float(p), 4)}
                        for i, p in zip(prediction.cta_ids[c], prediction.cta_probs[c])],
                "cpa": None if c == 0 else [{"label": cpa[i], "confidence": round(float(p), 4)}
                                            for i, p in zip(prediction.cpa_ids[c], prediction.cpa_probs[c])],
            })
        result = {"table": str(path), "checkpoint": str(self.checkpoint), "fingerprint": self.fingerprint,
                  "rows": table.num_rows, "columns": columns}
        if self.calibration is not None:
            result["calibration"] = {task: {"a": a, "b": b, "d": d} for task, (a, b, d) in self.calibration.items()}
        annotator = self.annotator
        if annotator is not None:
            groups = read_groups(table.num_columns, annotator.read_columns)
            if len(groups) > 1:  # wider than the checkpoint's read_columns: read in column groups
                result["read_groups"] = [list(g) for g in groups]
            result["read_views"] = annotator.read_views
            if annotator.joint:
                result["joint_decoding"] = annotator.joint
            if annotator.specialists:
                result["specialists"] = {
                    "activated": [n for n, on in zip(annotator.specialists, prediction.activation) if on],
                    # specialists only another row view (or column group) activated: they read it too
                    "activated_other_views": [] if prediction.activation_any is None else [
                        n for n, on, first in zip(annotator.specialists, prediction.activation_any, prediction.activation)
                        if on and not first],
                    "available": annotator.specialists,
                    # the output seam: the labels are the orchestrator's averaged with the activated ones'
                    "vote": annotator.model.vote,
                    # the subject rule: the owners of the domain the frozen primary names for column 0 run too
                    "subject_rule": annotator.model.subject_route is not None,
                    # with it, the frozen primary read for that rule votes on every table too
                    "vote_primary": annotator.model.vote_primary,
                    **annotator.steps(prediction.activation),
                }
        else:
            r = swarm_result
            result["swarm"] = {"subagents": r.subagents, "specialist": r.specialist,
                               "groups": [list(g) for g in r.groups], "deep_search": r.deep,
                               "deep_columns": list(r.deep_columns), "phase3_specialists": r.phase3_activated,
                               "second_opinions": list(r.consulted),
                               "critical_steps": r.critical_steps, "total_steps": r.total_steps,
                               # what the sub-agents changed: the label Phase 3's reading alone gave → the swarm's
                               "changes": [{"task": task, "column": c, "before": (cta if task == "cta" else cpa)[b],
                                            "after": (cta if task == "cta" else cpa)[a]}
                                           for task, c, b, a in r.changes()]}
        return result


def sample_cells(column, count: int = 3) -> list[str]:
    """The first `count` non-empty cells of a column among the rows read."""
    cells = column.read_rows() if isinstance(column, SampledColumn) else enumerate(column)
    return [cell for _, cell in cells if cell not in (None, "")][:count]


def annotate_table(path: Path, checkpoint: Path, top_k: int = 1) -> dict:
    """One table's annotation (`CheckpointAnnotator.annotate`), the checkpoint loaded for it."""
    annotator = CheckpointAnnotator(checkpoint)
    table = annotator.read(path)
    return annotator.annotate([table], [annotator.serialize(table, path)], [path], top_k)[0]


def format_annotations(result: dict) -> str:
    """A plain-text table: one row per column, widths fitted to the content."""
    rows = [("col", "name", "CTA (type)", "CPA (relation to col 0)", "sample")]
    floor = result.get("min_confidence")

    def shown(a: dict) -> str:
        if "withheld" in a:  # below --min-confidence (aegir.annotate.withhold)
            return f"{a['label']} ({a['withheld']} {a['confidence']:.2f} < {floor:g})"
        return f"{a['label']} {a['confidence']:.2f}"

    for col in result["columns"]:
        cta = ", ".join(map(shown, col["cta"]))
        cpa = "(subject)" if col["cpa"] is None else ", ".join(map(shown, col["cpa"]))
        rows.append((str(col["index"]), (col["name"] or "")[:24], cta, cpa, " | ".join(col["sample"])[:48]))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = [f"{result['table']}: {len(result['columns'])} columns, {result['rows']} rows (column 0 is the subject)"]
    if "swarm" in result:
        s = result["swarm"]
        spawned = (f"wide search: {s['subagents']} sub-agent(s) ({s['specialist']}) on column groups "
                   + " ".join("[" + ",".join(map(str, g)) + "]" for g in s["groups"])) if s["subagents"] else "no wide search"
        deep = (f"deep search re-read column(s) {', '.join(map(str, s['deep_columns']))}" if s["deep_search"]
                else "no deep search")
        second = s.get("second_opinions", [])
        opinions = (f"second opinions of the whole table from {', '.join(second)}" if second
                    else "no second opinion")
        lines.append(f"swarm: {spawned}; {opinions}; {deep}; Phase 3 specialists: "
                     f"{', '.join(s['phase3_specialists']) or 'none'}; "
                     f"{s['critical_steps']} critical steps, {s['total_steps']} total")
        if s["subagents"] or s["deep_search"] or second:
            lines.append("sub-agents changed: " + ("; ".join(
                f"col {x['column']} {x['task'].upper()} {x['before']} → {x['after']}" for x in s["changes"])
                or "no label (the Phase 3 reading stands)"))
    if "read_groups" in result:
        lines.append(f"read in {len(result['read_groups'])} column groups (the subject with each): "
                     + " ".join("[" + ",".join(map(str, g)) + "]" for g in result["read_groups"]))
    if result.get("read_views", 1) > 1:
        lines.append(f"read in {result['read_views']} row views (rows rotated), their label probabilities averaged")
    if "joint_decoding" in result:
        lines.append("labels decoded jointly: a label the training tables rarely repeat is rarely given twice "
                     f"(weights CTA {result['joint_decoding']['cta']:g}, CPA {result['joint_decoding']['cpa']:g})")
    if "specialists" in result:
        s = result["specialists"]
        voted = "; labels voted with theirs" if s.get("vote") and s["activated"] else ""
        rule = ", routed by the router and the subject column's domain" if s.get("subject_rule") else ""
        others = (f"; in another row view also {', '.join(s['activated_other_views'])}"
                  if s.get("activated_other_views") else "")
        lines.append(f"specialists activated: {', '.join(s['activated']) or 'none'} "
                     f"(of {', '.join(s['available'])}{rule}){voted}{others}; "
                     f"{s['critical_steps']} critical steps, {s['total_steps']} total (the first row view's)")
    for n, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row[:4], widths)) + "  " + row[4])
        if n == 0:
            lines.append("-" * (sum(widths) + 8 + len(row[4])))
    return "\n".join(lines)


def _is_prepared(data: Path) -> bool:
    return any(split_path(data, split).is_file() for split in SPLITS)


def evaluate_checkpoint(checkpoint: Path, data: Path, splits: Sequence[str] = (),
                        by_domain: bool = False) -> dict[str, dict]:
    """`{split: {"cta": {...}, "cpa": {...}}}` on prepared data or a SOTAB V2 directory; with
    `by_domain`, also `"domains": {task: {domain: {...}}}`, the same predictions scored on each
    domain's tables alone.

    Default splits: those present (prepared files; SOTAB splits with ground truth).
    """
    if not data.is_dir():
        raise DataError(data, "data directory not found" + (PIPELINE_HINT if is_pipeline_output(data) else ""))
    prepared = _is_prepared(data)
    known = SPLITS if prepared else SOURCE_SPLITS  # a SOTAB directory has SOTAB's splits only
    unknown = [s for s in splits if s not in known]
    if unknown:
        raise DataError(data, f"unknown split(s) {unknown}; known: {', '.join(known)}")
    from aegir.data.sotab import available_splits, read_sotab

    if not splits:  # every split the directory has
        splits = [s for s in SPLITS if split_path(data, s).is_file()] if prepared else available_splits(data)
        if not splits:
            raise DataError(data, "neither prepared data (<split>.parquet) nor a SOTAB V2 directory "
                                  "(Train/ Validation/ Test/ folders with their ground-truth CSVs)")
    from aegir.swarm.model import is_swarm_checkpoint

    if is_swarm_checkpoint(checkpoint):
        return _evaluate_swarm(checkpoint, data, splits, prepared, by_domain)
    annotator = load_for_inference(checkpoint)
    results = {}
    for split in splits:
        if prepared:
            examples = load_examples(data, split)
            plan = split_reads(data, split, examples, annotator.read_columns, annotator.read_views, annotator.prepare)
            predictions = annotator.predict_plan(plan, [e.table_id for e in examples])
        else:  # a SOTAB V2 directory, serialized as the checkpoint's training data was
            tables = read_sotab(data, split)
            examples = _examples(tables, annotator.prepare, data)
            predictions = annotator.predictions(tables, examples, data)
        results[split] = score(examples, predictions)
        if by_domain:
            results[split]["domains"] = score_by_domain(examples, predictions)
        if annotator.specialists:
            activation = np.array([p.activation for p in predictions], dtype=bool).reshape(-1, len(annotator.specialists))
            results[split]["activation_rate"] = {
                name: round(float(activation[:, s].mean()), 4) if len(activation) else 0.0
                for s, name in enumerate(annotator.specialists)}
    return results


def _evaluate_swarm(checkpoint: Path, data: Path, splits: Sequence[str], prepared: bool,
                    by_domain: bool = False) -> dict[str, dict]:
    """`evaluate_checkpoint` for a Phase 4 swarm: F1 per split and the mean sub-agents spawned."""
    from aegir.data.prepared import read_split, tables_from_arrow
    from aegir.data.sotab import read_sotab

    results = {}
    for split in splits:
        if prepared:
            tables, examples = tables_from_arrow(read_split(data, split)), load_examples(data, split)
        else:
            tables, examples = read_sotab(data, split), None
        predictions, swarm, examples = swarm_predictions(checkpoint, tables, data, examples=examples)
        results[split] = score(examples, predictions)
        if by_domain:
            results[split]["domains"] = score_by_domain(examples, predictions)
        results[split]["mean_subagents"] = round(sum(r.subagents for r in swarm) / max(1, len(swarm)), 4)
    return results


def prepared_predictions(checkpoint: Path, data: Path, splits: Sequence[str],
                         top_k: int = 1) -> Iterator[tuple[str, list[Example], list[TablePrediction]]]:
    """(split, its examples, a prediction per table) for each of `splits` of prepared data, read as
    `evaluate_checkpoint` scores them (the reading plan and joint decoding a plain or orchestrator
    checkpoint records; a swarm's own reading). The checkpoint is loaded once. `top_k` =
    `ALL_LABELS`: each column's whole distribution, its chosen label first."""
    from aegir.data.prepared import read_split, tables_from_arrow
    from aegir.swarm.model import is_swarm_checkpoint, load_swarm

    if is_swarm_checkpoint(checkpoint):
        loaded, config = load_swarm(checkpoint)
        swarm = (loaded, _prepare_of(config, checkpoint))
        for split in splits:
            tables, examples = tables_from_arrow(read_split(data, split)), load_examples(data, split)
            predictions, _, _ = swarm_predictions(checkpoint, tables, data, top_k, examples=examples, swarm=swarm)
            yield split, examples, predictions
        return
    annotator = load_for_inference(checkpoint)
    for split in splits:
        examples = load_examples(data, split)
        plan = split_reads(data, split, examples, annotator.read_columns, annotator.read_views, annotator.prepare)
        yield split, examples, annotator.predict_plan(plan, [e.table_id for e in examples], top_k)


def format_scores(scores: dict[str, dict]) -> str:
    lines = [f"{'split':<22} {'CTA micro':>9} {'CTA macro':>9} {'n':>6}   {'CPA micro':>9} {'CPA macro':>9} {'n':>6}"]
    for split, s in scores.items():
        lines.append(f"{split:<22} {s['cta']['micro_f1']:>9.2f} {s['cta']['macro_f1']:>9.2f} {s['cta']['support']:>6}"
                     f"   {s['cpa']['micro_f1']:>9.2f} {s['cpa']['macro_f1']:>9.2f} {s['cpa']['support']:>6}")
    for split, s in scores.items():
        for domain in sorted(set(s.get("domains", {}).get("cta", {})) | set(s.get("domains", {}).get("cpa", {}))):
            cells = []
            for task in ("cta", "cpa"):
                r = s["domains"][task].get(domain)
                cells.append(f"{r['micro_f1']:>9.2f} {r['macro_f1']:>9.2f} {r['support']:>6}" if r else f"{'–':>9} {'–':>9} {0:>6}")
            lines.append(f"  {split + ' ' + domain:<20} " + "   ".join(cells))
    routed = {split: s["activation_rate"] for split, s in scores.items() if "activation_rate" in s}
    if routed:
        lines.append("share of tables that activated each specialist:")
        for split, rates in routed.items():
            lines.append(f"  {split:<20} " + "  ".join(f"{name} {rate:.2f}" for name, rate in rates.items()))
    return "\n".join(lines)

"""Using a trained checkpoint: annotate one table, or score a checkpoint on a data directory.

A table is serialized exactly as the checkpoint's training data was (`prepare` params are
recorded in its config.json), so what the model reads at inference matches what it learned on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from aegir.config import SOURCE_SPLITS, SPLITS, PrepareConfig, build
from aegir.data.dataset import Example, examples_from_tables, load_examples
from aegir.data.prepared import split_path
from aegir.errors import PIPELINE_HINT, DataError, is_pipeline_output
from aegir.eval.predict import predict, score
from aegir.labels import cpa_vocab, cta_vocab
from aegir.model.checkpoint import load_checkpoint


@dataclass
class Annotator:
    """A checkpoint ready to predict: a plain Phase 1 model, or a Phase 3 orchestrator (its
    routed forward, with the specialists it may activate)."""

    model: torch.nn.Module
    prepare: PrepareConfig  # how the checkpoint's training data was serialized
    specialists: list[str] = field(default_factory=list)  # empty for a plain model
    forward: Callable | None = None  # what `predict` calls per batch (None: the model)

    def steps(self, activation) -> dict[str, int]:
        """Critical and total layer-steps of one table's routed forward."""
        from aegir.swarm.critical import critical_steps, orchestrator_stages, total_steps

        stages = orchestrator_stages(self.model.primary.config, [s.config for s in self.model.specialists],
                                     [bool(x) for x in activation])
        return {"critical_steps": critical_steps(stages), "total_steps": total_steps(stages)}


def load_for_inference(checkpoint: Path) -> Annotator:
    """A plain model checkpoint (`models/phase1/<agent>`, `models/phase3/control`) or an
    orchestrator checkpoint (`models/phase3`, with its frozen specialists), in eval mode."""
    from aegir.swarm.checkpoint import is_orchestrator_checkpoint, load_orchestrator

    if is_orchestrator_checkpoint(checkpoint):
        orch, config = load_orchestrator(checkpoint)
        annotator = Annotator(orch, _prepare_of(config, checkpoint), list(orch.specialist_names), orch.annotate)
    else:
        model, config = load_checkpoint(checkpoint)
        annotator = Annotator(model.eval(), _prepare_of(config, checkpoint))
    return annotator


def _prepare_of(config: dict, checkpoint: Path) -> PrepareConfig:
    return build(PrepareConfig, config.get("params", {}).get("prepare", {}), f"{checkpoint}/config.json: prepare")


def _examples(tables, prepare: PrepareConfig, where: Path) -> list[Example]:
    return examples_from_tables(tables, prepare.byte_budget, prepare.max_rows, prepare.seed, where)


def annotate_table(path: Path, checkpoint: Path, top_k: int = 1) -> dict:
    """Every column's top-k CTA labels and (columns ≥ 1) CPA relations, with confidences."""
    from aegir.data.tables import read_user_table

    table = read_user_table(path)
    if table.num_columns == 0 or table.num_rows == 0:
        raise DataError(path, "the table is empty (no columns or no rows)")
    annotator = load_for_inference(checkpoint)
    example = _examples([table], annotator.prepare, path)[0]
    prediction = predict(annotator.model, [example], top_k=top_k, forward=annotator.forward)[0]
    cta, cpa = cta_vocab().labels, cpa_vocab().labels
    columns = []
    for c in range(table.num_columns):
        sample = [cell for cell in table.columns[c] if cell not in (None, "")][:3]
        columns.append({
            "index": c,
            "name": table.column_names[c] if table.column_names else None,
            "sample": sample,
            "cta": [{"label": cta[i], "confidence": round(float(p), 4)}
                    for i, p in zip(prediction.cta_ids[c], prediction.cta_probs[c])],
            "cpa": None if c == 0 else [{"label": cpa[i], "confidence": round(float(p), 4)}
                                        for i, p in zip(prediction.cpa_ids[c], prediction.cpa_probs[c])],
        })
    result = {"table": str(path), "checkpoint": str(checkpoint), "rows": table.num_rows, "columns": columns}
    if annotator.specialists:
        result["specialists"] = {
            "activated": [n for n, on in zip(annotator.specialists, prediction.activation) if on],
            "available": annotator.specialists,
            **annotator.steps(prediction.activation),
        }
    return result


def format_annotations(result: dict) -> str:
    """A plain-text table: one row per column, widths fitted to the content."""
    rows = [("col", "name", "CTA (type)", "CPA (relation to col 0)", "sample")]
    for col in result["columns"]:
        cta = ", ".join(f"{a['label']} {a['confidence']:.2f}" for a in col["cta"])
        cpa = "(subject)" if col["cpa"] is None else ", ".join(f"{a['label']} {a['confidence']:.2f}" for a in col["cpa"])
        rows.append((str(col["index"]), (col["name"] or "")[:24], cta, cpa, " | ".join(col["sample"])[:48]))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = [f"{result['table']}: {len(result['columns'])} columns, {result['rows']} rows (column 0 is the subject)"]
    if "specialists" in result:
        s = result["specialists"]
        lines.append(f"specialists activated: {', '.join(s['activated']) or 'none'} (of {', '.join(s['available'])}); "
                     f"{s['critical_steps']} critical steps, {s['total_steps']} total")
    for n, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row[:4], widths)) + "  " + row[4])
        if n == 0:
            lines.append("-" * (sum(widths) + 8 + len(row[4])))
    return "\n".join(lines)


def _is_prepared(data: Path) -> bool:
    return any(split_path(data, split).is_file() for split in SPLITS)


def evaluate_checkpoint(checkpoint: Path, data: Path, splits: Sequence[str] = ()) -> dict[str, dict]:
    """`{split: {"cta": {...}, "cpa": {...}}}` on prepared data or a SOTAB V2 directory.

    Default splits: those present (prepared files; SOTAB splits with ground truth).
    """
    if not data.is_dir():
        raise DataError(data, "data directory not found" + (PIPELINE_HINT if is_pipeline_output(data) else ""))
    prepared = _is_prepared(data)
    known = SPLITS if prepared else SOURCE_SPLITS  # a SOTAB directory has SOTAB's splits only
    unknown = [s for s in splits if s not in known]
    if unknown:
        raise DataError(data, f"unknown split(s) {unknown}; known: {', '.join(known)}")
    from aegir.data.tables import available_splits, read_sotab

    if not splits:  # every split the directory has
        splits = [s for s in SPLITS if split_path(data, s).is_file()] if prepared else available_splits(data)
        if not splits:
            raise DataError(data, "neither prepared data (<split>.parquet) nor a SOTAB V2 directory "
                                  "(Train/ Validation/ Test/ folders with their ground-truth CSVs)")
    annotator = load_for_inference(checkpoint)
    results = {}
    for split in splits:
        if prepared:
            examples = load_examples(data, split)
        else:  # a SOTAB V2 directory, serialized as the checkpoint's training data was
            examples = _examples(read_sotab(data, split), annotator.prepare, data)
        predictions = predict(annotator.model, examples, forward=annotator.forward)
        results[split] = score(examples, predictions)
        if annotator.specialists:
            activation = np.array([p.activation for p in predictions], dtype=bool).reshape(-1, len(annotator.specialists))
            results[split]["activation_rate"] = {
                name: round(float(activation[:, s].mean()), 4) if len(activation) else 0.0
                for s, name in enumerate(annotator.specialists)}
    return results


def format_scores(scores: dict[str, dict]) -> str:
    lines = [f"{'split':<22} {'CTA micro':>9} {'CTA macro':>9} {'n':>6}   {'CPA micro':>9} {'CPA macro':>9} {'n':>6}"]
    for split, s in scores.items():
        lines.append(f"{split:<22} {s['cta']['micro_f1']:>9.2f} {s['cta']['macro_f1']:>9.2f} {s['cta']['support']:>6}"
                     f"   {s['cpa']['micro_f1']:>9.2f} {s['cpa']['macro_f1']:>9.2f} {s['cpa']['support']:>6}")
    routed = {split: s["activation_rate"] for split, s in scores.items() if "activation_rate" in s}
    if routed:
        lines.append("share of tables that activated each specialist:")
        for split, rates in routed.items():
            lines.append(f"  {split:<20} " + "  ".join(f"{name} {rate:.2f}" for name, rate in rates.items()))
    return "\n".join(lines)

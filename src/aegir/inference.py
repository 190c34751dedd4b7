"""Using a trained checkpoint: annotate one table, or score a checkpoint on a data directory.

A table is serialized exactly as the checkpoint's training data was (`prepare` params are
recorded in its config.json), so what the model reads at inference matches what it learned on.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from aegir.config import SPLITS, PrepareConfig, build
from aegir.data.dataset import Example, examples_from_tables, load_examples
from aegir.data.prepared import split_path
from aegir.errors import PIPELINE_HINT, DataError, is_pipeline_output
from aegir.eval.predict import predict, score
from aegir.labels import cpa_vocab, cta_vocab
from aegir.model.checkpoint import load_checkpoint


def load_for_inference(checkpoint: Path):
    """(model in eval mode, PrepareConfig the model was trained with)."""
    model, config = load_checkpoint(checkpoint)
    model.eval()
    prepare = build(PrepareConfig, config.get("params", {}).get("prepare", {}), f"{checkpoint}/config.json: prepare")
    return model, prepare


def _examples(tables, prepare: PrepareConfig, where: Path) -> list[Example]:
    return examples_from_tables(tables, prepare.byte_budget, prepare.max_rows, prepare.seed, where)


def annotate_table(path: Path, checkpoint: Path, top_k: int = 1) -> dict:
    """Every column's top-k CTA labels and (columns ≥ 1) CPA relations, with confidences."""
    from aegir.data.tables import read_user_table

    table = read_user_table(path)
    if table.num_columns == 0 or table.num_rows == 0:
        raise DataError(path, "the table is empty (no columns or no rows)")
    model, prepare = load_for_inference(checkpoint)
    example = _examples([table], prepare, path)[0]
    prediction = predict(model, [example], top_k=top_k)[0]
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
    return {"table": str(path), "checkpoint": str(checkpoint), "rows": table.num_rows, "columns": columns}


def format_annotations(result: dict) -> str:
    """A plain-text table: one row per column, widths fitted to the content."""
    rows = [("col", "name", "CTA (type)", "CPA (relation to col 0)", "sample")]
    for col in result["columns"]:
        cta = ", ".join(f"{a['label']} {a['confidence']:.2f}" for a in col["cta"])
        cpa = "(subject)" if col["cpa"] is None else ", ".join(f"{a['label']} {a['confidence']:.2f}" for a in col["cpa"])
        rows.append((str(col["index"]), (col["name"] or "")[:24], cta, cpa, " | ".join(col["sample"])[:48]))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = [f"{result['table']}: {len(result['columns'])} columns, {result['rows']} rows (column 0 is the subject)"]
    for n, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row[:4], widths)) + "  " + row[4])
        if n == 0:
            lines.append("-" * (sum(widths) + 8 + len(row[4])))
    return "\n".join(lines)


def _is_prepared(data: Path) -> bool:
    return any(split_path(data, split).is_file() for split in SPLITS)


def evaluate_checkpoint(checkpoint: Path, data: Path, splits: Sequence[str] = ()) -> dict[str, dict]:
    """`{split: {"cta": {...}, "cpa": {...}}}` on prepared data or a SOTAB V2 directory."""
    if not data.is_dir():
        raise DataError(data, "data directory not found" + (PIPELINE_HINT if is_pipeline_output(data) else ""))
    unknown = [s for s in splits if s not in SPLITS]
    if unknown:
        raise DataError(data, f"unknown split(s) {unknown}; known: {', '.join(SPLITS)}")
    from aegir.data.tables import available_splits, read_sotab

    prepared = _is_prepared(data)
    if not splits:  # every split the directory has
        splits = [s for s in SPLITS if split_path(data, s).is_file()] if prepared else available_splits(data)
        if not splits:
            raise DataError(data, "neither prepared data (<split>.parquet) nor a SOTAB V2 directory "
                                  "(Train/ Validation/ Test/ folders with their ground-truth CSVs)")
    model, prepare = load_for_inference(checkpoint)
    results = {}
    for split in splits:
        if prepared:
            examples = load_examples(data, split)
        else:  # a SOTAB V2 directory, serialized as the checkpoint's training data was
            examples = _examples(read_sotab(data, split), prepare, data)
        results[split] = score(examples, predict(model, examples))
    return results


def format_scores(scores: dict[str, dict]) -> str:
    lines = [f"{'split':<22} {'CTA micro':>9} {'CTA macro':>9} {'n':>6}   {'CPA micro':>9} {'CPA macro':>9} {'n':>6}"]
    for split, s in scores.items():
        lines.append(f"{split:<22} {s['cta']['micro_f1']:>9.2f} {s['cta']['macro_f1']:>9.2f} {s['cta']['support']:>6}"
                     f"   {s['cpa']['micro_f1']:>9.2f} {s['cpa']['macro_f1']:>9.2f} {s['cpa']['support']:>6}")
    return "\n".join(lines)

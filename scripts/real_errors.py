"""Where a checkpoint (and the single-column baseline) fail on one split, label by label.

    python scripts/real_errors.py --checkpoint models/phase1/primary --data data/prepared
    python scripts/real_errors.py --checkpoint models/phase1/primary --data data/prepared --baseline --json out.json

For every gold CTA and CPA label of the split (default `real`): support, per-label F1 and the
most frequent wrong predictions, worst labels first, as a markdown table; the checkpoint reads
each table as the pipeline scores it (`reading`, recorded in its config.json), or with
`--single-read` its prepared stream once. With `--baseline` the
TF-IDF baseline (params.yaml `baselines`) is fitted on the same directory's `train` split and
its per-label F1 is shown beside the checkpoint's. Used to decide what the generator lacks.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from aegir import atomic
from aegir.config import load_params
from aegir.data.dataset import load_examples
from aegir.data.prepared import read_split, tables_from_arrow
from aegir.errors import AegirError
from aegir.eval import baselines
from aegir.eval.grouped import split_reads
from aegir.eval.metrics import confusions
from aegir.eval.predict import gold_and_predicted, predict
from aegir.inference import load_for_inference


def baseline_confusions(data: Path, split: str, params_path: str) -> dict[str, dict]:
    cfg = load_params(params_path).baselines
    train = tables_from_arrow(read_split(data, "train"))
    tables = tables_from_arrow(read_split(data, split))
    out = {}
    for task in ("cta", "cpa"):
        model = baselines.fit(*baselines.labelled_columns(train, task, cfg.max_cells), cfg)
        docs, gold = baselines.labelled_columns(tables, task, cfg.max_cells)
        out[task] = confusions(gold, list(model.predict(docs)))
    return out


def markdown(task: str, model: dict[str, dict], baseline: dict[str, dict] | None) -> str:
    head = "| gold label | n | model F1 | " + ("baseline F1 | " if baseline else "") + "model predicts instead (count) |"
    lines = [f"**{task.upper()}**", "", head, "|" + "---|" * (head.count("|") - 1)]
    for label, row in sorted(model.items(), key=lambda kv: (kv[1]["f1"], -kv[1]["support"], kv[0])):
        mistakes = ", ".join(f"{p} ({n})" for p, n in row["mistakes"]) or "—"
        base = f"{baseline[label]['f1']:.0f} | " if baseline else ""
        lines.append(f"| {label} | {row['support']} | {row['f1']:.0f} | {base}{mistakes} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True, type=Path)
    parser.add_argument("--data", required=True, type=Path, help="prepared data directory")
    parser.add_argument("--split", default="real")
    parser.add_argument("--baseline", action="store_true", help="also fit and show the TF-IDF baseline")
    parser.add_argument("--params", default="params.yaml", help="for the baseline's params")
    parser.add_argument("--json", type=Path, help="also write the tables as JSON here")
    parser.add_argument("--single-read", action="store_true",
                        help="each table's prepared stream read once, each column's argmax (not the checkpoint's "
                             "reading: column groups, row views, joint decoding, as phase1 and phase3 score)")
    args = parser.parse_args()
    try:
        annotator = load_for_inference(args.checkpoint)  # a plain model or a Phase 3 orchestrator
        examples = load_examples(args.data, args.split)
        if args.single_read:
            predictions = predict(annotator.model, examples, forward=annotator.forward)
        else:  # as the pipeline scores it: column groups, row views, joint decoding (the checkpoint's reading)
            plan = split_reads(args.data, args.split, examples, annotator.read_columns, annotator.read_views,
                               annotator.prepare)
            predictions = annotator.predict_plan(plan, [e.table_id for e in examples])
        pairs = gold_and_predicted(examples, predictions)
        result = {"model": {task: confusions(gold, pred) for task, (gold, pred) in pairs.items()}}
        if args.baseline:
            result["baseline"] = baseline_confusions(args.data, args.split, args.params)
    except AegirError as exc:
        parser.exit(2, f"real_errors: error: {exc}\n")
    for task in ("cta", "cpa"):
        print(markdown(task, result["model"][task], result.get("baseline", {}).get(task)) + "\n")
    if args.json:
        atomic.write_json(args.json, result)


if __name__ == "__main__":
    main()

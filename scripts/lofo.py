"""A generator change measured on the `real` families that did not motivate it (leave-one-family-out).

    python scripts/lofo.py --before models/a models/b --after /tmp/new/s0/model /tmp/new/s1/model \\
        --before-data data/prepared --after-data /tmp/new/data --motivated movies --json out.json

Each checkpoint (one per seed; `--before` trained on the generator before the change, `--after`
on it after) is scored on the `real` split per family (`aegir.data.real.sources.FAMILIES`, a
table's family from its layout, `layouts.csv`), reading each table as the pipeline scores it: its
stored reads where the stage kept them for that data (`aegir.eval.reads`), else re-scored. The
families named by `--motivated` are the ones whose errors led to the change; they are reported
but left out of the held-out figure, which pools every other family's columns. Prints CTA and
CPA micro-F1 per family and for the held-out pool: the mean over seeds, before and after, the
change and its spread (the smallest and largest per-seed change, before and after paired by
position). Pair runs that differ in `synthetic.seed` as well as the model's seed where you
can: one data draw alone moved the held-out CTA by 2 points (docs/experiments.md). The `real`
split must be the same in both data directories (checked). With
`--baseline` the TF-IDF baseline (params.yaml `baselines`) is fitted on the `--after-data`'s `train`
split and scored per family too, beside the after runs' margin over it (issue 39's target: the
primary ≥ baseline + 5 on `real` and on each held-out family group). `--by domain` groups the
tables by domain (the schema.org class of their subject) instead of family:

    python scripts/lofo.py --before models/phase1/primary --after models/phase1/primary \\
        --before-data data/prepared --after-data data/prepared --baseline --by domain

gives one checkpoint's F1 per domain beside the baseline's.

A change is judged against a **null arm** (`--null`, one checkpoint per seed, paired with
`--before`): the before's code and data trained again with another model seed, what retraining
alone moves. Its change is printed beside the after runs', and "after − null" (docs/experiments.md:
a retrained main model alone lost 2 to 6 CPA points on `real` against the seed-0 primaries every
draw starts from). A null at another seed than the before carries that seed's own luck into
"after − null"; where you can, also pair candidate and control by seed (`--before <null>
--after <candidate at the null's seed>`), at two seeds or more. `--synthetic` also scores
every checkpoint on the synthetic splits of each seed's `--before-data` (one directory per seed,
or one for all): the before, after and null models on the same tables, so a synthetic loss is the
model's, not a new draw's harder tables:

    python scripts/lofo.py --before b7 b8 b9 --after a7 a8 a9 --null n7 n8 n9 \\
        --before-data d7 d8 d9 --after-data data/prepared --motivated us_counties --synthetic

See docs/experiments.md for the runs this script measured.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from aegir import atomic
from aegir.calibration import StoredTargets
from aegir.config import EVAL_SPLITS, REAL_SPLIT, load_params
from aegir.data.prepared import read_split, tables_from_arrow
from aegir.data.real import family_of, layout_families
from aegir.errors import AegirError
from aegir.eval import baselines
from aegir.eval.metrics import f1_scores
from aegir.eval.predict import gold_and_predicted
from aegir.inference import load_for_inference, prepared_predictions
from aegir.swarm.model import is_swarm_checkpoint

TASKS = ("cta", "cpa")
HELD_OUT = "held-out"
# the synthetic splits `--synthetic` scores (every evaluation split but `real`)
SYNTHETIC_SPLITS = tuple(split for split in EVAL_SPLITS if split != REAL_SPLIT)


def real_predictions(checkpoint: Path, stored: StoredTargets) -> tuple[list, list]:
    """(examples, predictions) of `checkpoint` on the real split of `stored.data`, as scored (a
    Phase 4 swarm re-scored with its own reading, the others from their stored reads if kept)."""
    if is_swarm_checkpoint(checkpoint):
        [(_, examples, predictions)] = prepared_predictions(checkpoint, stored.data, [REAL_SPLIT])
        return examples, predictions
    annotator = load_for_inference(checkpoint)
    config = json.loads((checkpoint / "config.json").read_text(encoding="utf-8"))
    examples = stored.examples(REAL_SPLIT)
    store, _ = stored.open(checkpoint, config.get("params", {}))
    kept = stored.predictions(annotator, store, REAL_SPLIT) if store is not None else None
    if kept is not None:
        return examples, kept
    plan = stored.plan(REAL_SPLIT, annotator.read_columns, annotator.read_views, annotator.prepare)
    return examples, annotator.predict_plan(plan, [e.table_id for e in examples])


def pools(family: str, motivated: set[str]) -> tuple[str, ...]:
    """The groups a family's columns count in: its own, and the held-out pool unless motivated."""
    return (family,) if family in motivated else (family, HELD_OUT)


def scored(gold: list, predicted: list) -> dict:
    """{"f1": micro-F1 × 100, "n": labelled targets} of aligned label lists (gold None: unlabelled)."""
    return {"f1": 100 * f1_scores(gold, predicted).micro_f1, "n": sum(g is not None for g in gold)}


def group_of(table_id: str, by: str, layouts: dict[str, str]) -> str:
    """The group a real table's columns are scored in: its family, or its domain (the table
    class its id starts with) when `by` is "domain"."""
    return table_id.split("_", 1)[0] if by == "domain" else family_of(table_id, layouts)


def family_scores(examples: list, predictions: list, motivated: set[str], by: str = "family") -> dict[str, dict[str, dict]]:
    """{family (or domain) or HELD_OUT: {task: {"f1": micro-F1 × 100, "n": labelled columns}}}."""
    layouts = layout_families()
    groups: dict[str, list[int]] = {}
    for i, example in enumerate(examples):
        for key in pools(group_of(example.table_id, by, layouts), motivated):
            groups.setdefault(key, []).append(i)
    out = {}
    for family, rows in sorted(groups.items()):
        pairs = gold_and_predicted([examples[i] for i in rows], [predictions[i] for i in rows])
        out[family] = {task: scored(*pairs[task]) for task in TASKS}
    return out


def baseline_family_scores(data: Path, params_path: str, motivated: set[str],
                           by: str = "family") -> dict[str, dict[str, dict]]:
    """The TF-IDF baseline fitted on `data`'s train split, scored per family (and HELD_OUT) on
    its real split: {family: {task: {"f1", "n"}}}."""
    cfg = load_params(params_path).baselines
    train = tables_from_arrow(read_split(data, "train"))
    tables = tables_from_arrow(read_split(data, REAL_SPLIT))
    layouts = layout_families()
    out: dict[str, dict[str, dict]] = {}
    for task in TASKS:
        model = baselines.fit(*baselines.labelled_columns(train, task, cfg.max_cells), cfg)
        groups: dict[str, tuple[list, list]] = {}
        for table in tables:
            docs, gold = baselines.labelled_columns([table], task, cfg.max_cells)
            if not docs:
                continue
            predicted = list(model.predict(docs))
            for key in pools(group_of(table.table_id, by, layouts), motivated):
                groups.setdefault(key, ([], []))[0].extend(gold)
                groups[key][1].extend(predicted)
        for key, (gold, predicted) in sorted(groups.items()):
            out.setdefault(key, {})[task] = scored(gold, predicted)
    return out


def synthetic_scores(checkpoint: Path, data: Path, splits: tuple[str, ...] = SYNTHETIC_SPLITS) -> dict[str, dict[str, dict]]:
    """{split: {task: {"f1", "n"}}} of `checkpoint` on `data`'s synthetic `splits`, read as the
    pipeline scores them (`aegir.inference.prepared_predictions`)."""
    out = {}
    for split, examples, predictions in prepared_predictions(checkpoint, data, splits):
        pairs = gold_and_predicted(examples, predictions)
        out[split] = {task: scored(*pairs[task]) for task in TASKS}
    return out


def against_null(after: dict[str, dict[str, dict]], null: dict[str, dict[str, dict]]) -> dict[str, dict[str, dict]]:
    """Per group and task, the null arm's mean change beside the after runs' (both `summary`
    tables against the same before runs): {"null": its change, "over_null": after's − null's}."""
    return {group: {task: {"null": null[group][task]["change"],
                           "over_null": after[group][task]["change"] - null[group][task]["change"]}
                    for task in TASKS}
            for group in after}


def summary(before: list[dict], after: list[dict]) -> dict[str, dict[str, dict]]:
    """Per family and task: mean before/after over seeds, the change, its per-seed min and max."""
    out: dict[str, dict[str, dict]] = {}
    for family in before[0]:
        out[family] = {}
        for task in TASKS:
            b = [run[family][task]["f1"] for run in before]
            a = [run[family][task]["f1"] for run in after]
            deltas = [y - x for x, y in zip(b, a)]
            out[family][task] = {"n": before[0][family][task]["n"], "before": statistics.fmean(b),
                                 "after": statistics.fmean(a), "change": statistics.fmean(a) - statistics.fmean(b),
                                 "min": min(deltas), "max": max(deltas)}
    return out


def markdown(table: dict[str, dict[str, dict]], motivated: set[str], baseline: dict | None = None,
             by: str = "family", null: dict | None = None) -> str:
    """The per-group table; `null` (`against_null`) adds each task's null change and after − null."""
    def head(task: str) -> str:
        extra = f" {task} baseline | {task} after − baseline |" if baseline else ""
        extra += f" {task} null change | {task} after − null |" if null else ""
        return f" {task} n | {task} before | {task} after | change [min, max] |" + extra

    width = 4 + (2 if baseline else 0) + (2 if null else 0)
    lines = [f"| {by} |" + head("CTA") + head("CPA"), "|---" * (1 + 2 * width) + "|"]
    order = [f for f in table if f != HELD_OUT] + ([HELD_OUT] if HELD_OUT in table else [])
    for family in order:
        name = f"{family} (motivated)" if family in motivated else family
        name = f"**{name}**" if family == HELD_OUT else name
        cells = []
        for task in TASKS:
            s = table[family][task]
            if s["n"] == 0:
                cells.append("0 | | | |" + (" | |" if baseline else "") + (" | |" if null else ""))
                continue
            cell = f"{s['n']} | {s['before']:.2f} | {s['after']:.2f} | {s['change']:+.2f} [{s['min']:+.2f}, {s['max']:+.2f}]"
            if baseline:
                b = baseline.get(family, {}).get(task)
                cell += f" | {b['f1']:.2f} | {s['after'] - b['f1']:+.2f}" if b else " | | "
            if null:
                z = null[family][task]
                cell += f" | {z['null']:+.2f} | {z['over_null']:+.2f}"
            cells.append(cell)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", nargs="+", required=True, type=Path, help="checkpoints, one per seed")
    parser.add_argument("--after", nargs="+", required=True, type=Path, help="checkpoints, the same seeds in order")
    parser.add_argument("--null", nargs="+", type=Path,
                        help="a null arm: the --before runs' code and data with another model seed, one per seed, "
                        "paired with --before; its change and after − null are printed beside")
    parser.add_argument("--before-data", required=True, nargs="+", type=Path,
                        help="the prepared data the --before runs read: one directory, or one per seed "
                        "(--synthetic scores each seed's models on its own)")
    parser.add_argument("--after-data", required=True, type=Path, help="the prepared data the --after runs read")
    parser.add_argument("--motivated", nargs="*", default=[], help="families whose errors motivated the change")
    parser.add_argument("--baseline", action="store_true",
                        help="also fit the TF-IDF baseline on --after-data's train split and score it per family")
    parser.add_argument("--params", default="params.yaml", help="for the baseline's params")
    parser.add_argument("--by", choices=("family", "domain"), default="family",
                        help="score per family (default) or per table domain (Movie, Place, …); with "
                        "--before and --after the same checkpoint, the F1 per domain against --baseline")
    parser.add_argument("--synthetic", action="store_true",
                        help="also score every checkpoint on the synthetic splits of its seed's --before-data")
    parser.add_argument("--json", type=Path, help="also write the per-seed and summary figures here")
    args = parser.parse_args()
    if len(args.before) != len(args.after):
        parser.error(f"{len(args.before)} --before checkpoints but {len(args.after)} --after: pair them by seed")
    if args.null and len(args.null) != len(args.before):
        parser.error(f"{len(args.before)} --before checkpoints but {len(args.null)} --null: pair them by seed")
    if len(args.before_data) not in (1, len(args.before)):
        parser.error(f"{len(args.before_data)} --before-data directories for {len(args.before)} seeds: give one, "
                     "or one per seed")
    before_data = args.before_data * len(args.before) if len(args.before_data) == 1 else args.before_data
    arms = {"before": args.before, "after": args.after, **({"null": args.null} if args.null else {})}
    motivated = set(args.motivated)
    try:
        unknown = motivated - set(layout_families().values())
        if unknown:
            raise AegirError(f"--motivated names no real family: {', '.join(sorted(unknown))}")
        runs: dict[str, list] = {}
        # the null arm read the before data; one StoredTargets per directory (it fingerprints every
        # split and loads the real examples once), whose real split must be the first one's
        datas = {"before": before_data, "after": [args.after_data] * len(args.after), "null": before_data}
        stored = {data: StoredTargets(data) for data in dict.fromkeys([*before_data, args.after_data])}
        for arm, checkpoints in arms.items():
            runs[arm] = []
            for checkpoint, data in zip(checkpoints, datas[arm]):
                examples, predictions = real_predictions(checkpoint, stored[data])
                runs[arm].append(family_scores(examples, predictions, motivated, args.by))
        def ids(data: Path) -> list:
            return [(e.table_id, e.cta_labels.tolist(), e.cpa_labels.tolist()) for e in stored[data].examples(REAL_SPLIT)]
        for data in stored:
            if ids(data) != ids(before_data[0]):
                raise AegirError(f"the real split of {before_data[0]} and of {data} differ")
        base = baseline_family_scores(args.after_data, args.params, motivated, args.by) if args.baseline else None
        synthetic = ({arm: [synthetic_scores(checkpoint, data) for checkpoint, data in zip(checkpoints, before_data)]
                      for arm, checkpoints in arms.items()} if args.synthetic else None)
    except AegirError as exc:
        parser.exit(2, f"lofo: error: {exc}\n")
    table = summary(runs["before"], runs["after"])
    null = against_null(table, summary(runs["before"], runs["null"])) if args.null else None
    print(markdown(table, motivated, base, args.by, null))
    out = {"motivated": sorted(motivated), "summary": table, "baseline": base, **runs}
    if null:
        out["against_null"] = null
    if synthetic:
        split_table = summary(synthetic["before"], synthetic["after"])
        split_null = against_null(split_table, summary(synthetic["before"], synthetic["null"])) if args.null else None
        print("\nThe synthetic splits of each seed's --before-data, every model on the same tables:\n")
        print(markdown(split_table, set(), by="split", null=split_null))
        out["synthetic"] = {**synthetic, "summary": split_table, **({"against_null": split_null} if split_null else {})}
    if args.json:
        atomic.write_json(args.json, out)


if __name__ == "__main__":
    main()

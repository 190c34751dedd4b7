"""Stage `prepare`: tables (embedded benchmark or a SOTAB V2 directory) → byte streams.

The configured source gives the splits of `aegir.config.SOURCE_SPLITS`; the evaluation-only
splits are added whatever the source, serialized with the same params: `real` (real tables
from pip-package data, `aegir.data.real`), so that every model and baseline is also scored on
real tables, and `wide` (synthetic tables of 15–40 columns, `aegir.data.synth.generate_wide`),
where the shared byte budget leaves each column little. Both are independent of the training
data, so they are added with `source: sotab` too. So is `wide_train` (`SWARM_TRAIN_SPLIT`): more
synthetic many-column tables, on which only Phase 4's spawning policy and merge train.

With `prepare.train_views` > 1 the `train` split also holds shuffled views of every training
table (rows and non-subject columns reordered, a few cells blanked: `aegir.data.augment`), so
that epochs over it show a model other cells of the same tables; no other split has views.

Writes `data/prepared/<split>.parquet` (one row per table; schema in `PREPARED_SCHEMA`),
`results/prepare/stats.json` (the detail: tables, columns and byte-length percentiles per
split, columns per label, missing labels, skipped cases by reason) and
`results/prepare/metrics.json` (DVC metrics, the few figures worth a column in
`dvc exp show`: tables, labels covered, cases skipped). The same params give byte-identical
files, so DVC hashes stay stable: tables are produced in a fixed order, serialisation is
deterministic, and Parquet is written with fixed settings and no timestamps.

Every output is written atomically: the data directory is built beside its destination and
moved into place only when every split succeeded; the JSON files follow it.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from aegir import atomic
from aegir.config import EVAL_ONLY_SPLITS, SOURCE_SPLITS, SWARM_TRAIN_SPLIT, TRAIN_SPLIT, Params, PrepareConfig, load_params
from aegir.data.augment import table_views
from aegir.data.serialize import serialize_table
from aegir.data.table import Table
from aegir.errors import AegirError, DataError
from aegir.labels import cpa_vocab, cta_vocab
from aegir.progress import progress

PREPARED_SCHEMA = pa.schema(
    [
        ("table_id", pa.string()),
        ("split", pa.string()),
        ("domain", pa.string()),
        ("stream", pa.binary()),  # serialized bytes (aegir.data.serialize layout)
        ("span_start", pa.list_(pa.int32())),  # per column, [start, end) into `stream`
        ("span_end", pa.list_(pa.int32())),
        ("cta", pa.list_(pa.string())),  # per column, null = unlabelled
        ("cpa", pa.list_(pa.string())),  # per column, relation of column 0 to it
        ("cells", pa.list_(pa.list_(pa.string()))),  # raw cells, column-major, all rows
        ("column_names", pa.list_(pa.string())),
        ("num_rows", pa.int32()),
    ]
)


def tables_to_arrow(tables: Sequence[Table], split: str, cfg: PrepareConfig) -> pa.Table:
    """Serialize `tables` into one Arrow table of `PREPARED_SCHEMA`."""
    rows: dict[str, list] = {name: [] for name in PREPARED_SCHEMA.names}
    for table in progress(tables, desc=f"serialize {split}", unit="table", leave=False, mininterval=1.0):
        if table.num_columns == 0 or table.num_rows == 0:
            raise DataError(table.table_id, "empty table (no columns or no rows)")
        serialized = serialize_table(table, cfg.byte_budget, cfg.max_rows, cfg.seed, cfg.compact_columns,
                                     cfg.compact_cell_bytes)
        rows["table_id"].append(table.table_id)
        rows["split"].append(split)
        rows["domain"].append(table.domain)
        rows["stream"].append(serialized.data)
        rows["span_start"].append([start for start, _ in serialized.column_spans])
        rows["span_end"].append([end for _, end in serialized.column_spans])
        rows["cta"].append(list(table.cta))
        rows["cpa"].append(list(table.cpa))
        rows["cells"].append([list(column) for column in table.columns])
        rows["column_names"].append(list(table.column_names) if table.column_names else None)
        rows["num_rows"].append(table.num_rows)
    return pa.Table.from_pydict(rows, schema=PREPARED_SCHEMA)


def write_parquet(table: pa.Table, path: Path) -> None:
    # Fixed settings: no statistics timestamps exist in Parquet, and a fixed row-group size
    # and codec make the file a pure function of its rows (and the pyarrow version).
    pq.write_table(table, path, compression="zstd", compression_level=3, row_group_size=4096,
                   use_dictionary=["split", "domain"], write_statistics=False)


def split_stats(tables: Sequence[Table], streams: pa.Table) -> dict:
    lengths = np.array([len(s) for s in streams.column("stream").to_pylist()], dtype=np.int64)
    labelled_cta = sum(1 for t in tables for label in t.cta if label is not None)
    labelled_cpa = sum(1 for t in tables for label in t.cpa if label is not None)
    percentiles = {f"p{q}": float(np.percentile(lengths, q)) for q in (10, 50, 90, 99)} if len(lengths) else {}
    return {
        "tables": len(tables),
        "columns": sum(t.num_columns for t in tables),
        "cta_columns": labelled_cta,
        "cpa_pairs": labelled_cpa,
        "bytes_per_table": {**percentiles, "max": int(lengths.max(initial=0))},
    }


def dataset_stats(per_split: dict[str, list[Table]], arrow: dict[str, pa.Table], skipped: Counter) -> dict:
    cta_counts: Counter[str] = Counter()
    cpa_counts: Counter[str] = Counter()
    for tables in per_split.values():
        for t in tables:
            cta_counts.update(label for label in t.cta if label is not None)
            cpa_counts.update(label for label in t.cpa if label is not None)
    cta, cpa = cta_vocab(), cpa_vocab()
    return {
        "splits": {split: split_stats(per_split[split], arrow[split]) for split in per_split},
        "coverage": {
            "cta_labels": len(cta_counts),
            "cta_vocab": len(cta),
            "cpa_labels": len(cpa_counts),
            "cpa_vocab": len(cpa),
            "cta_missing": sorted(set(cta.labels) - set(cta_counts)),
            "cpa_missing": sorted(set(cpa.labels) - set(cpa_counts)),
        },
        "columns_per_label": {
            "cta": dict(sorted(cta_counts.items())),
            "cpa": dict(sorted(cpa_counts.items())),
        },
        "skipped": dict(sorted(skipped.items())),
    }


def headline_stats(stats: dict) -> dict:
    """The DVC metrics of `prepare`, from its detailed stats: tables per split, labels covered."""
    return {
        "tables": {split: s["tables"] for split, s in stats["splits"].items()},
        "cta_labels": stats["coverage"]["cta_labels"],
        "cpa_labels": stats["coverage"]["cpa_labels"],
        "skipped": sum(stats["skipped"].values()),
    }


def load_source_tables(params: Params, on_skip: Callable[[str, DataError], None]) -> dict[str, list[Table]]:
    """The tables of every source split from the configured source, in a fixed order (the
    synthetic ones generated in parallel processes: `generate_splits`, the same tables)."""
    cfg: PrepareConfig = params.prepare
    if cfg.source == "synthetic":
        from aegir.data.synth import generate_splits

        return generate_splits(params.synthetic, SOURCE_SPLITS)
    from aegir.data.tables import read_sotab

    root = Path(cfg.sotab_dir)
    if not root.is_dir():
        raise DataError(root, "SOTAB V2 directory not found (prepare.sotab_dir)")
    return {split: read_sotab(root, split, on_skip=on_skip) for split in progress(SOURCE_SPLITS, desc="read", unit="split")}


def load_eval_only_tables(params: Params) -> dict[str, list[Table]]:
    """The splits built whatever the source: the evaluation-only ones
    (`aegir.config.EVAL_ONLY_SPLITS`: `real` and the many-column `wide` tables of the synthetic
    generator, `synthetic.wide_*`), then Phase 4's `wide_train` (`SWARM_TRAIN_SPLIT`)."""
    from aegir.data.real import SPLIT as REAL, build_real_tables
    from aegir.data.synth import WIDE_SPLIT, generate_wide

    builders = {REAL: build_real_tables, WIDE_SPLIT: lambda: generate_wide(params.synthetic)}
    assert set(builders) == set(EVAL_ONLY_SPLITS)
    tables = {split: builders[split]() for split in EVAL_ONLY_SPLITS}
    tables[SWARM_TRAIN_SPLIT] = generate_wide(params.synthetic, SWARM_TRAIN_SPLIT)
    return tables


def with_training_views(tables: list[Table], cfg: PrepareConfig) -> list[Table]:
    """Each training table followed by its `train_views − 1` views (`aegir.data.augment`)."""
    return [view for table in tables for view in table_views(table, cfg.train_views, cfg.seed)]


def load_tables(params: Params, on_skip: Callable[[str, DataError], None]) -> dict[str, list[Table]]:
    """Every split's tables (`aegir.config.PREPARED_SPLITS`, in that order); `train` with its views."""
    tables = {**load_source_tables(params, on_skip), **load_eval_only_tables(params)}
    tables[TRAIN_SPLIT] = with_training_views(tables[TRAIN_SPLIT], params.prepare)
    return tables


def run(params: Params, data_dir: Path, stats_path: Path, metrics_path: Path | None = None) -> dict:
    skipped: Counter[str] = Counter()  # reader cases skipped rather than fatal, by reason
    per_split = load_tables(params, on_skip=lambda reason, error: skipped.update([reason]))
    for split, tables in per_split.items():
        if not tables:
            raise DataError(data_dir / f"{split}.parquet", f"split '{split}' has no tables")
    arrow = {}
    with atomic.staged_dir(data_dir) as staging:
        for split, tables in per_split.items():
            arrow[split] = tables_to_arrow(tables, split, params.prepare)
            write_parquet(arrow[split], staging / f"{split}.parquet")
        stats = dataset_stats(per_split, arrow, skipped)
        atomic.write_json(stats_path, stats)
        if metrics_path is not None:
            atomic.write_json(metrics_path, headline_stats(stats))
    return stats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--out", default="data/prepared", help="prepared data directory")
    parser.add_argument("--stats", default="results/prepare/stats.json", help="detailed statistics (JSON)")
    parser.add_argument("--metrics", default="results/prepare/metrics.json", help="headline figures (DVC metrics)")
    args = parser.parse_args(argv)
    try:
        params = load_params(args.params)
        stats = run(params, Path(args.out), Path(args.stats), Path(args.metrics))
    except AegirError as exc:
        parser.exit(2, f"prepare: error: {exc}\n")
    cov = stats["coverage"]
    print(f"prepared {sum(s['tables'] for s in stats['splits'].values())} tables; "
          f"CTA labels {cov['cta_labels']}/{cov['cta_vocab']}, CPA labels {cov['cpa_labels']}/{cov['cpa_vocab']}")
    if stats["skipped"]:
        print(f"skipped: {stats['skipped']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

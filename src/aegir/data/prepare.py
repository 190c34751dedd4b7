"""Building the prepared data: tables (synthetic, SOTAB V2, the real and wide evaluation tables)
serialized into the rows of `data/prepared/<split>.parquet` (`PREPARED_SCHEMA`), with their
statistics; what the `prepare` stage runs (`aegir.stages.prepare` says which splits and why).
`aegir.data.prepared` reads these files back.

The same params give byte-identical files: tables are produced in a fixed order, serialisation
is deterministic, and Parquet is written with fixed settings and no timestamps.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from aegir import atomic
from aegir.config import (
    EVAL_ONLY_SPLITS,
    POLICY_TRAIN_SPLIT,
    PREPARED_SPLITS,
    SOURCE_SPLITS,
    SPECIALIST_TRAIN_SPLIT,
    SWARM_TRAIN_SPLIT,
    TRAIN_SPLIT,
    Params,
    PrepareConfig,
    SyntheticConfig,
)
from aegir.data.augment import table_views
from aegir.data.serialize import serialize_table
from aegir.data.table import Table
from aegir.errors import DataError
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


def tables_to_arrow(tables: Sequence[Table], split: str, cfg: PrepareConfig, bar: bool = True) -> pa.Table:
    """Serialize `tables` into one Arrow table of `PREPARED_SCHEMA` (with a progress bar if `bar`)."""
    rows: dict[str, list] = {name: [] for name in PREPARED_SCHEMA.names}
    for table in progress(tables, desc=f"serialize {split}", unit="table", leave=False, mininterval=1.0,
                          disable=not bar):
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
    from aegir.data.real import SPLIT as REAL
    from aegir.data.real import coverage_by_domain

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
        **({"real_coverage": coverage_by_domain(per_split[REAL])} if REAL in per_split else {}),
    }


def headline_stats(stats: dict) -> dict:
    """The DVC metrics of `prepare`, from its detailed stats: tables per split, labels covered."""
    return {
        "tables": {split: s["tables"] for split, s in stats["splits"].items()},
        "cta_labels": stats["coverage"]["cta_labels"],
        "cpa_labels": stats["coverage"]["cpa_labels"],
        "skipped": sum(stats["skipped"].values()),
    }


def _read_sotab_splits(cfg: PrepareConfig, on_skip: Callable[[str, DataError], None]) -> dict[str, list[Table]]:
    """The source splits of the SOTAB V2 directory `prepare.sotab_dir`."""
    from aegir.data.sotab import read_sotab

    root = Path(cfg.sotab_dir)
    if not root.is_dir():
        raise DataError(root, "SOTAB V2 directory not found (prepare.sotab_dir)")
    return {split: read_sotab(root, split, on_skip=on_skip) for split in progress(SOURCE_SPLITS, desc="read", unit="split")}


def with_training_views(tables: list[Table], cfg: PrepareConfig) -> list[Table]:
    """Each training table followed by its `train_views − 1` views (`aegir.data.augment`)."""
    return [view for table in tables for view in table_views(table, cfg.train_views, cfg.seed)]


# ------------------------------------------------------------------ tables and their bytes, in parallel

Part = tuple[list[Table], pa.Table]  # some consecutive tables of a split, and their serialization


def _synthetic_part(synthetic: SyntheticConfig, cfg: PrepareConfig, split: str, start: int, stop: int) -> Part:
    """Tables start … stop − 1 of a synthetic split (`train`'s with their views), serialized."""
    from aegir.data.synth.generator import check_schema_labels, generate_table

    check_schema_labels()
    tables = [generate_table(synthetic, split, i) for i in range(start, stop)]
    if split == TRAIN_SPLIT:
        tables = with_training_views(tables, cfg)
    return tables, tables_to_arrow(tables, split, cfg, bar=False)


def _real_part(cfg: PrepareConfig) -> Part:
    """The `real` split (each family's first `cfg.real_tables_per_family` tables, or all), serialized."""
    from aegir.data.real import SPLIT as REAL
    from aegir.data.real import build_real_tables

    tables = build_real_tables(per_family=cfg.real_tables_per_family)
    return tables, tables_to_arrow(tables, REAL, cfg, bar=False)


def prepare_splits(params: Params, on_skip: Callable[[str, DataError], None], processes: int | None = None,
                   chunk: int = 400) -> tuple[dict[str, list[Table]], dict[str, pa.Table]]:
    """Every split's tables (`train` with its views) and their Arrow serialization
    (`tables_to_arrow`), split by split in `aegir.config.PREPARED_SPLITS` order: the source's
    splits, then those built whatever the source, the evaluation-only ones
    (`aegir.config.EVAL_ONLY_SPLITS`: `real`, from `aegir.data.real`, and the many-column `wide`
    tables of the synthetic generator, `synthetic.wide_*`), Phase 4's `wide_train`
    (`SWARM_TRAIN_SPLIT`), the specialists' `specialist_train` (`SPECIALIST_TRAIN_SPLIT`:
    `synthetic.specialist_train_tables` ordinary synthetic tables, whatever the source) and Phase
    4's `policy_train` (`POLICY_TRAIN_SPLIT`: `synthetic.policy_train_tables` more of them).

    The synthetic splits go out in ranges of `chunk` tables, each generated and serialized in
    one task, and the `real` split in one task, to `processes` worker processes (None: one per
    core, at most 8, when there are 2,000 tables or more to repay starting them): a range's
    tables are a pure function of (params, split, index), so any process count gives the same
    tables and, pieces joined in order, the same bytes (tested). SOTAB tables are read and
    serialized in this process."""
    from aegir.data.real import SPLIT as REAL
    from aegir.data.synth.generator import WIDE_SPLITS

    assert {REAL, *WIDE_SPLITS} == {*EVAL_ONLY_SPLITS, SWARM_TRAIN_SPLIT}
    cfg, synthetic = params.prepare, params.synthetic
    synthetic_splits = ((SOURCE_SPLITS if cfg.source == "synthetic" else ()) + WIDE_SPLITS
                        + (SPECIALIST_TRAIN_SPLIT, POLICY_TRAIN_SPLIT))
    jobs: list[tuple[str, Callable[..., Part], tuple]] = [(REAL, _real_part, (cfg,))]  # the longest task first
    for split in synthetic_splits:
        count = synthetic.tables_in(split)
        jobs += [(split, _synthetic_part, (synthetic, cfg, split, start, min(start + chunk, count)))
                 for start in range(0, count, chunk)]
    if processes is None:
        total = sum(synthetic.tables_in(split) for split in synthetic_splits)
        processes = max(1, min(8, os.cpu_count() or 1)) if total >= 2000 else 1

    tables: dict[str, list[Table]] = {}
    if cfg.source == "sotab":  # read (and serialized below) here, before the tasks' splits
        tables.update(_read_sotab_splits(cfg, on_skip))
        tables[TRAIN_SPLIT] = with_training_views(tables[TRAIN_SPLIT], cfg)
    pieces: dict[str, list[Part]] = {split: [] for split in PREPARED_SPLITS}
    with contextlib.ExitStack() as stack:
        if processes > 1:
            pool = stack.enter_context(ProcessPoolExecutor(max_workers=processes,
                                                           mp_context=multiprocessing.get_context("spawn")))
            futures = [pool.submit(fn, *args) for _, fn, args in jobs]
            parts = (future.result() for future in futures)
        else:
            parts = (fn(*args) for _, fn, args in jobs)
        for (split, _, _), part in zip(jobs, progress(parts, total=len(jobs), desc="generate + serialize",
                                                      unit="part")):
            pieces[split].append(part)

    arrow: dict[str, pa.Table] = {}
    for split in PREPARED_SPLITS:
        if split in tables:
            arrow[split] = tables_to_arrow(tables[split], split, cfg)
        else:
            tables[split] = [table for part_tables, _ in pieces[split] for table in part_tables]
            arrow[split] = (pa.concat_tables([piece for _, piece in pieces[split]]).combine_chunks()
                            if pieces[split] else tables_to_arrow([], split, cfg, bar=False))
    return {split: tables[split] for split in PREPARED_SPLITS}, arrow


def prepare_dataset(params: Params, data_dir: Path, stats_path: Path, metrics_path: Path | None = None) -> dict:
    """The `prepare` stage's work: every split built (`prepare_splits`), checked non-empty, and
    written atomically: `data_dir/<split>.parquet`, the detailed stats to `stats_path`, the DVC
    metrics (`headline_stats`) to `metrics_path`; the stats."""
    skipped: Counter[str] = Counter()  # reader cases skipped rather than fatal, by reason
    per_split, arrow = prepare_splits(params, lambda reason, error: skipped.update([reason]))
    for split, tables in per_split.items():
        # the specialists' and Phase 4's own splits are empty when none is asked for (their count 0)
        if not tables and not (split in (SPECIALIST_TRAIN_SPLIT, POLICY_TRAIN_SPLIT)
                               and params.synthetic.tables_in(split) == 0):
            raise DataError(data_dir / f"{split}.parquet", f"split '{split}' has no tables")
    with atomic.staged_dir(data_dir) as staging:
        for split in per_split:
            write_parquet(arrow[split], staging / f"{split}.parquet")
        stats = dataset_stats(per_split, arrow, skipped)
        atomic.write_json(stats_path, stats)
        if metrics_path is not None:
            atomic.write_json(metrics_path, headline_stats(stats))
    return stats

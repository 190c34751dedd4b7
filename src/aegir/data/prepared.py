"""Reading what `prepare` wrote: `data/prepared/<split>.parquet` (schema in `aegir.data.prepare`)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from aegir.data.table import Table
from aegir.errors import PIPELINE_HINT, DataError, is_pipeline_output

REQUIRED_COLUMNS = ("table_id", "stream", "span_start", "span_end", "cta", "cpa", "cells", "domain")


def split_path(data_dir: str | Path, split: str) -> Path:
    return Path(data_dir) / f"{split}.parquet"


def read_split(data_dir: str | Path, split: str) -> pa.Table:
    """The Arrow table of one prepared split; a clear error if missing or malformed."""
    path = split_path(data_dir, split)
    if not path.is_file():
        raise DataError(path, f"prepared split '{split}' not found" + (PIPELINE_HINT if is_pipeline_output(path) else
                                                                      " (written by the `prepare` stage)"))
    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise DataError(path, f"not a readable Parquet file ({exc})") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
    if missing:
        raise DataError(path, f"missing column(s) {missing}: not prepared data")
    return table


def tables_from_arrow(arrow: pa.Table) -> list[Table]:
    """Rebuild `Table`s (all rows, raw cells) from a prepared split."""
    out = []
    names = arrow.column("column_names").to_pylist() if "column_names" in arrow.column_names else None
    for i, (table_id, domain, cells, cta, cpa) in enumerate(
        zip(*(arrow.column(c).to_pylist() for c in ("table_id", "domain", "cells", "cta", "cpa")))
    ):
        out.append(Table(
            table_id=table_id,
            columns=tuple(tuple(column) for column in cells),
            cta=tuple(cta),
            cpa=tuple(cpa),
            domain=domain,
            column_names=tuple(names[i]) if names and names[i] is not None else None,
        ))
    return out


def fingerprint(data_dir: str | Path, splits: tuple[str, ...]) -> dict[str, str]:
    """sha256 of each prepared split file: recorded in checkpoints to tie them to their data."""
    prints = {}
    for split in splits:
        path = split_path(data_dir, split)
        if not path.is_file():
            raise DataError(path, f"prepared split '{split}' not found (run `dvc repro prepare`)")
        prints[split] = hashlib.sha256(path.read_bytes()).hexdigest()
    return prints

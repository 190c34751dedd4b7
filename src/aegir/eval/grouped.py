"""How a trained model reads a table when it scores or annotates it: wide tables in column groups,
and every table in several row views.

The model is trained on tables of a few columns (`synthetic.min_columns` … `max_columns`), each
serialized into one stream of `prepare.byte_budget` bytes shared between its columns
(`aegir.data.serialize`). Two things follow, and the reading plan answers each:

**Column groups** (`read_columns`). A table of 30 columns read as one stream leaves each column
about a thirtieth of the budget: a cell or two where training gave it six to ten. A table of
more than `read_columns` columns is read as sub-tables, each the subject column 0 plus a
contiguous group of at most `read_columns − 1` others (balanced group sizes:
`aegir.data.groups.column_groups`, the groups Phase 4's wide search uses), each serialized on its
own as `prepare` serializes a table. Every non-subject column is read by exactly one group; the
subject column by every group, and its figures are the first group's (the columns nearest it,
as the table is laid out).

**Row views** (`read_views`). A column's share of the budget holds its first few cells; the
rest of a long column is never read. View v of a table of n rows is the table with its rows
rotated by ⌊v·n/V⌋ (view 0 is the table itself), so the V views start at V evenly spaced rows
and together show cells the first view left out. Each view is read (in its column groups), and a
column's label distribution is the mean of its views' softmax distributions.

A table of at most `read_columns` columns read in one view is read exactly as before, from its
prepared example. A routed model's activation for a table is the union over the groups of view 0
(the table as prepared), so routing statistics do not grow with the views; the union over every
read (`TablePrediction.activation_any`) says which specialists read any view of it.

**Joint decoding** (`reading.joint_cta`, `reading.joint_cpa`). A table's merged distributions
then go through `aegir.eval.joint`: each column's label is chosen with the table's other
columns in view, so that a label tables rarely repeat is rarely given twice.

Where it is used: `phase1` and `phase3` score every evaluation split this way
(`reading.columns`, `reading.views`, `reading.joint_*` in params.yaml), and `aegir annotate` / `aegir evaluate` read
users' tables with the settings recorded in the checkpoint. Every read is a function of a few rows
of the table (each stream's row sample, rotated per view): `rows_read` lists them, so that
`aegir annotate` reads only those rows of a file (`aegir.data.user_tables`). Phase 4 does not: its never-spawn
control is the shared stream on purpose, and its wide search is the column-group reading with a
learned merge.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from aegir.config import PrepareConfig
from aegir.data.dataset import Example, examples_from_tables
from aegir.data.groups import column_groups, sub_table, sub_table_id
from aegir.data.prepared import read_split, split_path, tables_from_arrow
from aegir.data.serialize import sample_rows
from aegir.data.table import SampledColumn, Table
from aegir.eval.predict import TablePrediction

ALL_LABELS = 1 << 20  # a top_k that gives every label's probability (aegir.eval.predict.table_predictions)


@dataclass(frozen=True)
class TableReads:
    """The streams to read for a list of tables and how they map back.

    reads:   the examples to run the model on (a table's own prepared example when view 0 reads
             it whole, serialized sub-tables or views otherwise)
    owners:  per read, (table index, view, the table's columns it holds in read order; 0 first)
    """

    reads: list[Example]
    owners: list[tuple[int, int, tuple[int, ...]]]
    num_tables: int

    @property
    def one_read_per_table(self) -> bool:
        return len(self.reads) == self.num_tables


def read_groups(num_columns: int, read_columns: int) -> list[tuple[int, ...]]:
    """The column tuples a table of `num_columns` is read in: the whole table when it has at most
    `read_columns` columns (or `read_columns` is 0), else (0, *group) for balanced contiguous
    groups of at most `read_columns − 1` non-subject columns."""
    if read_columns == 0 or num_columns <= read_columns:
        return [tuple(range(num_columns))]
    if read_columns < 2:
        raise ValueError(f"read_columns must be 0 or ≥ 2, got {read_columns}")
    groups = math.ceil((num_columns - 1) / (read_columns - 1))
    return [(0, *group) for group in column_groups(num_columns, groups)]


def view_start(view: int, views: int, num_rows: int) -> int:
    """The row that view `view` of `views` of a table of `num_rows` rows starts at: ⌊view·n/views⌋."""
    if not 0 <= view < views:
        raise ValueError(f"view must be in [0, {views}), got {view}")
    return view * num_rows // views


def row_view(table: Table, view: int, views: int) -> Table:
    """View `view` of `views`: the rows rotated to start at row ⌊view·n/views⌋ (same id, labels).
    A `SampledColumn` (a file's rows read lazily) is rotated without reading any row."""
    n = table.num_rows
    start = view_start(view, views, n)
    if start == 0:
        return table

    def rotated(column):
        if isinstance(column, SampledColumn):
            return column.rotated(start)  # no list of the n rows: a file's may be millions long
        return tuple(column[i] for i in range(start, n)) + tuple(column[i] for i in range(start))

    return Table(table_id=table.table_id, columns=tuple(rotated(column) for column in table.columns),
                 cta=table.cta, cpa=table.cpa, domain=table.domain, column_names=table.column_names)


def rows_read(num_rows: int, table_id: str, num_columns: int, read_columns: int, read_views: int,
              prepare: PrepareConfig) -> set[int]:
    """The rows of a table whose cells its example (the whole table, as `prepare` serializes it)
    and `table_reads` serialize, and so the only ones its reads depend on: the example's sample,
    and per column group (its own id seeds its row sample) the rows `sample_rows` keeps, in every
    view's rotation. A file read lazily needs only these (`aegir.data.user_tables`)."""
    rows = set(sample_rows(num_rows, prepare.max_rows, prepare.seed, table_id))
    groups = read_groups(num_columns, read_columns)
    for columns in groups:
        read_id = table_id if len(columns) == num_columns else sub_table_id(table_id, columns)
        sampled = sample_rows(num_rows, prepare.max_rows, prepare.seed, read_id)
        for view in range(read_views):
            start = view_start(view, read_views, num_rows)
            rows.update((start + row) % num_rows for row in sampled)
    return rows


def table_reads(tables: Sequence[Table], examples: Sequence[Example], read_columns: int, read_views: int,
                prepare: PrepareConfig, where: Path) -> TableReads:
    """The reads of `tables` (raw cells; `examples[i]` is table i as prepared): view 0 of a table
    that fits is its example; every other read is serialized with `prepare`'s settings."""
    if len(tables) != len(examples):
        raise ValueError(f"{where}: {len(tables)} tables but {len(examples)} examples")
    if read_views < 1:
        raise ValueError(f"read_views must be ≥ 1, got {read_views}")
    reads: list[Example | None] = []
    owners: list[tuple[int, int, tuple[int, ...]]] = []
    pending: list[tuple[int, Table]] = []  # (position in reads, table to serialize)
    for index, (table, example) in enumerate(zip(tables, examples)):
        if table.table_id != example.table_id:
            raise ValueError(f"{where}: table {index} is {table.table_id!r} but example {index} is {example.table_id!r}")
        groups = read_groups(example.num_columns, read_columns)
        for view in range(read_views):
            viewed = row_view(table, view, read_views)
            for columns in groups:
                owners.append((index, view, columns))
                whole = len(columns) == example.num_columns
                if whole and viewed is table:
                    reads.append(example)
                else:
                    pending.append((len(reads), viewed if whole else sub_table(viewed, columns)))
                    reads.append(None)
    serialized = examples_from_tables([t for _, t in pending], prepare.byte_budget, prepare.max_rows, prepare.seed,
                                      where, prepare.compact_columns, prepare.compact_cell_bytes)
    for (position, _), example in zip(pending, serialized):
        reads[position] = example
    return TableReads(reads, owners, len(tables))  # type: ignore[arg-type]


def split_reads(data_dir: str | Path, split: str, examples: Sequence[Example], read_columns: int, read_views: int,
                prepare: PrepareConfig) -> TableReads:
    """`table_reads` of a prepared split whose examples are `examples` (its raw cells are read
    only when some table needs more than its prepared example)."""
    if read_views == 1 and (read_columns == 0 or all(e.num_columns <= read_columns for e in examples)):
        return TableReads(list(examples), [(i, 0, tuple(range(e.num_columns))) for i, e in enumerate(examples)],
                          len(examples))
    tables = tables_from_arrow(read_split(data_dir, split))
    return table_reads(tables, examples, read_columns, read_views, prepare, split_path(data_dir, split))


def _distribution(ids: np.ndarray, probs: np.ndarray, row: int, size: int) -> np.ndarray:
    out = np.zeros(size, dtype=np.float64)
    out[ids[row]] = probs[row]
    return out


def merge_predictions(plan: TableReads, predictions: Sequence[TablePrediction], table_ids: Sequence[str],
                      top_k: int = 1, sizes: tuple[int, int] | None = None) -> list[TablePrediction]:
    """One prediction per table from the predictions of its reads (in `plan.reads` order).

    A table read once keeps its read's prediction. Otherwise the reads must carry every label's
    probability (predicted with `ALL_LABELS`; `sizes` = (CTA, CPA) label counts, taken from the
    reads when None): a column's distribution is the mean over views of the distribution its
    group gave it, and its top `top_k` labels are kept."""
    if len(predictions) != len(plan.reads):
        raise ValueError(f"{len(predictions)} predictions for {len(plan.reads)} reads")
    parts: list[list[tuple[int, tuple[int, ...], TablePrediction]]] = [[] for _ in range(plan.num_tables)]
    for (index, view, columns), prediction in zip(plan.owners, predictions):
        parts[index].append((view, columns, prediction))
    cta_size, cpa_size = sizes or (predictions[0].cta_ids.shape[1], predictions[0].cpa_ids.shape[1])
    merged = []
    for table_id, table_parts in zip(table_ids, parts):
        if len(table_parts) == 1:
            merged.append(top(table_parts[0][2], top_k))
            continue
        num_columns = 1 + max(c for _, columns, _ in table_parts for c in columns)
        views = 1 + max(view for view, _, _ in table_parts)
        cta = np.zeros((num_columns, cta_size))
        cpa = np.zeros((num_columns, cpa_size))
        subject_read = set()
        for view, columns, prediction in table_parts:
            for row, column in enumerate(columns):
                if column == 0:
                    if view in subject_read:
                        continue  # the subject column's figures are its view's first group's
                    subject_read.add(view)
                cta[column] += _distribution(prediction.cta_ids, prediction.cta_probs, row, cta_size)
                cpa[column] += _distribution(prediction.cpa_ids, prediction.cpa_probs, row, cpa_size)
        cta_p, cta_i = torch.from_numpy(cta / views).topk(min(top_k, cta_size), dim=-1)
        cpa_p, cpa_i = torch.from_numpy(cpa / views).topk(min(top_k, cpa_size), dim=-1)
        activations = [p.activation for view, _, p in table_parts if view == 0]
        activation = None if activations[0] is None else np.logical_or.reduce(np.stack(activations))
        every = None if activation is None else np.logical_or.reduce(np.stack([p.activation for _, _, p in table_parts]))
        merged.append(TablePrediction(table_id=table_id, cta_ids=cta_i.numpy(), cta_probs=cta_p.float().numpy(),
                                      cpa_ids=cpa_i.numpy(), cpa_probs=cpa_p.float().numpy(), activation=activation,
                                      activation_any=every))
    return merged


def top(prediction: TablePrediction, top_k: int) -> TablePrediction:
    """The first `top_k` labels of each column of `prediction`."""
    return TablePrediction(prediction.table_id, prediction.cta_ids[:, :top_k], prediction.cta_probs[:, :top_k],
                           prediction.cpa_ids[:, :top_k], prediction.cpa_probs[:, :top_k], prediction.activation,
                           prediction.activation_any)


def decoded(predictions: Sequence[TablePrediction], decode: Callable[[TablePrediction], TablePrediction] | None,
            top_k: int) -> list[TablePrediction]:
    """Each table's prediction (every label's probability) through `decode` (the joint decoding
    of `aegir.eval.joint`; None: as it is), cut to its top `top_k` labels."""
    return [top(decode(p) if decode else p, top_k) for p in predictions]


def predict_tables(run: Callable[[list[Example], int], list[TablePrediction]], plan: TableReads,
                   table_ids: Sequence[str], top_k: int = 1,
                   decode: Callable[[TablePrediction], TablePrediction] | None = None) -> list[TablePrediction]:
    """Per-table predictions of a reading plan: `run(examples, k)` predicts the reads (top-k of
    each), once; with one read per table and no `decode` that is the whole story. `decode`
    (`aegir.eval.joint.decode_table` with its settings) takes a table's whole distributions and
    puts its chosen labels first."""
    if plan.one_read_per_table and decode is None:
        return run(plan.reads, top_k)
    predictions = run(plan.reads, ALL_LABELS)
    if not plan.one_read_per_table:
        predictions = merge_predictions(plan, predictions, table_ids, ALL_LABELS)
    return decoded(predictions, decode, top_k)

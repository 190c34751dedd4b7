"""Reading a wide table in column groups: each group its own stream with the whole byte budget.

The model is trained on tables of a few columns (`synthetic.min_columns` … `max_columns`), each
serialized into one stream of `prepare.byte_budget` bytes shared between its columns. A table of
30 columns read the same way leaves each column about a thirtieth of the budget: a cell or two
where training gave it six to ten. Grouped reading keeps every column's share near what training
gave: a table of more than `read_columns` columns is read as several sub-tables, each the subject
column 0 plus a contiguous group of at most `read_columns − 1` others (balanced group sizes:
`aegir.data.groups.column_groups`, the groups Phase 4's wide search uses), each serialized on its
own as `prepare` serializes a table. A table of at most `read_columns` columns is read as it
always was, from its prepared stream, so on the embedded benchmark's ordinary splits nothing
changes.

Every non-subject column is read by exactly one group: its CTA and CPA (its relation to the
subject) are that group's. The subject column is read by every group; its CTA is the first
group's (the columns nearest it, as the table is laid out). A routed model's activation for the
table is the union of its groups' activations.

Where it is used: `phase1` and `phase3` score every evaluation split this way
(`phase1.read_columns`, 0 = whole tables always), and `aegir annotate` / `aegir evaluate` read
users' tables this way with the setting recorded in the checkpoint. Phase 4 does not: its never
spawn control is the shared stream on purpose, and its wide search is this reading with a learned
merge.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aegir.config import PrepareConfig
from aegir.data.dataset import Example, examples_from_tables
from aegir.data.groups import column_groups, sub_table
from aegir.data.prepared import read_split, split_path, tables_from_arrow
from aegir.data.table import Table
from aegir.eval.predict import TablePrediction


@dataclass(frozen=True)
class GroupedReads:
    """The streams to read for a list of tables and how they map back.

    reads:   the examples to run the model on (a table's own prepared example when it is read
             whole, sub-table examples otherwise)
    owners:  per read, (table index, the table's columns it holds, in read order; column 0 first)
    """

    reads: list[Example]
    owners: list[tuple[int, tuple[int, ...]]]
    num_tables: int


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


def grouped_reads(tables: Sequence[Table], examples: Sequence[Example], read_columns: int,
                  prepare: PrepareConfig, where: Path) -> GroupedReads:
    """The reads of `tables` (raw cells; `examples[i]` is table i as prepared): tables that fit
    are read from their example, the others in groups serialized with `prepare`'s settings."""
    if len(tables) != len(examples):
        raise ValueError(f"{where}: {len(tables)} tables but {len(examples)} examples")
    reads: list[Example | None] = []
    owners: list[tuple[int, tuple[int, ...]]] = []
    pending: list[tuple[int, Table]] = []  # (position in reads, sub-table)
    for index, (table, example) in enumerate(zip(tables, examples)):
        if table.table_id != example.table_id:
            raise ValueError(f"{where}: table {index} is {table.table_id!r} but example {index} is {example.table_id!r}")
        for columns in read_groups(example.num_columns, read_columns):
            owners.append((index, columns))
            if len(columns) == example.num_columns:
                reads.append(example)
            else:
                pending.append((len(reads), sub_table(table, columns)))
                reads.append(None)
    serialized = examples_from_tables([sub for _, sub in pending], prepare.byte_budget, prepare.max_rows,
                                      prepare.seed, where, prepare.compact_columns, prepare.compact_cell_bytes)
    for (position, _), example in zip(pending, serialized):
        reads[position] = example
    return GroupedReads(reads, owners, len(tables))  # type: ignore[arg-type]


def merge_predictions(grouped: GroupedReads, predictions: Sequence[TablePrediction],
                      table_ids: Sequence[str]) -> list[TablePrediction]:
    """One prediction per table from the predictions of its reads (in `grouped.reads` order)."""
    if len(predictions) != len(grouped.reads):
        raise ValueError(f"{len(predictions)} predictions for {len(grouped.reads)} reads")
    parts: list[list[tuple[tuple[int, ...], TablePrediction]]] = [[] for _ in range(grouped.num_tables)]
    for (index, columns), prediction in zip(grouped.owners, predictions):
        parts[index].append((columns, prediction))
    merged = []
    for table_id, table_parts in zip(table_ids, parts):
        if len(table_parts) == 1 and table_parts[0][1].table_id == table_id:
            merged.append(table_parts[0][1])
            continue
        num_columns = 1 + sum(len(columns) - 1 for columns, _ in table_parts)
        first = table_parts[0][1]
        fields = {name: np.empty((num_columns, *getattr(first, name).shape[1:]), getattr(first, name).dtype)
                  for name in ("cta_ids", "cta_probs", "cpa_ids", "cpa_probs")}
        for number, (columns, prediction) in enumerate(table_parts):
            for row, column in enumerate(columns):
                if column == 0 and number > 0:
                    continue  # the subject column's figures are the first group's
                for name, array in fields.items():
                    array[column] = getattr(prediction, name)[row]
        activations = [p.activation for _, p in table_parts]
        activation = None if activations[0] is None else np.logical_or.reduce(np.stack(activations))
        merged.append(TablePrediction(table_id=table_id, activation=activation, **fields))
    return merged


def grouped_split(data_dir: str | Path, split: str, examples: Sequence[Example], read_columns: int,
                  prepare: PrepareConfig) -> GroupedReads:
    """`grouped_reads` of a prepared split whose examples are `examples` (its raw cells are read
    only when a table needs grouping)."""
    if read_columns == 0 or all(e.num_columns <= read_columns for e in examples):
        return GroupedReads(list(examples), [(i, tuple(range(e.num_columns))) for i, e in enumerate(examples)],
                            len(examples))
    tables = tables_from_arrow(read_split(data_dir, split))
    return grouped_reads(tables, examples, read_columns, prepare, split_path(data_dir, split))

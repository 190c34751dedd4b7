"""Training views of a table: the same table with its rows shuffled, its columns reordered and
a few cells blanked, so that a model trained for several epochs does not see the same bytes
every time.

A byte budget shows a model only some of a table's cells (`aegir.data.serialize`): another
row order shows it other cells of the same columns. Moving the non-subject columns teaches it
that a label does not live at a position (column 0 stays first: CPA relates it to the others).
Blanking cells imitates the missing values of real tables. Labels move with their columns.

`table_views(table, n, seed)` gives the table itself first, then n − 1 views; view k is a pure
function of (seed, table_id, k) through BLAKE2b, never `hash()`, so the same params give the
same prepared bytes on every machine.
"""

from __future__ import annotations

import hashlib
import random

from aegir.data.table import SUBJECT_COLUMN, Table

BLANK_RATE = 0.1  # share of a view's cells blanked (a column keeps at least one of its values)


def view_seed(seed: int, table_id: str, view: int) -> int:
    text = f"aegir-view\x1f{seed}\x1f{table_id}\x1f{view}"
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")


def table_view(table: Table, view: int, seed: int, blank_rate: float = BLANK_RATE) -> Table:
    """View `view` (≥ 1) of `table`: rows permuted, columns after the subject permuted, about
    `blank_rate` of the cells set to None; table_id `<id>~v<view>`."""
    rng = random.Random(view_seed(seed, table.table_id, view))
    n_rows = table.num_rows
    rows = list(range(n_rows))
    rng.shuffle(rows)
    order = [c for c in range(table.num_columns) if c != SUBJECT_COLUMN]
    rng.shuffle(order)
    if table.num_columns:
        order.insert(SUBJECT_COLUMN, SUBJECT_COLUMN)
    columns = []
    for c in order:
        cells = [table.columns[c][r] if r < len(table.columns[c]) else None for r in rows]
        present = [r for r, cell in enumerate(cells) if cell not in (None, "")]
        for r in present[1:] if len(present) > 1 else ():
            if rng.random() < blank_rate:
                cells[r] = None
        columns.append(tuple(cells))
    names = tuple(table.column_names[c] for c in order) if table.column_names else None
    return Table(table_id=f"{table.table_id}~v{view}", columns=tuple(columns),
                 cta=tuple(table.cta[c] for c in order), cpa=tuple(table.cpa[c] for c in order),
                 domain=table.domain, column_names=names)


def table_views(table: Table, n: int, seed: int) -> list[Table]:
    """The table and n − 1 training views of it (n ≥ 1)."""
    if n < 1:
        raise ValueError(f"need at least one view, got {n}")
    return [table] + [table_view(table, k, seed) for k in range(1, n)]

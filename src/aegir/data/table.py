"""The `Table`: the one in-memory form every reader and the generator produce."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

SUBJECT_COLUMN = 0  # CPA relates column 0 (the table's subject) to every other column


@dataclass(frozen=True)
class Table:
    """A table, column-major, with optional labels.

    columns: one sequence of cells per column (a tuple; a `SampledColumn` when only some rows
        of a file were read); a cell is a `str` or `None` (missing). Cells stay strings end to
        end: "01234" is a postal code, not the number 1234.
    cta: one CTA label (or None) per column.
    cpa: one CPA label (or None) per column; the relation of column 0 to that column, so
        `cpa[0]` is always None.
    domain: the schema.org class of the subject (e.g. "Hotel"), or None when unknown.
    column_names: header names where the source has them (user CSVs), else None.
    """

    table_id: str
    columns: tuple[tuple[str | None, ...], ...]
    cta: tuple[str | None, ...]
    cpa: tuple[str | None, ...]
    domain: str | None = None
    column_names: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        n = len(self.columns)
        if len(self.cta) != n or len(self.cpa) != n:
            raise ValueError(
                f"table {self.table_id}: {n} columns but {len(self.cta)} CTA and "
                f"{len(self.cpa)} CPA labels"
            )
        if n and self.cpa[SUBJECT_COLUMN] is not None:
            raise ValueError(f"table {self.table_id}: column 0 is the subject and has no CPA label")
        if self.column_names is not None and len(self.column_names) != n:
            raise ValueError(f"table {self.table_id}: {n} columns but {len(self.column_names)} names")

    @property
    def num_columns(self) -> int:
        return len(self.columns)

    @property
    def num_rows(self) -> int:
        return max((len(c) for c in self.columns), default=0)


class SampledColumn(Sequence):
    """A column of `length` cells of which only the rows in `cells` (row → cell) were read from
    its file (`aegir.data.user_tables`: the rows a model reads), so that a table of a million rows
    costs the memory of the few it is read by. It has the file's length, so that row sampling
    (`aegir.data.serialize.sample_rows`, a function of the row count) picks the rows it would
    pick from the whole column; indexing a row that was not read is a `LookupError`, never a
    silent None. `rotated(start)` is the column with its rows rotated to start at row `start`
    (`aegir.eval.grouped.row_view`), without copying."""

    __slots__ = ("_cells", "_length", "_start")

    def __init__(self, cells: Mapping[int, str | None], length: int, start: int = 0):
        if any(not 0 <= row < length for row in cells):
            raise ValueError(f"rows read must lie in [0, {length})")
        self._cells, self._length, self._start = cells, length, start % length if length else 0

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, row):
        if not isinstance(row, int):
            raise TypeError(f"SampledColumn indices are rows (int), got {type(row).__name__}")
        if row < 0:
            row += self._length
        if not 0 <= row < self._length:
            raise IndexError(f"row {row} out of range for a column of {self._length} rows")
        source = (row + self._start) % self._length
        try:
            return self._cells[source]
        except KeyError:
            raise LookupError(f"row {source} of this column was not read from its file") from None

    def rotated(self, start: int) -> SampledColumn:
        """The column whose row r is this column's row (start + r) mod length."""
        return SampledColumn(self._cells, self._length, self._start + start)

    def read_rows(self) -> list[tuple[int, str | None]]:
        """(row, cell) of every row read, in row order (rows counted from this column's start)."""
        rows = sorted((source - self._start) % self._length for source in self._cells)
        return [(row, self[row]) for row in rows]

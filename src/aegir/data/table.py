"""The `Table`: the one in-memory form every reader and the generator produce."""

from __future__ import annotations

from dataclasses import dataclass

SUBJECT_COLUMN = 0  # CPA relates column 0 (the table's subject) to every other column


@dataclass(frozen=True)
class Table:
    """A table, column-major, with optional labels.

    columns: one list of cells per column; a cell is a `str` or `None` (missing). Cells stay
        strings end to end: "01234" is a postal code, not the number 1234.
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

"""Column groups of a table and the sub-tables that hold them.

A wide table is read in groups of columns, each with the subject column 0 in front: Phase 4's
wide search gives each group to a sub-agent (`aegir.swarm.spawn`), and grouped reading
(`aegir.eval.grouped`) gives a Phase 1 or Phase 3 model each group as a table of its own.
"""

from __future__ import annotations

from collections.abc import Sequence

from aegir.data.table import Table


def column_groups(num_columns: int, g: int) -> list[tuple[int, ...]]:
    """The non-subject columns 1 … C−1 in min(g, C−1) contiguous groups whose sizes differ by at
    most one (the larger first). g = 0 or a one-column table gives no group."""
    if g < 0 or num_columns < 1:
        raise ValueError(f"need g ≥ 0 and num_columns ≥ 1, got g={g}, num_columns={num_columns}")
    others = num_columns - 1
    groups = min(g, others)
    if groups == 0:
        return []
    size, extra = divmod(others, groups)
    out, start = [], 1
    for i in range(groups):
        end = start + size + (1 if i < extra else 0)
        out.append(tuple(range(start, end)))
        start = end
    return out


def sub_table_id(table_id: str, columns: Sequence[int]) -> str:
    """The id of the sub-table of `table_id` holding `columns` (it seeds the sub-table's row
    sample: `aegir.data.serialize.sample_rows`)."""
    return f"{table_id}#{'-'.join(map(str, columns))}"


def sub_table(table: Table, columns: Sequence[int]) -> Table:
    """The sub-table of `table` holding `columns` (original indices, the subject first), its
    labels carried along; its id names the columns so that two sub-tasks never share one."""
    columns = tuple(columns)
    if not columns or columns[0] != 0 or len(set(columns)) != len(columns):
        raise ValueError(f"a sub-task's columns start with the subject column 0, once each; got {columns}")
    names = table.column_names
    return Table(
        table_id=sub_table_id(table.table_id, columns),
        columns=tuple(table.columns[c] for c in columns),
        cta=tuple(table.cta[c] for c in columns),
        cpa=tuple(table.cpa[c] for c in columns),
        domain=table.domain,
        column_names=tuple(names[c] for c in columns) if names else None,
    )

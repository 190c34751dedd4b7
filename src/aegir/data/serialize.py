"""Table → one byte stream with column spans.

Byte ids: 0..255 are the stream's raw bytes; ids above 255 are specials that never occur in a
stream on disk and are added by the torch side only. The model's embedding has exactly
`BYTE_VOCAB_SIZE` rows.

Layout of `SerializedTable.data`, column by column:

    col 0: cell ␟ cell ␟ … ␟ cell ␞   col 1: cell ␟ … ␞   …   col C-1: … ␞
           ^span[0][0]          ^span[0][1]                         (␟ CELL_SEP, ␞ COLUMN_SEP)

Every column, the last included, ends with COLUMN_SEP, and its span [start, end) covers its
cells and the CELL_SEPs between them, so `data[end] == COLUMN_SEP`: a causal reader at `end`
has read the whole column. A missing cell (None) is an empty cell (nothing between its
separators). Cells are UTF-8; CELL_SEP and COLUMN_SEP are ASCII control characters, which in
UTF-8 occur only as themselves (multi-byte sequences use bytes ≥ 0x80), so replacing those two
characters by a space in the cell text is enough for them never to occur inside a cell. Inside
a span, the only reserved byte is CELL_SEP between cells. Zero cells and one empty cell write
the same (empty) span; `deserialize_cells` reads an empty span back as `[""]`.

Budget. `len(data) <= byte_budget`, separators included (the BOS that `encode_for_model`
prepends is not counted). Each column first gets its COLUMN_SEP; the remaining bytes are
shared by water-filling (`fair_shares`): a column that needs little takes what it needs and
the rest is split evenly among the longer ones, so every column gets at least
⌊(byte_budget − C) / C⌋ bytes of its cells when it has that many. Within its share a column
keeps whole cells in row order while they fit, and cuts the first cell that does not fit at a
UTF-8 character boundary (never inside a multi-byte character; up to 3 bytes of a share can
go unused that way). A budget below one byte per column (no room for the COLUMN_SEPs) is a
`ByteBudgetError`. With byte_budget ≥ 5·C every column whose first cell is non-empty keeps at
least one whole character of it (a UTF-8 character has at most 4 bytes).

Compact columns (`compact=True`). A column whose cells do not all fit its share is written
compact instead: its missing cells (None or a missing-value token such as "N/A", "-",
"null"; `is_missing_text`) and its repeats of an earlier cell are dropped, the rest kept in
row order. Its demand shrinks to the compact cells' bytes, so the shares are computed again,
and the bytes it frees go to the other columns; this repeats until no column that is written
whole overflows (at most C rounds: a smaller demand never shrinks another column's share).
Columns that fit are written exactly as without `compact`, so a table that fits its budget
gives the same bytes either way. A compact column's k-th cell is no longer the k-th row's,
but it spends its bytes on what tells its type: distinct values, not blanks and repeats
("Yes|Yes|Yes|No" → "Yes|No", "N/A|-|4.5|N/A|4.7" → "4.5|4.7").

Rows. A table with more than `max_rows` rows keeps `max_rows` of them, the same rows for
every column, in their original order. The choice is a pure function of (seed, table_id,
number of rows): each row gets a BLAKE2b key of (seed, table_id, row index) and the rows with
the smallest keys are kept. A stable hash, not `hash()` or `random`, so the same params give
the same bytes on every machine and Python version.
"""

from __future__ import annotations

import functools
import hashlib
import heapq
from dataclasses import dataclass

import numpy as np

from aegir.data.table import Table
from aegir.errors import AegirError

CELL_SEP = 0x1F  # ASCII unit separator, between two cells of a column
COLUMN_SEP = 0x1E  # ASCII record separator, after every column (the last one included)
RESERVED_BYTES = frozenset({CELL_SEP, COLUMN_SEP})  # stripped from cell text

# Whole-cell texts (after strip, case-folded) that mean "no value" on the web.
MISSING_CELL_TEXTS = frozenset({"", "n/a", "na", "-", "--", "—", "–", "null", "none", "nan", "nil", "?"})

PAD_ID = 256  # padding after the end of a stream
BOS_ID = 257  # start of a table, prepended by the dataset
BYTE_VOCAB_SIZE = 258

_STRIP_RESERVED = dict.fromkeys(RESERVED_BYTES, " ")  # str.translate table: ASCII code == byte


class ByteBudgetError(AegirError, ValueError):
    """The byte budget cannot hold even one separator byte per column."""


@dataclass(frozen=True)
class SerializedTable:
    """One table as bytes.

    data:         the stream (layout in the module docstring), len(data) <= byte_budget
    column_spans: per column, [start, end) of its cell bytes; data[end] == COLUMN_SEP
    rows:         the table rows kept (sorted row indices), the same for every column; a
                  column may hold fewer of them when its byte share ran out (and, written
                  compact, only those with distinct non-missing cells)
    """

    data: bytes
    column_spans: tuple[tuple[int, int], ...]
    rows: tuple[int, ...]


@functools.lru_cache(maxsize=256)
def sample_rows(num_rows: int, max_rows: int, seed: int, table_id: str) -> tuple[int, ...]:
    """Sorted indices of the rows kept: all when num_rows <= max_rows, else a stable sample.

    It hashes every row, so it is cached: a long table that is read several times with the same
    id (its example, its row views; `aegir.eval.grouped.rows_read` first) hashes its rows once
    (about half a second per million rows on the 2-core Xeon)."""
    if max_rows < 1:
        raise ValueError(f"max_rows must be >= 1, got {max_rows}")
    if num_rows <= max_rows:
        return tuple(range(num_rows))
    prefix = hashlib.blake2b(f"{seed}\x1f{table_id}\x1f".encode(), digest_size=8)

    def key(row: int) -> bytes:
        h = prefix.copy()
        h.update(row.to_bytes(8, "little"))
        return h.digest()

    return tuple(sorted(heapq.nsmallest(max_rows, range(num_rows), key=key)))


def is_missing_text(cell: str | None) -> bool:
    """None, empty, or a missing-value token (`MISSING_CELL_TEXTS`)."""
    return cell is None or cell.strip().casefold() in MISSING_CELL_TEXTS


def compact_cells(cells: list[bytes], missing: list[bool], cell_limit: int = 0) -> list[bytes]:
    """A column's cells without its missing ones and without repeats, in row order, each cut
    to at most `cell_limit` bytes at a character boundary (0: uncut)."""
    seen: set[bytes] = set()
    kept = []
    for cell, absent in zip(cells, missing):
        if absent:
            continue
        if cell_limit:
            cell = cut_utf8(cell, cell_limit)
        if cell not in seen:
            seen.add(cell)
            kept.append(cell)
    return kept


def column_demand(cells: list[bytes]) -> int:
    """Bytes of a column's cells with the CELL_SEPs between them."""
    return sum(map(len, cells)) + max(len(cells) - 1, 0)


def compact_shares(full: list[list[bytes]], compact: list[list[bytes]], capacity: int) -> tuple[list[int], list[bool]]:
    """(shares, compacted): which columns are written compact and the bytes each gets.

    A column is compacted when its full cells overflow the share it gets; shares are then
    recomputed with its smaller demand, until no full column overflows.
    """
    compacted = [False] * len(full)
    full_demands = [column_demand(cells) for cells in full]
    compact_demands = [column_demand(cells) for cells in compact]
    while True:
        demands = [compact_demands[c] if compacted[c] else full_demands[c] for c in range(len(full))]
        shares = fair_shares(demands, capacity)
        overflowing = [c for c in range(len(full)) if not compacted[c] and shares[c] < full_demands[c]]
        if not overflowing:
            return shares, compacted
        for c in overflowing:
            compacted[c] = True


def cell_bytes(cell: str | None, limit: int) -> bytes:
    """UTF-8 of a cell with reserved characters replaced by spaces; None → b"".

    Only the first `limit` characters are encoded: they make at least `limit` bytes, more than
    any share, so the cut is the same as with the whole cell and a huge cell costs nothing.
    """
    if not cell:
        return b""
    return cell[:limit].translate(_STRIP_RESERVED).encode("utf-8")


def cut_utf8(data: bytes, limit: int) -> bytes:
    """The longest prefix of the valid UTF-8 `data` of at most `limit` bytes that ends on a
    character boundary."""
    if len(data) <= limit:
        return data
    end = max(limit, 0)
    while end > 0 and (data[end] & 0xC0) == 0x80:  # data[end] continues a character
        end -= 1
    return data[:end]


def fair_shares(demands: list[int], capacity: int) -> list[int]:
    """Water-filling: share `capacity` bytes among columns wanting `demands` bytes.

    Every column gets min(demand, level) for the highest level the capacity allows; the
    bytes left below the next level (fewer than the number of unsatisfied columns) go one
    each to the unsatisfied columns of lowest index. Equal to `fair_shares_naive`.
    """
    if sum(demands) <= capacity:
        return list(demands)
    shares = [0] * len(demands)
    left = capacity
    pending = sorted(range(len(demands)), key=lambda c: (demands[c], c))
    for rank, column in enumerate(pending):
        open_columns = len(pending) - rank
        if demands[column] * open_columns <= left:
            shares[column] = demands[column]
            left -= demands[column]
            continue
        level, extra = divmod(left, open_columns)
        rest = sorted(pending[rank:])
        for i, c in enumerate(rest):
            shares[c] = level + (1 if i < extra else 0)
        break
    return shares


def fair_shares_naive(demands: list[int], capacity: int) -> list[int]:
    """Reference for `fair_shares`: hand out one byte at a time, round robin in column order,
    to the columns that still want bytes."""
    shares = [0] * len(demands)
    left = capacity
    while left > 0 and any(s < d for s, d in zip(shares, demands)):
        for c, d in enumerate(demands):
            if left > 0 and shares[c] < d:
                shares[c] += 1
                left -= 1
    return shares


def fill_column(cells: list[bytes], share: int) -> list[bytes]:
    """The cells of one column that fit in `share` bytes (CELL_SEPs between them counted):
    whole cells in order, then a prefix of the next one cut at a character boundary."""
    kept: list[bytes] = []
    used = 0
    for i, cell in enumerate(cells):
        sep = 1 if i else 0
        if used + sep + len(cell) <= share:
            kept.append(cell)
            used += sep + len(cell)
            continue
        part = cut_utf8(cell, share - used - sep)
        if part:
            kept.append(part)
        break
    return kept


def serialize_table(table: Table, byte_budget: int, max_rows: int, seed: int,
                    compact: bool = False, compact_cell_bytes: int = 0) -> SerializedTable:
    """`table` as one byte stream of at most `byte_budget` bytes (see the module docstring);
    with `compact`, columns that overflow their share drop missing and repeated cells first
    and cut each cell to `compact_cell_bytes` (0: no cut)."""
    num_columns = table.num_columns
    if byte_budget < num_columns:
        raise ByteBudgetError(f"table {table.table_id}: byte budget {byte_budget} is too small for "
                              f"{num_columns} columns (each needs at least its COLUMN_SEP byte)")
    rows = sample_rows(table.num_rows, max_rows, seed, table.table_id)
    limit = max(byte_budget, 0)
    texts = [[column[r] if r < len(column) else None for r in rows] for column in table.columns]
    cells = [[cell_bytes(text, limit) for text in column] for column in texts]
    if compact:
        short = [compact_cells(column, [is_missing_text(t) for t in column_texts], compact_cell_bytes)
                 for column, column_texts in zip(cells, texts)]
        shares, compacted = compact_shares(cells, short, byte_budget - num_columns)
        cells = [short[c] if compacted[c] else cells[c] for c in range(num_columns)]
    else:
        shares = fair_shares([column_demand(column) for column in cells], byte_budget - num_columns)

    out = bytearray()
    spans = []
    for column, share in zip(cells, shares):
        start = len(out)
        out += bytes([CELL_SEP]).join(fill_column(column, share))
        spans.append((start, len(out)))
        out.append(COLUMN_SEP)
    return SerializedTable(data=bytes(out), column_spans=tuple(spans), rows=rows)


def deserialize_cells(data: bytes, spans: tuple[tuple[int, int], ...] | list) -> list[list[str]]:
    """The cells written in each span (the inverse of the layout, for tests and debugging).

    Raises ValueError when a span is not followed by COLUMN_SEP or its bytes are not UTF-8.
    """
    columns = []
    for start, end in spans:
        if end >= len(data) or data[end] != COLUMN_SEP:
            raise ValueError(f"span [{start}, {end}) is not followed by COLUMN_SEP")
        columns.append(data[start:end].decode("utf-8").split(chr(CELL_SEP)))
    return columns


def encode_for_model(s: SerializedTable) -> tuple[np.ndarray, np.ndarray]:
    """Byte ids with BOS_ID prepended, (T + 1,) int64, and the spans shifted past it, (C, 2)."""
    ids = np.empty(len(s.data) + 1, dtype=np.int64)
    ids[0] = BOS_ID
    ids[1:] = np.frombuffer(s.data, dtype=np.uint8)
    spans = np.asarray(s.column_spans, dtype=np.int64).reshape(-1, 2) + 1
    return ids, spans

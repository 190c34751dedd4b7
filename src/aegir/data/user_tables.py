"""Users' own table files, read lazily: only the rows a model reads are materialized.

`aegir annotate` reads files it has never seen, of any size. `open_table(path)` finds out what a
file holds (its format, column names and number of rows) in streaming passes that keep no cells;
`TableFile.read(rows)` then materializes the cells of those rows and of no others, as a `Table`
whose columns are `SampledColumn`s (the file's length, the rows read). Which rows a model reads
is a function of the row count, the table id and the checkpoint's reading settings
(`aegir.eval.grouped.rows_read`, `aegir.swarm.model.Swarm.rows_read`), so memory stays flat in
the file's size and the model reads the same bytes as from the whole file read into memory
(`read_user_table`, every row: a plain `Table`).

Formats, by file name (case-insensitive):

* CSV: `.csv`, `.tsv`, `.txt`, each also gzip- (`.gz`) or zstd-compressed (`.zst`). The first
  row is the header (column names, stripped); the delimiter is sniffed among `, ; TAB |` in the
  first 64 KiB; fields may be quoted with `"` (doubled inside). Every cell stays the string
  written, nothing is inferred ("01234" stays "01234"); a field that a short row lacks reads as
  "", as an empty field does; a row longer than the header is an error. A row whose every field
  is empty (a blank line, `,,`) is not a row. A field has no size limit (the serializer keeps
  at most the byte budget of a cell).
* Parquet: `.parquet`, `.pq`. Every value → `cell_text` (numbers as text, booleans
  "true"/"false", dates ISO 8601, nested values compact JSON); null → None.
* JSON lines: `.jsonl`, `.ndjson`, `.json` (also `.jsonl.gz`, `.ndjson.gz`): an object per line;
  keys → column names in first-seen order, a key a row lacks → None; numbers keep their source
  text ("9.90" stays "9.90").
* SOTAB: `.json.gz`, rows keyed "0".."n-1" (`aegir.data.sotab`); no column names.

How. CSV and Parquet go through polars' streaming engine (`scan_csv`, which decompresses gzip
and zstd itself, and `scan_parquet`): the row count is one pass, the rows asked for a second
that keeps only them. An uncompressed CSV of up to `SMALL_CSV_BYTES` is parsed in memory at
once instead (a folder's small tables: 0.8 ms each against 4 ms for the scans). Unless told a chunk size, polars' CSV source buffered most of a file (a
300 MB CSV: 340 MB of anonymous memory for a row count); with `CSV_CHUNK_BYTES` it stayed near
80 MB for 300 MB and for 900 MB alike (polars 2.1.0, 2-core Xeon). JSON lines go through
Python's json line by line: polars' parser would turn numbers into floats and lose their text.
Every line is parsed on open (the keys, and errors with their line), and on read only the lines
of the rows asked for.

Errors: a `DataError` naming the file and, where there is one, the line: not found, a name of
no known format, an empty file or table, bytes that are not UTF-8, a row longer than the header,
invalid JSON, a file polars cannot read as Parquet, truncated compressed data. polars names no
line when it refuses a CSV: the file is then read again with Python's csv module to find it.
"""

from __future__ import annotations

import codecs
import csv
import gzip
import os
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aegir.data.sotab import SotabKeys, cell_text, json_lines
from aegir.data.table import SampledColumn, Table
from aegir.errors import DataError

CSV_DELIMITERS = ",;\t|"  # tried in this order; ties go to the earlier one
SNIFF_BYTES = 1 << 16  # the head of a CSV that its delimiter and leading blank lines are read from
CSV_CHUNK_BYTES = 1 << 20  # polars' CSV chunk size (POLARS_CSV_CHUNK_SIZE): what bounds its memory
SMALL_CSV_BYTES = 4 << 20  # an uncompressed CSV up to this size is read into memory at once

CSV_NAMES = (".csv", ".tsv", ".txt")
COMPRESSED_NAMES = (".gz", ".zst")
PARQUET_NAMES = (".parquet", ".pq")
JSON_LINES_NAMES = (".jsonl", ".ndjson", ".json", ".jsonl.gz", ".ndjson.gz")
SOTAB_NAME = ".json.gz"

_ROW = "__aegir_row__"  # the row index column added to a polars scan


def table_kind(path: str | Path) -> str | None:
    """The kind of table a file is by its name: "csv", "parquet", "jsonl" or "sotab"; None for
    any other name."""
    name = Path(path).name.lower()
    if name.endswith(SOTAB_NAME):
        return "sotab"
    if name.endswith(JSON_LINES_NAMES):
        return "jsonl"
    if name.endswith(PARQUET_NAMES):
        return "parquet"
    for suffix in COMPRESSED_NAMES:
        name = name.removesuffix(suffix)
    return "csv" if name.endswith(CSV_NAMES) else None


# --------------------------------------------------------------------------- the opened file


@dataclass(frozen=True)
class TableFile:
    """A user's table file, opened: what it holds, no cells yet.

    num_rows: data rows (a CSV's header not counted; rows of empty fields skipped)
    column_names: header names (CSV), Parquet column names, JSON keys; None for SOTAB files
    keys: the JSON keys of the columns, in column order (JSON lines and SOTAB files)
    delimiter, skip_lines: a CSV's delimiter and the blank lines above its header
    frame: a CSV's rows as polars reads them (`_csv_frame`): in memory for a small file
    """

    path: Path
    kind: str
    num_rows: int
    num_columns: int
    column_names: tuple[str, ...] | None
    keys: tuple[str, ...] = ()
    delimiter: str = ","
    skip_lines: int = 0
    frame: Any = field(default=None, compare=False, repr=False)  # a CSV's polars frame (`_csv_frame`)

    @property
    def table_id(self) -> str:
        return self.path.name

    def read(self, rows: Iterable[int] | None = None) -> Table:
        """The table: with `rows`, its columns are `SampledColumn`s holding those rows' cells (and
        only those); without, every row, as tuples. No labels, `domain` None, id the file name."""
        if rows is None:
            cells = self._rows(None)
            columns: tuple[Sequence[str | None], ...] = tuple(zip(*cells)) if cells else ((),) * self.num_columns
        else:
            wanted = sorted(set(rows))
            if wanted and not 0 <= wanted[0] <= wanted[-1] < self.num_rows:
                raise ValueError(f"{self.path}: rows must lie in [0, {self.num_rows})")
            cells = self._rows(wanted)
            columns = tuple(SampledColumn({row: values[c] for row, values in zip(wanted, cells)}, self.num_rows)
                            for c in range(self.num_columns))
        n = self.num_columns
        return Table(table_id=self.table_id, columns=columns, cta=(None,) * n, cpa=(None,) * n, domain=None,
                     column_names=self.column_names)

    def _rows(self, rows: list[int] | None) -> list[tuple[str | None, ...]]:
        """The cells of `rows` (sorted; None: all), one tuple per row, in row order."""
        if self.kind == "csv":
            return _csv_rows(self, rows)
        if self.kind == "parquet":
            return _parquet_rows(self.path, rows)
        return _json_rows(self, rows)


def open_table(path: str | Path) -> TableFile:
    """`path` opened (format, columns, row count); a `DataError` if it is not a table we can read."""
    path = Path(path)
    if not path.is_file():
        raise DataError(path, "file not found" if not path.exists() else "not a file")
    kind = table_kind(path)
    if kind is None:
        raise DataError(path, "unsupported file type: expected .csv, .tsv, .txt (also .gz or .zst), .parquet, "
                              ".jsonl or .json.gz")
    if kind == "csv":
        return _open_csv(path)
    if kind == "parquet":
        return _open_parquet(path)
    return _open_json(path, kind)


def read_user_table(path: str | Path) -> Table:
    """A user's own table, every row read (the whole-file reference of `TableFile.read(rows)`)."""
    return open_table(path).read()


# --------------------------------------------------------------------------- CSV


def sniff_delimiter(text: str) -> str:
    """The delimiter among `, ; TAB |` that splits the first rows into the most, equal fields.

    A candidate counts only if every sampled row has the same number (> 1) of fields; if none
    does, the file is one column and "," is as good as any. `text` is the file's head: its last
    line may be cut, and is left out when there are others.
    """
    lines = text.splitlines(keepends=True)
    if len(lines) > 1 and not text.endswith(("\n", "\r")):
        lines = lines[:-1]
    best, best_width = ",", 1
    for delimiter in CSV_DELIMITERS:
        try:
            rows = [r for r in csv.reader(lines[:50], delimiter=delimiter) if r]
        except csv.Error:
            continue
        widths = {len(r) for r in rows[:20]}
        if len(widths) == 1 and (width := widths.pop()) > best_width:
            best, best_width = delimiter, width
    return best


def _open_bytes(path: Path):
    """A binary file object of `path`'s content, decompressed by its name (.gz, .zst)."""
    name = path.name.lower()
    if name.endswith(".gz"):
        return gzip.open(path, "rb")
    if name.endswith(".zst"):
        import zstandard

        return zstandard.open(path, "rb")
    return open(path, "rb")


@contextmanager
def _reading(path: Path) -> Iterator[None]:
    """Errors of reading `path`'s bytes as `DataError`s."""
    try:
        yield
    except FileNotFoundError:
        raise DataError(path, "file not found") from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise DataError(path, f"truncated or corrupt gzip data ({exc})") from None
    except OSError as exc:
        raise DataError(path, f"cannot read: {exc.strerror or exc}") from None
    except Exception as exc:  # zstandard.ZstdError, without importing zstandard for every file
        if type(exc).__name__ != "ZstdError":
            raise
        raise DataError(path, f"truncated or corrupt zstd data ({exc})") from None


def _csv_head(path: Path, data: bytes | None) -> str:
    """The first `SNIFF_BYTES` of a CSV (decompressed; of `data`, its content, when read) as
    text, a leading BOM dropped."""
    if data is None:
        with _reading(path), _open_bytes(path) as f:
            raw = f.read(SNIFF_BYTES)
    else:
        raw = data[:SNIFF_BYTES]
    whole = len(raw) < SNIFF_BYTES
    raw = raw.removeprefix(codecs.BOM_UTF8)
    try:  # an incremental decode: a character cut at the end of the head is no error
        return codecs.getincrementaldecoder("utf-8")().decode(raw, final=whole)
    except UnicodeDecodeError as exc:
        raise DataError(path, f"not valid UTF-8 (byte 0x{raw[exc.start]:02x}): {exc.reason}",
                        raw[:exc.start].count(b"\n") + 1) from None


def _leading_blank_lines(head: str) -> int:
    count = 0
    for line in head.split("\n"):
        if line not in ("", "\r"):
            break
        count += 1
    return count


def _open_csv(path: Path) -> TableFile:
    import polars as pl

    small = not path.name.lower().endswith(COMPRESSED_NAMES) and path.stat().st_size <= SMALL_CSV_BYTES
    if small:
        with _reading(path):
            data = path.read_bytes()
    head = _csv_head(path, data if small else None)
    if not head.strip():
        raise DataError(path, "empty file")
    delimiter, skip_lines = sniff_delimiter(head), _leading_blank_lines(head)
    frame = _csv_frame(path, data if small else None, delimiter, skip_lines)
    count = _collect_csv(path, delimiter, lambda: frame.select(pl.len())).item()
    if count == 0:
        raise DataError(path, "empty file")
    if count == 1:
        raise DataError(path, "empty table: a header but no data rows")
    header = _collect_csv(path, delimiter, lambda: frame.head(1)).row(0)
    names = tuple((name or "").strip() for name in header)
    return TableFile(path, "csv", count - 1, len(names), names, delimiter=delimiter, skip_lines=skip_lines,
                     frame=frame)


def _csv_frame(path: Path, data: bytes | None, delimiter: str, skip_lines: int):
    """The CSV as a polars frame of strings, the header its row 0, rows of empty fields out: a
    DataFrame of `data` (a small file's content, parsed at once: a few times faster than a scan
    for the tables of a folder) or a LazyFrame scanning the file."""
    import polars as pl

    options = dict(has_header=False, separator=delimiter, quote_char='"', skip_lines=skip_lines,
                   infer_schema=False, empty_string_is_null=False, encoding="utf8")
    if data is None:
        frame = pl.scan_csv(path, **options)
    else:
        frame = _collect_csv(path, delimiter, lambda: pl.read_csv(data, **options))
    return frame.filter(~pl.all_horizontal(pl.all().fill_null("") == ""))


def _collect_csv(path: Path, delimiter: str, query: Callable[[], Any]):
    """`query()`'s frame, a LazyFrame run by polars' streaming engine in chunks of
    `CSV_CHUNK_BYTES`; polars' refusal as a `DataError` that names the line where Python's csv
    module finds the problem."""
    import polars as pl

    previous = os.environ.get("POLARS_CSV_CHUNK_SIZE")
    os.environ["POLARS_CSV_CHUNK_SIZE"] = str(CSV_CHUNK_BYTES)  # read by polars at each scan
    try:
        frame = query()
        return frame.collect(engine="streaming") if isinstance(frame, pl.LazyFrame) else frame
    except pl.exceptions.PolarsError as exc:
        raise _csv_problem(path, delimiter, exc) from None
    finally:
        if previous is None:
            del os.environ["POLARS_CSV_CHUNK_SIZE"]
        else:
            os.environ["POLARS_CSV_CHUNK_SIZE"] = previous


def _csv_problem(path: Path, delimiter: str, exc: Exception) -> DataError:
    """What is wrong with a CSV that polars refused, with its line: the first line that is not
    UTF-8 or holds more fields than the header, as Python's csv module reads it; else polars'
    own message."""
    limit = csv.field_size_limit()
    csv.field_size_limit(sys.maxsize)  # module-global: put back below
    line_no = 0
    try:
        with _reading(path), _open_bytes(path) as f:

            def lines() -> Iterator[str]:
                nonlocal line_no
                for line_no, raw in enumerate(f, 1):
                    try:
                        yield raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
                    except UnicodeDecodeError as err:
                        raise DataError(path, f"not valid UTF-8 (byte 0x{raw[err.start]:02x}): {err.reason}",
                                        line_no) from None

            reader = csv.reader(lines(), delimiter=delimiter)
            width = None
            for row in reader:
                if not any(row):
                    continue
                if width is None:
                    width = len(row)
                elif len(row) > width:
                    return DataError(path, f"row has {len(row)} fields but the header has {width}", reader.line_num)
    except csv.Error as err:
        return DataError(path, f"malformed CSV: {err}", line_no)
    except DataError as err:
        return err
    finally:
        csv.field_size_limit(limit)
    return DataError(path, f"malformed CSV: {str(exc).strip().splitlines()[0]}")


def _csv_rows(table: TableFile, rows: list[int] | None) -> list[tuple[str | None, ...]]:
    import polars as pl

    frame = table.frame
    if rows is None:
        query = frame.slice(1)
    else:  # row r of the table is row r + 1 of the frame, after the header
        query = (frame.with_row_index(_ROW).filter(pl.col(_ROW).is_in([r + 1 for r in rows]))
                 .sort(_ROW).drop(_ROW))
    cells = _collect_csv(table.path, table.delimiter, lambda: query).rows()
    return [tuple("" if cell is None else cell for cell in row) for row in cells]


# --------------------------------------------------------------------------- Parquet


def _parquet_problem(path: Path, exc: Exception) -> DataError:
    return DataError(path, f"cannot read Parquet: {str(exc).strip().splitlines()[0] if str(exc).strip() else exc!r}")


def _open_parquet(path: Path) -> TableFile:
    import polars as pl

    try:
        frame = pl.scan_parquet(path)
        names = tuple(frame.collect_schema().names())
        count = frame.select(pl.len()).collect().item()
    except (pl.exceptions.PolarsError, OSError, ValueError) as exc:
        raise _parquet_problem(path, exc) from None
    if not names or count == 0:
        raise DataError(path, f"empty table: {count} rows, {len(names)} columns")
    return TableFile(path, "parquet", count, len(names), names)


def _parquet_rows(path: Path, rows: list[int] | None) -> list[tuple[str | None, ...]]:
    import polars as pl

    frame = pl.scan_parquet(path)
    if rows is not None:
        frame = frame.with_row_index(_ROW).filter(pl.col(_ROW).is_in(rows)).sort(_ROW).drop(_ROW)
    try:
        values = frame.collect(engine="streaming").rows()
    except (pl.exceptions.PolarsError, OSError, ValueError) as exc:
        raise _parquet_problem(path, exc) from None
    return [tuple(cell_text(value) for value in row) for row in values]


# --------------------------------------------------------------------------- JSON lines


def _open_json(path: Path, kind: str) -> TableFile:
    """Every line parsed: the rows counted, the keys gathered (SOTAB: checked), no cells kept."""
    count = 0
    names: dict[str, None] = {}  # first-seen order
    sotab = SotabKeys(path) if kind == "sotab" else None
    for line_no, _, row in json_lines(path):
        count += 1
        if sotab is not None:
            sotab.check(line_no, row)
        else:
            names.update(dict.fromkeys(row))
    keys = sotab.keys if sotab is not None else tuple(names)
    if count == 0:
        raise DataError(path, "empty table: no rows")
    if not keys:
        raise DataError(path, "empty table: the rows have no " + ("columns" if sotab is not None else "keys"))
    return TableFile(path, kind, count, len(keys), None if sotab is not None else keys, keys=keys)


def _json_rows(table: TableFile, rows: list[int] | None) -> list[tuple[str | None, ...]]:
    wanted = None if rows is None else set(rows)
    out = []
    for _, _, row in json_lines(table.path, wanted):
        out.append(tuple(cell_text(row[key]) if key in row else None for key in table.keys))
    return out

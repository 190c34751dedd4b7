"""Reader of the SOTAB V2 benchmark → `Table` (a user's own files: `aegir.data.user_tables`).

SOTAB V2 layout (never downloaded; the user points at the directory):

    root/Train/  root/Validation/  root/Test/
        <Class>_<site>_September2020_<CTA|CPA>.json.gz   gzipped JSON lines, one row per
                                                         line, keys "0".."n-1"
    root/sotab_v2_{cta,cpa}_{training,validation,test}_set.csv
    root/sotab_v2_{cta,cpa}_{random,corner_cases,missing_values,format_heterogeneity}_test_set.csv

    CTA CSV: table_name,column_index,label            (extra columns, e.g. domain, ignored)
    CPA CSV: table_name,main_column_index,column_index,label   (main_column_index optional: 0)

Columns are found by header name. `table_name` is the table's file name in the split's folder
(a name without `.json.gz` is looked up with it appended); it is also the `table_id`.

Splits (`SPLIT_LAYOUT`): train → training CSVs + Train/; valid → validation CSVs +
Validation/; test → the `random` test-subset CSV of each task if present, else the full test
CSV, + Test/; corner_cases / missing_values / format_heterogeneity → their test-subset CSVs +
Test/. A table belongs to a split if the split's CTA or CPA ground truth names it; SOTAB's CTA
and CPA tables are distinct files (`…_CTA.json.gz`, `…_CPA.json.gz`), and a file named by both
gets both label sets. Tables come out sorted by `table_name`, so a split's order is fixed.
`domain` is the `<Class>` prefix of the file name (text before the first "_").

Cells → `str | None` (cells stay strings; nothing is inferred):
    * JSON strings as they are ("01234" stays "01234");
    * JSON numbers as their literal source text ("1.50" stays "1.50", not "1.5"; parsed with
      `parse_int`/`parse_float` hooks that keep the text);
    * true / false → "true" / "false"; null → None;
    * nested lists / objects → compact JSON text (separators "," and ":", no ASCII escaping,
      keys in the file's order, numbers as their source literals). Deterministic, because it
      is a function of the file alone; it keeps schema.org objects readable for a byte model
      (`{"@type":"PostalAddress","addressLocality":"Oslo"}`).

Main column. The Table contract relates CPA to column 0. When a table's CPA ground truth has
`main_column_index` m ≠ 0, its columns are reordered to (m, 0, 1, …, m−1, m+1, …): the main
column moves to the front, the others keep their order, and every label (CTA included) moves
with its column. Nothing is dropped.

Bad input policy. Fatal: a `DataError` naming the file and, where there is one, the 1-based
line:
    * a missing root or split directory; no ground-truth CSV at all for the split;
    * a ground-truth CSV that is not UTF-8, is malformed, lacks a required header
      (table_name, column_index, label), has a row with missing fields, a non-integer or
      negative index, an empty label, a label outside the fixed vocabulary
      (`cta_vocab()` / `cpa_vocab()`), two different labels for one column, two different
      main columns for one table, or a CPA label on the main column itself;
    * a table file that is truncated or not gzip, not UTF-8, holds an invalid JSON line, a row
      that is not a JSON object, keys other than "0".."n-1", rows with different keys, or no
      rows / no columns (empty table).
Skipped and counted (the reasons below are the `SKIP_*` constants):
    * "missing table file": the ground truth names a table file that is not in the folder
      (e.g. a partial extraction) → that table is skipped;
    * "column index out of range": a ground-truth row names a column (or main column) the
      table file does not have → that label is dropped, the table kept;
    * "missing ground-truth file": one task's CSV is absent (the other is present) → the split
      gets no labels for that task.
A skip calls `on_skip(reason, error)` with the `DataError` that says where and what;
`SkipReport` is such a callable that counts by reason and keeps examples. With
`on_skip=None` (the default) every skip case is fatal too: nothing is ever dropped silently.

`cell_text`, `json_lines` and `SotabKeys` are shared with the reader of users' files
(`aegir.data.user_tables`), which reads a `.json.gz` as a SOTAB table file.
"""

from __future__ import annotations

import csv
import datetime as dt
import gzip
import io
import json
import os
import zlib
from collections import Counter
from collections.abc import Callable, Container, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aegir.config import SOURCE_SPLITS
from aegir.data.table import Table
from aegir.errors import ConfigError, DataError
from aegir.labels import cpa_vocab, cta_vocab

SKIP_MISSING_TABLE = "missing table file"
SKIP_COLUMN_OUT_OF_RANGE = "column index out of range"
SKIP_MISSING_GROUND_TRUTH = "missing ground-truth file"

OnSkip = Callable[[str, DataError], None]  # (reason, error saying where and what)

# split → (table folder, ground-truth CSV stems tried in order: sotab_v2_<task>_<stem>_set.csv)
SPLIT_LAYOUT: dict[str, tuple[str, tuple[str, ...]]] = {
    "train": ("Train", ("training",)),
    "valid": ("Validation", ("validation",)),
    "test": ("Test", ("random_test", "test")),
    "corner_cases": ("Test", ("corner_cases_test",)),
    "missing_values": ("Test", ("missing_values_test",)),
    "format_heterogeneity": ("Test", ("format_heterogeneity_test",)),
}
assert set(SPLIT_LAYOUT) == set(SOURCE_SPLITS)  # the evaluation-only splits are not SOTAB's

_REQUIRED_HEADER = ("table_name", "column_index", "label")


# --------------------------------------------------------------------------- skip accounting


@dataclass
class SkipReport:
    """Counts skipped input by reason and keeps the first `max_examples` errors of each.

    Pass it as `on_skip`: `report = SkipReport(); read_sotab(root, "train", on_skip=report)`.
    """

    max_examples: int = 3
    counts: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def __call__(self, reason: str, error: DataError) -> None:
        self.counts[reason] += 1
        kept = self.examples.setdefault(reason, [])
        if len(kept) < self.max_examples:
            kept.append(str(error))

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def as_dict(self) -> dict[str, dict[str, Any]]:
        """{reason: {"count": n, "examples": [...]}}, sorted by reason (for metrics JSON)."""
        return {r: {"count": n, "examples": list(self.examples.get(r, []))}
                for r, n in sorted(self.counts.items())}

    def __str__(self) -> str:
        if not self.counts:
            return "nothing skipped"
        parts = [f"{r}: {n} (e.g. {self.examples[r][0]})" for r, n in sorted(self.counts.items())]
        return "skipped " + "; ".join(parts)


def _skip(on_skip: OnSkip | None, reason: str, error: DataError) -> None:
    if on_skip is None:
        raise DataError(error.path, f"{error.problem} [{reason}: pass on_skip=SkipReport() to "
                        "skip such cases and count them]", error.line)
    on_skip(reason, error)


# --------------------------------------------------------------------------- cells


class _Number(str):
    """A JSON number kept as its literal source text (json.loads parse_int/parse_float hook)."""


def cell_text(value: Any) -> str | None:
    """One cell as `str`, or None for a missing value (JSON null, Parquet null).

    Strings as they are, numbers as their text (JSON: the source literal), booleans as
    "true"/"false", dates as ISO 8601, nested lists/objects as compact JSON (`_nested_text`).
    """
    if value is None:
        return None
    if isinstance(value, str):
        return str(value)  # a plain str, also for `_Number`
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple, dict)):
        return _nested_text(value)
    if isinstance(value, (dt.date, dt.time)):  # datetime is a date
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", errors="replace")
    return str(value)  # int, float, Decimal, timedelta, …


def _nested_text(value: Any) -> str:
    """Compact JSON of a nested value; number literals kept, keys in their original order."""
    if value is None:
        return "null"
    if isinstance(value, _Number):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, dict):
        items = (json.dumps(str(k), ensure_ascii=False) + ":" + _nested_text(v) for k, v in value.items())
        return "{" + ",".join(items) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_nested_text(v) for v in value) + "]"
    return json.dumps(cell_text(value), ensure_ascii=False)


# --------------------------------------------------------------------------- low-level reading


def _decode_utf8(path: Path, raw: bytes) -> str:
    """`raw` as text (a leading BOM dropped); non-UTF-8 bytes → DataError with their line."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise DataError(path, f"not valid UTF-8 (byte 0x{raw[exc.start]:02x}): {exc.reason}", line) from None


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise DataError(path, "file not found") from None
    except OSError as exc:
        raise DataError(path, f"cannot read: {exc.strerror or exc}") from None


def _json_kind(value: Any) -> str:
    return {list: "an array", str: "a string", _Number: "a number", bool: "a boolean"}.get(
        type(value), "null" if value is None else type(value).__name__)


def json_lines(path: Path, rows: Container[int] | None = None) -> Iterator[tuple[int, int, dict]]:
    """(1-based line, 0-based row, row object) for each non-blank line of a JSON-lines file
    (row counts the non-blank lines); with `rows`, only the lines of those rows are parsed and
    yielded (the others are read past).

    Gzipped when the name ends in `.gz`. Numbers keep their source text (`_Number`).
    """
    line_no = 0
    row_index = -1
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            for line_no, raw in enumerate(f, 1):
                if not raw.strip():
                    continue
                row_index += 1
                if rows is not None and row_index not in rows:
                    continue
                try:
                    text = raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
                except UnicodeDecodeError as exc:
                    raise DataError(path, f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column "
                                    f"{exc.start + 1})", line_no) from None
                try:
                    row = json.loads(text, parse_int=_Number, parse_float=_Number, parse_constant=_Number)
                except json.JSONDecodeError as exc:
                    raise DataError(path, f"invalid JSON: {exc.msg} at column {exc.colno}", line_no) from None
                if not isinstance(row, dict):
                    raise DataError(path, f"a row must be a JSON object, got {_json_kind(row)}", line_no)
                yield line_no, row_index, row
    except FileNotFoundError:
        raise DataError(path, "file not found") from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise DataError(path, f"truncated or corrupt gzip data after {line_no} complete lines ({exc})",
                        line_no + 1) from None
    except OSError as exc:
        raise DataError(path, f"cannot read: {exc.strerror or exc}") from None


class SotabKeys:
    """The keys of a SOTAB table file's rows: "0".."n-1", the same in every row. `check` each
    row in file order; `keys` is the first row's (empty before it)."""

    def __init__(self, path: Path):
        self.path = path
        self.keys: tuple[str, ...] = ()
        self._key_set: set[str] | None = None

    def check(self, line_no: int, row: dict) -> tuple[str, ...]:
        if self._key_set is None:
            n = len(row)
            keys = tuple(str(i) for i in range(n))
            if set(row) != set(keys):
                raise DataError(self.path, f'row keys must be "0".."{n - 1}", got {_preview(list(row))}', line_no)
            self.keys, self._key_set = keys, set(keys)
        elif row.keys() != self._key_set:
            raise DataError(self.path, f"inconsistent keys: this row has {_preview(sorted(row, key=_key_order))}"
                            f" but the first row has {_preview(list(self.keys))}", line_no)
        return self.keys


def _read_sotab_rows(path: Path) -> list[list[str | None]]:
    """Column-major cells of a SOTAB table file: every row an object with keys "0".."n-1"."""
    keys = SotabKeys(path)
    columns: list[list[str | None]] | None = None
    for line_no, _, row in json_lines(path):
        names = keys.check(line_no, row)
        if columns is None:
            columns = [[] for _ in names]
        for column, key in zip(columns, names):
            column.append(cell_text(row[key]))
    if columns is None:
        raise DataError(path, "empty table: no rows")
    if not columns:
        raise DataError(path, "empty table: the rows have no columns")
    return columns


def _key_order(key: str) -> tuple[int, str]:
    return (int(key), "") if key.isascii() and key.isdigit() else (1 << 62, key)


def _preview(items: list[str], limit: int = 8) -> str:
    shown = ", ".join(json.dumps(k, ensure_ascii=False) for k in items[:limit])
    return f"[{shown}{', …' if len(items) > limit else ''}]"


# --------------------------------------------------------------------------- SOTAB ground truth


@dataclass
class _Label:
    value: str
    path: Path
    line: int


@dataclass
class _TableTruth:
    """The ground truth of one table, with where each label came from (for error messages)."""

    path: Path  # the CSV and line that first named the table
    line: int
    cta: dict[int, _Label] = field(default_factory=dict)
    cpa: dict[int, _Label] = field(default_factory=dict)
    main_column: _Label | None = None  # value = the index as text


def _parse_index(text: str, name: str, path: Path, line: int) -> int:
    text = text.strip()
    if not (text.isascii() and text.isdigit()):
        raise DataError(path, f"{name} must be a non-negative integer, got {text!r}", line)
    return int(text)


def _read_ground_truth(path: Path, task: str, truths: dict[str, _TableTruth]) -> None:
    """Add the labels of one ground-truth CSV (`task` "cta" or "cpa") to `truths`."""
    vocab = cta_vocab() if task == "cta" else cpa_vocab()
    reader = csv.DictReader(io.StringIO(_decode_utf8(path, _read_bytes(path)), newline=""))
    try:
        if reader.fieldnames is None:
            raise DataError(path, f"empty file: expected a header with {', '.join(_REQUIRED_HEADER)}", 1)
        reader.fieldnames = [h.strip() for h in reader.fieldnames]
        missing = [h for h in _REQUIRED_HEADER if h not in reader.fieldnames]
        if missing:
            raise DataError(path, f"header lacks required column(s) {', '.join(missing)} "
                            f"(has {', '.join(reader.fieldnames)})", 1)
        has_main = task == "cpa" and "main_column_index" in reader.fieldnames
        for row in reader:
            line = reader.line_num
            if any(row.get(h) is None for h in _REQUIRED_HEADER):
                raise DataError(path, "row has fewer fields than the header", line)
            name = row["table_name"].strip()
            if not name:
                raise DataError(path, "empty table_name", line)
            column = _parse_index(row["column_index"], "column_index", path, line)
            label = row["label"].strip()
            if label not in vocab:
                raise DataError(path, f"label {label!r} is not in the fixed {task.upper()} vocabulary "
                                f"({len(vocab)} labels)", line)
            truth = truths.setdefault(name, _TableTruth(path, line))
            labels = truth.cta if task == "cta" else truth.cpa
            if task == "cpa":
                main_text = row.get("main_column_index") if has_main else "0"
                if main_text is None:
                    raise DataError(path, "row has fewer fields than the header", line)
                main = _parse_index(main_text, "main_column_index", path, line)
                if column == main:
                    raise DataError(path, f"CPA label {label!r} on the main column {main} itself", line)
                if truth.main_column is None:
                    truth.main_column = _Label(str(main), path, line)
                elif int(truth.main_column.value) != main:
                    raise DataError(path, f"table {name} has main_column_index {main} here but "
                                    f"{truth.main_column.value} at line {truth.main_column.line}", line)
            previous = labels.get(column)
            if previous is not None and previous.value != label:
                raise DataError(path, f"conflicting labels for column {column} of {name}: {label!r} here, "
                                f"{previous.value!r} at {previous.path.name}:{previous.line}", line)
            if previous is None:
                labels[column] = _Label(label, path, line)
    except csv.Error as exc:
        raise DataError(path, f"malformed CSV: {exc}", reader.line_num) from None


def _labelled_table(name: str, columns: list[list[str | None]], truth: _TableTruth,
                    on_skip: OnSkip | None) -> Table:
    """Attach the ground truth to the cells; move the main column to position 0."""
    n = len(columns)
    cta: list[str | None] = [None] * n
    cpa: list[str | None] = [None] * n

    def out_of_range(label: _Label, what: str) -> None:
        _skip(on_skip, SKIP_COLUMN_OUT_OF_RANGE,
              DataError(label.path, f"{what} is out of range: table {name} has {n} columns", label.line))

    for column, label in sorted(truth.cta.items()):
        if column < n:
            cta[column] = label.value
        else:
            out_of_range(label, f"column_index {column}")
    main = int(truth.main_column.value) if truth.main_column is not None else 0
    for column, label in sorted(truth.cpa.items()):
        if main >= n:
            out_of_range(label, f"main_column_index {main}")
        elif column >= n:
            out_of_range(label, f"column_index {column}")
        else:
            cpa[column] = label.value
    order = list(range(n))
    if 0 < main < n:
        order = [main] + [i for i in range(n) if i != main]
    return Table(
        table_id=name,
        columns=tuple(tuple(columns[i]) for i in order),
        cta=tuple(cta[i] for i in order),
        cpa=tuple(cpa[i] for i in order),
        domain=name.split("_", 1)[0] if "_" in name else None,
    )


def ground_truth_paths(root: Path, split: str, task: str) -> list[Path]:
    """The ground-truth CSVs of `split` for `task` ("cta"/"cpa"), in order of preference."""
    return [root / f"sotab_v2_{task}_{stem}_set.csv" for stem in SPLIT_LAYOUT[split][1]]


def iter_sotab(root: str | Path, split: str, *, on_skip: OnSkip | None = None) -> Iterator[Table]:
    """The tables of one SOTAB V2 split, sorted by table name, one file read at a time.

    All ground truth is read (and checked) before the first table comes out. See the module
    docstring for the layout, the cell conversion and the fatal / skipped cases.
    """
    if split not in SPLIT_LAYOUT:
        raise ConfigError(f"unknown split {split!r}; expected one of {', '.join(SPLIT_LAYOUT)}")
    root = Path(root)
    if not root.is_dir():
        raise DataError(root, "missing directory: the SOTAB V2 root does not exist")
    folder = SPLIT_LAYOUT[split][0]
    table_dir = root / folder
    if not table_dir.is_dir():
        raise DataError(table_dir, f"missing directory: SOTAB V2 keeps the {split} tables in {folder}/")

    truths: dict[str, _TableTruth] = {}
    absent: list[tuple[str, list[Path]]] = []
    for task in ("cta", "cpa"):
        candidates = ground_truth_paths(root, split, task)
        path = next((p for p in candidates if p.is_file()), None)
        if path is None:
            absent.append((task, candidates))
        else:
            _read_ground_truth(path, task, truths)
    if len(absent) == 2:
        names = ", ".join(p.name for _, candidates in absent for p in candidates)
        raise DataError(root, f"no ground truth for split {split!r}: none of {names} exists")
    for task, candidates in absent:
        _skip(on_skip, SKIP_MISSING_GROUND_TRUTH,
              DataError(candidates[-1], f"missing: split {split!r} gets no {task.upper()} labels"))

    present = set(os.listdir(table_dir))
    for name in sorted(truths):
        truth = truths[name]
        file_name = name if name in present else f"{name}.json.gz"
        if file_name not in present:
            _skip(on_skip, SKIP_MISSING_TABLE,
                  DataError(truth.path, f"table file {folder}/{name} does not exist", truth.line))
            continue
        yield _labelled_table(name, _read_sotab_rows(table_dir / file_name), truth, on_skip)


def available_splits(root: str | Path) -> list[str]:
    """The splits a SOTAB V2 directory holds: those whose table folder exists and that have a
    ground-truth CSV of either task (a directory with only Test/ has the four test splits)."""
    root = Path(root)
    return [split for split, (folder, _) in SPLIT_LAYOUT.items()
            if (root / folder).is_dir()
            and any(p.is_file() for task in ("cta", "cpa") for p in ground_truth_paths(root, split, task))]


def read_sotab(root: str | Path, split: str, *, on_skip: OnSkip | None = None) -> list[Table]:
    """Every table of one SOTAB V2 split (`iter_sotab` as a list)."""
    return list(iter_sotab(root, split, on_skip=on_skip))

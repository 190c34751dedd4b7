"""The `real` development split: SOTAB-V2-style tables built from real data in pip packages.

Why: a model can score well on the embedded synthetic benchmark by learning its generator.
These tables are real records — airports, cities, countries, US states, counties and ZIP
codes, public holidays, US observances and Australian elections, banks, the largest listed
companies and California's school districts, NBA/WNBA teams and players, Titanic passengers and
Olympic sprinters, car models and their prices and fuel economy, films and their box office,
Bundesliga matchdays and league tables, Scottish hill races, occupations and their incomes,
the trades of 1910 and their wages, contact lists, Ontario's municipalities, Paris Métro
stations and a pizzeria's menu — read from data that pip packages ship (`sources.FAMILIES`
names each package; their versions are pinned in requirements.lock), so evaluating on them
needs no network and gives the same tables on every machine. They are for evaluation only:
`prepare` writes them as the `real` split, and no stage trains on them.

How a table is made (all of it reviewed by hand, none of it inferred from the data):
  * a family function (`sources.py`) groups the package's records into tables of 8–30 rows,
    each group what one page of a real site would list (one country's airports, one year's
    holidays, …), in a fixed order;
  * `layouts.csv` lists each family's layouts — a site's choice of columns, their order,
    headers, locale and the table's schema.org class (`domain`); group i of a family gets the
    family's layout i mod (number of layouts), in file order;
  * `columns.csv` gives every layout column: the record field, the cell format
    (`formats.FORMATS`: localised numbers, dates, units, names), its CTA label and its CPA
    label (the relation of column 0, the subject, to it), or nothing where no SOTAB label fits.
    Column 0 is the subject and must have a CTA label and no CPA label.
Every label must be in the fixed vocabularies (`aegir.labels`); a bad mapping row is a
`DataError` naming the CSV file and line.

A table's id is `<domain>_<layout>-<group key>_real.json.gz`, the file name it gets in a
SOTAB V2 directory (`write_sotab_dir`), so that a table has the same id whether read from
prepared data or through the SOTAB reader. Tables come out sorted by id (the reader's order).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from aegir import atomic
from aegir.config import REAL_SPLIT
from aegir.data.real.formats import FORMATS, format_cell
from aegir.data.real.sources import FAMILIES, Group
from aegir.data.table import Table
from aegir.errors import AegirError, DataError
from aegir.labels import cpa_vocab, cta_vocab

SPLIT = REAL_SPLIT
LAYOUTS_FILE = "layouts.csv"
COLUMNS_FILE = "columns.csv"
GROUP_LOCALE = "group"  # a layout locale meaning "the group's own locale"

_LAYOUT_HEADER = ("layout", "family", "locale", "domain", "description")
_COLUMN_HEADER = ("layout", "header", "field", "format", "cta", "cpa", "note")


@dataclass(frozen=True)
class MappedColumn:
    """One column of a layout, as one row of columns.csv (`line` is that row's line)."""

    header: str
    field: str
    format: str
    cta: str | None
    cpa: str | None
    line: int


@dataclass(frozen=True)
class Layout:
    """One site's way of publishing a family's groups as tables (one row of layouts.csv)."""

    name: str
    family: str
    locale: str  # a babel locale name, or GROUP_LOCALE
    domain: str  # schema.org class of the subject column (SOTAB's table class)
    columns: tuple[MappedColumn, ...]


def mapping_dir() -> Path:
    """The folder holding layouts.csv and columns.csv (inside the installed package)."""
    return Path(str(resources.files(__package__)))


def _read_csv(path: Path, header: tuple[str, ...]) -> list[tuple[int, dict[str, str]]]:
    """(line, row) of a mapping CSV whose header must be exactly `header`."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(path, "mapping file not found") from None
    except UnicodeDecodeError as exc:
        raise DataError(path, f"not valid UTF-8: {exc.reason}") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    if tuple(reader.fieldnames or ()) != header:
        raise DataError(path, f"header must be {','.join(header)}, got {','.join(reader.fieldnames or [])}", 1)
    rows = []
    for row in reader:
        if None in row or any(row[h] is None for h in header):
            fields = sum(row[h] is not None for h in header) + len(row.get(None) or ())
            raise DataError(path, f"row has {fields} fields, expected {len(header)}", reader.line_num)
        rows.append((reader.line_num, {k: v.strip() for k, v in row.items()}))
    return rows


def load_mapping(folder: Path | None = None) -> list[Layout]:
    """Every layout of `folder`/layouts.csv with its columns from columns.csv, checked.

    Errors (each a `DataError` naming the file and line): a wrong header, an unknown family,
    format or locale, a duplicate layout, a domain that is not a plain class name, a label
    outside the CTA / CPA vocabulary, a subject column without a CTA label or with a CPA
    label, a column of an unknown layout, a layout without columns.
    """
    from babel import Locale, UnknownLocaleError

    folder = folder or mapping_dir()
    layouts_path, columns_path = folder / LAYOUTS_FILE, folder / COLUMNS_FILE
    cta, cpa = cta_vocab(), cpa_vocab()
    heads: dict[str, tuple[int, dict[str, str]]] = {}
    for line, row in _read_csv(layouts_path, _LAYOUT_HEADER):
        name = row["layout"]
        if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name):
            raise DataError(layouts_path, f"layout name {name!r} must be lower-case words joined by '-'", line)
        if name in heads:
            raise DataError(layouts_path, f"layout {name!r} is defined twice (first at line {heads[name][0]})", line)
        if row["family"] not in FAMILIES:
            raise DataError(layouts_path, f"unknown family {row['family']!r}; known: {', '.join(FAMILIES)}", line)
        if row["locale"] != GROUP_LOCALE:
            try:
                Locale.parse(row["locale"])
            except (UnknownLocaleError, ValueError):
                raise DataError(layouts_path, f"unknown locale {row['locale']!r}", line) from None
        if not re.fullmatch(r"[A-Z][A-Za-z]*", row["domain"]):
            raise DataError(layouts_path, f"domain {row['domain']!r} must be a schema.org class name", line)
        heads[name] = (line, row)

    columns: dict[str, list[MappedColumn]] = {name: [] for name in heads}
    for line, row in _read_csv(columns_path, _COLUMN_HEADER):
        name = row["layout"]
        if name not in columns:
            raise DataError(columns_path, f"column of unknown layout {name!r} (not in {LAYOUTS_FILE})", line)
        if row["format"] not in FORMATS:
            raise DataError(columns_path, f"unknown format {row['format']!r}; known: {', '.join(FORMATS)}", line)
        for task, vocab in (("cta", cta), ("cpa", cpa)):
            if row[task] and row[task] not in vocab:
                raise DataError(columns_path, f"{task.upper()} label {row[task]!r} is not in the fixed "
                                f"{task.upper()} vocabulary ({len(vocab)} labels)", line)
        if not row["field"]:
            raise DataError(columns_path, "empty field name", line)
        subject = not columns[name]
        if subject and (not row["cta"] or row["cpa"]):
            raise DataError(columns_path, f"column 0 of layout {name!r} is the subject: it needs a CTA label "
                            "and has no CPA label", line)
        columns[name].append(MappedColumn(row["header"], row["field"], row["format"], row["cta"] or None,
                                          row["cpa"] or None, line))
    layouts = []
    for name, (line, row) in heads.items():
        if len(columns[name]) < 2:
            raise DataError(columns_path, f"layout {name!r} (layouts.csv line {line}) needs at least 2 columns")
        layouts.append(Layout(name, row["family"], row["locale"], row["domain"], tuple(columns[name])))
    return layouts


def table_id(layout: Layout, group: Group) -> str:
    return f"{layout.domain}_{layout.name}-{group.key}_real.json.gz"


def make_table(layout: Layout, group: Group, columns_path: Path) -> Table:
    """One group's records as a labelled Table in `layout`."""
    locale = group.locale if layout.locale == GROUP_LOCALE else layout.locale
    if locale is None:
        raise DataError(columns_path, f"layout {layout.name!r} takes the group's locale but family "
                        f"{layout.family!r} gives none")
    cells = []
    for column in layout.columns:
        if column.field not in group.records[0]:
            raise DataError(columns_path, f"family {layout.family!r} has no field {column.field!r} "
                            f"(fields: {', '.join(group.records[0])})", column.line)
        cells.append(tuple(format_cell(record[column.field], column.format, locale) for record in group.records))
    return Table(
        table_id=table_id(layout, group),
        columns=tuple(cells),
        cta=tuple(c.cta for c in layout.columns),
        cpa=tuple(c.cpa for c in layout.columns),
        domain=layout.domain,
        column_names=tuple(c.header for c in layout.columns),
    )


def build_real_tables(folder: Path | None = None, per_family: int = 0) -> list[Table]:
    """Every table of the real split, sorted by table id (deterministic: see module docstring).
    `per_family` > 0 keeps only the first that many tables (groups) of each family, the same
    tables as in the whole split, byte for byte: every family stays in, and every layout of a
    family where `per_family` reaches its layout count, at a fraction of the scoring time
    (`prepare.real_tables_per_family`, for quick runs)."""
    folder = folder or mapping_dir()
    layouts = load_mapping(folder)
    tables = []
    for family in dict.fromkeys(layout.family for layout in layouts):  # first-seen order
        own = [layout for layout in layouts if layout.family == family]
        groups = _family_groups(family)
        for i, group in enumerate(groups[:per_family] if per_family > 0 else groups):
            tables.append(make_table(own[i % len(own)], group, folder / COLUMNS_FILE))
    tables.sort(key=lambda t: t.table_id)
    ids = [t.table_id for t in tables]
    if len(set(ids)) != len(ids):
        raise DataError(folder / LAYOUTS_FILE, "two tables got the same id (a family repeats a group key)")
    return tables


@cache
def _family_groups(family: str) -> tuple[Group, ...]:
    """A family's groups (cached: the package data is read once per process)."""
    return tuple(FAMILIES[family][1]())


# ----------------------------------------------------------------------------- SOTAB V2 layout


def _table_file(table: Table) -> bytes:
    """A SOTAB table file: gzipped JSON lines, one row per line, keys "0".."n-1".

    gzip header without a file name and with mtime 0, so the bytes are a function of the
    cells alone.
    """
    lines = []
    for r in range(table.num_rows):
        row = {str(c): (column[r] if r < len(column) else None) for c, column in enumerate(table.columns)}
        lines.append(json.dumps(row, ensure_ascii=False) + "\n")
    return gzip.compress("".join(lines).encode("utf-8"), compresslevel=9, mtime=0)


def _ground_truth(tables: list[Table], task: str) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(("table_name", "column_index", "label") if task == "cta"
                    else ("table_name", "main_column_index", "column_index", "label"))
    for table in tables:
        for c, label in enumerate(getattr(table, task)):
            if label is not None:
                writer.writerow((table.table_id, c, label) if task == "cta" else (table.table_id, 0, c, label))
    return out.getvalue()


def write_sotab_dir(tables: list[Table], out_dir: str | Path) -> Path:
    """Write `tables` as a SOTAB V2 directory whose test split they are.

    Layout: `Test/<table id>` (gzipped JSON lines) and `sotab_v2_cta_test_set.csv`,
    `sotab_v2_cpa_test_set.csv` (main column 0). `aegir.data.sotab.read_sotab(out_dir,
    "test")` reads back the same tables (cells, labels, ids, domains). Atomic: `out_dir` is
    replaced as a whole, or left as it was on failure.
    """
    out_dir = Path(out_dir)
    with atomic.staged_dir(out_dir) as staging:
        (staging / "Test").mkdir()
        for table in tables:
            (staging / "Test" / table.table_id).write_bytes(_table_file(table))
        for task in ("cta", "cpa"):
            (staging / f"sotab_v2_{task}_test_set.csv").write_text(_ground_truth(tables, task), encoding="utf-8")
    return out_dir


def summary(tables: list[Table]) -> dict[str, Any]:
    """Counts that the issue's targets are stated in (tables, labelled columns, labels)."""
    cta = [label for t in tables for label in t.cta if label is not None]
    cpa = [label for t in tables for label in t.cpa if label is not None]
    return {"tables": len(tables), "cta_columns": len(cta), "cpa_pairs": len(cpa),
            "cta_labels": len(set(cta)), "cpa_labels": len(set(cpa))}


def layout_families(folder: Path | None = None) -> dict[str, str]:
    """layout name → family, from the real split's mapping (layouts.csv, checked)."""
    return {layout.name: layout.family for layout in load_mapping(folder)}


def family_of(table_id: str, layouts: dict[str, str]) -> str:
    """The family of a real table id `<domain>_<layout>-<group key>_real.json.gz` (the longest
    layout name of `layouts`, from `layout_families`, that its middle starts with)."""
    middle = table_id.split("_", 1)[1] if "_" in table_id else ""
    matches = [name for name in layouts if middle.startswith(name + "-")]
    if not matches:
        raise AegirError(f"real table {table_id!r} names no layout of {LAYOUTS_FILE}")
    return layouts[max(matches, key=len)]


def coverage_by_domain(tables: list[Table], folder: Path | None = None) -> dict[str, Any]:
    """Per table domain: its families, tables, labelled CTA columns and CPA pairs, and the CTA
    columns per label — what `results/prepare/stats.json` lists under `real_coverage`."""
    layouts = layout_families(folder)
    out: dict[str, Any] = {}
    for table in tables:
        entry = out.setdefault(table.domain, {"families": [], "tables": 0, "cta_columns": 0, "cpa_pairs": 0,
                                              "cta": {}})
        family = family_of(table.table_id, layouts)
        if family not in entry["families"]:
            entry["families"].append(family)
        entry["tables"] += 1
        entry["cpa_pairs"] += sum(label is not None for label in table.cpa)
        for label in table.cta:
            if label is not None:
                entry["cta_columns"] += 1
                entry["cta"][label] = entry["cta"].get(label, 0) + 1
    return {domain: {**e, "families": sorted(e["families"]), "cta": dict(sorted(e["cta"].items()))}
            for domain, e in sorted(out.items())}


"""Readers: SOTAB V2 layout and users' own tables, every bad-input case named by file and line."""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from aegir.data.sotab import (
    SKIP_COLUMN_OUT_OF_RANGE,
    SKIP_MISSING_GROUND_TRUTH,
    SKIP_MISSING_TABLE,
    SkipReport,
    cell_text,
    iter_sotab,
    read_sotab,
)
from aegir.data.user_tables import read_user_table
from aegir.errors import ConfigError, DataError

HOTEL_CTA = "Hotel_a.com_September2020_CTA.json.gz"
HOTEL_CPA = "Hotel_a.com_September2020_CPA.json.gz"
BOOK_CPA = "Book_b.org_September2020_CPA.json.gz"
MOVIE_CTA = "Movie_c.net_September2020_CTA.json.gz"
MOVIE_CPA = "Movie_c.net_September2020_CPA.json.gz"
EVENT_CTA = [f"Event_e{i}.de_September2020_CTA.json.gz" for i in range(3)]
EVENT_CPA = "Event_e9.de_September2020_CPA.json.gz"

HOTEL_CTA_LINES = [
    '{"0": "Grand Hotel", "1": "01234", "2": 1.50, "3": true, "4": null, '
    '"5": {"@type": "PostalAddress", "addressLocality": "Oslo", "n": 3}}',
    '{"5": "x", "0": "Inn \\u00e9 😀", "1": "0042", "2": 12, "3": false, "4": ["a", 1.0, null]}',
]


def write_gz(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wb") as f:
        f.write(("\n".join(lines) + "\n").encode("utf-8"))
    return path


def rows_as_lines(rows: list[list]) -> list[str]:
    return [json.dumps({str(i): v for i, v in enumerate(row)}, ensure_ascii=False) for row in rows]


def write_csv(path: Path, header: list[str], rows: list[list]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def build_sotab(root: Path) -> Path:
    """A small SOTAB V2 tree: every split, both CPA header variants, extra CTA columns."""
    train, valid, test = root / "Train", root / "Validation", root / "Test"
    write_gz(train / HOTEL_CTA, HOTEL_CTA_LINES)
    write_gz(train / HOTEL_CPA, rows_as_lines([["Grand", "+47 1", "Main St 1"], ["Inn", "+47 2", None]]))
    write_gz(train / BOOK_CPA, rows_as_lines([["978-3", "Ann", "Dune"], ["978-4", "Bob", "Emma"]]))
    # CTA with extra columns, in another order: read by header name.
    write_csv(root / "sotab_v2_cta_training_set.csv", ["label", "table_name", "domain", "column_index", "column_type"], [
        ["Hotel/name", HOTEL_CTA, "Hotel", 0, "subject"],
        ["postalCode", HOTEL_CTA, "Hotel", 1, "object"],
        ["price", HOTEL_CTA, "Hotel", 2, "object"],
        ["Boolean", HOTEL_CTA, "Hotel", 3, "object"],
        ["PostalAddress", HOTEL_CTA, "Hotel", 5, "object"],
        ["Book/name", BOOK_CPA, "Book", 2, "subject"],
        ["IdentifierAT", BOOK_CPA, "Book", 0, "object"],
    ])
    write_csv(root / "sotab_v2_cpa_training_set.csv", ["table_name", "main_column_index", "column_index", "label"], [
        [HOTEL_CPA, 0, 1, "telephone"],
        [HOTEL_CPA, 0, 2, "address"],
        [BOOK_CPA, 2, 0, "isbn"],
        [BOOK_CPA, 2, 1, "author"],
    ])

    write_gz(valid / MOVIE_CTA, rows_as_lines([["Alien", "1979"]]))
    write_gz(valid / MOVIE_CPA, rows_as_lines([["Alien", "Scott"]]))
    write_csv(root / "sotab_v2_cta_validation_set.csv", ["table_name", "column_index", "label"],
              [[MOVIE_CTA, 0, "Movie/name"]])
    # CPA without main_column_index: the main column is 0.
    write_csv(root / "sotab_v2_cpa_validation_set.csv", ["table_name", "column_index", "label"],
              [[MOVIE_CPA, 1, "director"]])

    for name in EVENT_CTA:
        write_gz(test / name, rows_as_lines([[name, "2020-09-01"]]))
    write_gz(test / EVENT_CPA, rows_as_lines([["Fest", "2020-09-01"]]))
    header = ["table_name", "column_index", "label"]
    write_csv(root / "sotab_v2_cta_test_set.csv", header, [[n, 1, "Date"] for n in EVENT_CTA])
    write_csv(root / "sotab_v2_cta_random_test_set.csv", header, [[EVENT_CTA[0], 1, "Date"]])
    write_csv(root / "sotab_v2_cta_corner_cases_test_set.csv", header, [[EVENT_CTA[1], 1, "Date"]])
    write_csv(root / "sotab_v2_cta_missing_values_test_set.csv", header, [[EVENT_CTA[2], 1, "Date"]])
    write_csv(root / "sotab_v2_cta_format_heterogeneity_test_set.csv", header,
              [[EVENT_CTA[2], 1, "Date"], [EVENT_CTA[0], 0, "Event/name"]])
    cpa_header = ["table_name", "main_column_index", "column_index", "label"]
    # No CPA random subset: `test` falls back to the full CPA test set.
    write_csv(root / "sotab_v2_cpa_test_set.csv", cpa_header, [[EVENT_CPA, 0, 1, "startDate"]])
    for subset in ("corner_cases", "missing_values", "format_heterogeneity"):
        write_csv(root / f"sotab_v2_cpa_{subset}_test_set.csv", cpa_header, [[EVENT_CPA, 0, 1, "startDate"]])
    return root


@pytest.fixture
def sotab(tmp_path: Path) -> Path:
    return build_sotab(tmp_path / "sotab")


def by_id(tables) -> dict:
    return {t.table_id: t for t in tables}


# --------------------------------------------------------------------------- SOTAB: good input


def test_train_cells_labels_and_domain(sotab):
    tables = read_sotab(sotab, "train")
    assert [t.table_id for t in tables] == sorted([HOTEL_CTA, HOTEL_CPA, BOOK_CPA])
    hotel = by_id(tables)[HOTEL_CTA]
    assert hotel.columns == (
        ("Grand Hotel", "Inn é 😀"),
        ("01234", "0042"),  # leading zeros stay: strings
        ("1.50", "12"),  # numbers as their literal text
        ("true", "false"),
        (None, '["a",1.0,null]'),
        ('{"@type":"PostalAddress","addressLocality":"Oslo","n":3}', "x"),
    )
    assert hotel.cta == ("Hotel/name", "postalCode", "price", "Boolean", None, "PostalAddress")
    assert hotel.cpa == (None,) * 6
    assert hotel.domain == "Hotel" and hotel.column_names is None
    hotel_cpa = by_id(tables)[HOTEL_CPA]
    assert hotel_cpa.cpa == (None, "telephone", "address") and hotel_cpa.cta == (None,) * 3
    assert hotel_cpa.columns[2] == ("Main St 1", None)


def test_main_column_moves_to_front_with_its_labels(sotab):
    book = by_id(read_sotab(sotab, "train"))[BOOK_CPA]
    # main_column_index 2 → order (2, 0, 1); CTA and CPA labels (merged) move with the columns.
    assert book.columns == (("Dune", "Emma"), ("978-3", "978-4"), ("Ann", "Bob"))
    assert book.cpa == (None, "isbn", "author")
    assert book.cta == ("Book/name", "IdentifierAT", None)
    assert book.domain == "Book"


def test_valid_split_and_cpa_without_main_column_header(sotab):
    tables = by_id(read_sotab(sotab, "valid"))
    assert set(tables) == {MOVIE_CTA, MOVIE_CPA}
    assert tables[MOVIE_CPA].cpa == (None, "director")
    assert tables[MOVIE_CTA].cta == ("Movie/name", None)


def test_test_subsets_map_to_their_ground_truth(sotab):
    ids = {split: [t.table_id for t in read_sotab(sotab, split)]
           for split in ("test", "corner_cases", "missing_values", "format_heterogeneity")}
    assert ids["test"] == [EVENT_CTA[0], EVENT_CPA]  # random CTA subset + full CPA test set
    assert ids["corner_cases"] == [EVENT_CTA[1], EVENT_CPA]
    assert ids["missing_values"] == [EVENT_CTA[2], EVENT_CPA]
    assert ids["format_heterogeneity"] == [EVENT_CTA[0], EVENT_CTA[2], EVENT_CPA]
    fh = by_id(read_sotab(sotab, "format_heterogeneity"))
    assert fh[EVENT_CTA[0]].cta == ("Event/name", None)  # a subset's labels are its own CSV's
    # Without the random subset, `test` is the full test set.
    (sotab / "sotab_v2_cta_random_test_set.csv").unlink()
    assert [t.table_id for t in read_sotab(sotab, "test")] == sorted(EVENT_CTA + [EVENT_CPA])


def test_reading_is_deterministic_and_lazy_iteration_agrees(sotab):
    assert read_sotab(sotab, "train") == read_sotab(sotab, "train") == list(iter_sotab(sotab, "train"))


def test_table_name_without_suffix_and_unknown_split(sotab):
    rows = [[HOTEL_CPA.removesuffix(".json.gz"), 0, 1, "telephone"]]
    write_csv(sotab / "sotab_v2_cpa_training_set.csv", ["table_name", "main_column_index", "column_index", "label"], rows)
    tables = by_id(read_sotab(sotab, "train"))
    assert tables[HOTEL_CPA.removesuffix(".json.gz")].cpa == (None, "telephone", None)
    with pytest.raises(ConfigError, match="unknown split 'hard'"):
        read_sotab(sotab, "hard")


def test_cell_text_conversions():
    assert cell_text(None) is None
    assert cell_text("01234") == "01234"
    assert cell_text(True) == "true" and cell_text(False) == "false"
    assert cell_text(7) == "7" and cell_text(2.5) == "2.5"
    assert cell_text({"b": [1, None, "é"], "a": {"x": True}}) == '{"b":[1,null,"é"],"a":{"x":true}}'


# --------------------------------------------------------------------------- SOTAB: table files


def expect_error(root: Path, split: str, path: Path, line: int | None, *words: str) -> DataError:
    with pytest.raises(DataError) as info:
        read_sotab(root, split)
    error = info.value
    assert Path(error.path) == path
    assert error.line == line
    message = str(error)
    assert message.startswith(f"{path}:{line}:" if line is not None else f"{path}:")
    for word in words:
        assert word in message, message
    return error


def test_truncated_gzip(sotab):
    path = sotab / "Train" / HOTEL_CTA
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    expect_error(sotab, "train", path, 1, "truncated or corrupt gzip")


def test_not_gzip_at_all(sotab):
    path = sotab / "Train" / HOTEL_CTA
    path.write_bytes(b'{"0": "plain text, not gzip"}\n')
    expect_error(sotab, "train", path, 1, "gzip")


def test_invalid_json_line(sotab):
    path = write_gz(sotab / "Train" / HOTEL_CTA, HOTEL_CTA_LINES[:1] + ['{"0": "a", "1": '])
    expect_error(sotab, "train", path, 2, "invalid JSON")


def test_row_that_is_not_an_object(sotab):
    path = write_gz(sotab / "Train" / HOTEL_CTA, HOTEL_CTA_LINES + ['["a", "b"]'])
    expect_error(sotab, "train", path, 3, "must be a JSON object", "array")


def test_rows_with_inconsistent_keys(sotab):
    path = write_gz(sotab / "Train" / HOTEL_CPA, rows_as_lines([["a", "b", "c"], ["a", "b", "c"], ["a", "b"]]))
    expect_error(sotab, "train", path, 3, "inconsistent keys")


def test_keys_other_than_column_numbers(sotab):
    path = write_gz(sotab / "Train" / HOTEL_CPA, ['{"name": "a", "phone": "b", "x": 1}'])
    expect_error(sotab, "train", path, 1, 'keys must be "0".."2"')


def test_non_utf8_bytes_in_table_file(sotab):
    path = sotab / "Train" / HOTEL_CPA
    with gzip.open(path, "wb") as f:
        f.write(b'{"0": "a", "1": "b", "2": "c"}\n{"0": "caf\xe9", "1": "b", "2": "c"}\n')
    expect_error(sotab, "train", path, 2, "not valid UTF-8", "0xe9")


def test_empty_table_files(sotab):
    path = write_gz(sotab / "Train" / HOTEL_CPA, [""])
    expect_error(sotab, "train", path, None, "empty table")
    write_gz(path, ["{}", "{}"])
    expect_error(sotab, "train", path, None, "empty table", "no columns")


def test_missing_directories(tmp_path, sotab):
    missing = tmp_path / "nowhere"
    expect_error(missing, "train", missing, None, "missing directory")
    for path in (sotab / "Validation").iterdir():
        path.unlink()
    (sotab / "Validation").rmdir()
    expect_error(sotab, "valid", sotab / "Validation", None, "missing directory", "Validation/")


# --------------------------------------------------------------------------- SOTAB: ground truth


def test_ground_truth_naming_a_missing_table_is_fatal_or_counted(sotab):
    (sotab / "Train" / HOTEL_CPA).unlink()
    gt = sotab / "sotab_v2_cpa_training_set.csv"
    expect_error(sotab, "train", gt, 2, "Train/" + HOTEL_CPA, "does not exist", "on_skip=SkipReport()")
    report = SkipReport()
    tables = read_sotab(sotab, "train", on_skip=report)
    assert [t.table_id for t in tables] == [BOOK_CPA, HOTEL_CTA]
    assert report.counts == {SKIP_MISSING_TABLE: 1}
    assert report.total == 1
    assert f"{gt}:2:" in report.examples[SKIP_MISSING_TABLE][0]
    assert report.as_dict()[SKIP_MISSING_TABLE]["count"] == 1


def test_column_index_out_of_range_is_fatal_or_counted(sotab):
    gt = sotab / "sotab_v2_cta_validation_set.csv"
    write_csv(gt, ["table_name", "column_index", "label"], [[MOVIE_CTA, 0, "Movie/name"], [MOVIE_CTA, 5, "Date"]])
    expect_error(sotab, "valid", gt, 3, "column_index 5 is out of range", "2 columns")
    report = SkipReport()
    movie = by_id(read_sotab(sotab, "valid", on_skip=report))[MOVIE_CTA]
    assert movie.cta == ("Movie/name", None)  # the bad label dropped, the table kept
    assert report.counts == {SKIP_COLUMN_OUT_OF_RANGE: 1}


def test_main_column_index_out_of_range(sotab):
    gt = sotab / "sotab_v2_cpa_training_set.csv"
    write_csv(gt, ["table_name", "main_column_index", "column_index", "label"], [[HOTEL_CPA, 7, 1, "telephone"]])
    expect_error(sotab, "train", gt, 2, "main_column_index 7 is out of range")
    report = SkipReport()
    hotel = by_id(read_sotab(sotab, "train", on_skip=report))[HOTEL_CPA]
    assert hotel.cpa == (None, None, None)
    assert report.counts == {SKIP_COLUMN_OUT_OF_RANGE: 1}


def test_label_outside_vocabulary(sotab):
    gt = sotab / "sotab_v2_cta_validation_set.csv"
    write_csv(gt, ["table_name", "column_index", "label"], [[MOVIE_CTA, 0, "Movie/name"], [MOVIE_CTA, 1, "Year"]])
    expect_error(sotab, "valid", gt, 3, "'Year' is not in the fixed CTA vocabulary")
    gt = sotab / "sotab_v2_cpa_validation_set.csv"
    write_csv(sotab / "sotab_v2_cta_validation_set.csv", ["table_name", "column_index", "label"],
              [[MOVIE_CTA, 0, "Movie/name"]])
    write_csv(gt, ["table_name", "column_index", "label"], [[MOVIE_CPA, 1, "Movie/name"]])  # a CTA label
    expect_error(sotab, "valid", gt, 2, "'Movie/name' is not in the fixed CPA vocabulary")


def test_ground_truth_csv_missing_a_required_header(sotab):
    gt = sotab / "sotab_v2_cta_validation_set.csv"
    write_csv(gt, ["table_name", "col", "label"], [[MOVIE_CTA, 0, "Movie/name"]])
    expect_error(sotab, "valid", gt, 1, "lacks required column(s) column_index")
    gt.write_text("")
    expect_error(sotab, "valid", gt, 1, "empty file")


def test_bad_ground_truth_rows(sotab):
    gt = sotab / "sotab_v2_cta_validation_set.csv"
    header = ["table_name", "column_index", "label"]
    write_csv(gt, header, [[MOVIE_CTA, 0, "Movie/name"], [MOVIE_CTA, "one", "Date"]])
    expect_error(sotab, "valid", gt, 3, "column_index must be a non-negative integer", "'one'")
    write_csv(gt, header, [[MOVIE_CTA, -1, "Date"]])
    expect_error(sotab, "valid", gt, 2, "non-negative integer")
    gt.write_text(f"table_name,column_index,label\n{MOVIE_CTA},0\n")
    expect_error(sotab, "valid", gt, 2, "fewer fields")
    write_csv(gt, header, [[MOVIE_CTA, 0, "Movie/name"], [MOVIE_CTA, 0, "Date"]])
    expect_error(sotab, "valid", gt, 3, "conflicting labels for column 0", "'Movie/name'")
    write_csv(gt, header, [[MOVIE_CTA, 0, "Movie/name"], [MOVIE_CTA, 0, "Movie/name"]])  # identical: fine
    assert by_id(read_sotab(sotab, "valid"))[MOVIE_CTA].cta == ("Movie/name", None)


def test_bad_cpa_main_columns(sotab):
    gt = sotab / "sotab_v2_cpa_training_set.csv"
    header = ["table_name", "main_column_index", "column_index", "label"]
    write_csv(gt, header, [[HOTEL_CPA, 0, 1, "telephone"], [HOTEL_CPA, 1, 2, "address"]])
    expect_error(sotab, "train", gt, 3, "main_column_index 1 here but 0 at line 2")
    write_csv(gt, header, [[HOTEL_CPA, 1, 1, "telephone"]])
    expect_error(sotab, "train", gt, 2, "on the main column 1 itself")


def test_non_utf8_ground_truth(sotab):
    gt = sotab / "sotab_v2_cta_validation_set.csv"
    gt.write_bytes(b"table_name,column_index,label\n" + MOVIE_CTA.encode() + b",0,Movie/name\nx\xff,0,Date\n")
    expect_error(sotab, "valid", gt, 3, "not valid UTF-8", "0xff")


def test_missing_ground_truth_files(sotab):
    (sotab / "sotab_v2_cpa_validation_set.csv").unlink()
    expect_error(sotab, "valid", sotab / "sotab_v2_cpa_validation_set.csv", None, "no CPA labels")
    report = SkipReport()
    assert [t.table_id for t in read_sotab(sotab, "valid", on_skip=report)] == [MOVIE_CTA]
    assert report.counts == {SKIP_MISSING_GROUND_TRUTH: 1}
    (sotab / "sotab_v2_cta_validation_set.csv").unlink()
    with pytest.raises(DataError, match="no ground truth for split 'valid'"):
        read_sotab(sotab, "valid", on_skip=report)


# --------------------------------------------------------------------------- user tables


def test_user_csv_delimiters_and_strings(tmp_path):
    for delimiter in ",;\t|":
        path = tmp_path / f"t{ord(delimiter)}.csv"
        text = delimiter.join(["name", "zip", "note"]) + "\n"
        text += delimiter.join(["Ann", "01234", '"a, b; c | d"']) + "\n"
        text += delimiter.join(["Bob", "0042", ""]) + "\n"
        path.write_text(text, encoding="utf-8")
        table = read_user_table(path)
        assert table.column_names == ("name", "zip", "note"), delimiter
        assert table.columns == (("Ann", "Bob"), ("01234", "0042"), ("a, b; c | d", ""))
        assert table.cta == table.cpa == (None, None, None) and table.domain is None
        assert table.table_id == path.name


def test_user_csv_short_rows_bom_and_single_column(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes("\ufeffa,b,c\n1,2\n\n4,5,6\n".encode("utf-8"))
    table = read_user_table(path)
    assert table.column_names == ("a", "b", "c")
    assert table.columns == (("1", "4"), ("2", "5"), ("", "6"))  # a field a short row lacks reads as "", as an empty one
    path.write_text("\n\ncity\nOslo\nBergen\n")
    assert read_user_table(path).columns == (("Oslo", "Bergen"),)


def test_user_csv_bad_input(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("a,b\n1,2\n3,4,5\n")
    with pytest.raises(DataError, match=r"bad\.csv:3: row has 3 fields but the header has 2"):
        read_user_table(path)
    path.write_text("a,b\n")
    with pytest.raises(DataError, match=r"bad\.csv: empty table"):
        read_user_table(path)
    path.write_text("  \n")
    with pytest.raises(DataError, match=r"bad\.csv: empty file"):
        read_user_table(path)
    path.write_bytes(b"a,b\n1,2\n\xc3(,x\n")
    with pytest.raises(DataError, match=r"bad\.csv:3: not valid UTF-8"):
        read_user_table(path)
    with pytest.raises(DataError, match=r"nope\.csv: file not found"):
        read_user_table(tmp_path / "nope.csv")
    (tmp_path / "t.xlsx").write_bytes(b"PK")
    with pytest.raises(DataError, match=r"t\.xlsx: unsupported file type"):
        read_user_table(tmp_path / "t.xlsx")


def test_user_parquet(tmp_path):
    path = tmp_path / "t.parquet"
    arrow = pa.table({
        "name": ["Ann", None],
        "zip": ["01234", "0042"],
        "n": pa.array([1, None], pa.int64()),
        "x": [2.5, 3.0],
        "ok": [True, False],
        "tags": [["a", "b"], []],
    })
    pq.write_table(arrow, path)
    table = read_user_table(path)
    assert table.column_names == ("name", "zip", "n", "x", "ok", "tags")
    assert table.columns == (("Ann", None), ("01234", "0042"), ("1", None), ("2.5", "3.0"),
                             ("true", "false"), ('["a","b"]', "[]"))
    path.write_bytes(b"not parquet at all")
    with pytest.raises(DataError, match=r"t\.parquet: cannot read Parquet"):
        read_user_table(path)
    pq.write_table(pa.table({"a": pa.array([], pa.string())}), path)
    with pytest.raises(DataError, match=r"t\.parquet: empty table"):
        read_user_table(path)


def test_user_json_lines(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"name": "Ann", "zip": "01234"}\n\n{"zip": "0042", "price": 9.90, "name": null}\n')
    table = read_user_table(path)
    assert table.column_names == ("name", "zip", "price")
    assert table.columns == (("Ann", None), ("01234", "0042"), (None, "9.90"))
    path.write_text('{"a": 1}\n[1]\n')
    with pytest.raises(DataError, match=r"t\.jsonl:2: a row must be a JSON object"):
        read_user_table(path)
    path.write_text("")
    with pytest.raises(DataError, match=r"t\.jsonl: empty table"):
        read_user_table(path)


def test_user_json_gz_sotab_style(tmp_path):
    path = write_gz(tmp_path / HOTEL_CTA, HOTEL_CTA_LINES)
    table = read_user_table(path)
    assert table.columns[1] == ("01234", "0042") and table.columns[2] == ("1.50", "12")
    assert table.column_names is None and table.cta == (None,) * 6 and table.domain is None
    path.write_bytes(path.read_bytes()[:20])
    with pytest.raises(DataError, match="truncated or corrupt gzip"):
        read_user_table(path)

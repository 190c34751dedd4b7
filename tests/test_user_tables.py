"""Users' table files read lazily (aegir.data.user_tables): every format, compressed CSV, a huge
cell, errors with their line, the rows a model reads materialized and no others (the streams
equal to a whole-file read), and `aegir annotate`'s memory flat in the file's size."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from aegir.config import PrepareConfig
from aegir.data import user_tables
from aegir.data.dataset import examples_from_tables
from aegir.data.table import SampledColumn
from aegir.data.user_tables import open_table, read_user_table, table_kind
from aegir.errors import DataError
from aegir.eval.grouped import read_groups, rows_read, table_reads
from aegir.model.checkpoint import save_checkpoint
from aegir.model.network import AegirModel, preset
from aegir.swarm.model import Phase3Reading, Swarm
from aegir.swarm.spawn import deep_subtasks, subtask_examples, wide_subtasks
from conftest import ROOT, load_benchmark, tool_env

HEADER = ["hotel", "phone", "zip"]
ROWS = [["Hotel Adlon", "+49 30 22610", "01234"], ["The Ritz", "+44 20 7493 8181", "W1J 9BR"],
        ["Cafe Central", "", "1010"]]
COLUMNS = (("Hotel Adlon", "The Ritz", "Cafe Central"), ("+49 30 22610", "+44 20 7493 8181", ""),
           ("01234", "W1J 9BR", "1010"))


def csv_text(delimiter: str = ",") -> str:
    return "".join(delimiter.join(row) + "\n" for row in [HEADER, *ROWS])


def write_table(path: Path) -> Path:
    """The three-row hotel table in the format `path`'s name says."""
    name = path.name
    if name.endswith(".csv.gz"):
        path.write_bytes(gzip.compress(csv_text().encode()))
    elif name.endswith(".csv.zst"):
        import zstandard

        path.write_bytes(zstandard.ZstdCompressor().compress(csv_text().encode()))
    elif name.endswith((".csv", ".txt")):
        path.write_text(csv_text(";" if name.endswith(".txt") else ","))
    elif name.endswith(".tsv"):
        path.write_text(csv_text("\t"))
    elif name.endswith(".parquet"):
        pq.write_table(pa.table({h: [r[i] for r in ROWS] for i, h in enumerate(HEADER)}), path)
    elif name.endswith(".jsonl"):
        path.write_text("".join(json.dumps(dict(zip(HEADER, row))) + "\n" for row in ROWS))
    elif name.endswith(".json.gz"):
        path.write_bytes(gzip.compress("".join(json.dumps({str(i): c for i, c in enumerate(row)}) + "\n"
                                               for row in ROWS).encode()))
    return path


@pytest.mark.parametrize("name", ["t.csv", "t.tsv", "t.txt", "t.csv.gz", "t.csv.zst", "t.parquet", "t.jsonl",
                                  "t.json.gz"])
def test_every_format_reads_the_same_table(tmp_path, name):
    path = write_table(tmp_path / name)
    table = read_user_table(path)
    assert table.columns == COLUMNS and table.table_id == name
    assert table.column_names == (None if name.endswith(".json.gz") else tuple(HEADER))
    opened = open_table(path)
    assert (opened.num_rows, opened.num_columns) == (3, 3)
    lazy = opened.read([0, 2])
    assert all(isinstance(c, SampledColumn) and len(c) == 3 for c in lazy.columns)
    assert [c[2] for c in lazy.columns] == ["Cafe Central", "", "1010"] and lazy.columns[0][0] == "Hotel Adlon"
    with pytest.raises(LookupError, match="row 1 of this column was not read"):
        lazy.columns[0][1]


def test_names_that_are_no_table():
    assert [table_kind(n) for n in ("a.CSV", "a.tsv.zst", "a.ndjson", "a.pq", "a.json.gz", "a.xlsx", "a.gz")] == \
        ["csv", "csv", "jsonl", "parquet", "sotab", None, None]


def test_a_huge_cell_is_read_whole(tmp_path):
    """A 200,000-character field: the csv module's field limit (131,072) refused it."""
    path = tmp_path / "big_cell.csv"
    cell = "x" * 200_000
    path.write_text(f"name,notes\nAdlon,{cell}\nRitz,short\n")
    assert read_user_table(path).columns[1] == (cell, "short")
    assert open_table(path).read([0]).columns[1][0] == cell


@pytest.fixture(params=["in memory", "scanned"])
def csv_read(request, monkeypatch) -> str:
    """Both ways a CSV is read: a small file parsed at once, a large one scanned (here: any)."""
    if request.param == "scanned":
        monkeypatch.setattr(user_tables, "SMALL_CSV_BYTES", 0)
    return request.param


def test_csv_errors_name_the_line_also_past_the_sniffed_head(tmp_path, csv_read):
    path = tmp_path / "bad.csv"
    filler = "".join(f"row {i},{i}\n" for i in range(20_000))  # > 64 KiB: polars finds these, not the head
    path.write_bytes(b"a,b\n" + filler.encode() + b"x,1,2\n")
    with pytest.raises(DataError, match=r"bad\.csv:20002: row has 3 fields but the header has 2"):
        open_table(path)
    path.write_bytes(b"a,b\n" + filler.encode() + b"\xc3(,x\n")
    with pytest.raises(DataError, match=r"bad\.csv:20002: not valid UTF-8 \(byte 0xc3\)"):
        open_table(path)
    path.write_bytes(gzip.compress(b"a,b\n1,2\n")[:15])
    gz = path.rename(tmp_path / "bad.csv.gz")
    with pytest.raises(DataError, match=r"bad\.csv\.gz: truncated or corrupt gzip data"):
        open_table(gz)


def test_blank_rows_and_a_quoted_newline(tmp_path, csv_read):
    path = tmp_path / "t.csv"
    path.write_text('\n\nname,note\n\nAnn,"two\nlines"\n,\nBob,x\n')
    table = read_user_table(path)
    assert table.column_names == ("name", "note") and table.columns == (("Ann", "Bob"), ("two\nlines", "x"))


def lazy_and_whole(path: Path, rows: set[int]):
    opened = open_table(path)
    return opened.read(rows), read_user_table(path)


def wide_csv(path: Path, rows: int = 300, columns: int = 10) -> Path:
    path.write_text(",".join(f"c{i}" for i in range(columns)) + "\n"
                    + "".join(",".join(f"r{r}c{c}" for c in range(columns)) + "\n" for r in range(rows)))
    return path


@pytest.mark.parametrize("read_columns,read_views", [(0, 1), (4, 1), (0, 3), (4, 2)])
def test_the_rows_a_model_reads_give_the_streams_of_the_whole_file(tmp_path, read_columns, read_views, csv_read):
    """`rows_read` holds every row `table_reads` serializes: the lazy table (only those rows)
    gives byte-identical reads to the whole file, in column groups and row views, with and
    without compact columns; and few rows are read."""
    path = wide_csv(tmp_path / "wide.csv")
    for prepare in (PrepareConfig(byte_budget=512, max_rows=6), PrepareConfig(byte_budget=300, max_rows=9, seed=3,
                                                                              compact_columns=True)):
        rows = rows_read(300, "wide.csv", 10, read_columns, read_views, prepare)
        lazy, whole = lazy_and_whole(path, rows)
        assert len(rows) <= prepare.max_rows * (1 + read_views * len(read_groups(10, read_columns))) < 300

        def reads(table, prepare=prepare):
            example = examples_from_tables([table], prepare.byte_budget, prepare.max_rows, prepare.seed, path,
                                           prepare.compact_columns, prepare.compact_cell_bytes)
            plan = table_reads([table], example, read_columns, read_views, prepare, path)
            return [(e.table_id, e.byte_ids.tobytes(), e.column_spans.tobytes()) for e in plan.reads], plan.owners

        assert reads(lazy) == reads(whole)


def test_the_rows_a_swarm_reads_give_every_subtask_of_the_whole_file(tmp_path):
    """`Swarm.rows_read` holds the rows of the shared stream, of the orchestrator's reading (its
    column groups and row views, as `phase3` scores) and of every sub-table any decision can read
    (each option's wide groups, every deep-search pair): all serialize as from the whole file."""
    path = wide_csv(tmp_path / "wide.csv", rows=200, columns=7)
    prepare = PrepareConfig(byte_budget=400, max_rows=5)
    reading = Phase3Reading(columns=3, views=2)
    swarm = SimpleNamespace(policy=SimpleNamespace(options=(0, 1, 2, 4)), reading=reading)
    rows = Swarm.rows_read(swarm, 200, "wide.csv", 7, prepare)
    lazy, whole = lazy_and_whole(path, rows)
    keys = sorted({(0, cols) for g in (0, 1, 2, 4) for cols in wide_subtasks(7, g)} | {(0, cols) for cols in
                                                                                     deep_subtasks(range(7))})

    def streams(table):
        shared = examples_from_tables([table], prepare.byte_budget, prepare.max_rows, prepare.seed, path)
        grouped = reading.plan([table], shared, prepare, path).reads
        return [e.byte_ids.tobytes() for e in shared + grouped + subtask_examples([table], keys, prepare, path)]

    assert streams(lazy) == streams(whole) and len(keys) == 12  # 1 + 2 + 4 wide, 7 deep, (0,5) and (0,6) both
    assert len(reading.plan([whole], examples_from_tables([whole], 400, 5, 0, path), prepare, path).reads) == 6


def peak_mb(command: list[str]) -> int:
    """The peak resident memory (MB) of a fresh process running `command`
    (bench_annotate.peak_rss_mb)."""
    proc = subprocess.Popen(command, env=tool_env(ROOT), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = load_benchmark("bench_annotate").peak_rss_mb(proc)
    assert proc.returncode == 0, proc.stderr.read().decode()
    return peak


@pytest.mark.slow
def test_annotate_memory_stays_flat_in_the_file_size(tmp_path):
    """`aegir annotate` on a 300 MB CSV (3 million rows, written here by repeating a 1 MB block)
    peaks within 80 MB of the same on a 20 MB one: polars reads it in chunks, only the rows the
    model reads are kept, nothing holds a list of every row (row views rotate without one; a list
    of 3 million row numbers alone is ~110 MB, so with one back the growth is ~160 MB).
    It is not quite flat: measured 2026-11-29 on the 2-core Xeon, 20 / 100 / 200 / 300 MB files
    peak at 417 / 435 / 455 / 467 MB (again: 406 at 20, 459 at 300, so ±10 MB between runs of one
    file), and polars' streaming count of the 300 MB file alone peaks 23 MB above that of the
    20 MB one; 553 MB for a 2.1 GB file of 60 million rows (by hand: too long for a test). The
    bound was 60 MB until a run beside other test workers measured 60 exactly. About ten
    seconds: two processes that import torch, a row sample hashed over 3 million rows."""
    torch.manual_seed(0)
    save_checkpoint(tmp_path / "model", AegirModel(preset("tiny")),
                    {"params": {"prepare": asdict(PrepareConfig(byte_budget=256, max_rows=6)),
                                "reading": {"columns": 3, "views": 2}}})
    row = "Hotel {i},+49 30 {i:06d},{i:05d},2020-01-{d:02d},{note}\n"
    block = "".join(row.format(i=i, d=i % 28 + 1, note="a short description " * 3) for i in range(10_000)).encode()
    peaks = {}
    for name, blocks in (("small.csv", 20), ("big.csv", 300)):
        path = tmp_path / name
        with open(path, "wb") as f:
            f.write(b"name,phone,zip,date,notes\n")
            for _ in range(blocks):
                f.write(block)
        out = tmp_path / f"{name}.jsonl"
        peaks[name] = (path.stat().st_size / 1e6, peak_mb([sys.executable, "-m", "aegir.cli", "annotate", str(path),
                                                           "--checkpoint", str(tmp_path / "model"), "--out", str(out)]))
        assert len(out.read_text().splitlines()) == 5
        path.unlink()
    (_, small_peak), (big_mb, big_peak) = peaks["small.csv"], peaks["big.csv"]
    assert big_mb > 290 and big_peak < small_peak + 80, peaks

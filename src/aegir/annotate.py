"""`aegir annotate` over many tables: which files, which checkpoint, reading them in batches,
failures, and the one-row-per-column output file.

* **Files** (`find_tables`): each argument is a file, a directory (every table file under it,
  recursively, by name: `aegir.data.user_tables.table_kind`) or a glob (`*.csv`, `data/**/*.parquet`);
  directories and globs are listed in sorted order, each file once. An argument that names
  nothing is a failure of its own.
* **Checkpoint** (`default_checkpoint`): unless `--checkpoint` names one, the checkpoint the
  pipeline's report found best on `real` (`results/report/best.json`, written by the report
  stage), else `models/phase1/primary`, saying so.
* **Calibration** (`checkpoint_calibration`): the beta maps the `calibrate` stage fitted on the
  real split for the checkpoint (`results/calibrate/calibration.json`, found by the checkpoint's
  fingerprint) are applied to every confidence (`aegir.eval.calibration.map_prediction`) unless
  `--no-calibration`; the labels do not change. Without an entry for the checkpoint the
  confidences are the model's own, and the run says so.
* **Minimum confidence** (`withhold`): a column's CTA label or a pair's CPA relation whose
  top-1 confidence is below `--min-confidence` becomes `unknown`, its confidence kept.
* **Batches** (`annotate_files`): the checkpoint is loaded once; `batch_size` files are read
  (lazily: `CheckpointAnnotator.read`) and annotated in one pass of the model. A file that cannot
  be read or serialized fails alone, with its path and the reason; so does a table the model
  refuses (the batch is then annotated one table at a time to find it).
* **Output file** (`column_rows`, `write_rows`): one row per column (`OUTPUT_COLUMNS`), as
  Parquet, CSV or JSON lines by the file's extension, written atomically at the end
  (`aegir.atomic`): a run that fails or is interrupted leaves no half-written file.
"""

from __future__ import annotations

import csv
import glob
import io
import json
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from aegir import atomic
from aegir.errors import AegirError, DataError

DEFAULT_CHECKPOINT = Path("models/phase1/primary")
BEST_CHECKPOINT_FILE = Path("results/report/best.json")  # the report stage's pick (aegir.eval.report.best_checkpoint)
CALIBRATION_FILE = Path("results/calibrate/calibration.json")  # the calibrate stage's maps
UNKNOWN = "unknown"  # the label of a column or pair below --min-confidence

OUTPUT_FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl"}

# The output file's columns, one row per column of every table annotated: its file, its index
# and name (None without a header), the top CTA label and CPA relation (None for the subject
# column 0; "unknown" below --min-confidence) with their confidences, with --top-k > 1 the
# model's top-k lists ({label, confidence}, best first; JSON text in a CSV), and the checkpoint
# with its fingerprint.
OUTPUT_COLUMNS = ("table", "column_index", "column_name", "cta_label", "cta_confidence", "cpa_label",
                  "cpa_confidence", "cta_top_k", "cpa_top_k", "checkpoint", "fingerprint")


# --------------------------------------------------------------------------- files


def find_tables(arguments: Sequence[str | Path]) -> tuple[list[Path], list[DataError]]:
    """(the table files the arguments name, in order and each once; an error per argument that
    names none)."""
    from aegir.data.user_tables import table_kind

    files: dict[Path, None] = {}
    problems = []
    for argument in map(str, arguments):
        path = Path(argument)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and table_kind(p) is not None)
            if not found:
                problems.append(DataError(path, "no table files under it (.csv, .tsv, .txt, .parquet, .jsonl, "
                                                ".json.gz, …)"))
        elif path.exists() or not glob.has_magic(argument):
            found = [path]  # a file of any name: reading it says what is wrong with it
        else:
            found = sorted(p for p in map(Path, glob.glob(argument, recursive=True))
                           if p.is_file() and table_kind(p) is not None)
            if not found:
                problems.append(DataError(path, "the pattern matches no table file"))
        files.update(dict.fromkeys(found))
    return list(files), problems


# --------------------------------------------------------------------------- checkpoint


def default_checkpoint(best_file: Path = BEST_CHECKPOINT_FILE,
                       fallback: Path = DEFAULT_CHECKPOINT) -> tuple[Path, str]:
    """(the checkpoint to use when none is named, a sentence saying why): the one `best_file`
    names, else `fallback`."""
    if not best_file.is_file():
        return fallback, (f"no {best_file} (the pipeline's report stage writes it): using {fallback}")
    try:
        best = json.loads(best_file.read_text(encoding="utf-8"))
        checkpoint = Path(best["checkpoint"])
        score = float(best["score"])
    except (ValueError, KeyError, TypeError) as exc:
        raise DataError(best_file, f"not the report stage's best-checkpoint record ({exc}); rerun `dvc repro report` "
                                   f"or name one with --checkpoint") from None
    return checkpoint, (f"using {checkpoint}, the best on {best.get('split', 'real')} in {best_file} "
                        f"({best.get('metric', 'score')} {score:.2f})")


def checkpoint_calibration(fingerprint: str, calibration: Path | None = None) -> tuple[dict | None, str]:
    """(the beta maps {cta: (a, b, d), cpa: (a, b, d)} fitted for the checkpoint of `fingerprint`, or
    None; a sentence saying which, with the maps' out-of-family ECE on the real split).
    `calibration`: the calibrate stage's file; None: `CALIBRATION_FILE` when it is there. A file
    named but missing or malformed is a `DataError`."""
    from aegir.eval.calibration import entry_for, maps_for, read_calibration

    if calibration is None:
        if not CALIBRATION_FILE.is_file():
            return None, f"the model's own, uncalibrated (no {CALIBRATION_FILE}: the pipeline's calibrate stage writes it)"
        calibration = CALIBRATION_FILE
    content = read_calibration(calibration)
    maps = maps_for(content, fingerprint, calibration)
    if maps is None:
        return None, (f"the model's own, uncalibrated ({calibration} has no map for this checkpoint, "
                      f"fingerprint {fingerprint[:16]}: `dvc repro calibrate` fits one)")
    held_out = _held_out_ece(entry_for(content, fingerprint), content.get("real_split"))
    return maps, f"calibrated by {calibration} (a map fitted on real tables; {held_out})"


def _held_out_ece(entry: dict, real_split: str | None) -> str:
    """The out-of-family ECE per task of a checkpoint's calibration entry, in words."""
    try:
        real = entry[real_split]
        figures = [f"{task.upper()} {100 * real[task]['out_of_family']['ece']:.1f} %" for task in ("cta", "cpa")
                   if real[task].get("out_of_family")]
    except (KeyError, TypeError):
        figures = []
    if figures:
        return "expected calibration error on families held out of the fit: " + ", ".join(figures)
    return "no out-of-family figure in it"


def withhold(result: dict, min_confidence: float) -> dict:
    """`result` (`CheckpointAnnotator.annotate`'s) with every column's CTA label and every pair's
    CPA relation whose top-1 confidence is below `min_confidence` replaced by `UNKNOWN`:
    `{"label": "unknown", "confidence": c, "withheld": the label}`, the other candidates after it."""
    columns = []
    for column in result["columns"]:
        column = dict(column)
        for task in ("cta", "cpa"):
            candidates = column[task]
            if candidates and candidates[0]["confidence"] < min_confidence:
                first = candidates[0]
                column[task] = [{"label": UNKNOWN, "confidence": first["confidence"], "withheld": first["label"]},
                                *candidates[1:]]
        columns.append(column)
    return {**result, "min_confidence": min_confidence, "columns": columns}


# --------------------------------------------------------------------------- annotating


@dataclass(frozen=True)
class Failure:
    """A table that was not annotated: its path and why."""

    path: Path
    reason: str

    def __str__(self) -> str:
        return self.reason if self.reason.startswith(str(self.path)) else f"{self.path}: {self.reason}"


def annotate_files(annotator, files: Sequence[Path], top_k: int = 1, batch_size: int = 32,
                   on_failure: Callable[[Failure], None] = lambda failure: None,
                   on_progress: Callable[[int], None] = lambda count: None) -> Iterator[dict]:
    """Each file's result (`CheckpointAnnotator.annotate`), in file order, batch by batch; a file
    that fails is left out and passed to `on_failure`. `on_progress(n)`: n more files done.

    The next batch's files are read and serialized in a background thread while the model reads
    the current one (reading is ~15 % of a small table's time: bench_annotate.py); results,
    failures and progress still come in file order, from the calling thread."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be ≥ 1, got {batch_size}")
    starts = range(0, len(files), batch_size)
    if not starts:
        return
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="aegir-read")
    try:
        pending = pool.submit(_read_batch, annotator, files[0:batch_size])
        for start in starts:
            batch, failures = pending.result()
            after = start + batch_size
            if after < len(files):
                pending = pool.submit(_read_batch, annotator, files[after:after + batch_size])
            for failure in failures:
                on_failure(failure)
                on_progress(1)
            yield from _annotate_batch(annotator, batch, top_k, on_failure)
            on_progress(len(batch))
    finally:  # an early stop (--strict, Ctrl-C) does not wait for a read it will not use
        pool.shutdown(wait=False, cancel_futures=True)


def _read_batch(annotator, paths: Sequence[Path]) -> tuple[list, list[Failure]]:
    """(path, table, example) of each file that reads, and the failures of those that do not."""
    batch, failures = [], []
    for path in paths:
        try:
            table = annotator.read(path)
            batch.append((path, table, annotator.serialize(table, path)))
        except AegirError as exc:
            failures.append(Failure(path, str(exc)))
    return batch, failures


def _annotate_batch(annotator, batch, top_k: int, on_failure) -> list[dict]:
    if not batch:
        return []
    paths, tables, examples = map(list, zip(*batch))
    try:
        return annotator.annotate(tables, examples, paths, top_k)
    except (AegirError, ValueError, RuntimeError) as exc:
        if len(batch) == 1:
            on_failure(Failure(paths[0], f"the model cannot read it: {exc}"))
            return []
    return [result for item in batch for result in _annotate_batch(annotator, [item], top_k, on_failure)]


def annotate_workers():
    """One worker thread per intra-op thread torch has (`aegir.train.step.OneThreadWorkers`), or
    None for one: each thread reads its share of a batch's streams with one intra-op thread,
    as the pipeline scores, faster than torch splitting small matmuls between threads."""
    import torch

    from aegir.train.step import OneThreadWorkers

    threads = torch.get_num_threads()
    return OneThreadWorkers(threads) if threads > 1 else None


# --------------------------------------------------------------------------- the output file


def output_format(path: Path) -> str:
    """"parquet", "csv" or "jsonl" by `path`'s extension; a `DataError` for any other."""
    fmt = OUTPUT_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise DataError(path, f"unknown output format {path.suffix or '(no extension)'!r}: use "
                              f"{', '.join(OUTPUT_FORMATS)}")
    return fmt


def column_rows(result: dict, top_k: int) -> list[dict]:
    """One output row per column of an annotated table (`OUTPUT_COLUMNS`; the top-k lists only
    when `top_k` > 1)."""
    rows = []
    for column in result["columns"]:
        cta, cpa = column["cta"], column["cpa"]
        row = {"table": result["table"], "column_index": column["index"], "column_name": column["name"],
               "cta_label": cta[0]["label"], "cta_confidence": cta[0]["confidence"],
               "cpa_label": cpa[0]["label"] if cpa else None, "cpa_confidence": cpa[0]["confidence"] if cpa else None}
        if top_k > 1:  # the model's candidates, a withheld label among them
            row["cta_top_k"], row["cpa_top_k"] = _candidates(cta), _candidates(cpa)
        row["checkpoint"], row["fingerprint"] = result["checkpoint"], result["fingerprint"]
        rows.append(row)
    return rows


def _candidates(labels: list[dict] | None) -> list[dict] | None:
    if labels is None:
        return None
    return [{"label": a.get("withheld", a["label"]), "confidence": a["confidence"]} for a in labels]


def rows_bytes(rows: list[dict], fmt: str, top_k: int) -> bytes:
    """The output file's content: `rows` as Parquet, CSV or JSON lines."""
    columns = [c for c in OUTPUT_COLUMNS if top_k > 1 or not c.endswith("_top_k")]
    if fmt == "jsonl":
        return "".join(json.dumps({c: row[c] for c in columns}, ensure_ascii=False) + "\n" for row in rows).encode()
    if fmt == "csv":
        text = io.StringIO()
        writer = csv.writer(text, lineterminator="\n")
        writer.writerow(columns)
        for row in rows:
            writer.writerow(["" if row[c] is None else json.dumps(row[c], ensure_ascii=False)
                             if c.endswith("_top_k") else row[c] for c in columns])
        return text.getvalue().encode()
    import pyarrow as pa
    import pyarrow.parquet as pq

    label = pa.list_(pa.struct([("label", pa.string()), ("confidence", pa.float64())]))
    types = {"column_index": pa.int32(), "cta_confidence": pa.float64(), "cpa_confidence": pa.float64(),
             "cta_top_k": label, "cpa_top_k": label}
    schema = pa.schema([(c, types.get(c, pa.string())) for c in columns])
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist([{c: row[c] for c in columns} for row in rows], schema=schema), buffer)
    return buffer.getvalue()


def write_rows(path: Path, rows: list[dict], top_k: int) -> None:
    """`rows` written to `path` atomically, in the format its extension names."""
    atomic.write_bytes(path, rows_bytes(rows, output_format(path), top_k))

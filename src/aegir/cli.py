"""The `aegir` command: annotate a table, evaluate a checkpoint, inspect the pipeline.

    aegir annotate my_table.csv                  # CTA type + CPA relation of every column
    aegir annotate t.parquet --json --top-k 3
    aegir annotate t.csv --min-confidence 0.8      # `unknown` where the confidence is below 0.8
    aegir annotate tables/ more/*.csv.gz --out labels.parquet   # many tables, one row per column
    aegir evaluate --checkpoint models/phase1/primary --data data/prepared
    aegir evaluate --checkpoint models/phase1/primary --data /data/sotab_v2 --out eval.json
    aegir real-dev real_dev/                     # the real split as a SOTAB V2 directory
    aegir params                                 # validate params.yaml
    aegir stages                                 # the DAG as DVC resolves it
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from aegir.errors import AegirError

DEFAULT_CHECKPOINT = "models/phase1/primary"  # evaluate's default; annotate's: aegir.annotate.default_checkpoint


def _fail(message: str) -> None:
    click.echo(f"aegir: error: {message}", err=True)
    sys.exit(2)


def _probability(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    """--min-confidence: a number in [0, 1] (a clear usage error, exit status 2, otherwise)."""
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a number: give a confidence between 0 and 1, e.g. 0.8") from None
    if not 0.0 <= number <= 1.0:  # (NaN fails this too)
        raise click.BadParameter(f"{value} is not between 0 and 1: give a confidence, e.g. 0.8 (not a percentage)")
    return number


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="aegir")
def main() -> None:
    """Aegir annotates table columns: a schema.org type per column (CTA) and the relation of
    the subject column to each other column (CPA), with SOTAB V2 labels.

    Train with `dvc repro` (or `snakemake --cores all phase4`), then annotate your own tables.
    """


@main.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--checkpoint", "-c", default=None, type=click.Path(path_type=Path),
              help="checkpoint directory (model.safetensors + config.json): a Phase 1 model, models/phase3 (the "
                   "orchestrator with its specialists), models/phase3/control or models/phase4 (the swarm). "
                   "Default: the one the pipeline's report found best on `real` (results/report/best.json), "
                   f"else {DEFAULT_CHECKPOINT}")
@click.option("--out", "-o", type=click.Path(path_type=Path),
              help="write one row per column to this file instead of printing: .parquet, .csv or .jsonl")
@click.option("--json", "as_json", is_flag=True, help="print machine-readable JSON")
@click.option("--top-k", "-k", default=1, show_default=True, type=click.IntRange(1, 20),
              help="labels shown per column, best first")
@click.option("--batch-size", default=32, show_default=True, type=click.IntRange(1, 4096),
              help="tables read and annotated together")
@click.option("--min-confidence", "min_confidence", default=None, metavar="P", callback=_probability,
              help="give a column's type or a pair's relation as `unknown` when its top-1 (calibrated) confidence "
                   "is below P, 0 ≤ P ≤ 1; the confidence is still shown. results/calibrate/calibration.json "
                   "lists, per checkpoint and P, the share of real-table columns kept and the accuracy on them")
@click.option("--calibration", type=click.Path(path_type=Path), default=None,
              help="the calibrate stage's file of fitted maps, applied to every confidence (the labels do not "
                   "change); the checkpoint's entry is found by its fingerprint. Default: "
                   "results/calibrate/calibration.json when it is there")
@click.option("--no-calibration", is_flag=True, help="give the model's own confidences, unmapped")
@click.option("--strict", is_flag=True, help="stop at the first table that fails (default: report it, go on)")
@click.option("--quiet", "-q", is_flag=True, help="no progress bar (there is none when stderr is not a terminal)")
def annotate(paths: tuple[str, ...], checkpoint: Path | None, out: Path | None, as_json: bool, top_k: int,
             batch_size: int, min_confidence: float | None, calibration: Path | None, no_calibration: bool,
             strict: bool, quiet: bool) -> None:
    """Annotate tables with the trained model. Each PATH is a table file (CSV/TSV of any
    delimiter, also .gz or .zst; Parquet; JSON lines; SOTAB .json.gz), a directory (its table
    files, recursively) or a glob.

    Column 0 is taken as each table's subject: every other column gets the CPA relation of
    column 0 to it. With an orchestrator checkpoint (models/phase3) it also says which frozen
    specialists the router activated for the table and the critical steps that took; with the
    swarm (models/phase4), the sub-agents it spawned (how many, which checkpoint, on which
    columns), whether deep search ran, and the critical and total steps.

    Confidences are calibrated: the pipeline's calibrate stage fits, per checkpoint and task, a
    beta map of the confidence c, σ(a·ln c − d·ln(1 − c) + b), on the real split's tables, and
    every confidence is mapped by it (the labels unchanged; --no-calibration gives the model's
    own). On real-table families held out of the fit the mapped confidences are off by a few
    points of expected calibration error (the first lines of the output say how many;
    docs/annotate.md). With
    --min-confidence P a label whose confidence is below P is given as `unknown` (text: `unknown
    (telephone 0.41 < 0.5)`; JSON: its "withheld" label; --out: the cta_label/cpa_label
    `unknown`): pick P from the coverage curve in calibration.json (share of real-table columns
    kept and accuracy on them, out of family) or the report's calibration table.

    The model is loaded once; a table that cannot be read is reported with its path and reason
    and skipped (--strict: the run stops). Exit status 0 when every table was annotated, 1 when
    any failed, 2 for a bad checkpoint or option. --out writes its file only when the run
    completes: never half-written.
    """
    from aegir.annotate import (
        Failure,
        annotate_files,
        annotate_workers,
        checkpoint_calibration,
        column_rows,
        default_checkpoint,
        find_tables,
        output_format,
        withhold,
        write_rows,
    )
    from aegir.inference import CheckpointAnnotator, format_annotations
    from aegir.progress import progress
    from aegir.train.memory import retain_freed_memory

    try:
        if out is not None:
            output_format(out)
        if checkpoint is None:
            checkpoint, why = default_checkpoint()
            click.echo(f"aegir: {why}", err=True)
        files, problems = find_tables(paths)
        retain_freed_memory()  # batch after batch reuses its buffers (aegir.train.memory)
        annotator = CheckpointAnnotator(checkpoint, annotate_workers())
        if no_calibration:
            confidences = "the model's own, uncalibrated (--no-calibration)"
        else:
            annotator.calibration, confidences = checkpoint_calibration(annotator.fingerprint, calibration)
    except AegirError as exc:
        _fail(str(exc))
    failures = [Failure(Path(p.path), p.problem) for p in problems]
    one_table = len(paths) == 1 and len(files) == 1 and Path(paths[0]) == files[0]  # `aegir annotate t.csv`
    bar = progress(total=len(files), desc="annotate", unit="table", disable=quiet or not _is_terminal(sys.stderr))

    def report(failure: Failure) -> None:
        failures.append(failure)
        bar.write(f"aegir: error: {failure}", file=sys.stderr)
        if strict:
            raise _Stop

    for failure in failures:
        click.echo(f"aegir: error: {failure}", err=True)
    if failures and strict:
        sys.exit(1)
    results: list[dict] = []
    tables = 0
    if not as_json and out is None:
        click.echo(f"checkpoint: {annotator.checkpoint} (fingerprint {annotator.fingerprint[:16]})")
        click.echo(f"confidences: {confidences}")
    try:
        for result in annotate_files(annotator, files, top_k, batch_size, report, bar.update):
            tables += 1
            if min_confidence is not None:
                result = withhold(result, min_confidence)
            if out is not None:
                results.extend(column_rows(result, top_k))
            elif as_json:
                results.append(result)
            else:
                bar.clear()
                click.echo("\n" + format_annotations(result))
                bar.refresh()
        bar.close()
        if out is not None:
            write_rows(out, results, top_k)
            click.echo(f"wrote {out}: {len(results)} columns of {tables} tables ({annotator.checkpoint}, "
                       f"fingerprint {annotator.fingerprint[:16]}); confidences: {confidences}", err=True)
        elif as_json and not (one_table and failures):  # one table: its object (none when it failed)
            click.echo(json.dumps(results[0] if one_table else results, indent=2, ensure_ascii=False))
    except _Stop:
        bar.close()
        click.echo("aegir: stopped at the first failure (--strict)" + (f"; {out} not written" if out else ""),
                   err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        bar.close()
        click.echo("aegir: interrupted" + (f"; {out} not written" if out else ""), err=True)
        sys.exit(130)
    if failures:
        click.echo(f"aegir: {len(failures)} of {len(files) + len(problems)} table(s) failed", err=True)
        sys.exit(1)


class _Stop(Exception):
    """--strict: the first failure stops the run."""


def _is_terminal(stream) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


@main.command()
@click.option("--checkpoint", "-c", default=DEFAULT_CHECKPOINT, show_default=True,
              type=click.Path(path_type=Path), help="checkpoint directory")
@click.option("--data", "-d", required=True, type=click.Path(path_type=Path),
              help="prepared data (data/prepared) or a SOTAB V2 directory (Train/ Validation/ Test/ + CSVs)")
@click.option("--split", "splits", multiple=True, help="splits to score (default: all available)")
@click.option("--out", "-o", type=click.Path(path_type=Path), help="write the scores as JSON here")
@click.option("--by-domain", is_flag=True,
              help="also score each table domain's tables alone (a row per split and domain; `domains` in the JSON)")
def evaluate(checkpoint: Path, data: Path, splits: tuple[str, ...], out: Path | None, by_domain: bool) -> None:
    """Score a checkpoint: CTA and CPA micro/macro F1 per split (and per domain with --by-domain)."""
    from aegir import atomic
    from aegir.inference import evaluate_checkpoint, format_scores
    from aegir.train.memory import retain_freed_memory

    retain_freed_memory()  # batch after batch reuses its buffers (aegir.train.memory)
    try:
        scores = evaluate_checkpoint(checkpoint, data, splits, by_domain)
    except AegirError as exc:
        _fail(str(exc))
    click.echo(format_scores(scores))
    if out:
        atomic.write_json(out, scores)
        click.echo(f"wrote {out}")


@main.command("real-dev")
@click.argument("out_dir", type=click.Path(path_type=Path))
def real_dev(out_dir: Path) -> None:
    """Write the `real` development split (real tables from pip-package data, labelled by the
    reviewed mapping in aegir/data/real/) as a SOTAB V2 directory OUT_DIR: its test split.

    Score a checkpoint on it with `aegir evaluate --data OUT_DIR`. OUT_DIR is replaced as a
    whole. `prepare` writes the same tables as data/prepared/real.parquet.
    """
    from aegir.data.real import build_real_tables, summary, write_sotab_dir

    try:
        tables = build_real_tables()
        write_sotab_dir(tables, out_dir)
    except AegirError as exc:
        _fail(str(exc))
    counts = summary(tables)
    click.echo(f"wrote {out_dir}: {counts['tables']} tables, {counts['cta_columns']} CTA columns over "
               f"{counts['cta_labels']} labels, {counts['cpa_pairs']} CPA pairs over {counts['cpa_labels']} labels")


@main.command()
@click.option("--params", "params_path", default="params.yaml", show_default=True, type=click.Path(path_type=Path))
def params(params_path: Path) -> None:
    """Validate params.yaml (unknown keys, types, ranges; every preset builds a model config) and
    print it resolved."""
    from dataclasses import asdict, is_dataclass

    from aegir.config import load_params
    from aegir.train.setup import model_config

    try:
        loaded = load_params(params_path)
    except AegirError as exc:
        _fail(str(exc))
    for name in loaded.presets:  # what phase1 builds from each: sizes that fit, e.g. d_model a multiple of head_size
        try:
            model_config(loaded, name)
        except AegirError as exc:
            message = str(exc)
            _fail(f"{params_path}: {message}" if message.startswith(f"presets.{name}")
                  else f"{params_path}: presets.{name}: {message}")
    resolved = {name: asdict(value) if is_dataclass(value) else
                {k: asdict(v) if is_dataclass(v) else v for k, v in value.items()}
                for name, value in loaded.sections.items()}
    click.echo(json.dumps(resolved, indent=2, default=list))


@main.command()
@click.option("--root", default=".", show_default=True, type=click.Path(path_type=Path))
def stages(root: Path) -> None:
    """List the pipeline's stages as DVC resolves dvc.yaml (what Snakemake runs too), with each
    stage's resume state and any source file it runs that its deps miss."""
    from aegir.pipeline import dvc_stages, uncovered_deps

    for spec in dvc_stages(root):
        click.echo(f"{spec.name}\n  cmd:  {spec.cmd}\n  deps: {', '.join(spec.deps)}\n"
                   f"  params: {', '.join(spec.params)}\n  outs: {', '.join(spec.products)}")
        if spec.resume_state:
            click.echo(f"  resume state: {', '.join(spec.resume_state)}")
        missing = uncovered_deps(spec, root)
        if missing:
            click.echo(f"  MISSING deps (imported, not declared): {', '.join(missing)}")


if __name__ == "__main__":
    main()

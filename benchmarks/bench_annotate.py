"""Benchmark: `aegir annotate` on a folder of tables, in one process, beside one process per table.

    python benchmarks/bench_annotate.py [--params params.yaml] [--tables 300] [--models models]
                                        [--kinds phase1 phase3 phase4] [--per-process 3]
                                        [--long-rows 500000 5000000] [--json out.json]

Writes `--tables` tables of the synthetic `test` split (`synthetic` params: 3–9 columns, 5–25
rows) as CSV files in a temporary folder, then for each checkpoint kind annotates the folder the
way `aegir annotate FOLDER` does (`aegir.annotate.annotate_files` in batches of `--batch-size`,
worker threads as the CLI starts them; the model loaded once, before the clock) and prints
tables/s; for Phase 1 it also runs `aegir annotate TABLE` in a fresh process per table
(`--per-process` tables, start-up and model loading included) and prints the seconds each took,
then on CSVs of `--long-rows` rows (~33 bytes each), one process each: seconds and peak memory
against the file's size.

Checkpoints: `--models`' phase1/primary, phase3 and phase4 where they exist; else untrained ones
built from params.yaml (the primary agent's preset, Phase 3's specialists and activation
threshold, Phase 4's sub-agent options), which the output says: throughput does not depend on the
weights, but an untrained swarm's policy spawns what its initial weights pick (the mean number
of sub-agents per table is printed).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import torch
from bench_phase1 import machine_line, vector_isa

from aegir.annotate import annotate_files, annotate_workers
from aegir.config import Params, load_params
from aegir.data.dataset import examples_from_tables
from aegir.data.synth.generator import generate_table
from aegir.data.table import Table
from aegir.eval.joint import CONFIG_KEY as JOINT_CONFIG_KEY
from aegir.eval.joint import label_repeats
from aegir.inference import CheckpointAnnotator
from aegir.labels import cta_vocab, label_counts
from aegir.model.checkpoint import save_checkpoint
from aegir.model.network import AegirModel
from aegir.orchestrator.checkpoint import save_orchestrator
from aegir.orchestrator.model import build_orchestrator
from aegir.swarm.model import Swarm, save_swarm
from aegir.swarm.policy import SpawnPolicy, spawn_options
from aegir.swarm.spawn import SwarmMerge, family_of_labels
from aegir.train.setup import model_config

KINDS = {"phase1": "phase1/primary", "phase3": "phase3", "phase4": "phase4"}


def write_tables(tables: list[Table], folder: Path) -> list[Path]:
    """The tables as CSV files (a header row of column names)."""
    folder.mkdir(parents=True)
    paths = []
    for table in tables:
        path = folder / f"{table.table_id}.csv"
        with path.open("w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(table.column_names or [f"column {c}" for c in range(table.num_columns)])
            writer.writerows(["" if cell is None else cell for cell in row] for row in zip(*table.columns))
        paths.append(path)
    return paths


def untrained_checkpoints(params: Params, root: Path, tables: list[Table]) -> dict[str, Path]:
    """Untrained checkpoints of the configured sizes: the primary, Phase 3's orchestrator over its
    specialists, Phase 4's swarm; their config.json records the params' `prepare` and `reading`,
    and the label repeats of `tables` for the joint decoding (a trained one: its training tables')."""
    labelled = examples_from_tables(tables, params.prepare.byte_budget, params.prepare.max_rows, params.prepare.seed,
                                    root)
    repeats = label_repeats(((e.cta_labels, e.cpa_labels) for e in labelled), label_counts())
    record = {"params": {"prepare": asdict(params.prepare), "reading": asdict(params.reading)},
              JOINT_CONFIG_KEY: repeats.to_json()}

    def agent(name: str) -> AegirModel:
        spec = params.agents[name]
        torch.manual_seed(spec.seed)
        return AegirModel(model_config(params, spec.preset))

    primary = agent("primary")
    specialists = {name: agent(name) for name in params.phase3.specialists}
    dirs = {name: save_checkpoint(root / "phase1" / name, model, record) for name, model in specialists.items()}
    out = {"phase1": save_checkpoint(root / "phase1" / "primary-untrained", primary, record)}
    orch = build_orchestrator(primary, specialists, params.phase3.activation_threshold, params.phase3.router_init_rate)
    out["phase3"] = save_orchestrator(root / "phase3", orch, dirs, record)
    subagents = {name: specialists[name] for name in params.phase4.specialists}
    swarm = Swarm(orch.eval(), subagents, SpawnPolicy(primary.config.d_model, spawn_options(params.phase4.max_subagents),
                                                      len(subagents)),
                  SwarmMerge(len(subagents), family_of_labels(cta_vocab())[0]))
    out["phase4"] = save_swarm(root / "phase4", swarm, out["phase3"], {n: dirs[n] for n in subagents}, record)
    return out


def folder_rate(checkpoint: Path, paths: list[Path], batch_size: int) -> dict:
    """Tables/s of annotating `paths` in one process, the model loaded (and warmed) first."""
    annotator = CheckpointAnnotator(checkpoint, annotate_workers())
    list(annotate_files(annotator, paths[:batch_size], batch_size=batch_size))  # kernels built, buffers grown
    failures = []
    start = time.perf_counter()
    results = list(annotate_files(annotator, paths, batch_size=batch_size, on_failure=failures.append))
    seconds = time.perf_counter() - start
    if failures:
        raise SystemExit(f"bench_annotate: {len(failures)} tables failed, e.g. {failures[0]}")
    columns = [len(r["columns"]) for r in results]
    figures = {"tables": len(results), "seconds": round(seconds, 3), "tables_per_s": round(len(results) / seconds, 1),
               "max_columns": max(columns), "mean_columns": round(statistics.mean(columns), 2)}
    if "swarm" in results[0]:
        figures["mean_subagents"] = round(statistics.mean(r["swarm"]["subagents"] for r in results), 2)
    return figures


def per_process_seconds(checkpoint: Path, paths: list[Path]) -> list[float]:
    """Wall seconds of `aegir annotate TABLE --checkpoint …` in a fresh process, per table."""
    seconds = []
    for path in paths:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "aegir.cli", "annotate", str(path), "--checkpoint", str(checkpoint)],
                       check=True, capture_output=True)
        seconds.append(time.perf_counter() - start)
    return seconds


def peak_rss_mb(proc: subprocess.Popen) -> int:
    """The peak resident memory (MB) of the running process `proc`: its VmHWM, read every 10 ms
    until it exits."""
    peak_kb = 0
    while proc.poll() is None:
        try:
            with open(f"/proc/{proc.pid}/status") as status:
                peak_kb = max([peak_kb] + [int(line.split()[1]) for line in status if line.startswith("VmHWM:")])
        except (OSError, ValueError):
            pass
        time.sleep(0.01)
    return peak_kb // 1024


def peak_run(command: list[str]) -> tuple[float, int]:
    """(wall seconds, peak resident MB) of `command` (`peak_rss_mb`)."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = peak_rss_mb(proc)
    seconds = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"bench_annotate: {' '.join(command)} failed: {proc.stderr.read().decode()[-2000:]}")
    return seconds, peak


def write_long_csv(path: Path, rows: int) -> float:
    """A CSV of `rows` short rows (hotel, phone, postal code: ~33 bytes a row); its size in MB."""
    with path.open("w") as f:
        f.write("hotel,phone,zip\n")
        for start in range(0, rows, 100_000):
            f.write("".join(f"Hotel {i},+49 30 {i:07d},{i % 100_000:05d}\n" for i in range(start, min(rows, start + 100_000))))
    return path.stat().st_size / 1e6


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--tables", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--models", type=Path, default=Path("models"),
                        help="the pipeline's checkpoints; a kind missing there is built untrained")
    parser.add_argument("--kinds", nargs="+", choices=list(KINDS), default=list(KINDS))
    parser.add_argument("--per-process", type=int, default=3, help="tables annotated one process each (0: none)")
    parser.add_argument("--long-rows", type=int, nargs="*", default=[500_000, 5_000_000],
                        help="also annotate one CSV of this many rows in a fresh process (Phase 1): seconds and "
                             "peak memory against the file's size")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    params = load_params(args.params)
    figures: dict = {"cpu": vector_isa(), "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                     "kinds": {}}
    print(machine_line())
    with tempfile.TemporaryDirectory() as tmp:
        tables = [generate_table(params.synthetic, "test", index) for index in range(args.tables)]
        paths = write_tables(tables, Path(tmp) / "tables")
        untrained = None
        for kind in args.kinds:
            checkpoint = args.models / KINDS[kind]
            origin = "trained"
            if not (checkpoint / "config.json").is_file():
                untrained = untrained or untrained_checkpoints(params, Path(tmp) / "models", tables)
                checkpoint, origin = untrained[kind], "untrained, built from params.yaml"
            row = {"checkpoint": str(checkpoint), "origin": origin, **folder_rate(checkpoint, paths, args.batch_size)}
            line = (f"{kind} ({origin}): {row['tables']} tables of ≤ {row['max_columns']} columns "
                    f"(mean {row['mean_columns']}) in {row['seconds']:.2f} s: {row['tables_per_s']:.1f} tables/s")
            if "mean_subagents" in row:
                line += f"; {row['mean_subagents']} sub-agents per table"
            if kind == "phase1" and args.per_process:
                seconds = per_process_seconds(checkpoint, paths[:args.per_process])
                row["per_process_s"] = [round(s, 2) for s in seconds]
                line += (f"; one process per table: {statistics.mean(seconds):.2f} s each "
                         f"({1 / statistics.mean(seconds):.2f} tables/s)")
            print(line, flush=True)
            figures["kinds"][kind] = row
            if kind == "phase1":
                figures["long_csv"] = []
                for rows in args.long_rows:
                    path = Path(tmp) / f"long_{rows}.csv"
                    size = write_long_csv(path, rows)
                    seconds, peak = peak_run([sys.executable, "-m", "aegir.cli", "annotate", str(path),
                                              "--checkpoint", str(checkpoint)])
                    path.unlink()
                    figures["long_csv"].append({"rows": rows, "mb": round(size, 1), "seconds": round(seconds, 2),
                                                "peak_mb": peak})
                    print(f"phase1: one CSV of {rows:,} rows ({size:.1f} MB) in a fresh process: {seconds:.2f} s, "
                          f"peak memory {peak} MB", flush=True)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return figures


if __name__ == "__main__":
    main()

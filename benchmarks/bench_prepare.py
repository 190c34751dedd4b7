"""Benchmark: `prepare` throughput on the default params (embedded benchmark), in one process and
in worker processes, in one run.

    python benchmarks/bench_prepare.py [--params params.yaml] [--processes N]

Times `aegir.data.prepare.prepare_splits` (every split generated and serialized, as the stage
does before writing) with one process, then with `--processes` (default: what the stage uses, one
per core, at most 8), then the Parquet writing; prints tables/s, MB/s of prepared bytes and the
ratio of the two, with the machine it ran on. The two runs give the same bytes (checked here).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from bench_phase1 import machine_line

from aegir.config import load_params
from aegir.data.prepare import prepare_splits, write_parquet


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--processes", type=int, default=min(8, os.cpu_count() or 1))
    args = parser.parse_args()
    params = load_params(args.params)

    def timed(processes: int):
        start = time.perf_counter()
        result = prepare_splits(params, lambda reason, error: None, processes=processes)
        return result, time.perf_counter() - start

    (tables, arrow), alone = timed(1)
    (_, arrow_parallel), parallel = timed(args.processes)
    if any(not arrow[split].equals(arrow_parallel[split]) for split in arrow):
        raise SystemExit("bench_prepare: the runs prepared different bytes")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for split, table in arrow.items():
            write_parquet(table, Path(tmp) / f"{split}.parquet")
    write = time.perf_counter() - start

    n_tables = sum(len(t) for t in tables.values())
    mb = sum(sum(len(s) for s in a.column("stream").to_pylist()) for a in arrow.values()) / 1e6
    print(machine_line())
    print(f"tables: {n_tables}, prepared bytes: {mb:.2f} MB (byte_budget {params.prepare.byte_budget})")
    for name, seconds in (("1 process", alone), (f"{args.processes} processes", parallel)):
        print(f"generate + serialize, {name:>11}: {seconds:7.2f} s  {n_tables / seconds:8.1f} tables/s  "
              f"{mb / seconds:6.3f} MB/s")
    print(f"write Parquet: {write:.2f} s")
    print(f"{args.processes} processes / 1 process: {alone / parallel:.2f}x")


if __name__ == "__main__":
    main()

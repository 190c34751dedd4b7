"""Benchmark: `prepare` throughput on the default params (embedded benchmark).

    python benchmarks/bench_prepare.py [--params params.yaml]

Prints tables/s and MB/s of prepared bytes for generation, serialization and the whole stage
(generation + serialization + Parquet writing), with the machine it ran on.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

from aegir.config import load_params
from aegir.stages.prepare import load_tables, tables_to_arrow, write_parquet


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml")
    args = parser.parse_args()
    params = load_params(args.params)

    t0 = time.perf_counter()
    per_split = load_tables(params, on_skip=lambda reason, error: None)
    t1 = time.perf_counter()
    arrow = {split: tables_to_arrow(tables, split, params.prepare) for split, tables in per_split.items()}
    t2 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for split, table in arrow.items():
            write_parquet(table, Path(tmp) / f"{split}.parquet")
    t3 = time.perf_counter()

    n_tables = sum(len(t) for t in per_split.values())
    n_bytes = sum(sum(len(s) for s in a.column("stream").to_pylist()) for a in arrow.values())
    mb = n_bytes / 1e6
    print(f"machine: {platform.machine()} {platform.processor() or ''} {os.cpu_count()} cores, "
          f"Python {platform.python_version()}")
    print(f"tables: {n_tables}, prepared bytes: {mb:.2f} MB (byte_budget {params.prepare.byte_budget})")
    print(f"generate:  {t1 - t0:7.2f} s  {n_tables / (t1 - t0):8.1f} tables/s")
    print(f"serialize: {t2 - t1:7.2f} s  {n_tables / (t2 - t1):8.1f} tables/s  {mb / (t2 - t1):6.2f} MB/s")
    print(f"write:     {t3 - t2:7.2f} s")
    total = t3 - t0
    print(f"prepare total: {total:.2f} s  {n_tables / total:.1f} tables/s  {mb / total:.3f} MB/s")


if __name__ == "__main__":
    main()

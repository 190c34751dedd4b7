"""Benchmark: how many tables per scoring call read fastest (`phase1.eval_batch_size`,
`phase3.eval_batch_size`), in one run.

    python benchmarks/bench_scoring.py [--checkpoint models/phase1/primary] [--data data/prepared]
                                       [--split corner_cases] [--tables 192] [--sizes 32 16 8 4]
                                       [--threads 2] [--repeats 3] [--json out.json]

Reads the first `--tables` tables of `--split` with a trained checkpoint (`aegir.eval.predict`:
batches sorted by length, in `--threads` worker threads as the stages score, each thread one
intra-op thread), once per batch size, the sizes alternating for `--repeats` rounds so that load
from other processes falls on all of them alike. Prints per size the median seconds, tables per
second, the ratio to the first size, and the largest difference of any label probability from
the first size's (a different batch changes float rounding, nothing else).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from bench_phase1 import machine_line

from aegir import atomic
from aegir.data.dataset import load_examples
from aegir.errors import AegirError
from aegir.eval.grouped import ALL_LABELS
from aegir.eval.predict import predict
from aegir.model.checkpoint import load_checkpoint
from aegir.train.step import OneThreadWorkers


def max_difference(a, b) -> float:
    return max(max(float(np.abs(x.cta_probs - y.cta_probs).max()), float(np.abs(x.cpa_probs - y.cpa_probs).max()))
               for x, y in zip(a, b))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path, default=Path("models/phase1/primary"))
    parser.add_argument("--data", type=Path, default=Path("data/prepared"))
    parser.add_argument("--split", default="corner_cases")
    parser.add_argument("--tables", type=int, default=192)
    parser.add_argument("--sizes", type=int, nargs="+", default=[32, 16, 8, 4])
    parser.add_argument("--threads", type=int, default=2, help="worker threads (1: the caller's thread)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    if not (args.checkpoint / "model.safetensors").exists():
        parser.exit(2, f"bench_scoring: error: {args.checkpoint}: no trained checkpoint (run `dvc repro` first)\n")
    if args.tables < 1 or args.repeats < 1 or args.threads < 1 or min(args.sizes) < 1:
        parser.exit(2, "bench_scoring: error: --tables, --repeats, --threads and --sizes must be ≥ 1\n")
    torch.set_num_threads(1)
    try:
        model, _ = load_checkpoint(args.checkpoint)
        examples = load_examples(args.data, args.split)[:args.tables]
    except AegirError as exc:
        parser.exit(2, f"bench_scoring: error: {exc}\n")
    model.eval()
    workers = OneThreadWorkers(args.threads) if args.threads > 1 else None
    seconds: dict[int, list[float]] = {size: [] for size in args.sizes}
    outputs = {}
    predict(model, examples[:8], 8, top_k=ALL_LABELS, workers=workers)  # warm-up
    for _ in range(args.repeats):
        for size in args.sizes:
            start = time.perf_counter()
            outputs[size] = predict(model, examples, size, top_k=ALL_LABELS, workers=workers)
            seconds[size].append(time.perf_counter() - start)
    if workers is not None:
        workers.close()
    first = args.sizes[0]
    rows = []
    print(machine_line())
    print(f"{args.threads} worker thread(s); {len(examples)} tables of {args.split}, {args.repeats} rounds")
    print(f"{'batch':>6} {'median s':>9} {'tables/s':>9} {'vs ' + str(first):>8} {'max |Δp|':>10}")
    for size in args.sizes:
        median = statistics.median(seconds[size])
        row = {"batch_size": size, "median_seconds": round(median, 3), "tables_per_second": round(len(examples) / median, 1),
               "speedup": round(statistics.median(seconds[first]) / median, 3),
               "max_probability_difference": max_difference(outputs[first], outputs[size])}
        rows.append(row)
        print(f"{size:>6} {median:>9.2f} {row['tables_per_second']:>9.1f} {row['speedup']:>7.2f}× "
              f"{row['max_probability_difference']:>10.2g}")
    if args.json:
        atomic.write_json(args.json, {"split": args.split, "tables": len(examples), "threads": args.threads, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())

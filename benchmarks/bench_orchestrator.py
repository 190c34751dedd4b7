"""Benchmark: the Phase 3 orchestrator's forward with k of n specialists active, batched vs one
(table, specialist) read at a time.

    python benchmarks/bench_orchestrator.py [--specialists 3] [--batch-size 16] [--repeats 3]
        [--data data/prepared] [--params params.yaml] [--primary cpu] [--specialist-preset small]

Models are the named presets of params.yaml with random weights (speed does not depend on what they learned);
tables are the longest of the prepared `valid` split when there is one, else the embedded
generator's. For every k = 0 … n, every table activates the first k specialists, and the same
routed forward (reads → alignment → fusion → the primary's rest) runs two ways in one process,
alternately: **batched** (each specialist reads all its tables in one call, as Phase 3 does) and
**one at a time** (`fused_state_one_at_a_time`: each (table, specialist) pair read alone). Best
of `--repeats` each; the ratio is the speed-up of batching. Critical and total layer-steps per
table are printed beside them (they do not depend on how the reads are scheduled).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from bench_phase1 import machine_line

from aegir.config import SyntheticConfig, load_params
from aegir.data.dataset import collate, examples_from_tables, load_examples
from aegir.data.synth import generate_split
from aegir.model.network import AegirModel
from aegir.orchestrator.critical import orchestrator_steps
from aegir.orchestrator.model import build_orchestrator, fused_state_one_at_a_time
from aegir.train.setup import model_config


def tables(data: Path, batch_size: int):
    if (data / "valid.parquet").is_file():
        examples = load_examples(data, "valid")
    else:
        cfg = SyntheticConfig(valid_tables=max(64, batch_size))
        examples = examples_from_tables(generate_split(cfg, "valid"), 1024, 20, 0, Path("synthetic"))
    return collate(sorted(examples, key=lambda e: -len(e.byte_ids))[:batch_size])


def best_of(repeats: int, fn) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--specialists", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data", type=Path, default=Path("data/prepared"))
    parser.add_argument("--params", default="params.yaml", help="where the model presets are")
    parser.add_argument("--primary", default="cpu")
    parser.add_argument("--specialist-preset", default="small")
    args = parser.parse_args()

    params = load_params(args.params)
    torch.manual_seed(0)
    primary = AegirModel(model_config(params, args.primary))
    specialists = {f"s{i}": AegirModel(model_config(params, args.specialist_preset)) for i in range(args.specialists)}
    orch = build_orchestrator(primary, specialists).eval()
    with torch.no_grad():
        orch.fusion.wkv_gate.fill_(0.5)  # open gates: the fused state is really used
    batch = tables(args.data, args.batch_size)
    B, n = batch.batch_size, args.specialists
    encoded = orch.encode(batch)
    print(machine_line())
    print(f"primary {args.primary}, {n} × {args.specialist_preset} specialists, "
          f"{B} tables of ≤ {batch.byte_ids.shape[1]} bytes")
    print(f"{'k':>2} {'batched ms':>11} {'one-at-a-time ms':>17} {'speed-up':>9} {'critical':>9} {'total':>6}")
    configs = [s.config for s in orch.specialists]
    with torch.no_grad():
        for k in range(n + 1):
            mask = torch.zeros(B, n, dtype=torch.bool)
            mask[:, :k] = True

            def batched(mask=mask):
                state = orch.fuse(orch.read_specialists(batch, mask), mask)
                orch.primary.forward_from_encoded(batch, encoded, state)

            def one_at_a_time(mask=mask):
                state = fused_state_one_at_a_time(orch, batch, mask)
                orch.primary.forward_from_encoded(batch, encoded, state)

            batched()
            one_at_a_time()  # warm-up
            fast, slow = best_of(args.repeats, batched), best_of(args.repeats, one_at_a_time)
            critical, total = orchestrator_steps(primary.config, configs, [True] * k + [False] * (n - k),
                                                 orch.stream_seam)
            print(f"{k:>2} {1000 * fast:>11.1f} {1000 * slow:>17.1f} {slow / fast:>8.2f}× "
                  f"{critical:>9} {total:>6}")


if __name__ == "__main__":
    main()

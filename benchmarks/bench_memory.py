"""Benchmark: Phase 1 training steps with glibc's malloc defaults and with freed memory kept
(`aegir.train.memory.retain_freed_memory`, what the training and scoring stages call).

    python benchmarks/bench_memory.py [--preset cpu] [--steps 8] [--rounds 2] [--batch-size 16]
                                      [--data data/prepared]

The setting is per process, so each measurement is a fresh process (`--worker MODE`), the two
modes alternating for `--rounds` rounds: each takes the preset's Phase 1 step as the stage takes
it (`ShardedStep` over torch's intra-op threads, gradient clipping, fused AdamW) on the
`--batch-size` longest prepared training tables (random bytes without prepared data), 2 warm-up
steps, then `--steps` timed ones. Printed per process: minor page faults per step, system and
user CPU seconds per step, median wall ms per step; then the medians per mode. The page faults
and the system time are what the setting changes; the wall time of separate processes on a
shared machine varies by more than that (docs/benchmarks.md, "Freed memory kept").
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

MODES = ("default", "retained")


def worker(mode: str, preset: str, steps: int, batch_size: int, data: Path) -> dict:
    if mode == "retained":
        from aegir.train.memory import retain_freed_memory

        if not retain_freed_memory():
            raise SystemExit("bench_memory: no glibc mallopt here: nothing to compare")
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_phase1 import batch_of

    from aegir.config import load_params
    from aegir.model.network import AegirModel
    from aegir.train.setup import make_optimizer, model_config
    from aegir.train.step import OneThreadWorkers, ShardedStep

    params = load_params(Path(__file__).resolve().parents[1] / "params.yaml")
    torch.manual_seed(0)
    model = AegirModel(model_config(params, preset))
    optimizer = make_optimizer(model, params.phase1)
    batch = batch_of(data, batch_size, 1025)
    workers = OneThreadWorkers(torch.get_num_threads())
    sharded = ShardedStep(model, workers, contextlib.nullcontext, label_smoothing=params.phase1.label_smoothing)

    def step() -> None:
        sharded(batch)
        torch.nn.utils.clip_grad_norm_(model.parameters(), params.phase1.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(2):
        step()
    walls = []
    before = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(steps):
        start = time.perf_counter()
        step()
        walls.append(time.perf_counter() - start)
    after = resource.getrusage(resource.RUSAGE_SELF)
    workers.close()
    return {"mode": mode, "faults": (after.ru_minflt - before.ru_minflt) / steps,
            "sys_s": (after.ru_stime - before.ru_stime) / steps, "user_s": (after.ru_utime - before.ru_utime) / steps,
            "wall_ms": 1000 * statistics.median(walls)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--steps", type=int, default=8, help="timed steps per process")
    parser.add_argument("--rounds", type=int, default=2, help="processes per mode, alternating")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--data", default="data/prepared", type=Path)
    parser.add_argument("--worker", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.preset, args.steps, args.batch_size, args.data)))
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_phase1 import machine_line  # here, not above: a worker must set its allocator before torch loads

    print(machine_line())
    rows = []
    for _ in range(args.rounds):
        for mode in MODES:
            proc = subprocess.run([sys.executable, __file__, "--worker", mode, "--preset", args.preset,
                                   "--steps", str(args.steps), "--batch-size", str(args.batch_size),
                                   "--data", str(args.data)], capture_output=True, text=True)
            if proc.returncode != 0:
                raise SystemExit(f"bench_memory: the {mode} process failed:\n{proc.stderr.strip()}")
            row = json.loads(proc.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(f"{mode:>8}: {row['faults']:8.0f} minor faults/step, sys {row['sys_s']:.3f} s/step, "
                  f"user {row['user_s']:.3f} s/step, wall {row['wall_ms']:.0f} ms/step (median)", flush=True)
    for mode in MODES:
        own = [row for row in rows if row["mode"] == mode]
        print(f"median of {mode}: " + ", ".join(
            f"{key} {statistics.median(row[key] for row in own):.3f}" for key in ("faults", "sys_s", "user_s", "wall_ms")))


if __name__ == "__main__":
    main()

"""The swarm's sub-agents batched vs one after another, and critical vs total steps per budget n.

    python benchmarks/bench_swarm.py                       # a fresh `cpu`-preset sub-agent
    python benchmarks/bench_swarm.py --checkpoint models/phase1/primary --tables 16 --repeats 3

Wall clock: for `--tables` tables of the `wide` split's generator (default params), n = 8
sub-agents each (wide search: the subject + one group of columns per sub-agent, each sub-table
at the full byte budget), the sub-tasks are read (a) batched — every sub-task of the tables in
one call of the model — and (b) one sub-task after another, alternating (a) and (b) `--repeats`
times in this one process; the ratio of their medians is the speed-up. Untrained weights
compute exactly what trained ones do, so a checkpoint is optional.

Steps: mean critical and total steps per table (`aegir.swarm.spawn.swarm_steps`, sequential
layer-steps) of the swarm at each n over the same tables, wide search alone and with deep search
(every `*/name`-labelled column re-read — here from the gold labels, as no primary has run).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from bench_phase1 import machine_line

from aegir.config import PrepareConfig, SyntheticConfig
from aegir.data.synth import generate_wide
from aegir.model.checkpoint import load_checkpoint
from aegir.model.network import AegirModel, preset
from aegir.swarm.spawn import (
    label_steps,
    read_subtasks,
    read_subtasks_one_at_a_time,
    subtask_examples,
    swarm_steps,
    wide_subtasks,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default=None, help="a Phase 1 checkpoint (default: a fresh `cpu` preset)")
    parser.add_argument("--tables", type=int, default=16, help="wide tables per measurement")
    parser.add_argument("--subagents", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[0, 32, 8],
                        help="batched variants: sub-tasks per call (0: all of them in one call)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: leave as is)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = load_checkpoint(args.checkpoint)[0] if args.checkpoint else AegirModel(preset("cpu"))
    model.eval()
    tables = generate_wide(SyntheticConfig(wide_tables=args.tables))
    prepare = PrepareConfig(byte_budget=1024, max_rows=20)
    keys = [(t, cols) for t in range(len(tables)) for cols in wide_subtasks(tables[t].num_columns, args.subagents)]
    examples = subtask_examples(tables, keys, prepare, "bench")
    print(machine_line())
    print(f"{len(tables)} wide tables ({min(t.num_columns for t in tables)}–{max(t.num_columns for t in tables)} "
          f"columns), {args.subagents} sub-agents each: {len(examples)} sub-tasks of "
          f"{statistics.mean(len(e.byte_ids) for e in examples):.0f} bytes on average; "
          f"{model.num_parameters():,} parameters, {torch.get_num_threads()} torch threads")

    read_subtasks(model, examples[:4], batch_size=4)  # warm-up
    sizes = [size or len(examples) for size in args.batch_sizes]
    batched: dict[int, list[float]] = {size: [] for size in sizes}
    sequential: list[float] = []
    for _ in range(args.repeats):  # alternate, so every variant sees the same machine load
        for size in sizes:
            start = time.perf_counter()
            read_subtasks(model, examples, batch_size=size)
            batched[size].append(time.perf_counter() - start)
        start = time.perf_counter()
        read_subtasks_one_at_a_time(model, examples)
        sequential.append(time.perf_counter() - start)
    s = statistics.median(sequential)
    print(f"{'one after another':<32} {1000 * s / len(tables):8.1f} ms/table   (runs: "
          + ", ".join(f"{x:.2f}" for x in sequential) + " s)")
    for size in sizes:
        b = statistics.median(batched[size])
        label = f"batched, {size} sub-tasks per call"
        print(f"{label:<32} {1000 * b / len(tables):8.1f} ms/table   (runs: "
              + ", ".join(f"{x:.2f}" for x in batched[size]) + f" s)   speed-up {s / b:.2f}x")

    steps = label_steps(model.config)
    primary = preset("cpu")
    names = [[c for c, label in enumerate(t.cta) if label and label.endswith(("/name", "/description"))]
             for t in tables]
    print(f"\nsteps per table (primary `cpu` preset, sub-agents of {steps} layer-steps, no Phase 3 specialist):")
    print(f"{'n':>3} {'critical (wide)':>16} {'total (wide)':>13} {'critical (+deep)':>17} {'total (+deep)':>14}")
    for n in (0, 1, 2, 4, 8, 16):
        wide = [swarm_steps(primary, (), steps, len(wide_subtasks(t.num_columns, n)), 0) for t in tables]
        deep = [swarm_steps(primary, (), steps, len(wide_subtasks(t.num_columns, n)), len(cols))
                for t, cols in zip(tables, names)]
        mean = lambda xs, i: sum(x[i] for x in xs) / len(xs)  # noqa: E731
        print(f"{n:>3} {mean(wide, 0):>16.2f} {mean(wide, 1):>13.2f} {mean(deep, 0):>17.2f} {mean(deep, 1):>14.2f}")


if __name__ == "__main__":
    main()

"""Benchmark: the chunked wkv in tiles of batch rows (the CPU default) against the whole batch at once.

    python benchmarks/bench_wkv_tiles.py [--repeats 9] [--checkpoint models/phase1/primary] [--preset cpu]
                                         [--batch-size 16] [--data data/prepared] [--tile-matrices N]

`aegir.model.ops.wkv_chunked` takes the batch a few rows at a time on CPU (about
`TILE_MATRICES` (row, head, chunk) matrices per tile), so that each tile's intermediates stay in
cache. In one process, alternating, with and without tiles (`TILE_MATRICES` set past any batch
gives one tile), it times

1. the op alone, forward + backward, one thread, at Phase 1's shapes: the batch (16 × 1025
   steps) and one shard of it (8 × 1025), with the preset's heads and head size;
2. a training step's forward + backward of a model on the `--batch-size` longest prepared
   training tables (random bytes without prepared data): the trained Phase 1 primary
   (`--checkpoint`, when it exists), else a fresh model of `--preset` after one AdamW step (at
   its initial weights the chunker cuts about every second byte: 2.1 bytes per chunk on the
   default batch, against 6.0 for the trained primary, so the main network reads far longer
   sequences than in training). Three ways: the whole batch on
   one thread; the whole batch with torch's intra-op threads (how Phase 3 trains, and how
   evaluation and `aegir annotate` read); and `ShardedStep` (how Phase 1 trains);

and checks that each way's outputs and gradients with tiles equal those without, bit for bit:
tiling may change the speed and nothing else. Reports medians and their ratios.

A model whose config asks for the CPU kernel (`wkv_kernel`, aegir.model.ops.wkv_cpu) is put on
the chunked form here, so that its steps run the form this benchmark measures.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from aegir.model.checkpoint import load_checkpoint
from aegir.model.network import AegirModel, preset
from aegir.model.ops import wkv as wkv_module
from aegir.train.step import OneThreadWorkers, ShardedStep, whole_batch_step

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_phase1 import batch_of, load_average, machine_line
from bench_wkv import make_inputs

ONE_TILE = 1 << 40  # TILE_MATRICES past any batch: the whole batch is one tile
default_tiles = wkv_module.TILE_MATRICES


def op_run(inputs: list[torch.Tensor], chunk_size: int) -> list[torch.Tensor]:
    """Forward + backward of the op; returns outputs and input gradients."""
    for x in inputs:
        x.grad = None
    out, state = wkv_module.wkv_chunked(*inputs, chunk_size=chunk_size)
    g = torch.Generator().manual_seed(1)
    torch.autograd.backward([out, state], [torch.randn(out.shape, generator=g),
                                           torch.randn(state.shape, generator=g)])
    return [out.detach(), state.detach(), *(x.grad for x in inputs)]


class Case:
    """One way of running: a function to time, with tiles and without, and its results."""

    def __init__(self, name: str, run: Callable[[], list[torch.Tensor]], threads: int):
        self.name, self.run, self.threads = name, run, threads
        self.times: dict[bool, list[float]] = {True: [], False: []}
        self.results: dict[bool, list[torch.Tensor]] = {}

    def once(self, tiles: bool, keep: bool = False) -> None:
        wkv_module.TILE_MATRICES = default_tiles if tiles else ONE_TILE
        torch.set_num_threads(self.threads)
        start = time.perf_counter()
        results = self.run()
        self.times[tiles].append(time.perf_counter() - start)
        if keep:
            self.results[tiles] = [x.detach().clone() for x in results]

    def median(self, tiles: bool) -> float:
        values = sorted(self.times[tiles])
        return values[len(values) // 2]

    def bit_equal(self) -> bool:
        a, b = self.results[True], self.results[False]
        return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def model_case(name: str, model: AegirModel, step: Callable[[], None], threads: int) -> Case:
    def run() -> list[torch.Tensor]:
        model.zero_grad(set_to_none=True)
        step()
        return [p.grad for p in model.parameters() if p.grad is not None]
    return Case(name, run, threads)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--repeats", type=int, default=9, help="timed runs per case and setting")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--length", type=int, default=1025, help="steps of the op; stream length without data")
    parser.add_argument("--data", default="data/prepared", type=Path)
    parser.add_argument("--checkpoint", default="models/phase1/primary", type=Path,
                        help="model to step (default: the Phase 1 primary; a fresh --preset model without it)")
    parser.add_argument("--tile-matrices", type=int, default=wkv_module.TILE_MATRICES,
                        help="matrices per tile with tiles (default: the code's TILE_MATRICES)")
    args = parser.parse_args(argv)
    if min(args.repeats, args.batch_size, args.length, args.tile_matrices) < 1:
        parser.error("--repeats, --batch-size, --length and --tile-matrices must be ≥ 1")
    global default_tiles
    default_tiles, code_default = args.tile_matrices, wkv_module.TILE_MATRICES

    threads = torch.get_num_threads()
    print(machine_line())
    batch = batch_of(args.data, args.batch_size, args.length)
    if (args.checkpoint / "config.json").is_file():
        model, _ = load_checkpoint(args.checkpoint)
        model.train()
        what = str(args.checkpoint)
    else:
        torch.manual_seed(0)
        model = AegirModel(preset(args.preset))
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        whole_batch_step(model, batch)
        optimizer.step()
        what = f"preset {args.preset}, one AdamW step from its initial weights"
    model.set_wkv_kernel(False)  # the chunked form, whose tiles this measures (docstring)
    config = model.config
    H, K = config.d_model // config.head_size, config.head_size
    print(f"model: {what}; {H} heads of {K}, wkv chunk {config.wkv_chunk_size}; "
          f"tiles of about {default_tiles} matrices; model batch {tuple(batch.byte_ids.shape)}")

    cases = []
    for B in sorted({args.batch_size, max(1, args.batch_size // 2)}, reverse=True):
        inputs = make_inputs(B, args.length, H, K)
        cases.append(Case(f"op, {B} × {args.length}, 1 thread",
                          lambda inputs=inputs: op_run(inputs, config.wkv_chunk_size), 1))
    cases.append(model_case("step, whole batch, 1 thread", model, lambda: whole_batch_step(model, batch), 1))
    if threads > 1:
        cases.append(model_case(f"step, whole batch, {threads} threads", model,
                                lambda: whole_batch_step(model, batch), threads))
    workers = OneThreadWorkers(threads) if threads > 1 else None
    if workers:
        sharded = ShardedStep(model, workers)
        cases.append(model_case(f"step, sharded, {threads} worker threads", model, lambda: sharded(batch), threads))
    try:
        for case in cases:  # warm-up, and the results to compare
            for tiles in (True, False):
                case.once(tiles, keep=True)
                case.times[tiles].clear()
        for _ in range(args.repeats):
            for case in cases:
                for tiles in (True, False):
                    case.once(tiles)
    finally:
        wkv_module.TILE_MATRICES = code_default
        if workers:
            workers.close()

    print(f"\n{'case':38s} {'one tile ms':>12s} {'tiles ms':>9s} {'ratio':>6s}  bit-equal")
    for case in cases:
        whole, tiled = 1e3 * case.median(False), 1e3 * case.median(True)
        print(f"{case.name:38s} {whole:12.1f} {tiled:9.1f} {whole / tiled:5.2f}×  {case.bit_equal()}")
    print(f"(medians of {args.repeats} alternating runs; load average now {load_average()})")
    if not all(case.bit_equal() for case in cases):
        raise SystemExit("bench_wkv_tiles: tiles changed a result (they must not)")


if __name__ == "__main__":
    main()

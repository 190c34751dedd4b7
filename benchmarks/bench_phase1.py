"""Benchmark: Phase 1 training throughput, and the share of the machine's fp32 matmul peak.

    python benchmarks/bench_phase1.py [--preset cpu] [--steps 10] [--batch-size 16] [--data data/prepared]

In one run: (1) the machine's own fp32 matmul peak (GFLOP/s of a large square matmul, best
of several); (2) training steps of the chosen preset on real prepared tables (or synthetic
bytes when no prepared data is there), timed after warm-up; FLOPs of one step counted by
torch's FlopCounterMode (matmuls and convolutions only, as the peak is). Prints bytes/s,
achieved GFLOP/s and the ratio to the peak.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from aegir.data.dataset import collate, load_examples, make_example
from aegir.model.aegir import AegirModel, preset


def matmul_peak(n: int = 1024, repeats: int = 10) -> float:
    """Best GFLOP/s of an n×n fp32 matmul on this machine and thread setting."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best / 1e9


def batch_of(data: Path, batch_size: int, length: int):
    if (data / "train.parquet").is_file():
        examples = load_examples(data, "train")
        examples = sorted(examples, key=lambda e: -len(e.byte_ids))[:batch_size]
    else:
        g = torch.Generator().manual_seed(0)
        examples = []
        for i in range(batch_size):
            stream = bytes(torch.randint(32, 127, (length - 1,), generator=g).tolist())
            step = (length - 1) // 4
            spans = [(j * step, j * step + step - 1) for j in range(4)]
            stream = b"".join(stream[s:e] + b"\x1e" for s, e in spans)
            examples.append(make_example(f"t{i}", None, stream, spans, [None] * 4, [None] * 4, Path("synthetic")))
    return collate(examples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--length", type=int, default=1025, help="stream length without prepared data")
    parser.add_argument("--data", default="data/prepared", type=Path)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()

    print(f"machine: {platform.machine()} {os.cpu_count()} cores, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, device {args.device}")
    peak = matmul_peak() if args.device == "cpu" else float("nan")
    print(f"fp32 matmul peak (1024x1024): {peak:.1f} GFLOP/s")

    torch.manual_seed(0)
    model = AegirModel(preset(args.preset)).to(args.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = batch_of(args.data, args.batch_size, args.length).to(args.device)
    real_bytes = int(batch.byte_mask.sum())

    def step() -> None:
        output = model(batch)
        loss, _ = model.loss(batch, output)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()  # warm-up
    with FlopCounterMode(display=False) as counter:
        step()
    flops = counter.get_total_flops()
    times = []
    for _ in range(args.steps):
        t = time.perf_counter()
        step()
        if args.device != "cpu":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    median = sorted(times)[len(times) // 2]
    achieved = flops / median / 1e9
    print(f"preset {args.preset}: {model.num_parameters():,} parameters; batch {tuple(batch.byte_ids.shape)}, "
          f"{real_bytes} real bytes")
    print(f"step (forward+backward+AdamW), median of {args.steps}: {median * 1000:.0f} ms")
    print(f"throughput: {real_bytes / median:,.0f} bytes/s ({args.batch_size / median:.1f} tables/s)")
    print(f"matmul FLOPs per step: {flops / 1e9:.2f} GFLOP → {achieved:.1f} GFLOP/s = "
          f"{100 * achieved / peak:.1f}% of the measured peak")


if __name__ == "__main__":
    main()

"""The wkv recurrence's three paths: forward + backward time of the naive loop, the chunked form and
the CPU kernel (`aegir.model.ops.wkv_cpu`, the layers' op on CPU), and their ratios; then the
dechunk EMA's two fast paths, the closed form (`aegir.model.chunking.ema_parallel`) and the CPU
kernel, over L = each length's chunks at 4 bytes per chunk (the ratio loss's target), width
heads × head size.

    python benchmarks/bench_wkv.py [--lengths 256 1024 4096] [--threads 2] [--batch 4] [--heads 4]

Inputs are RWKV-7-shaped (a = −κ̂, b = κ̂ ⊙ â, w ∈ [0.545, 1)), float32, with an initial state;
the backward pass takes gradients of every input. Each timing is the best of --repeats runs
(one run for the naive loop at T ≥ 4096) after one warm-up run. The kernel is built on first use;
without a C compiler its column says so and the rest still runs.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from bench_phase1 import machine_line

from aegir.model.chunking import EMA_PROB_EPS, ema_parallel
from aegir.model.ops import wkv_chunked, wkv_cpu, wkv_naive, wkv_sequential


def make_inputs(B: int, T: int, H: int, K: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    r = torch.randn(B, T, H, K, generator=g)
    k = torch.randn(B, T, H, K, generator=g) * 0.5
    v = torch.randn(B, T, H, K, generator=g)
    w = torch.exp(-0.6065 * torch.rand(B, T, H, K, generator=g))
    kk = F.normalize(torch.randn(B, T, H, K, generator=g), dim=-1)
    lr = torch.rand(B, T, H, K, generator=g)
    state = torch.randn(B, H, K, K, generator=g)
    return [x.requires_grad_() for x in (r, w, k, v, -kk, kk * lr, state)]


def time_forward_backward(op, inputs, repeats: int, **kwargs) -> float:
    def once() -> float:
        for x in inputs:
            x.grad = None
        start = time.perf_counter()
        out, state = op(*inputs, **kwargs)
        (out.sum() + state.sum()).backward()
        return time.perf_counter() - start

    once()  # warm-up: allocator, first-touch pages
    return min(once() for _ in range(repeats))


def time_ema(op, z: torch.Tensor, p: torch.Tensor, repeats: int) -> float:
    def once() -> float:
        z.grad = p.grad = None
        start = time.perf_counter()
        op(z, p).sum().backward()
        return time.perf_counter() - start

    once()
    return min(once() for _ in range(repeats))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 4096])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-size", type=int, default=32)
    parser.add_argument("--chunk-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    print(machine_line())
    print(f"config: B={args.batch} H={args.heads} K=V={args.head_size} float32 "
          f"chunk_size={args.chunk_size}, forward + backward (grads of all 7 inputs)")
    kernel = wkv_cpu.available() and args.head_size in wkv_cpu.HEAD_SIZES
    if not kernel:
        print(f"CPU kernel: not run ({wkv_cpu.failure() or f'head size not in {wkv_cpu.HEAD_SIZES}'})")
    print(f"{'T':>6} {'naive s':>10} {'chunked s':>10} {'kernel s':>10} {'naive/chunked':>14} {'chunked/kernel':>15}")
    for T in args.lengths:
        inputs = make_inputs(args.batch, T, args.heads, args.head_size)
        chunked = time_forward_backward(wkv_chunked, inputs, args.repeats, chunk_size=args.chunk_size)
        sequential = (time_forward_backward(wkv_sequential, inputs, args.repeats, chunk_size=args.chunk_size)
                      if kernel else float("nan"))
        naive = time_forward_backward(wkv_naive, inputs, 1 if T >= 4096 else args.repeats)
        print(f"{T:>6} {naive:>10.3f} {chunked:>10.4f} {sequential:>10.4f} {naive / chunked:>13.1f}x "
              f"{chunked / sequential:>14.1f}x", flush=True)

    D = args.heads * args.head_size
    print(f"\ndechunk EMA, B={args.batch} D={D} float32, forward + backward (grads of z and p)")
    if not wkv_cpu.available():
        print(f"CPU kernel: not run ({wkv_cpu.failure()})")
    print(f"{'L':>6} {'closed form s':>14} {'kernel s':>10} {'closed/kernel':>14}")
    g = torch.Generator().manual_seed(1)
    for T in args.lengths:
        L = max(1, T // 4)
        z = torch.randn(args.batch, L, D, generator=g).requires_grad_()
        p = torch.rand(args.batch, L, generator=g).clamp(EMA_PROB_EPS, 1 - EMA_PROB_EPS).requires_grad_()
        closed = time_ema(ema_parallel, z, p, args.repeats)
        kernel_s = time_ema(wkv_cpu.ema_sequential_cpu, z, p, args.repeats) if wkv_cpu.available() else float("nan")
        print(f"{L:>6} {closed:>14.5f} {kernel_s:>10.5f} {closed / kernel_s:>13.1f}x", flush=True)

if __name__ == "__main__":
    main()

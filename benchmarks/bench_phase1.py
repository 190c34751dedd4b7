"""Benchmark: Phase 1 training throughput of the previous code and the current one, in one run.

    python benchmarks/bench_phase1.py [--preset cpu] [--steps 10] [--batch-size 16] [--data data/prepared]
                                      [--baseline-rev REV] [--top 12] [--json out.json] [--bf16]

In one process:
1. the machine's fp32 matmul peak: best GFLOP/s of a 1024×1024 matmul with torch's intra-op
   threads (all cores by default), measured before and after the steps, the higher one kept
   (on a shared machine both are below what the cores give when idle);
2. training steps (forward + backward + gradient clipping + AdamW: its loop form before, the
   fused form Phase 1 now uses after) on the same batch (the
   `--batch-size` longest prepared training tables, or random bytes when there is no prepared
   data) by
   * before: the model code of `--baseline-rev` (default: the last commit before the speed work),
     loaded from git into a temporary package, stepped as Phase 1 stepped it then: the whole
     batch at once, torch's intra-op threads splitting each op;
   * after: the current code and preset stepped as Phase 1 steps it now
     (`aegir.train.step.ShardedStep`: one shard per intra-op thread, each shard in its own
     thread; the recurrences on the CPU kernels, `aegir.model.ops.wkv_cpu`, where the preset's
     `wkv_kernel` is on, as in every preset since 2026-11-26, and the kernel builds);
   * after with the chunked wkv (the preset with `wkv_kernel` off: the chunked form and the
     closed-form dechunk EMA), sharded as after, when "after" runs the kernel;
   * after with whole-table n-gram gradients (`ShardedStep(compact_ngrams=False)`: each shard's
     backward zeroes and fills a gradient of the whole hashed n-gram table, added shard by shard,
     as before 2026-12-07; the same bits as after, tests/test_step.py), when the preset has them;
   * and, for context, before with one intra-op thread and after on the whole batch with one
     thread (how much is work saved and how much is the use of the cores), and after on the whole
     batch with torch's intra-op threads, as before steps (which use of the cores is faster on
     this machine: shards in threads or threads in ops); with `--bf16`, also
     after under CPU bf16 autocast (its FLOPs counted as fp32's, against the fp32 peak);
   the paths' steps alternate, so that load from other processes on a shared machine falls on
   all of them alike; each path's median wall time and CPU time per step are reported;
3. matmul FLOPs of one step of each path (torch's FlopCounterMode: matmuls only, as the peak)
   → achieved GFLOP/s and share of the peak;
4. the profiler's top ops by self CPU time, summed over all threads, of one step before and after.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, _ExperimentalConfig, profile
from torch.utils.flop_counter import FlopCounterMode

from aegir.data.dataset import collate, load_examples, make_example
from aegir.model.ops import wkv_cpu
from aegir.train.step import OneThreadWorkers, ShardedStep, whole_batch_step

REPO = Path(__file__).resolve().parents[1]
BASELINE_REV = "50aee049c579f14bb225383154c704828a8f8012"  # the last commit before the speed work (issue 8)


def load_average() -> str:
    """The machine's 1, 5 and 15 minute load averages, as the benchmarks print them."""
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def machine_line() -> str:
    """The machine, Python, torch and its intra-op threads, and the load average: the first line
    the benchmarks print."""
    return (f"machine: {platform.machine()} ({vector_isa()}), {os.cpu_count()} cores, Python "
            f"{platform.python_version()}, torch {torch.__version__}, {torch.get_num_threads()} intra-op threads; "
            f"load average {load_average()}")


def vector_isa() -> str:
    """The CPU's widest vector instruction set, as the kernels see it (`-march=native`: 16-float
    vectors with AVX-512, 8 with AVX2, 4 otherwise; `aegir.model.ops.wkv_cpu`), and the CPU's name:
    the benchmarks' figures depend on both."""
    flags = wkv_cpu._cpu_flags().split()
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    name = ""
    with contextlib.suppress(OSError):
        name = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name")), "")
    return f"{name or platform.processor() or platform.machine()}, {isa}"


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


def import_baseline(rev: str):
    """The `aegir` package as it was at git revision `rev`, imported as `aegir_baseline`.

    `git archive` of src/aegir into a temporary directory, with `aegir` imports renamed, so that
    both versions live in one process.
    """
    tar = subprocess.run(["git", "-C", str(REPO), "archive", rev, "src/aegir"], check=True,
                         capture_output=True).stdout
    root = Path(tempfile.mkdtemp(prefix="aegir-baseline-"))
    subprocess.run(["tar", "-x", "-C", str(root)], input=tar, check=True)
    package = root / "aegir_baseline"
    (root / "src" / "aegir").rename(package)
    for source in package.rglob("*.py"):
        source.write_text(re.sub(r"\b(from|import) aegir\b", r"\1 aegir_baseline", source.read_text()))
    sys.path.insert(0, str(root))
    # the model module's name at `rev`: model/aegir.py until it became model/network.py
    name = "aegir" if (package / "model" / "aegir.py").is_file() else "network"
    return importlib.import_module(f"aegir_baseline.model.{name}")


class TrainingPath:
    """One way of taking a training step: a model, its optimizer and how it steps."""

    def __init__(self, name: str, model: torch.nn.Module, forward_backward: Callable[[], None], threads: int):
        self.name, self.model, self.forward_backward, self.threads = name, model, forward_backward, threads
        # AdamW as each code's Phase 1 stepped it: the loop form before, the fused form after
        fused = {} if name.startswith("before") else {"fused": True}
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, **fused)
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def step(self) -> None:
        torch.set_num_threads(self.threads)
        self.forward_backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def timed_step(self) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        self.step()
        self.wall.append(time.perf_counter() - wall)
        self.cpu.append(time.process_time() - cpu)

    def median(self, values: list[float]) -> float:
        return sorted(values)[len(values) // 2]


def whole_batch(model, batch) -> Callable[[], None]:
    def forward_backward() -> None:
        loss, _ = model.loss(batch, model(batch))
        loss.backward()
    return forward_backward


def top_ops(step: Callable[[], None], rows: int) -> list[tuple[str, float, float, int]]:
    """(op, self CPU ms, share %, calls) of one step, all threads, by self CPU time."""
    with profile(activities=[ProfilerActivity.CPU],
                 experimental_config=_ExperimentalConfig(profile_all_threads=True)) as prof:
        step()
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    total = sum(e.self_cpu_time_total for e in events)
    events.sort(key=lambda e: -e.self_cpu_time_total)
    return [(e.key, e.self_cpu_time_total / 1e3, 100 * e.self_cpu_time_total / total, e.count)
            for e in events[:rows]]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per path")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--length", type=int, default=1025, help="stream length without prepared data")
    parser.add_argument("--data", default="data/prepared", type=Path)
    parser.add_argument("--baseline-rev", default=BASELINE_REV, help="git revision of the 'before' code")
    parser.add_argument("--top", type=int, default=12, help="profiler rows per path")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--bf16", action="store_true",
                        help="also time the current step under CPU bf16 autocast (matmuls in bf16, the "
                             "recurrences in fp32: aegir.model.ops.precision)")
    args = parser.parse_args(argv)

    threads = torch.get_num_threads()
    print(machine_line())
    peak_at_start = matmul_peak()

    batch = batch_of(args.data, args.batch_size, args.length)
    real_bytes = int(batch.byte_mask.sum())
    baseline = import_baseline(args.baseline_rev)

    def model(code, **overrides):
        torch.manual_seed(0)
        return code.AegirModel(code.preset(args.preset, **overrides))

    import aegir.model.network as current
    before, before_1, after, after_1 = model(baseline), model(baseline), model(current), model(current)
    after_whole = model(current)
    workers = OneThreadWorkers(threads)
    sharded = ShardedStep(after, workers)
    paths = [
        TrainingPath("before", before, whole_batch(before, batch), threads),
        TrainingPath("after", after, lambda: sharded(batch), threads),
        TrainingPath("before, 1 thread", before_1, whole_batch(before_1, batch), 1),
        TrainingPath("after, whole batch, 1 thread", after_1, lambda: whole_batch_step(after_1, batch), 1),
        TrainingPath(f"after, whole batch, {threads} threads", after_whole,
                     lambda: whole_batch_step(after_whole, batch), threads),
    ]
    if after.config.wkv_kernel and wkv_cpu.available():
        after_chunked = model(current, wkv_kernel=False)
        sharded_chunked = ShardedStep(after_chunked, workers)
        paths.insert(2, TrainingPath("after, chunked wkv", after_chunked, lambda: sharded_chunked(batch), threads))
    elif after.config.wkv_kernel:
        print(f"CPU wkv kernel: not built ({wkv_cpu.failure()}); after runs the chunked form")
    if after.ngram_embed is not None:
        after_tables = model(current)
        sharded_tables = ShardedStep(after_tables, workers, compact_ngrams=False)
        paths.insert(2, TrainingPath("after, whole-table n-grams", after_tables, lambda: sharded_tables(batch), threads))
    if args.bf16:
        after_bf16 = model(current)
        sharded_bf16 = ShardedStep(after_bf16, workers, lambda: torch.autocast("cpu", dtype=torch.bfloat16))
        paths.append(TrainingPath("after, bf16 autocast", after_bf16, lambda: sharded_bf16(batch), threads))
    print(f"preset {args.preset}: {after.num_parameters():,} parameters; batch "
          f"{tuple(batch.byte_ids.shape)}, {real_bytes} real bytes; before = {args.baseline_rev[:12]}")

    flops = {}
    counted = [path for path in paths if path.name in ("before", "after", "after, chunked wkv")]
    for path in counted:
        path.step()  # warm-up
        with FlopCounterMode(display=False) as counter:  # counts this thread's ops: whole batch
            torch.set_num_threads(threads)
            whole_batch(path.model, batch)()
        path.model.zero_grad(set_to_none=True)
        flops[path.name] = counter.get_total_flops()
    for path in paths:
        if path not in counted:
            path.step()
    for _ in range(args.steps):
        for path in paths:
            path.timed_step()

    peak_at_end = matmul_peak()
    peak = max(peak_at_start, peak_at_end)
    print(f"fp32 matmul peak (1024×1024, {threads} threads), best before and after the steps: "
          f"{peak_at_start:.1f} and {peak_at_end:.1f} GFLOP/s → {peak:.1f}")
    results = {}
    print(f"\n{'path':30s} {'ms/step':>8s} {'CPU ms':>8s} {'bytes/s':>9s} {'GFLOP':>6s} {'GFLOP/s':>8s} {'% peak':>7s}")
    for path in paths:
        ms = 1e3 * path.median(path.wall)
        flop = flops.get(path.name, flops["before" if path.name.startswith("before") else "after"])
        results[path.name] = {"ms_per_step": ms, "cpu_ms_per_step": 1e3 * path.median(path.cpu),
                              "bytes_per_s": real_bytes / ms * 1e3, "gflop_per_step": flop / 1e9,
                              "gflop_per_s": flop / ms / 1e6, "share_of_peak": flop / ms / 1e6 / peak}
        r = results[path.name]
        print(f"{path.name:30s} {ms:8.0f} {r['cpu_ms_per_step']:8.0f} {r['bytes_per_s']:9,.0f} "
              f"{r['gflop_per_step']:6.1f} {r['gflop_per_s']:8.1f} {100 * r['share_of_peak']:6.1f}%")
    speedup = results["after"]["bytes_per_s"] / results["before"]["bytes_per_s"]
    print(f"after / before: {speedup:.2f}× bytes/s (median of {args.steps} alternating steps each); "
          f"load average now {load_average()}")
    if "after, whole-table n-grams" in results:
        tables = results["after, whole-table n-grams"]["bytes_per_s"]
        print(f"after (n-gram rows read) over after with whole-table n-gram gradients: "
              f"{results['after']['bytes_per_s'] / tables:.3f}× bytes/s")
    if "after, chunked wkv" in results:
        chunked = results["after, chunked wkv"]["bytes_per_s"]
        print(f"after with the chunked wkv / before: {chunked / results['before']['bytes_per_s']:.2f}× bytes/s; "
              f"after (the kernels) over it: {results['after']['bytes_per_s'] / chunked:.2f}×")

    profiles = {}
    for path in counted:
        profiles[path.name] = top_ops(path.step, args.top)
        print(f"\ntop ops by self CPU time, one step {path.name} (all threads):")
        for name, ms, share, calls in profiles[path.name]:
            print(f"  {name:40s} {ms:9.1f} ms {share:5.1f}% {calls:6d} calls")
    workers.close()
    if args.json:
        args.json.write_text(json.dumps({"cpu": vector_isa(), "peak_gflop_per_s": peak, "real_bytes": real_bytes,
                                         "threads": threads, "paths": results, "speedup": speedup,
                                         "top_ops": profiles}, indent=1))


if __name__ == "__main__":
    main()

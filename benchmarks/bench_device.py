"""Benchmark: Phase 1 training throughput of each model preset on a device, in fp32 and bf16.

    python benchmarks/bench_device.py [--presets small cpu gpu] [--precisions fp32 bf16]
                                      [--batch-sizes 16 64] [--steps 20] [--device cuda]

For every preset × precision × batch size, in one process: a model built from the preset of
params.yaml, trained on the same batch of the longest prepared training tables (random bytes
when there is no prepared data) with forward + backward + gradient clipping + AdamW, as
Phase 1 (`aegir.train.supervised`) steps it on a device (`whole_batch_step` under autocast; the WKV
recurrence and the EMA stay in fp32 under bf16: `aegir.model.ops.precision`). After 3
warm-up steps, `--steps` steps are timed with the device synchronised before each clock read.
Prints, per row: parameters, median ms per step, real (non-padding) bytes per second, tables
per second, peak device memory, which wkv ran (`fla` on CUDA with the `gpu` extra, else
`chunked`; AEGIR_FLA=0 forces `chunked`, for a comparison in two runs) and an upper bound of the
model's arithmetic rate: 6 × dense parameters (without the hashed n-gram rows and the byte
embedding, which are looked up, not multiplied) × real bytes per second, as if every layer read
every byte (the main stack reads chunks, so the true rate is lower); beside it its share of the
GPU's bf16 matmul rate, measured in the same run. Runs on the CPU too (`--device cpu`), where
bf16 autocast is slow and only a check.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from pathlib import Path

import torch

from aegir.config import load_params
from aegir.data.batch import Batch
from aegir.data.dataset import collate, load_examples
from aegir.model.network import AegirModel
from aegir.model.ops import wkv_fla
from aegir.train.setup import make_optimizer, model_config
from aegir.train.step import whole_batch_step

DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_tflops(device: torch.device, dtype: torch.dtype, n: int = 8192, repeats: int = 10) -> float:
    """Best TFLOP/s of an n×n matmul in `dtype` on `device` (random operands)."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    synchronize(device)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        synchronize(device)
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e12


def training_batch(data: Path, batch_size: int, length: int) -> Batch:
    """The `batch_size` longest prepared training tables, or random tables of `length` bytes."""
    if (data / "train.parquet").exists():
        examples = load_examples(data, "train")
        examples = sorted(examples, key=lambda e: -len(e.byte_ids))[:batch_size]
        return collate(examples)
    generator = torch.Generator().manual_seed(0)
    columns = 6
    spans = torch.tensor([[(c * length // columns, (c + 1) * length // columns - 1) for c in range(columns)]])
    return Batch(byte_ids=torch.randint(0, 256, (batch_size, length), generator=generator),
                 byte_mask=torch.ones(batch_size, length, dtype=torch.bool),
                 column_spans=spans.expand(batch_size, -1, -1).clone(),
                 column_mask=torch.ones(batch_size, columns, dtype=torch.bool),
                 cta_labels=torch.randint(0, 82, (batch_size, columns), generator=generator),
                 cpa_labels=torch.randint(0, 108, (batch_size, columns), generator=generator))


def time_steps(model: AegirModel, optimizer: torch.optim.Optimizer, batch: Batch, dtype: torch.dtype | None,
               device: torch.device, steps: int, warmup: int = 3) -> list[float]:
    """Seconds per training step, `steps` of them after `warmup` untimed ones."""
    def autocast():
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device.type, dtype=dtype)

    times = []
    for i in range(warmup + steps):
        synchronize(device)
        start = time.perf_counter()
        whole_batch_step(model, batch, autocast=autocast)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        synchronize(device)
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["small", "cpu", "gpu"])
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=sorted(DTYPES))
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--steps", type=int, default=20, help="timed steps per row (after 3 warm-up steps)")
    parser.add_argument("--length", type=int, default=1025, help="stream length without prepared data")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--data", default="data/prepared", type=Path)
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    device = torch.device(args.device)
    params = load_params(args.params)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    wkv = "fla" if device.type == "cuda" and wkv_fla.available() else "chunked"
    print(f"device {name}, torch {torch.__version__}, wkv {wkv}"
          + (f" (fla: {wkv_fla.failure()})" if device.type == "cuda" and wkv == "chunked" else ""))
    peak = matmul_tflops(device, torch.bfloat16) if device.type == "cuda" else None
    if peak is not None:
        print(f"bf16 8192³ matmul: {peak:.0f} TFLOP/s")
    rows = []
    for batch_size in args.batch_sizes:
        batch = training_batch(args.data, batch_size, args.length).to(device)
        real_bytes = int(batch.byte_mask.sum())
        for preset in args.presets:
            for precision in args.precisions:
                torch.manual_seed(0)
                model = AegirModel(model_config(params, preset)).to(device)
                optimizer = make_optimizer(model, params.phase1)
                if device.type == "cuda":
                    torch.cuda.reset_peak_memory_stats(device)
                times = time_steps(model, optimizer, batch, DTYPES[precision], device, args.steps)
                seconds = statistics.median(times)
                dense = model.num_dense_parameters()
                tflops = 6 * dense * real_bytes / seconds / 1e12
                row = {"preset": preset, "precision": precision, "batch_size": batch_size,
                       "stream_bytes": tuple(batch.byte_ids.shape)[1], "parameters": model.num_parameters(),
                       "ms_per_step": round(1000 * seconds, 1), "bytes_per_s": round(real_bytes / seconds),
                       "tables_per_s": round(batch_size / seconds, 1), "wkv": wkv,
                       "dense_parameters": dense, "tflops_bound": round(tflops, 3),
                       "share_of_bf16_peak": round(tflops / peak, 5) if peak else None,
                       "peak_memory_gib": (round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
                                           if device.type == "cuda" else None)}
                rows.append(row)
                print(f"  {preset:6s} {precision:5s} batch {batch_size:3d} × {row['stream_bytes']} bytes  "
                      f"{row['parameters']:>12,} params  {row['ms_per_step']:8.1f} ms/step  "
                      f"{row['bytes_per_s']:>10,} bytes/s  {row['tables_per_s']:7.1f} tables/s"
                      + (f"  {row['peak_memory_gib']:.2f} GiB" if row["peak_memory_gib"] is not None else "")
                      + f"  ≤ {tflops:.3f} TFLOP/s" + (f" ({100 * tflops / peak:.2f} % of bf16 peak)" if peak else ""))
                del model, optimizer
    if args.json:
        args.json.write_text(json.dumps({"device": name, "torch": torch.__version__, "wkv": wkv,
                                         "bf16_matmul_tflops": peak, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()

"""Benchmark: what the hashed byte n-gram embeddings cost per Phase 1 training step.

    python benchmarks/bench_ngram.py --preset small --steps 8

Builds the preset from params.yaml twice, with `ngram_max` 1 (no n-gram embeddings) and as
configured, and times forward + backward + AdamW on the same batch of training tables,
alternating the two models step by step in one process (so machine load hits both alike).
Prints parameters and the median milliseconds per step of each, and their ratio.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import torch
from bench_phase1 import machine_line

from aegir.config import load_params
from aegir.data.dataset import collate, load_examples
from aegir.model.network import AegirModel
from aegir.train.setup import make_optimizer, model_config
from aegir.train.step import whole_batch_step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="small", help="a preset of params.yaml")
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--data", default="data/prepared", help="prepared data (run `dvc repro prepare` first)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=8, help="timed steps per model (after 2 warm-up steps)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    params = load_params(args.params)
    batch = collate(load_examples(args.data, "train")[: args.batch_size])
    configured = model_config(params, args.preset)
    variants = {"without n-grams": dataclasses.replace(configured, ngram_max=1), "with n-grams": configured}
    runs = {}
    for name, cfg in variants.items():
        torch.manual_seed(0)
        model = AegirModel(cfg)
        runs[name] = (model, make_optimizer(model, params.phase1), [])
    for i in range(args.steps + 2):
        for model, optimizer, times in runs.values():
            start = time.perf_counter()
            whole_batch_step(model, batch)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if i >= 2:
                times.append(time.perf_counter() - start)
    print(machine_line())
    print(f"preset {args.preset}, batch {tuple(batch.byte_ids.shape)}, {args.threads} threads, "
          f"ngram_max {configured.ngram_max}, ngram_buckets {configured.ngram_buckets}")
    medians = {}
    for name, (model, _, times) in runs.items():
        medians[name] = statistics.median(times)
        print(f"  {name:16s} {model.num_parameters():>10,} parameters  {1000 * medians[name]:7.0f} ms/step")
    print(f"with / without: {medians['with n-grams'] / medians['without n-grams']:.3f}× time per step")


if __name__ == "__main__":
    main()

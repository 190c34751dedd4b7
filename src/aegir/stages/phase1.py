"""Stage `phase1@<agent>`: supervised training of the primary model or one specialist.

    python -m aegir.stages.phase1 --agent primary
    accelerate launch --config_file workflow/accelerate/cpu.yaml -m aegir.stages.phase1 --agent primary
    accelerate launch --config_file workflow/accelerate/cpu.yaml --num_processes 2 -m aegir.stages.phase1 …

Loss: cross-entropy on labelled columns (CTA) and labelled (column 0, column j) pairs (CPA),
plus the H-Net ratio loss (see `AegirModel.loss`). Every agent in the `agents` section of
params.yaml is one `foreach` item of this stage; specialists differ from the primary in what
they know (their `domains` subset) and seed, which is what makes fusing them in Phase 3 worth
anything. The run is `aegir.eval.phase1.train_agent` (its steps: `aegir.train.supervised`).

Accelerate drives the loop: one process on a CPU, or any number under `accelerate launch`.
A global batch of `batch_size` tables is split across processes (gradients are averaged by
DDP), so a run is consistent whatever the process count. In one CPU process, each step's batch
is split into shards that run in parallel threads, one per torch intra-op thread
(`aegir.train.step.ShardedStep`; the same gradient as the whole batch's up to rounding), and
evaluation predicts in the same threads. Validation predictions are gathered from every
process; the logged training loss and chunking figures are means over processes. On CPU with
one process the run is deterministic: the same params, data and thread count give
byte-identical checkpoint and metrics. Under bf16/fp16 autocast (`mixed_precision` in the
accelerate config) the recurrences still run in float32 (`aegir.model.ops.float32_op`).

Outputs (paths from the command line; dvc.yaml names them once):
  --out       model.safetensors + config.json (final weights, model config, params, vocabularies,
              fingerprint of the data it trains and validates on, process count)
  --metrics   metrics.json (DVC metrics, `aegir.eval.metrics.headline`: per task the benchmark
              and real-table micro-F1, under the agent's name), scores.json (micro/macro F1
              per evaluation split with supports, the `real` split per domain, specialists'
              in-domain F1, steps, tables),
              wall.json (DVC metrics: the run's wall minutes) and timing.json (its seconds, the
              step it resumed at) — the two outputs that are not reproducible, and the only
              ones left out of byte-identity checks — and live/ (DVCLive curves)
  --state     training state saved every `checkpoint_every` steps, with a snapshot of the
              curves logged so far; a killed run, re-run with the same params and data,
              resumes from it. It lives outside every other output (dvc.yaml: `persist: true`)
              so that neither DVC nor Snakemake deletes it before the rerun. "The same data"
              is `train` and `valid` (`aegir.config.TRAINED_SPLITS`): a change to a split the
              run only scores (`real`, say) resumes a finished run at its end and scores again.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from aegir.config import load_params
from aegir.errors import AegirError
from aegir.eval.phase1 import train_agent
from aegir.train.memory import retain_freed_memory


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", default="primary", help="a key of the `agents` params section")
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--data", default="data/prepared")
    parser.add_argument("--out", help="checkpoint directory (default models/phase1/<agent>)")
    parser.add_argument("--metrics", help="metrics directory: metrics.json, scores.json, timing.json, live/ "
                                          "(default results/phase1/<agent>)")
    parser.add_argument("--state", help="resume-state directory (default state/phase1/<agent>)")
    args = parser.parse_args(argv)
    retain_freed_memory()  # a step's buffers are reused, not mapped afresh (aegir.train.memory)
    try:
        params = load_params(args.params)
        scores = train_agent(
            args.agent, params, Path(args.data),
            Path(args.out or f"models/phase1/{args.agent}"),
            Path(args.metrics or f"results/phase1/{args.agent}"),
            Path(args.state or f"state/phase1/{args.agent}"),
        )
    except AegirError as exc:
        parser.exit(2, f"phase1: error: {exc}\n")
    print(f"phase1 {args.agent}: " + "  ".join(
        f"{task.upper()} test {scores[task]['test']['micro_f1']:.1f} / corner {scores[task]['corner_cases']['micro_f1']:.1f}"
        f" / real {scores[task]['real']['micro_f1']:.1f}"
        for task in ("cta", "cpa")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Phase 3's training loop in two processes, for tests/test_phase3.py (not a test module itself).

    accelerate launch --config_file workflow/accelerate/cpu.yaml --multi_gpu --num_processes 2 \
        tests/phase3_two_processes.py OUT_DIR

Each process builds the same tiny orchestrator and runs `aegir.rl.parl_training.train_run` on its
share of every batch with its own draws (gloo on the CPU, as workflow/accelerate/gpu.yaml runs
NCCL on GPUs). Only the averaged gradients tie the processes together, so they end with the same
weights only if the averaging works. The main process writes OUT_DIR/digests.json: the sha256
of the trainable weights before training and of each process's after it.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import torch
import yaml
from accelerate import Accelerator
from accelerate.utils import gather_object

from aegir.config import SyntheticConfig, parse_params
from aegir.data.dataset import examples_from_tables
from aegir.data.synth import generate_table
from aegir.rl.parl_training import train_run
from conftest import ROOT, TINY_PARAMS_OVERRIDE, deep_update
from test_swarm import open_gates, orchestrator

STEPS = 4


def weights_digest(orch) -> str:
    digest = hashlib.sha256()
    for name, param in sorted(orch.trainable_parameters().items()):
        digest.update(name.encode() + param.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def main(out_dir: Path) -> None:
    accelerator = Accelerator(cpu=True)
    raw = deep_update(yaml.safe_load((ROOT / "params.yaml").read_text()), TINY_PARAMS_OVERRIDE)
    raw = deep_update(raw, {"phase3": {"steps": STEPS, "eval_every": 0, "log_every": 2, "checkpoint_every": 0}})
    params = parse_params(raw)
    orch, _ = orchestrator(threshold=0.3)
    open_gates(orch)
    train = examples_from_tables([generate_table(SyntheticConfig(), "train", i) for i in range(16)], 256, 8, 0,
                                 Path("synthetic"))
    valid = examples_from_tables([generate_table(SyntheticConfig(), "valid", i) for i in range(4)], 256, 8, 0,
                                 Path("synthetic"))
    before = weights_digest(orch)
    train_run(orch, "fused", params, train, valid, out_dir / "state", out_dir / "live", "two-processes", accelerator)
    after = gather_object([weights_digest(orch)])
    if accelerator.is_main_process:
        (out_dir / "digests.json").write_text(json.dumps({"before": before, "after": after}))
    accelerator.wait_for_everyone()
    # gloo's threads torn down before the interpreter exits: left to exit, a process sometimes
    # aborted ("terminate called without an active exception") after its work was done
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))

"""Saved training state, so that a killed run, re-run, resumes where it stopped.

The state is `state.safetensors` (model weights and optimizer moments) + `state.json` (step,
epoch, optimizer hyper-parameters, and a fingerprint of the run's config and data), and
optionally `snapshot/`, a copy of a directory taken with the state (the curves logged so far),
which a resumed run restores in place of whatever is there. Nothing is pickled.

Where it lives: outside the stage's other outputs (dvc.yaml declares it `persist: true`), so
that a rerun finds it. DVC keeps persistent outputs when it reruns a stage; Snakemake deletes a
job's outputs before it runs it, so the Snakefile never makes the resume state a rule output. A state whose fingerprint differs from the current run's (changed params or data) is
ignored, so a resumed run is always the run that would have happened without the kill. Batch
order is a pure function of (seed, epoch) and the models have no dropout, so there is no RNG
state to carry.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from aegir import atomic

STATE_TENSORS = "state.safetensors"
STATE_JSON = "state.json"
SNAPSHOT_DIR = "snapshot"
# Layout version of a saved state; a state of another version is ignored (version 2 added the
# snapshot: a version-1 state would resume with its curves lost).
STATE_VERSION = 2


def fingerprint(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


@dataclass(frozen=True)
class TrainingProgress:
    step: int  # optimizer steps done
    epoch: int  # epoch the next step belongs to
    batch_in_epoch: int  # batches of `epoch` already consumed


def save_state(directory: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
               progress: TrainingProgress, run_fingerprint: str, snapshot: str | Path | None = None) -> None:
    """Write the state atomically (`aegir.atomic.staged_dir`), with a copy of the directory
    `snapshot` (when given and present) that `restore_snapshot` puts back on resume."""
    opt = optimizer.state_dict()
    tensors = {f"model.{k}": v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    for index, state in opt["state"].items():
        for name, value in state.items():
            tensors[f"optim.{index}.{name}"] = torch.as_tensor(value).detach().contiguous().cpu()
    meta = {
        "version": STATE_VERSION,
        "fingerprint": run_fingerprint,
        "step": progress.step, "epoch": progress.epoch, "batch_in_epoch": progress.batch_in_epoch,
        "param_groups": opt["param_groups"],
    }
    with atomic.staged_dir(directory) as staging:
        save_file(tensors, str(staging / STATE_TENSORS))
        (staging / STATE_JSON).write_text(json.dumps(meta, sort_keys=True, indent=1))
        if snapshot is not None and Path(snapshot).is_dir():
            shutil.copytree(snapshot, staging / SNAPSHOT_DIR)


def restore_snapshot(directory: str | Path, destination: str | Path) -> bool:
    """Replace `destination` by the snapshot saved with the state in `directory`; False (and
    `destination` untouched) when the state has none."""
    source = Path(directory) / SNAPSHOT_DIR
    if not source.is_dir():
        return False
    with atomic.staged_dir(destination) as staging:
        shutil.copytree(source, staging, dirs_exist_ok=True)
    return True


def resumed_live(state_dir: str | Path, live_dir: str | Path, resumed_at: int):
    """A DVCLive logger for a run that starts at step `resumed_at` (0: from scratch).

    The curves restart with the run: `live_dir` is emptied, and on a resume refilled from the
    snapshot saved with the state, so they read as they did when the state was saved. DVCLive
    resumes one step past its last logged step; the logger is set back to that step, so that a
    run resumed at its end writes the summary an uninterrupted run wrote (a resumed run logs at
    its own steps)."""
    from dvclive import Live

    shutil.rmtree(live_dir, ignore_errors=True)
    if resumed_at > 0:
        restore_snapshot(state_dir, live_dir)
    live = Live(dir=str(live_dir), resume=resumed_at > 0, save_dvc_exp=False, dvcyaml=False)
    if resumed_at > 0:
        live.step = live.read_step()
    return live


def load_state(directory: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
               run_fingerprint: str) -> TrainingProgress | None:
    """Restore model + optimizer from `directory`; None when there is no usable state."""
    directory = Path(directory)
    try:
        meta = json.loads((directory / STATE_JSON).read_text())
        if meta.get("fingerprint") != run_fingerprint or meta.get("version") != STATE_VERSION:
            return None
        tensors = load_file(str(directory / STATE_TENSORS))
    except (FileNotFoundError, json.JSONDecodeError, SafetensorError, OSError):
        return None
    model.load_state_dict({k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")})
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        if key.startswith("optim."):
            _, index, name = key.split(".", 2)
            state.setdefault(int(index), {})[name] = value
    optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
    return TrainingProgress(step=meta["step"], epoch=meta["epoch"], batch_in_epoch=meta["batch_in_epoch"])

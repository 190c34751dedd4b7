"""Saved training state, so that a killed run, re-run, resumes where it stopped.

The state is `state.safetensors` (model weights and optimizer moments) + `state.json` (step,
epoch, optimizer hyper-parameters, and a fingerprint of the run's config and data). Nothing is
pickled. A state whose fingerprint differs from the current run's (changed params or data) is
ignored, so a resumed run is always the run that would have happened without the kill. Batch
order is a pure function of (seed, epoch) and the models have no dropout, so there is no RNG
state to carry.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from aegir import atomic

STATE_TENSORS = "state.safetensors"
STATE_JSON = "state.json"


def fingerprint(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


@dataclass(frozen=True)
class TrainingProgress:
    step: int  # optimizer steps done
    epoch: int  # epoch the next step belongs to
    batch_in_epoch: int  # batches of `epoch` already consumed


def save_state(directory: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
               progress: TrainingProgress, run_fingerprint: str) -> None:
    """Write the state atomically (`aegir.atomic.staged_dir`)."""
    opt = optimizer.state_dict()
    tensors = {f"model.{k}": v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    for index, state in opt["state"].items():
        for name, value in state.items():
            tensors[f"optim.{index}.{name}"] = torch.as_tensor(value).detach().contiguous().cpu()
    meta = {
        "fingerprint": run_fingerprint,
        "step": progress.step, "epoch": progress.epoch, "batch_in_epoch": progress.batch_in_epoch,
        "param_groups": opt["param_groups"],
    }
    with atomic.staged_dir(directory) as staging:
        save_file(tensors, str(staging / STATE_TENSORS))
        (staging / STATE_JSON).write_text(json.dumps(meta, sort_keys=True, indent=1))


def load_state(directory: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
               run_fingerprint: str) -> TrainingProgress | None:
    """Restore model + optimizer from `directory`; None when there is no usable state."""
    directory = Path(directory)
    try:
        meta = json.loads((directory / STATE_JSON).read_text())
        if meta.get("fingerprint") != run_fingerprint:
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

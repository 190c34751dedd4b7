"""Saved training state, so that a killed run, re-run, resumes where it stopped.

The state is `state.safetensors` (model weights and optimizer moments) + `state.json` (step,
epoch, optimizer hyper-parameters, a fingerprint of the run's config and data, and a digest of
the code that trained it, `code_digest`), and
optionally `snapshot/`, a copy of a directory taken with the state (the curves logged so far),
which a resumed run restores in place of whatever is there. Nothing is pickled.

Where it lives: outside the stage's other outputs (dvc.yaml declares it `persist: true`), so
that a rerun finds it. DVC keeps persistent outputs when it reruns a stage; Snakemake deletes a
job's outputs before it runs it, so the Snakefile never makes the resume state a rule output. A state whose fingerprint differs from the current run's (changed params or data) is
ignored, and so is one saved by other code (a changed training loop must not resume the old
loop's weights), so a resumed run is always the run that would have happened without the kill; so is a
torn one (a file missing, truncated or corrupt: only damage from outside makes one, the writes
are atomic), with a warning that names the file. Batch
order is a pure function of (seed, epoch) and the models have no dropout, so there is no RNG
state to carry.
"""

from __future__ import annotations

import ast
import hashlib
import json
import shutil
import warnings
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


def source_digest(files: list[Path], root: Path) -> str:
    """sha256 over the code of the Python `files` (paths relative to `root` name them): each
    parsed, its docstrings dropped, dumped without positions. Comments, docstrings, blank lines
    and formatting leave it alone; any change to what the code does moves it."""
    digest = hashlib.sha256()
    for path in sorted(files, key=lambda f: f.relative_to(root).as_posix()):
        tree = ast.parse(path.read_bytes(), filename=str(path))
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                    and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                node.body = body[1:] or [ast.Pass()]
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(ast.dump(tree, include_attributes=False).encode() + b"\0")
    return digest.hexdigest()


_CODE_DIGEST: list[str] = []  # computed once per process: the code it started with


def code_digest() -> str:
    """`source_digest` of every module of the installed `aegir` package, as this process first
    read it. A saved state records it and resumes only under the same code: DVC reruns a stage
    when its code changed, and that rerun must train with the new code, not resume the old
    code's run at its end."""
    if not _CODE_DIGEST:
        package = Path(__file__).resolve().parents[1]  # …/aegir
        _CODE_DIGEST.append(source_digest(list(package.rglob("*.py")), package))
    return _CODE_DIGEST[0]


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
        "code": code_digest(),
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


class TornState(Exception):
    """A saved state that cannot be read or does not fit the model and optimizer; the message
    names the file and the problem."""


def _read_meta(path: Path) -> dict:
    try:
        meta = json.loads(path.read_text())
    except FileNotFoundError:
        raise TornState(f"{path} is missing") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise TornState(f"{path} is unreadable ({error})") from None
    if not isinstance(meta, dict):
        raise TornState(f"{path} is not a JSON object")
    return meta


def _read_progress(path: Path, meta: dict, optimizer: torch.optim.Optimizer) -> TrainingProgress:
    """The progress in `meta` (read from `path`), checked against the optimizer's groups."""
    fields = ("step", "epoch", "batch_in_epoch")
    if not all(isinstance(meta.get(key), int) and meta[key] >= 0 for key in fields):
        raise TornState(f"{path} lacks a count of {', '.join(fields)}")
    groups = meta.get("param_groups")
    if not (isinstance(groups, list) and all(isinstance(g, dict) and isinstance(g.get("params"), list) for g in groups)
            and [len(g["params"]) for g in groups] == [len(g["params"]) for g in optimizer.param_groups]):
        raise TornState(f"{path}: its optimizer parameter groups are not the optimizer's")
    return TrainingProgress(step=meta["step"], epoch=meta["epoch"], batch_in_epoch=meta["batch_in_epoch"])


def _read_tensors(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer
                  ) -> tuple[dict[str, torch.Tensor], dict[int, dict[str, torch.Tensor]]]:
    """The model's weights and the optimizer's state in `path`, checked against both: the same
    weight names and shapes, optimizer state of existing parameters, each a scalar or the
    parameter's shape."""
    try:
        tensors = load_file(str(path))
    except FileNotFoundError:
        raise TornState(f"{path} is missing") from None
    except (SafetensorError, OSError) as error:
        raise TornState(f"{path} is unreadable ({error})") from None
    weights = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}
    expected = model.state_dict()
    if set(weights) != set(expected) or any(weights[k].shape != v.shape for k, v in expected.items()):
        raise TornState(f"{path}: its model weights are not the model's (names or shapes differ)")
    params = [p for group in optimizer.param_groups for p in group["params"]]
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        if not key.startswith("optim."):
            continue
        index, _, name = key[len("optim."):].partition(".")
        if not (index.isdigit() and int(index) < len(params) and name
                and (value.dim() == 0 or value.shape == params[int(index)].shape)):
            raise TornState(f"{path}: its optimizer state {key} is not of the optimizer's parameters")
        state.setdefault(int(index), {})[name] = value
    return weights, state


def load_state(directory: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
               run_fingerprint: str) -> TrainingProgress | None:
    """Restore model + optimizer from `directory`; None when there is no usable state.

    None, silently, when there is no state or it is another run's (fingerprint), other code's
    (`code_digest`) or layout version's. None with a RuntimeWarning naming the file when it is torn: a file missing,
    truncated or corrupt, or weights and optimizer state that do not fit the model and
    optimizer; the run then starts from step 0, and its next save replaces the torn state. The
    model and optimizer are changed only once the whole state has been read and checked.
    (Damage that leaves a well-formed file, such as a changed byte inside a tensor, is not seen:
    the state carries no checksum.)"""
    directory = Path(directory)
    meta_path, tensors_path = directory / STATE_JSON, directory / STATE_TENSORS
    if not meta_path.exists() and not tensors_path.exists():
        return None
    try:
        meta = _read_meta(meta_path)
        if (meta.get("fingerprint") != run_fingerprint or meta.get("code") != code_digest()
                or meta.get("version") != STATE_VERSION):
            return None
        progress = _read_progress(meta_path, meta, optimizer)
        weights, state = _read_tensors(tensors_path, model, optimizer)
    except TornState as error:
        warnings.warn(f"aegir: ignoring the training state in {directory}: {error}; training starts from step 0",
                      RuntimeWarning, stacklevel=2)
        return None
    model.load_state_dict(weights)
    optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
    return progress

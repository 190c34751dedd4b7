"""Checkpoints: a directory with `model.safetensors` (weights) and `config.json` (config).

config.json = {"model": asdict(AegirConfig), **extra} where `extra` is whatever the caller
passes (resolved params, label vocabularies, data fingerprint). Loading uses safetensors only:
nothing is ever unpickled.

Saving is atomic per directory (`aegir.atomic.staged_dir`): both files are written into a
fresh temporary directory beside the target, which then replaces the target by rename.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, fields
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from aegir import atomic
from aegir.errors import PIPELINE_HINT, AegirError, is_pipeline_output
from aegir.model.network import AegirConfig, AegirModel

WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"


class CheckpointError(AegirError):
    """A checkpoint that is missing, corrupt, or does not match its config; names the path."""

    def __init__(self, path: str | Path, problem: str):
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


def save_checkpoint(directory: str | Path, model: AegirModel, config_dict: dict | None = None,
                    beside: Callable[[Path], None] | None = None) -> Path:
    """Write `directory`/model.safetensors + config.json atomically; returns the directory.

    config_dict: extra JSON-serialisable entries for config.json; it may not use the key "model".
    beside: writes more files into the directory (`write_checkpoint`).
    """
    extra = dict(config_dict or {})
    if "model" in extra:
        raise ValueError('save_checkpoint: config_dict may not contain the key "model"')
    return write_checkpoint(directory, model.state_dict(), {"model": asdict(model.config), **extra}, beside)


def write_checkpoint(directory: str | Path, tensors: dict[str, torch.Tensor], payload: dict,
                     beside: Callable[[Path], None] | None = None) -> Path:
    """`directory`/model.safetensors (`tensors`) + config.json (`payload`), atomically; then
    `beside(staging)`, if given, writes files that belong with these weights into the staging
    directory (they appear together with the checkpoint, or not at all)."""
    directory = Path(directory)
    text = json.dumps(payload, indent=2, sort_keys=True)  # fails here, before any write, if not JSON
    tensors = {name: t.detach().to("cpu").contiguous() for name, t in tensors.items()}
    with atomic.staged_dir(directory) as staging:
        save_file(tensors, str(staging / WEIGHTS_FILE), metadata={"format": "pt"})
        (staging / CONFIG_FILE).write_text(text + "\n", encoding="utf-8")
        if beside is not None:
            beside(staging)
    return directory


def checkpoint_fingerprint(directory: str | Path) -> str:
    """sha256 over a checkpoint's config.json and model.safetensors: what ties a later stage's
    record (Phase 3's orchestrator, Phase 1's stored reads) to these exact weights."""
    directory = Path(directory)
    digest = hashlib.sha256()
    for name in (CONFIG_FILE, WEIGHTS_FILE):
        path = directory / name
        if not path.is_file():
            raise CheckpointError(path, "missing (not a checkpoint directory?)")
        digest.update(name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def load_checkpoint(directory: str | Path, device: str | torch.device = "cpu") -> tuple[AegirModel, dict]:
    """Read a checkpoint written by `save_checkpoint`: (model in eval mode, config.json as a dict).

    Raises CheckpointError naming the file for a missing directory or file, invalid JSON, an
    unknown model config key, or weights that are not safetensors or do not fit the config.
    """
    config_dict, config, tensors = read_checkpoint(directory)
    model = AegirModel(config)
    load_weights(model, tensors, Path(directory) / WEIGHTS_FILE)
    return model.to(device).eval(), config_dict


def read_checkpoint(directory: str | Path) -> tuple[dict, AegirConfig, dict[str, torch.Tensor]]:
    """config.json as a dict, its model config, and the weights (safetensors, on the CPU)."""
    directory = Path(directory)
    config_path, weights_path = directory / CONFIG_FILE, directory / WEIGHTS_FILE
    if not directory.exists() and is_pipeline_output(directory):
        raise CheckpointError(directory, "checkpoint not found" + PIPELINE_HINT)
    for path in (config_path, weights_path):
        if not path.is_file():
            raise CheckpointError(path, "missing (not a checkpoint directory?)")
    try:
        config_dict = json.loads(config_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(config_path, f"not valid JSON: {err}") from None
    model_cfg = config_dict.get("model") if isinstance(config_dict, dict) else None
    if not isinstance(model_cfg, dict):
        raise CheckpointError(config_path, 'no "model" object with the model config')
    config = model_config_from(model_cfg, config_path)
    try:
        tensors = load_file(str(weights_path), device="cpu")
    except (SafetensorError, OSError, ValueError) as err:
        raise CheckpointError(weights_path, f"not a readable safetensors file: {err}") from None
    return config_dict, config, tensors


def model_config_from(model_cfg: dict, where: str | Path) -> AegirConfig:
    """An `AegirConfig` from a checkpoint's JSON, errors naming `where`."""
    known = {f.name for f in fields(AegirConfig)}
    unknown = sorted(set(model_cfg) - known)
    if unknown:
        raise CheckpointError(where, f"unknown model config keys {unknown}")
    try:
        return AegirConfig(**model_cfg)
    except (AegirError, TypeError) as err:
        raise CheckpointError(where, f"invalid model config: {err}") from None


def load_weights(module: torch.nn.Module, tensors: dict[str, torch.Tensor], where: str | Path) -> None:
    """`module.load_state_dict(tensors, strict=True)`, a mismatch as a CheckpointError."""
    try:
        module.load_state_dict(tensors, strict=True)
    except RuntimeError as err:
        raise CheckpointError(where, f"weights do not fit the config: {err}") from None

"""Orchestrator checkpoints: what Phase 3 trained, tied to the frozen specialists it fused.

A directory with `model.safetensors` (every trainable tensor: `primary.*`, `router*`,
`alignments.*`, `fusion.*` — never a specialist's weights) and `config.json`:

    {"model": <primary AegirConfig>,
     "orchestrator": {"activation_threshold": 0.5, "stream_seam": true,
                      "specialists": [{"name": "places", "checkpoint": "../phase1/places",
                                       "fingerprint": "<sha256>"}, …],
                      "subject_route": {"places": ["Hotel", …], …} or null},
     …extra (params, vocabularies, data fingerprint)}

Specialist paths are stored relative to the orchestrator's directory, so a checkout moved
elsewhere still finds them. Loading reads each specialist from its own checkpoint and checks
its fingerprint: a missing or changed specialist is a `CheckpointError` naming it, never a
silently different model. Nothing is unpickled.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

import torch

from aegir.model.checkpoint import (
    CONFIG_FILE,
    WEIGHTS_FILE,
    CheckpointError,
    checkpoint_fingerprint,
    load_checkpoint,
    load_weights,
    read_checkpoint,
    write_checkpoint,
)
from aegir.model.network import AegirModel
from aegir.orchestrator.model import SwarmOrchestrator, build_orchestrator


def config_has_section(directory: str | Path, section: str) -> bool:
    """True when `directory`'s config.json is an object whose `section` is an object (what tells
    an orchestrator's or a swarm's checkpoint from a plain model's); False when unreadable."""
    try:
        config = json.loads((Path(directory) / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(config, dict) and isinstance(config.get(section), dict)


def is_orchestrator_checkpoint(directory: str | Path) -> bool:
    """True when `directory`'s config.json describes an orchestrator (not a plain model)."""
    return config_has_section(directory, "orchestrator")


def save_orchestrator(directory: str | Path, orch: SwarmOrchestrator, specialist_dirs: dict[str, str | Path],
                      extra: dict | None = None) -> Path:
    """Write `orch`'s trainable weights and config; specialist_dirs: name → its checkpoint."""
    directory = Path(directory)
    extra = dict(extra or {})
    for key in ("model", "orchestrator"):
        if key in extra:
            raise ValueError(f"save_orchestrator: extra may not contain the key {key!r}")
    specialists = [{"name": name,
                    "checkpoint": os.path.relpath(Path(specialist_dirs[name]).resolve(), directory.resolve()),
                    "fingerprint": checkpoint_fingerprint(specialist_dirs[name])}
                   for name in orch.specialist_names]
    tensors = {name: p for name, p in orch.state_dict().items() if not name.startswith("specialists.")}
    payload = {"model": asdict(orch.primary.config),
               "orchestrator": {"activation_threshold": orch.activation_threshold, "specialists": specialists,
                                "stream_seam": orch.stream_seam, "column_seam": orch.column_seam,
                                "vote": orch.vote, "subject_route": orch.subject_route,
                                "vote_primary": orch.vote_primary},
               **extra}
    return write_checkpoint(directory, tensors, payload)


def load_orchestrator(directory: str | Path, device: str | torch.device = "cpu") -> tuple[SwarmOrchestrator, dict]:
    """(orchestrator in eval mode, config.json) of a checkpoint written by `save_orchestrator`."""
    directory = Path(directory)
    config_dict, primary_config, tensors = read_checkpoint(directory)
    meta = config_dict.get("orchestrator")
    config_path = directory / CONFIG_FILE
    if not isinstance(meta, dict) or not isinstance(meta.get("specialists"), list):
        raise CheckpointError(config_path, 'no "orchestrator" object listing its specialists')
    specialists: dict[str, AegirModel] = {}
    for entry in meta["specialists"]:
        if not isinstance(entry, dict) or not {"name", "checkpoint", "fingerprint"} <= set(entry):
            raise CheckpointError(config_path, f"bad specialist entry {entry!r}: needs name, checkpoint, fingerprint")
        where = (directory / entry["checkpoint"]).resolve()
        if not (where / CONFIG_FILE).is_file() or not (where / WEIGHTS_FILE).is_file():
            raise CheckpointError(where, f"specialist {entry['name']!r} of {directory} is missing "
                                         f"(run `dvc repro` or `dvc pull` to restore the Phase 1 checkpoints)")
        found = checkpoint_fingerprint(where)
        if found != entry["fingerprint"]:
            raise CheckpointError(where, f"specialist {entry['name']!r} has changed since {directory} was trained "
                                         f"(fingerprint {found[:12]}… ≠ recorded {entry['fingerprint'][:12]}…); "
                                         f"rerun phase3 (`dvc repro phase3`)")
        specialists[entry["name"]], _ = load_checkpoint(where)
    threshold = meta.get("activation_threshold", 0.5)
    if not isinstance(threshold, (int, float)) or not 0 < threshold < 1:
        raise CheckpointError(config_path, f"activation_threshold must be in (0, 1), got {threshold!r}")
    stream_seam = meta.get("stream_seam", False)  # checkpoints from before the stream seam: off
    if not isinstance(stream_seam, bool):
        raise CheckpointError(config_path, f"stream_seam must be true or false, got {stream_seam!r}")
    column_seam = meta.get("column_seam", False)  # checkpoints from before the column seam: off
    if not isinstance(column_seam, bool) or (column_seam and not stream_seam):
        raise CheckpointError(config_path, f"column_seam must be true or false (true only with stream_seam), "
                                           f"got {column_seam!r}")
    vote = meta.get("vote", False)  # checkpoints from before the output seam: off
    if not isinstance(vote, bool):
        raise CheckpointError(config_path, f"vote must be true or false, got {vote!r}")
    vote_primary = meta.get("vote_primary", False)  # checkpoints from before the frozen primary voted: off
    if not isinstance(vote_primary, bool):
        raise CheckpointError(config_path, f"vote_primary must be true or false, got {vote_primary!r}")
    subject_route = meta.get("subject_route")  # checkpoints from before the subject rule: off
    if subject_route is not None and not (
            isinstance(subject_route, dict) and set(subject_route) <= set(specialists)
            and all(isinstance(d, list) and all(isinstance(x, str) for x in d) for d in subject_route.values())):
        raise CheckpointError(config_path, f"subject_route must be null or map specialists to lists of domains, "
                                           f"got {subject_route!r}")
    try:
        orch = build_orchestrator(AegirModel(primary_config), specialists, float(threshold), stream_seam=stream_seam,
                                  column_seam=column_seam, vote=vote, subject_route=subject_route,
                                  vote_primary=vote_primary)
    except ValueError as exc:
        raise CheckpointError(config_path, str(exc)) from None
    frozen = {name: p for name, p in orch.state_dict().items() if name.startswith("specialists.")}
    load_weights(orch, {**tensors, **frozen}, directory / WEIGHTS_FILE)
    return orch.to(device).eval(), config_dict

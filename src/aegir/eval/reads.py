"""A Phase 1 model's label distributions on every read of the evaluation splits, kept beside
its checkpoint so that Phase 3 does not compute them again.

Phase 1 scores each agent on every evaluation split (`aegir.eval.grouped`: column groups, row
views), and Phase 3 scores the same frozen checkpoints on the same reads again: the Phase 1
variant, each specialist alone, and the output ensemble of the primary and the specialists its
router activates. The `phase1` stage therefore writes, into the checkpoint directory (atomically
with the weights, `aegir.model.checkpoint.write_checkpoint`), `eval_reads.safetensors`:

* per split, `<split>/cta` and `<split>/cpa`: (columns of all reads, labels) float32, each
  column's softmax in read order, as the forward computed it; `<split>/columns`: (reads,) int64,
  each read's column count; Phase 4's store (one read per table, its learned policy's merged
  distributions) adds `<split>/spawned`: (reads,) int64, 1 where a sub-agent ran, and
  `<split>/deep`: 1 where deep search ran (`aegir.swarm.evaluate.merged_distributions`, read by
  `StoredReads.table_flags`);
* metadata: the fingerprint of the checkpoint it was computed with (config.json and the weights),
  the prepared data's fingerprint, the `reading` and `prepare` settings, and per split a digest of
  the reads (table ids and column counts, in order).

Phase 3 takes a split's distributions only when all of these match what it is about to read, and
computes them otherwise. The same forward on the same batches gives the same bits, so Phase 3's
scores do not depend on which it did (tests/test_phase3.py runs it both ways and compares bytes).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from aegir.data.dataset import Example
from aegir.eval.predict import TablePrediction

READS_FILE = "eval_reads.safetensors"
METADATA_KEY = "aegir_eval_reads"
TASKS = ("cta", "cpa")


def reads_digest(reads: Sequence[Example]) -> str:
    """sha256 of the reads' table ids and column counts, in order."""
    digest = hashlib.sha256()
    for read in reads:
        digest.update(f"{read.table_id}\t{read.num_columns}\n".encode())
    return digest.hexdigest()


def dense_distributions(predictions: Sequence[TablePrediction], labels: Mapping[str, int]) -> dict[str, torch.Tensor]:
    """Every column's whole label distribution, from predictions that hold all labels
    (top_k = aegir.eval.grouped.ALL_LABELS): {task: (columns, labels)}, and "columns": (reads,)."""
    out: dict[str, torch.Tensor] = {}
    for task in TASKS:
        ids = [getattr(p, f"{task}_ids") for p in predictions]
        probs = [getattr(p, f"{task}_probs") for p in predictions]
        width = labels[task]
        if any(i.ndim != 2 or i.shape[1] != width for i in ids):
            raise ValueError(f"dense_distributions: {task} predictions do not hold all {width} labels")
        if not ids:
            out[task] = torch.zeros(0, width, dtype=torch.float32)
            continue
        ids_all, probs_all = np.concatenate(ids), np.concatenate(probs).astype(np.float32, copy=False)
        dense = np.zeros((len(ids_all), width), dtype=np.float32)
        np.put_along_axis(dense, ids_all.astype(np.int64), probs_all, axis=1)
        out[task] = torch.from_numpy(dense)
    out["columns"] = torch.tensor([len(p.cta_ids) for p in predictions], dtype=torch.int64)
    return out


def save_eval_reads(path: str | Path, splits: Mapping[str, tuple[Sequence[Example], dict[str, torch.Tensor]]],
                    meta: Mapping[str, object]) -> None:
    """Write `path` (safetensors): per split its reads' `dense_distributions`, and `meta`
    (JSON-serialisable values) plus each split's `reads_digest` as metadata."""
    tensors, metadata = {}, {key: json.dumps(value, sort_keys=True) for key, value in meta.items()}
    for split, (reads, dense) in splits.items():
        for name, tensor in dense.items():
            tensors[f"{split}/{name}"] = tensor.contiguous()
        metadata[f"reads/{split}"] = reads_digest(reads)
    # one metadata entry: safetensors writes a metadata map in no fixed order, and the file is
    # a versioned output that must come out byte-identical
    save_file(tensors, str(path), metadata={METADATA_KEY: json.dumps(metadata, sort_keys=True)})


class StoredReads:
    """The distributions one checkpoint's `eval_reads.safetensors` holds, read split by split."""

    def __init__(self, path: Path, metadata: dict[str, str]):
        self.path, self.metadata = path, metadata

    @classmethod
    def open(cls, directory: str | Path, meta: Mapping[str, object]) -> tuple[StoredReads | None, str]:
        """The file in checkpoint `directory` if its metadata equals `meta` (key by key), with
        "" — or None and why not (no file, unreadable, a setting that differs)."""
        path = Path(directory) / READS_FILE
        if not path.is_file():
            return None, f"no {READS_FILE}"
        try:
            with safe_open(str(path), framework="pt") as f:
                metadata = json.loads((f.metadata() or {})[METADATA_KEY])
        except (SafetensorError, OSError, ValueError, KeyError, TypeError) as err:
            return None, f"{path}: unreadable ({err!r})"
        for key, value in meta.items():
            if metadata.get(key) != json.dumps(value, sort_keys=True):
                return None, f"{path}: computed with another {key}"
        return cls(path, metadata), ""

    def split(self, split: str, reads: Sequence[Example]) -> list[dict[str, torch.Tensor]] | None:
        """Per read {"cta": (C, labels), "cpa": (C, labels)}, in the order of `reads`, or None
        when the file holds other reads for `split` (or none)."""
        if self.metadata.get(f"reads/{split}") != reads_digest(reads):
            return None
        with safe_open(str(self.path), framework="pt") as f:
            columns = f.get_tensor(f"{split}/columns").tolist()
            per_task = {task: f.get_tensor(f"{split}/{task}").split(columns) for task in TASKS}
        return [{task: per_task[task][i] for task in TASKS} for i in range(len(columns))]

    def table_flags(self, split: str, reads: Sequence[Example], name: str) -> list[bool] | None:
        """One flag per read from the per-read tensor `name` of `split` (e.g. Phase 4's `spawned`),
        or None when the file holds other reads for `split`, or no such tensor."""
        if self.metadata.get(f"reads/{split}") != reads_digest(reads):
            return None
        with safe_open(str(self.path), framework="pt") as f:
            if f"{split}/{name}" not in f.keys():  # noqa: SIM118 (a safetensors handle)
                return None
            return [bool(x) for x in f.get_tensor(f"{split}/{name}").tolist()]


def stored_predictions(store: StoredReads, split: str, reads: Sequence[Example]) -> list[TablePrediction] | None:
    """One prediction per read, every label best first, from the distributions `store` holds for
    `split` (None when it holds other reads): what the checkpoint's model predicted there."""
    distributions = store.split(split, reads)
    if distributions is None:
        return None
    out = []
    for read, dist in zip(reads, distributions):
        # as the model's own predictions were ranked (aegir.eval.predict.predictions_from_probs)
        cta_p, cta_i = dist["cta"].topk(dist["cta"].shape[-1], dim=-1)
        cpa_p, cpa_i = dist["cpa"].topk(dist["cpa"].shape[-1], dim=-1)
        out.append(TablePrediction(table_id=read.table_id, cta_ids=cta_i.numpy(), cta_probs=cta_p.numpy(),
                                   cpa_ids=cpa_i.numpy(), cpa_probs=cpa_p.numpy(), activation=None))
    return out

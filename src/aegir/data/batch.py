"""The padded batch every model consumes; built by `aegir.data.dataset.collate`.

Byte ids 0..255 are raw bytes; specials sit above them (see `aegir.data.serialize`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

IGNORE_INDEX = -100  # label value for "no label" (and for padding columns)


@dataclass
class Batch:
    """B tables, padded to T bytes and C columns.

    byte_ids:     (B, T) long, PAD_ID where byte_mask is False
    byte_mask:    (B, T) bool, True on real bytes
    column_spans: (B, C, 2) long, [start, end) of each column's cell bytes; the stream holds
                  COLUMN_SEP at index `end` (every column, the last one included, is
                  terminated by it), so position `end` has read the whole column
    column_mask:  (B, C) bool, True on real columns
    cta_labels:   (B, C) long, CTA class id or IGNORE_INDEX
    cpa_labels:   (B, C) long, CPA class id of (column 0, column c) or IGNORE_INDEX; column 0
                  is always IGNORE_INDEX
    """

    byte_ids: torch.Tensor
    byte_mask: torch.Tensor
    column_spans: torch.Tensor
    column_mask: torch.Tensor
    cta_labels: torch.Tensor
    cpa_labels: torch.Tensor

    def to(self, device: torch.device | str) -> Batch:
        return Batch(**{f.name: getattr(self, f.name).to(device) for f in fields(self)})

    def select(self, index: torch.Tensor) -> Batch:
        """The sub-batch of the tables at `index` (a 1-D long tensor of batch rows)."""
        return Batch(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    @property
    def batch_size(self) -> int:
        return self.byte_ids.shape[0]


def padded(rows: list[torch.Tensor], fill: float | int | bool, width: int | None = None) -> torch.Tensor:
    """Stack (C_i, …) tensors into (N, width, …) of their dtype, `fill` where a row is shorter;
    `width` None: the longest C_i."""
    width = max(r.shape[0] for r in rows) if width is None else width
    out = torch.full((len(rows), width, *rows[0].shape[1:]), fill, dtype=rows[0].dtype)
    for i, r in enumerate(rows):
        out[i, :r.shape[0]] = r
    return out

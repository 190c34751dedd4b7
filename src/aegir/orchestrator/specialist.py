"""Frozen specialists and the projection of their states into the primary's state space.

A specialist is a Phase 1 checkpoint that Phase 3 never trains. What it hands the primary is
its *read* of a table (`SpecialistRead`): the final state of each of its main-network layers
(`LayerState`) after the whole table, which a causal primary has not yet seen when it starts
reading column 0, and — with the stream seam on — its decoder's output at every byte, the
readout of its recurrent states where each column is read (`aegir.orchestrator.fusion` says why
both). Without the stream the read stops after the main network; pooling and heads never run.

Specialist and primary may differ in shape (the `small` preset has d_model 64 = 2 heads of 32,
the `cpu` preset d_model 96 = 3 heads of 32). `AlignmentProjection` maps one into the other per
head with small factors, never as a flattened full matrix:

    wkv'[h] = A[h] · (Σ_g M[h, g] · wkv[g]) · B[h]ᵀ        A[h]: (K, K_s), B[h]: (V, V_s), M: (H, H_s)
    shift'  = P · shift                                      P: (D, D_s), one per token-shift state
    stream' = P_stream · stream                              P_stream: (D, D_s), per byte (stream seam)

where h runs over the primary's heads and g over the specialist's. Each factor starts as the
identity where the shapes agree (so a same-shape specialist's state passes through unchanged)
and as a truncated identity (ones on the leading diagonal) where they do not: never all zeros,
because the fusion gates start at zero and a zero factor behind a zero gate would get no
gradient. A specialist with a different number of main layers feeds primary layer l from its
layer ⌊l · L_s / L⌋.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn

from aegir.data.batch import Batch
from aegir.model.checkpoint import CheckpointError, load_checkpoint
from aegir.model.chunking import chunk
from aegir.model.network import AegirModel
from aegir.model.rwkv import LayerState


@dataclass
class SpecialistRead:
    """What one specialist hands over for a batch. states: its main network's final state per
    layer, (B, H_s, K_s, K_s) wkv and (B, D_s) token-shift vectors; stream: its decoder's
    output per byte, (B, T, D_s), or None when the stream seam is off; with the column seam,
    columns: its column vectors (B, C, D_s), and labels: the CTA and CPA logits its own heads
    gave on them (computed with the columns anyway; the output seam's votes), else None."""

    states: list[LayerState]
    stream: torch.Tensor | None = None
    columns: torch.Tensor | None = None
    labels: tuple[torch.Tensor, torch.Tensor] | None = None

    def _tensors(self) -> list[torch.Tensor | None]:
        return [self.stream, self.columns, *(self.labels or (None, None))]

    def _rebuilt(self, states: list[LayerState], tensors: list[torch.Tensor | None]) -> SpecialistRead:
        stream, columns, cta, cpa = tensors
        return SpecialistRead(states, stream, columns, None if cta is None else (cta, cpa))

    def select(self, rows: torch.Tensor) -> SpecialistRead:
        return self._rebuilt([s.select(rows) for s in self.states],
                             [None if t is None else t[rows] for t in self._tensors()])

    def scatter(self, rows: torch.Tensor, batch_size: int) -> SpecialistRead:
        """Rows `rows` of a batch of `batch_size`; the other rows hold zeros."""
        return self._rebuilt([s.scatter(rows, batch_size) for s in self.states],
                             [None if t is None else t.new_zeros(batch_size, *t.shape[1:]).index_copy(0, rows, t)
                              for t in self._tensors()])


class FrozenSpecialist(nn.Module):
    """A Phase 1 model that is never trained: eval mode, no gradients, read under no_grad.

    `forward(batch)` returns its `SpecialistRead`: the main network's final state per layer
    (the state after each row's last real chunk) and, when `stream` is set, the decoder's
    output per byte.
    """

    def __init__(self, model: AegirModel, name: str = "specialist", stream: bool = False,
                 columns: bool = False):
        super().__init__()
        if columns and not stream:
            raise ValueError("the column seam reads the specialist's stream: it needs stream=True")
        self.name = name
        self.stream = stream
        self.columns = columns
        self.model = model.eval().requires_grad_(False)

    def train(self, mode: bool = True) -> FrozenSpecialist:
        # a frozen model stays in eval mode whatever its parent module is switched to
        return super().train(False)

    @property
    def config(self):
        return self.model.config

    @torch.no_grad()
    def forward(self, batch: Batch) -> SpecialistRead:
        model = self.model
        encoded = model.encode(batch)
        if self.stream:
            stream, final_state = model.byte_stream(batch, encoded)
            if not self.columns:
                return SpecialistRead(final_state, stream)
            cta, cpa, columns = model.label_logits(batch, stream)
            return SpecialistRead(final_state, stream, columns, (cta, cpa))
        chunk_h, chunk_mask = chunk(encoded.hidden, encoded.routing.boundary_mask)  # (B, L, D_s)
        _, final_state = model.main(chunk_h, chunk_mask)
        return SpecialistRead(final_state)

    def read(self, batch: Batch, rows: torch.Tensor) -> SpecialistRead:
        """Read only the tables at `rows` (1-D long) and scatter the read back into a
        batch-sized one: rows that did not run hold zeros."""
        return self(batch.select(rows)).scatter(rows, batch.batch_size)


def _eye(rows: int, cols: int, copies: int) -> torch.Tensor:
    """`copies` stacked (rows, cols) identities (truncated where rows ≠ cols)."""
    return torch.eye(rows, cols).expand(copies, rows, cols).clone()


class AlignmentProjection(nn.Module):
    """Per-head state alignment of one specialist into the primary's shape (module docstring).

    source_*: the specialist's main network (heads, head size, d_model, layers);
    target_*: the primary's. `forward(states)` maps the specialist's per-layer states to one
    state per primary layer, (B, H, K, K) wkv and (B, D) token-shift vectors.
    """

    def __init__(self, source_heads: int, source_head_size: int, source_layers: int,
                 target_heads: int, target_head_size: int, target_layers: int, stream: bool = False,
                 columns: bool = False):
        super().__init__()
        Hs, Ks, H, K = source_heads, source_head_size, target_heads, target_head_size
        self.source_layers, self.target_layers = source_layers, target_layers
        self.source_heads, self.target_heads = Hs, H
        Ds, D = Hs * Ks, H * K
        self.head_mix = nn.Parameter(torch.stack([_head_mix_init(H, Hs) for _ in range(target_layers)]))  # (L, H, Hs)
        self.key_proj = nn.Parameter(torch.stack([_eye(K, Ks, H) for _ in range(target_layers)]))  # (L, H, K, Ks)
        self.value_proj = nn.Parameter(torch.stack([_eye(K, Ks, H) for _ in range(target_layers)]))  # (L, H, V, Vs)
        self.shift_time = nn.Parameter(torch.stack([torch.eye(D, Ds) for _ in range(target_layers)]))  # (L, D, Ds)
        self.shift_channel = nn.Parameter(torch.stack([torch.eye(D, Ds) for _ in range(target_layers)]))
        # the stream seam: the specialist's decoder output per byte into the primary's width
        self.stream_proj = nn.Parameter(torch.eye(D, Ds)) if stream else None
        # the column seam: its column vectors into the primary's width
        self.column_proj = nn.Parameter(torch.eye(D, Ds)) if columns else None

    def align_columns(self, columns: torch.Tensor) -> torch.Tensor:
        """(B, C, D_s) → (B, C, D): a specialist's column vectors in the primary's width."""
        if self.column_proj is None:
            raise ValueError("this alignment was built without the column seam")
        return columns @ self.column_proj.T

    def align_stream(self, stream: torch.Tensor) -> torch.Tensor:
        """(B, T, D_s) → (B, T, D): a specialist's byte stream in the primary's width."""
        if self.stream_proj is None:
            raise ValueError("this alignment was built without the stream seam")
        return stream @ self.stream_proj.T

    def source_layer(self, layer: int) -> int:
        return layer * self.source_layers // self.target_layers

    def forward(self, states: list[LayerState]) -> list[LayerState]:
        if len(states) != self.source_layers:
            raise ValueError(f"expected {self.source_layers} specialist layer states, got {len(states)}")
        out = []
        for layer in range(self.target_layers):
            s = states[self.source_layer(layer)]
            if s.wkv.shape[1] != self.source_heads:
                raise ValueError(f"specialist state has {s.wkv.shape[1]} heads, expected {self.source_heads}")
            mixed = torch.einsum("hg,bgkv->bhkv", self.head_mix[layer], s.wkv)  # (B, H, Ks, Vs)
            wkv = self.key_proj[layer] @ mixed @ self.value_proj[layer].transpose(-1, -2)  # (B, H, K, V)
            out.append(LayerState(
                wkv=wkv,
                shift_time=s.shift_time @ self.shift_time[layer].T,  # (B, D)
                shift_channel=s.shift_channel @ self.shift_channel[layer].T,
            ))
        return out


def _head_mix_init(target_heads: int, source_heads: int) -> torch.Tensor:
    """Identity where the head counts agree; otherwise primary head h starts from specialist
    head h mod H_s (every primary head reads one specialist head, none reads zeros)."""
    mix = torch.zeros(target_heads, source_heads)
    mix[torch.arange(target_heads), torch.arange(target_heads) % source_heads] = 1.0
    return mix


def alignment_for(specialist: AegirModel, primary: AegirModel, stream: bool = False,
                  columns: bool = False) -> AlignmentProjection:
    """The `AlignmentProjection` from `specialist`'s main network into `primary`'s (and, with
    `stream` / `columns`, from its byte stream / column vectors into the primary's width)."""
    s, p = specialist.config, primary.config
    return AlignmentProjection(s.d_model // s.head_size, s.head_size, s.main_layers,
                               p.d_model // p.head_size, p.head_size, p.main_layers, stream, columns)


def load_agents(models_dir: str | Path, names: list[str]) -> dict[str, AegirModel]:
    """name → the Phase 1 model at `models_dir/<name>/`, in eval mode, each checked to carry
    heads over the fixed label vocabularies (a `CheckpointError` naming it otherwise)."""
    from aegir.labels import cpa_vocab, cta_vocab

    models = {}
    for name in names:
        directory = Path(models_dir) / name
        model, _ = load_checkpoint(directory)
        if model.config.n_cta != len(cta_vocab()) or model.config.n_cpa != len(cpa_vocab()):
            raise CheckpointError(directory, f"heads of {model.config.n_cta}/{model.config.n_cpa} classes, "
                                             f"expected {len(cta_vocab())}/{len(cpa_vocab())} (CTA/CPA)")
        models[name] = model
    return models

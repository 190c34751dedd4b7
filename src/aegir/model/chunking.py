"""H-Net dynamic chunking (arXiv 2507.07955): routing, chunk, dechunk, ratio loss.

* Routing: p_t = ½(1 − cos(W_q h_t, W_k h_{t−1})), p_0 = 1; a byte is a boundary (the first byte
  of a new chunk) where p_t ≥ ½. W_q, W_k start as the identity, as in H-Net.
* Chunk: keep the hidden vectors at boundaries, packed to the front and right-padded.
* Dechunk: smooth the main network's chunk outputs with an EMA weighted by the boundary
  probability, z̄_j = p_j z_j + (1 − p_j) z̄_{j−1}, then give each byte the smoothed vector of
  the chunk it lies in (the last boundary at or before it — causal). The model multiplies the
  result by a straight-through confidence (forward 1, gradient of c_t, c_t = p_t at a boundary
  and 1 − p_t elsewhere), which is how the routing gets a gradient from the task loss.
* Ratio loss: N/(N−1)·((N−1)·F·G + (1−F)(1−G)), F = share of boundaries, G = mean p, over real
  bytes of the whole batch; its minimum sits at F = G = 1/N, where it equals 1.

Departures from H-Net:
* Threshold p ≥ ½ (H-Net takes the argmax of (1 − p, p), which calls p = ½ a non-boundary).
* `forced_boundary`: the model may force boundaries (with p = 1, like p_0) at given bytes; it
  forces one at every COLUMN_SEP so that the byte that has read a whole column enters the main
  network as a chunk of its own start (see `aegir.model.network`).
* Padded positions get p = 0 and are never boundaries.
* The EMA is a sequential loop (reference) and a dense (L × L) lower-triangular weighting in
  log space (the parallel form) instead of H-Net's Mamba-2 scan kernel; O(L²) memory per row,
  L = number of chunks. Both EMA paths run in float32 under autocast (`float32_op`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from aegir.model.ops.precision import float32_op

EMA_PROB_EPS = 1e-4  # p is clamped to [eps, 1 − eps] inside the EMA, as in H-Net


@dataclass
class RoutingOutput:
    """boundary_prob: (B, T) float, p_t (0 on padding); boundary_mask: (B, T) bool;
    selected_prob: (B, T) float, the confidence c_t = p_t at boundaries, 1 − p_t elsewhere."""

    boundary_prob: torch.Tensor
    boundary_mask: torch.Tensor
    selected_prob: torch.Tensor


@dataclass
class ChunkStats:
    """Detached scalars for logging: F (share of real bytes that are boundaries), G (mean
    boundary probability over real bytes), ratio (real bytes per chunk, 1/F)."""

    F: torch.Tensor
    G: torch.Tensor
    ratio: torch.Tensor


class RoutingModule(nn.Module):
    """Boundary probabilities from the cosine similarity of adjacent encoder vectors."""

    def __init__(self, d_model: int):
        super().__init__()
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, d_model, bias=False)
        with torch.no_grad():
            self.q_proj.weight.copy_(torch.eye(d_model))
            self.k_proj.weight.copy_(torch.eye(d_model))

    def forward(self, h: torch.Tensor, mask: torch.Tensor | None = None,
                forced_boundary: torch.Tensor | None = None) -> RoutingOutput:
        """h: (B, T, D); mask: (B, T) bool (True on real bytes) or None;
        forced_boundary: (B, T) bool or None — bytes made boundaries with p = 1."""
        B, T, _ = h.shape
        q = F.normalize(self.q_proj(h[:, 1:]), dim=-1)  # (B, T-1, D), from h_t
        k = F.normalize(self.k_proj(h[:, :-1]), dim=-1)  # (B, T-1, D), from h_{t-1}
        cos = (q * k).sum(-1)  # (B, T-1)
        p = torch.cat([h.new_ones(B, min(T, 1)), ((1 - cos) / 2).clamp(0.0, 1.0)], dim=1)  # (B, T)
        if forced_boundary is not None:
            p = torch.where(forced_boundary, torch.ones_like(p), p)
        if mask is not None:
            p = torch.where(mask, p, torch.zeros_like(p))
        boundary = p >= 0.5
        if mask is not None:
            boundary = boundary & mask
        selected = torch.where(boundary, p, 1 - p)
        return RoutingOutput(boundary_prob=p, boundary_mask=boundary, selected_prob=selected)


def _boundary_positions(boundary_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions of the boundaries, packed to the front: (B, L) long, and chunk_mask (B, L)."""
    B, T = boundary_mask.shape
    counts = boundary_mask.sum(dim=1)  # (B,)
    L = max(1, int(counts.max())) if B else 1
    t = torch.arange(T, device=boundary_mask.device).expand(B, T)
    key = torch.where(boundary_mask, t, t + T)  # boundaries first, each group in order
    positions = key.argsort(dim=1)[:, :L] if T else t.new_zeros(B, L)  # keys unique → deterministic
    chunk_mask = torch.arange(L, device=t.device)[None, :] < counts[:, None]
    return positions, chunk_mask


def chunk(h: torch.Tensor, boundary_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """h: (B, T, D); boundary_mask: (B, T) bool.

    Returns chunk_h (B, L, D), the vectors at the boundaries in order, zero after each row's
    last chunk, and chunk_mask (B, L) bool; L = the most boundaries in any row (at least 1).
    """
    positions, chunk_mask = _boundary_positions(boundary_mask)
    chunk_h = torch.gather(h, 1, positions[..., None].expand(-1, -1, h.shape[-1]))
    return chunk_h * chunk_mask[..., None], chunk_mask


@float32_op
def ema_sequential(z: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """Reference EMA: out_j = p_j z_j + (1 − p_j) out_{j−1}, out_{−1} = 0.
    z: (B, L, D); p: (B, L) in [0, 1]. Returns (B, L, D)."""
    out, prev = [], torch.zeros_like(z[:, 0]) if z.shape[1] else None
    for j in range(z.shape[1]):
        prev = p[:, j, None] * z[:, j] + (1 - p[:, j, None]) * prev
        out.append(prev)
    return torch.stack(out, dim=1) if out else torch.zeros_like(z)


@float32_op
def ema_parallel(z: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """The same EMA in closed form: out_j = Σ_{i≤j} p_i Π_{i<m≤j}(1 − p_m) z_i, the products
    taken as exp of differences of cumulative log(1 − p) (each ≤ 0: no overflow).
    Needs p < 1 (the model clamps to [EMA_PROB_EPS, 1 − EMA_PROB_EPS]). (B, L, D) → (B, L, D)."""
    L = z.shape[1]
    c = torch.cumsum(torch.log1p(-p), dim=1)  # (B, L)
    diff = c[:, :, None] - c[:, None, :]  # (B, L_j, L_i): log Π_{i<m≤j}(1 − p_m)
    causal = torch.ones(L, L, dtype=torch.bool, device=z.device).tril()
    weight = torch.exp(diff.masked_fill(~causal, float("-inf"))) * p[:, None, :]  # (B, L, L)
    return weight.to(z.dtype) @ z


def dechunk(chunk_out: torch.Tensor, boundary_mask: torch.Tensor, boundary_prob: torch.Tensor,
            chunk_mask: torch.Tensor,
            ema: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
    """Chunk outputs back to bytes.

    chunk_out: (B, L, D) main-network outputs; boundary_mask, boundary_prob: (B, T);
    chunk_mask: (B, L). Returns (B, T, D): byte t gets the EMA-smoothed output of the chunk
    that starts at the last boundary ≤ t (bytes before any boundary, or padded, get chunk 0's
    or the last chunk's vector; the model masks them). `ema`: `ema_parallel` (default) or the
    reference `ema_sequential`.
    """
    positions, _ = _boundary_positions(boundary_mask)
    p = torch.gather(boundary_prob, 1, positions)  # (B, L)
    # padded chunks (unused) restart the EMA; the clamp keeps log(1 − p) finite everywhere, which
    # the parallel form needs (a −∞ there would give NaN gradients through 0 · NaN)
    p = torch.where(chunk_mask, p, torch.ones_like(p)).clamp(EMA_PROB_EPS, 1 - EMA_PROB_EPS)
    smoothed = (ema or ema_parallel)(chunk_out, p)  # (B, L, D)
    index = (torch.cumsum(boundary_mask.long(), dim=1) - 1).clamp(0, chunk_out.shape[1] - 1)
    return torch.gather(smoothed, 1, index[..., None].expand(-1, -1, chunk_out.shape[-1]))


def straight_through_ones(c: torch.Tensor) -> torch.Tensor:
    """Exactly 1 in the forward pass; gradient 1 w.r.t. c in the backward pass (H-Net's STE)."""
    return 1.0 + (c - c.detach())


def ratio_loss(boundary_mask: torch.Tensor, boundary_prob: torch.Tensor, target_N: float,
               mask: torch.Tensor | None = None) -> torch.Tensor:
    """N/(N−1)·((N−1)·F·G + (1−F)(1−G)) over the real bytes of the batch (mask), a scalar;
    differentiable through G. target_N > 1 (the target bytes per chunk)."""
    if mask is None:
        mask = torch.ones_like(boundary_mask)
    n = mask.sum().clamp(min=1)
    F_ = (boundary_mask & mask).sum() / n
    G = torch.where(mask, boundary_prob, torch.zeros_like(boundary_prob)).sum() / n
    return ratio_loss_of(F_, G, target_N)


def ratio_loss_of(F_: torch.Tensor, G: torch.Tensor, target_N: float) -> torch.Tensor:
    """The ratio loss N/(N−1)·((N−1)·F·G + (1−F)(1−G)) of a boundary share F and a mean
    boundary probability G (scalars)."""
    if target_N <= 1:
        raise ValueError(f"ratio_loss: target_N must be > 1, got {target_N}")
    N = target_N
    return N / (N - 1) * ((N - 1) * F_ * G + (1 - F_) * (1 - G))


def chunk_stats(boundary_mask: torch.Tensor, boundary_prob: torch.Tensor,
                mask: torch.Tensor | None = None) -> ChunkStats:
    if mask is None:
        mask = torch.ones_like(boundary_mask)
    n = mask.sum().clamp(min=1)
    F_ = ((boundary_mask & mask).sum() / n).detach()
    G = (torch.where(mask, boundary_prob, torch.zeros_like(boundary_prob)).sum() / n).detach()
    return ChunkStats(F=F_, G=G, ratio=1.0 / F_.clamp(min=1e-9))

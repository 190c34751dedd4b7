"""RWKVStateFusion: the activated specialists' aligned states, gated per head, become the
initial state of every layer of the primary's main network.

For primary layer l, head h, batch row b and specialists s = 1..S:

    wkv₀[b, l, h]   = Σ_s m[b, s] · g[s, l, h] · wkv'_s[b, l, h]          (K × K matrices)
    shift₀[b, l, h] = Σ_s m[b, s] · q[s, l, h] · shift'_s[b, l, h]        (the head's channels)

m is the activation mask (a specialist that is not activated contributes exactly nothing: its
term is selected away with `torch.where`, not multiplied, so even a non-finite state of a row
that did not run cannot leak in), g and q are learned gates, one per (specialist, layer, head),
**initialised to zero**: the untrained orchestrator's initial state is the zero state, i.e. it
is exactly the Phase 1 model.

Where the fused state reaches. Each main layer's state is the seam of that layer alone, and
RWKV-7's per-channel decays (and the delta rule's removals) wash an initial state out at a rate
set by the head and by what the chunks write. So every main layer gets its own fused state and
every head its own gate. `state_survival` measures the share of the fused wkv state still in
the state when the primary reaches each column; Phase 3 writes it to its report. Measured on 64
valid tables of the embedded benchmark with a trained fusion (`cpu` primary, chunks of ~15
bytes): about 0.9 of it is left at column 0, 0.7 at column 2 and 0.55 at column 8, in both main
layers — washed down, not washed out.

Washed down was not enough: what a specialist knows about each column does not survive in its
*final* state (linear probes recover 12–31 % of its domains' labels from it, against 80–90 % from
its column vectors; docs/experiments.md, "Why the seam carries nothing"), and a seam that only
starts the primary's read left the fused model at its control. So the fusion has a second,
**stream seam** (`stream=True`): each activated specialist's decoder output at every byte — the
readout of its recurrent states at the moment it reads that byte — is aligned and added, gated
per head, to the primary's decoder output before the columns are pooled:

    stream₀[b, t, h] = Σ_s m[b, s] · p[s, h] · (P_s · y_s[b, t])[h]      (the head's channels)

p starts at zero like g and q, so the stream seam too starts as the Phase 1 model. The primary
then pools, attends across columns and labels from the sum, so what the specialist read at
column c reaches column c's label directly, whatever happened to its state afterwards.

The stream is still a byte-level signal that the primary's own pooling and column attention
must learn to read. What a specialist has *concluded* about each column is in its column
vectors, after its own pooling and attention across the table's columns (the probes of
docs/experiments.md recover 80–90 % of its domains' labels from them). The **column seam**
(`columns=True`) hands those over: each activated specialist's column vectors, aligned into
the primary's width, join the primary's column vectors right before its heads as a gated mean,
per head h:

    col[b, c, h] = (col_p[b, c, h] + Σ_s m[b, s] · e^{θ[s, h]} · (P_s · col_s[b, c])[h])
                   / (1 + Σ_s m[b, s] · e^{θ[s, h]})

The weights e^θ are positive, so the result stays a convex mix of vectors the heads can read;
θ starts at log(`column_gate_init`) (1: the plain mean of the primary's and the activated
specialists' vectors, the representation-level analogue of the output ensemble) and the
primary's heads, trained in Phase 3, learn to read the mix.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from aegir.data.batch import Batch
from aegir.model.chunking import chunk
from aegir.model.network import AegirModel
from aegir.model.rwkv import LayerState


class RWKVStateFusion(nn.Module):
    """Gated, per-head, activation-masked sum of aligned specialist states (module docstring).

    num_heads, head_size: the primary's main network; num_agents: the specialists S;
    num_layers: the primary's main layers. forward(aligned, activation_mask) with aligned[s][l]
    a `LayerState` of specialist s in the primary's shape and activation_mask (B, S) bool →
    one `LayerState` per primary layer, (B, H, K, K) wkv and (B, D) token-shift vectors.
    """

    def __init__(self, num_heads: int, head_size: int, num_agents: int, num_layers: int = 1,
                 stream: bool = False, columns: bool = False):
        super().__init__()
        self.num_heads, self.head_size = num_heads, head_size
        self.num_agents, self.num_layers = num_agents, num_layers
        self.wkv_gate = nn.Parameter(torch.zeros(num_agents, num_layers, num_heads))
        self.shift_gate = nn.Parameter(torch.zeros(num_agents, num_layers, num_heads))
        self.stream_gate = nn.Parameter(torch.zeros(num_agents, num_heads)) if stream else None
        # the column seam's log-weights θ (e^0 = 1: the plain mean; Phase 3 sets its own start)
        self.column_gate = nn.Parameter(torch.zeros(num_agents, num_heads)) if columns else None

    @property
    def columns(self) -> bool:
        """Whether the column seam is on."""
        return self.column_gate is not None

    def fuse_columns(self, primary: torch.Tensor, columns: list[torch.Tensor],
                     activation_mask: torch.Tensor) -> torch.Tensor:
        """primary: the primary's column vectors (B, C, D); columns[s]: specialist s's aligned
        column vectors (B, C, D); activation_mask (B, S) bool → the gated mean (module
        docstring), (B, C, D). A row that activated no specialist keeps its own vectors exactly."""
        if not self.columns:
            raise ValueError("this fusion was built without the column seam")
        if len(columns) != self.num_agents or activation_mask.shape[1] != self.num_agents:
            raise ValueError(f"expected {self.num_agents} specialists, got {len(columns)} column sets and a "
                             f"mask of {tuple(activation_mask.shape)}")
        B, C, D = primary.shape
        H, K = self.num_heads, self.head_size
        total = primary.float().view(B, C, H, K)
        weight = torch.ones(B, 1, H, 1, device=primary.device)
        for s, cols in enumerate(columns):
            on = activation_mask[:, s][:, None, None, None]  # (B, 1, 1, 1)
            w = self.column_gate[s].exp()[None, None, :, None]  # (1, 1, H, 1)
            total = total + torch.where(on, w * cols.float().view(B, C, H, K), 0.0)
            weight = weight + torch.where(on, w, 0.0)
        return (total / weight).view(B, C, D).to(primary.dtype)

    @property
    def stream(self) -> bool:
        """Whether the stream seam is on."""
        return self.stream_gate is not None

    def fuse_stream(self, streams: list[torch.Tensor], activation_mask: torch.Tensor) -> torch.Tensor:
        """streams[s]: specialist s's aligned byte stream (B, T, D); activation_mask (B, S) bool →
        the stream seam's addend (B, T, D) (module docstring)."""
        if not self.stream:
            raise ValueError("this fusion was built without the stream seam")
        if len(streams) != self.num_agents or activation_mask.shape[1] != self.num_agents:
            raise ValueError(f"expected {self.num_agents} specialists, got {len(streams)} streams and a "
                             f"mask of {tuple(activation_mask.shape)}")
        B, T, D = streams[0].shape
        H, K = self.num_heads, self.head_size
        total = torch.zeros(B, T, H, K, device=activation_mask.device)
        for s, stream in enumerate(streams):
            on = activation_mask[:, s][:, None, None, None]  # (B, 1, 1, 1)
            gated = self.stream_gate[s][:, None] * stream.float().view(B, T, H, K)
            total = total + torch.where(on, gated, 0.0)
        return total.view(B, T, D)

    def forward(self, aligned: list[list[LayerState]], activation_mask: torch.Tensor) -> list[LayerState]:
        if len(aligned) != self.num_agents or activation_mask.shape[1] != self.num_agents:
            raise ValueError(f"expected {self.num_agents} specialists, got {len(aligned)} states and a "
                             f"mask of {tuple(activation_mask.shape)}")
        B, H, K = activation_mask.shape[0], self.num_heads, self.head_size
        fused = []
        for layer in range(self.num_layers):
            wkv = torch.zeros(B, H, K, K, device=activation_mask.device)
            shift_time = torch.zeros(B, H, K, device=activation_mask.device)
            shift_channel = torch.zeros(B, H, K, device=activation_mask.device)
            for s, states in enumerate(aligned):
                state = states[layer]
                on = activation_mask[:, s]  # (B,)
                g = self.wkv_gate[s, layer]  # (H,)
                q = self.shift_gate[s, layer][:, None]  # (H, 1)
                wkv = wkv + torch.where(on[:, None, None, None], g[:, None, None] * state.wkv.float(), 0.0)
                shift_time = shift_time + torch.where(on[:, None, None], q * state.shift_time.view(B, H, K), 0.0)
                shift_channel = shift_channel + torch.where(on[:, None, None], q * state.shift_channel.view(B, H, K), 0.0)
            fused.append(LayerState(wkv, shift_time.view(B, H * K), shift_channel.view(B, H * K)))
        return fused


@torch.no_grad()
def state_survival(primary: AegirModel, batch: Batch, initial_state: list[LayerState]) -> torch.Tensor:
    """How much of an initial main-network state is still there when the primary reaches each
    column: (L, C) float, layer × column index, averaged over the tables that have column c.

    For column c, the main network runs on the chunks up to and including the one that holds
    the column's last byte (its COLUMN_SEP, a forced chunk boundary), once from
    `initial_state` and once from zeros; per layer the share left is

        ‖S_t(S₀) − S_t(0)‖ / ‖S₀‖        (Frobenius norms of the wkv states, per table)

    The wkv recurrence is linear in its state (S_t = M_t S₀ + what the chunks wrote), so for
    the first layer this is exactly ‖M_t S₀‖/‖S₀‖; later layers also count what S₀ changed in
    their inputs. 1 means untouched, 0 washed out. Tables whose S₀ is zero in a layer are
    left out of that layer's mean.
    """
    encoded = primary.encode(batch)
    routing = encoded.routing
    chunk_h, chunk_mask = chunk(encoded.hidden, routing.boundary_mask)  # (B, L, D)
    # chunk index of each column's last byte: the boundaries up to and including it, minus one
    index = torch.cumsum(routing.boundary_mask.long(), dim=1) - 1  # (B, T)
    ends = batch.column_spans[..., 1].clamp(max=index.shape[1] - 1)  # (B, C)
    column_chunk = torch.gather(index, 1, ends)  # (B, C)
    positions = torch.arange(chunk_h.shape[1], device=chunk_h.device)
    zero = primary.main.zero_state(chunk_h.shape[0], chunk_h.device)
    start = torch.stack([s.wkv.float().flatten(1).norm(dim=-1) for s in initial_state])  # (Lyr, B)

    shares = []
    for c in range(batch.column_spans.shape[1]):
        upto = chunk_mask & (positions[None, :] <= column_chunk[:, c:c + 1])  # (B, L)
        _, with_state = primary.main(chunk_h, upto, initial_state)
        _, without = primary.main(chunk_h, upto, zero)
        left = torch.stack([(a.wkv.float() - b.wkv.float()).flatten(1).norm(dim=-1)
                            for a, b in zip(with_state, without)])  # (Lyr, B)
        valid = batch.column_mask[:, c][None, :] & (start > 0)  # (Lyr, B)
        share = torch.where(valid, left / start.clamp(min=1e-12), torch.zeros_like(left))
        shares.append(share.sum(1) / valid.sum(1).clamp(min=1))
    return torch.stack(shares, dim=1)  # (Lyr, C)

"""Training a specialist to speak through the seam Phase 3 fuses (`AgentConfig.seam_weight`).

Phase 3 hands the primary each activated specialist's main-network *final* state as the initial
state of its own main network (docs/method.md, "Phase 3"). A specialist trained only on its own
labels leaves little in that state that the primary can read: linear probes of the final state,
read with the specialist's own receptance at each column, recover 12–31 % of its domains' CTA
labels where its column vectors give 80–90 % (`scripts/seam_probe.py`, docs/experiments.md).
So a specialist can also be trained on what the primary makes of its state:

    loss = own loss + seam_weight · (CTA CE + CPA CE of the receiver reading the table from the
                                     specialist's final main-network states)

The receiver is the checkpoint the specialist starts from (`init`, the Phase 1 primary), frozen
in eval mode: no parameter of it learns, the gradient of its loss reaches the specialist through
the states alone. The specialist so learns to write, into the state, what helps exactly that
reader: the primary Phase 3 starts from.

The receiver reads the states through gates, as Phase 3's fusion does (`RWKVStateFusion` of
`aegir.orchestrator.fusion` with this one specialist always active: one gate per layer and head
on the wkv state, one on the token-shift vectors), and the gates start at zero. Handed the raw final state, the primary, which never read from anything but
zeros, lost most of its labels (CE 1.9 against about 0.5), and the specialist's own training was
dragged down with it (CTA `test` 75.7 against 96); from closed gates the receiver starts as it
is and the state is let in only as far as it helps. The learned gates are kept with the
checkpoint (`seam_gates` in config.json) for Phase 3 to start from.

`SeamStudent` plugs into the training step as an `AegirModel` would (`forward`, `loss_sums`,
`loss_of_sums`, `loss`); `SeamSums` adds up over shards as `LossSums` does.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from aegir.data.batch import Batch
from aegir.model.chunking import ChunkStats
from aegir.model.network import AegirModel, AegirOutput, LossSums
from aegir.model.rwkv import LayerState

_WIDTH = len(LossSums.__dataclass_fields__)


@dataclass
class SeamOutput:
    """The specialist's own output and the receiver's, read from the specialist's final states."""

    own: AegirOutput
    heard: AegirOutput

    @property
    def chunk_stats(self) -> ChunkStats:
        return self.own.chunk_stats


@dataclass
class SeamSums:
    """The specialist's `LossSums` and the receiver's, flattened in that order by `tensors`."""

    own: LossSums
    heard: LossSums

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return self.own.tensors() + self.heard.tensors()

    def like(self, tensors) -> SeamSums:
        tensors = tuple(tensors)
        return SeamSums(LossSums(*tensors[:_WIDTH]), LossSums(*tensors[_WIDTH:]))

    def __add__(self, other: SeamSums) -> SeamSums:
        return SeamSums(self.own + other.own, self.heard + other.heard)

    def chunk_stats(self) -> ChunkStats:
        return self.own.chunk_stats()


class SeamStudent(nn.Module):
    """A specialist (`model`, trained) and the frozen `receiver` that reads its final states."""

    def __init__(self, model: AegirModel, receiver: AegirModel, weight: float):
        super().__init__()
        if receiver.config.main_layers != model.config.main_layers or receiver.config.d_model != model.config.d_model:
            raise ValueError("SeamStudent: the receiver's main network must have the specialist's shape")
        self.model, self.weight = model, weight
        self.receiver = receiver.eval().requires_grad_(False)
        cfg = receiver.config
        self.heads, self.head_size = cfg.d_model // cfg.head_size, cfg.head_size
        # flat (layers · heads,) vectors: AdamW's decay skips vectors (aegir.train.setup)
        self.wkv_gate = nn.Parameter(torch.zeros(cfg.main_layers * self.heads))
        self.shift_gate = nn.Parameter(torch.zeros(cfg.main_layers * self.heads))

    def gates_json(self) -> dict[str, list]:
        """The learned gates, {"wkv": [layer][head], "shift": …}: what config.json keeps."""
        return {name: gate.detach().view(-1, self.heads).tolist()
                for name, gate in (("wkv", self.wkv_gate), ("shift", self.shift_gate))}

    def gated(self, states: list[LayerState]) -> list[LayerState]:
        """Each layer's state with its heads scaled by their gates."""
        out = []
        for layer, state in enumerate(states):
            B, H, K = state.wkv.shape[0], self.heads, self.head_size
            g = self.wkv_gate.view(-1, H)[layer]
            q = self.shift_gate.view(-1, H)[layer][:, None]
            out.append(LayerState(g[:, None, None] * state.wkv.float(),
                                  (q * state.shift_time.view(B, H, K)).view(B, H * K),
                                  (q * state.shift_channel.view(B, H, K)).view(B, H * K)))
        return out

    @property
    def config(self):
        return self.model.config

    def train(self, mode: bool = True) -> SeamStudent:
        super().train(mode)
        self.receiver.eval()  # frozen: always read as it is scored
        return self

    def forward(self, batch: Batch) -> SeamOutput:
        own = self.model(batch)
        return SeamOutput(own, self.receiver(batch, main_initial_state=self.gated(own.main_final_state)))

    def loss_sums(self, batch: Batch, output: SeamOutput, label_smoothing: float = 0.0) -> SeamSums:
        return SeamSums(self.model.loss_sums(batch, output.own, label_smoothing),
                        self.receiver.loss_sums(batch, output.heard, label_smoothing))

    def loss_of_sums(self, sums: SeamSums) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        total, parts = self.model.loss_of_sums(sums.own)
        heard = (sums.heard.cta_nll / sums.heard.cta_count.clamp(min=1)
                 + sums.heard.cpa_nll / sums.heard.cpa_count.clamp(min=1))
        total = total + self.weight * heard
        return total, {**parts, "seam": heard.detach(), "total": total.detach()}

    def loss(self, batch: Batch, output: SeamOutput,
             label_smoothing: float = 0.0) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return self.loss_of_sums(self.loss_sums(batch, output, label_smoothing))

"""The scale ladder's schedule rule: the Phase 1 settings a model preset trains with, from its width.

Presets `tiny` < `small` < `cpu` < `mid` < `gpu` (params.yaml) differ in width (`d_model`), depth
and n-gram table size. The rule gives each its learning rate, warm-up and epochs from `d_model`,
anchored at the two presets whose schedules were tuned by runs (docs/ladder.md):

* `cpu` (d_model 96): params.yaml's `phase1` defaults, lr 0.003, 30 warm-up steps, 1 epoch;
* `gpu` (d_model 256): lr 0.0015, 100 warm-up steps, 2 epochs (docs/gpu.md).

Between and around them: lr ∝ d_model^−0.7 (a wider model takes smaller steps), warm-up ∝
d_model^1.23 (its first updates are noisier for longer), and a second epoch above the `cpu` width
(more parameters want more passes over the same tables). The exponents are the ones that pass
through both anchors; `scripts/ladder.py` trains the ladder on this rule and checks that every
larger preset scores at least as well as the one below it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

ANCHOR_WIDTH = 96
ANCHOR_LR = 0.003
ANCHOR_WARMUP = 30
LR_EXPONENT = math.log(0.0015 / ANCHOR_LR) / math.log(ANCHOR_WIDTH / 256)  # ≈ 0.707
WARMUP_EXPONENT = math.log(100 / ANCHOR_WARMUP) / math.log(256 / ANCHOR_WIDTH)  # ≈ 1.228


@dataclass(frozen=True)
class Schedule:
    lr: float
    warmup_steps: int
    epochs: int

    def overrides(self) -> dict[str, object]:
        """The params.yaml keys this schedule sets for the primary."""
        return {"phase1.lr": self.lr, "phase1.warmup_steps": self.warmup_steps, "primary.epochs": self.epochs}


def schedule(d_model: int) -> Schedule:
    """The rule's Phase 1 schedule for a model of width `d_model` (ValueError if not positive)."""
    if not isinstance(d_model, int) or d_model <= 0:
        raise ValueError(f"d_model must be a positive integer, got {d_model!r}")
    ratio = d_model / ANCHOR_WIDTH
    return Schedule(lr=round(ANCHOR_LR * ratio ** -LR_EXPONENT, 5),
                    warmup_steps=max(1, round(ANCHOR_WARMUP * ratio ** WARMUP_EXPONENT)),
                    epochs=1 if d_model <= ANCHOR_WIDTH else 2)


__all__ = ["Schedule", "schedule"]

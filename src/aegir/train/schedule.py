"""Learning-rate schedule shared by the training stages."""

from __future__ import annotations

import math


def learning_rate(step: int, total_steps: int, peak: float, warmup_steps: int, min_lr_ratio: float) -> float:
    """Linear warm-up to `peak` over `warmup_steps`, then cosine decay to `min_lr_ratio · peak`
    at `total_steps`."""
    if step < warmup_steps:
        return peak * (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
    return peak * (min_lr_ratio + (1 - min_lr_ratio) * cosine)

"""Random draws made where their generator lives and used where their operands live.

Phase 2, 3 and 4 sample (routings, labels, spawn decisions) with a seeded `torch.Generator` on
the CPU, also when the model runs on a GPU: torch refuses a CPU generator for a CUDA draw, and
drawing on the generator's device gives the same draws on every device, so a GPU run samples
what the CPU run samples from the same probabilities. Without a generator, the draws are made
on the operands' device.
"""

from __future__ import annotations

import torch


def _draw_device(generator: torch.Generator | None, like: torch.Tensor) -> torch.device:
    return generator.device if generator is not None else like.device


def multinomial(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One index per row of `probs` (R, n) → (R,) long, on `probs`' device."""
    device = _draw_device(generator, probs)
    return torch.multinomial(probs.to(device), 1, generator=generator)[:, 0].to(probs.device)


def uniform_like(like: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """U[0, 1) draws of `like`'s shape and dtype, on `like`'s device."""
    device = _draw_device(generator, like)
    return torch.rand(like.shape, generator=generator, device=device, dtype=like.dtype).to(like.device)

"""Random draws made where their generator lives and used where their operands live.

Phase 2, 3 and 4 sample (routings, labels, spawn decisions, the reward checks' corruptions) with
a seeded `torch.Generator` on the CPU, also when the model runs on a GPU: torch refuses a CPU
generator for a CUDA draw, and drawing on the generator's device gives the same draws on every
device, so a GPU run samples what the CPU run samples from the same probabilities. Without a
generator, the draws are made on the operands' device.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def draw(sampler: Callable, shape: torch.Size, generator: torch.Generator | None, device: torch.device,
         **kwargs) -> torch.Tensor:
    """`sampler(shape, **kwargs)` (torch.rand, a partial of torch.randint, …) drawn on the
    generator's device (on `device` without one), then moved to `device`."""
    where = generator.device if generator is not None else device
    return sampler(shape, generator=generator, device=where, **kwargs).to(device)


def multinomial(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One index per row of `probs` (R, n) → (R,) long, on `probs`' device."""
    where = generator.device if generator is not None else probs.device
    return torch.multinomial(probs.to(where), 1, generator=generator)[:, 0].to(probs.device)


def uniform_like(like: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """U[0, 1) draws of `like`'s shape and dtype, on `like`'s device."""
    return draw(torch.rand, like.shape, generator, like.device, dtype=like.dtype)

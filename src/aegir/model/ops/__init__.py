"""Recurrence ops as functions of tensors; layers call `wkv_auto`, which picks one.

* `wkv_naive` (aegir.model.ops.wkv): the reference loop.
* `wkv_chunked` (aegir.model.ops.wkv): the chunked parallel form, batched matrix products; the
  layers' op by default.
* `wkv_sequential` (aegir.model.ops.wkv_cpu): a sequential C kernel for the CPU, built on first
  use, ~3× faster there than the chunked form; the layers' op on the CPU when the model's config
  asks for it (`AegirConfig.wkv_kernel`, on in every preset since 2026-11-26).

A flash-linear-attention (Triton, CUDA) path would be added here, behind this one seam, selected
only when `fla` imports and the tensors are on CUDA; it is not provided: fla is not a dependency
and there is no GPU to test it against the reference.
"""

from __future__ import annotations

import torch

from aegir.model.ops import wkv_cpu
from aegir.model.ops.wkv import LOG_DECAY_MIN, MAX_CHUNK_SIZE, wkv_chunked, wkv_naive
from aegir.model.ops.wkv_cpu import wkv_sequential


def wkv_auto(r: torch.Tensor, w: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor,
             b: torch.Tensor, initial_state: torch.Tensor | None = None, chunk_size: int = 32,
             kernel: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The layers' wkv: with `kernel`, `wkv_sequential` where `wkv_cpu.takes` the inputs (CPU, a
    compiled head size, built), else `wkv_chunked` (same arguments and results as `wkv_naive`;
    the two equal to rounding)."""
    if kernel and wkv_cpu.takes(r, v):
        return wkv_sequential(r, w, k, v, a, b, initial_state, chunk_size=chunk_size)
    return wkv_chunked(r, w, k, v, a, b, initial_state, chunk_size=chunk_size)


__all__ = ["LOG_DECAY_MIN", "MAX_CHUNK_SIZE", "wkv_auto", "wkv_chunked", "wkv_naive", "wkv_sequential"]

"""Recurrence ops as functions of tensors; layers call `wkv_auto`, which picks one.

* `wkv_naive` (aegir.model.ops.wkv): the reference loop.
* `wkv_chunked` (aegir.model.ops.wkv): the chunked parallel form, batched matrix products; the
  layers' op by default.
* `wkv_sequential` (aegir.model.ops.wkv_cpu): a sequential C kernel for the CPU, built on first
  use, ~3× faster there than the chunked form; the layers' op on the CPU when the model's config
  asks for it (`AegirConfig.wkv_kernel`, on in every preset since 2026-11-26).
* `wkv_fla.wkv_fla` (aegir.model.ops.wkv_fla): flash-linear-attention's Triton kernels, the
  CUDA path, from an optional extra (`pip install -e '.[gpu]'`); the layers' op for CUDA
  tensors when `fla` imports (`wkv_fla.takes`), whatever the config says. Elsewhere, and on CUDA
  without fla, the chunked form stays the op. docs/gpu.md, "The fla path": how to install it
  and where it was tested.
"""

from __future__ import annotations

import torch

from aegir.model.ops import wkv_cpu, wkv_fla
from aegir.model.ops.wkv import LOG_DECAY_MIN, MAX_CHUNK_SIZE, wkv_chunked, wkv_naive
from aegir.model.ops.wkv_cpu import wkv_sequential


def wkv_auto(r: torch.Tensor, w: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor,
             b: torch.Tensor, initial_state: torch.Tensor | None = None, chunk_size: int = 32,
             kernel: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The layers' wkv: `wkv_fla` where `wkv_fla.takes` the inputs (CUDA, fla installed; it
    ignores `chunk_size`: fla picks its own); with `kernel`, `wkv_sequential` where
    `wkv_cpu.takes` them (CPU, a compiled head size, built); else `wkv_chunked` (same arguments
    and results as `wkv_naive`; all equal to rounding)."""
    if r.is_cuda and wkv_fla.takes(r, v):
        return wkv_fla.wkv_fla(r, w, k, v, a, b, initial_state)
    if kernel and wkv_cpu.takes(r, v):
        return wkv_sequential(r, w, k, v, a, b, initial_state, chunk_size=chunk_size)
    return wkv_chunked(r, w, k, v, a, b, initial_state, chunk_size=chunk_size)


__all__ = ["LOG_DECAY_MIN", "MAX_CHUNK_SIZE", "wkv_auto", "wkv_chunked", "wkv_naive", "wkv_sequential"]

"""The RWKV-7 wkv on flash-linear-attention's Triton kernels (`fla.ops.rwkv7`): the CUDA path.

An optional extra (`pip install -e '.[gpu]'`: fla-core, the kernels-only distribution of
flash-linear-attention, and the Triton that torch 2.13's CUDA wheels pin). `wkv_auto`
(aegir.model.ops) takes it for CUDA tensors when `available()`; everywhere else, and where fla is
not installed, the chunked form (aegir.model.ops.wkv) stays the path. docs/gpu.md, "The fla path",
says how it is installed and where it was tested.

Convention: fla's RWKV-7 is its "DPLR" (diagonal plus low rank) delta rule, with the same state
layout and the same terms as `wkv_naive` (the state S is (K, V) per batch row and head):

    S_t = diag(exp(g_t)) · S_{t-1} + b_t · (a_tᵀ · S_{t-1}) + k_t · v_tᵀ
    o_t = scale · S_tᵀ · r_t

so the mapping is one-to-one: r, k, v, a, b pass as they are (a = −κ̂ and b = κ̂ ⊙ â, the
layer's own signs), the decay passes as its log, g = log w clamped to [LOG_DECAY_MIN, 0] exactly
as the other paths clamp it (the clamp stays in torch, so autograd carries dw through it),
scale = 1 (fla's default for the fused recurrent form is 1/√K), the layout is (B, T, H, ·) on both
sides, and initial and final states are (B, H, K, V) float32 on both sides.

Two of fla's kernels: `chunk_rwkv7` (chunked, with a backward) wherever a gradient is needed or
T > FUSED_MAX_T, and `fused_recurrent_rwkv7` (a step loop, forward only: fla gives it no
backward) for short sequences without gradients (generation, scoring). Both compute in float32
with float32 states; on CUDA their float32 products run in TF32 (Triton's default), so there
they should match the reference to about 1e-3 rather than to float32 rounding (not yet measured
on a GPU: docs/gpu.md, "The fla path").

Tests: tests/test_wkv_fla.py holds both kernels equal to `wkv_naive` on outputs and final
states, and the chunked one on every gradient (the initial state's included): on the CPU under
Triton's interpreter (TRITON_INTERPRET=1) at tiny shapes, and on CUDA where there is one.
"""

from __future__ import annotations

import os
import threading
import warnings

import torch

from aegir.model.ops.precision import float32_op
from aegir.model.ops.wkv import _check_shapes, _log_decay, wkv_chunked

SWITCH = "AEGIR_FLA"  # set to 0 to keep CUDA on the chunked form (a comparison, a suspected kernel bug)
FUSED_MAX_T = 64  # no-gradient calls up to this length take fla's fused recurrent kernel
MAX_KEY_SIZE = 256  # fla's chunked kernels keep a (K, ·) block of the state in one program
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)  # computed in float32 (`float32_op`)

_lock = threading.Lock()
_checked = False
_failure: str | None = None
_ops: tuple | None = None  # (chunk_rwkv7, fused_recurrent_rwkv7)


def _kernels() -> tuple | None:
    """fla's two RWKV-7 functions, imported on first use (fla's import takes seconds and
    initialises Triton), or None when fla or Triton does not import or the environment sets
    AEGIR_FLA=0 (`failure()` says why). Read once per process."""
    global _checked, _failure, _ops
    with _lock:
        if not _checked:
            _checked = True
            if os.environ.get(SWITCH, "1").strip() == "0":
                _failure = f"{SWITCH}=0 turns the fla path off"
                return None
            try:
                import triton  # noqa: F401  (fla needs it; its absence is the usual failure)
                from fla.ops.rwkv7 import chunk_rwkv7, fused_recurrent_rwkv7
                _ops = (chunk_rwkv7, fused_recurrent_rwkv7)
            except Exception as error:  # ImportError, or a Triton that cannot start
                _failure = f"{type(error).__name__}: {error}"
        return _ops


def available() -> bool:
    """Whether fla and Triton import (no exception)."""
    return _kernels() is not None


def failure() -> str | None:
    """Why fla did not import, or None (also None before anything asked)."""
    return _failure


def takes(r: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether `wkv_auto` gives these inputs to fla: CUDA tensors, float32 or half precision
    (computed in float32), key size ≤ MAX_KEY_SIZE, and fla imports."""
    return (r.is_cuda and r.dtype in _DTYPES and v.dtype in _DTYPES and r.shape[-1] <= MAX_KEY_SIZE
            and available())


@float32_op
def wkv_fla(
    r: torch.Tensor, w: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    a: torch.Tensor, b: torch.Tensor, initial_state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """fla's kernels; same arguments and results as `wkv_naive`.

    r, w, k, a, b: (B, T, H, K); v: (B, T, H, V); w in (0, 1] (decay per step)
    initial_state: (B, H, K, V) or None (zeros)
    returns out (B, T, H, V) in r's dtype (float32 under autocast), final_state (B, H, K, V)
    float32.

    Does not check the device (Triton's interpreter runs the kernels on CPU tensors: the tests);
    `wkv_auto` calls it for CUDA tensors only. RuntimeError where fla does not import, for
    float64 inputs and for K > MAX_KEY_SIZE. Empty batches and sequences (nothing to compute) go
    to the chunked form.
    """
    B, T, H, K, V = _check_shapes(r, w, k, v, a, b, initial_state)
    ops = _kernels()
    if ops is None:
        raise RuntimeError(f"wkv_fla: fla does not import: {failure()}")
    if r.dtype not in _DTYPES or K > MAX_KEY_SIZE:
        raise RuntimeError(f"wkv_fla: not for these inputs ({r.dtype}, K={K}; float32 or half "
                           f"precision and K ≤ {MAX_KEY_SIZE})")
    if B == 0 or T == 0:
        return wkv_chunked(r, w, k, v, a, b, initial_state)
    chunk_rwkv7, fused_recurrent_rwkv7 = ops
    r, k, v, a, b = (x.float() for x in (r, k, v, a, b))
    log_w = _log_decay(w.float())  # the other paths' clamp, differentiable here
    state = None if initial_state is None else initial_state.float()
    grad = torch.is_grad_enabled() and any(x is not None and x.requires_grad
                                           for x in (r, log_w, k, v, a, b, state))
    if grad or T > FUSED_MAX_T:
        with warnings.catch_warnings():
            # fla warns on every float32 call that "some platforms" want bf16/fp16; the state is
            # float32 here on purpose (aegir.model.ops.precision), so the warning says nothing new
            warnings.filterwarnings("ignore", message="ChunkDeltaRuleFunction does not support float32",
                                    category=RuntimeWarning)
            out, final_state = chunk_rwkv7(r, log_w, k, v, a, b, scale=1.0, initial_state=state,
                                           output_final_state=True)
    else:
        out, final_state = fused_recurrent_rwkv7(r, log_w, k, v, a, b, scale=1.0, initial_state=state,
                                                 output_final_state=True)
    return out, final_state


__all__ = ["FUSED_MAX_T", "MAX_KEY_SIZE", "SWITCH", "available", "failure", "takes", "wkv_fla"]

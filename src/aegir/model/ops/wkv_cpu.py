"""The model's recurrences as sequential C kernels for the CPU (`wkv_kernel.c`, next to this file):
the RWKV-7 wkv and H-Net's dechunk EMA.

The chunked form (`aegir.model.ops.wkv.wkv_chunked`) turns the wkv recurrence into batched
32 × 32 matrix products: the right shape for an accelerator, but on a CPU at head size 32 its
products, its triangular inverse and the passes between them cost more than the recurrence itself
(S_t = diag(w_t) S_{t-1} + b_t z_tᵀ + k_t v_tᵀ is ~3 K² multiply-adds a step, and one head's
state, 4 KB, stays in the L1 cache). This kernel walks the steps one by one, per batch row and
head, in plain loops that the compiler vectorises; its backward recomputes the states of each
chunk of `chunk_size` steps from a stored checkpoint and walks them in reverse (the formulas are
at the top of `wkv_kernel.c`). The dechunk EMA likewise: its closed form
(`aegir.model.chunking.ema_parallel`) builds an (L, L) weighting per row, the kernel's loop is
O(L·D). docs/benchmarks.md, "The CPU kernels": the ops and a training step, against the other
forms.

It is built on first use with the machine's C compiler (`$CC`, default `cc`; `-O3
-march=native`, or the level `$AEGIR_CPU_MARCH` names, e.g. `x86-64` or `x86-64-v3`) into a cache
directory (`$AEGIR_CACHE_DIR`, default `~/.cache/aegir`), under a name that hashes the source, the
flags, the compiler's version and the CPU's flags, and is loaded with ctypes. `available()` says
whether it built (`failure()` why not); without it the layers warn once and use the chunked form
and the closed-form EMA (the same model to rounding).

**The model uses it when its config asks** (`AegirConfig.wkv_kernel`, a preset field in
params.yaml, so DVC tracks it, and saved in checkpoints; on in every preset since 2026-11-26):
the wkv where `takes` allows (CPU, key size = value size ∈ {16, 32, 64}, float32 or half
precision computed in float32; `wkv_auto` in `aegir.model.ops`), the EMA where `takes_ema` does
(CPU, float32 or half precision). A checkpoint whose config lacks the field trained on the
chunked form and loads on it.

Results depend only on the inputs: loop orders are fixed, and a call split over threads (by
batch rows, each row's work unchanged) gives the same bits as one call. They depend on the
instruction set it is built for too (the vector width sets the order of its sums), as torch's own
CPU kernels do: `AEGIR_CPU_MARCH=x86-64` on any x86-64 CPU builds the 4-float kernel, and with
`ATEN_CPU_CAPABILITY=default` (torch's own kernels without AVX) gives another CPU's rounding on
this one (docs/pipeline.md, "Another CPU's rounding on this one").
"""

from __future__ import annotations

import ctypes
import hashlib
import math
import os
import platform
import subprocess
import tempfile
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from aegir.model.ops.precision import float32_op
from aegir.model.ops.wkv import LOG_DECAY_MIN, _check_shapes

SOURCE = Path(__file__).with_name("wkv_kernel.c")
HEAD_SIZES = (16, 32, 64)  # the key sizes the kernel is compiled for
FLAGS = ("-O3", "-march=native", "-fopenmp-simd", "-fPIC", "-shared", "-std=c11")

_lock = threading.Lock()
_library: ctypes.CDLL | None = None
_failure: str | None = None
_pool: ThreadPoolExecutor | None = None  # threads for calls split by batch rows, `_pool_size` of them
_pool_size = 0
_DECAY_MIN = math.exp(LOG_DECAY_MIN)  # the decay's floor, as the chunked form's log-decay floor


def cache_dir() -> Path:
    explicit = os.environ.get("AEGIR_CACHE_DIR")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "aegir"


def _cpu_flags() -> str:
    """The CPU's feature flags (so that a cache shared by different CPUs never loads a build for
    another instruction set)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return platform.processor()


def build_flags() -> tuple[str, ...]:
    """`FLAGS`, with `-march=$AEGIR_CPU_MARCH` in place of `-march=native` where that is set."""
    march = os.environ.get("AEGIR_CPU_MARCH", "").strip()
    if not march:
        return FLAGS
    if not march.replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise OSError(f"AEGIR_CPU_MARCH={march!r} is not an instruction level (e.g. x86-64, x86-64-v3, native)")
    return tuple(f"-march={march}" if flag == "-march=native" else flag for flag in FLAGS)


def _build() -> Path:
    compiler = os.environ.get("CC", "cc")
    flags = build_flags()
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=True).stdout
    key = hashlib.sha256("\0".join([SOURCE.read_text(), " ".join(flags), version, platform.machine(),
                                    _cpu_flags()]).encode()).hexdigest()[:16]
    target = cache_dir() / f"wkv_kernel-{key}.so"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".wkv_kernel-", suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        proc = subprocess.run([compiler, *flags, "-o", tmp, str(SOURCE)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise OSError(f"{compiler} failed on {SOURCE}:\n{proc.stderr.strip()}")
        os.replace(tmp, target)  # atomic: concurrent builders each put a whole file in place
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def _load() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(_build()))
    p, i = ctypes.c_void_p, ctypes.c_int
    for size in HEAD_SIZES:
        forward, backward = getattr(lib, f"wkv_forward_{size}"), getattr(lib, f"wkv_backward_{size}")
        forward.argtypes, forward.restype = [i, i, i, i] + [p] * 10, i
        backward.argtypes, backward.restype = [i, i, i, i] + [p] * 16, i
    lib.ema_forward.argtypes, lib.ema_forward.restype = [i, i, i] + [p] * 3, i
    lib.ema_backward.argtypes, lib.ema_backward.restype = [i, i, i] + [p] * 6, i
    return lib


def library() -> ctypes.CDLL | None:
    """The built kernel, or None when the build failed (warned once; `failure()` says why)."""
    global _library, _failure
    with _lock:
        if _library is None and _failure is None:
            try:
                _library = _load()
            except (OSError, subprocess.SubprocessError, AttributeError) as error:
                _failure = str(error)
                warnings.warn(f"aegir: the CPU kernels did not build, the model uses the chunked form "
                              f"of the wkv and the closed-form EMA (the same model to rounding): {error}",
                              RuntimeWarning, stacklevel=3)
        return _library


def available() -> bool:
    return library() is not None


def failure() -> str | None:
    """Why the kernel did not build, or None."""
    return _failure


def _takes_tensor(x: torch.Tensor) -> bool:
    """On the CPU, float32 or half precision (computed in float32), and the kernels built."""
    return x.device.type == "cpu" and x.dtype in (torch.float32, torch.float16, torch.bfloat16) and available()


def takes(r: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether the wkv kernel takes these inputs: `_takes_tensor`, and key size = value size ∈
    HEAD_SIZES."""
    return r.shape[-1] == v.shape[-1] and r.shape[-1] in HEAD_SIZES and _takes_tensor(r)


def _run(name: str, tensors: list[torch.Tensor | None], B: int, *sizes: int) -> None:
    """Call the kernel function `name` on B batch rows (its arguments: the row count, `sizes`,
    then the tensors' pointers), split between torch's intra-op threads (each slice of rows is an
    independent call: the same bits as one call). `tensors` are contiguous, batch first; None
    passes a null pointer (the forward's checkpoints when nothing will be differentiated)."""
    global _pool, _pool_size
    fn = getattr(library(), name)

    def call(start: int, stop: int) -> None:
        pointers = [None if x is None else x.data_ptr() + start * x.stride(0) * x.element_size()
                    for x in tensors]
        if fn(stop - start, *sizes, *pointers) != 0:
            raise MemoryError(f"CPU kernel {name}: out of memory")

    n = max(1, min(torch.get_num_threads(), B))
    if n == 1:
        call(0, B)
        return
    with _lock:
        if _pool_size < n:
            _pool, _pool_size = ThreadPoolExecutor(max_workers=n, thread_name_prefix="aegir-wkv"), n
        pool = _pool
    bounds = [B * j // n for j in range(n + 1)]
    futures = [pool.submit(call, bounds[j], bounds[j + 1]) for j in range(1, n)]
    call(bounds[0], bounds[1])
    for future in futures:
        future.result()


class _SequentialWKV(torch.autograd.Function):
    """The kernel's forward and backward; inputs r, decay, k, v, a, b (B, T, H, K) float32,
    the initial state (B, H, K, K); returns the output (B, T, H, K) and the final state."""

    @staticmethod
    def forward(ctx, r, decay, k, v, a, b, initial_state, L):
        B, T, H, K = r.shape
        r, decay, k, v, a, b = (x.contiguous() for x in (r, decay, k, v, a, b))
        state = initial_state.contiguous().clone()
        out = torch.empty_like(v)
        keep = any(ctx.needs_input_grad[:7])
        ckpt = r.new_empty(B, H, -(-T // L), K, K) if keep else None  # S every L steps, transposed
        zs = torch.empty_like(r) if keep else None  # z_t = S_{t-1}ᵀ a_t of every step
        if B:
            _run(f"wkv_forward_{K}", [r, decay, k, v, a, b, state, out, ckpt, zs], B, T, H, L)
        if keep:
            ctx.save_for_backward(r, decay, k, v, a, b, ckpt, zs)
            ctx.L = L
        return out, state

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_out, d_state):
        r, decay, k, v, a, b, ckpt, zs = ctx.saved_tensors
        B, T, H, K = r.shape
        d_state = d_state.contiguous().clone()  # in: the final state's gradient; out: the initial's
        grads = [torch.empty_like(r) for _ in range(6)]  # r, decay, k, v, a, b
        if B and T:
            _run(f"wkv_backward_{K}", [r, decay, k, v, a, b, ckpt, zs, d_out.contiguous(), d_state, *grads],
                 B, T, H, ctx.L)
        return (*grads, d_state, None)


@float32_op
def wkv_sequential(
    r: torch.Tensor, w: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    a: torch.Tensor, b: torch.Tensor, initial_state: torch.Tensor | None = None,
    chunk_size: int = 32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel; same arguments and results as `wkv_naive` (float32). `chunk_size`: steps
    between the backward's stored states (memory B·H·⌈T/chunk_size⌉·K² floats, besides one
    input's size for the stored z_t; the results do not depend on it). RuntimeError where
    `takes` says no."""
    B, T, H, K, V = _check_shapes(r, w, k, v, a, b, initial_state)
    if not takes(r, v):
        raise RuntimeError(f"wkv_sequential: not for these inputs (device {r.device.type}, {r.dtype}, "
                           f"K={K}, V={V}; kernel {'built' if available() else 'not built: ' + str(failure())})")
    if chunk_size < 1:
        raise ValueError(f"wkv_sequential: chunk_size must be ≥ 1, got {chunk_size}")
    state = (torch.zeros(B, H, K, V, dtype=torch.float32, device=r.device) if initial_state is None
             else initial_state.float())
    decay = w.float().clamp(_DECAY_MIN, 1.0)  # = exp of the chunked form's clamped log w, without the round trip
    out, final_state = _SequentialWKV.apply(r.float(), decay, k.float(), v.float(), a.float(), b.float(),
                                            state, chunk_size)
    return out.to(r.dtype), final_state


class _SequentialEMA(torch.autograd.Function):
    """The kernel's dechunk EMA, forward and backward: z (B, L, D), p (B, L), float32."""

    @staticmethod
    def forward(ctx, z, p):
        B, L, D = z.shape
        z, p = z.contiguous(), p.contiguous()
        out = torch.empty_like(z)
        if B and L:
            _run("ema_forward", [z, p, out], B, L, D)
        ctx.save_for_backward(z, p, out)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_out):
        z, p, out = ctx.saved_tensors
        B, L, D = z.shape
        dz, dp = torch.empty_like(z), torch.empty_like(p)
        if B and L:
            _run("ema_backward", [z, p, out, d_out.contiguous(), dz, dp], B, L, D)
        return dz, dp


def takes_ema(z: torch.Tensor) -> bool:
    """Whether the EMA kernel takes this input (`_takes_tensor`)."""
    return _takes_tensor(z)


@float32_op
def ema_sequential_cpu(z: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """The dechunk EMA out_j = p_j z_j + (1 − p_j) out_{j−1} on the kernel, in O(L·D) per row;
    same arguments and result as `aegir.model.chunking.ema_sequential`. RuntimeError where
    `takes_ema` says no."""
    if z.dim() != 3 or p.shape != z.shape[:2]:
        raise ValueError(f"ema: z must be (B, L, D) and p (B, L), got {tuple(z.shape)} and {tuple(p.shape)}")
    if not takes_ema(z):
        raise RuntimeError(f"ema_sequential_cpu: not for these inputs (device {z.device.type}, {z.dtype}; "
                           f"kernel {'built' if available() else 'not built: ' + str(failure())})")
    return _SequentialEMA.apply(z.float(), p.float()).to(z.dtype)

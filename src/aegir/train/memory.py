"""Keep freed memory in the process instead of handing it back to the OS after every step.

glibc's malloc serves a large request (above its mmap threshold, which it raises up to 32 MiB as
such blocks are freed) with a fresh `mmap` and unmaps it on `free`; it also trims the top of its
heaps once more than its trim threshold is free there. A training step allocates and frees the
same activations and gradients every time (the `cpu` preset's n-gram table gradient alone is
18.9 MB per shard), so each step touches freshly mapped pages again: about 16,000 minor page
faults per Phase 1 step of the `cpu` preset on the 2-core machine, zero-filled by the kernel,
~0.05 s of system time per step (README, Benchmarks: "Freed memory kept").

`retain_freed_memory()` sets, through `mallopt`, an mmap threshold of 32 MiB (fixed: blocks up to
that size come from the heaps and are reused) and trim threshold of 1 GiB, the remedy that
PyTorch's CPU tuning guide reaches with jemalloc or tcmalloc, without a new dependency. The
numbers a run computes do not change, only where its buffers live; the process keeps up to
about 1 GiB of freed memory mapped. Elsewhere than glibc (macOS, musl) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform

MMAP_THRESHOLD = 32 << 20  # glibc's ceiling for M_MMAP_THRESHOLD on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX)
TRIM_THRESHOLD = 1 << 30
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # malloc.h
_applied: bool | None = None


def retain_freed_memory() -> bool:
    """Apply the settings above once per process; True where they took effect (glibc), False
    where there is no glibc `mallopt` or it refused them."""
    global _applied
    if _applied is None:
        _applied = _apply()
    return _applied


def _apply() -> bool:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # mallopt returns 1 on success, 0 on a refused value
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))

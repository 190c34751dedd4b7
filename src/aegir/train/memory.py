"""Keep freed memory in the process instead of handing it back to the OS after every step.

glibc's malloc serves a large request (above its mmap threshold, which it raises up to 32 MiB as
such blocks are freed) with a fresh `mmap` and unmaps it on `free`; it trims the top of a heap
once more than its trim threshold is free there; and it unmaps a thread arena's extra heap as
soon as it is empty. A training step allocates and frees the same activations and gradients
every time (the `cpu` preset's n-gram table gradient alone is 18.9 MB per shard, in each worker
thread's arena), so a step can touch freshly mapped pages again, which the kernel faults in and
zero-fills: from under a hundred to about 15,000 minor page faults per Phase 1 step of the `cpu`
preset, and up to 0.05 s of system time (~4 % of the step's CPU time), varying from process to
process on the 2-core machine (`benchmarks/bench_memory.py`; docs/benchmarks.md,
"Freed memory kept").

`retain_freed_memory()` sets, through `mallopt`, an mmap threshold of 32 MiB (fixed: blocks up to
that size come from the heaps and are reused), a trim threshold of 1 GiB, and a top pad of 64 MiB,
a thread arena's heap size, which keeps its emptied heaps mapped: about what PyTorch's CPU tuning
guide gets from jemalloc or tcmalloc, without a new dependency. The numbers a run computes do not
change, only where its buffers live; the process keeps up to about 1 GiB of freed memory mapped.
Elsewhere than glibc (macOS, musl) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform

MMAP_THRESHOLD = 32 << 20  # glibc's ceiling for M_MMAP_THRESHOLD on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX)
TRIM_THRESHOLD = 1 << 30
TOP_PAD = 64 << 20  # a thread arena's heap size (HEAP_MAX_SIZE): no emptied heap is ever unmapped
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3  # malloc.h
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
    return all([mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD), mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD),
                mallopt(_M_TOP_PAD, TOP_PAD)])

"""Recurrence ops as functions of tensors; layers pick one (see `aegir.model.ops.wkv`).

`wkv_naive` is the reference loop, `wkv_chunked` the fast form every layer uses by default. A
flash-linear-attention (Triton, CUDA) path would be added here, behind this one seam, selected
only when `fla` imports and the tensors are on CUDA; it is not provided: fla is not a dependency
and there is no GPU to test it against the reference.
"""

from aegir.model.ops.wkv import LOG_DECAY_MIN, MAX_CHUNK_SIZE, wkv_chunked, wkv_naive

__all__ = ["LOG_DECAY_MIN", "MAX_CHUNK_SIZE", "wkv_chunked", "wkv_naive"]

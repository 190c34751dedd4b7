"""The precision guard of the recurrence ops: float32 inside, whatever autocast says outside.

Under bf16/fp16 autocast (accelerate's `mixed_precision`) every matmul would run in the low
precision. The recurrences cannot take that: the chunked wkv form multiplies by exp(±g) up to
e^64, which overflows fp16 (NaN), and a bf16 state loses the long memory the model keeps in it.
`float32_op` runs an op with autocast disabled for its inputs' device and its half-precision
floating arguments cast to float32 (float64 stays float64), so the op returns float32 outputs
and a float32 state. Around the op, autocast carries on as configured.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import torch

F = TypeVar("F", bound=Callable)
_HALF = (torch.float16, torch.bfloat16)


def _to_float32(x):
    return x.float() if isinstance(x, torch.Tensor) and x.dtype in _HALF else x


def float32_op(fn: F) -> F:
    """Decorator: run `fn` outside autocast, half-precision tensor arguments as float32."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        device = next((x.device.type for x in (*args, *kwargs.values()) if isinstance(x, torch.Tensor)), "cpu")
        with torch.autocast(device_type=device, enabled=False):
            return fn(*(_to_float32(x) for x in args), **{k: _to_float32(v) for k, v in kwargs.items()})

    return wrapper  # type: ignore[return-value]

"""Every fast path of the model against its literal reference (forward and gradients).

Tolerances are relative errors (‖fast − reference‖ / ‖reference‖): 1e-10 in float64 where the two
differ only in rounding, 1e-5 where float32 cross-entropy is in the loop (the model's loss casts
logits to float32).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from aegir.model.network import AegirModel, preset
from aegir.model.ops.wkv import _unit_lower_inverse
from aegir.model.rwkv import (
    RWKVStack,
    TimeMix,
    decay,
    decay_reference,
    head_group_norm,
    squared_relu,
)
from aegir.train.step import whole_batch_step
from test_step import synthetic_batch

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def rel_err(x: torch.Tensor, y: torch.Tensor) -> float:
    return ((x - y).norm() / y.norm().clamp(min=1e-30)).item()


def with_weights(module: nn.Module, seed: int = 0) -> nn.Module:
    """Zero-initialised weights (output projections, LoRA inputs) would hide whole paths."""
    torch.manual_seed(seed)
    for p in module.parameters():
        if (p == 0).all():
            nn.init.normal_(p, std=0.3)
    return module


@pytest.mark.parametrize("L", [1, 5, 16, 32, 48])
def test_unit_lower_inverse_is_the_inverse(L):
    g = torch.Generator().manual_seed(L)
    A = (0.3 * torch.randn(7, L, L, generator=g, dtype=torch.float64)).tril(-1)
    expected = torch.linalg.inv(torch.eye(L, dtype=torch.float64) - A)
    assert rel_err(_unit_lower_inverse(A), expected) < 1e-10


def test_decay_equals_rwkv7_formula():
    z = torch.linspace(-40, 40, 2001, dtype=torch.float64, requires_grad=True)
    fast, ref = decay(z), decay_reference(z)
    assert rel_err(fast, ref) < 1e-14
    (g_fast,) = torch.autograd.grad(fast.sum(), z)
    (g_ref,) = torch.autograd.grad(ref.sum(), z)
    assert rel_err(g_fast, g_ref) < 1e-12
    assert fast.min() > 0.545 and fast.max() <= 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_squared_relu_is_bit_equal_to_relu_then_power(dtype):
    """The channel mix's fused relu² and its one-op backward: the same bits as
    `torch.relu(x) ** 2` and its autograd, values and gradients (zeros and negatives included)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 33, 24, generator=g, dtype=dtype)
    x[0, 0, :4] = 0.0
    cotangent = torch.randn(x.shape, generator=g, dtype=dtype)
    results = []
    for op in (lambda t: torch.relu(t) ** 2, squared_relu):
        leaf = x.clone().requires_grad_()
        out = op(leaf)
        (grad,) = torch.autograd.grad(out, leaf, cotangent)
        results.append((out, grad))
    (ref_out, ref_grad), (out, grad) = results
    assert torch.equal(out, ref_out) and torch.equal(grad, ref_grad)
    assert (grad == 0).any() and (grad != 0).any()


def test_head_group_norm_equals_group_norm():
    B, T, H, K = 3, 11, 4, 8
    norm = nn.GroupNorm(H, H * K, eps=64e-5).double()
    with torch.no_grad():
        norm.weight.normal_()
        norm.bias.normal_()
    y = (torch.randn(B, T, H, K, dtype=torch.float64) * 3 + 1).requires_grad_()
    fast = head_group_norm(y, norm)
    ref = norm(y.reshape(B * T, H * K)).view(B, T, H * K)
    assert rel_err(fast, ref) < 1e-12
    cotangent = torch.randn_like(ref)
    g_fast = torch.autograd.grad((fast * cotangent).sum(), [y, norm.weight, norm.bias])
    g_ref = torch.autograd.grad((ref * cotangent).sum(), [y, norm.weight, norm.bias])
    for a, b in zip(g_fast, g_ref):
        assert rel_err(a, b) < 1e-10


def _time_mix_run(att: TimeMix, x, mask, state, shift):
    y, new_state, new_shift = att(x, mask, state, shift)
    g = torch.Generator().manual_seed(1)
    loss = (y * torch.randn(y.shape, generator=g, dtype=y.dtype)).sum() + (new_state ** 2).sum()
    grads = torch.autograd.grad(loss, [x, state, *att.parameters()])
    return y, new_state, new_shift, grads


@pytest.mark.parametrize("padded", [False, True])
def test_time_mix_fast_equals_reference(padded):
    """Fused LoRA inputs, `decay`, `head_group_norm` and the chunked wkv against the literal layer."""
    att = with_weights(TimeMix(d_model=16, head_size=8, layer_id=0, n_layers=2, chunk_size=8)).double()
    B, T = 2, 21
    x = torch.randn(B, T, 16, dtype=torch.float64, requires_grad=True)
    state = torch.randn(B, 2, 8, 8, dtype=torch.float64, requires_grad=True)
    shift = torch.randn(B, 16, dtype=torch.float64)
    mask = None
    if padded:
        mask = torch.ones(B, T, dtype=torch.bool)
        mask[1, 13:] = False
    fast = _time_mix_run(att, x, mask, state, shift)
    att.reference = True
    ref = _time_mix_run(att, x, mask, state, shift)
    names = ["y", "state", "shift"] + ["grad x", "grad state"] + [f"grad {n}" for n, _ in att.named_parameters()]
    for name, a, b in zip(names, [*fast[:3], *fast[3]], [*ref[:3], *ref[3]]):
        assert b.abs().sum() > 0, name
        assert rel_err(a, b) < 1e-10, name


def test_stack_without_padding_ignores_an_all_true_mask():
    stack = with_weights(RWKVStack(n_layers=2, d_model=16, head_size=8, chunk_size=8, ffn_mult=2))
    x = torch.randn(2, 19, 16)
    y_none, state_none = stack(x, None)
    y_mask, state_mask = stack(x, torch.ones(2, 19, dtype=torch.bool))
    assert torch.equal(y_none, y_mask)
    for a, b in zip(state_none, state_mask):
        assert torch.equal(a.wkv, b.wkv) and torch.equal(a.shift_time, b.shift_time)


def test_model_fast_path_equals_reference_path_on_tiny_preset():
    """The whole model's loss and every parameter's gradient: fast ops (chunked wkv with its
    hand-written backward, fused LoRA, `decay`, `head_group_norm`, parallel EMA) against every
    literal reference (wkv loop, RWKV-7's formulas, nn.GroupNorm, sequential EMA), float64."""
    torch.manual_seed(0)
    model = with_weights(AegirModel(preset("tiny"))).double()
    batch = synthetic_batch(6)
    fast = whole_batch_step(model, batch)
    fast_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    model.set_reference(True)
    ref = whole_batch_step(model, batch)
    assert rel_err(fast.loss, ref.loss) < 1e-6
    for name, p in model.named_parameters():
        assert p.grad.abs().sum() > 0, name
        assert rel_err(fast_grads[name], p.grad) < 1e-5, name

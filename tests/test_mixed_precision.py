"""Under bf16/fp16 autocast the recurrences (wkv, the dechunking EMA) still run in float32.

CPU autocast stands in for a GPU's: it casts matmuls to the low precision as CUDA's does.
Before the guard, fp16 gave NaN (the chunked form's exp(−g) reaches e^64) and bf16 returned a
bf16 state.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from aegir.data.dataset import collate, make_example
from aegir.model.chunking import ema_parallel, ema_sequential
from aegir.model.network import AegirModel, preset
from aegir.model.ops import wkv_chunked, wkv_naive

pytestmark = pytest.mark.usefixtures("one_torch_thread")

HALF = [torch.bfloat16, torch.float16]


def wkv_inputs(B=2, T=128, H=2, K=16):
    """Decays at RWKV-7's floor (w ≈ 0.545): over a 64-step chunk exp(−g) ≈ e^39, past fp16's range."""
    g = torch.Generator().manual_seed(0)
    r, k, v = (torch.randn(B, T, H, K, generator=g) for _ in range(3))
    w = torch.full((B, T, H, K), 0.545)
    kk = F.normalize(torch.randn(B, T, H, K, generator=g), dim=-1)
    return r, w, k, v, -kk, kk * 0.5


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("op", ["chunked", "naive"])
def test_wkv_under_autocast_is_float32_and_matches_float32(dtype, op):
    inputs = wkv_inputs()
    ref_out, ref_state = wkv_naive(*inputs)
    fn = (lambda *x: wkv_chunked(*x, chunk_size=64)) if op == "chunked" else wkv_naive
    with torch.autocast("cpu", dtype=dtype):
        out, state = fn(*inputs)
        assert torch.is_autocast_enabled("cpu")  # the guard leaves autocast on around the op
    assert state.dtype == torch.float32 and out.dtype == torch.float32
    assert torch.isfinite(out).all() and torch.isfinite(state).all()
    assert torch.allclose(out, ref_out, atol=1e-3, rtol=1e-3)
    assert torch.allclose(state, ref_state, atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("dtype", HALF)
def test_wkv_backward_inside_autocast_is_the_float32_backward(dtype):
    """Gradients taken while autocast is still on (a training loop that calls backward inside
    its autocast block) equal, bit for bit, those taken after it: the hand-written backward
    computes in float32 like the forward (it used to fail, its products cast to bf16/fp16)."""
    inputs = [x.clone().requires_grad_() for x in wkv_inputs(T=40)]

    def grads(inside: bool) -> tuple[torch.Tensor, ...]:
        with torch.autocast("cpu", dtype=dtype):
            out, state = wkv_chunked(*inputs, chunk_size=16)
            loss = (out * out.detach().sin()).sum() + state.square().sum()
            if inside:
                return torch.autograd.grad(loss, inputs)
        return torch.autograd.grad(loss, inputs)

    inside, after = grads(True), grads(False)
    assert all(g.dtype == torch.float32 and torch.isfinite(g).all() for g in inside)
    assert all(torch.equal(a, b) for a, b in zip(inside, after))


@pytest.mark.parametrize("dtype", HALF)
def test_wkv_half_inputs_give_a_float32_state(dtype):
    inputs = [x.to(dtype) for x in wkv_inputs(T=64)]
    with torch.autocast("cpu", dtype=dtype):
        out, state = wkv_chunked(*inputs, chunk_size=64)
    assert state.dtype == torch.float32 and torch.isfinite(out).all()


@pytest.mark.parametrize("dtype", HALF)
def test_ema_parallel_under_autocast_is_float32(dtype):
    g = torch.Generator().manual_seed(0)
    z = torch.randn(2, 200, 8, generator=g)
    p = torch.rand(2, 200, generator=g).clamp(1e-4, 1 - 1e-4)
    with torch.autocast("cpu", dtype=dtype):
        out = ema_parallel(z, p)
    assert out.dtype == torch.float32
    assert torch.allclose(out, ema_sequential(z, p), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("dtype", HALF)
def test_model_forward_and_backward_under_autocast(dtype):
    torch.manual_seed(0)
    model = AegirModel(preset("tiny"))
    stream = b"Hotel Adlon\x1eThe Ritz\x1f+49 30 2261 0\x1e+44 20 7493\x1f" * 4
    spans = [(0, 20), (21, 41)]
    batch = collate([make_example("t", "Hotel", stream[:42], spans, ["Hotel/name", "telephone"],
                                  [None, "telephone"], "test")] * 2)
    with torch.autocast("cpu", dtype=dtype):
        output = model(batch)
        loss, _ = model.loss(batch, output)
    assert all(s.wkv.dtype == torch.float32 for s in output.main_final_state)
    assert torch.isfinite(loss)
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)

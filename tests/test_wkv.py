"""The chunked wkv form against the literal loop; the state API of the op and of RWKVStack."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from aegir.model.ops import wkv as wkv_module
from aegir.model.ops import wkv_chunked, wkv_naive
from aegir.model.rwkv import RWKVStack

pytestmark = pytest.mark.usefixtures("one_torch_thread")


NAMES = ("r", "w", "k", "v", "a", "b", "initial_state")


def rel_err(x: torch.Tensor, y: torch.Tensor) -> float:
    return ((x - y).norm() / y.norm().clamp(min=1e-30)).item()


def make_inputs(B=2, T=20, H=2, K=8, V=8, dtype=torch.float64, seed=0, tiny_decay=False):
    """RWKV-7-shaped inputs: a = −κ̂, b = κ̂ ⊙ â with κ̂ unit-norm, â ∈ (0, 1), w ∈ [0.545, 1)."""
    g = torch.Generator().manual_seed(seed)
    rand = lambda *s: torch.randn(*s, generator=g, dtype=dtype)  # noqa: E731
    r, k, v = rand(B, T, H, K), rand(B, T, H, K) * 0.5, rand(B, T, H, V)
    w = torch.exp(-0.6065 * torch.rand(B, T, H, K, generator=g, dtype=dtype))
    if tiny_decay:  # decays far below the clamp: both paths must clamp alike
        w = torch.where(torch.rand(B, T, H, K, generator=g, dtype=dtype) < 0.3, 1e-4, w)
    kk = F.normalize(rand(B, T, H, K), dim=-1)
    lr = torch.rand(B, T, H, K, generator=g, dtype=dtype)
    state = rand(B, H, K, V)
    return [x.clone().requires_grad_() for x in (r, w, k, v, -kk, kk * lr, state)]


def run_with_grads(op, inputs, **kw):
    out, state = op(*inputs, **kw)
    g = torch.Generator().manual_seed(1)
    # a random cotangent, so that no gradient is checked only through a plain sum
    loss = (out * torch.randn(out.shape, generator=g, dtype=out.dtype)).sum() \
        + (state * torch.randn(state.shape, generator=g, dtype=state.dtype)).sum()
    grads = torch.autograd.grad(loss, inputs)
    return out, state, grads


@pytest.mark.parametrize("T", [1, 7, 16, 64, 100])
@pytest.mark.parametrize("chunk_size", [16, 32])
def test_chunked_matches_naive_float64(T, chunk_size):
    inputs = make_inputs(T=T)
    out_n, state_n, grads_n = run_with_grads(wkv_naive, inputs)
    out_c, state_c, grads_c = run_with_grads(wkv_chunked, inputs, chunk_size=chunk_size)
    assert out_c.shape == out_n.shape == (2, T, 2, 8)
    assert state_c.shape == (2, 2, 8, 8)
    assert rel_err(out_c, out_n) < 1e-10
    assert rel_err(state_c, state_n) < 1e-10
    for name, gc, gn in zip(NAMES, grads_c, grads_n):
        assert gn.abs().sum() > 0, name
        assert rel_err(gc, gn) < 1e-9, name


def test_chunked_matches_naive_clamped_decay_and_odd_chunk():
    inputs = make_inputs(T=45, tiny_decay=True, seed=3)
    out_n, state_n, grads_n = run_with_grads(wkv_naive, inputs)
    out_c, state_c, grads_c = run_with_grads(wkv_chunked, inputs, chunk_size=12)  # not a power of 2
    assert rel_err(out_c, out_n) < 1e-10
    assert rel_err(state_c, state_n) < 1e-10
    for name, gc, gn in zip(NAMES, grads_c, grads_n):
        assert rel_err(gc, gn) < 1e-9, name


def test_chunked_matches_naive_float32_long():
    inputs = make_inputs(B=1, T=200, H=2, K=16, V=16, dtype=torch.float32, seed=5)
    out_n, state_n, grads_n = run_with_grads(wkv_naive, inputs)
    out_c, state_c, grads_c = run_with_grads(wkv_chunked, inputs, chunk_size=64)
    assert out_c.dtype == torch.float32 and state_c.dtype == torch.float32
    assert rel_err(out_c, out_n) < 1e-4
    assert rel_err(state_c, state_n) < 1e-4
    for name, gc, gn in zip(NAMES, grads_c, grads_n):
        assert rel_err(gc, gn) < 1e-3, name


def test_known_answer_single_step():
    """T = 1 by hand: S₁ = diag(w) S₀ + b (aᵀ S₀) + k vᵀ, o = S₁ᵀ r."""
    r, w, k, v, a, b, s0 = (x.detach() for x in make_inputs(B=1, T=1, H=1, K=3, V=2))
    S0 = s0[0, 0]
    S1 = torch.diag(w[0, 0, 0]) @ S0 + torch.outer(b[0, 0, 0], a[0, 0, 0] @ S0) \
        + torch.outer(k[0, 0, 0], v[0, 0, 0])
    for op in (wkv_naive, wkv_chunked):
        out, state = op(r, w, k, v, a, b, s0)
        torch.testing.assert_close(state[0, 0], S1)
        torch.testing.assert_close(out[0, 0, 0], S1.T @ r[0, 0, 0])


def test_no_initial_state_means_zeros():
    r, w, k, v, a, b, s0 = (x.detach() for x in make_inputs(T=9))
    for op in (wkv_naive, wkv_chunked):
        out_none, st_none = op(r, w, k, v, a, b, None)
        out_zero, st_zero = op(r, w, k, v, a, b, torch.zeros_like(s0))
        torch.testing.assert_close(out_none, out_zero)
        torch.testing.assert_close(st_none, st_zero)


@pytest.mark.parametrize("op", [wkv_naive, wkv_chunked])
def test_op_two_halves_equal_whole(op):
    r, w, k, v, a, b, s0 = (x.detach() for x in make_inputs(T=50))
    out, state = op(r, w, k, v, a, b, s0)
    cut = 23
    out1, mid = op(*(x[:, :cut] for x in (r, w, k, v, a, b)), s0)
    out2, end = op(*(x[:, cut:] for x in (r, w, k, v, a, b)), mid)
    torch.testing.assert_close(torch.cat([out1, out2], dim=1), out)
    torch.testing.assert_close(end, state)


def test_chunk_size_out_of_range():
    inputs = make_inputs(T=4)
    with pytest.raises(ValueError, match="chunk_size"):
        wkv_chunked(*inputs, chunk_size=65)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("tile_rows", [1, 2, 3])
def test_tiles_equal_whole_batch_to_the_bit(tile_rows, dtype):
    """Batch rows taken a tile at a time (the last tile short: 5 rows) give the same output,
    final state and gradients as the whole batch at once, bit for bit: every op works per matrix
    or per element, so tiling can change speed and nothing else."""
    inputs = make_inputs(B=5, T=45, dtype=dtype)
    out_w, state_w, grads_w = run_with_grads(wkv_chunked, inputs, chunk_size=16, tile_rows=5)
    out_t, state_t, grads_t = run_with_grads(wkv_chunked, inputs, chunk_size=16, tile_rows=tile_rows)
    assert torch.equal(out_t, out_w)
    assert torch.equal(state_t, state_w)
    for name, gt, gw in zip(NAMES, grads_t, grads_w):
        assert gw.abs().sum() > 0, name
        assert torch.equal(gt, gw), name


def test_default_tiles_on_cpu_and_equal_whole_batch(monkeypatch):
    """On CPU the default takes about TILE_MATRICES (head, chunk) matrices per tile: with 8 per
    tile and 2 heads × 3 chunks per row, one row per tile; the result is the whole batch's."""
    seen = []
    forward = wkv_module._forward_tile

    def spy(r, *rest):
        seen.append(r.shape[0])
        return forward(r, *rest)

    inputs = make_inputs(B=3, T=40, dtype=torch.float32)
    out_w, state_w, grads_w = run_with_grads(wkv_chunked, inputs, chunk_size=16, tile_rows=3)
    monkeypatch.setattr(wkv_module, "TILE_MATRICES", 8)
    monkeypatch.setattr(wkv_module, "_forward_tile", spy)
    out_t, state_t, grads_t = run_with_grads(wkv_chunked, inputs, chunk_size=16)
    assert seen == [1, 1, 1]
    assert torch.equal(out_t, out_w) and torch.equal(state_t, state_w)
    assert all(torch.equal(gt, gw) for gt, gw in zip(grads_t, grads_w))


def test_empty_batch_gives_gradients_of_the_inputs_shapes():
    """B = 0 with K ≠ V: no tile runs, and each gradient still has its input's shape."""
    inputs = make_inputs(B=0, T=10, K=8, V=4, dtype=torch.float32)
    out, state = wkv_chunked(*inputs, chunk_size=4)
    assert out.shape == (0, 10, 2, 4) and state.shape == (0, 2, 8, 4)
    grads = torch.autograd.grad(out.sum() + state.sum(), inputs)
    assert [g.shape for g in grads] == [x.shape for x in inputs]


def test_tile_rows_must_be_positive():
    with pytest.raises(ValueError, match="tile_rows"):
        wkv_chunked(*make_inputs(T=4), tile_rows=0)


def _stack(seed=0, chunk_size=8) -> RWKVStack:
    torch.manual_seed(seed)
    stack = RWKVStack(n_layers=2, d_model=16, head_size=8, chunk_size=chunk_size, ffn_mult=2).double()
    # the zero-initialised output projections would hide the recurrence: give them weights
    for p in stack.parameters():
        if (p == 0).all():
            torch.nn.init.normal_(p, std=0.3)
    return stack


def _assert_states_close(xs, ys):
    for x, y in zip(xs, ys):
        torch.testing.assert_close(x.wkv, y.wkv)
        torch.testing.assert_close(x.shift_time, y.shift_time)
        torch.testing.assert_close(x.shift_channel, y.shift_channel)


def test_stack_naive_and_chunked_agree():
    stack = _stack()
    x = torch.randn(2, 37, 16, dtype=torch.float64, requires_grad=True)
    y_c, st_c = stack(x)
    (gx_c,) = torch.autograd.grad(y_c.pow(2).sum(), x)
    stack.set_naive_wkv(True)
    y_n, st_n = stack(x)
    (gx_n,) = torch.autograd.grad(y_n.pow(2).sum(), x)
    torch.testing.assert_close(y_c, y_n)
    torch.testing.assert_close(gx_c, gx_n)
    _assert_states_close(st_c, st_n)


def test_stack_two_halves_equal_whole():
    """The state API: wkv matrices and both token-shift vectors carry a sequence across calls."""
    stack = _stack()
    x = torch.randn(2, 30, 16, dtype=torch.float64)
    y, state = stack(x)
    y1, mid = stack(x[:, :13])
    y2, end = stack(x[:, 13:], initial_state=mid)
    torch.testing.assert_close(torch.cat([y1, y2], dim=1), y)
    _assert_states_close(end, state)
    # and the state matters: starting the second half from zeros gives something else
    y2_cold, _ = stack(x[:, 13:])
    assert not torch.allclose(y2_cold, y2)


def test_stack_final_state_ignores_right_padding():
    stack = _stack()
    x = torch.randn(2, 25, 16, dtype=torch.float64)
    mask = torch.ones(2, 25, dtype=torch.bool)
    mask[1, 11:] = False  # row 1 has 11 real positions
    y, state = stack(x, mask)
    y_alone, state_alone = stack(x[1:, :11])
    torch.testing.assert_close(y[1:, :11], y_alone)
    _assert_states_close([s.select(torch.tensor([1])) for s in state], state_alone)
    y_full, state_full = stack(x[:1])
    torch.testing.assert_close(y[:1], y_full)
    _assert_states_close([s.select(torch.tensor([0])) for s in state], state_full)

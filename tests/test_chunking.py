"""H-Net dynamic chunking: routing, chunk/dechunk, EMA reference vs parallel, ratio loss."""

from __future__ import annotations

import pytest
import torch

from aegir.model.chunking import (
    RoutingModule,
    chunk,
    chunk_stats,
    dechunk,
    ema_parallel,
    ema_sequential,
    ratio_loss,
    straight_through_ones,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_routing_known_probabilities():
    """Identity projections: same vector → p = 0, opposite → 1, orthogonal → ½ (a boundary)."""
    e1, e2 = [1.0, 0.0], [0.0, 1.0]
    h = torch.tensor([[e1, e1, [-1.0, 0.0], [-1.0, 0.0], e2, [2.0, 2.0]]])  # (1, 6, 2)
    out = RoutingModule(2)(h)
    p = out.boundary_prob[0]
    expected = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.5, 0.5 * (1 - 2 ** -0.5)])
    torch.testing.assert_close(p, expected)
    assert out.boundary_mask[0].tolist() == [True, False, True, False, True, False]
    torch.testing.assert_close(out.selected_prob[0],
                               torch.where(out.boundary_mask[0], expected, 1 - expected))


def test_routing_first_byte_always_boundary_and_padding_never():
    torch.manual_seed(0)
    h = torch.randn(3, 12, 8)
    mask = torch.ones(3, 12, dtype=torch.bool)
    mask[1, 5:] = False
    mask[2, 9:] = False
    h[1, 5:] = -h[1, 4:5]  # padded bytes that would be boundaries (p = 1) if they were real
    forced = torch.zeros(3, 12, dtype=torch.bool)
    forced[:, 7] = True  # a forced boundary inside row 0 and 2, on padding in row 1
    out = RoutingModule(8)(h, mask, forced)
    assert (out.boundary_prob[:, 0] == 1).all() and out.boundary_mask[:, 0].all()
    assert not out.boundary_mask[~mask].any()
    assert (out.boundary_prob[~mask] == 0).all()
    assert out.boundary_mask[0, 7] and out.boundary_mask[2, 7] and not out.boundary_mask[1, 7]
    assert out.boundary_prob[0, 7] == 1.0


def test_chunk_keeps_boundary_vectors_in_order():
    h = torch.arange(2 * 6 * 3, dtype=torch.float32).view(2, 6, 3)
    boundary = torch.tensor([[1, 0, 1, 1, 0, 0], [1, 0, 0, 0, 0, 1]], dtype=torch.bool)
    chunk_h, chunk_mask = chunk(h, boundary)
    assert chunk_h.shape == (2, 3, 3)
    assert chunk_mask.tolist() == [[True, True, True], [True, True, False]]
    torch.testing.assert_close(chunk_h[0], h[0, [0, 2, 3]])
    torch.testing.assert_close(chunk_h[1, :2], h[1, [0, 5]])
    assert (chunk_h[1, 2] == 0).all()


def test_dechunk_spreads_chunks_back_to_bytes():
    """With p ≈ 1 at every boundary the EMA keeps each chunk's own vector; every byte gets the
    vector of the chunk it lies in."""
    boundary = torch.tensor([[1, 0, 1, 1, 0, 0, 1]], dtype=torch.bool)
    prob = torch.where(boundary, 1.0, 0.2)
    _, chunk_mask = chunk(torch.zeros(1, 7, 2), boundary)
    chunk_out = torch.tensor([[[1.0, 0.0], [2.0, 0.0], [3.0, 0.0], [4.0, 0.0]]])
    out = dechunk(chunk_out, boundary, prob, chunk_mask)
    assert out.shape == (1, 7, 2)
    torch.testing.assert_close(out[0, :, 0], torch.tensor([1.0, 1.0, 2.0, 3.0, 3.0, 3.0, 4.0]),
                               atol=1e-3, rtol=0)


def test_dechunk_smooths_with_boundary_probability():
    boundary = torch.tensor([[1, 1, 0]], dtype=torch.bool)
    prob = torch.tensor([[1.0, 0.25, 0.1]])
    chunk_out = torch.tensor([[[4.0], [8.0]]])
    out = dechunk(chunk_out, boundary, prob, torch.tensor([[True, True]]))
    first = (1 - 1e-4) * 4.0
    second = 0.25 * 8.0 + 0.75 * first
    torch.testing.assert_close(out[0, :, 0], torch.tensor([first, second, second]))


def test_ema_parallel_equals_sequential_with_gradients():
    g = torch.Generator().manual_seed(0)
    z = torch.randn(3, 40, 5, generator=g, dtype=torch.float64, requires_grad=True)
    p = torch.rand(3, 40, generator=g, dtype=torch.float64).clamp(1e-4, 1 - 1e-4).requires_grad_()
    seq = ema_sequential(z, p)
    par = ema_parallel(z, p)
    torch.testing.assert_close(par, seq)
    cot = torch.randn(seq.shape, generator=g, dtype=torch.float64)
    g_seq = torch.autograd.grad((seq * cot).sum(), (z, p))
    g_par = torch.autograd.grad((par * cot).sum(), (z, p))
    for a, b in zip(g_par, g_seq):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("N", [2.0, 3.0, 4.0, 8.0])
def test_ratio_loss_known_values(N):
    T = int(N) * 10
    mask = torch.zeros(1, T, dtype=torch.bool)
    mask[0, :: int(N)] = True  # F = 1/N
    prob = torch.full((1, T), 1.0 / N)  # G = 1/N
    assert ratio_loss(mask, prob, N).item() == pytest.approx(1.0)
    ones = torch.ones(1, T, dtype=torch.bool)
    assert ratio_loss(ones, torch.ones(1, T), N).item() == pytest.approx(N)  # F = G = 1
    none = torch.zeros(1, T, dtype=torch.bool)
    assert ratio_loss(none, torch.zeros(1, T), N).item() == pytest.approx(N / (N - 1))  # F = G = 0


def test_ratio_loss_and_stats_ignore_padding():
    boundary = torch.tensor([[True, False, True, False, True, True]])
    prob = torch.tensor([[1.0, 0.0, 1.0, 0.0, 0.9, 0.9]])
    mask = torch.tensor([[True, True, True, True, False, False]])
    N = 2.0  # F = G = ½ over the real bytes → 1
    assert ratio_loss(boundary, prob, N, mask).item() == pytest.approx(1.0)
    stats = chunk_stats(boundary, prob, mask)
    assert stats.F.item() == pytest.approx(0.5) and stats.G.item() == pytest.approx(0.5)
    assert stats.ratio.item() == pytest.approx(2.0)


def test_ratio_loss_gradient_pushes_probability_toward_target():
    boundary = torch.ones(1, 10, dtype=torch.bool)  # F = 1, far above 1/N
    prob = torch.full((1, 10), 0.9, requires_grad=True)
    ratio_loss(boundary, prob, 4.0).backward()
    assert (prob.grad > 0).all()  # descent lowers p


def test_straight_through_ones():
    c = torch.tensor([0.2, 0.7, 0.5], requires_grad=True)
    out = straight_through_ones(c)
    assert (out == 1).all()
    (out * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
    torch.testing.assert_close(c.grad, torch.tensor([1.0, 2.0, 3.0]))


def test_dechunk_gradients_finite_with_padded_chunks():
    """Rows with fewer chunks than L: the padded chunks must not poison gradients (NaN)."""
    boundary = torch.tensor([[1, 0, 1, 1], [1, 0, 0, 0]], dtype=torch.bool)
    prob = torch.where(boundary, 0.9, 0.1).requires_grad_()
    chunk_out = torch.randn(2, 3, 4, requires_grad=True)
    _, chunk_mask = chunk(torch.zeros(2, 4, 4), boundary)
    dechunk(chunk_out, boundary, prob, chunk_mask).sum().backward()
    assert torch.isfinite(chunk_out.grad).all() and torch.isfinite(prob.grad).all()

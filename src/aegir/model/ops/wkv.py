"""The RWKV-7 ("Goose") wkv recurrence — a generalised delta rule — as functions of tensors.

Convention (per batch row and head; the state S is a (K, V) matrix, K = key size, V = value size):

    S_t = diag(w_t) · S_{t-1} + b_t · (a_tᵀ · S_{t-1}) + k_t · v_tᵀ
    o_t = S_tᵀ · r_t                                                      (a V-vector)

i.e. S_t = (diag(w_t) + b_t a_tᵀ) S_{t-1} + k_t v_tᵀ, the transpose of the RWKV-7 paper's
S_t = S_{t-1}(diag(w_t) + a_t b_tᵀ) + v_t k_tᵀ (the paper keeps the state as (V, K)). The layer
(`aegir.model.rwkv.TimeMix`) passes a = −κ̂ and b = κ̂ ⊙ â, with κ̂ the unit-norm "removal key"
and â the in-context learning rate, so b (aᵀS) removes â of the state along κ̂ before k vᵀ is
written: the delta rule with a per-channel, data-dependent decay w.

Two paths, equal up to rounding (held equal by tests/test_wkv.py on outputs, final state and
every gradient, the initial state included):

* `wkv_naive`: the literal loop over time — the reference.
* `wkv_chunked`: chunks of `chunk_size` steps. Inside a chunk everything is matrix products
  (a WY-style form: one unit-lower-triangular inverse per chunk gives the "removed" rows
  z_t = S_{t-1}ᵀ a_t for all t at once); between chunks a short loop carries the state with one
  (K, K) @ (K, V) product per chunk.

Decay: w is the per-step decay in (0, 1]. Both paths use exp(max(log w, LOG_DECAY_MIN)): the
chunked form factors exp(g_t − g_s) = exp(g_t)·exp(−g_s) with g the cumulative log-decay since
the chunk start, so |g| ≤ chunk_size·|LOG_DECAY_MIN| must stay well inside float32 range
(exp(88) overflows). With LOG_DECAY_MIN = −1 and chunk_size ≤ 64 the worst factor is e^64. The
clamp never binds for RWKV-7's own parametrisation (w = exp(−e^{−0.5}·σ(·)) ≥ 0.545, i.e.
log w ≥ −0.61), so the layer is exactly RWKV-7's.

Precision: the state and all arithmetic are float32 (float64 when the inputs are float64);
outputs come back in the inputs' dtype, the final state in the compute dtype. Both paths are
wrapped in `float32_op` (aegir.model.ops.precision): under bf16/fp16 autocast they still
compute in float32 and return float32 outputs and state.

Why RWKV-7 and not RWKV-6: the chunked generalised delta rule needs one triangular inverse per
chunk (done here by batched block inversion, see `_unit_lower_inverse`), which is cheap at these
chunk sizes; with it the chunked form is >10× faster than the loop at T = 1024 on CPU
(benchmarks/bench_wkv.py), so nothing pushed us to the simpler RWKV-6 recurrence.

A third path (flash-linear-attention's Triton kernels on CUDA) would plug in at
`aegir.model.ops` — the one seam; it is not provided (fla is not a dependency here).
"""

from __future__ import annotations

import torch

from aegir.model.ops.precision import float32_op

LOG_DECAY_MIN = -1.0  # per-step log-decay floor shared by both paths (see module docstring)
MAX_CHUNK_SIZE = 64  # chunk_size · |LOG_DECAY_MIN| ≤ 64 keeps exp(±g) finite in float32


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _log_decay(w: torch.Tensor) -> torch.Tensor:
    """log w clamped to [LOG_DECAY_MIN, 0]; the one definition both paths share."""
    return torch.log(w).clamp(LOG_DECAY_MIN, 0.0)


def _check_shapes(r, w, k, v, a, b, initial_state) -> tuple[int, int, int, int, int]:
    B, T, H, K = r.shape
    for name, x in (("w", w), ("k", k), ("a", a), ("b", b)):
        if x.shape != (B, T, H, K):
            raise ValueError(f"wkv: {name} has shape {tuple(x.shape)}, expected {(B, T, H, K)}")
    if v.shape[:3] != (B, T, H):
        raise ValueError(f"wkv: v has shape {tuple(v.shape)}, expected {(B, T, H)} + (V,)")
    V = v.shape[3]
    if initial_state is not None and initial_state.shape != (B, H, K, V):
        raise ValueError(f"wkv: initial_state has shape {tuple(initial_state.shape)}, "
                         f"expected {(B, H, K, V)}")
    return B, T, H, K, V


def _unit_lower_inverse(A: torch.Tensor) -> torch.Tensor:
    """(I − A)⁻¹ for strictly lower-triangular A (..., L, L), by recursive 2×2 block inversion

        [[X, 0], [Y, Z]]⁻¹ = [[X⁻¹, 0], [−Z⁻¹ Y X⁻¹, Z⁻¹]],

    done level by level for all diagonal blocks at once (log₂ L levels of batched matmuls; L is
    padded to a power of two with identity rows). Used instead of torch.linalg.solve_triangular,
    whose CPU path loops over the batch in thousands of tiny LAPACK calls — slow, and very slow
    when the cores are shared.
    """
    L = A.shape[-1]
    P = 1 << max(0, (L - 1).bit_length())
    M = -A
    if P != L:
        M = torch.nn.functional.pad(M, (0, P - L, 0, P - L))
    eye = torch.eye(P, dtype=A.dtype, device=A.device)
    M = M + eye  # I − A, unit lower-triangular, (..., P, P)
    batch = M.shape[:-2]
    inv = torch.ones(*batch, P, 1, 1, dtype=A.dtype, device=A.device)  # inverses of 1×1 diagonal blocks
    s = 1
    while s < P:
        nb = P // s  # blocks of size s along the diagonal
        blocks = M.reshape(*batch, nb, s, nb, s)
        below = torch.diagonal(blocks, offset=-1, dim1=-4, dim2=-2)  # (..., s, s, nb−1): block (i+1, i)
        Y = below[..., 0::2].movedim(-1, -3)  # (..., nb/2, s, s): blocks (2j+1, 2j)
        X_inv, Z_inv = inv[..., 0::2, :, :], inv[..., 1::2, :, :]
        lower_left = -(Z_inv @ Y @ X_inv)
        top = torch.cat([X_inv, torch.zeros_like(X_inv)], dim=-1)  # (..., nb/2, s, 2s)
        bottom = torch.cat([lower_left, Z_inv], dim=-1)
        inv = torch.cat([top, bottom], dim=-2)  # (..., nb/2, 2s, 2s)
        s *= 2
    return inv[..., 0, :L, :L]


@float32_op
def wkv_naive(
    r: torch.Tensor, w: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    a: torch.Tensor, b: torch.Tensor, initial_state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference: a literal loop over time.

    r, w, k, a, b: (B, T, H, K); v: (B, T, H, V); w in (0, 1] (decay per step)
    initial_state: (B, H, K, V) or None (zeros)
    returns out (B, T, H, V) in r's dtype, final_state (B, H, K, V) in float32 (float64 for
    float64 inputs).
    """
    B, T, H, K, V = _check_shapes(r, w, k, v, a, b, initial_state)
    dtype, out_dtype = _compute_dtype(r), r.dtype
    r, k, v, a, b = (x.to(dtype) for x in (r, k, v, a, b))
    decay = torch.exp(_log_decay(w.to(dtype)))
    S = (torch.zeros(B, H, K, V, dtype=dtype, device=r.device) if initial_state is None
         else initial_state.to(dtype))
    outs = []
    for t in range(T):
        removed = torch.einsum("bhk,bhkv->bhv", a[:, t], S)  # aᵀS, (B, H, V)
        S = (decay[:, t, :, :, None] * S
             + b[:, t, :, :, None] * removed[:, :, None, :]
             + k[:, t, :, :, None] * v[:, t, :, None, :])  # (B, H, K, V)
        outs.append(torch.einsum("bhk,bhkv->bhv", r[:, t], S))  # (B, H, V)
    out = torch.stack(outs, dim=1) if outs else v.new_zeros(B, 0, H, V)
    return out.to(out_dtype), S


@float32_op
def wkv_chunked(
    r: torch.Tensor, w: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    a: torch.Tensor, b: torch.Tensor, initial_state: torch.Tensor | None = None,
    chunk_size: int = 32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The chunked parallel form; same arguments and results as `wkv_naive`.

    Inside a chunk of L steps with start state S₀, cumulative log-decay g_t = Σ_{s≤t} log w_s
    (inclusive), g⁻_t = g_t − log w_t (exclusive) and γ = exp(g_L), unrolling the recurrence gives

        S_t = e^{g_t} ⊙ S₀ + Σ_{s≤t} e^{g_t − g_s} ⊙ (b_s z_sᵀ + k_s v_sᵀ),   z_t = S_{t-1}ᵀ a_t.

    With ã = a ⊙ e^{g⁻}, r̃ = r ⊙ e^{g}, b̃ = b ⊙ e^{−g}, k̃ = k ⊙ e^{−g} (rows = time):

        Z = ã S₀ + tril₋₁(ã b̃ᵀ) Z + tril₋₁(ã k̃ᵀ) V  ⇒  Z = (I − tril₋₁(ã b̃ᵀ))⁻¹ (ã S₀ + tril₋₁(ã k̃ᵀ) V)
        O = r̃ S₀ + tril₀(r̃ b̃ᵀ) Z + tril₀(r̃ k̃ᵀ) V
        S_L = γ ⊙ S₀ + (b ⊙ e^{g_L − g})ᵀ Z + (k ⊙ e^{g_L − g})ᵀ V

    Writing Z = W S₀ + U (W, U from one triangular inverse per chunk, all chunks at once), the
    state passes between chunks as S_{n+1} = P_n S_n + Q_n with P_n = diag(γ) + b̂ᵀW (K, K) and
    Q_n = b̂ᵀU + k̂ᵀV (K, V): the only sequential part is one small matmul per chunk; Z and O are
    then computed for all chunks in parallel.

    T need not be a multiple of chunk_size: the tail is padded with steps that leave the state
    unchanged (w = 1, k = a = b = r = v = 0). Requires 1 ≤ chunk_size ≤ MAX_CHUNK_SIZE.
    """
    if not 1 <= chunk_size <= MAX_CHUNK_SIZE:
        raise ValueError(f"wkv_chunked: chunk_size must be in [1, {MAX_CHUNK_SIZE}], got {chunk_size}")
    B, T, H, K, V = _check_shapes(r, w, k, v, a, b, initial_state)
    dtype = _compute_dtype(r)
    out_dtype = r.dtype
    L = chunk_size
    N = max(1, -(-T // L))
    pad = N * L - T

    def prep(x: torch.Tensor) -> torch.Tensor:  # (B, T, H, X) → (B, H, N, L, X)
        x = x.to(dtype).transpose(1, 2)
        if pad:
            x = torch.nn.functional.pad(x, (0, 0, 0, pad))
        return x.reshape(B, H, N, L, x.shape[-1])

    r_, k_, v_, a_, b_ = (prep(x) for x in (r, k, v, a, b))
    log_w = prep(_log_decay(w.to(dtype)))  # zero-padded: log 1 = 0, no decay on the tail
    g = torch.cumsum(log_w, dim=-2)  # (B, H, N, L, K), inclusive
    g_excl = g - log_w
    g_last = g[..., -1:, :]  # (B, H, N, 1, K)

    r_t = r_ * torch.exp(g)
    a_t = a_ * torch.exp(g_excl)
    inv = torch.exp(-g)
    b_t = b_ * inv
    k_t = k_ * inv
    to_end = torch.exp(g_last - g)  # ≤ 1
    b_hat = b_ * to_end
    k_hat = k_ * to_end

    strict = torch.ones(L, L, dtype=torch.bool, device=r.device).tril(-1)
    incl = torch.ones(L, L, dtype=torch.bool, device=r.device).tril(0)
    A_ab = (a_t @ b_t.transpose(-1, -2)).masked_fill(~strict, 0.0)  # (B, H, N, L, L)
    A_ak = (a_t @ k_t.transpose(-1, -2)).masked_fill(~strict, 0.0)
    A_rb = (r_t @ b_t.transpose(-1, -2)).masked_fill(~incl, 0.0)
    A_rk = (r_t @ k_t.transpose(-1, -2)).masked_fill(~incl, 0.0)

    M_inv = _unit_lower_inverse(A_ab)  # (I − A_ab)⁻¹, (B, H, N, L, L)
    W = M_inv @ a_t  # (B, H, N, L, K)
    U = M_inv @ (A_ak @ v_)  # (B, H, N, L, V); Z = W S₀ + U

    b_hat_T = b_hat.transpose(-1, -2)  # (B, H, N, K, L)
    P = torch.diag_embed(torch.exp(g_last[..., 0, :])) + b_hat_T @ W  # (B, H, N, K, K)
    Q = b_hat_T @ U + k_hat.transpose(-1, -2) @ v_  # (B, H, N, K, V)

    S = (torch.zeros(B, H, K, V, dtype=dtype, device=r.device) if initial_state is None
         else initial_state.to(dtype))
    starts = []
    # unbind, not P[:, :, n]: indexing's backward would materialise a full-size zero tensor per chunk
    for P_n, Q_n in zip(P.unbind(2), Q.unbind(2)):
        starts.append(S)
        S = torch.baddbmm(Q_n.flatten(0, 1), P_n.flatten(0, 1), S.flatten(0, 1)).view(B, H, K, V)
    S0 = torch.stack(starts, dim=2)  # (B, H, N, K, V): the state entering each chunk

    Z = W @ S0 + U  # (B, H, N, L, V)
    O = r_t @ S0 + A_rb @ Z + A_rk @ v_  # (B, H, N, L, V)
    out = O.reshape(B, H, N * L, V)[:, :, :T].transpose(1, 2)  # (B, T, H, V)
    return out.to(out_dtype), S

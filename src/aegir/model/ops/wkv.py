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
  (K, K) @ (K, V) product per chunk. It is a `torch.autograd.Function` with a hand-written
  backward (`_ChunkedWKV`, derivation in its docstring): autograd over the same forward spent
  most of its time on copies and zero-fills of sliced intermediates, and kept every one of
  them alive; the hand-written backward reuses a few saved products and runs the reverse of the
  chunk loop once. On CPU it takes the batch a few rows at a time (tiles), so that each
  tile's intermediates stay in cache; the results are the same to the bit.

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
chunk (done here by batched block inversion, see `unit_lower_inverse`), which is cheap at these
chunk sizes; with it the chunked form is >10× faster than the loop at T = 1024 on CPU
(benchmarks/bench_wkv.py), so nothing pushed us to the simpler RWKV-6 recurrence.

Two more paths plug in at `aegir.model.ops` (`wkv_auto`, the one seam) and are held equal to
`wkv_naive` the same way: the CPU's C kernel (aegir.model.ops.wkv_cpu) and, on CUDA with the
optional `gpu` extra, flash-linear-attention's Triton kernels (aegir.model.ops.wkv_fla).
"""

from __future__ import annotations

import torch

from aegir.model.ops.precision import float32_op

LOG_DECAY_MIN = -1.0  # per-step log-decay floor shared by both paths (see module docstring)
MAX_CHUNK_SIZE = 64  # chunk_size · |LOG_DECAY_MIN| ≤ 64 keeps exp(±g) finite in float32
TILE_MATRICES = 256  # on CPU, about this many (chunk, head, row) matrices per tile (`_ChunkedWKV`)


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
    """(I − A)⁻¹ for strictly lower-triangular A (M, L, L), by recursive 2×2 block inversion

        [[X, 0], [Y, Z]]⁻¹ = [[X⁻¹, 0], [−Z⁻¹ Y X⁻¹, Z⁻¹]],

    done level by level for all diagonal blocks at once (log₂ L levels of batched matmuls; L is
    padded to a power of two), each level writing its lower-left blocks in place into one
    buffer. For I − A the lower-left block of the matrix is −A's, so the inverse's is
    Z⁻¹ A_ll X⁻¹. No autograd: `_ChunkedWKV` differentiates through the solve itself. Used
    instead of torch.linalg.solve_triangular, whose CPU path loops over the batch in thousands
    of tiny LAPACK calls — slow, and very slow when the cores are shared.
    """
    M, L = A.shape[0], A.shape[-1]
    P = 1 << max(0, (L - 1).bit_length())
    if P != L:
        A = torch.nn.functional.pad(A, (0, P - L, 0, P - L))
    inv = torch.zeros(M, P, P, dtype=A.dtype, device=A.device)
    inv.diagonal(dim1=-2, dim2=-1).fill_(1.0)
    s = 1
    while s < P:  # the diagonal blocks of size 2s are [[X⁻¹, ·], [·, Z⁻¹]] with X⁻¹, Z⁻¹ done
        n = P // (2 * s)
        inv_d = torch.diagonal(inv.view(M, n, 2, s, n, 2, s), dim1=1, dim2=4)  # (M, 2, s, 2, s, n)
        A_d = torch.diagonal(A.reshape(M, n, 2, s, n, 2, s), dim1=1, dim2=4)
        X_inv = inv_d[:, 0, :, 0].movedim(-1, 1)  # (M, n, s, s)
        Z_inv = inv_d[:, 1, :, 1].movedim(-1, 1)
        A_ll = A_d[:, 1, :, 0].movedim(-1, 1)
        inv_d[:, 1, :, 0].copy_((Z_inv @ A_ll @ X_inv).movedim(1, -1))
        s *= 2
    return inv[:, :L, :L] if P != L else inv


def _into_chunks(dst: torch.Tensor, x: torch.Tensor, scale: torch.Tensor | None = None) -> None:
    """Write x (B, T, H, X) into dst (B, H, N, L, X), zero past T; multiplied by scale
    (B, H, N, L, X) when given (one pass instead of a copy and then a product)."""
    B, T, H, X = x.shape
    N, L = dst.shape[2], dst.shape[3]
    full = T // L
    if full:
        src = x[:, :full * L].reshape(B, full, L, H, X).permute(0, 3, 1, 2, 4)
        if scale is None:
            dst[:, :, :full].copy_(src)
        else:
            torch.mul(src, scale[:, :, :full], out=dst[:, :, :full])
    if full < N:  # the last chunk is partial (or T = 0)
        rem = T - full * L
        src = x[:, full * L:].transpose(1, 2)  # (B, H, rem, X)
        if scale is None:
            dst[:, :, full, :rem].copy_(src)
        else:
            torch.mul(src, scale[:, :, full, :rem], out=dst[:, :, full, :rem])
        dst[:, :, full, rem:].zero_()


def _to_chunks(x: torch.Tensor, N: int, L: int) -> torch.Tensor:
    """(B, T, H, X) → a new (B, H, N, L, X), zero-padded past T."""
    B, T, H, X = x.shape
    out = x.new_empty(B, H, N, L, X)
    _into_chunks(out, x)
    return out


def _from_chunks(x: torch.Tensor, T: int, scale: torch.Tensor | None = None,
                 plus: tuple[torch.Tensor, torch.Tensor] | None = None,
                 out: torch.Tensor | None = None) -> torch.Tensor:
    """(B, H, N, L, X) → a contiguous (B, T, H, X), the padding dropped: x, or x ⊙ scale, plus
    y ⊙ y_scale when `plus` = (y, y_scale) is given (all (B, H, N, L, X)), written in one pass
    each instead of a product and then a transposing copy; into `out` (contiguous) when given,
    else into a new tensor."""
    B, H, N, L, X = x.shape

    def flat(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(B, H, N * L, X)[:, :, :T]

    out = x.new_empty(B, T, H, X) if out is None else out
    dst = out.transpose(1, 2)  # (B, H, T, X), a view of out
    if scale is None:
        dst.copy_(flat(x))
    else:
        torch.mul(flat(x), flat(scale), out=dst)
    if plus is not None:
        dst.addcmul_(flat(plus[0]), flat(plus[1]))
    return out


def _triangles(L: int, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(L, L) 0/1 masks: strictly lower (z_t reads the steps before t) and lower with the
    diagonal (o_t reads step t too)."""
    ones = torch.ones(L, L, dtype=dtype, device=device)
    return ones.tril(-1), ones.tril(0)


def _block_mask(L: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """(2L, 2L) 0/1 mask of [[A_ab, A_ak], [A_rb, A_rk]]: strictly lower in the top row of
    blocks, lower with the diagonal in the bottom row."""
    strict, incl = _triangles(L, dtype, device)
    return torch.cat([torch.cat([strict, strict], 1), torch.cat([incl, incl], 1)], 0)


class _ChunkedWKV(torch.autograd.Function):
    """The chunked form's forward and its hand-written backward.

    Per chunk of L steps (rows = time; batch, head and chunk indices left out), with start state
    S₀ (K, V), cumulative log-decay g_t = Σ_{s≤t} log w_s, g⁻ = g − log w, γ = e^{g_L}:

        ã = a ⊙ e^{g⁻}, r̃ = r ⊙ e^{g}, b̃ = b ⊙ e^{−g}, k̃ = k ⊙ e^{−g},
        b̂ = b ⊙ e^{g_L − g}, k̂ = k ⊙ e^{g_L − g}
        [[A_ab, A_ak], [A_rb, A_rk]] = mask ⊙ ([ã; r̃] [b̃; k̃]ᵀ)          (one (2L, 2L) product)
        X = (I − A_ab)⁻¹;  [W | U] = X [ã | A_ak V]
        P = diag(γ) + b̂ᵀW,  Q = b̂ᵀU + k̂ᵀV;  S₀ of the next chunk = P S₀ + Q   (the only loop)
        Z = W S₀ + U  (the removed rows z_t = S_{t−1}ᵀ a_t);  O = r̃ S₀ + A_rb Z + A_rk V

    (see `wkv_chunked` for where this comes from). Backward, given dO and the gradient of the
    final state: the gradient D entering each chunk's end state runs the loop in reverse,
    D_{n−1} = P_nᵀ D_n + r̃ᵀ dO + Wᵀ A_rbᵀ dO; then every chunk at once:

        dZ = A_rbᵀ dO,  dP = D S₀ᵀ,  dQ = D
        dW = dZ S₀ᵀ + b̂ dP,  dU = dZ + b̂ D,  [db̂ | dk̂] = [W dPᵀ + U Dᵀ | V Dᵀ]
        [dã_X | dY] = Xᵀ [dW | dU]                    (Y = A_ak V; a solve's backward)
        dA_ab = [dã_X | dY] [W | U]ᵀ, dA_ak = dY Vᵀ, dA_rb = dO Zᵀ, dA_rk = dO Vᵀ   (then masked)
        [dã; dr̃] = dA [b̃; k̃] + [dã_X; dO S₀ᵀ],  [db̃; dk̃] = dAᵀ [ã; r̃]
        dV = A_rkᵀ dO + A_akᵀ dY + k̂ D

    and through the factors: dr = dr̃ ⊙ e^{g}, da = dã ⊙ e^{g⁻}, db = db̃ ⊙ e^{−g} + db̂ ⊙ e^{g_L−g}
    (dk alike); dg = dr̃⊙r̃ + dã⊙ã − db̃⊙b̃ − dk̃⊙k̃ − db̂⊙b̂ − dk̂⊙k̂, plus at the last step
    Σ_t (db̂⊙b̂ + dk̂⊙k̂) + diag(dP) ⊙ γ; d log w = reverse cumsum of dg − dã⊙ã.

    Tiles: forward and backward run on `rows` batch rows at a time (`_forward_tile`,
    `_backward_tile`). A tile of a few hundred (head, chunk) matrices keeps its ~15 intermediates
    of (L, L) and (L, K) matrices in the CPU's caches between the products and passes that read
    them; the whole batch's at 16 × 1025 bytes are 6.5 MB each, and every op streamed them from
    memory. Every op here works per matrix or per element, so tiled results equal the untiled
    ones bit for bit (tests/test_wkv.py), and checkpoints do not change with the tiling.
    """

    @staticmethod
    def forward(ctx, r, log_w, k, v, a, b, initial_state, L, rows):
        B, T, H, K = r.shape
        out = r.new_empty(B, T, H, v.shape[-1])
        finals, saved = [], []
        for start in range(0, B, rows):
            part = slice(start, start + rows)
            S, tile = _forward_tile(r[part], log_w[part], k[part], v[part], a[part], b[part],
                                    initial_state[part], L, out[part])
            finals.append(S)
            saved.extend(tile)
        ctx.save_for_backward(*saved)
        ctx.dims = (B, K, L, rows)
        final = finals[0] if len(finals) == 1 else torch.cat(finals) if finals else initial_state.clone()
        return out, final

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_out, d_state):
        B, K, L, rows = ctx.dims
        saved = ctx.saved_tensors
        starts = range(0, B, rows)
        per_tile = len(saved) // max(1, len(starts))  # what each `_forward_tile` saved
        _, T, H, V = d_out.shape
        grads = [d_out.new_empty(B, T, H, V if i == 3 else K) for i in range(6)]  # r, log w, k, v, a, b
        d_initial = []
        # float32 like the forward, also when the backward runs inside an autocast region (its
        # products would otherwise be cast to the low precision and clash with the saved float32)
        with torch.autocast(device_type=d_out.device.type, enabled=False):
            for i, start in enumerate(starts):
                part = slice(start, start + rows)
                d_initial.append(_backward_tile(saved[i * per_tile:(i + 1) * per_tile], d_out[part],
                                                d_state[part], L, [g[part] for g in grads]))
        d_initial = d_initial[0] if len(d_initial) == 1 else torch.cat(d_initial) if d_initial else d_state.clone()
        return (*grads, d_initial, None, None)


def _forward_tile(r, log_w, k, v, a, b, initial_state, L, out):
    """`_ChunkedWKV`'s forward on some batch rows: writes the output into `out` (B, T, H, V) and
    returns the final state and the tensors the backward needs."""
    B, T, H, K = r.shape
    V = v.shape[-1]
    N = max(1, -(-T // L))
    M = B * H * N  # one matrix per (batch row, head, chunk)
    g = _to_chunks(log_w, N, L)  # zero-padded: no decay on the tail
    g_excl = g.clone()
    g.cumsum_(-2)  # (B, H, N, L, K), inclusive
    e_excl = g_excl.neg_().add_(g).exp_()  # e^{g⁻}
    e_pos = g.exp_()  # e^{g}; g is not needed any more
    e_neg = torch.reciprocal(e_pos)
    e_last = e_pos[..., -1:, :]  # γ, (B, H, N, 1, K)
    AR = r.new_empty(B, H, N, 2, L, K)  # [ã; r̃] per chunk
    BK = r.new_empty(B, H, N, 2, L, K)  # [b̃; k̃]
    _into_chunks(AR[:, :, :, 0], a, e_excl)
    _into_chunks(AR[:, :, :, 1], r, e_pos)
    _into_chunks(BK[:, :, :, 0], b, e_neg)
    _into_chunks(BK[:, :, :, 1], k, e_neg)
    v_c = _to_chunks(v, N, L).view(M, L, V)
    AR, BK = AR.view(M, 2 * L, K), BK.view(M, 2 * L, K)

    A = torch.bmm(AR, BK.transpose(1, 2)).mul_(_block_mask(L, r.dtype, r.device))  # (M, 2L, 2L)
    X = _unit_lower_inverse(A[:, :L, :L])  # (M, L, L)
    Y = torch.bmm(A[:, :, L:], v_c)  # [A_ak V; A_rk V], (M, 2L, V)
    W = torch.bmm(X, AR[:, :L])  # (M, L, K)
    U = torch.bmm(X, Y[:, :L])  # (M, L, V)
    BK_hat = BK.view(B, H, N, 2, L, K).mul(e_last[:, :, :, None]).view(M, 2 * L, K)  # [b̂; k̂]
    b_hat_T = BK_hat[:, :L].transpose(1, 2)
    P = torch.bmm(b_hat_T, W)  # (M, K, K)
    P.diagonal(dim1=-2, dim2=-1).add_(e_last.reshape(M, K))
    Q = torch.bmm(b_hat_T, U).baddbmm_(BK_hat[:, L:].transpose(1, 2), v_c)  # (M, K, V)

    starts = r.new_empty(B, H, N, K, V)  # S₀ of every chunk
    P_n, Q_n = P.view(B, H, N, K, K).unbind(2), Q.view(B, H, N, K, V).unbind(2)
    S = initial_state
    for n in range(N):
        starts[:, :, n] = S
        S = torch.baddbmm(Q_n[n].flatten(0, 1), P_n[n].flatten(0, 1), S.flatten(0, 1)).view(B, H, K, V)
    S0 = starts.view(M, K, V)
    Z = torch.baddbmm(U, W, S0)  # W S₀ + U, (M, L, V)
    O = torch.baddbmm(Y[:, L:], AR[:, L:], S0).baddbmm_(A[:, L:, :L], Z)  # (M, L, V), O as in the docstring  # noqa: E741
    _from_chunks(O.view(B, H, N, L, V), T, out=out)
    return S, (AR, BK, BK_hat, e_pos, e_excl, e_neg, A, X, W, U, Z, S0, P, v_c)


def _backward_tile(saved, d_out, d_state, L, grads):
    """`_ChunkedWKV`'s backward on the batch rows of one `_forward_tile` (`saved`: what it
    returned): writes the gradients of r, log w, k, v, a, b into `grads` and returns the
    gradient of the initial state."""
    AR, BK, BK_hat, e_pos, e_excl, e_neg, A, X, W, U, Z, S0, P, v_c = saved
    B, T, H, V = d_out.shape
    K, N = AR.shape[-1], e_pos.shape[2]
    M = B * H * N
    a_t, r_t, b_t, k_t = AR[:, :L], AR[:, L:], BK[:, :L], BK[:, L:]  # ã, r̃, b̃, k̃: (M, L, K)
    b_hat, k_hat = BK_hat[:, :L], BK_hat[:, L:]
    A_ak, A_rb, A_rk = A[:, :L, L:], A[:, L:, :L], A[:, L:, L:]
    S0_T = S0.transpose(1, 2)
    dO = _to_chunks(d_out, N, L).view(M, L, V)
    dZ = torch.bmm(A_rb.transpose(1, 2), dO)  # (M, L, V)
    into_start = torch.bmm(r_t.transpose(1, 2), dO).baddbmm_(W.transpose(1, 2), dZ)  # (M, K, V)

    D = d_out.new_empty(B, H, N, K, V)  # the gradient entering each chunk's end state
    P_n, into_start_n = P.view(B, H, N, K, K).unbind(2), into_start.view(B, H, N, K, V).unbind(2)
    dS = d_state
    for n in range(N - 1, -1, -1):
        D[:, :, n] = dS
        dS = torch.baddbmm(into_start_n[n].flatten(0, 1), P_n[n].flatten(0, 1).transpose(1, 2),
                           dS.flatten(0, 1)).view(B, H, K, V)
    d_initial = dS
    D = D.view(M, K, V)
    D_T = D.transpose(1, 2)

    dP = torch.bmm(D, S0_T)  # (M, K, K)
    dW = torch.bmm(dZ, S0_T).baddbmm_(b_hat, dP)  # (M, L, K)
    dU = torch.baddbmm(dZ, b_hat, D)  # (M, L, V)
    d_b_hat = torch.bmm(W, dP.transpose(1, 2)).baddbmm_(U, D_T)
    d_k_hat = torch.bmm(v_c, D_T)
    X_T = X.transpose(1, 2)
    d_a_solve, dY = torch.bmm(X_T, dW), torch.bmm(X_T, dU)  # the solve's backward
    strict, incl = _triangles(L, A.dtype, A.device)
    dA_ab = torch.bmm(d_a_solve, W.transpose(1, 2)).baddbmm_(dY, U.transpose(1, 2)).mul_(strict)
    dA_ak = torch.bmm(dY, v_c.transpose(1, 2)).mul_(strict)
    dA_rb = torch.bmm(dO, Z.transpose(1, 2)).mul_(incl)
    dA_rk = torch.bmm(dO, v_c.transpose(1, 2)).mul_(incl)
    d_a_t = torch.baddbmm(d_a_solve, dA_ab, b_t).baddbmm_(dA_ak, k_t)
    d_r_t = torch.bmm(dA_rb, b_t).baddbmm_(dA_rk, k_t).baddbmm_(dO, S0_T)
    d_b_t = torch.bmm(dA_ab.transpose(1, 2), a_t).baddbmm_(dA_rb.transpose(1, 2), r_t)
    d_k_t = torch.bmm(dA_ak.transpose(1, 2), a_t).baddbmm_(dA_rk.transpose(1, 2), r_t)
    dv = torch.bmm(A_rk.transpose(1, 2), dO).baddbmm_(A_ak.transpose(1, 2), dY).baddbmm_(k_hat, D)

    # through the decay factors, in (B, H, N, L, K) layout
    chunked = (B, H, N, L, K)
    a_t, r_t, b_t, k_t, b_hat, k_hat = (x.reshape(chunked) for x in (a_t, r_t, b_t, k_t, b_hat, k_hat))
    d_a_t, d_r_t, d_b_t, d_k_t, d_b_hat, d_k_hat = (
        x.view(chunked) for x in (d_a_t, d_r_t, d_b_t, d_k_t, d_b_hat, d_k_hat))
    d_via_hat = (d_b_hat * b_hat).addcmul_(d_k_hat, k_hat)  # db̂⊙b̂ + dk̂⊙k̂
    d_via_a = d_a_t * a_t  # dã⊙ã
    dg = torch.addcmul(d_via_a, d_r_t, r_t).addcmul_(d_b_t, b_t, value=-1).addcmul_(d_k_t, k_t, value=-1)
    dg.sub_(d_via_hat)
    dg[..., -1, :] += d_via_hat.sum(-2) + dP.diagonal(dim1=-2, dim2=-1).view(B, H, N, K) * e_pos[..., -1, :]
    d_log_w_c = dg.flip(-2).cumsum_(-2).flip(-2).sub_(d_via_a)  # reverse cumsum: g_t feeds every g_{s≥t}
    e_hat = e_neg * e_pos[..., -1:, :]  # e^{g_L − g}
    d_r, d_log_w, d_k, d_v, d_a, d_b = grads
    _from_chunks(d_r_t, T, e_pos, out=d_r)
    _from_chunks(d_log_w_c, T, out=d_log_w)
    _from_chunks(d_k_t, T, e_neg, (d_k_hat, e_hat), out=d_k)
    _from_chunks(dv.view(B, H, N, L, V), T, out=d_v)
    _from_chunks(d_a_t, T, e_excl, out=d_a)
    _from_chunks(d_b_t, T, e_neg, (d_b_hat, e_hat), out=d_b)
    return d_initial


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
    chunk_size: int = 32, tile_rows: int | None = None,
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
    then computed for all chunks in parallel. The four (L, L) products are one (2L, 2L) product
    of the stacked rows [ã; r̃] and [b̃; k̃]; the backward is hand-written (`_ChunkedWKV`).

    T need not be a multiple of chunk_size: the tail is padded with steps that leave the state
    unchanged (w = 1, k = a = b = r = v = 0). Requires 1 ≤ chunk_size ≤ MAX_CHUNK_SIZE.
    Not twice differentiable (the backward is not itself differentiable).

    tile_rows: batch rows per tile (`_ChunkedWKV`); None: the whole batch on accelerators, and
    on CPU as many rows as make about TILE_MATRICES chunk matrices. The results do not depend
    on it, to the bit.
    """
    if not 1 <= chunk_size <= MAX_CHUNK_SIZE:
        raise ValueError(f"wkv_chunked: chunk_size must be in [1, {MAX_CHUNK_SIZE}], got {chunk_size}")
    if tile_rows is not None and tile_rows < 1:
        raise ValueError(f"wkv_chunked: tile_rows must be ≥ 1, got {tile_rows}")
    B, T, H, K, V = _check_shapes(r, w, k, v, a, b, initial_state)
    if tile_rows is None:
        chunks = H * max(1, -(-T // chunk_size))
        tile_rows = max(1, TILE_MATRICES // chunks) if r.device.type == "cpu" else max(1, B)
    dtype, out_dtype = _compute_dtype(r), r.dtype
    state = (torch.zeros(B, H, K, V, dtype=dtype, device=r.device) if initial_state is None
             else initial_state.to(dtype))
    out, final_state = _ChunkedWKV.apply(r.to(dtype), _log_decay(w.to(dtype)), k.to(dtype), v.to(dtype),
                                         a.to(dtype), b.to(dtype), state, chunk_size, tile_rows)
    return out.to(out_dtype), final_state

"""RWKV-7 layers: time mixing (wkv recurrence), channel mixing, token shift, and a stack of blocks.

The stack's recurrent state is explicit (`LayerState`, one per layer): it is the seam through
which Phase 3 fuses specialists' states into the primary's main network.

Departures from RWKV-7 ("Goose", arXiv 2503.14456) and its reference code:
* No value residual (v_first shared across layers): each layer's state depends on that layer
  alone, so the per-layer state API stays self-contained.
* LoRA widths and initialisations follow the spirit of the reference (slow-to-fast decays across
  channels, zero-initialised output projections so each block starts as the identity) with
  simpler formulas.
* Padding: sequences are right-padded; at padded positions the recurrence gets k = a = 0 and
  w = 1, so the wkv state passes through unchanged, and the token-shift states are taken at each
  sequence's last real position. Final states are therefore per sample, whatever the padding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from aegir.model.ops import wkv_auto, wkv_naive


@dataclass
class LayerState:
    """The recurrent state of one RWKV block after (or before) a sequence.

    wkv:           (B, H, K, V) float32, the time-mix matrix state per head
    shift_time:    (B, D), the time-mix input (after its LayerNorm) at the last position
    shift_channel: (B, D), the channel-mix input (after its LayerNorm) at the last position
    """

    wkv: torch.Tensor
    shift_time: torch.Tensor
    shift_channel: torch.Tensor

    def detach(self) -> LayerState:
        return LayerState(self.wkv.detach(), self.shift_time.detach(), self.shift_channel.detach())

    def select(self, index: torch.Tensor) -> LayerState:
        """The states of the batch rows at `index` (1-D long)."""
        return LayerState(self.wkv[index], self.shift_time[index], self.shift_channel[index])

    def scatter(self, index: torch.Tensor, batch_size: int) -> LayerState:
        """The inverse of `select`: a state of `batch_size` rows holding this state's row i at
        row index[i] and zeros elsewhere (the samples that did not run contribute nothing)."""

        def place(x: torch.Tensor) -> torch.Tensor:
            out = x.new_zeros((batch_size, *x.shape[1:]))
            out[index] = x
            return out

        return LayerState(place(self.wkv), place(self.shift_time), place(self.shift_channel))


def _shifted(x: torch.Tensor, shift_state: torch.Tensor) -> torch.Tensor:
    """x one step later in time: position t gets x[t-1], position 0 gets shift_state. (B, T, D)"""
    return torch.cat([shift_state[:, None, :].to(x.dtype), x[:, :-1]], dim=1)


def _last_real(x: torch.Tensor, mask: torch.Tensor | None, fallback: torch.Tensor) -> torch.Tensor:
    """x at each row's last real position (right padding); `fallback` for rows with none. (B, D)"""
    if x.shape[1] == 0:
        return fallback
    if mask is None:
        return x[:, -1]
    lengths = mask.sum(dim=1)  # (B,)
    last = x[torch.arange(x.shape[0], device=x.device), (lengths - 1).clamp(min=0)]
    return torch.where((lengths > 0)[:, None], last, fallback.to(x.dtype))


def _lora_width(d_model: int, scale: float, power: float) -> int:
    return max(16, int(round(scale * d_model ** power / 16)) * 16)


_DECAY_SCALE = math.exp(-0.5)  # RWKV-7's largest per-step log-decay magnitude, e^{−½}


def decay_reference(z: torch.Tensor) -> torch.Tensor:
    """RWKV-7's decay as its reference code writes it: w = exp(−exp(−softplus(−z) − ½))."""
    return torch.exp(-torch.exp(-F.softplus(-z) - 0.5))


def decay(z: torch.Tensor) -> torch.Tensor:
    """The same decay in three elementwise ops instead of seven: exp(−softplus(−z)) = σ(z), so
    w = exp(−e^{−½}·σ(z)) ∈ [e^{−e^{−½}}, 1) ≈ [0.545, 1)."""
    return torch.exp(torch.sigmoid(z) * -_DECAY_SCALE)


def head_group_norm(y: torch.Tensor, norm: nn.GroupNorm) -> torch.Tensor:
    """`norm` (GroupNorm with one group per head) of y (B, T, H, K), as a LayerNorm over each
    head's K channels and then the per-channel affine: the same numbers, without GroupNorm's CPU
    kernel, ~3× slower here (forward + backward at (16·1025, 96)) than LayerNorm's and an
    addcmul. Returns (B, T, H·K)."""
    B, T, H, K = y.shape
    normed = F.layer_norm(y, (K,), eps=norm.eps).view(B, T, H * K)
    return torch.addcmul(norm.bias, normed, norm.weight)


class TimeMix(nn.Module):
    """RWKV-7 time mixing: token shift → r, w, k, v, a, g → wkv recurrence → group norm → gate.

    `reference` runs every op through its literal version (tests; never faster): the wkv loop
    instead of the chunked form, RWKV-7's decay formula instead of `decay`, nn.GroupNorm instead
    of `head_group_norm`. `naive_wkv` swaps the wkv op alone. `wkv_kernel` runs the wkv on the
    CPU kernel where it takes the inputs (`aegir.model.ops.wkv_auto`), else the chunked form.
    """

    def __init__(self, d_model: int, head_size: int, layer_id: int, n_layers: int,
                 chunk_size: int = 32, naive_wkv: bool = False, wkv_kernel: bool = False):
        super().__init__()
        if d_model % head_size:
            raise ValueError(f"d_model {d_model} is not a multiple of head_size {head_size}")
        D, K = d_model, head_size
        self.n_head, self.head_size = D // K, K
        self.chunk_size, self.naive_wkv, self.reference = chunk_size, naive_wkv, False
        self.wkv_kernel = wkv_kernel
        depth = layer_id / max(1, n_layers - 1)  # 0 → first layer, 1 → last
        keep = 1.0 - layer_id / n_layers  # 1 → first layer, → 0 at the last
        frac = torch.arange(D, dtype=torch.float32) / D
        # how much of the previous token each projection reads, varied across channels
        self.mix_r = nn.Parameter((1 - frac ** (0.2 * keep)).view(1, 1, D))
        self.mix_w = nn.Parameter((1 - frac ** (0.9 * keep)).view(1, 1, D))
        self.mix_k = nn.Parameter((1 - frac ** (0.7 * keep)).view(1, 1, D))
        self.mix_v = nn.Parameter((1 - frac ** (0.7 * keep)).view(1, 1, D))
        self.mix_a = nn.Parameter((1 - frac ** (0.9 * keep)).view(1, 1, D))
        self.mix_g = nn.Parameter((1 - frac ** (0.2 * keep)).view(1, 1, D))

        d_w, d_a, d_g = _lora_width(D, 1.8, 0.5), _lora_width(D, 1.8, 0.5), _lora_width(D, 0.6, 0.8)
        n = torch.arange(D, dtype=torch.float32) / max(1, D - 1)
        # log-log decay: w0 ≈ −6.5 (decay ≈ 0.9985) on the first channels to ≈ −1.5 (≈ 0.89) on the last
        self.w0 = nn.Parameter(-7.0 + 5.0 * n ** (0.85 + depth ** 0.5) + 0.5)
        self.w1 = nn.Parameter(torch.zeros(D, d_w))
        self.w2 = nn.Parameter(torch.empty(d_w, D).uniform_(-0.1, 0.1))
        self.a0 = nn.Parameter(torch.zeros(D))  # in-context learning rate σ(0) = ½ at init
        self.a1 = nn.Parameter(torch.zeros(D, d_a))
        self.a2 = nn.Parameter(torch.empty(d_a, D).uniform_(-0.1, 0.1))
        self.g1 = nn.Parameter(torch.zeros(D, d_g))
        self.g2 = nn.Parameter(torch.empty(d_g, D).uniform_(-0.1, 0.1))
        self.k_k = nn.Parameter(torch.full((D,), 0.85))
        self.k_a = nn.Parameter(torch.ones(D))
        self.r_k = nn.Parameter(torch.zeros(self.n_head, K))

        bound = 0.5 / math.sqrt(D)
        self.receptance = nn.Linear(D, D, bias=False)
        self.key = nn.Linear(D, D, bias=False)
        self.value = nn.Linear(D, D, bias=False)
        self.output = nn.Linear(D, D, bias=False)
        for lin in (self.receptance, self.key, self.value):
            nn.init.uniform_(lin.weight, -bound, bound)
        nn.init.zeros_(self.output.weight)  # the block starts as the identity
        self.ln_x = nn.GroupNorm(self.n_head, D, eps=64e-5)

    def _lora_inputs(self, x: torch.Tensor, xx: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The first products of the three LoRAs, xw @ w1, xa @ a1, xg @ g1 with x_i = x + xx ⊙ μ_i,
        as two matmuls for all three: x @ [w1 a1 g1] + xx @ [μ_w⊙w1  μ_a⊙a1  μ_g⊙g1]. Their
        widths (16 at d_model 96) make three separate products slow; the mixed inputs x_w, x_a,
        x_g are never formed. x, xx: (B, T, D); returns three (B, T, width) views."""
        B, T, D = x.shape
        first = torch.cat([self.w1, self.a1, self.g1], dim=1)  # (D, d_w + d_a + d_g)
        first_of_shift = torch.cat([self.mix_w.view(D, 1) * self.w1, self.mix_a.view(D, 1) * self.a1,
                                    self.mix_g.view(D, 1) * self.g1], dim=1)
        h = torch.addmm(x.reshape(B * T, D) @ first, xx.reshape(B * T, D), first_of_shift)
        widths = (self.w1.shape[1], self.a1.shape[1], self.g1.shape[1])
        return tuple(part.view(B, T, -1) for part in h.split(widths, dim=1))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, wkv_state: torch.Tensor,
                shift_state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x: (B, T, D) normalised input; mask: (B, T) bool or None; wkv_state: (B, H, K, K);
        shift_state: (B, D). Returns (out (B, T, D), wkv_state, shift_state)."""
        B, T, D = x.shape
        H, K = self.n_head, self.head_size
        xx = _shifted(x, shift_state) - x  # (B, T, D)
        xr, xk, xv = (torch.addcmul(x, xx, mix) for mix in (self.mix_r, self.mix_k, self.mix_v))
        r = self.receptance(xr)  # (B, T, D)
        k = self.key(xk)
        v = self.value(xv)
        if self.reference:
            xw, xa, xg = (torch.addcmul(x, xx, mix) for mix in (self.mix_w, self.mix_a, self.mix_g))
            lora_w, lora_a, lora_g = xw @ self.w1, xa @ self.a1, xg @ self.g1
        else:
            lora_w, lora_a, lora_g = self._lora_inputs(x, xx)
        w = (decay_reference if self.reference else decay)(self.w0 + torch.tanh(lora_w) @ self.w2)  # [0.545, 1)
        a = torch.sigmoid(self.a0 + lora_a @ self.a2)  # in-context learning rate
        g = torch.sigmoid(lora_g) @ self.g2  # output gate

        kk = F.normalize((k * self.k_k).view(B, T, H, K), dim=-1)  # removal key κ̂, unit norm
        k = k * torch.addcmul(1 - self.k_a, a, self.k_a)  # k ⊙ (1 + (a − 1) ⊙ k_a)
        a_op, b_op = -kk, kk * a.view(B, T, H, K)
        if mask is not None:  # padded steps leave the state untouched
            keep = mask.view(B, T, 1, 1)
            k = k * mask[..., None]
            a_op = a_op * keep
            w = torch.where(mask[..., None], w, torch.ones_like(w))

        op_args = (r.view(B, T, H, K), w.view(B, T, H, K), k.view(B, T, H, K),
                   v.view(B, T, H, K), a_op, b_op, wkv_state)
        if self.naive_wkv or self.reference:
            y, new_wkv = wkv_naive(*op_args)
        else:
            # (B, T, H, K)
            y, new_wkv = wkv_auto(*op_args, chunk_size=self.chunk_size, kernel=self.wkv_kernel)

        if self.reference:
            y = self.ln_x(y.reshape(B * T, D)).view(B, T, D)
        else:
            y = head_group_norm(y, self.ln_x)
        bonus = (r.view(B, T, H, K) * k.view(B, T, H, K) * self.r_k).sum(-1, keepdim=True)
        y = torch.addcmul(y.view(B, T, H, K), bonus, v.view(B, T, H, K)).view(B, T, D)
        return self.output(y * g), new_wkv, _last_real(x, mask, shift_state)


class _SquaredReLU(torch.autograd.Function):
    """relu(x)², saving relu(x) for a backward of one op, g · 2 relu(x): the same bits as
    `torch.relu(x) ** 2` and its autograd (pow's backward, then relu's), in two passes over the
    (B, T, ffn_mult · D) activations instead of five."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(x)
        ctx.save_for_backward(y)
        return y * y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return grad * (y + y)


def squared_relu(x: torch.Tensor) -> torch.Tensor:
    """relu(x)², RWKV's channel-mix activation."""
    return _SquaredReLU.apply(x)


class ChannelMix(nn.Module):
    """RWKV channel mixing: token shift → squared-ReLU MLP (hidden = ffn_mult · D)."""

    def __init__(self, d_model: int, layer_id: int, n_layers: int, ffn_mult: int = 4):
        super().__init__()
        keep = 1.0 - layer_id / n_layers
        frac = torch.arange(d_model, dtype=torch.float32) / d_model
        self.mix_k = nn.Parameter((1 - frac ** (keep ** 4)).view(1, 1, d_model))
        self.key = nn.Linear(d_model, ffn_mult * d_model, bias=False)
        self.value = nn.Linear(ffn_mult * d_model, d_model, bias=False)
        bound = 0.5 / math.sqrt(d_model)
        nn.init.uniform_(self.key.weight, -bound, bound)
        nn.init.zeros_(self.value.weight)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None,
                shift_state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x: (B, T, D) normalised input. Returns (out (B, T, D), shift_state (B, D))."""
        xk = torch.addcmul(x, _shifted(x, shift_state) - x, self.mix_k)
        return self.value(squared_relu(self.key(xk))), _last_real(x, mask, shift_state)


class RWKVBlock(nn.Module):
    """Pre-LayerNorm residual block: x + TimeMix(LN(x)), then + ChannelMix(LN(·))."""

    def __init__(self, d_model: int, head_size: int, layer_id: int, n_layers: int,
                 chunk_size: int = 32, ffn_mult: int = 4, wkv_kernel: bool = False):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.att = TimeMix(d_model, head_size, layer_id, n_layers, chunk_size, wkv_kernel=wkv_kernel)
        self.ln2 = nn.LayerNorm(d_model)
        self.ffn = ChannelMix(d_model, layer_id, n_layers, ffn_mult)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None,
                state: LayerState) -> tuple[torch.Tensor, LayerState]:
        att_out, wkv, shift_time = self.att(self.ln1(x), mask, state.wkv, state.shift_time)
        x = x + att_out
        ffn_out, shift_channel = self.ffn(self.ln2(x), mask, state.shift_channel)
        return x + ffn_out, LayerState(wkv, shift_time, shift_channel)


class RWKVStack(nn.Module):
    """n_layers RWKV blocks and a final LayerNorm, with per-layer recurrent state in and out."""

    def __init__(self, n_layers: int, d_model: int, head_size: int, chunk_size: int = 32,
                 ffn_mult: int = 4, wkv_kernel: bool = False):
        super().__init__()
        self.d_model, self.head_size = d_model, head_size
        self.n_head = d_model // head_size
        self.blocks = nn.ModuleList(
            RWKVBlock(d_model, head_size, i, n_layers, chunk_size, ffn_mult, wkv_kernel) for i in range(n_layers))
        self.ln_out = nn.LayerNorm(d_model)

    def set_naive_wkv(self, naive: bool) -> None:
        """Use the reference loop (True) or the chunked form (False) in every layer."""
        for block in self.blocks:
            block.att.naive_wkv = naive

    def set_wkv_kernel(self, kernel: bool) -> None:
        """Run every layer's wkv on the CPU kernel where it applies (True) or the chunked form."""
        for block in self.blocks:
            block.att.wkv_kernel = kernel

    def set_reference(self, reference: bool) -> None:
        """Run every layer's ops through their literal reference versions (see `TimeMix`)."""
        for block in self.blocks:
            block.att.reference = reference

    def zero_state(self, batch_size: int, device: torch.device | str = "cpu") -> list[LayerState]:
        H, K, D = self.n_head, self.head_size, self.d_model
        return [LayerState(torch.zeros(batch_size, H, K, K, device=device),
                           torch.zeros(batch_size, D, device=device),
                           torch.zeros(batch_size, D, device=device)) for _ in self.blocks]

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                initial_state: list[LayerState] | None = None
                ) -> tuple[torch.Tensor, list[LayerState]]:
        """x: (B, T, D); mask: (B, T) bool, True on real positions (right padding) or None.

        Returns y (B, T, D) and the final state per layer: the state after each row's last real
        position. initial_state: one LayerState per layer, or None for zeros.
        """
        if initial_state is None:
            initial_state = self.zero_state(x.shape[0], x.device)
        if len(initial_state) != len(self.blocks):
            raise ValueError(f"initial_state has {len(initial_state)} layers, stack has {len(self.blocks)}")
        if mask is not None and bool(mask.all()):
            mask = None  # no padding: skip the masking work (the same results)
        final_state = []
        for block, state in zip(self.blocks, initial_state):
            x, state = block(x, mask, state)
            final_state.append(state)
        return self.ln_out(x), final_state

"""Token-level clipped policy optimisation (PARL's objective) and group-relative advantages.

Every decision the orchestrator makes is a token: each routing decision (a Bernoulli of a
specialist's gate) and each column's CTA and CPA label (a categorical over the vocabulary).
For token t with probability ratio ρ_t = π_new(a_t)/π_old(a_t) and advantage A_t:

    L_t = min(ρ_t·A_t, clip(ρ_t, 1 − ε, 1 + ε)·A_t)
    loss = −(1/N) Σ_t w_t · (L_t − β·KL_t)

averaged over all N tokens of the batch — not per table first, so a wide table's columns count
as many tokens as they are. w_t is 1, or `critical_weight` for critical tokens (the caller
decides which). KL_t = (ρ_t − 1) − log ρ_t is the non-negative "k3" estimate of KL(π_old‖π_new)
at the sampled token (β = 0 turns it off); ε anneals 0.2 → 0.1 over training
(`aegir.rl.rewards.clip_epsilon`).

Advantages are group-relative: K rollouts of the same table, A = r − mean over the K
(`group_advantages`; no division by the spread, so a table whose rollouts all tie gives
exactly zero gradient rather than amplified noise). Where the reward decomposes over columns,
a label token gets the credit of its own column (`group_advantages` over (K, B, C) rewards).

`clipped_token_loss_reference` is the literal per-token loop; `clipped_token_loss` is the
vectorised form, tested equal to it in value and gradient.

`deterministic_kernels` is what the training loops of phase3 and phase4 run under: they train
in one thread with torch's intra-op threads, and there the backward of an advanced-indexing
gather (`index_put_` with accumulation) adds into its gradient with atomic float adds in
parallel once it holds 32,768 elements or more, so the order of the sums, and the low bits of
the weights, changed from run to run (two default-scale Phase 3 runs parted within 50 steps;
with one thread, or with this switch, they agree).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch


@dataclass
class PPOStats:
    """Detached diagnostics of one loss evaluation.

    clip_fraction: share of tokens whose ratio left [1 − ε, 1 + ε]
    approx_kl:     mean of KL_t (k3 estimate of KL(π_old‖π_new))
    log_ratio:     mean of log ρ_t
    tokens:        N
    """

    clip_fraction: float
    approx_kl: float
    log_ratio: float
    tokens: int


@contextlib.contextmanager
def deterministic_kernels() -> Iterator[None]:
    """torch's deterministic algorithms on (`warn_only`: an op without a deterministic
    implementation warns instead of failing, as some CUDA ops would), then the previous setting
    back. On CPU it turns the parallel atomic-add path of accumulating index writes into a
    sorted, ordered one, at no cost measured on the default Phase 3 step (1.18 vs 1.24 s)."""
    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)


def group_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """rewards (K, …) for K rollouts of the same items → r − mean over the K rollouts, (K, …)."""
    if rewards.shape[0] < 1:
        raise ValueError("need at least one rollout")
    return rewards - rewards.mean(0, keepdim=True)


def _check(logp_new: torch.Tensor, logp_old: torch.Tensor, advantage: torch.Tensor,
           weight: torch.Tensor, epsilon: float) -> None:
    if not (logp_new.shape == logp_old.shape == advantage.shape == weight.shape) or logp_new.dim() != 1:
        raise ValueError(f"logp_new {tuple(logp_new.shape)}, logp_old {tuple(logp_old.shape)}, advantage "
                         f"{tuple(advantage.shape)} and weight {tuple(weight.shape)} must all be (N,)")
    if not 0.0 < epsilon < 1.0:
        raise ValueError(f"epsilon must be in (0, 1), got {epsilon}")


def clipped_token_loss(logp_new: torch.Tensor, logp_old: torch.Tensor, advantage: torch.Tensor,
                       weight: torch.Tensor, epsilon: float, kl_coef: float = 0.0
                       ) -> tuple[torch.Tensor, PPOStats]:
    """The vectorised token-level clipped loss (module docstring).

    logp_new: (N,) log π_new(a_t), carries the gradient; logp_old: (N,) log π_old(a_t);
    advantage: (N,) A_t; weight: (N,) w_t. logp_old, advantage and weight are detached here.
    Returns (scalar loss, PPOStats). N = 0 gives a zero loss that still has a graph.
    """
    _check(logp_new, logp_old, advantage, weight, epsilon)
    logp_old, advantage, weight = (x.detach().to(logp_new.dtype) for x in (logp_old, advantage, weight))
    n = logp_new.shape[0]
    if n == 0:
        return logp_new.sum() * 0.0, PPOStats(0.0, 0.0, 0.0, 0)
    log_ratio = logp_new - logp_old
    ratio = torch.exp(log_ratio)
    objective = torch.minimum(ratio * advantage, ratio.clamp(1.0 - epsilon, 1.0 + epsilon) * advantage)
    kl = (ratio - 1.0) - log_ratio
    loss = -(weight * (objective - kl_coef * kl)).sum() / n
    with torch.no_grad():
        stats = PPOStats(clip_fraction=float(((ratio - 1.0).abs() > epsilon).float().mean()),
                         approx_kl=float(kl.mean()), log_ratio=float(log_ratio.mean()), tokens=n)
    return loss, stats


def clipped_token_loss_reference(logp_new: torch.Tensor, logp_old: torch.Tensor, advantage: torch.Tensor,
                                 weight: torch.Tensor, epsilon: float, kl_coef: float = 0.0) -> torch.Tensor:
    """The same loss as a literal loop over tokens (the reference; slow)."""
    _check(logp_new, logp_old, advantage, weight, epsilon)
    total = logp_new.sum() * 0.0
    n = logp_new.shape[0]
    for t in range(n):
        rho = torch.exp(logp_new[t] - float(logp_old[t]))
        a = float(advantage[t])
        clipped_rho = torch.clamp(rho, 1.0 - epsilon, 1.0 + epsilon)
        token_objective = torch.minimum(rho * a, clipped_rho * a)
        token_kl = (rho - 1.0) - (logp_new[t] - float(logp_old[t]))
        total = total - float(weight[t]) * (token_objective - kl_coef * token_kl)
    return total / max(n, 1)

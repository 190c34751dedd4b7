"""Checks that each reward component measures what it claims (the library of Phase 2).

The `phase2` stage runs these on the Phase 1 model's real batches and writes what they return
into its JSON report; each returns plain floats, bools, lists and dicts, and none does I/O.
Randomness comes only from the `torch.Generator` passed in, so a check is reproducible.

* bounded:     `check_range`
* direction:   `corruption_curve` (r_perf falls as predictions are corrupted),
               `dropped_columns_curve` (r_finish falls as annotations are dropped),
               `routing_patterns` + `pattern_rewards` (balanced selective routing beats
               always-on, always-off and one-specialist-takes-all)
* gradient:    `policy_gradient_norm` (REINFORCE gradient finite and non-zero),
               `router_ascent` (a few ascent steps move the activation rate the intended way)
* calibration: `spread_stats` + `suggest_lambdas`
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from aegir.rl.rewards import (
    PerfMode,
    r_finish,
    r_parallel,
    r_perf,
    reinforce_loss,
    routing_degeneracy,
)
from aegir.swarm.router import SpecialistRouter

# (activation_mask (B, S), gate_prob (B, S)) → reward (B,)
RoutingReward = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def check_range(values: torch.Tensor, lo: float, hi: float) -> dict:
    """Are all `values` finite and inside [lo, hi]? Returns ok, finite, in_range, min, max, count."""
    values = values.detach().float().flatten()
    finite = bool(torch.isfinite(values).all()) if values.numel() else True
    real = values[torch.isfinite(values)]
    vmin = float(real.min()) if real.numel() else None
    vmax = float(real.max()) if real.numel() else None
    in_range = bool(((real >= lo) & (real <= hi)).all()) if real.numel() else True
    return {"ok": finite and in_range, "finite": finite, "in_range": in_range,
            "min": vmin, "max": vmax, "lo": lo, "hi": hi, "count": int(values.numel())}


def _non_increasing(values: Sequence[float], tol: float = 1e-9) -> bool:
    return all(b <= a + tol for a, b in zip(values, values[1:]))


def _corrupt(pred: torch.Tensor, gold: torch.Tensor, uniform: torch.Tensor, offset: torch.Tensor,
             level: float, num_labels: int) -> torch.Tensor:
    # a corrupted target gets a label ≠ gold; gold + offset (mod K), offset in 1..K-1, fixed
    # per target, so the corrupted set only grows with the level and the curve is monotone
    wrong = (gold.clamp(min=0) + offset) % num_labels
    return torch.where((gold >= 0) & (uniform < level), wrong, pred)


def corruption_curve(
    cta_pred: torch.Tensor,
    cta_gold: torch.Tensor,
    cpa_pred: torch.Tensor,
    cpa_gold: torch.Tensor,
    column_mask: torch.Tensor,
    levels: Sequence[float],
    num_cta_labels: int,
    num_cpa_labels: int,
    generator: torch.Generator,
    mode: PerfMode = "both",
) -> dict:
    """Mean r_perf when a share `level` of the scored targets gets a wrong prediction.

    All tensors (B, C) as for `r_perf`. The draws are shared across levels (a target corrupted
    at level l stays corrupted above l), so a correct r_perf gives a non-increasing curve
    exactly, not only on average. Pass gold as pred to start from a perfect annotation.
    Returns levels, r_perf_mean per level, non_increasing, drop (first − last).
    """
    shape = cta_gold.shape
    u_cta = torch.rand(shape, generator=generator)
    u_cpa = torch.rand(shape, generator=generator)
    off_cta = torch.randint(1, max(num_cta_labels, 2), shape, generator=generator)
    off_cpa = torch.randint(1, max(num_cpa_labels, 2), shape, generator=generator)
    means = []
    for level in levels:
        cta = _corrupt(cta_pred, cta_gold, u_cta, off_cta, level, num_cta_labels)
        cpa = _corrupt(cpa_pred, cpa_gold, u_cpa, off_cpa, level, num_cpa_labels)
        means.append(float(r_perf(cta, cta_gold, cpa, cpa_gold, column_mask, mode).mean()))
    return {"levels": [float(x) for x in levels], "r_perf_mean": means,
            "non_increasing": _non_increasing(means), "drop": means[0] - means[-1]}


def dropped_columns_curve(
    annotated_mask: torch.Tensor,
    column_mask: torch.Tensor,
    activation_mask: torch.Tensor,
    levels: Sequence[float],
    generator: torch.Generator,
    degenerate_penalty: float = 0.5,
) -> dict:
    """Mean r_finish when a share `level` of the annotated columns loses its annotation.

    Draws shared across levels, as in `corruption_curve`. Returns levels, r_finish_mean,
    non_increasing, drop.
    """
    uniform = torch.rand(annotated_mask.shape, generator=generator)
    means = []
    for level in levels:
        kept = annotated_mask.bool() & ~(uniform < level)
        means.append(float(r_finish(kept, column_mask, activation_mask, degenerate_penalty).mean()))
    return {"levels": [float(x) for x in levels], "r_finish_mean": means,
            "non_increasing": _non_increasing(means), "drop": means[0] - means[-1]}


@dataclass
class RoutingPattern:
    """A hand-made routing: activation_mask (B, S) bool, gate_prob (B, S) float."""

    activation_mask: torch.Tensor
    gate_prob: torch.Tensor


def routing_patterns(
    batch_size: int,
    num_specialists: int,
    target_share: float,
    generator: torch.Generator,
    confidence: float = 0.95,
) -> dict[str, RoutingPattern]:
    """The four routings every routing reward must rank: always_on, always_off, unbalanced, balanced.

    k = round(target_share·S) specialists per table (at least 1, at most S − 1).
    * unbalanced: every table activates the same first k specialists (k = 1: one takes all)
    * balanced:   table b activates k consecutive specialists starting at a per-table offset
                  that cycles through 0..S−1 in a random order, so loads are equal when
                  B·k is a multiple of S and the routing varies with the input
    Gate probabilities are `confidence` where on and 1 − `confidence` where off.
    """
    B, S = batch_size, num_specialists
    if S < 2 or B < 2:
        raise ValueError(f"routing patterns need S ≥ 2 and B ≥ 2, got S={S}, B={B}")
    k = min(max(round(target_share * S), 1), S - 1)
    on = torch.ones(B, S, dtype=torch.bool)
    off = torch.zeros(B, S, dtype=torch.bool)
    unbalanced = off.clone()
    unbalanced[:, :k] = True
    start = (torch.arange(B) % S)[torch.randperm(B, generator=generator)]  # (B,)
    columns = (start[:, None] + torch.arange(k)[None, :]) % S  # (B, k)
    balanced = off.clone()
    balanced[torch.arange(B)[:, None], columns] = True

    def pattern(mask: torch.Tensor) -> RoutingPattern:
        gate = torch.where(mask, torch.tensor(confidence), torch.tensor(1.0 - confidence))
        return RoutingPattern(activation_mask=mask, gate_prob=gate)

    return {"always_on": pattern(on), "always_off": pattern(off),
            "unbalanced": pattern(unbalanced), "balanced": pattern(balanced)}


def pattern_rewards(
    patterns: dict[str, RoutingPattern],
    target_share: float,
    balance_weight: float = 0.5,
    degenerate_penalty: float = 0.5,
) -> dict:
    """Mean r_parallel and r_finish (every column annotated) of each pattern, and the verdict.

    `balanced_is_best` holds when the balanced pattern strictly beats every other pattern on
    both components (r_finish: with completeness 1 only the degeneracy penalty differs).
    """
    out: dict = {}
    for name, p in patterns.items():
        B = p.activation_mask.shape[0]
        columns = torch.ones(B, 1, dtype=torch.bool)
        out[name] = {
            "r_parallel": float(r_parallel(p.activation_mask, p.gate_prob, target_share, balance_weight).mean()),
            "r_finish": float(r_finish(columns, columns, p.activation_mask, degenerate_penalty).mean()),
            "activation_rate": float(p.activation_mask.float().mean()),
            "degeneracy": float(routing_degeneracy(p.activation_mask)),
        }
    if "balanced" in out:
        best = out["balanced"]
        others = [v for k, v in out.items() if k != "balanced"]
        out["balanced_is_best"] = all(best["r_parallel"] > o["r_parallel"] and best["r_finish"] > o["r_finish"]
                                      for o in others)
    return out


def _fresh_router(dim: int, num_specialists: int, init_bias: float, generator: torch.Generator) -> SpecialistRouter:
    router = SpecialistRouter(dim, num_specialists)
    with torch.no_grad():
        router.proj.weight.normal_(0.0, 0.02, generator=generator)
        router.proj.bias.fill_(init_bias)
    return router


def policy_gradient_norm(
    router: SpecialistRouter,
    features: torch.Tensor,
    reward_fn: RoutingReward,
    generator: torch.Generator,
) -> dict:
    """Gradient of the REINFORCE surrogate of `reward_fn` w.r.t. the router's parameters.

    features: (B, d_model) routing features. One routing is sampled; the router's .grad is
    left untouched (the gradient is taken with autograd.grad). Returns grad_norm, finite,
    nonzero, reward_mean, reward_std.
    """
    decision = router.sample(features, generator=generator)
    reward = reward_fn(decision.activation_mask, decision.scores.detach())
    loss = reinforce_loss(decision.log_prob.sum(-1), reward)
    grads = torch.autograd.grad(loss, list(router.parameters()))
    flat = torch.cat([g.flatten() for g in grads])
    norm = float(flat.norm())
    return {"grad_norm": norm, "finite": bool(torch.isfinite(flat).all()), "nonzero": norm > 0.0,
            "reward_mean": float(reward.mean()), "reward_std": float(reward.std()) if reward.numel() > 1 else 0.0}


def router_ascent(
    features: torch.Tensor,
    reward_fn: RoutingReward,
    num_specialists: int,
    steps: int,
    lr: float,
    generator: torch.Generator,
    init_bias: float = 4.0,
) -> dict:
    """Train a fresh router by REINFORCE ascent on `reward_fn`; return its trajectory.

    features: (B, d) fixed routing features. The router starts with bias `init_bias` on every
    gate (+4: always on, rate ≈ 0.98) and takes `steps` Adam steps of size `lr` on
    `reinforce_loss` (batch-mean baseline), one sampled routing per step.
    activation_rate[i] = mean gate probability before step i (steps + 1 entries, the last
    after training): its direction shows where the reward drives routing.
    """
    router = _fresh_router(features.shape[-1], num_specialists, init_bias, generator)
    optimizer = torch.optim.Adam(router.parameters(), lr=lr)
    rates, rewards = [], []
    for _ in range(steps):
        decision = router.sample(features, generator=generator)
        reward = reward_fn(decision.activation_mask, decision.scores.detach())
        loss = reinforce_loss(decision.log_prob.sum(-1), reward)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        rates.append(float(decision.scores.detach().mean()))
        rewards.append(float(reward.mean()))
    with torch.no_grad():
        rates.append(float(router(features).mean()))
    return {"activation_rate": rates, "reward_mean": rewards, "start_rate": rates[0], "end_rate": rates[-1]}


def spread_stats(components: dict[str, torch.Tensor]) -> dict[str, dict[str, float]]:
    """Mean, std, min and max of each component's per-table values (pooled over batches)."""
    out = {}
    for name, values in components.items():
        v = values.detach().float().flatten()
        out[name] = {"mean": float(v.mean()), "std": float(v.std()) if v.numel() > 1 else 0.0,
                     "min": float(v.min()), "max": float(v.max()), "count": int(v.numel())}
    return out


def suggest_lambdas(
    stats: dict[str, dict[str, float]],
    parallel_fractions: tuple[float, float, float] = (0.3, 0.1, 0.05),
    finish_fractions: tuple[float, float, float] = (0.1, 0.3, 0.05),
    max_lambda: float = 10.0,
) -> dict:
    """λ1, λ2 per phase so that λ·std(component) = fraction·std(r_perf).

    Rule: λ_phase = fraction_phase · std(r_perf) / std(component), capped at `max_lambda`. The
    default fractions are the design's default λ read as *shares of r_perf's spread*: where a
    component spreads as much as r_perf does, the suggestion is the default λ; where it
    spreads ten times less, λ is ten times larger, so each component moves the advantages by
    the intended share of what the annotations do. A component with zero spread gets
    `max_lambda` and is listed under `degenerate` (its λ does not matter to the advantage);
    so is r_perf when it has no spread (every suggestion is then 0: nothing to compare with).
    `stats` as from `spread_stats`, with keys r_perf, r_parallel, r_finish. The keys of the
    result are those of the `lambda` params section.
    """
    perf_std = stats["r_perf"]["std"]
    out: dict = {}
    degenerate = ["r_perf"] if perf_std <= 1e-12 else []
    for component, keys, fractions in (
        ("r_parallel", ("early", "mid", "late"), parallel_fractions),
        ("r_finish", ("finish_early", "finish_mid", "finish_late"), finish_fractions),
    ):
        std = stats[component]["std"]
        if std <= 1e-12:
            degenerate.append(component)
        for key, fraction in zip(keys, fractions):
            lam = max_lambda if std <= 1e-12 else min(fraction * perf_std / std, max_lambda)
            out[key] = round(lam, 6)
    out["degenerate"] = degenerate
    return out

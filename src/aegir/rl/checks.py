"""Checks that each reward component measures what it claims (the library of Phase 2).

The `phase2` stage runs these on the Phase 1 model's real batches and writes what they return
into its JSON report; each returns plain floats, bools, lists and dicts, and none does I/O.
Randomness comes only from the `torch.Generator` passed in, so a check is reproducible; draws
are made on the generator's device and moved to the inputs' device, so a check gives the same
numbers on any device and every tensor it makes sits beside its inputs.

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

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import torch

from aegir.draws import draw
from aegir.orchestrator.router import SpecialistRouter
from aegir.rl.rewards import (
    PerfMode,
    r_finish,
    r_parallel,
    r_perf,
    reinforce_loss,
    routing_degeneracy,
)

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
    shape, device = cta_gold.shape, cta_gold.device
    u_cta = draw(torch.rand, shape, generator, device)
    u_cpa = draw(torch.rand, shape, generator, device)
    off_cta = draw(partial(torch.randint, 1, max(num_cta_labels, 2)), shape, generator, device)
    off_cpa = draw(partial(torch.randint, 1, max(num_cpa_labels, 2)), shape, generator, device)
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
    uniform = draw(torch.rand, annotated_mask.shape, generator, annotated_mask.device)
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
    device: torch.device | str = "cpu",
) -> dict[str, RoutingPattern]:
    """The routings every routing reward must rank: always_on, always_off, unbalanced, balanced.

    k = ceil(target_share·S) specialists per table (at least 1, at most S − 1).
    * unbalanced: every table activates the same first k specialists (k = 1: one takes all)
    * balanced:   table b activates k consecutive specialists starting at offset b·k (mod S),
                  tables in a random order, so loads are equal when B·k is a multiple of S
                  (within one table otherwise) and the routing varies with the input
    always_on / always_off gates are `confidence` / 1 − `confidence`. The two selective
    patterns' gates average to exactly `target_share` on every table (on: q, off: e ≤
    1 − `confidence`): the policy that is at the target in expectation. This matters when
    target_share·S is not a whole number (S = 2, a = 0.25: no table can activate half a
    specialist, so any k overshoots or undershoots; with gates at the target the share term
    is 0 whatever k, as it is for the router's calibrated policy, E[F] = G = a).
    With S = 1 there is no "unbalanced" routing: balanced activates the one specialist on a
    random share ≈ target_share of the tables (at least one, not all), gates = target_share.
    The patterns are built from the generator's draws and returned on `device`.
    """
    patterns = _routing_patterns(batch_size, num_specialists, target_share, generator, confidence)
    return {name: RoutingPattern(p.activation_mask.to(device), p.gate_prob.to(device))
            for name, p in patterns.items()}


def _routing_patterns(batch_size: int, num_specialists: int, target_share: float,
                      generator: torch.Generator, confidence: float) -> dict[str, RoutingPattern]:
    B, S = batch_size, num_specialists
    if S < 1 or B < 2:
        raise ValueError(f"routing patterns need S ≥ 1 and B ≥ 2, got S={S}, B={B}")
    on = torch.ones(B, S, dtype=torch.bool)
    off = torch.zeros(B, S, dtype=torch.bool)

    def pattern(mask: torch.Tensor, gate_on: float, gate_off: float) -> RoutingPattern:
        gate = torch.where(mask, torch.tensor(gate_on), torch.tensor(gate_off))
        return RoutingPattern(activation_mask=mask, gate_prob=gate)

    patterns = {"always_on": pattern(on, confidence, 1.0 - confidence),
                "always_off": pattern(off, confidence, 1.0 - confidence)}
    if S == 1:
        n_on = min(max(round(target_share * B), 1), B - 1)
        balanced = (torch.randperm(B, generator=generator) < n_on)[:, None]  # (B, 1)
        patterns["balanced"] = pattern(balanced, target_share, target_share)
        return patterns

    k = min(max(math.ceil(target_share * S - 1e-9), 1), S - 1)
    # selective gates: k·q + (S − k)·e = target_share·S with 0 < e < q < 1
    e = min(1.0 - confidence, target_share / 2)
    q = (target_share * S - (S - k) * e) / k
    if q >= 1.0:  # target above (S − 1)/S: hold q below 1 and raise the off gates instead
        q = 1.0 - min(1.0 - confidence, (1.0 - target_share) / 2)
        e = (target_share * S - k * q) / (S - k)
    unbalanced = off.clone()
    unbalanced[:, :k] = True
    # table b covers specialists b·k … b·k + k − 1 (mod S), tables shuffled: consecutive tables
    # tile the specialists, so loads differ by at most one table whatever B (stride 1 would
    # leave specialists unused when B < S and k > 1)
    start = ((torch.arange(B) * k) % S)[torch.randperm(B, generator=generator)]  # (B,)
    columns = (start[:, None] + torch.arange(k)[None, :]) % S  # (B, k)
    balanced = off.clone()
    balanced[torch.arange(B)[:, None], columns] = True
    patterns["unbalanced"] = pattern(unbalanced, q, e)
    patterns["balanced"] = pattern(balanced, q, e)
    return patterns


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
        columns = torch.ones(B, 1, dtype=torch.bool, device=p.activation_mask.device)
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


def _fresh_router(dim: int, num_specialists: int, init_bias: float, generator: torch.Generator,
                  device: torch.device | str = "cpu") -> SpecialistRouter:
    router = SpecialistRouter(dim, num_specialists)
    with torch.no_grad():
        router.proj.weight.normal_(0.0, 0.02, generator=generator)
        router.proj.bias.fill_(init_bias)
    return router.to(device)


def _surrogate(
    router: SpecialistRouter,
    features: torch.Tensor,
    reward_fn: RoutingReward,
    generator: torch.Generator,
    rollouts: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sample `rollouts` routings of the batch; return (REINFORCE loss, scores (B, S), rewards (K, B)).

    K = 1: one routing, batch-mean baseline (`reinforce_loss`). K > 1: `reward_fn` is called
    once per rollout (so its batch-level parts see that rollout alone) and each table's
    advantage is its reward minus the mean over its K rollouts, as Phase 3's group-relative
    advantages. A reward that does not depend on the routing then gives exactly zero
    gradient, so "non-zero" means the routing moves the reward, not that noise does.
    """
    if rollouts < 1:
        raise ValueError(f"rollouts must be ≥ 1, got {rollouts}")
    decisions = [router.sample(features, generator=generator) for _ in range(rollouts)]
    rewards = torch.stack([reward_fn(d.activation_mask, d.scores.detach()) for d in decisions])  # (K, B)
    log_prob = torch.stack([d.log_prob.sum(-1) for d in decisions])  # (K, B)
    if rollouts == 1:
        loss = reinforce_loss(log_prob[0], rewards[0])
    else:
        advantage = rewards - rewards.mean(0, keepdim=True)
        loss = reinforce_loss(log_prob.flatten(), advantage.flatten(), baseline="none")
    return loss, decisions[0].scores.detach(), rewards


def policy_gradient_norm(
    router: SpecialistRouter,
    features: torch.Tensor,
    reward_fn: RoutingReward,
    generator: torch.Generator,
    rollouts: int = 1,
) -> dict:
    """Gradient of the REINFORCE surrogate of `reward_fn` w.r.t. the router's parameters.

    features: (B, d_model) routing features. `rollouts` routings are sampled (see
    `_surrogate` for the baseline); the router's .grad is left untouched (the gradient is
    taken with autograd.grad). Returns grad_norm, finite, nonzero, reward_mean, reward_std.
    """
    loss, _, reward = _surrogate(router, features, reward_fn, generator, rollouts)
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
    rollouts: int = 1,
    value_fn: Callable[[torch.Tensor], float] | None = None,
) -> dict:
    """Train a fresh router by REINFORCE ascent on `reward_fn`; return its trajectory.

    features: (B, d) fixed routing features. The router starts with bias `init_bias` on every
    gate (+4: always on, rate ≈ 0.98) and takes `steps` Adam steps of size `lr` on the
    REINFORCE surrogate of `rollouts` sampled routings per step (see `_surrogate`).
    activation_rate[i] = mean gate probability before step i (steps + 1 entries, the last
    after training): its direction shows where the reward drives routing.
    grad_norm[i] = norm of the surrogate's gradient at step i (grad_norm[0]: at the start).
    value_fn(scores (B, S)) → float, when given, is evaluated on the router's scores before
    each step and after training ("value", steps + 1 entries), e.g. the exact expected reward.
    """
    router = _fresh_router(features.shape[-1], num_specialists, init_bias, generator, features.device)
    optimizer = torch.optim.Adam(router.parameters(), lr=lr)
    rates, rewards, grad_norms, values = [], [], [], []
    finite = True
    for _ in range(steps):
        loss, scores, reward = _surrogate(router, features, reward_fn, generator, rollouts)
        if value_fn is not None:
            values.append(float(value_fn(scores)))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        flat = torch.cat([p.grad.flatten() for p in router.parameters()])
        finite = finite and bool(torch.isfinite(flat).all())
        grad_norms.append(float(flat.norm()))
        optimizer.step()
        rates.append(float(scores.mean()))
        rewards.append(float(reward.mean()))
    with torch.no_grad():
        scores = router(features)
        rates.append(float(scores.mean()))
        if value_fn is not None:
            values.append(float(value_fn(scores)))
    out = {"activation_rate": rates, "reward_mean": rewards, "start_rate": rates[0], "end_rate": rates[-1],
           "grad_norm": grad_norms, "grad_finite": finite}
    if value_fn is not None:
        out["value"] = values
    return out


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

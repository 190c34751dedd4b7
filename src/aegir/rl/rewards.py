"""Phase 2 reward components, the λ schedule and the REINFORCE surrogate (docs/design.md, "Phase 2").

Every reward is a pure function of tensors that returns one value per table, shape (B,), and
carries no gradient: a reward is a number the policy gradient multiplies, never a path for
gradients (Phase 3 differentiates log-probs only).

    r = λ1·r_parallel + λ2·r_finish + r_perf                                 (`combine`)

| component    | range        | value                                                          |
|--------------|--------------|----------------------------------------------------------------|
| `r_perf`     | [0, 1]       | per-table micro-F1 of the annotations (CTA, CPA or both)       |
| `r_parallel` | [-1, 1]      | H-Net ratio term toward the target share, plus balance credit  |
| `r_finish`   | [-p, 1]      | share of real columns annotated − p·degeneracy of the routing  |

(p = `RewardConfig.degenerate_penalty` ∈ [0, 1].) The batch-level parts (the balance term of
`r_parallel`, the degeneracy penalty of `r_finish`) are computed over the batch they are given.
With group-relative advantages (r − mean over the K rollouts of a table) a value shared by a
whole batch cancels, so Phase 3 should call these once per rollout (rollout k of all B tables
is one call): the K rollouts then see K different batch-level values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from aegir.config import LambdaConfig, RewardConfig  # noqa: F401  (params sections; live in aegir.config)

PerfMode = Literal["cta", "cpa", "both"]


# ----------------------------------------------------------------------------- schedules


@dataclass(frozen=True)
class LambdaSchedule:
    """λ1, λ2 as functions of training progress ∈ [0, 1].

    Smooth, not stepped: each phase starts at its boundary and blends linearly from the
    previous phase's value over `transition` (a fraction of training); `transition = 0` gives
    steps. A step in λ changes the reward's scale in one update, which jolts the advantage
    scale the clipped loss sees; the design asks for smooth curves without reward collapse,
    so the default blends over 5 % of training. Before a boundary the earlier phase holds
    exactly, so "the mid phase starts at mid_start" keeps its plain meaning.
    """

    config: LambdaConfig = LambdaConfig()

    def at(self, progress: float) -> tuple[float, float]:
        """(λ1, λ2) at `progress` ∈ [0, 1] (0 = first update, 1 = last)."""
        if not 0.0 <= progress <= 1.0:
            raise ValueError(f"progress must be in [0, 1], got {progress}")
        c = self.config
        lam1 = self._blend(progress, (c.early, c.mid, c.late))
        lam2 = self._blend(progress, (c.finish_early, c.finish_mid, c.finish_late))
        return lam1, lam2

    def _blend(self, progress: float, values: tuple[float, float, float]) -> float:
        c = self.config
        value = values[0]
        for start, previous, current in ((c.mid_start, values[0], values[1]),
                                         (c.late_start, values[1], values[2])):
            if progress < start:
                break
            if c.transition > 0.0 and progress < start + c.transition:
                t = (progress - start) / c.transition
                value = previous + t * (current - previous)
            else:
                value = current
        return value


def clip_epsilon(progress: float, start: float = 0.2, end: float = 0.1) -> float:
    """PPO clip ε at `progress` ∈ [0, 1], annealed *linearly* from `start` to `end`.

    Linear because the design gives only the end points (0.2 → 0.1); a straight line is the
    plainest monotone path between them and is what cleanrl does for its annealed rate.
    """
    if not 0.0 <= progress <= 1.0:
        raise ValueError(f"progress must be in [0, 1], got {progress}")
    return start + progress * (end - start)


def budget_cap(step: int, total_steps: int, num_specialists: int, period: int, capped_share: float) -> int | None:
    """Budget-limited vs standard scaling: the cap on distinct specialists activated per batch
    at `step` (0-based), or None for an uncapped step.

    Training alternates: each window of `period` steps starts with ⌈capped_share·period⌉
    capped steps, then runs uncapped. The cap starts at 1 and grows with progress,
    cap = 1 + ⌊progress·S⌋ (at most S), so early batches learn to choose one specialist well
    before they may use several. `capped_share` 0 never caps, 1 always caps.
    """
    if num_specialists < 1:
        return None
    if period < 1 or not 0.0 <= capped_share <= 1.0:
        raise ValueError(f"need period ≥ 1 and capped_share in [0, 1], got {period}, {capped_share}")
    if step % period >= math.ceil(capped_share * period):
        return None
    progress = step / max(1, total_steps)
    return min(num_specialists, 1 + int(progress * num_specialists))


# ----------------------------------------------------------------------------- r_perf


@dataclass(frozen=True)
class ColumnCredit:
    """Per-column outcome of one task (CTA or CPA), the material of r_perf.

    labelled:  (B, C) bool, real column with a gold label (the only columns scored)
    predicted: (B, C) bool, labelled and given a prediction (pred ≥ 0)
    correct:   (B, C) bool, labelled and pred == gold
    """

    labelled: torch.Tensor
    predicted: torch.Tensor
    correct: torch.Tensor


def r_perf_columns(pred: torch.Tensor, gold: torch.Tensor, column_mask: torch.Tensor) -> ColumnCredit:
    """Per-column correctness of one task, for per-column credit in Phase 3.

    pred:        (B, C) long, predicted class id; any negative value (-1, IGNORE_INDEX) means
                 "left unannotated"
    gold:        (B, C) long, gold class id or a negative value (IGNORE_INDEX) = unlabelled
    column_mask: (B, C) bool, True on real columns
    """
    if pred.shape != gold.shape or gold.shape != column_mask.shape or pred.dim() != 2:
        raise ValueError(f"pred {tuple(pred.shape)}, gold {tuple(gold.shape)} and column_mask "
                         f"{tuple(column_mask.shape)} must share one (B, C) shape")
    labelled = (gold >= 0) & column_mask.bool()
    predicted = labelled & (pred >= 0)
    correct = labelled & (pred == gold)
    return ColumnCredit(labelled=labelled, predicted=predicted, correct=correct)


def micro_f1(credits: list[ColumnCredit]) -> torch.Tensor:
    """Per-table micro-F1 pooled over the tasks in `credits` → (B,) float in [0, 1].

    TP = correct, FP = predicted but wrong, FN = labelled but not correct (a column left
    unannotated is a miss: FN, no FP), F1 = 2TP / (2TP + FP + FN), exactly as
    `aegir.eval.metrics` scores a split. When every labelled column has one prediction this
    is accuracy. A table with no labelled column scores 0, as the metric does; under
    group-relative advantages all rollouts of that table then tie and it adds no gradient.
    """
    tp = sum(c.correct.sum(-1) for c in credits).float()  # (B,)
    fp = sum((c.predicted & ~c.correct).sum(-1) for c in credits).float()
    fn = sum((c.labelled & ~c.correct).sum(-1) for c in credits).float()
    denominator = 2 * tp + fp + fn
    return torch.where(denominator > 0, 2 * tp / denominator.clamp(min=1), torch.zeros_like(tp))


def r_perf(
    cta_pred: torch.Tensor | None,
    cta_gold: torch.Tensor | None,
    cpa_pred: torch.Tensor | None,
    cpa_gold: torch.Tensor | None,
    column_mask: torch.Tensor,
    mode: PerfMode = "both",
) -> torch.Tensor:
    """Annotation F1 of each table → (B,) float in [0, 1].

    cta_pred, cta_gold, cpa_pred, cpa_gold: (B, C) long (see `r_perf_columns`); the CPA label
    of column c is the relation (column 0, column c), so column 0 carries none. The pair of
    the task `mode` leaves out may be None.
    mode: "cta", "cpa", or "both" = micro-F1 over the union of the table's scored CTA columns
    and CPA pairs (each decision weighs the same; not the mean of two F1s).
    """
    if mode not in ("cta", "cpa", "both"):
        raise ValueError(f"mode must be 'cta', 'cpa' or 'both', got {mode!r}")
    credits = []
    if mode in ("cta", "both"):
        credits.append(r_perf_columns(cta_pred, cta_gold, column_mask))
    if mode in ("cpa", "both"):
        credits.append(r_perf_columns(cpa_pred, cpa_gold, column_mask))
    return micro_f1(credits)


def annotated_columns(
    cta_pred: torch.Tensor | None,
    cpa_pred: torch.Tensor | None,
    column_mask: torch.Tensor,
    mode: PerfMode = "both",
) -> torch.Tensor:
    """(B, C) bool: real columns that received every annotation `mode` asks for.

    A column is annotated when its prediction is ≥ 0; column 0 needs no CPA (it is the subject).
    """
    annotated = column_mask.bool().clone()
    if mode in ("cta", "both"):
        annotated &= cta_pred >= 0
    if mode in ("cpa", "both"):
        cpa_done = cpa_pred >= 0
        cpa_done[:, 0] = True
        annotated &= cpa_done
    return annotated


# ----------------------------------------------------------------------------- r_parallel


def _as_float_mask(activation_mask: torch.Tensor) -> torch.Tensor:
    if activation_mask.dim() != 2:
        raise ValueError(f"activation_mask must be (B, S), got {tuple(activation_mask.shape)}")
    return activation_mask.detach().float()


def share_term(activation_mask: torch.Tensor, gate_prob: torch.Tensor, target_share: float) -> torch.Tensor:
    """H-Net ratio term toward the target share → (B,) in [-1, a(1-a)/m²] ⊂ [-1, 1].

    F = share of specialists the table activated, G = its mean gate probability, a = target
    share, N = 1/a, m = max(a, 1 − a). H-Net's ratio loss is
        L = N/(N−1)·((N−1)·F·G + (1−F)(1−G)) = 1 + N²/(N−1)·(F − a)(G − a),
    so this term is −(F − a)(G − a)/m²: the ratio loss, shifted to 0 and rescaled to reach −1.
    It is 0 when F = a; −1 for always-on with certain gates (F = G = 1, when a < ½).

    Why the bilinear form and not −(F − a)²: under the router's own sampling E[F] = G, so its
    expectation is exactly −(G − a)²/m², maximal at G = a, with no penalty on the variance of F
    (−(F − a)² would add −Var F and push for certain gates, ending exploration early). With G
    held fixed (rewards carry no gradient), REINFORCE then moves G by −(G − a)·∇G: the same
    controller as H-Net's loss, which holds F fixed and moves G. Above the target, more
    activations lower the term (∂/∂F = −(G − a)/m² < 0 once G > a): it never pays for more
    activations as such. Positive values need F and G on opposite sides of a (an unlikely
    sample), never a stable policy.
    """
    if not 0.0 < target_share < 1.0:
        raise ValueError(f"target_share must be in (0, 1), got {target_share}")
    mask = _as_float_mask(activation_mask)
    if gate_prob.shape != mask.shape:
        raise ValueError(f"gate_prob {tuple(gate_prob.shape)} must match activation_mask {tuple(mask.shape)}")
    if mask.shape[1] == 0:  # no specialists: no routing to reward
        return torch.zeros(mask.shape[0], device=mask.device)
    F = mask.mean(-1)  # (B,)
    G = gate_prob.detach().float().mean(-1)  # (B,)
    scale = max(target_share, 1.0 - target_share) ** 2
    return -(F - target_share) * (G - target_share) / scale


def balance_term(activation_mask: torch.Tensor) -> torch.Tensor:
    """Per-table credit for the balance of specialist loads across the batch → (B,) in [-1, 1].

    load_s = share of the batch's tables that activated specialist s, L̄ = mean_s load_s. A
    table scores −mean over the specialists it chose of (load_s − L̄), divided by (1 − 1/S),
    the largest possible excess. It is 0 when loads are equal (or the table chose none), −1
    for every table when one specialist takes every input and the others none; choosing an
    under-used specialist earns credit. A mean, not a sum, over the chosen specialists: more
    activations are not paid. With equal activation counts the batch mean is −S·Var_s(load)/
    (k(1 − 1/S)), a per-table split of the load variance, so each table gets its own credit.
    """
    mask = _as_float_mask(activation_mask)
    B, S = mask.shape
    if S < 2:
        return torch.zeros(B, device=activation_mask.device)
    load = mask.mean(0)  # (S,)
    excess = load - load.mean()  # (S,)
    chosen = mask.sum(-1)  # (B,)
    mean_excess = (mask * excess).sum(-1) / chosen.clamp(min=1)  # (B,)
    return -mean_excess / (1.0 - 1.0 / S)


def r_parallel(
    activation_mask: torch.Tensor,
    gate_prob: torch.Tensor,
    target_share: float,
    balance_weight: float = 0.5,
) -> torch.Tensor:
    """Specialist utilisation and balance → (B,) float in [-1, 1].

    activation_mask: (B, S) bool/float, the sampled (or thresholded) routing
    gate_prob:       (B, S) float in [0, 1], the router's scores
    r_parallel = (share_term + w·balance_term) / (1 + w), w = `balance_weight`.
    0 for selective routing at the target share with equal loads; lower for always-on,
    always-off, and one specialist taking everything. See the two terms for the reasoning.
    """
    share = share_term(activation_mask, gate_prob, target_share)
    balance = balance_term(activation_mask)
    return (share + balance_weight * balance) / (1.0 + balance_weight)


# ----------------------------------------------------------------------------- r_finish


def routing_degeneracy(activation_mask: torch.Tensor) -> torch.Tensor:
    """Scalar in [0, 1]: share of specialists whose decision is the same for every input.

    1 exactly when the routing is identical for every table of the batch (always-on and
    always-off are cases of it; so is one fixed specialist for everyone); 0 when every
    specialist is chosen by some tables and not by others. Selective routing that varies with
    the input scores 0 whatever its activation rate, so this does not pay for activations.
    A batch of one table cannot show "identical for every input": it counts only all-on or
    all-off (1) else 0. With no specialists there is no routing to degenerate: 0.
    """
    mask = _as_float_mask(activation_mask)
    B, S = mask.shape
    if S == 0:  # no specialists: no routing that could be degenerate
        return torch.zeros((), device=mask.device)
    if B < 2:
        rate = mask.mean()
        return ((rate == 0) | (rate == 1)).float()
    load = mask.mean(0)  # (S,)
    return ((load == 0) | (load == 1)).float().mean()


def r_finish(
    annotated_mask: torch.Tensor,
    column_mask: torch.Tensor,
    activation_mask: torch.Tensor,
    degenerate_penalty: float = 0.5,
) -> torch.Tensor:
    """Completeness minus degenerate routing → (B,) float in [−p, 1], p = `degenerate_penalty`.

    annotated_mask:  (B, C) bool, columns that received an annotation (`annotated_columns`)
    column_mask:     (B, C) bool, real columns
    activation_mask: (B, S) bool/float, the batch's routing
    completeness = annotated real columns / real columns (1 for a table with no column:
    nothing is left undone); minus p·`routing_degeneracy` of the batch.
    """
    if annotated_mask.shape != column_mask.shape:
        raise ValueError(f"annotated_mask {tuple(annotated_mask.shape)} must match column_mask "
                         f"{tuple(column_mask.shape)}")
    if activation_mask.shape[0] != column_mask.shape[0]:
        raise ValueError(f"activation_mask has {activation_mask.shape[0]} rows, columns {column_mask.shape[0]}")
    real = column_mask.bool()
    done = (annotated_mask.bool() & real).sum(-1).float()  # (B,)
    total = real.sum(-1).float()
    completeness = torch.where(total > 0, done / total.clamp(min=1), torch.ones_like(total))
    return completeness - degenerate_penalty * routing_degeneracy(activation_mask)


# ----------------------------------------------------------------------------- combine, loss


def combine(
    r_perf: torch.Tensor,
    r_parallel: torch.Tensor,
    r_finish: torch.Tensor,
    lam1: float,
    lam2: float,
) -> torch.Tensor:
    """r = λ1·r_parallel + λ2·r_finish + r_perf, each (B,) → (B,)."""
    return lam1 * r_parallel + lam2 * r_finish + r_perf


def reinforce_loss(
    log_prob: torch.Tensor,
    reward: torch.Tensor,
    baseline: Literal["mean", "none"] = "mean",
) -> torch.Tensor:
    """REINFORCE surrogate −mean((r − b)·log π(a)) → scalar; its gradient ascends E[r].

    log_prob: (B,) log-probability of each table's whole action (for the router: the sum of
              its per-specialist log-probs); carries the gradient
    reward:   (B,) reward of that action; detached here
    baseline: "mean" subtracts the batch mean (lower variance, same expectation); "none" = 0
    """
    if log_prob.shape != reward.shape or log_prob.dim() != 1:
        raise ValueError(f"log_prob {tuple(log_prob.shape)} and reward {tuple(reward.shape)} must both be (B,)")
    reward = reward.detach().to(log_prob.dtype)
    if baseline == "mean":
        advantage = reward - reward.mean()
    elif baseline == "none":
        advantage = reward
    else:
        raise ValueError(f"baseline must be 'mean' or 'none', got {baseline!r}")
    return -(advantage * log_prob).mean()

"""One PARL update of a `SwarmOrchestrator` on one batch, top to bottom.

    rollouts    K rollouts of every table: routing sampled from the router (then the budget cap),
                one frozen read per (table, specialist) that any rollout chose, the fused forward,
                labels sampled per column; a sampled label whose probability is below
                `abstain_below` is not annotated (the abstain rule that gives r_finish spread)
    rewards     r_perf, r_parallel, r_finish per rollout (`aegir.rl.rewards`, exactly the
                functions Phase 2 validated, each called once per rollout so the batch-level
                parts see one rollout of one batch), r = λ1·r_parallel + λ2·r_finish + r_perf
    advantages  group-relative over the K rollouts of a table; a routing token gets its table's
                advantage, a label token its own column's (per-column credit, below)
    loss        the token-level clipped loss over all tokens (`aegir.rl.ppo`) + ce_weight · CE on
                the gold labels + the chunker's ratio loss (the same terms the control gets)

Per-column credit. r_perf is the table's micro-F1; with every scored decision annotated it is
(correct decisions)/(scored decisions), so one label decision carries correct/N_scored of it;
r_finish's completeness carries annotated/N_columns per column, times λ2. A label token's
reward is that share of r (its own decision's, not its neighbours'), and its advantage that
share minus its mean over the table's K rollouts. Routing changes every column, so a routing
token gets the whole table's r − mean.

Departures from PPO as usually run: no value network (group baselines instead, as GRPO); the
first update of a batch reuses the rollout's own forward (ρ = 1 there, so that update is the
plain policy gradient), later epochs re-run the forward on the same decisions and reads.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from aegir.data.batch import IGNORE_INDEX, Batch
from aegir.draws import multinomial
from aegir.model.chunking import ratio_loss
from aegir.model.network import AegirOutput
from aegir.orchestrator.critical import orchestrator_steps
from aegir.orchestrator.model import SwarmOrchestrator, repeat_batch, select_encoded
from aegir.orchestrator.router import RouterDecision
from aegir.orchestrator.specialist import SpecialistRead
from aegir.rl.ppo import PPOStats, clipped_token_loss, group_advantages
from aegir.rl.rewards import (
    RewardConfig,
    annotated_columns,
    combine,
    r_finish,
    r_parallel,
    r_perf,
)


@dataclass(frozen=True)
class PARLSettings:
    """The knobs of one update (filled from params `phase3` and `rewards`)."""

    rollouts: int  # K rollouts per table (the advantage group)
    abstain_below: float  # a sampled label with probability below this is left unannotated
    critical_weight: float  # weight of routing tokens in the token average (labels weigh 1)
    ce_weight: float  # weight of the supervised CE on gold labels (0 allowed)
    kl_coef: float  # weight of the per-token KL(π_old‖π_new) penalty (0 = off)
    rewards: RewardConfig
    rl_weight: float = 1.0  # weight of the clipped token loss (0: CE alone, the ablation)
    label_smoothing: float = 0.0  # ε of the supervised CE (as Phase 1's `phase1.label_smoothing`)
    route_weight: float = 0.0  # weight of the supervised routing loss (`aegir.orchestrator.router.routing_targets`; 0 = off)
    distill_weight: float = 0.0  # weight of the CE toward the output ensemble's labels (`distill_loss`; 0 = off)
    anchor_weight: float = 0.0  # weight of the KL from the frozen Phase 1 primary's labels (`anchor_loss`; 0 = off)


@dataclass
class PolicyForward:
    """The orchestrator's forward over the K·B rows of a batch's rollouts.

    output: `AegirOutput` of the K·B rows (rollout k of table b is row k·B + b);
    decision: the routing of those rows (None without specialists); routing_log_prob: (K·B, S)
    log π of the decision under the current parameters; reads: the frozen specialists' reads of
    the B tables (per specialist, or None when no rollout chose it).
    """

    output: AegirOutput
    decision: RouterDecision | None
    routing_log_prob: torch.Tensor | None
    reads: list[SpecialistRead | None] | None
    routing_hidden: torch.Tensor | None = None  # (K·B, D): what the router read


@dataclass
class Rollouts:
    """What the update needs from a batch's K rollouts; everything detached.

    cta_action, cpa_action: (K·B, C) sampled label ids; *_logp_old: (K·B, C) their log-probs;
    *_tokens: (K·B, C) bool, which label decisions are tokens (real columns; CPA from column 1);
    *_advantage: (K·B, C); routing_logp_old: (K·B, S); routing_advantage: (K·B,);
    rewards: name → (K, B) per component and the combined "reward".
    """

    num_rollouts: int
    decision: RouterDecision | None
    reads: list[SpecialistRead | None] | None
    routing_logp_old: torch.Tensor | None
    routing_advantage: torch.Tensor
    cta_action: torch.Tensor
    cpa_action: torch.Tensor
    cta_logp_old: torch.Tensor
    cpa_logp_old: torch.Tensor
    cta_tokens: torch.Tensor
    cpa_tokens: torch.Tensor
    cta_advantage: torch.Tensor
    cpa_advantage: torch.Tensor
    rewards: dict[str, torch.Tensor]
    critical_steps: torch.Tensor  # (K·B,) critical steps of each rollout's graph


def policy_forward(orch: SwarmOrchestrator, batch: Batch, rollouts: int, *,
                   decision: RouterDecision | None = None,
                   reads: list[SpecialistRead | None] | None = None,
                   generator: torch.Generator | None = None, cap: int | None = None) -> PolicyForward:
    """The fused forward of K rollouts of `batch`, with gradients.

    The primary's prefix runs once for the B tables and is shared by the K copies. Without
    `decision` the routing is sampled (then capped); with it, it is re-scored. Without `reads`
    the specialists read the tables some rollout chose (each specialist one batched call).

    Rollouts of a table that made the same routing have the same forward (only the labels
    sampled from it differ), so the rest of the forward runs once per distinct (table,
    routing) and is indexed out to the K·B rows: the same values and, through the indexing,
    the same gradients as K separate copies. (The control, with no routing, runs each table
    once.)
    """
    K, B = rollouts, batch.batch_size
    device = batch.byte_ids.device
    encoded = orch.encode(batch)
    rows = torch.arange(B, device=device).repeat(K)  # (K·B,): the table of each row
    key = rows.clone()
    log_prob = hidden = None
    if orch.num_specialists:
        hidden = orch.routing_hidden(batch, encoded)[rows]  # (K·B, D)
        if decision is None:
            decision = orch.route(hidden, sample=True, generator=generator, cap=cap)
        log_prob = orch.routing_log_prob(hidden, decision.activation_mask)
        if reads is None:
            chosen = decision.activation_mask.view(K, B, -1).any(0)  # (B, S)
            reads = orch.read_specialists(batch, chosen)
        bits = decision.activation_mask.long() << torch.arange(orch.num_specialists, device=device)
        key = rows * 2 ** orch.num_specialists + bits.sum(-1)
    distinct, inverse = torch.unique(key, sorted=True, return_inverse=True)
    first = torch.full((len(distinct),), K * B, device=device).scatter_reduce(
        0, inverse, torch.arange(K * B, device=device), reduce="amin")  # a row of each distinct forward
    table = rows[first]
    state = stream = column_mix = None
    if orch.num_specialists:
        state = orch.fuse(reads, decision.activation_mask[first], table)
        stream = orch.fuse_stream(reads, decision.activation_mask[first], table)
        column_mix = orch.column_mix(reads, decision.activation_mask[first], table)
    distinct_out = orch.primary.forward_from_encoded(batch.select(table), select_encoded(encoded, table),
                                                     state, stream, column_mix)
    output = replace(
        distinct_out,
        cta_logits=distinct_out.cta_logits[inverse], cpa_logits=distinct_out.cpa_logits[inverse],
        column_vectors=distinct_out.column_vectors[inverse],
        # the chunker's loss is a function of the shared prefix: over the B tables, as K copies would give
        ratio_loss=ratio_loss(encoded.routing.boundary_mask, encoded.routing.boundary_prob,
                              orch.primary.config.target_compression, batch.byte_mask),
        routing=select_encoded(encoded, rows).routing,
        main_final_state=[state_.select(inverse) for state_ in distinct_out.main_final_state])
    return PolicyForward(output=output, decision=decision, routing_log_prob=log_prob, reads=reads,
                         routing_hidden=hidden)


def sample_labels(logits: torch.Tensor, generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """logits (N, C, n) → sampled ids (N, C), their log-probs and probabilities (N, C)."""
    N, C, n = logits.shape
    log_p = F.log_softmax(logits.detach().float(), dim=-1)
    action = multinomial(log_p.exp().view(N * C, n), generator).view(N, C)  # drawn on the generator's device
    logp = log_p.gather(-1, action[..., None])[..., 0]
    return action, logp, logp.exp()


def collect_rollouts(orch: SwarmOrchestrator, batch: Batch, settings: PARLSettings, lam1: float, lam2: float,
                     generator: torch.Generator, cap: int | None = None) -> tuple[Rollouts, PolicyForward]:
    """Sample K rollouts of every table of `batch`, score them and compute advantages.

    Returns the detached `Rollouts` and the rollout forward itself (with its graph), which the
    first update of the batch reuses.
    """
    K, B, rc = settings.rollouts, batch.batch_size, settings.rewards
    fwd = policy_forward(orch, batch, K, generator=generator, cap=cap)
    cta_action, cta_logp, cta_prob = sample_labels(fwd.output.cta_logits, generator)
    cpa_action, cpa_logp, cpa_prob = sample_labels(fwd.output.cpa_logits, generator)

    column_mask = batch.column_mask.repeat(K, 1)  # (K·B, C)
    cta_tokens = column_mask.clone()
    cpa_tokens = column_mask.clone()
    cpa_tokens[:, 0] = False  # the subject column has no relation to itself
    cta_pred = torch.where(cta_tokens & (cta_prob >= settings.abstain_below), cta_action, -1)
    cpa_pred = torch.where(cpa_tokens & (cpa_prob >= settings.abstain_below), cpa_action, -1)
    cta_gold, cpa_gold = batch.cta_labels.repeat(K, 1), batch.cpa_labels.repeat(K, 1)

    S = orch.num_specialists
    device = batch.byte_ids.device
    mask = fwd.decision.activation_mask if S else torch.zeros(K * B, 0, dtype=torch.bool, device=device)
    scores = fwd.decision.scores.detach() if S else torch.zeros(K * B, 0, device=device)
    parts = {"r_perf": [], "r_parallel": [], "r_finish": []}
    for k in range(K):  # one call per rollout: batch-level parts see one rollout of one batch
        rows = slice(k * B, (k + 1) * B)
        parts["r_perf"].append(r_perf(cta_pred[rows], cta_gold[rows], cpa_pred[rows], cpa_gold[rows],
                                      batch.column_mask, rc.perf_mode))
        parts["r_parallel"].append(r_parallel(mask[rows], scores[rows], rc.target_share, rc.balance_weight))
        annotated = annotated_columns(cta_pred[rows], cpa_pred[rows], batch.column_mask, rc.perf_mode)
        parts["r_finish"].append(r_finish(annotated, batch.column_mask, mask[rows], rc.degenerate_penalty))
    rewards = {name: torch.stack(values).float() for name, values in parts.items()}  # (K, B)
    rewards["reward"] = combine(rewards["r_perf"], rewards["r_parallel"], rewards["r_finish"], lam1, lam2)
    routing_advantage = group_advantages(rewards["reward"]).flatten()  # (K·B,)

    # per-column credit: the share of r each label decision carries (module docstring)
    annotated = annotated_columns(cta_pred, cpa_pred, column_mask, rc.perf_mode).float()  # (K·B, C)
    cta_scored = (cta_gold != IGNORE_INDEX) & column_mask if rc.perf_mode in ("cta", "both") else torch.zeros_like(column_mask)
    cpa_scored = (cpa_gold != IGNORE_INDEX) & cpa_tokens if rc.perf_mode in ("cpa", "both") else torch.zeros_like(column_mask)
    n_scored = (cta_scored.sum(-1) + cpa_scored.sum(-1)).clamp(min=1).float()[:, None]  # (K·B, 1)
    n_columns = column_mask.sum(-1).clamp(min=1).float()[:, None]
    finish = lam2 * annotated / n_columns
    cta_credit = ((cta_pred == cta_gold) & cta_scored).float() / n_scored + finish
    cpa_credit = ((cpa_pred == cpa_gold) & cpa_scored).float() / n_scored + finish
    C = column_mask.shape[1]
    cta_advantage = group_advantages(cta_credit.view(K, B, C)).view(K * B, C)
    cpa_advantage = group_advantages(cpa_credit.view(K, B, C)).view(K * B, C)

    specialist_configs = [s.config for s in orch.specialists]
    critical = torch.tensor([orchestrator_steps(orch.primary.config, specialist_configs, row, orch.stream_seam, orch.column_seam)[0]
                             for row in mask.tolist()], dtype=torch.float32, device=device)
    decision = None
    if S:
        d = fwd.decision
        decision = RouterDecision(d.scores.detach(), d.activation_mask, d.log_prob.detach(), d.token_mask)
    rollouts = Rollouts(
        num_rollouts=K, decision=decision, reads=fwd.reads,
        routing_logp_old=fwd.routing_log_prob.detach() if S else None,
        routing_advantage=routing_advantage,
        cta_action=cta_action, cpa_action=cpa_action, cta_logp_old=cta_logp, cpa_logp_old=cpa_logp,
        cta_tokens=cta_tokens, cpa_tokens=cpa_tokens, cta_advantage=cta_advantage, cpa_advantage=cpa_advantage,
        rewards=rewards, critical_steps=critical)
    return rollouts, fwd


def rescore(orch: SwarmOrchestrator, batch: Batch, rollouts: Rollouts) -> PolicyForward:
    """The forward of the same rollouts (routing, reads) under the current parameters."""
    return policy_forward(orch, batch, rollouts.num_rollouts, decision=rollouts.decision, reads=rollouts.reads)


def distill_loss(orch: SwarmOrchestrator, batch: Batch, out, activation_mask: torch.Tensor, K: int,
                 reads: list[SpecialistRead | None] | None = None) -> torch.Tensor:
    """Soft-label CE of the fused output toward the output ensemble of the same rollout: the
    mean softmax of the fused output (detached) and each activated frozen specialist's labels
    (`SwarmOrchestrator.specialist_logits`, from `reads` where they hold its stream;
    `aegir.orchestrator.ensemble.ensemble_probs`), over the real columns (CTA) and the
    non-subject columns (CPA) of the K·B rows. The teacher holds what the experts' own heads
    read; the student has only the seams to get it through."""
    from aegir.orchestrator.ensemble import ensemble_probs

    own = orch.specialist_logits(batch, reads)  # B rows each

    def cross_entropy(task: int, student: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            teacher = ensemble_probs(student.exp(), [None if o is None else o[task].float().softmax(-1).repeat(K, 1, 1)
                                                     for o in own], activation_mask)
        return -(teacher * student).sum(-1)

    return label_mean(batch, out, K, cross_entropy)


def label_mean(batch: Batch, out, K: int, per_column) -> torch.Tensor:
    """The mean of `per_column(task, log-probs (K·B, C, n))` — a (K·B, C) tensor — over the label
    decisions of K·B rows (row k·B + b is table b): every real column's CTA (task 0) and every
    non-subject column's CPA (task 1). The column average of `distill_loss` and `anchor_loss`."""
    total, count = 0.0, 0
    mask = batch.column_mask.repeat(K, 1)  # (K·B, C)
    for task, (name, first) in enumerate((("cta_logits", 0), ("cpa_logits", 1))):
        valid = mask.clone()
        valid[:, :first] = False
        total = total + per_column(task, F.log_softmax(getattr(out, name).float(), -1))[valid].sum()
        count += int(valid.sum())
    return total / max(count, 1)


def anchor_loss(batch: Batch, out, reference: tuple[torch.Tensor, torch.Tensor], K: int) -> torch.Tensor:
    """KL(reference ‖ trained) of the label distributions, averaged over the real columns (CTA)
    and the non-subject columns (CPA) of the K·B rows: the pull of KL-regularised RL toward the
    policy training started from. `reference`: the frozen Phase 1 primary's (CTA, CPA) logits
    on the B tables (row k·B + b of `out` is table b). Phase 3's extra updates on synthetic
    tables pull the primary away from what it read well on real ones (its control ends below
    it on `real`, docs/experiments.md); the anchor holds it near its start where the gold
    labels and the rewards do not ask it to move."""
    def kl(task: int, student: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            teacher = F.log_softmax(reference[task].float(), -1).repeat(K, 1, 1)
        return (teacher.exp() * (teacher - student)).sum(-1)

    return label_mean(batch, out, K, kl)


def token_loss(orch: SwarmOrchestrator, batch: Batch, fwd: PolicyForward, rollouts: Rollouts,
               settings: PARLSettings, epsilon: float,
               route_target: tuple[torch.Tensor, torch.Tensor] | None = None,
               reference: tuple[torch.Tensor, torch.Tensor] | None = None,
               ) -> tuple[torch.Tensor, dict[str, float], PPOStats]:
    """The loss of one update: rl_weight · clipped token loss + ce_weight·CE + ratio loss (the CE on gold
    labels with `settings.label_smoothing`; the RL tokens are the sampled labels, never smoothed).

    Tokens, in one flat vector: every routing decision the policy made (weight
    `critical_weight`), every real column's CTA label and every non-subject column's CPA label
    (weight 1). With `settings.route_weight` and `route_target` (`routing_targets` of the
    batch's tables), also route_weight · the router's binary cross-entropy against those targets
    on the specialists that have domains, averaged over the K·B rows. With `settings.anchor_weight`
    and `reference` (the frozen Phase 1 primary's logits on the B tables), also anchor_weight ·
    `anchor_loss`. Returns (loss, detached parts, PPO stats).
    """
    out = fwd.output
    new_cta = F.log_softmax(out.cta_logits.float(), -1).gather(-1, rollouts.cta_action[..., None])[..., 0]
    new_cpa = F.log_softmax(out.cpa_logits.float(), -1).gather(-1, rollouts.cpa_action[..., None])[..., 0]
    logp_new = [new_cta[rollouts.cta_tokens], new_cpa[rollouts.cpa_tokens]]
    logp_old = [rollouts.cta_logp_old[rollouts.cta_tokens], rollouts.cpa_logp_old[rollouts.cpa_tokens]]
    advantage = [rollouts.cta_advantage[rollouts.cta_tokens], rollouts.cpa_advantage[rollouts.cpa_tokens]]
    device = new_cta.device
    weight = [torch.ones(int(rollouts.cta_tokens.sum()), device=device),
              torch.ones(int(rollouts.cpa_tokens.sum()), device=device)]
    if rollouts.decision is not None:
        tokens = rollouts.decision.token_mask
        logp_new.append(fwd.routing_log_prob[tokens])
        logp_old.append(rollouts.routing_logp_old[tokens])
        advantage.append(rollouts.routing_advantage[:, None].expand_as(tokens)[tokens])
        weight.append(torch.full((int(tokens.sum()),), settings.critical_weight, device=device))
    rl_loss, stats = clipped_token_loss(torch.cat(logp_new), torch.cat(logp_old), torch.cat(advantage),
                                        torch.cat(weight), epsilon, settings.kl_coef)

    primary = orch.primary
    batch_k = repeat_batch(batch, rollouts.num_rollouts)
    supervised, parts = primary.loss(batch_k, out, settings.label_smoothing)  # CE(CTA) + CE(CPA) + w · ratio loss
    ratio_term = primary.config.ratio_loss_weight * out.ratio_loss
    ce = supervised - ratio_term
    # (× 1.0 is exact: the default's loss is the bits it was before the knob)
    loss = settings.rl_weight * rl_loss + settings.ce_weight * ce + ratio_term
    extra = {}
    if settings.route_weight and route_target is not None and fwd.routing_hidden is not None:
        target, known = route_target
        if bool(known.any()):
            target_k = target.repeat(rollouts.num_rollouts, 1)  # row k·B + b is table b
            route = -orch.routing_log_prob(fwd.routing_hidden, target_k)[:, known].mean()
            loss = loss + settings.route_weight * route
            extra["route"] = float(route.detach())
    if settings.distill_weight and rollouts.decision is not None:
        distill = distill_loss(orch, batch, out, rollouts.decision.activation_mask, rollouts.num_rollouts,
                               rollouts.reads)
        loss = loss + settings.distill_weight * distill
        extra["distill"] = float(distill.detach())
    if settings.anchor_weight and reference is not None:
        anchor = anchor_loss(batch, out, reference, rollouts.num_rollouts)
        loss = loss + settings.anchor_weight * anchor
        extra["anchor"] = float(anchor.detach())
    return loss, {"loss": float(loss.detach()), "rl": float(rl_loss.detach()), "ce_cta": float(parts["cta"]),
                  "ce_cpa": float(parts["cpa"]), "ratio": float(parts["ratio"]), **extra}, stats

"""Rewards as functions of a routing, on what the Phase 1 agents said about one batch (Phase 2).

Phase 3's fusion does not exist yet when Phase 2 runs, so its reward study scores an honest
stand-in that depends on the routing: a table's *routed annotation* takes, per column, the
argmax of the mean softmax of the primary and the specialists the router activated for that
table (none activated: the primary alone). Activating a specialist that is better on a table
pays; one that is worse costs. Because each table's r_perf depends only on its own routing,
its expectation under the router's independent gates is computed exactly over all 2^S
routings (`r_perf_table`, `expected_value`).

Every agent runs once per batch (`annotate` → `BatchAnnotations`, the routed annotation of
every routing); the reward components then take one routing of it, (B, S) mask and gates →
(B,) (`COMPONENTS`), and `pooled` scores many batches, each on its own, as Phase 3's
per-batch calls do. `sample_components` draws routings from a router (`seeded_router`) over
the primary's standardised `routing_hidden` (`router_features`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from aegir.data.batch import Batch
from aegir.model.network import AegirModel
from aegir.orchestrator.ensemble import all_routings, routed_argmax, routing_index
from aegir.orchestrator.router import SpecialistRouter
from aegir.rl.rewards import RewardConfig, annotated_columns, r_finish, r_parallel, r_perf


@dataclass
class BatchAnnotations:
    """What the Phase 1 agents say about one batch, computed once.

    column_mask:       (B, C) bool, real columns
    cta_gold/cpa_gold: (B, C) long, class ids or IGNORE_INDEX
    features:          (B, D) the primary's `routing_hidden`, the router's input
    routed_cta:        (2^S, B, C) long, the routed annotation of every table under routing j
    routed_cpa:        (2^S, B, C) long  (of `all_routings`; j = 0: the primary alone)
    """

    column_mask: torch.Tensor
    cta_gold: torch.Tensor
    cpa_gold: torch.Tensor
    features: torch.Tensor
    routed_cta: torch.Tensor
    routed_cpa: torch.Tensor

    @property
    def batch_size(self) -> int:
        return self.column_mask.shape[0]

    @property
    def num_specialists(self) -> int:
        return self.routed_cta.shape[0].bit_length() - 1

    def routed_predictions(self, activation_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """activation_mask (B, S) → (cta_pred, cpa_pred), each (B, C) long."""
        j, rows = routing_index(activation_mask), torch.arange(self.batch_size, device=activation_mask.device)
        return self.routed_cta[j, rows], self.routed_cpa[j, rows]

    def primary_predictions(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.routed_cta[0], self.routed_cpa[0]


@torch.no_grad()
def annotate(primary: AegirModel, specialists: list[AegirModel], batch: Batch) -> BatchAnnotations:
    """Run every agent on `batch` (eval mode, no gradient)."""
    encoded = primary.encode(batch)
    output = primary.forward_from_encoded(batch, encoded)
    features = primary.routing_hidden(batch, encoded).float()  # (B, D)
    outputs = [output] + [model(batch) for model in specialists]
    return BatchAnnotations(
        column_mask=batch.column_mask,
        cta_gold=batch.cta_labels,
        cpa_gold=batch.cpa_labels,
        features=features,
        routed_cta=routed_argmax(torch.stack([o.cta_logits.float().softmax(-1) for o in outputs])),
        routed_cpa=routed_argmax(torch.stack([o.cpa_logits.float().softmax(-1) for o in outputs])),
    )


# ----------------------------------------------------------------------------- routing rewards
# Each takes one batch's annotations and one routing of it, (B, S) mask and gates → (B,).


def routed_r_perf(b: BatchAnnotations, mask: torch.Tensor, gate: torch.Tensor, rc: RewardConfig) -> torch.Tensor:
    cta, cpa = b.routed_predictions(mask)
    return r_perf(cta, b.cta_gold, cpa, b.cpa_gold, b.column_mask, rc.perf_mode)


def routed_r_parallel(b: BatchAnnotations, mask: torch.Tensor, gate: torch.Tensor, rc: RewardConfig) -> torch.Tensor:
    return r_parallel(mask, gate, rc.target_share, rc.balance_weight)


def routed_r_finish(b: BatchAnnotations, mask: torch.Tensor, gate: torch.Tensor, rc: RewardConfig) -> torch.Tensor:
    cta, cpa = b.routed_predictions(mask)
    annotated = annotated_columns(cta, cpa, b.column_mask, rc.perf_mode)
    return r_finish(annotated, b.column_mask, mask, rc.degenerate_penalty)


COMPONENTS = {"r_perf": routed_r_perf, "r_parallel": routed_r_parallel, "r_finish": routed_r_finish}


def pooled(batches: list[BatchAnnotations], component, rc: RewardConfig):
    """A routing reward over the concatenated batches, (N·B, S) → (N·B,): each batch's slice
    is scored on its own, so batch-level parts see one batch (as Phase 3's per-batch calls)."""
    sizes = [b.batch_size for b in batches]

    def reward(mask: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        return torch.cat([component(b, m, g, rc) for b, m, g in zip(batches, mask.split(sizes), gate.split(sizes))])

    return reward


def r_perf_table(batches: list[BatchAnnotations], rc: RewardConfig) -> torch.Tensor:
    """(N·B, 2^S): routed r_perf of every table under every routing of it."""
    routings = all_routings(batches[0].num_specialists, batches[0].column_mask.device)
    rows = []
    for b in batches:
        rows.append(torch.stack([routed_r_perf(b, m.expand(b.batch_size, -1), m.float().expand(b.batch_size, -1), rc)
                                 for m in routings], dim=1))
    return torch.cat(rows)


def expected_value(table: torch.Tensor, scores: torch.Tensor) -> float:
    """Mean over tables of E[r] under independent Bernoulli gates: table (N, 2^S), scores (N, S)."""
    routings = all_routings(scores.shape[1], scores.device).float()  # (2^S, S)
    p = scores.detach().double().clamp(1e-12, 1 - 1e-12)
    log_prob = p.log() @ routings.double().T + (1 - p).log() @ (1 - routings.double()).T  # (N, 2^S)
    return float((log_prob.exp() * table.double()).sum(-1).mean())


def router_features(batches: list[BatchAnnotations]) -> torch.Tensor:
    """The router's input for the checked tables, (N·B, D): the primary's `routing_hidden`,
    standardised per dimension over these tables and divided by √D (unit norm on average).

    An affine map of the features leaves the set of linear routing policies unchanged; it only
    conditions the ascent. Centred features put a global rate change on the bias alone (Adam
    moves it by about `ascent_lr` a step) and the √D keeps the input-dependent part from moving
    each logit by lr·D a step, so `ascent_lr` means the same for every model preset.
    """
    h = torch.cat([b.features for b in batches]).double()
    h = (h - h.mean(0)) / h.std(0).clamp(min=1e-6)
    return (h / math.sqrt(h.shape[1])).float()


def seeded_router(d_model: int, num_specialists: int, rate: float, generator: torch.Generator,
                  device: torch.device | str = "cpu") -> SpecialistRouter:
    """A router with every gate at `rate` (bias logit(rate)) and N(0, 0.02) weights from `generator`."""
    router = SpecialistRouter(d_model, num_specialists, init_rate=rate)
    with torch.no_grad():
        router.proj.weight.normal_(0.0, 0.02, generator=generator)
    return router.to(device)


@torch.no_grad()
def sample_components(batches: list[BatchAnnotations], router: SpecialistRouter, rc: RewardConfig,
                      rollouts: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Each component under `rollouts` routings sampled from `router` → name: (K, N·B)."""
    features = router_features(batches)
    rewards = {name: pooled(batches, fn, rc) for name, fn in COMPONENTS.items()}
    values: dict[str, list[torch.Tensor]] = {name: [] for name in COMPONENTS}
    for _ in range(rollouts):
        decision = router.sample(features, generator=generator)
        for name, reward in rewards.items():
            values[name].append(reward(decision.activation_mask, decision.scores))
    return {name: torch.stack(v) for name, v in values.items()}

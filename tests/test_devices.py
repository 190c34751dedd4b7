"""Tensors made inside rl/, the router and the phase2 stage sit on the device of their inputs.

No GPU here, so the `meta` device stands in for one: torch refuses to mix a meta tensor with a
CPU tensor, so any tensor made on the default device (CPU) beside meta inputs fails the op.
"""

from __future__ import annotations

import torch

from aegir.orchestrator.ensemble import all_routings, routed_argmax, routing_index
from aegir.orchestrator.router import SpecialistRouter
from aegir.rl.checks import routing_patterns
from aegir.rl.rewards import (
    annotated_columns,
    balance_term,
    r_finish,
    r_parallel,
    r_perf,
)
from aegir.rl.routed_rewards import BatchAnnotations

META = torch.device("meta")


def meta_mask(B: int, S: int) -> torch.Tensor:
    return torch.ones(B, S, dtype=torch.bool, device=META)


def test_rewards_follow_their_inputs():
    B, S, C = 4, 3, 5
    mask, gate = meta_mask(B, S), torch.full((B, S), 0.5, device=META)
    assert r_parallel(mask, gate, 0.25, 0.5).device == META
    assert balance_term(meta_mask(B, 1)).device == META  # the S < 2 branch makes its own zeros
    pred = torch.zeros(B, C, dtype=torch.long, device=META)
    columns = torch.ones(B, C, dtype=torch.bool, device=META)
    assert r_perf(pred, pred, pred, pred, columns).device == META
    annotated = annotated_columns(pred, pred, columns)
    assert r_finish(annotated, columns, mask).device == META


def test_routing_patterns_on_the_requested_device():
    patterns = routing_patterns(8, 3, 0.25, torch.Generator().manual_seed(0), device=META)
    assert {p.activation_mask.device for p in patterns.values()} == {META}
    assert {p.gate_prob.device for p in patterns.values()} == {META}


def test_router_samples_beside_its_features_with_a_cpu_generator():
    router = SpecialistRouter(6, 3).to(META)
    decision = router.sample(torch.zeros(4, 6, device=META), generator=torch.Generator().manual_seed(0))
    assert decision.activation_mask.device == META and decision.log_prob.device == META


def test_phase2_routing_tables_follow_their_inputs():
    assert all_routings(3, META).device == META
    assert routing_index(meta_mask(4, 3)).device == META
    probs = torch.zeros(3, 4, 5, 7, device=META)  # (A = 1 + S agents, B, C, K)
    routed = routed_argmax(probs)
    assert routed.device == META and routed.shape == (4, 4, 5)
    b = BatchAnnotations(column_mask=torch.ones(4, 5, dtype=torch.bool, device=META),
                         cta_gold=torch.zeros(4, 5, dtype=torch.long, device=META),
                         cpa_gold=torch.zeros(4, 5, dtype=torch.long, device=META),
                         features=torch.zeros(4, 6, device=META), routed_cta=routed, routed_cpa=routed)
    cta, cpa = b.routed_predictions(meta_mask(4, 2))
    assert cta.device == META and cpa.device == META

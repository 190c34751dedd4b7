"""The token-level clipped loss against its per-token reference, advantages, and one PARL
rollout's rewards, tokens and credit on a tiny orchestrator."""

from __future__ import annotations

import pytest
import torch

from aegir.rl.parl import PARLSettings, collect_rollouts, rescore, token_loss
from aegir.rl.ppo import (
    clipped_token_loss,
    clipped_token_loss_reference,
    deterministic_kernels,
    group_advantages,
)
from aegir.rl.rewards import RewardConfig
from test_model import make_batch
from test_swarm import MORE_TABLES, open_gates, orchestrator

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def tokens(n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    logp_old = -torch.rand(n, generator=g) * 3
    logp_new = (logp_old + 0.4 * torch.randn(n, generator=g)).requires_grad_(True)  # ratios inside and outside the clip
    advantage = torch.randn(n, generator=g)
    weight = torch.where(torch.rand(n, generator=g) < 0.3, 2.0, 1.0)
    return logp_new, logp_old, advantage, weight


@pytest.mark.parametrize("kl_coef", [0.0, 0.3])
def test_vectorised_loss_equals_the_per_token_loop_in_value_and_gradient(kl_coef):
    logp_new, logp_old, advantage, weight = tokens(200, seed=1)
    loss, stats = clipped_token_loss(logp_new, logp_old, advantage, weight, epsilon=0.2, kl_coef=kl_coef)
    (grad,) = torch.autograd.grad(loss, logp_new)
    reference = clipped_token_loss_reference(logp_new, logp_old, advantage, weight, epsilon=0.2, kl_coef=kl_coef)
    (ref_grad,) = torch.autograd.grad(reference, logp_new)
    assert torch.allclose(loss, reference, rtol=1e-5, atol=1e-7)
    assert torch.allclose(grad, ref_grad, rtol=1e-5, atol=1e-8)
    assert 0.0 < stats.clip_fraction < 1.0 and stats.tokens == 200


def test_loss_kl_and_gradient_equal_values_worked_out_by_hand():
    """Four tokens, ε = 0.2, ratios ρ = π_new/π_old of 1.5, 0.5, 1.1 and 1, advantages +2, −1, +1
    and −3, weights 1, 1, 2, 1. The per-token loop computes the same formula as the vectorised
    loss; these numbers are worked out here, by hand.

    L_t = min(ρA, clip(ρ, 0.8, 1.2)·A):
        t1: min(1.5·2, 1.2·2)    = 2.4    (clipped: ρ > 1 + ε with A > 0)
        t2: min(0.5·−1, 0.8·−1)  = −0.8   (clipped: ρ < 1 − ε with A < 0)
        t3: min(1.1·1, 1.1·1)    = 1.1    (inside the clip), weight 2 → 2.2
        t4: min(1·−3, 1·−3)      = −3.0
    Σ w·L = 2.4 − 0.8 + 2.2 − 3.0 = 0.8; over N = 4 tokens, β = 0: loss = −0.8/4 = −0.2.

    KL_t = (ρ − 1) − ln ρ:
        t1: 0.5 − 0.4054651 = 0.0945349
        t2: −0.5 + 0.6931472 = 0.1931472
        t3: 0.1 − 0.0953102 = 0.0046898
        t4: 0
    Σ w·KL = 0.0945349 + 0.1931472 + 2·0.0046898 = 0.2970617; β = 0.5:
        loss = −(0.8 − 0.5·0.2970617)/4 = −0.6514691/4 = −0.1628673
    approx_kl (unweighted mean) = 0.2923719/4 = 0.0730930; clip fraction: t1, t2 of 4 = 0.5;
    mean log ρ = (0.4054651 − 0.6931472 + 0.0953102 + 0)/4 = −0.0480930.

    ∂loss/∂ln π_new(t) = −(w/N)·ρA where the unclipped term is the minimum, 0 where the clipped
    one is, plus (w/N)·β·(ρ − 1) from the KL:
        β = 0:   (0, 0, −2·1.1/4, 3/4)                     = (0, 0, −0.55, 0.75)
        β = 0.5: (0.5·0.5/4, −0.5·0.5/4, −0.55 + 2·0.5·0.1/4, 0.75) = (0.0625, −0.0625, −0.525, 0.75)
    """
    ratio = torch.tensor([1.5, 0.5, 1.1, 1.0], dtype=torch.float64)
    logp_old = torch.tensor([-0.7, -1.2, -2.0, -0.3], dtype=torch.float64)
    advantage = torch.tensor([2.0, -1.0, 1.0, -3.0], dtype=torch.float64)
    weight = torch.tensor([1.0, 1.0, 2.0, 1.0], dtype=torch.float64)
    expected = {0.0: (-0.2, [0.0, 0.0, -0.55, 0.75]), 0.5: (-0.1628673, [0.0625, -0.0625, -0.525, 0.75])}
    for kl_coef, (want_loss, want_grad) in expected.items():
        for loss_fn in (clipped_token_loss, clipped_token_loss_reference):
            logp_new = (logp_old + ratio.log()).requires_grad_(True)
            out = loss_fn(logp_new, logp_old, advantage, weight, epsilon=0.2, kl_coef=kl_coef)
            loss, stats = out if loss_fn is clipped_token_loss else (out, None)
            (grad,) = torch.autograd.grad(loss, logp_new)
            assert float(loss.detach()) == pytest.approx(want_loss, abs=1e-7), (loss_fn.__name__, kl_coef)
            assert grad.tolist() == pytest.approx(want_grad, abs=1e-7), (loss_fn.__name__, kl_coef)
            if stats is not None:
                assert stats.approx_kl == pytest.approx(0.0730930, abs=1e-7)
                assert stats.clip_fraction == 0.5 and stats.tokens == 4
                assert stats.log_ratio == pytest.approx(-0.0480930, abs=1e-7)


def test_clipping_stops_the_gradient_only_where_it_should():
    logp_old = torch.zeros(4)
    # ratios 1.5 (above 1 + ε) and 0.6 (below 1 − ε), each with a positive and a negative advantage
    logp_new = torch.log(torch.tensor([1.5, 1.5, 0.6, 0.6])).requires_grad_(True)
    advantage = torch.tensor([1.0, -1.0, 1.0, -1.0])
    loss, stats = clipped_token_loss(logp_new, logp_old, advantage, torch.ones(4), epsilon=0.2)
    (grad,) = torch.autograd.grad(loss, logp_new)
    # A > 0 with ρ > 1 + ε and A < 0 with ρ < 1 − ε are clipped (no gradient); the other two are not
    assert grad[0] == 0 and grad[3] == 0
    assert grad[1] != 0 and grad[2] != 0
    assert stats.clip_fraction == 1.0
    # the loss is the mean over tokens, not over tables: doubling every token's weight doubles it
    loss2, _ = clipped_token_loss(logp_new, logp_old, advantage, 2 * torch.ones(4), epsilon=0.2)
    assert torch.allclose(loss2, 2 * loss)


def test_loss_input_errors():
    x = torch.zeros(3)
    with pytest.raises(ValueError, match="must all be"):
        clipped_token_loss(x, x, x, torch.zeros(2), 0.2)
    with pytest.raises(ValueError, match="epsilon"):
        clipped_token_loss(x, x, x, x, 1.5)
    empty = torch.zeros(0, requires_grad=True)
    loss, stats = clipped_token_loss(empty, empty.detach(), empty.detach(), empty.detach(), 0.2)
    assert float(loss.detach()) == 0.0 and stats.tokens == 0


def test_group_advantages_subtract_the_group_mean():
    rewards = torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.5, 0.0]])  # K = 3 rollouts of B = 2 tables
    adv = group_advantages(rewards)
    assert torch.allclose(adv[:, 0], torch.tensor([0.5, -0.5, 0.0]))
    assert torch.count_nonzero(adv[:, 1]) == 0  # a table whose rollouts tie gives no gradient


def parl_settings(rollouts: int, ce_weight: float = 1.0) -> PARLSettings:
    """The PARL knobs these tests share: abstain below 0.05, routing tokens weigh 2, no KL."""
    return PARLSettings(rollouts=rollouts, abstain_below=0.05, critical_weight=2.0, ce_weight=ce_weight,
                        kl_coef=0.0, rewards=RewardConfig())


LABELLED = dict(cta=[[1, 2, 3], [4, 5], [6, 7, 8], [9, 10, 11, 12]], cpa=[[1, 2], [3], [4, 5], [6, 7, 8]])


def plain_rollouts():
    """(orchestrator with open gates, batch of MORE_TABLES, `parl_settings(rollouts=2)`, and the
    rollouts and forward of one collection under them): what the loss-term tests start from."""
    orch, _ = orchestrator()
    open_gates(orch, seed=1)
    batch = make_batch(MORE_TABLES, **LABELLED)
    plain = parl_settings(rollouts=2)
    rollouts, forward = collect_rollouts(orch, batch, plain, 0.3, 0.1, torch.Generator().manual_seed(0))
    return orch, batch, plain, rollouts, forward


def test_rollouts_rewards_tokens_and_credit():
    orch, _ = orchestrator()
    open_gates(orch, seed=1)
    batch = make_batch(MORE_TABLES, **LABELLED)
    settings = parl_settings(rollouts=4)
    rollouts, forward = collect_rollouts(orch, batch, settings, lam1=0.3, lam2=0.1,
                                         generator=torch.Generator().manual_seed(0), cap=2)
    K, B, C = 4, 4, 4
    assert set(rollouts.rewards) == {"r_perf", "r_parallel", "r_finish", "reward"}
    assert all(v.shape == (K, B) for v in rollouts.rewards.values())
    expected = rollouts.rewards["r_perf"] + 0.3 * rollouts.rewards["r_parallel"] + 0.1 * rollouts.rewards["r_finish"]
    assert torch.allclose(rollouts.rewards["reward"], expected)
    # the abstain rule: an untrained model is unsure, so some sampled labels are not annotations
    assert float(rollouts.rewards["r_finish"].std()) > 0
    # advantages are group-relative: zero mean over each table's K rollouts
    assert torch.allclose(rollouts.routing_advantage.view(K, B).sum(0), torch.zeros(B), atol=1e-6)
    assert torch.allclose(rollouts.cta_advantage.view(K, B, C).sum(0), torch.zeros(B, C), atol=1e-6)
    # tokens: every real column's CTA, CPA from column 1, and routing decisions within the cap
    assert rollouts.cta_tokens.sum() == K * 12 and rollouts.cpa_tokens.sum() == K * 8
    active = rollouts.decision.activation_mask.view(K, B, 3)
    assert all(int(active[k].any(0).sum()) <= 2 for k in range(K))  # ≤ 2 specialists per batch
    assert rollouts.critical_steps.shape == (K * B,)
    # the first update's ratios are exactly 1; after a step they move and can be clipped
    loss, parts, stats = token_loss(orch, batch, forward, rollouts, settings, epsilon=0.2)
    assert stats.clip_fraction == 0.0 and abs(stats.log_ratio) < 1e-6
    assert stats.tokens == K * 20 + int(rollouts.decision.token_mask.sum())
    loss.backward()
    with torch.no_grad():
        for p in orch.trainable_parameters().values():
            if p.grad is not None:
                p.sub_(0.5 * p.grad)
    _, _, moved = token_loss(orch, batch, rescore(orch, batch, rollouts), rollouts, settings, epsilon=0.2)
    assert abs(moved.log_ratio) > 1e-4


def test_phase3_ce_takes_the_label_smoothing_and_the_rl_tokens_do_not():
    from dataclasses import replace

    from aegir.orchestrator.model import repeat_batch

    orch, batch, plain, rollouts, forward = plain_rollouts()
    smooth = replace(plain, label_smoothing=0.2)
    loss0, parts0, stats0 = token_loss(orch, batch, forward, rollouts, plain, 0.2)
    loss1, parts1, stats1 = token_loss(orch, batch, forward, rollouts, smooth, 0.2)
    batch_k = repeat_batch(batch, 2)
    ce0, _ = orch.primary.loss(batch_k, forward.output)
    ce1, _ = orch.primary.loss(batch_k, forward.output, label_smoothing=0.2)
    # the whole difference is the supervised CE's: the RL part (sampled tokens) is untouched
    assert float((ce1 - ce0).detach()) != 0.0
    assert abs(float((loss1 - loss0 - ce1 + ce0).detach())) < 1e-5
    assert parts1["rl"] == parts0["rl"] and stats1 == stats0


def test_rl_weight_scales_the_clipped_loss_alone_and_one_is_the_loss_unchanged():
    """The "CE alone" ablation (`phase3.rl_weight: 0`) drops exactly the clipped token loss; the
    default 1 gives the loss of before the knob, bit for bit."""
    from dataclasses import replace

    orch, batch, plain, rollouts, forward = plain_rollouts()
    loss1, parts1, _ = token_loss(orch, batch, forward, rollouts, plain, 0.2)
    loss0, parts0, _ = token_loss(orch, batch, forward, rollouts, replace(plain, rl_weight=0.0), 0.2)
    assert parts1["rl"] == parts0["rl"] != 0.0  # reported either way
    assert abs(float((loss1 - loss0).detach()) - parts1["rl"]) < 1e-5
    assert torch.equal(token_loss(orch, batch, forward, rollouts, replace(plain, rl_weight=1.0), 0.2)[0], loss1)


def test_control_without_specialists_has_no_routing():
    from aegir.orchestrator.model import build_orchestrator
    from test_swarm import tiny

    control = build_orchestrator(tiny(0), {})
    batch = make_batch(MORE_TABLES, **LABELLED)
    settings = parl_settings(rollouts=2, ce_weight=0.0)
    rollouts, forward = collect_rollouts(control, batch, settings, 0.3, 0.1, torch.Generator().manual_seed(0))
    assert rollouts.decision is None and torch.count_nonzero(rollouts.rewards["r_parallel"]) == 0
    loss, _, stats = token_loss(control, batch, forward, rollouts, settings, 0.2)
    assert stats.tokens == 2 * 20 and torch.isfinite(loss)


def test_distinct_routings_forward_equals_k_separate_copies():
    from aegir.orchestrator.model import repeat_batch, select_encoded
    from aegir.rl.parl import policy_forward

    orch, _ = orchestrator()
    open_gates(orch, seed=2)
    batch = make_batch(MORE_TABLES, **LABELLED)
    K, B = 3, 4
    fast = policy_forward(orch, batch, K, generator=torch.Generator().manual_seed(1))
    mask = fast.decision.activation_mask
    assert len(torch.unique(mask.view(K, B, 3).long() @ torch.tensor([1, 2, 4]), dim=None)) >= 2
    rows = torch.arange(B).repeat(K)
    encoded = orch.encode(batch)
    state = orch.fuse(fast.reads, mask, rows)
    slow = orch.primary.forward_from_encoded(repeat_batch(batch, K), select_encoded(encoded, rows), state)
    g = torch.Generator().manual_seed(3)
    weights = torch.randn(slow.cta_logits.shape, generator=g)
    params = list(orch.trainable_parameters().values())

    def grads(out):
        value = (out.cta_logits * weights).sum() + out.cpa_logits.sum() + out.ratio_loss
        return torch.autograd.grad(value, params, allow_unused=True)

    assert torch.allclose(fast.output.cta_logits, slow.cta_logits, atol=1e-5)
    assert torch.allclose(fast.output.cpa_logits, slow.cpa_logits, atol=1e-5)
    assert torch.allclose(fast.output.ratio_loss, slow.ratio_loss, atol=1e-6)
    for a, b in zip(grads(fast.output), grads(slow)):
        if a is None or b is None:
            assert a is None and b is None
            continue
        # the same to float32 rounding: relative to the gradient's norm (an elementwise test
        # fails on near-zero entries, whose rounding depends on the order of the sums)
        assert float((a - b).norm() / b.norm().clamp(min=1e-30)) < 1e-5, float((a - b).abs().max())


def test_deterministic_kernels_make_an_indexing_backward_repeat_bit_for_bit():
    """The backward of a gather by index (what the training loops of phase3 and phase4 run)
    over 384,000 gradient elements on two intra-op threads: inside `deterministic_kernels`
    every repetition gives the same bits (outside, 30 repetitions gave 30 different gradients
    on this project's machine), and the previous setting comes back after it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        g = torch.Generator().manual_seed(0)
        x, idx, w = torch.randn(64, 96, generator=g), torch.randint(0, 64, (4000,), generator=g), \
            torch.randn(4000, 96, generator=g)

        def gradient() -> bytes:
            leaf = x.clone().requires_grad_(True)
            (leaf[idx] * w).sum().backward()
            return leaf.grad.numpy().tobytes()

        assert not torch.are_deterministic_algorithms_enabled()
        with deterministic_kernels():
            assert torch.are_deterministic_algorithms_enabled()
            assert len({gradient() for _ in range(10)}) == 1
        assert not torch.are_deterministic_algorithms_enabled()
    finally:
        torch.set_num_threads(threads)


def test_routing_targets_and_the_supervised_routing_term():
    """`routing_targets`: 1 where the table's domain is one of the specialist's, no target for a
    specialist without domains; `route_weight` adds exactly route_weight · the router's BCE
    toward those targets (the specialists with domains, K·B rows), and a step down its gradient
    moves the router's scores toward the targets."""
    from dataclasses import replace

    import torch.nn.functional as F

    from aegir.orchestrator.router import routing_targets

    target, known = routing_targets(["Hotel", "Book", None], [("Hotel", "Museum"), (), ("Book",)])
    assert target.tolist() == [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]
    assert known.tolist() == [True, False, True]

    orch, batch, plain, rollouts, forward = plain_rollouts()  # 4 tables; the orchestrator has 3 specialists
    target, known = routing_targets(["Hotel", "Book", "Hotel", "Movie"],
                                    [("Hotel",), (), ("Book", "Movie")])
    base, parts0, _ = token_loss(orch, batch, forward, rollouts, plain, 0.2, (target, known))
    assert "route" not in parts0  # off by default
    routed = replace(plain, route_weight=0.5)
    loss, parts, _ = token_loss(orch, batch, forward, rollouts, routed, 0.2, (target, known))
    logits = orch.router.logits(orch.router_norm(forward.routing_hidden)).detach()
    bce = F.binary_cross_entropy_with_logits(logits[:, [0, 2]], target.repeat(2, 1)[:, [0, 2]])
    assert parts["route"] == pytest.approx(float(bce), rel=1e-5)
    assert float((loss - base).detach()) == pytest.approx(0.5 * float(bce), rel=1e-4)

    def target_logp() -> float:
        with torch.no_grad():
            return float(orch.routing_log_prob(forward.routing_hidden, target.repeat(2, 1))[:, [0, 2]].sum())

    before = target_logp()
    orch.zero_grad(set_to_none=True)
    (loss - base).backward()
    with torch.no_grad():
        for p in orch.router.parameters():
            p.sub_(0.5 * p.grad)
    assert target_logp() > before


def test_distillation_term_is_the_soft_ce_toward_the_rollouts_output_ensemble():
    """`distill_weight` adds distill_weight · the mean over real columns (CTA) and non-subject
    columns (CPA) of −Σ teacher · log p_fused, where a rollout's teacher is the mean of the fused
    distribution (detached) and each specialist it activated, by hand; the gradient reaches the
    fused model (its gates) and never the frozen specialists."""
    from dataclasses import replace

    orch, batch, plain, rollouts, forward = plain_rollouts()
    base, parts0, _ = token_loss(orch, batch, forward, rollouts, plain, 0.2)
    assert "distill" not in parts0  # off by default
    loss, parts, _ = token_loss(orch, batch, forward, rollouts, replace(plain, distill_weight=0.7), 0.2)

    K, B = 2, batch.batch_size
    mask = rollouts.decision.activation_mask
    with torch.no_grad():
        own = [s.model(batch) for s in orch.specialists]
    total, count = 0.0, 0
    for name, first in (("cta_logits", 0), ("cpa_logits", 1)):
        for row in range(K * B):
            b = row % B
            fused = getattr(forward.output, name)[row].detach().float().log_softmax(-1)
            for c in range(first, batch.column_mask.shape[1]):
                if not batch.column_mask[b, c]:
                    continue
                members = [fused[c].exp()] + [getattr(own[s], name)[b, c].float().softmax(-1)
                                              for s in range(len(own)) if mask[row, s]]
                teacher = sum(members) / len(members)
                total += float(-(teacher * fused[c]).sum())
                count += 1
    assert mask.any() and not mask.all()  # some rollouts activated specialists, not all of them
    assert parts["distill"] == pytest.approx(total / count, rel=1e-5)
    assert float((loss - base).detach()) == pytest.approx(0.7 * total / count, rel=1e-4)
    orch.zero_grad(set_to_none=True)
    (loss - base).backward()
    assert orch.fusion.wkv_gate.grad is not None and orch.fusion.wkv_gate.grad.abs().sum() > 0
    assert all(p.grad is None for s in orch.specialists for p in s.parameters())


def test_anchor_term_is_the_kl_from_the_frozen_primarys_labels():
    """`anchor_weight` adds anchor_weight · the mean over real columns (CTA) and non-subject
    columns (CPA) of KL(reference ‖ trained), by hand; zero when the trained model is its
    reference (it starts there); its gradient reaches the trained primary, and it is off
    without a reference or at weight 0."""
    from dataclasses import replace
    from types import SimpleNamespace

    from aegir.rl.parl import anchor_loss

    orch, batch, plain, rollouts, forward = plain_rollouts()
    base, parts0, _ = token_loss(orch, batch, forward, rollouts, plain, 0.2)
    assert "anchor" not in parts0  # off by default
    reference = orch.specialists[0].model  # any frozen model with the primary's label sets
    with torch.no_grad():
        ref = reference(batch)
    ref_logits = (ref.cta_logits, ref.cpa_logits)
    _, parts_none, _ = token_loss(orch, batch, forward, rollouts, replace(plain, anchor_weight=0.5), 0.2)
    assert "anchor" not in parts_none  # no reference handed in: no term
    loss, parts, _ = token_loss(orch, batch, forward, rollouts, replace(plain, anchor_weight=0.5), 0.2,
                                reference=ref_logits)
    K, B = 2, batch.batch_size
    total, count = 0.0, 0
    for name, first in (("cta_logits", 0), ("cpa_logits", 1)):
        for row in range(K * B):
            b = row % B
            p = getattr(forward.output, name)[row].detach().float().log_softmax(-1)
            q = getattr(ref, name)[b].float().log_softmax(-1)
            for c in range(first, batch.column_mask.shape[1]):
                if batch.column_mask[b, c]:
                    total += float((q[c].exp() * (q[c] - p[c])).sum())
                    count += 1
    assert total > 0
    assert parts["anchor"] == pytest.approx(total / count, rel=1e-5)
    assert float((loss - base).detach()) == pytest.approx(0.5 * total / count, rel=1e-4)
    orch.zero_grad(set_to_none=True)
    (loss - base).backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in orch.primary.parameters())
    with torch.no_grad():  # the trained model read by its own reference: KL 0
        own = SimpleNamespace(cta_logits=forward.output.cta_logits[:B], cpa_logits=forward.output.cpa_logits[:B])
        same = anchor_loss(batch, own, (own.cta_logits, own.cpa_logits), 1)
    assert float(same) == pytest.approx(0.0, abs=1e-6)


def test_fused_primary_lr_holds_the_fused_runs_primary_and_never_the_controls():
    """`fused_primary_lr` 0: an AdamW step (with decay) leaves every weight of the fused run's
    primary as it was, to the bit, and moves its new parts; the control (no specialists) and the
    default (null) move the primary at `lr`. Out-of-range values fail naming the key."""
    from aegir.config import Phase3Config
    from aegir.errors import ConfigError
    from aegir.orchestrator.model import build_orchestrator
    from aegir.rl.parl_training import make_optimizer
    from test_swarm import tiny

    def moved_after_a_step(model, cfg) -> dict[str, bool]:
        params = {name: p for name, p in model.trainable_parameters().items() if p.numel()}  # the control's gates: empty
        before = {name: p.detach().clone() for name, p in params.items()}
        optimizer = make_optimizer(model, cfg)
        for p in params.values():
            p.grad = torch.ones_like(p)
        optimizer.step()
        return {name: not torch.equal(p.detach(), before[name]) for name, p in params.items()}

    frozen = Phase3Config(lr=1e-2, fusion_lr=1e-2, weight_decay=0.1, fused_primary_lr=0.0)
    fused = moved_after_a_step(orchestrator()[0], frozen)
    assert not any(moved for name, moved in fused.items() if name.startswith("primary."))
    new_parts = [moved for name, moved in fused.items() if not name.startswith("primary.")]
    assert new_parts and all(new_parts)
    control = moved_after_a_step(build_orchestrator(tiny(0), {}), frozen)
    assert control and all(control.values()) and all(name.startswith("primary.") for name in control)
    default = moved_after_a_step(orchestrator()[0], Phase3Config(lr=1e-2, fusion_lr=1e-2))
    assert all(default.values())
    for bad in (-0.1, 2.0):
        with pytest.raises(ConfigError, match="phase3.fused_primary_lr"):
            Phase3Config(fused_primary_lr=bad)


def test_distillation_with_the_stream_seam_takes_the_specialists_labels_from_their_reads():
    """With the stream seam the teacher's specialist labels come from the decoder outputs their
    reads already hold (`specialist_logits`): on every row a specialist read, the same logits as
    its whole forward; the distillation term then matches the one from whole forwards."""
    from dataclasses import replace

    from aegir.rl.parl import distill_loss

    orch, _ = orchestrator(stream_seam=True)
    open_gates(orch, seed=2)
    batch = make_batch(MORE_TABLES, **LABELLED)
    settings = replace(parl_settings(rollouts=2), distill_weight=1.0)
    rollouts, forward = collect_rollouts(orch, batch, settings, 0.3, 0.1, torch.Generator().manual_seed(0))
    from_reads = orch.specialist_logits(batch, rollouts.reads)
    whole = orch.specialist_logits(batch)  # no reads: every specialist's whole forward
    read_any = False
    for s, read in enumerate(rollouts.reads):
        if read is None:
            continue
        for b in range(batch.batch_size):
            if not rollouts.decision.activation_mask.view(2, batch.batch_size, -1)[:, b, s].any():
                continue  # not read: masked away by the activation
            read_any = True
            columns = int(batch.column_mask[b].sum())
            for task in (0, 1):
                x, y = from_reads[s][task][b, :columns], whole[s][task][b, :columns]
                assert torch.allclose(x, y, rtol=1e-4, atol=1e-4), (s, b, task, float((x - y).abs().max()))
    assert read_any
    mask, K = rollouts.decision.activation_mask, rollouts.num_rollouts
    with torch.no_grad():
        a = distill_loss(orch, batch, forward.output, mask, K, rollouts.reads)
        b = distill_loss(orch, batch, forward.output, mask, K)
    assert float(a) == pytest.approx(float(b), rel=1e-4)


def test_a_specialist_no_rollout_read_is_left_out_of_the_teacher_to_the_bit():
    """Given reads, a specialist that no rollout activated gets no labels (`specialist_logits`
    returns None for it instead of running its whole forward), and the teacher's mean leaves it
    out: the same bits as weighting its labels by zero on every row; a None for a specialist
    that is activated somewhere is an error."""
    from aegir.orchestrator.ensemble import ensemble_probs

    orch, _ = orchestrator(stream_seam=True)
    batch = make_batch(MORE_TABLES, **LABELLED)
    chosen = torch.zeros(batch.batch_size, orch.num_specialists, dtype=torch.bool)
    chosen[:, 0] = True
    reads = orch.read_specialists(batch, chosen)
    own = orch.specialist_logits(batch, reads)
    assert own[0] is not None and all(o is None for o in own[1:])
    whole = orch.specialist_logits(batch)  # no reads: every specialist's whole forward
    assert all(o is not None for o in whole)

    generator = torch.Generator().manual_seed(0)
    primary = torch.rand(4, 3, 5, generator=generator).softmax(-1)
    experts = [torch.rand(4, 3, 5, generator=generator).softmax(-1) for _ in range(2)]
    mask = torch.tensor([[True, False], [False, False], [True, False], [False, False]])
    assert torch.equal(ensemble_probs(primary, [experts[0], None], mask), ensemble_probs(primary, experts, mask))
    mask[1, 1] = True
    with pytest.raises(ValueError, match="specialist 1 is activated"):
        ensemble_probs(primary, [experts[0], None], mask)

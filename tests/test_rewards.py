"""Phase 2 rewards on hand-made cases with known answers, schedules and params validation."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from aegir.config import build
from aegir.data.batch import IGNORE_INDEX
from aegir.errors import ConfigError
from aegir.eval.metrics import f1_scores
from aegir.rl import checks
from aegir.rl.rewards import (
    LambdaConfig,
    LambdaSchedule,
    RewardConfig,
    annotated_columns,
    balance_term,
    clip_epsilon,
    combine,
    r_finish,
    r_parallel,
    r_perf,
    r_perf_columns,
    reinforce_loss,
    routing_degeneracy,
    share_term,
)

I = IGNORE_INDEX  # noqa: E741 (short, as in the tables below)
T = torch.tensor


def cyclic_routing(B: int, S: int, k: int) -> torch.Tensor:
    """Table b activates specialists b, b+1, …, b+k−1 (mod S): equal loads when S divides B."""
    mask = torch.zeros(B, S, dtype=torch.bool)
    for b in range(B):
        for j in range(k):
            mask[b, (b + j) % S] = True
    return mask


def consistent_gates(mask: torch.Tensor) -> torch.Tensor:
    return 0.05 + 0.9 * mask.float()


# ----------------------------------------------------------------------------- r_perf


def test_r_perf_known_answers():
    gold = T([[3, 5, 7, 9]])
    mask = torch.ones(1, 4, dtype=torch.bool)
    none = T([[I, I, I, I]])
    assert r_perf(gold, gold, None, None, mask, "cta").item() == 1.0  # perfect
    assert r_perf(T([[-1, -1, -1, -1]]), gold, None, None, mask, "cta").item() == 0.0  # empty
    assert r_perf(T([[3, 5, 0, 0]]), gold, None, None, mask, "cta").item() == pytest.approx(0.5)  # half right
    # one right, one wrong, two left unannotated: tp 1, fp 1, fn 3 → 2/(2+1+3)
    assert r_perf(T([[3, 0, -1, I]]), gold, None, None, mask, "cta").item() == pytest.approx(2 / 6)
    # a table with no labelled column scores 0 (as the split metric does)
    assert r_perf(gold, none, None, None, mask, "cta").item() == 0.0


def test_r_perf_modes_pool_decisions():
    column_mask = T([[True, True, True, True]])
    cta_gold, cta_pred = T([[1, 2, 3, I]]), T([[1, 2, 0, 4]])  # 2 of 3 scored columns right
    cpa_gold, cpa_pred = T([[I, 7, 8, I]]), T([[5, 7, 0, 2]])  # 1 of 2 scored pairs right
    args = (cta_pred, cta_gold, cpa_pred, cpa_gold, column_mask)
    assert r_perf(*args, mode="cta").item() == pytest.approx(2 / 3)
    assert r_perf(*args, mode="cpa").item() == pytest.approx(1 / 2)
    assert r_perf(*args, mode="both").item() == pytest.approx(3 / 5)
    with pytest.raises(ValueError):
        r_perf(*args, mode="all")


def test_r_perf_ignores_padding_and_credits_columns():
    gold = T([[1, 2, 3]])
    pred = T([[1, 0, 0]])
    column_mask = T([[True, False, False]])  # columns 1, 2 are padding
    assert r_perf(pred, gold, None, None, column_mask, "cta").item() == 1.0
    credit = r_perf_columns(T([[1, 0, -1]]), gold, torch.ones(1, 3, dtype=torch.bool))
    assert credit.correct.tolist() == [[True, False, False]]
    assert credit.predicted.tolist() == [[True, True, False]]
    assert credit.labelled.tolist() == [[True, True, True]]
    with pytest.raises(ValueError):
        r_perf_columns(gold, T([[1, 2]]), column_mask)


def test_r_perf_equals_split_metric_per_table():
    g = torch.Generator().manual_seed(0)
    B, C, K = 40, 6, 5
    gold = torch.randint(0, K, (B, C), generator=g)
    gold[torch.rand(B, C, generator=g) < 0.3] = I
    pred = torch.randint(0, K, (B, C), generator=g)
    pred[torch.rand(B, C, generator=g) < 0.2] = -1
    column_mask = torch.rand(B, C, generator=g) < 0.8
    got = r_perf(pred, gold, None, None, column_mask, "cta")
    for b in range(B):
        scored = [c for c in range(C) if column_mask[b, c]]
        gold_b = [None if gold[b, c] < 0 else int(gold[b, c]) for c in scored]
        pred_b = [None if pred[b, c] < 0 else int(pred[b, c]) for c in scored]
        assert got[b].item() == pytest.approx(f1_scores(gold_b, pred_b).micro_f1), b


def test_annotated_columns():
    column_mask = T([[True, True, True, False]])
    cta = T([[1, -1, 2, 3]])
    cpa = T([[-1, 4, -1, 5]])  # column 0 needs no CPA
    assert annotated_columns(cta, cpa, column_mask, "cta").tolist() == [[True, False, True, False]]
    assert annotated_columns(cta, cpa, column_mask, "cpa").tolist() == [[True, True, False, False]]
    assert annotated_columns(cta, cpa, column_mask, "both").tolist() == [[True, False, False, False]]


# ----------------------------------------------------------------------------- r_parallel


def test_r_parallel_exact_by_hand():
    mask = T([[1, 0, 0, 0], [1, 1, 0, 0]], dtype=torch.bool)
    gate = T([[0.9, 0.1, 0.1, 0.1], [0.9, 0.9, 0.1, 0.1]])
    # a = 0.25, m² = 0.5625. Row 0: F = 0.25 → share 0. Row 1: F = 0.5, G = 0.5 → −0.0625/0.5625.
    # loads (1, .5, 0, 0), mean .375, excess (.625, .125, −.375, −.375); balance row 0: −.625/.75,
    # row 1: −((.625 + .125)/2)/.75 = −.5
    share = torch.tensor([0.0, -1 / 9])
    balance = torch.tensor([-5 / 6, -0.5])
    assert torch.allclose(share_term(mask, gate, 0.25), share, atol=1e-6)
    assert torch.allclose(balance_term(mask), balance, atol=1e-6)
    expected = (share + 0.5 * balance) / 1.5  # (−0.27778, −0.24074)
    assert torch.allclose(r_parallel(mask, gate, 0.25, 0.5), expected, atol=1e-6)


def test_share_term_is_the_hnet_ratio_loss_rescaled():
    g = torch.Generator().manual_seed(1)
    for a in (0.1, 0.25, 0.5, 0.7):
        N = 1 / a
        mask = torch.rand(64, 8, generator=g) < torch.rand(64, 1, generator=g)
        gate = torch.rand(64, 8, generator=g)
        F, G = mask.float().mean(-1), gate.mean(-1)
        ratio_loss = N / (N - 1) * ((N - 1) * F * G + (1 - F) * (1 - G))  # H-Net, as published
        m2 = max(a, 1 - a) ** 2
        expected = -(ratio_loss - 1) * (N - 1) / N**2 / m2
        assert torch.allclose(share_term(mask, gate, a), expected, atol=1e-5)


def test_balance_term_equals_a_loop_over_tables():
    g = torch.Generator().manual_seed(5)
    mask = torch.rand(12, 5, generator=g) < 0.4
    B, S = mask.shape
    load = [sum(bool(mask[b, s]) for b in range(B)) / B for s in range(S)]
    mean_load = sum(load) / S
    expected = []
    for b in range(B):
        chosen = [s for s in range(S) if mask[b, s]]
        excess = sum(load[s] - mean_load for s in chosen) / len(chosen) if chosen else 0.0
        expected.append(-excess / (1 - 1 / S))
    assert torch.allclose(balance_term(mask), torch.tensor(expected), atol=1e-6)


def test_share_term_expectation_under_own_sampling():
    # E over Bernoulli(gates) of the share term = −(G − a)²/m², by enumerating all 2^S routings
    gates = torch.tensor([0.9, 0.6, 0.3, 0.05])
    a = 0.25
    total = 0.0
    for bits in itertools.product([0, 1], repeat=4):
        mask = torch.tensor([bits], dtype=torch.bool)
        p = math.prod(float(g) if b else 1 - float(g) for g, b in zip(gates, bits))
        total += p * share_term(mask, gates[None], a).item()
    G = gates.mean().item()
    assert total == pytest.approx(-((G - a) ** 2) / 0.75**2, abs=1e-6)


def test_r_parallel_ranks_routing_patterns():
    for a in (0.25, 0.5):
        patterns = checks.routing_patterns(16, 4, a, torch.Generator().manual_seed(0))
        value = {name: r_parallel(p.activation_mask, p.gate_prob, a).mean().item() for name, p in patterns.items()}
        assert value["balanced"] == pytest.approx(0.0, abs=1e-6)
        for other in ("always_on", "always_off", "unbalanced"):
            assert value["balanced"] > value[other] + 0.05, (a, other, value)
    # always-on with 0.95 gates at a = .25: share −(.75)(.7)/.5625, balance 0 → /1.5
    patterns = checks.routing_patterns(16, 4, 0.25, torch.Generator().manual_seed(0))
    on, unb = patterns["always_on"], patterns["unbalanced"]
    assert r_parallel(on.activation_mask, on.gate_prob, 0.25).mean().item() == pytest.approx(-0.9333333 / 1.5, abs=1e-5)
    # one specialist takes all at the target share: share 0, balance −1 → −0.5/1.5
    assert r_parallel(unb.activation_mask, unb.gate_prob, 0.25).mean().item() == pytest.approx(-1 / 3, abs=1e-6)


def test_r_parallel_peaks_at_target_and_does_not_pay_for_activations():
    # S = 8, a = 0.25 → target k = 2 per table; loads equal for every k (cyclic routing)
    values = []
    for k in range(0, 9):
        mask = cyclic_routing(8, 8, k)
        values.append(r_parallel(mask, consistent_gates(mask), 0.25).mean().item())
    assert values[0] < values[1] < values[2]  # rises toward the target
    assert all(later < earlier for earlier, later in zip(values[2:], values[3:]))  # falls above it
    # gates held fixed above the target: every extra activation lowers the reward
    gate = torch.full((1, 8), 0.6)
    shares = [share_term(cyclic_routing(1, 8, k), gate, 0.25).item() for k in range(2, 9)]
    assert all(b < a for a, b in zip(shares, shares[1:]))
    # a balanced batch gains nothing from the balance term by adding an activation
    base = cyclic_routing(8, 8, 2)
    more = base.clone()
    more[0, 5] = True
    assert balance_term(more)[0] < balance_term(base)[0] == 0.0


def test_r_parallel_bounded():
    g = torch.Generator().manual_seed(2)
    for a in (0.1, 0.25, 0.5, 0.9):
        mask = torch.rand(256, 6, generator=g) < torch.rand(256, 1, generator=g)
        gate = torch.rand(256, 6, generator=g)
        assert checks.check_range(r_parallel(mask, gate, a, 1.0), -1.0, 1.0)["ok"]
    on = torch.ones(4, 4, dtype=torch.bool)
    assert share_term(on, torch.ones(4, 4), 0.25).tolist() == [-1.0] * 4  # the lower bound is reached
    with pytest.raises(ValueError):
        r_parallel(on, torch.ones(4, 3), 0.25)
    with pytest.raises(ValueError):
        r_parallel(on, torch.ones(4, 4), 1.0)


# ----------------------------------------------------------------------------- r_finish


def test_r_finish_falls_as_columns_are_dropped():
    column_mask = T([[True, True, True, True, False]])
    routing = cyclic_routing(4, 4, 1)  # varies with the input: no degeneracy
    values = []
    for kept in range(4, -1, -1):
        annotated = torch.zeros(1, 5, dtype=torch.bool)
        annotated[0, :kept] = True
        annotated[0, 4] = True  # a padding column never counts
        values.append(r_finish(annotated.expand(4, 5), column_mask.expand(4, 5), routing)[0].item())
    assert values == pytest.approx([1.0, 0.75, 0.5, 0.25, 0.0])


def test_r_finish_penalises_each_degenerate_routing():
    columns = torch.ones(4, 3, dtype=torch.bool)
    p = 0.5
    good = r_finish(columns, columns, cyclic_routing(4, 4, 1), p)
    assert good.tolist() == [1.0] * 4
    identical = T([[1, 0, 1, 0]] * 4, dtype=torch.bool)
    for name, routing in (("on", torch.ones(4, 4, dtype=torch.bool)),
                          ("off", torch.zeros(4, 4, dtype=torch.bool)),
                          ("identical", identical)):
        assert r_finish(columns, columns, routing, p).tolist() == [1.0 - p] * 4, name
    partial = cyclic_routing(4, 4, 1)
    partial[:, 3] = True  # specialist 3 always on, the others vary: 1/4 degenerate
    assert routing_degeneracy(partial).item() == 0.25
    assert r_finish(columns, columns, partial, p)[0].item() == pytest.approx(1 - p / 4)
    # one table: only all-on / all-off count
    assert routing_degeneracy(T([[1, 0, 0, 1]], dtype=torch.bool)).item() == 0.0
    assert routing_degeneracy(T([[1, 1, 1, 1]], dtype=torch.bool)).item() == 1.0
    # a table with no column has nothing left undone
    none = torch.zeros(1, 3, dtype=torch.bool)
    assert r_finish(none, none, T([[1, 0]], dtype=torch.bool), p).item() == 1.0


# ----------------------------------------------------------------------------- combine, loss


def test_combine():
    perf, par, fin = T([0.5, 1.0]), T([-1.0, 0.0]), T([1.0, 0.5])
    assert combine(perf, par, fin, 0.3, 0.1).tolist() == pytest.approx([0.5 - 0.3 + 0.1, 1.0 + 0.05])


def test_reinforce_loss_value_and_gradient():
    logp = torch.tensor([-1.0, -2.0, -0.5], requires_grad=True)
    reward = torch.tensor([1.0, 0.0, 2.0])  # mean 1 → advantages (0, −1, 1)
    loss = reinforce_loss(logp, reward)
    assert loss.item() == pytest.approx(-(0 * -1.0 + -1 * -2.0 + 1 * -0.5) / 3)
    loss.backward()
    assert logp.grad.tolist() == pytest.approx([0.0, 1 / 3, -1 / 3])
    assert reinforce_loss(logp, reward, "none").item() == pytest.approx(-(-1.0 + 0 - 1.0) / 3)
    with pytest.raises(ValueError):
        reinforce_loss(logp, reward[:2])


# ----------------------------------------------------------------------------- schedules


def test_lambda_schedule_at_boundaries_stepped():
    s = LambdaSchedule(LambdaConfig(transition=0.0))
    eps = 1e-9
    assert s.at(0.0) == (0.3, 0.1)
    assert s.at(0.3 - eps) == (0.3, 0.1)
    assert s.at(0.3) == (0.1, 0.3)
    assert s.at(0.3 + eps) == (0.1, 0.3)
    assert s.at(0.7 - eps) == (0.1, 0.3)
    assert s.at(0.7 + eps) == (0.05, 0.05)
    assert s.at(1.0) == (0.05, 0.05)


def test_lambda_schedule_smooth_blend():
    s = LambdaSchedule(LambdaConfig())  # transition 0.05 after each boundary
    assert s.at(0.0) == (0.3, 0.1)
    assert s.at(0.3 - 1e-9) == (0.3, 0.1)  # the earlier phase holds up to the boundary
    assert s.at(0.3) == pytest.approx((0.3, 0.1))
    assert s.at(0.325) == pytest.approx((0.2, 0.2))  # halfway through the blend
    assert s.at(0.35) == pytest.approx((0.1, 0.3))
    assert s.at(0.725) == pytest.approx((0.075, 0.175))
    assert s.at(1.0) == (0.05, 0.05)
    grid = [s.at(i / 1000) for i in range(1001)]
    jumps = max(abs(a[j] - b[j]) for a, b in zip(grid, grid[1:]) for j in (0, 1))
    # the largest change between phases is 0.25 (λ2: 0.3 → 0.05); a 0.05-wide blend spreads it
    # over 50 slices of 1/1000, whereas a step would jump 0.25 at once
    assert jumps <= 0.25 / 50 + 1e-9
    with pytest.raises(ValueError):
        s.at(1.01)


def test_clip_epsilon_linear():
    assert clip_epsilon(0.0) == pytest.approx(0.2)
    assert clip_epsilon(0.5) == pytest.approx(0.15)
    assert clip_epsilon(1.0) == pytest.approx(0.1)
    with pytest.raises(ValueError):
        clip_epsilon(-0.1)


@pytest.mark.parametrize("kwargs, key", [
    ({"early": -0.1}, "lambda.early"),
    ({"finish_late": -1.0}, "lambda.finish_late"),
    ({"mid_start": 0.0}, "lambda.mid_start"),
    ({"mid_start": 0.8, "late_start": 0.7}, "lambda.mid_start"),
    ({"late_start": 1.0}, "lambda.late_start"),
    ({"transition": 0.5}, "lambda.transition"),
    ({"transition": -0.1}, "lambda.transition"),
])
def test_lambda_config_errors_name_the_key(kwargs, key):
    with pytest.raises(ConfigError, match=rf"^{key}:"):
        LambdaConfig(**kwargs)


@pytest.mark.parametrize("kwargs, key", [
    ({"target_share": 0.0}, "rewards.target_share"),
    ({"target_share": 1.0}, "rewards.target_share"),
    ({"balance_weight": -1.0}, "rewards.balance_weight"),
    ({"degenerate_penalty": 1.5}, "rewards.degenerate_penalty"),
    ({"perf_mode": "all"}, "rewards.perf_mode"),
])
def test_reward_config_errors_name_the_key(kwargs, key):
    with pytest.raises(ConfigError, match=rf"^{key}:"):
        RewardConfig(**kwargs)


def test_configs_load_through_the_params_loader():
    assert build(LambdaConfig, {"early": 0.2, "mid_start": 0.4}, "lambda").early == 0.2
    assert build(RewardConfig, {"perf_mode": "cta", "target_share": 0.5}, "rewards").perf_mode == "cta"
    with pytest.raises(ConfigError, match=r"^lambda.early: expected a number"):
        build(LambdaConfig, {"early": "high"}, "lambda")
    with pytest.raises(ConfigError, match=r"^rewards.perf_mode: expected one of"):
        build(RewardConfig, {"perf_mode": "all"}, "rewards")


# ----------------------------------------------------------------------------- checks


def test_corruption_curve_falls_from_perfect_to_zero():
    g = torch.Generator().manual_seed(3)
    B, C = 32, 5
    cta = torch.randint(0, 82, (B, C), generator=g)
    cpa = torch.randint(0, 108, (B, C), generator=g)
    cpa[:, 0] = I
    mask = torch.ones(B, C, dtype=torch.bool)
    out = checks.corruption_curve(cta, cta, cpa, cpa, mask, [0.0, 0.25, 0.5, 1.0], 82, 108, g)
    assert out["r_perf_mean"][0] == 1.0 and out["r_perf_mean"][-1] == 0.0
    assert out["non_increasing"] and out["r_perf_mean"][1] > out["r_perf_mean"][2]


def test_dropped_columns_curve_and_pattern_verdict():
    g = torch.Generator().manual_seed(4)
    columns = torch.ones(8, 6, dtype=torch.bool)
    out = checks.dropped_columns_curve(columns, columns, cyclic_routing(8, 4, 1), [0.0, 0.5, 1.0], g)
    assert out["r_finish_mean"][0] == 1.0 and out["r_finish_mean"][-1] == 0.0 and out["non_increasing"]
    verdict = checks.pattern_rewards(checks.routing_patterns(8, 4, 0.25, g), 0.25)
    assert verdict["balanced_is_best"]
    assert verdict["always_on"]["degeneracy"] == 1.0 and verdict["balanced"]["degeneracy"] == 0.0


def test_check_range_and_suggest_lambdas():
    assert checks.check_range(T([0.0, 0.5, 1.0]), 0.0, 1.0)["ok"]
    assert not checks.check_range(T([0.0, 1.5]), 0.0, 1.0)["ok"]
    assert not checks.check_range(T([0.0, float("nan")]), 0.0, 1.0)["finite"]
    stats = checks.spread_stats({"r_perf": T([0.0, 1.0]), "r_parallel": T([0.0, 0.1]), "r_finish": T([0.5, 0.5])})
    suggested = checks.suggest_lambdas(stats)
    # std(r_parallel) is a tenth of std(r_perf) → λ1 = 10 × the fraction, capped at 10
    assert suggested["early"] == pytest.approx(3.0) and suggested["mid"] == pytest.approx(1.0)
    assert suggested["late"] == pytest.approx(0.5)
    assert suggested["finish_mid"] == 10.0 and suggested["degenerate"] == ["r_finish"]

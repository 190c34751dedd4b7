"""Stage `phase2` end to end on tiny checkpoints and hand-made prepared data.

The fixture: a `valid` split of Hotel and Book tables written the way `prepare` writes it and
three random tiny models whose heads lean toward labels of one domain each (the primary toward
Hotel/name and postalCode, the "hotel" specialist, more strongly, toward telephone, the "book"
one toward Person/name and author). Untrained tiny models annotate nearly nothing right, so
without that lean r_perf would be 0 everywhere and would not depend on routing; with it,
routing a table to the specialist of its domain pays, as it would for domain specialists
trained in Phase 1, and training them here would cost tens of seconds.
"""

from __future__ import annotations

import json
import random
import runpy
import sys
from pathlib import Path

import pytest
import torch
import yaml

from aegir.config import load_params, parse_params
from aegir.data.dataset import load_examples
from aegir.data.prepare import tables_to_arrow, write_parquet
from aegir.data.table import Table
from aegir.errors import AegirError, ConfigError
from aegir.labels import cpa_vocab, cta_vocab
from aegir.model.checkpoint import save_checkpoint
from aegir.model.network import PRESETS, AegirModel, preset
from aegir.orchestrator import ensemble
from aegir.rl import checks, reward_study, routed_rewards

PHASE2 = {"batches": 2, "batch_size": 4, "rollouts": 8, "ascent_steps": 12, "ascent_lr": 0.2,
          "corruption_levels": [0.0, 0.25, 0.5, 1.0]}


def tiny_params(**phase2_overrides) -> dict:
    return {
        "presets": {"tiny": dict(PRESETS["tiny"])},
        "primary": {"preset": "tiny"},
        "specialists": {"hotel": {"preset": "tiny", "domains": ["Hotel"]},
                        "book": {"preset": "tiny", "domains": ["Book"], "seed": 2}},
        "phase2": {**PHASE2, **phase2_overrides},
    }


def hand_tables(n: int, seed: int) -> list[Table]:
    rng = random.Random(seed)
    tables = []
    for i in range(n):
        rows = rng.randint(3, 5)
        if i % 2 == 0:
            columns = ([f"Hotel {rng.choice('ABCDEFG')}{rng.randint(1, 99)}" for _ in range(rows)],
                       [f"+1 555 {rng.randint(1000, 9999)}" for _ in range(rows)],
                       [f"{rng.randint(10000, 99999)}" for _ in range(rows)])
            cta, cpa = ("Hotel/name", "telephone", "postalCode"), (None, "telephone", "postalCode")
            domain = "Hotel"
        else:
            columns = ([f"The {rng.choice(['Red', 'Blue', 'Old'])} Book {rng.randint(1, 99)}" for _ in range(rows)],
                       [f"{rng.choice(['Ann', 'Bo', 'Cy'])} {rng.choice(['Smith', 'Lee'])}" for _ in range(rows)],
                       [f"20{rng.randint(10, 24)}-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}" for _ in range(rows)])
            cta, cpa = ("Book/name", "Person/name", "Date"), (None, "author", "datePublished")
            domain = "Book"
        tables.append(Table(f"t{seed}_{i}", tuple(tuple(c) for c in columns), cta, cpa, domain))
    return tables


def tiny_model(seed: int, cta_label: str, cpa_label: str, bias: float) -> AegirModel:
    """A random tiny model whose heads lean (by `bias` logits) toward one CTA and one CPA label."""
    torch.manual_seed(seed)
    model = AegirModel(preset("tiny", n_cta=len(cta_vocab()), n_cpa=len(cpa_vocab())))
    with torch.no_grad():
        model.cta_head.bias[cta_vocab().index[cta_label]] += bias
        model.cpa_head[-1].bias[cpa_vocab().index[cpa_label]] += bias
    return model


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    # tiny tensors: a second thread only adds contention on a busy 2-core machine
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("phase2")
    params = parse_params(tiny_params())
    (root / "data").mkdir()
    write_parquet(tables_to_arrow(hand_tables(10, seed=1), "valid", params.prepare), root / "data" / "valid.parquet")
    # the primary is right on some Hotel columns (so corrupting its predictions costs); each
    # specialist is surer, and right on other columns of its own domain
    save_checkpoint(root / "models" / "primary", tiny_model(0, "Hotel/name", "postalCode", 4.0), {"agent": "primary"})
    save_checkpoint(root / "models" / "hotel", tiny_model(1, "telephone", "telephone", 8.0), {"agent": "hotel"})
    save_checkpoint(root / "models" / "book", tiny_model(2, "Person/name", "author", 8.0), {"agent": "book"})
    (root / "params.yaml").write_text(yaml.safe_dump(tiny_params()))
    return root


def run_stage(root: Path, out: str) -> tuple[int, dict]:
    """`python -m aegir.stages.phase2` run in this process, so that a test's monkeypatch reaches it."""
    argv = ["phase2", "--params", str(root / "params.yaml"), "--data", str(root / "data"),
            "--models", str(root / "models"), "--out", str(root / out)]
    with pytest.MonkeyPatch.context() as patch, pytest.raises(SystemExit) as exited:
        patch.setattr(sys, "argv", argv)
        runpy.run_module("aegir.stages.phase2", run_name="__main__")
    return exited.value.code, json.loads((root / out / "report.json").read_text())


@pytest.fixture(scope="module")
def first_run(setup) -> tuple[int, dict]:
    return run_stage(setup, "run1")


def test_stage_passes_every_check_and_is_deterministic(setup, first_run):
    code, report = first_run
    failed = {name: result for name, result in report["checks"].items() if not result["ok"]}
    assert code == 0 and report["passed"] and not failed, failed
    assert report["setup"]["num_specialists"] == 2 and report["setup"]["tables"] == 8
    c = report["checks"]
    # the known answers on real batches
    assert c["r_perf.corruption_gold"]["r_perf_mean"][0] == 1.0 and c["r_perf.corruption_gold"]["end"] == 0.0
    model = c["r_perf.corruption_model"]
    assert model["start"] == report["setup"]["primary_r_perf_mean"] > 0.0 and model["end"] == 0.0
    assert c["r_finish.dropped_columns"]["start"] == 1.0 and c["r_finish.dropped_columns"]["end"] == 0.0
    assert c["r_perf.ascent"]["best_routing_per_table"] > c["r_perf.ascent"]["primary_only"]
    assert c["r_parallel.ascent_from_on"]["end_rate"] < c["r_parallel.ascent_from_on"]["start_rate"]
    # the configured λ appear in the report: early phase at progress 0, late at 1
    schedule = report["lambda"]["schedule"]
    assert schedule["p000"]["lambda1"] == 0.3 and schedule["p100"]["lambda1"] == 0.05
    assert set(report["lambda"]["suggested"]) >= {"early", "mid", "late", "finish_early"}
    for name in ("corruption", "routing", "ascent"):
        assert (setup / "run1" / "plots" / f"{name}.png").stat().st_size > 1000
        assert (setup / "run1" / "plots" / f"{name}.csv").read_text().count("\n") >= 3

    code, _ = run_stage(setup, "run2")
    assert code == 0
    for name in ("report.json", "plots/corruption.csv", "plots/routing.csv", "plots/ascent.csv"):
        assert (setup / "run1" / name).read_bytes() == (setup / "run2" / name).read_bytes(), name


def test_lambda_changes_reach_the_report(setup, first_run, tmp_path):
    raw = tiny_params()
    raw["lambda"] = {"early": 0.2}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    params = load_params(tmp_path / "params.yaml")
    primary, specialists = reward_study.load_agents(params, setup / "models")
    changed = reward_study.run(params, primary, specialists, load_examples(setup / "data", "valid"))
    original = first_run[1]
    assert changed["lambda"]["schedule"]["p000"]["lambda1"] == 0.2
    assert changed["lambda"]["schedule"]["p000"]["reward_mean"] != original["lambda"]["schedule"]["p000"]["reward_mean"]
    assert changed["lambda"]["schedule"]["p050"] == original["lambda"]["schedule"]["p050"]  # mid phase untouched
    assert changed["lambda"]["suggested"]["early"] != original["lambda"]["suggested"]["early"]
    assert changed["checks"] == original["checks"]  # λ weighs the components; it changes no check


def test_a_reward_that_pays_for_activations_fails_the_stage(setup, monkeypatch, capsys):
    def pays_for_activations(activation_mask, gate_prob, target_share, balance_weight=0.5):
        return activation_mask.float().mean(-1)  # in range, finite, and exactly what the design forbids

    monkeypatch.setattr(routed_rewards, "r_parallel", pays_for_activations)
    monkeypatch.setattr(checks, "r_parallel", pays_for_activations)
    code, report = run_stage(setup, "broken")
    assert code == 1 and not report["passed"]
    assert "r_parallel.patterns" in report["failed"] and "r_parallel.ascent_from_on" in report["failed"]
    assert all(name.startswith("r_parallel.") for name in report["failed"]), report["failed"]
    assert "r_parallel.patterns" in capsys.readouterr().err


def test_config_errors_name_the_key():
    for bad, key in (({"batch_size": 1}, "phase2.batch_size"), ({"rollouts": 1}, "phase2.rollouts"),
                     ({"corruption_levels": [0.5, 0.2]}, "phase2.corruption_levels"),
                     ({"confidence": 1.0}, "phase2.confidence"), ({"bogus": 1}, "phase2.bogus")):
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            parse_params(tiny_params(**bad))


def test_missing_specialists_and_small_split_are_clear_errors(setup, tmp_path):
    raw = tiny_params()
    raw["specialists"] = {}
    with pytest.raises(ConfigError, match="at least one specialist"):
        reward_study.load_agents(parse_params(raw), setup / "models")
    params = parse_params(tiny_params(batch_size=64))
    primary, specialists = reward_study.load_agents(params, setup / "models")
    with pytest.raises(AegirError, match="batch_size"):
        reward_study.run(params, primary, specialists, load_examples(setup / "data", "valid"))



# ----------------------------------------------------------------------------- the pieces


def test_routed_annotation_equals_a_loop_over_tables():
    g = torch.Generator().manual_seed(0)
    A, B, C, K = 4, 5, 3, 7  # primary + 3 specialists
    probs = torch.rand(A, B, C, K, generator=g).softmax(-1)
    table = ensemble.routed_argmax(probs)  # (2^S, B, C)
    annotations = routed_rewards.BatchAnnotations(column_mask=torch.ones(B, C, dtype=torch.bool), cta_gold=None,
                                                  cpa_gold=None, features=None, routed_cta=table, routed_cpa=table)
    assert annotations.num_specialists == 3
    for _ in range(10):
        mask = torch.rand(B, A - 1, generator=g) < 0.5
        cta, _ = annotations.routed_predictions(mask)
        for b in range(B):
            agents = [0] + [1 + s for s in range(A - 1) if mask[b, s]]
            reference = torch.stack([probs[a, b] for a in agents]).mean(0).argmax(-1)  # (C,)
            assert torch.equal(cta[b], reference)
    assert torch.equal(table[0], probs[0].argmax(-1))  # no specialist: the primary alone


def test_expected_value_equals_the_sum_over_routings():
    g = torch.Generator().manual_seed(1)
    N, S = 4, 3
    table = torch.rand(N, 2**S, generator=g)
    scores = torch.rand(N, S, generator=g)
    total = 0.0
    for n in range(N):
        for j, routing in enumerate(ensemble.all_routings(S).tolist()):
            prob = 1.0
            for s, on in enumerate(routing):
                prob *= float(scores[n, s]) if on else 1.0 - float(scores[n, s])
            total += prob * float(table[n, j])
    assert routed_rewards.expected_value(table, scores) == pytest.approx(total / N, abs=1e-9)
    assert ensemble.routing_index(ensemble.all_routings(S)).tolist() == list(range(2**S))


def test_group_baseline_gives_zero_gradient_to_a_reward_that_ignores_routing():
    g = torch.Generator().manual_seed(2)
    h = torch.randn(8, 6, generator=g)
    router = routed_rewards.seeded_router(6, 3, 0.5, g)
    per_table = torch.rand(8, generator=g)  # differs per table, whatever the routing
    ignores = checks.policy_gradient_norm(router, h, lambda m, p: per_table, g, rollouts=4)
    assert ignores["finite"] and ignores["grad_norm"] == 0.0
    # one rollout with a batch-mean baseline turns the per-table differences into noise gradient
    assert checks.policy_gradient_norm(router, h, lambda m, p: per_table, g)["grad_norm"] > 0.0
    counts = checks.policy_gradient_norm(router, h, lambda m, p: m.float().mean(-1), g, rollouts=4)
    assert counts["nonzero"] and counts["finite"]


def test_gradient_check_asks_for_a_signal_somewhere_in_the_ascent():
    """A sampled gradient can be exactly zero at one step by chance (every rollout of the few
    tables whose reward depends on the routing scoring alike); the check fails only when it is
    zero at every step, or not finite at any."""
    assert reward_study._gradient_check({"grad_norm": [0.0, 0.0, 0.3], "grad_finite": True})["ok"]
    assert reward_study._gradient_check({"grad_norm": [0.0, 0.0, 0.3], "grad_finite": True})["grad_norm"] == 0.0
    assert not reward_study._gradient_check({"grad_norm": [0.0, 0.0, 0.0], "grad_finite": True})["ok"]
    assert not reward_study._gradient_check({"grad_norm": [0.2, float("nan")], "grad_finite": True})["ok"]
    assert not reward_study._gradient_check({"grad_norm": [0.2, 0.1], "grad_finite": False})["ok"]
    g = torch.Generator().manual_seed(3)
    h = torch.randn(8, 6, generator=g)
    per_table = torch.rand(8, generator=g)
    ignores = checks.router_ascent(h, lambda m, p: per_table, num_specialists=3, steps=5, lr=0.1,
                                   generator=g, init_bias=0.0, rollouts=4)
    assert not reward_study._gradient_check(ignores)["ok"]  # a reward the routing cannot move: zero throughout
    def one_table(m, p):
        return torch.where(torch.arange(8) == 0, m[:, 0].float(), torch.zeros(8))

    moves = checks.router_ascent(h, one_table, num_specialists=3, steps=5, lr=0.1, generator=g, init_bias=0.0,
                                 rollouts=4)
    assert reward_study._gradient_check(moves)["ok"]


@pytest.mark.parametrize("S", [1, 2, 3])
def test_routing_patterns_rank_when_the_target_is_not_a_whole_number_of_specialists(S):
    a, B = 0.25, 12  # a·S = 0.25, 0.5, 0.75: no table can activate exactly a·S specialists
    patterns = checks.routing_patterns(B, S, a, torch.Generator().manual_seed(3))
    assert ("unbalanced" in patterns) == (S > 1)
    for name in ("balanced", "unbalanced")[: 1 + (S > 1)]:
        assert torch.allclose(patterns[name].gate_prob.mean(-1), torch.full((B,), a))  # gates at the target
    verdict = checks.pattern_rewards(patterns, a)
    assert verdict["balanced_is_best"], verdict


def test_confidence_must_bracket_the_target_share(setup):
    raw = tiny_params(confidence=0.7)
    raw["rewards"] = {"target_share": 0.2}  # always-off gates of 0.3 would be above the target
    params = parse_params(raw)
    primary, specialists = reward_study.load_agents(params, setup / "models")
    with pytest.raises(ConfigError, match=r"phase2\.confidence"):
        reward_study.run(params, primary, specialists, [])

"""Phase 3's swarm parts: frozen specialists, alignment, masked fusion, the orchestrator,
budget caps, critical steps and orchestrator checkpoints (tiny models, by hand)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from aegir.model.checkpoint import CheckpointError, save_checkpoint
from aegir.model.network import AegirModel, preset
from aegir.model.rwkv import LayerState
from aegir.orchestrator.checkpoint import (
    is_orchestrator_checkpoint,
    load_orchestrator,
    save_orchestrator,
)
from aegir.orchestrator.critical import (
    Stage,
    critical_steps,
    longest_path,
    orchestrator_steps,
    stage_graph,
    total_steps,
)
from aegir.orchestrator.fusion import RWKVStateFusion, state_survival
from aegir.orchestrator.model import build_orchestrator, fused_state_one_at_a_time
from aegir.orchestrator.router import RouterDecision, cap_decision
from aegir.orchestrator.specialist import AlignmentProjection, FrozenSpecialist
from aegir.rl.rewards import budget_cap
from test_model import TABLES, make_batch

pytestmark = pytest.mark.usefixtures("one_torch_thread")

MORE_TABLES = TABLES + [
    [["Cafe Luitpold", "Zum Goldenen Hirschen", "Noma"], ["+49 89 242 8750", "+43 1 533 37 6"], ["$$", "$$$"]],
    [["Berlin Marathon"], ["2024-09-29"], ["2024-09-29"], ["Berlin"]],
]


def trained_like(model: AegirModel, seed: int) -> AegirModel:
    """A model with every parameter nudged off its init (zero-initialised output projections make
    a fresh model's state invisible to its outputs; a trained one's is not)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    return model


def tiny(seed: int, **overrides) -> AegirModel:
    torch.manual_seed(seed)
    return trained_like(AegirModel(preset("tiny", **overrides)), seed + 100)


def orchestrator(threshold: float = 0.5, stream_seam: bool = False):
    primary = tiny(0)
    specialists = {"same": tiny(1), "wide": tiny(2, d_model=48, head_size=16), "deep": tiny(3, main_layers=2)}
    return build_orchestrator(primary, specialists, threshold, stream_seam=stream_seam), primary


def open_gates(orch, seed: int = 0) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        orch.fusion.wkv_gate.copy_(torch.randn(orch.fusion.wkv_gate.shape, generator=g))
        orch.fusion.shift_gate.copy_(torch.randn(orch.fusion.shift_gate.shape, generator=g))
        if orch.stream_seam:
            orch.fusion.stream_gate.copy_(torch.randn(orch.fusion.stream_gate.shape, generator=g))


def random_states(B: int, layers: int, heads: int, K: int, seed: int) -> list[LayerState]:
    g = torch.Generator().manual_seed(seed)
    return [LayerState(torch.randn(B, heads, K, K, generator=g), torch.randn(B, heads * K, generator=g),
                       torch.randn(B, heads * K, generator=g)) for _ in range(layers)]


# ----------------------------------------------------------------------------- parts


def test_layer_state_scatter_inverts_select():
    state = random_states(5, 1, 2, 4, seed=0)[0]
    rows = torch.tensor([0, 3])
    placed = state.select(rows).scatter(rows, 5)
    for field in ("wkv", "shift_time", "shift_channel"):
        full = getattr(placed, field)
        assert torch.equal(full[rows], getattr(state, field)[rows])
        assert torch.count_nonzero(full[torch.tensor([1, 2, 4])]) == 0


def test_frozen_specialist_reads_states_without_gradients():
    model = tiny(1)
    specialist = FrozenSpecialist(model, "s")
    specialist.train()  # a parent switching to training must not unfreeze it
    assert not specialist.model.training
    assert all(not p.requires_grad for p in specialist.parameters())
    batch = make_batch(TABLES)
    read = specialist(batch)
    states = read.states
    assert read.stream is None  # the stream seam is off: no decoder runs
    assert len(states) == model.config.main_layers
    assert states[0].wkv.shape == (2, 2, 16, 16) and not states[0].wkv.requires_grad
    assert states[0].shift_time.shape == (2, 32)
    # the same states as the model's own main network gives inside a full forward
    assert torch.allclose(states[0].wkv, model(batch).main_final_state[0].wkv, atol=1e-6)
    # reading only row 1 leaves row 0 zero
    part = specialist.read(batch, torch.tensor([1])).states
    assert torch.count_nonzero(part[0].wkv[0]) == 0
    assert torch.allclose(part[0].wkv[1], states[0].wkv[1], atol=1e-6)
    # with the stream seam the read also holds the decoder's output per byte: the one the model's
    # own pooling reads, zero on rows that did not run
    streaming = FrozenSpecialist(model, "s", stream=True)
    part = streaming.read(batch, torch.tensor([1]))
    encoded = model.encode(batch)
    own, _ = model.byte_stream(batch, encoded)
    assert part.stream.shape == own.shape and not part.stream.requires_grad
    assert torch.count_nonzero(part.stream[0]) == 0
    length = int(batch.byte_mask[1].sum())
    assert torch.allclose(part.stream[1, :length], own[1, :length], atol=1e-5)


def test_alignment_is_the_identity_where_shapes_agree():
    align = AlignmentProjection(2, 16, 1, 2, 16, 1)
    states = random_states(3, 1, 2, 16, seed=1)
    out = align(states)
    for field in ("wkv", "shift_time", "shift_channel"):
        assert torch.equal(getattr(out[0], field), getattr(states[0], field))


def test_alignment_maps_other_shapes_per_head_with_small_factors():
    align = AlignmentProjection(source_heads=3, source_head_size=16, source_layers=2,
                                target_heads=2, target_head_size=32, target_layers=1)
    out = align(random_states(4, 2, 3, 16, seed=2))
    assert len(out) == 1 and out[0].wkv.shape == (4, 2, 32, 32) and out[0].shift_time.shape == (4, 64)
    largest = max(p.numel() for p in align.parameters())
    assert largest < (2 * 32 * 32) ** 2 // 100  # never a flattened (HKK × H_sK_sK_s) matrix
    assert align.key_proj.shape == (1, 2, 32, 16) and align.head_mix.shape == (1, 2, 3)
    # S' = A · (Σ_g M S_g) · Bᵀ per head, checked against a literal computation
    with torch.no_grad():
        for p in align.parameters():
            p.normal_()
    states = random_states(4, 2, 3, 16, seed=3)
    got = align(states)[0].wkv
    s = states[0].wkv
    for h in range(2):
        mixed = sum(align.head_mix[0, h, g] * s[:, g] for g in range(3))
        want = align.key_proj[0, h] @ mixed @ align.value_proj[0, h].T
        assert torch.allclose(got[:, h], want, atol=1e-4)


def test_masked_fusion_is_exact():
    fusion = RWKVStateFusion(num_heads=2, head_size=4, num_agents=3, num_layers=2)
    with torch.no_grad():
        fusion.wkv_gate.normal_()
        fusion.shift_gate.normal_()
    aligned = [random_states(4, 2, 2, 4, seed=s) for s in range(3)]
    aligned[2][0].wkv[1] = float("nan")  # a row that did not run may hold anything
    mask = torch.tensor([[1, 0, 0], [1, 1, 0], [0, 0, 0], [0, 1, 1]], dtype=torch.bool)
    fused = fusion(aligned, mask)
    for b in range(4):
        for layer in range(2):
            want = torch.zeros(2, 4, 4)
            for s in range(3):
                if mask[b, s]:
                    want = want + fusion.wkv_gate[s, layer][:, None, None] * aligned[s][layer].wkv[b]
            assert torch.equal(fused[layer].wkv[b], want), (b, layer)  # exactly: not approximately
    assert torch.count_nonzero(fused[0].wkv[2]) == 0 and torch.count_nonzero(fused[1].shift_time[2]) == 0
    assert torch.isfinite(fused[0].wkv[1]).all()
    # gates start at zero: whatever the states and the mask, the fused state is zero
    assert all(torch.count_nonzero(s.wkv) == 0 for s in RWKVStateFusion(2, 4, 3, 2)(aligned[:2] + [aligned[0]], mask))


def test_orchestrator_without_routing_is_exactly_phase1():
    orch, primary = orchestrator()
    open_gates(orch)
    batch = make_batch(MORE_TABLES)
    alone = orch(batch)
    reference = primary(batch)
    assert alone.activation_mask is None and alone.main_initial_state is None
    assert torch.equal(alone.output.cta_logits, reference.cta_logits)
    assert torch.equal(alone.output.cpa_logits, reference.cpa_logits)
    # routed, with every gate closed (the untrained fusion): still exactly Phase 1
    fresh, primary = orchestrator()
    encoded = fresh.encode(batch)
    routed = fresh(batch, fresh.routing_hidden(batch, encoded), encoded=encoded,
                   decision=_decision(torch.ones(4, 3, dtype=torch.bool)))
    assert torch.equal(routed.output.cta_logits, primary(batch).cta_logits)


def _decision(mask: torch.Tensor) -> RouterDecision:
    return RouterDecision(scores=mask.float().clamp(0.1, 0.9), activation_mask=mask,
                          log_prob=torch.zeros(mask.shape))


def test_open_gates_change_the_output_and_only_for_activated_rows():
    orch, primary = orchestrator()
    open_gates(orch)
    batch = make_batch(MORE_TABLES)
    encoded = orch.encode(batch)
    mask = torch.tensor([[1, 0, 0], [0, 0, 0], [0, 1, 1], [0, 0, 0]], dtype=torch.bool)
    out = orch(batch, orch.routing_hidden(batch, encoded), encoded=encoded, decision=_decision(mask))
    reference = primary(batch).cta_logits
    changed = (out.output.cta_logits - reference).abs().flatten(1).amax(1)
    assert changed[0] > 1e-4 and changed[2] > 1e-4
    assert changed[1] == 0 and changed[3] == 0
    assert set(out.specialist_outputs) == {"same", "wide", "deep"}
    assert out.specialist_outputs["wide"].states[0].wkv.shape == (4, 3, 16, 16)  # its own shape
    assert {"prefix", "fusion", "rest", "specialist/same"} <= set(out.seconds)


def test_batched_specialists_equal_one_at_a_time():
    orch, _ = orchestrator()
    open_gates(orch, seed=4)
    batch = make_batch(MORE_TABLES)  # rows of different lengths: padding in the batched read
    mask = torch.tensor([[1, 1, 0], [0, 1, 1], [1, 0, 1], [1, 1, 1]], dtype=torch.bool)
    with torch.no_grad():
        batched = orch.fuse(orch.read_specialists(batch, mask), mask)
    reference = fused_state_one_at_a_time(orch, batch, mask)
    for a, b in zip(batched, reference):
        for field in ("wkv", "shift_time", "shift_channel"):
            x, y = getattr(a, field), getattr(b, field)
            assert torch.allclose(x, y, rtol=1e-4, atol=1e-5), (field, float((x - y).abs().max()))


def test_stream_seam_closed_is_phase1_and_open_changes_only_activated_rows():
    batch = make_batch(MORE_TABLES)
    mask = torch.tensor([[1, 0, 0], [0, 0, 0], [0, 1, 1], [0, 0, 0]], dtype=torch.bool)
    fresh, primary = orchestrator(stream_seam=True)
    assert fresh.stream_seam and fresh.fusion.stream_gate.shape == (3, 2)
    encoded = fresh.encode(batch)
    closed = fresh(batch, fresh.routing_hidden(batch, encoded), encoded=encoded, decision=_decision(mask))
    assert torch.equal(closed.output.cta_logits, primary(batch).cta_logits)  # gates at zero: Phase 1
    assert closed.specialist_outputs["wide"].stream.shape[-1] == 48  # each read in its own width

    orch, primary = orchestrator(stream_seam=True)
    with torch.no_grad():  # only the stream seam open: what changes comes through it
        orch.fusion.stream_gate.normal_()
    encoded = orch.encode(batch)
    out = orch(batch, orch.routing_hidden(batch, encoded), encoded=encoded, decision=_decision(mask))
    changed = (out.output.cta_logits - primary(batch).cta_logits).abs().flatten(1).amax(1)
    assert changed[0] > 1e-4 and changed[2] > 1e-4
    assert changed[1] == 0 and changed[3] == 0


def test_stream_seam_fusion_is_exact():
    fusion = RWKVStateFusion(num_heads=2, head_size=4, num_agents=2, num_layers=1, stream=True)
    with torch.no_grad():
        fusion.stream_gate.normal_()
    g = torch.Generator().manual_seed(8)
    streams = [torch.randn(3, 5, 8, generator=g) for _ in range(2)]
    streams[1][0] = float("nan")  # a row that did not run may hold anything
    mask = torch.tensor([[1, 0], [1, 1], [0, 0]], dtype=torch.bool)
    fused = fusion.fuse_stream(streams, mask)
    for b in range(3):
        want = torch.zeros(5, 2, 4)
        for s in range(2):
            if mask[b, s]:
                want = want + fusion.stream_gate[s][:, None] * streams[s][b].view(5, 2, 4)
        assert torch.equal(fused[b], want.view(5, 8)), b
    with pytest.raises(ValueError, match="without the stream seam"):
        RWKVStateFusion(2, 4, 2, 1).fuse_stream(streams, mask)


def test_batched_stream_seam_equals_one_table_at_a_time():
    orch, _ = orchestrator(stream_seam=True)
    open_gates(orch, seed=4)
    batch = make_batch(MORE_TABLES)  # rows of different lengths: padding in the batched read
    mask = torch.tensor([[1, 1, 0], [0, 1, 1], [1, 0, 1], [1, 1, 1]], dtype=torch.bool)
    with torch.no_grad():
        batched = orch(batch, orch.routing_hidden(batch, orch.encode(batch)), decision=_decision(mask))
        for b in range(4):
            length = int(batch.byte_mask[b].sum())
            table = batch.select(torch.tensor([b]))
            table.byte_ids, table.byte_mask = table.byte_ids[:, :length], table.byte_mask[:, :length]
            alone = orch(table, orch.routing_hidden(table, orch.encode(table)), decision=_decision(mask[b:b + 1]))
            columns = int(batch.column_mask[b].sum())
            x, y = batched.output.cta_logits[b, :columns], alone.output.cta_logits[0, :columns]
            assert torch.allclose(x, y, rtol=1e-4, atol=1e-4), (b, float((x - y).abs().max()))


def test_training_step_moves_primary_router_fusion_and_never_specialists():
    from aegir.rl.parl import PARLSettings, collect_rollouts, token_loss
    from aegir.rl.rewards import RewardConfig

    orch, _ = orchestrator(stream_seam=True)
    open_gates(orch, seed=5)
    batch = make_batch(MORE_TABLES, cta=[[1, 2, 3], [4, 5], [6, 7, 8], [9, 10, 11, 12]],
                       cpa=[[1, 2], [3], [4, 5], [6, 7, 8]])
    frozen = {n: p.clone() for n, p in orch.named_parameters() if n.startswith("specialists.")}
    trained = {n: p.clone() for n, p in orch.trainable_parameters().items()}
    optimizer = torch.optim.SGD(orch.trainable_parameters().values(), lr=0.1)
    settings = PARLSettings(rollouts=3, abstain_below=0.0, critical_weight=2.0, ce_weight=1.0, kl_coef=0.0,
                            rewards=RewardConfig())
    rollouts, forward = collect_rollouts(orch, batch, settings, 0.3, 0.1, torch.Generator().manual_seed(0))
    loss, _, _ = token_loss(orch, batch, forward, rollouts, settings, 0.2)
    loss.backward()
    optimizer.step()
    for name, before in frozen.items():
        assert torch.equal(dict(orch.named_parameters())[name], before), name
    params = orch.trainable_parameters()
    for prefix in ("primary.", "router.", "fusion.wkv", "fusion.stream_gate", "alignments.", "alignments.0.stream"):
        moved = [n for n in trained if n.startswith(prefix) and not torch.equal(params[n], trained[n])]
        assert moved, f"nothing under {prefix} changed"


def test_cap_decision_keeps_the_top_specialists_and_drops_their_tokens():
    scores = torch.tensor([[0.9, 0.2, 0.6], [0.8, 0.4, 0.7]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 1]], dtype=torch.bool)
    decision = RouterDecision(scores, mask, torch.zeros(2, 3))
    capped = cap_decision(decision, 1)
    assert capped.activation_mask.tolist() == [[True, False, False], [True, False, False]]
    assert capped.token_mask.tolist() == [[True, False, False], [True, False, False]]
    two = cap_decision(decision, 2)  # means 0.85, 0.3, 0.65 → specialists 0 and 2
    assert two.activation_mask.tolist() == [[True, False, True], [True, False, True]]
    assert cap_decision(decision, None) is decision and cap_decision(decision, 3) is decision


def test_budget_cap_alternates_and_grows():
    caps = [budget_cap(step, 100, 3, period=10, capped_share=0.5) for step in range(100)]
    assert caps[:5] == [1] * 5 and caps[5:10] == [None] * 5  # capped half, then uncapped
    assert caps[40] == 2 and caps[70] == 3  # 1 + ⌊progress · S⌋
    assert all(c is None for c in caps[75:80])
    assert budget_cap(0, 100, 3, period=10, capped_share=0.0) is None
    assert all(budget_cap(s, 100, 3, period=10, capped_share=1.0) is not None for s in range(100))
    assert budget_cap(5, 100, 0, period=10, capped_share=1.0) is None
    with pytest.raises(ValueError):
        budget_cap(0, 10, 3, period=0, capped_share=0.5)


# ----------------------------------------------------------------------------- critical steps


def test_critical_steps_on_a_hand_made_graph():
    # orchestrator 2 steps, sub-agents of 3, 5 and 1 steps, then 4 steps, then one of 2
    stages = [Stage(2, (3, 5, 1)), Stage(4, (2,)), Stage(1)]
    assert critical_steps(stages) == (2 + 5) + (4 + 2) + 1
    assert total_steps(stages) == (2 + 9) + (4 + 2) + 1
    steps, after = stage_graph(stages)
    assert longest_path(steps, after) == critical_steps(stages)
    # a diamond with a long side branch: a → b (3), a → c (1) → d (4), both → e
    assert longest_path({"a": 1, "b": 3, "c": 1, "d": 4, "e": 2},
                        {"b": ["a"], "c": ["a"], "d": ["c"], "e": ["b", "d"]}) == 1 + 1 + 4 + 2
    with pytest.raises(ValueError, match="cycle"):
        longest_path({"a": 1, "b": 1}, {"a": ["b"], "b": ["a"]})
    with pytest.raises(ValueError):
        Stage(-1)


def test_orchestrator_steps_count_layer_steps():
    p = preset("cpu")  # 1 encoder, 2 main, 1 decoder, 1 context layer
    s = preset("tiny", main_layers=3, decoder_layers=2)  # a read: 1 encoder + 3 main (+ 2 decoder)
    assert orchestrator_steps(p, [s, s], [False, False]) == (1 + 2 + 1 + 1,) * 2
    assert orchestrator_steps(p, [s, s], [True, True]) == (5 + 4, 5 + 8)  # parallel reads wait once
    assert orchestrator_steps(p, [s, s], [True, False]) == (5 + 4, 5 + 4)
    # the stream seam: each specialist's decoder (2) runs beside the primary's main + decoder (3)
    # and the column attention waits for both, so it adds total work, not critical steps …
    assert orchestrator_steps(p, [s, s], [True, True], stream=True) == (5 + 4, 5 + 8 + 2 * 2)
    # … until it is the longer branch
    deep = preset("tiny", main_layers=3, decoder_layers=5)
    assert orchestrator_steps(p, [deep], [True], stream=True) == (1 + 4 + 5 + 1, 5 + 4 + 5)


# ----------------------------------------------------------------------------- state survival


def test_state_survival_is_one_at_the_start_and_falls():
    primary = tiny(0)
    batch = make_batch(MORE_TABLES)
    H, K = 2, 16
    state = random_states(4, primary.config.main_layers, H, K, seed=6)
    share = state_survival(primary, batch, state)
    assert share.shape == (1, 4)
    assert bool((share > 0).all() and (share <= 1.0 + 1e-5).all())
    assert float(share[0, 0]) > float(share[0, -1])  # less of it is left at later columns
    zero = [LayerState(torch.zeros_like(s.wkv), s.shift_time, s.shift_channel) for s in state]
    assert torch.count_nonzero(state_survival(primary, batch, zero)) == 0  # nothing to measure


# ----------------------------------------------------------------------------- checkpoints


def test_orchestrator_checkpoint_round_trip_and_bad_specialists(tmp_path):
    orch, _ = orchestrator()
    open_gates(orch, seed=7)
    dirs = {}
    for name, specialist in zip(orch.specialist_names, orch.specialists):
        dirs[name] = save_checkpoint(tmp_path / "phase1" / name, specialist.model)
    out = save_orchestrator(tmp_path / "phase3", orch, dirs, {"note": "test"})
    assert is_orchestrator_checkpoint(out) and not is_orchestrator_checkpoint(dirs["same"])
    config = json.loads((out / "config.json").read_text())
    assert [s["checkpoint"] for s in config["orchestrator"]["specialists"]] == \
        ["../phase1/same", "../phase1/wide", "../phase1/deep"]
    loaded, _ = load_orchestrator(out)
    batch = make_batch(MORE_TABLES)
    assert torch.equal(orch.eval().annotate(batch).output.cta_logits, loaded.annotate(batch).output.cta_logits)
    assert config["orchestrator"]["stream_seam"] is False and not loaded.stream_seam
    # the stream seam is recorded and rebuilt
    streaming, _ = orchestrator(stream_seam=True)
    open_gates(streaming, seed=7)
    out_stream = save_orchestrator(tmp_path / "phase3_stream", streaming, dirs)
    loaded, _ = load_orchestrator(out_stream)
    assert loaded.stream_seam
    assert torch.equal(streaming.eval().annotate(batch).output.cta_logits, loaded.annotate(batch).output.cta_logits)

    # a changed specialist: its fingerprint no longer matches
    original = (dirs["wide"] / "model.safetensors").read_bytes()
    save_checkpoint(dirs["wide"], trained_like(tiny(2, d_model=48, head_size=16), seed=9))
    with pytest.raises(CheckpointError, match="'wide' has changed"):
        load_orchestrator(out)
    (dirs["wide"] / "model.safetensors").write_bytes(original)
    load_orchestrator(out)  # restored: loads again
    # a missing one
    for f in dirs["deep"].iterdir():
        f.unlink()
    dirs["deep"].rmdir()
    with pytest.raises(CheckpointError, match="'deep'.*missing"):
        load_orchestrator(out)


def test_ensemble_output_is_the_mean_softmax_of_the_activated():
    from dataclasses import replace

    from aegir.orchestrator.ensemble import ensemble_output

    primary = tiny(0)
    batch = make_batch(TABLES)
    base = primary(batch)
    g = torch.Generator().manual_seed(3)
    others = [replace(base, cta_logits=torch.randn(base.cta_logits.shape, generator=g),
                      cpa_logits=torch.randn(base.cpa_logits.shape, generator=g)) for _ in range(2)]
    mask = torch.tensor([[True, False], [True, True]])
    out = ensemble_output(base, [(o.cta_logits, o.cpa_logits) for o in others], mask)
    for b, agents in ((0, [base, others[0]]), (1, [base, *others])):
        want = torch.stack([a.cta_logits[b].softmax(-1) for a in agents]).mean(0)
        assert torch.allclose(out.cta_logits[b].exp(), want, atol=1e-6)


def scoring_models():
    """What Phase 3 scores, at toy size: the fused orchestrator (gates open), its control, the
    Phase 1 primary (all in eval mode) and 9 synthetic tables."""
    import copy
    from pathlib import Path

    from aegir.config import SyntheticConfig
    from aegir.data.dataset import examples_from_tables
    from aegir.data.synth import generate_table

    fused, primary = orchestrator(threshold=0.3)
    open_gates(fused)
    control = build_orchestrator(copy.deepcopy(primary), {})
    tables = [generate_table(SyntheticConfig(), "valid", i) for i in range(9)]
    examples = examples_from_tables(tables, 256, 8, 0, Path("synthetic"))
    fused.eval(), control.eval(), primary.eval()
    return fused, control, primary, examples


def test_phase3_scoring_in_worker_threads_equals_one_thread():
    from aegir.orchestrator.evaluation import predict_variants, predict_variants_shared
    from aegir.train.step import OneThreadWorkers

    fused, control, primary, examples = scoring_models()
    alone = predict_variants(fused, control, primary, examples, batch_size=2)
    with OneThreadWorkers(2) as threads:
        shared = predict_variants_shared(fused, control, primary, examples, batch_size=2, workers=threads)
    assert set(shared) == set(alone) >= {"phase1", "control", "fused", "ensemble", "same", "wide", "deep"}
    assert any(p.activation.any() for p in alone["fused"])  # the fused variant really read specialists
    for name in alone:
        assert [p.table_id for p in shared[name]] == [e.table_id for e in examples]
        for a, b in zip(shared[name], alone[name]):
            assert (a.cta_ids == b.cta_ids).all() and (a.cpa_ids == b.cpa_ids).all()
            assert abs(a.cta_probs - b.cta_probs).max() < 1e-5 and abs(a.cpa_probs - b.cpa_probs).max() < 1e-5
            assert (a.activation is None) == (b.activation is None)
            assert a.activation is None or (a.activation == b.activation).all()


def test_phase3_scoring_from_stored_distributions_equals_running_the_models(tmp_path):
    """Phase 3 takes the frozen models' distributions from their Phase 1 checkpoints
    (aegir.eval.reads): every variant's predictions, the ensemble's included, are the bits it
    gets by running those models on the same batches."""
    from aegir.data.dataset import collate, eval_batches
    from aegir.eval.grouped import ALL_LABELS
    from aegir.eval.predict import table_predictions
    from aegir.eval.reads import (
        READS_FILE,
        StoredReads,
        dense_distributions,
        save_eval_reads,
    )
    from aegir.orchestrator.ensemble import ensemble_output
    from aegir.orchestrator.evaluation import predict_variants
    from aegir.orchestrator.model import OrchestratorOutput

    fused, control, primary, examples = scoring_models()
    ran = predict_variants(fused, control, primary, examples, batch_size=2, top_k=ALL_LABELS)
    assert any(p.activation.any() for p in ran["fused"])  # the ensemble really averages specialists
    labels = {"cta": ran["phase1"][0].cta_ids.shape[1], "cpa": ran["phase1"][0].cpa_ids.shape[1]}
    frozen = ["phase1", *fused.specialist_names]
    meta = {"checkpoint": "c0ffee", "reading": {"columns": 9, "views": 2}}
    for name in frozen:  # as the phase1 stage writes them, one file per checkpoint
        (tmp_path / name).mkdir()
        save_eval_reads(tmp_path / name / READS_FILE, {"valid": (examples, dense_distributions(ran[name], labels))},
                        meta)
    stored = {}
    for name in frozen:
        store, why_not = StoredReads.open(tmp_path / name, meta)
        assert store is not None and why_not == ""
        stored[name] = store.split("valid", examples)
        assert [len(read["cta"]) for read in stored[name]] == [e.num_columns for e in examples]
    taken = predict_variants(fused, control, primary, examples, batch_size=2, top_k=ALL_LABELS, stored=stored)
    assert set(taken) == set(ran)
    # the ensemble is the primary's output with the log of the mean softmax as its logits
    # (ensemble_output), read as any output is
    for indices in eval_batches(examples, 2):
        rows = [examples[i] for i in indices]
        batch = collate(rows)
        with torch.no_grad():
            routed = fused.annotate(batch)
            output = ensemble_output(primary(batch), fused.specialist_logits(batch), routed.activation_mask)
            want = table_predictions(OrchestratorOutput(output=output, activation_mask=routed.activation_mask), rows,
                                     ALL_LABELS)
        for i, b in zip(indices, want):
            assert np.array_equal(taken["ensemble"][i].cta_probs, b.cta_probs)
            assert np.array_equal(taken["ensemble"][i].cpa_ids, b.cpa_ids)
    for name in ran:
        for a, b in zip(taken[name], ran[name]):
            for field in ("cta_ids", "cta_probs", "cpa_ids", "cpa_probs"):
                assert np.array_equal(getattr(a, field), getattr(b, field)), (name, field)
            assert (a.activation is None) == (b.activation is None)
            assert a.activation is None or (a.activation == b.activation).all()
    # what is not taken: another setting, other reads, no file
    store, why_not = StoredReads.open(tmp_path / "phase1", {**meta, "reading": {"columns": 9, "views": 3}})
    assert store is None and "reading" in why_not
    assert StoredReads.open(tmp_path / "phase1", meta)[0].split("valid", examples[1:]) is None
    assert StoredReads.open(tmp_path / "phase1", meta)[0].split("test", examples) is None
    assert StoredReads.open(tmp_path, meta) == (None, f"no {READS_FILE}")

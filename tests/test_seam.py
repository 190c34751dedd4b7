"""A specialist trained through the seam (`aegir.train.seam`): where the receiver's loss reaches,
the sharded step over it, and the config that asks for it."""

from __future__ import annotations

import pytest
import torch

from aegir.config import AgentConfig
from aegir.errors import ConfigError
from aegir.train.seam import SeamStudent
from aegir.train.step import OneThreadWorkers, ShardedStep, whole_batch_step
from test_step import rel_err, synthetic_batch, tiny_trained_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def student(weight: float) -> SeamStudent:
    return SeamStudent(tiny_trained_model(0), tiny_trained_model(1), weight)


def test_the_receivers_loss_reaches_the_specialist_through_its_states_alone():
    """The heard term's gradient reaches what made the main network's final states (encoder,
    routing, main network) and nothing after them (decoder, heads); the receiver never learns."""
    seam, batch = student(1.0), synthetic_batch(4)
    with torch.no_grad():
        seam.wkv_gate.fill_(0.5)
        seam.shift_gate.fill_(0.5)
    output = seam(batch)
    heard = seam.receiver.loss(batch, output.heard)[0]
    heard.backward()
    grads = {n: p.grad for n, p in seam.model.named_parameters()}
    reached = {n.split(".")[0] for n, g in grads.items() if g is not None and g.abs().sum() > 0}
    assert {"encoder", "main"} <= reached
    assert not reached & {"decoder", "cta_head", "cpa_head", "context", "pool_proj"}
    assert all(p.grad is None for p in seam.receiver.parameters())
    assert not any(p.requires_grad for p in seam.receiver.parameters())


def test_closed_gates_leave_the_receiver_as_it_is_and_learn_to_open():
    """At the start (gates 0) the receiver reads zeros, exactly its own forward; the gates get a
    gradient, the specialist none from the heard term."""
    seam, batch = student(1.0), synthetic_batch(4)
    output = seam(batch)
    alone = seam.receiver(batch)
    assert torch.equal(output.heard.cta_logits, alone.cta_logits)
    seam.receiver.loss(batch, output.heard)[0].backward()
    assert seam.wkv_gate.grad.abs().sum() > 0 and seam.shift_gate.grad.abs().sum() > 0
    assert all(p.grad is None or not p.grad.any() for p in seam.model.parameters())
    assert len(seam.gates_json()["wkv"]) == seam.receiver.config.main_layers


def test_the_loss_is_the_own_loss_plus_the_weighted_heard_loss():
    batch = synthetic_batch(4)
    zero, two = student(0.0), student(2.0)
    own, _ = zero.model.loss(batch, zero.model(batch))
    loss0, parts0 = zero.loss(batch, zero(batch))
    loss2, parts2 = two.loss(batch, two(batch))
    assert rel_err(loss0, own) < 1e-6
    assert parts2["seam"] > 0
    assert rel_err(loss2, own + 2.0 * parts2["seam"]) < 1e-6
    assert rel_err(parts0["seam"], parts2["seam"]) < 1e-6  # the same receiver reading the same states


def test_the_receiver_stays_in_eval_mode():
    seam = student(1.0)
    seam.train()
    assert seam.model.training and not seam.receiver.training


def trained_grads(seam: SeamStudent) -> dict[str, torch.Tensor]:
    grads = {n: p.grad.clone() for n, p in seam.named_parameters() if p.requires_grad}
    seam.zero_grad(set_to_none=True)
    return grads


def test_sharded_step_over_a_student_equals_its_whole_batch_step():
    seam, batch = student(1.5), synthetic_batch(6)
    with torch.no_grad():
        seam.wkv_gate.normal_()
        seam.shift_gate.normal_()
    whole = whole_batch_step(seam, batch)
    whole_grads = trained_grads(seam)
    with OneThreadWorkers(2) as threads:
        sharded = ShardedStep(seam, threads, shard_bytes=400)(batch)
    sharded_grads = trained_grads(seam)
    assert whole_grads["wkv_gate"].abs().sum() > 0
    assert rel_err(sharded.loss, whole.loss) < 1e-5
    assert rel_err(sharded.parts["seam"], whole.parts["seam"]) < 1e-5
    for name, g in whole_grads.items():
        assert rel_err(sharded_grads[name], g) < 1e-4, name


def test_seam_weight_needs_the_model_it_starts_from():
    with pytest.raises(ConfigError, match="seam_weight"):
        AgentConfig(seam_weight=1.0)
    with pytest.raises(ConfigError, match="seam_weight"):
        AgentConfig(init="primary", seam_weight=-1.0)
    assert AgentConfig(init="primary", seam_weight=0.5).seam_weight == 0.5


def test_phase3_opens_the_gates_of_seam_trained_specialists_where_their_training_left_them():
    """`open_seam_gates`: a specialist's `seam_gates` become its fusion gates; others stay closed."""
    from aegir.orchestrator.model import build_orchestrator, open_seam_gates

    seam = student(1.0)
    with torch.no_grad():
        seam.wkv_gate.normal_()
        seam.shift_gate.normal_()
    orch = build_orchestrator(tiny_trained_model(2), {"plain": tiny_trained_model(3), "taught": seam.model})
    open_seam_gates(orch, {"taught": seam.gates_json()})
    layers, heads = seam.receiver.config.main_layers, seam.heads
    assert torch.equal(orch.fusion.wkv_gate[1], seam.wkv_gate.detach().view(layers, heads))
    assert torch.equal(orch.fusion.shift_gate[1], seam.shift_gate.detach().view(layers, heads))
    assert not orch.fusion.wkv_gate[0].any() and not orch.fusion.shift_gate[0].any()
    # and Phase 3's fusion of that specialist alone is the state the receiver read in training
    batch = synthetic_batch(3)
    read = orch.specialists[1](batch)
    fused = orch.fuse([None, read], torch.tensor([[False, True]] * 3))
    for ours, theirs in zip(fused, seam.gated(read.states)):
        for field in ("wkv", "shift_time", "shift_channel"):
            assert torch.allclose(getattr(ours, field), getattr(theirs, field), atol=1e-6), field

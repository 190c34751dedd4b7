"""The column seam: the activated specialists' column vectors mixed into the primary's before
its heads (`aegir.orchestrator.fusion`), against hand-built references, in every path that
runs it (evaluation, PARL's rollouts, checkpoints, critical steps)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from aegir.config import Phase3Config
from aegir.errors import ConfigError
from aegir.model.checkpoint import CheckpointError, save_checkpoint
from aegir.orchestrator.checkpoint import load_orchestrator, save_orchestrator
from aegir.orchestrator.critical import orchestrator_steps
from aegir.orchestrator.fusion import RWKVStateFusion
from aegir.orchestrator.model import build_orchestrator
from aegir.orchestrator.specialist import FrozenSpecialist
from test_model import make_batch
from test_swarm import MORE_TABLES, open_gates, tiny

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def column_orchestrator():
    specialists = {"same": tiny(1), "wide": tiny(2, d_model=48, head_size=16), "deep": tiny(3, main_layers=2)}
    orch = build_orchestrator(tiny(0), specialists, 0.5, stream_seam=True, column_seam=True)
    open_gates(orch, seed=2)
    with torch.no_grad():
        orch.fusion.column_gate.copy_(torch.randn(orch.fusion.column_gate.shape,
                                                  generator=torch.Generator().manual_seed(5)))
    return orch


def test_the_mix_is_a_per_head_weighted_mean_and_a_row_without_specialists_keeps_its_vectors():
    fusion = RWKVStateFusion(num_heads=2, head_size=3, num_agents=2, stream=True, columns=True)
    with torch.no_grad():
        fusion.column_gate.copy_(torch.log(torch.tensor([[1.0, 3.0], [0.5, 2.0]])))
    g = torch.Generator().manual_seed(0)
    primary, a, b = (torch.randn(3, 4, 6, generator=g) for _ in range(3))
    mask = torch.tensor([[True, True], [False, True], [False, False]])
    out = fusion.fuse_columns(primary, [a, b], mask)
    # row 0, head 0: weights 1 (primary), 1, 0.5; head 1: 1, 3, 2
    head0 = (primary[0, :, :3] + a[0, :, :3] + 0.5 * b[0, :, :3]) / 2.5
    head1 = (primary[0, :, 3:] + 3 * a[0, :, 3:] + 2 * b[0, :, 3:]) / 6.0
    assert torch.allclose(out[0], torch.cat([head0, head1], dim=-1), atol=1e-6)
    # row 1: only the second specialist
    expected1 = torch.cat([(primary[1, :, :3] + 0.5 * b[1, :, :3]) / 1.5, (primary[1, :, 3:] + 2 * b[1, :, 3:]) / 3.0], -1)
    assert torch.allclose(out[1], expected1, atol=1e-6)
    assert torch.equal(out[2], primary[2])  # nothing activated: exactly its own vectors
    with pytest.raises(ValueError, match="without the column seam"):
        RWKVStateFusion(2, 3, 2, stream=True).fuse_columns(primary, [a, b], mask)


def test_the_orchestrators_forward_mixes_each_specialists_own_column_vectors():
    orch = column_orchestrator().eval()
    batch = make_batch(MORE_TABLES)
    with torch.no_grad():
        out = orch.annotate(batch)
        mask = out.activation_mask
        assert mask.any() and not mask.all()  # some rows and specialists on, others off
        encoded = orch.encode(batch)
        reads = orch.read_specialists(batch, mask)
        aligned = []
        for s, specialist in enumerate(orch.specialists):
            whole = specialist.model(batch).column_vectors  # the specialist's own full forward
            aligned.append(orch.alignments[s].align_columns(whole))
        reference = orch.primary.forward_from_encoded(
            batch, encoded, orch.fuse(reads, mask), orch.fuse_stream(reads, mask),
            lambda columns: orch.fusion.fuse_columns(columns, aligned, mask))
        without = orch.primary.forward_from_encoded(batch, encoded, orch.fuse(reads, mask), orch.fuse_stream(reads, mask))
    for b in range(batch.batch_size):
        c = int(batch.column_mask[b].sum())
        assert torch.allclose(out.output.cta_logits[b, :c], reference.cta_logits[b, :c], atol=1e-5)
        assert torch.allclose(out.output.cpa_logits[b, :c], reference.cpa_logits[b, :c], atol=1e-5)
        if mask[b].any():  # the mix moved the labels of every row that read a specialist
            assert not torch.allclose(out.output.cta_logits[b, :c], without.cta_logits[b, :c], atol=1e-4)
        else:
            assert torch.equal(out.output.cta_logits[b, :c], without.cta_logits[b, :c])


def test_parl_rollouts_with_the_column_seam_equal_k_separate_forwards_and_train_its_weights():
    from aegir.orchestrator.model import repeat_batch, select_encoded
    from aegir.rl.parl import policy_forward

    orch = column_orchestrator()
    batch = make_batch(MORE_TABLES)
    K, B = 3, batch.batch_size
    fast = policy_forward(orch, batch, K, generator=torch.Generator().manual_seed(1))
    mask = fast.decision.activation_mask
    rows = torch.arange(B).repeat(K)
    encoded = orch.encode(batch)
    slow = orch.primary.forward_from_encoded(repeat_batch(batch, K), select_encoded(encoded, rows),
                                             orch.fuse(fast.reads, mask, rows), orch.fuse_stream(fast.reads, mask, rows),
                                             orch.column_mix(fast.reads, mask, rows))
    assert torch.allclose(fast.output.cta_logits, slow.cta_logits, atol=1e-5)
    assert torch.allclose(fast.output.cpa_logits, slow.cpa_logits, atol=1e-5)
    fast.output.cta_logits.sum().backward()
    grad = orch.fusion.column_gate.grad
    assert grad is not None and torch.count_nonzero(grad) > 0  # the weights learn
    assert orch.alignments[1].column_proj.grad is not None
    assert all(p.grad is None for p in orch.specialists.parameters())  # the specialists stay frozen


def saved(orch, root):
    """`orch` saved under `root/phase3` beside its specialists' checkpoints (`root/phase1/<name>`):
    the checkpoint directory and its config.json."""
    dirs = {name: save_checkpoint(root / "phase1" / name, specialist.model)
            for name, specialist in zip(orch.specialist_names, orch.specialists)}
    out = save_orchestrator(root / "phase3", orch, dirs)
    return out, json.loads((out / "config.json").read_text())


def test_the_column_seam_is_saved_rebuilt_and_checked(tmp_path):
    orch = column_orchestrator()
    out, config = saved(orch, tmp_path)
    assert config["orchestrator"]["column_seam"] is True
    loaded, _ = load_orchestrator(out)
    assert loaded.column_seam
    batch = make_batch(MORE_TABLES)
    with torch.no_grad():
        assert torch.equal(orch.eval().annotate(batch).output.cta_logits, loaded.annotate(batch).output.cta_logits)
    config["orchestrator"]["stream_seam"] = False  # a column seam without the stream it reads
    (out / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="column_seam"):
        load_orchestrator(out)


def test_settings_and_critical_steps():
    with pytest.raises(ConfigError, match="column_seam"):
        Phase3Config(column_seam=True, stream_seam=False)
    with pytest.raises(ConfigError, match="column_gate_init"):
        Phase3Config(stream_seam=True, column_seam=True, column_gate_init=0.0)
    with pytest.raises(ValueError, match="needs the stream seam"):
        build_orchestrator(tiny(0), {"same": tiny(1)}, column_seam=True)
    with pytest.raises(ValueError, match="stream=True"):
        FrozenSpecialist(tiny(1), columns=True)
    # the specialist's column attention joins its stream branch, which is off the critical path
    # of one default-shaped table; the total counts it
    primary, specialist = tiny(0).config, tiny(1).config
    plain = orchestrator_steps(primary, [specialist], [True], stream=True)
    mixed = orchestrator_steps(primary, [specialist], [True], stream=True, columns=True)
    assert mixed[1] == plain[1] + specialist.context_layers
    assert mixed[0] >= plain[0]
    assert math.isclose(Phase3Config(stream_seam=True, column_seam=True).column_gate_init, 1.0)

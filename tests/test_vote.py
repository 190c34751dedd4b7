"""The output seam (`SwarmOrchestrator.voted`): the fused model's label distribution averaged with
the activated specialists' own, against a hand-built reference, in every path that reads the
orchestrator (annotate, Phase 3's variants, Phase 4's table views, checkpoints), and never in
training."""

from __future__ import annotations

import json

import pytest
import torch

from aegir.config import Phase3Config
from aegir.model.checkpoint import CheckpointError
from aegir.orchestrator.checkpoint import load_orchestrator
from aegir.orchestrator.model import build_orchestrator
from test_column_seam import saved
from test_model import make_batch
from test_swarm import MORE_TABLES, open_gates, tiny

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def voting_orchestrator(column_seam: bool = True, stream_seam: bool = True):
    specialists = {"same": tiny(1), "wide": tiny(2, d_model=48, head_size=16), "deep": tiny(3, main_layers=2)}
    orch = build_orchestrator(tiny(0), specialists, 0.5, stream_seam=stream_seam, column_seam=column_seam, vote=True)
    open_gates(orch, seed=2)
    return orch.eval()


@pytest.mark.parametrize("seams", [(True, True), (True, False), (False, False)],
                         ids=["column-seam", "stream-seam", "state-seam-only"])
def test_the_vote_is_the_mean_softmax_of_the_fused_heads_and_each_activated_specialist(seams):
    stream_seam, column_seam = seams
    orch = voting_orchestrator(column_seam, stream_seam)
    batch = make_batch(MORE_TABLES)
    with torch.no_grad():
        out = orch.annotate(batch)
        mask = out.activation_mask
        assert mask.any() and not mask.all()  # some rows and specialists on, others off
        seam = out.seam_output
        # the state seam alone: the forward without the vote, unchanged
        plain = orch(batch, orch.routing_hidden(batch, orch.encode(batch)))
        assert torch.equal(seam.cta_logits, plain.output.cta_logits)
        own = [specialist.model(batch) for specialist in orch.specialists]  # each one's whole forward
    for b in range(batch.batch_size):
        c = int(batch.column_mask[b].sum())
        for name in ("cta_logits", "cpa_logits"):
            members = [getattr(seam, name)[b, :c].softmax(-1)]
            members += [getattr(o, name)[b, :c].softmax(-1) for o, on in zip(own, mask[b]) if on]
            expected = torch.stack(members).mean(0)
            assert torch.allclose(getattr(out.output, name)[b, :c].exp(), expected, atol=1e-5), (b, name)
            if not mask[b].any():  # a row that activated none keeps its own distribution
                assert torch.allclose(getattr(out.output, name)[b, :c].softmax(-1),
                                      getattr(seam, name)[b, :c].softmax(-1), atol=1e-6)
    assert "vote" in out.seconds


def test_without_the_vote_or_specialists_annotate_is_the_state_seam():
    orch = voting_orchestrator()
    batch = make_batch(MORE_TABLES)
    with torch.no_grad():
        voted = orch.annotate(batch)
        orch.vote = False
        plain = orch.annotate(batch)
    assert plain.seam_output is None and torch.equal(plain.output.cta_logits, voted.seam_output.cta_logits)
    assert not torch.allclose(plain.output.cta_logits, voted.output.cta_logits, atol=1e-4)  # the vote moved them
    control = build_orchestrator(tiny(0), {}, 0.5, vote=True).eval()  # no specialists: nothing to vote with
    with torch.no_grad():
        out = control.annotate(batch)
    assert out.seam_output is None and torch.equal(out.output.cta_logits, tiny(0).eval()(batch).cta_logits)


def test_training_forwards_never_vote():
    from aegir.rl.parl import policy_forward

    orch = voting_orchestrator()
    batch = make_batch(MORE_TABLES)
    fast = policy_forward(orch, batch, 2, generator=torch.Generator().manual_seed(1))
    orch.vote = False
    again = policy_forward(orch, batch, 2, generator=torch.Generator().manual_seed(1))
    assert torch.equal(fast.output.cta_logits, again.output.cta_logits)


def test_the_vote_is_saved_and_rebuilt_and_older_checkpoints_load_without_it(tmp_path):
    orch = voting_orchestrator()
    out, config = saved(orch, tmp_path)
    assert config["orchestrator"]["vote"] is True
    loaded, _ = load_orchestrator(out)
    batch = make_batch(MORE_TABLES)
    with torch.no_grad():
        assert loaded.vote and torch.equal(orch.annotate(batch).output.cta_logits, loaded.annotate(batch).output.cta_logits)
    del config["orchestrator"]["vote"]  # written before the output seam
    (out / "config.json").write_text(json.dumps(config))
    assert not load_orchestrator(out)[0].vote
    config["orchestrator"]["vote"] = "yes"
    (out / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="vote must be true or false"):
        load_orchestrator(out)


def test_phase3_reports_the_seam_beside_the_voted_model_and_phase4_reads_the_vote():
    from aegir.data.dataset import collate
    from aegir.eval.predict import table_predictions
    from aegir.orchestrator.evaluation import VARIANTS, predict_variants
    from aegir.swarm.model import table_views

    orch = voting_orchestrator()
    control = build_orchestrator(tiny(0), {}, 0.5).eval()
    examples = examples_of(MORE_TABLES)
    assert "seam" in VARIANTS
    got = predict_variants(orch, control, tiny(0).eval(), examples, batch_size=len(examples), top_k=3)
    with torch.no_grad():
        out = orch.annotate(collate(examples))
    voted = table_predictions(out, examples, 3)
    before = table_predictions(out.seam_output, examples, 3)
    for i in range(len(examples)):
        assert got["fused"][i].cta_ids.tolist() == voted[i].cta_ids.tolist()
        assert got["seam"][i].cta_ids.tolist() == before[i].cta_ids.tolist()
    views = table_views(orch, examples, len(examples), torch.zeros(100, dtype=torch.bool))
    for view, row in zip(views, range(len(examples))):
        c = view.num_columns
        assert torch.allclose(view.cta_logp, out.output.cta_logits[row, :c].float().log_softmax(-1), atol=1e-5)


def examples_of(tables) -> list:
    """`make_batch`'s tables as `Example`s (collate gives the same batch back)."""
    import numpy as np

    from aegir.data.dataset import Example

    batch = make_batch(tables)
    out = []
    for b in range(batch.batch_size):
        n, c = int(batch.byte_mask[b].sum()), int(batch.column_mask[b].sum())
        out.append(Example(f"t{b}", None, batch.byte_ids[b, :n].numpy().astype(np.int16),
                           batch.column_spans[b, :c].numpy().astype(np.int32),
                           np.full(c, -100, dtype=np.int64), np.full(c, -100, dtype=np.int64)))
    return out


def test_the_setting_defaults_off_and_params_turn_it_on():
    import yaml

    from conftest import ROOT

    assert Phase3Config().vote is False  # the dataclass: what a checkpoint from before it had
    assert yaml.safe_load((ROOT / "params.yaml").read_text())["phase3"]["vote"] is True

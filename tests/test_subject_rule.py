"""The subject rule (`SwarmOrchestrator.subject_routing`): in evaluation the owners of the domain
the frozen Phase 1 primary names for the subject column run beside the router's choice; never in
training; saved with the checkpoint; its read counted in the critical steps."""

from __future__ import annotations

import json

import pytest
import torch

from aegir.config import Phase3Config
from aegir.errors import ConfigError
from aegir.labels import cta_vocab, label_families
from aegir.model.checkpoint import CheckpointError
from aegir.model.network import preset
from aegir.orchestrator.checkpoint import load_orchestrator
from aegir.orchestrator.critical import labels_read_steps, orchestrator_steps
from aegir.orchestrator.model import build_orchestrator, subject_owner_matrix
from aegir.orchestrator.router import RouterDecision
from aegir.swarm.spawn import swarm_steps
from test_column_seam import saved
from test_model import make_batch
from test_swarm import MORE_TABLES, open_gates, tiny

pytestmark = pytest.mark.usefixtures("one_torch_thread")

OWNERS = {"primary": (), "media": ("Movie", "Book"), "places": ("Hotel", "Restaurant")}


def reader_naming(label: str):
    """A tiny model whose top CTA label is `label` in every column."""
    model = tiny(1)
    with torch.no_grad():
        model.cta_head.bias[cta_vocab().index[label]] = 1e4
    return model


def ruled(label: str, rule: bool = True, router_bias: float = -30.0, vote_primary: bool = False,
          column_seam: bool = True):
    """An orchestrator over a reader naming `label`, `media` and `places`, whose router opens
    no gate (bias `router_bias`), with the subject rule on or off (and its reader voting)."""
    specialists = {"primary": reader_naming(label), "media": tiny(2), "places": tiny(3, main_layers=2)}
    orch = build_orchestrator(tiny(0), specialists, 0.5, stream_seam=True, column_seam=column_seam, vote=True,
                              subject_route=OWNERS if rule else None, vote_primary=vote_primary)
    open_gates(orch, seed=4)
    with torch.no_grad():
        orch.router.proj.bias.fill_(router_bias)
    return orch.eval()


def test_label_families_name_the_domain_of_a_subject_column():
    ids, families = label_families(cta_vocab())
    index = cta_vocab().index
    assert families[ids[index["Movie/name"]]] == "Movie" == families[ids[index["Movie/description"]]]
    assert ids[index["addressLocality"]] == -1
    matrix = subject_owner_matrix(["primary", "media", "places"], OWNERS)
    assert matrix.shape == (len(cta_vocab()), 3)
    assert matrix[index["Movie/name"]].tolist() == [False, True, False]
    assert matrix[index["Hotel/description"]].tolist() == [False, False, True]
    assert not matrix[index["addressLocality"]].any()
    # every label that names an owned domain, and only those, marks its owner
    owned = {d for domains in OWNERS.values() for d in domains}
    assert int(matrix.any(1).sum()) == sum(1 for i in ids if i >= 0 and families[i] in owned)


@pytest.mark.parametrize(("label", "owner"), [("Movie/name", "media"), ("Hotel/name", "places"),
                                               ("addressLocality", None)])
def test_evaluation_runs_the_owner_of_the_domain_the_reader_names(label, owner):
    orch = ruled(label)
    batch = make_batch(MORE_TABLES)
    names = orch.specialist_names
    expected = torch.zeros(batch.batch_size, len(names), dtype=torch.bool)
    if owner is not None:
        expected[:, names.index(owner)] = True
    with torch.no_grad():
        out = orch.annotate(batch)
        assert torch.equal(out.activation_mask, expected)  # the router opened nothing: the rule alone
        # the same as the routing handed in
        hidden = orch.routing_hidden(batch, orch.encode(batch))
        decision = orch.route(hidden)
        given = orch.voted(batch, orch(batch, hidden, decision=RouterDecision(
            decision.scores, expected, decision.log_prob)))
    assert torch.equal(out.output.cta_logits, given.output.cta_logits)
    assert ("subject" in out.seconds) and orch.subject_steps == labels_read_steps(orch.specialists[0].config)


def test_the_rule_adds_to_the_router_and_changes_the_labels():
    batch = make_batch(MORE_TABLES)
    with torch.no_grad():
        off, on = ruled("Movie/name", rule=False).annotate(batch), ruled("Movie/name").annotate(batch)
        both = ruled("Movie/name", router_bias=30.0).annotate(batch)  # every gate open already
    assert not off.activation_mask.any() and on.activation_mask[:, 1].all()
    assert not torch.allclose(off.output.cta_logits, on.output.cta_logits, atol=1e-4)  # media read and voted
    assert both.activation_mask.all()  # the rule only adds: it never closes a gate


@pytest.mark.parametrize("router_bias", [-30.0, 0.0, 30.0])
def test_phase4_views_route_as_the_whole_forward_without_reading_the_specialists(router_bias, monkeypatch):
    """With the labels given (Phase 3's stored readings), `table_views` takes only the routing
    (`decide`: router, then the rule): the same activation and policy input as the whole
    forward's, no specialist read beyond the rule's own."""
    from aegir.orchestrator.specialist import FrozenSpecialist
    from aegir.swarm.model import prediction_of, table_views
    from test_vote import examples_of

    orch = ruled("Movie/name", router_bias=router_bias)
    examples = examples_of(MORE_TABLES)
    family = torch.full((len(cta_vocab()),), -1)
    full = table_views(orch, examples, len(examples), family)  # labels from the whole routed forward
    readings = [prediction_of(v.cta_logp, v.cpa_logp, e.table_id) for v, e in zip(full, examples)]
    reads = []
    original = FrozenSpecialist.read
    monkeypatch.setattr(FrozenSpecialist, "read", lambda self, *a, **k: reads.append(self.name) or original(self, *a, **k))
    given = table_views(orch, examples, len(examples), family, readings)
    assert not reads  # the rule's reader reads once, through `subject_routing`; no one else
    for a, b in zip(full, given):
        assert a.phase3_active == b.phase3_active and a.phase3_reads == b.phase3_reads
        assert torch.equal(a.hidden, b.hidden)
    assert all(v.phase3_active[1] for v in given)  # media: the rule's owner of Movie, every table
    if router_bias > 0:
        assert all(all(v.phase3_active) for v in given)


def test_training_routing_never_follows_the_rule():
    from aegir.rl.parl import policy_forward

    orch = ruled("Movie/name").train()
    batch = make_batch(MORE_TABLES)
    out = policy_forward(orch, batch, 2, generator=torch.Generator().manual_seed(1))
    assert not out.decision.activation_mask.any()  # the sampled policy, gates all but shut
    with torch.no_grad():
        hidden = orch.routing_hidden(batch, orch.encode(batch))
        sampled = orch(batch, hidden, sample=True, generator=torch.Generator().manual_seed(0))
    assert not sampled.activation_mask.any() and "subject" not in sampled.seconds


def test_the_rule_is_saved_rebuilt_and_checked(tmp_path):
    orch = ruled("Movie/name")
    out, config = saved(orch, tmp_path)
    assert config["orchestrator"]["subject_route"] == {name: list(d) for name, d in OWNERS.items()}
    loaded, _ = load_orchestrator(out)
    batch = make_batch(MORE_TABLES)
    with torch.no_grad():
        assert torch.equal(loaded.annotate(batch).output.cta_logits, orch.annotate(batch).output.cta_logits)
    assert loaded.subject_route == OWNERS
    for bad in ({"nobody": ["Movie"]}, ["media"], {"media": "Movie"}):
        config["orchestrator"]["subject_route"] = bad
        (out / "config.json").write_text(json.dumps(config))
        with pytest.raises(CheckpointError, match="subject_route"):
            load_orchestrator(out)
    config["orchestrator"].pop("subject_route")  # a checkpoint from before the rule: off
    (out / "config.json").write_text(json.dumps(config))
    assert load_orchestrator(out)[0].subject_route is None


def test_the_rule_needs_the_frozen_primary():
    with pytest.raises(ValueError, match="primary"):
        build_orchestrator(tiny(0), {"media": tiny(2)}, 0.5, subject_route={"media": ["Movie"]})
    with pytest.raises(ConfigError, match="subject_route"):
        Phase3Config(specialists=("places", "media"), subject_route=True)
    assert Phase3Config(specialists=("primary", "media"), subject_route=True).subject_route
    # the control (no specialists) has no routing, so no rule
    assert build_orchestrator(tiny(0), {}, 0.5, subject_route=OWNERS).subject_route is None


def test_the_rules_read_is_on_the_critical_path():
    p = preset("cpu")  # 1 encoder, 2 main, 1 decoder, 1 context layer
    s = preset("tiny", main_layers=3, decoder_layers=2)  # a read: 1 encoder + 3 main
    reader = labels_read_steps(p)
    assert reader == 1 + 2 + 1 + 1
    # the routing waits for the reader (5 steps) instead of the prefix (1): the reads start 4 later
    assert orchestrator_steps(p, [s], [True], subject=reader) == (5 + 4 + 3 + 1, 1 + 4 + 3 + 1 + 5)
    # with no specialist activated the primary's rest still waits for the routing
    assert orchestrator_steps(p, [s], [False], subject=reader) == (5 + 3 + 1, 1 + 3 + 1 + 5)
    assert orchestrator_steps(p, [s], [False]) == (1 + 3 + 1,) * 2
    # Phase 4 counts it in its never-spawn graph too
    assert swarm_steps(p, (), 5, 0, 0, subject=reader)[0] == orchestrator_steps(p, [s], [False], subject=reader)[0]
    with pytest.raises(ValueError):
        orchestrator_steps(p, [s], [True], subject=-1)


def test_one_read_of_the_frozen_primary_serves_the_rule_and_its_specialist_seat():
    """In evaluation the frozen primary reads each batch once: the rule's read is handed on as
    the `primary` specialist's read of the rows that activated it, with the labels, states,
    stream and column vectors a read of those rows alone gives (to rounding)."""
    orch = ruled("Movie/name", router_bias=30.0)  # every gate open: `primary` is activated
    batch = make_batch(MORE_TABLES)
    calls = []
    handle = orch.specialists[0].register_forward_hook(lambda module, args, out: calls.append(args[0].batch_size))
    try:
        with torch.no_grad():
            out = orch.annotate(batch)
    finally:
        handle.remove()
    assert out.activation_mask[:, 0].all()
    assert calls == [batch.batch_size]  # one read, of the whole batch
    with torch.no_grad():
        _, whole, _ = orch.subject_routing(batch)
        mask = torch.zeros(batch.batch_size, len(orch.specialist_names), dtype=torch.bool)
        mask[[0, 2], 0] = True  # two rows activate it
        shared = orch.read_specialists(batch, mask, known={"primary": whole})[0]
        alone = orch.read_specialists(batch, mask)[0]
    for a, b in zip([shared.stream, shared.columns, *shared.labels], [alone.stream, alone.columns, *alone.labels]):
        assert torch.allclose(a, b, atol=1e-4), float((a - b).abs().max())
        assert not a[[1, 3]].any()  # rows that did not activate it hold zeros, as a read of the rows gives
    for sa, sb in zip(shared.states, alone.states):
        assert torch.allclose(sa.wkv, sb.wkv, atol=1e-4)


def test_the_shared_read_is_counted_once():
    """The steps count the frozen primary's read once: with the rule and the column seam its
    specialist seat runs no read of its own (`separate_reads`); without the column seam its read
    keeps no labels, so the seat reads again; without the rule nothing changes."""
    assert ruled("Movie/name").separate_reads([True, True, False]) == [False, True, False]
    assert ruled("Movie/name", rule=False).separate_reads([True, True, False]) == [True, True, False]
    specialists = {"primary": reader_naming("Movie/name"), "media": tiny(2)}
    streams_only = build_orchestrator(tiny(0), specialists, 0.5, stream_seam=True, column_seam=False,
                                      subject_route={"primary": (), "media": ("Movie",)})
    assert streams_only.separate_reads([True, True]) == [True, True]
    p, s = preset("cpu"), preset("cpu")
    reader = labels_read_steps(p)
    # the primary's seat alone: the rule's read is all the reading there is (5), then the rest
    assert orchestrator_steps(p, [s, s], [False, False], True, True, subject=reader) == (5 + 3 + 1, 1 + 3 + 1 + 5)
    # with another specialist: its read and stream after the routing, one read fewer in the total
    shared = orchestrator_steps(p, [s, s], [False, True], True, True, subject=reader)
    both = orchestrator_steps(p, [s, s], [True, True], True, True, subject=reader)
    assert shared[0] == both[0] and both[1] - shared[1] == 3 + 2


@pytest.mark.parametrize("column_seam", [True, False])
@pytest.mark.parametrize("router_bias", [-30.0, 30.0])
def test_the_rules_reader_votes_on_every_table_with_vote_primary(router_bias, column_seam):
    """`vote_primary`: the labels are the mean softmax of the seam's heads, each activated
    specialist's and the frozen primary's, on every row whether the router activated it or not,
    from the rule's read (no read more); the activation, and so the steps, unchanged."""
    from aegir.orchestrator.ensemble import ensemble_probs

    batch = make_batch(MORE_TABLES)
    plain = ruled("Movie/name", router_bias=router_bias, column_seam=column_seam)
    voting = ruled("Movie/name", router_bias=router_bias, column_seam=column_seam, vote_primary=True)
    reads: dict[str, int] = {"plain": 0, "voting": 0}
    hooks = [module.register_forward_hook(lambda module, args, out, name=name: reads.__setitem__(name, reads[name] + 1))
             for name, orch in (("plain", plain), ("voting", voting))
             for module in (orch.specialists[0], orch.specialists[0].model)]  # a read, or the whole forward
    with torch.no_grad():
        before, after = plain.annotate(batch), voting.annotate(batch)
    for hook in hooks:
        hook.remove()
    with torch.no_grad():
        reader = voting.specialists[0].model(batch)
    assert torch.equal(before.activation_mask, after.activation_mask)
    assert bool(after.activation_mask[:, 0].all()) == (router_bias > 0)
    assert reads["voting"] == reads["plain"] >= 1  # the vote reads nothing the rule had not read
    assert torch.equal(after.seam_output.cta_logits, before.seam_output.cta_logits)
    voters = after.activation_mask.clone()
    voters[:, 0] = True
    labels = [(reader.cta_logits, reader.cpa_logits)] + [
        (m.model(batch).cta_logits, m.model(batch).cpa_logits) for m in voting.specialists[1:]]
    for task, logits in ((0, after.output.cta_logits), (1, after.output.cpa_logits)):
        seam = (after.seam_output.cta_logits, after.seam_output.cpa_logits)[task]
        expected = ensemble_probs(seam.float().softmax(-1), [own[task].float().softmax(-1) for own in labels], voters)
        assert torch.allclose(logits.exp(), expected, atol=1e-4), float((logits.exp() - expected).abs().max())
    if router_bias > 0:  # the reader voted already: nothing changes
        assert torch.allclose(after.output.cta_logits, before.output.cta_logits, atol=1e-5)
    else:  # it did not: now it does, and its labels move the vote
        assert not torch.allclose(after.output.cta_logits, before.output.cta_logits, atol=1e-3)


def test_vote_primary_is_saved_and_needs_the_vote_and_the_rule(tmp_path):
    orch = ruled("Movie/name", vote_primary=True)
    out, config = saved(orch, tmp_path)
    assert config["orchestrator"]["vote_primary"] is True
    loaded, _ = load_orchestrator(out)
    batch = make_batch(MORE_TABLES)
    with torch.no_grad():
        assert torch.equal(loaded.annotate(batch).output.cta_logits, orch.annotate(batch).output.cta_logits)
    config["orchestrator"]["vote_primary"] = "yes"
    (out / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="vote_primary"):
        load_orchestrator(out)
    config["orchestrator"].pop("vote_primary")  # a checkpoint from before it: off
    (out / "config.json").write_text(json.dumps(config))
    assert load_orchestrator(out)[0].vote_primary is False
    with pytest.raises(ValueError, match="vote_primary"):
        ruled("Movie/name", rule=False, vote_primary=True)
    # the control (no specialists, so no rule) builds with the stage's settings and votes with no one
    assert not build_orchestrator(tiny(0), {}, 0.5, vote=True, subject_route=OWNERS, vote_primary=True).vote_primary
    for bad in ({"vote": False}, {"subject_route": False}):
        with pytest.raises(ConfigError, match="vote_primary"):
            Phase3Config(specialists=("primary", "media"), **{"vote": True, "subject_route": True, **bad},
                         vote_primary=True)
    assert Phase3Config(specialists=("primary", "media"), vote=True, subject_route=True, vote_primary=True).vote_primary

"""AegirModel: shapes, pooling under causality, learning, padding, the state seam, checkpoints."""

from __future__ import annotations

import json

import pytest
import torch

from aegir.data.batch import IGNORE_INDEX, Batch
from aegir.data.serialize import BOS_ID, BYTE_VOCAB_SIZE, CELL_SEP, COLUMN_SEP, PAD_ID
from aegir.model.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from aegir.model.network import PRESETS, AegirModel, preset
from aegir.model.rwkv import LayerState

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def make_batch(tables: list[list[list[str]]], cta: list[list[int]] | None = None,
               cpa: list[list[int]] | None = None) -> Batch:
    """A Batch by hand: BOS, then per column its cells joined by CELL_SEP and a COLUMN_SEP."""
    streams, spans = [], []
    for columns in tables:
        ids, table_spans = [BOS_ID], []
        for cells in columns:
            start = len(ids)
            for i, cell in enumerate(cells):
                if i:
                    ids.append(CELL_SEP)
                ids.extend(cell.encode())
            table_spans.append((start, len(ids)))
            ids.append(COLUMN_SEP)
        streams.append(ids)
        spans.append(table_spans)
    B, T, C = len(streams), max(map(len, streams)), max(map(len, spans))
    byte_ids = torch.full((B, T), PAD_ID)
    byte_mask = torch.zeros(B, T, dtype=torch.bool)
    column_spans = torch.zeros(B, C, 2, dtype=torch.long)
    column_mask = torch.zeros(B, C, dtype=torch.bool)
    cta_labels = torch.full((B, C), IGNORE_INDEX)
    cpa_labels = torch.full((B, C), IGNORE_INDEX)
    for b, (ids, table_spans) in enumerate(zip(streams, spans)):
        byte_ids[b, : len(ids)] = torch.tensor(ids)
        byte_mask[b, : len(ids)] = True
        column_spans[b, : len(table_spans)] = torch.tensor(table_spans)
        column_mask[b, : len(table_spans)] = True
        if cta is not None:
            cta_labels[b, : len(cta[b])] = torch.tensor(cta[b])
        if cpa is not None:
            cpa_labels[b, 1: len(cpa[b]) + 1] = torch.tensor(cpa[b])
    return Batch(byte_ids, byte_mask, column_spans, column_mask, cta_labels, cpa_labels)


TABLES = [
    [["Hotel Adlon", "Ritz"], ["10117", "75001", "W1J 9BR"], ["+49 30 2261 0", "+33 1 43 16 30 30"]],
    [["Dune", "Emma"], ["1965-08-01", "1815-12-23"]],
]


def tiny_model(seed: int = 0, **overrides) -> AegirModel:
    torch.manual_seed(seed)
    return AegirModel(preset("tiny", **overrides))


def test_forward_shapes_and_embedding_rows():
    model = tiny_model()
    batch = make_batch(TABLES)
    out = model(batch)
    D, cfg = model.config.d_model, model.config
    assert model.embed.weight.shape[0] == BYTE_VOCAB_SIZE == cfg.vocab_size
    assert out.cta_logits.shape == (2, 3, cfg.n_cta) and cfg.n_cta == 82
    assert out.cpa_logits.shape == (2, 3, cfg.n_cpa) and cfg.n_cpa == 108
    assert out.column_vectors.shape == (2, 3, D)
    assert out.ratio_loss.dim() == 0 and torch.isfinite(out.ratio_loss)
    assert 0 < out.chunk_stats.F <= 1 and out.chunk_stats.ratio >= 1
    assert len(out.main_final_state) == cfg.main_layers
    H, K = D // cfg.head_size, cfg.head_size
    assert out.main_final_state[0].wkv.shape == (2, H, K, K)
    assert out.main_final_state[0].shift_time.shape == (2, D)
    assert model.routing_hidden(batch).shape == (2, D)


def test_forward_is_deterministic_and_from_encoded_matches():
    model = tiny_model()
    batch = make_batch(TABLES)
    a, b = model(batch), model(batch)
    assert torch.equal(a.cta_logits, b.cta_logits)
    c = model.forward_from_encoded(batch, model.encode(batch), None)
    assert torch.equal(a.cpa_logits, c.cpa_logits)
    grads = []
    for _ in range(2):
        model.zero_grad()
        loss, _ = model.loss(batch, model(batch))
        loss.backward()
        grads.append([p.grad.clone() for p in model.parameters() if p.grad is not None])
    assert all(torch.equal(x, y) for x, y in zip(*grads))


def test_column_vectors_follow_content_causally():
    """Without context attention: changing column 1's last byte changes column 1's vector (so it
    is not pooled at its span start) and leaves column 0's alone (a causal reader)."""
    model = tiny_model(context_layers=0)
    base = [["alpha", "beta"], ["12345", "67890"], ["x", "y"]]
    changed = [["alpha", "beta"], ["12345", "67899"], ["x", "y"]]
    out = model(make_batch([base, changed]))
    v = out.column_vectors
    torch.testing.assert_close(v[0, 0], v[1, 0])
    assert (v[0, 1] - v[1, 1]).abs().max() > 1e-4


def test_pool_columns_reads_the_end_not_the_start():
    model = tiny_model()
    h = torch.zeros(1, 10, model.config.d_model)
    spans = torch.tensor([[[1, 5]]])
    mask = torch.tensor([[True]])
    base = model.pool_columns(h, spans, mask)
    h_end = h.clone()
    h_end[0, 5] = 1.0  # the COLUMN_SEP position
    assert not torch.allclose(model.pool_columns(h_end, spans, mask), base)
    h_out = h.clone()
    h_out[0, 0] = 1.0  # before the span
    h_out[0, 6:] = 1.0  # after it
    torch.testing.assert_close(model.pool_columns(h_out, spans, mask), base)


def test_context_attention_gives_earlier_columns_later_content():
    model = tiny_model()
    base = [["alpha", "beta"], ["12345", "67890"]]
    changed = [["alpha", "beta"], ["jane@x.org", "bob@y.com"]]
    v = model(make_batch([base, changed])).column_vectors
    assert (v[0, 0] - v[1, 0]).abs().max() > 1e-5


def test_right_padding_does_not_change_outputs():
    model = tiny_model()
    long, short = TABLES
    alone = model(make_batch([short]))
    padded = model(make_batch([long, short]))
    C = 2
    torch.testing.assert_close(padded.cta_logits[1, :C], alone.cta_logits[0], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(padded.cpa_logits[1, :C], alone.cpa_logits[0], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(padded.column_vectors[1, :C], alone.column_vectors[0],
                               atol=1e-5, rtol=1e-4)
    for s_pad, s_alone in zip(padded.main_final_state, alone.main_final_state):
        torch.testing.assert_close(s_pad.wkv[1], s_alone.wkv[0], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(s_pad.shift_time[1], s_alone.shift_time[0], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(s_pad.shift_channel[1], s_alone.shift_channel[0],
                                   atol=1e-5, rtol=1e-4)


def test_main_initial_state_is_a_working_seam():
    model = tiny_model()
    for p in model.parameters():  # zero-initialised projections would hide the state's effect
        if (p == 0).all():
            torch.nn.init.normal_(p, std=0.1)
    batch = make_batch(TABLES)
    cold = model(batch)
    warm_state = [LayerState(torch.randn_like(s.wkv), torch.randn_like(s.shift_time),
                             torch.randn_like(s.shift_channel)) for s in cold.main_final_state]
    warm = model(batch, main_initial_state=warm_state)
    assert (warm.cta_logits - cold.cta_logits).abs().max() > 1e-4


def perturbed_model(seed: int = 0, std: float = 0.1) -> AegirModel:
    """The tiny model with seeded noise added to every parameter: at initialisation each block's
    time-mix output projection is zero (the block starts as the identity), so no wkv result
    would reach the logits and any wkv would pass a comparison of logits."""
    model = tiny_model(seed)
    g = torch.Generator().manual_seed(seed + 1000)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * std)
    return model


def test_naive_and_chunked_model_agree(monkeypatch):
    """The whole model on the literal wkv loop, the chunked form and the CPU kernel (the preset's
    `wkv_kernel`, where it builds): the same logits, on weights where the recurrence reaches them,
    which the test shows: a perturbed main-network wkv state, or wkv outputs set to zero, move
    the logits a hundred times the tolerance or more."""
    import aegir.model.rwkv as rwkv

    model = perturbed_model()
    batch = make_batch(TABLES)
    with torch.no_grad():
        kernel = model(batch)
        model.set_wkv_kernel(False)
        chunked = model(batch)
        model.set_naive_wkv(True)
        naive = model(batch)
        for fast in (kernel, chunked):
            torch.testing.assert_close(fast.cta_logits, naive.cta_logits, atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(fast.cpa_logits, naive.cpa_logits, atol=1e-5, rtol=1e-4)
        g = torch.Generator().manual_seed(7)
        state = [LayerState(torch.randn(s.wkv.shape, generator=g), s.shift_time, s.shift_channel)
                 for s in model.main.zero_state(batch.batch_size)]
        perturbed = model(batch, main_initial_state=state)
        naive_wkv = rwkv.wkv_naive
        monkeypatch.setattr(rwkv, "wkv_naive", lambda *args: (torch.zeros_like(naive_wkv(*args)[0]), naive_wkv(*args)[1]))
        silenced = model(batch)
    for moved in (perturbed, silenced):
        assert (moved.cta_logits - naive.cta_logits).abs().max() > 1e-2
        assert (moved.cpa_logits - naive.cpa_logits).abs().max() > 1e-2


def _synthetic_task():
    """CTA label 0 for digit columns, 1 for letter columns; CPA label = the same rule."""
    digits = [["123", "4567"], ["89", "0012"], ["555", "31"]]
    letters = [["abc", "defg"], ["xy", "zzz"], ["hello", "qq"]]
    tables, cta, cpa = [], [], []
    for i in range(3):
        cols = [letters[i], digits[i], letters[(i + 1) % 3], digits[(i + 2) % 3]]
        if i % 2:
            cols = [digits[i], letters[i], digits[(i + 1) % 3], letters[(i + 2) % 3]]
        labels = [0 if c[0][0].isdigit() else 1 for c in cols]
        tables.append(cols)
        cta.append(labels)
        cpa.append(labels[1:])
    return make_batch(tables, cta, cpa)


def test_training_steps_learn_content_and_change_parameters():
    model = tiny_model(seed=1)
    batch = _synthetic_task()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    losses = []
    for step in range(40):
        out = model(batch)
        loss, parts = model.loss(batch, out)
        assert set(parts) == {"cta", "cpa", "ratio", "total"}
        opt.zero_grad()
        loss.backward()
        with_grad = {n for n, p in model.named_parameters() if p.grad is not None and p.grad.any()}
        opt.step()
        if step == 0:
            # zero-initialised output projections (RWKV, H-Net) leave some gradients zero at
            # first; the embedding and the heads must learn from step one
            assert {"embed.weight", "cta_head.weight", "cpa_head.2.weight"} <= with_grad
            unchanged = [n for n, p in model.named_parameters()
                         if n in with_grad and torch.equal(p, before[n])]
            assert not unchanged, unchanged
        losses.append(parts["cta"].item() + parts["cpa"].item())
    assert losses[-1] < 0.5 * losses[0]
    frozen = [n for n, p in model.named_parameters() if torch.equal(p, before[n])]
    assert not frozen, frozen  # every parameter has learned by now
    pred = model(batch).cta_logits.argmax(-1)[batch.column_mask]
    assert len(set(pred.tolist())) > 1  # not one constant prediction
    assert torch.equal(pred, batch.cta_labels[batch.column_mask])


def test_loss_without_labels_is_finite():
    model = tiny_model()
    batch = make_batch(TABLES)  # no labels at all
    loss, parts = model.loss(batch, model(batch))
    assert torch.isfinite(loss)
    assert parts["cta"] == 0 and parts["cpa"] == 0


def test_label_smoothing_matches_its_formula():
    """CE with smoothing ε = (1 − ε)·CE + ε·mean over classes of −log p, per labelled column."""
    model = tiny_model()
    batch = make_batch(TABLES, cta=[[3, 7, 11], [5, 2]], cpa=[[4, 9], [1]])
    output = model(batch)
    eps = 0.2
    _, plain = model.loss(batch, output)
    _, smooth = model.loss(batch, output, label_smoothing=eps)
    for task, logits, labels in (("cta", output.cta_logits, batch.cta_labels),
                                 ("cpa", output.cpa_logits, batch.cpa_labels)):
        keep = labels != IGNORE_INDEX
        logp = torch.log_softmax(logits[keep].float(), dim=-1)
        expected = ((1 - eps) * -logp.gather(1, labels[keep][:, None]).squeeze(1) + eps * -logp.mean(1)).mean()
        assert torch.allclose(smooth[task], expected, atol=1e-5), task
        assert not torch.allclose(smooth[task], plain[task])


def test_presets_build_and_have_expected_sizes():
    assert set(PRESETS) == {"tiny", "cpu", "gpu"}
    sizes = {}
    dense = {}
    for name in ("tiny", "cpu"):
        model = AegirModel(preset(name))
        sizes[name] = model.num_parameters()
        dense[name] = sizes[name] - model.ngram_embed.table.weight.numel()  # the n-gram table is a lookup
        # num_dense_parameters leaves out the byte embedding too: both are lookups, not products
        assert model.num_dense_parameters() == dense[name] - model.embed.weight.numel()
    assert dense["tiny"] < dense["cpu"] < 1_000_000  # what a step multiplies: trains on 2 cores
    assert sizes["tiny"] < sizes["cpu"] < 10_000_000
    with torch.device("meta"):  # no memory for the big one
        gpu = AegirModel(preset("gpu"))
    assert 10_000_000 < gpu.num_parameters() < 1_000_000_000


def test_checkpoint_round_trip(tmp_path):
    model = tiny_model(seed=3)
    batch = make_batch(TABLES)
    extra = {"params": {"lr": 0.001}, "cta_labels": ["a", "b"], "fingerprint": "abc"}
    path = save_checkpoint(tmp_path / "ckpt", model, extra)
    assert sorted(p.name for p in path.iterdir()) == ["config.json", "model.safetensors"]
    loaded, config = load_checkpoint(path)
    assert config["params"] == {"lr": 0.001} and config["fingerprint"] == "abc"
    assert config["model"]["d_model"] == model.config.d_model
    model.eval()
    assert torch.equal(model(batch).cta_logits, loaded(batch).cta_logits)
    # overwrite in place with another model
    other = tiny_model(seed=4)
    save_checkpoint(path, other, extra)
    reloaded, _ = load_checkpoint(path)
    assert torch.equal(other(batch).cpa_logits, reloaded(batch).cpa_logits)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp dirs left


def test_checkpoint_errors_name_the_path(tmp_path):
    with pytest.raises(CheckpointError, match="config.json"):
        load_checkpoint(tmp_path / "nowhere")
    path = save_checkpoint(tmp_path / "ckpt", tiny_model(), {})
    weights = path / "model.safetensors"
    weights.write_bytes(b"\x80\x04this is a pickle, not safetensors")
    with pytest.raises(CheckpointError, match="model.safetensors"):
        load_checkpoint(path)

    path = save_checkpoint(tmp_path / "ckpt2", tiny_model(), {})
    data = (path / "model.safetensors").read_bytes()
    (path / "model.safetensors").write_bytes(data[: len(data) // 2])  # truncated
    with pytest.raises(CheckpointError, match="model.safetensors"):
        load_checkpoint(path)

    path = save_checkpoint(tmp_path / "ckpt3", tiny_model(), {})
    (path / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="config.json"):
        load_checkpoint(path)

    path = save_checkpoint(tmp_path / "ckpt4", tiny_model(), {})
    cfg = json.loads((path / "config.json").read_text())
    cfg["model"]["d_model"] = 64  # weights no longer fit
    (path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="model.safetensors"):
        load_checkpoint(path)


def test_code_presets_mirror_params_yaml():
    """aegir.model.network.PRESETS and params.yaml's `presets` describe the same models."""
    from pathlib import Path

    import yaml
    params = yaml.safe_load((Path(__file__).resolve().parents[1] / "params.yaml").read_text())
    for name, fields in PRESETS.items():
        assert params["presets"][name] == fields, name

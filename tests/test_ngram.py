"""Hashed byte n-gram embeddings: buckets equal their plain-Python reference, the model reads them,
and checkpoints from before them still load as they were."""

from __future__ import annotations

import json

import pytest
import torch

from aegir.errors import ConfigError
from aegir.model.checkpoint import load_checkpoint, save_checkpoint
from aegir.model.network import AegirModel, preset
from aegir.model.ngram import (
    BASE,
    HashedNgramEmbedding,
    compact_reads,
    ngram_buckets,
    ngram_buckets_reference,
    ngram_keys,
)
from test_model import TABLES, make_batch

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("order", [2, 3, 4])
def test_buckets_equal_the_reference_on_random_streams(order):
    gen = torch.Generator().manual_seed(order)
    ids = torch.randint(0, 258, (3, 57), generator=gen)
    got = ngram_buckets(ids, order, 1000)
    for row in range(3):
        assert got[row].tolist() == ngram_buckets_reference(ids[row].tolist(), order, 1000)
    assert int(got.min()) >= 0 and int(got.max()) < 1000


def test_keys_are_distinct_for_distinct_ngrams_and_read_before_the_start():
    ids = torch.tensor([[65, 66, 67, 65, 66, 67]])  # "ABCABC"
    keys = ngram_keys(ids, 3)[0].tolist()
    assert keys[2] == keys[5]  # "ABC" twice: one key
    assert len(set(keys[:3])) == 3  # "..A", ".AB", "ABC" differ
    assert keys[0] == 65 + (BASE - 1) * BASE + (BASE - 1) * BASE ** 2
    short = ngram_keys(torch.tensor([[7]]), 4)  # shorter than the order: all history is "before"
    assert short.tolist() == [[7 + sum((BASE - 1) * BASE ** i for i in range(1, 4))]]
    with pytest.raises(ValueError, match="order"):
        ngram_keys(ids, 5)


def test_embedding_sums_one_row_per_order():
    emb = HashedNgramEmbedding(max_order=4, buckets=64, d_model=8)
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    rows = emb.bucket_ids(ids)  # (1, 5, 3)
    assert rows.shape == (1, 5, 3)
    assert all(int(rows[..., i].min()) >= i * 64 and int(rows[..., i].max()) < (i + 1) * 64 for i in range(3))
    expected = emb.table.weight[rows].sum(-2)
    torch.testing.assert_close(emb(ids), expected)


def test_compact_reads_give_the_same_bits_through_the_rows_read():
    torch.manual_seed(0)
    embedding = HashedNgramEmbedding(4, 64, 8)  # few buckets: many repeated rows
    ids = torch.randint(0, 256, (3, 40))
    slope = torch.randn(3, 40, 8)
    (embedding(ids) * slope).sum().backward()
    whole = embedding.table.weight.grad
    with compact_reads([embedding]) as reads:
        out = embedding(ids)
        with torch.no_grad():
            embedding(ids)  # no gradient: reads the table itself, logs nothing
    (read,) = reads[id(embedding)]
    assert torch.equal(out, embedding(ids))
    assert torch.equal(read.rows, torch.unique(embedding.bucket_ids(ids)))
    assert torch.equal(read.leaf, embedding.table.weight[read.rows]) and read.leaf.is_leaf
    (grad,) = torch.autograd.grad((out * slope).sum(), [read.leaf])
    assert torch.equal(torch.zeros_like(whole).index_add_(0, read.rows, grad), whole)
    embedding(ids)  # outside the block: the table itself again, nothing logged
    assert len(reads[id(embedding)]) == 1


def test_model_reads_ngrams_and_they_learn():
    torch.manual_seed(0)
    model = AegirModel(preset("tiny"))
    assert model.ngram_embed is not None and model.config.ngram_max == 3
    batch = make_batch(TABLES, cta=[[0, 1, 2], [3, 4]])
    before = model(batch).cta_logits.detach()
    with torch.no_grad():
        model.ngram_embed.table.weight.normal_(std=1.0)
    assert not torch.allclose(model(batch).cta_logits, before)  # the n-gram rows reach the logits
    out = model(batch)
    loss, _ = model.loss(batch, out)
    loss.backward()
    grad = model.ngram_embed.table.weight.grad
    assert grad is not None and int((grad.abs().sum(-1) > 0).sum()) > 0  # rows read get a gradient


def test_no_ngrams_is_the_model_from_before_and_old_checkpoints_load(tmp_path):
    torch.manual_seed(0)
    model = AegirModel(preset("tiny", ngram_max=1))
    assert model.ngram_embed is None
    assert not any("ngram" in name for name in model.state_dict())
    save_checkpoint(tmp_path / "old", model)
    config_path = tmp_path / "old" / "config.json"
    config = json.loads(config_path.read_text())
    for key in ("ngram_max", "ngram_buckets"):  # a checkpoint written before the keys existed
        del config["model"][key]
    config_path.write_text(json.dumps(config))
    loaded, _ = load_checkpoint(tmp_path / "old")
    assert loaded.ngram_embed is None
    batch = make_batch(TABLES)
    torch.testing.assert_close(loaded(batch).cta_logits, model.eval()(batch).cta_logits)


@pytest.mark.parametrize("overrides, match", [({"ngram_max": 5}, "ngram_max"), ({"ngram_max": 0}, "ngram_max"),
                                              ({"ngram_buckets": 0}, "ngram_buckets")])
def test_absurd_ngram_settings_are_errors_naming_the_key(overrides, match):
    with pytest.raises(ConfigError, match=match):
        preset("tiny", **overrides)

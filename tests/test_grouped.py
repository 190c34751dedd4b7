"""How a model reads tables when scoring (aegir.eval.grouped): wide tables in column groups, every
table in row views; one whole read per table exactly as before."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from aegir.config import PrepareConfig, SyntheticConfig, parse_params
from aegir.data.dataset import examples_from_tables
from aegir.data.synth import generate_split, generate_wide
from aegir.errors import ConfigError, DataError
from aegir.eval.grouped import (
    ALL_LABELS,
    merge_predictions,
    predict_tables,
    read_groups,
    row_view,
    table_reads,
)
from aegir.eval.predict import TablePrediction, predict
from aegir.inference import Annotator, _reading_of
from aegir.labels import cpa_vocab, cta_vocab
from aegir.orchestrator.model import build_orchestrator
from test_swarm import tiny

PREPARE = PrepareConfig(byte_budget=256, max_rows=6)
WHERE = Path("tests")


def serialized(tables):
    return examples_from_tables(tables, PREPARE.byte_budget, PREPARE.max_rows, PREPARE.seed, WHERE)


@pytest.mark.parametrize("num_columns", range(1, 42))
@pytest.mark.parametrize("read_columns", [2, 3, 5, 9])
def test_groups_cover_each_column_once_within_the_limit(num_columns, read_columns):
    groups = read_groups(num_columns, read_columns)
    if num_columns <= read_columns:
        assert groups == [tuple(range(num_columns))]
        return
    assert all(g[0] == 0 and 2 <= len(g) <= read_columns for g in groups)
    others = [c for g in groups for c in g[1:]]
    assert others == list(range(1, num_columns))  # contiguous, in order, each once
    sizes = [len(g) for g in groups]
    assert max(sizes) - min(sizes) <= 1
    assert len(groups) == -(-(num_columns - 1) // (read_columns - 1))  # as few groups as the limit allows


def test_zero_reads_every_table_whole_and_one_is_refused():
    assert read_groups(40, 0) == [tuple(range(40))]
    with pytest.raises(ValueError, match="read_columns"):
        read_groups(40, 1)
    with pytest.raises(ConfigError, match="reading.columns"):
        parse_params({"reading": {"columns": 1}})
    with pytest.raises(ConfigError, match="reading.views"):
        parse_params({"reading": {"views": 0}})


def test_narrow_tables_are_read_from_their_prepared_example_unchanged():
    tables = generate_split(SyntheticConfig(test_tables=6, max_columns=6), "test")
    examples = serialized(tables)
    grouped = table_reads(tables, examples, 9, 1, PREPARE, WHERE)
    assert grouped.one_read_per_table and all(read is example for read, example in zip(grouped.reads, examples))
    model = tiny(0)
    plain = predict(model, examples)
    merged = predict_tables(lambda reads, k: predict(model, reads, top_k=k), grouped, [e.table_id for e in examples])
    for a, b in zip(plain, merged):
        assert np.array_equal(a.cta_ids, b.cta_ids) and np.array_equal(a.cpa_probs, b.cpa_probs)


def test_a_wide_table_merges_each_column_from_the_group_that_read_it():
    tables = generate_wide(SyntheticConfig(wide_tables=3, wide_min_columns=14, wide_max_columns=20, min_rows=3,
                                           max_rows=6))
    examples = serialized(tables)
    grouped = table_reads(tables, examples, 5, 1, PREPARE, WHERE)
    assert len(grouped.reads) == sum(len(read_groups(t.num_columns, 5)) for t in tables)
    assert all(read.num_columns <= 5 for read in grouped.reads)
    model = tiny(0)
    reads = predict(model, grouped.reads, top_k=3)
    merged = predict_tables(lambda r, k: predict(model, r, top_k=k), grouped, [e.table_id for e in examples], top_k=3)
    for index, (table, prediction) in enumerate(zip(tables, merged)):
        assert prediction.table_id == table.table_id and prediction.cta_ids.shape == (table.num_columns, 3)
        parts = [(columns, reads[i]) for i, (owner, _, columns) in enumerate(grouped.owners) if owner == index]
        assert np.array_equal(prediction.cta_ids[0], parts[0][1].cta_ids[0])  # the subject: the first group's
        for columns, read in parts:
            for row, column in enumerate(columns[1:], start=1):
                assert np.array_equal(prediction.cta_ids[column], read.cta_ids[row])
                assert np.allclose(prediction.cpa_probs[column], read.cpa_probs[row], atol=1e-6)
    # each group is the table's columns, serialized with the whole budget
    first_read = grouped.reads[0]
    assert first_read.table_id == f"{tables[0].table_id}#{'-'.join(map(str, grouped.owners[0][2]))}"
    assert len(first_read.byte_ids) > len(examples[0].byte_ids) / len(read_groups(tables[0].num_columns, 5))


def test_a_routed_model_activates_the_union_of_its_groups():
    one = np.zeros((3, 1), dtype=np.int64)
    def part(table_id, activation):
        return TablePrediction(table_id, one, one.astype(float), one, one.astype(float), np.array(activation))
    tables = generate_wide(SyntheticConfig(wide_tables=1, wide_min_columns=5, wide_max_columns=5, min_rows=3, max_rows=6))
    grouped = table_reads(tables, serialized(tables), 3, 2, PREPARE, WHERE)
    assert [(v, c) for _, v, c in grouped.owners] == [(0, (0, 1, 2)), (0, (0, 3, 4)), (1, (0, 1, 2)), (1, (0, 3, 4))]
    merged = merge_predictions(grouped, [part("a", [True, False, False]), part("b", [False, False, True]),
                                         part("c", [False, True, False]), part("d", [False, True, False])],
                               [tables[0].table_id])
    assert merged[0].activation.tolist() == [True, False, True]  # the union over view 0's groups
    assert merged[0].activation_any.tolist() == [True, True, True]  # and over every read: view 1's too
    # the joint decoding and the top-k cut keep both
    from aegir.eval.grouped import top
    assert top(merged[0], 1).activation_any.tolist() == [True, True, True]


def test_an_orchestrator_reads_groups_through_the_annotator():
    primary = tiny(0)
    orch = build_orchestrator(primary, {"same": tiny(1)}, 0.5).eval()
    tables = generate_wide(SyntheticConfig(wide_tables=2, wide_min_columns=12, wide_max_columns=13, min_rows=3,
                                           max_rows=6))
    annotator = Annotator(orch, PREPARE, ["same"], orch.annotate, read_columns=4, read_views=2)
    predictions = annotator.predictions(tables, serialized(tables), WHERE)
    assert [p.cta_ids.shape[0] for p in predictions] == [t.num_columns for t in tables]
    assert all(p.activation is not None and p.activation.shape == (1,) for p in predictions)


def test_a_checkpoint_records_its_reading_and_old_ones_read_whole():
    assert _reading_of({"params": {"reading": {"columns": 9, "views": 3}}}, WHERE) == (9, 3, None, {})
    assert _reading_of({"params": {}}, WHERE) == (0, 1, None, {})
    # joint decoding: its weights and the counts it needs travel in the checkpoint's config
    counts = {task: {"tables": [3] * size, "repeated": [1] * size}
              for task, size in (("cta", len(cta_vocab())), ("cpa", len(cpa_vocab())))}
    columns, views, decode, weights = _reading_of(
        {"params": {"reading": {"views": 2, "joint_cta": 0.1}}, "label_repeats": counts}, WHERE)
    assert (columns, views, weights) == (0, 2, {"cta": 0.1, "cpa": 0.0}) and callable(decode)
    with pytest.raises(DataError, match="label repeat counts"):
        _reading_of({"params": {"reading": {"joint_cpa": 0.2}}}, WHERE)
    with pytest.raises(ConfigError, match="reading.columns"):
        _reading_of({"params": {"reading": {"columns": 1}}}, WHERE)
    with pytest.raises(ConfigError, match="reading.views"):
        _reading_of({"params": {"reading": {"views": 0}}}, WHERE)


def test_row_views_start_at_evenly_spaced_rows_and_keep_rows_whole():
    table = generate_split(SyntheticConfig(test_tables=1, min_rows=9, max_rows=9), "test")[0]
    assert row_view(table, 0, 3) is table
    for view, start in ((1, 3), (2, 6)):
        viewed = row_view(table, view, 3)
        assert viewed.table_id == table.table_id and viewed.cta == table.cta and viewed.cpa == table.cpa
        for column, original in zip(viewed.columns, table.columns):
            assert list(column) == list(original[start:]) + list(original[:start])  # rows move whole
    with pytest.raises(ValueError):
        row_view(table, 3, 3)


def test_views_average_the_distributions_of_each_column():
    tables = generate_split(SyntheticConfig(test_tables=4, min_rows=12, max_rows=20), "test")
    examples = serialized(tables)
    plan = table_reads(tables, examples, 9, 3, PREPARE, WHERE)
    assert len(plan.reads) == 3 * len(tables) and plan.reads[0] is examples[0]
    assert plan.reads[1].table_id == tables[0].table_id and plan.reads[1].byte_ids.tolist() != examples[0].byte_ids.tolist()
    model = tiny(0)
    full = predict(model, plan.reads, top_k=ALL_LABELS)
    merged = merge_predictions(plan, full, [t.table_id for t in tables], top_k=2)
    for index, prediction in enumerate(merged):
        views = [full[i] for i, (owner, _, _) in enumerate(plan.owners) if owner == index]
        for column in range(tables[index].num_columns):
            dense = np.zeros((len(views), full[0].cta_ids.shape[1]))
            for v, read in enumerate(views):
                dense[v, read.cta_ids[column]] = read.cta_probs[column]
            mean = dense.mean(0)
            assert prediction.cta_ids[column, 0] == mean.argmax()
            assert abs(prediction.cta_probs[column, 0] - mean.max()) < 1e-5
    # predict_tables runs the same plan in one call
    again = predict_tables(lambda reads, k: predict(model, reads, top_k=k), plan, [t.table_id for t in tables], top_k=2)
    assert all(np.array_equal(a.cta_ids, b.cta_ids) for a, b in zip(merged, again))

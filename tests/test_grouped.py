"""Grouped reading (aegir.eval.grouped): wide tables read in column groups, narrow ones as before."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from aegir.config import PrepareConfig, SyntheticConfig, parse_params
from aegir.data.dataset import examples_from_tables
from aegir.data.synth import generate_split, generate_wide
from aegir.errors import ConfigError, DataError
from aegir.eval.grouped import grouped_reads, merge_predictions, read_groups
from aegir.eval.predict import TablePrediction, predict
from aegir.inference import Annotator, _read_columns_of
from aegir.swarm.orchestrator import build_orchestrator
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
    with pytest.raises(ConfigError, match="phase1.read_columns"):
        parse_params({"phase1": {"read_columns": 1}})


def test_narrow_tables_are_read_from_their_prepared_example_unchanged():
    tables = generate_split(SyntheticConfig(test_tables=6, max_columns=6), "test")
    examples = serialized(tables)
    grouped = grouped_reads(tables, examples, 9, PREPARE, WHERE)
    assert all(read is example for read, example in zip(grouped.reads, examples))
    model = tiny(0)
    plain = predict(model, examples)
    merged = merge_predictions(grouped, predict(model, grouped.reads), [e.table_id for e in examples])
    for a, b in zip(plain, merged):
        assert np.array_equal(a.cta_ids, b.cta_ids) and np.array_equal(a.cpa_probs, b.cpa_probs)


def test_a_wide_table_merges_each_column_from_the_group_that_read_it():
    tables = generate_wide(SyntheticConfig(wide_tables=3, wide_min_columns=14, wide_max_columns=20, min_rows=3,
                                           max_rows=6))
    examples = serialized(tables)
    grouped = grouped_reads(tables, examples, 5, PREPARE, WHERE)
    assert len(grouped.reads) == sum(len(read_groups(t.num_columns, 5)) for t in tables)
    assert all(read.num_columns <= 5 for read in grouped.reads)
    model = tiny(0)
    reads = predict(model, grouped.reads, top_k=3)
    merged = merge_predictions(grouped, reads, [e.table_id for e in examples])
    for index, (table, prediction) in enumerate(zip(tables, merged)):
        assert prediction.table_id == table.table_id and prediction.cta_ids.shape == (table.num_columns, 3)
        parts = [(columns, reads[i]) for i, (owner, columns) in enumerate(grouped.owners) if owner == index]
        assert np.array_equal(prediction.cta_ids[0], parts[0][1].cta_ids[0])  # the subject: the first group's
        for columns, read in parts:
            for row, column in enumerate(columns[1:], start=1):
                assert np.array_equal(prediction.cta_ids[column], read.cta_ids[row])
                assert np.array_equal(prediction.cpa_probs[column], read.cpa_probs[row])
    # each group is the table's columns, serialized with the whole budget
    first_read = grouped.reads[0]
    assert first_read.table_id == f"{tables[0].table_id}#{'-'.join(map(str, grouped.owners[0][1]))}"
    assert len(first_read.byte_ids) > len(examples[0].byte_ids) / len(read_groups(tables[0].num_columns, 5))


def test_a_routed_model_activates_the_union_of_its_groups():
    one = np.zeros((3, 1), dtype=np.int64)
    def part(table_id, activation):
        return TablePrediction(table_id, one, one.astype(float), one, one.astype(float), np.array(activation))
    tables = generate_wide(SyntheticConfig(wide_tables=1, wide_min_columns=5, wide_max_columns=5, min_rows=3, max_rows=6))
    grouped = grouped_reads(tables, serialized(tables), 3, PREPARE, WHERE)
    assert [c for _, c in grouped.owners] == [(0, 1, 2), (0, 3, 4)]
    merged = merge_predictions(grouped, [part("a", [True, False, False]), part("b", [False, False, True])],
                               [tables[0].table_id])
    assert merged[0].activation.tolist() == [True, False, True]


def test_an_orchestrator_reads_groups_through_the_annotator():
    primary = tiny(0)
    orch = build_orchestrator(primary, {"same": tiny(1)}, 0.5).eval()
    tables = generate_wide(SyntheticConfig(wide_tables=2, wide_min_columns=12, wide_max_columns=13, min_rows=3,
                                           max_rows=6))
    annotator = Annotator(orch, PREPARE, ["same"], orch.annotate, read_columns=4)
    predictions = annotator.predictions(tables, serialized(tables), WHERE)
    assert [p.cta_ids.shape[0] for p in predictions] == [t.num_columns for t in tables]
    assert all(p.activation is not None and p.activation.shape == (1,) for p in predictions)


def test_a_checkpoint_records_its_reading_and_old_ones_read_whole():
    assert _read_columns_of({"params": {"phase1": {"read_columns": 9}}}, WHERE) == 9
    assert _read_columns_of({"params": {}}, WHERE) == 0
    with pytest.raises(DataError, match="read_columns"):
        _read_columns_of({"params": {"phase1": {"read_columns": 1}}}, WHERE)

"""Training views (`aegir.data.augment`) and the prepare stage that writes them."""

from __future__ import annotations

from collections import Counter

import pytest

from aegir.config import PrepareConfig, SyntheticConfig
from aegir.data.augment import table_view, table_views
from aegir.data.prepare import with_training_views
from aegir.data.synth import generate_split
from aegir.data.table import Table

TABLES = generate_split(SyntheticConfig(train_tables=30, min_rows=5, max_rows=12), "train")


def cells_by_label(table: Table) -> dict:
    """Every labelled column's values (as a multiset), keyed by its (CTA, CPA) labels and name."""
    return {(cta, cpa, i if cta is None and cpa is None else 0): Counter(c for c in col if c)
            for i, (col, cta, cpa) in enumerate(zip(table.columns, table.cta, table.cpa))}


def test_views_are_deterministic_and_differ_from_the_table():
    for table in TABLES:
        views = table_views(table, 3, seed=0)
        assert views[0] is table and views == table_views(table, 3, seed=0)
        assert views[1] != views[2] and views[1].columns != table.columns
        assert [v.table_id for v in views[1:]] == [f"{table.table_id}~v1", f"{table.table_id}~v2"]
        assert table_view(table, 1, seed=1) != views[1]  # the seed matters


def test_labels_move_with_their_columns_and_the_subject_stays_first():
    for table in TABLES:
        view = table_view(table, 1, seed=0)
        assert view.cta[0] == table.cta[0] and view.cpa[0] is None and view.domain == table.domain
        assert sorted(map(str, view.cta)) == sorted(map(str, table.cta))
        assert view.num_rows == table.num_rows
        original, moved = cells_by_label(table), cells_by_label(view)
        for key, values in moved.items():
            if key[2] == 0:  # a labelled column: its cells are a subset of the same column's
                assert not values - original[key], (table.table_id, key)


def test_views_blank_some_cells_but_every_column_keeps_a_value():
    blanked = total = 0
    for table in TABLES:
        view = table_view(table, 1, seed=0)
        for col in view.columns:
            assert any(col), table.table_id
        blanked += sum(c is None for col in view.columns for c in col)
        blanked -= sum(c in (None, "") for col in table.columns for c in col)
        total += sum(len(col) for col in table.columns)
    assert 0.04 < blanked / total < 0.12


def test_prepare_puts_each_training_table_before_its_views():
    cfg = PrepareConfig(train_views=3)
    viewed = with_training_views(TABLES, cfg)
    assert len(viewed) == 3 * len(TABLES) and viewed[::3] == TABLES
    assert viewed[1] == table_view(TABLES[0], 1, cfg.seed)
    assert with_training_views(TABLES, PrepareConfig()) == TABLES  # one view: the tables themselves


def test_zero_views_is_an_error():
    with pytest.raises(ValueError):
        table_views(TABLES[0], 0, seed=0)

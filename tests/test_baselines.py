"""The single-column baseline: its two fits in two processes give the figures of one process."""

from __future__ import annotations

import numpy as np
import pytest

from aegir.config import parse_params
from aegir.data.prepare import prepare_dataset
from aegir.errors import AegirError
from aegir.eval.baselines import baseline_scores
from conftest import TINY_PARAMS_OVERRIDE


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("baselines")
    params = parse_params({k: v for k, v in TINY_PARAMS_OVERRIDE.items()
                           if k in ("synthetic", "prepare", "baselines")})
    prepare_dataset(params, root / "data", root / "stats.json")
    return params.baselines, root / "data"


def test_two_processes_give_the_figures_of_one(setup):
    cfg, data = setup
    one = baseline_scores(cfg, data, processes=1)
    two = baseline_scores(cfg, data, processes=2)
    assert one == two
    assert set(one) == {"cta", "cpa", "real_domains"} and 0 < one["cta"]["test"]["micro_f1"] <= 100


def test_a_missing_data_directory_is_an_aegir_error_from_the_worker(setup, tmp_path):
    cfg, _ = setup
    with pytest.raises(AegirError, match="nowhere"):
        baseline_scores(cfg, tmp_path / "nowhere", processes=2)


def test_train_scores_from_the_fit_matrix_equal_a_second_vectorizing(setup):
    """The stage scores `train` from the matrix the fit built; the pipeline, given the same
    documents again, predicts the same labels."""
    from aegir.config import TRAIN_SPLIT
    from aegir.data.prepared import read_split, tables_from_arrow
    from aegir.eval.baselines import fit, labelled_columns

    cfg, data = setup
    docs, labels = labelled_columns(tables_from_arrow(read_split(data, TRAIN_SPLIT)), "cta", cfg.max_cells)
    model, train_pred = fit(docs, labels, cfg, train_predictions=True)
    assert len(train_pred) == len(docs) > 50
    assert train_pred == list(model.predict(docs))
    assert model[0].transform(docs[:3]).dtype == np.float32  # the fit's matrix: float32 (fit docstring)


DOCS = [
    "Hotel Adlon | Ritz Paris",
    "",  # a column with no cells
    "  +49 30 2261 0 |\t+33 1 43 16 30 30  ",
    "a | bb | ccc | a | A",  # words shorter than the n-grams, repeats, case
    "Köln | Zürich | São Paulo | 東京",
    "2024-05-01 | 2024-05-01 | n/a",
    "x\u00a0y | tab\tseparated | new\nline",
]


@pytest.mark.parametrize("max_features", [None, 40])
@pytest.mark.parametrize("ngram_range", [(1, 4), (2, 3)])
def test_wordwise_vectorizer_equals_scikit_learns_bit_for_bit(max_features, ngram_range):
    from sklearn.feature_extraction.text import TfidfVectorizer

    from aegir.eval.baselines import WordwiseTfidfVectorizer

    settings = dict(analyzer="char_wb", ngram_range=ngram_range, max_features=max_features,
                    sublinear_tf=True, dtype=np.float32)
    fast, reference = WordwiseTfidfVectorizer(**settings), TfidfVectorizer(**settings)
    got, want = fast.fit_transform(DOCS), reference.fit_transform(DOCS)
    assert fast.vocabulary_ == reference.vocabulary_
    for a, b in ((got, want), (fast.transform(DOCS[::-1] + ["unseen wörds"]),
                               reference.transform(DOCS[::-1] + ["unseen wörds"]))):
        assert type(a) is type(b) and a.dtype == b.dtype == np.float32
        for part in ("indptr", "indices", "data"):
            assert np.array_equal(getattr(a, part), getattr(b, part)), part
    with pytest.raises(ValueError, match="empty vocabulary"):
        WordwiseTfidfVectorizer(**settings).fit_transform(["", "   "])

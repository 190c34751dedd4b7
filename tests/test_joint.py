"""Joint decoding of a table's labels (aegir.eval.joint): exact against the exhaustive search,
the columnwise argmax at weight 0, the counts, the checkpoint round trip, and where it is wired in."""

from __future__ import annotations

import numpy as np
import pytest

from aegir.config import ConfigError, ReadingConfig, build
from aegir.data.batch import IGNORE_INDEX
from aegir.eval.grouped import TableReads, predict_tables
from aegir.eval.joint import (
    LabelRepeats,
    decode_labels,
    decode_labels_exhaustive,
    decode_table,
    label_repeats,
    objective,
    repeats_of,
    table_decoder,
)
from aegir.eval.predict import TablePrediction


def random_case(rng: np.random.Generator):
    columns, labels = int(rng.integers(1, 5)), int(rng.integers(2, 5))
    probs = rng.dirichlet(np.full(labels, 0.5), size=columns)  # (C, labels)
    log_rate = np.log(rng.uniform(0.01, 1.0, size=labels))
    return probs, log_rate


@pytest.mark.parametrize("weight", [0.0, 0.1, 0.5, 1.0, 3.0])
def test_assignment_is_the_exhaustive_optimum(weight):
    rng = np.random.default_rng(int(weight * 10))
    for _ in range(60):
        probs, log_rate = random_case(rng)
        fast = decode_labels(probs, log_rate, weight)
        slow = decode_labels_exhaustive(probs, log_rate, weight)
        assert objective(probs, log_rate, weight, fast) == pytest.approx(objective(probs, log_rate, weight, slow),
                                                                        abs=1e-9)


def test_weight_zero_is_the_argmax_and_a_weight_resolves_a_shared_label():
    # two phone-like columns: the first leans telephone (0) more than the second does
    probs = np.array([[0.57, 0.33, 0.10],
                      [0.49, 0.38, 0.13]])
    never_repeated = np.log(np.array([0.001, 0.001, 0.5]))
    assert decode_labels(probs, never_repeated, 0.0).tolist() == [0, 0]
    assert decode_labels(probs, never_repeated, 0.2).tolist() == [0, 1]
    # a label that tables usually repeat keeps both columns
    often_repeated = np.log(np.array([0.9, 0.9, 0.9]))
    assert decode_labels(probs, often_repeated, 1.0).tolist() == [0, 0]


def test_label_repeats_counts_tables_and_skips_the_subject_relation():
    ignore = IGNORE_INDEX
    tables = [
        (np.array([0, 1, 1]), np.array([ignore, 2, 2])),  # label 1 twice; relation 2 twice
        (np.array([1, 2, ignore]), np.array([0, 1, ignore])),  # column 0's relation is skipped
    ]
    counts = label_repeats(tables, {"cta": 3, "cpa": 3})
    assert counts.tables["cta"].tolist() == [1, 2, 1]
    assert counts.repeated["cta"].tolist() == [0, 1, 0]
    assert counts.tables["cpa"].tolist() == [0, 1, 1]
    assert counts.repeated["cpa"].tolist() == [0, 0, 1]
    assert np.all(counts.log_rate("cta") < 0)


def test_counts_round_trip_and_malformed_counts_are_refused():
    counts = label_repeats([(np.array([0, 0]), np.array([IGNORE_INDEX, 1]))], {"cta": 2, "cpa": 2})
    again = LabelRepeats.from_json(counts.to_json(), {"cta": 2, "cpa": 2}, "x/config.json")
    for task in ("cta", "cpa"):
        assert again.tables[task].tolist() == counts.tables[task].tolist()
        assert again.repeated[task].tolist() == counts.repeated[task].tolist()
    bad = counts.to_json()
    bad["cta"]["repeated"] = [5, 0]
    with pytest.raises(ValueError, match="x/config.json"):
        LabelRepeats.from_json(bad, {"cta": 2, "cpa": 2}, "x/config.json")
    with pytest.raises(ValueError, match="must be 3 counts"):
        LabelRepeats.from_json(counts.to_json(), {"cta": 3, "cpa": 2}, "x/config.json")
    assert repeats_of({}, "old/config.json") is None


def test_decoder_needs_counts_and_is_off_at_zero():
    assert table_decoder(None, {"cta": 0.0, "cpa": 0.0}) is None
    with pytest.raises(ValueError, match="label repeat counts"):
        table_decoder(None, {"cta": 0.1, "cpa": 0.0})
    with pytest.raises(ConfigError, match="reading.joint_cpa"):
        build(ReadingConfig, {"joint_cpa": -1.0}, "reading")
    with pytest.raises(ConfigError, match="reading.joint_cta"):
        build(ReadingConfig, {"joint_cta": float("nan")}, "reading")


def prediction(cta: np.ndarray, cpa: np.ndarray) -> TablePrediction:
    """A whole-distribution prediction (labels sorted by probability, as ALL_LABELS gives)."""
    cta_ids, cpa_ids = np.argsort(-cta, axis=1, kind="stable"), np.argsort(-cpa, axis=1, kind="stable")
    return TablePrediction("t", cta_ids, np.take_along_axis(cta, cta_ids, 1).astype(np.float32),
                           cpa_ids, np.take_along_axis(cpa, cpa_ids, 1).astype(np.float32))


def test_decode_table_puts_the_chosen_label_first_and_leaves_the_subject_relation():
    counts = LabelRepeats({"cta": np.array([100, 100, 100]), "cpa": np.array([100, 100, 100])},
                          {"cta": np.array([0, 0, 90]), "cpa": np.array([0, 0, 0])})
    cta = np.array([[0.57, 0.33, 0.10], [0.49, 0.38, 0.13], [0.2, 0.1, 0.7]])
    cpa = np.array([[0.9, 0.05, 0.05], [0.6, 0.3, 0.1], [0.55, 0.4, 0.05]])
    out = decode_table(prediction(cta, cpa), counts, {"cta": 0.2, "cpa": 0.2})
    assert out.cta_ids[:, 0].tolist() == [0, 1, 2]
    assert sorted(out.cta_ids[1].tolist()) == [0, 1, 2]  # still every label, the chosen one first
    assert out.cta_probs[1, 0] == pytest.approx(0.38)
    assert out.cpa_ids[0, 0] == 0  # column 0: untouched
    assert out.cpa_ids[1:, 0].tolist() == [0, 1]  # columns 1, 2 no longer share relation 0
    untouched = decode_table(prediction(cta, cpa), counts, {"cta": 0.0, "cpa": 0.0})
    assert untouched.cta_ids[:, 0].tolist() == [0, 0, 2]


def test_predict_tables_decodes_one_read_tables_too():
    counts = LabelRepeats({"cta": np.array([100, 100, 100]), "cpa": np.array([100, 100, 100])},
                          {"cta": np.array([0, 0, 0]), "cpa": np.array([0, 0, 0])})
    cta = np.array([[0.57, 0.33, 0.10], [0.49, 0.38, 0.13]])
    cpa = np.array([[0.9, 0.05, 0.05], [0.6, 0.3, 0.1]])
    asked = []

    def run(reads, k):
        asked.append(k)
        whole = prediction(cta, cpa)
        return [TablePrediction(whole.table_id, whole.cta_ids[:, :k], whole.cta_probs[:, :k],
                                whole.cpa_ids[:, :k], whole.cpa_probs[:, :k])]

    plan = TableReads(reads=[object()], owners=[(0, 0, (0, 1))], num_tables=1)  # type: ignore[list-item]
    plain = predict_tables(run, plan, ["t"])
    assert plain[0].cta_ids[:, 0].tolist() == [0, 0] and asked == [1]
    joint = predict_tables(run, plan, ["t"], 1, table_decoder(counts, {"cta": 0.2, "cpa": 0.0}))
    assert joint[0].cta_ids.tolist() == [[0], [1]] and asked[-1] > 3

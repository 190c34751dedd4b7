"""F1 on cases worked out by hand."""

from __future__ import annotations

import pytest

from aegir.eval.metrics import f1_scores, headline, per_label_f1, reports_by_group, wall_minutes


def test_perfect_and_empty():
    assert f1_scores(["a", "b"], ["a", "b"]).micro_f1 == 1.0
    assert f1_scores(["a", "b"], ["a", "b"]).macro_f1 == 1.0
    assert f1_scores([], []).support == 0
    assert f1_scores([None, None], ["a", "b"]).support == 0  # unlabelled columns are not scored


def test_micro_and_macro_by_hand():
    gold = ["a", "a", "a", "b"]
    pred = ["a", "a", "b", "b"]
    scores = f1_scores(gold, pred)
    assert scores.micro_f1 == pytest.approx(3 / 4)
    # a: tp 2 fp 0 fn 1 → 4/5; b: tp 1 fp 1 fn 0 → 2/3
    assert scores.macro_f1 == pytest.approx((4 / 5 + 2 / 3) / 2)


def test_abstention_is_a_miss_not_a_false_positive():
    scores = f1_scores(["a", "b"], ["a", None])
    # tp 1, fp 0, fn 1 → 2/3 (precision 1, recall 1/2)
    assert scores.micro_f1 == pytest.approx(2 / 3)


def test_macro_only_over_gold_labels():
    # "c" is predicted but never gold: it lowers b's recall, it is not averaged itself
    scores = f1_scores(["a", "b"], ["a", "c"])
    assert scores.macro_f1 == pytest.approx((1.0 + 0.0) / 2)
    assert set(per_label_f1(["a", "b"], ["a", "c"])) == {"a", "b"}


def test_length_mismatch_is_an_error():
    with pytest.raises(ValueError):
        f1_scores(["a"], [])


def test_confusions_count_what_each_gold_label_was_taken_for():
    from aegir.eval.metrics import confusions

    gold = ["Date", "Date", "Date", "Date", "Country", None]
    pred = ["Date", "Number", "Number", "DateTime", "Country", "Date"]
    table = confusions(gold, pred, top=1)
    assert table["Date"] == {"support": 4, "correct": 1, "f1": per_label_f1(gold, pred)["Date"]["f1"],
                             "mistakes": [["Number", 2]]}
    assert table["Country"]["mistakes"] == [] and table["Country"]["correct"] == 1
    assert set(table) == {"Date", "Country"}  # unscored targets (gold None) are not counted


def test_headline_is_the_benchmark_mean_and_the_real_split():
    """`bench` averages every scored split but train, valid and real, each split weighing the
    same; `real` is the real split; a figure without its splits is left out."""
    def report(micro):
        return {"micro_f1": micro, "macro_f1": 1.0, "support": 3}

    scores = {"cta": {"train": report(99.0), "valid": report(90.0), "test": report(80.0),
                      "corner_cases": report(60.0), "wide": report(70.123), "real": report(55.5)},
              "cpa": {"valid": report(90.0), "real": report(40.0)}}
    assert headline(scores) == {"cta": {"bench": 70.04, "real": 55.5},
                                "cpa": {"real": 40.0}}
    assert headline({"cta": {"test": report(80.0)}}) == {"cta": {"bench": 80.0}}


def test_wall_minutes_names_the_stage():
    assert wall_minutes("phase3", 90.0) == {"minutes": {"phase3": 1.5}}


def test_reports_by_group_scores_each_groups_labelled_items_alone():
    gold = ["A", "B", None, "A", "C"]
    pred = ["A", "A", "B", "A", "C"]
    groups = ["Movie", "Movie", "Movie", "Book", "Book"]
    out = reports_by_group(gold, pred, groups)
    assert list(out) == ["Book", "Movie"]
    assert out["Book"] == {"micro_f1": 100.0, "macro_f1": 100.0, "support": 2}
    assert out["Movie"]["support"] == 2 and out["Movie"]["micro_f1"] == 50.0
    assert reports_by_group([None], ["A"], ["Movie"]) == {}
    # an item without a group (a table whose file name names no domain) counts as "unknown"
    assert set(reports_by_group(["A", "B"], ["A", "B"], [None, "Movie"])) == {"Movie", "unknown"}
    with pytest.raises(ValueError):
        reports_by_group(gold, pred, groups[:-1])

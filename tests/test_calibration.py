"""Confidence a user can act on (aegir.eval.calibration, the `calibrate` stage, `aegir annotate
--min-confidence` and its calibration): ECE, the temperature and logistic-map fits, the
out-of-family figures, the coverage curve, by hand and on a tiny checkpoint."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from aegir.calibration import StoredTargets, calibrate_checkpoints, checkpoint_targets
from aegir.cli import main
from aegir.config import PrepareConfig, parse_params
from aegir.data.dataset import load_examples
from aegir.data.prepare import prepare_dataset
from aegir.eval.calibration import (
    Scored,
    apply_map,
    coverage_curve,
    expected_calibration_error,
    fit_logistic,
    fit_map,
    fit_temperature,
    for_accuracy,
    map_prediction,
    maps_for,
    most_accurate,
    nll,
    out_of_family,
    reliability,
    temper,
)
from aegir.eval.calibration_report import (
    STORED,
    calibrate_checkpoint,
    evaluation_splits,
    summary_lines,
    target_families,
)
from aegir.eval.joint import label_repeats
from aegir.eval.predict import TablePrediction
from aegir.inference import evaluate_checkpoint
from aegir.labels import label_counts
from aegir.model.checkpoint import checkpoint_fingerprint, save_checkpoint
from aegir.model.network import AegirModel, preset
from conftest import ROOT, TINY_PARAMS_OVERRIDE

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CSV = "hotel,phone,zip\nHotel Adlon,+49 30 22610,01234\nThe Ritz,+44 20 7493 8181,W1J 9BR\n"


# --------------------------------------------------------------------------- by hand


def test_ece_on_a_hand_computed_example():
    # bins of width 1/15: 0.95 → bin 14, 0.45 → bin 6, 0.25 → bin 3
    confidences = np.array([0.95, 0.95, 0.45, 0.45, 0.25])
    correct = np.array([True, False, True, True, False])
    # |0.5 − 0.95|·2/5 + |1 − 0.45|·2/5 + |0 − 0.25|·1/5 = 0.18 + 0.22 + 0.05
    assert expected_calibration_error(confidences, correct) == pytest.approx(0.45)
    bins = reliability(confidences, correct)
    assert len(bins) == 15 and [b["count"] for b in bins if b["count"]] == [1, 2, 2]
    assert bins[14] == {"lower": pytest.approx(14 / 15, abs=1e-6), "upper": 1.0, "count": 2, "confidence": 0.95,
                        "accuracy": 0.5}
    assert bins[0]["confidence"] is None and bins[0]["accuracy"] is None
    # a confidence of exactly 1.0 falls in the last bin; a perfectly calibrated set scores 0
    assert expected_calibration_error(np.array([1.0, 1.0]), np.array([True, True])) == 0.0
    assert expected_calibration_error(np.array([]), np.array([])) == 0.0
    # 2 bins: [0, 0.5) and [0.5, 1]: |0 − 0.3| · 1/3 + |1 − 0.75| · 2/3
    assert expected_calibration_error(np.array([0.3, 0.7, 0.8]), np.array([False, True, True]), bins=2) == \
        pytest.approx(0.3 / 3 + 0.25 * 2 / 3)


def test_the_coverage_curve_on_a_hand_example():
    confidences = np.array([0.9, 0.8, 0.6, 0.3])
    correct = np.array([True, True, False, True])
    curve = coverage_curve(confidences, correct, thresholds=(0.0, 0.5, 0.7, 0.85, 0.95))
    assert [r["kept"] for r in curve] == [4, 3, 2, 1, 0]
    assert [r["coverage"] for r in curve] == [1.0, 0.75, 0.5, 0.25, 0.0]
    assert [r["accuracy"] for r in curve] == [0.75, pytest.approx(2 / 3, abs=1e-6), 1.0, 1.0, None]
    # 95 %: first reached at P = 0.7, which keeps half the columns
    assert for_accuracy(curve) == {"min_confidence": 0.7, "coverage": 0.5, "accuracy": 1.0}
    assert for_accuracy(curve, target=1.01) is None
    assert most_accurate(curve) == {"min_confidence": 0.7, "coverage": 0.5, "accuracy": 1.0}
    # a confidence equal to P is kept
    assert coverage_curve(np.array([0.5]), np.array([True]), thresholds=(0.5,))[0]["kept"] == 1


def test_the_temperature_fit_recovers_a_known_temperature_and_never_changes_a_label():
    rng = np.random.default_rng(0)
    logits = rng.normal(0.0, 3.0, size=(4000, 10))
    true_t = 2.0  # the labels are drawn from softmax(z / 2): the model's softmax(z) is overconfident
    truth = temper(np.exp(logits), true_t)
    gold = np.array([rng.choice(10, p=row) for row in truth])
    probs = temper(np.exp(logits), 1.0)
    fitted = fit_temperature(probs, gold)
    assert fitted == pytest.approx(true_t, rel=0.06)
    assert fitted == fit_temperature(probs, gold)  # deterministic
    assert nll(probs, gold, fitted) < min(nll(probs, gold, 1.0), nll(probs, gold, fitted * 1.2),
                                          nll(probs, gold, fitted / 1.2))
    # sharpening the other way: labels from softmax(2z) give T ≈ 0.5
    sharp_gold = np.array([rng.choice(10, p=row) for row in temper(np.exp(logits), 0.5)])
    assert fit_temperature(probs, sharp_gold) == pytest.approx(0.5, rel=0.06)
    for t in (0.05, 0.5, fitted, 20.0):
        tempered = temper(probs, t)
        assert np.array_equal(tempered.argmax(axis=1), probs.argmax(axis=1))
        assert np.allclose(tempered.sum(axis=1), 1.0)
    # a calibrated model's confidences: ECE drops
    scored = Scored(probs, probs.argmax(axis=1), gold)
    assert expected_calibration_error(scored.confidences(fitted), scored.correct) < \
        expected_calibration_error(scored.confidences(), scored.correct) / 3
    assert fit_temperature(np.zeros((0, 10)), np.zeros(0, dtype=np.int64)) == 1.0


def test_the_logistic_fit_recovers_a_known_map_and_calibrates():
    rng = np.random.default_rng(0)
    confidences = rng.uniform(0.05, 0.95, 20000)
    right = rng.uniform(size=confidences.size) < apply_map(confidences, 2.0, -0.5)  # P(right) = σ(2·logit(c) − 0.5)
    a, b = fit_logistic(confidences, right)
    assert abs(a - 2.0) < 0.1 and abs(b + 0.5) < 0.1
    assert (a, b) == fit_logistic(confidences, right)  # deterministic
    assert expected_calibration_error(apply_map(confidences, a, b), right) < \
        expected_calibration_error(confidences, right) / 3
    mapped = apply_map(confidences, a, b)
    assert np.array_equal(np.argsort(mapped, kind="stable"), np.argsort(confidences, kind="stable"))  # monotone
    assert fit_logistic(np.zeros(0), np.zeros(0, dtype=bool)) == (1.0, 0.0)  # no targets: the identity
    all_right = fit_logistic(np.array([0.6, 0.7, 0.9]), np.array([True, True, True]))
    assert all(np.isfinite(all_right)) and apply_map(np.array([0.6]), *all_right)[0] > 0.9
    assert apply_map(np.array([0.3, 0.8]), 1.0, 0.0) == pytest.approx([0.3, 0.8])  # (1, 0) is the identity
    # confidences that run against being right: the slope stays at its floor, b fits the accuracy
    reversed_right = rng.uniform(size=confidences.size) < 1.0 - confidences
    a, b = fit_logistic(confidences, reversed_right)
    assert a == 0.05 and apply_map(confidences, a, b).mean() == pytest.approx(reversed_right.mean(), abs=0.01)


def test_the_logistic_fit_converges_where_a_full_newton_step_overshoots():
    """Confidences piled near 1 (log-odds up to ~10) whose outcomes follow a flat map: a full
    Newton step from (1, 0) overshoots and the plain iteration ran off to a ≈ 2e9 (a Phase 3
    control's CPA on `real` did); the halved steps find the map."""
    rng = np.random.default_rng(3)
    confidences = 1.0 / (1.0 + np.exp(-rng.normal(2.5, 3.0, 800)))
    right = rng.uniform(size=confidences.size) < apply_map(confidences, 0.47, -0.14)
    a, b = fit_logistic(confidences, right)
    assert abs(a - 0.47) < 0.1 and abs(b + 0.14) < 0.3


def test_the_beta_fit_recovers_a_known_map_and_keeps_the_order():
    """σ(a·ln c − d·ln(1 − c) + b) with a ≠ d (accuracy steep at low confidence, flat near the top,
    as a label-smoothed model's): the beta fit finds it and calibrates better than the logistic
    map, which has one slope for both ends."""
    rng = np.random.default_rng(0)
    confidences = rng.uniform(0.02, 0.98, 40000)
    truth = apply_map(confidences, 2.0, 1.0, 0.4)  # a = 2, b = 1, d = 0.4
    right = rng.uniform(size=confidences.size) < truth
    a, b, d = fit_map(confidences, right)
    assert abs(a - 2.0) < 0.15 and abs(b - 1.0) < 0.15 and abs(d - 0.4) < 0.1
    assert (a, b, d) == fit_map(confidences, right)  # deterministic
    beta = expected_calibration_error(apply_map(confidences, a, b, d), right)
    assert beta < expected_calibration_error(apply_map(confidences, *fit_logistic(confidences, right)), right) / 2
    mapped = apply_map(confidences, a, b, d)
    assert np.array_equal(np.argsort(mapped, kind="stable"), np.argsort(confidences, kind="stable"))  # monotone
    # the logistic map is the beta map with d = a
    assert apply_map(confidences, 1.7, -0.3) == pytest.approx(apply_map(confidences, 1.7, -0.3, 1.7))
    assert fit_map(np.zeros(0), np.zeros(0, dtype=bool)) == (1.0, 0.0, 1.0)  # no targets: the identity
    assert apply_map(np.array([0.3, 0.8]), 1.0, 0.0, 1.0) == pytest.approx([0.3, 0.8])
    # outcomes drawn from a logistic map: the beta fit finds d ≈ a
    logistic = rng.uniform(size=confidences.size) < apply_map(confidences, 1.5, 0.2)
    a, b, d = fit_map(confidences, logistic)
    assert abs(a - 1.5) < 0.15 and abs(d - 1.5) < 0.15 and abs(b - 0.2) < 0.2
    # confidences that run against being right: both slopes held at their floor, b fits the accuracy
    reversed_right = rng.uniform(size=confidences.size) < 1.0 - confidences
    a, b, d = fit_map(confidences, reversed_right)
    assert a == d == 0.05 and apply_map(confidences, a, b, d).mean() == pytest.approx(reversed_right.mean(), abs=0.01)
    # right mostly at low confidence and at the top: one slope is held (the map stays increasing)
    u_shaped = rng.uniform(size=confidences.size) < np.where(confidences < 0.5, 0.9 - confidences, confidences)
    a, b, d = fit_map(confidences, u_shaped)
    assert min(a, d) >= 0.05 and np.all(np.diff(apply_map(np.linspace(0.01, 0.99, 99), a, b, d)) > 0)


def test_out_of_family_never_maps_a_family_by_its_own_targets():
    """A family's out-of-family confidences do not move when its own targets' outcomes change
    (what makes the stage's out-of-family ECE an out-of-sample figure); another family's do."""
    rng = np.random.default_rng(1)
    n = 300
    confidences = rng.uniform(0.1, 0.9, n)
    right = rng.uniform(size=n) < confidences
    groups = np.repeat(np.array(["a", "b", "c"]), n // 3)
    before = out_of_family(confidences, right, groups)
    flipped = right.copy()
    flipped[groups == "a"] = True
    after = out_of_family(confidences, flipped, groups)
    assert np.array_equal(before[groups == "a"], after[groups == "a"])
    assert not np.array_equal(before[groups == "b"], after[groups == "b"])
    # each family's is the map fitted on the others
    held = groups == "c"
    assert before[held] == pytest.approx(apply_map(confidences[held], *fit_map(confidences[~held], right[~held])))
    # the logistic map, as scripts/calibration_lofo.py compares it
    logistic = out_of_family(confidences, right, groups, fit=fit_logistic)
    assert logistic[held] == pytest.approx(apply_map(confidences[held], *fit_logistic(confidences[~held], right[~held])))
    assert out_of_family(confidences, right, np.full(n, "a")) is None  # one family: nothing to fit out of it


def test_a_mapped_prediction_keeps_its_labels_in_order_and_the_others_ratios():
    # the chosen label (joint decoding) first though not the most probable
    ids = np.array([[2, 0, 1], [1, 2, 0]])
    probs = np.array([[0.3, 0.5, 0.2], [0.7, 0.2, 0.1]], dtype=np.float32)
    prediction = TablePrediction("t", ids, probs, ids.copy(), probs.copy())
    out = map_prediction(prediction, {"cta": (2.0, 0.0), "cpa": (1.0, 1.0)})
    assert out.cta_ids.tolist() == ids.tolist() and out.cpa_ids.tolist() == ids.tolist()
    first = apply_map(np.array([0.3, 0.7]), 2.0, 0.0)
    assert out.cta_probs[:, 0] == pytest.approx(first)
    # the others fill the rest, their ratios kept: 0.5 : 0.2 in row 0
    assert out.cta_probs[0, 1:] == pytest.approx(np.array([0.5, 0.2]) * (1 - first[0]) / 0.7)
    assert out.cta_probs.sum(axis=1) == pytest.approx([1.0, 1.0])
    assert out.cpa_probs[1, 0] > 0.7  # b = 1 raises every confidence
    # a top-k cut (the rows hold only the first k labels) maps the same first column
    cut = map_prediction(TablePrediction("t", ids[:, :1], probs[:, :1], ids[:, :1], probs[:, :1]),
                         {"cta": (2.0, 0.0), "cpa": (1.0, 1.0)})
    assert cut.cta_probs[:, 0] == pytest.approx(first)
    # a beta map (a, b, d)
    beta = map_prediction(prediction, {"cta": (2.0, 0.0, 0.5), "cpa": (1.0, 0.0, 1.0)})
    assert beta.cta_probs[:, 0] == pytest.approx(apply_map(np.array([0.3, 0.7]), 2.0, 0.0, 0.5))
    assert beta.cpa_probs == pytest.approx(probs)  # (1, 0, 1) is the identity


def test_maps_are_found_by_fingerprint():
    calibration = {"checkpoints": {"models/x": {"fingerprint": "abc", "map": {"cta": {"a": 1.5, "b": -0.2},
                                                                             "cpa": {"a": 0.8, "b": 0.1}}}}}
    # a map without d is a logistic one (d = a), as the stage wrote them before the beta map
    assert maps_for(calibration, "abc") == {"cta": (1.5, -0.2, 1.5), "cpa": (0.8, 0.1, 0.8)}
    calibration["checkpoints"]["models/x"]["map"]["cpa"]["d"] = 0.3
    assert maps_for(calibration, "abc")["cpa"] == (0.8, 0.1, 0.3)
    assert maps_for(calibration, "other") is None
    for bad in (-1, 0, float("nan"), "1", None):
        calibration["checkpoints"]["models/x"]["map"]["cpa"]["d"] = bad
        with pytest.raises(Exception, match="bad calibration map"):
            maps_for(calibration, "abc")
    calibration["checkpoints"]["models/x"]["map"]["cpa"]["d"] = 0.3
    for bad in (-1, 0, float("nan"), "1", True):
        calibration["checkpoints"]["models/x"]["map"]["cta"]["a"] = bad
        with pytest.raises(Exception, match="bad calibration map"):
            maps_for(calibration, "abc")
    del calibration["checkpoints"]["models/x"]["map"]
    with pytest.raises(Exception, match="bad calibration map"):
        maps_for(calibration, "abc")


# --------------------------------------------------------------------------- a tiny checkpoint


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, Path]:
    """Tiny prepared data (its valid and real splits) and two untrained checkpoints: one reading
    whole tables, one in column groups of 4, two views, labels decoded jointly."""
    root = tmp_path_factory.mktemp("calibration")
    params = parse_params({k: v for k, v in TINY_PARAMS_OVERRIDE.items() if k in ("synthetic", "prepare")})
    prepare_dataset(params, root / "prepared", root / "stats.json")
    (root / "data").mkdir()  # the two splits the stage needs, for speed: it scores every split it finds
    for split in ("valid", "real"):
        shutil.copy(root / "prepared" / f"{split}.parquet", root / "data" / f"{split}.parquet")
    prepare = asdict(PrepareConfig(byte_budget=512, max_rows=6))
    torch.manual_seed(0)
    plain = save_checkpoint(root / "plain", AegirModel(preset("tiny")), {"params": {"prepare": prepare}})
    torch.manual_seed(1)
    repeats = label_repeats([], label_counts()).to_json()
    joint = save_checkpoint(root / "joint", AegirModel(preset("tiny")), {
        "params": {"prepare": prepare, "reading": {"columns": 4, "views": 2, "joint_cta": 0.05, "joint_cpa": 0.2}},
        "label_repeats": repeats})
    return {"data": root / "data", "plain": plain, "joint": joint, "root": root}


def digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def calibrate_stage(*args: str | Path) -> subprocess.CompletedProcess:
    """The calibrate stage run as dvc.yaml runs it, in a fresh interpreter (nothing outside
    aegir/stages imports a stage)."""
    return subprocess.run([sys.executable, "-m", "aegir.stages.calibrate", *map(str, args)], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_the_stage_writes_the_same_bytes_twice_and_its_accuracy_is_the_scored_f1(tiny, tmp_path):
    args = ["--data", str(tiny["data"]), "--checkpoint", str(tiny["plain"]), "--checkpoint", str(tiny["joint"])]
    for out in ("a", "b"):
        proc = calibrate_stage(*args, "--out", tmp_path / out)
        assert proc.returncode == 0, proc.stderr
        assert f"calibrate: {tiny['joint'].as_posix()} CPA: map a=" in proc.stdout
    first = digest(tmp_path / "a")
    assert set(first) == {"calibration.json", "figures/reliability.png", "figures/coverage.png"}
    assert first == digest(tmp_path / "b")
    content = json.loads((tmp_path / "a" / "calibration.json").read_text())
    assert content["fit_split"] == "real" and content["thresholds"][:3] == [0.0, 0.05, 0.1]
    assert len(content["thresholds"]) == 22 and content["thresholds"][-3:] == [0.95, 0.97, 0.99]
    families = target_families(load_examples(tiny["data"], "real"))
    assert all(len(set(families[task])) >= 2 for task in ("cta", "cpa"))  # so there are out-of-family figures
    for name in ("plain", "joint"):
        entry = content["checkpoints"][tiny[name].as_posix()]
        assert entry["fingerprint"] == checkpoint_fingerprint(tiny[name])
        assert all(entry["map"][task]["a"] > 0 for task in ("cta", "cpa"))
        scores = evaluate_checkpoint(tiny[name], tiny["data"])
        for split, by_task in entry["splits"].items():
            for task, figures in by_task.items():
                # the accuracy of the labels calibrated is the micro-F1 every stage reports: the
                # same reading, the same (jointly decoded) labels
                assert figures["n"] == scores[split][task]["support"], (name, split, task)
                assert 100 * figures["accuracy"] == pytest.approx(scores[split][task]["micro_f1"], abs=1e-3)
        for task in ("cta", "cpa"):
            real = entry["real"][task]
            held = real["out_of_family"]
            assert held["families"] == len(set(families[task]))
            # the curves: of the model's own confidences, and of the mapped ones out of family (what
            # `annotate --min-confidence` compares by default), the same columns
            assert [row["min_confidence"] for row in real["coverage"]] == content["thresholds"]
            assert [row["min_confidence"] for row in held["coverage"]] == content["thresholds"]
            assert real["coverage"][0]["coverage"] == 1.0
            n = entry["splits"]["real"][task]["n"]
            for key, curve in (("before", real["coverage"]), ("out_of_family", held["coverage"])):
                bins = real["reliability"][key]
                checked = 0
                for row in curve:  # where P is a bin edge (0, 0.2, 0.4, 0.6, 0.8), the columns kept
                    edge = round(row["min_confidence"] * len(bins), 9)  # are those of the bins from it
                    if edge == int(edge):
                        assert row["kept"] == sum(b["count"] for b in bins[int(edge):]), (key, row)
                        checked += 1
                assert checked == 5
                assert curve[0]["kept"] == n
                assert sum(b["count"] for b in bins) == n
            # fitted on these very targets, the map's own ECE on real is no worse than the model's
            # (a maximum-likelihood fit of the same outcomes); out of family it need not be
            assert entry["splits"]["real"][task]["after"]["ece"] <= entry["splits"]["real"][task]["before"]["ece"] + 0.02


def test_the_stage_names_missing_data(tmp_path, tiny):
    proc = calibrate_stage("--data", tmp_path / "nothing", "--checkpoint", tiny["plain"], "--out", tmp_path / "out")
    assert proc.returncode == 2 and not (tmp_path / "out").exists()
    assert f"calibrate: error: {tmp_path / 'nothing'}" in proc.stderr, proc.stderr


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_min_confidence_gives_unknown_below_p_and_validates_p(tiny, tmp_path):
    table = tmp_path / "t.csv"
    table.write_text(CSV)
    ckpt = tiny["plain"]
    # an untrained model's confidences are far below 0.9: every label withheld, its confidence kept
    out = json.loads(invoke("annotate", table, "-c", ckpt, "--json", "--min-confidence", "0.9").stdout)
    raw = json.loads(invoke("annotate", table, "-c", ckpt, "--json").stdout)
    assert out["min_confidence"] == 0.9
    for column, before in zip(out["columns"], raw["columns"]):
        assert column["cta"][0] == {"label": "unknown", "confidence": before["cta"][0]["confidence"],
                                    "withheld": before["cta"][0]["label"]}
        if column["index"]:
            assert column["cpa"][0]["label"] == "unknown" and column["cpa"][0]["withheld"] == before["cpa"][0]["label"]
    text = invoke("annotate", table, "-c", ckpt, "--min-confidence", "0.9")
    assert text.exit_code == 0
    shown = f"unknown ({raw['columns'][1]['cta'][0]['label']} {raw['columns'][1]['cta'][0]['confidence']:.2f} < 0.9)"
    assert shown in text.stdout
    # P = 0 keeps every label; a P between the confidences withholds exactly those below it
    assert json.loads(invoke("annotate", table, "-c", ckpt, "--json", "--min-confidence", "0").stdout)["columns"] \
        == raw["columns"]
    confidences = sorted(c["cta"][0]["confidence"] for c in raw["columns"])
    p = (confidences[0] + confidences[-1]) / 2
    mid = json.loads(invoke("annotate", table, "-c", ckpt, "--json", "--min-confidence", p).stdout)
    assert [c["cta"][0]["label"] == "unknown" for c in mid["columns"]] == \
        [c["cta"][0]["confidence"] < p for c in raw["columns"]]
    # --out: the label `unknown`, the confidence kept; the top-k list keeps the model's candidates
    rows_file = tmp_path / "labels.csv"
    assert invoke("annotate", table, "-c", ckpt, "--out", rows_file, "--min-confidence", "0.9", "-k", "2").exit_code == 0
    rows = list(csv.DictReader(rows_file.open()))
    assert {r["cta_label"] for r in rows} == {"unknown"}
    assert [float(r["cta_confidence"]) for r in rows] == [c["cta"][0]["confidence"] for c in raw["columns"]]
    assert json.loads(rows[1]["cta_top_k"])[0]["label"] == raw["columns"][1]["cta"][0]["label"]
    # P outside [0, 1] or not a number: a usage error naming the option, exit status 2
    for bad, says in (("1.5", "not between 0 and 1"), ("-0.1", "not between 0 and 1"), ("nan", "not between 0 and 1"),
                      ("80%", "is not a number")):
        result = CliRunner().invoke(main, ["annotate", str(table), "-c", str(ckpt), "--min-confidence", bad])
        assert result.exit_code == 2 and "--min-confidence" in result.output and says in result.output, result.output
    assert "--min-confidence P" in invoke("annotate", "--help").stdout


def test_annotate_applies_the_map_fitted_for_its_checkpoint(tiny, tmp_path):
    table = tmp_path / "t.csv"
    table.write_text(CSV)
    ckpt = tiny["plain"]
    calibration = tmp_path / "calibration.json"
    calibration.write_text(json.dumps({"real_split": "real", "checkpoints": {"elsewhere/model": {
        "fingerprint": checkpoint_fingerprint(ckpt), "map": {"cta": {"a": 1.0, "b": 2.0}, "cpa": {"a": 1.0, "b": -2.0}},
        "real": {"cta": {"out_of_family": {"ece": 0.031}}, "cpa": {"out_of_family": {"ece": 0.052}}}}}}))
    raw = json.loads(invoke("annotate", table, "-c", ckpt, "--json", "-k", "3", "--no-calibration").stdout)
    mapped = json.loads(invoke("annotate", table, "-c", ckpt, "--json", "-k", "3", "--calibration", calibration).stdout)
    assert "calibration" not in raw and mapped["calibration"] == {"cta": {"a": 1.0, "b": 2.0, "d": 1.0},
                                                              "cpa": {"a": 1.0, "b": -2.0, "d": 1.0}}
    for before, after in zip(raw["columns"], mapped["columns"]):
        assert [a["label"] for a in after["cta"]] == [a["label"] for a in before["cta"]]  # labels unchanged
        assert after["cta"][0]["confidence"] == pytest.approx(
            float(apply_map(np.array([before["cta"][0]["confidence"]]), 1.0, 2.0)[0]), abs=2e-4)  # b > 0 raises
        if after["cpa"]:
            assert [a["label"] for a in after["cpa"]] == [a["label"] for a in before["cpa"]]
            assert after["cpa"][0]["confidence"] < before["cpa"][0]["confidence"]  # b < 0 lowers
    text = invoke("annotate", table, "-c", ckpt, "--calibration", calibration)
    assert (f"confidences: calibrated by {calibration} (a map fitted on real tables; expected calibration error "
            f"on families held out of the fit: CTA 3.1 %, CPA 5.2 %)") in text.stdout
    # --min-confidence compares the mapped confidence: b = 2 lifts every CTA label over P = the
    # highest raw one
    p = max(c["cta"][0]["confidence"] for c in raw["columns"]) + 1e-3
    kept = json.loads(invoke("annotate", table, "-c", ckpt, "--json", "--calibration", calibration,
                             "--min-confidence", p).stdout)
    assert all(c["cta"][0]["label"] != "unknown" for c in kept["columns"])
    # a file without this checkpoint: the model's own confidences, said so
    (tmp_path / "other.json").write_text(json.dumps({"checkpoints": {}}))
    other = invoke("annotate", table, "-c", ckpt, "--calibration", tmp_path / "other.json")
    assert "uncalibrated" in other.stdout and "has no map for this checkpoint" in other.stdout
    assert json.loads(invoke("annotate", table, "-c", ckpt, "--json", "-k", "3", "--calibration",
                             tmp_path / "other.json").stdout) == raw
    # a named file that is missing: a clear error
    missing = CliRunner().invoke(main, ["annotate", str(table), "-c", str(ckpt), "--calibration",
                                        str(tmp_path / "nope.json")])
    assert missing.exit_code == 2 and "calibrate" in missing.output


def test_annotate_calibrates_by_default_with_the_pipelines_file(tiny, tmp_path, monkeypatch):
    """Without --calibration, results/calibrate/calibration.json under the working directory is
    used when it holds the checkpoint; --no-calibration gives the model's own."""
    table = tmp_path / "t.csv"
    table.write_text(CSV)
    ckpt = tiny["plain"].resolve()
    monkeypatch.chdir(tmp_path)
    raw = json.loads(invoke("annotate", table, "-c", ckpt, "--json", "--no-calibration").stdout)
    assert json.loads(invoke("annotate", table, "-c", ckpt, "--json").stdout) == raw  # no file: own
    assert "no results/calibrate/calibration.json" in invoke("annotate", table, "-c", ckpt).stdout
    (tmp_path / "results/calibrate").mkdir(parents=True)
    (tmp_path / "results/calibrate/calibration.json").write_text(json.dumps({"real_split": "real", "checkpoints": {
        "m": {"fingerprint": checkpoint_fingerprint(ckpt), "map": {t: {"a": 2.0, "b": 0.5} for t in ("cta", "cpa")}}}}))
    mapped = json.loads(invoke("annotate", table, "-c", ckpt, "--json").stdout)
    assert mapped["calibration"]["cta"] == {"a": 2.0, "b": 0.5, "d": 2.0} and mapped["columns"] != raw["columns"]
    assert json.loads(invoke("annotate", table, "-c", ckpt, "--json", "--no-calibration").stdout) == raw
    assert "no out-of-family figure" in invoke("annotate", table, "-c", ckpt).stdout


# --------------------------------------------------------------------------- the distributions stages stored


def store_reads(directory: Path, reads: dict, data: Path, extra: dict | None = None) -> None:
    """`directory`/eval_reads.safetensors as the stages write it: per split (its reads, their
    predictions with every label), the checkpoint's recorded settings as metadata."""
    from aegir.config import SPLITS
    from aegir.data.prepared import fingerprint
    from aegir.eval.reads import READS_FILE, dense_distributions, save_eval_reads

    recorded = json.loads((directory / "config.json").read_text())["params"]
    dense = {split: (split_reads, found if isinstance(found, dict) else dense_distributions(found, label_counts()))
             for split, (split_reads, found) in reads.items()}
    save_eval_reads(directory / READS_FILE, dense,
                    {"checkpoint": checkpoint_fingerprint(directory), "data": fingerprint(data, SPLITS),
                     "prepare": recorded["prepare"], "reading": recorded.get("reading"), **(extra or {})})


@pytest.fixture(scope="module")
def stored(tiny) -> dict:
    """Every prepared split (stored reads are tied to all of them), 4 tables of each for speed,
    and a checkpoint of each kind with the distributions its stage stores: a whole-table model,
    a model reading column groups of 4 in 2 views with joint decoding, a Phase 3 orchestrator,
    and a Phase 4 swarm (over its own copy of the orchestrator) whose policy spawns sub-agents
    on tables of 4 columns or more and nothing on the others. Each store holds the bits
    re-scoring computes (the same forward on the same batches): what the stages store, up to
    the float rounding of their batches."""
    import pyarrow.parquet as pq

    from aegir.data.dataset import load_examples
    from aegir.data.prepared import read_split, split_path, tables_from_arrow
    from aegir.eval.grouped import ALL_LABELS, split_reads
    from aegir.eval.predict import predict
    from aegir.inference import load_for_inference
    from aegir.labels import cta_vocab
    from aegir.orchestrator.checkpoint import save_orchestrator
    from aegir.orchestrator.model import build_orchestrator
    from aegir.swarm.evaluate import merged_distributions
    from aegir.swarm.model import Swarm, load_swarm, save_swarm
    from aegir.swarm.policy import SpawnPolicy, spawn_options
    from aegir.swarm.spawn import SwarmMerge, family_of_labels
    from test_swarm import open_gates
    from test_swarm import tiny as trained_tiny

    root, data = tiny["root"] / "stored", tiny["root"] / "prepared4"
    data.mkdir()
    for path in sorted((tiny["root"] / "prepared").glob("*.parquet")):
        pq.write_table(pq.read_table(path).slice(0, 4), data / path.name)
    splits = evaluation_splits(data)
    prepare = asdict(PrepareConfig(byte_budget=512, max_rows=6))
    reading = {"columns": 4, "views": 2, "joint_cta": 0.05, "joint_cpa": 0.2}
    examples = {split: load_examples(data, split) for split in splits}
    repeats = label_repeats([(e.cta_labels, e.cpa_labels) for e in examples["test"]], label_counts()).to_json()
    params = {"params": {"prepare": prepare, "reading": reading}, "label_repeats": repeats}
    torch.manual_seed(2)
    out = {"data": data, "plain": save_checkpoint(root / "plain", AegirModel(preset("tiny")),
                                                  {"params": {"prepare": prepare, "reading": {"columns": 0,
                                                                                              "views": 1}}}),
           "grouped": save_checkpoint(root / "grouped", AegirModel(preset("tiny")), params)}
    primary = trained_tiny(0)
    orch = build_orchestrator(primary, {"same": trained_tiny(1)}, 0.3)
    open_gates(orch)
    dirs = {name: save_checkpoint(root / "phase1" / name, specialist.model, params)
            for name, specialist in zip(orch.specialist_names, orch.specialists)}
    out["orchestrator"] = save_orchestrator(root / "phase3", orch, dirs, params)
    for kind in ("plain", "grouped", "orchestrator"):  # as aegir.inference reads them (its batches)
        annotator = load_for_inference(out[kind])
        reads = {}
        for split in splits:
            plan = split_reads(data, split, examples[split], annotator.read_columns, annotator.read_views,
                               annotator.prepare)
            reads[split] = (plan.reads, predict(annotator.model, plan.reads, top_k=ALL_LABELS,
                                                forward=annotator.forward))
        store_reads(out[kind], reads, data)

    # the swarm: Phase 3's reads of each table as the swarm reads them (its batches of 8), then the
    # swarm's merged distributions of its learned policy (uncapped), before the joint decoding
    phase3 = save_orchestrator(root / "swarm_phase3", orch, dirs, params)
    policy = SpawnPolicy(primary.config.d_model, spawn_options(4), len(dirs))
    with torch.no_grad():
        policy.count_head.bias.copy_(torch.tensor([4.0, 0.0, 0.0, 12.0]))  # 4 sub-agents where allowed, else none
        policy.deep_head.bias.fill_(-12.0)
    swarm = Swarm(orch, {name: s.model for name, s in zip(orch.specialist_names, orch.specialists)}, policy,
                  SwarmMerge(len(dirs), family_of_labels(cta_vocab())[0]))
    out["swarm"] = save_swarm(root / "phase4", swarm, phase3, dirs, {"params": {"prepare": prepare}})
    swarm, _ = load_swarm(out["swarm"])
    phase3_reads, swarm_reads, spawned = {}, {}, []
    for split in splits:
        tables = tables_from_arrow(read_split(data, split))
        plan = swarm.reading.plan(tables, examples[split], PrepareConfig(**prepare), split_path(data, split))
        phase3_reads[split] = (plan.reads, predict(swarm.orch, plan.reads, 8, top_k=ALL_LABELS,
                                                   forward=swarm.orch.annotate))
        results = swarm.annotate(tables, examples[split], PrepareConfig(**prepare), data)
        swarm_reads[split] = (examples[split], merged_distributions(results))  # as phase4 stores them
        spawned += [r.spawned for r in results]
    store_reads(phase3, phase3_reads, data)
    store_reads(out["swarm"], swarm_reads, data, {"policy": "learned", "max_subagents": 4,
                                                  "reading": params["params"]["reading"]})
    out["spawned"] = spawned
    return out


def assert_same_targets(one: dict, other: dict) -> None:
    assert list(one) == list(other)
    for split in one:
        for task in ("cta", "cpa"):
            a, b = one[split][task], other[split][task]
            assert len(a.gold) and np.array_equal(a.gold, b.gold), (split, task)
            assert np.array_equal(a.chosen, b.chosen), (split, task)
            assert a.probs.dtype == b.probs.dtype and np.array_equal(a.probs, b.probs), (split, task)


@pytest.mark.parametrize("kind", ["plain", "grouped", "orchestrator", "swarm"])
def test_the_stored_distributions_give_the_targets_re_scoring_gives(stored, kind):
    """The calibrate stage reads each checkpoint's stored distributions instead of running it:
    the same targets, bit for bit — the reads merged (column groups, row views), the labels the
    recorded joint decoding chose, the swarm's merged distributions (and, where it spawned
    nothing, the orchestrator's reading itself)."""
    data, checkpoint = stored["data"], stored[kind]
    splits = evaluation_splits(data)
    assert len(splits) == 7
    taken, source = StoredTargets(data).targets(checkpoint, splits)
    assert source == STORED
    rescored = checkpoint_targets(checkpoint, data, splits)
    assert_same_targets({split: taken[split] for split in splits}, rescored)
    families = target_families(load_examples(data, "real"))
    assert calibrate_checkpoint(taken, families) == calibrate_checkpoint(rescored, families)
    if kind == "swarm":  # both kinds of table: spawned on (merged), and left as the orchestrator read it
        assert 0 < sum(stored["spawned"]) < len(stored["spawned"])


@pytest.mark.parametrize("kind", ["orchestrator", "swarm"])
def test_lofo_scores_an_orchestrator_and_a_swarm_as_evaluate_does(stored, kind):
    """scripts/lofo.py's predictions on `real` (stored reads for the orchestrator, re-scored for
    a Phase 4 swarm) score what `aegir evaluate` scores for the checkpoint."""
    import importlib.util

    from aegir.eval.metrics import f1_scores
    from aegir.eval.predict import gold_and_predicted

    spec = importlib.util.spec_from_file_location("lofo", ROOT / "scripts" / "lofo.py")
    lofo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lofo)
    data, checkpoint = stored["data"], stored[kind]
    examples, predictions = lofo.real_predictions(checkpoint, StoredTargets(data))
    assert [e.table_id for e in examples] == [e.table_id for e in load_examples(data, "real")]
    pairs = gold_and_predicted(examples, predictions)
    expected = evaluate_checkpoint(checkpoint, data, ["real"])["real"]
    for task in ("cta", "cpa"):
        assert round(100 * f1_scores(*pairs[task]).micro_f1, 4) == pytest.approx(expected[task]["micro_f1"], abs=1e-3)


def test_a_swarm_store_without_spawn_flags_is_re_scored(stored):
    """Which tables the swarm spawned on decides whether a table takes the merged distributions
    or the orchestrator's reading: a store that does not say (an older phase4) is not guessed
    from, its splits are re-scored."""
    from safetensors import safe_open

    from aegir.eval.reads import READS_FILE, StoredReads

    data, splits = stored["data"], evaluation_splits(stored["data"])
    # beside the original: the swarm names its Phase 3 orchestrator by a relative path
    copy = shutil.copytree(stored["swarm"], stored["swarm"].parent / "phase4_without_flags", dirs_exist_ok=True)
    with safe_open(str(copy / READS_FILE), framework="pt") as f:
        assert {key.split("/")[0] for key in f.keys() if key.endswith("/spawned")} == set(splits)  # noqa: SIM118
    rewrite_store(copy, drop="spawned")
    store, _ = StoredReads.open(copy, {})
    examples = load_examples(data, splits[0])
    assert store.split(splits[0], examples) is not None and store.table_flags(splits[0], examples, "spawned") is None
    taken, source = StoredTargets(data).targets(copy, splits)
    assert taken == {} and source != STORED  # nothing taken from the store: the caller re-scores every split
    assert_same_targets(StoredTargets(data).targets(stored["swarm"], splits)[0], checkpoint_targets(copy, data, splits))


def rewrite_store(directory: Path, splits: tuple[str, ...] | None = None, drop: str | None = None, **changed) -> None:
    """`directory`'s stored reads with only `splits` (None: all), without the per-split tensor
    `drop`, and with the metadata `changed`."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    from aegir.eval.reads import METADATA_KEY, READS_FILE

    path = directory / READS_FILE
    with safe_open(str(path), framework="pt") as f:
        tensors = {key: f.get_tensor(key) for key in f.keys()}  # noqa: SIM118 (a safetensors handle)
        metadata = json.loads(f.metadata()[METADATA_KEY])
    keep = lambda key: splits is None or key.split("/")[-1 if key.startswith("reads/") else 0] in splits  # noqa: E731
    metadata = {key: value for key, value in metadata.items() if not key.startswith("reads/") or keep(key)}
    metadata.update({key: json.dumps(value, sort_keys=True) for key, value in changed.items()})
    save_file({key: t for key, t in tensors.items() if keep(key) and key.split("/")[-1] != drop}, str(path),
              metadata={METADATA_KEY: json.dumps(metadata, sort_keys=True)})


def test_the_stage_says_where_the_distributions_came_from_and_falls_back_to_re_scoring(stored, tmp_path):
    """A store that does not match (other settings, other reads of a split) is not taken: those
    splits are re-scored, with the same figures, and calibration.json and the printout say so."""
    from aegir.eval.reads import READS_FILE

    data = stored["data"]
    copies = {name: shutil.copytree(stored["grouped"], tmp_path / name) for name in ("other", "partial", "bare")}
    rewrite_store(copies["other"], reading={"columns": 5, "views": 2, "joint_cta": 0.05, "joint_cpa": 0.2})
    rewrite_store(copies["partial"], ("valid", "real"))
    (copies["bare"] / READS_FILE).unlink()
    taken, _ = StoredTargets(data).targets(stored["grouped"], evaluation_splits(data))
    expected = calibrate_checkpoint(taken, target_families(load_examples(data, "real")))

    calibration = calibrate_checkpoints(data, {Path(path).as_posix(): Path(path).as_posix()
                                               for path in (stored["grouped"], *copies.values())})
    printed = "\n".join(summary_lines(calibration))
    content = calibration["checkpoints"]
    assert {Path(path).name: entry["distributions"] for path, entry in content.items()} == {
        "grouped": "stored",
        "other": f"re-scored: {copies['other'] / READS_FILE}: computed with another reading",
        "partial": "stored; re-scored on test, corner_cases, missing_values, format_heterogeneity, wide: other reads",
        "bare": f"re-scored: no {READS_FILE}"}
    for path, entry in content.items():  # the same figures whichever way
        assert {k: v for k, v in entry.items() if k not in ("name", "fingerprint", "distributions")} == expected, path
    assert (f"calibrate: {stored['grouped'].as_posix()}: the distributions its stage stored "
            "(eval_reads.safetensors), not re-scored") in printed
    assert f"calibrate: {copies['bare'].as_posix()}: re-scored: no {READS_FILE}" in printed
    # a directory without every prepared split holds no stage's reads: re-scored, said so
    two_splits = stored["data"].parent / "data"
    taken, source = StoredTargets(two_splits).targets(stored["grouped"], ["valid", "real"])
    assert taken == {} and source.startswith(f"re-scored: {two_splits} does not hold every prepared split")

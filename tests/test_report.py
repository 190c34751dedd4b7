"""The report stage on small hand-made inputs: the table, the gains, the figures, the errors."""

from __future__ import annotations

import hashlib
import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from aegir.eval.report import collect, report_figures, report_markdown, scaling_series
from conftest import ROOT

SPLITS = ("valid", "test", "corner_cases", "missing_values", "format_heterogeneity", "real")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def f1_tree(base: float, splits=SPLITS) -> dict:
    """An F1 tree in the stages' scores.json layout whose figures differ per task and split (so
    a mix-up shows)."""
    return {task: {split: {"micro_f1": round(base + 10 * t + i, 2), "macro_f1": round(base / 2 + 10 * t + i, 2),
                           "support": 7}
                   for i, split in enumerate(splits)}
            for t, task in enumerate(("cta", "cpa"))}


def write_curve(live: Path, name: str, rows: list[tuple[int, float]]) -> None:
    path = live / "plots" / "metrics" / f"{name}.tsv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"step\t{name.rsplit('/', 1)[-1]}\n" + "".join(f"{s}\t{v}\n" for s, v in rows))


def write_run(live: Path, start_loss: float) -> None:
    write_curve(live, "train/loss", [(step, start_loss - 0.1 * step) for step in range(0, 40, 2)])
    write_curve(live, "valid/cta_micro_f1", [(10, 20.0), (20, 35.0), (30, 41.5)])
    write_curve(live, "valid/cpa_micro_f1", [(10, 5.0), (20, 12.5), (30, 20.0)])


@pytest.fixture
def inputs(tmp_path) -> dict[str, Path]:
    """results/ of a run that got as far as phase3: baselines, two Phase 1 agents, Phase 3."""
    results = tmp_path / "results"
    (results / "baselines").mkdir(parents=True)
    # the baseline scores its training split too: not an evaluation split, left out of the table
    baselines = f1_tree(40.0)
    for task in ("cta", "cpa"):
        baselines[task]["train"] = {"micro_f1": 99.0, "macro_f1": 99.0, "support": 700}
    (results / "baselines" / "scores.json").write_text(json.dumps(baselines))
    for agent, base in (("primary", 50.0), ("places", 30.0)):
        (results / "phase1" / agent).mkdir(parents=True)
        (results / "phase1" / agent / "scores.json").write_text(json.dumps(f1_tree(base)))
        write_run(results / "phase1" / agent / "live", 9.0 if agent == "primary" else 8.0)
    phase3 = {"phase1": f1_tree(50.0), "control": f1_tree(52.0), "fused": f1_tree(55.5),
              "routing": {"activation_rate": {"places": 0.25, "primary": 1.0},
                          "activation_rate_by_domain": {"Hotel": {"places": 0.75, "primary": 1.0},
                                                        "Movie": {"places": 0.0, "primary": 1.0}}}}
    (results / "phase3").mkdir()
    (results / "phase3" / "scores.json").write_text(json.dumps(phase3))
    for run, loss in (("fused", 7.0), ("control", 7.2)):
        write_run(results / "phase3" / "live" / run, loss)
    return {"baselines": results / "baselines" / "scores.json", "phase1": results / "phase1",
            "phase3": results / "phase3", "out": results / "report"}


def add_phase4(results: Path) -> Path:
    """A Phase 4 result as the phase4 stage is to write it: three policies (a `wide` split that
    only Phase 4 scores), spawning by domain, and the scaling rows."""
    phase4 = results / "phase4"
    phase4.mkdir()
    splits = SPLITS + ("wide",)
    metrics = {"learned": f1_tree(58.0, splits), "never_spawn": f1_tree(51.0, splits),
               "always_spawn": f1_tree(54.0, splits),
               "spawning": {"mean_spawned_by_domain": {"Hotel": 2.5, "Movie": 1.0},
                            "mean_spawned": 1.8}}
    (phase4 / "scores.json").write_text(json.dumps(metrics))
    rows = [{"n": n, "policy": policy, "cta": {"test": {"micro_f1": 50.0 + n + bonus}},
             "cpa": {"test": {"micro_f1": 30.0 + n / 2 + bonus}}, "mean_spawned": float(min(n, 3)),
             "critical_steps": 100 + 10 * n, "total_steps": 100 + 40 * n, "wall_clock_batched_s": 0.5}
            for policy, bonus in (("learned", 2.0), ("never_spawn", 0.0), ("always_spawn", 1.0))
            for n in (0, 1, 2, 4, 8, 16)]
    (phase4 / "scaling.json").write_text(json.dumps(rows))
    return phase4


def argv(inputs: dict[str, Path], phase4: Path | None = None) -> list[str]:
    args = [f"--{key}={path}" for key, path in inputs.items()]
    return args + ([f"--phase4={phase4}"] if phase4 else [])


def report(args: list[str]) -> subprocess.CompletedProcess:
    """The report stage run as dvc.yaml runs it, in a fresh interpreter (nothing outside
    aegir/stages imports a stage)."""
    return subprocess.run([sys.executable, "-m", "aegir.stages.report", *args], capture_output=True, text=True,
                          cwd=ROOT)


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk, after checking the signature."""
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def digest(directory: Path) -> dict[str, str]:
    return {p.relative_to(directory).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def test_report_without_phase4(inputs):
    proc = report(argv(inputs))
    assert proc.returncode == 0, proc.stderr
    out = inputs["out"]
    markdown = (out / "report.md").read_text()
    header = "| task | split | baseline (TF-IDF + LR) | Phase 1 primary | Phase 3 control | Phase 3 fused |"
    assert header in markdown
    # one row per task and split, every split of the inputs (real included); fused is best
    # everywhere, in bold; cells are micro / macro
    for t, task in enumerate(("CTA", "CPA")):
        for i, split in enumerate(SPLITS):
            b, p, c, f = (base + 10 * t + i for base in (40.0, 50.0, 52.0, 55.5))
            fm = 55.5 / 2 + 10 * t + i
            assert (f"| {task} | {split} | {b:.1f} / {40 / 2 + 10 * t + i:.1f} | {p:.1f} / {25 + 10 * t + i:.1f} | "
                    f"{c:.1f} / {26 + 10 * t + i:.1f} | **{f:.1f}** / {fm:.1f} |") in markdown
    assert "| train |" not in markdown
    assert "Phase 4" not in markdown and "| Hotel | 0.75 | 1 |" in markdown
    assert "`places` 0.25" in markdown
    metrics = json.loads((out / "gains.json").read_text())
    assert set(metrics) == {"fused_minus_control", "fused_minus_phase1", "fused_minus_baseline"}
    assert metrics["fused_minus_control"]["cta"] == dict.fromkeys(SPLITS, 3.5)
    assert metrics["fused_minus_baseline"]["cpa"]["real"] == 15.5
    figures = sorted(p.name for p in (out / "figures").iterdir())
    assert figures == ["f1_by_split.png", "routing_by_domain.png", "training_curves.png"]
    for name in figures:
        data = (out / "figures" / name).read_bytes()
        width, height = png_size(data)
        assert width >= 400 and height >= 300 and len(data) > 10_000
        assert f"](figures/{name})" in markdown
    assert "fused − control micro-F1 (points): CTA test +3.5" in proc.stdout


def test_report_with_phase4_adds_its_rows_split_heatmap_and_scaling(inputs):
    assert report(argv(inputs)).returncode == 0
    heatmap_without = png_size((inputs["out"] / "figures" / "routing_by_domain.png").read_bytes())
    phase4 = add_phase4(inputs["phase1"].parent)
    assert report(argv(inputs, phase4)).returncode == 0
    out = inputs["out"]
    markdown = (out / "report.md").read_text()
    assert "| Phase 3 fused | Phase 4 learned | Phase 4 never_spawn | Phase 4 always_spawn |" in markdown
    # `wide`: only Phase 4 scores it, the others show a dash; listed after the configured splits
    assert "| CTA | wide | — | — | — | — | **64.0** / 35.0 | 57.0 / 31.5 | 60.0 / 33.0 |" in markdown
    assert markdown.index("| CTA | real |") < markdown.index("| CTA | wide |") < markdown.index("| CPA | valid |")
    assert "Phase 4: spawning mean spawned by domain" in markdown and "| Hotel | 2.5 |" in markdown
    assert "## Scaling (Phase 4)" in markdown and "| learned | 16 | 68.0 | 40.0 | 3 | 260 | 740 | 0.5 |" in markdown
    metrics = json.loads((out / "gains.json").read_text())
    assert metrics["phase4_learned_minus_fused"]["cta"]["test"] == 2.5
    assert metrics["phase4_never_spawn_minus_fused"]["cpa"]["valid"] == -4.5
    assert "wide" not in metrics["phase4_learned_minus_fused"]["cta"]  # fused has no `wide` to subtract
    figures = sorted(p.name for p in (out / "figures").iterdir())
    assert figures == ["f1_by_split.png", "routing_by_domain.png", "scaling.png", "training_curves.png"]
    assert png_size((out / "figures" / "scaling.png").read_bytes())[0] >= 800
    # the spawning heatmap sits beside Phase 3's routing: the figure is about twice as wide
    assert png_size((out / "figures" / "routing_by_domain.png").read_bytes())[0] > 1.8 * heatmap_without[0]


def test_best_json_names_the_checkpoint_best_on_real(inputs):
    """best.json (what `aegir annotate` uses by default): among the rows that are checkpoints
    (not the baseline, not Phase 4's fixed-policy controls) the highest mean of CTA and CPA
    micro-F1 on `real`, named by its directory under --models; a tie goes to the earlier row."""
    proc = report(argv(inputs) + ["--models", "models"])
    assert proc.returncode == 0, proc.stderr
    best = json.loads((inputs["out"] / "best.json").read_text())
    real = SPLITS.index("real")
    assert best["split"] == "real" and best["model"] == "fused" and best["checkpoint"] == "models/phase3"
    assert best["score"] == ((55.5 + real) + (65.5 + real)) / 2
    assert {key: c["checkpoint"] for key, c in best["candidates"].items()} == {
        "phase1": "models/phase1/primary", "control": "models/phase3/control", "fused": "models/phase3"}
    assert "best on real: models/phase3 (Phase 3 fused" in proc.stdout

    phase4 = add_phase4(inputs["phase1"].parent)
    assert report(argv(inputs, phase4) + ["--models", "/srv/aegir/models"]).returncode == 0
    best = json.loads((inputs["out"] / "best.json").read_text())
    assert best["model"] == "phase4_learned" and best["checkpoint"] == "/srv/aegir/models/phase4"
    assert set(best["candidates"]) == {"phase1", "control", "fused", "phase4_learned"}

    # a row scored on fewer of the split's columns is a candidate that cannot be picked
    phase4_scores = json.loads((phase4 / "scores.json").read_text())
    phase3_scores = json.loads((inputs["phase3"] / "scores.json").read_text())
    for task in ("cta", "cpa"):
        phase4_scores["learned"][task]["real"]["support"] = 40
        for key in ("fused", "control"):
            phase3_scores[key][task]["real"]["support"] = 100
    (phase4 / "scores.json").write_text(json.dumps(phase4_scores))
    (inputs["phase3"] / "scores.json").write_text(json.dumps(phase3_scores))
    assert report(argv(inputs, phase4)).returncode == 0
    best = json.loads((inputs["out"] / "best.json").read_text())
    assert best["model"] == "fused", best
    assert best["candidates"]["phase4_learned"]["comparable"] is False
    assert best["candidates"]["phase4_learned"]["why"] == "scored on CTA 40 of 100, CPA 40 of 100 real columns"
    assert "comparable" not in best["candidates"]["fused"]

    scores = inputs["phase3"] / "scores.json"
    tied = json.loads(scores.read_text())
    tied["fused"] = tied["control"]
    scores.write_text(json.dumps(tied))
    assert report(argv(inputs)).returncode == 0
    best = json.loads((inputs["out"] / "best.json").read_text())
    assert best["model"] == "control" and best["checkpoint"] == "models/phase3/control"  # the default --models


def test_scaling_series_are_micro_f1_then_steps():
    rows = [{"n": 1, "policy": "learned", "cta/test/micro_f1": 1.0, "cta/test/macro_f1": 1.0,
             "critical_steps": 5, "total_steps": 9, "mean_spawned": 1.0, "note": "x"}]
    assert scaling_series(rows) == ["cta/test/micro_f1", "critical_steps", "mean_spawned"]


def test_same_inputs_give_byte_identical_outputs_in_another_process(inputs, tmp_path):
    """Two runs of the stage, and the figures drawn in this process: the same bytes, PNG
    included (no matplotlib version or date in the PNG's metadata)."""
    phase4 = add_phase4(inputs["phase1"].parent)
    assert report(argv(inputs, phase4)).returncode == 0
    other = dict(inputs, out=tmp_path / "again")
    assert report(argv(other, phase4)).returncode == 0
    first, second = digest(inputs["out"]), digest(other["out"])
    assert len(first) == 7 and first == second  # report.md, gains.json, best.json, four figures
    figures = report_figures(collect(inputs["baselines"], inputs["phase1"], inputs["phase3"], phase4))
    assert {name: (inputs["out"] / "figures" / name).read_bytes() for name in figures} == figures
    assert b"matplotlib" not in (inputs["out"] / "figures" / "f1_by_split.png").read_bytes()


@pytest.mark.parametrize(("remove", "stage"), [
    ("baselines/scores.json", "baselines"),
    ("phase1/primary/scores.json", "phase1"),
    ("phase1/places/live", "phase1"),
    ("phase3/scores.json", "phase3"),
    ("phase3/live/control", "phase3"),
    ("phase4/scores.json", "phase4"),
])
def test_a_missing_input_names_the_file_and_the_stage_and_writes_nothing(inputs, remove, stage):
    import shutil

    results = inputs["phase1"].parent
    phase4 = add_phase4(results)
    older = {"report.md": "an older report\n", "gains.json": "{}\n", "best.json": "{}\n", "figures/f1_by_split.png": "old"}
    for name, text in older.items():  # an earlier run's outputs: they must survive the failure
        (inputs["out"] / name).parent.mkdir(parents=True, exist_ok=True)
        (inputs["out"] / name).write_text(text)
    target = results / remove
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    proc = report(argv(inputs, phase4))
    assert proc.returncode == 2
    err = proc.stderr
    assert f"report: error: {results / remove}" in err and f"`dvc repro {stage}`" in err, err
    assert {p.relative_to(inputs["out"]).as_posix(): p.read_text()
            for p in inputs["out"].rglob("*") if p.is_file()} == older
    assert not list(results.rglob("*.tmp"))


@pytest.mark.parametrize(("content", "problem"), [
    ("{not json", "not valid JSON"),
    (json.dumps({"control": f1_tree(1.0)}), "fused.cta: expected F1 per split"),
    (json.dumps({"control": f1_tree(1.0), "fused": {**f1_tree(1.0), "cpa": {"test": {"micro_f1": 140.0, "macro_f1": 1}}}}),
     "fused.cpa.test.micro: expected an F1 in percent (0 … 100), got 140.0"),
    (json.dumps({"control": f1_tree(1.0), "fused": f1_tree(1.0), "routing": {"activation_rate": {"a": "high"}}}),
     "routing.activation_rate.a: expected a number, got 'high'"),
])
def test_a_malformed_input_names_the_file_and_the_key(inputs, content, problem):
    (inputs["phase3"] / "scores.json").write_text(content)
    proc = report(argv(inputs))
    assert proc.returncode == 2
    err = proc.stderr
    assert f"{inputs['phase3'] / 'scores.json'}: " in err and problem in err and "`dvc repro phase3`" in err, err
    assert not inputs["out"].exists()


def test_micro_macro_layout_is_read_too(inputs):
    """An F1 tree with `micro`/`macro` keys (no supports) reads like the scores.json layout."""
    scores = json.loads(inputs["baselines"].read_text())
    markdown = report_markdown(collect(inputs["baselines"], inputs["phase1"], inputs["phase3"]), [])
    short = {task: {split: {"micro": m["micro_f1"], "macro": m["macro_f1"]} for split, m in by_split.items()}
             for task, by_split in scores.items()}
    inputs["baselines"].write_text(json.dumps(short))
    assert report_markdown(collect(inputs["baselines"], inputs["phase1"], inputs["phase3"]), []) == markdown


def test_help_says_how_to_run_and_view_it():
    proc = report(["--help"])
    assert proc.returncode == 0
    text = proc.stdout
    assert "dvc repro report" in text and "--phase4" in text and "dvc plots show" in text


def test_scaling_rows_of_the_phase4_stage_are_split_per_policy(tmp_path):
    """The phase4 stage writes one row per n with every policy side by side; the report reads
    them as one row per (policy, n) with task/split names."""
    from aegir.eval.report import parse_scaling
    rows = [{"n": n, "learned_wide_cta_micro_f1": 70.0 + n, "never_wide_cta_micro_f1": 70.0,
             "learned_corner_cases_cpa_micro_f1": 60.0, "learned_wide_critical_steps": 7.5 + n,
             "never_wide_critical_steps": 7.5, "learned_wide_mean_subagents": float(n) + 3,
             "learned_wide_mean_wide_subagents": float(n)} for n in (0, 4)]
    parsed = parse_scaling(rows, tmp_path / "scaling.json")
    assert [(r["policy"], r["n"]) for r in parsed] == [("learned", 0), ("learned", 4), ("never", 0), ("never", 4)]
    assert parsed[1]["cta/wide/micro_f1"] == 74.0 and parsed[1]["cpa/corner_cases/micro_f1"] == 60.0
    assert parsed[1]["wide/critical_steps"] == 11.5 and parsed[1]["wide/mean_subagents"] == 7.0
    assert parsed[1]["wide/mean_wide_subagents"] == 4.0  # wide search alone, beside every sub-agent
    assert "cta/wide/micro_f1" in scaling_series(parsed) and "wide/critical_steps" in scaling_series(parsed)


def calibration_json(path: Path) -> Path:
    """A calibrate stage's calibration.json for two checkpoints: one whose CTA reaches 95 %
    accuracy on `real` at some calibrated confidence out of family, one that does not, and one
    task without families to measure out of."""
    def task(accuracy, before, after, reached, held=True):
        reach = {"for_accuracy": {"min_confidence": 0.9, "coverage": 0.412, "accuracy": 0.953} if reached else None,
                 "most_accurate": {"min_confidence": 0.95, "coverage": 0.3, "accuracy": 0.91}}
        own = {"for_accuracy": None, "most_accurate": {"min_confidence": 0.99, "coverage": 0.1, "accuracy": 0.88}}
        return {"accuracy": accuracy, "n": 100, "before": {"ece": before, "mean_confidence": 0.7},
                "after": {"ece": 0.01, "mean_confidence": 0.8}}, {
            "coverage": [], "reliability": {}, **own,
            "out_of_family": {"families": 12, "ece": after, "mean_confidence": 0.75, "coverage": [], **reach}
            if held else None}

    checkpoints = {}
    for path_, name, reached in (("models/phase1/primary", "Phase 1 primary", True), ("models/phase4", "Phase 4", False)):
        cta, cta_real = task(0.788, 0.0801, 0.0262, reached)
        cpa, cpa_real = task(0.7, 0.114, 0.051, False, held=False)
        checkpoints[path_] = {"name": name, "map": {"cta": {"a": 1.2345, "b": 0.25, "d": 0.75},
                                                      "cpa": {"a": 2.0, "b": -0.5}},  # no d: a logistic map
                              "splits": {"real": {"cta": cta, "cpa": cpa}, "valid": {"cta": cta, "cpa": cpa}},
                              "real": {"cta": cta_real, "cpa": cpa_real}}
    path.write_text(json.dumps({"real_split": "real", "fit_split": "real", "target_accuracy": 0.95, "bins": 15,
                                "checkpoints": checkpoints}))
    return path


def test_the_calibration_section_gives_each_models_ece_and_the_confidence_for_95_percent(inputs, tmp_path):
    calibration = calibration_json(tmp_path / "calibration.json")
    proc = report(argv(inputs) + [f"--calibration={calibration}"])
    assert proc.returncode == 0, proc.stderr
    markdown = (inputs["out"] / "report.md").read_text()
    assert "## Calibration on `real`" in markdown and "](../calibrate/figures/reliability.png)" in markdown
    assert "| Phase 1 primary | CTA | 78.8 | 8.0 | 2.6 | 1.23, 0.25, 0.75 | P=0.90 keeps 41.2 % at 95.3 % |" in markdown
    assert "| Phase 4 | CTA | 78.8 | 8.0 | 2.6 | 1.23, 0.25, 0.75 | not reached (best: P=0.95 keeps 30.0 % at 91.0 %) |" \
        in markdown
    # no out-of-family figure (one family): a dash, and the model's own curve
    assert "| Phase 4 | CPA | 70.0 | 11.4 | – | 2, -0.5, 2 | not reached (best: P=0.99 keeps 10.0 % at 88.0 %) |" \
        in markdown
    assert markdown.index("## Calibration") < markdown.index("## Figures")
    # without it, no section; a calibration.json of another shape names the file and the stage
    assert report(argv(inputs)).returncode == 0 and "Calibration" not in (inputs["out"] / "report.md").read_text()
    for broken in ({"checkpoints": {}}, {**json.loads(calibration.read_text()), "checkpoints": {"m": {"name": "x"}}}):
        calibration.write_text(json.dumps(broken))
        proc = report(argv(inputs) + [f"--calibration={calibration}"])
        assert proc.returncode == 2 and str(calibration) in proc.stderr and "`dvc repro calibrate`" in proc.stderr


def test_the_real_split_per_domain_sets_the_primary_beside_the_baseline(inputs):
    """With `real_domains` in both the baseline's and the primary's scores, the report has a
    table per task, a row per domain: support, each model's micro-F1 (Phase 3's where its
    scores have them too) and the primary's lead; a domain a model lacks gets a dash. Without
    it in the baseline's or the primary's file there is no such section (older results)."""
    def domains(base: float) -> dict:
        return {"cta": {"Movie": {"micro_f1": base, "macro_f1": base, "support": 40},
                        "SportsTeam": {"micro_f1": base + 20, "macro_f1": base, "support": 12}},
                "cpa": {"Movie": {"micro_f1": base - 5, "macro_f1": base, "support": 9}}}

    def add(path: Path, base: float, where: str | None = None) -> None:
        tree = json.loads(path.read_text())
        if where:
            tree[where]["real_domains"] = domains(base)
        else:
            tree["real_domains"] = domains(base)
        path.write_text(json.dumps(tree))

    add(inputs["phase3"] / "scores.json", 70.0, "fused")
    assert "per domain" not in report_markdown(collect(inputs["baselines"], inputs["phase1"], inputs["phase3"]), [])
    add(inputs["baselines"], 50.0)
    add(inputs["phase1"] / "primary" / "scores.json", 60.5)
    text = report_markdown(collect(inputs["baselines"], inputs["phase1"], inputs["phase3"]), [])
    cta, cpa = text.split("\nCTA:\n")[1].split("\nCPA:\n")
    assert "| domain | n | baseline | Phase 1 primary | Phase 3 fused | primary − baseline |" in cta
    assert "| Movie | 40 | 50.0 | 60.5 | 70.0 | +10.5 |" in cta
    assert "| SportsTeam | 12 | 70.0 | 80.5 | 90.0 | +10.5 |" in cta
    assert "| Movie | 9 | 45.0 | 55.5 | 65.0 | +10.5 |" in cpa and "SportsTeam" not in cpa.split("##")[0]

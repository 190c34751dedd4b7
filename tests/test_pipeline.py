"""End to end with the real tools, in a temporary git + DVC repository, on tiny params.

One `dvc repro` of the whole pipeline is shared by the tests of this module (module fixture);
the tests that change params run last, in file order.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
import yaml

from aegir.pipeline import dvc_stages
from conftest import deep_update, make_project_copy, run_tool

pytestmark = pytest.mark.e2e


def ran_stages(output: str) -> set[str]:
    """Stage names DVC says it ran ("Running stage 'x':")."""
    return set(re.findall(r"Running stage '([^']+)'", output))


def tree_digest(root: Path, paths: list[str]) -> dict[str, str]:
    """sha256 of every file under each of `paths` (not Snakemake's empty directory markers)."""
    out = {}
    for rel in paths:
        path = root / rel
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.name != ".snakemake_timestamp") \
            if path.is_dir() else [path]
        for f in files:
            out[str(f.relative_to(root))] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out


@pytest.fixture(scope="module")
def project(tmp_path_factory, request) -> Path:
    from conftest import TINY_PARAMS_OVERRIDE

    repo = make_project_copy(tmp_path_factory.mktemp("dvc_project"), TINY_PARAMS_OVERRIDE)
    proc = run_tool(repo, "dvc", "repro")
    (repo / "first_repro.log").write_text(proc.stdout + proc.stderr)
    return repo


def test_repro_writes_prepared_data_and_baseline_metrics(project):
    for split in ("train", "valid", "test", "corner_cases", "missing_values", "format_heterogeneity"):
        assert (project / "data" / "prepared" / f"{split}.parquet").is_file()
    stats = json.loads((project / "results/prepare/stats.json").read_text())
    assert stats["splits"]["train"]["tables"] == 60
    baselines = json.loads((project / "results/baselines/metrics.json").read_text())
    for task in ("cta", "cpa"):
        assert set(baselines[task]) >= {"test", "corner_cases"}
        assert 0 < baselines[task]["test"]["micro_f1"] <= 100


def test_status_clean_after_repro(project):
    proc = run_tool(project, "dvc", "status")
    assert "up to date" in proc.stdout, proc.stdout


def test_prepare_is_byte_reproducible(project):
    before = tree_digest(project, ["data/prepared", "results/prepare/stats.json"])
    proc = run_tool(project, "dvc", "repro", "--force", "--single-item", "prepare")
    assert "prepare" in ran_stages(proc.stdout)
    assert tree_digest(project, ["data/prepared", "results/prepare/stats.json"]) == before
    assert "up to date" in run_tool(project, "dvc", "status").stdout


def test_snakemake_runs_the_same_dag_with_the_same_outputs(project, tmp_path):
    specs = dvc_stages(project)
    dry = run_tool(project, "snakemake", "-n", "--cores", "1", "--forceall", "all")
    for spec in specs:
        assert re.search(rf"^rule {re.escape(spec.rule_name)}:", dry.stdout, re.M), spec.rule_name
    # the rules mirror the resolved DVC stages: command, inputs, outputs, params
    snake = make_project_copy(tmp_path / "snake", {})
    (snake / "params.yaml").write_text((project / "params.yaml").read_text())
    for a, b in zip(specs, dvc_stages(snake)):
        assert (a.name, a.cmd, a.deps, a.outs, a.params) == (b.name, b.cmd, b.deps, b.outs, b.params)
    run_tool(snake, "snakemake", "--cores", "2", "phase3", "baselines")
    compared = ["data/prepared", "results/prepare/stats.json", "results/baselines/metrics.json",
                "models/phase1", "results/phase1/primary/metrics.json", "results/phase2/report.json",
                "models/phase3", "results/phase3/metrics.json", "results/phase3/report.json"]
    assert tree_digest(snake, compared) == tree_digest(project, compared)
    # and Snakemake's own bookkeeping agrees there is nothing left to do
    again = run_tool(snake, "snakemake", "-n", "--cores", "1", "phase3", "baselines")
    assert "Nothing to be done" in again.stdout + again.stderr


def test_exp_run_on_lambda_reruns_phase2_not_phase1(project):
    lock_before = yaml.safe_load((project / "dvc.lock").read_text())["stages"]
    proc = run_tool(project, "dvc", "exp", "run", "--set-param", "lambda.early=0.2")
    assert ran_stages(proc.stdout) == {"phase2", "phase3"}, proc.stdout
    lock_after = yaml.safe_load((project / "dvc.lock").read_text())["stages"]
    for name in lock_before:
        if name.startswith("phase1") or name in ("prepare", "baselines"):
            assert lock_after[name] == lock_before[name], name
    assert lock_after["phase2"]["params"]["params.yaml"]["lambda"]["early"] == 0.2
    assert lock_after["phase3"]["params"]["params.yaml"]["lambda"]["early"] == 0.2
    report = json.loads((project / "results/phase2/report.json").read_text())
    assert report["lambda"]["configured"]["early"] == 0.2
    assert report["lambda"]["schedule"]["p000"]["lambda1"] == 0.2  # λ1 at the start of training
    curve = (project / "results/phase3/live/fused/plots/metrics/lambda/lambda1.tsv").read_text().splitlines()
    assert float(curve[1].split("\t")[1]) == pytest.approx(0.2)  # Phase 3 trained with the new λ1
    shown = run_tool(project, "dvc", "exp", "show", "--no-pager", "--json").stdout
    assert "lambda.early" in shown or '"early": 0.2' in shown


def test_exp_run_on_a_baseline_param_reruns_only_baselines(project):
    proc = run_tool(project, "dvc", "exp", "run", "-S", "baselines.C=2.0")
    assert ran_stages(proc.stdout) == {"baselines"}, proc.stdout
    diff = run_tool(project, "dvc", "metrics", "diff", "--json", "HEAD").stdout
    assert "results/baselines/metrics.json" in diff


def test_data_param_marks_prepare_and_every_dependent_changed(project):
    params = yaml.safe_load((project / "params.yaml").read_text())
    params = deep_update(params, {"synthetic": {"seed": params["synthetic"]["seed"] + 1}})
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    status = run_tool(project, "dvc", "status", "--json").stdout
    assert set(json.loads(status)) == {"prepare"}  # only prepare reads synthetic.*
    proc = run_tool(project, "dvc", "repro", "--single-item", "prepare")
    assert ran_stages(proc.stdout) == {"prepare"}
    changed = set(json.loads(run_tool(project, "dvc", "status", "--json").stdout))
    assert {"baselines", "phase1@primary", "phase1@places", "phase1@media"} <= changed  # new data → rerun

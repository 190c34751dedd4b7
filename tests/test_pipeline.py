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
    """sha256 of every file under each of `paths`."""
    out = {}
    for rel in paths:
        path = root / rel
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
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
    # the rules mirror the resolved DVC stages: command, inputs, outputs
    snake = make_project_copy(tmp_path / "snake", {})
    (snake / "params.yaml").write_text((project / "params.yaml").read_text())
    for a, b in zip(specs, dvc_stages(snake)):
        assert (a.name, a.cmd, a.deps, a.outs, a.params) == (b.name, b.cmd, b.deps, b.outs, b.params)
    targets = ["baselines"]
    run_tool(snake, "snakemake", "--cores", "2", *targets)
    compared = ["data/prepared", "results/prepare/stats.json", "results/baselines/metrics.json"]
    assert tree_digest(snake, compared) == tree_digest(project, compared)


def test_data_param_reruns_prepare_and_dependents(project):
    params = yaml.safe_load((project / "params.yaml").read_text())
    params = deep_update(params, {"synthetic": {"seed": params["synthetic"]["seed"] + 1}})
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    status = run_tool(project, "dvc", "status").stdout
    assert "prepare" in status
    proc = run_tool(project, "dvc", "repro", "baselines")
    assert {"prepare", "baselines"} <= ran_stages(proc.stdout)
    run_tool(project, "git", "add", "-A")
    run_tool(project, "git", "commit", "-q", "-m", "new seed")


def test_exp_run_on_a_baseline_param_reruns_only_baselines(project):
    proc = run_tool(project, "dvc", "exp", "run", "-S", "baselines.C=2.0", "baselines")
    ran = ran_stages(proc.stdout)
    assert ran == {"baselines"}, proc.stdout
    shown = run_tool(project, "dvc", "exp", "show", "--no-pager", "--json").stdout
    assert "baselines.C" in shown or '"C": 2.0' in shown

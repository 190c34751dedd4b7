"""End to end with the real tools, in a temporary git + DVC repository, on tiny params.

One `dvc repro` of the whole pipeline is shared by the tests of this module (module fixture);
the tests that change params run last, in file order.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

import pytest
import yaml

from aegir.pipeline import dvc_stages
from conftest import (
    deep_update,
    kill_at_saved_step,
    make_project_copy,
    run_tool,
    tool_env,
)

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
    run_tool(repo, "git", "add", "-A")
    run_tool(repo, "git", "commit", "-q", "-m", "repro")
    return repo


TERMINAL_COLUMNS = 240  # what `dvc exp show --only-changed` must fit after a λ experiment

# Every output of the tiny pipeline that must be byte-identical between two runs of it (and so
# between DVC and Snakemake, or a run and its pulled copy): all but the wall-time files.
REPRODUCIBLE = ["data/prepared", "results/prepare/stats.json", "results/prepare/metrics.json",
                "results/baselines/metrics.json", "results/baselines/scores.json", "models/phase1",
                "results/phase1/primary/metrics.json", "results/phase1/primary/scores.json",
                "results/phase1/primary/live", "results/phase1/places/metrics.json",
                "results/phase2/report.json", "results/phase2/metrics.json", "results/phase2/plots",
                "models/phase4", "results/phase4/metrics.json", "results/phase4/scores.json",
                "results/phase4/scaling.json", "results/phase4/live", "results/calibrate", "results/report"]


def test_repro_writes_prepared_data_and_baseline_metrics(project):
    for split in ("train", "valid", "test", "corner_cases", "missing_values", "format_heterogeneity"):
        assert (project / "data" / "prepared" / f"{split}.parquet").is_file()
    stats = json.loads((project / "results/prepare/stats.json").read_text())
    assert stats["splits"]["train"]["tables"] == 60
    assert sum(stats["columns_per_label"]["cta"].values()) == sum(s["cta_columns"] for s in stats["splits"].values())
    headline = json.loads((project / "results/prepare/metrics.json").read_text())
    assert headline["tables"]["train"] == 60 and headline["cta_labels"] == stats["coverage"]["cta_labels"]
    scores = json.loads((project / "results/baselines/scores.json").read_text())
    baselines = json.loads((project / "results/baselines/metrics.json").read_text())["baseline"]
    for task in ("cta", "cpa"):
        assert set(scores[task]) == {"train", "valid", "test", "corner_cases", "missing_values",
                                     "format_heterogeneity", "real", "wide"}
        assert 0 < baselines[task]["bench"] <= 100
        assert baselines[task]["real"] == round(scores[task]["real"]["micro_f1"], 2)
        assert scores[task]["test"]["support"] > 0


def test_metrics_show_only_headline_figures(project):
    """`dvc metrics show` lists, per model and task, the benchmark and real-table micro-F1, the
    training stages' wall minutes and the phase2 check count; F1 per split, supports, timing
    detail and the reward report stay out of it."""
    shown = json.loads(run_tool(project, "dvc", "metrics", "show", "--json").stdout)
    data = {path: entry["data"] for rev in shown.values() for path, entry in rev["data"].items()}
    agents = ("primary", "places", "media", "commerce")
    assert set(data) == {"results/prepare/metrics.json", "results/baselines/metrics.json",
                         "results/phase2/metrics.json", "results/phase3/metrics.json", "results/phase3/wall.json",
                         "results/phase4/metrics.json", "results/phase4/wall.json"} | {
        f"results/phase1/{a}/{f}.json" for a in agents for f in ("metrics", "wall")}
    phase2 = data["results/phase2/metrics.json"]
    assert set(phase2) == {"checks", "failed", "primary_r_perf"} and (phase2["checks"], phase2["failed"]) == (21, 0)
    models = {"results/baselines/metrics.json": {"baseline"}, "results/phase3/metrics.json": {"fused", "control"},
              "results/phase4/metrics.json": {"swarm"}} | {f"results/phase1/{a}/metrics.json": {a} for a in agents}
    for path, names in models.items():
        assert set(data[path]) == names, path
        for name in names:
            assert {task: set(figures) for task, figures in data[path][name].items()} == {
                "cta": {"bench", "real"}, "cpa": {"bench", "real"}}, path
    for stage in ("phase1/primary", "phase3", "phase4"):
        (name, minutes), = data[f"results/{stage}/wall.json"]["minutes"].items()
        assert name == stage.replace("/", "_") and minutes > 0

    def leaves(tree):
        return sum(leaves(v) for v in tree.values()) if isinstance(tree, dict) else 1

    # every key path names its model, so no two files share a column and none needs its file's
    # name in front (the first dvc.yaml showed about 450 figures; 360 before this layout)
    columns = [leaves(d) for d in data.values()]
    assert sum(columns) == 14 + 3 + 4 * (1 + 4 + 2 + 1) + 6, columns  # prepare: 11 splits + 3


def test_status_clean_after_repro(project):
    proc = run_tool(project, "dvc", "status")
    assert "up to date" in proc.stdout, proc.stdout


def test_phase3_takes_the_frozen_models_distributions_from_their_checkpoints(project):
    # the phase1 stages stored every read's distributions (column groups and two views here);
    # Phase 3 read them instead of running those models again (aegir.eval.reads)
    timing = json.loads((project / "results/phase3/timing.json").read_text())
    assert timing["phase1_reads"] == {"phase1": "stored", "primary": "stored", "places": "stored", "media": "stored",
                                     "commerce": "stored"}


def test_report_gathers_every_stage_and_reruns_byte_identical(project):
    """`dvc repro` ends with the report: its table holds each stage's own figures, its figures
    are what `dvc plots show` lists, and a forced rerun writes the same bytes."""
    markdown = (project / "results/report/report.md").read_text()
    baselines = json.loads((project / "results/baselines/scores.json").read_text())
    del baselines["cta"]["train"], baselines["cpa"]["train"]  # scored, but not an evaluation split
    phase1 = json.loads((project / "results/phase1/primary/scores.json").read_text())
    phase3 = json.loads((project / "results/phase3/scores.json").read_text())
    phase4 = {k: v for k, v in json.loads((project / "results/phase4/scores.json").read_text()).items()
              if isinstance(v, dict) and "cta" in v}
    header = next(line for line in markdown.splitlines() if line.startswith("| task | split |"))
    names = [c.strip() for c in header.split("|")[3:-1]]
    assert names[4:] == [f"Phase 4 {policy}" for policy in phase4]  # its policies, in its file's order
    models = [baselines, phase1, phase3["control"], phase3["fused"]] + list(phase4.values())
    for task in ("cta", "cpa"):
        for split in baselines[task]:  # every evaluation split
            cells = [f"{m[task][split]['micro_f1']:.1f}" for m in models]
            row = next(line for line in markdown.splitlines() if line.startswith(f"| {task.upper()} | {split} |"))
            assert [c.split(" / ")[0].strip(" *") for c in row.split("|")[3:-1]] == cells, row
    assert "Phase 4's columns score the first `phase4.eval_tables` tables" in markdown
    gains = json.loads((project / "results/report/gains.json").read_text())
    # Phase 4's policies are compared with its `never` policy: the fused model on the same tables
    assert {key for key in gains if key.startswith("phase4")} == {"phase4_learned_minus_phase4_never",
                                                                 "phase4_always_minus_phase4_never"}
    wide = phase4["learned"]["cta"]["wide"]["micro_f1"] - phase4["never"]["cta"]["wide"]["micro_f1"]
    assert gains["phase4_learned_minus_phase4_never"]["cta"]["wide"] == pytest.approx(wide, abs=0.01)
    shown = json.loads(run_tool(project, "dvc", "plots", "show", "--json").stdout)
    figures = {f"results/report/figures/{name}" for name in
               ("f1_by_split.png", "routing_by_domain.png", "training_curves.png")}
    assert figures <= set(shown.get("data", shown)), sorted(shown.get("data", shown))
    before = tree_digest(project, ["results/report"])
    proc = run_tool(project, "dvc", "repro", "--force", "--single-item", "report")
    assert ran_stages(proc.stdout) == {"report"}
    assert tree_digest(project, ["results/report"]) == before
    assert "up to date" in run_tool(project, "dvc", "status").stdout


def test_calibrate_fits_on_real_and_reruns_byte_identical(project):
    """The calibrate stage: a logistic map per task, fitted on `real`, for every checkpoint the
    report compares, by the checkpoint's fingerprint; its figures are DVC plots; a forced rerun
    writes the same bytes."""
    from aegir.model.checkpoint import checkpoint_fingerprint

    content = json.loads((project / "results/calibrate/calibration.json").read_text())
    assert content["fit_split"] == "real"
    assert set(content["checkpoints"]) == {"models/phase1/primary", "models/phase3/control", "models/phase3",
                                           "models/phase4"}
    for path, entry in content["checkpoints"].items():
        assert entry["fingerprint"] == checkpoint_fingerprint(project / path)
        assert set(entry["map"]) == {"cta", "cpa"} and all(entry["map"][t]["a"] > 0 for t in ("cta", "cpa"))
        assert {"valid", "real"} <= set(entry["splits"])
    shown = json.loads(run_tool(project, "dvc", "plots", "show", "--json").stdout)
    assert {f"results/calibrate/figures/{name}" for name in ("reliability.png", "coverage.png")} \
        <= set(shown.get("data", shown))
    before = tree_digest(project, ["results/calibrate"])
    proc = run_tool(project, "dvc", "repro", "--force", "--single-item", "calibrate")
    assert ran_stages(proc.stdout) == {"calibrate"}
    assert tree_digest(project, ["results/calibrate"]) == before
    assert "up to date" in run_tool(project, "dvc", "status").stdout


def test_prepare_is_byte_reproducible(project):
    before = tree_digest(project, ["data/prepared", "results/prepare/stats.json"])
    proc = run_tool(project, "dvc", "repro", "--force", "--single-item", "prepare")
    assert "prepare" in ran_stages(proc.stdout)
    assert tree_digest(project, ["data/prepared", "results/prepare/stats.json"]) == before
    assert "up to date" in run_tool(project, "dvc", "status").stdout


def test_pipeline_benchmark_times_stages_from_scratch_and_leaves_the_outputs(project, tmp_path, capsys):
    """benchmarks/bench_pipeline.py on the tiny project, two stages: it reads `dvc repro`'s
    order and each stage's resume state from the project itself, times each stage forced (the
    outputs come back byte-identical, `dvc status` clean) with a pace probe before it and after
    the last, and adds up the minutes of the whole. (The command runs as a user runs it; its
    refusals and the probe alone are called in this process, which saves a Python start each.)"""
    from conftest import BENCHMARKS, load_benchmark

    outputs = ["results/phase2/report.json", "results/report"]
    before = tree_digest(project, outputs)
    script = str(BENCHMARKS / "bench_pipeline.py")
    plan = run_tool(project, sys.executable, script, "--dry-run", "--probe-preset", "tiny", "--probe-steps", "1").stdout
    assert "primary: rm -rf state/phase1/primary; dvc repro --force --single-item primary" in plan
    assert "phase3: rm -rf state/phase3;" in plan and "report: rm -rf (no state);" in plan
    assert plan.index("prepare:") < plan.index("primary:") < plan.index("phase3:") < plan.index("report:")
    out = tmp_path / "bench.json"
    proc = run_tool(project, sys.executable, script, "--stages", "report", "phase2", "--probe-preset", "tiny",
                    "--probe-steps", "1", "--json", str(out))
    figures = json.loads(out.read_text())
    assert [row["stage"] for row in figures["stages"]] == ["phase2", "report"]  # dvc repro's order
    assert all(row["seconds"] > 0 and row["probe_before"] > 0 for row in figures["stages"])
    total = sum(row["seconds"] for row in figures["stages"]) / 60
    assert list(figures["totals"]) == ["all"] and abs(figures["totals"]["all"]["seconds"] - total) < 0.01
    assert figures["totals"]["all"]["budget"] is None  # two stages: the 30-minute budget is the whole run's
    assert "through all" in proc.stdout
    assert tree_digest(project, outputs) == before
    assert "up to date" in run_tool(project, "dvc", "status").stdout

    bench = load_benchmark("bench_pipeline")
    for argv, message in [(["--stages", "phase9"], "no stage phase9"),
                          (["--dry-run", "--probe-preset", "huge"], "huge"),
                          (["--probe-repeat", "1"], "at least 2")]:
        with pytest.raises(SystemExit) as refused:
            bench.main(["--repo", str(project), *argv])
        assert refused.value.code == 2 and message in capsys.readouterr().err, argv
    capsys.readouterr()
    bench.main(["--repo", str(project), "--probe-repeat", "3", "--probe-preset", "tiny", "--probe-steps", "2"])
    repeat = capsys.readouterr().out  # the probe alone, three times: no stage runs
    times = re.search(r"probes: ([\d.]+) ([\d.]+) ([\d.]+) s; slowest / fastest ([\d.]+)", repeat)
    assert times and float(times[4]) >= 1.0 and "Running stage" not in repeat, repeat
    assert tree_digest(project, outputs) == before


def test_results_travel_through_a_dvc_remote(project, tmp_path):
    """Push to a local-directory remote, clone afresh, pull: every output comes back
    byte-identical, `dvc status` is clean and nothing retrains."""
    remote = tmp_path / "remote"
    run_tool(project, "dvc", "remote", "add", "-d", "teamstore", str(remote))
    run_tool(project, "git", "commit", "-q", "-m", "remote", ".dvc/config")
    pushed = run_tool(project, "dvc", "push")
    assert re.search(r"\d+ files? pushed", pushed.stdout), pushed.stdout
    clone = tmp_path / "clone"
    run_tool(tmp_path, "git", "clone", "-q", str(project), str(clone))
    assert not (clone / "models").exists()
    run_tool(clone, "dvc", "pull")
    status = run_tool(clone, "dvc", "status")
    assert "Data and pipelines are up to date" in status.stdout, status.stdout
    assert tree_digest(clone, REPRODUCIBLE) == tree_digest(project, REPRODUCIBLE)
    assert (clone / "state/phase1/primary/state.json").is_file()  # resume state travels too
    assert ran_stages(run_tool(clone, "dvc", "repro").stdout) == set()


def dry_run_jobs(output: str) -> dict[str, dict[str, str]]:
    """The jobs of a `snakemake -n -p` log: rule name → its fields as printed ("input",
    "output", "log", …, and "shell" for the "Shell command:" line)."""
    jobs: dict[str, dict[str, str]] = {}
    job: dict[str, str] | None = None
    for line in output.splitlines():
        if match := re.fullmatch(r"(?:local)?rule (\w+):", line):
            job = jobs.setdefault(match[1], {})
        elif job is not None and (match := re.fullmatch(r" {4}(\w+): (.*)", line)):
            job[match[1]] = match[2]
        elif job is not None and line.startswith("Shell command: "):
            job["shell"] = line[len("Shell command: "):]
        else:
            job = None
    return jobs


def dot_edges(dot: str) -> set[tuple[str, str]]:
    """The edges of a DOT graph, by node label (`snakemake --rulegraph`) or quoted name (`dvc dag --dot`)."""
    labels = dict(re.findall(r'^\s*(\w+)\[label = "([^"]+)"', dot, re.M))
    edges = re.findall(r'^\s*("[^"]+"|\w+) -> ("[^"]+"|\w+)', dot, re.M)
    return {tuple(labels.get(node, node.strip('"')) for node in edge) for edge in edges}


def test_snakemake_rules_are_the_dvc_stages(tmp_path):
    """The real Snakefile, read by Snakemake itself (a dry run of every job, and its rule graph),
    against the stages DVC resolves from dvc.yaml: per stage one job running the stage's command,
    whose outputs are the stage's outs less its resume state (docs/design.md, stage contract 5)
    and whose inputs are the stage's deps, a dep on a directory that other stages fill (phase2 on
    models/phase1) given as those stages' outputs under it; and the two tools order the stages
    by the same edges."""
    repo = make_project_copy(tmp_path / "repo", {})
    specs = dvc_stages(repo)
    dry = run_tool(repo, "snakemake", "-n", "-p", "--forceall", "--cores", "1", "all")
    jobs = dry_run_jobs(dry.stdout + dry.stderr)
    assert set(jobs) == {spec.rule_name for spec in specs} | {"all"}, sorted(jobs)
    products = {out: spec.name for spec in specs for out in spec.products}
    for spec in specs:
        job = jobs[spec.rule_name]
        inputs = job["input"].split(", ") if "input" in job else []
        outputs = job["output"].split(", ")
        assert len(inputs) == len(set(inputs)) and len(outputs) == len(set(outputs)), spec.name
        assert set(outputs) == set(spec.outs) - set(spec.resume_state), spec.name
        for dep in spec.deps:
            filled = {out for out, producer in products.items()
                      if producer != spec.name and out.startswith(dep.rstrip("/") + "/")}
            if dep in products or not filled:
                assert dep in inputs, (spec.name, dep)
            else:  # a directory of other stages' outputs: exactly those, not the directory
                assert dep not in inputs and {i for i in inputs if i.startswith(dep.rstrip("/") + "/")} == filled, \
                    (spec.name, dep)
        for path in inputs:  # nothing the stage does not declare
            assert path in spec.deps or path in products and any(path.startswith(dep.rstrip("/") + "/")
                                                                 for dep in spec.deps), (spec.name, path)
        assert f"( {spec.cmd} ) 2>&1 | tee logs/{spec.rule_name}.log" in job["shell"], spec.name
    assert set(jobs["all"]["input"].split(", ")) == set(products)

    rule_of = {spec.name: spec.rule_name for spec in specs}
    dvc_edges = {(rule_of[a], rule_of[b]) for a, b in dot_edges(run_tool(repo, "dvc", "dag", "--dot").stdout)}
    snake_edges = dot_edges(run_tool(repo, "snakemake", "--rulegraph", "--forceall", "--cores", "1", "all").stdout)
    assert dvc_edges and {(a, b) for a, b in snake_edges if b != "all"} == dvc_edges


def test_snakemake_lint_is_clean(project):
    proc = run_tool(project, "snakemake", "--lint", check=False)
    assert proc.returncode == 0 and "Congratulations" in proc.stdout + proc.stderr, proc.stdout + proc.stderr


# The stages whose outputs DVC made that the Snakemake test hands to Snakemake (in `dvc repro`'s
# order): Snakemake runs the rest of the DAG itself, from Phase 4 on (Phase 3's rule runs under
# Snakemake in no test: it is the tiny DAG's longest job, and the Snakefile writes every rule
# from its DVC stage the same way, which test_snakemake_rules_are_the_dvc_stages holds)
HANDED_OVER = ("prepare", "primary", "phase1@places", "phase1@media", "phase1@commerce", "phase2", "phase3")


def test_snakemake_runs_the_same_dag_with_the_same_outputs_and_resumes_a_killed_job(project, tmp_path):
    """Snakemake's dry run names every DVC stage's rule; then, in a fresh copy of the project that
    holds DVC's outputs of the stages before Phase 4 (as a user switching tools would have them;
    the tiny DAG's first seven stages, about three quarters of its time, not run twice),
    Snakemake runs the rest (phase4, calibrate, baselines, report) for real, is killed with its
    Phase 4 job once that has saved a state, resumes it, and ends with DVC's bytes; then has
    nothing left to do."""
    specs = dvc_stages(project)
    dry = run_tool(project, "snakemake", "-n", "--cores", "1", "--forceall", "all")
    for spec in specs:
        assert re.search(rf"^rule {re.escape(spec.rule_name)}:", dry.stdout, re.M), spec.rule_name
    # (that each rule's inputs, outputs and command are its stage's: test_snakemake_rules_are_the_dvc_stages)
    snake = make_project_copy(tmp_path / "snake", {})
    (snake / "params.yaml").write_text((project / "params.yaml").read_text())
    handed = [spec for spec in specs if spec.name in HANDED_OVER]
    assert [spec.name for spec in handed] == list(HANDED_OVER)
    # copied, then dated in DAG order: every file and folder of the k-th stage's outputs gets the
    # time now + k seconds, so that each output is newer than what it was made from (DVC's own
    # times need not be in that order: an earlier test of this module forces `prepare` again, and
    # copytree would keep a folder's time)
    now = time.time()
    for k, spec in enumerate(handed):
        for out in sorted(set(spec.outs) - set(spec.resume_state)):
            source, dest = project / out, snake / out
            dest.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.copytree(source, dest, dirs_exist_ok=True)
            else:
                shutil.copyfile(source, dest)
            for path in [dest, *(dest.rglob("*") if dest.is_dir() else ())]:
                os.utime(path, (now + k, now + k))
    to_run = dry_run_jobs(run_tool(snake, "snakemake", "-n", "--cores", "1", "report", "calibrate").stdout)
    assert {"phase4", "calibrate", "baselines", "report"} <= set(to_run), to_run
    assert not {spec.rule_name for spec in handed} & set(to_run), to_run

    # kill Snakemake (and its job) with SIGKILL once Phase 4 has saved a training state
    profile = ["--profile", "workflow/profiles/local", "--cores", "2"]
    kill_at_saved_step(["snakemake", *profile, "phase4"], snake, tool_env(snake),
                       snake / "state/phase4/state.json", 2)
    assert not (snake / "models/phase4/model.safetensors").exists()

    run_tool(snake, "snakemake", "--unlock")  # the killed run's lock
    run_tool(snake, "snakemake", *profile, "report", "calibrate", timeout=1800)
    assert "resuming phase4 at step" in (snake / "logs/phase4.log").read_text()
    # resumed under Snakemake, uninterrupted under DVC: the same bytes, curves included
    assert tree_digest(snake, REPRODUCIBLE) == tree_digest(project, REPRODUCIBLE)
    # and Snakemake's own bookkeeping agrees there is nothing left to do
    again = run_tool(snake, "snakemake", "-n", "--cores", "1", "all")
    assert "Nothing to be done" in again.stdout + again.stderr


def test_exp_run_on_lambda_reruns_phase2_not_phase1(project):
    lock_before = yaml.safe_load((project / "dvc.lock").read_text())["stages"]
    proc = run_tool(project, "dvc", "exp", "run", "--set-param", "lambda.early=0.2")
    assert ran_stages(proc.stdout) == {"phase2", "phase3", "phase4", "calibrate", "report"}, proc.stdout
    lock_after = yaml.safe_load((project / "dvc.lock").read_text())["stages"]
    for name in lock_before:
        if name.startswith("phase1") or name in ("prepare", "baselines"):
            assert lock_after[name] == lock_before[name], name
    assert lock_after["phase2"]["params"]["params.yaml"]["lambda"]["early"] == 0.2
    assert lock_after["phase3"]["params"]["params.yaml"]["lambda"]["early"] == 0.2
    assert lock_after["phase4"]["params"]["params.yaml"]["lambda"]["early"] == 0.2
    curve4 = (project / "results/phase4/live/plots/metrics/lambda/lambda1.tsv").read_text().splitlines()
    assert float(curve4[1].split("\t")[1]) == pytest.approx(0.2)  # Phase 4 trained with the new λ1
    report = json.loads((project / "results/phase2/report.json").read_text())
    assert report["lambda"]["configured"]["early"] == 0.2
    assert report["lambda"]["schedule"]["p000"]["lambda1"] == 0.2  # λ1 at the start of training
    curve = (project / "results/phase3/live/fused/plots/metrics/lambda/lambda1.tsv").read_text().splitlines()
    assert float(curve[1].split("\t")[1]) == pytest.approx(0.2)  # Phase 3 trained with the new λ1
    # the metrics that moved: the retrained models' figures and wall time, nothing of earlier stages
    diff = json.loads(run_tool(project, "dvc", "metrics", "diff", "--json", "HEAD").stdout)
    changes = diff.get("diff", diff)  # {metrics file: {figure: {old, new, diff}}}
    moved = {path for path, entries in changes.items() if entries}
    moved_names = {name for entries in changes.values() for name in entries}
    assert moved <= {"results/phase3/metrics.json", "results/phase3/wall.json",
                     "results/phase4/metrics.json", "results/phase4/wall.json"}, moved
    # the retrained orchestrator's weights moved; its F1 may not at this scale (an AVX2 machine's
    # tiny run scored the same to 0.01 with λ1 0.2 and 0.3, where an AVX-512 machine's moved)
    def outs(lock: dict, stage: str) -> dict:
        return {out["path"]: out["md5"] for out in lock[stage]["outs"]}
    assert outs(lock_after, "phase3")["models/phase3"] != outs(lock_before, "phase3")["models/phase3"]
    # a wall time is the one figure a rerun does not reproduce: it is rounded to 0.01 minute, so
    # a tiny stage's rerun can take the same time to that precision (CI saw phase3 do so)
    wall_moved = {stage for stage in ("phase3", "phase4") if f"results/{stage}/wall.json" in moved}
    # `--only-changed` fits a terminal of TERMINAL_COLUMNS (DVC elides with "…" what does not
    # fit): the moved figures, the wall minutes and λ1. DVC adds a column per changed data
    # dependency (a hash under the path, e.g. `models/phase3`); the `--drop '.*/.*'` of the
    # README and docs/pipeline.md hides those, and only those: no metric or param name holds a "/"
    env = {**tool_env(project), "COLUMNS": str(TERMINAL_COLUMNS)}
    shown = run_tool(project, "dvc", "exp", "show", "--only-changed", "--drop", ".*/.*", "--no-pager", env=env).stdout
    header = next(line for line in shown.splitlines() if "Experiment" in line)
    assert "…" not in header and "/" not in header, shown
    assert {"lambda.early"} | {f"minutes.{stage}" for stage in wall_moved} <= set(header.split()), shown
    # every figure `dvc metrics diff` saw move has its column. Which ones move at this scale is
    # the float rounding's business: with three experts the tiny swarm's F1 stayed put, and on a
    # 2-core AMD EPYC (CI, stop 62) no F1 and no wall minute moved at all, so none may be shown
    assert moved_names <= set(header.split()), (moved_names, shown)
    if not moved_names:  # then the table holds the experiment and its one changed param, no figure
        assert set(header.split()) - {"Experiment", "Created", "lambda.early"} == set(), shown
    (project / "exp_show_only_changed.txt").write_text(shown)


def test_exp_run_on_a_baseline_param_reruns_only_baselines_and_the_report(project):
    proc = run_tool(project, "dvc", "exp", "run", "-S", "baselines.C=2.0")
    assert ran_stages(proc.stdout) == {"baselines", "report"}, proc.stdout
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
    assert {"baselines", "primary", "phase1@places", "phase1@media"} <= changed  # new data → rerun


def test_dvc_repro_trains_the_models_before_the_baselines():
    # the budgets "through phase1" and "through phase3" count from the run's start
    # (docs/results.md): the baselines, which only `report` reads, run after the model stages
    from dvc.repo import Repo
    from dvc.repo.reproduce import plan_repro

    from conftest import ROOT

    with Repo(str(ROOT)) as repo:
        order = [stage.addressing for stage in plan_repro(repo.index.graph)]
    assert order[0] == "prepare" and order[-1] == "report"
    assert order.index("baselines") > max(order.index(s) for s in ("primary", "phase1@places",
                                                                    "phase1@media", "phase2", "phase3"))

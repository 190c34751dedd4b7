"""The phase3 and phase4 stages on tiny settings: determinism, resume after SIGKILL, outputs, bad input."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
import yaml
from safetensors import safe_open

from aegir.config import load_params
from aegir.eval.reads import READS_FILE
from aegir.rl.rewards import LambdaSchedule
from conftest import (
    BIN,
    ROOT,
    TINY_PARAMS_OVERRIDE,
    deep_update,
    kill_at_saved_step,
    tool_env,
)

pytestmark = pytest.mark.e2e

OUTPUTS = ("model/model.safetensors", "model/config.json", "model/control/model.safetensors",
           "metrics/metrics.json", "metrics/scores.json", "metrics/report.json",
           "metrics/live/fused/metrics.json", "metrics/live/control/metrics.json",
           "metrics/live/fused/plots/metrics/reward/reward.tsv",
           "metrics/curves.png")


def run_module(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", *args], cwd=root, env=tool_env(ROOT), capture_output=True,
                          text=True, timeout=900)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


@pytest.fixture(scope="module")
def tiny_phase1(tmp_path_factory):
    """Tiny params, prepared data, the three Phase 1 agents and Phase 2's report."""
    root = tmp_path_factory.mktemp("phase3")
    params = deep_update(yaml.safe_load((ROOT / "params.yaml").read_text()), TINY_PARAMS_OVERRIDE)
    # one whole read per table: Phase 4's never-spawn control is the orchestrator's single read of
    # a table, and this module compares the two exactly (grouped and multi-view scoring of Phase 3
    # is tested in test_grouped.py and by the pipeline test)
    params["reading"] = {"columns": 0, "views": 1}
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run_module(root, "aegir.stages.prepare", "--params", "params.yaml", "--out", "data", "--stats", "stats.json")
    for agent in ["primary", *params["specialists"]]:  # the primary first: the specialists start from it
        run_module(root, "aegir.stages.phase1", "--agent", agent, "--params", "params.yaml", "--data", "data",
                   "--out", f"models/{agent}", "--metrics", f"p1/{agent}", "--state", f"p1state/{agent}")
    run_module(root, "aegir.stages.phase2", "--params", "params.yaml", "--data", "data", "--models", "models",
               "--out", "p2")
    return root


def phase3_args(run: str, params: str = "params.yaml") -> list[str]:
    return ["aegir.stages.phase3", "--params", params, "--data", "data", "--models", "models",
            "--rewards-report", "p2/report.json", "--out", f"{run}/model", "--metrics", f"{run}/metrics",
            "--state", f"{run}/state"]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_two_runs_are_byte_identical_and_report_every_variant(tiny_phase1, tmp_path):
    run_module(tiny_phase1, *phase3_args("a"))
    # the second run in a copy whose Phase 1 checkpoints lack their stored distributions: it runs
    # the frozen models again, and must give the same bytes as the run that took them
    other = tmp_path / "copy"
    other.mkdir()
    for rel in ("params.yaml", "data", "models", "p2"):
        (shutil.copytree if (tiny_phase1 / rel).is_dir() else shutil.copy)(tiny_phase1 / rel, other / rel)
    stored = sorted(other.glob(f"models/*/{READS_FILE}"))
    assert [path.parent.name for path in stored] == ["commerce", "media", "places", "primary"]
    for path in stored:
        path.unlink()
    run_module(other, *phase3_args("b"))
    for rel in OUTPUTS:
        assert digest(tiny_phase1 / "a" / rel) == digest(other / "b" / rel), rel
    taken = json.loads((tiny_phase1 / "a/metrics/timing.json").read_text())["phase1_reads"]
    assert taken == {"phase1": "stored", "primary": "stored", "places": "stored", "media": "stored",
                     "commerce": "stored"}
    redone = json.loads((other / "b/metrics/timing.json").read_text())["phase1_reads"]
    assert redone == dict.fromkeys(taken, f"no {READS_FILE}")
    scores = json.loads((tiny_phase1 / "a/metrics/scores.json").read_text())
    for variant in ("phase1", "control", "fused", "ensemble"):
        for task in ("cta", "cpa"):
            assert set(scores[variant][task]) == {"valid", "test", "corner_cases", "missing_values",
                                                  "format_heterogeneity", "real", "wide"}
            assert set(scores[variant][task]["test"]) == {"micro_f1", "macro_f1", "support"}
            # the real split per domain: the same predictions, each domain's tables alone
            by_domain = scores[variant]["real_domains"][task]
            assert sum(r["support"] for r in by_domain.values()) == scores[variant][task]["real"]["support"]
    assert set(scores["routing"]["activation_rate"]) == {"primary", "places", "media", "commerce"}
    # tiny: 1 encoder + 1 main + 1 decoder + 1 context; the routing waits for the subject rule's
    # read (the frozen primary to its labels, 4 steps) instead of the prefix (1)
    assert scores["critical_steps"]["primary_only"] == 4 + 3
    # the DVC metrics: the headline of the control and the fused model, nothing more
    metrics = json.loads((tiny_phase1 / "a/metrics/metrics.json").read_text())
    assert set(metrics) == {"control", "fused"}
    assert metrics["fused"]["cta"]["real"] == round(scores["fused"]["cta"]["real"]["micro_f1"], 2)
    assert set(metrics["control"]["cpa"]) == {"bench", "real"}
    # the Phase 1 variant is the Phase 1 model: the same F1 as its own stage reported
    own = json.loads((tiny_phase1 / "p1/primary/scores.json").read_text())
    assert scores["phase1"]["cta"]["test"] == own["cta"]["test"]
    report = json.loads((tiny_phase1 / "a/metrics/report.json").read_text())
    assert set(report["specialists_beat_primary"]) == {"primary", "places", "media", "commerce"}
    survival = report["state_survival"]["share_by_layer_and_column"]
    assert len(survival) == 1 and all(0.0 <= x <= 1.0 + 1e-6 for x in survival[0])
    png = (tiny_phase1 / "a/metrics/curves.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    timing = json.loads((tiny_phase1 / "a/metrics/timing.json").read_text())
    assert timing["runs"]["fused"]["steps"] == TINY_PARAMS_OVERRIDE["phase3"]["steps"]
    assert timing["wall_seconds"] > 0
    wall = json.loads((tiny_phase1 / "a/metrics/wall.json").read_text())
    assert wall == {"minutes": {"phase3": round(timing["wall_seconds"] / 60, 2)}}
    curves = tiny_phase1 / "a/metrics/live/fused/plots/metrics"
    for name in ("reward/r_perf", "reward/r_parallel", "reward/r_finish", "lambda/lambda1", "lambda/lambda2",
                 "ppo/epsilon", "ppo/clip_fraction", "ppo/approx_kl", "budget/cap", "steps/critical",
                 "routing/activation_rate/places", "valid/cta_micro_f1"):
        assert (curves / f"{name}.tsv").is_file(), name
    assert not (tiny_phase1 / "a/metrics/live/control/plots/metrics/routing").exists()  # no routing in the control
    # the control is a plain checkpoint; the orchestrator names its specialists by fingerprint
    config = json.loads((tiny_phase1 / "a/model/config.json").read_text())
    names = [s["name"] for s in config["orchestrator"]["specialists"]]
    assert names == ["primary", "places", "media", "commerce"]
    assert all(len(s["fingerprint"]) == 64 for s in config["orchestrator"]["specialists"])
    # both read tables as the primary's Phase 1 scoring does: its label repeat counts, for the joint decoding
    primary = json.loads((tiny_phase1 / "models/primary/config.json").read_text())["label_repeats"]
    assert config["label_repeats"] == primary
    assert json.loads((tiny_phase1 / "a/model/control/config.json").read_text())["label_repeats"] == primary


def test_killed_run_resumes_to_the_same_result(tiny_phase1):
    if not (tiny_phase1 / "a/model/model.safetensors").exists():
        run_module(tiny_phase1, *phase3_args("a"))
    kill_at_saved_step([sys.executable, "-m", *phase3_args("killed")], tiny_phase1, tool_env(ROOT),
                       tiny_phase1 / "killed/state/fused/state.json", 2)
    assert not (tiny_phase1 / "killed/model").exists()
    resumed = run_module(tiny_phase1, *phase3_args("killed"))
    assert "resuming phase3 fused at step" in resumed.stdout + resumed.stderr
    for rel in OUTPUTS:
        assert digest(tiny_phase1 / "killed" / rel) == digest(tiny_phase1 / "a" / rel), rel
    # run again once finished (as `dvc repro` does after a change to what only scores, such as
    # `reading`; after a code change the runs train again, tests/test_resume.py): it resumes at its end,
    # trains nothing and writes the same bytes, the DVCLive summaries included
    again = run_module(tiny_phase1, *phase3_args("killed"))
    assert f"resuming phase3 control at step {TINY_PARAMS_OVERRIDE['phase3']['steps']}" in again.stdout + again.stderr
    for rel in OUTPUTS:
        assert digest(tiny_phase1 / "killed" / rel) == digest(tiny_phase1 / "a" / rel), rel


def test_bad_inputs_fail_clearly(tiny_phase1):
    params = yaml.safe_load((tiny_phase1 / "params.yaml").read_text())
    bad = deep_update(params, {"phase3": {"specialists": ["primary", "nobody"]}})
    (tiny_phase1 / "bad.yaml").write_text(yaml.safe_dump(bad, sort_keys=False))
    proc = run_module(tiny_phase1, *phase3_args("bad", "bad.yaml"), check=False)
    assert proc.returncode == 2 and "phase3.specialists: unknown agent(s) ['nobody']" in proc.stderr
    (tiny_phase1 / "failed.json").write_text(json.dumps({"passed": False, "failed": ["r_perf.ascent"]}))
    args = phase3_args("bad")
    args[args.index("p2/report.json")] = "failed.json"
    proc = run_module(tiny_phase1, *args, check=False)
    assert proc.returncode == 2 and "failed.json: Phase 2's reward checks did not pass" in proc.stderr
    assert "['r_perf.ascent']" in proc.stderr
    assert not (tiny_phase1 / "bad").exists()  # nothing half-written
    # a specialist checkpoint that is not one
    (tiny_phase1 / "models_broken/primary").mkdir(parents=True)
    for agent in ("primary", "places"):
        target = tiny_phase1 / "models_broken" / agent
        target.mkdir(exist_ok=True)
        for f in (tiny_phase1 / "models" / agent).iterdir():
            (target / f.name).write_bytes(f.read_bytes())
    (tiny_phase1 / "models_broken/media").mkdir()
    (tiny_phase1 / "models_broken/media/model.safetensors").write_bytes(b"\x80\x04not safetensors")
    (tiny_phase1 / "models_broken/media/config.json").write_text((tiny_phase1 / "models/media/config.json").read_text())
    args = phase3_args("bad")
    args[args.index("models")] = "models_broken"
    proc = run_module(tiny_phase1, *args, check=False)
    assert proc.returncode == 2 and "models_broken/media/model.safetensors: not a readable safetensors file" in proc.stderr


# ----------------------------------------------------------------------------- phase4 (over phase3's "a")


PHASE4_OUTPUTS = ("model/model.safetensors", "model/config.json", "metrics/metrics.json", "metrics/scores.json",
                  "metrics/scaling.json", "metrics/live/metrics.json", "metrics/live/plots/metrics/reward/reward.tsv")


def test_two_processes_average_their_gradients(tmp_path):
    """Phase 3's training loop (`train_run`) under `accelerate launch --num_processes 2`, gloo on
    the CPU, the setting workflow/accelerate/gpu.yaml scales to GPUs: each process trains the same
    tiny orchestrator on its share of each batch with its own draws, so the two end with the same
    weights only through the averaged gradients; and they did train (tests/phase3_two_processes.py)."""
    launcher = [str(BIN / "accelerate"), "launch", "--config_file", str(ROOT / "workflow/accelerate/cpu.yaml"),
                "--multi_gpu", "--num_processes", "2"]
    proc = subprocess.run([*launcher, str(ROOT / "tests/phase3_two_processes.py"), str(tmp_path)], cwd=tmp_path,
                          env=tool_env(ROOT), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    digests = json.loads((tmp_path / "digests.json").read_text())
    assert len(digests["after"]) == 2
    assert digests["after"][0] == digests["after"][1] != digests["before"]


def phase4_args(run: str, params: str = "params.yaml") -> list[str]:
    return ["aegir.stages.phase4", "--params", params, "--data", "data", "--phase3", "a/model", "--models", "models",
            "--out", f"{run}/model", "--metrics", f"{run}/metrics", "--state", f"{run}/state"]


def test_phase4_reports_the_swarm_and_a_killed_run_resumes_to_the_same_bytes(tiny_phase1):
    if not (tiny_phase1 / "a/model/model.safetensors").exists():
        run_module(tiny_phase1, *phase3_args("a"))
    params = yaml.safe_load((tiny_phase1 / "params.yaml").read_text())
    # long enough to be killed mid-training; no cost per critical step, so that the tiny policy
    # spawns on some tables (the product reading below has something to move: with the default
    # tiny cost it spawned on none after the generator drew coordinates anywhere)
    # (seed 1: with the output seam the seed-0 policy spawned on no table, seeds 1-3 on every one,
    # on a 2-core AMD EPYC)
    longer = deep_update(params, {"phase4": {"steps": 24, "step_cost": 0.0, "seed": 1}})
    (tiny_phase1 / "p4.yaml").write_text(yaml.safe_dump(longer, sort_keys=False))
    run_module(tiny_phase1, *phase4_args("s4", "p4.yaml"))
    kill_at_saved_step([sys.executable, "-m", *phase4_args("s4killed", "p4.yaml")], tiny_phase1, tool_env(ROOT),
                       tiny_phase1 / "s4killed/state/state.json", 2)
    assert not (tiny_phase1 / "s4killed/model").exists()
    resumed = run_module(tiny_phase1, *phase4_args("s4killed", "p4.yaml"))
    assert "resuming phase4 at step" in resumed.stdout + resumed.stderr
    for rel in PHASE4_OUTPUTS:
        assert digest(tiny_phase1 / "s4killed" / rel) == digest(tiny_phase1 / "s4" / rel), rel
    again = run_module(tiny_phase1, *phase4_args("s4killed", "p4.yaml"))  # finished: resumes at its end
    assert "resuming phase4 at step 24/24" in again.stdout + again.stderr
    for rel in PHASE4_OUTPUTS:
        assert digest(tiny_phase1 / "s4killed" / rel) == digest(tiny_phase1 / "s4" / rel), rel
    # the trained merge read as a product instead: no training step changes (the saved end
    # resumes), the stored merged distributions of every table it spawned on do, each column's
    # best label does not; the tables it spawned nothing on keep the orchestrator's reading
    shutil.copytree(tiny_phase1 / "s4/state", tiny_phase1 / "s4prod/state")
    product = deep_update(longer, {"phase4": {"merge_reading": "product"}})
    (tiny_phase1 / "p4prod.yaml").write_text(yaml.safe_dump(product, sort_keys=False))
    read = run_module(tiny_phase1, *phase4_args("s4prod", "p4prod.yaml"))
    assert "resuming phase4 at step 24/24" in read.stdout + read.stderr
    prod_scores = json.loads((tiny_phase1 / "s4prod/metrics/scores.json").read_text())
    assert prod_scores["merge"]["reading"] == "product"
    assert json.loads((tiny_phase1 / "s4/metrics/scores.json").read_text())["merge"]["reading"] == "geometric"
    assert json.loads((tiny_phase1 / "s4prod/model/config.json").read_text())["swarm"]["merge"] == "product"
    with safe_open(str(tiny_phase1 / "s4/model/eval_reads.safetensors"), framework="pt") as geo, \
            safe_open(str(tiny_phase1 / "s4prod/model/eval_reads.safetensors"), framework="pt") as prod:
        moved = checked = 0
        for split in prod_scores["learned"]["spawn"]:
            columns = geo.get_tensor(f"{split}/columns").tolist()
            spawned = geo.get_tensor(f"{split}/spawned").bool().repeat_interleave(torch.tensor(columns))
            assert torch.equal(spawned, prod.get_tensor(f"{split}/spawned").bool().repeat_interleave(
                torch.tensor(columns))), split
            deep = geo.get_tensor(f"{split}/deep").bool().repeat_interleave(torch.tensor(columns))
            assert torch.equal(deep, prod.get_tensor(f"{split}/deep").bool().repeat_interleave(
                torch.tensor(columns))), split
            assert not (deep & ~spawned).any()
            # without deep search the division keeps each column's order; with it the fine stage
            # weighs the deep read against a merge of another scale (and the coarse family may move)
            wide = spawned & ~deep
            checked += int(wide.sum())
            for task in ("cta", "cpa"):
                a, b = geo.get_tensor(f"{split}/{task}"), prod.get_tensor(f"{split}/{task}")
                assert torch.equal(a[~spawned], b[~spawned]), (split, task)
                assert torch.equal(a[wide].argmax(-1), b[wide].argmax(-1)), (split, task)
                moved += int((a[spawned] != b[spawned]).any())
        assert moved > 0 and checked > 0

    metrics = json.loads((tiny_phase1 / "s4/metrics/metrics.json").read_text())
    scores = json.loads((tiny_phase1 / "s4/metrics/scores.json").read_text())
    for kind in ("learned", "never", "always"):
        assert set(scores[kind]["cta"]) == {"valid", "test", "corner_cases", "missing_values",
                                            "format_heterogeneity", "real", "wide"}
    # the DVC metrics: the learned policy's (the swarm's) headline only
    assert set(metrics) == {"swarm"} and set(metrics["swarm"]) == {"cta", "cpa"}
    assert metrics["swarm"]["cpa"]["real"] == round(scores["learned"]["cpa"]["real"]["micro_f1"], 2)
    # never spawning is the Phase 3 fused orchestrator exactly as `phase3` scored it (column groups,
    # row views, joint decoding), from the distributions it stored: every split, both tasks
    fused = json.loads((tiny_phase1 / "a/metrics/scores.json").read_text())["fused"]
    assert (tiny_phase1 / "a/model/eval_reads.safetensors").is_file()
    assert scores["phase3_reading"]["store"] == "found" and all(scores["phase3_reading"]["stored"].values())
    for task in ("cta", "cpa"):
        assert scores["never"][task] == fused[task], task
        assert scores["never"]["real_domains"][task] == fused["real_domains"][task], task
    assert scores["never"]["spawn"]["test"]["mean_subagents"] == 0
    for split in scores["never"]["spawn"]:  # the share of tables with a sub-agent: none never, all always
        assert scores["never"]["spawn"][split]["spawn_share"] == 0
        assert scores["always"]["spawn"][split]["spawn_share"] == 1
        assert scores["always"]["spawn"][split]["consult_share"] == 1  # every second opinion, every table
        assert scores["never"]["spawn"][split]["consult_share"] == 0
        learned = scores["learned"]["spawn"][split]
        assert (learned["spawn_share"] > 0) == (learned["mean_subagents"] > 0), split
    # the swarm's stored reads say per table whether it spawned (calibrate decodes by it)
    with safe_open(str(tiny_phase1 / "s4/model/eval_reads.safetensors"), framework="pt") as f:
        for split, spawn in scores["learned"]["spawn"].items():
            flags = f.get_tensor(f"{split}/spawned")
            assert flags.shape == f.get_tensor(f"{split}/columns").shape, split
            assert round(float(flags.float().mean()), 4) == spawn["spawn_share"], split
    cap = longer["phase4"]["max_subagents"]
    for kind in ("learned", "never", "always"):  # F1 per critical step, per split and on the pooled scaling splits
        mix = scores[kind]["mix"]
        assert mix["splits"] == ["test", "corner_cases", "wide"] and mix["tables"] == 12 + 12 + 6
        for task in ("cta", "cpa"):
            assert mix["f1_per_critical_step"][task] == pytest.approx(
                mix[f"{task}_micro_f1"] / mix["mean_critical_steps"], abs=1e-3)
            wide = scores[kind]["spawn"]["wide"]
            assert wide["f1_per_critical_step"][task] == pytest.approx(
                scores[kind][task]["wide"]["micro_f1"] / wide["mean_critical_steps"], abs=1e-3)
    assert scores["never"]["mix"]["mean_critical_steps"] <= scores["always"]["mix"]["mean_critical_steps"]
    # where deep search helps: never against deep search alone, on X/name, X/description columns and the rest
    for split, effect in scores["deep_search"].items():
        never, deep = effect["never"], effect["deep"]
        assert never["family_columns"] == deep["family_columns"] and never["other_columns"] == deep["other_columns"]
        assert never["family_columns"] + never["other_columns"] > 0
        assert deep["mean_critical_steps"] >= never["mean_critical_steps"], split  # its round waits for the merge
        assert all(0 <= x[key] <= 100 for x in (never, deep) for key in ("family_cta", "other_cta"))
    assert set(scores["deep_search"]) == set(scores["learned"]["cta"])
    assert any(e["deep"]["mean_critical_steps"] > e["never"]["mean_critical_steps"] for e in scores["deep_search"].values())
    # the learned policy's spawning per table domain and split, for the report's heatmap: per
    # split, wide sub-agents within the cap and deep ones on top only where it searched deep; per
    # domain, a mean of whole counts over the domain's evaluated tables (the first eval_tables),
    # and the means weighted by those tables give the split's mean
    by_domain = scores["spawning"]["subagents_by_domain"]
    assert by_domain and set().union(*(set(row) for row in by_domain.values())) == set(scores["learned"]["cta"])
    limit = longer["phase4"]["eval_tables"] or None
    for split, spawn in scores["learned"]["spawn"].items():
        assert 0 <= spawn["mean_wide_subagents"] <= cap, split
        assert (spawn["mean_subagents"] > spawn["mean_wide_subagents"]) == (
            spawn["deep_rate"] > 0 or spawn["consult_share"] > 0), split
        domains = Counter(domain or "unknown" for domain in pq.read_table(
            tiny_phase1 / "data" / f"{split}.parquet", columns=["domain"]).column("domain").to_pylist()[:limit])
        means = {domain: row[split] for domain, row in by_domain.items() if split in row}
        assert set(means) == set(domains), split
        for domain, tables in domains.items():  # (each mean rounded to 4 places)
            assert means[domain] * tables == pytest.approx(round(means[domain] * tables), abs=1e-4 * tables)
            # + a second opinion of each sub-agent kind
            assert 0 <= means[domain] <= cap + len(longer["phase4"]["specialists"]) or spawn["deep_rate"] > 0, (split, domain)
        weighted = sum(means[domain] * tables for domain, tables in domains.items()) / sum(domains.values())
        assert weighted == pytest.approx(spawn["mean_subagents"], abs=2e-4), split
    # the training charged each decision's added critical steps (phase4.step_cost): the reward
    # logged is λ1·r_parallel + λ2·r_finish + r_perf − step_cost·extra_critical_steps, each a mean
    # over a logging window, checked where λ1 and λ2 hold over the whole window (the mean of a
    # product is then the product of the means), and some window charged some steps
    curves = tiny_phase1 / "s4/metrics/live/plots/metrics/reward"
    logged = {name: {int(step): float(value) for step, value in
                     (line.split("\t") for line in (curves / f"{name}.tsv").read_text().splitlines()[1:])}
              for name in ("reward", "r_parallel", "r_finish", "r_perf", "extra_critical_steps")}
    schedule = LambdaSchedule(load_params(tiny_phase1 / "p4.yaml").sections["lambda"])
    steps, every, step_cost = (longer["phase4"][key] for key in ("steps", "log_every", "step_cost"))
    lambdas = [schedule.at(step / max(1, steps - 1)) for step in range(steps)]
    assert sorted(logged["reward"]) == list(range(every, steps + 1, every))
    checked = []
    for done in logged["reward"]:
        if len(set(lambdas[done - every:done])) == 1:
            (lam1, lam2), extra = lambdas[done - 1], logged["extra_critical_steps"][done]
            assert logged["reward"][done] == pytest.approx(
                lam1 * logged["r_parallel"][done] + lam2 * logged["r_finish"][done] + logged["r_perf"][done]
                - step_cost * extra, abs=1e-6), done
            checked.append(extra)
    assert len(checked) >= 3 and all(extra >= 0 for extra in checked) and max(checked) > 0, checked
    rows = json.loads((tiny_phase1 / "s4/metrics/scaling.json").read_text())
    assert [row["n"] for row in rows] == longer["phase4"]["scaling_n"]
    kinds = load_params(tiny_phase1 / "p4.yaml").phase4.specialists
    assert len(kinds) == 4  # params.yaml's: primary, places, media, commerce
    for row in rows:
        for split in ("test", "corner_cases", "wide"):
            # the budget: wide search never spawns more than n; deep search and the second opinions
            # (one per sub-agent kind) come on top
            assert row[f"always_{split}_mean_wide_subagents"] <= row["n"]
            assert row[f"always_{split}_mean_subagents"] <= row["n"] + len(kinds)
            assert row[f"never_{split}_critical_steps"] <= row[f"always_{split}_critical_steps"]
            assert row[f"never_{split}_total_steps"] <= row[f"always_{split}_total_steps"]
    wide_tables = [row["always_wide_mean_wide_subagents"] for row in rows]
    assert wide_tables == sorted(wide_tables) and wide_tables[-1] > 0 and rows[-1]["n"] == cap
    timing = json.loads((tiny_phase1 / "s4/metrics/timing.json").read_text())
    assert list(timing["subagents_batched_vs_sequential"]) == [f"n{n}" for n in longer["phase4"]["scaling_n"] if n]
    config = json.loads((tiny_phase1 / "s4/model/config.json").read_text())
    assert [s["name"] for s in config["swarm"]["specialists"]] == ["primary", "places", "media", "commerce"]
    assert config["swarm"]["phase3"]["fingerprint"] == hashlib.sha256(
        b"config.json" + (tiny_phase1 / "a/model/config.json").read_bytes()
        + b"model.safetensors" + (tiny_phase1 / "a/model/model.safetensors").read_bytes()).hexdigest()


def test_annotate_and_evaluate_with_the_swarm_checkpoint(tiny_phase1):
    """`aegir annotate --checkpoint models/phase4` shows the sub-agents spawned and the critical
    steps; `aegir evaluate` scores the swarm as the stage did (its learned policy)."""
    if not (tiny_phase1 / "s4/model/model.safetensors").exists():
        test_phase4_reports_the_swarm_and_a_killed_run_resumes_to_the_same_bytes(tiny_phase1)
    (tiny_phase1 / "t.csv").write_text("name,phone,zip,opened,rooms,stars\n"
                                       "Hotel Adlon,+49 30 22610,10117,1907-10-23,382,5\n"
                                       "The Ritz,+44 20 7493 8181,W1J 9BR,1906-05-24,136,5\n"
                                       "Cafe Central,+43 1 533 37 63,1010,1876-01-01,0,3\n")
    proc = run_module(tiny_phase1, "aegir.cli", "annotate", "t.csv", "--checkpoint", "s4/model", "--json")
    result = json.loads(proc.stdout)
    swarm = result["swarm"]
    assert set(swarm) == {"subagents", "specialist", "groups", "deep_search", "deep_columns", "phase3_specialists",
                          "second_opinions", "critical_steps", "total_steps", "changes"}
    assert swarm["second_opinions"] in ([], ["primary", "places", "media", "commerce"])  # all kinds or none
    for change in swarm["changes"]:  # what the sub-agents changed: the Phase 3 reading's label → the swarm's
        assert change["before"] != change["after"] and change["task"] in ("cta", "cpa")
        final = result["columns"][change["column"]][change["task"]][0]["label"]
        assert final == change["after"]
    assert 0 <= swarm["subagents"] <= 4 and len(swarm["groups"]) == swarm["subagents"]
    assert sorted(c for g in swarm["groups"] for c in g[1:]) == (list(range(1, 6)) if swarm["subagents"] else [])
    assert swarm["critical_steps"] <= swarm["total_steps"] and len(result["columns"]) == 6
    text = run_module(tiny_phase1, "aegir.cli", "annotate", "t.csv", "--checkpoint", "s4/model").stdout
    assert "swarm: " in text and f"{swarm['critical_steps']} critical steps" in text
    assert ("second opinions of the whole table from primary, places, media, commerce" if swarm["second_opinions"]
            else "no second opinion") in text
    proc = run_module(tiny_phase1, "aegir.cli", "evaluate", "--checkpoint", "s4/model", "--data", "data",
                      "--split", "test", "--split", "wide", "--out", "s4eval.json")
    evaluated = json.loads((tiny_phase1 / "s4eval.json").read_text())
    scores = json.loads((tiny_phase1 / "s4/metrics/scores.json").read_text())
    for split in ("test", "wide"):
        for task in ("cta", "cpa"):
            assert evaluated[split][task]["micro_f1"] == pytest.approx(scores["learned"][task][split]["micro_f1"])


def test_phase4_trains_on_policy_train_and_the_wide_train_split(tiny_phase1):
    """Phase 4's training tables: the first of `policy_train`, then the first of `wide_train`
    (never an evaluation split, and never a table a model of Phases 1–3 read)."""
    import torch

    from aegir.config import load_params
    from aegir.data.dataset import examples_from_arrow
    from aegir.data.prepared import read_split, split_path
    from aegir.labels import cta_vocab
    from aegir.orchestrator.checkpoint import load_orchestrator
    from aegir.orchestrator.specialist import load_agents
    from aegir.swarm.model import Phase3Reading, phase3_readings
    from aegir.swarm.spawn import family_of_labels
    from aegir.swarm.splits import load_training

    if not (tiny_phase1 / "a/model/model.safetensors").exists():
        run_module(tiny_phase1, *phase3_args("a"))
    params = load_params(tiny_phase1 / "params.yaml")
    orch, _ = load_orchestrator(tiny_phase1 / "a/model")
    reading = Phase3Reading(columns=4, views=2)  # (this module's stages read each table whole, once)
    data = load_training(tiny_phase1 / "data", orch, load_agents(tiny_phase1 / "models", ["primary"]), params,
                         family_of_labels(cta_vocab())[0], reading)
    ids = [e.table_id for e in data.examples]
    # each view holds the orchestrator's reading of its table as `phase3` scores them (column
    # groups, row views), not its one read of the shared stream
    plan = reading.plan(data.tables, data.examples, params.prepare, tiny_phase1 / "data")
    assert len(plan.reads) > len(data.examples)
    for view, expected in zip(data.views, phase3_readings(orch, plan, ids, 8)):
        assert torch.equal(view.cta_logp.argmax(-1), torch.from_numpy(expected.cta_ids[:, 0]))
    assert len(ids) == len(data.views) == len(data.tables) == 16 + 4
    assert [i[:len("synth_policy_train_000000")] for i in ids[:16]] == [f"synth_policy_train_{i:06d}"
                                                                        for i in range(16)]
    read_before = {e.table_id for split in ("train", "specialist_train")
                   for e in examples_from_arrow(read_split(tiny_phase1 / "data", split),
                                                split_path(tiny_phase1 / "data", split))}
    assert not read_before & set(ids)
    assert [i[:len("synth_wide_train_000000")] for i in ids[16:]] == [f"synth_wide_train_{i:06d}" for i in range(4)]
    assert all(view.num_columns >= 6 for view in data.views[16:])  # the tiny wide tables: 6–10 columns


def test_phase4_bad_inputs_fail_clearly(tiny_phase1):
    params = yaml.safe_load((tiny_phase1 / "params.yaml").read_text())
    many = deep_update(params, {"phase4": {"wide_train_tables": 99}})
    (tiny_phase1 / "many4.yaml").write_text(yaml.safe_dump(many, sort_keys=False))
    proc = run_module(tiny_phase1, *phase4_args("many4", "many4.yaml"), check=False)
    assert proc.returncode == 2 and "phase4.wide_train_tables: asks for 99 tables" in proc.stderr
    assert "wide_train.parquet has 4" in proc.stderr and not (tiny_phase1 / "many4").exists()
    many = deep_update(params, {"phase4": {"train_tables": 17}})
    (tiny_phase1 / "many4.yaml").write_text(yaml.safe_dump(many, sort_keys=False))
    proc = run_module(tiny_phase1, *phase4_args("many4", "many4.yaml"), check=False)
    assert proc.returncode == 2 and "phase4.train_tables: asks for 17 tables" in proc.stderr
    assert "policy_train.parquet has 16 (synthetic.policy_train_tables)" in proc.stderr
    assert not (tiny_phase1 / "many4").exists()
    bad = deep_update(params, {"phase4": {"specialists": ["primary", "nobody"]}})
    (tiny_phase1 / "bad4.yaml").write_text(yaml.safe_dump(bad, sort_keys=False))
    proc = run_module(tiny_phase1, *phase4_args("bad4", "bad4.yaml"), check=False)
    assert proc.returncode == 2 and "phase4.specialists: unknown agent(s) ['nobody']" in proc.stderr
    args = phase4_args("bad4")
    args[args.index("a/model")] = "missing_phase3"
    proc = run_module(tiny_phase1, *args, check=False)
    assert proc.returncode == 2 and "missing_phase3" in proc.stderr
    assert not (tiny_phase1 / "bad4").exists()  # nothing half-written


def test_swarm_checkpoint_refuses_a_changed_subagent(tiny_phase1):
    """The swarm names its frozen parts by fingerprint: a retrained sub-agent is an error naming it."""
    import shutil

    if not (tiny_phase1 / "s4/model/model.safetensors").exists():
        test_phase4_reports_the_swarm_and_a_killed_run_resumes_to_the_same_bytes(tiny_phase1)
    moved = tiny_phase1 / "moved"
    for rel in ("s4/model", "a/model", "models"):  # the same layout elsewhere: relative paths still hold
        shutil.copytree(tiny_phase1 / rel, moved / rel)
    (moved / "t.csv").write_text("name,phone\nHotel Adlon,+49 30 22610\nThe Ritz,+44 20 7493 8181\n")
    ok = run_module(moved, "aegir.cli", "annotate", "t.csv", "--checkpoint", "s4/model", check=False)
    assert ok.returncode == 0, ok.stderr
    config = moved / "models/places/config.json"
    config.write_text(config.read_text() + " ")
    proc = run_module(moved, "aegir.cli", "annotate", "t.csv", "--checkpoint", "s4/model", check=False)
    assert proc.returncode == 2 and "models/places" in proc.stderr and "has changed" in proc.stderr, proc.stderr


def test_phase1_share_blends_each_runs_primary_after_training(tiny_phase1):
    """`phase3.phase1_share` acts after the runs, outside their fingerprint (and so does
    `vote_primary`, a knob of evaluation): the runs of `a` resume at their end with the blend off
    and the vote on, and `a`'s primaries (fused and control) are exactly (1 − share)·those +
    share·the Phase 1 primary; every other weight is the same."""
    from safetensors.torch import load_file

    if not (tiny_phase1 / "a/model/model.safetensors").exists():
        run_module(tiny_phase1, *phase3_args("a"))
    params = yaml.safe_load((tiny_phase1 / "params.yaml").read_text())
    share = params["phase3"]["phase1_share"]
    assert 0 < share < 1  # params.yaml's default
    params["phase3"]["phase1_share"] = 0
    assert params["phase3"]["vote_primary"] is False and params["phase3"]["subject_route"]
    params["phase3"]["vote_primary"] = True
    (tiny_phase1 / "unblended.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    shutil.rmtree(tiny_phase1 / "plain", ignore_errors=True)
    shutil.copytree(tiny_phase1 / "a/state", tiny_phase1 / "plain/state")
    out = run_module(tiny_phase1, *phase3_args("plain", "unblended.yaml"))
    steps = TINY_PARAMS_OVERRIDE["phase3"]["steps"]
    for run in ("fused", "control"):
        assert f"resuming phase3 {run} at step {steps}" in out.stdout + out.stderr
    assert json.loads((tiny_phase1 / "plain/model/config.json").read_text())["orchestrator"]["vote_primary"] is True
    start = load_file(str(tiny_phase1 / "models/primary/model.safetensors"))
    for rel, prefix in (("model/model.safetensors", "primary."), ("model/control/model.safetensors", "")):
        blended, plain = load_file(str(tiny_phase1 / "a" / rel)), load_file(str(tiny_phase1 / "plain" / rel))
        assert set(blended) == set(plain)
        moved = 0
        for key, value in plain.items():
            name = key[len(prefix):] if key.startswith(prefix) else None
            if name in start:
                assert torch.equal(blended[key], (1 - share) * value + share * start[name]), key
                moved += not torch.equal(blended[key], value)
            else:  # router, fusion, alignments: as trained
                assert torch.equal(blended[key], value), key
        assert moved > 0

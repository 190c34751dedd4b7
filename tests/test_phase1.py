"""Phase 1 training on tiny settings: determinism, resume after a kill, two processes."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from aegir.eval.reads import READS_FILE
from conftest import (
    BIN,
    ROOT,
    TINY_PARAMS_OVERRIDE,
    deep_update,
    kill_at_saved_step,
    tool_env,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def tiny_setup(tmp_path_factory):
    """Tiny params + prepared data, shared by the tests of this module."""
    root = tmp_path_factory.mktemp("phase1")
    params = deep_update(yaml.safe_load((ROOT / "params.yaml").read_text()), TINY_PARAMS_OVERRIDE)
    params = deep_update(params, {"phase1": {"max_steps": 8, "checkpoint_every": 2, "eval_every": 0}})
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    subprocess.run([sys.executable, "-m", "aegir.stages.prepare", "--params", "params.yaml",
                    "--out", "data", "--stats", "stats.json"], cwd=root, env=tool_env(ROOT),
                   check=True, capture_output=True)
    return root


def test_an_agent_capped_at_n_train_tables_reads_the_first_n_of_its_domains(tiny_setup):
    """`agents.<a>.train_tables: n`: the first n tables of the `train` split, then the domain
    filter, in the split's order (so that more prepared tables leave the agent's data as it was);
    more tables than the split holds fail naming the file."""
    from aegir.config import AgentConfig
    from aegir.data.dataset import load_examples
    from aegir.errors import DataError
    from aegir.train.supervised import training_examples

    data = tiny_setup / "data"
    every = load_examples(data, "train")
    assert [e.table_id for e in training_examples(data, AgentConfig())] == [e.table_id for e in every]
    first = [e.table_id for e in training_examples(data, AgentConfig(train_tables=25))]
    assert first == [e.table_id for e in every[:25]]
    domains = tuple(sorted({e.domain for e in every[:25]}))[:2]
    capped = training_examples(data, AgentConfig(domains=domains, train_tables=25))
    assert [e.table_id for e in capped] == [e.table_id for e in every[:25] if e.domain in domains]
    assert 0 < len(capped) < len([e for e in every if e.domain in domains])
    with pytest.raises(DataError, match=r"train\.parquet.*asks for 61 tables; the split has 60"):
        training_examples(data, AgentConfig(train_tables=61))


def test_a_specialist_reads_its_domains_of_specialist_train_which_the_primary_never_reads(tiny_setup):
    """`extra_tables: n`: after its `train` tables (none with `train_tables: 0`), the agent's
    domains among the first n tables of `specialist_train`, in that split's order; the primary
    (no extra tables) reads none of them; more than the split holds fails naming the file."""
    from aegir.config import AgentConfig
    from aegir.data.dataset import load_examples
    from aegir.errors import DataError
    from aegir.train.supervised import training_examples

    data = tiny_setup / "data"
    train, extra = load_examples(data, "train"), load_examples(data, "specialist_train")
    assert len(extra) == 40 and not {e.table_id for e in extra} & {e.table_id for e in train}
    assert all(e.table_id.startswith("synth_specialist_train_") for e in extra)
    domains = tuple(sorted({e.domain for e in extra[:20]}))[:3]
    got = training_examples(data, AgentConfig(domains=domains, train_tables=0, extra_tables=20))
    assert [e.table_id for e in got] == [e.table_id for e in extra[:20] if e.domain in domains] and got
    both = training_examples(data, AgentConfig(domains=domains, train_tables=10, extra_tables=20))
    assert [e.table_id for e in both] == [e.table_id for e in train[:10] if e.domain in domains] + \
        [e.table_id for e in got]
    assert not {e.table_id for e in training_examples(data, AgentConfig())} & {e.table_id for e in extra}
    with pytest.raises(DataError, match=r"specialist_train\.parquet.*asks for 41 tables; the split has 40"):
        training_examples(data, AgentConfig(extra_tables=41))


def test_a_specialist_starts_from_the_primary_and_is_scored_beside_it(tiny_setup):
    """`init: primary`: the specialist's first step starts from the primary's weights (its run,
    and its checkpoint, name the primary's checkpoint by fingerprint), and its scores hold the
    primary's F1 on its own domains' tables — the figures the primary itself gives there when
    scored afresh — and the margin between the two."""
    from accelerate import Accelerator

    from aegir.config import AgentConfig, load_params
    from aegir.eval.joint import repeats_of
    from aegir.eval.phase1 import final_scores
    from aegir.model.checkpoint import checkpoint_fingerprint, load_checkpoint

    root = tiny_setup
    models = root / "spec" / "models"
    for agent in ("primary", "places"):  # the stage layout: models/<agent>, the primary beside
        cmd = [sys.executable, "-m", "aegir.stages.phase1", "--agent", agent, "--params", "params.yaml", "--data",
               "data", "--out", f"spec/models/{agent}", "--metrics", f"spec/metrics/{agent}", "--state",
               f"spec/state/{agent}"]
        proc = subprocess.run(cmd, cwd=root, env=tool_env(ROOT), capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    config = json.loads((models / "places" / "config.json").read_text())
    assert config["init_fingerprint"] == checkpoint_fingerprint(models / "primary")
    assert config["agent_config"]["init"] == "primary"
    primary, primary_config = load_checkpoint(models / "primary")
    specialist, _ = load_checkpoint(models / "places")
    assert any(not torch.equal(a, b) for a, b in zip(primary.state_dict().values(), specialist.state_dict().values()))

    params = load_params(root / "params.yaml")
    scores = json.loads((root / "spec" / "metrics" / "places" / "scores.json").read_text())
    repeats = repeats_of(primary_config, "primary")
    afresh = final_scores(primary, AgentConfig(preset="tiny", domains=params.specialists["places"].domains),
                          root / "data", params.phase1, params.prepare, params.reading,
                          Accelerator(cpu=True), None, "primary", None, repeats)["in_domain"]
    assert scores["in_domain_primary"] == afresh
    for task in ("cta", "cpa"):
        assert set(scores["in_domain_margin"][task]) == set(scores["in_domain"][task])
        for split, margin in scores["in_domain_margin"][task].items():
            assert margin == round(scores["in_domain"][task][split]["micro_f1"] - afresh[task][split]["micro_f1"], 4)


def test_a_specialist_whose_own_tables_changed_trains_again_instead_of_resuming(tiny_setup):
    """The run of a specialist names `specialist_train` (which the primary's run does not read):
    after the split changes (here: drawn with hard styles too), the specialist's saved end is
    another run's, so it trains from step 0 on the new tables; unchanged, it resumes at its end."""
    root = tiny_setup
    if not (root / "spec/models/places/config.json").is_file():
        pytest.skip("needs the specialist of test_a_specialist_starts_from_the_primary_and_is_scored_beside_it")
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["synthetic"]["specialist_train_styles"] = ["natural", "corner_cases"]
    (root / "params_hard.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    subprocess.run([sys.executable, "-m", "aegir.stages.prepare", "--params", "params_hard.yaml", "--out", "data_hard",
                    "--stats", "stats_hard.json", "--metrics", "metrics_hard.json"], cwd=root, env=tool_env(ROOT),
                   check=True, capture_output=True)
    for split in ("train", "valid", "test", "real"):  # only the specialists' own split moved
        assert (root / "data" / f"{split}.parquet").read_bytes() == (root / "data_hard" / f"{split}.parquet").read_bytes()
    assert (root / "data/specialist_train.parquet").read_bytes() != (root / "data_hard/specialist_train.parquet").read_bytes()

    def run(data: str) -> str:
        cmd = [sys.executable, "-m", "aegir.stages.phase1", "--agent", "places", "--params", "params.yaml", "--data",
               data, "--out", "spec/models/places", "--metrics", "spec/metrics/places", "--state", "spec/state/places"]
        proc = subprocess.run(cmd, cwd=root, env=tool_env(ROOT), capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout + proc.stderr

    before = (root / "spec/models/places/model.safetensors").read_bytes()
    assert re.search(r"resuming places at step (\d+)/\1\b", run("data"))  # at its end
    assert (root / "spec/models/places/model.safetensors").read_bytes() == before
    log = run("data_hard")
    assert "resuming places" not in log
    assert (root / "spec/models/places/model.safetensors").read_bytes() != before


def phase1_cmd(run: str, agent: str = "primary") -> list[str]:
    return ["-m", "aegir.stages.phase1", "--agent", agent, "--params", "params.yaml", "--data", "data",
            "--out", f"{run}/model", "--metrics", f"{run}/metrics", "--state", f"{run}/state"]


def run_phase1(root: Path, run: str, launcher: list[str] | None = None,
               threads: int | None = 1) -> subprocess.CompletedProcess:
    cmd = (launcher or [sys.executable]) + phase1_cmd(run)
    proc = subprocess.run(cmd, cwd=root, env=tool_env(ROOT, threads), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_same_seed_gives_byte_identical_checkpoint_and_metrics(tiny_setup):
    # torch's default threads, as under `dvc repro`: on a machine of several cores, the sharded
    # step in worker threads (the other tests' stages, run "a" among them, run on one thread:
    # conftest.tool_env)
    run_phase1(tiny_setup, "cores_a", threads=None)
    run_phase1(tiny_setup, "cores_b", threads=None)
    for rel in ("model/model.safetensors", "model/config.json", f"model/{READS_FILE}", "metrics/metrics.json",
                "metrics/scores.json"):
        assert digest(tiny_setup / "cores_a" / rel) == digest(tiny_setup / "cores_b" / rel), rel
    scores = json.loads((tiny_setup / "cores_a/metrics/scores.json").read_text())
    assert scores["steps"] == 8
    assert set(scores["cta"]) == {"valid", "test", "corner_cases", "missing_values", "format_heterogeneity",
                                  "real", "wide"}
    # the DVC metrics: per task the benchmark mean and the real split, under the agent's name
    headline = json.loads((tiny_setup / "cores_a/metrics/metrics.json").read_text())
    bench = ("test", "corner_cases", "missing_values", "format_heterogeneity", "wide")
    assert headline == {"primary": {task: {
        "bench": round(sum(scores[task][s]["micro_f1"] for s in bench) / len(bench), 2),
        "real": round(scores[task]["real"]["micro_f1"], 2)} for task in ("cta", "cpa")}}
    timing = json.loads((tiny_setup / "cores_a/metrics/timing.json").read_text())
    wall = json.loads((tiny_setup / "cores_a/metrics/wall.json").read_text())
    assert timing["wall_seconds"] > 0 and list(wall) == ["minutes"] and list(wall["minutes"]) == ["phase1_primary"]
    # (wall.json rounds the unrounded seconds, timing.json holds them to 0.1 s)
    assert wall["minutes"]["phase1_primary"] == pytest.approx(timing["wall_seconds"] / 60, abs=0.006)
    config = json.loads((tiny_setup / "cores_a/model/config.json").read_text())
    assert config["num_processes"] == 1
    assert len(config["vocab"]["cta"]) == 82 and len(config["vocab"]["cpa"]) == 108
    assert set(config["data_fingerprint"]) >= {"train", "valid"}
    # the training tables' label repeat counts, for the reading's joint decoding (aegir.eval.joint)
    repeats = config["label_repeats"]
    assert len(repeats["cta"]["tables"]) == 82 and len(repeats["cpa"]["repeated"]) == 108
    assert 0 < max(repeats["cta"]["tables"]) <= scores["train_tables"]
    assert all(r <= t for r, t in zip(repeats["cta"]["repeated"], repeats["cta"]["tables"]))
    curves = tiny_setup / "cores_a/metrics/live/plots/metrics"
    assert (curves / "train/loss.tsv").is_file() and (curves / "chunking/ratio.tsv").is_file()
    # beside the weights, every evaluation read's whole label distributions, for Phase 3 (aegir.eval.reads)
    stored = load_file(tiny_setup / "cores_a/model" / READS_FILE)
    assert {key.split("/")[0] for key in stored} == set(scores["cta"])
    for split in scores["cta"]:
        columns = int(stored[f"{split}/columns"].sum())
        assert columns >= scores["cta"][split]["support"]  # every labelled column at least once
        for task, labels in (("cta", 82), ("cpa", 108)):
            probs = stored[f"{split}/{task}"]
            assert probs.shape == (columns, labels) and probs.dtype == torch.float32
            assert torch.allclose(probs.sum(-1), torch.ones(columns), atol=1e-5)


def test_killed_run_resumes_to_the_same_result(tiny_setup):
    if not (tiny_setup / "a/model/model.safetensors").exists():
        run_phase1(tiny_setup, "a")
    kill_at_saved_step([sys.executable, *phase1_cmd("killed")], tiny_setup, tool_env(ROOT),
                       tiny_setup / "killed/state/state.json", 2)
    assert not (tiny_setup / "killed/model/model.safetensors").exists()
    shutil.rmtree(tiny_setup / "killed/metrics")  # as Snakemake deletes a killed job's outputs
    resumed = run_phase1(tiny_setup, "killed")
    assert "resuming primary at step" in resumed.stdout + resumed.stderr
    for rel in ("model/model.safetensors", "metrics/metrics.json", "metrics/scores.json"):
        assert digest(tiny_setup / "killed" / rel) == digest(tiny_setup / "a" / rel), rel
    # the curves come back from the state's snapshot: the same points as an uninterrupted run
    curves = sorted(p.relative_to(tiny_setup / "a") for p in (tiny_setup / "a/metrics/live").rglob("*.tsv"))
    assert curves
    for rel in curves:
        assert digest(tiny_setup / "killed" / rel) == digest(tiny_setup / "a" / rel), rel


def test_a_torn_state_restarts_with_a_warning_and_ends_as_an_uninterrupted_run(tiny_setup):
    """A resume state damaged from outside (its tensors file cut short, as a full disk or an
    interrupted copy leaves one; the stage's own writes are atomic) under the run's own
    fingerprint: the stage warns, naming the file, trains from step 0 instead of resuming, and
    ends byte-identical to an uninterrupted run."""
    if not (tiny_setup / "a/model/model.safetensors").exists():
        run_phase1(tiny_setup, "a")
    shutil.copytree(tiny_setup / "a/state", tiny_setup / "torn/state")  # a's last state: step 8 of 8
    tensors = tiny_setup / "torn/state/state.safetensors"
    tensors.write_bytes(tensors.read_bytes()[:-100])
    proc = run_phase1(tiny_setup, "torn")
    log = proc.stdout + proc.stderr
    assert "resuming" not in log
    assert f"ignoring the training state in torn/state: {tensors.relative_to(tiny_setup)} is unreadable" in log, log
    for rel in ("model/model.safetensors", "metrics/metrics.json", "metrics/scores.json"):
        assert digest(tiny_setup / "torn" / rel) == digest(tiny_setup / "a" / rel), rel
    assert json.loads((tiny_setup / "torn/state/state.json").read_text())["step"] == 8  # replaced by a whole one


# Tolerances of 2 processes against 1, from measured runs on the tiny setup (8 steps): the
# logged losses differed by at most 0.42 % (relative), the final weights were apart by 0.62 of
# the distance travelled. F1 after 8 steps is near chance (0–12 points) and one split's few
# labelled columns flip together (a measured run: CPA format_heterogeneity 10.3 vs 0.0), so
# micro-F1 is compared as the mean over the evaluation splits per task: measured 1.1 (CPA)
# and 0.3 (CTA) points apart. Each shard's loss is normalised by its own label count and
# Adam's first steps are sign-like, so the runs are close, not equal.
LOSS_RTOL = 0.02
WEIGHTS_APART = 0.8
F1_POINTS = 4.0


def test_two_processes_agree_with_one(tiny_setup):
    """Under `accelerate launch` with 2 CPU processes (gloo), training matches one process's.

    Launched with the checked-in accelerate config plus `--multi_gpu --num_processes 2`
    (accelerate's torchrun launcher; with `use_cpu` it runs gloo on the CPU). The global batch
    is split across processes and DDP averages gradients, so the two runs take nearly the same
    steps: the logged training loss (a mean over processes) agrees within LOSS_RTOL at every
    logged step, the distance between the final weights is under WEIGHTS_APART of the
    distance either run moved from the initial weights, and micro-F1 (mean over the splits, per
    task) agrees within F1_POINTS.
    """
    if not (tiny_setup / "a/model/model.safetensors").exists():
        run_phase1(tiny_setup, "a")
    launcher = [str(BIN / "accelerate"), "launch", "--config_file", str(ROOT / "workflow/accelerate/cpu.yaml"),
                "--multi_gpu", "--num_processes", "2"]
    run_phase1(tiny_setup, "two", launcher)
    assert json.loads((tiny_setup / "two/model/config.json").read_text())["num_processes"] == 2
    losses = {run: [line.split("\t") for line in (tiny_setup / run / "metrics/live/plots/metrics/train/loss.tsv")
                    .read_text().splitlines()[1:]] for run in ("a", "two")}
    assert [row[0] for row in losses["a"]] == [row[0] for row in losses["two"]]  # same logged steps
    for (_, one_loss), (_, two_loss) in zip(losses["a"], losses["two"]):
        assert abs(float(two_loss) - float(one_loss)) <= LOSS_RTOL * abs(float(one_loss)), (one_loss, two_loss)
    one = load_file(str(tiny_setup / "a/model/model.safetensors"))
    two = load_file(str(tiny_setup / "two/model/model.safetensors"))
    from aegir.config import load_params
    from aegir.model.network import AegirModel
    from aegir.train.setup import model_config

    torch.manual_seed(0)
    init = AegirModel(model_config(load_params(tiny_setup / "params.yaml"), "tiny")).state_dict()
    moved = sum(float((one[k] - init[k]).float().norm() ** 2) for k in one) ** 0.5
    apart = sum(float((one[k] - two[k]).float().norm() ** 2) for k in one) ** 0.5
    assert moved > 0
    assert apart < WEIGHTS_APART * moved, (apart, moved)
    assert json.loads((tiny_setup / "two/metrics/scores.json").read_text())["steps"] == 8
    f1 = {run: json.loads((tiny_setup / run / "metrics/scores.json").read_text()) for run in ("a", "two")}
    for task in ("cta", "cpa"):
        splits = f1["a"][task]
        one_mean = sum(f["micro_f1"] for f in splits.values()) / len(splits)
        two_mean = sum(f1["two"][task][split]["micro_f1"] for split in splits) / len(splits)
        assert abs(two_mean - one_mean) <= F1_POINTS, (task, one_mean, two_mean)


def test_rerun_of_a_finished_run_changes_nothing(tiny_setup):
    """Re-running a completed run (as `dvc repro` does after a code change) resumes at its end:
    same checkpoint and metrics, and no curve point logged twice."""
    if not (tiny_setup / "a/model/model.safetensors").exists():
        run_phase1(tiny_setup, "a")
    wall_time = ("timing.json", "wall.json")  # they vary
    outputs = sorted(p for p in (tiny_setup / "a").rglob("*")
                     if p.is_file() and "state" not in p.parts and p.name not in wall_time)
    before = {p: digest(p) for p in outputs}
    run_phase1(tiny_setup, "a")
    assert {p: digest(p) for p in outputs} == before
    for tsv in (tiny_setup / "a/metrics/live/plots/metrics").rglob("*.tsv"):
        steps = [line.split("\t")[0] for line in tsv.read_text().splitlines()[1:]]
        assert len(steps) == len(set(steps)), tsv


def test_a_reading_change_rescores_without_retraining(tiny_setup, tmp_path):
    """`reading` is outside the training fingerprint: a finished run rerun with other reading
    settings resumes at its end (same weights, no step trained) and scores with the new ones."""
    if not (tiny_setup / "a/model/model.safetensors").exists():
        run_phase1(tiny_setup, "a")
    run = tiny_setup / "reread"
    shutil.copytree(tiny_setup / "a", run)
    weights = digest(run / "model/model.safetensors")
    params = yaml.safe_load((tiny_setup / "params.yaml").read_text())
    params["reading"] = {"columns": 3, "views": 2}
    (tiny_setup / "reread.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    cmd = [sys.executable, *phase1_cmd("reread")]
    cmd[cmd.index("params.yaml")] = "reread.yaml"
    proc = subprocess.run(cmd, cwd=tiny_setup, env=tool_env(ROOT), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert digest(run / "model/model.safetensors") == weights
    assert json.loads((run / "metrics/timing.json").read_text())["resumed_at_step"] == 8  # nothing trained
    reading = json.loads((run / "model/config.json").read_text())["params"]["reading"]
    assert reading == {"columns": 3, "views": 2, "joint_cta": 0.0, "joint_cpa": 0.0}
    before = json.loads((tiny_setup / "a/metrics/scores.json").read_text())
    after = json.loads((run / "metrics/scores.json").read_text())
    # every column is still scored once (the groups and views merge back to one prediction each)
    assert after["cta"]["wide"]["support"] == before["cta"]["wide"]["support"]
    # …and its curves are those a run from scratch with the new reading logs, byte for byte: the
    # curve's points (the last one too) are single-read evaluations, whatever `reading` says
    fresh = [sys.executable, *phase1_cmd("reread_fresh")]
    fresh[fresh.index("params.yaml")] = "reread.yaml"
    proc = subprocess.run(fresh, cwd=tiny_setup, env=tool_env(ROOT), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    live_files = sorted(p.relative_to(run / "metrics/live") for p in (run / "metrics/live").rglob("*") if p.is_file())
    assert any(str(p).endswith("valid/cta_micro_f1.tsv") for p in live_files)
    for rel in live_files:
        assert (tiny_setup / "reread_fresh/metrics/live" / rel).read_bytes() == (run / "metrics/live" / rel).read_bytes(), rel
    assert (tiny_setup / "reread_fresh/metrics/scores.json").read_bytes() == (run / "metrics/scores.json").read_bytes()

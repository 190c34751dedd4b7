"""Phase 1 training on tiny settings: determinism, resume after a kill, two processes."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from conftest import BIN, ROOT, TINY_PARAMS_OVERRIDE, deep_update, tool_env

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


def phase1_cmd(run: str, agent: str = "primary") -> list[str]:
    return ["-m", "aegir.stages.phase1", "--agent", agent, "--params", "params.yaml", "--data", "data",
            "--out", f"{run}/model", "--metrics", f"{run}/metrics", "--state", f"{run}/state"]


def run_phase1(root: Path, run: str, launcher: list[str] | None = None) -> subprocess.CompletedProcess:
    cmd = (launcher or [sys.executable]) + phase1_cmd(run)
    proc = subprocess.run(cmd, cwd=root, env=tool_env(ROOT), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_same_seed_gives_byte_identical_checkpoint_and_metrics(tiny_setup):
    run_phase1(tiny_setup, "a")
    run_phase1(tiny_setup, "b")
    for rel in ("model/model.safetensors", "model/config.json", "metrics/metrics.json"):
        assert digest(tiny_setup / "a" / rel) == digest(tiny_setup / "b" / rel), rel
    metrics = json.loads((tiny_setup / "a/metrics/metrics.json").read_text())
    assert metrics["steps"] == 8
    assert set(metrics["cta"]) == {"valid", "test", "corner_cases", "missing_values", "format_heterogeneity",
                                   "real"}
    config = json.loads((tiny_setup / "a/model/config.json").read_text())
    assert len(config["vocab"]["cta"]) == 82 and len(config["vocab"]["cpa"]) == 108
    assert set(config["data_fingerprint"]) >= {"train", "valid"}
    curves = tiny_setup / "a/metrics/live/plots/metrics"
    assert (curves / "train/loss.tsv").is_file() and (curves / "chunking/ratio.tsv").is_file()


def test_killed_run_resumes_to_the_same_result(tiny_setup):
    if not (tiny_setup / "a/model/model.safetensors").exists():
        run_phase1(tiny_setup, "a")
    proc = subprocess.Popen([sys.executable, *phase1_cmd("killed")], cwd=tiny_setup, env=tool_env(ROOT),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    state = tiny_setup / "killed/state/state.json"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if state.is_file() and json.loads(state.read_text())["step"] >= 2:
            os.killpg(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.05)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    assert not (tiny_setup / "killed/model/model.safetensors").exists()
    resumed = run_phase1(tiny_setup, "killed")
    assert "resuming primary at step" in resumed.stdout + resumed.stderr
    for rel in ("model/model.safetensors", "metrics/metrics.json"):
        assert digest(tiny_setup / "killed" / rel) == digest(tiny_setup / "a" / rel), rel


def test_two_processes_agree_with_one(tiny_setup):
    """Under `accelerate launch` with 2 CPU processes (gloo), the update matches one process's.

    The global batch is split across processes and DDP averages gradients, so the two runs take
    nearly the same steps: the distance between their weights must be small next to the
    distance either run moved from the initial weights.
    """
    if not (tiny_setup / "a/model/model.safetensors").exists():
        run_phase1(tiny_setup, "a")
    launcher = [str(BIN / "accelerate"), "launch", "--num_processes", "2", "--num_machines", "1",
                "--cpu", "--mixed_precision", "no", "--dynamo_backend", "no"]
    proc = run_phase1(tiny_setup, "two", launcher)
    one = load_file(str(tiny_setup / "a/model/model.safetensors"))
    two = load_file(str(tiny_setup / "two/model/model.safetensors"))
    from aegir.model.aegir import AegirModel
    from aegir.stages.phase1 import model_config
    from aegir.config import load_params

    torch.manual_seed(0)
    init = AegirModel(model_config(load_params(tiny_setup / "params.yaml"), "tiny")).state_dict()
    moved = sum(float((one[k] - init[k]).float().norm() ** 2) for k in one) ** 0.5
    apart = sum(float((one[k] - two[k]).float().norm() ** 2) for k in one) ** 0.5
    assert moved > 0
    assert apart < 0.5 * moved, (apart, moved)
    assert apart > 0 or "2" in proc.stdout  # two processes really ran (their sums differ in float)
    metrics = json.loads((tiny_setup / "two/metrics/metrics.json").read_text())
    assert metrics["steps"] == 8


def test_rerun_of_a_finished_run_changes_nothing(tiny_setup):
    """Re-running a completed run (as `dvc repro` does after a code change) resumes at its end:
    same checkpoint and metrics, and no curve point logged twice."""
    if not (tiny_setup / "a/model/model.safetensors").exists():
        run_phase1(tiny_setup, "a")
    outputs = sorted(p for p in (tiny_setup / "a").rglob("*") if p.is_file() and "state" not in p.parts)
    before = {p: digest(p) for p in outputs}
    run_phase1(tiny_setup, "a")
    assert {p: digest(p) for p in outputs} == before
    for tsv in (tiny_setup / "a/metrics/live/plots/metrics").rglob("*.tsv"):
        steps = [line.split("\t")[0] for line in tsv.read_text().splitlines()[1:]]
        assert len(steps) == len(set(steps)), tsv

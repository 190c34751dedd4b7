"""scripts/device_pipeline.py (the training stages outside DVC, e.g. on a GPU node): its params
overrides and its refusals. Its stage commands are dvc.yaml's, run by the pipeline tests."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from conftest import ROOT

SCRIPT = ROOT / "scripts" / "device_pipeline.py"


def load_script():
    spec = importlib.util.spec_from_file_location("device_pipeline", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_overrides_set_nested_keys_as_yaml_values():
    script = load_script()
    params = {"agents": {"primary": {"preset": "cpu"}}, "phase1": {}, "phase4": {"scaling_n": [0, 1]}}
    out = script.apply_overrides(params, ["agents.primary.preset=gpu", "phase4.scaling_n=[0, 2, 4]",
                                          "phase1.max_steps=5"])
    assert out["agents"]["primary"]["preset"] == "gpu" and out["phase4"]["scaling_n"] == [0, 2, 4]
    assert out["phase1"]["max_steps"] == 5
    with pytest.raises(SystemExit, match="no section 'nope'"):
        script.apply_overrides(params, ["nope.key=1"])
    with pytest.raises(SystemExit, match="expected key.path=value"):
        script.apply_overrides(params, ["agents.primary.preset"])


def run_script(*args, cwd=ROOT):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, cwd=cwd)


def test_a_bad_override_fails_before_any_work_and_writes_nothing(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.parquet").write_bytes(b"")  # the script looks for it before anything else
    root = tmp_path / "run"
    proc = run_script("--root", root, "--data", data, "--set", "reading.columns=1")
    assert proc.returncode != 0 and "reading.columns" in proc.stderr
    assert not root.exists()


def test_missing_prepared_data_is_a_clear_error(tmp_path):
    proc = run_script("--root", tmp_path / "run", "--data", tmp_path / "nothing")
    assert proc.returncode != 0 and "no prepared data" in proc.stderr and str(tmp_path / "nothing") in proc.stderr

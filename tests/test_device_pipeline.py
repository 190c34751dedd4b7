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
    params = {"primary": {"preset": "cpu"}, "phase1": {}, "phase4": {"scaling_n": [0, 1]}}
    out = script.apply_overrides(params, ["primary.preset=gpu", "phase4.scaling_n=[0, 2, 4]",
                                          "phase1.max_steps=5"])
    assert out["primary"]["preset"] == "gpu" and out["phase4"]["scaling_n"] == [0, 2, 4]
    assert out["phase1"]["max_steps"] == 5
    with pytest.raises(SystemExit, match="no section 'nope'"):
        script.apply_overrides(params, ["nope.key=1"])
    with pytest.raises(SystemExit, match="expected key.path=value"):
        script.apply_overrides(params, ["primary.preset"])


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


def test_micro_f1_reads_each_split_of_a_stage_scores_file(tmp_path):
    script = load_script()
    split = lambda f1: {"macro_f1": f1 / 2, "micro_f1": f1, "support": 10}  # noqa: E731
    scores = {"cta": {"test": split(90.0), "real": split(70.0)}, "cpa": {"test": split(80.0), "real": split(60.0)},
              "steps": 6}
    (tmp_path / "scores.json").write_text(__import__("json").dumps({"fused": scores}))
    assert script.micro_f1(tmp_path / "scores.json", "fused") == {
        "cta": {"test": 90.0, "real": 70.0}, "cpa": {"test": 80.0, "real": 60.0}}


def test_commands_run_together_and_a_failure_is_reported_after_all_end(tmp_path):
    script = load_script()
    ok = [sys.executable, "-c", "import time; time.sleep(0.3); print('fine')"]
    seconds = script.run_together({"phase1@a": ok, "phase1@b": ok}, tmp_path)
    assert set(seconds) == {"phase1@a", "phase1@b"} and all(s > 0 for s in seconds.values())
    assert (tmp_path / "phase1-a.log").read_text() == "fine\n"
    bad = [sys.executable, "-c", "import sys; sys.exit(3)"]
    late = [sys.executable, "-c", f"import time; time.sleep(0.6); open({str(tmp_path / 'late')!r}, 'w').write('x')"]
    with pytest.raises(SystemExit, match="stages failed: phase1@bad"):
        script.run_together({"phase1@bad": bad, "phase1@late": late}, tmp_path)
    assert (tmp_path / "late").exists()  # the failure waited for the other command to end


def test_the_gpu_check_script_parses_and_names_files_that_exist():
    script = ROOT / "scripts" / "gpu_check.sh"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    text = script.read_text()
    for path in ("tests/test_cuda.py", "scripts/device_pipeline.py", "benchmarks/bench_device.py",
                 "workflow/accelerate/gpu1.yaml"):
        assert path in text and (ROOT / path).exists(), path


@pytest.mark.parametrize("budget", ["fast", "30"])
def test_the_gpu_check_script_refuses_an_absurd_budget_before_writing(tmp_path, budget):
    import os

    out = tmp_path / "out"
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), str(out)], cwd=ROOT, text=True,
                          capture_output=True, env={**os.environ, "AEGIR_GPU_CHECK_SECONDS": budget})
    assert proc.returncode == 2 and "AEGIR_GPU_CHECK_SECONDS" in proc.stderr and budget in proc.stderr
    assert not out.exists()


@pytest.mark.parametrize("script", ["gpu_variants.sh", "gpu_wheels.sh"])
def test_the_gpu_scripts_parse(script):
    assert subprocess.run(["bash", "-n", str(ROOT / "scripts" / script)], capture_output=True).returncode == 0


@pytest.mark.parametrize("budget,variants", [("fast", ["a=--set phase3.steps=1"]), ("10", ["a=--set phase3.steps=1"]),
                                             ("300", [])])
def test_the_gpu_variants_script_refuses_bad_arguments_before_writing(tmp_path, budget, variants):
    import os

    out = tmp_path / "out"
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_variants.sh"), str(out), *variants], cwd=ROOT,
                          text=True, capture_output=True, env={**os.environ, "AEGIR_GPU_SECONDS": budget})
    assert proc.returncode == 2 and not out.exists()
    assert ("AEGIR_GPU_SECONDS" in proc.stderr and budget in proc.stderr) if variants else "variant" in proc.stderr

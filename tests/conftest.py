"""Shared fixtures: tiny params and a temporary copy of the project as its own git repo."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
BIN = Path(sys.executable).parent  # the venv's bin: python, dvc, snakemake

# Small enough for an end-to-end run in well under a minute per stage on 2 cores.
TINY_PARAMS_OVERRIDE = {
    "synthetic": {
        "train_tables": 60, "valid_tables": 12, "test_tables": 12, "corner_cases_tables": 12,
        "missing_values_tables": 12, "format_heterogeneity_tables": 12,
        "min_rows": 3, "max_rows": 6, "min_columns": 3, "max_columns": 5,
        "wide_tables": 6, "wide_min_columns": 6, "wide_max_columns": 10, "wide_train_tables": 4,
        "specialist_train_tables": 40, "policy_train_tables": 16,
    },
    # the `real` split: each family's first 3 tables (every family and layout, about a fifth of the
    # tables: the real split's scoring was most of a tiny stage's time)
    "prepare": {"byte_budget": 512, "max_rows": 6, "real_tables_per_family": 3},
    "baselines": {"max_features": 5000},
    "primary": {"preset": "tiny", "seed": 0},
    "specialists": {  # as params.yaml's: from the primary, on their domains' `specialist_train` tables
        "places": {"preset": "tiny", "seed": 1, "extra_tables": 40},
        "media": {"preset": "tiny", "seed": 2, "extra_tables": 40},
        "commerce": {"preset": "tiny", "seed": 3, "extra_tables": 40},
    },
    "phase1": {"epochs": 1, "batch_size": 8, "max_steps": 6, "warmup_steps": 2, "eval_every": 4,
               "log_every": 2, "checkpoint_every": 3},
    # the wide tables (6–10 columns) are read in groups; labels decoded jointly (aegir.eval.joint)
    "reading": {"columns": 4, "views": 2, "joint_cta": 0.05, "joint_cpa": 0.2},
    "phase2": {"batches": 2, "batch_size": 4, "rollouts": 4, "ascent_steps": 10},
    "phase3": {"steps": 6, "batch_size": 4, "rollouts": 2, "warmup_steps": 2, "eval_every": 4, "log_every": 2,
               "checkpoint_every": 2, "budget_period": 4, "survival_tables": 8},
    "phase4": {"max_subagents": 4, "scaling_n": [0, 1, 2, 4], "train_tables": 16, "wide_train_tables": 4,
               "step_cost": 0.02, "route_weight": 1.0, "steps": 6, "batch_size": 4,
               "rollouts": 2, "log_every": 2, "checkpoint_every": 2, "budget_period": 4, "timing_tables": 2,
               "eval_batch_size": 16},
}


# The modules of end-to-end runs, longest first (seconds of `pytest --durations=0` on the 2-core
# AMD EPYC, 2026-12-07, two workers: test_pipeline.py 415, test_phase3.py 241, test_phase1.py
# 165; every other module 71 or less, the whole suite 1,276 in 666 of wall time)
LONGEST_MODULES = ("test_pipeline.py", "test_phase3.py", "test_phase1.py")


def pytest_collection_modifyitems(config, items):
    """LONGEST_MODULES first, in that order, then the other modules in file order.
    pyproject.toml runs two xdist workers with `--dist=loadfile --no-loadscope-reorder`, which
    hand out whole modules in this order: the longest start at once and the short ones fill the
    gaps, where xdist's own order (by number of tests) put the pipeline module, 16 tests but a
    third of the suite's time, twentieth."""
    rank = {name: i for i, name in enumerate(LONGEST_MODULES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: file order otherwise


def load_benchmark(name: str):
    """benchmarks/<name>.py as a module (the benchmarks import each other)."""
    import importlib.util

    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCHMARKS))


def deep_update(base: dict, override: dict) -> dict:
    out = dict(base)
    for key, value in override.items():
        out[key] = deep_update(out.get(key) or {}, value) if isinstance(value, dict) else value
    return out


def tool_env(repo: Path, threads: int | None = 1) -> dict[str, str]:
    """The environment of a tool or stage a test starts. `threads`: its OMP_NUM_THREADS, and so
    torch's intra-op threads in the stages. One by default: the xdist workers run tests side by
    side, and two workers' stages each taking torch's default (a thread per core) oversubscribed
    the 2-core machine: two tiny `dvc repro`s at once took 251 s with the default and 121 s with
    one thread each (2026-11-26, AVX2 machine). None leaves torch's default, as `dvc repro` runs
    for a user: the stages' sharded path, one worker thread per core (aegir.train.step)."""
    env = dict(os.environ)
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(repo / "src")
    env["DVC_NO_ANALYTICS"] = "1"
    env["GIT_AUTHOR_NAME"] = env["GIT_COMMITTER_NAME"] = "aegir-test"
    env["GIT_AUTHOR_EMAIL"] = env["GIT_COMMITTER_EMAIL"] = "test@aegir.invalid"
    return env


def run_tool(repo: Path, *args: str, check: bool = True, timeout: int = 900,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(args), cwd=repo, env=env or tool_env(repo), capture_output=True, text=True,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def make_project_copy(dest: Path, override: dict) -> Path:
    """Copy the project's pipeline files into `dest`, as a fresh git + DVC repository."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("dvc.yaml", "params.yaml"):
        shutil.copy(ROOT / name, dest / name)
    shutil.copytree(ROOT / "src", dest / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copytree(ROOT / "workflow", dest / "workflow", ignore=shutil.ignore_patterns(".snakemake"))
    params = yaml.safe_load((dest / "params.yaml").read_text())
    (dest / "params.yaml").write_text(yaml.safe_dump(deep_update(params, override), sort_keys=False))
    shutil.copy(ROOT / ".gitignore", dest / ".gitignore")
    run_tool(dest, "git", "init", "-q", "-b", "main")
    run_tool(dest, "dvc", "init", "-q")
    run_tool(dest, "dvc", "config", "core.autostage", "true")
    run_tool(dest, "git", "add", "-A")
    run_tool(dest, "git", "commit", "-q", "-m", "init")
    return dest


def kill_at_saved_step(cmd: list[str], cwd: Path, env: dict[str, str], state: Path, step: int,
                       timeout: float = 600) -> None:
    """Start `cmd` in its own session and SIGKILL it (and its children) as soon as the training
    state file `state` records at least `step` steps; fail if it finished first."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if state.is_file() and json.loads(state.read_text())["step"] >= step:
            os.killpg(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.05)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, f"{' '.join(cmd)} finished before it could be killed"


@pytest.fixture
def tiny_override() -> dict:
    return TINY_PARAMS_OVERRIDE


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny tensors: one intra-op thread is faster, and far faster when the cores are shared."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# A minimal SOTAB V2 directory (one Hotel table in every split), for readers and evaluate.


def sotab_dir(root, table_bytes: bytes, label: str = "telephone"):
    """A one-table SOTAB V2 layout whose table file holds `table_bytes`."""
    for folder in ("Train", "Validation", "Test"):
        (root / folder).mkdir(parents=True)
    name = "Hotel_example.com_September2020_CPA.json.gz"
    for folder in ("Train", "Validation", "Test"):
        (root / folder / name).write_bytes(table_bytes)
    for split in ("training", "validation", "test", "random_test", "corner_cases_test",
                  "missing_values_test", "format_heterogeneity_test"):
        (root / f"sotab_v2_cpa_{split}_set.csv").write_text(f"table_name,main_column_index,column_index,label\n{name},0,1,{label}\n")
        (root / f"sotab_v2_cta_{split}_set.csv").write_text(f"table_name,column_index,label\n{name},0,Hotel/name\n")
    return root


def good_table() -> bytes:
    rows = [{"0": "Hotel Adlon", "1": "+49 30 2261 0"}, {"0": "The Ritz", "1": "+44 20 7493 8181"}]
    return gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode())

"""dvc.yaml's deps cover every aegir source file each stage runs (its import closure).

A stage whose deps miss a module it imports leaves stale outputs that `dvc status` calls up to
date after that module changes. The closure is derived from each stage's `cmd` (the module it
runs with `-m`), so a stage added later is checked without touching this file.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from aegir.pipeline import (
    accelerate_config,
    dvc_stages,
    import_closure,
    is_training,
    stage_module,
    uncovered_deps,
)
from conftest import ROOT


@pytest.fixture(scope="module")
def stages():
    return dvc_stages(ROOT)


def test_every_stage_runs_an_aegir_module(stages):
    for spec in stages:
        assert spec.module and spec.module.startswith("aegir."), (spec.name, spec.cmd)
        assert (ROOT / "src" / Path(*spec.module.split("."))).with_suffix(".py").is_file(), spec.module


def test_deps_cover_each_stage_import_closure(stages):
    gaps = {spec.name: uncovered_deps(spec, ROOT) for spec in stages}
    assert not any(gaps.values()), "dvc.yaml deps miss modules the stage imports: " + "; ".join(
        f"{name}: {', '.join(files)}" for name, files in gaps.items() if files)


def test_a_missing_dep_is_reported(stages):
    """The check is not vacuous: drop one dep of each stage and it names what is uncovered."""
    for spec in stages:
        closure = import_closure(spec.module, ROOT / "src")
        assert uncovered_deps(spec, ROOT, closure) == uncovered_deps(spec, ROOT)
        for dep in spec.deps:
            if not dep.startswith("src/"):
                continue
            reduced = dataclasses.replace(spec, deps=tuple(d for d in spec.deps if d != dep))
            missing = uncovered_deps(reduced, ROOT, closure)
            assert missing and all(m == dep or m.startswith(dep + "/") for m in missing), (spec.name, dep, missing)


# The deps two stages declared before this check existed (dvc.yaml as of issue 9).
OLD_DEPS = {
    "prepare": ("src/aegir/stages/prepare.py", "src/aegir/data/synth", "src/aegir/data/sotab.py",
                "src/aegir/data/serialize.py", "src/aegir/data/table.py", "src/aegir/labels"),
    "primary": ("data/prepared", "src/aegir/stages/phase1.py", "src/aegir/model", "src/aegir/data/dataset.py",
                       "src/aegir/train", "src/aegir/eval"),
}


def test_the_deps_before_this_check_fail_it(stages):
    """The check fails on the dvc.yaml it was written against: phase1 ran aegir.config,
    data/batch.py, data/serialize.py, data/prepared.py and labels/ without depending on them."""
    by_name = {spec.name: spec for spec in stages}
    missing = {name: set(uncovered_deps(dataclasses.replace(by_name[name], deps=deps), ROOT))
               for name, deps in OLD_DEPS.items()}
    assert {"src/aegir/config.py", "src/aegir/errors.py"} <= missing["prepare"]
    assert {"src/aegir/config.py", "src/aegir/data/batch.py", "src/aegir/data/serialize.py",
            "src/aegir/data/prepared.py", "src/aegir/labels/__init__.py"} <= missing["primary"]


def test_closure_follows_lazy_imports_strings_and_package_data(tmp_path):
    src = tmp_path / "src"
    pkg = src / "aegir"
    (pkg / "stages").mkdir(parents=True)
    (pkg / "data").mkdir()
    (pkg / "__init__.py").write_text('"""Only a docstring."""\n')
    (pkg / "stages" / "__init__.py").write_text("")
    (pkg / "data" / "__init__.py").write_text("LABELS = 'labels.txt'\n")
    (pkg / "data" / "labels.txt").write_text("a\nb\n")
    (pkg / "data" / "reader.py").write_text("from . import helper\n")
    (pkg / "data" / "helper.py").write_text("X = 1\n")
    (pkg / "config.py").write_text('SECTIONS = {"x": "aegir.extra:XConfig"}\n')
    (pkg / "extra.py").write_text("class XConfig: ...\n")
    (pkg / "unused.py").write_text("")
    (pkg / "stages" / "x.py").write_text(
        "import aegir.config\n"
        "def main():\n"
        "    from aegir.data import reader  # imported on use\n")
    closure = {p.relative_to(src).as_posix() for p in import_closure("aegir.stages.x", src)}
    assert closure == {"aegir/stages/x.py", "aegir/config.py", "aegir/extra.py", "aegir/data/__init__.py",
                       "aegir/data/labels.txt", "aegir/data/reader.py", "aegir/data/helper.py"}


@pytest.mark.parametrize(("cmd", "module", "training", "config"), [
    ("python -m aegir.stages.prepare --out data/prepared", "aegir.stages.prepare", False, None),
    ("accelerate launch --config_file workflow/accelerate/cpu.yaml -m aegir.stages.phase1 --agent a",
     "aegir.stages.phase1", True, "workflow/accelerate/cpu.yaml"),
    ("accelerate launch --config_file=x.yaml -m aegir.stages.phase3", "aegir.stages.phase3", True, "x.yaml"),
    ("echo hello", None, False, None),
])
def test_commands_parse(cmd, module, training, config):
    assert stage_module(cmd) == module
    assert is_training(cmd) is training
    assert accelerate_config(cmd) == config


def test_snakemake_conda_env_pins_the_lock():
    """workflow/envs/aegir.yaml (for `--sdm conda`) installs exactly requirements.lock."""
    import yaml

    env = yaml.safe_load((ROOT / "workflow/envs/aegir.yaml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    lock = [line.strip() for line in (ROOT / "requirements.lock").read_text().splitlines() if "==" in line]
    assert sorted(pip) == sorted(lock)
    assert "python=3.11" in env["dependencies"]

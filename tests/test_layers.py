"""The packages of `aegir` form layers with no cycle, and no library imports a stage.

Layer order, lowest first (docs/design.md, "Layout"): a package may import its own layer and
the layers below it, never one above. A stage (`aegir.stages.*`) is a command: config → library
calls → atomic writes; nothing outside `aegir/stages` imports one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conftest import ROOT

SRC = ROOT / "src"

LAYERS = (
    {"errors", "atomic", "config", "draws", "progress", "labels"},  # no aegir imports but these
    {"data"},
    {"model"},
    {"train"},
    {"eval"},
    {"orchestrator"},  # Phase 3's model: router, fusion, specialists, alignment
    {"swarm"},  # Phase 4: sub-tasks, policy, merge, the trained swarm
    {"rl"},  # rewards, checks, PPO, the Phase 3 and Phase 4 updates
    {"inference", "annotate", "calibration"},  # using trained checkpoints
    {"stages"},
    {"pipeline", "cli"},
)
LAYER_OF = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def aegir_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every `aegir.*` import in a file, top-level or inside a function."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            found += [(node.lineno, n) for n in names[:1] if n == "aegir" or n.startswith("aegir.")]
            if node.module == "aegir":  # `from aegir import stages`
                found += [(node.lineno, n) for n in names[1:]]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("aegir.")]
    return found


def package_of(module: str) -> str:
    """`aegir.swarm.model` → `swarm`; `aegir.cli` → `cli`."""
    return module.split(".")[1]


def layer_violations(src: Path) -> list[str]:
    out = []
    for path in sorted((src / "aegir").rglob("*.py")):
        rel = path.relative_to(src).with_suffix("")
        if len(rel.parts) < 2:
            continue
        here = rel.parts[1]
        for line, module in aegir_imports(path):
            if module == "aegir" or package_of(module) == here:
                continue
            there = package_of(module)
            if there not in LAYER_OF or here not in LAYER_OF:
                out.append(f"{path.relative_to(src)}:{line}: {here} or {there} has no layer in LAYERS")
            elif LAYER_OF[there] > LAYER_OF[here]:
                out.append(f"{path.relative_to(src)}:{line}: {here} (layer {LAYER_OF[here]}) imports {module} "
                           f"(layer {LAYER_OF[there]})")
    return out


def stage_importers(roots: list[Path], base: Path = ROOT) -> list[str]:
    out = []
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            if "stages" in path.relative_to(root).parts[:2] and root == SRC:
                continue
            for line, module in aegir_imports(path):
                if module == "aegir.stages" or module.startswith("aegir.stages."):
                    out.append(f"{path.relative_to(base)}:{line}: imports {module}")
    return out


def test_every_package_has_a_layer_and_imports_only_below_it():
    packages = {p.name for p in (SRC / "aegir").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    modules = {p.stem for p in (SRC / "aegir").glob("*.py") if p.stem != "__init__"}
    assert packages | modules == set(LAYER_OF), "LAYERS must name every package and top-level module of aegir"
    assert not layer_violations(SRC), "\n".join(layer_violations(SRC))


def test_nothing_outside_the_stages_imports_a_stage():
    roots = [SRC, ROOT / "tests", ROOT / "scripts", ROOT / "benchmarks"]
    assert not stage_importers(roots), "\n".join(stage_importers(roots))


@pytest.mark.parametrize("source, expected", [
    ("from aegir.rl.ppo import group_advantages\n", "data (layer 1) imports aegir.rl.ppo (layer 7)"),
    ("def f():\n    from aegir.swarm.model import Swarm\n", "data (layer 1) imports aegir.swarm.model (layer 6)"),
    ("import aegir.stages.phase1\n", "data (layer 1) imports aegir.stages.phase1 (layer 9)"),
])
def test_an_upward_import_is_named(tmp_path, source, expected):
    """The check can fail: an upward import, top-level or inside a function, is reported with its file."""
    (tmp_path / "aegir/data").mkdir(parents=True)
    (tmp_path / "aegir/data/__init__.py").write_text("")
    (tmp_path / "aegir/data/x.py").write_text(source)
    assert [v.split(": ", 1)[1] for v in layer_violations(tmp_path)] == [expected]
    assert layer_violations(tmp_path)[0].startswith("aegir/data/x.py:")


def test_a_stage_import_outside_the_stages_is_named(tmp_path):
    (tmp_path / "bench.py").write_text("from aegir.stages.phase1 import model_config\n")
    (tmp_path / "ok.py").write_text("from aegir.model.network import AegirModel\n")
    assert stage_importers([tmp_path], base=tmp_path) == ["bench.py:1: imports aegir.stages.phase1"]

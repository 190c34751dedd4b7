"""The pipeline DAG as DVC resolves it: the one source of truth the Snakefile is built from.

`dvc.yaml` (with `foreach`/`matrix` and `${…}` templating resolved by DVC itself) gives each
stage's name, command, file dependencies, params and outputs. `workflow/Snakefile` turns each
into a rule running the same command, so the two tools cannot drift apart; tests hold the two
DAGs equal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


@dataclass(frozen=True)
class StageSpec:
    """One resolved DVC stage.

    name: DVC's stage name (`phase1@primary` for a foreach item).
    group: the name before `@` (the Snakemake target that gathers a foreach stage's items).
    deps: file and directory dependencies, relative to the repository root.
    params: the params.yaml keys the stage declares (dotted), with their current values.
    outs: every output path (data, metrics and plots outputs alike).
    """

    name: str
    group: str
    cmd: str
    deps: tuple[str, ...]
    params: dict[str, Any]
    outs: tuple[str, ...]

    @property
    def rule_name(self) -> str:
        return re.sub(r"[^0-9A-Za-z_]", "_", self.name)


def _lookup(tree: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        tree = tree[part] if isinstance(tree, dict) else None
    return tree


def dvc_stages(root: str | Path = ".") -> list[StageSpec]:
    """Every stage of `root/dvc.yaml`, resolved by DVC, in DVC's topological order."""
    from dvc.repo import Repo

    root = Path(root).resolve()
    params_tree = yaml.safe_load((root / "params.yaml").read_text(encoding="utf-8")) or {}
    repo = Repo(str(root))
    try:
        graph_order = list(repo.index.stages)
        specs = []
        for stage in graph_order:
            deps, params = [], {}
            for dep in stage.deps:
                keys = getattr(dep, "params", None)
                if keys is not None:
                    params.update({key: _lookup(params_tree, key) for key in keys})
                else:
                    deps.append(str(dep.def_path))
            specs.append(StageSpec(
                name=stage.name,
                group=stage.name.split("@")[0],
                cmd=stage.cmd if isinstance(stage.cmd, str) else " && ".join(stage.cmd),
                deps=tuple(deps),
                params=params,
                outs=tuple(str(out.def_path) for out in stage.outs),
            ))
    finally:
        repo.close()
    return _topological(specs)


def _topological(specs: list[StageSpec]) -> list[StageSpec]:
    """Order stages so that each comes after the producers of its deps (stable otherwise)."""
    producer = {out: s.name for s in specs for out in s.outs}
    done: set[str] = set()
    ordered: list[StageSpec] = []
    by_name = {s.name: s for s in specs}

    def visit(spec: StageSpec) -> None:
        if spec.name in done:
            return
        done.add(spec.name)
        for dep in spec.deps:
            for out, name in producer.items():
                if dep == out or dep.startswith(out.rstrip("/") + "/"):
                    visit(by_name[name])
        ordered.append(spec)

    for spec in specs:
        visit(spec)
    return ordered


def rule_inputs(spec: StageSpec, specs: list[StageSpec]) -> list[str]:
    """The stage's deps as Snakemake must see them.

    DVC lets a stage depend on a directory that holds other stages' outputs (phase2 depends on
    `models/phase1`, which `phase1@*` fill one subdirectory each); Snakemake matches inputs to
    outputs path by path, so such a dep becomes the list of those outputs.
    """
    outputs = [out for other in specs for out in other.outs]
    inputs: list[str] = []
    for dep in spec.deps:
        inside = [out for out in outputs if out.startswith(dep.rstrip("/") + "/")]
        inputs.extend(inside if dep not in outputs and inside else [dep])
    return inputs


def is_directory_output(path: str) -> bool:
    """Outputs without a file suffix are directories (`data/prepared`, `models/phase1/x`)."""
    return Path(path).suffix == ""


def groups(specs: list[StageSpec]) -> dict[str, list[StageSpec]]:
    out: dict[str, list[StageSpec]] = {}
    for spec in specs:
        out.setdefault(spec.group, []).append(spec)
    return out

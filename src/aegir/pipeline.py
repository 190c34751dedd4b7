"""The pipeline DAG as DVC resolves it: the one source of truth the Snakefile is built from.

`dvc.yaml` (with `foreach`/`matrix` and `${…}` templating resolved by DVC itself) gives each
stage's name, command, file dependencies, params and outputs. `workflow/Snakefile` turns each
into a rule running the same command, so the two tools cannot drift apart; tests hold the two
DAGs equal.

The stage contract this module reads (docs/design.md, "Stage contract"):
* a stage's `cmd` runs one module, `python -m aegir.stages.X …` or, for a training stage,
  `accelerate launch --config_file <file> -m aegir.stages.X …` (`stage_module`, `is_training`,
  `accelerate_config`);
* a `persist: true` out is the stage's resume state: kept by DVC when the stage reruns, and
  never a Snakemake rule output, since Snakemake deletes a job's outputs before it runs it
  (`StageSpec.resume_state`);
* `import_closure` gives the source files a stage's module runs, which its `deps` must cover
  (`uncovered_deps`, held by tests/test_dependencies.py).
"""

from __future__ import annotations

import ast
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


@dataclass(frozen=True)
class StageSpec:
    """One resolved DVC stage.

    name: DVC's stage name (`phase1@places` for a foreach item).
    group: the name before `@` (the Snakemake target that gathers a foreach stage's items).
    deps: file and directory dependencies, relative to the repository root.
    params: the params.yaml keys the stage declares (dotted), with their current values.
    outs: every output path (data, metrics and plots outputs alike), resume state included.
    resume_state: the outs declared `persist: true`: the state a killed run resumes from.
    """

    name: str
    group: str
    cmd: str
    deps: tuple[str, ...]
    params: dict[str, Any]
    outs: tuple[str, ...]
    resume_state: tuple[str, ...] = field(default=())

    @property
    def rule_name(self) -> str:
        return re.sub(r"[^0-9A-Za-z_]", "_", self.name)

    @property
    def products(self) -> tuple[str, ...]:
        """The outs a run produces afresh: every out but the resume state (Snakemake's outputs)."""
        return tuple(out for out in self.outs if out not in self.resume_state)

    @property
    def module(self) -> str | None:
        return stage_module(self.cmd)


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
                resume_state=tuple(str(out.def_path) for out in stage.outs if out.persist),
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
    outputs = [out for other in specs for out in other.products]
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


# ----------------------------------------------------------------------------- commands


def _argv(cmd: str) -> list[str]:
    return shlex.split(cmd.split("&&")[0])


def stage_module(cmd: str) -> str | None:
    """The module a stage's command runs with `-m` (`python -m X`, `accelerate launch … -m X`)."""
    argv = _argv(cmd)
    for i, arg in enumerate(argv[:-1]):
        if arg == "-m":
            return argv[i + 1]
    return None


def is_training(cmd: str) -> bool:
    """Does the command run under `accelerate launch` (a training stage)?"""
    argv = _argv(cmd)
    return argv[:2] == ["accelerate", "launch"]


def accelerate_config(cmd: str) -> str | None:
    """The `--config_file` a training stage's command passes to `accelerate launch`."""
    argv = _argv(cmd)
    for i, arg in enumerate(argv):
        if arg == "--config_file" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--config_file="):
            return arg.split("=", 1)[1]
    return None


def accelerate_gpus(config_path: str | Path) -> int:
    """GPUs one machine of a training run takes under an accelerate config file: 0 with
    `use_cpu: true`, else its processes per machine (one process per GPU)."""
    config = yaml.safe_load(Path(config_path).read_text(encoding="utf-8")) or {}
    if config.get("use_cpu", False):
        return 0
    machines = max(1, int(config.get("num_machines", 1) or 1))
    return max(1, int(config.get("num_processes", 1) or 1) // machines)


# Snakemake sets these to a job's `threads` (snakemake.shell); DVC passes the user's environment.
THREAD_ENV_VARS = ("OMP_NUM_THREADS", "GOTO_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                   "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


def thread_env_prefix(environ: Mapping[str, str]) -> str:
    """A shell prefix that gives a job the thread variables of `environ` (the user's shell),
    undoing Snakemake's per-job values, so that a stage computes with the threads it would
    under `dvc repro`: torch's float reductions depend on the thread count."""
    parts = [f"export {name}={shlex.quote(environ[name])}" if name in environ else f"unset {name}"
             for name in THREAD_ENV_VARS]
    return "; ".join(parts) + "; "


# ----------------------------------------------------------------------------- dependencies

_MODULE_STRING = re.compile(r"^(aegir(?:\.\w+)+)(?::\w+)?$")


def _module_file(module: str, src: Path) -> Path | None:
    base = src.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports(path: Path, module: str) -> set[str]:
    """Every aegir module `path` (module `module`) imports, at top level or inside functions;
    `"aegir.x:Name"` strings (imported on use, as by `aegir.config.SECTIONS`) count too."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            found.add(origin)
            found.update(f"{origin}.{alias.name}" for alias in node.names)  # submodules, if they are
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            match = _MODULE_STRING.match(node.value)
            if match:
                found.add(match.group(1))
    return {name for name in found if name == "aegir" or name.startswith("aegir.")}


def _runs_nothing(path: Path) -> bool:
    """A package `__init__.py` that holds at most a docstring: its content cannot change a result."""
    body = ast.parse(path.read_text(encoding="utf-8")).body
    return path.name == "__init__.py" and all(
        isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) for node in body)


def import_closure(module: str, src: str | Path = "src") -> set[Path]:
    """The source files that running `module` executes or reads: the module, every aegir
    module it imports directly or not (package `__init__.py` files included, as Python runs
    them, unless they hold nothing but a docstring), and the data files that ship inside those
    packages (e.g. the label lists)."""
    src = Path(src)
    files: set[Path] = set()
    todo = [module]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = _module_file(name, src)
        if path is None:
            continue  # a name imported from a module, not a module itself
        if not _runs_nothing(path):
            files.add(path)
        parts = name.split(".")
        todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))  # parent packages run first
        todo.extend(_imports(path, name))
        if path.name == "__init__.py":
            files.update(p for p in path.parent.iterdir() if p.is_file() and p.suffix not in (".py", ".pyc"))
    return files


def uncovered_deps(spec: StageSpec, root: str | Path = ".", closure: set[Path] | None = None) -> list[str]:
    """Files of the stage's import closure that none of its deps covers (a dep covers a file
    when it is that file or a directory above it), as paths relative to `root`; [] when the
    deps are complete. A stage whose command runs no `-m` module has no closure to check.
    `closure`: the stage module's `import_closure`, when the caller has it (checking many dep
    lists of one stage parses its sources once)."""
    root = Path(root).resolve()
    if spec.module is None:
        return []
    if closure is None:
        closure = import_closure(spec.module, root / "src")
    deps = [d.rstrip("/") for d in spec.deps]
    missing = []
    for path in sorted(closure):
        rel = path.resolve().relative_to(root).as_posix()
        if not any(rel == d or rel.startswith(d + "/") for d in deps):
            missing.append(rel)
    return missing

"""Run the training stages (phase1 for every agent → phase2 → phase3 [→ phase4]) outside DVC, on
whatever device accelerate finds, with params overrides, into a directory of their own.

    python scripts/device_pipeline.py --root runs/gpu --set primary.preset=gpu \
        --launch "accelerate launch --config_file workflow/accelerate/gpu.yaml --num_processes 1"

What it is for: a machine that has the stages' code and prepared data (`data/prepared`, made by
`dvc repro prepare` anywhere: it is byte-identical on every machine) but not DVC's cache or
git history, e.g. a GPU node: the figures of the `gpu` preset in docs/gpu.md were made with it.
The same commands as `dvc.yaml`'s stages, each with `--params <root>/params.yaml` (params.yaml
with the `--set` overrides applied and checked by aegir.config) and its outputs under `<root>`
(`models/`, `results/`, `state/`, as in the repository). A killed run resumes from `<root>/state`
as the DVC stages do. `--agents-together` trains the specialists at once after the primary (they start from
its checkpoint), sharing the device. Prints, at the end, the wall time of each stage and the micro-F1 of every
model it trained on every split, and writes them to `<root>/summary.json`.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import yaml

from aegir import atomic
from aegir.config import parse_params
from aegir.errors import AegirError


def apply_overrides(params: dict, overrides: list[str]) -> dict:
    """params with each `a.b.c=value` set (value parsed as YAML, as `dvc exp run -S` does)."""
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--set {item!r}: expected key.path=value")
        node = params
        *parents, leaf = key.split(".")
        for part in parents:
            if not isinstance(node.get(part), dict):
                raise SystemExit(f"--set {item!r}: params.yaml has no section {part!r}")
            node = node[part]
        node[leaf] = yaml.safe_load(value)
    return params


def run(command: list[str], log: Path) -> float:
    """Run one stage command, its output to the terminal and to `log`; seconds it took."""
    print("$", shlex.join(command), flush=True)
    started = time.perf_counter()
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in process.stdout:
            sys.stdout.write(line)
            out.write(line)
        if process.wait():
            raise SystemExit(f"stage failed (exit {process.returncode}): {shlex.join(command)}; log: {log}")
    return round(time.perf_counter() - started, 1)


def run_together(commands: dict[str, list[str]], logs: Path) -> dict[str, float]:
    """Run several stage commands at once (each logged to `logs/<name>.log`); seconds each took.
    Fails, after all have ended, if any failed."""
    started = time.perf_counter()
    processes = {}
    for name, command in commands.items():
        print("$", shlex.join(command), "&", flush=True)
        out = (logs / f"{name.replace('@', '-')}.log").open("w")
        processes[name] = (subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT), out)
    seconds, failed = {}, []
    while processes:
        for name, (process, out) in list(processes.items()):
            if process.poll() is not None:
                out.close()
                seconds[name] = round(time.perf_counter() - started, 1)
                print(f"{name}: exit {process.returncode} after {seconds[name]} s", flush=True)
                if process.returncode:
                    failed.append(name)
                del processes[name]
        time.sleep(0.5)
    if failed:
        raise SystemExit(f"stages failed: {', '.join(failed)}; logs in {logs}")
    return seconds


def micro_f1(scores_file: Path, model: str | None = None) -> dict:
    """{task: {split: micro-F1}} of a stage's scores.json (of one of its models, for phase3/4)."""
    scores = json.loads(scores_file.read_text())
    if model is not None:
        scores = scores[model]
    return {task: {split: v["micro_f1"] for split, v in scores[task].items()} for task in ("cta", "cpa")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True, help="where models/, results/, state/ go")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a params override, e.g. primary.preset=gpu (repeatable)")
    parser.add_argument("--params", type=Path, default=Path("params.yaml"))
    parser.add_argument("--data", type=Path, default=Path("data/prepared"))
    parser.add_argument("--launch", default="accelerate launch --config_file workflow/accelerate/cpu.yaml",
                        help="how the training stages are launched")
    parser.add_argument("--through", choices=["phase3", "phase4"], default="phase3")
    parser.add_argument("--agents-together", action="store_true",
                        help="train the specialists at once, after the primary (one device shared; each "
                             "specialist's seconds then include the others' load)")
    args = parser.parse_args()
    if not (args.data / "train.parquet").exists():
        raise SystemExit(f"{args.data}: no prepared data (run `dvc repro prepare` first)")
    root = args.root
    overridden = apply_overrides(yaml.safe_load(args.params.read_text()), args.set)
    try:
        params = parse_params(overridden)  # every key checked before any work
    except AegirError as exc:
        raise SystemExit(f"{args.params} with {args.set}: {exc}") from None
    params_file = root / "params.yaml"
    atomic.write_text(params_file, yaml.safe_dump(overridden, sort_keys=False))
    (root / "logs").mkdir(parents=True, exist_ok=True)
    launch = shlex.split(args.launch)
    common = ["--params", str(params_file), "--data", str(args.data)]
    models = root / "models"
    results = root / "results"
    state = root / "state"

    seconds: dict[str, float] = {}
    phase1 = {("primary" if agent == "primary" else f"phase1@{agent}"): [*launch, "-m", "aegir.stages.phase1", "--agent", agent, *common,
                                  "--out", str(models / "phase1" / agent),
                                  "--metrics", str(results / "phase1" / agent),
                                  "--state", str(state / "phase1" / agent)] for agent in params.agents}
    if args.agents_together:  # the primary first: the specialists start from its checkpoint
        seconds["primary"] = run(phase1.pop("primary"), root / "logs" / "primary.log")
        seconds.update(run_together(phase1, root / "logs"))
    else:
        for name, command in phase1.items():
            seconds[name] = run(command, root / "logs" / f"{name.replace('@', '-')}.log")
    seconds["phase2"] = run(
        [sys.executable, "-m", "aegir.stages.phase2", *common, "--models", str(models / "phase1"),
         "--out", str(results / "phase2")], root / "logs" / "phase2.log")
    seconds["phase3"] = run(
        [*launch, "-m", "aegir.stages.phase3", *common, "--models", str(models / "phase1"),
         "--rewards-report", str(results / "phase2" / "report.json"), "--out", str(models / "phase3"),
         "--metrics", str(results / "phase3"), "--state", str(state / "phase3")], root / "logs" / "phase3.log")
    if args.through == "phase4":
        seconds["phase4"] = run(
            [*launch, "-m", "aegir.stages.phase4", *common, "--phase3", str(models / "phase3"),
             "--models", str(models / "phase1"), "--out", str(models / "phase4"),
             "--metrics", str(results / "phase4"), "--state", str(state / "phase4")], root / "logs" / "phase4.log")

    f1 = {("primary" if agent == "primary" else f"phase1@{agent}"): micro_f1(results / "phase1" / agent / "scores.json") for agent in params.agents}
    for model in ("control", "fused"):
        f1[f"phase3 {model}"] = micro_f1(results / "phase3" / "scores.json", model)
    if args.through == "phase4":
        for policy in ("never", "learned", "always"):
            f1[f"phase4 {policy}"] = micro_f1(results / "phase4" / "scores.json", policy)
    summary = {"overrides": args.set, "launch": args.launch, "seconds": seconds, "micro_f1": f1}
    atomic.write_json(root / "summary.json", summary)
    print("\nseconds per stage:", json.dumps(seconds))
    for task in ("cta", "cpa"):
        splits = list(next(iter(f1.values()))[task])
        print(f"\n{task.upper()} micro-F1  " + "  ".join(f"{s[:8]:>8s}" for s in splits))
        for name, scores in f1.items():
            print(f"{name:18s}" + "  ".join(f"{scores[task].get(s, float('nan')):8.1f}" for s in splits))


if __name__ == "__main__":
    main()

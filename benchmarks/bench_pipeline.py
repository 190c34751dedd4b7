"""Benchmark: the pipeline from scratch, stage by stage, against the budgets, with the machine's
pace probed beside every stage.

    python benchmarks/bench_pipeline.py [--repo .] [--stages S …] [--json out.json] [--dry-run]

What it runs: every stage `dvc repro` would run from scratch, in `dvc repro`'s order (read from
`dvc repro --dry --force`), one at a time with `dvc repro --force --single-item STAGE`, after
removing the stage's resume state (its outputs marked `persist` in dvc.yaml: `state/…`), so that
every training stage trains from its first step. The outputs are the ones a plain `dvc repro`
writes, byte for byte (only the timing files differ): this is `rm -rf state && dvc repro -f`,
timed per stage. `--stages` times some stages only (each still from scratch; no budget applies
to their sum).

Why the probe: the same work on this project's 2-core machine has taken 1.7× longer in one hour
than in another (docs/benchmarks.md, "The whole pipeline"), so one run's minutes do not say
whether the budgets hold at the machine's slowest pace. Before every stage and after the last,
the benchmark times a fixed workload in its own process: training steps of the `cpu` preset on
a fixed batch of random bytes (forward, backward, AdamW; median of `--probe-steps`), with the
threads the stages use. A stage's pace is the mean of the probes before and after it; its
seconds scaled by (a probe / its pace) are what it would have taken at that probe's pace. The
table gives each stage's seconds as measured and at the fastest and slowest probe of the run,
and the cumulative minutes through `phase1`, through `phase3` and whole against the budgets
(15, 25 and 30 minutes on 2 cores). The scaling assumes a stage slows as the probe does: the
probe is the stages' own kind of work (the model's training step), not a proof.

`--probe-repeat N` runs the probe alone N times back to back, to tell the probe's own spread
from the machine's: a run whose stages train at the same steps per second while its probes
spread wider is reading probe noise. The probe took 3 steps until 2026-11-29, when ten such
probes back to back spread 1.13× and 1.26× on a quiet machine, ten of 15 steps 1.05×; 15 is the
default since (about a second per probe).

`--dry-run` prints the plan (stages, the state each would remove, the commands) and the probe
once, and runs nothing.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import torch
from bench_phase1 import batch_of, machine_line, vector_isa

from aegir import atomic
from aegir.config import load_params
from aegir.errors import AegirError
from aegir.model.network import AegirModel
from aegir.pipeline import dvc_stages
from aegir.train.setup import model_config
from aegir.train.step import whole_batch_step

BUDGETS = {"phase1": 15.0, "phase3": 25.0, "all": 30.0}  # minutes of the default `dvc repro` on 2 cores


def repro_order(repo: Path) -> list[str]:
    """The stages `dvc repro --force` runs, in its order."""
    proc = subprocess.run(["dvc", "repro", "--dry", "--force"], cwd=repo, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"bench_pipeline: `dvc repro --dry --force` failed in {repo}:\n{proc.stderr.strip()}")
    return re.findall(r"Running stage '([^']+)'", proc.stdout)


def milestone(stage: str) -> str | None:
    """The budget a stage closes when it is the last of its kind: Phase 1's agents → "phase1"."""
    if stage == "primary" or stage.startswith("phase1@"):
        return "phase1"
    return "phase3" if stage == "phase3" else None


class Probe:
    """A fixed workload timed in this process: `steps` training steps (forward, backward, AdamW)
    of `preset` on 2 tables of 1,025 random bytes, after one untimed step; the median."""

    def __init__(self, params_path: Path, preset: str = "cpu", steps: int = 15):
        torch.manual_seed(0)
        self.model = AegirModel(model_config(load_params(params_path), preset)).train()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4, fused=True)
        self.batch = batch_of(Path("no-data"), 2, 1025)  # random bytes: not the data the run rewrites
        self.steps = steps

    def _step(self) -> None:
        whole_batch_step(self.model, self.batch)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def __call__(self) -> float:
        self._step()
        times = []
        for _ in range(self.steps):
            start = time.perf_counter()
            self._step()
            times.append(time.perf_counter() - start)
        return sorted(times)[len(times) // 2]


def run_stage(repo: Path, stage: str, states: list[str]) -> float:
    """Remove the stage's resume states, run it forced; its wall seconds."""
    for state in states:
        shutil.rmtree(repo / state, ignore_errors=True)
    start = time.perf_counter()
    proc = subprocess.run(["dvc", "repro", "--force", "--single-item", stage], cwd=repo)
    seconds = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"bench_pipeline: stage {stage} failed (exit {proc.returncode})")
    return seconds


def summarise(rows: list[dict], final_probe: float, budgets: bool = True) -> dict:
    """Each stage's pace and its seconds at the run's fastest and slowest probe; cumulative
    minutes at each milestone (the last stage of Phase 1, phase3, the whole run), with its budget
    (`budgets` False, for a run of some stages only: none, as they would not mean anything)."""
    probes = [row["probe_before"] for row in rows] + [final_probe]
    fastest, slowest = min(probes), max(probes)
    for i, row in enumerate(rows):
        row["pace"] = (probes[i] + probes[i + 1]) / 2
        row["at_fastest"] = row["seconds"] * fastest / row["pace"]
        row["at_slowest"] = row["seconds"] * slowest / row["pace"]
    ends = {milestone(row["stage"]): i for i, row in enumerate(rows) if milestone(row["stage"])}
    ends["all"] = len(rows) - 1
    totals = {}
    for name, end in ends.items():
        part = rows[:end + 1]
        totals[name] = {key: round(sum(row[key] for row in part) / 60, 2)
                        for key in ("seconds", "at_fastest", "at_slowest")}
        totals[name]["budget"] = BUDGETS.get(name) if budgets else None
    return {"probe_seconds": {"fastest": round(fastest, 4), "slowest": round(slowest, 4)}, "totals": totals}


def print_table(rows: list[dict], summary: dict) -> None:
    print(f"{'stage':<18} {'seconds':>8} {'probe s':>8} {'at fastest':>11} {'at slowest':>11}")
    for row in rows:
        print(f"{row['stage']:<18} {row['seconds']:8.1f} {row['pace']:8.3f} {row['at_fastest']:11.1f} "
              f"{row['at_slowest']:11.1f}")
    probe = summary["probe_seconds"]
    print(f"probe: fastest {probe['fastest']:.3f} s, slowest {probe['slowest']:.3f} s "
          f"(slowest / fastest {probe['slowest'] / probe['fastest']:.2f})")
    for name, total in summary["totals"].items():
        budget = total["budget"]
        verdict = ("" if budget is None else
                   f"  budget {budget:.0f}: {'within' if total['seconds'] <= budget else 'OVER'} as measured, "
                   f"{'within' if total['at_slowest'] <= budget else 'OVER'} at the slowest pace")
        print(f"through {name:<7} {total['seconds']:6.2f} min measured, {total['at_fastest']:6.2f} at the fastest "
              f"pace, {total['at_slowest']:6.2f} at the slowest{verdict}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=Path("."), help="the project (a git + DVC repository)")
    parser.add_argument("--stages", nargs="+", help="time only these stages (in dvc repro's order)")
    parser.add_argument("--probe-preset", default="cpu", help="the model preset of the pace probe")
    parser.add_argument("--probe-steps", type=int, default=15,
                        help="timed training steps per probe (median; 15: ten probes back to back spread 1.05×, "
                             "against 1.13–1.26× at 3 steps, docs/benchmarks.md)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and one probe; run nothing")
    parser.add_argument("--probe-repeat", type=int, metavar="N",
                        help="run no stage: the probe N times back to back, and their spread (how much of a "
                             "run's probe spread is the probe's own)")
    args = parser.parse_args(argv)
    if args.probe_steps < 1:
        parser.exit(2, f"bench_pipeline: error: --probe-steps must be at least 1, got {args.probe_steps}\n")
    if args.probe_repeat is not None and args.probe_repeat < 2:
        parser.exit(2, f"bench_pipeline: error: --probe-repeat must be at least 2, got {args.probe_repeat}\n")
    repo = args.repo.resolve()
    if not (repo / "dvc.yaml").is_file():
        parser.exit(2, f"bench_pipeline: error: {repo} has no dvc.yaml\n")
    print(machine_line())
    try:
        probe = Probe(repo / "params.yaml", args.probe_preset, args.probe_steps)
    except AegirError as exc:  # params.yaml unreadable, or no such preset
        parser.exit(2, f"bench_pipeline: error: {exc}\n")
    if args.probe_repeat:
        times = [probe() for _ in range(args.probe_repeat)]
        print("probes: " + " ".join(f"{t:.3f}" for t in times) + f" s; slowest / fastest {max(times) / min(times):.2f} "
              f"({args.probe_steps} steps each, median)")
        return
    order = repro_order(repo)
    if args.stages:
        unknown = sorted(set(args.stages) - set(order))
        if unknown:
            parser.exit(2, f"bench_pipeline: error: no stage {', '.join(unknown)} (stages: {', '.join(order)})\n")
        order = [stage for stage in order if stage in args.stages]
    states = {spec.name: list(spec.resume_state) for spec in dvc_stages(repo)}  # the `persist` outs
    if args.dry_run:
        for stage in order:
            print(f"{stage}: rm -rf {' '.join(states.get(stage, [])) or '(no state)'}; "
                  f"dvc repro --force --single-item {stage}")
        print(f"probe: {probe():.3f} s")
        return
    rows = []
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    for stage in order:
        before = probe()
        print(f"bench_pipeline: {stage} (probe {before:.3f} s)", flush=True)
        rows.append({"stage": stage, "probe_before": before, "seconds": run_stage(repo, stage, states.get(stage, []))})
    summary = summarise(rows, probe(), budgets=not args.stages)
    print_table(rows, summary)
    if args.json:
        atomic.write_json(args.json, {"started": started, "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
                                      "machine": vector_isa(), "cores": os.cpu_count(),
                                      "stages": [{key: round(value, 4) if isinstance(value, float) else value
                                                  for key, value in row.items()} for row in rows],
                                      **summary})


if __name__ == "__main__":
    main()

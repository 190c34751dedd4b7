"""Stage `phase3`: PARL — train an orchestrator that fuses frozen specialists into the primary.

    python -m aegir.stages.phase3 --params params.yaml --data data/prepared \\
        --models models/phase1 --out models/phase3 --metrics results/phase3 --state state/phase3

Two runs with the same compute, one after the other:

* **fused**: a `SwarmOrchestrator` whose primary starts from the Phase 1 primary, with a fresh
  router and a fusion whose gates start at zero, over the frozen Phase 1 checkpoints named in
  `phase3.specialists` (`primary` there means a frozen copy of the Phase 1 primary: its final
  state has read the whole table, which the causal primary has not when it reads column 0);
* **control**: the same primary, the same steps, batches, rollouts, losses and schedules, and no
  specialists (so no routing tokens, and no r_parallel or degeneracy terms).

Each step is one PARL update (`aegir.rl.parl`): K rollouts per table, the rewards of
`aegir.rl.rewards` under the `lambda` schedule, group-relative advantages, the token-level
clipped loss (ε annealed `clip_start` → `clip_end`) + `ce_weight` · CE on gold labels + the
chunker's ratio loss, `ppo_epochs` updates per batch. Budget-limited and standard scaling
alternate (`rewards.budget_cap`). Accelerate drives it like phase1: the batch is split across
processes and gradients are averaged; CPU runs with one process are deterministic (every
sample comes from a generator seeded by (seed, step, process)), and a killed run, re-run,
resumes from its last saved state. A run is `aegir.rl.parl_training.train_run`.

Scoring reads every evaluation table as Phase 1 scored it. The frozen models (the Phase 1
primary, each specialist alone, and the output ensemble built from them) are not run again
where their Phase 1 checkpoints hold their distributions on the same reads (`aegir.eval.reads`):
the same forward on the same batches gave those bits, so the scores are the same either way
(`aegir.orchestrator.evaluation.evaluate_all`).

Outputs:
  --out       the fused orchestrator (`aegir.orchestrator.checkpoint`; specialists by fingerprint) and
              `control/` (a plain model checkpoint of the control's primary); beside each, its
              distributions on every read of the evaluation splits as it was scored
              (`eval_reads.safetensors`, `aegir.eval.reads`): where Phase 4 starts, and what
              `calibrate` reads
  --metrics   metrics.json (DVC metrics, `aegir.eval.metrics.headline`: per task the benchmark
              and real-table micro-F1 of `fused` and `control`), scores.json (every
              variant's micro/macro F1 per split with supports — the Phase 1 primary and the
              ensemble (d) too — routing statistics overall and per domain, critical steps),
              report.json (specialist slices where each beats the primary, state survival,
              settings), wall.json (DVC metrics: the stage's wall minutes) and timing.json
              (wall clock of the stage, of each run and of each stage of the routed forward;
              `phase1_reads`: whether each frozen model's distributions came from its
              checkpoint) — the outputs a rerun does not reproduce —, curves.png (rewards, routing, PPO
              diagnostics, validation F1 of fused vs control), live/fused and live/control
              (DVCLive curves)
  --state     resume state of each run
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import asdict
from pathlib import Path

import torch
from accelerate import Accelerator

from aegir import atomic
from aegir.config import SPLITS, TRAIN_SPLIT, TRAINED_SPLITS, Params, Phase3Config, load_params
from aegir.data.dataset import Example, load_examples
from aegir.data.prepared import fingerprint as data_fingerprint
from aegir.errors import AegirError, DataError, check_config
from aegir.eval.curves import phase3_curves_png
from aegir.eval.joint import CONFIG_KEY as JOINT_CONFIG_KEY
from aegir.eval.joint import repeats_of
from aegir.eval.metrics import headline, wall_minutes
from aegir.eval.reads import READS_FILE, save_eval_reads
from aegir.labels import cpa_vocab, cta_vocab
from aegir.model.checkpoint import checkpoint_fingerprint, load_checkpoint, save_checkpoint
from aegir.model.network import AegirModel
from aegir.orchestrator.checkpoint import save_orchestrator
from aegir.orchestrator.evaluation import evaluate_all, measure_survival, stage_seconds
from aegir.orchestrator.model import SwarmOrchestrator, build_orchestrator, open_seam_gates
from aegir.orchestrator.specialist import load_agents
from aegir.rl.parl_training import blend_toward, train_run
from aegir.rl.ppo import deterministic_kernels
from aegir.train.memory import retain_freed_memory
from aegir.train.resume import fingerprint
from aegir.train.step import OneThreadWorkers, worker_threads

# knobs added at their off value leave the runs' fingerprint of before (their saved states resume)
ADDED_OFF = {"anchor_weight": 0, "fused_primary_lr": None, "average_decay": 0}
# knobs that act after the training runs (how their weights are finished, how the orchestrator
# reads a table), never on them
AFTER_TRAINING = ("vote_primary", "phase1_share")


def training_settings(cfg: Phase3Config) -> dict:
    """The `phase3` settings the training runs' fingerprint holds: every key but those of
    `AFTER_TRAINING` and those of `ADDED_OFF` at their off value."""
    return {key: value for key, value in asdict(cfg).items()
            if not (key in ADDED_OFF and value == ADDED_OFF[key]) and key not in AFTER_TRAINING}


def load_phase1(params: Params, models_dir: Path) -> tuple[AegirModel, dict[str, AegirModel], dict[str, Path]]:
    """The Phase 1 primary, the frozen specialists named in `phase3.specialists`, their dirs."""
    cfg: Phase3Config = params.phase3
    unknown = [name for name in cfg.specialists if name not in params.agents]
    check_config(not unknown, "phase3.specialists", f"unknown agent(s) {unknown}; known: {', '.join(params.agents)}")
    primary = load_agents(models_dir, ["primary"])["primary"]
    return primary, load_agents(models_dir, list(cfg.specialists)), {name: models_dir / name for name in cfg.specialists}


def seam_gates(dirs: dict[str, Path]) -> dict[str, dict]:
    """name → the fusion gates a specialist trained through the seam keeps (`seam_gates`)."""
    configs = {name: json.loads((path / "config.json").read_text(encoding="utf-8")) for name, path in dirs.items()}
    return {name: config["seam_gates"] for name, config in configs.items() if "seam_gates" in config}


def run(params: Params, data_dir: Path, models_dir: Path, out_dir: Path, metrics_dir: Path,
        state_dir: Path) -> dict:
    """Train the fused and the control run, score every variant, write the outputs; the scores."""
    started = time.perf_counter()
    cfg: Phase3Config = params.phase3
    accelerator = Accelerator(cpu=not torch.cuda.is_available())
    phase1, specialists, dirs = load_phase1(params, models_dir)
    primary_config = models_dir / "primary" / "config.json"
    try:
        repeats = repeats_of(json.loads(primary_config.read_text(encoding="utf-8")), str(primary_config))
    except ValueError as exc:
        raise DataError(primary_config, str(exc)) from None
    train = load_examples(data_dir, TRAIN_SPLIT)  # never an evaluation split
    valid = load_examples(data_dir, "valid")
    if len(train) < cfg.batch_size:
        raise AegirError(f"phase3: {len(train)} training tables, fewer than phase3.batch_size = {cfg.batch_size}")
    base = {"phase3": training_settings(cfg), "lambda": asdict(params.sections["lambda"]), "rewards": asdict(params.rewards),
            "data": data_fingerprint(data_dir, TRAINED_SPLITS), "primary": checkpoint_fingerprint(models_dir / "primary"),
            "specialists": {name: checkpoint_fingerprint(path) for name, path in dirs.items()},
            "processes": accelerator.num_processes}

    # the subject rule's owners: each specialist's domains (a generalist owns none)
    owners = ({name: params.agents[name].domains for name in cfg.specialists} if cfg.subject_route else None)

    def fresh(with_specialists: bool) -> SwarmOrchestrator:
        torch.manual_seed(cfg.seed)
        primary = load_checkpoint(models_dir / "primary")[0].train()
        orch = build_orchestrator(primary, specialists if with_specialists else {}, cfg.activation_threshold,
                                  cfg.router_init_rate, stream_seam=cfg.stream_seam, column_seam=cfg.column_seam,
                                  vote=cfg.vote, subject_route=owners, vote_primary=cfg.vote_primary)
        if with_specialists and orch.stream_seam:
            with torch.no_grad():
                orch.fusion.stream_gate.fill_(cfg.stream_gate_init)
        if with_specialists and orch.column_seam:
            with torch.no_grad():
                orch.fusion.column_gate.fill_(math.log(cfg.column_gate_init))
        if with_specialists:
            open_seam_gates(orch, seam_gates(dirs))
        return orch

    summaries = {}
    runs = {"fused": fresh(True), "control": fresh(False)}
    with deterministic_kernels():  # aegir.rl.ppo: run-to-run identical weights on CPU
        for name, orch in runs.items():
            summaries[name] = train_run(orch, name, params, train, valid, state_dir / name,
                                        metrics_dir / "live" / name, fingerprint({**base, "run": name}), accelerator,
                                        reference=phase1 if cfg.anchor_weight else None)
    fused, control = runs["fused"].eval(), runs["control"].eval()
    if cfg.phase1_share:  # both runs' primaries blended toward the Phase 1 primary, alike
        for orch in (fused, control):
            blend_toward(orch.primary, phase1, cfg.phase1_share)

    # one CPU process: the evaluation splits' tables are predicted in parallel threads, one per
    # intra-op thread torch was given (as phase1 scores); the count changes float rounding only
    threads = worker_threads(accelerator)
    workers = OneThreadWorkers(threads) if threads > 1 else None
    try:
        # the frozen models' distributions as their phase1 stage stored them, where they match
        reused: dict[str, str] = {}
        kept_reads: dict[str, dict[str, tuple[list[Example], dict[str, torch.Tensor]]]] = {}
        scores, report = evaluate_all(fused, control, phase1.eval(), specialists, data_dir, cfg,
                                      params.reading, params.prepare, accelerator.is_local_main_process, workers,
                                      {"phase1": models_dir / "primary", **dirs}, reused, repeats, kept_reads)
    finally:
        if workers:
            workers.close()
    scores["steps"] = cfg.steps
    report["state_survival"] = measure_survival(fused, valid[:cfg.survival_tables])
    report["settings"] = base
    # wall clock is the one thing a rerun does not reproduce: it lives in its own file
    timing = {"wall_seconds": round(time.perf_counter() - started, 1), "runs": summaries,
              "stage_seconds_per_table": stage_seconds(fused, valid, cfg.eval_batch_size),
              "torch_threads": torch.get_num_threads(),
              # per frozen model: its Phase 1 distributions were "stored" (taken from its checkpoint), or why not
              "phase1_reads": reused}

    if accelerator.is_main_process:
        extra = {"params": {"phase3": asdict(cfg), "prepare": asdict(params.prepare),
                            "reading": asdict(params.reading)},
                 "vocab": {"cta": list(cta_vocab().labels), "cpa": list(cpa_vocab().labels)},
                 "data_fingerprint": base["data"]}
        if repeats is not None:  # the primary's, for the reading's joint decoding (aegir.eval.joint)
            extra[JOINT_CONFIG_KEY] = repeats.to_json()
        with atomic.staged_dir(out_dir) as staging:
            save_orchestrator(staging, fused, dirs, {**extra, "run": "fused"})
            save_checkpoint(staging / "control", control.primary, {**extra, "run": "control"})
            # what each model predicted on every read of the evaluation splits, as scored above
            # (aegir.eval.reads): Phase 4's never-spawn control starts from the fused ones
            for name, directory in (("fused", staging), ("control", staging / "control")):
                save_eval_reads(directory / READS_FILE, kept_reads[name], {
                    "checkpoint": checkpoint_fingerprint(directory), "data": data_fingerprint(data_dir, SPLITS),
                    "prepare": asdict(params.prepare), "reading": asdict(params.reading)})
        # (specialist paths are relative to the staging directory, a sibling of out_dir: the
        # same relative paths hold once it is renamed into place)
        atomic.write_json(metrics_dir / "scores.json", scores)
        atomic.write_json(metrics_dir / "report.json", report)
        atomic.write_json(metrics_dir / "timing.json", timing)
        atomic.write_json(metrics_dir / "wall.json", wall_minutes("phase3", timing["wall_seconds"]))
        atomic.write_json(metrics_dir / "metrics.json", headline_metrics(scores))
        atomic.write_bytes(metrics_dir / "curves.png", phase3_curves_png(
            metrics_dir / "live" / "fused", metrics_dir / "live" / "control", fused.specialist_names))
    return scores


def headline_metrics(scores: dict) -> dict:
    """The DVC metrics (`aegir.eval.metrics.headline`): the fused orchestrator's and its
    control's benchmark and real-table micro-F1 per task. F1 per split of every variant (the
    Phase 1 primary and the ensemble too), routing and critical steps stay in scores.json."""
    return {name: headline({task: scores[name][task] for task in ("cta", "cpa")}) for name in ("fused", "control")}


def require_validated_rewards(report_path: Path) -> None:
    """Phase 3 optimises the rewards Phase 2 validated: refuse to train on a failed report."""
    try:
        report = json.loads(report_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(report_path, "Phase 2's reward report is missing (run `dvc repro phase2` first)") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(report_path, f"not a valid Phase 2 report: {exc}") from None
    if not isinstance(report, dict) or report.get("passed") is not True:
        failed = report.get("failed") if isinstance(report, dict) else None
        raise DataError(report_path, f"Phase 2's reward checks did not pass (failed: {failed}); PARL would "
                                     f"optimise rewards that do not measure what they claim")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--data", default="data/prepared")
    parser.add_argument("--models", default="models/phase1", help="Phase 1 checkpoints, one directory per agent")
    parser.add_argument("--rewards-report", default="results/phase2/report.json",
                        help="Phase 2's report: PARL trains only on rewards whose checks passed")
    parser.add_argument("--out", default="models/phase3", help="orchestrator checkpoint (+ control/)")
    parser.add_argument("--metrics", default="results/phase3", help="metrics.json, report.json, live/")
    parser.add_argument("--state", default="state/phase3", help="resume state of each run")
    args = parser.parse_args(argv)
    retain_freed_memory()  # a step's buffers are reused, not mapped afresh (aegir.train.memory)
    try:
        params = load_params(args.params)
        require_validated_rewards(Path(args.rewards_report))
        scores = run(params, Path(args.data), Path(args.models), Path(args.out), Path(args.metrics),
                      Path(args.state))
    except AegirError as exc:
        parser.exit(2, f"phase3: error: {exc}\n")
    f, c, p = (scores[k] for k in ("fused", "control", "phase1"))
    print("phase3: CTA corner_cases micro-F1 " + "  ".join(
        f"{name} {m['cta']['corner_cases']['micro_f1']:.1f}" for name, m in (("phase1", p), ("control", c), ("fused", f))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

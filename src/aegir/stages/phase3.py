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
resumes from its last saved state.

Scoring reads every evaluation table as Phase 1 scored it. The frozen models (the Phase 1
primary, each specialist alone, and the output ensemble built from them) are not run again
where their Phase 1 checkpoints hold their distributions on the same reads (`aegir.eval.reads`):
the same forward on the same batches gave those bits, so the scores are the same either way.

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
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path

import torch
from accelerate import Accelerator
from dvclive import Live

from aegir import atomic
from aegir.config import (
    EVAL_SPLITS,
    SPLITS,
    TRAIN_SPLIT,
    Params,
    Phase3Config,
    PrepareConfig,
    ReadingConfig,
    load_params,
)
from aegir.data.dataset import (
    Example,
    collate,
    eval_batches,
    length_grouped_batches,
    load_examples,
)
from aegir.data.prepared import fingerprint as data_fingerprint
from aegir.errors import AegirError, DataError, check_config
from aegir.eval.curves import phase3_curves_png
from aegir.eval.grouped import ALL_LABELS, decoded, merge_predictions, split_reads
from aegir.eval.joint import CONFIG_KEY as JOINT_CONFIG_KEY
from aegir.eval.joint import LabelRepeats, repeats_of, table_decoder
from aegir.eval.metrics import headline, wall_minutes
from aegir.eval.predict import (
    TablePrediction,
    predict,
    predictions_from_probs,
    score,
    table_predictions,
)
from aegir.eval.reads import (
    READS_FILE,
    StoredReads,
    dense_distributions,
    save_eval_reads,
)
from aegir.eval.routing import routing_stats, slice_scores, slices_beaten
from aegir.labels import cpa_vocab, cta_vocab
from aegir.model.checkpoint import (
    checkpoint_fingerprint,
    load_checkpoint,
    save_checkpoint,
)
from aegir.model.network import AegirModel, AegirOutput
from aegir.orchestrator.checkpoint import save_orchestrator
from aegir.orchestrator.critical import critical_steps, orchestrator_stages, total_steps
from aegir.orchestrator.ensemble import ensemble_probs
from aegir.orchestrator.fusion import state_survival
from aegir.orchestrator.model import (
    SwarmOrchestrator,
    build_orchestrator,
)
from aegir.orchestrator.specialist import load_agents
from aegir.progress import progress as progress_bar
from aegir.rl.parl import (
    PARLSettings,
    collect_rollouts,
    rescore,
    routing_targets,
    token_loss,
)
from aegir.rl.ppo import deterministic_kernels
from aegir.rl.rewards import LambdaSchedule, budget_cap, clip_epsilon
from aegir.train.memory import retain_freed_memory
from aegir.train.resume import (
    TrainingProgress,
    fingerprint,
    load_state,
    resumed_live,
    save_state,
)
from aegir.train.schedule import learning_rate
from aegir.train.step import OneThreadWorkers, process_shard, worker_threads

# ----------------------------------------------------------------------------- training


def make_optimizer(orch: SwarmOrchestrator, cfg: Phase3Config) -> torch.optim.AdamW:
    """Three groups: the primary's matrices (decay, lr), its vectors and embeddings (lr), and
    the new parts — router, alignments, fusion gates (fusion_lr, no decay)."""
    groups: dict[str, list] = {"decay": [], "plain": [], "new": []}
    for name, param in orch.trainable_parameters().items():
        if not name.startswith("primary."):
            groups["new"].append(param)
        elif param.dim() >= 2 and "embed" not in name:
            groups["decay"].append(param)
        else:
            groups["plain"].append(param)
    spec = [{"params": groups["decay"], "weight_decay": cfg.weight_decay, "peak": cfg.lr},
            {"params": groups["plain"], "weight_decay": 0.0, "peak": cfg.lr},
            {"params": groups["new"], "weight_decay": 0.0, "peak": cfg.fusion_lr}]
    return torch.optim.AdamW([g for g in spec if g["params"]], lr=cfg.lr, betas=(0.9, 0.98), eps=1e-8,
                             fused=True)


def average_gradients(params: list[torch.nn.Parameter], accelerator: Accelerator) -> None:
    """Mean of every gradient over the processes (what DDP does; the PARL step calls the
    orchestrator's parts directly, so DDP's forward hooks would not fire). A parameter that got
    no gradient on a process (a specialist no table there chose) counts as zero there."""
    if accelerator.num_processes == 1:
        return
    for p in params:
        grad = p.grad if p.grad is not None else torch.zeros_like(p)
        p.grad = accelerator.reduce(grad, reduction="mean")


def step_generator(seed: int, step: int, process: int) -> torch.Generator:
    """The one source of randomness of a step: resuming at step n replays it exactly."""
    return torch.Generator().manual_seed(((seed * 1_000_003) + step) * 64 + process)


class WindowMeans:
    """Means of logged values over a window of steps (one curve point per window)."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = defaultdict(float)
        self.counts: dict[str, int] = defaultdict(int)

    def add(self, values: dict[str, float]) -> None:
        for key, value in values.items():
            self.sums[key] += value
            self.counts[key] += 1

    def pop(self) -> dict[str, float]:
        out = {key: self.sums[key] / self.counts[key] for key in self.sums}
        self.sums.clear()
        self.counts.clear()
        return out


def train_run(orch: SwarmOrchestrator, run: str, params: Params, train: list[Example], valid: list[Example],
              state_dir: Path, live_dir: Path, run_print: str, accelerator: Accelerator) -> dict:
    """`phase3.steps` PARL updates of `orch`; returns a summary of the run."""
    cfg: Phase3Config = params.phase3
    rc = params.rewards
    settings = PARLSettings(rollouts=cfg.rollouts, abstain_below=cfg.abstain_below,
                            critical_weight=cfg.critical_weight, ce_weight=cfg.ce_weight,
                            kl_coef=cfg.kl_coef, rewards=rc, label_smoothing=cfg.label_smoothing,
                            route_weight=cfg.route_weight, distill_weight=cfg.distill_weight)
    # the routing each training table should get: the specialists whose domains hold its domain
    # (a frozen model that params do not describe has no domains, so no routing target)
    own_domains = [params.agents[name].domains if name in params.agents else () for name in orch.specialist_names]
    schedule = LambdaSchedule(params.sections["lambda"])
    optimizer = make_optimizer(orch, cfg)
    progress = load_state(state_dir, orch, optimizer, run_print) or TrainingProgress(0, 0, 0)
    orch.to(accelerator.device)
    trainable = list(orch.trainable_parameters().values())
    S = orch.num_specialists

    if progress.step > 0:
        accelerator.print(f"resuming phase3 {run} at step {progress.step}/{cfg.steps}")
    live = resumed_live(state_dir, live_dir, progress.step) if accelerator.is_main_process else None

    batches_per_epoch = math.ceil(len(train) / cfg.batch_size)
    epoch_batches: dict[int, list[list[int]]] = {}
    window = WindowMeans()
    start_time = time.perf_counter()
    bar = progress_bar(total=cfg.steps, initial=progress.step, desc=f"phase3 {run}", unit="step",
                       disable=not accelerator.is_local_main_process, mininterval=5.0)
    orch.train()
    for step in range(progress.step, cfg.steps):
        epoch, index = divmod(step, batches_per_epoch)
        if epoch not in epoch_batches:
            epoch_batches.clear()
            epoch_batches[epoch] = length_grouped_batches(train, cfg.batch_size, cfg.seed, epoch)
        rows = process_shard(epoch_batches[epoch][index], accelerator)
        batch = collate([train[i] for i in rows]).to(accelerator.device)
        route_target = (routing_targets([train[i].domain for i in rows], own_domains, accelerator.device)
                        if orch.num_specialists and cfg.route_weight else None)

        frac = step / max(1, cfg.steps - 1)
        lam1, lam2 = schedule.at(frac)
        epsilon = clip_epsilon(frac, cfg.clip_start, cfg.clip_end)
        cap = budget_cap(step, cfg.steps, S, cfg.budget_period, cfg.budget_capped_share)
        scale = learning_rate(step, cfg.steps, 1.0, cfg.warmup_steps, cfg.min_lr_ratio)
        for group in optimizer.param_groups:
            group["lr"] = group["peak"] * scale

        generator = step_generator(cfg.seed, step, accelerator.process_index)
        with accelerator.autocast():
            rollouts, forward = collect_rollouts(orch, batch, settings, lam1, lam2, generator, cap)
        stats = None
        for epoch_k in range(cfg.ppo_epochs):
            with accelerator.autocast():
                if epoch_k:
                    forward = rescore(orch, batch, rollouts)
                loss, parts, ppo_stats = token_loss(orch, batch, forward, rollouts, settings, epsilon, route_target)
            loss.backward()
            average_gradients(trainable, accelerator)
            torch.nn.utils.clip_grad_norm_(trainable, cfg.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if epoch_k == 0:
                first_parts = parts
            stats = ppo_stats  # the last epoch's: the one where π_new ≠ π_old
        bar.update(1)

        logged = {f"reward/{name}": float(values.mean()) for name, values in rollouts.rewards.items()}
        logged.update({f"train/{name}": value for name, value in first_parts.items()})
        logged.update({"lambda/lambda1": lam1, "lambda/lambda2": lam2, "ppo/epsilon": epsilon,
                       "ppo/clip_fraction": stats.clip_fraction, "ppo/approx_kl": stats.approx_kl,
                       "ppo/log_ratio": stats.log_ratio, "ppo/tokens": float(stats.tokens),
                       "train/lr": cfg.lr * scale, "budget/cap": float(cap or 0),
                       "steps/critical": float(rollouts.critical_steps.mean())})
        if rollouts.decision is not None:
            mask = rollouts.decision.activation_mask.float()
            logged.update({f"routing/activation_rate/{name}": float(mask[:, s].mean())
                           for s, name in enumerate(orch.specialist_names)})
            logged["routing/gate_mean"] = float(rollouts.decision.scores.mean())
        if accelerator.num_processes > 1:  # every process's figures, averaged (a collective)
            means = accelerator.reduce(torch.tensor(list(logged.values()), device=accelerator.device), "mean")
            logged = dict(zip(logged, means.tolist()))
        window.add(logged)
        done = step + 1
        if live is not None and done % cfg.log_every == 0:
            live.step = done
            for key, value in window.pop().items():
                live.log_metric(key, value)
            bar.set_postfix(reward=f"{logged['reward/reward']:.3f}", loss=f"{first_parts['loss']:.3f}")
        if cfg.eval_every and done % cfg.eval_every == 0 and done < cfg.steps:
            _log_valid(live, done, orch, valid, cfg, accelerator)
        if cfg.checkpoint_every and done % cfg.checkpoint_every == 0 and done < cfg.steps:
            accelerator.wait_for_everyone()
            if accelerator.is_main_process:
                live.make_summary()  # the snapshot holds the curves and their summary
                save_state(state_dir, orch, optimizer, TrainingProgress(done, 0, 0), run_print, snapshot=live_dir)
    bar.close()
    seconds = time.perf_counter() - start_time
    if progress.step < cfg.steps:
        _log_valid(live, cfg.steps, orch, valid, cfg, accelerator)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        # the final state comes after the final curve point, so "state saved" implies "logged"
        live.make_summary()
        save_state(state_dir, orch, optimizer, TrainingProgress(cfg.steps, 0, 0), run_print, snapshot=live_dir)
        live.end()
    return {"steps": cfg.steps, "resumed_at": progress.step, "seconds": round(seconds, 1),
            "steps_per_second": round((cfg.steps - progress.step) / max(seconds, 1e-9), 3)}


def _log_valid(live: Live | None, step: int, orch: SwarmOrchestrator, valid: list[Example], cfg: Phase3Config,
               accelerator: Accelerator) -> None:
    result = score(valid, routed_predictions(orch, valid, cfg.eval_batch_size, accelerator.device))
    if live is not None:
        live.step = step
        for task in ("cta", "cpa"):
            live.log_metric(f"valid/{task}_micro_f1", result[task]["micro_f1"])
            live.log_metric(f"valid/{task}_macro_f1", result[task]["macro_f1"])
    orch.train()


# ----------------------------------------------------------------------------- evaluation


def routed_predictions(orch: SwarmOrchestrator, examples: list[Example], batch_size: int,
                       device: torch.device | str = "cpu") -> list[TablePrediction]:
    """Predictions of the routed orchestrator (thresholded routing, argmax labels)."""
    return predict(orch, examples, batch_size, device=device, forward=orch.annotate)


@torch.no_grad()
def predict_variants(fused: SwarmOrchestrator, control: SwarmOrchestrator, phase1: AegirModel,
                     examples: list[Example], batch_size: int, top_k: int = 1,
                     stored: dict[str, list[dict[str, torch.Tensor]]] | None = None) -> dict[str, list[TablePrediction]]:
    """Predictions of every model Phase 3 reports, one pass per model over `examples`:
    `phase1`, `control`, `fused` (routed), each frozen specialist alone (by name), and
    `ensemble` — (d), the output-level ensemble Phase 2 used as its routed r_perf: the mean
    softmax of the Phase 1 primary and the specialists the fused router activated.

    stored: per frozen model ("phase1" or a specialist's name), its label distributions on each
    of `examples` as Phase 1 stored them (aegir.eval.reads): that model is not run again."""
    stored = stored or {}
    names = ["phase1", "control", "fused", "ensemble", *fused.specialist_names]
    out: dict[str, list] = {name: [None] * len(examples) for name in names}
    device = model_device(fused)
    for indices in eval_batches(examples, batch_size):
        rows = [examples[i] for i in indices]
        batch = collate(rows).to(device)
        routed = fused.annotate(batch)
        width = batch.column_mask.shape[1]
        first = None if "phase1" in stored else phase1(batch)

        def probs(name: str, output: AegirOutput | None) -> tuple[torch.Tensor, torch.Tensor]:
            """(cta, cpa) label distributions (B, C, labels) of a frozen model on this batch."""
            if output is not None:
                return output.cta_logits.float().softmax(-1), output.cpa_logits.float().softmax(-1)
            return tuple(padded([stored[name][i][task] for i in indices], width).to(device) for task in ("cta", "cpa"))

        # the frozen copy of the Phase 1 primary (load_phase1 loads both from one checkpoint)
        # gives the primary's outputs: reuse them instead of a second pass
        primary_probs = probs("phase1", first)
        alone = [primary_probs if name == "primary" else probs(name, None if name in stored else s.model(batch))
                 for name, s in zip(fused.specialist_names, fused.specialists)]
        mask = routed.activation_mask
        mean = [ensemble_probs(primary_probs[t], [a[t] for a in alone], mask).log().softmax(-1) for t in (0, 1)]
        results = {"phase1": predictions_from_probs(*primary_probs, rows, top_k),
                   "control": table_predictions(control.primary(batch), rows, top_k),
                   "fused": table_predictions(routed, rows, top_k),
                   "ensemble": predictions_from_probs(*mean, rows, top_k, mask),
                   **{name: predictions_from_probs(*a, rows, top_k) for name, a in zip(fused.specialist_names, alone)}}
        for name, predictions in results.items():
            for i, prediction in zip(indices, predictions):
                out[name][i] = prediction
    return out


def model_device(model: torch.nn.Module) -> torch.device:
    """Where `model`'s parameters are: the device its batches go to."""
    return next(model.parameters()).device


def padded(rows: list[torch.Tensor], width: int) -> torch.Tensor:
    """Per-read (C_i, labels) distributions as one (B, width, labels) batch; the columns a read
    lacks hold ones (never read: predictions keep each read's own columns)."""
    out = torch.ones(len(rows), width, rows[0].shape[-1])
    for b, row in enumerate(rows):
        out[b, :len(row)] = row
    return out


def critical_summary(orch: SwarmOrchestrator, predictions: list[TablePrediction]) -> dict:
    """Mean critical and total steps per table of the routed orchestrator, and the two fixed
    routings (primary alone, every specialist) for scale."""
    configs = [s.config for s in orch.specialists]
    p = orch.primary.config

    def steps(active) -> tuple[int, int]:
        stages = orchestrator_stages(p, configs, active)
        return critical_steps(stages), total_steps(stages)

    per_table = [steps(pred.activation.tolist()) for pred in predictions]
    n = max(1, len(per_table))
    return {
        "critical_steps": sum(c for c, _ in per_table) / n,
        "total_steps": sum(t for _, t in per_table) / n,
        "primary_only": steps([False] * len(configs))[0],
        "all_specialists": {"critical_steps": steps([True] * len(configs))[0],
                            "total_steps": steps([True] * len(configs))[1]},
    }


@torch.no_grad()
def stage_seconds(orch: SwarmOrchestrator, examples: list[Example], batch_size: int) -> dict[str, float]:
    """Wall-clock per stage of the routed forward, seconds per table, over `examples`."""
    totals: dict[str, float] = defaultdict(float)
    orch.eval()
    for start in range(0, len(examples), batch_size):
        out = orch.annotate(collate(examples[start:start + batch_size]).to(model_device(orch)))
        for key, value in out.seconds.items():
            totals[key] += value
    return {key: round(value / max(1, len(examples)), 6) for key, value in sorted(totals.items())}


def measure_survival(orch: SwarmOrchestrator, examples: list[Example]) -> dict:
    """`state_survival` of the trained fusion with every specialist activated, per layer and
    column index, on the first `len(examples)` valid tables."""
    batch = collate(examples).to(model_device(orch))
    with torch.no_grad():
        encoded = orch.encode(batch)
        mask = torch.ones(batch.batch_size, orch.num_specialists, dtype=torch.bool, device=batch.byte_ids.device)
        state = orch.fuse(orch.read_specialists(batch, mask), mask)
        share = state_survival(orch.primary, batch, state)  # (L, C)
    columns = batch.column_mask.sum(0)
    return {"share_by_layer_and_column": [[round(float(x), 4) for x in row] for row in share],
            "tables_with_column": columns.tolist(),
            "gate_abs_mean_by_layer_head": [[round(float(x), 4) for x in row]
                                            for row in orch.fusion.wkv_gate.detach().abs().mean(0)],
            "routing_hidden_norm": float(orch.routing_hidden(batch, encoded).norm(dim=-1).mean())}


def predict_variants_shared(fused: SwarmOrchestrator, control: SwarmOrchestrator, phase1: AegirModel,
                            examples: list[Example], batch_size: int, top_k: int = 1,
                            workers: OneThreadWorkers | None = None,
                            stored: dict[str, list[dict[str, torch.Tensor]]] | None = None) -> dict[str, list[TablePrediction]]:
    """`predict_variants`, with each of `workers`' threads (one intra-op thread each) predicting
    an interleaved share of `examples` (every `workers.count`-th); the same predictions as one
    thread up to float rounding, in the order of `examples`. Every model is frozen and in eval
    mode, so the threads only read the shared parameters."""
    stored = stored or {}
    if workers is None or workers.count < 2 or len(examples) < 2:
        return predict_variants(fused, control, phase1, examples, batch_size, top_k, stored)

    def share(indices: list[int]) -> dict[str, list[TablePrediction]]:
        return predict_variants(fused, control, phase1, [examples[i] for i in indices], batch_size, top_k,
                                {name: [reads[i] for i in indices] for name, reads in stored.items()})

    shares = workers.map_shares(share, list(range(len(examples))))
    return {name: workers.interleave([share[name] for share in shares]) for name in shares[0]}


VARIANTS = ("phase1", "control", "fused", "ensemble")  # what Phase 3 reports, (a) (b) (c) (d)


def evaluate_all(fused: SwarmOrchestrator, control: SwarmOrchestrator, phase1: AegirModel,
                 specialists: dict[str, AegirModel], data_dir: Path, cfg: Phase3Config,
                 reading: ReadingConfig | None = None, prepare: PrepareConfig | None = None,
                 show_progress: bool = True, workers: OneThreadWorkers | None = None,
                 checkpoints: dict[str, Path] | None = None, reused: dict[str, str] | None = None,
                 repeats: LabelRepeats | None = None,
                 kept_reads: dict[str, dict[str, tuple[list[Example], dict[str, torch.Tensor]]]] | None = None
                 ) -> tuple[dict, dict]:
    """(scores, report): F1 with supports of every variant on every evaluation split, routing
    statistics and critical steps; and each specialist's slices where it beats the Phase 1
    primary. Every variant reads each table as Phase 1 scores it (`reading`: column groups, row
    views; aegir.eval.grouped; `prepare` serializes them). `workers`: predict in their threads
    (`predict_variants_shared`). `checkpoints`: the Phase 1 checkpoint directory of "phase1" and
    of each specialist, whose stored distributions (aegir.eval.reads) are taken where they match
    instead of running that model; `reused`, if given, receives per model "stored" or why not.
    `repeats`: the Phase 1 primary's label repeat counts, for the reading's joint decoding
    (aegir.eval.joint), which every variant gets alike. `kept_reads`, if given, receives per
    variant ("fused", "control") and split its distributions on every read (`aegir.eval.reads`),
    which the stage stores beside each checkpoint: Phase 4 starts from exactly what Phase 3 scored,
    and `calibrate` reads them instead of running the models again."""
    reading = reading or ReadingConfig()
    decode = table_decoder(repeats, reading.joint_weights, "reading")
    top_k = ALL_LABELS  # every label's probability: the joint decoding and the stored reads need them
    # each checkpoint directory opened once ("phase1" and the specialist "primary" share one)
    checkpoints = checkpoints or {}
    settings = {"data": data_fingerprint(data_dir, SPLITS), "prepare": asdict(prepare or PrepareConfig()),
                "reading": asdict(reading)}
    opened = {directory: StoredReads.open(directory, {"checkpoint": checkpoint_fingerprint(directory), **settings})
              for directory in set(checkpoints.values())}
    stores = {name: opened[directory][0] for name, directory in checkpoints.items() if opened[directory][0]}
    if reused is not None:
        reused.update({name: "stored" if opened[directory][0] else opened[directory][1]
                       for name, directory in checkpoints.items()})
    metrics: dict = {name: {"cta": {}, "cpa": {}} for name in VARIANTS}
    slices: dict[str, dict] = {name: {} for name in ["phase1", *specialists]}
    routed_all, examples_all, split_rates = [], [], {}
    splits = progress_bar(EVAL_SPLITS, desc="phase3 scoring", unit="split", disable=not show_progress)
    for split in splits:
        splits.set_postfix_str(split, refresh=False)
        examples = load_examples(data_dir, split)
        if not examples:
            continue
        plan = split_reads(data_dir, split, examples, reading.columns, reading.views, prepare or PrepareConfig())
        distributions = {store.path: store.split(split, plan.reads) for store in stores.values()}
        stored = {name: distributions[store.path] for name, store in stores.items()
                  if distributions[store.path] is not None}
        if reused is not None:
            for name in stores:
                if name not in stored:
                    reused[name] = f"recomputed on {split}: other reads"
        reads = predict_variants_shared(fused, control, phase1, plan.reads, cfg.eval_batch_size, ALL_LABELS,
                                        workers, stored)
        if kept_reads is not None:
            for name in ("fused", "control"):
                kept_reads.setdefault(name, {})[split] = (plan.reads, dense_distributions(
                    reads[name], {"cta": len(cta_vocab()), "cpa": len(cpa_vocab())}))
        if plan.one_read_per_table:
            variants = reads
        else:
            ids = [e.table_id for e in examples]
            variants = {name: merge_predictions(plan, predictions, ids, top_k) for name, predictions in reads.items()}
        variants = {name: decoded(predictions, decode, 1) for name, predictions in variants.items()}
        for name in VARIANTS:
            result = score(examples, variants[name])
            for task in ("cta", "cpa"):
                metrics[name][task][split] = result[task]
        for name in ["phase1", *specialists]:
            slices[name][split] = slice_scores(examples, variants[name])
        split_rates[split] = routing_stats(examples, variants["fused"], fused.specialist_names)["activation_rate"]
        routed_all.extend(variants["fused"])
        examples_all.extend(examples)
    routing = routing_stats(examples_all, routed_all, fused.specialist_names)
    routing["activation_rate_by_split"] = split_rates
    metrics["routing"] = {key: routing[key] for key in ("activation_rate", "activation_rate_by_domain",
                                                          "mean_activated", "differs_from_majority",
                                                          "distinct_routings")}
    metrics["critical_steps"] = critical_summary(fused, routed_all)
    report = {
        "routing": routing,
        "specialists_beat_primary": {name: slices_beaten(slices[name], slices["phase1"])
                                     for name in specialists},
        "specialist_f1": {name: {split: slices[name][split]["all"] for split in slices[name]}
                          for name in specialists},
    }
    return metrics, report


# ----------------------------------------------------------------------------- main


def load_phase1(params: Params, models_dir: Path) -> tuple[AegirModel, dict[str, AegirModel], dict[str, Path]]:
    """The Phase 1 primary, the frozen specialists named in `phase3.specialists`, their dirs."""
    cfg: Phase3Config = params.phase3
    unknown = [name for name in cfg.specialists if name not in params.agents]
    check_config(not unknown, "phase3.specialists", f"unknown agent(s) {unknown}; known: {', '.join(params.agents)}")
    primary = load_agents(models_dir, ["primary"])["primary"]
    return primary, load_agents(models_dir, list(cfg.specialists)), {name: models_dir / name for name in cfg.specialists}


def run(params: Params, data_dir: Path, models_dir: Path, out_dir: Path, metrics_dir: Path,
        state_dir: Path) -> dict:
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
    base = {"phase3": asdict(cfg), "lambda": asdict(params.sections["lambda"]), "rewards": asdict(params.rewards),
            "data": data_fingerprint(data_dir, SPLITS), "primary": checkpoint_fingerprint(models_dir / "primary"),
            "specialists": {name: checkpoint_fingerprint(path) for name, path in dirs.items()},
            "processes": accelerator.num_processes}

    def fresh(with_specialists: bool) -> SwarmOrchestrator:
        torch.manual_seed(cfg.seed)
        primary = load_checkpoint(models_dir / "primary")[0].train()
        return build_orchestrator(primary, specialists if with_specialists else {}, cfg.activation_threshold,
                                  cfg.router_init_rate)

    summaries = {}
    runs = {"fused": fresh(True), "control": fresh(False)}
    with deterministic_kernels():  # aegir.rl.ppo: run-to-run identical weights on CPU
        for name, orch in runs.items():
            summaries[name] = train_run(orch, name, params, train, valid, state_dir / name,
                                        metrics_dir / "live" / name, fingerprint({**base, "run": name}), accelerator)
    fused, control = runs["fused"].eval(), runs["control"].eval()

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
                    "checkpoint": checkpoint_fingerprint(directory), "data": base["data"],
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

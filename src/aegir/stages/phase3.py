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

Outputs:
  --out       the fused orchestrator (`aegir.swarm.checkpoint`; specialists by fingerprint) and
              `control/` (a plain model checkpoint of the control's primary)
  --metrics   metrics.json (DVC metrics: `phase1`, `control`, `fused`, `ensemble` in Phase 1's
              layout, `routing`, `critical_steps`), report.json (specialist slices, state
              survival, routing detail, settings), timing.json (wall clock of each run and of
              each stage of the routed forward: the only output a rerun does not reproduce),
              live/fused and live/control (DVCLive curves)
  --state     resume state of each run
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from accelerate import Accelerator
from dvclive import Live
from tqdm import tqdm

from aegir import atomic
from aegir.config import EVAL_SPLITS, SPLITS, TRAIN_SPLIT, Params, load_params
from aegir.data.dataset import Example, collate, eval_batches, length_grouped_batches, load_examples
from aegir.data.prepared import fingerprint as data_fingerprint
from aegir.errors import AegirError, DataError, check_config
from aegir.eval.predict import TablePrediction, predict, score, table_predictions
from aegir.eval.routing import routing_stats, slice_scores, slices_beaten
from aegir.labels import cpa_vocab, cta_vocab
from aegir.model.aegir import AegirModel
from aegir.model.checkpoint import load_checkpoint, save_checkpoint
from aegir.rl.parl import PARLSettings, collect_rollouts, rescore, token_loss
from aegir.rl.rewards import LambdaSchedule, budget_cap, clip_epsilon
from aegir.swarm.checkpoint import save_orchestrator
from aegir.swarm.critical import critical_steps, orchestrator_stages, total_steps
from aegir.swarm.ensemble import ensemble_output
from aegir.swarm.fusion import state_survival
from aegir.swarm.orchestrator import (
    OrchestratorOutput,
    SwarmOrchestrator,
    build_orchestrator,
)
from aegir.swarm.specialist import checkpoint_fingerprint, load_agents
from aegir.train.resume import TrainingProgress, fingerprint, load_state, save_state
from aegir.train.schedule import learning_rate


@dataclass(frozen=True)
class Phase3Config:
    """Params section `phase3`: the PARL run and its control."""

    specialists: tuple[str, ...] = ("primary", "places", "media")  # frozen Phase 1 checkpoints
    seed: int = 0  # init of router/fusion, batch order, every sampled routing and label
    steps: int = 300  # PARL updates of each run (fused and control alike)
    batch_size: int = 8  # tables per step, over all processes
    rollouts: int = 4  # K rollouts per table: the group of the advantage baseline
    ppo_epochs: int = 2  # updates per batch of rollouts (the first reuses the rollout forward)
    lr: float = 5e-4  # peak lr of the primary (it starts trained)
    fusion_lr: float = 3e-3  # peak lr of the new parts: router, alignments, fusion gates
    min_lr_ratio: float = 0.1  # final lr as a share of the peak (cosine)
    warmup_steps: int = 20
    weight_decay: float = 0.01  # AdamW, on matrices of the primary only
    grad_clip: float = 1.0
    ce_weight: float = 1.0  # supervised CE on gold labels beside the RL loss (0 allowed)
    kl_coef: float = 0.0  # per-token KL(π_old‖π_new) penalty (0 = off)
    critical_weight: float = 2.0  # token weight of routing decisions (label tokens weigh 1)
    clip_start: float = 0.2  # PPO ε at the start …
    clip_end: float = 0.1  # … annealed linearly to this
    abstain_below: float = 0.3  # a sampled label below this probability is left unannotated
    activation_threshold: float = 0.5  # evaluation: a gate opens above this score
    router_init_rate: float = 0.5  # every gate's initial probability
    budget_period: int = 50  # steps per capped + uncapped window
    budget_capped_share: float = 0.5  # share of each window under the cap on specialists per batch
    eval_every: int = 100  # steps between validation F1 points (0: at the end only)
    log_every: int = 10  # steps between curve points (each the mean over its window)
    checkpoint_every: int = 50  # steps between saved training states
    eval_batch_size: int = 32
    survival_tables: int = 64  # valid tables on which the fused state's survival is measured

    def __post_init__(self) -> None:
        def check(ok: bool, key: str, problem: str) -> None:
            check_config(ok, f"phase3.{key}", problem)

        check(len(self.specialists) >= 1 and len(set(self.specialists)) == len(self.specialists),
              "specialists", f"need ≥ 1 distinct agent names, got {list(self.specialists)}")
        check(1 <= self.steps <= 1_000_000, "steps", f"must be in [1, 1000000], got {self.steps}")
        check(2 <= self.batch_size <= 4096, "batch_size", f"must be in [2, 4096], got {self.batch_size}")
        check(2 <= self.rollouts <= 64, "rollouts", f"must be in [2, 64], got {self.rollouts}")
        check(1 <= self.ppo_epochs <= 16, "ppo_epochs", f"must be in [1, 16], got {self.ppo_epochs}")
        for key in ("lr", "fusion_lr"):
            check(0 < getattr(self, key) <= 1, key, f"must be in (0, 1], got {getattr(self, key)}")
        check(0 <= self.min_lr_ratio <= 1, "min_lr_ratio", f"must be in [0, 1], got {self.min_lr_ratio}")
        check(self.warmup_steps >= 0, "warmup_steps", "must be ≥ 0")
        check(0 <= self.weight_decay < 1, "weight_decay", f"must be in [0, 1), got {self.weight_decay}")
        check(self.grad_clip > 0, "grad_clip", f"must be > 0, got {self.grad_clip}")
        for key in ("ce_weight", "kl_coef"):
            check(0 <= getattr(self, key) <= 100, key, f"must be in [0, 100], got {getattr(self, key)}")
        check(0 < self.critical_weight <= 100, "critical_weight", f"must be in (0, 100], got {self.critical_weight}")
        check(0 < self.clip_end <= self.clip_start < 1, "clip_start",
              f"need 0 < clip_end ≤ clip_start < 1, got {self.clip_start} → {self.clip_end}")
        check(0 <= self.abstain_below < 1, "abstain_below", f"must be in [0, 1), got {self.abstain_below}")
        check(0 < self.activation_threshold < 1, "activation_threshold",
              f"must be in (0, 1), got {self.activation_threshold}")
        check(0 < self.router_init_rate < 1, "router_init_rate", f"must be in (0, 1), got {self.router_init_rate}")
        check(self.budget_period >= 1, "budget_period", "must be ≥ 1")
        check(0 <= self.budget_capped_share <= 1, "budget_capped_share",
              f"must be in [0, 1], got {self.budget_capped_share}")
        for key in ("eval_every", "checkpoint_every"):
            check(getattr(self, key) >= 0, key, "must be ≥ 0")
        check(self.log_every >= 1, "log_every", "must be ≥ 1")
        check(self.eval_batch_size >= 1, "eval_batch_size", "must be ≥ 1")
        check(self.survival_tables >= 1, "survival_tables", "must be ≥ 1")


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
    return torch.optim.AdamW([g for g in spec if g["params"]], lr=cfg.lr, betas=(0.9, 0.98), eps=1e-8)


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


def process_rows(indices: list[int], accelerator: Accelerator) -> list[int]:
    """This process's share of a global batch."""
    world, rank = accelerator.num_processes, accelerator.process_index
    if len(indices) < world:
        indices = (indices * world)[:world]
    return indices[rank::world]


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
                            kl_coef=cfg.kl_coef, rewards=rc)
    schedule = LambdaSchedule(params.sections["lambda"])
    optimizer = make_optimizer(orch, cfg)
    progress = load_state(state_dir, orch, optimizer, run_print) or TrainingProgress(0, 0, 0)
    orch.to(accelerator.device)
    trainable = list(orch.trainable_parameters().values())
    S = orch.num_specialists

    if accelerator.is_main_process:
        if progress.step == 0:
            shutil.rmtree(live_dir, ignore_errors=True)
        else:
            _trim_curves(live_dir, progress.step)
            accelerator.print(f"resuming phase3 {run} at step {progress.step}/{cfg.steps}")
    live = (Live(dir=str(live_dir), resume=progress.step > 0, save_dvc_exp=False, dvcyaml=False)
            if accelerator.is_main_process else None)

    batches_per_epoch = math.ceil(len(train) / cfg.batch_size)
    epoch_batches: dict[int, list[list[int]]] = {}
    window = WindowMeans()
    start_time = time.perf_counter()
    bar = tqdm(total=cfg.steps, initial=progress.step, desc=f"phase3 {run}", unit="step",
               disable=not accelerator.is_local_main_process, mininterval=5.0)
    orch.train()
    for step in range(progress.step, cfg.steps):
        epoch, index = divmod(step, batches_per_epoch)
        if epoch not in epoch_batches:
            epoch_batches.clear()
            epoch_batches[epoch] = length_grouped_batches(train, cfg.batch_size, cfg.seed, epoch)
        rows = process_rows(epoch_batches[epoch][index], accelerator)
        batch = collate([train[i] for i in rows]).to(accelerator.device)

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
                loss, parts, ppo_stats = token_loss(orch, batch, forward, rollouts, settings, epsilon)
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
                save_state(state_dir, orch, optimizer, TrainingProgress(done, 0, 0), run_print)
    bar.close()
    seconds = time.perf_counter() - start_time
    if progress.step < cfg.steps:
        _log_valid(live, cfg.steps, orch, valid, cfg, accelerator)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        save_state(state_dir, orch, optimizer, TrainingProgress(cfg.steps, 0, 0), run_print)
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


def _trim_curves(live_dir: Path, last_step: int) -> None:
    from aegir.stages.phase1 import trim_curves

    trim_curves(live_dir, last_step)


# ----------------------------------------------------------------------------- evaluation


def routed_predictions(orch: SwarmOrchestrator, examples: list[Example], batch_size: int,
                       device: torch.device | str = "cpu") -> list[TablePrediction]:
    """Predictions of the routed orchestrator (thresholded routing, argmax labels)."""
    return predict(orch, examples, batch_size, device=device, forward=orch.annotate)


@torch.no_grad()
def predict_variants(fused: SwarmOrchestrator, control: SwarmOrchestrator, phase1: AegirModel,
                     examples: list[Example], batch_size: int) -> dict[str, list[TablePrediction]]:
    """Predictions of every model Phase 3 reports, one pass per model over `examples`:
    `phase1`, `control`, `fused` (routed), each frozen specialist alone (by name), and
    `ensemble` — (d), the output-level ensemble Phase 2 used as its routed r_perf: the mean
    softmax of the Phase 1 primary and the specialists the fused router activated."""
    names = ["phase1", "control", "fused", "ensemble", *fused.specialist_names]
    out: dict[str, list] = {name: [None] * len(examples) for name in names}
    for indices in eval_batches(examples, batch_size):
        rows = [examples[i] for i in indices]
        batch = collate(rows)
        routed = fused.annotate(batch)
        first = phase1(batch)
        alone = [s.model(batch) for s in fused.specialists]
        results = {"phase1": first, "control": control.primary(batch), "fused": routed,
                   "ensemble": OrchestratorOutput(output=ensemble_output(first, alone, routed.activation_mask),
                                                  activation_mask=routed.activation_mask),
                   **dict(zip(fused.specialist_names, alone))}
        for name, result in results.items():
            for i, prediction in zip(indices, table_predictions(result, rows)):
                out[name][i] = prediction
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
        out = orch.annotate(collate(examples[start:start + batch_size]))
        for key, value in out.seconds.items():
            totals[key] += value
    return {key: round(value / max(1, len(examples)), 6) for key, value in sorted(totals.items())}


def measure_survival(orch: SwarmOrchestrator, examples: list[Example]) -> dict:
    """`state_survival` of the trained fusion with every specialist activated, per layer and
    column index, on the first `len(examples)` valid tables."""
    batch = collate(examples)
    with torch.no_grad():
        encoded = orch.encode(batch)
        mask = torch.ones(batch.batch_size, orch.num_specialists, dtype=torch.bool)
        state = orch.fuse(orch.read_specialists(batch, mask), mask)
        share = state_survival(orch.primary, batch, state)  # (L, C)
    columns = batch.column_mask.sum(0)
    return {"share_by_layer_and_column": [[round(float(x), 4) for x in row] for row in share],
            "tables_with_column": columns.tolist(),
            "gate_abs_mean_by_layer_head": [[round(float(x), 4) for x in row]
                                            for row in orch.fusion.wkv_gate.detach().abs().mean(0)],
            "routing_hidden_norm": float(orch.routing_hidden(batch, encoded).norm(dim=-1).mean())}


def evaluate_all(fused: SwarmOrchestrator, control: SwarmOrchestrator, phase1: AegirModel,
                 specialists: dict[str, AegirModel], data_dir: Path, cfg: Phase3Config) -> tuple[dict, dict]:
    """(metrics, report): F1 of every variant on every evaluation split, routing statistics,
    critical steps, and each specialist's slices where it beats the Phase 1 primary."""
    metrics: dict = {name: {"cta": {}, "cpa": {}} for name in ("phase1", "control", "fused", "ensemble")}
    slices: dict[str, dict] = {name: {} for name in ["phase1", *specialists]}
    routed_all, examples_all, split_rates = [], [], {}
    for split in EVAL_SPLITS:
        examples = load_examples(data_dir, split)
        if not examples:
            continue
        variants = predict_variants(fused, control, phase1, examples, cfg.eval_batch_size)
        for name in ("phase1", "control", "fused", "ensemble"):
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
    cfg: Phase3Config = params.phase3
    accelerator = Accelerator(cpu=not torch.cuda.is_available())
    phase1, specialists, dirs = load_phase1(params, models_dir)
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
    for name, orch in runs.items():
        summaries[name] = train_run(orch, name, params, train, valid, state_dir / name,
                                    metrics_dir / "live" / name, fingerprint({**base, "run": name}), accelerator)
    fused, control = runs["fused"].eval(), runs["control"].eval()

    metrics, report = evaluate_all(fused, control, phase1.eval(), specialists, data_dir, cfg)
    metrics["steps"] = cfg.steps
    report["state_survival"] = measure_survival(fused, valid[:cfg.survival_tables])
    report["settings"] = base
    # wall clock is the one thing a rerun does not reproduce: it lives in its own file
    timing = {"runs": summaries, "stage_seconds_per_table": stage_seconds(fused, valid, cfg.eval_batch_size),
              "torch_threads": torch.get_num_threads()}

    if accelerator.is_main_process:
        extra = {"params": {"phase3": asdict(cfg), "prepare": asdict(params.prepare)},
                 "vocab": {"cta": list(cta_vocab().labels), "cpa": list(cpa_vocab().labels)},
                 "data_fingerprint": base["data"]}
        with atomic.staged_dir(out_dir) as staging:
            save_orchestrator(staging, fused, dirs, {**extra, "run": "fused"})
            save_checkpoint(staging / "control", control.primary, {**extra, "run": "control"})
        # (specialist paths are relative to the staging directory, a sibling of out_dir: the
        # same relative paths hold once it is renamed into place)
        atomic.write_json(metrics_dir / "report.json", report)
        atomic.write_json(metrics_dir / "timing.json", timing)
        atomic.write_json(metrics_dir / "metrics.json", metrics)
    return metrics


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
    try:
        params = load_params(args.params)
        require_validated_rewards(Path(args.rewards_report))
        metrics = run(params, Path(args.data), Path(args.models), Path(args.out), Path(args.metrics),
                      Path(args.state))
    except AegirError as exc:
        parser.exit(2, f"phase3: error: {exc}\n")
    f, c, p = (metrics[k] for k in ("fused", "control", "phase1"))
    print("phase3: CTA corner_cases micro-F1 " + "  ".join(
        f"{name} {m['cta']['corner_cases']['micro_f1']:.1f}" for name, m in (("phase1", p), ("control", c), ("fused", f))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

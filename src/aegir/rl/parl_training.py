"""Phase 3's training run: `phase3.steps` PARL updates of one orchestrator (fused or control).

Each step is one PARL update (`aegir.rl.parl`): K rollouts per table, the rewards of
`aegir.rl.rewards` under the `lambda` schedule, group-relative advantages, the token-level
clipped loss (ε annealed `clip_start` → `clip_end`) + `ce_weight` · CE on gold labels + the
chunker's ratio loss, `ppo_epochs` updates per batch. The batch is split across processes and
gradients are averaged (`average_gradients`); every sample comes from a generator seeded by
(seed, step, process) (`step_generator`), so a CPU run with one process is deterministic and a
killed run resumes exactly. With `average_decay` the run ends with the exponential moving
average of its weights over the updates (`update_average`), kept in the optimizer's state so
that it resumes too. Logging, validation and the resume state: `aegir.train.loop`.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch
from accelerate import Accelerator

from aegir.config import Params, Phase3Config
from aegir.data.dataset import Example, collate, length_grouped_batches
from aegir.eval.predict import score
from aegir.model.network import AegirModel
from aegir.orchestrator.evaluation import routed_predictions
from aegir.orchestrator.model import SwarmOrchestrator
from aegir.orchestrator.router import routing_targets
from aegir.progress import progress as progress_bar
from aegir.rl.parl import (
    PARLSettings,
    collect_rollouts,
    rescore,
    token_loss,
)
from aegir.rl.rewards import LambdaSchedule, budget_cap, clip_epsilon
from aegir.train.loop import TrainingLoop, WindowMeans
from aegir.train.resume import TrainingProgress, load_state, resumed_live, save_state
from aegir.train.schedule import learning_rate
from aegir.train.step import process_shard


def make_optimizer(orch: SwarmOrchestrator, cfg: Phase3Config) -> torch.optim.AdamW:
    """Three groups: the primary's matrices (decay, lr), its vectors and embeddings (lr), and
    the new parts — router, alignments, fusion gates (fusion_lr, no decay). In the fused run
    (an orchestrator with specialists) the primary's two groups take `fused_primary_lr` where it
    is set: at 0 its weights stay the Phase 1 primary's to the bit (AdamW's step and decay both
    scale with the lr) while its gradients still count in the clipped norm; the control keeps lr."""
    primary_lr = cfg.lr if cfg.fused_primary_lr is None or not orch.num_specialists else cfg.fused_primary_lr
    groups: dict[str, list] = {"decay": [], "plain": [], "new": []}
    for name, param in orch.trainable_parameters().items():
        if not name.startswith("primary."):
            groups["new"].append(param)
        elif param.dim() >= 2 and "embed" not in name:
            groups["decay"].append(param)
        else:
            groups["plain"].append(param)
    spec = [{"params": groups["decay"], "weight_decay": cfg.weight_decay, "peak": primary_lr},
            {"params": groups["plain"], "weight_decay": 0.0, "peak": primary_lr},
            {"params": groups["new"], "weight_decay": 0.0, "peak": cfg.fusion_lr}]
    for group in spec:  # the training loop sets each group's lr to peak × the schedule before every step
        group["lr"] = group["peak"]
    return torch.optim.AdamW([g for g in spec if g["params"]], betas=(0.9, 0.98), eps=1e-8, fused=True)


AVERAGE = "average"  # the optimizer state key of a parameter's moving average (saved with the state)


def pending_average(optimizer: torch.optim.Optimizer) -> dict[torch.nn.Parameter, torch.Tensor]:
    """Copies of the parameters whose moving average has not started (no update has reached
    them yet): `update_average` starts theirs from these values."""
    return {p: p.detach().clone() for group in optimizer.param_groups for p in group["params"]
            if AVERAGE not in optimizer.state[p]}


def update_average(optimizer: torch.optim.Optimizer, decay: float,
                   before: dict[torch.nn.Parameter, torch.Tensor]) -> None:
    """After an optimizer update: each parameter's moving average ← decay · average + (1 − decay)
    · its new value. The average lives in the optimizer's state of the parameter (key
    `AVERAGE`), so the resume state carries it and a resumed run ends with the same weights. A
    parameter's average starts at the first update that reaches it (the optimizer then has a
    state for it), from its value before that update (`before`: the copies `pending_average`
    took, which become the averages); until then the parameter is still its starting value.
    (The average is never put into a state the optimizer has not made: AdamW would take a state
    it finds for one it made.)"""
    with torch.no_grad():
        for group in optimizer.param_groups:
            for p in group["params"]:
                state = optimizer.state[p]
                if AVERAGE in state:
                    state[AVERAGE].mul_(decay).add_(p.detach(), alpha=1 - decay)
                elif state:  # this update was the first to reach it
                    if p not in before:
                        raise ValueError("update_average: a parameter's first averaged update needs its "
                                         "value from before it (pending_average)")
                    state[AVERAGE] = before[p].mul_(decay).add_(p.detach(), alpha=1 - decay)


def use_average(optimizer: torch.optim.Optimizer) -> None:
    """Put each parameter's moving average in its place (the run's final weights); a parameter
    no update reached keeps its value, its starting one."""
    with torch.no_grad():
        averages = [(p, optimizer.state[p].get(AVERAGE)) for group in optimizer.param_groups for p in group["params"]]
        if all(average is None for _, average in averages):
            raise ValueError("use_average: no parameter has a moving average (no update was averaged)")
        for p, average in averages:
            if average is not None:
                p.copy_(average)


@torch.no_grad()
def blend_toward(model: torch.nn.Module, start: torch.nn.Module, share: float) -> None:
    """Each parameter of `model` ← (1 − share)·itself + share·the parameter of the same name in
    `start` (a weight-space interpolation toward where the run began, as robust fine-tuning
    does: Wortsman et al. 2022, "Robust fine-tuning of zero-shot models"). Every parameter of
    `model` must be in `start` with its shape."""
    if not 0 <= share <= 1:
        raise ValueError(f"blend_toward: share must be in [0, 1], got {share}")
    theirs = dict(start.named_parameters())
    ours = dict(model.named_parameters())
    missing = [name for name, p in ours.items() if name not in theirs or theirs[name].shape != p.shape]
    if missing:
        raise ValueError(f"blend_toward: {len(missing)} parameters have no counterpart of their shape "
                         f"in the start model, e.g. {missing[:3]}")
    for name, p in ours.items():
        p.copy_((1 - share) * p + share * theirs[name].to(p.dtype))


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



def train_run(orch: SwarmOrchestrator, run: str, params: Params, train: list[Example], valid: list[Example],
              state_dir: Path, live_dir: Path, run_print: str, accelerator: Accelerator,
              reference: AegirModel | None = None) -> dict:
    """`phase3.steps` PARL updates of `orch`; returns a summary of the run. `reference`: the
    frozen Phase 1 primary that `phase3.anchor_weight` holds the trained primary near (read
    once per batch, without gradients; needed when the weight is > 0)."""
    cfg: Phase3Config = params.phase3
    rc = params.rewards
    settings = PARLSettings(rollouts=cfg.rollouts, abstain_below=cfg.abstain_below,
                            critical_weight=cfg.critical_weight, ce_weight=cfg.ce_weight, rl_weight=cfg.rl_weight,
                            kl_coef=cfg.kl_coef, rewards=rc, label_smoothing=cfg.label_smoothing,
                            route_weight=cfg.route_weight, distill_weight=cfg.distill_weight,
                            anchor_weight=cfg.anchor_weight)
    # the routing each training table should get: the specialists whose domains hold its domain
    # (a frozen model that params do not describe has no domains, so no routing target)
    own_domains = [params.agents[name].domains if name in params.agents else () for name in orch.specialist_names]
    schedule = LambdaSchedule(params.sections["lambda"])
    optimizer = make_optimizer(orch, cfg)
    progress = load_state(state_dir, orch, optimizer, run_print) or TrainingProgress(0, 0, 0)
    orch.to(accelerator.device)
    if cfg.anchor_weight and reference is None:
        raise ValueError("phase3.anchor_weight > 0 needs the frozen Phase 1 primary as `reference`")
    if reference is not None:
        reference = reference.to(accelerator.device).eval().requires_grad_(False)
    trainable = list(orch.trainable_parameters().values())
    S = orch.num_specialists

    if progress.step > 0:
        accelerator.print(f"resuming phase3 {run} at step {progress.step}/{cfg.steps}")
    live = resumed_live(state_dir, live_dir, progress.step) if accelerator.is_main_process else None

    def validate() -> dict[str, dict]:
        """Routed F1 on `valid` (every process predicts all of it); `orch` back in training mode."""
        result = score(valid, routed_predictions(orch, valid, cfg.eval_batch_size, accelerator.device))
        orch.train()
        return result

    loop = TrainingLoop(accelerator, live, cfg.steps, cfg.log_every, cfg.eval_every, cfg.checkpoint_every,
                        save=lambda at: save_state(state_dir, orch, optimizer, at, run_print, snapshot=live_dir),
                        validate=validate)

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
        anchor = None
        if cfg.anchor_weight:
            with torch.no_grad(), accelerator.autocast():
                ref_out = reference(batch)
            anchor = (ref_out.cta_logits, ref_out.cpa_logits)
        stats = None
        for epoch_k in range(cfg.ppo_epochs):
            with accelerator.autocast():
                if epoch_k:
                    forward = rescore(orch, batch, rollouts)
                loss, parts, ppo_stats = token_loss(orch, batch, forward, rollouts, settings, epsilon, route_target,
                                                     anchor)
            loss.backward()
            average_gradients(trainable, accelerator)
            torch.nn.utils.clip_grad_norm_(trainable, cfg.grad_clip)
            before = pending_average(optimizer) if cfg.average_decay else None
            optimizer.step()
            if cfg.average_decay:
                update_average(optimizer, cfg.average_decay, before)
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
        if loop.log_means(done, window):
            bar.set_postfix(reward=f"{logged['reward/reward']:.3f}", loss=f"{first_parts['loss']:.3f}")
        loop.after_step(done, TrainingProgress(done, 0, 0))
    bar.close()
    seconds = time.perf_counter() - start_time
    if cfg.average_decay:  # the run's weights from here on (the final validation, the saved state, the stage)
        use_average(optimizer)
    if progress.step < cfg.steps:
        loop.log_valid(cfg.steps, loop.validate())
    loop.wait()
    if loop.is_main_process:
        # the final state comes after the final curve point, so "state saved" implies "logged"
        loop.save_final(TrainingProgress(cfg.steps, 0, 0))
        live.end()
    return {"steps": cfg.steps, "resumed_at": progress.step, "seconds": round(seconds, 1),
            "steps_per_second": round((cfg.steps - progress.step) / max(seconds, 1e-9), 3)}

"""Phase 4's training: `phase4.steps` updates of the spawning policy and the merge weights on
the cached training tables (`aegir.swarm.splits.load_training`), resumable after a kill.

Each step draws `phase4.rollouts` decisions per table of a batch (`aegir.rl.swarm_update.collect`)
under the `lambda` schedule, a clip ε going from `clip_start` to `clip_end` and, in the
budget-limited phases, a cap on sub-agents per table (`aegir.rl.rewards.budget_cap`), then takes
`phase4.ppo_epochs` AdamW steps on PARL's clipped loss (`update_loss`). Metrics are averaged
over `log_every` steps into DVCLive and the state is saved every `checkpoint_every` steps
(`aegir.train.loop`).
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch

from aegir.config import Params, Phase4Config
from aegir.data.dataset import epoch_order
from aegir.progress import progress as progress_bar
from aegir.rl.rewards import LambdaSchedule, budget_cap, clip_epsilon
from aegir.rl.swarm_update import (
    StepCounter,
    SwarmSettings,
    collect,
    specialist_targets,
    update_loss,
)
from aegir.swarm.policy import SpawnPolicy
from aegir.swarm.spawn import SwarmMerge
from aegir.swarm.splits import SplitData
from aegir.swarm.views import decision_keys
from aegir.train.loop import TrainingLoop, WindowMeans
from aegir.train.resume import (
    TrainingProgress,
    load_state,
    resumed_live,
    save_state,
)


def step_generator(seed: int, step: int) -> torch.Generator:
    """The draws of one training step: a stream per (seed, step), so a resumed run draws what an
    uninterrupted one does."""
    return torch.Generator().manual_seed(seed * 1_000_003 + step)


def train(policy: SpawnPolicy, merge: SwarmMerge, data: SplitData, names: list[str], params: Params,
          steps: StepCounter, state_dir: Path, live_dir: Path, run_print: str) -> dict:
    """`phase4.steps` updates of the policy and the merge on the cached training tables."""
    cfg: Phase4Config = params.phase4
    settings = SwarmSettings(rollouts=cfg.rollouts, ce_weight=cfg.ce_weight, kl_coef=cfg.kl_coef,
                             rewards=params.rewards, step_cost=cfg.step_cost, steps=steps,
                             route_weight=cfg.route_weight)
    # which sub-agent each training table should get: its domain's specialist (aegir.rl.swarm_update)
    targets = specialist_targets([e.domain for e in data.examples], names,
                                 {name: tuple(params.agents[name].domains or ()) for name in names})
    schedule = LambdaSchedule(params.sections["lambda"])
    module = torch.nn.ModuleDict({"policy": policy, "merge": merge})
    optimizer = torch.optim.AdamW(module.parameters(), lr=cfg.lr, betas=(0.9, 0.98), weight_decay=0.0)
    progress = load_state(state_dir, module, optimizer, run_print) or TrainingProgress(0, 0, 0)
    # Every sub-task a rollout could read, read up front in one fill: a batched read's floats
    # depend on its batch's company, so a lazily filled cache would hold other bytes after a
    # resume (it starts empty mid-run) than in an uninterrupted run.
    data.cache.fill(key for t, view in enumerate(data.views) for g in policy.options for name in names
                    for key in decision_keys(t, view, g, name, deep=True))
    if progress.step > 0:
        print(f"resuming phase4 at step {progress.step}/{cfg.steps}")
    live = resumed_live(state_dir, live_dir, progress.step)
    # one process, no validation: curve points of window means, the resume state when due
    loop = TrainingLoop(accelerator=None, live=live, total_steps=cfg.steps, log_every=cfg.log_every, eval_every=0,
                        checkpoint_every=cfg.checkpoint_every,
                        save=lambda at: save_state(state_dir, module, optimizer, at, run_print, snapshot=live_dir))
    window = WindowMeans()
    n = len(data.views)
    per_epoch = math.ceil(n / cfg.batch_size)
    options = policy.options
    start_time = time.perf_counter()
    bar = progress_bar(total=cfg.steps, initial=progress.step, desc="phase4", unit="step", mininterval=5.0)
    for step in range(progress.step, cfg.steps):
        epoch, index = divmod(step, per_epoch)
        order = epoch_order(n, cfg.seed, epoch)
        rows = order[index * cfg.batch_size:(index + 1) * cfg.batch_size].tolist()
        if len(rows) < 2:
            rows = order[:cfg.batch_size].tolist()
        frac = step / max(1, cfg.steps - 1)
        lam1, lam2 = schedule.at(frac)
        epsilon = clip_epsilon(frac, cfg.clip_start, cfg.clip_end)
        cap_index = budget_cap(step, cfg.steps, len(options) - 1, cfg.budget_period, cfg.budget_capped_share)
        max_count = None if cap_index is None else options[cap_index]
        rollouts = collect(policy, merge, data.views, rows, data.cache, names, settings, lam1, lam2,
                           step_generator(cfg.seed, step), max_count, cfg.max_subagents)
        for _ in range(cfg.ppo_epochs):
            loss, parts, stats = update_loss(policy, merge, data.views, rollouts, data.cache, names, settings,
                                             epsilon, max_count, targets)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(module.parameters(), 1.0)
            optimizer.step()
        bar.update(1)
        logged = {f"reward/{k}": float(v.mean()) for k, v in rollouts.rewards.items()}
        logged.update({f"train/{k}": v for k, v in parts.items()})
        logged.update({"spawn/mean_subagents": float(rollouts.spawned.mean()),
                       "spawn/deep_rate": float(rollouts.deep.float().mean()),
                       "spawn/consult_rate": float(rollouts.consult.float().mean()),
                       "budget/cap": float(max_count if max_count is not None else -1),
                       "lambda/lambda1": lam1, "lambda/lambda2": lam2, "ppo/epsilon": epsilon,
                       "ppo/clip_fraction": stats.clip_fraction, "ppo/approx_kl": stats.approx_kl})
        window.add(logged)
        done = step + 1
        loop.log_means(done, window)
        loop.after_step(done, TrainingProgress(done, 0, 0))
    bar.close()
    loop.save_final(TrainingProgress(cfg.steps, 0, 0))
    live.end()
    seconds = time.perf_counter() - start_time
    return {"steps": cfg.steps, "resumed_at": progress.step, "seconds": round(seconds, 1),
            "sub_agent_reads": data.cache.reads, "sub_agent_seconds": round(data.cache.seconds, 1)}

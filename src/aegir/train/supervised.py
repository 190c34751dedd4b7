"""Phase 1's supervised training of one agent: its tables, its starting model, its steps.

Loss: cross-entropy on labelled columns (CTA) and labelled (column 0, column j) pairs (CPA),
plus the H-Net ratio loss (see `AegirModel.loss`). A global batch of `batch_size` tables is
split across processes (gradients are averaged by DDP); in one CPU process each step's batch is
split into shards that run in parallel threads (`aegir.train.step.ShardedStep`). The scoring
that closes a run, and the run as a whole, are `aegir.eval.phase1`'s.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import torch
from accelerate import Accelerator

from aegir.config import SPECIALIST_TRAIN_SPLIT, TRAIN_SPLIT, AgentConfig, Phase1Config
from aegir.data.dataset import Example, collate, examples_from_arrow, length_grouped_batches
from aegir.data.prepared import read_split, split_path
from aegir.errors import AegirError, DataError
from aegir.model.checkpoint import checkpoint_fingerprint, load_checkpoint
from aegir.model.network import AegirConfig, AegirModel
from aegir.progress import progress as progress_bar
from aegir.train.loop import TrainingLoop
from aegir.train.resume import TrainingProgress
from aegir.train.schedule import learning_rate
from aegir.train.step import OneThreadWorkers, ShardedStep, process_shard, whole_batch_step


def training_examples(data_dir: Path, agent: AgentConfig) -> list[Example]:
    """What an agent trains on: the `train` split's tables of its domains, nothing else (the
    evaluation splits, `real` among them, are only ever scored); with `train_tables`, only
    among the split's first that many tables (a table is a function of its index, so a larger
    `synthetic.train_tables` leaves such an agent's data as it was); with `extra_tables`, also
    its domains' tables among the first that many of `specialist_train`, which the primary
    never reads (config.SPECIALIST_TRAIN_SPLIT)."""
    examples = []
    for split, count in ((TRAIN_SPLIT, agent.train_tables), (SPECIALIST_TRAIN_SPLIT, agent.extra_tables)):
        if split == SPECIALIST_TRAIN_SPLIT and not count:
            continue
        arrow = read_split(data_dir, split)
        if count is not None:
            if count > arrow.num_rows:
                key, setting = (("train_tables", "train_tables") if split == TRAIN_SPLIT
                                else ("extra_tables", "specialist_train_tables"))
                raise DataError(split_path(data_dir, split),
                                f"the agent's {key} asks for {count} tables; the split has "
                                f"{arrow.num_rows} (synthetic.{setting})")
            arrow = arrow.slice(0, count)
        examples += examples_from_arrow(arrow, split_path(data_dir, split), agent.domains)
    return examples


def initial_model(agent: AgentConfig, mcfg: AegirConfig, models_dir: Path) -> tuple[AegirModel, str | None]:
    """A fresh model seeded by the agent's seed, or (`agent.init`) the named agent's Phase 1
    checkpoint under `models_dir`, and that checkpoint's fingerprint (None when fresh)."""
    torch.manual_seed(agent.seed)
    if agent.init is None:
        return AegirModel(mcfg), None
    source = models_dir / agent.init
    model, _ = load_checkpoint(source)
    if asdict(model.config) != asdict(mcfg):
        raise AegirError(f"{source}: its model config differs from preset {agent.preset!r}; retrain it first")
    return model, checkpoint_fingerprint(source)


def fit(model: torch.nn.Module, optimizer: torch.optim.Optimizer, examples: list[Example], cfg: Phase1Config,
        seed: int, epochs: int, progress: TrainingProgress, loop: TrainingLoop, accelerator: Accelerator,
        workers: OneThreadWorkers | None, desc: str) -> int:
    """The steps from `progress` to `loop.total_steps` over `epochs` epochs of `examples`
    (batches by `length_grouped_batches` of `seed`), logging, validating and saving the state
    through `loop`; the steps done. `model` and `optimizer` are `accelerator.prepare`d."""
    sharded = (ShardedStep(accelerator.unwrap_model(model), workers, accelerator.autocast,
                           label_smoothing=cfg.label_smoothing) if workers else None)
    step = progress.step
    bar = progress_bar(total=loop.total_steps, initial=step, desc=desc, unit="step",
                       disable=not accelerator.is_local_main_process, mininterval=2.0)
    model.train()
    for epoch in range(progress.epoch, epochs):
        batches = length_grouped_batches(examples, cfg.batch_size, seed, epoch)
        start = progress.batch_in_epoch if epoch == progress.epoch else 0
        for batch_index in range(start, len(batches)):
            if step >= loop.total_steps:
                break
            batch = collate([examples[i] for i in process_shard(batches[batch_index], accelerator)])
            batch = batch.to(accelerator.device)
            lr = learning_rate(step, loop.total_steps, cfg.lr, cfg.warmup_steps, cfg.min_lr_ratio)
            for group in optimizer.param_groups:
                group["lr"] = lr
            result = sharded(batch) if sharded else whole_batch_step(model, batch, accelerator.backward,
                                                                     accelerator.autocast, cfg.label_smoothing)
            accelerator.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            bar.update(1)

            if loop.logs_at(step):
                # every process's figures, averaged (a collective: all processes take part)
                stats = result.chunk_stats
                logged = {"train/loss": result.loss.detach(), **{f"train/{k}": v for k, v in result.parts.items()},
                          "chunking/F": stats.F, "chunking/G": stats.G, "chunking/ratio": stats.ratio}
                means = accelerator.reduce(torch.stack([v.float() for v in logged.values()]), "mean")
                logged = dict(zip(logged, means.tolist()))
                loop.log(step, {**logged, "train/lr": lr})
                bar.set_postfix(loss=f"{logged['train/loss']:.3f}", ratio=f"{logged['chunking/ratio']:.2f}",
                                refresh=False)
            loop.after_step(step, TrainingProgress(step, epoch, batch_index + 1))
        if step >= loop.total_steps:
            break
    bar.close()
    return step

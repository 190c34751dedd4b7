"""Stage `phase1@<agent>`: supervised training of the primary model or one specialist.

    python -m aegir.stages.phase1 --agent primary
    accelerate launch --config_file workflow/accelerate/cpu.yaml -m aegir.stages.phase1 --agent primary
    accelerate launch --config_file workflow/accelerate/cpu.yaml --num_processes 2 -m aegir.stages.phase1 …

Loss: cross-entropy on labelled columns (CTA) and labelled (column 0, column j) pairs (CPA),
plus the H-Net ratio loss (see `AegirModel.loss`). Every agent in the `agents` section of
params.yaml is one `foreach` item of this stage; specialists differ from the primary in what
they know (their `domains` subset) and seed, which is what makes fusing them in Phase 3 worth
anything.

Accelerate drives the loop: one process on a CPU, or any number under `accelerate launch`.
A global batch of `batch_size` tables is split across processes (gradients are averaged by
DDP), so a run is consistent whatever the process count. In one CPU process, each step's batch
is split into shards that run in parallel threads, one per torch intra-op thread
(`aegir.train.step.ShardedStep`; the same gradient as the whole batch's up to rounding), and
evaluation predicts in the same threads. Validation predictions are gathered from every
process; the logged training loss and chunking figures are means over processes. On CPU with
one process the run is deterministic: the same params, data and thread count give
byte-identical checkpoint and metrics. Under bf16/fp16 autocast (`mixed_precision` in the
accelerate config) the recurrences still run in float32 (`aegir.model.ops.float32_op`).

Outputs (paths from the command line; dvc.yaml names them once):
  --out       model.safetensors + config.json (final weights, model config, params, vocabularies,
              data fingerprint, process count)
  --metrics   metrics.json (DVC metrics, `aegir.eval.metrics.headline`: per task the benchmark
              and real-table micro-F1, under the agent's name), scores.json (micro/macro F1
              per evaluation split with supports, specialists' in-domain F1, steps, tables),
              wall.json (DVC metrics: the run's wall minutes) and timing.json (its seconds, the
              step it resumed at) — the two outputs that are not reproducible, and the only
              ones left out of byte-identity checks — and live/ (DVCLive curves)
  --state     training state saved every `checkpoint_every` steps, with a snapshot of the
              curves logged so far; a killed run, re-run with the same params and data,
              resumes from it. It lives outside every other output (dvc.yaml: `persist: true`)
              so that neither DVC nor Snakemake deletes it before the rerun.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import gather_object

from aegir import atomic
from aegir.config import (
    EVAL_SPLITS,
    SPECIALIST_TRAIN_SPLIT,
    SPLITS,
    TRAIN_SPLIT,
    AgentConfig,
    Params,
    Phase1Config,
    PrepareConfig,
    ReadingConfig,
    build,
    load_params,
)
from aegir.data.dataset import (
    Example,
    collate,
    examples_from_arrow,
    length_grouped_batches,
    load_examples,
)
from aegir.data.prepared import fingerprint as data_fingerprint
from aegir.data.prepared import read_split, split_path
from aegir.errors import AegirError, ConfigError, DataError
from aegir.eval.grouped import ALL_LABELS, predict_tables, split_reads
from aegir.eval.joint import CONFIG_KEY as JOINT_CONFIG_KEY
from aegir.eval.joint import LabelRepeats, label_repeats, repeats_of, table_decoder
from aegir.eval.metrics import headline, wall_minutes
from aegir.eval.predict import TablePrediction, predict, score
from aegir.eval.reads import (
    READS_FILE,
    StoredReads,
    dense_distributions,
    save_eval_reads,
    stored_predictions,
)
from aegir.labels import cpa_vocab, cta_vocab, label_counts
from aegir.model.checkpoint import (
    checkpoint_fingerprint,
    load_checkpoint,
    save_checkpoint,
)
from aegir.model.network import AegirConfig, AegirModel
from aegir.progress import progress as progress_bar
from aegir.train.memory import retain_freed_memory
from aegir.train.resume import (
    TrainingProgress,
    fingerprint,
    load_state,
    resumed_live,
    save_state,
)
from aegir.train.schedule import learning_rate
from aegir.train.step import (
    OneThreadWorkers,
    ShardedStep,
    process_shard,
    whole_batch_step,
    worker_threads,
)


def model_config(params: Params, preset: str) -> AegirConfig:
    """The `AegirConfig` of a preset, label-set sizes from the fixed vocabularies."""
    if preset not in params.presets:
        raise ConfigError(f"presets.{preset}: no such preset (known: {', '.join(params.presets)})")
    fields = {**params.presets[preset], "n_cta": len(cta_vocab()), "n_cpa": len(cpa_vocab())}
    return build(AegirConfig, fields, f"presets.{preset}")


def make_optimizer(model: torch.nn.Module, cfg: Phase1Config) -> torch.optim.AdamW:
    """AdamW; matrices decay, vectors (norms, biases) and embeddings do not."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        (decay if param.dim() >= 2 and "embed" not in name else no_decay).append(param)
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.98), eps=1e-8,
                             fused=True)


def gathered_predictions(model: torch.nn.Module, examples: list[Example], batch_size: int,
                         accelerator: Accelerator, workers: OneThreadWorkers | None = None,
                         top_k: int = 1) -> list[TablePrediction]:
    """Predictions for every example, each process predicting a shard (in its worker threads,
    when it has them), gathered to all."""
    shard = list(range(accelerator.process_index, len(examples), accelerator.num_processes))
    local = predict(accelerator.unwrap_model(model), [examples[i] for i in shard], batch_size, top_k=top_k,
                    device=accelerator.device, workers=workers)
    by_index = dict(gather_object(list(zip(shard, local))))
    return [by_index[i] for i in range(len(examples))]


def evaluate(model: torch.nn.Module, examples: list[Example], batch_size: int,
             accelerator: Accelerator, workers: OneThreadWorkers | None = None) -> dict[str, dict]:
    """CTA/CPA F1 of `model` on `examples`, predictions gathered from every process."""
    return score(examples, gathered_predictions(model, examples, batch_size, accelerator, workers))


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


def initial_model(agent: AgentConfig, mcfg, models_dir: Path) -> tuple[AegirModel, str | None]:
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


def train(agent_name: str, params: Params, data_dir: Path, out_dir: Path, metrics_dir: Path,
          state_dir: Path, accelerator: Accelerator | None = None) -> dict:
    """Train one agent; write its checkpoint and metrics; return the detailed scores."""
    started = time.perf_counter()
    accelerator = accelerator or Accelerator(cpu=not torch.cuda.is_available())
    if agent_name not in params.agents:
        raise ConfigError(f"specialists.{agent_name}: no such agent (known: {', '.join(params.agents)})")
    agent: AgentConfig = params.agents[agent_name]
    cfg: Phase1Config = params.phase1
    mcfg = model_config(params, agent.preset)

    train_examples = training_examples(data_dir, agent)
    if not train_examples:
        raise AegirError(f"agent {agent_name}: no training tables for domains {list(agent.domains)}")
    valid_examples = load_examples(data_dir, "valid")
    epochs = agent.epochs or cfg.epochs
    batches_per_epoch = math.ceil(len(train_examples) / cfg.batch_size)
    total_steps = epochs * batches_per_epoch
    if cfg.max_steps:
        total_steps = min(total_steps, cfg.max_steps)

    data_print = data_fingerprint(data_dir, SPLITS)
    # one CPU process: each step's shards, and evaluation, run in parallel threads, one per
    # intra-op thread torch was given (aegir.train.step); the count changes float rounding, so
    # it is part of the run
    threads = worker_threads(accelerator)
    model, init_print = initial_model(agent, mcfg, out_dir.parent)
    run_print = fingerprint({"agent": asdict(agent), "phase1": asdict(cfg), "model": asdict(mcfg),
                             "data": data_print, "processes": accelerator.num_processes, "workers": threads,
                             **({"init": init_print} if init_print else {})})
    optimizer = make_optimizer(model, cfg)
    progress = load_state(state_dir, model, optimizer, run_print) or TrainingProgress(0, 0, 0)
    model, optimizer = accelerator.prepare(model, optimizer)

    live_dir = metrics_dir / "live"
    if progress.step > 0:
        accelerator.print(f"resuming {agent_name} at step {progress.step}/{total_steps}")
    live = resumed_live(state_dir, live_dir, progress.step) if accelerator.is_main_process else None

    workers = OneThreadWorkers(threads) if threads > 1 else None
    sharded = (ShardedStep(accelerator.unwrap_model(model), workers, accelerator.autocast,
                           label_smoothing=cfg.label_smoothing) if workers else None)
    step = progress.step
    bar = progress_bar(total=total_steps, initial=step, desc=f"phase1 {agent_name}", unit="step",
                       disable=not accelerator.is_local_main_process, mininterval=2.0)
    model.train()
    for epoch in range(progress.epoch, epochs):
        batches = length_grouped_batches(train_examples, cfg.batch_size, agent.seed, epoch)
        start = progress.batch_in_epoch if epoch == progress.epoch else 0
        for batch_index in range(start, len(batches)):
            if step >= total_steps:
                break
            batch = collate([train_examples[i] for i in process_shard(batches[batch_index], accelerator)])
            batch = batch.to(accelerator.device)
            lr = learning_rate(step, total_steps, cfg.lr, cfg.warmup_steps, cfg.min_lr_ratio)
            for group in optimizer.param_groups:
                group["lr"] = lr
            result = sharded(batch) if sharded else whole_batch_step(model, batch, accelerator.backward,
                                                                     accelerator.autocast, cfg.label_smoothing)
            accelerator.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            bar.update(1)

            if step % cfg.log_every == 0:
                # every process's figures, averaged (a collective: all processes take part)
                stats = result.chunk_stats
                logged = {"train/loss": result.loss.detach(), **{f"train/{k}": v for k, v in result.parts.items()},
                          "chunking/F": stats.F, "chunking/G": stats.G, "chunking/ratio": stats.ratio}
                means = accelerator.reduce(torch.stack([v.float() for v in logged.values()]), "mean")
                logged = dict(zip(logged, means.tolist()))
                if live is not None:
                    live.step = step
                    for name, value in logged.items():
                        live.log_metric(name, value)
                    live.log_metric("train/lr", lr)
                bar.set_postfix(loss=f"{logged['train/loss']:.3f}", ratio=f"{logged['chunking/ratio']:.2f}",
                                refresh=False)
            if cfg.eval_every and step % cfg.eval_every == 0 and step < total_steps:
                valid = evaluate(model, valid_examples, cfg.eval_batch_size, accelerator, workers)
                if live is not None:
                    live.step = step
                    for task in ("cta", "cpa"):
                        live.log_metric(f"valid/{task}_micro_f1", valid[task]["micro_f1"])
                        live.log_metric(f"valid/{task}_macro_f1", valid[task]["macro_f1"])
            if cfg.checkpoint_every and step % cfg.checkpoint_every == 0 and step < total_steps:
                accelerator.wait_for_everyone()
                if accelerator.is_main_process:
                    live.make_summary()  # the snapshot holds the curves and their summary
                    save_state(state_dir, accelerator.unwrap_model(model), optimizer,
                               TrainingProgress(step, epoch, batch_index + 1), run_print, snapshot=live_dir)
        if step >= total_steps:
            break
    bar.close()
    # the curve's last point: the same single-read evaluation as its others (as phase3 logs its
    # curves), not the scoring below, whose `reading` may change without retraining: a run
    # resumed at its end then keeps a point that a run from scratch would log alike
    final_valid = (evaluate(model, valid_examples, cfg.eval_batch_size, accelerator, workers)
                   if step > progress.step else None)

    reads: dict = {}
    repeats = label_repeats(((e.cta_labels, e.cpa_labels) for e in train_examples), label_counts())
    reference = primary_reference(agent_name, out_dir.parent / "primary", data_print, params)
    scores = final_scores(model, agent, data_dir, cfg, params.prepare, params.reading, accelerator, workers,
                          agent_name, reads, repeats, reference)
    if workers:
        workers.close()
    scores["steps"] = step
    scores["train_tables"] = len(train_examples)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        unwrapped = accelerator.unwrap_model(model)
        save_checkpoint(out_dir, unwrapped, {
            "agent": agent_name,
            "agent_config": asdict(agent),
            **({"init_fingerprint": init_print} if init_print else {}),
            "params": {"phase1": asdict(cfg), "prepare": asdict(params.prepare), "reading": asdict(params.reading)},
            "vocab": {"cta": list(cta_vocab().labels), "cpa": list(cpa_vocab().labels)},
            "data_fingerprint": data_print,
            "num_parameters": sum(p.numel() for p in unwrapped.parameters()),
            "num_processes": accelerator.num_processes,
            JOINT_CONFIG_KEY: repeats.to_json(),  # the reading's joint decoding (aegir.eval.joint)
        }, beside=lambda staging: save_eval_reads(staging / READS_FILE, reads, {
            "checkpoint": checkpoint_fingerprint(staging), "data": data_print,
            "prepare": asdict(params.prepare), "reading": asdict(params.reading)}))
        live.step = step
        if final_valid is not None:  # a run resumed at its end logged its final point already
            for task in ("cta", "cpa"):
                live.log_metric(f"valid/{task}_micro_f1", final_valid[task]["micro_f1"])
                live.log_metric(f"valid/{task}_macro_f1", final_valid[task]["macro_f1"])
        # the final state comes after the final curve point, so "state saved" implies "logged"
        live.make_summary()
        save_state(state_dir, unwrapped, optimizer, TrainingProgress(step, epochs, 0), run_print,
                   snapshot=live_dir)
        atomic.write_json(metrics_dir / "scores.json", scores)
        atomic.write_json(metrics_dir / "metrics.json",
                          {agent_name: headline({task: scores[task] for task in ("cta", "cpa")})})
        wall = round(time.perf_counter() - started, 1)  # the seconds timing.json gives, as phase3 and phase4
        atomic.write_json(metrics_dir / "timing.json", {"wall_seconds": wall, "resumed_at_step": progress.step})
        atomic.write_json(metrics_dir / "wall.json", wall_minutes(f"phase1_{agent_name}", wall))
        live.end()
    return scores


def primary_reference(agent_name: str, primary_dir: Path, data_print: str,
                      params: Params) -> tuple[StoredReads, Callable | None] | None:
    """For a specialist, the Phase 1 primary's stored reads (aegir.eval.reads) and its joint
    decoder: what it predicted on the evaluation splits, read as this stage reads them, so that
    the specialist is scored beside the primary on the same tables at no cost. None for the
    primary, or when the primary's checkpoint holds no such reads (another reading or data)."""
    if agent_name == "primary" or not (primary_dir / "config.json").is_file():
        return None
    store, _ = StoredReads.open(primary_dir, {"checkpoint": checkpoint_fingerprint(primary_dir), "data": data_print,
                                              "prepare": asdict(params.prepare), "reading": asdict(params.reading)})
    if store is None:
        return None
    config_path = primary_dir / "config.json"
    repeats = repeats_of(json.loads(config_path.read_text(encoding="utf-8")), str(config_path))
    return store, table_decoder(repeats, params.reading.joint_weights, "reading")


def final_scores(model, agent: AgentConfig, data_dir: Path, cfg: Phase1Config, prepare: PrepareConfig,
                 reading: ReadingConfig, accelerator: Accelerator, workers: OneThreadWorkers | None = None,
                 name: str = "primary", reads: dict | None = None, repeats: LabelRepeats | None = None,
                 reference: tuple[StoredReads, Callable | None] | None = None) -> dict:
    """F1 (with supports) on every evaluation split, each table read as `reading` says
    (aegir.eval.grouped; its joint decoding with `repeats`, the training tables' label repeat
    counts); specialists also on their own domains, and with `reference` (`primary_reference`)
    the primary's F1 on those same tables beside theirs (`in_domain_primary`) and the margin
    (`in_domain_margin`: theirs − the primary's, micro-F1 points). `reads`, if given, receives
    per split (its reads, their `dense_distributions`): what the checkpoint keeps for Phase 3
    (aegir.eval.reads)."""
    decode = table_decoder(repeats, reading.joint_weights, "reading")
    metrics: dict = {"cta": {}, "cpa": {}}
    labels = label_counts()
    if agent.domains:
        metrics["in_domain"] = {"cta": {}, "cpa": {}}
        if reference is not None:
            metrics["in_domain_primary"] = {"cta": {}, "cpa": {}}
            metrics["in_domain_margin"] = {"cta": {}, "cpa": {}}
    splits = progress_bar(EVAL_SPLITS, desc=f"phase1 {name} scoring", unit="split",
                          disable=not accelerator.is_local_main_process)
    for split in splits:
        splits.set_postfix_str(split, refresh=False)
        examples = load_examples(data_dir, split)
        plan = split_reads(data_dir, split, examples, reading.columns, reading.views, prepare)

        def run(read_examples: list[Example], k: int, split: str = split) -> list[TablePrediction]:
            # every label's probability, whatever k: the whole distributions are what Phase 3 reuses
            # (a top-k prediction is the head of the whole one)
            predicted = gathered_predictions(model, read_examples, cfg.eval_batch_size, accelerator, workers,
                                             ALL_LABELS)
            if reads is not None:
                reads[split] = (read_examples, dense_distributions(predicted, labels))
            return predicted

        predictions = predict_tables(run, plan, [e.table_id for e in examples], decode=decode)
        result = score(examples, predictions)
        for task in ("cta", "cpa"):
            metrics[task][split] = result[task]
        own = [i for i, e in enumerate(examples) if e.domain in agent.domains]
        if agent.domains and own:  # the same predictions, scored on the agent's own tables
            result = score([examples[i] for i in own], [predictions[i] for i in own])
            for task in ("cta", "cpa"):
                metrics["in_domain"][task][split] = result[task]
            stored = stored_predictions(reference[0], split, plan.reads) if reference is not None else None
            if stored is not None:  # the primary on the same tables, as its own stage read them
                theirs = predict_tables(lambda _reads, _k: stored, plan, [e.table_id for e in examples],
                                        decode=reference[1])
                base = score([examples[i] for i in own], [theirs[i] for i in own])
                for task in ("cta", "cpa"):
                    metrics["in_domain_primary"][task][split] = base[task]
                    metrics["in_domain_margin"][task][split] = round(
                        result[task]["micro_f1"] - base[task]["micro_f1"], 4)
    return metrics


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", default="primary", help="a key of the `agents` params section")
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--data", default="data/prepared")
    parser.add_argument("--out", help="checkpoint directory (default models/phase1/<agent>)")
    parser.add_argument("--metrics", help="metrics directory: metrics.json, scores.json, timing.json, live/ "
                                          "(default results/phase1/<agent>)")
    parser.add_argument("--state", help="resume-state directory (default state/phase1/<agent>)")
    args = parser.parse_args(argv)
    retain_freed_memory()  # a step's buffers are reused, not mapped afresh (aegir.train.memory)
    try:
        params = load_params(args.params)
        scores = train(
            args.agent, params, Path(args.data),
            Path(args.out or f"models/phase1/{args.agent}"),
            Path(args.metrics or f"results/phase1/{args.agent}"),
            Path(args.state or f"state/phase1/{args.agent}"),
        )
    except AegirError as exc:
        parser.exit(2, f"phase1: error: {exc}\n")
    print(f"phase1 {args.agent}: " + "  ".join(
        f"{task.upper()} test {scores[task]['test']['micro_f1']:.1f} / corner {scores[task]['corner_cases']['micro_f1']:.1f}"
        f" / real {scores[task]['real']['micro_f1']:.1f}"
        for task in ("cta", "cpa")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Phase 1 of one agent: train it, score it on every evaluation split, write what it leaves.

`train_agent` runs `aegir.train.supervised.fit` with validation from here (`evaluate`), then
`final_scores`, then writes the checkpoint (with the reads Phase 3 reuses, `aegir.eval.reads`),
the curves' last point, the final resume state and the metrics; `aegir.stages.phase1` is its
command. It lives in `eval` because the run ends in scoring, which `aegir.train` cannot import.

Validation predictions are gathered from every process; the logged training loss and chunking
figures are means over processes. On CPU with one process the run is deterministic: the same
params, data and thread count give byte-identical checkpoint and metrics.
"""

from __future__ import annotations

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
    REAL_DOMAINS,
    REAL_SPLIT,
    SPECIALIST_TRAIN_SPLIT,
    SPLITS,
    TRAINED_SPLITS,
    AgentConfig,
    Params,
    Phase1Config,
    PrepareConfig,
    ReadingConfig,
)
from aegir.data.dataset import Example, load_examples
from aegir.data.prepared import fingerprint as data_fingerprint
from aegir.errors import AegirError, ConfigError
from aegir.eval.grouped import ALL_LABELS, predict_tables, split_reads
from aegir.eval.joint import CONFIG_KEY as JOINT_CONFIG_KEY
from aegir.eval.joint import LabelRepeats, label_repeats, repeats_of, table_decoder
from aegir.eval.metrics import headline, wall_minutes
from aegir.eval.predict import TablePrediction, predict, score, score_by_domain
from aegir.eval.reads import (
    READS_FILE,
    StoredReads,
    dense_distributions,
    save_eval_reads,
    stored_predictions,
)
from aegir.labels import cpa_vocab, cta_vocab, label_counts
from aegir.model.checkpoint import checkpoint_fingerprint, save_checkpoint
from aegir.progress import progress as progress_bar
from aegir.train.loop import TrainingLoop
from aegir.train.resume import (
    TrainingProgress,
    fingerprint,
    load_state,
    resumed_live,
    save_state,
)
from aegir.train.seam import SeamStudent
from aegir.train.setup import make_optimizer, model_config
from aegir.train.step import OneThreadWorkers, worker_threads
from aegir.train.supervised import fit, initial_model, training_examples


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


def train_agent(agent_name: str, params: Params, data_dir: Path, out_dir: Path, metrics_dir: Path,
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

    scored_print = data_fingerprint(data_dir, SPLITS)  # the tables the stored reads are of
    data_print = {split: scored_print[split] for split in TRAINED_SPLITS}  # the tables the run reads
    # and `specialist_train` where the agent trains on it: a change there restarts the agent
    # (its run's fingerprint) instead of resuming the end of its run on the old tables
    extra_print = {"specialist_train": data_fingerprint(data_dir, (SPECIALIST_TRAIN_SPLIT,))} if agent.extra_tables else {}
    # one CPU process: each step's shards, and evaluation, run in parallel threads, one per
    # intra-op thread torch was given (aegir.train.step); the count changes float rounding, so
    # it is part of the run
    threads = worker_threads(accelerator)
    model, init_print = initial_model(agent, mcfg, out_dir.parent)
    run_print = fingerprint({"agent": asdict(agent), "phase1": asdict(cfg), "model": asdict(mcfg),
                             "data": data_print, **extra_print, "processes": accelerator.num_processes,
                             "workers": threads,
                             **({"init": init_print} if init_print else {})})
    # what the steps train: the model, or the model and the gates through which the frozen
    # model it starts from reads its states (aegir.train.seam)
    trained = SeamStudent(model, initial_model(agent, mcfg, out_dir.parent)[0], agent.seam_weight) \
        if agent.seam_weight else model
    optimizer = make_optimizer(trained, cfg)
    progress = load_state(state_dir, trained, optimizer, run_print) or TrainingProgress(0, 0, 0)
    trained, optimizer = accelerator.prepare(trained, optimizer)
    model = accelerator.unwrap_model(trained).model if agent.seam_weight else trained

    live_dir = metrics_dir / "live"
    if progress.step > 0:
        accelerator.print(f"resuming {agent_name} at step {progress.step}/{total_steps}")
    live = resumed_live(state_dir, live_dir, progress.step) if accelerator.is_main_process else None

    workers = OneThreadWorkers(threads) if threads > 1 else None
    loop = TrainingLoop(
        accelerator, live, total_steps, cfg.log_every, cfg.eval_every, cfg.checkpoint_every,
        save=lambda at: save_state(state_dir, accelerator.unwrap_model(trained), optimizer, at, run_print,
                                   snapshot=live_dir),
        validate=lambda: evaluate(model, valid_examples, cfg.eval_batch_size, accelerator, workers))
    step = fit(trained, optimizer, train_examples, cfg, agent.seed, epochs, progress, loop, accelerator, workers,
               f"phase1 {agent_name}")
    # the curve's last point: the same single-read evaluation as its others (as phase3 logs its
    # curves), not the scoring below, whose `reading` may change without retraining: a run
    # resumed at its end then keeps a point that a run from scratch would log alike
    final_valid = loop.validate() if step > progress.step else None

    reads: dict = {}
    repeats = label_repeats(((e.cta_labels, e.cpa_labels) for e in train_examples), label_counts())
    reference = primary_reference(agent_name, out_dir.parent / "primary", scored_print, params)
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
            **({"seam_gates": accelerator.unwrap_model(trained).gates_json()} if agent.seam_weight else {}),
        }, beside=lambda staging: save_eval_reads(staging / READS_FILE, reads, {
            "checkpoint": checkpoint_fingerprint(staging), "data": scored_print,
            "prepare": asdict(params.prepare), "reading": asdict(params.reading)}))
        live.step = step
        if final_valid is not None:  # a run resumed at its end logged its final point already
            loop.log_valid(step, final_valid)
        # the final state comes after the final curve point, so "state saved" implies "logged"
        loop.save_final(TrainingProgress(step, epochs, 0))
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
        if split == REAL_SPLIT:  # beside the baseline's (results/baselines/scores.json), domain by domain
            metrics[REAL_DOMAINS] = score_by_domain(examples, predictions)
        own = [i for i, e in enumerate(examples) if e.domain in agent.domains]
        if agent.domains and own:  # the same predictions, scored on the agent's own tables
            result = score([examples[i] for i in own], [predictions[i] for i in own])
            for task in ("cta", "cpa"):
                metrics["in_domain"][task][split] = result[task]
            stored = stored_predictions(reference[0], split, plan.reads) if reference is not None else None
            if stored is not None:  # the primary on the same tables, as its own stage read them
                theirs = predict_tables(lambda _reads, _k: stored, plan,  # noqa: B023 (called here)
                                        [e.table_id for e in examples], decode=reference[1])
                base = score([examples[i] for i in own], [theirs[i] for i in own])
                for task in ("cta", "cpa"):
                    metrics["in_domain_primary"][task][split] = base[task]
                    metrics["in_domain_margin"][task][split] = round(
                        result[task]["micro_f1"] - base[task]["micro_f1"], 4)
    return metrics

"""Stage `phase4`: the swarm — sub-agents spawned per table over the frozen Phase 3 orchestrator.

    python -m aegir.stages.phase4 --params params.yaml --data data/prepared \\
        --phase3 models/phase3 --models models/phase1 --out models/phase4 \\
        --metrics results/phase4 --state state/phase4

1. The Phase 3 orchestrator (frozen) reads every table exactly as `phase3` scored it (column
   groups, row views; on the evaluation splits the distributions Phase 3 stored beside its
   checkpoint, `aegir.eval.reads`), and once more as one stream for its pooled encoder output
   and the specialists it activated (`TableView`). Every policy's labels go through the joint
   decoding Phase 3's checkpoint records, so never spawning *is* Phase 3's fused orchestrator
   (`aegir.swarm.model`: the swarm starts where Phase 3 ends).
2. A spawning policy (`aegir.swarm.policy`) decides per table how many sub-agents (0 …
   `max_subagents`), which frozen Phase 1 checkpoint they instantiate, and whether to run deep
   search; the sub-agents' outputs merge per column (`aegir.swarm.spawn`). Sub-agents are
   frozen and sub-tasks deterministic, so their outputs are cached per (table, columns,
   specialist) and only the policy and the merge weights train: PARL's token-level clipped
   loss with the `lambda` schedule and `rewards` (`aegir.rl.swarm_update`), budget-limited phases
   (a cap on sub-agents per table, growing) alternating with uncapped ones, on
   `phase4.train_tables` tables of `policy_train` (ordinary tables that no model of Phases 1–3
   has read: on them the orchestrator is as sure and as right as on the tables it will be
   scored on) and `phase4.wide_train_tables` of `wide_train` (many-column tables, so that
   the policy meets the tables where spawning pays); each
   critical step a decision adds costs `phase4.step_cost` of reward.
3. Scored on every evaluation split: the learned policy (at `max_subagents`) and two fixed
   controls, never spawn (serial collapse: the Phase 3 orchestrator as `phase3` scores it) and
   always spawn the maximum (spurious parallelism); and the scaling curve, for each budget n of
   `scaling_n` on `test`, `corner_cases`, `wide`: F1, mean spawned, critical and total steps of
   the learned policy capped at n and the two controls, and wall-clock per table of n
   sub-agents batched (`eval_batch_size` sub-tasks per call) vs one after another. Each policy's
   micro-F1 per critical step (the latency it costs) is reported per split and on the scaling
   splits pooled, where narrow and wide tables come together and an adaptive policy can beat
   both fixed ones.

Outputs:
  --out       policy + merge (`model.safetensors`) and config.json naming the Phase 3
              orchestrator and the sub-agent checkpoints by fingerprint; eval_reads.safetensors:
              the learned policy's merged distributions on every evaluation table (one read per
              table, `aegir.eval.reads`, before the joint decoding), what `calibrate` reads
  --metrics   metrics.json (DVC metrics, `aegir.eval.metrics.headline`: per task the benchmark
              and real-table micro-F1 of the learned policy, `swarm`), scores.json (micro/macro
              F1 per split of `learned`, `never`, `always` with supports, spawning and
              deep-search statistics, critical steps, F1 per critical step; `mix`: the
              scaling splits pooled; `deep_search`: never spawning against deep search alone
              on the `X/name`/`X/description` columns and the rest, per split), scaling.json (DVC plots: one row per n, the pooled F1
              per critical step included), wall.json (DVC metrics: wall minutes) and timing.json (wall clock, sub-agent
              reads, batched vs sequential seconds) — the outputs a rerun does not reproduce,
              live/ (DVCLive curves: rewards, spawned sub-agents, losses)
  --state     the training state (resume after a kill)
"""

from __future__ import annotations

import argparse
import math
import time
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path

import torch

from aegir import atomic
from aegir.config import (
    EVAL_SPLITS,
    POLICY_TRAIN_SPLIT,
    SPLITS,
    SWARM_TRAIN_SPLIT,
    Params,
    Phase4Config,
    load_params,
)
from aegir.data.dataset import Example, epoch_order, examples_from_arrow
from aegir.data.prepared import fingerprint as data_fingerprint
from aegir.data.prepared import read_split, split_path, tables_from_arrow
from aegir.errors import AegirError, check_config
from aegir.eval.grouped import top
from aegir.eval.metrics import headline, wall_minutes
from aegir.eval.predict import TablePrediction, score
from aegir.eval.reads import (
    READS_FILE,
    StoredReads,
    save_eval_reads,
    stored_predictions,
)
from aegir.labels import cpa_vocab, cta_vocab
from aegir.model.checkpoint import checkpoint_fingerprint
from aegir.orchestrator.checkpoint import load_orchestrator
from aegir.orchestrator.model import SwarmOrchestrator
from aegir.orchestrator.specialist import load_agents
from aegir.progress import progress as progress_bar
from aegir.rl.ppo import deterministic_kernels
from aegir.rl.rewards import LambdaSchedule, budget_cap, clip_epsilon
from aegir.rl.swarm_update import (
    StepCounter,
    SwarmSettings,
    collect,
    specialist_targets,
    update_loss,
)
from aegir.swarm.model import (
    Phase3Reading,
    Swarm,
    phase3_reading,
    phase3_readings,
    save_swarm,
    table_views,
)
from aegir.swarm.policy import SpawnPolicy, spawn_options
from aegir.swarm.spawn import (
    SubagentCache,
    SwarmMerge,
    family_of_labels,
    label_steps,
    read_subtasks,
    read_subtasks_one_at_a_time,
    subtask_examples,
    wide_subtasks,
)
from aegir.swarm.views import TableView, decision_keys
from aegir.train.memory import retain_freed_memory
from aegir.train.resume import (
    TrainingProgress,
    fingerprint,
    load_state,
    resumed_live,
    save_state,
)

SCALING_SPLITS = ("test", "corner_cases", "wide")  # where the scaling curve is measured
POLICIES = ("learned", "never", "always")


# ----------------------------------------------------------------------------- table views


class SplitData:
    """One split's examples, raw tables, views and sub-agent cache."""

    def __init__(self, name: str, examples: list[Example], tables: list, views: list[TableView], cache: SubagentCache):
        self.name, self.examples, self.tables, self.views, self.cache = name, examples, tables, views, cache


def load_split(name: str, data_dir: Path, orch: SwarmOrchestrator, subagents: dict, params: Params,
               family: torch.Tensor, reading: Phase3Reading, store: StoredReads | None,
               limit: int = 0) -> tuple[SplitData, bool]:
    """The first `limit` tables of split `name` (0: all), its Parquet file read once, the
    orchestrator's reading of each as `phase3` scored it (`store`: the distributions Phase 3
    stored, taken when they are of these reads); and whether they were."""
    cfg: Phase4Config = params.phase4
    arrow = read_split(data_dir, name)
    if limit:
        arrow = arrow.slice(0, limit)
    examples = examples_from_arrow(arrow, split_path(data_dir, name))
    tables = tables_from_arrow(arrow)
    plan = reading.plan(tables, examples, params.prepare, split_path(data_dir, name))
    stored = stored_predictions(store, name, plan.reads) if store is not None else None
    readings = phase3_readings(orch, plan, [e.table_id for e in examples], cfg.eval_batch_size, stored)
    views = table_views(orch, examples, cfg.eval_batch_size, family, readings)
    cache = SubagentCache(tables, subagents, params.prepare, split_path(data_dir, name), cfg.eval_batch_size)
    return SplitData(name, examples, tables, views, cache), stored is not None


def load_training(data_dir: Path, orch: SwarmOrchestrator, subagents: dict, params: Params,
                  family: torch.Tensor, reading: Phase3Reading) -> SplitData:
    """Phase 4's training tables: the first `train_tables` of `policy_train`, then the first
    `wide_train_tables` of `wide_train`, as one list with one sub-agent cache. Neither split is
    read by any model of Phases 1–3 (`aegir.config`)."""
    cfg: Phase4Config = params.phase4
    train = read_split(data_dir, POLICY_TRAIN_SPLIT)
    count = len(train)
    check_config(cfg.train_tables <= count, "phase4.train_tables",
                 f"asks for {cfg.train_tables} tables; {split_path(data_dir, POLICY_TRAIN_SPLIT)} has {count} "
                 f"(synthetic.policy_train_tables)")
    train = train.slice(0, cfg.train_tables)
    examples = examples_from_arrow(train, split_path(data_dir, POLICY_TRAIN_SPLIT))
    tables = tables_from_arrow(train)
    if cfg.wide_train_tables:
        wide = read_split(data_dir, SWARM_TRAIN_SPLIT)
        check_config(cfg.wide_train_tables <= len(wide), "phase4.wide_train_tables",
                     f"asks for {cfg.wide_train_tables} tables; {split_path(data_dir, SWARM_TRAIN_SPLIT)} has "
                     f"{len(wide)} (synthetic.wide_train_tables)")
        wide = wide.slice(0, cfg.wide_train_tables)
        examples += examples_from_arrow(wide, split_path(data_dir, SWARM_TRAIN_SPLIT))
        tables += tables_from_arrow(wide)
    plan = reading.plan(tables, examples, params.prepare, data_dir)
    readings = phase3_readings(orch, plan, [e.table_id for e in examples], cfg.eval_batch_size)
    views = table_views(orch, examples, cfg.eval_batch_size, family, readings)
    cache = SubagentCache(tables, subagents, params.prepare, data_dir, cfg.eval_batch_size)
    return SplitData(POLICY_TRAIN_SPLIT, examples, tables, views, cache)


# ----------------------------------------------------------------------------- training


def step_generator(seed: int, step: int) -> torch.Generator:
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
    n = len(data.views)
    per_epoch = math.ceil(n / cfg.batch_size)
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
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
                       "budget/cap": float(max_count if max_count is not None else -1),
                       "lambda/lambda1": lam1, "lambda/lambda2": lam2, "ppo/epsilon": epsilon,
                       "ppo/clip_fraction": stats.clip_fraction, "ppo/approx_kl": stats.approx_kl})
        for key, value in logged.items():
            sums[key] += value
            counts[key] += 1
        done = step + 1
        if done % cfg.log_every == 0:
            live.step = done
            for key in sums:
                live.log_metric(key, sums[key] / counts[key])
            sums.clear()
            counts.clear()
        if cfg.checkpoint_every and done % cfg.checkpoint_every == 0 and done < cfg.steps:
            live.make_summary()
            save_state(state_dir, module, optimizer, TrainingProgress(done, 0, 0), run_print, snapshot=live_dir)
    bar.close()
    live.make_summary()
    save_state(state_dir, module, optimizer, TrainingProgress(cfg.steps, 0, 0), run_print, snapshot=live_dir)
    live.end()
    seconds = time.perf_counter() - start_time
    return {"steps": cfg.steps, "resumed_at": progress.step, "seconds": round(seconds, 1),
            "sub_agent_reads": data.cache.reads, "sub_agent_seconds": round(data.cache.seconds, 1)}


# ----------------------------------------------------------------------------- evaluation


def decisions(swarm: Swarm, data: SplitData, kind: str, n: int) -> list[tuple[int, int, bool]]:
    """(sub-agents, specialist, deep) per table of `kind` at budget n: the learned policy capped
    at n, never spawning, or always spawning n (specialist 0, no deep search)."""
    if kind == "never":
        return [(0, 0, False)] * len(data.views)
    if kind == "always":
        return [(n, 0, False)] * len(data.views)
    return swarm.decide(data.views, n)


def per_critical_step(result: dict, critical_steps: float) -> dict:
    """Micro-F1 per critical step of each task (`evaluate`'s result; the issue's measure of a
    swarm: quality for the latency it costs)."""
    return {task: round(result[task]["micro_f1"] / max(critical_steps, 1e-9), 4) for task in ("cta", "cpa")}


def pooled(examples: list[Example], predictions: list[TablePrediction], critical: list[int]) -> dict:
    """The scaling splits scored as one pool (narrow and wide tables together): micro-F1, mean
    critical steps and F1 per critical step of one policy."""
    result = score(examples, predictions)
    mean_critical = sum(critical) / max(1, len(critical))
    return {"splits": list(SCALING_SPLITS), "tables": len(examples),
            "cta_micro_f1": round(result["cta"]["micro_f1"], 4), "cpa_micro_f1": round(result["cpa"]["micro_f1"], 4),
            "mean_critical_steps": round(mean_critical, 4),
            "f1_per_critical_step": per_critical_step(result, mean_critical)}


def family_accuracy(examples: list[Example], predictions: list[TablePrediction], family: torch.Tensor) -> dict:
    """CTA accuracy (= micro-F1: every column gets a label) in percent on the columns whose
    gold label has a family (`X/name`, `X/description`: what deep search is for) and on the
    other labelled columns, with their counts."""
    hits = {True: 0, False: 0}
    counts = {True: 0, False: 0}
    for example, prediction in zip(examples, predictions):
        for gold, predicted in zip(example.cta_labels.tolist(), prediction.cta_ids[:, 0].tolist()):
            if gold < 0:
                continue
            in_family = int(family[gold]) >= 0
            counts[in_family] += 1
            hits[in_family] += int(gold == predicted)
    return {"family_columns": counts[True], "other_columns": counts[False],
            "family_cta": round(100.0 * hits[True] / max(1, counts[True]), 4),
            "other_cta": round(100.0 * hits[False] / max(1, counts[False]), 4)}


def deep_search_effect(swarm: Swarm, data: SplitData, family: torch.Tensor,
                       never: tuple[list[TablePrediction], list[int]]) -> dict:
    """Where deep search helps: never spawning (its predictions and critical steps, `never`, as
    the stage already scored them) against deep search alone (no wide sub-agents; the first
    specialist re-reads every column whose top label has a family), CTA on the family-label
    columns and on the rest, and the critical steps each costs."""
    predictions: list[TablePrediction] = []
    critical: list[int] = []
    evaluate(swarm, data, [(0, 0, True)] * len(data.views), predictions, critical)
    return {kind: {**family_accuracy(data.examples, p, family), "mean_critical_steps": round(sum(c) / max(1, len(c)), 4)}
            for kind, (p, c) in (("never", never), ("deep", (predictions, critical)))}


def evaluate(swarm: Swarm, data: SplitData, chosen: list[tuple[int, int, bool]],
             predictions: list[TablePrediction] | None = None, critical: list[int] | None = None,
             spawned: list[int] | None = None, distributions: dict[str, torch.Tensor] | None = None) -> dict:
    """F1 (with supports) of one variant's decisions on a split, and its spawning statistics;
    `predictions`, `critical` and `spawned`, when given, receive each table's labels, critical
    steps and sub-agents (wide and deep); `distributions` the merged label distributions of every
    column before the joint decoding (`aegir.eval.reads` layout, one read per table)."""
    results = swarm.run(data.views, chosen, data.cache)
    if distributions is not None:
        for task in ("cta", "cpa"):
            distributions[task] = torch.cat([getattr(r, f"{task}_logp").exp() for r in results]).float()
        distributions["columns"] = torch.tensor([r.cta_logp.shape[0] for r in results], dtype=torch.int64)
    predictions = [] if predictions is None else predictions
    first = len(predictions)
    for r in results:
        predictions.append(top(r.prediction, 1))  # jointly decoded, as phase3 scores
    if critical is not None:
        critical += [r.critical_steps for r in results]
    if spawned is not None:
        spawned += [r.subagents + len(r.deep_columns) for r in results]
    result = score(data.examples, predictions[first:])
    m = max(1, len(results))
    mean_critical = sum(r.critical_steps for r in results) / m
    result["spawn"] = {
        "mean_subagents": round(sum(r.subagents + len(r.deep_columns) for r in results) / m, 4),
        # the share of tables with at least one sub-agent (wide or deep): is the policy input-dependent?
        "spawn_share": round(sum(1 for r in results if r.subagents or r.deep_columns) / m, 4),
        "mean_wide_subagents": round(sum(r.subagents for r in results) / m, 4),
        "mean_critical_steps": round(mean_critical, 4),
        "mean_total_steps": round(sum(r.total_steps for r in results) / m, 4),
        "deep_rate": round(sum(r.deep for r in results) / m, 4),
        "f1_per_critical_step": per_critical_step(result, mean_critical),
        "specialist_share": {name: round(sum(1 for r in results if r.subagents and r.specialist == name) / m, 4)
                             for name in swarm.names}}
    return result


def time_subagents(model, data: SplitData, n: int, tables: int, batch_size: int) -> tuple[float, float]:
    """Seconds per table of the first `tables` tables' n-sub-agent wide search: batched (the
    stage's own path, `batch_size` sub-tasks per call) and one sub-task after another."""
    keys = [(t, cols) for t in range(min(tables, len(data.tables)))
            for cols in wide_subtasks(data.views[t].num_columns, n)]
    examples = subtask_examples(data.tables, keys, data.cache.prepare, data.cache.where)
    count = max(1, min(tables, len(data.tables)))
    start = time.perf_counter()
    read_subtasks(model, examples, batch_size=batch_size)
    batched = time.perf_counter() - start
    start = time.perf_counter()
    read_subtasks_one_at_a_time(model, examples)
    sequential = time.perf_counter() - start
    return batched / count, sequential / count


# ----------------------------------------------------------------------------- main


def run(params: Params, data_dir: Path, phase3_dir: Path, models_dir: Path, out_dir: Path, metrics_dir: Path,
        state_dir: Path) -> dict:
    started = time.perf_counter()
    cfg: Phase4Config = params.phase4
    unknown = [name for name in cfg.specialists if name not in params.agents]
    check_config(not unknown, "phase4.specialists", f"unknown agent(s) {unknown}; known: {', '.join(params.agents)}")
    torch.manual_seed(cfg.seed)
    orch, phase3_config = load_orchestrator(phase3_dir)
    orch.requires_grad_(False)
    # the orchestrator reads every table as `phase3` scored it, from the distributions it stored
    reading = phase3_reading(phase3_config, phase3_dir)
    recorded = phase3_config.get("params", {})
    store, why_not = StoredReads.open(phase3_dir, {
        "checkpoint": checkpoint_fingerprint(phase3_dir), "data": data_fingerprint(data_dir, SPLITS),
        "prepare": recorded.get("prepare"), "reading": recorded.get("reading")})
    names = list(cfg.specialists)
    subagents = load_agents(models_dir, names)
    for model in subagents.values():
        model.eval().requires_grad_(False)
    family, family_names = family_of_labels(cta_vocab())
    options = spawn_options(cfg.max_subagents)
    policy = SpawnPolicy(orch.primary.config.d_model, options, len(names))
    merge = SwarmMerge(len(names), family)

    train_data = load_training(data_dir, orch, subagents, params, family, reading)
    trained_on = (POLICY_TRAIN_SPLIT, SWARM_TRAIN_SPLIT) if cfg.wide_train_tables else (POLICY_TRAIN_SPLIT,)
    base = {"phase4": asdict(cfg), "lambda": asdict(params.sections["lambda"]), "rewards": asdict(params.rewards),
            "prepare": asdict(params.prepare), "data": data_fingerprint(data_dir, trained_on),
            "phase3": checkpoint_fingerprint(phase3_dir),
            # the views the policy and merge train on: the orchestrator's reading as `phase3` scores it
            "phase3_reading": {"columns": reading.columns, "views": reading.views,
                               "joint": recorded.get("reading"), "grouped_views": True},
            "subagents": {name: checkpoint_fingerprint(models_dir / name) for name in names}}
    with deterministic_kernels():  # aegir.rl.ppo: run-to-run identical weights on CPU
        steps = StepCounter(orch.primary.config, tuple(label_steps(subagents[name].config) for name in names))
        summary = train(policy, merge, train_data, names, params, steps, state_dir, metrics_dir / "live",
                        fingerprint(base))
    policy.eval()
    swarm = Swarm(orch, subagents, policy, merge, reading)

    scores: dict = {kind: {"cta": {}, "cpa": {}, "spawn": {}} for kind in POLICIES}
    scaling_rows = []
    timing_rows: dict[str, dict] = {}
    split_data = {}
    predicted: dict[tuple[str, str], tuple[list[TablePrediction], list[int]]] = {}  # (kind, split) → labels, steps
    by_domain: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    deep_effect: dict[str, dict] = {}
    from_store: dict[str, bool] = {}
    learned_reads: dict[str, tuple[list[Example], dict[str, torch.Tensor]]] = {}
    for split in progress_bar(EVAL_SPLITS, desc="phase4 evaluate", unit="split"):
        data, from_store[split] = load_split(split, data_dir, orch, subagents, params, family, reading, store,
                                             cfg.eval_tables)
        split_data[split] = data
        for kind in POLICIES:
            predictions: list[TablePrediction] = []
            critical: list[int] = []
            spawned: list[int] = []
            predicted[(kind, split)] = (predictions, critical)
            dense: dict[str, torch.Tensor] | None = {} if kind == "learned" else None
            result = evaluate(swarm, data, decisions(swarm, data, kind, cfg.max_subagents), predictions, critical,
                              spawned, dense)
            if dense is not None:
                learned_reads[split] = (data.examples, dense)
            if kind == "learned":
                for example, count in zip(data.examples, spawned):
                    by_domain[example.domain or "unknown"][split].append(count)
            for key in ("cta", "cpa", "spawn"):
                scores[kind][key][split] = result[key]
        deep_effect[split] = deep_search_effect(swarm, data, family, predicted[("never", split)])
    mix_examples = [e for split in SCALING_SPLITS for e in split_data[split].examples]
    for kind in POLICIES:  # the scaling splits as one pool: narrow and wide tables together
        scores[kind]["mix"] = pooled(mix_examples, [p for split in SCALING_SPLITS for p in predicted[(kind, split)][0]],
                                     [c for split in SCALING_SPLITS for c in predicted[(kind, split)][1]])
    for n in cfg.scaling_n:
        row: dict = {"n": n}
        at_n: dict[str, tuple[list[TablePrediction], list[int]]] = {kind: ([], []) for kind in POLICIES}
        for split in SCALING_SPLITS:
            data = split_data[split]
            for kind in POLICIES:
                result = evaluate(swarm, data, decisions(swarm, data, kind, n), *at_n[kind])
                for task in ("cta", "cpa"):
                    row[f"{kind}_{split}_{task}_micro_f1"] = round(result[task]["micro_f1"], 4)
                row[f"{kind}_{split}_mean_subagents"] = result["spawn"]["mean_subagents"]
                row[f"{kind}_{split}_critical_steps"] = result["spawn"]["mean_critical_steps"]
                row[f"{kind}_{split}_total_steps"] = result["spawn"]["mean_total_steps"]
        for kind in POLICIES:
            mix = pooled(mix_examples, *at_n[kind])
            for task in ("cta", "cpa"):
                row[f"{kind}_mix_{task}_f1_per_critical_step"] = mix["f1_per_critical_step"][task]
        scaling_rows.append(row)
        if n > 0:
            batched, sequential = time_subagents(subagents[names[0]], split_data["wide"], n, cfg.timing_tables,
                                                 cfg.eval_batch_size)
            timing_rows[f"n{n}"] = {"batched_seconds_per_table": round(batched, 5),
                                    "sequential_seconds_per_table": round(sequential, 5),
                                    "speedup": round(sequential / max(batched, 1e-9), 3)}

    # the learned policy's spawning per table domain and split (the report draws it as a heatmap)
    scores["spawning"] = {"subagents_by_domain": {
        domain: {split: round(sum(v) / len(v), 4) for split, v in by_domain[domain].items()}
        for domain in sorted(by_domain)}}
    scores["deep_search"] = deep_effect
    # how the orchestrator read the tables: as `phase3` scored them, from its stored distributions
    # where they were of the same reads (else computed again: the same up to float rounding)
    scores["phase3_reading"] = {"columns": reading.columns, "views": reading.views,
                                "joint_decoding": reading.decode is not None,
                                "stored": {split: from_store[split] for split in sorted(from_store)},
                                "store": "found" if store is not None else why_not}
    scores["options"] = list(options)
    scores["families"] = family_names
    scores["merge"] = {"primary": merge.primary.detach().tolist(), "wide": merge.wide.detach().tolist(),
                       "deep": merge.deep.detach().tolist(), "margin": float(merge.margin.detach())}
    timing = {"wall_seconds": round(time.perf_counter() - started, 1), "training": summary,
              "subagents_batched_vs_sequential": timing_rows,
              "sub_agent_reads": sum(d.cache.reads for d in split_data.values()) + train_data.cache.reads,
              "torch_threads": torch.get_num_threads()}
    # beside the weights: the learned policy's merged distributions on every evaluation table, as
    # scored above (one read per table, aegir.eval.reads), so that `calibrate` does not run the swarm
    save_swarm(out_dir, swarm, phase3_dir, {name: models_dir / name for name in names},
               {"params": {"phase4": asdict(cfg), "prepare": asdict(params.prepare)}, "families": family_names,
                "vocab": {"cta": list(cta_vocab().labels), "cpa": list(cpa_vocab().labels)}},
               beside=lambda staging: save_eval_reads(staging / READS_FILE, learned_reads, {
                   "checkpoint": checkpoint_fingerprint(staging), "data": data_fingerprint(data_dir, SPLITS),
                   "prepare": asdict(params.prepare), "reading": recorded.get("reading"),
                   "policy": "learned", "max_subagents": cfg.max_subagents}))
    atomic.write_json(metrics_dir / "scores.json", scores)
    atomic.write_json(metrics_dir / "scaling.json", scaling_rows)
    atomic.write_json(metrics_dir / "timing.json", timing)
    atomic.write_json(metrics_dir / "wall.json", wall_minutes("phase4", timing["wall_seconds"]))
    atomic.write_json(metrics_dir / "metrics.json", headline_metrics(scores))
    return scores


def headline_metrics(scores: dict) -> dict:
    """The DVC metrics (`aegir.eval.metrics.headline`): the swarm's (the learned policy's)
    benchmark and real-table micro-F1 per task. F1 per split of the learned policy and both
    controls, spawning and steps stay in scores.json and scaling.json."""
    return {"swarm": headline({task: scores["learned"][task] for task in ("cta", "cpa")})}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--data", default="data/prepared")
    parser.add_argument("--phase3", default="models/phase3", help="the Phase 3 orchestrator (frozen)")
    parser.add_argument("--models", default="models/phase1", help="Phase 1 checkpoints: the sub-agents")
    parser.add_argument("--out", default="models/phase4", help="policy + merge checkpoint")
    parser.add_argument("--metrics", default="results/phase4", help="metrics.json, scores.json, scaling.json, live/")
    parser.add_argument("--state", default="state/phase4", help="resume state")
    args = parser.parse_args(argv)
    retain_freed_memory()  # a step's buffers are reused, not mapped afresh (aegir.train.memory)
    try:
        params = load_params(args.params)
        scores = run(params, Path(args.data), Path(args.phase3), Path(args.models), Path(args.out),
                     Path(args.metrics), Path(args.state))
    except AegirError as exc:
        parser.exit(2, f"phase4: error: {exc}\n")
    print("phase4: CTA micro-F1 on wide  " + "  ".join(
        f"{kind} {scores[kind]['cta']['wide']['micro_f1']:.1f}" for kind in POLICIES if "wide" in scores[kind]["cta"]))
    print("phase4: CTA micro-F1 per critical step on " + "+".join(SCALING_SPLITS) + "  " + "  ".join(
        f"{kind} {scores[kind]['mix']['f1_per_critical_step']['cta']:.2f}" for kind in POLICIES))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

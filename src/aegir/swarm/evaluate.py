"""Scoring the swarm (Phase 4): the learned policy and two fixed controls on every evaluation
split, and the scaling curve over sub-agent budgets.

The policies (`POLICIES`): the learned one (capped at a budget n), never spawning (serial
collapse: the Phase 3 orchestrator as `phase3` scores it) and always spawning n with every second
opinion (spurious parallelism). Each is scored by micro/macro F1 with its spawning statistics and
its micro-F1 per critical step (the latency it costs), per split and on the scaling splits (`SCALING_SPLITS`)
pooled, where narrow and wide tables come together and an adaptive policy can beat both fixed
ones. Evaluation runs the sub-agents through each split's cache in a fixed order: a batched
read's floats depend on its batch's company, so the order is part of the result.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import torch

from aegir.config import EVAL_SPLITS, REAL_DOMAINS, REAL_SPLIT
from aegir.data.dataset import Example
from aegir.eval.grouped import top
from aegir.eval.predict import TablePrediction, score, score_by_domain
from aegir.model.network import AegirModel
from aegir.progress import progress as progress_bar
from aegir.swarm.model import Decision, Swarm, TableResult
from aegir.swarm.spawn import (
    read_subtasks,
    read_subtasks_one_at_a_time,
    subtask_examples,
    wide_subtasks,
)
from aegir.swarm.splits import SplitData

SCALING_SPLITS = ("test", "corner_cases", "wide")  # where the scaling curve is measured
POLICIES = ("learned", "never", "always")


def decisions(swarm: Swarm, data: SplitData, kind: str, n: int) -> list[Decision]:
    """(sub-agents, specialist, deep, consult) per table of `kind` at budget n: the learned
    policy capped at n, never spawning, or always spawning: n wide sub-agents of specialist 0
    where wide search may run, and every second opinion (no deep search)."""
    if kind == "never":
        return [(0, 0, False, False)] * len(data.views)
    if kind == "always":
        return [(n, 0, False, True)] * len(data.views)
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
    evaluate(swarm, data, [(0, 0, True, False)] * len(data.views), predictions, critical)
    return {kind: {**family_accuracy(data.examples, p, family), "mean_critical_steps": round(sum(c) / max(1, len(c)), 4)}
            for kind, (p, c) in (("never", never), ("deep", (predictions, critical)))}


def merged_distributions(results: list[TableResult]) -> dict[str, torch.Tensor]:
    """What Phase 4 stores of its tables (`aegir.eval.reads` layout, one read per table): the
    merged label distributions of every column before the joint decoding ("cta", "cpa"), the
    columns per table, `spawned` per table (1 where a sub-agent ran: only there does the
    swarm decode the merged distributions; elsewhere it keeps the orchestrator's reading) and
    `deep` (1 where deep search ran)."""
    out = {task: torch.cat([getattr(r, f"{task}_logp").exp() for r in results]).float() for task in ("cta", "cpa")}
    out["columns"] = torch.tensor([r.cta_logp.shape[0] for r in results], dtype=torch.int64)
    out["spawned"] = torch.tensor([r.spawned for r in results], dtype=torch.int64)
    out["deep"] = torch.tensor([r.deep for r in results], dtype=torch.int64)
    return out


def evaluate(swarm: Swarm, data: SplitData, chosen: list[Decision],
             predictions: list[TablePrediction] | None = None, critical: list[int] | None = None,
             spawned: list[int] | None = None, distributions: dict[str, torch.Tensor] | None = None) -> dict:
    """F1 (with supports) of one variant's decisions on a split, and its spawning statistics;
    `predictions`, `critical` and `spawned`, when given, receive each table's labels, critical
    steps and sub-agents (wide and deep); `distributions` the merged label distributions of every
    column before the joint decoding (`aegir.eval.reads` layout, one read per table)."""
    results = swarm.run(data.views, chosen, data.cache)
    if distributions is not None:
        distributions.update(merged_distributions(results))
    predictions = [] if predictions is None else predictions
    first = len(predictions)
    for r in results:
        predictions.append(top(r.prediction, 1))  # jointly decoded, as phase3 scores
    if critical is not None:
        critical += [r.critical_steps for r in results]
    if spawned is not None:
        spawned += [r.count for r in results]
    result = score(data.examples, predictions[first:])
    m = max(1, len(results))
    mean_critical = sum(r.critical_steps for r in results) / m
    result["spawn"] = {
        "mean_subagents": round(sum(r.count for r in results) / m, 4),
        # the share of tables with at least one sub-agent (any kind): is the policy input-dependent?
        "spawn_share": round(sum(1 for r in results if r.spawned) / m, 4),
        "mean_wide_subagents": round(sum(r.subagents for r in results) / m, 4),
        "mean_critical_steps": round(mean_critical, 4),
        "mean_total_steps": round(sum(r.total_steps for r in results) / m, 4),
        "deep_rate": round(sum(r.deep for r in results) / m, 4),
        "consult_share": round(sum(1 for r in results if r.consulted) / m, 4),
        "f1_per_critical_step": per_critical_step(result, mean_critical),
        "specialist_share": {name: round(sum(1 for r in results if r.subagents and r.specialist == name) / m, 4)
                             for name in swarm.names}}
    return result


def time_subagents(model: AegirModel, data: SplitData, n: int, tables: int, batch_size: int) -> tuple[float, float]:
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


@dataclass
class PolicyScores:
    """Every policy scored on every evaluation split (`evaluate_policies`).

    scores:        per policy of `POLICIES`: `cta`, `cpa`, `spawn` per split and `mix` (the
                   scaling splits pooled, `pooled`); `spawning` (the learned policy's mean
                   sub-agents per table domain and split); `deep_search` (`deep_search_effect`
                   per split)
    splits:        each split's tables, views and sub-agent cache, as scored
    from_store:    per split, whether the orchestrator read it from the distributions Phase 3
                   stored
    learned_reads: per split, its examples and the learned policy's merged distributions
                   (`evaluate`'s `distributions`)
    """

    scores: dict
    splits: dict[str, SplitData]
    from_store: dict[str, bool]
    learned_reads: dict[str, tuple[list[Example], dict[str, torch.Tensor]]]


def evaluate_policies(swarm: Swarm, load: Callable[[str], tuple[SplitData, bool]], family: torch.Tensor,
                      max_subagents: int) -> PolicyScores:
    """Each evaluation split read by `load` (`aegir.swarm.splits.load_split`: its data and
    whether it came from Phase 3's stored distributions), then scored under every policy (the
    learned one at `max_subagents`) and deep search alone; then the scaling splits pooled."""
    scores: dict = {kind: {"cta": {}, "cpa": {}, "spawn": {}} for kind in POLICIES}
    split_data = {}
    predicted: dict[tuple[str, str], tuple[list[TablePrediction], list[int]]] = {}  # (kind, split) → labels, steps
    by_domain: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    deep_effect: dict[str, dict] = {}
    from_store: dict[str, bool] = {}
    learned_reads: dict[str, tuple[list[Example], dict[str, torch.Tensor]]] = {}
    for split in progress_bar(EVAL_SPLITS, desc="phase4 evaluate", unit="split"):
        data, from_store[split] = load(split)
        split_data[split] = data
        for kind in POLICIES:
            predictions: list[TablePrediction] = []
            critical: list[int] = []
            spawned: list[int] = []
            predicted[(kind, split)] = (predictions, critical)
            dense: dict[str, torch.Tensor] | None = {} if kind == "learned" else None
            result = evaluate(swarm, data, decisions(swarm, data, kind, max_subagents), predictions, critical,
                              spawned, dense)
            if dense is not None:
                learned_reads[split] = (data.examples, dense)
            if kind == "learned":
                for example, count in zip(data.examples, spawned):
                    by_domain[example.domain or "unknown"][split].append(count)
            for key in ("cta", "cpa", "spawn"):
                scores[kind][key][split] = result[key]
            if split == REAL_SPLIT:  # beside the baseline's, Phase 1's and Phase 3's, domain by domain
                scores[kind][REAL_DOMAINS] = score_by_domain(data.examples, predictions)
        deep_effect[split] = deep_search_effect(swarm, data, family, predicted[("never", split)])
    mix_examples = [e for split in SCALING_SPLITS for e in split_data[split].examples]
    for kind in POLICIES:  # the scaling splits as one pool: narrow and wide tables together
        scores[kind]["mix"] = pooled(mix_examples, [p for split in SCALING_SPLITS for p in predicted[(kind, split)][0]],
                                     [c for split in SCALING_SPLITS for c in predicted[(kind, split)][1]])
    # the learned policy's spawning per table domain and split (the report draws it as a heatmap)
    scores["spawning"] = {"subagents_by_domain": {
        domain: {split: round(sum(v) / len(v), 4) for split, v in by_domain[domain].items()}
        for domain in sorted(by_domain)}}
    scores["deep_search"] = deep_effect
    return PolicyScores(scores, split_data, from_store, learned_reads)


def scaling_curve(swarm: Swarm, splits: dict[str, SplitData], budgets: tuple[int, ...], timing_model: AegirModel,
                  timing_tables: int, batch_size: int) -> tuple[list[dict], dict[str, dict]]:
    """For each budget n of `budgets`, on each scaling split: F1, mean spawned, critical and total
    steps of the learned policy capped at n and the two controls, and each policy's pooled F1 per
    critical step (the rows, scaling.json); and for n > 0 the seconds per table of n sub-agents
    of `timing_model` on the first `timing_tables` tables of `wide`, batched (`batch_size`
    sub-tasks per call) vs one after another (`time_subagents`; keyed `n<n>`)."""
    mix_examples = [e for split in SCALING_SPLITS for e in splits[split].examples]
    scaling_rows = []
    timing_rows: dict[str, dict] = {}
    for n in budgets:
        row: dict = {"n": n}
        at_n: dict[str, tuple[list[TablePrediction], list[int]]] = {kind: ([], []) for kind in POLICIES}
        for split in SCALING_SPLITS:
            data = splits[split]
            for kind in POLICIES:
                result = evaluate(swarm, data, decisions(swarm, data, kind, n), *at_n[kind])
                for task in ("cta", "cpa"):
                    row[f"{kind}_{split}_{task}_micro_f1"] = round(result[task]["micro_f1"], 4)
                row[f"{kind}_{split}_mean_subagents"] = result["spawn"]["mean_subagents"]
                row[f"{kind}_{split}_mean_wide_subagents"] = result["spawn"]["mean_wide_subagents"]
                row[f"{kind}_{split}_critical_steps"] = result["spawn"]["mean_critical_steps"]
                row[f"{kind}_{split}_total_steps"] = result["spawn"]["mean_total_steps"]
        for kind in POLICIES:
            mix = pooled(mix_examples, *at_n[kind])
            for task in ("cta", "cpa"):
                row[f"{kind}_mix_{task}_f1_per_critical_step"] = mix["f1_per_critical_step"][task]
        scaling_rows.append(row)
        if n > 0:
            batched, sequential = time_subagents(timing_model, splits["wide"], n, timing_tables, batch_size)
            timing_rows[f"n{n}"] = {"batched_seconds_per_table": round(batched, 5),
                                    "sequential_seconds_per_table": round(sequential, 5),
                                    "speedup": round(sequential / max(batched, 1e-9), 3)}
    return scaling_rows, timing_rows

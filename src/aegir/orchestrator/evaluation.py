"""Phase 3's evaluation: every variant it reports, on every evaluation split, and how the fused
orchestrator routes and reads.

The variants (`VARIANTS`): (a) the Phase 1 primary, (b) the control (the primary trained by
PARL without specialists), (c) the fused orchestrator (routed), (d) the output-level ensemble
of the primary and the specialists the fused router activated; and each frozen specialist
alone. Every variant reads each table as Phase 1 scored it (aegir.eval.grouped). The frozen
models are not run again where their Phase 1 checkpoints hold their distributions on the same
reads (aegir.eval.reads). `aegir.stages.phase3` runs `evaluate_all` after training.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, replace
from pathlib import Path

import torch

from aegir.config import EVAL_SPLITS, REAL_DOMAINS, REAL_SPLIT, SPLITS, Phase3Config, PrepareConfig, ReadingConfig
from aegir.data.batch import padded
from aegir.data.dataset import Example, collate, eval_batches, load_examples
from aegir.data.prepared import fingerprint as data_fingerprint
from aegir.eval.grouped import ALL_LABELS, decoded, merge_predictions, split_reads
from aegir.eval.joint import LabelRepeats, table_decoder
from aegir.eval.predict import (
    TablePrediction,
    predict,
    predictions_from_probs,
    score,
    score_by_domain,
    table_predictions,
)
from aegir.eval.reads import StoredReads, dense_distributions
from aegir.eval.routing import routing_stats, slice_scores, slices_beaten
from aegir.labels import cpa_vocab, cta_vocab
from aegir.model.checkpoint import checkpoint_fingerprint
from aegir.model.network import AegirModel, AegirOutput
from aegir.orchestrator.critical import orchestrator_steps
from aegir.orchestrator.ensemble import ensemble_probs
from aegir.orchestrator.fusion import state_survival
from aegir.orchestrator.model import SwarmOrchestrator
from aegir.progress import progress as progress_bar
from aegir.train.step import OneThreadWorkers


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
    softmax of the Phase 1 primary and the specialists the fused router activated; and `seam`,
    the fused model before its vote (`SwarmOrchestrator.voted`: the state seam alone; the same
    as `fused` where the orchestrator does not vote).

    stored: per frozen model ("phase1" or a specialist's name), its label distributions on each
    of `examples` as Phase 1 stored them (aegir.eval.reads): that model is not run again."""
    stored = stored or {}
    names = ["phase1", "control", "fused", "ensemble", "seam", *fused.specialist_names]
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
            # the columns a read lacks hold ones (never read: predictions keep each read's own columns)
            return tuple(padded([stored[name][i][task] for i in indices], 1.0, width).to(device)  # noqa: B023 (in the loop)
                         for task in ("cta", "cpa"))

        # the frozen copy of the Phase 1 primary (aegir.stages.phase3 loads both from one checkpoint)
        # gives the primary's outputs: reuse them instead of a second pass
        primary_probs = probs("phase1", first)
        alone = [primary_probs if name == "primary" else probs(name, None if name in stored else s.model(batch))
                 for name, s in zip(fused.specialist_names, fused.specialists)]
        mask = routed.activation_mask
        mean = [ensemble_probs(primary_probs[t], [a[t] for a in alone], mask).log().softmax(-1) for t in (0, 1)]
        voted = table_predictions(routed, rows, top_k)
        results = {"phase1": predictions_from_probs(*primary_probs, rows, top_k),
                   "control": table_predictions(control.primary(batch), rows, top_k),
                   "fused": voted,
                   # no vote: the state seam's output is the fused one
                   "seam": (voted if routed.seam_output is None
                            else table_predictions(replace(routed, output=routed.seam_output), rows, top_k)),
                   "ensemble": predictions_from_probs(*mean, rows, top_k, mask),
                   **{name: predictions_from_probs(*a, rows, top_k) for name, a in zip(fused.specialist_names, alone)}}
        for name, predictions in results.items():
            for i, prediction in zip(indices, predictions):
                out[name][i] = prediction
    return out


def model_device(model: torch.nn.Module) -> torch.device:
    """Where `model`'s parameters are: the device its batches go to."""
    return next(model.parameters()).device


def critical_summary(orch: SwarmOrchestrator, predictions: list[TablePrediction]) -> dict:
    """Mean critical and total steps per table of the routed orchestrator, and the two fixed
    routings (primary alone, every specialist) for scale."""
    configs = [s.config for s in orch.specialists]
    p = orch.primary.config

    def steps(active) -> tuple[int, int]:
        return orchestrator_steps(p, configs, orch.separate_reads(active), orch.stream_seam, orch.column_seam,
                                  orch.subject_steps)

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
            # the stream seam's gates, per specialist and head (absent without the seam)
            **({"stream_gate_by_specialist_head": {
                name: [round(float(x), 4) for x in row]
                for name, row in zip(orch.specialist_names, orch.fusion.stream_gate.detach())}}
               if orch.stream_seam else {}),
            # the column seam's weights e^θ in the mean, per specialist and head (the primary's is 1)
            **({"column_weight_by_specialist_head": {
                name: [round(float(x), 4) for x in row]
                for name, row in zip(orch.specialist_names, orch.fusion.column_gate.detach().exp())}}
               if orch.column_seam else {}),
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


# what Phase 3 reports: (a) (b) (c) (d) of the design, and (c) before its vote
VARIANTS = ("phase1", "control", "fused", "ensemble", "seam")


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
            if split == REAL_SPLIT:  # beside the baseline's and Phase 1's, domain by domain
                metrics[name][REAL_DOMAINS] = score_by_domain(examples, variants[name])
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

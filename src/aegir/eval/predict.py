"""Running a model over examples: per-column predictions with confidences, and their F1."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from aegir.data.batch import IGNORE_INDEX, Batch
from aegir.data.dataset import Example, collate, eval_batches
from aegir.eval.metrics import reports_by_group, task_report
from aegir.labels import cpa_vocab, cta_vocab

if TYPE_CHECKING:
    from aegir.train.step import OneThreadWorkers


@dataclass(frozen=True)
class TablePrediction:
    """Top-k predictions of one table.

    cta_ids, cta_probs: (C, k) class ids and softmax probabilities, best first.
    cpa_ids, cpa_probs: (C, k); row 0 (the subject column) is meaningless and never scored.
    activation: (S,) bool, the specialists a routed model activated for this table (None for a
                model without routing); a table read in several row views or column groups:
                its first view's (`aegir.eval.grouped.merge_predictions`).
    activation_any: (S,) bool, the specialists any read of the table activated (every row view
                and column group), or None where that is `activation` (one read).
    """

    table_id: str
    cta_ids: np.ndarray
    cta_probs: np.ndarray
    cpa_ids: np.ndarray
    cpa_probs: np.ndarray
    activation: np.ndarray | None = None
    activation_any: np.ndarray | None = None


@torch.no_grad()
def predict(model: torch.nn.Module, examples: Sequence[Example], batch_size: int = 32,
            top_k: int = 1, device: torch.device | str = "cpu",
            forward: Callable[[Batch], object] | None = None,
            workers: OneThreadWorkers | None = None) -> list[TablePrediction]:
    """Predictions for every example, in the order of `examples`.

    forward: what to call on each batch (default `model` itself); it returns an `AegirOutput`,
    or an object with `.output` (an `AegirOutput`) and `.activation_mask` ((B, S) bool), as the
    routed forward of `aegir.orchestrator.model.SwarmOrchestrator.annotate` does.
    workers: each worker thread predicts an interleaved share of the examples (every
    `workers.count`-th).
    """
    was_training = model.training
    model.eval()
    if workers is not None and workers.count > 1 and len(examples) > 1:
        merged = workers.interleave(workers.map_shares(
            lambda share: predict(model, share, batch_size, top_k, device, forward), examples))
        model.train(was_training)
        return merged
    forward = forward or model
    out: list[TablePrediction | None] = [None] * len(examples)
    for indices in eval_batches(examples, batch_size):
        batch = collate([examples[i] for i in indices]).to(device)
        for i, prediction in zip(indices, table_predictions(forward(batch), [examples[i] for i in indices], top_k)):
            out[i] = prediction
    model.train(was_training)
    return out  # type: ignore[return-value]


def table_predictions(result, examples: Sequence[Example], top_k: int = 1) -> list[TablePrediction]:
    """One `TablePrediction` per batch row from a forward's result (an `AegirOutput`, or an
    object with `.output` and `.activation_mask`); `examples` are the batch's rows in order.
    A `top_k` above a task's label count gives all its labels (the whole distribution, sorted)."""
    activation = getattr(result, "activation_mask", None)
    output = getattr(result, "output", result)
    return predictions_from_probs(output.cta_logits.float().softmax(-1), output.cpa_logits.float().softmax(-1),
                                  examples, top_k, activation)


def predictions_from_probs(cta_probs: torch.Tensor, cpa_probs: torch.Tensor, examples: Sequence[Example],
                           top_k: int = 1, activation: torch.Tensor | None = None) -> list[TablePrediction]:
    """`table_predictions` from label distributions: cta_probs, cpa_probs (B, C, labels), a
    forward's softmax; activation (B, S) bool or None."""
    cta_p, cta_i = cta_probs.topk(min(top_k, cta_probs.shape[-1]), dim=-1)  # (B, C, k)
    cpa_p, cpa_i = cpa_probs.topk(min(top_k, cpa_probs.shape[-1]), dim=-1)
    out = []
    for row, example in enumerate(examples):
        c = example.num_columns
        out.append(TablePrediction(
            table_id=example.table_id,
            cta_ids=cta_i[row, :c].cpu().numpy(), cta_probs=cta_p[row, :c].cpu().numpy(),
            cpa_ids=cpa_i[row, :c].cpu().numpy(), cpa_probs=cpa_p[row, :c].cpu().numpy(),
            activation=None if activation is None else activation[row].cpu().numpy(),
        ))
    return out


def gold_and_predicted(examples: Sequence[Example], predictions: Sequence[TablePrediction]):
    """Aligned (gold, pred) label lists for CTA (columns) and CPA (column pairs (0, j))."""
    cta, cpa = cta_vocab().labels, cpa_vocab().labels
    pairs: dict[str, tuple[list, list]] = {"cta": ([], []), "cpa": ([], [])}
    for example, prediction in zip(examples, predictions):
        for c in range(example.num_columns):
            if example.cta_labels[c] != IGNORE_INDEX:
                pairs["cta"][0].append(cta[example.cta_labels[c]])
                pairs["cta"][1].append(cta[prediction.cta_ids[c, 0]])
            if c > 0 and example.cpa_labels[c] != IGNORE_INDEX:
                pairs["cpa"][0].append(cpa[example.cpa_labels[c]])
                pairs["cpa"][1].append(cpa[prediction.cpa_ids[c, 0]])
    return pairs


def score(examples: Sequence[Example], predictions: Sequence[TablePrediction]) -> dict[str, dict]:
    """`{"cta": {micro_f1, macro_f1, support}, "cpa": {…}}` in percent."""
    pairs = gold_and_predicted(examples, predictions)
    return {task: task_report(gold, pred) for task, (gold, pred) in pairs.items()}


def score_by_domain(examples: Sequence[Example], predictions: Sequence[TablePrediction]) -> dict[str, dict]:
    """`{"cta": {domain: {micro_f1, macro_f1, support}}, "cpa": {…}}`: `score` of each domain's
    tables (`reports_by_group`: a domain without a labelled column of a task is left out of that
    task, a table without a domain counts as "unknown")."""
    labelled: dict[str, tuple[list, list, list]] = {"cta": ([], [], []), "cpa": ([], [], [])}
    for example, prediction in zip(examples, predictions, strict=True):
        for task, (gold, pred) in gold_and_predicted([example], [prediction]).items():
            labelled[task][0].extend(gold)
            labelled[task][1].extend(pred)
            labelled[task][2].extend([example.domain] * len(gold))
    return {task: reports_by_group(*columns) for task, columns in labelled.items()}

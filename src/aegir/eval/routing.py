"""What a routed model did, and where each model is better: routing statistics and F1 slices.

`routing_stats` reads the activation of each table (`TablePrediction.activation`) and reports
how selective the routing is and how it varies with content; `slice_scores` and
`slices_beaten` compare models table group by table group (a split, or a split's tables of one
domain).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from aegir.data.dataset import Example
from aegir.eval.predict import TablePrediction, score


def routing_stats(examples: Sequence[Example], predictions: Sequence[TablePrediction],
                  names: Sequence[str]) -> dict:
    """Activation statistics of routed predictions.

    activation_rate:            share of tables that activated each specialist
    activation_rate_by_domain:  the same per table domain
    tables:                     tables counted
    mean_activated:             mean number of specialists per table
    differs_from_majority:      share of tables whose routing (the whole on/off vector) differs
                                from the most common routing: 0 means every table routed alike
    distinct_routings:          how many different routings occurred
    routing_counts:             each routing ("places+media", "none", …) and its table count
    """
    masks = np.array([p.activation for p in predictions], dtype=bool).reshape(len(predictions), len(names))
    if len(masks) == 0:
        return {"tables": 0}
    keys = ["+".join(n for n, on in zip(names, row) if on) or "none" for row in masks]
    counts = Counter(keys)
    majority = counts.most_common(1)[0][1]
    by_domain: dict[str, dict[str, float]] = {}
    for domain in sorted({e.domain or "?" for e in examples}):
        rows = [i for i, e in enumerate(examples) if (e.domain or "?") == domain]
        by_domain[domain] = {n: float(masks[rows, s].mean()) for s, n in enumerate(names)}
    return {
        "tables": len(masks),
        "activation_rate": {n: float(masks[:, s].mean()) for s, n in enumerate(names)},
        "activation_rate_by_domain": by_domain,
        "mean_activated": float(masks.sum(1).mean()),
        "differs_from_majority": 1.0 - majority / len(masks),
        "distinct_routings": len(counts),
        "routing_counts": dict(sorted(counts.items())),
    }


def slice_scores(examples: Sequence[Example], predictions: Sequence[TablePrediction]) -> dict[str, dict]:
    """F1 on all tables ("all") and on each domain's tables: slice → {"cta": …, "cpa": …}."""
    out = {"all": score(examples, predictions)}
    for domain in sorted({e.domain for e in examples if e.domain}):
        rows = [i for i, e in enumerate(examples) if e.domain == domain]
        out[domain] = score([examples[i] for i in rows], [predictions[i] for i in rows])
    return out


def slices_beaten(candidate: dict[str, dict[str, dict]], reference: dict[str, dict[str, dict]],
                  min_support: int = 10) -> list[dict]:
    """Where `candidate` has a higher micro-F1 than `reference`: split → slice → task scores.

    Both map split → `slice_scores`. Slices with fewer than `min_support` scored targets are
    skipped (a win on three columns is noise). Sorted by margin, largest first.
    """
    wins = []
    for split, slices in candidate.items():
        for name, tasks in slices.items():
            for task, result in tasks.items():
                ref = reference.get(split, {}).get(name, {}).get(task)
                if ref is None or result["support"] < min_support:
                    continue
                margin = result["micro_f1"] - ref["micro_f1"]
                if margin > 0:
                    wins.append({"split": split, "slice": name, "task": task, "support": result["support"],
                                 "micro_f1": result["micro_f1"], "reference_micro_f1": ref["micro_f1"],
                                 "margin": round(margin, 4)})
    return sorted(wins, key=lambda w: -w["margin"])

"""F1 as every stage reports it (docs/design.md, "Data contract").

Only annotated targets are scored (columns with a gold CTA label; column pairs with a gold CPA
label), as in SOTAB: a prediction on an unlabelled column is not a false positive. A target
may be left unpredicted (`None`): it then counts as a false negative and no false positive.

* micro-F1: from TP/FP/FN summed over all scored targets. When every target gets exactly one
  prediction this equals accuracy.
* macro-F1: the mean of per-label F1 over the labels that occur in the split's gold (a label
  only predicted, never gold, adds its false positives to the gold labels' precision only
  through micro-F1; it does not enter the macro average).

Scores are in [0, 1]; reports multiply by 100.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from aegir.config import REAL_SPLIT


@dataclass(frozen=True)
class F1Scores:
    micro_f1: float
    macro_f1: float
    support: int  # number of scored targets

    def as_dict(self, scale: float = 100.0) -> dict[str, float | int]:
        return {
            "micro_f1": round(self.micro_f1 * scale, 4),
            "macro_f1": round(self.macro_f1 * scale, 4),
            "support": self.support,
        }


def _f1(tp: int, fp: int, fn: int) -> float:
    denominator = 2 * tp + fp + fn
    return 0.0 if denominator == 0 else 2 * tp / denominator


def f1_scores(gold: Sequence[str | None], pred: Sequence[str | None]) -> F1Scores:
    """Micro- and macro-F1 of `pred` against `gold` (aligned lists; gold None = not scored)."""
    if len(gold) != len(pred):
        raise ValueError(f"gold has {len(gold)} targets but pred has {len(pred)}")
    tp: Counter[str] = Counter()
    fp: Counter[str] = Counter()
    fn: Counter[str] = Counter()
    support = 0
    for g, p in zip(gold, pred):
        if g is None:
            continue
        support += 1
        if p == g:
            tp[g] += 1
            continue
        fn[g] += 1
        if p is not None:
            fp[p] += 1
    if support == 0:
        return F1Scores(micro_f1=0.0, macro_f1=0.0, support=0)
    micro = _f1(sum(tp.values()), sum(fp.values()), sum(fn.values()))
    gold_labels = sorted(set(tp) | set(fn))
    macro = sum(_f1(tp[label], fp[label], fn[label]) for label in gold_labels) / len(gold_labels)
    return F1Scores(micro_f1=micro, macro_f1=macro, support=support)


def task_report(gold: Sequence[str | None], pred: Sequence[str | None]) -> dict[str, float | int]:
    """`{"micro_f1": …, "macro_f1": …, "support": …}` in percent, rounded for stable JSON."""
    return f1_scores(gold, pred).as_dict()


UNKNOWN_GROUP = "unknown"  # the group of an item whose group is missing (a table without a domain)


def reports_by_group(gold: Sequence[str | None], pred: Sequence[str | None],
                     groups: Sequence[str | None]) -> dict[str, dict[str, float | int]]:
    """`task_report` of the items of each group (e.g. each column's table domain), by group name
    (None: `UNKNOWN_GROUP`); a group with no labelled item is left out."""
    members: dict[str, list[int]] = {}
    for i, (group, label) in enumerate(zip(groups, gold, strict=True)):
        if label is not None:
            members.setdefault(group or UNKNOWN_GROUP, []).append(i)
    return {group: task_report([gold[i] for i in idx], [pred[i] for i in idx])
            for group, idx in sorted(members.items())}


def per_label_f1(gold: Sequence[str | None], pred: Sequence[str | None]) -> dict[str, dict]:
    """Per gold label: F1 (percent), support; for error analysis and plots."""
    labels = sorted({g for g in gold if g is not None})
    out = {}
    for label in labels:
        tp = sum(1 for g, p in zip(gold, pred) if g == label and p == label)
        fn = sum(1 for g, p in zip(gold, pred) if g == label and p != label)
        fp = sum(1 for g, p in zip(gold, pred) if g is not None and p == label and g != label)
        out[label] = {"f1": round(_f1(tp, fp, fn) * 100, 4), "support": tp + fn}
    return out


def confusions(gold: Sequence[str | None], pred: Sequence[str | None], top: int = 3) -> dict[str, dict]:
    """Per gold label, what was predicted for it: support, correct count, per-label F1
    (percent, as `per_label_f1`) and the `top` most frequent wrong predictions as
    `[label, count]` pairs (most frequent first, ties by label; None = left unpredicted)."""
    f1 = per_label_f1(gold, pred)
    wrong: dict[str, Counter] = {label: Counter() for label in f1}
    correct: Counter[str] = Counter()
    for g, p in zip(gold, pred):
        if g is None:
            continue
        if p == g:
            correct[g] += 1
        else:
            wrong[g][p] += 1
    return {label: {"support": f1[label]["support"], "correct": correct[label], "f1": f1[label]["f1"],
                    "mistakes": [[p, n] for p, n in sorted(wrong[label].items(),
                                                           key=lambda kv: (-kv[1], str(kv[0])))[:top]]}
            for label in f1}



NOT_BENCHMARK = ("train", "valid", REAL_SPLIT)  # trained on, selected on, or real


def headline(scores: dict[str, dict[str, dict]]) -> dict[str, dict[str, float]]:
    """The figures a person compares across runs, for a stage's DVC metrics file:
    `{task: {"bench": …, "real": …}}`, micro-F1 in percent rounded to 0.01, from
    `{task: {split: task_report(…)}}`.

    * `bench`: the mean micro-F1 over the benchmark's test splits (every split but `train`,
      `valid` and `real`: `test`, `corner_cases`, `missing_values`, `format_heterogeneity`,
      `wide`), each split weighing the same;
    * `real`: micro-F1 on the real-table split.

    A figure whose splits are absent is left out. Micro/macro F1 per split, supports and every
    other detail stay in the stage's plain outputs (its `scores.json`, the report), so that
    `dvc exp show --only-changed` fits a terminal (docs/design.md, "Stage contract")."""
    out: dict[str, dict[str, float]] = {}
    for task, by_split in scores.items():
        bench = [report["micro_f1"] for split, report in by_split.items() if split not in NOT_BENCHMARK]
        figures = {}
        if bench:
            figures["bench"] = round(sum(bench) / len(bench), 2)
        if REAL_SPLIT in by_split:
            figures["real"] = round(by_split[REAL_SPLIT]["micro_f1"], 2)
        out[task] = figures
    return out


def wall_minutes(name: str, seconds: float) -> dict[str, dict[str, float]]:
    """A training stage's wall-time DVC metric, `{"minutes": {name: …}}` (its own file: the one
    figure a rerun does not reproduce)."""
    return {"minutes": {name: round(seconds / 60.0, 2)}}


__all__ = ["F1Scores", "f1_scores", "headline", "wall_minutes", "REAL_SPLIT", "task_report", "reports_by_group", "per_label_f1", "confusions"]

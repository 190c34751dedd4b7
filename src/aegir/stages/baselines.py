"""Stage `baselines`: a single-column classifier, to show how hard the benchmark is.

Each column becomes one document (its first `max_cells` non-missing cells joined by " | ");
character n-gram TF-IDF + logistic regression (scikit-learn, `aegir.eval.baselines`) is trained
on `train` alone (never on the evaluation splits, `real` among them) for CTA (every labelled
column) and for CPA (every labelled non-subject column, read alone: the baseline never sees
column 0 or any other column). It is scored on every split with the same F1 as the model
(`aegir.eval.metrics`) and writes `results/baselines/scores.json` (every split, train included,
with supports; under `real_domains` the `real` split's tables of each domain, as phase1 scores
them) and `results/baselines/metrics.json` (DVC metrics, as phase1 reports them: per
task the benchmark and real-table micro-F1, under the name `baseline`). The CTA and CPA fits run
in two processes where there are two cores.

What this baseline cannot do is the point of the benchmark's corner cases: tell apart columns
whose cells look alike and whose label only the rest of the table decides.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from aegir import atomic
from aegir.config import EVAL_SPLITS, load_params
from aegir.errors import AegirError
from aegir.eval.baselines import TASKS, baseline_scores
from aegir.eval.metrics import headline


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--data", default="data/prepared")
    parser.add_argument("--out", default="results/baselines/metrics.json", help="headline F1 (DVC metrics)")
    parser.add_argument("--scores", default="results/baselines/scores.json", help="every split, with supports")
    args = parser.parse_args(argv)
    try:
        cfg = load_params(args.params).baselines
        scores = baseline_scores(cfg, Path(args.data))
    except AegirError as exc:
        parser.exit(2, f"baselines: error: {exc}\n")
    atomic.write_json(args.scores, scores)
    atomic.write_json(args.out, {"baseline": headline({task: {split: scores[task][split] for split in EVAL_SPLITS}
                                                       for task in TASKS})})
    for task in TASKS:
        row = "  ".join(f"{split} {m['micro_f1']:.1f}" for split, m in scores[task].items())
        print(f"{task.upper()} micro-F1: {row}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

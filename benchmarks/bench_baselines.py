"""Benchmark: the baseline's TF-IDF vectorizing, scikit-learn's counting against the word-wise one.

    python benchmarks/bench_baselines.py [--data data/prepared] [--params params.yaml] [--task cta] [--repeats 1]

On the training columns of one task (`aegir.eval.baselines.labelled_columns`, the documents the
stage fits on), `fit_transform` and then `transform` of the `real` split's columns by
scikit-learn's TfidfVectorizer and by `WordwiseTfidfVectorizer`, alternating, best of
`--repeats`; prints their times, the ratio (one run's ratio is what survives a noisy machine)
and whether the two matrices are equal bit for bit (they must be: the benchmark fails if not).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from bench_phase1 import machine_line
from sklearn.feature_extraction.text import TfidfVectorizer

from aegir.config import REAL_SPLIT, TRAIN_SPLIT, load_params
from aegir.data.prepared import read_split, tables_from_arrow
from aegir.errors import AegirError
from aegir.eval.baselines import WordwiseTfidfVectorizer, labelled_columns


def same(a, b) -> bool:
    return type(a) is type(b) and all(np.array_equal(getattr(a, part), getattr(b, part))
                                      for part in ("indptr", "indices", "data"))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="data/prepared", type=Path)
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--task", default="cta", choices=("cta", "cpa"))
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args(argv)
    try:
        cfg = load_params(args.params).baselines
        docs, _ = labelled_columns(tables_from_arrow(read_split(args.data, TRAIN_SPLIT)), args.task, cfg.max_cells)
        others, _ = labelled_columns(tables_from_arrow(read_split(args.data, REAL_SPLIT)), args.task, cfg.max_cells)
    except AegirError as exc:
        parser.exit(2, f"bench_baselines: error: {exc}\n")
    settings = dict(analyzer="char_wb", ngram_range=(cfg.ngram_min, cfg.ngram_max), max_features=cfg.max_features,
                    sublinear_tf=True, dtype=np.float32)
    print(machine_line())
    print(f"{len(docs):,} {args.task.upper()} training columns, {len(others):,} `{REAL_SPLIT}` columns")
    best = {"scikit-learn": [float("inf")] * 2, "word-wise": [float("inf")] * 2}
    outputs = {}
    for _ in range(args.repeats):
        for name, kind in (("scikit-learn", TfidfVectorizer), ("word-wise", WordwiseTfidfVectorizer)):
            vectorizer = kind(**settings)
            start = time.perf_counter()
            fitted = vectorizer.fit_transform(docs)
            middle = time.perf_counter()
            transformed = vectorizer.transform(others)
            end = time.perf_counter()
            best[name] = [min(best[name][0], middle - start), min(best[name][1], end - middle)]
            outputs[name] = (vectorizer.vocabulary_, fitted, transformed)
    (vocab_a, fit_a, out_a), (vocab_b, fit_b, out_b) = outputs["scikit-learn"], outputs["word-wise"]
    equal = vocab_a == vocab_b and same(fit_a, fit_b) and same(out_a, out_b)
    for name, (fit_s, transform_s) in best.items():
        print(f"{name:13} fit_transform {fit_s:7.2f} s   transform {transform_s:6.3f} s")
    ratio = best["scikit-learn"][0] / best["word-wise"][0]
    print(f"word-wise / scikit-learn: {ratio:.2f}× faster fit_transform; vocabulary and matrices "
          f"{'bit-identical' if equal else 'DIFFERENT'}")
    if not equal:
        raise SystemExit("bench_baselines: the word-wise vectorizer's output differs from scikit-learn's")
    return {"seconds": best, "ratio": ratio, "equal": equal}


if __name__ == "__main__":
    main()

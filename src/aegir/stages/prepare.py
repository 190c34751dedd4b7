"""Stage `prepare`: tables (embedded benchmark or a SOTAB V2 directory) → byte streams.

The configured source gives the splits of `aegir.config.SOURCE_SPLITS`; the evaluation-only
splits are added whatever the source, serialized with the same params: `real` (real tables
from pip-package data, `aegir.data.real`), so that every model and baseline is also scored on
real tables, and `wide` (synthetic tables of 15–40 columns, `aegir.data.synth.generate_wide`),
where the shared byte budget leaves each column little. Both are independent of the training
data, so they are added with `source: sotab` too. So is `wide_train` (`SWARM_TRAIN_SPLIT`): more
synthetic many-column tables, on which only Phase 4's spawning policy and merge train; and
`specialist_train` (`SPECIALIST_TRAIN_SPLIT`): more ordinary synthetic tables, other than
`train`'s, of which each specialist reads its domains' (`agents.<name>.extra_tables`) and the
primary none; and `policy_train` (`POLICY_TRAIN_SPLIT`): ordinary synthetic tables again, other
ones, that only Phase 4 trains on (no model of Phases 1–3 reads them).

With `prepare.train_views` > 1 the `train` split also holds shuffled views of every training
table (rows and non-subject columns reordered, a few cells blanked: `aegir.data.augment`), so
that epochs over it show a model other cells of the same tables; no other split has views.

Writes `data/prepared/<split>.parquet` (one row per table; schema in
`aegir.data.prepare.PREPARED_SCHEMA`), `results/prepare/stats.json` (the detail: tables, columns
and byte-length percentiles per split, columns per label, missing labels, skipped cases by
reason, and the `real` split's coverage per table domain: its families, tables and CTA columns
per label) and `results/prepare/metrics.json` (DVC metrics, the few figures worth a column in
`dvc exp show`: tables, labels covered, cases skipped). The same params give byte-identical
files, so DVC hashes stay stable: tables are produced in a fixed order, serialisation is
deterministic, and Parquet is written with fixed settings and no timestamps
(`aegir.data.prepare` builds and writes them).

Every output is written atomically: the data directory is built beside its destination and
moved into place only when every split succeeded; the JSON files follow it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from aegir.config import load_params
from aegir.data.prepare import prepare_dataset
from aegir.errors import AegirError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--out", default="data/prepared", help="prepared data directory")
    parser.add_argument("--stats", default="results/prepare/stats.json", help="detailed statistics (JSON)")
    parser.add_argument("--metrics", default="results/prepare/metrics.json", help="headline figures (DVC metrics)")
    args = parser.parse_args(argv)
    try:
        params = load_params(args.params)
        stats = prepare_dataset(params, Path(args.out), Path(args.stats), Path(args.metrics))
    except AegirError as exc:
        parser.exit(2, f"prepare: error: {exc}\n")
    cov = stats["coverage"]
    print(f"prepared {sum(s['tables'] for s in stats['splits'].values())} tables; "
          f"CTA labels {cov['cta_labels']}/{cov['cta_vocab']}, CPA labels {cov['cpa_labels']}/{cov['cpa_vocab']}")
    if stats.get("real_coverage"):
        domains = stats["real_coverage"]
        print(f"real: {sum(d['cta_columns'] for d in domains.values())} CTA columns over {len(domains)} domains ("
              + ", ".join(f"{name} {d['cta_columns']} in {len(d['families'])} famil{'y' if len(d['families']) == 1 else 'ies'}" for name, d in domains.items())
              + ")")
    if stats["skipped"]:
        print(f"skipped: {stats['skipped']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

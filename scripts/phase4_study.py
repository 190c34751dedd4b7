"""The Phase 4 policy study: learned against never- and always-spawn, per seed and price, from
the `results/phase4/scores.json` of DVC experiments (`scripts/phase4_seeds.sh` queues them).

    python scripts/phase4_study.py                      # experiments named p4-s<seed>-c<cost>, and HEAD
    python scripts/phase4_study.py --markdown out.md    # also write the tables
    python scripts/phase4_study.py --since HEAD~3       # only experiments run since that commit

Each experiment's scores are read from the DVC cache at its revision (`dvc.api.read`); HEAD's
(the default run) counts as seed `phase4.seed` at its own `phase4.step_cost`. Per price: for CTA
and CPA on each split, never / learned (mean, range) / always and learned − never, learned −
always, always − never as mean [min, max] over the seeds (never is Phase 3's fused orchestrator,
so the two margins against it show issue 35's limit of −0.3 for every policy); the pooled F1 per
critical step; the share of tables the learned policy spawned on.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
from collections import defaultdict
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SCORES = "results/phase4/scores.json"
SPLITS = ("valid", "test", "corner_cases", "missing_values", "format_heterogeneity", "real", "wide")
NAME = re.compile(r"^p4-s(\d+)-c([0-9.]+)$")


def experiments(since: str | None = None) -> list[tuple[str, str]]:
    """(name, commit) of the experiments named p4-s<seed>-c<cost> (`dvc exp list --all-commits`),
    with `since` only those run on that commit or a later one (a baseline it is an ancestor of):
    experiments of older commits ran other code or data, and may bear the same names."""
    out = subprocess.run(["dvc", "exp", "list", "--all-commits"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    return parse_experiments(out, (lambda baseline: is_ancestor(since, baseline)) if since else (lambda _: True))


def parse_experiments(listing: str, keep) -> list[tuple[str, str]]:
    """(name, commit) of the study's experiments in `dvc exp list --all-commits` output (a
    "<baseline>:" line, then one "<commit> [<name>]" line per experiment), where keep(baseline)."""
    found, baseline = [], None
    for line in listing.splitlines():
        head = re.match(r"^(\S+):$", line)
        if head:
            baseline = head.group(1)
            continue
        entry = re.match(r"^\s+(\S+) \[(.+)\]$", line)
        if entry and NAME.match(entry.group(2)) and keep(baseline):
            found.append((entry.group(2), entry.group(1)))
    return found


def is_ancestor(older: str, newer: str | None) -> bool:
    return newer is not None and subprocess.run(["git", "merge-base", "--is-ancestor", older, newer], cwd=ROOT,
                                                capture_output=True).returncode == 0


def read_scores(rev: str | None) -> dict:
    import dvc.api

    return json.loads(dvc.api.read(SCORES, repo=str(ROOT), rev=rev))


def span(values: list[float], digits: int = 2) -> str:
    return f"{statistics.mean(values):+.{digits}f} [{min(values):+.{digits}f}, {max(values):+.{digits}f}]"


def tables(runs: dict[tuple[int, str], dict]) -> str:
    lines = []
    by_cost: dict[str, list[dict]] = defaultdict(list)
    seeds: dict[str, list[int]] = defaultdict(list)
    for (seed, cost), scores in sorted(runs.items()):
        by_cost[cost].append(scores)
        seeds[cost].append(seed)
    for cost in sorted(by_cost, key=float):
        runs_ = by_cost[cost]
        lines += [f"### step_cost {cost}: seeds {seeds[cost]}", "",
                  "| task, split | never | learned (range) | always | learned − never | learned − always "
                  "| always − never |",
                  "|---|---|---|---|---|---|---|"]
        for task in ("cta", "cpa"):
            for split in SPLITS:
                f1 = {k: [r[k][task][split]["micro_f1"] for r in runs_] for k in ("never", "learned", "always")}
                lines.append(
                    f"| {task.upper()} {split} | {statistics.mean(f1['never']):.2f} | "
                    f"{statistics.mean(f1['learned']):.2f} ({min(f1['learned']):.2f}–{max(f1['learned']):.2f}) | "
                    f"{statistics.mean(f1['always']):.2f} | "
                    f"{span([a - b for a, b in zip(f1['learned'], f1['never'])])} | "
                    f"{span([a - b for a, b in zip(f1['learned'], f1['always'])])} | "
                    f"{span([a - b for a, b in zip(f1['always'], f1['never'])])} |")
        for task in ("cta", "cpa"):
            per = {k: [r[k]["mix"]["f1_per_critical_step"][task] for r in runs_] for k in ("never", "learned", "always")}
            lines.append(
                f"| {task.upper()} F1 per critical step, pooled | {statistics.mean(per['never']):.3f} | "
                f"{statistics.mean(per['learned']):.3f} ({min(per['learned']):.3f}–{max(per['learned']):.3f}) | "
                f"{statistics.mean(per['always']):.3f} | "
                f"{span([a - b for a, b in zip(per['learned'], per['never'])], 3)} | "
                f"{span([a - b for a, b in zip(per['learned'], per['always'])], 3)} | "
                f"{span([a - b for a, b in zip(per['always'], per['never'])], 3)} |")
        shares = ", ".join(
            f"{split} {statistics.mean([r['learned']['spawn'][split]['spawn_share'] for r in runs_]):.2f}"
            for split in SPLITS)
        lines += ["", f"Share of tables with ≥ 1 sub-agent (learned, mean): {shares}", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", type=Path, help="also write the tables to this file")
    parser.add_argument("--since", metavar="REV", help="only experiments run on REV or a later commit "
                        "(the ones on older commits ran other code or data)")
    args = parser.parse_args(argv)
    if args.since and subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{args.since}^{{commit}}"], cwd=ROOT,
                                     capture_output=True).returncode != 0:
        parser.error(f"--since {args.since}: not a commit of this repository")
    params = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))["phase4"]
    runs = {(int(params["seed"]), str(params["step_cost"])): read_scores(None)}
    for name, commit in experiments(args.since):
        seed, cost = NAME.match(name).groups()
        if (int(seed), cost) in runs:
            raise SystemExit(f"phase4_study: two experiments are seed {seed} at cost {cost} (the last: {name} at "
                             f"{commit}); pass --since to keep one commit's")
        runs[(int(seed), cost)] = read_scores(commit)
    text = tables(runs)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

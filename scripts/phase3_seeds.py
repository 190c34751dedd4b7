"""Phase 3 over several seeds, as DVC experiments: is the fused orchestrator's gain over its
controls a result or a draw?

    python scripts/phase3_seeds.py --seeds 1 2 --out /tmp/p3seeds      # run, then compare
    python scripts/phase3_seeds.py --out /tmp/p3seeds --show             # compare what was run

Seed 0 is main's own run (`results/phase3/scores.json` of the workspace, as `dvc repro` left it);
each further seed runs `dvc exp run -n p3-seed<S> -S phase3.seed=<S>` in the workspace, which
reruns `phase3` and what depends on it (nothing before it), keeps its `scores.json` and
`report.json` in `--out/seed<S>/` (and Phase 4's scores over that orchestrator as
`phase4_scores.json`), and at the end puts the workspace back (`params.yaml` and
`dvc.lock` from git, the outputs from the DVC cache). `phase3.seed` seeds both runs of the stage,
the fused orchestrator and its control, so each seed is a paired comparison.

Prints, per split (`--splits`, CTA and CPA micro-F1): every variant's mean over the seeds and its
range, and the fused orchestrator's margin over the control, the Phase 1 primary and the
output-level ensemble (and the fused model before its vote, `seam`, where the runs have it)
per seed: issue 34's target is fused ≥ both controls + 2 CTA on
`corner_cases` and `real`, on the mean, with the same sign in every seed. `--json` writes the
same figures. docs/experiments.md holds the runs this script measured.

`--all-knowledge` adds issue 34's upper reference beside them: the `scores.json` of primaries
trained on everything the specialists saw (`primary.extra_tables`, a plain `phase1 --agent
primary` run each), one per seed in the seeds' order (each its own `primary.seed`), shown as
`all_knowledge` with the fused model's margin over it, paired by position:

    python scripts/phase3_seeds.py --show --out /tmp/p3seeds --all-knowledge ak0/scores.json ak1/scores.json ak2/scores.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from aegir import atomic
from aegir.errors import AegirError

VARIANTS = ("phase1", "control", "fused", "ensemble")
MARGINS = ("control", "phase1", "ensemble")  # the fused model's margin over each
# reported (with the fused model's margin over it) where every seed's scores.json has it:
# `seam`, the fused model before its vote (runs from before the output seam lack it), and
# `all_knowledge`, the primary trained on everything the specialists saw (--all-knowledge)
OPTIONAL = ("seam", "all_knowledge")
ROOT = Path(__file__).resolve().parent.parent


def run(cmd: list[str]) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True)


def run_seed(seed: int, out: Path) -> None:
    """One seed as a DVC experiment in the workspace; its Phase 3 scores kept under `out`."""
    run(["dvc", "exp", "run", "-n", f"p3-seed{seed}", "-S", f"phase3.seed={seed}"])
    target = out / f"seed{seed}"
    target.mkdir(parents=True, exist_ok=True)
    for name in ("scores.json", "report.json"):
        shutil.copyfile(ROOT / "results/phase3" / name, target / name)
    # the experiment reran Phase 4 over this seed's orchestrator too: its scores, kept beside
    shutil.copyfile(ROOT / "results/phase4/scores.json", target / "phase4_scores.json")


def restore_workspace() -> None:
    run(["git", "checkout", "--", "params.yaml", "dvc.lock"])
    run(["dvc", "checkout", "--force"])


def read_scores(path: Path, what: str) -> dict:
    """The JSON object in `path`, or an error naming the file as not a readable `what`."""
    try:
        scores = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise AegirError(f"{path}: not a readable {what} ({exc})") from None
    if not isinstance(scores, dict):
        raise AegirError(f"{path}: not a readable {what} (not a JSON object)")
    return scores


def load_scores(path: Path) -> dict:
    scores = read_scores(path, "Phase 3 scores.json")
    missing = [v for v in VARIANTS if v not in scores]
    if missing:
        raise AegirError(f"{path}: no scores for {missing} (a Phase 3 scores.json has {', '.join(VARIANTS)})")
    return scores


def load_primary_scores(path: Path) -> dict:
    """A phase1 stage's scores.json ({task: {split: report}}), or the folder holding it."""
    path = path / "scores.json" if path.is_dir() else path
    scores = read_scores(path, "phase1 scores.json")
    if not all(isinstance(scores.get(task), dict) for task in ("cta", "cpa")):
        raise AegirError(f"{path}: not a phase1 scores.json (it has no `cta` and `cpa` scores per split)")
    return scores


def with_all_knowledge(runs: dict[int, dict], references: list[dict]) -> dict[int, dict]:
    """`runs` with the all-knowledge primaries' scores (one per run, paired by position) as the
    variant `all_knowledge`."""
    if len(references) != len(runs):
        raise AegirError(f"--all-knowledge: {len(references)} scores.json for {len(runs)} seeds "
                         f"({', '.join(map(str, runs))}); give one per seed, in their order")
    return {seed: {**scores, "all_knowledge": reference} for (seed, scores), reference in zip(runs.items(), references)}


def compare(runs: dict[int, dict], splits: list[str]) -> dict:
    """{task: {split: {"variants": {name: {"mean", "min", "max"}}, "margins": {other: {"per_seed",
    "mean", "same_sign"}}}}} over `runs` (seed → scores.json)."""
    out: dict = {}
    names = VARIANTS + tuple(name for name in OPTIONAL if all(name in s for s in runs.values()))
    for task in ("cta", "cpa"):
        for split in splits:
            try:
                f1 = {seed: {name: s[name][task][split]["micro_f1"] for name in names} for seed, s in runs.items()}
            except KeyError as exc:
                raise AegirError(f"no {task.upper()} score on split {split!r} in every run ({exc!r} missing)") from None
            variants = {}
            for name in names:
                values = [by_name[name] for by_name in f1.values()]
                variants[name] = {"mean": round(statistics.fmean(values), 2), "min": min(values), "max": max(values)}
            margins = {}
            for other in MARGINS + names[len(VARIANTS):]:
                per_seed = {seed: round(by_name["fused"] - by_name[other], 2) for seed, by_name in f1.items()}
                values = list(per_seed.values())
                margins[other] = {"per_seed": per_seed, "mean": round(statistics.fmean(values), 2),
                                  "same_sign": all(v > 0 for v in values) or all(v < 0 for v in values)}
            out.setdefault(task, {})[split] = {"variants": variants, "margins": margins}
    return out


def render(figures: dict, seeds: list[int]) -> str:
    lines = [f"Phase 3 over seeds {', '.join(map(str, seeds))}: micro-F1 mean [min, max]; fused − other per seed"]
    for task, by_split in figures.items():
        for split, f in by_split.items():
            cells = "  ".join(f"{name} {v['mean']:.2f} [{v['min']:.2f}, {v['max']:.2f}]" for name, v in f["variants"].items())
            lines.append(f"{task.upper()} {split}: {cells}")
            for other, m in f["margins"].items():
                per = ", ".join(f"{v:+.2f}" for v in m["per_seed"].values())
                lines.append(f"    fused − {other:8} {m['mean']:+.2f}  ({per}){'' if m['same_sign'] else '  signs differ'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--seeds", type=int, nargs="*", default=[1, 2], help="seeds to run besides main's 0")
    parser.add_argument("--out", type=Path, required=True, help="where each seed's scores are kept")
    parser.add_argument("--show", action="store_true", help="only compare the seeds already under --out")
    parser.add_argument("--main-scores", type=Path, default=ROOT / "results/phase3/scores.json",
                        help="seed 0: main's run")
    parser.add_argument("--splits", nargs="+", default=["corner_cases", "real", "test", "wide"])
    parser.add_argument("--json", type=Path, help="write the figures here too")
    parser.add_argument("--all-knowledge", type=Path, nargs="+", default=[], metavar="SCORES",
                        help="phase1 scores.json (or its folder) of a primary trained on everything the "
                             "specialists saw, one per seed in the seeds' order")
    args = parser.parse_args(argv)
    try:
        runs = {0: load_scores(args.main_scores)}
        if not args.show:
            shutil.copytree(args.main_scores.parent, args.out / "seed0", dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("live"))
            try:
                for seed in args.seeds:
                    run_seed(seed, args.out)
            finally:
                restore_workspace()
        for seed in args.seeds:
            runs[seed] = load_scores(args.out / f"seed{seed}" / "scores.json")
        if args.all_knowledge:
            runs = with_all_knowledge(runs, [load_primary_scores(p) for p in args.all_knowledge])
        figures = compare(runs, args.splits)
    except AegirError as exc:
        print(f"phase3_seeds: {exc}", file=sys.stderr)
        return 2
    print(render(figures, list(runs)))
    if args.json:
        atomic.write_json(args.json, {"seeds": list(runs), "figures": figures})
    return 0


if __name__ == "__main__":
    sys.exit(main())

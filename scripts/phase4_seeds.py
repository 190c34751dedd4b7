"""Phase 4 over seeds and step costs, as DVC experiments: does the learned policy beat never and
always spawning robustly, and does every policy stay within 0.3 of Phase 3?

    python scripts/phase4_seeds.py --seeds 1 2 --costs 0.5 1 2 --out /tmp/p4seeds   # run, compare
    python scripts/phase4_seeds.py --out /tmp/p4seeds --show                          # compare only

Seed 0 at the default step cost is main's own run (`--main-scores`, by default
`results/phase4/scores.json` as `dvc repro` left it); every other (seed, cost multiplier) pair runs `dvc exp run -n p4-s<S>-c<M> -S
phase4.seed=<S> -S phase4.step_cost=<M × default>` in the workspace, which reruns `phase4` and
what depends on it (never Phases 1–3), keeps its `scores.json` in `--out/s<S>-c<M>/`, and at the
end puts the workspace back (`params.yaml` and `dvc.lock` from git, the outputs from the DVC
cache).

Prints, per run: CTA/CPA micro-F1 of `learned`, `never` (= Phase 3's fused orchestrator) and
`always` on `wide` and `real`, and each policy's pooled F1 per critical step (`mix`); then issue
35's checks: the learned policy above both controls on each of those figures, in how many runs;
every policy's worst margin against Phase 3 over all splits (the limit is −0.3); the share of
tables with a sub-agent per split. `--json` writes the same figures.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from aegir import atomic
from aegir.errors import AegirError

POLICIES = ("learned", "never", "always")
ROOT = Path(__file__).resolve().parent.parent
# the figures issue 35 asks the learned policy to win: pooled F1 per critical step, wide and real micro-F1
FIGURES = (("mix", "cta"), ("mix", "cpa"), ("wide", "cta"), ("wide", "cpa"), ("real", "cta"), ("real", "cpa"))


def run(cmd: list[str]) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True)


def name_of(seed: int, multiplier: float) -> str:
    return f"s{seed}-c{multiplier:g}"


def run_one(seed: int, multiplier: float, default_cost: float, out: Path) -> None:
    """One (seed, step cost) as a DVC experiment in the workspace; its scores kept under `out`."""
    run(["dvc", "exp", "run", "-n", f"p4-{name_of(seed, multiplier)}", "-S", f"phase4.seed={seed}",
         "-S", f"phase4.step_cost={multiplier * default_cost:g}"])
    target = out / name_of(seed, multiplier)
    target.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(ROOT / "results/phase4/scores.json", target / "scores.json")


def restore_workspace() -> None:
    run(["git", "checkout", "--", "params.yaml", "dvc.lock"])
    run(["dvc", "checkout", "--force"])


def load_scores(path: Path) -> dict:
    try:
        scores = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise AegirError(f"{path}: not a readable Phase 4 scores.json ({exc})") from None
    missing = [p for p in POLICIES if p not in scores or "mix" not in scores[p]]
    if missing:
        raise AegirError(f"{path}: no scores for {missing} (a Phase 4 scores.json has {', '.join(POLICIES)} with mix)")
    return scores


def figure(scores: dict, policy: str, where: str, task: str) -> float:
    if where == "mix":
        return scores[policy]["mix"]["f1_per_critical_step"][task]
    return scores[policy][task][where]["micro_f1"]


def summarize(runs: dict[str, dict]) -> dict:
    """Per run: the figures of every policy, the learned policy's wins over each control, the
    worst margin of each policy against Phase 3 (never) over every split and task, and the
    learned policy's spawn share per split; and the learned policy's wins counted over runs."""
    out: dict = {"runs": {}, "wins": {}}
    for name, s in runs.items():
        figures = {f"{where}/{task}": {p: figure(s, p, where, task) for p in POLICIES} for where, task in FIGURES}
        worst = {}
        for policy in ("learned", "always"):
            margins = [(round(s[policy][task][split]["micro_f1"] - s["never"][task][split]["micro_f1"], 2),
                        f"{task} {split}") for task in ("cta", "cpa") for split in s["never"][task]]
            worst[policy] = dict(zip(("margin", "where"), min(margins, key=lambda m: m[0])))  # the first lowest
        out["runs"][name] = {"figures": figures, "worst_against_phase3": worst,
                             "spawn_share": {split: v["spawn_share"] for split, v in s["learned"]["spawn"].items()},
                             "consult_share": {split: v.get("consult_share") for split, v in s["learned"]["spawn"].items()}}
    for key in (f"{where}/{task}" for where, task in FIGURES):
        out["wins"][key] = {control: sum(1 for r in out["runs"].values()
                                         if r["figures"][key]["learned"] > r["figures"][key][control])
                            for control in ("never", "always")}
    out["wins"]["runs"] = len(runs)
    return out


def render(summary: dict) -> str:
    lines = ["Phase 4 runs (learned / never = Phase 3 / always): micro-F1 on wide and real, F1 per critical step pooled"]
    for name, r in summary["runs"].items():
        cells = "  ".join(f"{key} " + "/".join(f"{r['figures'][key][p]:.2f}" for p in POLICIES) for key in r["figures"])
        worst = "  ".join(f"{p} {w['margin']:+.2f} ({w['where']})" for p, w in r["worst_against_phase3"].items())
        lines.append(f"{name}: {cells}")
        lines.append(f"    worst against Phase 3: {worst}")
        lines.append("    learned spawn share: " + "  ".join(f"{k} {v:.2f}" for k, v in r["spawn_share"].items()))
    n = summary["wins"]["runs"]
    lines.append(f"learned above each control, runs of {n}: " + "  ".join(
        f"{key} never {w['never']} always {w['always']}" for key, w in summary["wins"].items() if key != "runs"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2], help="phase4.seed values")
    parser.add_argument("--costs", type=float, nargs="*", default=[0.5, 1.0, 2.0],
                        help="multipliers of params.yaml's phase4.step_cost")
    parser.add_argument("--out", type=Path, required=True, help="where each run's scores are kept")
    parser.add_argument("--show", action="store_true", help="only compare the runs already under --out")
    parser.add_argument("--main-scores", type=Path, default=ROOT / "results/phase4/scores.json",
                        help="seed 0 at the default cost: main's run")
    parser.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args(argv)
    try:
        if any(c <= 0 for c in args.costs):
            raise AegirError(f"--costs: multipliers must be > 0, got {args.costs}")
        default_cost = float(yaml.safe_load(args.params.read_text(encoding="utf-8"))["phase4"]["step_cost"])
        wanted = [(seed, c) for seed in args.seeds for c in args.costs]
        if not args.show:
            (args.out / name_of(0, 1.0)).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(args.main_scores, args.out / name_of(0, 1.0) / "scores.json")
            try:
                for seed, c in wanted:
                    if (seed, c) != (0, 1.0):
                        run_one(seed, c, default_cost, args.out)
            finally:
                restore_workspace()
        def path_of(seed: int, c: float) -> Path:
            kept = args.out / name_of(seed, c) / "scores.json"
            return args.main_scores if (seed, c) == (0, 1.0) and not kept.is_file() else kept

        runs = {name_of(seed, c): load_scores(path_of(seed, c)) for seed, c in wanted}
        summary = summarize(runs)
    except AegirError as exc:
        print(f"phase4_seeds: {exc}", file=sys.stderr)
        return 2
    print(render(summary))
    if args.json:
        atomic.write_json(args.json, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())

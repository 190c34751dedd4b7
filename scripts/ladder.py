"""The scale ladder on the CPU: each preset's Phase 1 primary trained on the ladder's schedule rule
(aegir.train.ladder) on the same prepared data, scored on every split, with a check that every
larger preset scores at least as well as the one below it.

    python scripts/ladder.py [--presets tiny small cpu mid] [--root runs/ladder] [--json F] [--figure F.png]

Each preset runs the `primary` stage's command (`python -m aegir.stages.phase1 --agent primary`)
with params.yaml's settings but `primary.preset`, the rule's `phase1.lr`, `phase1.warmup_steps` and
`primary.epochs`, and no mid-run resume states (`phase1.checkpoint_every: 0`), into
`<root>/<preset>/`. A preset whose scores are already there is not trained again (delete its
directory to retrain). Not part of `dvc repro`: `mid` alone takes about half an hour on 2 cores.
Prints, per preset: parameters (and dense ones, without the n-gram rows and the byte
embedding), the schedule, training seconds, CTA and CPA micro-F1 per split and their mean over
the splits; then every place where a larger preset scores below the one under it. Writes the
rows to `--json` and CTA/CPA against parameters to `--figure`. docs/ladder.md has the latest run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from aegir import atomic
from aegir.config import SPLITS as ALL_SPLITS
from aegir.config import TRAIN_SPLIT, load_params, parse_params
from aegir.eval.report import TASKS
from aegir.model.network import AegirModel
from aegir.train.ladder import schedule
from aegir.train.setup import model_config

SPLITS = tuple(split for split in ALL_SPLITS if split != TRAIN_SPLIT)  # the ones phase1 scores


def preset_params(base: dict, preset: str) -> dict:
    """params.yaml's content with `preset` as the primary's, on the rule's schedule."""
    params = json.loads(json.dumps(base))
    params["primary"]["preset"] = preset
    for agent in params.get("specialists", {}).values():  # not trained here; an `init: primary` one must match
        agent["preset"] = preset
    for key, value in schedule(int(params["presets"][preset]["d_model"])).overrides().items():
        section, leaf = key.split(".")
        params[section][leaf] = value
    params["phase1"]["checkpoint_every"] = 0
    parse_params(params)  # every key checked before any work
    return params


def train(preset: str, base: dict, root: Path, data: Path) -> Path:
    """Train (unless done) one preset's primary; the directory of its results."""
    out = root / preset
    scores = out / "results" / "scores.json"
    if scores.exists():
        print(f"{preset}: scores there, not retrained ({scores})", flush=True)
        return out
    params_file = out / "params.yaml"
    atomic.write_text(params_file, yaml.safe_dump(preset_params(base, preset), sort_keys=False))
    command = [sys.executable, "-m", "aegir.stages.phase1", "--agent", "primary", "--params", str(params_file),
               "--data", str(data), "--out", str(out / "model"), "--metrics", str(out / "results"),
               "--state", str(out / "state")]
    print("$", " ".join(command), flush=True)
    if subprocess.run(command, env={**os.environ, "PYTHONUNBUFFERED": "1"}).returncode:
        raise SystemExit(f"{preset}: training failed ({' '.join(command)})")
    return out


def row(preset: str, out: Path) -> dict:
    """One rung's figures, its schedule as the params it trained with say."""
    params = load_params(out / "params.yaml")
    model = AegirModel(model_config(params, preset))
    scores = json.loads((out / "results" / "scores.json").read_text())
    wall = json.loads((out / "results" / "wall.json").read_text())
    f1 = {task: {split: scores[task][split]["micro_f1"] for split in SPLITS} for task in TASKS}
    return {"preset": preset, "parameters": model.num_parameters(), "dense_parameters": model.num_dense_parameters(),
            "lr": params.phase1.lr, "warmup_steps": params.phase1.warmup_steps, "epochs": params.primary.epochs,
            "steps": scores["steps"],
            "minutes": sum(wall["minutes"].values()), "micro_f1": f1,
            "mean": {task: round(sum(f1[task].values()) / len(SPLITS), 2) for task in TASKS}}


def inversions(rows: list[dict]) -> list[str]:
    """Every (task, split or mean) where a larger preset scores below the one under it."""
    found = []
    for lower, upper in zip(rows, rows[1:]):
        for task in TASKS:
            pairs = [*((s, lower["micro_f1"][task][s], upper["micro_f1"][task][s]) for s in SPLITS),
                     ("mean", lower["mean"][task], upper["mean"][task])]
            found += [f"{upper['preset']} < {lower['preset']}: {task.upper()} {name} {b:.2f} < {a:.2f}"
                      for name, a, b in pairs if b < a]
    return found


def figure(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharex=True)
    x = [r["dense_parameters"] for r in rows]
    for ax, task in zip(axes, TASKS):
        for split in ("test", "corner_cases", "real", "wide"):
            ax.plot(x, [r["micro_f1"][task][split] for r in rows], marker="o", label=split)
        ax.plot(x, [r["mean"][task] for r in rows], marker="s", color="black", lw=2, label="mean of 7 splits")
        for r, xi in zip(rows, x):
            ax.annotate(r["preset"], (xi, r["mean"][task]), textcoords="offset points", xytext=(4, -12), fontsize=8)
        ax.set_xscale("log")
        ax.set_xlabel("dense parameters (without n-gram rows and byte embedding)")
        ax.set_ylabel(f"{task.upper()} micro-F1")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("Phase 1 primary per preset on the ladder's schedule rule (CPU)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.png")
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["tiny", "small", "cpu", "mid"],
                        help="smallest first (default: tiny small cpu mid)")
    parser.add_argument("--root", type=Path, default=Path("runs/ladder"))
    parser.add_argument("--params", type=Path, default=Path("params.yaml"))
    parser.add_argument("--data", type=Path, default=Path("data/prepared"))
    parser.add_argument("--json", type=Path, help="write the rows here (default <root>/ladder.json)")
    parser.add_argument("--figure", type=Path, help="write the CTA/CPA curves here (default <root>/ladder.png)")
    args = parser.parse_args()
    if not (args.data / "train.parquet").exists():
        raise SystemExit(f"{args.data}: no prepared data (run `dvc repro prepare` first)")
    try:
        base = yaml.safe_load(args.params.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise SystemExit(f"{args.params}: cannot read the params ({exc})") from None
    if not isinstance(base, dict) or not isinstance(base.get("presets"), dict):
        raise SystemExit(f"{args.params}: not a params.yaml (no `presets` section)")
    unknown = [p for p in args.presets if p not in base["presets"]]
    if unknown:
        raise SystemExit(f"--presets: {', '.join(unknown)} not in {args.params} (known: {', '.join(base['presets'])})")
    rows = [row(preset, train(preset, base, args.root, args.data)) for preset in args.presets]
    print(f"\n{'preset':6s} {'params':>11s} {'dense':>10s} {'lr':>8s} {'warm':>4s} {'ep':>2s} {'min':>6s}  "
          + "  ".join(f"{s[:6]:>6s}" for s in SPLITS) + "    mean")
    for task in TASKS:
        print(task.upper())
        for r in rows:
            print(f"{r['preset']:6s} {r['parameters']:>11,} {r['dense_parameters']:>10,} {r['lr']:>8.5f} "
                  f"{r['warmup_steps']:>4d} {r['epochs']:>2d} {r['minutes']:>6.2f}  "
                  + "  ".join(f"{r['micro_f1'][task][s]:6.2f}" for s in SPLITS) + f"  {r['mean'][task]:6.2f}")
    found = inversions(rows)
    print("\nevery larger preset at least as good as the one below: " + ("yes" if not found else "no"))
    for line in found:
        print("  " + line)
    result = {"presets": args.presets, "rows": rows, "inversions": found}
    atomic.write_json(args.json or args.root / "ladder.json", result)
    figure(rows, args.figure or args.root / "ladder.png")


if __name__ == "__main__":
    main()

"""Training curves as pictures: read DVCLive's TSV files and draw them with matplotlib.

DVCLive writes one TSV per logged metric under `<live dir>/plots/metrics/<name>.tsv`, columns
`step` and the metric's last name part. `read_curve` reads one; `phase3_curves_png` draws the
figure the Phase 3 report shows: the reward components, the routing, the clipped objective's
diagnostics, and validation F1 of the fused orchestrator beside its control.
"""

from __future__ import annotations

import csv
from pathlib import Path


def read_curve(live_dir: str | Path, name: str) -> tuple[list[int], list[float]]:
    """(steps, values) of metric `name` (e.g. "reward/r_perf") logged under `live_dir`; empty
    lists when it was never logged."""
    path = Path(live_dir) / "plots" / "metrics" / f"{name}.tsv"
    if not path.is_file():
        return [], []
    with path.open(newline="") as handle:
        rows = list(csv.reader(handle, delimiter="\t"))[1:]
    return [int(r[0]) for r in rows], [float(r[1]) for r in rows]


def phase3_curves_png(fused_dir: str | Path, control_dir: str | Path, specialists: list[str]) -> bytes:
    """A 2 × 2 figure as PNG bytes: rewards (fused), routing (activation rate per specialist,
    budget cap), PPO diagnostics (clip fraction, approx. KL, ε), validation CTA/CPA micro-F1
    (fused vs control)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    ax = axes[0][0]
    for name in ("reward", "r_perf", "r_parallel", "r_finish"):
        ax.plot(*read_curve(fused_dir, f"reward/{name}"), label=name)
    ax.set(xlabel="step", ylabel="mean over rollouts", title="Rewards (fused run)")
    ax.legend(fontsize=8)

    ax = axes[0][1]
    for name in specialists:
        ax.plot(*read_curve(fused_dir, f"routing/activation_rate/{name}"), label=f"activates {name}")
    steps, cap = read_curve(fused_dir, "budget/cap")
    if steps:
        right = ax.twinx()
        right.step(steps, cap, where="post", color="grey", alpha=0.4, label="budget cap, window mean (0 = none)")
        right.set_ylabel("cap: specialists per batch")
        right.legend(fontsize=8, loc="upper right")
    ax.set(xlabel="step", ylabel="share of rollouts", title="Routing (fused run)")
    ax.legend(fontsize=8, loc="upper left")

    ax = axes[1][0]
    for name, label in (("ppo/clip_fraction", "clip fraction"), ("ppo/approx_kl", "approx. KL(old‖new)"),
                        ("ppo/epsilon", "ε")):
        ax.plot(*read_curve(fused_dir, name), label=label)
    ax.set(xlabel="step", title="Clipped objective (fused run)")
    ax.legend(fontsize=8)

    ax = axes[1][1]
    for run, directory, style in (("fused", fused_dir, "-"), ("control", control_dir, "--")):
        for task in ("cta", "cpa"):
            ax.plot(*read_curve(directory, f"valid/{task}_micro_f1"), style, marker="o",
                    label=f"{run} {task.upper()}")
    ax.set(xlabel="step", ylabel="micro-F1 (valid)", title="Validation F1: fused vs control")
    ax.legend(fontsize=8)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return buffer.getvalue()

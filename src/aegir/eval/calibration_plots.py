"""The `calibrate` stage's figures (PNG, DVC plots), from calibration.json's checkpoint entries
(`aegir.eval.calibration_report.calibrate_checkpoint`): reliability on `real` of the model's own
confidences and of the calibrated ones out of family, and accuracy and coverage against the
minimum confidence.
"""

from __future__ import annotations

from collections.abc import Mapping

from aegir.config import REAL_SPLIT
from aegir.eval.calibration import TARGET_ACCURACY, TASKS


def calibration_figures(entries: Mapping[str, Mapping]) -> dict[str, bytes]:
    """The stage's figures/: file name → PNG bytes."""
    return {"reliability.png": reliability_png(entries), "coverage.png": coverage_png(entries)}


def reliability_png(entries: Mapping[str, Mapping], real_split: str = REAL_SPLIT) -> bytes:
    """Rows: checkpoints; columns: CTA, CPA. Accuracy against mean confidence per bin on
    `real_split`: the model's own confidences and the beta map's, each family mapped by the
    map fitted on the others; the diagonal for reference; the ECE of each in the legend."""
    from aegir.eval.report import _pyplot, png_bytes

    plt = _pyplot()
    fig, axes = plt.subplots(len(entries), len(TASKS), figsize=(4.2 * len(TASKS), 3.6 * len(entries)),
                             squeeze=False)
    for r, (path, entry) in enumerate(entries.items()):
        for c, task in enumerate(TASKS):
            ax = axes[r][c]
            ax.plot([0, 1], [0, 1], color="0.6", linestyle=":", linewidth=1)
            real = entry.get(real_split, {}).get(task, {})
            own = entry["splits"].get(real_split, {}).get(task, {}).get("before")
            held = real.get("out_of_family")
            for kind, color, marker, ece in (("before", "C3", "o", own), ("out_of_family", "C0", "s", held)):
                bins = [b for b in (real.get("reliability", {}).get(kind) or []) if b["count"]]
                label = "own" if kind == "before" else "calibrated, out of family"
                if ece:
                    label += f", ECE {100 * ece['ece']:.1f} %"
                ax.plot([b["confidence"] for b in bins], [b["accuracy"] for b in bins], marker=marker,
                        markersize=4, color=color, label=label)
            ax.set(xlim=(0, 1), ylim=(0, 1.02), xlabel="top-1 confidence (bin mean)", ylabel="accuracy",
                   title=f"{entry.get('name', path)}: {task.upper()} on {real_split}")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return png_bytes(fig)


def coverage_png(entries: Mapping[str, Mapping], real_split: str = REAL_SPLIT) -> bytes:
    """Per task: accuracy (solid) and coverage (dashed) on `real_split` against the minimum
    confidence, the calibrated confidences `aegir annotate --min-confidence` compares by default
    (each family's out of family; the model's own where there is no such curve), one colour per
    checkpoint; the target accuracy as a line."""
    from aegir.eval.report import _pyplot, png_bytes

    plt = _pyplot()
    fig, axes = plt.subplots(1, len(TASKS), figsize=(5.5 * len(TASKS), 4.2), squeeze=False)
    for ax, task in zip(axes[0], TASKS):
        for i, (path, entry) in enumerate(entries.items()):
            real = entry.get(real_split, {}).get(task, {})
            curve = (real.get("out_of_family") or real).get("coverage", [])
            name = entry.get("name", path)
            ax.plot([row["min_confidence"] for row in curve if row["accuracy"] is not None],
                    [row["accuracy"] for row in curve if row["accuracy"] is not None], color=f"C{i}", marker="o",
                    markersize=3, label=f"{name}: accuracy")
            ax.plot([row["min_confidence"] for row in curve], [row["coverage"] for row in curve], color=f"C{i}",
                    linestyle="--", label=f"{name}: coverage")
        ax.axhline(TARGET_ACCURACY, color="0.5", linestyle=":", linewidth=1)
        ax.set(xlim=(0, 1), ylim=(0, 1.02), xlabel="--min-confidence P (calibrated confidences, out of family)",
               ylabel="share", title=f"{task.upper()} on {real_split}: accuracy of the kept, share kept")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    return png_bytes(fig)

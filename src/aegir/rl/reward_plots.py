"""The plots of Phase 2's reward study: the data behind each (CSV rows) and its PNG.

From the report of `aegir.rl.reward_study`: r_perf and r_finish under controlled corruption,
r_parallel and r_finish per routing pattern, and the router ascents (activation rate per step,
the exact expected r_perf). PNGs are drawn with matplotlib's Agg backend.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path


def plot_tables(report: dict) -> dict[str, list[list]]:
    """The data behind each plot, as CSV rows (header first)."""
    checks = report["checks"]
    model, gold, drop = (checks[k] for k in ("r_perf.corruption_model", "r_perf.corruption_gold",
                                                "r_finish.dropped_columns"))
    corruption = [["level", "r_perf_model", "r_perf_gold", "r_finish_dropped"]]
    corruption += [list(row) for row in zip(model["levels"], model["r_perf_mean"], gold["r_perf_mean"],
                                            drop["r_finish_mean"])]
    par, fin = checks["r_parallel.patterns"], checks["r_finish.patterns"]
    routing = [["pattern", "r_parallel", "r_finish", "activation_rate", "degeneracy"]]
    routing += [[name, par["mean"][name], fin["mean"][name], par["activation_rate"][name], par["degeneracy"][name]]
                for name in par["mean"]]
    runs = {f"{c}_from_{s}": checks[f"{c}.ascent_from_{s}"]["activation_rate"]
            for c in ("r_parallel", "r_finish") for s in ("on", "off")}
    runs["r_perf_from_half"] = checks["r_perf.ascent"]["activation_rate"]
    ascent = [["step", *runs, "r_perf_expected"]]
    ascent += [[step, *(r[step] for r in runs.values()), checks["r_perf.ascent"]["expected_r_perf"][step]]
               for step in range(len(runs["r_perf_from_half"]))]
    return {"corruption": corruption, "routing": routing, "ascent": ascent}


def csv_text(rows: list[list]) -> str:
    """The rows as CSV text, one line each ending in a newline."""
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    return buffer.getvalue()


def draw_plots(tables: dict[str, list[list]], target_share: float, plots_dir: Path) -> None:
    """PNG of each plot table (matplotlib, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def columns(rows: list[list]) -> dict[str, list]:
        return {name: [row[i] for row in rows[1:]] for i, name in enumerate(rows[0])}

    c = columns(tables["corruption"])
    fig, ax = plt.subplots(figsize=(6, 4))
    for key, label in (("r_perf_model", "r_perf, model predictions corrupted"),
                       ("r_perf_gold", "r_perf, gold labels corrupted"),
                       ("r_finish_dropped", "r_finish, annotations dropped")):
        ax.plot(c["level"], c[key], marker="o", label=label)
    ax.set(xlabel="share corrupted / dropped", ylabel="mean reward", title="Reward vs controlled corruption")
    ax.legend()
    fig.tight_layout()
    fig.savefig(plots_dir / "corruption.png", dpi=100)
    plt.close(fig)

    r = columns(tables["routing"])
    fig, ax = plt.subplots(figsize=(6, 4))
    x = list(range(len(r["pattern"])))
    ax.bar([i - 0.2 for i in x], r["r_parallel"], width=0.4, label="r_parallel")
    ax.bar([i + 0.2 for i in x], r["r_finish"], width=0.4, label="r_finish")
    ax.set_xticks(x, r["pattern"])
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.set(ylabel="mean reward", title="Reward vs routing pattern")
    ax.legend()
    fig.tight_layout()
    fig.savefig(plots_dir / "routing.png", dpi=100)
    plt.close(fig)

    a = columns(tables["ascent"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for key in [k for k in a if k.endswith(("_on", "_off", "_half"))]:
        left.plot(a["step"], a[key], label=key)
    left.axhline(target_share, color="grey", linestyle="--", label="target share")
    left.set(xlabel="ascent step", ylabel="activation rate", title="Router ascent")
    left.legend(fontsize=8)
    right.plot(a["step"], a["r_perf_expected"], color="tab:purple")
    right.set(xlabel="ascent step", ylabel="E[r_perf] (exact)", title="r_perf ascent from rate 1/2")
    fig.tight_layout()
    fig.savefig(plots_dir / "ascent.png", dpi=100)
    plt.close(fig)


"""The results report: every stage's headline F1 in one table, routing, and figures.

`collect` reads the F1 per split the stages write to their `scores.json` (their DVC metrics
hold only headline figures: `aegir.eval.metrics.headline`) and the DVCLive curves of the
training stages into one `Report`; `report_markdown`, `report_gains` and the `*_png`
functions turn it into what `aegir.stages.report` writes to `results/report/`. Everything
here is a pure function of the files read: the same inputs give byte-identical markdown, JSON
and PNG (`png_bytes` strips the metadata that names the matplotlib version).

Inputs, and the stage that writes each:

| input                                   | stage        | read                                    |
|-----------------------------------------|--------------|-----------------------------------------|
| `results/baselines/scores.json`         | `baselines`  | F1 per task and split                   |
| `results/phase1/<agent>/scores.json`    | `phase1`     | F1 of the primary (the report's row)    |
| `results/phase1/<agent>/live/`          | `phase1`     | train loss, validation micro-F1 curves  |
| `results/phase3/scores.json`            | `phase3`     | F1 of `control` and `fused`; `routing`  |
| `results/phase3/live/{fused,control}/`  | `phase3`     | train loss, validation micro-F1 curves  |
| `results/phase4/scores.json` (opt.)     | `phase4`     | F1 of each policy; `*_by_domain` tables |
| `results/phase4/scaling.json` (opt.)    | `phase4`     | rows per (n, policy): the scaling curve |
| `results/calibrate/calibration.json` (opt.) | `calibrate` | ECE and coverage on `real` per model |

F1 layout: `{task: {split: {"micro_f1": …, "macro_f1": …}}}` in percent (the stages'
scores.json; `micro`/`macro` are read too); a `train` split (the baseline scores its training
data) is not an evaluation split and is left out. A Phase 4 scores file is either one such
tree (one row, "Phase 4") or a mapping of policy name → tree (one row per policy, "Phase 4 <name>", in file order); its other top-level
mappings may hold `<what>_by_domain` tables (domain → value, or domain → name → value), drawn
as heatmaps beside Phase 3's routing. `scaling.json` is a list of rows (or a mapping holding
one such list, as DVC plots accept), each with `n`, `policy` and numbers, nested or not:
nested keys are joined with `/` (`cta/test/micro_f1`).
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aegir.config import REAL_DOMAINS, REAL_SPLIT, SPLITS, TRAIN_SPLIT
from aegir.errors import DataError
from aegir.eval.curves import read_curve

TASKS = ("cta", "cpa")


# ----------------------------------------------------------------------------- data


@dataclass(frozen=True)
class SplitF1:
    """Micro- and macro-F1 of one model on one split and task, percent; `support`: the columns
    (CTA) or pairs (CPA) scored, where the scores file says (None where it does not)."""

    micro: float
    macro: float
    support: int | None = None


@dataclass(frozen=True)
class ModelRow:
    """One model of the F1 table: `f1[task][split]`, read from `source`. `key` names it in
    the report's gains (`baseline`, `phase1`, `control`, `fused`, `phase4[_<policy>]`),
    `name` in the table."""

    key: str
    name: str
    source: str
    f1: dict[str, dict[str, SplitF1]]


@dataclass(frozen=True)
class DomainTable:
    """A heatmap's numbers: `values[domain][column]` (rates in [0, 1], or counts)."""

    title: str
    source: str
    values: dict[str, dict[str, float]]

    @property
    def columns(self) -> list[str]:
        return list(dict.fromkeys(c for row in self.values.values() for c in row))


@dataclass(frozen=True)
class Curves:
    """DVCLive curves of one training run: name → (steps, values)."""

    run: str
    source: str
    series: dict[str, tuple[list[int], list[float]]]


@dataclass(frozen=True)
class Report:
    """Everything the report shows, in the order it shows it."""

    rows: list[ModelRow]
    activation_rate: dict[str, float]  # Phase 3: share of tables that activated each specialist
    domain_tables: list[DomainTable]  # Phase 3's activation by domain, then Phase 4's tables
    phase1_curves: list[Curves]  # one per Phase 1 agent, primary first
    phase3_curves: list[Curves]  # fused, control
    scaling: list[dict[str, Any]] = field(default_factory=list)  # Phase 4 rows, flattened
    sources: list[str] = field(default_factory=list)  # every file and curve directory read, in order
    calibration: list[dict[str, Any]] = field(default_factory=list)  # per checkpoint and task, on `real`
    # the `real` split per domain: {row key ("baseline", "phase1"): {task: {domain: SplitF1}}}
    real_domains: dict[str, dict[str, dict[str, SplitF1]]] = field(default_factory=dict)

    @property
    def splits(self) -> list[str]:
        """Every split any row has: the configured order (`aegir.config.SPLITS`), then others
        (e.g. a split only Phase 4 reports) in the order they first appear."""
        seen = dict.fromkeys(s for row in self.rows for task in TASKS for s in row.f1.get(task, {}))
        return [s for s in SPLITS if s in seen] + [s for s in seen if s not in SPLITS]


# ----------------------------------------------------------------------------- reading


def rerun_hint(stage: str) -> str:
    return f"run `dvc repro {stage}` (or `snakemake --cores all {stage}`) first"


def read_json(path: str | Path, stage: str) -> Any:
    """The JSON content of `path`, which stage `stage` writes; a `DataError` naming the file and
    the stage to run when it is missing or not JSON."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(path, f"not found: the `{stage}` stage writes it; {rerun_hint(stage)}") from None
    except (IsADirectoryError, UnicodeDecodeError) as exc:
        raise DataError(path, f"not a JSON file ({exc}); {rerun_hint(stage)}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(path, f"not valid JSON ({exc}); {rerun_hint(stage)}") from None


def _percent(value: Any, path: Path, where: str, stage: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 100.0:
        raise DataError(path, f"{where}: expected an F1 in percent (0 … 100), got {value!r}; {rerun_hint(stage)}")
    return float(value)


def is_f1_tree(tree: Any) -> bool:
    """Does `tree` look like `{cta: {split: …}, cpa: {split: …}}`?"""
    return isinstance(tree, Mapping) and all(isinstance(tree.get(task), Mapping) for task in TASKS)


def parse_f1(tree: Any, path: str | Path, stage: str, where: str = "") -> dict[str, dict[str, SplitF1]]:
    """`{task: {split: SplitF1}}` from a stage's F1 tree (layout in the module docstring);
    a `DataError` naming the file and the key at fault otherwise. `where` prefixes key paths
    (the tree's place in its file, e.g. "fused.")."""
    path = Path(path)
    out: dict[str, dict[str, SplitF1]] = {}
    for task in TASKS:
        by_split = tree.get(task) if isinstance(tree, Mapping) else None
        if not isinstance(by_split, Mapping) or not by_split:
            raise DataError(path, f"{where}{task}: expected F1 per split, found {type(by_split).__name__}; "
                                  f"{rerun_hint(stage)}")
        out[task] = {}
        for split, scores in by_split.items():
            if split == TRAIN_SPLIT:
                continue
            key = f"{where}{task}.{split}"
            if not isinstance(scores, Mapping):
                raise DataError(path, f"{key}: expected micro and macro F1, got {scores!r}; {rerun_hint(stage)}")
            micro = scores.get("micro", scores.get("micro_f1"))
            macro = scores.get("macro", scores.get("macro_f1"))
            support = scores.get("support")
            out[task][split] = SplitF1(_percent(micro, path, f"{key}.micro", stage),
                                       _percent(macro, path, f"{key}.macro", stage),
                                       support if isinstance(support, int) and not isinstance(support, bool) else None)
    return out


def _rates(tree: Any, path: Path, where: str, stage: str) -> dict[str, float]:
    if not isinstance(tree, Mapping):
        raise DataError(path, f"{where}: expected name → number, got {tree!r}; {rerun_hint(stage)}")
    out = {}
    for name, value in tree.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise DataError(path, f"{where}.{name}: expected a number, got {value!r}; {rerun_hint(stage)}")
        out[str(name)] = float(value)
    return out


def parse_domain_table(tree: Any, path: str | Path, stage: str, where: str, title: str) -> DomainTable:
    """A `DomainTable` from `{domain: {name: value}}` or `{domain: value}` (one column, named
    after the key's `<what>` in `<what>_by_domain`)."""
    path = Path(path)
    if not isinstance(tree, Mapping) or not tree:
        raise DataError(path, f"{where}: expected domain → values, got {tree!r}; {rerun_hint(stage)}")
    column = where.rsplit(".", 1)[-1].removesuffix("_by_domain")
    values = {}
    for domain, row in tree.items():
        values[str(domain)] = (_rates(row, path, f"{where}.{domain}", stage) if isinstance(row, Mapping)
                               else _rates({column: row}, path, f"{where}.{domain}", stage))
    return DomainTable(title, str(path), values)


def read_curves(live_dir: str | Path, run: str, stage: str) -> Curves:
    """Train loss and validation CTA/CPA micro-F1 of one DVCLive run directory. A metric the run
    did not log is an empty series; a missing run directory is a `DataError`."""
    live_dir = Path(live_dir)
    metrics_dir = live_dir / "plots" / "metrics"
    if not metrics_dir.is_dir():
        raise DataError(metrics_dir, f"DVCLive curves not found: the `{stage}` stage writes them; {rerun_hint(stage)}")
    names = ("train/loss", "valid/cta_micro_f1", "valid/cpa_micro_f1")
    return Curves(run, str(live_dir), {name: read_curve(live_dir, name) for name in names})


def _flatten(row: Mapping, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in row.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flatten(value, name + "/"))
        else:
            out[name] = value
    return out


SCALING_STEP_FIGURES = ("critical_steps", "total_steps", "mean_spawned", "mean_subagents", "mean_wide_subagents")


def policy_rows(row: Mapping) -> list[Mapping]:
    """The phase4 stage writes one row per n with every policy's figures side by side
    (`learned_wide_cta_micro_f1`, `never_test_critical_steps`, …): split such a row into one row
    per policy (`{"n": 4, "policy": "learned", "cta/wide/micro_f1": …, "wide/critical_steps": …}`).
    A row that names its `policy` is returned as it is."""
    if "policy" in row or "n" not in row:
        return [row]
    by_policy: dict[str, dict[str, Any]] = {}
    for key, value in row.items():
        if key == "n" or "_" not in key:
            continue
        policy, rest = key.split("_", 1)
        for task in TASKS:
            if rest.endswith(f"_{task}_micro_f1"):
                name = f"{task}/{rest[:-len(f'_{task}_micro_f1')]}/micro_f1"
                break
        else:
            figure = next((f for f in SCALING_STEP_FIGURES if rest.endswith(f"_{f}")), None)
            name = f"{rest[:-len(figure) - 1]}/{figure}" if figure else rest
        by_policy.setdefault(policy, {"n": row["n"], "policy": policy})[name] = value
    return list(by_policy.values()) or [row]


def parse_scaling(tree: Any, path: str | Path) -> list[dict[str, Any]]:
    """Phase 4's scaling rows, flattened (`{"n": 4, "policy": "learned", "cta/test/micro_f1": …}`),
    sorted by (policy in first-seen order, n)."""
    path = Path(path)
    rows = tree
    if isinstance(tree, Mapping):
        lists = [value for value in tree.values() if isinstance(value, list)]
        if len(lists) != 1:
            raise DataError(path, f"expected a list of rows (or a mapping holding one), found keys {sorted(tree)}; "
                                  f"{rerun_hint('phase4')}")
        rows = lists[0]
    if not isinstance(rows, list) or not rows:
        raise DataError(path, f"expected a non-empty list of rows; {rerun_hint('phase4')}")
    flat = []
    rows = [part for row in rows for part in (policy_rows(row) if isinstance(row, Mapping) else [row])]
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise DataError(path, f"row {i}: expected a mapping, got {row!r}; {rerun_hint('phase4')}")
        row = _flatten(row)
        n, policy = row.get("n"), row.get("policy")
        if isinstance(n, bool) or not isinstance(n, int) or n < 0 or not isinstance(policy, str):
            raise DataError(path, f"row {i}: expected `n` (an integer ≥ 0) and `policy` (a name), got "
                                  f"n={n!r}, policy={policy!r}; {rerun_hint('phase4')}")
        flat.append(row)
    order = {p: i for i, p in enumerate(dict.fromkeys(r["policy"] for r in flat))}
    return sorted(flat, key=lambda r: (order[r["policy"]], r["n"]))


def phase4_rows(tree: Any, path: str | Path) -> list[ModelRow]:
    """One row per Phase 4 policy (layouts in the module docstring)."""
    if is_f1_tree(tree):
        return [ModelRow("phase4", "Phase 4", str(path), parse_f1(tree, path, "phase4"))]
    if not isinstance(tree, Mapping):
        raise DataError(path, f"expected a JSON object, got {type(tree).__name__}; {rerun_hint('phase4')}")
    rows = [ModelRow(f"phase4_{name}", f"Phase 4 {name}", str(path), parse_f1(sub, path, "phase4", f"{name}."))
            for name, sub in tree.items() if is_f1_tree(sub)]
    if not rows:
        raise DataError(path, f"no F1 per task and split found (top-level keys: {', '.join(map(str, tree))}); "
                              f"{rerun_hint('phase4')}")
    return rows


def phase4_domain_tables(tree: Any, path: str | Path) -> list[DomainTable]:
    """Every `<what>_by_domain` table in the non-F1 top-level sections of Phase 4's scores."""
    if not isinstance(tree, Mapping):
        return []
    tables = []
    for section, sub in tree.items():
        if not isinstance(sub, Mapping) or is_f1_tree(sub):
            continue
        for key, value in sub.items():
            if str(key).endswith("_by_domain"):
                tables.append(parse_domain_table(value, path, "phase4", f"{section}.{key}",
                                                 f"Phase 4: {section} {str(key).replace('_', ' ')}"))
    return tables


def parse_calibration(tree: Any, path: str | Path) -> list[dict[str, Any]]:
    """The `calibrate` stage's calibration.json as rows, one per checkpoint and task: its name,
    the accuracy and expected calibration error on the real split with the model's own
    confidences and with the beta map fitted on the other families (None with fewer than
    two), and the least calibrated confidence that reaches the target accuracy out of family
    (or the most accurate threshold when none does; the model's own curve without families)."""
    try:
        real, target = tree["real_split"], float(tree["target_accuracy"])
        rows = []
        for checkpoint, entry in tree["checkpoints"].items():
            for task in TASKS:
                split = entry["splits"][real][task]
                held = entry[real][task]["out_of_family"]
                curve = held if held is not None else entry[real][task]
                rows.append({"checkpoint": checkpoint, "name": entry["name"], "task": task,
                             "accuracy": float(split["accuracy"]), "ece": float(split["before"]["ece"]),
                             "map": {k: float(entry["map"][task].get(k, entry["map"][task]["a"])) for k in ("a", "b", "d")},
                             "ece_out_of_family": None if held is None else float(held["ece"]),
                             "families": None if held is None else int(held["families"]),
                             "real_split": real, "target": target, "for_accuracy": curve["for_accuracy"],
                             "most_accurate": curve["most_accurate"]})
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise DataError(path, f"not a calibration.json of the calibrate stage ({exc!r}); "
                              f"{rerun_hint('calibrate')}") from None
    return rows


def collect(baselines: str | Path, phase1_dir: str | Path, phase3_dir: str | Path,
            phase4_dir: str | Path | None = None, calibration: str | Path | None = None) -> Report:
    """Read every input (paths in the module docstring) into a `Report`.

    phase1_dir holds one directory per agent; the agents are the subdirectories holding a
    `scores.json` (sorted, `primary` first, which must be there): the primary's F1 is the
    report's Phase 1 row, every agent's curves are drawn. phase4_dir is optional; with it,
    its `scores.json` is required and its `scaling.json` read when present. calibration (the
    `calibrate` stage's calibration.json) is optional too: with it the report has a
    calibration section.
    """
    phase1_dir, phase3_dir = Path(phase1_dir), Path(phase3_dir)
    sources: list[str] = []

    def load(path: Path, stage: str) -> Any:
        sources.append(str(path))
        return read_json(path, stage)

    baseline_tree = load(Path(baselines), "baselines")
    rows = [ModelRow("baseline", "baseline (TF-IDF + LR)", str(baselines),
                     parse_f1(baseline_tree, baselines, "baselines"))]
    if not phase1_dir.is_dir():
        raise DataError(phase1_dir, f"Phase 1 results directory not found; {rerun_hint('phase1')}")
    primary = phase1_dir / "primary" / "scores.json"
    primary_tree = load(primary, "phase1")
    rows.append(ModelRow("phase1", "Phase 1 primary", str(primary), parse_f1(primary_tree, primary, "phase1")))
    # per domain of `real`, where both files have it (files written before it was scored lack it)
    real_domains = {}
    if all(isinstance(tree, Mapping) and REAL_DOMAINS in tree for tree in (baseline_tree, primary_tree)):
        real_domains = {"baseline": parse_f1(baseline_tree[REAL_DOMAINS], baselines, "baselines", f"{REAL_DOMAINS}."),
                        "phase1": parse_f1(primary_tree[REAL_DOMAINS], primary, "phase1", f"{REAL_DOMAINS}.")}
    agents = ["primary"] + sorted(p.name for p in phase1_dir.iterdir()
                                  if p.name != "primary" and (p / "scores.json").is_file())
    phase1_curves = [read_curves(phase1_dir / agent / "live", agent, "phase1") for agent in agents]
    sources += [curves.source for curves in phase1_curves]

    phase3_path = phase3_dir / "scores.json"
    phase3 = load(phase3_path, "phase3")
    for name, label in (("control", "Phase 3 control"), ("fused", "Phase 3 fused")):
        rows.append(ModelRow(name, label, str(phase3_path),
                             parse_f1(phase3.get(name) if isinstance(phase3, Mapping) else None,
                                      phase3_path, "phase3", f"{name}.")))
    routing = phase3.get("routing")
    activation = _rates(routing.get("activation_rate") if isinstance(routing, Mapping) else None,
                        phase3_path, "routing.activation_rate", "phase3")
    domain_tables = [parse_domain_table(routing.get("activation_rate_by_domain"), phase3_path, "phase3",
                                        "routing.activation_rate_by_domain",
                                        "Phase 3: share of tables that activated each specialist")]
    if real_domains:
        for name in ("control", "fused"):
            tree = phase3.get(name) if isinstance(phase3, Mapping) else None
            if isinstance(tree, Mapping) and REAL_DOMAINS in tree:
                real_domains[name] = parse_f1(tree[REAL_DOMAINS], phase3_path, "phase3", f"{name}.{REAL_DOMAINS}.")
    phase3_curves = [read_curves(phase3_dir / "live" / run, run, "phase3") for run in ("fused", "control")]
    sources += [curves.source for curves in phase3_curves]

    scaling: list[dict[str, Any]] = []
    if phase4_dir is not None:
        phase4_dir = Path(phase4_dir)
        path = phase4_dir / "scores.json"
        phase4 = load(path, "phase4")
        rows.extend(phase4_rows(phase4, path))
        learned = phase4.get("learned") if isinstance(phase4, Mapping) else None
        if real_domains and isinstance(learned, Mapping) and REAL_DOMAINS in learned:
            real_domains["phase4_learned"] = parse_f1(learned[REAL_DOMAINS], path, "phase4", f"learned.{REAL_DOMAINS}.")
        domain_tables.extend(phase4_domain_tables(phase4, path))
        if (phase4_dir / "scaling.json").is_file():
            scaling = parse_scaling(load(phase4_dir / "scaling.json", "phase4"), phase4_dir / "scaling.json")
    calibrated = parse_calibration(load(Path(calibration), "calibrate"), calibration) if calibration else []
    return Report(rows, activation, domain_tables, phase1_curves, phase3_curves, scaling, sources, calibrated,
                  real_domains)


# ----------------------------------------------------------------------------- markdown


def _cell(value: float) -> str:
    return f"{value:.1f}"


def f1_table(report: Report) -> list[str]:
    """Markdown lines: one row per (task, split), one column per model; cells "micro / macro";
    the best micro-F1 of a row in bold (every model that reaches it)."""
    header = ["task", "split"] + [row.name for row in report.rows]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * 2 + "---:|" * len(report.rows)]
    for task in TASKS:
        for split in report.splits:
            scores = [row.f1[task].get(split) for row in report.rows]
            best = max((s.micro for s in scores if s is not None), default=None)
            cells = []
            for s in scores:
                if s is None:
                    cells.append("—")
                    continue
                micro = f"**{_cell(s.micro)}**" if _cell(s.micro) == _cell(best) else _cell(s.micro)
                cells.append(f"{micro} / {_cell(s.macro)}")
            lines.append(f"| {task.upper()} | {split} | " + " | ".join(cells) + " |")
    return lines


def _domain_lines(table: DomainTable) -> list[str]:
    columns = table.columns
    lines = [f"{table.title} (`{table.source}`):", "",
             "| domain | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
    for domain, row in table.values.items():
        lines.append(f"| {domain} | " + " | ".join(_number(row[c]) if c in row else "—" for c in columns) + " |")
    return lines


def _number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def scaling_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    columns = list(dict.fromkeys(k for row in rows for k in row if k not in ("n", "policy")))
    lines = ["| policy | n | " + " | ".join(columns) + " |", "|---|---:|" + "---:|" * len(columns)]
    for row in rows:
        lines.append(f"| {row['policy']} | {row['n']} | "
                     + " | ".join(_number(row[c]) if c in row else "—" for c in columns) + " |")
    return lines


FIGURES = {  # file under figures/ → what it shows (the report links each one written)
    "f1_by_split.png": "F1 per split, every model's gain over the baseline (micro and macro, CTA and CPA)",
    "routing_by_domain.png": "routing by table domain",
    "training_curves.png": "training curves: Phase 1 agents, Phase 3 fused and control",
    "scaling.png": "Phase 4 scaling: F1 and critical steps against the sub-agent budget n",
}


REAL_DOMAIN_MODELS = {"baseline": "baseline", "phase1": "Phase 1 primary", "control": "Phase 3 control",
                      "fused": "Phase 3 fused", "phase4_learned": "Phase 4 learned"}


def real_domain_lines(real_domains: Mapping[str, Mapping[str, Mapping[str, SplitF1]]]) -> list[str]:
    """The `real` split per domain, a table per task: a row per domain, its support (the
    primary's), each model's micro-F1 in `REAL_DOMAIN_MODELS` order, and the primary's lead over
    the baseline."""
    models = [key for key in REAL_DOMAIN_MODELS if key in real_domains]
    lines = [f"## `{REAL_SPLIT}` per domain", "",
             "Micro-F1 on the real tables of each schema.org class (n: columns for CTA, pairs for CPA; "
             "`results/prepare/stats.json` lists each domain's families and labels).", ""]
    for task in TASKS:
        primary = real_domains["phase1"][task]
        lines += [f"{task.upper()}:", "",
                  "| domain | n | " + " | ".join(REAL_DOMAIN_MODELS[key] for key in models) + " | primary − baseline |",
                  "|---|---:|" + "---:|" * (len(models) + 1)]
        for domain in sorted(primary):
            cells = [domain, str(primary[domain].support)]
            cells += [_cell(real_domains[key][task][domain].micro) if domain in real_domains[key][task] else "–"
                      for key in models]
            base = real_domains["baseline"][task].get(domain)
            cells.append(f"{primary[domain].micro - base.micro:+.1f}" if base else "–")
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return lines[:-1]


def report_markdown(report: Report, figures: Sequence[str]) -> str:
    """`report.md`: the F1 table, routing, Phase 4 scaling (when given), links to `figures`
    (names under `figures/`)."""
    lines = ["# Aegir: results", "",
             "Written by `python -m aegir.stages.report` (DVC stage `report`) from:", ""]
    lines += [f"* `{source}`" for source in report.sources]
    lines += ["", "## F1 per split", "",
              "F1 in percent, each cell **micro** / macro; the best micro-F1 of each row in bold. "
              "CTA scores every annotated column, CPA every annotated (column 0, column) pair; "
              "macro-F1 averages over the labels present in that split's gold. "
              "`real` holds real tables, only ever scored.", ""]
    if any(row.key.startswith("phase4") for row in report.rows):
        lines += ["Phase 4's columns score the first `phase4.eval_tables` tables of each split (0, the default: "
                  "all of them), the other columns every table. `never` is the Phase 3 fused orchestrator read "
                  "as `phase3` reads it, so on every table it equals the Phase 3 fused column; `always` and "
                  "`learned` add sub-agents to that reading.", ""]
    lines += f1_table(report)
    if report.real_domains:
        lines += [""] + real_domain_lines(report.real_domains)
    lines += ["", "## Routing (Phase 3)", "",
              "Share of evaluated tables that activated each specialist: "
              + ", ".join(f"`{name}` {rate:.3g}" for name, rate in report.activation_rate.items()) + ".", ""]
    for table in report.domain_tables:
        lines += _domain_lines(table) + [""]
    if report.scaling:
        lines += ["## Scaling (Phase 4)", "", "One row per policy and sub-agent budget n:", ""]
        lines += scaling_table(report.scaling) + [""]
    if report.calibration:
        lines += calibration_lines(report.calibration) + [""]
    lines += ["## Figures", ""]
    lines += [f"![{FIGURES.get(name, name)}](figures/{name})" for name in figures]
    return "\n".join(lines) + "\n"


def reach_text(hit: Mapping | None, best: Mapping | None) -> str:
    """Where a target accuracy is reached on a coverage curve, in words: the least confidence P
    that reaches it (`for_accuracy`'s row), or the most accurate P when none does
    (`most_accurate`'s); the calibrate stage prints it, the report tabulates it."""
    def row(r: Mapping) -> str:
        return f"P={r['min_confidence']:.2f} keeps {100 * r['coverage']:.1f} % at {100 * r['accuracy']:.1f} %"
    return row(hit) if hit else f"not reached (best: {row(best)})" if best else "not reached"


def calibration_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The report's calibration section: per checkpoint and task, its accuracy and expected
    calibration error on the real split with its own confidences and calibrated out of family,
    and the calibrated confidence a user can ask for to reach the target accuracy
    (`aegir annotate --min-confidence P`)."""
    first = rows[0]
    real, target = first["real_split"], 100 * first["target"]

    def percent(value: float | None) -> str:
        return "–" if value is None else f"{100 * value:.1f}"

    lines = [f"## Calibration on `{real}`", "",
             f"From `results/calibrate/calibration.json` (stage `calibrate`): how far each checkpoint's top-1 "
             f"confidence can be trusted on `{real}`. ECE is the expected calibration error (the gap between "
             f"confidence and accuracy, averaged over confidence bins). `aegir annotate` maps every confidence "
             f"by a beta map, σ(a·ln c − d·ln(1 − c) + b) (three numbers per task, fitted on `{real}`); the ECE given for "
             f"it is out of family: each family's tables mapped by the map fitted on the other families', what "
             f"tables of a kind the map never saw can expect. The last column is the least calibrated "
             f"confidence P at which the kept columns reach {target:.0f} % accuracy (out of family), and the "
             f"share it keeps (`aegir annotate --min-confidence P` prints `unknown` below it). Reliability and "
             f"coverage figures: [reliability.png](../calibrate/figures/reliability.png), "
             f"[coverage.png](../calibrate/figures/coverage.png).", "",
             f"| checkpoint | task | accuracy | ECE, own | ECE, calibrated (out of family) | map a, b, d | "
             f"{target:.0f} % accuracy |",
             "|---|---|---:|---:|---:|---|---|"]
    for row in rows:
        lines.append(f"| {row['name']} | {row['task'].upper()} | {100 * row['accuracy']:.1f} | {percent(row['ece'])} | "
                     f"{percent(row['ece_out_of_family'])} | {row['map']['a']:.3g}, {row['map']['b']:.3g}, {row['map']['d']:.3g} | "
                     f"{reach_text(row['for_accuracy'], row['most_accurate'])} |")
    return lines


def report_gains(report: Report) -> dict:
    """The stage's gains.json: micro-F1 gains in points, per task and split (the splits both
    models score) — Phase 3 fused over its control, over Phase 1 and over the baseline
    (`fused_minus_control`, …); each Phase 4 row over Phase 4's `never` policy, which is the
    fused model on the same tables (`phase4_learned_minus_phase4_never`; Phase 4 may score a
    subset of each split), or over fused where there is no `never` row
    (`phase4_<policy>_minus_fused`). The F1 themselves are in each stage's scores.json; these
    differences are what the report is read for."""
    by_key = {row.key: row for row in report.rows}
    fused = by_key["fused"]
    pairs = [(fused, by_key[other]) for other in ("control", "phase1", "baseline")]
    serial = by_key.get("phase4_never", fused)
    pairs += [(row, serial) for row in report.rows if row.key.startswith("phase4") and row is not serial]
    out: dict[str, dict] = {}
    for a, b in pairs:
        # (+ 0.0 turns a -0.0 into 0.0)
        out[f"{a.key}_minus_{b.key}"] = {
            task: {split: round(a.f1[task][split].micro - b.f1[task][split].micro, 2) + 0.0
                   for split in a.f1[task] if split in b.f1[task]}
            for task in TASKS}
    return out


# The checkpoint each report row scores, under the pipeline's models directory: the baseline
# (TF-IDF, no checkpoint) and Phase 4's fixed-policy controls (`never`, `always`: the swarm's
# checkpoint runs its learned policy) are not candidates.
CHECKPOINTS = {"phase1": "phase1/primary", "control": "phase3/control", "fused": "phase3",
               "phase4": "phase4", "phase4_learned": "phase4"}
BEST_SPLIT = "real"  # the real tables: what `aegir annotate` meets


def best_checkpoint(report: Report, models: str | Path, split: str = BEST_SPLIT) -> dict:
    """The stage's best.json: which checkpoint scored best on `split`, so that `aegir annotate`
    uses it by default. The score is the mean of the CTA and CPA micro-F1 on `split`; among the
    rows that are a checkpoint (`CHECKPOINTS`) and were scored on the whole split the highest
    wins, the earlier row (the simpler model) on a tie. A row scored on fewer columns than the
    others (Phase 4 with `phase4.eval_tables` > 0 scores the split's first tables only) is kept
    among the candidates, marked `"comparable": false`, and never picked: a score on other
    tables says nothing about which model reads these better. Every candidate's figures are kept
    beside the pick."""
    candidates = {}
    supports = {}
    for row in report.rows:
        cta, cpa = row.f1["cta"].get(split), row.f1["cpa"].get(split)
        if row.key not in CHECKPOINTS or cta is None or cpa is None:
            continue
        candidates[row.key] = {"checkpoint": (Path(models) / CHECKPOINTS[row.key]).as_posix(), "name": row.name,
                               "cta_micro_f1": cta.micro, "cpa_micro_f1": cpa.micro,
                               "score": round((cta.micro + cpa.micro) / 2, 4)}
        supports[row.key] = (cta.support, cpa.support)
    if not candidates:
        raise DataError(report.sources[0] if report.sources else ".",
                        f"no checkpoint's F1 on split {split!r}: nothing to pick as the best")
    whole = tuple(max((s[i] for s in supports.values() if s[i] is not None), default=None) for i in (0, 1))
    for key, support in supports.items():
        partial = [f"{task} {got} of {total}" for task, got, total in zip(("CTA", "CPA"), support, whole)
                   if got is not None and total is not None and got != total]
        if partial:
            candidates[key]["comparable"] = False
            candidates[key]["why"] = f"scored on {', '.join(partial)} {split} columns"
    pickable = [key for key in candidates if candidates[key].get("comparable", True)]
    best = max(pickable, key=lambda key: candidates[key]["score"])  # the first of equal scores
    return {"split": split, "metric": "mean of CTA and CPA micro-F1", "model": best, **candidates[best],
            "candidates": candidates}


# ----------------------------------------------------------------------------- figures


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def png_bytes(fig) -> bytes:
    """The figure as PNG bytes, closed afterwards. The PNG's metadata (`Software`: the
    matplotlib version) is dropped, so the bytes depend on the drawing alone."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, metadata={"Software": None})
    _pyplot().close(fig)
    return buffer.getvalue()


MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "h")


def f1_gains_png(report: Report) -> bytes:
    """F1 of every model minus the baseline's (`key` "baseline"), as dots, 2 × 2 (rows CTA, CPA;
    columns micro, macro): one band per split, one dot per model, offset within the band so that
    equal figures stay visible. The differences that matter here are a few points, which bars on
    a 0–100 axis hide. Without a baseline row the dots are the F1 itself on an axis fitted to it."""
    plt = _pyplot()
    splits = report.splits
    base = next((row for row in report.rows if row.key == "baseline"), None)
    rows = [row for row in report.rows if row is not base]
    fig, axes = plt.subplots(2, 2, figsize=(13, 1.1 + 0.55 * len(splits) * 2), squeeze=False, sharey=True)
    band = 0.8 / max(len(rows), 1)
    for r, task in enumerate(TASKS):
        for c, kind in enumerate(("micro", "macro")):
            ax = axes[r][c]
            for i, row in enumerate(rows):
                points = [(getattr(row.f1[task][s], kind) - (getattr(base.f1[task][s], kind) if base else 0.0),
                           j - 0.4 + band * (i + 0.5))
                          for j, s in enumerate(splits)
                          if s in row.f1.get(task, {}) and (base is None or s in base.f1.get(task, {}))]
                if points:
                    ax.scatter(*zip(*points), marker=MARKERS[i % len(MARKERS)], color=f"C{i + 1}", s=30,
                               label=row.name, zorder=3)
            if base is not None:
                ax.axvline(0.0, color="C0", linewidth=1.5, label=f"{base.name} (0)")
            ax.set_yticks(range(len(splits)), splits)
            ax.set_ylim(len(splits) - 0.5, -0.5)
            for j in range(1, len(splits)):
                ax.axhline(j - 0.5, color="0.85", linewidth=0.8)
            what = f"{kind}-F1 − baseline (points)" if base is not None else f"{kind}-F1 (%)"
            ax.set(xlabel=what, title=f"{task.upper()} {kind}-F1")
            ax.grid(axis="x", alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=min(len(labels), 4), fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.9))
    return png_bytes(fig)


def routing_heatmap_png(tables: Sequence[DomainTable]) -> bytes:
    """One heatmap per table (domains down, specialists/columns across), numbers in the cells."""
    plt = _pyplot()
    heights = [max(3.0, 0.32 * len(t.values) + 1.5) for t in tables]
    fig, axes = plt.subplots(1, len(tables), figsize=(5.5 * len(tables), max(heights)), squeeze=False)
    for ax, table in zip(axes[0], tables):
        domains, columns = list(table.values), table.columns
        grid = [[table.values[d].get(c, math.nan) for c in columns] for d in domains]
        finite = [v for row in grid for v in row if math.isfinite(v)]
        rate_like = all(0.0 <= v <= 1.0 for v in finite)
        image = ax.imshow(grid, aspect="auto", cmap="viridis",
                          vmin=0.0, vmax=1.0 if rate_like else max(finite, default=1.0))
        ax.set_xticks(range(len(columns)), columns, rotation=30, ha="right")
        ax.set_yticks(range(len(domains)), domains)
        for y, row in enumerate(grid):
            for x, value in enumerate(row):
                if math.isfinite(value):
                    ax.text(x, y, _number(value), ha="center", va="center", fontsize=7,
                            color="white" if value < 0.5 * (1.0 if rate_like else max(finite)) else "black")
        ax.set_title(table.title, fontsize=9)
        fig.colorbar(image, ax=ax, fraction=0.046)
    fig.tight_layout()
    return png_bytes(fig)


def training_curves_png(phase1: Sequence[Curves], phase3: Sequence[Curves]) -> bytes:
    """2 × 2: train loss and validation micro-F1 (CTA solid, CPA dashed) of each Phase 1 agent
    (top) and of Phase 3's fused and control runs (bottom)."""
    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    for r, (phase, runs) in enumerate((("Phase 1", phase1), ("Phase 3", phase3))):
        loss_ax, f1_ax = axes[r]
        for i, curves in enumerate(runs):
            color = f"C{i}"
            steps, loss = curves.series["train/loss"]
            loss_ax.plot(steps, loss, color=color, marker="o" if len(steps) <= 30 else None, markersize=3,
                         label=curves.run)
            for task, style in (("cta", "-"), ("cpa", "--")):
                f1_ax.plot(*curves.series[f"valid/{task}_micro_f1"], style, color=color, marker="o",
                           markersize=3, label=f"{curves.run} {task.upper()}")
        loss_ax.set(xlabel="step", ylabel="train loss", title=f"{phase}: training loss")
        f1_ax.set(xlabel="step", ylabel="micro-F1 (%, valid)", title=f"{phase}: validation micro-F1")
        for ax in (loss_ax, f1_ax):
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    fig.tight_layout()
    return png_bytes(fig)


def scaling_series(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The per-row figures the scaling figure draws against n: micro-F1 columns (their names
    hold `f1` or start with a task, and do not say macro or support), then the critical steps
    and mean spawned sub-agents where given."""
    keys = list(dict.fromkeys(k for row in rows for k in row))
    numeric = [k for k in keys if k not in ("n", "policy")
               and all(isinstance(r.get(k), (int, float)) and not isinstance(r.get(k), bool)
                       for r in rows if k in r)]
    f1 = [k for k in numeric if ("f1" in k.lower() or k.split("/")[0] in TASKS)
          and not any(word in k.lower() for word in ("macro", "support"))]
    rest = [k for k in numeric if k.split("/")[-1] in ("critical_steps", "mean_spawned", "mean_subagents")]
    return f1 + rest


POLICY_STYLES = {"never": dict(linestyle="--", marker="s", markersize=7),
                 "always": dict(linestyle=":", marker="^", markersize=7),
                 "learned": dict(linestyle="-", marker="o", markersize=4)}


def scaling_png(rows: Sequence[Mapping[str, Any]]) -> bytes:
    """One figure: per policy, against the sub-agent budget n, the mean micro-F1 of each task over
    the splits the scaling rows score (CTA, CPA) and the mean critical steps per table over the
    same splits (the report's scaling table has each split). Each policy has its own line style
    and marker, so a policy that equals another (`learned` where it spawns nothing) stays visible;
    n on a symmetric-log axis (base 2), since budgets double."""
    plt = _pyplot()
    series = scaling_series(rows)
    if not series:
        raise ValueError("no F1 or critical-steps figures in the scaling rows")
    panels = [(f"{task.upper()} micro-F1, mean over splits (%)", [k for k in series if k.split("/")[0] == task])
              for task in TASKS]
    panels.append(("critical steps per table, mean over splits",
                   [k for k in series if k.split("/")[-1] == "critical_steps"]))
    panels = [(title, keys) for title, keys in panels if keys]
    if not panels:
        panels = [(key, [key]) for key in series[:3]]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.8 * len(panels), 3.9), squeeze=False)
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    ns = sorted({r["n"] for r in rows})
    for ax, (title, keys) in zip(axes[0], panels):
        for i, policy in enumerate(policies):
            points = [(r["n"], sum(r[k] for k in keys) / len(keys)) for r in rows
                      if r["policy"] == policy and all(k in r for k in keys)]
            if points:
                style = POLICY_STYLES.get(policy, dict(linestyle="-", marker=MARKERS[i % len(MARKERS)]))
                ax.plot(*zip(*points), color=f"C{i}", label=policy, linewidth=1.6, **style)
        ax.set_xscale("symlog", base=2, linthresh=1)
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.set(xlabel="sub-agent budget n", title=title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return png_bytes(fig)


def report_figures(report: Report) -> dict[str, bytes]:
    """Every figure the report has inputs for: file name → PNG bytes (scaling only with Phase 4's
    scaling rows)."""
    figures = {"f1_by_split.png": f1_gains_png(report),
               "routing_by_domain.png": routing_heatmap_png(report.domain_tables),
               "training_curves.png": training_curves_png(report.phase1_curves, report.phase3_curves)}
    if report.scaling and scaling_series(report.scaling):
        figures["scaling.png"] = scaling_png(report.scaling)
    return figures


__all__ = ["Curves", "DomainTable", "ModelRow", "Report", "SplitF1", "collect", "f1_gains_png", "parse_f1",
           "png_bytes", "read_json", "report_figures", "report_markdown", "report_gains",
           "routing_heatmap_png", "scaling_png", "training_curves_png"]

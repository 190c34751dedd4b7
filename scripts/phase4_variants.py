"""Where the swarm's gain lies: a trained Phase 4 swarm under fixed variants of its decisions.

    python scripts/phase4_variants.py --checkpoint models/phase4 --split real --split wide \\
        --json variants.json

Loads the swarm (its Phase 3 orchestrator and sub-agents from the paths its config.json names),
reads each split as `phase4` does (the orchestrator's and the sub-agents' stored distributions
where they are of this data, `aegir.swarm.splits.load_split`) and scores, per split, CTA and
CPA micro-F1 of:

    never            no sub-agent (Phase 3 fused, as `phase3` scores it)
    always           the `always` control: every second opinion and max wide sub-agents
    learned          the trained policy at max_subagents
    consult_only     every second opinion, no wide search
    wide_only        max wide sub-agents, no second opinion
    learned+consult  the policy's wide and deep choices, every second opinion
    learned-no-wide  the policy's choices without its wide search

Each row also gives the share of tables that consulted and the mean wide sub-agents.

`--headroom` adds what a per-table policy could gain at most and whether the policy's inputs
could find it: per split, the oracle that takes, table by table, whichever of `never` and
`always` gets more columns right (CTA + CPA; ties: `never`), and the tables where `always` gains
and loses; and, over two splits or more, leave-one-split-out: a logistic regression on the
policy's own inputs (`aegir.swarm.views.policy_inputs`: the pooled encoder output, the width and
doubt features) fitted on the other splits' tables to tell where `always` gains, its AUC on the
held-out split's tables where the two differ, and the columns the held-out split gains over
`never` by following it, by `always`, by the learned policy's second opinions and by the oracle.
The same again on what is known only once the second opinions are in (`opinion_features`: how
often and how strongly they disagree with the orchestrator): a decision taken after them, to
merge them or not, which costs no more critical steps than `always`. An AUC near 0.5 says no
policy over those inputs can beat both controls but by luck.

Not part of `dvc repro`; the runs it measured are in docs/experiments.md ("Where Phase 4's gain
on `real` lies", "How much a per-table spawning policy could gain, …").
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from aegir import atomic
from aegir.config import SPLITS, load_params
from aegir.data.prepared import fingerprint as data_fingerprint
from aegir.eval.predict import gold_and_predicted, score
from aegir.eval.reads import StoredReads
from aegir.labels import cta_vocab
from aegir.model.checkpoint import checkpoint_fingerprint
from aegir.orchestrator.checkpoint import load_orchestrator
from aegir.swarm.evaluate import decisions, evaluate
from aegir.swarm.model import load_swarm
from aegir.swarm.spawn import family_of_labels
from aegir.swarm.splits import load_split
from aegir.swarm.views import policy_inputs

Decision = tuple[int, int, bool, bool]  # (wide sub-agents, specialist, deep, consult)


def variants(swarm, data, max_subagents: int) -> dict[str, list[Decision]]:
    """The variants of the module docstring, one decision per table of `data`: the stage's own
    three policies (`aegir.swarm.evaluate.decisions`), and the others one change away from them."""
    never, always, learned = (decisions(swarm, data, kind, max_subagents) for kind in ("never", "always", "learned"))
    return {
        "never": never,
        "always": always,
        "learned": learned,
        "consult_only": [(0, s, deep, True) for _, s, deep, _ in never],
        "wide_only": [(g, s, deep, False) for g, s, deep, _ in always],
        "learned+consult": [(g, s, deep, True) for g, s, deep, _ in learned],
        "learned-no-wide": [(0, s, deep, consult) for _, s, deep, consult in learned],
    }


def table_correct(examples, predictions) -> np.ndarray:
    """(T, 2) int: per table, the labelled CTA columns and CPA pairs (column 0 left out) its
    top-1 labels get right: the pairs `score` counts (`aegir.eval.predict.gold_and_predicted`)."""
    out = np.zeros((len(examples), 2), dtype=np.int64)
    for t, (example, prediction) in enumerate(zip(examples, predictions, strict=True)):
        pairs = gold_and_predicted([example], [prediction])
        for task, name in enumerate(("cta", "cpa")):
            out[t, task] = sum(g == p for g, p in zip(*pairs[name], strict=True))
    return out


def oracle(never: list, always: list, correct_never: np.ndarray, correct_always: np.ndarray) -> list:
    """Per table the prediction of `always` where it gets more columns right (CTA + CPA) than
    `never`, else `never`'s."""
    better = correct_always.sum(1) > correct_never.sum(1)
    return [a if b else n for n, a, b in zip(never, always, better.tolist(), strict=True)]


def opinion_features(view) -> list[float]:
    """Per task (CTA; CPA from column 1): the share of columns where the second opinions' mean
    distribution and the orchestrator disagree on the top label, the mean top-1 probability of
    each, the orchestrator's probability of the opinions' label and the opinions' of its label
    (10 numbers; zeros for a task with no column or a table that cannot consult)."""
    out: list[float] = []
    for task, own in enumerate((view.cta_logp, view.cpa_logp[1:])):
        if not len(own) or not view.consult:
            out += [0.0] * 5
            continue
        opinions = torch.stack([c[task][task:] for c in view.consult]).exp().mean(0)  # (C, n)
        mine, theirs = own.argmax(-1), opinions.argmax(-1)
        out += [float((mine != theirs).float().mean()), float(opinions.max(-1).values.mean()),
                float(own.exp().max(-1).values.mean()), float(own.gather(-1, theirs[:, None]).exp().mean()),
                float(opinions.gather(-1, mine[:, None]).mean())]
    return out


def split_out(features: dict[str, np.ndarray], gains: dict[str, np.ndarray], consulted: dict[str, np.ndarray],
              c: float = 0.1) -> dict[str, dict]:
    """Leave-one-split-out (module docstring): per held-out split, the AUC (None: one class
    only) and the columns gained over `never` by following the classifier (P > ½), by
    `always`, by the learned policy's second opinions (`consulted`, bool per table) and by the
    oracle. features: split → (T, F); gains: split → (T,) columns always − never."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    names = list(features)
    if len(names) < 2:
        raise ValueError("split_out needs two splits or more")
    out = {}
    for held in names:
        x = np.vstack([features[s] for s in names if s != held])
        g = np.concatenate([gains[s] for s in names if s != held])
        differs = g != 0
        if len(set((g[differs] > 0).tolist())) < 2:
            raise ValueError(f"split_out: the splits other than {held} have tables on one side only")
        model = make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=2000))
        model.fit(x[differs], g[differs] > 0)
        gh = gains[held]
        p = model.predict_proba(features[held])[:, 1]
        dh = gh != 0
        auc = float(roc_auc_score(gh[dh] > 0, p[dh])) if len(set((gh[dh] > 0).tolist())) > 1 else None
        out[held] = {"tables_that_differ": int(dh.sum()), "auc": None if auc is None else round(auc, 3),
                     "gained": {"classifier": int(gh[p > 0.5].sum()), "always": int(gh.sum()),
                                "learned_consult": int(gh[consulted[held]].sum()), "oracle": int(gh[gh > 0].sum())}}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default="models/phase4", type=Path, help="a Phase 4 swarm")
    parser.add_argument("--data", default="data/prepared", type=Path)
    parser.add_argument("--params", default="params.yaml", help="for the prepare and phase4 settings")
    parser.add_argument("--split", action="append", default=None, help="evaluation split (repeatable; default real)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--headroom", action="store_true",
                        help="also the per-table oracle of never/always and, over 2+ splits, whether the policy's "
                             "inputs tell where always gains (module docstring)")
    args = parser.parse_args(argv)
    params = load_params(args.params)
    swarm, config = load_swarm(args.checkpoint)
    meta = config["swarm"]
    phase3_dir = (args.checkpoint / meta["phase3"]["checkpoint"]).resolve()
    _, phase3_config = load_orchestrator(phase3_dir)
    recorded = phase3_config.get("params", {})
    prints = data_fingerprint(args.data, SPLITS)

    def store_of(directory: Path, prepare) -> StoredReads | None:
        return StoredReads.open(directory, {"checkpoint": checkpoint_fingerprint(directory), "data": prints,
                                            "prepare": prepare, "reading": recorded.get("reading")})[0]

    store = store_of(phase3_dir, recorded.get("prepare"))
    subagent_stores = {entry["name"]: store_of((args.checkpoint / entry["checkpoint"]).resolve(),
                                               asdict(params.prepare)) for entry in meta["specialists"]}
    family = family_of_labels(cta_vocab())[0]
    top = params.phase4.max_subagents
    out: dict[str, dict] = {}
    features: dict[str, dict[str, np.ndarray]] = {"policy inputs": {}, "after the opinions": {}}
    gains, consulted = {}, {}
    for split in args.split or ["real"]:
        data, _ = load_split(split, args.data, swarm.orch, swarm.subagents, params, family, swarm.reading, store,
                             0, subagent_stores)
        chosen = variants(swarm, data, top)
        predictions: dict[str, list] = {}
        for name, chosen_decisions in chosen.items():
            predictions[name] = []
            result = evaluate(swarm, data, chosen_decisions, predictions[name])
            row = {"cta": round(result["cta"]["micro_f1"], 2), "cpa": round(result["cpa"]["micro_f1"], 2),
                   "consult_share": result["spawn"]["consult_share"],
                   "mean_wide_subagents": result["spawn"]["mean_wide_subagents"]}
            out.setdefault(split, {})[name] = row
            print(f"{split:14s} {name:16s} CTA {row['cta']:6.2f}  CPA {row['cpa']:6.2f}  "
                  f"consulted {row['consult_share']:.2f}  wide {row['mean_wide_subagents']:.2f}", flush=True)
        if args.headroom:
            right = {name: table_correct(data.examples, predictions[name]) for name in ("never", "always")}
            best = score(data.examples, oracle(predictions["never"], predictions["always"], right["never"],
                                               right["always"]))
            gain = (right["always"] - right["never"]).sum(1)
            row = {"cta": round(best["cta"]["micro_f1"], 2), "cpa": round(best["cpa"]["micro_f1"], 2),
                   "always_gains_tables": int((gain > 0).sum()), "always_loses_tables": int((gain < 0).sum()),
                   "tables": len(gain)}
            out[split]["oracle"] = row
            print(f"{split:14s} {'oracle':16s} CTA {row['cta']:6.2f}  CPA {row['cpa']:6.2f}  always gains on "
                  f"{row['always_gains_tables']} tables, loses on {row['always_loses_tables']} of {row['tables']}",
                  flush=True)
            hidden, width, *_ = policy_inputs(data.views, list(range(len(data.views))), swarm.policy.options, None)
            features["policy inputs"][split] = torch.cat([width, hidden], 1).numpy()
            features["after the opinions"][split] = np.array([opinion_features(v) for v in data.views])
            gains[split] = gain
            consulted[split] = np.array([bool(d[3]) for d in chosen["learned"]])
    if args.headroom and len(gains) > 1:
        for kind, by_split in features.items():
            out.setdefault("split_out", {})[kind] = split_out(by_split, gains, consulted)
            for held, r in out["split_out"][kind].items():
                g = r["gained"]
                print(f"{kind}, held out {held:14s} AUC {r['auc']}  columns gained over never: classifier "
                      f"{g['classifier']}, always {g['always']}, learned consult {g['learned_consult']}, oracle "
                      f"{g['oracle']} ({r['tables_that_differ']} tables differ)", flush=True)
    if args.json:
        atomic.write_json(args.json, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

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

Each row also gives the share of tables that consulted and the mean wide sub-agents. Not part
of `dvc repro`; the runs it measured are in docs/experiments.md ("Where Phase 4's gain on
`real` lies").
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path

from aegir import atomic
from aegir.config import SPLITS, load_params
from aegir.data.prepared import fingerprint as data_fingerprint
from aegir.eval.reads import StoredReads
from aegir.labels import cta_vocab
from aegir.model.checkpoint import checkpoint_fingerprint
from aegir.orchestrator.checkpoint import load_orchestrator
from aegir.swarm.evaluate import decisions, evaluate
from aegir.swarm.model import load_swarm
from aegir.swarm.spawn import family_of_labels
from aegir.swarm.splits import load_split

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default="models/phase4", type=Path, help="a Phase 4 swarm")
    parser.add_argument("--data", default="data/prepared", type=Path)
    parser.add_argument("--params", default="params.yaml", help="for the prepare and phase4 settings")
    parser.add_argument("--split", action="append", default=None, help="evaluation split (repeatable; default real)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
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
    for split in args.split or ["real"]:
        data, _ = load_split(split, args.data, swarm.orch, swarm.subagents, params, family, swarm.reading, store,
                             0, subagent_stores)
        chosen = variants(swarm, data, top)
        for name, chosen_decisions in chosen.items():
            result = evaluate(swarm, data, chosen_decisions)
            row = {"cta": round(result["cta"]["micro_f1"], 2), "cpa": round(result["cpa"]["micro_f1"], 2),
                   "consult_share": result["spawn"]["consult_share"],
                   "mean_wide_subagents": result["spawn"]["mean_wide_subagents"]}
            out.setdefault(split, {})[name] = row
            print(f"{split:14s} {name:16s} CTA {row['cta']:6.2f}  CPA {row['cpa']:6.2f}  "
                  f"consulted {row['consult_share']:.2f}  wide {row['mean_wide_subagents']:.2f}", flush=True)
    if args.json:
        atomic.write_json(args.json, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

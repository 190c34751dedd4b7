"""What Phase 3's routing costs on a split: the orchestrator read as its router routes, and with
the owners of each table's domain forced on, by the gold domain or by the one its Phase 1
primary reads in the subject column.

    python scripts/routing_probe.py --checkpoint models/phase3 --data data/prepared --split real [--json out.json]

Three routings of every table, each followed by the orchestrator's own fusion and vote:

* `learned`: the router's thresholded decision alone (what `phase3` scores as `fused` with
  `phase3.subject_route: false`);
* `learned+owner`: that decision plus every specialist whose domains (params.yaml `specialists`)
  hold the table's gold domain: the routing an oracle of domains would add (an upper bound, not a
  model: the gold domain is not known to a user);
* `learned+subject`: that decision plus the owners of the domain named by the type the frozen
  Phase 1 primary (the orchestrator's `--reader` specialist, `primary`) gives the subject column
  (column 0), where that type is an entity's name (`Movie/name` → `Movie`); a rule any user's
  table allows, at the price of one more read by the frozen primary (what `phase3` scores as
  `fused` with `phase3.subject_route: true`, `SwarmOrchestrator.subject_routing`).

Scored per table domain and overall as plain accuracy of each column's argmax (micro-F1 with one
label per column), so the three compare with one another, not with `phase3`'s figures (which
read each table in row views and decode its labels jointly). Measured runs:
docs/experiments.md, "What routing costs on real tables".
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import torch

from aegir import atomic
from aegir.config import load_params
from aegir.data.batch import IGNORE_INDEX
from aegir.data.dataset import Example, collate, eval_batches, load_examples
from aegir.errors import AegirError
from aegir.labels import Vocabulary, cta_vocab
from aegir.model.network import AegirModel
from aegir.orchestrator.checkpoint import load_orchestrator
from aegir.orchestrator.model import SwarmOrchestrator
from aegir.orchestrator.router import RouterDecision, routing_targets
from aegir.swarm.spawn import family_of_labels

VARIANTS = ("learned", "learned+owner", "learned+subject")


def subject_domains(subject_logits: torch.Tensor, vocab: Vocabulary) -> list[str | None]:
    """(B, labels) CTA logits of each table's column 0 → the domain its argmax type names (its
    family, `family_of_labels`: `Movie/name` → `Movie`), or None where that type has none."""
    family, families = family_of_labels(vocab)
    return [families[f] if f >= 0 else None for f in family[subject_logits.argmax(-1)].tolist()]


def owners(domains: list[str | None], own: list[tuple[str, ...]]) -> torch.Tensor:
    """(B, S) bool: specialist s owns table b's domain (None owns nothing)."""
    return routing_targets(domains, own)[0].bool()


@torch.no_grad()
def probe(orch: SwarmOrchestrator, examples: list[Example], own: list[tuple[str, ...]], reader: AegirModel,
          vocab: Vocabulary, batch_size: int = 8) -> dict:
    """{variant: {"cta"|"cpa": {domain|"all": [right, n]}, "activation": {domain: [share per
    specialist]}}} over `examples` (their `domain`; None counts as "-")."""
    hits: dict = {v: {t: defaultdict(lambda: [0, 0]) for t in ("cta", "cpa")} for v in VARIANTS}
    active: dict = {v: defaultdict(lambda: torch.zeros(orch.num_specialists)) for v in VARIANTS}
    tables: dict[str, int] = defaultdict(int)
    orch.eval()
    reader.eval()
    for indices in eval_batches(examples, batch_size):
        rows = [examples[i] for i in indices]
        batch = collate(rows)
        domains = [r.domain or "-" for r in rows]
        encoded = orch.encode(batch)
        hidden = orch.routing_hidden(batch, encoded)
        learned = orch.route(hidden)
        gold = owners([r.domain for r in rows], own)
        read = owners(subject_domains(reader(batch).cta_logits[:, 0].float(), vocab), own)
        for variant, mask in zip(VARIANTS, (learned.activation_mask, learned.activation_mask | gold,
                                            learned.activation_mask | read)):
            decision = RouterDecision(scores=learned.scores, activation_mask=mask, log_prob=learned.log_prob)
            out = orch.voted(batch, orch(batch, hidden, encoded=encoded, decision=decision))
            for task, logits, target in (("cta", out.output.cta_logits, batch.cta_labels),
                                         ("cpa", out.output.cpa_logits, batch.cpa_labels)):
                predicted = logits.argmax(-1)
                for b, domain in enumerate(domains):
                    keep = target[b] != IGNORE_INDEX
                    right, n = int((predicted[b][keep] == target[b][keep]).sum()), int(keep.sum())
                    for key in (domain, "all"):
                        hits[variant][task][key][0] += right
                        hits[variant][task][key][1] += n
            for b, domain in enumerate(domains):
                active[variant][domain] += mask[b].float()
        for domain in domains:
            tables[domain] += 1
    return {v: {"cta": dict(hits[v]["cta"]), "cpa": dict(hits[v]["cpa"]),
                "activation": {d: (active[v][d] / tables[d]).tolist() for d in sorted(tables)}} for v in VARIANTS}


def table(result: dict, names: list[str]) -> str:
    """Markdown: accuracy per domain and variant, each task; then each variant's activation."""
    lines = []
    for task in ("cta", "cpa"):
        lines += [f"**{task.upper()}** (accuracy %, columns)", "", "| domain | n | " + " | ".join(VARIANTS) + " |",
                  "|---|---:|" + "---:|" * len(VARIANTS)]
        domains = sorted(d for d in result["learned"][task] if d != "all") + ["all"]
        for d in domains:
            n = result["learned"][task][d][1]
            if n:
                cells = " | ".join(f"{100 * result[v][task][d][0] / n:.2f}" for v in VARIANTS)
                lines.append(f"| {d} | {n} | {cells} |")
        lines.append("")
    lines += ["**Share of tables that activated each specialist** (" + ", ".join(names) + ")", "",
              "| domain | " + " | ".join(VARIANTS) + " |", "|---|" + "---|" * len(VARIANTS)]
    for d in result["learned"]["activation"]:
        cells = " | ".join(" ".join(f"{x:.2f}" for x in result[v]["activation"][d]) for v in VARIANTS)
        lines.append(f"| {d} | {cells} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default="models/phase3", help="a Phase 3 orchestrator checkpoint")
    parser.add_argument("--data", default="data/prepared")
    parser.add_argument("--split", default="real")
    parser.add_argument("--params", default="params.yaml", help="for the specialists' domains")
    parser.add_argument("--reader", default="primary", help="the specialist whose subject-column type names the domain")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    try:
        orch, _ = load_orchestrator(args.checkpoint)
        if args.reader not in orch.specialist_names:
            raise AegirError(f"{args.checkpoint}: no specialist {args.reader!r} (it has {orch.specialist_names})")
        agents = load_params(args.params).agents
        own = [tuple(agents[n].domains) if n in agents else () for n in orch.specialist_names]
        reader = orch.specialists[orch.specialist_names.index(args.reader)].model
        result = probe(orch, load_examples(Path(args.data), args.split), own, reader, cta_vocab())
    except AegirError as exc:
        parser.exit(2, f"routing_probe: error: {exc}\n")
    print(table(result, orch.specialist_names))
    if args.json:
        atomic.write_json(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

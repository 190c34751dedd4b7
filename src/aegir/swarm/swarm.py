"""The trained swarm as one object: the frozen Phase 3 orchestrator, the frozen sub-agents, the
spawning policy and the merge; and its checkpoint (`models/phase4`).

`Swarm.annotate(tables, examples, cache)` runs the whole thing on tables: the orchestrator's read
(`table_views`), the policy's decision per table (argmax; `max_count` caps the sub-agents),
the sub-agents it spawned (through a `SubagentCache`), the per-column merge and deep search,
and each table's critical and total steps (`aegir.swarm.spawn.swarm_steps`).

Checkpoint: `model.safetensors` holds `policy.*` and `merge.*` only; `config.json` names the
Phase 3 orchestrator and every sub-agent checkpoint by a path relative to the swarm's directory
and by fingerprint (as `aegir.swarm.checkpoint` does for Phase 3's specialists): a moved or
retrained one is a `CheckpointError` naming it, never a silently different swarm.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from aegir.config import PrepareConfig
from aegir.data.dataset import Example, collate, eval_batches
from aegir.data.groups import sub_table_id
from aegir.data.serialize import sample_rows
from aegir.labels import cta_vocab
from aegir.model.aegir import AegirModel
from aegir.model.checkpoint import (CONFIG_FILE, CheckpointError, checkpoint_fingerprint, load_checkpoint, load_weights,
                                    read_checkpoint, write_checkpoint)
from aegir.rl.swarm import TableView, policy_inputs, swarm_logp
from aegir.swarm.checkpoint import config_has_section
from aegir.swarm.critical import model_read_steps
from aegir.swarm.orchestrator import SwarmOrchestrator
from aegir.swarm.policy import SpawnPolicy
from aegir.swarm.spawn import (SubagentCache, SwarmMerge, deep_columns, deep_subtasks, family_of_labels, label_steps,
                               swarm_steps, wide_subtasks)


@torch.no_grad()
def table_views(orch: SwarmOrchestrator, examples: list[Example], batch_size: int, family: torch.Tensor) -> list[TableView]:
    """One `TableView` per example: the frozen Phase 3 orchestrator's routed read of it."""
    reads = [model_read_steps(s.config.encoder_layers, s.config.main_layers) for s in orch.specialists]
    views: list[TableView | None] = [None] * len(examples)
    orch.eval()
    for indices in eval_batches(examples, batch_size):
        batch = collate([examples[i] for i in indices])
        encoded = orch.encode(batch)
        hidden = orch.primary.routing_hidden(batch, encoded)
        routed = orch(batch, hidden if orch.num_specialists else None, encoded=encoded)
        cta = torch.log_softmax(routed.output.cta_logits.float(), -1)
        cpa = torch.log_softmax(routed.output.cpa_logits.float(), -1)
        for row, i in enumerate(indices):
            e, c = examples[i], examples[i].num_columns
            active = routed.activation_mask[row].tolist() if routed.activation_mask is not None else []
            views[i] = TableView(
                num_columns=c, cta_logp=cta[row, :c].clone(), cpa_logp=cpa[row, :c].clone(),
                hidden=hidden[row].float().clone(),
                phase3_reads=tuple(r for r, on in zip(reads, active) if on),
                phase3_active=tuple(bool(on) for on in active),
                deep_columns=deep_columns(cta[row, :c].argmax(-1).tolist(), family),
                cta_gold=torch.from_numpy(e.cta_labels.astype(np.int64)),
                cpa_gold=torch.from_numpy(e.cpa_labels.astype(np.int64)),
                stream_bytes=len(e.byte_ids) - 1)
    return views  # type: ignore[return-value]


@dataclass
class TableResult:
    """One table through the swarm: merged log-probs (C, n_cta), (C, n_cpa); the decision
    (wide sub-agents actually spawned, their specialist, deep search run); the wide groups and
    deep columns read; the Phase 3 specialists the orchestrator activated; critical and total
    layer-steps."""

    cta_logp: torch.Tensor
    cpa_logp: torch.Tensor
    subagents: int
    specialist: str | None
    deep: bool
    groups: list[tuple[int, ...]]
    deep_columns: tuple[int, ...]
    phase3_activated: list[str]
    critical_steps: int
    total_steps: int


class Swarm:
    """orch: the frozen Phase 3 orchestrator; subagents: name → frozen Phase 1 model (in the
    policy's specialist order); policy, merge: the trained Phase 4 parts."""

    def __init__(self, orch: SwarmOrchestrator, subagents: dict[str, AegirModel], policy: SpawnPolicy,
                 merge: SwarmMerge):
        self.orch, self.subagents, self.policy, self.merge = orch, subagents, policy, merge
        self.names = list(subagents)
        self.steps = [label_steps(m.config) for m in subagents.values()]
        self.family = family_of_labels(cta_vocab())[0]

    @torch.no_grad()
    def decide(self, views: list[TableView], max_count: int | None) -> list[tuple[int, int, bool]]:
        """(sub-agents option, specialist index, deep) per table: the policy's argmax under the cap."""
        inputs = policy_inputs(views, list(range(len(views))), self.policy.options, max_count)
        d = self.policy.decide(*inputs)
        return [(self.policy.options[int(c)], int(s), bool(x)) for c, s, x in zip(d.count, d.specialist, d.deep)]

    @torch.no_grad()
    def run(self, views: list[TableView], chosen: list[tuple[int, int, bool]], cache: SubagentCache) -> list[TableResult]:
        """Each table's decision carried out: sub-agents read (cached), merged, stepped."""
        from aegir.rl.swarm import decision_keys

        cache.fill(key for t, (g, s, deep) in enumerate(chosen)
                   for key in decision_keys(t, views[t], g, self.names[s], deep))
        out = []
        specialists = self.orch.specialist_names
        for t, (g, s, deep) in enumerate(chosen):
            view = views[t]
            cta, cpa = swarm_logp(t, view, g, s, deep, cache, self.merge, self.names)
            groups = wide_subtasks(view.num_columns, g)
            deep_cols = view.deep_columns if deep else ()
            critical, total = swarm_steps(self.orch.primary.config, view.phase3_reads, self.steps[s], len(groups),
                                          len(deep_cols))
            activated = [name for name, on in zip(specialists, view.phase3_active) if on]
            out.append(TableResult(cta, cpa, len(groups), self.names[s] if groups or deep_cols else None,
                                   bool(deep_cols), groups, deep_cols, activated, critical, total))
        return out

    def annotate(self, tables, examples: list[Example], prepare, where, max_count: int | None = None,
                 batch_size: int = 8) -> list[TableResult]:
        """The swarm on `tables` (raw, for the sub-tables) and their `examples` (the shared streams)."""
        views = table_views(self.orch, examples, batch_size, self.family)
        cache = SubagentCache(tables, self.subagents, prepare, where, batch_size)
        return self.run(views, self.decide(views, max_count), cache)

    def rows_read(self, num_rows: int, table_id: str, num_columns: int, prepare: PrepareConfig) -> set[int]:
        """The rows of a table whose cells `annotate` may serialize, whatever the policy decides:
        those its shared stream samples and those of every sub-table a decision can read (the
        wide groups of every option, each deep-search pair), each sub-table's sample seeded by
        its own id. A file read lazily needs only these (`aegir.data.user_tables`)."""
        subtasks = {columns for g in self.policy.options for columns in wide_subtasks(num_columns, g)}
        subtasks.update(deep_subtasks(range(num_columns)))
        ids = [table_id] + [sub_table_id(table_id, columns) for columns in sorted(subtasks)]
        return {row for read_id in ids for row in sample_rows(num_rows, prepare.max_rows, prepare.seed, read_id)}


def is_swarm_checkpoint(directory: str | Path) -> bool:
    """True when `directory`'s config.json describes a Phase 4 swarm."""
    return config_has_section(directory, "swarm")


def save_swarm(directory: str | Path, swarm: Swarm, phase3_dir: str | Path, subagent_dirs: dict[str, Path],
               extra: dict) -> Path:
    """Write the policy and merge weights; config.json names the frozen parts by relative path
    and fingerprint."""
    directory = Path(directory)

    def entry(name: str, path) -> dict:
        return {"name": name, "checkpoint": os.path.relpath(Path(path).resolve(), directory.resolve()),
                "fingerprint": checkpoint_fingerprint(path)}

    tensors = {f"policy.{k}": v for k, v in swarm.policy.state_dict().items()}
    tensors.update({f"merge.{k}": v for k, v in swarm.merge.state_dict().items()})
    payload = {"model": asdict(swarm.orch.primary.config),  # the primary's config, as Phase 3's checkpoint
               "swarm": {"options": list(swarm.policy.options), "d_model": swarm.orch.primary.config.d_model,
                         "phase3": entry("phase3", phase3_dir),
                         "specialists": [entry(name, subagent_dirs[name]) for name in swarm.names]},
               **extra}
    return write_checkpoint(directory, tensors, payload)


def _checked(directory: Path, entry: dict, config_path: Path) -> Path:
    if not isinstance(entry, dict) or not {"name", "checkpoint", "fingerprint"} <= set(entry):
        raise CheckpointError(config_path, f"bad entry {entry!r}: needs name, checkpoint, fingerprint")
    where = (directory / entry["checkpoint"]).resolve()
    if not (where / CONFIG_FILE).is_file():
        raise CheckpointError(where, f"{entry['name']!r} of {directory} is missing (run `dvc repro` or `dvc pull`)")
    found = checkpoint_fingerprint(where)
    if found != entry["fingerprint"]:
        raise CheckpointError(where, f"{entry['name']!r} has changed since {directory} was trained "
                                     f"(fingerprint {found[:12]}… ≠ recorded {entry['fingerprint'][:12]}…); "
                                     f"rerun phase4 (`dvc repro phase4`)")
    return where


def load_swarm(directory: str | Path) -> tuple[Swarm, dict]:
    """(the swarm in eval mode, config.json) of a checkpoint written by `save_swarm`."""
    from aegir.swarm.checkpoint import load_orchestrator

    directory = Path(directory)
    config_path = directory / CONFIG_FILE
    config, _, tensors = read_checkpoint(directory)
    meta = config.get("swarm")
    if not isinstance(meta, dict) or not isinstance(meta.get("specialists"), list) or "phase3" not in meta:
        raise CheckpointError(config_path, 'no "swarm" object naming its Phase 3 orchestrator and sub-agents')
    orch, _ = load_orchestrator(_checked(directory, meta["phase3"], config_path))
    subagents = {}
    for entry in meta["specialists"]:
        subagents[entry["name"]] = load_checkpoint(_checked(directory, entry, config_path))[0].eval()
    family = family_of_labels(cta_vocab())[0]
    policy = SpawnPolicy(int(meta["d_model"]), tuple(meta["options"]), len(subagents))
    merge = SwarmMerge(len(subagents), family)
    load_weights(policy, {k[len("policy."):]: v for k, v in tensors.items() if k.startswith("policy.")},
                 directory / "model.safetensors")
    load_weights(merge, {k[len("merge."):]: v for k, v in tensors.items() if k.startswith("merge.")},
                 directory / "model.safetensors")
    return Swarm(orch.eval(), subagents, policy.eval(), merge.eval()), config

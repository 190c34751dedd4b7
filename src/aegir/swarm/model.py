"""The trained swarm as one object: the frozen Phase 3 orchestrator, the frozen sub-agents, the
spawning policy and the merge; and its checkpoint (`models/phase4`).

`Swarm.annotate(tables, examples, cache)` runs the whole thing on tables: the orchestrator's
reads (`table_views`) and the sub-agents' second opinions (`subagent_readings`), the policy's
decision per table (argmax; `max_count` caps the sub-agents), the sub-agents it spawned (through
a `SubagentCache`), the per-column merge and deep search, the joint decoding, and each table's
critical and total steps (`aegir.swarm.spawn.swarm_steps`).

**The swarm starts where Phase 3 ends.** The orchestrator reads each table exactly as the
`phase3` stage scores it (`aegir.eval.grouped`: column groups, row views, with the reading its
checkpoint records), and the swarm's labels go through the same joint decoding
(`aegir.eval.joint`). A table on which nothing is spawned keeps the orchestrator's distributions
untouched, so never spawning is Phase 3's fused orchestrator, label for label (on the evaluation
splits Phase 4 takes the very distributions Phase 3 stored beside its checkpoint,
`aegir.eval.reads`). Sub-agents add evidence to that reading; they do not replace it. The
orchestrator's single read of the table's own stream still gives what the policy sees (its
pooled encoder output) and which specialists it routed to.

Checkpoint: `model.safetensors` holds `policy.*` and `merge.*` only; `config.json` names the
Phase 3 orchestrator and every sub-agent checkpoint by a path relative to the swarm's directory
and by fingerprint (as `aegir.orchestrator.checkpoint` does for Phase 3's specialists): a moved or
retrained one is a `CheckpointError` naming it, never a silently different swarm.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from aegir.config import MERGE_MODES, PrepareConfig
from aegir.data.dataset import Example, collate, eval_batches
from aegir.data.groups import sub_table_id
from aegir.data.serialize import sample_rows
from aegir.eval.grouped import (
    ALL_LABELS,
    TableReads,
    merge_predictions,
    rows_read,
    table_reads,
)
from aegir.eval.predict import TablePrediction, predict
from aegir.eval.recorded import recorded_reading
from aegir.labels import cta_vocab
from aegir.model.checkpoint import (
    CONFIG_FILE,
    CheckpointError,
    checkpoint_fingerprint,
    load_checkpoint,
    load_weights,
    read_checkpoint,
    write_checkpoint,
)
from aegir.model.network import AegirModel
from aegir.orchestrator.checkpoint import config_has_section
from aegir.orchestrator.critical import specialist_read_steps
from aegir.orchestrator.model import SwarmOrchestrator
from aegir.swarm.policy import SpawnPolicy
from aegir.swarm.spawn import (
    SubagentCache,
    SwarmMerge,
    deep_columns,
    deep_subtasks,
    family_of_labels,
    label_steps,
    swarm_steps,
    wide_subtasks,
)
from aegir.swarm.views import TableView, decision_keys, policy_inputs, swarm_logp

Decision = tuple[int, int, bool, bool]  # (wide sub-agents option, specialist index, deep, consult)


@dataclass(frozen=True)
class Phase3Reading:
    """How the Phase 3 orchestrator reads a table, as its checkpoint records it
    (`reading.columns`, `reading.views`, the joint decoding): one whole read and each column's
    argmax by default."""

    columns: int = 0
    views: int = 1
    decode: Callable[[TablePrediction], TablePrediction] | None = None

    def plan(self, tables, examples: Sequence[Example], prepare: PrepareConfig, where) -> TableReads:
        return table_reads(tables, examples, self.columns, self.views, prepare, where)


@torch.no_grad()
def phase3_readings(orch: SwarmOrchestrator, plan: TableReads, table_ids: Sequence[str], batch_size: int,
                    stored: list[TablePrediction] | None = None) -> list[TablePrediction]:
    """Each table's label distributions (every label, best first) from the orchestrator's routed
    reads of `plan`, merged over column groups and row views, before joint decoding: what
    `phase3` scores. `stored`: the reads' predictions as Phase 3 stored them (not run again)."""
    reads = stored if stored is not None else predict(orch.eval(), plan.reads, batch_size, top_k=ALL_LABELS,
                                                      forward=orch.annotate)
    if plan.one_read_per_table:
        return list(reads)
    return merge_predictions(plan, reads, table_ids, ALL_LABELS)


@torch.no_grad()
def subagent_readings(model: AegirModel, plan: TableReads, table_ids: Sequence[str], batch_size: int,
                      stored: list[TablePrediction] | None = None) -> list[TablePrediction]:
    """A sub-agent's second opinion of each table: a frozen Phase 1 model's label distributions
    from the same reads of `plan` as the orchestrator's, merged the same way. `stored`: the
    reads' predictions as its `phase1` stage stored them beside the checkpoint (not run again)."""
    reads = stored if stored is not None else predict(model.eval(), plan.reads, batch_size, top_k=ALL_LABELS)
    if plan.one_read_per_table:
        return list(reads)
    return merge_predictions(plan, reads, table_ids, ALL_LABELS)


def dense_log(ids: np.ndarray, probs: np.ndarray, width: int) -> torch.Tensor:
    """(C, width) log-probabilities from a prediction's (C, k) label ids and probabilities (every
    label: k = width); a probability that underflowed to 0 counts as 1e-30."""
    dense = np.zeros((len(ids), width), dtype=np.float32)
    np.put_along_axis(dense, ids.astype(np.int64), probs.astype(np.float32), axis=1)
    return torch.from_numpy(dense).clamp_min(1e-30).log()


def prediction_of(cta_logp: torch.Tensor, cpa_logp: torch.Tensor, table_id: str) -> TablePrediction:
    """A table's prediction with every label, best first, from its (C, n) log-probabilities."""
    return prediction_of_probs(cta_logp.exp(), cpa_logp.exp(), table_id)


def prediction_of_probs(cta_probs: torch.Tensor, cpa_probs: torch.Tensor, table_id: str) -> TablePrediction:
    """A table's prediction with every label, best first, from its (C, n) probabilities."""
    cta_p, cta_i = cta_probs.sort(-1, descending=True)
    cpa_p, cpa_i = cpa_probs.sort(-1, descending=True)
    return TablePrediction(table_id, cta_i.numpy(), cta_p.numpy(), cpa_i.numpy(), cpa_p.numpy())


@torch.no_grad()
def table_views(orch: SwarmOrchestrator, examples: list[Example], batch_size: int, family: torch.Tensor,
                readings: Sequence[TablePrediction] | None = None,
                consult: Sequence[Sequence[TablePrediction]] = (), group_columns: int = 0) -> list[TableView]:
    """One `TableView` per example: the frozen Phase 3 orchestrator's routed read of it (the
    policy's input, the specialists it routed to), and its label distributions: `readings[i]`
    (`phase3_readings`, the table as `phase3` reads it) when given, else that one read's. With
    `readings` only the routing runs (`SwarmOrchestrator.decide`: the router, then the subject
    rule), not the specialists' reads, the fusion and the vote whose labels they would replace.
    consult: per sub-agent specialist kind, its second opinion of every table
    (`subagent_readings`); group_columns: the orchestrator's column-group width."""
    reads = [specialist_read_steps(s.config, orch.stream_seam, orch.column_seam) for s in orch.specialists]
    views: list[TableView | None] = [None] * len(examples)
    orch.eval()
    n_cta, n_cpa = orch.primary.config.n_cta, orch.primary.config.n_cpa
    for indices in eval_batches(examples, batch_size):
        batch = collate([examples[i] for i in indices])
        encoded = orch.encode(batch)
        hidden = orch.primary.routing_hidden(batch, encoded)
        if readings is None:  # the labels too: the whole routed forward and the vote
            routed = orch.voted(batch, orch(batch, hidden if orch.num_specialists else None, encoded=encoded))
            mask = routed.activation_mask
            cta = torch.log_softmax(routed.output.cta_logits.float(), -1)
            cpa = torch.log_softmax(routed.output.cpa_logits.float(), -1)
        else:  # only the routing: the specialists are not read for labels that `readings` holds
            mask = orch.decide(batch, hidden)[0].activation_mask if orch.num_specialists else None
        for row, i in enumerate(indices):
            e, c = examples[i], examples[i].num_columns
            active = mask[row].tolist() if mask is not None else []
            if readings is None:
                cta_logp, cpa_logp, reading = cta[row, :c].clone(), cpa[row, :c].clone(), None
            else:
                reading = readings[i]
                cta_logp = dense_log(reading.cta_ids, reading.cta_probs, n_cta)
                cpa_logp = dense_log(reading.cpa_ids, reading.cpa_probs, n_cpa)
            views[i] = TableView(
                num_columns=c, cta_logp=cta_logp, cpa_logp=cpa_logp,
                hidden=hidden[row].float().clone(),
                phase3_reads=tuple(r for r, on in zip(reads, orch.separate_reads(active)) if on),
                phase3_active=tuple(bool(on) for on in active),
                deep_columns=deep_columns(cta_logp.argmax(-1).tolist(), family),
                reading=reading,
                consult=tuple((dense_log(p[i].cta_ids, p[i].cta_probs, n_cta),
                               dense_log(p[i].cpa_ids, p[i].cpa_probs, n_cpa)) for p in consult),
                group_columns=group_columns, phase3_subject=orch.subject_steps,
                cta_gold=torch.from_numpy(e.cta_labels.astype(np.int64)),
                cpa_gold=torch.from_numpy(e.cpa_labels.astype(np.int64)),
                stream_bytes=len(e.byte_ids) - 1)
    return views  # type: ignore[return-value]


@dataclass
class TableResult:
    """One table through the swarm: merged log-probs (C, n_cta), (C, n_cpa); the decision
    (wide sub-agents actually spawned, their specialist, deep search run); the wide groups and
    deep columns read; the Phase 3 specialists the orchestrator activated; critical and total
    layer-steps; `consulted`: the sub-agent kinds asked for a second opinion; `prediction`: its labels (every label, the chosen one first: the merged
    distributions through the joint decoding) and `phase3`: the same of the orchestrator's
    reading alone (what never spawning gives), so that `changes` can say what sub-agents changed."""

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
    prediction: TablePrediction | None = None
    phase3: TablePrediction | None = None
    consulted: tuple[str, ...] = ()

    @property
    def spawned(self) -> bool:
        """Whether any sub-agent ran (second opinion, wide or deep); a table without one keeps
        the orchestrator's reading as its `prediction`."""
        return bool(self.subagents or self.deep_columns or self.consulted)

    @property
    def count(self) -> int:
        """Sub-agents that ran: wide, deep and second opinions."""
        return self.subagents + len(self.deep_columns) + len(self.consulted)

    def changes(self) -> list[tuple[str, int, int, int]]:
        """(task, column, label before, label after) of every column whose chosen label differs
        from the orchestrator's alone (CPA from column 1: column 0 is the subject)."""
        if self.prediction is None or self.phase3 is None:
            return []
        out = []
        for task, first in (("cta", 0), ("cpa", 1)):
            before = getattr(self.phase3, f"{task}_ids")[:, 0].tolist()
            after = getattr(self.prediction, f"{task}_ids")[:, 0].tolist()
            out += [(task, c, int(b), int(a)) for c, (b, a) in enumerate(zip(before, after)) if c >= first and b != a]
        return out


class Swarm:
    """orch: the frozen Phase 3 orchestrator; subagents: name → frozen Phase 1 model (in the
    policy's specialist order); policy, merge: the trained Phase 4 parts; reading: how the
    orchestrator reads a table and decodes its labels (its checkpoint's, `Phase3Reading`)."""

    def __init__(self, orch: SwarmOrchestrator, subagents: dict[str, AegirModel], policy: SpawnPolicy,
                 merge: SwarmMerge, reading: Phase3Reading | None = None):
        self.orch, self.subagents, self.policy, self.merge = orch, subagents, policy, merge
        self.reading = reading or Phase3Reading()
        # (id(view), decision) → (view, decoded merged prediction, decoded reading alone): the joint
        # decoding (an assignment problem per table) of a decision already decoded is not repeated
        self._decoded: dict[tuple, tuple] = {}
        self.names = list(subagents)
        self.steps = [label_steps(m.config) for m in subagents.values()]
        self.family = family_of_labels(cta_vocab())[0]

    @torch.no_grad()
    def decide(self, views: list[TableView], max_count: int | None) -> list[Decision]:
        """(sub-agents option, specialist index, deep, consult) per table: the policy's argmax
        under the cap."""
        inputs = policy_inputs(views, list(range(len(views))), self.policy.options, max_count)
        d = self.policy.decide(*inputs)
        return [(self.policy.options[int(c)], int(s), bool(x), bool(k))
                for c, s, x, k in zip(d.count, d.specialist, d.deep, d.consult)]

    @torch.no_grad()
    def run(self, views: list[TableView], chosen: list[Decision], cache: SubagentCache) -> list[TableResult]:
        """Each table's decision carried out: sub-agents read (cached), merged, stepped."""

        cache.fill(key for t, (g, s, deep, _) in enumerate(chosen)
                   for key in decision_keys(t, views[t], g, self.names[s], deep))
        out = []
        specialists = self.orch.specialist_names
        for t, (g, s, deep, consult) in enumerate(chosen):
            view = views[t]
            consult = consult and bool(view.consult)
            cta, cpa = swarm_logp(t, view, g, s, deep, cache, self.merge, self.names, consult)
            groups = view.wide_groups(g)
            deep_cols = view.deep_columns if deep else ()
            critical, total = swarm_steps(self.orch.primary.config, view.phase3_reads, self.steps[s], len(groups),
                                          len(deep_cols), tuple(self.steps) if consult else (), view.phase3_subject)
            activated = [name for name, on in zip(specialists, view.phase3_active) if on]
            prediction, alone = self._decode(view, cta, cpa, (len(groups), s, deep_cols, consult), t)
            out.append(TableResult(cta, cpa, len(groups), self.names[s] if groups or deep_cols else None,
                                   bool(deep_cols), groups, deep_cols, activated, critical, total,
                                   prediction, alone, tuple(self.names) if consult else ()))
        return out

    def _decode(self, view: TableView, cta: torch.Tensor, cpa: torch.Tensor, decision: tuple,
                t: int) -> tuple[TablePrediction, TablePrediction]:
        """(the merged labels, the orchestrator's alone), each jointly decoded; a decision of this
        view decoded before is looked up (the swarm is frozen once trained: `run` is evaluation)."""
        spawned = decision[0] or decision[2] or decision[3]
        key = (id(view), decision if spawned else None)
        if key not in self._decoded:
            table_id = view.reading.table_id if view.reading is not None else str(t)
            alone_key = (id(view), None)
            if alone_key not in self._decoded:
                alone = view.reading if view.reading is not None else prediction_of(view.cta_logp, view.cpa_logp,
                                                                                    table_id)
                decoded_alone = self.decoded(alone)
                self._decoded[alone_key] = (view, decoded_alone, decoded_alone)
            decoded_alone = self._decoded[alone_key][2]
            if spawned:
                self._decoded[key] = (view, self.decoded(prediction_of(cta, cpa, table_id)), decoded_alone)
        _, prediction, alone = self._decoded[key]
        return prediction, alone

    def decoded(self, prediction: TablePrediction) -> TablePrediction:
        """`prediction` through the reading's joint decoding (each column's argmax without one)."""
        return self.reading.decode(prediction) if self.reading.decode else prediction

    def views(self, tables, examples: list[Example], prepare, where, batch_size: int = 8) -> list[TableView]:
        """The orchestrator's reads of `tables` (raw) and their `examples` (the shared streams),
        with every sub-agent kind's second opinion of the same reads."""
        plan = self.reading.plan(tables, examples, prepare, where)
        ids = [e.table_id for e in examples]
        readings = phase3_readings(self.orch, plan, ids, batch_size)
        consult = [subagent_readings(model, plan, ids, batch_size) for model in self.subagents.values()]
        return table_views(self.orch, examples, batch_size, self.family, readings, consult, self.reading.columns)

    def annotate(self, tables, examples: list[Example], prepare, where, max_count: int | None = None,
                 batch_size: int = 8) -> list[TableResult]:
        """The swarm on `tables` (raw, for the sub-tables) and their `examples` (the shared streams)."""
        self._decoded.clear()  # (the views of other tables)
        views = self.views(tables, examples, prepare, where, batch_size)
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
        rows = {row for read_id in ids for row in sample_rows(num_rows, prepare.max_rows, prepare.seed, read_id)}
        return rows | rows_read(num_rows, table_id, num_columns, self.reading.columns, self.reading.views, prepare)


def is_swarm_checkpoint(directory: str | Path) -> bool:
    """True when `directory`'s config.json describes a Phase 4 swarm."""
    return config_has_section(directory, "swarm")


def save_swarm(directory: str | Path, swarm: Swarm, phase3_dir: str | Path, subagent_dirs: dict[str, Path],
               extra: dict, beside: Callable[[Path], None] | None = None) -> Path:
    """Write the policy and merge weights; config.json names the frozen parts by relative path
    and fingerprint. `beside(staging)` writes more files with them (`write_checkpoint`)."""
    directory = Path(directory)

    def entry(name: str, path) -> dict:
        return {"name": name, "checkpoint": os.path.relpath(Path(path).resolve(), directory.resolve()),
                "fingerprint": checkpoint_fingerprint(path)}

    tensors = {f"policy.{k}": v for k, v in swarm.policy.state_dict().items()}
    tensors.update({f"merge.{k}": v for k, v in swarm.merge.state_dict().items()})
    payload = {"model": asdict(swarm.orch.primary.config),  # the primary's config, as Phase 3's checkpoint
               "swarm": {"options": list(swarm.policy.options), "d_model": swarm.orch.primary.config.d_model,
                         "merge": swarm.merge.mode,
                         "phase3": entry("phase3", phase3_dir),
                         "specialists": [entry(name, subagent_dirs[name]) for name in swarm.names]},
               **extra}
    return write_checkpoint(directory, tensors, payload, beside)


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
    from aegir.orchestrator.checkpoint import load_orchestrator

    directory = Path(directory)
    config_path = directory / CONFIG_FILE
    config, _, tensors = read_checkpoint(directory)
    meta = config.get("swarm")
    if not isinstance(meta, dict) or not isinstance(meta.get("specialists"), list) or "phase3" not in meta:
        raise CheckpointError(config_path, 'no "swarm" object naming its Phase 3 orchestrator and sub-agents')
    phase3_dir = _checked(directory, meta["phase3"], config_path)
    orch, phase3_config = load_orchestrator(phase3_dir)
    subagents = {}
    for entry in meta["specialists"]:
        subagents[entry["name"]] = load_checkpoint(_checked(directory, entry, config_path))[0].eval()
    family = family_of_labels(cta_vocab())[0]
    if "policy.consult_head.weight" not in tensors:
        raise CheckpointError(directory / "model.safetensors", "a swarm written before second opinions (no "
                              "consult head); rerun phase4 (`dvc repro phase4`)")
    policy = SpawnPolicy(int(meta["d_model"]), tuple(meta["options"]), len(subagents))
    mode = meta.get("merge", "product")  # a swarm written before the geometric merge summed its experts
    if mode not in MERGE_MODES:
        raise CheckpointError(config_path, f'swarm "merge" must be one of {list(MERGE_MODES)}, got {mode!r}')
    merge = SwarmMerge(len(subagents), family, mode=mode)
    load_weights(policy, {k[len("policy."):]: v for k, v in tensors.items() if k.startswith("policy.")},
                 directory / "model.safetensors")
    load_weights(merge, {k[len("merge."):]: v for k, v in tensors.items() if k.startswith("merge.")},
                 directory / "model.safetensors")
    return Swarm(orch.eval(), subagents, policy.eval(), merge.eval(), phase3_reading(phase3_config, phase3_dir)), config


def phase3_reading(config: dict, checkpoint: Path) -> Phase3Reading:
    """The reading a Phase 3 checkpoint's config.json records (`aegir.eval.recorded`)."""
    reading, decode = recorded_reading(config, checkpoint)
    return Phase3Reading(reading.columns, reading.views, decode)

"""Sub-agents spawned per sub-task (Phase 4): wide search, deep search, the per-column merge.

A **sub-agent** is a frozen Phase 1 checkpoint (any of `agents:`) given a **sub-task**: a
sub-table of the table, serialized on its own with the full per-table byte budget
(`aegir.data.serialize`, the same `prepare` params as the training data) and annotated by the
whole model (its CTA and CPA heads). Sub-agents are frozen and sub-tasks deterministic, so a
sub-agent's output is a pure function of (table, columns, specialist): `SubagentCache` computes
each once, and Phase 4 trains only its small policy and merge parameters on the cache.

**Wide search** (`column_groups`, `wide_subtasks`): the non-subject columns 1 … C−1 split into
g contiguous groups of balanced size (related columns tend to stand side by side: start and end
date, telephone and fax), and sub-task i is the sub-table (column 0, group i). Each column then
gets the bytes of a table of 1 + |group i| columns instead of a 1/C share of the shared stream:
more bytes and more cells (a wide table of 30 columns leaves each ~33 bytes of a 1024-byte
budget; a sub-task of 3 columns, ~340). Every non-subject column is read by exactly one
sub-agent; the subject column is read by all of them, as the context that makes CPA (the
relation of column 0 to column j) decidable.

**Merge** (`SwarmMerge`): per column, not through `RWKVStateFusion`. A sub-agent's final state
has read only its sub-table, so no single state covers the table, while each of its column
outputs is about exactly one column of the table; merging outputs column by column keeps that
correspondence. The merged log-probabilities of column c are a weighted product of experts,

    merged[c] = (w_primary · log p_primary[c] + w_consult · Σ_k log p_consult_k[c] + w_sub[s] · log p_sub[c])
                / (|w_primary| + K·|w_consult| + |w_sub[s]|)
                (then the fine stage: (merged[c] + w_deep · log p_deep[c]) / (1 + |w_deep|) − margin·off_family)

with learned weights per source (the primary, each specialist kind s as a sub-agent) and task
(CTA, CPA), then renormalised. The weights are trained on the plain weighted sum (`mode`
`product`: the division left out); the trained merge is *read* with the division
(`phase4.merge_reading: geometric`, the default): a weighted geometric mean, whose confidence
does not grow with the number of experts. Dividing a column's log-probs by one positive number
keeps their order, so where no deep search ran each column's own best label is the same either
way; only its confidence moves (and with it, a little, the joint decoding's choices). Deep search
adds its read to a merge whose scale the reading sets (and takes its coarse family from that
merge's probabilities), so there the reading can move a best label too. Read as a product, a column read by
the orchestrator, three second opinions and a sub-agent summed its log-probs with a total
weight near 2.3, as sharp as the square of one read: on `real` the tables the swarm spawned on
were given 93.6 % mean confidence at 80.4 % accuracy. Trained as a geometric mean, the weights
of every expert but the orchestrator went to 0 (docs/experiments.md, "A merge that does not
sharpen"). The consult terms join only where the decision consults. Column 0's sub-agent term is
the mean over the sub-agents that read it (all of them). Initial weights give
the primary alone plus a weak vote of each sub-agent; cross-entropy on gold labels trains them.

**Second opinions** (`consult`): every sub-agent specialist kind reads the *whole* table as
Phase 3's orchestrator reads it (column groups, row views: `aegir.eval.grouped`), beside the
orchestrator and in parallel with it; its per-column label distributions join the merge as one
more expert each, all under one learned weight per task (`SwarmMerge.consult`). A frozen
Phase 1 model read this way is a weaker reader than the fused orchestrator but a different one,
and the product of their distributions is right more often than either (docs/experiments.md,
"Second opinions"). It is the sub-agent that pays on narrow tables, where a sub-table (wide
search) holds nothing the orchestrator's own read of the whole table lacks.

**Wide search only where the table is wider than one read.** The orchestrator reads a table of
more columns than `reading.columns` in groups; a narrower table it reads whole, twice. A sub-table
of such a table gives a weaker model less context than the orchestrator already had, so wide
search is offered only on tables wider than one of Phase 3's column groups (`wide_eligible`).

**Deep search** (`family_of_labels`, `deep_columns`, `SwarmMerge.deep`): a coarse decision,
then the fine label. The coarse decision is the table's *family*: the schema.org class X that
the wide search's merged CTA probabilities give most mass over the `X/name` and
`X/description` labels, summed over columns (the lookalike labels SOTAB has 25 of). The fine
stage waits for it: a second round of sub-agents reads each *family column* (a column whose
primary top-1 label is a `*/name` or `*/description` label) alone with the subject at the full
budget, and the family labels of every other class are pushed down by a learned margin. It is
a sequential stage after the wide search, which `swarm_graph` counts in critical steps.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from aegir.config import MERGE_MODES, PrepareConfig
from aegir.data.dataset import Example, collate, eval_batches, examples_from_tables
from aegir.data.groups import column_groups, sub_table
from aegir.data.table import Table
from aegir.labels import Vocabulary, label_families
from aegir.model.network import AegirModel
from aegir.orchestrator.critical import longest_path, phase3_graph

TASKS = ("cta", "cpa")
MIN_TOTAL_WEIGHT = 1e-3  # a column's total |weight| is taken as at least this before dividing by it


# ----------------------------------------------------------------------------- sub-tasks


def wide_subtasks(num_columns: int, g: int) -> list[tuple[int, ...]]:
    """The column tuples of a wide search with g sub-agents: (0, *group) per group."""
    return [(0, *group) for group in column_groups(num_columns, g)]


def wide_eligible(num_columns: int, group_columns: int) -> bool:
    """Whether wide search may run on a table of `num_columns`: only when the orchestrator reads
    it in more than one column group of `group_columns` (0: no grouping, any table with a column
    besides the subject)."""
    return num_columns > group_columns if group_columns > 0 else num_columns > 1


def subtask_examples(tables: Sequence[Table], keys: Sequence[tuple[int, tuple[int, ...]]],
                     cfg: PrepareConfig, where) -> list[Example]:
    """Examples of the sub-tasks (table index, columns), each serialized with the full budget."""
    subs = [sub_table(tables[t], columns) for t, columns in keys]
    return examples_from_tables(subs, cfg.byte_budget, cfg.max_rows, cfg.seed, where, cfg.compact_columns,
                                cfg.compact_cell_bytes)


# ----------------------------------------------------------------------------- sub-agents


@dataclass(frozen=True)
class SubagentOutput:
    """One sub-agent's read of one sub-task: cta_logp (c, n_cta) and cpa_logp (c, n_cpa)
    log-probabilities of its c columns (row 0 the subject; its CPA row is meaningless)."""

    cta_logp: torch.Tensor
    cpa_logp: torch.Tensor


@torch.no_grad()
def read_subtasks(model: AegirModel, examples: Sequence[Example], batch_size: int = 32) -> list[SubagentOutput]:
    """Every sub-task through `model` in batches (length-sorted, `eval_batches`): one batched
    call per batch of sub-tasks, whatever tables they come from. In `examples` order."""
    model.eval()
    out: list[SubagentOutput | None] = [None] * len(examples)
    for indices in eval_batches(examples, batch_size):
        result = model(collate([examples[i] for i in indices]))
        cta = F.log_softmax(result.cta_logits.float(), -1)
        cpa = F.log_softmax(result.cpa_logits.float(), -1)
        for row, i in enumerate(indices):
            c = examples[i].num_columns
            out[i] = SubagentOutput(cta[row, :c].clone(), cpa[row, :c].clone())
    return out  # type: ignore[return-value]


@torch.no_grad()
def read_subtasks_one_at_a_time(model: AegirModel, examples: Sequence[Example]) -> list[SubagentOutput]:
    """The reference for `read_subtasks`: each sub-task alone, a batch of one, no padding."""
    model.eval()
    out = []
    for example in examples:
        result = model(collate([example]))
        out.append(SubagentOutput(F.log_softmax(result.cta_logits.float(), -1)[0],
                                  F.log_softmax(result.cpa_logits.float(), -1)[0]))
    return out


CacheKey = tuple[int, tuple[int, ...], str]  # (table index, columns, specialist name)


class SubagentCache:
    """Sub-agent outputs of one list of tables, computed once per (table, columns, specialist).

    `fill(keys)` reads the keys not yet cached, each specialist's in one pass of batched calls,
    in sorted key order; `get(key)` returns a cached output. `reads` counts sub-tasks read.
    A batched read's floats depend on the other sub-tasks in its batch, so the cached bytes
    depend on the history of `fill` calls: a run that must resume to the same bytes fills
    everything it may read at once (Phase 4's training does).
    """

    def __init__(self, tables: Sequence[Table], specialists: dict[str, AegirModel], prepare: PrepareConfig,
                 where, batch_size: int = 32):
        self.tables = tables
        self.specialists = specialists
        self.prepare = prepare
        self.where = where
        self.batch_size = batch_size
        self.outputs: dict[CacheKey, SubagentOutput] = {}
        self.reads = 0
        self.seconds = 0.0

    def fill(self, keys: Iterable[CacheKey]) -> None:
        missing = sorted({k for k in keys if k not in self.outputs})
        start = time.perf_counter()
        for name in sorted({k[2] for k in missing}):
            mine = [k for k in missing if k[2] == name]
            examples = subtask_examples(self.tables, [(t, cols) for t, cols, _ in mine], self.prepare, self.where)
            for key, output in zip(mine, read_subtasks(self.specialists[name], examples, self.batch_size)):
                self.outputs[key] = output
            self.reads += len(mine)
        self.seconds += time.perf_counter() - start

    def get(self, key: CacheKey) -> SubagentOutput:
        return self.outputs[key]


# ----------------------------------------------------------------------------- deep search


def family_of_labels(vocab: Vocabulary) -> tuple[torch.Tensor, list[str]]:
    """(family id per CTA label, −1 for labels of no family; the family names): the family of
    `X/name` and `X/description` is the class X (`aegir.labels.label_families`)."""
    ids, families = label_families(vocab)
    return torch.tensor(ids, dtype=torch.long), list(families)


def deep_columns(primary_cta_top: Sequence[int], family: torch.Tensor) -> tuple[int, ...]:
    """The columns deep search re-reads: those whose primary top-1 CTA label has a family."""
    return tuple(c for c, label in enumerate(primary_cta_top) if int(family[label]) >= 0)


def deep_subtasks(columns: Sequence[int]) -> list[tuple[int, ...]]:
    """One sub-task per family column: the subject alone (column 0) or (0, c)."""
    return [(0,) if c == 0 else (0, c) for c in columns]


# ----------------------------------------------------------------------------- decisions and merge


@dataclass(frozen=True)
class SpawnDecision:
    """What the policy decided for one table: g wide sub-agents (0 = none), the specialist they
    instantiate (index into the sub-agent specialists), and whether to run deep search."""

    subagents: int
    specialist: int
    deep: bool


def spawned_logp(num_columns: int, outputs: Sequence[SubagentOutput], subtasks: Sequence[tuple[int, ...]],
                 task: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Scatter sub-agent outputs back to the table's columns: ((C, n) log-probs, (C,) bool
    covered). A column read by several sub-agents (the subject) gets the mean of their rows."""
    n = getattr(outputs[0], f"{task}_logp").shape[-1] if outputs else 1
    total = torch.zeros(num_columns, n)
    count = torch.zeros(num_columns)
    for output, columns in zip(outputs, subtasks):
        logp = getattr(output, f"{task}_logp")
        for row, c in enumerate(columns):
            total[c] += logp[row]
            count[c] += 1
    covered = count > 0
    return total / count.clamp(min=1)[:, None], covered


class SwarmMerge(nn.Module):
    """Per-column merge of the primary's and the sub-agents' log-probs (module docstring).

    num_specialists: S sub-agent specialist kinds. Weights per task (0 = CTA, 1 = CPA):
    `primary` (2,), `consult` (2,) (every second opinion alike), `wide` (S, 2), `deep` (S, 2),
    and the deep-search `margin` (softplus of a scalar, ≥ 0) subtracted from off-family
    `*/name` / `*/description` CTA logits.
    """

    def __init__(self, num_specialists: int, family: torch.Tensor, init_sub_weight: float = 0.5,
                 init_margin: float = 2.0, init_consult_weight: float = 0.33, mode: str = "product"):
        super().__init__()
        if mode not in MERGE_MODES:
            raise ValueError(f"SwarmMerge: mode must be one of {MERGE_MODES}, got {mode!r}")
        self.mode = mode
        self.primary = nn.Parameter(torch.ones(2))
        # one weight per task for every second opinion alike: per-kind weights, fitted on the
        # synthetic training tables where every kind reads about as well, overweighted one kind
        # and lost 2.6 CPA points on `real` (docs/experiments.md, "Second opinions")
        self.consult = nn.Parameter(torch.full((2,), init_consult_weight))
        self.wide = nn.Parameter(torch.full((num_specialists, 2), init_sub_weight))
        self.deep = nn.Parameter(torch.full((num_specialists, 2), init_sub_weight))
        self.margin_raw = nn.Parameter(torch.tensor(float(init_margin)).expm1().log())  # softplus⁻¹
        self.register_buffer("family", family.clone(), persistent=False)
        self.num_families = int(family.max()) + 1 if len(family) else 0

    @property
    def margin(self) -> torch.Tensor:
        return F.softplus(self.margin_raw)

    def wide_merge(self, primary: torch.Tensor, sub: torch.Tensor | None, covered: torch.Tensor | None,
                   specialist: int, task: int, consult: torch.Tensor | None = None) -> torch.Tensor:
        """primary, sub: (C, n) log-probs (sub None: no wide search); covered: (C,) bool;
        consult: (S, C, n) log-probs of every specialist kind's second opinion, or None →
        merged log-probs (C, n)."""
        merged = self.primary[task] * primary
        total = self.primary[task].abs().expand(primary.shape[0])
        if consult is not None:
            merged = merged + self.consult[task] * consult.sum(0)
            total = total + self.consult[task].abs() * consult.shape[0]
        if sub is not None:
            merged = merged + self.wide[specialist, task] * sub * covered[:, None]
            total = total + self.wide[specialist, task].abs() * covered
        return F.log_softmax(self._normalised(merged, total), -1)

    def _normalised(self, merged: torch.Tensor, total: torch.Tensor) -> torch.Tensor:
        """`merged` (C, n), a weighted sum of log-probs, as the merge's mode takes it: divided by
        each column's total |weight| (`geometric`: a weighted mean, a product of experts that does
        not sharpen with their count) or as it is (`product`)."""
        if self.mode == "product":
            return merged
        return merged / total.clamp(min=MIN_TOTAL_WEIGHT)[:, None]

    def coarse_family(self, cta_logp: torch.Tensor) -> int:
        """The coarse decision: the family with the most CTA probability mass over columns."""
        mass = torch.zeros(self.num_families).index_add_(
            0, self.family.clamp(min=0), cta_logp.detach().exp().sum(0) * (self.family >= 0))
        return int(mass.argmax())

    def deep_merge(self, merged: torch.Tensor, deep: torch.Tensor, covered: torch.Tensor, specialist: int,
                   task: int, family: int | None) -> torch.Tensor:
        """The fine stage: the deep reads' log-probs on the columns they read, and for CTA the
        off-family name/description labels pushed down by the margin."""
        out = merged + self.deep[specialist, task] * deep * covered[:, None]
        out = self._normalised(out, 1.0 + self.deep[specialist, task].abs() * covered)
        if family is not None:
            off = (self.family >= 0) & (self.family != family)  # (n_cta,)
            out = out - self.margin * off.to(out.dtype)[None] * covered[:, None]
        return F.log_softmax(out, -1)


# ----------------------------------------------------------------------------- critical steps


def label_steps(config) -> int:
    """A sub-agent's sequential layer-steps to labels: encoder, main, decoder, column attention."""
    return config.encoder_layers + config.main_layers + config.decoder_layers + config.context_layers


def swarm_graph(primary_config, phase3_read_steps: Sequence[tuple[int, int]], subagent_steps: int, wide: int,
                deep: int, consult: Sequence[int] = (), subject: int = 0) -> tuple[dict[str, int], dict[str, list[str]]]:
    """The dependency graph of one table's swarm, in sequential layer-steps.

        prefix (primary encoder) ─► Phase 3 specialists ─► primary rest ─► columns ─┐
              └─► policy ─► `wide` sub-agents in parallel ────────────────────────────┤
        `consult` second opinions in parallel (each its own steps to labels) ─────────┴─► merge
                  ─► coarse decision ─► `deep` sub-agents in parallel ─► fine labels

    phase3_read_steps: (state read, stream) steps of each Phase 3 specialist the router activated;
    that part of the graph is Phase 3's own (`aegir.orchestrator.critical.phase3_graph`, with its
    subject rule's read of `subject` steps where the orchestrator routes by it). The
    policy reads the prefix's pooled output, so the wide sub-agents run beside the primary's
    rest; a second opinion reads the table itself, so it starts with the orchestrator (its column
    groups and row views are one batch: one read's steps); the deep round waits for the merge
    (its coarse decision reads the merged labels).
    Policy, merge and decisions are heads (0 steps). `longest_path` gives the critical steps,
    the sum of all steps the total work.
    """
    steps, after = phase3_graph(primary_config, phase3_read_steps, subject)
    steps["merge"], after["merge"] = 0, ["columns"]
    for i in range(wide):
        steps[f"wide{i}"], after[f"wide{i}"] = subagent_steps, ["prefix"]
        after["merge"].append(f"wide{i}")
    for i, own in enumerate(consult):
        steps[f"consult{i}"], after[f"consult{i}"] = own, []
        after["merge"].append(f"consult{i}")
    if deep:
        steps["fine"], after["fine"] = 0, []
        for i in range(deep):
            steps[f"deep{i}"], after[f"deep{i}"] = subagent_steps, ["merge"]
            after["fine"].append(f"deep{i}")
    return steps, after


def swarm_steps(primary_config, phase3_read_steps: Sequence[tuple[int, int]], subagent_steps: int, wide: int,
                deep: int, consult: Sequence[int] = (), subject: int = 0) -> tuple[int, int]:
    """(critical steps, total steps) of one table's swarm (`swarm_graph`)."""
    steps, after = swarm_graph(primary_config, phase3_read_steps, subagent_steps, wide, deep, consult, subject)
    return longest_path(steps, after), sum(steps.values())

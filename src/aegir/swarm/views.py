"""What the Phase 4 policy sees of a table, and what one decision reads from the sub-agents.

`TableView` is one table as the frozen Phase 3 orchestrator left it (its reading, its pooled
encoder output, the columns deep search may refine). `policy_inputs` turns views into the
policy's inputs; `decision_keys` names the sub-agent outputs a decision reads from the
`SubagentCache`; `swarm_logp` merges them into the swarm's label log-probs. The update that
trains the policy and the merge on these is `aegir.rl.swarm_update`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from aegir.eval.predict import TablePrediction
from aegir.swarm.policy import SpawnPolicy, allowed_options
from aegir.swarm.spawn import (
    CacheKey,
    SubagentCache,
    SwarmMerge,
    deep_subtasks,
    spawned_logp,
    wide_subtasks,
)


@dataclass
class TableView:
    """What Phase 4 knows of one table before spawning: from the frozen Phase 3 orchestrator.

    cta_logp (C, n_cta), cpa_logp (C, n_cpa): the orchestrator's label log-probs (its reading
    of the table as `phase3` scores it, `aegir.swarm.model.phase3_readings`); hidden (D,): its
    pooled encoder output; phase3_reads: (state read, stream) steps of the Phase 3 specialists it
    activated (`aegir.orchestrator.critical.specialist_read_steps`);
    deep_columns: columns whose top-1 CTA label has a family; gold labels (C,) each;
    stream_bytes: length of its shared stream; phase3_active: which Phase 3 specialists ran;
    reading: that reading as a prediction (every label, best first), None when the view holds
    a single read's log-probs.
    """

    num_columns: int
    cta_logp: torch.Tensor
    cpa_logp: torch.Tensor
    hidden: torch.Tensor
    phase3_reads: tuple[tuple[int, int], ...]
    deep_columns: tuple[int, ...]
    cta_gold: torch.Tensor
    cpa_gold: torch.Tensor
    stream_bytes: int
    phase3_active: tuple[bool, ...] = ()
    reading: TablePrediction | None = None


def decision_keys(table: int, view: TableView, subagents: int, specialist: str, deep: bool) -> list[CacheKey]:
    """The cache keys one table's decision reads."""
    keys = [(table, cols, specialist) for cols in wide_subtasks(view.num_columns, subagents)]
    if deep:
        keys += [(table, cols, specialist) for cols in deep_subtasks(view.deep_columns)]
    return keys


def swarm_logp(table: int, view: TableView, subagents: int, specialist: int, deep: bool, cache: SubagentCache,
               merge: SwarmMerge, names: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """The swarm's merged (CTA (C, n_cta), CPA (C, n_cpa)) log-probs of one table's decision:
    the wide search's per-column merge, then (if `deep`) the coarse family and the fine stage.
    A decision that spawns nothing keeps the orchestrator's log-probs as they are."""
    C, name = view.num_columns, names[specialist]
    subtasks = wide_subtasks(C, subagents)
    if not subtasks and not (deep and view.deep_columns):
        return view.cta_logp, view.cpa_logp
    cta = F.log_softmax(merge.primary[0] * view.cta_logp, -1)
    cpa = F.log_softmax(merge.primary[1] * view.cpa_logp, -1)
    if subtasks:
        outputs = [cache.get((table, cols, name)) for cols in subtasks]
        sub_cta, covered = spawned_logp(C, outputs, subtasks, "cta")
        sub_cpa, _ = spawned_logp(C, outputs, subtasks, "cpa")
        cta = merge.wide_merge(view.cta_logp, sub_cta, covered, specialist, 0)
        cpa = merge.wide_merge(view.cpa_logp, sub_cpa, covered, specialist, 1)
    if deep and view.deep_columns:
        family = merge.coarse_family(cta)  # the coarse decision, from the wide search's labels
        subtasks = deep_subtasks(view.deep_columns)
        outputs = [cache.get((table, cols, name)) for cols in subtasks]
        deep_cta, covered = spawned_logp(C, outputs, subtasks, "cta")
        deep_cpa, _ = spawned_logp(C, outputs, subtasks, "cpa")
        cta = merge.deep_merge(cta, deep_cta, covered, specialist, 0, family)
        cpa = merge.deep_merge(cpa, deep_cpa, covered, specialist, 1, None)
    return cta, cpa


def policy_inputs(views: list[TableView], rows: list[int], options: tuple[int, ...], max_count: int | None):
    hidden = torch.stack([views[t].hidden for t in rows])
    columns = torch.tensor([views[t].num_columns for t in rows])
    width = SpawnPolicy.width_features(columns, torch.tensor([views[t].stream_bytes for t in rows]))
    allowed = allowed_options(options, columns, max_count)
    has_deep = torch.tensor([bool(views[t].deep_columns) for t in rows])
    return hidden, width, allowed, has_deep

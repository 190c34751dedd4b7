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

from aegir.eval.predict import TablePrediction
from aegir.swarm.policy import SpawnPolicy, allowed_options
from aegir.swarm.spawn import (
    CacheKey,
    SubagentCache,
    SwarmMerge,
    deep_subtasks,
    spawned_logp,
    wide_eligible,
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
    a single read's log-probs; consult: each sub-agent specialist kind's second opinion, its
    (CTA, CPA) log-probs of the whole table read as the orchestrator reads it (in the swarm's
    specialist order; empty: none read, the table cannot consult); group_columns: the width of
    the orchestrator's column groups (`reading.columns`), which decides `wide_groups`;
    phase3_subject: steps of the orchestrator's subject-rule read that its routing waited for
    (`SwarmOrchestrator.subject_steps`; 0 without the rule).
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
    consult: tuple[tuple[torch.Tensor, torch.Tensor], ...] = ()
    group_columns: int = 0
    phase3_subject: int = 0

    def wide_groups(self, g: int) -> list[tuple[int, ...]]:
        """The sub-tasks of a wide search with g sub-agents; none on a table the orchestrator
        reads in one column group (`aegir.swarm.spawn.wide_eligible`)."""
        return wide_subtasks(self.num_columns, g) if wide_eligible(self.num_columns, self.group_columns) else []

    def doubt(self) -> torch.Tensor:
        """(2,): the orchestrator's mean 1 − top-1 probability over the table's columns, CTA and
        CPA (CPA from column 1; 0 for a table of one column)."""
        cta = 1 - self.cta_logp.exp().max(-1).values.mean()
        cpa = 1 - self.cpa_logp[1:].exp().max(-1).values.mean() if self.num_columns > 1 else torch.tensor(0.0)
        return torch.stack([cta, cpa]).float()

    def consult_logp(self, task: str) -> torch.Tensor:
        """(S, C, n) log-probs of the second opinions of `task`."""
        return torch.stack([pair[0 if task == "cta" else 1] for pair in self.consult])


def decision_keys(table: int, view: TableView, subagents: int, specialist: str, deep: bool) -> list[CacheKey]:
    """The cache keys one table's decision reads."""
    keys = [(table, cols, specialist) for cols in view.wide_groups(subagents)]
    if deep:
        keys += [(table, cols, specialist) for cols in deep_subtasks(view.deep_columns)]
    return keys


def swarm_logp(table: int, view: TableView, subagents: int, specialist: int, deep: bool, cache: SubagentCache,
               merge: SwarmMerge, names: list[str], consult: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The swarm's merged (CTA (C, n_cta), CPA (C, n_cpa)) log-probs of one table's decision:
    the per-column merge of the second opinions (if `consult`) and the wide search, then (if
    `deep`) the coarse family and the fine stage. A decision that spawns nothing keeps the
    orchestrator's log-probs as they are."""
    C, name = view.num_columns, names[specialist]
    subtasks = view.wide_groups(subagents)
    consult = consult and bool(view.consult)
    if not subtasks and not consult and not (deep and view.deep_columns):
        return view.cta_logp, view.cpa_logp
    # the wide stage: the orchestrator's log-probs with the second opinions and the wide
    # sub-agents that ran (neither: the orchestrator alone, as the merge takes it)
    sub_cta = sub_cpa = covered = None
    if subtasks:
        outputs = [cache.get((table, cols, name)) for cols in subtasks]
        sub_cta, covered = spawned_logp(C, outputs, subtasks, "cta")
        sub_cpa, _ = spawned_logp(C, outputs, subtasks, "cpa")
    cta = merge.wide_merge(view.cta_logp, sub_cta, covered, specialist, 0,
                           view.consult_logp("cta") if consult else None)
    cpa = merge.wide_merge(view.cpa_logp, sub_cpa, covered, specialist, 1,
                           view.consult_logp("cpa") if consult else None)
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
    width = SpawnPolicy.width_features(columns, torch.tensor([views[t].stream_bytes for t in rows]),
                                       torch.stack([views[t].doubt() for t in rows]))
    allowed = allowed_options(options, columns, max_count)
    # a table read in one column group takes no wide search: only the option 0 stays
    eligible = torch.tensor([wide_eligible(views[t].num_columns, views[t].group_columns) for t in rows])
    allowed &= eligible[:, None] | (torch.tensor(options) == 0)[None]
    has_deep = torch.tensor([bool(views[t].deep_columns) for t in rows])
    has_consult = torch.tensor([bool(views[t].consult) for t in rows])
    return hidden, width, allowed, has_deep, has_consult

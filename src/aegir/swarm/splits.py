"""The tables Phase 4 reads: one split's examples, raw tables, the orchestrator's views of them
and the sub-agent cache (`SplitData`), for training (`load_training`: `policy_train`, then
`wide_train`) and for scoring an evaluation split (`load_split`).

The orchestrator reads every table as `phase3` scored it (`aegir.swarm.model.phase3_readings`;
on an evaluation split from the distributions Phase 3 stored, `aegir.eval.reads`, when they are
of the same reads), and so does every sub-agent kind for its second opinion
(`aegir.swarm.model.subagent_readings`; from the distributions its `phase1` stage stored).
"""

from __future__ import annotations

from pathlib import Path

import torch

from aegir.config import POLICY_TRAIN_SPLIT, SWARM_TRAIN_SPLIT, Params, Phase4Config
from aegir.data.dataset import Example, examples_from_arrow
from aegir.data.prepared import read_split, split_path, tables_from_arrow
from aegir.errors import check_config
from aegir.eval.reads import StoredReads, stored_predictions
from aegir.orchestrator.model import SwarmOrchestrator
from aegir.swarm.model import Phase3Reading, phase3_readings, subagent_readings, table_views
from aegir.swarm.spawn import SubagentCache
from aegir.swarm.views import TableView


class SplitData:
    """One split's examples, raw tables, views and sub-agent cache."""

    def __init__(self, name: str, examples: list[Example], tables: list, views: list[TableView], cache: SubagentCache):
        self.name, self.examples, self.tables, self.views, self.cache = name, examples, tables, views, cache


def second_opinions(subagents: dict, plan, table_ids: list[str], batch_size: int, split: str | None = None,
                    stores: dict[str, StoredReads | None] | None = None) -> list:
    """Every sub-agent kind's second opinion of the tables of `plan` (`subagent_readings`), in
    `subagents` order; on an evaluation `split` from the distributions in `stores` (name → its
    checkpoint's store) where they are of these reads."""
    out = []
    for name, model in subagents.items():
        store = (stores or {}).get(name)
        stored = stored_predictions(store, split, plan.reads) if store is not None and split else None
        out.append(subagent_readings(model, plan, table_ids, batch_size, stored))
    return out


def load_split(name: str, data_dir: Path, orch: SwarmOrchestrator, subagents: dict, params: Params,
               family: torch.Tensor, reading: Phase3Reading, store: StoredReads | None,
               limit: int = 0, subagent_stores: dict[str, StoredReads | None] | None = None) -> tuple[SplitData, bool]:
    """The first `limit` tables of split `name` (0: all), its Parquet file read once, the
    orchestrator's reading of each as `phase3` scored it (`store`: the distributions Phase 3
    stored, taken when they are of these reads) and every sub-agent kind's second opinion
    (`subagent_stores`: their `phase1` stages' distributions, likewise); and whether the
    orchestrator's were stored."""
    cfg: Phase4Config = params.phase4
    arrow = read_split(data_dir, name)
    if limit:
        arrow = arrow.slice(0, limit)
    examples = examples_from_arrow(arrow, split_path(data_dir, name))
    tables = tables_from_arrow(arrow)
    plan = reading.plan(tables, examples, params.prepare, split_path(data_dir, name))
    stored = stored_predictions(store, name, plan.reads) if store is not None else None
    ids = [e.table_id for e in examples]
    readings = phase3_readings(orch, plan, ids, cfg.eval_batch_size, stored)
    consult = second_opinions(subagents, plan, ids, cfg.eval_batch_size, name, subagent_stores)
    views = table_views(orch, examples, cfg.eval_batch_size, family, readings, consult, reading.columns)
    cache = SubagentCache(tables, subagents, params.prepare, split_path(data_dir, name), cfg.eval_batch_size)
    return SplitData(name, examples, tables, views, cache), stored is not None


def load_training(data_dir: Path, orch: SwarmOrchestrator, subagents: dict, params: Params,
                  family: torch.Tensor, reading: Phase3Reading) -> SplitData:
    """Phase 4's training tables: the first `train_tables` of `policy_train`, then the first
    `wide_train_tables` of `wide_train`, as one list with one sub-agent cache. Neither split is
    read by any model of Phases 1–3 (`aegir.config`)."""
    cfg: Phase4Config = params.phase4
    train = read_split(data_dir, POLICY_TRAIN_SPLIT)
    count = len(train)
    check_config(cfg.train_tables <= count, "phase4.train_tables",
                 f"asks for {cfg.train_tables} tables; {split_path(data_dir, POLICY_TRAIN_SPLIT)} has {count} "
                 f"(synthetic.policy_train_tables)")
    train = train.slice(0, cfg.train_tables)
    examples = examples_from_arrow(train, split_path(data_dir, POLICY_TRAIN_SPLIT))
    tables = tables_from_arrow(train)
    if cfg.wide_train_tables:
        wide = read_split(data_dir, SWARM_TRAIN_SPLIT)
        check_config(cfg.wide_train_tables <= len(wide), "phase4.wide_train_tables",
                     f"asks for {cfg.wide_train_tables} tables; {split_path(data_dir, SWARM_TRAIN_SPLIT)} has "
                     f"{len(wide)} (synthetic.wide_train_tables)")
        wide = wide.slice(0, cfg.wide_train_tables)
        examples += examples_from_arrow(wide, split_path(data_dir, SWARM_TRAIN_SPLIT))
        tables += tables_from_arrow(wide)
    plan = reading.plan(tables, examples, params.prepare, data_dir)
    ids = [e.table_id for e in examples]
    readings = phase3_readings(orch, plan, ids, cfg.eval_batch_size)
    consult = second_opinions(subagents, plan, ids, cfg.eval_batch_size)
    views = table_views(orch, examples, cfg.eval_batch_size, family, readings, consult, reading.columns)
    cache = SubagentCache(tables, subagents, params.prepare, data_dir, cfg.eval_batch_size)
    return SplitData(POLICY_TRAIN_SPLIT, examples, tables, views, cache)

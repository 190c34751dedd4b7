"""Stage `phase4`: the swarm — sub-agents spawned per table over the frozen Phase 3 orchestrator.

    python -m aegir.stages.phase4 --params params.yaml --data data/prepared \\
        --phase3 models/phase3 --models models/phase1 --out models/phase4 \\
        --metrics results/phase4 --state state/phase4

1. The Phase 3 orchestrator (frozen) reads every table exactly as `phase3` scored it (column
   groups, row views; on the evaluation splits the distributions Phase 3 stored beside its
   checkpoint, `aegir.eval.reads`), and once more as one stream for its pooled encoder output
   and the specialists it activated (`TableView`). Every policy's labels go through the joint
   decoding Phase 3's checkpoint records, so never spawning *is* Phase 3's fused orchestrator
   (`aegir.swarm.model`: the swarm starts where Phase 3 ends).
2. A spawning policy (`aegir.swarm.policy`) decides per table whether to ask every sub-agent
   kind for a second opinion (each frozen Phase 1 checkpoint reads the whole table as the
   orchestrator does, beside it: on the evaluation splits from the distributions its `phase1`
   stage stored), how many wide-search sub-agents (0 … `max_subagents`; only on a table wider
   than one of the orchestrator's column groups), which frozen Phase 1 checkpoint they
   instantiate, and whether to run deep search; the sub-agents' outputs merge per column
   (`aegir.swarm.spawn`). Sub-agents are frozen and sub-tasks deterministic, so their outputs
   are cached per (table, columns, specialist) and only the policy and the merge weights train
   (`aegir.rl.swarm_training`): PARL's token-level clipped loss with the `lambda` schedule and
   `rewards` (`aegir.rl.swarm_update`), budget-limited phases (a cap on sub-agents per table,
   growing) alternating with uncapped ones, on `phase4.train_tables` tables of `policy_train`
   (ordinary tables that no model of Phases 1–3 has read: on them the orchestrator is as sure
   and as right as on the tables it will be scored on) and `phase4.wide_train_tables` of
   `wide_train` (many-column tables, so that the policy meets the tables where spawning pays);
   each critical step a decision adds costs `phase4.step_cost` of reward.
3. Scored on every evaluation split (`aegir.swarm.evaluate`): the learned policy (at
   `max_subagents`) and two fixed controls, never spawn (serial collapse: the Phase 3
   orchestrator as `phase3` scores it) and always spawn the maximum, second opinions included
   (spurious parallelism); and the scaling curve, for each budget n of `scaling_n` on `test`,
   `corner_cases`, `wide`: F1, mean spawned, critical and total steps of the learned policy
   capped at n and the two controls, and wall-clock per table of n sub-agents batched
   (`eval_batch_size` sub-tasks per call) vs one after another. Each policy's micro-F1 per
   critical step (the latency it costs) is reported per split and on the scaling splits pooled,
   where narrow and wide tables come together and an adaptive policy can beat both fixed ones.

Outputs:
  --out       policy + merge (`model.safetensors`) and config.json naming the Phase 3
              orchestrator and the sub-agent checkpoints by fingerprint; eval_reads.safetensors:
              the learned policy's merged distributions on every evaluation table (one read per
              table, `aegir.eval.reads`, before the joint decoding), what `calibrate` reads
  --metrics   metrics.json (DVC metrics, `aegir.eval.metrics.headline`: per task the benchmark
              and real-table micro-F1 of the learned policy, `swarm`), scores.json (micro/macro
              F1 per split of `learned`, `never`, `always` with supports, spawning and
              deep-search statistics, critical steps, F1 per critical step; `mix`: the
              scaling splits pooled; `deep_search`: never spawning against deep search alone
              on the `X/name`/`X/description` columns and the rest, per split), scaling.json (DVC plots: one row per n, the pooled F1
              per critical step included), wall.json (DVC metrics: wall minutes) and timing.json (wall clock, sub-agent
              reads, batched vs sequential seconds) — the outputs a rerun does not reproduce,
              live/ (DVCLive curves: rewards, spawned sub-agents, losses)
  --state     the training state (resume after a kill)
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict
from pathlib import Path

import torch

from aegir import atomic
from aegir.config import POLICY_TRAIN_SPLIT, SPLITS, SWARM_TRAIN_SPLIT, Params, Phase4Config, load_params
from aegir.data.prepared import fingerprint as data_fingerprint
from aegir.errors import AegirError, check_config
from aegir.eval.metrics import headline, wall_minutes
from aegir.eval.reads import READS_FILE, StoredReads, save_eval_reads
from aegir.labels import cpa_vocab, cta_vocab
from aegir.model.checkpoint import checkpoint_fingerprint
from aegir.orchestrator.checkpoint import load_orchestrator
from aegir.orchestrator.specialist import load_agents
from aegir.rl.ppo import deterministic_kernels
from aegir.rl.swarm_training import train
from aegir.rl.swarm_update import StepCounter
from aegir.swarm.evaluate import POLICIES, SCALING_SPLITS, evaluate_policies, scaling_curve
from aegir.swarm.model import Swarm, phase3_reading, save_swarm
from aegir.swarm.policy import SpawnPolicy, spawn_options
from aegir.swarm.spawn import SwarmMerge, family_of_labels, label_steps
from aegir.swarm.splits import load_split, load_training
from aegir.train.memory import retain_freed_memory
from aegir.train.resume import fingerprint


def run(params: Params, data_dir: Path, phase3_dir: Path, models_dir: Path, out_dir: Path, metrics_dir: Path,
        state_dir: Path) -> dict:
    """Train the policy and the merge over the frozen Phase 3 orchestrator, score every policy and
    the scaling curve, write the checkpoint (`out_dir`) and the metrics (`metrics_dir`); the scores."""
    started = time.perf_counter()
    cfg: Phase4Config = params.phase4
    unknown = [name for name in cfg.specialists if name not in params.agents]
    check_config(not unknown, "phase4.specialists", f"unknown agent(s) {unknown}; known: {', '.join(params.agents)}")
    torch.manual_seed(cfg.seed)
    orch, phase3_config = load_orchestrator(phase3_dir)
    orch.requires_grad_(False)
    # the orchestrator reads every table as `phase3` scored it, from the distributions it stored
    reading = phase3_reading(phase3_config, phase3_dir)
    recorded = phase3_config.get("params", {})
    split_prints = data_fingerprint(data_dir, SPLITS)  # each split file hashed once, for every store below

    def open_store(directory: Path, prepare) -> tuple[StoredReads | None, str]:
        """The distributions stored beside a checkpoint, when they are of these reads."""
        return StoredReads.open(directory, {"checkpoint": checkpoint_fingerprint(directory), "data": split_prints,
                                            "prepare": prepare, "reading": recorded.get("reading")})

    store, why_not = open_store(phase3_dir, recorded.get("prepare"))
    names = list(cfg.specialists)
    subagents = load_agents(models_dir, names)
    for model in subagents.values():
        model.eval().requires_grad_(False)
    family, family_names = family_of_labels(cta_vocab())
    options = spawn_options(cfg.max_subagents)
    policy = SpawnPolicy(orch.primary.config.d_model, options, len(names))
    merge = SwarmMerge(len(names), family)  # trained as a product of experts (aegir.swarm.spawn, "Merge")

    train_data = load_training(data_dir, orch, subagents, params, family, reading)
    trained_on = (POLICY_TRAIN_SPLIT, SWARM_TRAIN_SPLIT) if cfg.wide_train_tables else (POLICY_TRAIN_SPLIT,)
    # how the trained merge is read changes no training step: a changed merge_reading resumes the
    # saved end and is scored again
    trained_by = {key: value for key, value in asdict(cfg).items() if key != "merge_reading"}
    base = {"phase4": trained_by, "lambda": asdict(params.sections["lambda"]), "rewards": asdict(params.rewards),
            "prepare": asdict(params.prepare), "data": data_fingerprint(data_dir, trained_on),
            "phase3": checkpoint_fingerprint(phase3_dir),
            # the views the policy and merge train on: the orchestrator's reading as `phase3` scores it
            "phase3_reading": {"columns": reading.columns, "views": reading.views,
                               "joint": recorded.get("reading"), "grouped_views": True},
            "subagents": {name: checkpoint_fingerprint(models_dir / name) for name in names}}
    with deterministic_kernels():  # aegir.rl.ppo: run-to-run identical weights on CPU
        steps = StepCounter(orch.primary.config, tuple(label_steps(subagents[name].config) for name in names))
        summary = train(policy, merge, train_data, names, params, steps, state_dir, metrics_dir / "live",
                        fingerprint(base))
    policy.eval()
    merge.mode = cfg.merge_reading
    swarm = Swarm(orch, subagents, policy, merge, reading)

    # each evaluation split read as `phase3` scored it, then scored under every policy
    # the sub-agents' second opinions on the evaluation splits: the distributions their phase1
    # stages stored, where they are of the same reads
    subagent_stores = {name: open_store(models_dir / name, asdict(params.prepare))[0] for name in names}
    evaluated = evaluate_policies(swarm, lambda split: load_split(
        split, data_dir, orch, subagents, params, family, reading, store, cfg.eval_tables, subagent_stores),
        family, cfg.max_subagents)
    scores, split_data = evaluated.scores, evaluated.splits
    scaling_rows, timing_rows = scaling_curve(swarm, split_data, cfg.scaling_n, subagents[names[0]],
                                              cfg.timing_tables, cfg.eval_batch_size)
    # how the orchestrator read the tables: as `phase3` scored them, from its stored distributions
    # where they were of the same reads (else computed again: the same up to float rounding)
    scores["phase3_reading"] = {"columns": reading.columns, "views": reading.views,
                                "joint_decoding": reading.decode is not None,
                                "stored": {split: evaluated.from_store[split] for split in sorted(evaluated.from_store)},
                                "store": "found" if store is not None else why_not,
                                "subagent_stores": {name: subagent_stores[name] is not None for name in names}}
    scores["options"] = list(options)
    scores["families"] = family_names
    scores["merge"] = {"primary": merge.primary.detach().tolist(), "consult": merge.consult.detach().tolist(),
                       "wide": merge.wide.detach().tolist(),
                       "deep": merge.deep.detach().tolist(), "margin": float(merge.margin.detach()),
                       "reading": merge.mode}
    timing = {"wall_seconds": round(time.perf_counter() - started, 1), "training": summary,
              "subagents_batched_vs_sequential": timing_rows,
              "sub_agent_reads": sum(d.cache.reads for d in split_data.values()) + train_data.cache.reads,
              "torch_threads": torch.get_num_threads()}
    # beside the weights: the learned policy's merged distributions on every evaluation table, as
    # scored above (one read per table, aegir.eval.reads), so that `calibrate` does not run the swarm
    save_swarm(out_dir, swarm, phase3_dir, {name: models_dir / name for name in names},
               {"params": {"phase4": asdict(cfg), "prepare": asdict(params.prepare)}, "families": family_names,
                "vocab": {"cta": list(cta_vocab().labels), "cpa": list(cpa_vocab().labels)}},
               beside=lambda staging: save_eval_reads(staging / READS_FILE, evaluated.learned_reads, {
                   "checkpoint": checkpoint_fingerprint(staging), "data": split_prints,
                   "prepare": asdict(params.prepare), "reading": recorded.get("reading"),
                   "policy": "learned", "max_subagents": cfg.max_subagents}))
    atomic.write_json(metrics_dir / "scores.json", scores)
    atomic.write_json(metrics_dir / "scaling.json", scaling_rows)
    atomic.write_json(metrics_dir / "timing.json", timing)
    atomic.write_json(metrics_dir / "wall.json", wall_minutes("phase4", timing["wall_seconds"]))
    atomic.write_json(metrics_dir / "metrics.json", headline_metrics(scores))
    return scores


def headline_metrics(scores: dict) -> dict:
    """The DVC metrics (`aegir.eval.metrics.headline`): the swarm's (the learned policy's)
    benchmark and real-table micro-F1 per task. F1 per split of the learned policy and both
    controls, spawning and steps stay in scores.json and scaling.json."""
    return {"swarm": headline({task: scores["learned"][task] for task in ("cta", "cpa")})}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--data", default="data/prepared")
    parser.add_argument("--phase3", default="models/phase3", help="the Phase 3 orchestrator (frozen)")
    parser.add_argument("--models", default="models/phase1", help="Phase 1 checkpoints: the sub-agents")
    parser.add_argument("--out", default="models/phase4", help="policy + merge checkpoint")
    parser.add_argument("--metrics", default="results/phase4", help="metrics.json, scores.json, scaling.json, live/")
    parser.add_argument("--state", default="state/phase4", help="resume state")
    args = parser.parse_args(argv)
    retain_freed_memory()  # a step's buffers are reused, not mapped afresh (aegir.train.memory)
    try:
        params = load_params(args.params)
        scores = run(params, Path(args.data), Path(args.phase3), Path(args.models), Path(args.out),
                     Path(args.metrics), Path(args.state))
    except AegirError as exc:
        parser.exit(2, f"phase4: error: {exc}\n")
    print("phase4: CTA micro-F1 on wide  " + "  ".join(
        f"{kind} {scores[kind]['cta']['wide']['micro_f1']:.1f}" for kind in POLICIES if "wide" in scores[kind]["cta"]))
    print("phase4: CTA micro-F1 per critical step on " + "+".join(SCALING_SPLITS) + "  " + "  ".join(
        f"{kind} {scores[kind]['mix']['f1_per_critical_step']['cta']:.2f}" for kind in POLICIES))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

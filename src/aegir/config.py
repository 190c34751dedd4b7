"""Typed configuration: one frozen dataclass per stage, built from `params.yaml`.

An unknown key, a value of the wrong type or a value out of range is a `ConfigError` naming
the key (`phase1.lr: expected float, got 'fast'`), raised before any work starts.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from aegir.errors import ConfigError, check_config

DOMAINS = (
    "Book", "CreativeWork", "Event", "Hotel", "JobPosting", "LocalBusiness", "Movie", "Museum",
    "MusicAlbum", "MusicRecording", "Person", "Place", "Product", "Recipe", "Restaurant",
    "SportsEvent", "TVEpisode",
)  # SOTAB V2's 17 table domains (schema.org classes of the subject column)
# Splits come from two places. The configured source (`prepare.source`: the synthetic generator
# or a SOTAB V2 directory) makes SOURCE_SPLITS; the evaluation-only splits are built from
# in-repository data whatever the source (`real`: real tables, `aegir.data.real`; `wide`: synthetic
# tables of many columns, `aegir.data.synth.generate_wide`, where a shared byte stream is thin).
# Every prepared directory holds all of SPLITS; only TRAIN_SPLIT is ever trained on by a model.
# Beside them it holds SWARM_TRAIN_SPLIT: synthetic many-column tables (like `wide`, other
# tables) on which Phase 4 trains its spawning policy and merge, so that the policy meets wide
# tables in training; no model of Phases 1–3 reads it and no report scores it. And
# SPECIALIST_TRAIN_SPLIT: more synthetic tables of the ordinary kind (other tables: the split
# name is in every seed) that only the specialists train on (`specialists.<name>.extra_tables`, their
# domains' tables), so that each specialist has read more of its domains than the primary has.
# And POLICY_TRAIN_SPLIT: more ordinary synthetic tables (other tables again) on which only Phase
# 4 trains its policy and merge: tables that no model of Phases 1–3 has read, so that the merge
# learns how far to trust a sub-agent on tables the orchestrator meets for the first time, as at
# evaluation (on `train` tables, which the primary and Phase 3 read, the orchestrator is surer
# and righter than on any unseen table, and the merge learned to leave the sub-agents out).
SOURCE_SPLITS = ("train", "valid", "test", "corner_cases", "missing_values", "format_heterogeneity")
REAL_SPLIT = "real"  # the real-table development set (aegir.data.real): scored, never trained on
REAL_DOMAINS = "real_domains"  # scores.json (baselines, phase1): F1 on the `real` tables of each domain
EVAL_ONLY_SPLITS = (REAL_SPLIT, "wide")
SPLITS = SOURCE_SPLITS + EVAL_ONLY_SPLITS
TRAIN_SPLIT = "train"
# what a Phase 1 or Phase 3 training run reads (its steps and its validation curve): the data in its
# run fingerprint and in its checkpoint's config, so that a change to a split it only scores
# (`real`, say) re-scores the saved end instead of training again
TRAINED_SPLITS = (TRAIN_SPLIT, "valid")
SWARM_TRAIN_SPLIT = "wide_train"
SPECIALIST_TRAIN_SPLIT = "specialist_train"
POLICY_TRAIN_SPLIT = "policy_train"
PREPARED_SPLITS = SPLITS + (SWARM_TRAIN_SPLIT, SPECIALIST_TRAIN_SPLIT, POLICY_TRAIN_SPLIT)  # the files of a prepared directory
EVAL_SPLITS = tuple(split for split in SPLITS if split != TRAIN_SPLIT)  # scored in every report


# ----------------------------------------------------------------------------- prepare


@dataclass(frozen=True)
class SyntheticConfig:
    """The embedded benchmark generator (`aegir.data.synth`)."""

    seed: int = 7  # generator seed; same seed → byte-identical tables
    train_tables: int = 1200  # tables in each split
    valid_tables: int = 150
    test_tables: int = 300
    corner_cases_tables: int = 300
    missing_values_tables: int = 200
    format_heterogeneity_tables: int = 200
    min_rows: int = 5  # rows per table, drawn uniformly
    max_rows: int = 25
    min_columns: int = 3  # columns per table (column 0, the subject, included)
    max_columns: int = 9
    missing_rate: float = 0.05  # share of missing cells outside the missing_values split
    heterogeneity_rate: float = 0.15  # share of columns with mixed formats outside that split
    locales: tuple[str, ...] = ("en_US", "en_GB", "de_DE", "fr_FR", "es_ES", "it_IT", "nl_NL")
    wide_tables: int = 150  # tables of the evaluation-only `wide` split (whatever prepare.source)
    wide_min_columns: int = 15  # its columns per table, subject included, drawn uniformly
    wide_max_columns: int = 40
    wide_train_tables: int = 64  # tables of the same kind in SWARM_TRAIN_SPLIT (Phase 4's training only)
    specialist_train_tables: int = 0  # tables of SPECIALIST_TRAIN_SPLIT (the specialists' training only)
    policy_train_tables: int = 0  # tables of POLICY_TRAIN_SPLIT (Phase 4's policy and merge only)
    # how POLICY_TRAIN_SPLIT's tables are drawn, in turn by index: "natural" (as `train`), or as
    # the harder evaluation splits draw theirs ("corner_cases", "missing_values",
    # "format_heterogeneity"), other tables all the same (the split's name is in every seed)
    policy_train_styles: tuple[str, ...] = ("natural",)
    # the same for SPECIALIST_TRAIN_SPLIT: the ways the specialists' own tables are drawn
    specialist_train_styles: tuple[str, ...] = ("natural",)
    # SPECIALIST_TRAIN_SPLIT's tables of a domain in `domains.EXPERT_ONLY_PROPS` may also carry its
    # columns no other split has (a film's box office and critics' score): knowledge only an expert reads
    expert_only_columns: bool = False

    def __post_init__(self) -> None:
        known = ("natural", "corner_cases", "missing_values", "format_heterogeneity")
        for key in ("policy_train_styles", "specialist_train_styles"):
            styles = getattr(self, key)
            check_config(len(styles) >= 1 and all(s in known for s in styles), f"synthetic.{key}",
                         f"expected a non-empty list of {', '.join(known)}, got {list(styles)}")
        check_config(1 <= self.wide_tables <= 10_000_000, "synthetic.wide_tables", f"must be ≥ 1, got {self.wide_tables}")
        check_config(1 <= self.wide_train_tables <= 10_000_000, "synthetic.wide_train_tables",
                     f"must be ≥ 1, got {self.wide_train_tables}")
        check_config(0 <= self.specialist_train_tables <= 10_000_000, "synthetic.specialist_train_tables",
                     f"must be in [0, 10000000], got {self.specialist_train_tables}")
        check_config(0 <= self.policy_train_tables <= 10_000_000, "synthetic.policy_train_tables",
                     f"must be in [0, 10000000], got {self.policy_train_tables}")
        check_config(2 <= self.wide_min_columns <= self.wide_max_columns <= 200, "synthetic.wide_max_columns",
                     f"need 2 ≤ wide_min_columns ≤ wide_max_columns ≤ 200, got "
                     f"{self.wide_min_columns}..{self.wide_max_columns}")
        for split in SOURCE_SPLITS:
            n = getattr(self, f"{split}_tables")
            check_config(1 <= n <= 10_000_000, f"synthetic.{split}_tables", f"must be ≥ 1, got {n}")
        check_config(1 <= self.min_rows <= self.max_rows <= 100_000, "synthetic.max_rows",
               f"need 1 ≤ min_rows ≤ max_rows, got {self.min_rows}..{self.max_rows}")
        check_config(2 <= self.min_columns <= self.max_columns <= 200, "synthetic.max_columns",
               f"need 2 ≤ min_columns ≤ max_columns ≤ 200, got {self.min_columns}..{self.max_columns}")
        for key in ("missing_rate", "heterogeneity_rate"):
            value = getattr(self, key)
            check_config(0.0 <= value <= 1.0, f"synthetic.{key}", f"must be in [0, 1], got {value}")
        check_config(len(self.locales) > 0, "synthetic.locales", "must name at least one locale")

    def tables_in(self, split: str) -> int:
        return getattr(self, f"{split}_tables")


@dataclass(frozen=True)
class PrepareConfig:
    """The `prepare` stage: tables → byte streams in `data/prepared/`."""

    source: Literal["synthetic", "sotab"] = "synthetic"
    sotab_dir: str | None = None  # the SOTAB V2 root (Train/ Validation/ Test/ + CSVs)
    byte_budget: int = 2048  # bytes per table stream, separators included
    max_rows: int = 20  # rows kept per table (sampled deterministically when longer)
    seed: int = 0  # row sampling seed
    compact_columns: bool = False  # a column overflowing its byte share drops missing and repeated cells
    compact_cell_bytes: int = 0  # and cuts each of its cells to this many bytes (0: no cut)
    train_views: int = 1  # the train split holds every table and train_views − 1 shuffled views of it
    # 0: the whole `real` split; N: only each family's first N tables (every family still in; a
    # quick run's scoring, e.g. the tests' tiny pipeline keeps 3: docs/data.md)
    real_tables_per_family: int = 0

    def __post_init__(self) -> None:
        check_config(64 <= self.byte_budget <= 1 << 20, "prepare.byte_budget",
               f"must be in [64, 1048576], got {self.byte_budget}")
        check_config(1 <= self.max_rows <= 100_000, "prepare.max_rows", f"must be ≥ 1, got {self.max_rows}")
        check_config(self.compact_cell_bytes >= 0, "prepare.compact_cell_bytes",
                     f"must be ≥ 0, got {self.compact_cell_bytes}")
        check_config(1 <= self.train_views <= 64, "prepare.train_views", f"must be in [1, 64], got {self.train_views}")
        check_config(0 <= self.real_tables_per_family <= 1_000_000, "prepare.real_tables_per_family",
                     f"must be ≥ 0 (0: every table), got {self.real_tables_per_family}")
        if self.source == "sotab":
            check_config(bool(self.sotab_dir), "prepare.sotab_dir", "source is 'sotab' but no directory is set")


# ----------------------------------------------------------------------------- baselines


@dataclass(frozen=True)
class BaselinesConfig:
    """Single-column TF-IDF character n-gram + logistic regression baseline."""

    ngram_min: int = 1
    ngram_max: int = 4
    max_features: int = 100_000
    C: float = 4.0  # inverse L2 strength of the logistic regression
    max_iter: int = 100  # L-BFGS iterations (more changes F1 by < 0.1 point and costs minutes)
    max_cells: int = 20  # cells of a column joined into its document
    seed: int = 0

    def __post_init__(self) -> None:
        check_config(1 <= self.ngram_min <= self.ngram_max <= 10, "baselines.ngram_max",
               f"need 1 ≤ ngram_min ≤ ngram_max ≤ 10, got {self.ngram_min}..{self.ngram_max}")
        check_config(self.max_features >= 1, "baselines.max_features", "must be ≥ 1")
        check_config(self.C > 0, "baselines.C", f"must be > 0, got {self.C}")
        check_config(self.max_cells >= 1, "baselines.max_cells", "must be ≥ 1")
        check_config(1 <= self.max_iter <= 100_000, "baselines.max_iter", f"must be in [1, 100000], got {self.max_iter}")


# ----------------------------------------------------------------------------- phase 1


@dataclass(frozen=True)
class AgentConfig:
    """One model trained by `phase1`: the primary, or a specialist that Phase 3 fuses."""

    preset: str = "cpu"  # a key of the `presets` section
    domains: tuple[str, ...] = ()  # train only on tables of these domains; empty = all
    seed: int = 0  # init and batch-order seed
    epochs: int | None = None  # overrides phase1.epochs for this agent
    train_tables: int | None = None  # train on the first this many `train` tables (before `domains`); None: all, 0: none
    extra_tables: int = 0  # also the first this many `specialist_train` tables (before `domains`): tables the primary never reads
    init: str | None = None  # "primary": a specialist starts from the Phase 1 primary's checkpoint (same preset); null: afresh
    seam_weight: float = 0.0  # with init: also train on the init model's loss reading from this one's final states (aegir.train.seam)

    def __post_init__(self) -> None:
        unknown = [d for d in self.domains if d not in DOMAINS]
        check_config(not unknown, "domains", f"unknown domain(s) {unknown}; known: {', '.join(DOMAINS)}")
        check_config(self.epochs is None or 1 <= self.epochs <= 10_000, "epochs",
               f"must be in [1, 10000], got {self.epochs}")
        check_config(self.train_tables is None or 0 <= self.train_tables <= 10_000_000, "train_tables",
               f"must be in [0, 10000000], got {self.train_tables}")
        check_config(0 <= self.extra_tables <= 10_000_000, "extra_tables",
                     f"must be in [0, 10000000], got {self.extra_tables}")
        check_config(0.0 <= self.seam_weight <= 100.0, "seam_weight", f"must be in [0, 100], got {self.seam_weight}")
        check_config(not self.seam_weight or self.init is not None, "seam_weight",
                     "needs `init`: the model it starts from is the receiver that reads its states")


@dataclass(frozen=True)
class Phase1Config:
    """Supervised training of every agent (`aegir.stages.phase1`)."""

    epochs: int = 4  # passes over the (agent's) training tables
    batch_size: int = 16  # tables per optimizer step, over all processes
    lr: float = 2e-3  # peak AdamW learning rate (cosine decay after warm-up)
    min_lr_ratio: float = 0.1  # final lr as a share of the peak
    warmup_steps: int = 30
    weight_decay: float = 0.01
    grad_clip: float = 1.0  # max global gradient norm
    eval_every: int = 100  # steps between validation F1 evaluations (0: at the end only)
    log_every: int = 10  # steps between DVCLive curve points
    checkpoint_every: int = 50  # steps between saved training states (for resume)
    eval_batch_size: int = 8  # tables per scoring call (smaller batches keep activations in cache)
    max_steps: int = 0  # stop after this many steps (0: no limit); for smoke runs
    label_smoothing: float = 0.0  # ε of the CTA and CPA cross-entropies

    def __post_init__(self) -> None:
        check_config(1 <= self.epochs <= 10_000, "phase1.epochs", f"must be in [1, 10000], got {self.epochs}")
        check_config(1 <= self.batch_size <= 65_536, "phase1.batch_size", f"must be in [1, 65536], got {self.batch_size}")
        check_config(0 < self.lr <= 1.0, "phase1.lr", f"must be in (0, 1], got {self.lr}")
        check_config(0 <= self.min_lr_ratio <= 1, "phase1.min_lr_ratio", f"must be in [0, 1], got {self.min_lr_ratio}")
        check_config(self.warmup_steps >= 0, "phase1.warmup_steps", "must be ≥ 0")
        check_config(0 <= self.weight_decay < 1, "phase1.weight_decay", f"must be in [0, 1), got {self.weight_decay}")
        check_config(self.grad_clip > 0, "phase1.grad_clip", f"must be > 0, got {self.grad_clip}")
        for key in ("eval_every", "checkpoint_every", "max_steps"):
            check_config(getattr(self, key) >= 0, f"phase1.{key}", "must be ≥ 0")
        check_config(self.log_every >= 1, "phase1.log_every", "must be ≥ 1")
        check_config(self.eval_batch_size >= 1, "phase1.eval_batch_size", "must be ≥ 1")
        check_config(0 <= self.label_smoothing < 1, "phase1.label_smoothing",
                     f"must be in [0, 1), got {self.label_smoothing}")


# ----------------------------------------------------------------------------- launch


@dataclass(frozen=True)
class LaunchConfig:
    """How dvc.yaml launches the training stages: `accelerate launch --config_file <this>`.

    The file says where training runs (CPU or GPUs, processes, mixed precision); moving to N
    GPUs is a change of that file or `dvc exp run -S launch.accelerate_config=<another>`.
    Snakemake reads the same file for each training job's GPU request.
    """

    accelerate_config: str = "workflow/accelerate/cpu.yaml"  # relative to the repository root

    def __post_init__(self) -> None:
        check_config(self.accelerate_config.endswith((".yaml", ".yml")), "launch.accelerate_config",
                     f"must name an accelerate config YAML file, got {self.accelerate_config!r}")


# ----------------------------------------------------------------------------- rewards (phase 2 on)

@dataclass(frozen=True)
class RewardConfig:
    """Params section `rewards`: the shape of the three reward components."""

    perf_mode: Literal["cta", "cpa", "both"] = "both"  # which annotations r_perf scores
    target_share: float = 0.25  # share of specialists a table should activate, in (0, 1)
    balance_weight: float = 0.5  # weight of the balance term inside r_parallel, ≥ 0
    degenerate_penalty: float = 0.5  # r_finish penalty for fully degenerate routing, in [0, 1]

    def __post_init__(self) -> None:
        check_config(self.perf_mode in ("cta", "cpa", "both"), "rewards.perf_mode",
               f"expected one of ['cta', 'cpa', 'both'], got {self.perf_mode!r}")
        check_config(0.0 < self.target_share < 1.0, "rewards.target_share",
               f"must be in (0, 1), got {self.target_share}")
        check_config(0.0 <= self.balance_weight <= 100.0, "rewards.balance_weight",
               f"must be in [0, 100], got {self.balance_weight}")
        check_config(0.0 <= self.degenerate_penalty <= 1.0, "rewards.degenerate_penalty",
               f"must be in [0, 1], got {self.degenerate_penalty}")


@dataclass(frozen=True)
class LambdaConfig:
    """Params section `lambda`: λ1 (r_parallel) and λ2 (r_finish) per training phase.

    `lambda.early` is λ1 of the early phase, a plain number, so that
    `dvc exp run --set-param lambda.early=0.2` works as documented.
    """

    early: float = 0.3  # λ1 (r_parallel weight) in the early phase
    mid: float = 0.1  # λ1 in the mid phase
    late: float = 0.05  # λ1 in the late phase
    finish_early: float = 0.1  # λ2 (r_finish weight) in the early phase
    finish_mid: float = 0.3  # λ2 in the mid phase
    finish_late: float = 0.05  # λ2 in the late phase
    mid_start: float = 0.3  # progress (fraction of training) where the mid phase begins
    late_start: float = 0.7  # progress where the late phase begins
    transition: float = 0.05  # width (fraction of training) of the linear blend after a boundary; 0 = steps

    def __post_init__(self) -> None:
        for key in ("early", "mid", "late", "finish_early", "finish_mid", "finish_late"):
            value = getattr(self, key)
            check_config(math.isfinite(value) and 0.0 <= value <= 100.0, f"lambda.{key}",
                   f"must be in [0, 100], got {value}")
        check_config(0.0 < self.mid_start < self.late_start, "lambda.mid_start",
               f"need 0 < mid_start < late_start < 1, got mid_start={self.mid_start}, "
               f"late_start={self.late_start}")
        check_config(self.late_start < 1.0, "lambda.late_start",
               f"need 0 < mid_start < late_start < 1, got late_start={self.late_start}")
        check_config(self.transition >= 0.0, "lambda.transition", f"must be ≥ 0, got {self.transition}")
        check_config(self.mid_start + self.transition <= self.late_start
               and self.late_start + self.transition <= 1.0, "lambda.transition",
               f"a blend of width {self.transition} must end before the next boundary "
               f"(mid_start={self.mid_start}, late_start={self.late_start}, end=1)")


# ----------------------------------------------------------------------------- phase 2


@dataclass(frozen=True)
class Phase2Config:
    """Params section `phase2`: how the reward checks sample and measure."""

    seed: int = 0  # seeds table selection, router inits, routing samples and corruption draws
    batches: int = 4  # valid batches checked (fewer when the split has fewer full batches)
    batch_size: int = 16  # tables per batch: what the batch-level reward parts see (≥ 2)
    rollouts: int = 8  # routings sampled per table for each estimate (group baseline, ≥ 2)
    corruption_levels: tuple[float, ...] = (0.0, 0.1, 0.25, 0.5, 0.75, 1.0)  # corrupted / dropped shares
    confidence: float = 0.95  # gate probability of a decided gate in the hand-made routings
    ascent_steps: int = 30  # Adam steps of each router-ascent run
    ascent_lr: float = 0.1  # Adam step size of the ascent
    ascent_init_bias: float = 3.0  # |gate logit| of the always-on (+) / always-off (−) starts
    schedule_points: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)  # progress where λ is reported
    max_lambda: float = 10.0  # cap of a suggested λ

    def __post_init__(self) -> None:
        check_config(0 <= self.seed < 2**32, "phase2.seed", f"must be in [0, 2^32), got {self.seed}")
        check_config(1 <= self.batches <= 10_000, "phase2.batches", f"must be in [1, 10000], got {self.batches}")
        check_config(2 <= self.batch_size <= 4096, "phase2.batch_size", f"must be in [2, 4096], got {self.batch_size}")
        check_config(2 <= self.rollouts <= 1024, "phase2.rollouts", f"must be in [2, 1024], got {self.rollouts}")
        levels = self.corruption_levels
        check_config(len(levels) >= 2 and levels[0] == 0.0 and all(0.0 <= x <= 1.0 for x in levels)
               and all(a < b for a, b in zip(levels, levels[1:])), "phase2.corruption_levels",
               f"need ≥ 2 strictly increasing shares in [0, 1] starting at 0, got {list(levels)}")
        check_config(0.5 < self.confidence < 1.0, "phase2.confidence", f"must be in (0.5, 1), got {self.confidence}")
        check_config(1 <= self.ascent_steps <= 10_000, "phase2.ascent_steps",
               f"must be in [1, 10000], got {self.ascent_steps}")
        check_config(0.0 < self.ascent_lr <= 10.0, "phase2.ascent_lr", f"must be in (0, 10], got {self.ascent_lr}")
        check_config(0.0 < self.ascent_init_bias <= 20.0, "phase2.ascent_init_bias",
               f"must be in (0, 20], got {self.ascent_init_bias}")
        points = self.schedule_points
        check_config(len(points) >= 1 and all(0.0 <= x <= 1.0 for x in points)
               and len({round(x * 100) for x in points}) == len(points), "phase2.schedule_points",
               f"need ≥ 1 progress value in [0, 1], distinct to the percent, got {list(points)}")
        check_config(0.0 < self.max_lambda <= 1000.0, "phase2.max_lambda", f"must be in (0, 1000], got {self.max_lambda}")


# ----------------------------------------------------------------------------- phase 3


@dataclass(frozen=True)
class Phase3Config:
    """Params section `phase3`: the PARL run and its control."""

    specialists: tuple[str, ...] = ("primary", "places", "media")  # frozen Phase 1 checkpoints
    seed: int = 0  # init of router/fusion, batch order, every sampled routing and label
    steps: int = 300  # PARL updates of each run (fused and control alike)
    batch_size: int = 8  # tables per step, over all processes
    rollouts: int = 4  # K rollouts per table: the group of the advantage baseline
    ppo_epochs: int = 2  # updates per batch of rollouts (the first reuses the rollout forward)
    lr: float = 5e-4  # peak lr of the primary (it starts trained)
    fusion_lr: float = 3e-3  # peak lr of the new parts: router, alignments, fusion gates
    fused_primary_lr: float | None = None  # the primary's peak lr in the fused run alone (None: lr; 0: frozen there, only the new parts learn); the control keeps lr
    min_lr_ratio: float = 0.1  # final lr as a share of the peak (cosine)
    warmup_steps: int = 20
    weight_decay: float = 0.01  # AdamW, on matrices of the primary only
    grad_clip: float = 1.0
    rl_weight: float = 1.0  # the clipped token loss (0: no RL at all, the "CE alone" ablation)
    ce_weight: float = 1.0  # supervised CE on gold labels beside the RL loss (0 allowed)
    label_smoothing: float = 0.0  # ε of that CE (as phase1.label_smoothing)
    route_weight: float = 0.0  # supervised routing: the router's BCE toward "the table's domain is the specialist's" (0 = off)
    distill_weight: float = 0.0  # CE of the fused output toward the output ensemble (aegir.rl.parl.distill_loss; 0 = off)
    anchor_weight: float = 0.0  # KL of the trained primary's labels from the frozen Phase 1 primary's, fused and control alike (aegir.rl.parl.anchor_loss; 0 = off)
    phase1_share: float = 0.0  # after each run, the trained primary's weights blended with the Phase 1 primary's, this share of the latter (aegir.rl.parl_training.blend_toward; 0 = off)
    average_decay: float = 0.0  # each run ends with an exponential moving average of its trained weights over the updates, this decay per update (aegir.rl.parl_training.update_average; 0 = the last update's weights)
    stream_seam: bool = False  # also fuse the specialists' decoder outputs per byte (aegir.orchestrator.fusion)
    stream_gate_init: float = 0.0  # the stream seam's gates at the start (0: the untrained orchestrator is Phase 1)
    column_seam: bool = False  # also mix the specialists' column vectors into the primary's before its heads (needs stream_seam)
    column_gate_init: float = 1.0  # each activated specialist's weight in that mix at the start (the primary's is 1)
    vote: bool = False  # the output seam: the fused model's labels averaged with the activated specialists' (evaluation and use, never training)
    subject_route: bool = False  # evaluation and use: also run the owners of the domain the frozen primary names for the subject column (never training)
    vote_primary: bool = False  # evaluation and use: the frozen primary, read for the subject rule on every table, votes too (needs vote and subject_route)
    kl_coef: float = 0.0  # per-token KL(π_old‖π_new) penalty (0 = off)
    critical_weight: float = 2.0  # token weight of routing decisions (label tokens weigh 1)
    clip_start: float = 0.2  # PPO ε at the start …
    clip_end: float = 0.1  # … annealed linearly to this
    abstain_below: float = 0.3  # a sampled label below this probability is left unannotated
    activation_threshold: float = 0.5  # evaluation: a gate opens above this score
    router_init_rate: float = 0.5  # every gate's initial probability
    budget_period: int = 50  # steps per capped + uncapped window
    budget_capped_share: float = 0.5  # share of each window under the cap on specialists per batch
    eval_every: int = 100  # steps between validation F1 points (0: at the end only)
    log_every: int = 10  # steps between curve points (each the mean over its window)
    checkpoint_every: int = 50  # steps between saved training states (a multiple of log_every)
    eval_batch_size: int = 8  # tables per scoring call
    survival_tables: int = 64  # valid tables on which the fused state's survival is measured

    def __post_init__(self) -> None:
        def check(ok: bool, key: str, problem: str) -> None:
            check_config(ok, f"phase3.{key}", problem)

        check(len(self.specialists) >= 1 and len(set(self.specialists)) == len(self.specialists),
              "specialists", f"need ≥ 1 distinct agent names, got {list(self.specialists)}")
        check(1 <= self.steps <= 1_000_000, "steps", f"must be in [1, 1000000], got {self.steps}")
        check(2 <= self.batch_size <= 4096, "batch_size", f"must be in [2, 4096], got {self.batch_size}")
        check(2 <= self.rollouts <= 64, "rollouts", f"must be in [2, 64], got {self.rollouts}")
        check(1 <= self.ppo_epochs <= 16, "ppo_epochs", f"must be in [1, 16], got {self.ppo_epochs}")
        for key in ("lr", "fusion_lr"):
            check(0 < getattr(self, key) <= 1, key, f"must be in (0, 1], got {getattr(self, key)}")
        check(self.fused_primary_lr is None or 0 <= self.fused_primary_lr <= 1, "fused_primary_lr",
              f"must be null or in [0, 1], got {self.fused_primary_lr}")
        check(0 <= self.min_lr_ratio <= 1, "min_lr_ratio", f"must be in [0, 1], got {self.min_lr_ratio}")
        check(self.warmup_steps >= 0, "warmup_steps", "must be ≥ 0")
        check(0 <= self.weight_decay < 1, "weight_decay", f"must be in [0, 1), got {self.weight_decay}")
        check(self.grad_clip > 0, "grad_clip", f"must be > 0, got {self.grad_clip}")
        for key in ("rl_weight", "ce_weight", "kl_coef"):
            check(0 <= getattr(self, key) <= 100, key, f"must be in [0, 100], got {getattr(self, key)}")
        check(self.rl_weight > 0 or self.ce_weight > 0 or self.distill_weight > 0, "rl_weight",
              "rl_weight, ce_weight and distill_weight are all 0: nothing would train the primary")
        check(0 <= self.label_smoothing < 1, "label_smoothing", f"must be in [0, 1), got {self.label_smoothing}")
        check(0 <= self.route_weight <= 100, "route_weight", f"must be in [0, 100], got {self.route_weight}")
        check(0 <= self.distill_weight <= 100, "distill_weight", f"must be in [0, 100], got {self.distill_weight}")
        check(0 <= self.anchor_weight <= 100, "anchor_weight", f"must be in [0, 100], got {self.anchor_weight}")
        check(0 <= self.phase1_share < 1, "phase1_share", f"must be in [0, 1) (0: off), got {self.phase1_share}")
        check(0 <= self.average_decay < 1, "average_decay", f"must be in [0, 1) (0: off), got {self.average_decay}")
        check(0 < self.critical_weight <= 100, "critical_weight", f"must be in (0, 100], got {self.critical_weight}")
        check(0 < self.clip_end <= self.clip_start < 1, "clip_start",
              f"need 0 < clip_end ≤ clip_start < 1, got {self.clip_start} → {self.clip_end}")
        check(0 <= self.abstain_below < 1, "abstain_below", f"must be in [0, 1), got {self.abstain_below}")
        check(0 < self.activation_threshold < 1, "activation_threshold",
              f"must be in (0, 1), got {self.activation_threshold}")
        check(-10 <= self.stream_gate_init <= 10, "stream_gate_init", f"must be in [-10, 10], got {self.stream_gate_init}")
        check(1e-3 <= self.column_gate_init <= 1e3, "column_gate_init",
              f"must be in [0.001, 1000] (a weight in a mean), got {self.column_gate_init}")
        check(not self.subject_route or "primary" in self.specialists, "subject_route",
              "needs `primary` in phase3.specialists (the frozen Phase 1 primary reads the subject column)")
        check(not self.vote_primary or (self.vote and self.subject_route), "vote_primary",
              "needs vote: true and subject_route: true (it votes with the subject rule's read of the frozen primary)")
        check(self.stream_seam or not self.column_seam, "column_seam",
              "needs stream_seam: true (the column seam reads the specialists' streams)")
        check(0 < self.router_init_rate < 1, "router_init_rate", f"must be in (0, 1), got {self.router_init_rate}")
        check(self.budget_period >= 1, "budget_period", "must be ≥ 1")
        check(0 <= self.budget_capped_share <= 1, "budget_capped_share",
              f"must be in [0, 1], got {self.budget_capped_share}")
        for key in ("eval_every", "checkpoint_every"):
            check(getattr(self, key) >= 0, key, "must be ≥ 0")
        check(self.log_every >= 1, "log_every", "must be ≥ 1")
        # a curve point is the mean over its window of steps; a state saved mid-window would
        # resume with the window's first steps lost
        check(self.checkpoint_every % self.log_every == 0, "checkpoint_every",
              f"must be a multiple of log_every ({self.log_every}), got {self.checkpoint_every}")
        check(self.eval_batch_size >= 1, "eval_batch_size", "must be ≥ 1")
        check(self.survival_tables >= 1, "survival_tables", "must be ≥ 1")


# ----------------------------------------------------------------------------- phase 4



# How Phase 4's merge combines its experts' log-probs (aegir.swarm.spawn.SwarmMerge, "Merge"):
# `product` keeps the weighted sum (how it trains), `geometric` divides it by the total weight
# (how `phase4.merge_reading` reads it by default).
MERGE_MODES = ("geometric", "product")


@dataclass(frozen=True)
class Phase4Config:
    """Params section `phase4`: the swarm — a spawning policy and a per-column merge over the
    frozen Phase 3 orchestrator and frozen sub-agents (`aegir.swarm.spawn`)."""

    specialists: tuple[str, ...] = ("primary", "places", "media")  # Phase 1 agents a sub-agent can be
    max_subagents: int = 16  # the policy spawns 0 … this many per table (options 0, 1, 2, 4, …)
    scaling_n: tuple[int, ...] = (0, 1, 2, 4, 8, 16)  # budgets of the scaling curve
    seed: int = 0  # policy init, batch order, sampled decisions
    train_tables: int = 256  # the first tables of `policy_train` (synthetic.policy_train_tables) it trains on
    wide_train_tables: int = 32  # and many-column ones: the first of `wide_train` (0: none)
    step_cost: float = 0.0  # reward (r_perf: F1 in [0, 1]) lost per critical step a decision adds
    steps: int = 150  # policy/merge updates
    batch_size: int = 16  # tables per update
    rollouts: int = 4  # K rollouts per table (the advantage group)
    ppo_epochs: int = 2  # updates per batch of rollouts
    lr: float = 0.01  # policy and merge (both small, both new)
    ce_weight: float = 1.0  # the merge's CE on gold labels beside the policy's RL loss
    route_weight: float = 0.0  # the specialist choice's CE toward the table's domain owner (0 = off)
    merge_reading: str = "geometric"  # the trained merge read as a weighted mean of log-probs, or their sum (product)
    kl_coef: float = 0.0
    clip_start: float = 0.2
    clip_end: float = 0.1
    budget_period: int = 50  # steps per window: capped (max sub-agents per table), then uncapped
    budget_capped_share: float = 0.5
    log_every: int = 10
    checkpoint_every: int = 50  # steps between saved training states (a multiple of log_every)
    eval_batch_size: int = 8  # sub-tasks per batched sub-agent call (and tables per Phase 3 batch)
    eval_tables: int = 0  # tables scored per evaluation split, the first ones (0: all): sub-agent reads cost
    timing_tables: int = 8  # `wide` tables timed batched vs one-after-another at each n

    def __post_init__(self) -> None:
        def check(ok: bool, key: str, problem: str) -> None:
            check_config(ok, f"phase4.{key}", problem)

        check(len(self.specialists) >= 1 and len(set(self.specialists)) == len(self.specialists),
              "specialists", f"need ≥ 1 distinct agent names, got {list(self.specialists)}")
        check(1 <= self.max_subagents <= 64, "max_subagents", f"must be in [1, 64], got {self.max_subagents}")
        check(len(self.scaling_n) >= 1 and all(0 <= n <= self.max_subagents for n in self.scaling_n), "scaling_n",
              f"need budgets in [0, max_subagents = {self.max_subagents}], got {list(self.scaling_n)}")
        check(self.train_tables >= 2, "train_tables", f"must be ≥ 2, got {self.train_tables}")
        check(self.wide_train_tables >= 0, "wide_train_tables", f"must be ≥ 0, got {self.wide_train_tables}")
        check(0 <= self.step_cost <= 1, "step_cost", f"must be in [0, 1], got {self.step_cost}")
        check(1 <= self.steps <= 1_000_000, "steps", f"must be in [1, 1000000], got {self.steps}")
        check(2 <= self.batch_size <= 4096, "batch_size", f"must be in [2, 4096], got {self.batch_size}")
        check(2 <= self.rollouts <= 64, "rollouts", f"must be in [2, 64], got {self.rollouts}")
        check(1 <= self.ppo_epochs <= 16, "ppo_epochs", f"must be in [1, 16], got {self.ppo_epochs}")
        check(0 < self.lr <= 1, "lr", f"must be in (0, 1], got {self.lr}")
        for key in ("ce_weight", "kl_coef", "route_weight"):
            check(0 <= getattr(self, key) <= 100, key, f"must be in [0, 100], got {getattr(self, key)}")
        check(0 < self.clip_end <= self.clip_start < 1, "clip_start",
              f"need 0 < clip_end ≤ clip_start < 1, got {self.clip_start} → {self.clip_end}")
        check(self.budget_period >= 1, "budget_period", "must be ≥ 1")
        check(0 <= self.budget_capped_share <= 1, "budget_capped_share",
              f"must be in [0, 1], got {self.budget_capped_share}")
        check(self.log_every >= 1, "log_every", "must be ≥ 1")
        check(self.checkpoint_every >= 0 and self.checkpoint_every % self.log_every == 0, "checkpoint_every",
              f"must be a multiple of log_every ({self.log_every}), got {self.checkpoint_every}")
        check(self.eval_batch_size >= 1, "eval_batch_size", "must be ≥ 1")
        check(self.timing_tables >= 1, "timing_tables", "must be ≥ 1")
        check(self.eval_tables >= 0, "eval_tables", f"must be ≥ 0, got {self.eval_tables}")
        check(self.merge_reading in MERGE_MODES, "merge_reading",
              f"must be one of {', '.join(MERGE_MODES)} (aegir.swarm.spawn.SwarmMerge), got {self.merge_reading!r}")


# ----------------------------------------------------------------------------- loading


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Check `value` against the annotation `tp`; return it in the dataclass's own form."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        for option in args:
            try:
                return _coerce(value, option, key)
            except ConfigError:
                continue
        raise ConfigError(f"{key}: expected {' or '.join(_type_name(a) for a in args)}, got {value!r}")
    if tp is type(None):
        check_config(value is None, key, f"expected null, got {value!r}")
        return None
    if origin is Literal:
        check_config(value in args, key, f"expected one of {list(args)}, got {value!r}")
        return value
    if dataclasses.is_dataclass(tp):
        check_config(isinstance(value, dict), key, f"expected a mapping, got {value!r}")
        return build(tp, value, key)
    if origin in (tuple, list):
        check_config(isinstance(value, (list, tuple)), key, f"expected a list, got {value!r}")
        item_tp = args[0] if args else Any
        return tuple(_coerce(v, item_tp, f"{key}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        check_config(isinstance(value, dict), key, f"expected a mapping, got {value!r}")
        key_tp, val_tp = args
        return {_coerce(k, key_tp, key): _coerce(v, val_tp, f"{key}.{k}") for k, v in value.items()}
    if tp is bool:
        check_config(isinstance(value, bool), key, f"expected true/false, got {value!r}")
        return value
    if tp is int:
        check_config(isinstance(value, int) and not isinstance(value, bool), key, f"expected an integer, got {value!r}")
        return value
    if tp is float:
        check_config(isinstance(value, (int, float)) and not isinstance(value, bool), key,
               f"expected a number, got {value!r}")
        return float(value)
    if tp is str:
        check_config(isinstance(value, str), key, f"expected a string, got {value!r}")
        return value
    raise ConfigError(f"{key}: unsupported annotation {tp!r}")  # a bug in this module


def build(cls: type, mapping: dict[str, Any], prefix: str) -> Any:
    """Build dataclass `cls` from `mapping`; unknown keys and wrong types name the key."""
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(mapping) - known)
    if unknown:
        raise ConfigError(f"{prefix}.{unknown[0]}: unknown key (known: {', '.join(sorted(known))})")
    kwargs = {name: _coerce(value, hints[name], f"{prefix}.{name}") for name, value in mapping.items()}
    try:
        return cls(**kwargs)
    except ConfigError as exc:  # a check that names its key alone (AgentConfig's) gets the path
        if str(exc).startswith(f"{prefix}.") or f"{str(exc).partition(':')[0]}" not in known:
            raise
        raise ConfigError(f"{prefix}.{exc}") from None


@dataclass(frozen=True)
class ReadingConfig:
    """How a trained model reads a table when it is scored or annotated (aegir.eval.grouped); not a
    training setting: it is outside Phase 1's training fingerprint, so after a change the phase1
    stages resume at their saved end and only re-score."""

    columns: int = 0  # a wider table is read in column groups, the subject + ≤ columns − 1 others; 0: whole
    views: int = 1  # row views read per table (rows rotated), label probabilities averaged
    joint_cta: float = 0.0  # β of a table's joint CTA decoding (aegir.eval.joint); 0: each column's argmax
    joint_cpa: float = 0.0  # β of its joint CPA decoding; 0: each column's argmax

    @property
    def joint_weights(self) -> dict[str, float]:
        return {"cta": self.joint_cta, "cpa": self.joint_cpa}

    def __post_init__(self) -> None:
        check_config(self.columns == 0 or 2 <= self.columns <= 1024, "reading.columns",
                     f"must be 0 (whole tables) or in [2, 1024], got {self.columns}")
        check_config(1 <= self.views <= 16, "reading.views", f"must be in [1, 16], got {self.views}")
        for task in ("cta", "cpa"):
            weight = getattr(self, f"joint_{task}")
            check_config(0.0 <= weight <= 10.0, f"reading.joint_{task}", f"must be in [0, 10], got {weight}")


# Every top-level section of params.yaml and the dataclass that owns it. Every stage loads
# every section, so a section's dataclass lives here, in this module, and not in its stage's
# module: a class defined elsewhere would put that module (and all it imports) into every
# stage's dependencies (tests/test_dependencies.py). A "module:Class" string is still accepted
# (imported on use), and that test counts it as an import of every stage.
SECTIONS: dict[str, Any] = {
    "prepare": PrepareConfig,
    "synthetic": SyntheticConfig,
    "baselines": BaselinesConfig,
    "launch": LaunchConfig,  # the accelerate config of the training stages
    "presets": dict[str, dict[str, Any]],  # model size presets; checked against AegirConfig
    "primary": AgentConfig,  # the generalist: stage `primary`; Phase 3 trains it further
    "specialists": dict[str, AgentConfig],  # the frozen experts Phase 3 fuses: one `phase1` item each
    "phase1": Phase1Config,
    "reading": ReadingConfig,  # how scoring and annotating read a table
    "lambda": LambdaConfig,  # λ1/λ2 per phase and the phase boundaries
    "rewards": RewardConfig,
    "phase2": Phase2Config,
    "phase3": Phase3Config,
    "phase4": Phase4Config,
}


@dataclass(frozen=True)
class Params:
    """All of params.yaml, one typed section per stage."""

    sections: dict[str, Any] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:
        try:
            return self.sections[name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def agents(self) -> dict[str, AgentConfig]:
        """Every model Phase 1 trains, by name: "primary" first, then the specialists."""
        return {"primary": self.sections["primary"], **self.sections["specialists"]}


def parse_params(raw: dict[str, Any], source: str = "params.yaml") -> Params:
    """Validate a params mapping; every section in `SECTIONS` is built (missing → defaults)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level")
    unknown = sorted(set(raw) - set(SECTIONS))
    if unknown:
        raise ConfigError(f"{unknown[0]}: unknown section in {source} (known: {', '.join(SECTIONS)})")
    sections = {}
    for name, tp in SECTIONS.items():
        if isinstance(tp, str):  # defined beside the code it configures; imported on use
            module, _, attr = tp.partition(":")
            tp = getattr(importlib.import_module(module), attr)
        value = raw.get(name) or {}
        if not isinstance(value, dict):
            raise ConfigError(f"{name}: expected a mapping, got {value!r}")
        sections[name] = _coerce(value, tp, name)
    params = Params(sections=sections)
    if "primary" in raw or "specialists" in raw:  # a file without them names no preset to check
        _check_cross_references(params)
    return params


def _check_cross_references(params: Params) -> None:
    check_config("primary" not in params.specialists, "specialists.primary",
                 "the name 'primary' is the `primary` section's; give the specialist another")
    for name, agent in params.agents.items():
        key = "primary" if name == "primary" else f"specialists.{name}"
        check_config(agent.preset in params.presets, f"{key}.preset",
                     f"unknown preset {agent.preset!r}; known: {', '.join(params.presets) or 'none'}")
        if agent.init is None:
            continue
        check_config(name != "primary", "primary.init", "the primary starts from a fresh model (null)")
        check_config(agent.init == "primary", f"{key}.init",
                     f"a specialist starts from the primary's checkpoint ('primary') or afresh (null), got {agent.init!r}")
        check_config(params.primary.preset == agent.preset, f"{key}.init",
                     f"the primary has preset {params.primary.preset!r}, {name!r} {agent.preset!r}: they must match")


def load_params(path: str | Path = "params.yaml") -> Params:
    """Read and validate params.yaml (errors name the file and the key)."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such params file") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from None
    try:
        return parse_params(raw or {}, str(path))
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None

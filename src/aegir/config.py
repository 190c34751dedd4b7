"""Typed configuration: one frozen dataclass per stage, built from `params.yaml`.

An unknown key, a value of the wrong type or a value out of range is a `ConfigError` naming
the key (`phase1.lr: expected float, got 'fast'`), raised before any work starts.
"""

from __future__ import annotations

import dataclasses
import importlib
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
# in-repository data whatever the source (`real`: real tables, `aegir.data.real`). Every
# prepared directory holds all of SPLITS; only TRAIN_SPLIT is ever trained on.
SOURCE_SPLITS = ("train", "valid", "test", "corner_cases", "missing_values", "format_heterogeneity")
EVAL_ONLY_SPLITS = ("real",)
SPLITS = SOURCE_SPLITS + EVAL_ONLY_SPLITS
TRAIN_SPLIT = "train"
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

    def __post_init__(self) -> None:
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

    def __post_init__(self) -> None:
        check_config(64 <= self.byte_budget <= 1 << 20, "prepare.byte_budget",
               f"must be in [64, 1048576], got {self.byte_budget}")
        check_config(1 <= self.max_rows <= 100_000, "prepare.max_rows", f"must be ≥ 1, got {self.max_rows}")
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

    def __post_init__(self) -> None:
        unknown = [d for d in self.domains if d not in DOMAINS]
        check_config(not unknown, "agents.domains", f"unknown domain(s) {unknown}; known: {', '.join(DOMAINS)}")
        check_config(self.epochs is None or 1 <= self.epochs <= 10_000, "agents.epochs",
               f"must be in [1, 10000], got {self.epochs}")


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
    eval_batch_size: int = 32
    max_steps: int = 0  # stop after this many steps (0: no limit); for smoke runs

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
    return cls(**kwargs)


# Every top-level section of params.yaml and the dataclass that owns it. Sections of later
# stages register here as their modules land.
SECTIONS: dict[str, Any] = {
    "prepare": PrepareConfig,
    "synthetic": SyntheticConfig,
    "baselines": BaselinesConfig,
    "presets": dict[str, dict[str, Any]],  # model size presets; checked against AegirConfig
    "agents": dict[str, AgentConfig],  # "primary" + specialists, one phase1 item each
    "phase1": Phase1Config,
    "lambda": "aegir.rl.rewards:LambdaConfig",  # λ1/λ2 per phase and the phase boundaries
    "rewards": "aegir.rl.rewards:RewardConfig",
    "phase2": "aegir.stages.phase2:Phase2Config",
    "phase3": "aegir.stages.phase3:Phase3Config",
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
    _check_cross_references(params)
    return params


def _check_cross_references(params: Params) -> None:
    if params.agents:
        check_config("primary" in params.agents, "agents", "must define the 'primary' agent")
        for name, agent in params.agents.items():
            check_config(agent.preset in params.presets, f"agents.{name}.preset",
                   f"unknown preset {agent.preset!r}; known: {', '.join(params.presets) or 'none'}")



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

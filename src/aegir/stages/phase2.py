"""Stage `phase2`: prove, on the Phase 1 agents and real batches, that each reward measures what it claims.

    python -m aegir.stages.phase2 --params params.yaml --data data/prepared \\
        --models models/phase1 --out results/phase2

The rewards are pure functions (`aegir.rl.rewards`) and the checks are library functions
(`aegir.rl.checks`); this stage feeds them the Phase 1 primary, its specialists (every agent of
the `specialists` section, S ≥ 1 of them) and `phase2.batches` seeded batches of
`phase2.batch_size` tables from the `valid` split, and records what they measure:

| check                        | what is measured                                                    |
|------------------------------|---------------------------------------------------------------------|
| `<component>.range`          | finite and inside its documented bounds, on real data: r_perf of the |
|                              | primary's own predictions and of routed annotations, r_parallel and  |
|                              | r_finish under routings sampled from routers at rates 1−c, a, ½, c;  |
|                              | the combined r at every reported λ                                   |
| `r_perf.corruption_model`    | mean r_perf as a share of the *model's* predictions is replaced by   |
|                              | wrong labels: never rises, reaches 0 when everything is corrupted    |
| `r_perf.corruption_gold`     | the same from the *gold* labels: starts at exactly 1 per labelled    |
|                              | table and falls strictly                                             |
| `r_finish.dropped_columns`   | mean r_finish as a share of the primary's annotations is dropped:   |
|                              | never rises, falls overall                                           |
| `r_parallel.patterns`,       | balanced selective routing scores strictly higher than always-on,    |
| `r_finish.patterns`          | always-off and unbalanced (`routing_patterns`, batch size of the run)|
| `<component>.gradient*`      | the REINFORCE gradient w.r.t. a `SpecialistRouter` over the primary's|
|                              | `routing_hidden` is finite throughout the ascent and non-zero at one |
|                              | of its steps at least (`grad_norm`: at the start; see below)         |
| `r_parallel.ascent_from_*`   | `ascent_steps` Adam steps from always-on lower the activation rate   |
|                              | toward the target share; from always-off they raise it toward it     |
| `r_finish.ascent_from_*`     | the same directions (its optimum is any non-degenerate routing)      |
| `r_perf.ascent`              | from a neutral router (rate ½), the exact expected r_perf of the     |
|                              | routed annotation rises                                              |
| `calibration.finite`         | each component's spread beside r_perf's, with the suggested λ table  |

Routing-dependent r_perf. Phase 3's fusion does not exist yet, so the stage scores an honest
stand-in that depends on the routing: a table's *routed annotation* takes, per column, the
argmax of the mean softmax of the primary and the specialists the router activated for that
table (none activated: the primary alone). Activating a specialist that is better on a table
pays; one that is worse costs. Because each table's r_perf depends only on its own routing,
its expectation under the router's independent gates is computed exactly over all 2^S
routings (S ≤ `MAX_EXACT_SPECIALISTS`), which is what `r_perf.ascent` compares.

Gradients use K = `phase2.rollouts` routings per table and a group-relative baseline (reward
minus the mean over the table's K rollouts, as Phase 3 does), each rollout scored batch by
batch, so the batch-level parts (balance, degeneracy) see one rollout of one batch. With that
baseline a reward that ignores the routing gives exactly zero gradient: "non-zero" means the
routing moves the reward. r_finish moves only through the degeneracy penalty (the primary
annotates every column), so its gradient is measured where routing is degenerate: at the
always-on and always-off starts of the ascent.

Calibration: spreads are taken under routings sampled from a router at the target share;
`suggest_lambdas` reads the configured λ as shares of r_perf's spread (λ_suggested =
λ_configured · std(r_perf) / std(component), capped). Spreads of the group-relative
advantages, the quantity Phase 3's loss sees, are reported beside them with their own
suggestion (r_perf's between-table spread cancels in those).

Outputs (written atomically; the stage exits 1 after writing them when a check fails):
  <out>/metrics.json  DVC metrics: checks run, checks failed, the primary's mean r_perf
  <out>/report.json   every check with `ok` and its measured values, the λ tables (with the
                      mean combined reward at each schedule point)
  <out>/plots/        corruption.csv, routing.csv, ascent.csv and a PNG of each
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import sys
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

import torch

from aegir import atomic
from aegir.config import Params, Phase2Config, load_params
from aegir.data.batch import Batch
from aegir.data.dataset import Example, collate, load_examples
from aegir.data.prepared import split_path
from aegir.errors import AegirError, DataError, check_config
from aegir.labels import cpa_vocab, cta_vocab
from aegir.model.network import AegirModel
from aegir.orchestrator.ensemble import all_routings, routed_argmax, routing_index
from aegir.orchestrator.router import SpecialistRouter
from aegir.orchestrator.specialist import load_agents as load_phase1_agents
from aegir.rl.checks import (
    check_range,
    corruption_curve,
    dropped_columns_curve,
    pattern_rewards,
    router_ascent,
    routing_patterns,
    spread_stats,
    suggest_lambdas,
)
from aegir.rl.rewards import (
    LambdaConfig,
    LambdaSchedule,
    RewardConfig,
    annotated_columns,
    combine,
    r_finish,
    r_parallel,
    r_perf,
)

MAX_EXACT_SPECIALISTS = 10  # r_perf's expectation enumerates 2^S routings per table


# ----------------------------------------------------------------------------- inputs


def load_agents(params: Params, models_dir: Path) -> tuple[AegirModel, dict[str, AegirModel]]:
    """The Phase 1 primary and specialists (`models_dir/<agent>/`), in eval mode on the CPU."""
    agents = list(params.agents)
    check_config("primary" in agents, "primary", "phase2 needs the 'primary' agent")
    names = [name for name in agents if name != "primary"]
    check_config(len(names) >= 1, "specialists", "phase2 needs at least one specialist besides 'primary'")
    check_config(len(names) <= MAX_EXACT_SPECIALISTS, "specialists",
           f"phase2 enumerates the 2^S routings of a table; S = {len(names)} > {MAX_EXACT_SPECIALISTS}")
    models = load_phase1_agents(models_dir, ["primary", *names])
    primary = models.pop("primary")
    return primary, models


def _generator(seed: int, purpose: int) -> torch.Generator:
    # one independent stream per use, so changing one check's draws leaves the others alone
    return torch.Generator().manual_seed(seed * 64 + purpose)


def select_batches(examples: list[Example], cfg: Phase2Config) -> list[Batch]:
    """Up to `cfg.batches` full batches of a seeded random selection of the examples."""
    full = len(examples) // cfg.batch_size
    if full == 0:
        raise AegirError(f"phase2: the valid split has {len(examples)} tables, fewer than "
                         f"phase2.batch_size = {cfg.batch_size}")
    order = torch.randperm(len(examples), generator=_generator(cfg.seed, 0)).tolist()
    B = cfg.batch_size
    return [collate([examples[i] for i in order[k * B:(k + 1) * B]]) for k in range(min(cfg.batches, full))]


# ----------------------------------------------------------------------------- annotations


@dataclass
class BatchAnnotations:
    """What the Phase 1 agents say about one batch, computed once.

    column_mask:       (B, C) bool, real columns
    cta_gold/cpa_gold: (B, C) long, class ids or IGNORE_INDEX
    features:          (B, D) the primary's `routing_hidden`, the router's input
    routed_cta:        (2^S, B, C) long, the routed annotation of every table under routing j
    routed_cpa:        (2^S, B, C) long  (of `all_routings`; j = 0: the primary alone)
    """

    column_mask: torch.Tensor
    cta_gold: torch.Tensor
    cpa_gold: torch.Tensor
    features: torch.Tensor
    routed_cta: torch.Tensor
    routed_cpa: torch.Tensor

    @property
    def batch_size(self) -> int:
        return self.column_mask.shape[0]

    @property
    def num_specialists(self) -> int:
        return self.routed_cta.shape[0].bit_length() - 1

    def routed_predictions(self, activation_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """activation_mask (B, S) → (cta_pred, cpa_pred), each (B, C) long."""
        j, rows = routing_index(activation_mask), torch.arange(self.batch_size, device=activation_mask.device)
        return self.routed_cta[j, rows], self.routed_cpa[j, rows]

    def primary_predictions(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.routed_cta[0], self.routed_cpa[0]


@torch.no_grad()
def annotate(primary: AegirModel, specialists: list[AegirModel], batch: Batch) -> BatchAnnotations:
    """Run every agent on `batch` (eval mode, no gradient)."""
    encoded = primary.encode(batch)
    output = primary.forward_from_encoded(batch, encoded)
    features = primary.routing_hidden(batch, encoded).float()  # (B, D)
    outputs = [output] + [model(batch) for model in specialists]
    return BatchAnnotations(
        column_mask=batch.column_mask,
        cta_gold=batch.cta_labels,
        cpa_gold=batch.cpa_labels,
        features=features,
        routed_cta=routed_argmax(torch.stack([o.cta_logits.float().softmax(-1) for o in outputs])),
        routed_cpa=routed_argmax(torch.stack([o.cpa_logits.float().softmax(-1) for o in outputs])),
    )


# ----------------------------------------------------------------------------- routing rewards
# Each takes one batch's annotations and one routing of it, (B, S) mask and gates → (B,).


def routed_r_perf(b: BatchAnnotations, mask: torch.Tensor, gate: torch.Tensor, rc: RewardConfig) -> torch.Tensor:
    cta, cpa = b.routed_predictions(mask)
    return r_perf(cta, b.cta_gold, cpa, b.cpa_gold, b.column_mask, rc.perf_mode)


def routed_r_parallel(b: BatchAnnotations, mask: torch.Tensor, gate: torch.Tensor, rc: RewardConfig) -> torch.Tensor:
    return r_parallel(mask, gate, rc.target_share, rc.balance_weight)


def routed_r_finish(b: BatchAnnotations, mask: torch.Tensor, gate: torch.Tensor, rc: RewardConfig) -> torch.Tensor:
    cta, cpa = b.routed_predictions(mask)
    annotated = annotated_columns(cta, cpa, b.column_mask, rc.perf_mode)
    return r_finish(annotated, b.column_mask, mask, rc.degenerate_penalty)


COMPONENTS = {"r_perf": routed_r_perf, "r_parallel": routed_r_parallel, "r_finish": routed_r_finish}


def pooled(batches: list[BatchAnnotations], component, rc: RewardConfig):
    """A routing reward over the concatenated batches, (N·B, S) → (N·B,): each batch's slice
    is scored on its own, so batch-level parts see one batch (as Phase 3's per-batch calls)."""
    sizes = [b.batch_size for b in batches]

    def reward(mask: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        return torch.cat([component(b, m, g, rc) for b, m, g in zip(batches, mask.split(sizes), gate.split(sizes))])

    return reward


def r_perf_table(batches: list[BatchAnnotations], rc: RewardConfig) -> torch.Tensor:
    """(N·B, 2^S): routed r_perf of every table under every routing of it."""
    routings = all_routings(batches[0].num_specialists, batches[0].column_mask.device)
    rows = []
    for b in batches:
        rows.append(torch.stack([routed_r_perf(b, m.expand(b.batch_size, -1), m.float().expand(b.batch_size, -1), rc)
                                 for m in routings], dim=1))
    return torch.cat(rows)


def expected_value(table: torch.Tensor, scores: torch.Tensor) -> float:
    """Mean over tables of E[r] under independent Bernoulli gates: table (N, 2^S), scores (N, S)."""
    routings = all_routings(scores.shape[1], scores.device).float()  # (2^S, S)
    p = scores.detach().double().clamp(1e-12, 1 - 1e-12)
    log_prob = p.log() @ routings.double().T + (1 - p).log() @ (1 - routings.double()).T  # (N, 2^S)
    return float((log_prob.exp() * table.double()).sum(-1).mean())


def router_features(batches: list[BatchAnnotations]) -> torch.Tensor:
    """The router's input for the checked tables, (N·B, D): the primary's `routing_hidden`,
    standardised per dimension over these tables and divided by √D (unit norm on average).

    An affine map of the features leaves the set of linear routing policies unchanged; it only
    conditions the ascent. Centred features put a global rate change on the bias alone (Adam
    moves it by about `ascent_lr` a step) and the √D keeps the input-dependent part from moving
    each logit by lr·D a step, so `ascent_lr` means the same for every model preset.
    """
    h = torch.cat([b.features for b in batches]).double()
    h = (h - h.mean(0)) / h.std(0).clamp(min=1e-6)
    return (h / math.sqrt(h.shape[1])).float()


def seeded_router(d_model: int, num_specialists: int, rate: float, generator: torch.Generator,
                  device: torch.device | str = "cpu") -> SpecialistRouter:
    """A router with every gate at `rate` (bias logit(rate)) and N(0, 0.02) weights from `generator`."""
    router = SpecialistRouter(d_model, num_specialists, init_rate=rate)
    with torch.no_grad():
        router.proj.weight.normal_(0.0, 0.02, generator=generator)
    return router.to(device)


@torch.no_grad()
def sample_components(batches: list[BatchAnnotations], router: SpecialistRouter, rc: RewardConfig,
                      rollouts: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Each component under `rollouts` routings sampled from `router` → name: (K, N·B)."""
    features = router_features(batches)
    rewards = {name: pooled(batches, fn, rc) for name, fn in COMPONENTS.items()}
    values: dict[str, list[torch.Tensor]] = {name: [] for name in COMPONENTS}
    for _ in range(rollouts):
        decision = router.sample(features, generator=generator)
        for name, reward in rewards.items():
            values[name].append(reward(decision.activation_mask, decision.scores))
    return {name: torch.stack(v) for name, v in values.items()}


# ----------------------------------------------------------------------------- checks


def _mean_curves(curves: list[dict], key: str) -> dict:
    means = torch.tensor([c[key] for c in curves], dtype=torch.float64).mean(0).tolist()
    non_increasing = all(b <= a + 1e-9 for a, b in zip(means, means[1:]))
    return {"levels": curves[0]["levels"], key: means, "non_increasing": non_increasing
            and all(c["non_increasing"] for c in curves), "start": means[0], "end": means[-1],
            "drop": means[0] - means[-1]}


def direction_checks(batches: list[BatchAnnotations], rc: RewardConfig, cfg: Phase2Config) -> dict[str, dict]:
    """Corruption curves of r_perf, dropped-column curve of r_finish, routing-pattern rankings."""
    levels = list(cfg.corruption_levels)
    n_cta, n_cpa = len(cta_vocab()), len(cpa_vocab())
    g_model, g_gold, g_drop, g_pattern = (_generator(cfg.seed, k) for k in (1, 2, 3, 4))
    model_curves, gold_curves, drop_curves, pattern_runs = [], [], [], []
    labelled_tables = []
    for b in batches:
        cta_pred, cpa_pred = b.primary_predictions()
        model_curves.append(corruption_curve(cta_pred, b.cta_gold, cpa_pred, b.cpa_gold, b.column_mask, levels,
                                             n_cta, n_cpa, g_model, rc.perf_mode))
        gold_curves.append(corruption_curve(b.cta_gold, b.cta_gold, b.cpa_gold, b.cpa_gold, b.column_mask, levels,
                                            n_cta, n_cpa, g_gold, rc.perf_mode))
        scored = torch.zeros_like(b.column_mask)
        if rc.perf_mode in ("cta", "both"):
            scored |= b.cta_gold >= 0
        if rc.perf_mode in ("cpa", "both"):
            scored |= b.cpa_gold >= 0
        labelled_tables.append((scored & b.column_mask).any(-1).float())
        patterns = routing_patterns(b.batch_size, b.num_specialists, rc.target_share, g_pattern, cfg.confidence,
                                    device=b.column_mask.device)
        annotated = annotated_columns(cta_pred, cpa_pred, b.column_mask, rc.perf_mode)
        drop_curves.append(dropped_columns_curve(annotated, b.column_mask, patterns["balanced"].activation_mask,
                                                 levels, g_drop, rc.degenerate_penalty))
        pattern_runs.append(pattern_rewards(patterns, rc.target_share, rc.balance_weight, rc.degenerate_penalty))

    checks: dict[str, dict] = {}
    model = _mean_curves(model_curves, "r_perf_mean")
    ends_at_zero = levels[-1] < 1.0 or abs(model["end"]) < 1e-9
    checks["r_perf.corruption_model"] = {
        **model, "ends_at_zero": ends_at_zero, "vacuous": model["start"] <= 1e-9,
        "ok": model["non_increasing"] and ends_at_zero,
    }
    gold = _mean_curves(gold_curves, "r_perf_mean")
    labelled_share = float(torch.cat(labelled_tables).mean())
    strictly = all(b < a for a, b in zip(gold["r_perf_mean"], gold["r_perf_mean"][1:]))
    checks["r_perf.corruption_gold"] = {
        **gold, "labelled_table_share": labelled_share, "strictly_decreasing": strictly,
        "starts_perfect": abs(gold["start"] - labelled_share) < 1e-6,
        "ok": gold["non_increasing"] and strictly and abs(gold["start"] - labelled_share) < 1e-6,
    }
    drop = _mean_curves(drop_curves, "r_finish_mean")
    checks["r_finish.dropped_columns"] = {**drop, "ok": drop["non_increasing"] and drop["drop"] > 0.0}

    names = [name for name in pattern_runs[0] if isinstance(pattern_runs[0][name], dict)]
    for component in ("r_parallel", "r_finish"):
        means = {name: sum(run[name][component] for run in pattern_runs) / len(pattern_runs) for name in names}
        margins = {f"margin_over_{name}": means["balanced"] - means[name] for name in names if name != "balanced"}
        checks[f"{component}.patterns"] = {
            "mean": means, **margins,
            "activation_rate": {name: sum(r[name]["activation_rate"] for r in pattern_runs) / len(pattern_runs)
                                for name in names},
            "degeneracy": {name: sum(r[name]["degeneracy"] for r in pattern_runs) / len(pattern_runs)
                           for name in names},
            "ok": all(m > 0.0 for m in margins.values()),
        }
    return checks


def _gradient_check(ascent: dict) -> dict:
    """The REINFORCE gradient of a router ascent: finite at every step, non-zero at one step at
    least. A sampled gradient is exactly zero when all K rollouts of every table whose reward
    depends on the routing happen to score alike, which a small batch with few such tables (a
    tiny test run) can draw at the start; "non-zero somewhere" asks whether the estimator carries
    the reward's signal at all. `grad_norm` is the norm at the start of the ascent."""
    norms = ascent["grad_norm"]
    finite = ascent["grad_finite"] and all(math.isfinite(n) for n in norms)
    nonzero = any(n > 0.0 for n in norms)
    return {"grad_norm": norms[0], "finite": finite, "nonzero": nonzero, "ok": finite and nonzero}


def gradient_checks(batches: list[BatchAnnotations], rc: RewardConfig, cfg: Phase2Config) -> dict[str, dict]:
    """REINFORCE gradients at the start of router ascent, and the direction ascent moves routing."""
    features = router_features(batches)  # (N·B, D)
    S = batches[0].num_specialists
    a = rc.target_share
    checks: dict[str, dict] = {}
    ascent = partial(router_ascent, features, num_specialists=S, steps=cfg.ascent_steps, lr=cfg.ascent_lr,
                     rollouts=cfg.rollouts)
    for k, component in enumerate(("r_parallel", "r_finish")):
        reward = pooled(batches, COMPONENTS[component], rc)
        for j, (start, sign) in enumerate((("on", 1.0), ("off", -1.0))):
            out = ascent(reward, generator=_generator(cfg.seed, 10 + 2 * k + j),
                         init_bias=sign * cfg.ascent_init_bias)
            checks[f"{component}.gradient_from_{start}"] = _gradient_check(out)
            rate0, rate1 = out["start_rate"], out["end_rate"]
            moved = rate1 < rate0 if start == "on" else rate1 > rate0
            result = {"start_rate": rate0, "end_rate": rate1, "activation_rate": out["activation_rate"],
                      "reward_mean": out["reward_mean"], "moved_intended_way": moved}
            if component == "r_parallel":
                closer = abs(rate1 - a) < abs(rate0 - a)
                result.update(target_share=a, closer_to_target=closer, ok=moved and closer)
            else:
                result["ok"] = moved
            checks[f"{component}.ascent_from_{start}"] = result

    table = r_perf_table(batches, rc)  # (N·B, 2^S)
    out = ascent(pooled(batches, COMPONENTS["r_perf"], rc), generator=_generator(cfg.seed, 14), init_bias=0.0,
                 value_fn=partial(expected_value, table))
    routing_matters = bool((table.max(-1).values > table.min(-1).values).any())
    checks["r_perf.gradient"] = {**_gradient_check(out), "routing_matters": routing_matters}
    value = out["value"]
    checks["r_perf.ascent"] = {
        "expected_r_perf": value, "start": value[0], "end": value[-1], "gain": value[-1] - value[0],
        "primary_only": float(table[:, 0].mean()), "all_specialists": float(table[:, -1].mean()),
        "best_routing_per_table": float(table.max(-1).values.mean()),
        "start_rate": out["start_rate"], "end_rate": out["end_rate"], "activation_rate": out["activation_rate"],
        "ok": value[-1] > value[0],
    }
    return checks


def run(params: Params, primary: AegirModel, specialists: dict[str, AegirModel], examples: list[Example]) -> dict:
    """Every Phase 2 check on seeded valid batches → the report (plain JSON values)."""
    cfg, a = params.phase2, params.rewards.target_share
    check_config(1.0 - cfg.confidence < a < cfg.confidence, "phase2.confidence",
           f"the always-on/off gates {cfg.confidence:g}/{1 - cfg.confidence:g} must lie on either side of "
           f"rewards.target_share = {a:g}, or always-off/on would sit at the target")
    batches = [annotate(primary, list(specialists.values()), b) for b in select_batches(examples, params.phase2)]
    # The checks are thousands of ops on tensors of a few hundred numbers: one thread is as
    # fast, and idle spinning threads cost many times the work on a busy machine.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return check_batches(params, batches, list(specialists), len(examples))
    finally:
        torch.set_num_threads(threads)


def check_batches(params: Params, batches: list[BatchAnnotations], specialist_names: list[str],
                  valid_tables: int) -> dict:
    """The report of every check on annotated batches (see the module docstring)."""
    cfg: Phase2Config = params.phase2
    rc: RewardConfig = params.rewards
    lam: LambdaConfig = params.sections["lambda"]
    schedule = LambdaSchedule(lam)
    S = batches[0].num_specialists
    features_dim = batches[0].features.shape[1]
    checks: dict[str, dict] = {}

    device = batches[0].column_mask.device  # every tensor made here sits beside the batches
    # ranges: the primary's own r_perf, then every component under sampled routings
    perf_primary = torch.cat([routed_r_perf(b, torch.zeros(b.batch_size, S, dtype=torch.bool, device=device),
                                            torch.zeros(b.batch_size, S, device=device), rc) for b in batches])
    checks["r_perf.range_primary"] = check_range(perf_primary, 0.0, 1.0)
    rates = sorted({1.0 - cfg.confidence, rc.target_share, 0.5, cfg.confidence})
    g_router, g_sample = _generator(cfg.seed, 5), _generator(cfg.seed, 6)
    sampled = {rate: sample_components(batches, seeded_router(features_dim, S, rate, g_router, device), rc,
                                       cfg.rollouts, g_sample) for rate in rates}
    bounds = {"r_perf": (0.0, 1.0), "r_parallel": (-1.0, 1.0), "r_finish": (-rc.degenerate_penalty, 1.0)}
    for name, (lo, hi) in bounds.items():
        key = "r_perf.range_routed" if name == "r_perf" else f"{name}.range"
        checks[key] = {**check_range(torch.cat([s[name].flatten() for s in sampled.values()]), lo, hi),
                       "router_rates": rates}

    checks.update(direction_checks(batches, rc, cfg))
    checks.update(gradient_checks(batches, rc, cfg))

    # calibration and the configured λ, under routings of a router at the target share
    at_target = sampled[rc.target_share]
    spread = spread_stats(at_target)
    advantage = {name: v - v.mean(0, keepdim=True) for name, v in at_target.items()}
    advantage_spread = spread_stats(advantage)
    configured = asdict(lam)
    fractions = ((lam.early, lam.mid, lam.late), (lam.finish_early, lam.finish_mid, lam.finish_late))
    suggested = suggest_lambdas(spread, *fractions, max_lambda=cfg.max_lambda)
    suggested_adv = suggest_lambdas(advantage_spread, *fractions, max_lambda=cfg.max_lambda)
    flat = [x for stats in (spread, advantage_spread) for s in stats.values() for x in s.values()]
    checks["calibration.finite"] = {"ok": all(math.isfinite(x) for x in flat)}

    points: dict[str, dict] = {}
    total_ok = True
    for progress in cfg.schedule_points:
        lam1, lam2 = schedule.at(progress)
        total = combine(at_target["r_perf"], at_target["r_parallel"], at_target["r_finish"], lam1, lam2)
        lo, hi = -lam1 - lam2 * rc.degenerate_penalty, 1.0 + lam1 + lam2
        in_range = check_range(total, lo, hi)
        total_ok = total_ok and in_range["ok"]
        points[f"p{round(progress * 100):03d}"] = {
            "progress": progress, "lambda1": lam1, "lambda2": lam2, "reward_mean": float(total.mean()),
            "reward_std": float(total.std()), "reward_min": in_range["min"], "reward_max": in_range["max"],
            "lo": lo, "hi": hi,
        }
    checks["reward.range"] = {"ok": total_ok, "points": len(points)}

    failed = sorted(name for name, result in checks.items() if not result["ok"])
    return _clean({
        "passed": not failed,
        "failed": failed,
        "num_checks": len(checks),
        "num_failed": len(failed),
        "checks": checks,
        "setup": {
            "specialists": specialist_names, "num_specialists": S, "d_model": features_dim,
            "batches": len(batches), "batch_size": cfg.batch_size, "tables": sum(b.batch_size for b in batches),
            "valid_tables": valid_tables, "rollouts": cfg.rollouts, "seed": cfg.seed,
            "rewards": asdict(rc), "primary_r_perf_mean": float(perf_primary.mean()),
        },
        "calibration": {"spread": spread, "advantage_spread": advantage_spread, "router_rate": rc.target_share},
        "lambda": {"configured": configured, "schedule": points, "suggested": suggested,
                   "suggested_from_advantages": suggested_adv},
    })


def _clean(obj):
    """Plain JSON: floats rounded to 6 decimals (stable across runs, readable diffs), no -0.0,
    non-finite floats as null (JSON has no NaN; the check holding them has already failed)."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, bool) or obj is None or isinstance(obj, (int, str)):
        return obj
    if isinstance(obj, float):
        return round(obj, 6) + 0.0 if math.isfinite(obj) else None
    raise TypeError(f"not JSON-able: {type(obj).__name__}")


# ----------------------------------------------------------------------------- outputs


def plot_tables(report: dict) -> dict[str, list[list]]:
    """The data behind each plot, as CSV rows (header first)."""
    checks = report["checks"]
    model, gold, drop = (checks[k] for k in ("r_perf.corruption_model", "r_perf.corruption_gold",
                                                "r_finish.dropped_columns"))
    corruption = [["level", "r_perf_model", "r_perf_gold", "r_finish_dropped"]]
    corruption += [list(row) for row in zip(model["levels"], model["r_perf_mean"], gold["r_perf_mean"],
                                            drop["r_finish_mean"])]
    par, fin = checks["r_parallel.patterns"], checks["r_finish.patterns"]
    routing = [["pattern", "r_parallel", "r_finish", "activation_rate", "degeneracy"]]
    routing += [[name, par["mean"][name], fin["mean"][name], par["activation_rate"][name], par["degeneracy"][name]]
                for name in par["mean"]]
    runs = {f"{c}_from_{s}": checks[f"{c}.ascent_from_{s}"]["activation_rate"]
            for c in ("r_parallel", "r_finish") for s in ("on", "off")}
    runs["r_perf_from_half"] = checks["r_perf.ascent"]["activation_rate"]
    ascent = [["step", *runs, "r_perf_expected"]]
    ascent += [[step, *(r[step] for r in runs.values()), checks["r_perf.ascent"]["expected_r_perf"][step]]
               for step in range(len(runs["r_perf_from_half"]))]
    return {"corruption": corruption, "routing": routing, "ascent": ascent}


def _csv(rows: list[list]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    return buffer.getvalue()


def draw_plots(tables: dict[str, list[list]], target_share: float, plots_dir: Path) -> None:
    """PNG of each plot table (matplotlib, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def columns(rows: list[list]) -> dict[str, list]:
        return {name: [row[i] for row in rows[1:]] for i, name in enumerate(rows[0])}

    c = columns(tables["corruption"])
    fig, ax = plt.subplots(figsize=(6, 4))
    for key, label in (("r_perf_model", "r_perf, model predictions corrupted"),
                       ("r_perf_gold", "r_perf, gold labels corrupted"),
                       ("r_finish_dropped", "r_finish, annotations dropped")):
        ax.plot(c["level"], c[key], marker="o", label=label)
    ax.set(xlabel="share corrupted / dropped", ylabel="mean reward", title="Reward vs controlled corruption")
    ax.legend()
    fig.tight_layout()
    fig.savefig(plots_dir / "corruption.png", dpi=100)
    plt.close(fig)

    r = columns(tables["routing"])
    fig, ax = plt.subplots(figsize=(6, 4))
    x = list(range(len(r["pattern"])))
    ax.bar([i - 0.2 for i in x], r["r_parallel"], width=0.4, label="r_parallel")
    ax.bar([i + 0.2 for i in x], r["r_finish"], width=0.4, label="r_finish")
    ax.set_xticks(x, r["pattern"])
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.set(ylabel="mean reward", title="Reward vs routing pattern")
    ax.legend()
    fig.tight_layout()
    fig.savefig(plots_dir / "routing.png", dpi=100)
    plt.close(fig)

    a = columns(tables["ascent"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for key in [k for k in a if k.endswith(("_on", "_off", "_half"))]:
        left.plot(a["step"], a[key], label=key)
    left.axhline(target_share, color="grey", linestyle="--", label="target share")
    left.set(xlabel="ascent step", ylabel="activation rate", title="Router ascent")
    left.legend(fontsize=8)
    right.plot(a["step"], a["r_perf_expected"], color="tab:purple")
    right.set(xlabel="ascent step", ylabel="E[r_perf] (exact)", title="r_perf ascent from rate 1/2")
    fig.tight_layout()
    fig.savefig(plots_dir / "ascent.png", dpi=100)
    plt.close(fig)


def headline(report: dict) -> dict:
    """The DVC metrics of phase2: how many checks ran and failed, and the primary's mean r_perf.
    The mean combined reward at each point of the λ schedule, like everything else, stays in
    report.json (`lambda.schedule`)."""
    return {"checks": report["num_checks"], "failed": report["num_failed"],
            "primary_r_perf": report["setup"]["primary_r_perf_mean"]}


def write_outputs(report: dict, out_dir: Path) -> None:
    """metrics.json + report.json + plots/ (CSV and PNG), replacing `out_dir` atomically."""
    with atomic.staged_dir(out_dir) as staging:
        atomic.write_json(staging / "report.json", report)
        atomic.write_json(staging / "metrics.json", headline(report))
        plots_dir = staging / "plots"
        plots_dir.mkdir()
        tables = plot_tables(report)
        for name, rows in tables.items():
            atomic.write_text(plots_dir / f"{name}.csv", _csv(rows))
        draw_plots(tables, report["setup"]["rewards"]["target_share"], plots_dir)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--data", default="data/prepared", help="prepared data directory (its valid split)")
    parser.add_argument("--models", default="models/phase1", help="Phase 1 checkpoints, one directory per agent")
    parser.add_argument("--out", default="results/phase2", help="metrics.json, report.json and plots/")
    args = parser.parse_args(argv)
    try:
        params = load_params(args.params)
        primary, specialists = load_agents(params, Path(args.models))
        examples = load_examples(args.data, "valid")
        if not examples:
            raise DataError(split_path(args.data, "valid"), "no tables")
        report = run(params, primary, specialists, examples)
    except AegirError as exc:
        parser.exit(2, f"phase2: error: {exc}\n")
    write_outputs(report, Path(args.out))
    setup = report["setup"]
    print(f"phase2: {report['num_checks'] - report['num_failed']}/{report['num_checks']} checks passed on "
          f"{setup['tables']} of {setup['valid_tables']} valid tables, {setup['num_specialists']} specialists; "
          f"report in {Path(args.out) / 'report.json'}")
    if not report["passed"]:
        print(f"phase2: FAILED checks: {', '.join(report['failed'])}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

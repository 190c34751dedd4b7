"""Phase 2's reward study: on the Phase 1 agents and real batches, does each reward measure what it claims?

The rewards are pure functions (`aegir.rl.rewards`) and the single checks are library functions
(`aegir.rl.checks`); this module feeds them the Phase 1 primary, its specialists (S ≥ 1) and
seeded batches of the `valid` split (`run`), and returns every check with what it measured, as
plain JSON values (`check_batches`; the `phase2` stage writes them):

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

Routing-dependent r_perf: the routed annotation of `aegir.rl.routed_rewards`, its expectation
computed exactly over all 2^S routings (S ≤ `MAX_EXACT_SPECIALISTS`), which is what
`r_perf.ascent` compares.

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
"""

from __future__ import annotations

import math
from dataclasses import asdict
from functools import partial
from pathlib import Path

import torch

from aegir.config import Params, Phase2Config
from aegir.data.batch import Batch
from aegir.data.dataset import Example, collate
from aegir.errors import AegirError, check_config
from aegir.labels import cpa_vocab, cta_vocab
from aegir.model.network import AegirModel
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
)
from aegir.rl.routed_rewards import (
    COMPONENTS,
    BatchAnnotations,
    annotate,
    expected_value,
    pooled,
    r_perf_table,
    routed_r_perf,
    router_features,
    sample_components,
    seeded_router,
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

"""One Phase 4 update of the spawning policy and the merge, on cached sub-agent outputs.

    rollouts    K rollouts of every table: count, specialist, deep, consult sampled from the policy
                (options above the step's budget cap masked out); the swarm's merged labels
                from the cache (`swarm_logp`), argmax per column
    rewards     r_perf (the table's F1 of the merged labels), r_parallel and r_finish
                (`aegir.rl.rewards`), r = λ1·r_parallel + λ2·r_finish + r_perf − step_cost·Δ,
                Δ the critical steps the decision adds to the table's over not spawning
                (`StepCounter`; K2.5 judges a swarm by its critical steps)
    advantages  group-relative over the K rollouts of a table; every decision of a rollout
                gets its table's r − mean (each changes every column)
    loss        the token-level clipped loss over the policy's tokens (`aegir.rl.ppo`) +
                ce_weight · CE of the merged log-probs on the gold labels (the merge's weights)

r_parallel over sub-agents. The "specialists" of `share_term` are the `max_subagents` sub-agent
slots, slot i used when the table spawned more than i: F = spawned / max, G = the policy's
expected share; its target share (`rewards.target_share`) is the share of the budget a table
should spawn, and above it more sub-agents lower the reward. The balance term runs over the
specialist kinds the sub-agents instantiate (loads across specialists, as in Phase 3), not over
slots, which fill in order by construction. r_finish: every column gets its argmax label, so
completeness is 1 and only the degeneracy penalty moves it (every table of a batch spawning the
same way).

Departures: the labels are not sampled (they are the merge's argmax, and the merge learns by CE,
not by policy gradient); there is no per-column credit (every token here is a table decision).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from aegir.data.batch import IGNORE_INDEX, padded
from aegir.orchestrator.router import routing_targets
from aegir.rl.ppo import PPOStats, clipped_token_loss, group_advantages
from aegir.rl.rewards import (
    RewardConfig,
    balance_term,
    combine,
    r_finish,
    r_perf,
    share_term,
)
from aegir.swarm.policy import PolicyDecision, SpawnPolicy
from aegir.swarm.spawn import SubagentCache, SwarmMerge, swarm_steps
from aegir.swarm.views import (
    TableView,
    decision_keys,
    policy_inputs,
    swarm_logp,
)


@dataclass(frozen=True)
class StepCounter:
    """Critical steps of a table's decision (`aegir.swarm.spawn.swarm_steps`), from the Phase 3
    primary's config and each sub-agent specialist's steps to labels (in the policy's order)."""

    primary_config: object
    subagent_steps: tuple[int, ...]

    def consulted(self, view: TableView, consult: bool) -> tuple[int, ...]:
        """The steps to labels of each second opinion a decision asks for (none without)."""
        return self.subagent_steps if consult and view.consult else ()

    def extra(self, view: TableView, subagents: int, specialist: int, deep: bool, consult: bool = False) -> int:
        """Critical steps the decision adds over never spawning (0 when it spawns nothing)."""
        wide = len(view.wide_groups(subagents))
        deep_columns = len(view.deep_columns) if deep else 0
        steps = self.subagent_steps[specialist]
        spent, _ = swarm_steps(self.primary_config, view.phase3_reads, steps, wide, deep_columns,
                               self.consulted(view, consult), view.phase3_subject)
        alone, _ = swarm_steps(self.primary_config, view.phase3_reads, steps, 0, 0, subject=view.phase3_subject)
        return spent - alone


@dataclass(frozen=True)
class SwarmSettings:
    """The knobs of one update (params `phase4` and `rewards`); `steps` counts the critical
    steps that `step_cost` charges (needed when step_cost > 0)."""

    rollouts: int
    ce_weight: float
    kl_coef: float
    rewards: RewardConfig
    step_cost: float = 0.0
    steps: StepCounter | None = None
    route_weight: float = 0.0  # weight of the specialist choice's CE toward `specialist_targets` (0 = off)

    def __post_init__(self) -> None:
        if self.step_cost > 0 and self.steps is None:
            raise ValueError("step_cost > 0 needs a StepCounter (steps)")


@dataclass
class SwarmRollouts:
    """A batch's K rollouts (rollout k of table b is row k·B + b), detached."""

    tables: list[int]
    count: torch.Tensor
    specialist: torch.Tensor
    deep: torch.Tensor
    consult: torch.Tensor
    logp_old: torch.Tensor  # (K·B, 4): count, specialist, deep, consult
    tokens: torch.Tensor  # (K·B, 4) bool
    advantage: torch.Tensor  # (K·B,)
    rewards: dict[str, torch.Tensor]  # name → (K, B)
    spawned: torch.Tensor  # (K·B,) sub-agents actually spawned


def rewards_of(views: list[TableView], rows: list[int], merged: list[tuple[torch.Tensor, torch.Tensor]],
               decision: PolicyDecision, spawned: torch.Tensor, max_subagents: int, num_specialists: int,
               rc: RewardConfig) -> dict[str, torch.Tensor]:
    """r_perf, r_parallel, r_finish of one rollout of the batch `rows` (module docstring), (B,) each."""
    cta_pred = padded([m[0].argmax(-1) for m in merged], -1)
    cpa_pred = padded([m[1].argmax(-1) for m in merged], -1)
    cta_gold = padded([views[t].cta_gold for t in rows], IGNORE_INDEX)
    cpa_gold = padded([views[t].cpa_gold for t in rows], IGNORE_INDEX)
    column_mask = padded([torch.ones(views[t].num_columns, dtype=torch.bool) for t in rows], False)
    perf = r_perf(cta_pred, cta_gold, cpa_pred, cpa_gold, column_mask, rc.perf_mode)
    slots = max(1, max_subagents)
    slot_mask = torch.arange(slots)[None] < spawned[:, None]  # (B, slots)
    share = share_term(slot_mask, decision.slot_prob.detach()[:, :slots] if max_subagents else
                       torch.zeros_like(slot_mask, dtype=torch.float), rc.target_share)
    kinds = F.one_hot(decision.specialist, num_specialists).bool() & (spawned > 0)[:, None]
    parallel = (share + rc.balance_weight * balance_term(kinds)) / (1.0 + rc.balance_weight)
    finish = r_finish(column_mask, column_mask, slot_mask, rc.degenerate_penalty)
    return {"r_perf": perf, "r_parallel": parallel, "r_finish": finish}


def rollout_outputs(views, rows, decision: PolicyDecision, options, cache, merge, names):
    """Merged log-probs of each row's decision, and the sub-agents it spawned (B,)."""
    merged, spawned = [], []
    for i, t in enumerate(rows):
        g = options[int(decision.count[i])]
        merged.append(swarm_logp(t, views[t], g, int(decision.specialist[i]), bool(decision.deep[i]), cache,
                                 merge, names, bool(decision.consult[i])))
        spawned.append(len(views[t].wide_groups(g)))
    return merged, torch.tensor(spawned)


def merge_ce(views, rows, merged) -> torch.Tensor:
    """Mean CE of the merged log-probs on the labelled columns (CTA) and pairs (CPA)."""
    total, count = 0.0, 0
    for t, (cta, cpa) in zip(rows, merged):
        view = views[t]
        for logp, gold, first in ((cta, view.cta_gold, 0), (cpa, view.cpa_gold, 1)):
            mask = gold != IGNORE_INDEX
            mask[:first] = False
            if mask.any():
                total = total - logp[mask].gather(-1, gold[mask][:, None]).sum()
                count += int(mask.sum())
    return total / max(count, 1)


def collect(policy: SpawnPolicy, merge: SwarmMerge, views: list[TableView], rows: list[int], cache: SubagentCache,
            names: list[str], settings: SwarmSettings, lam1: float, lam2: float, generator: torch.Generator,
            max_count: int | None, max_subagents: int) -> SwarmRollouts:
    """Sample K rollouts of the tables `rows`, fill the cache they need, score them."""
    K, B = settings.rollouts, len(rows)
    all_rows = rows * K
    hidden, width, allowed, has_deep, has_consult = policy_inputs(views, all_rows, policy.options, max_count)
    with torch.no_grad():
        decision = policy.decide(hidden, width, allowed, has_deep, has_consult, sample=True, generator=generator)
    keys = []
    for i, t in enumerate(all_rows):
        keys += decision_keys(t, views[t], policy.options[int(decision.count[i])], names[int(decision.specialist[i])],
                              bool(decision.deep[i]))
    cache.fill(keys)
    with torch.no_grad():
        merged, spawned = rollout_outputs(views, all_rows, decision, policy.options, cache, merge, names)
    parts: dict[str, list] = {"r_perf": [], "r_parallel": [], "r_finish": []}
    for k in range(K):  # one call per rollout: the batch-level terms see one rollout of the batch
        sl = slice(k * B, (k + 1) * B)
        d = PolicyDecision(*(getattr(decision, f)[sl] for f in decision.__dataclass_fields__))
        for name, value in rewards_of(views, rows, merged[sl], d, spawned[sl], max_subagents, len(names),
                                      settings.rewards).items():
            parts[name].append(value)
    rewards = {name: torch.stack(v).float() for name, v in parts.items()}  # (K, B)
    rewards["reward"] = combine(rewards["r_perf"], rewards["r_parallel"], rewards["r_finish"], lam1, lam2)
    if settings.steps is not None:
        extra = torch.tensor([settings.steps.extra(views[t], policy.options[int(decision.count[i])],
                                                   int(decision.specialist[i]), bool(decision.deep[i]),
                                                   bool(decision.consult[i]))
                              for i, t in enumerate(all_rows)], dtype=torch.float).view(K, B)
        rewards["extra_critical_steps"] = extra
        rewards["reward"] = rewards["reward"] - settings.step_cost * extra
    logp_old, tokens = decision.tokens()
    return SwarmRollouts(
        tables=all_rows, count=decision.count, specialist=decision.specialist, deep=decision.deep,
        consult=decision.consult, logp_old=logp_old, tokens=tokens,
        advantage=group_advantages(rewards["reward"]).flatten(), rewards=rewards, spawned=spawned.float())


def specialist_targets(domains: list[str | None], names: list[str], agent_domains: dict[str, tuple[str, ...]]
                       ) -> torch.Tensor:
    """The sub-agent each table should instantiate, (T,) long: the first of `names` whose
    domains hold the table's domain (the owners are Phase 3's `routing_targets`); failing that
    the generalist `primary` when it is one of `names`; else -1 (no target). `agent_domains`:
    name → its domains (empty: a generalist)."""
    owners, _ = routing_targets(domains, [agent_domains.get(name, ()) for name in names])  # (T, S)
    fallback = names.index("primary") if "primary" in names else -1
    first = owners.argmax(dim=1)  # the first of equal maxima: the first owner
    return torch.where(owners.any(dim=1), first, torch.full_like(first, fallback))


def update_loss(policy: SpawnPolicy, merge: SwarmMerge, views: list[TableView], rollouts: SwarmRollouts,
                cache: SubagentCache, names: list[str], settings: SwarmSettings, epsilon: float,
                max_count: int | None, targets: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, dict[str, float], PPOStats]:
    """Clipped token loss of the rollouts' decisions re-scored under the current policy, plus
    ce_weight · the merge's CE on the same rollouts' merged labels, plus (with
    `settings.route_weight` and `targets`, `specialist_targets` of every training table)
    route_weight · the specialist head's CE toward each table's target: which expert to spawn is
    taught by the tables' domains, as Phase 3's router is (`phase3.route_weight`); whether to
    spawn at all stays the reward's."""
    rows = rollouts.tables
    hidden, width, allowed, has_deep, has_consult = policy_inputs(views, rows, policy.options, max_count)
    decision = policy.decide(hidden, width, allowed, has_deep, has_consult, count=rollouts.count,
                             specialist=rollouts.specialist, deep=rollouts.deep, consult=rollouts.consult)
    logp_new, _ = decision.tokens()
    tokens = rollouts.tokens
    advantage = rollouts.advantage[:, None].expand_as(tokens)
    rl, stats = clipped_token_loss(logp_new[tokens], rollouts.logp_old[tokens], advantage[tokens],
                                   torch.ones(int(tokens.sum())), epsilon, settings.kl_coef)
    merged, _ = rollout_outputs(views, rows, decision, policy.options, cache, merge, names)
    ce = merge_ce(views, rows, merged)
    loss = rl + settings.ce_weight * ce
    parts = {"rl": float(rl.detach()), "ce": float(ce.detach())}
    if settings.route_weight and targets is not None:
        target = targets[torch.tensor(rows)]
        known = target >= 0
        if known.any():
            _, spec_logits, _, _ = policy.logits(hidden, width, allowed)
            route = F.cross_entropy(spec_logits[known], target[known])
            loss = loss + settings.route_weight * route
            parts["route"] = float(route.detach())
    return loss, {"loss": float(loss.detach()), **parts}, stats

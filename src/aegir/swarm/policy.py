"""The Phase 4 spawning policy: per table, how many sub-agents, which specialist, deep or not.

Three decisions per table, each a token of the token-level clipped objective (`aegir.rl.ppo`):

    count       categorical over `spawn_options(max_subagents)` = 0, 1, 2, 4, … (powers of two
                up to the maximum, and the maximum): the scaling grid, so every option the
                policy can take is a point the scaling curve measures
    specialist  categorical over the sub-agent specialists (a token only when count > 0)
    deep        Bernoulli: run deep search (a token only when the table has a family column)
    consult     Bernoulli: ask every sub-agent specialist kind for a second opinion, its read of
                the whole table (a token only when the table's second opinions can be read)

Input: the Phase 3 orchestrator's pooled encoder output (`routing_hidden`, (B, D)), layer-
normalised, with two width features (log of the column count, log of the stream bytes per
column) and two doubt features (the orchestrator's mean 1 − top-1 probability over the table's
columns, CTA and CPA), through a small tanh layer. These are not in the design's "read from the
pooled hidden": a mean over bytes barely encodes how many columns share them, and that is what
decides whether a column's share is thin; and how sure the orchestrator ended up is known only
after its read, which is where a second opinion would pay.

Options that would change nothing are masked out: with C columns, g > C − 1 sub-agents give the
same C − 1 groups as the smallest option ≥ C − 1, so only that one stays; a cap (`max_count`,
the budget-limited phases or a point of the scaling curve) masks every option above it; a table
the orchestrator reads in one column group keeps only 0 (`aegir.swarm.views.policy_inputs`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from aegir.draws import multinomial, uniform_like


def spawn_options(max_subagents: int) -> tuple[int, ...]:
    """0, then powers of two below `max_subagents`, then `max_subagents` itself."""
    if max_subagents < 0:
        raise ValueError(f"max_subagents must be ≥ 0, got {max_subagents}")
    options = {0, max_subagents} | {2 ** k for k in range(max(1, max_subagents).bit_length()) if 2 ** k <= max_subagents}
    return tuple(sorted(options))


def allowed_options(options: tuple[int, ...], num_columns: torch.Tensor, max_count: int | None) -> torch.Tensor:
    """(B, G) bool: the options a table of `num_columns` (B,) may take under the cap."""
    option = torch.tensor(options)  # (G,)
    others = (num_columns - 1).clamp(min=0)[:, None]  # (B, 1)
    previous = torch.cat([torch.tensor([-1]), option[:-1]])
    # an option is distinct when the one below it still left columns without a sub-agent of their own
    allowed = (option == 0)[None] | (previous[None] < others)
    if max_count is not None:
        allowed &= option[None] <= max_count
    return allowed


@dataclass
class PolicyDecision:
    """Per table (B,): count option index, specialist index, deep flag; their log-probs under the
    policy (B,) each; and which of the three are tokens (B,) bool each."""

    count: torch.Tensor
    specialist: torch.Tensor
    deep: torch.Tensor
    logp_count: torch.Tensor
    logp_specialist: torch.Tensor
    logp_deep: torch.Tensor
    token_count: torch.Tensor
    token_specialist: torch.Tensor
    token_deep: torch.Tensor
    slot_prob: torch.Tensor  # (B, max_subagents): P(sub-agent slot i is used) under the policy
    consult: torch.Tensor  # (B,) bool: ask for second opinions
    logp_consult: torch.Tensor
    token_consult: torch.Tensor

    def tokens(self) -> tuple[torch.Tensor, torch.Tensor]:
        """((B, 4) log-probs, (B, 4) bool token masks) of the four decisions, in the order
        count, specialist, deep, consult."""
        return (torch.stack([self.logp_count, self.logp_specialist, self.logp_deep, self.logp_consult], -1),
                torch.stack([self.token_count, self.token_specialist, self.token_deep, self.token_consult], -1))


class SpawnPolicy(nn.Module):
    """features (B, D + 4) → count logits (B, G), specialist logits (B, S), deep logit (B,),
    consult logit (B,)."""

    def __init__(self, d_model: int, options: tuple[int, ...], num_specialists: int, hidden: int = 32):
        super().__init__()
        self.options = tuple(options)
        self.num_specialists = num_specialists
        self.norm = nn.LayerNorm(d_model)
        self.body = nn.Linear(d_model + 4, hidden)
        self.count_head = nn.Linear(hidden, len(options))
        self.specialist_head = nn.Linear(hidden, num_specialists)
        self.deep_head = nn.Linear(hidden, 1)
        self.consult_head = nn.Linear(hidden, 1)
        for head in (self.count_head, self.specialist_head, self.deep_head, self.consult_head):
            nn.init.normal_(head.weight, std=0.02)
            nn.init.zeros_(head.bias)

    @staticmethod
    def width_features(num_columns: torch.Tensor, stream_bytes: torch.Tensor,
                       doubt: torch.Tensor | None = None) -> torch.Tensor:
        """(B, 4): log C and log(bytes per column) of each table's shared stream, and `doubt`
        (B, 2), the orchestrator's mean CTA and CPA 1 − top-1 probability (None: zeros)."""
        c = num_columns.float().clamp(min=1)
        width = torch.stack([c.log(), (stream_bytes.float().clamp(min=1) / c).log()], -1)
        return torch.cat([width, torch.zeros_like(width) if doubt is None else doubt.to(width)], -1)

    def logits(self, hidden: torch.Tensor, width: torch.Tensor, allowed: torch.Tensor):
        h = torch.tanh(self.body(torch.cat([self.norm(hidden), width], -1)))  # (B, hidden)
        count = self.count_head(h).masked_fill(~allowed, -math.inf)  # (B, G)
        return count, self.specialist_head(h), self.deep_head(h)[:, 0], self.consult_head(h)[:, 0]

    def decide(self, hidden: torch.Tensor, width: torch.Tensor, allowed: torch.Tensor, has_deep: torch.Tensor,
               has_consult: torch.Tensor | None = None, sample: bool = False,
               generator: torch.Generator | None = None, count: torch.Tensor | None = None,
               specialist: torch.Tensor | None = None, deep: torch.Tensor | None = None,
               consult: torch.Tensor | None = None) -> PolicyDecision:
        """Sampled (training), argmax / p > ½ (evaluation), or given actions re-scored (count,
        specialist, deep, consult all given: the PPO ratio of a rollout's tokens).
        has_consult None: no table can consult."""
        count_logits, spec_logits, deep_logit, consult_logit = self.logits(hidden, width, allowed)
        count_logp_all = F.log_softmax(count_logits, -1)
        spec_logp_all = F.log_softmax(spec_logits, -1)
        if has_consult is None:
            has_consult = torch.zeros(len(hidden), dtype=torch.bool, device=hidden.device)
        if count is None:
            if sample:
                count = multinomial(count_logp_all.detach().exp(), generator)
                specialist = multinomial(spec_logp_all.detach().exp(), generator)
                deep = uniform_like(deep_logit.detach(), generator) < torch.sigmoid(deep_logit.detach())
                consult = uniform_like(consult_logit.detach(), generator) < torch.sigmoid(consult_logit.detach())
            else:
                count = count_logits.argmax(-1)
                specialist = spec_logits.argmax(-1)
                deep = deep_logit > 0
                consult = consult_logit > 0
        deep = deep.bool() & has_deep
        consult = consult.bool() & has_consult
        options = torch.tensor(self.options, device=count.device)  # (G,)
        option = options[count]
        logp_deep = -F.binary_cross_entropy_with_logits(deep_logit, deep.float(), reduction="none")
        logp_consult = -F.binary_cross_entropy_with_logits(consult_logit, consult.float(), reduction="none")
        # P(slot i used) = P(option > i): what r_parallel's share term compares with the choice
        probs = count_logp_all.exp()  # (B, G)
        slots = max(self.options)
        used = (options[None, :, None] > torch.arange(slots, device=probs.device)[None, None]).float()  # (1, G, slots)
        slot_prob = (probs[..., None] * used).sum(1)  # (B, slots)
        return PolicyDecision(
            count=count, specialist=specialist, deep=deep,
            logp_count=count_logp_all.gather(-1, count[:, None])[:, 0],
            logp_specialist=spec_logp_all.gather(-1, specialist[:, None])[:, 0],
            logp_deep=logp_deep,
            token_count=allowed.sum(-1) > 1,  # a table with one allowed option made no choice
            token_specialist=option > 0,
            token_deep=has_deep,
            slot_prob=slot_prob,
            consult=consult, logp_consult=logp_consult, token_consult=has_consult,
        )

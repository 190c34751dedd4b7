"""The PARL router: which frozen specialists to run for each table (docs/design.md, "Phase 3").

Independent sigmoid gates, not a softmax: zero, one or many specialists can be active. In
training each gate is a Bernoulli policy whose per-decision log-probs feed the token-level
clipped loss (each routing decision is a token); in evaluation a gate opens when its score
exceeds a threshold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from aegir.draws import uniform_like


@dataclass
class RouterDecision:
    """One routing of a batch.

    scores:          (B, S) float in (0, 1), the gate probabilities
    activation_mask: (B, S) bool, which specialists run for each table
    log_prob:        (B, S) float, log π(decision) per specialist: log s if on, log(1 − s) if
                     off; `log_prob.sum(-1)` is the log-prob of the table's whole routing
    token_mask:      (B, S) bool, the decisions the policy made (its RL tokens): all of them,
                     except the ones a budget cap forced off (`cap_decision`)
    """

    scores: torch.Tensor
    activation_mask: torch.Tensor
    log_prob: torch.Tensor
    token_mask: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.token_mask is None:
            self.token_mask = torch.ones_like(self.activation_mask)


def cap_decision(decision: RouterDecision, cap: int | None) -> RouterDecision:
    """Budget-limited routing: at most `cap` distinct specialists run for the whole batch.

    The `cap` specialists with the highest mean gate score over the batch keep their sampled
    decisions; every other specialist is forced off for every table, and those forced
    decisions are not the policy's (token_mask False), so the clipped loss leaves them out.
    `cap=None` (or cap ≥ S) changes nothing. Ties go to the lower specialist index.
    """
    S = decision.scores.shape[1]
    if cap is None or cap >= S:
        return decision
    if cap < 0:
        raise ValueError(f"cap must be ≥ 0, got {cap}")
    mean = decision.scores.detach().float().mean(0)  # (S,)
    order = sorted(range(S), key=lambda s: (-float(mean[s]), s))
    allowed = torch.zeros(S, dtype=torch.bool, device=mean.device)
    allowed[order[:cap]] = True
    return RouterDecision(scores=decision.scores,
                          activation_mask=decision.activation_mask & allowed,
                          log_prob=decision.log_prob,
                          token_mask=decision.token_mask & allowed)


class SpecialistRouter(nn.Module):
    """scores = sigmoid(W h + b): (B, d_model) → (B, num_specialists).

    `init_rate` sets the bias to logit(init_rate) so that every gate starts open with about
    that probability (W starts small, N(0, 0.02), as in nanoGPT); None leaves b = 0 (rate ½).
    """

    def __init__(self, d_model: int, num_specialists: int, init_rate: float | None = None):
        super().__init__()
        if d_model < 1 or num_specialists < 1:
            raise ValueError(f"need d_model ≥ 1 and num_specialists ≥ 1, got {d_model}, {num_specialists}")
        self.d_model = d_model
        self.num_specialists = num_specialists
        self.proj = nn.Linear(d_model, num_specialists)
        nn.init.normal_(self.proj.weight, mean=0.0, std=0.02)
        if init_rate is None:
            nn.init.zeros_(self.proj.bias)
        else:
            if not 0.0 < init_rate < 1.0:
                raise ValueError(f"init_rate must be in (0, 1), got {init_rate}")
            nn.init.constant_(self.proj.bias, math.log(init_rate / (1.0 - init_rate)))

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """h: (B, d_model) → gate logits (B, S)."""
        return self.proj(h)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """h: (B, d_model) → scores (B, S) in (0, 1)."""
        return torch.sigmoid(self.logits(h))

    @staticmethod
    def _log_prob(logits: torch.Tensor, activation_mask: torch.Tensor) -> torch.Tensor:
        # log σ(z) for on, log(1 − σ(z)) = log σ(−z) for off, without forming σ then log
        return -F.binary_cross_entropy_with_logits(logits, activation_mask.to(logits.dtype), reduction="none")

    def sample(self, h: torch.Tensor, generator: torch.Generator | None = None) -> RouterDecision:
        """Training: activation ~ Bernoulli(scores), independently per (table, specialist)."""
        logits = self.logits(h)  # (B, S)
        scores = torch.sigmoid(logits)
        # drawn where the generator lives (the same draws on any device), used where the scores are
        activation_mask = uniform_like(scores.detach(), generator) < scores.detach()  # (B, S) bool
        return RouterDecision(scores=scores, activation_mask=activation_mask,
                              log_prob=self._log_prob(logits, activation_mask))

    def decide(self, h: torch.Tensor, threshold: float = 0.5) -> RouterDecision:
        """Evaluation: a specialist runs when its score exceeds `threshold`."""
        logits = self.logits(h)
        scores = torch.sigmoid(logits)
        activation_mask = scores > threshold
        return RouterDecision(scores=scores, activation_mask=activation_mask,
                              log_prob=self._log_prob(logits, activation_mask))

    def log_prob(self, h: torch.Tensor, activation_mask: torch.Tensor) -> torch.Tensor:
        """log π(activation_mask | h) under the current parameters → (B, S), per decision.

        Re-evaluates decisions sampled earlier (possibly under older parameters): the PPO
        ratio of each routing token is exp(new − old).
        """
        logits = self.logits(h)
        if activation_mask.shape != logits.shape:
            raise ValueError(f"activation_mask {tuple(activation_mask.shape)} must be {tuple(logits.shape)}")
        return self._log_prob(logits, activation_mask)


def routing_targets(domains: list[str | None], specialist_domains: list[tuple[str, ...]],
                    device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """What each table's routing should be, from the training tables' domains: (B, S) float, 1
    where the table's domain is one of specialist s's domains; and (S,) bool, the specialists
    that have domains (a generalist, such as the frozen copy of the primary, gets no target)."""
    target = torch.tensor([[float(d in own) for own in specialist_domains] for d in domains], device=device)
    known = torch.tensor([bool(own) for own in specialist_domains], device=device)
    return target.reshape(len(domains), len(specialist_domains)), known

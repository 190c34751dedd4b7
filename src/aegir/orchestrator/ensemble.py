"""Output-level ensembles of the primary and routed specialists: Phase 2's routing-dependent
stand-in for r_perf, and Phase 3's reference point (d) beside the state fusion.

A table's routed annotation takes, per column, the argmax of the mean softmax of the primary
and the specialists its routing activated (none activated: the primary alone).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from aegir.model.network import AegirOutput


def all_routings(num_specialists: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """(2^S, S) bool: routing j activates specialist s when bit s of j is set."""
    j = torch.arange(2**num_specialists, device=device)
    return ((j[:, None] >> torch.arange(num_specialists, device=device)[None, :]) & 1).bool()


def routing_index(activation_mask: torch.Tensor) -> torch.Tensor:
    """(B, S) bool → (B,) long: the j of `all_routings` that each row is."""
    S = activation_mask.shape[1]
    return (activation_mask.long() << torch.arange(S, device=activation_mask.device)).sum(-1)


def routed_argmax(probs: torch.Tensor) -> torch.Tensor:
    """probs (A, B, C, K) of the primary (a = 0) and S specialists → (2^S, B, C) long.

    Routing j's annotation of a column is the argmax of the mean softmax of the primary and
    the specialists j activates (the mean's denominator does not move the argmax: a sum).
    """
    routings = all_routings(probs.shape[0] - 1, probs.device)
    weights = torch.cat([torch.ones(len(routings), 1, device=probs.device), routings.float()], dim=1)  # (2^S, A)
    return torch.stack([torch.einsum("a,abck->bck", w, probs).argmax(-1) for w in weights])


def ensemble_probs(primary: torch.Tensor, specialists: list[torch.Tensor | None],
                   activation_mask: torch.Tensor) -> torch.Tensor:
    """The mean of the primary's label distribution and each row's activated specialists':
    primary and each of `specialists` (B, C, K), activation_mask (B, S) bool. A specialist given
    as None must be activated on no row; it is left out, which is what its zero weight on every
    row would give, to the bit (x + 0·p = x for the non-negative sums of probabilities here)."""
    total = primary
    count = torch.ones(total.shape[0], 1, 1, device=total.device)
    for s, probs in enumerate(specialists):
        if probs is None:
            if bool(activation_mask[:, s].any()):
                raise ValueError(f"ensemble_probs: specialist {s} is activated on some row but has no labels")
            continue
        on = activation_mask[:, s].to(total.dtype)[:, None, None]  # (B, 1, 1)
        total = total + on * probs
        count = count + on
    return total / count


def ensemble_output(primary: AegirOutput, specialists: list[tuple[torch.Tensor, torch.Tensor] | None],
                    activation_mask: torch.Tensor) -> AegirOutput:
    """The primary's output with its logits replaced by the log of the mean softmax of the
    primary and each row's activated specialists: `specialists` their (CTA, CPA) logits each
    (`SwarmOrchestrator.specialist_logits`), None for one no row activated;
    activation_mask (B, S) bool."""
    def mean_log_prob(task: int, logits: torch.Tensor) -> torch.Tensor:
        return ensemble_probs(logits.float().softmax(-1),
                              [None if own is None else own[task].float().softmax(-1) for own in specialists],
                              activation_mask).log()

    return replace(primary, cta_logits=mean_log_prob(0, primary.cta_logits), cpa_logits=mean_log_prob(1, primary.cpa_logits))

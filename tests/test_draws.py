"""aegir.draws: draws made on the generator's device. On the CPU they are the draws torch's own
calls make (so CPU runs are unchanged); tests/test_cuda.py checks that a GPU run draws the same."""

from __future__ import annotations

from functools import partial

import torch

from aegir.draws import draw, multinomial, uniform_like
from aegir.rl.parl import sample_labels
from aegir.swarm.policy import SpawnPolicy


def test_cpu_draws_are_torchs_own():
    probs = torch.rand(6, 5, generator=torch.Generator().manual_seed(0))
    ours = multinomial(probs, torch.Generator().manual_seed(3))
    theirs = torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(3))[:, 0]
    assert torch.equal(ours, theirs) and ours.dtype == torch.long
    like = torch.zeros(4, 3, dtype=torch.float64)
    u = uniform_like(like, torch.Generator().manual_seed(5))
    assert torch.equal(u, torch.rand(4, 3, generator=torch.Generator().manual_seed(5), dtype=torch.float64))
    assert multinomial(probs).shape == (6,) and uniform_like(like).dtype == torch.float64  # no generator
    ints = draw(partial(torch.randint, 1, 9), torch.Size([3, 4]), torch.Generator().manual_seed(2), torch.device("cpu"))
    assert torch.equal(ints, torch.randint(1, 9, (3, 4), generator=torch.Generator().manual_seed(2)))


def spawn_decision(device: torch.device, seed: int = 0):
    """A sampled SpawnPolicy decision on `device`, drawn with a CPU generator."""
    torch.manual_seed(0)
    policy = SpawnPolicy(16, (0, 1, 2, 4), 3).to(device)
    B = 5
    hidden = torch.randn(B, 16, generator=torch.Generator().manual_seed(1)).to(device)
    width = SpawnPolicy.width_features(torch.tensor([1, 3, 6, 9, 12]), torch.tensor([90, 300, 500, 800, 999])).to(device)
    allowed = torch.ones(B, 4, dtype=torch.bool, device=device)
    has_deep = torch.ones(B, dtype=torch.bool, device=device)
    return policy.decide(hidden, width, allowed, has_deep, sample=True,
                         generator=torch.Generator().manual_seed(seed))


def label_samples(device: torch.device):
    logits = torch.randn(3, 4, 9, generator=torch.Generator().manual_seed(2)).to(device)
    return sample_labels(logits, torch.Generator().manual_seed(7))


def test_phase3_and_phase4_samples_on_the_cpu():
    action, logp, prob = label_samples(torch.device("cpu"))
    assert action.shape == (3, 4) and torch.allclose(prob, logp.exp())
    decision = spawn_decision(torch.device("cpu"))
    assert decision.count.shape == (5,) and decision.deep.dtype == torch.bool
    again = spawn_decision(torch.device("cpu"))
    assert torch.equal(decision.count, again.count) and torch.equal(decision.specialist, again.specialist)

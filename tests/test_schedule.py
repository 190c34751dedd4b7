"""The learning-rate schedule (aegir.train.schedule) against rates worked out by hand."""

from __future__ import annotations

import pytest

from aegir.train.schedule import learning_rate


def test_warmup_then_cosine_decay_to_the_floor():
    """peak 0.8, 4 warm-up steps, 12 steps in all, floor ratio 0.1 (floor 0.08).

    Warm-up, peak·(step + 1)/4: 0.2, 0.4, 0.6, 0.8 at steps 0–3 (the last warm-up step is at
    the peak, and step 0 already trains).
    Then progress p = (step − 4)/(12 − 4) and rate = 0.8·(0.1 + 0.9·½(1 + cos πp)):
        step 4:  p = 0     → ½(1 + 1) = 1              → 0.8·(0.1 + 0.9)       = 0.8
        step 6:  p = 0.25  → ½(1 + 0.7071068) = 0.8535534 → 0.8·(0.1 + 0.7681981) = 0.6945584
        step 8:  p = 0.5   → ½(1 + 0) = 0.5            → 0.8·(0.1 + 0.45)      = 0.44
        step 10: p = 0.75  → ½(1 − 0.7071068) = 0.1464466 → 0.8·(0.1 + 0.1318019) = 0.1854416
        step 12: p = 1     → 0                          → 0.8·0.1               = 0.08
    and past the end p stays 1: 0.08 at step 20.
    """
    by_hand = {0: 0.2, 1: 0.4, 2: 0.6, 3: 0.8, 4: 0.8, 6: 0.6945584, 8: 0.44, 10: 0.1854416, 12: 0.08, 20: 0.08}
    for step, rate in by_hand.items():
        assert learning_rate(step, 12, 0.8, 4, 0.1) == pytest.approx(rate, abs=1e-7), step


def test_decay_is_monotone_and_symmetric_about_its_midpoint():
    """Cosine, not linear: the decay from the peak to the floor is slow at both ends, fast in the
    middle, and the rate at p and at 1 − p sum to peak + floor (the cosine's odd symmetry).
    peak 1, no warm-up, 100 steps, floor 0.2: at p = 0.1, 1 − 0.8·½(1 − cos 0.1π) =
    1 − 0.8·½·0.0489435 = 0.9804226, where a linear decay would give 1 − 0.8·0.1 = 0.92."""
    rates = [learning_rate(step, 100, 1.0, 0, 0.2) for step in range(101)]
    assert rates[0] == 1.0 and rates[100] == pytest.approx(0.2)
    assert all(a > b for a, b in zip(rates, rates[1:]))
    assert rates[10] == pytest.approx(0.9804226, abs=1e-7)
    for step in range(101):
        assert rates[step] + rates[100 - step] == pytest.approx(1.2, abs=1e-12), step
    assert rates[1] - rates[2] < rates[49] - rates[50] > rates[98] - rates[99]


def test_edge_settings_by_hand():
    """No warm-up: step 0 at the peak. Floor ratio 0: the rate ends at 0. As many steps as
    warm-up steps: the decay runs over one step (max(1, 0)), so the first step after warm-up is
    at the peak and the next at the floor. Phase 3 passes peak 1 to get the scale it multiplies
    its rates by."""
    assert learning_rate(0, 10, 3e-4, 0, 0.1) == pytest.approx(3e-4)
    assert learning_rate(10, 10, 3e-4, 0, 0.0) == 0.0
    assert learning_rate(5, 10, 3e-4, 0, 0.0) == pytest.approx(1.5e-4)  # p = ½: ½ peak
    assert learning_rate(1, 2, 1.0, 2, 0.5) == 1.0  # warm-up, 2/2
    assert learning_rate(2, 2, 1.0, 2, 0.5) == pytest.approx(1.0)  # p = 0 (max(1, 0) steps of decay)
    assert learning_rate(3, 2, 1.0, 2, 0.5) == pytest.approx(0.5)  # p = 1: the floor
    assert learning_rate(0, 6, 1.0, 2, 0.1) == 0.5

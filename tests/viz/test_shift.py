"""A pattern's latency change told as the share of requests changed and by how much
(``viz.shift``), against mixtures drawn with a known share and change."""

from __future__ import annotations

import numpy as np
import pytest

from viz.shift import latency_shift


def _runs(seed: int, n: int, share: float, delta: float) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    base = rng.lognormal(np.log(0.013), 0.1, n)
    slow = rng.lognormal(np.log(0.013), 0.1, n)
    slow[rng.random(n) < share] += delta
    return base, slow


@pytest.mark.parametrize(
    ("share", "delta"),
    [(0.1, 0.040), (1.0, 0.002), (0.3, 0.010), (0.05, 0.200), (0.02, 0.040), (1.0, -0.003), (0.5, -0.004)],
)
def test_the_share_and_the_change_are_recovered(share: float, delta: float) -> None:
    base, slow = _runs(7, 20_000, share, delta)
    s = latency_shift(base, slow)
    assert s.significant
    assert s.share == pytest.approx(share, rel=0.15, abs=0.01)
    assert s.delta_s == pytest.approx(delta, rel=0.1)


def test_runs_alike_are_not_told_apart() -> None:
    """Under no change the tests say so about as often as their level allows."""
    told = sum(latency_shift(*_runs(seed, 2_000, 0.0, 0.0)).significant for seed in range(200))
    assert told <= 2


def test_a_few_requests_much_slower_are_seen_where_ranks_barely_move() -> None:
    """5% of 2,000 requests +200 ms: the rank test alone misses it (p > 0.001); the
    tail test does not."""
    from scipy.stats import mannwhitneyu

    base, slow = _runs(11, 2_000, 0.05, 0.200)
    assert mannwhitneyu(slow, base).pvalue > 1e-3
    s = latency_shift(base, slow)
    assert s.significant
    assert s.share == pytest.approx(0.05, abs=0.015)
    assert s.delta_s == pytest.approx(0.2, rel=0.05)


def test_quantiles_and_json() -> None:
    base, slow = _runs(3, 5_000, 0.1, 0.04)
    doc = latency_shift(base, slow).to_json()
    assert doc["quantiles"] == [0.5, 0.9, 0.99]
    assert doc["base_s"] == pytest.approx(np.quantile(base, [0.5, 0.9, 0.99]).tolist())
    assert doc["slow_s"] == pytest.approx(np.quantile(slow, [0.5, 0.9, 0.99]).tolist())
    assert (doc["n_base"], doc["n_slow"]) == (5_000, 5_000)

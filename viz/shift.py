"""How a pattern's latency changed between two runs, from every request's latency: the
share of requests that changed and by how much, and whether the change is real.

A mean hides the shape of a change: +40 ms in one request of ten reads as +4 ms in all.
Given both runs' latencies (from their instances tables), :func:`latency_shift` reads
the change at each rank, ``d(u) = Q_slow(u) - Q_base(u)`` (the shift function), and fits
it with a step: the requests that moved are the ranks on one side of it; which requests
they were is chance, so their change is their mean against the base run's. A change of
every request is a flat ``d`` (share 1); a slower tail, a step near the top. The other
requests may move a little on their own (a machine slightly faster in the second run)
without hiding the tail.

Whether the runs differ at all is decided by two tests, Bonferroni-corrected: the
Mann-Whitney U test (rank-based: latencies are skewed and heavy-tailed, so a t-test on
means would be swayed by a few outliers, and it needs no assumption on the change's
shape), and, because a rank test barely sees a few requests made much slower (5% of them
+200 ms moves the ranks by 2.5%), Fisher's exact test of the share of requests above the
base run's p99. The fit only describes the change; the tests decide it is one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["LatencyShift", "latency_shift"]

#: A change is told apart from noise below this p-value.
SIGNIFICANT_P = 1e-3
_QUANTILES = (0.5, 0.9, 0.99)
_RANKS = 200  # ranks the shift function is read at
_STEP_LEFT = 0.25  # a step leaving more of one level's misfit: every request moved


@dataclass(frozen=True)
class LatencyShift:
    """A pattern's latency in two runs (seconds): the fitted share of requests changed
    (``share``) and their change (``delta_s``), the p-value of the runs being alike
    (Mann-Whitney and the tail test, Bonferroni-corrected), and the p50, p90 and p99 of
    each run."""

    share: float
    delta_s: float
    p_value: float
    n_base: int
    n_slow: int
    base_quantiles_s: tuple[float, ...]
    slow_quantiles_s: tuple[float, ...]

    @property
    def significant(self) -> bool:
        """Whether the runs differ beyond noise (``p_value`` < ``SIGNIFICANT_P``)."""
        return self.p_value < SIGNIFICANT_P

    def to_json(self) -> dict[str, object]:
        return {
            "share": self.share,
            "delta_s": self.delta_s,
            "p_value": self.p_value,
            "test": "mann-whitney-u and share above the base p99, bonferroni",
            "significant": self.significant,
            "n_base": self.n_base,
            "n_slow": self.n_slow,
            "quantiles": list(_QUANTILES),
            "base_s": list(self.base_quantiles_s),
            "slow_s": list(self.slow_quantiles_s),
        }


def latency_shift(base_s: np.ndarray, slow_s: np.ndarray) -> LatencyShift:
    """The change from ``base_s`` to ``slow_s`` (latencies in seconds; see the module
    docstring).

    Examples
    --------
    >>> rng = np.random.default_rng(1)
    >>> base = rng.normal(0.013, 0.001, 5000)
    >>> slow = rng.normal(0.013, 0.001, 5000)
    >>> slow[:500] += 0.040  # one request in ten, 40 ms slower
    >>> s = latency_shift(base, slow)
    >>> round(s.share, 2), round(s.delta_s, 3), s.significant
    (0.1, 0.04, True)
    """
    base = np.sort(np.asarray(base_s, np.float64))
    slow = np.sort(np.asarray(slow_s, np.float64))
    if base.size == 0 or slow.size == 0:
        raise ValueError("both runs need at least one latency")
    quantiles = (
        tuple(float(q) for q in np.quantile(base, _QUANTILES)),
        tuple(float(q) for q in np.quantile(slow, _QUANTILES)),
    )
    p_value = _p_value(base, slow)
    share, delta = _fit(base, slow)
    return LatencyShift(share, delta, p_value, int(base.size), int(slow.size), *quantiles)


def _p_value(base: np.ndarray, slow: np.ndarray) -> float:
    """The smaller p-value of the rank test and the tail test, times two (Bonferroni)."""
    if base.size < 2 or slow.size < 2 or (base[0] == base[-1] == slow[0] == slow[-1]):
        return 1.0
    from scipy.stats import fisher_exact, mannwhitneyu

    ranks = float(mannwhitneyu(slow, base, alternative="two-sided", method="asymptotic").pvalue)
    cut = np.quantile(base, 0.99)
    above_b = int(base.size - np.searchsorted(base, cut, "right"))
    above_s = int(slow.size - np.searchsorted(slow, cut, "right"))
    table = [[above_s, slow.size - above_s], [above_b, base.size - above_b]]
    tail = float(fisher_exact(table).pvalue)  # exact: the counts above a p99 are small
    return min(1.0, 2.0 * min(ranks, tail))


def _fit(base: np.ndarray, slow: np.ndarray) -> tuple[float, float]:
    """The share of requests that changed and their change, from the shift function
    ``d(u) = Q_slow(u) - Q_base(u)`` (the change at each rank, ``_RANKS`` ranks): the
    step that fits it best, one level below a rank and another above, isolates the
    requests that moved from the rest (which may have moved a little on their own, as a
    machine does). When no step fits much better than one level for all (a quarter of
    the misfit or more left), every request moved, by the mean of ``d``."""
    m = min(_RANKS, base.size, slow.size)
    u = (np.arange(m) + 0.5) / m
    q_slow = np.quantile(slow, u)
    d = q_slow - np.quantile(base, u)
    if m < 4:
        return 1.0, float(d.mean())
    one_level = float(np.sum((d - d.mean()) ** 2))
    # Every split k (ranks [0, k) and [k, m)): the summed squared misfit of two levels.
    k = np.arange(1, m)
    csum, csq = np.cumsum(d), np.cumsum(d * d)
    left = csq[k - 1] - csum[k - 1] ** 2 / k
    right = (csq[-1] - csq[k - 1]) - (csum[-1] - csum[k - 1]) ** 2 / (m - k)
    two_levels = left + right
    best = int(np.argmin(two_levels))
    if one_level <= 0 or two_levels[best] > _STEP_LEFT * one_level:
        return 1.0, float(d.mean())
    split = int(k[best])
    low, high = float(d[:split].mean()), float(d[split:].mean())
    # The requests that moved are the side that moved the way the mean did, the most;
    # which requests they were is chance, so their change is against the base's mean.
    moved_by = float(slow.mean() - base.mean())
    if (high - low) * moved_by >= 0:
        return (m - split) / m, float(q_slow[split:].mean() - base.mean())
    return split / m, float(q_slow[:split].mean() - base.mean())

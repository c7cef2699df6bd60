"""How a pattern's latency changed between two runs, from every request's latency: the
share of requests that changed and by how much, and whether the change is real.

A mean hides the shape of a change: +40 ms in one request of ten reads as +4 ms in all.
Given both runs' latencies (from their instances tables), :func:`latency_shift` fits the
slow run as the base run with a share ``p`` of its requests moved by ``delta``::

    F_slow(x) = (1 - p) F_base(x) + p F_base(x - delta)

over a grid of ``delta`` (for each, ``p`` in closed form by least squares on the two
empirical distribution functions, weighted as Anderson-Darling weighs them so a tail
counts), keeping the best fit. A change of every request is ``p = 1``; a slower tail, a
small ``p`` with a large ``delta``.

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
_GRID = 512  # points the distribution functions are compared at
_SHIFTS = 400  # candidate shifts, half slower, half faster
_QUANTILES = (0.5, 0.9, 0.99)


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
    """The share ``p`` and shift ``delta`` whose mixture of ``base`` is closest to
    ``slow`` (least squares on the distribution functions at ``_GRID`` points)."""
    both = np.concatenate([base, slow])
    x = np.quantile(both, np.linspace(0.0, 1.0, _GRID))
    f_base = np.searchsorted(base, x, side="right") / base.size
    gap = np.searchsorted(slow, x, side="right") / slow.size - f_base
    # Weighted by the inverse variance of an empirical distribution function's value
    # (as Anderson-Darling weighs it): a tail moved by a few requests counts as much as
    # the body's noise, where unweighted the body's noise would hide it.
    f = np.linspace(0.0, 1.0, _GRID)
    weight = 1.0 / (f * (1.0 - f) + 1.0 / both.size)
    span = float(both[-1] - both[0])
    if span <= 0:
        return 0.0, 0.0
    steps = np.geomspace(span * 1e-4, span, _SHIFTS // 2)
    deltas = np.concatenate([-steps[::-1], steps])
    _, resid = _mixtures(base, x, f_base, gap, deltas, weight)
    k = int(np.argmin(resid))
    # Then finer between the neighbours of the best (the grid's steps are ~5% apart).
    fine = np.linspace(deltas[max(k - 1, 0)], deltas[min(k + 1, deltas.size - 1)], 64)
    share_f, resid_f = _mixtures(base, x, f_base, gap, fine, weight)
    j = int(np.argmin(resid_f))
    if share_f[j] == 0.0:
        return 0.0, 0.0
    return float(share_f[j]), float(fine[j])


def _mixtures(
    base: np.ndarray,
    x: np.ndarray,
    f_base: np.ndarray,
    gap: np.ndarray,
    deltas: np.ndarray,
    weight: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """For each shift, the best share and the weighted squared misfit of its mixture."""
    # F_base(x - delta) - F_base(x), every shift at every point: (shifts, grid).
    moved = np.searchsorted(base, x[None, :] - deltas[:, None], side="right") / base.size - f_base
    norm = np.einsum("ij,ij,j->i", moved, moved, weight)
    dot = moved @ (weight * gap)
    share = np.clip(np.divide(dot, norm, out=np.zeros_like(norm), where=norm > 0), 0.0, 1.0)
    return share, np.sum(weight * (gap[None, :] - share[:, None] * moved) ** 2, axis=1)

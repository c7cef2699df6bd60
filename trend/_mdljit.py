"""The MDL dynamic program of ``trend.mdl``, compiled, for many series in one call and
resumable one run at a time.

Why compiled: a lab's store holds thousands of series of a hundred runs, and the numpy
program of :func:`trend.mdl.classify_mdl` spends most of its time per run on Python
overhead (a dozen small vector operations and a few scalar re-evaluations), about 7 ms
a series. Here every open group's bits are computed exactly, with the scalar formulas of
``jumpavg`` in their operation order (``math.log`` is the C library's, as in CPython;
``lgamma`` comes from a table CPython's ``math.lgamma`` filled, since numba's is not
CPython's), so no approximation and no re-evaluation are needed: the winner, the bits
and the statistics are ``jumpavg``'s to the last bit, and the tests compare them with
:func:`trend.mdl.classify_mdl` on random series.

The state of a series between runs (its open groups and the winners so far) lives in
:class:`trend.mdl.MdlState`; :func:`advance` adds runs to many states at once.
"""

from __future__ import annotations

import math

import numpy as np
from numba import prange

from tracefmt.compiled import compiled

__all__ = ["advance", "size_terms"]

_LN2 = math.log(2.0)
_LNPI = math.log(math.pi)


@compiled()
def size_terms(lgam: np.ndarray) -> np.ndarray:
    """Per sample count n (rows; n < 2 unused but the first) the terms of a group's bits
    that depend on n alone, each computed as :func:`_bits` would: ``log2(n (n + 1))``,
    the sphere's part before its deviation term, and its last term."""
    out = np.zeros((lgam.size, 3))
    for n in range(1, lgam.size):
        nf = np.float64(n)
        out[n, 0] = math.log(np.float64(n * (n + 1))) / _LN2
        sphere = _LN2
        sphere += _LNPI * ((nf - 1) / 2)
        sphere -= lgam[n]
        out[n, 1] = sphere
        out[n, 2] = math.log(nf) * ((nf - 2) / 2)
    return out


@compiled()
def _bits(
    n: np.int64,
    avg: float,
    stdev: float,
    max_v: float,
    unit: float,
    prev: float,
    first: bool,
    terms: np.ndarray,
    cut: float,
) -> float:
    """``trend.mdl.group_bits``, operation for operation (``prev`` in units, unused when
    ``first``), with the terms of n alone read from ``terms`` (:func:`size_terms`) and
    ``cut``, the deviation's cut-off of the series (``log2(1 - 1 / (max_v + 2))``)."""
    nf = np.float64(n)
    avg = 0.0 + avg * nf / nf  # renormalized: one more pass of for_runs
    stdev = math.sqrt((0.0 + stdev * stdev * nf) / nf)
    bits = 0.0
    avg = avg / unit
    bits += terms[n, 0]
    if first:
        bits += math.log(max_v + 1) / _LN2
    else:
        norm = prev * prev
        norm -= (prev - 1) * max_v
        norm += max_v * max_v / 2
        bits -= math.log((abs(avg - prev) + 1) / norm) / _LN2
    if n < 2:
        return bits
    stdev = stdev / unit
    bits += math.log((stdev + 1) * (stdev + 2)) / _LN2
    bits += cut
    sphere = terms[n, 1]
    sphere += math.log(stdev + 1) * (nf - 2)
    sphere += terms[n, 2]
    return bits + sphere / _LN2


@compiled(parallel=True)
def advance(
    origin: np.ndarray,
    run_lo: np.ndarray,
    run_hi: np.ndarray,
    sizes: np.ndarray,
    avg: np.ndarray,
    sd: np.ndarray,
    cum: np.ndarray,
    max_values: np.ndarray,
    units: np.ndarray,
    prune: np.ndarray,
    terms: np.ndarray,
    lo: np.ndarray,
    n: np.ndarray,
    a: np.ndarray,
    s: np.ndarray,
    prev: np.ndarray,
    best: np.ndarray,
    start: np.ndarray,
    win_bits: np.ndarray,
    win_n: np.ndarray,
    win_a: np.ndarray,
    win_s: np.ndarray,
) -> None:
    """Runs ``run_lo[k] .. run_hi[k] - 1`` of series ``k`` added to its program, in place;
    the series on every core.

    Arrays over runs are flat over all series (a series' runs contiguous, from
    ``origin[k]``); ``best`` (the best bits of the runs before a run) and ``cum`` (the
    samples before it) have one more slot per series, after its last run, so that run
    ``i`` of series ``k`` is slot ``i + k``. ``lo[k]`` is the series' oldest open start.
    ``prev`` is the average (in units) a start codes its own against; ``start`` and
    ``win_*`` are the winner at each run: its start within the series, its bits and its
    statistics. The group at ``origin[k]`` codes its average against none.
    """
    for k in prange(origin.size):
        if run_hi[k] <= run_lo[k]:
            continue
        max_value, unit, bound = max_values[k], units[k], prune[k]
        max_v = max_value / unit
        cut = math.log(1 - 1 / (max_v + 2)) / _LN2
        o = origin[k]
        g = np.empty(run_hi[k] - o)
        for i in range(run_lo[k], run_hi[k]):
            bi = i + k
            m, xa, xs = sizes[i], avg[i], sd[i]
            if i > o:
                # Open start i: it codes its average against the group that ends the record
                # before it, copied (one more pass of for_runs).
                prev[i] = (0.0 + win_a[i - 1] * win_n[i - 1] / win_n[i - 1]) / unit
            # for_runs([stats, run]) for every open group, in jumpavg's operation order.
            for j in range(lo[k], i):
                old = n[j]
                u0 = a[j] * old
                u0 = u0 / old
                u1 = s[j] * s[j]
                u1 = u1 * old
                if xs != 0.0:
                    u1 = u1 + xs * xs * m
                u2 = xa - u0
                aa = u2 * u2
                aa = aa * old
                new = old + m
                aa = aa * m
                u2 = u2 * m
                aa = aa / new
                u1 = u1 + aa
                u1 = u1 / new
                s[j] = math.sqrt(u1)
                u2 = u2 / new
                a[j] = u0 + u2
                n[j] = new
            n[i] = m
            if m == 1.0 and xs == 0.0:
                a[i], s[i] = xa, xs
            else:
                a[i] = 0.0 + xa * m / m
                s[i] = math.sqrt((0.0 + xs * xs * m) / m)
            # The winner: the new group first, then the earliest start; only strictly less wins.
            through = cum[bi + 1]
            win = i
            wg = _bits(np.int64(m), a[i], s[i], max_v, unit, prev[i], i == o, terms, cut)
            wt = best[bi] + wg
            base = lo[k]
            for j in range(base, i):
                gj = _bits(
                    np.int64(through - cum[j + k]), a[j], s[j], max_v, unit, prev[j], j == o, terms, cut
                )
                g[j - base] = best[j + k] + gj
                if g[j - base] < wt:
                    win, wg, wt = j, gj, g[j - base]
            start[i] = win - o
            win_bits[i] = wg
            win_n[i] = np.float64(through - cum[win + k])
            win_a[i] = a[win]
            win_s[i] = s[win]
            best[bi + 1] = wt
            if i == o:
                # jumpavg computes the first record's bits only when it copies it, after one
                # more pass of for_runs (no change for a bare value).
                a0 = 0.0 + a[i] * m / m
                s0 = math.sqrt((0.0 + s[i] * s[i] * m) / m)
                best[bi + 1] = _bits(np.int64(m), a0, s0, max_v, unit, 0.0, True, terms, cut)
            elif i > base and g[0] > best[bi + 1] + bound:
                # Starts that cost more than the best by the proven bound never win again:
                # drop the longest such prefix.
                keep = i
                for j in range(base, i):
                    if g[j - base] <= best[bi + 1] + bound:
                        keep = j
                        break
                lo[k] = keep

"""Signals and spikes for the convolution algorithm: per-edge signals, FFT cross-correlation,
spike detection.

A signal is one value per quantum ``mu`` of the trace: the square root of the number of
messages on the edge in that quantum (the paper's way: ``x`` messages in the same slot
of both signals then add ``x``, not ``x**2``). Raw counts are kept beside it: their
cross-correlation rises above its background by exactly the number of message pairs at
that lag, so it estimates message counts even when slots hold several messages, which
the square-rooted peak height does not.
"""

from __future__ import annotations

import copy
import functools
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import scipy.fft as sfft

from infer.candidates import concat_ranges
from tracefmt import ParameterError

__all__ = ["Correlator", "Spike", "find_spikes", "local_background", "moving_mean"]

#: The most lags one correlation computes (negative and positive): a million quanta is
#: 8 MB per correlation, past any delay resolution the spike statistics can use; more
#: comes only from a quantum far below the delays (1 ns against seconds) and would take
#: memory without bound.
MAX_LAGS = 1_000_000

_CACHE_BYTES = 256 << 20  # spectra kept per correlator (recomputed beyond this)


@dataclass(frozen=True)
class Spike:
    """One spike of a cross-correlation.

    Attributes
    ----------
    lag : int
        Lag of the peak, in quanta.
    lo, hi : int
        The lags the spike spans (inclusive): the run around the peak above one standard
        deviation, cut at the dips that separate it from its neighbours.
    z : float
        Height of the peak in standard deviations above the mean.
    """

    lag: int
    lo: int
    hi: int
    z: float


def moving_mean(x: np.ndarray, half: int) -> np.ndarray:
    """Mean over ``[i - half, i + half]`` (clipped at the ends), via one cumulative sum.

    Examples
    --------
    >>> moving_mean(np.array([0.0, 3, 0, 0]), 1).tolist()
    [1.5, 1.0, 1.0, 0.0]
    """
    x = np.asarray(x, np.float64)
    if half <= 0:
        return x
    c = np.concatenate([[0.0], np.cumsum(x)])
    i = np.arange(x.size)
    lo, hi = np.maximum(i - half, 0), np.minimum(i + half + 1, x.size)
    return (c[hi] - c[lo]) / (hi - lo)


def local_background(x: np.ndarray, half_window: int, half_core: int) -> np.ndarray:
    """Mean of ``x`` over ``[i - half_window, i + half_window]`` without the core
    ``[i - half_core, i + half_core]`` (clipped at the ends).

    Leaving the core out keeps a spike from raising its own background; the wide ring
    follows slow swings of the correlation (load that comes and goes) that a single global
    mean cannot.

    Examples
    --------
    >>> local_background(np.array([1.0, 1, 1, 9, 1, 1, 1]), 3, 0).tolist()[3]
    1.0
    """
    x = np.asarray(x, np.float64)
    c = np.concatenate([[0.0], np.cumsum(x)])
    i = np.arange(x.size)

    def window(half: int) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = np.maximum(i - half, 0), np.minimum(i + half + 1, x.size)
        return c[hi] - c[lo], (hi - lo).astype(np.float64)

    s_w, n_w = window(half_window)
    s_c, n_c = window(half_core)
    n = n_w - n_c
    return np.where(n > 0, (s_w - s_c) / np.maximum(n, 1), x)


def find_spikes(
    z: np.ndarray,
    *,
    n_sigma: float = 4.0,
    sep_sigma: float = 3.0,
    floor_sigma: float = 1.0,
    locate: np.ndarray | None = None,
) -> list[Spike]:
    """Spikes of a standardized series ``z`` (values in standard deviations above the mean).

    A spike is the highest point of a run of values above ``sep_sigma`` whose height is at
    least ``n_sigma``, so two spikes are always separated by a point no higher than
    ``sep_sigma`` (the paper's rule, N = 4, S = 3). Each spike's extent is the run above
    ``floor_sigma`` around it, cut halfway into any dip shared with a neighbour.

    Parameters
    ----------
    z : ndarray
        Standardized correlation, one value per lag (index = lag).
    n_sigma, sep_sigma, floor_sigma : float
        Peak threshold, separating-dip threshold, extent threshold.
    locate : ndarray, optional
        Where, inside each run, the peak is: the highest point of ``locate`` (e.g. the
        unsmoothed correlation when ``z`` is smoothed over a band, whose top is flat).

    Returns
    -------
    list of Spike
        In lag order.

    Examples
    --------
    >>> z = np.array([0, 1, 5, 3.5, 6, 0, 0, 4.5, 0, 5, 2, 4, 0.0])
    >>> [(s.lag, s.lo, s.hi) for s in find_spikes(z)]
    [(4, 2, 4), (7, 7, 7), (9, 9, 9), (11, 10, 11)]
    """
    z = np.asarray(z, np.float64)
    if z.size == 0:
        return []
    starts, ends = _runs_above(z, sep_sigma)
    if starts.size == 0:
        return []
    top = np.array([s + int(np.argmax(z[s:e])) for s, e in zip(starts, ends, strict=True)])
    keep = z[top] >= n_sigma
    where = z if locate is None else np.asarray(locate, np.float64)
    peaks = np.array(
        [s + int(np.argmax(where[s:e])) for s, e in zip(starts[keep], ends[keep], strict=True)], np.int64
    )
    heights = z[top[keep]]
    if peaks.size == 0:
        return []
    lo, hi = _extents(z, peaks, floor_sigma)
    return [
        Spike(int(p), int(a), int(b), float(h)) for p, a, b, h in zip(peaks, lo, hi, heights, strict=True)
    ]


def _runs_above(z: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    """The runs of ``z`` above ``level``: their starts and ends (exclusive)."""
    above = np.concatenate([[False], z > level, [False]])
    edges = np.flatnonzero(above[1:] != above[:-1])
    return edges[0::2], edges[1::2]


def _extents(z: np.ndarray, peaks: np.ndarray, floor_sigma: float) -> tuple[np.ndarray, np.ndarray]:
    """Each peak's extent (first and last lag): its run above ``floor_sigma``, split
    between neighbouring peaks at their lowest point."""
    f_starts, f_ends = _runs_above(z, floor_sigma)
    run = np.searchsorted(f_starts, peaks, side="right") - 1
    lo = f_starts[run].copy()
    hi = f_ends[run] - 1
    for k in range(1, peaks.size):  # a handful of spikes per correlation
        if run[k] == run[k - 1]:
            cut = peaks[k - 1] + int(np.argmin(z[peaks[k - 1] : peaks[k] + 1]))
            hi[k - 1] = max(cut - 1, peaks[k - 1])
            lo[k] = max(cut, peaks[k - 1] + 1)
    return lo, hi


def _delays(
    t_out: np.ndarray, t_in: np.ndarray, lo: np.ndarray, hi: np.ndarray, limit: int
) -> np.ndarray | None:
    """``t_out[i] - t_in[j]`` for every message out ``i`` and ``j`` in ``lo[i]:hi[i]``
    (``None`` past ``limit`` pairs)."""
    k = np.maximum(hi - lo, 0)
    total = int(k.sum())
    if total > limit:
        return None
    out = np.repeat(np.arange(k.size), k)
    return t_out[out] - t_in[concat_ranges(lo, k)]


class Correlator:
    """Per-edge signals of one trace and their cross-correlations over lags ``[-neg, max_lag]``.

    Parameters
    ----------
    slots : ndarray of int64
        Quantum index of every message.
    edge : ndarray of int64
        Edge index of every message (0 .. n_edges-1).
    n_edges : int
    n_slots : int
        S, the number of quanta the trace spans.
    max_lag, neg : int
        Lags computed, in quanta: ``-neg .. max_lag``.
    method : {"fft", "direct", "auto"}
        ``"fft"``: through the spectra. ``"direct"``: enumerate the pairs of occupied
        slots within the lag window (exact too; cheap when edges are sparse against S).
        ``"auto"``: whichever costs less by estimate.

    Notes
    -----
    Signals are built with one ``bincount`` per edge; the FFT length is
    ``next_fast_len(S + max(max_lag, neg))``, enough that the circular correlation has no
    wrap-around at the lags used, so one correlation costs O(S log S) time and O(S)
    memory. Spectra are cached per edge while they fit in a fixed budget.
    """

    def __init__(
        self,
        slots: np.ndarray,
        edge: np.ndarray,
        n_edges: int,
        n_slots: int,
        max_lag: int,
        neg: int,
        method: str = "fft",
        times: np.ndarray | None = None,
    ) -> None:
        if max_lag + neg > MAX_LAGS:
            raise ParameterError(
                f"lags up to {max_lag:,} quanta are too many to correlate (at most {MAX_LAGS - neg:,}): "
                "choose a larger quantum or a shorter max_lag, so that max_lag / quantum is at most "
                f"{MAX_LAGS - neg:,}"
            )
        self.n_slots = int(n_slots)
        self.max_lag = int(max_lag)
        self.neg = int(neg)
        self.n_fft = sfft.next_fast_len(self.n_slots + max(self.max_lag, self.neg), real=True)
        order = np.argsort(edge, kind="stable")
        self._slots = slots[order]
        self._times = None if times is None else np.asarray(times, np.int64)[order]
        self._bounds = np.searchsorted(edge[order], np.arange(n_edges + 1))
        self.counts = np.diff(self._bounds)
        self._cache: OrderedDict[int, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self.method = method
        self.direct_pairs = 0  # edge pairs correlated by enumerating slot pairs
        self._sparse: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._budget = max(1, _CACHE_BYTES // (2 * 8 * (self.n_fft // 2 + 1)))
        self.ffts = 0
        # Overlap of two length-S signals at each lag: the background shrinks with it.
        lags = np.arange(-self.neg, self.max_lag + 1)
        self.overlap = np.maximum(self.n_slots - np.abs(lags), 1).astype(np.float64)

    def at_ends(self, e: int, lags: int) -> tuple[int, int]:
        """Messages of edge ``e`` in the trace's first ``lags`` quanta and in its last."""
        s = self._slots[self._bounds[e] : self._bounds[e + 1]]  # in time order within an edge
        head = int(np.searchsorted(s, lags, side="left"))
        return head, int(s.size - np.searchsorted(s, self.n_slots - lags, side="left"))

    def __getstate__(self) -> dict[str, object]:
        # Shipped to other processes (a cluster's workers) without its caches, which
        # the receiver rebuilds as it needs them; ``copy.copy`` gives a fresh-cached twin.
        state = self.__dict__.copy()
        state["_cache"], state["_sparse"] = OrderedDict(), {}
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        # Arrays unpickled from a message's frames may start at any byte; numpy's paths
        # for unaligned integers (searchsorted, unique) take about twice as long.
        aligned = {
            k: np.require(v, requirements="A") if isinstance(v, np.ndarray) else v for k, v in state.items()
        }
        self.__dict__.update(aligned)

    def _spectra(self, e: int, compute: bool = True) -> tuple[np.ndarray, ...]:
        hit = self._cache.get(e)
        if hit is not None:
            self._cache.move_to_end(e)
            return hit
        if compute:
            raw = np.bincount(self._slots[self._bounds[e] : self._bounds[e + 1]], minlength=self.n_slots)
            raw = raw.astype(np.float64)
            spec: tuple[np.ndarray, ...] = (sfft.rfft(np.sqrt(raw), self.n_fft), sfft.rfft(raw, self.n_fft))
        else:
            spec = ()  # a replayed entry: its place in the cache, no spectra
        self.ffts += 2
        self._cache[e] = spec
        if len(self._cache) > self._budget:
            self._cache.popitem(last=False)
        return spec

    def _occupied(self, e: int) -> tuple[np.ndarray, np.ndarray]:
        """Occupied slots of edge ``e`` and their message counts."""
        hit = self._sparse.get(e)
        if hit is None:
            u, c = np.unique(self._slots[self._bounds[e] : self._bounds[e + 1]], return_counts=True)
            hit = self._sparse[e] = (u, c.astype(np.float64))
        return hit

    def _direct(self, e_in: int, e_out: int) -> tuple[np.ndarray, np.ndarray]:
        """The two correlations by enumerating slot pairs at lags ``-neg .. max_lag``."""
        u1, c1 = self._occupied(e_in)
        u2, c2 = self._occupied(e_out)
        width = self.neg + self.max_lag + 1
        sq = np.zeros(width)
        raw = np.zeros(width)
        lo = np.searchsorted(u2, u1 - self.neg)
        hi = np.searchsorted(u2, u1 + self.max_lag, side="right")
        counts = hi - lo
        chunk = 1 << 20
        ends = np.searchsorted(np.cumsum(counts), np.arange(chunk, int(counts.sum()) + chunk, chunk))
        start = 0
        for end in [*np.minimum(ends + 1, u1.size).tolist(), u1.size]:
            if end <= start:
                continue
            k = counts[start:end]
            i = np.repeat(np.arange(start, end), k)
            j = concat_ranges(lo[start:end], k)
            lag = u2[j] - u1[i] + self.neg
            raw += np.bincount(lag, weights=c1[i] * c2[j], minlength=width)
            sq += np.bincount(lag, weights=np.sqrt(c1[i] * c2[j]), minlength=width)
            start = end
        return sq, raw

    def _same_slot(self, e_in: int, e_out: int) -> tuple[np.ndarray, ...]:
        """For each message on ``e_out``: the bounds of the messages on ``e_in`` in its
        slot, the first of them not strictly earlier than it, its time and theirs."""
        a, b = self._bounds[e_in], self._bounds[e_in + 1]
        c, d = self._bounds[e_out], self._bounds[e_out + 1]
        assert self._times is not None
        s_in, t_in = self._slots[a:b], self._times[a:b]
        s_out, t_out = self._slots[c:d], self._times[c:d]
        lo = np.searchsorted(s_in, s_out, side="left")
        hi = np.searchsorted(s_in, s_out, side="right")
        # Messages of one edge are in time order, so within a slot too.
        first_not_before = np.clip(np.searchsorted(t_in, t_out, side="left"), lo, hi)
        return lo, hi, first_not_before, t_out, t_in

    def same_slot_delays(self, e_in: int, e_out: int, limit: int = 2_000_000) -> np.ndarray | None:
        """The delays (ns) of every pair at lag 0 whose message on ``e_out`` is not
        earlier than the one on ``e_in`` (ties give 0): what lag 0 holds below the
        quantum's resolution. ``None`` without ``times`` or past ``limit`` pairs."""
        if self._times is None:
            return None
        lo, hi, _, t_out, t_in = self._same_slot(e_in, e_out)
        first_after = np.clip(np.searchsorted(t_in, t_out, side="right"), lo, hi)
        return _delays(t_out, t_in, lo, first_after, limit)

    @functools.cached_property
    def resolution_ns(self) -> int:
        """The timestamps' resolution: the largest power of ten nanoseconds (up to a
        second) that divides every one of them (1 without ``times``)."""
        if self._times is None:
            return 1
        return next((10**k for k in range(9, 0, -1) if not (self._times % 10**k).any()), 1)

    def binned_delays(
        self, e_in: int, e_out: int, edges_ns: np.ndarray, limit: int = 2_000_000
    ) -> tuple[np.ndarray, np.ndarray]:
        """How many pairs of a message on ``e_in`` and one on ``e_out`` sent ``d`` after it
        fall in each bin ``edges_ns[k] <= d < edges_ns[k + 1]`` (increasing), and the sum
        of their ``d`` (ns); past ``limit`` pairs counted bin by bin without listing
        them (zeros without ``times``)."""
        bins = edges_ns.size - 1
        if self._times is None:
            return np.zeros(bins), np.zeros(bins)
        # Whole nanoseconds: edges[0] <= d is edges[0] - 1 < d.
        t_in, t_out, lo, hi = self._between(e_in, e_out, int(edges_ns[0]) - 1, int(edges_ns[-1]))
        if t_in.size == 0 or t_out.size == 0:
            return np.zeros(bins), np.zeros(bins)
        delays = _delays(t_out, t_in, lo, hi, limit)
        if delays is not None:  # few enough to list: one pass
            k = np.searchsorted(edges_ns, delays, side="right") - 1
            count = np.bincount(k, minlength=bins)[:bins].astype(np.float64)
            return count, np.bincount(k, weights=delays.astype(np.float64), minlength=bins)[:bins]
        # Times from the first message in, as floats: sums of absolute nanoseconds
        # overflow 64 bits, and a delay's sum needs no nanosecond.
        base = t_in[0]
        rel_out = (t_out - base).astype(np.float64)
        within = np.concatenate([[0.0], np.cumsum((t_in - base).astype(np.float64))])
        # Per edge, per message out: the messages in no later than it less the edge.
        upto = [np.searchsorted(t_in, t_out - edge, side="right") for edge in edges_ns.tolist()]
        count, total = np.zeros(bins), np.zeros(bins)
        for k in range(bins):
            n = upto[k] - upto[k + 1]
            count[k] = float(n.sum())
            total[k] = float((n * rel_out).sum() - (within[upto[k]] - within[upto[k + 1]]).sum())
        return count, total

    def pairs_between(self, e_in: int, e_out: int, low_ns: int, high_ns: int) -> int:
        """How many pairs of a message on ``e_in`` and one on ``e_out`` sent more than
        ``low_ns`` and less than ``high_ns`` after it (0 without ``times``)."""
        if self._times is None:
            return 0
        _, _, lo, hi = self._between(e_in, e_out, low_ns, high_ns)
        return int(np.maximum(hi - lo, 0).sum())

    def _between(self, e_in: int, e_out: int, low_ns: int, high_ns: int) -> tuple[np.ndarray, ...]:
        """Both edges' times and, per message out, the bounds of the messages in sent
        more than ``low_ns`` and less than ``high_ns`` before it."""
        assert self._times is not None
        t_in = self._times[self._bounds[e_in] : self._bounds[e_in + 1]]
        t_out = self._times[self._bounds[e_out] : self._bounds[e_out + 1]]
        lo = np.searchsorted(t_in, t_out - high_ns, side="right")
        hi = np.searchsorted(t_in, t_out - low_ns, side="left")
        return t_in, t_out, lo, hi

    def same_slot_unordered(self, e_in: int, e_out: int) -> tuple[float, float]:
        """The pairs at lag 0 whose message on ``e_out`` is earlier than the one on
        ``e_in``, as ``(square-rooted, raw)`` terms of the two correlations (unscaled): a
        message cannot cause one sent before it, and a call and its own return often
        share a quantum. A pair stamped at the same instant counts as half: the
        timestamps' resolution hides its order (whole seconds, milliseconds). ``(0, 0)``
        without ``times``.
        """
        if self._times is None:
            return 0.0, 0.0
        lo, hi, first_not_before, t_out, t_in = self._same_slot(e_in, e_out)
        first_after = np.clip(np.searchsorted(t_in, t_out, side="right"), lo, hi)
        # A tie is a pair whose order the timestamps' resolution hides: half of one.
        later = (hi - first_after) + 0.5 * (first_after - first_not_before)
        s_out = self._slots[self._bounds[e_out] : self._bounds[e_out + 1]]
        same = np.searchsorted(s_out, s_out, side="right") - np.searchsorted(s_out, s_out, side="left")
        hit = later > 0
        # A slot's term in the square-rooted correlation is sqrt(n_in * n_out), spread
        # evenly over its n_in * n_out pairs.
        sq = float((later[hit] / np.sqrt((hi - lo)[hit] * same[hit])).sum())
        return sq, float(later.sum())

    def direct_cost(self, e_in: int, e_out: int) -> float:
        """Expected slot pairs the direct method enumerates for this edge pair."""
        n1, n2 = self._occupied(e_in)[0].size, self._occupied(e_out)[0].size
        return n1 * n2 * (self.neg + self.max_lag + 1) / self.n_slots

    def _direct_for(self, e_in: int, e_out: int, missing: int) -> bool:
        """Whether ``correlate`` takes the direct method for this pair when ``missing``
        of the four spectra it would need are not in the cache."""
        if self.method != "auto":
            return self.method == "direct"
        # An FFT pass costs about 4 n log2 n operations per spectrum; a slot pair a few.
        fft_cost = 4.0 * self.n_fft * np.log2(self.n_fft) * (2 + missing)
        return bool(8.0 * self.direct_cost(e_in, e_out) < fft_cost)

    def methods(self, e_in: int, e_out: int) -> tuple[bool, ...]:
        """The methods ``correlate`` may take for this pair, whatever the cache then
        holds (``True``: direct): one, or with ``method="auto"`` near the break-even
        both, as the spectra already cached tip the balance."""
        return tuple(sorted({self._direct_for(e_in, e_out, 0), self._direct_for(e_in, e_out, 4)}))

    def replay(self, e_in: int, e_out: int) -> bool:
        """Do to this correlator what ``correlate(e_in, e_out)`` would (choose the method,
        count it, update the spectra cache) without computing anything; return the
        method chosen (``True``: direct).

        For a correlator whose pairs are computed elsewhere (by a cluster's tasks, with
        the method given): replayed in the order a single process asks for them, the
        choices and the counters are that process's. A correlator that replays must not
        also correlate (its cache holds no spectra).
        """
        missing = 2 * ((e_in not in self._cache) + (e_out not in self._cache))
        if self._direct_for(e_in, e_out, missing):
            self.direct_pairs += 1
            return True
        self._spectra(e_in, compute=False)
        self._spectra(e_out, compute=False)
        self.ffts += 2
        return False

    def plan(self, pairs: Iterable[tuple[int, int]]) -> list[bool]:
        """The method (``True``: direct) ``correlate`` would take for each of ``pairs``
        asked in this order of a correlator with nothing cached yet; this one is left
        as it is."""
        twin = copy.copy(self)  # no spectra cached (see __getstate__)
        twin._sparse = self._sparse  # the occupied slots are the same: share them
        return [twin.replay(e_in, e_out) for e_in, e_out in pairs]

    def correlate(self, e_in: int, e_out: int, direct: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Square-rooted and raw cross-correlations of ``e_out`` with ``e_in``.

        Index ``i`` is lag ``i - neg`` quanta: a message on ``e_in`` at slot k meeting one on
        ``e_out`` at slot ``k + lag``. Both are divided by the overlap at each lag and
        multiplied by S, so an independent pair of stationary signals gives a flat series.
        ``direct`` forces the method (``None``: the correlator's ``method``).
        """
        scale = self.n_slots / self.overlap
        if direct is None:
            missing = 2 * ((e_in not in self._cache) + (e_out not in self._cache))
            direct = self._direct_for(e_in, e_out, missing)
        if direct:
            self.direct_pairs += 1
            sq, raw = self._direct(e_in, e_out)
            return sq * scale, raw * scale
        s_in, r_in = self._spectra(e_in)
        s_out, r_out = self._spectra(e_out)
        sq = sfft.irfft(np.conj(s_in) * s_out, self.n_fft)
        raw = sfft.irfft(np.conj(r_in) * r_out, self.n_fft)
        self.ffts += 2
        idx = np.concatenate([np.arange(self.n_fft - self.neg, self.n_fft), np.arange(self.max_lag + 1)])
        return sq[idx] * scale, raw[idx] * scale

"""The convolution algorithm (Aguilera et al., SOSP 2003) for free-form message traces.

Uses only timestamp, sender and receiver, so it works for any messaging pattern.

1. Signals: every directed edge A->B is a signal, one value per quantum ``mu``: the
   square root of the number of messages on the edge in that quantum.
2. Correlation: for an edge into B and an edge out of B, the cross-correlation of the
   output with the input (FFT, ``scipy.fft``) at lags ``0 .. max_lag``. A peak at lag d
   says the output holds a copy of the input shifted by d: a causal delay.
3. Spikes: local maxima at least ``n_sigma`` standard deviations above the mean, separated
   by a point no higher than ``sep_sigma`` (the paper: 4 and 3). Mean and deviation are
   those of the background: each lag's excess over a ring of neighbouring lags (load that
   swings slowly correlates all busy edges), without the lags that stand out. ``band_s``
   averages the correlation over a band of lags first, so a delay that varies still
   makes one spike. A spike's message pairs must also exceed the background's at the
   same ``n_sigma`` level by a Poisson test (in sparse traces a chance pair or two
   would otherwise pass).
4. Estimates: a spike's message count from the correlation of raw counts (above its
   background it rises by one per message pair), its delay as its centroid. A hop
   whose messages go one for one (the answers to calls, or calls relayed by a node
   with one caller) also gets its median: the lag by which half its messages' worth
   of message pairs stand above the background (the count is known), whatever peaks
   the delays make. A hop into a join (a message out after answers over several
   edges, each one per message out) gets the median of its message out's last
   answer: the answers' pairs summed, the earliest half of the messages' worth.
5. Paths: from each root, every out-edge; from each vertex (a visit of a node, reached by
   an edge into it), every out-edge of that node whose correlation with the edge in has
   spikes. Edges carry the delays found (most frequent first) and estimated counts; a
   hop's count is the previous hop's times the share of its messages that go on.

Refinements (each a parameter; measured in docs/paper-reproduction.md):
``min_count`` drops paths with fewer estimated messages; a delay that a longer sibling
path through the same node explains is dropped (unless ``keep_short_paths``); a path ends
at its root (unless ``through_root``) and ``max_repeats`` cuts cycles; peaks at negative
lags whose tail reaches lag 0 and peaks cut off at ``max_lag`` are dropped (unless
``keep_implausible``); ``max_depth`` limits the hops of a path.

Cost: O(m) to build the signals; per edge pair O(S log S) time and O(S) memory by FFT,
or, when edges are sparse against S, O(pairs of occupied quanta within the lag window)
by direct enumeration (``method="auto"`` picks per pair); each pair is correlated once.
With a cluster's runner the pairs are correlated by its tasks, every pair the paths can
ask for in one round, each worker sent the messages' quanta and times once (16 bytes a
message); the answer is the one of a single process, bit for bit (docs/scaling.md).
"""

from __future__ import annotations

import copy
import itertools
import threading
import weakref
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pyarrow as pa
from scipy.special import gammainc, ndtr

from infer._convsignal import Correlator, find_spikes, local_background, moving_mean
from infer.callpairs import node_codes
from infer.params import AUTO_LAG_QUANTA, MIN_LAGS, ConvolutionParams
from tracefmt import OP_CALL, OP_RETURN, ParameterError, SchemaError, op_codes, sort_trace, validate_trace
from tracefmt.cluster import InProcess
from tracefmt.pathsfile import hop_delays_s
from tracefmt.patterns import path_id
from tracefmt.units import format_duration_ns, format_instant_ns, offsets_ns

if TYPE_CHECKING:
    import networkx as nx

    from tracefmt.cluster import Runner

__all__ = [
    "AUTO_LAG_QUANTA",
    "ConvolutionParams",
    "ConvolutionResult",
    "DelaySpike",
    "LinearPath",
    "infer_convolution",
]

_RING = 12  # half-width of the local background, in spike widths
#: Most of a median's target that a drifting background may make up (``_Pairs.median``).
_MEDIAN_DRIFT = 0.1
#: Most message pairs above the background, per message, that a one-for-one hop holds
#: near its median (``_Pairs.median``): 1 and noise; calls made two at once make 2.
_ONE_FOR_ONE = 1.3
#: Least share of a join's messages out that its inputs' spikes must explain together
#: (``_Pairs._join_inputs``): each message out has its cause among them, but for noise.
_JOINED = 0.75
_NEG_MARGIN = 8  # quanta of negative lags examined beyond the band (plausibility)


@dataclass(frozen=True)
class DelaySpike:
    """One delay found between a message on an edge into a node and one on an edge out.

    Attributes
    ----------
    delay_s : float
        The delay (centroid of the spike, or its peak lag, times the quantum).
    lag : int
        Peak lag in quanta.
    count : float
        Estimated number of message pairs with this delay.
    z : float
        Peak height in standard deviations above the mean.
    """

    delay_s: float
    lag: int
    count: float
    z: float


@dataclass(frozen=True)
class LinearPath:
    """One root-to-leaf path of the output graph.

    ``counts[k]`` is the estimated number of messages on hop k (``nodes[k] -> nodes[k+1]``);
    ``delays_s[k]`` the delays (most frequent first) from a message on hop k to the one it
    causes on hop k+1, with ``delay_counts[k]`` their estimated message counts;
    ``medians_s[k]`` the median of those delays where hop k's messages cause hop k+1's
    one for one (a server's answers to calls, calls relayed) or join (``_Pairs.join_median``),
    else None.
    """

    nodes: tuple[str, ...]
    delays_s: tuple[tuple[float, ...], ...]
    delay_counts: tuple[tuple[float, ...], ...]
    counts: tuple[float, ...]
    medians_s: tuple[float | None, ...] = ()

    @property
    def id(self) -> str:
        return path_id(self.nodes)

    @property
    def count(self) -> float:
        """Estimated messages on the last hop: how often the whole path is taken."""
        return self.counts[-1]

    @property
    def latency_s(self) -> float:
        """Sum of every hop's delay: its median where known, else its most frequent."""
        return float(sum(hop_delays_s({"delays_s": self.delays_s, "medians_s": self.medians_s})))

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "nodes": list(self.nodes),
            "delays_s": [list(d) for d in self.delays_s],
            "delay_counts": [list(c) for c in self.delay_counts],
            "medians_s": list(self.medians_s) or [None] * len(self.delays_s),
            "counts": list(self.counts),
            "count": self.count,
            "latency_s": self.latency_s,
        }


@dataclass(frozen=True)
class ConvolutionResult:
    """The output graph of the convolution algorithm and its linear paths.

    Attributes
    ----------
    graph : networkx.DiGraph
        Vertices are visits (``node``, ``depth``); an edge u->v is one hop with ``edge``
        (``"A->B"``), ``count`` (estimated messages), ``spikes`` (DelaySpike, most frequent
        first; none on a root's hop).
    paths : list of LinearPath
        Root-to-leaf paths, by estimated count, descending.
    roots : list of str
        Nodes the paths start from.
    params : ConvolutionParams
    stats : dict
        Work done and what each refinement removed.
    notes : list of str
        Why a result is empty or thin (one edge, no root found, ...).
    trace_info : dict
        Messages and time span of the input.
    """

    graph: nx.DiGraph
    paths: list[LinearPath]
    roots: list[str]
    params: ConvolutionParams
    stats: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    trace_info: dict[str, Any] = field(default_factory=dict)

    def to_json(self, *, top: int | None = None, min_count: float | None = None) -> dict[str, Any]:
        """The paths file (``docs/files.md``) (``"algorithm": "convolution"``)."""
        floor = self.params.min_count if min_count is None else min_count
        chosen = [p for p in self.paths if p.count >= floor][:top]
        params = asdict(self.params)
        params["root"] = list(self.params.root) if self.params.root is not None else None
        g = self.graph
        return {
            "format": "wirepath.paths/1",
            "algorithm": "convolution",
            "params": {**params, "top": top},
            "trace": {
                "messages": self.trace_info.get("messages", 0),
                "start": format_instant_ns(self.trace_info.get("start_ns")),
                "end": format_instant_ns(self.trace_info.get("end_ns")),
            },
            "stats": dict(self.stats),
            "notes": list(self.notes),
            "roots": list(self.roots),
            "paths": [p.to_json() for p in chosen],
            "graph": {
                "vertices": [
                    {"id": int(v), "node": d["node"], "depth": d["depth"]} for v, d in g.nodes(data=True)
                ],
                "edges": [
                    {
                        "source": int(u),
                        "target": int(v),
                        "edge": d["edge"],
                        "count": d["count"],
                        "delays_s": [s.delay_s for s in d["spikes"]],
                        "delay_counts": [s.count for s in d["spikes"]],
                        "median_s": d["median_s"],
                    }
                    for u, v, d in g.edges(data=True)
                ],
            },
        }


class _Pairs:
    """Spikes of every (edge in, edge out) pair, computed once each.

    With ``done`` (the pairs computed by a cluster's tasks, keyed by pair and method,
    see :func:`_correlate_on`) nothing is computed here: the correlator replays each
    pair in the order this run asks for it, so the method taken and every counter are
    those of a run in one process.
    """

    def __init__(
        self,
        corr: Correlator,
        params: ConvolutionParams,
        stats: dict[str, int],
        edges: _EdgeGraph,
        done: dict[tuple[int, int, bool], _PairResult] | None = None,
    ) -> None:
        self.corr = corr
        self.p = params
        self.stats = stats
        self.edges = edges
        self.done = done
        self.memo: dict[tuple[int, int], tuple[DelaySpike, ...]] = {}
        self.window_excess: dict[tuple[int, int], float] = {}
        self.curves: dict[tuple[int, int], np.ndarray] = {}

    def spikes(self, e_in: int, e_out: int) -> tuple[DelaySpike, ...]:
        key = (e_in, e_out)
        hit = self.memo.get(key)
        if hit is None:
            hit = self.memo[key] = self._compute(e_in, e_out)
        return hit

    def explained(self, e_in: int, e_out: int) -> float:
        """Messages on ``e_out`` that ones on ``e_in`` explain: those of its spikes, or,
        when more, the pairs above the background within the first twentieth of the
        lags (a delay that spreads makes no spike, yet explains as much)."""
        spiked = sum(s.count for s in self.spikes(e_in, e_out))
        return max(spiked, self.window_excess[(e_in, e_out)])

    def _compute(self, e_in: int, e_out: int) -> tuple[DelaySpike, ...]:
        self.stats["pairs_correlated"] += 1
        if self.done is None:
            spikes, excess, curve = _pair_spikes(self.corr, self.p, e_in, e_out, self.stats)
        else:
            spikes, excess, tally, curve = self.done[(e_in, e_out, self.corr.replay(e_in, e_out))]
            for name, n in tally:
                self.stats[name] += n
        self.window_excess[(e_in, e_out)] = excess
        self.curves[(e_in, e_out)] = curve
        return spikes

    def median(self, e_in: int, e_out: int) -> float | None:
        """The median delay of a hop whose messages in and out go one for one
        (``_EdgeGraph.one_for_one``: the answers to calls, or calls relayed): half of
        them (of the fewer of the two edges' messages) have come by the lag where that
        many message pairs stand above the background, counted from lag 0
        (``_curve_median``). ``None`` for any other pair, or when the excess never gets
        there, or when the background drifts near lag 0."""
        spikes = self.spikes(e_in, e_out)
        if not spikes or not self.edges.one_for_one(e_in, e_out, self.corr):
            return None
        n = self.corr.counts
        half = 0.5 * float(min(n[e_in], n[e_out]))
        # A spike at lag 0 whose delay was read off the messages' times (all of it within
        # the first half quantum) places lag 0's pairs; a centroid spread over more lags
        # does not.
        q = self.p.quantum_s
        lag0 = next((s.delay_s for s in spikes if s.lag == 0 and s.delay_s < 0.5 * q), None)
        curve = self.curves[(e_in, e_out)]
        median = _level_median(curve, half, q, lag0)
        if median is None:
            return None
        # One for one in count is not one for one in time: calls made at once over the
        # same edges pair each call with the others' answers too, and the excess holds
        # several times the messages (the median would fall to a lower quantile). Up to
        # twice the median's lag (at least the window excess's lags) it must hold about
        # as many pairs as messages.
        reach = max(2 * round(median / q), _window_lags(self.corr))
        if float(np.cumsum(curve[: reach + 1]).max()) > _ONE_FOR_ONE * 2 * half:
            return None
        return median

    def join_median(self, e_in: int, e_out: int) -> float | None:
        """The median delay of a hop into a join: a node whose messages on ``e_out`` each
        follow one message of every edge in of several (``_join_inputs``), ``e_in`` one
        of them. Each message out is caused by the last of its inputs, so its delay is
        the shortest of theirs: half of the messages out have their cause by the lag
        where the inputs' excess curves, summed, hold half that many pairs. The delays
        from the inputs that came earlier add up later, past the ones that count. On
        TraceWeaver's node at load 75 ``service1`` answers ``init-service`` after both
        ``service2`` and ``service3`` have answered: ``service2``'s pairs alone put the
        hop at 1.61 ms (its answers that came first wait for ``service3``'s), the
        truth's median is 0 ms (whole-millisecond stamps). ``None`` when ``e_in`` is
        not such an input or the summed excess never gets there."""
        inputs = self._join_inputs(e_out)
        if e_in not in inputs:
            return None
        curve = np.sum([self.curves[(g, e_out)] for g in inputs], axis=0)
        return _level_median(curve, 0.5 * float(self.corr.counts[e_out]), self.p.quantum_s, None)

    def _join_inputs(self, e_out: int) -> list[int]:
        """The answers into ``e_out``'s sender (edges of returns) that this run has
        correlated with ``e_out`` and found spikes with, each carrying as many messages
        as ``e_out`` but for what the capture's ends cut (``_relay_counts_agree``); none
        unless there are two and their spikes together explain ``_JOINED`` of the
        messages out."""
        b = self.edges.src[e_out]
        n_out = float(self.corr.counts[e_out])
        inputs = [
            g
            for g in self.edges.in_edges[b]
            if self.edges.returns[g]
            and self.memo.get((g, e_out))
            and _relay_counts_agree(self.corr, g, e_out)
        ]
        spiked = sum(s.count for g in inputs for s in self.memo[(g, e_out)])
        return inputs if len(inputs) >= 2 and spiked >= _JOINED * n_out else []


def _level_median(curve: np.ndarray, target: float, quantum_s: float, lag0_s: float | None) -> float | None:
    """``_curve_median``, or None where the background drifts: over the curve's far half
    (the second quarter of the lags) the excess must be about nil, or it has been
    adding up from lag 0 as well (a dense, short trace whose load swings correlate
    every busy pair: thousands of pairs a lag)."""
    median = _curve_median(curve, target, quantum_s, lag0_s)
    far = curve[curve.size // 2 :]
    drift = abs(float(far.mean())) if far.size else np.inf
    if median is None or drift * (median / quantum_s + 1) > _MEDIAN_DRIFT * target:
        return None
    return median


class _PairResult(NamedTuple):
    """What a task returns per pair: its spikes, window excess and the counts of
    spikes the tests dropped (``(counter, n)``, the nonzero ones)."""

    spikes: tuple[DelaySpike, ...]
    excess: float
    tally: tuple[tuple[str, int], ...]
    curve: np.ndarray  # message pairs above the background, lags 0 .. max_lag // 2


def _pair_spikes(
    corr: Correlator,
    p: ConvolutionParams,
    e_in: int,
    e_out: int,
    tally: dict[str, Any],
    direct: bool | None = None,
) -> tuple[tuple[DelaySpike, ...], float, np.ndarray]:
    """The spikes of one (edge in, edge out) pair, its window excess (see
    ``_Pairs.explained``) and, when it has spikes, its excess at each lag up to half of
    ``max_lag`` (for ``_Pairs.median``), counting what the spike tests drop into
    ``tally``; ``direct`` forces the correlation method (``None``: the correlator
    chooses)."""
    sq, raw = corr.correlate(e_in, e_out, direct)
    ring, core = _ring(p)
    _causal_lag0(corr, e_in, e_out, sq, raw, ring, core)
    curve = _excess_curve(corr, raw)
    window = float(curve[: _window_lags(corr) + 1].sum())
    none = curve[:0]
    z = _standard_scores(sq, corr.neg, p)
    if z is None:
        return (), window, none
    peaks = _plausible_peaks(z, sq, corr, p, tally)
    out = _counted_spikes(peaks, corr, p, (e_in, e_out), sq, raw, tally) if peaks else []
    if not any(s.lag <= 1 for s in out):
        fine = _fine_spike(corr, p, e_in, e_out, raw)
        if fine is not None:
            tally["spikes_fine"] += 1
            tally["spikes_within_quantum"] += 1
            out.append(fine)
    tally["spikes"] += len(out)
    near = curve[: corr.max_lag // 2 + 1].copy() if out else none
    return tuple(sorted(out, key=lambda s: (-s.count, s.lag))), window, near


def _ring(p: ConvolutionParams) -> tuple[int, int]:
    """The local background's half-width and the core it leaves out around each lag
    (a spike's width), in lags."""
    half = p.band_quanta
    return _RING * (half + 1), 2 * half + 1


def _standard_scores(sq: np.ndarray, neg: int, p: ConvolutionParams) -> np.ndarray | None:
    """Each lag's band-smoothed correlation in standard deviations above the background
    (None when the background does not vary)."""
    ring, core = _ring(p)
    smooth = moving_mean(sq, p.band_quanta)
    # Deviation from a local background (a ring of lags around each lag), so slow swings
    # of the load, which correlate every pair of busy edges, do not pass for spikes.
    resid = smooth - local_background(smooth, ring, core)
    body = resid[neg:]  # lags 0 .. max_lag
    # Mean and deviation of the background: the lags that do not stand out (judged
    # against the median and the scaled median absolute deviation first), so strong
    # spikes do not hide weaker ones by inflating the deviation, even in short windows.
    mean, std = float(body.mean()), float(body.std())
    med = float(np.median(body))
    mad = 1.4826 * float(np.median(np.abs(body - med)))
    if mad > 0:
        quiet = body[(body - med) / mad <= p.sep_sigma]
        if quiet.size >= MIN_LAGS:
            mean, std = float(quiet.mean()), float(quiet.std())
    if not std > 0:
        return None
    return (resid - mean) / std


def _plausible_peaks(
    z: np.ndarray, sq: np.ndarray, corr: Correlator, p: ConvolutionParams, tally: dict[str, Any]
) -> list[tuple[int, int, int, float]]:
    """The spikes of the scores ``z`` as ``(lag, first lag, last lag, z)``, without those
    at negative lags or at ``max_lag`` unless ``keep_implausible`` (counted into ``tally``)."""
    neg, half = corr.neg, p.band_quanta
    ring, core = _ring(p)
    # The band's moving mean flattens a peak's top: locate peaks on the unsmoothed residual.
    exact = sq - local_background(sq, ring, core) if half else z
    # Search from a few negative lags when judging plausibility, else from lag 0.
    first = neg - (half + _NEG_MARGIN) if not p.keep_implausible else neg
    found = find_spikes(z[first:], n_sigma=p.n_sigma, sep_sigma=p.sep_sigma, locate=exact[first:])
    shift = neg - first
    last = corr.max_lag
    reach = half + 2  # a spike's counted extent around its peak
    keep = []
    for s in found:
        lag = s.lag - shift
        if not p.keep_implausible and lag < 0:
            tally["spikes_negative"] += 1
            continue
        if not p.keep_implausible and lag >= last - half:
            tally["spikes_at_max_lag"] += 1
            continue
        lo = max(s.lo - shift, lag - reach, 0)
        hi = min(s.hi - shift, lag + reach, last)
        keep.append((lag, lo, hi, s.z))
    return keep


def _counted_spikes(
    peaks: list[tuple[int, int, int, float]],
    corr: Correlator,
    p: ConvolutionParams,
    pair: tuple[int, int],
    sq: np.ndarray,
    raw: np.ndarray,
    tally: dict[str, Any],
) -> list[DelaySpike]:
    """The peaks whose message pairs stand out, with their message counts and delays."""
    ring, core = _ring(p)
    # Counts from the raw-count correlation: above its background it rises by exactly
    # the number of message pairs at each lag.
    raw_bg = _pairs_per_lag(corr, local_background(raw, ring, core))
    raw_pairs = _pairs_per_lag(corr, raw)
    series = raw if p.count_estimate == "raw" else sq
    excess = _pairs_per_lag(corr, series - local_background(series, ring, core))
    # A spike must also stand out as a count of message pairs: in a sparse trace a few
    # chance coincidences are many deviations above a background of almost nothing.
    # The background rate: the local one, but never below the mean over all lags (a
    # ring of a few dozen lags in a sparse trace often holds no pair at all).
    tail = float(ndtr(-p.n_sigma))  # the normal's upper tail
    floor = float(raw_pairs.mean())
    out = []
    for lag, lo, hi, zval in peaks:
        seen = float(raw_pairs[lo : hi + 1].sum())
        expected = float(np.maximum(raw_bg[lo : hi + 1], floor).sum())
        if _poisson_at_least(round(seen), expected) > tail:
            tally["spikes_too_few_pairs"] += 1
            continue
        w = np.maximum(excess[lo : hi + 1], 0.0)
        count = float(w.sum())
        delay = _spike_delay(corr, p, pair, lag, lo, w, raw_bg)
        tally["spikes_within_quantum"] += lag == 0
        out.append(DelaySpike(delay, lag, count, zval))
    return out


def _spike_delay(
    corr: Correlator,
    p: ConvolutionParams,
    pair: tuple[int, int],
    lag: int,
    lo: int,
    w: np.ndarray,
    raw_bg: np.ndarray,
) -> float:
    """A spike's delay: its centroid over the excess ``w`` at lags ``lo ...`` (read off
    the messages' own times when all of it is at lag 0), or its peak lag times the
    quantum (``delay_estimate="lag"``, or no excess)."""
    count = float(w.sum())
    below = lo == 0 and count > 0 and not w[1:].any()
    sub = _below_quantum(corr, *pair, float(raw_bg[0]), p.quantum_s) if below else None
    if p.delay_estimate == "centroid" and sub is not None:
        return sub
    if p.delay_estimate == "centroid" and count > 0:
        return float((np.arange(lo, lo + w.size) * w).sum() / count) * p.quantum_s
    return lag * p.quantum_s


_SUB_BINS = 20  # bins of a quantum when a delay shorter than it is read off message times
_MIN_FINE_BINS = 4  # a quantum the timestamps cut into fewer bins hides nothing finer


def _fine_spike(
    corr: Correlator, p: ConvolutionParams, e_in: int, e_out: int, raw: np.ndarray
) -> DelaySpike | None:
    """A spike within the first quantum that the quantum hides, read off the messages'
    own times: the run of bins (twentieths of a quantum, never finer than the stamps)
    after the message in whose pairs stand furthest above the background, kept when its
    Poisson tail, times the runs tried, is below the ``n_sigma`` level.

    At the quantum's resolution a short, rare relation sits in one lag whose local
    background a stronger relation at negative lags lifts: on TraceWeaver's media at
    load 125, ``compose-review-service`` answers ``text-service`` 0.1-0.5 ms after
    ``movie-review-service`` answers it in 5% of the requests, while in the others it
    answered ``text-service`` 3-5 ms before. The background here is the highest of the
    pairs' density over the quantum before the message in, over the quantum after the
    first and over lags 2 .. the ring: a bump on the shoulder of a relation at negative
    lags is no spike, nor is the rising edge of one that peaks past the first quantum
    (``compose-review-service`` answering one uploader 0.5-2 ms after another's upload
    came: the uploads of a request arrive together). Ties (delay 0) count on neither
    side: their order is unknown."""
    layout = _fine_bins(p.quantum_s * 1e9, corr.resolution_ns)
    if layout is None:
        return None
    res, per_bin, bins = layout
    steps = per_bin * bins  # the quantum's timestamp steps
    q = res * steps
    # Bin k holds the stamps k * per_bin .. (k + 1) * per_bin - 1; bin 0 not stamp 0.
    edges = np.arange(bins + 1, dtype=np.int64) * (res * per_bin)
    edges[0] = 1
    after, sums = corr.binned_delays(e_in, e_out, edges)
    if not after.any():
        return None
    stamps = np.full(bins, float(per_bin))
    stamps[0] -= 1  # the tie's stamp
    ring, _ = _ring(p)
    pairs = _pairs_per_lag(corr, raw)
    far = float(np.median(pairs[2 : 2 + ring])) if pairs.size > 2 else 0.0
    before = corr.pairs_between(e_in, e_out, -q, 0) / (steps - 1)
    beyond = corr.pairs_between(e_in, e_out, q - 1, 2 * q) / steps
    per_stamp = max(far / steps, before, beyond, 1.0 / steps)
    expected_bin = per_stamp * stamps
    seen_sum = np.concatenate([[0.0], np.cumsum(after)])
    expected_sum = np.concatenate([[0.0], np.cumsum(expected_bin)])
    i, j = np.triu_indices(bins + 1, k=1)
    seen = seen_sum[j] - seen_sum[i]
    expected = expected_sum[j] - expected_sum[i]
    # Ranked by the likelihood ratio (a tail underflows to 0 for many runs of a strong
    # relation), judged by the tail.
    more = seen > expected  # a run of the tie's stamp alone expects nothing and holds nothing
    ratio = np.zeros(seen.size)
    ratio[more] = (
        seen[more] * np.log(seen[more] / np.maximum(expected[more], 1e-300)) - (seen - expected)[more]
    )
    best = int(np.argmax(ratio))
    if not ratio[best] > 0 or _poisson_at_least(round(seen[best]), expected[best]) * i.size > ndtr(
        -p.n_sigma
    ):
        return None
    lo, hi = int(i[best]), int(j[best])
    w = np.maximum(after[lo:hi] - expected_bin[lo:hi], 0.0)
    if not w.sum() > 0:
        return None
    mean = sums[lo:hi] / np.maximum(after[lo:hi], 1.0)  # each bin's delays, as they were
    count = float(seen[best] - expected[best])
    z = count / float(np.sqrt(expected[best]))
    return DelaySpike(float((mean * w).sum() / w.sum()) / 1e9, 0, count, z)


def _fine_bins(q_ns: float, res: int) -> tuple[int, int, int] | None:
    """How ``_fine_spike`` cuts a quantum of ``q_ns`` for stamps of ``res`` ns: ``(res,
    stamps per bin, bins)``, every bin the same number of stamps (a bin of more stamps
    than its neighbours would stand out from a flat background: a 25 ms quantum over
    whole milliseconds cut in twentieths), at most ``_SUB_BINS`` bins; ``None`` for
    fewer than ``_MIN_FINE_BINS`` (the quantum is not a whole number of stamps, or too
    few of them).

    Examples
    --------
    >>> _fine_bins(1e6, 1), _fine_bins(25e6, 10**6), _fine_bins(360e9, 10**9), _fine_bins(2e9, 10**9)
    ((1, 50000, 20), (1000000, 5, 5), (1000000000, 18, 20), None)
    """
    stamps = round(q_ns / res)
    if stamps < _MIN_FINE_BINS or abs(stamps * res - q_ns) > 0.5:
        return None
    bins = next(b for b in range(min(_SUB_BINS, stamps), 0, -1) if stamps % b == 0)
    return (res, stamps // bins, bins) if bins >= _MIN_FINE_BINS else None


def _poisson_at_least(k: int, mean: float) -> float:
    """P(X >= k) for X Poisson with ``mean`` (the regularized lower incomplete gamma)."""
    return float(gammainc(k, mean)) if k > 0 else 1.0


def _window_lags(corr: Correlator) -> int:
    """The last lag of a pair's window excess: ``max_lag // 20``, at least ``MIN_LAGS``."""
    return max(corr.max_lag // 20, MIN_LAGS)


def _pairs_per_lag(corr: Correlator, series: np.ndarray) -> np.ndarray:
    """Message pairs at each lag ``0 .. max_lag`` of the raw-count correlation, or of a
    series on its scale (its background, its excess): the scaling by the overlap undone."""
    return series[corr.neg :] * (corr.overlap[corr.neg :] / corr.n_slots)


def _excess_curve(corr: Correlator, raw: np.ndarray) -> np.ndarray:
    """Message pairs above the background at each lag ``0 .. max_lag``, the background
    being the median over the far half of the lags, where causal delays no longer
    reach. Summed over lags ``0 .. _window_lags`` it is the pair's window excess."""
    pairs = _pairs_per_lag(corr, raw)
    return pairs - float(np.median(pairs[pairs.size // 2 :]))


def _curve_median(curve: np.ndarray, target: float, quantum_s: float, lag0_s: float | None) -> float | None:
    """The delay by which ``target`` message pairs of the excess ``curve`` have come
    for good (None if they never do). Lag 0 holds delays below half a quantum (all at
    ``lag0_s`` when the messages' times gave it), lag l those within half a quantum of
    l quanta; within a lag the delay is interpolated.

    Where the summed excess gets well past the target (half as much again: the upper
    quartile when ``target`` is half the messages), the crossing is the last one before
    that, interpolated between the sums themselves. The sum may pass the target early
    and fall back: pairs of one quantum beyond what the background expects lift lag 0
    and leave the next lags short (on TraceWeaver's hotel at load 125, 27 pairs too many
    at lag 0 and 29 too few over lags 1-4). Where it never gets well past, a late dip
    below the target is as likely noise as a crossing, so the first crossing of its
    running maximum is taken (noise that dips does not count twice).

    Examples
    --------
    >>> _curve_median(np.array([0.0, 2.0, 6.0, 2.0]), 5.0, 1.0, None)
    2.0
    >>> _curve_median(np.array([6.0, -3.0, 1.0, 4.0]), 5.0, 1.0, None)  # past at 0, back below
    2.75
    >>> round(_curve_median(np.array([0.0, 6.0, 0.0, -2.0, 2.0]), 5.0, 1.0, None), 3)  # never well past
    1.333
    """
    if not target > 0 or curve.size == 0:
        return None
    summed = np.cumsum(curve)
    well_past = np.flatnonzero(summed >= 1.5 * target)
    if well_past.size:
        below = np.flatnonzero(summed[: well_past[0]] < target)
        k = int(below[-1]) + 1 if below.size else 0
    else:
        summed = np.maximum.accumulate(summed)
        k = int(np.searchsorted(summed, target))
        if k >= summed.size:
            return None
    before = float(summed[k - 1]) if k else 0.0
    share = (target - before) / max(float(summed[k]) - before, 1e-12)
    if k == 0:
        return lag0_s if lag0_s is not None else 0.5 * share * quantum_s
    return (k - 0.5 + share) * quantum_s


def _below_quantum(
    corr: Correlator, e_in: int, e_out: int, background: float, quantum_s: float
) -> float | None:
    """The delay of a spike held all at lag 0, read off the messages' own times: the
    centroid of the pairs' delays above what ``background`` pairs at lag 0 (ordered at
    random within their quantum: density falling linearly from 0 to the quantum) would
    give. ``None`` when the times cannot say (no times, too many pairs, no excess)."""
    delays = corr.same_slot_delays(e_in, e_out)
    if delays is None or delays.size == 0:
        return None
    q_ns = quantum_s * 1e9
    edges = np.linspace(0.0, q_ns, _SUB_BINS + 1)
    seen = np.histogram(delays, bins=edges)[0].astype(np.float64)
    # Half the background pairs are in order; their delays D in (0, q) have density 2(q-D)/q^2.
    share = ((q_ns - edges[:-1]) ** 2 - (q_ns - edges[1:]) ** 2) / q_ns**2
    excess = np.maximum(seen - 0.5 * background * share, 0.0)
    if not excess.sum() > 0:
        return None
    mid = 0.5 * (edges[:-1] + edges[1:])
    return float((mid * excess).sum() / excess.sum()) / 1e9


def _causal_lag0(
    corr: Correlator, e_in: int, e_out: int, sq: np.ndarray, raw: np.ndarray, ring: int, core: int
) -> None:
    """Keep at lag 0 only the pairs whose message out is strictly later than the message
    in, in place: the others cannot be cause and effect (a call and its own return
    sharing a quantum made a spike at lag 0 that read as a return causing the call).
    The half of the background pairs that an ordering drops is put back as expected
    (the background at lag 0 from the lags around it), so that lag 0 stays level with
    its neighbours when nothing happens there."""
    u_sq, u_raw = corr.same_slot_unordered(e_in, e_out)
    if not u_raw:
        return
    neg = corr.neg
    scale = corr.n_slots / corr.overlap[neg]
    for series, unordered in ((sq, u_sq), (raw, u_raw)):
        background = float(local_background(series, ring, core)[neg])
        series[neg] += 0.5 * background - unordered * scale


@dataclass
class _Vertex:
    node: int
    edge: int  # edge into this vertex, -1 at a root
    parent: int
    depth: int
    spikes: tuple[DelaySpike, ...]
    children: list[int] = field(default_factory=list)
    count: float = 0.0
    alive: bool = True
    median_s: float | None = None  # a one-for-one hop's median delay (``_Pairs.median``)


def _edge_fraction(spikes: tuple[DelaySpike, ...], n_in: int, n_out: int) -> float:
    """Share of messages on the edge in that go on to this edge out (capped by its size)."""
    return float(min(sum(s.count for s in spikes), float(n_out)) / max(int(n_in), 1))


def infer_convolution(
    trace: pa.Table,
    params: ConvolutionParams | None = None,
    *,
    runner: Runner | None = None,
    **overrides: Any,
) -> ConvolutionResult:
    """Infer causal paths of a message trace with the convolution algorithm.

    Parameters
    ----------
    trace : pyarrow.Table
        A message trace (``tracefmt``); only timestamp, sender and receiver are read.
    params : ConvolutionParams, optional
        The settings; ``ConvolutionParams`` documents every field.
    runner : tracefmt.cluster.Runner, optional
        Where the edge pairs are correlated. ``None`` (or the in-process runner): here,
        each when the paths first ask for it. A cluster's runner: every pair the run
        can ask for, by tasks of a few pairs of one node each, the signals shipped to
        each worker once; the result is the same to the last bit.
    **overrides
        Fields of ``ConvolutionParams`` (replacing those of ``params``): ``quantum_s``
        (the time resolution) is needed without ``params``; ``max_lag_s``, the longest
        delay looked for, is ``AUTO_LAG_QUANTA`` (1,000) quanta unless given.

    Returns
    -------
    ConvolutionResult

    Raises
    ------
    SchemaError
        The trace is empty or spans no time.
    ParameterError
        A parameter is out of range, the quantum is longer than the trace, or a root is
        unknown or sends nothing.

    Examples
    --------
    >>> import numpy as np, pyarrow as pa
    >>> sent = np.sort(np.random.default_rng(0).integers(0, 5000, 200)) * 10**9  # a -> b ...
    >>> ts = np.concatenate([sent, sent + 2 * 10**9])  # ... and b forwards 2 s later
    >>> t = pa.table({"timestamp": pa.array(ts, pa.timestamp("ns")),
    ...     "sender": ["a"] * 200 + ["b"] * 200, "receiver": ["b"] * 200 + ["c"] * 200,
    ...     "op": ["send"] * 400, "id": pa.array([None] * 400, pa.uint64())})
    >>> r = infer_convolution(t, quantum_s=1.0, max_lag_s=20.0)
    >>> [(p.nodes, p.delays_s) for p in r.paths]
    [(('a', 'b', 'c'), ((2.0,),))]
    """
    if params is None:
        params = ConvolutionParams(**overrides)
    elif overrides:
        params = replace(params, **overrides)
    params.check()
    trace = sort_trace(validate_trace(trace))
    notes: list[str] = []
    graph_in = _EdgeGraph.of(trace)
    corr, t0, t1 = _correlator(trace, graph_in, params, notes)
    stats = _new_stats(trace, graph_in, corr)
    candidates = _start_candidates(trace, graph_in, params)
    done = None
    if runner is not None and not isinstance(runner, InProcess):
        done = _correlate_on(runner, corr, params, _wanted_pairs(graph_in, params, candidates))
    pairs = _Pairs(corr, params, stats, graph_in, done)
    start = _start_edges(candidates, graph_in, pairs, params, notes)
    verts, root_vertex = _grow(start, graph_in, pairs, params, stats, notes)
    _join_medians(verts, pairs)
    if not params.keep_short_paths:
        _drop_short_paths(verts, params, stats)
    _recount(verts, root_vertex.values(), corr.counts, params, stats)
    graph = _vertex_graph(verts, graph_in)
    paths = _linear_paths(verts, root_vertex.values(), graph_in.names)
    paths.sort(key=lambda p: (-p.count, p.id))
    _close_stats(stats, corr, graph, paths, params, notes)
    return ConvolutionResult(
        graph=graph,
        paths=paths,
        roots=[graph_in.names[a] for a in sorted(root_vertex)],
        params=params,
        stats=stats,
        notes=notes,
        trace_info={"messages": trace.num_rows, "start_ns": t0, "end_ns": t1},
    )


def _close_stats(
    stats: dict[str, Any],
    corr: Correlator,
    graph: nx.DiGraph,
    paths: list[LinearPath],
    params: ConvolutionParams,
    notes: list[str],
) -> None:
    """The run's last counters, and the notes on delays within a quantum or no path."""
    stats["vertices"] = graph.number_of_nodes()
    stats["paths"] = len(paths)
    stats["ffts"] = corr.ffts
    stats["pairs_direct"] = corr.direct_pairs
    if stats["spikes_within_quantum"]:
        q_ns = params.quantum_s * 1e9
        notes.append(
            f"{stats['spikes_within_quantum']} delay(s) peak within one quantum (read off the messages' "
            f"own times, to {format_duration_ns(round(q_ns / _SUB_BINS))}): a quantum of "
            f"{format_duration_ns(round(q_ns / 10))} would measure them as the others are"
        )
    if not paths and not notes:
        notes.append("no path found: no hop kept min_count estimated messages")


@dataclass(frozen=True)
class _EdgeGraph:
    """The trace's nodes and directed edges: each message's edge, each edge's ends, and
    each node's edges out and in."""

    names: list[str]
    sender: np.ndarray  # node code of each message's sender
    receiver: np.ndarray  # and of its receiver
    edge: np.ndarray  # edge index of each message
    src: np.ndarray  # per edge
    dst: np.ndarray
    out_edges: list[list[int]]
    in_edges: list[list[int]]
    calls: np.ndarray  # per edge: every message on it is a call
    returns: np.ndarray  # and: every one is a return

    @classmethod
    def of(cls, trace: pa.Table) -> _EdgeGraph:
        nodes = node_codes(trace)
        n_nodes = len(nodes.names)
        ekey, edge = np.unique(nodes.sender * n_nodes + nodes.receiver, return_inverse=True)
        edge = edge.ravel()
        src, dst = ekey // n_nodes, ekey % n_nodes
        out_edges: list[list[int]] = [[] for _ in range(n_nodes)]
        in_edges: list[list[int]] = [[] for _ in range(n_nodes)]
        for e, (a, b) in enumerate(zip(src.tolist(), dst.tolist(), strict=True)):
            out_edges[a].append(e)
            in_edges[b].append(e)
        ops = op_codes(trace)
        size = np.bincount(edge, minlength=ekey.size)
        calls = np.bincount(edge[ops == OP_CALL], minlength=ekey.size) == size
        returns = np.bincount(edge[ops == OP_RETURN], minlength=ekey.size) == size
        return cls(
            nodes.names,
            nodes.sender,
            nodes.receiver,
            edge,
            src,
            dst,
            out_edges,
            in_edges,
            calls,
            returns,
        )

    def one_for_one(self, e_in: int, e_out: int, corr: Correlator) -> bool:
        """Whether each message of ``e_in`` causes one of ``e_out``: ``e_out`` answers the
        calls of ``e_in`` (``answers``), or relays them: A -> B and B -> C carry only
        calls, and B is called over A -> B alone, as often as it calls C but for what
        the capture's ends cut (``_relay_counts_agree``)."""
        if self.answers(e_in, e_out):
            return True
        b = self.dst[e_in]
        if not (self.calls[e_in] and self.calls[e_out] and self.src[e_out] == b):
            return False
        callers = [e for e in self.in_edges[b] if self.calls[e]]
        return callers == [e_in] and _relay_counts_agree(corr, e_in, e_out)

    def answers(self, e_in: int, e_out: int) -> bool:
        """Whether ``e_out`` carries the answers to the calls of ``e_in``: A->B all calls,
        B->A all returns."""
        return bool(
            self.calls[e_in]
            and self.returns[e_out]
            and self.src[e_in] == self.dst[e_out]
            and self.dst[e_in] == self.src[e_out]
        )

    @property
    def n_edges(self) -> int:
        return int(self.src.size)

    def label(self, e: int) -> str:
        return f"{self.names[self.src[e]]}->{self.names[self.dst[e]]}"


def _relay_counts_agree(corr: Correlator, e_in: int, e_out: int) -> bool:
    """Whether ``e_out`` carries one call for each of ``e_in``'s, but for those a capture's
    ends cut: a call in the last lag window may be relayed after the capture stopped, a
    relay in the first may answer a call from before it began. A node that forwards
    only some of its calls (a cache answering the rest) falls short by more."""
    _, late_in = corr.at_ends(e_in, corr.max_lag)
    early_out, _ = corr.at_ends(e_out, corr.max_lag)
    short = int(corr.counts[e_in]) - int(corr.counts[e_out])
    return -early_out <= short <= late_in


#: Messages per edge below which a run is said to rest on few (measured: docs/convolution.md).
FEW_PER_EDGE = 500


def _correlator(
    trace: pa.Table, edges: _EdgeGraph, params: ConvolutionParams, notes: list[str]
) -> tuple[Correlator, int, int]:
    """The per-edge signals of ``trace`` at the quantum asked for, lags cut to half the
    trace where longer (noted), and the trace's first and last timestamps (ns)."""
    if trace.num_rows == 0:
        raise SchemaError("the trace has no messages")
    quantum_s = params.quantum_s
    ts = trace["timestamp"].cast(pa.int64()).to_numpy()
    t0, t1 = int(ts[0]), int(ts[-1])
    if t1 == t0:
        raise SchemaError(
            f"all {trace.num_rows:,} messages share one timestamp (the trace spans 0 s): "
            "convolution needs messages spread over time"
        )
    span_s = (t1 - t0) / 1e9  # Python ints: exact whatever the span
    if quantum_s > span_s:
        raise ParameterError(
            f"quantum {quantum_s:g} s is longer than the trace ({span_s:g} s): choose a quantum well "
            f"below the span, e.g. {span_s / 1000:.3g} s"
        )
    slots = np.floor(offsets_ns(ts, t0) / (quantum_s * 1e9)).astype(np.int64)
    n_slots = int(slots[-1]) + 1
    max_lag = int(params.max_lag_s / quantum_s)
    if max_lag > n_slots // 2:
        # Beyond half the trace two signals overlap too little for a fair background.
        if n_slots // 2 < MIN_LAGS:
            raise ParameterError(
                f"the trace spans only {n_slots} quanta of {quantum_s:g} s; the spike statistics need "
                f"lags up to at least {MIN_LAGS} quanta within half the trace: use a quantum of at most "
                f"{span_s / (2 * MIN_LAGS + 2):.3g} s"
            )
        notes.append(
            f"max_lag cut from {params.max_lag_s:g} s to half the trace ({n_slots // 2 * quantum_s:g} s): "
            "longer lags overlap too little"
        )
        max_lag = n_slots // 2
    if edges.n_edges == 1:
        notes.append(
            f"the trace has one directed edge ({edges.label(0)}): there is no edge "
            "pair to correlate, so no causal delay to find"
        )
    per_edge = trace.num_rows / max(edges.n_edges, 1)
    if per_edge < FEW_PER_EDGE and edges.n_edges > 1:
        notes.append(
            f"{per_edge:,.0f} messages an edge: below about {FEW_PER_EDGE} an edge convolution misses "
            "paths (samples/synth/mail.toml: all 40 true paths found at 625 messages an edge, 35 of 40 "
            "at 188, 23 of 37 at 63) and a spike of noise may pass for a delay; treat these paths as "
            "hints, and a longer capture gives firmer ones"
        )
    # Negative lags: the ring of the local background reaches that far below lag 0 (so it
    # is as wide there as elsewhere), plus the margin the plausibility test looks into.
    neg = _RING * (params.band_quanta + 1) + params.band_quanta + _NEG_MARGIN
    corr = Correlator(slots, edges.edge, edges.n_edges, n_slots, max_lag, neg, method=params.method, times=ts)
    return corr, t0, t1


def _new_stats(trace: pa.Table, edges: _EdgeGraph, corr: Correlator) -> dict[str, Any]:
    """The run's counters, at zero."""
    counters = (
        "pairs_correlated spikes spikes_negative spikes_at_max_lag spikes_too_few_pairs "
        "spikes_within_quantum spikes_fine cut_min_count cut_repeats cut_root cut_depth "
        "short_delays short_hops"
    )
    return {
        "messages": trace.num_rows,
        "edges": edges.n_edges,
        "quanta": corr.n_slots,
        "fft_length": corr.n_fft,
        **dict.fromkeys(counters.split(), 0),
    }


def _start_candidates(
    trace: pa.Table, edges: _EdgeGraph, params: ConvolutionParams
) -> tuple[list[int], list[int]]:
    """The edges that start paths whatever the correlations say, and the edges that do
    if the edges into their sender explain less than ``root_share`` of them."""
    names = edges.names
    if params.root is not None:
        index = {n: i for i, n in enumerate(names)}
        start = []
        for r in params.root:
            if r not in index:
                raise ParameterError(f"root {r!r} is not a node of the trace (nodes: {', '.join(names)})")
            if not edges.out_edges[index[r]]:
                senders = sorted({names[a] for a in edges.src.tolist()})
                raise ParameterError(f"root {r!r} sends no messages (nodes that send: {', '.join(senders)})")
            start += edges.out_edges[index[r]]
        return start, []
    start, tested = [], []
    answers, clients = _rpc_roles(op_codes(trace), edges.sender, edges.receiver, len(names))
    for e in range(edges.n_edges):
        if answers[edges.src[e]]:
            continue  # it sends only returns, each to a call it received first
        if not edges.in_edges[edges.src[e]] or clients[edges.src[e]]:
            start.append(e)
        else:
            tested.append(e)
    return start, tested


def _start_edges(
    candidates: tuple[list[int], list[int]],
    edges: _EdgeGraph,
    pairs: _Pairs,
    params: ConvolutionParams,
    notes: list[str],
) -> list[int]:
    """The edges paths start with: every edge out of the roots given, or, found, the
    edges whose messages the edges into their sender explain less than ``root_share``
    of (a node that only answers calls starts nothing); ``candidates`` are those of
    :func:`_start_candidates`."""
    start, tested = list(candidates[0]), candidates[1]
    if params.root is not None:
        return start
    counts = pairs.corr.counts
    for e in tested:
        into = edges.in_edges[edges.src[e]]
        explained = sum(pairs.explained(z, e) for z in into) / max(counts[e], 1)
        if explained < params.root_share:
            start.append(e)
    if not start:
        notes.append(
            "no node starts activity: every edge is explained by the edges into its sender "
            "(a closed loop?); give root= (--root NODE)"
        )
    return sorted(start)


#: Tasks per worker thread: enough that a slow task does not hold up the end.
_GROUPS_PER_SLOT = 4


def _wanted_pairs(
    edges: _EdgeGraph, params: ConvolutionParams, candidates: tuple[list[int], list[int]]
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Every (edge in, edge out) pair the run can ask for, by node, and the pairs that
    judge the tested start edges in the order the run asks for them (first, whatever
    the spikes). The others are those of every edge within ``max_depth`` hops of a
    candidate start edge with the edges out of its end: growth asks for these, and for
    them only, whatever spikes it finds."""
    start, tested = candidates
    first = [(z, e) for e in tested for z in edges.in_edges[edges.src[e]]]
    wanted = set(first)
    depth = dict.fromkeys([*start, *tested], 1)
    frontier = list(depth)
    while frontier:
        nxt = []
        for e in frontier:
            for f in edges.out_edges[edges.dst[e]]:
                wanted.add((e, f))
                if f not in depth and depth[e] < params.max_depth:
                    depth[f] = depth[e] + 1
                    nxt.append(f)
        frontier = nxt
    return sorted(wanted, key=lambda k: (edges.dst[k[0]], k[0], k[1])), first


_held = threading.local()  # per worker thread: its working copy of each shipped correlator


def _working_copy(corr: Correlator) -> Correlator:
    """This thread's copy of a shipped correlator: caches of its own (``copy.copy``
    drops them), never shared between threads, kept for the thread's next tasks on the
    same signals (a node's edges are another node's too) and let go with the original."""
    copies = getattr(_held, "copies", None)
    if copies is None:
        copies = _held.copies = weakref.WeakKeyDictionary()
    twin = copies.get(corr)
    if twin is None:
        twin = copies[corr] = copy.copy(corr)
    return twin


def _correlate_group(
    group: list[tuple[int, int, bool]], *, corr: Correlator, params: ConvolutionParams
) -> list[_PairResult]:
    """A task: the spikes of each ``(edge in, edge out, direct)`` of ``group``."""
    corr = _working_copy(corr)
    out = []
    for e_in, e_out, direct in group:
        tally = dict.fromkeys(_TALLIED, 0)
        spikes, window, curve = _pair_spikes(corr, params, e_in, e_out, tally, direct)
        out.append(_PairResult(spikes, window, tuple((k, n) for k, n in tally.items() if n), curve))
    return out


#: The counters ``_pair_spikes`` adds to.
_TALLIED = (
    "spikes",
    "spikes_negative",
    "spikes_at_max_lag",
    "spikes_too_few_pairs",
    "spikes_within_quantum",
    "spikes_fine",
)


def _correlate_on(
    runner: Runner,
    corr: Correlator,
    params: ConvolutionParams,
    wanted: tuple[list[tuple[int, int]], list[tuple[int, int]]],
) -> dict[tuple[int, int, bool], _PairResult]:
    """The spikes of every pair of ``wanted`` (see :func:`_wanted_pairs`) by
    ``runner``'s tasks, keyed by pair and method (``True``: direct).

    A single process chooses a pair's method by what its spectra cache holds when the
    pair comes up, and the two methods agree only to rounding. For the pairs asked
    first, in a known order, the choice is replayed here; a pair that growth asks for
    in an order its spikes decide is, near the break-even, computed both ways, and the
    run takes the one it would have chosen (``Correlator.replay``). The correlator goes
    to each worker once (per-message slots and times, no caches); a task holds
    consecutive pairs of one or a few nodes, and each worker thread keeps the spectra it
    computes for its next tasks.
    """
    pairs, first = wanted
    known = {pair: (d,) for pair, d in zip(first, corr.plan(first), strict=True)}
    jobs = [(a, b, d) for a, b in pairs for d in known.get((a, b)) or corr.methods(a, b)]
    if not jobs:
        return {}
    # Relative cost of each job, to cut the list into groups of even work: an FFT pair
    # two inverse transforms and up to four forward ones, a direct pair its slot pairs.
    log_n = float(np.log2(corr.n_fft))
    cost = np.array(
        [8.0 * corr.direct_cost(a, b) if d else 16.0 * corr.n_fft * log_n for a, b, d in jobs]
    ) + 64.0 * (corr.neg + corr.max_lag)  # the spike search, per pair
    parts = min(len(jobs), _GROUPS_PER_SLOT * runner.width)
    cuts = np.searchsorted(np.cumsum(cost), cost.sum() * np.arange(1, parts) / parts)
    bounds = [0, *np.unique(cuts + 1).tolist(), len(jobs)]
    groups = [jobs[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    results = runner.map(_correlate_group, groups, corr=corr, params=params)
    return {
        job: r for group, rs in zip(groups, results, strict=True) for job, r in zip(group, rs, strict=True)
    }


def _grow(
    start: list[int],
    edges: _EdgeGraph,
    pairs: _Pairs,
    params: ConvolutionParams,
    stats: dict[str, Any],
    notes: list[str],
) -> tuple[list[_Vertex], dict[int, int]]:
    """The vertex tree grown from the roots, depth first: from each vertex, every edge
    out of its node whose correlation with the edge in has spikes. Returns the vertices
    and each root node's vertex."""
    counts = pairs.corr.counts
    verts: list[_Vertex] = []
    root_vertex: dict[int, int] = {}
    stack: list[int] = []
    for e in sorted(start, key=lambda e: (edges.src[e], edges.dst[e])):
        a = int(edges.src[e])
        if a not in root_vertex:
            root_vertex[a] = len(verts)
            verts.append(_Vertex(a, -1, -1, 0, ()))
        rv = root_vertex[a]
        if counts[e] < params.min_count:
            stats["cut_min_count"] += 1
            continue
        verts.append(_Vertex(int(edges.dst[e]), e, rv, 1, (), count=float(counts[e])))
        verts[rv].children.append(len(verts) - 1)
        stack.append(len(verts) - 1)
    while stack:
        v = stack.pop()
        vx = verts[v]
        out = edges.out_edges[vx.node]
        if not params.through_root and vx.depth > 0 and vx.node == verts[_root_of(verts, v)].node:
            stats["cut_root"] += any(pairs.spikes(vx.edge, e) for e in out)
            continue
        if vx.depth >= params.max_depth:
            stats["cut_depth"] += any(pairs.spikes(vx.edge, e) for e in out)
            continue
        used = _transitions(verts, v)
        for e in out:
            spikes = pairs.spikes(vx.edge, e)
            if not spikes:
                continue
            if used.get((vx.edge, e), 0) > params.max_repeats:
                stats["cut_repeats"] += 1
                continue
            c = vx.count * _edge_fraction(spikes, counts[vx.edge], counts[e])
            if c < params.min_count:
                stats["cut_min_count"] += 1
                continue
            if len(verts) >= params.max_vertices:
                notes.append(f"the graph was cut at {params.max_vertices:,} vertices (max_vertices)")
                return verts, root_vertex
            median = pairs.median(vx.edge, e)
            verts.append(_Vertex(int(edges.dst[e]), e, v, vx.depth + 1, spikes, count=c, median_s=median))
            vx.children.append(len(verts) - 1)
            stack.append(len(verts) - 1)
    return verts, root_vertex


def _join_medians(verts: list[_Vertex], pairs: _Pairs) -> None:
    """Give each hop into a join its median (``_Pairs.join_median``), once every pair
    the paths reach is correlated: a join's inputs come by different paths. Many
    vertices share a hop (the same edges in and out): each hop's median is read once."""
    medians: dict[tuple[int, int], float | None] = {}
    for vx in verts:
        if vx.parent < 0 or vx.median_s is not None or not vx.spikes:
            continue
        hop = (verts[vx.parent].edge, vx.edge)
        if hop[0] >= 0:
            if hop not in medians:
                medians[hop] = pairs.join_median(*hop)
            vx.median_s = medians[hop]


def _transitions(verts: list[_Vertex], v: int) -> dict[tuple[int, int], int]:
    """How often each transition (edge in, edge out) occurs on the path to vertex ``v``."""
    used: dict[tuple[int, int], int] = {}
    u = v
    while verts[u].parent >= 0 and verts[verts[u].parent].edge >= 0:
        t = (verts[verts[u].parent].edge, verts[u].edge)
        used[t] = used.get(t, 0) + 1
        u = verts[u].parent
    return used


def _vertex_graph(verts: list[_Vertex], edges: _EdgeGraph) -> nx.DiGraph:
    """The live vertices as a graph: nodes with their node name and depth, edges with the
    trace's edge, the estimated messages and the spikes."""
    import networkx as nx  # only here: importing it costs every command line a tenth of a second

    graph = nx.DiGraph()
    alive = [k for k, vx in enumerate(verts) if vx.alive]
    for k in alive:
        graph.add_node(k, node=edges.names[verts[k].node], depth=verts[k].depth)
    for k in alive:
        vx = verts[k]
        if vx.parent >= 0:
            graph.add_edge(
                vx.parent,
                k,
                edge=edges.label(vx.edge),
                count=vx.count,
                spikes=list(vx.spikes),
                median_s=vx.median_s,
            )
    return graph


def _rpc_roles(
    ops: np.ndarray, sender: np.ndarray, receiver: np.ndarray, n_nodes: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per node, from the calls and returns of an RPC trace: whether it only answers
    (every message it sends is a return: never a root, however its answers' delays
    spread), and whether it only calls (it sends calls and is called by nobody: a
    client, a root however soon after an answer it calls again)."""
    sends = np.bincount(sender, minlength=n_nodes)
    returns = np.bincount(sender[ops == OP_RETURN], minlength=n_nodes)
    calls_out = np.bincount(sender[ops == OP_CALL], minlength=n_nodes)
    calls_in = np.bincount(receiver[ops == OP_CALL], minlength=n_nodes)
    return (sends > 0) & (returns == sends), (calls_out > 0) & (calls_in == 0)


def _root_of(verts: list[_Vertex], v: int) -> int:
    while verts[v].parent >= 0:
        v = verts[v].parent
    return v


def _subtree(verts: list[_Vertex], v: int) -> list[int]:
    out, stack = [], [v]
    while stack:
        u = stack.pop()
        if verts[u].alive:
            out.append(u)
            stack.extend(verts[u].children)
    return out


def _drop_short_paths(verts: list[_Vertex], params: ConvolutionParams, stats: dict[str, Any]) -> None:
    """Drop delays explained by a longer path from the same vertex (deepest vertices first).

    A hop v -> C at delay d is short when another child branch of v comes back to v's node
    (a vertex w) and w's own hop to C (the same edge) comes a cumulative d after v's
    message, within the tolerance: the short hop is that longer path with its middle
    left out.
    """
    # Cumulative delay ranges from each path's first message to each vertex's message.
    lo = np.zeros(len(verts))
    hi = np.zeros(len(verts))
    for k, vx in enumerate(verts):  # parents precede children
        if vx.parent >= 0 and vx.spikes:
            lo[k] = lo[vx.parent] + min(s.delay_s for s in vx.spikes)
            hi[k] = hi[vx.parent] + max(s.delay_s for s in vx.spikes)
        elif vx.parent >= 0:
            lo[k], hi[k] = lo[vx.parent], hi[vx.parent]
    order = sorted(range(len(verts)), key=lambda k: -verts[k].depth)
    for v in order:
        vx = verts[v]
        if not vx.alive or vx.edge < 0 or len(vx.children) < 2:
            continue
        for c in list(vx.children):
            cx = verts[c]
            if not cx.alive or not cx.spikes:
                continue
            rivals = []
            for other in vx.children:
                if other == c or not verts[other].alive:
                    continue
                for y in _subtree(verts, other):
                    if verts[y].edge == cx.edge and y != c:
                        hops = verts[y].depth - vx.depth
                        # Centroids locate a spike within a fraction of a quantum; peak
                        # lags only within one quantum per hop.
                        slack = 2 if params.delay_estimate == "centroid" else hops
                        tol = slack * params.quantum_s + params.band_s / 2
                        rivals.append((lo[y] - lo[v] - tol, hi[y] - hi[v] + tol))
            if not rivals:
                continue
            kept = tuple(s for s in cx.spikes if not any(a <= s.delay_s <= b for a, b in rivals))
            if len(kept) == len(cx.spikes):
                continue
            stats["short_delays"] += len(cx.spikes) - len(kept)
            if kept:
                cx.spikes = kept
                cx.median_s = None  # the pair's excess holds the delays dropped too
            else:
                stats["short_hops"] += 1
                for u in _subtree(verts, c):
                    verts[u].alive = False
        vx.children = [c for c in vx.children if verts[c].alive]


def _recount(
    verts: list[_Vertex], roots: Any, counts: np.ndarray, params: ConvolutionParams, stats: dict[str, Any]
) -> None:
    """Counts top-down after pruning; hops under ``min_count`` go, with their subtrees."""
    for vx in verts:  # parents precede children
        if not vx.alive or vx.parent < 0:
            continue
        par = verts[vx.parent]
        if not par.alive:
            vx.alive = False
            continue
        if par.edge >= 0:
            vx.count = par.count * _edge_fraction(vx.spikes, counts[par.edge], counts[vx.edge])
        if vx.count < params.min_count:
            vx.alive = False
            stats["cut_min_count"] += 1
    for vx in verts:
        vx.children = [c for c in vx.children if verts[c].alive]
    for r in roots:
        if not verts[r].children:
            verts[r].alive = False


def _linear_paths(verts: list[_Vertex], roots: Any, names: list[str]) -> list[LinearPath]:
    out = []
    for r in roots:
        if not verts[r].alive:
            continue
        stack = [(r, [r])]
        while stack:
            v, trail = stack.pop()
            kids = verts[v].children
            if not kids and len(trail) > 1:
                hops = [verts[k] for k in trail[1:]]
                out.append(
                    LinearPath(
                        nodes=tuple(names[verts[k].node] for k in trail),
                        delays_s=tuple(tuple(s.delay_s for s in h.spikes) for h in hops[1:]),
                        delay_counts=tuple(tuple(s.count for s in h.spikes) for h in hops[1:]),
                        counts=tuple(h.count for h in hops),
                        medians_s=tuple(h.median_s for h in hops[1:]),
                    )
                )
            for k in kids:
                stack.append((k, [*trail, k]))
    return out

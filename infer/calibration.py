"""Confidence that means what it says: each inferred parent's probability of being right.

Every stage of the nesting algorithm states its own odds for each parent it chooses
(``Stage.log_odds``): the scoreboards the winner's share of the scores, chain rounds
the chain model's odds against the neighbourhood of alternatives. Those odds are not
probabilities: a model learnt from the assignment it judges is sure of its own
mistakes (chain rounds stating 0.99 were right 86 times in 100 on a busy synthetic
trace), and the paper's scoreboard spreads one unit of weight over every candidate, so
it doubts what it gets right.

The map from odds to probability depends on the trace: how busy it is, how alike its
requests are, how much the delays tell apart. So it is learnt on the trace itself, on
a *synthetic twin* whose truth is known: the inferred requests (each a tree of calls
with its own timings) are dealt out again to the requests' start times in a random
order. The twin keeps the trace's nodes, delays, shapes and load (as many requests in
flight at each moment) while every parent is known; the same inference runs on it, and
the share of the twin's parents that are right at each level of the stated odds is the
calibration (isotonic: a higher odds never maps to a lower probability).

The twin is built from the inferred answer, so where that answer is mostly wrong its
requests are easier to put together again than the real ones: the twin is easier and
its map optimistic. A twin dealt out from the true requests is as hard as the trace,
and the model's mean log-likelihood per call tells the two apart: it is as high on a
twin of the true requests as on the trace, and higher on the answer's twin the more
optimistic that is. So each preset's probability is a logistic model, learnt on
synthetic truth (``OPTIMISM``), of the call's stated odds, the twin's map and that
gap, never raised past the twin's map above 0.98 (``corrected``); with settings
of one's own, which no fit was made for, a twin of the twin measures the optimism
where the truth is known (``twin_calibration``). docs/inference.md has how well each holds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from infer.callpairs import CallPairs
from infer.patterns import depths, log_confidence_by

__all__ = [
    "OPTIMISM",
    "ROUGH",
    "ROUGH_ELSEWHERE",
    "Calibration",
    "corrected",
    "correction_features",
    "isotonic",
    "logit",
    "map_odds",
    "optimism_features",
    "optimism_shift",
    "reliability",
    "reliability_lines",
    "rough_note",
    "sigmoid",
    "stretch_of",
    "twin_calibration",
    "twin_pairs",
]

#: Stated log-odds are clipped to this range before the map: beyond it a model's odds
#: only restate its certainty (roots and calls with a single candidate are inf).
_CLIP = (-30.0, 60.0)
#: Where a map reads odds of inf (a call with no other candidate): past the clip's top,
#: so that such calls, all but always right, are not pooled with the highest finite odds.
_SURE = _CLIP[1] + 1.0
#: Quantile bins of the stated odds that the isotonic fit starts from.
_BINS = 200
#: Instances' log-probabilities are floored here before their map (about 1e-13).
_LOG_FLOOR = -30.0
#: Outcomes at the stated probability each bin of a fit holds besides its own: a twin
#: of a handful of calls must not turn odds of 1 to 1 into certainty.
_PRIOR_WEIGHT = 2.0
#: Below this many calls given a parent there is too little to learn a map from: the
#: stated odds' own probabilities are kept.
MIN_LINKS = 200
#: The twin is made of at most this many call pairs (whole requests, a contiguous
#: stretch of time): enough to fit the map, and a bounded cost on long traces.
TWIN_MAX_PAIRS = 500_000
#: Per preset, the logistic model that turns a call's stated log-odds ``x`` and the
#: twin's map ``m(x)`` into its probability (``corrected``): ``(c, w_stated, w_twin, a,
#: b)`` of ``c + w_stated * x + w_twin * logit(m(x)) + shift``, ``shift = -(a + b *
#: logit(twin right rate)) * gap`` (``optimism_shift``), ``gap`` the answer's mean
#: log-likelihood per call on the twin less on the trace, raised past ``m(x)`` to at
#: most 0.98. Weighted logistic regression (each run weighing alike) on every call of 58
#: synthetic runs per preset (nine workloads at parallelism 2, 10 and 42, two seeds):
#: ``python benchmarks/calibration.py --fit``. Settings other than a preset's are
#: corrected by a twin of the twin instead (``twin_calibration``).
OPTIMISM: dict[str, tuple[float, float, float, float, float]] = {
    "accurate": (-0.096, 0.0, 0.969, 2.162, -1.094),
    "fast": (-0.259, 0.024, 0.970, 1.290, -0.855),
    "paper": (-0.295, 0.593, 0.797, 2.107, -0.592),
}
#: Per preset, the share of its parents a twin gets right below which the trace's
#: calibration is rough, and the worst ECE measured there on synthetic truth
#: (``benchmarks/calibration.py``, 50,000 and 200,000 messages per trace); every run
#: whose twin did better was within ``ROUGH_ELSEWHERE``.
ROUGH: dict[str, tuple[float, float]] = {
    "accurate": (0.5, 0.064),
    "fast": (0.5, 0.058),
    "paper": (0.65, 0.069),
}
ROUGH_ELSEWHERE = 0.031
#: ``corrected`` raises no probability past the twin's map above this.
_RAISE_BOUND = 0.98
#: The shift is held within this many log-odds either way: beyond the fit's range.
_MAX_SHIFT = 3.0


def sigmoid(log_odds: np.ndarray) -> np.ndarray:
    """The probability of ``log_odds`` (inf gives 1)."""
    return 0.5 * (1.0 + np.tanh(0.5 * np.clip(log_odds, -700.0, 700.0)))


def isotonic(
    x: np.ndarray, y: np.ndarray, bins: int = _BINS, prior: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """A non-decreasing fit of ``y`` (0/1 outcomes) on ``x``, as knots ``(xs, ys)`` to
    interpolate between: ``x`` is cut at its quantiles into at most ``bins`` bins, and
    adjacent bins are pooled while a lower one has the higher mean (pool adjacent
    violators). A value that at least a bin's share of ``x`` holds is a bin of its own:
    the odds of calls with no other candidate (all read at one point, ``map_odds``) are
    not pooled with the highest finite odds, which are right less often. With ``prior`` (a
    probability per outcome), each bin also holds ``_PRIOR_WEIGHT`` outcomes at its mean
    prior: a bin of a few outcomes stays near what was stated, a bin of hundreds says
    what happened.

    Examples
    --------
    >>> xs, ys = isotonic(np.array([0.0, 1, 2, 3]), np.array([0, 1, 0, 1]), bins=4)
    >>> ys.tolist()
    [0.0, 0.0, 0.5, 0.5, 1.0, 1.0]
    >>> x = np.array([1.0, 2, 3, 4, 9, 9, 9])  # 9: calls with no other candidate
    >>> isotonic(x, np.array([0, 1, 0, 0, 1, 1, 1]), bins=3)[1].tolist()
    [0.25, 0.25, 1.0, 1.0]
    """
    if x.size == 0:
        return np.array([0.0]), np.array([1.0])
    values, counts = np.unique(x, return_counts=True)
    masses = values[counts * bins >= x.size]
    edges = np.unique(
        np.concatenate(
            [np.quantile(x, np.linspace(0.0, 1.0, bins + 1)), masses, np.nextafter(masses, np.inf)]
        )
    )
    b = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, max(edges.size - 2, 0))
    n = np.bincount(b, minlength=edges.size).astype(float)
    hits = np.bincount(b, weights=y.astype(float), minlength=edges.size)
    if prior is not None:
        mean_prior = np.bincount(b, weights=prior, minlength=edges.size) / np.maximum(n, 1)
        hits = hits + _PRIOR_WEIGHT * mean_prior * (n > 0)
        n = n + _PRIOR_WEIGHT * (n > 0)
    lo = np.full(edges.size, np.inf)
    hi = np.full(edges.size, -np.inf)
    np.minimum.at(lo, b, x)
    np.maximum.at(hi, b, x)
    keep = n > 0
    n, hits, lo, hi = n[keep], hits[keep], lo[keep], hi[keep]
    # Pool adjacent violators over a few hundred bins: a short loop, not one per call.
    blocks: list[list[float]] = []  # [hits, n, lo, hi]
    for k in range(n.size):
        blocks.append([hits[k], n[k], lo[k], hi[k]])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            h2, n2, _, hi2 = blocks.pop()
            blocks[-1][0] += h2
            blocks[-1][1] += n2
            blocks[-1][3] = hi2
    xs = np.array([v for blk in blocks for v in (blk[2], blk[3])])
    ys = np.repeat([blk[0] / blk[1] for blk in blocks], 2)
    return xs, ys


@dataclass(frozen=True)
class Calibration:
    """A learnt map from stated log-odds to the probability of being right.

    Attributes
    ----------
    xs, ys : ndarray
        Knots of the non-decreasing map (log-odds as ``map_odds`` reads them; probability).
    twin_pairs : int
        Calls given a parent in the synthetic twin it was learnt on (0: no twin).
    twin_right_rate : float or None
        The share of the twin's parents the inference got right: an estimate, on the
        optimistic side, of the share right on the trace itself.
    kind : {"twin", "keys", "none"}
        ``"twin"``: the map learnt on the twin; ``"keys"``: learnt on the trace's own
        keyed calls, hidden a fold at a time (``NestingParams.calibrate_from``);
        ``"none"``: not calibrated (not asked for, or too few calls), the stated odds'
        own probabilities.
    """

    xs: np.ndarray
    ys: np.ndarray
    twin_pairs: int = 0
    twin_right_rate: float | None = None
    kind: str = "none"
    #: The share right on the twin of the twin (of its own truth): how much easier a
    #: twin made from an answer is than what the answer came from.
    second_right_rate: float | None = None
    #: The run's term of the preset's correction in log-odds (``optimism_shift``: from
    #: the likelihood gap), where the preset has coefficients (``OPTIMISM``).
    optimism: float | None = None
    #: Knots of the map from an instance's stated log-probability (the sum of its calls'
    #: calibrated log-confidences) to the probability that it is exactly right: its
    #: calls' mistakes are not independent (a swap makes two at once). Empty: the product.
    instance_xs: np.ndarray = field(default_factory=lambda: np.zeros(0))
    instance_ys: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @classmethod
    def identity(cls) -> Calibration:
        """No calibration: the stated odds' own probabilities."""
        return cls(np.zeros(0), np.zeros(0))

    @classmethod
    def learn(cls, log_odds: np.ndarray, right: np.ndarray) -> Calibration:
        """Fit the map on stated odds and whether each was right (roots left out)."""
        xs, ys = _odds_map(log_odds, right)
        return cls(xs, ys, int(right.size), float(right.mean()) if right.size else None, "twin")

    def apply(self, log_odds: np.ndarray) -> np.ndarray:
        """Probabilities of the stated ``log_odds`` of calls given a parent. Odds of inf
        (a call with no other candidate) are a bin of their own in a map learnt from a
        twin that had such calls (``map_odds``; else they read as its highest odds): the
        twin says how often they are right. ``log_odds`` are stated odds, not
        ``map_odds``' values (it would read the sure calls' point as finite odds).

        Examples
        --------
        >>> c = Calibration(np.array([0.0, 60.0]), np.array([0.5, 0.9]))
        >>> c.apply(np.array([-5.0, 30.0, np.inf])).tolist()
        [0.5, 0.7, 0.9]
        """
        if self.xs.size == 0:
            return sigmoid(log_odds)
        return np.interp(map_odds(log_odds), self.xs, self.ys)

    def apply_instances(self, log_product: np.ndarray) -> np.ndarray:
        """The probability that each instance is exactly right, from the sum of its calls'
        log-confidences (the product itself where no instance map was learnt).

        Examples
        --------
        >>> Calibration.identity().apply_instances(np.log([0.5, 1.0])).tolist()
        [0.5, 1.0]
        """
        if self.instance_xs.size == 0:
            return np.exp(log_product)
        return np.interp(np.maximum(log_product, _LOG_FLOOR), self.instance_xs, self.instance_ys)

    def to_json(self) -> dict[str, Any]:
        """The summary a paths file's ``stats.confidence`` holds."""
        return {
            "calibration": self.kind,
            "twin_pairs": self.twin_pairs,
            "twin_right_rate": None if self.twin_right_rate is None else round(self.twin_right_rate, 6),
            "second_twin_right_rate": None
            if self.second_right_rate is None
            else round(self.second_right_rate, 6),
            "optimism": None if self.optimism is None else round(self.optimism, 6),
        }


def rough_note(doc: dict[str, Any]) -> str | None:
    """What a nesting paths file's reader should know when its confidence is rough: its
    preset's twin got fewer of its parents right than ``ROUGH`` marks (None otherwise,
    for settings of one's own, without calibration, and with one learnt on the trace's
    own keys).

    Examples
    --------
    >>> doc = {"params": {"preset": "accurate"}, "stats": {"confidence": {"twin_right_rate": 0.3}}}
    >>> rough_note(doc)[:60]
    'confidence is rough on a trace this busy: its twin got 30.0%'
    >>> rough_note({"params": {"preset": "accurate"}, "stats": {"confidence": {"twin_right_rate": 0.8}}})
    """
    confidence = (doc.get("stats") or {}).get("confidence") or {}
    twin = confidence.get("twin_right_rate")
    below, worst = ROUGH.get((doc.get("params") or {}).get("preset") or "", (0.0, 0.0))
    if twin is None or twin >= below or confidence.get("calibration") == "keys":
        return None
    return (
        f"confidence is rough on a trace this busy: its twin got {twin:.1%} of its parents right; "
        f"on synthetic traces whose twin got under {below:.0%}, this preset's stated confidences "
        f"were off by up to {worst:.3f} (ECE), elsewhere by {ROUGH_ELSEWHERE:.3f} at most"
    )


def twin_pairs(
    pairs: CallPairs,
    parent: np.ndarray,
    *,
    seed: int = 0,
    max_pairs: int = TWIN_MAX_PAIRS,
    keys: np.ndarray | None = None,
) -> tuple[CallPairs, np.ndarray]:
    """A synthetic twin of a trace's call pairs and its true parents.

    Each inferred request (a root and its descendants, with their timings relative to
    the root) is moved whole to the start time of another request, drawn without
    replacement: the same requests and the same start times, so the same load, in
    another order. On a trace of more than ``max_pairs`` pairs the twin is made of the
    requests starting in a stretch of time from its middle holding about that many.
    With ``keys`` (per pair, the request key it carried; -1: none) each twin pair whose
    pair carried one carries its twin request's (``CallPairs.key``, to be spread with
    ``infer.keys.close_keys``): the same calls keyed as on the trace.

    Returns the twin's pairs (in call order) and each one's true parent.

    Examples
    --------
    >>> p = CallPairs(np.array([0, 1, 0, 1]), np.array([1, 2, 1, 2]), np.array([0, 1, 10, 12]),
    ...     np.array([5, 3, 15, 13]), np.arange(4), np.arange(4), 0, 0, 0)
    >>> twin, truth = twin_pairs(p, np.array([-1, 0, -1, 2]), seed=1)
    >>> len(twin), truth.tolist()
    (4, [-1, 0, -1, 2])
    """
    root = depths(parent)[1]
    keep = _stretch(pairs, root, max_pairs)
    roots = keep[parent[keep] < 0]
    start = pairs.t_call[roots]
    shift = np.zeros(len(pairs), np.int64)
    shift[roots] = np.random.default_rng(seed).permutation(start) - start
    moved = shift[root[keep]]
    order = np.argsort(pairs.t_call[keep] + moved, kind="stable")
    twin, truth = _taken(pairs, parent, keep[order], moved[order])
    if keys is not None:
        index = keep[order]
        key = np.where(keys[index] >= 0, root[index], -1)
        twin = replace(twin, key=key, strict=np.zeros(index.size, bool))
    return twin, truth


def _taken(
    pairs: CallPairs, parent: np.ndarray, index: np.ndarray, moved: np.ndarray | int = 0
) -> tuple[CallPairs, np.ndarray]:
    """The pairs ``index`` (in that order, their times moved by ``moved``) as call pairs of
    their own, and their parents renumbered among them (-1 for a parent not taken)."""
    at = np.full(len(pairs), -1, np.int64)
    at[index] = np.arange(index.size)
    old = parent[index]
    rows = np.arange(index.size, dtype=np.int64)
    taken = CallPairs(
        pairs.caller[index],
        pairs.callee[index],
        pairs.t_call[index] + moved,
        pairs.t_return[index] + moved,
        rows,
        rows,
        0,
        0,
        0,
    )
    return taken, np.where(old >= 0, at[np.maximum(old, 0)], -1)


#: Stated odds and the twin's probabilities enter ``corrected`` as log-odds held within
#: this bound (probabilities within 1e-6 of 0 and 1): odds beyond only restate certainty.
_LOGIT_BOUND = float(np.log((1 - 1e-6) / 1e-6))


def logit(p: np.ndarray | float) -> np.ndarray:
    """The log-odds of ``p``, held within 1e-6 of 0 and 1 (``sigmoid``'s inverse there).

    Examples
    --------
    >>> logit(np.array([0.5, 1.0])).round(2).tolist()
    [0.0, 13.82]
    """
    p = np.clip(p, 1e-6, 1 - 1e-6)
    return np.log(p / (1 - p))


def optimism_shift(
    gap: float, twin_right_rate: float, coefficients: tuple[float, float, float, float, float]
) -> float:
    """The run's term of ``corrected``: ``-(a + b * logit(twin right rate)) * gap``
    with ``a, b`` the last two of the preset's ``coefficients`` (``OPTIMISM``), held
    within ``_MAX_SHIFT``; ``gap`` is the answer's mean log-likelihood per call on the
    twin less on the trace (positive: the twin is the easier).

    Examples
    --------
    >>> coef = (0.0, 0.0, 1.0, 2.0, -2.0)
    >>> round(optimism_shift(0.2, 0.3, coef), 3)  # an easy twin, right 3 in 10
    -0.739
    >>> optimism_shift(0.0, 0.9, coef) + 0.0  # no gap, no shift
    0.0
    """
    if not np.isfinite(gap):  # a likelihood that could not be taken says nothing
        return 0.0
    shift = float(optimism_features(gap, twin_right_rate) @ np.asarray(coefficients[3:], float))
    return float(np.clip(shift, -_MAX_SHIFT, _MAX_SHIFT))


def optimism_features(gap: float, twin_right_rate: float) -> np.ndarray:
    """What ``OPTIMISM``'s last two coefficients multiply: ``-gap`` and ``-gap *
    logit(twin right rate)`` (the rate held within 1e-6 of 0 and 1).

    Examples
    --------
    >>> optimism_features(0.1, 0.5).tolist()
    [-0.1, -0.0]
    """
    return np.array([-gap, -gap * float(logit(twin_right_rate))])


def correction_features(
    stated: np.ndarray, twin: np.ndarray, gap: float, twin_right_rate: float
) -> np.ndarray:
    """The columns ``OPTIMISM``'s coefficients multiply, one row per call: 1, the stated
    log-odds and the twin map's probability as log-odds (both held within
    ``_LOGIT_BOUND``), and ``optimism_features``; ``benchmarks/calibration.py --fit``
    learns the coefficients on them.

    Examples
    --------
    >>> correction_features(np.array([0.0, np.inf]), np.array([0.5, 1.0]), 0.1, 0.5).round(2).tolist()
    [[1.0, 0.0, 0.0, -0.1, -0.0], [1.0, 13.82, 13.82, -0.1, -0.0]]
    """
    n = np.shape(stated)[0]
    return np.column_stack(
        [_call_columns(stated, twin), np.tile(optimism_features(gap, twin_right_rate), (n, 1))]
    )


def _call_columns(stated: np.ndarray, twin: np.ndarray) -> np.ndarray:
    """``correction_features``' columns of each call's own: 1, its stated log-odds and
    its twin map's probability as log-odds, both held within ``_LOGIT_BOUND``."""
    x = np.clip(stated, -_LOGIT_BOUND, _LOGIT_BOUND)
    return np.column_stack([np.ones(np.shape(stated)[0]), x, logit(twin)])


def corrected(
    stated: np.ndarray,
    twin: np.ndarray,
    gap: float,
    twin_right_rate: float,
    coefficients: tuple[float, float, float, float, float],
) -> np.ndarray:
    """The probability of calls with ``stated`` log-odds whose twin's map gives ``twin``:
    the logistic model of ``OPTIMISM`` (``coefficients``) on ``correction_features``,
    its run's term held by ``optimism_shift``. A probability may be raised past the
    twin's map to at most ``_RAISE_BOUND``: near certainty the twin's own evidence must
    carry it (raised there, 471 calls of one synthetic run of ``fast`` stated at 0.99 or
    more were right 94.5% of the time). Non-decreasing in ``stated`` where ``twin`` is,
    since the fit keeps both weights non-negative.

    Examples
    --------
    >>> coef = (0.0, 0.0, 1.0, 2.0, -2.0)  # the twin's map alone, moved for the gap
    >>> stated, twin = np.array([0.0, 5.0]), np.array([0.5, 0.97])
    >>> corrected(stated, twin, 0.2, 0.3, coef).round(3).tolist()  # an easier twin: down
    [0.323, 0.939]
    >>> corrected(stated, twin, -0.2, 0.3, coef).round(3).tolist()  # a harder one: up, 0.98 at most
    [0.677, 0.98]
    """
    x = _call_columns(stated, twin)
    shift = optimism_shift(gap, twin_right_rate, coefficients)
    p = sigmoid(x @ np.asarray(coefficients[:3], float) + shift)
    return np.minimum(p, np.maximum(twin, _RAISE_BOUND))


def _stretch(pairs: CallPairs, root: np.ndarray, max_pairs: int) -> np.ndarray:
    """The pairs a twin is made of: all, or on a trace of more than ``max_pairs`` pairs the
    whole requests (``root``: each pair's root) whose roots start in a middle stretch of
    about that many pairs."""
    n = len(pairs)
    if n <= max_pairs:
        return np.arange(n)
    order = np.argsort(pairs.t_call[root], kind="stable")
    lo = (n - max_pairs) // 2
    t_lo, t_hi = pairs.t_call[root[order[lo]]], pairs.t_call[root[order[lo + max_pairs - 1]]]
    return np.flatnonzero((pairs.t_call[root] >= t_lo) & (pairs.t_call[root] <= t_hi))


def stretch_of(
    pairs: CallPairs, parent: np.ndarray, max_pairs: int = TWIN_MAX_PAIRS
) -> tuple[CallPairs, np.ndarray]:
    """The pairs a twin of ``pairs`` is made of (``twin_pairs``), in their own times, and
    their parents renumbered among them: what the twin is compared with.

    Examples
    --------
    >>> t = np.array([0, 1, 10, 11, 20, 21])  # three requests of two calls
    >>> p = CallPairs(np.arange(6), np.arange(6), t, t + 5, np.arange(6), np.arange(6), 0, 0, 0)
    >>> part, par = stretch_of(p, np.array([-1, 0, -1, 2, -1, 4]), max_pairs=2)
    >>> part.t_call.tolist(), par.tolist()
    ([10, 11], [-1, 0])
    """
    return _taken(pairs, parent, _stretch(pairs, depths(parent)[1], max_pairs))


def twin_calibration(
    pairs: CallPairs,
    parent: np.ndarray,
    infer_parents: Callable[[CallPairs], tuple[np.ndarray, np.ndarray, float]],
    *,
    log_likelihood: float,
    optimism: tuple[float, float, float, float, float] | None = None,
    likelihood_of: Callable[[CallPairs, np.ndarray], float] | None = None,
    max_pairs: int = TWIN_MAX_PAIRS,
    seed: int = 0,
    keys: np.ndarray | None = None,
) -> Calibration:
    """Learn the calibration on a twin of ``pairs`` (``twin_pairs`` of the inferred
    ``parent``); ``infer_parents`` runs the same inference on a twin and returns its
    parents, stated log-odds and mean log-likelihood per call; ``log_likelihood`` is the
    answer's on the trace.

    A twin is made from an answer, not from the truth, and where the answer is often
    wrong the twin is easier and a map learnt on it alone optimistic. With
    ``optimism`` (the preset's ``OPTIMISM`` coefficients) a call's probability is
    ``corrected`` from its stated odds, the twin's map and how much better the model
    fits the twin's answer than the trace's (``optimism_shift``). Without, a twin of
    the twin, whose truth is known, measures how the twin's map misjudges a twin (a
    second, monotone map from the probability it states to the share right on the
    twin), and that is applied on top of the twin's map. With fewer than ``MIN_LINKS``
    calls given a parent, in the trace or in its twin, nothing is learnt
    (``Calibration.identity``).

    A twin of a trace longer than ``max_pairs`` is made of a stretch of it, and the mean
    likelihood per call depends on how many calls there are: then the gap is taken with
    ``likelihood_of(pairs, parent)`` (the model learnt from the assignment, its
    likelihood per call) on the trace's stretch and on the twin's answer alike.

    ``keys`` (per pair, the request key it carried, -1: none) keys the twin's calls as
    the trace's are (``twin_pairs``), so the twin is as easy as keys make the trace;
    ``infer_parents`` spreads them (``infer.keys.close_keys``).
    """
    if int((parent >= 0).sum()) < MIN_LINKS:
        return Calibration.identity()
    twin, truth = twin_pairs(pairs, parent, seed=seed, max_pairs=max_pairs, keys=keys)
    got, log_odds, twin_likelihood = infer_parents(twin)
    linked = got >= 0
    if int(linked.sum()) < MIN_LINKS:
        return Calibration.identity()
    right = got[linked] == truth[linked]
    first = Calibration.learn(log_odds[linked], right)
    # One map: the twin's, then the correction, on a fine grid of odds.
    # The grid is where the maps read odds (``map_odds``), so the twin's map is read on
    # it directly: ``apply`` would clip the sure calls' bin back into the finite odds'.
    grid = np.unique(np.concatenate([np.linspace(*_CLIP, 2001), first.xs]))
    twin_map = np.interp(grid, first.xs, first.ys)
    if optimism is not None:
        gap = twin_likelihood - log_likelihood
        if len(pairs) > max_pairs and likelihood_of is not None:
            gap = likelihood_of(twin, got) - likelihood_of(*stretch_of(pairs, parent, max_pairs))
        shift = optimism_shift(gap, float(right.mean()), optimism)
        ys = corrected(grid, twin_map, gap, float(right.mean()), optimism)
        calls = replace(first, xs=grid, ys=ys, optimism=shift)
    else:
        second_twin, second_truth = twin_pairs(twin, got, seed=seed + 1, keys=twin.key)
        got2, log_odds2, _ = infer_parents(second_twin)
        linked2 = got2 >= 0
        if int(linked2.sum()) < MIN_LINKS:
            return first
        right2 = got2[linked2] == second_truth[linked2]
        second = _odds_map(log_odds2[linked2], right2)
        stated = np.interp(map_odds(log_odds[linked]), *second)
        correction = isotonic(stated, right, prior=stated)
        calls = replace(
            first,
            xs=grid,
            ys=np.interp(twin_map, *correction),
            second_right_rate=float(right2.mean()),
        )
    # The request map goes from the product of calibrated confidences to being exactly
    # right: on the twin the twin's own map calibrates them, as ``calls`` does the trace's
    # (``calls`` on the twin would be under-confident and the map learnt from it optimistic).
    return _with_instance_map(calls, got, truth, np.where(got >= 0, first.apply(log_odds), 1.0))


def _with_instance_map(
    calibration: Calibration, got: np.ndarray, truth: np.ndarray, confidence: np.ndarray
) -> Calibration:
    """``calibration`` with the map from an instance's stated log-probability to whether
    it is exactly one whole true request, learnt on the twin (inferred ``got``, true
    ``truth``, each call's calibrated ``confidence``)."""
    root = depths(got)[1]
    true_root = depths(truth)[1]
    n = got.size
    log_product = log_confidence_by(root, confidence, n)
    wrong = np.bincount(root, weights=got != truth, minlength=n)
    size = np.bincount(root, minlength=n)
    true_size = np.bincount(true_root, minlength=n)
    roots = np.flatnonzero(got < 0)
    # Exact: every call's parent right (so all are of the root's true request) and none
    # of that request missing.
    exact = (wrong[roots] == 0) & (truth[roots] < 0) & (size[roots] == true_size[roots])
    stated = np.maximum(log_product[roots], _LOG_FLOOR)
    xs, ys = isotonic(stated, exact, prior=np.exp(stated))
    return replace(calibration, instance_xs=xs, instance_ys=ys)


def _odds_map(log_odds: np.ndarray, right: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The isotonic map from stated odds to the share right, each bin held towards the
    probability the odds state. Finite odds above the highest the fit saw read as those,
    not as a ramp up to the sure calls' bin.

    Examples
    --------
    >>> xs, ys = _odds_map(np.array([1.0, 2.0, np.inf, np.inf]), np.array([1, 0, 1, 1]))
    >>> np.interp([2.0, 40.0], xs, ys).round(3).tolist()
    [0.704, 0.704]
    """
    xs, ys = isotonic(map_odds(log_odds), right, prior=sigmoid(log_odds))
    finite = int((xs < _SURE).sum())
    if 0 < finite < xs.size and xs[finite - 1] < _CLIP[1]:
        xs, ys = np.insert(xs, finite, _CLIP[1]), np.insert(ys, finite, ys[finite - 1])
    return xs, ys


def map_odds(log_odds: np.ndarray) -> np.ndarray:
    """Where a map reads stated ``log_odds``: clipped to ``_CLIP``, and inf (a call with
    no other candidate) just past its top, as a bin of its own.

    Examples
    --------
    >>> map_odds(np.array([-100.0, 3.0, 75.0, np.inf])).tolist()
    [-30.0, 3.0, 60.0, 61.0]
    """
    return np.where(np.isposinf(log_odds), _SURE, np.clip(log_odds, *_CLIP))


def reliability(confidence: np.ndarray, right: np.ndarray, bins: int = 10) -> dict[str, Any]:
    """How stated confidence compares with the share right: the expected calibration
    error (ECE: the gap between the mean stated and the share right in each of
    ``bins`` equal bins of confidence, weighted by the calls in it), the reliability
    table, and the calls stated at 0.99 or more.

    Examples
    --------
    >>> r = reliability(np.array([0.9, 0.9, 0.2, 0.2]), np.array([1, 1, 0, 1]))
    >>> round(r["ece"], 3), [b["calls"] for b in r["bins"]]
    (0.2, [2, 2])
    """
    confidence = np.asarray(confidence, float)
    right = np.asarray(right, bool)
    b = np.minimum((confidence * bins).astype(np.int64), bins - 1)
    n = np.bincount(b, minlength=bins)
    stated = np.bincount(b, weights=confidence, minlength=bins)
    hits = np.bincount(b, weights=right, minlength=bins)
    rows, gap = [], 0.0
    for k in np.flatnonzero(n):
        mean, rate = stated[k] / n[k], hits[k] / n[k]
        gap += n[k] * abs(mean - rate)
        rows.append(
            {
                "low": float(k / bins),
                "high": float((k + 1) / bins),
                "calls": int(n[k]),
                "stated": float(mean),
                "right_rate": float(rate),
            }
        )
    sure = confidence >= 0.99
    return {
        "calls": int(right.size),
        "ece": float(gap / right.size) if right.size else None,
        "mean_stated": float(confidence.mean()) if right.size else None,
        "right_rate": float(right.mean()) if right.size else None,
        "bins": rows,
        "stated_99": {
            "calls": int(sure.sum()),
            "right_rate": float(right[sure].mean()) if sure.any() else None,
        },
    }


def reliability_lines(scores: dict[str, Any]) -> list[str]:
    """``wirepath eval``'s lines for the confidence scores of ``evaluate_paths``: ECE of
    calls and instances, the calls stated at 0.99 or more, and the calls' reliability
    table (stated against right, per bin)."""
    calls, inst = scores["calls"], scores["instances"]
    if not calls["calls"]:
        return ["confidence no call was given a parent"]
    sure = calls["stated_99"]
    sure_text = (
        f"{sure['calls']:,} stated at >= 0.99, right {sure['right_rate']:.1%}"
        if sure["calls"]
        else "none stated at >= 0.99"
    )
    lines = [
        f"confidence calls: ECE {calls['ece']:.3f} (stated {calls['mean_stated']:.3f}, right "
        f"{calls['right_rate']:.3f}); {sure_text}",
        f"           instances: ECE {inst['ece']:.3f} (stated {inst['mean_stated']:.3f}, exact "
        f"{inst['right_rate']:.3f})",
        "           stated       calls    mean stated  right",
    ]
    for b in calls["bins"]:
        span = f"{b['low']:.1f}-{b['high']:.1f}"
        lines.append(f"{'':11}{span}  {b['calls']:>10,}    {b['stated']:.3f}        {b['right_rate']:.3f}")
    return lines

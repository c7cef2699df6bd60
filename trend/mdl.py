"""Minimum-description-length grouping of a series: the groups of ``jumpavg`` 0.4.2 ``classify()``.

The series is cut into groups, each taken as one normal distribution; the cut is the one
whose total description length in bits is smallest. ``jumpavg`` finds it with a dynamic
program over group ends: after each run ``i`` it keeps, for every start ``j <= i``, the best
grouping of the runs before ``j`` followed by one open group ``[j, i]``, and records the
cheapest. That is ``N**2 / 2`` group evaluations, each a handful of Python objects.

Here the same program runs with one numpy vector per step: the running statistics of all
open groups are updated at once (the same Welford arithmetic, operation for operation, so
every average and deviation is bit-identical), their bits are computed as one vector, and
the few candidates within a hair of the cheapest are re-evaluated with ``jumpavg``'s scalar
formulas (``math.log``, ``math.lgamma``) so that ties and the kept bit totals are exactly
``jumpavg``'s, whatever the platform's vector ``log`` does. Ties go where ``jumpavg`` sends
them: to the new group first, then to the earliest start.

Old starts whose grouping already costs more than the best by a proven bound (see
``_prune_bound``) can never win again and are dropped, as in PELT: after a level shift the
work restarts from the shift instead of growing with the whole series.

Two runners of the same program, each where it is the faster: :func:`classify_mdl` runs
one series with numpy (no compiler to start, so ``trend compare`` answers at once, and a
single long series is cheapest with float32 estimates and a few exact re-evaluations);
:class:`MdlPrograms` runs many series at once, compiled (``trend._mdljit``), and keeps
each program to resume with more runs (``trend analyze`` of a whole store). The tests
hold them equal, group for group and bit for bit, on random series.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tracefmt import ParameterError
from trend.numbers import DIRECTIONS, MAX_SBPS, check_number

__all__ = [
    "DIRECTIONS",
    "MAX_SBPS",
    "MdlGroup",
    "MdlPrograms",
    "MdlResult",
    "check_direction",
    "classify_mdl",
    "group_bits",
    "renormalized",
    "resolve_unit",
    "run_stats",
    "trial_stats",
]

SBPS_WHAT = "sbps (significant bits per sample)"

_LN2 = math.log(2)
_SWAP = {"regression": "progression", "progression": "regression", "normal": "normal"}


@dataclass(frozen=True)
class MdlGroup:
    """One group of consecutive runs.

    ``start`` and ``size`` count runs (a run of several trials is one undivisible unit);
    ``samples`` counts the values inside; ``avg`` and ``stdev`` are population statistics of
    the samples; ``comment`` is ``normal`` for the first group, else ``regression`` or
    ``progression`` against the previous group (in the series' direction); ``bits`` is the
    group's description length.
    """

    start: int
    size: int
    samples: int
    avg: float
    stdev: float
    comment: str
    bits: float

    def to_json(self) -> dict[str, Any]:
        return {
            "start": self.start,
            "size": self.size,
            "samples": self.samples,
            "avg": self.avg,
            "stdev": self.stdev,
            "comment": self.comment,
            "bits": None if math.isnan(self.bits) else self.bits,
        }


@dataclass(frozen=True)
class MdlResult:
    """The grouping of a series: its groups, the total bits and the encoding parameters."""

    groups: tuple[MdlGroup, ...]
    total_bits: float
    unit: float
    max_value: float
    direction: str

    @property
    def runs(self) -> int:
        return sum(g.size for g in self.groups)

    def run_averages(self) -> np.ndarray:
        """AVG[t]: the average of the group holding run ``t``."""
        return np.repeat([g.avg for g in self.groups], [g.size for g in self.groups])

    def run_marks(self) -> np.ndarray:
        """Per run ``normal``, or ``regression``/``progression`` at the first run of such a group."""
        marks = np.full(self.runs, "normal", dtype=object)
        for g in self.groups:
            marks[g.start] = g.comment
        return marks

    def to_json(self) -> dict[str, Any]:
        return {
            "method": "mdl",
            "unit": self.unit,
            "max_value": self.max_value,
            "direction": self.direction,
            "total_bits": self.total_bits,
            "groups": [g.to_json() for g in self.groups],
        }


def check_direction(direction: str) -> None:
    """Raise a ParameterError naming the allowed directions unless ``direction`` is one.

    Examples
    --------
    >>> check_direction("smaller-is-better")
    >>> check_direction("up")
    Traceback (most recent call last):
    ...
    tracefmt.errors.ParameterError: unknown direction 'up' (must be one of bigger-is-better, ...)
    """
    if direction not in DIRECTIONS:
        raise ParameterError(f"unknown direction {direction!r} (must be one of {', '.join(DIRECTIONS)})")


def run_stats(values: Iterable[float | Iterable[float]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Sizes, averages and deviations of the runs as ``AvgStdevStats.for_runs`` computes them.

    Parameters
    ----------
    values : iterable of float or of sequences of float
        One item per run: a bare value, or the values of the run's trials.

    Returns
    -------
    sizes, averages, stdevs : numpy.ndarray
        Per run, float64: trials, their mean and population standard deviation (a bare
        value enters as itself, with deviation 0).
    max_value : float
        The largest value of the series (the scale of every group's bits).

    Raises
    ------
    ParameterError
        An empty series, a run without values, NaN, infinity, a negative or
        non-numeric value, or a series of zeros.

    Examples
    --------
    >>> sizes, avgs, sds, top = run_stats([1.0, [2.0, 4.0]])
    >>> sizes.tolist(), avgs.tolist(), sds.tolist(), top
    ([1.0, 2.0], [1.0, 3.0], [0.0, 1.0], 4.0)
    """
    items = list(values)
    if not items:
        raise ParameterError("empty series: MDL grouping needs at least one value")
    scalar = [isinstance(v, int | float | np.integer | np.floating) for v in items]
    rows = [[v] if s or isinstance(v, str | bytes) else list(v) for v, s in zip(items, scalar, strict=True)]
    lengths = np.array([len(r) for r in rows], dtype=np.int64)
    if (lengths == 0).any():
        raise ParameterError(
            f"run {int(np.argmax(lengths == 0))} has no values (every run needs one or more)"
        )
    width = int(lengths.max())
    table = np.zeros((len(rows), width))
    try:
        for k, r in enumerate(rows):
            table[k, : len(r)] = r
    except (TypeError, ValueError):
        raise ParameterError(f"run {k} holds a non-numeric value: {r!r}") from None
    present = np.arange(width) < lengths[:, None]
    if not np.isfinite(table[present]).all():
        k = int(np.argmax(~np.isfinite(table).all(axis=1) & present.any(axis=1)))
        raise ParameterError(f"run {k} holds NaN or infinity ({rows[k]!r}); drop failed runs first")
    if (table[present] < 0).any():
        k = int(np.argmax((table < 0).any(axis=1)))
        raise ParameterError(f"run {k} holds a negative value ({rows[k]!r}); measurements must be >= 0")
    max_value = float(table.max())
    if max_value <= 0.0:
        raise ParameterError("every value is 0: MDL grouping needs a positive maximum")
    avg, stdev = trial_stats(table, lengths)
    # A bare float enters jumpavg as itself, not through for_runs.
    single = np.array(scalar)
    avg[single] = table[single, 0]
    stdev[single] = 0.0
    return lengths.astype(np.float64), avg, stdev, max_value


def trial_stats(table: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Average and population deviation of each row's first ``lengths`` values, as
    ``AvgStdevStats.for_runs`` computes them (Welford, one value at a time).

    >>> [x.tolist() for x in trial_stats(np.array([[2.0, 4.0], [1.0, 0.0]]), np.array([2, 1]))]
    [[3.0, 1.0], [1.0, 0.0]]
    """
    # Welford over every row at once (one column a step). Values near float64's maximum
    # overflow to inf: the bits are then not finite, and classify_mdl refuses to decide on them.
    avg = np.zeros(len(table))
    m2 = np.zeros(len(table))
    with np.errstate(over="ignore", invalid="ignore"):
        for c in range(table.shape[1]):
            live = lengths > c
            x = table[:, c]
            delta = x - avg
            new_avg = avg + delta * 1 / (c + 1)
            new_m2 = m2 + delta * delta * c * 1 / (c + 1)
            avg = np.where(live, new_avg, avg)
            m2 = np.where(live, new_m2, m2)
        stdev = np.sqrt(m2 / lengths)
    return avg, stdev


def renormalized(n: float, avg: float, stdev: float) -> tuple[float, float]:
    """``AvgStdevStats.for_runs([stats])``: the statistics after one more pass (copies, new groups).

    ``jumpavg`` hands a group's statistics through ``for_runs`` again whenever it copies
    or opens a group; the float operations can move the last bit, so bit totals equal
    to ``jumpavg``'s need the same pass. ``n`` is the group's sample count.

    Examples
    --------
    >>> renormalized(3, 2.0, 0.5)
    (2.0, 0.5)
    """
    return 0.0 + avg * n / n, math.sqrt((0.0 + stdev * stdev * n) / n)


def group_bits(
    n: int, avg: float, stdev: float, max_value: float, unit: float, prev_avg: float | None
) -> float:
    """``BitCountingGroup.bits`` of a group with these statistics, operation for operation.

    Parameters
    ----------
    n : int
        Samples in the group.
    avg, stdev : float
        The group's statistics (as ``run_stats`` or ``renormalized`` give them).
    max_value : float
        The largest value of the whole series.
    unit : float
        The value that counts as one (``resolve_unit``).
    prev_avg : float or None
        The average of the group before, whose distance codes this group's average;
        None for the first group.

    Examples
    --------
    >>> round(group_bits(1, 10.0, 0.0, 10.0, 1.0, None), 6)
    4.459432
    >>> round(group_bits(3, 10.0, 0.5, 10.0, 1.0, 9.0), 6)
    14.067687
    """
    # The group hands its statistics through for_runs once more before counting.
    avg, stdev = renormalized(n, avg, stdev)
    bits = 0.0
    max_v = max_value / unit
    avg = avg / unit
    bits += math.log(n * (n + 1), 2)
    if prev_avg is None:
        bits += math.log(max_v + 1, 2)
    else:
        prev = prev_avg / unit
        norm = prev * prev
        norm -= (prev - 1) * max_v
        norm += max_v * max_v / 2
        bits -= math.log((abs(avg - prev) + 1) / norm, 2)
    if n < 2:
        return bits
    stdev = stdev / unit
    bits += math.log((stdev + 1) * (stdev + 2), 2)
    bits += math.log(1 - 1 / (max_v + 2), 2)
    sphere = math.log(2)
    sphere += math.log(math.pi) * ((n - 1) / 2)
    sphere -= math.lgamma((n - 1) / 2)
    sphere += math.log(stdev + 1) * (n - 2)
    sphere += math.log(n) * ((n - 2) / 2)
    return bits + sphere / math.log(2)


def classify_mdl(
    values: Sequence[float | Sequence[float]] | np.ndarray,
    *,
    unit: float | None = None,
    sbps: float | None = None,
    direction: str = "bigger-is-better",
) -> MdlResult:
    """Group a series by minimum description length, exactly as ``jumpavg.classify`` 0.4.2.

    Parameters
    ----------
    values : sequence of float or of sequences of float
        The runs in time order. A run given as a list of trials is one undivisible unit.
    unit : float, optional
        Resolution of the values; ``None`` or 0 derives it from ``sbps``. See
        :func:`resolve_unit` for the allowed ranges.
    sbps : float, optional
        Significant bits per sample (1 to 52): the unit is ``max / (2**(sbps+1) - 1)``;
        default 12.
    direction : str
        ``bigger-is-better`` (throughput: a lower group is a regression, as in jumpavg) or
        ``smaller-is-better`` (latency: a higher group is a regression).

    Returns
    -------
    MdlResult
        Groups with start, size, average, deviation, comment and bits, as ``jumpavg``.

    Raises
    ------
    ParameterError
        Empty series, an empty run, NaN, infinity, negative or non-numeric values, an
        all-zero series, an unknown direction, ``unit`` or ``sbps`` out of range, or a
        description length that is not finite.

    Examples
    --------
    >>> r = classify_mdl([2.1, 3.1, 3.2], unit=0.1)
    >>> [(g.start, g.size, round(g.avg, 2), g.comment) for g in r.groups]
    [(0, 1, 2.1, 'normal'), (1, 2, 3.15, 'progression')]
    >>> classify_mdl([5.0, 5.0, 5.0]).groups[0].comment
    'normal'
    """
    check_direction(direction)
    if isinstance(values, np.ndarray):
        values = values.tolist()
    sizes, run_avg, run_sd, max_value = run_stats(values)
    unit = resolve_unit(max_value, unit=unit, sbps=sbps)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow: caught as non-finite bits below
        starts, bits, stats, best = _program(sizes, run_avg, run_sd, max_value, unit)
    # The total as jumpavg's record keeps it: the bits before the last group plus its bits.
    total_bits = float(best[starts[-1]]) + bits[-1]
    if not math.isfinite(total_bits):  # never decide on NaN bits
        raise ParameterError(
            f"unit {unit:g} gives no finite description length for values up to {max_value:g}"
        )
    return _result(starts, bits, stats, float(best[1]), sizes, max_value, unit, direction, total_bits)


#: The smallest unit bits are counted in: a float64 whose reciprocal is finite and whose
#: products keep their precision (the smallest normal one).
_SMALLEST_UNIT = sys.float_info.min


def resolve_unit(max_value: float, *, unit: float | None = None, sbps: float | None = None) -> float:
    """The resolution MDL counts bits in: ``unit``, else ``max / (2**(sbps+1) - 1)`` (sbps 12).

    Parameters
    ----------
    max_value : float
        The largest value of the series (> 0).
    unit : float, optional
        Given resolution; ``None`` or 0 derives it from ``sbps`` (as jumpavg).
    sbps : float, optional
        Significant bits per sample, from 1 to :data:`MAX_SBPS`; ``None`` or 0 is 12 (as jumpavg).

    Raises
    ------
    ParameterError
        ``sbps`` out of range, ``unit`` not a finite positive number, or a unit finer than a
        float64 can tell apart at the maximum (``max / unit > 2**53``).

    Examples
    --------
    >>> resolve_unit(8191.0)
    1.0
    >>> resolve_unit(3.0, sbps=-5)
    Traceback (most recent call last):
    ...
    tracefmt.errors.ParameterError: sbps (significant bits per sample) must be ... from 1 to 52, not -5
    """
    if not unit:
        bits = check_number(sbps, SBPS_WHAT, low=1, high=MAX_SBPS) if sbps else 12.0
        unit = max_value / (pow(2.0, bits + 1.0) - 1.0)
        if unit < _SMALLEST_UNIT:
            # Subnormal or zero: 1 / unit overflows and the bit counts divide by zero.
            raise ParameterError(
                f"the largest value {max_value:g} is too small to count bits in (the unit it gives, "
                f"{unit:g}, is below {_SMALLEST_UNIT:g}): give the values in a smaller unit, "
                "e.g. ns for s, or --unit"
            )
        return unit
    unit = check_number(unit, "unit", above=0)
    if unit < _SMALLEST_UNIT:
        raise ParameterError(f"unit {unit:g} is below {_SMALLEST_UNIT:g} (the smallest normal float64)")
    if max_value / unit > 2.0 ** (MAX_SBPS + 1):
        raise ParameterError(
            f"unit {unit:g} is finer than float64 resolves at the maximum {max_value:g} "
            f"(need unit >= {max_value / 2.0 ** (MAX_SBPS + 1):.6g})"
        )
    return unit


def _program(
    sizes: np.ndarray, run_avg: np.ndarray, run_sd: np.ndarray, max_value: float, unit: float
) -> tuple[list[int], list[float], list[tuple[float, float, float]], np.ndarray]:
    """The dynamic program: per run end ``i`` the winning start, its group bits and statistics.

    Also returns the best bits of the runs before each start, as jumpavg keeps them.
    """
    dp = _Program(sizes, run_avg, run_sd, max_value, unit)
    for i in range(len(sizes)):
        dp.step(i)
    return dp.starts, dp.win_bits, dp.win_stats, dp.best


def _size_bits(total: int, max_v: float) -> np.ndarray:
    """Bits that depend on a group's sample count k only (k >= 2), indexed by k: length,
    deviation cut-off, sphere area without its deviation term."""
    t_size = np.zeros(total + 1)
    if total >= 2:
        big = np.arange(total + 1, dtype=np.float64)[2:]
        lgam = _lgamma_table(total)[2 : total + 1]
        t_size[2:] = (
            np.log(big * (big + 1))
            + math.log(1 - 1 / (max_v + 2))
            + math.log(2)
            + math.log(math.pi) * ((big - 1) / 2)
            - lgam
            + np.log(big) * ((big - 2) / 2)
        ) / _LN2
    return t_size


class _Program:
    """The state of :func:`_program` between run ends: the open groups (one per start
    ``j >= lo``, with their statistics exactly as jumpavg keeps them), the best bits so
    far and the winners. :meth:`step` adds one run."""

    def __init__(
        self, sizes: np.ndarray, run_avg: np.ndarray, run_sd: np.ndarray, max_value: float, unit: float
    ) -> None:
        count = len(sizes)
        self.sizes, self.run_avg, self.run_sd = sizes, run_avg, run_sd
        self.count, self.max_value, self.unit = count, max_value, unit
        self.max_v = max_v = max_value / unit
        self.inv_unit = 1.0 / unit
        self.cum = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.total = total = int(self.cum[-1])
        self.t_size = _size_bits(total, max_v)
        # Reversed tables: for bare values the open groups' sizes at step i are i+1-j, a slice.
        self.plain = bool((sizes == 1).all() and (run_sd == 0).all())
        self.t_rev = self.t_size[::-1].copy()
        self.km1_rev = (np.arange(total + 1, dtype=np.float64) - 1)[::-1].astype(np.float32)
        self.counts = np.arange(count, -1, -1, dtype=np.float64)
        # The vector pass computes logarithms and their combination in float32; this bounds
        # its error in bits (a few float32 ulp of at most log(max_v + 2) per term, the
        # deviation term multiplied by up to k), so every start that could be the cheapest
        # is re-evaluated exactly.
        self.tol = 4e-6 * (math.log(max_v + 2) + 1) * (total + 3) / _LN2
        # Starts whose bits exceed the best by more than this can never win again (see _prune_bound).
        self.prune = _prune_bound(max_v, total) + 2 * self.tol
        self.lo = 0  # starts before lo are pruned
        self.n = np.zeros(count)  # samples of the open group starting at j
        self.a = np.zeros(count)  # its average and deviation, exactly as jumpavg keeps them
        self.s = np.zeros(count)
        self.prev = np.zeros(count)  # previous group's average in units, fixed when j opens
        self.prev_raw: list[float | None] = [None] * count
        self.const = np.zeros(count)  # best bits before j plus log2(norm_j): fixed when j opens
        self.const[0] = math.log(max_v + 1, 2)  # the first group's average: uniform up to the maximum
        self.best = np.zeros(count + 1)  # best bits of the runs before j
        self.starts: list[int] = []
        self.win_bits: list[float] = []
        self.win_stats: list[tuple[float, float, float]] = []
        self.t0, self.t1, self.t2 = (np.empty(count) for _ in range(3))
        self.f0, self.f1, self.f2 = (np.empty(count, dtype=np.float32) for _ in range(3))

    def step(self, i: int) -> None:
        """Add run ``i``: extend the open groups, pick the winner, prune, open start ``i + 1``."""
        m, xa, xs = float(self.sizes[i]), float(self.run_avg[i]), float(self.run_sd[i])
        approx: np.ndarray | None = None
        near: list[int] = []
        if i > self.lo:
            self._merge_run(i, m, xa, xs)
            approx = self._approximate_bits(i)
            # The winner is the cheapest; keep every start that could be it, and those whose
            # estimate is NaN (a run whose deviation overflowed): jumpavg compares their
            # exact bits, which then lose every comparison.
            with np.errstate(invalid="ignore"):
                low = float(np.nanmin(approx)) if not np.isnan(approx).all() else math.nan
            keep = (
                ~(approx > low + 2 * self.tol + 1e-9 * abs(low)) if low == low else np.ones(approx.size, bool)
            )
            near = (np.flatnonzero(keep) + self.lo).tolist()
        self.n[i] = m
        self.a[i], self.s[i] = (xa, xs) if m == 1.0 and xs == 0.0 else renormalized(m, xa, xs)
        self._pick_winner(i, m, near)
        if i == 0:
            # jumpavg computes the first record's bits only when it copies it, after one
            # more pass of for_runs (no change for a bare value).
            self.best[1] = group_bits(
                int(m), *renormalized(m, self.a[0], self.s[0]), self.max_value, self.unit, None
            )
        elif approx is not None and approx[0] > self.best[i + 1] + self.prune:
            # The oldest starts cost so much more than the best that no future run can
            # bring them back: drop the longest such prefix.
            keep = np.flatnonzero(approx <= self.best[i + 1] + self.prune)
            self.lo = self.lo + int(keep[0]) if keep.size else i
        if i + 1 < self.count:
            self._open(i + 1)

    def _merge_run(self, i: int, m: float, xa: float, xs: float) -> None:
        """``for_runs([stats, run])`` with jumpavg's operation order, for every open group."""
        lo, count = self.lo, self.count
        aa, ss = self.a[lo:i], self.s[lo:i]
        w = i - lo
        u0, u1, u2 = self.t0[:w], self.t1[:w], self.t2[:w]
        # Sample counts of the open groups before and after this run.
        old = self.counts[count - i + lo : count] if self.plain else self.n[lo:i]
        np.multiply(aa, old, out=u0)
        np.divide(u0, old, out=u0)  # a1 = a * n / n
        np.multiply(ss, ss, out=u1)
        np.multiply(u1, old, out=u1)  # m2 = s * s * n
        if xs != 0.0:
            np.add(u1, xs * xs * m, out=u1)
        np.subtract(xa, u0, out=u2)  # delta
        np.multiply(u2, u2, out=aa)
        np.multiply(aa, old, out=aa)  # delta * delta * n ...
        if self.plain:
            new = self.counts[count - i - 1 + lo : count - 1]
        else:
            new = np.add(old, m, out=old)
            np.multiply(aa, m, out=aa)
            np.multiply(u2, m, out=u2)
        np.divide(aa, new, out=aa)
        np.add(u1, aa, out=u1)  # m2 + delta * delta * n * m / (n + m)
        np.divide(u1, new, out=u1)
        np.sqrt(u1, out=ss)
        np.divide(u2, new, out=u2)
        np.add(u0, u2, out=aa)  # a1 + delta * m / (n + m)

    def _approximate_bits(self, i: int) -> np.ndarray:
        """Approximate bits of every open group (2+ samples each) ending at run ``i``, in
        float32 but for the sums that need float64."""
        lo, total = self.lo, self.total
        w = i - lo
        u0 = self.t0[:w]
        g0, g1, g2 = self.f0[:w], self.f1[:w], self.f2[:w]
        np.multiply(self.a[lo:i], self.inv_unit, out=u0)
        np.subtract(u0, self.prev[lo:i], out=g0, casting="same_kind")
        np.abs(g0, out=g0)
        g0 += 1.0
        np.log(g0, out=g0)  # log(|avg - prev| + 1)
        if lo == 0:
            g0[0] = 0.0  # the first group's average is coded against no previous one
        np.multiply(self.s[lo:i], self.inv_unit, out=g1, casting="same_kind")
        g1 += 1.0
        np.log(g1, out=g2)  # log(sd + 1)
        g1 += 1.0
        np.log(g1, out=g1)  # log(sd + 2)
        if self.plain:
            g2 *= self.km1_rev[total - i - 1 + lo : total - 1]
            sizes_bits = self.t_rev[total - i - 1 + lo : total - 1]
        else:
            k = self.cum[i + 1] - self.cum[lo:i]
            g2 *= (k - 1).astype(np.float32)
            sizes_bits = self.t_size[k]
        g2 += g1
        g2 -= g0
        g2 *= np.float32(1 / _LN2)
        np.add(sizes_bits, g2, out=u0)
        u0 += self.const[lo:i]
        return u0

    def _pick_winner(self, i: int, m: float, near: list[int]) -> None:
        """Exact bits for the new group and the near-cheapest, then jumpavg's scan: the new
        group first, then the earliest start; only a strictly smaller total wins."""
        a, s, cum, best, prev_raw = self.a, self.s, self.cum, self.best, self.prev_raw
        win, win_g = i, group_bits(int(m), a[i], s[i], self.max_value, self.unit, prev_raw[i])
        win_total = best[i] + win_g
        for j in near:
            g = group_bits(
                int(cum[i + 1] - cum[j]), float(a[j]), float(s[j]), self.max_value, self.unit, prev_raw[j]
            )
            if best[j] + g < win_total:
                win, win_g, win_total = j, g, best[j] + g
        self.starts.append(win)
        self.win_bits.append(win_g)
        self.win_stats.append((float(cum[i + 1] - cum[win]), float(a[win]), float(s[win])))
        best[i + 1] = win_total

    def _open(self, j: int) -> None:
        """Fix what start ``j`` codes against: the group that ends the record before it,
        whose average the next new group codes as copied (one more pass of for_runs)."""
        self.prev_raw[j] = renormalized(*self.win_stats[-1][:2], 0.0)[0]
        nxt = self.prev_raw[j] / self.unit
        self.prev[j] = nxt
        norm = nxt * nxt
        norm -= (nxt - 1) * self.max_v
        norm += self.max_v * self.max_v / 2
        self.const[j] = self.best[j] + math.log(norm) / _LN2


#: Samples the prune bound of a program allows for, whatever its series holds now: a
#: program resumed with more runs must not have dropped a start that the longer series
#: could still need (the bound grows with the samples, by 2 bits per doubling).
PRUNE_SAMPLES = 2**40


def _run_ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The flat indices ``starts[k] .. starts[k] + counts[k] - 1`` of every k, in order.

    >>> _run_ranges(np.array([10, 3]), np.array([2, 3])).tolist()
    [10, 11, 3, 4, 5]
    """
    return (
        np.repeat(starts, counts)
        + np.arange(int(counts.sum()))
        - np.repeat(np.cumsum(counts) - counts, counts)
    )


def _lgamma_table(total: int) -> np.ndarray:
    """``math.lgamma((k - 1) / 2)`` for k = 0 .. total (k < 2 unused): CPython's own
    lgamma, which the compiled program cannot call."""
    global _LGAMMA
    if _LGAMMA.size <= total:
        size = max(total + 1, 2 * _LGAMMA.size)
        _LGAMMA = np.array([0.0, 0.0] + [math.lgamma((k - 1) / 2) for k in range(2, size)])
    return _LGAMMA


_LGAMMA = np.zeros(2)
#: Per-run fields of :class:`MdlPrograms` (the rest are per series or per slot).
_STATE_FIELDS = ("n", "a", "s", "prev", "start", "win_bits", "win_n", "win_a", "win_s")
_RUN_FIELDS = ("sizes", "avg", "sd", *_STATE_FIELDS)


@dataclass
class MdlPrograms:
    """The MDL programs of many series, flat, resumable a run at a time.

    Per run (all series' runs one after the other, series ``k``'s from ``offsets[k]``):
    its statistics (``sizes``, ``avg``, ``sd`` as :func:`run_stats` gives them), the open
    group starting there (``n``, ``a``, ``s``, and ``prev``, the average it codes its own
    against) and the winner at the run (``start`` within the series, its bits and
    statistics). Per series: the largest value and the unit its bits are counted in, its
    oldest open start ``lo`` (a flat index) and the runs ``done``. Per slot, one more per
    series (series ``k``'s run ``i`` is slot ``i + k``): ``best``, the best bits of the
    runs before.

    :meth:`advance` runs every series' program up to its last run (``trend._mdljit``);
    :meth:`resized` makes room for more runs; :meth:`result` reads a series' groups, the
    same as :func:`classify_mdl` gives.

    Examples
    --------
    >>> p = MdlPrograms.of([[1.0, 1.0, 5.0, 5.0], [2.0, [2.0, 2.2]]], unit=0.1)
    >>> p.advance()
    >>> [[(g.start, g.size, g.comment) for g in p.result(k).groups] for k in range(2)]
    [[(0, 2, 'normal'), (2, 2, 'progression')], [(0, 2, 'normal')]]
    """

    offsets: np.ndarray
    max_values: np.ndarray
    units: np.ndarray
    lo: np.ndarray
    done: np.ndarray
    best: np.ndarray
    sizes: np.ndarray
    avg: np.ndarray
    sd: np.ndarray
    n: np.ndarray
    a: np.ndarray
    s: np.ndarray
    prev: np.ndarray
    start: np.ndarray
    win_bits: np.ndarray
    win_n: np.ndarray
    win_a: np.ndarray
    win_s: np.ndarray

    @classmethod
    def new(
        cls,
        offsets: np.ndarray,
        sizes: np.ndarray,
        avg: np.ndarray,
        sd: np.ndarray,
        max_values: np.ndarray,
        units: np.ndarray,
    ) -> MdlPrograms:
        """Programs that have seen none of their runs yet. The runs' statistics are
        :func:`run_stats`'s (checked there: finite, >= 0, a positive maximum per series),
        ``max_values`` each series' largest trial and ``units`` its :func:`resolve_unit`."""
        offsets = np.asarray(offsets, np.int64)
        count, series = int(offsets[-1]), offsets.size - 1
        runs = {f: np.zeros(count) for f in _RUN_FIELDS}
        runs["start"] = np.zeros(count, np.int64)
        runs.update(
            sizes=np.asarray(sizes, np.float64),
            avg=np.asarray(avg, np.float64),
            sd=np.asarray(sd, np.float64),
        )
        return cls(
            offsets=offsets,
            max_values=np.asarray(max_values, np.float64),
            units=np.asarray(units, np.float64),
            lo=offsets[:-1].copy(),
            done=np.zeros(series, np.int64),
            best=np.zeros(count + series),
            **runs,
        )

    @classmethod
    def of(
        cls,
        series: Sequence[Sequence[float | Sequence[float]]],
        *,
        unit: float | None = None,
        sbps: float | None = None,
    ) -> MdlPrograms:
        """Programs of the series given as :func:`classify_mdl` takes one (checked as it does)."""
        stats = [run_stats(v) for v in series]
        offsets = np.r_[0, np.cumsum([st[0].size for st in stats])]
        tops = np.array([st[3] for st in stats])
        units = np.array([resolve_unit(top, unit=unit, sbps=sbps) for top in tops])
        cat = [np.concatenate([st[i] for st in stats]) if stats else np.zeros(0) for i in range(3)]
        return cls.new(offsets, *cat, tops, units)

    @property
    def series(self) -> int:
        return self.offsets.size - 1

    def _cum(self) -> np.ndarray:
        """Per slot the samples of its series before it."""
        runs = np.diff(self.offsets)
        per_slot = np.zeros(self.best.size)
        per_slot[np.arange(self.offsets[-1]) + np.repeat(np.arange(self.series), runs)] = self.sizes
        total = np.r_[0.0, np.cumsum(per_slot)]
        first = self.offsets[:-1] + np.arange(self.series)
        return (total[:-1] - np.repeat(total[first], runs + 1)).astype(np.int64)

    def advance(self) -> None:
        """Run every series' program through its last run."""
        from trend._mdljit import advance, size_terms

        runs = np.diff(self.offsets)
        cum = self._cum()
        terms = size_terms(_lgamma_table(int(cum.max(initial=0)) + 1))
        prune = np.array(
            [
                _prune_bound(m / u, PRUNE_SAMPLES)
                for m, u in zip(self.max_values.tolist(), self.units.tolist(), strict=True)
            ]
        )
        with np.errstate(over="ignore", invalid="ignore"):
            advance(
                self.offsets[:-1],
                self.offsets[:-1] + self.done,
                self.offsets[1:],
                self.sizes,
                self.avg,
                self.sd,
                cum,
                self.max_values,
                self.units,
                prune,
                terms,
                self.lo,
                self.n,
                self.a,
                self.s,
                self.prev,
                self.best,
                self.start,
                self.win_bits,
                self.win_n,
                self.win_a,
                self.win_s,
            )
        self.done = runs.copy()

    def resume(self, source: MdlPrograms, into: np.ndarray, take: np.ndarray) -> None:
        """Series ``into`` (indices here) resume ``source``'s series ``take`` (pair by
        pair) where each still starts with the runs that program saw: the same statistics
        run by run, the same largest value and unit. The others start afresh."""
        into, take = np.asarray(into, np.int64), np.asarray(take, np.int64)
        done = source.done[take]
        ok = (
            (done > 0)
            & (done <= np.diff(self.offsets)[into])
            & (source.max_values[take] == self.max_values[into])
            & (source.units[take] == self.units[into])
        )
        into, take, done = into[ok], take[ok], done[ok]
        here, there = _run_ranges(self.offsets[into], done), _run_ranges(source.offsets[take], done)
        same = (
            (self.sizes[here] == source.sizes[there])
            & (self.avg[here] == source.avg[there])
            & (self.sd[here] == source.sd[there])
        )
        differs = np.bincount(np.repeat(np.arange(into.size), done)[~same], minlength=into.size) > 0
        self.graft(into[~differs], source, take[~differs])

    def graft(self, into: np.ndarray, source: MdlPrograms, take: np.ndarray) -> None:
        """Series ``into`` (indices here) resume where ``source``'s series ``take`` stopped.

        Their first runs must be the ones ``source`` saw, with the same largest value and
        unit (:meth:`resume` checks it); the runs after them are then the only work
        :meth:`advance` does for them.
        """
        into, take = np.asarray(into, np.int64), np.asarray(take, np.int64)
        done = source.done[take]
        src, dst = _run_ranges(source.offsets[take], done), _run_ranges(self.offsets[into], done)
        for f in _STATE_FIELDS:
            getattr(self, f)[dst] = getattr(source, f)[src]
        # best: every slot of the runs seen, and the one after them (the next run's).
        self.best[dst + np.repeat(into, done)] = source.best[src + np.repeat(take, done)]
        self.best[self.offsets[into] + done + into] = source.best[source.offsets[take] + done + take]
        self.lo[into] = source.lo[take] - source.offsets[take] + self.offsets[into]
        self.done[into] = done

    def result(self, k: int, direction: str = "bigger-is-better") -> MdlResult:
        """Series ``k``'s grouping, as :func:`classify_mdl` gives it (after :meth:`advance`)."""
        lo, hi = int(self.offsets[k]), int(self.offsets[k + 1])
        starts, bits = self.start[lo:hi], self.win_bits[lo:hi]
        total_bits = float(self.best[int(starts[-1]) + lo + k]) + float(bits[-1])
        if not math.isfinite(total_bits):  # never decide on NaN bits
            raise ParameterError(
                f"unit {self.units[k]:g} gives no finite description length for values up to "
                f"{self.max_values[k]:g}"
            )
        stats = np.stack([self.win_n[lo:hi], self.win_a[lo:hi], self.win_s[lo:hi]], axis=1)
        return _result(
            starts,
            bits,
            stats,
            float(self.best[lo + k + 1]),
            self.sizes[lo:hi],
            float(self.max_values[k]),
            float(self.units[k]),
            direction,
            total_bits,
        )


def _prune_bound(max_v: float, total: int) -> float:
    """An upper bound K on g(A) + g(C) - g(A + C) in bits, over any two adjacent groups.

    A is an open group [j, i] (its previous average fixed), C any later group [i+1, i'] with
    any previous average, A + C the open group [j, i']. Then for every later run i'
    ``cand(j, i') >= cand(j, i) + g(C) - K``, while the start i+1 costs
    ``best(i+1) + g(C)``; so once ``cand(j, i) > best(i+1) + K`` the start j is never the
    cheapest again (PELT's argument). Term by term, values in [0, M] units:

    - lengths: log2(a(a+1)) + log2(c(c+1)) - log2(n(n+1)) <= log2(N(N+1));
    - averages: A's term grows by at most log2(M+1) when C joins; C's own is at most
      log2(max norm) = log2(M^2/2 + M);
    - deviations: two terms of at most log2((M/2+1)(M/2+2)) each (a deviation is <= M/2),
      one more cut-off of |log2(1 - 1/(M+2))|;
    - sphere, data part: (a-2)ln(sA+1) + (c-2)ln(sC+1) - (n-2)ln(sAC+1) <= 2 ln(M/2+1),
      since ln(sqrt(v)+1) is concave and increasing and n vAC >= a vA + c vC;
    - sphere, size part: h(a) + h(c) - h(n) < 0 by Stirling's bounds on lnGamma (with
      its 1/(12x) remainder); counted as 1.5 bits to spare.
    """
    half = max_v / 2
    return (
        math.log2(total * (total + 1.0))
        + math.log2(max_v + 1)
        + math.log2(max_v * max_v / 2 + max_v)
        + 2 * math.log2((half + 1) * (half + 2))
        + abs(math.log2(1 - 1 / (max_v + 2)))
        + 2 * math.log2(half + 1)
        + 1.5
        + 1.0
    )


def _result(
    starts: Sequence[int],
    win_bits: Sequence[float],
    win_stats: Sequence[tuple[float, float, float]],
    best1: float,
    sizes: np.ndarray,
    max_value: float,
    unit: float,
    direction: str,
    total_bits: float,
) -> MdlResult:
    """Walk the winning starts back from the end and comment the groups as jumpavg does."""
    ends = []
    end = len(starts) - 1
    while end >= 0:
        ends.append(end)
        end = int(starts[end]) - 1
    ends.reverse()
    cum = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    groups = []
    prev_avg = None
    for g, end in enumerate(ends):
        start = int(starts[end])
        nf, avg, sd = (float(x) for x in win_stats[end])
        bits = float(win_bits[end])
        if g < len(ends) - 1:
            # Every group but the last was copied once into the grouping that follows it.
            avg, sd = renormalized(nf, avg, sd)
            if end == 0:
                bits = best1
        comment = "normal"
        if prev_avg is not None and avg < prev_avg:
            comment = "regression"
        elif prev_avg is not None and avg > prev_avg:
            comment = "progression"
        prev_avg = avg
        if direction == "smaller-is-better":
            comment = _SWAP[comment]
        size_samples = int(cum[end + 1] - cum[start])
        groups.append(MdlGroup(start, end - start + 1, size_samples, avg, sd, comment, bits))
    return MdlResult(tuple(groups), total_bits, unit, max_value, direction)

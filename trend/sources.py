"""One more source of series: MRR from captured packets (path latencies: ``trend.paths``).

MRR (maximum receive rate) of a trial is the number of packets received at a capture
point during the trial window divided by the trial duration, regardless of loss.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from tracefmt import ParameterError
from trend.numbers import MAX_TRIALS, check_number
from trend.series import results_table

__all__ = [
    "MAX_TRIALS",
    "covered_windows",
    "mrr_from_timestamps",
    "mrr_results",
    "trial_windows",
]


def trial_windows(start_ns: int, duration_ns: int, trials: int, *, gap_ns: int = 0) -> np.ndarray:
    """``trials`` consecutive windows ``[start, end)`` of ``duration_ns``, ``gap_ns`` apart.

    Examples
    --------
    >>> trial_windows(0, 10, 3, gap_ns=5).tolist()
    [[0, 10], [15, 25], [30, 40]]
    """
    if duration_ns <= 0:
        raise ParameterError(f"trial duration must be positive, not {duration_ns} ns")
    trials = int(check_number(trials, "trials", low=1, high=MAX_TRIALS, integer=True))
    if gap_ns < 0:
        raise ParameterError(f"gap must not be negative, not {gap_ns} ns")
    end = start_ns + trials * (duration_ns + gap_ns)  # Python ints: no wrap-around
    if end >= 2**63:
        raise ParameterError(
            f"{trials} trials of {duration_ns} ns from {start_ns} ns end beyond 2262 (int64 nanoseconds)"
        )
    starts = start_ns + np.arange(trials, dtype=np.int64) * (duration_ns + gap_ns)
    return np.stack([starts, starts + duration_ns], axis=1)


def mrr_from_timestamps(ts_ns: np.ndarray, windows_ns: np.ndarray) -> np.ndarray:
    """Packets per second received in each trial window: count in ``[start, end)`` / duration.

    Parameters
    ----------
    ts_ns : numpy.ndarray
        Packet timestamps, int64 ns (any order).
    windows_ns : numpy.ndarray
        Shape (trials, 2): start and end of each trial window, int64 ns.

    Returns
    -------
    numpy.ndarray
        float64 packets per second per trial.

    Examples
    --------
    >>> ts = np.array([0, 100, 200, 999_999_999, 1_000_000_000, 1_500_000_000])
    >>> mrr_from_timestamps(ts, trial_windows(0, 1_000_000_000, 2)).tolist()
    [4.0, 2.0]
    """
    ts = np.sort(np.asarray(ts_ns, dtype=np.int64))
    w = np.asarray(windows_ns, dtype=np.int64)
    if w.ndim != 2 or w.shape[1] != 2 or w.shape[0] == 0:
        raise ParameterError("trial windows must be a (trials, 2) array of [start, end) in ns")
    if (w[:, 1] <= w[:, 0]).any():
        raise ParameterError("every trial window must end after it starts")
    counts = np.searchsorted(ts, w[:, 1], side="left") - np.searchsorted(ts, w[:, 0], side="left")
    return counts / ((w[:, 1] - w[:, 0]) / 1e9)


def covered_windows(ts_ns: np.ndarray, windows_ns: np.ndarray, *, slack: float = 0.01) -> np.ndarray:
    """Which trial windows the capture covers: from its first to its last packet, give or
    take the typical gap between packets (the median; the last packet of steady traffic
    comes up to a gap before the end) and ``slack`` of a window. A window past the
    capture's end would count as a trial of zero packets, and one cut by it as a slow
    trial: neither was measured.

    Examples
    --------
    >>> ts = np.arange(0, 5_300_000_000, 1_000_000)  # 5.3 s of packets, one a millisecond
    >>> covered_windows(ts, trial_windows(0, 1_000_000_000, 7)).tolist()
    [True, True, True, True, True, False, False]
    """
    w = np.asarray(windows_ns, dtype=np.int64)
    ts = np.asarray(ts_ns, dtype=np.int64)
    if ts.size == 0:
        return np.zeros(len(w), bool)
    ts = np.sort(ts)
    gap = float(np.median(np.diff(ts))) if ts.size > 1 else 0.0
    tol = slack * (w[:, 1] - w[:, 0]) + gap
    return (w[:, 0] >= int(ts[0]) - tol) & (w[:, 1] <= int(ts[-1]) + tol)


def mrr_results(
    rates_pps: np.ndarray,
    *,
    test: str,
    build: str,
    time_ns: int,
    testbed: str = "default",
    tags: str = "",
    unit: str = "pps",
) -> pa.Table:
    """One run of MRR trials as a results table (unit ``pps``, or ``msg/s`` for the
    messages of a trace, bigger is better).

    Examples
    --------
    >>> t = mrr_results(np.array([4.0, 2.0]), test="ip4", build="b1", time_ns=0)
    >>> t.column("value").to_pylist(), t.column("unit").to_pylist()
    ([4.0, 2.0], ['pps', 'pps'])
    """
    return results_table(
        [
            {
                "test": test,
                "testbed": testbed,
                "build": build,
                "time_ns": time_ns,
                "values": [float(r) for r in rates_pps],
                "unit": unit,
                "direction": "bigger-is-better",
                "tags": tags,
            }
        ],
        source="capture",
    )

"""Two more sources of series: MRR from captured packets, path latencies from a paths file.

MRR (maximum receive rate) of a trial is the number of packets received at a capture
point during the trial window divided by the trial duration, regardless of loss. Path
latencies come from ``wirepath infer`` results: one series per pattern (the root visit's
mean latency) and one per visit inside it.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pyarrow as pa

from tracefmt import ParameterError, ParseError, check_paths, hop_delays_s, read_paths
from tracefmt.patterns import path_id
from trend.numbers import check_number
from trend.series import parse_time_ns, results_table

__all__ = [
    "MAX_TRIALS",
    "covered_windows",
    "mrr_from_timestamps",
    "mrr_results",
    "paths_results",
    "trial_windows",
]

#: The most trials of one run (CSIT runs 10): more is a typo, and would fill the memory.
MAX_TRIALS = 1_000_000


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


def _visits(node: dict[str, Any], trail: str, out: list[tuple[str, float]]) -> None:
    # Preorder with a stack of its own: call chains run deeper than Python's recursion.
    stack = [(child, f"{trail}/{k}:{child['node']}") for k, child in enumerate(node.get("children") or [])]
    stack.reverse()
    while stack:
        v, key = stack.pop()
        out.append((key, float(v["latency_s"]["mean"])))
        kids = [(child, f"{key}/{k}:{child['node']}") for k, child in enumerate(v.get("children") or [])]
        stack.extend(reversed(kids))


def _paths_doc(source: str | os.PathLike[str] | dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The paths file's name for messages and its document, checked to be one."""
    if isinstance(source, dict):
        check_paths(source, "<paths>")
        return "<paths>", source
    return str(source), read_paths(source)


def _path_rows(doc: dict[str, Any], name: str, prefix: str) -> list[tuple[str, float]]:
    """(series name, latency in seconds) of every nesting pattern and visit, and of every
    convolution path and hop; a ParseError when a pattern or path is malformed, or there are none."""
    rows: list[tuple[str, float]] = []
    try:
        if "patterns" in doc:
            for p in doc["patterns"]:
                rows.append((f"{prefix}{p['id']}", float(p["root"]["latency_s"]["mean"])))
                _visits(p["root"], f"{prefix}{p['id']}", rows)
        for path in doc.get("paths") or []:
            pid = f"{prefix}{path.get('id') or path_id(path['nodes'])}"
            hops = hop_delays_s(path)
            total = path.get("latency_s")
            rows.append((pid, float(sum(hops) if total is None else total)))
            # One statistic per series: a hop's most frequent delay, and its median in a
            # series of its own where the run gives one (a run may give it or not).
            rows += [(f"{pid}/hop{k}", float(d[0])) for k, d in enumerate(path["delays_s"]) if d]
            medians = path.get("medians_s") or []
            rows += [(f"{pid}/hop{k}/median", float(m)) for k, m in enumerate(medians) if m is not None]
    except (KeyError, TypeError, IndexError, ValueError) as e:
        raise ParseError(name, 1, f"malformed pattern or path ({type(e).__name__}: {e})") from None
    if not rows:
        raise ParseError(name, 1, "no patterns or paths in the file")
    return rows


def paths_results(
    source: str | os.PathLike[str] | dict[str, Any],
    *,
    build: str,
    time_ns: int | None = None,
    testbed: str = "default",
    prefix: str = "path:",
) -> pa.Table:
    """Latency series rows from a paths file (``wirepath.paths/1``), one run of each.

    Nesting: ``{prefix}{pattern id}`` holds the pattern's root latency (mean, seconds) and
    ``{prefix}{pattern id}/{k}:{node}/...`` each visit's, the ``k`` being the child's
    position under its parent (calls in order). Convolution: ``{prefix}{path id}`` holds the
    path's ``latency_s`` (else the sum of its most frequent hop delays) and
    ``.../hop{k}`` each hop's most frequent delay. The run's time is the
    trace's end unless ``time_ns`` is given. All are smaller-is-better, in seconds.

    Examples
    --------
    >>> doc = {"format": "wirepath.paths/1", "algorithm": "nesting", "trace": {"end": "2024-05-01T00:00:00Z"},
    ...        "patterns": [{"id": "p1", "count": 1, "total_latency_s": 0.02, "root": {"node": "WS",
    ...        "caller": "client", "latency_s": {"mean": 0.02}, "children": [{"node": "DB", "caller": "WS",
    ...        "latency_s": {"mean": 0.01}, "children": []}]}}]}
    >>> t = paths_results(doc, build="b1")
    >>> t.column("test").to_pylist(), t.column("value").to_pylist()
    (['path:p1', 'path:p1/0:DB'], [0.02, 0.01])
    """
    name, doc = _paths_doc(source)
    if time_ns is None:
        end = (doc.get("trace") or {}).get("end")
        if end is None:
            raise ParameterError(f"{name} names no trace end: give the run's time (time_ns)")
        time_ns = parse_time_ns(end)
    rows = _path_rows(doc, name, prefix)
    records = [
        {
            "test": test,
            "testbed": testbed,
            "build": build,
            "time_ns": time_ns,
            "value": value,
            "unit": "s",
            "direction": "smaller-is-better",
            "tags": "pattern" if "/" not in test[len(prefix) :] else "visit",
        }
        for test, value in rows
    ]
    return results_table(records, source=name)

"""Faults between the system and its trace: capture loss, clock skew, jitter, copies, ids."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["CaptureQueue", "stamp_skew"]


@dataclass
class CaptureQueue:
    """A capture point that takes ``rate_pps`` packets/s into a queue of ``queue`` packets.

    Packets that arrive to a full queue are dropped, so losses come in bursts when
    traffic peaks, as with a real capture host. The state carries across calls, so a
    stream can be fed in pieces.

    Examples
    --------
    >>> q = CaptureQueue(rate_pps=1000.0, queue=2)
    >>> q.admit(np.array([0, 0, 0, 0, 10_000_000], np.int64)).tolist()  # 4 at once, 1 later
    [True, True, False, False, True]
    """

    rate_pps: float
    queue: int = 64
    backlog: float = 0.0  # packets in the queue just after the last arrival
    last_ns: int | None = None

    def admit(self, ts_ns: np.ndarray) -> np.ndarray:
        """Which packets (sorted arrival times) are captured; updates the state."""
        n = ts_ns.size
        keep = np.ones(n, bool)
        if n == 0:
            return keep
        prev = ts_ns[0] if self.last_ns is None else self.last_ns
        gaps_s = np.diff(ts_ns, prepend=prev).astype(np.float64) / 1e9
        x = 1.0 - self.rate_pps * gaps_s  # backlog change on each arrival, before the floor
        start, y0 = 0, self.backlog
        while start < n:
            # Without the queue limit the backlog is y_n = max(1, y_{n-1} + x_n):
            # y_n = S_n + max(y0, max_k (1 - S_k)), computed for the whole stretch at once.
            s = np.cumsum(x[start:])
            y = s + np.maximum(y0, np.maximum.accumulate(1.0 - s))
            over = np.flatnonzero(y > self.queue)
            if over.size == 0:
                self.backlog = float(y[-1])
                break
            i = start + int(over[0])
            yi = float(y[over[0] - 1]) if over[0] > 0 else y0
            # Overload: step packet by packet until the queue empties again.
            while i < n:
                yi = max(0.0, yi + x[i] - 1.0)
                if yi + 1.0 > self.queue:
                    keep[i] = False
                else:
                    yi += 1.0
                i += 1
                if yi <= 1.0:
                    break
            start, y0 = i, yi
            self.backlog = yi
        self.last_ns = int(ts_ns[-1])
        return keep


def stamp_skew(t_s: np.ndarray, offset_s: float, drift_ppm: float) -> np.ndarray:
    """Times as a clock ``offset_s`` ahead and drifting ``drift_ppm`` would stamp them.

    Examples
    --------
    >>> stamp_skew(np.array([0.0, 100.0]), 0.03, 10.0).tolist()
    [0.03, 100.031]
    """
    return t_s + offset_s + drift_ppm * 1e-6 * t_s

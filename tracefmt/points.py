"""Capture points of a trace: the messages one point saw (the ``point`` column)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracefmt.errors import ParameterError

__all__ = ["point_timestamps"]


def point_timestamps(trace: pa.Table, point: str | None = None, *, source: str = "the trace") -> np.ndarray:
    """Message times of a trace (int64 ns since the epoch), or of those seen at ``point``.

    Parameters
    ----------
    trace : pyarrow.Table
        A validated trace (``read_trace``).
    point : str, optional
        A capture point: keep only the messages of this ``point`` value. None keeps all.
    source : str
        What to call the trace in an error (its file name).

    Returns
    -------
    numpy.ndarray
        int64 timestamps in the trace's row order.

    Raises
    ------
    ParameterError
        ``point`` is given but the trace has no ``point`` column, or no message was seen
        there (the message lists the points there are).

    Examples
    --------
    >>> import pyarrow as pa
    >>> from tracefmt.schema import validate_trace
    >>> t = validate_trace(pa.table({"timestamp": pa.array([5, 7, 9], pa.timestamp("ns")),
    ...     "sender": ["a", "b", "a"], "receiver": ["b", "a", "b"], "op": ["send"] * 3,
    ...     "id": pa.array([None] * 3, pa.uint64()), "point": ["sw1", "sw2", "sw1"]}))
    >>> point_timestamps(t).tolist(), point_timestamps(t, "sw1").tolist()
    ([5, 7, 9], [5, 9])
    >>> point_timestamps(t, "sw9")
    Traceback (most recent call last):
    ...
    tracefmt.errors.ParameterError: no messages at point 'sw9' (points: sw1, sw2)
    """
    ts = trace.column("timestamp").cast("int64").to_numpy()
    if point is None:
        return ts
    if "point" not in trace.column_names:
        raise ParameterError(f"{source} has no 'point' column; drop --point")
    points = trace.column("point").cast(pa.string())
    at = pc.equal(points, point).fill_null(False).to_numpy(zero_copy_only=False)
    if not at.any():
        known = sorted(x for x in pc.unique(points.drop_null()).to_pylist())
        if not known:
            raise ParameterError(
                f"{source} names no capture point (its 'point' column is empty: one point, or "
                "points not given to merge); drop --point"
            )
        raise ParameterError(f"no messages at point {point!r} (points: {', '.join(known)})")
    return ts[at]

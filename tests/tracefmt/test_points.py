"""Message times at one capture point (``tracefmt.point_timestamps``)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tracefmt import ParameterError, empty_trace, point_timestamps, validate_trace


def _trace(points: list[str] | None) -> pa.Table:
    n = 4 if points is None else len(points)
    cols = {
        "timestamp": pa.array([10 * (k + 1) for k in range(n)], pa.timestamp("ns")),
        "sender": ["a"] * n,
        "receiver": ["b"] * n,
        "op": ["send"] * n,
        "id": pa.array([None] * n, pa.uint64()),
    }
    if points is not None:
        cols["point"] = points
    return validate_trace(pa.table(cols))


def test_every_message_without_a_point():
    assert point_timestamps(_trace(None)).tolist() == [10, 20, 30, 40]
    assert point_timestamps(_trace(["sw1", "sw2", "sw2"])).tolist() == [10, 20, 30]


def test_one_point_keeps_its_messages_in_row_order():
    ts = point_timestamps(_trace(["sw2", "sw1", "sw2", "sw1"]), "sw2")
    assert ts.dtype == "int64"
    assert ts.tolist() == [10, 30]


def test_empty_trace():
    assert point_timestamps(empty_trace()).size == 0


def test_a_point_asked_of_a_trace_without_points():
    with pytest.raises(ParameterError, match=r"^run1\.parquet has no 'point' column"):
        point_timestamps(_trace(None), "sw1", source="run1.parquet")


def test_an_unknown_point_names_the_points_there_are():
    with pytest.raises(ParameterError, match=r"no messages at point 'sw9' \(points: sw1, sw2\)"):
        point_timestamps(_trace(["sw2", "sw1"]), "sw9")

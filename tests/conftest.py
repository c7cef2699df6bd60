"""Shared helpers for the tracefmt and CLI tests.

The helpers are handed out as session-scoped fixtures (``--import-mode=importlib``
makes importing a helper module from the tests unreliable, and hypothesis refuses
function-scoped fixtures in ``@given`` tests).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pytest

#: One message as the tests write it: (timestamp_ns, op, sender, receiver, id or None).
Row = tuple[int, str, str, str, int | None]

TS = pa.timestamp("ns", tz="UTC")


def _table(rows: Sequence[Row], **extra: Sequence[Any] | pa.Array) -> pa.Table:
    """A plain (not yet validated) trace table holding exactly ``rows``."""
    cols: dict[str, Any] = {
        "timestamp": pa.array([r[0] for r in rows], pa.int64()).cast(TS),
        "sender": pa.array([r[2] for r in rows], pa.string()),
        "receiver": pa.array([r[3] for r in rows], pa.string()),
        "op": pa.array([r[1] for r in rows], pa.string()),
        "id": pa.array([r[4] for r in rows], pa.uint64()),
    }
    for name, values in extra.items():
        cols[name] = values if isinstance(values, pa.Array | pa.ChunkedArray) else pa.array(values)
    return pa.table(cols)


def _rows(table: pa.Table) -> list[Row]:
    """The messages of a trace table as plain Python tuples (dictionaries decoded)."""
    ts = table["timestamp"].cast(pa.int64()).to_pylist()
    cols = [table[name].to_pylist() for name in ("op", "sender", "receiver", "id")]
    return [(t, *rest) for t, *rest in zip(ts, *cols, strict=True)]


@pytest.fixture(scope="session")
def make_table() -> Callable[..., pa.Table]:
    """``make_table(rows, **extra_columns)``: a plain Arrow table of the given messages."""
    return _table


@pytest.fixture(scope="session")
def rows_of() -> Callable[[pa.Table], list[Row]]:
    """``rows_of(table)``: the table's messages as ``(ts_ns, op, sender, receiver, id)`` tuples."""
    return _rows


@pytest.fixture(scope="session")
def write_lines() -> Callable[..., Any]:
    """``write_lines(path, text_or_bytes)``: write a text trace file and return its path."""

    def write(path: Any, content: str | bytes) -> Any:
        data = content.encode("utf-8") if isinstance(content, str) else content
        path.write_bytes(data)
        return path

    return write

"""Trace columns as numpy arrays, for checks written with numpy."""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def strings(col: pa.ChunkedArray) -> np.ndarray:
    """A string or dictionary column as an object array of str."""
    return np.asarray(col.cast(pa.string()).to_pylist(), dtype=object)


def ints(col: pa.ChunkedArray) -> np.ndarray:
    """A uint64 column as int64, nulls as -1."""
    return col.cast(pa.int64()).fill_null(-1).to_numpy()

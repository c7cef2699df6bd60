"""Operations: a call's label with its ids folded, so that calls of one endpoint share it.

A capture labels each call with what its protocol says it asks for: ``GET /item/7``,
``POST /api/users/42/orders?limit=5``, ``SELECT users``, ``GET`` (Redis), a gRPC
``/shop.Cart/Add``. Per request those differ only in ids, and an endpoint is what a
user asks about ("which endpoint is slow"), so an operation is the label with its
query string dropped and every path segment that is an id replaced by ``:id``: a
number, a hex string of 8 or more digits, a UUID. ``GET /item/7`` and ``GET /item/8``
are both ``GET /item/:id``. All of it runs as Arrow regex kernels over the distinct
labels, not a Python loop per call.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["ID", "operation_codes", "operations", "value_codes"]

#: What an id segment becomes.
ID = ":id"

# A path segment that is an id: digits, 8+ hex digits, or a UUID, ended by "/", a
# space or the end (kept: the replacement's \\2). Only after a "/": a method or a Redis command stays.
_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_SEGMENT = r"/([0-9]+|[0-9a-fA-F]{8,}|" + _UUID + r")(/|$| )"


def operations(labels: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The operation of each label (null stays null).

    Examples
    --------
    >>> operations(pa.array(["GET /item/7", "GET /item/8?x=1", "POST /u/42/9f86d081884c7d65/7",
    ...                      "GET", "SELECT users", None, "/shop.Cart/Add"])).to_pylist()
    ['GET /item/:id', 'GET /item/:id', 'POST /u/:id/:id/:id', 'GET', 'SELECT users', None, '/shop.Cart/Add']
    """
    text = labels.cast(pa.string())
    if isinstance(text, pa.ChunkedArray):
        text = text.combine_chunks()
    if len(text) == 0:
        return text
    # Work on the distinct labels: many calls, few labels.
    encoded = pc.dictionary_encode(text)
    values = encoded.dictionary
    values = pc.replace_substring_regex(values, r"[?#].*$", "")
    # A match takes the "/" the next id segment starts with ("/7/8"): again until none is left.
    for _ in range(16):
        again = pc.replace_substring_regex(values, _SEGMENT, "/" + ID + r"\2")
        if again.equals(values):
            break
        values = again
    return values.take(encoded.indices)


def operation_codes(labels: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, list[str]]:
    """Per label, a code of its operation (-1 where it has none), and the operations.

    Examples
    --------
    >>> codes, names = operation_codes(pa.array(["GET /a/1", None, "GET /a/2", "PUT /b"]))
    >>> codes.tolist(), names
    ([0, -1, 0, 1], ['GET /a/:id', 'PUT /b'])
    """
    return value_codes(operations(labels))


def value_codes(values: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, list[str]]:
    """Per value, a code of it (-1 for null), and the distinct values as text.

    Examples
    --------
    >>> codes, names = value_codes(pa.array(["200", None, "503", "200"]))
    >>> codes.tolist(), names
    ([0, -1, 1, 0], ['200', '503'])
    """
    text = values.cast(pa.string())
    if isinstance(text, pa.ChunkedArray):
        text = text.combine_chunks()
    encoded = pc.dictionary_encode(text)
    names = encoded.dictionary.to_pylist()
    return np.asarray(encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False), np.int64), names

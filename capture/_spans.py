"""Byte spans of a buffer copied back to back.

Putting payloads one after the other (a direction's stream, the bytes carried to the
next batch) is a gather. The compiled helper ``capture.native`` copies each span with
one ``memcpy``. Without it (built by ``pip install`` where a C compiler is found), numpy
copies each span's whole 8-byte words through unaligned uint64 views (an index per
word) and only the last 0-7 bytes of each span one by one; an index per byte would be
2-3x slower.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np

__all__ = ["join_spans", "native", "words_view"]

native: ModuleType | None
try:
    from capture import native  # compiled by setup.py; optional
except ImportError:  # no C compiler at install: the numpy loops below do the same work
    native = None


def words_view(buf: np.ndarray) -> np.ndarray:
    """Every 8 bytes of ``buf`` (at every byte offset) as one uint64, sharing its memory."""
    if len(buf) < 8:
        return np.zeros(0, np.uint64)
    return np.ndarray(shape=(len(buf) - 7,), dtype=np.uint64, buffer=buf, strides=(1,))


def join_spans(data: np.ndarray, start: np.ndarray, length: np.ndarray) -> np.ndarray:
    """``data[start[i] : start[i] + length[i]]`` for every i, back to back (uint8).

    Examples
    --------
    >>> d = np.frombuffer(b"0123456789abcdefghij", np.uint8)
    >>> join_spans(d, np.array([10, 0]), np.array([9, 3])).tobytes()
    b'abcdefghi012'
    """
    length = np.require(length, np.int64, "CA")  # contiguous and aligned, as native needs
    start = np.require(start, np.int64, "CA")
    total = int(length.sum())
    if native is not None:
        out = np.empty(total, np.uint8)
        native.join_spans(np.ascontiguousarray(data, np.uint8), start, length, out)
        return out
    return _join_words(data, start, length, total)


def _join_words(data: np.ndarray, start: np.ndarray, length: np.ndarray, total: int) -> np.ndarray:
    """:func:`join_spans` in numpy: whole 8-byte words by index, then the 0-7 bytes left."""
    out = np.empty(total + 8, np.uint8)
    if not total:
        return out[:0]
    at = np.zeros(len(length), np.int64)  # where each span goes
    np.cumsum(length[:-1], out=at[1:])
    shift = start - at
    nw = length >> 3
    words = int(nw.sum())
    if words:
        first = np.cumsum(nw) - nw  # index of each span's first word among all words
        dst = np.repeat(at - 8 * first, nw) + 8 * np.arange(words)
        words_view(out)[dst] = words_view(np.ascontiguousarray(data))[dst + np.repeat(shift, nw)]
    nt = length & 7
    tails = int(nt.sum())
    if tails:
        first = np.cumsum(nt) - nt
        dst = np.repeat(at + 8 * nw - first, nt) + np.arange(tails)
        out[dst] = data[dst + np.repeat(shift, nt)]
    return out[:total]

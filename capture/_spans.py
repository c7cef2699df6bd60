"""Byte spans of a buffer copied back to back, eight bytes at a time.

Putting payloads one after the other (a direction's stream, the bytes carried to the
next batch) is a gather. Indexed byte by byte it needs an index per byte; here each
span's whole 8-byte words are copied through unaligned uint64 views (an index per
word) and only the last 0-7 bytes of each span one by one.
"""

from __future__ import annotations

import numpy as np

__all__ = ["join_spans", "words_view"]


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
    length = np.asarray(length, np.int64)
    start = np.asarray(start, np.int64)
    total = int(length.sum())
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

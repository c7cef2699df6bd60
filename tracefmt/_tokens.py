"""Vectorized tokenizing and number parsing over a byte buffer (no Python loop per line).

A chunk of text is an ``np.uint8`` array; tokens are runs of bytes that are not
space, tab, CR or newline, and a ``#`` hides the rest of its line.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_NL, _SP, _TAB, _CR, _HASH, _DOT, _MINUS, _ZERO = 10, 32, 9, 13, 35, 46, 45, 48
INT64_LIMIT = np.uint64(1 << 63)  # nanoseconds: -2**63 .. 2**63 - 1 (1677-09-21 .. 2262-04-11)
MAX_SECONDS = 9_223_372_036
FNV_OFFSET = np.uint64(0xCBF29CE484222325)
FNV_PRIME = np.uint64(0x100000001B3)


@dataclass(frozen=True)
class Tokens:
    """Tokens of a chunk: byte ranges ``[start, end)`` and, per line, how many tokens."""

    start: np.ndarray  # int64, into the chunk
    end: np.ndarray
    line_end: np.ndarray  # int64 position of each line's newline
    per_line: np.ndarray  # int64 token count per line
    mask: np.ndarray  # bool per byte: inside a token


def mask_ranges(n: int, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Boolean mask of length n, True inside the disjoint, non-touching ranges ``[lo, hi)``."""
    mark = np.zeros(n + 1, np.int8)
    mark[lo] = 1
    mark[hi] = -1
    return np.cumsum(mark[:-1], dtype=np.int8).view(bool)


def tokenize(buf: np.ndarray) -> Tokens:
    """Split a chunk that ends with a newline into whitespace-separated tokens."""
    is_nl = buf == _NL
    line_end = np.flatnonzero(is_nl)
    sep = is_nl | (buf == _SP) | (buf == _TAB) | (buf == _CR)
    hashes = np.flatnonzero(buf == _HASH)
    if hashes.size:
        hash_line_end = line_end[np.searchsorted(line_end, hashes)]
        first = np.ones(hashes.size, bool)
        first[1:] = hash_line_end[1:] != hash_line_end[:-1]
        sep |= mask_ranges(buf.size, hashes[first], hash_line_end[first])
    mask = ~sep
    edges = np.flatnonzero(np.diff(mask.view(np.int8), prepend=np.int8(0), append=np.int8(0)))
    start, end = edges[0::2], edges[1::2]
    per_line = np.diff(np.searchsorted(start, line_end), prepend=0)
    return Tokens(start, end, line_end, per_line, mask)


PAD = 8  # zero bytes before and after compacted data, so 8-byte words can be read anywhere


def compact(
    buf: np.ndarray, mask: np.ndarray, start: np.ndarray, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate the bytes of the tokens selected by ``mask``.

    ``start``/``end`` are those tokens' ranges. Returns ``(data, offsets)``: ``data``
    holds ``PAD`` zero bytes, the tokens, ``PAD`` zero bytes; ``offsets`` (int32, for
    an Arrow binary array over ``data[PAD:]``) start at 0.
    """
    offsets = np.zeros(start.size + 1, np.int32)
    np.cumsum(end - start, out=offsets[1:])
    pad = np.zeros(PAD, np.uint8)
    return np.concatenate([pad, buf[mask], pad]), offsets


_ASCII0 = np.uint64(0x3030303030303030)
_HIGH = np.uint64(0x8080808080808080)
_PLUS46 = np.uint64(0x4646464646464646)
_LOW4 = np.uint64(0x0F0F0F0F0F0F0F0F)


def _words(data: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """The 8 bytes at each ``pos`` as little-endian uint64 (an unaligned gather).

    Positions are clipped into the buffer; callers mask the bytes they do not own.
    """
    view = np.ndarray(buffer=data, dtype="<u8", shape=(data.size - 7,), strides=(1,))
    return view[np.clip(pos, 0, data.size - 8)]


def _keep_bytes(word: np.ndarray, lo_byte: np.ndarray, hi_byte: np.ndarray) -> np.ndarray:
    """Keep bytes ``lo_byte .. hi_byte-1`` (0..8) of each word, set the others to '0'."""
    lo = np.clip(lo_byte, 0, 8).astype(np.uint64) * np.uint64(8)
    hi = np.clip(hi_byte, 0, 8).astype(np.uint64) * np.uint64(8)
    ones = np.uint64(0xFFFFFFFFFFFFFFFF)
    # Shifts by 64 are undefined, so build the masks from 32-bit halves' worth of care.
    upto_hi = np.where(hi >= 64, ones, (np.uint64(1) << np.minimum(hi, np.uint64(63))) - np.uint64(1))
    below_lo = np.where(lo >= 64, ones, (np.uint64(1) << np.minimum(lo, np.uint64(63))) - np.uint64(1))
    keep = upto_hi & ~below_lo
    return (word & keep) | (_ASCII0 & ~keep)


def _eight_digits(word: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Value of 8 ASCII digits held in a uint64 (first digit in the low byte), and validity."""
    ok = ((word - _ASCII0) | (word + _PLUS46)) & _HIGH == 0
    v = word & _LOW4
    v = (v * np.uint64(2561)) >> np.uint64(8)
    v = ((v & np.uint64(0x00FF00FF00FF00FF)) * np.uint64(6553601)) >> np.uint64(16)
    v = ((v & np.uint64(0x0000FFFF0000FFFF)) * np.uint64(42949672960001)) >> np.uint64(32)
    return v, ok


def _digits_before(
    data: np.ndarray, first: np.ndarray, stop: np.ndarray, groups: int
) -> tuple[np.ndarray, np.ndarray]:
    """Integer value of the digits in ``[first, stop)``, 8 at a time from the right."""
    value = np.zeros(first.size, np.uint64)
    ok = np.ones(first.size, bool)
    for g in range(groups):
        at = stop - 8 * (g + 1)
        v, good = _eight_digits(_keep_bytes(_words(data, at), first - at, 8))
        # Group g is worth 10**(8g); three groups reach the 19 digits of a uint64.
        value += v * np.uint64(10 ** (8 * g))
        ok &= good
    return value, ok


def parse_seconds_ns(data: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Parse decimal seconds (``-?digits[.digits]``) into exact int64 nanoseconds.

    ``data`` and the offsets are as ``compact`` returns them (offsets relative to
    ``data[PAD:]``). Digits below the nanosecond are dropped (truncation toward
    zero). Returns ``(ns, ok)``; ``ok`` is False where the token is not such a
    number or is out of the int64 nanosecond range.
    """
    n = lo.size
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, bool)
    lo, hi = lo + PAD, hi + PAD
    dots = np.flatnonzero(data == _DOT)
    if dots.size:
        j = np.minimum(np.searchsorted(dots, lo), dots.size - 1)
        has_dot = (dots[j] >= lo) & (dots[j] < hi)
        dot = np.where(has_dot, dots[j], hi)
    else:
        has_dot = np.zeros(n, bool)
        dot = hi
    minus = data[lo] == _MINUS
    first = lo + minus
    int_digits = dot - first
    frac_digits = np.where(has_dot, hi - dot - 1, 0)
    # Up to 19 integer digits (leading zeros allowed): three 8-digit words.
    ok = (int_digits + frac_digits > 0) & (int_digits <= 19)
    sec, good = _digits_before(data, first, dot, max(1, -(-int(min(int_digits.max(), 19)) // 8)))
    ok &= good
    frac = np.zeros(n, np.uint64)
    frac_start = dot + 1
    for g in range(max(2, -(-int(frac_digits.max()) // 8))):
        at = frac_start + 8 * g
        # Bytes past the token read as '0': trailing zeros do not change the value.
        v, good = _eight_digits(_keep_bytes(_words(data, at), 0, np.where(has_dot, hi - at, 0)))
        ok &= good
        if g == 0:
            frac = v * np.uint64(10)
        elif g == 1:
            frac += v // np.uint64(10_000_000)
    ok &= sec <= np.uint64(MAX_SECONDS)
    mag = np.where(ok, sec * np.uint64(1_000_000_000) + frac, np.uint64(0))
    ok &= (mag < INT64_LIMIT) | (minus & (mag == INT64_LIMIT))
    v = np.where(ok, mag, np.uint64(0)).astype(np.int64)  # 2**63 wraps to -2**63: right when negative
    return np.where(minus & (v != np.iinfo(np.int64).min), -v, v), ok


def parse_uint(data: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Parse unsigned decimal integers that fit in uint64; returns ``(values, ok)``.

    ``data`` and offsets as ``compact`` returns them.
    """
    lens = hi - lo
    lo, hi = lo + PAD, hi + PAD
    if lo.size == 0:
        return np.zeros(0, np.uint64), np.zeros(0, bool)
    out, ok = _digits_before(data, lo, hi, -(-int(min(lens.max(), 19)) // 8))
    ok &= (lens > 0) & (lens <= 19)
    out[~ok] = 0
    # 20 or more digits (a large value, or leading zeros): check those few exactly.
    for i in np.flatnonzero(lens >= 20):
        text = bytes(data[lo[i] : hi[i]])
        if text.isdigit() and int(text) < 2**64:
            out[i], ok[i] = int(text), True
    return out, ok


def fnv1a64(data: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """64-bit FNV-1a hash of each token's bytes: a stable id for non-numeric tokens."""
    h = np.full(lo.size, FNV_OFFSET, np.uint64)
    lens = hi - lo
    lo = lo + PAD
    for c in range(int(lens.max(initial=0))):
        active = c < lens
        byte = data[np.minimum(lo + c, data.size - 1)].astype(np.uint64)
        h = np.where(active, (h ^ byte) * FNV_PRIME, h)
    return h

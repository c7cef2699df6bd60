"""Durations written by people (``60s``, ``1.5ms``, ``-0.012``) as exact nanoseconds.

The unit convention of every package: a name that holds a time says its unit (``_s``
or ``_ns``). Timestamps, and the durations added to them exactly (clock offsets,
duplicate windows, the gap between rendered packets), are integer nanoseconds, as the
trace stores them: a float of seconds cannot hold a 2024 timestamp to the nanosecond.
Settings and statistics (tolerances, bin widths, latencies, quanta) are float seconds.
A flag takes a duration with its unit (``--tolerance 2ms``) whichever it becomes.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation

import numpy as np

from tracefmt.errors import ParameterError

__all__ = [
    "UNIT_NS",
    "format_duration_ns",
    "format_instant_ns",
    "format_instants_ns",
    "offsets_ns",
    "parse_duration_ns",
    "shifted_ns",
]

UNIT_NS: dict[str, int] = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "μs": 1_000,  # Greek mu, which keyboards often give instead of the micro sign
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "min": 60_000_000_000,
    "h": 3_600_000_000_000,
}

_DURATION = re.compile(r"^\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*([a-zµμ]*)\s*$")


#: The longest duration taken: two centuries, so that a timestamp of today plus it still
#: fits 64-bit nanoseconds (292 years from 1970).
MAX_DURATION_NS = 200 * 365 * 86_400 * 10**9


def parse_duration_ns(text: str | int | float, *, allow_negative: bool = False) -> int:
    """Parse a duration into integer nanoseconds, exactly (no float rounding).

    Text needs a unit: ns, us (or µs), ms, s, m (or min), h; a bare number other than 0
    is refused, since ``--tolerance 2`` meant as milliseconds would be two seconds. A
    Python number (a configuration's ``*_s`` value) is seconds.

    Parameters
    ----------
    text : str, int or float
        The duration, e.g. ``"60s"``, ``"1.5ms"``, ``"-12ms"``, or seconds as a number.
    allow_negative : bool
        Accept negative durations (clock offsets are signed, windows are not).

    Returns
    -------
    int
        The duration in nanoseconds, truncated toward zero below one nanosecond.

    Examples
    --------
    >>> parse_duration_ns("1.5ms")
    1500000
    >>> parse_duration_ns("-12ms", allow_negative=True)
    -12000000
    >>> parse_duration_ns("2h"), parse_duration_ns(0.5), parse_duration_ns("0")
    (7200000000000, 500000000, 0)
    >>> parse_duration_ns("2")
    Traceback (most recent call last):
    ...
    tracefmt.errors.ParameterError: duration '2' has no unit: write 2s for seconds or 2ms ...
    >>> parse_duration_ns("1e400s")
    Traceback (most recent call last):
    ...
    tracefmt.errors.ParameterError: duration '1e400s' is too long (at most 6,307,200,000 s)
    """
    m = _DURATION.match(str(text))
    units = ", ".join(UNIT_NS)
    if m is None or m.group(2) not in ("", *UNIT_NS):
        raise ParameterError(
            f"invalid duration {str(text)!r} (a number and its unit: {units}; e.g. 60s, 1.5ms, 250us)"
        )
    try:
        number = Decimal(m.group(1))
    except InvalidOperation:  # pragma: no cover - the regex admits only valid decimals
        raise ParameterError(f"invalid duration {text!r}") from None
    if not m.group(2) and isinstance(text, str) and number != 0:
        shown = m.group(1)
        raise ParameterError(
            f"duration {text.strip()!r} has no unit: write {shown}s for seconds or {shown}ms for "
            f"milliseconds (units: {units})"
        )
    value = number * UNIT_NS[m.group(2) or "s"]
    if value < 0 and not allow_negative:
        raise ParameterError(f"duration {str(text)!r} must not be negative")
    if abs(value) > MAX_DURATION_NS:
        # Nanoseconds are kept in 64 bits: anything longer wraps around or overflows.
        raise ParameterError(f"duration {str(text)!r} is too long (at most {MAX_DURATION_NS // 10**9:,} s)")
    return int(value)


def format_duration_ns(ns: int) -> str:
    """Format nanoseconds with the largest unit that keeps three significant digits.

    Examples
    --------
    >>> format_duration_ns(1_500_000)
    '1.5 ms'
    >>> format_duration_ns(-12)
    '-12 ns'
    """
    sign = "-" if ns < 0 else ""
    mag = abs(ns)
    for unit in ("s", "ms"):
        if mag >= UNIT_NS[unit]:
            return f"{sign}{mag / UNIT_NS[unit]:.4g} {unit}"
    if mag >= UNIT_NS["us"]:
        return f"{sign}{mag / UNIT_NS['us']:.4g} µs"
    return f"{sign}{mag} ns"


def format_instant_ns(ns: int | None) -> str | None:
    """Nanoseconds since the epoch as ISO-8601 UTC with all nine decimals (None stays None).

    Examples
    --------
    >>> format_instant_ns(1_500_000_000)
    '1970-01-01T00:00:01.500000000Z'
    >>> format_instant_ns(-1)
    '1969-12-31T23:59:59.999999999Z'
    """
    if ns is None:
        return None
    sec, frac = divmod(int(ns), 1_000_000_000)
    return datetime.fromtimestamp(sec, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{frac:09d}Z"


def format_instants_ns(ns: np.ndarray) -> list[str]:
    """:func:`format_instant_ns` of every timestamp at once (int64 ns, none INT64_MIN).

    Examples
    --------
    >>> format_instants_ns(np.array([1_500_000_000, -1]))
    ['1970-01-01T00:00:01.500000000Z', '1969-12-31T23:59:59.999999999Z']
    """
    text = np.datetime_as_string(np.asarray(ns, np.int64).astype("datetime64[ns]"), unit="ns")
    return [t + "Z" for t in text.tolist()]


_I64 = np.iinfo(np.int64)


def offsets_ns(t: np.ndarray, t0: int) -> np.ndarray:
    """Exact nanoseconds from ``t0`` to each timestamp of ``t`` (all at or after ``t0``),
    as uint64: a trace may span the whole int64 range, where ``t - t0`` would wrap.

    Examples
    --------
    >>> offsets_ns(np.array([-(2**63), 2**63 - 1]), -(2**63)).tolist()
    [0, 18446744073709551615]
    """
    # Two's complement: the difference modulo 2**64 is the true one, which is < 2**64.
    return np.asarray(t, np.int64).view(np.uint64) - np.uint64(int(t0) % 2**64)


def shifted_ns(t: np.ndarray, d_ns: int) -> np.ndarray:
    """``t + d_ns`` for int64 timestamps, held at the ends of the int64 range rather than
    wrapped (a tolerance window around the first or last instant of a trace).

    Examples
    --------
    >>> shifted_ns(np.array([2**63 - 2, 5]), 10).tolist()
    [9223372036854775807, 15]
    """
    t = np.asarray(t, np.int64)
    d = int(d_ns)
    if d >= 0:
        return np.where(t > _I64.max - d, _I64.max, t + np.int64(min(d, _I64.max)))
    return np.where(t < _I64.min - d, _I64.min, t + np.int64(max(d, _I64.min)))

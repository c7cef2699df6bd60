"""Numbers from outside: finite and within range on the way in, never NaN in JSON on the way out.

Every scalar parameter or value the trend verbs take from a user or a file goes through
:func:`check_number`, so an infinity, a NaN or a value out of range is one clear error
naming what it is and what is allowed. :func:`finite_json` turns NaN and infinities into
``None`` (JSON ``null``): ``json.dumps`` would otherwise write ``NaN`` or ``Infinity``,
which is not JSON.
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Any

from tracefmt import ParameterError

#: The command line's constants live here, where NumPy and Arrow are not imported.
#: Trend methods: MDL grouping (``trend.mdl``, as in jumpavg) or trimmed moving statistics.
METHODS = ("mdl", "tmm")
#: A series' direction: which way is better.
DIRECTIONS = ("bigger-is-better", "smaller-is-better")
#: The most significant bits per sample: a float64 holds 53 (beyond, the bits overflow).
MAX_SBPS = 52
#: The most trials of one run (CSIT runs 10): more is a typo, and would fill the memory.
MAX_TRIALS = 1_000_000
#: Columns of an import file: required first, then optional ones with their defaults.
IMPORT_COLUMNS = {
    "test": None,
    "build": None,
    "time": None,
    "value": None,
    "testbed": "default",
    "trial": "row order within the build",
    "unit": "",
    "direction": "bigger-is-better",
    "tags": "",
}

__all__ = [
    "DIRECTIONS",
    "IMPORT_COLUMNS",
    "MAX_SBPS",
    "MAX_TRIALS",
    "METHODS",
    "check_number",
    "finite_json",
]


def _shown(x: float) -> str:
    """A bound for people: whole numbers with thousands separators, others as ``g``."""
    return f"{int(x):,}" if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def _allowed(low: float | None, high: float | None, above: float | None, integer: bool) -> str:
    """What :func:`check_number` accepts, in words."""
    kind = "an integer" if integer else "a finite number"
    if above is not None:
        return f"{kind} > {_shown(above)}" + ("" if high is None else f" and <= {_shown(high)}")
    if low is not None and high is not None:
        return f"{kind} from {_shown(low)} to {_shown(high)}"
    if low is not None:
        return f"{kind} >= {_shown(low)}"
    if high is not None:
        return f"{kind} <= {_shown(high)}"
    return kind


def _within(number: float, low: float | None, high: float | None, above: float | None, integer: bool) -> bool:
    """Whether :func:`check_number` accepts ``number`` (a float, perhaps NaN or infinite)."""
    ok = math.isfinite(number) and not (integer and not number.is_integer())
    ok = ok and (low is None or number >= low) and (high is None or number <= high)
    return ok and (above is None or number > above)


def check_number(
    value: Any,
    what: str,
    *,
    low: float | None = None,
    high: float | None = None,
    above: float | None = None,
    integer: bool = False,
) -> float:
    """``value`` as a float if it is a finite number in range, else a ParameterError.

    Parameters
    ----------
    value : Any
        The number to check (``bool`` is not a number here).
    what : str
        Its name in the message, e.g. ``"--sbps"`` or ``"test 'ip4' build 7 value"``.
    low, high : float, optional
        Inclusive bounds.
    above : float, optional
        Exclusive lower bound (``above=0``: positive).
    integer : bool
        Require an integral value (an ``int``, or a float without a fraction).

    Returns
    -------
    float
        The value.

    Raises
    ------
    ParameterError
        Not a number, NaN, infinite, fractional where an integer is needed, or out of range;
        the message names ``what``, the value and the allowed range.

    Examples
    --------
    >>> check_number(12, "sbps", low=0, high=52)
    12.0
    >>> check_number(float("inf"), "value")
    Traceback (most recent call last):
    ...
    tracefmt.errors.ParameterError: value must be a finite number, not inf
    >>> check_number(-5, "--sbps", low=0, high=52)
    Traceback (most recent call last):
    ...
    tracefmt.errors.ParameterError: --sbps must be a finite number from 0 to 52, not -5
    """
    allowed = _allowed(low, high, above, integer)
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ParameterError(f"{what} must be {allowed}, not {value!r}")
    try:
        number = float(value)
    except OverflowError:  # an int beyond float's range
        number = math.inf
    if not _within(number, low, high, above, integer):
        shown = value.item() if hasattr(value, "item") else value  # numpy scalars as Python's
        raise ParameterError(f"{what} must be {allowed}, not {shown}")
    return number


def finite_json(doc: Any) -> Any:
    """``doc`` (dicts, lists, tuples, scalars) with every NaN or infinite float as ``None``.

    Examples
    --------
    >>> finite_json({"a": [1.0, float("nan")], "b": (float("inf"), "x")})
    {'a': [1.0, None], 'b': [None, 'x']}
    """
    if isinstance(doc, dict):
        return {k: finite_json(v) for k, v in doc.items()}
    if isinstance(doc, list | tuple):
        return [finite_json(v) for v in doc]
    if isinstance(doc, float) and not math.isfinite(doc):
        return None
    return doc

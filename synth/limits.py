"""What a synth configuration may ask for: one home for every bound, used by the file
reader and by the checks of a whole configuration (command-line overrides included).

The bounds keep memory and time bounded whatever the input, and keep every timestamp
inside int64 nanoseconds (1677 to 2262). ``synth/README.md`` lists them.
"""

from __future__ import annotations

import numbers
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from synth.config import TraceletSpec

__all__ = [
    "CLIENTS",
    "DRIFT",
    "DURATION",
    "FRACTION",
    "MAX_CALLS",
    "MAX_DEPTH",
    "MAX_LOOPS",
    "MAX_LOOP_CALLS",
    "MAX_MESSAGES",
    "MAX_TIME_S",
    "MESSAGES",
    "MODULUS",
    "OFFSET",
    "PARALLELISM",
    "PROBABILITY",
    "QUEUE",
    "RATE",
    "REPEAT",
    "RESOLUTION",
    "RESOLUTION_NS",
    "SEED",
    "START_NS",
    "TIME",
    "WEIGHT",
    "Limit",
    "calls_per_instance",
    "tracelet_problem",
]

MAX_MESSAGES = 1_000_000_000  # about 15 minutes of generation, several GB of Parquet
MAX_TIME_S = 86_400.0  # a day: any delay, think time, clock offset or jitter
MAX_CALLS = 10_000  # calls (or hops) of one instance, repeats expanded
MAX_DEPTH = 64  # calls nested in calls
MAX_LOOPS = 100_000  # client loops of all tracelets together
MAX_LOOP_CALLS = 250_000  # client loops x calls per instance, summed over tracelets (a round)


def _show(x: float) -> str:
    """A bound as people read it: ``1,000,000``, ``86,400``, ``1e-09``."""
    if isinstance(x, int) or (float(x).is_integer() and abs(x) < 1e16):
        return f"{int(x):,}"
    return repr(x)


@dataclass(frozen=True)
class Limit:
    """The allowed range of a number: ``lo <= value <= hi``, finite, an integer if asked.

    Examples
    --------
    >>> Limit(1, 10, integer=True).problem(0)
    'must be between 1 and 10, not 0'
    >>> Limit(0.0, 1.0).problem(float("nan"))
    'must be between 0 and 1, not nan'
    >>> Limit(0.0, 1.0).problem(0.5) is None
    True
    """

    lo: float
    hi: float
    integer: bool = False

    def problem(self, value: Any) -> str | None:
        """What is wrong with ``value`` (``"must be ..., not ..."``), or None if it is allowed."""
        kind = numbers.Integral if self.integer else numbers.Real
        if isinstance(value, bool) or not isinstance(value, kind):
            return f"must be {'an integer' if self.integer else 'a number'}, not {value!r}"
        if not self.lo <= value <= self.hi:  # NaN fails too
            return f"must be between {_show(self.lo)} and {_show(self.hi)}, not {value!r}"
        return None


def _instant_ns(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()) * 1_000_000_000


SEED = Limit(0, 2**63 - 1, integer=True)
MESSAGES = Limit(1, MAX_MESSAGES, integer=True)
DURATION = Limit(1e-9, 1e9)  # 31.7 years, so start + duration stays before 2262
PARALLELISM = Limit(1e-9, 1_000)
RESOLUTION = Limit(1e-9, 1.0)
RESOLUTION_NS = Limit(1, 1_000_000_000, integer=True)
START_NS = Limit(_instant_ns("1970-01-01"), _instant_ns("2200-01-01"), integer=True)
PROBABILITY = FRACTION = Limit(0.0, 1.0)
WEIGHT = Limit(1e-12, 1e12)
CLIENTS = Limit(1, MAX_LOOPS, integer=True)
TIME = Limit(0.0, MAX_TIME_S)
OFFSET = Limit(-MAX_TIME_S, MAX_TIME_S)
DRIFT = Limit(-1e5, 1e5)  # ppm: 10 %
RATE = Limit(1e-9, 1e12)
QUEUE = Limit(1, 1_000_000_000, integer=True)
MODULUS = Limit(1, 2**63 - 1, integer=True)
REPEAT = Limit(0, MAX_CALLS, integer=True)


def calls_per_instance(spec: TraceletSpec) -> int:
    """Calls (or hops) of one instance, repeats expanded at their maximum; past
    ``MAX_CALLS`` the count stops at ``MAX_CALLS + 1``."""
    return _calls_and_depth(spec)[0]


def _calls_and_depth(spec: TraceletSpec) -> tuple[int, int]:
    """Calls of one instance with repeats expanded (capped just past ``MAX_CALLS``), and
    how deep they nest; for a chain of one-way messages, its hops and 1."""
    if spec.kind == "messages":
        return len(spec.hops), 1
    children: dict[str | None, list[str]] = defaultdict(list)
    for call in spec.calls:
        children[call.parent].append(call.id)
    size: dict[str, int] = {}
    depth: dict[str, int] = {}
    for call in reversed(spec.calls):  # a parent is listed before its children
        kids = children[call.id]
        size[call.id] = min(call.repeat[1] * (1 + sum(size[k] for k in kids)), MAX_CALLS + 1)
        depth[call.id] = 1 + max((depth[k] for k in kids), default=0)
    root = spec.calls[0].id
    return size[root], depth[root]


def tracelet_problem(spec: TraceletSpec) -> str | None:
    """Why one instance of the tracelet would be too large to draw, or None.

    Examples
    --------
    >>> from synth.config import CallSpec, TraceletSpec
    >>> root = CallSpec(id="a", parent=None, to=("s",), weights=(1.0,))
    >>> loop = CallSpec(id="b", parent="a", to=("s",), weights=(1.0,), repeat=(1, 20_000))
    >>> tracelet_problem(TraceletSpec("t", "rpc", ("c",), (1.0,), calls=(root, loop)))
    'one instance makes more than 10,000 calls (repeats expanded); lower repeat or split the tracelet'
    """
    calls, depth = _calls_and_depth(spec)
    if depth > MAX_DEPTH:
        return f"calls nest {depth} deep (at most {MAX_DEPTH})"
    if calls > MAX_CALLS:
        what = "hops" if spec.kind == "messages" else "calls (repeats expanded)"
        return f"one instance makes more than {MAX_CALLS:,} {what}; lower repeat or split the tracelet"
    return None

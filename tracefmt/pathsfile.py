"""The paths file (``docs/files.md``): what ``infer nesting`` and ``infer convolution`` write
and ``viz``, ``report``, ``export`` and ``trend from-paths`` read, checked in one place.

A paths file is JSON, ``"format": "wirepath.paths/1"``: nesting patterns as trees of
visits, or convolution's linear paths. It is written whole or not at all.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tracefmt._files import existing_file, write_atomic
from tracefmt.configfile import nesting_depth, read_config_bytes
from tracefmt.errors import ParameterError, SchemaError, TraceFileError
from tracefmt.identify import hint

__all__ = [
    "DNS_RCODE_NAMES",
    "GRPC_SERVER_FAILURES",
    "GRPC_STATUS_NAMES",
    "MAX_DEPTH",
    "PATHS_FORMAT",
    "PATTERN_SORTS",
    "check_paths",
    "check_sort",
    "hop_delays_s",
    "is_server_error",
    "read_paths",
    "write_paths",
]

#: The ``format`` of every paths file.
PATHS_FORMAT = "wirepath.paths/1"
#: How patterns are ordered: by total time (count x mean latency) or by instances.
PATTERN_SORTS = ("total", "count")


# ---- statuses and server errors ----------------------------------------------------------
# A visit's ``errors`` is the share of its returns whose status says the server failed. A
# trace's ``status`` column holds each protocol's own words, and these vocabularies do not
# overlap where it matters, so the status alone says whether it is an error.

#: gRPC's status codes by number (grpc/doc/statuscodes.md): ``grpc-status: 14`` is
#: ``UNAVAILABLE``.
GRPC_STATUS_NAMES = (
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
    "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
    "UNAUTHENTICATED",
)  # fmt: skip
#: The gRPC codes that say the server failed (the others say the client asked for
#: something it may not have, or gave up: ``CANCELLED``, ``NOT_FOUND``,
#: ``PERMISSION_DENIED``, ...). ``RESOURCE_EXHAUSTED`` is a quota or a rate limit, the
#: caller's; ``DEADLINE_EXCEEDED`` is the server too slow for its caller.
GRPC_SERVER_FAILURES = frozenset(
    ("UNKNOWN", "DEADLINE_EXCEEDED", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS")
)
#: DNS response codes by number (RFC 1035 4.1.1, RFC 2136, RFC 8490); the others are
#: ``RCODE<n>``.
DNS_RCODE_NAMES = (
    "NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED", "YXDOMAIN", "YXRRSET",
    "NXRRSET", "NOTAUTH", "NOTZONE", "DSOTYPENI",
)  # fmt: skip
# Statuses that are no error (besides HTTP's below 500): success, DNS's other answers,
# gRPC's codes of the client's making.
_NOT_ERRORS = frozenset(
    ("OK", *DNS_RCODE_NAMES[:2], *DNS_RCODE_NAMES[3:], *(set(GRPC_STATUS_NAMES) - GRPC_SERVER_FAILURES))
)


def is_server_error(status: str | None) -> bool:
    """Whether a return's ``status`` says the server failed: the rule behind a visit's
    ``errors`` in the paths file and a span's error status in exports.

    One rule per protocol, told apart by the status's form:

    - HTTP/1 and HTTP/2 (three digits): 500 to 599;
    - gRPC (a code's name, ``GRPC_STATUS_NAMES``): those of ``GRPC_SERVER_FAILURES``;
    - PostgreSQL and MySQL (``OK``, ``ERROR <SQLSTATE or code>``): every ``ERROR``;
    - DNS (an RCODE's name, ``DNS_RCODE_NAMES``, or ``RCODE<n>``): ``SERVFAIL``;
    - Redis (``OK``, or an error reply's prefix: ``ERR``, ``WRONGTYPE``, ``NOAUTH``, ...):
      every error, that is every other status.

    Examples
    --------
    >>> [is_server_error(s) for s in ("200", "404", "503", "OK", "UNAVAILABLE", "NOT_FOUND")]
    [False, False, True, False, True, False]
    >>> [is_server_error(s) for s in ("ERROR 42P01", "NXDOMAIN", "SERVFAIL", "WRONGTYPE", None)]
    [True, False, True, True, False]
    """
    if not status or status in _NOT_ERRORS:
        return False
    if len(status) == 3 and status.isdigit():
        return status[0] == "5"
    # What is left: ERROR ..., SERVFAIL, gRPC's server failures, Redis's error prefixes.
    return not (status.startswith("RCODE") and status[5:].isdigit())


def hop_delays_s(path: dict[str, Any]) -> list[float]:
    """The delay of each hop of a convolution path: its median where the path gives one
    (``medians_s``: where messages go one for one, as answers to calls), else its most
    frequent delay; 0 for a hop without delays.

    Examples
    --------
    >>> hop_delays_s({"delays_s": [[0.001, 0.009], [0.002]], "medians_s": [0.006, None]})
    [0.006, 0.002]
    >>> hop_delays_s({"delays_s": [[0.003]]})
    [0.003]
    """
    medians = path.get("medians_s") or []
    out = []
    for k, delays in enumerate(path["delays_s"]):
        median = medians[k] if k < len(medians) else None
        out.append(float(median) if median is not None else float(delays[0]) if delays else 0.0)
    return out


def _check_hop_numbers(path: dict[str, Any], where: str) -> None:
    """A path's ``counts`` and ``delays_s``: numbers of at least 0 (lists of them)."""
    for k, count in enumerate(path.get("counts", [])):
        if not _number(count) or count < 0:
            raise SchemaError(f"{where}: counts[{k}] is {count!r}: each must be a message count (>= 0)")
    for k, delays in enumerate(path.get("delays_s", [])):
        if not isinstance(delays, list) or not all(_number(d) and d >= 0 for d in delays):
            raise SchemaError(
                f"{where}: delays_s[{k}] is {delays!r}: each must be a list of delays in seconds (>= 0)"
            )


def _first_non_finite(value: Any, where: str) -> str | None:
    """Where the first NaN or infinite number in a JSON-able ``value`` is, if any."""
    stack = [(value, where)]
    while stack:
        v, at = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            return f"{at} is {v}"
        if isinstance(v, dict):
            stack.extend((x, f"{at}.{k}") for k, x in reversed(list(v.items())))
        elif isinstance(v, list | tuple):
            stack.extend((x, f"{at}[{i}]") for i, x in reversed(list(enumerate(v))))
    return None


def _check_medians(path: dict[str, Any], where: str, hops: int) -> None:
    """A path's optional ``medians_s``: one per delay list, each a number of at least 0
    or null."""
    medians = path.get("medians_s")
    if medians is None:
        return
    if not isinstance(medians, list) or len(medians) != hops:
        raise SchemaError(f"{where}: 'medians_s' must be a list of len(nodes) - 2 = {hops} numbers or nulls")
    for m in medians:
        if not _number(m, null=True) or (m is not None and m < 0):
            raise SchemaError(
                f"{where}: 'medians_s' holds {m!r}: each must be a delay in seconds (>= 0) or null"
            )


def check_sort(sort: str) -> None:
    """Raise ``ParameterError`` unless ``sort`` is one of :data:`PATTERN_SORTS`.

    Examples
    --------
    >>> check_sort("count")
    >>> check_sort("size")
    Traceback (most recent call last):
    ...
    tracefmt.errors.ParameterError: unknown sort 'size' (must be one of total, count)
    """
    if sort not in PATTERN_SORTS:
        raise ParameterError(f"unknown sort {sort!r} (must be one of {', '.join(PATTERN_SORTS)})")


def write_paths(doc: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write a paths document to ``path`` whole or not at all (checked first).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "p.json"
    >>> _ = write_paths({"format": "wirepath.paths/1", "algorithm": "nesting", "patterns": []}, f)
    >>> read_paths(f)["patterns"]
    []
    """
    bad = _first_non_finite(doc, "the document")
    if bad is not None:
        # JSON has no NaN or Infinity: tools other than Python's json would refuse the file.
        raise SchemaError(f"{path}: {bad}: a paths file holds only finite numbers (null where none)")
    check_paths(doc, str(path))
    depth = _json_depth(doc)
    # Indented, a deep tree would take space and time growing with its depth squared.
    indent = 1 if depth <= _SHALLOW else None
    text = _on_deep_stack(lambda: json.dumps(doc, indent=indent, allow_nan=False), depth)
    return write_atomic(path, text + "\n")


def _json_depth(doc: Any) -> int:
    """How deep ``doc`` nests (objects and lists), with a stack of its own."""
    deepest, stack = 0, [(doc, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict | list):
            deepest = max(deepest, d)
            stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def read_paths(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a paths file (``wirepath infer ... --out``) and check its outline.

    Raises
    ------
    TraceFileError
        The file is missing or not JSON.
    SchemaError
        It is JSON but not a ``wirepath.paths/1`` document.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "p.json"
    >>> _ = f.write_text('{"format": "wirepath.paths/1", "algorithm": "nesting", "patterns": []}')
    >>> read_paths(f)["algorithm"]
    'nesting'
    """
    p = existing_file(path, "a paths file (JSON)")
    data = read_config_bytes(p, "a paths file (JSON)", limit=MAX_PATHS_BYTES)
    # Each visit is two levels (the visit, its children); the outline takes a few more.
    depth = nesting_depth(data)
    if depth > 2 * MAX_DEPTH + 8:
        raise TraceFileError(
            f"{p}: JSON nested {depth} deep, too deep for a paths file (visits at most {MAX_DEPTH})"
        )
    try:
        doc = _on_deep_stack(lambda: json.loads(data.decode("utf-8")), depth)
    except (ValueError, UnicodeDecodeError) as exc:
        said = hint(p)
        raise TraceFileError(
            f"{p}: not a paths file{said}" if said else f"{p}: not JSON, so not a paths file ({exc})"
        ) from None
    except RecursionError:
        raise TraceFileError(f"{p}: JSON nested too deep for a paths file") from None
    check_paths(doc, str(p))
    return doc


#: Deeper call trees than this are not a paths file wirepath wrote (nor a system's);
#: call chains thousands of levels deep are (recursive services, long span chains).
MAX_DEPTH = 10_000

#: JSON nested deeper than this is parsed and written on a stack of its own (below).
_SHALLOW = 200


def _on_deep_stack(fn: Callable[[], Any], depth: int) -> Any:
    """``fn()`` run where JSON ``depth`` levels deep fits: Python's json parser and
    writer recurse once per level, which the interpreter's recursion limit and the main
    thread's stack would not allow; a thread with a large stack, and a recursion limit
    raised for its run, do."""
    if depth <= _SHALLOW:
        return fn()
    result: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            result.append((True, fn()))
        except BaseException as exc:  # handed to the caller's thread below
            result.append((False, exc))

    old_limit, old_size = sys.getrecursionlimit(), threading.stack_size()
    sys.setrecursionlimit(max(old_limit, 4 * depth + 1000))
    try:
        threading.stack_size(max(old_size, 64 << 20) + 8192 * depth)
        worker = threading.Thread(target=run, name="wirepath-json")
        worker.start()
    finally:
        threading.stack_size(old_size)
    try:
        worker.join()
    finally:
        sys.setrecursionlimit(old_limit)
    ok, value = result[0]
    if not ok:
        raise value
    return value


#: The largest duration in a paths file, in seconds (200 years, as everywhere in wirepath).
MAX_SECONDS = 6_307_200_000.0

#: The largest other number: counts and settings, each exact as a double.
MAX_NUMBER = 2**53

#: The largest paths file read: ample for a million patterns.
MAX_PATHS_BYTES = 1 << 30


def _number(value: Any, *, null: bool = False) -> bool:
    if value is None:
        return null
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    # An int as large as 10**400 has no float: :func:`_check_numbers` bounds it.
    return isinstance(value, int) or math.isfinite(value)


def _check_numbers(doc: Any, where: str) -> None:
    """Every number in ``doc`` finite and in range: durations (keys ending ``_s``, and
    what they hold) within :data:`MAX_SECONDS`, every other within :data:`MAX_NUMBER`.

    One rule for the whole document, so that no reader meets a number it would overflow
    on (a mean of 1e308 s turned into nanoseconds, a count of 10**400 into a float).
    """
    stack: list[tuple[Any, str, bool]] = [(doc, "", False)]
    while stack:
        v, at, seconds = stack.pop()
        if isinstance(v, dict):
            stack.extend((x, f"{at}.{k}", seconds or str(k).endswith("_s")) for k, x in v.items())
        elif isinstance(v, list):
            stack.extend((x, f"{at}[{i}]", seconds) for i, x in enumerate(v))
        elif isinstance(v, int | float) and not isinstance(v, bool):
            bound = MAX_SECONDS if seconds else MAX_NUMBER
            if not (isinstance(v, int) or math.isfinite(v)) or not -bound <= v <= bound:
                shown = repr(v) if len(repr(v)) <= 24 else f"{repr(v)[:20]}..."
                raise SchemaError(
                    f"{where}: {at.lstrip('.')} is {shown}: out of range or not finite "
                    f"(a {'duration in seconds' if seconds else 'number'} of at most {bound:,.0f})"
                )


_STATS_SHAPES = {
    "stages": "a list of objects",
    "confidence": "an object of numbers (and its calibration's name)",
    "min_confidence": "an object of numbers (what --min-confidence left out)",
    "callers": "an object: renamed (an object of connection counts) and kept (a count)",
    "keys": "an object of counts (what the request keys decided)",
}

#: Settings that readers take as numbers, so never null.
_NEEDED_PARAMS = ("quantum_s", "band_s")


def _check_outline(doc: dict[str, Any], where: str) -> None:
    """The parts every paths file may have: ``trace``, ``params``, ``stats``, ``notes``
    and ``roots``, each of the type its readers take it for."""
    trace = doc.get("trace")
    if trace is not None:
        if not isinstance(trace, dict):
            raise SchemaError(f"{where}: 'trace' must be an object (messages, start, end)")
        if not _number(trace.get("messages", 0)) or trace.get("messages", 0) < 0:
            raise SchemaError(f"{where}: trace.messages must be a count >= 0, not {trace['messages']!r}")
        for key in ("start", "end"):
            if not isinstance(trace.get(key), str | int | float | None) or isinstance(trace.get(key), bool):
                raise SchemaError(
                    f"{where}: trace.{key} must be a time (text or a number) or null, not {trace[key]!r}"
                )
    params = doc.get("params", {})
    if (
        not isinstance(params, dict)
        or not all(_number(v, null=k not in _NEEDED_PARAMS) for k, v in params.items() if k.endswith("_s"))
        or not all(
            isinstance(v, str | int | float | None)
            or (k == "root" and isinstance(v, list) and all(isinstance(x, str) for x in v))
            for k, v in params.items()
        )
    ):
        raise SchemaError(
            f"{where}: 'params' must be an object of settings (numbers, text, true/false, null; "
            "durations, ending _s, a number or null; quantum_s and band_s a number; root a list of names)"
        )
    stats = doc.get("stats")
    if stats is not None:
        if not isinstance(stats, dict):
            raise SchemaError(f"{where}: 'stats' must be an object")
        for key, value in stats.items():
            if key == "stages":
                ok = isinstance(value, list) and all(isinstance(x, dict) for x in value)
            elif key in ("confidence", "min_confidence"):
                ok = value is None or (
                    isinstance(value, dict)
                    and all(
                        _number(x, null=True) or (k == "calibration" and isinstance(x, str))
                        for k, x in value.items()
                    )
                )
            elif key == "keys":
                ok = isinstance(value, dict) and all(_number(x) for x in value.values())
            elif key == "callers":
                renamed = value.get("renamed") if isinstance(value, dict) else None
                ok = (
                    isinstance(renamed, dict)
                    and all(isinstance(k, str) and _number(n) for k, n in renamed.items())
                    and _number(value.get("kept"))
                    and set(value) <= {"renamed", "kept"}
                )
            else:
                ok = _number(value, null=True)
            if not ok:
                shape = _STATS_SHAPES.get(key, "a number or null")
                raise SchemaError(f"{where}: stats.{key} must be {shape}, not {value!r}"[:300])
    for key in ("notes", "roots"):
        value = doc.get(key)
        if value is not None and not (isinstance(value, list) and all(isinstance(x, str) for x in value)):
            raise SchemaError(f"{where}: '{key}' must be a list of text")


def _check_stats(stats: Any, *, null: bool) -> bool:
    if stats is None:
        return null
    return isinstance(stats, dict) and _number(stats.get("mean")) and all(_number(v) for v in stats.values())


def _check_pattern(pat: dict[str, Any], where: str) -> None:
    """Raise ``SchemaError`` unless a nesting pattern's fields and visit tree have the
    types the paths file promises (walked with a stack: a deep tree cannot overflow)."""
    if not isinstance(pat["id"], str):
        raise SchemaError(f"{where}: id must be text (a pattern's hash), not {pat['id']!r}")
    if isinstance(pat["count"], bool) or not isinstance(pat["count"], int) or pat["count"] < 0:
        raise SchemaError(f"{where}: count must be a whole number >= 0, not {pat['count']!r}")
    if not _number(pat["total_latency_s"]) or pat["total_latency_s"] < 0:
        raise SchemaError(
            f"{where}: total_latency_s must be a finite number >= 0, not {pat['total_latency_s']!r}"
        )
    stack = [(pat["root"], 1)]
    while stack:
        visit, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise SchemaError(f"{where}: visits nested more than {MAX_DEPTH} deep")
        if not isinstance(visit, dict) or not isinstance(visit.get("node"), str):
            raise SchemaError(f"{where}: a visit must be an object with a 'node' name")
        if not isinstance(visit.get("caller"), str) or not isinstance(visit.get("children", []), list):
            raise SchemaError(f"{where}: visit {visit['node']!r} needs a 'caller' name and a 'children' list")
        if not _check_stats(visit.get("latency_s"), null=False):
            raise SchemaError(
                f"{where}: visit {visit['node']!r} needs latency_s, an object with a finite mean "
                "(and finite stats)"
            )
        if not _check_stats(visit.get("delay_s"), null=True):
            raise SchemaError(
                f"{where}: visit {visit['node']!r}'s delay_s must be null or an object with a finite mean "
                "(and finite stats)"
            )
        for field, name in (("ops", "op"), ("status", "status")):
            if not _shares(visit.get(field, []), name):
                shape = f"{{{name}: text, share: 0 to 1}}"
                raise SchemaError(f"{where}: visit {visit['node']!r}'s {field} must be a list of {shape}")
        errors = visit.get("errors", 0)
        if not _number(errors) or not 0 <= errors <= 1:
            raise SchemaError(
                f"{where}: visit {visit['node']!r}'s errors must be a share from 0 to 1, not {errors!r}"
            )
        stack.extend((child, depth + 1) for child in visit.get("children", []))


def _shares(value: Any, name: str) -> bool:
    """Whether ``value`` is a visit's list of ``{name: text, share: 0 to 1}`` (its
    operations, its statuses)."""
    return isinstance(value, list) and all(
        isinstance(o, dict)
        and isinstance(o.get(name), str)
        and _number(o.get("share"))
        and 0 <= o["share"] <= 1
        for o in value
    )


def _check_path(path: Any, where: str) -> None:
    """Raise ``SchemaError`` unless a convolution path has its fields, of their types."""
    nodes = path.get("nodes") if isinstance(path, dict) else None
    if not isinstance(nodes, list) or len(nodes) < 2 or not all(isinstance(n, str) for n in nodes):
        raise SchemaError(f"{where} needs 'nodes', a list of at least two names")
    assert isinstance(path, dict)
    if not isinstance(path.get("id", ""), str):
        raise SchemaError(f"{where}: id must be text (a path's hash), not {path['id']!r}")
    for key, n, what in (("counts", len(nodes) - 1, "counts"), ("delays_s", len(nodes) - 2, "delay lists")):
        if not isinstance(path.get(key), list) or len(path[key]) != n:
            raise SchemaError(f"{where} needs len(nodes) - {len(nodes) - n} = {n} {what}")
    for key in ("count", "latency_s"):
        if not _number(path.get(key, 0)) or path.get(key, 0) < 0:
            raise SchemaError(f"{where}: {key} must be a number >= 0, not {path[key]!r}")
    delay_counts = path.get("delay_counts", [])
    if not isinstance(delay_counts, list) or not all(isinstance(c, list) for c in delay_counts):
        raise SchemaError(f"{where}: delay_counts must be a list of lists of counts")
    _check_medians(path, where, len(nodes) - 2)
    _check_hop_numbers(path, where)


def check_paths(doc: Any, where: str = "paths") -> None:
    """Raise ``SchemaError`` unless ``doc`` is a paths document (nesting or convolution):
    the whole document, every field any reader takes, so that a reader can trust it.

    Examples
    --------
    >>> check_paths({"format": "wirepath.paths/1", "algorithm": "nesting", "patterns": []})
    >>> check_paths({"format": "x"})
    Traceback (most recent call last):
    ...
    tracefmt.errors.SchemaError: paths: format 'x' is not a paths file (want wirepath.paths/1)
    >>> try:  # doctest: +ELLIPSIS
    ...     check_paths({"format": "wirepath.paths/1", "algorithm": "nesting", "patterns": [],
    ...                  "trace": {"messages": 10**400}})
    ... except SchemaError as e:
    ...     print(e)
    paths: trace.messages is 10000000000000000000...: out of range or not finite (a number of at most ...)
    """
    if not isinstance(doc, dict):
        raise SchemaError(f"{where}: a paths file is a JSON object, not {type(doc).__name__}")
    if doc.get("format") != PATHS_FORMAT:
        raise SchemaError(
            f"{where}: format {doc.get('format')!r} is not a paths file (want wirepath.paths/1)"
        )
    _check_outline(doc, where)
    algorithm = doc.get("algorithm")
    if algorithm == "nesting":
        if not isinstance(doc.get("patterns"), list):
            raise SchemaError(f"{where}: a nesting paths file needs a 'patterns' list")
        for k, pat in enumerate(doc["patterns"]):
            if not isinstance(pat, dict) or not {"id", "count", "total_latency_s", "root"} <= set(pat):
                raise SchemaError(f"{where}: pattern {k} needs id, count, total_latency_s and root")
            conf = pat.get("confidence", 0.0)
            if isinstance(conf, bool) or not isinstance(conf, int | float) or not 0.0 <= conf <= 1.0:
                raise SchemaError(
                    f"{where}: pattern {k}'s confidence must be a number from 0 to 1, not {conf!r}"
                )
            _check_pattern(pat, f"{where}: pattern {k}")
    elif algorithm == "convolution":
        if not isinstance(doc.get("paths"), list):
            raise SchemaError(f"{where}: a convolution paths file needs a 'paths' list")
        for k, path in enumerate(doc["paths"]):
            _check_path(path, f"{where}: path {k}")
    else:
        raise SchemaError(f"{where}: unknown algorithm {algorithm!r} (must be nesting or convolution)")
    _check_numbers(doc, where)

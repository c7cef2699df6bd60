"""The paths file (``results.md``): what ``infer nesting`` and ``infer convolution`` write
and ``viz``, ``report``, ``export`` and ``trend from-paths`` read, checked in one place.

A paths file is JSON, ``"format": "wirepath.paths/1"``: nesting patterns as trees of
visits, or convolution's linear paths. It is written whole or not at all.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from tracefmt._files import existing_file, write_atomic
from tracefmt.errors import ParameterError, SchemaError, TraceFileError

__all__ = [
    "MAX_DEPTH",
    "PATHS_FORMAT",
    "PATTERN_SORTS",
    "check_paths",
    "check_sort",
    "hop_delays_s",
    "read_paths",
    "write_paths",
]

#: The ``format`` of every paths file.
PATHS_FORMAT = "wirepath.paths/1"
#: How patterns are ordered: by total time (count x mean latency) or by instances.
PATTERN_SORTS = ("total", "count")


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
    check_paths(doc, str(path))
    bad = _first_non_finite(doc, "the document")
    if bad is not None:
        # JSON has no NaN or Infinity: tools other than Python's json would refuse the file.
        raise SchemaError(f"{path}: {bad}: a paths file holds only finite numbers (null where none)")
    return write_atomic(path, json.dumps(doc, indent=1, allow_nan=False) + "\n")


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
    try:
        doc = json.loads(p.read_text(encoding="utf-8-sig"))  # a byte order mark dropped
    except (ValueError, UnicodeDecodeError) as exc:
        raise TraceFileError(f"{p}: not JSON, so not a paths file ({exc})") from None
    except RecursionError:
        raise TraceFileError(f"{p}: JSON nested too deep for a paths file") from None
    check_paths(doc, str(p))
    return doc


#: Deeper call trees than this are not a paths file wirepath wrote (nor a system's).
MAX_DEPTH = 1000


def _number(value: Any, *, null: bool = False) -> bool:
    if value is None:
        return null
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def _check_pattern(pat: dict[str, Any], where: str) -> None:
    """Raise ``SchemaError`` unless a nesting pattern's fields and visit tree have the
    types the paths file promises (walked with a stack: a deep tree cannot overflow)."""
    if isinstance(pat["count"], bool) or not isinstance(pat["count"], int) or pat["count"] < 0:
        raise SchemaError(f"{where}: count must be a whole number >= 0, not {pat['count']!r}")
    if not _number(pat["total_latency_s"]):
        raise SchemaError(f"{where}: total_latency_s must be a finite number, not {pat['total_latency_s']!r}")
    stack = [(pat["root"], 1)]
    while stack:
        visit, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise SchemaError(f"{where}: visits nested more than {MAX_DEPTH} deep")
        if not isinstance(visit, dict) or not isinstance(visit.get("node"), str):
            raise SchemaError(f"{where}: a visit must be an object with a 'node' name")
        if not isinstance(visit.get("caller"), str) or not isinstance(visit.get("children", []), list):
            raise SchemaError(f"{where}: visit {visit['node']!r} needs a 'caller' name and a 'children' list")
        for key in ("latency_s", "delay_s"):
            stats = visit.get(key)
            if stats is not None and (
                not isinstance(stats, dict)
                or not _number(stats.get("mean"))
                or not all(_number(v) for v in stats.values())
            ):
                raise SchemaError(
                    f"{where}: visit {visit['node']!r}'s {key} needs a finite mean (and finite stats)"
                )
        stack.extend((child, depth + 1) for child in visit.get("children", []))


def check_paths(doc: Any, where: str = "paths") -> None:
    """Raise ``SchemaError`` unless ``doc`` is a paths document (nesting or convolution).

    Examples
    --------
    >>> check_paths({"format": "wirepath.paths/1", "algorithm": "nesting", "patterns": []})
    >>> check_paths({"format": "x"})
    Traceback (most recent call last):
    ...
    tracefmt.errors.SchemaError: paths: format 'x' is not a paths file (want wirepath.paths/1)
    """
    if not isinstance(doc, dict):
        raise SchemaError(f"{where}: a paths file is a JSON object, not {type(doc).__name__}")
    if doc.get("format") != PATHS_FORMAT:
        raise SchemaError(
            f"{where}: format {doc.get('format')!r} is not a paths file (want wirepath.paths/1)"
        )
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
            nodes = path.get("nodes") if isinstance(path, dict) else None
            if not isinstance(nodes, list) or len(nodes) < 2:
                raise SchemaError(f"{where}: path {k} needs 'nodes', a list of at least two names")
            if len(path.get("counts", [])) != len(nodes) - 1:
                raise SchemaError(f"{where}: path {k} needs len(nodes) - 1 = {len(nodes) - 1} counts")
            if len(path.get("delays_s", [])) != len(nodes) - 2:
                raise SchemaError(f"{where}: path {k} needs len(nodes) - 2 = {len(nodes) - 2} delay lists")
            _check_medians(path, f"{where}: path {k}", len(nodes) - 2)
            _check_hop_numbers(path, f"{where}: path {k}")
    else:
        raise SchemaError(f"{where}: unknown algorithm {algorithm!r} (must be nesting or convolution)")

"""Inferred path instances as traces for the tracing ecosystem: OTLP/JSON, Zipkin v2, Jaeger.

Input is the instances table of ``wirepath infer nesting --instances`` (one row per call
pair with its inferred parent, instance, pattern and confidence). Each root instance
becomes one trace; each visit (call pair) one ``SERVER`` span of the called node, child
of its parent visit's span; the root's caller, which nobody called, gets one ``CLIENT``
span over the root visit, so the trace starts where the request came from. The pattern
id, the parent's confidence and the number of candidate parents are attributes.

Ids are deterministic (hashes of the call times and pair numbers): exporting twice gives
the same file. Shapes:

* ``otlp``: ``ExportTraceServiceRequest`` in OTLP/JSON (lowerCamelCase fields, hex trace
  and span ids, integer enums, nanosecond times as strings), one ``resourceSpans`` per
  node (``service.name``), as an OpenTelemetry collector's OTLP/HTTP receiver takes it;
* ``zipkin``: a Zipkin v2 ``ListOfSpans`` (microseconds, lowercase hex ids, lowercase
  service names), as ``POST /api/v2/spans`` and Zipkin's UI take it;
* ``jaeger``: ``{"data": [trace, ...]}`` with ``spans`` (``references``, ``processID``)
  and ``processes``, the form Jaeger's query API returns and its UI opens from a file.
"""

from __future__ import annotations

import gc
import os
from typing import Any

import numpy as np
import pyarrow as pa

from tracefmt import ParameterError, SchemaError
from tracefmt.hashing import mix64
from viz._files import write_atomic

__all__ = ["EXPORT_FORMATS", "export_traces", "write_export"]

EXPORT_FORMATS = ("otlp", "zipkin", "jaeger")

_GOLD = np.uint64(0x9E3779B97F4A7C15)
_NEED = ("pair", "caller", "callee", "t_call", "t_return", "parent", "instance", "pattern", "confidence")


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 of each value (never 0 for the ids below, which would be invalid)."""
    with np.errstate(over="ignore"):
        h = mix64(x.astype(np.uint64) + _GOLD)
    return np.where(h == 0, np.uint64(1), h)


def _hex(values: np.ndarray) -> list[str]:
    return [f"{v:016x}" for v in values.tolist()]


def _strings(column: pa.ChunkedArray) -> list[str]:
    return [str(v) for v in column.cast(pa.string()).to_pylist()]


def _check_instances(
    pair: np.ndarray,
    t_call: np.ndarray,
    t_ret: np.ndarray,
    parent: np.ndarray,
    inst: np.ndarray,
    table: pa.Table,
) -> None:
    """Refuse an instances table no tracing tool could take: a span ending before it
    starts, a confidence that is not a probability, a parent that is no pair of the
    table, or parent links that loop (no request would have a root)."""
    bad = np.flatnonzero(t_ret < t_call)
    if bad.size:
        raise SchemaError(f"pair {int(pair[bad[0]])} returns before it is called ({bad.size:,} such pairs)")
    for column in ("confidence", "pattern_confidence"):
        if column in table.column_names:
            values = table[column].to_numpy(zero_copy_only=False).astype(float)
            wrong = ~((values >= 0) & (values <= 1))
            if column == "pattern_confidence":
                wrong &= ~np.isnan(values)  # a pattern without a confidence
            if wrong.any():
                k = int(np.flatnonzero(wrong)[0])
                raise SchemaError(f"pair {int(pair[k])}: {column} {values[k]} is not a probability")
    order = np.argsort(pair, kind="stable")
    linked = np.flatnonzero(parent >= 0)
    at = np.searchsorted(pair[order], parent[linked])
    known = (at < pair.size) & (pair[order][np.minimum(at, pair.size - 1)] == parent[linked])
    if not known.all():
        k = linked[np.flatnonzero(~known)[0]]
        raise SchemaError(f"pair {int(pair[k])}: its parent {int(parent[k])} is not in the table")
    # Each pair's instance must be a root: a pair whose instance has a parent, or whose
    # parent is in another instance, belongs to no request.
    roots = set(pair[parent < 0].tolist())
    if not set(inst.tolist()) <= roots:
        raise SchemaError("parent links loop or instances name no root: not a table wirepath wrote")
    parent_inst = inst[order][np.minimum(at, pair.size - 1)]
    if (parent_inst != inst[linked]).any():
        raise SchemaError("a pair's parent belongs to another instance: not a table wirepath wrote")


class _Spans:
    """Column arrays of the spans to write, client spans first then visit spans."""

    def __init__(self, table: pa.Table, max_traces: int | None) -> None:
        missing = [c for c in _NEED if c not in table.column_names]
        if missing:
            raise SchemaError(
                f"not an instances table: missing {', '.join(missing)} "
                "(write one with: wirepath infer nesting TRACE --out P.json --instances I.parquet)"
            )
        pair = table["pair"].to_numpy()
        t_call = table["t_call"].cast(pa.int64()).to_numpy()
        t_ret = table["t_return"].cast(pa.int64()).to_numpy()
        parent_pair = table["parent"].fill_null(-1).to_numpy()
        inst = table["instance"].to_numpy()
        _check_instances(pair, t_call, t_ret, parent_pair, inst, table)
        # Rows by pair number, to find a parent's row.
        by_pair = np.argsort(pair, kind="stable")
        roots = np.flatnonzero(parent_pair < 0)
        roots = roots[np.argsort(t_call[roots], kind="stable")][:max_traces]
        if roots.size:
            keep_inst = np.sort(pair[roots])
            at = np.minimum(np.searchsorted(keep_inst, inst), keep_inst.size - 1)
            rows = np.flatnonzero(keep_inst[at] == inst)
        else:
            rows = np.zeros(0, np.int64)
        rows = rows[np.lexsort((t_call[rows], inst[rows]))]
        pos = np.searchsorted(pair[by_pair], parent_pair[rows])
        parent_row = np.where(parent_pair[rows] >= 0, by_pair[np.minimum(pos, by_pair.size - 1)], -1)
        root_row = by_pair[np.searchsorted(pair[by_pair], inst[rows])]
        self.n_traces = int(roots.size)
        callers, callees = _strings(table["caller"]), _strings(table["callee"])
        patterns = _strings(table["pattern"])
        confidence = table["confidence"].to_numpy()
        pattern_conf = (
            table["pattern_confidence"].to_numpy() if "pattern_confidence" in table.column_names else None
        )
        candidates = table["candidates"].to_numpy() if "candidates" in table.column_names else None
        span_id = _mix(pair.astype(np.uint64) * np.uint64(2) ^ _mix(t_call.view(np.uint64)))
        client_id = _mix(pair.astype(np.uint64) * np.uint64(2) + np.uint64(1) ^ _mix(t_ret.view(np.uint64)))
        trace_hi = _mix(t_call.view(np.uint64) ^ _mix(inst.astype(np.uint64)))
        trace_lo = _mix(inst.astype(np.uint64) ^ _mix(t_ret.view(np.uint64)))
        # Client spans (one per trace, over its root visit), then the visit spans.
        is_root = parent_row < 0
        r = rows[is_root]
        self.trace = _hex(trace_hi[root_row[is_root]])
        self.trace = [a + b for a, b in zip(self.trace, _hex(trace_lo[root_row[is_root]]), strict=True)]
        trace_of_root = dict(zip(r.tolist(), self.trace, strict=True))
        self.trace += [trace_of_root[x] for x in root_row.tolist()]
        self.span = _hex(client_id[r]) + _hex(span_id[rows])
        self.parent: list[str | None] = [None] * r.size + [
            f"{span_id[p]:016x}" if p >= 0 else f"{client_id[q]:016x}"
            for p, q in zip(parent_row.tolist(), root_row.tolist(), strict=True)
        ]
        self.kind = ["client"] * r.size + ["server"] * rows.size
        self.service = [callers[i] for i in r.tolist()] + [callees[i] for i in rows.tolist()]
        self.peer = [callees[i] for i in r.tolist()] + [callers[i] for i in rows.tolist()]
        self.name = [f"{callers[i]} -> {callees[i]}" for i in np.concatenate([r, rows]).tolist()]
        both = np.concatenate([r, rows])
        # Plain Python lists: the per-span JSON building below indexes them once per span.
        self.start_ns = t_call[both].tolist()
        self.end_ns = t_ret[both].tolist()
        self.start_us = (t_call[both] // 1000).tolist()
        # Zipkin and Jaeger want whole microseconds; durations under one are rounded up.
        self.dur_us = np.maximum(1, -(-(t_ret[both] - t_call[both]) // 1000)).tolist()
        self.pattern = [patterns[i] for i in both.tolist()]
        self.confidence = confidence[both].astype(float).tolist()
        self.pattern_confidence = None if pattern_conf is None else pattern_conf[both].astype(float).tolist()
        self.candidates = candidates[both].astype(np.int64).tolist() if candidates is not None else None

    def __len__(self) -> int:
        return len(self.span)

    def attributes(self, k: int) -> list[tuple[str, str, Any]]:
        """(key, type, value) of span k's attributes; type is string, double or int."""
        out: list[tuple[str, str, Any]] = [
            ("wirepath.pattern", "string", self.pattern[k]),
            ("peer.service", "string", self.peer[k]),
        ]
        if self.pattern_confidence is not None and self.pattern_confidence[k] == self.pattern_confidence[k]:
            # The probability that this span's whole request was inferred exactly right.
            out.append(("wirepath.pattern_confidence", "double", self.pattern_confidence[k]))
        if self.kind[k] == "server":
            out.append(("wirepath.confidence", "double", self.confidence[k]))
            if self.candidates is not None:
                out.append(("wirepath.candidates", "int", self.candidates[k]))
        return out


def _otlp(s: _Spans) -> dict[str, Any]:
    kinds = {"server": 2, "client": 3}  # SPAN_KIND_SERVER, SPAN_KIND_CLIENT

    def value(t: str, v: Any) -> dict[str, Any]:
        return {"string": {"stringValue": v}, "double": {"doubleValue": v}, "int": {"intValue": str(v)}}[t]

    by_service: dict[str, list[dict[str, Any]]] = {}
    for k in range(len(s)):
        span: dict[str, Any] = {
            "traceId": s.trace[k],
            "spanId": s.span[k],
            "name": s.name[k],
            "kind": kinds[s.kind[k]],
            "startTimeUnixNano": str(s.start_ns[k]),
            "endTimeUnixNano": str(s.end_ns[k]),
            "attributes": [{"key": a, "value": value(t, v)} for a, t, v in s.attributes(k)],
        }
        if s.parent[k] is not None:
            span["parentSpanId"] = s.parent[k]
        by_service.setdefault(s.service[k], []).append(span)
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": name}}]},
                "scopeSpans": [{"scope": {"name": "wirepath", "version": _version()}, "spans": spans}],
            }
            for name, spans in sorted(by_service.items())
        ]
    }


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("wirepath")
    except PackageNotFoundError:  # pragma: no cover - running from a plain checkout
        return "0"


def _micro(s: _Spans, k: int) -> tuple[int, int]:
    return s.start_us[k], s.dur_us[k]


def _zipkin(s: _Spans) -> list[dict[str, Any]]:
    out = []
    for k in range(len(s)):
        ts, dur = _micro(s, k)
        span: dict[str, Any] = {
            "traceId": s.trace[k],
            "id": s.span[k],
            "name": s.name[k].lower(),
            "kind": s.kind[k].upper(),
            "timestamp": ts,
            "duration": dur,
            "localEndpoint": {"serviceName": s.service[k].lower()},
            "remoteEndpoint": {"serviceName": s.peer[k].lower()},
            "tags": {a: (f"{v:.6g}" if t == "double" else str(v)) for a, t, v in s.attributes(k)},
        }
        if s.parent[k] is not None:
            span["parentId"] = s.parent[k]
        out.append(span)
    return out


def _jaeger(s: _Spans) -> dict[str, Any]:
    types = {"string": "string", "double": "float64", "int": "int64"}
    traces: dict[str, dict[str, Any]] = {}
    pids: dict[str, dict[str, str]] = {}  # per trace: service -> process id
    for k in range(len(s)):
        tid = s.trace[k]
        trace = traces.get(tid)
        if trace is None:
            trace = traces[tid] = {"traceID": tid, "spans": [], "processes": {}, "warnings": None}
            pids[tid] = {}
        pid = pids[tid].get(s.service[k])
        if pid is None:
            pid = pids[tid][s.service[k]] = f"p{len(pids[tid]) + 1}"
            trace["processes"][pid] = {"serviceName": s.service[k], "tags": []}
        ts, dur = _micro(s, k)
        refs = [] if s.parent[k] is None else [{"refType": "CHILD_OF", "traceID": tid, "spanID": s.parent[k]}]
        tags = [{"key": "span.kind", "type": "string", "value": s.kind[k]}]
        tags += [{"key": a, "type": types[t], "value": v} for a, t, v in s.attributes(k)]
        trace["spans"].append(
            {
                "traceID": tid,
                "spanID": s.span[k],
                "flags": 1,
                "operationName": s.name[k],
                "references": refs,
                "startTime": ts,
                "duration": dur,
                "tags": tags,
                "logs": [],
                "processID": pid,
                "warnings": None,
            }
        )
    return {"data": list(traces.values()), "total": 0, "limit": 0, "offset": 0, "errors": None}


def export_traces(instances: pa.Table, fmt: str, *, max_traces: int | None = None) -> Any:
    """Inferred path instances as traces in ``fmt`` (a JSON-ready object).

    Parameters
    ----------
    instances : pyarrow.Table
        ``NestingResult.instances_table()`` (or ``infer.read_instances``).
    fmt : {"otlp", "zipkin", "jaeger"}
    max_traces : int, optional
        Export only the first (earliest) this many root instances.

    Examples
    --------
    >>> import pyarrow as pa
    >>> from infer import infer_nesting
    >>> t = pa.table({"timestamp": pa.array([0, 10, 20, 30], pa.timestamp("us")),
    ...     "sender": ["c", "w", "d", "w"], "receiver": ["w", "d", "w", "c"],
    ...     "op": ["call", "call", "return", "return"], "id": pa.array([1, 2, 2, 1], pa.uint64())})
    >>> spans = export_traces(infer_nesting(t).instances_table(), "zipkin")
    >>> [(s["kind"], s["localEndpoint"]["serviceName"], s["duration"]) for s in spans]
    [('CLIENT', 'c', 30), ('SERVER', 'w', 30), ('SERVER', 'd', 10)]
    """
    if fmt not in EXPORT_FORMATS:
        raise ParameterError(f"unknown export format {fmt!r} (must be one of {', '.join(EXPORT_FORMATS)})")
    if max_traces is not None and max_traces < 1:
        raise ParameterError(f"max_traces must be at least 1, not {max_traces}")
    # Hundreds of thousands of small dicts and lists, none in a cycle: the cyclic collector
    # would rescan them again and again while they are built (3-5x the build time).
    enabled = gc.isenabled()
    gc.disable()
    try:
        spans = _Spans(instances, max_traces)
        return {"otlp": _otlp, "zipkin": _zipkin, "jaeger": _jaeger}[fmt](spans)
    finally:
        if enabled:
            gc.enable()


def write_export(
    instances: pa.Table, fmt: str, path: str | os.PathLike[str], *, max_traces: int | None = None
) -> dict[str, int]:
    """Write :func:`export_traces` as JSON into ``path`` (atomically); returns counts.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from infer import infer_nesting
    >>> t = pa.table({"timestamp": pa.array([0, 10, 20, 30], pa.timestamp("us")),
    ...     "sender": ["c", "w", "d", "w"], "receiver": ["w", "d", "w", "c"],
    ...     "op": ["call", "call", "return", "return"], "id": pa.array([1, 2, 2, 1], pa.uint64())})
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "t.json"
    >>> write_export(infer_nesting(t).instances_table(), "jaeger", out)
    {'traces': 1, 'spans': 3}
    """
    import json

    doc = export_traces(instances, fmt, max_traces=max_traces)
    # Bare NaN or Infinity would be JSON no tool reads.
    write_atomic(path, json.dumps(doc, separators=(",", ":"), allow_nan=False) + "\n")
    if fmt == "zipkin":
        n_spans, n_traces = len(doc), len({s["traceId"] for s in doc})
    elif fmt == "jaeger":
        n_spans, n_traces = sum(len(t["spans"]) for t in doc["data"]), len(doc["data"])
    else:
        spans = [s for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
        n_spans, n_traces = len(spans), len({s["traceId"] for s in spans})
    return {"traces": n_traces, "spans": n_spans}

"""Inferred path instances as traces for the tracing ecosystem: OTLP/JSON, Zipkin v2, Jaeger.

Input is the instances table of ``wirepath infer nesting --instances`` (one row per call
pair with its inferred parent, instance, pattern and confidence). Each root instance
becomes one trace; each call (call pair) a ``CLIENT`` span at its caller, child of the
caller's own ``SERVER`` span (none for the request's root call, so the trace starts where
the request came from), and a ``SERVER`` span at the called node, child of that client
span: the two spans two instrumented services record for one RPC. The pattern id, the
parent's confidence and the number of candidate parents are attributes.

Ids are deterministic (hashes of the call times and pair numbers): exporting twice gives
the same file. A span whose return's status is a server error
(:func:`tracefmt.pathsfile.is_server_error`, the rule behind the paths file's ``errors``)
has the error status of its format: OTLP's ``status.code`` 2 (``STATUS_CODE_ERROR``),
Zipkin's ``error`` tag (the status), Jaeger's ``error`` tag (true) and
``otel.status_code``. ``write_export`` writes it a batch of spans at a time, so its
memory does not grow with the number of spans (only arrays of numbers, about a hundred bytes per call
pair, are held whole); its bytes are those of the whole document dumped at once. Shapes:

* ``otlp``: ``ExportTraceServiceRequest`` in OTLP/JSON (lowerCamelCase fields, hex trace
  and span ids, integer enums, nanosecond times as strings), one ``resourceSpans`` per
  node (``service.name``), as an OpenTelemetry collector's OTLP/HTTP receiver takes it;
* ``zipkin``: a Zipkin v2 ``ListOfSpans`` (microseconds, lowercase hex ids, lowercase
  service names), as ``POST /api/v2/spans`` and Zipkin's UI take it;
* ``jaeger``: ``{"data": [trace, ...]}`` with ``spans`` (``references``, ``processID``)
  and ``processes``, the form Jaeger's query API returns and its UI opens from a file.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracefmt import ParameterError, SchemaError, atomic_output
from tracefmt.hashing import mix64
from tracefmt.memory import collector_paused
from tracefmt.pathsfile import DNS_RCODE_NAMES, GRPC_STATUS_NAMES, is_server_error
from viz import EXPORT_FORMATS

__all__ = ["EXPORT_FORMATS", "export_traces", "write_export"]


_GOLD = np.uint64(0x9E3779B97F4A7C15)
_NEED = ("pair", "caller", "callee", "t_call", "t_return", "parent", "instance", "pattern", "confidence")


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 of each value (never 0 for the ids below, which would be invalid)."""
    with np.errstate(over="ignore"):
        h = mix64(x.astype(np.uint64) + _GOLD)
    return np.where(h == 0, np.uint64(1), h)


def _hex(values: np.ndarray) -> list[str]:
    return [f"{v:016x}" for v in values.tolist()]


def _check_instances(
    pair: np.ndarray,
    t_call: np.ndarray,
    t_ret: np.ndarray,
    parent: np.ndarray,
    inst: np.ndarray,
    table: pa.Table,
    by_pair: np.ndarray,
) -> None:
    """Refuse an instances table no tracing tool could take: a span ending before it
    starts, a confidence that is not a probability, a parent that is no pair of the
    table, or parent links that loop (no request would have a root). ``by_pair``: the
    rows in pair order."""
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
    sorted_pair = pair[by_pair]
    linked = np.flatnonzero(parent >= 0)
    at = np.minimum(np.searchsorted(sorted_pair, parent[linked]), max(pair.size - 1, 0))
    known = sorted_pair[at] == parent[linked]
    if not known.all():
        k = linked[np.flatnonzero(~known)[0]]
        raise SchemaError(f"pair {int(pair[k])}: its parent {int(parent[k])} is not in the table")
    # Each pair's instance must be a root: a pair whose instance has a parent, or whose
    # parent is in another instance, belongs to no request.
    roots = np.sort(pair[parent < 0])
    if inst.size and (
        not roots.size or (roots[np.minimum(np.searchsorted(roots, inst), roots.size - 1)] != inst).any()
    ):
        raise SchemaError("parent links loop or instances name no root: not a table wirepath wrote")
    if (inst[by_pair[at]] != inst[linked]).any():
        raise SchemaError("a pair's parent belongs to another instance: not a table wirepath wrote")


def _names(table: pa.Table, columns: tuple[str, ...]) -> tuple[list[str], list[np.ndarray]]:
    """The distinct strings of ``columns`` in sorted order, and each column as codes into
    them: a span's node names are looked up per batch, not held as a million strings."""
    # A missing name is written as Python prints None, as it always was.
    values = [pc.fill_null(table[c].cast(pa.string()), "None") for c in columns]
    names = sorted({v for column in values for v in pc.unique(column).to_pylist()})
    value_set = pa.array(names, pa.string())
    codes = [
        np.asarray(pc.index_in(column, value_set=value_set).to_numpy(zero_copy_only=False), np.int32)
        for column in values
    ]
    return names, codes


class _Spans:
    """Column arrays of the spans to write, client spans first then visit spans, in the
    order the formats list them; ``batch`` makes the Python values of a few of them.

    Nothing here holds a Python object per span, only arrays of numbers (about a hundred
    bytes per call pair); the strings and numbers the JSON needs are made a batch at a
    time, so an export's Python objects do not grow with its size.
    """

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
        # Rows by pair number, to find a parent's row.
        by_pair = np.argsort(pair, kind="stable")
        _check_instances(pair, t_call, t_ret, parent_pair, inst, table, by_pair)
        sorted_pair = pair[by_pair]
        roots = np.flatnonzero(parent_pair < 0)
        roots = roots[np.argsort(t_call[roots], kind="stable")][:max_traces]
        if roots.size:
            keep_inst = np.sort(pair[roots])
            at = np.minimum(np.searchsorted(keep_inst, inst), keep_inst.size - 1)
            rows = np.flatnonzero(keep_inst[at] == inst)
        else:
            rows = np.zeros(0, np.int64)
        rows = rows[np.lexsort((t_call[rows], inst[rows]))]
        pos = np.searchsorted(sorted_pair, parent_pair[rows])
        parent_row = np.where(parent_pair[rows] >= 0, by_pair[np.minimum(pos, by_pair.size - 1)], -1)
        root_row = by_pair[np.searchsorted(sorted_pair, inst[rows])]
        del by_pair, sorted_pair, parent_pair, roots, pos
        # Per row of the table: what the ids and values of its spans are made of.
        self.pair, self.inst, self.t_call, self.t_ret = pair, inst, t_call, t_ret
        self.names, (self.caller, self.callee) = _names(table, ("caller", "callee"))
        self.patterns, (self.pattern_code,) = _names(table, ("pattern",))
        self.confidence = table["confidence"].to_numpy()
        self.pattern_conf = (
            table["pattern_confidence"].to_numpy() if "pattern_confidence" in table.column_names else None
        )
        self.candidates = table["candidates"].to_numpy() if "candidates" in table.column_names else None
        # A call's operation and its return's status, where the trace had them.
        self.labels, self.label_codes = _names(
            table, tuple(c for c in ("op", "status") if c in table.column_names)
        )
        self.has_op, self.has_status = "op" in table.column_names, "status" in table.column_names
        # Per span: a CLIENT span of every call (at its caller, as a tracer in the caller
        # records it), then a SERVER span of every call (at its callee). A client span's
        # parent is the server span of the visit that made the call (none for a request's
        # root call); a server span's parent is its own call's client span.
        self.n_client = int(rows.size)
        self.row = np.concatenate([rows, rows])
        # The root row a span's trace is named after (its trace id is that row's).
        self.root = np.concatenate([root_row, root_row])
        # The row whose server span is a client span's parent (-1: none).
        self.parent_row = np.concatenate([parent_row, rows])

    @property
    def n_traces(self) -> int:
        return int(np.unique(self.root).size)

    def span_id(self, row: np.ndarray) -> np.ndarray:
        """The id of the visit span of each row."""
        t_call = self.t_call[row]
        return _mix(self.pair[row].astype(np.uint64) * np.uint64(2) ^ _mix(t_call.view(np.uint64)))

    def client_id(self, row: np.ndarray) -> np.ndarray:
        """The id of the client span of each row's call."""
        t_ret = self.t_ret[row]
        return _mix(
            self.pair[row].astype(np.uint64) * np.uint64(2) + np.uint64(1) ^ _mix(t_ret.view(np.uint64))
        )

    def trace_id(self, root: np.ndarray) -> list[str]:
        """The trace id (32 hex digits) of each root row's request."""
        inst = self.inst[root].astype(np.uint64)
        hi = _mix(self.t_call[root].view(np.uint64) ^ _mix(inst))
        lo = _mix(inst ^ _mix(self.t_ret[root].view(np.uint64)))
        return [f"{a:016x}{b:016x}" for a, b in zip(hi.tolist(), lo.tolist(), strict=True)]

    def __len__(self) -> int:
        return int(self.row.size)

    def batch(self, idx: np.ndarray) -> _Batch:
        """The Python values of spans ``idx`` (positions in the span order)."""
        return _Batch(self, np.asarray(idx, np.int64))

    def by_service(self) -> list[tuple[str, np.ndarray]]:
        """(service, its spans in span order) for each service, by name."""
        # A client span is its caller's, a visit span its callee's; codes sort as names do.
        service = np.concatenate(
            [self.caller[self.row[: self.n_client]], self.callee[self.row[self.n_client :]]]
        )
        order = np.argsort(service, kind="stable")
        codes, first = np.unique(service[order], return_index=True)
        ends = np.append(first[1:], order.size)[: first.size]
        return [
            (self.names[c], order[a:b])
            for c, a, b in zip(codes.tolist(), first.tolist(), ends.tolist(), strict=True)
        ]

    def by_trace(self) -> tuple[np.ndarray, np.ndarray]:
        """Spans grouped by trace, traces in the order their first span comes: the span
        positions, and where each trace's run of them starts (plus the end)."""
        roots, first, which = np.unique(self.root, return_index=True, return_inverse=True)
        rank = np.empty(roots.size, np.int64)
        rank[np.argsort(first, kind="stable")] = np.arange(roots.size)
        trace_of = rank[which.reshape(-1)]
        order = np.argsort(trace_of, kind="stable")
        bounds = np.searchsorted(trace_of[order], np.arange(roots.size + 1))
        return order, bounds


class _Batch:
    """The JSON values of some spans of a :class:`_Spans`, as plain Python lists (the
    per-span building indexes them once per span)."""

    def __init__(self, s: _Spans, idx: np.ndarray) -> None:
        row = s.row[idx]
        client = idx < s.n_client
        self.trace = s.trace_id(s.root[idx])
        self.span = _hex(np.where(client, s.client_id(row), s.span_id(row)))
        parent_row = s.parent_row[idx]
        parent_id = np.where(client, s.span_id(np.maximum(parent_row, 0)), s.client_id(row))
        orphan = client & (parent_row < 0)
        self.parent: list[str | None] = [
            None if o else f"{p:016x}" for o, p in zip(orphan.tolist(), parent_id.tolist(), strict=True)
        ]
        self.kind = ["client" if c else "server" for c in client.tolist()]
        caller, callee = s.caller[row], s.callee[row]
        self.service = [s.names[i] for i in np.where(client, caller, callee).tolist()]
        self.peer = [s.names[i] for i in np.where(client, callee, caller).tolist()]
        hop = [f"{s.names[a]} -> {s.names[b]}" for a, b in zip(caller.tolist(), callee.tolist(), strict=True)]
        codes = iter(s.label_codes)
        self.op = [s.labels[i] for i in next(codes)[row].tolist()] if s.has_op else [None] * len(hop)
        self.status = [s.labels[i] for i in next(codes)[row].tolist()] if s.has_status else [None] * len(hop)
        self.error = [st != "None" and is_server_error(st) for st in self.status]
        # Spans are named by operation (an endpoint, a query, a command), as tracers name them.
        self.name = [h if op in (None, "None") else op for h, op in zip(hop, self.op, strict=True)]
        self.server = [s.names[i] for i in callee.tolist()]
        t_call, t_ret = s.t_call[row], s.t_ret[row]
        self.start_ns = t_call.tolist()
        self.end_ns = t_ret.tolist()
        self.start_us = (t_call // 1000).tolist()
        # Zipkin and Jaeger want whole microseconds; durations under one are rounded up.
        self.dur_us = np.maximum(1, -(-(t_ret - t_call) // 1000)).tolist()
        self.pattern = [s.patterns[i] for i in s.pattern_code[row].tolist()]
        self.confidence = s.confidence[row].astype(float).tolist()
        self.pattern_confidence = (
            None if s.pattern_conf is None else s.pattern_conf[row].astype(float).tolist()
        )
        self.candidates = None if s.candidates is None else s.candidates[row].astype(np.int64).tolist()

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
        out += _semantic(self.op[k], self.status[k], self.server[k])
        return out


def _semantic(op: str | None, status: str | None, server: str) -> list[tuple[str, str, Any]]:
    """OpenTelemetry semantic-convention attributes of a span: ``server.address`` and
    ``server.port`` (the callee's name, ``address:port`` by service), and from the
    operation, ``http.request.method`` and ``http.route`` (``GET /item/:id``) or
    ``rpc.service`` and ``rpc.method`` (``/shop.Cart/Add``), with the status's
    (:func:`_status_attributes`).

    Examples
    --------
    >>> _semantic("GET /item/:id", "503", "10.0.0.5:8080")  # doctest: +NORMALIZE_WHITESPACE
    [('server.address', 'string', '10.0.0.5'), ('server.port', 'int', 8080),
     ('http.request.method', 'string', 'GET'), ('http.route', 'string', '/item/:id'),
     ('http.response.status_code', 'int', 503)]
    >>> _semantic("POST /shop.Shop/Quote", "UNAVAILABLE", "grpc")  # doctest: +NORMALIZE_WHITESPACE
    [('server.address', 'string', 'grpc'), ('rpc.system', 'string', 'grpc'),
     ('rpc.service', 'string', 'shop.Shop'), ('rpc.method', 'string', 'Quote'),
     ('rpc.grpc.status_code', 'int', 14)]
    """
    out: list[tuple[str, str, Any]] = []
    host, sep, port = server.rpartition(":")
    if sep and port.isdigit():
        out += [("server.address", "string", host.strip("[]")), ("server.port", "int", int(port))]
    else:
        out.append(("server.address", "string", server))
    if op not in (None, "None"):
        method, _, route = op.partition(" ")
        if method == "POST" and _grpc_path(route):
            # gRPC rides on HTTP/2 POSTs to /package.Service/Method: said as an RPC.
            service, _, name = route[1:].partition("/")
            out += [("rpc.system", "string", "grpc"), ("rpc.service", "string", service)]
            out.append(("rpc.method", "string", name))
        elif route.startswith("/") and method.isupper():
            out += [("http.request.method", "string", method), ("http.route", "string", route)]
        elif op.startswith("/") and op.count("/") == 2:
            service, _, name = op[1:].partition("/")
            out += [("rpc.service", "string", service), ("rpc.method", "string", name)]
        else:
            out.append(("wirepath.operation", "string", op))
    if status not in (None, "None"):
        out += _status_attributes(op, status)
    return out


def _grpc_path(route: str) -> bool:
    """Whether ``route`` is a gRPC method's path, ``/package.Service/Method``.

    >>> _grpc_path("/shop.Shop/Quote"), _grpc_path("/item/:id"), _grpc_path("/a.b")
    (True, False, False)
    """
    parts = route.split("/")
    return len(parts) == 3 and parts[0] == "" and "." in parts[1] and bool(parts[2]) and ":" not in route


_GRPC_CODES = {name: code for code, name in enumerate(GRPC_STATUS_NAMES)}


def _status_attributes(op: str | None, status: str) -> list[tuple[str, str, Any]]:
    """The OpenTelemetry attribute of a return's status, by its form (the capture's
    statuses, docs/capture.md): an HTTP code's ``http.response.status_code``; a gRPC
    code's ``rpc.grpc.status_code`` (its number; ``OK`` is gRPC's where the operation is
    a gRPC method, ``POST /pkg.Service/Method``); a database error's
    ``db.response.status_code`` (PostgreSQL's SQLSTATE, MySQL's error number, Redis's
    error prefix); any other status (a DNS RCODE, a database's ``OK``) as
    ``wirepath.status``.

    Examples
    --------
    >>> _status_attributes("POST /greet.Greeter/Hello", "OK"), _status_attributes(None, "UNAVAILABLE")
    ([('rpc.grpc.status_code', 'int', 0)], [('rpc.grpc.status_code', 'int', 14)])
    >>> _status_attributes("SELECT", "ERROR 42P01"), _status_attributes("INCR", "WRONGTYPE")
    ([('db.response.status_code', 'string', '42P01')], [('db.response.status_code', 'string', 'WRONGTYPE')])
    >>> _status_attributes("A example.org", "NXDOMAIN")
    [('wirepath.status', 'string', 'NXDOMAIN')]
    """
    if len(status) == 3 and status.isdigit():
        return [("http.response.status_code", "int", int(status))]
    method, _, route = (op or "").partition(" ")
    grpc_method = method == "POST" and route.startswith("/") and route.count("/") == 2
    if status in _GRPC_CODES and (status != "OK" or grpc_method):
        return [("rpc.grpc.status_code", "int", _GRPC_CODES[status])]
    if status.startswith("ERROR "):
        return [("db.response.status_code", "string", status[6:])]
    if is_server_error(status) and status not in DNS_RCODE_NAMES:
        return [("db.response.status_code", "string", status)]  # a Redis error's prefix
    return [("wirepath.status", "string", status)]


# --- documents made batch by batch ------------------------------------------------------

#: Spans per batch: a batch's span objects and JSON text are a few megabytes.
BATCH_SPANS = 4096


class _Array:
    """A JSON array whose items come batch by batch (lists of JSON-ready items).

    ``nested``: the items themselves hold ``_Array`` values, to be expanded in turn.
    """

    def __init__(self, batches: Iterator[list[Any]], *, nested: bool = False) -> None:
        self.batches = batches
        self.nested = nested


def _whole(doc: Any) -> Any:
    """``doc`` with every ``_Array`` made a list: the whole document in memory."""
    if isinstance(doc, _Array):
        items = [item for batch in doc.batches for item in batch]
        return [_whole(item) for item in items] if doc.nested else items
    if isinstance(doc, dict):
        return {key: _whole(value) for key, value in doc.items()}
    if isinstance(doc, list):
        return [_whole(value) for value in doc]
    return doc


def _dump(doc: Any, write: Callable[[str], object]) -> None:
    """Write ``doc`` as JSON through ``write``, each ``_Array`` a batch at a time.

    The text is exactly ``json.dumps(_whole(doc), separators=(",", ":"), allow_nan=False)``:
    with those separators a list is its items' texts joined by commas in brackets, and a
    dict its ``key:value`` texts likewise in braces.
    """
    if isinstance(doc, _Array):
        write("[")
        sep = ""
        for batch in doc.batches:
            if doc.nested:
                for item in batch:
                    write(sep)
                    _dump(item, write)
                    sep = ","
            elif batch:
                write(sep)
                write(_dumps(batch)[1:-1])
                sep = ","
        write("]")
    elif isinstance(doc, dict):  # keys are strings: json.dumps would turn others into strings
        write("{")
        for k, (key, value) in enumerate(doc.items()):
            write(("," if k else "") + _dumps(key) + ":")
            _dump(value, write)
        write("}")
    elif isinstance(doc, list):
        write("[")
        for k, value in enumerate(doc):
            if k:
                write(",")
            _dump(value, write)
        write("]")
    else:
        write(_dumps(doc))


def _dumps(value: Any) -> str:
    # Bare NaN or Infinity would be JSON no tool reads.
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


def _chunks(idx: np.ndarray) -> Iterator[np.ndarray]:
    for lo in range(0, idx.size, BATCH_SPANS):
        yield idx[lo : lo + BATCH_SPANS]


def _otlp(s: _Spans) -> dict[str, Any]:
    kinds = {"server": 2, "client": 3}  # SPAN_KIND_SERVER, SPAN_KIND_CLIENT
    version = _version()

    def value(t: str, v: Any) -> dict[str, Any]:
        return {"string": {"stringValue": v}, "double": {"doubleValue": v}, "int": {"intValue": str(v)}}[t]

    def spans(idx: np.ndarray) -> Iterator[list[dict[str, Any]]]:
        for chunk in _chunks(idx):
            b = s.batch(chunk)
            out = []
            for k in range(len(b)):
                span: dict[str, Any] = {
                    "traceId": b.trace[k],
                    "spanId": b.span[k],
                    "name": b.name[k],
                    "kind": kinds[b.kind[k]],
                    "startTimeUnixNano": str(b.start_ns[k]),
                    "endTimeUnixNano": str(b.end_ns[k]),
                    "attributes": [{"key": a, "value": value(t, v)} for a, t, v in b.attributes(k)],
                }
                if b.parent[k] is not None:
                    span["parentSpanId"] = b.parent[k]
                if b.error[k]:
                    span["status"] = {"code": 2}  # STATUS_CODE_ERROR
                out.append(span)
            yield out

    def resources() -> Iterator[list[dict[str, Any]]]:
        for name, idx in s.by_service():
            yield [
                {
                    "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": name}}]},
                    "scopeSpans": [
                        {"scope": {"name": "wirepath", "version": version}, "spans": _Array(spans(idx))}
                    ],
                }
            ]

    return {"resourceSpans": _Array(resources(), nested=True)}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("wirepath")
    except PackageNotFoundError:  # pragma: no cover - running from a plain checkout
        return "0"


def _zipkin(s: _Spans) -> _Array:
    def spans() -> Iterator[list[dict[str, Any]]]:
        for chunk in _chunks(np.arange(len(s))):
            b = s.batch(chunk)
            out = []
            for k in range(len(b)):
                span: dict[str, Any] = {
                    "traceId": b.trace[k],
                    "id": b.span[k],
                    "name": b.name[k].lower(),
                    "kind": b.kind[k].upper(),
                    "timestamp": b.start_us[k],
                    "duration": b.dur_us[k],
                    "localEndpoint": {"serviceName": b.service[k].lower()},
                    "remoteEndpoint": {"serviceName": b.peer[k].lower()},
                    "tags": {a: (f"{v:.6g}" if t == "double" else str(v)) for a, t, v in b.attributes(k)},
                }
                if b.parent[k] is not None:
                    span["parentId"] = b.parent[k]
                if b.error[k]:
                    span["tags"]["error"] = b.status[k]
                out.append(span)
            yield out

    return _Array(spans())


def _jaeger(s: _Spans) -> dict[str, Any]:
    types = {"string": "string", "double": "float64", "int": "int64"}
    order, bounds = s.by_trace()

    def trace(b: _Batch, lo: int, hi: int) -> dict[str, Any]:
        """The trace of spans lo:hi of batch b."""
        tid = b.trace[lo]
        out: dict[str, Any] = {"traceID": tid, "spans": [], "processes": {}, "warnings": None}
        pids: dict[str, str] = {}  # service -> process id
        for k in range(lo, hi):
            pid = pids.get(b.service[k])
            if pid is None:
                pid = pids[b.service[k]] = f"p{len(pids) + 1}"
                out["processes"][pid] = {"serviceName": b.service[k], "tags": []}
            refs = (
                []
                if b.parent[k] is None
                else [{"refType": "CHILD_OF", "traceID": tid, "spanID": b.parent[k]}]
            )
            tags = [{"key": "span.kind", "type": "string", "value": b.kind[k]}]
            tags += [{"key": a, "type": types[t], "value": v} for a, t, v in b.attributes(k)]
            if b.error[k]:
                tags += [
                    {"key": "error", "type": "bool", "value": True},
                    {"key": "otel.status_code", "type": "string", "value": "ERROR"},
                ]
            out["spans"].append(
                {
                    "traceID": tid,
                    "spanID": b.span[k],
                    "flags": 1,
                    "operationName": b.name[k],
                    "references": refs,
                    "startTime": b.start_us[k],
                    "duration": b.dur_us[k],
                    "tags": tags,
                    "logs": [],
                    "processID": pid,
                    "warnings": None,
                }
            )
        return out

    def traces() -> Iterator[list[dict[str, Any]]]:
        # Whole traces per batch: at least one, then as many as fit in BATCH_SPANS spans.
        t, n = 0, bounds.size - 1
        while t < n:
            end = max(t + 1, int(np.searchsorted(bounds, bounds[t] + BATCH_SPANS, side="right")) - 1)
            end = min(end, n)
            b = s.batch(order[bounds[t] : bounds[end]])
            at = (bounds[t : end + 1] - bounds[t]).tolist()
            yield [trace(b, lo, hi) for lo, hi in itertools.pairwise(at)]
            t = end

    return {"data": _Array(traces()), "total": 0, "limit": 0, "offset": 0, "errors": None}


def _document(instances: pa.Table, fmt: str, max_traces: int | None) -> tuple[Any, _Spans]:
    """The document of ``fmt`` with its long arrays still to be made (``_Array``)."""
    if fmt not in EXPORT_FORMATS:
        raise ParameterError(f"unknown export format {fmt!r} (must be one of {', '.join(EXPORT_FORMATS)})")
    if max_traces is not None and max_traces < 1:
        raise ParameterError(f"max_traces must be at least 1, not {max_traces}")
    spans = _Spans(instances, max_traces)
    return {"otlp": _otlp, "zipkin": _zipkin, "jaeger": _jaeger}[fmt](spans), spans


def export_traces(instances: pa.Table, fmt: str, *, max_traces: int | None = None) -> Any:
    """Inferred path instances as traces in ``fmt`` (a JSON-ready object, whole in
    memory; :func:`write_export` writes a file without holding it).

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
    [('CLIENT', 'c', 30), ('CLIENT', 'w', 10), ('SERVER', 'w', 30), ('SERVER', 'd', 10)]
    """
    with collector_paused():
        doc, _ = _document(instances, fmt, max_traces)
        return _whole(doc)


def write_export(
    instances: pa.Table, fmt: str, path: str | os.PathLike[str], *, max_traces: int | None = None
) -> dict[str, int]:
    """Write :func:`export_traces` as JSON into ``path`` (atomically); returns counts.

    The file is written a batch of spans at a time (whole traces for Jaeger), so memory
    stays flat however many instances there are; its bytes are those of
    ``json.dumps(export_traces(...), separators=(",", ":"))`` and a newline. Nothing is
    at ``path`` until the whole file is.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from infer import infer_nesting
    >>> t = pa.table({"timestamp": pa.array([0, 10, 20, 30], pa.timestamp("us")),
    ...     "sender": ["c", "w", "d", "w"], "receiver": ["w", "d", "w", "c"],
    ...     "op": ["call", "call", "return", "return"], "id": pa.array([1, 2, 2, 1], pa.uint64())})
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "t.json"
    >>> write_export(infer_nesting(t).instances_table(), "jaeger", out)
    {'traces': 1, 'spans': 4}
    """
    with collector_paused():
        doc, spans = _document(instances, fmt, max_traces)
        with atomic_output(path) as tmp, open(tmp, "w", encoding="utf-8") as out:
            _dump(doc, out.write)
            out.write("\n")
    return {"traces": spans.n_traces, "spans": len(spans)}

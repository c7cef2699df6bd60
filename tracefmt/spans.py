"""Distributed-tracing spans (Jaeger, OpenTelemetry) as a message trace with ground truth.

A tracer records *spans*: one per unit of work, with its service, start, end and the
span that caused it. A capture of the same system would see one call and one return
per RPC between services. The readers here turn spans into exactly that message
trace, plus the ground-truth columns ``wirepath synth`` writes, so real applications
can score inference the way synthetic traces do.

- An RPC is a span that enters a service: a ``server`` span, or (without
  ``span.kind``) a span whose parent runs in another service or that has no parent.
  Its call goes caller -> service and its return back. The caller is the parent
  span's service (the client span's, when the hop has one); an RPC without a parent
  span comes from ``"client"``.
- Client spans are the caller's side of an RPC; where both sides exist they are one
  RPC. Other spans (internal work, a call to an untraced service) are not RPCs: the
  RPCs they cause belong to the RPC that entered their service.
- ``at="callee"`` stamps the call and return at the server span's start and end (what
  a capture on the callee's host sees); ``at="caller"`` at the client span's, where
  the hop has one. Each span keeps its own host's clock: no skew correction.
- ``id`` is a number per RPC, shared by its call and return. ``true_call`` is the same
  number, ``true_parent`` the enclosing RPC's (null for a request's first RPC),
  ``true_instance`` the first RPC's, ``true_pattern`` the id of the request's shape
  (``tracefmt.patterns``: children in call order, concurrent ones as a group), the id
  inference gives that shape. ``label`` is the operation name.

::

    {"data": [{"traceID": "t1", "processes": {"p1": {"serviceName": "web"}},
               "spans": [{"traceID": "t1", "spanID": "a", "references": [],
                          "processID": "p1", "operationName": "GET /",
                          "startTime": 1000, "duration": 50,
                          "tags": [{"key": "span.kind", "value": "server"}]}]}]}

is one RPC: ``call client web`` at 1 ms and ``return web client`` 50 us later.

Parsing is Python (``json``); resolving parents, RPCs, requests and the message order
is vectorized (numpy pointer jumping), so the cost grows about linearly with the spans.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import zlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa

from tracefmt import SPAN_AT
from tracefmt._files import existing_file
from tracefmt.errors import ParameterError, ParseError, TraceFileError
from tracefmt.identify import SPANS, hint
from tracefmt.patterns import join_text, sibling_groups, text_id
from tracefmt.schema import OPS, TS_TYPE, validate_trace

__all__ = [
    "SPAN_AT",
    "SPAN_FORMATS",
    "SPAN_SUFFIXES",
    "SpanStats",
    "read_jaeger",
    "read_otlp",
    "read_spans",
    "span_format",
]

#: The span formats read here.
SPAN_FORMATS = ("jaeger", "otlp")
#: File name endings that say "JSON spans" (the content decides which format).
SPAN_SUFFIXES = (".json", ".jsonl", ".ndjson", ".json.gz", ".jsonl.gz", ".ndjson.gz")
#: The caller of an RPC no span caused.
ROOT_CALLER = "client"

_MAX_EXAMPLES = 5
_SNIFF_BYTES = 1 << 16
_GZIP_MAGIC = b"\x1f\x8b"
_KIND_OTHER, _KIND_SERVER, _KIND_CLIENT = 0, 1, 2
_KINDS = {
    "server": _KIND_SERVER,
    "client": _KIND_CLIENT,
    "span_kind_server": _KIND_SERVER,
    "span_kind_client": _KIND_CLIENT,
    2: _KIND_SERVER,  # OTLP enum values
    3: _KIND_CLIENT,
}
_MAX_US = (2**63 - 1) // 1000
_SPACE = re.compile(r"\s*")
_EXPECTED = 'expected {"data": [trace, ...]} from the Jaeger API or {"resourceSpans": [...]} of OTLP/JSON'

PathOrFile = str | os.PathLike[str] | IO[bytes] | IO[str]


@dataclass
class SpanStats:
    """What reading a span file found.

    Attributes
    ----------
    format : str
        ``"jaeger"`` or ``"otlp"``.
    at : str
        ``"callee"`` or ``"caller"``: whose times stamp the messages.
    documents, traces, spans : int
        JSON documents, traces and spans read (spans kept).
    rpcs : int
        RPCs, i.e. spans entering a service; each is one call and one return.
    requests : int
        RPCs no other RPC encloses: the true instances.
    client_sides : int
        Client spans that are the caller's side of an RPC (merged into it).
    caller_stamped : int
        RPCs stamped with their client span's times (``at="caller"`` only).
    local : int
        Spans that are no RPC's side: internal work, calls to untraced services.
    orphans : int
        Spans whose parent is not in the file; they became roots.
    duplicates : int
        Spans skipped because an earlier one has the same trace and span id.
    skipped : int
        Spans (or whole traces) skipped for missing or malformed fields (only with
        ``skip_bad``).
    examples : list of str
        The first few skipped spans' errors, ``path:line: reason``.
    """

    format: str = ""
    at: str = "callee"
    documents: int = 0
    traces: int = 0
    spans: int = 0
    rpcs: int = 0
    requests: int = 0
    client_sides: int = 0
    caller_stamped: int = 0
    local: int = 0
    orphans: int = 0
    duplicates: int = 0
    skipped: int = 0
    examples: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of the counts."""
        return asdict(self)


class _BadSpanError(Exception):
    """A span lacks a field or has a malformed one (the message says which)."""


class _Spans:
    """Spans as parallel lists, filled by a format's reader; ``line`` maps back to the file."""

    def __init__(self, path: str, skip_bad: bool, stats: SpanStats) -> None:
        self.path = path
        self.skip_bad = skip_bad
        self.stats = stats
        self.trace: list[str] = []
        self.span: list[str] = []
        self.parent: list[str] = []
        self.service: list[str] = []
        self.kind: list[int] = []
        self.start_ns: list[int] = []
        self.end_ns: list[int] = []
        self.name: list[str] = []
        self.line: list[int] = []

    def add(self, line: int, where: str, make: Any, *args: Any) -> None:
        """Add the span ``make(*args)`` returns, or skip or raise on ``_BadSpanError``."""
        try:
            trace, span, parent, service, kind, start_ns, end_ns, name = make(*args)
        except _BadSpanError as exc:
            self.bad(line, f"{where}: {exc}")
            return
        self.trace.append(trace)
        self.span.append(span)
        self.parent.append(parent)
        self.service.append(service)
        self.kind.append(kind)
        self.start_ns.append(start_ns)
        self.end_ns.append(end_ns)
        self.name.append(name)
        self.line.append(line)

    def bad(self, line: int, reason: str) -> None:
        if not self.skip_bad:
            raise ParseError(self.path, line, reason)
        self.stats.skipped += 1
        if len(self.stats.examples) < _MAX_EXAMPLES:
            self.stats.examples.append(f"{self.path}:{line}: {reason}")


# --- reading the file ------------------------------------------------------------------


def _name_of(source: PathOrFile) -> str:
    if isinstance(source, str | os.PathLike):
        return str(source)
    return str(getattr(source, "name", "<file>"))


def _gunzip_error(name: str, exc: Exception) -> TraceFileError:
    if isinstance(exc, EOFError):
        return TraceFileError(f"{name}: truncated gzip data (the file was cut short)")
    return TraceFileError(f"{name}: corrupt gzip data ({exc})")


def _read_bytes(source: PathOrFile) -> bytes:
    """The file's bytes, gunzipped when they are gzip (by content, not by name)."""
    name = _name_of(source)
    if isinstance(source, str | os.PathLike):
        p = existing_file(source, "a Jaeger or OTLP JSON file")
        try:
            raw = p.read_bytes()
        except OSError as exc:
            raise TraceFileError(f"{p}: cannot read ({exc.strerror or exc})") from None
    elif hasattr(source, "read"):
        raw = source.read()
        if isinstance(raw, str):
            return raw.encode("utf-8")
        if not isinstance(raw, bytes | bytearray):
            raise TypeError(f"{name}: read() returned {type(raw).__name__}, not bytes or str")
        raw = bytes(raw)
    else:
        raise TypeError(f"expected a path or a file object, not {type(source).__name__}")
    if not raw.startswith(_GZIP_MAGIC):
        return raw
    try:
        return gzip.decompress(raw)
    except (EOFError, OSError, zlib.error) as exc:
        raise _gunzip_error(name, exc) from None


def _head(path: str | os.PathLike[str]) -> bytes:
    """The first ``_SNIFF_BYTES`` of a file, gunzipped when it is gzip."""
    p = existing_file(path, "a trace or span file")
    try:
        with open(p, "rb") as f:
            if f.read(2) != _GZIP_MAGIC:
                f.seek(0)
                return f.read(_SNIFF_BYTES)
            f.seek(0)
            try:
                with gzip.GzipFile(fileobj=f) as g:
                    return g.read(_SNIFF_BYTES)
            except (EOFError, OSError, zlib.error) as exc:
                raise _gunzip_error(str(p), exc) from None
    except TraceFileError:
        raise
    except OSError as exc:
        raise TraceFileError(f"{p}: cannot read ({exc.strerror or exc})") from None


def _text(source: PathOrFile) -> str:
    raw = _read_bytes(source)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ParseError(_name_of(source), line, "not UTF-8 text (expected JSON)") from None


def _documents(text: str, name: str) -> Iterator[tuple[int, Any]]:
    """Each JSON document of the text with its first line: one document, or JSON Lines."""
    decoder = json.JSONDecoder()
    pos, line, counted = 0, 1, 0
    while True:
        pos = _SPACE.match(text, pos).end()  # type: ignore[union-attr]
        if pos >= len(text):
            return
        line += text.count("\n", counted, pos)
        counted = pos
        try:
            doc, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            # A document that fails on the file's last line was most likely cut short.
            cut = "\n" not in text[pos:].rstrip()
            hint = "; the file may be cut short" if cut else ""
            raise ParseError(name, exc.lineno, f"not JSON: {exc.msg} (column {exc.colno}){hint}") from None
        except RecursionError:
            raise ParseError(name, line, "JSON nested too deeply") from None
        yield line, doc


def span_format(path: str | os.PathLike[str]) -> str | None:
    """``"jaeger"`` or ``"otlp"`` from a file's content, or None if it is not JSON.

    Gzip'd files are looked into. A file that starts like JSON, or whose name ends in
    ``.json``/``.jsonl`` (gzip'd or not), but holds neither format raises.

    Raises
    ------
    TraceFileError
        The file is missing, or JSON (by content or name) of neither format.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> p = pathlib.Path(tempfile.mkdtemp(), "spans.json")
    >>> _ = p.write_text('{"resourceSpans": []}')
    >>> span_format(p)
    'otlp'
    >>> _ = p.write_text('{"data": []}')
    >>> span_format(p)
    'jaeger'
    """
    if Path(path).is_dir():
        return None  # a dataset of trace parts, not spans
    head = _head(path).lstrip(b"\xef\xbb\xbf \t\r\n")
    named_json = Path(path).name.lower().endswith(SPAN_SUFFIXES)
    if head[:1] in (b"{", b"["):
        if b'"resourceSpans"' in head:
            return "otlp"
        if any(k in head for k in (b'"data"', b'"traceID"', b'"spans"')) or head[:1] == b"[":
            return "jaeger"
    elif not named_json:
        return None
    said = hint(path, unless=SPANS)
    raise TraceFileError(
        f"{path}: not tracing spans{said}"
        if said
        else f"{path}: not a Jaeger or OTLP JSON file ({_EXPECTED})"
    )


# --- field checks ----------------------------------------------------------------------


def _str_field(obj: dict[str, Any], key: str, *, required: bool = True) -> str:
    value = obj.get(key)
    if value is None or value == "":
        if required:
            raise _BadSpanError(f"missing {key!r}")
        return ""
    if not isinstance(value, str | int) or isinstance(value, bool):
        raise _BadSpanError(f"{key!r} is {type(value).__name__} {value!r} (must be a string)")
    return str(value)


def _int_field(obj: dict[str, Any], key: str, low: int, high: int) -> int:
    value = obj.get(key)
    if value is None:
        raise _BadSpanError(f"missing {key!r}")
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise _BadSpanError(f"{key!r} is {value!r} (must be an integer from {low} to {high})")
    return value


def _as_dict(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _BadSpanError(f"{what} is {type(value).__name__} (must be a JSON object)")
    return value


def _as_list(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _BadSpanError(f"{what} is {type(value).__name__} (must be a JSON array)")
    return value


# --- Jaeger ------------------------------------------------------------------------------


def _jaeger_traces(doc: Any) -> list[Any]:
    if isinstance(doc, list):
        return doc
    if isinstance(doc, dict) and isinstance(doc.get("data"), list):
        return doc["data"]
    if isinstance(doc, dict) and "spans" in doc:
        return [doc]  # a bare trace
    keys = ", ".join(list(doc)[:5]) if isinstance(doc, dict) else type(doc).__name__
    raise _BadSpanError(f'not a Jaeger API document (expected {{"data": [trace, ...]}}, found {keys})')


def _jaeger_kind(tags: Any) -> int:
    for tag in _as_list(tags, "'tags'"):
        if isinstance(tag, dict) and tag.get("key") == "span.kind":
            return _KINDS.get(str(tag.get("value", "")).lower(), _KIND_OTHER)
    return _KIND_OTHER


def _jaeger_span(span: Any, trace_id: str, processes: dict[str, Any]) -> tuple[Any, ...]:
    span = _as_dict(span, "the span")
    span_id = _str_field(span, "spanID")
    tid = _str_field(span, "traceID", required=False) or trace_id
    if not tid:
        raise _BadSpanError("missing 'traceID'")
    process = span.get("process")
    if process is None:
        pid = _str_field(span, "processID")
        if pid not in processes:
            raise _BadSpanError(f"processID {pid!r} is not in the trace's processes")
        process = processes[pid]
    service = _str_field(_as_dict(process, "the process"), "serviceName")
    start = _int_field(span, "startTime", 0, _MAX_US)
    duration = _int_field(span, "duration", 0, _MAX_US - start)
    parent = ""
    refs = [r for r in _as_list(span.get("references"), "'references'") if isinstance(r, dict)]
    # The first CHILD_OF reference in the same trace, else the first reference.
    refs.sort(key=lambda r: (r.get("refType") != "CHILD_OF", r.get("traceID", tid) != tid))
    if refs:
        parent = _str_field(refs[0], "spanID")
    name = _str_field(span, "operationName", required=False)
    kind = _jaeger_kind(span.get("tags"))
    return tid, span_id, parent, service, kind, start * 1000, (start + duration) * 1000, name


def _parse_jaeger(spans: _Spans, text: str) -> None:
    stats = spans.stats
    for line, doc in _documents(text, spans.path):
        stats.documents += 1
        try:
            traces = _jaeger_traces(doc)
        except _BadSpanError as exc:
            raise ParseError(spans.path, line, str(exc)) from None
        for t, trace in enumerate(traces):
            where = f"trace {t}"
            try:
                trace = _as_dict(trace, "the trace")
                trace_id = _str_field(trace, "traceID", required=False)
                processes = _as_dict(trace.get("processes") or {}, f"{where}'s 'processes'")
                span_list = _as_list(trace.get("spans"), f"{where}'s 'spans'")
            except _BadSpanError as exc:
                spans.bad(line, f"{where}: {exc}")
                continue
            stats.traces += 1
            where = f"trace {trace_id or t}"
            for k, span in enumerate(span_list):
                spans.add(line, f"{where} span {k}", _jaeger_span, span, trace_id, processes)


# --- OTLP --------------------------------------------------------------------------------


def _otlp_service(resource: Any) -> str:
    if not isinstance(resource, dict):
        return "unknown_service"
    for attr in _as_list(resource.get("attributes"), "the resource's 'attributes'"):
        if isinstance(attr, dict) and attr.get("key") == "service.name":
            value = attr.get("value")
            if isinstance(value, dict):
                value = value.get("stringValue")
            if isinstance(value, str) and value:
                return value
    return "unknown_service"


def _otlp_kind(value: Any) -> int:
    if isinstance(value, str):
        return _KINDS.get(value.lower(), _KIND_OTHER)
    return _KINDS.get(value, _KIND_OTHER) if isinstance(value, int) else _KIND_OTHER


def _otlp_span(span: Any, service: str) -> tuple[Any, ...]:
    span = _as_dict(span, "the span")
    tid = _str_field(span, "traceId")
    span_id = _str_field(span, "spanId")
    parent = _str_field(span, "parentSpanId", required=False)
    start = _int_field(span, "startTimeUnixNano", 0, 2**63 - 1)
    end = _int_field(span, "endTimeUnixNano", start, 2**63 - 1)
    name = _str_field(span, "name", required=False)
    return tid, span_id, parent, service, _otlp_kind(span.get("kind")), start, end, name


def _parse_otlp(spans: _Spans, text: str) -> None:
    stats = spans.stats
    for line, doc in _documents(text, spans.path):
        stats.documents += 1
        if not isinstance(doc, dict) or not isinstance(doc.get("resourceSpans"), list):
            keys = ", ".join(list(doc)[:5]) if isinstance(doc, dict) else type(doc).__name__
            raise ParseError(
                spans.path,
                line,
                f'not an OTLP/JSON document (expected {{"resourceSpans": [...]}}, found {keys})',
            )
        for r, rs in enumerate(doc["resourceSpans"]):
            where = f"resourceSpans {r}"
            try:
                rs = _as_dict(rs, where)
                service = _otlp_service(rs.get("resource"))
                scopes = rs.get("scopeSpans", rs.get("instrumentationLibrarySpans"))
                scopes = _as_list(scopes, f"{where}'s 'scopeSpans'")
                lists = [_as_list(_as_dict(s, "a scope").get("spans"), "'spans'") for s in scopes]
            except _BadSpanError as exc:
                spans.bad(line, f"{where}: {exc}")
                continue
            for s, span_list in enumerate(lists):
                for k, span in enumerate(span_list):
                    spans.add(line, f"{where} scope {s} span {k}", _otlp_span, span, service)
    stats.traces = len(set(spans.trace))


# --- spans to messages -------------------------------------------------------------------


def _codes(values: list[str]) -> tuple[np.ndarray, list[str]]:
    """Dictionary codes (int64) of string values, and the distinct values in first-seen order."""
    index: dict[str, int] = {}
    codes = np.fromiter((index.setdefault(v, len(index)) for v in values), np.int64, len(values))
    return codes, list(index)


class _CycleError(Exception):
    """Element ``index`` is its own ancestor."""

    def __init__(self, index: int) -> None:
        self.index = index


def _jump(parent: np.ndarray, stop: np.ndarray) -> np.ndarray:
    """For each element, its nearest ancestor-or-self where ``stop`` holds (-1 if none).

    Pointer jumping: O(n log depth). A cycle of references raises ``_CycleError``.
    """
    n = parent.size
    up = np.where(stop, np.arange(n), parent)
    for _ in range(max(n, 1).bit_length() + 1):
        nxt = np.where(up >= 0, up[np.maximum(up, 0)], -1)
        if np.array_equal(nxt, up):
            break
        up = nxt
    # Converged, every pointer ends at a stop or -1; otherwise a cycle holds it.
    stuck = np.flatnonzero((up >= 0) & ~stop[np.maximum(up, 0)])
    if stuck.size:
        raise _CycleError(int(stuck[0]))
    return up


def _depth(parent: np.ndarray) -> np.ndarray:
    """Levels below the root of every node of a forest (pointer jumping with distances)."""
    up = parent.copy()
    dist = (parent >= 0).astype(np.int64)
    while (up >= 0).any():
        live = up >= 0
        safe = np.maximum(up, 0)
        dist = np.where(live, dist + dist[safe], dist)
        up = np.where(live, up[safe], -1)
    return dist


@dataclass(frozen=True)
class _Forest:
    """The spans kept (the first of each trace and span id), as arrays in file order."""

    rows: np.ndarray  # index of each kept span into the ``_Spans`` lists
    trace: np.ndarray  # trace code of each kept span
    parent: np.ndarray  # parent among the kept spans; -1 for a root or a parent not in the file
    service: np.ndarray  # service code
    services: list[str]  # service names, by code
    kind: np.ndarray  # _KIND_*
    start: np.ndarray  # ns
    end: np.ndarray


@dataclass(frozen=True)
class _Rpcs:
    """The RPCs: the spans that enter a service, each one call and one return."""

    span: np.ndarray  # the kept span entering the service (its server side)
    client: np.ndarray  # whether the hop has a client span
    client_span: np.ndarray  # that client span, else -1
    parent: np.ndarray  # the enclosing RPC; -1 for a request's first
    root: np.ndarray  # the request's first RPC


def _resolve(spans: _Spans, at: str) -> pa.Table:
    """The message trace of the spans read: parents resolved, RPCs and requests found."""
    forest = _kept_spans(spans)
    rpcs = _find_rpcs(spans, forest)
    return _rpc_table(spans, forest, rpcs, at)


def _kept_spans(spans: _Spans) -> _Forest:
    """Duplicates dropped (the first of a trace and span id is kept), parents resolved
    to indices; counts duplicates, spans and orphans."""
    stats = spans.stats
    n_in = len(spans.span)
    trace_code, _ = _codes(spans.trace)
    keys = [f"{t}\x00{s}" for t, s in zip(trace_code.tolist(), spans.span, strict=True)]
    first: dict[str, int] = {}
    for i, k in enumerate(keys):
        first.setdefault(k, i)
    keep = np.zeros(n_in, bool)
    keep[list(first.values())] = True
    stats.duplicates = int(n_in - keep.sum())
    rows = np.flatnonzero(keep)
    new_index = np.full(n_in, -1, np.int64)
    new_index[rows] = np.arange(rows.size)
    n = rows.size
    stats.spans = n
    parent = np.full(n, -1, np.int64)
    named = np.zeros(n, bool)
    codes = trace_code.tolist()
    for j, i in enumerate(rows.tolist()):
        p = spans.parent[i]
        if p:
            named[j] = True
            at_i = first.get(f"{codes[i]}\x00{p}", -1)
            parent[j] = new_index[at_i] if at_i >= 0 and at_i != i else -1
    stats.orphans = int((named & (parent < 0)).sum())
    service, services = _codes([spans.service[i] for i in rows.tolist()])
    return _Forest(
        rows=rows,
        trace=trace_code[rows],
        parent=parent,
        service=service,
        services=services,
        kind=np.asarray(spans.kind, np.int8)[rows],
        start=np.asarray(spans.start_ns, np.int64)[rows],
        end=np.asarray(spans.end_ns, np.int64)[rows],
    )


def _find_rpcs(spans: _Spans, f: _Forest) -> _Rpcs:
    """The spans entering a service, their client sides, enclosing RPCs and requests;
    counts RPCs, client sides, local spans and requests."""
    stats = spans.stats
    n = f.rows.size
    has_parent = f.parent >= 0
    safe_p = np.maximum(f.parent, 0)
    p_kind = np.where(has_parent, f.kind[safe_p], _KIND_OTHER)
    # A span enters its service when it is not a client span and either has no parent,
    # has its parent in another service, or answers a client span (a call to itself).
    entry = (f.kind != _KIND_CLIENT) & (
        ~has_parent | (f.service[safe_p] != f.service) | ((f.kind == _KIND_SERVER) & (p_kind == _KIND_CLIENT))
    )
    try:
        nearest = _jump(f.parent, entry)  # nearest entry, self included
    except _CycleError as exc:
        raise _cycle_error(spans, f.rows, np.arange(n), exc) from None
    ent = np.flatnonzero(entry)
    m = ent.size
    stats.rpcs = m
    client = has_parent[ent] & (p_kind[ent] == _KIND_CLIENT)
    client_span = np.where(client, f.parent[ent], -1)
    stats.client_sides = int(np.unique(client_span[client]).size)
    stats.local = n - m - stats.client_sides
    rpc_of_span = np.full(n, -1, np.int64)
    rpc_of_span[ent] = np.arange(m)
    enclosing = np.where(has_parent[ent], nearest[safe_p[ent]], -1)
    rpc_parent = np.where(enclosing >= 0, rpc_of_span[np.maximum(enclosing, 0)], -1)
    try:
        root = _jump(rpc_parent, rpc_parent < 0)
    except _CycleError as exc:
        raise _cycle_error(spans, f.rows, ent, exc) from None
    stats.requests = int((rpc_parent < 0).sum())
    return _Rpcs(span=ent, client=client, client_span=client_span, parent=rpc_parent, root=root)


def _cycle_error(spans: _Spans, rows: np.ndarray, among: np.ndarray, exc: _CycleError) -> ParseError:
    """The error for a span that is its own ancestor (``exc.index`` into ``among``)."""
    i = int(rows[among[exc.index]])
    reason = f"trace {spans.trace[i]} span {spans.span[i]} is its own ancestor (a cycle of references)"
    return ParseError(spans.path, spans.line[i], reason)


def _rpc_table(spans: _Spans, f: _Forest, r: _Rpcs, at: str) -> pa.Table:
    """One call and one return per RPC, stamped at ``at``, in time order (ties in the
    request's causal order), with the truth columns."""
    ent, m = r.span, r.span.size
    t_call, t_ret = f.start[ent], f.end[ent]
    if at == "caller":
        cs = np.maximum(r.client_span, 0)
        t_call = np.where(r.client, f.start[cs], t_call)
        t_ret = np.where(r.client, f.end[cs], t_ret)
        spans.stats.caller_stamped = int(r.client.sum())
    callee = f.service[ent]
    names = f.services if ROOT_CALLER in f.services else [*f.services, ROOT_CALLER]
    caller = np.where(f.parent[ent] >= 0, f.service[np.maximum(f.parent, 0)[ent]], names.index(ROOT_CALLER))
    # Ids in order of the server side's start, so they say nothing about the requests.
    by_start = np.lexsort((ent, f.trace[ent], f.start[ent]))
    call_id = np.empty(m, np.int64)
    call_id[by_start] = np.arange(1, m + 1)
    seq, pattern = _order_and_shapes(r.parent, r.root, caller, callee, t_call, t_ret, names)
    inst = call_id[r.root]
    par_id = np.where(r.parent >= 0, call_id[np.maximum(r.parent, 0)], 0)
    label, labels = _codes([spans.name[f.rows[e]] for e in ent.tolist()])
    pat_code, pat_names = _codes(pattern)
    two = np.concatenate
    ts = two([t_call, t_ret])
    order = np.lexsort((two([seq[0], seq[1]]), two([inst, inst]), ts))
    uid = two([call_id, call_id]).astype(np.uint64)[order]
    no_parent = two([r.parent < 0, r.parent < 0])[order]
    table = pa.table(
        {
            "timestamp": pa.array(ts[order], pa.int64()).cast(TS_TYPE),
            "sender": _dictionary(two([caller, callee])[order], names),
            "receiver": _dictionary(two([callee, caller])[order], names),
            "op": pa.DictionaryArray.from_arrays(
                pa.array(np.repeat(np.array([0, 1], np.int8), m)[order]), pa.array(OPS)
            ),
            "id": pa.array(uid, pa.uint64()),
            "label": _dictionary(two([label, label])[order], labels),
            "true_instance": pa.array(two([inst, inst])[order].astype(np.uint64)),
            "true_pattern": _dictionary(two([pat_code, pat_code])[order], pat_names),
            "true_call": pa.array(uid),
            "true_parent": pa.array(two([par_id, par_id])[order].astype(np.uint64), mask=no_parent),
        }
    )
    return validate_trace(table)


def _dictionary(codes: np.ndarray, values: list[str]) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int32)), pa.array(values, pa.string()))


def _order_and_shapes(
    parent: np.ndarray,
    root: np.ndarray,
    caller: np.ndarray,
    callee: np.ndarray,
    t_call: np.ndarray,
    t_ret: np.ndarray,
    names: list[str],
) -> tuple[tuple[np.ndarray, np.ndarray], list[str]]:
    """Causal order of every RPC's call and return within its request, and each request's shape.

    Returns ``((call_seq, return_seq), pattern id per RPC)``: the positions of the call
    and the return in a walk of the request's tree (children in call order), which
    orders messages stamped in the same clock tick; and the ``tracefmt.patterns`` id of
    the request the RPC belongs to.
    """
    m = parent.size
    depth = _depth(parent)
    # Children grouped by parent, in call order (then return order, then index).
    order = np.lexsort((np.arange(m), t_ret, t_call, parent))
    order = order[parent[order] >= 0]
    # The same, split by depth (1, 2, ...): a stable sort keeps the order within a level.
    order = order[np.argsort(depth[order], kind="stable")]
    cuts = np.flatnonzero(np.diff(depth[order])) + 1
    by_level = np.split(order, cuts) if order.size else []
    size = np.ones(m, np.int64)
    for level in reversed(by_level):
        np.add.at(size, parent[level], size[level])
    call_seq = np.zeros(m, np.int64)
    for level in by_level:
        # Within a parent, each child starts after its earlier siblings' subtrees.
        p = parent[level]
        width = 2 * size[level]
        before = np.cumsum(width) - width
        group_start = np.flatnonzero(np.concatenate([[True], p[1:] != p[:-1]]))
        offset = before - np.repeat(before[group_start], np.diff(np.append(group_start, level.size)))
        call_seq[level] = call_seq[p] + 1 + offset
    ret_seq = call_seq + 2 * size - 1
    # Shapes bottom up, as tracefmt.patterns texts; children are visited in call order,
    # each with the number of its concurrent group among its siblings.
    in_order = np.lexsort((np.arange(m), t_ret, t_call, parent))
    in_order = in_order[parent[in_order] >= 0]
    number = np.zeros(m, np.int64)
    number[in_order] = sibling_groups(parent[in_order], t_call[in_order], t_ret[in_order])[1]
    kids: list[list[tuple[str, int]]] = [[] for _ in range(m)]
    cl, ce, par, num = caller.tolist(), callee.tolist(), parent.tolist(), number.tolist()
    for level in reversed(by_level):
        for v in level.tolist():
            kids[par[v]].append((_visit_text(names[cl[v]], names[ce[v]], kids[v]), num[v]))
            kids[v] = []
    roots = np.flatnonzero(parent < 0).tolist()
    ids = {v: text_id(_visit_text(names[cl[v]], names[ce[v]], kids[v])) for v in roots}
    return (call_seq, ret_seq), [ids[r] for r in root.tolist()]


def _visit_text(caller: str, node: str, kids: list[tuple[str, int]]) -> str:
    """The canonical text of a visit (``tracefmt.patterns``) from its children's texts and
    concurrent group numbers, in call order: texts sorted within each group."""
    numbers = [k for _, k in kids]
    if len(set(numbers)) == len(numbers):
        return join_text(caller, node, [t for t, _ in kids])
    ordered = sorted(kids, key=lambda kid: (kid[1], kid[0]))
    return join_text(caller, node, [t for t, _ in ordered], [k for _, k in ordered])


# --- public readers ----------------------------------------------------------------------


def _read(source: PathOrFile, fmt: str, at: str, skip_bad: bool, stats: SpanStats | None) -> pa.Table:
    if at not in SPAN_AT:
        raise ParameterError(f"unknown at {at!r} (must be one of {', '.join(SPAN_AT)})")
    if not isinstance(source, str | os.PathLike) and not hasattr(source, "read"):
        raise TypeError(f"expected a path or a file object, not {type(source).__name__}")
    stats = stats if stats is not None else SpanStats()
    stats.format, stats.at = fmt, at
    spans = _Spans(_name_of(source), skip_bad, stats)
    text = _text(source)
    (_parse_jaeger if fmt == "jaeger" else _parse_otlp)(spans, text)
    return _resolve(spans, at)


def read_jaeger(
    path_or_file: PathOrFile,
    *,
    at: str = "callee",
    skip_bad: bool = False,
    stats: SpanStats | None = None,
) -> pa.Table:
    """Read Jaeger spans as a message trace with ground-truth columns.

    Parameters
    ----------
    path_or_file : str, path-like or file object
        A Jaeger API response (``{"data": [trace, ...]}``), JSON Lines of them, a bare
        trace or a list of traces; gzip'd or not (told by the content).
    at : {"callee", "caller"}
        Stamp each RPC with its server span's times (default), or with its client
        span's where the hop has one.
    skip_bad : bool
        Skip spans with missing or malformed fields (counted in ``stats``), not raise.
    stats : SpanStats, optional
        Filled in with what was read, merged and skipped.

    Returns
    -------
    pyarrow.Table
        A validated trace, sorted by time, with ``label`` (the operation) and the
        ``true_instance``, ``true_pattern``, ``true_call`` and ``true_parent`` columns.

    Raises
    ------
    ParseError
        Not JSON, not a Jaeger document, or a span lacking a field (``path:line:
        trace T span K: missing 'startTime'``).
    TraceFileError
        The file is missing, unreadable, or truncated or corrupt gzip.

    Examples
    --------
    >>> import io, json
    >>> def span(sid, parent, pid, kind, start, dur):
    ...     return {"traceID": "t", "spanID": sid, "processID": pid, "startTime": start, "duration": dur,
    ...             "references": [{"refType": "CHILD_OF", "spanID": parent}] if parent else [],
    ...             "tags": [{"key": "span.kind", "value": kind}]}
    >>> doc = json.dumps({"data": [{"processes": {"p1": {"serviceName": "web"}, "p2": {"serviceName": "db"}},
    ...     "spans": [span("a", None, "p1", "server", 100, 50), span("b", "a", "p1", "client", 110, 30),
    ...               span("c", "b", "p2", "server", 115, 20)]}]})
    >>> t = read_jaeger(io.StringIO(doc))
    >>> for row in t.select(["op", "sender", "receiver", "id", "true_parent"]).to_pylist():
    ...     print(*row.values())
    call client web 1 None
    call web db 2 1
    return db web 2 1
    return web client 1 None
    >>> t["timestamp"].cast("int64").to_pylist()[1:3]  # at the callee: db's span
    [115000, 135000]
    >>> read_jaeger(io.StringIO(doc), at="caller")["timestamp"].cast("int64").to_pylist()[1:3]
    [110000, 140000]
    """
    return _read(path_or_file, "jaeger", at, skip_bad, stats)


def read_otlp(
    path_or_file: PathOrFile,
    *,
    at: str = "callee",
    skip_bad: bool = False,
    stats: SpanStats | None = None,
) -> pa.Table:
    """Read OpenTelemetry spans (OTLP/JSON) as a message trace with ground-truth columns.

    The file holds ``{"resourceSpans": [...]}`` documents (one, or JSON Lines as the
    collector's file exporter writes them), gzip'd or not. A resource's service is its
    ``service.name`` attribute; ``kind`` is the enum number (2 server, 3 client) or its
    name (``"SPAN_KIND_SERVER"``). Parameters, result and errors are as for
    :func:`read_jaeger`.

    Examples
    --------
    >>> import io, json
    >>> def rs(service, spans):
    ...     attrs = [{"key": "service.name", "value": {"stringValue": service}}]
    ...     return {"resource": {"attributes": attrs}, "scopeSpans": [{"spans": spans}]}
    >>> def span(sid, parent, kind, start, end):
    ...     return {"traceId": "t1", "spanId": sid, "parentSpanId": parent, "kind": kind,
    ...             "name": sid, "startTimeUnixNano": str(start), "endTimeUnixNano": str(end)}
    >>> doc = {"resourceSpans": [
    ...     rs("web", [span("a", "", 2, 1000, 9000), span("b", "a", 3, 2000, 6000)]),
    ...     rs("db", [span("c", "b", "SPAN_KIND_SERVER", 2500, 5500)])]}
    >>> t = read_otlp(io.StringIO(json.dumps(doc)))
    >>> [(r["op"], r["sender"], r["receiver"]) for r in t.select(["op", "sender", "receiver"]).to_pylist()]
    [('call', 'client', 'web'), ('call', 'web', 'db'), ('return', 'db', 'web'), ('return', 'web', 'client')]
    """
    return _read(path_or_file, "otlp", at, skip_bad, stats)


def read_spans(
    path: str | os.PathLike[str],
    *,
    at: str = "callee",
    skip_bad: bool = False,
    stats: SpanStats | None = None,
) -> pa.Table:
    """Read a Jaeger or OTLP file, whichever its content is (see :func:`span_format`).

    Examples
    --------
    >>> import pathlib, tempfile
    >>> p = pathlib.Path(tempfile.mkdtemp(), "empty.json")
    >>> _ = p.write_text('{"data": []}')
    >>> read_spans(p).num_rows
    0
    """
    fmt = span_format(path)
    if fmt is None:
        raise TraceFileError(f"{path}: not a Jaeger or OTLP JSON file ({_EXPECTED})")
    return _read(path, fmt, at, skip_bad, stats)

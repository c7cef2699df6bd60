"""Request identity read off the wire: trace context and request ids in HTTP headers.

A message that carries a trace-context header says which request it belongs to, and a
message trace can keep that (columns ``trace_id``, ``span_id``, ``request_id``;
``tracefmt.schema``). Which headers fill which column:

- ``trace_id`` (32 lowercase hex digits) and ``span_id`` (16), from the first header of
  this list that holds a valid value: W3C ``traceparent``
  (``version-traceid-parentid-flags``; the span id is its parent-id field); B3, the single
  header ``b3`` (``traceid-spanid[-sampled[-parentspanid]]``), then ``X-B3-TraceId`` with
  ``X-B3-SpanId``; Jaeger's ``uber-trace-id`` (``traceid:spanid:parentspanid:flags``);
  gRPC's binary ``grpc-trace-bin`` (OpenCensus: version 0, then field 0 and the 16-byte
  trace id, field 1 and the 8-byte span id, field 2 and the options byte; base64 on the
  wire, padding optional, or raw after a NUL byte where both gRPC peers allow "true
  binary" metadata, as grpcio does). Shorter trace ids (B3's 16 digits, Jaeger's of any width) are
  left-padded with zeros; upper-case digits are taken (lower-cased) in B3 and Jaeger,
  not in ``traceparent``, whose grammar allows only lower case. An all-zero id, a value
  that does not follow its grammar, is malformed: skipped (the next header on the list
  may still give the ids) and counted.
- ``request_id``: the value of the first of the request-id headers present (by default
  ``X-Request-ID``, then ``X-Correlation-ID``), blanks around it taken off, as an opaque
  token: 1 to 128 bytes of printable ASCII, else null and counted.
- ``x_header_<name>``: with ``keep_headers``, the value of each header named, as text.

Header names match in any case. Each message keeps what it carries itself: a response
that echoes ``X-Request-ID`` has it, one that does not has none (inference, not capture,
gives a return its call's keys). Nothing else of a header is kept.

HTTP/1.x headers are found by :func:`http1_keys` for all messages of a batch at once
(``capture.native.http_headers`` reads each message's header lines in C; without it a
numpy pass over the stream does the same); HTTP/2 headers come decoded from HPACK
(:func:`header_keys`). The values are checked and converted in numpy, a header form at a
time (``grpc-trace-bin`` excepted: base64, HTTP/2 only, a step per value).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from capture._spans import native, words_view
from tracefmt.errors import ParameterError

__all__ = [
    "DEFAULT_REQUEST_ID_HEADERS",
    "TRACE_HEADERS",
    "KeyOptions",
    "RequestKeys",
    "header_keys",
    "http1_keys",
    "trace_context",
]

#: The trace-context headers, in order of precedence (B3's two forms count as one step).
TRACE_HEADERS: tuple[str, ...] = (
    "traceparent",
    "b3",
    "x-b3-traceid",
    "x-b3-spanid",
    "uber-trace-id",
    "grpc-trace-bin",
)
DEFAULT_REQUEST_ID_HEADERS: tuple[str, ...] = ("X-Request-ID", "X-Correlation-ID")
# RFC 9110 5.1: a field name is a token.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_TOKEN_CHARS = "letters, digits and !#$%&'*+-.^_`|~"
_MAX_REQUEST_ID = 128
# Longer values of a trace header cannot be valid (traceparent of a later version may
# grow, but its first 55 bytes are what is read).
_MAX_TRACE_VALUE = 512

_HEX_LOWER = np.zeros(256, bool)
_HEX_LOWER[np.frombuffer(b"0123456789abcdef", np.uint8)] = True
_HEX_ANY = _HEX_LOWER.copy()
_HEX_ANY[np.frombuffer(b"ABCDEF", np.uint8)] = True
_LOWER = np.arange(256, dtype=np.uint8)
_LOWER[65:91] += 32
_SAMPLED = np.zeros(256, bool)
_SAMPLED[np.frombuffer(b"01d", np.uint8)] = True
_ZERO, _DASH, _COLON = ord("0"), ord("-"), ord(":")


@dataclass(frozen=True)
class KeyOptions:
    """Which headers a conversion reads, beyond the trace-context ones.

    Parameters
    ----------
    request_id_headers : sequence of str
        Opaque request-id headers, the first present wins (empty: no request ids).
    keep_headers : sequence of str
        Headers whose value each message keeps in a column ``x_header_<name>`` (lower
        case, ``-`` as ``_``). None by default: nothing else of a header is stored.
    connections : bool
        Also keep each message's connection: ``src_ip``, ``src_port``, ``dst_ip``,
        ``dst_port`` and ``stream`` (tshark's ``tcp.stream``/``udp.stream``; what
        ``wirepath packets`` needs). Off by default: numbering every packet's connection
        costs about a quarter more CPU and half again the file (BENCHMARKS.md).

    Examples
    --------
    >>> KeyOptions(keep_headers=("User-Agent",)).columns
    ('x_header_user_agent',)
    >>> KeyOptions(request_id_headers=("X Request",))
    Traceback (most recent call last):
    ...
    tracefmt.errors.ParameterError: header name 'X Request' is not an HTTP token (allowed: ...)
    """

    request_id_headers: tuple[str, ...] = DEFAULT_REQUEST_ID_HEADERS
    keep_headers: tuple[str, ...] = ()
    connections: bool = False
    #: Every header read, lower case, each once: the trace headers first.
    names: tuple[bytes, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for attr in ("request_id_headers", "keep_headers"):
            value = getattr(self, attr)
            if isinstance(value, str):
                raise ParameterError(f"{attr} must be a sequence of header names, not the string {value!r}")
            object.__setattr__(self, attr, tuple(value))
            for name in value:
                if not isinstance(name, str) or not _TOKEN.fullmatch(name):
                    raise ParameterError(
                        f"header name {name!r} is not an HTTP token (allowed: {_TOKEN_CHARS})"
                    )
        cols = self.columns
        if len(set(cols)) != len(cols):
            raise ParameterError(
                f"keep_headers {list(self.keep_headers)} name one column twice ({', '.join(cols)})"
            )
        wanted = [*TRACE_HEADERS, *(n.lower() for n in self.request_id_headers + self.keep_headers)]
        object.__setattr__(self, "names", tuple(n.encode() for n in dict.fromkeys(wanted)))

    @property
    def columns(self) -> tuple[str, ...]:
        """The user columns of ``keep_headers``, in their order."""
        return tuple("x_header_" + n.lower().replace("-", "_") for n in self.keep_headers)

    @staticmethod
    def split(text: str) -> tuple[str, ...]:
        """Header names from a comma-separated list (blanks around names ignored).

        >>> KeyOptions.split(" X-Request-ID, X-Correlation-ID "), KeyOptions.split("")
        (('X-Request-ID', 'X-Correlation-ID'), ())
        """
        return tuple(n.strip() for n in text.split(",") if n.strip())

    def _index(self, name: str) -> int:
        return self.names.index(name.lower().encode())


@dataclass(frozen=True)
class RequestKeys:
    """Per message, the keys its headers carried (``b""``: none) and how many malformed
    values it had (skipped).

    ``trace_id`` and ``span_id`` are ``S32`` and ``S16`` arrays, ``request_id`` an ``S``
    array, ``headers`` an object array: None, or per kept header its value (str or None).
    """

    trace_id: np.ndarray
    span_id: np.ndarray
    request_id: np.ndarray
    headers: np.ndarray
    malformed: np.ndarray

    @staticmethod
    def none(n: int) -> RequestKeys:
        """``n`` messages without keys."""
        return RequestKeys(
            np.zeros(n, "S1"),
            np.zeros(n, "S1"),
            np.zeros(n, "S1"),
            np.full(n, None, object),
            np.zeros(n, np.uint8),
        )


def http1_keys(stream: bytes, lo: np.ndarray, hi: np.ndarray, options: KeyOptions) -> RequestKeys:
    """The keys of HTTP/1.x messages ``stream[lo[t]:hi[t]]`` (each starting with its start
    line): the first header line of each name, up to the empty line.

    Examples
    --------
    >>> tp = b"00-" + b"ab" * 16 + b"-" + b"cd" * 8 + b"-01"
    >>> m = b"GET / HTTP/1.1\\r\\nX-Request-Id:  r-7 \\r\\nTRACEPARENT: " + tp + b"\\r\\n\\r\\n"
    >>> k = http1_keys(m, np.array([0]), np.array([len(m)]), KeyOptions())
    >>> k.trace_id.tolist(), k.span_id.tolist(), k.request_id.tolist()
    ([b'abababababababababababababababab'], [b'cdcdcdcdcdcdcdcd'], [b'r-7'])
    """
    lo = np.ascontiguousarray(lo, np.int64)
    hi = np.ascontiguousarray(hi, np.int64)
    k = len(options.names)
    if not len(lo) or not stream:
        return RequestKeys.none(len(lo))
    if native is not None:
        vlo = np.empty(len(lo) * k, np.int64)
        vhi = np.empty(len(lo) * k, np.int64)
        native.http_headers(stream, lo, hi, b"".join(n + b"\n" for n in options.names), vlo, vhi)
        vlo, vhi = vlo.reshape(-1, k), vhi.reshape(-1, k)
    else:
        vlo, vhi = _numpy_headers(stream, lo, hi, options.names)
    msg, name = np.nonzero(vlo >= 0)
    buf = np.frombuffer(stream, np.uint8)
    return _keys(len(lo), msg, name, buf, vlo[msg, name], vhi[msg, name], options)


def header_keys(headers: Sequence[Iterable[tuple[bytes, bytes]] | None], options: KeyOptions) -> RequestKeys:
    """The keys of messages whose headers are decoded already (HTTP/2's HPACK): per
    message its ``(name, value)`` pairs (names in lower case), or None.

    Examples
    --------
    >>> bin_ = base64.b64encode(bytes([0, 0, *range(1, 17), 1, *range(0xA1, 0xA9), 2, 1]))
    >>> k = header_keys([[(b"grpc-trace-bin", bin_.rstrip(b"="))], None], KeyOptions())
    >>> k.trace_id.tolist(), k.span_id.tolist(), k.malformed.tolist()
    ([b'0102030405060708090a0b0c0d0e0f10', b''], [b'a1a2a3a4a5a6a7a8', b''], [0, 0])
    """
    index = {n: j for j, n in enumerate(options.names)}
    msg, name, parts = [], [], []
    for t, pairs in enumerate(headers):
        if not pairs:
            continue
        seen: set[int] = set()
        for n, v in pairs:
            j = index.get(n.lower())
            if j is not None and j not in seen:  # the first of a name, as in HTTP/1
                seen.add(j)
                msg.append(t)
                name.append(j)
                parts.append(v.strip(b" \t"))
    lengths = np.array([len(p) for p in parts], np.int64)
    vhi = np.cumsum(lengths)
    buf = np.frombuffer(b"".join(parts), np.uint8)
    return _keys(
        len(headers), np.array(msg, np.int64), np.array(name, np.int64), buf, vhi - lengths, vhi, options
    )


def trace_context(
    headers: Mapping[str, str | bytes], options: KeyOptions | None = None
) -> tuple[str | None, str | None, str | None, int]:
    """``(trace_id, span_id, request_id, malformed)`` of one message's headers.

    Examples
    --------
    >>> trace_context({"b3": "80f198ee56343ba8-e457b5a2e4d86bd1-1"})
    ('000000000000000080f198ee56343ba8', 'e457b5a2e4d86bd1', None, 0)
    >>> trace_context({"uber-trace-id": "0:1:0:1", "X-Request-ID": "\\u00e9"})
    (None, None, None, 2)
    """
    options = options or KeyOptions()
    pairs = [(n.lower().encode(), v.encode("utf-8") if isinstance(v, str) else v) for n, v in headers.items()]
    k = header_keys([pairs], options)

    def text(a: np.ndarray) -> str | None:
        return a[0].decode("ascii") if a[0] else None

    return text(k.trace_id), text(k.span_id), text(k.request_id), int(k.malformed[0])


# ---- finding the values -----------------------------------------------------------------


def _numpy_headers(
    stream: bytes, lo: np.ndarray, hi: np.ndarray, names: tuple[bytes, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """``capture.native.http_headers`` in numpy: every line of the stream is a candidate
    (one pass for the line feeds), kept where it lies in a message's header block."""
    n, k = len(lo), len(names)
    vlo = np.full((n, k), -1, np.int64)
    vhi = np.full((n, k), -1, np.int64)
    s = np.frombuffer(stream, np.uint8)
    lf = np.flatnonzero(s == 10)
    if not len(lf):
        return vlo, vhi
    ls = lf + 1  # line starts
    # The message each line is in: the last one starting before the line.
    order = np.argsort(lo, kind="stable")
    m = np.searchsorted(lo[order], ls, side="right") - 1
    inside = m >= 0
    t = order[np.maximum(m, 0)]
    inside &= (ls < hi[t]) & (lf >= lo[t])
    # Each line's end: its line feed, or its message's end.
    nxt = np.minimum(np.r_[lf[1:], len(s)], hi[t])
    ce = nxt - ((nxt > ls) & (s[np.maximum(nxt - 1, 0)] == 13))  # a carriage return off
    # The header block ends at the first empty line of the message.
    empty = inside & (ce == ls)
    first_empty = np.full(n, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(first_empty, t[empty], ls[empty])
    inside &= ls < first_empty[t]
    cand = np.flatnonzero(inside)
    if not len(cand):
        return vlo, vhi
    width = max(len(x) for x in names) + 1
    idx = np.minimum(ls[cand][:, None] + np.arange(width), len(s) - 1)
    head = _LOWER[s[idx]]
    room = ce[cand][:, None] - ls[cand][:, None]
    for j, name in enumerate(names):
        w = len(name)
        hit = (room[:, 0] > w) & (head[:, : w + 1] == np.frombuffer(name + b":", np.uint8)).all(axis=1)
        c = cand[hit][::-1]  # the first line of a message wins: written last
        a, b = ls[c] + w + 1, ce[c]
        a, b = _trimmed(s, a, b)
        vlo[t[c], j], vhi[t[c], j] = a, b
    return vlo, vhi


def _trimmed(s: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Spans ``[a, b)`` of ``s`` without the blanks (space, tab) around them."""
    a, b = a.copy(), b.copy()
    blank = np.zeros(256, bool)
    blank[[9, 32]] = True
    while True:
        more = (a < b) & blank[s[np.minimum(a, len(s) - 1)]]
        if not more.any():
            break
        a += more
    while True:
        more = (b > a) & blank[s[np.maximum(b - 1, 0)]]
        if not more.any():
            break
        b -= more
    return a, b


# ---- checking and converting the values ------------------------------------------------


def _matrix(buf: np.ndarray, vlo: np.ndarray, vhi: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """The values ``buf[vlo:vhi]`` as rows of ``width`` bytes (zeros past each one's end),
    and their lengths. Gathered 8 bytes at a time: an index per byte costs 8 times more."""
    length = vhi - vlo
    words = -(-width // 8)
    if not len(vlo):
        return np.zeros((0, width), np.uint8), length
    got = np.zeros((len(vlo), 8 * words), np.uint8)
    # Rows whose last word would run past the buffer's end are read a byte at a time.
    near_end = vlo + 8 * words > len(buf)
    far = np.flatnonzero(~near_end)
    if len(far):
        got[far] = words_view(buf)[vlo[far, None] + 8 * np.arange(words)].view(np.uint8)
    near = np.flatnonzero(near_end)
    if len(near):
        idx = vlo[near, None] + np.arange(8 * words)
        got[near] = np.where(idx < len(buf), buf[np.minimum(idx, max(len(buf) - 1, 0))], 0)
    return np.where(np.arange(width) < length[:, None], got[:, :width], 0).astype(np.uint8), length


def _as_strings(rows: np.ndarray, width: int) -> np.ndarray:
    """Rows of bytes as an ``S<width>`` array."""
    return np.ascontiguousarray(rows[:, :width], np.uint8).view(f"S{width}").ravel()


def _nonzero_id(rows: np.ndarray) -> np.ndarray:
    return (rows != _ZERO).any(axis=1)


def _padded(m: np.ndarray, end: np.ndarray, start: np.ndarray, width: int) -> np.ndarray:
    """Per row, the hex digits ``m[start:end]`` lower-cased and left-padded with ``0`` to
    ``width`` (``end - start <= width``)."""
    src = end[:, None] - width + np.arange(width)
    got = m[np.arange(len(m))[:, None], np.clip(src, 0, m.shape[1] - 1)]
    return np.where(src >= start[:, None], _LOWER[got], _ZERO).astype(np.uint8)


class _Ids:
    """Trace and span ids found for messages by one header form: ``ok`` per value, the
    ids of the valid ones (rows of 32 and 16 bytes; a span of zeros: none)."""

    def __init__(self, n: int) -> None:
        self.ok = np.zeros(n, bool)
        self.trace = np.zeros((n, 32), np.uint8)
        self.span = np.zeros((n, 16), np.uint8)


def _traceparent(m: np.ndarray, length: np.ndarray) -> _Ids:
    out = _Ids(len(m))
    v = m[:, :56]
    hexl = _HEX_LOWER[v]
    version_00 = (v[:, 0] == _ZERO) & (v[:, 1] == _ZERO)
    ok = (length >= 55) & hexl[:, 0:2].all(axis=1) & ~((v[:, 0] == ord("f")) & (v[:, 1] == ord("f")))
    ok &= (v[:, 2] == _DASH) & (v[:, 35] == _DASH) & (v[:, 52] == _DASH)
    ok &= hexl[:, 3:35].all(axis=1) & hexl[:, 36:52].all(axis=1) & hexl[:, 53:55].all(axis=1)
    # Version 00 is exactly 55 bytes; a later version may append fields after a dash.
    ok &= (length == 55) | (~version_00 & (v[:, 55] == _DASH))
    ok &= _nonzero_id(v[:, 3:35]) & _nonzero_id(v[:, 36:52])
    out.ok = ok
    out.trace[ok], out.span[ok] = v[ok, 3:35], v[ok, 36:52]
    return out


def _traceparents(buf: np.ndarray, vlo: np.ndarray, vhi: np.ndarray) -> _Ids:
    """W3C ``traceparent`` values ``buf[vlo:vhi]``: compiled where it is built (a step per
    value in C), else in numpy; the same answers."""
    if native is None or not len(vlo):
        m, length = _matrix(buf, vlo, vhi, 56)
        return _traceparent(m, np.minimum(length, _MAX_TRACE_VALUE))
    out = _Ids(len(vlo))
    ok = np.empty(len(vlo), np.uint8)
    native.traceparents(buf, np.ascontiguousarray(vlo), np.ascontiguousarray(vhi), out.trace, out.span, ok)
    out.ok = ok.view(bool)
    return out


def _b3_single(m: np.ndarray, length: np.ndarray) -> tuple[_Ids, np.ndarray]:
    """The ``b3`` header's ids, and which values say only a sampling decision (``0``,
    ``1``, ``d``: no ids, not malformed)."""
    out = _Ids(len(m))
    hexa = _HEX_ANY[m]
    for tl in (16, 32):
        s = tl + 1  # where the span id starts
        ok = (m[:, tl] == _DASH) & hexa[:, :tl].all(axis=1) & hexa[:, s : s + 16].all(axis=1)
        sampled = (m[:, s + 16] == _DASH) & _SAMPLED[m[:, s + 17]]
        parent = sampled & (m[:, s + 18] == _DASH) & hexa[:, s + 19 : s + 35].all(axis=1)
        ok &= (length == s + 16) | ((length == s + 18) & sampled) | ((length == s + 35) & parent)
        ok &= _nonzero_id(m[:, :tl]) & _nonzero_id(m[:, s : s + 16])
        ok &= ~out.ok
        rows = np.flatnonzero(ok)
        out.ok[rows] = True
        out.trace[rows] = _padded(m[rows], np.full(len(rows), tl), np.zeros(len(rows), np.int64), 32)
        out.span[rows] = _LOWER[m[rows, s : s + 16]]
    return out, (length == 1) & _SAMPLED[m[:, 0]]


def _b3_id(
    m: np.ndarray, length: np.ndarray, widths: tuple[int, ...], width: int
) -> tuple[np.ndarray, np.ndarray]:
    """``X-B3-TraceId`` (16 or 32 digits) or ``X-B3-SpanId`` (16): valid, and the id padded to ``width``."""
    inside = np.arange(m.shape[1]) < length[:, None]
    ok = np.isin(length, widths) & (_HEX_ANY[m] | ~inside).all(axis=1) & ((m != _ZERO) & inside).any(axis=1)
    ids = _padded(m, length, np.zeros(len(m), np.int64), width)
    return ok, ids


def _uber(m: np.ndarray, length: np.ndarray) -> _Ids:
    """Jaeger's ``{trace-id}:{span-id}:{parent-span-id}:{flags}``, hex of any width."""
    out = _Ids(len(m))
    colon = m == _COLON
    nth = np.cumsum(colon, axis=1)
    c1, c2, c3 = (np.argmax(colon & (nth == k), axis=1) for k in (1, 2, 3))
    inside = np.arange(m.shape[1]) < length[:, None]
    ok = (nth[:, -1] == 3) & (_HEX_ANY[m] | colon | ~inside).all(axis=1)
    ok &= (c1 >= 1) & (c1 <= 32) & (c2 - c1 - 1 >= 1) & (c2 - c1 - 1 <= 16)
    ok &= (c3 - c2 - 1 >= 1) & (c3 - c2 - 1 <= 16) & (length - c3 - 1 >= 1) & (length - c3 - 1 <= 2)
    trace = _padded(m, c1, np.zeros(len(m), np.int64), 32)
    span = _padded(m, c2, c1 + 1, 16)
    ok &= _nonzero_id(trace) & _nonzero_id(span)
    out.ok = ok
    out.trace[ok], out.span[ok] = trace[ok], span[ok]
    return out


def _grpc_trace_bin(values: list[bytes]) -> _Ids:
    """OpenCensus binary trace context, base64 (padding optional) or, after a NUL byte,
    raw (gRPC's true-binary metadata): version 0, then
    fields 0 (trace id, 16 bytes), 1 (span id, 8), 2 (options, 1); a field of another id
    ends what this version can read."""
    out = _Ids(len(values))
    for i, v in enumerate(values):
        if v[:1] == b"\x00":
            raw = v[1:]  # gRPC's "true binary" metadata, where both peers allow it: raw bytes
        else:
            try:
                raw = base64.b64decode(v + b"=" * (-len(v) % 4), validate=True)
            except (binascii.Error, ValueError):
                continue
        if not raw or raw[0] != 0:
            continue
        pos, trace, span = 1, b"", b""
        sizes = {0: 16, 1: 8, 2: 1}
        while pos < len(raw) and raw[pos] in sizes:
            fid, size = raw[pos], sizes[raw[pos]]
            value = raw[pos + 1 : pos + 1 + size]
            if len(value) < size:
                trace = b""  # a field cut short: the value is malformed
                break
            if fid == 0:
                trace = value
            elif fid == 1:
                span = value
            pos += 1 + size
        if not any(trace) or (span and not any(span)):  # no trace id, or an all-zero id
            continue
        out.ok[i] = True
        out.trace[i] = np.frombuffer(trace.hex().encode(), np.uint8)
        if span:
            out.span[i] = np.frombuffer(span.hex().encode(), np.uint8)
    return out


def _keys(
    n: int, msg: np.ndarray, name: np.ndarray, buf: np.ndarray, vlo: np.ndarray, vhi: np.ndarray,
    options: KeyOptions,
) -> RequestKeys:  # fmt: skip
    """The keys of ``n`` messages from the values found: value ``i`` of header
    ``options.names[name[i]]`` of message ``msg[i]`` is ``buf[vlo[i]:vhi[i]]``."""
    keys = RequestKeys.none(n)
    if not len(msg):
        return keys
    bad = np.zeros(n, np.int64)
    trace = np.zeros((n, 32), np.uint8)
    span = np.zeros((n, 16), np.uint8)
    done = np.zeros(n, bool)

    def values(header: str, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        sel = np.flatnonzero(name == options._index(header))
        m, length = _matrix(buf, vlo[sel], vhi[sel], width)
        return msg[sel], m, length

    def take(at: np.ndarray, ids: _Ids) -> None:
        np.add.at(bad, at[~ids.ok], 1)
        new = ids.ok & ~done[at]
        trace[at[new]], span[at[new]] = ids.trace[new], ids.span[new]
        done[at[new]] = True

    sel = np.flatnonzero(name == options._index("traceparent"))
    take(msg[sel], _traceparents(buf, vlo[sel], vhi[sel]))
    at, m, length = values("b3", 70)
    ids, sampling_only = _b3_single(m, length)
    ids.ok |= sampling_only
    ids.span[sampling_only] = 0
    take(at, ids)
    done[at[sampling_only]] = False  # a bare sampling decision names no trace
    # X-B3-TraceId, with its span from X-B3-SpanId when that one is valid.
    at, m, length = values("x-b3-traceid", 33)
    ok, tids = _b3_id(m, length, (16, 32), 32)
    s_at, s_m, s_len = values("x-b3-spanid", 17)
    s_ok, sids = _b3_id(s_m, s_len, (16,), 16)
    np.add.at(bad, s_at[~s_ok], 1)
    span_of = np.zeros((n, 16), np.uint8)
    span_of[s_at[s_ok]] = sids[s_ok]
    multi = _Ids(len(at))
    multi.ok, multi.trace, multi.span = ok, tids, span_of[at]
    take(at, multi)
    at, m, length = values("uber-trace-id", 72)
    take(at, _uber(m, length))
    sel = np.flatnonzero(name == options._index("grpc-trace-bin"))
    take(
        msg[sel],
        _grpc_trace_bin(
            [buf[a:b].tobytes() for a, b in zip(vlo[sel].tolist(), vhi[sel].tolist(), strict=True)]
        ),
    )
    tid = np.zeros(n, "S32")
    sid = np.zeros(n, "S16")
    if done.any():
        tid = _as_strings(trace, 32)
        sid = _as_strings(span, 16)
    rid, rid_bad = _request_ids(n, msg, name, buf, vlo, vhi, options)
    np.add.at(bad, rid_bad, 1)
    malformed = np.minimum(bad, 255).astype(np.uint8)
    return RequestKeys(tid, sid, rid, _kept(n, msg, name, buf, vlo, vhi, options), malformed)


def _request_ids(
    n: int, msg: np.ndarray, name: np.ndarray, buf: np.ndarray, vlo: np.ndarray, vhi: np.ndarray,
    options: KeyOptions,
) -> tuple[np.ndarray, int]:  # fmt: skip
    """Per message the first request-id header present, if it is 1-128 bytes of
    printable ASCII (``b""`` otherwise); and the messages whose one was not."""
    none = np.zeros(0, np.int64)
    if not options.request_id_headers:
        return np.zeros(n, "S1"), none
    rank = np.full(len(options.names), len(options.names), np.int64)
    for r, header in enumerate(options.request_id_headers):
        rank[options._index(header)] = min(rank[options._index(header)], r)
    cand = np.flatnonzero(rank[name] < len(options.names))
    if not len(cand):
        return np.zeros(n, "S1"), none
    # The first present: sorted by message, then rank, the first of each message.
    cand = cand[np.lexsort((rank[name[cand]], msg[cand]))]
    cand = cand[np.r_[True, msg[cand][1:] != msg[cand][:-1]]]
    length = vhi[cand] - vlo[cand]
    width = int(min(max(int(length.max()), 1), _MAX_REQUEST_ID))
    if native is not None:
        m = np.zeros((len(cand), width), np.uint8)
        ok = np.empty(len(cand), np.uint8)
        native.tokens(buf, np.ascontiguousarray(vlo[cand]), np.ascontiguousarray(vhi[cand]), m, ok)
        ok = ok.view(bool)
    else:
        m, _ = _matrix(buf, vlo[cand], np.minimum(vhi[cand], vlo[cand] + width), width)
        inside = np.arange(width) < length[:, None]
        ok = (length >= 1) & (length <= width) & (((m >= 0x20) & (m <= 0x7E)) | ~inside).all(axis=1)
    out = np.zeros(n, f"S{width}")
    out[msg[cand[ok]]] = _as_strings(m[ok], width)
    return out, msg[cand[~ok]]


def _kept(
    n: int, msg: np.ndarray, name: np.ndarray, buf: np.ndarray, vlo: np.ndarray, vhi: np.ndarray,
    options: KeyOptions,
) -> np.ndarray:  # fmt: skip
    """Per message None, or the values of ``keep_headers`` it carried (a step per value:
    only asked for)."""
    out = np.full(n, None, object)
    if not options.keep_headers:
        return out
    slot = {options._index(h): i for i, h in enumerate(options.keep_headers)}
    rows: dict[int, list[str | None]] = {}
    for t, j, a, b in zip(msg.tolist(), name.tolist(), vlo.tolist(), vhi.tolist(), strict=True):
        i = slot.get(j)
        if i is not None:
            rows.setdefault(t, [None] * len(slot))[i] = buf[a:b].tobytes().decode("utf-8", "replace")
    for t, vals in rows.items():
        out[t] = tuple(vals)
    return out

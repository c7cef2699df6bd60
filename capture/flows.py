"""TCP reassembly and message boundaries for whole batches of segments.

Segments are grouped into connections with sorts, not per-packet Python: a flow key
hashes the two endpoints in canonical order; within a flow, a new SYN (a sequence
number not seen before) starts a new connection, so a reused port pair is two
connections. A connection is processed once it is over (FIN both ways, RST, idle for
``idle_timeout_ns``, a newer connection on the same ports, or the end of input);
until then its segments are carried to the next batch, less its finished turns: those
no later packet can change are released at once (:meth:`FlowAssembler._release` says
when a turn is final), so a connection that stays open (a pooled HTTP, Redis or
PostgreSQL connection) holds back only its unfinished turn, and memory is bounded by
the open connections' unfinished turns, not by the file. The messages are the same
however the packets are batched.

Per direction, segments are ordered by sequence number: a segment wholly inside bytes
already seen is a retransmission (dropped, counted), a partial overlap is trimmed, a
hole is a gap (counted; it ends the current message). The client is the SYN's sender;
without a SYN, the SYN-ACK's receiver; without either, the peer of a well-known or
listening port, else of the lower port.

Messages: for connections whose protocol is recognized by content
(:func:`capture.protocols.detect_tcp`) the protocol parser splits each direction's
byte stream; otherwise the turn-taking rule applies: a run of client-to-server bytes is
a call, the server's answer its return, ``id = connection << 24 | turn``. UDP datagrams
are ``send`` messages, except DNS (call/return by the QR bit, id from the transaction
id). A message's timestamp is its first packet's. Messages are in trace order: by time, then
flow id; messages of one flow with one timestamp in the order the flow produced them (see
:func:`trace_order`), so the order does not depend on how packets were batched.

What one connection gives depends on its own packets and on two things learnt from all
of them, batch by batch, at :meth:`FlowAssembler.feed`: the capture clock (the latest TCP
timestamp, for idleness) and the listening endpoints (the destinations of SYNs, to
orient connections seen without a handshake). So the flows can be split among several
assemblers (:func:`flow_shards`), each fed its share of every batch with the whole batch
as ``context``, and together they give what one assembler gives.
"""

from __future__ import annotations

import copy
import dataclasses
from collections import Counter
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from capture._http1 import check_turns, starts_with_method
from capture._spans import join_spans
from capture.decode import PROTO_TCP, PROTO_UDP, Segments, empty_segments
from capture.protocols import (
    DNS_PORTS,
    FOUND_HEADERS,
    NO_REPLY,
    NOT_DNS_PORTS,
    REQUEST_METHODS,
    WANT_HEADERS,
    ReturnLabel,
    detect_tcp,
    dns_rcode,
    parse_dns_datagram,
    parse_stream,
    protocol_codes,
    protocol_names,
    protocols_with_statuses,
    request_lines_are_http,
    tls_records,
    tls_server_name,
)
from capture.request_keys import KeyOptions, RequestKeys, header_keys, http1_keys
from tracefmt.hashing import mix64

__all__ = ["FlowAssembler", "FlowStats", "Messages", "flow_shards", "trace_order"]

_FIN, _SYN, _RST, _ACK = 0x01, 0x02, 0x04, 0x10
# How far behind a closed connection's end a late copy may start: a TCP window. A new
# connection on the same ports without a SYN in the capture is taken for late copies
# only if both its directions start that close behind the old ends (about 1 in 2^32).
_LATE_WINDOW = 1 << 16
# Where a direction's bytes start counting when neither a SYN nor released turns say: at
# its first byte in sequence order.
_FROM_FIRST = np.iinfo(np.int64).min
# An open connection this old (capture time) is worth a try at releasing its finished turns.
_LONG_LIVED_NS = 1_000_000_000


def _seq_diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a - b`` for 32-bit sequence numbers that may have wrapped (RFC 1982): within
    plus or minus 2^31."""
    return ((a - b + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def _seq_end(s: Segments, flags: np.ndarray) -> np.ndarray:
    """Where each segment's sequence space ends (its data, and one for a SYN or FIN)."""
    extra = ((flags & (_SYN | _FIN)) != 0).astype(np.int64)
    return (s.seq.astype(np.int64) + s.pay_len.astype(np.int64) + extra) & 0xFFFFFFFF


_WELL_KNOWN_PORTS = np.array(
    sorted({*range(1, 1024), 1433, 1521, 2181, 3306, 5432, 5672, 6379, 8080, 8443, 9042, 9090, 9092, 9200,
            11211, 27017, 50051}),
    np.uint16,
)  # fmt: skip
_WELL_KNOWN_PORT = np.zeros(1 << 16, bool)  # by port number
_WELL_KNOWN_PORT[_WELL_KNOWN_PORTS] = True


@dataclass
class FlowStats:
    """Counts kept by the assembler."""

    connections: int = 0
    retransmitted: int = 0
    # Segments of a connection closed in an earlier batch (its last ACK, a late copy).
    after_close: int = 0
    gaps: int = 0
    out_of_order: int = 0
    unparsed_bytes: int = 0
    #: Messages that carried a trace id, a request id (``capture.request_keys``), and the
    #: header values of request keys that did not follow their grammar (skipped).
    with_trace_id: int = 0
    with_request_id: int = 0
    keys_malformed: int = 0
    flows_by_proto: Counter = field(default_factory=Counter)
    messages_by_proto: Counter = field(default_factory=Counter)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "connections": self.connections,
            "retransmitted": self.retransmitted,
            "after_close": self.after_close,
            "gaps": self.gaps,
            "out_of_order": self.out_of_order,
            "unparsed_bytes": self.unparsed_bytes,
            "with_trace_id": self.with_trace_id,
            "with_request_id": self.with_request_id,
            "keys_malformed": self.keys_malformed,
            "flows_by_proto": dict(sorted(self.flows_by_proto.items())),
            "messages_by_proto": dict(sorted(self.messages_by_proto.items())),
        }


@dataclass(frozen=True)
class Messages:
    """Messages as columns. ``op``: 0 call, 1 return, 2 send; ``id`` valid where ``has_id``."""

    ts_ns: np.ndarray
    src_hi: np.ndarray
    src_lo: np.ndarray
    sport: np.ndarray
    dst_hi: np.ndarray
    dst_lo: np.ndarray
    dport: np.ndarray
    op: np.ndarray
    id: np.ndarray
    has_id: np.ndarray
    nbytes: np.ndarray
    flow: np.ndarray
    proto: np.ndarray  # index into capture.protocols.protocol_names()
    label: np.ndarray  # object: str or None
    payload: np.ndarray  # object: the message's captured bytes, or None unless asked for
    # Where the client endpoint is the sender (calls) or the receiver (returns): the server side.
    server_is_dst: np.ndarray
    #: object: a return's status where its protocol gives one (an HTTP status code), else None.
    status: np.ndarray | None = None
    #: The request keys the message carried (``capture.request_keys``): ``S`` arrays, ``b""``
    #: for none; ``headers`` None or the values of the headers kept (a tuple).
    trace_id: np.ndarray | None = None
    span_id: np.ndarray | None = None
    request_id: np.ndarray | None = None
    headers: np.ndarray | None = None
    #: uint8: how many of the message's request-key header values were malformed.
    keys_malformed: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.ts_ns)
        if self.status is None:  # protocols without a status
            object.__setattr__(self, "status", np.full(n, None, object))
        for name in ("trace_id", "span_id", "request_id"):
            if getattr(self, name) is None:  # one byte each: most messages carry no key
                object.__setattr__(self, name, np.zeros(n, "S1"))
        if self.headers is None:
            object.__setattr__(self, "headers", np.full(n, None, object))
        if self.keys_malformed is None:
            object.__setattr__(self, "keys_malformed", np.zeros(n, np.uint8))

    def with_keys(self, keys: RequestKeys) -> Messages:
        """These messages with ``keys`` (one per message)."""
        return dataclasses.replace(
            self, trace_id=keys.trace_id, span_id=keys.span_id, request_id=keys.request_id,
            headers=keys.headers, keys_malformed=keys.malformed,
        )  # fmt: skip

    def __len__(self) -> int:
        return len(self.ts_ns)

    def take(self, idx: np.ndarray | slice) -> Messages:
        """The messages at ``idx`` (an index array or a slice)."""
        return Messages(**{k: getattr(self, k)[idx] for k in _MSG_FIELDS})

    @staticmethod
    def concat(parts: list[Messages]) -> Messages:
        """All messages of ``parts`` in trace order (:func:`trace_order`; stable)."""
        parts = [p for p in parts if len(p)]
        if not parts:
            return _empty_messages()
        if len(parts) == 1 and _in_trace_order(parts[0].ts_ns, parts[0].flow):
            return parts[0]  # a stable sort would keep it as it is
        cols = {k: np.concatenate([getattr(p, k) for p in parts]) for k in _MSG_FIELDS}
        return Messages(**cols).take(trace_order(cols["ts_ns"], cols["flow"]))


_MSG_FIELDS = tuple(Messages.__dataclass_fields__)


def trace_order(ts_ns: np.ndarray, flow: np.ndarray) -> np.ndarray:
    """The stable order by (timestamp, flow): the order of a trace's messages.

    Messages of different flows with one timestamp are ordered by flow id, not by when
    they were produced, which depends on batching (when a connection is over); within a
    flow the order is the flow's own. A stable sort by time, with only the rows that
    share a timestamp sorted again, is several times faster than a two-key sort.

    Examples
    --------
    >>> import numpy as np
    >>> trace_order(np.array([5, 3, 5, 5]), np.array([9, 1, 2, 9], np.uint64)).tolist()
    [1, 2, 0, 3]
    """
    o = np.argsort(ts_ns, kind="stable")
    t = ts_ns[o]
    tie = t[1:] == t[:-1]
    if not tie.any():
        return o
    f = flow[o]
    if not (tie & (f[1:] < f[:-1])).any():
        return o
    in_tie = np.zeros(len(o), bool)
    in_tie[1:] |= tie
    in_tie[:-1] |= tie
    idx = np.flatnonzero(in_tie)
    o[idx] = o[idx][np.lexsort((f[idx], t[idx]))]  # runs of one time stay where they are
    return o


def _in_trace_order(ts_ns: np.ndarray, flow: np.ndarray) -> bool:
    d = np.diff(ts_ns)
    return bool(((d > 0) | ((d == 0) & (flow[1:] >= flow[:-1]))).all())


def _at_segments(s: Segments, seg: np.ndarray | slice, **fields: np.ndarray) -> Messages:
    """Messages whose time and endpoints are those of segments ``seg`` of ``s``."""
    ends = ("ts_ns", "src_hi", "src_lo", "sport", "dst_hi", "dst_lo", "dport")
    return Messages(**{k: getattr(s, k)[seg] for k in ends}, **fields)


def return_statuses(labels: np.ndarray, is_return: np.ndarray, proto: np.ndarray) -> np.ndarray:
    """Per message, its status: what the label a return's own bytes gave it says, where
    its protocol (``proto``, numbers of :func:`capture.protocols.protocol_names`) is one
    whose parser labels returns by their status (``Protocol.statuses``): the label itself
    (the HTTP status code, ``OK`` or ``ERROR 42P01``, a DNS RCODE, a Redis error's prefix)
    or, for a label that is its call's, its ``status`` (``capture.protocols.ReturnLabel``:
    HTTP/2's ``:status``, gRPC's ``grpc-status`` by name); else None. The caller then
    labels each return like its call.

    Examples
    --------
    >>> from capture.protocols import ReturnLabel
    >>> labels = np.array(["GET /a", "200", "503", None, "getUser", ReturnLabel("POST /s.S/M", "OK")], object)
    >>> proto = np.array([0, 0, 0, 0, 6, 7], np.int8)  # http, a Thrift reply (no status), http2
    >>> return_statuses(labels, np.array([False, True, True, True, True, True]), proto).tolist()
    [None, '200', '503', None, None, 'OK']
    """
    keep = is_return & np.array(protocols_with_statuses(), bool)[proto]
    out = np.where(keep, labels, None)
    at = np.flatnonzero(keep)
    out[at] = [label.status if type(label) is ReturnLabel else label for label in out[at].tolist()]
    return out


def _empty_messages() -> Messages:
    z = np.zeros(0, np.int64)
    u = np.zeros(0, np.uint64)
    return Messages(
        ts_ns=z,
        src_hi=u,
        src_lo=u,
        sport=np.zeros(0, np.uint16),
        dst_hi=u,
        dst_lo=u,
        dport=np.zeros(0, np.uint16),
        op=np.zeros(0, np.int8),
        id=u,
        has_id=np.zeros(0, bool),
        nbytes=z,
        flow=u,
        proto=np.zeros(0, np.int8),
        label=np.zeros(0, object),
        payload=np.zeros(0, object),
        server_is_dst=np.zeros(0, bool),
    )


@dataclass(frozen=True)
class _Kept:
    """Kept data segments of some connections, in stream order: each one's segment
    index ``di``, connection ``kp`` and direction ``kd`` (0 from the client), payload
    length ``klen`` and captured length ``kcap``, whether it starts a run of
    contiguous bytes (``run_start``: a direction's first segment here, and one after
    a hole or a cut-short segment), whether bytes before it are missing or cut short
    (``gap``: never at a connection's first byte), and where its bytes start in the
    joined stream (``sstart``)."""

    di: np.ndarray
    kp: np.ndarray
    kd: np.ndarray
    klen: np.ndarray
    run_start: np.ndarray
    sstart: np.ndarray
    kcap: np.ndarray
    gap: np.ndarray

    def take(self, idx: np.ndarray) -> _Kept:
        """The segments ``idx`` of these."""
        return _Kept(**{f.name: getattr(self, f.name)[idx] for f in fields(self)})


_GONE = np.iinfo(np.int64).min  # the close time of an entry dropped before its time
_FIRST_LEVEL = 1 << 12  # entries of the smallest level; each next level holds 8 times more


class _Closed:
    """Connections closed (FIN both ways or RST) in an earlier batch, to know a late
    retransmission of theirs from a new connection on the same ports: per flow key
    (sorted), the next sequence number each way (-1 unknown) and the close time.

    Arrays, not a dict of tuples: connections of one call each close by the hundred
    thousand a minute, and each is kept for the idle timeout (32 bytes each here). A
    live capture of short connections keeps millions and reads many small batches a
    second, so a batch must not copy the store: sorted levels of growing size (a
    log-structured merge), a batch's closes merged into the smallest, a full level into
    the next; what was forgotten (by time, or dropped) is only invisible (:meth:`find`
    looks past it) until its level is merged.
    """

    def __init__(self) -> None:
        self._levels: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # smallest first
        self._cutoff = _GONE + 1  # entries closed before this are forgotten

    def __len__(self) -> int:
        return sum(len(level[0]) for level in self._levels)

    def add(self, key: np.ndarray, end: np.ndarray, at: np.ndarray) -> None:
        """Note connections that closed; a key closed again keeps its newest entry."""
        if not len(key):
            return
        order = np.argsort(key, kind="stable")  # the newest of a key last
        key, end, at = key[order].astype(np.uint64), end[order], at[order]
        newest = np.r_[key[1:] != key[:-1], True]
        key, end, at = key[newest], end[newest], at[newest]
        self.drop(self.find(key))  # closed again: the older entry goes
        carry = (key, end, at)
        for i, level in enumerate(self._levels):
            merged = _merged(self._alive(level), carry)
            if len(merged[0]) <= _FIRST_LEVEL << (3 * i):
                self._levels[i] = merged
                return
            self._levels[i], carry = (_NO_CLOSED, merged)  # full: on to the next level
        self._levels.append(carry)

    def _alive(self, level: tuple[np.ndarray, np.ndarray, np.ndarray]) -> tuple:
        keep = level[2] >= self._cutoff
        return level if keep.all() else tuple(x[keep] for x in level)

    def forget(self, before_ns: int) -> None:
        """Forget the connections closed before ``before_ns`` (it only grows)."""
        self._cutoff = max(self._cutoff, before_ns)

    def find(self, keys: np.ndarray) -> np.ndarray:
        """Each key's row (an index over all levels), -1 where it is not here."""
        rows = np.full(len(keys), -1, np.int64)
        base = 0
        for key, _, at in self._levels:
            if len(key):
                i = np.minimum(np.searchsorted(key, keys), len(key) - 1)
                hit = (key[i] == keys) & (at[i] >= self._cutoff)
                rows = np.where(hit, base + i, rows)
            base += len(key)
        return rows

    def _place(self, row: int) -> tuple[int, int]:
        for k, level in enumerate(self._levels):
            if row < len(level[0]):
                return k, row
            row -= len(level[0])
        raise IndexError(row)

    def entry(self, row: int) -> tuple[tuple[int, int], int]:
        """The sequence ends (from a, from b) and the close time of a row :meth:`find` gave."""
        k, r = self._place(row)
        _, end, at = self._levels[k]
        return tuple(end[r].tolist()), int(at[r])

    def drop(self, rows: np.ndarray) -> None:
        """Forget ``rows`` (from :meth:`find`; -1 ignored)."""
        base = 0
        for _, _, at in self._levels:
            mine = rows[(rows >= base) & (rows < base + len(at))]
            at[mine - base] = _GONE
            base += len(at)


_NO_CLOSED = (np.zeros(0, np.uint64), np.zeros((0, 2), np.int64), np.zeros(0, np.int64))


def _merged(a: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    """Two (key, end, at) levels sorted by key, as one (``b`` inserted into ``a``)."""
    if not len(b[0]):
        return a
    if not len(a[0]):
        return b
    pos = np.searchsorted(a[0], b[0])
    return np.insert(a[0], pos, b[0]), np.insert(a[1], pos, b[1], axis=0), np.insert(a[2], pos, b[2])


@dataclass
class _Open:
    """What the released turns of a connection still open leave to its later ones.

    Directions are 0 (from the client) and 1 (back); ways ``a`` and ``b`` those of the
    flow key's two endpoints (:func:`_flow_keys`)."""

    flow_id: int
    client_is_a: bool
    proto: str
    base: tuple[int, int]  # each direction's sequence origin
    end: tuple[int, int]  # the bytes released each direction, from its origin
    trunc: tuple[bool, bool]  # the last released segment of a direction was cut short
    calls: int  # calls numbered so far
    ctx: dict  # the protocol parser's state
    syn_seq: int  # the SYN's sequence number, -1 without one
    fin: tuple[bool, bool]  # a FIN seen from a, from b
    way_end: tuple[int, int]  # where each way's sequence space ends so far (a, b; -1 unknown)
    # A protocol parser read its turns (HTTP turns checked in bulk did not all check
    # out), so it reads the later ones too, as it would read the whole connection; and
    # paired them by key and time (a protocol id or a gap), so it pairs the later ones so.
    parser: bool = False
    by_key: bool = False


@dataclass(frozen=True)
class _Pieces:
    """TCP segments by connection (a flow key's segments from one SYN to the next), each
    connection's in the order they came, with what its released turns left (``opened``)."""

    s: Segments
    key: np.ndarray
    from_a: np.ndarray
    piece: np.ndarray  # connection of each segment
    starts: np.ndarray  # first segment of each connection
    opened: np.ndarray  # object: an _Open or None per connection
    cont: np.ndarray  # per connection: it continues released turns

    @property
    def count(self) -> int:
        return len(self.starts)

    def take(self, sel: np.ndarray) -> _Pieces:
        """The segments ``sel`` (ascending) and their connections."""
        p = self.piece[sel]
        new = np.r_[True, p[1:] != p[:-1]] if len(p) else np.zeros(0, bool)
        starts = np.flatnonzero(new)
        old = p[starts]
        return _Pieces(self.s.take(sel), self.key[sel], self.from_a[sel], np.cumsum(new) - 1, starts,
                       self.opened[old], self.cont[old])  # fmt: skip

    def carried(self, name: str, default: Any, dtype: Any) -> np.ndarray:
        """Per connection, ``name`` of what its released turns left, else ``default``."""
        if not self.cont.any():
            return np.full((self.count, 2) if isinstance(default, tuple) else self.count, default, dtype)
        vals = [default if o is None else getattr(o, name) for o in self.opened.tolist()]
        out = np.array(vals, dtype)
        return out.reshape(len(vals), 2) if isinstance(default, tuple) else out


@dataclass(frozen=True)
class _ConnectionBatch:
    """Connections ready to be cut into messages: their kept data segments (``kept``,
    in stream order) and captured bytes (``stream``, each direction's back to back),
    and per connection its id, its orientation, its first segment in ``s``, and what
    its released turns left: whether there are some (``cont``), the calls they
    numbered, the parser's state (``ctxs``), whether a parser read them (``parser``)
    and paired them by key and time (``by_key``)."""

    s: Segments
    kept: _Kept
    stream: bytes
    from_a: np.ndarray  # per segment of ``s``
    flow_ids: np.ndarray
    client_is_a: np.ndarray
    starts: np.ndarray
    cont: np.ndarray
    calls: np.ndarray
    ctxs: list[dict]
    parser: np.ndarray
    by_key: np.ndarray

    @property
    def count(self) -> int:
        return len(self.starts)


@dataclass(frozen=True)
class _Reassembly:
    """Per connection of a :meth:`FlowAssembler._reassemble`: the counters, whether a
    hole or a segment out of order leaves its bytes open to a later packet (``loose``),
    and per direction (``2 * connection + direction``) its sequence origin, where its
    bytes end, and whether the last segment was cut short."""

    retransmitted: np.ndarray
    gaps: np.ndarray
    out_of_order: np.ndarray
    loose: np.ndarray
    base: np.ndarray
    end: np.ndarray
    trunc: np.ndarray


@dataclass(frozen=True)
class _ParsedRows:
    """Messages the protocol parsers found, a row each: connection ``piece``, direction
    ``dirs`` (0 from the client), stream offset ``off`` and ``length``, the parser's
    ``label`` and ``key`` (a call id, ``NO_REPLY`` or None), and whether it is the
    first after a hole in its direction (``after_gap``); the header fields a parser gave
    (``headers``: HTTP/2's, when request keys are read; else None)."""

    piece: np.ndarray
    dirs: np.ndarray
    off: np.ndarray
    length: np.ndarray
    label: np.ndarray  # object
    key: list[int | None]
    after_gap: np.ndarray
    headers: list[list[tuple[bytes, bytes]] | None]

    def __len__(self) -> int:
        return len(self.piece)

    @staticmethod
    def of(rows: list[tuple]) -> _ParsedRows:
        """From ``(piece, direction, offset, length, label, key, after_gap, headers)`` tuples."""
        label = np.full(len(rows), None, object)
        label[:] = [r[4] for r in rows]
        return _ParsedRows(
            piece=np.array([r[0] for r in rows], np.int64), dirs=np.array([r[1] for r in rows], np.int64),
            off=np.array([r[2] for r in rows], np.int64), length=np.array([r[3] for r in rows], np.int64),
            label=label, key=[r[5] for r in rows], after_gap=np.array([r[6] for r in rows], bool),
            headers=[r[7] for r in rows],
        )  # fmt: skip


@dataclass(frozen=True)
class _Pairs:
    """Per parsed message what pairing decides: ``op``, ``mid`` (its id), ``has`` (whether
    it has one), and ``labels`` (a return takes its call's)."""

    op: np.ndarray
    mid: np.ndarray
    has: np.ndarray
    labels: np.ndarray

    @staticmethod
    def empty(rows: _ParsedRows) -> _Pairs:
        m = len(rows)
        return _Pairs(np.zeros(m, np.int8), np.zeros(m, np.uint64), np.zeros(m, bool), rows.label.copy())


@dataclass(frozen=True)
class _Parsed:
    """What the protocol parsers gave a batch: the messages and their rows, and per
    connection whether it fell back to the turn-taking rule, whether its turns can go on
    from here (``clean``: every byte used, a message each way, every call answered),
    whether they were paired by key and time, and the bytes after the last message of
    its runs."""

    msgs: Messages
    rows: _ParsedRows
    fallback: np.ndarray
    clean: np.ndarray
    by_key: np.ndarray
    unparsed: np.ndarray

    @staticmethod
    def nothing(count: int) -> _Parsed:
        no = np.zeros(count, bool)
        return _Parsed(_empty_messages(), _ParsedRows.of([]), no, no, no, np.zeros(count, np.int64))


@dataclass(frozen=True)
class _Paths:
    """Per connection of a batch, after the protocol paths: its protocol, whether its turns
    can go on from a cut (``clean``), whether a parser read it (``parsed``) and paired
    its messages by key and time (``by_key``), the bytes no parser used; and the
    parsers' rows."""

    protos: np.ndarray
    clean: np.ndarray
    parsed: np.ndarray
    by_key: np.ndarray
    unparsed: np.ndarray
    rows: _ParsedRows


@dataclass(frozen=True)
class _Outcome:
    """Per connection of a :meth:`FlowAssembler._messages`: its id, protocol, counters,
    whether it had data (``counted``: data and no turn released before, so it is
    counted in ``flows_by_proto`` now), and, when asked, where its turns may be cut
    (``cut``) or whether they may be released and what they leave (``opened``)."""

    flow_ids: np.ndarray
    protos: np.ndarray
    counted: np.ndarray
    retransmitted: np.ndarray
    gaps: np.ndarray
    out_of_order: np.ndarray
    unparsed: np.ndarray
    cut: np.ndarray | None = None
    opened: list[_Open | None] | None = None


def _tls_segments(
    kp: np.ndarray, kd: np.ndarray, run_start: np.ndarray, sstart: np.ndarray, kcap: np.ndarray, stream: bytes
) -> tuple[np.ndarray, np.ndarray, dict[int, str]]:
    """Per segment of TLS connections (grouped by connection and direction, in sequence
    order): the content type of the record a segment starts (0 when it starts inside
    one), whether it holds nothing but alerts, and each connection's server name.

    The records are walked per gap-free run (a loop per record, not per packet: records
    hold up to 16 KB); an encrypted alert (TLS 1.3 hides its type) is told by its size,
    19 bytes, as the last record of its direction.
    """
    n = len(kp)
    first_type = np.zeros(n, np.int16)
    alert = np.zeros(n, bool)
    names: dict[int, str] = {}
    grp = kp * 2 + kd
    new_run = np.r_[True, grp[1:] != grp[:-1]] | run_start
    bounds = np.flatnonzero(new_run)
    for a, b in zip(bounds.tolist(), np.r_[bounds[1:], n].tolist(), strict=True):
        lo, hi = int(sstart[a]), int(sstart[b - 1] + kcap[b - 1])
        records = tls_records(stream[lo:hi])
        if not records:
            continue
        offs = np.array([lo + r[0] for r in records], np.int64)
        types = np.array([r[1] for r in records], np.int16)
        ends = offs + 5 + np.array([r[2] for r in records], np.int64)
        seg_lo, seg_hi = sstart[a:b], sstart[a:b] + kcap[a:b]
        at = np.searchsorted(offs, seg_lo)
        starts = (at < len(offs)) & (offs[np.minimum(at, len(offs) - 1)] == seg_lo)
        first_type[a:b] = np.where(starts, types[np.minimum(at, len(offs) - 1)], 0)
        # Records wholly inside each segment: all alerts, or one last 19-byte one.
        last = np.searchsorted(offs, seg_hi) - 1
        for j in range(b - a):
            if not starts[j] or ends[last[j]] != seg_hi[j]:
                continue
            inner = types[at[j] : last[j] + 1]
            sizes = ends[at[j] : last[j] + 1] - offs[at[j] : last[j] + 1] - 5
            closing = len(inner) == 1 and inner[0] == 23 and sizes[0] == 19 and last[j] == len(offs) - 1
            alert[a + j] = bool((inner == 21).all() or closing)
        if kd[a] == 0 and types[0] == 22 and int(kp[a]) not in names:
            name = tls_server_name(stream[offs[0] : ends[0]])
            if name:
                names[int(kp[a])] = name
    return first_type, alert, names


#: Multicast DNS between its own ports: messages to the group, not calls and returns.
_MDNS_PORT = 5353


def _dns_headers(s: Segments) -> np.ndarray:
    """Datagrams whose first 13 bytes could start a DNS message asking one question about
    a host name (the header's counts and flags, the first label's length), found by
    vectorized reads: only these are parsed whole, whatever their port."""
    cap = s.pay_cap
    ok = cap >= 17
    if not ok.any():
        return ok
    last = max(len(s.data) - 1, 0)

    def byte(k: int) -> np.ndarray:
        return s.data[np.minimum(s.pay_off + k, last)].astype(np.int64)

    def word(k: int) -> np.ndarray:
        return (byte(k) << 8) | byte(k + 1)

    flags, qd, an, ns = word(2), word(4), word(6), word(8)
    opcode = (flags >> 11) & 0xF
    query = (flags & 0x8000) == 0
    ok &= (qd == 1) & np.isin(opcode, (0, 1, 2, 4, 5)) & ((flags & 0x0040) == 0)
    ok &= ~query | (opcode != 0) | ((an == 0) & (ns == 0) & ((flags & 0xF) == 0))
    first = byte(12)
    return ok & (first >= 1) & (first <= 63)


def _flow_keys(s: Segments) -> tuple[np.ndarray, np.ndarray]:
    """(flow key, sent by the canonical first endpoint) of each segment."""
    lt = (s.src_hi < s.dst_hi) | (
        (s.src_hi == s.dst_hi) & ((s.src_lo < s.dst_lo) | ((s.src_lo == s.dst_lo) & (s.sport <= s.dport)))
    )
    a_hi = np.where(lt, s.src_hi, s.dst_hi)
    a_lo = np.where(lt, s.src_lo, s.dst_lo)
    b_hi = np.where(lt, s.dst_hi, s.src_hi)
    b_lo = np.where(lt, s.dst_lo, s.src_lo)
    ports = (np.where(lt, s.sport, s.dport).astype(np.uint64) << np.uint64(16)) | np.where(
        lt, s.dport, s.sport
    ).astype(np.uint64)
    ports |= s.proto.astype(np.uint64) << np.uint64(32)
    key = mix64(a_hi ^ mix64(a_lo ^ mix64(b_hi ^ mix64(b_lo ^ mix64(ports)))))
    return key, lt


def flow_shards(segs: Segments, shards: int) -> np.ndarray:
    """The shard (``0 .. shards - 1``) of each segment's flow: both directions of a
    connection, and every later packet of it, fall in one shard.

    Examples
    --------
    >>> from capture.decode import empty_segments
    >>> flow_shards(empty_segments(), 3).tolist()
    []
    """
    key, _ = _flow_keys(segs)
    return (key % np.uint64(shards)).astype(np.int64)


def _first_in_group(starts: np.ndarray, cond: np.ndarray, n: int) -> np.ndarray:
    """Per group (given its start indices), the first index where ``cond`` holds, or -1."""
    big = np.iinfo(np.int64).max
    idx = np.where(cond, np.arange(n), big)
    first = np.minimum.reduceat(idx, starts) if n else np.zeros(0, np.int64)
    return np.where(first == big, -1, first)


class FlowAssembler:
    """Turn decoded segments into messages, batch by batch, carrying open connections.

    Parameters
    ----------
    idle_timeout_ns : int
        A connection with no packet for this long (capture time) is processed as over.
    max_carry : int
        A connection holding more segments than this is processed without waiting for
        its end (its later packets form a new connection record).

    Examples
    --------
    >>> from capture.decode import Decoder
    >>> from capture.source import PacketBatch
    >>> import dpkt
    >>> def seg(ts, sport, dport, seq, flags, data=b""):
    ...     t = dpkt.tcp.TCP(sport=sport, dport=dport, seq=seq, flags=flags, data=data)
    ...     ip = dpkt.ip.IP(src=bytes([10, 0, 0, 1 if sport > 1024 else 2]),
    ...                     dst=bytes([10, 0, 0, 2 if sport > 1024 else 1]), p=6, data=t)
    ...     ip.len = len(bytes(ip))
    ...     return (ts, bytes(ip))
    >>> pk = [seg(0, 40000, 80, 99, 2), seg(1, 80, 40000, 500, 0x12),
    ...       seg(2, 40000, 80, 100, 0x18, b"GET / HTTP/1.1\\r\\n\\r\\n"),
    ...       seg(3, 80, 40000, 501, 0x18, b"HTTP/1.1 200 OK\\r\\nContent-Length: 0\\r\\n\\r\\n")]
    >>> fa = FlowAssembler()
    >>> m = fa.feed(Decoder().decode(PacketBatch.from_packets(pk, linktype=101)), final=True)
    >>> m.op.tolist(), m.ts_ns.tolist(), [protocol_names()[p] for p in m.proto], list(m.label)
    ([0, 1], [2, 3], ['http', 'http'], ['GET /', 'GET /'])
    """

    def __init__(
        self,
        *,
        idle_timeout_ns: int = 60_000_000_000,
        max_carry: int = 1 << 17,
        keep_payload: bool = False,
        keys: KeyOptions | None = None,
    ) -> None:
        self.keep_payload = keep_payload
        #: Which request keys HTTP messages give (``capture.request_keys``); None reads none.
        self.keys = keys
        self.idle_timeout_ns = idle_timeout_ns
        self.max_carry = max_carry
        self.stats = FlowStats()
        self._pending = empty_segments()
        self._udp_flows: dict[int, int] = {}
        # Learnt from every segment fed (or given as context), whatever its flow:
        # destinations of SYNs, and the capture clock (latest TCP timestamp) now and
        # before the last batch.
        self._listening: set[int] = set()
        self._clock: int | None = None
        self._clock_before: int | None = None
        # Connections closed in an earlier batch. Forgotten by time (``_forget_closed``),
        # not by count, so what one connection's entry does never depends on how many
        # others closed.
        self._closed = _Closed()
        # Connections still open whose first turns were released: flow key -> what those
        # left (see _release); and open ones whose turns could not be released yet: flow
        # key -> the segments they must hold before the next try.
        self._open: dict[int, _Open] = {}
        self._retry: dict[int, int] = {}

    @property
    def watermark_ns(self) -> int | None:
        """No message still to come is older than this (None: nothing is pending)."""
        # Messages start at data segments: a pending connection's future messages are no older
        # than its first pending data segment (or than packets still to be read).
        data = self._pending.pay_len > 0
        return int(self._pending.ts_ns[data].min()) if data.any() else None

    def feed(self, segs: Segments, *, final: bool = False, context: Segments | None = None) -> Messages:
        """Messages completed by ``segs`` (all remaining ones when ``final``).

        ``context``: the whole batch when ``segs`` is only this assembler's share of it
        (the flows of one :func:`flow_shards` shard); what is learnt from all flows
        (the capture clock, listening endpoints) is learnt from it. Each batch is fed
        once, with its context.
        """
        self._learn(segs if context is None else context)
        self._forget_closed()
        tcp = segs.proto == PROTO_TCP
        parts = []
        udp = ~tcp & (segs.proto == PROTO_UDP)
        if udp.any():
            parts.append(self._udp(segs.take(np.flatnonzero(udp))))
        both = (
            Segments.concat([self._pending, segs.take(np.flatnonzero(tcp))]) if tcp.any() else self._pending
        )
        self._pending = empty_segments()
        if len(both):
            parts.append(self._tcp(both, final))
        return Messages.concat(parts)

    def _learn(self, segs: Segments) -> None:
        """The capture clock and the listening endpoints (a SYN's destination), from a batch."""
        self._clock_before = self._clock
        tcp = segs.proto == PROTO_TCP
        if not tcp.any():
            return
        latest = int(segs.ts_ns[tcp].max())
        self._clock = latest if self._clock is None else max(self._clock, latest)
        syn = tcp & ((segs.flags & _SYN) != 0) & ((segs.flags & _ACK) == 0)
        if syn.any():
            self._listening.update(mix64(segs.dst_lo[syn] ^ segs.dport[syn].astype(np.uint64)).tolist())

    def _forget_closed(self) -> None:
        """Drop the closed connections whose late copies can no longer come: closed more
        than the idle timeout before the clock as it was before this batch (a segment
        that late starts a new connection, see ``_late_copies``)."""
        if self._clock_before is None:
            return
        self._closed.forget(self._clock_before - self.idle_timeout_ns)

    # ---- UDP --------------------------------------------------------------------------------
    def _udp(self, s: Segments) -> Messages:
        n = len(s)
        key, _ = _flow_keys(s)
        flow = mix64(key) >> np.uint64(24)
        new = np.setdiff1d(np.unique(key), np.fromiter(self._udp_flows, np.uint64, len(self._udp_flows)))
        self._udp_flows.update(dict.fromkeys(new.tolist(), 0))
        self.stats.flows_by_proto["udp"] += len(new)
        op = np.full(n, 2, np.int8)
        mid = np.zeros(n, np.uint64)
        has = np.zeros(n, bool)
        proto = np.full(n, protocol_codes()["udp"], np.int8)
        label = np.full(n, None, object)
        own = np.full(n, None, object)  # what a response's own header says: its status
        server_is_dst = s.dport <= s.sport
        known = np.isin(s.sport, DNS_PORTS) | np.isin(s.dport, DNS_PORTS)
        other = np.isin(s.sport, NOT_DNS_PORTS) | np.isin(s.dport, NOT_DNS_PORTS)
        dns = np.flatnonzero(known | (_dns_headers(s) & ~other))
        for i in dns.tolist():  # DNS messages are few; each needs its name decoded anyway
            cut = bool(s.pay_cap[i] < s.pay_len[i])
            parsed = parse_dns_datagram(s.payload(i), any_port=not known[i], cut=cut)
            if parsed is None:
                continue
            is_resp, txid, lab = parsed
            proto[i] = protocol_codes()["dns"]
            label[i] = lab
            if is_resp:
                own[i] = dns_rcode(s.payload(i))
            if s.sport[i] == s.dport[i] == _MDNS_PORT:
                continue  # multicast DNS: queries and announcements to the group, sends
            op[i] = 1 if is_resp else 0
            mid[i] = (int(flow[i]) << 24) | txid
            has[i] = True
            server_is_dst[i] = not is_resp
        for p in np.unique(proto).tolist():
            self.stats.messages_by_proto[protocol_names()[p]] += int((proto == p).sum())
        return _at_segments(
            s,
            slice(None),
            op=op,
            id=mid,
            has_id=has,
            nbytes=s.pay_len,
            flow=flow,
            proto=proto,
            label=label,
            payload=np.array([s.payload(i) for i in range(n)] + [None], object)[:n]
            if self.keep_payload
            else np.full(n, None, object),
            server_is_dst=server_is_dst,
            status=return_statuses(own, op == 1, proto),
        )

    # ---- TCP --------------------------------------------------------------------------------
    def _tcp(self, s: Segments, final: bool) -> Messages:
        pc = self._pieces(s)
        if pc is None:
            return _empty_messages()
        done, closed = self._over(pc, final)
        out = []
        if done.any():
            out.append(self._close(pc.take(np.flatnonzero(done[pc.piece])), closed[done]))
        if not done.all():
            out.append(self._release(pc.take(np.flatnonzero(~done[pc.piece]))))
        return Messages.concat(out)

    def _pieces(self, s: Segments) -> _Pieces | None:
        """``s`` by connection, each with what its released turns left; segments that only
        repeat a connection closed in an earlier batch are left out (counted). None when
        nothing is left."""
        while True:
            key, from_a = _flow_keys(s)
            order = np.argsort(key, kind="stable")  # stable: time order kept within a flow
            s, key, from_a = s.take(order), key[order], from_a[order]
            flow_start = np.r_[True, key[1:] != key[:-1]]
            starts = np.flatnonzero(flow_start | self._new_connections(s, key))
            late = self._late_copies(s, key, from_a, s.flags, starts, np.r_[starts[1:], len(s)])
            if late is None:
                break
            self.stats.after_close += int(late.sum())
            if late.all():
                return None
            s = s.take(np.flatnonzero(~late))
        piece = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(s)]))
        opened = np.full(len(starts), None, object)
        cont = np.zeros(len(starts), bool)
        if self._open:
            # A connection with released turns has segments carried, so it comes first on its flow.
            heads = np.flatnonzero(flow_start[starts])
            found = [self._open.get(k) for k in key[starts[heads]].tolist()]
            cont[heads] = [o is not None for o in found]
            opened[heads[cont[heads]]] = [o for o in found if o is not None]
        return _Pieces(s, key, from_a, piece, starts, opened, cont)

    def _new_connections(self, s: Segments, key: np.ndarray) -> np.ndarray:
        """The SYNs that start a new connection on their flow (``s`` grouped by ``key``): a
        sequence number other than that of the SYN before it, here or, for a flow's first
        here, the one its connection with released turns began with."""
        si = np.flatnonzero(((s.flags & _SYN) != 0) & ((s.flags & _ACK) == 0))
        new_conn = np.zeros(len(s), bool)
        if not len(si):
            return new_conn
        seq = s.seq[si].astype(np.int64)
        first = np.r_[True, key[si[1:]] != key[si[:-1]]]
        same = np.r_[False, ~first[1:] & (seq[1:] == seq[:-1])]
        if self._open:
            f = np.flatnonzero(first)
            began = [getattr(self._open.get(k), "syn_seq", -1) for k in key[si[f]].tolist()]
            same[f] = np.array(began, np.int64) == seq[f]
        new_conn[si[~same]] = True
        return new_conn

    def _over(self, pc: _Pieces, final: bool) -> tuple[np.ndarray, np.ndarray]:
        """Which connections are over (processed now: FIN both ways, RST, idle, a newer
        connection on the same ports, too many segments held, the end of input), and which
        of them closed (FIN both ways or RST)."""
        s, starts = pc.s, pc.starts
        ends = np.r_[starts[1:], len(s)]
        last_ts = np.maximum.reduceat(s.ts_ns, starts)
        # The capture clock, learnt from every flow: what is idle does not depend on
        # which flows this assembler holds.
        now = int(s.ts_ns.max()) if self._clock is None else max(self._clock, int(s.ts_ns.max()))
        fin_a, fin_b = _fins(pc)
        rst = np.logical_or.reduceat((s.flags & _RST) != 0, starts)
        has_next = np.r_[pc.key[starts[1:]] == pc.key[starts[:-1]], False]
        closed = (fin_a & fin_b) | rst
        idle = last_ts < now - self.idle_timeout_ns
        return final | has_next | closed | idle | ((ends - starts) > self.max_carry), closed

    def _close(self, pc: _Pieces, closed: np.ndarray) -> Messages:
        """The messages of connections that are over."""
        self.stats.connections += pc.count
        self._remember_closed(pc, closed)
        if self._open or self._retry:
            for k in pc.key[pc.starts].tolist():
                self._open.pop(k, None)
                self._retry.pop(k, None)
        msgs, out = self._messages(pc)
        self._count(msgs, out, np.ones(pc.count, bool))
        return msgs

    def _count(self, msgs: Messages, out: _Outcome, mask: np.ndarray) -> None:
        """Add to the counters those of connections ``mask`` and messages ``msgs``."""
        st = self.stats
        st.retransmitted += int(out.retransmitted[mask].sum())
        st.gaps += int(out.gaps[mask].sum())
        st.out_of_order += int(out.out_of_order[mask].sum())
        st.unparsed_bytes += int(out.unparsed[mask].sum())
        st.flows_by_proto.update(out.protos[mask & out.counted].tolist())
        for code, k in zip(*np.unique(msgs.proto, return_counts=True), strict=True):
            st.messages_by_proto[protocol_names()[int(code)]] += int(k)
        if len(msgs):
            st.with_trace_id += int((msgs.trace_id != b"").sum())
            st.with_request_id += int((msgs.request_id != b"").sum())
            st.keys_malformed += int(msgs.keys_malformed.sum(dtype=np.int64))

    def _remember_closed(self, pc: _Pieces, closed: np.ndarray) -> None:
        """Note the next sequence number each way of the connections that closed."""
        if not closed.any():
            return
        p = np.flatnonzero(closed)
        last_ts = pc.s.ts_ns[np.r_[pc.starts[1:], len(pc.s)] - 1]
        self._closed.add(pc.key[pc.starts[p]], self._way_ends(pc)[p], last_ts[p])

    @staticmethod
    def _way_ends(pc: _Pieces) -> np.ndarray:
        """Per connection (a row) and way (from a, from b): where its sequence space ends so
        far, -1 unknown; the furthest end, wrap-aware: relative to the way's first segment,
        or to where its released turns left it."""
        s = pc.s
        n = len(s)
        g = pc.piece * 2 + (~pc.from_a).astype(np.int64)  # way 0: from a, 1: from b
        seq_end = _seq_end(s, s.flags)
        first = np.full(2 * pc.count, -1, np.int64)
        first[g[::-1]] = np.arange(n)[::-1]
        left = pc.carried("way_end", (-1, -1), np.int64).reshape(-1)
        ref = np.where(left >= 0, left, np.where(first >= 0, seq_end[np.maximum(first, 0)], -1))
        furthest = np.where(left >= 0, 0, np.iinfo(np.int64).min)
        np.maximum.at(furthest, g, _seq_diff(seq_end, ref[g]))
        return np.where(ref >= 0, (ref + furthest) & 0xFFFFFFFF, -1).reshape(-1, 2)

    def _late_copies(
        self,
        s: Segments,
        key: np.ndarray,
        from_a: np.ndarray,
        flags: np.ndarray,
        starts: np.ndarray,
        ends: np.ndarray,
    ) -> np.ndarray | None:
        """Segments that only repeat a connection closed in an earlier batch: a piece on
        its ports with no SYN, every segment of which ends at or before (and within
        ``_LATE_WINDOW`` bytes of) where that connection ended in its direction."""
        closed = self._closed
        if not len(closed):
            return None
        row = closed.find(key[starts])
        known = np.flatnonzero(row >= 0)
        if not len(known):
            return None
        late = np.zeros(len(s), bool)
        seq_end = _seq_end(s, flags)
        syn = (flags & _SYN) != 0
        dropped: set[int] = set()
        for p in known.tolist():  # the few connections on the ports of a closed one
            a, b, r = int(starts[p]), int(ends[p]), int(row[p])
            if r in dropped:
                continue  # dropped for an earlier piece on the same ports
            (end_a, end_b), closed_at = closed.entry(r)
            if syn[a:b].any() or int(s.ts_ns[a]) > closed_at + self.idle_timeout_ns:
                dropped.add(r)  # a new connection on these ports, or too late to be a copy
                continue
            stored = np.where(from_a[a:b], end_a, end_b)
            behind = (stored - seq_end[a:b]) & 0xFFFFFFFF
            if np.all((stored >= 0) & (behind <= _LATE_WINDOW)):
                late[a:b] = True
        closed.drop(np.array(sorted(dropped), np.int64))
        return late if late.any() else None

    # ---- releasing the finished turns of open connections -------------------------------------
    def _release(self, pc: _Pieces) -> Messages:
        """Connections still open: their finished turns now, the rest carried to the next batch.

        A turn is final when no later packet of its connection can change its message (or
        messages): the segments that follow can only start later turns, and the protocol,
        orientation, numbering and bytes it was cut with are those the whole connection
        would give. Turns are cut before a call turn that follows a return turn (so a
        request and its response are final once the next request begins), and only when
        all of these hold for the connection's segments before the cut:

        - the client is known for good: a SYN or SYN-ACK was seen, or the ports and
          listening endpoints decide it and no endpoint learnt later could change that
          (:meth:`_client_is_a`);
        - the protocol is known for good: the client opened with a request line, or each
          way has sent the 256 bytes :func:`capture.protocols.detect_tcp` looks at;
        - no hole and no segment out of order in either direction: a late segment could
          fill the hole and join or re-cut bytes already taken (a copy of bytes before
          the cut that arrives after it is a retransmission: dropped, or trimmed at the
          cut; a one-pass conversion would re-cut the same way unless that copy straddles
          two segments it has, which TCP does not send once the bytes were answered);
        - every data segment before the cut is older than every one after it, so the
          messages before it come first in the trace; and, for HTTP turns checked in bulk,
          no two messages before it share a timestamp (messages of one connection and
          time are in the order their path made them, and a later turn that does not
          check out sends the whole connection to the parser, which orders them otherwise;
          a parser, once it read a connection's turns, reads the rest of it);
        - the protocol path is one that can go on from the cut: the turn-taking rule;
          HTTP turns checked in bulk (each exactly one message); a protocol parser that
          used every byte before the cut in both directions, found a message starting
          right at the cut each way (the parser saw bytes past it, so a message that
          runs to the end of what it was given cannot end there by accident), gave a
          message each way and answered every call (no queued call, no keyed call
          waiting). TLS connections are held until they end (a record can span the cut,
          and the last record of a direction is read as an alert);
        - the messages of the segments before the cut are exactly those the connection's
          segments so far give before it (checked: the released messages never differ
          from what the one-pass conversion writes for them).

        What the released turns leave (:class:`_Open`: id, orientation, protocol, where
        each direction's bytes end, calls numbered, the parser's state, FINs, SYN, way
        ends) carries the connection on from the cut.
        """
        keep = np.ones(len(pc.s), bool)
        cand = self._candidates(pc)
        out = _empty_messages()
        if cand.any():
            sel = np.flatnonzero(cand[pc.piece])
            out, used = self._release_turns(pc.take(sel))
            keep[sel[used]] = False
        self._pending = pc.s.take(np.flatnonzero(keep))  # flows stay in time order
        return out

    def _candidates(self, pc: _Pieces) -> np.ndarray:
        """Open connections worth a try: open since an earlier batch or for a second of
        capture time at least (most connections are short exchanges that end soon, and a
        try costs a pass over the connection), data went one way, back and again (a call
        turn after a return turn), and they hold enough more segments than at a try that
        failed (a quarter more, at least two: the tries cost a bounded multiple of the
        segments held, and a try that failed for want of an answer is made again soon)."""
        s = pc.s
        di = np.flatnonzero(s.pay_len > 0)
        p, fa = pc.piece[di], pc.from_a[di]
        turn = np.flatnonzero((p[1:] == p[:-1]) & (fa[1:] != fa[:-1])) + 1
        cand = np.bincount(p[turn], minlength=pc.count) >= 2
        began = s.ts_ns[pc.starts]
        old = began <= (self._clock if self._clock is not None else int(s.ts_ns.max())) - _LONG_LIVED_NS
        if self._clock_before is not None:
            old |= began <= self._clock_before
        cand &= pc.cont | old
        # Until its protocol is settled (see _protocols) a try is wasted: each way has sent
        # the 256 bytes looked at before the turn before last (where a cut can be), or the
        # first data starts with a request method.
        last = np.zeros(pc.count, np.int64)
        np.maximum.at(last, p[turn], turn)
        before_last = np.zeros(pc.count, np.int64)
        np.maximum.at(before_last, p[turn], np.where(turn < last[p[turn]], turn, 0))
        way = p * 2 + (~fa).astype(np.int64)
        early = np.arange(len(di)) < before_last[p]
        sent = np.bincount(way[early], weights=s.pay_len[di][early], minlength=2 * pc.count).reshape(-1, 2)
        settled = pc.cont | (sent >= 256).all(axis=1)
        if request_lines_are_http():
            settled |= _opens_with_request(s, di, way, pc.count)
        cand &= settled
        if self._retry and cand.any():
            sizes = np.diff(np.r_[pc.starts, len(pc.s)])
            cand &= sizes >= np.array([self._retry.get(k, 0) for k in pc.key[pc.starts].tolist()], np.int64)
        return cand

    def _release_turns(self, tp: _Pieces) -> tuple[Messages, np.ndarray]:
        """The final turns of open connections ``tp`` (see :meth:`_release`): their messages,
        and which segments they used (no longer carried)."""
        whole, trial = self._messages(tp, cuts=True)
        cut = trial.cut if trial.cut is not None else np.full(tp.count, -1)
        before = (cut[tp.piece] >= 0) & (np.arange(len(tp.s)) < cut[tp.piece])
        ok = np.zeros(tp.count, bool)
        msgs = _empty_messages()
        if before.any():
            data = tp.s.pay_len > 0
            newest = np.full(tp.count, np.iinfo(np.int64).min)
            np.maximum.at(newest, tp.piece[before & data], tp.s.ts_ns[before & data])
            oldest_after = np.full(tp.count, np.iinfo(np.int64).max)
            np.minimum.at(oldest_after, tp.piece[~before & data], tp.s.ts_ns[~before & data])
            hp = np.flatnonzero(cut >= 0)
            msgs, pre = self._messages(tp.take(np.flatnonzero(before)), release=True)
            opened = pre.opened if pre.opened is not None else [None] * len(hp)
            good = np.array([o is not None for o in opened], bool) & (newest < oldest_after)[hp]
            # What the segments so far give before the cut, by the trial with all of them.
            at = _index_of(trial.flow_ids, whole.flow)
            so_far = whole.take(np.flatnonzero(whole.ts_ns <= newest[at]))
            good &= _same_messages(msgs, so_far, pre.flow_ids)
            # Messages of one connection with one timestamp are in the order its protocol
            # path made them; HTTP turns checked in bulk can still go to the parser (which
            # orders them otherwise) when a later turn does not check out: held.
            tie = (msgs.ts_ns[1:] == msgs.ts_ns[:-1]) & (msgs.flow[1:] == msgs.flow[:-1])
            bulk = np.array([o is not None and o.proto == "http" and not o.parser for o in opened], bool)
            tied = _index_of(pre.flow_ids, msgs.flow[1:][tie])
            good[tied[bulk[tied]]] = False
            ok[hp[good]] = True
            msgs = msgs.take(np.flatnonzero(np.isin(msgs.flow, pre.flow_ids[good])))
            self._count(msgs, pre, good)
            for j in np.flatnonzero(good).tolist():
                k = int(tp.key[tp.starts[hp[j]]])
                self._open[k] = opened[j]  # type: ignore[assignment]
                self._retry.pop(k, None)
        sizes = np.diff(np.r_[tp.starts, len(tp.s)])
        for p in np.flatnonzero(~ok).tolist():  # tried again once holding this many
            self._retry[int(tp.key[tp.starts[p]])] = int(sizes[p]) + max(2, int(sizes[p]) // 4)
        return msgs, before & ok[tp.piece]

    # ---- a batch of connections to messages ---------------------------------------------------
    def _messages(
        self, pc: _Pieces, *, cuts: bool = False, release: bool = False
    ) -> tuple[Messages, _Outcome]:
        """The messages of connections ``pc``, as if they ended with these segments, and per
        connection its counters; with ``cuts`` where its turns may be cut
        (:meth:`_cut_points`), with ``release`` what its turns leave when they may be
        released (:meth:`_left_open`)."""
        flow_ids, client_is_a, settled = self._identify(pc)
        kept, stream, re = self._reassemble(pc, client_is_a)
        none = np.zeros(pc.count, bool)
        if kept is None:
            return _empty_messages(), _Outcome(
                flow_ids, np.full(pc.count, "tcp", object), none, re.retransmitted, re.gaps,
                re.out_of_order, np.zeros(pc.count, np.int64), cut=np.full(pc.count, -1) if cuts else None,
                opened=[None] * pc.count if release else None,
            )  # fmt: skip
        ctxs = [copy.deepcopy(o.ctx) if o is not None else {} for o in pc.opened.tolist()]
        cb = _ConnectionBatch(pc.s, kept, stream, pc.from_a, flow_ids, client_is_a, pc.starts, pc.cont,
                              pc.carried("calls", 0, np.int64), ctxs, pc.carried("parser", False, bool),
                              pc.carried("by_key", False, bool))  # fmt: skip
        protos, known = self._protocols(cb, pc.carried("proto", "tcp", object))
        msgs, paths = self._extract(cb, protos)
        counted = none.copy()
        counted[kept.kp] = True
        out = _Outcome(flow_ids, paths.protos, counted & ~pc.cont, re.retransmitted, re.gaps, re.out_of_order,
                       paths.unparsed)  # fmt: skip
        if cuts:
            out = dataclasses.replace(out, cut=self._cut_points(cb, paths))
        if release:
            final = settled & known & paths.clean & ~re.loose
            out = dataclasses.replace(out, opened=self._left_open(pc, cb, re, msgs, paths, final))
        return msgs, out

    def _identify(self, pc: _Pieces) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per connection: its id, whether the client is endpoint a, and whether that is
        settled (no later packet can change it)."""
        s, starts = pc.s, pc.starts
        synonly = ((s.flags & _SYN) != 0) & ((s.flags & _ACK) == 0)
        # Connection ids from the ports, addresses and the client's initial sequence number,
        # so two capture points that saw the same connection give it the same id.
        f_syn = _first_in_group(starts, synonly, len(s))
        # Without a SYN, the first packet's sequence number: two records of one port pair
        # (split by idleness) must not share ids.
        isn = np.where(f_syn >= 0, s.seq[np.maximum(f_syn, 0)], s.seq[starts]).astype(np.uint64)
        isn |= np.where(f_syn >= 0, 0, 1 << 32).astype(np.uint64)
        flow_ids = mix64(pc.key[starts] ^ mix64(isn)) >> np.uint64(24)
        client_is_a, settled = self._client_is_a(s, pc.from_a, synonly, starts)
        if pc.cont.any():  # fixed when the first turns were released
            c = pc.cont
            flow_ids[c] = pc.carried("flow_id", 0, np.uint64)[c]
            client_is_a[c] = pc.carried("client_is_a", False, bool)[c]
            settled |= c
        return flow_ids, client_is_a, settled

    def _client_is_a(
        self, s: Segments, from_a: np.ndarray, synonly: np.ndarray, starts: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per connection, whether the client is endpoint a, and whether that is settled:
        from a SYN or SYN-ACK, or from ports and listening endpoints that an endpoint
        learnt later (the listening set only grows) cannot overturn."""
        n = len(s)
        f_syn = _first_in_group(starts, synonly, n)
        synack = ((s.flags & _SYN) != 0) & ((s.flags & _ACK) != 0)
        f_sa = _first_in_group(starts, synack, n)
        first = starts
        a_port = np.where(from_a, s.sport, s.dport)[first]
        b_port = np.where(from_a, s.dport, s.sport)[first]
        a_addr = np.where(from_a, s.src_lo, s.dst_lo)[first]
        b_addr = np.where(from_a, s.dst_lo, s.src_lo)[first]
        # Listening endpoints (learnt from the SYNs of every flow, see _learn) tell the
        # server of a connection seen mid-way.
        a_known = _WELL_KNOWN_PORT[a_port]
        b_known = _WELL_KNOWN_PORT[b_port]
        if self._listening:
            lst = np.fromiter(self._listening, np.uint64)
            a_known |= np.isin(mix64(a_addr ^ a_port.astype(np.uint64)), lst)
            b_known |= np.isin(mix64(b_addr ^ b_port.astype(np.uint64)), lst)
        by_port = np.where(
            a_known != b_known, b_known, np.where(a_port != b_port, a_port > b_port, from_a[first])
        )
        client_is_a = np.where(
            f_syn >= 0,
            from_a[np.maximum(f_syn, 0)],
            np.where(f_sa >= 0, ~from_a[np.maximum(f_sa, 0)], by_port),
        )
        # Both known stay known; one known gives what the ports give once both are.
        lasting = (a_known & b_known) | (
            (a_known != b_known) & (a_port != b_port) & ((a_port > b_port) == b_known)
        )
        return client_is_a, (f_syn >= 0) | (f_sa >= 0) | lasting

    def _reassemble(self, pc: _Pieces, client_is_a: np.ndarray) -> tuple[_Kept | None, bytes, _Reassembly]:
        """Each direction's data in sequence order, earliest copy first: bytes seen before
        dropped (a retransmission) or trimmed (an overlap), holes marked; a connection
        with released turns goes on from where they ended. None (and no bytes) when no
        data is kept."""
        s, count = pc.s, pc.count
        g = pc.piece * 2 + (pc.from_a != client_is_a[pc.piece]).astype(np.int64)  # 0 client->server
        di = np.flatnonzero(s.pay_len > 0)
        base, start = self._origins(pc, g, di)
        z = np.zeros(count, np.int64)
        left_trunc = pc.carried("trunc", (False, False), bool).reshape(-1)
        if not len(di):
            return None, b"", _Reassembly(z, z, z, z > 0, base, start, left_trunc)
        gd = g[di]
        rel = _seq_diff(s.seq[di].astype(np.int64), base[gd])
        # Order each direction's data by sequence number, earliest copy first.
        o = np.lexsort((di, rel, gd))
        di, gd, rel = di[o], gd[o], rel[o]
        end = rel + s.pay_len[di]
        gstart = np.r_[True, gd[1:] != gd[:-1]]
        big = np.int64(1) << np.int64(34)
        shift = np.int64(1) << np.int64(32)
        first = np.where(start[gd] == _FROM_FIRST, rel, start[gd])
        # Bytes before where a direction starts counting (released ones) count as seen.
        reach = np.where(gstart, np.maximum(end, first), end)
        acc = np.maximum.accumulate(gd * big + reach + shift)
        prev_max = np.empty(len(di), np.int64)
        prev_max[1:] = acc[:-1] - gd[1:] * big - shift
        prev_max[gstart] = first[gstart]
        dup = end <= prev_max
        gap = rel > prev_max
        ooo = np.r_[False, (di[1:] < di[:-1]) & ~gstart[1:]] & ~dup
        kp = gd // 2
        counts = [np.bincount(kp[m], minlength=count) for m in (dup, gap, ooo)]
        keep = np.flatnonzero(~dup)
        di, gd, rel, end, gap, prev_max = di[keep], gd[keep], rel[keep], end[keep], gap[keep], prev_max[keep]
        ends = np.where(np.repeat(pc.cont, 2), start, np.iinfo(np.int64).min)
        np.maximum.at(ends, gd, end)
        re = _Reassembly(*counts, loose=(counts[1] + counts[2]) > 0, base=base, end=ends, trunc=left_trunc)
        if not len(di):
            return None, b"", re  # every byte was seen before (e.g. data on a SYN, repeated)
        kstart = np.maximum(rel, prev_max)
        skip = kstart - rel
        klen = end - kstart
        kcap = np.clip(s.pay_cap[di] - skip, 0, klen)
        same_dir = np.r_[False, gd[1:] == gd[:-1]]
        trunc_before = np.r_[False, kcap[:-1] < klen[:-1]] & same_dir
        gstart = ~same_dir
        last = np.r_[~same_dir[1:], True]
        re.trunc[gd[last]] = kcap[last] < klen[last]
        # A direction's first segment here starts a run; bytes before it are missing only
        # after a hole, or, for a connection with released turns, a hole or cut-short
        # segment where they ended.
        cont = np.repeat(pc.cont, 2)[gd]
        lost = ((gap | trunc_before) & ~gstart) | (gstart & cont & (gap | left_trunc[gd]))
        # The captured bytes of each direction in sequence order, all directions back to back.
        sstart = np.zeros(len(di), np.int64)
        np.cumsum(kcap[:-1], out=sstart[1:])
        stream = join_spans(s.data, s.pay_off[di] + skip, kcap).tobytes()
        kept = _Kept(di, gd // 2, gd % 2, klen, gstart | gap | trunc_before, sstart, kcap, lost)
        return kept, stream, re

    @staticmethod
    def _origins(pc: _Pieces, g: np.ndarray, di: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per direction (``2 * connection + direction``): the sequence number its bytes
        count from (after its SYN, else its first data segment's; for a connection with
        released turns, as they counted), and where its bytes start counting: 0 after a
        SYN, where released turns ended, else ``_FROM_FIRST`` (its first byte in sequence)."""
        s = pc.s
        ng = 2 * pc.count
        base = np.zeros(ng, np.int64)
        start = np.full(ng, _FROM_FIRST, np.int64)
        syn = np.flatnonzero((s.flags & _SYN) != 0)
        # The last SYN of a direction wins (a retransmitted SYN carries the same number).
        base[g[syn]] = s.seq[syn].astype(np.int64) + 1
        start[g[syn]] = 0
        first_data = np.full(ng, -1, np.int64)
        first_data[g[di][::-1]] = di[::-1]  # first data segment (time order) of each direction
        no_syn = (start == _FROM_FIRST) & (first_data >= 0)
        base[no_syn] = s.seq[first_data[no_syn]].astype(np.int64)
        cont = np.repeat(pc.cont, 2)
        if cont.any():
            base[cont] = pc.carried("base", (0, 0), np.int64).reshape(-1)[cont]
            start[cont] = pc.carried("end", (0, 0), np.int64).reshape(-1)[cont]
        return base, start

    def _protocols(self, cb: _ConnectionBatch, carried: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each connection's protocol from the first bytes of each direction (and its ports),
        and whether that is settled: the client opened with a request line, or each way
        gave the 256 bytes looked at; a connection with released turns keeps its own."""
        k, stream, s, pf = cb.kept, cb.stream, cb.s, cb.starts
        gd = k.kp * 2 + k.kd
        ng = 2 * cb.count
        gfirst = np.full(ng, -1, np.int64)
        gfirst[gd[::-1]] = np.arange(len(gd))[::-1]
        client_first = cb.from_a[pf] == cb.client_is_a
        cport = np.where(client_first, s.sport[pf], s.dport[pf])
        sport_ = np.where(client_first, s.dport[pf], s.sport[pf])
        # Where each direction's bytes end in the stream, so a look never crosses into the next.
        gend = np.zeros(ng, np.int64)
        gend[gd] = k.sstart + k.kcap  # the last segment of a group (in stream order) wins
        head = k.sstart[np.maximum(gfirst, 0)]
        look = np.minimum(head + 256, gend)
        full = ((gfirst >= 0) & (gend - head >= 256)).reshape(-1, 2).all(axis=1)
        # A client that opens with a request line is HTTP, whatever else is said (what
        # detect_tcp would say, for all connections at once, unless a protocol registered
        # ahead of HTTP may take it); the others get a look.
        c_first = gfirst[0::2]
        http_open = (c_first >= 0) & starts_with_method(
            stream, k.sstart[np.maximum(c_first, 0)], look[0::2], REQUEST_METHODS
        )
        if not request_lines_are_http():
            http_open[:] = False
        protos = np.full(cb.count, "tcp", object)
        protos[http_open] = "http"
        for p in np.flatnonzero(~http_open & ~cb.cont).tolist():  # per connection: a look at its first bytes
            c, v = gfirst[2 * p], gfirst[2 * p + 1]
            cbytes = stream[k.sstart[c] : look[2 * p]] if c >= 0 else b""
            sbytes = stream[k.sstart[v] : look[2 * p + 1]] if v >= 0 else b""
            protos[p] = detect_tcp(cbytes, sbytes, int(cport[p]), int(sport_[p]))
        protos[cb.cont] = carried[cb.cont]
        return protos, cb.cont | http_open | full

    def _extract(self, cb: _ConnectionBatch, protos: np.ndarray) -> tuple[Messages, _Paths]:
        """Messages by each connection's protocol path: TLS; HTTP turns checked in bulk
        (unless a parser read the connection's released turns); the protocol parsers; the
        turn-taking rule (also for parsed connections whose data turned out not to be
        that protocol)."""
        kp = cb.kept.kp
        parsed = (protos != "tcp") & (protos != "tls")
        tls = protos == "tls"
        clean = protos == "tcp"  # the turn-taking rule goes on from any cut before a call turn
        out: list[Messages] = []
        if tls.any():
            out.append(self._tls(cb, cb.kept.take(np.flatnonzero(tls[kp]))))
        http = (protos == "http") & ~cb.parser
        if http.any() and not self.keep_payload:
            fast, handled = self._http_turns(cb, http)
            out.append(fast)
            parsed &= ~handled
            clean |= handled
        res = _Parsed.nothing(cb.count)
        if parsed.any():
            res = self._parsed_messages(cb, protos, parsed)
            out.append(res.msgs)
            protos = np.where(res.fallback, "tcp", protos)
            clean |= res.clean
        generic = protos == "tcp"
        if generic.any():
            out.append(self._turns(cb, cb.kept.take(np.flatnonzero(generic[kp]))))
        paths = _Paths(
            protos, clean & ~res.fallback, parsed & ~res.fallback, res.by_key, res.unparsed, res.rows
        )
        return Messages.concat(out), paths

    def _http_turns(self, cb: _ConnectionBatch, http: np.ndarray) -> tuple[Messages, np.ndarray]:
        """HTTP connections where every turn is exactly one message, found without the parser.

        The common case (one request, then its response, no pipelining, no chunking, no
        gaps) is checked for all turns at once (:func:`capture._http1.check_turns`); a
        connection with any turn that does not check out is left to the full parser.
        Returns the messages and the connections handled.
        """
        k = cb.kept
        elig = http.copy()
        elig[k.kp[k.gap]] = False  # gaps: the parser's business
        sel = np.flatnonzero(elig[k.kp])
        if not len(sel):
            return _empty_messages(), np.zeros(cb.count, bool)
        o = sel[np.lexsort((k.di[sel], k.kp[sel]))]  # time order within each connection
        op_, od = k.kp[o], k.kd[o]
        tix = np.flatnonzero(np.r_[True, (op_[1:] != op_[:-1]) | (od[1:] != od[:-1])])
        lo = np.minimum.reduceat(k.sstart[o], tix)
        hi = np.maximum.reduceat(k.sstart[o] + k.kcap[o], tix)
        span = hi - lo
        whole = (np.add.reduceat(k.kcap[o], tix) == span) & (np.add.reduceat(k.klen[o], tix) == span)
        tp, td = op_[tix], od[tix]
        ok = whole.copy()
        labels = np.full(len(tix), None, object)
        w = np.flatnonzero(whole)
        ok[w], labels[w] = check_turns(cb.stream, lo[w], hi[w], td[w] == 0)
        bad = np.zeros(cb.count, bool)
        bad[tp[~ok]] = True
        handled = elig & ~bad
        keep = handled[tp]
        if not keep.any():
            return _empty_messages(), handled
        lo, hi = lo[keep], hi[keep]
        tix, tp, td, span, labels = tix[keep], tp[keep], td[keep], span[keep], labels[keep]
        pst = np.r_[True, tp[1:] != tp[:-1]]
        is_call = td == 0
        call_no = _call_numbers(is_call, pst) + cb.calls[tp]
        mid = (cb.flow_ids[tp] << np.uint64(24)) | (call_no.astype(np.uint64) & np.uint64(0xFFFFFF))
        # A return is labelled like the call it answers (the last call turn before it);
        # what its own line said, its status, is kept apart.
        http_code = np.full(len(tix), protocol_codes()["http"], np.int8)
        status = return_statuses(labels, ~is_call, http_code)
        idx = np.arange(len(tp))
        last_call = np.maximum.accumulate(np.where(is_call, idx, -1))
        first_of_piece = np.maximum.accumulate(np.where(pst, idx, 0))
        ans = (~is_call) & (last_call >= first_of_piece)
        labels[ans] = labels[last_call[ans]]
        msgs = _at_segments(
            cb.s, k.di[o[tix]], op=np.where(is_call, 0, 1).astype(np.int8),
            id=np.where(call_no > 0, mid, 0).astype(np.uint64), has_id=call_no > 0, nbytes=span,
            flow=cb.flow_ids[tp], proto=http_code, label=labels,
            payload=np.full(len(tix), None, object), server_is_dst=is_call, status=status,
        )  # fmt: skip
        if self.keys is not None:
            msgs = msgs.with_keys(http1_keys(cb.stream, lo, hi, self.keys))
        return msgs, handled

    def _turn_payloads(
        self, stream: bytes, sstart: np.ndarray, kcap: np.ndarray, ts: np.ndarray
    ) -> np.ndarray:
        """Captured bytes of each turn: its segments' span of the direction's stream."""
        if not self.keep_payload or not len(ts):
            return np.full(len(ts), None, object)
        lo = np.minimum.reduceat(sstart, ts)
        hi = np.maximum.reduceat(sstart + kcap, ts)
        return np.array(
            [stream[a:b] for a, b in zip(lo.tolist(), hi.tolist(), strict=True)] + [None], object
        )[:-1]

    def _turns(
        self,
        cb: _ConnectionBatch,
        kept: _Kept,
        *,
        proto: str = "tcp",
        labels: dict[int, str | None] | None = None,
        first_call: int = 1,
    ) -> Messages:
        """The turn-taking rule over kept data segments of generic connections (vectorized).

        ``proto`` names the connections' protocol, ``labels`` gives each connection's label
        (by piece), and calls are numbered from ``first_call`` within each connection, after
        those its released turns numbered."""
        k = kept.take(np.lexsort((kept.di, kept.kp)))  # time order within each connection
        kp, kd = k.kp, k.kd
        pstart = np.r_[True, kp[1:] != kp[:-1]]
        # A turn ends where the other side speaks or bytes are missing; a direction's first
        # segment here starts one, unless it goes on from released turns.
        brk = k.gap | (k.run_start & ~cb.cont[kp])
        ts = np.flatnonzero(pstart | np.r_[True, kd[1:] != kd[:-1]] | brk)
        tkp = kp[ts]
        is_call = kd[ts] == 0
        call_no = _call_numbers(is_call, pstart[ts]) + cb.calls[tkp]
        has_id = call_no > 0
        call_no = call_no + (first_call - 1)
        mid = (cb.flow_ids[tkp] << np.uint64(24)) | (call_no.astype(np.uint64) & np.uint64(0xFFFFFF))
        label = np.full(len(ts), None, object)
        if labels:
            label[:] = [labels.get(int(p)) for p in tkp.tolist()]
        return _at_segments(
            cb.s, k.di[ts], op=np.where(is_call, 0, 1).astype(np.int8),
            id=np.where(has_id, mid, 0).astype(np.uint64), has_id=has_id, nbytes=np.add.reduceat(k.klen, ts),
            flow=cb.flow_ids[tkp], proto=np.full(len(ts), protocol_codes()[proto], np.int8), label=label,
            payload=self._turn_payloads(cb.stream, k.sstart, k.kcap, ts), server_is_dst=is_call,
        )  # fmt: skip

    def _tls(self, cb: _ConnectionBatch, kept: _Kept) -> Messages:
        """TLS connections: the handshake as one call (from the ClientHello) and its
        return (from the server's first flight), labelled ``TLS <server name>``; the
        encrypted records after it by the turn-taking rule, labelled with the server
        name; alerts (close_notify) left out, they answer nothing.

        The handshake lasts until the client's first application-data record: every
        segment before it, either way (the client's Finished, TLS 1.3's session tickets
        sent ahead of the first request), belongs to the handshake's call or return.
        """
        di, kp, kd = kept.di, kept.kp, kept.kd
        first_type, alert, names = _tls_segments(kp, kd, kept.run_start, kept.sstart, kept.kcap, cb.stream)
        ts = cb.s.ts_ns[di]
        data_from = np.full(cb.count, np.iinfo(np.int64).max, np.int64)
        first_data = (kd == 0) & (first_type == 23)
        np.minimum.at(data_from, kp[first_data], ts[first_data])
        handshake = (ts < data_from[kp]) & ~alert
        turns = ~handshake & ~alert
        parts = [self._tls_handshakes(cb, kept.take(np.flatnonzero(handshake)), names)]
        if turns.any():
            parts.append(
                self._turns(cb, kept.take(np.flatnonzero(turns)), proto="tls", labels=names, first_call=2)
            )
        return Messages.concat(parts)

    @staticmethod
    def _tls_handshakes(cb: _ConnectionBatch, kept: _Kept, names: dict[int, str]) -> Messages:
        """One call per connection at its first handshake segment from the client, one
        return at the server's first; each with the bytes of its side of the handshake."""
        di, kp, kd = kept.di, kept.kp, kept.kd
        if not len(di):
            return _empty_messages()
        ts = cb.s.ts_ns[di]
        side = kp * 2 + kd
        order = np.lexsort((ts, side))
        first = order[np.r_[True, side[order][1:] != side[order][:-1]]]
        nbytes = np.bincount(side, weights=kept.klen, minlength=int(side.max()) + 1)[side[first]]
        pk, call = kp[first], kd[first] == 0
        label = np.array([f"TLS {names[p]}" if p in names else "TLS" for p in pk.tolist()] + [None], object)
        return _at_segments(
            cb.s, di[first], op=np.where(call, 0, 1).astype(np.int8),
            id=(cb.flow_ids[pk] << np.uint64(24)) | np.uint64(1), has_id=np.ones(len(first), bool),
            nbytes=nbytes.astype(np.int64), flow=cb.flow_ids[pk],
            proto=np.full(len(first), protocol_codes()["tls"], np.int8), label=label[:-1],
            payload=np.full(len(first), None, object), server_is_dst=call,
        )  # fmt: skip

    # ---- protocol parsers ---------------------------------------------------------------------
    def _parsed_messages(self, cb: _ConnectionBatch, protos: np.ndarray, parsed: np.ndarray) -> _Parsed:
        """Protocol parsers over each direction's runs of connections ``parsed``; pairing of
        calls and returns."""
        rows, unparsed, fallback = self._parse_runs(cb, protos, parsed)
        clean = parsed & ~fallback & (unparsed == 0)
        if not len(rows):
            no = np.zeros(cb.count, bool)
            return _Parsed(_empty_messages(), rows, fallback, no, cb.by_key & parsed, unparsed)
        k = cb.kept
        seg_of = np.clip(np.searchsorted(k.sstart, rows.off, side="right") - 1, 0, len(k.di) - 1)
        ts = cb.s.ts_ns[k.di[seg_of]]
        pairs = _Pairs.empty(rows)
        # Connections without protocol ids and without gaps pair call k with return k,
        # vectorized; the others go through the ordered loop (and so do those whose
        # released turns did: the whole connection would).
        keyed = np.array([k is not None for k in rows.key], bool)
        by_key = cb.by_key.copy()
        by_key[rows.piece[keyed | rows.after_gap]] = True
        hard = by_key[rows.piece]
        clean &= _pair_in_order(cb, rows, np.flatnonzero(~hard), ts, pairs)
        clean &= self._pair_by_key(cb, rows, np.flatnonzero(hard), ts, pairs)
        # A message each way, so the connection cannot turn out to be another protocol.
        each_way = np.bincount(rows.piece * 2 + rows.dirs, minlength=2 * cb.count).reshape(-1, 2)
        clean &= (each_way > 0).all(axis=1)
        msgs = self._parsed_table(cb, rows, ts, pairs, protos)
        return _Parsed(msgs, rows, fallback, clean, by_key & parsed, unparsed)

    def _parse_runs(
        self, cb: _ConnectionBatch, protos: np.ndarray, parsed: np.ndarray
    ) -> tuple[_ParsedRows, np.ndarray, np.ndarray]:
        """The parsers over each run of contiguous bytes: the messages found (those of
        connections that fall back to the turn-taking rule left out), the bytes after the
        last message of a run per connection, and the connections that fall back: a
        direction with data gave no message at all, so it is not that protocol (unless
        released turns already said it is)."""
        k, stream = cb.kept, cb.stream
        sel = np.flatnonzero(parsed[k.kp] & k.run_start)
        # run r spans kept segments [r, its end) in stream bytes [sstart[r], sstart[end-1]+kcap)
        rs = np.flatnonzero(k.run_start)
        run_end = np.r_[rs[1:], len(k.run_start)][np.searchsorted(rs, sel)]
        lo, hi = k.sstart[sel], k.sstart[run_end - 1] + k.kcap[run_end - 1]
        rows: list[tuple] = []
        found = np.zeros(2 * cb.count, np.int64)
        unparsed = np.zeros(cb.count, np.int64)
        # Parsers that can tell header fields (HTTP/2) are asked for the request keys'.
        want = frozenset(self.keys.names) if self.keys is not None else None
        for r, a, b in zip(sel.tolist(), lo.tolist(), hi.tolist(), strict=True):
            p, dr = int(k.kp[r]), int(k.kd[r])
            ctx = cb.ctxs[p]
            if want is not None:
                ctx[WANT_HEADERS] = want
            msgs = parse_stream(protos[p], stream[a:b], dr, ctx)
            headers = ctx.pop(FOUND_HEADERS, None) or {}
            after_gap = bool(k.gap[r])
            used = 0
            for i, (off, ln, lab, key) in enumerate(msgs):
                rows.append((p, dr, a + off, ln, lab, key, after_gap and i == 0, headers.get(off)))
                used = max(used, off + ln)
            found[2 * p + dr] += len(msgs)
            unparsed[p] += max(0, (b - a) - used)
        with_data = np.zeros(2 * cb.count, bool)
        with_data[k.kp[sel] * 2 + k.kd[sel]] = True
        fallback = (with_data & (found == 0)).reshape(-1, 2).any(axis=1) & ~cb.cont
        rows = [r for r in rows if not fallback[r[0]]]
        return _ParsedRows.of(rows), unparsed, fallback

    @staticmethod
    def _pair_by_key(
        cb: _ConnectionBatch, rows: _ParsedRows, idx: np.ndarray, ts: np.ndarray, pairs: _Pairs
    ) -> np.ndarray:
        """Rows ``idx`` (connections with protocol ids or gaps), paired per connection in
        time order: explicit keys match directly; the rest in order. Per connection,
        whether every call was answered (True for the connections not paired here)."""
        answered = np.ones(cb.count, bool)
        order = idx[np.lexsort((rows.off[idx], ts[idx], rows.piece[idx]))]
        piece, dirs, gaps = rows.piece.tolist(), rows.dirs.tolist(), rows.after_gap.tolist()
        op, mid, has, labels = pairs.op, pairs.mid, pairs.has, pairs.labels
        cur_p, queue, keyed, calls, fid = -1, [], {}, 0, 0
        for i in order.tolist():
            p, dr, k = piece[i], dirs[i], rows.key[i]
            if p != cur_p:
                if cur_p >= 0:
                    answered[cur_p] = not queue and not keyed
                cur_p, queue, keyed, calls, fid = p, [], {}, int(cb.calls[p]), int(cb.flow_ids[p])
            if k == NO_REPLY:
                # A message that gets no answer by protocol (a MySQL COM_STMT_CLOSE or its
                # server's greeting, a PostgreSQL Terminate): a send, from its sender.
                op[i] = 2
                continue
            has[i] = True
            if dr == 0:
                calls += 1
                mid[i] = (fid << 24) | ((calls if k is None else k) & 0xFFFFFF)
                if k is None:
                    queue.append(i)
                else:
                    keyed[k] = i
                continue
            op[i] = 1
            if k is not None:
                j = keyed.pop(k, None)
                mid[i] = (fid << 24) | (k & 0xFFFFFF)
            else:
                if gaps[i] and len(queue) > 1:
                    # Responses were lost in the gap: answer the newest call, not the oldest.
                    queue = queue[-1:]
                j = queue.pop(0) if queue else None
                has[i] = j is not None
                if j is not None:
                    mid[i] = mid[j]
            if j is not None:
                labels[i] = labels[j]
        if cur_p >= 0:
            answered[cur_p] = not queue and not keyed
        return answered

    def _parsed_table(
        self, cb: _ConnectionBatch, rows: _ParsedRows, ts: np.ndarray, pairs: _Pairs, protos: np.ndarray
    ) -> Messages:
        """The parsed messages as columns: addresses from the connection's first segment,
        oriented by direction."""
        s, p = cb.s, rows.piece
        from_client = rows.dirs == 0  # calls and the sends of commands that get no answer
        sender_is_a = np.where(from_client, cb.client_is_a[p], ~cb.client_is_a[p])
        f = cb.starts[p]
        fa = cb.from_a[f]
        ends = ((s.src_hi, s.dst_hi), (s.src_lo, s.dst_lo), (s.sport, s.dport))
        a_hi, a_lo, a_pt = (np.where(fa, x[f], y[f]) for x, y in ends)
        b_hi, b_lo, b_pt = (np.where(fa, y[f], x[f]) for x, y in ends)
        codes = protocol_codes()
        piece_codes = np.array([codes[pr] for pr in protos], np.int8)
        m = len(rows)
        payload = np.full(m, None, object)
        if self.keep_payload:
            payload[:] = [
                cb.stream[a : a + n] for a, n in zip(rows.off.tolist(), rows.length.tolist(), strict=True)
            ]
        msgs = Messages(
            ts_ns=ts,
            src_hi=np.where(sender_is_a, a_hi, b_hi),
            src_lo=np.where(sender_is_a, a_lo, b_lo),
            sport=np.where(sender_is_a, a_pt, b_pt),
            dst_hi=np.where(sender_is_a, b_hi, a_hi),
            dst_lo=np.where(sender_is_a, b_lo, a_lo),
            dport=np.where(sender_is_a, b_pt, a_pt),
            op=pairs.op,
            id=pairs.mid,
            has_id=pairs.has,
            nbytes=rows.length,
            flow=cb.flow_ids[p],
            proto=piece_codes[p],
            label=pairs.labels,
            payload=payload,
            server_is_dst=from_client,
            status=return_statuses(rows.label, pairs.op == 1, piece_codes[p]),
        )
        return msgs if self.keys is None else msgs.with_keys(self._parsed_keys(cb, rows, protos))

    def _parsed_keys(self, cb: _ConnectionBatch, rows: _ParsedRows, protos: np.ndarray) -> RequestKeys:
        """The request keys of parsed messages: HTTP/1.x read from their bytes, HTTP/2
        from the header fields its parser gave."""
        assert self.keys is not None
        keys = RequestKeys.none(len(rows))
        http1 = np.flatnonzero(protos[rows.piece] == "http")
        if len(http1):
            got = http1_keys(cb.stream, rows.off[http1], rows.off[http1] + rows.length[http1], self.keys)
            keys = _keys_at(keys, http1, got)
        with_fields = np.flatnonzero(np.array([h is not None for h in rows.headers], bool))
        if len(with_fields):
            got = header_keys([rows.headers[i] for i in with_fields.tolist()], self.keys)
            keys = _keys_at(keys, with_fields, got)
        return keys

    # ---- where turns may be cut, and what released turns leave ---------------------------------
    def _cut_points(self, cb: _ConnectionBatch, paths: _Paths) -> np.ndarray:
        """Per connection, the segment (an index into ``cb.s``) its turns may be cut before,
        or -1: the first segment of its last call turn that follows a return turn; for a
        connection read by a protocol parser, the last such one where a message starts
        right at the cut both ways, else the one before it (:meth:`_release`)."""
        k = cb.kept
        o = np.lexsort((k.di, k.kp))  # time order within each connection
        kp, kd = k.kp[o], k.kd[o]
        at = np.flatnonzero(np.r_[False, (kp[1:] == kp[:-1]) & (kd[1:] == 0) & (kd[:-1] == 1)])
        last = np.full(cb.count, -1, np.int64)
        np.maximum.at(last, kp[at], at)
        second = np.full(cb.count, -1, np.int64)
        rest = at[at != last[kp[at]]]
        np.maximum.at(second, kp[rest], rest)
        cut = np.full(cb.count, -1, np.int64)
        for cand in (second, last):  # the last one wins where it is confirmed
            ok = (cand >= 0) & _confirmed(cb, paths, o, cand)
            cut[ok] = k.di[o[cand[ok]]]
        return cut

    def _left_open(
        self,
        pc: _Pieces,
        cb: _ConnectionBatch,
        re: _Reassembly,
        msgs: Messages,
        paths: _Paths,
        final: np.ndarray,
    ) -> list[_Open | None]:
        """What the turns of connections ``final`` leave to their later ones (None for the others)."""
        out: list[_Open | None] = [None] * pc.count
        protos = paths.protos
        final = final & ~(protos == "tls")
        parser = paths.parsed | cb.parser
        by_key = paths.by_key | cb.by_key
        if not final.any():
            return out
        calls = cb.calls + np.bincount(_index_of(cb.flow_ids, msgs.flow[msgs.op == 0]), minlength=pc.count)
        s = pc.s
        f_syn = _first_in_group(pc.starts, ((s.flags & _SYN) != 0) & ((s.flags & _ACK) == 0), len(s))
        syn_seq = np.where(f_syn >= 0, s.seq[np.maximum(f_syn, 0)].astype(np.int64), -1)
        syn_seq = np.where(pc.cont, pc.carried("syn_seq", -1, np.int64), syn_seq)
        fin_a, fin_b = _fins(pc)
        way_end = self._way_ends(pc)
        base, end, trunc = re.base.reshape(-1, 2), re.end.reshape(-1, 2), re.trunc.reshape(-1, 2)
        for p in np.flatnonzero(final).tolist():
            out[p] = _Open(
                flow_id=int(cb.flow_ids[p]), client_is_a=bool(cb.client_is_a[p]), proto=str(protos[p]),
                base=(int(base[p, 0]), int(base[p, 1])), end=(int(end[p, 0]), int(end[p, 1])),
                trunc=(bool(trunc[p, 0]), bool(trunc[p, 1])), calls=int(calls[p]), ctx=cb.ctxs[p],
                syn_seq=int(syn_seq[p]), fin=(bool(fin_a[p]), bool(fin_b[p])),
                way_end=(int(way_end[p, 0]), int(way_end[p, 1])), parser=bool(parser[p]),
                by_key=bool(by_key[p]),
            )  # fmt: skip
        return out


def _keys_at(keys: RequestKeys, at: np.ndarray, got: RequestKeys) -> RequestKeys:
    """``keys`` with rows ``at`` set from ``got`` (the counts added)."""
    cols = {}
    for name in ("trace_id", "span_id", "request_id"):
        base, new = getattr(keys, name), getattr(got, name)
        col = base.astype(np.result_type(base.dtype, new.dtype))
        col[at] = new
        cols[name] = col
    headers = keys.headers.copy()
    headers[at] = got.headers
    malformed = keys.malformed.copy()
    malformed[at] = got.malformed
    return RequestKeys(**cols, headers=headers, malformed=malformed)


def _index_of(ids: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Where each of ``values`` is in ``ids`` (distinct; every value is one of them)."""
    o = np.argsort(ids, kind="stable")
    return o[np.minimum(np.searchsorted(ids[o], values), max(len(ids) - 1, 0))]


def _same_messages(a: Messages, b: Messages, flows: np.ndarray) -> np.ndarray:
    """Per flow of ``flows``: whether ``a`` and ``b`` hold the same messages of it."""

    def of_flows(m: Messages) -> tuple[Messages, np.ndarray]:
        m = m.take(np.flatnonzero(np.isin(m.flow, flows)))
        m = m.take(np.lexsort((m.nbytes, m.id, m.op, m.ts_ns, m.flow)))
        return m, _index_of(flows, m.flow)

    (a, fa), (b, fb) = of_flows(a), of_flows(b)
    same = np.bincount(fa, minlength=len(flows)) == np.bincount(fb, minlength=len(flows))
    a, b = a.take(np.flatnonzero(same[fa])), b.take(np.flatnonzero(same[fb]))
    differ = np.zeros(len(a), bool)
    for name in _MSG_FIELDS:
        if name != "payload":
            differ |= np.asarray(getattr(a, name) != getattr(b, name), bool)
    same[_index_of(flows, a.flow[differ])] = False
    return same


def _call_numbers(is_call: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Per turn (grouped by connection, ``first`` starting each), the number of call turns
    up to it in its connection: a return has its call's number, 0 before any call."""
    ccount = np.cumsum(is_call)
    return ccount - np.maximum.accumulate(np.where(first, ccount - is_call, 0))


def _pair_in_order(
    cb: _ConnectionBatch, rows: _ParsedRows, idx: np.ndarray, ts: np.ndarray, pairs: _Pairs
) -> np.ndarray:
    """Rows ``idx`` (connections without protocol ids or gaps; grouped by connection,
    direction, offset): call k of a connection pairs with its return k. Per connection,
    whether every call was answered (True for the connections not paired here)."""
    if not len(idx):
        return np.ones(cb.count, bool)
    p, d = rows.piece[idx], rows.dirs[idx]
    grp = p * 2 + d
    start = np.r_[True, grp[1:] != grp[:-1]]
    k = np.arange(len(idx)) - np.maximum.accumulate(np.where(start, np.arange(len(idx)), 0))
    # Returns seen before a connection's first call (capture began mid-exchange) answer
    # nothing: count the return ordinals from the first return after that call. After
    # released turns with calls none is early.
    t = ts[idx]
    first_call = np.full(cb.count, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(first_call, p[d == 0], t[d == 0])
    first_call[cb.calls > 0] = np.iinfo(np.int64).min
    early = (d == 1) & (t < first_call[p])
    k = np.where(d == 1, k - np.bincount(p[early], minlength=cb.count)[p], k) + cb.calls[p]
    ids = (cb.flow_ids[p] << np.uint64(24)) | ((k + 1).astype(np.uint64) & np.uint64(0xFFFFFF))
    is_call = d == 0
    pairs.op[idx] = np.where(is_call, 0, 1)
    # The call with the same ordinal in the same connection, if there is one.
    call_rows, ret_rows = idx[is_call], idx[~is_call]
    call_key = p[is_call] * (1 << 32) + k[is_call]
    ret_key = np.where(early[~is_call], -1, p[~is_call] * (1 << 32) + k[~is_call])
    srt = np.argsort(call_key)
    pos = np.minimum(np.searchsorted(call_key[srt], ret_key), max(len(srt) - 1, 0))
    found = call_key[srt][pos] == ret_key if len(srt) else np.zeros(len(ret_key), bool)
    pairs.mid[idx] = ids
    pairs.has[call_rows] = True
    pairs.has[ret_rows] = found
    if len(srt):
        pairs.labels[ret_rows[found]] = pairs.labels[call_rows[srt][pos[found]]]
    pairs.mid[ret_rows[~found]] = 0
    calls = np.bincount(p[is_call], minlength=cb.count)
    answered = calls == np.bincount(p[~is_call & ~early], minlength=cb.count)
    return answered & _in_order_is_by_time(p, d, early, t, rows.off[idx], cb.count)


def _in_order_is_by_time(
    p: np.ndarray, d: np.ndarray, early: np.ndarray, t: np.ndarray, off: np.ndarray, count: int
) -> np.ndarray:
    """Per connection, whether pairing call k with return k gives what pairing in time
    order gives (each return answers the oldest call not answered yet): every return
    (not before the first call) comes after more calls than returns. So a connection
    whose later turns are paired in time order (a protocol id or a gap comes) pairs its
    released ones the same."""
    o = np.lexsort((off, t, p))
    po, call, ret = p[o], (d == 0)[o], ((d == 1) & ~early)[o]
    start = np.r_[True, po[1:] != po[:-1]]
    base = np.maximum.accumulate(np.where(start, np.arange(len(o)), 0))
    calls_before = np.cumsum(call) - call
    rets_before = np.cumsum(ret) - ret
    waiting = (calls_before - calls_before[base]) - (rets_before - rets_before[base])
    unanswered = np.zeros(count, bool)
    unanswered[po[ret & (waiting <= 0)]] = True
    return ~unanswered


def _confirmed(cb: _ConnectionBatch, paths: _Paths, o: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """Per connection, whether cutting before kept segment ``o[cand]`` (``o``: the kept
    segments in time order per connection) leaves its parsed messages whole: each way, a
    message starts where the bytes before the cut end (True where no parser reads it)."""
    need = paths.parsed & (cand >= 0)
    if not need.any():
        return ~need
    k = cb.kept
    kp = k.kp[o]
    before = need[kp] & (np.arange(len(o)) < cand[kp])
    reach = np.full(2 * cb.count, -1, np.int64)
    np.maximum.at(reach, kp[before] * 2 + k.kd[o][before], (k.sstart + k.kcap)[o][before])
    rows = paths.rows
    starts = ((rows.piece * 2 + rows.dirs).astype(np.int64) << 40) | rows.off
    hit = np.isin((np.arange(2 * cb.count, dtype=np.int64) << 40) | reach, starts) & (reach >= 0)
    return ~need | hit.reshape(-1, 2).all(axis=1)


def _opens_with_request(s: Segments, di: np.ndarray, way: np.ndarray, count: int) -> np.ndarray:
    """Per connection, whether its first data either way (segments ``di``, of way ``way``:
    ``2 * connection + direction``) starts with a request method and a space."""
    first = np.full(2 * count, -1, np.int64)
    first[way[::-1]] = di[::-1]
    f = first[first >= 0]
    out = np.zeros(2 * count, bool)
    if not len(f) or not len(s.data):  # no data, or none of it captured
        return out.reshape(-1, 2).any(axis=1)
    head = s.data[np.minimum(s.pay_off[f][:, None] + np.arange(16), len(s.data) - 1)]
    at = np.arange(len(f)) * 16
    out[first >= 0] = starts_with_method(
        head.tobytes(), at, at + np.minimum(s.pay_cap[f], 16), REQUEST_METHODS
    )
    return out.reshape(-1, 2).any(axis=1)


def _fins(pc: _Pieces) -> tuple[np.ndarray, np.ndarray]:
    """Per connection, whether a FIN was seen from endpoint a, from b (here or with the
    turns it released)."""
    fin = (pc.s.flags & _FIN) != 0
    before = pc.carried("fin", (False, False), bool)
    return (np.logical_or.reduceat(fin & pc.from_a, pc.starts) | before[:, 0],
            np.logical_or.reduceat(fin & ~pc.from_a, pc.starts) | before[:, 1])  # fmt: skip

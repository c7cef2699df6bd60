"""TCP reassembly and message boundaries for whole batches of segments.

Segments are grouped into connections with sorts, not per-packet Python: a flow key
hashes the two endpoints in canonical order; within a flow, a new SYN (a sequence
number not seen before) starts a new connection, so a reused port pair is two
connections. A connection is processed once it is over (FIN both ways, RST, idle for
``idle_timeout_ns``, a newer connection on the same ports, or the end of input);
until then its segments are carried to the next batch, so memory is bounded by the
open connections, not by the file.

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

import heapq
from collections import Counter
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from capture._http1 import check_turns, starts_with_method
from capture._spans import join_spans
from capture.decode import PROTO_TCP, PROTO_UDP, Segments, empty_segments
from capture.protocols import (
    DNS_PORTS,
    NO_REPLY,
    NOT_DNS_PORTS,
    PROTOCOLS,
    REQUEST_METHODS,
    detect_tcp,
    parse_dns_datagram,
    parse_stream,
    tls_records,
    tls_server_name,
)
from tracefmt.hashing import mix64

__all__ = ["FlowAssembler", "FlowStats", "Messages", "flow_shards", "trace_order"]

_FIN, _SYN, _RST, _ACK = 0x01, 0x02, 0x04, 0x10
# How far behind a closed connection's end a late copy may start: a TCP window. A new
# connection on the same ports without a SYN in the capture is taken for late copies
# only if both its directions start that close behind the old ends (about 1 in 2^32).
_LATE_WINDOW = 1 << 16


def _seq_diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a - b`` for 32-bit sequence numbers that may have wrapped (RFC 1982): within
    plus or minus 2^31."""
    return ((a - b + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def _seq_end(s: Segments, flags: np.ndarray) -> np.ndarray:
    """Where each segment's sequence space ends (its data, and one for a SYN or FIN)."""
    extra = ((flags & (_SYN | _FIN)) != 0).astype(np.int64)
    return (s.seq.astype(np.int64) + s.pay_len.astype(np.int64) + extra) & 0xFFFFFFFF


_PROTO_CODE = {p: i for i, p in enumerate(PROTOCOLS)}
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
    proto: np.ndarray  # index into PROTOCOLS
    label: np.ndarray  # object: str or None
    payload: np.ndarray  # object: the message's captured bytes, or None unless asked for
    # Where the client endpoint is the sender (calls) or the receiver (returns): the server side.
    server_is_dst: np.ndarray

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
    contiguous bytes (``run_start``), and where its bytes start in the joined stream
    (``sstart``)."""

    di: np.ndarray
    kp: np.ndarray
    kd: np.ndarray
    klen: np.ndarray
    run_start: np.ndarray
    sstart: np.ndarray
    kcap: np.ndarray

    def take(self, idx: np.ndarray) -> _Kept:
        """The segments ``idx`` of these."""
        return _Kept(**{f.name: getattr(self, f.name)[idx] for f in fields(self)})


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
    >>> m.op.tolist(), m.ts_ns.tolist(), [PROTOCOLS[p] for p in m.proto], list(m.label)
    ([0, 1], [2, 3], ['http', 'http'], ['GET /', 'GET /'])
    """

    def __init__(
        self, *, idle_timeout_ns: int = 60_000_000_000, max_carry: int = 1 << 17, keep_payload: bool = False
    ) -> None:
        self.keep_payload = keep_payload
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
        # Connections closed (FIN both ways or RST) in an earlier batch: flow key ->
        # (next sequence number each way, -1 unknown; close time), to know a late
        # retransmission of theirs from a new connection on the same ports. Forgotten
        # by time (``_forget_closed``), not by count, so what one connection's entry
        # does never depends on how many others closed.
        self._closed: dict[int, tuple[int, int, int]] = {}
        self._closed_times: list[tuple[int, int]] = []  # heap of (close time, flow key)

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
        heap, closed = self._closed_times, self._closed
        horizon = self._clock_before - self.idle_timeout_ns
        while heap and heap[0][0] < horizon:
            t, k = heapq.heappop(heap)
            entry = closed.get(k)
            if entry is not None and entry[2] == t:  # not closed again since
                del closed[k]

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
        proto = np.full(n, _PROTO_CODE["udp"], np.int8)
        label = np.full(n, None, object)
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
            proto[i] = _PROTO_CODE["dns"]
            label[i] = lab
            if s.sport[i] == s.dport[i] == _MDNS_PORT:
                continue  # multicast DNS: queries and announcements to the group, sends
            op[i] = 1 if is_resp else 0
            mid[i] = (int(flow[i]) << 24) | txid
            has[i] = True
            server_is_dst[i] = not is_resp
        for p in np.unique(proto).tolist():
            self.stats.messages_by_proto[PROTOCOLS[p]] += int((proto == p).sum())
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
        )

    # ---- TCP --------------------------------------------------------------------------------
    def _tcp(self, s: Segments, final: bool) -> Messages:
        n = len(s)
        key, from_a = _flow_keys(s)
        order = np.argsort(key, kind="stable")  # stable: time order kept within a flow
        s = s.take(order)
        key, from_a = key[order], from_a[order]
        flags = s.flags
        flow_start = np.r_[True, key[1:] != key[:-1]]
        synonly = ((flags & _SYN) != 0) & ((flags & _ACK) == 0)
        # A SYN with a new sequence number on the same ports starts a new connection.
        si = np.flatnonzero(synonly)
        new_conn = np.zeros(n, bool)
        if len(si):
            same_as_prev = np.r_[False, (key[si[1:]] == key[si[:-1]]) & (s.seq[si[1:]] == s.seq[si[:-1]])]
            new_conn[si[~same_as_prev]] = True
        piece_start = flow_start | new_conn
        starts = np.flatnonzero(piece_start)
        piece = np.cumsum(piece_start) - 1
        npieces = len(starts)
        ends = np.r_[starts[1:], n]
        late = self._late_copies(s, key, from_a, flags, starts, ends)
        if late is not None:
            self.stats.after_close += int(late.sum())
            if late.all():
                return _empty_messages()
            return self._tcp(s.take(np.flatnonzero(~late)), final)
        last_ts = np.maximum.reduceat(s.ts_ns, starts)
        # The capture clock, learnt from every flow: what is idle does not depend on
        # which flows this assembler holds.
        now = int(s.ts_ns.max()) if self._clock is None else max(self._clock, int(s.ts_ns.max()))

        fin_a = np.logical_or.reduceat(((flags & _FIN) != 0) & from_a, starts)
        fin_b = np.logical_or.reduceat(((flags & _FIN) != 0) & ~from_a, starts)
        rst = np.logical_or.reduceat((flags & _RST) != 0, starts)
        has_next = np.r_[~flow_start[starts[1:]], False]
        done = (
            final
            | has_next
            | (fin_a & fin_b)
            | rst
            | (last_ts < now - self.idle_timeout_ns)
            | ((ends - starts) > self.max_carry)
        )
        if not done.all():
            keep = ~done[piece]
            self._pending = s.take(np.flatnonzero(keep))  # flows stay in time order
            sel = np.flatnonzero(~keep)
            if not len(sel):
                return _empty_messages()
            s = s.take(sel)
            key, from_a, flags, synonly = key[sel], from_a[sel], flags[sel], synonly[sel]
            piece_start = np.r_[True, (piece[sel][1:] != piece[sel][:-1])]
            starts = np.flatnonzero(piece_start)
            piece = np.cumsum(piece_start) - 1
            npieces = len(starts)
            n = len(s)
        self.stats.connections += npieces
        # The pieces processed now are the done ones, in order.
        self._remember_closed(s, key, from_a, flags, starts, piece, ((fin_a & fin_b) | rst)[done])
        return self._messages(s, key, from_a, flags, synonly, starts, piece, npieces)

    def _remember_closed(
        self,
        s: Segments,
        key: np.ndarray,
        from_a: np.ndarray,
        flags: np.ndarray,
        starts: np.ndarray,
        piece: np.ndarray,
        closed: np.ndarray,
    ) -> None:
        """Note the next sequence number each way of the connections that closed."""
        if not closed.any():
            return
        n = len(s)
        g = piece * 2 + (~from_a).astype(np.int64)  # way 0: from a, 1: from b
        seq_end = _seq_end(s, flags)
        # The furthest end of each way, wrap-aware: relative to the way's first segment.
        first = np.full(2 * len(starts), -1, np.int64)
        first[g[::-1]] = np.arange(n)[::-1]
        ref = seq_end[np.maximum(first, 0)]
        rel = _seq_diff(seq_end, ref[g])
        furthest = np.full(2 * len(starts), np.iinfo(np.int64).min)
        np.maximum.at(furthest, g, rel)
        way_end = np.where(first >= 0, (ref + furthest) & 0xFFFFFFFF, -1).reshape(-1, 2)
        last_ts = s.ts_ns[np.r_[starts[1:], n] - 1]
        p = np.flatnonzero(closed)
        keys, times = key[starts[p]].tolist(), last_ts[p].tolist()
        self._closed.update(
            zip(keys, zip(way_end[p, 0].tolist(), way_end[p, 1].tolist(), times, strict=True), strict=True)
        )
        for t, k in zip(times, keys, strict=True):  # a push per closed connection
            heapq.heappush(self._closed_times, (t, k))

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
        if not self._closed:
            return None
        heads = key[starts].tolist()
        closed = self._closed
        known = [p for p, h in enumerate(heads) if h in closed]  # a lookup per connection
        if not known:
            return None
        late = np.zeros(len(s), bool)
        seq_end = _seq_end(s, flags)
        syn = (flags & _SYN) != 0
        for p in known:
            a, b = int(starts[p]), int(ends[p])
            entry = closed.get(heads[p])
            if entry is None:
                continue  # dropped for an earlier piece on the same ports
            end_a, end_b, closed_at = entry
            if syn[a:b].any() or int(s.ts_ns[a]) > closed_at + self.idle_timeout_ns:
                del closed[heads[p]]  # a new connection on these ports, or too late to be a copy
                continue
            stored = np.where(from_a[a:b], end_a, end_b)
            behind = (stored - seq_end[a:b]) & 0xFFFFFFFF
            if np.all((stored >= 0) & (behind <= _LATE_WINDOW)):
                late[a:b] = True
        return late if late.any() else None

    def _client_is_a(
        self, s: Segments, from_a: np.ndarray, flags: np.ndarray, synonly: np.ndarray, starts: np.ndarray
    ) -> np.ndarray:
        n = len(s)
        f_syn = _first_in_group(starts, synonly, n)
        synack = ((flags & _SYN) != 0) & ((flags & _ACK) != 0)
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
        return client_is_a

    def _messages(
        self,
        s: Segments,
        key: np.ndarray,
        from_a: np.ndarray,
        flags: np.ndarray,
        synonly: np.ndarray,
        starts: np.ndarray,
        piece: np.ndarray,
        npieces: int,
    ) -> Messages:
        n = len(s)
        # Connection ids from the ports, addresses and the client's initial sequence number,
        # so two capture points that saw the same connection give it the same id.
        f_syn = _first_in_group(starts, synonly, n)
        # Without a SYN, the first packet's sequence number: two records of one port pair
        # (split by idleness) must not share ids.
        isn = np.where(f_syn >= 0, s.seq[np.maximum(f_syn, 0)], s.seq[starts]).astype(np.uint64)
        isn |= np.where(f_syn >= 0, 0, 1 << 32).astype(np.uint64)
        flow_ids = mix64(key[starts] ^ mix64(isn)) >> np.uint64(24)
        client_is_a = self._client_is_a(s, from_a, flags, synonly, starts)
        d = (from_a != client_is_a[piece]).astype(np.int64)  # 0 client->server, 1 back
        tidx = np.arange(n)
        g = piece * 2 + d
        # Initial sequence number per direction: from the SYN (or SYN-ACK) when seen.
        syn_any = (flags & _SYN) != 0
        has_data = s.pay_len > 0
        ng = 2 * npieces
        base = np.zeros(ng, np.int64)
        from_syn = np.zeros(ng, bool)
        si = np.flatnonzero(syn_any)
        # The last SYN of a direction wins (a retransmitted SYN carries the same number).
        base[g[si]] = s.seq[si].astype(np.int64) + 1
        from_syn[g[si]] = True
        di = np.flatnonzero(has_data)
        if not len(di):
            return _empty_messages()
        gd = g[di]
        first_data = np.full(ng, -1, np.int64)
        first_data[gd[::-1]] = di[::-1]  # first data segment (time order) of each group
        no_syn = ~from_syn & (first_data >= 0)
        base[no_syn] = s.seq[first_data[no_syn]].astype(np.int64)
        rel = _seq_diff(s.seq[di].astype(np.int64), base[gd])
        plen = s.pay_len[di]
        # Order each direction's data by sequence number, earliest copy first.
        o = np.lexsort((tidx[di], rel, gd))
        di, gd, rel, plen = di[o], gd[o], rel[o], plen[o]
        end = rel + plen
        m = len(di)
        gstart = np.r_[True, gd[1:] != gd[:-1]]
        big = np.int64(1) << np.int64(34)
        shift = np.int64(1) << np.int64(32)
        acc = np.maximum.accumulate(gd * big + end + shift)
        prev_max = np.empty(m, np.int64)
        prev_max[1:] = acc[:-1] - gd[1:] * big - shift
        first_ref = np.where(from_syn[gd], 0, rel)
        prev_max[gstart] = first_ref[gstart]
        dup = end <= prev_max
        gap = rel > prev_max
        self.stats.retransmitted += int(dup.sum())
        self.stats.gaps += int(gap.sum())
        ooo = np.r_[False, (di[1:] < di[:-1]) & ~gstart[1:]]
        self.stats.out_of_order += int((ooo & ~dup).sum())
        keep = ~dup
        di, gd, rel, end, gap, prev_max = di[keep], gd[keep], rel[keep], end[keep], gap[keep], prev_max[keep]
        if not len(di):
            return _empty_messages()  # every byte was seen before (e.g. data on a SYN, repeated)
        kstart = np.maximum(rel, prev_max)
        skip = kstart - rel
        klen = end - kstart
        kcap = np.clip(s.pay_cap[di] - skip, 0, klen)
        trunc_before = np.r_[False, kcap[:-1] < klen[:-1]] & np.r_[False, gd[1:] == gd[:-1]]
        run_start = np.r_[True, gd[1:] != gd[:-1]] | gap | trunc_before
        # The captured bytes of each direction in sequence order, all directions back to back.
        sstart = np.zeros(len(di), np.int64)
        np.cumsum(kcap[:-1], out=sstart[1:])
        stream = join_spans(s.data, s.pay_off[di] + skip, kcap).tobytes()

        kp = gd // 2
        kd = gd % 2
        # Protocol of each connection from the first bytes of each direction.
        gfirst = np.full(ng, -1, np.int64)
        gfirst[gd[::-1]] = np.arange(len(gd))[::-1]
        protos = np.full(npieces, "tcp", object)
        pf = starts  # first segment of each piece, for its ports
        cport = np.where(from_a[pf] == client_is_a, s.sport[pf], s.dport[pf])
        sport_ = np.where(from_a[pf] == client_is_a, s.dport[pf], s.sport[pf])
        # Where each direction's bytes end in the stream, so a look never crosses into the next.
        gend = np.zeros(ng, np.int64)
        gend[gd] = sstart + kcap  # the last segment of a group (in stream order) wins
        look = np.minimum(sstart[np.maximum(gfirst, 0)] + 256, gend)
        # A client that opens with a request line is HTTP, whatever else is said (the
        # first test of detect_tcp, for all connections at once); the others get a look.
        c_first = gfirst[0::2]
        http_open = (c_first >= 0) & starts_with_method(
            stream, sstart[np.maximum(c_first, 0)], look[0::2], REQUEST_METHODS
        )
        protos[http_open] = "http"
        for p in np.flatnonzero(~http_open).tolist():  # per connection: a look at its first bytes
            c, v = gfirst[2 * p], gfirst[2 * p + 1]
            cb = stream[sstart[c] : look[2 * p]] if c >= 0 else b""
            sb = stream[sstart[v] : look[2 * p + 1]] if v >= 0 else b""
            protos[p] = detect_tcp(cb, sb, int(cport[p]), int(sport_[p]))

        parsed = (protos != "tcp") & (protos != "tls")
        tls = protos == "tls"
        out: list[Messages] = []
        generic = ~parsed[kp] & ~tls[kp]
        kept = _Kept(di, kp, kd, klen, run_start, sstart, kcap)
        if tls.any():
            out.append(self._tls(s, kept.take(np.flatnonzero(tls[kp])), flow_ids, stream))
        extra_generic: list[int] = []
        http = protos == "http"
        if http.any() and not self.keep_payload:
            fast, handled = self._http_turns(s, di, kp, kd, klen, kcap, run_start, sstart, stream, http,
                                             flow_ids)  # fmt: skip
            if len(fast):
                out.append(fast)
                parsed &= ~handled
                self.stats.flows_by_proto["http"] += int(handled.sum())
                counted_fast = handled
            else:
                counted_fast = np.zeros(npieces, bool)
        else:
            counted_fast = np.zeros(npieces, bool)
        if parsed.any():
            pm, fallback = self._parsed_messages(
                s,
                di,
                kp,
                kd,
                run_start,
                sstart,
                kcap,
                klen,
                stream,
                protos,
                parsed,
                flow_ids,
                client_is_a,
                from_a,
                starts,
            )
            out.append(pm)
            extra_generic = fallback
        if extra_generic:
            generic |= np.isin(kp, extra_generic)
            for p in extra_generic:
                protos[p] = "tcp"
        for p in np.flatnonzero(np.isin(np.arange(npieces), np.unique(kp)) & ~counted_fast).tolist():
            self.stats.flows_by_proto[protos[p]] += 1
        if generic.any():
            out.append(self._turns(s, kept.take(np.flatnonzero(generic)), flow_ids, stream))
        return Messages.concat(out)

    def _http_turns(
        self,
        s: Segments,
        di: np.ndarray,
        kp: np.ndarray,
        kd: np.ndarray,
        klen: np.ndarray,
        kcap: np.ndarray,
        run_start: np.ndarray,
        sstart: np.ndarray,
        stream: bytes,
        http: np.ndarray,
        flow_ids: np.ndarray,
    ) -> tuple[Messages, np.ndarray]:
        """HTTP connections where every turn is exactly one message, found without the parser.

        The common case (one request, then its response, no pipelining, no chunking, no
        gaps) is checked for all turns at once (:func:`capture._http1.check_turns`); a
        connection with any turn that does not check out is left to the full parser.
        Returns the messages and the connections handled.
        """
        npieces = len(http)
        gstart = np.r_[True, (kp[1:] != kp[:-1]) | (kd[1:] != kd[:-1])]
        elig = http.copy()
        elig[np.unique(kp[run_start & ~gstart])] = False  # gaps: the parser's business
        sel = np.flatnonzero(elig[kp])
        if not len(sel):
            return _empty_messages(), np.zeros(npieces, bool)
        o = sel[np.lexsort((di[sel], kp[sel]))]  # time order within each connection
        op_, od = kp[o], kd[o]
        pstart = np.r_[True, op_[1:] != op_[:-1]]
        tix = np.flatnonzero(pstart | np.r_[True, od[1:] != od[:-1]])
        lo = np.minimum.reduceat(sstart[o], tix)
        hi = np.maximum.reduceat(sstart[o] + kcap[o], tix)
        whole = (np.add.reduceat(kcap[o], tix) == hi - lo) & (np.add.reduceat(klen[o], tix) == hi - lo)
        tp, td = op_[tix], od[tix]
        nt = len(tix)
        ok = whole.copy()
        labels = np.full(nt, None, object)
        w = np.flatnonzero(whole)
        ok[w], labels[w] = check_turns(stream, lo[w], hi[w], td[w] == 0)
        bad = np.zeros(npieces, bool)
        bad[tp[~ok]] = True
        handled = elig & ~bad
        keep = handled[tp]
        if not keep.any():
            return _empty_messages(), handled
        tix, tp, td, lo, hi, labels = tix[keep], tp[keep], td[keep], lo[keep], hi[keep], labels[keep]
        pst = np.r_[True, tp[1:] != tp[:-1]]
        is_call = td == 0
        ccount = np.cumsum(is_call)
        base = np.maximum.accumulate(np.where(pst, ccount - is_call, 0))
        call_no = ccount - base
        has_id = call_no > 0
        mid = (flow_ids[tp] << np.uint64(24)) | (call_no.astype(np.uint64) & np.uint64(0xFFFFFF))
        # A return is labelled like the call it answers (the last call turn before it).
        idx = np.arange(len(tp))
        last_call = np.maximum.accumulate(np.where(is_call, idx, -1))
        first_of_piece = np.maximum.accumulate(np.where(pst, idx, 0))
        ans = (~is_call) & (last_call >= first_of_piece)
        labels[ans] = labels[last_call[ans]]
        seg = di[o[tix]]
        self.stats.messages_by_proto["http"] += len(tix)
        return (
            _at_segments(
                s,
                seg,
                op=np.where(is_call, 0, 1).astype(np.int8),
                id=np.where(has_id, mid, 0).astype(np.uint64),
                has_id=has_id,
                nbytes=hi - lo,
                flow=flow_ids[tp],
                proto=np.full(len(tix), _PROTO_CODE["http"], np.int8),
                label=labels,
                payload=np.full(len(tix), None, object),
                server_is_dst=is_call,
            ),
            handled,
        )

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
        s: Segments,
        kept: _Kept,
        flow_ids: np.ndarray,
        stream: bytes,
        *,
        proto: str = "tcp",
        labels: dict[int, str | None] | None = None,
        first_call: int = 1,
    ) -> Messages:
        """The turn-taking rule over kept data segments of generic connections (vectorized).

        ``proto`` names the connections' protocol, ``labels`` gives each connection's label
        (by piece), and calls are numbered from ``first_call`` within each connection."""
        k = kept.take(np.lexsort((kept.di, kept.kp)))  # time order within each connection
        di, kp, kd, klen, gap, sstart, kcap = k.di, k.kp, k.kd, k.klen, k.run_start, k.sstart, k.kcap
        pstart = np.r_[True, kp[1:] != kp[:-1]]
        turn = pstart | np.r_[True, kd[1:] != kd[:-1]] | gap
        ts = np.flatnonzero(turn)
        nb = np.add.reduceat(klen, ts)
        tkp, tkd = kp[ts], kd[ts]
        is_call = tkd == 0
        tp_start = pstart[ts]
        # Number calls within each connection; a return takes its preceding call's number.
        ccount = np.cumsum(is_call)
        base = np.maximum.accumulate(np.where(tp_start, ccount - is_call, 0))
        call_no = ccount - base
        has_id = call_no > 0
        call_no = call_no + (first_call - 1)
        mid = (flow_ids[tkp] << np.uint64(24)) | (call_no.astype(np.uint64) & np.uint64(0xFFFFFF))
        seg = di[ts]
        self.stats.messages_by_proto[proto] += len(ts)
        label = np.full(len(ts), None, object)
        if labels:
            label[:] = [labels.get(int(p)) for p in tkp.tolist()]
        return _at_segments(
            s,
            seg,
            op=np.where(is_call, 0, 1).astype(np.int8),
            id=np.where(has_id, mid, 0).astype(np.uint64),
            has_id=has_id,
            nbytes=nb,
            flow=flow_ids[tkp],
            proto=np.full(len(ts), _PROTO_CODE[proto], np.int8),
            label=label,
            payload=self._turn_payloads(stream, sstart, kcap, ts),
            server_is_dst=is_call,
        )

    def _tls(self, s: Segments, kept: _Kept, flow_ids: np.ndarray, stream: bytes) -> Messages:
        """TLS connections: the handshake as one call (from the ClientHello) and its
        return (from the server's first flight), labelled ``TLS <server name>``; the
        encrypted records after it by the turn-taking rule, labelled with the server
        name; alerts (close_notify) left out, they answer nothing.

        The handshake lasts until the client's first application-data record: every
        segment before it, either way (the client's Finished, TLS 1.3's session tickets
        sent ahead of the first request), belongs to the handshake's call or return.
        """
        di, kp, kd, klen = kept.di, kept.kp, kept.kd, kept.klen
        first_type, alert, names = _tls_segments(kp, kd, kept.run_start, kept.sstart, kept.kcap, stream)
        ts = s.ts_ns[di]
        npieces = int(kp.max()) + 1
        data_from = np.full(npieces, np.iinfo(np.int64).max, np.int64)
        first_data = (kd == 0) & (first_type == 23)
        np.minimum.at(data_from, kp[first_data], ts[first_data])
        handshake = (ts < data_from[kp]) & ~alert
        turns = ~handshake & ~alert
        parts = [
            self._tls_handshakes(
                s, di[handshake], kp[handshake], kd[handshake], klen[handshake], flow_ids, names
            )
        ]
        if turns.any():
            t = np.flatnonzero(turns)
            parts.append(
                self._turns(s, kept.take(t), flow_ids, stream, proto="tls", labels=names, first_call=2)
            )
        return Messages.concat(parts)

    def _tls_handshakes(
        self,
        s: Segments,
        di: np.ndarray,
        kp: np.ndarray,
        kd: np.ndarray,
        klen: np.ndarray,
        flow_ids: np.ndarray,
        names: dict[int, str],
    ) -> Messages:
        """One call per connection at its first handshake segment from the client, one
        return at the server's first; each with the bytes of its side of the handshake."""
        if not len(di):
            return _empty_messages()
        ts = s.ts_ns[di]
        side = kp * 2 + kd
        order = np.lexsort((ts, side))
        first = order[np.r_[True, side[order][1:] != side[order][:-1]]]
        nbytes = np.bincount(side, weights=klen, minlength=int(side.max()) + 1)[side[first]].astype(np.int64)
        pk, call = kp[first], kd[first] == 0
        self.stats.messages_by_proto["tls"] += len(first)
        return _at_segments(
            s,
            di[first],
            op=np.where(call, 0, 1).astype(np.int8),
            id=(flow_ids[pk] << np.uint64(24)) | np.uint64(1),
            has_id=np.ones(len(first), bool),
            nbytes=nbytes,
            flow=flow_ids[pk],
            proto=np.full(len(first), _PROTO_CODE["tls"], np.int8),
            label=np.array(
                [f"TLS {names[p]}" if p in names else "TLS" for p in pk.tolist()] + [None], object
            )[:-1],
            payload=np.full(len(first), None, object),
            server_is_dst=call,
        )

    @staticmethod
    def _pair_in_order(
        rows: np.ndarray,
        ts: np.ndarray,
        pieces: np.ndarray,
        dirs: np.ndarray,
        flow_ids: np.ndarray,
        op: np.ndarray,
        mid: np.ndarray,
        has: np.ndarray,
        labels: np.ndarray,
    ) -> None:
        """Call k of a connection pairs with its return k (rows grouped by piece, direction, offset)."""
        p, d = pieces[rows], dirs[rows]
        grp = p * 2 + d
        start = np.r_[True, grp[1:] != grp[:-1]]
        first = np.maximum.accumulate(np.where(start, np.arange(len(rows)), 0))
        k = np.arange(len(rows)) - first  # ordinal within (piece, direction)
        # Returns seen before a connection's first call (capture began mid-exchange) answer
        # nothing: count the return ordinals from the first return after that call.
        t = ts[rows]
        first_call = np.full(int(p.max()) + 1, np.iinfo(np.int64).max, np.int64)
        np.minimum.at(first_call, p[d == 0], t[d == 0])
        early = (d == 1) & (t < first_call[p])
        n_early = np.zeros(len(first_call), np.int64)
        np.add.at(n_early, p[early], 1)
        k = np.where(d == 1, k - n_early[p], k)
        fid = flow_ids[p]
        ids = (fid << np.uint64(24)) | ((k + 1).astype(np.uint64) & np.uint64(0xFFFFFF))
        is_call = d == 0
        op[rows] = np.where(is_call, 0, 1)
        # The call with the same ordinal in the same piece, if there is one.
        call_rows = rows[is_call]
        call_key = p[is_call] * (1 << 32) + k[is_call]
        ret_key = np.where(early[~is_call], -1, p[~is_call] * (1 << 32) + k[~is_call])
        srt = np.argsort(call_key)
        pos = np.searchsorted(call_key[srt], ret_key)
        pos_c = np.minimum(pos, max(len(srt) - 1, 0))
        found = (
            (pos < len(srt)) & (call_key[srt][pos_c] == ret_key) if len(srt) else np.zeros(len(ret_key), bool)
        )
        mid[rows] = ids
        has[rows[is_call]] = True
        ret_rows = rows[~is_call]
        has[ret_rows] = found
        if len(srt):
            labels[ret_rows[found]] = labels[call_rows[srt][pos_c[found]]]
        mid[ret_rows[~found]] = 0

    def _parsed_messages(
        self,
        s: Segments,
        di: np.ndarray,
        kp: np.ndarray,
        kd: np.ndarray,
        run_start: np.ndarray,
        sstart: np.ndarray,
        kcap: np.ndarray,
        klen: np.ndarray,
        stream: bytes,
        protos: np.ndarray,
        parsed: np.ndarray,
        flow_ids: np.ndarray,
        client_is_a: np.ndarray,
        from_a: np.ndarray,
        starts: np.ndarray,
    ) -> tuple[Messages, list[int]]:
        """Protocol parsers over each direction's runs; pairing of calls and returns."""
        sel = np.flatnonzero(parsed[kp] & run_start)
        # run r spans kept segments [rs[r], re[r]) in stream bytes [sstart[rs], sstart[re-1]+kcap)
        rs_all = np.flatnonzero(run_start)
        re_all = np.r_[rs_all[1:], len(run_start)]
        run_end_of = dict(zip(rs_all.tolist(), re_all.tolist(), strict=True))
        rows: list[tuple[int, int, int, int, str | None, int | None, bool]] = []
        # (piece, dir, global offset, length, label, key, first message after a gap)
        ctxs: dict[int, dict] = {}
        fallback: set[int] = set()
        seen_dir: dict[tuple[int, int], int] = {}
        for r in sel.tolist():
            p, dr = int(kp[r]), int(kd[r])
            re_ = run_end_of[r]
            a = int(sstart[r])
            b = int(sstart[re_ - 1] + kcap[re_ - 1])
            ctx = ctxs.setdefault(p, {})
            msgs = parse_stream(protos[p], stream[a:b], dr, ctx)
            after_gap = (p, dr) in seen_dir
            seen_dir[(p, dr)] = seen_dir.get((p, dr), 0) + len(msgs)
            used = 0
            for i, (off, ln, lab, k) in enumerate(msgs):
                rows.append((p, dr, a + off, ln, lab, k, after_gap and i == 0))
                used = max(used, off + ln)
            self.stats.unparsed_bytes += max(0, (b - a) - used)
        # A connection where a direction with data gave no message at all is not that protocol.
        dirs_with_data = set(zip(kp[sel].tolist(), kd[sel].tolist(), strict=True))
        for p, dr in dirs_with_data:
            if seen_dir.get((p, dr), 0) == 0:
                fallback.add(p)
        rows = [r for r in rows if r[0] not in fallback]
        if not rows:
            return _empty_messages(), sorted(fallback)
        off = np.array([r[2] for r in rows], np.int64)
        seg_of = np.searchsorted(sstart, off, side="right") - 1
        seg_of = np.clip(seg_of, 0, len(di) - 1)
        srow = di[seg_of]
        ts = s.ts_ns[srow]
        m = len(rows)
        op = np.zeros(m, np.int8)
        mid = np.zeros(m, np.uint64)
        has = np.zeros(m, bool)
        labels = np.full(m, None, object)
        pieces = np.array([r[0] for r in rows], np.int64)
        dirs = np.array([r[1] for r in rows], np.int8)
        keyed_row = np.array([r[5] is not None for r in rows], bool)
        gap_row = np.array([r[6] for r in rows], bool)
        labels[:] = [r[4] for r in rows]
        # Connections without protocol ids and without gaps pair call k with return k,
        # vectorized; the others go through the ordered loop below.
        hard_pieces = np.unique(pieces[keyed_row | gap_row])
        hard = np.isin(pieces, hard_pieces)
        easy = np.flatnonzero(~hard)
        if len(easy):
            self._pair_in_order(easy, ts, pieces, dirs, flow_ids, op, mid, has, labels)
        # Pair per connection in time order: explicit keys match directly; the rest in order.
        hard_idx = np.flatnonzero(hard)
        order = hard_idx[np.lexsort((off[hard_idx], ts[hard_idx], pieces[hard_idx]))]
        cur_p = -1
        queue: list[int] = []
        keyed: dict[int, int] = {}
        calls = 0
        for i in order.tolist():
            p, dr, _, _, lab, k, after_gap = rows[i]
            if p != cur_p:
                cur_p, queue, keyed, calls = p, [], {}, 0
            fid = int(flow_ids[p])
            if k == NO_REPLY:
                # A message that gets no answer by protocol (a MySQL COM_STMT_CLOSE or its
                # server's greeting, a PostgreSQL Terminate): a send, from its sender.
                op[i] = 2
                labels[i] = lab
                continue
            if dr == 0:
                op[i] = 0
                calls += 1
                labels[i] = lab
                if k is not None:
                    mid[i] = (fid << 24) | (k & 0xFFFFFF)
                    keyed[k] = i
                else:
                    mid[i] = (fid << 24) | (calls & 0xFFFFFF)
                    queue.append(i)
                has[i] = True
            else:
                op[i] = 1
                j = None
                if k is not None:
                    j = keyed.pop(k, None)
                    mid[i] = (fid << 24) | (k & 0xFFFFFF)
                    has[i] = True
                else:
                    if after_gap and len(queue) > 1:
                        # Responses were lost in the gap: answer the newest call, not the oldest.
                        queue = queue[-1:]
                    if queue:
                        j = queue.pop(0)
                        mid[i] = mid[j]
                        has[i] = True
                if j is not None:
                    labels[i] = labels[j]
                elif lab is not None and labels[i] is None:
                    labels[i] = lab
        from_client = dirs == 0  # calls and the sends of commands that get no answer
        sender_is_a = np.where(from_client, client_is_a[pieces], ~client_is_a[pieces])
        # Addresses from the piece's first segment, oriented by direction.
        f = starts[pieces]
        a_hi = np.where(from_a[f], s.src_hi[f], s.dst_hi[f])
        a_lo = np.where(from_a[f], s.src_lo[f], s.dst_lo[f])
        a_pt = np.where(from_a[f], s.sport[f], s.dport[f])
        b_hi = np.where(from_a[f], s.dst_hi[f], s.src_hi[f])
        b_lo = np.where(from_a[f], s.dst_lo[f], s.src_lo[f])
        b_pt = np.where(from_a[f], s.dport[f], s.sport[f])
        piece_codes = np.array([_PROTO_CODE[pr] for pr in protos], np.int8)
        proto_codes = piece_codes[pieces]
        for pc_, cnt in zip(*np.unique(proto_codes, return_counts=True), strict=True):
            self.stats.messages_by_proto[PROTOCOLS[int(pc_)]] += int(cnt)
        return (
            Messages(
                ts_ns=ts,
                src_hi=np.where(sender_is_a, a_hi, b_hi),
                src_lo=np.where(sender_is_a, a_lo, b_lo),
                sport=np.where(sender_is_a, a_pt, b_pt),
                dst_hi=np.where(sender_is_a, b_hi, a_hi),
                dst_lo=np.where(sender_is_a, b_lo, a_lo),
                dport=np.where(sender_is_a, b_pt, a_pt),
                op=op,
                id=mid,
                has_id=has,
                nbytes=np.array([r[3] for r in rows], np.int64),
                flow=flow_ids[pieces],
                proto=proto_codes,
                label=labels,
                payload=np.array([stream[r[2] : r[2] + r[3]] for r in rows] + [None], object)[:-1]
                if self.keep_payload
                else np.full(m, None, object),
                server_is_dst=from_client,
            ),
            sorted(fallback),
        )

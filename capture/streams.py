"""Connection numbers as tshark gives them (``tcp.stream``, ``udp.stream``), and the
connection columns of a trace (``src_ip``, ``src_port``, ``dst_ip``, ``dst_port``,
``stream``).

tshark numbers each conversation (addresses and ports, either way round) in the order of
its first packet, from 0, TCP and UDP counted apart. A TCP conversation gets a new number
when a SYN without ACK starts a connection again on the same ports: its sequence number
differs from the one that direction began with (the SYN's, or one less than the first
packet's when the capture began mid-way). :class:`StreamNumbers` does the same over the
packets it is shown, batch after batch, in the order they were read, with array work per
batch; only the numbers' starts are kept (a conversation, its first packet's time and its
number), so a message finds its number from its endpoints and time.

Where it can differ from tshark: a SYN-only packet sent by a connection's server (never
seen in practice), and a SYN that repeats the first one's sequence number after the
connection was reset (tshark 4.0 gives it the same number too; newer versions may not).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from capture.decode import PROTO_TCP, PROTO_UDP, Segments
from capture.flows import Messages
from capture.naming import format_address
from tracefmt.hashing import mix64

__all__ = ["StreamNumbers", "address_columns", "connection_columns", "conversation_keys"]

_SYN, _ACK = 0x02, 0x10


def conversation_keys(
    src_hi: np.ndarray, src_lo: np.ndarray, sport: np.ndarray,
    dst_hi: np.ndarray, dst_lo: np.ndarray, dport: np.ndarray, proto: np.ndarray | int,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """(conversation key, sent by the canonical first endpoint) of each packet or message:
    one key for both directions (``capture.flows`` hashes its flows the same way).

    Examples
    --------
    >>> u, p = np.array([0], np.uint64), np.array([80], np.uint16)
    >>> a = conversation_keys(u, u + 1, p, u, u + 2, p + 1, 6)[0]
    >>> b = conversation_keys(u, u + 2, p + 1, u, u + 1, p, 6)[0]
    >>> bool(a[0] == b[0])
    True
    """
    lt = (src_hi < dst_hi) | (
        (src_hi == dst_hi) & ((src_lo < dst_lo) | ((src_lo == dst_lo) & (sport <= dport)))
    )
    a_hi, a_lo = np.where(lt, src_hi, dst_hi), np.where(lt, src_lo, dst_lo)
    b_hi, b_lo = np.where(lt, dst_hi, src_hi), np.where(lt, dst_lo, src_lo)
    ports = (np.where(lt, sport, dport).astype(np.uint64) << np.uint64(16)) | np.where(
        lt, dport, sport
    ).astype(np.uint64)
    ports |= np.asarray(proto).astype(np.uint64) << np.uint64(32)
    key = mix64(a_hi ^ mix64(a_lo ^ mix64(b_hi ^ mix64(b_lo ^ mix64(ports)))))
    return key, lt


class StreamNumbers:
    """tshark's ``tcp.stream`` / ``udp.stream`` numbers, learnt from packets in read order.

    Show it every decoded batch (:meth:`see`), all flows, in the order read; then
    :meth:`of` gives each message the number of the connection its first packet belongs to.

    Examples
    --------
    >>> from capture.decode import Decoder
    >>> from capture.source import PacketBatch
    >>> import dpkt
    >>> def pkt(ts, sport, dport, seq, flags, p=6):
    ...     l4 = (dpkt.tcp.TCP(sport=sport, dport=dport, seq=seq, flags=flags) if p == 6
    ...           else dpkt.udp.UDP(sport=sport, dport=dport, data=b"x"))
    ...     ip = dpkt.ip.IP(src=bytes([10, 0, 0, 1]), dst=bytes([10, 0, 0, 2]), p=p, data=l4)
    ...     ip.len = len(bytes(ip))
    ...     return (ts, bytes(ip))
    >>> pk = [pkt(0, 4000, 80, 7, 2), pkt(1, 5353, 53, 0, 0, p=17), pkt(2, 4001, 80, 9, 2),
    ...       pkt(3, 4000, 80, 7, 2), pkt(4, 4000, 80, 99, 2)]  # a SYN again, then port reuse
    >>> sn = StreamNumbers()
    >>> sn.see(Decoder().decode(PacketBatch.from_packets(pk, linktype=101)))
    >>> sn.starts()
    [(6, 0, 0), (17, 1, 0), (6, 2, 1), (6, 4, 2)]
    """

    def __init__(self) -> None:
        # Starts, sorted by (key, time): conversation key, first packet's time, number, transport.
        self._key = np.zeros(0, np.uint64)
        self._ts = np.zeros(0, np.int64)
        self._num = np.zeros(0, np.uint32)
        self._proto = np.zeros(0, np.uint8)
        # Per (key, direction) of a TCP conversation: the sequence number a SYN must repeat
        # to stay in the current connection (sorted by key2 = key ^ direction).
        self._known = np.zeros(0, np.uint64)  # sorted
        self._ref_key = np.zeros(0, np.uint64)
        self._ref_seq = np.zeros(0, np.int64)
        self._next = {PROTO_TCP: 0, PROTO_UDP: 0}

    def starts(self) -> list[tuple[int, int, int]]:
        """(transport, first packet's time, number) of every connection numbered, by number
        within each transport, in the order of their first packets."""
        o = np.lexsort((self._num, self._ts))
        return [
            (int(p), int(t), int(n))
            for p, t, n in zip(self._proto[o], self._ts[o], self._num[o], strict=True)
        ]

    def see(self, s: Segments) -> None:
        """Number the connections that ``s`` (a batch in read order) starts."""
        sel = np.flatnonzero((s.proto == PROTO_TCP) | (s.proto == PROTO_UDP))
        if not len(sel):
            return
        if len(sel) == len(s):
            sel = slice(None)
        proto = s.proto[sel]
        key = _pair_keys(
            s.src_hi[sel], s.src_lo[sel], s.sport[sel], s.dst_hi[sel], s.dst_lo[sel], s.dport[sel], proto
        )
        # Conversations not seen before start at their first packet here (a hash pass).
        enc = pc.dictionary_encode(pa.array(key, pa.uint64()))
        idx = enc.indices.to_numpy(zero_copy_only=False)
        uniq = enc.dictionary.to_numpy(zero_copy_only=False)
        first = np.empty(len(uniq), np.int64)
        first[idx[::-1]] = np.arange(len(idx) - 1, -1, -1)
        new = first[~_isin_sorted(uniq, self._known)] if len(self._known) else first
        starts = [new]
        tcp = proto == PROTO_TCP
        syn = tcp & ((s.flags[sel] & _SYN) != 0) & ((s.flags[sel] & _ACK) == 0)
        if syn.any() or len(self._ref_key):
            starts.append(self._reused(s, sel, key, syn, tcp))
        at = np.unique(np.concatenate(starts))  # in read order
        if not len(at):
            return
        p = proto[at]
        num = np.zeros(len(at), np.uint32)
        for t in (PROTO_TCP, PROTO_UDP):
            m = p == t
            num[m] = self._next[t] + np.arange(int(m.sum()), dtype=np.uint32)
            self._next[t] += int(m.sum())
        self._known = np.union1d(self._known, key[at])
        k = np.concatenate([self._key, key[at]])
        ts = np.concatenate([self._ts, s.ts_ns[sel][at].astype(np.int64)])
        o = np.lexsort((ts, k))
        self._key, self._ts = k[o], ts[o]
        self._num = np.concatenate([self._num, num])[o]
        self._proto = np.concatenate([self._proto, p.astype(np.uint8)])[o]

    def _reused(self, s: Segments, sel: np.ndarray | slice, key: np.ndarray, syn: np.ndarray,
                tcp: np.ndarray) -> np.ndarray:  # fmt: skip
        """Positions (in ``sel``) of the SYNs that start a connection again on known ports;
        keeps each direction's reference sequence number (only directions that ever sent
        a SYN-only packet need one, and their references are taken from then on)."""
        src_hi, src_lo, sport = s.src_hi[sel], s.src_lo[sel], s.sport[sel]
        way = mix64(src_hi ^ mix64(src_lo ^ sport.astype(np.uint64)))  # the sender
        k2 = key ^ way  # (conversation, direction)
        # The directions that matter: those with a SYN here, and those with a reference.
        watch = np.union1d(np.unique(k2[syn]), self._ref_key)
        ti = np.flatnonzero(tcp & _isin_sorted(k2, watch))
        if not len(ti):
            return ti
        flags, seq = s.flags[sel][ti], s.seq[sel][ti].astype(np.int64)
        synonly = syn[ti]
        # A direction's reference: a SYN's sequence number, else one less than the first packet's.
        own = np.where(synonly, seq, (seq - 1) & 0xFFFFFFFF)
        del flags
        k2 = k2[ti]
        o = np.argsort(k2, kind="stable")  # read order within each direction
        k2o, own_o, syn_o = k2[o], own[o], synonly[o]
        n = len(o)
        head = np.r_[True, k2o[1:] != k2o[:-1]]
        # The reference before each packet: the last SYN before it in its direction, else
        # the reference carried from earlier batches, else the direction's first packet here.
        idx = np.arange(n)
        group_start = np.maximum.accumulate(np.where(head, idx, 0))
        last_syn = np.maximum.accumulate(np.where(syn_o, idx, -1))
        prev_syn = np.r_[-1, last_syn[:-1]]
        prev_syn = np.where(prev_syn >= group_start, prev_syn, -1)
        carried, carried_seq = np.zeros(n, bool), np.zeros(n, np.int64)
        if len(self._ref_key):
            at = np.minimum(np.searchsorted(self._ref_key, k2o), len(self._ref_key) - 1)
            carried, carried_seq = self._ref_key[at] == k2o, self._ref_seq[at]
        ref = np.where(
            prev_syn >= 0, own_o[np.maximum(prev_syn, 0)], np.where(carried, carried_seq, own_o[group_start])
        )
        has_ref = (prev_syn >= 0) | carried | (idx != group_start)
        again = syn_o & has_ref & (own_o != ref)
        # The reference after this batch, per direction: its last SYN, else as before.
        tail = np.r_[head[1:], True]
        last = np.where(last_syn[tail] >= group_start[tail], last_syn[tail], -1)
        new_ref = np.where(
            last >= 0, own_o[np.maximum(last, 0)],
            np.where(carried[tail], carried_seq[tail], own_o[group_start[tail]]),
        )  # fmt: skip
        keys = np.concatenate([self._ref_key, k2o[tail]])
        refs = np.concatenate([self._ref_seq, new_ref])
        ko = np.argsort(keys, kind="stable")
        keys, refs = keys[ko], refs[ko]
        keep = np.r_[keys[1:] != keys[:-1], True]  # the later entry of a key wins
        self._ref_key, self._ref_seq = keys[keep], refs[keep]
        return ti[o[again]]

    def of(self, msgs: Messages) -> np.ndarray:
        """The number of the connection each message belongs to (the latest one begun on
        its ports at or before its first packet): worked out once per flow (a connection)
        in ``msgs``. A message on ports never shown gets 2**32 - 1."""
        out = np.full(len(msgs), np.iinfo(np.uint32).max, np.uint32)
        if not len(self._key) or not len(msgs):
            return out
        enc = pc.dictionary_encode(pa.array(msgs.flow, pa.uint64()))
        idx = enc.indices.to_numpy(zero_copy_only=False)
        rep = np.empty(len(enc.dictionary), np.int64)
        rep[idx[::-1]] = np.arange(len(idx) - 1, -1, -1)  # each flow's first message here
        m = msgs.take(rep)
        ends = (m.src_hi, m.src_lo, m.sport, m.dst_hi, m.dst_lo, m.dport)
        # A UDP message's flow is its conversation key hashed (``FlowAssembler._udp``).
        udp = (mix64(conversation_keys(*ends, PROTO_UDP)[0]) >> np.uint64(24)) == m.flow
        key = _pair_keys(*ends, np.where(udp, PROTO_UDP, PROTO_TCP))
        ts_ns = m.ts_ns
        i = np.searchsorted(self._key, key, "right") - 1
        ok = (i >= 0) & (self._key[np.maximum(i, 0)] == key)
        # Port reuse: step back to the latest start at or before the message's time.
        late = ok & (self._ts[np.maximum(i, 0)] > ts_ns)
        while late.any():
            j = np.flatnonzero(late)
            can = (i[j] > 0) & (self._key[np.maximum(i[j] - 1, 0)] == key[j])
            late[j[~can]] = False  # before its connection's first packet: that connection
            jj = j[can]
            i[jj] -= 1
            late[jj] = self._ts[i[jj]] > ts_ns[jj]
        per_flow = np.where(ok, self._num[np.maximum(i, 0)], np.iinfo(np.uint32).max).astype(np.uint32)
        return per_flow[idx]


def _pair_keys(src_hi: np.ndarray, src_lo: np.ndarray, sport: np.ndarray, dst_hi: np.ndarray,
               dst_lo: np.ndarray, dport: np.ndarray, proto: np.ndarray | int) -> np.ndarray:  # fmt: skip
    """A conversation's key, the same both ways: the sum of its two endpoints' hashes."""
    u = np.uint64

    def end(hi: np.ndarray, lo: np.ndarray, port: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            return mix64(lo ^ (hi * u(0x9E3779B97F4A7C15)) ^ (port.astype(u) << u(48)))

    with np.errstate(over="ignore"):
        return (end(src_hi, src_lo, sport) + end(dst_hi, dst_lo, dport)) ^ np.asarray(proto).astype(u)


def _isin_sorted(values: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """``np.isin`` for a sorted, unique ``sorted_set``."""
    if not len(sorted_set):
        return np.zeros(len(values), bool)
    i = np.minimum(np.searchsorted(sorted_set, values), len(sorted_set) - 1)
    return sorted_set[i] == values


def _address_codes(hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """One 64-bit value per address: an IPv4 address (v4-mapped) is its low half; others hashed."""
    v4 = (hi == 0) & ((lo >> np.uint64(32)) == np.uint64(0xFFFF))
    return np.where(v4, lo, mix64(hi) ^ mix64(lo ^ np.uint64(0x9E3779B97F4A7C15)))


def address_columns(
    src_hi: np.ndarray, src_lo: np.ndarray, dst_hi: np.ndarray, dst_lo: np.ndarray
) -> tuple[pa.DictionaryArray, pa.DictionaryArray]:
    """``src_ip`` and ``dst_ip``: the addresses' text forms, one dictionary of the distinct
    ones (a hash pass, then one formatting per distinct address).

    Examples
    --------
    >>> hi = np.zeros(2, np.uint64)
    >>> s, d = address_columns(hi, np.array([0xFFFF0A000001, 1], np.uint64), hi,
    ...                        np.array([0xFFFF0A000002, 0xFFFF0A000002], np.uint64))
    >>> s.to_pylist(), d.to_pylist()
    (['10.0.0.1', '::1'], ['10.0.0.2', '10.0.0.2'])
    """
    n = len(src_hi)
    hi = np.concatenate([src_hi, dst_hi])
    lo = np.concatenate([src_lo, dst_lo])
    enc = pc.dictionary_encode(pa.array(_address_codes(hi, lo), pa.uint64()))
    idx = enc.indices.to_numpy(zero_copy_only=False)
    where = np.empty(len(enc.dictionary), np.int64)
    where[idx[::-1]] = np.arange(2 * n - 1, -1, -1)  # a position of each distinct address
    names = pa.array([format_address(int(hi[j]), int(lo[j])) for j in where.tolist()], pa.string())
    ix = pa.array(idx.astype(np.int32), pa.int32())
    return (
        pa.DictionaryArray.from_arrays(ix.slice(0, n), names),
        pa.DictionaryArray.from_arrays(ix.slice(n), names),
    )


def connection_columns(msgs: Messages, streams: StreamNumbers) -> dict[str, pa.Array]:
    """The trace's connection columns of ``msgs``: ``src_ip``, ``src_port``, ``dst_ip``,
    ``dst_port``, ``stream``. Worked out per flow (both ends of a connection, its number),
    then spread to its messages by whether each one's sender is the flow's first sender."""
    n = len(msgs)
    if not n:
        empty = pa.DictionaryArray.from_arrays(pa.array([], pa.int32()), pa.array([], pa.string()))
        return {
            "src_ip": empty, "src_port": pa.array([], pa.uint16()), "dst_ip": empty,
            "dst_port": pa.array([], pa.uint16()), "stream": pa.array([], pa.uint32()),
        }  # fmt: skip
    enc = pc.dictionary_encode(pa.array(msgs.flow, pa.uint64()))
    idx = enc.indices.to_numpy(zero_copy_only=False)
    rep = np.empty(len(enc.dictionary), np.int64)
    rep[idx[::-1]] = np.arange(n - 1, -1, -1)  # each flow's first message here
    m = msgs.take(rep)
    a_src, b_src = address_columns(m.src_hi, m.src_lo, m.dst_hi, m.dst_lo)
    a = np.asarray(a_src.indices.to_numpy(zero_copy_only=False))
    b = np.asarray(b_src.indices.to_numpy(zero_copy_only=False))
    from_a = (msgs.src_lo == m.src_lo[idx]) & (msgs.src_hi == m.src_hi[idx]) & (msgs.sport == m.sport[idx])
    s_ix = np.where(from_a, a[idx], b[idx]).astype(np.int32)
    d_ix = np.where(from_a, b[idx], a[idx]).astype(np.int32)
    names = a_src.dictionary
    return {
        "src_ip": pa.DictionaryArray.from_arrays(pa.array(s_ix, pa.int32()), names),
        "src_port": pa.array(msgs.sport, pa.uint16()),
        "dst_ip": pa.DictionaryArray.from_arrays(pa.array(d_ix, pa.int32()), names),
        "dst_port": pa.array(msgs.dport, pa.uint16()),
        "stream": pa.array(streams.of(m)[idx], pa.uint32()),
    }

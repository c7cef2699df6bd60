"""Link, network and transport headers of a whole packet batch at once, with numpy.

Every field is gathered at per-packet offsets from the batch's byte buffer, so the cost
is a few array operations per batch, not Python work per packet. Layers handled:

- links: Ethernet, Linux cooked (SLL, SLL2), raw IP, BSD null/loopback;
- 802.1Q / QinQ VLAN tags and MPLS label stacks (peeled in a vectorized loop);
- ERSPAN types I/II/III and transparent-Ethernet GRE (the inner frame is decoded again);
- IPv4 and IPv6 with extension headers, fragments of either reassembled (``Decoder``);
- TCP and UDP.

A packet that is not IP, is too short for its headers or has inconsistent lengths is
counted and dropped; a packet cut by the snapshot length keeps its captured bytes and
is counted as truncated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from capture._spans import join_spans, words_view
from capture.source import PacketBatch

__all__ = ["DecodeStats", "Decoder", "Segments"]

_ETH_IPV4, _ETH_IPV6 = 0x0800, 0x86DD
_VLAN_TAGS = (0x8100, 0x88A8, 0x9100, 0x9200)
_MPLS = (0x8847, 0x8848)
PROTO_TCP, PROTO_UDP = 6, 17
_V4_MAPPED = np.uint64(0xFFFF00000000)


@dataclass
class DecodeStats:
    """Counts of what the decoder dropped or noticed."""

    non_ip: int = 0
    malformed: int = 0
    truncated: int = 0
    other_transport: int = 0
    unsupported_link: int = 0
    fragments: int = 0
    reassembled: int = 0
    tunnelled: int = 0

    def to_json(self) -> dict[str, int]:
        """A JSON-ready dict."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class Segments:
    """Decoded TCP/UDP packets of a batch, one array element per packet.

    Addresses are 128-bit as two uint64 halves (IPv4 as v4-mapped IPv6). ``pay_off`` is
    the payload's start in ``data``; ``pay_cap`` the payload bytes captured and
    ``pay_len`` the payload length the IP header claims (larger when snaplen cut it).
    """

    ts_ns: np.ndarray
    src_hi: np.ndarray
    src_lo: np.ndarray
    dst_hi: np.ndarray
    dst_lo: np.ndarray
    proto: np.ndarray  # uint8: 6 TCP, 17 UDP
    sport: np.ndarray
    dport: np.ndarray
    seq: np.ndarray  # uint32 (0 for UDP)
    ack: np.ndarray
    flags: np.ndarray  # uint8 TCP flags
    pay_off: np.ndarray  # int64
    pay_cap: np.ndarray  # int64
    pay_len: np.ndarray  # int64
    data: np.ndarray = field(repr=False)

    def __len__(self) -> int:
        return len(self.ts_ns)

    def payload(self, i: int) -> bytes:
        """Captured payload of segment ``i`` (for tests and slow paths)."""
        o = int(self.pay_off[i])
        return self.data[o : o + int(self.pay_cap[i])].tobytes()

    def take(self, idx: np.ndarray) -> Segments:
        """The segments at ``idx`` (sharing the data buffer)."""
        kw: dict[str, Any] = {k: getattr(self, k)[idx] for k in _ARRAYS}
        return Segments(data=self.data, **kw)

    @staticmethod
    def concat(parts: list[Segments]) -> Segments:
        """One segment table over one buffer (payload bytes are copied compactly)."""
        parts = [p for p in parts if len(p)]
        if not parts:
            return empty_segments()
        if len(parts) == 1:
            return parts[0]
        datas, kw = [], {k: [] for k in _ARRAYS}
        base = 0
        for p in parts:
            cap = p.pay_cap
            total = int(cap.sum())
            if 4 * total >= len(p.data):
                # Payloads are a good part of the buffer (a fresh batch): one copy of it all.
                datas.append(p.data)
                offs = p.pay_off + base
                base += len(p.data)
            else:
                # Only the payload bytes, so a carried-over segment does not pin its whole chunk.
                offs = np.zeros(len(p), np.int64)
                np.cumsum(cap[:-1], out=offs[1:])
                datas.append(join_spans(p.data, p.pay_off, cap))
                offs += base
                base += total
            for k in _ARRAYS:
                kw[k].append(offs if k == "pay_off" else getattr(p, k))
        return Segments(data=np.concatenate(datas), **{k: np.concatenate(v) for k, v in kw.items()})


_ARRAYS = (
    "ts_ns",
    "src_hi",
    "src_lo",
    "dst_hi",
    "dst_lo",
    "proto",
    "sport",
    "dport",
    "seq",
    "ack",
    "flags",
    "pay_off",
    "pay_cap",
    "pay_len",
)


def empty_segments() -> Segments:
    """A segment table with no rows."""
    z = np.zeros(0, np.int64)
    u = np.zeros(0, np.uint64)
    return Segments(
        ts_ns=z,
        src_hi=u,
        src_lo=u,
        dst_hi=u,
        dst_lo=u,
        proto=np.zeros(0, np.uint8),
        sport=np.zeros(0, np.uint16),
        dport=np.zeros(0, np.uint16),
        seq=np.zeros(0, np.uint32),
        ack=np.zeros(0, np.uint32),
        flags=np.zeros(0, np.uint8),
        pay_off=z,
        pay_cap=z,
        pay_len=z,
        data=np.zeros(0, np.uint8),
    )


class _Bytes:
    """Bounds-checked gathers from a byte buffer at per-packet positions."""

    def __init__(self, data: np.ndarray, end: np.ndarray) -> None:
        self.d = data
        self.end = end  # per-packet end of captured bytes
        self.last = max(len(data) - 1, 0)
        if not len(data):
            self.d = np.zeros(1, np.uint8)
        # The 8 bytes at every offset as one little-endian word: a field is one gather.
        self.w = words_view(np.ascontiguousarray(self.d))

    def ok(self, pos: np.ndarray, n: int, rows: np.ndarray | None = None) -> np.ndarray:
        """Whether ``n`` bytes from ``pos`` were captured (``rows``: the packets ``pos`` is for)."""
        return pos + n <= (self.end if rows is None else self.end[rows])

    def u8(self, pos: np.ndarray) -> np.ndarray:
        return self.d[np.minimum(pos, self.last)]

    def be16(self, pos: np.ndarray) -> np.ndarray:
        out = (self._word(pos) & np.uint64(0xFFFF)).astype(np.uint16).byteswap().astype(np.uint32)
        return self._near_end(out, pos, lambda p: (self.u8(p).astype(np.uint32) << 8) | self.u8(p + 1))

    def be32(self, pos: np.ndarray) -> np.ndarray:
        out = (self._word(pos) & np.uint64(0xFFFFFFFF)).astype(np.uint32).byteswap()
        return self._near_end(out, pos, lambda p: (self.be16(p) << 16) | self.be16(p + 2))

    def _word(self, pos: np.ndarray) -> np.ndarray:
        if not len(self.w):
            return np.zeros(len(pos), np.uint64)
        return self.w[np.clip(pos, 0, len(self.w) - 1)]

    def _near_end(self, out: np.ndarray, pos: np.ndarray, bytewise: Any) -> np.ndarray:
        """``out`` with the values at positions whose word was cut by the buffer's end (or
        that point past it) read byte by byte, clamped at the last byte like ``u8``."""
        near = pos > len(self.w) - 1
        if near.any():
            out[near] = bytewise(pos[near])
        return out

    def le32(self, pos: np.ndarray) -> np.ndarray:
        return (self.be16(pos + 2).byteswap() >> 16 << 16 | self.be16(pos).byteswap() >> 16).astype(np.uint32)

    def be64(self, pos: np.ndarray) -> np.ndarray:
        return (self.be32(pos).astype(np.uint64) << np.uint64(32)) | self.be32(pos + 4).astype(np.uint64)


_V6_EXTENSIONS = (0, 43, 60, 51)  # hop-by-hop, routing, destination options, AH
_V6_FRAGMENT = 44


def _v6_extension_length(nh: Any, length_byte: Any) -> Any:
    """Bytes of an IPv6 extension header from its type and its second byte (arrays or
    single values): AH counts 4-byte words less two, the fragment header is 8, the
    others count 8-byte words less one."""
    return np.where(nh == _V6_FRAGMENT, 8, np.where(nh == 51, (length_byte + 2) * 4, (length_byte + 1) * 8))


_LINKTYPES = (0, 1, 12, 14, 101, 108, 113, 228, 229, 276)  # the link types _link_layer reads


def _link_layer(b: _Bytes, lt: np.ndarray, start: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each packet's ethertype, network-layer start and whether its link header was read
    (a known link type, captured whole)."""
    n = len(lt)
    et = np.zeros(n, np.uint32)
    l3 = start.copy()
    known = np.zeros(n, bool)
    m = lt == 1  # Ethernet
    if m.any():
        et[m] = b.be16(start[m] + 12)
        l3[m] = start[m] + 14
        known |= m & b.ok(start, 14)
    m = lt == 113  # Linux cooked v1
    if m.any():
        et[m] = b.be16(start[m] + 14)
        l3[m] = start[m] + 16
        known |= m & b.ok(start, 16)
    m = lt == 276  # Linux cooked v2
    if m.any():
        et[m] = b.be16(start[m])
        l3[m] = start[m] + 20
        known |= m & b.ok(start, 20)
    m = (lt == 0) | (lt == 108)  # BSD null (host order) / OpenBSD loop (network order)
    if m.any():
        fam_le = b.le32(start[m])
        fam_be = b.be32(start[m])
        fam = np.where((lt[m] == 108) | (fam_le > 0xFFFF), fam_be, fam_le)
        et[m] = np.where(fam == 2, _ETH_IPV4, np.where(np.isin(fam, (10, 24, 28, 30)), _ETH_IPV6, 0))
        l3[m] = start[m] + 4
        known |= m & b.ok(start, 4)
    m = np.isin(lt, (101, 12, 14, 228, 229))  # raw IP
    if m.any():
        ver = b.u8(start[m]) >> 4
        et[m] = np.where(ver == 4, _ETH_IPV4, np.where(ver == 6, _ETH_IPV6, 0))
        known |= m
    return et, l3, known


def _peel_tags(b: _Bytes, et: np.ndarray, l3: np.ndarray, known: np.ndarray) -> None:
    """Step ``et`` and ``l3`` (in place) past VLAN tags and MPLS labels, a layer per round
    for the packets that have one; a packet whose tags run past its bytes is no longer
    ``known``."""
    for _ in range(8):
        v = known & np.isin(et, _VLAN_TAGS)
        mp = known & np.isin(et, _MPLS)
        if not (v.any() or mp.any()):
            break
        et[v] = b.be16(l3[v] + 2)
        l3[v] += 4
        if mp.any():
            bos = (b.u8(l3[mp] + 2) & 1).astype(bool)
            l3[mp] += 4
            nib = b.u8(l3[mp]) >> 4
            after = np.where(nib == 4, _ETH_IPV4, np.where(nib == 6, _ETH_IPV6, 0))
            et[mp] = np.where(bos, after, et[mp])
        known &= b.ok(l3, 0)


@dataclass
class _Network:
    """The network layer of every packet of a batch (zeros where there is none)."""

    src_hi: np.ndarray  # uint64 halves of the 128-bit addresses (IPv4 as v4-mapped IPv6)
    src_lo: np.ndarray
    dst_hi: np.ndarray
    dst_lo: np.ndarray
    proto: np.ndarray  # uint32 transport protocol (after IPv6 extension headers)
    l4: np.ndarray  # int64 start of the transport header
    ip_end: np.ndarray  # int64 end of the datagram, as its IP header says
    good: np.ndarray  # a whole datagram with sane headers
    frag: np.ndarray  # a fragment with sane headers (reassembled before decoding)

    @classmethod
    def zeros(cls, n: int) -> _Network:
        """No network layer yet for ``n`` packets."""
        addr, at = np.zeros(n, np.uint64), np.zeros(n, np.int64)
        return cls(
            src_hi=addr,
            src_lo=addr.copy(),
            dst_hi=addr.copy(),
            dst_lo=addr.copy(),
            proto=np.zeros(n, np.uint32),
            l4=at,
            ip_end=at.copy(),
            good=np.zeros(n, bool),
            frag=np.zeros(n, bool),
        )


def _read_ipv4(b: _Bytes, net: _Network, is4: np.ndarray, p: np.ndarray, end: np.ndarray) -> None:
    """Fill ``net`` for the IPv4 packets ``is4``, whose headers start at ``p``."""
    vihl = b.u8(p)
    ihl = (vihl & 0xF).astype(np.int64) * 4
    tot = b.be16(p + 2).astype(np.int64)
    ok = ((vihl >> 4) == 4) & (ihl >= 20) & b.ok(p, 20, is4) & (tot >= ihl)
    ff = b.be16(p + 6)
    fr = ((ff & 0x2000) != 0) | ((ff & 0x1FFF) != 0)
    net.src_lo[is4] = b.be32(p + 12).astype(np.uint64) | _V4_MAPPED
    net.dst_lo[is4] = b.be32(p + 16).astype(np.uint64) | _V4_MAPPED
    net.proto[is4] = b.u8(p + 9)
    net.l4[is4] = p + ihl
    # TSO captures write total length 0; the captured bytes are then the datagram.
    net.ip_end[is4] = np.where(tot == 0, end[is4], p + tot)
    ok |= ((vihl >> 4) == 4) & (ihl >= 20) & b.ok(p, 20, is4) & (tot == 0)
    net.good[is4] = ok & ~fr
    net.frag[is4] = ok & fr


def _read_ipv6(b: _Bytes, net: _Network, is6: np.ndarray, p: np.ndarray, end: np.ndarray) -> int:
    """Fill ``net`` for the IPv6 packets ``is6``, whose headers start at ``p``, past their
    extension headers; returns how many are malformed."""
    ok = ((b.u8(p) >> 4) == 6) & b.ok(p, 40, is6)
    plen = b.be16(p + 4).astype(np.int64)
    nh = b.u8(p + 6).astype(np.uint32)
    net.src_hi[is6], net.src_lo[is6] = b.be64(p + 8), b.be64(p + 16)
    net.dst_hi[is6], net.dst_lo[is6] = b.be64(p + 24), b.be64(p + 32)
    q = p + 40
    fr6 = np.zeros(len(p), bool)
    for _ in range(6):  # extension headers: hop-by-hop, routing, destination, AH, fragment
        ext = np.isin(nh, (*_V6_EXTENSIONS, _V6_FRAGMENT))
        if not ext.any():
            break
        fr6 |= nh == _V6_FRAGMENT
        hl = _v6_extension_length(nh, b.u8(q + 1).astype(np.int64))
        new_nh = b.u8(q).astype(np.uint32)
        q = np.where(ext, q + hl, q)
        nh = np.where(ext, new_nh, nh)
    net.proto[is6] = nh
    net.l4[is6] = q
    net.ip_end[is6] = np.where(plen == 0, end[is6], p + 40 + plen)
    net.good[is6] = ok & ~fr6
    net.frag[is6] = ok & fr6
    return int((~ok).sum())


def _fragment_v4(data: np.ndarray, p: int, e: int) -> tuple[tuple, int, bool, bytes, bytes] | None:
    """An IPv4 fragment: (reassembly key, offset, more to come, its bytes, the header)."""
    ihl = (int(data[p]) & 0xF) * 4
    hdr = data[p : p + ihl].tobytes()  # options included
    tot = int.from_bytes(hdr[2:4], "big")
    ff = int.from_bytes(hdr[6:8], "big")
    key = (4, hdr[12:16], hdr[16:20], hdr[4:6], hdr[9])
    return key, (ff & 0x1FFF) * 8, bool(ff & 0x2000), data[p + ihl : min(p + tot, e)].tobytes(), hdr


def _fragment_v6(data: np.ndarray, p: int, e: int) -> tuple[tuple, int, bool, bytes, bytes] | None:
    """An IPv6 fragment (RFC 8200 section 4.5): the fragment header found after the
    extension headers before it, which the reassembled datagram leaves out."""
    hdr = data[p : p + 40].tobytes()
    end = min(p + 40 + int.from_bytes(hdr[4:6], "big"), e)
    nh, q = hdr[6], p + 40
    while nh != _V6_FRAGMENT:
        if nh not in _V6_EXTENSIONS or q + 8 > end:
            return None
        nh, q = int(data[q]), q + int(_v6_extension_length(nh, int(data[q + 1])))
    if q + 8 > end:
        return None
    frag = data[q : q + 8].tobytes()
    word = int.from_bytes(frag[2:4], "big")
    # The first fragment's header, with its next header the fragment header's.
    head = hdr[:6] + frag[:1] + hdr[7:]
    return (
        (6, hdr[8:24], hdr[24:40], frag[4:8]),
        (word >> 3) * 8,
        bool(word & 1),
        data[q + 8 : end].tobytes(),
        head,
    )


def _whole_datagram(head: bytes, body: bytes) -> bytes:
    """A reassembled datagram: the first fragment's header with the whole length and no
    fragment fields, then the body."""
    out = bytearray(head)
    if out[0] >> 4 == 4:
        out[2:4] = (len(out) + len(body)).to_bytes(2, "big")
        out[6:8] = b"\0\0"
    else:
        out[4:6] = len(body).to_bytes(2, "big")
    return bytes(out) + body


class Decoder:
    """Decode packet batches into TCP/UDP :class:`Segments`, keeping counts in ``stats``.

    IPv4 and IPv6 fragments are held (bounded by ``max_fragments``) until their datagram is whole,
    then decoded like any packet.

    Examples
    --------
    >>> import dpkt
    >>> from capture.source import PacketBatch
    >>> ip = dpkt.ip.IP(src=bytes([10, 0, 0, 1]), dst=bytes([10, 0, 0, 2]), p=17,
    ...                 data=dpkt.udp.UDP(sport=5000, dport=53, data=b"hello"))
    >>> ip.len = len(bytes(ip))
    >>> seg = Decoder().decode(PacketBatch.from_packets([(1, bytes(ip))], linktype=101))
    >>> int(seg.sport[0]), int(seg.dport[0]), seg.payload(0)
    (5000, 53, b'hello')
    """

    def __init__(self, *, max_fragments: int = 10000) -> None:
        self.stats = DecodeStats()
        self._frags: dict[tuple[int, int, int, int], dict[str, Any]] = {}
        self._max_fragments = max_fragments

    def decode(self, batch: PacketBatch) -> Segments:
        """The TCP and UDP packets of ``batch``, in batch order."""
        n = len(batch)
        if not n:
            return empty_segments()
        end = batch.offset + batch.caplen
        b = _Bytes(batch.data, end)
        lt = batch.linktype.astype(np.int64)
        et, l3, known = _link_layer(b, lt, batch.offset)
        self.stats.unsupported_link += int((~np.isin(lt, _LINKTYPES)).sum())
        _peel_tags(b, et, l3, known)
        is4 = known & (et == _ETH_IPV4)
        is6 = known & (et == _ETH_IPV6)
        self.stats.non_ip += int((known & ~is4 & ~is6).sum())
        net = _Network.zeros(n)
        if is4.any():
            _read_ipv4(b, net, is4, l3[is4], end)
        if is6.any():
            self.stats.malformed += _read_ipv6(b, net, is6, l3[is6], end)
        if is4.any():
            self.stats.malformed += int((is4 & ~net.good & ~net.frag).sum())
        parts = self._carried(batch, b, net, l3)
        seg = self._transport(batch, b, net)
        if parts:
            return Segments.concat([seg, *parts])
        return seg

    def _carried(self, batch: PacketBatch, b: _Bytes, net: _Network, l3: np.ndarray) -> list[Segments]:
        """The segments of frames carried in GRE/ERSPAN and of datagrams whose last fragment
        came in ``batch``, decoded as batches of their own; tunnels leave ``net.good``."""
        parts: list[Segments] = []
        # ERSPAN / GRE-carried Ethernet: decode the inner frame as a batch of its own.
        gre = net.good & (net.proto == 47)
        if gre.any():
            inner = self._gre_inner(b, net.l4[gre], net.ip_end[gre], batch, np.flatnonzero(gre))
            if inner is not None:
                self.stats.tunnelled += len(inner)
                parts.append(self.decode(inner))
            net.good &= ~gre
        if net.frag.any():
            whole = self._defragment(batch, np.flatnonzero(net.frag), l3, b)
            if whole is not None:
                parts.append(self.decode(whole))
        return parts

    def _transport(self, batch: PacketBatch, b: _Bytes, net: _Network) -> Segments:
        """The TCP and UDP headers of the whole datagrams in ``net``, as segments."""
        good, proto, l4 = net.good, net.proto, net.l4
        tcp = good & (proto == PROTO_TCP)
        udp = good & (proto == PROTO_UDP)
        self.stats.other_transport += int((good & ~tcp & ~udp & (proto != 47)).sum())
        tcp &= b.ok(l4, 20) | ~tcp
        udp &= b.ok(l4, 8) | ~udp
        short = good & (((proto == PROTO_TCP) & ~tcp) | ((proto == PROTO_UDP) & ~udp))
        self.stats.truncated += int(short.sum())
        sel = np.flatnonzero(tcp | udp)
        p4 = l4[sel]
        is_tcp = tcp[sel]
        doff = np.where(is_tcp, (b.u8(p4 + 12) >> 4).astype(np.int64) * 4, 8)
        bad_doff = is_tcp & (doff < 20)
        pay = p4 + doff
        iend = net.ip_end[sel]
        bad = bad_doff | (pay > iend)
        self.stats.malformed += int(bad.sum())
        keep = ~bad
        sel, p4, is_tcp, pay, iend = sel[keep], p4[keep], is_tcp[keep], pay[keep], iend[keep]
        cend = np.minimum(iend, b.end[sel])
        pay_cap = np.maximum(cend - pay, 0)
        pay_len = iend - pay
        self.stats.truncated += int((pay_cap < pay_len).sum())
        return Segments(
            ts_ns=batch.ts_ns[sel],
            src_hi=net.src_hi[sel],
            src_lo=net.src_lo[sel],
            dst_hi=net.dst_hi[sel],
            dst_lo=net.dst_lo[sel],
            proto=np.where(is_tcp, PROTO_TCP, PROTO_UDP).astype(np.uint8),
            sport=b.be16(p4).astype(np.uint16),
            dport=b.be16(p4 + 2).astype(np.uint16),
            seq=np.where(is_tcp, b.be32(p4 + 4), 0).astype(np.uint32),
            ack=np.where(is_tcp, b.be32(p4 + 8), 0).astype(np.uint32),
            flags=np.where(is_tcp, b.u8(p4 + 13), 0).astype(np.uint8),
            pay_off=pay,
            pay_cap=pay_cap,
            pay_len=pay_len,
            data=batch.data,
        )

    def _gre_inner(
        self, b: _Bytes, p: np.ndarray, iend: np.ndarray, batch: PacketBatch, rows: np.ndarray
    ) -> PacketBatch | None:
        flags = b.be16(p)
        ptype = b.be16(p + 2)
        hl = 4 + 4 * (
            ((flags & 0x8000) != 0).astype(np.int64) + ((flags & 0x2000) != 0) + ((flags & 0x1000) != 0)
        )
        q = p + hl
        # ERSPAN II (0x88BE with a sequence number) has an 8-byte header; type I (no
        # sequence number) none; ERSPAN III (0x22EB) 12 bytes plus 8 when the O bit is set.
        er2 = (ptype == 0x88BE) & ((flags & 0x1000) != 0)
        er3 = ptype == 0x22EB
        q = np.where(er2, q + 8, q)
        q = np.where(er3, q + 12 + 8 * (b.u8(q + 11) & 1).astype(np.int64), q)
        eth = (ptype == 0x88BE) | er3 | (ptype == 0x6558)
        ipin = np.isin(ptype, (_ETH_IPV4, _ETH_IPV6))
        use = (eth | ipin) & (q < np.minimum(iend, b.end[rows]))
        self.stats.other_transport += int((~use).sum())
        if not use.any():
            return None
        r = rows[use]
        off = q[use]
        cap = np.minimum(iend[use], b.end[r]) - off
        return PacketBatch(
            ts_ns=batch.ts_ns[r],
            linktype=np.where(eth[use], 1, 101).astype(np.uint16),
            offset=off,
            caplen=cap,
            wirelen=cap.copy(),
            data=batch.data,
        )

    def _defragment(
        self, batch: PacketBatch, rows: np.ndarray, l3: np.ndarray, b: _Bytes
    ) -> PacketBatch | None:
        """Collect IPv4 and IPv6 fragments; return the datagrams completed by this batch
        as raw IP."""
        done: list[tuple[int, bytes]] = []
        data = batch.data
        for r in rows.tolist():  # fragments are rare: a Python loop over them is fine
            self.stats.fragments += 1
            p, e = int(l3[r]), int(b.end[r])
            piece = _fragment_v4(data, p, e) if data[p] >> 4 == 4 else _fragment_v6(data, p, e)
            if piece is None:
                self.stats.malformed += 1
                continue
            key, foff, more, body, head = piece
            st = self._frags.setdefault(
                key, {"parts": {}, "last": None, "head": None, "ts": int(batch.ts_ns[r])}
            )
            st["parts"][foff] = body
            if foff == 0:
                st["head"] = head
            if not more:
                st["last"] = foff + len(body)
            if st["last"] is not None and st["head"] is not None:
                out = bytearray()
                for o in sorted(st["parts"]):
                    if o > len(out):
                        break  # a hole: wait for the missing fragment
                    part = st["parts"][o]
                    out[o : o + len(part)] = part
                if len(out) >= st["last"]:
                    del self._frags[key]
                    if st["last"] + len(st["head"]) > 0xFFFF:
                        self.stats.malformed += 1  # longer than any datagram can be
                    else:
                        done.append((st["ts"], _whole_datagram(st["head"], bytes(out[: st["last"]]))))
                        self.stats.reassembled += 1
            if len(self._frags) > self._max_fragments:
                self._frags.pop(next(iter(self._frags)))
        if not done:
            return None
        return PacketBatch.from_packets(done, linktype=101)

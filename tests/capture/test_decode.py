"""Vectorized header decoding: link types, tags, tunnels, IPv6, fragments, damage."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import dpkt
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import capture
from capture.decode import Decoder
from capture.source import PacketBatch

SRC4, DST4 = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
MAC = b"\x00\x11\x22\x33\x44\x55"


def ipv4_tcp(payload: bytes = b"hello", sport: int = 40000, dport: int = 80, seq: int = 1000) -> bytes:
    t = dpkt.tcp.TCP(sport=sport, dport=dport, seq=seq, flags=0x18, data=payload)
    ip = dpkt.ip.IP(src=SRC4, dst=DST4, p=6, data=t)
    ip.len = len(bytes(ip))
    return bytes(ip)


def ipv6_udp(payload: bytes = b"v6") -> bytes:
    u = dpkt.udp.UDP(sport=5000, dport=6000, data=payload)
    u.ulen = len(bytes(u))
    net = b"\x20\x01\x0d\xb8" + b"\0" * 11
    ip6 = dpkt.ip6.IP6(src=net + b"\x01", dst=net + b"\x02", nxt=17, hlim=64, data=u)
    ip6.plen = len(bytes(u))
    return bytes(ip6)


def eth(l3: bytes, ethertype: int = 0x0800, tags: bytes = b"") -> bytes:
    return MAC + MAC + tags + struct.pack(">H", ethertype) + l3


def decode_one(frame: bytes, linktype: int = 1):
    d = Decoder()
    return d.decode(PacketBatch.from_packets([(1, frame)], linktype=linktype)), d.stats


CASES = {
    "ethernet": (eth(ipv4_tcp()), 1),
    "ethernet-padding": (eth(ipv4_tcp()) + b"\0" * 20, 1),
    "vlan": (eth(ipv4_tcp(), tags=b"\x81\x00\x00\x0a"), 1),
    "qinq": (eth(ipv4_tcp(), tags=b"\x88\xa8\x00\x0a\x81\x00\x00\x14"), 1),
    "mpls-2-labels": (eth(b"\x00\x01\x00\x40" + b"\x00\x02\x01\x40" + ipv4_tcp(), 0x8847), 1),
    "vlan-then-mpls": (eth(b"\x00\x01\x01\x40" + ipv4_tcp(), 0x8847, tags=b"\x81\x00\x00\x0a"), 1),
    "sll": (struct.pack(">HHH8sH", 0, 1, 6, MAC + b"\0\0", 0x0800) + ipv4_tcp(), 113),
    "sll2": (struct.pack(">HHIHBB8s", 0x0800, 0, 2, 1, 0, 6, MAC + b"\0\0") + ipv4_tcp(), 276),
    "raw": (ipv4_tcp(), 101),
    "null-le": (struct.pack("<I", 2) + ipv4_tcp(), 0),
    "null-be": (struct.pack(">I", 2) + ipv4_tcp(), 0),
    "loop": (struct.pack(">I", 2) + ipv4_tcp(), 108),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_link_layers_reach_tcp(name: str) -> None:
    frame, lt = CASES[name]
    seg, _ = decode_one(frame, lt)
    assert len(seg) == 1
    assert (int(seg.sport[0]), int(seg.dport[0]), int(seg.seq[0])) == (40000, 80, 1000)
    assert seg.payload(0) == b"hello"  # Ethernet padding is not payload
    assert capture.format_address(int(seg.src_hi[0]), int(seg.src_lo[0])) == "10.0.0.1"


def test_ipv6_udp() -> None:
    seg, _ = decode_one(eth(ipv6_udp(), 0x86DD))
    assert seg.payload(0) == b"v6"
    assert capture.format_address(int(seg.dst_hi[0]), int(seg.dst_lo[0])) == "2001:db8::2"


def test_erspan_type2_inner_frame() -> None:
    inner = eth(ipv4_tcp(b"inner"))
    gre = struct.pack(">HHI", 0x1000, 0x88BE, 7) + b"\x10\x00\x00\x01\x00\x00\x00\x00" + inner
    outer = dpkt.ip.IP(src=bytes([1, 1, 1, 1]), dst=bytes([2, 2, 2, 2]), p=47, data=gre)
    outer.len = len(bytes(outer))
    seg, stats = decode_one(eth(bytes(outer)))
    assert seg.payload(0) == b"inner"
    assert stats.tunnelled == 1


@pytest.mark.parametrize("platform_sub", [False, True], ids=["no-subheader", "with-subheader"])
def test_erspan_type3_inner_frame(platform_sub: bool) -> None:
    inner = eth(ipv4_tcp(b"three"))
    # ERSPAN III: 12-byte header; the O bit (last bit) announces an 8-byte platform sub-header.
    hdr = b"\x20\x00\x00\x01" + b"\0" * 4 + b"\x00\x00\x00" + (b"\x01" if platform_sub else b"\x00")
    gre = struct.pack(">HHI", 0x1000, 0x22EB, 7) + hdr + (b"\0" * 8 if platform_sub else b"") + inner
    outer = dpkt.ip.IP(src=bytes([1, 1, 1, 1]), dst=bytes([2, 2, 2, 2]), p=47, data=gre)
    outer.len = len(bytes(outer))
    seg, _ = decode_one(eth(bytes(outer)))
    assert seg.payload(0) == b"three"


def test_ipv4_fragments_are_reassembled() -> None:
    whole = dpkt.ip.IP(ipv4_tcp(b"A" * 100))
    body = bytes(whole.data)
    frags = []
    for off, chunk, more in ((0, body[:48], True), (48, body[48:], False)):
        f = dpkt.ip.IP(src=SRC4, dst=DST4, p=6, id=99, data=chunk)
        f.mf, f.offset = int(more), off // 8  # dpkt takes the field in 8-byte units
        f.len = len(bytes(f))
        frags.append(bytes(f))
    d = Decoder()
    seg = d.decode(PacketBatch.from_packets([(1, frags[1]), (2, frags[0])], linktype=101))
    assert len(seg) == 1
    assert seg.payload(0) == b"A" * 100
    assert d.stats.reassembled == 1


def test_ipv4_fragments_with_options_are_reassembled() -> None:
    # A 24-byte header (router alert option): the datagram keeps all of it.
    body = bytes(dpkt.ip.IP(ipv4_tcp(b"B" * 100)).data)
    frags = []
    for off, chunk, more in ((0, body[:48], True), (48, body[48:], False)):
        f = dpkt.ip.IP(src=SRC4, dst=DST4, p=6, id=7, opts=b"\x94\x04\x00\x00", data=chunk)
        f.hl, f.mf, f.offset = 6, int(more), off // 8
        f.len = len(bytes(f))
        frags.append(bytes(f))
    assert frags[0][0] & 0xF == 6
    d = Decoder()
    seg = d.decode(PacketBatch.from_packets([(1, frags[0]), (2, frags[1])], linktype=101))
    assert len(seg) == 1
    assert (int(seg.sport[0]), int(seg.dport[0])) == (40000, 80)
    assert seg.payload(0) == b"B" * 100


def test_fragments_longer_than_a_datagram_are_dropped_and_counted() -> None:
    # Fifty-four contiguous 1,232-byte pieces: 66,528 bytes, more than a datagram can hold.
    net = b"\x20\x01\x0d\xb8" + b"\0" * 11
    frags = []
    for k in range(54):
        word = (k * 1232 // 8) << 3 | (k < 53)
        head = struct.pack(">IHBB", 6 << 28, 8 + 1232, 44, 64) + net + b"\x01" + net + b"\x02"
        frags.append(head + struct.pack(">BBHI", 17, 0, word, 5) + b"z" * 1232)
    d = Decoder()
    seg = d.decode(PacketBatch.from_packets(list(enumerate(frags)), 101))
    assert len(seg) == 0
    assert d.stats.malformed == 1
    assert d.stats.reassembled == 0


def ipv6_fragments(payload: bytes, size: int, *, hop_by_hop: bool = False, ident: int = 7) -> list[bytes]:
    """An IPv6 UDP datagram cut into fragments of ``size`` bytes (RFC 8200), by scapy."""
    from scapy.layers.inet import UDP
    from scapy.layers.inet6 import IPv6, IPv6ExtHdrFragment, IPv6ExtHdrHopByHop, fragment6

    net = "2001:db8::"
    base = IPv6(src=net + "1", dst=net + "2")
    if hop_by_hop:
        base = base / IPv6ExtHdrHopByHop()
    pkt = base / IPv6ExtHdrFragment(id=ident) / UDP(sport=5353, dport=53) / payload
    return [bytes(f) for f in fragment6(pkt, size)]


@pytest.mark.parametrize("hop_by_hop", [False, True])
def test_ipv6_fragments_are_reassembled(hop_by_hop: bool) -> None:
    payload = bytes(range(256)) * 12
    frags = ipv6_fragments(payload, 1280, hop_by_hop=hop_by_hop)
    assert len(frags) >= 3
    d = Decoder()
    # Out of order, and one fragment of another datagram that never completes.
    stray = ipv6_fragments(b"x" * 3000, 1280, ident=8)[1]
    packets = [(i, f) for i, f in enumerate([frags[2], stray, frags[0], *frags[1:2], *frags[3:]])]
    seg = d.decode(PacketBatch.from_packets(packets, linktype=101))
    assert len(seg) == 1
    assert seg.payload(0) == payload
    assert (int(seg.sport[0]), int(seg.dport[0])) == (5353, 53)
    assert d.stats.reassembled == 1
    assert d.stats.fragments == len(frags) + 1


def test_ipv6_fragments_agree_with_tshark(tmp_path: Path) -> None:
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed")
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Ether
    from scapy.utils import wrpcap

    sizes = (3000, 700, 5000)
    frames = []
    for k, n in enumerate(sizes):
        frames += [Ether() / IPv6(f) for f in ipv6_fragments(bytes([k]) * n, 1280, ident=100 + k)]
    pcap = tmp_path / "v6frag.pcap"
    wrpcap(str(pcap), frames)
    out = subprocess.run(
        ["tshark", "-r", str(pcap), "-Y", "udp", "-T", "fields", "-e", "udp.length"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    theirs = sorted(int(x) - 8 for x in out.split())
    trace = tmp_path / "t.parquet"
    capture.convert_pcaps([pcap], trace)
    import tracefmt

    t = tracefmt.read_trace(trace)
    assert sorted(t["bytes"].to_pylist()) == theirs == sorted(sizes)


def test_non_ip_truncated_and_malformed_are_counted() -> None:
    arp = eth(b"\0" * 28, 0x0806)
    cut = eth(ipv4_tcp(b"x" * 50))[:40]  # snaplen cut inside the TCP header
    snap = eth(ipv4_tcp(b"y" * 50))[:70]  # header whole, payload cut
    bad = eth(b"\x45" + b"\0" * 19)  # total length 0 < header: malformed (or TSO): not TCP/UDP anyway
    d = Decoder()
    seg = d.decode(PacketBatch.from_packets([(1, arp), (2, cut), (3, snap), (4, bad)]))
    assert d.stats.non_ip == 1
    assert d.stats.truncated == 2
    assert len(seg) == 1
    assert (int(seg.pay_len[0]), int(seg.pay_cap[0])) == (50, 70 - 14 - 40)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=120), min_size=1, max_size=8), st.sampled_from([0, 1, 101, 113, 276, 999]))
def test_fuzz_decoder_never_escapes(frames: list[bytes], lt: int) -> None:
    d = Decoder()
    seg = d.decode(PacketBatch.from_packets([(i, f) for i, f in enumerate(frames)], linktype=lt))
    assert len(seg) <= len(frames)
    assert np.all(seg.pay_cap >= 0)


DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "pcaps"


TUNNELS_AND_LINKS = [
    "zeek/mixed-vlan-mpls.pcap",
    "zeek/erspan.pcap",
    "ndpi/http2.pcapng",
    "grpc_packt/Client_Streaming.pcapng",
    "chrissanders/http_ip4and6.pcapng",
]


@pytest.mark.skipif(shutil.which("tshark") is None or not DATA.is_dir(), reason="needs tshark and data")
@pytest.mark.parametrize("name", TUNNELS_AND_LINKS)
def test_segments_and_payload_bytes_agree_with_tshark(name: str) -> None:
    d = Decoder()
    n = pay = 0
    for b in capture.read_packets(DATA / name):
        s = d.decode(b)
        n += len(s)
        pay += int(s.pay_len.sum())
    out = subprocess.run(
        ["tshark", "-r", str(DATA / name), "-Y", "tcp or udp", "-T", "fields",
         "-e", "tcp.len", "-e", "udp.length"],
        capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    # For tunnelled frames tshark prints the inner and outer values comma-separated: take the last.
    pairs = [line.split("\t") for line in out]
    theirs = sum(int(a.split(",")[-1] or 0) + (int(u.split(",")[-1]) - 8 if u else 0) for a, u in pairs)
    assert (n, pay) == (len(out), theirs)

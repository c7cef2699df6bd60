"""Packet sources: pcap/pcapng variants, gzip, damage, the fake source."""

from __future__ import annotations

import gzip
import io
import random
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from testkit.pcap import epoch_ns

import capture
from capture.source import LINKTYPE_ETHERNET, LINKTYPE_LINUX_SLL, LINKTYPE_RAW, FakeSource, PacketBatch
from tracefmt import TraceFileError

FRAMES = [(1_600_000_000_123_456_789, b"\x01" * 60), (1_600_000_001_000_000_001, b"\x02" * 70)]


def pcap_bytes(frames, *, nano: bool, bo: str = "<", linktype: int = 1, snaplen: int = 65535) -> bytes:
    magic = 0xA1B23C4D if nano else 0xA1B2C3D4
    out = [struct.pack(bo + "IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype)]
    for ts, data in frames:
        sec, ns = divmod(ts, 1_000_000_000)
        frac = ns if nano else ns // 1000
        out.append(struct.pack(bo + "IIII", sec, frac, len(data), len(data)) + data)
    return b"".join(out)


def _opt(code: int, value: bytes, bo: str) -> bytes:
    pad = (-len(value)) % 4
    return struct.pack(bo + "HH", code, len(value)) + value + b"\0" * pad


def _block(btype: int, body: bytes, bo: str) -> bytes:
    n = 12 + len(body)
    return struct.pack(bo + "II", btype, n) + body + struct.pack(bo + "I", n)


def pcapng_bytes(frames_by_iface, resolutions, *, bo: str = "<", drops: int = 0) -> bytes:
    """A pcapng file with one interface per resolution (if_tsresol byte or None)."""
    shb = _block(0x0A0D0D0A, struct.pack(bo + "IHHq", 0x1A2B3C4D, 1, 0, -1), bo)
    out = [shb]
    for i, res in enumerate(resolutions):
        opts = (_opt(9, bytes([res]), bo) if res is not None else b"") + (_opt(0, b"", bo) if res else b"")
        out.append(_block(1, struct.pack(bo + "HHI", 1 if i == 0 else 101, 0, 0) + opts, bo))
    for iface, ts_ticks, data in frames_by_iface:
        pad = (-len(data)) % 4
        body = struct.pack(bo + "IIIII", iface, ts_ticks >> 32, ts_ticks & 0xFFFFFFFF, len(data), len(data))
        out.append(_block(6, body + data + b"\0" * pad, bo))
    if drops:
        out.append(_block(5, struct.pack(bo + "III", 0, 0, 0) + _opt(5, struct.pack(bo + "Q", drops), bo)
                          + _opt(0, b"", bo), bo))  # fmt: skip
    return b"".join(out)


@pytest.mark.parametrize("nano", [False, True], ids=["micro", "nano"])
@pytest.mark.parametrize("bo", ["<", ">"], ids=["le", "be"])
def test_pcap_variants(tmp_path: Path, nano: bool, bo: str) -> None:
    p = tmp_path / "a.pcap"
    p.write_bytes(pcap_bytes(FRAMES, nano=nano, bo=bo))
    batches = list(capture.read_packets(p))
    ts = np.concatenate([b.ts_ns for b in batches]).tolist()
    want = [t if nano else t // 1000 * 1000 for t, _ in FRAMES]
    assert ts == want
    assert [batches[0].packet(i) for i in range(2)] == [d for _, d in FRAMES]


def test_pcapng_interfaces_with_own_resolutions(tmp_path: Path) -> None:
    # iface 0: default microseconds; iface 1: nanoseconds (10^-9); iface 2: 2^-10 s.
    frames = [
        (0, 1_600_000_000_000_001, b"a" * 20),
        (1, 1_600_000_000_000_000_007, b"b" * 21),
        (2, 3 << 10, b"c" * 22),
    ]
    p = tmp_path / "a.pcapng"
    p.write_bytes(pcapng_bytes(frames, [None, 9, 0x80 | 10], drops=5))
    src = capture.read_packets(p)
    (b,) = list(src)
    assert b.ts_ns.tolist() == [1_600_000_000_000_001_000, 1_600_000_000_000_000_007, 3_000_000_000]
    assert b.linktype.tolist() == [1, 101, 101]
    assert b.packet(2) == b"c" * 22
    assert src.stats.kernel_drops == 5


def test_pcapng_big_endian(tmp_path: Path) -> None:
    p = tmp_path / "be.pcapng"
    p.write_bytes(pcapng_bytes([(0, 5_000_000, b"xyz")], [6], bo=">"))
    assert capture.packet_timestamps(p).tolist() == [5_000_000_000]


def test_gzip_and_file_objects(tmp_path: Path) -> None:
    raw = pcap_bytes(FRAMES, nano=True)
    p = tmp_path / "a.pcap.gz"
    p.write_bytes(gzip.compress(raw))
    assert capture.packet_timestamps(p).tolist() == [t for t, _ in FRAMES]
    assert capture.packet_timestamps(io.BytesIO(raw)).tolist() == [t for t, _ in FRAMES]


def test_small_chunks_give_the_same_packets(tmp_path: Path) -> None:
    frames = [(i * 1000, bytes([i % 256]) * (50 + i % 300)) for i in range(2000)]
    p = tmp_path / "many.pcap"
    p.write_bytes(pcap_bytes(frames, nano=True))
    got = [b.packet(i) for b in capture.read_packets(p, chunk_bytes=4096) for i in range(len(b))]
    assert got == [d for _, d in frames]


def test_truncated_last_record_keeps_the_rest(tmp_path: Path) -> None:
    raw = pcap_bytes(FRAMES, nano=True)
    p = tmp_path / "cut.pcap"
    p.write_bytes(raw[:-10])
    src = capture.read_packets(p)
    assert sum(len(b) for b in src) == 1
    assert src.stats.truncated_records == 1
    assert "byte 100" in src.stats.damage[0]  # 24 header + 16 + 60: where the cut record starts


def test_corrupt_length_resynchronizes(tmp_path: Path) -> None:
    frames = [(1_600_000_000_000_000_000 + i * 1000, bytes([i]) * 40) for i in range(6)]
    raw = bytearray(pcap_bytes(frames, nano=True))
    bad_at = 24 + 2 * 56  # third record
    raw[bad_at + 8 : bad_at + 12] = struct.pack("<I", 0x7FFFFFF0)
    p = tmp_path / "bad.pcap"
    p.write_bytes(bytes(raw))
    src = capture.read_packets(p)
    got = [b.packet(i)[0] for b in src for i in range(len(b))]
    assert got == [0, 1, 3, 4, 5]  # everything before kept, the record after found again
    assert src.stats.corrupt_records == 1
    assert src.stats.resyncs == [bad_at]


@pytest.mark.parametrize(
    ("content", "message"),
    [(b"", "empty file"), (b"hello world, not a capture", "not a pcap or pcapng file")],
    ids=["empty", "wrong-magic"],
)
def test_unreadable_files_raise_one_clear_error(tmp_path: Path, content: bytes, message: str) -> None:
    p = tmp_path / "x.pcap"
    p.write_bytes(content)
    with pytest.raises(TraceFileError, match=message):
        capture.read_packets(p)


def test_missing_file() -> None:
    with pytest.raises(TraceFileError, match="no such file"):
        capture.read_packets("/nonexistent/x.pcap")


def test_header_only_file_has_no_packets(tmp_path: Path) -> None:
    p = tmp_path / "h.pcap"
    p.write_bytes(pcap_bytes([], nano=False))
    assert capture.packet_timestamps(p).tolist() == []


def test_fake_source_batches() -> None:
    src = FakeSource([(i, b"x" * i) for i in range(1, 6)], batch_size=2)
    batches = list(src)
    assert [len(b) for b in batches] == [2, 2, 1]
    assert src.stats.packets == 5
    assert isinstance(batches[0], PacketBatch)


@settings(max_examples=60, deadline=None)
@given(st.binary(min_size=0, max_size=600), st.booleans())
def test_fuzz_reader_never_escapes(tail: bytes, ng: bool) -> None:
    head = pcapng_bytes([], [6]) if ng else pcap_bytes([], nano=True)
    try:
        src = capture.read_packets(io.BytesIO(head + tail), chunk_bytes=4096)
        for _ in src:
            pass
    except TraceFileError:
        pass


def test_pcapng_corrupt_block_length_resynchronizes(tmp_path: Path) -> None:
    frames = [(0, 1000 + i, bytes([i]) * 40) for i in range(5)]
    raw = bytearray(pcapng_bytes(frames, [9]))
    # Find the third packet block and break its length field.
    starts = []
    off = 0
    while off < len(raw):
        btype, blen = struct.unpack_from("<II", raw, off)
        if btype == 6:
            starts.append(off)
        off += blen
    raw[starts[2] + 4 : starts[2] + 8] = struct.pack("<I", 0x7FFFFFF1)
    p = tmp_path / "bad.pcapng"
    p.write_bytes(bytes(raw))
    src = capture.read_packets(p)
    got = [b.packet(i)[0] for b in src for i in range(len(b))]
    assert got == [0, 1, 3, 4]
    assert src.stats.resyncs == [starts[2]]
    assert f"resumed at byte {starts[3]}" in src.stats.damage[0]


def _pcapng_blocks(*blocks: tuple[int, bytes]) -> bytes:
    import struct

    out = b""
    for btype, body in blocks:
        size = 12 + len(body)
        out += struct.pack("<II", btype, size) + body + struct.pack("<I", size)
    return out


def test_a_packet_naming_a_missing_interface_is_reported(tmp_path) -> None:
    import struct

    import capture

    shb = (0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    idb = (1, struct.pack("<HHI", 1, 0, 65535))
    epb = (6, struct.pack("<IIIII", 5, 0, 0, 60, 60) + bytes(60))  # interface 5 of 1
    path = tmp_path / "missing.pcapng"
    path.write_bytes(_pcapng_blocks(shb, idb, epb, epb))
    report = capture.convert_pcaps([path], tmp_path / "t.parquet")
    assert report.packets == 0
    damage = report.to_json()["damage"]
    assert len(damage) == 1  # said once, not per packet
    assert "packets name interface 5, which the file never described (1 described)" in damage[0]


# ---- pcapng files of several sections, checked with Wireshark's reader (tshark) ------------
needs_tshark = pytest.mark.skipif(shutil.which("tshark") is None, reason="needs tshark")
#: Wireshark's encapsulation numbers (WTAP_ENCAP_*, what ``frame.encap_type`` shows) of
#: the link types used here.
_WTAP_ENCAP = {"1": LINKTYPE_ETHERNET, "7": LINKTYPE_RAW, "25": LINKTYPE_LINUX_SLL}


def _section(ifaces: list[tuple[int, int]], packets: list[tuple[int, int]], bo: str) -> bytes:
    """A pcapng section: its header, an interface per ``(link type, if_tsresol)`` and a
    packet per ``(interface, timestamp in that interface's ticks)``."""
    out = [_block(0x0A0D0D0A, struct.pack(bo + "IHHq", 0x1A2B3C4D, 1, 0, -1), bo)]
    for linktype, tsresol in ifaces:
        opts = _opt(9, bytes([tsresol]), bo) + _opt(0, b"", bo)
        out.append(_block(1, struct.pack(bo + "HHI", linktype, 0, 0) + opts, bo))
    for k, (iface, ticks) in enumerate(packets):
        data = bytes([k]) * (40 + k)
        head = struct.pack(bo + "IIIII", iface, ticks >> 32, ticks & 0xFFFFFFFF, len(data), len(data))
        out.append(_block(6, head + data + b"\0" * (-len(data) % 4), bo))
    return b"".join(out)


_SECTIONS = {
    # Two interfaces (Ethernet in microseconds, raw IP in nanoseconds), then one (Linux
    # cooked, in 2^-10 s): the first section's packets on interface 1 have no match in the second.
    "fewer-interfaces-after": [
        (
            [(1, 6), (101, 9)],
            [(0, 1_600_000_000_123_456), (1, 1_600_000_000_500_000_007), (0, 1_600_000_001_000_001)],
            "<",
        ),
        ([(113, 0x80 | 10)], [(0, 1_700_000_000 << 10 | 3), (0, 1_700_000_001 << 10 | 513)], "<"),
    ],
    # One interface in milliseconds, then three (nanoseconds, microseconds, tenths of a
    # second), in big-endian.
    "more-interfaces-after": [
        ([(101, 3)], [(0, 1_600_000_000_250), (0, 1_600_000_000_999)], "<"),
        (
            [(1, 9), (113, 6), (101, 1)],
            [(2, 16_000_000_015), (0, 1_600_000_002_000_000_001), (1, 1_600_000_003_000_004)],
            ">",
        ),
    ],
}


@needs_tshark
@pytest.mark.parametrize("sections", list(_SECTIONS))
def test_pcapng_sections_in_one_chunk_keep_their_own_interfaces(tmp_path: Path, sections: str) -> None:
    """Both sections fit in one read chunk: every packet's timestamp and link type come
    from the interfaces of its own section, as Wireshark reads them."""
    p = tmp_path / "two-sections.pcapng"
    p.write_bytes(b"".join(_section(*s) for s in _SECTIONS[sections]))
    assert p.stat().st_size < 4096  # one chunk, whatever the chunk size
    want = _tshark_times_and_links(p)
    assert len(want) == sum(len(s[1]) for s in _SECTIONS[sections])
    src = capture.read_packets(p)
    assert _times_and_links(src) == want
    assert src.stats.damage == []


@needs_tshark
@pytest.mark.parametrize("chunk_bytes", [4096, 5000, 1 << 20])
def test_pcapng_sections_across_chunks_keep_their_own_interfaces(tmp_path: Path, chunk_bytes: int) -> None:
    """Four sections of one to three interfaces each, byte orders mixed: the same packets,
    timestamps and link types as Wireshark reads, wherever the chunks cut the file."""
    rng = random.Random(1)
    sections = []
    for _ in range(4):
        ifaces = [
            (rng.choice([1, 101, 113]), rng.choice([3, 6, 9, 0x80 | 10])) for _ in range(rng.randint(1, 3))
        ]
        packets = []
        for k in range(rng.randint(0, 60)):
            iface = rng.randrange(len(ifaces))
            per_s = 1 << 10 if ifaces[iface][1] & 0x80 else 10 ** ifaces[iface][1]
            packets.append((iface, (1_600_000_000 + k) * per_s + rng.randrange(per_s)))
        sections.append(_section(ifaces, packets, rng.choice("<>")))
    p = tmp_path / "sections.pcapng"
    p.write_bytes(b"".join(sections))
    want = _tshark_times_and_links(p)
    src = capture.read_packets(p, chunk_bytes=chunk_bytes)
    assert _times_and_links(src) == want
    assert src.stats.damage == []


def _tshark_times_and_links(path: Path) -> list[tuple[int, int]]:
    """(timestamp ns, link type) of every packet, as Wireshark reads them."""
    out = subprocess.run(
        ["tshark", "-r", str(path), "-T", "fields", "-e", "frame.time_epoch", "-e", "frame.encap_type"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return [(epoch_ns(t), _WTAP_ENCAP[e]) for t, e in (line.split("\t") for line in out.splitlines())]


def _times_and_links(src: capture.PcapSource) -> list[tuple[int, int]]:
    return [(t, lt) for b in src for t, lt in zip(b.ts_ns.tolist(), b.linktype.tolist(), strict=True)]

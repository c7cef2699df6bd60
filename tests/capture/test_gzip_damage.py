"""Damaged gzip captures: a corrupt stream (failed CRC or length check, a deflate block
that does not decode, bytes after the last member that are not gzip) is said as such,
not as a cut file; a cut stream keeps its message; either way every record before the
damage is kept, exactly the records of the same capture cut uncompressed where the
damage is."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import re
import struct
import zlib
from dataclasses import replace
from pathlib import Path
from typing import IO

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import capture
import synth
from capture.synthpcap import default_names_path, render_pcap
from tracefmt import TraceFileError
from wirepath.cli import main

MULTITIER = Path(__file__).resolve().parents[2] / "samples" / "synth" / "multitier.toml"
CUT = "Compressed file ended before the end-of-stream marker was reached"


@pytest.fixture(scope="module")
def pcap(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A capture of the multitier system (HTTP), whole: no record of it is cut."""
    config = replace(synth.load_config(MULTITIER), messages=1200, duration_s=None, seed=4)
    trace, _ = synth.generate_table(config)
    path = tmp_path_factory.mktemp("gz") / "t.pcap"
    render_pcap(trace, path, names_file=default_names_path(path))
    return path.read_bytes()


def _read(data: bytes | Path | IO[bytes]) -> tuple[list[bytes], list[str], capture.ReadStats]:
    """The packets (times, lengths and bytes), damage lines and counts of a capture."""
    src = capture.read_packets(io.BytesIO(data) if isinstance(data, bytes) else data, chunk_bytes=1 << 14)
    packets = [
        struct.pack("<qq", int(b.ts_ns[i]), int(b.wirelen[i])) + b.packet(i)
        for b in src
        for i in range(len(b))
    ]
    return packets, src.stats.damage, src.stats


def _convert(capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, data: bytes) -> dict:
    """``wirepath capture pcap --json`` of ``data`` saved as ``name`` (it exits 0), with
    its damage lines without the directory."""
    src, out = tmp_path / name, tmp_path / f"{name}.parquet"
    src.write_bytes(data)
    assert main(["capture", "pcap", str(src), "--out", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    report["damage"] = [line.removeprefix(f"{tmp_path}/") for line in report["damage"]]
    return report


def _cut_record_at(data: bytes) -> int:
    """Where the incomplete last record of an uncompressed capture starts."""
    _, damage, _ = _read(data)
    (line,) = damage
    return int(re.fullmatch(r"last record cut short at byte (\d+) \(\d+ bytes of a record left\)", line)[1])


def _deflate_with_a_bad_block(raw: bytes, at: int) -> bytes:
    """A gzip member of ``raw`` whose deflate stream breaks at uncompressed byte ``at``:
    a full flush there (so a block starts on a byte boundary), then a block of the type
    deflate reserves as invalid."""
    c = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    head = c.compress(raw[:at]) + c.flush(zlib.Z_FULL_FLUSH)
    rest = c.compress(raw[at:]) + c.flush()
    bad = bytes([0b111]) + rest[1:]  # BFINAL 1, BTYPE 11: reserved
    trailer = struct.pack("<II", zlib.crc32(raw), len(raw) & 0xFFFFFFFF)
    return gzip.compress(b"")[:10] + head + bad + trailer


def test_a_crc_failure_is_corrupt_data_and_keeps_every_record(
    pcap: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gz = gzip.compress(pcap)
    damaged = gz[:-8] + bytes(b ^ 0xFF for b in gz[-8:-4]) + gz[-4:]
    packets, damage, stats = _read(damaged)
    assert packets == _read(pcap)[0]
    assert damage == [
        f"gzip data corrupt (CRC check failed) after byte {len(pcap)}; the records before it are kept"
    ]
    assert stats.truncated_records == 0
    whole, crc = (
        _convert(capsys, tmp_path, "t.pcap", pcap),
        _convert(capsys, tmp_path, "crc.pcap.gz", damaged),
    )
    assert crc["messages"] == whole["messages"] > 0
    assert crc["damage"] == [f"crc.pcap.gz: {damage[0]}"]


def test_a_length_check_failure_is_corrupt_data(pcap: bytes) -> None:
    gz = gzip.compress(pcap)
    damaged = gz[:-4] + struct.pack("<I", len(pcap) + 1)
    packets, damage, _ = _read(damaged)
    assert packets == _read(pcap)[0]
    assert damage == [
        f"gzip data corrupt (length check failed) after byte {len(pcap)}; the records before it are kept"
    ]


def test_a_crc_failure_of_a_capture_whose_last_record_is_cut(pcap: bytes) -> None:
    """The incomplete last record of a corrupt stream is said in the corrupt line, and
    counted as corrupt, not as a cut file."""
    raw = pcap[: len(pcap) - 30]
    gz = gzip.compress(raw)
    damaged = gz[:-8] + bytes(b ^ 0xFF for b in gz[-8:-4]) + gz[-4:]
    packets, damage, stats = _read(damaged)
    assert packets == _read(raw)[0]
    assert damage == [
        f"gzip data corrupt (CRC check failed) after byte {len(raw)}; the records before it are kept, "
        f"the incomplete one at byte {_cut_record_at(raw)} is not"
    ]
    assert (stats.truncated_records, stats.corrupt_records) == (0, 1)


def test_a_corrupt_deflate_block_keeps_the_records_before_it(
    pcap: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    at = len(pcap) // 2
    damaged = _deflate_with_a_bad_block(pcap, at)
    packets, damage, stats = _read(damaged)
    prefix = pcap[:at]
    assert packets == _read(prefix)[0]
    assert 0 < len(packets) < len(_read(pcap)[0])
    assert damage == [
        f"gzip data corrupt (corrupt deflate stream: invalid block type) after byte {at}; "
        f"the records before it are kept, the incomplete one at byte {_cut_record_at(prefix)} is not"
    ]
    assert stats.corrupt_records == 1
    bad = _convert(capsys, tmp_path, "deflate.pcap.gz", damaged)
    assert bad["messages"] == _convert(capsys, tmp_path, "prefix.pcap", prefix)["messages"] > 0
    assert bad["damage"] == [f"deflate.pcap.gz: {damage[0]}"]


def test_a_corrupt_block_on_a_record_boundary_loses_nothing(pcap: bytes) -> None:
    # The record boundary nearest the middle: where the uncompressed capture cut there
    # has no incomplete record.
    at = _cut_record_at(pcap[: len(pcap) // 2])
    packets, damage, _ = _read(_deflate_with_a_bad_block(pcap, at))
    assert packets == _read(pcap[:at])[0]
    assert damage == [
        f"gzip data corrupt (corrupt deflate stream: invalid block type) after byte {at}; "
        "the records before it are kept"
    ]


def test_a_cut_gzip_keeps_its_message_and_the_records_before_the_cut(
    pcap: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gz = gzip.compress(pcap)
    cut = gz[: len(gz) // 2]
    # What the cut stream decompresses to: the capture up to the cut.
    got = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(cut)
    assert pcap.startswith(got)
    packets, damage, stats = _read(cut)
    assert packets == _read(got)[0]
    assert damage == [
        f"compressed data cut or damaged after {len(got):,} bytes ({CUT}); the packets before it are kept",
        f"last record cut short at byte {_cut_record_at(got)} ({len(got) - _cut_record_at(got)} bytes of a "
        "record left)",
    ]
    assert stats.truncated_records == 1
    report = _convert(capsys, tmp_path, "cut.pcap.gz", cut)
    assert report["messages"] == _convert(capsys, tmp_path, "prefix.pcap", got)["messages"] > 0
    assert report["damage"] == [f"cut.pcap.gz: {line}" for line in damage]


def test_a_gzip_cut_in_its_trailer_has_all_its_records(pcap: bytes) -> None:
    packets, damage, _ = _read(gzip.compress(pcap)[:-3])
    assert packets == _read(pcap)[0]
    assert damage == [
        f"compressed data cut or damaged after {len(pcap):,} bytes ({CUT}); the packets before it are kept"
    ]


def test_a_gzip_cut_in_its_header_is_one_error(pcap: bytes) -> None:
    with pytest.raises(TraceFileError, match="not a pcap or pcapng file"):
        _read(gzip.compress(pcap)[:6])


def test_bytes_after_the_last_member_that_are_not_gzip(pcap: bytes) -> None:
    packets, damage, _ = _read(gzip.compress(pcap) + b"not gzip")
    assert packets == _read(pcap)[0]
    assert damage == [
        f"gzip data corrupt (bytes after the last member that are not gzip) after byte {len(pcap)}; "
        "the records before it are kept"
    ]


def test_members_zero_padding_and_header_fields_read_whole(pcap: bytes) -> None:
    """What gzip writes and reads (several members, zero padding, a name, a comment,
    extra field, header CRC) reads whole and says nothing."""
    third = len(pcap) // 3
    body = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    middle = pcap[third : 2 * third]
    flagged = (
        b"\x1f\x8b\x08" + bytes([4 | 8 | 16 | 2]) + b"\0" * 4 + b"\0\xff"
        + struct.pack("<H", 3) + b"xyz" + b"t.pcap\0" + b"a comment\0" + b"\0\0"
        + body.compress(middle) + body.flush()
        + struct.pack("<II", zlib.crc32(middle), len(middle))
    )  # fmt: skip
    gz = gzip.compress(pcap[:third]) + flagged + b"\0" * 7 + gzip.compress(pcap[2 * third :]) + b"\0" * 3
    assert gzip.decompress(gz) == pcap
    packets, damage, _ = _read(gz)
    assert packets == _read(pcap)[0]
    assert damage == []


def test_a_gzip_capture_given_open_reads(pcap: bytes, tmp_path: Path) -> None:
    """A gzip capture handed over as an open file reads as its path does (it failed on
    its gzip magic before: the stream was not rewound after the format check)."""
    path = tmp_path / "t.pcap.gz"
    path.write_bytes(gzip.compress(pcap))
    with path.open("rb") as f:
        assert _read(f)[0] == _read(path)[0] == _read(pcap)[0]


def _as_pcapng(raw: bytes) -> bytes:
    """A nanosecond pcap as pcapng: one interface (nanosecond resolution), one enhanced
    packet block per record."""

    def block(btype: int, body: bytes) -> bytes:
        body += b"\0" * (-len(body) % 4)
        return struct.pack("<II", btype, 12 + len(body)) + body + struct.pack("<I", 12 + len(body))

    nano = raw[:4] == b"\x4d\x3c\xb2\xa1"
    linktype = struct.unpack_from("<I", raw, 20)[0] & 0xFFFF
    tsresol = struct.pack("<HHB", 9, 1, 9 if nano else 6) + b"\0\0\0" + b"\0" * 4
    out = [block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))]
    out.append(block(1, struct.pack("<HHI", linktype, 0, 65535) + tsresol))
    off = 24
    while off + 16 <= len(raw):
        sec, frac, cap, wire = struct.unpack_from("<IIII", raw, off)
        ticks = sec * (10**9 if nano else 10**6) + frac
        data = raw[off + 16 : off + 16 + cap]
        out.append(block(6, struct.pack("<IIIII", 0, ticks >> 32, ticks & 0xFFFFFFFF, cap, wire) + data))
        off += 16 + cap
    return b"".join(out)


def test_pcapng_says_blocks(pcap: bytes) -> None:
    ng = _as_pcapng(pcap)
    assert len(_read(ng)[0]) == len(_read(pcap)[0])
    gz = gzip.compress(ng[:-20])
    damaged = gz[:-8] + bytes(b ^ 0xFF for b in gz[-8:-4]) + gz[-4:]
    packets, damage, _ = _read(damaged)
    assert packets == _read(ng[:-20])[0]
    last = len(ng) - struct.unpack_from("<I", ng, len(ng) - 4)[0]  # where the cut block starts
    assert damage == [
        f"gzip data corrupt (CRC check failed) after byte {len(ng) - 20}; the blocks before it are kept, "
        f"the incomplete one at byte {last} is not"
    ]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_mangled_gzip_never_escapes(pcap: bytes, data: st.DataObject) -> None:
    """Flipped, cut or added bytes anywhere in a gzip capture: it reads with damage
    said, or is one TraceFileError; no other exception."""
    gz = bytearray(gzip.compress(pcap[:20_000]))
    for _ in range(data.draw(st.integers(1, 4))):
        k = data.draw(st.integers(0, len(gz) - 1))
        gz[k] ^= data.draw(st.integers(1, 255))
    gz = gz[: data.draw(st.integers(2, len(gz)))] + data.draw(st.binary(max_size=20))
    with contextlib.suppress(TraceFileError):
        _read(bytes(gz))

"""Captures whose header fields put timestamps or record lengths out of range (issue 39,
items 13 and 14): counted as damage and skipped, never an OverflowError and never a
timestamp wrapped around into another century; a snaplen of 0xFFFFFFFF still lets the
reader resynchronize after a corrupt record length."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

import capture
from wirepath.cli import main

FRAME = b"\x01" * 60


def _opt(code: int, value: bytes) -> bytes:
    return struct.pack("<HH", code, len(value)) + value + b"\0" * ((-len(value)) % 4)


def _block(btype: int, body: bytes) -> bytes:
    n = 12 + len(body)
    return struct.pack("<II", btype, n) + body + struct.pack("<I", n)


def _pcapng(tsresol: int | None, tsoffset: int | None, ticks: list[int]) -> bytes:
    """One section, one Ethernet interface with those options, one packet per tick count."""
    opts = b""
    if tsresol is not None:
        opts += _opt(9, bytes([tsresol]))
    if tsoffset is not None:
        opts += _opt(14, struct.pack("<q", tsoffset))
    opts += _opt(0, b"") if opts else b""
    out = [_block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))]
    out.append(_block(1, struct.pack("<HHI", 1, 0, 0) + opts))
    for t in ticks:
        out.append(
            _block(6, struct.pack("<IIIII", 0, t >> 32, t & 0xFFFFFFFF, len(FRAME), len(FRAME)) + FRAME)
        )
    return b"".join(out)


def _read(path: Path, data: bytes) -> tuple[list[int], capture.source.ReadStats]:
    path.write_bytes(data)
    src = capture.read_packets(path)
    ts = [int(t) for batch in src for t in batch.ts_ns]
    return ts, src.stats


@pytest.mark.parametrize(
    ("tsresol", "tsoffset", "ticks", "said"),
    [
        (0x80 | 63, None, [1, 2], "if_tsresol 2^-63 s is out of range"),
        (19, None, [1, 2], "if_tsresol 10^-19 s is out of range"),
        (0x7F, None, [1, 2], "if_tsresol 10^-127 s is out of range"),
        (0xFF, None, [1, 2], "if_tsresol 2^-127 s is out of range"),
        (None, -(2**40), [1, 2], "if_tsoffset -1099511627776 s is out of range"),
        (None, 2**62, [1, 2], "if_tsoffset 4611686018427387904 s is out of range"),
    ],
    ids=["2^-63", "10^-19", "10^-127", "2^-127", "offset -2^40 s", "offset 2^62 s"],
)
def test_an_interface_out_of_range_is_damage_not_a_crash(
    tmp_path: Path, tsresol: int | None, tsoffset: int | None, ticks: list[int], said: str
) -> None:
    ts, stats = _read(tmp_path / "c.pcapng", _pcapng(tsresol, tsoffset, ticks))
    assert ts == []
    assert any(said in line for line in stats.damage), stats.damage


@pytest.mark.parametrize(
    ("tsresol", "ticks"),
    [
        (0, [1_700_000_000_000_000]),  # 1 s ticks written as microseconds: year 53 million
        (None, [2**64 - 1]),  # microseconds near 2^64: read as int64, 1969
        (9, [2**63 + 5]),  # nanoseconds past int64
    ],
    ids=["1 s ticks in microseconds", "ticks near 2^64", "ns ticks past int64"],
)
def test_ticks_out_of_range_are_counted_not_wrapped(
    tmp_path: Path, tsresol: int | None, ticks: list[int]
) -> None:
    good = 1_700_000_000 * 10**6  # a microsecond count of 2023
    scale = {0: 10**-6, None: 1, 9: 1000}[tsresol]
    ts, stats = _read(tmp_path / "c.pcapng", _pcapng(tsresol, None, [int(good * scale), *ticks]))
    assert ts == [1_700_000_000 * 10**9]
    assert stats.corrupt_records == 1
    assert "timestamp out of range" in stats.damage[-1]


def test_a_fine_resolution_still_reads_exactly(tmp_path: Path) -> None:
    # 2^-40 s ticks (the remainder times 10^9 passes 64 bits): nanoseconds, floored.
    ticks = 1_000_000 * 2**40 + 2**39
    ts, stats = _read(tmp_path / "c.pcapng", _pcapng(0x80 | 40, None, [ticks]))
    assert ts == [1_000_000_500_000_000]
    assert stats.damage == []


def test_capture_pcap_of_an_out_of_range_interface_is_one_line_of_damage(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    src = tmp_path / "c.pcapng"
    src.write_bytes(_pcapng(0x80 | 63, None, [1, 2]))
    rc = main(["capture", "pcap", str(src), "--out", str(tmp_path / "t.parquet"), "--quiet"])
    said = capsys.readouterr()
    assert rc == 0, said.err
    assert "if_tsresol 2^-63 s is out of range" in said.out


# --- item 14: snaplen 0xFFFFFFFF ---------------------------------------------------------------


def _pcap(snaplen: int, n: int, corrupt: int) -> tuple[bytes, list[int]]:
    head = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, snaplen, 1)
    out, starts, off = [head], [], len(head)
    for k in range(n):
        rec = struct.pack("<IIII", 1_700_000_000 + k, 0, len(FRAME), len(FRAME)) + FRAME
        if k == corrupt:
            rec = rec[:8] + struct.pack("<I", 0x7FFF0000) + rec[12:]
        out.append(rec)
        starts.append(off)
        off += len(rec)
    return b"".join(out), starts


@pytest.mark.parametrize("snaplen", [65535, 0xFFFFFFFF, 0], ids=["65535", "0xFFFFFFFF", "0"])
def test_a_corrupt_length_resynchronizes_whatever_the_snaplen(tmp_path: Path, snaplen: int) -> None:
    data, starts = _pcap(snaplen, 200, corrupt=10)
    ts, stats = _read(tmp_path / "c.pcap", data)
    assert len(ts) == 199
    assert stats.resyncs == [starts[10]]
    assert f"resumed at byte {starts[11]}" in stats.damage[0]

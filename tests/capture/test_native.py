"""The compiled helper ``capture.native`` against the Python and numpy loops it replaces.

The record walk (``capture.source.walk_records``) and the span join
(``capture._spans.join_spans``) each have a compiled path and a Python/numpy one (taken
when the extension is not built). Both must give the same offsets, bytes and traces,
and the compiled one must refuse out-of-bounds input before touching memory.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from testkit.pcap import OURS, SHARED

import capture
import capture._spans as spans_mod
import capture.source as source


def test_the_extension_is_built() -> None:
    """`make setup` (pip install with gcc present) builds it; without it capture is slower."""
    assert spans_mod.native is not None, "capture.native was not built: install gcc and reinstall"
    assert source.native is spans_mod.native


def _records(lengths: list[int], bo: str, corrupt_at: int | None, max_len: int) -> bytes:
    out = bytearray()
    for k, n in enumerate(lengths):
        cap = max_len + 1 + n if k == corrupt_at else n
        out += struct.pack(bo + "IIII", 1_700_000_000 + k, k, cap, n) + bytes([k % 251]) * n
    return bytes(out)


@settings(max_examples=300, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 90), max_size=40),
    bo=st.sampled_from(["<", ">"]),
    corrupt_at=st.one_of(st.none(), st.integers(0, 39)),
    cut=st.integers(0, 30),
    start=st.integers(0, 20),
)
def test_walk_paths_agree(lengths: list[int], bo: str, corrupt_at: int | None, cut: int, start: int) -> None:
    """Offsets, stop and corrupt flag: the same from the compiled walk and the Python
    one, on chains with a corrupt length, a cut last record and an odd start; and right
    against the chain as written."""
    max_len = 64
    lengths = [min(n, max_len) for n in lengths]
    buf = _records(lengths, bo, corrupt_at, max_len)
    buf = buf[: max(0, len(buf) - cut)]
    start = min(start, len(buf))
    native = source.walk_records(buf, start, max_len, bo)
    saved = source.native
    source.native = None
    try:
        python = source.walk_records(buf, start, max_len, bo)
    finally:
        source.native = saved
    assert native[0].tolist() == python[0].tolist()
    assert native[1:] == python[1:]
    if start == 0:  # the truth, from how the chain was written
        want, at = [], 0
        for k, n in enumerate(lengths):
            if k == corrupt_at or at + 16 + n > len(buf):
                break
            want.append(at)
            at += 16 + n
        assert native[0].tolist() == want


@settings(max_examples=300, deadline=None)
@given(
    st.binary(min_size=0, max_size=200),
    st.lists(st.tuples(st.integers(-5, 260), st.integers(0, 40)), max_size=25),
)
def test_join_paths_agree(data: bytes, raw: list[tuple[int, int]]) -> None:
    """The compiled join, the numpy one and plain slicing give the same bytes; an empty
    span may start anywhere (the reassembly asks for such spans)."""
    spans = [(a, n if a >= 0 and a + n <= len(data) else 0) for a, n in raw]
    d = np.frombuffer(data, np.uint8)
    start = np.array([a for a, _ in spans], np.int64)
    length = np.array([n for _, n in spans], np.int64)
    want = b"".join(data[a : a + n] for a, n in spans if n)
    assert spans_mod.join_spans(d, start, length).tobytes() == want
    assert spans_mod._join_words(d, start, length, len(want)).tobytes() == want


def test_join_refuses_out_of_bounds_and_writes_nothing() -> None:
    native = spans_mod.native
    data = np.arange(10, dtype=np.uint8)
    out = np.full(8, 7, np.uint8)
    for start, length, why in (
        ([0, 8], [2, 3], "outside data"),
        ([-1], [2], "outside data"),
        ([0, 0], [5, 5], "out is shorter"),
    ):
        with pytest.raises(ValueError, match=why):
            native.join_spans(data, np.array(start, np.int64), np.array(length, np.int64), out)
        assert out.tolist() == [7] * 8  # every bound is checked before the first copy
    with pytest.raises(ValueError, match="differ in size"):
        native.join_spans(data, np.zeros(2, np.int64), np.zeros(1, np.int64), out)
    with pytest.raises(TypeError, match="writable"):
        native.join_spans(data, np.zeros(1, np.int64), np.ones(1, np.int64), b"12345678")


def test_walk_refuses_bad_arguments() -> None:
    native = spans_mod.native
    buf = _records([4, 4, 4], "<", None, 64)
    with pytest.raises(ValueError, match="outside buf"):
        native.pcap_walk(buf, len(buf) + 1, 64, False, np.empty(8, np.int64))
    with pytest.raises(ValueError, match="outside buf"):
        native.pcap_walk(buf, -1, 64, False, np.empty(8, np.int64))
    with pytest.raises(ValueError, match="no room"):
        native.pcap_walk(buf, 0, 64, False, np.empty(2, np.int64))
    with pytest.raises(TypeError):
        native.pcap_walk(buf, 0, 64, False, "not a buffer")


@pytest.mark.parametrize("chunk", [64, 200, 1 << 20])
def test_damaged_file_read_the_same_way(chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A record with a corrupt length mid-file, resynchronized, and a cut last record, read
    in chunks smaller than records: the same packets and the same damage lines."""
    recs = [
        struct.pack("<IIII", 1_700_000_000 + k, 1000 * k, n, n) + b"\xee" * n
        for k, n in enumerate((10, 30, 5, 40, 12, 7, 33))
    ]
    bad = bytearray(recs[3])
    bad[8:12] = struct.pack("<I", 1 << 30)
    body = b"".join(recs[:3]) + bytes(bad) + b"".join(recs[4:]) + recs[0][:20]
    head = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 64, 1)

    def read() -> tuple:
        import io

        src = source.read_packets(io.BytesIO(head + body), chunk_bytes=chunk)
        packets = [(int(b.ts_ns[i]), b.packet(i)) for b in src for i in range(len(b))]
        return packets, src.stats.to_json()

    compiled = read()
    monkeypatch.setattr(source, "native", None)
    assert read() == compiled
    assert len(compiled[0]) == 6  # the corrupt one skipped, the cut one not whole
    assert any("corrupt record length" in d for d in compiled[1]["damage"])


def _convert(path: Path, out: Path) -> tuple:
    report = capture.convert_pcaps([path], out).to_json()
    report.pop("seconds")
    report.pop("output")
    return pq.read_table(out), report


@pytest.mark.skipif(not SHARED, reason="../shared/data/pcaps is not present")
@pytest.mark.parametrize("path", SHARED + OURS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_same_trace_without_the_extension(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every shared capture (damaged ones included: their corrupt records go through the
    resynchronization between walks) gives the same trace and report either way."""
    compiled = _convert(path, tmp_path / "c.parquet")
    monkeypatch.setattr(source, "native", None)
    monkeypatch.setattr(spans_mod, "native", None)
    python = _convert(path, tmp_path / "p.parquet")
    assert compiled[1] == python[1]
    assert compiled[0].equals(python[0])


def test_turns_refuse_bad_arguments() -> None:
    native = spans_mod.native
    stream = b"GET / HTTP/1.1\r\n\r\n"
    out = (np.empty(1, np.uint8), np.empty(1, np.int64), np.empty(1, np.int64))
    calls = np.ones(1, np.uint8)
    with pytest.raises(ValueError, match="outside the stream"):
        native.http_turns(stream, np.array([0]), np.array([len(stream) + 1]), calls, *out)
    with pytest.raises(ValueError, match="outside the stream"):
        native.http_turns(stream, np.array([5]), np.array([4]), calls, *out)
    with pytest.raises(ValueError, match="one item per turn"):
        native.http_turns(stream, np.array([0]), np.array([4]), calls, np.empty(2, np.uint8), *out[1:])
    native.http_turns(stream, np.array([0]), np.array([len(stream)]), calls, *out)
    assert (out[0][0], out[1][0], out[2][0]) == (1, 0, 5)  # one request, labelled "GET /"


def test_outputs_sharing_memory_with_inputs_cannot_reach_outside() -> None:
    """An output that shares memory with the spans or turns it is given: a copy or a
    verdict that rewrites a later span or turn is caught before it is used (it crashed
    the process before)."""
    native = spans_mod.native
    data = np.zeros(64, np.uint8)
    data[:8] = np.frombuffer(np.int64(1 << 40).tobytes(), np.uint8)
    buf = np.zeros(4, np.int64)
    with pytest.raises(ValueError, match="changed while it was copied"):
        native.join_spans(data, buf[0:2], np.array([8, 8], np.int64), buf[1:3].view(np.uint8))
    stream = b"GET / HTTP/1.1\r\n\r\n" * 2
    arr = np.array([len(stream) // 2, len(stream), 0], np.int64)
    verdict = arr.view(np.uint8)[15:17]  # turn 0's verdict lands in hi[1]'s top byte
    with pytest.raises(ValueError, match="outside the stream"):
        native.http_turns(stream, np.array([0, len(stream) // 2]), arr[:2], np.ones(2, np.uint8), verdict,
                          np.empty(2, np.int64), np.empty(2, np.int64))  # fmt: skip


def test_misaligned_int64_buffers_are_refused() -> None:
    native = spans_mod.native
    odd = memoryview(bytes(17))[1:]  # 16 bytes that start at an odd address
    with pytest.raises(TypeError, match="aligned"):
        native.join_spans(np.zeros(4, np.uint8), odd, np.zeros(2, np.int64), np.zeros(4, np.uint8))
    with pytest.raises(TypeError, match="aligned"):
        native.pcap_walk(b"", 0, 64, False, bytearray(17))

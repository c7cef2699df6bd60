"""The bulk paths of capture against the one-item-at-a-time code they replace.

HTTP/1.x turns checked for the whole batch (``capture._http1.check_turns``) against
``check_turn`` per turn; request lines found for all connections at once
(``starts_with_method``) against ``detect_tcp``; payload spans copied by words
(``capture._spans.join_spans``) against a byte index; header fields read by words
(``capture.decode._Bytes``) against byte reads. End to end, every shared capture gives
the same trace through the bulk paths as through the reference ones.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from testkit.pcap import OURS, SHARED

import capture
import capture._http1 as http1
import capture.decode as decode
import capture.flows as flows
from capture._http1 import check_turn, check_turns, starts_with_method
from capture._spans import join_spans
from capture.protocols import REQUEST_METHODS, detect_tcp

needs_data = pytest.mark.skipif(not SHARED, reason="../shared/data/pcaps is not present")

_RESP = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello"
TURNS = [
    (b"GET /a?x=1 HTTP/1.1\r\nHost: h\r\n\r\n", True),
    (b"GET / HTTP/1.0\r\n\r\n", True),
    (b"GET /\r\n\r\n", True),  # no version (HTTP/0.9 style)
    (b"GET /a HTTP/1.1 HTTP/1.1\r\n\r\n", True),
    (b"GET /x HTTP/1.1/y HTTP/1.1\r\n\r\n", True),
    (b"GET /v HTTP/10\r\n\r\n", True),
    (b"GET HTTP/1.1\r\n\r\n", True),
    (b"GET /caf\xc3\xa9 HTTP/1.1\r\n\r\n", True),
    (b"GET /\xff\xfe HTTP/1.1\r\n\r\n", True),
    (b"GET /" + b"p" * 250 + b"?q HTTP/1.1\r\n\r\n", True),
    (b"GET /" + b"p" * 150 + b"?q HTTP/1.1\r\n\r\n", True),
    (b"FETCH /a HTTP/1.1\r\n\r\n", True),
    (b"get /a HTTP/1.1\r\n\r\n", True),
    (b"OPTIONS * HTTP/1.1\r\n\r\n", True),
    (b"POST /p HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", True),
    (b"POST /p HTTP/1.1\r\nContent-Length: 3\r\n\r\nab", True),
    (b"POST /p HTTP/1.1\r\ncontent-length: 3\r\n\r\nabc", True),
    (b"POST /p HTTP/1.1\r\nCONTENT-LENGTH:3\r\n\r\nabc", True),
    (b"POST /p HTTP/1.1\r\nContent-Length: \t3 \r\n\r\nabc", True),
    (b"POST /p HTTP/1.1\r\nContent-Length: +3\r\n\r\nabc", True),
    (b"POST /p HTTP/1.1\r\nContent-Length: 0_3\r\n\r\nabc", True),
    (b"POST /p HTTP/1.1\r\nContent-Length: 3 3\r\n\r\nabc", True),
    (b"POST /p HTTP/1.1\r\nContent-Length: \r\n\r\nabc", True),
    (b"POST /p HTTP/1.1\r\nContent-Length: 00000000000000000003\r\n\r\nabc", True),
    (b"POST /p HTTP/1.1\r\nContent-Length: 3\x0b\r\n\r\nabc", True),
    (b"POST /p HTTP/1.1\r\nX: 1\nContent-Length: 3\r\n\r\nabc", True),
    (b"POST /p HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", True),
    (b"POST /p HTTP/1.1\r\nTransfer-Encoding: CHUNKED\r\n\r\n0\r\n\r\n", True),
    (b"POST /p HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n0\r\n\r\n", True),
    (b"GET /chunked HTTP/1.1\r\n\r\n", True),
    (b"POST /p HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabc", True),
    (b"POST /p HTTP/1.1\r\ncontent-length: 4\r\nContent-Length: 3\r\n\r\nabc", True),
    (b"POST /p HTTP/1.1\r\nContent\rLength: 3\r\n\r\nabc", True),
    (b"POST /p HTTP/1.1\r\nContent-Length\x1a 3\r\n\r\nabc", True),
    (b"GET /a HTTP/1.1\r\n", True),
    (b"GET /a HTTP/1.1\n\n", True),
    (_RESP, False),
    (_RESP[:-1], False),
    (b"HTTP/1.1 204 No Content\r\n\r\n", False),
    (b"HTTP/1.1 304 Not Modified\r\n\r\n", False),
    (b"HTTP/1.1 304 Not Modified\r\nContent-Length: 0\r\n\r\n", False),
    (b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n", False),
    (b"HTTP/1.1 100 Continue\r\nContent-Length: 0\r\n\r\n", False),
    (b"HTTP/1.1 101 Switching\r\n\r\n", False),
    (b"HTTP/1.0 404 Not Found\r\n\r\n", False),
    (b"HTTP/1.1 200 OK\r\n\r\nbody to the close", False),
    (b"HTTP/1.1 2\xff0 OK\r\nContent-Length: 0\r\n\r\n", False),
    (b"HTTP/2 200\r\n\r\n", False),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", False),
    (b"HTTP/1.\r\n\r\n", False),
    (b"GET /a HTTP/1.1\r\n\r\n", False),
    (_RESP, True),
]


def _both(stream: bytes, lo: list[int], hi: list[int], call: list[bool]) -> None:
    """The compiled check (``capture.native``) and the numpy one each against the reference."""
    args = (stream, np.array(lo, np.int64), np.array(hi, np.int64), np.array(call, bool))
    paths = [http1._numpy_turns, check_turns]
    if http1.native is not None and stream and lo:
        paths.append(http1._compiled_turns)
    for bulk in paths:
        ok, labels = bulk(*args)
        for t, (a, b, c) in enumerate(zip(lo, hi, call, strict=True)):
            want_ok, want_label = check_turn(stream, a, b, c)
            assert bool(ok[t]) == want_ok, (bulk.__name__, stream[a:b], c)
            if want_ok:
                assert labels[t] == want_label, (bulk.__name__, stream[a:b], c)


@pytest.mark.parametrize(
    ("turn", "call"), TURNS, ids=lambda v: repr(v)[:40] if isinstance(v, bytes) else str(v)
)
def test_one_turn_alone_and_among_others(turn: bytes, call: bool) -> None:
    """Each turn checked alone (its bytes end the stream) and between two others."""
    _both(turn, [0], [len(turn)], [call])
    other = b"GET /o HTTP/1.1\r\n\r\n"
    stream = other + turn + _RESP
    _both(stream, [0, len(other), len(other) + len(turn)], [len(other), len(other) + len(turn), len(stream)],
          [True, call, False])  # fmt: skip


def test_all_turns_in_one_stream() -> None:
    stream = b"".join(t for t, _ in TURNS)
    ends = np.cumsum([len(t) for t, _ in TURNS]).tolist()
    _both(stream, [0, *ends[:-1]], ends, [c for _, c in TURNS])


def test_empty_and_no_turns() -> None:
    ok, labels = check_turns(b"", np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, bool))
    assert ok.shape == labels.shape == (0,)
    ok, _ = check_turns(b"", np.array([0]), np.array([0]), np.array([True]))
    assert not ok.any()


_PIECES = st.sampled_from(
    [b"GET", b"POST", b" ", b"/", b"?", b"a", b"\xc3\xa9", b"\r\n", b"\r", b"\n", b"\r\n\r\n", b"HTTP/1.",
     b"1", b"0", b"204", b" HTTP/1.1", b"Content-Length:", b"content-length:", b" 5", b"chunked", b"HUNKED",
     b"\t", b"x" * 9, b"_", b"+"]
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.lists(_PIECES, min_size=1, max_size=30).map(b"".join), st.booleans()), min_size=1,
             max_size=6),
)  # fmt: skip
def test_random_turns(turns: list[tuple[bytes, bool]]) -> None:
    stream = b"".join(t for t, _ in turns)
    ends = np.cumsum([len(t) for t, _ in turns]).tolist()
    _both(stream, [0, *ends[:-1]], ends, [c for _, c in turns])


def _segments(path: Path) -> tuple[bytes, list[int], list[int]]:
    """The TCP payloads of a capture back to back, and where each starts and ends."""
    dec = decode.Decoder()
    parts: list[bytes] = []
    for batch in capture.read_packets(path):
        segs = dec.decode(batch)
        parts += [segs.payload(i) for i in np.flatnonzero((segs.proto == 6) & (segs.pay_cap > 0)).tolist()]
    ends = np.cumsum([len(p) for p in parts]).tolist()
    return b"".join(parts), [0, *ends[:-1]] if ends else [], ends


@needs_data
@pytest.mark.parametrize("path", SHARED + OURS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_turns_of_every_capture(path: Path) -> None:
    """Every TCP payload of the capture, and every two in a row, as a request and as a
    response: the bulk check and the reference agree."""
    stream, lo, hi = _segments(path)
    if not lo:
        return
    for call in (True, False):
        _both(stream, lo, hi, [call] * len(lo))
        _both(stream, lo[:-1], hi[1:], [call] * (len(lo) - 1))


@needs_data
@pytest.mark.parametrize("path", SHARED + OURS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_request_lines_of_every_capture(path: Path) -> None:
    """``starts_with_method`` finds exactly the payloads ``detect_tcp`` calls HTTP by
    their request line (``_is_request``'s first test)."""
    stream, lo, hi = _segments(path)
    if not lo:
        return
    at, end = np.array(lo), np.minimum(np.array(lo) + 256, np.array(hi))
    got = starts_with_method(stream, at, end, REQUEST_METHODS)
    for k, (a, b) in enumerate(zip(at.tolist(), end.tolist(), strict=True)):
        head = stream[a:b]
        sp = head.find(b" ")
        assert bool(got[k]) == (0 < sp <= 16 and head[:sp] in REQUEST_METHODS), head[:20]
        if got[k]:
            assert detect_tcp(head, b"", 40000, 40001) == "http"


@settings(max_examples=200, deadline=None)
@given(
    st.binary(min_size=0, max_size=200),
    st.lists(st.tuples(st.integers(0, 220), st.integers(0, 40)), max_size=20),
)
def test_join_spans(data: bytes, spans: list[tuple[int, int]]) -> None:
    d = np.frombuffer(data, np.uint8)
    spans = [(a, min(n, len(data) - a)) for a, n in spans if a <= len(data)]
    start = np.array([a for a, _ in spans], np.int64)
    length = np.array([n for _, n in spans], np.int64)
    assert join_spans(d, start, length).tobytes() == b"".join(data[a : a + n] for a, n in spans)


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=0, max_size=40), st.lists(st.integers(0, 50), max_size=30))
def test_header_words_near_the_end(data: bytes, positions: list[int]) -> None:
    """Fields read by words equal fields read byte by byte (clamped at the last byte),
    also where they run past the buffer's end."""
    d = np.frombuffer(data, np.uint8)
    b = decode._Bytes(d, np.zeros(0, np.int64))
    pos = np.array(positions, np.int64)
    assert b.be16(pos).tolist() == ((b.u8(pos).astype(np.uint32) << 8) | b.u8(pos + 1)).tolist()
    want = [[int(b.u8(np.array([p + k]))[0]) for k in range(4)] for p in positions]
    assert b.be32(pos).tolist() == [int.from_bytes(bytes(w), "big") for w in want]


def _trace_digest(path: Path, out: Path) -> tuple[pa.Table, dict]:
    report = capture.convert_pcaps([path], out).to_json()
    report.pop("seconds")
    report.pop("output")
    return pq.read_table(out), report


def _reference_turns(stream: bytes, lo: np.ndarray, hi: np.ndarray, is_call: np.ndarray) -> tuple:
    got = [
        check_turn(stream, a, b, c)
        for a, b, c in zip(lo.tolist(), hi.tolist(), is_call.tolist(), strict=True)
    ]
    return np.array([g[0] for g in got], bool), np.array([g[1] for g in got] + [None], object)[:-1]


def _bytewise_spans(data: np.ndarray, start: np.ndarray, length: np.ndarray) -> np.ndarray:
    starts = np.zeros(len(length), np.int64)
    np.cumsum(length[:-1], out=starts[1:])
    return data[np.repeat(start - starts, length) + np.arange(int(length.sum()))]


@needs_data
@pytest.mark.parametrize("path", SHARED + OURS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_bulk_paths_give_the_reference_trace(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same trace, column for column, and the same report, with every bulk path
    replaced by its one-at-a-time reference."""
    fast = _trace_digest(path, tmp_path / "fast.parquet")
    monkeypatch.setattr(flows, "check_turns", _reference_turns)
    monkeypatch.setattr(flows, "starts_with_method", lambda s, at, end, m: np.zeros(len(at), bool))
    monkeypatch.setattr(flows, "join_spans", _bytewise_spans)
    monkeypatch.setattr(decode, "join_spans", _bytewise_spans)
    monkeypatch.setattr(decode._Bytes, "be16", lambda b, p: (b.u8(p).astype(np.uint32) << 8) | b.u8(p + 1))
    monkeypatch.setattr(decode._Bytes, "be32", lambda b, p: (b.be16(p) << 16) | b.be16(p + 2))
    slow = _trace_digest(path, tmp_path / "slow.parquet")
    assert fast[1] == slow[1]
    assert fast[0].equals(slow[0])

"""HTTP/2 labels from HPACK-decoded headers.

Frames are built here with the ``hpack`` encoder (the ground truth of every header
block); real gRPC captures are checked against tshark's HTTP/2 dissector and against
DeepFlow's expected output.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from hpack import Encoder
from hypothesis import given, settings
from hypothesis import strategies as st

import capture
import tracefmt
from capture.protocols import parse_stream
from capture.protocols.http2 import PREFACE, _HeaderBlocks

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "pcaps"
if not DATA.is_dir():
    DATA = Path("/work/shared/data/pcaps")
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason="../shared/data/pcaps is not present")
needs_tshark = pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed")

HEADERS, DATA_FRAME, SETTINGS, CONTINUATION = 1, 0, 4, 9
END_STREAM, END_HEADERS, PADDED, PRIORITY = 0x1, 0x4, 0x8, 0x20


def frame(typ: int, flags: int, sid: int, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([typ, flags]) + struct.pack(">I", sid) + payload


def request(enc: Encoder, sid: int, path: str, *, split: bool = False, padded: bool = False) -> bytes:
    block = enc.encode([(":method", "POST"), (":scheme", "http"), (":path", path), ("te", "trailers")])
    body = frame(DATA_FRAME, END_STREAM, sid, b"\x00\x00\x00\x00\x02hi")
    if split:  # HEADERS then CONTINUATION
        half = len(block) // 2
        return (
            frame(HEADERS, 0, sid, block[:half]) + frame(CONTINUATION, END_HEADERS, sid, block[half:]) + body
        )
    if padded:  # 3 bytes of padding and a priority field
        payload = bytes([3]) + b"\x00\x00\x00\x00\x10" + block + b"\x00" * 3
        return frame(HEADERS, END_HEADERS | PADDED | PRIORITY, sid, payload) + body
    return frame(HEADERS, END_HEADERS, sid, block) + body


def response(enc: Encoder, sid: int) -> bytes:
    head = enc.encode([(":status", "200"), ("content-type", "application/grpc")])
    trailers = enc.encode([("grpc-status", "0")])
    return (
        frame(HEADERS, END_HEADERS, sid, head)
        + frame(DATA_FRAME, 0, sid, b"\x00\x00\x00\x00\x02ok")
        + frame(HEADERS, END_HEADERS | END_STREAM, sid, trailers)
    )


def test_calls_and_returns_carry_the_requests_method_and_path() -> None:
    client, server = Encoder(), Encoder()
    # The second and third requests reuse header fields the first put in the dynamic
    # table; one block is split over a CONTINUATION, one padded with a priority field.
    up = PREFACE + frame(SETTINGS, 0, 0, b"")
    up += request(client, 1, "/shop.Cart/Get") + request(client, 3, "/shop.Cart/Add", split=True)
    up += request(client, 5, "/shop.Cart/Get", padded=True)
    down = frame(SETTINGS, 0, 0, b"") + response(server, 3) + response(server, 1) + response(server, 5)
    ctx: dict = {}
    calls = parse_stream("http2", up, 0, ctx)
    returns = parse_stream("http2", down, 1, ctx)
    assert [(m[2], m[3]) for m in calls] == [
        ("POST /shop.Cart/Get", 1),
        ("POST /shop.Cart/Add", 3),
        ("POST /shop.Cart/Get", 5),
    ]
    assert [(m[2], m[3]) for m in returns] == [
        ("POST /shop.Cart/Add", 3),
        ("POST /shop.Cart/Get", 1),
        ("POST /shop.Cart/Get", 5),
    ]
    # Each message spans exactly its stream's frames.
    assert calls[0][0] == len(PREFACE) + 9
    assert sum(m[1] for m in calls) == len(up) - len(PREFACE) - 9


def test_headers_that_cannot_be_decoded_fall_back_to_the_stream_id() -> None:
    # The capture began after the first request: the second one's fields refer to
    # table entries this side never saw.
    client = Encoder()
    request(client, 1, "/a.B/C")
    seen = request(client, 3, "/a.B/C") + request(client, 5, "/a.B/D")
    msgs = parse_stream("http2", seen, 0, {})
    assert len(msgs) == 2
    assert msgs[0][2] == "stream 3"
    assert msgs[1][2] in ("stream 5", "POST /a.B/D")


def test_after_a_gap_the_table_starts_fresh() -> None:
    # The gap swallowed a request whose fields went into the sender's table, so the
    # next request's references count from a table this side does not have.
    # Read with the stale table, the next request's newest-entry references would name
    # the first request's path.
    client = Encoder()
    first = PREFACE + request(client, 1, "/a.B/First")
    request(client, 3, "/a.B/Lost", split=True)
    after = request(client, 5, "/a.B/Lost")
    ctx: dict = {}
    assert [m[2] for m in parse_stream("http2", first, 0, ctx)] == ["POST /a.B/First"]
    labels = [m[2] for m in parse_stream("http2", after, 0, ctx)]  # a later run: after a gap
    assert labels == ["stream 5"]


def test_a_block_that_refers_to_a_missed_entry_decodes_the_rest() -> None:
    # The decoding side missed the first block. The second one puts a new field in the
    # table, then refers to the missed one, then puts its path in the table: the field
    # it cannot read is left out, the rest is read, and the table stays aligned with the
    # sender's, so the third block (which refers to the path) is read whole.
    enc = Encoder()
    enc.encode([("x-seen-before", "1")])
    second = enc.encode([("x-new", "2"), ("x-seen-before", "1"), (":method", "POST"), (":path", "/a.B/Mid")])
    third = enc.encode([(":method", "POST"), (":path", "/a.B/Mid")])
    side = _HeaderBlocks()
    assert side.add(second, True, True) == {b":method": b"POST", b":path": b"/a.B/Mid"}
    assert side.add(third, True, True) == {b":method": b"POST", b":path": b"/a.B/Mid"}


def test_a_header_block_tail_is_never_read_as_a_block() -> None:
    # A header value whose bytes, read on their own, are valid HPACK: a literal
    # ":method PURGE___..." and ":path /admin/..." ('B' and 'D' index those names, '$'
    # and '!' are the lengths). The block is cut just before them: a side that saw only
    # the CONTINUATION must not read it as a block, nor let it into its table.
    method, path = "PURGE".ljust(36, "_"), "/admin/DeleteEverything".ljust(33, "x")
    tail = "B$" + method + "D!" + path
    enc = Encoder()
    fields = [(":method", "GET"), (":scheme", "https"), (":path", "/real"), ("x-token", "abcdefgh" + tail)]
    block = enc.encode(fields, huffman=False)
    cut = block.index(tail.encode())
    head = PREFACE + frame(HEADERS, 0, 1, block[: cut - 4])  # then a CONTINUATION lost in a gap
    after_gap = frame(CONTINUATION, END_HEADERS, 1, block[cut:]) + frame(DATA_FRAME, END_STREAM, 1, b"")
    after_gap += frame(HEADERS, END_HEADERS | END_STREAM, 3, enc.encode(fields, huffman=False))
    reply = frame(HEADERS, END_HEADERS | END_STREAM, 1, Encoder().encode([(":status", "200")]))
    ctx: dict = {}
    parse_stream("http2", head, 0, ctx)
    labels = [m[2] for m in parse_stream("http2", after_gap, 0, ctx)]
    assert labels in (["stream 3"], ["GET /real"])
    # The capture starting at that CONTINUATION: stream 1's return keeps its stream id.
    ctx = {}
    parse_stream("http2", after_gap, 0, ctx)
    assert [m[2] for m in parse_stream("http2", reply, 1, ctx)] == ["stream 1"]


def test_a_malformed_padded_frame_loses_only_its_own_label() -> None:
    enc = Encoder()
    good = request(enc, 1, "/a.B/Good")
    empty_padded = frame(HEADERS, END_HEADERS | END_STREAM | PADDED, 3, b"")
    over_padded = frame(HEADERS, END_HEADERS | END_STREAM | PADDED, 5, bytes([12]) + b"ABCDEFGHI")
    msgs = parse_stream("http2", good + empty_padded + over_padded, 0, {})
    assert [(m[2], m[3]) for m in msgs] == [("POST /a.B/Good", 1), ("stream 3", 3), ("stream 5", 5)]


PATHS = ["/a.S/M", "/a.S/N", "/b.T/Get", "/b.T/Put", "/c.U/List"]
FIELDS = st.tuples(
    st.sampled_from(["x-a", "x-b", "x-c", "user-agent"]), st.sampled_from(["1", "2", "3", "v"])
)
header_lists = st.lists(
    st.tuples(
        st.sampled_from(PATHS),
        st.sampled_from(["POST", "GET"]),
        st.lists(FIELDS, max_size=4),
        st.lists(FIELDS, max_size=2),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=300, deadline=None)
@given(blocks=header_lists, start=st.integers(0, 24), lost=st.sets(st.integers(0, 24), max_size=4))
def test_a_fresh_table_never_misleads(blocks, start: int, lost: set[int]) -> None:
    # One encoder makes every block (the sender's table); the decoding side starts at
    # block ``start`` and misses the blocks in ``lost`` (a gap: the table starts fresh).
    # Fields before and after the pseudo-headers: a block can fail after it has put
    # some fields in the table and before others.
    enc = Encoder()
    encoded, truth = [], []
    for path, method, before, after in blocks:
        headers = [*before, (":method", method), (":path", path), *after]
        encoded.append(enc.encode(headers))
        truth.append({b":method": method.encode(), b":path": path.encode()})
    side = _HeaderBlocks()
    decoded = 0
    for k in range(min(start, len(blocks) - 1), len(blocks)):
        if k in lost:
            side.reset()
            continue
        got = side.add(encoded[k], True, True)
        assert got is None or got == truth[k]
        decoded += got is not None
    if not lost and start == 0:
        assert decoded == len(blocks)  # seen from the start, every block decodes


def _labels(path: Path, tmp_path: Path) -> list[tuple[str, str]]:
    out = tmp_path / "t.parquet"
    capture.convert_pcaps([path], out)
    t = tracefmt.read_trace(out)
    rows = zip(*(t[c].cast("string").to_pylist() for c in ("proto", "op", "label")), strict=True)
    return [(op, label) for proto, op, label in rows if proto == "http2"]


@needs_data
@needs_tshark
@pytest.mark.parametrize("name", ["Unary", "Server_Streaming", "Client_Streaming", "Bidi_Streaming"])
def test_grpc_methods_agree_with_tshark(name: str, tmp_path: Path) -> None:
    path = DATA / "grpc_packt" / f"{name}.pcapng"
    out = subprocess.run(
        ["tshark", "-r", str(path), "-d", "tcp.port==50051,http2", "-Y", "http2.headers.path",
         "-T", "fields", "-e", "http2.headers.method", "-e", "http2.headers.path"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    theirs = sorted(" ".join(line.split("\t")) for line in out.splitlines())
    ours = _labels(path, tmp_path)
    assert theirs
    assert sorted(label for op, label in ours if op == "call") == theirs
    assert sorted(label for op, label in ours if op == "return") == theirs


@needs_data
@pytest.mark.parametrize(
    "name", ["http_grpc-unary", "http_grpc-server-stream", "http_grpc-segmented", "http_h2c_ascii"]
)
def test_paths_agree_with_deepflow_on_captures_that_start_mid_connection(name: str, tmp_path: Path) -> None:
    # These captures begin after the connection's first bytes; the requests' fields are
    # literals, which a fresh table reads.
    result = (DATA / "deepflow" / f"{name}.result").read_text()
    theirs = sorted(p for p in re.findall(r'path: "([^"]*)"', result) if p)
    ours = _labels(DATA / "deepflow" / f"{name}.pcap", tmp_path)
    assert sorted(label.split(" ", 1)[1] for op, label in ours if op == "call") == theirs

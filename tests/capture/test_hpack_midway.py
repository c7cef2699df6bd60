"""HPACK decoding of connections seen mid-way (``capture.hpack_midway``).

The ground truth is ``hpack``'s own encoder: header lists are encoded with its dynamic
table, the decoder is given only the blocks from the k-th on (a capture that started
late), and each field is checked against the list encoded. Which fields can be known
is told by the encoder itself: a recording subclass notes, for every field, the dynamic
entry its representation refers to and where each entry's name came from.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
from collections import deque
from pathlib import Path

import pytest
from hpack import Encoder
from hypothesis import given, settings
from hypothesis import strategies as st
from testkit.pcap import loopback_recording

import tracefmt
from capture.hpack_midway import UNSEEN_MAX_SIZE, HeaderBlockError, MidwayDecoder
from capture.protocols import FOUND_HEADERS, WANT_HEADERS, parse_stream
from capture.protocols.http2 import _HeaderBlocks
from wirepath.cli import main

HEADERS, DATA_FRAME = 1, 0
END_STREAM, END_HEADERS = 0x1, 0x4
_STATIC_LEN = 61


class _Entry:
    """A dynamic entry of the sender's table: the block that inserted it, and the entry
    its name was taken from (None: a literal or static name)."""

    __slots__ = ("block", "name_from")

    def __init__(self, block: int, name_from: _Entry | None) -> None:
        self.block, self.name_from = block, name_from

    def known_from(self, first: int) -> bool:
        """Whether a decoder given the blocks from ``first`` on knows the entry whole."""
        e: _Entry | None = self
        while e is not None:
            if e.block < first:
                return False
            e = e.name_from
        return True


class RecordingEncoder(Encoder):
    """``hpack.Encoder``, noting per field the dynamic entry it refers to (None: none)."""

    def __init__(self) -> None:
        super().__init__()
        self.shadow: deque[_Entry] = deque()  # beside header_table.dynamic_entries
        self.blocks: list[bytes] = []
        self.truth: list[list[tuple[bytes, bytes]]] = []
        self.refs: list[list[_Entry | None]] = []

    def _trim(self) -> None:
        # Eviction takes the oldest entries; an entry too large empties the table.
        while len(self.shadow) > len(self.header_table.dynamic_entries):
            self.shadow.pop()

    def add(self, to_add: tuple[bytes, bytes], sensitive: bool, huffman: bool = False) -> bytes:
        self._trim()  # a size change since the last field
        match = self.header_table.search(*to_add)
        ref = self.shadow[match[0] - _STATIC_LEN - 1] if match and match[0] > _STATIC_LEN else None
        self.refs[-1].append(ref)
        self.truth[-1].append(to_add)
        out = super().add(to_add, sensitive, huffman)
        perfect = match is not None and match[2] is not None
        if not sensitive and not perfect:  # a literal with incremental indexing
            self.shadow.appendleft(_Entry(len(self.blocks), ref))
        self._trim()
        return out

    def block(self, headers: list, *, huffman: bool = True) -> bytes:
        self.refs.append([])
        self.truth.append([])
        b = self.encode(headers, huffman=huffman)
        self.blocks.append(b)
        return b

    def expected(self, k: int, first: int) -> list[tuple[bytes, bytes] | None]:
        """Block k's fields as a decoder started at block ``first`` can know them."""
        return [
            t if r is None or r.known_from(first) else None
            for t, r in zip(self.truth[k], self.refs[k], strict=True)
        ]


# ---- against the encoder's truth ------------------------------------------------------------

NAMES = [":path", "x-a", "x-b", "user-agent", "x-request-id", "content-type"]
VALUES = st.one_of(st.sampled_from(["1", "2", "/a.S/M", "v" * 40]), st.text("abcdef", min_size=1, max_size=6))
FIELD = st.tuples(st.sampled_from(NAMES), VALUES, st.sampled_from([False, False, False, True]))  # sensitive
BLOCK = st.tuples(
    st.lists(FIELD, max_size=6),
    st.booleans(),  # Huffman
    st.sampled_from([None, None, None, 0, 90, 200, 4096]),  # a table size change before it
)


@settings(max_examples=400, deadline=None)
@given(blocks=st.lists(BLOCK, min_size=1, max_size=30), first=st.integers(0, 12))
def test_fields_are_decoded_exactly_when_knowable(blocks: list, first: int) -> None:
    # Every field whose representation needs no entry of a dropped block is decoded as
    # encoded; every other field is None: never another value. Small tables (a size
    # change in a dropped block is not seen) make entries evict and overflow.
    enc = RecordingEncoder()
    for fields, huffman, resize in blocks:
        if resize is not None:
            enc.header_table_size = resize
        enc.block([(n, v, s) for n, v, s in fields], huffman=huffman)
    first = min(first, len(blocks) - 1)
    dec = MidwayDecoder()
    for k in range(first, len(blocks)):
        got = dec.decode(enc.blocks[k])
        assert got == enc.expected(k, first), k
    if first == 0:  # seen from the start, everything decodes
        assert all(None not in enc.expected(k, 0) for k in range(len(blocks)))


def _grpc_calls(calls: int, *, indexed_id: bool) -> RecordingEncoder:
    """A gRPC client's request headers; ``x-request-id`` a new value each call, sent
    as grpcio does (a literal name, never indexed) or indexed (the name then refers to
    the previous call's entry)."""
    enc = RecordingEncoder()
    for i in range(calls):
        enc.block(
            [
                (":method", "POST"),
                (":path", "/shop.Shop/Quote"),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
                ("x-request-id", f"req-{i:04d}", not indexed_id),
            ]
        )
    return enc


def _frame(typ: int, flags: int, sid: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([typ, flags]) + sid.to_bytes(4, "big") + payload


def _parse_from(enc: RecordingEncoder, first: int) -> tuple[list, dict]:
    """Parse the client direction of the calls from ``first`` on (a late capture): the
    messages and the x-request-id found per message offset."""
    body = b"\x00\x00\x00\x00\x02hi"
    seen = b"".join(
        _frame(HEADERS, END_HEADERS, 2 * k + 1, enc.blocks[k])
        + _frame(DATA_FRAME, END_STREAM, 2 * k + 1, body)
        for k in range(first, len(enc.blocks))
    )
    ctx: dict = {WANT_HEADERS: frozenset({b"x-request-id"})}
    msgs = parse_stream("http2", seen, 0, ctx)
    return msgs, ctx.get(FOUND_HEADERS, {})


@pytest.mark.parametrize("first", [1, 2, 7])
def test_grpc_request_ids_of_a_channel_seen_late(first: int) -> None:
    enc = _grpc_calls(12, indexed_id=False)
    msgs, found = _parse_from(enc, first)
    assert len(msgs) == 12 - first
    ids = [dict(found.get(m[0], [])).get(b"x-request-id") for m in msgs]
    assert ids == [f"req-{k:04d}".encode() for k in range(first, 12)]
    # :path is an entry of the first call, never seen: no label rather than "POST".
    assert [m[2] for m in msgs] == [f"stream {2 * k + 1}" for k in range(first, 12)]


def test_grpc_labels_come_back_once_the_table_turns_over() -> None:
    # With x-request-id indexed, each call's entry pushes the first call's out of a
    # 4,096-byte table; then :path and the rest are sent as literals again. The ids'
    # name is a reference to the previous call's entry all along: never on the wire, so
    # no id can be told (and none is made up).
    enc = _grpc_calls(120, indexed_id=True)
    msgs, found = _parse_from(enc, 1)
    labels = [m[2] for m in msgs]
    assert all(
        lab in ("POST /shop.Shop/Quote", f"stream {m[3]}") for lab, m in zip(labels, msgs, strict=True)
    )
    relabelled = labels.index("POST /shop.Shop/Quote")
    assert relabelled < 100
    assert set(labels[relabelled:]) == {"POST /shop.Shop/Quote"}
    assert found == {}


def test_grpc_from_the_start_gives_everything() -> None:
    enc = _grpc_calls(5, indexed_id=True)
    msgs, found = _parse_from(enc, 0)
    assert [m[2] for m in msgs] == ["POST /shop.Shop/Quote"] * 5
    assert [dict(found[m[0]])[b"x-request-id"] for m in msgs] == [f"req-{i:04d}".encode() for i in range(5)]


# ---- the table's bookkeeping ----------------------------------------------------------------


def test_a_reference_past_the_known_entries_is_unknown_and_the_block_goes_on() -> None:
    # 0xff 0x80 0x01: index 127 + 128; then :method GET, a literal new name.
    block = b"\xff\x80\x01" + b"\x82" + b"\x00\x01a\x01b"
    assert MidwayDecoder().decode(block) == [None, (b":method", b"GET"), (b"a", b"b")]


def test_a_placeholder_keeps_later_indices_aligned() -> None:
    enc = Encoder()
    enc.encode([("x-old", "1")], huffman=False)  # missed
    seen = [
        enc.encode([("x-old", "2")], huffman=False),  # name from the missed entry: a placeholder
        enc.encode([("x-new", "3")], huffman=False),  # goes in front of it
        enc.encode([("x-new", "3"), ("x-old", "2"), ("x-old", "1")], huffman=False),
    ]
    dec = MidwayDecoder()
    assert [dec.decode(b) for b in seen] == [[None], [(b"x-new", b"3")], [(b"x-new", b"3"), None, None]]
    assert len(dec) == 2
    assert seen[2] == b"\xbe\xbf\xc0"  # indices 62, 63, 64: the placeholder is 63


def test_size_updates_are_honoured() -> None:
    dec = MidwayDecoder()
    dec.decode(b"\x40\x01a\x01b\x40\x01c\x01d")  # two entries of 34 bytes
    assert (len(dec), dec.max_size) == (2, None)
    assert dec.decode(b"\x3f\x1b\xbe\xbf") == [(b"c", b"d"), None]  # size update to 58: "a" goes
    assert (len(dec), dec.max_size) == (1, 58)
    assert dec.decode(b"\x20\x3f\xe1\x1f") == []  # to 0 (everything goes), back to 4096
    assert (len(dec), dec.max_size) == (0, 4096)


def test_eviction_counts_a_placeholder_at_its_smallest() -> None:
    # Table of 100 bytes. A placeholder with a 1-byte value is at least 33 bytes (its
    # name unknown); with a known 34-byte entry in front, 67 <= 100: both may still be
    # there, both kept. Another 34 bytes make at least 101: the placeholder, the
    # oldest, is certainly gone; the known entries are kept and still answer.
    dec = MidwayDecoder()
    dec.decode(b"\x3f\x45" + b"\x7f\x09\x01v")  # size 100; name index 72 (unseen), value v
    assert len(dec) == 1
    dec.decode(b"\x40\x01a\x01b")
    assert len(dec) == 2
    assert dec.decode(b"\x40\x01c\x01d\xbe\xbf\xc0") == [(b"c", b"d"), (b"c", b"d"), (b"a", b"b"), None]
    assert len(dec) == 2


def test_entries_are_kept_up_to_the_unseen_maximum() -> None:
    dec = MidwayDecoder()
    value = b"v" * 991  # entries of 1,024 bytes
    block = b"\x40\x01a\x7f\xe0\x06" + value
    for _ in range(UNSEEN_MAX_SIZE // 1024 + 3):
        dec.decode(block)
    assert len(dec) == UNSEEN_MAX_SIZE // 1024


@pytest.mark.parametrize(
    "block",
    [
        pytest.param(b"\x80", id="index-0"),
        pytest.param(b"\xff", id="integer-cut"),
        pytest.param(b"\xff\xff\xff\xff\xff\xff\x01", id="integer-overlong"),
        pytest.param(b"\x00\x05ab", id="string-cut"),
        pytest.param(b"\x00", id="name-missing"),
        pytest.param(b"\x00\x81\xff\x01a", id="bad-huffman"),
        pytest.param(b"\x82\x20", id="size-update-after-a-field"),
        pytest.param(b"\x3f\xe1\xff\xff\xff\x0f", id="size-update-huge"),
    ],
)
def test_malformed_blocks_raise(block: bytes) -> None:
    with pytest.raises(HeaderBlockError):
        MidwayDecoder().decode(block)


def test_empty_block_and_wrong_type() -> None:
    assert MidwayDecoder().decode(b"") == []
    with pytest.raises(TypeError):
        MidwayDecoder().decode("\x82")  # type: ignore[arg-type]


# ---- the HTTP/2 side's state ---------------------------------------------------------------


def test_a_block_with_unseen_references_decodes_the_rest() -> None:
    # The decoding side missed the first block. The second puts a new field in the
    # table, refers to the missed one, then puts its path in the table: both sides
    # agree on the newest entries, so the third block reads the path right.
    enc = Encoder()
    enc.encode([("x-seen-before", "1")])
    second = enc.encode([("x-new", "2"), ("x-seen-before", "1"), (":method", "POST"), (":path", "/a.B/Mid")])
    third = enc.encode([(":method", "POST"), (":path", "/a.B/Mid"), ("x-new", "2"), ("x-seen-before", "1")])
    side = _HeaderBlocks(frozenset({b"x-new", b"x-seen-before"}))
    assert side.add(second, True, True) == {b":method": b"POST", b":path": b"/a.B/Mid"}
    assert side.fields == [(b"x-new", b"2")]
    assert side.add(third, True, True) == {b":method": b"POST", b":path": b"/a.B/Mid"}
    assert side.fields == [(b"x-new", b"2")]


def test_without_its_path_a_partly_decoded_block_gives_no_label_but_its_fields() -> None:
    enc = Encoder()
    enc.encode([(":method", "POST"), (":path", "/a.B/C")])
    block = enc.encode([(":method", "POST"), (":path", "/a.B/C"), ("x-request-id", "r-2", True)])
    side = _HeaderBlocks(frozenset({b"x-request-id"}))
    assert side.add(block, True, True) is None
    assert side.fields == [(b"x-request-id", b"r-2")]


def test_a_malformed_block_still_starts_the_table_afresh() -> None:
    side = _HeaderBlocks()
    assert side.add(b"\x44\x02/x\x82", True, True) == {b":path": b"/x", b":method": b"GET"}
    assert side.add(b"\x82\xbe\x00\x05ab", True, True) is None  # cut short after reading 62
    assert side.add(b"\x82\xbe", True, True) is None  # 62 is unknown again
    assert side.fields == []


# ---- a real channel on the loopback, recorded with tcpdump after its first calls ----------

recorded = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("tcpdump") is None, reason="needs root and tcpdump (packet capture)"
)


def _free_server_port() -> int:
    """A free port below the ephemeral range: without the SYN, the server of a
    connection is told by its port (the lower one, neither being well known)."""
    for port in range(20000 + os.getpid() % 1000, 32000, 97):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    pytest.skip("no free port below 32000")


def _tcpdump(pcap: Path, port: int) -> contextlib.AbstractContextManager[None]:
    """Record the loopback's traffic to and from ``port`` while the block runs."""
    return loopback_recording(pcap, f"tcp port {port}")


@pytest.mark.needs_root
@recorded
def test_grpc_channel_recorded_mid_way_gives_request_ids(tmp_path: Path) -> None:
    # grpcio indexes :path, content-type and the rest on the channel's first call; the
    # capture starts after three calls, so every later request refers to entries it
    # never saw. x-request-id is a literal each call: it reaches the trace.
    grpc = pytest.importorskip("grpc")
    from concurrent import futures

    port, pcap, out = _free_server_port(), tmp_path / "late.pcap", tmp_path / "late.parquet"
    handler = grpc.method_handlers_generic_handler(
        "shop.Shop", {"Quote": grpc.unary_unary_rpc_method_handler(lambda request, context: request)}
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            quote = channel.unary_unary("/shop.Shop/Quote")
            for i in range(3):
                assert quote(b"q", metadata=[("x-request-id", f"before-{i}")]) == b"q"
            with _tcpdump(pcap, port):
                for i in range(4):
                    assert quote(b"q", metadata=[("x-request-id", f"after-{i}")]) == b"q"
    finally:
        server.stop(None)
    assert main(["capture", "pcap", str(pcap), "--out", str(out)]) == 0
    t = tracefmt.read_trace(out)
    cols = {c: t[c].cast("string").to_pylist() for c in ("proto", "op", "request_id")}
    calls = [i for i, op in enumerate(cols["op"]) if op == "call"]
    assert [cols["proto"][i] for i in calls] == ["http2"] * 4
    assert [cols["request_id"][i] for i in calls] == [f"after-{i}" for i in range(4)]

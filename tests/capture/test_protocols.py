"""Protocol parsers: boundaries on known bytes, and garbage never escapes as an exception.

Whole connections with malformed or cut messages are written to pcap files and their
trace checked against Wireshark's dissectors (tshark): no message is lost unsaid.
"""

from __future__ import annotations

import dataclasses
import shutil
import struct
from pathlib import Path

import dpkt
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from testkit.messages import thrift_message
from testkit.pcap import epoch_ns, tshark_rows

import capture
import tracefmt
from capture.protocols import detect_tcp, parse_dns_datagram, parse_stream, registry


@pytest.mark.parametrize(
    ("client", "server", "dport", "want"),
    [
        (b"GET / HTTP/1.1\r\n", b"", 9999, "http"),
        (b"", b"HTTP/1.0 200 OK\r\n", 9999, "http"),
        (b"\x00GET /x HTTP/1.1\r\n", b"", 9999, "http"),  # a stray byte before the request
        (b"*3\r\n$3\r\nSET\r\n", b"+OK\r\n", 1234, "redis"),
        (b"PING\r\n", b"+PONG\r\n", 6379, "redis"),  # inline command on the Redis port
        (b"get foo\r\n", b"END\r\n", 1234, "memcached"),
        (b"\x80\x00" + b"\0" * 22, b"\x81", 1234, "memcached"),
        (b"\x00\x1c\xab\xcd\x01\x00\x00\x01" + b"\0" * 20, b"", 53, "dns"),
        (b"\x16\x03\x01\x02\x00", b"\x16\x03\x03", 443, "tcp"),  # TLS: not parsed
        (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", b"", 1234, "http2"),
        (b"\x00\x00\x04\x01\x04\x00\x00\x00\x01abcd", b"\x00\x00\x00\x04\x00\x00\x00\x00\x00", 1234, "http2"),
        (b"\x00\x00\x00\x08\x04\xd2\x16\x2f", b"N", 1234, "postgresql"),
        (b"Q\x00\x00\x00\x0dSELECT 1\x00", b"T\x00\x00\x00\x04Z\x00\x00\x00\x05I", 1234, "postgresql"),
        (b"", b"\x4a\x00\x00\x00\x0a8.0.1\x00" + b"\x01" * 70, 1234, "mysql"),
        (b"\x80\x01\x00\x01\x00\x00\x00\x03add\x00\x00\x00\x05\x00", b"", 1234, "thrift"),
    ],
    ids=[
        "http-req",
        "http-resp",
        "http-junk",
        "redis",
        "redis-inline",
        "mc-text",
        "mc-bin",
        "dns-tcp",
        "tls",
        "h2-preface",
        "h2-midway",
        "pg-ssl",
        "pg-query",
        "mysql-greeting",
        "thrift",
    ],
)
def test_detect_by_content(client: bytes, server: bytes, dport: int, want: str) -> None:
    assert detect_tcp(client, server, 40000, dport) == want


def test_http_chunked_and_content_length_boundaries() -> None:
    resp = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nWiki\r\n0\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc"
    )
    msgs = parse_stream("http", resp, 1, {"methods": [b"GET", b"GET"]})
    assert [(o, n) for o, n, _, _ in msgs] == [(0, 61), (61, 41)]


def test_memcached_storage_command_includes_its_data_block() -> None:
    msgs = parse_stream("memcached", b"set k 0 0 5\r\nhello\r\nget k\r\n", 0, {})
    assert [(o, n, lab) for o, n, lab, _ in msgs] == [(0, 20, "set"), (20, 7, "get")]
    resp = parse_stream("memcached", b"STORED\r\nVALUE k 0 5\r\nhello\r\nEND\r\n", 1, {})
    assert [(o, n) for o, n, _, _ in resp] == [(0, 8), (8, 25)]


def test_dns_over_tcp_uses_transaction_ids() -> None:
    q = bytes.fromhex("12340100000100000000000003666f6f0000010001")
    msgs = parse_stream("dns", len(q).to_bytes(2, "big") + q, 0, {})
    assert msgs == [(0, 2 + len(q), "A foo", 0x1234)]


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(["http", "redis", "memcached", "dns", "http2", "postgresql", "mysql", "thrift", "tcp"]),
    st.binary(max_size=300),
    st.integers(0, 1),
)
def test_fuzz_parsers_never_raise(proto: str, data: bytes, direction: int) -> None:
    msgs = parse_stream(proto, data, direction, {})
    for off, n, _, _ in msgs:
        assert 0 <= off <= len(data)
        assert n >= 0


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=200))
def test_fuzz_dns_and_detection(data: bytes) -> None:
    parse_dns_datagram(data)
    detect_tcp(data, data[::-1], 1234, 80)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([b"GET ", b"HTTP/1.1 ", b"\r\n", b"Content-Length: 9", b"0\r\n", b"x" * 7]),
                max_size=20))  # fmt: skip
def test_fuzz_http_like_fragments(parts: list[bytes]) -> None:
    data = b"".join(parts)
    for d in (0, 1):
        parse_stream("http", data, d, {"methods": [b"HEAD"]})


# ---- whole connections in pcap files, checked with Wireshark's dissectors (tshark) -----------
needs_tshark = pytest.mark.skipif(shutil.which("tshark") is None, reason="needs tshark")
CLIENT, SERVER = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])


def _frame(client: bool, port: int, seq: int, ack: int, flags: int, data: bytes = b"") -> bytes:
    """An Ethernet frame of the connection 10.0.0.1:40000 <-> 10.0.0.2:``port``."""
    src, dst = (CLIENT, SERVER) if client else (SERVER, CLIENT)
    sport, dport = (40000, port) if client else (port, 40000)
    seg = dpkt.tcp.TCP(sport=sport, dport=dport, seq=seq, ack=ack, flags=flags, win=65535, data=data)
    ip = dpkt.ip.IP(src=src, dst=dst, p=6, ttl=64, data=seg)
    ip.len = len(bytes(ip))
    return bytes(dpkt.ethernet.Ethernet(src=b"\x02" * 6, dst=b"\x04" * 6, data=ip))


def _write_connection(
    path: Path, port: int, turns: list[tuple[bool, bytes]], *, lost: tuple[int, ...] = ()
) -> Path:
    """A nanosecond pcap of one TCP connection: handshake, one segment per ``(client?, bytes)``
    turn 1 ms apart, FINs. The turns at the indices ``lost`` are left out of the file (a gap)."""
    seq = {True: 1000, False: 5000}
    frames = [
        _frame(True, port, 999, 0, 0x02),
        _frame(False, port, 4999, 1000, 0x12),
        _frame(True, port, 1000, 5000, 0x10),
    ]
    for k, (client, data) in enumerate(turns):
        frame = _frame(client, port, seq[client], seq[not client], 0x18, data)
        seq[client] += len(data)
        frames.append(None if k in lost else frame)
    frames += [
        _frame(True, port, seq[True], seq[False], 0x11),
        _frame(False, port, seq[False], seq[True] + 1, 0x11),
    ]
    with path.open("wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, 1))
        for k, frame in enumerate(frames):
            if frame is not None:
                ts = 1_700_000_000_000_000_000 + k * 1_000_000
                f.write(struct.pack("<IIII", *divmod(ts, 1_000_000_000), len(frame), len(frame)) + frame)
    return path


def _convert(pcap: Path) -> tuple[list[tuple[int, str, str, str | None]], capture.CaptureReport]:
    """The trace's messages as (timestamp ns, op, proto, label), and the capture report."""
    report = capture.convert_pcaps([pcap], pcap.with_suffix(".parquet"))
    t = tracefmt.read_trace(pcap.with_suffix(".parquet"))
    cols = [t["timestamp"].cast(pa.int64()), t["op"], t["proto"], t["label"]]
    return list(zip(*(c.to_pylist() for c in cols), strict=True)), report


def _pg(typ: bytes, body: bytes) -> bytes:
    return typ + struct.pack(">I", 4 + len(body)) + body


_PG_STARTUP = struct.pack(">II", 16, 196608) + b"user\0u\0\0"
_PG_READY = _pg(b"Z", b"I")


@needs_tshark
@pytest.mark.parametrize("lost", [(), (6,)], ids=["whole", "a-later-query-lost"])
@pytest.mark.parametrize(
    "text", [b"\0x\0", b"\0SELECT 1\0", b" \0x", b"\0"], ids=["nul-x", "nul-select", "blank", "empty"]
)
def test_a_query_whose_text_starts_with_nul_is_one_call(
    tmp_path: Path, text: bytes, lost: tuple[int, ...]
) -> None:
    """Every PostgreSQL message of the connection is in the trace, as Wireshark dissects it:
    the client's messages are calls (Terminate a send), the server's returns, a simple
    query labelled with the first word of its text (up to the NUL: none here)."""
    turns = [
        (True, _PG_STARTUP),
        (False, _pg(b"R", struct.pack(">I", 0)) + _PG_READY),
        (True, _pg(b"Q", text)),
        (False, _pg(b"I", b"") + _PG_READY),
        (True, _pg(b"Q", b"select 2\0")),
        (False, _pg(b"C", b"SELECT 1\0") + _PG_READY),
        (True, _pg(b"Q", b"delete from t\0")),
        (False, _pg(b"C", b"DELETE 0\0") + _PG_READY),
        (True, _pg(b"X", b"")),
    ]
    pcap = _write_connection(tmp_path / "pg.pcap", 5432, turns, lost=lost)
    named = {"Startup message": "startup", "Termination": "terminate"}
    want = []
    for t, sport, types, query in tshark_rows(
        pcap, "pgsql", "frame.time_epoch", "tcp.srcport", "pgsql.type", "pgsql.query"
    ):
        if sport == "5432":
            want.append((epoch_ns(t), "return", "postgresql"))
            continue
        label = named.get(types, (query.split() or [""])[0].upper())
        want.append((epoch_ns(t), "send" if types == "Termination" else "call", "postgresql", label))
    got, _ = _convert(pcap)
    assert len(want) == len(turns) - len(lost)
    assert [g if g[1] != "return" else g[:3] for g in got] == want


def _mysql(seq: int, body: bytes) -> bytes:
    return len(body).to_bytes(3, "little") + bytes([seq]) + body


#: Protocol 10, version, thread id, salt, capabilities, charset, status, more capabilities,
#: salt length, reserved, the rest of the salt, the authentication plugin.
_MYSQL_GREETING = _mysql(
    0,
    b"\x0a8.0.36\0" + struct.pack("<I", 7) + b"abcdefgh\0"
    + struct.pack("<HBHHB", 0xFFFF, 0x21, 2, 0xDFFF, 21)
    + bytes(10) + b"ijklmnopqrst\0caching_sha2_password\0",
)  # fmt: skip
#: An SSLRequest: the first 32 bytes of a login, CLIENT_SSL (0x0800) among the capabilities.
_MYSQL_SSL_REQUEST = _mysql(1, struct.pack("<IIB", 0x000FAE85, 1 << 24, 0x21) + bytes(23))


@needs_tshark
@pytest.mark.parametrize("cut", [5, 8, 36], ids=["one-byte-of-body", "capabilities-seen", "whole"])
def test_a_mysql_ssl_request_cut_by_a_gap_is_still_a_message(tmp_path: Path, cut: int) -> None:
    """The client's SSLRequest (packet 1, 32 bytes) loses all but its first ``cut`` bytes
    to a gap: it is still the client's message, as Wireshark dissects each frame on its
    own: a login while the capability that says SSL is not seen, else an SSL request
    (which nothing answers in MySQL: the TLS handshake follows)."""
    turns = [(False, _MYSQL_GREETING), (True, _MYSQL_SSL_REQUEST[:cut]), (True, _MYSQL_SSL_REQUEST[cut:])]
    pcap = _write_connection(tmp_path / "my.pcap", 3306, turns, lost=(2,) if cut < 36 else ())
    rows = tshark_rows(
        pcap, "mysql", "frame.time_epoch", "_ws.col.Info", options=("-o", "tcp.desegment_tcp_streams:FALSE")
    )
    kinds = {
        "Server Greeting": ("send", "greeting"),
        "SSL Handshake": ("send", "SSLRequest"),
        "Login Request": ("call", "login"),
    }
    want = [(epoch_ns(t), *next(v for k, v in kinds.items() if k in info)) for t, info in rows]
    got, _ = _convert(pcap)
    assert len(want) == 2
    assert [(t, op, label) for t, op, proto, label in got] == want
    assert {proto for _, _, proto, _ in got} == {"mysql"}


def _flow_stats(pcap: Path) -> capture.FlowStats:
    """The TCP assembler's counters over the whole file."""
    dec, asm = capture.Decoder(), capture.FlowAssembler()
    for batch in capture.PcapSource(pcap):
        asm.feed(dec.decode(batch))
    asm.feed(dec.decode(capture.PacketBatch.from_packets([], 1)), final=True)
    return asm.stats


@needs_tshark
def test_a_thrift_call_with_a_field_of_no_known_type_is_kept_and_the_rest_counted(tmp_path: Path) -> None:
    """Unframed Thrift: a message whose body holds a field of an unknown type (0x11) has no
    known end. Its call is kept (method and sequence id as Wireshark reads them), and the
    client's bytes from its body on are counted as unparsed, never dropped unsaid."""
    i32_field = b"\x08\x00\x01" + struct.pack(">i", 5) + b"\x00"
    bad_body = b"\x11\x00\x01" + struct.pack(">i", 5) + b"\x00"
    turns = [
        (True, thrift_message(1, b"add", 1, i32_field)),
        (False, thrift_message(2, b"add", 1, i32_field)),
        (True, thrift_message(1, b"bad", 2, bad_body)),
        (False, thrift_message(3, b"bad", 2, b"\x00")),
        (True, thrift_message(1, b"sub", 3, i32_field)),
        (False, thrift_message(2, b"sub", 3, i32_field)),
    ]
    pcap = _write_connection(tmp_path / "thrift.pcap", 9090, turns)
    rows = tshark_rows(
        pcap, "thrift", "frame.time_epoch", "thrift.mtype", "thrift.method", "thrift.seq_id",
        options=("-d", "tcp.port==9090,thrift"),
    )  # fmt: skip
    ops = {"0x01": "call", "0x02": "return", "0x03": "return"}
    truth = [(epoch_ns(t), ops[m], "thrift", name, int(seq)) for t, m, name, seq in rows]
    assert [r[3:] for r in truth] == [("add", 1), ("add", 1), ("bad", 2), ("bad", 2), ("sub", 3), ("sub", 3)]
    got, report = _convert(pcap)
    # Every other message is in the trace: the client's call after the malformed one lies
    # in the bytes that one leaves unparsed.
    assert truth.pop(4)[1:4] == ("call", "thrift", "sub")
    assert [g if g[1] == "call" else g[:3] for g in got] == [
        r[:4] if r[1] == "call" else r[:3] for r in truth
    ]
    unparsed = len(bad_body) + len(turns[4][1])
    assert _flow_stats(pcap).unparsed_bytes == unparsed
    # ... and the capture's report says so.
    assert report.unparsed_bytes == unparsed
    assert f"protocol bytes not parsed {unparsed:,}" in report.summary()


def test_a_failing_parser_keeps_the_messages_it_found_before() -> None:
    """A fault of a parser on bytes it did not foresee ends the run: what it found before
    stays, and the rest is left unparsed (for the caller to count)."""

    def fails_after_one(buf: bytes, direction: int, ctx: dict, out: list) -> list:
        out.append((0, 3, "first", None))
        raise IndexError("a fault")

    redis = registry.get("redis")
    registry.register(dataclasses.replace(redis, parse=fails_after_one), replace=True)
    try:
        assert parse_stream("redis", b"abcdef", 0, {}) == [(0, 3, "first", None)]
    finally:
        registry.register(redis, replace=True)


#: Starts of each protocol's messages, for random bytes to follow.
_STARTS = [
    b"",
    b"Q\0\0\0\x08",
    b"P\0\0\0\x0cs\0",
    b" \0\0\x01",
    b"\x80\x01\0\x01\0\0\0\x01m\0\0\0\x01",
    b"*2\r\n$3\r\n",
    b"\x80\x00\x00\x00",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
]


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(sorted(p.name for p in registry.records() if p.parse is not None)),
    st.sampled_from(_STARTS),
    st.binary(max_size=80),
    st.integers(0, 1),
)
def test_fuzz_no_parser_raises_on_its_own(proto: str, start: bytes, rest: bytes, direction: int) -> None:
    """Each parser stops on bytes it cannot read instead of failing: parse_stream's guard
    (which ends the run there) is for faults nobody foresaw, not for malformed input."""
    registry.get(proto).parse(start + rest, direction, {}, [])

"""The protocol registry is the one place a protocol is described.

Every built-in name has exactly one record; a protocol registered at runtime is
detected and parsed with no other file touched; and detection names the right protocol
for tricky first bytes, some of which more than one test takes (the verdicts are what
the bytes are by each protocol's specification, written here by hand).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from testkit.messages import thrift_message
from testkit.pcap import write_pcap

import capture
from capture.protocols import (
    PROTOCOLS,
    Check,
    Protocol,
    detect_tcp,
    parse_stream,
    register,
    registry,
    unregister,
)

# ---- one record per protocol -------------------------------------------------------------


def test_every_built_in_name_has_exactly_one_record() -> None:
    names = [p.name for p in registry.records()]
    assert [n for n in names if n in PROTOCOLS] == list(PROTOCOLS)  # each once, in PROTOCOLS' order
    assert all(names.count(n) == 1 for n in PROTOCOLS)


def test_every_name_but_the_turn_taking_ones_has_a_parser() -> None:
    parsed = {p.name for p in registry.records() if p.parse is not None}
    # tcp and udp follow the turn-taking rule; TLS's records are read by capture.flows
    # (its handshake and the turns after it), so TLS is detected here but not parsed.
    assert parsed == set(PROTOCOLS) - {"tcp", "udp", "tls"}
    assert registry.get("tls").detect_start is not None
    for name in ("tcp", "udp"):
        rec = registry.get(name)
        assert (rec.parse, rec.detect_start, rec.detect_framing, rec.ports) == (None, None, None, ())


def test_ports_have_one_owner_each() -> None:
    ports = [port for p in registry.records() for port in p.ports]
    assert len(ports) == len(set(ports))
    with pytest.raises(ValueError, match="6379 belongs to 'redis'"):
        register(Protocol("squatter", ports=(6379,)))
    with pytest.raises(ValueError, match="registered already"):
        register(Protocol("redis"))
    with pytest.raises(ValueError, match="built in"):
        unregister("http")
    assert "squatter" not in {p.name for p in registry.records()}


# ---- a protocol added at runtime ---------------------------------------------------------

#: The toy protocol: each message is a line "TOY/1 <word> ..." (CRLF); the word labels it.
TOY_MAGIC = b"TOY/1 "


def _toy_detect(client: bytes, server: bytes, cport: int, sport: int) -> bool:
    return client.startswith(TOY_MAGIC)


def _toy_on_port(client: bytes, server: bytes, cport: int, sport: int) -> bool:
    return server.startswith(b"toy-ok")


def _toy_parse(buf: bytes, direction: int, ctx: dict, out: list) -> list:
    pos = 0
    while (eol := buf.find(b"\r\n", pos)) >= 0 and buf.startswith(TOY_MAGIC, pos):
        word = buf[pos + len(TOY_MAGIC) : eol].split(b" ", 1)[0].decode()
        out.append((pos, eol + 2 - pos, word, None))
        pos = eol + 2
    return out


@pytest.fixture
def toy() -> Iterator[Protocol]:
    record = Protocol(
        "toy",
        _toy_parse,
        detect_start=Check(60, _toy_detect),
        ports=(7777,),
        detect_on_port=_toy_on_port,
    )
    register(record)
    yield record
    assert unregister("toy") is record


STREAM = b"TOY/1 hello there\r\nTOY/1 bye\r\n"


def test_a_protocol_registered_at_runtime_is_detected_and_parsed(toy: Protocol) -> None:
    assert detect_tcp(STREAM, b"", 40000, 5555) == "toy"
    assert parse_stream("toy", STREAM, 0, {}) == [(0, 19, "hello", None), (19, 11, "bye", None)]
    # Its port and its on-port test: the last stage, for bytes no content test takes.
    assert detect_tcp(b"\x00\x01", b"toy-ok\n", 40000, 7777) == "toy"
    assert detect_tcp(b"\x00\x01", b"toy-ok\n", 7777, 40000) == "toy"  # seen from the server's side
    assert detect_tcp(b"\x00\x01", b"nope", 40000, 7777) == "tcp"
    assert registry.detection_order()["start"][-1] == "toy"


def test_without_the_registration_the_toy_is_plain_tcp() -> None:
    assert "toy" not in {p.name for p in registry.records()}
    assert detect_tcp(STREAM, b"", 40000, 5555) == "tcp"
    assert detect_tcp(b"\x00\x01", b"toy-ok\n", 40000, 7777) == "tcp"
    assert parse_stream("toy", STREAM, 0, {}) == [(0, len(STREAM), None, None)]  # no parser: one run


@pytest.mark.parametrize(("rank", "want"), [(35, "toy"), (45, "redis")])
def test_the_rank_decides_between_two_tests_that_both_match(rank: int, want: str) -> None:
    """A toy whose magic starts like a RESP array: Redis's test ("*" and a digit, rank 40)
    takes it too, and the one that runs first names it."""
    register(Protocol("toy", detect_start=Check(rank, lambda c, s, cp, sp: c.startswith(b"*0TOY"))))
    try:
        assert detect_tcp(b"*0TOY\r\n", b"", 40000, 5555) == want
    finally:
        unregister("toy")


# ---- detection order on first bytes more than one test takes -----------------------------


def _h2_frame(typ: int, flags: int, sid: int, payload: bytes = b"") -> bytes:
    """An HTTP/2 frame (RFC 9113, 4.1): 24-bit length, type, flags, 31-bit stream id."""
    return len(payload).to_bytes(3, "big") + bytes([typ, flags]) + sid.to_bytes(4, "big") + payload


H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"  # RFC 9113, 3.4
SETTINGS, HEADERS, DATA = 4, 1, 0
END_STREAM, END_HEADERS = 0x1, 0x4


def _client_hello(random: bytes) -> bytes:
    """A TLS 1.2 ClientHello record (RFC 5246, 6.2.1 and 7.4.1.2): type 22, version 3.1,
    handshake type 1, version 3.3, 32 random bytes, no session, one suite, no compression."""
    body = b"\x03\x03" + random + b"\x00" + b"\x00\x02\x13\x01" + b"\x01\x00" + b"\x00\x00"
    hs = b"\x01" + len(body).to_bytes(3, "big") + body
    return b"\x16\x03\x01" + len(hs).to_bytes(2, "big") + hs


def _mysql_packet(seq: int, payload: bytes) -> bytes:
    """A MySQL packet: 3-byte little-endian payload length, sequence id, payload."""
    return len(payload).to_bytes(3, "little") + bytes([seq]) + payload


# Handshake v10: protocol 10, version string, connection id, scramble part 1, filler,
# capability flags, charset, status, upper flags, scramble length, reserved, part 2, plugin.
MYSQL_GREETING = _mysql_packet(
    0,
    b"\x0a8.0.36\x00"
    + struct.pack("<I", 11)
    + b"abcdefgh\x00"
    + b"\xff\xf7\x21\x02\x00\xff\xdf\x15"
    + bytes(10)
    + b"ijklmnopqrst\x00mysql_native_password\x00",
)
MYSQL_LOGIN = _mysql_packet(1, struct.pack("<IIB", 0x000FA685, 1 << 24, 33) + bytes(23) + b"root\x00\x00")


THRIFT_CALL = thrift_message(1, b"getUserProfile", 7, b"\x08\x00\x01\x00\x00\x00\x2a\x00")  # i32 id=42
THRIFT_REPLY = thrift_message(2, b"getUserProfile", 7)


def _framed(msg: bytes) -> bytes:
    return len(msg).to_bytes(4, "big") + msg


PG_STARTUP = (lambda body: struct.pack(">II", 8 + len(body), 196608) + body)(b"user\x00alice\x00\x00")
PG_AUTH_OK = b"R\x00\x00\x00\x08\x00\x00\x00\x00"

DNS_QUERY = bytes.fromhex("1a2b01000001000000000000") + b"\x07example\x03com\x00\x00\x01\x00\x01"

# memcached binary protocol: 24-byte header (magic, opcode, key length, extras length,
# data type, vbucket/status, total body, opaque, CAS); 0x80 asks, 0x81 answers.
MC_GET = struct.pack(">BBHBBHIIQ", 0x80, 0x00, 1, 0, 0, 0, 1, 0xDEADBEEF, 0) + b"k"
MC_MISS = struct.pack(">BBHBBHIIQ", 0x81, 0x00, 0, 0, 0, 1, 9, 0xDEADBEEF, 0) + b"Not found"

TRICKY = [
    # The HTTP/2 preface, and "HTTP/1.1" in the server's bytes (a page about HTTP):
    # HTTP's test looks for "HTTP/1." anywhere there, the preface is exact.
    pytest.param(
        H2_PREFACE + _h2_frame(SETTINGS, 0, 0),
        _h2_frame(SETTINGS, 0, 0)
        + _h2_frame(HEADERS, END_HEADERS, 1, b"\x88")
        + _h2_frame(DATA, END_STREAM, 1, b"<p>HTTP/1.1 is older</p>"),
        40000,
        8080,
        "http2",
        id="h2-preface-page-about-http1",
    ),
    # "PRI * HTTP/1.1" is an HTTP/1.1 request line whose method is PRI, not the preface.
    pytest.param(b"PRI * HTTP/1.1\r\nHost: a\r\n\r\n", b"", 40000, 8080, "http", id="pri-method-http1"),
    # A ClientHello whose random bytes happen to spell a request line.
    pytest.param(
        _client_hello(b"GET /x HTTP/1.1\r\n" + bytes(15)), b"", 40000, 80, "tls", id="client-hello-on-80"
    ),
    # The ClientHello missed: the server's ServerHello (handshake type 2) opens its side.
    pytest.param(b"", b"\x16\x03\x03\x00\x31\x02\x00\x00\x2d\x03\x03", 40000, 8443, "tls", id="server-hello"),
    # An HTTP request line on Redis's port: content decides, not the port.
    pytest.param(b"GET / HTTP/1.1\r\n", b"HTTP/1.1 200 OK\r\n", 40000, 6379, "http", id="http-on-redis-port"),
    # A RESP array of one bulk string, on memcached's port.
    pytest.param(b"*1\r\n$4\r\nPING\r\n", b"+PONG\r\n", 40000, 11211, "redis", id="resp-on-memcached-port"),
    # An inline command has no "*": only Redis's own port tells (the port stage).
    pytest.param(b"PING\r\n", b"+PONG\r\n", 40000, 6379, "redis", id="inline-on-redis-port"),
    pytest.param(b"PING\r\n", b"+PONG\r\n", 40000, 7000, "tcp", id="inline-elsewhere"),
    # The server's port decides over the client's: from 6379 to port 80 is not Redis.
    pytest.param(b"PING\r\n", b"+PONG\r\n", 6379, 80, "tcp", id="server-port-first"),
    # memcached's binary magic 0x80 (the Thrift version word starts with it too)...
    pytest.param(MC_GET, MC_MISS, 40000, 5555, "memcached", id="memcached-binary"),
    # ... but a Thrift server answers with 0x8001 where memcached's answers 0x81.
    pytest.param(THRIFT_CALL, THRIFT_REPLY, 40000, 5555, "thrift", id="thrift-unframed"),
    # Unanswered, the call's name stands where memcached's body length would: too long.
    pytest.param(THRIFT_CALL + bytes(24), b"", 40000, 5555, "thrift", id="thrift-unframed-unanswered"),
    pytest.param(MC_GET + bytes(8), b"", 40000, 5555, "memcached", id="memcached-binary-unanswered"),
    # Framed Thrift: a 4-byte length first, like a PostgreSQL startup's.
    pytest.param(_framed(THRIFT_CALL), _framed(THRIFT_REPLY), 40000, 5432, "thrift", id="thrift-framed"),
    # Lower-case memcached text command vs the upper-case HTTP method of the same word.
    pytest.param(b"get k\r\n", b"END\r\n", 40000, 5555, "memcached", id="memcached-text-get"),
    # HTTP/2 seen mid-way (no preface): HEADERS frames both ways. Their type byte (1)
    # stands where MySQL keeps a sequence id, so they read as MySQL packets of sequence 1
    # too; HTTP/2's test (types and stream ids that chain) runs first.
    pytest.param(
        _h2_frame(HEADERS, END_HEADERS, 3, b"\x82\x86\x84"),
        _h2_frame(HEADERS, END_HEADERS, 3, b"\x88"),
        40000,
        3306,
        "http2",
        id="h2-midway-on-mysql-port",
    ),
    # MySQL: the server greets first (protocol 10, sequence 0), the client logs in (sequence 1).
    pytest.param(MYSQL_LOGIN, MYSQL_GREETING, 40000, 3307, "mysql", id="mysql-greeting-login"),
    pytest.param(b"", MYSQL_GREETING, 40000, 5432, "mysql", id="mysql-greeting-on-pg-port"),
    # PostgreSQL: a startup message (length, protocol 3.0), the server's AuthenticationOk.
    pytest.param(PG_STARTUP, PG_AUTH_OK, 40000, 5433, "postgresql", id="pg-startup"),
    # An SSLRequest (code 80877103) answered "N".
    pytest.param(b"\x00\x00\x00\x08\x04\xd2\x16\x2f", b"N", 40000, 5433, "postgresql", id="pg-sslrequest"),
    # DNS over TCP: a query after its two-byte length (RFC 1035, 4.2.2).
    pytest.param(len(DNS_QUERY).to_bytes(2, "big") + DNS_QUERY, b"", 40000, 53, "dns", id="dns-tcp"),
]


@pytest.mark.parametrize(("client", "server", "cport", "sport", "want"), TRICKY)
def test_detection_names_what_the_bytes_are(
    client: bytes, server: bytes, cport: int, sport: int, want: str
) -> None:
    assert detect_tcp(client, server, cport, sport) == want


@pytest.mark.parametrize(
    "case", ["h2-preface-page-about-http1", "client-hello-on-80", "h2-midway-on-mysql-port"]
)
def test_some_rows_are_taken_by_two_tests(case: str) -> None:
    """So the table tests the order, not just each test: in these rows a later test
    matches too, and the verdict above is the earlier one's."""
    client, server, cport, sport, want = next(p.values for p in TRICKY if p.id == case)
    hits = [
        p.name
        for stage in ("detect_start", "detect_framing")
        for p in sorted(
            (p for p in registry.records() if getattr(p, stage) is not None),
            key=lambda p: getattr(p, stage).rank,
        )
        if getattr(p, stage).test(client, server, cport, sport)
    ]
    assert len(hits) == 2
    assert hits[0] == want


def test_the_detection_order_is_the_documented_one() -> None:
    """docs/capture.md, "Adding a protocol", and the comment above the built-in table."""
    assert registry.detection_order() == {
        "start": ("http2", "tls", "http", "redis", "memcached"),
        "framing": ("dns", "http2", "thrift", "mysql", "postgresql"),
    }


def _frame(src: int, dst: int, sport: int, dport: int, seq: int, ack: int, flags: int, data: bytes) -> bytes:
    tcp = struct.pack(">HHIIBBHHH", sport, dport, seq, ack, 0x50, flags, 65535, 0, 0)
    ip = struct.pack(">BBHHHBBHII", 0x45, 0, 40 + len(data), 0, 0x4000, 64, 6, 0, src, dst)
    return b"\x02\x00\x00\x00\x00\x01\x02\x00\x00\x00\x00\x02\x08\x00" + ip + tcp + data


def _one_call_capture(path: Path, req: bytes, resp: bytes, port: int = 5555) -> Path:
    """A capture of one TCP connection: handshake, one request, one response, close."""
    cli, srv = 0x0A000001, 0x0A000002
    syn, ack, fin, psh = 0x02, 0x10, 0x11, 0x18
    frames = [
        _frame(cli, srv, 40000, port, 100, 0, syn, b""),
        _frame(srv, cli, port, 40000, 900, 101, syn | ack, b""),
        _frame(cli, srv, 40000, port, 101, 901, ack, b""),
        _frame(cli, srv, 40000, port, 101, 901, psh, req),
        _frame(srv, cli, port, 40000, 901, 101 + len(req), psh, resp),
        _frame(cli, srv, 40000, port, 101 + len(req), 901 + len(resp), fin, b""),
        _frame(srv, cli, port, 40000, 901 + len(resp), 102 + len(req), fin, b""),
        _frame(cli, srv, 40000, port, 102 + len(req), 902 + len(resp), ack, b""),
    ]
    return write_pcap(path, [(1_700_000_000_000_000_000 + 1000 * k, f) for k, f in enumerate(frames)])


def test_a_capture_of_a_runtime_protocol_converts(toy: Protocol, tmp_path: Path) -> None:
    """Registered at runtime, the toy is detected, parsed and named in the trace; the
    built-in protocols keep their numbers."""
    pcap = _one_call_capture(tmp_path / "toy.pcap", b"TOY/1 hello there\r\n", b"TOY/1 ok\r\n")
    capture.convert_pcaps([pcap], tmp_path / "t.parquet")
    t = pq.read_table(tmp_path / "t.parquet").to_pylist()
    assert [(m["op"], m["proto"], m["label"]) for m in t] == [
        ("call", "toy", "hello"),
        ("return", "toy", "hello"),
    ]
    assert registry.protocol_names()[: len(PROTOCOLS)] == PROTOCOLS
    assert registry.protocol_codes()["toy"] == len(PROTOCOLS)


def _webdav_parse(buf: bytes, direction: int, ctx: dict, out: list) -> list:
    out.append((0, len(buf), "dav", None))
    return out


def test_a_protocol_ranked_ahead_of_http_takes_request_lines(tmp_path: Path) -> None:
    """A request line is HTTP in bulk only while no test that runs before HTTP's may
    take it: a protocol registered ahead of HTTP that claims some request lines gets
    them in a conversion too, as detect_tcp says."""
    req = b"PROPFIND /dav HTTP/1.1\r\nHost: x\r\n\r\n"
    resp = b"HTTP/1.1 207 Multi-Status\r\nContent-Length: 0\r\n\r\n"
    pcap = _one_call_capture(tmp_path / "dav.pcap", req, resp)
    assert registry.request_lines_are_http()
    capture.convert_pcaps([pcap], tmp_path / "before.parquet")
    assert {m["proto"] for m in pq.read_table(tmp_path / "before.parquet").to_pylist()} == {"http"}
    claims = Check(25, lambda c, s, cp, sp: c.startswith(b"PROPFIND /dav "))
    register(Protocol("webdav", _webdav_parse, detect_start=claims))
    try:
        assert not registry.request_lines_are_http()
        assert detect_tcp(req, resp, 40000, 5555) == "webdav"
        capture.convert_pcaps([pcap], tmp_path / "t.parquet")
        got = pq.read_table(tmp_path / "t.parquet").to_pylist()
        assert [(m["op"], m["proto"]) for m in got] == [("call", "webdav"), ("return", "webdav")]
    finally:
        unregister("webdav")
    assert registry.request_lines_are_http()


def test_http2_and_tls_never_take_a_request_line() -> None:
    # Why a request line is HTTP in bulk although their tests run before HTTP's.
    from capture.protocols import REQUEST_METHODS

    tests = {name: registry.get(name).detect_start.test for name in ("http2", "tls")}
    for method in REQUEST_METHODS:
        line = method + b" / HTTP/1.1\r\nHost: x\r\n\r\n"
        for name, test in tests.items():
            assert not test(line, b"HTTP/1.1 200 OK\r\n\r\n", 40000, 443), (name, method)


def test_no_more_protocols_than_a_trace_can_number() -> None:
    room = registry.MAX_PROTOCOLS - len(registry.protocol_names())
    names = [f"many{k}" for k in range(room)]
    try:
        for name in names:
            register(Protocol(name))
        assert len(registry.protocol_names()) == registry.MAX_PROTOCOLS
        with pytest.raises(ValueError, match="at most 127 protocols"):
            register(Protocol("one-too-many"))
    finally:
        for name in names:
            unregister(name)

"""Protocol parsers: boundaries on known bytes, and garbage never escapes as an exception."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capture.protocols import detect_tcp, parse_dns_datagram, parse_stream


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

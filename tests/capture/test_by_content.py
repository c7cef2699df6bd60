"""DNS found by its content on any port, UDP and TCP, and nothing else taken for it;
HTTP/0.9 found too.

``data/dns-port15353.pcap`` is dnsmasq (Debian's dnsmasq-base) answering dig on port
15353 of the loopback: 39 queries over UDP and 10 over TCP, each answered, recorded
with tcpdump. tshark, told that the port is DNS, finds the same calls and returns.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import capture
import tracefmt
from capture.protocols import detect_tcp, parse_dns_datagram

DNS_15353 = Path(__file__).parent / "data" / "dns-port15353.pcap"
QUERY = bytes.fromhex("abcd01000001000000000000") + b"\x02db\x04test\x00\x00\x01\x00\x01"


def _trace(tmp_path: Path):
    out = tmp_path / "t.parquet"
    capture.convert_pcaps([DNS_15353], out)
    return tracefmt.read_trace(out)


def test_dns_on_another_port_is_dns(tmp_path: Path) -> None:
    t = _trace(tmp_path)
    proto = t["proto"].cast("string").to_pylist()
    ops = t["op"].cast("string").to_pylist()
    assert set(proto) == {"dns"}
    assert (ops.count("call"), ops.count("return"), ops.count("send")) == (49, 49, 0)
    # Every answer closes its own query (transaction ids), with the query's label.
    ids, labels = t["id"].to_pylist(), t["label"].to_pylist()
    calls = {i: lab for i, lab, op in zip(ids, labels, ops, strict=True) if op == "call"}
    answers = {i: lab for i, lab, op in zip(ids, labels, ops, strict=True) if op == "return"}
    assert calls == answers
    assert {lab.split()[0] for lab in calls.values()} == {"A", "AAAA", "TXT"}


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed")
def test_dns_on_another_port_agrees_with_tshark(tmp_path: Path) -> None:
    decode_as = ["-d", "udp.port==15353,dns", "-d", "tcp.port==15353,dns"]
    fields = subprocess.run(
        ["tshark", "-r", str(DNS_15353), *decode_as, "-Y", "dns", "-T", "fields", "-e", "dns.flags.response"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    theirs = [line for line in fields if line]
    t = _trace(tmp_path)
    ops = t["op"].cast("string").to_pylist()
    assert ops.count("call") == theirs.count("False") + theirs.count("0") > 0
    assert ops.count("return") == theirs.count("True") + theirs.count("1") > 0


def test_a_strict_check_away_from_the_dns_ports() -> None:
    assert parse_dns_datagram(QUERY, any_port=True) == (False, 0xABCD, "A db.test")
    # One byte too many, two questions, a name that is not a host name, an unknown
    # class: DNS on its own port perhaps, not elsewhere.
    assert parse_dns_datagram(QUERY + b"\x00", any_port=True) is None
    two = bytearray(QUERY)
    two[5] = 2
    assert parse_dns_datagram(bytes(two) + QUERY[12:], any_port=True) is None
    assert parse_dns_datagram(bytes(two) + QUERY[12:]) is not None
    spaced = QUERY.replace(b"\x02db", b"\x02d ")
    assert parse_dns_datagram(spaced, any_port=True) is None
    odd_class = QUERY[:-2] + b"\x00\x09"
    assert parse_dns_datagram(odd_class, any_port=True) is None


def test_tcp_dns_is_found_by_its_length_prefixed_query() -> None:
    framed = len(QUERY).to_bytes(2, "big") + QUERY
    assert detect_tcp(framed, b"", 40000, 15353) == "dns"
    assert detect_tcp(framed[:2] + b"\xff" * len(QUERY), b"", 40000, 15353) == "tcp"


def test_random_datagrams_are_not_dns() -> None:
    rng = np.random.default_rng(7)
    found = 0
    for _ in range(50_000):
        n = int(rng.integers(12, 300))
        body = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        found += parse_dns_datagram(body, any_port=True) is not None
        # A forged query header in front of random bytes.
        found += parse_dns_datagram(QUERY[:12] + body[12:], any_port=True) is not None
    assert found == 0


def test_http09_requests_and_bare_responses(tmp_path: Path) -> None:
    # data/http09.pcap: Python's http.server answering four one-line HTTP/0.9 requests
    # (GET and a path, no version, no headers) with the bare document, closing each
    # connection; the client read 41, 40,527, 41 and 335 bytes.
    out = tmp_path / "t.parquet"
    capture.convert_pcaps([Path(__file__).parent / "data" / "http09.pcap"], out)
    rows = tracefmt.read_trace(out).to_pylist()
    assert {r["proto"] for r in rows} == {"http"}
    calls = [r for r in rows if r["op"] == "call"]
    returns = [r for r in rows if r["op"] == "return"]
    assert [r["label"] for r in calls] == [
        "GET /index.html",
        "GET /big.txt",
        "GET /index.html",
        "GET /missing",
    ]
    assert [r["bytes"] for r in returns] == [41, 40_527, 41, 335]
    assert [r["id"] for r in returns] == [r["id"] for r in calls]


TLS_PCAP = Path(__file__).parent / "data" / "tls.pcap"


def _tshark_fields(path: Path, display_filter: str, *fields: str) -> list[list[str]]:
    args = ["tshark", "-r", str(path), "-d", "tcp.port==18443,tls", "-Y", display_filter, "-T", "fields"]
    for f in fields:
        args += ["-e", f]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    return [line.split("\t") for line in out.splitlines() if line]


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed")
def test_tls_handshake_then_turns_agree_with_tshark(tmp_path: Path) -> None:
    # data/tls.pcap: openssl s_server (Debian's openssl) and curl, three connections in
    # TLS 1.3 to api.test and three in TLS 1.2 to db.test, one GET each.
    out = tmp_path / "t.parquet"
    capture.convert_pcaps([TLS_PCAP], out)
    rows = tracefmt.read_trace(out).to_pylist()
    assert {r["proto"] for r in rows} == {"tls"}
    ns = [r["timestamp"].timestamp() for r in rows]  # seconds, as tshark prints them
    hello = _tshark_fields(
        TLS_PCAP, "tls.handshake.type == 1", "frame.time_epoch", "tls.handshake.extensions_server_name"
    )
    server = _tshark_fields(TLS_PCAP, "tls.handshake.type == 2", "frame.time_epoch")
    calls = [
        (t, r) for t, r in zip(ns, rows, strict=True) if r["op"] == "call" and r["label"].startswith("TLS ")
    ]
    rets = [
        (t, r) for t, r in zip(ns, rows, strict=True) if r["op"] == "return" and r["label"].startswith("TLS ")
    ]
    # The handshake: a call at each ClientHello, named by its server name, and its
    # return at the ServerHello.
    assert [(round(t, 6), r["label"]) for t, r in calls] == [
        (round(float(t), 6), f"TLS {n}") for t, n in hello
    ]
    assert [round(t, 6) for t, _ in rets] == [round(float(t), 6) for (t,) in server]
    # After it, each GET and its answer: one call and one return per connection,
    # labelled by the server name; the close_notify alerts are left out.
    data = [r for r in rows if not r["label"].startswith("TLS ")]
    assert [r["op"] for r in data].count("call") == [r["op"] for r in data].count("return") == 6
    assert sorted({r["label"] for r in data}) == ["api.test", "db.test"]
    # The first request of each connection: the client's first frame whose first record
    # is application data (TLS 1.3's Finished rides behind a ChangeCipherSpec).
    # (tshark shows TLS 1.3's encrypted records' type as their "opaque type".)
    fields = ("tcp.stream", "frame.time_epoch", "tls.record.content_type", "tls.record.opaque_type")
    frames = _tshark_fields(TLS_PCAP, "tls and tcp.dstport == 18443", *fields)
    first_by_stream: dict[str, float] = {}
    for stream, t, plain, opaque in frames:
        if (plain or opaque).split(",")[0] == "23":
            first_by_stream.setdefault(stream, float(t))
    data_calls = sorted(round(t, 6) for t, r in zip(ns, rows, strict=True) if r["op"] == "call" and r in data)
    assert data_calls == sorted(round(t, 6) for t in first_by_stream.values())

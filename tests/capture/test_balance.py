"""Every call gets its return, per connection, on every capture we have: a message that
gets no answer by protocol (a PostgreSQL Terminate, MySQL's greeting and COM_QUIT, an
SSLRequest, memcached's quit and noreply, Redis pub/sub and CLIENT REPLY OFF, multicast
DNS) is a send. The only connections left unbalanced are those the capture itself cuts
(listed with the reason); a new one fails, and so does one of these once it balances.
"""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
from testkit.pcap import OURS, SHARED

import capture
import tracefmt

#: file -> the unbalanced connections, as (protocol, calls, returns), and why.
CUT = {
    "chrissanders/dns.pcap": ([("dns", 0, 1)] * 7, "only the answers were captured"),
    "deepflow/http_grpc-segmented.pcap": ([("http2", 1, 0)], "the capture holds the request only"),
    "deepflow/http_httpv2-stream-id.pcap": ([("http2", 1, 0)], "the capture holds the request only"),
    "deepflow/mysql_mysql-statement.pcap": ([("mysql", 1, 0)] * 3, "queries sent as the capture ends"),
    "ndpi/http_asymmetric.pcapng": ([("http", 0, 3), ("http", 3, 0)], "one direction per connection"),
    "ndpi/http_starting_with_reply.pcapng": ([("http", 2, 3)], "the capture starts with a reply"),
    "scapy/http_compressed.pcap": ([("http", 0, 1), ("http", 1, 0)], "request and reply on other ports"),
    "zeek/dns-two-responses.pcap": ([("dns", 1, 2)], "the network delivered the answer twice"),
    "zeek/erspan.pcap": (
        [("dns", 2, 0)] * 2 + [("http", 4, 3), ("http", 5, 4), ("http", 7, 4)],
        "LLMNR queries nobody answered; replies lost in the mirror's gaps",
    ),
    "zeek/http_1000-requests-one-dropped-response.pcap": ([("http", 1000, 999)], "a reply dropped"),
    "zeek/http_zero-length-bodies-with-drops.pcap": ([("http", 7, 8)], "requests dropped"),
    "zeek/tcp_miss_end_data.pcap": ([("http", 1, 0)], "the reply's data is missing"),
}


def _unbalanced(path: Path, tmp_path: Path) -> list[tuple[str, int, int]]:
    out = tmp_path / "t.parquet"
    capture.convert_pcaps([path], out)
    t = tracefmt.read_trace(out)
    if t.num_rows == 0:
        return []
    count: collections.Counter = collections.Counter()
    flows = t["flow"].to_pylist()
    protos = t["proto"].cast("string").to_pylist()
    ops = t["op"].cast("string").to_pylist()
    for flow, proto, op in zip(flows, protos, ops, strict=True):
        if proto not in ("tcp", "udp"):  # turns of unknown protocols pair by construction
            count[(flow, proto, op)] += 1
    conns = {(flow, proto) for flow, proto, _ in count}
    out_list = [(p, count[(f, p, "call")], count[(f, p, "return")]) for f, p in conns]
    return sorted(c for c in out_list if c[1] != c[2])


@pytest.mark.skipif(not SHARED, reason="../shared/data/pcaps is not present")
@pytest.mark.parametrize("path", SHARED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_calls_and_returns_balance_on_the_shared_captures(path: Path, tmp_path: Path) -> None:
    rel = f"{path.parent.name}/{path.name}"
    expected = sorted(CUT.get(rel, ([], ""))[0])
    assert _unbalanced(path, tmp_path) == expected


@pytest.mark.parametrize("path", OURS, ids=lambda p: p.name)
def test_calls_and_returns_balance_on_our_captures(path: Path, tmp_path: Path) -> None:
    assert _unbalanced(path, tmp_path) == []


def test_one_way_messages_are_sends() -> None:
    from capture.protocols import NO_REPLY, parse_stream

    # PostgreSQL: a query, then Terminate.
    q = b"Q\x00\x00\x00\x0dSELECT 1\x00"
    assert [m[3] for m in parse_stream("postgresql", q + b"X\x00\x00\x00\x04", 0, {})] == [None, NO_REPLY]
    # MySQL: the server's greeting opens the connection; its refusal too.
    greeting = b"\x4a\x00\x00\x00\x0a8.0.1\x00" + b"\x01" * 70
    assert parse_stream("mysql", greeting, 1, {})[0][2:] == ("greeting", NO_REPLY)
    refusal = b"\x05\x00\x00\x00\xff\x6a\x04#H"
    assert parse_stream("mysql", refusal, 1, {})[0][2:] == ("refused", NO_REPLY)
    # memcached: quit and noreply get no answer.
    keys = [m[3] for m in parse_stream("memcached", b"get a\r\ndelete a noreply\r\nquit\r\n", 0, {})]
    assert keys == [None, NO_REPLY, NO_REPLY]
    # Redis: pub/sub both ways; CLIENT REPLY OFF silences until ON (which is answered).
    sub = b"*2\r\n$9\r\nSUBSCRIBE\r\n$1\r\nc\r\n"
    assert parse_stream("redis", sub, 0, {})[0][3] == NO_REPLY
    push = b"*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$2\r\nhi\r\n"
    assert parse_stream("redis", push, 1, {})[0][3] == NO_REPLY
    ctx: dict = {}
    cmds = b"CLIENT REPLY OFF\r\nSET a 1\r\nCLIENT REPLY ON\r\nGET a\r\n"
    assert [m[3] for m in parse_stream("redis", cmds, 0, ctx)] == [NO_REPLY, NO_REPLY, None, None]

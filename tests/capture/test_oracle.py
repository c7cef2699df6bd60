"""wirepath against reality: the public captures in ../shared/data/pcaps, tshark and DeepFlow.

Every capture must convert without an error. Per protocol, the calls and returns we
find are compared with what tshark's dissectors report (run here) and with DeepFlow's
own expected parse output (``*.result``). Where we disagree, ``KNOWN`` says why.
"""

from __future__ import annotations

import collections
import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import capture
import tracefmt

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "pcaps"
if not DATA.is_dir():
    DATA = Path("/work/shared/data/pcaps")
FILES = sorted(p for p in DATA.glob("*/*") if p.suffix not in (".result", ".txt")) if DATA.is_dir() else []
needs_data = pytest.mark.skipif(not FILES, reason="../shared/data/pcaps is not present")
needs_tshark = pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed")

# (file, proto): (our calls, our returns, why tshark's numbers differ)
KNOWN = {
    ("chrissanders/http_espn.pcapng", "http"): "a response whose body is cut off by the end of the capture: "
    "tshark waits for the whole body and reports nothing, we report the return at its first packet",
    ("chrissanders/latency1.pcapng", "http"): "the response body is incomplete at the end of the capture; "
    "tshark reports no response, a return was seen on the wire",
    ("deepflow/http_istio-tcp-frag.pcap", "http"): "the response is cut short (DeepFlow also counts it); "
    "tshark's reassembly waits for the missing body",
    ("zeek/erspan.pcap", "http"): "responses whose bodies are partly missing (gaps in the mirror): "
    "tshark drops them, we keep every response whose status line was seen",
    ("zeek/http_100-continue.pcap", "http"): "tshark counts the interim '100 Continue' as a response; "
    "it is part of the one exchange, so we report one return per request",
    ("zeek/http_http-single-conn-22.pcap", "http"): "HTTP on port 22: tshark decodes by port (as SSH), "
    "we detect HTTP by content",
    ("zeek/http_methods.pcap", "http"): "malformed and lower-case request lines (e.g. 'GET /HTTP/1.1'): "
    "tshark does not take them as requests yet counts the server's answers; the server took them as "
    "requests, and so do we (one call, one return each)",
    ("grpc_packt/Unary.pcapng", "dns"): "multicast DNS (port 5353 to the group): tshark counts its "
    "queries and announcements as requests and responses; nothing pairs them, so they are sends",
    ("zeek/mixed-vlan-mpls.pcap", "http"): "tshark counts a request twice (once per VLAN copy of the "
    "same packet); we see one connection per copy only where both directions are present",
}


def _ours(path: Path, tmp_path: Path) -> collections.Counter:
    out = tmp_path / "t.parquet"
    capture.convert_pcaps([path], out)
    t = tracefmt.read_trace(out)
    return collections.Counter(
        zip(t["proto"].cast("string").to_pylist(), t["op"].cast("string").to_pylist(), strict=True)
    )


RECORDED = json.loads((Path(__file__).parent / "data" / "tshark_counts.json").read_text())


def _record_module():  # the recorder script, loaded by path (tests are not a package)
    spec = importlib.util.spec_from_file_location("record_tshark", Path(__file__).parent / "record_tshark.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@needs_data
@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_capture_converts(path: Path, tmp_path: Path) -> None:
    report = capture.convert_pcaps([path], tmp_path / "t.parquet")
    assert report.packets > 0
    meta = tracefmt.read_trace_metadata(tmp_path / "t.parquet")
    assert meta.provenance["capture"]["packets"] == report.packets
    assert meta.messages == report.messages


@needs_data
@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_http_and_dns_agree_with_tshark(path: Path, tmp_path: Path) -> None:
    # tshark's numbers were recorded once with RECORDED["command"] (tests/capture/record_tshark.py);
    # test_recorded_tshark_counts_are_current re-runs it on a sample.
    ours = _ours(path, tmp_path)
    rel = f"{path.parent.name}/{path.name}"
    for proto in ("http", "dns"):
        theirs = tuple(RECORDED["counts"][rel][proto])
        mine = (ours[(proto, "call")], ours[(proto, "return")])
        if (rel, proto) in KNOWN:
            assert mine != theirs, f"{rel}: now agrees with tshark; drop the KNOWN entry"
            continue
        assert mine == theirs, f"{rel} {proto}: ours {mine} vs tshark {theirs}"


@needs_data
@needs_tshark
@pytest.mark.parametrize("name", ["zeek/http_pipelined-requests.pcap", "deepflow/dns_dns-tcp-multi.pcap"])
def test_recorded_tshark_counts_are_current(name: str) -> None:
    assert _record_module().counts(DATA / name) == RECORDED["counts"][name]


def _deepflow_counts(path: Path) -> tuple[int, int]:
    req = resp = 0
    for line in path.read_text().splitlines():
        if '"msg_type":"Request"' in line or "msg_type: Request" in line:
            req += 1
        elif '"msg_type":"Response"' in line or "msg_type: Response" in line:
            resp += 1
        elif line.startswith("RedisInfo"):
            if re.search(r'request: ""', line):
                resp += 1
            else:
                req += 1
    return req, resp


# DeepFlow result files we compare (protocols wirepath parses); why counts may differ.
DEEPFLOW = {
    "dns_dns": ("dns", None),
    "dns_dns-tcp-multi": ("dns", None),
    "dns_nxdomain": ("dns", None),
    "http_httpv1": ("http", None),
    "http_grpc-segmented": ("http2", None),
    "http_grpc-server-stream": ("http2", None),
    "http_grpc-unary": ("http2", None),
    "http_h2c_ascii": ("http2", None),
    "http_http2-multi": ("http2", None),
    "http_httpv2-stream-id": ("http2", None),
    "http_istio-tcp-frag": ("http", None),
    "mysql_mysql-exec": ("mysql", None),
    "mysql_mysql-statement": ("mysql", "the same 11 requests; DeepFlow files two of the 8 responses as "
                              "'Other' (not a response it parses), we count them as returns"),
    "mysql_large-response": ("mysql", None),
    "mysql_mysql": ("mysql", "DeepFlow files the server greeting and the auth-switch exchange as 'Other' "
                    "and COM_QUIT as 'Session'; we report the greeting as a send (the server speaks "
                    "unasked), the login and auth-switch as call/return pairs, and COM_QUIT as a send "
                    "(it gets no answer): 7 calls and 7 returns"),
    "redis_redis-debug": ("redis", None),
    "redis_redis-error": ("redis", None),
    "redis_redis": ("redis", "DeepFlow logs one line per response packet (18 lines for 10 replies, "
                    "large replies span packets); wirepath reassembles: 10 calls, 10 returns"),
    "memcached_memcached": ("memcached", None),
}  # fmt: skip


@needs_data
@pytest.mark.parametrize("name", sorted(DEEPFLOW))
def test_agrees_with_deepflow(name: str, tmp_path: Path) -> None:
    proto, why = DEEPFLOW[name]
    ours = _ours(DATA / "deepflow" / f"{name}.pcap", tmp_path)
    mine = (ours[(proto, "call")], ours[(proto, "return")])
    theirs = _deepflow_counts(DATA / "deepflow" / f"{name}.result")
    if why is None:
        assert mine == theirs
    else:
        assert mine != theirs, why
        assert min(mine) >= 1


@needs_data
@needs_tshark
@pytest.mark.parametrize(
    "name", ["zeek/http_get.pcap", "grpc_packt/Unary.pcapng", "ndpi/http2.pcapng", "zeek/redis_set.pcap"]
)
def test_timestamps_agree_with_tshark(name: str) -> None:
    out = subprocess.run(
        ["tshark", "-r", str(DATA / name), "-T", "fields", "-e", "frame.time_epoch"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    theirs = [int(s.replace(".", "")) for s in out]  # nanosecond digits, exact
    assert capture.packet_timestamps(DATA / name).tolist() == theirs


@needs_data
def test_pipelined_http_pairs_in_order(tmp_path: Path) -> None:
    # zeek's pipelined-requests: several GETs in one segment; responses answer them in order.
    out = tmp_path / "t.parquet"
    capture.convert_pcaps([DATA / "zeek/http_pipelined-requests.pcap"], out)
    rows = tracefmt.read_trace(out).to_pylist()
    calls = [r for r in rows if r["op"] == "call"]
    rets = [r for r in rows if r["op"] == "return"]
    assert len(calls) == len(rets) == 5
    assert [r["id"] for r in calls] == [r["id"] for r in rets]
    assert all(c["timestamp"] <= r["timestamp"] for c, r in zip(calls, rets, strict=True))


@needs_data
def test_dropped_response_does_not_shift_pairs(tmp_path: Path) -> None:
    # 1000 requests on one connection, one response lost in a gap: 999 returns, each
    # paired with the request it answers (the same label), none shifted by the loss.
    out = tmp_path / "t.parquet"
    capture.convert_pcaps([DATA / "zeek/http_1000-requests-one-dropped-response.pcap"], out)
    rows = tracefmt.read_trace(out).to_pylist()
    calls = {r["id"]: r for r in rows if r["op"] == "call"}
    rets = [r for r in rows if r["op"] == "return"]
    assert (len(calls), len(rets)) == (1000, 999)
    assert all(calls[r["id"]]["label"] == r["label"] for r in rets)
    assert all(calls[r["id"]]["timestamp"] < r["timestamp"] for r in rets)


@needs_data
@needs_tshark
@pytest.mark.parametrize("name", ["Unary", "Server_Streaming"])
def test_grpc_streams_agree_with_tshark(name: str, tmp_path: Path) -> None:
    # gRPC on tcp/50051: tshark needs -d to decode it as HTTP/2 (PROVENANCE.txt). A call is a
    # stream the client opens with HEADERS, a return the server's HEADERS on that stream.
    path = DATA / "grpc_packt" / f"{name}.pcapng"
    out = subprocess.run(
        ["tshark", "-r", str(path), "-d", "tcp.port==50051,http2", "-Y", "http2.type==1",
         "-T", "fields", "-e", "tcp.srcport", "-e", "http2.streamid"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    pairs = {
        (port, sid)
        for port, sids in (line.split("\t") for line in out.splitlines())
        for sid in sids.split(",")
    }
    theirs = (sum(1 for p, s in pairs if p != "50051" and s != "0"), sum(1 for p, s in pairs if p == "50051"))
    ours = _ours(path, tmp_path)
    assert (ours[("http2", "call")], ours[("http2", "return")]) == theirs


# PostgreSQL, recorded once with
#   tshark -r FILE -d tcp.port==5432,pgsql -Y pgsql -T fields -e pgsql.type -e pgsql.authtype
# calls = Simple query + Sync + Startup + SSL request + GSS encrypt request + Password +
#         SASLInitialResponse + SASLResponse + Termination messages;
# returns = Ready for query + authentication requests the client must answer (not OK/SASL-final).
PGSQL_TSHARK = {
    "zeek/postgresql_psql-create-insert-select-delete-drop.pcap": ((11, 10), None),
    "zeek/postgresql_psql-insert-fail-drop-fail.pcap": ((9, 8), None),
    "deepflow/postgre_prepare_stat.pcap": ((1, 1), None),
    "deepflow/postgre_simple_query.pcap": ((1, 1), None),
    "zeek/postgresql_psql-select-now.pcap": ((6, 4), (6, 5)),
    "zeek/postgresql_greenhouse-app.pcap": ((90, 88), (90, 90)),
    "ndpi/pgsql.pcap": ((18, 14), (18, 18)),
    "deepflow/postgre_error.pcap": ((1, 0), (1, 1)),
}
PGSQL_WHY = (
    "the server's one-byte answer to an SSL/GSS request ('N') is a return of its own, which tshark "
    "shows as no pgsql message; and a response cut by the end of the capture (an Error without "
    "ReadyForQuery) still counts as the return"
)


@needs_data
@pytest.mark.parametrize("name", sorted(PGSQL_TSHARK))
def test_postgresql_agrees_with_tshark(name: str, tmp_path: Path) -> None:
    theirs, ours_expected = PGSQL_TSHARK[name]
    ours = _ours(DATA / name, tmp_path)
    # tshark counts a Terminate among the client's requests; nothing answers it, so for
    # us it is a send (and PostgreSQL has no other).
    mine = (ours[("postgresql", "call")] + ours[("postgresql", "send")], ours[("postgresql", "return")])
    if ours_expected is None:
        assert mine == theirs
    else:
        assert mine != theirs, PGSQL_WHY
        assert mine == ours_expected, PGSQL_WHY


@needs_data
def test_mysql_commands_pair_and_quit_is_a_send(tmp_path: Path) -> None:
    # deepflow/mysql_mysql: DeepFlow's result lists the login, then SET NAMES utf8, set autocommit=0,
    # SET NAMES utf8, SHOW WARNINGS, rollback; then the client sends COM_QUIT.
    out = tmp_path / "t.parquet"
    capture.convert_pcaps([DATA / "deepflow/mysql_mysql.pcap"], out)
    rows = tracefmt.read_trace(out).to_pylist()
    cmds = [r for r in rows if r["op"] == "call" and r["label"] not in ("login", "auth")]
    assert [r["label"] for r in cmds] == ["SET", "SET", "SET", "SHOW", "ROLLBACK"]
    rets = {r["id"]: r for r in rows if r["op"] == "return" and r["id"] is not None}
    assert all(rets[c["id"]]["label"] == c["label"] for c in cmds)
    assert (rows[-1]["op"], rows[-1]["label"], rows[-1]["id"]) == ("send", "QUIT", None)
    assert (rows[-1]["sender"], rows[-1]["receiver"]) == (cmds[0]["sender"], cmds[0]["receiver"])


@needs_data
@needs_tshark
def test_thrift_agrees_with_tshark(tmp_path: Path) -> None:
    # ndpi/thrift.pcap: strict binary Thrift on tcp/11010, sequence ids all zero (so calls and
    # replies pair in order). tshark repeats a message's fields on every segment it spans, so
    # consecutive identical (port, type, method) rows are one message.
    path = DATA / "ndpi/thrift.pcap"
    out = subprocess.run(
        ["tshark", "-r", str(path), "-d", "tcp.port==11010,thrift", "-Y", "thrift and tcp",
         "-T", "fields", "-e", "tcp.srcport", "-e", "thrift.mtype", "-e", "thrift.method"],
        capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    rows = [r for i, r in enumerate(out) if i == 0 or r != out[i - 1]]
    theirs = (sum(r.split("\t")[1] == "0x01" for r in rows), sum(r.split("\t")[1] == "0x02" for r in rows))
    ours = _ours(path, tmp_path)
    assert (ours[("thrift", "call")], ours[("thrift", "return")]) == theirs == (16, 16)


HTTP_FILES = [p for p in FILES if "http" in p.name or p.parent.name == "chrissanders"]


def _rows(path: Path) -> list[tuple]:
    t = tracefmt.read_trace(path)
    names = ("timestamp", "op", "sender", "receiver", "id", "bytes", "flow", "proto", "label")
    cols = [t[c].cast(pa.int64()) if c == "timestamp" else t[c] for c in names]
    return sorted(zip(*(c.to_pylist() for c in cols), strict=True), key=lambda r: (r[0], r[1], r[4] or 0))


@needs_data
@pytest.mark.parametrize("path", HTTP_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_http_fast_path_equals_the_parser(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One-message-per-turn HTTP connections skip the stream parser; both must give the same trace.
    fast = tmp_path / "fast.parquet"
    capture.convert_pcaps([path], fast)
    from capture.flows import FlowAssembler, _empty_messages

    monkeypatch.setattr(
        FlowAssembler, "_http_turns", lambda self, cb, http: (_empty_messages(), np.zeros(len(http), bool))
    )
    slow = tmp_path / "slow.parquet"
    capture.convert_pcaps([path], slow)
    assert _rows(fast) == _rows(slow)

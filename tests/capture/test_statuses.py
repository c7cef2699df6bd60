"""A return's status for every protocol that gives one (the trace's ``status`` column) and
the rule that counts server errors (``tracefmt.pathsfile.is_server_error``, the paths
file's ``errors``, exports' error status): each parser against bytes written out by hand
from its protocol's specification, an error and a success each; then real servers and
clients on the loopback, recorded with tcpdump and checked against tshark's dissectors."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from testkit.pcap import free_port, loopback_recording, tshark_rows, write_pcap

import capture
import infer
import tracefmt
from capture.flows import return_statuses
from capture.frames import TcpConnection
from capture.protocols import parse_stream, protocol_codes
from infer.patterns import error_shares
from tracefmt.pathsfile import GRPC_STATUS_NAMES, is_server_error
from viz.export import export_traces
from wirepath.cli import main

P = pytest.param


def _frame(typ: int, flags: int, sid: int, payload: bytes) -> bytes:
    """An HTTP/2 frame (RFC 9113, 4.1)."""
    return len(payload).to_bytes(3, "big") + bytes([typ, flags]) + sid.to_bytes(4, "big") + payload


def _grpc_message(data: bytes) -> bytes:
    """A gRPC length-prefixed message (uncompressed)."""
    return b"\x00" + len(data).to_bytes(4, "big") + data


def _h2_response(blocks: list[list[tuple[str, str]]], data: bytes = b"") -> bytes:
    """A response on stream 1: its first header block, DATA, then the others (trailers);
    END_STREAM on the last frame."""
    from hpack import Encoder

    enc = Encoder()
    out = _frame(4, 0, 0, b"")  # the server's SETTINGS
    last = len(blocks) - 1
    out += _frame(1, 4 | (1 if last == 0 and not data else 0), 1, enc.encode(blocks[0]))
    if data:
        out += _frame(0, 1 if last == 0 else 0, 1, data)
    for k, block in enumerate(blocks[1:], 1):
        out += _frame(1, 4 | (1 if k == last else 0), 1, enc.encode(block))
    return out


GRPC = ("content-type", "application/grpc")


# ---- each parser against hand-written bytes --------------------------------------------------


@pytest.mark.parametrize(
    ("blocks", "data", "want"),
    [
        P([[(":status", "200"), ("content-type", "text/html")]], b"hi", "200", id="http2-200"),
        P([[(":status", "503")]], b"", "503", id="http2-503"),
        P([[(":status", "200"), GRPC], [("grpc-status", "0")]], _grpc_message(b"x"), "OK", id="grpc-ok"),
        P([[(":status", "200"), GRPC], [("grpc-status", "13"), ("grpc-message", "boom")]],
          _grpc_message(b"x"), "INTERNAL", id="grpc-internal-in-trailers"),
        # Trailers-only (gRPC over HTTP/2, "Responses"): one block with the status.
        P([[(":status", "200"), GRPC, ("grpc-status", "14"), ("grpc-message", "down")]], b"",
          "UNAVAILABLE", id="grpc-trailers-only"),
        P([[(":status", "200"), GRPC, ("grpc-status", "5")]], b"", "NOT_FOUND", id="grpc-not-found"),
        P([[(":status", "200"), GRPC, ("grpc-status", "16")]], b"", "UNAUTHENTICATED", id="grpc-16"),
        P([[(":status", "200"), GRPC, ("grpc-status", "17")]], b"", "UNKNOWN", id="grpc-out-of-range"),
    ],
)  # fmt: skip
def test_http2_and_grpc_statuses(blocks: list, data: bytes, want: str) -> None:
    """A return's label stays its call's (here unknown: ``stream 1``), its status beside it."""
    msgs = parse_stream("http2", _h2_response(blocks, data), 1, {})
    assert [(m[2], m[2].status) for m in msgs] == [("stream 1", want)]


def test_grpc_codes_are_the_seventeen_of_the_spec() -> None:
    assert len(GRPC_STATUS_NAMES) == 17
    assert GRPC_STATUS_NAMES[0] == "OK"
    assert GRPC_STATUS_NAMES[16] == "UNAUTHENTICATED"
    assert GRPC_STATUS_NAMES.index("DEADLINE_EXCEEDED") == 4
    assert GRPC_STATUS_NAMES.index("DATA_LOSS") == 15


def _pg(typ: bytes, body: bytes) -> bytes:
    """A typed PostgreSQL backend message (protocol 3.0): type, length, body."""
    return typ + (len(body) + 4).to_bytes(4, "big") + body


_PG_READY = _pg(b"Z", b"I")
# ErrorResponse fields (protocol 3.0, "Error and Notice Message Fields"): S, V, C, M.
_PG_ERROR = _pg(b"E", b'SERROR\0VERROR\0C42P01\0Mrelation "no_such_table" does not exist\0\0')


@pytest.mark.parametrize(
    ("server", "want"),
    [
        P(_pg(b"T", b"\0\x01?column?\0" + bytes(18)) + _pg(b"D", b"\0\x01\0\0\0\x011")
          + _pg(b"C", b"SELECT 1\0") + _PG_READY, ["OK"], id="select"),
        P(_PG_ERROR + _PG_READY, ["ERROR 42P01"], id="error"),
        # Extended query: the error, then the server skips to Sync's ReadyForQuery.
        P(_pg(b"1", b"") + _PG_ERROR + _PG_READY, ["ERROR 42P01"], id="error-in-batch"),
        P(_pg(b"R", (5).to_bytes(4, "big") + b"salt"), [None], id="md5-challenge"),
        # A failed login: the error, and the server closes the connection.
        P(_pg(b"E", b"SFATAL\0C28P01\0Mpassword authentication failed\0\0"), ["ERROR 28P01"], id="login"),
        P(_pg(b"C", b"SELECT 1\0"), [None], id="cut-short"),
    ],
)  # fmt: skip
def test_postgresql_statuses(server: bytes, want: list) -> None:
    assert [m[2] for m in parse_stream("postgresql", server, 1, {})] == want


def _my(seq: int, payload: bytes) -> bytes:
    """A MySQL packet: 3-byte length, sequence number, payload."""
    return len(payload).to_bytes(3, "little") + bytes([seq]) + payload


# ERR_Packet: 0xFF, error code (2 bytes), '#', SQL state, message.
_MY_ERR = _my(1, b"\xff" + (1146).to_bytes(2, "little") + b"#42S02Table 'db.no_such_table' doesn't exist")


@pytest.mark.parametrize(
    ("server", "want"),
    [
        P(_my(1, b"\x00\x01\x00\x02\x00\x00\x00"), ["OK"], id="ok-packet"),
        P(_MY_ERR, ["ERROR 1146"], id="err-packet"),
        # A result set: column count, a column definition, a row, EOF.
        P(_my(1, b"\x01") + _my(2, b"\x03def" + bytes(20)) + _my(3, b"\x011") + _my(4, b"\xfe\0\0\x02\0"),
          ["OK"], id="result-set"),
        # An error that ends a result set part-way (a query killed while it sent rows).
        P(_my(1, b"\x01") + _my(2, b"\x03def" + bytes(20)) + _my(3, b"\xff" + (1317).to_bytes(2, "little")
          + b"#70100interrupted"), ["ERROR 1317"], id="error-ends-result-set"),
        # The login's answer: OK; an auth switch (0xFE) waits for the client.
        P(_my(2, b"\x00\0\0\x02\0\0\0"), ["OK"], id="login-ok"),
        P(_my(2, b"\xfemysql_native_password\0" + bytes(20)), [None], id="auth-switch"),
        P(_my(2, b"\xff" + (1045).to_bytes(2, "little") + b"#28000Access denied"), ["ERROR 1045"],
          id="login-denied"),
    ],
)  # fmt: skip
def test_mysql_statuses(server: bytes, want: list) -> None:
    assert [m[2] for m in parse_stream("mysql", server, 1, {})] == want


@pytest.mark.parametrize(
    ("server", "want"),
    [
        P(b"+OK\r\n", "OK", id="simple"),
        P(b"$3\r\nabc\r\n", "OK", id="bulk"),
        P(b"*2\r\n:1\r\n$-1\r\n", "OK", id="array"),
        P(b"-ERR value is not an integer or out of range\r\n", "ERR", id="err"),
        P(b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n", "WRONGTYPE",
          id="wrongtype"),
        P(b"-NOAUTH Authentication required.\r\n", "NOAUTH", id="noauth"),
        P(b"-something went wrong\r\n", "ERR", id="no-prefix"),
        P(b"!21\r\nSYNTAX invalid syntax\r\n", "SYNTAX", id="resp3-blob-error"),
    ],
)  # fmt: skip
def test_redis_statuses(server: bytes, want: str) -> None:
    assert [m[2] for m in parse_stream("redis", server, 1, {})] == [want]


def _dns(txid: int, flags: int, name: str, answers: int = 0) -> bytes:
    """A DNS message (RFC 1035, 4.1) asking for ``name``'s A record, with ``answers``
    A records of 127.0.0.1."""
    qname = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    msg = struct.pack(">HHHHHH", txid, flags, 1, answers, 0, 0) + qname + b"\0\x01\0\x01"
    return msg + answers * (b"\xc0\x0c\0\x01\0\x01\0\0\0\x3c\0\x04\x7f\0\0\x01")


@pytest.mark.parametrize(
    ("flags", "want"),
    [
        P(0x8180, "NOERROR", id="noerror"),
        P(0x8183, "NXDOMAIN", id="nxdomain"),
        P(0x8182, "SERVFAIL", id="servfail"),
        P(0x8185, "REFUSED", id="refused"),
        P(0x818D, "RCODE13", id="unassigned"),
    ],
)
def test_dns_statuses_over_tcp(flags: int, want: str) -> None:
    msg = _dns(7, flags, "db.test")
    assert [m[2] for m in parse_stream("dns", len(msg).to_bytes(2, "big") + msg, 1, {})] == [want]


def test_protocols_without_statuses_give_none() -> None:
    codes = protocol_codes()
    labels = np.array(["getUser", "op0x00", "TLS x", "200"], object)
    proto = np.array([codes["thrift"], codes["memcached"], codes["tls"], codes["http"]], np.int8)
    assert return_statuses(labels, np.ones(4, bool), proto).tolist() == [None, None, None, "200"]
    assert return_statuses(labels, np.zeros(4, bool), proto).tolist() == [None] * 4


# ---- through a conversion: the status column, each return labelled like its call -------------


def _columns(pcap: Path) -> dict[str, list]:
    out = pcap.with_suffix(".parquet")
    capture.convert_pcaps([pcap], out)
    t = tracefmt.read_trace(out)
    return {c: t[c].cast("string").to_pylist() for c in t.column_names}


def _ip4(n: int) -> bytes:
    return n.to_bytes(4, "big")


def _udp_frame(src: int, dst: int, sport: int, dport: int, data: bytes) -> bytes:
    """An Ethernet/IPv4/UDP frame (checksums left zero)."""
    udp = struct.pack(">HHHH", sport, dport, 8 + len(data), 0) + data
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, 17, 0, _ip4(src), _ip4(dst))
    return b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00" + ip + udp


def test_statuses_reach_the_trace(tmp_path: Path) -> None:
    """One connection or exchange per protocol, converted: each return's status, each
    return's label its call's."""
    from hpack import Encoder

    frames: list = []
    t = 1_000_000_000

    def conn(n: int, port: int, turns: list[tuple[bytes, bytes]]) -> None:
        c = TcpConnection(frames, 0x0A000001, 0x0A000000 + n, 40000 + n, port)
        c.open(t + n * 10_000_000)
        for k, (req, resp) in enumerate(turns):
            c.turn(t + n * 10_000_000 + (k + 1) * 1_000_000, req, resp)
        c.close(t + n * 10_000_000 + 9_000_000)

    conn(
        2, 8080, [(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n", b"HTTP/1.1 503 Busy\r\nContent-Length: 0\r\n\r\n")]
    )
    q = b"Q\0\0\0\x20SELECT * FROM no_such_table\0"
    conn(
        3,
        5432,
        [(q, _PG_ERROR + _PG_READY), (b"Q\0\0\0\x0dSELECT 1\0", _pg(b"C", b"SELECT 1\0") + _PG_READY)],
    )
    greeting = _my(0, b"\x0a5.7.44\0" + bytes(60))
    login, login_ok = _my(1, bytes(32) + b"root\0\0"), _my(2, b"\x00\0\0\x02\0\0\0")
    conn(4, 3306, [(b"", greeting), (login, login_ok), (_my(0, b"\x03SELECT * FROM no_such_table"), _MY_ERR),
                   (_my(0, b"\x03SET @a=1"), _my(1, b"\x00\0\0\x02\0\0\0"))])  # fmt: skip
    conn(5, 6379, [(b"*2\r\n$4\r\nINCR\r\n$1\r\nk\r\n", b"-ERR value is not an integer or out of range\r\n"),
                   (b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", b"$1\r\nv\r\n")])  # fmt: skip
    req = Encoder().encode(
        [(":method", "POST"), (":path", "/st.S/Fail"), ("content-type", "application/grpc")]
    )
    h2_call = capture.protocols.http2.PREFACE + _frame(4, 0, 0, b"") + _frame(1, 4, 1, req)
    h2_call += _frame(0, 1, 1, _grpc_message(b"x"))
    conn(6, 50051, [(h2_call, _h2_response([[(":status", "200"), GRPC, ("grpc-status", "14")]]))])
    frames.append((t + 70_000_000, _udp_frame(0x0A000001, 0x0A000007, 40007, 53, _dns(9, 0x0100, "nx.test"))))
    frames.append((t + 70_500_000, _udp_frame(0x0A000007, 0x0A000001, 53, 40007, _dns(9, 0x8183, "nx.test"))))
    cols = _columns(write_pcap(tmp_path / "all.pcap", frames))
    rows = list(zip(cols["proto"], cols["op"], cols["label"], cols["status"], strict=True))
    returns = [(p, lab, st) for p, op, lab, st in rows if op == "return"]
    assert returns == [
        ("http", "GET /a", "503"),
        ("postgresql", "SELECT", "ERROR 42P01"),
        ("postgresql", "SELECT", "OK"),
        ("mysql", "login", "OK"),
        ("mysql", "SELECT", "ERROR 1146"),
        ("mysql", "SET", "OK"),
        ("redis", "INCR", "ERR"),
        ("redis", "GET", "OK"),
        ("http2", "POST /st.S/Fail", "UNAVAILABLE"),
        ("dns", "A nx.test", "NXDOMAIN"),
    ]
    assert all(st is None for _, op, _, st in rows if op != "return")


# ---- the rule for server errors, and who uses it ------------------------------------------------


@pytest.mark.parametrize(
    ("status", "error"),
    [
        *[P(s, False, id=s) for s in ("200", "301", "404", "499", "OK", "NOERROR", "NXDOMAIN", "REFUSED")],
        *[P(s, False, id=s) for s in ("CANCELLED", "INVALID_ARGUMENT", "NOT_FOUND", "PERMISSION_DENIED",
                                      "RESOURCE_EXHAUSTED", "UNAUTHENTICATED", "RCODE13")],
        *[P(s, True, id=s) for s in ("500", "503", "599", "UNKNOWN", "DEADLINE_EXCEEDED", "UNIMPLEMENTED",
                                     "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "ERROR 42P01", "ERROR 1146",
                                     "SERVFAIL", "ERR", "WRONGTYPE", "NOAUTH")],
        P(None, False, id="none"),
        P("", False, id="empty"),
    ],
)  # fmt: skip
def test_server_errors(status: str | None, error: bool) -> None:
    assert is_server_error(status) is error


def test_error_shares_per_visit() -> None:
    names = ["200", "503", "OK", "UNAVAILABLE", "ERROR 42P01", "SERVFAIL", "NXDOMAIN", "WRONGTYPE"]
    group = np.array([0, 0, 1, 1, 1, 2, 2, 3, 3, 3, 3])
    codes = np.array([0, 1, 2, 3, -1, 4, 2, 5, 6, 6, 7])
    assert error_shares(group, codes, 4, names).tolist() == [0.5, 1 / 3, 0.5, 0.5]
    assert error_shares(np.zeros(0, np.int64), np.zeros(0, np.int64), 0, names).tolist() == []


def test_grpc_error_in_paths_and_export(tmp_path: Path) -> None:
    """A gRPC method that fails one call in four: the visit's errors share, its statuses
    in the paths file, and the exported spans' status and ``rpc.grpc.status_code``."""
    from hpack import Encoder

    frames: list = []
    c = TcpConnection(frames, 0x0A000001, 0x0A000002, 40000, 50051)
    c.open(1_000_000_000)
    enc, senc = Encoder(), Encoder()
    client = capture.protocols.http2.PREFACE + _frame(4, 0, 0, b"")
    server = _frame(4, 0, 0, b"")
    c.turn(1_001_000_000, client, server)
    for k in range(8):
        sid = 2 * k + 1
        req = enc.encode([(":method", "POST"), (":path", "/st.S/Get"), ("content-type", "application/grpc")])
        code = "14" if k % 4 == 3 else "0"
        resp = _frame(1, 4, sid, senc.encode([(":status", "200"), GRPC]))
        resp += _frame(0, 0, sid, _grpc_message(b"y")) + _frame(
            1, 5, sid, senc.encode([("grpc-status", code)])
        )
        call = _frame(1, 4, sid, req) + _frame(0, 1, sid, _grpc_message(b"x"))
        c.turn(1_002_000_000 + k * 1_000_000, call, resp)
    c.close(1_020_000_000)
    pcap = write_pcap(tmp_path / "grpc.pcap", frames)
    trace, paths = tmp_path / "g.parquet", tmp_path / "g.json"
    capture.convert_pcaps([pcap], trace)
    assert main(["infer", "nesting", str(trace), "--out", str(paths)]) == 0
    (pattern,) = json.loads(paths.read_text())["patterns"]
    visit = pattern["root"]
    assert visit["errors"] == 0.25
    assert visit["status"] == [{"status": "OK", "share": 0.75}, {"status": "UNAVAILABLE", "share": 0.25}]
    table = infer.infer_nesting(tracefmt.read_trace(trace)).instances_table()
    doc = export_traces(table, "otlp")
    spans = [sp for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for sp in ss["spans"]]
    codes = []
    for sp in spans:
        attrs = {a["key"]: next(iter(a["value"].values())) for a in sp["attributes"]}
        codes.append((int(attrs["rpc.grpc.status_code"]), sp.get("status", {}).get("code")))
    assert sorted(codes) == [(0, None)] * 12 + [(14, 2)] * 4
    zipkin = export_traces(table, "zipkin")
    assert sorted(sp["tags"].get("error", "") for sp in zipkin) == [""] * 12 + ["UNAVAILABLE"] * 4
    jaeger = export_traces(table, "jaeger")
    tags = [{t["key"]: t["value"] for t in sp["tags"]} for tr in jaeger["data"] for sp in tr["spans"]]
    assert sum(t.get("error") is True and t.get("otel.status_code") == "ERROR" for t in tags) == 4


# ---- real servers and clients on the loopback, recorded with tcpdump ----------------------------

recorded = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("tcpdump") is None, reason="needs root and tcpdump (packet capture)"
)
with_tshark = pytest.mark.skipif(shutil.which("tshark") is None, reason="needs tshark")


def _tcpdump(pcap: Path, port: int) -> contextlib.AbstractContextManager[None]:
    """Record the loopback's traffic to and from ``port`` while the block runs."""
    return loopback_recording(pcap, f"port {port}")


def _returns(cols: dict[str, list], proto: str) -> list[tuple[str, str]]:
    """(label, status) of each return of ``proto``, in trace order."""
    rows = zip(cols["proto"], cols["op"], cols["label"], cols["status"], strict=True)
    return [(lab, st) for p, op, lab, st in rows if p == proto and op == "return"]


def _postgres_bin(name: str) -> str | None:
    found = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), key=lambda p: int(p.parts[4]))
    return str(found[-1]) if found else shutil.which(name)


@contextlib.contextmanager
def _postgres(port: int) -> Iterator[None]:
    """A throwaway PostgreSQL cluster on 127.0.0.1:``port``, run as the ``postgres`` user."""
    initdb, postgres = _postgres_bin("initdb"), _postgres_bin("postgres")
    assert initdb is not None
    assert postgres is not None
    home = Path(tempfile.mkdtemp(prefix="wirepath-pg-"))
    try:
        home.chmod(0o755)
        shutil.chown(home, "postgres")
        data = home / "data"
        as_pg = {"user": "postgres", "group": "postgres", "extra_groups": [], "cwd": home}
        subprocess.run([initdb, "-D", str(data), "-U", "postgres", "--auth=trust", "-N"],
                       check=True, capture_output=True, timeout=120, **as_pg)  # fmt: skip
        server = subprocess.Popen(
            [postgres, "-D", str(data), "-p", str(port), "-k", str(home),
             "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **as_pg,
        )  # fmt: skip
        try:
            for _ in range(200):
                with socket.socket() as s:
                    if s.connect_ex(("127.0.0.1", port)) == 0:
                        break
                time.sleep(0.05)
            time.sleep(0.2)  # accepting connections, not just listening
            yield
        finally:
            server.send_signal(signal.SIGINT)  # a fast shutdown
            server.wait(timeout=30)
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.mark.needs_root
@recorded
@with_tshark
@pytest.mark.skipif(
    _postgres_bin("initdb") is None or shutil.which("psql") is None,
    reason="needs PostgreSQL's server (initdb, postgres) and psql",
)
def test_postgresql_statuses_recorded(tmp_path: Path) -> None:
    port, pcap = free_port(), tmp_path / "pg.pcap"
    env = {**os.environ, "PGSSLMODE": "disable", "PGGSSENCMODE": "disable", "PGCONNECT_TIMEOUT": "10"}
    with _postgres(port), _tcpdump(pcap, port):
        done = subprocess.run(
            ["psql", "-X", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-d", "postgres",
             "-c", "SELECT 1", "-c", "SELECT * FROM no_such_table", "-c", "SELECT 2"],
            capture_output=True, text=True, env=env, timeout=60,
        )  # fmt: skip
    assert 'relation "no_such_table" does not exist' in done.stderr
    assert _returns(_columns(pcap), "postgresql") == [
        ("startup", "OK"),
        ("SELECT", "OK"),
        ("SELECT", "ERROR 42P01"),
        ("SELECT", "OK"),
    ]
    # tshark: one ErrorResponse, code 42P01, and four ReadyForQuery.
    decode = ("-d", f"tcp.port=={port},pgsql")
    assert tshark_rows(pcap, 'pgsql.type == "Error"', "pgsql.code", options=decode) == [["42P01"]]
    assert len(tshark_rows(pcap, 'pgsql.type == "Ready for query"', "frame.number", options=decode)) == 4


@pytest.mark.needs_root
@recorded
@with_tshark
def test_grpc_statuses_recorded(tmp_path: Path) -> None:
    grpc = pytest.importorskip("grpc")
    from concurrent import futures

    def fail(request: bytes, context: grpc.ServicerContext) -> bytes:
        context.abort(grpc.StatusCode.UNAVAILABLE, "down for maintenance")

    port, pcap = free_port(), tmp_path / "grpc.pcap"
    handler = grpc.method_handlers_generic_handler(
        "st.S",
        {
            "Ok": grpc.unary_unary_rpc_method_handler(lambda request, context: request),
            "Fail": grpc.unary_unary_rpc_method_handler(fail),
        },
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    got = []
    with _tcpdump(pcap, port):
        server.start()
        try:
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                for method in ("Ok", "Fail", "Missing", "Ok"):
                    try:
                        channel.unary_unary(f"/st.S/{method}")(b"hi", timeout=10)
                        got.append("OK")
                    except grpc.RpcError as e:
                        got.append(e.code().name)
        finally:
            server.stop(None)
    assert got == ["OK", "UNAVAILABLE", "UNIMPLEMENTED", "OK"]
    assert _returns(_columns(pcap), "http2") == [
        ("POST /st.S/Ok", "OK"),
        ("POST /st.S/Fail", "UNAVAILABLE"),
        ("POST /st.S/Missing", "UNIMPLEMENTED"),
        ("POST /st.S/Ok", "OK"),
    ]
    # tshark's HPACK decoding: the grpc-status each response's last header block carries.
    rows = tshark_rows(
        pcap, "http2.type == 1 && http2.flags.end_stream == 1", "http2.header.name", "http2.header.value",
        options=("-d", f"tcp.port=={port},http2", "-E", "aggregator=~"),
    )  # fmt: skip
    statuses = []
    for names, values in rows:
        fields = dict(zip(names.split("~"), values.split("~"), strict=True))
        if "grpc-status" in fields:
            statuses.append(GRPC_STATUS_NAMES[int(fields["grpc-status"])])
    assert statuses == got


@pytest.mark.needs_root
@recorded
@with_tshark
@pytest.mark.skipif(
    shutil.which("redis-server") is None or shutil.which("redis-cli") is None,
    reason="needs redis-server and redis-cli",
)
def test_redis_statuses_recorded_and_errors_in_paths(tmp_path: Path) -> None:
    port, pcap = free_port(), tmp_path / "redis.pcap"
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    # INCR on a string that is not a number, LPUSH (a list command) on a string.
    commands = ["SET k v", *["GET k"] * 4, "INCR k", "GET k", "GET k", "LPUSH k x", "GET k", "INCR k"]
    try:
        for _ in range(200):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.02)
        with _tcpdump(pcap, port):
            # One connection, each command sent once the answer to the one before came.
            done = subprocess.run(
                ["redis-cli", "-p", str(port)], input="\n".join(commands) + "\n",
                capture_output=True, text=True, timeout=30,
            )  # fmt: skip
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert done.stdout.count("ERR value is not an integer or out of range") == 2
    assert done.stdout.count("WRONGTYPE Operation against a key holding the wrong kind of value") == 1
    returns = _returns(_columns(pcap), "redis")
    assert returns == [
        ("COMMAND", "OK"),  # redis-cli asks for the commands' docs first
        ("SET", "OK"), *[("GET", "OK")] * 4, ("INCR", "ERR"), *[("GET", "OK")] * 2, ("LPUSH", "WRONGTYPE"),
        ("GET", "OK"), ("INCR", "ERR"),
    ]  # fmt: skip
    # tshark's RESP dissector: the error replies.
    rows = tshark_rows(
        pcap, "resp.error", "resp.error", options=("-d", f"tcp.port=={port},resp", "-E", "aggregator=~")
    )
    assert [e.split()[0] for r in rows for e in r[0].split("~")] == ["ERR", "WRONGTYPE", "ERR"]
    # infer nesting: the one visit's statuses and its share of errors.
    paths = tmp_path / "r.json"
    assert main(["infer", "nesting", str(pcap.with_suffix(".parquet")), "--out", str(paths)]) == 0
    (pattern,) = json.loads(paths.read_text())["patterns"]
    assert pattern["root"]["errors"] == pytest.approx(3 / 12)
    assert pattern["root"]["status"] == [
        {"status": "OK", "share": pytest.approx(9 / 12)},
        {"status": "ERR", "share": pytest.approx(2 / 12)},
        {"status": "WRONGTYPE", "share": pytest.approx(1 / 12)},
    ]


@contextlib.contextmanager
def _nxdomain_responder(port: int) -> Iterator[None]:
    """A DNS server on UDP ``port`` that knows one name (``known.test``) and answers
    NXDOMAIN for every other."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", port))
    sock.settimeout(0.1)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                query, peer = sock.recvfrom(512)
            except TimeoutError:
                continue
            known = b"\x05known\x04test\x00" in query
            flags = 0x8180 if known else 0x8183  # QR, RD, RA; NOERROR or NXDOMAIN
            head = struct.pack(">HHHHHH", int.from_bytes(query[:2], "big"), flags, 1, int(known), 0, 0)
            answer = b"\xc0\x0c\0\x01\0\x01\0\0\0\x3c\0\x04\x7f\0\0\x01" if known else b""
            sock.sendto(head + query[12:] + answer, peer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)
        sock.close()


@pytest.mark.needs_root
@recorded
@with_tshark
def test_dns_statuses_recorded(tmp_path: Path) -> None:
    port, pcap = free_port(socket.SOCK_DGRAM), tmp_path / "dns.pcap"
    client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with _nxdomain_responder(port), _tcpdump(pcap, port), client:
        client.settimeout(5)
        for txid, name in enumerate(("no-such-host.test", "known.test", "nothing.here.test"), 1):
            client.sendto(_dns(txid, 0x0100, name), ("127.0.0.1", port))
            assert client.recv(512)[:2] == txid.to_bytes(2, "big")
    assert _returns(_columns(pcap), "dns") == [
        ("A no-such-host.test", "NXDOMAIN"),
        ("A known.test", "NOERROR"),
        ("A nothing.here.test", "NXDOMAIN"),
    ]
    rows = tshark_rows(
        pcap, "dns.flags.response == 1", "dns.flags.rcode", options=("-d", f"udp.port=={port},dns")
    )
    assert [r[0] for r in rows] == ["3", "0", "3"]

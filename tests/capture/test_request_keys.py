"""Request keys read off the wire (``capture.request_keys``): each header form against
values written out by hand from its specification, the two HTTP/1.x paths and the
compiled and numpy code against each other, and real clients on the loopback recorded
with tcpdump (curl, an OpenTelemetry-instrumented client, grpcio)."""

from __future__ import annotations

import base64
import contextlib
import http.server
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from testkit.pcap import free_port, loopback_recording, write_pcap

import capture
import tracefmt
from capture import request_keys
from capture.frames import TcpConnection
from capture.request_keys import KeyOptions, header_keys, http1_keys, trace_context
from wirepath.cli import main

# W3C Trace Context, section 3.2 (the example of a traceparent).
TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
TP_TRACE, TP_SPAN = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
# OpenCensus BinaryEncoding: version 0; field 0, trace id 0x40..0x4f; field 1, span id
# 0x61..0x68; field 2, options 1.
CENSUS = bytes([0, 0, *range(0x40, 0x50), 1, *range(0x61, 0x69), 2, 1])
CENSUS_TRACE, CENSUS_SPAN = "404142434445464748494a4b4c4d4e4f", "6162636465666768"


P = pytest.param
BAD = (None, None, None, 1)  # no key, one malformed value


def keys_of(headers: dict[str, str | bytes], **options: object) -> tuple:
    return trace_context(headers, KeyOptions(**options) if options else None)  # type: ignore[arg-type]


# ---- each header form -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "want"),
    [
        P({"traceparent": TP}, (TP_TRACE, TP_SPAN, None, 0), id="traceparent"),
        P({"TraceParent": TP}, (TP_TRACE, TP_SPAN, None, 0), id="traceparent-name-case"),
        P({"traceparent": TP.upper()}, BAD, id="traceparent-upper-hex"),
        P({"traceparent": "00-" + "0" * 32 + "-b7ad6b7169203331-01"}, BAD, id="tp-zero-trace"),
        P({"traceparent": "00-" + TP_TRACE + "-" + "0" * 16 + "-01"}, BAD, id="tp-zero-span"),
        P({"traceparent": "ff" + TP[2:]}, BAD, id="tp-version-ff"),
        P({"traceparent": "cc" + TP[2:] + "-next"}, (TP_TRACE, TP_SPAN, None, 0), id="tp-later-version"),
        P({"traceparent": TP + "-x"}, BAD, id="tp-00-too-long"),
        P({"traceparent": TP[:-1]}, BAD, id="tp-short"),
        P({"traceparent": TP[:34] + "-" + TP[34] + TP[36:]}, BAD, id="tp-dash-moved"),
        # B3 single header (openzipkin/b3-propagation, "Single Header").
        P({"b3": "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1-05e3ac9a4f6e3b90"},
                     ("80f198ee56343ba864fe8b2a57d3eff7", "e457b5a2e4d86bd1", None, 0), id="b3-full"),
        P({"b3": "80f198ee56343ba8-e457b5a2e4d86bd1"},
                     ("000000000000000080f198ee56343ba8", "e457b5a2e4d86bd1", None, 0), id="b3-64bit"),
        P({"B3": "80F198EE56343BA8-E457B5A2E4D86BD1-d"},
                     ("000000000000000080f198ee56343ba8", "e457b5a2e4d86bd1", None, 0), id="b3-upper"),
        P({"b3": "0"}, (None, None, None, 0), id="b3-sampling-only"),
        P({"b3": "80f198ee56343ba8-e457b5a2e4d86bd1-x"}, BAD, id="b3-bad-sampled"),
        P({"b3": "80f198ee56343ba8a-e457b5a2e4d86bd1"}, BAD, id="b3-17-digits"),
        P({"b3": "0000000000000000-e457b5a2e4d86bd1-1"}, BAD, id="b3-zero"),
        # B3 multiple headers.
        P({"X-B3-TraceId": "80f198ee56343ba864fe8b2a57d3eff7", "X-B3-SpanId": "e457b5a2e4d86bd1"},
                     ("80f198ee56343ba864fe8b2a57d3eff7", "e457b5a2e4d86bd1", None, 0), id="x-b3"),
        P({"x-b3-traceid": "64fe8b2a57d3eff7", "x-b3-spanid": "e457b5a2e4d86bd1"},
                     ("000000000000000064fe8b2a57d3eff7", "e457b5a2e4d86bd1", None, 0), id="x-b3-64bit"),
        P({"X-B3-TraceId": "64fe8b2a57d3eff7", "X-B3-SpanId": "e457"},
                     ("000000000000000064fe8b2a57d3eff7", None, None, 1), id="x-b3-bad-span"),
        # Jaeger (jaegertracing.io, "Propagation format").
        P({"uber-trace-id": "4bf92f3577b34da6a3ce929d0e0e4736:00f067aa0ba902b7:0:1"},
                     ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", None, 0), id="uber"),
        P({"Uber-Trace-Id": "abc:def:0:1"},
                     ("00000000000000000000000000000abc", "0000000000000def", None, 0), id="uber-short"),
        P({"uber-trace-id": "0:def:0:1"}, BAD, id="uber-zero"),
        P({"uber-trace-id": "abc:def:0"}, BAD, id="uber-three-fields"),
        P({"uber-trace-id": "abg:def:0:1"}, BAD, id="uber-not-hex"),
        # gRPC's binary trace context, base64 with and without its padding.
        P({"grpc-trace-bin": base64.b64encode(CENSUS)}, (CENSUS_TRACE, CENSUS_SPAN, None, 0), id="grpc-bin"),
        P({"grpc-trace-bin": base64.b64encode(CENSUS).rstrip(b"=")},
                     (CENSUS_TRACE, CENSUS_SPAN, None, 0), id="grpc-bin-unpadded"),
        P({"grpc-trace-bin": base64.b64encode(bytes([1]) + CENSUS[1:])}, BAD, id="grpc-bin-version"),
        P({"grpc-trace-bin": base64.b64encode(CENSUS[:10])}, BAD, id="grpc-bin-cut"),
        P({"grpc-trace-bin": b"!!not base64"}, BAD, id="grpc-bin-garbage"),
        P({"grpc-trace-bin": b"\x00" + CENSUS}, (CENSUS_TRACE, CENSUS_SPAN, None, 0), id="grpc-true-binary"),
        # Request ids.
        P({"X-Request-ID": "  req-7\t"}, (None, None, "req-7", 0), id="request-id-blanks"),
        P({"x-correlation-id": "c-1", "X-REQUEST-ID": "r-1"}, (None, None, "r-1", 0), id="first-name"),
        P({"X-Correlation-ID": "c-1"}, (None, None, "c-1", 0), id="correlation-id"),
        P({"X-Request-ID": "r" * 128}, (None, None, "r" * 128, 0), id="request-id-128"),
        P({"X-Request-ID": "r" * 129}, BAD, id="request-id-129"),
        P({"X-Request-ID": "caf\u00e9"}, BAD, id="request-id-not-ascii"),
        P({"X-Request-ID": ""}, BAD, id="request-id-empty"),
        P({"X-Request-ID": "a\x01b"}, BAD, id="request-id-control"),
    ],
)  # fmt: skip
def test_header_forms(headers: dict[str, str | bytes], want: tuple) -> None:
    assert keys_of(headers) == want


def test_precedence_when_several_headers_come() -> None:
    uber = "4bf92f3577b34da6a3ce929d0e0e4736:00f067aa0ba902b7:0:1"
    b3 = "80f198ee56343ba8-e457b5a2e4d86bd1-1"
    every = {"grpc-trace-bin": base64.b64encode(CENSUS), "uber-trace-id": uber, "b3": b3, "traceparent": TP}
    assert keys_of(every)[:2] == (TP_TRACE, TP_SPAN)
    assert keys_of({k: v for k, v in every.items() if k != "traceparent"})[:2] == (
        "000000000000000080f198ee56343ba8",
        "e457b5a2e4d86bd1",
    )
    assert keys_of({"uber-trace-id": uber, "grpc-trace-bin": base64.b64encode(CENSUS)})[:2] == (
        "4bf92f3577b34da6a3ce929d0e0e4736",
        "00f067aa0ba902b7",
    )
    # A malformed header is skipped, and counted; the next one on the list gives the ids.
    assert keys_of({"traceparent": TP.upper(), "b3": b3}) == (
        "000000000000000080f198ee56343ba8",
        "e457b5a2e4d86bd1",
        None,
        1,
    )
    # The single b3 header before X-B3-*.
    x_b3 = {"X-B3-TraceId": "64fe8b2a57d3eff7", "X-B3-SpanId": "e457b5a2e4d86bd1"}
    assert keys_of({**x_b3, "b3": b3})[0] == "000000000000000080f198ee56343ba8"


def test_request_id_names_are_configurable() -> None:
    headers = {"X-Request-ID": "r-1", "X-Amzn-Trace-Id": "Root=1-5759e988"}
    assert keys_of(headers, request_id_headers=("X-Amzn-Trace-Id",))[2] == "Root=1-5759e988"
    assert keys_of(headers, request_id_headers=())[2] is None


@pytest.mark.parametrize("name", ["user agent", "x:y", "", "caf\u00e9", "a,b"])
def test_bad_header_names_are_refused(name: str) -> None:
    with pytest.raises(tracefmt.ParameterError, match="not an HTTP token"):
        KeyOptions(keep_headers=(name,))
    with pytest.raises(tracefmt.ParameterError, match="not an HTTP token"):
        KeyOptions(request_id_headers=(name,))


def test_no_headers_and_no_messages() -> None:
    assert len(header_keys([], KeyOptions()).trace_id) == 0
    empty = http1_keys(b"", np.zeros(0, np.int64), np.zeros(0, np.int64), KeyOptions())
    assert len(empty.request_id) == 0
    none = header_keys([None, []], KeyOptions())
    assert none.trace_id.tolist() == [b"", b""]
    assert none.malformed.tolist() == [0, 0]


# ---- HTTP/1.x: where a header is, and the compiled code against numpy -----------------------


def _message(*lines: str, body: bytes = b"") -> bytes:
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


MESSAGES = [
    _message("GET / HTTP/1.1", "Host: h", f"traceparent: {TP}", "X-Request-ID: r1"),
    _message("GET / HTTP/1.1", f"traceparent:{TP}", "x-request-id:\tr2  "),  # no blank after the colon
    _message("GET / HTTP/1.1", "X-Request-ID: first", "X-Request-ID: second"),  # the first line wins
    _message("GET / HTTP/1.1", "X-Request-ID : spaced"),  # a blank before the colon: not the field
    _message("POST / HTTP/1.1", "Content-Length: 32", body=b"\r\nX-Request-ID: in-the-body\r\n\r\n\r\n"),
    _message("GET / HTTP/1.1", "X-Request-Id: bare-lf").replace(b"\r\n", b"\n"),
    _message("HTTP/1.1 200 OK", "X-Request-ID: echoed", "Content-Length: 0"),
    _message("GET / HTTP/1.1", "X-Forwarded-X-Request-ID: no"),
    b"GET / HTTP/1.1\r\nX-Request-ID: cut-before-the-end",  # a head cut short: the line is read
    _message("GET / HTTP/1.1", "b3: 80f198ee56343ba8-e457b5a2e4d86bd1-1", "uber-trace-id: 1:2:0:1"),
]
MESSAGE_IDS = [b"r1", b"r2", b"first", b"", b"", b"bare-lf", b"echoed", b"", b"cut-before-the-end", b""]


def _spans(messages: list[bytes]) -> tuple[bytes, np.ndarray, np.ndarray]:
    lo = np.cumsum([0, *map(len, messages)])[:-1].astype(np.int64)
    return b"".join(messages), lo, lo + np.array(list(map(len, messages)), np.int64)


def test_http1_header_lines() -> None:
    stream, lo, hi = _spans(MESSAGES)
    got = http1_keys(stream, lo, hi, KeyOptions())
    assert got.request_id.tolist() == MESSAGE_IDS
    assert got.trace_id.tolist()[:2] == [TP_TRACE.encode()] * 2
    assert got.trace_id.tolist()[9] == b"000000000000000080f198ee56343ba8"  # b3 before uber-trace-id


@pytest.mark.skipif(request_keys.native is None, reason="capture.native is not built")
def test_compiled_and_numpy_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(7)
    good = [m for m in MESSAGES]
    # Mutations of valid values: a byte changed, dropped or repeated, cases swapped.
    values = [TP, "cc" + TP[2:] + "-x", "80f198ee56343ba8-e457b5a2e4d86bd1-1", "a" * 128, "a" * 129]
    for _ in range(400):
        v = bytearray(values[rng.integers(len(values))].encode())
        k = int(rng.integers(len(v)))
        op = rng.integers(4)
        if op == 0:
            v[k] = int(rng.choice(list(b"0-fF\x7fz :\x00 ")))
        elif op == 1:
            del v[k]
        elif op == 2:
            v.insert(k, v[k])
        name = ["traceparent", "TraceParent", "b3", "X-Request-ID"][rng.integers(4)]
        good.append(b"GET / HTTP/1.1\r\n" + name.encode() + b": " + bytes(v) + b"\r\n\r\n")
    stream, lo, hi = _spans(good)
    options = KeyOptions(keep_headers=("Host",))
    compiled = http1_keys(stream, lo, hi, options)
    monkeypatch.setattr(request_keys, "native", None)
    plain = http1_keys(stream, lo, hi, options)
    for name in ("trace_id", "span_id", "request_id", "malformed"):
        assert getattr(compiled, name).tolist() == getattr(plain, name).tolist(), name
    assert compiled.headers.tolist() == plain.headers.tolist()
    assert 0 < int((compiled.trace_id != b"").sum()) < len(good)  # both kinds of value were there


def _capture(tmp_path: Path, requests: list[bytes], response: bytes) -> Path:
    frames: list = []
    c = TcpConnection(frames, 0x0A000001, 0x0A000002, 40000, 8080)
    c.open(1_000_000_000)
    for i, r in enumerate(requests):
        c.turn(1_000_000_000 + (i + 1) * 1_000_000, r, response)
    c.close(2_000_000_000)
    return write_pcap(tmp_path / "k.pcap", frames)


def _columns(path: Path, **kw: object) -> dict[str, list]:
    out = path.with_suffix(".parquet")
    capture.convert_pcaps([path], out, **kw)  # type: ignore[arg-type]
    t = tracefmt.read_trace(out)
    return {c: t[c].cast("string").to_pylist() for c in t.column_names}


REQUESTS = [
    _message(
        "GET /a HTTP/1.1", "Host: x", f"traceparent: {TP}", "X-Request-ID: r-1", "User-Agent: secret-agent/7"
    ),
    _message("GET /b HTTP/1.1", "Host: x", "b3: 80f198ee56343ba8-e457b5a2e4d86bd1-1"),
    _message("GET /c HTTP/1.1", "Host: x", "traceparent: 00-nothex"),
]
RESPONSE = _message("HTTP/1.1 200 OK", "Content-Length: 2", "X-Request-ID: echo", body=b"ok")


def test_both_http1_paths_agree(tmp_path: Path) -> None:
    pcap = _capture(tmp_path, REQUESTS, RESPONSE)
    bulk = _columns(pcap)
    # With payloads kept every HTTP connection goes through the stream parser.
    parsed = _columns(pcap, keep_payload=True)
    assert bulk["trace_id"] == [TP_TRACE, None, "000000000000000080f198ee56343ba8", None, None, None]
    assert bulk["span_id"] == [TP_SPAN, None, "e457b5a2e4d86bd1", None, None, None]
    assert bulk["request_id"] == ["r-1", "echo", None, "echo", None, "echo"]
    for name in ("trace_id", "span_id", "request_id"):
        assert parsed[name] == bulk[name], name


def test_traces_without_keys_are_as_before(tmp_path: Path) -> None:
    plain = _message("GET /a HTTP/1.1", "Host: x")
    pcap = _capture(tmp_path, [plain, plain], _message("HTTP/1.1 200 OK", "Content-Length: 0"))
    with_keys, without = tmp_path / "a.parquet", tmp_path / "b.parquet"
    capture.convert_pcaps([pcap], with_keys)
    capture.convert_pcaps([pcap], without, keys=None)
    a, b = tracefmt.read_trace(with_keys), tracefmt.read_trace(without)
    assert a.column_names == b.column_names
    assert "trace_id" not in a.column_names
    assert a.equals(b)


def test_a_column_first_seen_late_gets_nulls_before(tmp_path: Path) -> None:
    # Row groups of 128k messages: the first key comes after the first row group is written.
    frames: list = []
    plain = _message("GET /a HTTP/1.1", "Host: x")
    keyed = _message("GET /a HTTP/1.1", f"traceparent: {TP}")
    resp = _message("HTTP/1.1 200 OK", "Content-Length: 0")
    c = TcpConnection(frames, 0x0A000001, 0x0A000002, 40000, 8080)
    c.open(1_000_000_000)
    n = 70_000
    for i in range(n):
        c.turn(1_000_000_000 + (i + 1) * 10_000, keyed if i == n - 1 else plain, resp)
    c.close(3_000_000_000)
    pcap = write_pcap(tmp_path / "late.pcap", frames)
    out = tmp_path / "late.parquet"
    report = capture.convert_pcaps([pcap], out, chunk_bytes=1 << 20)
    t = tracefmt.read_trace(out)
    assert t.num_rows == 2 * n
    assert t["trace_id"].null_count == 2 * n - 1
    ops = t["op"].cast("string").to_pylist()
    at = t["trace_id"].cast("string").to_pylist().index(TP_TRACE)
    assert ops[at] == "call"
    assert "call" not in ops[at + 1 :]
    assert report.with_trace_id == 1


def test_keep_headers_and_nothing_else(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pcap = _capture(tmp_path, REQUESTS, RESPONSE)
    out = tmp_path / "t.parquet"
    assert main(["capture", "pcap", str(pcap), "--out", str(out), "--json"]) == 0
    capsys.readouterr()
    assert "secret-agent" not in _everything(out)
    assert main(["capture", "pcap", str(pcap), "--out", str(out), "--keep-headers", "user-agent,Host"]) == 0
    text = capsys.readouterr().out
    assert "request keys: 2 messages with a trace id, 4 with a request id; malformed values skipped 1" in text
    t = tracefmt.read_trace(out)
    assert t["x_header_user_agent"].to_pylist() == ["secret-agent/7", None, None, None, None, None]
    assert t["x_header_host"].to_pylist() == ["x", None, "x", None, "x", None]
    assert main(["capture", "pcap", str(pcap), "--out", str(out), "--keep-headers", "user agent"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "'user agent' is not an HTTP token (allowed: letters, digits" in err
    assert main(["capture", "pcap", str(pcap), "--out", str(out), "--request-id-headers", ""]) == 0
    assert "request_id" not in tracefmt.read_trace(out).column_names


def _everything(path: Path) -> str:
    """Every value and every metadata string of a Parquet file, as text."""
    import pyarrow.parquet as pq

    t = pq.read_table(path)
    return repr(t.schema.metadata) + "".join(repr(t[c].to_pylist()) for c in t.column_names)


def test_http2_headers(tmp_path: Path) -> None:
    from hpack import Encoder

    enc = Encoder()
    census = base64.b64encode(CENSUS).rstrip(b"=")

    def frame(typ: int, flags: int, sid: int, payload: bytes) -> bytes:
        return len(payload).to_bytes(3, "big") + bytes([typ, flags]) + sid.to_bytes(4, "big") + payload

    req = enc.encode(
        [(":method", "POST"), (":path", "/s.S/M"), ("grpc-trace-bin", census), ("x-request-id", "h2-1")]
    )
    req2 = enc.encode(
        [(":method", "POST"), (":path", "/s.S/M"), ("traceparent", TP), ("grpc-trace-bin", census)]
    )
    client = (
        capture.protocols.http2.PREFACE + frame(4, 0, 0, b"") + frame(1, 5, 1, req) + frame(1, 5, 3, req2)
    )
    server_enc = Encoder()
    server = frame(4, 0, 0, b"") + frame(
        1, 5, 1, server_enc.encode([(":status", "200"), ("x-request-id", "h2-1")])
    )
    server += frame(1, 5, 3, server_enc.encode([(":status", "200")]))
    frames: list = []
    c = TcpConnection(frames, 0x0A000001, 0x0A000002, 40000, 50051)
    c.open(1_000_000_000)
    c.turn(1_001_000_000, client, server)
    c.close(1_002_000_000)
    cols = _columns(write_pcap(tmp_path / "h2.pcap", frames))
    assert cols["proto"] == ["http2"] * 4
    assert cols["op"] == ["call", "call", "return", "return"]
    assert cols["trace_id"] == [CENSUS_TRACE, TP_TRACE, None, None]
    assert cols["span_id"] == [CENSUS_SPAN, TP_SPAN, None, None]
    assert cols["request_id"] == ["h2-1", None, "h2-1", None]


# ---- real clients on the loopback, recorded with tcpdump --------------------------------------

needs_root = pytest.mark.needs_root
recorded = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("tcpdump") is None, reason="needs root and tcpdump (packet capture)"
)


def _tcpdump(pcap: Path, port: int) -> contextlib.AbstractContextManager[None]:
    """Record the loopback's traffic to and from ``port`` while the block runs."""
    return loopback_recording(pcap, f"tcp port {port}")


class _Echo(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.send_response(200)
        if self.headers.get("X-Request-ID"):  # as nginx does with $request_id
            self.send_header("X-Request-ID", self.headers["X-Request-ID"])
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def _server(port: int) -> Iterator[None]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), _Echo)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield
    finally:
        srv.shutdown()
        srv.server_close()


@needs_root
@recorded
@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
def test_curl_headers_reach_the_trace(tmp_path: Path) -> None:
    port, pcap = free_port(), tmp_path / "curl.pcap"
    sent = [
        {"traceparent": TP, "b3": "80f198ee56343ba8-e457b5a2e4d86bd1-1", "X-Request-ID": "curl-1"},
        {"b3": "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1", "X-Request-ID": "curl-2"},
        {"uber-trace-id": "4bf92f3577b34da6a3ce929d0e0e4736:00f067aa0ba902b7:0:1"},
    ]
    with _server(port), _tcpdump(pcap, port):
        for headers in sent:
            cmd = ["curl", "-sf", "-o", "/dev/null", f"http://127.0.0.1:{port}/x"]
            for k, v in headers.items():
                cmd += ["-H", f"{k}: {v}"]
            subprocess.run(cmd, check=True, timeout=10)
    cols = _columns(pcap)
    calls = [i for i, op in enumerate(cols["op"]) if op == "call"]
    rets = [i for i, op in enumerate(cols["op"]) if op == "return"]
    assert [cols["trace_id"][i] for i in calls] == [
        TP_TRACE,
        "80f198ee56343ba864fe8b2a57d3eff7",
        "4bf92f3577b34da6a3ce929d0e0e4736",
    ]
    assert [cols["span_id"][i] for i in calls] == [TP_SPAN, "e457b5a2e4d86bd1", "00f067aa0ba902b7"]
    assert [cols["request_id"][i] for i in calls] == ["curl-1", "curl-2", None]
    assert [cols["request_id"][i] for i in rets] == ["curl-1", "curl-2", None]  # echoed by the server
    assert [cols["trace_id"][i] for i in rets] == [None] * 3


@needs_root
@recorded
def test_opentelemetry_client_ids_reach_the_trace(tmp_path: Path) -> None:
    import http.client

    from opentelemetry import propagate
    from opentelemetry.sdk.trace import TracerProvider

    tracer = TracerProvider().get_tracer("wirepath-test")
    port, pcap = free_port(), tmp_path / "otel.pcap"
    spans = []
    with _server(port), _tcpdump(pcap, port):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        for i in range(3):
            with tracer.start_as_current_span(f"call {i}") as span:
                headers: dict[str, str] = {}
                propagate.inject(headers)
                conn.request("GET", f"/item/{i}", headers=headers)
                conn.getresponse().read()
                ctx = span.get_span_context()
                spans.append((format(ctx.trace_id, "032x"), format(ctx.span_id, "016x")))
        conn.close()
    cols = _columns(pcap)
    calls = [i for i, op in enumerate(cols["op"]) if op == "call"]
    assert [(cols["trace_id"][i], cols["span_id"][i]) for i in calls] == spans
    assert len({t for t, _ in spans}) == 3


@needs_root
@recorded
def test_grpc_metadata_reaches_the_trace(tmp_path: Path) -> None:
    grpc = pytest.importorskip("grpc")
    from concurrent import futures

    port, pcap = free_port(), tmp_path / "grpc.pcap"
    handler = grpc.method_handlers_generic_handler(
        "keys.Echo", {"Say": grpc.unary_unary_rpc_method_handler(lambda request, context: request)}
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    with _tcpdump(pcap, port):
        server.start()
        try:
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                say = channel.unary_unary("/keys.Echo/Say")
                for i in range(2):
                    assert (
                        say(b"hi", metadata=[("x-request-id", f"grpc-{i}"), ("grpc-trace-bin", CENSUS)])
                        == b"hi"
                    )
        finally:
            server.stop(None)
    cols = _columns(pcap)
    calls = [i for i, op in enumerate(cols["op"]) if op == "call"]
    assert [cols["label"][i] for i in calls] == ["POST /keys.Echo/Say"] * 2
    assert [cols["request_id"][i] for i in calls] == ["grpc-0", "grpc-1"]
    assert [cols["trace_id"][i] for i in calls] == [CENSUS_TRACE] * 2
    assert [cols["span_id"][i] for i in calls] == [CENSUS_SPAN] * 2

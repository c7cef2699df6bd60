"""From a message back to its packets: the connection columns against tshark, the
instances table's key to a request's messages, and ``wirepath packets`` on a real capture."""

from __future__ import annotations

import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import dpkt
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from testkit.pcap import tshark_rows

import capture
import infer
import tracefmt
from capture import packets
from capture.decode import Decoder
from capture.source import FakeSource, PacketBatch
from capture.streams import StreamNumbers
from wirepath.cli import main

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data" / "pcaps"
if not DATA.is_dir():
    DATA = Path("/work/shared/data/pcaps")
needs_tshark = pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed")

_FIELDS = ("frame.time_epoch", "ip.src", "ipv6.src", "tcp.srcport", "udp.srcport",
           "ip.dst", "ipv6.dst", "tcp.dstport", "udp.dstport", "tcp.stream", "udp.stream")  # fmt: skip


def _tshark_packets(path: Path) -> dict[tuple, set[tuple[str, int]]]:
    """(time ns, src, sport, dst, dport) -> {(transport, stream)} of each TCP/UDP packet,
    by tshark's dissectors (the innermost header of a tunnel)."""
    got: dict[tuple, set[tuple[str, int]]] = collections.defaultdict(set)
    for f in tshark_rows(path, "frame", *_FIELDS, options=("-E", "occurrence=l")):
        if len(f) < len(_FIELDS) or not (f[9] or f[10]) or not (f[3] or f[4]):
            continue
        ts = int(f[0].replace(".", ""))
        src, dst = f[2] or f[1], f[6] or f[5]  # IPv6 in IPv4: the inner one
        key = (ts, src, int(f[3] or f[4]), dst, int(f[7] or f[8]))
        got[key].add(("tcp", int(f[9])) if f[9] else ("udp", int(f[10])))
    return got


REAL = [
    "samples/testbed/bridge.pcap",  # six connections, IPv4
    "chrissanders/http_espn.pcapng",  # dozens of connections, DNS over UDP
    "chrissanders/http_ip4and6.pcapng",  # IPv4 and IPv6
    "zeek/http_methods.pcap",  # many short connections
    "grpc_packt/Unary.pcapng",  # HTTP/2 and multicast DNS
    "chrissanders/dns_lab.pcapng",  # DNS over UDP
]


def _real(name: str) -> Path:
    path = ROOT / name if name.startswith("samples/") else DATA / name
    if not path.is_file():
        pytest.skip(f"{path} is not present")
    return path


@needs_tshark
@pytest.mark.parametrize("chunk_bytes", [8 << 20, 4096], ids=["one-batch", "small-batches"])
@pytest.mark.parametrize("name", REAL)
def test_connection_columns_agree_with_tshark(name: str, chunk_bytes: int, tmp_path: Path) -> None:
    # Each message's first packet (its time and endpoints) is a packet tshark saw, with the
    # addresses, ports and the tcp.stream / udp.stream number the trace gives the message.
    path = _real(name)
    out = tmp_path / "t.parquet"
    capture.convert_pcaps([path], out, chunk_bytes=chunk_bytes, keys=capture.KeyOptions(connections=True))
    t = tracefmt.read_trace(out)
    rows = t.to_pylist()
    theirs = _tshark_packets(path)
    assert rows
    for ts, r in zip(t["timestamp"].cast(pa.int64()).to_pylist(), rows, strict=True):
        key = (ts, r["src_ip"], r["src_port"], r["dst_ip"], r["dst_port"])
        assert key in theirs, f"no packet {key} in tshark's output"
        assert r["stream"] in {s for _, s in theirs[key]}, (key, r["stream"], theirs[key])
    # Not all in one connection: the numbers are really compared.
    assert len({r["stream"] for r in rows}) > 1


def _frame(sport: int, dport: int, seq: int, flags: int, data: bytes = b"", *, udp: bool = False,
           src: int = 1, dst: int = 2) -> bytes:  # fmt: skip
    if udp:
        l4 = dpkt.udp.UDP(sport=sport, dport=dport, data=data)
    else:
        l4 = dpkt.tcp.TCP(sport=sport, dport=dport, seq=seq, flags=flags, data=data)
    ip = dpkt.ip.IP(src=bytes([10, 0, 0, src]), dst=bytes([10, 0, 0, dst]), p=17 if udp else 6, data=l4)
    ip.len = len(bytes(ip))
    return bytes(dpkt.ethernet.Ethernet(src=b"\x02" * 6, dst=b"\x04" * 6, type=0x0800, data=ip))


_S, _SA, _R, _PA = 0x02, 0x12, 0x14, 0x18
# Port reuse and its look-alikes: a retransmitted SYN, a SYN again after a reset (same
# sequence number), a new SYN (another one), a connection seen mid-way then its SYN (one
# less than its first byte: the same connection) and a new SYN; UDP counted apart.
_REUSE = [
    _frame(4000, 80, 100, _S), _frame(80, 4000, 900, _SA, src=2, dst=1),
    _frame(4000, 80, 101, _PA, b"GET / HTTP/1.1\r\n\r\n"), _frame(4000, 80, 100, _S),
    _frame(5000, 53, 0, 0, b"x", udp=True), _frame(4000, 80, 101, _R), _frame(4000, 80, 100, _S),
    _frame(4000, 80, 7777, _S), _frame(4001, 80, 50, _PA, b"mid"), _frame(4001, 80, 49, _S),
    _frame(4001, 80, 60, _S), _frame(5000, 53, 0, 0, b"y", udp=True), _frame(5001, 53, 0, 0, b"y", udp=True),
]  # fmt: skip
_REUSE_TS = [1_000_000_000 + 1000 * i for i in range(len(_REUSE))]


@needs_tshark
@pytest.mark.parametrize("batch_size", [1, 3, 100])
def test_stream_numbers_follow_tshark_on_port_reuse(batch_size: int, tmp_path: Path) -> None:
    pcap = tmp_path / "reuse.pcap"
    with open(pcap, "wb") as f:
        w = dpkt.pcap.Writer(f, nano=True)
        for t, b in zip(_REUSE_TS, _REUSE, strict=True):
            w.writepkt(b, t / 1e9)
    out = subprocess.run(
        ["tshark", "-r", str(pcap), "-T", "fields", "-e", "tcp.stream", "-e", "udp.stream"],
        capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    first: dict[tuple[int, int], int] = {}
    for t, line in zip(_REUSE_TS, out, strict=True):
        tcp, udp = line.split("\t")
        first.setdefault((6, int(tcp)) if tcp else (17, int(udp)), t)
    theirs = sorted((p, t, n) for (p, n), t in first.items())
    sn = StreamNumbers()
    decoder = Decoder()
    for batch in FakeSource(list(zip(_REUSE_TS, _REUSE, strict=True)), batch_size=batch_size):
        sn.see(decoder.decode(batch))
    assert sorted(sn.starts()) == theirs
    assert max(n for p, _, n in theirs if p == 6) == 3  # four TCP connections, as tshark says


def test_stream_numbers_of_nothing() -> None:
    sn = StreamNumbers()
    sn.see(Decoder().decode(PacketBatch.from_packets([])))
    assert sn.starts() == []


# --- the instances table's key, and wirepath packets ------------------------------------


def _bridge_run(tmp_path: Path) -> tuple[Path, Path, Path]:
    """The testbed's bridge capture by service, inferred: trace, instances, capture."""
    pcap = ROOT / "samples" / "testbed" / "bridge.pcap"
    trace, inst = tmp_path / "t.parquet", tmp_path / "i.parquet"
    capture.convert_pcaps([pcap], trace, node_by="service", keys=capture.KeyOptions(connections=True))
    infer.infer_nesting(tracefmt.read_trace(trace)).write_instances(inst)
    return trace, inst, pcap


def test_instances_key_finds_each_pairs_messages_without_row_positions(tmp_path: Path) -> None:
    trace_path, inst_path, _ = _bridge_run(tmp_path)
    trace, inst = tracefmt.read_trace(trace_path), infer.read_instances(inst_path)
    assert {"call_id", "return_id", "flow", "stream"} <= set(inst.column_names)
    # The same trace with its rows shuffled: row positions mean nothing, the key still finds them.
    order = np.random.default_rng(5).permutation(trace.num_rows)
    shuffled = tracefmt.sort_trace(trace.take(pa.array(order)))
    rows = shuffled.to_pylist()
    ts = shuffled["timestamp"].cast(pa.int64()).to_pylist()
    for r in inst.slice(0, 60).to_pylist():
        for side, t, want in (("call", "t_call", "call_id"), ("return", "t_return", "return_id")):
            at = pd_ns(r[t])
            hits = [
                k for k, m in enumerate(rows)
                if ts[k] == at and m["op"] == side and m["id"] == r[want] and m["flow"] == r["flow"]
            ]  # fmt: skip
            assert len(hits) == 1
            m = rows[hits[0]]
            assert m["stream"] == r["stream"]
            # The callee as named (a caller may have been given back to its service).
            assert (m["receiver"] if side == "call" else m["sender"]) == r["callee"]


def pd_ns(value: object) -> int:
    """A timestamp from ``to_pylist`` as integer nanoseconds."""
    return int(pa.scalar(value, pa.timestamp("ns", tz="UTC")).cast(pa.int64()).as_py())


def test_old_instances_tables_still_read(tmp_path: Path) -> None:
    trace_path, inst_path, _ = _bridge_run(tmp_path)
    old = infer.read_instances(inst_path).drop_columns(["call_id", "return_id", "flow", "stream"])
    pq.write_table(old, tmp_path / "old.parquet")
    trace = tracefmt.read_trace(trace_path)
    table = infer.read_instances(tmp_path / "old.parquet")
    new = infer.read_instances(inst_path)
    # Without the key, the row positions (checked by time) find the same messages.
    for request in sorted(set(new["instance"].to_pylist()))[:20]:
        got = packets.request_messages(table, trace, request)["row"].to_pylist()
        assert got == packets.request_messages(new, trace, request)["row"].to_pylist()
        assert len(got) == 2 * sum(1 for i in new["instance"].to_pylist() if i == request)


def test_packets_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace, inst, _ = _bridge_run(tmp_path)
    assert main(["packets", str(inst), str(trace), "--request", "99999"]) == 1
    assert "error: no request 99999 in this instances table" in capsys.readouterr().err
    bare = tmp_path / "bare.parquet"
    tracefmt.write_trace(tracefmt.read_trace(trace).drop_columns(list(packets.CONNECTION_COLUMNS)), bare)
    assert main(["packets", str(inst), str(bare), "--request", "0"]) == 1
    err = capsys.readouterr().err
    assert (
        "this trace has no connection columns: convert its capture again with "
        "'wirepath capture pcap CAPTURE --connections --out TRACE'" in err
    )
    assert err.count("\n") == 1
    other = ROOT / "samples" / "testbed" / "db.pcap"
    out = tmp_path / "x.pcap"
    assert (
        main(["packets", str(inst), str(trace), "--request", "0", "--pcap", str(other), "--out", str(out)])
        == 1
    )
    assert "is not this trace's capture" in capsys.readouterr().err
    assert not out.exists()
    assert main(["packets", str(inst), str(trace), "--pattern", "nope"]) == 1
    assert "no request of pattern 'nope'" in capsys.readouterr().err


@needs_tshark
def test_pattern_top_gives_the_slowest_requests_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace, inst_path, _ = _bridge_run(tmp_path)
    inst = infer.read_instances(inst_path)
    pattern = inst["pattern"].cast(pa.string())[0].as_py()
    assert main(["packets", str(inst_path), str(trace), "--pattern", pattern, "--top", "3", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    roots = [r for r in inst.to_pylist() if r["parent"] is None and r["pattern"] == pattern]
    lat = {r["instance"]: pd_ns(r["t_return"]) - pd_ns(r["t_call"]) for r in roots}
    assert doc["requests"] == sorted(lat, key=lambda i: (-lat[i], i))[:3]
    assert len(doc["requests"]) == min(3, len(lat))


# A front and a back service on 127.0.0.1 (keep-alive, a new client connection every 30
# requests, each served by a thread of the front with its own connection to the back),
# recorded on lo in a network namespace by tcpdump.
_SERVICES = """
import http.client, http.server, sys, threading, time
class Back(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        body = b"item" * 50
        if self.path.endswith("7"):
            time.sleep(0.03)
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
local = threading.local()
class Front(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        if not hasattr(local, "conn"):
            local.conn = http.client.HTTPConnection("127.0.0.1", 9090)
        local.conn.request("GET", "/item" + self.path); local.conn.getresponse().read()
        body = b"page"
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
for port, handler in ((9090, Back), (8080, Front)):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
for k in range(int(sys.argv[1])):
    if k % 30 == 0:
        conn = http.client.HTTPConnection("127.0.0.1", 8080)
    conn.request("GET", f"/{k}"); conn.getresponse().read()
    time.sleep(0.002)
"""


@pytest.fixture
def recorded(tmp_path: Path) -> Path:
    """The services above recorded on lo in a fresh network namespace."""
    if os.geteuid() != 0 or shutil.which("tcpdump") is None:
        pytest.skip("needs root and tcpdump (a network namespace, packet capture)")
    ns = f"wpp-{uuid.uuid4().hex[:10]}"
    made = subprocess.run(["ip", "netns", "add", ns], capture_output=True, text=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"cannot make a network namespace: {made.stderr.strip()}")
    pcap = tmp_path / "lo.pcap"
    try:
        subprocess.run(["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"], check=True)
        dump = subprocess.Popen(
            ["ip", "netns", "exec", ns, "tcpdump", "-i", "lo", "-n", "-U", "-w", str(pcap), "tcp"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 10
            while not (pcap.exists() and pcap.stat().st_size > 0) and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.3)
            script = ["ip", "netns", "exec", ns, sys.executable, "-c", _SERVICES, "60"]
            subprocess.run(script, check=True, timeout=60)
            time.sleep(0.5)
        finally:
            dump.send_signal(signal.SIGINT)
            dump.wait(timeout=10)
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)
    return pcap


def _tshark_rows(pcap: Path, display_filter: str | None = None) -> list[dict[str, str]]:
    fields = [
        "frame.number",
        "frame.time_epoch",
        "tcp.stream",
        "tcp.len",
        "http.request.uri",
        "http.response.code",
    ]
    rows = tshark_rows(pcap, display_filter or "frame", *fields)
    return [dict(zip(fields, row, strict=True)) for row in rows]


@needs_tshark
@pytest.mark.needs_root
def test_packets_filter_selects_exactly_the_requests_packets(
    recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace, inst_path = tmp_path / "t.parquet", tmp_path / "i.parquet"
    assert (
        main(["capture", "pcap", str(recorded), "--node-by", "service", "--connections", "--out", str(trace)])
        == 0
    )
    assert (
        main(
            [
                "infer",
                "nesting",
                str(trace),
                "--out",
                str(tmp_path / "p.json"),
                "--instances",
                str(inst_path),
                "--quiet",
            ]
        )
        == 0
    )
    capsys.readouterr()
    inst = infer.read_instances(inst_path)
    # The slowest request of the front's pattern: a page whose item took 30 ms more.
    rows = inst.to_pylist()
    parents = {r["parent"] for r in rows}
    roots = [
        r for r in rows if r["parent"] is None and r["callee"] == "127.0.0.1:8080" and r["pair"] in parents
    ]
    assert len(roots) >= 50
    slow = max(roots, key=lambda r: pd_ns(r["t_return"]) - pd_ns(r["t_call"]))
    request = slow["instance"]
    assert main(["packets", str(inst_path), str(trace), "--request", str(request), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    chosen = _tshark_rows(recorded, doc["filter"])
    every = _tshark_rows(recorded)
    # What the request's messages span, from tshark alone: per connection, from the
    # request's HTTP request to the next request on that connection (or its end).
    uris = {r["http.request.uri"] for r in chosen if r["http.request.uri"]}
    assert len(uris) == 2  # the page and its item
    k = next(u for u in uris if not u.startswith("/item/"))
    assert {k, "/item" + k} == uris
    assert sum(1 for r in chosen if r["http.response.code"] == "200") == 2  # and their responses
    expected = set()
    for stream in {r["tcp.stream"] for r in chosen}:
        rows = [r for r in every if r["tcp.stream"] == stream]
        start = next(i for i, r in enumerate(rows) if r["http.request.uri"] in uris)
        end = next((i for i in range(start + 1, len(rows)) if rows[i]["http.request.uri"]), len(rows))
        expected |= {r["frame.number"] for r in rows[start:end]}
    assert {r["frame.number"] for r in chosen} == expected
    assert len(doc["windows"]) == 2
    assert len(expected) >= 8  # request, ACK, response, ACK per hop
    # --pcap/--out writes exactly those packets.
    out = tmp_path / "slow.pcap"
    assert (
        main(
            [
                "packets",
                str(inst_path),
                str(trace),
                "--request",
                str(request),
                "--pcap",
                str(recorded),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert f"wrote {len(expected)} packets" in capsys.readouterr().out
    written = _tshark_rows(out)
    assert sorted(r["frame.time_epoch"] for r in written) == sorted(r["frame.time_epoch"] for r in chosen)


def test_connection_columns_only_when_asked(tmp_path: Path) -> None:
    pcap = ROOT / "samples" / "testbed" / "bridge.pcap"
    plain, asked = tmp_path / "plain.parquet", tmp_path / "asked.parquet"
    capture.convert_pcaps([pcap], plain)
    capture.convert_pcaps([pcap], asked, keys=capture.KeyOptions(connections=True))
    assert not set(packets.CONNECTION_COLUMNS) & set(tracefmt.read_trace(plain).column_names)
    both = tracefmt.read_trace(asked)
    assert set(packets.CONNECTION_COLUMNS) <= set(both.column_names)
    assert both.drop_columns(list(packets.CONNECTION_COLUMNS)).equals(tracefmt.read_trace(plain))


def test_packets_never_writes_over_an_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace, inst, bridge = _bridge_run(tmp_path)
    pcap = tmp_path / "bridge.pcap"
    shutil.copy(bridge, pcap)
    before = pcap.read_bytes()
    link = tmp_path / "link.pcap"
    link.symlink_to(pcap)
    for out in (pcap, link, trace):
        argv = ["packets", str(inst), str(trace), "--request", "0", "--pcap", str(pcap), "--out", str(out)]
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1
        assert "overwrite an input" in err
    assert pcap.read_bytes() == before
    assert main(["packets", str(inst), str(trace), "--request", "0", "--pcap", str(pcap)]) == 1
    assert "--pcap and --out go together" in capsys.readouterr().err
    assert not [p for p in tmp_path.iterdir() if ".partial" in p.name]

"""The live capture agent: tcpdump's command line and counters, and real recordings in a
private network namespace (root only), stopped by SIGINT, SIGTERM or a duration."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import dpkt
import pyarrow as pa
import pyarrow.compute
import pytest

import capture
import tracefmt
from capture import packet_timestamps
from capture.live import (
    LiveCapture,
    Recording,
    capture_files,
    capture_live,
    parse_tcpdump_stats,
    tcpdump_command,
)
from wirepath.cli import main

ROOT = Path(__file__).resolve().parents[2]
IS_ROOT = os.geteuid() == 0
needs_root = pytest.mark.needs_root
root_only = pytest.mark.skipif(not IS_ROOT, reason="needs root (network namespaces, packet capture)")


# --- without privileges -------------------------------------------------------------------


def test_command_line_options() -> None:
    rec = Recording(snaplen=128, buffer_mb=4, promisc=False)
    cmd = tcpdump_command("br0", "/d/c.pcap", rec, as_root=True)
    assert cmd == [
        "tcpdump",
        "-i",
        "br0",
        "-n",
        "-U",
        "-s",
        "128",
        "-B",
        "4096",
        "-p",
        "-Z",
        "root",
        "-w",
        "/d/c.pcap",
    ]
    assert (
        tcpdump_command("eth0", "c.pcap", Recording(bpf="udp and port 53"), as_root=False)[-1]
        == "udp and port 53"
    )
    assert "--immediate-mode" in tcpdump_command("eth0", "c.pcap", Recording(immediate=True))
    with pytest.raises(tracefmt.ParameterError, match="--snaplen 10 is out of range"):
        Recording(snaplen=10)
    with pytest.raises(tracefmt.ParameterError, match="--rotate-mb 0 must be at least 1"):
        Recording(rotate_mb=0)
    with pytest.raises(tracefmt.ParameterError, match="--buffer-mb 0"):
        Recording(buffer_mb=0)


def test_tcpdump_counters() -> None:
    # tcpdump 4.99's closing lines; libpcap adds "dropped by interface" where the driver counts.
    text = (
        "tcpdump: listening on br0, link-type EN10MB (Ethernet), snapshot length 262144 bytes\n"
        "^C\n1 packet captured\n3 packets received by filter\n2 packets dropped by kernel\n"
        "7 packets dropped by interface\n"
    )
    assert parse_tcpdump_stats(text).to_json() == {
        "captured": 1,
        "received": 3,
        "dropped_kernel": 2,
        "dropped_interface": 7,
    }
    assert parse_tcpdump_stats("").captured == 0
    assert parse_tcpdump_stats("").dropped_kernel is None


def test_rotated_files_in_order(tmp_path: Path) -> None:
    for name in ("c[1].pcap", "c[1].pcap2", "c[1].pcap11", "c[1].pcapx", "c[1].pcap1", "d.pcap"):
        (tmp_path / name).write_bytes(b"")
    assert [p.name for p in capture_files(tmp_path / "c[1].pcap")] == [
        "c[1].pcap",
        "c[1].pcap1",
        "c[1].pcap2",
        "c[1].pcap11",
    ]
    assert capture_files(tmp_path / "none.pcap") == []


def test_unknown_interface_names_the_real_ones(tmp_path: Path) -> None:
    with pytest.raises(tracefmt.ParameterError, match=r"no interface 'nosuch0' here \(interfaces: .*lo"):
        LiveCapture("nosuch0", tmp_path)
    with pytest.raises(tracefmt.ParameterError, match="--duration -1 must be positive"):
        capture_live("lo", tmp_path, duration_s=-1)


def test_bad_names_file_fails_before_recording(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cap"
    args = ["capture", "live", "--iface", "lo", "--duration", "1s", "--out", str(out)]
    assert main([*args, "--names", str(tmp_path / "nope.toml")]) == 1
    assert "nope.toml: no such file" in capsys.readouterr().err
    (tmp_path / "bad.toml").write_text('"10.0.0.0/99" = "lan"\n')
    assert main([*args, "--names", str(tmp_path / "bad.toml")]) == 1
    assert "not a valid CIDR block" in capsys.readouterr().err
    assert not out.exists()


def test_missing_tcpdump(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(tracefmt.MissingToolError, match="apt-get install tcpdump"):
        LiveCapture("lo", tmp_path)


def test_cli_help_lists_the_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["capture", "live", "--help"]) == 0
    out = capsys.readouterr().out
    for option in ("--iface", "--filter", "--duration", "--rotate-mb", "--snaplen", "--names", "--out"):
        assert option in out
    assert "mirrored switch port" in out
    assert main(["capture", "live", "--out", "x"]) == 2


def test_without_privileges_one_clear_error(tmp_path: Path) -> None:
    """As an unprivileged user (root drops to nobody with setpriv), capture fails with one line."""
    cmd = [sys.executable, "-m", "wirepath", "capture", "live", "--iface", "lo", "--duration", "1s"]
    cmd += ["--out", str(tmp_path / "cap")]
    # The check comes before any file is written: the directory stays untouched.
    if IS_ROOT:
        if shutil.which("setpriv") is None:
            pytest.skip("needs setpriv (util-linux) to drop privileges")
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", *cmd]
    elif _has_net_raw():
        pytest.skip("this user may capture (CAP_NET_RAW)")
    run = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert run.returncode == 1, run.stderr
    assert not (tmp_path / "cap").exists()
    assert run.stderr.strip().splitlines() == [
        "error: live capture needs root or CAP_NET_RAW: run it with sudo, or grant the capability to "
        "tcpdump once (sudo setcap cap_net_raw,cap_net_admin=eip $(command -v tcpdump))"
    ]


def _has_net_raw() -> bool:
    import socket

    try:
        socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0).close()
    except PermissionError:
        return False
    return True


# --- real recordings in a private network namespace (root) --------------------------------


@pytest.fixture
def netns() -> Iterator[str]:
    """A fresh network namespace whose loopback nobody else uses."""
    if not IS_ROOT:
        pytest.skip("needs root (network namespaces, packet capture)")
    name = f"wpl-{uuid.uuid4().hex[:10]}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True, check=False)
    if made.returncode != 0 and "not permitted" in made.stderr.lower():
        pytest.skip(f"root, but this container may not make network namespaces: {made.stderr.strip()}")
    assert made.returncode == 0, made.stderr
    try:
        subprocess.run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


class Agent:
    """``wirepath capture live`` running in a namespace, as a user would start it."""

    def __init__(self, ns: str, out: Path, *extra: str, iface: str = "lo") -> None:
        cmd = ["ip", "netns", "exec", ns, sys.executable, "-m", "wirepath", "capture", "live"]
        cmd += ["--iface", iface, "--out", str(out), "--json", *extra]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.err: list[str] = []
        self.ready = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        if not self.ready.wait(30):
            self.proc.kill()
            raise AssertionError(f"the agent did not start: {self.err}")

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.err.append(line)
            if line.startswith("recording "):
                self.ready.set()
        self.ready.set()

    def stop(self, sig: int | None) -> tuple[int, dict]:
        if sig is not None:
            self.proc.send_signal(sig)
        # Not communicate(): the reader thread owns stderr.
        assert self.proc.stdout is not None
        out = self.proc.stdout.read()
        self.proc.stdout.close()
        self.proc.wait(120)
        self.reader.join(5)
        assert self.proc.stderr is not None
        self.proc.stderr.close()
        return self.proc.returncode, json.loads(out) if out.strip() else {}


_UDP_SENDER = """
import socket, sys
n = int(sys.argv[1])
rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); rx.bind(("127.0.0.1", 9999))
rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 24)
tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for k in range(n):
    tx.sendto(b"wirepath-live %08d " % k + b"x" * 80, ("127.0.0.1", 9999))
"""

_HTTP_LOAD = """
import http.client, http.server, sys, threading
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    def do_GET(self):
        body = b"ok " + self.path.encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 8080), H)
threading.Thread(target=srv.serve_forever, daemon=True).start()
conn = http.client.HTTPConnection("127.0.0.1", 8080)
for k in range(int(sys.argv[1])):
    conn.request("GET", f"/item/{k}"); conn.getresponse().read()
conn.close(); srv.shutdown()
"""


def _in_ns(ns: str, script: str, *args: str) -> None:
    subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", script, *args], check=True, timeout=120)


def _udp_payload_numbers(files: list[str]) -> list[int]:
    seen = []
    for f in files:
        with open(f, "rb") as fh:
            for _, buf in dpkt.pcap.Reader(fh):
                payload = bytes(dpkt.ethernet.Ethernet(buf).data.data.data)
                if payload.startswith(b"wirepath-live "):
                    seen.append(int(payload.split()[1]))
    return seen


@needs_root
@root_only
def test_sigint_writes_every_packet_in_rotated_files(netns: str, tmp_path: Path) -> None:
    n = 20_000  # ~3.2 MB of records: four files at --rotate-mb 1
    agent = Agent(netns, tmp_path / "cap", "--rotate-mb", "1")
    _in_ns(netns, _UDP_SENDER, str(n))
    code, doc = agent.stop(signal.SIGINT)
    assert code == 0, agent.err
    files = doc["files"]
    assert len(files) >= 4
    assert [Path(f).name for f in files] == [p.name for p in capture_files(files[0])]
    # Every datagram is in the files, once, in order, and tcpdump's counters agree.
    assert _udp_payload_numbers(files) == list(range(n))
    assert doc["packets"]["captured"] == n
    assert doc["packets"]["dropped_kernel"] == 0
    assert doc["stopped_by"] == "signal"
    # Each file is whole: independent readers (tcpdump itself) read every one to the end.
    for f in files:
        run = subprocess.run(["tcpdump", "-nr", f, "-c", "1"], capture_output=True, text=True, check=False)
        assert run.returncode == 0, run.stderr
    # ... and in the trace, one send per datagram.
    trace = tracefmt.read_trace(doc["trace"])
    assert trace.num_rows == n
    assert set(trace["op"].to_pylist()) == {"send"}
    assert doc["conversion"]["messages"] == n
    # The recording's counters are kept with the trace and beside it.
    live = tracefmt.read_trace_metadata(doc["trace"]).provenance["live"]
    # (On loopback the kernel hands each packet over twice, leaving and arriving; libpcap
    # keeps one, so "received by filter" counts 2n there.)
    assert live["packets"] == {
        "captured": n,
        "received": 2 * n,
        "dropped_kernel": 0,
        "dropped_interface": None,
    }
    assert live["files"] == files
    assert json.loads((tmp_path / "cap" / "live.json").read_text()) == doc


@needs_root
@root_only
def test_sigterm_keeps_the_http_calls_and_returns(netns: str, tmp_path: Path) -> None:
    n = 100
    agent = Agent(netns, tmp_path / "cap", "--node-by", "service")
    _in_ns(netns, _HTTP_LOAD, str(n))
    code, doc = agent.stop(signal.SIGTERM)
    assert code == 0, agent.err
    (pcap,) = doc["files"]
    # Wireshark's HTTP dissector finds every request and response in the file.
    out = subprocess.run(
        [
            "tshark",
            "-n",
            "-r",
            pcap,
            "-Y",
            "http",
            "-T",
            "fields",
            "-e",
            "http.request",
            "-e",
            "http.response",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    kinds = [line.split("\t") for line in out.splitlines()]
    assert sum(k[0] == "1" for k in kinds) == sum(k[1] == "1" for k in kinds) == n
    trace = tracefmt.read_trace(doc["trace"])
    ops = trace["op"].to_pylist()
    assert ops.count("call") == ops.count("return") == n
    # Servers named by service (address:port), as asked.
    calls = trace.filter(tracefmt.op_codes(trace) == tracefmt.OP_CALL)
    assert set(calls["receiver"].to_pylist()) == {"127.0.0.1:8080"}
    assert set(trace["label"].to_pylist()) == {f"GET /item/{k}" for k in range(n)}


@needs_root
@root_only
def test_duration_filter_and_progress(tmp_path: Path) -> None:
    """In-process on the host's loopback: a filter on a port of our own keeps others' traffic out."""
    import socket

    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    port = rx.getsockname()[1]
    seen: list[tuple[int, int]] = []

    def send(cap: LiveCapture) -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
            for k in range(100):
                tx.sendto(b"wirepath-live %08d " % k, ("127.0.0.1", port))

    try:
        report = capture_live(
            "lo",
            tmp_path,
            Recording(bpf=f"udp port {port}"),
            duration_s=1.6,
            convert=False,
            on_ready=send,
            on_progress=lambda files, size: seen.append((files, size)),
        )
    finally:
        rx.close()
    assert report.stopped_by == "duration"
    assert 1.6 <= report.duration_s < 10
    assert report.trace is None
    assert report.stats.captured == 100
    assert sorted(_udp_payload_numbers(report.files)) == list(range(100))
    # Progress saw the file as it is on disk: its pcap header, then the records.
    assert seen
    assert seen[-1][0] == 1
    assert seen[-1][1] == Path(report.files[0]).stat().st_size == 24 + 100 * (16 + 14 + 20 + 8 + 23)


@needs_root
@root_only
def test_interrupted_conversion_keeps_the_recording(tmp_path: Path) -> None:
    """Ctrl-C after the recording (the CLI raises KeyboardInterrupt then): no trace, files kept."""

    def interrupt(report: object) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        capture_live("lo", tmp_path, Recording(bpf="udp port 9"), duration_s=0.5, on_recorded=interrupt)
    live = json.loads((tmp_path / "live.json").read_text())
    assert live["trace"] is None
    assert [Path(f).exists() for f in live["files"]] == [True]
    assert not (tmp_path / "trace.parquet").exists()


@needs_root
@root_only
def test_bad_filter_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(tracefmt.ParameterError, match="'tcp port nope' is not a valid capture filter"):
        capture_live("lo", tmp_path, Recording(bpf="tcp port nope"), duration_s=1)


@needs_root
@root_only
def test_interface_gone_keeps_the_files_and_says_why(netns: str, tmp_path: Path) -> None:
    subprocess.run(["ip", "-n", netns, "link", "add", "d0", "type", "veth", "peer", "name", "d1"], check=True)
    for dev in ("d0", "d1"):
        subprocess.run(["ip", "-n", netns, "link", "set", dev, "up"], check=True)
    agent = Agent(netns, tmp_path / "cap", iface="d0")
    subprocess.run(["ip", "-n", netns, "link", "del", "d1"], check=True)  # takes d0 with it
    code, doc = agent.stop(None)
    assert code == 1
    assert doc["stopped_by"] == "tcpdump"
    assert "disappeared" in doc["recorder_error"] or "went down" in doc["recorder_error"]
    assert "error: tcpdump stopped on its own: " in "".join(agent.err)
    # What was recorded up to then is kept and converted.
    assert len(doc["files"]) == 1
    assert Path(doc["trace"]).exists()


@needs_root
@root_only
def test_cap_net_raw_without_root_is_enough(netns: str) -> None:
    """An unprivileged user holding only CAP_NET_RAW (and NET_ADMIN for promiscuous mode) records."""
    if shutil.which("setpriv") is None:
        pytest.skip("needs setpriv (util-linux)")
    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        os.chmod(d, 0o777)  # nobody writes the capture there
        caps = "+net_raw,+net_admin"
        cmd = ["ip", "netns", "exec", netns, "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        cmd += [f"--inh-caps={caps}", f"--ambient-caps={caps}", sys.executable, "-m", "wirepath"]
        cmd += ["capture", "live", "--iface", "lo", "--duration", "1s", "--out", f"{d}/cap", "--json"]
        run = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert run.returncode == 0, run.stderr
        doc = json.loads(run.stdout)
        (pcap,) = doc["files"]
        assert Path(pcap).stat().st_uid == 65534
        assert len(packet_timestamps(pcap)) == doc["packets"]["captured"]


_HTTP_SHORT = """
import http.client, http.server, sys, threading, time
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        body = b"ok " + self.path.encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 8080), H)
threading.Thread(target=srv.serve_forever, daemon=True).start()
n, until = int(sys.argv[1]), sys.argv[2]
for k in range(n):  # one connection per request, closed at once: each is final right away
    conn = http.client.HTTPConnection("127.0.0.1", 8080)
    conn.request("GET", f"/item/{k}"); conn.getresponse().read(); conn.close()
    time.sleep(0.002)
open(until, "w").close()
while True:  # serve until the test has looked at the parts
    time.sleep(0.1)
"""


def _no_partial_files(directory: Path) -> None:
    left = [p.name for p in directory.rglob("*") if p.name.endswith(".partial")]
    assert left == []


@needs_root
@root_only
def test_parts_are_readable_while_recording_and_sigterm_publishes_all(netns: str, tmp_path: Path) -> None:
    import pyarrow.dataset as pads

    n = 400
    out = tmp_path / "cap"
    agent = Agent(netns, out, "--node-by", "service")
    sent = tmp_path / "sent"
    load = subprocess.Popen(
        ["ip", "netns", "exec", netns, sys.executable, "-c", _HTTP_SHORT, str(n), str(sent)]
    )
    try:
        deadline = time.monotonic() + 60
        while not sent.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        # Still recording: the parts written so far are a dataset any Parquet reader opens.
        seen = 0
        while time.monotonic() < deadline:
            parts = sorted((out / "trace").glob("part-*.parquet"))
            seen = pads.dataset(out / "trace", format="parquet").count_rows() if parts else 0
            if seen:
                break
            time.sleep(0.2)
        assert seen > 0
        assert agent.proc.poll() is None
        first = tracefmt.read_trace(sorted((out / "trace").glob("part-*.parquet"))[0])
        assert set(first["op"].to_pylist()) <= {"call", "return"}
        code, doc = agent.stop(signal.SIGTERM)
    finally:
        load.kill()
        load.wait()
    assert code == 0, agent.err
    assert doc["stopped_by"] == "signal"
    trace = tracefmt.read_trace(doc["trace"])
    ops = trace["op"].to_pylist()
    assert ops.count("call") == ops.count("return") == n
    assert doc["conversion"]["messages"] == trace.num_rows
    # The parts hold the same messages, in the same (time) order.
    dataset = pads.dataset(doc["parts"], format="parquet").to_table()
    assert dataset["timestamp"].to_pylist() == trace["timestamp"].to_pylist()
    assert dataset["label"].to_pylist() == trace["label"].to_pylist()
    assert trace["timestamp"].to_pylist() == sorted(trace["timestamp"].to_pylist())
    assert tracefmt.read_trace_metadata(doc["trace"]).provenance["live"]["stopped_by"] == "signal"
    _no_partial_files(out)


@needs_root
@root_only
def test_a_connection_spanning_rotated_files_is_one_connection(netns: str, tmp_path: Path) -> None:
    n = 4000  # one keep-alive connection, ~2.5 MB of records: three files at --rotate-mb 1
    agent = Agent(netns, tmp_path / "cap", "--rotate-mb", "1", "--node-by", "service")
    _in_ns(netns, _HTTP_LOAD, str(n))
    code, doc = agent.stop(signal.SIGINT)
    assert code == 0, agent.err
    files = doc["files"]
    with_http = [f for f in files if any(_tcp_ports(f) & {8080})]
    assert len(with_http) >= 2
    trace = tracefmt.read_trace(doc["trace"])
    http = trace.filter(pa.compute.equal(trace["proto"].cast(pa.string()), "http"))
    ops = http["op"].to_pylist()
    assert ops.count("call") == ops.count("return") == n
    assert len(set(http["flow"].to_pylist())) == 1
    assert doc["conversion"]["connections"] == 1
    assert set(http["label"].to_pylist()) == {f"GET /item/{k}" for k in range(n)}
    # Converting the rotated files afterwards gives the very same trace.
    again = tmp_path / "again.parquet"
    capture.convert_pcaps(files, again, node_by="service")
    assert tracefmt.read_trace(again).to_pylist() == trace.to_pylist()
    _no_partial_files(tmp_path / "cap")


def _tcp_ports(pcap: str) -> set[int]:
    ports = set()
    with open(pcap, "rb") as fh:
        for _, buf in dpkt.pcap.Reader(fh):
            ip = dpkt.ethernet.Ethernet(buf).data
            if isinstance(ip, dpkt.ip.IP) and isinstance(ip.data, dpkt.tcp.TCP):
                ports |= {ip.data.sport, ip.data.dport}
    return ports


_ONE_HOST = """
import http.client, http.server, sys, threading, time
SLOW = len(sys.argv) > 2 and sys.argv[2] == "slow"
class Back(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        body = b"item"
        if SLOW and self.path.endswith("3"):
            time.sleep(0.040)  # the slow run: one item in ten takes 40 ms more
        # One item in ten is unavailable: a server error the trace must carry.
        self.send_response(503 if self.path.endswith("0") else 200)
        self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
local = threading.local()
class Front(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        # The front's own keep-alive connection to the back, one per front thread.
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
conn = http.client.HTTPConnection("127.0.0.1", 8080)
for k in range(int(sys.argv[1])):
    conn.request("GET", f"/{k}"); conn.getresponse().read()
"""


@needs_root
@root_only
def test_services_on_one_host_nest_by_service(netns: str, tmp_path: Path) -> None:
    """A front and a back service on 127.0.0.1, recorded on lo by service: the front's
    calls leave from 127.0.0.1 on an ephemeral port, and nesting gives them back to the
    front, so every request is client -> front -> back."""
    n = 200
    agent = Agent(netns, tmp_path / "cap", "--node-by", "service")
    _in_ns(netns, _ONE_HOST, str(n))
    code, doc = agent.stop(signal.SIGINT)
    assert code == 0, agent.err
    paths = tmp_path / "p.json"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "wirepath",
            "infer",
            "nesting",
            doc["trace"],
            "--out",
            str(paths),
            "--show",
            "1",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert "127.0.0.1 -> 127.0.0.1:8080 (1 connection)" in run.stdout
    top = json.loads(paths.read_text())["patterns"][0]
    assert (top["root"]["caller"], top["root"]["node"]) == ("127.0.0.1", "127.0.0.1:8080")
    assert [(c["caller"], c["node"]) for c in top["root"]["children"]] == [
        ("127.0.0.1:8080", "127.0.0.1:9090")
    ]
    assert top["count"] >= 0.95 * n
    # Operations and statuses: /0, /10, ... (20 of 200) got a 503 from the back.
    root, back = top["root"], top["root"]["children"][0]
    assert root["ops"] == [{"op": "GET /:id", "share": 1.0}]
    assert back["ops"] == [{"op": "GET /item/:id", "share": 1.0}]
    assert "errors" not in root
    assert back["errors"] == pytest.approx(0.1, abs=0.01)
    assert {s["status"] for s in back["status"]} == {"200", "503"}
    assert "[GET /item/:id]  errors 10" in run.stdout
    # Named by address (the default), one host is one node: the conversion says what to do.
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "wirepath",
            "capture",
            "pcap",
            *doc["files"],
            "--out",
            str(tmp_path / "a.parquet"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert (
        "note: every message is between 127.0.0.1 and itself: services on one host differ by port, so "
        in run.stdout
    )
    assert "convert with --node-by service" in run.stdout


def test_loopback_counts_are_explained() -> None:
    """tcpdump on lo: 'received by filter' is twice the packets recorded; the summary says why."""
    from capture.live import LiveReport, LiveStats
    from wirepath.cli_live import _summary

    stats = LiveStats(captured=10_195, received=20_396, dropped_kernel=0)
    text = _summary(LiveReport("lo", ["c.pcap"], stats, "2026-12-07T00:00:00Z", 5.0, "signal"))
    assert "received by filter 20,396" in text
    assert "on lo the kernel hands the capture every packet twice" in text
    assert "twice" not in _summary(
        LiveReport("eth0", ["c.pcap"], stats, "2026-12-07T00:00:00Z", 5.0, "signal")
    )


def _record_and_infer(netns: str, out: Path, *extra: str) -> tuple[Path, Path]:
    """One run of the one-host services recorded on lo by service and inferred: its
    paths file and instances table."""
    agent = Agent(netns, out / "cap", "--node-by", "service")
    _in_ns(netns, _ONE_HOST, "200", *extra)
    code, doc = agent.stop(signal.SIGINT)
    assert code == 0, agent.err
    paths, inst = out / "p.json", out / "i.parquet"
    argv = [sys.executable, "-m", "wirepath", "infer", "nesting", doc["trace"], "--out", str(paths)]
    run = subprocess.run(
        [*argv, "--instances", str(inst)], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert run.returncode == 0, run.stderr
    return paths, inst


@needs_root
@root_only
def test_your_own_services_the_slowed_endpoint_is_named_with_its_size(
    netns: str, tmp_path: Path, open_page
) -> None:
    """The README's "your own services": two recordings of services on one host, the
    second with one item in ten 40 ms slower at the back; viz diff names the endpoint,
    the delay and the share of requests it hit, with no manual step."""
    runs = {}
    for name in ("base", "slow"):
        (tmp_path / name).mkdir()
        runs[name] = _record_and_infer(netns, tmp_path / name, *(["slow"] if name == "slow" else []))
    (bp, bi), (sp, si) = runs["base"], runs["slow"]
    argv = [
        sys.executable,
        "-m",
        "wirepath",
        "viz",
        "diff",
        str(bp),
        str(sp),
        "--out",
        str(tmp_path / "d.svg"),
    ]
    run = subprocess.run(
        [*argv, "--instances", str(bi), str(si)], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert run.returncode == 0, run.stderr
    sentence = run.stdout.splitlines()[0]
    m = re.fullmatch(
        r"127\.0\.0\.1:8080 -> 127\.0\.0\.1:9090 \(GET /item/:id\): \+([\d.]+) ms in (\d+) of (\d+) requests "
        r"\((\d+)% of the (\d+) that pass there\)",
        sentence,
    )
    assert m, sentence
    assert float(m[1]) == pytest.approx(40, rel=0.1)  # within 10% of the injected delay
    assert int(m[2]) == pytest.approx(20, abs=2)  # /3, /13, ... /193: 20 of 200
    assert int(m[4]) == pytest.approx(10, abs=1)
    # The report says the same, read in a real browser (its screenshot stays in tmp_path).
    report = tmp_path / "report.html"
    argv = [sys.executable, "-m", "wirepath", "report", str(sp), "--diff", str(bp), "--out", str(report)]
    argv += ["--instances", str(si), "--diff-instances", str(bi)]
    made = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert made.returncode == 0, made.stderr
    page = open_page(report)
    shown = page.driver.find_element("css selector", "p.sentence").text
    endpoint = r"127\.0\.0\.1:8080 -> 127\.0\.0\.1:9090 \(GET /item/:id\)"
    m = re.match(endpoint + r": \+([\d.]+) ms in (\d+) of", shown)
    assert m, shown
    assert float(m[1]) == pytest.approx(40, rel=0.1)
    assert int(m[2]) == pytest.approx(20, abs=2)
    assert page.console_errors() == []
    assert page.screenshot(tmp_path / "report.png").stat().st_size > 20_000

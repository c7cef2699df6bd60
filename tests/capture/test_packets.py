"""From a message back to its packets: the connection columns against tshark, the
instances table's key to a request's messages, and ``wirepath packets`` on a real capture."""

from __future__ import annotations

import collections
import shutil
import subprocess
from pathlib import Path

import dpkt
import pyarrow as pa
import pytest

import capture
import tracefmt
from capture.decode import Decoder
from capture.source import FakeSource, PacketBatch
from capture.streams import StreamNumbers

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
    cmd = ["tshark", "-r", str(path), "-T", "fields", "-E", "occurrence=l"]
    for f in _FIELDS:
        cmd += ["-e", f]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    got: dict[tuple, set[tuple[str, int]]] = collections.defaultdict(set)
    for line in out.splitlines():
        f = line.split("\t")
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
    capture.convert_pcaps([path], out, chunk_bytes=chunk_bytes)
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

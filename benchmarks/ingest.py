"""Ingest speed: wirepath end to end (pcap -> Parquet trace) against other packet readers.

Generates a capture of many short HTTP/1.1 keep-alive conversations (handshake, a few
request/response/ACK exchanges, FIN/FIN/ACK) and measures, in one run and each in its
own process (for a clean peak RSS):

- ``wirepath``: ``capture.convert_pcaps`` from the file to a Parquet trace (reading,
  decoding, TCP reassembly, HTTP parsing, naming, writing);
- ``dpkt``: a decode loop (``dpkt.pcap.Reader`` + Ethernet/IP/TCP objects, touching the
  ports, sequence number and payload length), no reassembly;
- ``tshark``: ``tshark -r FILE -T fields -e frame.time_epoch -e ip.src -e ip.dst
  -e tcp.srcport -e tcp.dstport -e tcp.seq -e tcp.len`` to /dev/null;
- ``scapy``: ``scapy.utils.PcapReader`` over the file (scapy's parsed packets).

The slower baselines read a prefix of the capture (``--baseline-packets``) so the run
stays short; their rates are packets/s over what they read. wirepath is also run on
captures of 1/4 and 2x the size, to show how its peak RSS behaves as the file grows.

    .venv/bin/python benchmarks/ingest.py --packets 1000000
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_MAC = b"\x02\x00\x00\x00\x00\x01\x02\x00\x00\x00\x00\x02\x08\x00"
_REQ = b"GET /api/item/%05d HTTP/1.1\r\nHost: shop\r\nUser-Agent: bench\r\n\r\n"
_RESP = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 24\r\n\r\nthe quick brown fox jump"


def _frame(src: int, dst: int, sport: int, dport: int, seq: int, ack: int, flags: int, data: bytes) -> bytes:
    tcp = struct.pack(
        ">HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, 0x50, flags, 65535, 0, 0
    )
    ip = struct.pack(">BBHHHBBHII", 0x45, 0, 40 + len(data), 0, 0x4000, 64, 6, 0, src, dst)
    return _MAC + ip + tcp + data


def write_capture(
    path: Path, packets: int, *, requests: int = 5, clients: int = 200, servers: int = 8
) -> int:
    """Write a pcap of HTTP keep-alive conversations; returns the packets written."""
    per_conv = 3 + 3 * requests + 3
    convs = max(1, packets // per_conv)
    out = open(path, "wb")  # noqa: SIM115 - closed below
    out.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, 1))
    t = 1_700_000_000_000_000_000
    n = 0
    rec = struct.Struct("<IIII")
    buf: list[bytes] = []
    for c in range(convs):
        cli = 0x0A000000 | (1 << 8) | (c % clients)
        srv = 0x0A000000 | (2 << 8) | (c % servers)
        sp, dp = 1024 + (c * 7) % 60000, 8080
        cs, ss = (c * 2654435761) & 0xFFFFFFFF, (c * 40503) & 0xFFFFFFFF
        pk = [
            _frame(cli, srv, sp, dp, cs, 0, 0x02, b""),
            _frame(srv, cli, dp, sp, ss, cs + 1, 0x12, b""),
            _frame(cli, srv, sp, dp, cs + 1, ss + 1, 0x10, b""),
        ]
        cs += 1
        ss += 1
        for r in range(requests):
            req = _REQ % ((c * requests + r) % 100000)
            pk.append(_frame(cli, srv, sp, dp, cs, ss, 0x18, req))
            cs += len(req)
            pk.append(_frame(srv, cli, dp, sp, ss, cs, 0x18, _RESP))
            ss += len(_RESP)
            pk.append(_frame(cli, srv, sp, dp, cs, ss, 0x10, b""))
        pk += [
            _frame(cli, srv, sp, dp, cs, ss, 0x11, b""),
            _frame(srv, cli, dp, sp, ss, cs + 1, 0x11, b""),
            _frame(cli, srv, sp, dp, cs + 1, ss + 1, 0x10, b""),
        ]
        for f in pk:
            t += 7_000  # 7 us apart: many conversations overlap in time
            sec, ns = divmod(t, 1_000_000_000)
            buf.append(rec.pack(sec, ns, len(f), len(f)))
            buf.append(f)
        n += len(pk)
        if len(buf) > 20000:
            out.write(b"".join(buf))
            buf = []
    out.write(b"".join(buf))
    out.close()
    return n


_RUNNERS = {
    "wirepath": """
import capture, sys
r = capture.convert_pcaps([sys.argv[1]], sys.argv[2])
print(r.packets, r.messages)
""",
    "dpkt": """
import dpkt, sys
n = 0
limit = int(sys.argv[3])
with open(sys.argv[1], "rb") as f:
    for ts, buf in dpkt.pcap.UniversalReader(f):
        eth = dpkt.ethernet.Ethernet(buf)
        ip = eth.data
        tcp = ip.data
        _ = (ip.src, ip.dst, tcp.sport, tcp.dport, tcp.seq, len(tcp.data))
        n += 1
        if n >= limit:
            break
print(n, 0)
""",
    "scapy": """
import sys
from scapy.utils import PcapReader
n = 0
limit = int(sys.argv[3])
for p in PcapReader(sys.argv[1]):
    _ = p.time
    n += 1
    if n >= limit:
        break
print(n, 0)
""",
}


def _run_python(name: str, pcap: Path, out: Path, limit: int) -> dict:
    code = (
        # Imports (pyarrow's take about half a second) are not timed, for any tool.
        "import resource, time, sys\nimport capture, dpkt, scapy.utils\n"
        "t0 = time.perf_counter()\nc0 = time.process_time()\n"
        + _RUNNERS[name]
        + "\nru = resource.getrusage(resource.RUSAGE_SELF)\n"
        "print(time.perf_counter() - t0, ru.ru_maxrss, time.process_time() - c0)\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, str(pcap), str(out), str(limit)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    lines = res.stdout.split("\n")
    packets, messages = (int(x) for x in lines[0].split())
    seconds, rss_kb, cpu = lines[1].split()
    return {
        "packets": packets,
        "messages": messages,
        "seconds": float(seconds),
        "cpu_seconds": float(cpu),
        "peak_rss_mb": int(rss_kb) / 1024,
    }


def _run_tshark(pcap: Path, limit: int) -> dict:
    fields = ["frame.time_epoch", "ip.src", "ip.dst", "tcp.srcport", "tcp.dstport", "tcp.seq", "tcp.len"]
    cmd = ["tshark", "-r", str(pcap), "-c", str(limit), "-T", "fields"]
    for f in fields:
        cmd += ["-e", f]
    code = (
        "import resource, subprocess, sys, time\nt0 = time.perf_counter()\n"
        f"subprocess.run({cmd!r}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)\n"
        "ru = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(time.perf_counter() - t0, ru.ru_maxrss, ru.ru_utime + ru.ru_stime)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    seconds, rss_kb, cpu = res.stdout.split()
    return {
        "packets": limit,
        "messages": 0,
        "seconds": float(seconds),
        "cpu_seconds": float(cpu),
        "peak_rss_mb": int(rss_kb) / 1024,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--packets", type=int, default=1_000_000, help="packets in the generated capture")
    ap.add_argument("--baseline-packets", type=int, default=200_000, help="packets read by dpkt/tshark/scapy")
    ap.add_argument("--skip", nargs="*", default=[], help="baselines to skip (dpkt, tshark, scapy)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="wirepath-bench-") as tmp:
        sizes = [args.packets // 4, args.packets, 2 * args.packets]
        files = {}
        for size in sizes:
            p = Path(tmp) / f"http_{size}.pcap"
            files[size] = (p, write_capture(p, size))
        big, n_big = files[args.packets]  # the baselines read the N-packet capture
        mb = os.path.getsize(big) / 1e6
        print(f"capture: {n_big:,} packets, {mb:.0f} MB of HTTP keep-alive conversations", flush=True)
        for size in sizes:
            p, n = files[size]
            r = _run_python("wirepath", p, Path(tmp) / "t.parquet", n)
            rows.append({"tool": "wirepath (pcap -> Parquet trace)", **r})
        limit = min(args.baseline_packets, n_big)
        if "dpkt" not in args.skip:
            rows.append({"tool": "dpkt decode loop", **_run_python("dpkt", big, Path(tmp) / "x", limit)})
        if "tshark" not in args.skip:
            rows.append({"tool": "tshark -T fields", **_run_tshark(big, limit)})
        if "scapy" not in args.skip:
            rows.append({"tool": "scapy PcapReader", **_run_python("scapy", big, Path(tmp) / "x", limit)})
    for r in rows:
        r["packets_per_s"] = r["packets"] / r["seconds"] if r["seconds"] else 0.0
        r["packets_per_cpu_s"] = r["packets"] / r["cpu_seconds"] if r["cpu_seconds"] else 0.0
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(
        f"{'tool':34} {'packets':>10} {'messages':>9} {'wall s':>7} {'CPU s':>7} "
        f"{'packets/s':>10} {'pkts/CPU-s':>10} {'peak RSS':>8}"
    )
    for r in rows:
        print(
            f"{r['tool']:34} {r['packets']:>10,} {r['messages']:>9,} {r['seconds']:>7.2f} "
            f"{r['cpu_seconds']:>7.2f} {r['packets_per_s']:>10,.0f} {r['packets_per_cpu_s']:>10,.0f} "
            f"{r['peak_rss_mb']:>6.0f}MB"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

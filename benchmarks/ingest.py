"""Ingest speed: wirepath end to end (pcap -> Parquet trace) against other packet readers.

Two workloads, each at the sizes given by ``--packets`` (1 M and 2 M by default):

- ``keep-alive``: short HTTP/1.1 keep-alive conversations (handshake, 5 x
  request/response/ACK, FIN/FIN/ACK; 200 clients, 8 servers, 7 us between packets);
- ``short``: one call per TCP connection, as ``wirepath synth --pcap`` renders the
  multitier workload (handshake, request, response, ACK, FIN/FIN/ACK).

Every tool runs in its own process and is measured whole, from process start
(interpreter, imports) to exit: wall time, CPU time (user + system) and peak RSS.

- ``wirepath``: ``python -c "import capture; capture.convert_pcaps(...)"`` (reading,
  decoding, TCP reassembly, HTTP parsing, naming, writing); ``wirepath CLI`` is
  ``wirepath capture pcap`` as a user types it; ``wirepath before`` the same runner on
  another copy of the tree (``--before DIR``), for before/after in one run;
- ``dpkt``: a decode loop (``dpkt.pcap.UniversalReader`` + Ethernet/IP/TCP objects,
  touching the ports, sequence number and payload length), no reassembly;
- ``tshark``: ``tshark -r FILE -T fields -e frame.time_epoch -e ip.src -e ip.dst
  -e tcp.srcport -e tcp.dstport -e tcp.seq -e tcp.len`` to /dev/null;
- ``scapy``: ``scapy.utils.PcapReader`` over the file.

``--keys`` measures what reading request keys costs (``capture.request_keys``): the
keep-alive workload with a ``traceparent`` and an ``X-Request-ID`` on every request
(unique per request), converted by the library with key reading on (the default) and off
(``keys=None``), alternately, ``--repeat`` times each; it prints both and their ratio.

The baselines read the first ``--baseline-packets`` of the first size's capture; the
ratios (``x dpkt``, ``x tshark``) compare packets per CPU-second within one workload of
one run. ``--memory-packets`` also converts a keep-alive capture that big, for peak RSS.

    .venv/bin/python benchmarks/ingest.py --skip scapy --repeat 3 --memory-packets 10000000
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from capture.frames import tcp_frame

ROOT = Path(__file__).resolve().parents[1]

_REQ = b"GET /api/item/%05d HTTP/1.1\r\nHost: shop\r\nUser-Agent: bench\r\n\r\n"
# The same request with a W3C trace context and a request id (unique per request).
_REQ_KEYS = (
    b"GET /api/item/%05d HTTP/1.1\r\nHost: shop\r\nUser-Agent: bench\r\n"
    b"traceparent: 00-%032x-%016x-01\r\nX-Request-ID: %036x\r\n\r\n"
)
_RESP = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 24\r\n\r\nthe quick brown fox jump"


def write_capture(
    path: Path, packets: int, *, requests: int = 5, clients: int = 200, servers: int = 8, keys: bool = False
) -> int:
    """Write a pcap of HTTP keep-alive conversations (with ``keys``, every request carries a
    traceparent and an X-Request-ID); returns the packets written."""
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
            tcp_frame(cli, srv, sp, dp, cs, 0, 0x02, b""),
            tcp_frame(srv, cli, dp, sp, ss, cs + 1, 0x12, b""),
            tcp_frame(cli, srv, sp, dp, cs + 1, ss + 1, 0x10, b""),
        ]
        cs += 1
        ss += 1
        for r in range(requests):
            k = c * requests + r
            if keys:  # ids that look random, as real ones do (they compress as badly)
                h = ((k + 1) * 0x9E3779B97F4A7C15F39CC0605CEDC835) % (1 << 128)
                req = _REQ_KEYS % (k % 100000, h, h >> 64, h ^ 0x5BD1E995)
            else:
                req = _REQ % (k % 100000)
            pk.append(tcp_frame(cli, srv, sp, dp, cs, ss, 0x18, req))
            cs += len(req)
            pk.append(tcp_frame(srv, cli, dp, sp, ss, cs, 0x18, _RESP))
            ss += len(_RESP)
            pk.append(tcp_frame(cli, srv, sp, dp, cs, ss, 0x10, b""))
        pk += [
            tcp_frame(cli, srv, sp, dp, cs, ss, 0x11, b""),
            tcp_frame(srv, cli, dp, sp, ss, cs + 1, 0x11, b""),
            tcp_frame(cli, srv, sp, dp, cs + 1, ss + 1, 0x10, b""),
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
import sys
import capture
r = capture.convert_pcaps([sys.argv[1]], sys.argv[2])
print(r.packets, r.messages)
""",
    "wirepath keys off": """
import sys
import capture
r = capture.convert_pcaps([sys.argv[1]], sys.argv[2], keys=None)
print(r.packets, r.messages)
""",
    "dpkt": """
import sys
import dpkt
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

# Runs a command as a child and prints its stdout, then its wall time, peak RSS and CPU
# time (user + system): the whole process, from its start (interpreter, imports) to exit.
_TIMED = """
import resource, subprocess, sys, time
t0 = time.perf_counter()
res = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=True)
seconds = time.perf_counter() - t0
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(res.stdout.strip().split(chr(10))[-1] if res.stdout.strip() else "")
print(seconds, ru.ru_maxrss, ru.ru_utime + ru.ru_stime)
"""


def _timed(cmd: list[str], packets: int | None = None) -> dict:
    """Run ``cmd`` in its own process; what it printed last (packets, messages) and its costs."""
    res = subprocess.run(
        [sys.executable, "-c", _TIMED, *cmd], capture_output=True, text=True, check=True, cwd=ROOT
    )
    first, second = res.stdout.rstrip("\n").split("\n")[-2:]
    seconds, rss_kb, cpu = second.split()
    counts = [int(x) for x in first.split()[:2]] if packets is None else [packets, 0]
    return {
        "packets": counts[0],
        "messages": counts[1],
        "seconds": float(seconds),
        "cpu_seconds": float(cpu),
        "peak_rss_mb": int(rss_kb) / 1024,
    }


def _run_python(name: str, pcap: Path, out: Path, limit: int) -> dict:
    return _timed([sys.executable, "-c", _RUNNERS[name], str(pcap), str(out), str(limit)])


def _run_cli(pcap: Path, out: Path, packets: int, tree: Path | None = None) -> dict:
    """``wirepath capture pcap`` as a user runs it (its messages are not parsed); with
    ``tree``, that copy's command line run the way its console command ran it."""
    argv = ["capture", "pcap", str(pcap), "--out", str(out), "--quiet"]
    if tree is None:
        return _timed([str(Path(sys.executable).parent / "wirepath"), *argv], packets)
    code = f"import sys; sys.path.insert(0, {str(tree)!r}); from wirepath.cli import main; sys.exit(main())"
    return _timed([sys.executable, "-c", code, *argv], packets)


def _run_tshark(pcap: Path, limit: int) -> dict:
    fields = ["frame.time_epoch", "ip.src", "ip.dst", "tcp.srcport", "tcp.dstport", "tcp.seq", "tcp.len"]
    cmd = ["tshark", "-r", str(pcap), "-c", str(limit), "-T", "fields"]
    for f in fields:
        cmd += ["-e", f]
    return _timed(cmd, limit)


def write_short_capture(path: Path, packets: int) -> int:
    """A capture of short connections, one call each, as ``wirepath synth --pcap``
    renders the multitier workload; returns the packets written (about ``packets``)."""
    wirepath = Path(sys.executable).parent / "wirepath"
    config = ROOT / "samples" / "synth" / "multitier.toml"
    messages = max(10, round(packets * 200_002 / 900_009))  # 4.5 packets per message there
    subprocess.run(
        [str(wirepath), "synth", str(config), "--messages", str(messages), "--out",
         str(path.with_suffix(".parquet")), "--pcap", str(path), "--quiet", "--json"],
        check=True, capture_output=True, cwd=ROOT,
    )  # fmt: skip
    path.with_suffix(".parquet").unlink()
    with open(path, "rb") as f:
        f.seek(24)
        n = 0
        hdr = struct.Struct("<IIII")
        while head := f.read(16):
            n += 1
            f.seek(hdr.unpack(head)[2], 1)
    return n


PACKAGES = ("wirepath", "tracefmt", "synth", "infer", "capture", "viz", "trend")


def compile_packages(tree: Path) -> None:
    """Byte-compile a tree's packages, as ``pip install`` of a wheel does and as a first run
    does where Python may write its caches: without it, a shell with
    PYTHONDONTWRITEBYTECODE set compiles every module again in every timed process (about
    0.1 CPU s per ``wirepath`` command here), which no installed tool pays."""
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", *PACKAGES], cwd=tree, check=True, capture_output=True
    )


def _capture(kind: str, path: Path, packets: int) -> int:
    return write_capture(path, packets) if kind == "keep-alive" else write_short_capture(path, packets)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--packets", type=int, nargs="+", default=[1_000_000, 2_000_000], help="capture sizes (packets)"
    )
    ap.add_argument(
        "--baseline-packets", type=int, default=1_000_000, help="packets read by dpkt/tshark/scapy"
    )
    ap.add_argument("--skip", nargs="*", default=[], help="baselines to skip (dpkt, tshark, scapy, cli)")
    ap.add_argument(
        "--workloads", nargs="+", default=["keep-alive", "short"], choices=["keep-alive", "short"],
        help="keep-alive: HTTP conversations of 5 calls; short: one call per connection (synth --pcap)",
    )  # fmt: skip
    ap.add_argument(
        "--memory-packets", type=int, default=0, help="also convert a keep-alive capture this big (peak RSS)"
    )
    ap.add_argument(
        "--before", type=Path, help="a copy of the project tree to run as well (its capture package)"
    )
    ap.add_argument(
        "--repeat", type=int, default=1, help="runs of each tool, interleaved; the median is kept (1)"
    )
    ap.add_argument(
        "--keys", action="store_true",
        help="only measure request-key reading: a keep-alive capture of the first size with keys, "
        "converted with key reading on and off",
    )  # fmt: skip
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    for tree in (ROOT, args.before):
        if tree is not None:
            compile_packages(tree)
    if args.keys:
        return _measure_keys(args)
    rows = []
    with tempfile.TemporaryDirectory(prefix="wirepath-bench-") as tmp:
        for kind in args.workloads:
            files = {}
            for size in args.packets:
                p = Path(tmp) / f"{kind}_{size}.pcap"
                files[size] = (p, _capture(kind, p, size))
                mb = os.path.getsize(p) / 1e6
                print(f"{kind}: {files[size][1]:,} packets, {mb:.0f} MB", file=sys.stderr, flush=True)
            rows += _measure(kind, _jobs(kind, files, args, Path(tmp)), args.repeat)
            for p, _ in files.values():
                p.unlink()
        if args.memory_packets:
            p = Path(tmp) / "memory.pcap"
            n = write_capture(p, args.memory_packets)
            r = _run_python("wirepath", p, Path(tmp) / "t.parquet", n)
            rows.append({"workload": "keep-alive", "tool": "wirepath", **r})
    for r in rows:
        r["packets_per_s"] = r["packets"] / r["seconds"] if r["seconds"] else 0.0
        r["packets_per_cpu_s"] = r["packets"] / r["cpu_seconds"] if r["cpu_seconds"] else 0.0
    for r in rows:
        base = {b["tool"]: b["packets_per_cpu_s"] for b in rows if b["workload"] == r["workload"]}
        r["x_dpkt"] = r["packets_per_cpu_s"] / base["dpkt"] if base.get("dpkt") else None
        r["x_tshark"] = r["packets_per_cpu_s"] / base["tshark"] if base.get("tshark") else None
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(
        f"{'workload':10} {'tool':20} {'packets':>10} {'messages':>9} {'wall s':>7} {'CPU s':>7} "
        f"{'pkts/CPU-s':>10} {'x dpkt':>6} {'x tshark':>8} {'peak RSS':>8}"
    )
    for r in rows:
        xd = f"{r['x_dpkt']:.1f}" if r["x_dpkt"] else "-"
        xt = f"{r['x_tshark']:.1f}" if r["x_tshark"] else "-"
        print(
            f"{r['workload']:10} {r['tool']:20} {r['packets']:>10,} {r['messages']:>9,} {r['seconds']:>7.2f} "
            f"{r['cpu_seconds']:>7.2f} {r['packets_per_cpu_s']:>10,.0f} {xd:>6} {xt:>8} "
            f"{r['peak_rss_mb']:>6.0f}MB"
        )
    return 0


def _jobs(kind: str, files: dict, args: argparse.Namespace, tmp: Path) -> list[tuple[str, Any]]:
    """Every (tool, run) of one workload: wirepath (library, CLI, each before) at each size,
    then the baselines on the first capture's first ``--baseline-packets``."""
    out = tmp / "t.parquet"
    jobs: list[tuple[str, Any]] = []
    for p, n in files.values():
        jobs.append(("wirepath", functools.partial(_run_python, "wirepath", p, out, n)))
        if args.before is not None:
            jobs.append(("wirepath before", functools.partial(_timed_before, args.before, p, out, n)))
        if "cli" not in args.skip:
            jobs.append(("wirepath CLI", functools.partial(_run_cli, p, out, n)))
            if args.before is not None:
                jobs.append(("wirepath CLI before", functools.partial(_run_cli, p, out, n, args.before)))
    first, n_first = files[args.packets[0]]
    limit = min(args.baseline_packets, n_first)
    for tool in ("dpkt", "scapy"):
        if tool not in args.skip:
            jobs.append((tool, functools.partial(_run_python, tool, first, tmp / "x", limit)))
    if "tshark" not in args.skip:
        jobs.append(("tshark", functools.partial(_run_tshark, first, limit)))
    return jobs


def _measure(kind: str, jobs: list[tuple[str, Any]], repeat: int) -> list[dict]:
    """Each job ``repeat`` times, round after round (so that a slow spell of the machine
    falls on every tool alike); each row keeps the run of median CPU time."""
    runs: list[list[dict]] = [[] for _ in jobs]
    for _ in range(repeat):
        for k, (_, run) in enumerate(jobs):
            runs[k].append(run())
    rows = []
    for (tool, _), got in zip(jobs, runs, strict=True):
        got.sort(key=lambda r: r["cpu_seconds"])
        rows.append({"workload": kind, "tool": tool, **got[len(got) // 2], "runs": len(got)})
    return rows


def _measure_keys(args: argparse.Namespace) -> int:
    """Key reading on and off, alternately, on one keep-alive capture whose requests carry
    a traceparent and an X-Request-ID; the runs of median CPU time, and their ratio."""
    with tempfile.TemporaryDirectory(prefix="wirepath-bench-") as tmp:
        pcap, out = Path(tmp) / "keys.pcap", Path(tmp) / "t.parquet"
        n = write_capture(pcap, args.packets[0], keys=True)
        print(f"keep-alive with keys: {n:,} packets, {os.path.getsize(pcap) / 1e6:.0f} MB", file=sys.stderr)
        jobs = [
            (tool, functools.partial(_run_python, tool, pcap, out, n))
            for tool in ("wirepath keys off", "wirepath")
        ]
        rows = _measure("keep-alive+keys", jobs, args.repeat)
        size = os.path.getsize(out)
    off, on = rows
    ratio = on["cpu_seconds"] / off["cpu_seconds"]
    if args.json:
        print(json.dumps({"off": off, "on": on, "ratio": ratio, "trace_bytes_on": size}, indent=2))
        return 0
    for label, r in (("keys off", off), ("keys on", on)):
        print(
            f"{label:9} {r['packets']:>10,} packets {r['messages']:>9,} messages  "
            f"wall {r['seconds']:6.2f} s  CPU {r['cpu_seconds']:6.2f} s  peak RSS {r['peak_rss_mb']:5.0f} MB"
        )
    print(f"ratio on/off (CPU): {ratio:.3f}; trace with keys {size / 1e6:.1f} MB")
    return 0


def _timed_before(tree: Path, pcap: Path, out: Path, n: int) -> dict:
    """The wirepath runner with ``tree``'s packages first on the path."""
    code = f"import sys; sys.path.insert(0, {str(tree)!r})\n" + _RUNNERS["wirepath"]
    return _timed([sys.executable, "-c", code, str(pcap), str(out), str(n)])


if __name__ == "__main__":
    raise SystemExit(main())

"""Streaming conversion of pooled traffic: how late a message reaches a trace part.

    .venv/bin/python benchmarks/pooled.py [--seconds 110] [--pools 8] [--rotate-s 10]
        [--chunk-bytes 262144 8388608] [--before DIR]

The capture: ``--pools`` groups of three keep-alive connections opened when the recording
starts and never closed (HTTP/1.1 every 50 ms, Redis every 70 ms, a binary protocol every
90 ms: pooled client connections), and a short HTTP connection (handshake, one call,
close) every 5 ms, cut into rotations of ``--rotate-s`` seconds of capture time (named as
tcpdump names them). The rotations go through one ``StreamConverter`` in order, as the
live agent reads them, with a part published after every read of ``--chunk-bytes``.

Per run: messages published before the stop, the delay from each message's timestamp to
its publication (capture time: the newest packet read when its part appeared; at the stop
for those published by ``finish``), the most messages held (decoded, not yet final), and
the conversion's CPU seconds (parts included). ``--before DIR`` runs another tree too
(its capture package), in the same invocation.
"""

from __future__ import annotations

import argparse
import json
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

from capture.frames import TcpConnection

ROOT = Path(__file__).resolve().parents[1]
_MS = 1_000_000
_T0 = 1_700_000_000 * 10**9


_POOL = [  # server address, port, period (ms), the i-th request and response
    (0x0A000201, 8080, 50, lambda i: (b"GET /pool/%d HTTP/1.1\r\nHost: a\r\n\r\n" % i,
                                      b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")),
    (0x0A000202, 6379, 70, lambda i: (b"*2\r\n$3\r\nGET\r\n$9\r\nkey:%05d\r\n" % i,
                                      b"$40\r\n" + b"v" * 40 + b"\r\n")),
    (0x0A000203, 7777, 90, lambda i: (bytes([1, 2, 3, i % 251]) * 10, bytes([9, 8, 7]) * 20)),
]  # fmt: skip


def write_rotations(directory: Path, seconds: float, pools: int, rotate_s: float) -> tuple[list[Path], int]:
    """The pooled capture as rotations ``c.pcap``, ``c.pcap1``, ...; and its packet count."""
    out: list[tuple[int, bytes]] = []
    end = _T0 + int(seconds * 1e9)
    for k in range(pools):
        for srv, port, every, message in _POOL:
            c = TcpConnection(out, 0x0A000101 + k, srv, 40000 + k, port)
            c.open(_T0 + k * 7 * _MS)
            for i, t in enumerate(range(_T0 + k * 7 * _MS + _MS, end, every * _MS)):
                c.turn(t, *message(i))
    for i, t in enumerate(range(_T0 + 3 * _MS, end - 2 * _MS, 5 * _MS)):
        c = TcpConnection(out, 0x0A000109, 0x0A000209, 1024 + i % 60000, 80, 7000 + i)
        c.open(t)
        c.turn(t + _MS * 3 // 10, b"GET /short/%d HTTP/1.1\r\nHost: b\r\n\r\n" % i,
               b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")  # fmt: skip
        c.close(t + _MS)
    out.sort(key=lambda p: p[0])
    files: list[Path] = []
    head = struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, 1)
    for t, frame in out:
        k = int((t - _T0) // (rotate_s * 1e9))
        while len(files) <= k:
            files.append(directory / ("c.pcap" + (str(len(files)) if files else "")))
            files[-1].write_bytes(head)
        with open(files[k], "ab") as f:  # one open per packet: fine at this size
            f.write(struct.pack("<IIII", t // 10**9, t % 10**9, len(frame), len(frame)) + frame)
    return files, len(out)


_RUN = r"""
import json, resource, sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
import numpy as np
import pyarrow.parquet as pq
from capture.convert import StreamConverter
from capture.source import read_packets
work, chunk = Path(sys.argv[2]), int(sys.argv[3])
files = json.loads(sys.argv[4])
parts, seen, pub, held, newest = work / "parts", set(), [], 0, 0
def collect(at):
    for p in sorted(parts.glob("part-*.parquet")):
        if p.name not in seen:
            seen.add(p.name)
            ts = pq.read_table(p, columns=["timestamp"])["timestamp"].cast("int64").to_numpy()
            pub.append(at - ts)
r0 = resource.getrusage(resource.RUSAGE_SELF)
with StreamConverter(work / "t.parquet", parts_dir=parts, part_every_s=0.0) as conv:
    for f in files:
        for batch in read_packets(f, chunk_bytes=chunk):
            conv.add_batch(batch)
            newest = max(newest, int(batch.ts_ns.max()))
            held = max(held, sum(len(h[0]) if isinstance(h, tuple) else len(h) for h in conv._held))
            collect(newest)
    early = sum(len(p) for p in pub)
    report = conv.finish()
collect(newest)
r1 = resource.getrusage(resource.RUSAGE_SELF)
d = np.concatenate(pub) / 1e9
print(json.dumps({"messages": report.messages, "published_before_stop": early, "held_max": held,
                  "delay_s": [float(np.percentile(d, q)) for q in (50, 90, 99, 100)],
                  "cpu_s": r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime}))
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=110.0, help="capture time recorded")
    ap.add_argument("--pools", type=int, default=8, help="groups of three keep-alive connections")
    ap.add_argument("--rotate-s", type=float, default=10.0, help="capture seconds per rotation")
    ap.add_argument("--chunk-bytes", type=int, nargs="+", default=[262144, 8 << 20], help="bytes per read")
    ap.add_argument("--before", type=Path, help="a copy of the project tree to run as well")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    trees = [("wirepath", ROOT)] + ([("wirepath before", args.before)] if args.before else [])
    rows = []
    with tempfile.TemporaryDirectory(prefix="wirepath-pooled-") as tmp:
        files, packets = write_rotations(Path(tmp), args.seconds, args.pools, args.rotate_s)
        for chunk in args.chunk_bytes:
            for name, tree in trees:
                work = Path(tempfile.mkdtemp(dir=tmp))
                done = subprocess.run(
                    [sys.executable, "-c", _RUN, str(tree), str(work), str(chunk),
                     json.dumps([str(f) for f in files])],
                    check=True, capture_output=True, text=True,
                )  # fmt: skip
                rows.append(
                    {"tool": name, "chunk_bytes": chunk, "packets": packets, **json.loads(done.stdout)}
                )
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{packets:,} packets in {len(files)} rotations of {args.rotate_s:g} s")
    print(f"{'tool':16} {'read':>8} {'messages':>9} {'before stop':>11} {'held max':>8} "
          f"{'delay p50/p90/p99/max s':>24} {'CPU s':>6}")  # fmt: skip
    for r in rows:
        delay = "/".join(f"{x:.2f}" for x in r["delay_s"])
        print(f"{r['tool']:16} {r['chunk_bytes'] // 1024:>6}KB {r['messages']:>9,} "
              f"{r['published_before_stop']:>11,} {r['held_max']:>8,} {delay:>24} "
              f"{r['cpu_s']:>6.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

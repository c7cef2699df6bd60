"""Several capture points: packet-level merge against the message-level merge it replaced.

Writes a capture of HTTP keep-alive conversations (``benchmarks/ingest.py``'s generator)
as point ``a``, and a second point ``b``: the same packets with the clock 2.5 ms ahead,
every 40th packet missing at ``a`` and every 37th at ``b`` (never one both miss, so
the merged points hold the whole conversation). Then, each in
its own process:

- ``one point``: ``convert_pcaps([a])``, reading the packets once (a floor);
- ``packets``: ``convert_pcaps([a, b], point_from_file=True)`` (offsets from a first
  pass, then the merged packet stream with duplicates dropped before reassembly);
- ``messages``: the previous method, written out here: each point converted on its own,
  ``estimate_offset_ns``, then ``tracefmt.merge_traces`` dropping duplicate messages.

Printed: wall and CPU seconds, messages written, duplicates removed, and the messages
the true conversation has (the generator's count), so what each method loses shows.

    .venv/bin/python benchmarks/points.py --packets 400000
"""

from __future__ import annotations

import argparse
import json
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from ingest import write_capture  # noqa: E402

_RUN = {
    "one point": """
import capture, sys
r = capture.convert_pcaps([sys.argv[1]], sys.argv[3])
print(r.messages, 0)
""",
    "packets": """
import capture, sys
r = capture.convert_pcaps([sys.argv[1], sys.argv[2]], sys.argv[3], point_from_file=True)
print(r.messages, r.duplicates_removed)
""",
    "messages": """
import sys, tempfile, pyarrow as pa
from pathlib import Path
import capture, tracefmt
from capture.convert import estimate_offset_ns
tmp = Path(tempfile.mkdtemp())
cols = ["timestamp", "sender", "receiver", "op", "id"]
parts = []
for i, f in enumerate(sys.argv[1:3]):
    capture.convert_pcaps([f], tmp / f"{i}.parquet")
    parts.append(tmp / f"{i}.parquet")
ta, tb = (tracefmt.read_trace(p, columns=cols) for p in parts)
off, _ = estimate_offset_ns(ta, tb)
ins = [tracefmt.MergeInput(str(parts[0]), 0, "a"), tracefmt.MergeInput(str(parts[1]), off, "b")]
r = tracefmt.merge_traces(ins, sys.argv[3])
print(r.messages, r.duplicates_removed)
""",
}


def _second_point(a_full: Path, a: Path, b: Path, offset_ns: int) -> int:
    """Write points a and b from one capture; returns the packets both saw."""
    data = a_full.read_bytes()
    head, off, i, both = data[:24], 24, 0, 0
    out_a, out_b = [head], [head]
    rec = struct.Struct("<IIII")
    while off + 16 <= len(data):
        sec, ns, cap, wire = rec.unpack_from(data, off)
        frame = data[off + 16 : off + 16 + cap]
        in_a = i % 40 != 7
        in_b = i % 37 != 20 or not in_a  # no packet is missing at both points
        if in_a:
            out_a.append(data[off : off + 16 + cap])
        if in_b:
            t = sec * 1_000_000_000 + ns + offset_ns
            out_b.append(rec.pack(t // 1_000_000_000, t % 1_000_000_000, cap, wire) + frame)
        both += in_a and in_b
        off += 16 + cap
        i += 1
    a.write_bytes(b"".join(out_a))
    b.write_bytes(b"".join(out_b))
    return both


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--packets", type=int, default=400_000, help="packets in the generated capture")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="wirepath-bench-points-") as tmp:
        d = Path(tmp)
        n = write_capture(d / "full.pcap", args.packets)
        requests = 5
        truth = n // (3 + 3 * requests + 3) * requests * 2
        both = _second_point(d / "full.pcap", d / "a.pcap", d / "b.pcap", 2_500_000)
        print(f"{n:,} packets, {truth:,} true messages, {both:,} packets seen at both points")
        rows = []
        for name, code in _RUN.items():
            wrapped = (
                "import resource, time\nt0 = time.perf_counter(); c0 = time.process_time()\n"
                + code
                + "\nprint(time.perf_counter() - t0, time.process_time() - c0)\n"
            )
            res = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    wrapped,
                    str(d / "a.pcap"),
                    str(d / "b.pcap"),
                    str(d / f"{name}.parquet"),
                ],
                capture_output=True,
                text=True,
                check=True,
                cwd=ROOT,
            )
            lines = res.stdout.split()
            msgs, dups, wall, cpu = int(lines[0]), int(lines[1]), float(lines[2]), float(lines[3])
            rows.append({"method": name, "messages": msgs, "duplicates": dups, "wall_s": wall, "cpu_s": cpu})
            print(f"{name:10s} messages {msgs:>9,} duplicates {dups:>9,} wall {wall:6.2f} s cpu {cpu:6.2f} s")
        print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Synthetic trace generation speed and memory, next to a baseline measured in the same run.

    python benchmarks/synth.py [--messages 2000000] [--big 20000000] [--workdir DIR]

1. ``multitier.toml`` at parallelism 40 (goal >= 1,000,000 messages/s), end to end into
   Parquet (calibration pilots, generation, truth, writing) and generation alone;
   baseline: a straightforward Python generator (a loop per instance, heapq to keep
   client loops in time order), the way one writes it without vectorizing.
2. Peak RSS of a ``--big``-message trace written by the CLI in a fresh process (goal
   < 1.5 GB); its VmHWM, so nothing of this process is counted.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pyarrow as pa

# This script's own name would shadow the synth package when run as a file.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import synth  # noqa: E402
import tracefmt  # noqa: E402
from synth import generate as gen  # noqa: E402

CONFIG = Path(__file__).resolve().parent.parent / "samples" / "synth" / "multitier.toml"


def python_baseline(messages: int, loops: int, seed: int = 1) -> pa.Table:
    """multitier.toml's request, one instance at a time, in plain Python."""
    rnd = random.Random(seed)

    def g(mean: float, std: float) -> float:
        return max(0.0, rnd.gauss(mean, std))

    rows: list[tuple[float, str, str, str, int]] = []
    heap = [(rnd.uniform(0, 0.05), k) for k in range(loops)]
    uid = 0
    while len(rows) < messages:
        start, k = heapq.heappop(heap)
        ws = rnd.choice(["WS1", "WS2"])
        t = start
        uid += 1
        ws_id = uid
        rows.append((t, "call", "client", ws, ws_id))
        t += g(0.002, 0.0005)
        if rnd.random() < 0.5:
            uid += 1
            rows.append((t, "call", ws, "AUTH", uid))
            t += g(0.005, 0.001)
            rows.append((t, "return", "AUTH", ws, uid))
            t += g(0.001, 0.0002)
        ap = rnd.choice(["AP1", "AP2"])
        uid += 1
        ap_id = uid
        rows.append((t, "call", ws, ap, ap_id))
        t += g(0.003, 0.0007)
        db = rnd.choice(["DB1", "DB2"])
        uid += 1
        rows.append((t, "call", ap, db, uid))
        t += g(0.010, 0.003)
        rows.append((t, "return", db, ap, uid))
        t += g(0.001, 0.0002)
        rows.append((t, "return", ap, ws, ap_id))
        t += g(0.001, 0.0002)
        rows.append((t, "return", ws, "client", ws_id))
        heapq.heappush(heap, (t + rnd.uniform(0.0, 0.2), k))
    rows.sort(key=lambda r: r[0])
    return pa.table(
        {
            "timestamp": pa.array([int(r[0] * 1e9) for r in rows], pa.int64()).cast(
                pa.timestamp("ns", tz="UTC")
            ),
            "op": [r[1] for r in rows],
            "sender": [r[2] for r in rows],
            "receiver": [r[3] for r in rows],
            "id": pa.array([r[4] for r in rows], pa.uint64()),
        }
    )


def child_rss(args: list[str]) -> dict:
    code = (
        "import sys, json, time\n"
        "from wirepath.cli import main\n"
        "t0 = time.perf_counter()\n"
        "rc = main(sys.argv[1:] + ['--json'])\n"
        "hwm = next(l for l in open('/proc/self/status') if l.startswith('VmHWM:'))\n"
        "rss = int(hwm.split()[1]) / 1024\n"
        "print(json.dumps({'rc': rc, 'seconds': time.perf_counter() - t0, 'rss_mb': rss}))\n"
    )
    res = subprocess.run([sys.executable, "-c", code, *args], check=True, capture_output=True, text=True)
    lines = res.stdout.strip().splitlines()
    report = json.loads("\n".join(lines[:-1]))
    return {**json.loads(lines[-1]), "report": report}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=2_000_000)
    ap.add_argument("--big", type=int, default=20_000_000)
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="wirepath-synth-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"machine: {os.cpu_count()} cores, python {sys.version.split()[0]}")
    config = replace(synth.load_config(CONFIG), messages=args.messages)

    t0 = time.perf_counter()
    report = synth.generate_trace(config, work / "multitier.parquet", truth_path=work / "truth.json")
    end_to_end = time.perf_counter() - t0
    engine = gen._engine(config)  # the calibrated engine generate_trace runs
    loops = engine.loops
    t0 = time.perf_counter()
    generated = sum(t.num_rows for t in engine.run())
    gen_only = time.perf_counter() - t0

    base_n = min(args.messages, 200_000)
    t0 = time.perf_counter()
    base = python_baseline(base_n, loops[0])
    tracefmt.write_trace(base, work / "baseline.parquet")
    base_s = time.perf_counter() - t0

    big = child_rss(["synth", str(CONFIG), "--out", str(work / "big.parquet"), "--messages", str(args.big)])

    print(
        f"multitier.toml: {report.messages:,} messages, parallelism {report.mean_parallelism:.1f}, "
        f"{loops[0]} client loops\n"
    )
    print(f"{'measure':<52} {'wirepath':>14} {'baseline':>14}  {'goal':<12} met")
    rows = [
        (
            "end to end, into Parquet (messages/s)",
            report.messages / end_to_end,
            base_n / base_s,
            ">= 1,000,000",
        ),
        ("generation alone (messages/s)", generated / gen_only, float("nan"), ""),
        (f"{big['report']['messages']:,} messages: peak RSS (MB)", big["rss_mb"], float("nan"), "< 1536"),
        (f"{big['report']['messages']:,} messages: seconds", big["seconds"], float("nan"), ""),
        (
            f"{big['report']['messages']:,} messages, end to end (messages/s)",
            big["report"]["messages"] / big["seconds"],
            float("nan"),
            ">= 1,000,000",
        ),
    ]
    big_rate = big["report"]["messages"] / big["seconds"]
    met = [report.messages / end_to_end >= 1e6, True, big["rss_mb"] < 1536, True, big_rate >= 1e6]
    for (name, ours, theirs, goal), ok in zip(rows, met, strict=True):
        print(f"{name:<52} {ours:>14,.1f} {theirs:>14,.1f}  {goal:<12} {'yes' if ok else 'NO'}")
    print(f"\nbaseline: a Python loop per instance ({base_n:,} messages, same topology and delays)")


if __name__ == "__main__":
    main()

"""Trace I/O speed and size, each next to a baseline measured in the same run.

    python benchmarks/trace_io.py [--messages 2000000] [--workdir DIR]

Makes a multi-tier RPC text trace (client -> WS -> AP -> DB, load-balanced, ids on
every call, microsecond timestamps) and measures:

1. text -> Parquet conversion (goal >= 1,000,000 lines/s); baseline: a plain Python
   line-by-line parser (split, int arithmetic, lists -> Arrow).
2. Parquet read of the whole trace (goal >= 20,000,000 messages/s); baseline: the raw
   ``pyarrow.parquet.read_table`` without validation.
3. Parquet size (goal <= 10 bytes/message); baseline: pyarrow's default writer
   (snappy, dictionary everywhere).
4. Streaming merge of 4 such files (goal: peak RSS < 1 GB); baseline: read all,
   concatenate and sort in memory. Each runs in a fresh process; peak RSS is the
   child's VmHWM.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import tracefmt


def make_rpc_trace(messages: int, seed: int) -> pa.Table:
    """A load-balanced three-tier RPC trace, 6 messages per request, exact ids.

    Ids start at ``seed * 10**12``, so traces of different seeds share no message.
    """
    rng = np.random.default_rng(seed)
    n = -(-messages // 6)
    start = 1_732_000_000_000_000_000 + np.cumsum(rng.exponential(300_000, n)).astype(np.int64)

    def hop(mean_us: float, std_us: float) -> np.ndarray:
        return np.maximum(rng.normal(mean_us, std_us, n), 1).astype(np.int64) * 1000

    t_ws_call = start
    t_ap_call = t_ws_call + hop(400, 100)
    t_db_call = t_ap_call + hop(300, 80)
    t_db_ret = t_db_call + hop(2500, 700)
    t_ap_ret = t_db_ret + hop(200, 50)
    t_ws_ret = t_ap_ret + hop(150, 40)
    clients = np.array([f"10.0.1.{i}" for i in range(1, 17)])
    ws = np.array(["WS1", "WS2", "WS3", "WS4"])
    ap = np.array(["AP1", "AP2", "AP3"])
    db = np.array(["DB1", "DB2"])
    c, w, a, d = (
        clients[rng.integers(0, 16, n)],
        ws[rng.integers(0, 4, n)],
        ap[rng.integers(0, 3, n)],
        db[rng.integers(0, 2, n)],
    )
    ids = np.arange(n, dtype=np.uint64) * 3 + np.uint64(seed * 10**12)
    ts = np.concatenate([t_ws_call, t_ap_call, t_db_call, t_db_ret, t_ap_ret, t_ws_ret])
    ts = ts // 1000 * 1000  # microsecond capture resolution
    snd = np.concatenate([c, w, a, d, a, w])
    rcv = np.concatenate([w, a, d, a, w, c])
    op = np.repeat(np.array(["call", "call", "call", "return", "return", "return"]), n)
    idc = np.concatenate([ids, ids + 1, ids + 2, ids + 2, ids + 1, ids])
    order = np.argsort(ts, kind="stable")[:messages]
    table = pa.table(
        {
            "timestamp": pa.array(ts[order]).cast(pa.timestamp("ns", tz="UTC")),
            "sender": snd[order],
            "receiver": rcv[order],
            "op": op[order],
            "id": pa.array(idc[order], pa.uint64()),
        }
    )
    return tracefmt.validate_trace(table)


def python_baseline_convert(src: Path, dst: Path) -> int:
    """What one writes without wirepath: a loop over lines."""
    ts, snd, rcv, ops, ids = [], [], [], [], []
    with open(src, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            t, op, s, r, i = line.split()
            sec, _, frac = t.partition(".")
            ts.append(int(sec) * 1_000_000_000 + int((frac + "000000000")[:9]))
            ops.append(op)
            snd.append(s)
            rcv.append(r)
            ids.append(None if i == "-" else int(i))
    table = pa.table(
        {
            "timestamp": pa.array(ts, pa.int64()).cast(pa.timestamp("ns", tz="UTC")),
            "sender": snd,
            "receiver": rcv,
            "op": ops,
            "id": pa.array(ids, pa.uint64()),
        }
    )
    tracefmt.write_trace(table, dst)
    return table.num_rows


def timed(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t0, out


_CHILD = """
import sys, time, json
import numpy as np, pyarrow as pa
import tracefmt
mode, out, *inputs = sys.argv[1:]
t0 = time.perf_counter()
if mode == "stream":
    rep = tracefmt.merge_traces(inputs, out)
    n = rep.messages
else:
    tables = []
    for i, p in enumerate(inputs):
        t = tracefmt.read_trace(p)
        t = t.append_column("point", pa.array([f"p{i}"] * t.num_rows))
        tables.append(t)
    t = pa.concat_tables(tables).unify_dictionaries()
    t = tracefmt.sort_trace(t)
    tracefmt.write_trace(t, out)
    n = t.num_rows
# VmHWM is this process's own peak (ru_maxrss would carry the parent's over exec).
hwm = next(l for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"seconds": time.perf_counter() - t0, "messages": n,
                  "rss_mb": int(hwm.split()[1]) / 1024}))
"""


def child_merge(mode: str, out: Path, inputs: list[Path]) -> dict:
    res = subprocess.run(
        [sys.executable, "-c", _CHILD, mode, str(out), *map(str, inputs)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(res.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=2_000_000)
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="wirepath-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    n = args.messages
    print(f"machine: {os.cpu_count()} cores, python {sys.version.split()[0]}, pyarrow {pa.__version__}")
    print(f"trace: {n:,} messages, multi-tier RPC, in {work}\n")

    table = make_rpc_trace(n, seed=1)
    text = work / "trace.txt"
    tracefmt.write_text_trace(table, text)
    rows = []

    dt_w, _ = timed(tracefmt.convert_trace, text, work / "trace.parquet")
    dt_b, _ = timed(python_baseline_convert, text, work / "baseline.parquet")
    rows.append(("text -> Parquet (lines/s)", n / dt_w, n / dt_b, ">= 1,000,000", n / dt_w >= 1e6))

    pq_path = work / "trace.parquet"
    best_w = min(timed(tracefmt.read_trace, pq_path)[0] for _ in range(3))
    best_b = min(timed(pq.read_table, pq_path)[0] for _ in range(3))
    rows.append(("Parquet read (messages/s)", n / best_w, n / best_b, ">= 20,000,000", n / best_w >= 2e7))

    default_path = work / "default.parquet"
    pq.write_table(pa.table({k: table[k] for k in table.column_names}), default_path)
    size_w = pq_path.stat().st_size / n
    size_b = default_path.stat().st_size / n
    rows.append(("Parquet size (bytes/message)", size_w, size_b, "<= 10", size_w <= 10))
    rows.append(("text size (bytes/message)", text.stat().st_size / n, float("nan"), "", True))

    def merge_inputs(size: int) -> list[Path]:
        paths = []
        for k in range(4):
            p = work / f"point{k}_{size}.parquet"
            tracefmt.write_trace(make_rpc_trace(size, seed=10 + k), p)
            paths.append(p)
        return paths

    # The same merge at a quarter of the size: a bounded merge's peak barely moves.
    small = child_merge("stream", work / "merged_small.parquet", merge_inputs(n // 4))
    inputs = merge_inputs(n)
    stream = child_merge("stream", work / "merged.parquet", inputs)
    memory = child_merge("memory", work / "merged_mem.parquet", inputs)
    if not stream["messages"] == memory["messages"] == 4 * n:
        raise SystemExit(f"merge lost or dropped messages: {stream} {memory}")
    rows.append(("merge 4 x n/4: peak RSS (MB)", small["rss_mb"], float("nan"), "", True))
    rows.append(
        (
            "merge 4 files: peak RSS (MB)",
            stream["rss_mb"],
            memory["rss_mb"],
            "< 1024",
            stream["rss_mb"] < 1024,
        )
    )
    rows.append(
        (
            "merge 4 files (messages/s)",
            stream["messages"] / stream["seconds"],
            memory["messages"] / memory["seconds"],
            "",
            True,
        )
    )

    print(f"{'measure':<32} {'wirepath':>14} {'baseline':>14}  {'goal':<14} met")
    for name, ours, base, goal, met in rows:
        print(f"{name:<32} {ours:>14,.1f} {base:>14,.1f}  {goal:<14} {'yes' if met else 'NO'}")
    print(
        "\nbaselines: Python line loop; raw pyarrow read_table; pyarrow default writer; "
        "in-memory concat+sort merge"
    )


if __name__ == "__main__":
    main()

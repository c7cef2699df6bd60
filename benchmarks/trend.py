"""MDL grouping speed against jumpavg 0.4.2 ``classify()`` on the same series, in one run;
and a lab's store at scale (``--lab``).

    python benchmarks/trend.py [--sizes 1000,2000] [--big 10000] [--seed 1] [--json]
    python benchmarks/trend.py --lab 10000 [--runs 100] [--workdir DIR] [--baseline 10000]
                               [--browser] [--workers 2]

Each series is an MRR-like one (10 Mpps, 0.5 % noise, a 3 % drop in the middle, a 2 %
recovery near the end). For every size both implementations group the same series; their
groups (starts, sizes, averages, deviations, comments, bits) must be identical. Then
wirepath alone on a long series. Times are wall clock and process CPU time: the machine
may be shared, and CPU time is what the code costs.

``--lab N`` writes a CSV of N series (4 testbeds, RUNS runs of 3 trials, one series in
three with a 5 % drop somewhere) and runs the CLI on it, each verb in a process of its own
(time and peak RSS of that process): ``trend import``; ``trend analyze --fresh`` (from
nothing); an import of one more run for every series and ``trend analyze`` again (resumed
from the programs the first one saved), whose output must equal ``--fresh``'s; and
``trend dashboard``. The baseline, in the same run: the same series analysed one at a
time (``analyze_series``, what ``analyze`` did before), on ``--baseline`` of them, whose
groups must equal the bulk analysis' on every one. ``--browser`` opens the dashboard's
index in headless Chromium (time until its table is ready); ``--workers`` runs
``analyze --fresh`` on a local Dask cluster too, whose output must be the same.
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


def write_lab_csv(path: Path, n: int, runs: int, seed: int, *, first_run: int = 0) -> None:
    """N series of RUNS runs of 3 trials (from run FIRST_RUN), one in three with a 5 % drop."""
    rng = np.random.default_rng(seed)
    level = 10e6 * (1 + np.random.default_rng(0).random(n))
    drop = np.random.default_rng(1).integers(10, 100, n)
    with path.open("w") as f:
        f.write("test,testbed,build,time,trial,value,unit,direction\n")
        for s in range(n):
            r = np.arange(first_run, first_run + runs)
            lv = level[s] * np.where((s % 3 == 0) & (r >= drop[s]), 0.95, 1.0)
            v = lv[:, None] * (1 + rng.normal(0, 0.005, (runs, 3)))
            name, tb = f"test{s:06d}-64b-2t1c-mrr", f"tb{s % 4}"
            f.write(
                "".join(
                    f"{name},{tb},b{r[i]:04d},{1_700_000_000 + int(r[i]) * 3600},{k},{v[i, k]:.1f},pps,"
                    "bigger-is-better\n"
                    for i in range(runs)
                    for k in range(3)
                )
            )


# The verbs run as a user's installed wirepath does: with its modules' bytecode cached
# (pip writes it at install), even where the environment says not to write it.
_CHILD_ENV = {
    **{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
    "PYTHONPYCACHEPREFIX": str(Path(tempfile.gettempdir()) / "wirepath-bench-pycache"),
}


def timed_cli(*argv: str) -> tuple[float, float, str]:
    """A wirepath verb in a process of its own: wall seconds, that process' peak RSS in MB
    (read by wait4 for this one child), its output."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out_f, tempfile.TemporaryFile("w+") as err_f:
        argv_ = [sys.executable, "-m", "wirepath", *argv]
        proc = subprocess.Popen(argv_, stdout=out_f, stderr=err_f, text=True, env=_CHILD_ENV)
        _, status, usage = os.wait4(proc.pid, 0)
        out_f.seek(0)
        err_f.seek(0)
        out, err = out_f.read(), err_f.read()
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        raise SystemExit(f"wirepath {' '.join(argv)} failed: {err.strip()}")
    return wall, usage.ru_maxrss / 1024, out


def lab(args: argparse.Namespace) -> int:
    """The ``--lab`` run: import, analyze from nothing and resumed, dashboard, baseline."""
    import trend
    from trend.analysis import analyze_all, analyze_series

    work = Path(args.workdir or tempfile.mkdtemp(prefix="trendlab-"))
    work.mkdir(parents=True, exist_ok=True)
    csv_path, more, store = work / "lab.csv", work / "more.csv", work / "store"
    if not csv_path.exists():
        write_lab_csv(csv_path, args.lab, args.runs, args.seed)
    write_lab_csv(more, args.lab, 1, args.seed + 1, first_run=args.runs)
    for old in store.glob("**/*"):
        if old.is_file():
            old.unlink()
    rows = []

    def row(step: str, wall: float, rss: float, goal: str = "", met: bool | None = None) -> None:
        rows.append({"step": step, "s": wall, "rss_mb": rss, "goal": goal, "met": met})
        mark = "" if met is None else ("yes" if met else "NO")
        print(f"{step:<46} {wall:>8.2f} s {rss:>8.0f} MB  {goal:<22} {mark}", flush=True)

    timed_cli("--help")  # the bytecode cache filled once, outside the timings
    n = args.lab
    print(f"{n:,} series x {args.runs} runs x 3 trials ({csv_path.stat().st_size / 2**20:.0f} MiB of CSV)")
    wall, rss, _ = timed_cli("trend", "import", str(csv_path), "--store", str(store))
    row(
        "import",
        wall,
        rss,
        "<= 5 s, <= 500 MB" if n == 10_000 else "",
        wall <= 5 and rss <= 500 if n == 10_000 else None,
    )
    wall, rss, fresh1 = timed_cli("trend", "analyze", "--store", str(store), "--fresh")
    row(
        "analyze from nothing",
        wall,
        rss,
        "<= 15 s" if n == 10_000 else "",
        wall <= 15 if n == 10_000 else None,
    )
    if args.workers:
        wall_d, rss_d, dask_out = timed_cli(
            "trend", "analyze", "--store", str(store), "--workers", str(args.workers)
        )
        row(
            f"analyze from nothing, {args.workers} Dask workers",
            wall_d,
            rss_d,
            "the same output",
            dask_out == fresh1,
        )
    wall, rss, _ = timed_cli("trend", "import", str(more), "--store", str(store))
    row("import one more run of every series", wall, rss)
    wall, rss, resumed = timed_cli("trend", "analyze", "--store", str(store))
    wall_f, rss_f, fresh2 = timed_cli("trend", "analyze", "--store", str(store), "--fresh")
    row(
        "analyze, resumed after one run each",
        wall,
        rss,
        "<= 3 s" if n == 10_000 else "",
        wall <= 3 if n == 10_000 else None,
    )
    row("analyze --fresh, same store", wall_f, rss_f, "same output as resumed", resumed == fresh2)
    site = work / "site"
    wall, rss, _ = timed_cli("trend", "dashboard", "--store", str(store), "--out", str(site))
    row("dashboard", wall, rss, "<= 30 s" if n == 10_000 else "", wall <= 30 if n == 10_000 else None)
    if args.browser:
        ready = index_ready(site / "index.html")
        row("dashboard index ready in Chromium", ready, 0, "<= 2 s", ready <= 2)
    # Baseline, in this process: one series at a time, and the groups compared.
    series = trend.load_series(store)[: args.baseline]
    analyze_all(series[:1])  # the compiled program loaded once (the CLI rows above pay it)
    t0 = time.perf_counter()
    one_by_one = [analyze_series(s) for s in series]
    t_one = time.perf_counter() - t0
    t0 = time.perf_counter()
    bulk = analyze_all(series)
    t_bulk = time.perf_counter() - t0
    same = all(
        [g.to_json() for g in a.groups] == [g.to_json() for g in b.groups]
        and np.array_equal(a.trend, b.trend, equal_nan=True)
        for a, b in zip(one_by_one, bulk, strict=True)
    )
    row(f"baseline: {len(series):,} series one at a time", t_one, 0)
    row(f"bulk, the same {len(series):,} series in-process", t_bulk, 0, "groups identical", same)
    print(f"speed-up of the analysis itself: {t_one / t_bulk:.1f}x")
    if args.json:
        print(json.dumps(rows, indent=2))
    return 0 if all(r["met"] is not False for r in rows) else 1


def index_ready(index: Path) -> float:
    """Seconds from loading the dashboard's index in headless Chromium until its table is drawn."""
    import shutil

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium")
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=opts)
    try:
        t0 = time.perf_counter()
        driver.get(index.resolve().as_uri())
        while driver.execute_script("return document.body.dataset.ready") != "1":
            time.sleep(0.01)
        return time.perf_counter() - t0
    finally:
        driver.quit()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,2000", help="series lengths run with both (comma-separated)")
    ap.add_argument("--big", type=int, default=10000, help="series length run with wirepath alone")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--lab", type=int, metavar="N", help="a lab's store of N series (see above)")
    ap.add_argument("--runs", type=int, default=100, help="--lab: runs per series (default 100)")
    ap.add_argument(
        "--workdir", help="--lab: where the CSV, store and site go (default: a temporary directory)"
    )
    ap.add_argument("--baseline", type=int, default=10_000, help="--lab: series analysed one at a time too")
    ap.add_argument("--browser", action="store_true", help="--lab: time the index in headless Chromium")
    ap.add_argument(
        "--workers", type=int, default=0, help="--lab: also analyse on a Dask cluster of this many"
    )
    args = ap.parse_args()
    if args.lab:
        return lab(args)
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

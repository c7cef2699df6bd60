"""Convolution speed: the multitier trace at 1 ms, run time against S, and a direct baseline.

    python benchmarks/convolution.py [--messages 200000] [--skip-big-fft]
    python benchmarks/convolution.py --fine-ab [--messages 200000] [--repeat 3]
    python benchmarks/convolution.py --join-ab [--messages 200000] [--repeat 5]

1. ``samples/synth/multitier.toml`` (about 200,000 messages, parallelism 40) at quantum
   1 ms, and the same workload with one client loop (parallelism 1), whose trace is
   about 1,000 times longer in time, so S = duration / quantum is in the millions.
2. Run time against S on the long trace, every edge pair through the FFT
   (``method="fft"``): time divided by the FFT work ``n log2 n`` stays flat when the
   cost grows as S log S; beside it the default ``method="auto"``, which enumerates
   occupied slot pairs when that is cheaper.
3. The baseline: the same edge-pair correlations at lags 0 .. max_lag computed
   directly with ``numpy.correlate`` (O(S x lags) per pair), side by side with the FFT
   on the same pairs, with the largest difference between the two.

``--fine-ab`` instead times what the spike within the first quantum (read off the
messages' times, ``infer.convolution._fine_spike``) costs: both traces at 1 ms, band
2 ms, lags to 1 s, with it switched off and on in turn in one process, best of
``--repeat`` CPU seconds each. ``--join-ab`` does the same for the medians of hops into
joins (``infer.convolution._join_medians``) on the multitier trace and TraceWeaver's
node and media recordings at load 75 (when ``../shared/data/traceweaver`` is there).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import tracemalloc
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa

# benchmarks/synth.py would shadow the synth package when this runs as a file.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import infer  # noqa: E402
import synth  # noqa: E402
import tracefmt  # noqa: E402
from infer._convsignal import Correlator  # noqa: E402, PLC2701 (the kernel measured alone)
from infer.callpairs import node_codes  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "samples" / "synth" / "multitier.toml"
_TMP = Path(tempfile.mkdtemp(prefix="wirepath-conv-bench-"))


def make_trace(messages: int, parallelism: float) -> pa.Table:
    config = replace(synth.load_config(CONFIG), messages=messages, parallelism=parallelism)
    path = _TMP / f"mt-{messages}-{parallelism:g}.parquet"
    synth.generate_trace(config, path)
    return tracefmt.read_trace(path)


def timed(trace: pa.Table, **kw: object) -> tuple[float, float, infer.ConvolutionResult]:
    """Seconds and peak traced memory (MB) of one inference."""
    tracemalloc.start()
    t0 = time.perf_counter()
    r = infer.infer_convolution(trace, **kw)  # type: ignore[arg-type]
    dt = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1] / 1e6
    tracemalloc.stop()
    return dt, peak, r


def edge_pairs(trace: pa.Table, quantum_s: float, max_lag: int) -> tuple[Correlator, list[tuple[int, int]]]:
    """A correlator over the trace's edges and every (edge into B, edge out of B) pair."""
    t = tracefmt.sort_trace(trace)
    nodes = node_codes(t)
    n = len(nodes.names)
    ts = t["timestamp"].cast(pa.int64()).to_numpy()
    slots = np.floor((ts - ts[0]) / (quantum_s * 1e9)).astype(np.int64)
    key, edge = np.unique(nodes.sender * n + nodes.receiver, return_inverse=True)
    corr = Correlator(slots, edge.ravel(), key.size, int(slots[-1]) + 1, max_lag, 0, method="fft")
    pairs = [(a, b) for a in range(key.size) for b in range(key.size) if key[a] % n == key[b] // n]
    return corr, pairs


def naive_vs_fft(trace: pa.Table, quantum_s: float, max_lag: int) -> str:
    corr, pairs = edge_pairs(trace, quantum_s, max_lag)
    signals = {}
    for e in range(corr.counts.size):
        raw = np.bincount(corr._slots[corr._bounds[e] : corr._bounds[e + 1]], minlength=corr.n_slots)
        signals[e] = (np.sqrt(raw), raw.astype(np.float64))
    t0 = time.perf_counter()
    direct = {}
    for a, b in pairs:
        out = []
        for k in (0, 1):
            padded = np.concatenate([signals[b][k], np.zeros(max_lag)])
            out.append(np.correlate(padded, signals[a][k], mode="valid")[: max_lag + 1])
        direct[(a, b)] = out
    t_naive = time.perf_counter() - t0
    t0 = time.perf_counter()
    fft = {p: corr.correlate(*p) for p in pairs}
    t_fft = time.perf_counter() - t0
    scale = corr.n_slots / corr.overlap
    diff = max(
        float(np.max(np.abs(fft[p][k] / scale - direct[p][k]) / max(1.0, np.abs(direct[p][k]).max())))
        for p in pairs
        for k in (0, 1)
    )
    return (
        f"| {corr.n_slots:,} | {max_lag} | {len(pairs)} | {t_naive:.2f} s | {t_fft:.2f} s | "
        f"{t_naive / t_fft:.0f}x | {diff:.1e} |"
    )


def ab(traces: list[tuple[str, pa.Table]], repeat: int, seam: str, label: str) -> None:
    """``--fine-ab`` / ``--join-ab``: CPU seconds with ``infer.convolution``'s step
    ``seam`` switched off and on, turn about, the best of ``repeat`` each; beside them
    the fine spikes and the hops given a median by the last run."""
    from infer import convolution

    kept = getattr(convolution, seam)
    print(f"| trace | messages | without {label} | with it | fine spikes | hops with a median |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, trace in traces:
        best = {False: np.inf, True: np.inf}
        for _ in range(repeat):
            for on in (False, True):
                # A benchmark seam: the run as it was before the step existed.
                setattr(convolution, seam, kept if on else (lambda *_a, **_k: None))
                t0 = time.process_time()
                r = infer.infer_convolution(trace, quantum_s=0.001, max_lag_s=1.0, band_s=0.002)
                best[on] = min(best[on], time.process_time() - t0)
        setattr(convolution, seam, kept)
        medians = sum(m is not None for p in r.paths for m in p.medians_s)
        print(
            f"| {name} | {trace.num_rows:,} | {best[False]:.3f} s | {best[True]:.3f} s | "
            f"{r.stats['spikes_fine']} | {medians} |",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--skip-big-fft", action="store_true", help="leave out the FFT run at S in the millions")
    ap.add_argument("--fine-ab", action="store_true", help="instead: the fine spike's cost, off and on")
    ap.add_argument("--join-ab", action="store_true", help="instead: the join medians' cost, off and on")
    ap.add_argument("--repeat", type=int, default=3, help="--fine-ab, --join-ab: runs of each, the best kept")
    args = ap.parse_args()
    lines = []
    dense = make_trace(args.messages, 40.0)
    sparse = make_trace(args.messages, 1.0)
    if args.fine_ab:
        ab(
            [("multitier.toml (parallelism 40)", dense), ("same, parallelism 1", sparse)],
            args.repeat,
            "_fine_spike",
            "the fine spike",
        )
        return
    if args.join_ab:
        real = [
            ROOT.parent / "shared" / "data" / "traceweaver" / f"{n}_load75.jsonl.gz"
            for n in ("node", "media")
        ]
        recordings = [(p.name.split(".")[0], tracefmt.read_jaeger(p)) for p in real if p.is_file()]
        ab(
            [("multitier.toml (parallelism 40)", dense), *recordings],
            args.repeat,
            "_join_medians",
            "join medians",
        )
        return
    for name, trace in (("multitier.toml (parallelism 40)", dense), ("same, parallelism 1", sparse)):
        ts = trace["timestamp"].cast(pa.int64()).to_numpy()
        span = (ts.max() - ts.min()) / 1e9
        for method in ("auto", "fft"):
            if method == "fft" and args.skip_big_fft and span > 100:
                continue
            dt, peak, r = timed(trace, quantum_s=0.001, max_lag_s=1.0, band_s=0.002, method=method)
            lines.append(
                f"| {name} | {trace.num_rows:,} | {span:,.1f} s | {r.stats['quanta']:,} | {method} | "
                f"{r.stats['pairs_correlated']} ({r.stats['pairs_direct']} direct) | {dt:.2f} s | "
                f"{peak:.0f} MB |"
            )
            print(lines[-1], flush=True)
    print()
    print("| trace | messages | span | S | method | edge pairs | time | peak traced memory |")
    print("|---|---:|---:|---:|---|---:|---:|---:|")
    print("\n".join(lines))

    print("\nRun time against S (the parallelism-1 trace; quantum varies, lags up to 1 s):\n")
    print("| quantum | S | FFT length n | FFTs | time, fft | ns per n log2 n | time, auto (direct pairs) |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    quanta = [0.1, 0.03, 0.01, 0.003] + ([] if args.skip_big_fft else [0.001])
    for q in quanta:
        dt, _, r = timed(sparse, quantum_s=q, max_lag_s=max(1.0, 20 * q), band_s=2 * q, method="fft")
        n = r.stats["fft_length"]
        per = dt / (r.stats["ffts"] * n * np.log2(n)) * 1e9
        dt_auto, _, ra = timed(sparse, quantum_s=q, max_lag_s=max(1.0, 20 * q), band_s=2 * q, method="auto")
        print(
            f"| {q * 1e3:g} ms | {r.stats['quanta']:,} | {n:,} | {r.stats['ffts']} | {dt:.2f} s | "
            f"{per:.2f} | "
            f"{dt_auto:.2f} s ({ra.stats['pairs_direct']}) |",
            flush=True,
        )

    print("\nBaseline: every edge pair's two correlations (square-rooted and raw) at lags 0..L,\n")
    print("| S | L | edge pairs | numpy.correlate | FFT (ours) | speed-up | max rel. difference |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for q, lags in ((0.3, 100), (0.1, 100), (0.1, 300), (0.1, 1000)):
        print(naive_vs_fft(sparse, q, lags), flush=True)


if __name__ == "__main__":
    main()

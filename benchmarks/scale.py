"""Scaling past one process: each verb in-process next to a local Dask cluster, same run.

    python benchmarks/scale.py [--workers 2] [--messages 400000] [--parallelism 10]
        [--config gateway-fanout.toml] [--packets 2000000]
        [--sections ingest,nesting,convolution,trend]

For every verb that takes ``--workers`` / ``--scheduler`` (``tracefmt.cluster``): the
wall time and CPU of the in-process run, the wall time on a local cluster of
``--workers`` processes (the cluster's start apart), whether the answers are identical,
and the bytes that crossed to and from the workers (pickled sizes of what was sent once
per run, per map and back). From the nesting run, the part of the time spent in tasks
(what more machines divide) against the driver's part (what they do not), and from
those a projection for a trace of 1 billion messages on N machines. docs/scaling.md
explains each verb's partitioning; BENCHMARKS.md records the numbers. On the 2-core
machine this was written on, two workers cannot beat one process by much: the figures
that carry over to a real cluster are the split of time and the bytes moved.
"""

from __future__ import annotations

import argparse
import pickle
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

# benchmarks/synth.py would shadow the synth package when this runs as a file.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import synth  # noqa: E402
from tracefmt.cluster import DaskRunner, open_runner  # noqa: E402

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


class Metered:
    """A runner that passes everything to ``inner`` and counts what crosses: pickled
    bytes shared once, sent per map (common arguments and items) and returned."""

    def __init__(self, inner: DaskRunner) -> None:
        self.inner = inner
        self.shared = self.sent = self.returned = 0
        self.maps = self.tasks = 0
        self.map_s = 0.0

    @property
    def width(self) -> int:
        return self.inner.width

    def share(self, value: Any) -> Any:
        self.shared += len(pickle.dumps(value, protocol=5))
        return self.inner.share(value)

    def map(self, fn: Any, items: Any, **common: Any) -> list:
        from dask.distributed import Future

        self.maps += 1
        self.tasks += len(items)
        fresh = [v for v in common.values() if not isinstance(v, Future)]
        self.sent += sum(len(pickle.dumps(v, protocol=5)) for v in [*fresh, *items])
        t = time.perf_counter()
        out = self.inner.map(fn, items, **common)
        self.map_s += time.perf_counter() - t
        self.returned += len(pickle.dumps(out, protocol=5))
        return out

    def row(self) -> str:
        return (
            f"{self.maps} maps, {self.tasks} tasks; shared {self.shared / 1e6:.1f} MB, sent "
            f"{self.sent / 1e6:.1f} MB, returned {self.returned / 1e6:.1f} MB; {self.map_s:.1f} s in maps"
        )


def _timed(fn: Any) -> tuple[Any, float, float]:
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t, time.process_time() - c


def _trace(config: str, messages: int, parallelism: float) -> Any:
    cfg = synth.load_config(SAMPLES / "synth" / config)
    return synth.generate_table(replace(cfg, messages=messages, parallelism=parallelism, seed=1))[0]


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def bench_nesting(run: DaskRunner, messages: int, parallelism: float, config: str) -> dict[str, Any]:
    import infer

    trace = _trace(config, messages, parallelism)
    here, wall, cpu = _timed(lambda: infer.infer_nesting(trace))
    meter = Metered(run)
    there, cwall, _ = _timed(lambda: infer.infer_nesting(trace, runner=meter))
    same = np.array_equal(here.parent, there.parent) and here.to_json() == there.to_json()
    # The in-process time of the same tasks: the cluster's map time less its round trips
    # is not measurable from here, so the driver's part is what the cluster run spent
    # outside its maps.
    driver_s = cwall - meter.map_s
    workers_mb = sorted(run.client.run(_peak_rss_mb).values())
    print(
        f"nesting, default preset, {config}, {messages:,} messages, parallelism {parallelism:g}: "
        f"in-process {wall:.1f} s wall ({cpu:.1f} s CPU); {run.width} workers {cwall:.1f} s wall "
        f"({wall / cwall:.2f}x); identical: {same}"
    )
    print(
        f"  {meter.row()}; driver (outside maps) {driver_s:.1f} s; peak RSS: this process "
        f"{_peak_rss_mb():,.0f} MB, workers {', '.join(f'{m:,.0f}' for m in workers_mb)} MB"
    )
    return {
        "messages": messages,
        "pairs": len(here.pairs),
        "wall": wall,
        "cpu": cpu,
        "cluster_wall": cwall,
        "map_s": meter.map_s,
        "driver_s": driver_s,
        "maps": meter.maps,
        "shared": meter.shared,
        "sent": meter.sent,
        "returned": meter.returned,
        "same": same,
    }


def bench_convolution(run: DaskRunner, messages: int) -> dict[str, Any]:
    import infer

    trace = _trace("gateway-fanout.toml", messages, 4.0)
    kw = {"quantum_s": 1e-3, "max_lag_s": 1.0, "band_s": 2e-3}
    here, wall, cpu = _timed(lambda: infer.infer_convolution(trace, **kw))
    meter = Metered(run)
    there, cwall, _ = _timed(lambda: infer.infer_convolution(trace, runner=meter, **kw))
    same = here.to_json() == there.to_json()
    print(
        f"convolution, gateway-fanout (1 ms quanta, lags to 1 s), {messages:,} messages: "
        f"in-process {wall:.1f} s wall ({cpu:.1f} s CPU); "
        f"{run.width} workers {cwall:.1f} s wall; identical: {same}"
    )
    print(f"  {meter.row()}")
    return {"wall": wall, "cluster_wall": cwall, "same": same}


def bench_trend(run: DaskRunner, series: int, runs: int) -> dict[str, Any]:
    import trend

    rng = np.random.default_rng(3)
    hour = 3600 * 10**9
    many = []
    for k in range(series):
        level = np.full(runs, 10e6 * (1 + k % 7))
        level[runs * 2 // 3 :] *= 1 + rng.choice([-0.05, 0.0, 0.04])  # some regress, some improve
        many.append(
            trend.Series(
                f"test-{k:05d}",
                f"tb-{k % 4}",
                "pps",
                "bigger-is-better",
                tuple(str(1000 + r) for r in range(runs)),
                np.arange(runs, dtype=np.int64) * 12 * hour,
                tuple(lv * (1 + rng.normal(0, 0.004, 5)) for lv in level),
            )
        )
    here, wall, cpu = _timed(lambda: trend.analyze_all(many))
    meter = Metered(run)
    there, cwall, _ = _timed(lambda: trend.analyze_all(many, runner=meter))
    same = [t.to_json() for t in here] == [t.to_json() for t in there]
    print(
        f"trend analyze (mdl), {series:,} series of {runs} runs x 5 trials: in-process {wall:.1f} s wall "
        f"({cpu:.1f} s CPU); {run.width} workers {cwall:.1f} s wall; identical: {same}"
    )
    print(f"  {meter.row()}")
    return {"wall": wall, "cluster_wall": cwall, "same": same}


def _decoded(table: Any) -> Any:
    """``table`` with its dictionary columns decoded (their order depends on the writer)."""
    import pyarrow as pa

    return pa.table(
        {c: table[c].cast(table[c].type.value_type) if pa.types.is_dictionary(table[c].type) else table[c]
         for c in table.column_names}
    )  # fmt: skip


def bench_ingest(run: DaskRunner, packets: int, workdir: Path) -> dict[str, Any]:
    import importlib.util

    import capture
    import tracefmt

    spec = importlib.util.spec_from_file_location("ingest", Path(__file__).with_name("ingest.py"))
    assert spec is not None
    assert spec.loader is not None
    ingest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ingest)
    pcap = workdir / "keepalive.pcap"
    ingest.write_capture(pcap, packets)
    here_out, there_out = workdir / "here.parquet", workdir / "there.parquet"
    _, wall, cpu = _timed(lambda: capture.convert_pcaps([pcap], here_out))
    meter = Metered(run)
    _, cwall, _ = _timed(lambda: capture.convert_pcaps([pcap], there_out, runner=meter))
    a, b = tracefmt.read_trace(here_out), tracefmt.read_trace(there_out)
    same = _decoded(a).equals(_decoded(b))  # dictionaries' order depends on the writer
    workers_mb = sorted(run.client.run(_peak_rss_mb).values())
    print(
        f"capture pcap, keep-alive HTTP, {packets:,} packets ({pcap.stat().st_size / 1e6:.0f} MB): "
        f"in-process {wall:.1f} s wall ({cpu:.1f} s CPU); {run.width} workers {cwall:.1f} s wall "
        f"({wall / cwall:.2f}x); identical (dictionaries decoded): {same}"
    )
    print(f"  {meter.row()}; workers' peak RSS {', '.join(f'{m:,.0f}' for m in workers_mb)} MB")
    return {"wall": wall, "cluster_wall": cwall, "same": same}


def project(n: dict[str, Any], machines: tuple[int, ...] = (1, 4, 16, 64)) -> None:
    """A trace of 1e9 messages, from the nesting run's split: the tasks' time divides by
    the machines, the driver's does not; both grow linearly with the trace at a fixed
    parallelism (the candidates per call do not grow)."""
    scale = 1e9 / n["messages"]
    tasks_s = max(n["cpu"] - n["driver_s"], 0.0)  # the in-process work the tasks took over
    driver_s = n["driver_s"]
    per_pair = (n["shared"] / max(n["pairs"], 1), (n["sent"] + n["returned"]) / max(n["pairs"], 1))
    print(
        f"projection, 1e9 messages ({scale:,.0f} x this trace): shared {per_pair[0]:.0f} B and "
        f"{per_pair[1]:.0f} B sent+returned per call pair -> {n['shared'] * scale / 1e9:.0f} GB shared "
        f"to each worker, {(n['sent'] + n['returned']) * scale / 1e9:.0f} GB moved over the run"
    )
    for m in machines:
        t = (driver_s + tasks_s / m) * scale
        print(f"  {m:3d} machines: about {t / 3600:.1f} h (driver {driver_s * scale / 3600:.1f} h of it)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--messages", type=int, default=400_000)
    ap.add_argument("--parallelism", type=float, default=10.0)
    ap.add_argument("--config", default="gateway-fanout.toml", help="synth workload of the nesting run")
    ap.add_argument("--series", type=int, default=2_000)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--packets", type=int, default=2_000_000, help="packets of the ingest run")
    ap.add_argument("--sections", default="ingest,nesting,convolution,trend")
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args(argv)
    sections = set(args.sections.split(","))
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        t = time.perf_counter()
        with open_runner(workers=args.workers) as run:
            assert isinstance(run, DaskRunner)
            print(f"local cluster of {args.workers} workers started in {time.perf_counter() - t:.1f} s")
            if "ingest" in sections:
                bench_ingest(run, args.packets, Path(tmp))
            if "nesting" in sections:
                project(bench_nesting(run, args.messages, args.parallelism, args.config))
            if "convolution" in sections:
                bench_convolution(run, args.messages)
            if "trend" in sections:
                bench_trend(run, args.series, args.runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

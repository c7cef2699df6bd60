"""The demo's wall time, and the report and exports, each beside a baseline measured in the same run.

    python benchmarks/demo.py [--messages 200000] [--workdir DIR]

1. ``wirepath demo`` in a fresh process (the README's main job; goal < 60 s), with and
   without convolution; baseline: the same job (without convolution) as the separate
   CLI verbs a user would chain (synth x2, infer nesting x2, viz diff, viz draw x2,
   report; the diff and report with both instances tables, as the demo), each a fresh
   process.
2. The HTML report of the slow run (with its diff) and the exports of its instances
   (spans per second); baseline for OTLP: the same spans built as the
   ``opentelemetry-proto`` protobuf and written with ``json_format.MessageToJson``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# benchmarks/synth.py would shadow the synth package when this runs as a file.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import infer  # noqa: E402
from viz.diff import diff_paths  # noqa: E402
from viz.export import export_traces  # noqa: E402
from viz.report import build_report  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
WIREPATH = [sys.executable, "-m", "wirepath"]


def _run(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def _peak_children_mb() -> float:
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def _verbs(out: Path, messages: int) -> float:
    """The demo's job as separate verbs, one process each (no convolution)."""
    total = 0.0
    for name, cfg in (("base", "multitier.toml"), ("slow", "multitier-slow.toml")):
        total += _run(
            [*WIREPATH, "synth", f"samples/synth/{cfg}", "--messages", str(messages), "--parallelism", "2",
             "--seed", "1", "--out", str(out / f"{name}.parquet"), "--truth", str(out / f"{name}-truth.json")]
        )  # fmt: skip
        total += _run(
            [*WIREPATH, "infer", "nesting", str(out / f"{name}.parquet"), "--board", "joint", "--density",
             "--overlap-penalty", "0", "--out", str(out / f"{name}-paths.json"),
             "--instances", str(out / f"{name}-instances.parquet")]
        )  # fmt: skip
        total += _run(
            [*WIREPATH, "viz", "draw", str(out / f"{name}-paths.json"), "--top", "3", "--collapse", "AP*",
             "--collapse", "DB*", "--out", str(out / f"{name}-top.svg")]
        )  # fmt: skip
    collapse = ["--collapse", "AP*", "--collapse", "DB*"]
    tables = [str(out / "base-instances.parquet"), str(out / "slow-instances.parquet")]
    total += _run(
        [*WIREPATH, "viz", "diff", str(out / "base-paths.json"), str(out / "slow-paths.json"), *collapse,
         "--out", str(out / "diff.svg"), "--instances", *tables]
    )  # fmt: skip
    total += _run(
        [*WIREPATH, "report", str(out / "slow-paths.json"), "--diff", str(out / "base-paths.json"), *collapse,
         "--out", str(out / "report.html"), "--diff-instances", tables[0], "--instances", tables[1]]
    )  # fmt: skip
    return total


def _otlp_protobuf(table) -> str:
    """Baseline: the same spans as protobuf messages, written by the reference JSON printer."""
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    req = ExportTraceServiceRequest()
    callee = table["callee"].cast("string").to_pylist()
    caller = table["caller"].cast("string").to_pylist()
    t_call = table["t_call"].cast("int64").to_numpy()
    t_ret = table["t_return"].cast("int64").to_numpy()
    parent = table["parent"].fill_null(-1).to_numpy()
    inst = table["instance"].to_numpy()
    pattern = table["pattern"].cast("string").to_pylist()
    conf = table["confidence"].to_numpy()
    by_service = {}
    for k in range(table.num_rows):
        rs = by_service.get(callee[k])
        if rs is None:
            rs = by_service[callee[k]] = req.resource_spans.add()
            rs.resource.attributes.add(key="service.name").value.string_value = callee[k]
            rs.scope_spans.add().scope.name = "wirepath"
        s = rs.scope_spans[0].spans.add()
        s.trace_id = int(inst[k]).to_bytes(16, "big")
        s.span_id = (k + 1).to_bytes(8, "big")
        if parent[k] >= 0:
            s.parent_span_id = int(parent[k] + 1).to_bytes(8, "big")
        s.name = f"{caller[k]} -> {callee[k]}"
        s.kind = 2
        s.start_time_unix_nano = int(t_call[k])
        s.end_time_unix_nano = int(t_ret[k])
        s.attributes.add(key="wirepath.pattern").value.string_value = pattern[k]
        s.attributes.add(key="wirepath.confidence").value.double_value = float(conf[k])
    return json_format.MessageToJson(req)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--workdir")
    args = ap.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="wirepath-demo-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    n = str(args.messages)

    demo_s = _run([*WIREPATH, "demo", "--out", str(work / "demo"), "--messages", n])
    demo_rss = _peak_children_mb()
    demo_nc_s = _run([*WIREPATH, "demo", "--out", str(work / "demo-nc"), "--messages", n, "--no-convolution"])
    (work / "verbs").mkdir(exist_ok=True)
    verbs_s = _verbs(work / "verbs", args.messages)

    d = work / "demo"
    slow = json.loads((d / "slow-paths.json").read_text())
    base = json.loads((d / "base-paths.json").read_text())
    t0 = time.perf_counter()
    diff_paths(base, slow, collapse=["AP*", "DB*"])
    diff_s = time.perf_counter() - t0
    tables = (
        infer.read_instances(d / "base-instances.parquet"),
        infer.read_instances(d / "slow-instances.parquet"),
    )
    t0 = time.perf_counter()
    diff_paths(base, slow, collapse=["AP*", "DB*"], instances=tables)
    diff_dist_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    page = build_report(slow, base=base, collapse=["AP*", "DB*"], top=10)
    report_s = time.perf_counter() - t0
    table = infer.read_instances(d / "slow-instances.parquet")
    rows = []
    for fmt in ("otlp", "zipkin", "jaeger"):
        t0 = time.perf_counter()
        json.dumps(export_traces(table, fmt), separators=(",", ":"))
        rows.append((fmt, time.perf_counter() - t0))
    t0 = time.perf_counter()
    _otlp_protobuf(table)
    proto_s = time.perf_counter() - t0
    spans = table.num_rows + int(table["parent"].null_count)

    print(f"messages per run: {args.messages:,}; workdir {work}")
    print("| measure | wirepath | baseline | goal | met |")
    print("|---|---:|---:|---|---|")
    print(f"| `wirepath demo` wall time (s) | {demo_s:.1f} | | < 60 | {'yes' if demo_s < 60 else 'no'} |")
    print(f"| `wirepath demo` peak RSS (MB) | {demo_rss:,.0f} | | | |")
    same = f"{verbs_s:.1f} (the same job as 9 verbs)"
    print(f"| `wirepath demo --no-convolution` (s) | {demo_nc_s:.1f} | {same} | | |")
    print(f"| diff of the two paths files (s) | {diff_s:.3f} | | | |")
    requests = sum(int(t["parent"].null_count) for t in tables)
    print(
        f"| diff with both instances tables, {requests:,} requests (s) | {diff_dist_s:.3f} "
        f"| {diff_s:.3f} (means only) | | |"
    )
    print(f"| HTML report with diff, 10 patterns (s) | {report_s:.2f} | | | |")
    print(f"| HTML report size (KiB) | {len(page.encode()) / 1024:,.0f} | | | |")
    for fmt, sec in rows:
        base_txt = f"{spans / proto_s:,.0f} (protobuf + MessageToJson)" if fmt == "otlp" else ""
        print(f"| export {fmt}, {spans:,} spans (spans/s) | {spans / sec:,.0f} | {base_txt} | | |")


if __name__ == "__main__":
    main()

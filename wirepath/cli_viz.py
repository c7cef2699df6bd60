"""The ``viz``-related verbs of the command line: ``viz draw``, ``viz diff``, ``report``,
``export`` and ``demo``."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import infer
import tracefmt
import viz
from tracefmt import ParameterError
from wirepath._cli import Parser, add_verb, count, emit, probability

__all__ = ["register"]


def _graph_out(args: argparse.Namespace, default: str) -> Path:
    out = Path(args.out or default)
    if args.format and out.suffix.lstrip(".").lower() not in ("", args.format):
        raise ParameterError(f"--format {args.format} does not match the file name {out}")
    return out


def beside(source: str, suffix: str) -> str:
    """Where a verb writes without ``--out``: beside the input it is made from, named
    after it (``run/slow.json`` -> ``run/slow-diff.svg`` for ``-diff.svg``).

    >>> beside("run/slow.json", "-diff.svg"), beside("paths.json", ".html")
    ('run/slow-diff.svg', 'paths.html')
    """
    path = Path(source)
    return str(path.with_name(path.stem + suffix))


def _left_out(patterns: int, instances: int, min_confidence: float) -> str:
    if not min_confidence:
        return ""
    return (
        f"; left out {patterns:,} patterns ({instances:,} instances) of confidence below {min_confidence:g}"
    )


def _cmd_draw(args: argparse.Namespace) -> int:
    # The default output is named after the input: checked once filled in.
    out = _graph_out(args, beside(args.paths, "." + (args.format or "svg")))
    tracefmt.distinct_outputs([args.paths], [out])
    doc = tracefmt.read_paths(args.paths)
    doc, left_patterns, left_instances = viz.confident_patterns(doc, args.min_confidence)
    merged = viz.collapse_replicas(doc, args.collapse) if doc["algorithm"] == "nesting" else doc
    text = viz.paths_dot(merged, top=args.top, sort=args.sort, min_share=args.min_share)
    viz.write_graph(text, out, args.format)
    if doc["algorithm"] == "nesting":
        shown = viz.select_patterns(merged, top=args.top, sort=args.sort, min_share=args.min_share)
        what = f"{len(shown)} of {len(merged['patterns']):,} patterns"
        if args.collapse:
            what += f" ({len(doc['patterns']):,} before merging replicas)"
    else:
        shown = doc["paths"][: args.top]
        what = f"{len(shown)} of {len(doc['paths']):,} convolution paths"
    text = f"drew {what} into {out}" + _left_out(left_patterns, left_instances, args.min_confidence)
    emit(args, {"out": str(out), "shown": len(shown)}, text)
    return 0


def _cmd_diff(args: argparse.Namespace) -> int:
    out = _graph_out(args, beside(args.slow, "-diff." + (args.format or "svg")))
    tracefmt.distinct_outputs([args.base, args.slow, *(args.instances or [])], [out], what="an input")
    base, slow = tracefmt.read_paths(args.base), tracefmt.read_paths(args.slow)
    if base["algorithm"] == slow["algorithm"] == "convolution":
        if args.instances:
            raise tracefmt.ParameterError("--instances applies to nesting paths files (convolution has none)")
        return _convolution_diff(args, base, slow)
    tables = None
    if args.instances:
        tables = (infer.read_instances(args.instances[0]), infer.read_instances(args.instances[1]))
    diff = viz.diff_paths(base, slow, collapse=args.collapse, min_count=args.min_count, instances=tables)
    viz.write_graph(viz.diff_dot(diff, top=args.top), out, args.format)
    lines = [diff.sentence(), "top changes (where the time was added or saved):"]
    lines += ["  " + line for line in diff.text_lines(args.changes)]
    lines.append(
        f"{len(diff.patterns):,} patterns in both runs, {len(diff.new):,} only in {args.slow}, "
        f"{len(diff.gone):,} only in {args.base}; drew the top {min(args.top, len(diff.patterns))} into {out}"
    )
    doc = diff.to_json()
    for p in doc["patterns"]:
        p.pop("root", None)
        p.pop("base_root", None)
    emit(args, {**doc, "out": str(out)}, "\n".join(lines))
    return 0


def _convolution_diff(args: argparse.Namespace, base: dict[str, Any], slow: dict[str, Any]) -> int:
    changes = viz.diff_convolution(base, slow, collapse=args.collapse)
    out = _graph_out(args, beside(args.slow, "-diff." + (args.format or "svg")))
    viz.write_graph(viz.convolution_diff_dot(changes, top=args.top), out, args.format)
    lines = ["delay changes at the middle node of each hop pair (convolution paths):"]
    shown = tracefmt.printable  # node names come from the data: escaped, \n included
    lines += [
        f"  {viz.format_change(c['change_s']):>9}  {shown(c['label']):<28} {viz.format_s(c['base_s'])} -> "
        f"{viz.format_s(c['slow_s'])}, about {c['messages']:,} messages"
        for c in changes[: args.changes]
    ]
    if not changes:
        lines = ["no path appears in both runs: nothing to compare"]
    lines.append(f"drew the top {min(args.top, len(changes))} into {out}")
    emit(args, {"algorithm": "convolution", "changes": changes, "out": str(out)}, "\n".join(lines))
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    args.out = args.out or beside(args.paths, ".html")
    tracefmt.distinct_outputs(
        [args.paths, args.diff, args.truth, args.instances, args.diff_instances], [args.out], what="an input"
    )
    doc = tracefmt.read_paths(args.paths)
    base = tracefmt.read_paths(args.diff) if args.diff else None
    if args.truth is not None and args.instances is None:
        raise ParameterError("--truth needs --instances (this run's instances, scored against the truth)")
    if args.diff_instances is not None and (args.diff is None or args.instances is None):
        raise ParameterError("--diff-instances needs --diff and --instances (the base run's and this run's)")
    if args.instances is not None and args.truth is None and args.diff_instances is None:
        raise ParameterError(
            "--instances is used with --truth (scored against the truth) or with --diff-instances "
            "(the diff counts the requests that changed); give one of them"
        )
    tables = None
    if args.diff_instances is not None:
        tables = (infer.read_instances(args.diff_instances), infer.read_instances(args.instances))
    evaluation = None
    if args.truth:
        evaluation = infer.evaluate_paths(
            doc, tracefmt.read_trace(args.truth), instances=infer.read_instances(args.instances)
        )
    doc, left_patterns, left_instances = viz.confident_patterns(doc, args.min_confidence)
    page = viz.build_report(
        doc,
        base=base,
        top=args.top,
        sort=args.sort,
        min_share=args.min_share,
        collapse=args.collapse,
        title=args.title or f"wirepath report: {Path(args.paths).name}",
        evaluation=evaluation,
        instances=tables,
    )
    out = viz.write_report(page, args.out)
    text = f"wrote {out} ({len(page.encode('utf-8')) / 1024:,.0f} KiB, self-contained)"
    text += _left_out(left_patterns, left_instances, args.min_confidence)
    emit(args, {"out": str(out), "bytes": len(page.encode("utf-8"))}, text)
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    args.out = args.out or beside(args.instances, f"-{args.format}.json")
    tracefmt.distinct_outputs([args.instances], [args.out])
    table = infer.read_instances(args.instances)
    left = ""
    if args.min_confidence:
        table, instances, links = infer.confident_instances(table, args.min_confidence)
        left = (
            f"; left out {instances:,} requests holding {links:,} links of confidence "
            f"below {args.min_confidence:g}"
        )
    counts = viz.write_export(table, args.format, args.out, max_traces=args.max_traces)
    text = f"wrote {counts['traces']:,} traces ({counts['spans']:,} spans) as {args.format} to {args.out}"
    text += left
    emit(args, {"out": args.out, "format": args.format, **counts}, text)
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()

    def step(text: str) -> None:
        if not args.json:
            print(f"... {text}", file=sys.stderr, flush=True)

    result = viz.run_demo(
        args.out,
        messages=args.messages,
        parallelism=args.parallelism,
        seed=args.seed,
        collapse=args.collapse if args.collapse is not None else ("AP*", "DB*"),
        top=args.top,
        convolution=not args.no_convolution,
        on_step=step,
        force=args.force,
    )
    elapsed = time.perf_counter() - t0
    base, slow = result.runs["base"], result.runs["slow"]
    lines = [
        f"two runs of the multi-tier system: {base['messages']:,} and {slow['messages']:,} messages, "
        f"{base['instances']:,} and {slow['instances']:,} requests; the slow run adds a delay somewhere",
        "nesting (default preset)"
        + (
            f" and convolution ({', '.join(f'{k}={v}' for k, v in viz.DEMO_CONVOLUTION.items())})"
            if result.convolution
            else ""
        )
        + "; replicas merged: "
        + ", ".join(result.diff.params["collapse"]),
        "",
        "slowest patterns of the slow run (by total latency):",
    ]
    for k, pat in enumerate(result.top_patterns, 1):
        lines.append(f"#{k} {pat['id']}  {pat['count']:,} instances, total {pat['total_latency_s']:.3f} s")
        lines += viz.tree_lines(pat)
    lines += ["", "where the time went:", f"  {result.sentence}"]
    if result.diff.changes:
        lines.append(f"  ({result.diff.changes[0]['where']})")
    lines += ["top changes:"] + ["  " + line for line in result.diff.text_lines(5)]
    conv = result.convolution_sentence()
    if conv:
        lines += ["", conv]
    lines += ["", f"wrote into {args.out}/:"]
    names = [
        ("report", "the HTML report: open it in a browser"),
        ("diff_graph", "diff graph, red where slower"),
        ("slow_graph", "top patterns of the slow run"),
        ("base_graph", "top patterns of the base run"),
        ("slow_convolution_graph", "top convolution paths of the slow run"),
        ("otlp", "slow run's first requests as OTLP/JSON traces"),
        ("slow_paths", "paths files (docs/files.md): base-paths.json, slow-paths.json"),
    ]
    lines += [f"  {result.files[key]:<34} {what}" for key, what in names if key in result.files]
    lines.append(f"done in {elapsed:.1f} s")
    emit(args, {**result.to_json(), "elapsed_s": elapsed}, "\n".join(lines))
    return 0


def _view_options(p: argparse.ArgumentParser, top: int) -> None:
    p.add_argument("--top", type=count(1), default=top, metavar="N", help=f"patterns to show (default {top})")
    p.add_argument(
        "--sort",
        choices=list(tracefmt.PATTERN_SORTS),
        default="total",
        help="order patterns by (default total)",
    )
    p.add_argument(
        "--min-share",
        type=float,
        default=0.0,
        metavar="F",
        help="drop patterns below this share (0..1) of all latency (or instances, --sort count)",
    )
    _collapse_option(p, [])
    _min_confidence_option(
        p, "leave out the patterns whose confidence (the share of their instances exactly right) is below P"
    )


def _min_confidence_option(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--min-confidence", type=probability, default=0.0, metavar="P", help=f"{what} (0..1)")


def _collapse_option(p: argparse.ArgumentParser, default: Any = None) -> None:
    p.add_argument(
        "--collapse",
        action="append",
        default=default,
        metavar="GLOB",
        help="merge replicas: nodes matching GLOB (e.g. 'WS*') become one; repeatable",
    )


def register(verbs: argparse._SubParsersAction, algos: argparse._SubParsersAction) -> None:
    """Add this module's verbs to ``verbs`` (and algorithms to ``infer``'s ``algos``)."""
    _register_viz(verbs)
    _register_report(verbs)
    _register_export(verbs)
    _register_demo(verbs)


def _register_viz(verbs: argparse._SubParsersAction) -> None:
    """``viz`` with its sub-verbs ``draw`` and ``diff``."""
    p = verbs.add_parser(
        "viz",
        help="draw paths files, or the diff of two runs",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Draw path patterns with graphviz.\n\n"
        "  wirepath viz draw PATHS.json [--out FILE.svg|.png|.pdf|.dot]\n"
        "  wirepath viz diff BASE.json SLOW.json [--out SLOW-diff.svg]",
    )
    sub = p.add_subparsers(dest="viz_verb", metavar="WHAT", parser_class=Parser)
    sub.required = True
    _register_draw(sub)
    _register_diff(sub)


def _register_draw(sub: argparse._SubParsersAction) -> None:
    d = add_verb(
        sub,
        "draw",
        _cmd_draw,
        "draw the top patterns of a paths file",
        "Draw the top patterns of a paths file (nesting trees or convolution chains).\n"
        "Each box: a visit with its mean and p99 latency (self plus calls below) and the\n"
        "time the node spends itself, shaded by its share of the request; the thick red box\n"
        "holds the largest share. Each edge: the mean delay from the parent's call.\n"
        "The picture format comes from --out's suffix (.svg .png .pdf, or .dot for the\n"
        "DOT text, which needs no graphviz).\n\n"
        "example: wirepath viz draw paths.json --out top.svg --top 3 --collapse 'AP*'",
    )
    d.add_argument("paths", help="paths file (JSON) from wirepath infer")
    d.add_argument("--out", help="picture to write (default: PATHS with .svg)")
    d.add_argument("--format", choices=list(viz.FORMATS), help="picture format (default: from --out)")
    _view_options(d, 5)


def _register_diff(sub: argparse._SubParsersAction) -> None:
    d = add_verb(
        sub,
        "diff",
        _cmd_diff,
        "compare two runs: where did the time go",
        "Compare a base run and a slow run (two paths files): patterns are matched by\n"
        "shape; every visit and call is labelled base -> slow with its change, red where\n"
        "the time was added (green where saved). Changes are located where the time is\n"
        "spent: the wait of a node before a call, after its last call, or inside a node that\n"
        "calls nobody; the top ones are printed, pooled over patterns: those told apart\n"
        "from noise (three standard errors) first, then by the time they add in all\n"
        "(change a request x requests). Patterns are numbered as the report numbers them.\n"
        "Two convolution paths files: the changes of the delays at each node are printed.\n\n"
        "example: wirepath viz diff base.json slow.json --collapse 'AP*' --collapse 'DB*'",
    )
    d.add_argument("base", help="paths file of the base (normal) run")
    d.add_argument("slow", help="paths file of the run to explain")
    d.add_argument("--out", help="diff picture to write (default: beside SLOW, SLOW-diff.svg)")
    d.add_argument("--format", choices=list(viz.FORMATS), help="picture format (default: from --out)")
    d.add_argument(
        "--top",
        type=count(1),
        default=3,
        metavar="N",
        help="patterns (convolution: hop changes) to draw (default 3)",
    )
    d.add_argument("--changes", type=count(0), default=5, metavar="N", help="changes to print (default 5)")
    d.add_argument(
        "--min-count", type=count(1), default=1, metavar="N", help="compare patterns seen N times in both"
    )
    d.add_argument(
        "--instances",
        nargs=2,
        metavar=("BASE.parquet", "SLOW.parquet"),
        help="the two runs' instances tables (infer nesting --instances): count the requests "
        "that changed and by how much, from every request's latency, with a test",
    )
    _collapse_option(d, [])


def _register_report(verbs: argparse._SubParsersAction) -> None:
    p = add_verb(
        verbs,
        "report",
        _cmd_report,
        "write a self-contained HTML report of a paths file",
        "Write one self-contained, offline HTML file: the trace summary, a sortable table\n"
        "of the top patterns (count, total latency, share, mean and p99), each pattern's\n"
        "graph as inline SVG, the diff against a base run when given, and the parameters.\n\n"
        "example: wirepath report slow.json --diff base.json --out report.html --collapse 'AP*'",
    )
    p.add_argument("paths", help="paths file (JSON) from wirepath infer")
    p.add_argument("--diff", metavar="BASE.json", help="paths file of a base run to compare against")
    p.add_argument("--out", help="HTML file to write (default: beside PATHS, PATHS.html)")
    p.add_argument("--title", help="page title")
    p.add_argument(
        "--truth",
        metavar="TRACE",
        help="the trace with its truth (synth, or converted spans): adds how the stated confidence "
        "compares with it (needs --instances)",
    )
    p.add_argument(
        "--instances",
        metavar="FILE.parquet",
        help="this run's instances ('infer nesting --instances'), for --truth or --diff-instances",
    )
    p.add_argument(
        "--diff-instances",
        metavar="BASE.parquet",
        help="the base run's instances: with --diff and --instances, the diff counts the requests "
        "that changed and by how much, tested",
    )
    _view_options(p, 10)


def _register_export(verbs: argparse._SubParsersAction) -> None:
    p = add_verb(
        verbs,
        "export",
        _cmd_export,
        "export inferred instances as traces for Jaeger, Zipkin or OpenTelemetry",
        "Turn the path instances of 'infer nesting --instances' into traces: one trace per\n"
        "request (root instance), one SERVER span per visit and one CLIENT span for the\n"
        "request's origin; pattern id, inference confidence and candidate count as attributes.\n"
        "  otlp    OTLP/JSON ExportTraceServiceRequest (an OpenTelemetry collector's OTLP/HTTP)\n"
        "  zipkin  Zipkin v2 list of spans (POST /api/v2/spans; Zipkin's UI)\n"
        "  jaeger  Jaeger's JSON ({'data': [traces]}; Jaeger UI's 'JSON file' upload)\n\n"
        "example: wirepath export inst.parquet --format jaeger --out traces.json --max-traces 500",
    )
    p.add_argument("instances", help="instances table (.parquet) from wirepath infer nesting --instances")
    p.add_argument("--format", choices=list(viz.EXPORT_FORMATS), required=True, help="trace format")
    p.add_argument("--out", help="JSON file to write (default: beside INSTANCES, INSTANCES-FORMAT.json)")
    p.add_argument("--max-traces", type=count(1), metavar="N", help="export only the first N requests")
    _min_confidence_option(
        p, "leave out the requests holding a link (a call given a parent) of confidence below P"
    )


def _register_demo(verbs: argparse._SubParsersAction) -> None:
    p = add_verb(
        verbs,
        "demo",
        _cmd_demo,
        "the main job end to end: two runs, where the time went, pictures and a report",
        "Synthesize the paper's multi-tier system twice (samples/synth/multitier.toml and\n"
        "multitier-slow.toml, which hides a delay), infer both with nesting, compare them,\n"
        "print the slowest patterns and where the time went, and write the graphs, the diff,\n"
        "the HTML report and OTLP traces into --out. Needs graphviz's dot.\n\n"
        "--out may be a new or empty directory, one an earlier demo wrote, or any other\n"
        "directory holding none of the demo's file names (base.parquet, report.html, ...);\n"
        "--force replaces such files. Files of other names are never touched.\n\n"
        "example: wirepath demo --out demo-out",
    )
    p.add_argument("--out", default="demo-out", help="output directory (default demo-out)")
    p.add_argument(
        "--force", action="store_true", help="replace files in --out named like the demo's (see above)"
    )
    p.add_argument(
        "--messages",
        type=count(1, 10**9),
        default=200_000,
        metavar="N",
        help="messages per run (default 200000)",
    )
    p.add_argument("--parallelism", type=float, default=2.0, metavar="K", help="mean parallelism (default 2)")
    p.add_argument("--seed", type=int, default=1, help="random seed of both runs (default 1)")
    p.add_argument(
        "--top", type=count(1), default=3, metavar="N", help="patterns to print and draw (default 3)"
    )
    p.add_argument("--no-convolution", action="store_true", help="skip the convolution algorithm")
    _collapse_option(p)

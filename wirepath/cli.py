"""``wirepath <verb>``: parse arguments, call one library function, write, summarize.

Exit status: 0 success, 1 a wirepath error (one ``error: ...`` line on stderr),
2 a usage error, 130 interrupted.
"""

from __future__ import annotations

import argparse
import errno
import signal
import sys
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn

import infer
import synth
import tracefmt
from tracefmt import WirepathError
from wirepath import __version__, cli_capture, cli_convolution, cli_packets, cli_trend, cli_viz
from wirepath._cli import Parser as _Parser
from wirepath._cli import UsageError as _UsageError
from wirepath._cli import add_cluster_options, add_verb, count, hold_back_pandas, probability, runner
from wirepath._cli import emit as _emit
from wirepath._cli import end_progress as _end_progress
from wirepath._cli import progress as _progress

if TYPE_CHECKING:
    from capture.synthpcap import SynthPcapReport

__all__ = ["main"]


def _output_path(args: argparse.Namespace) -> str:
    """OUTPUT, or the trace's place in --store (named by --name or the input's stem)."""
    if (args.output is None) == (args.store is None):
        raise tracefmt.ParameterError("give exactly one of OUTPUT or --store DIR")
    if args.output is not None:
        return args.output
    name = args.name or Path(args.input).name.split(".")[0]
    return str(tracefmt.Store.create(args.store).trace_path(name))


def _cmd_convert(args: argparse.Namespace) -> int:
    if args.out is not None:  # --out is OUTPUT by another name, as in merge and capture
        if args.output is not None:
            raise tracefmt.ParameterError(f"give OUTPUT ({args.output}) or --out ({args.out}), not both")
        args.output = args.out
    partition = None if args.partition is None else tracefmt.Partitioning.parse(args.partition)
    output = _output_path(args)
    progress = _progress("convert", args)
    report = tracefmt.convert_trace(
        args.input,
        output,
        skip_bad=args.skip_bad,
        sort=args.sort,
        on_progress=progress,
        at=args.at,
        partition=partition,
    )
    _end_progress(progress)
    lines = [f"wrote {report.messages:,} messages to {report.target}"]
    if partition is not None:
        lines[0] += f" in {report.parts:,} parts of at most {partition.describe()}"
    lines += report.span_lines()
    if report.skipped:
        what = "spans" if report.spans is not None else "lines"
        lines.append(f"skipped {report.skipped:,} bad {what}; first ones:")
        lines += [f"  {e}" for e in report.examples]
    if report.hashed_ids:
        lines.append(f"{report.hashed_ids:,} non-numeric ids mapped to 64-bit hashes")
    _emit(args, report.to_json(), "\n".join(lines))
    return 0


def _parse_offsets(pairs: Sequence[str], inputs: Sequence[str]) -> dict[str, int]:
    offsets: dict[str, int] = {}
    for pair in pairs:
        name, sep, value = pair.rpartition("=")
        if not sep or not name:
            raise tracefmt.ParameterError(f"--offset {pair!r} must be INPUT=DURATION, e.g. B.parquet=-12ms")
        matches = [p for p in inputs if p == name or Path(p).name == name]
        if len(matches) != 1:
            raise tracefmt.ParameterError(
                f"--offset names {name!r}, which is {'ambiguous' if matches else 'not an input'} "
                f"(inputs: {', '.join(inputs)})"
            )
        offsets[matches[0]] = tracefmt.parse_duration_ns(value, allow_negative=True)
    return offsets


def _nesting_columns(path: str) -> tuple[str, ...]:
    """The optional columns nesting uses that the trace has: ``flow`` (a service's calls
    from its bare address given back to it, ``infer.callers``), ``label`` (each
    visit's operations; the request rounds' visit types), ``status`` (its returns'
    statuses and errors), the request keys (``infer.keys``) and ``stream`` (copied into
    the instances table, ``infer.message_keys``)."""
    if tracefmt.trace_format(path) != "parquet":
        return ()  # a text trace has the core columns only
    names = tracefmt.read_trace_metadata(path).schema.names
    return tuple(c for c in ("flow", "label", "status", *tracefmt.KEY_COLUMNS, "stream") if c in names)


def _cmd_merge(args: argparse.Namespace) -> int:
    tracefmt.distinct_outputs([*args.inputs, args.names], [args.out], what="an input")
    offsets = _parse_offsets(args.offset, args.inputs)
    names = tracefmt.load_names(args.names) if args.names else {}
    window = None if args.no_dedup else tracefmt.parse_duration_ns(args.dedup_window)
    specs = [tracefmt.MergeInput(p, offset_ns=offsets.get(p, 0)) for p in args.inputs]
    progress = _progress("merge", args)
    report = tracefmt.merge_traces(specs, args.out, names=names, dedup_window_ns=window, on_progress=progress)
    _end_progress(progress)
    total_in = sum(i["messages"] for i in report.inputs)
    lines = [f"merged {len(report.inputs)} traces ({total_in:,} messages) into {report.output}"]
    for i in report.inputs:
        offset = f", offset {tracefmt.format_duration_ns(i['offset_ns'])}" if i["offset_ns"] else ""
        lines.append(f"  {i['path']}: {i['messages']:,} messages, point {i['point']}{offset}")
    dedup = "off" if window is None else f"window {tracefmt.format_duration_ns(window)}"
    lines.append(f"removed {report.duplicates_removed:,} duplicates ({dedup}); wrote {report.messages:,}")
    if names:
        lines.append(f"renamed through {len(names)} names from {args.names}")
    _emit(args, report.to_json(), "\n".join(lines))
    return 0


def _cmd_info(args: argparse.Namespace) -> int:
    if tracefmt.Store.is_store(args.trace):
        traces = tracefmt.Store.open(args.trace).traces()
        doc = {"store": args.trace, "traces": [{"path": t.path, "messages": t.messages} for t in traces]}
        text = [f"store {args.trace}: {len(traces)} traces"]
        text += [f"  {Path(t.path).stem:<24} {t.messages:>12,} messages" for t in traces]
        _emit(args, doc, "\n".join(text))
        return 0
    summary = tracefmt.summarize_trace(args.trace)
    _emit(args, summary.to_json(), f"{args.trace}\n{summary.describe(max_edges=args.edges)}")
    return 0


def _parse_skew(pairs: Sequence[str]) -> dict[str, tuple[float, float]]:
    """``--skew NODE=DURATION`` pairs as node -> (offset_s, 0 ppm); ``synth`` checks the bounds."""
    skew: dict[str, tuple[float, float]] = {}
    for pair in pairs:
        node, sep, value = pair.partition("=")
        if not sep or not node:
            raise tracefmt.ParameterError(f"--skew {pair!r} must be NODE=DURATION, e.g. WS2=30ms")
        try:
            ns = tracefmt.parse_duration_ns(value, allow_negative=True)
        except tracefmt.ParameterError as exc:
            raise tracefmt.ParameterError(f"--skew: {node}: {exc}") from None
        skew[node] = (ns / 1e9, 0.0)
    return skew


def _cmd_synth(args: argparse.Namespace) -> int:
    pcap_names = None if args.pcap is None else _default_names(args.pcap)
    tracefmt.distinct_outputs(
        [args.config], [args.out, args.truth, args.pcap, pcap_names], what="the configuration"
    )
    config = _synth_config(args)
    progress = _progress("synth", args)
    report = synth.generate_trace(config, args.out, truth_path=args.truth, on_progress=progress)
    _end_progress(progress)
    doc = report.to_json()
    pcap = None
    if args.pcap:
        from capture.synthpcap import render_trace_file

        pcap = render_trace_file(args.out, args.pcap)
        doc["pcap"] = pcap.to_json()
    _emit(args, doc, "\n".join(_synth_lines(args, config, report, pcap)))
    return 0


def _synth_config(args: argparse.Namespace) -> synth.SynthConfig:
    """The configuration file with the flags given, once ``--format`` agrees with ``--out``."""
    out = args.out
    fmt = "text" if tracefmt.trace_format(out) == "text" else "parquet"
    if args.format is not None and {"txt": "text", "parquet": "parquet"}[args.format] != fmt:
        raise tracefmt.ParameterError(f"--format {args.format} does not match the file name {out}")
    try:
        duration_ns = None if args.duration is None else tracefmt.parse_duration_ns(args.duration)
    except tracefmt.ParameterError as exc:
        raise tracefmt.ParameterError(f"--duration: {exc}") from None
    # The flags are checked by the library against the same bounds as the file's values.
    return synth.load_config(args.config).with_overrides(
        labels={
            "seed": "--seed",
            "messages": "--messages",
            "duration_s": "--duration",
            "parallelism": "--parallelism",
            "loss_rate_pps": "--loss-rate",
            "loss_queue": "--loss-queue",
            "skew": "--skew",
        },
        seed=args.seed,
        messages=args.messages,
        duration_s=None if duration_ns is None else float(f"{duration_ns}e-9"),
        parallelism=args.parallelism,
        loss_rate_pps=args.loss_rate,
        loss_queue=args.loss_queue,
        skew=_parse_skew(args.skew) or None,
    )


def _synth_lines(
    args: argparse.Namespace,
    config: synth.SynthConfig,
    report: synth.SynthReport,
    pcap: SynthPcapReport | None,
) -> list[str]:
    """The summary of ``synth``: what was written, lost and duplicated, and where."""
    lines = report.summary_lines(config.faults, truth_path=args.truth)
    if pcap is not None:
        lines.append(
            f"packets: {pcap.packets:,} ({pcap.connections:,} TCP connections, {pcap.datagrams:,} UDP "
            f"datagrams) to {pcap.output}; node addresses in {pcap.names_file}"
        )
    return lines


def _default_names(pcap: str) -> Path:
    from capture.synthpcap import default_names_path

    return default_names_path(pcap)


def _nesting_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The single settings given on the command line (None: the preset's)."""
    given = {
        "overlap_penalty": args.overlap_penalty,
        "same_node_penalty": args.same_node_penalty,
        "children_penalty": args.children_penalty,
        "bin_base": args.bin_base,
        "bin_min_s": None if args.bin_min is None else tracefmt.parse_duration_ns(args.bin_min) / 1e9,
        "smooth_bins": args.smooth_bins,
        "tolerance_s": None if args.tolerance is None else tracefmt.parse_duration_ns(args.tolerance) / 1e9,
        "auto_tolerance": args.auto_tolerance,
        "use_ids": args.use_ids,
        "use_keys": args.use_keys,
        "density": args.density,
        "board": args.board,
        "rounds": args.rounds,
        "siblings": args.siblings,
        "chains": args.chains,
        "request_rounds": args.request_rounds,
        "calibrate": args.calibrate,
        "calibrate_from": args.calibrate_from,
    }
    return {k: v for k, v in given.items() if v is not None}


def _cmd_infer_nesting(args: argparse.Namespace) -> int:
    tracefmt.distinct_outputs([args.trace], [args.out, *([args.instances] if args.instances else [])])
    params = infer.NestingParams.preset(args.preset, **_nesting_overrides(args))
    params.check()
    for note in params.ineffective():
        print(f"warning: {note}", file=sys.stderr)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # said above, once
        # No name holds the trace here, so inference can free it once it has the call pairs;
        # and it reads the core columns, and of the others only those nesting uses.
        bar = _progress("nesting", args, steps=True)
        try:
            with runner(args) as run:
                result = infer.infer_nesting(
                    tracefmt.read_any_trace(args.trace, columns=_nesting_columns(args.trace)),
                    params,
                    sort=args.sort,
                    by_label=args.by_label,
                    runner=run,
                    on_stage=None if bar is None else bar.step,
                )
        finally:
            _end_progress(bar)
    whole = result
    if args.min_confidence:
        result = result.confident(args.min_confidence)[0]
    window = tracefmt.parse_duration_ns(args.window) / 1e9 if args.window else None
    doc = result.to_json(top=args.top, min_count=args.min_count, window_s=window)
    out = Path(args.out)
    tracefmt.write_paths(doc, out)
    if args.instances:
        result.write_instances(args.instances)
    lines = infer.nesting_lines(whole, doc, wrote=[out, *([args.instances] if args.instances else [])])
    from viz.paths import tree_lines

    for k, pat in enumerate(doc["patterns"][: args.show], 1):
        lines.append(infer.pattern_line(k, pat))
        lines += tree_lines(pat)
    _emit(args, doc, "\n".join(lines))
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    paths = tracefmt.read_paths(args.paths)
    if args.truth == "keys":
        if args.trace or args.instances:
            raise tracefmt.ParameterError(
                "--truth keys reads the paths file alone: give no trace or --instances"
            )
        report = infer.key_evaluation(paths)
        _emit(args, report, "\n".join(infer.key_evaluation_lines(report)))
        return 0
    if args.trace is None:
        raise tracefmt.ParameterError("give the trace with its truth columns, or --truth keys")
    trace = tracefmt.read_trace(args.trace)
    instances = infer.read_instances(args.instances) if args.instances else None
    report = infer.evaluate_paths(paths, trace, instances=instances)
    _emit(args, report, "\n".join(infer.evaluation_lines(report)))
    return 0


def _nesting_arguments(p: argparse.ArgumentParser) -> None:
    """The inference settings of ``infer nesting``: a preset, and single overrides whose
    help shows the default preset's values (``infer.NestingParams``)."""
    d = infer.NestingParams()
    p.add_argument(
        "--preset",
        choices=list(infer.PRESETS),
        default=infer.PRESETS[0],
        help=f"settings to start from (default {infer.PRESETS[0]})",
    )
    _scoreboard_arguments(p, d)
    _delay_arguments(p, d)
    p.add_argument(
        "--use-ids",
        action=argparse.BooleanOptionalAction,
        help="match calls and returns by id where the trace has ids (default "
        f"{'on' if d.use_ids else 'off'}; off: by time order)",
    )
    p.add_argument(
        "--use-keys",
        action=argparse.BooleanOptionalAction,
        help="take the request keys the trace carries (trace_id, request_id: traceparent, B3, "
        "X-Request-ID) as evidence: calls of one key are of one request, of two keys never "
        f"(default {'on' if d.use_keys else 'off'})",
    )
    p.add_argument(
        "--calibrate",
        action=argparse.BooleanOptionalAction,
        help="make each parent's confidence a calibrated probability, learnt on a synthetic twin "
        f"of the trace and a twin of it (about three times the time; default "
        f"{'on' if d.calibrate else 'off'})",
    )
    p.add_argument(
        "--calibrate-from",
        choices=list(infer.CALIBRATE_FROM),
        help="on a trace with request keys: learn the calibration on a twin keyed as the trace is, "
        f"or on the trace's own keyed calls hidden a fold at a time (default {d.calibrate_from})",
    )


def _scoreboard_arguments(p: argparse.ArgumentParser, d: infer.NestingParams) -> None:
    """How candidate parents are scored and refined: penalties, board, rounds."""
    p.add_argument(
        "--overlap-penalty",
        type=float,
        metavar="W",
        help=f"weight of a parent's other children that overlap the call (the paper's x; default "
        f"{d.overlap_penalty:g})",
    )
    p.add_argument(
        "--same-node-penalty",
        type=float,
        metavar="W",
        help=f"weight of its other children that call the same node (y; default {d.same_node_penalty:g})",
    )
    p.add_argument(
        "--children-penalty",
        type=float,
        metavar="W",
        help=f"weight of its other children at all (z; default {d.children_penalty:g})",
    )
    p.add_argument("--board", choices=list(infer.BOARDS), help=f"scoreboard (default {d.board})")
    p.add_argument(
        "--density",
        action=argparse.BooleanOptionalAction,
        help=f"score by bin densities, not raw counts (default {'on' if d.density else 'off'})",
    )
    p.add_argument(
        "--rounds",
        type=int,
        metavar="N",
        help=f"refinement rounds: penalties over the children each parent got (default {d.rounds})",
    )
    p.add_argument(
        "--siblings",
        type=int,
        metavar="N",
        help=f"then N rounds scoring the gaps to each child's siblings (default {d.siblings})",
    )
    p.add_argument(
        "--chains",
        type=int,
        metavar="N",
        help=f"then up to N rounds moving children to where their node's chains of events "
        f"are most likely (default {d.chains}; stops when nothing moves; 0 is off)",
    )
    p.add_argument(
        "--request-rounds",
        type=int,
        metavar="N",
        help=f"then up to N rounds choosing the children of every window of overlapping "
        f"visits together, each request scored whole (default {d.request_rounds}; stops when "
        "nothing moves; 0 is off)",
    )


def _delay_arguments(p: argparse.ArgumentParser, d: infer.NestingParams) -> None:
    """How delays are binned, smoothed and allowed to stray (clock skew)."""
    p.add_argument("--bin-base", type=float, help=f"delay bin growth factor (default {d.bin_base:g})")
    p.add_argument(
        "--bin-min", metavar="DURATION", help=f"smallest delay bin (default {d.bin_min_s * 1e6:g}us)"
    )
    p.add_argument(
        "--smooth-bins",
        type=float,
        metavar="BINS",
        help=f"Gaussian smoothing (delay board; default {d.smooth_bins:g})",
    )
    p.add_argument(
        "--tolerance", metavar="DURATION", help=f"clock-skew tolerance (default {d.tolerance_s * 1e3:g}ms)"
    )
    p.add_argument(
        "--auto-tolerance",
        action=argparse.BooleanOptionalAction,
        help="estimate a larger clock-skew tolerance from calls that lie outside every call into "
        f"their node (default {'on' if d.auto_tolerance else 'off'}; off in the paper preset)",
    )


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="wirepath",
        description="Find why a distributed system of black boxes is slow, from the traffic "
        "between its parts.",
        epilog="Run 'wirepath VERB --help' for a verb's options.",
    )
    parser.add_argument("--version", action="version", version=f"wirepath {__version__}")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)
    verbs.required = True
    _register_convert(verbs)
    _register_merge(verbs)
    _register_info(verbs)
    _register_synth(verbs)
    algos = _register_infer(verbs)
    _register_eval(verbs)
    for module in (cli_convolution, cli_capture, cli_viz, cli_trend, cli_packets):
        module.register(verbs, algos)
    return parser


def _register_convert(verbs: argparse._SubParsersAction) -> None:
    p = add_verb(
        verbs,
        "convert",
        _cmd_convert,
        "convert a trace between text and Parquet, or import Jaeger/OTLP spans",
        "Convert a message trace between the text form and Parquet, chosen by file name:\n"
        "  .parquet .pq                 Parquet (zstd), the store's form\n"
        "  .txt .txt.gz .trace .trace.gz  text: 'timestamp op sender receiver id' per line\n\n"
        "Text timestamps are seconds with any decimals (kept to the nanosecond) or ISO-8601;\n"
        "op is call, return or send; id is a decimal integer, '-' for none, or any other\n"
        "token (mapped to a stable 64-bit hash). '#' starts a comment.\n\n"
        "Tracing spans are read too, told by content (gzip'd or not): a Jaeger API response\n"
        '{"data": [trace, ...]} or OTLP/JSON {"resourceSpans": [...]}, one document or JSON\n'
        "Lines. Each span entering a service is one RPC (a call and a return); the output\n"
        "has ground-truth columns for 'wirepath eval' (docs/real-traces.md).\n\n"
        "With --partition the output is a directory of Parquet files (a dataset DuckDB,\n"
        "pandas, Spark or Dask read as one table, and every wirepath verb too): parts of a\n"
        "number of messages (5M, 500K) or of a span of time (1h, 10min; aligned to the\n"
        "clock), part-00000.parquet, part-00001.parquet, ... in time order.\n\n"
        "examples: wirepath convert run1.txt run1.parquet\n"
        "          wirepath convert run1.txt --store results/   (-> results/traces/run1.parquet)\n"
        "          wirepath convert jaeger.jsonl.gz hotel.parquet --at callee\n"
        "          wirepath convert run1.parquet --out run1/ --partition 1h",
    )
    p.add_argument("input", help="trace to read (.txt, .txt.gz, .trace, .parquet) or Jaeger/OTLP JSON")
    p.add_argument("output", nargs="?", help="trace to write (.parquet or .txt)")
    p.add_argument("--out", metavar="OUTPUT", help="the same as OUTPUT")
    p.add_argument(
        "--partition",
        metavar="SIZE",
        help="write OUTPUT as a dataset directory with parts of SIZE messages (5M, 500K) or of "
        "SIZE time (1h, 30min); messages must be in time order (or --sort)",
    )
    p.add_argument("--store", metavar="DIR", help="write into the store DIR (traces/NAME.parquet) instead")
    p.add_argument("--name", help="trace name in the store (default: the input's file name stem)")
    p.add_argument(
        "--skip-bad", action="store_true", help="skip malformed text lines or spans and report how many"
    )
    p.add_argument(
        "--at",
        choices=list(tracefmt.SPAN_AT),
        help="spans only: stamp each RPC with the server span's times, as a capture on the callee's "
        "host sees it (callee, the default), or the client span's where the hop has one (caller)",
    )
    p.add_argument(
        "--sort", action="store_true", help="sort messages by timestamp (stable; reads all in memory)"
    )


def _register_merge(verbs: argparse._SubParsersAction) -> None:
    p = add_verb(
        verbs,
        "merge",
        _cmd_merge,
        "merge traces from several capture points",
        "Merge time-sorted Parquet traces into one, streaming with bounded memory.\n"
        "Each input can be shifted by a clock offset; nodes can be renamed through a TOML\n"
        "names file (address or alias = name, top level or under [names]); a message seen\n"
        "at two capture points (same sender, receiver, op and id, from different inputs,\n"
        "within the dedup window) is kept once. A 'point' column records where each\n"
        "message was seen (the input's file name when it has none).\n\n"
        "example: wirepath merge a.parquet b.parquet --offset b.parquet=-12ms --out m.parquet",
    )
    p.add_argument("inputs", nargs="+", help="Parquet traces, each sorted by timestamp")
    p.add_argument("--out", required=True, help="merged Parquet trace to write")
    p.add_argument(
        "--offset",
        action="append",
        default=[],
        metavar="INPUT=DURATION",
        help="add DURATION to INPUT's timestamps (with its unit: -12ms, 3ms, 1.5s); repeatable",
    )
    p.add_argument("--names", metavar="FILE.toml", help="rename nodes: TOML of address or alias = name")
    p.add_argument(
        "--dedup-window",
        default="1ms",
        metavar="DURATION",
        help="window for dropping a message seen at two points (default 1ms)",
    )
    p.add_argument("--no-dedup", action="store_true", help="keep every message, duplicates included")


def _register_info(verbs: argparse._SubParsersAction) -> None:
    p = add_verb(
        verbs,
        "info",
        _cmd_info,
        "summarize a trace",
        "Summarize a trace: messages, time span and rate, nodes, directed edges with\n"
        "message counts, op counts, call/return balance per RPC pair, optional columns,\n"
        "and the provenance recorded in the file. Given a store directory, lists its traces.\n\n"
        "example: wirepath info run1.parquet --json",
    )
    p.add_argument("trace", help="trace to read (.parquet or text), or a store directory")
    p.add_argument("--edges", type=count(0), default=20, metavar="N", help="edges to list (default 20)")


def _register_synth(verbs: argparse._SubParsersAction) -> None:
    p = add_verb(
        verbs,
        "synth",
        _cmd_synth,
        "generate a synthetic trace with ground truth",
        "Generate a maketrace-style synthetic trace from a TOML configuration (format:\n"
        "synth/README.md; workloads in samples/synth/): tracelets of RPC calls or one-way\n"
        "messages instantiated by concurrent client loops, with ground-truth columns\n"
        "(true_instance, true_pattern, true_call, true_parent) and optional faults:\n"
        "capture loss, clock skew, duplicates, missing or reused ids, jitter.\n"
        "Same configuration and seed give a byte-identical trace. Flags are held to the\n"
        "same bounds as the file's values (synth/README.md, Limits); SIGTERM, like Ctrl-C,\n"
        "removes the partial outputs.\n\n"
        "example: wirepath synth samples/synth/multitier.toml --out t.parquet --truth t.json",
    )
    p.add_argument("config", help="synth configuration (TOML)")
    p.add_argument("--out", required=True, help="trace to write: .parquet (with truth columns) or .txt")
    p.add_argument("--truth", metavar="FILE.json", help="write the true patterns (truth file, docs/files.md)")
    p.add_argument("--seed", type=int, help="random seed (overrides [trace] seed)")
    size = p.add_mutually_exclusive_group()
    size.add_argument(
        "--messages",
        type=int,
        metavar="N",
        help=f"about N messages (whole instances); 1 to {synth.limits.MAX_MESSAGES:,}",
    )
    size.add_argument(
        "--duration",
        metavar="DURATION",
        help=f"instances starting within DURATION (e.g. 600s), making at most {synth.limits.MAX_MESSAGES:,} "
        "messages",
    )
    p.add_argument(
        "--parallelism",
        type=float,
        metavar="K",
        help="target mean parallelism (candidate parents per child call), at most "
        f"{synth.limits.PARALLELISM.hi:,}",
    )
    _synth_fault_arguments(p)
    p.add_argument("--format", choices=["parquet", "txt"], help="output form (default: from the file name)")
    p.add_argument(
        "--pcap",
        metavar="OUT.pcap",
        help="also render the trace as packets: a TCP connection per call (HTTP request/response),"
        " a UDP datagram per send; node addresses go to OUT.names.toml",
    )


def _synth_fault_arguments(p: argparse.ArgumentParser) -> None:
    """The fault flags of ``synth``: capture loss and clock skew."""
    p.add_argument(
        "--loss-rate", type=float, metavar="PPS", help="capture point peak rate, packets/s (enables loss)"
    )
    p.add_argument("--loss-queue", type=int, metavar="N", help="capture queue length in packets (default 64)")
    p.add_argument(
        "--skew",
        action="append",
        default=[],
        metavar="NODE=DURATION",
        help=f"clock offset of NODE's capture point with its unit (WS2=30ms), at most "
        f"{synth.limits.MAX_TIME_S:,.0f} s either way; repeatable",
    )


def _register_infer(verbs: argparse._SubParsersAction) -> argparse._SubParsersAction:
    """Add ``infer`` with its ``nesting`` algorithm; returns the algorithms' subparsers."""
    p = verbs.add_parser(
        "infer",
        help="infer causal path patterns",
        description="Infer causal path patterns from a trace. Algorithms: nesting (RPC traces),"
        " convolution (free-form messages).",
    )
    algos = p.add_subparsers(dest="algorithm", metavar="ALGORITHM", parser_class=_Parser)
    algos.required = True
    _register_nesting(algos)
    return algos


def _register_nesting(algos: argparse._SubParsersAction) -> None:
    p = add_verb(
        algos,
        "nesting",
        _cmd_infer_nesting,
        "nesting algorithm for RPC traces",
        "The nesting algorithm (Aguilera et al., SOSP 2003) for RPC traces: match calls\n"
        "with returns, find each call's candidate parents, score them by how often their\n"
        "delays occur, pick one parent per call, and group the resulting path instances\n"
        "into patterns with per-visit latency and per-edge delay statistics.\n\n"
        "The default preset, accurate: the joint scoreboard with densities, two penalty\n"
        "rounds, one sibling round and up to ten chain rounds. --preset fast stops after two\n"
        "chain rounds (faster on large traces, less exact where calls into one node overlap);\n"
        "--preset paper is the 2003 scoreboard; --preset requests adds up to three request\n"
        "rounds (whole requests scored, the children of overlapping visits chosen together:\n"
        "more exact where requests overlap heavily, several times slower there, and its\n"
        "confidence not yet fitted as the default's is).\n"
        "Single options override the preset's value (measurements: docs/inference.md).\n\n"
        "example: wirepath infer nesting t.parquet --out paths.json --instances inst.parquet",
        json_help="print the paths file on stdout",
    )
    p.add_argument("trace", help="trace (.parquet or text)")
    p.add_argument("--out", required=True, help="paths file to write (JSON, docs/files.md)")
    p.add_argument("--instances", metavar="FILE.parquet", help="also write every call pair with its parent")
    p.add_argument("--top", type=count(1), metavar="N", help="keep the first N patterns in the file")
    p.add_argument(
        "--min-count", type=count(1), default=1, metavar="N", help="drop patterns seen fewer times"
    )
    p.add_argument("--sort", choices=list(tracefmt.PATTERN_SORTS), default="total", help="order patterns by")
    p.add_argument(
        "--by-label",
        action="store_true",
        help="tell patterns apart by their visits' operations too (GET /item/:id): a pattern per endpoint",
    )
    p.add_argument("--show", type=count(0), default=5, metavar="N", help="patterns to print (default 5)")
    p.add_argument("--window", metavar="DURATION", help="also list patterns per time window (e.g. 60s)")
    p.add_argument(
        "--min-confidence",
        type=probability,
        default=0.0,
        metavar="P",
        help="leave out the instances holding a link (a call given a parent) whose confidence "
        "is below P (0..1); the count left out is printed and kept in the paths file",
    )
    _nesting_arguments(p)
    add_cluster_options(p)


def _register_eval(verbs: argparse._SubParsersAction) -> None:
    p = add_verb(
        verbs,
        "eval",
        _cmd_eval,
        "score inferred paths against a trace's ground truth",
        "Score a paths file against the ground truth of the trace it came from (made by\n"
        "wirepath synth, or converted from Jaeger/OTLP spans): false negatives and positives\n"
        "of patterns, instances and messages, the top-N missing rate at count tolerances 0%,\n"
        "2% and 6%, and the relative error of per-visit latency and per-edge delay in\n"
        "correctly found patterns. With --instances also the requests fully right (true\n"
        "instances whose every call got its true parent, TraceWeaver's measure) and the\n"
        "calls with the right parent. With --truth keys, no trace: the check 'infer nesting'\n"
        "made on the trace's own request keys (trace_id, request_id), hidden a fold at a\n"
        "time: how many keyed calls whose parent the keys decide it found without them.\n\n"
        "example: wirepath eval paths.json t.parquet --instances inst.parquet\n"
        "         wirepath eval paths.json --truth keys",
    )
    p.add_argument("paths", help="paths file (JSON) from wirepath infer")
    p.add_argument("trace", nargs="?", help="the trace, with its truth columns (.parquet)")
    p.add_argument("--instances", metavar="FILE.parquet", help="instances from 'infer --instances'")
    p.add_argument(
        "--truth",
        choices=("columns", "keys"),
        default="columns",
        help="the trace's truth columns (default), or the paths file's held-out request keys",
    )


def main(argv: Sequence[str] | None = None, *, own_process: bool = False) -> int:
    """Run the command line; returns the exit status. ``own_process``: the process is
    this command's alone (the console command), so pyarrow may be spared its import of
    pandas (:func:`wirepath._cli.hold_back_pandas`) when no Dask cluster runs.

    Examples
    --------
    >>> main(["--version"])
    wirepath 0.1.0
    0
    """
    parser = _build_parser()
    try:
        args = parser.parse_args(argv)
        if own_process and not (getattr(args, "scheduler", None) or getattr(args, "workers", None)):
            hold_back_pandas()
        # SIGTERM (a service manager stopping the run) ends it as Ctrl-C does: the
        # half-written outputs are removed, every verb alike.
        with tracefmt.sigterm_as_interrupt():
            return int(args.handler(args))
    except _UsageError as exc:
        print(exc, file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help and --version
        return int(exc.code or 0)
    except WirepathError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        if own_process:
            _ending()
        print("\nerror: interrupted; partial outputs were removed", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as exc:
        # A full disk where no writer named its output, or a name the system cannot look
        # up: still one line, said as such.
        if exc.errno == errno.ENAMETOOLONG:
            name = str(exc.filename or "a file name")
            short = name if len(name) <= 43 else name[:40] + "..."
            print(f"error: {short}: file name too long for the file system", file=sys.stderr)
            return 1
        if exc.errno not in tracefmt.DISK_FULL:
            raise
        print(f"error: {tracefmt.write_error(exc, exc.filename or 'output')}", file=sys.stderr)
        return 1


def _ending() -> None:
    """From here the process only reports and exits: SIGINT and SIGTERM do nothing more.

    A library that caught the first signal may hand it on again as SIGINT (pyarrow's
    cancellation does), and a second signal may come while the first is reported; either
    would otherwise end the process by signal, not with its exit status. A handler that
    does nothing, not SIG_IGN: a signal already pending at SIG_IGN is reported as an
    "ignored due to race condition" message.
    """
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, _ignore)


def _ignore(signum: int, frame: FrameType | None) -> None:
    """A signal handler that does nothing (see :func:`_ending`)."""


def run() -> NoReturn:
    """The ``wirepath`` console command: :func:`main` in a process of its own; its exit
    status is 130 after an interruption however the signals fall."""
    try:
        code = main(own_process=True)
    except KeyboardInterrupt:  # a second one, while the first was reported
        code = 130
    _ending()
    sys.exit(code)

"""``wirepath capture pcap|live``: packets to the message trace.

The ``pcap`` half is here; the ``live`` half (the capture agent) is in ``cli_live``.
"""

from __future__ import annotations

import argparse
import os

import capture
import tracefmt
from wirepath import cli_live
from wirepath._cli import Parser, add_cluster_options, add_key_options, add_verb, emit, key_options, runner
from wirepath._cli import end_progress as _end_progress
from wirepath._cli import progress as _progress

__all__ = ["register"]


def register(verbs: argparse._SubParsersAction, algos: argparse._SubParsersAction) -> None:
    """Add the ``capture`` verb with its ``pcap`` and ``live`` sub-verbs."""
    p = verbs.add_parser(
        "capture",
        help="turn packets (pcap files or a live interface) into a message trace",
        description="Turn packets into a message trace: 'capture pcap' reads tcpdump files,\n"
        "'capture live' records an interface (a mirrored switch port, a bridge, a host).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sources = p.add_subparsers(dest="source", metavar="SOURCE", parser_class=Parser)
    sources.required = True
    _register_pcap(sources)
    cli_live.register(sources)


def _register_pcap(sources: argparse._SubParsersAction) -> None:
    """Add ``capture pcap`` (pcap/pcapng files to a trace)."""
    p = add_verb(
        sources,
        "pcap",
        _cmd_pcap,
        "turn pcap/pcapng files into a message trace",
        "Read pcap or pcapng files (gzip allowed) and write the message trace: TCP is\n"
        "reassembled per connection; HTTP/1.x, HTTP/2 (gRPC), DNS, Redis, memcached, MySQL,\n"
        "PostgreSQL and Thrift messages are found by content, other TCP traffic by\n"
        "request/response turns, other UDP datagrams are sends.\n"
        "Capture statistics are printed and stored in the trace's metadata.\n\n"
        "With --workers or --scheduler the flows are split among the tasks of a Dask cluster\n"
        "(each reads every file: the workers need the files, and the directory of --out,\n"
        "at the same paths); the trace is the one written without.\n\n"
        "example:\n"
        "  wirepath capture pcap web.pcap db.pcap --point-from-file --names names.toml "
        "--out trace.parquet",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="pcap or pcapng capture files")
    p.add_argument("--out", required=True, metavar="T.parquet", help="the message trace to write")
    p.add_argument(
        "--partition",
        metavar="SIZE",
        help="write --out as a dataset directory (part-NNNNN.parquet files) with parts of SIZE "
        "messages (5M, 500K) or of SIZE time (1h, 30min), as 'wirepath convert --partition'",
    )
    p.add_argument(
        "--names",
        metavar="N.toml",
        help="names file: address, address:port or CIDR -> node name (unnamed addresses stay)",
    )
    p.add_argument(
        "--node-by",
        choices=capture.NODE_BY,
        default="address",
        help="name nodes by address (10.0.0.5) or servers by service (10.0.0.5:5432); default address",
    )
    p.add_argument(
        "--point-from-file",
        action="store_true",
        help="each file is a capture point: estimate and apply clock offsets, drop duplicates",
    )
    p.add_argument(
        "--dedup-window",
        default="1ms",
        metavar="DURATION",
        help="window within which one packet seen at two points is a duplicate (default 1ms)",
    )
    p.add_argument(
        "--keep-payload",
        action="store_true",
        help="also store each message's captured bytes (column x_payload); by default no payload is kept",
    )
    add_key_options(p)
    add_cluster_options(p)


def _cmd_pcap(args: argparse.Namespace) -> int:
    keys = key_options(args)  # a bad header name stops us before any file is read
    # Over the files' sizes when they are known (a gzip file's is not its content's).
    sizes = [os.path.getsize(f) for f in args.files if os.path.isfile(f) and not str(f).endswith(".gz")]
    known = len(sizes) == len(args.files)
    progress = _progress("capture", args, total_bytes=sum(sizes) if known else None)
    with runner(args) as run:
        report = capture.convert_pcaps(
            args.files,
            args.out,
            names=args.names,
            node_by=args.node_by,
            point_from_file=args.point_from_file,
            keep_payload=args.keep_payload,
            keys=keys,
            dedup_window_ns=tracefmt.parse_duration_ns(args.dedup_window),
            on_progress=progress,
            on_read=progress.read if progress is not None and known else None,
            partition=args.partition,
            runner=run,
        )
    _end_progress(progress)
    text = report.summary()
    note = capture.one_host_note(args.out, args.node_by) if report.messages else None
    emit(args, report.to_json(), text + (f"\nnote: {note}" if note else ""))
    return 0

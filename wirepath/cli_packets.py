"""``wirepath packets``: from a request of the instances table back to its packets.

Heavy packages (numpy, pyarrow) load inside the handler, so ``--help`` stays light.
"""

from __future__ import annotations

import argparse

from wirepath._cli import add_verb, count, emit

__all__ = ["register"]


def register(verbs: argparse._SubParsersAction, algos: argparse._SubParsersAction) -> None:
    """Add the ``packets`` verb."""
    del algos
    p = add_verb(
        verbs,
        "packets",
        _cmd_packets,
        "the Wireshark display filter (or a pcap) of a request's packets",
        "Print a Wireshark display filter selecting exactly the packets of one request's\n"
        "calls and returns (per connection: addresses, ports and the time window of its\n"
        "messages), found by the instances table's key (times, ids, connection), not by row\n"
        "positions. The trace must have connection columns (src_ip, src_port, dst_ip,\n"
        "dst_port, stream: 'wirepath capture pcap' writes them). With --pcap and --out, also\n"
        "write those packets to a new pcap file (tshark -r PCAP -Y FILTER -w OUT).\n\n"
        "A request is an instance number, as the instances table and the report show them;\n"
        "--pattern ID takes the --top K slowest requests of a pattern, slowest first.\n\n"
        "examples:\n"
        "  wirepath packets inst.parquet trace.parquet --request 42\n"
        "  wirepath packets inst.parquet trace.parquet --pattern c67cfd6f08cb95a1 --top 3 \\\n"
        "      --pcap capture.pcap --out slow.pcap",
    )
    p.add_argument("instances", metavar="INST.parquet", help="instances table ('infer nesting --instances')")
    p.add_argument("trace", metavar="TRACE.parquet", help="the trace the instances were inferred from")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--request", type=count(0), metavar="N", help="the request (instance number)")
    which.add_argument("--pattern", metavar="ID", help="a pattern's id: its slowest requests")
    p.add_argument(
        "--top", type=count(1), default=1, metavar="K", help="with --pattern: K requests (default 1)"
    )
    p.add_argument("--pcap", metavar="CAPTURE", help="the capture the trace was made from (with --out)")
    p.add_argument("--out", metavar="OUT.pcap", help="write the request's packets from --pcap here")


def _cmd_packets(args: argparse.Namespace) -> int:
    import infer
    import tracefmt
    from capture import packets
    from tracefmt import ParameterError

    if (args.pcap is None) != (args.out is None):
        raise ParameterError("--pcap and --out go together: the capture to read and the pcap to write")
    if args.out is not None:
        tracefmt.distinct_outputs([args.instances, args.trace, args.pcap], [args.out], what="an input")
    instances = infer.read_instances(args.instances)
    trace = tracefmt.read_trace(args.trace)
    missing = [c for c in packets.CONNECTION_COLUMNS if c not in trace.column_names]
    if missing:
        raise tracefmt.SchemaError(f"{args.trace}: {packets.NO_COLUMNS}")
    if args.pattern is not None:
        requests = packets.slowest_requests(instances, args.pattern, args.top)
    else:
        requests = [args.request]
    windows = [w for r in requests for w in packets.request_windows(instances, trace, r)]
    flt = packets.display_filter(windows)
    doc = {"requests": requests, "filter": flt, "windows": [w.__dict__ for w in windows]}
    lines = [flt]
    if args.out is not None:
        n = packets.write_request_pcap(args.pcap, windows, args.out)
        doc.update(out=str(args.out), packets=n)
        lines.append(f"wrote {n:,} packets of request{'s' if len(requests) > 1 else ''} "
                     f"{', '.join(map(str, requests))} to {args.out}")  # fmt: skip
    emit(args, doc, "\n".join(lines))
    return 0

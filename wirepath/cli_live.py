"""``wirepath capture live``: the live capture agent's command line."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import TYPE_CHECKING, Any

import capture
import tracefmt

if TYPE_CHECKING:
    from capture.live import LiveCapture, LiveReport
from wirepath._cli import (
    Progress,
    add_key_options,
    add_verb,
    count,
    emit,
    end_progress,
    key_options,
    progress,
)

__all__ = ["register"]


def register(sources: argparse._SubParsersAction) -> None:
    """Add ``capture live`` to the ``capture`` verb's sub-verbs."""
    p = add_verb(
        sources,
        "live",
        _cmd_live,
        "record an interface into rotating pcap files and a trace",
        "Record an interface with tcpdump (libpcap, AF_PACKET ring) into rotating pcap files\n"
        "in DIR, whole records on disk at every moment, and convert them while they are written:\n"
        "every couple of seconds the messages so far are added to DIR/trace/ as a new\n"
        "part-NNNNN.parquet (a dataset pyarrow, DuckDB or pandas can open while recording).\n"
        "On Ctrl-C, SIGTERM or after --duration, stop, report packets received and dropped by\n"
        "the kernel, convert the last packets and publish DIR/trace.parquet, the whole trace in\n"
        "one file. The counters go into the trace's metadata and DIR/live.json.\n"
        "Needs root or CAP_NET_RAW.\n\n"
        "A mirrored switch port (SPAN) is just an interface: plug the monitor port into a NIC,\n"
        "bring it up without an address (ip link set eth1 up) and record it; the interface is\n"
        "put in promiscuous mode, so it keeps packets addressed to other hosts.\n\n"
        "examples: wirepath capture live --iface eth1 --duration 60s --out cap/\n"
        "          wirepath capture live --iface br0 --filter 'tcp port 8080' --rotate-mb 100 --out cap/",
    )
    p.add_argument("--iface", required=True, metavar="IF", help="interface to record (or 'any')")
    p.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="directory for the pcap files, trace.parquet and trace/ (its parts while recording)",
    )
    p.add_argument(
        "--filter", metavar="BPF", help="capture filter (pcap-filter syntax), e.g. 'tcp port 8080'"
    )
    p.add_argument(
        "--duration", metavar="DURATION", help="stop after DURATION (e.g. 30s, 5m); default: Ctrl-C"
    )
    _recording_arguments(p)
    p.add_argument("--names", metavar="N.toml", help="node names for the trace (address, address:port, CIDR)")
    p.add_argument(
        "--node-by",
        choices=["address", "service"],
        default="address",
        help="name nodes by address, or servers by address:port (default address)",
    )
    p.add_argument("--no-convert", action="store_true", help="only record the pcap files")
    add_key_options(p)


def _recording_arguments(p: argparse.ArgumentParser) -> None:
    """How tcpdump records: file rotation, bytes kept per packet, kernel buffer, promiscuity."""
    p.add_argument(
        "--rotate-mb", type=count(1, 1 << 20), metavar="N", help="start a new pcap file past N million bytes"
    )
    p.add_argument(
        "--snaplen",
        type=count(64, 262_144),
        default=capture.DEFAULT_SNAPLEN,
        metavar="N",
        help=f"bytes kept per packet ({capture.DEFAULT_SNAPLEN})",
    )
    p.add_argument(
        "--buffer-mb",
        type=count(1, 1 << 16),
        default=capture.DEFAULT_BUFFER_MB,
        metavar="N",
        help=f"kernel capture buffer, MiB ({capture.DEFAULT_BUFFER_MB}); raise it if the kernel drops "
        "packets",
    )
    p.add_argument("--no-promisc", action="store_true", help="do not put the interface in promiscuous mode")


def _cmd_live(args: argparse.Namespace) -> int:
    keys = key_options(args)  # a bad header name stops us before anything is recorded
    duration = tracefmt.parse_duration_ns(args.duration) / 1e9 if args.duration else None
    watch = _Watch(args, duration)
    with _signals_to(watch.on_signal):
        try:
            report = capture.capture_live(
                args.iface,
                args.out,
                capture.Recording(
                    bpf=args.filter,
                    rotate_mb=args.rotate_mb,
                    snaplen=args.snaplen,
                    buffer_mb=args.buffer_mb,
                    promisc=not args.no_promisc,
                ),
                duration_s=duration,
                names=args.names,
                convert=not args.no_convert,
                stop=watch.stop,
                on_ready=watch.on_ready,
                on_progress=watch.on_progress,
                on_recorded=watch.on_recorded,
                convert_options={"node_by": args.node_by, "keys": keys},
            )
        finally:
            end_progress(watch.bar)
    text = _summary(report)
    if report.trace is not None and (report.conversion or {}).get("messages"):
        note = capture.one_host_note(report.trace, args.node_by)
        text += f"\nnote: {note}" if note else ""
    emit(args, report.to_json(), text)
    if report.recorder_error is not None:
        print(f"error: tcpdump stopped on its own: {report.recorder_error}", file=sys.stderr)
        return 1
    return 0


class _Watch:
    """What a live capture shows on the terminal, and what Ctrl-C or SIGTERM does to it:
    while recording, stop the recording (the trace is still finished); while converting,
    give up the trace (the pcap files stay)."""

    def __init__(self, args: argparse.Namespace, duration_s: float | None) -> None:
        self.args = args
        self.duration_s = duration_s
        self.stop = threading.Event()
        self.recorded = threading.Event()
        self.bar: Progress | None = None  # drawn once the recording has started

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.recorded.is_set():  # converting: Ctrl-C gives up the trace, the pcap files stay
            raise KeyboardInterrupt
        self.stop.set()

    def on_ready(self, cap: LiveCapture) -> None:
        until = f"for {self.args.duration}" if self.duration_s else "until Ctrl-C"
        print(f"recording {cap.iface} into {cap.first_file} {until}", file=sys.stderr, flush=True)
        self.bar = progress("recording", self.args, in_bytes=True)

    def on_progress(self, files: int, size: int) -> None:
        if self.bar is not None:
            self.bar.recorded(files, size)

    def on_recorded(self, report: LiveReport) -> None:
        self.recorded.set()
        end_progress(self.bar)
        if not self.args.no_convert and report.files:
            print(f"finishing the trace of {len(report.files)} file(s)", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _signals_to(handler: Callable[[int, FrameType | None], None]) -> Iterator[None]:
    """SIGINT and SIGTERM go to ``handler`` inside the block, and back to their handlers
    after it (only the main thread may set handlers: elsewhere nothing changes)."""
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _summary(report: LiveReport) -> str:
    s = report.stats
    counts = [f"received by filter {s.received:,}" if s.received is not None else None]
    counts.append(f"dropped by kernel {s.dropped_kernel:,}" if s.dropped_kernel is not None else None)
    if s.dropped_interface:
        counts.append(f"dropped by interface {s.dropped_interface:,}")
    detail = "; ".join(c for c in counts if c)
    nfiles = len(report.files)
    lines = [
        f"recorded {s.captured:,} packets on {report.iface} in {report.duration_s:,.1f} s"
        + (f" ({detail})" if detail else ""),
        f"{nfiles} pcap file{'s' if nfiles != 1 else ''}: " + ", ".join(report.files),
    ]
    if s.dropped_kernel:
        lines.append("the kernel dropped packets: raise --buffer-mb, narrow --filter or lower --snaplen")
    if report.iface == "lo" and s.received and s.received > s.captured:
        lines.append(
            "on lo the kernel hands the capture every packet twice, as sent and as received: "
            "'received by filter' counts both, the files keep each packet once"
        )
    if report.trace is not None:
        messages = (report.conversion or {}).get("messages")
        lines.append(
            f"wrote {messages:,} messages to {report.trace}"
            if messages is not None
            else f"wrote {report.trace}"
        )
        conv = report.conversion or {}
        if conv.get("with_trace_id") or conv.get("with_request_id") or conv.get("keys_malformed"):
            lines.append(
                f"request keys: {conv.get('with_trace_id', 0):,} messages with a trace id, "
                f"{conv.get('with_request_id', 0):,} with a request id; malformed values skipped "
                f"{conv.get('keys_malformed', 0):,}"
            )
    return "\n".join(lines)

"""``wirepath capture pcap|live``: packets to the message trace.

The ``pcap`` half is here; the ``live`` half (the capture agent) is in ``cli_live``.
"""

from __future__ import annotations

import argparse

from wirepath import cli_live
from wirepath._cli import Parser

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

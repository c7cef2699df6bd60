"""Packets to messages: pcap/pcapng sources, TCP reassembly, protocol decoders, naming, merging.

The public names are re-exported here, the live agent's (``capture.live``) and the
rendering of synthetic traces as packets (``capture.synthpcap``) among them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracefmt.lazy import lazy_package

#: How nodes are named (``capture.naming``; here so that the command line's choices need
#: no Arrow): by address, or by the service listening there.
NODE_BY = ("address", "service")
#: Bytes kept per packet and the kernel's capture buffer of ``capture live``
#: (``capture.live``), unless told.
DEFAULT_SNAPLEN = 262144
DEFAULT_BUFFER_MB = 32

if TYPE_CHECKING:
    from capture.convert import CaptureReport, StreamConverter, convert_pcaps, estimate_offset_ns
    from capture.decode import Decoder, DecodeStats, Segments
    from capture.flows import FlowAssembler, FlowStats, Messages
    from capture.live import LiveCapture, LiveReport, LiveStats, Recording, capture_live
    from capture.naming import Namer, format_address, one_host_note
    from capture.protocols import PROTOCOLS, detect_tcp, parse_dns_datagram, parse_stream
    from capture.request_keys import KeyOptions, RequestKeys
    from capture.source import (
        FakeSource,
        PacketBatch,
        PacketSource,
        PcapSource,
        ReadStats,
        packet_timestamps,
        read_packets,
    )
    from capture.synthpcap import SynthPcapReport, render_pcap, render_trace_file

#: Where each public name lives: a module is imported when one of its names is first used.
_EXPORTS = {
    "capture.convert": ["CaptureReport", "StreamConverter", "convert_pcaps", "estimate_offset_ns"],
    "capture.decode": ["Decoder", "DecodeStats", "Segments"],
    "capture.flows": ["FlowAssembler", "FlowStats", "Messages"],
    "capture.live": ["LiveCapture", "LiveReport", "LiveStats", "Recording", "capture_live"],
    "capture.naming": ["Namer", "format_address", "one_host_note"],
    "capture.protocols": ["PROTOCOLS", "detect_tcp", "parse_dns_datagram", "parse_stream"],
    "capture.request_keys": ["KeyOptions", "RequestKeys"],
    "capture.source": [
        "FakeSource",
        "PacketBatch",
        "PacketSource",
        "PcapSource",
        "ReadStats",
        "packet_timestamps",
        "read_packets",
    ],
    "capture.synthpcap": ["SynthPcapReport", "render_pcap", "render_trace_file"],
}
__getattr__, __dir__ = lazy_package(__name__, _EXPORTS)

__all__ = [
    "DEFAULT_BUFFER_MB",
    "DEFAULT_SNAPLEN",
    "NODE_BY",
    "PROTOCOLS",
    "CaptureReport",
    "DecodeStats",
    "Decoder",
    "FakeSource",
    "FlowAssembler",
    "FlowStats",
    "KeyOptions",
    "LiveCapture",
    "LiveReport",
    "LiveStats",
    "Messages",
    "Namer",
    "PacketBatch",
    "PacketSource",
    "PcapSource",
    "ReadStats",
    "Recording",
    "RequestKeys",
    "Segments",
    "StreamConverter",
    "SynthPcapReport",
    "capture_live",
    "convert_pcaps",
    "detect_tcp",
    "estimate_offset_ns",
    "format_address",
    "one_host_note",
    "packet_timestamps",
    "parse_dns_datagram",
    "parse_stream",
    "read_packets",
    "render_pcap",
    "render_trace_file",
]

"""Packets to messages: pcap/pcapng sources, TCP reassembly, protocol decoders, naming, merging.

The public names are re-exported here; ``capture.live`` (the live agent) is a module of
its own.
"""

from capture.convert import CaptureReport, convert_pcaps, estimate_offset_ns
from capture.decode import Decoder, DecodeStats, Segments
from capture.flows import FlowAssembler, FlowStats, Messages
from capture.naming import Namer, format_address
from capture.protocols import PROTOCOLS, detect_tcp, parse_dns_datagram, parse_stream
from capture.source import (
    FakeSource,
    PacketBatch,
    PacketSource,
    PcapSource,
    ReadStats,
    packet_timestamps,
    read_packets,
)

__all__ = [
    "PROTOCOLS",
    "CaptureReport",
    "DecodeStats",
    "Decoder",
    "FakeSource",
    "FlowAssembler",
    "FlowStats",
    "Messages",
    "Namer",
    "PacketBatch",
    "PacketSource",
    "PcapSource",
    "ReadStats",
    "Segments",
    "convert_pcaps",
    "detect_tcp",
    "estimate_offset_ns",
    "format_address",
    "packet_timestamps",
    "parse_dns_datagram",
    "parse_stream",
    "read_packets",
]

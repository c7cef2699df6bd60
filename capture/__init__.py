"""Packets to messages: pcap/pcapng sources, TCP reassembly, protocol decoders, naming, merging.

The public names are re-exported here; ``capture.live`` (the live agent) is a module of
its own.
"""

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
    "FakeSource",
    "PacketBatch",
    "PacketSource",
    "PcapSource",
    "ReadStats",
    "packet_timestamps",
    "read_packets",
]

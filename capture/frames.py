"""Ethernet/IPv4/TCP frames built one at a time, for the captures tests and benchmarks write.

A capture written by hand names exactly the packets a case needs (a connection held open
for a whole recording, a segment lost, a connection cut between two rotated files),
which ``capture.synthpcap`` (a synthetic trace rendered in bulk, one connection per
call) does not. One Python object per packet: fine for inputs of a few hundred thousand
packets, not a path any conversion takes.

Examples
--------
>>> out = []
>>> c = TcpConnection(out, client=0x0A000001, server=0x0A000002, cport=40000, sport=80)
>>> c.open(0)
>>> c.turn(1_000_000, b"GET / HTTP/1.1\\r\\n\\r\\n", b"HTTP/1.1 200 OK\\r\\n\\r\\n")
>>> [len(frame) for _, frame in out]
[54, 54, 54, 72, 73, 54]
"""

from __future__ import annotations

import struct

__all__ = [
    "ACK",
    "ETHERNET_HEADER",
    "FIN",
    "FIN_ACK",
    "PSH_ACK",
    "SYN",
    "SYN_ACK",
    "TcpConnection",
    "tcp_frame",
]

#: Ethernet header of every frame: made-up MACs, type IPv4.
ETHERNET_HEADER = b"\x02\x00\x00\x00\x00\x01\x02\x00\x00\x00\x00\x02\x08\x00"
#: TCP flag bits.
FIN, SYN, PSH_ACK, ACK, SYN_ACK, FIN_ACK = 0x01, 0x02, 0x18, 0x10, 0x12, 0x11
_MS = 1_000_000


def tcp_frame(
    src: int, dst: int, sport: int, dport: int, seq: int, ack: int, flags: int, data: bytes = b""
) -> bytes:
    """One Ethernet frame of an IPv4 TCP segment (no options; checksums left 0, which
    readers of captures do not check).

    ``src`` and ``dst`` are IPv4 addresses as integers (``0x0A000001`` is 10.0.0.1).

    Examples
    --------
    >>> f = tcp_frame(0x0A000001, 0x0A000002, 40000, 80, 1, 0, SYN)
    >>> len(f), f[26:30].hex()
    (54, '0a000001')
    """
    tcp = struct.pack(
        ">HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, 0x50, flags, 65535, 0, 0
    )
    ip = struct.pack(">BBHHHBBHII", 0x45, 0, 40 + len(data), 0, 0x4000, 64, 6, 0, src, dst)
    return ETHERNET_HEADER + ip + tcp + data


class TcpConnection:
    """The frames of one TCP connection, appended to ``out`` as ``(timestamp ns, frame)``.

    The client's sequence numbers start at ``isn``, the server's at 50,000; each
    segment's data and its SYN or FIN advance the sender's.
    """

    def __init__(self, out: list, client: int, server: int, cport: int, sport: int, isn: int = 1000) -> None:
        self.out, self.ends, self.ports, self.seq = out, (client, server), (cport, sport), [isn, 50_000]

    def send(self, t: int, client: bool, flags: int, data: bytes = b"") -> None:
        """One segment at ``t`` from the client (or the server) with ``flags``."""
        me, peer = (0, 1) if client else (1, 0)
        frame = tcp_frame(
            self.ends[me], self.ends[peer], self.ports[me], self.ports[peer],
            self.seq[me], self.seq[peer], flags, data,
        )  # fmt: skip
        self.out.append((t, frame))
        self.seq[me] += len(data) + (1 if flags & (SYN | FIN) else 0)

    def open(self, t: int) -> None:
        """The three-way handshake from ``t``, 0.1 ms apart."""
        self.send(t, True, SYN)
        self.send(t + _MS // 10, False, SYN_ACK)
        self.send(t + _MS // 5, True, ACK)

    def turn(self, t: int, request: bytes, response: bytes) -> None:
        """A request at ``t``, its response 0.5 ms later, and the client's ACK."""
        self.send(t, True, PSH_ACK, request)
        self.send(t + _MS // 2, False, PSH_ACK, response)
        self.send(t + _MS * 6 // 10, True, ACK)

    def close(self, t: int) -> None:
        """The client's FIN at ``t``, the server's, and the last ACK."""
        self.send(t, True, FIN_ACK)
        self.send(t + _MS // 10, False, FIN_ACK)
        self.send(t + _MS // 5, True, ACK)

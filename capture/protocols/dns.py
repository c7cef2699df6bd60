"""DNS over UDP and over TCP (each message after a two-byte length, RFC 1035 4.2.2); a
response's status is its RCODE's name (``NOERROR``, ``NXDOMAIN``, ``SERVFAIL``)."""

from __future__ import annotations

import struct

from capture.protocols.base import Message
from tracefmt.pathsfile import DNS_RCODE_NAMES

__all__ = ["DNS_PORTS", "NOT_DNS_PORTS", "detect_framing", "dns_rcode", "parse", "parse_dns_datagram"]

#: Ports DNS is known to use (unicast, multicast, link-local multicast): there a message
#: may hold any number of questions (mDNS answers carry none) and names any bytes.
DNS_PORTS = (53, 5353, 5355)
#: Ports of protocols that write DNS's wire format but are not DNS (NetBIOS name service).
NOT_DNS_PORTS = (137,)
_DNS_OPCODES = frozenset((0, 1, 2, 4, 5))  # QUERY, IQUERY, STATUS, NOTIFY, UPDATE
_DNS_MAX_RECORDS = 4096
_DNS_CLASSES = frozenset((1, 3, 4, 254, 255))  # IN, CH, HS, NONE, ANY (mDNS: top bit aside)


def parse_dns_datagram(
    buf: bytes, *, any_port: bool = False, cut: bool = False
) -> tuple[bool, int, str] | None:
    """``(is_response, transaction id, label)`` of a DNS message, or ``None`` if it is not one.

    The whole message must parse: header (a known opcode, the reserved bit clear, a
    query asks with nothing answered), every question and resource record, ending
    exactly where the message does (``cut``: the capture kept only its first bytes, so
    it may end early). Found on a port DNS does not usually use (``any_port``), it must
    also ask exactly one question, of a known class, about a host name (printable
    labels): random datagrams are not taken for DNS (none of 1,000,000 random ones, nor
    of 1,000,000 with a forged query header and a random rest; 2 of 200,000 of those
    passed before the class was checked).

    Examples
    --------
    >>> q = bytes.fromhex("abcd01000001000000000000")
    >>> q += b"\\x03www\\x07example\\x03com\\x00\\x00\\x01\\x00\\x01"
    >>> parse_dns_datagram(q)
    (False, 43981, 'A www.example.com')
    >>> parse_dns_datagram(q + b"x") is None  # a byte too many
    True
    >>> parse_dns_datagram(b"garbage") is None
    True
    """
    n = len(buf)
    if n < 12:
        return None
    txid, flags, qd, an, ns, ar = struct.unpack_from(">HHHHHH", buf)
    response = bool(flags & 0x8000)
    opcode = (flags >> 11) & 0xF
    if opcode not in _DNS_OPCODES or flags & 0x0040 or an + ns + ar > _DNS_MAX_RECORDS or qd > 64:
        return None
    if not response and opcode == 0 and (an or ns or flags & 0x000F):
        return None
    if any_port and qd != 1:
        return None
    pos, label = 12, ""
    for k in range(qd):
        end = _dns_skip_name(buf, pos, hostname=any_port)
        if end < 0 or end + 4 > n:
            return (response, txid, label) if cut and not any_port else None
        qtype, qclass = struct.unpack_from(">HH", buf, end)
        if any_port and (qclass & 0x7FFF) not in _DNS_CLASSES:
            return None
        if k == 0:
            label = f"{_QTYPES.get(qtype, str(qtype))} {_dns_name(buf, pos)}"
        pos = end + 4
    for _ in range(an + ns + ar):
        end = _dns_skip_name(buf, pos, hostname=False)
        if end < 0 or end + 10 > n:
            return (response, txid, label) if cut else None
        rdlen = struct.unpack_from(">H", buf, end + 8)[0]
        pos = end + 10 + rdlen
        if pos > n:
            return (response, txid, label) if cut else None
    if pos != n and not cut:
        return None
    return response, txid, label


_QTYPES = {
    1: "A",
    2: "NS",
    5: "CNAME",
    6: "SOA",
    12: "PTR",
    15: "MX",
    16: "TXT",
    28: "AAAA",
    33: "SRV",
    255: "ANY",
}


def dns_rcode(buf: bytes) -> str | None:
    """The name of a DNS message's response code (the header's four RCODE bits;
    ``RCODE<n>`` for a number without a name), None when ``buf`` is too short.

    Examples
    --------
    >>> dns_rcode(bytes.fromhex("abcd81830000000000000000")), dns_rcode(bytes.fromhex("abcd818c"))
    ('NXDOMAIN', 'RCODE12')
    """
    if len(buf) < 4:
        return None
    code = buf[3] & 0x0F
    return DNS_RCODE_NAMES[code] if code < len(DNS_RCODE_NAMES) else f"RCODE{code}"


def detect_framing(client: bytes, server: bytes, sport: int, dport: int) -> bool:
    """The client's first bytes are a length-prefixed DNS query; away from DNS's ports it
    must pass :func:`parse_dns_datagram`'s stricter test (``any_port``).

    Examples
    --------
    >>> q = bytes.fromhex("abcd01000001000000000000") + b"\\x01a\\x04test\\x00\\x00\\x01\\x00\\x01"
    >>> detect_framing(len(q).to_bytes(2, "big") + q, b"", 40000, 53)
    True
    >>> detect_framing(q, b"", 40000, 53)  # no length in front: not DNS over TCP
    False
    """
    if len(client) < 14:
        return False
    ln = int.from_bytes(client[:2], "big")
    body = client[2 : 2 + ln]
    parsed = parse_dns_datagram(body, any_port=not {sport, dport} & set(DNS_PORTS), cut=len(body) < ln)
    return parsed is not None and not parsed[0]


def parse(buf: bytes, direction: int, ctx: dict, out: list[Message]) -> list[Message]:
    """DNS messages over TCP, each after its two-byte length: a query labelled by its
    first question, a response by its status (:func:`dns_rcode`), the transaction id as
    key both ways.

    Examples
    --------
    >>> q = bytes.fromhex("abcd01000001000000000000") + b"\\x01a\\x04test\\x00\\x00\\x01\\x00\\x01"
    >>> parse(len(q).to_bytes(2, "big") + q, 0, {}, [])
    [(0, 26, 'A a.test', 43981)]
    """
    pos, n = 0, len(buf)
    while pos + 2 <= n:
        ln = int.from_bytes(buf[pos : pos + 2], "big")
        end = min(pos + 2 + ln, n)
        parsed = parse_dns_datagram(buf[pos + 2 : end], cut=end < pos + 2 + ln)
        if parsed is None:
            break
        label = parsed[2] if direction == 0 else dns_rcode(buf[pos + 2 : end]) if parsed[0] else None
        out.append((pos, end - pos, label, parsed[1]))
        pos = end
    return out


def _dns_skip_name(buf: bytes, pos: int, *, hostname: bool) -> int:
    """The offset after the name at ``pos``, or -1 when it is not a well-formed name:
    labels of 1-63 bytes (printable, without spaces, for ``hostname``) up to 255 bytes
    in all, ending in a zero byte or a pointer to an earlier name of the message."""
    total, n = 0, len(buf)
    while pos < n:
        ln = buf[pos]
        if ln == 0:
            return pos + 1
        if ln & 0xC0 == 0xC0:
            if pos + 1 >= n:
                return -1
            target = ((ln & 0x3F) << 8) | buf[pos + 1]
            return pos + 2 if 12 <= target < pos else -1
        if ln & 0xC0 or pos + 1 + ln > n:
            return -1
        if hostname and not all(0x21 <= c <= 0x7E for c in buf[pos + 1 : pos + 1 + ln]):
            return -1
        total += ln + 1
        if total > 255:
            return -1
        pos += 1 + ln
    return -1


def _dns_name(buf: bytes, pos: int) -> str:
    labels: list[str] = []
    hops = 0
    while pos < len(buf) and hops < 64:
        ln = buf[pos]
        if ln == 0:
            break
        if ln & 0xC0 == 0xC0:
            if pos + 1 >= len(buf):
                break
            pos = ((ln & 0x3F) << 8) | buf[pos + 1]
            hops += 1
            continue
        labels.append(buf[pos + 1 : pos + 1 + ln].decode("ascii", "replace"))
        pos += 1 + ln
        hops += 1
    return ".".join(labels)

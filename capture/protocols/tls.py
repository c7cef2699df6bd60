"""TLS: found by its records; its messages come from the record layer in
:mod:`capture.flows` (the handshake is one call and its return), not from a parser here."""

from __future__ import annotations

__all__ = ["detect_start", "is_record_header", "tls_records", "tls_server_name"]


def detect_start(client: bytes, server: bytes, sport: int, dport: int) -> bool:
    """A ClientHello opens the client's bytes, or (the client's bytes missed) a
    ServerHello opens the server's.

    Examples
    --------
    >>> detect_start(b"\\x16\\x03\\x01\\x02\\x00\\x01", b"", 40000, 8443)
    True
    >>> detect_start(b"", b"\\x16\\x03\\x03\\x00\\x5a\\x02", 40000, 8443)
    True
    >>> detect_start(b"\\x17\\x03\\x03\\x00\\x20", b"", 40000, 8443)  # application data: mid-way
    False
    """
    return _client_hello(client) or (not client and is_record_header(server, 0) and server[5:6] == b"\x02")


def is_record_header(buf: bytes, pos: int) -> bool:
    """A TLS record header at ``pos``: content type 20-23, version 3.x.

    Examples
    --------
    >>> is_record_header(b"\\x17\\x03\\x03\\x00\\x20", 0), is_record_header(b"GET /", 0)
    (True, False)
    """
    return pos + 3 <= len(buf) and 20 <= buf[pos] <= 23 and buf[pos + 1] == 3 and buf[pos + 2] <= 4


def tls_records(buf: bytes) -> list[tuple[int, int, int]]:
    """``(offset, content type, length)`` of each whole or started TLS record from the
    start of ``buf``, up to the first bytes that are not a record header.

    Examples
    --------
    >>> tls_records(b"\\x16\\x03\\x01\\x00\\x02ab\\x17\\x03\\x03\\x00\\x01x")
    [(0, 22, 2), (7, 23, 1)]
    """
    out, pos = [], 0
    while pos + 5 <= len(buf) and is_record_header(buf, pos):
        ln = int.from_bytes(buf[pos + 3 : pos + 5], "big")
        out.append((pos, buf[pos], ln))
        pos += 5 + ln
    return out


def tls_server_name(record: bytes) -> str | None:
    """The server name (SNI) a ClientHello record asks for, if it names one.

    Examples
    --------
    >>> hello = bytes.fromhex("0303") + bytes(32) + b"\\x00" + b"\\x00\\x02\\x13\\x01" + b"\\x01\\x00"
    >>> sni = b"\\x00\\x0d\\x00\\x00\\x0aapi.a.test"
    >>> ext = b"\\x00\\x00" + len(sni).to_bytes(2, "big") + sni
    >>> body = hello + len(ext).to_bytes(2, "big") + ext
    >>> hs = b"\\x01" + len(body).to_bytes(3, "big") + body
    >>> tls_server_name(b"\\x16\\x03\\x01" + len(hs).to_bytes(2, "big") + hs)
    'api.a.test'
    """
    try:
        pos = 5 + 4 + 2 + 32  # record header, handshake header, version, random
        pos += 1 + record[pos]  # session id
        pos += 2 + int.from_bytes(record[pos : pos + 2], "big")  # cipher suites
        pos += 1 + record[pos]  # compression methods
        end = pos + 2 + int.from_bytes(record[pos : pos + 2], "big")
        pos += 2
        while pos + 4 <= min(end, len(record)):
            typ = int.from_bytes(record[pos : pos + 2], "big")
            ln = int.from_bytes(record[pos + 2 : pos + 4], "big")
            if typ == 0:  # server_name: list length, name type 0, name length, name
                name_len = int.from_bytes(record[pos + 7 : pos + 9], "big")
                name = record[pos + 9 : pos + 9 + name_len]
                return name.decode("ascii", "replace") if record[pos + 6] == 0 and name else None
            pos += 4 + ln
    except IndexError:
        return None
    return None


def _client_hello(buf: bytes) -> bool:
    """A handshake record holding a ClientHello opens the stream."""
    return is_record_header(buf, 0) and buf[0] == 22 and buf[5:6] == b"\x01"

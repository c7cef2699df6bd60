"""Protocol messages built by hand for tests."""

from __future__ import annotations

import struct


def thrift_message(mtype: int, name: bytes, seqid: int, body: bytes = b"\x00") -> bytes:
    """A strict binary Thrift message, unframed: version 0x8001 and type, name, sequence
    id, struct."""
    return (
        b"\x80\x01\x00"
        + bytes([mtype])
        + struct.pack(">I", len(name))
        + name
        + struct.pack(">I", seqid)
        + body
    )

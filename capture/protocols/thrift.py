"""Thrift's binary protocol (strict messages), framed or not: the method name labels a
message, the sequence id pairs a call with its return."""

from __future__ import annotations

from capture.protocols.base import NO_REPLY, Message

__all__ = ["detect_framing", "parse"]

_T_FIXED = {2: 1, 3: 1, 4: 8, 6: 2, 8: 4, 10: 8}  # bool, byte, double, i16, i32, i64


def detect_framing(client: bytes, server: bytes, sport: int, dport: int) -> bool:
    """The client opens with a strict binary message header, bare or after a frame's
    four-byte length.

    Examples
    --------
    >>> call = b"\\x80\\x01\\x00\\x01\\x00\\x00\\x00\\x04ping\\x00\\x00\\x00\\x01\\x00"  # CALL ping, seqid 1
    >>> framed = len(call).to_bytes(4, "big") + call
    >>> detect_framing(call, b"", 40000, 9091), detect_framing(framed, b"", 40000, 9091)
    (True, True)
    >>> detect_framing(b"\\x80\\x01\\x00\\x01\\xff\\xff\\xff\\xff" + bytes(8), b"", 40000, 9091)  # 4 GiB name
    False
    """
    return _thrift_header(client, 0) is not None or (
        _thrift_header(client, 4) is not None and client[:2] != b"\x80\x01"
    )


def parse(buf: bytes, direction: int, ctx: dict, out: list[Message]) -> list[Message]:
    """Messages by type and sequence id; a zero sequence id pairs in order instead.

    Examples
    --------
    >>> call = b"\\x80\\x01\\x00\\x01\\x00\\x00\\x00\\x04ping\\x00\\x00\\x00\\x07\\x00"  # CALL, seqid 7
    >>> oneway = b"\\x80\\x01\\x00\\x04\\x00\\x00\\x00\\x03log\\x00\\x00\\x00\\x00\\x00"
    >>> parse(len(call).to_bytes(4, "big") + call + oneway, 0, {}, [])
    [(0, 21, 'ping', 7), (21, 16, 'log', -1)]
    """
    pos, n = 0, len(buf)
    while pos + 12 <= n:
        framed = buf[pos + 4 : pos + 6] == b"\x80\x01" and buf[pos : pos + 2] != b"\x80\x01"
        hdr = _thrift_header(buf, pos + 4 if framed else pos)
        if hdr is None:
            break
        mtype, name, seqid, body = hdr
        key: int | None = seqid if seqid else None
        if mtype == 4:  # ONEWAY: no reply comes
            key = NO_REPLY
        if framed:
            end = min(pos + 4 + int.from_bytes(buf[pos : pos + 4], "big"), n)
        else:
            try:
                end = _thrift_skip(buf, body, 12)
            except IndexError:
                end = n  # the rest of the message was not captured
            except ValueError:
                # A field of no known type (or nested too deep): where the message ends
                # is unknown. It stands as its header, and the rest of the run is unparsed.
                out.append((pos, body - pos, name[:64] or None, key))
                break
        out.append((pos, end - pos, name[:64] or None, key))
        pos = end
    return out


def _thrift_skip(buf: bytes, pos: int, ttype: int, depth: int = 0) -> int:
    """End of a value of ``ttype`` at ``pos`` (binary protocol); raises IndexError when cut."""
    if depth > 64:
        raise ValueError("thrift nesting too deep")
    if ttype in _T_FIXED:
        end = pos + _T_FIXED[ttype]
    elif ttype == 11:  # string / binary
        end = pos + 4 + int.from_bytes(buf[pos : pos + 4], "big", signed=True)
    elif ttype == 12:  # struct: fields until STOP
        p = pos
        while True:
            ft = buf[p]
            if ft == 0:
                end = p + 1
                break
            p = _thrift_skip(buf, p + 3, ft, depth + 1)
    elif ttype == 13:  # map
        kt, vt, cnt = buf[pos], buf[pos + 1], int.from_bytes(buf[pos + 2 : pos + 6], "big", signed=True)
        p = pos + 6
        for _ in range(cnt):
            p = _thrift_skip(buf, _thrift_skip(buf, p, kt, depth + 1), vt, depth + 1)
        end = p
    elif ttype in (14, 15):  # set, list
        et, cnt = buf[pos], int.from_bytes(buf[pos + 1 : pos + 5], "big", signed=True)
        p = pos + 5
        for _ in range(cnt):
            p = _thrift_skip(buf, p, et, depth + 1)
        end = p
    else:
        raise ValueError(f"thrift type {ttype}")
    if end > len(buf) or end < pos:
        raise IndexError("thrift value cut")
    return end


def _thrift_header(buf: bytes, pos: int) -> tuple[int, str, int, int] | None:
    """(message type, name, seqid, body start) of a strict binary message at ``pos``."""
    if buf[pos : pos + 2] != b"\x80\x01" or pos + 12 > len(buf):
        return None
    mtype = buf[pos + 3] & 0x07
    nlen = int.from_bytes(buf[pos + 4 : pos + 8], "big")
    if nlen > 1024 or pos + 12 + nlen > len(buf):
        return None
    name = buf[pos + 8 : pos + 8 + nlen].decode("utf-8", "replace")
    seqid = int.from_bytes(buf[pos + 8 + nlen : pos + 12 + nlen], "big")
    return mtype, name, seqid, pos + 12 + nlen

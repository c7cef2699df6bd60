"""memcached, text and binary protocols: the binary opaque pairs a call with its return."""

from __future__ import annotations

import struct

from capture.protocols.base import NO_REPLY, Message

__all__ = ["detect_start", "parse"]

_MEMCACHED_CMDS = (
    b"get ",
    b"gets ",
    b"set ",
    b"add ",
    b"replace ",
    b"append ",
    b"prepend ",
    b"cas ",
    b"delete ",
    b"incr ",
    b"decr ",
    b"touch ",
    b"gat ",
    b"gats ",
    b"stats",
    b"flush_all",
    b"version",
    b"verbosity ",
    b"quit",
)
_MEMCACHED_STORE = (b"set", b"add", b"replace", b"append", b"prepend", b"cas")
_MEMCACHED_QUITQ = 0x17  # binary QUITQ: closes without an answer
#: The largest body a binary request can declare: memcached's item size limit (-I) is at
#: most 1 GiB. A Thrift call's name (ASCII, from its ninth byte) read as a body length
#: is larger when it begins with a letter or "_": 0x41000000 and up.
_MAX_BODY = 1 << 30


def detect_start(client: bytes, server: bytes, sport: int, dport: int) -> bool:
    """A binary request header (magic 0x80, 24 bytes, a body at least as long as its key
    and extras and at most ``_MAX_BODY``) answered by a binary response (0x81) or not yet
    answered, or a text command. An unanswered unframed Thrift call (0x8001 too) fails
    the body's bound: its name stands where the body length would.

    Examples
    --------
    >>> detect_start(b"\\x80" + bytes(23), b"\\x81", 40000, 5555)
    True
    >>> detect_start(b"get k\\r\\n", b"", 40000, 5555)
    True
    >>> detect_start(b"\\x80" + bytes(23), b"HTTP", 40000, 5555)
    False
    >>> detect_start(b"\\x80\\x01\\x00\\x01\\x00\\x00\\x00\\x08getUsers" + bytes(12), b"", 40000, 5555)
    False
    """
    if client[:1] == b"\x80" and len(client) >= 24 and server[:1] in (b"\x81", b""):
        key, extras, body = struct.unpack_from(">H B 3x I", client, 2)
        return key + extras <= body <= _MAX_BODY
    return any(client.startswith(c) for c in _MEMCACHED_CMDS)


def parse(buf: bytes, direction: int, ctx: dict, out: list[Message]) -> list[Message]:
    """Text commands labelled by their word (a storage command with its data block) and
    replies up to their status line; binary messages by their header's body length,
    labelled by opcode, keyed by opaque.

    Examples
    --------
    >>> parse(b"set k 0 0 2\\r\\nhi\\r\\nget k noreply\\r\\n", 0, {}, [])
    [(0, 17, 'set', None), (17, 15, 'get', -1)]
    >>> parse(b"VALUE k 0 2\\r\\nhi\\r\\nEND\\r\\n", 1, {}, [])
    [(0, 22, None, None)]
    """
    pos, n = 0, len(buf)
    while pos < n:
        if buf[pos] in (0x80, 0x81):  # binary protocol: 24-byte header, body length at 8
            if n - pos < 24:
                out.append((pos, n - pos, None, None))
                break
            _magic, opcode, _kl, _el, _dt, _st, blen, opaque = struct.unpack_from(">BBHBBHII", buf, pos)
            end = min(pos + 24 + blen, n)
            key = NO_REPLY if direction == 0 and opcode == _MEMCACHED_QUITQ else opaque
            out.append((pos, end - pos, f"op{opcode:#04x}", key))
            pos = end
            continue
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            out.append((pos, n - pos, None, None))
            break
        line = buf[pos:eol]
        word = line.split(b" ", 1)[0]
        if direction == 0:
            end = eol + 2
            if word in _MEMCACHED_STORE:
                fields = line.split()
                if len(fields) > 4 and fields[4].isdigit():
                    end += int(fields[4]) + 2
            # "quit" closes the connection and "noreply" asks for silence: nothing answers.
            quiet = word == b"quit" or line.rstrip().endswith(b" noreply")
            out.append(
                (pos, min(end, n) - pos, word[:32].decode("ascii", "replace"), NO_REPLY if quiet else None)
            )
            pos = min(end, n)
            continue
        p = _reply_end(buf, pos)
        out.append((pos, p - pos, None, None))
        pos = p
    return out


def _reply_end(buf: bytes, pos: int) -> int:
    """End of the text reply at ``pos``: VALUE blocks and STAT lines up to the line that
    ends them (END), or one status line; the end of ``buf`` when it is cut."""
    n = len(buf)
    p = pos
    while True:
        eol = buf.find(b"\r\n", p)
        if eol < 0:
            p = n
            break
        line = buf[p:eol]
        if line.startswith(b"VALUE "):
            try:
                p = eol + 2 + int(line.split()[3]) + 2
            except (IndexError, ValueError):
                p = eol + 2
            continue
        if line.startswith(b"STAT "):
            p = eol + 2
            continue
        p = eol + 2
        break
    return min(p, n)

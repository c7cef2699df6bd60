"""MySQL's client/server protocol: a message is a run of packets whose sequence numbers
count up by one; the server's greeting opens the connection unasked; a response is
labelled by its status (``OK``, or ``ERROR`` and the code of its ERR packet)."""

from __future__ import annotations

from capture.protocols.base import NO_REPLY, Message
from capture.protocols.tls import is_record_header

__all__ = ["detect_framing", "parse"]

_MYSQL_COMMANDS = {
    0x01: "QUIT", 0x02: "INIT_DB", 0x03: "QUERY", 0x04: "FIELD_LIST", 0x05: "CREATE_DB",
    0x06: "DROP_DB", 0x07: "REFRESH", 0x08: "SHUTDOWN", 0x09: "STATISTICS", 0x0A: "PROCESS_INFO",
    0x0C: "PROCESS_KILL", 0x0D: "DEBUG", 0x0E: "PING", 0x11: "CHANGE_USER", 0x12: "BINLOG_DUMP",
    0x16: "STMT_PREPARE", 0x17: "STMT_EXECUTE", 0x18: "STMT_SEND_LONG_DATA", 0x19: "STMT_CLOSE",
    0x1A: "STMT_RESET", 0x1B: "SET_OPTION", 0x1C: "STMT_FETCH", 0x1F: "RESET_CONNECTION",
}  # fmt: skip
_MYSQL_NO_REPLY = frozenset((0x01, 0x18, 0x19))  # QUIT, STMT_SEND_LONG_DATA, STMT_CLOSE


def detect_framing(client: bytes, server: bytes, sport: int, dport: int) -> bool:
    """The server's greeting (or a refusal, or a first response packet) and, if the
    client has sent anything, a command or login packet; or, with no answer seen, one
    whole command packet from the client.

    Examples
    --------
    >>> greeting = b"\\x4a\\x00\\x00\\x00\\x0a5.7.44\\x00" + bytes(64)  # protocol 10, sequence 0
    >>> detect_framing(b"", greeting, 40000, 3307)
    True
    >>> detect_framing(b"\\x09\\x00\\x00\\x00\\x03SELECT 1", b"", 40000, 3307)  # COM_QUERY, whole
    True
    >>> detect_framing(b"\\x09\\x00\\x00\\x00\\x03SELECT", b"", 40000, 3307)  # cut: could be anything
    False
    """
    if _mysql_plausible(server, client=False) and (not client or _mysql_plausible(client, client=True)):
        return True
    return (
        not server
        and _mysql_plausible(client, client=True)
        and int.from_bytes(client[:3], "little") + 4 == len(client)
    )


def parse(buf: bytes, direction: int, ctx: dict, out: list[Message]) -> list[Message]:
    """A message is a run of packets whose sequence numbers count up by one; a command
    (sequence 0 from the client) or a number that does not follow starts the next.

    A response is labelled by its status (:func:`_mysql_status`): ``ERROR <code>`` where
    its first or last packet is an ERR packet (``ERROR 1146``), else ``OK``.

    Examples
    --------
    >>> parse(b"\\x09\\x00\\x00\\x00\\x03select 1\\x01\\x00\\x00\\x00\\x01", 0, {}, [])
    [(0, 13, 'SELECT', None), (13, 5, 'QUIT', -1)]
    >>> parse(b"\\x07\\x00\\x00\\x01\\x00\\x00\\x00\\x02\\x00\\x00\\x00", 1, {}, [])  # an OK packet
    [(0, 11, 'OK', None)]
    """
    pos, n = 0, len(buf)
    start, prev, label, key = -1, -2, None, None
    first = last = -1  # a response's first and last packet (their offsets)
    while pos + 4 <= n:
        if is_record_header(buf, pos):
            break  # the connection went over to TLS (after an SSLRequest)
        ln = int.from_bytes(buf[pos : pos + 3], "little")
        seq = buf[pos + 3]
        end = min(pos + 4 + ln, n)
        if seq != (prev + 1) & 0xFF or (direction == 0 and seq == 0):
            if start >= 0:
                out.append(
                    (start, pos - start, _mysql_status(buf, first, last) if first >= 0 else label, key)
                )
            start, label, key, first = pos, None, None, -1
            if direction == 1:
                first = pos
            if direction == 1 and seq == 0 and buf[pos + 4 : pos + 5] in (b"\x0a", b"\xff"):
                # The server's greeting (or its refusal instead) opens the connection
                # unasked; the client's login and the server's answer to it are the call
                # and its return.
                label, key = ("greeting" if buf[pos + 4] == 0x0A else "refused"), NO_REPLY
                first = -1  # a send: no status
            if direction == 0:
                cmd = buf[pos + 4] if pos + 4 < n else -1
                if seq == 0 and cmd in _MYSQL_COMMANDS:
                    label = _MYSQL_COMMANDS[cmd]
                    if cmd in (0x03, 0x16):
                        word = buf[pos + 5 : min(end, pos + 64)].split(None, 1)
                        label = word[0][:32].decode("utf-8", "replace").upper() if word else label
                    key = NO_REPLY if cmd in _MYSQL_NO_REPLY else None
                elif seq == 0:
                    break  # not a MySQL command: garbage or the far side of a gap
                elif seq == 1 and ln == 32 and pos + 5 < n and buf[pos + 5] & 0x08:
                    # An SSLRequest (the login's first 32 bytes, CLIENT_SSL set): the server
                    # answers by starting TLS, and what follows is not MySQL's to read.
                    out.append((pos, min(pos + 4 + ln, n) - pos, "SSLRequest", NO_REPLY))
                    return out
                else:
                    label = "login" if seq == 1 else "auth"
        prev, last = seq, pos
        pos = end
    if start >= 0:
        out.append((start, pos - start, _mysql_status(buf, first, last) if first >= 0 else label, key))
    return out


def _mysql_status(buf: bytes, first: int, last: int) -> str | None:
    """The status of the response whose first and last packets start at ``first`` and
    ``last``: ``ERROR <code>`` where either is an ERR packet (0xFF and a two-byte error
    code: an error instead of an answer, or one that ends a result set); else ``OK`` for
    the answer to a command (sequence number 1: an OK packet, a result set, ...); in the
    login (sequence 2 on) ``OK`` only where it ends in an OK packet (an auth switch or
    more auth data is None).

    Examples
    --------
    >>> _mysql_status(b"\\x09\\x00\\x00\\x01\\xff\\x7a\\x04#42S02", 0, 0)  # ERR 1146
    'ERROR 1146'
    >>> _mysql_status(b"\\x01\\x00\\x00\\x01\\x01", 0, 0)  # a result set of one column
    'OK'
    >>> _mysql_status(b"\\x02\\x00\\x00\\x02\\x01\\x03", 0, 0) is None  # more auth data, in the login
    True
    """
    for at in (first, last):
        if buf[at + 4 : at + 5] == b"\xff" and at + 7 <= len(buf):
            return f"ERROR {int.from_bytes(buf[at + 5 : at + 7], 'little')}"
    if buf[first + 3] == 1 or buf[last + 4 : last + 5] == b"\x00":
        return "OK"
    return None


def _mysql_plausible(buf: bytes, *, client: bool) -> bool:
    if len(buf) < 5:
        return False
    ln = int.from_bytes(buf[:3], "little")
    if client:
        return buf[3] in (0, 1) and 1 <= ln <= 1 << 24 and (buf[3] == 1 or buf[4] in _MYSQL_COMMANDS)
    # a greeting (protocol 10, seq 0), a refusal instead of it (ERR, seq 0, error code and
    # text), or a first response packet (seq 1)
    greeting = buf[3] == 0 and ((buf[4] == 0x0A and ln >= 20) or (buf[4] == 0xFF and 4 <= ln == len(buf) - 4))
    return greeting or (buf[3] == 1 and 1 <= ln <= 1 << 24)

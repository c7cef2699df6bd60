"""Redis (RESP2 and RESP3, inline commands too): commands and replies paired in order, a
reply labelled by its status (``OK``, or an error reply's prefix: ``ERR``, ``WRONGTYPE``)."""

from __future__ import annotations

import re

from capture.protocols.base import NO_REPLY, Message

__all__ = ["detect_on_port", "detect_start", "parse"]


def detect_start(client: bytes, server: bytes, sport: int, dport: int) -> bool:
    """The client opens with a RESP array (``*`` and a count): a command.

    Examples
    --------
    >>> detect_start(b"*1\\r\\n$4\\r\\nPING\\r\\n", b"+PONG\\r\\n", 40000, 7000)
    True
    >>> detect_start(b"PING\\r\\n", b"+PONG\\r\\n", 40000, 6379)  # inline: see detect_on_port
    False
    """
    return client[:1] == b"*" and client[1:2].isdigit()


def detect_on_port(client: bytes, server: bytes, sport: int, dport: int) -> bool:
    """On Redis's port, content the checks by content missed: an inline command (a word
    from the client) or a simple reply, an error, a bulk string or an integer back.

    Examples
    --------
    >>> detect_on_port(b"PING\\r\\n", b"", 40000, 6379), detect_on_port(b"", b"+PONG\\r\\n", 40000, 6379)
    (True, True)
    >>> detect_on_port(b"\\x00\\x01", b"\\x02", 40000, 6379)
    False
    """
    return client[:1].isalpha() or server[:1] in (b"+", b"-", b"$", b":")


#: Commands that enter or leave pub/sub: the server confirms each channel apart, and
#: then pushes messages unasked. Both ways they are sends, not calls and returns.
_REDIS_PUBSUB = frozenset(
    ("SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE", "UNSUBSCRIBE", "PUNSUBSCRIBE", "SUNSUBSCRIBE")
)
_REDIS_PUSHES = frozenset(
    (
        *(b"subscribe", b"psubscribe", b"ssubscribe", b"unsubscribe", b"punsubscribe", b"sunsubscribe"),
        *(b"message", b"pmessage", b"smessage"),
    )
)


def parse(buf: bytes, direction: int, ctx: dict, out: list[Message]) -> list[Message]:
    """Commands and replies, paired in order; pub/sub traffic and the commands that
    ``CLIENT REPLY OFF`` or ``SKIP`` silence are sends. A reply is labelled by its status
    (:func:`_redis_status`).

    Examples
    --------
    >>> parse(b"*1\\r\\n$4\\r\\nPING\\r\\nGET k\\r\\n", 0, {}, [])
    [(0, 14, 'PING', None), (14, 7, 'GET', None)]
    >>> parse(b"+PONG\\r\\n>3\\r\\n", 1, {}, [])  # a RESP3 push is a send
    [(0, 7, 'OK', None), (7, 4, None, -1)]
    """
    pos, n = 0, len(buf)
    while pos < n:
        end = _resp_end(buf, pos)
        if end == -2:
            break
        if end == -1:
            end = n
        label, key = None, None
        if direction == 0:
            label = _redis_command(buf, pos, end)
            key = _redis_client_key(buf[pos:end], label, ctx)
        elif buf[pos : pos + 1] == b">" or _redis_push(buf, pos, end):
            key = NO_REPLY
        else:
            label = _redis_status(buf, pos, end)
        out.append((pos, end - pos, label, key))
        pos = end
    return out


def _redis_status(buf: bytes, pos: int, end: int) -> str:
    """A reply's status: an error's prefix (the first word of a ``-`` simple error or a
    RESP3 ``!`` blob error, where it is upper case as Redis writes its prefixes; else
    ``ERR``), ``OK`` for any other reply.

    Examples
    --------
    >>> r = b"-WRONGTYPE Operation against a key holding the wrong kind of value\\r\\n"
    >>> _redis_status(r, 0, len(r)), _redis_status(b"-oops\\r\\n", 0, 7), _redis_status(b":1\\r\\n", 0, 4)
    ('WRONGTYPE', 'ERR', 'OK')
    >>> _redis_status(b"!21\\r\\nSYNTAX invalid syntax\\r\\n", 0, 28)
    'SYNTAX'
    """
    kind = buf[pos : pos + 1]
    if kind == b"-":
        text = buf[pos + 1 : end]
    elif kind == b"!":
        text = buf[pos:end].split(b"\r\n", 1)[-1]
    else:
        return "OK"
    word = text.split(None, 1)[0][:32] if text.strip() else b""
    return word.decode() if _ERROR_PREFIX.fullmatch(word) else "ERR"


# What Redis writes as an error's prefix: an upper-case word (ERR, WRONGTYPE, NOAUTH, ...).
_ERROR_PREFIX = re.compile(rb"[A-Z][A-Z0-9_]*")


def _redis_push(buf: bytes, pos: int, end: int) -> bool:
    """A reply that is a pub/sub confirmation or message (an array led by its kind)."""
    if buf[pos : pos + 1] != b"*":
        return False
    parts = buf[pos:end].split(b"\r\n", 3)
    return len(parts) > 2 and parts[2].lower() in _REDIS_PUSHES


def _redis_client_key(command: bytes, word: str, ctx: dict) -> int | None:
    """``NO_REPLY`` for a command the server will not answer, else None; follows
    ``CLIENT REPLY ON|OFF|SKIP`` in ``ctx``."""
    if word in _REDIS_PUBSUB:
        return NO_REPLY
    silent = ctx.get("redis_reply", "on")
    if word == "CLIENT":
        mode = re.search(rb"(?i)\breply\b\s*(?:\r\n\$\d+\r\n)?\s*(on|off|skip)\b", command)
        if mode:
            ctx["redis_reply"] = mode.group(1).lower().decode()
            # OFF and SKIP are not answered themselves; ON is.
            return None if ctx["redis_reply"] == "on" else NO_REPLY
    if silent == "off":
        return NO_REPLY
    if silent == "skip":
        ctx["redis_reply"] = "on"
        return NO_REPLY
    return None


def _redis_command(buf: bytes, pos: int, end: int) -> str:
    if buf[pos : pos + 1] == b"*":
        parts = buf[pos:end].split(b"\r\n", 3)
        word = parts[2] if len(parts) > 2 else b""
    else:
        word = buf[pos:end].split(None, 1)[0] if buf[pos:end].strip() else b""
    return word[:32].decode("ascii", "replace").upper()


def _resp_end(buf: bytes, pos: int, depth: int = 0) -> int:
    """End of one RESP value at ``pos``; -1 when incomplete; -2 when not RESP."""
    n = len(buf)
    if pos >= n:
        return -1
    t = buf[pos : pos + 1]
    eol = buf.find(b"\r\n", pos)
    if eol < 0:
        return -1 if n - pos < 1 << 16 else -2
    if t in (b"+", b"-", b":", b",", b"#", b"_", b"(", b"("):
        return eol + 2
    if t in (b"$", b"!", b"=", b"*", b"%", b"~", b">", b"|"):
        try:
            count = int(buf[pos + 1 : eol])
        except ValueError:
            return -2
        if t in (b"$", b"!", b"="):
            if count < 0:
                return eol + 2
            end = eol + 2 + count + 2
            return end if end <= n else -1
        if count < 0:
            return eol + 2
        if depth > 32:
            return -2
        p = eol + 2
        for _ in range(count * (2 if t in (b"%", b"|") else 1)):
            p = _resp_end(buf, p, depth + 1)
            if p < 0:
                return p
        return p
    # inline command: one line
    return eol + 2

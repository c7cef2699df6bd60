"""Application protocols: detection by content and message boundaries in a byte stream.

A parser gets one direction of one connection as contiguous byte runs (a run ends at a
gap in the capture) and returns the messages it finds as
``(offset, length, label, key)``: ``offset`` into the run, ``key`` the protocol's own
call identifier (DNS transaction id, memcached opaque) or ``None`` when calls and
returns pair in order. Parsers never raise on garbage: what does not parse ends the
run's messages (the rest is counted as unparsed by the caller).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "DNS_PORTS",
    "NOT_DNS_PORTS",
    "PROTOCOLS",
    "REQUEST_METHODS",
    "Message",
    "detect_tcp",
    "parse_dns_datagram",
    "parse_stream",
]

#: (offset, length, label, key) of one message in a run of stream bytes.
Message = tuple[int, int, str | None, int | None]
#: Key of a message that expects no answer by protocol: written as a ``send``.
NO_REPLY = -1

PROTOCOLS = (
    "http",
    "dns",
    "redis",
    "memcached",
    "mysql",
    "postgresql",
    "thrift",
    "http2",
    "tcp",
    "udp",
    "tls",
)

#: Request methods: a client whose first bytes are one and a space speaks HTTP/1.x.
REQUEST_METHODS = (
    b"GET",
    b"POST",
    b"PUT",
    b"DELETE",
    b"HEAD",
    b"OPTIONS",
    b"PATCH",
    b"CONNECT",
    b"TRACE",
    b"PROPFIND",
    b"PROPPATCH",
    b"MKCOL",
    b"COPY",
    b"MOVE",
    b"LOCK",
    b"UNLOCK",
    b"SEARCH",
    b"REPORT",
)
_REQ_LINE = re.compile(rb"([A-Z][A-Z_-]{1,15}) (\S{1,8192}) HTTP/1\.[019]\r?\n")
# At a message boundary any upper-case token line is a request, as servers see it (they
# answer malformed request lines such as "GET /HTTP/1.1" with 400).
_REQ_LINE_LENIENT = re.compile(rb"([!-~]{1,20})(?: ([^\r\n]{0,8192}))?\r?\n")
_STATUS_LINE = re.compile(rb"HTTP/1\.[019] (\d{3})[^\r\n]*\r?\n")
_HDR_END = re.compile(rb"\r?\n\r?\n")
_CL = re.compile(rb"\r?\ncontent-length[ \t]*:[ \t]*(\d+)", re.IGNORECASE)
_TE_CHUNKED = re.compile(rb"\r?\ntransfer-encoding[ \t]*:[^\r\n]*chunked", re.IGNORECASE)
_CLOSE = re.compile(rb"\r?\nconnection[ \t]*:[ \t]*close", re.IGNORECASE)
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
_MEMCACHED_END = (
    b"END\r\n",
    b"STORED\r\n",
    b"NOT_STORED\r\n",
    b"EXISTS\r\n",
    b"NOT_FOUND\r\n",
    b"DELETED\r\n",
    b"TOUCHED\r\n",
    b"OK\r\n",
    b"ERROR\r\n",
)
_WELL_KNOWN = {
    80: "http",
    8080: "http",
    8000: "http",
    53: "dns",
    6379: "redis",
    11211: "memcached",
    3306: "mysql",
    5432: "postgresql",
    9090: "thrift",
    50051: "http2",
}


def _is_request(head: bytes) -> bool:
    sp = head.find(b" ")
    return (0 < sp <= 16 and head[:sp] in REQUEST_METHODS) or _REQ_LINE.match(head) is not None


def detect_tcp(client: bytes, server: bytes, sport: int, dport: int) -> str:
    """The protocol of a connection from the first bytes each side sent and the ports.

    Content decides; the server port is a tie-breaker only for content that could be
    several things (length-prefixed binary protocols).

    Examples
    --------
    >>> detect_tcp(b"GET / HTTP/1.1\\r\\n", b"HTTP/1.1 200 OK\\r\\n", 40000, 8888)
    'http'
    >>> detect_tcp(b"*1\\r\\n$4\\r\\nPING\\r\\n", b"+PONG\\r\\n", 40000, 7000)
    'redis'
    >>> detect_tcp(b"\\x00\\x01", b"", 40000, 5555)
    'tcp'
    """
    # The checks go from the most telling content to the least; the first that matches decides.
    return (
        _detect_by_start(client, server)
        or ("dns" if _dns_over_tcp(client, any_port=not {sport, dport} & set(DNS_PORTS)) else None)
        or _detect_by_framing(client, server)
        or _detect_by_port(client, server, sport, dport)
    )


def _detect_by_start(client: bytes, server: bytes) -> str | None:
    """A protocol that the first bytes name: a preface, a handshake, a request or status line, a command."""
    if client.startswith(_H2_PREFACE[:14]):
        return "http2"
    if _tls_client_hello(client) or (not client and _tls_record(server, 0) and server[5:6] == b"\x02"):
        return "tls"
    if _is_request(client) or server.startswith(b"HTTP/1."):
        return "http"
    if _REQ_LINE.search(client) or b"HTTP/1." in server:  # junk before the first message
        return "http"
    if client[:1] == b"*" and client[1:2].isdigit():
        return "redis"
    if client[:1] == b"\x80" and len(client) >= 24 and server[:1] in (b"\x81", b""):
        return "memcached"
    if any(client.startswith(c) for c in _MEMCACHED_CMDS):
        return "memcached"
    return None


def _detect_by_framing(client: bytes, server: bytes) -> str | None:
    """A binary protocol whose length-prefixed messages chain plausibly (both ways when
    the server's bytes are there)."""
    # Seen mid-way: frames that chain both ways (the server speaks first with SETTINGS).
    h2_first = (0, 1, 4, 6, 8)  # DATA, HEADERS, SETTINGS, PING, WINDOW_UPDATE
    if (
        client
        and _h2_frames_plausible(client)
        and client[3] in h2_first
        and (not server or (_h2_frames_plausible(server) and server[3] in h2_first))
    ):
        return "http2"
    if _thrift_header(client, 0) or (_thrift_header(client, 4) and client[:2] != b"\x80\x01"):
        return "thrift"
    if _mysql_plausible(server, client=False) and (not client or _mysql_plausible(client, client=True)):
        return "mysql"
    if (
        not server
        and _mysql_plausible(client, client=True)
        and int.from_bytes(client[:3], "little") + 4 == len(client)
    ):
        return "mysql"  # one whole command packet and no answer seen
    if _pg_start(client) or (
        _pg_typed(client, _PG_CLIENT_TYPES) and (not server or _pg_typed(server, _PG_SERVER_TYPES))
    ):
        return "postgresql"
    return None


def _detect_by_port(client: bytes, server: bytes, sport: int, dport: int) -> str:
    """What the content checks left undecided: ``tcp``, unless the port says Redis and the
    bytes could be its inline commands."""
    port = dport if dport in _WELL_KNOWN else sport
    guess = _WELL_KNOWN.get(port, "tcp")
    # Text protocols on their own port with content the checks above missed (inline commands).
    if guess == "redis" and (client[:1].isalpha() or server[:1] in (b"+", b"-", b"$", b":")):
        return "redis"
    return "tcp"


# ---- HTTP/1.x ----------------------------------------------------------------------------
def _http_body_end(buf: bytes, pos: int, head_end: int, head: bytes, *, request: bool, no_body: bool) -> int:
    """End offset of the message whose header ends at ``head_end``; -1 when not in ``buf``."""
    if no_body:
        return head_end
    low = head.lower()
    if b"chunked" in low and _TE_CHUNKED.search(head):
        p = head_end
        n = len(buf)
        while True:
            eol = buf.find(b"\r\n", p, p + 64)
            if eol < 0:
                return -1 if n - p < 64 else n
            size_s = buf[p:eol].split(b";", 1)[0].strip()
            try:
                size = int(size_s, 16)
            except ValueError:
                return n  # malformed chunk size: the message runs to the end of the run
            p = eol + 2
            if size == 0:
                # trailers end with an empty line
                end = buf.find(b"\r\n\r\n", p - 2)
                return end + 4 if end >= 0 else n
            p += size + 2
            if p > n:
                return -1
    m = _CL.search(head) if b"content-length" in low else None
    if m:
        return head_end + int(m.group(1))
    if request:
        return head_end
    return -1  # response without length: runs until the connection closes


def _parse_http(buf: bytes, direction: int, ctx: dict, out: list[Message]) -> list[Message]:
    pos, n = 0, len(buf)
    methods: list[bytes] = ctx.setdefault("methods", [])
    while pos < n:
        m = (_REQ_LINE_LENIENT if direction == 0 else _STATUS_LINE).match(buf, pos)
        if direction == 0 and m is not None and _http09_request(m) and not buf[m.end() :].strip(b"\r\n"):
            # HTTP/0.9: "GET path" and nothing more, no version and no headers; the
            # server answers with the bare document and closes the connection.
            methods.append(b"0.9")
            out.append((pos, n - pos, _http_label(m, 0), None))
            break
        if direction == 1 and m is None and methods[:1] == [b"0.9"]:
            methods.pop(0)
            out.append((pos, n - pos, None, None))
            break
        if m is None:
            # Garbage or the tail of a message cut by a gap: look for the next start line.
            nxt = _resync_http(buf, pos + 1, direction)
            if nxt < 0:
                break
            pos = nxt
            continue
        he = _header_end(buf, m.end() - 2)
        if direction == 0 and m.group(1) == b"PRI" and (m.group(2) or b"").startswith(b"* HTTP/2"):
            break  # the HTTP/2 connection preface after an Upgrade: no more HTTP/1.x here
        if he is None:
            out.append((pos, n - pos, _http_label(m, direction), None))
            break
        head = buf[pos : he[0] + 2]
        head_end = he[1]
        if direction == 0:
            method = m.group(1)
            methods.append(method)
            end = _http_body_end(buf, pos, head_end, head, request=True, no_body=False)
            label = _http_label(m, 0)
        else:
            status = int(m.group(1))
            interim = 100 <= status < 200 and status != 101  # 101 answers an Upgrade
            req = methods.pop(0) if methods and not interim else b""
            no_body = interim or status in (204, 304) or req == b"HEAD"
            end = _http_body_end(buf, pos, head_end, head, request=False, no_body=no_body)
            label = _http_label(m, 1)
            if interim:
                # 100 Continue is part of the exchange, not a return of its own.
                pos = head_end
                continue
        if end < 0 or end > n:
            end = n
        out.append((pos, end - pos, label, None))
        pos = end
    return out


def _http09_request(m: re.Match[bytes]) -> bool:
    """A request line of HTTP/0.9: GET and a path, no version."""
    target = m.group(2) or b""
    return m.group(1) == b"GET" and bool(target) and b" " not in target


def _header_end(buf: bytes, start: int) -> tuple[int, int] | None:
    """(start, end) of the empty line ending a header block; bare LF line ends allowed."""
    i = buf.find(b"\r\n\r\n", start)
    if i >= 0 and b"\n\n" not in buf[start:i]:
        return i, i + 4
    m = _HDR_END.search(buf, start)
    return (m.start(), m.end()) if m else None


def _resync_http(buf: bytes, start: int, direction: int) -> int:
    m = (_REQ_LINE if direction == 0 else _STATUS_LINE).search(buf, start)
    return m.start() if m else -1


def _http_label(m: re.Match[bytes], direction: int) -> str:
    if direction == 0:
        path = (m.group(2) or b"").rsplit(b" HTTP/", 1)[0][:200].split(b"?", 1)[0]
        return f"{m.group(1).decode('ascii', 'replace')} {path.decode('utf-8', 'replace')}"
    return m.group(1).decode("ascii")


# ---- Redis RESP ---------------------------------------------------------------------------
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


def _parse_redis(buf: bytes, direction: int, ctx: dict, out: list[Message]) -> list[Message]:
    """Commands and replies, paired in order; pub/sub traffic and the commands that
    ``CLIENT REPLY OFF`` or ``SKIP`` silence are sends."""
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
        out.append((pos, end - pos, label, key))
        pos = end
    return out


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


# ---- memcached ----------------------------------------------------------------------------
def _parse_memcached(buf: bytes, direction: int, ctx: dict, out: list[Message]) -> list[Message]:
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
        # A response: VALUE blocks up to END, or one status line.
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
        p = min(p, n)
        out.append((pos, p - pos, None, None))
        pos = p
    return out


# ---- DNS ----------------------------------------------------------------------------------
#: Ports DNS is known to use (unicast, multicast, link-local multicast): there a message
#: may hold any number of questions (mDNS answers carry none) and names any bytes.
DNS_PORTS = (53, 5353, 5355)
#: Ports of protocols that write DNS's wire format but are not DNS (NetBIOS name service).
NOT_DNS_PORTS = (137,)
_DNS_OPCODES = frozenset((0, 1, 2, 4, 5))  # QUERY, IQUERY, STATUS, NOTIFY, UPDATE
_DNS_MAX_RECORDS = 4096
_DNS_CLASSES = frozenset((1, 3, 4, 254, 255))  # IN, CH, HS, NONE, ANY (mDNS: top bit aside)


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


def _dns_over_tcp(client: bytes, *, any_port: bool) -> bool:
    """The client's first bytes are a length-prefixed DNS query (RFC 1035, 4.2.2)."""
    if len(client) < 14:
        return False
    ln = int.from_bytes(client[:2], "big")
    body = client[2 : 2 + ln]
    parsed = parse_dns_datagram(body, any_port=any_port, cut=len(body) < ln)
    return parsed is not None and not parsed[0]


def _parse_dns_tcp(buf: bytes, direction: int, ctx: dict, out: list[Message]) -> list[Message]:
    pos, n = 0, len(buf)
    while pos + 2 <= n:
        ln = int.from_bytes(buf[pos : pos + 2], "big")
        end = min(pos + 2 + ln, n)
        parsed = parse_dns_datagram(buf[pos + 2 : end], cut=end < pos + 2 + ln)
        if parsed is None:
            break
        out.append((pos, end - pos, parsed[2] if direction == 0 else None, parsed[1]))
        pos = end
    return out


# ---- HTTP/2 (and gRPC over it) -----------------------------------------------------------
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def _h2_frames_plausible(buf: bytes) -> bool:
    """Whether ``buf`` starts with HTTP/2 frame headers that chain (at least one whole frame)."""
    pos, seen = 0, 0
    while pos + 9 <= len(buf) and seen < 4:
        ln = int.from_bytes(buf[pos : pos + 3], "big")
        typ, sid = buf[pos + 3], int.from_bytes(buf[pos + 5 : pos + 9], "big")
        if typ > 9 or ln > 1 << 20 or sid >> 31:
            return False
        if (typ in (4, 7) and sid != 0) or (typ in (0, 1, 3, 5, 9) and sid == 0):
            return False
        pos += 9 + ln
        seen += 1
    return seen >= 1 and pos <= len(buf) + (1 << 14)


class _HeaderBlocks:
    """One direction's HPACK state, decoded block by block in order (HEADERS,
    PUSH_PROMISE and their CONTINUATIONs).

    The dynamic table lives as long as the connection, and a capture may have missed
    its beginning or some of its bytes. A fresh table is still sound: new entries go
    in front, so the entries it has are the ones the sender's table has under the same
    indices, and a reference to one it never saw fails rather than misleads. So the
    table starts fresh, and starts fresh again after a failed block, a frame cut short
    or a gap; a block that fails gives no label.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        from hpack import Decoder

        self.decoder = Decoder()
        # The peer may allow a larger table in SETTINGS; the size updates come in-band.
        self.decoder.max_allowed_table_size = 1 << 24
        self.pending: bytearray | None = None  # the fragments of a block not ended yet

    def add(self, fragment: bytes | None, last: bool, starts: bool) -> dict[bytes, bytes] | None:
        """Add a block fragment (None: a malformed frame); at the block's end, its
        pseudo-headers (None if the block refers to what this table never saw). A
        fragment that does not start a block (a CONTINUATION) with no block begun is
        the tail of one this side missed: skipped, never read as a block of its own."""
        if fragment is None:
            self.reset()
            return None
        if self.pending is None:
            if not starts:
                return None
            self.pending = bytearray()
        self.pending.extend(fragment)
        if not last:
            return None
        block = bytes(self.pending)
        self.pending = None
        from hpack import HPACKError

        try:
            headers = self.decoder.decode(block, raw=True)
        except (HPACKError, ValueError, IndexError):
            self.reset()
            return None
        return {name: value for name, value in headers if name.startswith(b":")}


def _h2_fragment(payload: bytes, typ: int, flags: int) -> bytes | None:
    """The header block fragment of a HEADERS (1), PUSH_PROMISE (5) or CONTINUATION (9)
    frame's payload: padding, priority and the promised stream id taken off (None when
    they do not fit in the frame)."""
    if typ in (1, 5) and flags & 0x8:  # PADDED
        if not payload or payload[0] >= len(payload):
            return None
        payload = payload[1 : len(payload) - payload[0]]
    skip = (5 if typ == 1 and flags & 0x20 else 0) + (4 if typ == 5 else 0)  # PRIORITY, promised id
    if len(payload) < skip:
        return None
    return payload[skip:]


def _parse_http2(buf: bytes, direction: int, ctx: dict, out: list[Message]) -> list[Message]:
    """A message per stream and direction: from its first HEADERS frame to END_STREAM.

    The length is the bytes of that stream's HEADERS/DATA/CONTINUATION frames (streams
    interleave); the key is the stream id, so call and return pair by stream. The label
    is the request's ``:method :path`` (a gRPC call's method, e.g.
    ``POST /greet.GreetService/Greet``), from the HPACK-decoded headers, for the call
    and its return; ``stream N`` where the headers cannot be decoded (see
    ``_HeaderBlocks``).
    """
    # Open messages grow frame by frame: they go into ``out`` at the run's end.
    started: list[list] = []
    pos, n = 0, len(buf)
    # Every run starts a fresh table: a later run of a direction comes after a gap.
    blocks = _HeaderBlocks()
    preface = direction == 0 and buf.startswith(_H2_PREFACE)
    # After a gap the run may begin inside a frame: read no headers unless frames chain.
    readable = preface or _h2_frames_plausible(buf)
    if preface:
        pos = len(_H2_PREFACE)
    open_: dict[int, list] = ctx.setdefault(("h2", direction), {})
    labels: dict[int, str] = ctx.setdefault("h2-labels", {})
    while pos + 9 <= n:
        ln = int.from_bytes(buf[pos : pos + 3], "big")
        typ, flags = buf[pos + 3], buf[pos + 4]
        sid = int.from_bytes(buf[pos + 5 : pos + 9], "big") & 0x7FFFFFFF
        if ln > 1 << 24:
            break  # not HTTP/2 framing (garbage or a gap's far side)
        end = min(pos + 9 + ln, n)
        msg = open_.get(sid) if sid else None
        if sid and typ in (0, 1, 9):
            if msg is None and typ == 1:
                label = labels.get(sid, f"stream {sid}") if direction == 1 else f"stream {sid}"
                msg = [pos, 0, label, sid]
                open_[sid] = msg
                started.append(msg)
            if msg is not None:
                msg[1] += end - pos
                if typ in (0, 1) and flags & 0x1:  # END_STREAM
                    open_.pop(sid, None)
        if typ in (1, 5, 9):
            if end < pos + 9 + ln:
                blocks.reset()  # the frame is cut short: its block is lost
            else:
                pseudo = (
                    blocks.add(_h2_fragment(buf[pos + 9 : end], typ, flags), bool(flags & 0x4), typ != 9)
                    if readable
                    else None
                )
                if pseudo and direction == 0 and b":method" in pseudo:
                    method, path = pseudo[b":method"], pseudo.get(b":path", b"")
                    labels[sid] = f"{method.decode('latin-1')} {path.decode('latin-1')}".strip()
                    # The call this block opened (it may have ended with the same frame).
                    call = next((m for m in reversed(started) if m[3] == sid), None)
                    if call is not None:
                        call[2] = labels[sid]
        pos = end
    # A message of an earlier run still open here is not repeated; only this run's starts count.
    out.extend((m[0], m[1], m[2], m[3]) for m in started)
    return out


def _pg_start(client: bytes) -> bool:
    """A startup, SSL or GSS request (length, then a protocol code) opens the connection."""
    if len(client) < 8 or client[0] != 0:
        return False
    ln = int.from_bytes(client[:4], "big")
    return 8 <= ln <= 10000 and int.from_bytes(client[4:8], "big") in (196608, 80877103, 80877104)


def _pg_typed(buf: bytes, allowed: frozenset[int]) -> bool:
    """Typed PostgreSQL messages that chain to the end of ``buf`` (or past it)."""
    pos, seen = 0, 0
    while pos + 5 <= len(buf):
        ln = int.from_bytes(buf[pos + 1 : pos + 5], "big")
        if buf[pos] not in allowed or not 4 <= ln <= 1 << 24:
            return False
        pos += 1 + ln
        seen += 1
    return seen >= 1 and (seen >= 2 or pos == len(buf) or len(buf) >= 64)


# ---- PostgreSQL ---------------------------------------------------------------------------
_PG_CLIENT_TYPES = frozenset(b"QPBDESCHXpFdcf")
_PG_ASK = frozenset((2, 3, 5, 7, 8, 9, 10, 11))
_PG_SERVER_TYPES = frozenset(b"RSKZTDCEN12nstIAGHWcdV")


def _pg_sql_word(body: bytes) -> str:
    """The first word of a query's text (up to its NUL), upper-cased; ``""`` when the text
    has none (empty, blank, or a NUL first: the server reads an empty query there).

    Examples
    --------
    >>> _pg_sql_word(b"select 1\\0"), _pg_sql_word(b"\\0x\\0"), _pg_sql_word(b" \\0")
    ('SELECT', '', '')
    """
    words = body.split(b"\0", 1)[0].split(None, 1)
    return words[0][:32].decode("utf-8", "replace").upper() if words else ""


def _parse_postgresql(buf: bytes, direction: int, ctx: dict, out: list[Message]) -> list[Message]:
    """Calls: a startup or SSL request, a password, a simple query, or an extended-query
    batch up to Sync; returns: the server's messages up to ReadyForQuery (or an
    authentication challenge, after which the server waits for the client)."""
    pos, n = 0, len(buf)
    turn = _PgTurn()
    while pos < n:
        if direction == 0 and pos + 8 <= n and buf[pos] == 0:
            untyped = _pg_untyped(buf, pos, ctx)
            if untyped is not None:
                out.append(untyped[0])
                pos += untyped[1]
                continue
        if (
            direction == 1
            and ctx.get("pg_answers", 0)
            and turn.start < 0
            and buf[pos : pos + 1] in (b"S", b"G", b"N")
        ):
            # One byte answers an SSL/GSS request: 'N' goes on in the clear, 'S'/'G' starts TLS.
            ctx["pg_answers"] -= 1
            out.append((pos, 1, None, None))
            if buf[pos : pos + 1] != b"N":
                break
            pos += 1
            continue
        if pos + 5 > n:
            break
        typ = buf[pos]
        ln = int.from_bytes(buf[pos + 1 : pos + 5], "big")
        allowed = _PG_CLIENT_TYPES if direction == 0 else _PG_SERVER_TYPES
        if typ not in allowed or ln < 4 or ln > 1 << 30:
            break
        end = min(pos + 1 + ln, n)
        if turn.start < 0:
            turn.start = pos
        if direction == 0:
            _pg_client_message(buf, pos, end, turn, out)
        else:
            _pg_server_message(buf, pos, end, turn, out)
        pos = end
    if turn.start >= 0:
        out.append((turn.start, pos - turn.start, turn.label, None))
    return out


@dataclass
class _PgTurn:
    """The open call or return: where its first message starts (-1: none open) and its label."""

    start: int = -1
    label: str | None = None


def _pg_untyped(buf: bytes, pos: int, ctx: dict) -> tuple[Message, int] | None:
    """An untyped client message at ``pos`` (startup for protocol 3.0, SSLRequest,
    GSSENCRequest or CancelRequest) and its length; None when there is none."""
    ln = int.from_bytes(buf[pos : pos + 4], "big")
    code = int.from_bytes(buf[pos + 4 : pos + 8], "big")
    if not (8 <= ln <= 10000 and code in (196608, 80877103, 80877104, 80877102)):
        return None
    name = {196608: "startup", 80877103: "SSLRequest", 80877104: "GSSENCRequest"}.get(code, "cancel")
    if code in (80877103, 80877104):
        ctx["pg_answers"] = ctx.get("pg_answers", 0) + 1  # answered by one byte
    return (pos, min(ln, len(buf) - pos), name, None), ln


def _pg_client_message(buf: bytes, pos: int, end: int, turn: _PgTurn, out: list[Message]) -> None:
    """A typed client message from ``pos`` to ``end``: a query or Parse names the call;
    a simple query, Sync, a password, Terminate, a function call or the end of a COPY
    ends it (into ``out``)."""
    typ = buf[pos]
    if typ in b"QP" and turn.label is None:
        body = buf[pos + 5 : end]
        if typ == ord("P"):
            body = body.split(b"\0", 1)[1] if b"\0" in body else b""
        turn.label = _pg_sql_word(body)
    if typ in b"QSpXF" or typ == ord("f") or typ == ord("c"):
        key = None
        if typ == ord("p"):
            turn.label = "password"
        elif typ == ord("X"):
            turn.label, key = "terminate", NO_REPLY  # the client leaves: nothing answers
        out.append((turn.start, end - turn.start, turn.label, key))
        turn.start, turn.label = -1, None


def _pg_server_message(buf: bytes, pos: int, end: int, turn: _PgTurn, out: list[Message]) -> None:
    """A typed server message from ``pos`` to ``end``: ReadyForQuery or an authentication
    challenge ends the return (into ``out``)."""
    typ = buf[pos]
    # Authentication requests the client must answer (cleartext, MD5, GSS, SSPI, SASL):
    # the server waits after them, so they end its turn; SASL-final (12) and OK (0) do not.
    auth_challenge = (
        typ == ord("R") and end - pos >= 9 and int.from_bytes(buf[pos + 5 : pos + 9], "big") in _PG_ASK
    )
    if typ == ord("Z") or auth_challenge:
        out.append((turn.start, end - turn.start, None, None))
        turn.start = -1


# ---- MySQL ---------------------------------------------------------------------------------
_MYSQL_COMMANDS = {
    0x01: "QUIT", 0x02: "INIT_DB", 0x03: "QUERY", 0x04: "FIELD_LIST", 0x05: "CREATE_DB",
    0x06: "DROP_DB", 0x07: "REFRESH", 0x08: "SHUTDOWN", 0x09: "STATISTICS", 0x0A: "PROCESS_INFO",
    0x0C: "PROCESS_KILL", 0x0D: "DEBUG", 0x0E: "PING", 0x11: "CHANGE_USER", 0x12: "BINLOG_DUMP",
    0x16: "STMT_PREPARE", 0x17: "STMT_EXECUTE", 0x18: "STMT_SEND_LONG_DATA", 0x19: "STMT_CLOSE",
    0x1A: "STMT_RESET", 0x1B: "SET_OPTION", 0x1C: "STMT_FETCH", 0x1F: "RESET_CONNECTION",
}  # fmt: skip
_MYSQL_NO_REPLY = frozenset((0x01, 0x18, 0x19))  # QUIT, STMT_SEND_LONG_DATA, STMT_CLOSE


# ---- TLS -----------------------------------------------------------------------------------
def _tls_client_hello(buf: bytes) -> bool:
    """A handshake record holding a ClientHello opens the stream."""
    return _tls_record(buf, 0) and buf[0] == 22 and buf[5:6] == b"\x01"


def tls_records(buf: bytes) -> list[tuple[int, int, int]]:
    """``(offset, content type, length)`` of each whole or started TLS record from the
    start of ``buf``, up to the first bytes that are not a record header.

    Examples
    --------
    >>> tls_records(b"\\x16\\x03\\x01\\x00\\x02ab\\x17\\x03\\x03\\x00\\x01x")
    [(0, 22, 2), (7, 23, 1)]
    """
    out, pos = [], 0
    while pos + 5 <= len(buf) and _tls_record(buf, pos):
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


def _tls_record(buf: bytes, pos: int) -> bool:
    """A TLS record header at ``pos``: content type 20-23, version 3.x."""
    return pos + 3 <= len(buf) and 20 <= buf[pos] <= 23 and buf[pos + 1] == 3 and buf[pos + 2] <= 4


def _mysql_plausible(buf: bytes, *, client: bool) -> bool:
    if len(buf) < 5:
        return False
    ln = int.from_bytes(buf[:3], "little")
    if client:
        return buf[3] in (0, 1) and 1 <= ln <= 1 << 24 and (buf[3] == 1 or buf[4] in _MYSQL_COMMANDS)
    # a greeting (protocol 10, seq 0) or a first response packet (seq 1)
    # a greeting (protocol 10, seq 0), a refusal instead of it (ERR, seq 0, error code and
    # text), or a first response packet (seq 1)
    greeting = buf[3] == 0 and ((buf[4] == 0x0A and ln >= 20) or (buf[4] == 0xFF and 4 <= ln == len(buf) - 4))
    return greeting or (buf[3] == 1 and 1 <= ln <= 1 << 24)


def _parse_mysql(buf: bytes, direction: int, ctx: dict, out: list[Message]) -> list[Message]:
    """A message is a run of packets whose sequence numbers count up by one; a command
    (sequence 0 from the client) or a number that does not follow starts the next."""
    pos, n = 0, len(buf)
    start, prev, label, key = -1, -2, None, None
    while pos + 4 <= n:
        if _tls_record(buf, pos):
            break  # the connection went over to TLS (after an SSLRequest)
        ln = int.from_bytes(buf[pos : pos + 3], "little")
        seq = buf[pos + 3]
        end = min(pos + 4 + ln, n)
        if seq != (prev + 1) & 0xFF or (direction == 0 and seq == 0):
            if start >= 0:
                out.append((start, pos - start, label, key))
            start, label, key = pos, None, None
            if direction == 1 and seq == 0 and buf[pos + 4 : pos + 5] in (b"\x0a", b"\xff"):
                # The server's greeting (or its refusal instead) opens the connection
                # unasked; the client's login and the server's answer to it are the call
                # and its return.
                label, key = ("greeting" if buf[pos + 4] == 0x0A else "refused"), NO_REPLY
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
        prev = seq
        pos = end
    if start >= 0:
        out.append((start, pos - start, label, key))
    return out


# ---- Thrift (binary protocol, framed or not) ----------------------------------------------
_T_FIXED = {2: 1, 3: 1, 4: 8, 6: 2, 8: 4, 10: 8}  # bool, byte, double, i16, i32, i64


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


def _parse_thrift(buf: bytes, direction: int, ctx: dict, out: list[Message]) -> list[Message]:
    """Messages by type and sequence id; a zero sequence id pairs in order instead."""
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


def _parse_none(buf: bytes, direction: int, ctx: dict, out: list[Message]) -> list[Message]:
    if buf:
        out.append((0, len(buf), None, None))
    return out


#: Parsers: ``(bytes, direction, ctx, out)``; each appends the messages it finds to ``out``
#: as it finds them and returns it.
_PARSERS: dict[str, Callable[[bytes, int, dict, list[Message]], list[Message]]] = {
    "http": _parse_http,
    "redis": _parse_redis,
    "memcached": _parse_memcached,
    "dns": _parse_dns_tcp,
    "http2": _parse_http2,
    "postgresql": _parse_postgresql,
    "mysql": _parse_mysql,
    "thrift": _parse_thrift,
}


def parse_stream(proto: str, buf: bytes, direction: int, ctx: dict) -> list[Message]:
    """Messages in one gap-free run of a connection's direction (0 client, 1 server).

    Never raises on malformed bytes: parsing stops where the bytes stop making sense,
    and the bytes after the last message found are the run's unparsed rest (the
    caller counts them). A parser that fails on bytes it did not foresee ends the run
    the same way: the messages found before the failure stay.

    Examples
    --------
    >>> parse_stream("http", b"GET /a HTTP/1.1\\r\\nHost: x\\r\\n\\r\\nGET /b HTTP/1.1\\r\\n\\r\\n", 0, {})
    [(0, 28, 'GET /a', None), (28, 19, 'GET /b', None)]
    """
    parser = _PARSERS.get(proto, _parse_none)
    out: list[Message] = []
    try:
        return parser(buf, direction, ctx, out)
    except (ValueError, IndexError, struct.error, RecursionError):
        return out  # what was found before the failure; the rest of the run stays unparsed

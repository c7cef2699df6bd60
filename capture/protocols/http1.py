"""HTTP/1.x (and HTTP/0.9): a request or status line opens the stream; messages end by
Content-Length, chunked coding, a bodiless status or the connection's close."""

from __future__ import annotations

import re

from capture.protocols.base import Message

__all__ = ["REQUEST_METHODS", "detect_start", "parse"]

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


def _is_request(head: bytes) -> bool:
    sp = head.find(b" ")
    return (0 < sp <= 16 and head[:sp] in REQUEST_METHODS) or _REQ_LINE.match(head) is not None


def detect_start(client: bytes, server: bytes, sport: int, dport: int) -> bool:
    """A request line from the client (a known method, or any token before a path and an
    HTTP/1 version), or an HTTP/1 status line from the server, anywhere in the first bytes.

    Examples
    --------
    >>> detect_start(b"GET / HTTP/1.1\\r\\n", b"", 40000, 8888)
    True
    >>> detect_start(b"\\x00junk BREW /pot HTTP/1.1\\r\\n", b"", 40000, 8888)
    True
    >>> detect_start(b"*1\\r\\n$4\\r\\nPING\\r\\n", b"+PONG\\r\\n", 40000, 6379)
    False
    """
    if _is_request(client) or server.startswith(b"HTTP/1."):
        return True
    # Junk before the first message (a capture begun mid-way, a stray byte).
    return _REQ_LINE.search(client) is not None or b"HTTP/1." in server


def parse(buf: bytes, direction: int, ctx: dict, out: list[Message]) -> list[Message]:
    """Requests labelled ``METHOD /path``, or responses labelled by status; a response
    learns from ``ctx`` which request it answers (HEAD has no body, nor has 0.9's a head).

    Examples
    --------
    >>> parse(b"HEAD /a HTTP/1.1\\r\\n\\r\\n", 0, ctx := {}, [])
    [(0, 20, 'HEAD /a', None)]
    >>> parse(b"HTTP/1.1 200 OK\\r\\nContent-Length: 9\\r\\n\\r\\n", 1, ctx, [])
    [(0, 38, '200', None)]
    """
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

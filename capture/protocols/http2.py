"""HTTP/2 (and gRPC over it): a message per stream and direction, labelled from the
HPACK-decoded request headers, a return with its status too (``:status``, or gRPC's
``grpc-status`` by name); the header fields a caller asks for (``WANT_HEADERS``,
``capture.protocols.base``) are handed back per message."""

from __future__ import annotations

from capture.protocols.base import FOUND_HEADERS, WANT_HEADERS, Message, ReturnLabel
from tracefmt.pathsfile import GRPC_STATUS_NAMES

__all__ = ["PREFACE", "detect_framing", "detect_start", "parse"]

#: What an HTTP/2 client sends first on a connection (RFC 9113, 3.4).
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
# Frame types a direction seen from its middle plausibly starts with: DATA, HEADERS,
# SETTINGS, PING, WINDOW_UPDATE (the server speaks first, with SETTINGS).
_FIRST_TYPES = (0, 1, 4, 6, 8)


def detect_start(client: bytes, server: bytes, sport: int, dport: int) -> bool:
    """The client opens with the connection preface (its first 14 bytes suffice).

    Examples
    --------
    >>> detect_start(PREFACE, b"", 40000, 8080), detect_start(b"PRI * HTTP/1.1", b"", 40000, 8080)
    (True, False)
    """
    return client.startswith(PREFACE[:14])


def detect_framing(client: bytes, server: bytes, sport: int, dport: int) -> bool:
    """Seen mid-way: frames that chain, led by a frame type a direction may start with,
    from the client and (when it has sent anything) the server.

    Examples
    --------
    >>> settings = b"\\x00\\x00\\x00\\x04\\x00\\x00\\x00\\x00\\x00"  # SETTINGS, empty, stream 0
    >>> detect_framing(b"\\x00\\x00\\x04\\x01\\x04\\x00\\x00\\x00\\x01abcd", settings, 40000, 8080)
    True
    >>> detect_framing(b"\\x00\\x00\\x04\\x01\\x04\\x00\\x00\\x00\\x00abcd", b"", 40000, 8080)  # HEADERS on 0
    False
    """
    return bool(
        client
        and _frames_plausible(client)
        and client[3] in _FIRST_TYPES
        and (not server or (_frames_plausible(server) and server[3] in _FIRST_TYPES))
    )


def parse(buf: bytes, direction: int, ctx: dict, out: list[Message]) -> list[Message]:
    """A message per stream and direction: from its first HEADERS frame to END_STREAM.

    The length is the bytes of that stream's HEADERS/DATA/CONTINUATION frames (streams
    interleave); the key is the stream id, so call and return pair by stream. The label
    is the request's ``:method :path`` (a gRPC call's method, e.g.
    ``POST /greet.GreetService/Greet``), from the HPACK-decoded headers, for the call
    and its return; ``stream N`` where those two cannot be decoded (see
    ``_HeaderBlocks``). A return's label carries its status (``ReturnLabel``): the
    response's ``:status`` (``200``), or where a header block of the response (its
    trailers, or the only block of a gRPC "trailers-only" response) has a
    ``grpc-status``, that code's name (``OK``, ``UNAVAILABLE``; a value that is not one
    of the 17 codes is ``UNKNOWN``, as gRPC's clients read it); a plain ``str`` when
    neither was decoded. With ``ctx[WANT_HEADERS]``, the fields of those names in each
    message's first header block go to ``ctx[FOUND_HEADERS]``, by the message's offset
    (those decoded: on a connection seen mid-way, a block may give some and not others).

    Examples
    --------
    >>> empty = b"\\x00\\x00\\x00\\x01\\x05\\x00\\x00\\x00\\x01"  # HEADERS, END_STREAM, no headers
    >>> parse(PREFACE + empty, 0, {}, [])
    [(24, 9, 'stream 1', 1)]
    >>> status_200 = b"\\x00\\x00\\x01\\x01\\x05\\x00\\x00\\x00\\x01\\x88"  # END_STREAM, ":status: 200"
    >>> [(label, label.status) for _, _, label, _ in parse(status_200, 1, {}, [])]
    [('stream 1', '200')]
    """
    # Open messages grow frame by frame: they go into ``out`` at the run's end.
    started: list[list] = []
    pos, n = 0, len(buf)
    # Every run starts a fresh table: a later run of a direction comes after a gap.
    blocks = _HeaderBlocks(ctx.get(WANT_HEADERS))
    found: dict[int, list[tuple[bytes, bytes]]] = {}
    preface = direction == 0 and buf.startswith(PREFACE)
    # After a gap the run may begin inside a frame: read no headers unless frames chain.
    readable = preface or _frames_plausible(buf)
    if preface:
        pos = len(PREFACE)
    open_: dict[int, list] = ctx.setdefault(("h2", direction), {})
    labels: dict[int, str] = ctx.setdefault("h2-labels", {})
    while pos + 9 <= n:
        ln = int.from_bytes(buf[pos : pos + 3], "big")
        typ, flags = buf[pos + 3], buf[pos + 4]
        sid = int.from_bytes(buf[pos + 5 : pos + 9], "big") & 0x7FFFFFFF
        if ln > 1 << 24:
            break  # not HTTP/2 framing (garbage or a gap's far side)
        end = min(pos + 9 + ln, n)
        if sid and typ in (0, 1, 9):
            _grow_stream(open_, started, labels, (pos, end, typ, flags, sid), direction)
        if typ in (1, 5, 9):
            if end < pos + 9 + ln:
                blocks.reset()  # the frame is cut short: its block is lost
            elif readable:
                pseudo = blocks.add(_fragment(buf[pos + 9 : end], typ, flags), bool(flags & 0x4), typ != 9)
                if pseudo and direction == 0 and b":method" in pseudo:
                    _label_call(pseudo, sid, labels, started)
                if direction == 1 and blocks.status is not None:
                    # The response's status; its trailers' grpc-status over it.
                    msg = next((m for m in reversed(started) if m[3] == sid), None)
                    if msg is not None:
                        msg[2] = ReturnLabel(str(msg[2]), blocks.status)
                # A block whose label is unknown may still carry the fields wanted.
                fields = blocks.fields
                if fields:
                    # A message's first block (not its trailers), if it started in this run.
                    msg = next((m for m in reversed(started) if m[3] == sid), None)
                    if msg is not None:
                        found.setdefault(msg[0], fields)
        pos = end
    # A message of an earlier run still open here is not repeated; only this run's starts count.
    out.extend((m[0], m[1], m[2], m[3]) for m in started)
    if found:
        ctx[FOUND_HEADERS] = found
    return out


def _grow_stream(
    open_: dict[int, list],
    started: list[list],
    labels: dict[int, str],
    frame: tuple[int, int, int, int, int],
    direction: int,
) -> None:
    """Add a DATA, HEADERS or CONTINUATION ``frame`` (start, end, type, flags, stream) to
    its stream's open message; a HEADERS frame opens one if none is (into ``started``)."""
    pos, end, typ, flags, sid = frame
    msg = open_.get(sid)
    if msg is None and typ == 1:
        # A return takes the label its call's headers gave the stream.
        label = labels.get(sid, f"stream {sid}") if direction == 1 else f"stream {sid}"
        msg = [pos, 0, label, sid]
        open_[sid] = msg
        started.append(msg)
    if msg is not None:
        msg[1] += end - pos
        if typ in (0, 1) and flags & 0x1:  # END_STREAM
            open_.pop(sid, None)


def _label_call(pseudo: dict[bytes, bytes], sid: int, labels: dict[int, str], started: list[list]) -> None:
    """Label stream ``sid`` by its request's ``:method :path``: the call this header block
    opened (it may have ended with the same frame), and its return to come."""
    method, path = pseudo[b":method"], pseudo.get(b":path", b"")
    labels[sid] = f"{method.decode('latin-1')} {path.decode('latin-1')}".strip()
    call = next((m for m in reversed(started) if m[3] == sid), None)
    if call is not None:
        call[2] = labels[sid]


def _frames_plausible(buf: bytes) -> bool:
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
    indices, and a field that refers to one it never saw is left undecoded while the
    others decode (``capture.hpack_midway``). So the table starts fresh, and starts
    fresh again after a malformed block, a frame cut short or a gap.
    """

    def __init__(self, want: frozenset[bytes] | None = None) -> None:
        self.want = want or frozenset()
        self.fields: list[tuple[bytes, bytes]] = []  # the wanted fields of the last block
        self.status: str | None = None  # the status the last block gave (see ``add``)
        self.reset()

    def reset(self) -> None:
        # Imported here: hpack's tables cost 60 ms of start-up to runs without HTTP/2.
        from capture.hpack_midway import HeaderBlockError, MidwayDecoder

        self.decoder = MidwayDecoder()
        self.malformed = HeaderBlockError
        self.pending: bytearray | None = None  # the fragments of a block not ended yet

    def add(self, fragment: bytes | None, last: bool, starts: bool) -> dict[bytes, bytes] | None:
        """Add a block fragment (None: a malformed frame); at the block's end, its
        pseudo-headers, in ``fields`` the fields of the names wanted that were decoded, in
        their order (else ``fields`` is empty), and in ``status`` the status it gives
        (:func:`_status`; else None).

        The pseudo-headers are None when the block is malformed or when a field this
        table could not decode may be one the label needs: the block was not decoded
        whole and its ``:method`` or ``:path`` is not among the fields decoded. A
        fragment that does not start a block (a CONTINUATION) with no block begun is
        the tail of one this side missed: skipped, never read as a block of its own."""
        self.fields, self.status = [], None
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
        try:
            headers = self.decoder.decode(block)
        except self.malformed:
            self.reset()
            return None
        known = [f for f in headers if f is not None]
        # A wanted field is taken even after fields not decoded: one of those could
        # only shadow it by repeating its name, which request-id and trace headers do not.
        self.fields = [f for f in known if f[0] in self.want]
        self.status = _status(known)
        pseudo = {name: value for name, value in known if name[:1] == b":"}
        if len(known) < len(headers) and not (b":method" in pseudo and b":path" in pseudo):
            return None  # the label's fields may be among those not decoded
        return pseudo


def _status(fields: list[tuple[bytes, bytes]]) -> str | None:
    """The status a response's header block gives: its ``grpc-status`` by name (a value
    that is not one of gRPC's codes is ``UNKNOWN``), else its ``:status`` (three digits).

    Examples
    --------
    >>> _status([(b":status", b"200"), (b"content-type", b"application/grpc")])
    '200'
    >>> _status([(b"grpc-status", b"14"), (b"grpc-message", b"down")]), _status([(b"grpc-status", b"99")])
    ('UNAVAILABLE', 'UNKNOWN')
    """
    status = None
    for name, value in fields:
        if name == b"grpc-status":
            code = int(value) if value.isdigit() and len(value) <= 3 else -1
            return GRPC_STATUS_NAMES[code] if 0 <= code < len(GRPC_STATUS_NAMES) else "UNKNOWN"
        if name == b":status" and len(value) == 3 and value.isdigit():
            status = value.decode()
    return status


def _fragment(payload: bytes, typ: int, flags: int) -> bytes | None:
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

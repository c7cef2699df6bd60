"""PostgreSQL's frontend/backend protocol 3.0: a call is a startup or SSL request, a
password, a simple query or an extended-query batch; a return runs up to ReadyForQuery,
labelled by its status (``OK``, or ``ERROR`` and the SQLSTATE of its first ErrorResponse)."""

from __future__ import annotations

from dataclasses import dataclass

from capture.protocols.base import NO_REPLY, Message

__all__ = ["detect_framing", "parse"]

_PG_CLIENT_TYPES = frozenset(b"QPBDESCHXpFdcf")
_PG_ASK = frozenset((2, 3, 5, 7, 8, 9, 10, 11))
_PG_SERVER_TYPES = frozenset(b"RSKZTDCEN12nstIAGHWcdV")


def detect_framing(client: bytes, server: bytes, sport: int, dport: int) -> bool:
    """A startup, SSL or GSS request opens the client's bytes, or typed messages chain
    from the client and (when it has sent anything) the server.

    Examples
    --------
    >>> detect_framing(b"\\x00\\x00\\x00\\x08\\x04\\xd2\\x16\\x2f", b"N", 40000, 5433)  # SSLRequest
    True
    >>> detect_framing(b"Q\\x00\\x00\\x00\\x0dselect 1\\x00", b"Z\\x00\\x00\\x00\\x05I", 40000, 5433)
    True
    >>> detect_framing(b"Q\\x00\\x00\\x00\\x0dselect 1\\x00", b"+OK\\r\\n", 40000, 5433)
    False
    """
    return _pg_start(client) or (
        _pg_typed(client, _PG_CLIENT_TYPES) and (not server or _pg_typed(server, _PG_SERVER_TYPES))
    )


def parse(buf: bytes, direction: int, ctx: dict, out: list[Message]) -> list[Message]:
    """Calls: a startup or SSL request, a password, a simple query, or an extended-query
    batch up to Sync; returns: the server's messages up to ReadyForQuery (or an
    authentication challenge, after which the server waits for the client).

    A return is labelled by its status: ``ERROR <SQLSTATE>`` (the ``C`` field of its
    first ErrorResponse, e.g. ``ERROR 42P01``), else ``OK`` where it ends in
    ReadyForQuery; None for an authentication challenge, the one-byte answer to an SSL
    request and a return cut short without an error.

    Examples
    --------
    >>> parse(b"Q\\x00\\x00\\x00\\x0dselect 1\\x00", 0, {}, [])
    [(0, 14, 'SELECT', None)]
    >>> parse(b"C\\x00\\x00\\x00\\x0dSELECT 1\\x00Z\\x00\\x00\\x00\\x05I", 1, {}, [])
    [(0, 20, 'OK', None)]
    >>> parse(b"E\\x00\\x00\\x00\\x13SERROR\\x00C42P01\\x00\\x00Z\\x00\\x00\\x00\\x05I", 1, {}, [])
    [(0, 26, 'ERROR 42P01', None)]
    """
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
    """The open call or return: where its first message starts (-1: none open) and its
    label (a return's: its status once an ErrorResponse gave one)."""

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
    if typ == ord("E") and turn.label is None:
        turn.label = f"ERROR {_pg_sqlstate(buf[pos + 5 : end])}"
    if typ == ord("Z") or auth_challenge:
        status = turn.label or ("OK" if typ == ord("Z") else None)
        out.append((turn.start, end - turn.start, status, None))
        turn.start, turn.label = -1, None


def _pg_sqlstate(fields: bytes) -> str:
    """The SQLSTATE (the ``C`` field) of an ErrorResponse's fields (a type byte and a
    NUL-ended string each); ``?`` when it has none.

    Examples
    --------
    >>> _pg_sqlstate(b"SERROR\\x00VERROR\\x00C42P01\\x00Mrelation does not exist\\x00\\x00")
    '42P01'
    """
    pos = 0
    while pos < len(fields) and fields[pos]:
        nul = fields.find(b"\0", pos + 1)
        if nul < 0:
            nul = len(fields)
        if fields[pos] == ord("C"):
            return fields[pos + 1 : nul][:16].decode("ascii", "replace") or "?"
        pos = nul + 1
    return "?"


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

"""The protocols wirepath knows, each described once by a :class:`Protocol` record, and
all that is derived from the records: the names (``PROTOCOLS``), detection
(:func:`detect_tcp`) and the parser lookup (:func:`parse_stream`).

Detection runs in three stages; within a stage the checks run by rank, and the first
that matches decides:

1. *start*: the first bytes name the protocol (a preface, a handshake, a request or
   status line, a command);
2. *framing*: length-prefixed binary messages that chain plausibly (both ways when the
   server's bytes are there);
3. *port*: what the content checks left undecided goes to the protocol that owns the
   server's port (else the client's), if its ``detect_on_port`` takes the bytes; else
   it is ``tcp``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

from capture.protocols import dns, http1, http2, memcached, mysql, postgresql, redis, thrift, tls
from capture.protocols.base import Detector, Message, Parser

__all__ = [
    "PROTOCOLS",
    "Check",
    "Protocol",
    "detect_tcp",
    "detection_order",
    "get",
    "parse_stream",
    "protocol_codes",
    "protocol_names",
    "protocols_with_statuses",
    "records",
    "register",
    "request_lines_are_http",
    "unregister",
]


class Check(NamedTuple):
    """A detection test and its place in its stage: lower ranks run first (equal ranks in
    the order the protocols were registered)."""

    rank: int
    test: Detector


@dataclass(frozen=True)
class Protocol:
    """Everything wirepath knows of one protocol, in one place.

    Attributes
    ----------
    name : str
        What traces and reports call it.
    parse : Parser, optional
        Splits one gap-free run of one direction into messages
        (:data:`capture.protocols.base.Parser`). None for a name without a parser: a
        connection of it follows the turn-taking rule (``tcp``, ``udp``; ``tls``, whose
        records :mod:`capture.flows` reads).
    detect_start : Check, optional
        Stage 1: whether the first bytes name the protocol.
    detect_framing : Check, optional
        Stage 2: whether its length-prefixed messages chain in the first bytes.
    ports : tuple of int
        Well-known server ports (each owned by one protocol): the port stage's
        tie-breaker, and what picks the server's port or the client's there.
    detect_on_port : Detector, optional
        Stage 3: whether bytes the content checks missed are the protocol's, on one of
        its ports. Without it a port alone never decides.
    statuses : bool
        Its parser labels each return by the return's status (``200``, ``OK``, ``ERROR
        42P01``; None where it has none): that label goes to the trace's ``status``, and
        the return is labelled like its call (``capture.flows.return_statuses``).

    Examples
    --------
    >>> toy = Protocol("toy", detect_start=Check(60, lambda c, s, cport, sport: c[:4] == b"TOY!"))
    >>> toy.detect_start.test(b"TOY!", b"", 40000, 7777)
    True
    """

    name: str
    parse: Parser | None = None
    detect_start: Check | None = None
    detect_framing: Check | None = None
    ports: tuple[int, ...] = ()
    detect_on_port: Detector | None = None
    statuses: bool = False


#: Protocols a trace can number (its messages carry the number in an int8).
MAX_PROTOCOLS = 127
_RECORDS: dict[str, Protocol] = {}
# Derived from _RECORDS by _derive() after every change; rebound whole, never changed in
# place, so a thread detecting or parsing meanwhile sees the old tables or the new ones.
_PARSERS: dict[str, Parser] = {}
_CHECKS: tuple[tuple[str, Detector], ...] = ()  # stage 1 by rank, then stage 2 by rank
_STARTS: tuple[str, ...] = ()  # the protocols of stage 1, by rank
_PORT_OWNER: dict[int, str] = {}
_NAMES: tuple[str, ...] = ()
_CODES: dict[str, int] = {}
_WITH_STATUSES: tuple[bool, ...] = ()


def register(protocol: Protocol, *, replace: bool = False) -> None:
    """Make a protocol known to :func:`detect_tcp` and :func:`parse_stream`.

    From then on conversions detect, parse and name it: a trace numbers its protocols
    by :func:`protocol_names`, the built-in ones (``PROTOCOLS``) first, then those
    registered at runtime in their order. Register before a conversion starts and
    unregister after it ends (forgetting one renumbers those registered after it).

    Parameters
    ----------
    protocol : Protocol
        Its record.
    replace : bool
        Replace the record of a protocol of that name (it keeps its place).

    Raises
    ------
    ValueError
        The name is taken (without ``replace``), or a port is another protocol's.

    Examples
    --------
    >>> register(Protocol("toy", detect_start=Check(60, lambda c, s, cp, sp: c[:4] == b"TOY!")))
    >>> detect_tcp(b"TOY!", b"", 40000, 7777)
    'toy'
    >>> unregister("toy").name
    'toy'
    """
    if protocol.name in _RECORDS and not replace:
        raise ValueError(f"protocol {protocol.name!r} is registered already")
    if protocol.name not in _RECORDS and len(_RECORDS) >= MAX_PROTOCOLS:
        raise ValueError(f"at most {MAX_PROTOCOLS} protocols: a trace numbers them in a byte")
    for port in protocol.ports:
        owner = _PORT_OWNER.get(port, protocol.name)
        if owner != protocol.name:
            raise ValueError(f"port {port} belongs to {owner!r}")
    _RECORDS[protocol.name] = protocol
    _derive()


def unregister(name: str) -> Protocol:
    """Forget a protocol registered at runtime; returns its record.

    The built-in protocols stay (a trace numbers them): replace one with
    ``register(..., replace=True)`` instead.

    Examples
    --------
    >>> register(Protocol("toy"))
    >>> unregister("toy")  # doctest: +NORMALIZE_WHITESPACE
    Protocol(name='toy', parse=None, detect_start=None, detect_framing=None, ports=(),
             detect_on_port=None, statuses=False)
    """
    if name in PROTOCOLS:
        raise ValueError(f"{name!r} is built in: replace its record instead")
    protocol = _RECORDS.pop(name)
    _derive()
    return protocol


def get(name: str) -> Protocol:
    """The record of the protocol called ``name`` (KeyError when there is none).

    Examples
    --------
    >>> get("redis").ports
    (6379,)
    """
    return _RECORDS[name]


def records() -> tuple[Protocol, ...]:
    """Every protocol's record, in the order of registration (``PROTOCOLS`` first).

    Examples
    --------
    >>> [p.name for p in records()][:3]
    ['http', 'dns', 'redis']
    """
    return tuple(_RECORDS.values())


def protocol_names() -> tuple[str, ...]:
    """Every protocol's name by its number in a trace's ``proto`` column: the built-in
    ones (``PROTOCOLS``), then those registered at runtime.

    Examples
    --------
    >>> protocol_names()[:3]
    ('http', 'dns', 'redis')
    """
    return _NAMES


def protocol_codes() -> dict[str, int]:
    """Each protocol's number in a trace's ``proto`` column (see :func:`protocol_names`).

    Examples
    --------
    >>> protocol_codes()["dns"]
    1
    """
    return _CODES


def protocols_with_statuses() -> tuple[bool, ...]:
    """Per protocol number (:func:`protocol_names`), whether its parser labels returns by
    their status (:attr:`Protocol.statuses`).

    Examples
    --------
    >>> [name for name, yes in zip(protocol_names(), protocols_with_statuses()) if yes]
    ['http', 'dns', 'redis', 'mysql', 'postgresql', 'http2']
    """
    return _WITH_STATUSES


def detection_order() -> dict[str, tuple[str, ...]]:
    """The protocols whose checks run in each content stage, in the order they run.

    Examples
    --------
    >>> detection_order()["start"]
    ('http2', 'tls', 'http', 'redis', 'memcached')
    """
    return {stage: tuple(name for name, _ in _stage(stage)) for stage in ("start", "framing")}


#: The built-in start tests that may run before HTTP's and never take a connection
#: whose client opens with a request method and a space: HTTP/2's preface begins
#: "PRI * " ("PRI" is no HTTP/1 method) and a TLS record with byte 0x16.
_NOT_REQUEST_LINES = {"http2": http2.detect_start, "tls": tls.detect_start}


def request_lines_are_http() -> bool:
    """Whether a connection whose client opens with a request method and a space is
    HTTP whatever else its bytes say: no start test that runs before HTTP's may take it
    (only the built-in tests of ``_NOT_REQUEST_LINES`` run there, and HTTP's is its
    own). The conversion then marks such connections in bulk, without running
    :func:`detect_tcp` on each; a protocol registered at runtime ahead of HTTP, or a
    built-in one replaced, turns that off.

    Examples
    --------
    >>> request_lines_are_http()
    True
    """
    start = _STARTS
    if "http" not in start or _start_test("http") is not http1.detect_start:
        return False
    return all(_start_test(name) is _NOT_REQUEST_LINES.get(name) for name in start[: start.index("http")])


def _start_test(name: str) -> Detector | None:
    check = _RECORDS[name].detect_start
    return check.test if check is not None else None


def _stage(stage: str) -> list[tuple[str, Detector]]:
    """A stage's (protocol, test) by rank; sorted() is stable, so equal ranks keep the
    order of registration."""
    checks = [(p.name, getattr(p, f"detect_{stage}")) for p in _RECORDS.values()]
    ranked = sorted(((c.rank, name, c.test) for name, c in checks if c is not None), key=lambda x: x[0])
    return [(name, test) for _, name, test in ranked]


def _derive() -> None:
    """Rebuild the tables detection and parsing read from the records."""
    global _PARSERS, _CHECKS, _STARTS, _PORT_OWNER, _NAMES, _CODES, _WITH_STATUSES
    _PARSERS = {p.name: p.parse for p in _RECORDS.values() if p.parse is not None}
    _STARTS = tuple(name for name, _ in _stage("start"))
    _CHECKS = (*_stage("start"), *_stage("framing"))
    _PORT_OWNER = {port: p.name for p in _RECORDS.values() for port in p.ports}
    _NAMES = tuple(_RECORDS)
    _CODES = {name: code for code, name in enumerate(_NAMES)}
    _WITH_STATUSES = tuple(p.statuses for p in _RECORDS.values())


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
    for name, test in _CHECKS:
        if test(client, server, sport, dport):
            return name
    owner = _PORT_OWNER.get(dport) or _PORT_OWNER.get(sport)
    on_port = _RECORDS[owner].detect_on_port if owner is not None else None
    return owner if on_port is not None and on_port(client, server, sport, dport) else "tcp"


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


def _parse_none(buf: bytes, direction: int, ctx: dict, out: list[Message]) -> list[Message]:
    if buf:
        out.append((0, len(buf), None, None))
    return out


# The built-in protocols. Their order is PROTOCOLS' order, which numbers the protocols of
# a trace: a new one goes at the end, so the others keep their numbers.
#
# The ranks are the detection order. Each stage goes from the most telling test to the
# least, so that a loose test does not take what a stricter one of its stage would name:
# - start: the HTTP/2 preface (24 fixed bytes), a TLS hello (a record header and a
#   handshake type), an HTTP/1 request or status line (a line of a given shape, but
#   searched for anywhere in the first bytes, and "HTTP/1." anywhere in the server's),
#   Redis (``*`` and a digit), memcached (the 0x80 magic or a lower-case command word);
# - framing: DNS (a whole query that parses to its length), HTTP/2 frames (chained
#   headers of valid types and stream ids, both ways), a Thrift message header (0x8001
#   and a name that fits), MySQL packets (a length, a sequence number and a command or
#   a greeting), PostgreSQL's typed messages (a letter and a length: the loosest).
# Stage 1 runs whole before stage 2, so a loose start test can still take a stricter
# framing test's bytes: memcached's binary test (0x80 first) would take an unframed
# Thrift call (0x8001 first) whose answer was not seen, were it not for the bound on the
# body length a request declares, where the call's name stands.
# The rank steps of 10 leave room for a protocol between two others. tests/capture/
# test_registry.py holds first bytes that more than one test takes, with the verdict.
for _protocol in (
    Protocol(
        "http", http1.parse, detect_start=Check(30, http1.detect_start), ports=(80, 8080, 8000), statuses=True
    ),
    Protocol("dns", dns.parse, detect_framing=Check(10, dns.detect_framing), ports=(53,), statuses=True),
    Protocol(
        "redis",
        redis.parse,
        detect_start=Check(40, redis.detect_start),
        ports=(6379,),
        detect_on_port=redis.detect_on_port,
        statuses=True,
    ),
    Protocol("memcached", memcached.parse, detect_start=Check(50, memcached.detect_start), ports=(11211,)),
    Protocol(
        "mysql", mysql.parse, detect_framing=Check(40, mysql.detect_framing), ports=(3306,), statuses=True
    ),
    Protocol(
        "postgresql",
        postgresql.parse,
        detect_framing=Check(50, postgresql.detect_framing),
        ports=(5432,),
        statuses=True,
    ),
    Protocol("thrift", thrift.parse, detect_framing=Check(30, thrift.detect_framing), ports=(9090,)),
    Protocol(
        "http2",
        http2.parse,
        detect_start=Check(10, http2.detect_start),
        detect_framing=Check(20, http2.detect_framing),
        ports=(50051,),
        statuses=True,
    ),
    Protocol("tcp"),
    Protocol("udp"),
    Protocol("tls", detect_start=Check(20, tls.detect_start)),
):
    register(_protocol)
del _protocol

#: Every built-in protocol's name; ``tcp`` and ``udp`` have no parser (the turn-taking
#: rule), nor has ``tls`` (its record layer is read in :mod:`capture.flows`).
PROTOCOLS: tuple[str, ...] = tuple(_RECORDS)

"""Application protocols: detection by content and message boundaries in a byte stream.

A parser gets one direction of one connection as contiguous byte runs (a run ends at a
gap in the capture) and returns the messages it finds as
``(offset, length, label, key)``: ``offset`` into the run, ``key`` the protocol's own
call identifier (DNS transaction id, memcached opaque) or ``None`` when calls and
returns pair in order. Parsers never raise on garbage: what does not parse ends the
run's messages (the rest is counted as unparsed by the caller).

Each protocol lives in a module of its own (:mod:`~capture.protocols.http1`,
:mod:`~capture.protocols.dns`, :mod:`~capture.protocols.redis`,
:mod:`~capture.protocols.memcached`, :mod:`~capture.protocols.http2`,
:mod:`~capture.protocols.postgresql`, :mod:`~capture.protocols.mysql`,
:mod:`~capture.protocols.tls`, :mod:`~capture.protocols.thrift`) with its parser and
detection tests, and is described once, by a record in
:mod:`~capture.protocols.registry`, from which the names, the detection order and the
parser lookup derive (docs/capture.md, "Adding a protocol").
"""

from __future__ import annotations

from capture.protocols.base import FOUND_HEADERS, NO_REPLY, WANT_HEADERS, Message, ReturnLabel
from capture.protocols.dns import DNS_PORTS, NOT_DNS_PORTS, dns_rcode, parse_dns_datagram
from capture.protocols.http1 import REQUEST_METHODS
from capture.protocols.registry import (
    PROTOCOLS,
    Check,
    Protocol,
    detect_tcp,
    parse_stream,
    protocol_codes,
    protocol_names,
    protocols_with_statuses,
    register,
    request_lines_are_http,
    unregister,
)
from capture.protocols.tls import tls_records, tls_server_name

__all__ = [
    "DNS_PORTS",
    "FOUND_HEADERS",
    "NOT_DNS_PORTS",
    "NO_REPLY",
    "PROTOCOLS",
    "REQUEST_METHODS",
    "WANT_HEADERS",
    "Check",
    "Message",
    "Protocol",
    "ReturnLabel",
    "detect_tcp",
    "dns_rcode",
    "parse_dns_datagram",
    "parse_stream",
    "protocol_codes",
    "protocol_names",
    "protocols_with_statuses",
    "register",
    "request_lines_are_http",
    "tls_records",
    "tls_server_name",
    "unregister",
]

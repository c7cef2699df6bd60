"""Synthetic traces rendered as packets: each RPC a real TCP conversation, in a pcap file.

A call and its return become one HTTP/1.1-like request/response on a connection of its
own: three-way handshake, a ``POST`` request with ``Content-Length``, a ``200 OK``
response, then FIN/ACK. A ``send`` becomes one UDP datagram. Every node gets an IPv4
address and a listening port of its own; callers use ephemeral ports. The request's
first packet carries the call's timestamp and the response's first packet the
return's, to the nanosecond (nanosecond pcap), so the trace that the capture decoders
rebuild from the file can be scored against the synthetic trace's truth columns
(``wirepath eval``) end to end.

A message missing from the trace (capture loss) leaves its data segment out, so the
reassembler sees the gap it would see on a real wire. Packets are built in bulk with
numpy (header fields as structured arrays, payloads as one byte matrix per
caller/callee pair), never one Python object per packet.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

import tracefmt
from tracefmt import OP_CALL, OP_RETURN, OP_SEND, ParameterError

__all__ = [
    "SynthPcapReport",
    "default_names_path",
    "node_addresses",
    "render_pcap",
    "render_trace_file",
    "write_names_file",
]

PathLike = str | os.PathLike[str]

_PCAP_MAGIC_NS = 0xA1B23C4D
_LINKTYPE_ETHERNET = 1
_BASE_PORT = 8000
_EPHEMERAL_LO, _EPHEMERAL_N = 20000, 40000

# Ethernet + IPv4 (no options) + TCP (no options) / UDP, as big-endian record fields.
_ETH_IP = [
    ("dst_mac", "V6"),
    ("src_mac", "V6"),
    ("ethertype", ">u2"),
    ("ver_ihl", "u1"),
    ("tos", "u1"),
    ("ip_len", ">u2"),
    ("ip_id", ">u2"),
    ("frag", ">u2"),
    ("ttl", "u1"),
    ("proto", "u1"),
    ("ip_sum", ">u2"),
    ("src_ip", ">u4"),
    ("dst_ip", ">u4"),
    ("sport", ">u2"),
    ("dport", ">u2"),
]
_TCP_HDR = np.dtype(
    [
        *_ETH_IP,
        ("seq", ">u4"),
        ("ack", ">u4"),
        ("off", "u1"),
        ("flags", "u1"),
        ("win", ">u2"),
        ("tcp_sum", ">u2"),
        ("urg", ">u2"),
    ]
)
_UDP_HDR = np.dtype([*_ETH_IP, ("udp_len", ">u2"), ("udp_sum", ">u2")])
_REC_HDR = np.dtype([("sec", "<u4"), ("frac", "<u4"), ("incl", "<u4"), ("orig", "<u4")])
_ETH_LEN = 14

_FIN, _SYN, _PSH, _ACK = 0x01, 0x02, 0x08, 0x10

# One connection's packets: (side sending it, flags, time anchor, offset in gap units, payload).
# Side 0 is the caller (client), 1 the callee (server). Anchor 0 is the request's time,
# 1 the response's. Payload 0 none, 1 the request, 2 the response.
_STEPS = np.array(
    [
        (0, _SYN, 0, -3, 0),
        (1, _SYN | _ACK, 0, -2, 0),
        (0, _ACK, 0, -1, 0),
        (0, _PSH | _ACK, 0, 0, 1),
        (1, _PSH | _ACK, 1, 0, 2),
        (0, _ACK, 1, 1, 0),
        (0, _FIN | _ACK, 1, 2, 0),
        (1, _FIN | _ACK, 1, 3, 0),
        (0, _ACK, 1, 4, 0),
    ],
    dtype=np.int64,
)


@dataclass(frozen=True)
class SynthPcapReport:
    """What :func:`render_pcap` wrote.

    Attributes
    ----------
    output : str
        The pcap file.
    packets, bytes : int
        Packets written and the file's size in bytes.
    connections : int
        TCP connections (one per call/return pair, or per unpaired call or return).
    datagrams : int
        UDP datagrams (one per ``send``).
    missing_requests, missing_responses : int
        Connections whose call or return is not in the trace (their data segment is left out).
    duplicates : int
        Messages of the trace seen twice (same ``true_call`` and op) rendered once.
    addresses : dict
        Node name -> ``"address:port"`` it listens on.
    names_file : str or None
        The names file written beside the pcap (address -> node name), if any.
    """

    output: str
    packets: int
    bytes: int
    connections: int
    datagrams: int
    missing_requests: int
    missing_responses: int
    duplicates: int = 0
    addresses: dict[str, str] = field(default_factory=dict)
    names_file: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The report as a JSON-ready dict."""
        return {
            "output": self.output,
            "packets": self.packets,
            "bytes": self.bytes,
            "connections": self.connections,
            "datagrams": self.datagrams,
            "missing_requests": self.missing_requests,
            "missing_responses": self.missing_responses,
            "duplicates": self.duplicates,
            "addresses": self.addresses,
            "names_file": self.names_file,
        }


def node_addresses(nodes: list[str]) -> dict[str, tuple[str, int]]:
    """The IPv4 address and listening port each node gets, in the order given.

    Node ``k`` is ``10.B.C.D`` with ``D`` in 1..250 (never a network or broadcast
    address) and listens on port ``8000 + k``.

    Examples
    --------
    >>> node_addresses(["client", "WS1", "DB1"])
    {'client': ('10.0.0.1', 8000), 'WS1': ('10.0.0.2', 8001), 'DB1': ('10.0.0.3', 8002)}
    """
    if len(nodes) > _EPHEMERAL_LO - _BASE_PORT:
        raise ParameterError(
            f"{len(nodes)} nodes is too many to render (at most {_EPHEMERAL_LO - _BASE_PORT})"
        )
    ip = _ip_numbers(len(nodes))
    return {n: (_ip_text(int(a)), _BASE_PORT + k) for k, (n, a) in enumerate(zip(nodes, ip, strict=True))}


def write_names_file(addresses: Mapping[str, tuple[str, int]], path: PathLike) -> str:
    """Write a names file mapping each node's address to its name (``capture --names``).

    Examples
    --------
    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "n.toml")
    >>> _ = write_names_file({"WS1": ("10.0.0.2", 8001)}, p)
    >>> tracefmt.load_names(p)
    {'10.0.0.2': 'WS1'}
    """
    lines = ["# node addresses of a synthetic trace rendered as packets (wirepath synth --pcap)", "[names]"]
    lines += [f'"{addr}" = "{_toml_escape(name)}"' for name, (addr, _port) in addresses.items()]
    tracefmt.write_atomic(path, "\n".join(lines) + "\n")
    return str(path)


def _toml_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _ip_numbers(n: int) -> np.ndarray:
    k = np.arange(n, dtype=np.uint32)
    b, rest = np.divmod(k, np.uint32(250 * 250))
    c, d = np.divmod(rest, np.uint32(250))
    return (np.uint32(10) << 24) | (b << 16) | (c << 8) | (d + 1)


def _ip_text(a: int) -> str:
    return ".".join(str((a >> s) & 255) for s in (24, 16, 8, 0))


def _pair_calls(
    caller: np.ndarray,
    callee: np.ndarray,
    key: np.ndarray,
    has_key: np.ndarray,
    ts: np.ndarray,
    side: np.ndarray,
) -> np.ndarray:
    """Index of each call's return (``-1`` if none) among messages given calls first, then returns.

    A call and a return pair up when they join the same two nodes (caller, callee) and
    carry the same key; a key used several times pairs the k-th call with the k-th
    return in time order. Messages without a key never pair.
    """
    n = len(key)
    row = np.arange(n, dtype=np.int64)
    # Keyless messages get a key of their own, so they never match anything.
    k = np.where(has_key, key, row.astype(np.uint64))
    flag = (~has_key).astype(np.int64)
    order = np.lexsort((ts, k, flag, callee, caller, side))
    grp = np.column_stack([side, caller, callee, flag, k.view(np.int64)])[order]
    new = np.ones(n, dtype=bool)
    new[1:] = np.any(grp[1:] != grp[:-1], axis=1)
    start = np.maximum.accumulate(np.where(new, np.arange(n), 0))
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n) - start
    order = np.lexsort((side, rank, k, flag, callee, caller))
    s = order
    same = (
        (caller[s[1:]] == caller[s[:-1]])
        & (callee[s[1:]] == callee[s[:-1]])
        & (flag[s[1:]] == flag[s[:-1]])
        & (k[s[1:]] == k[s[:-1]])
        & (rank[s[1:]] == rank[s[:-1]])
        & (side[s[:-1]] == 0)
        & (side[s[1:]] == 1)
    )
    match = np.full(n, -1, dtype=np.int64)
    first = s[:-1][same]
    match[first] = s[1:][same]
    return match


def _digits(values: np.ndarray, width: int = 20) -> np.ndarray:
    """Zero-padded decimal digits of uint64 ``values`` as an (n, width) ASCII matrix."""
    powers = np.array([10**p for p in range(width - 1, -1, -1)], dtype=np.uint64)
    return ((values[:, None] // powers[None, :]) % np.uint64(10)).astype(np.uint8) + ord("0")


def _template(text: str) -> tuple[np.ndarray, int]:
    """A payload template with a 20-character id field marked by ``{id}``; returns bytes and its offset."""
    head, _, tail = text.partition("{id}")
    raw = head.encode() + b"0" * 20 + tail.encode()
    return np.frombuffer(raw, dtype=np.uint8), len(head.encode())


def _ones_sum(words: np.ndarray) -> np.ndarray:
    """Sum of big-endian 16-bit words per row (uint64, not yet folded)."""
    return words.astype(np.uint64).sum(axis=1)


def _fold(total: np.ndarray) -> np.ndarray:
    total = (total & 0xFFFF) + (total >> 16)
    total = (total & 0xFFFF) + (total >> 16)
    total = (total & 0xFFFF) + (total >> 16)
    return (~total.astype(np.uint16)).astype(np.uint16)


def _payload_sums(payload: np.ndarray) -> np.ndarray:
    """Ones'-complement partial sums of each payload row (padded to even length)."""
    if payload.shape[1] % 2:
        payload = np.concatenate([payload, np.zeros((len(payload), 1), np.uint8)], axis=1)
    words = payload.view(">u2") if payload.size else np.zeros((len(payload), 0), ">u2")
    return _ones_sum(words)


class _Payloads:
    """Payload groups: each a (rows, length) byte matrix; a packet points at (group, row)."""

    def __init__(self) -> None:
        self.groups: list[np.ndarray] = []
        self.sums: list[np.ndarray] = []

    def add(self, matrix: np.ndarray) -> int:
        self.groups.append(np.ascontiguousarray(matrix))
        self.sums.append(_payload_sums(self.groups[-1]))
        return len(self.groups) - 1


def _build_payloads(
    payloads: _Payloads,
    pair: np.ndarray,
    ids: np.ndarray,
    make_text: Any,
    body_len: Any,
) -> tuple[np.ndarray, np.ndarray]:
    """One payload per message, grouped by node pair: returns (group, row) per message."""
    group = np.full(len(pair), -1, dtype=np.int64)
    row = np.zeros(len(pair), dtype=np.int64)
    if not len(pair):
        return group, row
    uniq, inverse = np.unique(pair, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(len(uniq) + 1))
    for u in range(len(uniq)):
        members = order[bounds[u] : bounds[u + 1]]
        template, at = _template(make_text(int(uniq[u]), body_len(int(uniq[u]))))
        matrix = np.broadcast_to(template, (len(members), len(template))).copy()
        matrix[:, at : at + 20] = _digits(ids[members])
        group[members] = payloads.add(matrix)
        row[members] = np.arange(len(members))
    return group, row


def _body(n: int) -> str:
    return ("wirepath-synthetic-body-" * (n // 24 + 1))[:n]


def render_pcap(
    trace: pa.Table,
    output: PathLike,
    *,
    names_file: PathLike | None = None,
    gap_ns: int = 1000,
    chunk_packets: int = 50_000,
) -> SynthPcapReport:
    """Render a trace as packets in a nanosecond pcap file (Ethernet, IPv4, TCP and UDP).

    Parameters
    ----------
    trace : pyarrow.Table
        A message trace (``tracefmt.read_trace``); calls pair with their returns by
        ``true_call`` when the column is there, else by ``id`` between the same two nodes.
    output : str or path-like
        The pcap file to write.
    names_file : str or path-like, optional
        Also write a names file mapping each node's address back to its name, so the
        captured trace names nodes as the synthetic one does.
    gap_ns : int
        Time between a connection's control packets (handshake before the request, ACK
        and FIN after the response), default 1 us.
    chunk_packets : int
        Packets assembled at a time (bounds memory).

    Returns
    -------
    SynthPcapReport

    Examples
    --------
    >>> import tempfile, os, pyarrow as pa
    >>> t = tracefmt.validate_trace(pa.table({
    ...     "timestamp": pa.array([1_000_000, 3_000_000], pa.timestamp("ns", "UTC")),
    ...     "sender": ["client", "WS1"], "receiver": ["WS1", "client"],
    ...     "op": ["call", "return"], "id": pa.array([7, 7], pa.uint64())}))
    >>> r = render_pcap(t, os.path.join(tempfile.mkdtemp(), "t.pcap"))
    >>> r.packets, r.connections, r.addresses
    (9, 1, {'client': '10.0.0.1:8000', 'WS1': '10.0.0.2:8001'})
    """
    if gap_ns < 1:
        raise ParameterError(f"gap_ns {gap_ns} must be at least 1 (nanoseconds)")
    if chunk_packets < 1:
        raise ParameterError(f"chunk_packets {chunk_packets} must be at least 1")
    msgs = _read_messages(tracefmt.validate_trace(trace))
    addrs = node_addresses(msgs.nodes)
    conns = _pair_connections(msgs, gap_ns)
    sends = np.flatnonzero(msgs.op == OP_SEND)
    refs = _render_payloads(msgs, conns, sends, addrs)
    pk = _packets_in_time_order(msgs, conns, sends, refs, gap_ns)
    out = Path(output)
    written = _write_pcap(out, pk, _ip_numbers(len(msgs.nodes)), refs.payloads, refs.glen, chunk_packets)
    names_path = None
    if names_file is not None:
        names_path = write_names_file(addrs, names_file)
    return SynthPcapReport(
        output=str(out),
        packets=len(pk["ts"]),
        bytes=written,
        connections=len(conns),
        datagrams=len(sends),
        missing_requests=int((~conns.has_req).sum()),
        missing_responses=int((~conns.has_resp).sum()),
        duplicates=msgs.duplicates,
        addresses={k: f"{a}:{p}" for k, (a, p) in addrs.items()},
        names_file=names_path,
    )


@dataclass(frozen=True)
class _Messages:
    """The trace's messages as numpy columns, nodes numbered in order of first appearance."""

    nodes: list[str]
    ts: np.ndarray  # int64 ns
    op: np.ndarray  # op code, -1 for a message seen before (rendered once)
    src: np.ndarray  # sender's node number
    dst: np.ndarray  # receiver's node number
    key: np.ndarray  # uint64 that pairs a call with its return (``true_call`` or ``id``)
    has_key: np.ndarray
    ids: np.ndarray  # uint64 id written into the payload (0 when null)
    duplicates: int


def _read_messages(trace: pa.Table) -> _Messages:
    """The numpy columns of a validated trace, duplicates marked with op -1."""
    n = trace.num_rows
    ts = trace["timestamp"].cast(pa.int64()).to_numpy()
    op = tracefmt.op_codes(trace)
    sender_names, sender = _codes(trace["sender"])
    receiver_names, receiver = _codes(trace["receiver"])
    nodes = _nodes_in_order(sender_names, sender, receiver_names, receiver)
    index = {name: k for k, name in enumerate(nodes)}
    # A sliced or filtered table keeps dictionary names that no row uses: they get no node
    # (-1), and no row's code points at them.
    src = np.array([index.get(s, -1) for s in sender_names], dtype=np.int64)[sender] if n else sender
    dst = np.array([index.get(s, -1) for s in receiver_names], dtype=np.int64)[receiver] if n else receiver
    keycol = "true_call" if "true_call" in trace.column_names else "id"
    keys = trace[keycol].combine_chunks()
    has_key = keys.is_valid().to_numpy(zero_copy_only=False) if n else np.zeros(0, bool)
    key = keys.fill_null(0).to_numpy().astype(np.uint64) if n else np.zeros(0, np.uint64)
    ids = trace["id"].combine_chunks().fill_null(0).to_numpy().astype(np.uint64) if n else key
    # The same message seen twice (a second capture point) goes on the wire once.
    dup = np.zeros(n, dtype=bool)
    if keycol == "true_call" and n:
        ident = np.column_stack([key.view(np.int64), op.astype(np.int64), (~has_key).astype(np.int64)])
        ident[~has_key, 0] = np.flatnonzero(~has_key)
        _, first_row = np.unique(ident, axis=0, return_index=True)
        dup[:] = True
        dup[first_row] = False
    return _Messages(
        nodes=nodes,
        ts=ts,
        op=np.where(dup, -1, op),
        src=src,
        dst=dst,
        key=key,
        has_key=has_key,
        ids=ids,
        duplicates=int(dup.sum()),
    )


@dataclass(frozen=True)
class _Connections:
    """One TCP connection per call (with its return or none) and per unpaired return."""

    has_req: np.ndarray  # the call is in the trace (else its data segment is left out)
    has_resp: np.ndarray  # the return is in the trace
    client: np.ndarray  # caller's node number
    server: np.ndarray  # callee's node number
    t_req: np.ndarray  # int64 ns of the request's first packet
    t_resp: np.ndarray  # int64 ns of the response's first packet (0 when it never comes)
    call_id: np.ndarray  # uint64 id written into request and response
    pair: np.ndarray  # client * nodes + server: payloads are grouped by it
    cport: np.ndarray  # the client's ephemeral port
    isn_c: np.ndarray  # uint64 initial sequence numbers of client and server
    isn_s: np.ndarray

    def __len__(self) -> int:
        return len(self.has_req)


def _pair_connections(msgs: _Messages, gap_ns: int) -> _Connections:
    """Pair calls with returns into connections, with their times, ports and sequence numbers."""
    n = len(msgs.ts)
    ts, ids = msgs.ts, msgs.ids
    # Calls first, then returns: pair them.
    ic = np.flatnonzero(msgs.op == OP_CALL)
    ir = np.flatnonzero(msgs.op == OP_RETURN)
    m = np.concatenate([ic, ir])
    side = np.concatenate([np.zeros(len(ic), np.int64), np.ones(len(ir), np.int64)])
    caller = np.concatenate([msgs.src[ic], msgs.dst[ir]])
    callee = np.concatenate([msgs.dst[ic], msgs.src[ir]])
    match = _pair_calls(caller, callee, msgs.key[m], msgs.has_key[m], ts[m], side)
    paired_ret = np.zeros(len(m), dtype=bool)
    paired_ret[match[match >= 0]] = True
    # Connections: every call (with its return or none), and every unpaired return.
    conv_call = np.concatenate([np.arange(len(ic)), np.full(int((~paired_ret[len(ic) :]).sum()), -1)])
    conv_ret = np.concatenate([match[: len(ic)], len(ic) + np.flatnonzero(~paired_ret[len(ic) :])])
    nconv = len(conv_call)
    has_req = conv_call >= 0
    has_resp = conv_ret >= 0
    req_row = np.where(has_req, m[np.maximum(conv_call, 0)] if len(m) else 0, -1)
    resp_row = np.where(has_resp, m[np.maximum(conv_ret, 0)] if len(m) else 0, -1)
    lead = np.where(has_req, conv_call, conv_ret)
    c_node = caller[lead] if nconv else np.zeros(0, np.int64)
    s_node = callee[lead] if nconv else np.zeros(0, np.int64)
    t_req = np.where(has_req, ts[np.maximum(req_row, 0)] if n else 0, 0)
    t_resp = np.where(has_resp, ts[np.maximum(resp_row, 0)] if n else 0, 0)
    # A lost request is anchored just before its response, a lost response never comes.
    t_req = np.where(has_req, t_req, t_resp - gap_ns)
    conv_id = np.where(
        has_req, ids[np.maximum(req_row, 0)] if n else 0, ids[np.maximum(resp_row, 0)] if n else 0
    )
    pair = c_node * len(msgs.nodes) + s_node
    # Initial sequence numbers, deterministic per connection.
    isn_c = (np.arange(nconv, dtype=np.uint64) * np.uint64(2654435761)) & np.uint64(0xFFFFFFFF)
    isn_s = (isn_c * np.uint64(40503) + np.uint64(12345)) & np.uint64(0xFFFFFFFF)
    return _Connections(
        has_req=has_req,
        has_resp=has_resp,
        client=c_node,
        server=s_node,
        t_req=t_req,
        t_resp=t_resp,
        call_id=conv_id,
        pair=pair,
        cport=_client_ports(pair, t_req),
        isn_c=isn_c,
        isn_s=isn_s,
    )


def _client_ports(pair: np.ndarray, t_req: np.ndarray) -> np.ndarray:
    """Ephemeral ports: the k-th connection of a caller to a callee, in time order."""
    nconv = len(pair)
    order = np.lexsort((t_req, pair))
    first = np.ones(nconv, dtype=bool)
    first[1:] = pair[order][1:] != pair[order][:-1]
    start = np.maximum.accumulate(np.where(first, np.arange(nconv), 0))
    ordinal = np.empty(nconv, dtype=np.int64)
    ordinal[order] = np.arange(nconv) - start
    return _EPHEMERAL_LO + ordinal % _EPHEMERAL_N


@dataclass(frozen=True)
class _PayloadRefs:
    """Where each request, response and datagram payload is: (group, row) in ``payloads``."""

    payloads: _Payloads
    glen: np.ndarray  # payload length of each group, then 0 for group -1 (no payload)
    req_g: np.ndarray
    req_r: np.ndarray
    resp_g: np.ndarray
    resp_r: np.ndarray
    send_g: np.ndarray
    send_r: np.ndarray


def _render_payloads(
    msgs: _Messages, conns: _Connections, sends: np.ndarray, addrs: Mapping[str, tuple[str, int]]
) -> _PayloadRefs:
    """The request and response of every connection and the datagram of every send."""
    nodes = msgs.nodes

    def req_text(p: int, blen: int) -> str:
        c, s = divmod(p, len(nodes))
        return (
            f"POST /{nodes[s]} HTTP/1.1\r\nHost: {addrs[nodes[s]][0]}:{addrs[nodes[s]][1]}\r\n"
            f"User-Agent: wirepath-synth ({nodes[c]})\r\nX-Wirepath-Call: {{id}}\r\n"
            f"Content-Length: {blen}\r\n\r\n{_body(blen)}"
        )

    def resp_text(p: int, blen: int) -> str:
        return (
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Wirepath-Call: {id}\r\n"
            f"Content-Length: {blen}\r\n\r\n{_body(blen)}"
        )

    def send_text(p: int, blen: int) -> str:
        c, s = divmod(p, len(nodes))
        return f"SEND {nodes[c]} {nodes[s]} {{id}} {_body(blen)}\n"

    def body_len(p: int) -> int:
        return 16 + (p * 37) % 97

    def resp_len(p: int) -> int:
        return 32 + (p * 53) % 211

    payloads = _Payloads()
    req_g, req_r = _build_payloads(payloads, conns.pair, conns.call_id, req_text, body_len)
    resp_g, resp_r = _build_payloads(payloads, conns.pair, conns.call_id, resp_text, resp_len)
    send_pair = msgs.src[sends] * len(nodes) + msgs.dst[sends]
    send_g, send_r = _build_payloads(payloads, send_pair, msgs.ids[sends], send_text, body_len)
    return _PayloadRefs(
        payloads=payloads,
        glen=np.array([g.shape[1] for g in payloads.groups] + [0], dtype=np.int64),
        req_g=req_g,
        req_r=req_r,
        resp_g=resp_g,
        resp_r=resp_r,
        send_g=send_g,
        send_r=send_r,
    )


def _packets_in_time_order(
    msgs: _Messages, conns: _Connections, sends: np.ndarray, refs: _PayloadRefs, gap_ns: int
) -> dict[str, np.ndarray]:
    """Every packet's fields (TCP and UDP), in the order they go into the file."""
    tcp = _tcp_packets(conns, refs, gap_ns)
    udp = _udp_packets(msgs, sends, refs, first_tie=len(conns) * len(_STEPS))
    pk = {k: np.concatenate([tcp[k], udp[k]]) for k in tcp}
    order = np.lexsort((pk["tie"], pk["ts"]))
    return {k: v[order] for k, v in pk.items()}


def _tcp_packets(conns: _Connections, refs: _PayloadRefs, gap_ns: int) -> dict[str, np.ndarray]:
    """Every packet of every connection, (connection, step) in order; lost data segments
    are left out."""
    steps = len(_STEPS)
    nconv = len(conns)
    conv_of = np.repeat(np.arange(nconv), steps)
    step_of = np.tile(np.arange(steps), nconv)
    who, flags, anchor, offset, carries = (_STEPS[step_of, j] for j in range(5))
    keep = ~(((carries == 1) & ~conns.has_req[conv_of]) | ((anchor == 1) & ~conns.has_resp[conv_of]))
    conv_of, step_of, who, flags, anchor, offset, carries = (
        a[keep] for a in (conv_of, step_of, who, flags, anchor, offset, carries)
    )
    tcp_ts = np.where(anchor == 0, conns.t_req[conv_of], conns.t_resp[conv_of]) + offset * gap_ns
    client_side = who == 0
    seq, ack = _sequence_numbers(conns, refs, conv_of, step_of, client_side)
    c_node, s_node = conns.client[conv_of], conns.server[conv_of]
    cport = conns.cport[conv_of]
    return {
        "ts": tcp_ts,
        "src": np.where(client_side, c_node, s_node),
        "dst": np.where(client_side, s_node, c_node),
        "sport": np.where(client_side, cport, _BASE_PORT + s_node),
        "dport": np.where(client_side, _BASE_PORT + s_node, cport),
        "seq": seq,
        "ack": ack,
        "flags": flags,
        "group": np.select([carries == 1, carries == 2], [refs.req_g[conv_of], refs.resp_g[conv_of]], -1),
        "row": np.select([carries == 1, carries == 2], [refs.req_r[conv_of], refs.resp_r[conv_of]], 0),
        "udp": np.zeros(len(conv_of), dtype=bool),
        "tie": conv_of * steps + step_of,
    }


def _sequence_numbers(
    conns: _Connections, refs: _PayloadRefs, conv_of: np.ndarray, step_of: np.ndarray, client_side: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Sequence and acknowledgement numbers of each packet, from what each side has sent
    before its step."""
    lq = refs.glen[refs.req_g][conv_of].astype(np.uint64)
    lr = refs.glen[refs.resp_g][conv_of].astype(np.uint64)
    ic_, is_ = conns.isn_c[conv_of], conns.isn_s[conv_of]
    one = np.uint64(1)
    c_seq = np.select(
        [step_of == 0, step_of <= 3, step_of <= 6], [ic_, ic_ + one, ic_ + one + lq], ic_ + 2 + lq
    )
    s_seq = np.select([step_of == 1, step_of <= 6], [is_, is_ + one], is_ + one + lr)
    c_ack = np.select(
        [step_of == 0, step_of <= 3, step_of <= 7],
        [np.uint64(0) * ic_, is_ + one, is_ + one + lr],
        is_ + 2 + lr,
    )
    s_ack = np.select(
        [step_of <= 4, step_of <= 7], [ic_ + one + lq * (step_of == 4), ic_ + 2 + lq], ic_ + 2 + lq
    )
    mask = np.uint64(0xFFFFFFFF)
    return np.where(client_side, c_seq, s_seq) & mask, np.where(client_side, c_ack, s_ack) & mask


def _udp_packets(
    msgs: _Messages, sends: np.ndarray, refs: _PayloadRefs, first_tie: int
) -> dict[str, np.ndarray]:
    """One datagram per send, ordered after every TCP packet of the same instant."""
    src, dst = msgs.src[sends], msgs.dst[sends]
    return {
        "ts": msgs.ts[sends],
        "src": src,
        "dst": dst,
        "sport": _BASE_PORT + src,
        "dport": _BASE_PORT + dst,
        "seq": np.zeros(len(sends), np.uint64),
        "ack": np.zeros(len(sends), np.uint64),
        "flags": np.zeros(len(sends), np.int64),
        "group": refs.send_g,
        "row": refs.send_r,
        "udp": np.ones(len(sends), dtype=bool),
        "tie": first_tie + np.arange(len(sends)),
    }


def default_names_path(pcap: PathLike) -> Path:
    """Where the names file of a rendered pcap goes: ``OUT.pcap`` -> ``OUT.names.toml``.

    Examples
    --------
    >>> default_names_path("runs/t.pcap").as_posix()
    'runs/t.names.toml'
    """
    p = Path(pcap)
    stem = p.name[: -len(".pcap")] if p.name.endswith(".pcap") else p.name
    return p.with_name(stem + ".names.toml")


def render_trace_file(
    trace_path: PathLike, pcap: PathLike, *, names_file: PathLike | None = None, gap_ns: int = 1000
) -> SynthPcapReport:
    """Render a trace file (Parquet or text) as packets, with its names file beside the pcap.

    ``names_file`` defaults to :func:`default_names_path` of ``pcap``. See :func:`render_pcap`.

    Examples
    --------
    >>> import tempfile, os, pathlib
    >>> d = tempfile.mkdtemp()
    >>> _ = pathlib.Path(d, "t.txt").write_text("0.001 call c s 1\\n0.002 return s c 1\\n")
    >>> r = render_trace_file(os.path.join(d, "t.txt"), os.path.join(d, "t.pcap"))
    >>> r.packets, os.path.basename(r.names_file)
    (9, 't.names.toml')
    """
    trace = tracefmt.read_any_trace(trace_path)
    names = default_names_path(pcap) if names_file is None else names_file
    return render_pcap(trace, pcap, names_file=names, gap_ns=gap_ns)


def _nodes_in_order(
    sender_names: list[str], sender: np.ndarray, receiver_names: list[str], receiver: np.ndarray
) -> list[str]:
    """Node names in the order they first appear in the trace (as sender or receiver)."""
    first: dict[str, tuple[int, int]] = {}
    for side, (names, codes) in enumerate(((sender_names, sender), (receiver_names, receiver))):
        used, at = np.unique(codes, return_index=True)
        for code, row in zip(used.tolist(), at.tolist(), strict=True):
            first[names[code]] = min(first.get(names[code], (row, side)), (row, side))
    return sorted(first, key=first.__getitem__)


def _codes(col: pa.ChunkedArray) -> tuple[list[str], np.ndarray]:
    """Dictionary values and per-row codes of a dictionary<string> column."""
    arr = col.unify_dictionaries().combine_chunks()
    return arr.dictionary.to_pylist(), arr.indices.to_numpy(zero_copy_only=False).astype(np.int64)


def _write_pcap(
    out: Path, pk: dict[str, np.ndarray], ip: np.ndarray, payloads: _Payloads, glen: np.ndarray, chunk: int
) -> int:
    with tracefmt.atomic_output(out) as tmp, open(tmp, "wb") as f:
        f.write(struct.pack("<IHHiIII", _PCAP_MAGIC_NS, 2, 4, 0, 0, 262144, _LINKTYPE_ETHERNET))
        for lo in range(0, len(pk["ts"]), chunk):
            f.write(_assemble({k: v[lo : lo + chunk] for k, v in pk.items()}, ip, payloads, glen))
    return out.stat().st_size


def _mac(node: np.ndarray) -> np.ndarray:
    """Locally administered MAC addresses 02:00:00:00:hi:lo, one per node."""
    mac = np.zeros((len(node), 6), dtype=np.uint8)
    mac[:, 0] = 2
    mac[:, 4] = (node >> 8) & 255
    mac[:, 5] = node & 255
    return mac.view("V6").ravel()


def _assemble(pk: dict[str, np.ndarray], ip: np.ndarray, payloads: _Payloads, glen: np.ndarray) -> bytes:
    """pcap records (header, frame) of a chunk of packets, as one byte string."""
    n = len(pk["ts"])
    udp = pk["udp"]
    plen = glen[pk["group"]]
    hlen = np.where(udp, _UDP_HDR.itemsize, _TCP_HDR.itemsize)
    frame = hlen + plen
    size = _REC_HDR.itemsize + frame
    off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(size, out=off[1:])
    buf = np.zeros(int(off[-1]), dtype=np.uint8)

    rec = np.zeros(n, dtype=_REC_HDR)
    sec, frac = np.divmod(pk["ts"], 1_000_000_000)
    rec["sec"], rec["frac"], rec["incl"], rec["orig"] = sec, frac, frame, frame
    _scatter(buf, off[:-1], rec.view(np.uint8).reshape(n, -1))

    # Partial checksum of each packet's payload (zero when it has none).
    psum = np.zeros(n, dtype=np.uint64)
    for g in np.unique(pk["group"][pk["group"] >= 0]):
        sel = pk["group"] == g
        psum[sel] = payloads.sums[g][pk["row"][sel]]

    for is_udp in (False, True):
        sel = np.flatnonzero(udp == is_udp)
        if len(sel):
            headers = _frame_headers(pk, sel, is_udp, ip, plen[sel], psum[sel])
            _scatter(buf, off[sel] + _REC_HDR.itemsize, headers)

    start = off[:-1] + _REC_HDR.itemsize + hlen
    for g in np.unique(pk["group"][pk["group"] >= 0]):
        sel = np.flatnonzero(pk["group"] == g)
        _scatter(buf, start[sel], payloads.groups[g][pk["row"][sel]])
    return buf.tobytes()


def _frame_headers(
    pk: dict[str, np.ndarray],
    sel: np.ndarray,
    is_udp: bool,
    ip: np.ndarray,
    plen: np.ndarray,
    psum: np.ndarray,
) -> np.ndarray:
    """Ethernet, IPv4 and UDP or TCP headers (checksums filled in) of the packets ``sel``,
    one row of bytes each; ``plen`` and ``psum`` are their payloads' lengths and partial sums."""
    dtype = _UDP_HDR if is_udp else _TCP_HDR
    h = np.zeros(len(sel), dtype=dtype)
    s, d = pk["src"][sel], pk["dst"][sel]
    h["dst_mac"], h["src_mac"] = _mac(d), _mac(s)
    h["ethertype"] = 0x0800
    h["ver_ihl"] = 0x45
    l4 = dtype.itemsize - _ETH_LEN - 20 + plen
    h["ip_len"] = 20 + l4
    h["ip_id"] = pk["tie"][sel] & 0xFFFF
    h["frag"] = 0x4000  # don't fragment
    h["ttl"] = 64
    h["proto"] = 17 if is_udp else 6
    h["src_ip"], h["dst_ip"] = ip[s], ip[d]
    h["sport"], h["dport"] = pk["sport"][sel], pk["dport"][sel]
    raw = h.view(np.uint8).reshape(len(sel), -1)
    h["ip_sum"] = _fold(_ones_sum(raw[:, _ETH_LEN : _ETH_LEN + 20].copy().view(">u2")))
    if is_udp:
        h["udp_len"] = l4
        # UDP over IPv4 may carry no checksum (zero).
    else:
        h["seq"], h["ack"] = pk["seq"][sel], pk["ack"][sel]
        h["off"] = 5 << 4
        h["flags"] = pk["flags"][sel]
        h["win"] = 65535
        raw = h.view(np.uint8).reshape(len(sel), -1)
        pseudo = (ip[s] >> 16) + (ip[s] & 0xFFFF) + (ip[d] >> 16) + (ip[d] & 0xFFFF) + 6 + l4
        words = raw[:, _ETH_LEN + 20 :].copy().view(">u2")
        h["tcp_sum"] = _fold(_ones_sum(words) + pseudo.astype(np.uint64) + psum)
    return h.view(np.uint8).reshape(len(sel), -1)


def _scatter(buf: np.ndarray, starts: np.ndarray, rows: np.ndarray) -> None:
    """Copy each row of ``rows`` into ``buf`` at its start offset."""
    if rows.size:
        buf[starts[:, None] + np.arange(rows.shape[1])[None, :]] = rows

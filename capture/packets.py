"""From a request back to its packets: a Wireshark display filter for a request's messages.

A request (an instance of ``infer nesting --instances``) is its call pairs; each pair
finds its call and its return in the trace by time, id and connection (the instances
table's ``t_call``, ``t_return``, ``call_id``, ``return_id``, ``flow``: never row
positions). A message's packets are those of its connection from its first packet up to
the next message's first packet on that connection (its data, and the ACKs after it;
the connection's last message runs to the next connection on the same ports, or to the
end of the capture). The request's messages of one connection that follow one another
make one window; the filter is one clause per window::

    (ip.addr==10.0.0.1 && ip.addr==10.0.0.2 && tcp.port==40000 && tcp.port==80
     && frame.time_epoch >= 1700000000.000000000 && frame.time_epoch < 1700000000.004000000)

IPv6 addresses as ``ipv6.addr``, UDP ports as ``udp.port``. Another request's messages
on the same connection in between (HTTP/2 streams, pipelining) share its windows.
"""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from capture.decode import PROTO_UDP
from capture.streams import conversation_keys
from tracefmt import ParameterError, WirepathError
from tracefmt.errors import SchemaError
from tracefmt.hashing import mix64

__all__ = [
    "CONNECTION_COLUMNS",
    "NO_COLUMNS",
    "Window",
    "display_filter",
    "request_messages",
    "request_windows",
    "slowest_requests",
    "write_request_pcap",
]

#: The trace columns a request's packets are found by.
CONNECTION_COLUMNS = ("src_ip", "src_port", "dst_ip", "dst_port", "stream")
NO_COLUMNS = (
    "this trace has no connection columns: convert its capture again with "
    "'wirepath capture pcap CAPTURE --connections --out TRACE' (capture live keeps its pcap files)"
)


@dataclass(frozen=True)
class Window:
    """The packets of one connection from ``start_ns`` (inclusive) to ``end_ns``
    (exclusive; None: to the end of the capture)."""

    transport: str  # "tcp" or "udp"
    ip_a: str
    port_a: int
    ip_b: str
    port_b: int
    stream: int
    start_ns: int
    end_ns: int | None
    messages: int

    def clause(self) -> str:
        """This window as a display filter clause.

        Examples
        --------
        >>> Window("tcp", "10.0.0.1", 4000, "fe80::1", 80, 0, 1_500_000_000, None, 2).clause()[:58]
        '(ip.addr==10.0.0.1 && ipv6.addr==fe80::1 && tcp.port==4000'
        >>> Window("udp", "::1", 53, "::2", 5000, 0, 1_500_000_000, 2_000_000_001, 2).clause()[70:]
        ' frame.time_epoch >= 1.500000000 && frame.time_epoch < 2.000000001)'
        """
        parts = [_addr(self.ip_a), _addr(self.ip_b)]
        parts += [f"{self.transport}.port=={self.port_a}", f"{self.transport}.port=={self.port_b}"]
        parts.append(f"frame.time_epoch >= {_seconds(self.start_ns)}")
        if self.end_ns is not None:
            parts.append(f"frame.time_epoch < {_seconds(self.end_ns)}")
        return "(" + " && ".join(parts) + ")"


def _addr(ip: str) -> str:
    return f"ipv6.addr=={ip}" if ":" in ip else f"ip.addr=={ip}"


def _seconds(ns: int) -> str:
    return f"{ns // 10**9}.{ns % 10**9:09d}"


def display_filter(windows: list[Window]) -> str:
    """The display filter selecting every window's packets (clauses joined by ``||``)."""
    return " || ".join(w.clause() for w in windows)


def _ns(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return np.asarray(col.cast(pa.int64()).to_numpy(zero_copy_only=False), np.int64)


def slowest_requests(instances: pa.Table, pattern: str, top: int) -> list[int]:
    """The ``top`` slowest requests (instance numbers) of pattern ``pattern``, slowest
    first: by their root call's latency."""
    if top < 1:
        raise ParameterError(f"--top must be at least 1, not {top}")
    pat = instances["pattern"].cast(pa.string()).to_numpy(zero_copy_only=False)
    roots = instances["parent"].is_null().to_numpy(zero_copy_only=False) & (pat == pattern)
    if not roots.any():
        known = sorted(set(pat.tolist()) - {None})
        shown = ", ".join(known[:5]) + (", ..." if len(known) > 5 else "")
        raise ParameterError(f"no request of pattern {pattern!r} in this instances table (patterns: {shown})")
    lat = _ns(instances["t_return"]) - _ns(instances["t_call"])
    inst = instances["instance"].to_numpy()
    at = np.flatnonzero(roots)
    order = np.lexsort((inst[at], -lat[at]))
    return [int(i) for i in inst[at][order][:top]]


def request_messages(instances: pa.Table, trace: pa.Table, request: int) -> pa.Table:
    """The trace's rows of request ``request``'s calls and returns (with a ``row`` column:
    the row's position in ``trace``), found by time, id and connection."""
    inst = instances["instance"].to_numpy()
    if not (inst == request).any():
        some = ", ".join(map(str, np.unique(inst)[:5].tolist()))
        raise ParameterError(
            f"no request {request} in this instances table (its {len(np.unique(inst)):,} requests are "
            f"numbered {some}, ...: the instance column, as the report shows them)"
        )
    missing = [c for c in CONNECTION_COLUMNS if c not in trace.column_names]
    if missing:
        raise SchemaError(NO_COLUMNS)
    mine = instances.filter(pa.array(inst == request))
    ts = _ns(trace["timestamp"])
    op = trace["op"].cast(pa.string()).to_numpy(zero_copy_only=False)
    ids = trace["id"].to_numpy(zero_copy_only=False)
    has_id = trace["id"].is_valid().to_numpy(zero_copy_only=False)
    flow = trace["flow"].to_numpy(zero_copy_only=False) if "flow" in trace.column_names else None
    rows: list[int] = []
    for side, t_col, id_col, row_col in (
        ("call", "t_call", "call_id", "call_row"),
        ("return", "t_return", "return_id", "return_row"),
    ):
        for k, t in enumerate(_ns(mine[t_col]).tolist()):
            lo, hi = np.searchsorted(ts, t, "left"), np.searchsorted(ts, t, "right")
            cand = np.arange(lo, hi)[op[lo:hi] == side]
            if id_col in mine.column_names:  # the key: time, id and connection
                want = mine[id_col][k].as_py()
                cand = cand[(~has_id[cand]) if want is None else (has_id[cand] & (ids[cand] == want))]
                if "flow" in mine.column_names and flow is not None and mine["flow"][k].is_valid:
                    cand = cand[flow[cand] == mine["flow"][k].as_py()]
            else:  # an instances table from before the key: its row positions, checked by time
                row = int(mine[row_col][k].as_py())
                cand = np.array([row]) if lo <= row < hi and op[row] == side else np.zeros(0, np.int64)
            if len(cand) != 1:
                raise ParameterError(
                    f"request {request}'s {side} at {_seconds(t)} is not in this trace "
                    f"({len(cand)} messages match): is it the trace the instances were inferred from?"
                )
            rows.append(int(cand[0]))
    rows = sorted(set(rows))
    return trace.take(pa.array(rows)).append_column("row", pa.array(rows, pa.int64()))


def _is_udp(msgs: pa.Table) -> np.ndarray:
    """Per message, whether it travelled over UDP: a UDP message's flow is its
    conversation key hashed (``capture.flows``)."""
    if "flow" not in msgs.column_names or not len(msgs):
        return np.zeros(len(msgs), bool)
    halves = [_halves(msgs[c].cast(pa.string()).to_pylist()) for c in ("src_ip", "dst_ip")]
    sport = msgs["src_port"].to_numpy().astype(np.uint16)
    dport = msgs["dst_port"].to_numpy().astype(np.uint16)
    key, _ = conversation_keys(*halves[0], sport, *halves[1], dport, PROTO_UDP)
    return (mix64(key) >> np.uint64(24)) == msgs["flow"].to_numpy()


def _halves(ips: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Addresses as two uint64 halves (IPv4 as v4-mapped IPv6), as the decoder holds them."""
    vals = []
    for ip in ips:
        a = ipaddress.ip_address(ip)
        vals.append(int(ipaddress.IPv6Address(f"::ffff:{a}")) if a.version == 4 else int(a))
    hi = np.array([v >> 64 for v in vals], np.uint64)
    lo = np.array([v & 0xFFFFFFFFFFFFFFFF for v in vals], np.uint64)
    return hi, lo


def request_windows(instances: pa.Table, trace: pa.Table, request: int) -> list[Window]:
    """The windows (per connection, runs of the request's messages) holding the packets of
    request ``request``'s calls and returns, in time order."""
    msgs = request_messages(instances, trace, request)
    udp = _is_udp(msgs)
    ts_all = _ns(trace["timestamp"])
    conn_all = _connection_ids(trace)
    mine = set(msgs["row"].to_pylist())
    conn = conn_all[msgs["row"].to_numpy()]
    windows: list[Window] = []
    for c in np.unique(conn).tolist():
        at = np.flatnonzero(conn == c)
        rows_c = np.flatnonzero(conn_all == c)  # the connection's messages, in time order
        first = msgs.slice(int(at[0]), 1).to_pylist()[0]
        is_udp = bool(udp[at[0]])
        start = None
        count = 0
        for r in rows_c.tolist():
            if r in mine:
                if start is None:
                    start, count = int(ts_all[r]), 0
                count += 1
                continue
            if start is not None:  # the window ends where a message not the request's starts
                end = int(ts_all[r])
                if end > start:  # (one at the same time shares the first packet: go on)
                    windows.append(_window(first, is_udp, start, end, count))
                    start = None
        if start is not None:
            last = int(ts_all[rows_c[-1]])
            end = _next_connection(trace, ts_all, first, last) if not is_udp else last + 1
            windows.append(_window(first, is_udp, start, end, count))
    return sorted(windows, key=lambda w: (w.start_ns, w.stream))


def _connection_ids(trace: pa.Table) -> np.ndarray:
    """Per message, its connection: the flow (which tells a reused port pair apart), else
    the stream."""
    col = "flow" if "flow" in trace.column_names else "stream"
    return trace[col].to_numpy(zero_copy_only=False)


def _next_connection(trace: pa.Table, ts: np.ndarray, m: dict, after_ns: int) -> int | None:
    """When the next connection on ``m``'s addresses and ports begins after ``after_ns``
    (its first message), or None."""
    ends = [(m["src_ip"], m["src_port"]), (m["dst_ip"], m["dst_port"])]
    cond = None
    for (a, pa_), (b, pb) in (ends, ends[::-1]):
        c = pc.and_(
            pc.and_(pc.equal(trace["src_ip"].cast(pa.string()), a), pc.equal(trace["src_port"], pa_)),
            pc.and_(pc.equal(trace["dst_ip"].cast(pa.string()), b), pc.equal(trace["dst_port"], pb)),
        )
        cond = c if cond is None else pc.or_(cond, c)
    later = np.flatnonzero(cond.to_numpy(zero_copy_only=False) & (ts > after_ns))
    if not len(later):
        return None
    other = trace["stream"].to_numpy()[later] != m["stream"]
    if "flow" in trace.column_names:
        other |= trace["flow"].to_numpy()[later] != m["flow"]
    later = later[other]
    return int(ts[later[0]]) if len(later) else None


def _window(m: dict, udp: bool, start: int, end: int | None, count: int) -> Window:
    return Window(
        "udp" if udp else "tcp", m["src_ip"], int(m["src_port"]), m["dst_ip"], int(m["dst_port"]),
        int(m["stream"]), start, end, count,
    )  # fmt: skip


def check_capture(pcap: str | Path, windows: list[Window]) -> None:
    """Raise unless ``pcap`` holds a packet at each window's start (the first packet of
    one of the request's messages): the capture the trace was made from."""
    from capture.source import packet_timestamps

    have = np.sort(packet_timestamps(pcap))
    want = np.array([w.start_ns for w in windows], np.int64)
    i = np.minimum(np.searchsorted(have, want), max(len(have) - 1, 0))
    if not len(have) or not (have[i] == want).all():
        bad = int(want[~(have[i] == want)][0]) if len(have) else int(want[0])
        raise ParameterError(
            f"{pcap} is not this trace's capture: it has no packet at {_seconds(bad)}, "
            "where a message of the request begins"
        )


def write_request_pcap(pcap: str | Path, windows: list[Window], out: str | Path) -> int:
    """Write the packets of ``windows`` from ``pcap`` to ``out`` (``tshark -r PCAP -Y
    FILTER -w OUT``, written whole); returns how many."""
    from tracefmt import atomic_output

    check_capture(pcap, windows)
    if shutil.which("tshark") is None:
        raise WirepathError("writing the packets needs tshark: apt-get install tshark")
    flt = display_filter(windows)
    with atomic_output(out) as tmp:
        run = subprocess.run(
            ["tshark", "-r", str(pcap), "-Y", flt, "-w", str(tmp), "-F", "pcap"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if run.returncode != 0:
            raise WirepathError(f"tshark could not write the packets: {run.stderr.strip().splitlines()[-1:]}")
    from capture.source import packet_timestamps

    return len(packet_timestamps(out))

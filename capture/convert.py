"""Capture files to the message trace: ``convert_pcaps`` (behind ``wirepath capture pcap``).

One or more pcap/pcapng files become one Parquet trace with ``bytes``, ``flow``,
``proto``, ``label`` and ``point`` filled. Files are read in chunks and messages are
written as soon as no open connection can still produce an older one, so memory is
bounded by the open connections.

With ``point_from_file`` each file is a capture point: it is converted on its own,
the clock offset of every point against the first is estimated from the messages both
saw (median difference of their timestamps), and the traces are merged with those
offsets applied and duplicates (the same message at two points: same endpoints, op
and id within ``dedup_window_ns``) removed, by :func:`tracefmt.merge_traces`.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute

from capture.decode import Decoder
from capture.flows import FlowAssembler, FlowStats, Messages
from capture.naming import Namer
from capture.protocols import PROTOCOLS
from capture.source import PacketSource, read_packets
from tracefmt import (
    DEFAULT_DEDUP_WINDOW_NS,
    OPS,
    MergeInput,
    ParameterError,
    TraceWriter,
    merge_traces,
    read_trace,
)
from tracefmt.schema import NODE_TYPE, TS_TYPE

__all__ = ["CaptureReport", "convert_pcaps", "messages_table"]

PathLike = str | os.PathLike[str]
_OP_DICT = pa.array(OPS, pa.string())
_PROTO_DICT = pa.array(PROTOCOLS, pa.string())


@dataclass
class CaptureReport:
    """What a conversion read, decoded, dropped and wrote (also stored in the trace's metadata)."""

    output: str
    sources: list[str]
    messages: int = 0
    packets: int = 0
    bytes: int = 0
    decoded: int = 0
    malformed: int = 0
    truncated: int = 0
    non_ip: int = 0
    other_transport: int = 0
    retransmitted: int = 0
    gaps: int = 0
    out_of_order: int = 0
    connections: int = 0
    drops: int = 0
    fragments_reassembled: int = 0
    flows_by_proto: dict[str, int] = field(default_factory=dict)
    messages_by_proto: dict[str, int] = field(default_factory=dict)
    damage: list[str] = field(default_factory=list)
    points: list[dict[str, Any]] = field(default_factory=list)
    duplicates_removed: int = 0
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)

    def summary(self) -> str:
        """A few lines for people."""
        rate = self.packets / self.seconds if self.seconds > 0 else 0.0
        by = ", ".join(f"{k} {v:,}" for k, v in sorted(self.messages_by_proto.items(), key=lambda kv: -kv[1]))
        lines = [
            f"wrote {self.messages:,} messages to {self.output} ({by or 'none'})",
            f"read {self.packets:,} packets, {self.bytes:,} bytes from {len(self.sources)} file(s) "
            f"in {self.seconds:.2f} s ({rate:,.0f} packets/s)",
            f"decoded {self.decoded:,} TCP/UDP packets in {self.connections:,} TCP connections; "
            f"retransmitted {self.retransmitted:,}, gaps {self.gaps:,}, out of order {self.out_of_order:,}",
            f"skipped: non-IP {self.non_ip:,}, malformed {self.malformed:,}, truncated {self.truncated:,}, "
            f"other transport {self.other_transport:,}; kernel drops {self.drops:,}",
        ]
        for p in self.points:
            if p["matched"] is None:
                lines.append(f"point {p['point']}: the reference clock")
                continue
            lines.append(
                f"point {p['point']}: clock offset {p['offset_ns'] / 1e6:+.3f} ms "
                f"(from {p['matched']:,} messages seen by earlier points too)"
            )
        if self.points:
            lines.append(f"duplicates removed: {self.duplicates_removed:,}")
        lines += [f"damage: {d}" for d in self.damage[:5]]
        return "\n".join(lines)


def messages_table(
    msgs: Messages, namer: Namer, *, point: str | None = None, keep_payload: bool = False
) -> pa.Table:
    """The trace table of decoded messages (names resolved per distinct endpoint)."""
    n = len(msgs)
    # The server side of a call is its receiver; of a return, its sender.
    s_idx, s_dict = namer.names_of(msgs.src_hi, msgs.src_lo, msgs.sport, ~msgs.server_is_dst)
    r_idx, r_dict = namer.names_of(msgs.dst_hi, msgs.dst_lo, msgs.dport, msgs.server_is_dst)
    labels = pa.array(msgs.label.tolist(), pa.string()) if n else pa.array([], pa.string())
    cols: dict[str, pa.Array] = {
        "timestamp": pa.array(msgs.ts_ns, pa.int64()).cast(TS_TYPE),
        "sender": pa.DictionaryArray.from_arrays(pa.array(s_idx, pa.int32()), pa.array(s_dict, pa.string())),
        "receiver": pa.DictionaryArray.from_arrays(
            pa.array(r_idx, pa.int32()), pa.array(r_dict, pa.string())
        ),
        "op": pa.DictionaryArray.from_arrays(pa.array(msgs.op, pa.int8()), _OP_DICT),
        "id": pa.array(msgs.id, pa.uint64(), mask=~msgs.has_id),
        "bytes": pa.array(msgs.nbytes.astype(np.uint64), pa.uint64()),
        "flow": pa.array(msgs.flow, pa.uint64()),
        "proto": pa.DictionaryArray.from_arrays(pa.array(msgs.proto, pa.int32()), _PROTO_DICT),
        "label": labels.dictionary_encode().cast(NODE_TYPE),
        "point": pa.array([point] * n if point is not None else [None] * n, pa.string())
        .dictionary_encode()
        .cast(NODE_TYPE),
    }
    if keep_payload:
        # A user column (x_ prefix): the trace schema has no payload, inference never reads it.
        cols["x_payload"] = pa.array(msgs.payload.tolist(), pa.binary())
    return pa.table(cols)


def _convert_one(
    sources: Sequence[PacketSource],
    out: PathLike,
    namer: Namer,
    report: CaptureReport,
    *,
    point: str | None,
    chunk_bytes: int,
    on_progress: Callable[[int], None] | None,
    t0: float,
    keep_payload: bool = False,
) -> None:
    decoder = Decoder()
    stats = FlowStats()
    held: list[Messages] = []
    # Row groups of 128k messages: the writer holds a row group in memory before writing it.
    with TraceWriter(out, provenance={}, row_group_size=1 << 17) as writer:

        def write(msgs: Messages, *, always: bool = False) -> None:
            if len(msgs) or (always and not writer.rows):
                writer.write(messages_table(msgs, namer, point=point, keep_payload=keep_payload))
                if on_progress is not None:
                    on_progress(writer.rows)

        for src in sources:
            asm = FlowAssembler(keep_payload=keep_payload)
            batches = iter(src)
            batch = next(batches, None)
            while batch is not None:
                nxt = next(batches, None)
                segs = decoder.decode(batch)
                report.decoded += len(segs)
                msgs = asm.feed(segs, final=nxt is None)
                held.append(msgs)
                # Write what no still-open connection can precede (the trace stays time-sorted).
                wm = asm.watermark_ns
                allm = Messages.concat(held)
                if wm is None:
                    write(allm)
                    held = []
                else:
                    cut = int(np.searchsorted(allm.ts_ns, wm, side="left"))
                    write(_slice(allm, 0, cut))
                    held = [_slice(allm, cut, len(allm))]
                batch = nxt
            _add_source_stats(report, src)
            _add_flow_stats(stats, asm.stats)
        write(Messages.concat(held), always=True)  # an empty trace still has every column
        report.messages += writer.rows
        _add_decode_stats(report, decoder)
        report.retransmitted += stats.retransmitted
        report.gaps += stats.gaps
        report.out_of_order += stats.out_of_order
        report.connections += stats.connections
        for k, v in stats.flows_by_proto.items():
            report.flows_by_proto[k] = report.flows_by_proto.get(k, 0) + v
        for k, v in stats.messages_by_proto.items():
            report.messages_by_proto[k] = report.messages_by_proto.get(k, 0) + v
        report.seconds = time.perf_counter() - t0
        writer.provenance = {"capture": _provenance(report)}


def _slice(m: Messages, a: int, b: int) -> Messages:
    return Messages(**{k: getattr(m, k)[a:b] for k in Messages.__dataclass_fields__})


def _add_source_stats(report: CaptureReport, src: PacketSource) -> None:
    st = src.stats
    report.packets += st.packets
    report.bytes += st.bytes
    report.truncated += st.truncated_records
    report.malformed += st.corrupt_records
    report.drops += st.kernel_drops
    report.damage += [f"{src.name}: {d}" for d in st.damage]


def _add_flow_stats(total: FlowStats, one: FlowStats) -> None:
    total.connections += one.connections
    total.retransmitted += one.retransmitted
    total.gaps += one.gaps
    total.out_of_order += one.out_of_order
    total.unparsed_bytes += one.unparsed_bytes
    total.flows_by_proto.update(one.flows_by_proto)
    total.messages_by_proto.update(one.messages_by_proto)


def _add_decode_stats(report: CaptureReport, decoder: Decoder) -> None:
    d = decoder.stats
    report.malformed += d.malformed
    report.truncated += d.truncated
    report.non_ip += d.non_ip + d.unsupported_link
    report.other_transport += d.other_transport
    report.fragments_reassembled += d.reassembled


def _provenance(report: CaptureReport) -> dict[str, Any]:
    doc = report.to_json()
    doc.pop("output", None)
    return doc


def _as_source(p: PathLike | IO[bytes] | PacketSource, chunk_bytes: int) -> PacketSource:
    if hasattr(p, "stats") and hasattr(p, "__iter__") and not hasattr(p, "read"):
        return p  # type: ignore[return-value]
    return read_packets(p, chunk_bytes=chunk_bytes)  # type: ignore[arg-type]


def convert_pcaps(
    paths: Sequence[PathLike | IO[bytes] | PacketSource],
    out: PathLike,
    *,
    names: Mapping[str, str] | PathLike | None = None,
    node_by: str = "address",
    point_from_file: bool = False,
    keep_payload: bool = False,
    dedup_window_ns: int = DEFAULT_DEDUP_WINDOW_NS,
    chunk_bytes: int = 8 << 20,
    on_progress: Callable[[int], None] | None = None,
) -> CaptureReport:
    """Convert capture files (or packet sources) into one Parquet message trace.

    Parameters
    ----------
    paths : sequence of path, binary file or packet source
        pcap/pcapng files (gzip allowed), in time order when they are rotations of one
        capture; or sources such as :class:`capture.FakeSource`.
    out : path
        The Parquet trace to write (atomically).
    names : mapping or path, optional
        Names file or map: address, ``address:port`` or CIDR -> node name.
    node_by : {"address", "service"}
        Name nodes by address, or servers by ``address:port``.
    point_from_file : bool
        Each file is a capture point (named by its file name): clock offsets are
        estimated and applied, duplicates removed, ``point`` tells where a message was
        seen.
    keep_payload : bool
        Also write each message's captured bytes in a user column ``x_payload`` (binary).
        Without it no payload byte reaches the trace.
    dedup_window_ns : int
        Window for duplicates across points.
    chunk_bytes : int
        Bytes read per batch (memory use is a small multiple).
    on_progress : callable, optional
        Called with the messages written so far.

    Returns
    -------
    CaptureReport

    Raises
    ------
    TraceFileError
        A file is missing, empty or not a capture.
    ParameterError
        Bad naming mode or names file.

    Examples
    --------
    >>> import os, tempfile
    >>> from capture.source import FakeSource
    >>> out = os.path.join(tempfile.mkdtemp(), "t.parquet")
    >>> convert_pcaps([FakeSource([])], out).messages
    0
    """
    if not paths:
        raise ParameterError("give at least one capture file")
    t0 = time.perf_counter()
    namer = Namer(names, node_by=node_by)
    sources = [_as_source(p, chunk_bytes) for p in paths]
    report = CaptureReport(output=str(out), sources=[s.name for s in sources])
    if not point_from_file or len(sources) == 1:
        point = Path(sources[0].name).stem if point_from_file else None
        _convert_one(
            sources,
            out,
            namer,
            report,
            point=point,
            chunk_bytes=chunk_bytes,
            on_progress=on_progress,
            t0=t0,
            keep_payload=keep_payload,
        )
        return report
    with tempfile.TemporaryDirectory(prefix="wirepath-points-") as tmp:
        parts = []
        for i, src in enumerate(sources):
            part = Path(tmp) / f"point{i}.parquet"
            point = Path(src.name).stem or f"point{i}"
            _convert_one(
                [src],
                part,
                namer,
                report,
                point=point,
                chunk_bytes=chunk_bytes,
                on_progress=None,
                t0=t0,
                keep_payload=keep_payload,
            )
            parts.append((part, point))
        cols = ["timestamp", "sender", "receiver", "op", "id"]
        # Each point is placed against all points placed before it (shifted by their
        # offsets), so a point that shares messages only with the second one still gets
        # its offset (a chain web -> app -> db).
        placed = [read_trace(parts[0][0], columns=cols)]
        specs = [MergeInput(str(parts[0][0]), 0, parts[0][1])]
        report.points.append({"point": parts[0][1], "offset_ns": 0, "matched": None})
        for part, point in parts[1:]:
            other = read_trace(part, columns=cols)
            off, matched = estimate_offset_ns(pa.concat_tables(placed, promote_options="permissive"), other)
            specs.append(MergeInput(str(part), off, point))
            report.points.append({"point": point, "offset_ns": off, "matched": matched})
            ts = pa.array(other["timestamp"].cast(pa.int64()).to_numpy() + off, pa.int64()).cast(TS_TYPE)
            placed.append(other.set_column(0, "timestamp", ts))
        merged = merge_traces(specs, out, dedup_window_ns=dedup_window_ns, on_progress=on_progress)
        report.duplicates_removed = merged.duplicates_removed
        report.messages = merged.messages
        protos = read_trace(out, columns=["timestamp", "sender", "receiver", "op", "id", "proto"])["proto"]
        counts = pa.compute.value_counts(protos.cast(pa.string())).to_pylist()
        report.messages_by_proto = {c["values"]: c["counts"] for c in counts}
    report.seconds = time.perf_counter() - t0
    _rewrite_provenance(out, report)
    return report


def estimate_offset_ns(ref: pa.Table, other: pa.Table) -> tuple[int, int]:
    """Clock offset to add to ``other`` to match ``ref``, from the messages both saw.

    Messages are matched by sender, receiver, op and id; the offset is the median of
    the timestamp differences (0 when nothing matched).

    Examples
    --------
    >>> import pyarrow as pa
    >>> def t(ts):
    ...     return pa.table({"timestamp": pa.array(ts, pa.timestamp("ns", "UTC")),
    ...         "sender": ["a"] * 3, "receiver": ["b"] * 3, "op": ["call"] * 3,
    ...         "id": pa.array([1, 2, 3], pa.uint64())})
    >>> estimate_offset_ns(t([100, 200, 300]), t([90, 195, 290]))
    (10, 3)
    """

    def keyed(t: pa.Table) -> pa.Table:
        cols = {
            c: t[c].cast(pa.string()) if pa.types.is_dictionary(t[c].type) else t[c]
            for c in ("sender", "receiver", "op")
        }
        return pa.table({**cols, "id": t["id"], "ts": t["timestamp"].cast(pa.int64())}).filter(
            pa.compute.is_valid(t["id"])
        )

    a = keyed(ref)
    b = keyed(other).rename_columns(["sender", "receiver", "op", "id", "ts_b"])
    # First sighting per key on each side, so repeated ids do not multiply the pairs.
    a = a.group_by(["sender", "receiver", "op", "id"]).aggregate([("ts", "min")])
    b = b.group_by(["sender", "receiver", "op", "id"]).aggregate([("ts_b", "min")])
    j = a.join(b, keys=["sender", "receiver", "op", "id"], join_type="inner")
    if not j.num_rows:
        return 0, 0
    d = j["ts_min"].to_numpy() - j["ts_b_min"].to_numpy()
    return int(np.median(d)), j.num_rows


def _rewrite_provenance(out: PathLike, report: CaptureReport) -> None:
    """Store the final report in the merged file's metadata (small next to decoding)."""
    table = read_trace(out)
    tmp = Path(out).with_name(f".{Path(out).name}.meta.parquet")
    with TraceWriter(tmp, provenance={"capture": _provenance(report)}) as w:
        if table.num_rows:
            w.write(table)
    os.replace(tmp, out)

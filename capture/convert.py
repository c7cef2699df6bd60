"""Capture files to the message trace: ``convert_pcaps`` (behind ``wirepath capture pcap``).

One or more pcap/pcapng files become one Parquet trace with ``bytes``, ``flow``,
``proto``, ``label`` and ``point`` filled. Files are read in chunks and messages are
written as soon as no open connection can still produce an older one (a connection
that stays open holds back only its unfinished turn), so memory is bounded by the
open connections' unfinished turns.

With ``point_from_file`` each file is a capture point. A first pass converts each
point on its own, only to estimate the clock offset of every point against the first
from the messages both saw (median difference of their timestamps). A second pass reads
all points in step on that common clock and removes duplicates at the packet level: a
packet seen at two points (same direction 5-tuple, TCP sequence and acknowledgement
numbers, flags, payload length and a 64-bit payload hash, within ``dedup_window_ns``)
is kept once, before TCP reassembly; UDP datagrams likewise by flow and payload. The
messages are then built once from the merged packet stream, so no message-level merge
is needed, and a message's ``point`` is the point whose copy of its first packet was
kept (the earliest on the common clock). Duplicates are counted per point.

With a :class:`tracefmt.cluster.Runner` (a Dask cluster) the work is split by flow,
not by file: task ``k`` of ``K`` reads and decodes every packet of every file, as the
conversion in one process does, and reassembles only the flows of shard ``k``
(``capture.flows.flow_shards``: both directions of a connection, in every rotated
file, fall in one shard), learning the cross-flow state (capture clock, listening
endpoints) from the whole batches. Each task writes its messages to a shard file in a
temporary directory next to the output; the shard files are merged in trace order
(time, then flow), which is the order of the conversion in one process, so the trace
is the same row for row, and so are the counters.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute
import pyarrow.parquet as pq

from capture._spans import join_spans
from capture.decode import Decoder, Segments, empty_segments
from capture.flows import FlowAssembler, FlowStats, Messages, flow_shards, trace_order
from capture.naming import Namer
from capture.protocols import protocol_names
from capture.request_keys import KeyOptions
from capture.source import PacketBatch, PacketSource, read_packets
from capture.streams import StreamNumbers, connection_columns
from tracefmt import (
    DEFAULT_DEDUP_WINDOW_NS,
    OPS,
    ParameterError,
    Partitioning,
    TraceFileError,
    TraceWriter,
    distinct_outputs,
    make_dirs,
    parquet_output,
    read_trace,
)
from tracefmt.cluster import InProcess, Runner
from tracefmt.hashing import mix64
from tracefmt.parquet import as_listed
from tracefmt.schema import NODE_TYPE, TS_TYPE

__all__ = [
    "CaptureReport",
    "StreamConverter",
    "convert_pcaps",
    "cross_point_duplicates",
    "estimate_offset_ns",
    "messages_table",
    "packet_keys",
    "payload_hashes",
]

PathLike = str | os.PathLike[str]
_OP_DICT = pa.array(OPS, pa.string())
#: What a conversion reads of request identity unless told otherwise (capture.request_keys).
DEFAULT_KEYS = KeyOptions()


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
    after_close: int = 0
    gaps: int = 0
    out_of_order: int = 0
    #: Bytes of a connection's protocol data after the last message its parser could read
    #: (a malformed or unforeseen message ends the run: counted, never dropped unsaid).
    unparsed_bytes: int = 0
    #: Messages that carried a trace id, a request id (``capture.request_keys``); header
    #: values of request keys that did not follow their grammar (skipped, counted).
    with_trace_id: int = 0
    with_request_id: int = 0
    keys_malformed: int = 0
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
            f"retransmitted {self.retransmitted:,}, gaps {self.gaps:,}, out of order {self.out_of_order:,}, "
            f"after their connection closed {self.after_close:,}",
            f"skipped: non-IP {self.non_ip:,}, malformed {self.malformed:,}, truncated {self.truncated:,}, "
            f"other transport {self.other_transport:,}; kernel drops {self.drops:,}"
            + (f"; protocol bytes not parsed {self.unparsed_bytes:,}" if self.unparsed_bytes else ""),
        ]
        if self.with_trace_id or self.with_request_id or self.keys_malformed:
            lines.append(
                f"request keys: {self.with_trace_id:,} messages with a trace id, {self.with_request_id:,} "
                f"with a request id; malformed values skipped {self.keys_malformed:,}"
            )
        for p in self.points:
            dups = (
                f"; {p['duplicates']:,} of its {p['packets']:,} packets were duplicates"
                if "duplicates" in p
                else ""
            )
            if p["matched"] is None:
                lines.append(f"point {p['point']}: the reference clock{dups}")
                continue
            lines.append(
                f"point {p['point']}: clock offset {p['offset_ns'] / 1e6:+.3f} ms "
                f"(from {p['matched']:,} messages seen by earlier points too){dups}"
            )
        if self.points:
            lines.append(f"duplicate packets removed: {self.duplicates_removed:,}")
        lines += [f"damage: {d}" for d in self.damage[:5]]
        return "\n".join(lines)


def messages_table(
    msgs: Messages,
    namer: Namer,
    *,
    point: str | None = None,
    keep_payload: bool = False,
    keys: KeyOptions | None = None,
    streams: StreamNumbers | None = None,
) -> pa.Table:
    """The trace table of decoded messages (names resolved per distinct endpoint); with
    ``keys``, the request-key columns that hold a value here, and those of the headers kept;
    with ``streams`` (shown every packet so far), the connection columns."""
    n = len(msgs)
    # The server side of a call is its receiver; of a return, its sender.
    s_idx, s_dict = namer.names_of(msgs.src_hi, msgs.src_lo, msgs.sport, ~msgs.server_is_dst)
    r_idx, r_dict = namer.names_of(msgs.dst_hi, msgs.dst_lo, msgs.dport, msgs.server_is_dst)
    # Straight from the object array: a list of it first costs five times as much.
    labels = pa.array(msgs.label, pa.string()) if n else pa.array([], pa.string())
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
        "proto": pa.DictionaryArray.from_arrays(
            pa.array(msgs.proto, pa.int32()), pa.array(protocol_names(), pa.string())
        ),
        "label": labels.dictionary_encode().cast(NODE_TYPE),
        "status": pa.array(msgs.status, pa.string()).dictionary_encode().cast(NODE_TYPE)
        if n
        else pa.array([], pa.string()).cast(NODE_TYPE),
        "point": pa.DictionaryArray.from_arrays(
            pa.array(np.zeros(n, np.int32)) if point is not None else pa.nulls(n, pa.int32()),
            pa.array([point] if point is not None else [], pa.string()),
        ).cast(NODE_TYPE),
    }
    if streams is not None:
        cols.update(connection_columns(msgs, streams))
    if keys is not None and n:
        for name in ("trace_id", "span_id", "request_id"):
            col = getattr(msgs, name)
            if col.dtype.itemsize > 1 or (col != b"").any():  # a width of 1: no batch had one
                arr = _strings(col)
                if arr.null_count < n:
                    cols[name] = as_listed(arr)  # nearly all different: not worth hashing
        kept = np.flatnonzero(msgs.headers != None)  # noqa: E711 - elementwise
        for i, column in enumerate(keys.columns):
            if len(kept):
                values = np.full(n, None, object)
                values[kept] = [h[i] for h in msgs.headers[kept].tolist()]
                if any(v is not None for v in values[kept].tolist()):
                    cols[column] = pa.array(values, pa.string())
    if keep_payload:
        # A user column (x_ prefix): the trace schema has no payload, inference never reads it.
        cols["x_payload"] = pa.array(msgs.payload.tolist(), pa.binary())
    return pa.table(cols)


def _strings(col: np.ndarray) -> pa.StringArray:
    """An ``S`` array as Arrow strings, ``b""`` as null (the values hold no NUL byte),
    from its bytes (a list of Python objects costs ten times as much)."""
    n, w = len(col), col.dtype.itemsize
    raw = np.ascontiguousarray(col).view(np.uint8).reshape(n, w)
    length = (raw != 0).sum(axis=1)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(length, out=offsets[1:])
    data = join_spans(raw.reshape(-1), np.arange(n, dtype=np.int64) * w, length)
    valid = length > 0
    return pa.LargeStringArray.from_buffers(
        n, pa.py_buffer(offsets), pa.py_buffer(data), pa.py_buffer(np.packbits(valid, bitorder="little")),
        null_count=int(n - valid.sum()),
    ).cast(pa.string())  # fmt: skip


def _running(on_read: Callable[[int, int], None] | None) -> Callable[[int, int], None] | None:
    """``on_read`` given running totals, from the counts of each batch."""
    if on_read is None:
        return None
    total = [0, 0]

    def add(packets: int, nbytes: int) -> None:
        total[0] += packets
        total[1] += nbytes
        on_read(total[0], total[1])

    return add


class StreamConverter:
    """Packets to the message trace as they come: file after file, batch after batch.

    One decoder and one TCP assembler serve every input, so a connection that spans two
    files (a tcpdump rotation) is reassembled as one. A message is written once it is
    final: older than every message the open connections can still produce (the
    assembler's watermark: the start of the oldest unfinished turn), so the trace stays
    in time order and memory holds only the unfinished turns and the messages not yet
    final. Several capture points merged on one clock (:func:`convert_pcaps` with
    ``point_from_file``) go through it too, each message with its point. :func:`convert_pcaps` of a list of
    files and the live agent's conversion while it records are this one class.

    Parameters
    ----------
    out : path
        The Parquet trace, published (atomically) by :meth:`finish`.
    namer : Namer, optional
        Node naming (default: by address, or from ``names`` and ``node_by``).
    names : mapping or path, optional
        Names file or map: address, ``address:port`` or CIDR -> node name.
    node_by : {"address", "service"}
        Name nodes by address, or servers by ``address:port``.
    point : str, optional
        The ``point`` column's value for every message.
    keep_payload : bool
        Also write each message's captured bytes (user column ``x_payload``).
    keys : KeyOptions, optional
        Which request keys HTTP messages give (``trace_id``, ``span_id``, ``request_id``
        and the headers kept; ``capture.request_keys``); None reads none. A column gets
        into the trace only if some message has a value in it.
    parts_dir : path, optional
        Also write the final messages as a partitioned dataset readable while the input
        still grows: ``part-00000.parquet``, ``part-00001.parquet``, ... in time order,
        each published whole (written under a hidden ``.partial`` name, then renamed).
    part_every_s : float
        Seconds (of this process's clock) between two parts, when there is something to write.
    partition : Partitioning or str, optional
        Write ``out`` as a dataset directory of parts of this many messages or this time
        span (``tracefmt.TraceWriter``), published whole by :meth:`finish`.
    on_progress : callable, optional
        Called with the messages written so far.
    on_read : callable, optional
        Called with the packets and bytes of every batch read (the batch's counts).
    point_names : sequence of str, optional
        The names of several capture points merged into one packet stream: each
        message's ``point`` is then one of them, given per message by the merge
        (``point`` is not used).
    shard : (int, int), optional
        ``(k, n)``: reassemble only the flows of shard ``k`` of ``n``
        (``capture.flows.flow_shards``); every packet is still decoded, and the
        cross-flow state learnt from all of them, so the ``n`` shards' messages together
        are this converter's without ``shard``. Decoder and reader counters are those of
        every packet; assembler counters those of the shard's flows.

    Examples
    --------
    >>> import os, tempfile
    >>> from capture.source import FakeSource
    >>> d = tempfile.mkdtemp()
    >>> with StreamConverter(os.path.join(d, "t.parquet"), parts_dir=os.path.join(d, "t")) as conv:
    ...     conv.add_source(FakeSource([]))
    ...     report = conv.finish()
    >>> report.messages, sorted(os.listdir(d)), os.listdir(os.path.join(d, "t"))
    (0, ['t', 't.parquet'], ['part-00000.parquet'])
    """

    def __init__(
        self,
        out: PathLike,
        *,
        namer: Namer | None = None,
        names: Mapping[str, str] | PathLike | None = None,
        node_by: str = "address",
        point: str | None = None,
        keep_payload: bool = False,
        keys: KeyOptions | None = DEFAULT_KEYS,
        parts_dir: PathLike | None = None,
        part_every_s: float = 2.0,
        on_progress: Callable[[int], None] | None = None,
        on_read: Callable[[int, int], None] | None = None,
        partition: Partitioning | str | None = None,
        shard: tuple[int, int] | None = None,
        point_names: Sequence[str] | None = None,
    ) -> None:
        partition = Partitioning.of(partition)
        if partition is None:  # a dataset is a directory, named as one likes
            parquet_output(out)
        if shard is not None and not 0 <= shard[0] < shard[1]:
            raise ParameterError(f"shard {shard[0]} of {shard[1]}: must be in 0 .. {shard[1] - 1}")
        self._shard = shard
        self._t0 = time.perf_counter()
        self.namer = namer if namer is not None else Namer(names, node_by=node_by)
        self.report = CaptureReport(output=str(out), sources=[])
        self.point = point
        self.keep_payload = keep_payload
        self.keys = keys
        self.on_progress = on_progress
        self.on_read = on_read
        self._decoder = Decoder()
        self._asm = FlowAssembler(keep_payload=keep_payload, keys=keys)
        # tshark's connection numbers, learnt from every packet (all shards' too), when asked.
        self._streams = StreamNumbers() if keys is not None and keys.connections else None
        # Runs of messages in trace order not final yet, each with its messages' points
        # (indices into ``point_names``) when there are several.
        self._held: list[tuple[Messages, np.ndarray | None]] = []
        self._point_dict = pa.array(point_names, pa.string()) if point_names is not None else None
        # With several points: each message's point (an index into point_names), set by the merge.
        self._points_of: Callable[[Messages], np.ndarray] | None = None
        # Row groups of 128k messages: the writer holds a row group in memory before writing it.
        # Key columns are written once a message has a value in them (the rows before get nulls).
        may_add = ("trace_id", "span_id", "request_id", *keys.columns) if keys is not None else ()
        self._writer = TraceWriter(
            out, provenance={}, row_group_size=1 << 17, partition=partition, may_add=may_add
        )
        self._parts = _Parts(Path(parts_dir), part_every_s, may_add) if parts_dir is not None else None
        self._done = False

    def __enter__(self) -> StreamConverter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is not None or not self._done:
            self.abort()

    @property
    def messages(self) -> int:
        """Messages written so far."""
        return self._writer.rows

    @property
    def held(self) -> int:
        """Messages decoded but not written yet: not final while an open connection can
        still give an older one (its unfinished turn)."""
        return sum(len(h) for h, _ in self._held)

    def flush_parts_if_due(self) -> None:
        """Write the messages final so far as a part if one is due (``part_every_s``
        since the last): called while the input is quiet, as well as after each batch."""
        if self._parts is not None and not self._done:
            self._parts.flush_if_due()

    def add_source(self, src: PacketSource) -> None:
        """Read every batch of ``src`` (a file, a rotation of a recording) and its counters."""
        self.report.sources.append(src.name)
        for batch in src:
            self.add_batch(batch)
        _add_source_stats(self.report, src)

    def add_batch(self, batch: PacketBatch) -> None:
        """Decode one batch of packets, reassemble, and write the messages now final."""
        if self.on_read is not None:  # a record header and the bytes of each packet
            self.on_read(len(batch.ts_ns), int(batch.caplen.sum()) + 16 * len(batch.ts_ns))
        segs = self._decoder.decode(batch)
        self.report.decoded += len(segs)
        self._add_segments(segs)

    def _add_segments(self, segs: Segments, *, final: bool = False) -> None:
        """Reassemble decoded segments (``final``: the last, every connection ends) and
        write the messages now final."""
        if self._streams is not None:
            self._streams.see(segs)
        msgs = self._asm.feed(_shard_of(segs, self._shard), final=final, context=segs)
        points = self._points_of(msgs) if self._points_of is not None and len(msgs) else None
        self._emit(msgs, points, final=final)

    def _emit(self, msgs: Messages, points: np.ndarray | None, *, final: bool) -> None:
        if len(msgs):
            self._hold(msgs, points)
        wm = None if final else self._asm.watermark_ns
        if wm is None:
            ready, pts = _joined(self._held)
            self._held = []
        else:  # what no still-open connection can precede (the trace stays time-sorted)
            cuts = [int(np.searchsorted(h.ts_ns, wm, side="left")) for h, _ in self._held]
            ready, pts = _joined([_head(h, k) for h, k in zip(self._held, cuts, strict=True) if k])
            self._held = [_tail(h, k) for h, k in zip(self._held, cuts, strict=True) if k < len(h[0])]
        if len(ready) or (final and not self._writer.rows):  # an empty trace still has every column
            table = self._table(ready, pts)
            self._writer.write(table)
            if self._parts is not None:
                self._parts.add(table)
            if self.on_progress is not None:
                self.on_progress(self._writer.rows)
        if self._parts is not None and not final:
            self._parts.flush_if_due()

    def _table(self, msgs: Messages, points: np.ndarray | None) -> pa.Table:
        """The trace table of ``msgs``, with each one's point when there are several."""
        t = messages_table(
            msgs, self.namer, point=self.point, keep_payload=self.keep_payload, keys=self.keys,
            streams=self._streams,
        )  # fmt: skip
        if self._point_dict is None:
            return t
        idx = pa.array(points if points is not None else np.zeros(len(msgs), np.int64), pa.int32())
        col = pa.DictionaryArray.from_arrays(idx, self._point_dict).cast(NODE_TYPE)
        return t.set_column(t.schema.get_field_index("point"), "point", col)

    def _hold(self, msgs: Messages, points: np.ndarray | None) -> None:
        """Keep ``msgs`` (in time order) until the watermark passes them. Held runs are
        merged while the newest is at least half the size of the one before, so that
        while an open connection holds the watermark back each message is merged
        O(log n) times, not once per batch."""
        self._held.append((msgs, points))
        while len(self._held) > 1 and 2 * len(self._held[-1][0]) >= len(self._held[-2][0]):
            last = self._held.pop()
            self._held[-1] = _joined([self._held[-1], last])

    def finish(self, *, provenance: Mapping[str, Any] | None = None) -> CaptureReport:
        """Close every open connection, write the rest and publish the trace (and last part).

        ``provenance`` adds entries to the trace's provenance besides ``capture``.
        """
        self._add_segments(empty_segments(), final=True)
        report = self.report
        report.messages = self._writer.rows
        _add_decode_stats(report, self._decoder)
        _add_flow_stats(report, self._asm.stats)
        report.seconds = time.perf_counter() - self._t0
        prov = {"capture": _provenance(report), **(provenance or {})}
        self._writer.provenance = prov
        # The last part before the trace: once the trace is there, so is every part.
        if self._parts is not None:
            self._parts.close(prov)
        self._writer.close()
        self._done = True
        return report

    def abort(self) -> None:
        """Stop without publishing the trace: no partial file is left (parts already
        published stay)."""
        if self._done:
            return
        self._done = True
        self._writer.abort()
        if self._parts is not None:
            self._parts.abort()


class _Parts:
    """A directory of trace parts in time order, each one published whole."""

    def __init__(self, directory: Path, every_s: float, may_add: Sequence[str] = ()) -> None:
        self.may_add = may_add
        self.dir = directory
        self.every_s = every_s
        self.count = 0
        self._tables: list[pa.Table] = []
        self._last = time.monotonic()
        self._writer: TraceWriter | None = None
        old = sorted(directory.glob("part-*.parquet")) if directory.is_dir() else []
        if old:
            raise TraceFileError(
                f"{directory}: holds trace parts already ({old[0].name}); give a new directory"
            )
        make_dirs(directory)
        # Readers take every part in it: nobody else may add one, whatever the umask.
        directory.chmod(directory.stat().st_mode & ~0o022)

    def add(self, table: pa.Table) -> None:
        self._tables.append(table)

    def flush_if_due(self) -> None:
        if self._tables and time.monotonic() - self._last >= self.every_s:
            self._flush({"part": self.count})

    def _flush(self, provenance: Mapping[str, Any]) -> None:
        path = self.dir / f"part-{self.count:05d}.parquet"
        self._writer = TraceWriter(path, provenance=provenance, row_group_size=1 << 17, may_add=self.may_add)
        for t in self._tables:
            self._writer.write(t)
        self._writer.close()
        self._writer = None
        self._tables = []
        self.count += 1
        self._last = time.monotonic()

    def close(self, provenance: Mapping[str, Any]) -> None:
        """The last part (also when nothing at all was written: the dataset has its columns)."""
        if self._tables or not self.count:
            self._flush({**provenance, "part": self.count, "last": True})

    def abort(self) -> None:
        if self._writer is not None:
            self._writer.abort()
        self._tables = []


def _joined(runs: Sequence[tuple[Messages, np.ndarray | None]]) -> tuple[Messages, np.ndarray | None]:
    """Held runs as one, in trace order, with their points (None when they have none)."""
    runs = [r for r in runs if len(r[0])]
    if len(runs) <= 1:
        return runs[0] if runs else (Messages.concat([]), None)
    msgs = Messages.concat([m for m, _ in runs])
    if runs[0][1] is None:
        return msgs, None
    order = trace_order(np.concatenate([m.ts_ns for m, _ in runs]), np.concatenate([m.flow for m, _ in runs]))
    return msgs, np.concatenate([p for _, p in runs])[order]  # type: ignore[misc]


def _head(run: tuple[Messages, np.ndarray | None], k: int) -> tuple[Messages, np.ndarray | None]:
    return run[0].take(slice(0, k)), None if run[1] is None else run[1][:k]


def _tail(run: tuple[Messages, np.ndarray | None], k: int) -> tuple[Messages, np.ndarray | None]:
    return run[0].take(slice(k, None)), None if run[1] is None else run[1][k:]


def _shard_of(segs: Segments, shard: tuple[int, int] | None) -> Segments:
    """The segments of ``segs`` whose flow is in shard ``(k, n)`` (all without a shard)."""
    if shard is None:
        return segs
    return segs.take(np.flatnonzero(flow_shards(segs, shard[1]) == shard[0]))


def _convert_one(
    sources: Sequence[PacketSource],
    out: PathLike,
    namer: Namer,
    *,
    point: str | None,
    on_progress: Callable[[int], None] | None,
    keep_payload: bool = False,
    keys: KeyOptions | None = DEFAULT_KEYS,
    on_read: Callable[[int, int], None] | None = None,
    partition: Partitioning | None = None,
    shard: tuple[int, int] | None = None,
) -> CaptureReport:
    """``sources`` in order (rotations of one capture, or one point) into one trace."""
    with StreamConverter(
        out, namer=namer, point=point, keep_payload=keep_payload, keys=keys, on_progress=on_progress,
        on_read=on_read, partition=partition, shard=shard,
    ) as conv:  # fmt: skip
        for src in sources:
            conv.add_source(src)
        return conv.finish()


def _add_source_stats(report: CaptureReport, src: PacketSource) -> None:
    st = src.stats
    report.packets += st.packets
    report.bytes += st.bytes
    report.truncated += st.truncated_records
    report.malformed += st.corrupt_records
    report.drops += st.kernel_drops
    report.damage += [f"{src.name}: {d}" for d in st.damage]


def _add_flow_stats(report: CaptureReport, st: FlowStats | CaptureReport) -> None:
    """An assembler's counters (or those of a shard's report) added to the report's."""
    report.retransmitted += st.retransmitted
    report.after_close += st.after_close
    report.gaps += st.gaps
    report.out_of_order += st.out_of_order
    report.unparsed_bytes += st.unparsed_bytes
    report.with_trace_id += st.with_trace_id
    report.with_request_id += st.with_request_id
    report.keys_malformed += st.keys_malformed
    report.connections += st.connections
    for k, v in st.flows_by_proto.items():
        report.flows_by_proto[k] = report.flows_by_proto.get(k, 0) + v
    for k, v in st.messages_by_proto.items():
        report.messages_by_proto[k] = report.messages_by_proto.get(k, 0) + v


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
    keys: KeyOptions | None = DEFAULT_KEYS,
    dedup_window_ns: int = DEFAULT_DEDUP_WINDOW_NS,
    chunk_bytes: int = 8 << 20,
    on_progress: Callable[[int], None] | None = None,
    on_read: Callable[[int, int], None] | None = None,
    partition: Partitioning | str | None = None,
    runner: Runner | None = None,
    shards: int | None = None,
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
        estimated and applied, packets seen at several points kept once, ``point``
        tells where a message's first packet was seen.
    keep_payload : bool
        Also write each message's captured bytes in a user column ``x_payload`` (binary).
        Without it no payload byte reaches the trace.
    keys : KeyOptions, optional
        Which request keys HTTP/1.x and HTTP/2 messages give: ``trace_id``, ``span_id``,
        ``request_id`` and the headers kept (``capture.request_keys``; by default the
        trace-context headers and ``X-Request-ID``, ``X-Correlation-ID``, no header kept).
        None reads none. A column gets into the trace only if a message has a value in it.
    dedup_window_ns : int
        Largest time step (after offsets) between two points' sightings of one packet.
    chunk_bytes : int
        Bytes read per batch (memory use is a small multiple).
    on_progress : callable, optional
        Called with the messages written so far.
    on_read : callable, optional
        Called with the packets and about the bytes of the files read so far (their
        records), for a progress bar over the files' sizes.
    partition : Partitioning or str, optional
        Write ``out`` as a dataset directory of parts of this many messages or this time
        span (``"5M"``, ``"1h"``; ``tracefmt.TraceWriter``) instead of one file.
    runner : Runner, optional
        Where the work runs (``tracefmt.cluster.open_runner``): on a Dask cluster the
        flows are split among ``shards`` tasks, each reading and decoding every packet
        and reassembling its own flows; the trace is the one this process writes, row
        for row, and so are the counters. Every worker must reach the capture files and
        the output's directory (the shard files are written there) at the same paths: a
        shared file system when workers run on other machines. ``on_read`` is called
        once the files are read, ``on_progress`` while the shards are merged. Inputs
        that are open files or packet sources, not paths, are converted here.
    shards : int, optional
        Tasks the flows are split among (default: one per worker thread of ``runner``,
        at least 2). Given without a cluster, the shards run one after the other in this
        process: the same trace, more slowly (a check of the split).

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

    Split by flow, as on a cluster (here two shards, run in this process), of a
    capture without packets:

    >>> import struct
    >>> from tracefmt.cluster import open_runner
    >>> pcap = os.path.join(tempfile.mkdtemp(), "empty.pcap")
    >>> with open(pcap, "wb") as f:
    ...     _ = f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
    >>> with open_runner() as run:
    ...     convert_pcaps([pcap], out, runner=run, shards=2).messages
    0
    """
    if not paths:
        raise ParameterError("give at least one capture file")
    files = [p for p in paths if isinstance(p, str | os.PathLike)]
    names_file = names if isinstance(names, str | os.PathLike) else None
    distinct_outputs([*files, names_file], [out], what="an input")
    partition = Partitioning.of(partition)
    if partition is None:  # a dataset is a directory, named as one likes
        parquet_output(out)
    t0 = time.perf_counter()
    namer = Namer(names, node_by=node_by)
    sources = [_as_source(p, chunk_bytes) for p in paths]
    several = point_from_file and len(sources) > 1
    point = Path(sources[0].name).stem if point_from_file and not several else None
    nshards = _shard_count(paths, runner, shards)
    if nshards is not None:
        # Where the workers find each file (all are paths), and the name the report gives it.
        inputs = [(os.path.abspath(p), s.name) for p, s in zip(files, sources, strict=True)]
        run = runner if runner is not None else InProcess()
        if several:
            return _convert_points_sharded(
                inputs, out, namer, run, nshards, keep_payload=keep_payload, keys=keys,
                chunk_bytes=chunk_bytes, dedup_window_ns=dedup_window_ns, partition=partition,
                on_progress=on_progress, on_read=on_read, t0=t0,
            )  # fmt: skip
        return _convert_sharded(
            inputs, out, namer, run, nshards, point=point, keep_payload=keep_payload, keys=keys,
            chunk_bytes=chunk_bytes, partition=partition, on_progress=on_progress, on_read=on_read, t0=t0,
        )  # fmt: skip
    if several:
        return _convert_points_here(
            sources, out, namer, dedup_window_ns=dedup_window_ns, on_progress=on_progress, on_read=on_read,
            keep_payload=keep_payload, keys=keys, partition=partition, t0=t0,
        )  # fmt: skip
    report = _convert_one(
        sources, out, namer, point=point, on_progress=on_progress, on_read=_running(on_read),
        keep_payload=keep_payload, keys=keys, partition=partition,
    )  # fmt: skip
    report.seconds = time.perf_counter() - t0
    return report


def _convert_points_here(
    sources: Sequence[PacketSource],
    out: PathLike,
    namer: Namer,
    *,
    dedup_window_ns: int,
    on_progress: Callable[[int], None] | None,
    on_read: Callable[[int, int], None] | None,
    keep_payload: bool,
    keys: KeyOptions | None,
    partition: Partitioning | None,
    t0: float,
) -> CaptureReport:
    """Several capture points in this process: a first pass per point for the clock
    offsets, then the points' packets merged on one clock (:func:`_convert_points`)."""
    report = CaptureReport(output=str(out), sources=[s.name for s in sources])
    points = _point_names(report.sources)
    reader = _running(on_read)  # the first pass reads every file; the progress follows it
    with tempfile.TemporaryDirectory(prefix="wirepath-points-") as tmp:
        # First pass: each point on its own, for the messages the clock offsets come from.
        parts = []
        for i, src in enumerate(sources):
            part = Path(tmp) / f"point{i}.parquet"
            _convert_one([src], part, namer, point=points[i], on_progress=None, on_read=reader, keys=None)
            parts.append(part)
        offsets = _clock_offsets(parts, points, report)
    # Second pass: the points' packets merged on one clock, each packet kept once, and
    # the messages built once from that stream.
    for src in sources:
        f = getattr(src, "_source", None)
        if hasattr(f, "seekable") and f.seekable():  # type: ignore[union-attr]
            f.seek(0)  # type: ignore[union-attr]
    _convert_points(sources, points, offsets, out, namer, report, dedup_window_ns=dedup_window_ns,
                    on_progress=on_progress, t0=t0, keep_payload=keep_payload, keys=keys,
                    partition=partition)  # fmt: skip
    return report


def _point_names(sources: Sequence[str]) -> list[str]:
    """Each point's name: its file's name without the suffix."""
    return [Path(name).stem or f"point{i}" for i, name in enumerate(sources)]


def _clock_offsets(parts: Sequence[Path], points: Sequence[str], report: CaptureReport) -> list[int]:
    """Each point's clock offset from its first-pass trace (``parts``); noted in ``report.points``."""
    cols = ["timestamp", "sender", "receiver", "op", "id"]
    offsets = [0] * len(parts)
    # Each point is placed against all points placed before it (shifted by their
    # offsets), so a point that shares messages only with the second one still gets
    # its offset (a chain web -> app -> db).
    placed = [read_trace(parts[0], columns=cols)]
    report.points.append({"point": points[0], "offset_ns": 0, "matched": None})
    for i, part in enumerate(parts[1:], start=1):
        other = read_trace(part, columns=cols)
        off, matched = estimate_offset_ns(pa.concat_tables(placed, promote_options="permissive"), other)
        offsets[i] = off
        report.points.append({"point": points[i], "offset_ns": off, "matched": matched})
        ts = pa.array(other["timestamp"].cast(pa.int64()).to_numpy() + off, pa.int64()).cast(TS_TYPE)
        placed.append(other.set_column(0, "timestamp", ts))
    return offsets


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


# ---- several capture points: packet-level merge ------------------------------------------------
_K1 = np.uint64(0x9E3779B97F4A7C15)


def payload_hashes(segs: Segments) -> np.ndarray:
    """A 64-bit hash of each segment's captured payload bytes (and their count), vectorized.

    Payloads are copied into 8-byte-aligned slots, each word is mixed with its position
    in its payload, and the words of a payload are summed, so the cost is a few array
    operations over the payload bytes, with no Python work per packet.

    Examples
    --------
    >>> from capture.decode import Decoder
    >>> from capture.source import PacketBatch
    >>> import dpkt
    >>> def udp(data):
    ...     ip = dpkt.ip.IP(src=bytes([10, 0, 0, 1]), dst=bytes([10, 0, 0, 2]), p=17,
    ...                     data=dpkt.udp.UDP(sport=5000, dport=9, data=data))
    ...     ip.len = len(bytes(ip))
    ...     return (0, bytes(ip))
    >>> seg = Decoder().decode(PacketBatch.from_packets([udp(b"abc"), udp(b"abd"), udp(b"abc")], 101))
    >>> h = payload_hashes(seg)
    >>> bool(h[0] == h[2]), bool(h[0] == h[1])
    (True, False)
    """
    n = len(segs)
    cap = segs.pay_cap.astype(np.int64)
    out = np.zeros(n, np.uint64)
    total = int(cap.sum())
    if total:
        words = (cap + 7) // 8
        wstart = np.zeros(n, np.int64)
        np.cumsum(words[:-1], out=wstart[1:])
        bstart = np.zeros(n, np.int64)
        np.cumsum(cap[:-1], out=bstart[1:])
        within = np.arange(total) - np.repeat(bstart, cap)
        buf = np.zeros(int(words.sum()) * 8, np.uint8)
        buf[np.repeat(wstart * 8, cap) + within] = segs.data[np.repeat(segs.pay_off, cap) + within]
        w = buf.view(np.uint64)
        pos = (np.arange(len(w)) - np.repeat(wstart, words)).astype(np.uint64)
        h = mix64(w ^ mix64(pos + _K1))
        nz = words > 0
        out[nz] = np.add.reduceat(h, wstart[nz])
    return mix64(out ^ (cap.astype(np.uint64) * _K1))


def packet_keys(segs: Segments) -> np.ndarray:
    """One 64-bit key per segment: direction 5-tuple, seq, ack, flags, length and payload hash.

    Two sightings of one packet at two capture points have equal keys; a UDP datagram's
    key is its direction 5-tuple, length and payload hash (seq, ack and flags are 0).

    Examples
    --------
    >>> from capture.decode import empty_segments
    >>> packet_keys(empty_segments()).shape
    (0,)
    """
    u = np.uint64
    ports = (segs.sport.astype(u) << u(16)) | segs.dport.astype(u) | (segs.proto.astype(u) << u(32))
    k = mix64(segs.src_hi ^ mix64(segs.src_lo ^ mix64(segs.dst_hi ^ mix64(segs.dst_lo ^ mix64(ports)))))
    k = mix64(k ^ ((segs.seq.astype(u) << u(32)) | segs.ack.astype(u)))
    k = mix64(k ^ ((segs.flags.astype(u) << u(48)) | segs.pay_len.astype(u)))
    return mix64(k ^ payload_hashes(segs))


def cross_point_duplicates(
    key: np.ndarray, ts_ns: np.ndarray, point: np.ndarray, window_ns: int
) -> np.ndarray:
    """Which rows are another point's sighting of a packet kept from an earlier row.

    Rows are sorted by (key, time); a run of equal keys with no step longer than
    ``window_ns`` is one cluster. Within a cluster, each point's k-th sighting is taken
    to be the same transmission as every other point's k-th sighting, and only the
    earliest of those is kept. So a cluster keeps as many rows as the point that saw the
    packet most often: a retransmission seen at one point survives (reassembly counts it),
    and a point that missed the first copy does not cost the second one.

    Parameters
    ----------
    key, ts_ns, point : arrays of one length
        :func:`packet_keys`, timestamps (offsets applied) and capture point index.
    window_ns : int
        Largest time step between sightings of one packet.

    Returns
    -------
    numpy.ndarray of bool
        True for rows to drop.

    Examples
    --------
    >>> import numpy as np
    >>> key = np.array([7, 7, 7, 7, 9], np.uint64)
    >>> ts = np.array([0, 10, 5_000, 5_020, 3])
    >>> point = np.array([0, 1, 0, 1, 1])
    >>> cross_point_duplicates(key, ts, point, 100).tolist()
    [False, True, False, True, False]
    """
    n = len(key)
    if not n:
        return np.zeros(0, bool)
    o = np.lexsort((point, ts_ns, key))
    k, t, p = key[o], ts_ns[o], point[o]
    cl = np.cumsum(np.r_[True, (k[1:] != k[:-1]) | (np.diff(t) > window_ns)]) - 1
    o2 = np.lexsort((t, p, cl))
    grp = np.r_[True, (cl[o2][1:] != cl[o2][:-1]) | (p[o2][1:] != p[o2][:-1])]
    gs = np.flatnonzero(grp)
    rank = np.empty(n, np.int64)
    rank[o2] = np.arange(n) - np.repeat(gs, np.diff(np.r_[gs, n]))
    o3 = np.lexsort((p, t, rank, cl))
    first = np.r_[True, (cl[o3][1:] != cl[o3][:-1]) | (rank[o3][1:] != rank[o3][:-1])]
    dup_sorted = np.empty(n, bool)
    dup_sorted[o3] = ~first
    dup = np.empty(n, bool)
    dup[o] = dup_sorted
    return dup


def _where_key(ts: np.ndarray, src_hi: np.ndarray, src_lo: np.ndarray, sport: np.ndarray,
               dst_hi: np.ndarray, dst_lo: np.ndarray, dport: np.ndarray) -> np.ndarray:  # fmt: skip
    """Key of (time, sender, receiver): finds the packet a message starts with."""
    u = np.uint64
    ports = (sport.astype(u) << u(16)) | dport.astype(u)
    return mix64(ts.astype(u) ^ mix64(src_hi ^ mix64(src_lo ^ mix64(dst_hi ^ mix64(dst_lo ^ mix64(ports))))))


class _PointMerge:
    """The packets of several capture points on one clock (offsets applied), each packet
    kept once.

    Sources are read in step: the one whose clock is furthest behind is read next, and
    packets older than every source's latest minus the window are final, so memory is
    bounded by the window and a batch per source. Each round of final packets is
    deduplicated against the sightings of the window before it (``cross_point_duplicates``);
    a message's point is the one whose copy of its first packet was kept
    (:meth:`points_of`).
    """

    def __init__(self, sources: Sequence[PacketSource], offsets: Sequence[int], window_ns: int) -> None:
        n = len(sources)
        self.sources, self.offsets, self.window_ns = sources, offsets, window_ns
        self.decoders = [Decoder() for _ in sources]
        self.dups = [0] * n
        self.decoded = 0
        self._its = [iter(s) for s in sources]
        self._bufs = [empty_segments() for _ in sources]
        self._latest = [np.iinfo(np.int64).min] * n
        self._done = [False] * n
        # Recent sightings (packet key, time, point), for the next round's duplicates.
        self._seen = (np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros(0, np.int64))
        # Kept packets by where-key (time and endpoints), sorted: their point, their time.
        self._kept = (np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros(0, np.int64))

    def rounds(self) -> Iterator[Segments]:
        """The packets kept, round by round, in time order."""
        while True:
            self._read()
            final = all(self._done)
            taken = self._take(final)
            if taken is not None:
                yield self._deduplicate(*taken)
            if final:
                return

    def _read(self) -> None:
        """The next batch of the source furthest behind, decoded onto the common clock."""
        live = [i for i, d in enumerate(self._done) if not d]
        if not live:
            return
        i = min(live, key=lambda j: self._latest[j])
        batch = next(self._its[i], None)
        if batch is None:
            self._done[i] = True
            return
        segs = self.decoders[i].decode(batch)
        self.decoded += len(segs)
        if len(batch):
            self._latest[i] = max(self._latest[i], int(batch.ts_ns.max()) + self.offsets[i])
        if len(segs):
            segs = dataclasses.replace(segs, ts_ns=segs.ts_ns + self.offsets[i])
            self._bufs[i] = Segments.concat([self._bufs[i], segs])

    def _take(self, final: bool) -> tuple[Segments, np.ndarray] | None:
        """The packets now final (all when ``final``), in time order, with their points."""
        live = [j for j, d in enumerate(self._done) if not d]
        cut = None if final else min(self._latest[j] for j in live) - self.window_ns
        parts, pts = [], []
        for j, b in enumerate(self._bufs):
            take = np.ones(len(b), bool) if cut is None else b.ts_ns < cut
            if take.any():
                parts.append(b.take(np.flatnonzero(take)))
                pts.append(np.full(int(take.sum()), j, np.int64))
                self._bufs[j] = b.take(np.flatnonzero(~take))
        if not parts and not final:
            return None
        segs = Segments.concat(parts) if parts else empty_segments()
        pt = np.concatenate(pts) if pts else np.zeros(0, np.int64)
        order = np.argsort(segs.ts_ns, kind="stable")
        return segs.take(order), pt[order]

    def _deduplicate(self, segs: Segments, pt: np.ndarray) -> Segments:
        """``segs`` less the packets another point's copy of was kept (counted per point)."""
        key = packet_keys(segs)
        s_key, s_ts, s_pt = self._seen
        dup = cross_point_duplicates(
            np.r_[s_key, key], np.r_[s_ts, segs.ts_ns], np.r_[s_pt, pt], self.window_ns
        )[len(s_key) :]
        for j, c in enumerate(np.bincount(pt[dup], minlength=len(self.dups)).tolist()):
            self.dups[j] += c
        # Sightings within a window of the newest one decide about the next round's packets.
        horizon = int(segs.ts_ns.max()) - 2 * self.window_ns if len(segs) else 0
        recent, old = segs.ts_ns >= horizon, s_ts >= horizon
        self._seen = (np.r_[s_key[old], key[recent]], np.r_[s_ts[old], segs.ts_ns[recent]],
                      np.r_[s_pt[old], pt[recent]])  # fmt: skip
        kept = segs.take(np.flatnonzero(~dup))
        wk = _where_key(
            kept.ts_ns, kept.src_hi, kept.src_lo, kept.sport, kept.dst_hi, kept.dst_lo, kept.dport
        )
        k_key, k_pt, k_ts = self._kept
        k_key, k_pt, k_ts = np.r_[k_key, wk], np.r_[k_pt, pt[~dup]], np.r_[k_ts, kept.ts_ns]
        o = np.argsort(k_key, kind="stable")
        self._kept = (k_key[o], k_pt[o], k_ts[o])
        return kept

    def points_of(self, msgs: Messages) -> np.ndarray:
        """Each message's point: the one whose copy of its first packet was kept (0 if none)."""
        k_key, k_pt, _ = self._kept
        if not len(k_key):
            return np.zeros(len(msgs), np.int64)
        mk = _where_key(
            msgs.ts_ns, msgs.src_hi, msgs.src_lo, msgs.sport, msgs.dst_hi, msgs.dst_lo, msgs.dport
        )
        pos = np.minimum(np.searchsorted(k_key, mk), len(k_key) - 1)
        return np.where(k_key[pos] == mk, k_pt[pos], 0)

    def forget_before(self, watermark_ns: int | None) -> None:
        """Drop the kept packets older than ``watermark_ns`` (all when None): later
        messages start no earlier than the watermark."""
        k_key, k_pt, k_ts = self._kept
        keep = k_ts >= watermark_ns if watermark_ns is not None else np.zeros(len(k_ts), bool)
        self._kept = (k_key[keep], k_pt[keep], k_ts[keep])

    def add_stats(self, report: CaptureReport) -> None:
        """The readers', decoders' and duplicate counters into ``report``."""
        report.decoded += self.decoded
        for src in self.sources:
            _add_source_stats(report, src)
        for d in self.decoders:
            _add_decode_stats(report, d)
        report.duplicates_removed = sum(self.dups)
        for p, d, src in zip(report.points, self.dups, self.sources, strict=True):
            p["duplicates"] = d
            p["packets"] = src.stats.packets


def _convert_points(
    sources: Sequence[PacketSource],
    names: list[str],
    offsets: list[int],
    out: PathLike,
    namer: Namer,
    report: CaptureReport,
    *,
    dedup_window_ns: int,
    on_progress: Callable[[int], None] | None,
    t0: float,
    keep_payload: bool,
    keys: KeyOptions | None,
    partition: Partitioning | None = None,
    shard: tuple[int, int] | None = None,
) -> list[int]:
    """Merge the points' packets (offsets applied), drop cross-point duplicates, build
    messages once (:class:`_PointMerge`, then the one :class:`StreamConverter` path).

    Fills ``report`` (which names the points) and returns the duplicates removed per
    point. With ``shard`` (as ``StreamConverter``'s), every packet is read, merged and
    deduplicated (a packet's duplicates are in its flow, so this is the same in every
    shard) and only the shard's flows are reassembled.
    """
    merge = _PointMerge(sources, offsets, dedup_window_ns)
    with StreamConverter(
        out, namer=namer, keep_payload=keep_payload, keys=keys, on_progress=on_progress, partition=partition,
        shard=shard, point_names=names,
    ) as conv:  # fmt: skip
        conv.report, conv._t0 = report, t0  # the report of both passes, their time
        conv._points_of = merge.points_of
        for kept in merge.rounds():
            conv._add_segments(kept)
            merge.forget_before(conv._asm.watermark_ns)
        merge.add_stats(report)
        conv.finish()
    return merge.dups


# ---- on a cluster: the flows split among tasks -------------------------------------------------
# The counters an assembler keeps (``_add_flow_stats``): summed over the shards. The
# others (reader, decoder, duplicates) count every packet, which every shard reads:
# taken from the first shard. The messages are counted as the shards are merged.
_FLOW_COUNTERS = (
    "retransmitted", "after_close", "gaps", "out_of_order", "unparsed_bytes", "connections",
    "with_trace_id", "with_request_id", "keys_malformed",
)  # fmt: skip
_MERGE_ROWS = 1 << 16  # rows read from a shard file at a time while merging


def _shard_count(
    paths: Sequence[PathLike | IO[bytes] | PacketSource], runner: Runner | None, shards: int | None
) -> int | None:
    """How many shards the flows are split into; None: the conversion in this process."""
    if shards is not None and shards < 1:
        raise ParameterError(f"shards {shards}: must be at least 1")
    if shards is None and (runner is None or isinstance(runner, InProcess)):
        return None
    if not all(isinstance(p, str | os.PathLike) for p in paths):
        return None  # an open file or a source is read once, here
    # One shard per worker thread: every task reads and decodes every packet, so a shard
    # more than there are threads costs a read and decode more and balances little (the
    # flows hash evenly).
    return shards if shards is not None else max(2, runner.width)  # type: ignore[union-attr]


def _open_inputs(files: Sequence[tuple[str, str]], chunk_bytes: int) -> list[PacketSource]:
    """The capture files of a task, named as the caller named them (the report says so)."""
    sources = []
    for path, name in files:
        src = read_packets(path, chunk_bytes=chunk_bytes)
        src.name = name
        sources.append(src)
    return sources


@contextlib.contextmanager
def _shard_dir(out: PathLike) -> Iterator[Path]:
    """A temporary directory next to ``out`` for the tasks' files, removed after."""
    parent = Path(os.path.abspath(out)).parent
    try:
        make_dirs(parent)
        tmp = tempfile.TemporaryDirectory(prefix=f".{Path(out).name}.shards-", dir=parent)
    except OSError as exc:
        raise TraceFileError(f"{out}: cannot write the shard files next to it ({exc.strerror})") from None
    with tmp as d:
        yield Path(d)


@dataclass(frozen=True)
class _Job:
    """What every task of a conversion split by flow is given: one object, sent to each
    worker once (``Runner.map``'s common argument)."""

    files: tuple[tuple[str, str], ...]  # (path the workers open, name the report gives)
    shards: int
    chunk_bytes: int
    namer: Namer
    keep_payload: bool
    tmp: str  # the directory of the tasks' files
    point: str | None = None
    # Several capture points: their names, clock offsets and report entries.
    points: tuple[str, ...] = ()
    offsets: tuple[int, ...] = ()
    placed: tuple[dict[str, Any], ...] = ()
    dedup_window_ns: int = 0
    keys: KeyOptions | None = None

    def shard_file(self, k: int) -> Path:
        return Path(self.tmp) / f"shard-{k:05d}.parquet"

    def point_file(self, i: int) -> Path:
        return Path(self.tmp) / f"point-{i:05d}.parquet"


def _shard_task(k: int, *, job: _Job) -> CaptureReport:
    """Task ``k``: every file read and decoded, the flows of shard ``k`` to its shard file."""
    return _convert_one(
        _open_inputs(job.files, job.chunk_bytes), job.shard_file(k), job.namer, point=job.point,
        on_progress=None, keep_payload=job.keep_payload, keys=job.keys, shard=(k, job.shards),
    )  # fmt: skip


def _point_task(i: int, *, job: _Job) -> CaptureReport:
    """First pass of several points, task ``i``: point ``i`` on its own, to its point file."""
    return _convert_one(
        _open_inputs(job.files[i : i + 1], job.chunk_bytes), job.point_file(i), job.namer,
        point=job.points[i], on_progress=None, keys=None,
    )  # fmt: skip


def _points_shard_task(k: int, *, job: _Job) -> CaptureReport:
    """Second pass of several points, task ``k``: every point read, merged and
    deduplicated, the flows of shard ``k`` to its shard file."""
    sources = _open_inputs(job.files, job.chunk_bytes)
    report = CaptureReport(output="", sources=[s.name for s in sources], points=[dict(p) for p in job.placed])
    _convert_points(
        sources, list(job.points), list(job.offsets), job.shard_file(k), job.namer, report,
        dedup_window_ns=job.dedup_window_ns, on_progress=None, t0=time.perf_counter(),
        keep_payload=job.keep_payload, keys=job.keys, shard=(k, job.shards),
    )  # fmt: skip
    return report


def _merged_report(reports: Sequence[CaptureReport], out: PathLike) -> CaptureReport:
    """The shards' reports as one: assembler counters summed, the others the first shard's."""
    zero = dict.fromkeys(_FLOW_COUNTERS, 0)
    report = dataclasses.replace(reports[0], output=str(out), flows_by_proto={}, messages_by_proto={}, **zero)
    for r in reports:
        _add_flow_stats(report, r)
    return report


def _convert_sharded(
    files: list[tuple[str, str]],
    out: PathLike,
    namer: Namer,
    run: Runner,
    shards: int,
    *,
    point: str | None,
    keep_payload: bool,
    keys: KeyOptions | None,
    chunk_bytes: int,
    partition: Partitioning | None,
    on_progress: Callable[[int], None] | None,
    on_read: Callable[[int, int], None] | None,
    t0: float,
) -> CaptureReport:
    """One capture point (one file or the rotations of one capture) as ``shards`` tasks."""
    with _shard_dir(out) as tmp:
        job = _Job(tuple(files), shards, chunk_bytes, namer, keep_payload, str(tmp), point=point, keys=keys)
        report = _merged_report(run.map(_shard_task, list(range(shards)), job=job), out)
        if on_read is not None:  # as StreamConverter counts: a record header and the bytes
            on_read(report.packets, report.bytes + 16 * report.packets)
        _merge_shards(_shard_files(job), out, report, partition=partition, on_progress=on_progress)
    report.seconds = time.perf_counter() - t0
    return report


def _convert_points_sharded(
    files: list[tuple[str, str]],
    out: PathLike,
    namer: Namer,
    run: Runner,
    shards: int,
    *,
    keep_payload: bool,
    keys: KeyOptions | None,
    chunk_bytes: int,
    dedup_window_ns: int,
    partition: Partitioning | None,
    on_progress: Callable[[int], None] | None,
    on_read: Callable[[int, int], None] | None,
    t0: float,
) -> CaptureReport:
    """Several capture points: a first-pass task per point, then ``shards`` tasks."""
    points = tuple(_point_names([name for _, name in files]))
    with _shard_dir(out) as tmp:
        job = _Job(tuple(files), shards, chunk_bytes, namer, keep_payload, str(tmp), points=points, keys=keys,
                   dedup_window_ns=dedup_window_ns)  # fmt: skip
        first = run.map(_point_task, list(range(len(files))), job=job)
        if on_read is not None:
            packets = sum(r.packets for r in first)
            on_read(packets, sum(r.bytes for r in first) + 16 * packets)
        placed = CaptureReport(output=str(out), sources=[name for _, name in files])
        offsets = _clock_offsets([job.point_file(i) for i in range(len(files))], points, placed)
        job = dataclasses.replace(job, offsets=tuple(offsets), placed=tuple(placed.points))
        report = _merged_report(run.map(_points_shard_task, list(range(shards)), job=job), out)
        _merge_shards(_shard_files(job), out, report, partition=partition, on_progress=on_progress)
    report.seconds = time.perf_counter() - t0
    return report


def _shard_files(job: _Job) -> list[Path]:
    return [job.shard_file(k) for k in range(job.shards)]


class _ShardReader:
    """A shard trace read in slices, with the sort keys of the rows not yet merged."""

    def __init__(self, path: Path) -> None:
        self.file = pq.ParquetFile(path)
        self.schema = self.file.schema_arrow
        self._batches = self.file.iter_batches(batch_size=_MERGE_ROWS)
        self.table = self.schema.empty_table()
        self.ts = np.zeros(0, np.int64)
        self.flow = np.zeros(0, np.uint64)
        self.done = False

    def fill(self) -> None:
        """Read the next slice if every row read has been merged."""
        while not self.done and not self.table.num_rows:
            batch = next(self._batches, None)
            if batch is None:
                self.done = True
                self.file.close()
                return
            self.table = pa.Table.from_batches([batch])
            self.ts = self.table["timestamp"].cast(pa.int64()).to_numpy()
            self.flow = self.table["flow"].to_numpy()

    def last_key(self) -> tuple[int, int]:
        return int(self.ts[-1]), int(self.flow[-1])

    def take_upto(self, key: tuple[int, int] | None) -> pa.Table:
        """The rows up to ``key`` (time, flow) inclusive, all without one; they are a
        prefix, as a shard is in trace order."""
        n = len(self.ts)
        if key is not None:
            lo, hi = np.searchsorted(self.ts, key[0], "left"), np.searchsorted(self.ts, key[0], "right")
            n = int(lo + np.searchsorted(self.flow[lo:hi], np.uint64(key[1]), "right"))
        out = self.table.slice(0, n)
        self.table, self.ts, self.flow = self.table.slice(n), self.ts[n:], self.flow[n:]
        return out


def _merge_shards(
    parts: Sequence[Path],
    out: PathLike,
    report: CaptureReport,
    *,
    partition: Partitioning | None,
    on_progress: Callable[[int], None] | None,
) -> None:
    """The shard traces (each in trace order, no flow in two) into ``out`` in trace order.

    A k-way merge by slices: the rows up to the smallest last key among the shards'
    current slices are final (no shard can still give an earlier row, and rows with
    one key belong to one flow, so to one shard), sorted and written; memory holds a
    slice per shard. Sets ``report.messages`` and the trace's provenance.
    """
    readers = [_ShardReader(p) for p in parts]
    with TraceWriter(out, provenance={}, row_group_size=1 << 17, partition=partition) as writer:
        while True:
            for r in readers:
                r.fill()
            if all(r.done for r in readers):
                break
            bound = min(r.last_key() for r in readers if not r.done)
            taken = [t for t in (r.take_upto(bound) for r in readers) if t.num_rows]
            table = pa.concat_tables(taken).unify_dictionaries().combine_chunks()
            ts = table["timestamp"].cast(pa.int64()).to_numpy()
            writer.write(table.take(trace_order(ts, table["flow"].to_numpy())))
            if on_progress is not None:
                on_progress(writer.rows)
        if not writer.rows:  # an empty trace still has every column
            writer.write(readers[0].schema.empty_table())
        report.messages = writer.rows
        writer.provenance = {"capture": _provenance(report)}
